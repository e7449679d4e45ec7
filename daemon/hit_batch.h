/* SPDX-License-Identifier: MIT */
/*
 * hit_batch: hot-key coalescing of a worker's verdict scripts (docs/redis.md
 * "Hot keys").  While a script for key K is in flight on the worker's
 * connection, further requests on K wait in K's entry of a per-worker
 * table instead of each sending its own; when the oldest script for K
 * answers, the requests that waited meanwhile go as ONE batched call
 * (store_verdicts()), which decides each in arrival order in Redis, exactly
 * as that many plain calls one after the other would: a denied request
 * charges nothing, so a later cheaper one may still fit.  Each request gets
 * its own verdict through its own callback.  A request alone (no script for
 * its key in flight) is sent at once as a plain call: batching adds no wait
 * to a key that is not hot.
 *
 * Deadlines: a request joins the waiting batch only when its deadline is not
 * earlier than that of the script it waits behind (which is answered, or
 * fails with its connection, by then); otherwise the batch goes at once and
 * the request after it.  A batch holds at most STORE_ITEMS_MAX requests.
 * A failure (timeout, connection lost, breaker open) fails every request of
 * the batch: each callback runs with NULL, so each gets on_redis_error.  A
 * batch that cannot be sent when a request must go after it (the connection
 * refuses) keeps waiting for the answer of the script ahead of it, and that
 * request is refused as the batch would be: nothing overtakes a request
 * queued before it.
 *
 * Everything runs on the worker's thread; the callbacks keep store.h's
 * promise: exactly once, never from inside the call that sent them.
 */
#ifndef DIVVY_HIT_BATCH_H
#define DIVVY_HIT_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct hit_batch;

/* What a table counts (STATS redis_scripts, redis_script_requests). */
struct hit_batch_stats {
    uint64_t scripts;           /* verdict scripts sent (plain and batched) */
    uint64_t requests;          /* requests they decided */
};

/* The table of worker connection @sc, counting into @counts (written with
 * relaxed atomic stores, read by any thread; it must outlive the table).
 * -ENOMEM, -EIO (no random key for the table's hash: keys hold actors,
 * which peers choose). */
int hit_batch_new(struct store_conn *sc, struct hit_batch_stats *counts, struct hit_batch **ret);

/*
 * Frees: call after store_conn_free() has answered every script in flight,
 * whose answers answered every batch waiting behind them (nothing is left
 * waiting by then).  NULL-safe.
 */
void hit_batch_free(struct hit_batch *b);

/*
 * As store_verdict() (@a, on @key of @key_len bytes, by @deadline_ms):
 * sent at once, or queued behind the script for @key already in flight and
 * sent with the others queued there.  0 when sent or queued (@cb runs
 * once, later), or store_verdict()'s -errno without calling @cb.
 */
int hit_batch_send(struct hit_batch *b, const char *key, size_t key_len,
                   const struct store_verdict_args *a, uint64_t deadline_ms, store_cb *cb,
                   void *arg);

/*
 * Sends at once the batch waiting on @key (@key_len bytes), if any, so that
 * a command for @key sent after this call (RESET's DEL) reaches Redis after
 * the requests that came before it.  0, or store_verdicts()'s -errno: the
 * batch then stays, answered with the script ahead of it.
 */
int hit_batch_flush(struct hit_batch *b, const char *key, size_t key_len);

#endif
