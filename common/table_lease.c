/* SPDX-License-Identifier: MIT */
/*
 * table_lease: lease slots (docs/dev/shm.md "Lease slots"), credit a rule with
 * store = lease holds from Redis in the host table.  table_lease_take()
 * spends it (divvyd and fast-path clients); the grant, refill-claim, abort
 * and clear-fetches transitions are divvyd's.  Each is a pure transition
 * function run inside table.c's lookup, claim and CAS loop.
 */
#include <errno.h>
#include <string.h>

#include "table_private.h"

/* ---- leases ------------------------------------------------------------- */

/*
 * A lease transition: from a slot's flags and state (@live false: the key
 * has no slot, *cur is {0, 0}) to new ones; true when anything changes.
 * Pure apart from writing its results into @arg: the CAS loops may call it
 * again with a fresher snapshot.
 */
typedef bool (*lease_fn)(void *arg, uint64_t now, bool live, unsigned flags,
                         const struct algo_state *cur, unsigned *ret_flags,
                         struct algo_state *ret_state);

static int lease_check(const struct table_limits *lim)
{
    if (!lim->lease || lim->algo != RULES_ALGO_WINDOW || lim->credit_limit > TABLE_LEASE_MAX ||
        lim->lease_max < 1 || lim->lease_max > TABLE_LEASE_MAX)
        return -EINVAL;
    return algo_check(lim);
}

/* lease_update()'s step of table_cas_loop(). */
struct lease_step {
    lease_fn fn;
    void *arg;
    uint64_t now;
};

static u128 lease_step(void *arg, u128 v)
{
    struct lease_step *a = arg;
    struct algo_state cur = { .idle = st_idle(v), .data = st_data(v) }, next;
    unsigned flags;

    if (a->fn(a->arg, a->now, true, st_flags(v), &cur, &flags, &next))
        return st_make(st_owner(v), PHASE_LIVE, flags, next.idle, next.data);
    return v;                   /* still a CAS: the answer comes from a snapshot */
}

static int lease_update(struct table_slot *s, uint64_t lo, lease_fn fn, void *arg, uint64_t now)
{
    struct lease_step a = { .fn = fn, .arg = arg, .now = now };

    return table_cas_loop(s, lo, lease_step, &a);
}

/* table_hit()'s lookup, claim and retry loop around a lease transition. */
static int lease_modify(struct table *t, const struct table_key *key,
                        const struct table_limits *lim, lease_fn fn, void *arg, uint64_t now)
{
    struct algo_state none = { 0 }, first;
    struct table_kw kw;
    struct table_scan sc;
    uint64_t waited_lo = 0;
    unsigned flags;
    int r;

    if (!t || !key || !lim || (key->actor_len && !key->actor))
        return -EINVAL;
    r = lease_check(lim);
    if (r < 0)
        return r;
    if (now > ALGO_IDLE_MAX)
        now = ALGO_IDLE_MAX;
    table_key_prepare(t, key, lim, &kw);
    r = -EAGAIN;
    for (int attempt = 0; attempt < TABLE_RETRY_MAX && r == -EAGAIN; attempt++) {
        table_scan_key(t, &kw, now, &sc);
        if (sc.key_off >= 0) {
            r = lease_update(slot_at(t, kw.bucket, (unsigned)sc.key_off), sc.key_lo, fn, arg,
                             now);
            continue;
        }
        if (sc.claim_off >= 0) {
            table_wait_claim(t, &kw, &sc, &waited_lo);
            continue;
        }
        if (!fn(arg, now, false, 0, &none, &flags, &first)) {
            r = 0;
            continue;
        }
        r = table_claim(t, &kw, lim, &sc, &first, flags, now);
    }
    return r;
}

static uint64_t lease_target(uint64_t remain, uint64_t lease_max)
{
    uint64_t k = remain / TABLE_LEASE_DIVISOR;

    if (k < 1)
        k = 1;
    return k < lease_max ? k : lease_max;
}

/* Below the low-water mark: @left is under half the grant a fetch would
 * now bring (while the pool has anything left to grant). */
static bool lease_low(uint64_t left, uint64_t remain, uint64_t lease_max)
{
    return remain > 0 && left * 2 < lease_target(remain, lease_max);
}

struct lease_take {
    uint64_t n;
    uint64_t lease_max;
    bool may_fetch;
    struct table_lease_result res;
};

static bool lease_take_fn(void *arg, uint64_t now, bool live, unsigned flags,
                          const struct algo_state *cur, unsigned *ret_flags,
                          struct algo_state *next)
{
    struct lease_take *x = arg;
    struct table_lease_result *res = &x->res;
    bool running = live && cur->idle > now;
    bool window = running && !(flags & LF_HOLD);
    bool fetching = running && (flags & LF_FETCH);
    uint64_t left = window ? cur->data >> LEASE_SHIFT & LEASE_MASK : 0;
    uint64_t remain = window ? cur->data & LEASE_MASK : 0;

    memset(res, 0, sizeof(*res));
    *ret_flags = flags;
    *next = *cur;
    if (window && left >= x->n) {
        /* Low water: refill in the background before the lease runs dry. */
        bool low = !fetching && lease_low(left - x->n, remain, x->lease_max);

        left -= x->n;
        res->verdict = TABLE_LEASE_ALLOWED;
        res->credit = remain + left;
        res->reset_ms = cur->idle - now;
        next->data = left << LEASE_SHIFT | remain;
        if (low) {
            /* divvyd fetches (FETCH now); a fast-path client asks divvyd
             * to (table_lease_refill_claim()) and sets nothing. */
            if (x->may_fetch)
                *ret_flags |= LF_FETCH;
            res->refill = true;
            res->want = x->lease_max - left;
        }
        return true;
    }
    /* The pool only shrinks within a window: what we saw bounds what is there. */
    if (window && remain + left < x->n) {
        res->verdict = TABLE_LEASE_DENIED;
        res->credit = remain + left;
        res->reset_ms = cur->idle - now;
        return false;
    }
    if (x->may_fetch && !fetching && x->n <= x->lease_max) {
        res->verdict = TABLE_LEASE_FETCH;
        res->want = x->lease_max - left;
        if (window) {
            *ret_flags = flags | LF_FETCH;
        } else {
            *ret_flags = LF_FETCH | LF_HOLD;
            next->idle = now + TABLE_LEASE_HOLD_MS;
            next->data = 0;
        }
        return true;
    }
    res->verdict = TABLE_LEASE_ASK;
    res->want = x->n;
    return false;
}

int table_lease_take(struct table *t, const struct table_key *key, const struct table_limits *lim,
                     uint64_t n, bool may_fetch, uint64_t now_ms, struct table_lease_result *ret)
{
    struct lease_take x = { .n = n, .lease_max = lim ? lim->lease_max : 0,
                            .may_fetch = may_fetch };
    int r;

    if (!ret || n == 0)
        return -EINVAL;
    r = lease_modify(t, key, lim, lease_take_fn, &x, now_ms);
    if (r < 0) {
        memset(ret, 0, sizeof(*ret));
        return r;
    }
    *ret = x.res;
    return 0;
}

struct lease_claim {
    uint64_t lease_max;
    uint64_t want;              /* out: 0 when nothing was claimed */
};

static bool lease_claim_fn(void *arg, uint64_t now, bool live, unsigned flags,
                           const struct algo_state *cur, unsigned *ret_flags,
                           struct algo_state *next)
{
    struct lease_claim *x = arg;
    bool window = live && cur->idle > now && !(flags & LF_HOLD);
    uint64_t left = window ? cur->data >> LEASE_SHIFT & LEASE_MASK : 0;
    uint64_t remain = window ? cur->data & LEASE_MASK : 0;

    x->want = 0;
    *ret_flags = flags;
    *next = *cur;
    if (!window || (flags & LF_FETCH) || !lease_low(left, remain, x->lease_max))
        return false;
    *ret_flags = flags | LF_FETCH;
    x->want = x->lease_max - left;
    return true;
}

int table_lease_refill_claim(struct table *t, const struct table_key *key,
                             const struct table_limits *lim, uint64_t now_ms, uint64_t *ret_want)
{
    struct lease_claim x = { .lease_max = lim ? lim->lease_max : 0 };
    int r;

    if (!ret_want)
        return -EINVAL;
    *ret_want = 0;
    r = lease_modify(t, key, lim, lease_claim_fn, &x, now_ms);
    if (r < 0)
        return r;
    *ret_want = x.want;
    return x.want > 0;
}

static bool lease_grant_fn(void *arg, uint64_t now, bool live, unsigned flags,
                           const struct algo_state *cur, unsigned *ret_flags,
                           struct algo_state *next)
{
    const struct table_lease_grant *g = arg;
    bool running = live && cur->idle > now;
    bool window = running && !(flags & LF_HOLD);
    uint64_t left = window ? cur->data >> LEASE_SHIFT & LEASE_MASK : 0;
    uint64_t remain = window ? cur->data & LEASE_MASK : 0;
    uint64_t idle = cur->idle;
    unsigned nflags = running ? flags : 0;

    if (g->fetch)
        nflags &= ~LF_FETCH;
    *next = *cur;
    *ret_flags = nflags;
    /* A grant for a window that is over is worth nothing here. */
    if (g->end_ms <= now)
        return live && nflags != flags;
    if (window && !g->created) {
        left += g->granted;
        if (g->remain < remain)
            remain = g->remain;
        if (g->end_ms < idle)
            idle = g->end_ms;
    } else {
        /* A new window (or none here yet): the old lease belonged to an older one. */
        left = g->granted;
        remain = g->remain;
        idle = g->end_ms;
    }
    if (left > LEASE_MASK)
        left = LEASE_MASK;
    if (remain > LEASE_MASK)
        remain = LEASE_MASK;
    *ret_flags = nflags & ~LF_HOLD;
    next->idle = idle;
    next->data = left << LEASE_SHIFT | remain;
    return true;
}

int table_lease_grant(struct table *t, const struct table_key *key, const struct table_limits *lim,
                      const struct table_lease_grant *g, uint64_t now_ms)
{
    struct table_lease_grant copy;

    if (!g)
        return -EINVAL;
    copy = *g;
    if (copy.end_ms > ALGO_IDLE_MAX)
        copy.end_ms = ALGO_IDLE_MAX;
    return lease_modify(t, key, lim, lease_grant_fn, &copy, now_ms);
}

static bool lease_abort_fn(void *arg, uint64_t now, bool live, unsigned flags,
                           const struct algo_state *cur, unsigned *ret_flags,
                           struct algo_state *next)
{
    (void)arg;
    *next = *cur;
    *ret_flags = flags & ~LF_FETCH;
    if (!live || !(flags & LF_FETCH))
        return false;
    if ((flags & LF_HOLD) && cur->idle > now)
        next->idle = now;       /* expired: the next hit fetches afresh */
    return true;
}

int table_lease_abort(struct table *t, const struct table_key *key, const struct table_limits *lim,
                      uint64_t now_ms)
{
    return lease_modify(t, key, lim, lease_abort_fn, NULL, now_ms);
}

size_t table_lease_clear_fetches(struct table *t, uint64_t now_ms)
{
    size_t changed = 0;

    if (!t)
        return 0;
    for (uint32_t i = 0; i < t->n_slots; i++) {
        struct table_slot *s = &t->slots[i];
        u128 v = load128(s->state), got;

        while (st_phase(v) == PHASE_LIVE && (st_flags(v) & LF_FETCH)) {
            uint64_t idle = (st_flags(v) & LF_HOLD) && st_idle(v) > now_ms ? now_ms
                                                                            : st_idle(v);

            got = cas128(s->state, v, st_make(st_owner(v), PHASE_LIVE,
                                              st_flags(v) & ~LF_FETCH, idle, st_data(v)));
            if (got == v) {
                changed++;
                break;
            }
            v = got;
        }
    }
    return changed;
}
