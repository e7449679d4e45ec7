/* SPDX-License-Identifier: MIT */
/*
 * table_move: moving counters between tables when a reload moves a rule
 * into or out of the fast path (docs/dev/shm.md "Moving counters"), divvyd
 * only: a copy pass and a moving pass that merges into counters the
 * destination already has, and table_adopt_digests().
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "table_private.h"

/* ---- moving counters between tables (docs/dev/shm.md "Moving counters") ------ */

/* @w, key words read from a slot of another table, as @t stores and finds
 * them: the same words (without the counted flag), hashed with @t's secret. */
static void key_rekey(const struct table *t, const uint64_t w[6], struct table_kw *kw)
{
    uint8_t buf[8 + 32];
    size_t stored = (w[1] >> 32 & KF_DIGEST) ? 16 : (uint32_t)w[1];
    uint64_t h;

    if (stored > 32)
        stored = 32;
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(w[0] >> (8 * i));
    memcpy(buf + 8, &w[2], 32);
    h = hash_siphash(t->secret, buf, 8 + stored);
    memcpy(kw->w, w, sizeof(kw->w));
    kw->w[1] &= ~((uint64_t)KF_COUNTED << 32);
    kw->tag = (uint32_t)(h >> 40);
    kw->bucket = (uint32_t)h & t->mask;
}

/* What the copy pass placed for one source slot: the moving pass adds only
 * what changed since (see move_place()). */
struct table_move_base {
    uint32_t slot;              /* index in the source table */
    uint64_t lo;                /* its low state half then (owner, phase) */
    uint64_t idle, data;        /* the state placed */
};

/* Credit a counter in state @st has left now, under @lim. */
static uint64_t move_credit(const struct table_limits *lim, u128 st, uint64_t now)
{
    struct algo_state cur = { st_idle(st), st_data(st), (st_flags(st) & SF_DEBT) != 0 }, next;
    struct table_result res;

    algo_apply(lim, TABLE_PEEK, 0, now, &cur, &next, &res);
    return res.credit;
}

/*
 * The state of the key's existing counter @v after merging the source's
 * state @st into it.  With @base (what an earlier placement of this source
 * counter put there) and a window counter whose window is the same in all
 * three, exact: the hits the source took since are added.  Otherwise the
 * state with less credit left.  False when @v stays as it is.
 */
static bool move_merge(const struct table_limits *lim, u128 v, u128 st,
                       const struct table_move_base *base, uint64_t now, struct algo_state *ret)
{
    if (base && lim->algo == RULES_ALGO_WINDOW && st_idle(st) == base->idle &&
        st_idle(v) == base->idle && st_data(st) >= base->data &&
        !((st_flags(st) | st_flags(v)) & SF_DEBT)) {
        /* (A count in debt encodes its window's end differently: below.) */
        uint64_t add = st_data(st) - base->data, used = st_data(v);

        if (!add)
            return false;
        ret->idle = st_idle(v);
        ret->debt = false;
        ret->data = used + add > ALGO_DATA_MAX || used + add < used ? ALGO_DATA_MAX : used + add;
        return true;
    }
    if (move_credit(lim, v, now) <= move_credit(lim, st, now))
        return false;
    ret->idle = st_idle(st);
    ret->data = st_data(st);
    ret->debt = (st_flags(st) & SF_DEBT) != 0;
    return true;
}

/*
 * Puts a counter of @kw in state @st (LIVE, unexpired) into @t: claims a slot
 * for it, or, when @t has the key already, merges (move_merge()).  0 claimed,
 * 1 met an existing counter, -ENOSPC.
 */
static int move_place(struct table *t, const struct table_kw *kw, const struct table_limits *lim,
                      u128 st, const struct table_move_base *base, uint64_t now)
{
    struct algo_state first = { st_idle(st), st_data(st), (st_flags(st) & SF_DEBT) != 0 }, merged;
    struct table_limits uncapped = *lim;
    struct table_scan sc;
    int r = -EAGAIN;

    for (int attempt = 0; attempt < TABLE_RETRY_MAX && r == -EAGAIN; attempt++) {
        table_scan_key(t, kw, now, &sc);
        if (sc.key_off >= 0) {
            struct table_slot *s = slot_at(t, kw->bucket, (unsigned)sc.key_off);
            u128 v = load128(s->state), got;

            while (same_ident((uint64_t)v, sc.key_lo)) {
                if (!move_merge(lim, v, st, base, now, &merged))
                    return 1;
                got = cas128(s->state, v,
                             st_make(st_owner(v), PHASE_LIVE,
                                     (st_flags(v) & ~SF_DEBT) | (merged.debt ? SF_DEBT : 0),
                                     merged.idle, merged.data));
                if (got == v)
                    return 1;
                v = got;
            }
            continue;
        }
        if (sc.claim_off >= 0) {
            struct table_slot *s = slot_at(t, kw->bucket, (unsigned)sc.claim_off);

            if (!table_wait_change(s, sc.claim_lo))
                table_kill_claim(s, sc.claim_lo);
            continue;
        }
        if (sc.free_off < 0)
            return -ENOSPC;
        r = table_claim(t, kw, &uncapped, &sc, &first, first.debt ? SF_DEBT : 0, now);
        /* At max_actors the counter still moves, uncounted (it holds no
         * quota entry count): losing it would hand the actor a fresh quota. */
        if (r == -EDQUOT) {
            uncapped.max_actors = 0;
            r = -EAGAIN;
        }
    }
    return r;
}

int table_adopt_digests(struct table *t, const struct table *from)
{
    uint8_t key[HASH_KEY_LEN];

    if (!t || !from)
        return -EINVAL;
    memcpy(key, digest_key(from), sizeof(key));
    if (memcmp(digest_key(t), key, sizeof(key)) == 0)
        return 0;
    for (uint32_t i = 0; i < t->n_slots; i++)
        if (st_phase(load128(t->slots[i].state)) != PHASE_FREE)
            return -EBUSY;
    memcpy(t->hdr->digest_secret, key, sizeof(key));
    return 0;
}

/* The copy pass's record of slot @i (still the same counter: owner @lo), or NULL.
 * Records are in slot order and so are the moving pass's lookups. */
static const struct table_move_base *log_find(struct table_move_log *log, uint32_t i, uint64_t lo)
{
    while (log && log->pos < log->n && log->v[log->pos].slot < i)
        log->pos++;
    if (!log || log->pos >= log->n || log->v[log->pos].slot != i ||
        !same_ident(log->v[log->pos].lo, lo))
        return NULL;
    return &log->v[log->pos];
}

/* Records what a copy placed for slot @i; without memory the moving pass
 * just merges by credit for that counter. */
static void log_add(struct table_move_log *log, uint32_t i, u128 v)
{
    if (!log)
        return;
    if (log->n == log->cap) {
        size_t cap = log->cap ? 2 * log->cap : 256;
        struct table_move_base *grown = realloc(log->v, cap * sizeof(*grown));

        if (!grown)
            return;
        log->v = grown;
        log->cap = cap;
    }
    log->v[log->n++] = (struct table_move_base){ i, (uint64_t)v, st_idle(v), st_data(v) };
}

void table_move_log_free(struct table_move_log *log)
{
    if (!log)
        return;
    free(log->v);
    memset(log, 0, sizeof(*log));
}

int table_move(struct table *from, bool remove, table_move_fn pick, void *arg,
               struct table_move_log *log, uint64_t now_ms, struct table_move_stats *ret)
{
    struct table_move_stats st = { 0 };

    if (!from || !pick || !ret)
        return -EINVAL;
    if (log)
        log->pos = 0;
    for (uint32_t i = 0; i < from->n_slots; i++) {
        struct table_slot *s = &from->slots[i];
        u128 v = load128(s->state), got;
        struct table_move_base placed;
        const struct table_move_base *base = NULL;
        bool first = true;

        while (st_phase(v) == PHASE_LIVE && st_idle(v) > now_ms) {
            struct table_limits lim;
            struct table *to;
            struct table_kw kw;
            uint64_t w[6];
            unsigned algo;
            int r;

            v = cas128(s->state, v, v);         /* an atomic snapshot */
            if (st_phase(v) != PHASE_LIVE || st_idle(v) <= now_ms)
                break;
            key_read(s, w);
            if (!same_ident(load_lo(s), (uint64_t)v)) {
                v = load128(s->state);
                continue;
            }
            /* Leases are credit held from Redis, not counts: never moved. */
            if (w[1] >> 32 & KF_LEASE)
                break;
            algo = (unsigned)(w[1] >> (32 + KF_ALGO_SHIFT)) & 0xffu;
            memset(&lim, 0, sizeof(lim));
            if (algo > RULES_ALGO_LOCKOUT)
                break;
            to = pick(w[0], (enum rules_algo)algo, arg, &lim);
            if (!to || to == from || lim.algo != (enum rules_algo)algo || lim.lease ||
                algo_check(&lim) < 0)
                break;
            /* A digest keyed differently from @to's cannot be found there. */
            if ((w[1] >> 32 & KF_DIGEST) &&
                memcmp(digest_key(from), digest_key(to), HASH_KEY_LEN) != 0) {
                st.digest++;
                break;
            }
            if (first && remove)
                base = log_find(log, i, (uint64_t)v);
            key_rekey(to, w, &kw);
            r = move_place(to, &kw, &lim, v, base, now_ms);
            if (r < 0) {
                st.full++;
                break;
            }
            /* The destination now holds this state: a re-placement adds what follows. */
            placed = (struct table_move_base){ i, (uint64_t)v, st_idle(v), st_data(v) };
            base = &placed;
            if (first) {
                st.moved++;
                st.merged += r == 1;
                first = false;
            }
            if (!remove) {
                log_add(log, i, v);
                break;
            }
            got = cas128(s->state, v, st_dead(v));
            if (got == v) {
                if (w[1] >> 32 & KF_COUNTED)
                    table_quota_release(from, w[0]);
                break;
            }
            /* A hit changed it meanwhile: place its newer state too. */
            v = got;
        }
    }
    *ret = st;
    return 0;
}
