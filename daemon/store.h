/* SPDX-License-Identifier: MIT */
/*
 * store: divvyd's Redis store (docs/redis.md).  One struct store per daemon
 * holds the settings, the circuit breaker and the counters; each worker
 * owns one struct store_conn: a hiredis async connection attached to the
 * worker's own libevent loop, over which its requests are pipelined.
 *
 * Requests are typed calls of the Lua scripts (store_verdict(),
 * store_verdicts(), store_lease(); their text, ARGV and
 * answers are in daemon/store_script.h), run with EVALSHA (each script
 * loaded with SCRIPT LOAD at every connect and again after NOSCRIPT), DEL
 * and SCAN (store_scan(), for COUNTERS).  Every request carries a deadline:
 * hiredis 0.14 has no async timeouts, so one libevent timer per connection
 * watches the oldest deadline, and a
 * request past it drops the connection (Redis answers in order, so nothing
 * behind it can be answered first).  The first failure of any kind trips a
 * breaker shared by all workers: from then on every request refuses at once
 * (the caller applies on_redis_error) while each worker's connection is
 * re-established in the background with backoff; the first connection to
 * come back closes the breaker.  Each transition is logged once.  In a
 * cluster (docs/redis.md "Cluster", daemon/store_cluster.c) each master
 * has its own breaker, and a redirection is no failure.  With
 * Sentinel (daemon/sentinel.h) every connect first asks the sentinels
 * where the master is, and a server that is not a master is a failure.
 *
 * Threads: store_new()/store_free() in the main thread; a store_conn and
 * its callbacks belong to the thread running its event_base.  The breaker
 * and the counters are atomics any thread may read.
 */
#ifndef DIVVY_STORE_H
#define DIVVY_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store_script.h"

struct event_base;

struct store_opts {
    const char *host;           /* TCP, unless unix_socket is set */
    unsigned port;
    const char *unix_socket;    /* NULL: TCP */
    const char *username;       /* NULL: AUTH password (or no AUTH without password) */
    const char *password;       /* NULL: no AUTH */
    unsigned db;                /* SELECT when not 0 */
    unsigned timeout_ms;        /* >= 1: deadline of a request that does not give its own */
    const char *prefix;         /* key prefix, "" for none */
    /* Sentinel (docs/redis.md "Sentinel"): with n_sentinels > 0 every
     * connect first asks them, in order, where master_name is (host, port
     * and unix_socket are unused), and checks with ROLE that the server it
     * reached is a master. */
    const char *const *sentinels;   /* "HOST:PORT", "[V6]:PORT", "unix:PATH" */
    unsigned n_sentinels;           /* 0: no Sentinel; at most SENTINEL_MAX */
    const char *master_name;        /* needed with sentinels */
    const char *sentinel_password;  /* NULL: no AUTH to the sentinels */
    /* Redis Cluster (docs/redis.md "Cluster"): with n_cluster_nodes > 0
     * the slot map is asked of these seeds (and of the nodes it names), each
     * key goes to its slot's master, and each node has its own breaker;
     * host, port, unix_socket, db and the sentinels are unused. */
    const char *const *cluster_nodes;   /* "HOST:PORT", "[V6]:PORT" */
    unsigned n_cluster_nodes;           /* 0: no cluster */
    /* The breaker of node @node (a cluster node's "HOST:PORT"; else
     * "HOST:PORT", "unix:PATH", or "sentinel:NAME" for the master Sentinel
     * names) reported: called on each transition (open = true: tripped),
     * and once with open = false when the node is first reached without
     * having tripped, from the thread that saw it; may be NULL.  For the
     * metrics (metrics.h). */
    void (*on_breaker)(void *arg, const char *node, bool open);
    void *arg;
};

/*
 * Called exactly once for every request accepted (store_verdict() ...
 * store_del() returned 0), in the owning worker's thread, never from inside
 * the call that sent it.  @reply (store_script.h) is the answer, of the kind
 * the request asks for: a verdict (window, bucket, sliding), verdicts (a
 * batched call), a grant (lease) or a count (DEL).  It is NULL when the request failed: timeout,
 * connection lost, an error reply, an answer not of that kind, or the
 * connection being closed at shutdown; the breaker is open by then (except
 * at shutdown).
 */
typedef void store_cb(void *arg, const struct store_reply *reply);

struct store;
struct store_conn;

/* Copies @o (strings included).  -EINVAL (a bad sentinel or cluster seed
 * address among them, both sentinels and seeds), -ENOMEM. */
int store_new(const struct store_opts *o, struct store **ret);
/* NULL-safe; every store_conn must be freed first. */
void store_free(struct store *st);

/* From now on the workers connect (and keep connecting): called at start
 * when some rule needs Redis, else by the first hit that does.  Any thread. */
void store_want(struct store *st);
bool store_wanted(const struct store *st);

/* True while the breaker is open: requests would be refused.  In a cluster:
 * every node's breaker is open.  Any thread. */
bool store_breaker_open(const struct store *st);

/* A worker's connection on @base; connects when the store is wanted.  Call
 * in the thread that will run @base (or before it runs).  -ENOMEM. */
int store_conn_new(struct store *st, struct event_base *base, struct store_conn **ret);

/* Fails every request still in flight (their callbacks run with NULL,
 * before this returns), closes and frees.  NULL-safe. */
void store_conn_free(struct store_conn *sc);

/* True while @sc has a hiredis connection, connected or connecting; false
 * while it is down (waiting to retry).  @sc's thread. */
bool store_conn_active(const struct store_conn *sc);

/*
 * Calls a script on key @key (@key_len bytes) with the arguments @a
 * (store_script.h), by EVALSHA.  @deadline_ms (CLOCK_MONOTONIC,
 * clock_now_ms()) bounds the wait; @cb(@arg, reply) runs once later.  While
 * the sentinels are being asked where the master is, the request waits
 * (within its deadline) and is sent once connected.  Returns 0 when sent
 * (or waiting), or without calling @cb:
 *   -ENOTCONN   the breaker is open (or the connection is closing);
 *   -ETIMEDOUT  @deadline_ms has passed already;
 *   -EINVAL, -ENOMEM.
 */
int store_verdict(struct store_conn *sc, const char *key, size_t key_len,
                  const struct store_verdict_args *a, uint64_t deadline_ms, store_cb *cb,
                  void *arg);
int store_lease(struct store_conn *sc, const char *key, size_t key_len,
                const struct store_lease_args *a, uint64_t deadline_ms, store_cb *cb, void *arg);

/* RESP's ad-hoc buckets (docs/resp.md): the reply is STORE_REPLY_TOKENS
 * or STORE_REPLY_GCRA; @key from store_adhoc_key().  As store_verdict(). */
int store_adhoc_tb(struct store_conn *sc, const char *key, size_t key_len,
                   const struct store_adhoc_tb_args *a, uint64_t deadline_ms, store_cb *cb,
                   void *arg);
int store_adhoc_gcra(struct store_conn *sc, const char *key, size_t key_len,
                     const struct store_adhoc_gcra_args *a, uint64_t deadline_ms, store_cb *cb,
                     void *arg);

/*
 * One call of @a's script deciding the requests @items (op and n each; a's
 * own op and n unused) one after the other on @key, in their order, as the
 * same number of store_verdict() calls sent back to back would; the reply
 * is STORE_REPLY_VERDICTS, one verdict per item (store_verdicts_get()).
 * @items is borrowed until @cb has run.  As store_verdict(); -EINVAL for no
 * items.
 */
int store_verdicts(struct store_conn *sc, const char *key, size_t key_len,
                   const struct store_verdict_args *a, const struct store_items *items,
                   uint64_t deadline_ms, store_cb *cb, void *arg);

/* DEL @key; the reply is STORE_REPLY_DELETED.  As store_verdict(). */
int store_del(struct store_conn *sc, const char *key, size_t key_len, uint64_t deadline_ms,
              store_cb *cb, void *arg);

/*
 * SCAN @cursor MATCH @pattern (@pattern_len bytes, a Redis glob) COUNT
 * @count: one step of a scan (0 starts one).  The reply is STORE_REPLY_KEYS:
 * the next cursor and the keys found (store_keys_get()).  As store_verdict().
 */
int store_scan(struct store_conn *sc, const char *pattern, size_t pattern_len, uint64_t cursor,
               unsigned count, uint64_t deadline_ms, store_cb *cb, void *arg);

/* Writes into @buf the SCAN pattern of every key of rule @rule_id (or, with
 * NULL, of every rule): store_key()'s prefix and rule id, glob characters
 * escaped, then "*".  Its length, or -ENOBUFS. */
int store_key_pattern(const struct store *st, const char *rule_id, char *buf, size_t size);

/* The actor of @key (@key_len bytes, a key store_key() made for @rule_id),
 * unescaped into @buf; its length, or -EINVAL when @key is not one of
 * @rule_id's, -ENOBUFS. */
int store_key_actor(const struct store *st, const char *rule_id, const char *key,
                    size_t key_len, char *buf, size_t size);

/* The store's default deadline from now. */
uint64_t store_deadline(const struct store *st, uint64_t now_ms);
unsigned store_timeout_ms(const struct store *st);

/*
 * Writes the Redis key of counter (@rule_id, @actor) into @buf:
 * <prefix>divvy:{<rule_id>:<actor with ':', '{', '}', '%' as %3A %7B %7D %25>}
 * (docs/redis.md "Keys").  Returns its length (no NUL is written), or
 * -ENOBUFS.  Thread-safe.
 */
int store_key(const struct store *st, const char *rule_id, const char *actor, size_t actor_len,
              char *buf, size_t size);
/*
 * Writes the Redis key of ad-hoc bucket @name (@len bytes, any bytes) of
 * @kind ('S': RL.*, 'G': CL.THROTTLE) with its @n parameters into @buf:
 * <prefix>divvy:adhoc:{<name escaped as store_key() escapes an actor>}:<kind>:<p1>:<p2>...
 * (docs/redis.md "Keys"): the name is the hash tag, so every bucket of one
 * name is on one Cluster slot, and the parameters name the bucket as in
 * divvyd's own table.  Its length, or -ENOBUFS.  Thread-safe.
 */
int store_adhoc_key(const struct store *st, char kind, const char *name, size_t len,
                    const int64_t *params, size_t n, char *buf, size_t size);

/* The configured key prefix ("" for none). */
const char *store_key_prefix(const struct store *st);

/* Longest key store_key() writes for an actor of @actor_len bytes. */
size_t store_key_max(const struct store *st, size_t actor_len);

struct store_stats {
    bool wanted;
    bool breaker_open;
    unsigned conns_up;          /* worker connections ready now */
    uint64_t requests;          /* commands sent */
    uint64_t errors;            /* failed requests: timeouts, lost connections, error replies */
    uint64_t timeouts;          /* deadlines missed (each drops one connection) */
    uint64_t trips;             /* breaker: closed -> open */
    uint64_t noscript;          /* NOSCRIPT answers (script reloaded, request retried) */
    uint64_t down_ms;           /* breaker open: for how long (0 while closed) */
    uint64_t redirects;         /* cluster MOVED and ASK answers followed */
    unsigned nodes_known;       /* cluster nodes ever seen (0 without a cluster) */
    unsigned nodes_up;          /* ... whose breaker is closed */
};
void store_stats(const struct store *st, struct store_stats *ret);

/* Where the store connects, for operators: "unix:PATH", "HOST:PORT",
 * "sentinel:NAME" (plus "@HOST:PORT" once a sentinel named the master) or
 * "cluster:HOST:PORT" (the first seed); no
 * space, quote or control byte (each shown as '_').  Thread-safe. */
const char *store_address(const struct store *st, char *buf, size_t size);

/* Where @st's Redis is, for log lines: "master NAME" (Sentinel),
 * "unix:PATH" or "HOST:PORT", in @buf (@size bytes), which it returns. */
const char *store_where(const struct store *st, char *buf, size_t size);

#endif
