/* SPDX-License-Identifier: MIT */
/*
 * table_sweep: divvyd's passes over a whole table: reclaiming expired
 * counters and stale claims and recounting the per-rule live counts
 * (table_sweep()), the live/full/quota numbers (table_stats()) and the
 * walk over live counters that `divvyctl locked` and `top` read
 * (table_foreach()).
 */
#include <errno.h>
#include <string.h>

#include "table_private.h"

/* ---- maintenance -------------------------------------------------------- */

size_t table_sweep(struct table *t, uint64_t now_ms)
{
    uint64_t before[TABLE_QUOTA_ENTRIES], seen[TABLE_QUOTA_ENTRIES];
    size_t reclaimed = 0;

    if (!t)
        return 0;
    for (uint32_t i = 0; i < t->n_slots; i++) {
        struct table_slot *s = &t->slots[i];
        u128 v = load128(s->state), got;
        uint64_t w[6] = { 0 };

        for (;;) {
            bool live = st_phase(v) == PHASE_LIVE;

            if (!(live && st_idle(v) <= now_ms) &&
                !(st_phase(v) == PHASE_CLAIMING && claim_stale(v, now_ms)))
                break;
            if (live)
                key_read(s, w);
            got = cas128(s->state, v, st_dead(v));
            if (got == v) {
                reclaimed++;
                if (live && (w[1] >> 32 & KF_COUNTED))
                    table_quota_release(t, w[0]);
                break;
            }
            v = got;
        }
    }

    /* Recount.  Claims and releases running meanwhile appear in now - before. */
    for (uint32_t q = 0; q < TABLE_QUOTA_ENTRIES; q++) {
        before[q] = (uint64_t)(load128(qent(t, q)) >> 64) >> 1;
        seen[q] = 0;
    }
    for (uint32_t i = 0; i < t->n_slots; i++) {
        struct table_slot *s = &t->slots[i];
        uint64_t lo = load_lo(s), w[6];
        int q;

        if (((lo >> 32) & 3u) != PHASE_LIVE)
            continue;
        key_read(s, w);
        if (!same_ident(load_lo(s), lo) || !(w[1] >> 32 & KF_COUNTED))
            continue;
        q = table_quota_find(t, w[0], false);
        if (q >= 0)
            seen[q]++;
    }
    for (uint32_t q = 0; q < TABLE_QUOTA_ENTRIES; q++) {
        uint64_t *e = qent(t, q);
        u128 v = load128(e), got;

        while ((uint64_t)(v >> 64) & QUOTA_USED) {
            int64_t count = (int64_t)seen[q] + (int64_t)((uint64_t)(v >> 64) >> 1) -
                            (int64_t)before[q];
            uint64_t c = count > 0 ? (uint64_t)count : 0;

            got = cas128(e, v, (u128)(c << 1 | QUOTA_USED) << 64 | (uint64_t)v);
            if (got == v)
                break;
            v = got;
        }
    }
    return reclaimed;
}

void table_stats(struct table *t, uint64_t now_ms, struct table_stats *ret)
{
    uint64_t live = 0;

    memset(ret, 0, sizeof(*ret));
    if (!t)
        return;
    for (uint32_t i = 0; i < t->n_slots; i++) {
        u128 v = load128(t->slots[i].state);

        if (st_phase(v) == PHASE_LIVE && st_idle(v) > now_ms)
            live++;
    }
    ret->slots = t->n_slots;
    ret->live = live;
    ret->full_events = __atomic_load_n(&t->hdr->full_events, __ATOMIC_RELAXED);
    ret->quota_events = __atomic_load_n(&t->hdr->quota_events, __ATOMIC_RELAXED);
    ret->evictions = __atomic_load_n(&t->hdr->evictions, __ATOMIC_RELAXED);
}

int table_foreach(struct table *t, uint64_t now_ms,
                  int (*fn)(const struct table_entry *e, void *userdata), void *userdata)
{
    if (!t || !fn)
        return -EINVAL;
    for (uint32_t i = 0; i < t->n_slots; i++) {
        struct table_slot *s = &t->slots[i];
        u128 v = load128(s->state);
        struct table_entry e;
        uint64_t w[6];
        uint8_t actor[32];
        unsigned algo;
        int r;

        if (st_phase(v) != PHASE_LIVE || st_idle(v) <= now_ms)
            continue;
        v = cas128(s->state, v, v);     /* an atomic snapshot */
        if (st_phase(v) != PHASE_LIVE || st_idle(v) <= now_ms || (st_flags(v) & LF_HOLD))
            continue;
        key_read(s, w);
        if (!same_ident(load_lo(s), (uint64_t)v))
            continue;
        memcpy(actor, &w[2], sizeof(actor));
        algo = (unsigned)(w[1] >> (32 + KF_ALGO_SHIFT)) & 0xffu;
        memset(&e, 0, sizeof(e));
        e.rule_id = w[0];
        e.actor = (const char *)actor;
        e.actor_is_digest = (w[1] >> 32 & KF_DIGEST) != 0;
        e.actor_len = e.actor_is_digest ? 16 : (uint32_t)w[1];
        if (e.actor_len > sizeof(actor))
            e.actor_len = sizeof(actor);
        e.algo = algo <= RULES_ALGO_LOCKOUT ? (enum rules_algo)algo : RULES_ALGO_WINDOW;
        e.used_or_tokens = st_data(v);
        e.data = st_data(v);
        e.debt = !(w[1] >> 32 & KF_LEASE) && (st_flags(v) & SF_DEBT);
        if (e.algo == RULES_ALGO_SLIDING_WINDOW)
            e.used_or_tokens &= ALGO_SLIDING_MAX;
        if (e.algo == RULES_ALGO_TOKEN_BUCKET && e.debt)
            e.used_or_tokens = 0;       /* tokens below zero */
        if (w[1] >> 32 & KF_LEASE) {
            e.lease = true;
            e.lease_left = st_data(v) >> LEASE_SHIFT & LEASE_MASK;
            e.lease_remain = st_data(v) & LEASE_MASK;
            e.used_or_tokens = 0;
        }
        e.expires_ms = st_idle(v);
        r = fn(&e, userdata);
        if (r)
            return r;
    }
    return 0;
}
