/* SPDX-License-Identifier: MIT */
/*
 * adhoc: the buckets RESP clients name themselves (docs/resp.md "Ad-hoc
 * buckets"): Smyte's token buckets (RL.REDUCE, RL.GET) and redis-cell's GCRA
 * (CL.THROTTLE).  They live in a table of their own, in divvyd's memory,
 * sized by table.adhoc_slots and capped at table.adhoc_max_buckets occupied
 * slots, so however many keys clients invent they never take a slot of the
 * rule counters' tables, least of all the privileged one.  A bucket is
 * found by a keyed SipHash-128 of its key and parameters (a per-process
 * random secret: peers cannot aim collisions); one whose state has become
 * the same as no bucket at all (full again, GCRA's TAT passed) is reused.
 * The table is split in shards, each under its own mutex: thread-safe.
 * The algorithms themselves (adhoc_tb_step(), adhoc_gcra_step(), in
 * adhoc_algo.c) are pure.
 */
#ifndef DIVVY_ADHOC_H
#define DIVVY_ADHOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ADHOC_SLOTS_DEFAULT   65536
#define ADHOC_PROBE           32        /* slots one key may occupy away from its home */

struct adhoc;

/* ---- Smyte's token bucket (RL.REDUCE, RL.GET) --------------------------------------- */

struct adhoc_tb {
    int64_t max;                /* tokens the bucket holds, >= 1 */
    int64_t refill;             /* tokens added each refill, >= 1 */
    int64_t refill_ms;          /* time between refills, >= 1 */
    int64_t take;               /* tokens to take; 0: only look (RL.GET) */
    bool strict;                /* an empty bucket restarts its refill clock */
};

/* A bucket's state: tokens and when they were last refilled. */
struct adhoc_tb_state {
    int64_t amount;
    int64_t refilled_ms;
};

/*
 * One call at @now_ms on the bucket whose state is *@st (@exists false: a
 * new bucket, full).  Returns the tokens the bucket held before this call,
 * after its pending refills; it takes @p->take only when that is enough
 * (the call is allowed iff the return value >= take).  *@st becomes the new
 * state; *ret_idle_ms when the bucket will be full again.  Pure.
 */
int64_t adhoc_tb_step(const struct adhoc_tb *p, bool exists, int64_t now_ms,
                      struct adhoc_tb_state *st, int64_t *ret_idle_ms);

/* ---- redis-cell's GCRA (CL.THROTTLE) ---------------------------------------------- */

struct adhoc_gcra {
    int64_t max_burst;          /* >= 0 */
    int64_t count;              /* per period, >= 1 */
    int64_t period_s;           /* >= 1 */
    int64_t quantity;           /* >= 0; 0 only looks */
};

/* CL.THROTTLE's reply: retry_after_ms and reset_after_ms, redis-cell's
 * durations, are replied in whole seconds (truncated); -1000 is "-1". */
struct adhoc_gcra_result {
    bool limited;
    int64_t limit;
    int64_t remaining;
    int64_t retry_after_ns;     /* -1 s when not limited */
    int64_t reset_after_ns;
};

/* -ERANGE when @p's durations overflow 64-bit nanoseconds. */
int adhoc_gcra_check(const struct adhoc_gcra *p);

/*
 * One call at @now_ns on the key whose theoretical arrival time is *@tat_ns
 * (@exists false: none).  Updates *@tat_ns when the call is allowed (and
 * quantity > 0); *ret_idle_ms is when the key is the same as absent again.
 * Redis-cell's arithmetic, to the nanosecond of @now_ns.  Pure; @p checked
 * by adhoc_gcra_check().
 */
void adhoc_gcra_step(const struct adhoc_gcra *p, bool exists, int64_t now_ns, int64_t *tat_ns,
                     struct adhoc_gcra_result *ret, int64_t *ret_idle_ms);

/* ---- the table ------------------------------------------------------------------------- */

/* A table of @slots buckets (rounded to the shards), at most @max_buckets
 * of them occupied (0: 7/8 of @slots).  -ENOMEM, -EINVAL (no slots). */
int adhoc_new(uint32_t slots, uint32_t max_buckets, struct adhoc **ret);
void adhoc_free(struct adhoc *a);

/*
 * RL.REDUCE / RL.GET on bucket @key (@len bytes) with @p at @now_ms (the
 * client's AT, or the clock): the return value of adhoc_tb_step() into
 * *ret_before.  -ENOSPC: the table is full (no free slot near the key's
 * home, or adhoc_max_buckets reached) and nothing was counted.
 */
int adhoc_tb(struct adhoc *a, const char *key, size_t len, const struct adhoc_tb *p,
             int64_t now_ms, uint64_t clock_ms, int64_t *ret_before);

/* CL.THROTTLE on @key with @p at @now_ns; -ENOSPC as adhoc_tb(). */
int adhoc_gcra(struct adhoc *a, const char *key, size_t len, const struct adhoc_gcra *p,
               int64_t now_ns, struct adhoc_gcra_result *ret);

/* Occupied slots and capacity, for STATS. */
void adhoc_usage(struct adhoc *a, uint64_t *ret_used, uint64_t *ret_slots);

#endif
