/* SPDX-License-Identifier: MIT */
/*
 * replyq: the reply-order queue of a connection whose protocol answers in
 * request order (the line protocol, RESP).  A request whose answer comes
 * later (a hit that waits for Redis, COUNTERS reading Redis, an ad-hoc
 * bucket in Redis) takes a slot at the end of its connection's queue;
 * replies made while slots are pending go into the last slot's trailer, and
 * once the head slot is answered the queue's answered prefix leaves in
 * order (docs/dev/daemon.md "Hits that wait for Redis").  Nothing is queued,
 * and nothing allocated, while no answer waits.
 *
 * A data structure only: it knows neither connections nor the engine.  The
 * transport (conn.h) holds one queue per connection and moves what leaves
 * it to the output buffer; the front-ends take and answer slots.  Slots are
 * recycled through a pool (one per worker thread).  Not thread-safe: one
 * thread owns a queue and its pool.
 */
#ifndef DIVVY_REPLYQ_H
#define DIVVY_REPLYQ_H

#include <stdbool.h>
#include <stddef.h>

#include "proto.h"

/* A pending reply. */
struct replyq_slot {
    struct replyq_slot *next;   /* the queue, or the pool's free list */
    struct replyq_slot *prev;   /* the queue */
    void *owner;                /* the front-end's: whose reply it is (its connection) */
    unsigned kind;              /* the front-end's: what it answers (a verb) */
    void *aux;                  /* the front-end's: how it answers */
    bool done;                  /* answered: reply[] and text hold it */
    size_t held;                /* what it holds against its connection's budget */
    char reply[PROTO_REPLY_MAX];
    size_t reply_len;
    char *text;                 /* a reply of any length (malloc'd), after reply[] */
    size_t text_len;
    char *trailer;              /* replies of later requests made while it waits */
    size_t trailer_len, trailer_cap;
};

struct replyq {
    struct replyq_slot *head, *tail;
    unsigned n;                 /* slots in the queue */
    unsigned n_waiting;         /* ... not answered yet */
    size_t bytes;               /* trailer and text bytes queued */
    size_t held;                /* the slots' own charges (replyq_slot.held) */
};

/* Recycled slots of one thread. */
struct replyq_pool {
    struct replyq_slot *free;
    unsigned n_free;
};

/* A new slot at the end of @q for @owner, charged @held bytes; NULL: out of memory. */
struct replyq_slot *replyq_push(struct replyq *q, struct replyq_pool *pool, void *owner,
                                size_t held);

/* Appends a reply made while slots wait to the last one's trailer: 0 or -ENOMEM. */
int replyq_trail(struct replyq *q, const char *s, size_t len);

/* Slot @s of @q is answered: reply[]/reply_len set by the caller, and @text
 * (malloc'd, taken over; NULL when none) of @len bytes after them. */
void replyq_done(struct replyq *q, struct replyq_slot *s, char *text, size_t len);

/* Takes the head slot off @q when it is answered (its reply, text and
 * trailer are the next bytes out); NULL when the head still waits or @q is
 * empty.  The caller gives it back with replyq_put(). */
struct replyq_slot *replyq_pop(struct replyq *q);

/* Gives slot @s back to @pool (or frees it past a bound). */
void replyq_put(struct replyq_pool *pool, struct replyq_slot *s);

/* Drops every slot of @q, answered or not, into @pool: the connection goes. */
void replyq_clear(struct replyq *q, struct replyq_pool *pool);

/* Frees @pool's slots; when its thread stops. */
void replyq_pool_free(struct replyq_pool *pool);

#endif
