/* SPDX-License-Identifier: MIT */
/*
 * table: the host's counter tables, a preallocated file (the private table)
 * or a sealed memfd with its control page (the fast-path table) mapped
 * MAP_SHARED by the daemon and by fast-path clients.  This file is the part
 * every process that counts runs: finding a key's slot, claiming a slot for
 * a new counter, and applying a hit to it with one 16-byte compare-and-swap
 * (docs/dev/shm.md: the 128-bit state word and the claim protocol), so no process
 * ever holds a lock in the table and one killed at any instruction leaves
 * nothing that others wait for forever; also the per-rule live counts
 * (max_actors), evicting a counter that refused nobody to make room for a
 * new one (when_full = "evict"), and the words divvyd publishes in the
 * header or control page.
 * The algorithms themselves are in algo.c; leases in table_lease.c; checking
 * and mapping an existing table in table_map.c.  What only divvyd does
 * (creating tables, sweeping, moving counters, snapshots) is in
 * table_create.c, table_sweep.c, table_move.c and table_snapshot.c, which
 * clients never link.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "table_private.h"

/* ---- per-rule live counts (max_actors) ---------------------------------- */

/* Index of @rule_id's entry, inserting it when @insert; -ENOENT, -ENOSPC. */
int table_quota_find(struct table *t, uint64_t rule_id, bool insert)
{
    uint32_t start = (uint32_t)((rule_id * 0x9e3779b97f4a7c15ull) >> 54);

    for (uint32_t i = 0; i < TABLE_QUOTA_ENTRIES; i++) {
        uint32_t idx = (start + i) & (TABLE_QUOTA_ENTRIES - 1);
        uint64_t *e = qent(t, idx);
        /* The high half (used bit) first: once it is set, the low half is. */
        uint64_t hi = __atomic_load_n(&e[HI], __ATOMIC_ACQUIRE);
        uint64_t lo = __atomic_load_n(&e[LO], __ATOMIC_RELAXED);
        u128 got;

        if (!(hi & QUOTA_USED)) {
            if (!insert)
                return -ENOENT;
            /* Only ever the first empty entry: inserters of one rule meet here. */
            got = cas128(e, 0, (u128)QUOTA_USED << 64 | rule_id);
            if (got == 0)
                return (int)idx;
            lo = (uint64_t)got;
        }
        if (lo == rule_id)
            return (int)idx;
    }
    return -ENOSPC;
}

/* Adds @delta to entry @idx; with @max, refuses to go past it (-EDQUOT). */
static int quota_add(struct table *t, uint32_t idx, int delta, uint64_t max)
{
    uint64_t *e = qent(t, idx);
    u128 v = load128(e), got;

    for (;;) {
        uint64_t hi = (uint64_t)(v >> 64), count = hi >> 1;

        if (delta > 0 && max && count >= max)
            return -EDQUOT;
        if (delta < 0 && count == 0)
            return 0;
        count = delta > 0 ? count + 1 : count - 1;
        got = cas128(e, v, (u128)(count << 1 | QUOTA_USED) << 64 | (uint64_t)v);
        if (got == v)
            return 0;
        v = got;
    }
}

void table_quota_release(struct table *t, uint64_t rule_id)
{
    int idx = table_quota_find(t, rule_id, false);

    if (idx >= 0)
        quota_add(t, (uint32_t)idx, -1, 0);
}

/* ---- keys --------------------------------------------------------------- */

static void key_prepare(const struct table *t, const struct table_key *key,
                        const struct table_limits *lim, struct table_kw *kw)
{
    uint8_t buf[8 + 32];
    size_t stored;
    uint32_t kflags = (uint32_t)lim->algo << KF_ALGO_SHIFT | (lim->lease ? KF_LEASE : 0) |
                      (lim->continuous ? KF_CONTINUOUS : 0);
    uint64_t h;

    memset(buf, 0, sizeof(buf));
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(key->rule_id >> (8 * i));
    if (key->actor_len > 32) {
        hash_siphash128(digest_key(t), key->actor, key->actor_len, buf + 8);
        stored = 16;
        kflags |= KF_DIGEST;
    } else {
        if (key->actor_len)
            memcpy(buf + 8, key->actor, key->actor_len);
        stored = key->actor_len;
    }
    h = hash_siphash(t->secret, buf, 8 + stored);
    kw->w[0] = key->rule_id;
    kw->w[1] = (key->actor_len > UINT32_MAX ? UINT32_MAX : key->actor_len) |
               (uint64_t)kflags << 32;
    memcpy(&kw->w[2], buf + 8, 32);
    kw->tag = (uint32_t)(h >> 40);
    kw->bucket = (uint32_t)h & t->mask;
}
/*
 * Whether LIVE slot @s, whose low state half was @lo, holds @kw: 1 yes,
 * 0 no, -EAGAIN the slot changed owner or phase while we read its key.
 */
static int key_match(struct table_slot *s, uint64_t lo, const struct table_kw *kw)
{
    uint64_t w[6];

    key_read(s, w);
    if (!same_ident(load_lo(s), lo))
        return -EAGAIN;
    /* Word by word, no memcmp() call: this is on every hit's path. */
    return ((w[0] ^ kw->w[0]) | ((w[1] & ~((uint64_t)KF_COUNTED << 32)) ^ kw->w[1]) |
            (w[2] ^ kw->w[2]) | (w[3] ^ kw->w[3]) | (w[4] ^ kw->w[4]) | (w[5] ^ kw->w[5])) == 0;
}

/* ---- waiting for other claimers ----------------------------------------- */

/* Waits (bounded) until slot @s no longer has owner and phase of @lo. */
bool table_wait_change(struct table_slot *s, uint64_t lo)
{
    for (int i = 0; i < TABLE_SPIN_MAX; i++) {
        if (!same_ident(load_lo(s), lo))
            return true;
        if (i < TABLE_SPIN_PAUSE)
            cpu_relax();
        else
            sched_yield();
    }
    return false;
}

/* Turns the claim @lo in @s DEAD unless it has moved on.  Its owner's final
 * CAS then fails and it starts over, so this is always safe. */
void table_kill_claim(struct table_slot *s, uint64_t lo)
{
    u128 v = load128(s->state), got;

    while (same_ident((uint64_t)v, lo) && st_phase(v) == PHASE_CLAIMING) {
        got = cas128(s->state, v, st_dead(v));
        if (got == v)
            return;
        v = got;
    }
}

void table_wait_claim(struct table *t, const struct table_kw *kw, const struct table_scan *sc,
                      uint64_t *waited_lo)
{
    struct table_slot *s = slot_at(t, kw->bucket, (unsigned)sc->claim_off);

    if (!table_wait_change(s, sc->claim_lo) && sc->claim_lo == *waited_lo)
        table_kill_claim(s, sc->claim_lo);
    *waited_lo = sc->claim_lo;
}

/* ---- lookup and claim --------------------------------------------------- */

void table_scan_key(struct table *t, const struct table_kw *kw, uint64_t now, struct table_scan *sc)
{
    memset(sc, 0, sizeof(*sc));
    sc->key_off = sc->claim_off = sc->free_off = -1;
    for (unsigned off = 0; off < TABLE_PROBE; off++) {
        struct table_slot *s = slot_at(t, kw->bucket, off);
        u128 v = load128(s->state);
        int r;

        while (st_tag(v) == kw->tag && st_phase(v) == PHASE_LIVE) {
            r = key_match(s, (uint64_t)v, kw);
            if (r == -EAGAIN) {
                v = load128(s->state);
                continue;
            }
            if (r > 0) {
                sc->key_off = (int)off;
                sc->key_lo = (uint64_t)v;
                return;
            }
            break;
        }
        if (st_tag(v) == kw->tag && st_phase(v) == PHASE_CLAIMING && !claim_stale(v, now) &&
            sc->claim_off < 0) {
            sc->claim_off = (int)off;
            sc->claim_lo = (uint64_t)v;
        }
        if (sc->free_off < 0 && reclaimable(v, now)) {
            sc->free_off = (int)off;
            sc->free_state = v;
        }
        /* A key is never placed beyond a FREE slot, and FREE never comes back. */
        if (st_phase(v) == PHASE_FREE)
            return;
    }
}

enum rescan_verdict { RESCAN_CLEAR, RESCAN_FOUND, RESCAN_DEFER };

/*
 * After claiming offset @mine: is there another counter or claim for the key?
 * docs/dev/shm.md "Claim", step 4.  For RESCAN_DEFER, *ret_off and *ret_lo name the
 * lower claim to wait for.
 */
static enum rescan_verdict rescan(struct table *t, const struct table_kw *kw, unsigned mine,
                                  uint64_t now, unsigned *ret_off, uint64_t *ret_lo)
{
    for (unsigned off = 0; off < TABLE_PROBE; off++) {
        struct table_slot *s = slot_at(t, kw->bucket, off);
        u128 v, got;
        int r;

        if (off == mine)
            continue;
        v = load128(s->state);
        for (;;) {
            if (st_phase(v) == PHASE_FREE)
                return RESCAN_CLEAR;
            if (st_tag(v) != kw->tag)
                break;
            if (st_phase(v) == PHASE_LIVE) {
                r = key_match(s, (uint64_t)v, kw);
                if (r == -EAGAIN) {
                    v = load128(s->state);
                    continue;
                }
                if (r > 0)
                    return RESCAN_FOUND;
                break;
            }
            if (st_phase(v) != PHASE_CLAIMING)
                break;
            if (off < mine && !claim_stale(v, now)) {
                *ret_off = off;
                *ret_lo = (uint64_t)v;
                return RESCAN_DEFER;
            }
            /* A higher or stale claim of (probably) the same key loses to ours. */
            got = cas128(s->state, v, st_dead(v));
            if (got == v)
                break;
            v = got;
        }
    }
    return RESCAN_CLEAR;
}

/* update()'s step of table_cas_loop(). */
struct update_arg {
    struct table_slot *s;
    const struct table_limits *lim;
    enum table_op op;
    uint64_t n;
    uint64_t now;
    struct table_result *ret;
    uint64_t *w;                /* TABLE_RESET: the key words of the counter it ends */
};

static u128 update_step(void *arg, u128 v)
{
    struct update_arg *a = arg;
    struct algo_state cur = { .idle = st_idle(v), .data = st_data(v),
                              .debt = (st_flags(v) & SF_DEBT) != 0 }, next;
    unsigned flags = st_flags(v);
    bool changed;

    changed = algo_apply(a->lim, a->op, a->n, a->now, &cur, &next, a->ret);
    if (a->op == TABLE_RESET) {
        /* Read before the CAS, which validates them (same owner). */
        key_read(a->s, a->w);
        return st_dead(v);
    }
    /* REFUSED, kept for when_full = "evict" (docs/dev/shm.md "Eviction"): refused
     * someone since the quota was last full (idle <= now). */
    if (a->lim->evict) {
        if (!a->ret->allowed)
            flags |= SF_REFUSED;
        else if (cur.idle <= a->now)
            flags &= ~SF_REFUSED;
        changed |= flags != st_flags(v);
    }
    if (!changed)
        return v;       /* still a CAS: it turns a possibly torn read into a snapshot */
    return st_make(st_owner(v), PHASE_LIVE, (flags & ~SF_DEBT) | (next.debt ? SF_DEBT : 0),
                   next.idle, next.data);
}

/* Applies @op to the counter found in @s; -EAGAIN when the slot was reset or
 * reclaimed under us (the caller looks the key up again). */
static int update(struct table *t, struct table_slot *s, uint64_t lo,
                  const struct table_limits *lim, enum table_op op, uint64_t n, uint64_t now,
                  struct table_result *ret)
{
    uint64_t w[6] = { 0 };
    struct update_arg a = { .s = s, .lim = lim, .op = op, .n = n, .now = now, .ret = ret, .w = w };
    int r;

    r = table_cas_loop(s, lo, update_step, &a);
    if (r == 0 && op == TABLE_RESET && (w[1] >> 32 & KF_COUNTED))
        table_quota_release(t, w[0]);
    return r;
}

static void fresh_result(const struct table_limits *lim, enum table_op op, uint64_t n,
                         uint64_t now, struct table_result *ret)
{
    struct algo_state none = { 0 }, next;

    algo_apply(lim, op == TABLE_RESET ? TABLE_RESET : TABLE_PEEK, n, now, &none, &next, ret);
}

/*
 * Room for a new counter of @kw: a reclaimable slot (sc->free_off) and, for a
 * capped rule, a quota count, reserved in *ret_qidx (-1: none reserved).
 * -ENOSPC, -EDQUOT (the caller counts them).
 */
static int claim_room(struct table *t, const struct table_kw *kw, const struct table_limits *lim,
                      const struct table_scan *sc, int *ret_qidx)
{
    int qidx, r;

    *ret_qidx = -1;
    if (sc->free_off < 0)
        return -ENOSPC;
    if (!lim->max_actors)
        return 0;
    qidx = table_quota_find(t, kw->w[0], true);
    /* No entry left (over 1024 capped rules): the rule goes uncapped. */
    if (qidx < 0)
        return 0;
    r = quota_add(t, (uint32_t)qidx, 1, lim->max_actors);
    if (r < 0)
        return r;
    *ret_qidx = qidx;
    return 0;
}

/* A claim that found no room (-ENOSPC or -EDQUOT), in the header's counts. */
static void count_no_room(struct table *t, int r)
{
    __atomic_fetch_add(r == -ENOSPC ? &t->hdr->full_events : &t->hdr->quota_events, 1,
                       __ATOMIC_RELAXED);
}

/*
 * Claims the reclaimable slot sc->free_off for a new counter of @kw whose
 * first state is @first, with the quota count @qidx that claim_room()
 * reserved (or -1), which it gives back when it fails.  0: claimed and LIVE;
 * -EAGAIN: start over.
 */
static int claim_slot(struct table *t, const struct table_kw *kw, const struct table_scan *sc,
                      const struct algo_state *first, unsigned flags, uint64_t now, int qidx)
{
    struct table_slot *s = slot_at(t, kw->bucket, (unsigned)sc->free_off);
    u128 old = sc->free_state, mine, got;
    uint64_t oldkey[6], lo = 0;
    enum rescan_verdict verdict;
    unsigned other_off = 0;
    int r;

    if (st_phase(old) == PHASE_LIVE)
        key_read(s, oldkey);
    mine = st_make(kw->tag | ((st_owner(old) >> 24) + 1u) % 256u << 24, PHASE_CLAIMING, 0,
                   now, 0);
    got = cas128(s->state, old, mine);
    if (got != old) {
        r = -EAGAIN;
        goto out;
    }
    if (st_phase(old) == PHASE_LIVE && (oldkey[1] >> 32 & KF_COUNTED))
        table_quota_release(t, oldkey[0]);

    verdict = rescan(t, kw, (unsigned)sc->free_off, now, &other_off, &lo);
    if (verdict != RESCAN_CLEAR) {
        cas128(s->state, mine, st_dead(mine));
        if (verdict == RESCAN_DEFER && !table_wait_change(slot_at(t, kw->bucket, other_off), lo))
            table_kill_claim(slot_at(t, kw->bucket, other_off), lo);
        r = -EAGAIN;
        goto out;
    }
    for (int i = 0; i < 6; i++) {
        uint64_t w = kw->w[i];

        if (i == 1 && qidx >= 0)
            w |= (uint64_t)KF_COUNTED << 32;
        __atomic_store_n(&s->key[i], w, __ATOMIC_RELAXED);
    }
    /* The CAS is a full barrier: the key words are visible before LIVE is. */
    got = cas128(s->state, mine, st_make(st_owner(mine), PHASE_LIVE, flags, first->idle,
                                         first->data));
    if (got != mine) {
        /* Someone took our claim for stale; it did not touch the count. */
        r = -EAGAIN;
        goto out;
    }
    qidx = -1;                          /* the LIVE slot holds the count now */
    r = 0;
out:
    if (qidx >= 0)
        quota_add(t, (uint32_t)qidx, -1, 0);
    return r;
}

/*
 * Claims the reclaimable slot sc->free_off for a new counter of @kw whose first
 * state is @first.  0: claimed and LIVE; -EAGAIN: start over; -EDQUOT;
 * -ENOSPC when the scan found no reclaimable slot (counted in full_events).
 */
int table_claim(struct table *t, const struct table_kw *kw, const struct table_limits *lim,
                const struct table_scan *sc, const struct algo_state *first, unsigned flags,
                uint64_t now)
{
    int qidx, r = claim_room(t, kw, lim, sc, &qidx);

    if (r < 0) {
        count_no_room(t, r);
        return r;
    }
    return claim_slot(t, kw, sc, first, flags, now, qidx);
}

/* ---- eviction (when_full = "evict", docs/dev/shm.md "Eviction") --------------- */

struct evict_pick {
    struct table_slot *s;       /* NULL: none found */
    u128 v;                     /* its state as seen */
    uint64_t kflags;
    bool again;                 /* the key itself appeared meanwhile: look it up again */
};

/*
 * The counter of @kw's rule to evict, among those that can go without
 * giving their actor more than a new counter would (LIVE, not a lease, and
 * at a full quota or neither in debt nor REFUSED): the one back at a full
 * quota soonest of the first TABLE_EVICT_PICK found from the key's bucket,
 * looking at @span slots at most, and past TABLE_EVICT_SPAN only until one
 * is found (a rule whose counters are sparse in the table).  Never the
 * key's own counter or claim: another hit may have made it since the
 * lookup, and then ret->again is set instead (a lookup finds it).  Writes
 * nothing; ret->s is NULL when there is none.
 */
static void evict_pick(struct table *t, const struct table_kw *kw, unsigned span, uint64_t now,
                       struct evict_pick *ret)
{
    unsigned found = 0;

    ret->s = NULL;
    ret->again = false;
    if (span > t->n_slots)
        span = t->n_slots;
    for (unsigned off = 0; off < span && found < TABLE_EVICT_PICK &&
                           !(found && off >= TABLE_EVICT_SPAN); off++) {
        struct table_slot *s = slot_at(t, kw->bucket, off);
        u128 v = load128(s->state);
        uint64_t rule, kw1;

        if (off < TABLE_PROBE && st_tag(v) == kw->tag &&
            ((st_phase(v) == PHASE_CLAIMING && !claim_stale(v, now)) ||
             (st_phase(v) == PHASE_LIVE && key_match(s, (uint64_t)v, kw) != 0))) {
            ret->s = NULL;
            ret->again = true;
            return;
        }
        if (st_phase(v) != PHASE_LIVE ||
            (st_idle(v) > now && (st_flags(v) & (SF_DEBT | SF_REFUSED))))
            continue;
        rule = __atomic_load_n(&s->key[0], __ATOMIC_ACQUIRE);
        kw1 = __atomic_load_n(&s->key[1], __ATOMIC_ACQUIRE);
        /* The key words are the state's owner's (seqlock, as key_match()). */
        if (!same_ident(load_lo(s), (uint64_t)v) || rule != kw->w[0] ||
            (kw1 >> 32 & KF_LEASE))
            continue;
        found++;
        if (!ret->s || st_idle(v) < st_idle(ret->v)) {
            ret->s = s;
            ret->v = v;
            ret->kflags = (uint32_t)(kw1 >> 32);
        }
    }
}

/* Evicts what evict_pick() chose: one CAS to DEAD from the state it saw, so
 * a hit in between keeps the counter.  0, -ENOENT (nothing to evict), or
 * -EAGAIN (the counter changed). */
static int evict_one(struct table *t, const struct table_kw *kw, unsigned span, uint64_t now)
{
    struct evict_pick p;

    evict_pick(t, kw, span, now, &p);
    if (p.again)
        return -EAGAIN;
    if (!p.s)
        return -ENOENT;
    if (cas128(p.s->state, p.v, st_dead(p.v)) != p.v)
        return -EAGAIN;
    if (p.kflags & KF_COUNTED)
        table_quota_release(t, kw->w[0]);
    __atomic_fetch_add(&t->hdr->evictions, 1, __ATOMIC_RELAXED);
    return 0;
}

/* Where an eviction must look for room for @kw: in its probe window when
 * the window is full (-ENOSPC), else (-EDQUOT) in a wider sample. */
static unsigned evict_span(int no_room)
{
    return no_room == -ENOSPC ? TABLE_PROBE : TABLE_EVICT_FAR;
}

/*
 * table_claim() for a hit's attempt @attempt.  With lim->evict, no room
 * (-ENOSPC, -EDQUOT) evicts a counter of the rule and answers -EAGAIN (start
 * over), in the hit's first TABLE_EVICT_MAX attempts; only when there is
 * nothing to evict, or after those, is the answer -ENOSPC or -EDQUOT.
 */
static int claim_new(struct table *t, const struct table_kw *kw, const struct table_limits *lim,
                     const struct table_scan *sc, const struct algo_state *first, unsigned flags,
                     uint64_t now, int attempt)
{
    int qidx, r = claim_room(t, kw, lim, sc, &qidx);

    if (r == 0)
        return claim_slot(t, kw, sc, first, flags, now, qidx);
    if (lim->evict && attempt < TABLE_EVICT_MAX &&
        evict_one(t, kw, evict_span(r), now) != -ENOENT)
        return -EAGAIN;
    count_no_room(t, r);
    return r;
}

void table_key_prepare(const struct table *t, const struct table_key *key,
                       const struct table_limits *lim, struct table_kw *ret)
{
    key_prepare(t, key, lim, ret);
}

void table_prefetch(const struct table *t, const struct table_kw *key)
{
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&t->slots[key->bucket & t->mask], 1, 3);
#else
    (void)t;
    (void)key;
#endif
}

int table_hit(struct table *t, const struct table_key *key, const struct table_limits *lim,
              enum table_op op, uint64_t n, uint64_t now_ms, struct table_result *ret)
{
    struct table_kw kw;

    if (!t || !key || !lim || !ret || (key->actor_len && !key->actor))
        return -EINVAL;
    table_key_prepare(t, key, lim, &kw);
    return table_hit_prepared(t, &kw, lim, op, n, now_ms, ret);
}

int table_hit_prepared(struct table *t, const struct table_kw *key, const struct table_limits *lim,
                       enum table_op op, uint64_t n, uint64_t now_ms, struct table_result *ret)
{
    struct table_scan sc;
    struct algo_state none = { 0 }, first;
    uint64_t waited_lo = 0;
    bool charges;
    int r;

    if (!t || !key || !lim || !ret)
        return -EINVAL;
    r = -EINVAL;
    if (op != TABLE_TAKE && op != TABLE_PEEK && op != TABLE_RESET && op != TABLE_DEBIT)
        goto out;
    r = algo_check(lim);
    if (r < 0)
        goto out;
    r = -EINVAL;
    if (lim->lease && op != TABLE_RESET)
        goto out;
    if (now_ms > ALGO_IDLE_MAX)
        now_ms = ALGO_IDLE_MAX;
    if ((op == TABLE_TAKE || op == TABLE_DEBIT) && n == 0)
        op = TABLE_PEEK;
    charges = op == TABLE_TAKE || op == TABLE_DEBIT;

    r = -EAGAIN;
    for (int attempt = 0; attempt < TABLE_RETRY_MAX && r == -EAGAIN; attempt++) {
        table_scan_key(t, key, now_ms, &sc);
        if (sc.key_off >= 0) {
            r = update(t, slot_at(t, key->bucket, (unsigned)sc.key_off), sc.key_lo, lim, op, n,
                       now_ms, ret);
            continue;
        }
        if (sc.claim_off >= 0 && (charges || attempt == 0)) {
            table_wait_claim(t, key, &sc, &waited_lo);
            continue;
        }
        if (!charges) {
            fresh_result(lim, op, n, now_ms, ret);
            r = 0;
            continue;
        }
        /* A TAKE a full quota would deny consumes nothing and claims nothing. */
        if (!algo_apply(lim, op, n, now_ms, &none, &first, ret)) {
            r = 0;
            continue;
        }
        r = claim_new(t, key, lim, &sc, &first, first.debt ? SF_DEBT : 0, now_ms, attempt);
    }
out:
    /* Nothing half-computed leaks out: an error answers "denied, nothing left". */
    if (r < 0)
        memset(ret, 0, sizeof(*ret));
    return r;
}
/* ---- room for a new counter --------------------------------------------- */

int table_room_prepared(struct table *t, const struct table_kw *key,
                        const struct table_limits *lim, uint64_t now_ms)
{
    struct table_scan sc;
    struct evict_pick p;
    int q, r = 0;

    if (!t || !key || !lim)
        return -EINVAL;
    table_scan_key(t, key, now_ms, &sc);
    if (sc.key_off >= 0 || sc.claim_off >= 0)
        return 0;
    if (lim->max_actors) {
        q = table_quota_find(t, key->w[0], false);
        if (q >= 0 && (uint64_t)(load128(qent(t, (uint32_t)q)) >> 64) >> 1 >= lim->max_actors)
            r = -EDQUOT;
    }
    if (r == 0 && sc.free_off < 0)
        r = -ENOSPC;
    /* A TAKE would make room by evicting a counter of the rule. */
    if (r < 0 && lim->evict) {
        evict_pick(t, key, evict_span(sc.free_off < 0 ? -ENOSPC : r), now_ms, &p);
        if (p.s || p.again)
            r = 0;
    }
    return r;
}

/* ---- the header and control-page words ------------------------------------ */

uint32_t table_slots(const struct table *t)
{
    return t->n_slots;
}

void table_set_generation(struct table *t, uint64_t generation)
{
    __atomic_store_n(t->w_gen, generation, __ATOMIC_RELEASE);
}

uint64_t table_generation(const struct table *t)
{
    return __atomic_load_n(t->w_gen, __ATOMIC_ACQUIRE);
}

void table_set_decision_log(struct table *t, bool on)
{
    if (t->ctl)
        __atomic_store_n(&t->ctl->decision_log, on ? 1 : 0, __ATOMIC_RELEASE);
}

const uint64_t *table_decision_log_word(const struct table *t)
{
    static const uint64_t off;

    return t && t->ctl ? &t->ctl->decision_log : &off;
}

void table_heartbeat(struct table *t, uint64_t now_ms)
{
    __atomic_store_n(t->w_hb, now_ms, __ATOMIC_RELEASE);
}

uint64_t table_last_heartbeat(const struct table *t)
{
    return __atomic_load_n(t->w_hb, __ATOMIC_ACQUIRE);
}

void table_add_fast_hits(struct table *t, uint64_t n)
{
    __atomic_fetch_add(&t->hdr->fast_hits, n, __ATOMIC_RELAXED);
}

void table_add_fast_rule(struct table *t, uint64_t rule_id, const uint64_t n[TABLE_FAST_N])
{
    struct table_fast_rule *e = &t->hdr->fast_rules[TABLE_FAST_RULES - 1];
    uint32_t start = (uint32_t)((rule_id * 0x9e3779b97f4a7c15ull) >> 32) % (TABLE_FAST_RULES - 1);

    /* Id 0 marks a free entry, and TABLE_FAST_OTHER the last: both go there. */
    for (uint32_t i = 0; rule_id != 0 && rule_id != TABLE_FAST_OTHER &&
                         i < TABLE_FAST_RULES - 1; i++) {
        struct table_fast_rule *c = &t->hdr->fast_rules[(start + i) % (TABLE_FAST_RULES - 1)];
        uint64_t id = __atomic_load_n(&c->rule_id, __ATOMIC_ACQUIRE);

        /* A free entry is claimed; a failed CAS says whose it became. */
        if (id == 0 && __atomic_compare_exchange_n(&c->rule_id, &id, rule_id, false,
                                                   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            id = rule_id;
        if (id == rule_id) {
            e = c;
            break;
        }
    }
    for (unsigned k = 0; k < TABLE_FAST_N; k++)
        if (n[k])
            __atomic_fetch_add(&e->n[k], n[k], __ATOMIC_RELAXED);
}

bool table_fast_rule(const struct table *t, unsigned i, uint64_t *ret_id,
                     uint64_t ret_n[TABLE_FAST_N])
{
    const struct table_fast_rule *e = &t->hdr->fast_rules[i];
    uint64_t id = i == TABLE_FAST_RULES - 1 ? TABLE_FAST_OTHER
                                            : __atomic_load_n(&e->rule_id, __ATOMIC_ACQUIRE);
    uint64_t any = 0;

    for (unsigned k = 0; k < TABLE_FAST_N; k++)
        any |= ret_n[k] = __atomic_load_n(&e->n[k], __ATOMIC_RELAXED);
    *ret_id = id;
    return id != 0 && (id != TABLE_FAST_OTHER || any);
}

void table_set_lease_max(struct table *t, uint64_t lease_max)
{
    __atomic_store_n(t->w_lease_max, lease_max, __ATOMIC_RELEASE);
}

uint64_t table_lease_max(const struct table *t)
{
    return __atomic_load_n(t->w_lease_max, __ATOMIC_ACQUIRE);
}

void table_set_when_full(struct table *t, bool allow)
{
    __atomic_store_n(t->w_when_full, allow ? TABLE_FULL_ALLOW : TABLE_FULL_DENY,
                     __ATOMIC_RELEASE);
}

void table_add_fast_full(struct table *t)
{
    __atomic_fetch_add(&t->hdr->fast_full, 1, __ATOMIC_RELAXED);
}

uint64_t table_fast_full(const struct table *t)
{
    return __atomic_load_n(&t->hdr->fast_full, __ATOMIC_RELAXED);
}

int table_when_full(const struct table *t)
{
    uint64_t v = __atomic_load_n(t->w_when_full, __ATOMIC_ACQUIRE);

    return v == TABLE_FULL_ALLOW ? 1 : v == TABLE_FULL_DENY ? 0 : -1;
}

uint64_t table_fast_hits(const struct table *t)
{
    return __atomic_load_n(&t->hdr->fast_hits, __ATOMIC_RELAXED);
}
