/* SPDX-License-Identifier: MIT */
/*
 * algo_gcra: the GCRA step (redis-cell's) and the continuously refilling
 * rule algorithms built on it: algorithm = "gcra" and a token_bucket with
 * refill = "continuous" are the same bucket (capacity credit_limit,
 * refill_amount credits accrue evenly over each refill_ms), and differ only
 * in what the reply's reset says (docs/rules.md "Algorithms").
 *
 * Time is counted in units of 1/refill_amount ms, so one credit costs
 * exactly refill_ms units and nothing is rounded: 3 per second is 333 1/3 ms
 * a credit, exact.  The slot keeps the theoretical arrival time (TAT, the
 * time the bucket is full again) as idle = ceil(TAT) in ms and data = how
 * many units TAT lies before idle (0 <= data < refill_amount), so idle <= now
 * means full, as for every algorithm (docs/dev/shm.md "Algorithm state").
 * Arithmetic in 128 bits: ms times refill_amount stays below 2^88.
 */
#include <errno.h>

#include "algo_gcra.h"

void algo_gcra_step(__int128 dvt, __int128 inc, __int128 now, __int128 *tat,
                    struct algo_gcra_step *ret)
{
    __int128 new_tat = (now > *tat ? now : *tat) + inc, diff = now - (new_tat - dvt);

    if (diff < 0) {
        ret->limited = true;
        ret->wait = inc <= dvt ? -diff : -1;
        ret->ttl = *tat - now;
        return;
    }
    ret->limited = false;
    ret->wait = 0;
    ret->ttl = new_tat - now;
    *tat = new_tat;
}

int algo_gcra_check(const struct table_limits *lim)
{
    unsigned __int128 span;

    if (!lim || lim->credit_limit == 0 || lim->credit_limit > ALGO_DATA_MAX ||
        lim->refill_amount == 0 || lim->refill_amount > ALGO_DATA_MAX || lim->refill_ms == 0 ||
        lim->refill_ms > ALGO_SPAN_MAX)
        return -EINVAL;         /* so n x refill_ms < 2^103 and credit_limit x refill_ms < 2^87 */
    span = (unsigned __int128)lim->credit_limit * lim->refill_ms;
    span = span / lim->refill_amount + (span % lim->refill_amount != 0);
    return span > ALGO_SPAN_MAX ? -EINVAL : 0;
}

/* The counter in units at @now (see the top): its TAT, never before now; a
 * TAT more than a full bucket ahead without the debt flag (a credit_limit
 * since lowered) is an empty bucket. */
static __int128 gcra_read(const struct table_limits *lim, __int128 now,
                          const struct algo_state *cur, uint64_t now_ms)
{
    __int128 amount = lim->refill_amount, dvt = (__int128)lim->credit_limit * lim->refill_ms;
    __int128 tat;
    uint64_t r;

    if (cur->idle <= now_ms)
        return now;
    r = cur->data < lim->refill_amount ? cur->data : lim->refill_amount - 1;
    tat = (__int128)cur->idle * amount - r;
    if (!cur->debt && tat - now > dvt)
        tat = now + dvt;
    return tat;
}

/* ceil(@u units) in ms, saturating at ALGO_IDLE_MAX. */
static uint64_t units_ms(const struct table_limits *lim, __int128 u)
{
    __int128 ms = u / lim->refill_amount + (u % lim->refill_amount != 0);

    return ms >= (__int128)ALGO_IDLE_MAX ? ALGO_IDLE_MAX : (uint64_t)ms;
}

bool algo_gcra_apply(const struct table_limits *lim, enum table_op op, uint64_t n,
                     uint64_t now_ms, const struct algo_state *cur,
                     struct algo_state *ret_state, struct table_result *ret)
{
    __int128 amount = lim->refill_amount, period = lim->refill_ms;
    __int128 dvt = (__int128)lim->credit_limit * period, now = (__int128)now_ms * amount;
    __int128 tat = gcra_read(lim, now, cur, now_ms), d, most, end;
    struct algo_gcra_step st;
    uint64_t idle;

    *ret_state = *cur;
    if (op == TABLE_TAKE) {
        algo_gcra_step(dvt, (__int128)n * period, now, &tat, &st);
        ret->allowed = !st.limited;
    } else if (op == TABLE_DEBIT) {
        /* Always charged: a debt, up to ALGO_DEBT_WINDOWS buckets more and
         * never past what the idle field holds. */
        most = (__int128)(ALGO_DEBT_WINDOWS + 1) * dvt;
        tat += (__int128)n * period;            /* < 2^64 x 2^39: no overflow */
        if (tat - now > most)
            tat = now + most;
        ret->allowed = tat - now <= dvt;
    } else {
        ret->allowed = tat - now + (__int128)n * period <= dvt;
    }
    if ((op == TABLE_TAKE && ret->allowed) || op == TABLE_DEBIT) {
        /* Times saturate where the idle field ends (ALGO_IDLE_MAX). */
        end = (__int128)ALGO_IDLE_MAX * amount;
        if (tat > end)
            tat = end;
        idle = units_ms(lim, tat);
        ret_state->idle = idle;
        ret_state->data = (uint64_t)((__int128)idle * amount - tat);
        ret_state->debt = tat - now > dvt;
    }
    d = tat - now;
    ret->credit = d >= dvt ? 0 : (uint64_t)((dvt - d) / period);
    if (d == 0)
        ret->reset_ms = 0;
    else if (lim->algo == RULES_ALGO_GCRA)
        ret->reset_ms = units_ms(lim, d);       /* redis-cell's reset_after: full again */
    else
        ret->reset_ms = units_ms(lim, d % period ? d % period : period);  /* the next credit */
    return ret_state->idle != cur->idle || ret_state->data != cur->data ||
           ret_state->debt != cur->debt;
}

uint64_t algo_gcra_retry_ms(const struct table_limits *lim, uint64_t now_ms,
                            const struct algo_state *cur)
{
    __int128 period = lim->refill_ms, dvt = (__int128)lim->credit_limit * period;
    __int128 now = (__int128)now_ms * lim->refill_amount;
    __int128 d = gcra_read(lim, now, cur, now_ms) - now;

    /* redis-cell's retry_after for a quantity of 1 */
    return d + period <= dvt ? 0 : units_ms(lim, d + period - dvt);
}
