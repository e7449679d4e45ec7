/* SPDX-License-Identifier: MIT */
/*
 * replay: `divvyctl replay`'s engine (docs/replay.md, DESIGN §13).  Loads a
 * candidate config with divvyd's own loader and compiler, makes in-memory
 * counter tables as the candidate sizes them, reads decision logs
 * (server/dlog.h) and runs every recorded decision through common/eval's
 * eval_request(), the daemon's own engine, on a virtual clock: the
 * recorded CLOCK_MONOTONIC time of each decision (aligned across daemon
 * runs and hosts by the recorded wall clock), in time order through a
 * bounded reorder window (server/replay_order.h), never sleeping.  Rules
 * kept in Redis (store lease or strict) count on the local table with the
 * same algorithm: one host's logs replay exactly; several hosts' logs
 * replay as one counter shared by all of them.  The counts go to a
 * struct replay_report (server/replay_report.h).  Never logs; one object
 * per replay, not thread-safe.
 */
#ifndef DIVVY_REPLAY_H
#define DIVVY_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "diag.h"
#include "dlog.h"
#include "replay_report.h"
#include "rules.h"

#define REPLAY_WINDOW_DEFAULT_MS 10000      /* the reorder window */
#define REPLAY_WINDOW_MAX_MS     3600000
#define REPLAY_HELD_BYTES        ((size_t)256 << 20)    /* the window's records at most */
#define REPLAY_FILES_MAX         100000     /* log files one replay reads */
#define REPLAY_HOSTS_MAX         64         /* hosts (each has a reader open) */
/* The wall clock jumping by more than this against a host's monotonic clock
 * starts a new run of that host's clock (divvyd's host rebooted). */
#define REPLAY_EPOCH_MS          60000

struct replay_opts {
    uint64_t since_ms;          /* Unix ms: decisions at or after it; 0: from the start */
    uint64_t until_ms;          /* decisions before it; 0: to the end */
    uint64_t window_ms;         /* the reorder window */
    size_t max_bytes;           /* the window's memory; 0: REPLAY_HELD_BYTES */
};

struct replay;

/*
 * Loads and compiles the candidate config @path (server/config.h: the
 * format follows the name) and makes its tables.  On success *ret is a new
 * replay (replay_free()).  -EINVAL with the problems in @reterr,
 * -ENOENT/-EACCES/... (cannot read it), -ENOMEM, or a table's -errno.
 */
int replay_new(const char *path, const struct replay_opts *opts, struct replay **ret,
               struct diag *reterr);

/* A replay of compiled @rules (taken over: freed with the replay) with
 * tables of @slots counters each and a full table that denies (tests). */
int replay_new_rules(struct rules *rules, uint32_t slots, const struct replay_opts *opts,
                     struct replay **ret);

void replay_free(struct replay *rp);

/*
 * Adds the log @path: a file, or a directory whose *.dlog files are all
 * added.  Each file's header is checked here.  0; -ENOENT, -EACCES, ...;
 * -EBADMSG (not a decision log or an unknown version); -EINVAL (not a
 * regular file: a FIFO or a device would block or never end); -E2BIG past
 * REPLAY_FILES_MAX; -ENODATA (a directory without log files).  *@ret_file (may be NULL) points at the file that failed.
 */
int replay_add_path(struct replay *rp, const char *path, const char **ret_file);

/*
 * Reads every added file and replays their decisions.  Files of one host
 * (their header's) are read one after another in the order they were
 * started; hosts are merged by time.  0, or -errno of a failed read (the
 * file in *@ret_file), -EMLINK (the files name more than REPLAY_HOSTS_MAX
 * hosts) or -ENOMEM.
 */
int replay_run(struct replay *rp, const char **ret_file);

/* ---- a lower entry, for tests: decisions fed one at a time ----------------------------- */

/* Feeds decision @d of host stream @stream (< REPLAY_HOSTS_MAX) as read
 * from a log (its DLOG_F_ERROR, --since/--until and the window applied).
 * 0 or -ENOMEM. */
int replay_feed(struct replay *rp, unsigned stream, const struct dlog_decision *d);

/* The input ended: replays what the window still holds.  0 or -ENOMEM. */
int replay_finish(struct replay *rp);

/* ---- results ------------------------------------------------------------------------- */

struct replay_report *replay_report_of(const struct replay *rp);
const struct rules *replay_rules(const struct replay *rp);

/* How the log names rule @id (its DLOG_RULES id_str, else 16 hex digits; ""
 * for 0) into @buf (>= 17 bytes); returns @buf or the kept name. */
const char *replay_rule_name(const struct replay *rp, uint64_t id, char *buf, size_t size);

#endif
