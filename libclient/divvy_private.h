/* SPDX-License-Identifier: MIT */
/*
 * divvy_private: the handle of libdivvy's API layer (divvy.c), never
 * installed.  struct divvy composes the layers below it, each with its own
 * private header and its own state: the connection (client_conn), the fast
 * path (client_fast, which borrows the connection for FAST and REFILL) and
 * the memo of request shapes (client_memo, which drives the fast path), plus
 * the error message all of them write (client_err).  Only divvy.c and
 * white-box tests include this: the layers below never see the handle
 * (libclient's layers: divvy -> memo -> fast -> handoff -> conn -> wire ->
 * err; tests/check_layers.sh checks it).  One handle is used by one thread
 * at a time (divvy.h); nothing keeps global state and nothing logs.
 */
#ifndef DIVVY_DIVVY_PRIVATE_H
#define DIVVY_DIVVY_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include "client_err.h"
#include "client_memo.h"
#include "divvy.h"

#define CLIENT_TIMEOUT_DEFAULT  1000            /* ms, connect and request */
#define CLIENT_PREFETCH_FIRST   64              /* divvy_hit_many(): counters loaded up front, */
#define CLIENT_PREFETCH_AHEAD   16              /* then this many requests ahead */

/* v1 of struct divvy_result: the smallest @size the library accepts. */
#define CLIENT_RESULT_MIN_SIZE  sizeof(struct divvy_result)

struct divvy {
    unsigned mode;              /* DIVVY_AUTO, DIVVY_SOCKET_ONLY or DIVVY_FAST_ONLY */
    struct client_conn conn;    /* conn.err, fast.conn and fast.err point into this handle */
    struct client_fast fast;
    struct client_memo *memo;   /* request shapes the fast path decided, or NULL */
    uint8_t *batch_sock;        /* divvy_hit_many: which requests went to the socket */
    size_t batch_cap;
    struct client_err err;      /* the last call's message (divvy_errmsg()) */
};

#endif
