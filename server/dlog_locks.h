/* SPDX-License-Identifier: MIT */
/*
 * dlog_locks: lock periods of lockout rules (docs/rules.md "Lockout")
 * derived from a decision log, for `divvyctl log --locks`: per (rule,
 * actor) when a lock started, when and how it ended (expired, or unlocked
 * by a RESET and by whom), and the failures behind it.  Fed decisions in
 * log order; memory bounded (DLOG_LOCKS_* below: past them actors are not
 * followed and dlog_locks_dropped() says how many were not).  No I/O, no
 * globals; one object per reader.  The rules of derivation are in
 * docs/decision-log.md "Lock periods".
 */
#ifndef DIVVY_DLOG_LOCKS_H
#define DIVVY_DLOG_LOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlog.h"
#include "dlog_query.h"

#define DLOG_LOCKS_ACTORS_MAX   (1u << 18)      /* (rule, actor) pairs followed at once */
#define DLOG_LOCKS_PERIODS_MAX  (1u << 18)      /* lock periods kept */
#define DLOG_LOCKS_BYTES_MAX    (64u << 20)     /* bytes of actor strings kept */
#define DLOG_LOCKS_SLACK_MS     1000            /* a decision's reset is rounded to seconds */
#define DLOG_LOCKS_REORDER_MS   120000          /* answers are put in time order within this
                                                 * (> decision_log.flush_ms's 60 s maximum) */
#define DLOG_LOCKS_PENDING_MAX  (1u << 20)      /* answers waiting to be put in order */

enum dlog_locks_end {
    DLOG_LOCKS_EXPIRED = 0,     /* ran its length */
    DLOG_LOCKS_UNLOCKED,        /* a RESET forgot the counter before (unlocked_by_uid: whose;
                                 * DLOG_UNKNOWN_ID: cleared where this log does not show) */
    DLOG_LOCKS_OPEN,            /* not over by the log's last decision */
};

struct dlog_locks_period {
    uint64_t rule_id;
    const char *actor;          /* NUL-terminated; owned by the dlog_locks */
    uint64_t start_ms;          /* unix ms */
    uint64_t end_ms;            /* when it ended; OPEN: when it will unless unlocked */
    uint64_t failures;          /* failures (TAKE n) counted into the lock, refused ones during
                                 * it included */
    uint64_t refusals;          /* requests refused because of it (TAKE and PEEK) */
    enum dlog_locks_end ended;
    bool from_failure;          /* the locking failure is in the log; false: first seen
                                 * refusing (locked elsewhere, or before the log began) */
    uint32_t unlocked_by_uid;   /* UNLOCKED: the RESET's uid, else DLOG_UNKNOWN_ID */
    uint32_t unlocked_by_pid;
};

struct dlog_locks;

/* Follows only rule @rule (an id_str or 16 hex digits; NULL: every lockout
 * rule) and actor @actor (NULL: all).  Both borrowed for its lifetime.
 * NULL: no memory. */
struct dlog_locks *dlog_locks_new(const char *rule, const char *actor);
void dlog_locks_free(struct dlog_locks *l);

/* Takes decision @d (in log order: answers within DLOG_LOCKS_REORDER_MS of
 * the latest are put in time order) into account, with the rules @m knows:
 * 0 or -ENOMEM. */
int dlog_locks_decision(struct dlog_locks *l, const struct dlog_query_rules *m,
                        const struct dlog_decision *d);

/* Ends the reading at @last_ms (the last decision's time): locks that end
 * by then expired, the others are open.  Sorts the periods by start (then
 * rule, actor) and returns them in *ret and their count.  Call once, last. */
size_t dlog_locks_finish(struct dlog_locks *l, uint64_t last_ms,
                         const struct dlog_locks_period **ret);

/* Lockout answers not followed for lack of room (the limits above). */
uint64_t dlog_locks_dropped(const struct dlog_locks *l);

/* "expired", "unlocked", "open". */
const char *dlog_locks_end_name(enum dlog_locks_end e);

#endif
