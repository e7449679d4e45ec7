/* SPDX-License-Identifier: MIT */
/*
 * replay_order: the reorder window of `divvyctl replay` (docs/replay.md
 * "Order").  Recorded decisions reach the replay almost in time order: the
 * blocks of divvyd's workers interleave, and a libdivvy client reports its
 * fast-path decisions late.  The window holds each decision (an owned copy
 * of its request) until no decision still to come may be earlier than it by
 * the window's length, then hands them out in (time, arrival) order.  A
 * decision that arrives after one later than it by more than the window was
 * handed out is late: not held, counted by the caller.  Memory is bounded by
 * @max_bytes of held records (each sized to its request, at most 128 KiB):
 * past it the oldest is handed out early (the window shrinks; what then
 * arrives behind it is late).  No I/O, no globals; one object per replay,
 * not shared between threads.
 */
#ifndef DIVVY_REPLAY_ORDER_H
#define DIVVY_REPLAY_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlog.h"
#include "proto.h"

/* One decision as the window holds it: what the replay needs of a
 * dlog_decision, its request pairs copied (each string NUL-terminated). */
struct replay_rec {
    uint64_t key;               /* the virtual clock's ms: the order */
    uint64_t seq;               /* arrival: the order among equal keys */
    uint64_t unix_ms;
    uint64_t n;
    uint64_t decider_id;
    uint8_t op;                 /* enum table_op */
    uint8_t flags;              /* DLOG_F_* */
    uint8_t protocol;
    unsigned n_kv;
    struct proto_kv *kv;        /* n_kv pairs, in the record's own memory */
    /* private: the record's size class and the free list */
    unsigned cls;
    struct replay_rec *next;
};

struct replay_order;

/* A window of @window_ms holding records of at most @max_bytes in all (at
 * least one record is always held); NULL: no memory. */
struct replay_order *replay_order_new(uint64_t window_ms, size_t max_bytes);
void replay_order_free(struct replay_order *o);

/*
 * Takes a copy of decision @d at virtual time @key: 0 (held), 1 (late: the
 * window already handed out a decision later than @key; nothing held),
 * -ENOMEM.
 */
int replay_order_push(struct replay_order *o, const struct dlog_decision *d, uint64_t key);

/*
 * The next decision due: the earliest held one when the latest pushed is
 * later than it by at least the window, or the held records take more than
 * max_bytes, or @drain (the input ended); else NULL.  The record stays valid until it
 * is given back with replay_order_done() (one at a time).
 */
const struct replay_rec *replay_order_pop(struct replay_order *o, bool drain);
void replay_order_done(struct replay_order *o, const struct replay_rec *rec);

/* Decisions held now, and the bytes they take. */
size_t replay_order_held(const struct replay_order *o);
size_t replay_order_bytes(const struct replay_order *o);

#endif
