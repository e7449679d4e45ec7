/* SPDX-License-Identifier: MIT */
/*
 * algo: window, token bucket and sliding window on the packed (idle, data)
 * state of a counter-table slot.  The encodings are specified in
 * docs/shm.md ("Algorithm state"); every function here is pure, so the
 * table can retry it freely inside its compare-and-swap loop.  Arithmetic
 * that could exceed 64 bits is done in 128 bits and times saturate at
 * ALGO_IDLE_MAX instead of wrapping.
 */
#include <errno.h>

#include "algo.h"

#define SLIDING_SHIFT 24

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    if (a >= ALGO_IDLE_MAX || b >= ALGO_IDLE_MAX - a)
        return ALGO_IDLE_MAX;
    return a + b;
}

static uint64_t div_ceil(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

int algo_check(const struct table_limits *lim)
{
    unsigned __int128 span;

    if (!lim || lim->credit_limit == 0 || lim->credit_limit > ALGO_DATA_MAX)
        return -EINVAL;
    switch (lim->algo) {
    case RULES_ALGO_WINDOW:
        if (lim->reset_ms == 0 || lim->reset_ms > ALGO_SPAN_MAX)
            return -EINVAL;
        return 0;
    case RULES_ALGO_SLIDING_WINDOW:
        if (lim->reset_ms == 0 || lim->reset_ms > ALGO_SPAN_MAX ||
            lim->credit_limit > ALGO_SLIDING_MAX)
            return -EINVAL;
        return 0;
    case RULES_ALGO_TOKEN_BUCKET:
        if (lim->refill_amount == 0 || lim->refill_ms == 0)
            return -EINVAL;
        span = (unsigned __int128)div_ceil(lim->credit_limit, lim->refill_amount) *
               lim->refill_ms;
        if (span > ALGO_SPAN_MAX)
            return -EINVAL;
        return 0;
    }
    return -EINVAL;
}

static void result_full(const struct table_limits *lim, uint64_t n, bool allowed,
                        struct table_result *ret)
{
    ret->allowed = allowed && n <= lim->credit_limit;
    ret->credit = lim->credit_limit;
    ret->reset_ms = 0;
}

static bool apply_window(const struct table_limits *lim, enum table_op op, uint64_t n,
                         uint64_t now, const struct algo_state *cur, struct algo_state *out,
                         struct table_result *ret)
{
    bool fresh = cur->idle <= now;
    uint64_t used = fresh ? 0 : cur->data;
    uint64_t end = cur->idle;
    bool fits;

    /* A corrupt count above the limit reads as "nothing left". */
    if (used > lim->credit_limit)
        used = lim->credit_limit;
    fits = n <= lim->credit_limit - used;
    *out = *cur;
    if (op == TABLE_TAKE && fits) {
        if (fresh)
            end = sat_add(now, lim->reset_ms);
        used += n;
        out->idle = end;
        out->data = used;
        fresh = false;
    }
    ret->allowed = fits;
    ret->credit = lim->credit_limit - used;
    ret->reset_ms = fresh ? 0 : end - now;
    return out->idle != cur->idle || out->data != cur->data;
}

static bool apply_bucket(const struct table_limits *lim, enum table_op op, uint64_t n,
                         uint64_t now, const struct algo_state *cur, struct algo_state *out,
                         struct table_result *ret)
{
    uint64_t cap = lim->credit_limit, amount = lim->refill_amount, period = lim->refill_ms;
    uint64_t tokens = cap, last = now, steps, refills;
    unsigned __int128 t;
    bool fits;

    if (cur->idle > now && cur->data < cap) {
        /* last = F - ceil((cap - tokens) / amount) * period (docs/shm.md) */
        steps = div_ceil(cap - cur->data, amount);
        t = (unsigned __int128)steps * period;
        last = t > cur->idle ? 0 : cur->idle - (uint64_t)t;
        refills = last < now ? (now - last) / period : 0;
        t = (unsigned __int128)cur->data + (unsigned __int128)refills * amount;
        tokens = t >= cap ? cap : (uint64_t)t;
        last += refills * period;
    }
    fits = n <= tokens;
    *out = *cur;
    if (op == TABLE_TAKE) {
        if (fits)
            tokens -= n;
        else if (lim->strict && tokens < cap)
            last = now;
        if (tokens < cap) {
            t = (unsigned __int128)div_ceil(cap - tokens, amount) * period;
            out->idle = t >= ALGO_IDLE_MAX ? ALGO_IDLE_MAX : sat_add(last, (uint64_t)t);
            out->data = tokens;
        }
    }
    ret->allowed = fits;
    ret->credit = tokens;
    ret->reset_ms = tokens >= cap ? 0 : sat_add(last, period) - now;
    return out->idle != cur->idle || out->data != cur->data;
}

static bool apply_sliding(const struct table_limits *lim, enum table_op op, uint64_t n,
                          uint64_t now, const struct algo_state *cur, struct algo_state *out,
                          struct table_result *ret)
{
    uint64_t w = lim->reset_ms, limit = lim->credit_limit;
    uint64_t prev = 0, count = 0, start = now, elapsed = 0, credit;
    unsigned __int128 budget, spent;
    bool fresh = cur->idle <= now;
    bool fits;

    if (!fresh) {
        prev = cur->data >> SLIDING_SHIFT & ALGO_SLIDING_MAX;
        count = cur->data & ALGO_SLIDING_MAX;
        start = cur->idle >= 2 * w ? cur->idle - 2 * w : 0;
        elapsed = now > start ? now - start : 0;
        if (elapsed >= 2 * w) {
            /* Only a corrupt word gets here (idle > now implies less). */
            prev = count = 0;
            start = now;
            elapsed = 0;
            fresh = true;
        } else if (elapsed >= w) {
            /* The current window is over: it becomes the previous one. */
            prev = count;
            count = 0;
            start += w;
            elapsed -= w;
        }
    }
    budget = (unsigned __int128)limit * w;
    spent = (unsigned __int128)prev * (w - elapsed) + (unsigned __int128)count * w;
    credit = budget > spent ? (uint64_t)((budget - spent) / w) : 0;
    fits = n <= credit;
    *out = *cur;
    if (op == TABLE_TAKE && fits) {
        count += n;
        credit -= n;
        fresh = false;
        out->idle = sat_add(start, 2 * w);
        out->data = prev << SLIDING_SHIFT | count;
    }
    ret->allowed = fits;
    ret->credit = credit;
    ret->reset_ms = fresh ? 0 : sat_add(start, w) - now;
    return out->idle != cur->idle || out->data != cur->data;
}

bool algo_apply(const struct table_limits *lim, enum table_op op, uint64_t n, uint64_t now_ms,
                const struct algo_state *cur, struct algo_state *ret_state,
                struct table_result *ret)
{
    struct algo_state in = *cur;

    if (op == TABLE_TAKE && n == 0)
        op = TABLE_PEEK;
    if (op == TABLE_RESET) {
        ret_state->idle = 0;
        ret_state->data = 0;
        result_full(lim, 0, true, ret);
        return in.idle != 0 || in.data != 0;
    }
    switch (lim->algo) {
    case RULES_ALGO_TOKEN_BUCKET:
        return apply_bucket(lim, op, n, now_ms, &in, ret_state, ret);
    case RULES_ALGO_SLIDING_WINDOW:
        return apply_sliding(lim, op, n, now_ms, &in, ret_state, ret);
    case RULES_ALGO_WINDOW:
    default:
        return apply_window(lim, op, n, now_ms, &in, ret_state, ret);
    }
}

static uint64_t retry_sliding(const struct table_limits *lim, uint64_t now,
                              const struct algo_state *cur)
{
    uint64_t w = lim->reset_ms, limit = lim->credit_limit;
    uint64_t prev, count, start, elapsed, wait = 0, room;

    if (cur->idle <= now)
        return 0;
    prev = cur->data >> SLIDING_SHIFT & ALGO_SLIDING_MAX;
    count = cur->data & ALGO_SLIDING_MAX;
    start = cur->idle >= 2 * w ? cur->idle - 2 * w : 0;
    elapsed = now > start ? now - start : 0;
    if (elapsed >= 2 * w)
        return 0;
    if (elapsed >= w) {
        prev = count;
        count = 0;
        elapsed -= w;
    }
    if (count >= limit) {
        /* Only the roll-over helps: the current window becomes the previous one. */
        wait = w - elapsed;
        prev = count;
        count = 0;
        elapsed = 0;
    }
    if (prev == 0)
        return wait;
    /* One credit once prev * (w - elapsed) <= (limit - 1 - count) * w (apply_sliding()). */
    room = (uint64_t)((unsigned __int128)(limit - 1 - count) * w / prev);
    if (room >= w - elapsed)
        return wait;
    return sat_add(wait, w - elapsed - room);
}

uint64_t algo_retry_ms(const struct table_limits *lim, uint64_t now_ms,
                       const struct algo_state *cur)
{
    struct algo_state out;
    struct table_result res;

    if (lim->algo == RULES_ALGO_SLIDING_WINDOW)
        return retry_sliding(lim, now_ms, cur);
    /* Window: the window's end; token bucket: the next refill step (apply_bucket()). */
    algo_apply(lim, TABLE_PEEK, 1, now_ms, cur, &out, &res);
    return res.allowed ? 0 : res.reset_ms;
}
