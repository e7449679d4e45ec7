/* SPDX-License-Identifier: MIT */
/*
 * algo_lock: the lockout algorithm on a slot's packed state (docs/dev/shm.md "Lockout state"):
 *
 *   data bits 0..5    level: locks remembered (0..ALGO_LOCK_LEVEL_MAX)
 *   data bits 6..15   failures counted in the running interval (0..ALGO_LOCK_COUNT_MAX)
 *   data bits 16..47  the last failure, in ms before the interval's end
 *   flag (the slot's debt flag)  locked
 *   idle              the phase's end (the lock's, or the counting interval's), plus
 *                     remember_ms while the level is above 0
 *
 * So the phase's end is idle - (level ? remember_ms : 0), exact, and idle <= now still means
 * "nothing to remember" to the table (a reclaimable slot).  The level is forgotten remember_ms
 * after the end of the last lock or of the last counting interval: each new interval renews it.
 * Pure functions; times saturate at ALGO_IDLE_MAX (validation keeps every sum well below it).
 */
#include <errno.h>

#include "algo_lock.h"

#define LOCK_LEVEL_BITS  6
#define LOCK_COUNT_SHIFT 6
#define LOCK_COUNT_MASK  ((uint64_t)ALGO_LOCK_COUNT_MAX)
#define LOCK_LAST_SHIFT  16

/* A lockout counter decoded at a time. */
struct lock_now {
    uint64_t level;
    uint64_t count;             /* failures in the running interval (0: none runs) */
    uint64_t end;               /* locked: the lock's end; count > 0: the interval's end */
    uint64_t last;              /* count > 0: the last failure */
    bool locked;
};

static uint64_t lock_add(uint64_t a, uint64_t b)
{
    if (a >= ALGO_IDLE_MAX || b >= ALGO_IDLE_MAX - a)
        return ALGO_IDLE_MAX;
    return a + b;
}

/* min(base * factor^k, most), without overflow. */
static uint64_t lock_ramp(uint64_t base, uint64_t factor, uint64_t k, uint64_t most)
{
    uint64_t v = base;

    for (uint64_t i = 0; i < k && v < most && factor > 1; i++)
        v = v > most / factor ? most : v * factor;
    return v < most ? v : most;
}

int algo_lock_check(const struct table_limits *lim)
{
    if (!lim || lim->algo != RULES_ALGO_LOCKOUT || lim->credit_limit == 0 ||
        lim->credit_limit > ALGO_LOCK_COUNT_MAX || lim->reset_ms == 0 ||
        lim->reset_ms > ALGO_LOCK_INTERVAL_MAX || lim->unlock_ms == 0 ||
        lim->unlock_ms > ALGO_SPAN_MAX || lim->lock_factor == 0 ||
        lim->lock_factor > ALGO_LOCK_FACTOR_MAX || lim->lock_max_ms < lim->unlock_ms ||
        lim->lock_max_ms > ALGO_SPAN_MAX || lim->remember_ms > ALGO_SPAN_MAX)
        return -EINVAL;
    if (lim->delay_after == 0)
        return 0;
    if (lim->delay_after > lim->credit_limit || lim->delay_ms == 0 ||
        lim->delay_ms > ALGO_SPAN_MAX || lim->delay_factor == 0 ||
        lim->delay_factor > ALGO_LOCK_FACTOR_MAX || lim->delay_max_ms < lim->delay_ms ||
        lim->delay_max_ms > ALGO_SPAN_MAX)
        return -EINVAL;
    return 0;
}

uint64_t algo_lock_ms(const struct table_limits *lim, uint64_t level)
{
    return lock_ramp(lim->unlock_ms, lim->lock_factor, level, lim->lock_max_ms);
}

uint64_t algo_lock_delay_ms(const struct table_limits *lim, uint64_t failures)
{
    if (lim->delay_after == 0 || failures < lim->delay_after)
        return 0;
    return lock_ramp(lim->delay_ms, lim->delay_factor, failures - lim->delay_after,
                     lim->delay_max_ms);
}

static void lock_decode(const struct table_limits *lim, uint64_t now,
                        const struct algo_state *cur, struct lock_now *ret)
{
    uint64_t keep, end, back;

    ret->level = ret->count = ret->end = ret->last = 0;
    ret->locked = false;
    if (cur->idle <= now)
        return;                                 /* absent, or everything forgotten */
    ret->level = cur->data & ((1u << LOCK_LEVEL_BITS) - 1);
    keep = ret->level ? lim->remember_ms : 0;
    end = cur->idle > keep ? cur->idle - keep : 0;
    if (end <= now)
        return;                                 /* only the level is left */
    if (cur->debt) {
        ret->locked = true;
        ret->end = end;
        return;
    }
    ret->count = cur->data >> LOCK_COUNT_SHIFT & LOCK_COUNT_MASK;
    if (ret->count == 0)
        return;
    back = cur->data >> LOCK_LAST_SHIFT;
    ret->end = end;
    ret->last = back < end ? end - back : 0;
}

/* The state word of @s: see the file's comment. */
static void lock_encode(const struct table_limits *lim, const struct lock_now *s,
                        struct algo_state *ret)
{
    uint64_t back = s->count && !s->locked ? s->end - s->last : 0;

    ret->debt = s->locked;
    ret->data = s->level | (s->locked ? 0 : s->count) << LOCK_COUNT_SHIFT |
                back << LOCK_LAST_SHIFT;
    ret->idle = lock_add(s->end, s->level ? lim->remember_ms : 0);
    if (!s->locked && s->count == 0 && s->level == 0) {
        ret->idle = 0;
        ret->data = 0;
    }
}

/* A refusal while locked, or the answer while counting. */
static void lock_answer(const struct table_limits *lim, const struct lock_now *s, uint64_t now,
                        bool allowed, struct table_result *ret)
{
    ret->allowed = allowed;
    if (s->locked) {
        ret->credit = 0;
        ret->reset_ms = s->end - now;
        return;
    }
    ret->credit = lim->credit_limit - s->count;
    ret->reset_ms = s->count ? s->end - now : 0;
}

bool algo_lock_apply(const struct table_limits *lim, enum table_op op, uint64_t n,
                     uint64_t now_ms, const struct algo_state *cur, struct algo_state *ret_state,
                     struct table_result *ret)
{
    struct algo_state in = *cur;
    struct lock_now s;
    uint64_t wait;

    if (op == TABLE_RESET) {
        ret_state->idle = 0;
        ret_state->data = 0;
        ret_state->debt = false;
        ret->allowed = true;
        ret->credit = lim->credit_limit;
        ret->reset_ms = 0;
        return in.idle != 0 || in.data != 0 || in.debt;
    }
    *ret_state = in;
    lock_decode(lim, now_ms, &in, &s);
    if (s.locked) {
        lock_answer(lim, &s, now_ms, false, ret);
        return false;
    }
    if (op == TABLE_PEEK || n == 0) {
        wait = s.count ? algo_lock_delay_ms(lim, s.count) : 0;
        if (wait && now_ms < lock_add(s.last, wait)) {
            /* A delay runs: refused with the failures left (> 0) and the wait. */
            ret->allowed = false;
            ret->credit = lim->credit_limit - s.count;
            ret->reset_ms = lock_add(s.last, wait) - now_ms;
            return false;
        }
        lock_answer(lim, &s, now_ms, n <= lim->credit_limit - s.count, ret);
        return false;
    }
    if (n > lim->credit_limit - s.count) {
        /* All or nothing, as every algorithm: more failures than are left at once. */
        lock_answer(lim, &s, now_ms, false, ret);
        return false;
    }
    if (s.count == 0)
        s.end = lock_add(now_ms, lim->reset_ms);
    s.count += n;
    s.last = now_ms;
    if (s.count >= lim->credit_limit) {
        s.locked = true;
        s.end = lock_add(now_ms, algo_lock_ms(lim, s.level));
        s.count = 0;
        if (s.level < ALGO_LOCK_LEVEL_MAX)
            s.level++;
    }
    lock_encode(lim, &s, ret_state);
    lock_answer(lim, &s, now_ms, true, ret);
    return ret_state->idle != in.idle || ret_state->data != in.data ||
           ret_state->debt != in.debt;
}

void algo_lock_read(const struct table_limits *lim, uint64_t now_ms, const struct algo_state *cur,
                    struct algo_lock_view *ret)
{
    struct lock_now s;
    uint64_t wait;

    lock_decode(lim, now_ms, cur, &s);
    ret->locked = s.locked;
    ret->lock_left_ms = s.locked ? s.end - now_ms : 0;
    ret->failures = s.count;
    ret->interval_left_ms = s.count ? s.end - now_ms : 0;
    ret->level = s.level;
    wait = s.count ? lock_add(s.last, algo_lock_delay_ms(lim, s.count)) : 0;
    ret->delay_left_ms = wait > now_ms ? wait - now_ms : 0;
}

uint64_t algo_lock_retry_ms(const struct table_limits *lim, uint64_t now_ms,
                            const struct algo_state *cur)
{
    struct algo_lock_view v;

    algo_lock_read(lim, now_ms, cur, &v);
    return v.locked ? v.lock_left_ms : v.delay_left_ms;
}
