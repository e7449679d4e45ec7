/* SPDX-License-Identifier: MIT */
/*
 * table_private: what the files of the table module share and nothing else
 * includes (docs/dev/shm.md is the contract): the file and control-page layouts,
 * struct table, the 16-byte atomics, the state-word accessors, and the
 * helpers one stage of the module calls in another.  The stages are
 * table.c (lookup, claim and the CAS updates: what every process that
 * counts runs), table_lease.c, table_map.c (checking and mapping an
 * existing table), and, for divvyd only, table_create.c, table_sweep.c,
 * table_move.c and table_snapshot.c.
 */
#ifndef DIVVY_TABLE_PRIVATE_H
#define DIVVY_TABLE_PRIVATE_H

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>

#include "algo.h"
#include "hash.h"
#include "table.h"

#if !defined(__SIZEOF_INT128__)
#error "the counter table needs unsigned __int128 and a 16-byte compare-and-swap (docs/dev/shm.md)"
#endif
#if !defined(__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16)
#if defined(__x86_64__)
#error "build with -mcx16: the counter table needs an inline cmpxchg16b (docs/dev/shm.md)"
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
#define TABLE_EVICT_PICK    8u          /* eviction: candidates a sample stops at ... */
#define TABLE_EVICT_SPAN    256u        /* ... or, for a rule at max_actors, at one past */
#define TABLE_EVICT_FAR     4096u       /* this many slots, and at this many in any case */
#define TABLE_EVICT_MAX     8           /* a hit evicts only in its first attempts, this many */

#define PHASE_FREE      0u
#define PHASE_CLAIMING  1u
#define PHASE_LIVE      2u
#define PHASE_DEAD      3u

#define KF_DIGEST       (1u << 0)
#define KF_COUNTED      (1u << 1)
#define KF_LEASE        (1u << 2)
#define KF_CONTINUOUS   (1u << 3)       /* a continuous token bucket: not a stepped one */
#define KF_ALGO_SHIFT   8

#define ST_TAG_MASK     0xffffffull
#define ST_OWNER_MASK   0xffffffffull
#define ST_IDENT_MASK   0x3ffffffffull  /* owner and phase: bits 0..33 */

#define QUOTA_USED      1ull

/* Lease slots (docs/dev/shm.md "Lease slots"): data = left << 24 | remain. */
#define LEASE_SHIFT     24
#define LEASE_MASK      0xffffffull
#define LF_FETCH        1u
#define LF_HOLD         2u

/* Counter slots' state flags (docs/dev/shm.md "State word"). */
#define SF_DEBT         4u      /* data encodes a DEBIT's debt (struct algo_state debt) */
#define SF_REFUSED      8u      /* refused a request since its quota was last full (eviction) */

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

struct table_fast_rule {
    uint64_t rule_id;                   /* 0: free; set once with a CAS, never cleared */
    uint64_t n[TABLE_FAST_N];           /* per outcome (table.h), relaxed atomic adds */
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
    uint64_t decision_log;      /* beside generation: the line every decision reads */
    _Alignas(64) uint64_t heartbeat_ms;
    _Alignas(64) uint64_t full_events;
    _Alignas(64) uint64_t quota_events;
    _Alignas(64) uint64_t fast_hits;    /* hits decided by fast-path clients (batched adds) */
    _Alignas(64) uint64_t lease_max;    /* the daemon's store.lease_max; 0: not announced */
    uint64_t when_full;                 /* TABLE_FULL_*: the daemon's table.when_full */
    uint64_t fast_full;                 /* full answers fast-path clients gave (atomic add) */
    uint64_t evictions;                 /* counters when_full = "evict" forgot (atomic add) */
    /* Fast-path decisions per rule (table_add_fast_rule()); a table created
     * before this area existed reads zeros there (free entries). */
    _Alignas(64) struct table_fast_rule fast_rules[TABLE_FAST_RULES];
    uint8_t reserved1[3584 - TABLE_FAST_RULES * sizeof(struct table_fast_rule)];
    struct table_qent quota[TABLE_QUOTA_ENTRIES];
};

struct table_slot {
    _Alignas(64) uint64_t state[2];     /* u128 state word */
    uint64_t key[6];                    /* rule_id, actor_len | kflags << 32, actor[32] */
};

_Static_assert(sizeof(struct table_slot) == TABLE_SLOT_SIZE, "slot is 64 bytes");
_Static_assert(_Alignof(struct table_slot) == 64, "slots are cache-line aligned");
_Static_assert(offsetof(struct table_slot, key) == 16, "key words follow the state word");
_Static_assert(offsetof(struct table_hdr, file_size) == 24, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, boot_id) == 32, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, secret) == 48, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, quota_entries) == 64, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, created_ms) == 72, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, digest_secret) == 80, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, generation) == 128, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, heartbeat_ms) == 192, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, full_events) == 256, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, quota_events) == 320, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, fast_hits) == 384, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, lease_max) == 448, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, when_full) == 456, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, fast_full) == 464, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, evictions) == 472, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, fast_rules) == 512, "docs/dev/shm.md header");
_Static_assert(sizeof(struct table_fast_rule) == 40, "docs/dev/shm.md header");
_Static_assert(offsetof(struct table_hdr, quota) == TABLE_QUOTA_OFFSET, "docs/dev/shm.md header");
_Static_assert(sizeof(struct table_hdr) == TABLE_HDR_SIZE, "docs/dev/shm.md header");
_Static_assert(TABLE_HDR_SIZE % 4096 == 0, "slots start on a page");
_Static_assert(TABLE_SLOTS_MIN >= TABLE_PROBE, "a probe window never wraps onto itself");
_Static_assert(TABLE_SLOTS_MAX <= (1u << 26), "the tag (hash >> 40) must not overlap the bucket");

/* The control page (docs/dev/shm.md "Control page"): divvyd's words, sealed
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
    uint64_t decision_log;      /* beside generation: the line every decision reads */
    _Alignas(64) uint64_t heartbeat_ms;
    _Alignas(64) uint64_t lease_max;
    uint64_t when_full;
    _Alignas(64) uint8_t reserved1[3840];
};

_Static_assert(offsetof(struct table_ctl, boot_id) == 16, "docs/dev/shm.md control page");
_Static_assert(offsetof(struct table_ctl, generation) == 64, "docs/dev/shm.md control page");
_Static_assert(offsetof(struct table_ctl, decision_log) == 72, "docs/dev/shm.md control page");
_Static_assert(offsetof(struct table_ctl, heartbeat_ms) == 128, "docs/dev/shm.md control page");
_Static_assert(offsetof(struct table_ctl, lease_max) == 192, "docs/dev/shm.md control page");
_Static_assert(offsetof(struct table_ctl, when_full) == 200, "docs/dev/shm.md control page");
_Static_assert(sizeof(struct table_ctl) == TABLE_CTL_SIZE, "docs/dev/shm.md control page");

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

/* ---- atomics ------------------------------------------------------------ */

static inline u128 cas128(uint64_t *word, u128 expect, u128 desired)
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
static inline u128 load128(uint64_t *word)
{
    uint64_t lo = __atomic_load_n(&word[LO], __ATOMIC_ACQUIRE);
    uint64_t hi = __atomic_load_n(&word[HI], __ATOMIC_RELAXED);

    return (u128)hi << 64 | lo;
}

static inline uint64_t load_lo(struct table_slot *s)
{
    return __atomic_load_n(&s->state[LO], __ATOMIC_ACQUIRE);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* ---- state word --------------------------------------------------------- */

static inline uint32_t st_tag(u128 v)
{
    return (uint32_t)(v & ST_TAG_MASK);
}

static inline uint32_t st_owner(u128 v)
{
    return (uint32_t)(v & ST_OWNER_MASK);
}

static inline unsigned st_phase(u128 v)
{
    return (unsigned)(v >> 32) & 3u;
}

static inline unsigned st_flags(u128 v)
{
    return (unsigned)(v >> 34) & 0x3fu;
}

static inline uint64_t st_idle(u128 v)
{
    return (uint64_t)(v >> 40) & ALGO_IDLE_MAX;
}

static inline uint64_t st_data(u128 v)
{
    return (uint64_t)(v >> 80) & ALGO_DATA_MAX;
}

static inline u128 st_make(uint32_t owner, unsigned phase, unsigned flags, uint64_t idle,
                           uint64_t data)
{
    return (u128)owner | (u128)(phase & 3u) << 32 | (u128)(flags & 0x3fu) << 34 |
           (u128)(idle & ALGO_IDLE_MAX) << 40 | (u128)(data & ALGO_DATA_MAX) << 80;
}

static inline bool same_ident(uint64_t a, uint64_t b)
{
    return ((a ^ b) & ST_IDENT_MASK) == 0;
}

static inline u128 st_dead(u128 v)
{
    return st_make(st_owner(v), PHASE_DEAD, 0, 0, 0);
}

static inline bool claim_stale(u128 v, uint64_t now)
{
    uint64_t at = st_idle(v);

    /* A claim time far in the future cannot come from CLOCK_MONOTONIC. */
    return now >= at + TABLE_STALE_MS || at > now + TABLE_STALE_MS;
}

static inline bool reclaimable(u128 v, uint64_t now)
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

static inline struct table_slot *slot_at(struct table *t, uint32_t bucket, unsigned off)
{
    return &t->slots[(bucket + off) & t->mask];
}

static inline uint64_t *qent(struct table *t, uint32_t i)
{
    return t->hdr->quota[i].w;
}

/* The SipHash-128 key of actor digests: the header's digest_secret, or the
 * secret when that is zero (the fast table, and every table made before the
 * field existed).  Read from the header each time, so no way of opening or
 * creating a table can leave it out; written once, before the first counter. */
static inline const uint8_t *digest_key(const struct table *t)
{
    static const uint8_t zero[HASH_KEY_LEN];

    return memcmp(t->hdr->digest_secret, zero, sizeof(zero)) != 0 ? t->hdr->digest_secret
                                                                   : t->secret;
}

/* Acquire (a plain load on x86) so that the state word re-read that
 * validates these words cannot be ordered before them: the seqlock read. */
static inline void key_read(struct table_slot *s, uint64_t w[6])
{
    /* Six loads, not a loop: this is on every hit's path. */
    w[0] = __atomic_load_n(&s->key[0], __ATOMIC_ACQUIRE);
    w[1] = __atomic_load_n(&s->key[1], __ATOMIC_ACQUIRE);
    w[2] = __atomic_load_n(&s->key[2], __ATOMIC_ACQUIRE);
    w[3] = __atomic_load_n(&s->key[3], __ATOMIC_ACQUIRE);
    w[4] = __atomic_load_n(&s->key[4], __ATOMIC_ACQUIRE);
    w[5] = __atomic_load_n(&s->key[5], __ATOMIC_ACQUIRE);
}

static inline uint64_t table_file_size(uint32_t n_slots)
{
    return TABLE_HDR_SIZE + (uint64_t)TABLE_SLOT_SIZE * n_slots;
}


/* ---- shared between the module's files ----------------------------------- */

/* table.c: the per-rule live counts (max_actors). */
int table_quota_find(struct table *t, uint64_t rule_id, bool insert);
void table_quota_release(struct table *t, uint64_t rule_id);

/* table.c: lookup and claim (docs/dev/shm.md "Claim"). */
struct table_scan {
    int key_off;                /* LIVE slot holding the key, or -1 */
    uint64_t key_lo;
    int claim_off;              /* a fresh CLAIMING slot with the key's tag, or -1 */
    uint64_t claim_lo;
    int free_off;               /* first reclaimable slot, or -1 */
    u128 free_state;
};

void table_scan_key(struct table *t, const struct table_kw *kw, uint64_t now,
                    struct table_scan *sc);
int table_claim(struct table *t, const struct table_kw *kw, const struct table_limits *lim,
                const struct table_scan *sc, const struct algo_state *first, unsigned flags,
                uint64_t now);
bool table_wait_change(struct table_slot *s, uint64_t lo);
void table_kill_claim(struct table_slot *s, uint64_t lo);
/* Someone is creating a counter with our tag at sc->claim_off, likely ours:
 * waits for it to finish rather than race it, and kills it when it seems
 * stuck (no change in this wait, the same claim as the last: *waited_lo). */
void table_wait_claim(struct table *t, const struct table_kw *kw, const struct table_scan *sc,
                      uint64_t *waited_lo);

/*
 * The CAS loop of every change to a LIVE counter: offers the state of @s to
 * @step while the slot still holds the counter @lo names, and publishes what
 * @step returns, again with the fresher state when another writer won.
 * @step may return the state unchanged: still a CAS, which turns a possibly
 * torn read into a snapshot.  0, or -EAGAIN when the slot was reset or
 * reclaimed under us (the caller looks the key up again).  Inline, so that
 * the hit path's @step is a direct call.
 */
static inline int table_cas_loop(struct table_slot *s, uint64_t lo,
                                 u128 (*step)(void *arg, u128 v), void *arg)
{
    u128 v = load128(s->state), got;

    for (;;) {
        if (!same_ident((uint64_t)v, lo))
            return -EAGAIN;
        got = cas128(s->state, v, step(arg, v));
        if (got == v)
            return 0;
        v = got;
    }
}

/* table_map.c: the boot id, header checks and mapping. */
int table_read_boot_id(uint8_t ret[16]);
int table_check_header(const struct table_hdr *h, uint64_t size, const uint8_t boot_id[16],
                       uint32_t want_slots, uint32_t *ret_slots, char *why, size_t why_len);
int table_check_file(int fd, const uint8_t boot_id[16], uint32_t want_slots,
                     uint32_t *ret_slots, char *why, size_t why_len);
int table_map_file(int fd, uint32_t n_slots, struct table **ret);
void table_ctl_use(struct table *t, struct table_ctl *c, int fd);

#endif
