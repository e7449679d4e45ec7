/* SPDX-License-Identifier: MIT */
/*
 * adhoc: the table of ad-hoc buckets for RESP clients (see adhoc.h; the
 * algorithms are adhoc_algo.c).  Each shard is a chained hash table over a
 * fixed array of slots, with a free list, under its own mutex.  Every
 * occupied slot is charged to an owner (a peer) and sits in that owner's
 * list of buckets by last use; the unprivileged owners are also listed by
 * how many buckets they hold, so the one holding the most and its least
 * recently used bucket are found in O(1).  Nothing here allocates after
 * adhoc_new(): a shard's owners never outnumber its slots.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "adhoc.h"
#include "hash.h"
#include "persist.h"

#define ADHOC_SHARDS_MAX   64
#define ADHOC_SHARD_MIN    256          /* slots per shard at least, once there are several */
#define NIL                UINT32_MAX
#define NS_PER_MS          1000000LL

struct adhoc_slot {
    uint64_t h[2];              /* SipHash-128 of the key and parameters */
    int64_t a, b;               /* token bucket: amount, refilled_ms; GCRA: tat_ns */
    int64_t expire_ms;          /* the state is the same as none from this Unix time */
    uint32_t next;              /* the hash chain; a free slot: the free list */
    uint32_t owner;             /* the owner it is charged to */
    uint32_t older, newer;      /* the owner's buckets by last use */
};

/* A peer holding buckets in a shard; freed with its last bucket. */
struct adhoc_owner {
    uint8_t key[16];
    bool is_unix, privileged;
    uint32_t count;             /* buckets charged to it, >= 1 while in use */
    uint32_t oldest, newest;    /* its least and most recently used bucket */
    uint32_t home;              /* its chain in owner_index */
    uint32_t next;              /* the hash chain; a free entry: the free list */
    uint32_t cprev, cnext;      /* unprivileged: the others holding as many (by_count) */
};

struct adhoc_shard {
    pthread_mutex_t lock;
    struct adhoc_slot *slots;   /* per_shard of them */
    struct adhoc_owner *owners; /* as many: one bucket each at least */
    uint32_t *index;            /* slot chains by hash, index_mask + 1 */
    uint32_t *owner_index;      /* owner chains by peer, index_mask + 1 */
    uint32_t *by_count;         /* [share + 1]: unprivileged owners holding that many */
    uint32_t free_slot, free_owner;
    uint32_t used, used_unpriv; /* buckets held; ... by unprivileged owners */
    uint32_t max_count;         /* the most one unprivileged owner holds */
    uint32_t n_owners;
    uint64_t evictions, busy;
};

/* adhoc_count()'s, beside the shards: atomics any thread adds to. */
struct adhoc_counts {
    uint64_t hits[ADHOC_N_KINDS][2];
    uint64_t fallbacks;
};

struct adhoc {
    uint8_t secret[HASH_KEY_LEN];
    uint32_t n_shards;          /* a power of two */
    uint32_t per_shard;         /* slots */
    uint32_t cap, reserve, share;       /* per shard */
    uint32_t index_mask;
    bool no_evict;              /* adhoc_no_evict(): buckets stand for keys in Redis */
    struct adhoc_counts counts;
    struct adhoc_shard shards[ADHOC_SHARDS_MAX];
};

static uint32_t ceil_div(uint64_t n, uint32_t d)
{
    return (uint32_t)((n + d - 1) / d);
}

/* ---- life cycle ------------------------------------------------------------------------ */

static int shard_init(struct adhoc *a, struct adhoc_shard *sh)
{
    size_t n_index = (size_t)a->index_mask + 1;

    sh->slots = calloc(a->per_shard, sizeof(*sh->slots));
    sh->owners = calloc(a->per_shard, sizeof(*sh->owners));
    sh->index = malloc(n_index * sizeof(*sh->index));
    sh->owner_index = malloc(n_index * sizeof(*sh->owner_index));
    sh->by_count = malloc(((size_t)a->share + 1) * sizeof(*sh->by_count));
    if (!sh->slots || !sh->owners || !sh->index || !sh->owner_index || !sh->by_count)
        return -ENOMEM;
    memset(sh->index, 0xff, n_index * sizeof(*sh->index));
    memset(sh->owner_index, 0xff, n_index * sizeof(*sh->owner_index));
    memset(sh->by_count, 0xff, ((size_t)a->share + 1) * sizeof(*sh->by_count));
    for (uint32_t i = 0; i < a->per_shard; i++) {
        sh->slots[i].next = i + 1 < a->per_shard ? i + 1 : NIL;
        sh->owners[i].next = i + 1 < a->per_shard ? i + 1 : NIL;
    }
    sh->free_slot = 0;
    sh->free_owner = 0;
    return 0;
}

int adhoc_new(const struct adhoc_opts *o, struct adhoc **ret)
{
    struct adhoc *a;
    uint32_t n = 1, cap_total, reserved, pool;
    uint64_t per_peer;
    int r;

    if (o->slots == 0)
        return -EINVAL;
    /* Shards keep threads apart; each must stay big enough for its share
     * of the reserve and of a peer's share to mean something. */
    while (n < ADHOC_SHARDS_MAX && o->slots / (2 * n) >= ADHOC_SHARD_MIN)
        n *= 2;
    cap_total = o->max_buckets && o->max_buckets < o->slots ? o->max_buckets : o->slots;
    a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->n_shards = n;
    a->per_shard = ceil_div(o->slots, n);
    a->cap = ceil_div(cap_total, n);
    reserved = o->reserved ? o->reserved : cap_total / ADHOC_RESERVE_DIV;
    a->reserve = ceil_div(reserved ? reserved : 1, n);
    if (a->reserve >= a->cap)
        a->reserve = a->cap - 1;
    pool = a->cap - a->reserve;
    per_peer = o->per_peer ? o->per_peer : (uint64_t)pool * n / ADHOC_PER_PEER_DIV;
    a->share = ceil_div(per_peer ? per_peer : 1, n);
    if (a->share > pool)
        a->share = pool;
    a->index_mask = 1;
    while (a->index_mask < a->per_shard)
        a->index_mask <<= 1;
    a->index_mask--;
    for (uint32_t i = 0; i < n; i++)
        pthread_mutex_init(&a->shards[i].lock, NULL);
    r = getrandom(a->secret, sizeof(a->secret), 0) == sizeof(a->secret) ? 0 : -EIO;
    for (uint32_t i = 0; i < n && r == 0; i++)
        r = shard_init(a, &a->shards[i]);
    if (r < 0) {
        adhoc_free(a);
        return r;
    }
    *ret = a;
    return 0;
}

void adhoc_free(struct adhoc *a)
{
    if (!a)
        return;
    for (uint32_t i = 0; i < a->n_shards; i++) {
        struct adhoc_shard *sh = &a->shards[i];

        pthread_mutex_destroy(&sh->lock);
        free(sh->slots);
        free(sh->owners);
        free(sh->index);
        free(sh->owner_index);
        free(sh->by_count);
    }
    free(a);
}

/* ---- owners ---------------------------------------------------------------------------- */

static uint32_t owner_home(const struct adhoc *a, const struct adhoc_peer *who)
{
    uint8_t buf[18];

    memcpy(buf, who->key, 16);
    buf[16] = who->is_unix;
    buf[17] = who->privileged;
    /* Keyed: TCP peers choose their addresses, so they must not choose chains. */
    return (uint32_t)hash_siphash(a->secret, buf, sizeof(buf)) & a->index_mask;
}

static uint32_t owner_find(const struct adhoc_shard *sh, const struct adhoc_peer *who,
                           uint32_t home)
{
    for (uint32_t i = sh->owner_index[home]; i != NIL; i = sh->owners[i].next) {
        const struct adhoc_owner *o = &sh->owners[i];

        if (o->is_unix == who->is_unix && o->privileged == who->privileged &&
            memcmp(o->key, who->key, 16) == 0)
            return i;
    }
    return NIL;
}

/* Sets owner @oi's count to @to, moving an unprivileged one between the
 * by_count lists and keeping max_count (counts change by one at a time). */
static void owner_count(struct adhoc_shard *sh, uint32_t oi, uint32_t to)
{
    struct adhoc_owner *o = &sh->owners[oi];

    if (!o->privileged) {
        if (o->count > 0) {
            if (o->cprev != NIL)
                sh->owners[o->cprev].cnext = o->cnext;
            else
                sh->by_count[o->count] = o->cnext;
            if (o->cnext != NIL)
                sh->owners[o->cnext].cprev = o->cprev;
        }
        if (to > 0) {
            o->cprev = NIL;
            o->cnext = sh->by_count[to];
            if (o->cnext != NIL)
                sh->owners[o->cnext].cprev = oi;
            sh->by_count[to] = oi;
        }
        if (to > sh->max_count)
            sh->max_count = to;
        while (sh->max_count > 0 && sh->by_count[sh->max_count] == NIL)
            sh->max_count--;
    }
    o->count = to;
}

/* @who's entry (its chain @home), made when it holds nothing yet (there is
 * always a free one: owners hold a bucket each, and a slot is free when
 * this is called). */
static uint32_t owner_get(struct adhoc_shard *sh, const struct adhoc_peer *who, uint32_t home)
{
    uint32_t oi = owner_find(sh, who, home);
    struct adhoc_owner *o;

    if (oi != NIL)
        return oi;
    oi = sh->free_owner;
    o = &sh->owners[oi];
    sh->free_owner = o->next;
    memcpy(o->key, who->key, 16);
    o->is_unix = who->is_unix;
    o->privileged = who->privileged;
    o->count = 0;
    o->oldest = o->newest = NIL;
    o->home = home;
    o->next = sh->owner_index[home];
    sh->owner_index[home] = oi;
    sh->n_owners++;
    return oi;
}

static void owner_put(struct adhoc_shard *sh, uint32_t oi)
{
    uint32_t *pp = &sh->owner_index[sh->owners[oi].home];

    while (*pp != oi)
        pp = &sh->owners[*pp].next;
    *pp = sh->owners[oi].next;
    sh->owners[oi].next = sh->free_owner;
    sh->free_owner = oi;
    sh->n_owners--;
}

/* ---- slots ----------------------------------------------------------------------------- */

static void lru_unlink(struct adhoc_shard *sh, struct adhoc_owner *o, uint32_t i)
{
    struct adhoc_slot *s = &sh->slots[i];

    if (s->older != NIL)
        sh->slots[s->older].newer = s->newer;
    else
        o->oldest = s->newer;
    if (s->newer != NIL)
        sh->slots[s->newer].older = s->older;
    else
        o->newest = s->older;
}

static void lru_push(struct adhoc_shard *sh, struct adhoc_owner *o, uint32_t i)
{
    struct adhoc_slot *s = &sh->slots[i];

    s->newer = NIL;
    s->older = o->newest;
    if (o->newest != NIL)
        sh->slots[o->newest].newer = i;
    else
        o->oldest = i;
    o->newest = i;
}

static uint32_t slot_find(const struct adhoc *a, const struct adhoc_shard *sh,
                          const uint64_t h[2])
{
    for (uint32_t i = sh->index[h[0] & a->index_mask]; i != NIL; i = sh->slots[i].next)
        if (sh->slots[i].h[0] == h[0] && sh->slots[i].h[1] == h[1])
            return i;
    return NIL;
}

/* Frees slot @i: out of its chain, its owner's list and count.  A bucket
 * dropped before it was idle is an eviction. */
static void slot_drop(const struct adhoc *a, struct adhoc_shard *sh, uint32_t i,
                      int64_t now_ms)
{
    struct adhoc_slot *s = &sh->slots[i];
    uint32_t oi = s->owner, *pp = &sh->index[s->h[0] & a->index_mask];
    struct adhoc_owner *o = &sh->owners[oi];

    while (*pp != i)
        pp = &sh->slots[*pp].next;
    *pp = s->next;
    lru_unlink(sh, o, i);
    if (s->expire_ms > now_ms)
        sh->evictions++;
    sh->used--;
    if (!o->privileged)
        sh->used_unpriv--;
    owner_count(sh, oi, o->count - 1);
    if (o->count == 0)
        owner_put(sh, oi);
    s->next = sh->free_slot;
    sh->free_slot = i;
}

/* The bucket a privileged peer's new one replaces when privileged peers
 * hold the whole shard: its own oldest, else another's (a rare scan). */
static uint32_t slot_privileged_victim(const struct adhoc *a, const struct adhoc_shard *sh,
                                       uint32_t mine)
{
    if (mine != NIL)
        return sh->owners[mine].oldest;
    for (uint32_t i = 0; i < a->per_shard; i++)
        if (sh->owners[i].count > 0 && sh->owners[i].privileged)
            return sh->owners[i].oldest;
    return NIL;
}

/* Owner @oi's first bucket that is the same as none at @now_ms, or NIL:
 * without eviction, a slot that may go (a scan of its share at most). */
static uint32_t owner_expired(const struct adhoc_shard *sh, uint32_t oi, int64_t now_ms)
{
    if (oi == NIL)
        return NIL;
    for (uint32_t i = sh->owners[oi].oldest; i != NIL; i = sh->slots[i].newer)
        if (sh->slots[i].expire_ms <= now_ms)
            return i;
    return NIL;
}

/*
 * A slot for a new bucket @h of @who into *@ret: 0, or -ENOSPC (none could
 * be had) or -EDQUOT (an unprivileged peer at its share, only without
 * eviction).  The order of adhoc.h's file comment: a peer at its share
 * gives up its own least recently used bucket; else a free slot within the
 * capacity (less the reserve for an unprivileged peer); else the least
 * recently used bucket of the unprivileged peer holding the most (the
 * asker's own on a tie, so nobody loses a bucket to a peer holding as
 * many).  Without eviction (adhoc_no_evict()) no unprivileged peer's bucket
 * is taken before it expires: past its share or the pool, an unprivileged
 * peer gets the slot of one of its own that has, else it is refused; a
 * privileged one may still take a privileged peer's.
 */
static int slot_new(struct adhoc *a, struct adhoc_shard *sh, const struct adhoc_peer *who,
                    const uint64_t h[2], int64_t now_ms, uint32_t *ret)
{
    uint32_t home = owner_home(a, who), mine = owner_find(sh, who, home), victim = NIL, i, oi;
    uint32_t held = mine == NIL ? 0 : sh->owners[mine].count;
    struct adhoc_slot *s;
    bool room = who->privileged ? sh->used < a->cap
                                : sh->used < a->cap && sh->used_unpriv < a->cap - a->reserve;

    if (!who->privileged && held >= a->share) {
        victim = a->no_evict ? owner_expired(sh, mine, now_ms) : sh->owners[mine].oldest;
        if (victim == NIL)
            return -EDQUOT;
    } else if (!room) {
        if (a->no_evict && !who->privileged) {
            victim = owner_expired(sh, mine, now_ms);
            if (victim == NIL)
                return -ENOSPC;
        }
        if (sh->max_count > 0 && !a->no_evict)
            victim = !who->privileged && held >= sh->max_count
                         ? sh->owners[mine].oldest
                         : sh->owners[sh->by_count[sh->max_count]].oldest;
        else if (who->privileged)
            victim = slot_privileged_victim(a, sh, mine);
        if (victim == NIL)
            return -ENOSPC;
    }
    if (victim != NIL)
        slot_drop(a, sh, victim, now_ms);
    i = sh->free_slot;
    s = &sh->slots[i];
    sh->free_slot = s->next;
    s->h[0] = h[0];
    s->h[1] = h[1];
    s->next = sh->index[h[0] & a->index_mask];
    sh->index[h[0] & a->index_mask] = i;
    oi = owner_get(sh, who, home);
    s->owner = oi;
    lru_push(sh, &sh->owners[oi], i);
    owner_count(sh, oi, sh->owners[oi].count + 1);
    sh->used++;
    if (!who->privileged)
        sh->used_unpriv++;
    *ret = i;
    return 0;
}

/* ---- lookups --------------------------------------------------------------------------- */

/* The hash of @key with @params (the algorithm's, so different parameters
 * never share a bucket), and for a claim (adhoc_claim()) its peer @who. */
static void adhoc_hash(const struct adhoc *a, char kind, const char *key, size_t len,
                       const int64_t *params, size_t n_params, const struct adhoc_peer *who,
                       uint64_t h[2])
{
    uint8_t buf[1 + 4 * 8 + 18], hk[16], out[16];
    size_t pos = 0;

    /* The key's keyed hash keys the hash of the kind and the fixed-width
     * parameters: a key and its parameters can never run into each other. */
    buf[pos++] = (uint8_t)kind;
    for (size_t i = 0; i < n_params && i < 4; i++)
        for (int j = 0; j < 8; j++)
            buf[pos++] = (uint8_t)((uint64_t)params[i] >> (8 * j));
    if (who) {
        memcpy(buf + pos, who->key, 16);
        buf[pos + 16] = who->is_unix;
        buf[pos + 17] = who->privileged;
        pos += 18;
    }
    hash_siphash128(a->secret, key, len, hk);
    hash_siphash128(hk, buf, pos, out);
    memcpy(h, out, 16);
}

/* Locks @h's shard and finds its bucket: NIL when there is none, or when
 * it was idle (then dropped: its state is the same as none).  A bucket
 * found becomes its owner's most recently used. */
static struct adhoc_shard *adhoc_lookup(struct adhoc *a, const uint64_t h[2], int64_t now_ms,
                                        uint32_t *ret_slot)
{
    struct adhoc_shard *sh = &a->shards[h[1] & (a->n_shards - 1)];
    uint32_t i;

    pthread_mutex_lock(&sh->lock);
    i = slot_find(a, sh, h);
    if (i != NIL && sh->slots[i].expire_ms <= now_ms) {
        slot_drop(a, sh, i, now_ms);
        i = NIL;
    } else if (i != NIL) {
        struct adhoc_owner *o = &sh->owners[sh->slots[i].owner];

        lru_unlink(sh, o, i);
        lru_push(sh, o, i);
    }
    *ret_slot = i;
    return sh;
}

int adhoc_tb(struct adhoc *a, const struct adhoc_peer *who, const char *key, size_t len,
             const struct adhoc_tb *p, int64_t at_ms, int64_t now_ms, int64_t *ret_before)
{
    int64_t params[3] = { p->max, p->refill, p->refill_ms }, idle;
    struct adhoc_tb_state st = { 0 };
    struct adhoc_shard *sh;
    uint64_t h[2];
    uint32_t i;
    bool live;
    int r = 0;

    adhoc_hash(a, 'S', key, len, params, 3, NULL, h);
    sh = adhoc_lookup(a, h, now_ms, &i);
    live = i != NIL;
    if (live) {
        st.amount = sh->slots[i].a;
        st.refilled_ms = sh->slots[i].b;
    }
    *ret_before = adhoc_tb_step(p, live, at_ms, &st, &idle);
    /* RL.GET writes nothing; a new bucket that is still full is as good
     * as absent and takes no slot. */
    if (p->take > 0 && (live || st.amount < p->max)) {
        if (!live)
            r = slot_new(a, sh, who, h, now_ms, &i);
        if (r == 0) {
            sh->slots[i].a = st.amount;
            sh->slots[i].b = st.refilled_ms;
            sh->slots[i].expire_ms = adhoc_expire_ms(idle, at_ms, now_ms);
        } else {
            sh->busy++;
        }
    }
    pthread_mutex_unlock(&sh->lock);
    return r;
}

int adhoc_gcra(struct adhoc *a, const struct adhoc_peer *who, const char *key, size_t len,
               const struct adhoc_gcra *p, int64_t now_ns, struct adhoc_gcra_result *ret)
{
    int64_t params[3] = { p->max_burst, p->count, p->period_s }, idle, tat = 0;
    int64_t now_ms = now_ns / NS_PER_MS;
    uint64_t h[2];
    struct adhoc_shard *sh;
    uint32_t i;
    bool live;
    int r = 0;

    adhoc_hash(a, 'G', key, len, params, 3, NULL, h);
    sh = adhoc_lookup(a, h, now_ms, &i);
    live = i != NIL;
    if (live)
        tat = sh->slots[i].a;
    adhoc_gcra_step(p, live, now_ns, &tat, ret, &idle);
    /* A new key that was refused, or only looked at, is as good as absent. */
    if (live || (!ret->limited && idle > now_ms)) {
        if (!live)
            r = slot_new(a, sh, who, h, now_ms, &i);
        if (r == 0) {
            sh->slots[i].a = tat;
            sh->slots[i].expire_ms = idle;
        } else {
            sh->busy++;
        }
    }
    pthread_mutex_unlock(&sh->lock);
    return r;
}

void adhoc_no_evict(struct adhoc *a)
{
    a->no_evict = true;
}

int adhoc_claim(struct adhoc *a, const struct adhoc_peer *who, enum adhoc_kind kind,
                const char *key, size_t len, const int64_t params[3], int64_t expire_ms,
                int64_t now_ms)
{
    struct adhoc_shard *sh;
    uint64_t h[2];
    uint32_t i;
    bool fresh;
    int r = 0;

    /* Their own kinds: a claim never meets a bucket of the local table. */
    adhoc_hash(a, kind == ADHOC_RL ? 's' : 'g', key, len, params, 3, who, h);
    sh = adhoc_lookup(a, h, now_ms, &i);
    fresh = i == NIL;
    if (fresh)
        r = slot_new(a, sh, who, h, now_ms, &i);
    if (r == 0) {
        /* The key lives until the latest of the bounds its calls gave it. */
        if (fresh || sh->slots[i].expire_ms < expire_ms)
            sh->slots[i].expire_ms = expire_ms;
    } else {
        sh->busy++;
    }
    pthread_mutex_unlock(&sh->lock);
    return r;
}

void adhoc_count(struct adhoc *a, enum adhoc_kind kind, bool allowed, bool fallback)
{
    __atomic_fetch_add(&a->counts.hits[kind][allowed ? 0 : 1], 1, __ATOMIC_RELAXED);
    if (fallback)
        __atomic_fetch_add(&a->counts.fallbacks, 1, __ATOMIC_RELAXED);
}

/* ---- sweep, save and load ---------------------------------------------------------------- */

uint32_t adhoc_sweep(struct adhoc *a, int64_t now_ms)
{
    uint32_t freed = 0;

    for (uint32_t k = 0; k < a->n_shards; k++) {
        struct adhoc_shard *sh = &a->shards[k];

        pthread_mutex_lock(&sh->lock);
        for (uint32_t oi = 0; oi < a->per_shard && sh->used > 0; oi++) {
            /* Each owner's list, oldest first; the owner goes with its last bucket. */
            for (uint32_t i = sh->owners[oi].count ? sh->owners[oi].oldest : NIL; i != NIL;) {
                uint32_t newer = sh->slots[i].newer;
                bool last = sh->owners[oi].count == 1;

                if (sh->slots[i].expire_ms <= now_ms) {
                    slot_drop(a, sh, i, now_ms);
                    freed++;
                    if (last)
                        break;
                }
                i = newer;
            }
        }
        pthread_mutex_unlock(&sh->lock);
    }
    return freed;
}

/* The file adhoc_save() writes: a head, then one record per bucket. */
#define ADHOC_FILE_MAGIC     "divvyAH1"
#define ADHOC_FILE_RECS_MAX  (1u << 22)

struct adhoc_file_head {
    char magic[8];
    uint32_t rec_size;
    uint32_t n;
    uint8_t secret[HASH_KEY_LEN];
};

struct adhoc_file_rec {
    uint64_t h[2];
    int64_t a, b, expire_ms;
    uint8_t key[16];
    uint8_t is_unix, privileged, pad[6];
};
_Static_assert(sizeof(struct adhoc_file_rec) == 64, "adhoc_file_rec layout");
_Static_assert(sizeof(struct adhoc_file_head) == 16 + HASH_KEY_LEN, "adhoc_file_head layout");

int adhoc_save(struct adhoc *a, const char *path, int64_t now_ms)
{
    size_t max = (size_t)a->per_shard * a->n_shards, n = 0;
    struct adhoc_file_head *head;
    struct adhoc_file_rec *rec;
    char *buf;
    int r;

    buf = calloc(1, sizeof(*head) + max * sizeof(*rec));
    if (!buf)
        return -ENOMEM;
    head = (struct adhoc_file_head *)buf;
    rec = (struct adhoc_file_rec *)(buf + sizeof(*head));
    for (uint32_t k = 0; k < a->n_shards; k++) {
        struct adhoc_shard *sh = &a->shards[k];

        pthread_mutex_lock(&sh->lock);
        for (uint32_t oi = 0; oi < a->per_shard; oi++) {
            const struct adhoc_owner *o = &sh->owners[oi];

            /* Oldest first: a load charges them in the same order of use. */
            for (uint32_t i = o->count ? o->oldest : NIL; i != NIL; i = sh->slots[i].newer) {
                const struct adhoc_slot *sl = &sh->slots[i];

                if (sl->expire_ms <= now_ms || n >= max)
                    continue;
                memcpy(rec[n].h, sl->h, sizeof(sl->h));
                rec[n].a = sl->a;
                rec[n].b = sl->b;
                rec[n].expire_ms = sl->expire_ms;
                memcpy(rec[n].key, o->key, 16);
                rec[n].is_unix = o->is_unix;
                rec[n].privileged = o->privileged;
                n++;
            }
        }
        pthread_mutex_unlock(&sh->lock);
    }
    memcpy(head->magic, ADHOC_FILE_MAGIC, sizeof(head->magic));
    head->rec_size = sizeof(*rec);
    head->n = (uint32_t)n;
    memcpy(head->secret, a->secret, sizeof(a->secret));
    r = persist_save(path, buf, sizeof(*head) + n * sizeof(*rec));
    explicit_bzero(buf, sizeof(*head));
    free(buf);
    return r < 0 ? r : (int)n;
}

int adhoc_load(struct adhoc *a, const char *path, int64_t now_ms)
{
    const struct adhoc_file_head *head;
    const struct adhoc_file_rec *rec;
    void *buf = NULL;
    size_t len = 0;
    int n = 0, r;

    r = persist_load_any(path, sizeof(*head) + (size_t)ADHOC_FILE_RECS_MAX * sizeof(*rec),
                         &buf, &len);
    if (r < 0)
        return r;
    head = buf;
    rec = (const struct adhoc_file_rec *)((const char *)buf + sizeof(*head));
    if (len < sizeof(*head) || memcmp(head->magic, ADHOC_FILE_MAGIC, sizeof(head->magic)) != 0 ||
        head->rec_size != sizeof(*rec) || len != sizeof(*head) + (size_t)head->n * sizeof(*rec)) {
        r = -EBADMSG;
        goto out;
    }
    /* The buckets are found by the hashes they were saved under. */
    memcpy(a->secret, head->secret, sizeof(a->secret));
    for (uint32_t k = 0; k < head->n; k++) {
        struct adhoc_peer who = { .is_unix = rec[k].is_unix != 0,
                                  .privileged = rec[k].privileged != 0 };
        struct adhoc_shard *sh = &a->shards[rec[k].h[1] & (a->n_shards - 1)];
        uint32_t i;

        if (rec[k].expire_ms <= now_ms)
            continue;
        memcpy(who.key, rec[k].key, 16);
        pthread_mutex_lock(&sh->lock);
        if (slot_find(a, sh, rec[k].h) == NIL && slot_new(a, sh, &who, rec[k].h, now_ms, &i) == 0) {
            sh->slots[i].a = rec[k].a;
            sh->slots[i].b = rec[k].b;
            sh->slots[i].expire_ms = rec[k].expire_ms;
            n++;
        }
        pthread_mutex_unlock(&sh->lock);
    }
    r = n;
out:
    if (buf)
        explicit_bzero(buf, len < sizeof(*head) ? len : sizeof(*head));
    free(buf);
    return r;
}

/* ---- statistics ------------------------------------------------------------------------ */

void adhoc_stats(struct adhoc *a, struct adhoc_stats *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->slots = (uint64_t)a->per_shard * a->n_shards;
    ret->capacity = (uint64_t)a->cap * a->n_shards;
    ret->reserved = (uint64_t)a->reserve * a->n_shards;
    ret->per_peer = (uint64_t)a->share * a->n_shards;
    for (uint32_t i = 0; i < a->n_shards; i++) {
        struct adhoc_shard *sh = &a->shards[i];

        pthread_mutex_lock(&sh->lock);
        ret->used += sh->used;
        ret->privileged += sh->used - sh->used_unpriv;
        ret->peers += sh->n_owners;
        ret->evictions += sh->evictions;
        ret->busy += sh->busy;
        pthread_mutex_unlock(&sh->lock);
    }
    for (int k = 0; k < ADHOC_N_KINDS; k++)
        for (int j = 0; j < 2; j++)
            ret->hits[k][j] = __atomic_load_n(&a->counts.hits[k][j], __ATOMIC_RELAXED);
    ret->fallbacks = __atomic_load_n(&a->counts.fallbacks, __ATOMIC_RELAXED);
}
