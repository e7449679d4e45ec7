/* SPDX-License-Identifier: MIT */
/*
 * hit_batch: one worker's verdict scripts in flight, by Redis key, and the
 * requests that wait behind them (see hit_batch.h, docs/redis.md "Hot
 * keys").  An entry (struct hot) exists while its key has a script in
 * flight: its flights, oldest first, and at most one batch being gathered
 * (pending), sent when the oldest flight answers.  Redis answers a
 * connection's commands in order and each batch decides its requests in
 * order, so the verdicts are those of the requests one by one in arrival
 * order.  The table is a chained hash on a keyed SipHash (actors are the
 * peers'), grown as it fills; entries and flights are recycled.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "hash.h"
#include "hit_batch.h"
#include "log.h"

#define HOT_BUCKETS_MIN     64
#define HOT_FREE_MAX        256
#define FLIGHT_FREE_MAX     256

/* One request: whose callback, and what it asks. */
struct waiter {
    store_cb *cb;
    void *arg;
    enum store_op op;
    uint64_t n;
};

/* One script in flight (or a batch being gathered), for one key. */
struct flight {
    struct flight *next;        /* the key's flights, oldest first; the free list */
    struct hit_batch *b;
    struct hot *e;
    uint64_t deadline;          /* the earliest of its requests' */
    unsigned n;
    struct waiter w[STORE_ITEMS_MAX];
    struct store_items items;   /* a batch's list, kept until its answer (NOSCRIPT) */
};

/* A key with scripts in flight in this worker. */
struct hot {
    struct hot *next;           /* hash chain; the free list */
    uint64_t hash;
    struct store_verdict_args a;        /* script and arguments, op and n aside */
    struct flight *head, *tail;         /* in flight, oldest first; never empty */
    struct flight *pending;             /* waiting for head's answer; NULL: none */
    char *key;
    size_t key_len, key_cap;
};

struct hit_batch {
    struct store_conn *sc;
    uint8_t seed[HASH_KEY_LEN];
    struct hot **buckets;
    size_t mask;                /* buckets - 1, a power of two less one */
    size_t n_hot;
    struct hot *free_hot;
    unsigned n_free_hot;
    struct flight *free_flight;
    unsigned n_free_flight;
    struct hit_batch_stats *counts;
};

static struct log_ratelimit rl_batch;

/* ---- the table ------------------------------------------------------------------ */

int hit_batch_new(struct store_conn *sc, struct hit_batch_stats *counts, struct hit_batch **ret)
{
    struct hit_batch *b = calloc(1, sizeof(*b));

    if (!b)
        return -ENOMEM;
    b->sc = sc;
    b->counts = counts;
    b->buckets = calloc(HOT_BUCKETS_MIN, sizeof(*b->buckets));
    if (!b->buckets) {
        free(b);
        return -ENOMEM;
    }
    b->mask = HOT_BUCKETS_MIN - 1;
    if (getrandom(b->seed, sizeof(b->seed), 0) != (ssize_t)sizeof(b->seed)) {
        free(b->buckets);
        free(b);
        return -EIO;
    }
    *ret = b;
    return 0;
}

static void hot_destroy(struct hot *e)
{
    free(e->key);
    free(e);
}

void hit_batch_free(struct hit_batch *b)
{
    struct flight *f;
    struct hot *e;

    if (!b)
        return;
    /* Entries left would be requests never answered: store_conn_free()
     * answered every flight, and each answer its pending batch. */
    for (size_t i = 0; i <= b->mask; i++) {
        while ((e = b->buckets[i]) != NULL) {
            b->buckets[i] = e->next;
            while ((f = e->head) != NULL) {
                e->head = f->next;
                free(f);
            }
            free(e->pending);
            hot_destroy(e);
        }
    }
    while ((e = b->free_hot) != NULL) {
        b->free_hot = e->next;
        hot_destroy(e);
    }
    while ((f = b->free_flight) != NULL) {
        b->free_flight = f->next;
        free(f);
    }
    free(b->buckets);
    free(b);
}

static struct hot *hot_find(const struct hit_batch *b, const char *key, size_t len, uint64_t h)
{
    for (struct hot *e = b->buckets[h & b->mask]; e; e = e->next) {
        if (e->hash == h && e->key_len == len && memcmp(e->key, key, len) == 0)
            return e;
    }
    return NULL;
}

/* Twice the buckets once there are more entries than buckets; a failed
 * allocation keeps the table as it is (longer chains, still correct). */
static void hot_grow(struct hit_batch *b)
{
    size_t n = 2 * (b->mask + 1);
    struct hot **nb = calloc(n, sizeof(*nb));

    if (!nb)
        return;
    for (size_t i = 0; i <= b->mask; i++) {
        struct hot *e, *next;

        for (e = b->buckets[i]; e; e = next) {
            next = e->next;
            e->next = nb[e->hash & (n - 1)];
            nb[e->hash & (n - 1)] = e;
        }
    }
    free(b->buckets);
    b->buckets = nb;
    b->mask = n - 1;
}

static struct hot *hot_add(struct hit_batch *b, const char *key, size_t len, uint64_t h,
                           const struct store_verdict_args *a)
{
    struct hot *e = b->free_hot;

    if (e) {
        b->free_hot = e->next;
        b->n_free_hot--;
    } else {
        e = calloc(1, sizeof(*e));
        if (!e)
            return NULL;
    }
    if (len > e->key_cap) {
        char *k = realloc(e->key, len);

        if (!k) {
            hot_destroy(e);
            return NULL;
        }
        e->key = k;
        e->key_cap = len;
    }
    memcpy(e->key, key, len);
    e->key_len = len;
    e->hash = h;
    e->a = *a;
    e->head = e->tail = e->pending = NULL;
    if (b->n_hot >= b->mask + 1)
        hot_grow(b);
    e->next = b->buckets[h & b->mask];
    b->buckets[h & b->mask] = e;
    b->n_hot++;
    return e;
}

/* @e has no flight left: out of the table. */
static void hot_remove(struct hit_batch *b, struct hot *e)
{
    struct hot **p = &b->buckets[e->hash & b->mask];

    while (*p != e)
        p = &(*p)->next;
    *p = e->next;
    b->n_hot--;
    if (b->n_free_hot < HOT_FREE_MAX) {
        e->next = b->free_hot;
        b->free_hot = e;
        b->n_free_hot++;
    } else {
        hot_destroy(e);
    }
}

/* ---- flights -------------------------------------------------------------------- */

static struct flight *flight_get(struct hit_batch *b, struct hot *e)
{
    struct flight *f = b->free_flight;

    if (f) {
        b->free_flight = f->next;
        b->n_free_flight--;
    } else {
        f = malloc(sizeof(*f));
        if (!f)
            return NULL;
    }
    f->next = NULL;
    f->b = b;
    f->e = e;
    f->n = 0;
    f->deadline = UINT64_MAX;
    f->items.n = 0;
    f->items.len = 0;
    return f;
}

static void flight_put(struct hit_batch *b, struct flight *f)
{
    if (b->n_free_flight < FLIGHT_FREE_MAX) {
        f->next = b->free_flight;
        b->free_flight = f;
        b->n_free_flight++;
        return;
    }
    free(f);
}

/* The op and n of a single request's call @a. */
static void args_item(const struct store_verdict_args *a, enum store_op *ret_op, uint64_t *ret_n)
{
    switch (a->script) {
    case STORE_SCRIPT_BUCKET:
    case STORE_SCRIPT_GCRA:
        *ret_op = a->bucket.op;
        *ret_n = a->bucket.n;
        return;
    case STORE_SCRIPT_SLIDING:
        *ret_op = a->sliding.op;
        *ret_n = a->sliding.n;
        return;
    default:
        *ret_op = a->window.op;
        *ret_n = a->window.n;
        return;
    }
}

/* @a with @op and @n: the plain call of one request. */
static struct store_verdict_args args_with(const struct store_verdict_args *a, enum store_op op,
                                           uint64_t n)
{
    struct store_verdict_args c = *a;

    switch (c.script) {
    case STORE_SCRIPT_BUCKET:
    case STORE_SCRIPT_GCRA:
        c.bucket.op = op;
        c.bucket.n = n;
        break;
    case STORE_SCRIPT_SLIDING:
        c.sliding.op = op;
        c.sliding.n = n;
        break;
    default:
        c.window.op = op;
        c.window.n = n;
        break;
    }
    return c;
}

static void flight_add(struct flight *f, const struct store_verdict_args *a, uint64_t deadline,
                       store_cb *cb, void *arg)
{
    struct waiter *wt = &f->w[f->n++];

    wt->cb = cb;
    wt->arg = arg;
    args_item(a, &wt->op, &wt->n);
    if (deadline < f->deadline)
        f->deadline = deadline;
}

static void flight_done(void *arg, const struct store_reply *rep);

/* Sends @f (a plain call for one request, else a batch) and puts it last
 * among @e's flights; -errno (not sent) as store_verdict(). */
static int flight_send(struct hit_batch *b, struct hot *e, struct flight *f)
{
    int rc;

    if (f->n == 1) {
        struct store_verdict_args one = args_with(&e->a, f->w[0].op, f->w[0].n);

        rc = store_verdict(b->sc, e->key, e->key_len, &one, f->deadline, flight_done, f);
    } else {
        f->items.n = 0;
        f->items.len = 0;
        for (unsigned i = 0; i < f->n; i++)
            store_items_add(&f->items, f->w[i].op, f->w[i].n);
        rc = store_verdicts(b->sc, e->key, e->key_len, &e->a, &f->items, f->deadline,
                            flight_done, f);
    }
    if (rc < 0)
        return rc;
    if (e->tail)
        e->tail->next = f;
    else
        e->head = f;
    e->tail = f;
    f->next = NULL;
    /* One writer, this thread: no read-modify-write needed. */
    __atomic_store_n(&b->counts->scripts, b->counts->scripts + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&b->counts->requests, b->counts->requests + f->n, __ATOMIC_RELAXED);
    return 0;
}

/* @e's gathered batch goes now; on failure it stays gathered (answered
 * when the flight ahead of it is) and the caller's request is refused. */
static int pending_send(struct hit_batch *b, struct hot *e)
{
    int rc;

    if (!e->pending)
        return 0;
    rc = flight_send(b, e, e->pending);
    if (rc >= 0)
        e->pending = NULL;
    return rc;
}

/* Runs each callback of @f, in arrival order: request i gets verdict i of
 * @rep (a batch's), @rep itself (a plain call's), or NULL. */
static void flight_answer(struct flight *f, const struct store_reply *rep)
{
    struct store_reply one = { .kind = STORE_REPLY_VERDICT };

    if (rep && !(rep->kind == STORE_REPLY_VERDICT && f->n == 1) &&
        !(rep->kind == STORE_REPLY_VERDICTS && rep->verdicts.n == f->n)) {
        log_ratelimited(&rl_batch, LOG_ERR, "redis: %u requests on one key, an answer for "
                        "%zu: each gets on_redis_error",
                        f->n, rep->kind == STORE_REPLY_VERDICTS ? rep->verdicts.n : (size_t)1);
        rep = NULL;
    }
    for (unsigned i = 0; i < f->n; i++) {
        if (rep && rep->kind == STORE_REPLY_VERDICTS) {
            store_verdicts_get(&rep->verdicts, i, &one.verdict);
            f->w[i].cb(f->w[i].arg, &one);
        } else {
            f->w[i].cb(f->w[i].arg, rep);
        }
    }
}

/* The store answered flight @arg: the batch gathered behind it goes, then
 * its requests get their verdicts.  The entry is settled first, so a
 * callback that sends again on the same key finds it as it now is. */
static void flight_done(void *arg, const struct store_reply *rep)
{
    struct flight *f = arg, *failed = NULL, **p;
    struct hit_batch *b = f->b;
    struct hot *e = f->e;

    for (p = &e->head; *p != f; p = &(*p)->next)
        ;
    *p = f->next;
    if (e->tail == f) {
        e->tail = NULL;
        for (struct flight *x = e->head; x; x = x->next)
            e->tail = x;
    }
    if (e->pending && pending_send(b, e) < 0) {
        failed = e->pending;
        e->pending = NULL;
    }
    if (!e->head && !e->pending)
        hot_remove(b, e);
    flight_answer(f, rep);
    flight_put(b, f);
    if (failed) {
        flight_answer(failed, NULL);
        flight_put(b, failed);
    }
}

/* @a's request alone, as a new flight of @e. */
static int send_alone(struct hit_batch *b, struct hot *e, const struct store_verdict_args *a,
                      uint64_t deadline, store_cb *cb, void *arg)
{
    struct flight *f = flight_get(b, e);
    int rc;

    if (!f)
        return -ENOMEM;
    flight_add(f, a, deadline, cb, arg);
    rc = flight_send(b, e, f);
    if (rc < 0)
        flight_put(b, f);
    return rc;
}

int hit_batch_send(struct hit_batch *b, const char *key, size_t key_len,
                   const struct store_verdict_args *a, uint64_t deadline_ms, store_cb *cb,
                   void *arg)
{
    uint64_t h = hash_siphash(b->seed, key, key_len);
    struct hot *e = hot_find(b, key, key_len, h);
    int rc;

    if (!e) {
        e = hot_add(b, key, key_len, h, a);
        if (!e)
            return -ENOMEM;
        rc = send_alone(b, e, a, deadline_ms, cb, arg);
        if (rc < 0)
            hot_remove(b, e);
        return rc;
    }
    if (!store_script_same(&e->a, a) || deadline_ms < e->head->deadline) {
        /* It cannot wait behind the oldest flight (an earlier deadline) or
         * join the batch (other arguments, a reload's): the batch goes
         * now, the request right after it, in order. */
        rc = pending_send(b, e);
        if (rc < 0)
            return rc;
        e->a = *a;
        return send_alone(b, e, a, deadline_ms, cb, arg);
    }
    if (e->pending && e->pending->n == STORE_ITEMS_MAX) {
        rc = pending_send(b, e);
        if (rc < 0)
            return rc;
    }
    if (!e->pending) {
        e->pending = flight_get(b, e);
        if (!e->pending)
            return -ENOMEM;
    }
    flight_add(e->pending, a, deadline_ms, cb, arg);
    return 0;
}

int hit_batch_flush(struct hit_batch *b, const char *key, size_t key_len)
{
    struct hot *e = hot_find(b, key, key_len, hash_siphash(b->seed, key, key_len));

    return e ? pending_send(b, e) : 0;
}
