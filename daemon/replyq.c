/* SPDX-License-Identifier: MIT */
/*
 * replyq: the reply-order queue (see replyq.h).  A slot keeps its trailer
 * buffer when it goes back to the pool, so a busy connection whose replies
 * queue behind waiting ones reallocates rarely; a long reply (text) is
 * freed with its slot, as such replies are rare (COUNTERS).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "replyq.h"

#define REPLYQ_FREE_MAX   256       /* recycled slots per pool */

struct replyq_slot *replyq_push(struct replyq *q, struct replyq_pool *pool, void *owner,
                                size_t held)
{
    struct replyq_slot *s = pool->free;

    if (s) {
        pool->free = s->next;
        pool->n_free--;
    } else {
        s = calloc(1, sizeof(*s));
        if (!s)
            return NULL;
    }
    s->next = NULL;
    s->prev = q->tail;
    s->owner = owner;
    s->done = false;
    s->kind = 0;
    s->aux = NULL;
    s->held = held;
    s->reply_len = 0;
    s->trailer_len = 0;
    if (q->tail)
        q->tail->next = s;
    else
        q->head = s;
    q->tail = s;
    q->n++;
    q->n_waiting++;
    q->held += held;
    return s;
}

int replyq_trail(struct replyq *q, const char *s, size_t len)
{
    struct replyq_slot *t = q->tail;

    if (t->trailer_len + len > t->trailer_cap) {
        size_t cap = t->trailer_cap ? t->trailer_cap : 512;
        char *grown;

        while (cap < t->trailer_len + len)
            cap *= 2;
        grown = realloc(t->trailer, cap);
        if (!grown)
            return -ENOMEM;
        t->trailer = grown;
        t->trailer_cap = cap;
    }
    memcpy(t->trailer + t->trailer_len, s, len);
    t->trailer_len += len;
    q->bytes += len;
    return 0;
}

void replyq_done(struct replyq *q, struct replyq_slot *s, char *text, size_t len)
{
    s->text = text;
    s->text_len = len;
    s->done = true;
    q->bytes += len;
    q->n_waiting--;
}

struct replyq_slot *replyq_pop(struct replyq *q)
{
    struct replyq_slot *s = q->head;

    if (!s || !s->done)
        return NULL;
    q->head = s->next;
    if (q->head)
        q->head->prev = NULL;
    else
        q->tail = NULL;
    q->n--;
    q->bytes -= s->trailer_len + s->text_len;
    q->held -= s->held;
    return s;
}

static void slot_free(struct replyq_slot *s)
{
    free(s->trailer);
    free(s->text);
    free(s);
}

void replyq_put(struct replyq_pool *pool, struct replyq_slot *s)
{
    free(s->text);
    s->text = NULL;
    s->text_len = 0;
    if (pool->n_free >= REPLYQ_FREE_MAX) {
        slot_free(s);
        return;
    }
    s->next = pool->free;
    pool->free = s;
    pool->n_free++;
}

void replyq_clear(struct replyq *q, struct replyq_pool *pool)
{
    struct replyq_slot *s;

    while ((s = q->head) != NULL) {
        q->head = s->next;
        replyq_put(pool, s);
    }
    *q = (struct replyq){ 0 };
}

void replyq_pool_free(struct replyq_pool *pool)
{
    struct replyq_slot *s;

    while ((s = pool->free) != NULL) {
        pool->free = s->next;
        slot_free(s);
    }
    pool->n_free = 0;
}
