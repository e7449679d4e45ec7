/* SPDX-License-Identifier: MIT */
/*
 * algo_gcra: the generic cell rate algorithm, once.  algo_gcra_step() is
 * redis-cell's GCRA step in any unit of time; two callers share it:
 * CL.THROTTLE's ad-hoc buckets (daemon/adhoc_algo.c, nanoseconds, as
 * redis-cell counts) and the rule algorithms that refill continuously
 * (algorithm = "gcra" and a token_bucket with refill = "continuous"),
 * algo_gcra_apply() on a counter slot's packed state (docs/dev/shm.md
 * "Algorithm state": idle = the time the bucket is full again, data = the
 * fraction of a millisecond it lies before that).  Pure, thread-safe.
 */
#ifndef DIVVY_ALGO_GCRA_H
#define DIVVY_ALGO_GCRA_H

#include <stdbool.h>
#include <stdint.h>

#include "algo.h"

/* One step's answer, in the caller's unit of time. */
struct algo_gcra_step {
    bool limited;               /* the call was refused; the TAT did not move */
    __int128 ttl;               /* the TAT (after the call) minus now: until full again
                                 * (redis-cell's reset_after; negative for a stale TAT) */
    __int128 wait;              /* limited: until this call would be allowed (retry_after);
                                 * -1 when it never would (@inc > @dvt); 0 when allowed */
};

/*
 * Redis-cell's GCRA: a call costing @inc at @now on the key whose
 * theoretical arrival time is *@tat (the caller passes @now for a key that
 * does not exist) is allowed when max(now, tat) + inc - dvt <= now; then
 * *@tat becomes max(now, tat) + inc.  @dvt is the delay variation tolerance
 * (the emission interval times the limit), @inc the interval times the
 * quantity; all >= 0 and small enough that their sums fit (callers check).
 */
void algo_gcra_step(__int128 dvt, __int128 inc, __int128 now, __int128 *tat,
                    struct algo_gcra_step *ret);

/* algo_check() for the continuous algorithms: credit_limit, refill_amount in
 * [1, ALGO_DATA_MAX], refill_ms in [1, ALGO_SPAN_MAX], credit_limit * refill_ms / refill_amount
 * (a full refill) at most ALGO_SPAN_MAX.  0 or -EINVAL. */
int algo_gcra_check(const struct table_limits *lim);

/* algo_apply() and algo_retry_ms() for lim->algo == RULES_ALGO_GCRA or a
 * continuous token bucket (lim->continuous); the same contract. */
bool algo_gcra_apply(const struct table_limits *lim, enum table_op op, uint64_t n,
                     uint64_t now_ms, const struct algo_state *cur,
                     struct algo_state *ret_state, struct table_result *ret);
uint64_t algo_gcra_retry_ms(const struct table_limits *lim, uint64_t now_ms,
                            const struct algo_state *cur);

#endif
