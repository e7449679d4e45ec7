/* SPDX-License-Identifier: MIT */
/*
 * adhoc_algo: the algorithms of the ad-hoc buckets (see adhoc.h), pure:
 * Smyte's token bucket (adhoc_tb_step()) and redis-cell's GCRA
 * (adhoc_gcra_check(), adhoc_gcra_step(): common/algo_gcra.c's step, in
 * nanoseconds), and the rules of their Unix clock (adhoc_at_check(),
 * adhoc_expire_ms()).  No state, no lock; the
 * table that keeps their states is adhoc.c, the Redis scripts that keep
 * them in Redis daemon/store_script.c.
 */
#include <errno.h>

#include "adhoc.h"
#include "algo_gcra.h"

#define NS_PER_MS      1000000LL
#define NS_PER_S       1000000000LL

int64_t adhoc_tb_step(const struct adhoc_tb *p, bool exists, int64_t now_ms,
                      struct adhoc_tb_state *st, int64_t *ret_idle_ms)
{
    int64_t before, refills, left, need;

    if (!exists) {
        before = p->max;
        st->refilled_ms = now_ms;
    } else {
        int64_t span = now_ms > st->refilled_ms ? now_ms - st->refilled_ms : 0;

        refills = span / p->refill_ms;
        st->refilled_ms += refills * p->refill_ms;
        /* min(max, amount + refills * refill) without overflow */
        left = p->max - st->amount;
        before = left <= 0 || refills >= (left + p->refill - 1) / p->refill
                     ? p->max
                     : st->amount + refills * p->refill;
        /* A full bucket is no bucket: its clock starts again at this call,
         * so one kept past the moment it filled and one forgotten then
         * (adhoc_expire_ms(), a key's TTL in Redis) are the same state. */
        if (before == p->max)
            st->refilled_ms = now_ms;
    }
    st->amount = before;
    /* Check and take: a call that asks for more than is left takes nothing. */
    if (p->take > 0 && before >= p->take)
        st->amount = before - p->take;
    if (p->take > 0 && p->strict && st->amount == 0)
        st->refilled_ms = now_ms;
    /* When it is full again; never, as far as 64 bits can tell, past that. */
    need = (p->max - st->amount + p->refill - 1) / p->refill;
    if (__builtin_mul_overflow(need, p->refill_ms, &need) ||
        __builtin_add_overflow(st->refilled_ms, need, ret_idle_ms))
        *ret_idle_ms = INT64_MAX;
    return before;
}

int adhoc_at_check(int64_t at_ms, int64_t now_ms)
{
    return at_ms < 0 || at_ms - now_ms > ADHOC_AT_AHEAD_MS ? -ERANGE : 0;
}

int64_t adhoc_expire_ms(int64_t idle_ms, int64_t at_ms, int64_t now_ms)
{
    int64_t behind = now_ms > at_ms ? now_ms - at_ms : 0, at;

    return __builtin_add_overflow(idle_ms, behind, &at) ? INT64_MAX : at;
}

/* Redis-cell's Rate::per_period(): the period over count, in floating point. */
static int64_t gcra_interval(const struct adhoc_gcra *p)
{
    return (int64_t)((double)(p->period_s * NS_PER_S) / (double)p->count);
}

int adhoc_gcra_check(const struct adhoc_gcra *p)
{
    int64_t t, dvt, inc;

    if (p->max_burst < 0 || p->count < 1 || p->period_s < 1 || p->quantity < 0 ||
        p->period_s > INT64_MAX / NS_PER_S / 4)
        return -ERANGE;
    t = gcra_interval(p);
    if (t < 1 || __builtin_mul_overflow(t, p->max_burst + 1, &dvt) ||
        __builtin_mul_overflow(t, p->quantity, &inc) || dvt > INT64_MAX / 4 ||
        inc > INT64_MAX / 4)
        return -ERANGE;
    return 0;
}

void adhoc_gcra_step(const struct adhoc_gcra *p, bool exists, int64_t now_ns, int64_t *tat_ns,
                     struct adhoc_gcra_result *ret, int64_t *ret_idle_ms)
{
    int64_t t = gcra_interval(p), dvt = t * (p->max_burst + 1), inc = t * p->quantity;
    int64_t tat, next;
    __int128 tat128 = exists ? *tat_ns : now_ns;
    struct algo_gcra_step st;

    /* The one GCRA (common/algo_gcra.c); adhoc_gcra_check() keeps every
     * sum within 64 bits. */
    algo_gcra_step(dvt, inc, now_ns, &tat128, &st);
    tat = (int64_t)tat128;
    ret->limit = p->max_burst + 1;
    ret->remaining = 0;
    ret->limited = st.limited;
    ret->retry_after_ns = st.limited && st.wait >= 0 ? (int64_t)st.wait : -NS_PER_S;
    next = dvt - (int64_t)st.ttl;
    /* Redis-cell divides whole microseconds in floating point. */
    if (next > -t)
        ret->remaining = (int64_t)((double)(next / 1000) / (double)(t / 1000 ? t / 1000 : 1));
    ret->reset_after_ns = (int64_t)st.ttl;
    *tat_ns = tat;
    *ret_idle_ms = tat / NS_PER_MS + (tat % NS_PER_MS != 0);
}

/* adhoc_key_expire_ms()'s @ttl_ms from @now_ms plus the slack, capped as
 * the scripts cap a TTL (2^40 ms) and saturating. */
static int64_t key_expire(int64_t ttl_ms, int64_t now_ms)
{
    int64_t at;

    if (ttl_ms > ADHOC_KEY_TTL_MAX_MS)
        ttl_ms = ADHOC_KEY_TTL_MAX_MS;
    return __builtin_add_overflow(now_ms, ttl_ms + ADHOC_KEY_SLACK_MS, &at) ? INT64_MAX : at;
}

int64_t adhoc_tb_key_expire_ms(const struct adhoc_tb *p, int64_t at_ms, int64_t now_ms)
{
    int64_t fills = (p->max + p->refill - 1) / p->refill, full, behind;

    /* The script's TTL is last + the refills the taken tokens need - the
     * call's time: at most the refills of an empty bucket (amount >= 0),
     * plus how far an AT lies in the past, plus how far the bucket's last
     * refill may lie ahead (an AT, at most ADHOC_AT_AHEAD_MS: the slack). */
    if (__builtin_mul_overflow(fills, p->refill_ms, &full))
        full = INT64_MAX;
    behind = at_ms >= 0 && at_ms < now_ms ? now_ms - at_ms : 0;
    if (__builtin_add_overflow(full, behind, &full))
        full = INT64_MAX;
    return key_expire(full, now_ms);
}

int64_t adhoc_gcra_key_expire_ms(const struct adhoc_gcra *p, int64_t now_ms)
{
    int64_t dvt = gcra_interval(p) * (p->max_burst + 1);

    /* The script expires a key at its TAT, at most dvt ahead of now. */
    return key_expire(dvt / NS_PER_MS + 1, now_ms);
}
