/* SPDX-License-Identifier: MIT */
/*
 * dlog_ring: one worker's buffer of decisions for the decision log
 * (dlog_writer.h, docs/operations.md "Decision log").  A single-producer
 * single-consumer byte ring: the worker (producer) copies each decision in
 * as a raw record (fixed-width fields, its request pairs' bytes after
 * them) and never waits; the drain thread (consumer) reads records out,
 * turns them into struct dlog_decision and hands them to the encoder.
 *
 * No lock: the producer alone moves head, the consumer alone moves tail,
 * each published with a release store and read with an acquire load.  A
 * record never wraps: one that does not fit before the end is preceded by
 * a padding record up to it.  A ring with no room for a record drops it
 * and counts it; the count goes into the ring as a GAP record before the
 * next record that fits, so the log says where decisions are missing.
 */
#ifndef DIVVY_DLOG_RING_H
#define DIVVY_DLOG_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlog.h"
#include "eval.h"
#include "proto.h"
#include "rules.h"

#define DLOG_RING_BYTES (1u << 20)      /* one worker's ring (a power of two) */

struct dlog_ring;

/* What the engine knows of a decision besides its result (engine_settle()). */
struct dlog_note {
    const struct proto_kv *kv;
    unsigned n_kv;
    uint8_t op;                 /* enum table_op */
    uint8_t protocol;           /* enum dlog_protocol */
    uint8_t flags;              /* DLOG_F_PRIVILEGED, DLOG_F_ERROR */
    bool rematched;             /* a reload re-matched its path: indexes are stale */
    uint16_t err;               /* DLOG_F_ERROR: enum proto_err */
    uint32_t uid, pid;          /* DLOG_UNKNOWN_ID: not known */
    uint64_t mono_ms;           /* the engine's clock_now_ms() */
    uint64_t generation;
    uint64_t n;
};

/* A ring of @cap bytes (a power of two, at least 64 KiB): NULL, no memory. */
struct dlog_ring *dlog_ring_new(size_t cap);
void dlog_ring_free(struct dlog_ring *rg);

/* ---- the producer (one worker thread) --------------------------------------------------- */

/*
 * Copies decision @no (with @res under @rs; @res ignored for an error) in:
 * true; false when it did not fit (dropped, counted).  Never blocks or
 * allocates.  *@ret_kick is set when the ring just passed half full and
 * the drain thread should be woken (once until it drained the ring).
 */
bool dlog_ring_put(struct dlog_ring *rg, const struct dlog_note *no, const struct rules *rs,
                   const struct eval_result *res, bool *ret_kick);

/*
 * Copies client-reported decision @d in, only into the ring's first half
 * (so reports never take the room divvyd's own decisions need): 0;
 * -ENOSPC (over half full: dropped, counted); -EINVAL (a field out of
 * range).  *@ret_kick as dlog_ring_put().
 */
int dlog_ring_put_report(struct dlog_ring *rg, const struct dlog_decision *d, bool *ret_kick);

/* ---- the consumer (the drain thread) ---------------------------------------------------- */

/* The kinds of record dlog_ring_next() returns. */
enum dlog_raw_kind { DLOG_RAW_NONE = 0, DLOG_RAW_DECISION, DLOG_RAW_GAP };

/*
 * The next record into *@d (a decision: its pairs point into the ring,
 * valid until dlog_ring_release()) or *@ret_dropped and *@ret_mono_ms (a
 * gap).  DLOG_RAW_NONE when the ring is empty.  unix_ms is left 0.
 */
enum dlog_raw_kind dlog_ring_next(struct dlog_ring *rg, struct dlog_decision *d,
                                  uint64_t *ret_dropped, uint64_t *ret_mono_ms);

/* The bytes the record dlog_ring_next() returned last takes in the ring. */
size_t dlog_ring_size(const struct dlog_ring *rg);

/* Gives back the room of the record dlog_ring_next() returned last. */
void dlog_ring_release(struct dlog_ring *rg);

/* Clears the "woken" mark (after the drain emptied the ring). */
void dlog_ring_rearm(struct dlog_ring *rg);

/* Records dropped so far (any thread; relaxed). */
uint64_t dlog_ring_dropped(const struct dlog_ring *rg);

#endif
