/* SPDX-License-Identifier: MIT */
/*
 * resp_conn: what a RESP connection keeps of its own (the protocol version
 * HELLO chose, whom AUTH authenticated, a transaction's queue) and the reply
 * writers of the RESP commands, which answer in the version the connection
 * speaks: RESP2 until "HELLO 3", RESP3 after it (docs/resp.md "RESP3").  A
 * connection that never sent HELLO, AUTH or MULTI keeps nothing (its state
 * is made on first use, c->proto_state).  The connection's thread.
 */
#ifndef DIVVY_RESP_CONN_H
#define DIVVY_RESP_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "proto.h"

struct resp_state {
    unsigned proto;             /* 2 or 3 */
    uint64_t auth_gen;          /* resp_auth generation it authenticated under; 0: none */
    unsigned auth_fails;        /* wrong credentials sent */
    bool multi;                 /* between MULTI and EXEC or DISCARD */
    bool multi_dirty;           /* a command was refused since MULTI: EXEC aborts */
    unsigned n_queued;          /* commands queued since MULTI */
    char *queue;                /* ... as they came on the wire, back to back */
    size_t queue_len, queue_cap;
};

/* @c's state, made on first use (RESP2, not authenticated); NULL: out of memory. */
struct resp_state *resp_state(struct conn *c);

/* @c's state if it has one, else NULL (the defaults). */
static inline struct resp_state *resp_state_peek(const struct conn *c)
{
    return c->proto_state;
}

/* The protocol version @c speaks: 2 or 3. */
unsigned resp_version(const struct conn *c);

/* conn_proto.on_free: frees @c's state and its queue. */
void resp_state_free(struct conn *c);

/* ---- replies, in @c's version ------------------------------------------------------- */

/* @n bytes of reply @s (a formatter's result: n <= 0 is a bug, never input:
 * @c is closed rather than answered wrong). */
void resp_out(struct conn *c, const char *s, int n);
/* "-<text>", counted as divvy's @err is (STATS errors, metrics). */
void resp_error(struct conn *c, enum proto_err err, const char *text);
/* divvy's error @err as RESP speaks it ("-ERR <code> <reason>"), counted. */
void resp_proto_err(struct conn *c, enum proto_err err, const char *reason);
void resp_simple(struct conn *c, const char *s);
void resp_int(struct conn *c, int64_t v);
void resp_bulk(struct conn *c, const char *s, size_t len);
void resp_bulk_str(struct conn *c, const char *s);
void resp_array(struct conn *c, unsigned n);
/* A map of @n pairs: RESP3 "%<n>", RESP2 an array of 2n. */
void resp_map(struct conn *c, unsigned n);
/* No value: RESP3 "_", RESP2 a null bulk string "$-1". */
void resp_null(struct conn *c);

#endif
