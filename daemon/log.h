/* SPDX-License-Identifier: MIT */
/*
 * log: divvyd's only way to say something.  One line per event, to syslog
 * (LOG_DAEMON) or to stderr; on stderr under systemd (JOURNAL_STREAM set)
 * each line carries a "<N>" priority prefix journald understands, on a
 * terminal a plain "divvyd: " prefix.  log_ratelimited() keeps a flood of
 * identical errors (e.g. a full table under attack) to a few lines per
 * interval plus a count of what was suppressed.  Thread-safe.
 */
#ifndef DIVVY_LOG_H
#define DIVVY_LOG_H

#include <stdbool.h>
#include <syslog.h>

enum log_target { LOG_TARGET_STDERR = 0, LOG_TARGET_SYSLOG };

/* Chooses the target; call once before threads start. */
void log_init(enum log_target target, bool debug);

void log_msg(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Per call site state for log_ratelimited(); zero-initialise it (static). */
struct log_ratelimit {
    unsigned long window_start_s;
    unsigned burst;
    unsigned long suppressed;
};

/* Logs at most 5 lines per 10 s for this @rl, then one summary line with
 * how many were suppressed. */
void log_ratelimited(struct log_ratelimit *rl, int prio, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
