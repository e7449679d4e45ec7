/* SPDX-License-Identifier: MIT */
/*
 * store_int: what the store's two modules share.  store.c owns struct store
 * (settings, breaker, counters) and the typed requests; store_conn.c owns a
 * worker's connection and sends them (store_conn_send()).  Any thread may
 * read the atomics of struct store; the rest is set before the workers run.
 */
#ifndef DIVVY_STORE_INT_H
#define DIVVY_STORE_INT_H

#include <stdint.h>

#include "sentinel.h"
#include "store.h"

struct store {
    struct store_opts o;        /* strings owned; the sentinel settings live in sentinel */
    struct sentinel *sentinel;  /* NULL without Sentinel */
    uint64_t wanted;            /* atomic bool */
    char *node;                 /* the breaker's node, as on_breaker() names it */
    uint64_t open;              /* atomic bool: breaker */
    uint64_t reported;          /* atomic bool: on_breaker() called once */
    uint64_t opened_ms;         /* when it last opened */
    uint64_t conns_up;          /* atomic */
    uint64_t requests, errors, timeouts, trips, noscript;  /* atomic counters */
};

/* A user request's command. */
enum store_cmd { STORE_CMD_DEL = 0, STORE_CMD_CALL, STORE_CMD_SCAN };

static inline void store_inc(uint64_t *p)
{
    __atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
}

/* The breaker opens (@why is logged with the store's address) or closes:
 * each transition logged and counted once, whichever thread sees it. */
void store_trip(struct store *st, const char *why);
void store_untrip(struct store *st);

/*
 * Sends @cmd on @key (@key_len bytes; SCAN: the pattern): a script @call,
 * DEL, or SCAN with @call->argv[0] the cursor and [1] the count.  As
 * store_window() (store.h).
 */
int store_conn_send(struct store_conn *sc, enum store_cmd cmd, const struct store_call *call,
                    const char *key, size_t key_len, uint64_t deadline_ms, store_cb *cb,
                    void *arg);

#endif
