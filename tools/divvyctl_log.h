/* SPDX-License-Identifier: MIT */
/*
 * divvyctl log: what its two files share.  divvyctl_log.c reads the files
 * (options, paths, the reading loop, exit status); divvyctl_log_fmt.c
 * prints decisions, gaps and lock periods as text or JSON lines
 * (docs/decision-log.md "divvyctl log").
 */
#ifndef DIVVY_DIVVYCTL_LOG_H
#define DIVVY_DIVVYCTL_LOG_H

#include <stdint.h>
#include <stdio.h>

#include "dlog.h"
#include "dlog_locks.h"
#include "dlog_query.h"

/* Writes @s[0..@len) to @f as one word of a text line: as it is when it is
 * printable ASCII without '"', '\\' or a space, else in double quotes with
 * \", \\ and \xNN escapes, so no log value can forge a line, a field or a
 * terminal escape. */
void log_put_word(FILE *f, const char *s, size_t len);

/* One decision as a text line or a JSON line on stdout: 0, or -errno
 * (-ENOMEM; a write error). */
int log_print_decision(const struct dlog_query_rules *m, const struct dlog_decision *d,
                       bool json);
/* A gap (decisions divvyd could not record), in its place. */
int log_print_gap(const struct dlog_gap *g, bool json);
/* Lock periods, one per line. */
int log_print_locks(const struct dlog_query_rules *m, const struct dlog_locks_period *p,
                    size_t n, uint64_t since_ms, uint64_t until_ms, bool json);

#endif
