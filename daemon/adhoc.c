/* SPDX-License-Identifier: MIT */
/*
 * adhoc: ad-hoc buckets for RESP clients (see adhoc.h).  Each shard is an
 * open-addressing table under its own mutex; a key lives within
 * ADHOC_PROBE slots of its home and is never deleted, only reused once its
 * state is the same as no bucket (idle_ms passed on the server's clock).
 * The algorithms are adhoc_algo.c's.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "adhoc.h"
#include "hash.h"

#define ADHOC_SHARDS   64
#define NS_PER_MS      1000000LL

struct adhoc_slot {
    uint64_t h[2];              /* SipHash-128 of the key and parameters; 0, 0: empty */
    int64_t a, b;               /* token bucket: amount, refilled_ms; GCRA: tat_ns */
    int64_t idle_ms;            /* the state is the same as none from this server time */
};

struct adhoc_shard {
    pthread_mutex_t lock;
    struct adhoc_slot *slots;
};

struct adhoc {
    uint8_t secret[HASH_KEY_LEN];
    uint32_t per_shard, max_buckets;
    uint32_t used;              /* occupied slots, all shards (atomic) */
    struct adhoc_shard shards[ADHOC_SHARDS];
};

/* ---- the table ------------------------------------------------------------------------- */

int adhoc_new(uint32_t slots, uint32_t max_buckets, struct adhoc **ret)
{
    struct adhoc *a;
    uint32_t per = (slots + ADHOC_SHARDS - 1) / ADHOC_SHARDS;

    if (slots == 0)
        return -EINVAL;
    if (max_buckets == 0)
        max_buckets = slots - slots / 8;
    if (max_buckets > slots)
        max_buckets = slots;
    a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    if (getrandom(a->secret, sizeof(a->secret), 0) != sizeof(a->secret)) {
        free(a);
        return -EIO;
    }
    a->per_shard = per;
    a->max_buckets = max_buckets;
    for (int i = 0; i < ADHOC_SHARDS; i++) {
        pthread_mutex_init(&a->shards[i].lock, NULL);
        a->shards[i].slots = calloc(per, sizeof(struct adhoc_slot));
        if (!a->shards[i].slots) {
            adhoc_free(a);
            return -ENOMEM;
        }
    }
    *ret = a;
    return 0;
}

void adhoc_free(struct adhoc *a)
{
    if (!a)
        return;
    for (int i = 0; i < ADHOC_SHARDS; i++) {
        pthread_mutex_destroy(&a->shards[i].lock);
        free(a->shards[i].slots);
    }
    free(a);
}

/* The hash of @key with @params (the algorithm's, so different parameters
 * never share a bucket); never 0, 0 (an empty slot). */
static void adhoc_hash(const struct adhoc *a, char kind, const char *key, size_t len,
                       const int64_t *params, size_t n_params, uint64_t h[2])
{
    uint8_t buf[1 + 4 * 8], hk[16], out[16];
    size_t pos = 0;
    uint64_t k[2];

    /* The key's keyed hash keys the hash of the kind and the fixed-width
     * parameters: a key and its parameters can never run into each other. */
    buf[pos++] = (uint8_t)kind;
    for (size_t i = 0; i < n_params && i < 4; i++)
        for (int j = 0; j < 8; j++)
            buf[pos++] = (uint8_t)((uint64_t)params[i] >> (8 * j));
    hash_siphash128(a->secret, key, len, hk);
    hash_siphash128(hk, buf, pos, out);
    memcpy(k, out, 16);
    if (k[0] == 0 && k[1] == 0)
        k[0] = 1;
    h[0] = k[0];
    h[1] = k[1];
}

/* Counts one more occupied slot unless max_buckets are: exact across shards. */
static bool adhoc_claim(struct adhoc *a)
{
    uint32_t u = __atomic_load_n(&a->used, __ATOMIC_RELAXED);

    while (u < a->max_buckets)
        if (__atomic_compare_exchange_n(&a->used, &u, u + 1, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            return true;
    return false;
}

/* The slot of @h in its shard (locked on return: the caller unlocks), or
 * NULL when there is no room.  *ret_live: it holds a live state of @h. */
static struct adhoc_slot *adhoc_find(struct adhoc *a, const uint64_t h[2], uint64_t clock_ms,
                                     struct adhoc_shard **ret_shard, bool *ret_live)
{
    struct adhoc_shard *sh = &a->shards[h[1] % ADHOC_SHARDS];
    struct adhoc_slot *empty = NULL, *idle = NULL, *e;
    uint32_t home = (uint32_t)(h[0] % a->per_shard);

    *ret_shard = sh;
    *ret_live = false;
    pthread_mutex_lock(&sh->lock);
    for (uint32_t i = 0; i < ADHOC_PROBE && i < a->per_shard; i++) {
        e = &sh->slots[(home + i) % a->per_shard];
        if (e->h[0] == 0 && e->h[1] == 0) {
            empty = e;
            break;              /* nothing is stored past an empty slot */
        }
        if (e->h[0] == h[0] && e->h[1] == h[1]) {
            *ret_live = e->idle_ms > (int64_t)clock_ms;
            return e;
        }
        if (!idle && e->idle_ms <= (int64_t)clock_ms)
            idle = e;
    }
    if (empty && adhoc_claim(a)) {
        empty->h[0] = h[0];
        empty->h[1] = h[1];
        return empty;
    }
    if (idle) {
        idle->h[0] = h[0];
        idle->h[1] = h[1];
        return idle;
    }
    pthread_mutex_unlock(&sh->lock);
    return NULL;
}

int adhoc_tb(struct adhoc *a, const char *key, size_t len, const struct adhoc_tb *p,
             int64_t now_ms, uint64_t clock_ms, int64_t *ret_before)
{
    int64_t params[3] = { p->max, p->refill, p->refill_ms }, idle;
    struct adhoc_tb_state st = { 0 };
    struct adhoc_shard *sh;
    struct adhoc_slot *e;
    uint64_t h[2];
    bool live;

    adhoc_hash(a, 'S', key, len, params, 3, h);
    e = adhoc_find(a, h, clock_ms, &sh, &live);
    if (!e)
        return -ENOSPC;
    if (live) {
        st.amount = e->a;
        st.refilled_ms = e->b;
    }
    *ret_before = adhoc_tb_step(p, live, now_ms, &st, &idle);
    /* RL.GET writes nothing (a new bucket stays as good as absent). */
    if (p->take > 0) {
        e->a = st.amount;
        e->b = st.refilled_ms;
        e->idle_ms = idle;
    } else if (!live) {
        e->idle_ms = 0;
    }
    pthread_mutex_unlock(&sh->lock);
    return 0;
}

int adhoc_gcra(struct adhoc *a, const char *key, size_t len, const struct adhoc_gcra *p,
               int64_t now_ns, struct adhoc_gcra_result *ret)
{
    int64_t params[3] = { p->max_burst, p->count, p->period_s }, idle, tat = 0;
    struct adhoc_shard *sh;
    struct adhoc_slot *e;
    uint64_t h[2];
    bool live;

    adhoc_hash(a, 'G', key, len, params, 3, h);
    e = adhoc_find(a, h, (uint64_t)(now_ns / NS_PER_MS), &sh, &live);
    if (!e)
        return -ENOSPC;
    if (live)
        tat = e->a;
    adhoc_gcra_step(p, live, now_ns, &tat, ret, &idle);
    if (live || !ret->limited) {
        e->a = tat;
        e->idle_ms = idle;
    } else {
        e->idle_ms = 0;
    }
    pthread_mutex_unlock(&sh->lock);
    return 0;
}

void adhoc_usage(struct adhoc *a, uint64_t *ret_used, uint64_t *ret_slots)
{
    *ret_used = __atomic_load_n(&a->used, __ATOMIC_RELAXED);
    *ret_slots = (uint64_t)a->per_shard * ADHOC_SHARDS;
}
