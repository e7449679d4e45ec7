/* SPDX-License-Identifier: MIT */
/*
 * rls: connections of the Envoy rate limit service listener (docs/rls.md),
 * an "rls:" address in server.listen.  Each connection is HTTP/2 cleartext
 * with prior knowledge (h2c), served by an nghttp2 server session; each
 * stream is one unary gRPC call of
 * envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, whose
 * descriptors become engine requests (rls_msg.h, engine.h) answered with
 * one RateLimitResponse and grpc-status trailers.
 *
 * Ownership: a connection belongs to its worker's thread and is on the
 * worker's rls list from accept to rls_conn_free().  A stream whose
 * descriptors still wait for Redis when its connection goes is orphaned
 * (it forgets the connection) and freed by the last descriptor's answer, so
 * a connection never waits for Redis to be freed.  Admission (admit.h) is
 * the other listeners': the same budgets, per-peer caps and timeouts; what
 * a connection holds (its input included) is its charge in the shared
 * budget, bounded by RLS_CONN_MEM_MAX and, once the budget is spent, by
 * its share of it (rls.c).
 */
#ifndef DIVVY_RLS_H
#define DIVVY_RLS_H

#include <stdint.h>

struct admit_peer;
struct admit_slot;
struct conn_proto;
struct listener;
struct worker;

#define RLS_STREAMS_MAX     100             /* SETTINGS_MAX_CONCURRENT_STREAMS */
#define RLS_HEADERS_MAX     8192            /* bytes of one stream's header fields */
#define RLS_CONN_BODY_MAX   (256 * 1024)    /* request bytes one connection's streams hold */
#define RLS_CONN_MEM_MAX    (512 * 1024)    /* all one connection may hold (rls_int.h) */

/* What an "rls:" listener carries (conn.h): a protocol with a transport of
 * its own, adopt = rls_conn_new(). */
extern const struct conn_proto rls_proto;

/* A connection accepted on an RLS listener @l: takes ownership of @fd and
 * of the place @slot holds (both released on failure). */
void rls_conn_new(struct worker *w, int fd, const struct listener *l,
                  const struct admit_peer *p, struct admit_slot *slot);

/* The worker's admission sweep: closes RLS connections whose timeout
 * expired (admit_expired()). */
void rls_sweep(struct worker *w, uint64_t now_ms);

/* The worker stops: a graceful GOAWAY to every connection, which finishes
 * the calls it has begun (within the worker's grace) and is closed. */
void rls_stop(struct worker *w);

/* Frees every RLS connection of @w (its streams still waiting orphaned);
 * when the worker's loop has ended. */
void rls_free_all(struct worker *w);

#endif
