/* SPDX-License-Identifier: MIT */
/*
 * store_int: what the store's modules share.  store.c owns struct store
 * (settings, breakers, counters) and the typed requests; store_conn.c is a
 * worker's struct store_conn, which sends them (store_conn_send()) over one
 * link to a single server or through the cluster router; store_link*.c own
 * a connection to one server (a link), store_cluster.c the router over one
 * link per cluster master, store_slots.c the cluster's key space.  Any
 * thread may read the atomics of struct store; the rest is set before the
 * workers run, except the cluster nodes' breakers, added under nodes_lock.
 */
#ifndef DIVVY_STORE_INT_H
#define DIVVY_STORE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "sentinel.h"
#include "store.h"
#include "store_slots.h"

#define STORE_NODES_MAX     64      /* cluster nodes a store knows, ever */
#define STORE_NODE_NAME_MAX (STORE_SLOTS_HOST_MAX + 8)

/* A circuit breaker: the store's one for a single server, or a cluster
 * node's, shared by every worker's link to that server. */
struct store_breaker {
    char name[STORE_NODE_NAME_MAX]; /* a node's "HOST:PORT"; "" for the single server */
    uint64_t open;              /* atomic bool */
    uint64_t opened_ms;         /* when it last opened */
    uint64_t reported;          /* atomic bool: on_breaker() called once */
};

struct store {
    struct store_opts o;        /* strings owned; the sentinel settings live in sentinel */
    struct sentinel *sentinel;  /* NULL without Sentinel */
    uint64_t wanted;            /* atomic bool */
    char *node;                 /* the single server's node, as on_breaker() names it */
    struct store_breaker single;    /* without a cluster */
    /* With a cluster (o.n_cluster_nodes > 0): a breaker per node ever
     * seen, never removed (links keep pointers to them). */
    pthread_mutex_t nodes_lock;
    struct store_breaker nodes[STORE_NODES_MAX];
    uint64_t n_nodes;           /* atomic: entries of nodes[] in use */
    uint64_t conns_up;          /* atomic */
    uint64_t requests, errors, timeouts, trips, noscript, redirects;  /* atomic counters */
};

/* A user request's command. */
enum store_cmd { STORE_CMD_DEL = 0, STORE_CMD_CALL, STORE_CMD_SCAN };

static inline void store_inc(uint64_t *p)
{
    __atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
}

/* Breaker @br of @st opens (@why is logged with its server's address) or
 * closes: each transition logged, counted and reported (on_breaker) once,
 * whichever thread sees it. */
void store_trip(struct store *st, struct store_breaker *br, const char *why);
void store_untrip(struct store *st, struct store_breaker *br);
bool store_breaker_is_open(const struct store_breaker *br);

/* The breaker of cluster node @host:@port, added when new; NULL when
 * STORE_NODES_MAX nodes are known already.  Any thread. */
struct store_breaker *store_node_breaker(struct store *st, const char *host, unsigned port);

/* ---- a link: a connection to one server (store_link.c) ----------------------------- */

struct redisReply;
struct store_link;

/* A raw command's answer (NULL: failed, or an error reply). */
typedef void store_raw_cb(void *arg, const struct redisReply *r);

/* What a cluster router hears from a link; all NULL for a single server. */
struct store_link_hooks {
    /* A user request got a cluster redirection or refusal (@err, the
     * error's text, store_slots_redirect()): the router answers it instead
     * of the request's callback. */
    void (*redirect)(void *req_arg, const char *err);
    /* The link became ready (@up) or failed (its breaker is open now). */
    void (*state)(void *arg, struct store_link *l, bool up);
    void *arg;
};

/*
 * A link on @base whose failures trip @br: to @host:@port (a cluster node),
 * or with @host NULL to the store's server (its host, Unix socket or
 * Sentinel).  Connects when the store is wanted.  -ENOMEM, -EINVAL.
 */
int store_link_new(struct store *st, struct event_base *base, struct store_breaker *br,
                   const char *host, unsigned port, const struct store_link_hooks *hooks,
                   struct store_link **ret);
/* Fails every request in flight (callbacks with NULL), closes, frees. */
void store_link_free(struct store_link *l);
bool store_link_active(const struct store_link *l);
bool store_link_ready(const struct store_link *l);
struct store_breaker *store_link_breaker(const struct store_link *l);
/* @idle: no reconnect after a failure (a node that is no longer a master);
 * else connects now if down and not waiting for its backoff. */
void store_link_idle(struct store_link *l, bool idle);
/* As store_conn_send(); @asking: ASKING first, on the same connection. */
int store_link_send(struct store_link *l, enum store_cmd cmd, const struct store_call *call,
                    const char *key, size_t key_len, uint64_t deadline_ms, bool asking,
                    store_cb *cb, void *arg);
/* Sends @argv (the store's deadline); @cb runs once, later.  -ENOTCONN. */
int store_link_raw(struct store_link *l, int argc, const char **argv, const size_t *lens,
                   store_raw_cb *cb, void *arg);

/* ---- the cluster router (store_cluster.c) ------------------------------------------- */

struct store_cluster;

int store_cluster_new(struct store *st, struct event_base *base, struct store_cluster **ret);
void store_cluster_free(struct store_cluster *cl);
bool store_cluster_active(const struct store_cluster *cl);
/* As store_conn_send(): routed by the key's slot; SCAN visits every master
 * in turn (docs/redis.md "Cluster"). */
int store_cluster_send(struct store_cluster *cl, enum store_cmd cmd,
                       const struct store_call *call, const char *key, size_t key_len,
                       uint64_t deadline_ms, store_cb *cb, void *arg);

/*
 * Sends @cmd on @key (@key_len bytes; SCAN: the pattern): a script @call,
 * DEL, or SCAN with @call->argv[0] the cursor and [1] the count.  As
 * store_verdict() (store.h).
 */
int store_conn_send(struct store_conn *sc, enum store_cmd cmd, const struct store_call *call,
                    const char *key, size_t key_len, uint64_t deadline_ms, store_cb *cb,
                    void *arg);

#endif
