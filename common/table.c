/* SPDX-License-Identifier: MIT */
/*
 * table: the host's counter tables, a preallocated file (the private table)
 * or a sealed memfd with its control page (the fast-path table) mapped
 * MAP_SHARED by the daemon and by fast-path clients.  This module owns the
 * format (docs/shm.md is the contract: header, control page, seals, 64-byte
 * slots, the 128-bit state word and the claim protocol), creation,
 * validation and snapshots of the tables, and every access to them.  Slots change state only through one 16-byte
 * compare-and-swap, so no process ever holds a lock in the table and one
 * killed at any instruction leaves nothing that others wait for forever.
 * The algorithms themselves are in algo.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "algo.h"
#include "clock.h"
#include "hash.h"
#include "table.h"

#if !defined(__SIZEOF_INT128__)
#error "the counter table needs unsigned __int128 and a 16-byte compare-and-swap (docs/shm.md)"
#endif
#if !defined(__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16)
#if defined(__x86_64__)
#error "build with -mcx16: the counter table needs an inline cmpxchg16b (docs/shm.md)"
#else
#error "no inline 16-byte compare-and-swap on this target: the counter table cannot be built"
#endif
#endif

#define TABLE_MAGIC         "DIVVYTB1"
#define TABLE_VERSION       1u
#define TABLE_HDR_SIZE      20480u
#define TABLE_SLOT_SIZE     64u
#define TABLE_QUOTA_OFFSET  4096u
#define TABLE_QUOTA_ENTRIES 1024u
#define TABLE_PROBE         64u         /* probe window, slots */
#define TABLE_STALE_MS      2000u       /* a CLAIMING slot older than this is abandoned */
#define TABLE_SPIN_PAUSE    64          /* busy polls before yielding while waiting */
#define TABLE_SPIN_MAX      4096        /* polls before a waited-for claim counts as stalled */
#define TABLE_RETRY_MAX     100000      /* restarts before giving up on a slot that never settles */

#define PHASE_FREE      0u
#define PHASE_CLAIMING  1u
#define PHASE_LIVE      2u
#define PHASE_DEAD      3u

#define KF_DIGEST       (1u << 0)
#define KF_COUNTED      (1u << 1)
#define KF_LEASE        (1u << 2)
#define KF_ALGO_SHIFT   8

#define ST_TAG_MASK     0xffffffull
#define ST_OWNER_MASK   0xffffffffull
#define ST_IDENT_MASK   0x3ffffffffull  /* owner and phase: bits 0..33 */

#define QUOTA_USED      1ull

/* Lease slots (docs/shm.md "Lease slots"): data = left << 24 | remain. */
#define LEASE_SHIFT     24
#define LEASE_MASK      0xffffffull
#define LF_FETCH        1u
#define LF_HOLD         2u

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define LO 0
#define HI 1
#else
#define LO 1
#define HI 0
#endif

/* The state word and quota entries are also reached through uint64_t halves. */
typedef unsigned __int128 u128 __attribute__((may_alias));

struct table_qent {
    _Alignas(16) uint64_t w[2];         /* u128: rule_id | (count << 1 | used) << 64 */
};

struct table_hdr {
    char magic[8];
    uint32_t version;
    uint32_t header_size;
    uint32_t slot_size;
    uint32_t n_slots;
    uint64_t file_size;
    uint8_t boot_id[16];
    uint8_t secret[HASH_KEY_LEN];
    uint32_t quota_entries;
    uint32_t quota_offset;
    uint64_t created_ms;
    uint8_t digest_secret[HASH_KEY_LEN];    /* all zero: digests use secret */
    uint8_t reserved0[32];
    _Alignas(64) uint64_t generation;
    _Alignas(64) uint64_t heartbeat_ms;
    _Alignas(64) uint64_t full_events;
    _Alignas(64) uint64_t quota_events;
    _Alignas(64) uint64_t fast_hits;    /* hits decided by fast-path clients (batched adds) */
    _Alignas(64) uint64_t lease_max;    /* the daemon's store.lease_max; 0: not announced */
    uint64_t when_full;                 /* TABLE_FULL_*: the daemon's table.when_full */
    uint64_t fast_full;                 /* full answers fast-path clients gave (atomic add) */
    _Alignas(64) uint8_t reserved1[3584];
    struct table_qent quota[TABLE_QUOTA_ENTRIES];
};

struct table_slot {
    _Alignas(64) uint64_t state[2];     /* u128 state word */
    uint64_t key[6];                    /* rule_id, actor_len | kflags << 32, actor[32] */
};

_Static_assert(sizeof(struct table_slot) == TABLE_SLOT_SIZE, "slot is 64 bytes");
_Static_assert(_Alignof(struct table_slot) == 64, "slots are cache-line aligned");
_Static_assert(offsetof(struct table_slot, key) == 16, "key words follow the state word");
_Static_assert(offsetof(struct table_hdr, file_size) == 24, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, boot_id) == 32, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, secret) == 48, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, quota_entries) == 64, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, created_ms) == 72, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, digest_secret) == 80, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, generation) == 128, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, heartbeat_ms) == 192, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, full_events) == 256, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, quota_events) == 320, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, fast_hits) == 384, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, lease_max) == 448, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, when_full) == 456, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, fast_full) == 464, "docs/shm.md header");
_Static_assert(offsetof(struct table_hdr, quota) == TABLE_QUOTA_OFFSET, "docs/shm.md header");
_Static_assert(sizeof(struct table_hdr) == TABLE_HDR_SIZE, "docs/shm.md header");
_Static_assert(TABLE_HDR_SIZE % 4096 == 0, "slots start on a page");
_Static_assert(TABLE_SLOTS_MIN >= TABLE_PROBE, "a probe window never wraps onto itself");
_Static_assert(TABLE_SLOTS_MAX <= (1u << 26), "the tag (hash >> 40) must not overlap the bucket");

/* The control page (docs/shm.md "Control page"): divvyd's words, sealed
 * against every writer but divvyd's own mapping. */
#define TABLE_CTL_MAGIC     "DIVVYCT1"
#define TABLE_CTL_VERSION   1u
#define TABLE_CTL_SIZE      4096u
#define TABLE_SEALS         (F_SEAL_SHRINK | F_SEAL_GROW)
#define TABLE_CTL_SEALS     (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE)

struct table_ctl {
    char magic[8];
    uint32_t version;
    uint32_t size;
    uint8_t boot_id[16];
    uint8_t reserved0[32];
    _Alignas(64) uint64_t generation;
    _Alignas(64) uint64_t heartbeat_ms;
    _Alignas(64) uint64_t lease_max;
    uint64_t when_full;
    _Alignas(64) uint8_t reserved1[3840];
};

_Static_assert(offsetof(struct table_ctl, boot_id) == 16, "docs/shm.md control page");
_Static_assert(offsetof(struct table_ctl, generation) == 64, "docs/shm.md control page");
_Static_assert(offsetof(struct table_ctl, heartbeat_ms) == 128, "docs/shm.md control page");
_Static_assert(offsetof(struct table_ctl, lease_max) == 192, "docs/shm.md control page");
_Static_assert(offsetof(struct table_ctl, when_full) == 200, "docs/shm.md control page");
_Static_assert(sizeof(struct table_ctl) == TABLE_CTL_SIZE, "docs/shm.md control page");

struct table {
    uint8_t *base;
    size_t size;
    struct table_hdr *hdr;
    struct table_slot *slots;
    uint32_t n_slots;
    uint32_t mask;
    uint8_t secret[HASH_KEY_LEN];
    uint8_t boot_id[16];                /* as validated or written at map time */
    int fd;                             /* the memfd, or -1 (a table opened by path) */
    int ctl_fd;                         /* the control page's memfd, or -1 */
    struct table_ctl *ctl;              /* mapped control page, or NULL */
    /* divvyd's words: in the header, or in the control page once there is one */
    uint64_t *w_gen, *w_hb, *w_lease_max, *w_when_full;
};

/* A key as it is stored and compared: the six key words and its hash. */
/* ---- atomics ------------------------------------------------------------ */

static u128 cas128(uint64_t *word, u128 expect, u128 desired)
{
    u128 *p = (u128 *)(void *)word;

#if defined(__x86_64__)
    /* Inline lock cmpxchg16b; the 16-byte __atomic forms call libatomic. */
    return __sync_val_compare_and_swap(p, expect, desired);
#else
    __atomic_compare_exchange_n(p, &expect, desired, false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    return expect;
#endif
}

/* Possibly torn: the low half (owner, phase, flags) is read first, with
 * acquire, and is always consistent in itself. */
static u128 load128(uint64_t *word)
{
    uint64_t lo = __atomic_load_n(&word[LO], __ATOMIC_ACQUIRE);
    uint64_t hi = __atomic_load_n(&word[HI], __ATOMIC_RELAXED);

    return (u128)hi << 64 | lo;
}

static uint64_t load_lo(struct table_slot *s)
{
    return __atomic_load_n(&s->state[LO], __ATOMIC_ACQUIRE);
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* ---- state word --------------------------------------------------------- */

static uint32_t st_tag(u128 v)
{
    return (uint32_t)(v & ST_TAG_MASK);
}

static uint32_t st_owner(u128 v)
{
    return (uint32_t)(v & ST_OWNER_MASK);
}

static unsigned st_phase(u128 v)
{
    return (unsigned)(v >> 32) & 3u;
}

static unsigned st_flags(u128 v)
{
    return (unsigned)(v >> 34) & 0x3fu;
}

static uint64_t st_idle(u128 v)
{
    return (uint64_t)(v >> 40) & ALGO_IDLE_MAX;
}

static uint64_t st_data(u128 v)
{
    return (uint64_t)(v >> 80) & ALGO_DATA_MAX;
}

static u128 st_make(uint32_t owner, unsigned phase, unsigned flags, uint64_t idle, uint64_t data)
{
    return (u128)owner | (u128)(phase & 3u) << 32 | (u128)(flags & 0x3fu) << 34 |
           (u128)(idle & ALGO_IDLE_MAX) << 40 | (u128)(data & ALGO_DATA_MAX) << 80;
}

static bool same_ident(uint64_t a, uint64_t b)
{
    return ((a ^ b) & ST_IDENT_MASK) == 0;
}

static u128 st_dead(u128 v)
{
    return st_make(st_owner(v), PHASE_DEAD, 0, 0, 0);
}

static bool claim_stale(u128 v, uint64_t now)
{
    uint64_t at = st_idle(v);

    /* A claim time far in the future cannot come from CLOCK_MONOTONIC. */
    return now >= at + TABLE_STALE_MS || at > now + TABLE_STALE_MS;
}

static bool reclaimable(u128 v, uint64_t now)
{
    switch (st_phase(v)) {
    case PHASE_FREE:
    case PHASE_DEAD:
        return true;
    case PHASE_LIVE:
        return st_idle(v) <= now;
    default:
        return claim_stale(v, now);
    }
}

static struct table_slot *slot_at(struct table *t, uint32_t bucket, unsigned off)
{
    return &t->slots[(bucket + off) & t->mask];
}

/* ---- per-rule live counts (max_actors) ---------------------------------- */

static uint64_t *qent(struct table *t, uint32_t i)
{
    return t->hdr->quota[i].w;
}

/* Index of @rule_id's entry, inserting it when @insert; -ENOENT, -ENOSPC. */
static int quota_find(struct table *t, uint64_t rule_id, bool insert)
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

static void quota_release(struct table *t, uint64_t rule_id)
{
    int idx = quota_find(t, rule_id, false);

    if (idx >= 0)
        quota_add(t, (uint32_t)idx, -1, 0);
}

/* ---- keys --------------------------------------------------------------- */

/* The SipHash-128 key of actor digests: the header's digest_secret, or the
 * secret when that is zero (the fast table, and every table made before the
 * field existed).  Read from the header each time, so no way of opening or
 * creating a table can leave it out; written once, before the first counter. */
static const uint8_t *digest_key(const struct table *t)
{
    static const uint8_t zero[HASH_KEY_LEN];

    return memcmp(t->hdr->digest_secret, zero, sizeof(zero)) != 0 ? t->hdr->digest_secret
                                                                   : t->secret;
}

static void key_prepare(const struct table *t, const struct table_key *key,
                        const struct table_limits *lim, struct table_kw *kw)
{
    uint8_t buf[8 + 32];
    size_t stored;
    uint32_t kflags = (uint32_t)lim->algo << KF_ALGO_SHIFT | (lim->lease ? KF_LEASE : 0);
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

/* Acquire (a plain load on x86) so that the state word re-read that
 * validates these words cannot be ordered before them: the seqlock read. */
static void key_read(struct table_slot *s, uint64_t w[6])
{
    for (int i = 0; i < 6; i++)
        w[i] = __atomic_load_n(&s->key[i], __ATOMIC_ACQUIRE);
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
    if (w[0] != kw->w[0] || (w[1] & ~((uint64_t)KF_COUNTED << 32)) != kw->w[1])
        return 0;
    return memcmp(&w[2], &kw->w[2], 32) == 0;
}

/* ---- waiting for other claimers ----------------------------------------- */

/* Waits (bounded) until slot @s no longer has owner and phase of @lo. */
static bool wait_change(struct table_slot *s, uint64_t lo)
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
static void kill_claim(struct table_slot *s, uint64_t lo)
{
    u128 v = load128(s->state), got;

    while (same_ident((uint64_t)v, lo) && st_phase(v) == PHASE_CLAIMING) {
        got = cas128(s->state, v, st_dead(v));
        if (got == v)
            return;
        v = got;
    }
}

/* ---- lookup and claim --------------------------------------------------- */

struct table_scan {
    int key_off;                /* LIVE slot holding the key, or -1 */
    uint64_t key_lo;
    int claim_off;              /* a fresh CLAIMING slot with the key's tag, or -1 */
    uint64_t claim_lo;
    int free_off;               /* first reclaimable slot, or -1 */
    u128 free_state;
};

static void scan(struct table *t, const struct table_kw *kw, uint64_t now, struct table_scan *sc)
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
 * docs/shm.md "Claim", step 4.  For RESCAN_DEFER, *ret_off and *ret_lo name the
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

/* Applies @op to the counter found in @s; -EAGAIN when the slot was reset or
 * reclaimed under us (the caller looks the key up again). */
static int update(struct table *t, struct table_slot *s, uint64_t lo,
                  const struct table_limits *lim, enum table_op op, uint64_t n, uint64_t now,
                  struct table_result *ret)
{
    u128 v = load128(s->state), nv, got;
    uint64_t w[6] = { 0 };

    for (;;) {
        struct algo_state cur, next;
        bool changed;

        if (!same_ident((uint64_t)v, lo))
            return -EAGAIN;
        cur.idle = st_idle(v);
        cur.data = st_data(v);
        changed = algo_apply(lim, op, n, now, &cur, &next, ret);
        if (op == TABLE_RESET) {
            /* Read before the CAS, which validates them (same owner). */
            key_read(s, w);
            nv = st_dead(v);
        } else if (changed) {
            nv = st_make(st_owner(v), PHASE_LIVE, st_flags(v), next.idle, next.data);
        } else {
            /* Still a CAS: it turns a possibly torn read into a snapshot. */
            nv = v;
        }
        got = cas128(s->state, v, nv);
        if (got == v)
            break;
        v = got;
    }
    if (op == TABLE_RESET && (w[1] >> 32 & KF_COUNTED))
        quota_release(t, w[0]);
    return 0;
}

static void fresh_result(const struct table_limits *lim, enum table_op op, uint64_t n,
                         uint64_t now, struct table_result *ret)
{
    struct algo_state none = { 0, 0 }, next;

    algo_apply(lim, op == TABLE_RESET ? TABLE_RESET : TABLE_PEEK, n, now, &none, &next, ret);
}

/*
 * Claims the reclaimable slot sc->free_off for a new counter of @kw whose first
 * state is @first.  0: claimed and LIVE; -EAGAIN: start over; -EDQUOT.
 */
static int claim(struct table *t, const struct table_kw *kw, const struct table_limits *lim,
                 const struct table_scan *sc, const struct algo_state *first, unsigned flags,
                 uint64_t now)
{
    struct table_slot *s = slot_at(t, kw->bucket, (unsigned)sc->free_off);
    u128 old = sc->free_state, mine, got;
    uint64_t oldkey[6], lo = 0;
    enum rescan_verdict verdict;
    unsigned other_off = 0;
    int qidx = -1, r;

    if (lim->max_actors) {
        qidx = quota_find(t, kw->w[0], true);
        /* No entry left (over 1024 capped rules): the rule goes uncapped. */
        if (qidx >= 0) {
            r = quota_add(t, (uint32_t)qidx, 1, lim->max_actors);
            if (r < 0) {
                __atomic_fetch_add(&t->hdr->quota_events, 1, __ATOMIC_RELAXED);
                return r;
            }
        }
    }
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
        quota_release(t, oldkey[0]);

    verdict = rescan(t, kw, (unsigned)sc->free_off, now, &other_off, &lo);
    if (verdict != RESCAN_CLEAR) {
        cas128(s->state, mine, st_dead(mine));
        if (verdict == RESCAN_DEFER && !wait_change(slot_at(t, kw->bucket, other_off), lo))
            kill_claim(slot_at(t, kw->bucket, other_off), lo);
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
    key_prepare(t, key, lim, &kw);
    return table_hit_prepared(t, &kw, lim, op, n, now_ms, ret);
}

int table_hit_prepared(struct table *t, const struct table_kw *key, const struct table_limits *lim,
                       enum table_op op, uint64_t n, uint64_t now_ms, struct table_result *ret)
{
    struct table_kw kw;
    struct table_scan sc;
    struct algo_state none = { 0, 0 }, first;
    uint64_t waited_lo = 0;
    int r;

    if (!t || !key || !lim || !ret)
        return -EINVAL;
    r = -EINVAL;
    if (op != TABLE_TAKE && op != TABLE_PEEK && op != TABLE_RESET)
        goto out;
    r = algo_check(lim);
    if (r < 0)
        goto out;
    r = -EINVAL;
    if (lim->lease && op != TABLE_RESET)
        goto out;
    if (now_ms > ALGO_IDLE_MAX)
        now_ms = ALGO_IDLE_MAX;
    if (op == TABLE_TAKE && n == 0)
        op = TABLE_PEEK;
    kw = *key;

    r = -EAGAIN;
    for (int attempt = 0; attempt < TABLE_RETRY_MAX && r == -EAGAIN; attempt++) {
        scan(t, &kw, now_ms, &sc);
        if (sc.key_off >= 0) {
            r = update(t, slot_at(t, kw.bucket, (unsigned)sc.key_off), sc.key_lo, lim, op, n,
                       now_ms, ret);
            continue;
        }
        if (sc.claim_off >= 0 && (op == TABLE_TAKE || attempt == 0)) {
            /* Someone is creating a counter with our tag, likely ours: let it
             * finish rather than race it; kill it if it seems stuck. */
            struct table_slot *s = slot_at(t, kw.bucket, (unsigned)sc.claim_off);

            if (!wait_change(s, sc.claim_lo) && sc.claim_lo == waited_lo)
                kill_claim(s, sc.claim_lo);
            waited_lo = sc.claim_lo;
            continue;
        }
        if (op != TABLE_TAKE) {
            fresh_result(lim, op, n, now_ms, ret);
            r = 0;
            continue;
        }
        /* A TAKE a full quota would deny consumes nothing and claims nothing. */
        if (!algo_apply(lim, op, n, now_ms, &none, &first, ret)) {
            r = 0;
            continue;
        }
        if (sc.free_off < 0) {
            __atomic_fetch_add(&t->hdr->full_events, 1, __ATOMIC_RELAXED);
            r = -ENOSPC;
            continue;
        }
        r = claim(t, &kw, lim, &sc, &first, 0, now_ms);
    }
out:
    /* Nothing half-computed leaks out: an error answers "denied, nothing left". */
    if (r < 0)
        memset(ret, 0, sizeof(*ret));
    return r;
}

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

static int lease_update(struct table_slot *s, uint64_t lo, lease_fn fn, void *arg, uint64_t now)
{
    u128 v = load128(s->state), nv, got;

    for (;;) {
        struct algo_state cur, next;
        unsigned flags;

        if (!same_ident((uint64_t)v, lo))
            return -EAGAIN;
        cur.idle = st_idle(v);
        cur.data = st_data(v);
        if (fn(arg, now, true, st_flags(v), &cur, &flags, &next))
            nv = st_make(st_owner(v), PHASE_LIVE, flags, next.idle, next.data);
        else
            nv = v;             /* still a CAS: the answer comes from a snapshot */
        got = cas128(s->state, v, nv);
        if (got == v)
            return 0;
        v = got;
    }
}

/* table_hit()'s lookup, claim and retry loop around a lease transition. */
static int lease_modify(struct table *t, const struct table_key *key,
                        const struct table_limits *lim, lease_fn fn, void *arg, uint64_t now)
{
    struct algo_state none = { 0, 0 }, first;
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
    key_prepare(t, key, lim, &kw);
    r = -EAGAIN;
    for (int attempt = 0; attempt < TABLE_RETRY_MAX && r == -EAGAIN; attempt++) {
        scan(t, &kw, now, &sc);
        if (sc.key_off >= 0) {
            r = lease_update(slot_at(t, kw.bucket, (unsigned)sc.key_off), sc.key_lo, fn, arg,
                             now);
            continue;
        }
        if (sc.claim_off >= 0) {
            struct table_slot *s = slot_at(t, kw.bucket, (unsigned)sc.claim_off);

            if (!wait_change(s, sc.claim_lo) && sc.claim_lo == waited_lo)
                kill_claim(s, sc.claim_lo);
            waited_lo = sc.claim_lo;
            continue;
        }
        if (!fn(arg, now, false, 0, &none, &flags, &first)) {
            r = 0;
            continue;
        }
        if (sc.free_off < 0) {
            __atomic_fetch_add(&t->hdr->full_events, 1, __ATOMIC_RELAXED);
            r = -ENOSPC;
            continue;
        }
        r = claim(t, &kw, lim, &sc, &first, flags, now);
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
                    quota_release(t, w[0]);
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
        q = quota_find(t, w[0], false);
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
        e.algo = algo <= RULES_ALGO_SLIDING_WINDOW ? (enum rules_algo)algo : RULES_ALGO_WINDOW;
        e.used_or_tokens = st_data(v);
        e.data = st_data(v);
        if (e.algo == RULES_ALGO_SLIDING_WINDOW)
            e.used_or_tokens &= ALGO_SLIDING_MAX;
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

/* ---- room for a new counter --------------------------------------------- */

int table_room_prepared(struct table *t, const struct table_kw *key,
                        const struct table_limits *lim, uint64_t now_ms)
{
    struct table_scan sc;
    int q;

    if (!t || !key || !lim)
        return -EINVAL;
    scan(t, key, now_ms, &sc);
    if (sc.key_off >= 0 || sc.claim_off >= 0)
        return 0;
    if (lim->max_actors) {
        q = quota_find(t, key->w[0], false);
        if (q >= 0 && (uint64_t)(load128(qent(t, (uint32_t)q)) >> 64) >> 1 >= lim->max_actors)
            return -EDQUOT;
    }
    return sc.free_off >= 0 ? 0 : -ENOSPC;
}

/* ---- moving counters between tables (docs/shm.md "Moving counters") ------ */

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
    struct algo_state cur = { st_idle(st), st_data(st) }, next;
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
        st_idle(v) == base->idle && st_data(st) >= base->data) {
        uint64_t add = st_data(st) - base->data, used = st_data(v);

        if (!add)
            return false;
        ret->idle = st_idle(v);
        ret->data = used + add > ALGO_DATA_MAX || used + add < used ? ALGO_DATA_MAX : used + add;
        return true;
    }
    if (move_credit(lim, v, now) <= move_credit(lim, st, now))
        return false;
    ret->idle = st_idle(st);
    ret->data = st_data(st);
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
    struct algo_state first = { st_idle(st), st_data(st) }, merged;
    struct table_limits uncapped = *lim;
    struct table_scan sc;
    int r = -EAGAIN;

    for (int attempt = 0; attempt < TABLE_RETRY_MAX && r == -EAGAIN; attempt++) {
        scan(t, kw, now, &sc);
        if (sc.key_off >= 0) {
            struct table_slot *s = slot_at(t, kw->bucket, (unsigned)sc.key_off);
            u128 v = load128(s->state), got;

            while (same_ident((uint64_t)v, sc.key_lo)) {
                if (!move_merge(lim, v, st, base, now, &merged))
                    return 1;
                got = cas128(s->state, v, st_make(st_owner(v), PHASE_LIVE, st_flags(v),
                                                  merged.idle, merged.data));
                if (got == v)
                    return 1;
                v = got;
            }
            continue;
        }
        if (sc.claim_off >= 0) {
            struct table_slot *s = slot_at(t, kw->bucket, (unsigned)sc.claim_off);

            if (!wait_change(s, sc.claim_lo))
                kill_claim(s, sc.claim_lo);
            continue;
        }
        if (sc.free_off < 0)
            return -ENOSPC;
        r = claim(t, kw, &uncapped, &sc, &first, 0, now);
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
            if (algo > RULES_ALGO_SLIDING_WINDOW)
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
                    quota_release(from, w[0]);
                break;
            }
            /* A hit changed it meanwhile: place its newer state too. */
            v = got;
        }
    }
    *ret = st;
    return 0;
}

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

/* ---- the file ----------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int read_boot_id(uint8_t ret[16])
{
    char buf[64];
    uint8_t id[16];
    ssize_t len;
    size_t digits = 0;
    int fd, r;

    fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    len = read(fd, buf, sizeof(buf) - 1);
    r = len < 0 ? -errno : 0;
    close(fd);
    if (r < 0)
        return r;
    for (ssize_t i = 0; i < len && buf[i] != '\n'; i++) {
        int x = hexval(buf[i]);

        if (buf[i] == '-')
            continue;
        if (x < 0 || digits >= 32)
            return -EBADMSG;
        if (digits % 2 == 0)
            id[digits / 2] = (uint8_t)(x << 4);
        else
            id[digits / 2] |= (uint8_t)x;
        digits++;
    }
    if (digits != 32)
        return -EBADMSG;
    memcpy(ret, id, sizeof(id));
    return 0;
}

static uint32_t round_slots(uint32_t n)
{
    uint32_t p = TABLE_SLOTS_MIN;

    while (p < n && p < TABLE_SLOTS_MAX)
        p <<= 1;
    return p;
}

static uint64_t file_size_for(uint32_t n_slots)
{
    return TABLE_HDR_SIZE + (uint64_t)TABLE_SLOT_SIZE * n_slots;
}

/*
 * Checks a table header @h of a file (or snapshot) of @size bytes.
 * @want_slots 0 accepts any valid slot count; @boot_id NULL accepts any
 * boot (a memfd).  0, or -EBADMSG with the reason in @why.
 */
static int check_header(const struct table_hdr *h, uint64_t size, const uint8_t boot_id[16],
                        uint32_t want_slots, uint32_t *ret_slots, char *why, size_t why_len)
{
    if (memcmp(h->magic, TABLE_MAGIC, sizeof(h->magic)) != 0) {
        snprintf(why, why_len, "bad magic");
        return -EBADMSG;
    }
    if (h->version != TABLE_VERSION || h->header_size != TABLE_HDR_SIZE ||
        h->slot_size != TABLE_SLOT_SIZE || h->quota_entries != TABLE_QUOTA_ENTRIES ||
        h->quota_offset != TABLE_QUOTA_OFFSET) {
        snprintf(why, why_len, "layout version %u (header %u, slot %u), want %u (%u, %u)",
                 h->version, h->header_size, h->slot_size, TABLE_VERSION, TABLE_HDR_SIZE,
                 TABLE_SLOT_SIZE);
        return -EBADMSG;
    }
    if (h->n_slots < TABLE_SLOTS_MIN || h->n_slots > TABLE_SLOTS_MAX ||
        (h->n_slots & (h->n_slots - 1)) != 0 || (want_slots && h->n_slots != want_slots)) {
        snprintf(why, why_len, "%u slots, want %u", h->n_slots, want_slots);
        return -EBADMSG;
    }
    if (h->file_size != file_size_for(h->n_slots) || size != h->file_size) {
        snprintf(why, why_len, "file size %llu, header says %llu", (unsigned long long)size,
                 (unsigned long long)h->file_size);
        return -EBADMSG;
    }
    if (boot_id && memcmp(h->boot_id, boot_id, sizeof(h->boot_id)) != 0) {
        snprintf(why, why_len, "made during another boot");
        return -EBADMSG;
    }
    *ret_slots = h->n_slots;
    return 0;
}

/*
 * Checks the header of the open table file @fd.  @want_slots 0 accepts any
 * valid slot count, @boot_id NULL any boot.  0, -EBADMSG (with the reason in
 * @why), or -errno.
 */
static int check_file(int fd, const uint8_t boot_id[16], uint32_t want_slots,
                      uint32_t *ret_slots, char *why, size_t why_len)
{
    struct table_hdr *h = NULL;
    struct stat st;
    ssize_t len;
    int r;

    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    r = -EBADMSG;
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_len, "not a regular file");
        goto out;
    }
    if ((uint64_t)st.st_size < TABLE_HDR_SIZE) {
        snprintf(why, why_len, "file too short for a header (%lld bytes)",
                 (long long)st.st_size);
        goto out;
    }
    h = malloc(sizeof(*h));
    if (!h) {
        r = -ENOMEM;
        goto out;
    }
    len = pread(fd, h, sizeof(*h), 0);
    if (len < 0) {
        r = -errno;
        goto out;
    }
    if ((size_t)len != sizeof(*h)) {
        snprintf(why, why_len, "short header read");
        goto out;
    }
    r = check_header(h, (uint64_t)st.st_size, boot_id, want_slots, ret_slots, why, why_len);
out:
    free(h);
    return r;
}

/* Maps @fd (whose header check_file() accepted or which we just built). */
static int map_file(int fd, uint32_t n_slots, struct table **ret)
{
    struct table *t;
    size_t size = (size_t)file_size_for(n_slots);
    void *p;

    t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int r = -errno;

        free(t);
        return r;
    }
    t->base = p;
    t->size = size;
    t->hdr = p;
    t->slots = (struct table_slot *)(void *)(t->base + TABLE_HDR_SIZE);
    t->n_slots = n_slots;
    t->mask = n_slots - 1;
    memcpy(t->secret, t->hdr->secret, sizeof(t->secret));
    memcpy(t->boot_id, t->hdr->boot_id, sizeof(t->boot_id));
    t->fd = -1;
    t->ctl_fd = -1;
    t->w_gen = &t->hdr->generation;
    t->w_hb = &t->hdr->heartbeat_ms;
    t->w_lease_max = &t->hdr->lease_max;
    t->w_when_full = &t->hdr->when_full;
    *ret = t;
    return 0;
}

static int new_secret(uint8_t secret[HASH_KEY_LEN])
{
    ssize_t got;

    do
        got = getrandom(secret, HASH_KEY_LEN, 0);
    while (got < 0 && errno == EINTR);
    if (got != (ssize_t)HASH_KEY_LEN)
        return got < 0 ? -errno : -EIO;
    return 0;
}

/* Writes a fresh header into @t's mapping (all zeroes before). */
static void init_header(struct table *t, const uint8_t boot_id[16],
                        const uint8_t secret[HASH_KEY_LEN])
{
    memcpy(t->hdr->magic, TABLE_MAGIC, sizeof(t->hdr->magic));
    t->hdr->version = TABLE_VERSION;
    t->hdr->header_size = TABLE_HDR_SIZE;
    t->hdr->slot_size = TABLE_SLOT_SIZE;
    t->hdr->n_slots = t->n_slots;
    t->hdr->file_size = file_size_for(t->n_slots);
    memcpy(t->hdr->boot_id, boot_id, sizeof(t->hdr->boot_id));
    memcpy(t->hdr->secret, secret, HASH_KEY_LEN);
    t->hdr->quota_entries = TABLE_QUOTA_ENTRIES;
    t->hdr->quota_offset = TABLE_QUOTA_OFFSET;
    t->hdr->created_ms = clock_now_ms();
    memcpy(t->secret, secret, HASH_KEY_LEN);
    memcpy(t->boot_id, boot_id, sizeof(t->boot_id));
}

/* Builds a complete table file beside @path and renames it over @path. */
static int create_file(const char *path, uint32_t n_slots, unsigned mode,
                       const uint8_t boot_id[16], struct table **ret)
{
    struct table *t = NULL;
    char *tmp = NULL;
    uint8_t secret[HASH_KEY_LEN];
    int fd = -1, r;

    if (asprintf(&tmp, "%s.XXXXXX", path) < 0) {
        tmp = NULL;
        r = -ENOMEM;
        goto out;
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        r = -errno;
        free(tmp);
        tmp = NULL;
        goto out;
    }
    if (fchmod(fd, mode & 07777) < 0) {
        r = -errno;
        goto out;
    }
    /* posix_fallocate returns the error number instead of setting errno. */
    r = posix_fallocate(fd, 0, (off_t)file_size_for(n_slots));
    if (r) {
        r = -r;
        goto out;
    }
    r = new_secret(secret);
    if (r < 0)
        goto out;
    r = map_file(fd, n_slots, &t);
    if (r < 0)
        goto out;
    init_header(t, boot_id, secret);
    /* Only a fully written file ever appears under @path. */
    if (rename(tmp, path) < 0) {
        r = -errno;
        goto out;
    }
    free(tmp);
    tmp = NULL;
    *ret = t;
    t = NULL;
    r = 0;
out:
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    table_close(t);
    if (fd >= 0)
        close(fd);
    return r;
}

int table_open(const char *path, uint32_t n_slots, unsigned mode, struct table **ret,
               struct table_open_info *ret_info)
{
    struct table_open_info info;
    struct table *t = NULL;
    uint8_t boot_id[16];
    int fd = -1, r;

    memset(&info, 0, sizeof(info));
    if (!path || !ret) {
        r = -EINVAL;
        goto out;
    }
    n_slots = round_slots(n_slots);
    r = read_boot_id(boot_id);
    if (r < 0)
        goto out;
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        r = check_file(fd, boot_id, n_slots, &n_slots, info.reason, sizeof(info.reason));
        if (r == 0) {
            r = map_file(fd, n_slots, &t);
            goto out;
        }
        if (r != -EBADMSG)
            goto out;
        info.rebuilt = true;
    } else if (errno != ENOENT) {
        r = -errno;
        goto out;
    }
    r = create_file(path, n_slots, mode, boot_id, &t);
    if (r < 0)
        goto out;
    info.created = true;
out:
    if (fd >= 0)
        close(fd);
    if (r >= 0) {
        *ret = t;
        if (ret_info)
            *ret_info = info;
        r = 0;
    }
    return r;
}

int table_attach(const char *path, struct table **ret)
{
    char why[160];
    uint8_t boot_id[16];
    uint32_t n_slots = 0;
    int fd = -1, r;

    if (!path || !ret)
        return -EINVAL;
    r = read_boot_id(boot_id);
    if (r < 0)
        goto out;
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        r = -errno;
        goto out;
    }
    r = check_file(fd, boot_id, 0, &n_slots, why, sizeof(why));
    if (r < 0)
        goto out;
    r = map_file(fd, n_slots, ret);
out:
    if (fd >= 0)
        close(fd);
    return r;
}

void table_close(struct table *t)
{
    if (!t)
        return;
    if (t->base)
        munmap(t->base, t->size);
    if (t->ctl)
        munmap(t->ctl, TABLE_CTL_SIZE);
    if (t->fd >= 0)
        close(t->fd);
    if (t->ctl_fd >= 0)
        close(t->ctl_fd);
    free(t);
}

/* ---- memfds (docs/shm.md "Memfds and seals") ------------------------------ */

int table_fd(const struct table *t)
{
    return t ? t->fd : -1;
}

int table_ctl_fd(const struct table *t)
{
    return t ? t->ctl_fd : -1;
}

size_t table_size(const struct table *t)
{
    return t ? t->size : 0;
}

/* Huge pages where the kernel's shmem policy allows them (harmless where it
 * does not), then every page allocated now rather than at the first hits. */
static void populate(void *base, size_t size)
{
    (void)madvise(base, size, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
    (void)madvise(base, size, MADV_POPULATE_WRITE);
#endif
}

int table_create_memfd(uint32_t n_slots, struct table **ret)
{
    struct table *t = NULL;
    uint8_t boot_id[16], secret[HASH_KEY_LEN];
    int fd = -1, r;

    if (!ret)
        return -EINVAL;
    n_slots = round_slots(n_slots);
    r = read_boot_id(boot_id);
    if (r < 0)
        goto out;
    r = new_secret(secret);
    if (r < 0)
        goto out;
    fd = memfd_create("divvy-fast-table", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)file_size_for(n_slots)) < 0) {
        r = -errno;
        goto out;
    }
    r = map_file(fd, n_slots, &t);
    if (r < 0)
        goto out;
    populate(t->base, t->size);
    init_header(t, boot_id, secret);
    /* Sealed before anyone else can have the fd: its size is final. */
    if (fcntl(fd, F_ADD_SEALS, TABLE_SEALS | F_SEAL_SEAL) < 0) {
        r = -errno;
        goto out;
    }
    t->fd = fd;
    fd = -1;
    *ret = t;
    t = NULL;
    r = 0;
out:
    table_close(t);
    if (fd >= 0)
        close(fd);
    return r;
}

int table_attach_fd(int fd, uint32_t n_slots, struct table **ret, char *why, size_t why_len)
{
    char scratch[160];
    uint32_t got_slots = 0;
    int seals, r;

    if (fd < 0 || !ret)
        return -EINVAL;
    if (!why) {
        why = scratch;
        why_len = sizeof(scratch);
    }
    seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & TABLE_SEALS) != TABLE_SEALS) {
        snprintf(why, why_len, "not a memfd sealed against resizing");
        return -EBADMSG;
    }
    /* No boot id check: a memfd is memory of this boot (divvyd's, or kept
     * for it in systemd's fd store, neither outlives a reboot), and a process
     * in a container (systemd-nspawn) may read another boot_id file than
     * divvyd (ProtectProc=) does. */
    r = check_file(fd, NULL, n_slots, &got_slots, why, why_len);
    if (r < 0)
        return r;
    r = map_file(fd, got_slots, ret);
    if (r < 0)
        return r;
    (void)madvise((*ret)->base, (*ret)->size, MADV_HUGEPAGE);
    (*ret)->fd = fd;
    return 0;
}

static void ctl_use(struct table *t, struct table_ctl *c, int fd)
{
    t->ctl = c;
    t->ctl_fd = fd;
    t->w_gen = &c->generation;
    t->w_hb = &c->heartbeat_ms;
    t->w_lease_max = &c->lease_max;
    t->w_when_full = &c->when_full;
}

int table_ctl_create(struct table *t)
{
    struct table_ctl *c = MAP_FAILED;
    uint8_t boot_id[16];
    int fd = -1, r;

    if (!t || t->ctl)
        return -EINVAL;
    r = read_boot_id(boot_id);
    if (r < 0)
        goto out;
    fd = memfd_create("divvy-control", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, TABLE_CTL_SIZE) < 0) {
        r = -errno;
        goto out;
    }
    c = mmap(NULL, TABLE_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (c == MAP_FAILED) {
        r = -errno;
        goto out;
    }
    memcpy(c->magic, TABLE_CTL_MAGIC, sizeof(c->magic));
    c->version = TABLE_CTL_VERSION;
    c->size = TABLE_CTL_SIZE;
    memcpy(c->boot_id, boot_id, sizeof(c->boot_id));
    /* Our mapping stays writable; no mapping or write() made after this can. */
    if (fcntl(fd, F_ADD_SEALS, TABLE_CTL_SEALS | F_SEAL_SEAL) < 0) {
        r = -errno;
        goto out;
    }
    ctl_use(t, c, fd);
    c = MAP_FAILED;
    fd = -1;
    r = 0;
out:
    if (c != MAP_FAILED)
        munmap(c, TABLE_CTL_SIZE);
    if (fd >= 0)
        close(fd);
    return r;
}

int table_ctl_attach(struct table *t, int fd)
{
    struct table_ctl *c;
    struct stat st;
    int seals;

    if (!t || fd < 0 || t->ctl)
        return -EINVAL;
    if (fstat(fd, &st) < 0)
        return -errno;
    seals = fcntl(fd, F_GET_SEALS);
    if (!S_ISREG(st.st_mode) || st.st_size != TABLE_CTL_SIZE || seals < 0 ||
        (seals & TABLE_CTL_SEALS) != TABLE_CTL_SEALS)
        return -EBADMSG;
    c = mmap(NULL, TABLE_CTL_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    if (c == MAP_FAILED)
        return -errno;
    if (memcmp(c->magic, TABLE_CTL_MAGIC, sizeof(c->magic)) != 0 ||
        c->version != TABLE_CTL_VERSION || c->size != TABLE_CTL_SIZE ||
        /* The table's boot, not the boot_id file this process reads: in a
         * container that may be another (see table_attach_fd()). */
        memcmp(c->boot_id, t->boot_id, sizeof(t->boot_id)) != 0) {
        munmap(c, TABLE_CTL_SIZE);
        return -EBADMSG;
    }
    ctl_use(t, c, fd);
    return 0;
}

/* ---- snapshots ------------------------------------------------------------ */

#define SNAPSHOT_TRIES  8       /* re-reads of a slot whose key words keep changing */

/* An atomic copy of a 16-byte word: a CAS that writes back what it finds
 * (an all-zero word is "replaced" by zero). */
static u128 snap128(uint64_t *word)
{
    return cas128(word, 0, 0);
}

int table_snapshot(struct table *t, void *buf, size_t len)
{
    struct table_hdr *h = buf;
    struct table_slot *out;

    if (!t || !buf || len != t->size)
        return -EINVAL;
    memcpy(h, t->hdr, offsetof(struct table_hdr, quota));
    /* The identity words as this process knows them, not as the mapping
     * says now: a fast-group member may have rewritten the header. */
    memcpy(h->magic, TABLE_MAGIC, sizeof(h->magic));
    h->version = TABLE_VERSION;
    h->header_size = TABLE_HDR_SIZE;
    h->slot_size = TABLE_SLOT_SIZE;
    h->n_slots = t->n_slots;
    h->file_size = t->size;
    memcpy(h->boot_id, t->boot_id, sizeof(h->boot_id));
    memcpy(h->secret, t->secret, sizeof(h->secret));
    h->quota_entries = TABLE_QUOTA_ENTRIES;
    h->quota_offset = TABLE_QUOTA_OFFSET;
    h->full_events = __atomic_load_n(&t->hdr->full_events, __ATOMIC_RELAXED);
    h->quota_events = __atomic_load_n(&t->hdr->quota_events, __ATOMIC_RELAXED);
    h->fast_hits = __atomic_load_n(&t->hdr->fast_hits, __ATOMIC_RELAXED);
    h->fast_full = __atomic_load_n(&t->hdr->fast_full, __ATOMIC_RELAXED);
    for (uint32_t q = 0; q < TABLE_QUOTA_ENTRIES; q++) {
        u128 v = snap128(qent(t, q));

        memcpy(h->quota[q].w, &v, sizeof(v));
    }
    out = (struct table_slot *)(void *)((uint8_t *)buf + TABLE_HDR_SIZE);
    for (uint32_t i = 0; i < t->n_slots; i++) {
        struct table_slot *s = &t->slots[i];
        uint64_t w[6] = { 0 };
        u128 v = 0;

        /* Slots never return to FREE: a FREE low half is a FREE slot. */
        if (load_lo(s) != 0) {
            int tries;

            for (tries = 0; tries < SNAPSHOT_TRIES; tries++) {
                v = snap128(s->state);
                key_read(s, w);
                if (same_ident(load_lo(s), (uint64_t)v))
                    break;
            }
            if (tries == SNAPSHOT_TRIES)
                v = st_dead(v);
        }
        memcpy(out[i].state, &v, sizeof(v));
        memcpy(out[i].key, w, sizeof(w));
    }
    return 0;
}

int table_restore(struct table *t, const void *buf, size_t len, char *why, size_t why_len)
{
    const struct table_hdr *h = buf;
    uint8_t boot_id[16];
    uint32_t n_slots = 0;
    int r;

    if (!t || !buf || len < sizeof(*h))
        return -EINVAL;
    r = read_boot_id(boot_id);
    if (r < 0)
        return r;
    r = check_header(h, len, boot_id, t->n_slots, &n_slots, why, why_len);
    if (r < 0)
        return r;
    /* Nobody else maps @t yet: plain copies.  The size and magic are equal. */
    memcpy(t->base, buf, len);
    memcpy(t->secret, t->hdr->secret, sizeof(t->secret));
    memcpy(t->boot_id, t->hdr->boot_id, sizeof(t->boot_id));
    return 0;
}
