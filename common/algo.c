/* SPDX-License-Identifier: MIT */
/*
 * algo: window, token bucket and sliding window on the packed (idle, data)
 * state of a counter-table slot.  The encodings are specified in
 * docs/dev/shm.md ("Algorithm state"); every function here is pure, so the
 * table can retry it freely inside its compare-and-swap loop.  Arithmetic
 * that could exceed 64 bits is done in 128 bits and times saturate at
 * ALGO_IDLE_MAX instead of wrapping.
 */
#include <errno.h>

#include "algo.h"
#include "algo_gcra.h"
#include "algo_lock.h"

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

/* What a DEBIT may leave charged on a counter of limit @L (DEBIT only: a
 * TAKE never passes the limit): the limit and ALGO_DEBT_WINDOWS limits of
 * debt, at most @field_max, what the state's field holds. */
static uint64_t debt_most(uint64_t L, uint64_t field_max)
{
    return L <= field_max / (ALGO_DEBT_WINDOWS + 1) ? (ALGO_DEBT_WINDOWS + 1) * L : field_max;
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
    case RULES_ALGO_GCRA:
        return algo_gcra_check(lim);
    case RULES_ALGO_TOKEN_BUCKET:
        if (lim->continuous)
            return algo_gcra_check(lim);
        if (lim->refill_amount == 0 || lim->refill_ms == 0)
            return -EINVAL;
        span = (unsigned __int128)div_ceil(lim->credit_limit, lim->refill_amount) *
               lim->refill_ms;
        if (span > ALGO_SPAN_MAX)
            return -EINVAL;
        return 0;
    case RULES_ALGO_LOCKOUT:
        return algo_lock_check(lim);
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

/* The idle word of a window counter with @used credit (possibly more than
 * the limit: a debt) in the window ending at @end: the start of the first
 * window a full quota is back in, end + (max(1, ceil(used / L)) - 1) * R. */
static unsigned __int128 window_idle(const struct table_limits *lim, uint64_t used, uint64_t end)
{
    uint64_t m = used > lim->credit_limit ? div_ceil(used, lim->credit_limit) : 1;

    return (unsigned __int128)end + (unsigned __int128)(m - 1) * lim->reset_ms;
}

/*
 * A window counter at @now: credit used in the current window (*used) and
 * its end (*end); false when no window runs (fresh).  A count above the
 * limit (a DEBIT's debt) carries on: each window that ends pays back one
 * limit's worth, so window k after the one that ended at E starts with
 * used - k * L (docs/dev/shm.md).
 */
static bool window_read(const struct table_limits *lim, uint64_t now,
                        const struct algo_state *cur, uint64_t *used, uint64_t *end)
{
    uint64_t L = lim->credit_limit, R = lim->reset_ms, m, k;
    unsigned __int128 back, paid;

    *used = 0;
    *end = cur->idle;
    if (cur->idle <= now)
        return false;
    *used = cur->data;
    if (cur->data <= L)
        return true;
    if (!cur->debt) {
        /* Above a limit since lowered: nothing left in this window. */
        *used = L;
        return true;
    }
    m = div_ceil(cur->data, L);
    back = (unsigned __int128)(m - 1) * R;
    *end = back >= cur->idle ? 0 : cur->idle - (uint64_t)back;
    if (now < *end)
        return true;
    k = (now - *end) / R + 1;
    paid = (unsigned __int128)k * L;
    if (paid >= cur->data) {
        /* Only a corrupt word gets here (idle > now implies less). */
        *used = 0;
        *end = cur->idle;
        return false;
    }
    *used = cur->data - (uint64_t)paid;
    *end += k * R;
    return true;
}

/* The most credit a window counter may hold as used from the window ending
 * at @end: a DEBIT's debt saturates at ALGO_DEBT_WINDOWS limits, or sooner
 * where the state word ends (count and idle, window_idle()).  DEBIT only:
 * TAKE never passes the limit. */
static uint64_t window_most(const struct table_limits *lim, uint64_t end)
{
    uint64_t L = lim->credit_limit, most = debt_most(L, ALGO_DATA_MAX);

    if (end < ALGO_IDLE_MAX &&
        (unsigned __int128)((ALGO_IDLE_MAX - end) / lim->reset_ms + 1) * L < most)
        most = ((ALGO_IDLE_MAX - end) / lim->reset_ms + 1) * L;
    else if (end >= ALGO_IDLE_MAX && L < most)
        most = L;
    return most;
}

/* The end of a window that starts at @now: a calendar window's period end
 * (table_limits.window_end_ms), else now + reset_ms. */
static uint64_t window_start(const struct table_limits *lim, uint64_t now)
{
    if (lim->window_end_ms > now)
        return lim->window_end_ms < ALGO_IDLE_MAX ? lim->window_end_ms : ALGO_IDLE_MAX;
    return sat_add(now, lim->reset_ms);
}

static bool apply_window(const struct table_limits *lim, enum table_op op, uint64_t n,
                         uint64_t now, const struct algo_state *cur, struct algo_state *out,
                         struct table_result *ret)
{
    uint64_t L = lim->credit_limit, used = cur->data, end = cur->idle, most;
    /* The common case inline: a window running, within its limit. */
    bool fresh = cur->idle > now && cur->data <= L ? false
                                                   : !window_read(lim, now, cur, &used, &end);
    bool fits = used <= L && n <= L - used;

    *out = *cur;
    if (op == TABLE_TAKE && fits) {
        if (fresh)
            end = window_start(lim, now);
        out->idle = end;                /* within the limit: no debt */
        out->data = used + n;
        out->debt = false;
        used += n;
        fresh = false;
    } else if (op == TABLE_DEBIT) {
        if (fresh)
            end = window_start(lim, now);
        most = window_most(lim, end);
        used = used < most && n <= most - used ? used + n : most;
        out->idle = (uint64_t)window_idle(lim, used, end);
        out->data = used;
        out->debt = used > L;
        fresh = false;
    }
    ret->allowed = op == TABLE_DEBIT ? used <= L : fits;
    ret->credit = used <= L ? L - used : 0;
    ret->reset_ms = fresh ? 0 : end - now;
    return out->idle != cur->idle || out->data != cur->data || out->debt != cur->debt;
}

/*
 * A token bucket at @now: the tokens missing (*deficit: more than the
 * capacity while in debt) and the last refill step (*last).  data holds
 * the tokens (0..cap-1), or, with the debt flag, the deficit itself (above
 * cap: tokens cap - data < 0); without it data >= cap (a capacity since
 * lowered), or idle <= now, is full.
 */
static void bucket_read(const struct table_limits *lim, uint64_t now,
                        const struct algo_state *cur, uint64_t *deficit, uint64_t *last)
{
    uint64_t cap = lim->credit_limit, amount = lim->refill_amount, period = lim->refill_ms;
    uint64_t d, refills;
    unsigned __int128 t;

    *deficit = 0;
    *last = now;
    if (cur->idle <= now || (!cur->debt && cur->data >= cap) || (cur->debt && cur->data <= cap))
        return;
    d = cur->debt ? cur->data : cap - cur->data;
    /* last = F - ceil(deficit / amount) * period (docs/dev/shm.md) */
    t = (unsigned __int128)div_ceil(d, amount) * period;
    *last = t > cur->idle ? 0 : cur->idle - (uint64_t)t;
    refills = *last < now ? (now - *last) / period : 0;
    t = (unsigned __int128)refills * amount;
    *deficit = t >= d ? 0 : d - (uint64_t)t;
    *last += refills * period;
}

static bool apply_bucket(const struct table_limits *lim, enum table_op op, uint64_t n,
                         uint64_t now, const struct algo_state *cur, struct algo_state *out,
                         struct table_result *ret)
{
    uint64_t cap = lim->credit_limit, amount = lim->refill_amount, period = lim->refill_ms;
    uint64_t d, last, most;
    unsigned __int128 t;
    bool fits;

    bucket_read(lim, now, cur, &d, &last);
    fits = d <= cap && n <= cap - d;
    *out = *cur;
    if (op == TABLE_TAKE || op == TABLE_DEBIT) {
        if (op == TABLE_TAKE && fits) {
            d += n;                     /* within the capacity: no debt to bound */
        } else if (op == TABLE_DEBIT) {
            /* A debt saturates at ALGO_DEBT_WINDOWS capacities, or sooner
             * where the state word ends: data and idle. */
            most = debt_most(cap, ALGO_DATA_MAX);
            t = last < ALGO_IDLE_MAX ? (unsigned __int128)((ALGO_IDLE_MAX - last) / period) *
                                       amount : 0;
            if (t < most)
                most = t < cap ? cap : (uint64_t)t;
            d = d < most && n <= most - d ? d + n : most;
        } else if (lim->strict && d > 0) {
            last = now;
        }
        if (d > 0) {
            t = (unsigned __int128)div_ceil(d, amount) * period;
            out->idle = t >= ALGO_IDLE_MAX ? ALGO_IDLE_MAX : sat_add(last, (uint64_t)t);
            out->data = d <= cap ? cap - d : d;
            out->debt = d > cap;
        }
    }
    ret->allowed = op == TABLE_DEBIT ? d <= cap : fits;
    ret->credit = d <= cap ? cap - d : 0;
    ret->reset_ms = d == 0 ? 0 : sat_add(last, period) - now;
    return out->idle != cur->idle || out->data != cur->data || out->debt != cur->debt;
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
    if ((op == TABLE_TAKE && fits) || op == TABLE_DEBIT) {
        /* A TAKE that fits stays within the limit; a DEBIT counts past it,
         * up to ALGO_DEBT_WINDOWS limits more or what the field holds. */
        uint64_t most;

        if (op == TABLE_TAKE) {
            count += n;
        } else {
            most = debt_most(limit, ALGO_SLIDING_MAX);
            count = count < most && n <= most - count ? count + n : most;
        }
        credit = fits ? credit - n : 0;
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

    if ((op == TABLE_TAKE || op == TABLE_DEBIT) && n == 0)
        op = TABLE_PEEK;
    if (op == TABLE_RESET) {
        ret_state->idle = 0;
        ret_state->data = 0;
        ret_state->debt = false;
        result_full(lim, 0, true, ret);
        return in.idle != 0 || in.data != 0 || in.debt;
    }
    switch (lim->algo) {
    case RULES_ALGO_TOKEN_BUCKET:
        if (lim->continuous)
            return algo_gcra_apply(lim, op, n, now_ms, &in, ret_state, ret);
        return apply_bucket(lim, op, n, now_ms, &in, ret_state, ret);
    case RULES_ALGO_SLIDING_WINDOW:
        return apply_sliding(lim, op, n, now_ms, &in, ret_state, ret);
    case RULES_ALGO_GCRA:
        return algo_gcra_apply(lim, op, n, now_ms, &in, ret_state, ret);
    case RULES_ALGO_LOCKOUT:
        return algo_lock_apply(lim, op, n, now_ms, &in, ret_state, ret);
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

static uint64_t retry_window(const struct table_limits *lim, uint64_t now,
                             const struct algo_state *cur)
{
    uint64_t L = lim->credit_limit, used, end, more;
    unsigned __int128 at;

    if (!window_read(lim, now, cur, &used, &end) || used < L)
        return 0;
    /* A window starts with one limit less each: the first to leave one credit. */
    more = div_ceil(used - L + 1, L);
    at = (unsigned __int128)end + (unsigned __int128)(more - 1) * lim->reset_ms;
    return at >= ALGO_IDLE_MAX ? ALGO_IDLE_MAX - now : (uint64_t)at - now;
}

static uint64_t retry_bucket(const struct table_limits *lim, uint64_t now,
                             const struct algo_state *cur)
{
    uint64_t cap = lim->credit_limit, d, last, steps;
    unsigned __int128 at;

    bucket_read(lim, now, cur, &d, &last);
    if (d < cap)
        return 0;
    /* Refills pay a debt first: the first step that leaves one token. */
    steps = div_ceil(d - cap + 1, lim->refill_amount);
    at = (unsigned __int128)last + (unsigned __int128)steps * lim->refill_ms;
    return at >= ALGO_IDLE_MAX ? ALGO_IDLE_MAX - now : (uint64_t)at - now;
}

uint64_t algo_retry_ms(const struct table_limits *lim, uint64_t now_ms,
                       const struct algo_state *cur)
{
    if (lim->algo == RULES_ALGO_SLIDING_WINDOW)
        return retry_sliding(lim, now_ms, cur);
    if (lim->algo == RULES_ALGO_WINDOW)
        return retry_window(lim, now_ms, cur);
    if (lim->algo == RULES_ALGO_GCRA || lim->continuous)
        return algo_gcra_retry_ms(lim, now_ms, cur);
    if (lim->algo == RULES_ALGO_LOCKOUT)
        return algo_lock_retry_ms(lim, now_ms, cur);
    return retry_bucket(lim, now_ms, cur);
}
