/* SPDX-License-Identifier: MIT */
/*
 * client_conn: libdivvy's connection to divvyd (client_conn.c): connects
 * lazily within a deadline, exchanges pipelined requests with one request
 * deadline and reconnects once, transparently, when a kept connection turns
 * out dead.  Uses client_wire (addresses, reply lines) and client_err; the
 * API layer (divvy.c) embeds one struct client_conn in each handle and lends
 * it to client_handoff and client_fast (libclient's layers: divvy -> memo ->
 * fast -> handoff -> conn -> wire -> err).
 */
#ifndef DIVVY_CLIENT_CONN_H
#define DIVVY_CLIENT_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client_err.h"
#include "client_wire.h"

#define CLIENT_REPLY_MAX        (64u << 20)     /* bytes of replies one call may buffer */
#define CLIENT_COMMAND_LINES    1000000         /* body lines of one OK <n> reply */

/* A handle's connection with the buffers of the current call.  Set up by
 * its owner: addr, the timeouts, fd = -1 and err (the handle's message). */
struct client_conn {
    struct client_addr addr;
    int connect_ms, request_ms;
    int fd;                     /* -1: not connected */
    bool fd_used;               /* a reply was read on fd: it may have gone stale since */
    char *rbuf;                 /* replies of the current call */
    size_t rlen, rcap;
    char *wbuf;                 /* requests of the current call */
    size_t wlen, wcap;
    struct client_err *err;     /* where failures are described (borrowed) */
};

enum client_expect {
    CLIENT_EXPECT_LINES,        /* one reply line per request */
    CLIENT_EXPECT_COMMAND,      /* one request; "OK <n>" brings n more lines */
};

/*
 * Sends c->wbuf[0..c->wlen) holding @n_req requests and reads their replies
 * into c->rbuf[0..c->rlen) (whole lines, newlines included), connecting first
 * if needed.  Reading and writing overlap, so a long pipeline cannot
 * deadlock.  One request deadline (c->request_ms) covers the exchange.  If a
 * connection reused from an earlier call fails at send time or reaches EOF
 * before any reply byte, the daemon probably restarted: reconnect and resend
 * once.  On any failure the connection is closed (its state is unknown).
 * -ETIMEDOUT, -ECONNRESET, -EPIPE, -ENOENT, -ECONNREFUSED, -EPROTO, ...
 */
int client_conn_exchange(struct client_conn *c, size_t n_req, enum client_expect expect);

/* Closes the connection (if any); the buffers stay for the next call. */
void client_conn_close(struct client_conn *c);

/* Closes the connection and frees the buffers (NULL-safe; @c itself is the
 * owner's). */
void client_conn_free(struct client_conn *c);

/* A new blocking-connect Unix stream socket to c->addr (a unix: address),
 * connected within c->connect_ms, in *@ret_fd (SOCK_CLOEXEC): to divvyd's
 * root socket beside it (PROTO_ROOT_SUFFIX) when the caller may use it.
 * -errno with c->err set. */
int client_conn_unix(struct client_conn *c, int *ret_fd);

/* Milliseconds from now to @deadline (clock_now_ms()), 0 once past, for poll(). */
int client_conn_remaining(uint64_t deadline);

/*
 * Sends @line (REFILL hints or REPORT lines, newlines included; divvyd never
 * answers them) with one send() that does not wait, connecting first if
 * needed.  Best effort: 0 when all was sent, else nothing or only part of
 * it was (-EAGAIN: the socket buffer is full; a short write closes the
 * connection, since half a line is left in it; -errno: no connection).  A
 * dropped REFILL costs nothing (the lease runs dry and the hit that finds
 * it empty goes to divvyd, which refills).  Leaves c->err empty.
 */
int client_conn_hint(struct client_conn *c, const char *line, size_t len);

/* Makes room for @extra more bytes in c->wbuf.  -ENOMEM. */
int client_conn_reserve(struct client_conn *c, size_t extra);

#endif
