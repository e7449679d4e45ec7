/* SPDX-License-Identifier: MIT */
/*
 * rls_int: what the two halves of the RLS listener share (rls.h): rls.c
 * keeps a connection (socket, nghttp2 session, writing, timeouts, and the
 * memory it holds against its bound and the shared budget), rls_stream.c
 * its streams (nghttp2's callbacks, each call turned into hits and
 * answered), rls_health.c the calls of grpc.health.v1.Health.  Nothing
 * outside these files includes this header.
 *
 * Memory a connection holds (docs/rls.md "Limits"): what nghttp2 allocates
 * for it beyond a fresh session (its allocator is the connection's, so
 * HPACK state, header fields being decoded, stream objects and queued
 * frames are all counted), the request bodies, its stream objects with
 * their descriptors and answers, and output the socket did not take.
 * That sum is the connection's charge in admission's budget (admit.h).
 */
#ifndef DIVVY_RLS_INT_H
#define DIVVY_RLS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <nghttp2/nghttp2.h>

#include "admit.h"
#include "rls_msg.h"

struct worker;
struct rls_conn;
struct rls_stream;
struct tls_sess;

/* Which service a stream's :path names. */
enum rls_route {
    RLS_ROUTE_NONE = 0,         /* none divvyd serves: UNIMPLEMENTED */
    RLS_ROUTE_RLS,              /* RateLimitService/ShouldRateLimit */
    RLS_ROUTE_HEALTH_CHECK,     /* grpc.health.v1.Health/Check (rls_health.c) */
    RLS_ROUTE_HEALTH_OTHER,     /* another grpc.health.v1.Health method */
};

/* One descriptor of a stream: where its hit's answer lands. */
struct rls_desc {
    struct rls_stream *s;
    struct rls_status st;
};

struct rls_stream {
    struct rls_conn *rc;        /* NULL: orphaned (closed, or its connection gone) */
    struct rls_stream *prev, *next;     /* the connection's streams, oldest first */
    int32_t id;
    bool receiving;             /* no END_STREAM yet */
    bool answered;              /* a response (or an error) is submitted */
    bool post, grpc_ct;
    enum rls_route route;       /* its :path */
    size_t header_bytes;
    size_t mem;                 /* this object, its descriptors and answer (rc->stream_bytes) */
    uint64_t start_ms;
    uint64_t out_ms;            /* answered: its answer last moved (nghttp2 took bytes) */
    uint64_t timeout_ms;        /* grpc-timeout; 0: none */
    struct event *deadline_ev;
    uint8_t *body;
    size_t body_len, body_cap;
    size_t n_desc, n_left;      /* descriptors; those not answered yet (+1 while submitting) */
    int err;                    /* a grpc-status to answer instead; 0: none */
    const char *err_msg;
    struct rls_desc *desc;
    uint8_t *resp;              /* the framed response message */
    size_t resp_len, resp_off;
};

struct rls_conn {
    struct worker *w;
    struct rls_conn *prev, *next;
    int fd;
    bool is_unix;
    bool privileged;
    bool dead;
    bool reading;               /* rev is armed */
    bool paused;                /* over its bound: not read until under again */
    bool receiving;             /* inside nghttp2_session_mem_recv(): input allocations */
    bool submitting;            /* ... but one of our answers: not input */
    bool over;                  /* nghttp2 was refused memory: close (input_limit) */
    uid_t uid;
    struct admit_slot slot;
    struct event *rev, *wev, *flush_ev;
    nghttp2_session *ses;
    nghttp2_mem mem;            /* nghttp2's allocator: counts into ng_bytes */
    struct rls_stream *head, *tail;
    unsigned n_streams;
    uint64_t last_ms;           /* last byte read */
    uint64_t stall_ms;          /* unsent output last made progress; 0: none unsent */
    size_t ng_bytes;            /* nghttp2's allocations for this connection */
    size_t ng_base;             /* ... once its session was set up */
    size_t recv_limit;          /* what this read may make it hold (rls_mem_*) */
    size_t body_bytes;          /* request bodies its streams hold (RLS_CONN_BODY_MAX) */
    size_t stream_bytes;        /* its streams' objects (struct rls_stream.mem) */
    uint8_t *out;               /* what send() did not take */
    size_t out_len, out_off;
    struct tls_sess *tls;       /* a "rls:tls:" listener's (tls.h, rls.c); NULL: plain */
    bool read_wants_write;      /* a TLS read waits for the socket to take bytes */
    uint64_t accept_ms;         /* a TLS handshake counts as a request from here */
    uint32_t pid;               /* Unix: the peer's pid at connect (engine_req.pid); 0 */
};

/* ---- rls.c ----------------------------------------------------------------------------- */

/* What @rc holds beyond a fresh connection (the header comment); its charge. */
size_t rls_held(const struct rls_conn *rc);

/* May @rc's input make it hold @more bytes more?  False over RLS_CONN_MEM_MAX,
 * or over its share of a spent budget (admit_allowance()). */
bool rls_input_ok(struct rls_conn *rc, size_t more);

/* Updates @rc's charge in the budget (after its holdings changed). */
void rls_charge(struct rls_conn *rc);

/* Asks for @rc's output to be written at the end of this turn. */
void rls_wake(struct rls_conn *rc);

/* End of every callback that touched @rc: write, read again or not, free
 * when done.  @rc may be gone afterwards. */
void rls_settle(struct rls_conn *rc);

/* ---- rls_stream.c ---------------------------------------------------------------------- */

/* Sets the stream callbacks of a server session on @cbs. */
void rls_stream_callbacks(nghttp2_session_callbacks *cbs);

/* Off its connection: freed now, or by its last descriptor's answer. */
void rls_stream_orphan(struct rls_stream *s);

/* Answers @s with grpc-status @code and grpc-message @msg (trailers only). */
void rls_stream_fail(struct rls_stream *s, int code, const char *msg);

/* Answers @s with the framed message @resp (@len bytes, malloc()ed: @s owns
 * it now) and grpc-status 0. */
void rls_stream_reply(struct rls_stream *s, uint8_t *resp, size_t len);

/* ---- rls_health.c ---------------------------------------------------------------------- */

/* The route of a :path under /grpc.health.v1.Health/ (RLS_ROUTE_NONE: not there). */
enum rls_route rls_health_route(const uint8_t *path, size_t len);

/* Answers the health call @s (route RLS_ROUTE_HEALTH_*) whose request
 * message is @msg (@len bytes, unframed). */
void rls_health_call(struct rls_stream *s, const uint8_t *msg, size_t len);

#endif
