/* SPDX-License-Identifier: MIT */
/*
 * store_link_int: what a link's two halves share (see store_int.h):
 * store_link.c sends and keeps the connection alive, store_link_reply.c
 * decodes the answers.  All of it belongs to the link's thread.
 */
#ifndef DIVVY_STORE_LINK_INT_H
#define DIVVY_STORE_LINK_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <hiredis/async.h>

#include "sentinel.h"
#include "store.h"
#include "store_int.h"

#define FREELIST_MAX        1024
#define NOSCRIPT_RETRIES    1

enum conn_state { CONN_DOWN = 0, CONN_CONNECTING, CONN_READY };

enum req_kind {
    REQ_USER = 0, REQ_HANDSHAKE, REQ_HANDSHAKE_LAST, REQ_IGNORE, REQ_ROLE, REQ_RAW,
};

/* One command in flight, in send order (Redis answers in that order). */
struct sreq {
    struct sreq *next;
    struct store_link *sc;
    enum req_kind kind;
    store_cb *cb;
    store_raw_cb *raw_cb;       /* REQ_RAW's */
    void *arg;
    uint64_t deadline;
    enum store_cmd cmd;         /* a user request's command */
    unsigned retries;
    /* The command, kept for a retry after NOSCRIPT. */
    struct store_call call;
    char *key;
    size_t key_len;
};

struct store_link {
    struct store *st;
    struct store_breaker *br;   /* &st->single, or the cluster node's */
    struct store_link_hooks hooks;  /* all NULL for a single server */
    char node_host[STORE_SLOTS_HOST_MAX];   /* a cluster node's; "" for the store's address */
    unsigned node_port;
    bool idle;                  /* no longer a master: no reconnects */
    struct event_base *base;
    redisAsyncContext *ac;      /* NULL when down */
    enum conn_state state;
    bool closing;
    struct sreq *head, *tail;   /* in flight */
    struct sreq *free_list;
    unsigned n_free;
    struct event *deadline_ev;
    bool deadline_armed;
    uint64_t deadline_at;
    struct event *retry_ev;
    unsigned backoff_ms;
    struct sentinel_query *sq;  /* NULL without Sentinel */
    struct sreq *wait_head, *wait_tail;     /* accepted while asking the sentinels */
    struct sentinel_watch *sw;  /* +switch-master; NULL without Sentinel */
    char master_host[SENTINEL_HOST_MAX];    /* where the sentinels sent sc->ac */
    unsigned master_port;
    bool reask;                 /* a switch was announced while asking: ask once more */
    char announced_host[SENTINEL_HOST_MAX]; /* ... to this address */
    unsigned announced_port;
};

/* store_link.c */
void store_link_req_free(struct store_link *sc, struct sreq *q);
void store_link_fifo_remove(struct store_link *sc, struct sreq *q);
/* Queues the command of @q on the connection; -ENOTCONN when hiredis refuses. */
int store_link_req_send(struct store_link *sc, struct sreq *q);
/* SCRIPT LOAD of @s, as an internal request of @kind. */
int store_link_script_load(struct store_link *sc, enum store_script s, enum req_kind kind);
/* The connection failed: trip the breaker, forget the context, retry later. */
void store_link_fail(struct store_link *sc, const char *why, bool ac_alive);

/* store_link_reply.c */
/* Frees @q, then runs its callback with @rep (a raw one with NULL). */
void store_link_finish(struct store_link *sc, struct sreq *q, const struct store_reply *rep);
/* hiredis's callback for every command a link sends. */
void store_link_on_reply(redisAsyncContext *ac, void *reply, void *privdata);

#endif
