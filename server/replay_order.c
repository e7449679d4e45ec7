/* SPDX-License-Identifier: MIT */
/*
 * replay_order: the reorder window (see replay_order.h): a binary min-heap of
 * records by (key, seq), and free lists of records by size class (no larger
 * in all than the window) so that a long replay allocates only while the
 * window grows, not per decision.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "replay_order.h"

#define ORDER_CLASSES    10             /* records of 256 << 0 .. 256 << 9 = 128 KiB */
#define ORDER_SIZE(cls)  ((size_t)256 << (cls))
#define ORDER_STRINGS    ((size_t)64 << 10) /* a request's keys and values at most */

struct replay_order {
    uint64_t window_ms;
    size_t max_bytes;
    size_t bytes;               /* of the held records */
    size_t free_bytes;          /* of the records in the free lists */
    uint64_t seq;
    uint64_t latest;            /* the latest key pushed */
    uint64_t out;               /* the key of the last record handed out */
    bool any_out;
    struct replay_rec **heap;
    size_t n, cap;
    struct replay_rec *free[ORDER_CLASSES];
};

struct replay_order *replay_order_new(uint64_t window_ms, size_t max_bytes)
{
    struct replay_order *o = calloc(1, sizeof(*o));

    if (!o)
        return NULL;
    o->window_ms = window_ms;
    o->max_bytes = max_bytes;
    return o;
}

static void free_list(struct replay_rec *r)
{
    while (r) {
        struct replay_rec *next = r->next;

        free(r);
        r = next;
    }
}

void replay_order_free(struct replay_order *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->n; i++)
        free(o->heap[i]);
    for (unsigned c = 0; c < ORDER_CLASSES; c++)
        free_list(o->free[c]);
    free(o->heap);
    free(o);
}

size_t replay_order_held(const struct replay_order *o)
{
    return o->n;
}

size_t replay_order_bytes(const struct replay_order *o)
{
    return o->bytes;
}

static bool before(const struct replay_rec *a, const struct replay_rec *b)
{
    return a->key < b->key || (a->key == b->key && a->seq < b->seq);
}

static void sift_up(struct replay_order *o, size_t i)
{
    struct replay_rec *r = o->heap[i];

    while (i > 0) {
        size_t p = (i - 1) / 2;

        if (!before(r, o->heap[p]))
            break;
        o->heap[i] = o->heap[p];
        i = p;
    }
    o->heap[i] = r;
}

static void sift_down(struct replay_order *o, size_t i)
{
    struct replay_rec *r = o->heap[i];

    for (;;) {
        size_t c = 2 * i + 1;

        if (c >= o->n)
            break;
        if (c + 1 < o->n && before(o->heap[c + 1], o->heap[c]))
            c++;
        if (!before(o->heap[c], r))
            break;
        o->heap[i] = o->heap[c];
        i = c;
    }
    o->heap[i] = r;
}

/* A record of @bytes in all: from its class's free list, else new. */
static struct replay_rec *rec_get(struct replay_order *o, size_t bytes)
{
    struct replay_rec *r;
    unsigned c = 0;

    while (c < ORDER_CLASSES && ORDER_SIZE(c) < bytes)
        c++;
    if (c == ORDER_CLASSES)
        return NULL;
    r = o->free[c];
    if (r) {
        o->free[c] = r->next;
        o->free_bytes -= ORDER_SIZE(c);
        return r;
    }
    r = malloc(ORDER_SIZE(c));
    if (r)
        r->cls = c;
    return r;
}

int replay_order_push(struct replay_order *o, const struct dlog_decision *d, uint64_t key)
{
    struct replay_rec *r;
    size_t bytes = 0, off = 0;
    char *buf;

    if (o->any_out && key < o->out)
        return 1;
    if (d->n_kv > PROTO_KV_MAX)
        return -EINVAL;
    for (unsigned i = 0; i < d->n_kv; i++) {
        /* The matcher's pairs carry 16-bit lengths, as the protocol's. */
        if (d->kv[i].key_len > UINT16_MAX || d->kv[i].value_len > UINT16_MAX)
            return -E2BIG;
        bytes += (size_t)d->kv[i].key_len + d->kv[i].value_len + 2;
    }
    if (bytes > ORDER_STRINGS)
        return -E2BIG;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 1024;
        struct replay_rec **h = realloc(o->heap, cap * sizeof(*h));

        if (!h)
            return -ENOMEM;
        o->heap = h;
        o->cap = cap;
    }
    r = rec_get(o, sizeof(*r) + d->n_kv * sizeof(*r->kv) + bytes);
    if (!r)
        return -ENOMEM;
    o->bytes += ORDER_SIZE(r->cls);
    r->key = key;
    r->seq = o->seq++;
    r->unix_ms = d->unix_ms;
    r->n = d->n;
    r->decider_id = d->decider_id;
    r->op = d->op;
    r->flags = d->flags;
    r->protocol = d->protocol;
    r->n_kv = d->n_kv;
    r->kv = (struct proto_kv *)(r + 1);
    buf = (char *)(r->kv + d->n_kv);
    for (unsigned i = 0; i < d->n_kv; i++) {
        const struct dlog_kv *kv = &d->kv[i];

        r->kv[i].key = memcpy(buf + off, kv->key, kv->key_len);
        r->kv[i].key_len = (uint16_t)kv->key_len;
        off += kv->key_len;
        buf[off++] = '\0';
        r->kv[i].value = memcpy(buf + off, kv->value, kv->value_len);
        r->kv[i].value_len = (uint16_t)kv->value_len;
        off += kv->value_len;
        buf[off++] = '\0';
    }
    if (key > o->latest)
        o->latest = key;
    o->heap[o->n++] = r;
    sift_up(o, o->n - 1);
    return 0;
}

const struct replay_rec *replay_order_pop(struct replay_order *o, bool drain)
{
    struct replay_rec *top;

    if (o->n == 0)
        return NULL;
    top = o->heap[0];
    if (!drain && (o->bytes <= o->max_bytes || o->n == 1) && o->latest - top->key < o->window_ms)
        return NULL;
    o->heap[0] = o->heap[--o->n];
    if (o->n)
        sift_down(o, 0);
    o->out = top->key;
    o->any_out = true;
    o->bytes -= ORDER_SIZE(top->cls);
    return top;
}

void replay_order_done(struct replay_order *o, const struct replay_rec *rec)
{
    struct replay_rec *r = (struct replay_rec *)rec;

    if (!r)
        return;
    /* The free lists keep no more than the window may hold. */
    if (o->free_bytes + ORDER_SIZE(r->cls) > o->max_bytes) {
        free(r);
        return;
    }
    o->free_bytes += ORDER_SIZE(r->cls);
    r->next = o->free[r->cls];
    o->free[r->cls] = r;
}
