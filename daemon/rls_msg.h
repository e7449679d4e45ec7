/* SPDX-License-Identifier: MIT */
/*
 * rls_msg: the messages of Envoy's rate limit service (RLS v3) as divvyd's
 * RLS listener (rls.h) sees them, with no I/O: gRPC's length-prefixed
 * framing of one unary message, the grpc-timeout header, decoding a
 * RateLimitRequest (protobuf-c, code generated from proto/ at build time)
 * within hard limits, turning one of its descriptors into a divvy request
 * (`domain=D k1=v1 ...`, docs/rls.md "Mapping"), encoding the
 * RateLimitResponse with its RateLimit headers, and reading gRPC health
 * checking's HealthCheckRequest.  Pure functions, thread-safe, never logs: the fuzz
 * target tests/fuzz/fuzz_rls.c drives everything a peer controls here.
 */
#ifndef DIVVY_RLS_MSG_H
#define DIVVY_RLS_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "rules.h"

#define RLS_MSG_MAX         (16 * 1024)     /* bytes of one request message */
#define RLS_DESCRIPTORS_MAX 64              /* descriptors in one request */
#define RLS_DECODE_MEM_MAX  (16 * RLS_MSG_MAX + 64 * 1024)  /* protobuf-c's allocations */
#define RLS_GRPC_PREFIX     5               /* compressed flag + 4-byte big-endian length */

/* gRPC status codes divvyd answers (grpc/doc/statuscodes.md). */
enum rls_grpc_status {
    RLS_GRPC_OK = 0,
    RLS_GRPC_CANCELLED = 1,
    RLS_GRPC_UNKNOWN = 2,
    RLS_GRPC_INVALID_ARGUMENT = 3,
    RLS_GRPC_DEADLINE_EXCEEDED = 4,
    RLS_GRPC_NOT_FOUND = 5,
    RLS_GRPC_RESOURCE_EXHAUSTED = 8,
    RLS_GRPC_INTERNAL = 13,
    RLS_GRPC_UNAVAILABLE = 14,
    RLS_GRPC_UNIMPLEMENTED = 12,
};

/* A decoded RateLimitRequest (opaque: protobuf-c's message and its arena). */
struct rls_msg;

/*
 * Reads the one gRPC message of a unary request body @body (@len bytes: the
 * whole DATA of the stream).  0 with *ret_msg, *ret_len the message bytes;
 * -EINVAL: no complete prefix, a length that disagrees with @len (a second
 * message, or a truncated one); -ENOTSUP: the compressed flag set (divvyd
 * announces no grpc-encoding); -EMSGSIZE: over RLS_MSG_MAX.
 */
int rls_msg_unframe(const uint8_t *body, size_t len, const uint8_t **ret_msg,
                    size_t *ret_len);

/*
 * grpc-timeout's value ("1..8 digits" then one of H M S m u n) in
 * milliseconds, rounded up, capped at one day.  -EINVAL for anything else.
 */
int rls_msg_timeout_ms(const char *v, size_t len, uint64_t *ret_ms);

/*
 * Decodes a RateLimitRequest.  On success *ret is a new message the caller
 * frees with rls_msg_free().  -EINVAL: not a RateLimitRequest (bad wire
 * format, no domain, no descriptor, a descriptor without entries, an empty
 * key or value, or a key or value holding '"', CR, LF or NUL, which divvy's
 * line protocol cannot carry either); -E2BIG: more than RLS_DESCRIPTORS_MAX
 * descriptors; -EMSGSIZE: over RLS_MSG_MAX bytes, or decoding would need
 * more than RLS_DECODE_MEM_MAX bytes; -ENOMEM.
 */
int rls_msg_decode(const uint8_t *data, size_t len, struct rls_msg **ret);

void rls_msg_free(struct rls_msg *m);

/* Descriptors in @m (>= 1). */
size_t rls_msg_descriptors(const struct rls_msg *m);

/*
 * Descriptor @i of @m as the divvy request TAKE n domain=D k1=v1 ...
 * (docs/rls.md): *req filled as proto_parse() would fill it (pairs sorted
 * by key, a repeated key's last value wins, strings in req->buf), amount
 * the descriptor's hits_addend if set, else the request's, 0 meaning 1.
 * -EINVAL: an entry's key is "domain"; -E2BIG: more than PROTO_KV_MAX
 * distinct keys; -EMSGSIZE: longer than a PROTO_LINE_MAX line would be;
 * -ERANGE: hits over PROTO_TAKE_MAX.
 */
int rls_msg_request(const struct rls_msg *m, size_t i, struct proto_req *req);

/*
 * Descriptor @i's limit override (RateLimitDescriptor.limit, Envoy's
 * per-descriptor "limit" from a route's rate_limits action): true with
 * *ret_per_unit and *ret_unit (Envoy's RateLimitUnit, as sent) when the
 * descriptor carries one.  divvyd does not honour it (docs/rls.md "Limit
 * overrides"); rls_stream.c says so in the log.
 */
bool rls_msg_override(const struct rls_msg *m, size_t i, uint32_t *ret_per_unit,
                      unsigned *ret_unit);

/*
 * The service name of the grpc.health.v1 HealthCheckRequest @msg (@len
 * bytes, unframed): 0 with *ret_name, *ret_len (into @msg, not
 * NUL-terminated; "" when absent; the last one when repeated, as protobuf
 * merges), other fields skipped; -EINVAL when @msg is not a protobuf
 * message.  No allocation.
 */
int rls_msg_health_service(const uint8_t *msg, size_t len, const uint8_t **ret_name,
                           size_t *ret_len);

/* Envoy's RateLimitResponse.RateLimit.Unit. */
enum rls_unit {
    RLS_UNIT_UNKNOWN = 0,
    RLS_UNIT_SECOND = 1,
    RLS_UNIT_MINUTE = 2,
    RLS_UNIT_HOUR = 3,
    RLS_UNIT_DAY = 4,
    RLS_UNIT_MONTH = 5,
    RLS_UNIT_YEAR = 6,
};

/* One descriptor's answer. */
struct rls_status {
    bool over;                  /* OVER_LIMIT; else OK */
    bool has_limit;             /* current_limit is sent */
    uint32_t requests_per_unit;
    enum rls_unit unit;
    char name[RULES_LABEL_MAX + 1];
    uint32_t remaining;         /* limit_remaining (credit, capped at UINT32_MAX) */
    uint64_t reset_s;           /* duration_until_reset; 0: not sent */
};

/* One of response_headers_to_add (Envoy's HeaderValue). */
struct rls_header {
    const char *key;
    char value[24];             /* a decimal uint64_t */
};

#define RLS_HEADERS_ADD_MAX 4

/*
 * The RateLimit headers for the answer @st (@n statuses) into @ret (room
 * for RLS_HEADERS_ADD_MAX), as envoyproxy/ratelimit sends them
 * (draft-ietf-httpapi-ratelimit-headers): of the statuses with a
 * current_limit, the one with the fewest remaining gives RateLimit-Limit
 * (its requests_per_unit), RateLimit-Remaining and RateLimit-Reset
 * (seconds until its reset); none has a limit: none of the three.  An
 * answer OVER_LIMIT also gets Retry-After: the longest duration_until_reset
 * of its statuses over the limit, when one is known.  Returns how many.
 */
size_t rls_msg_ratelimit_headers(const struct rls_status *st, size_t n, struct rls_header *ret);

/*
 * The rule's limit as Envoy states one: requests per SECOND, MINUTE, HOUR
 * or DAY when @period_s is exactly one of them (@limit capped at
 * UINT32_MAX); false otherwise (docs/rls.md "current_limit").
 */
bool rls_msg_unit(int64_t limit, int64_t period_s, uint32_t *ret_per_unit,
                  enum rls_unit *ret_unit);

/*
 * Encodes a RateLimitResponse for @n statuses (overall_code OVER_LIMIT when
 * any is over, else OK) and @n_hdr response_headers_to_add @hdr as one gRPC
 * message, prefix included, into a new buffer *ret (malloc()ed, *ret_len
 * bytes).  -ENOMEM.
 */
int rls_msg_encode(const struct rls_status *st, size_t n, const struct rls_header *hdr,
                   size_t n_hdr, uint8_t **ret, size_t *ret_len);

#endif
