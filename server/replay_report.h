/* SPDX-License-Identifier: MIT */
/*
 * replay_report: what `divvyctl replay` counts (docs/replay.md "Report"):
 * per candidate rule the hits it decided, the verdicts that changed each
 * way, the distinct actors whose verdict changed (and the top ones), the
 * lock periods of lockout rules; the totals; the first mismatches.  The
 * replay engine (server/replay.c) feeds it one replayed decision at a time;
 * divvyctl prints it.  Memory is bounded: at most REPLAY_ACTORS_MAX actors
 * of REPLAY_ACTOR_BYTES in all and REPLAY_LOCKS_MAX lock periods are kept
 * over all rules (past that the report says it is capped).  No I/O, no globals, not thread-safe.
 */
#ifndef DIVVY_REPLAY_REPORT_H
#define DIVVY_REPLAY_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "rules.h"

#define REPLAY_ACTORS_MAX     (1u << 22)
#define REPLAY_ACTOR_BYTES    ((size_t)256 << 20)
#define REPLAY_LOCKS_MAX      (1u << 22)
#define REPLAY_MISMATCHES_MAX 20
#define REPLAY_TOP_MAX        10000

struct replay_lock {
    const char *actor;          /* the lockout rule's actor (owned by the report) */
    uint64_t start_ms;          /* Unix ms: the failure that locked */
    uint64_t end_ms;            /* Unix ms: when the lock ends (or a RESET ended it) */
};

struct replay_top {
    const char *actor;
    uint64_t changed;           /* decisions of this actor whose verdict changed */
};

/* One candidate rule's counts. */
struct replay_rule_stats {
    uint64_t hits;              /* TAKE (and HIT) decisions it decided */
    uint64_t allowed_to_denied; /* decisions it decided, allowed when recorded, now denied */
    uint64_t denied_to_allowed;
    uint64_t actors_affected;   /* distinct actors with a changed verdict */
    struct replay_lock *locks;  /* in time order */
    size_t n_locks, cap_locks;
};

/* A decision whose verdict changed. */
struct replay_mismatch {
    uint64_t unix_ms;
    uint64_t rule_before;       /* the recorded decider's id; 0: none */
    uint32_t rule_after;        /* the candidate's decider (a rule index) */
    bool allowed_before, allowed_after;
    unsigned n_kv;
    char *key[PROTO_KV_MAX];    /* owned */
    char *value[PROTO_KV_MAX];
};

struct replay_totals {
    uint64_t decisions;         /* read, within --since/--until */
    uint64_t replayed;
    uint64_t errors;            /* skipped: recorded as an error (no decision) */
    uint64_t reported_late;     /* skipped: arrived after the reorder window */
    uint64_t unreplayable;      /* skipped: the engine refused it (a key over 64 KiB, a
                                 * privileged table full, a DEBIT over max_debit, ...) */
    uint64_t same;
    uint64_t allowed_to_denied;
    uint64_t denied_to_allowed;
    uint64_t dropped;           /* decisions divvyd could not record (DLOG_GAP) */
    uint64_t corrupt_blocks;    /* blocks the reader skipped (DLOG_CORRUPT) */
    uint64_t corrupt_bytes;
};

struct replay_report;

/* A report for the @n_rules rules of a candidate; NULL: no memory. */
struct replay_report *replay_report_new(size_t n_rules);
void replay_report_free(struct replay_report *rp);

struct replay_totals *replay_report_totals(struct replay_report *rp);

/*
 * Counts one replayed decision decided by rule @rule (a candidate index)
 * for @actor (that rule's actor of the request, @actor_len bytes; NULL when
 * the verdict did not change: not needed): its verdicts before and after,
 * and whether it was a TAKE.  0 or -ENOMEM.  Past REPLAY_ACTORS_MAX the
 * actor is not kept (replay_report_capped()).
 */
int replay_report_decision(struct replay_report *rp, uint32_t rule, bool take,
                           bool allowed_before, bool allowed_after, const char *actor,
                           size_t actor_len);

/* A lock of lockout rule @rule's counter @actor from @start_ms to @end_ms. */
int replay_report_lock(struct replay_report *rp, uint32_t rule, const char *actor,
                       size_t actor_len, uint64_t start_ms, uint64_t end_ms);

/* A RESET of @actor's counter of lockout rule @rule at @now_ms: a lock
 * still running then ends there. */
int replay_report_unlock(struct replay_report *rp, uint32_t rule, const char *actor,
                         size_t actor_len, uint64_t now_ms);

/* Keeps a copy of a mismatch while fewer than REPLAY_MISMATCHES_MAX are kept. */
int replay_report_mismatch(struct replay_report *rp, uint64_t unix_ms, uint64_t rule_before,
                           uint32_t rule_after, bool allowed_before, bool allowed_after,
                           const struct proto_kv *kv, unsigned n_kv);

/* Rule @rule's counts (its locks in time order). */
const struct replay_rule_stats *replay_report_rule(const struct replay_report *rp,
                                                   uint32_t rule);

/* The @max actors of rule @rule with the most changed verdicts (ties: by
 * actor, bytewise), into a new array *@ret (free() it; its strings are the
 * report's) of *@ret_n entries.  0 or -ENOMEM. */
int replay_report_top(const struct replay_report *rp, uint32_t rule, size_t max,
                      struct replay_top **ret, size_t *ret_n);

const struct replay_mismatch *replay_report_mismatches(const struct replay_report *rp,
                                                       size_t *ret_n);

/* True when some actor or lock was not kept (the limits above). */
bool replay_report_capped(const struct replay_report *rp);

#endif
