/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for daemon/rls_msg.c: everything an RLS peer's bytes
 * reach without I/O (docs/rls.md).  The input goes through the gRPC framing
 * (rls_msg_unframe()), the RateLimitRequest decoder (rls_msg_decode(), on
 * the whole input and on the framed message) and, for each descriptor of an
 * accepted request, the mapping to a divvy request (rls_msg_request()),
 * whose result must be what proto_parse() makes of the same request written
 * as a line: the RLS listener accepts nothing the line protocol could not
 * say.  grpc-timeout values, the response encoder (statuses built from
 * the input, with their RateLimit headers, decoded back with protobuf-c)
 * and the HealthCheckRequest reader (which must find the service name
 * protobuf-c finds) are driven too.
 *   make build-fuzz/fuzz_rls (clang; the generated protobuf-c code is built in)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "fuzz.h"
#include "proto.h"
#include "rls_msg.h"

static struct proto_req req, line_req;

/* @r as the line TAKE n k="v" ..., parsed back: the same pairs, the same n. */
static void check_as_line(const struct proto_req *r)
{
    static char line[PROTO_LINE_MAX * 2];
    size_t pos;
    ssize_t n;

    pos = (size_t)snprintf(line, sizeof(line), "TAKE %llu", (unsigned long long)r->amount);
    for (unsigned i = 0; i < r->n_kv; i++) {
        CHECK(r->kv[i].key[r->kv[i].key_len] == '\0');
        CHECK(r->kv[i].value[r->kv[i].value_len] == '\0');
        CHECK(!memchr(r->kv[i].key, '"', r->kv[i].key_len));
        CHECK(!memchr(r->kv[i].value, '\n', r->kv[i].value_len));
        if (i > 0) {
            size_t m = r->kv[i - 1].key_len < r->kv[i].key_len ? r->kv[i - 1].key_len
                                                                : r->kv[i].key_len;
            int c = memcmp(r->kv[i - 1].key, r->kv[i].key, m);

            CHECK(c < 0 || (c == 0 && r->kv[i - 1].key_len < r->kv[i].key_len));
        }
        pos += (size_t)snprintf(line + pos, sizeof(line) - pos, " \"%s\"=\"%s\"", r->kv[i].key,
                                r->kv[i].value);
        CHECK(pos < sizeof(line) - 1);
    }
    line[pos++] = '\n';
    CHECK(pos <= PROTO_LINE_MAX);
    n = proto_parse(line, pos, &line_req);
    CHECK(n == (ssize_t)pos);
    CHECK(line_req.err == PROTO_E_NONE);
    CHECK(line_req.verb == PROTO_TAKE && line_req.amount == r->amount);
    CHECK(line_req.n_kv == r->n_kv);
    for (unsigned i = 0; i < r->n_kv; i++) {
        CHECK(line_req.kv[i].key_len == r->kv[i].key_len);
        CHECK(line_req.kv[i].value_len == r->kv[i].value_len);
        CHECK(memcmp(line_req.kv[i].key, r->kv[i].key, r->kv[i].key_len) == 0);
        CHECK(memcmp(line_req.kv[i].value, r->kv[i].value, r->kv[i].value_len) == 0);
    }
}

static void decode(const uint8_t *data, size_t size)
{
    struct rls_msg *m = NULL;
    int r = rls_msg_decode(data, size, &m);

    CHECK(r == 0 || r == -EINVAL || r == -E2BIG || r == -EMSGSIZE || r == -ENOMEM);
    if (r < 0)
        return;
    CHECK(rls_msg_descriptors(m) >= 1 && rls_msg_descriptors(m) <= RLS_DESCRIPTORS_MAX);
    for (size_t i = 0; i < rls_msg_descriptors(m); i++) {
        r = rls_msg_request(m, i, &req);
        CHECK(r == 0 || r == -EINVAL || r == -E2BIG || r == -EMSGSIZE || r == -ERANGE);
        if (r < 0)
            continue;
        CHECK(req.amount >= 1 && req.amount <= PROTO_TAKE_MAX);
        CHECK(proto_find(&req, "domain", 6) != NULL);
        check_as_line(&req);
    }
    rls_msg_free(m);
}

/* Statuses from the input, encoded, decoded back with protobuf-c. */
static void encode(struct fz *z)
{
    struct rls_status st[8];
    size_t n = fz_u8(z) % 9, len;
    Envoy__Service__Ratelimit__V3__RateLimitResponse *resp;
    struct rls_header hdr[RLS_HEADERS_ADD_MAX];
    uint8_t *buf;
    bool over = false;
    size_t n_hdr;

    memset(st, 0, sizeof(st));
    for (size_t i = 0; i < n; i++) {
        st[i].over = (fz_u8(z) & 1);
        over |= st[i].over;
        int64_t limit = (uint32_t)fz_u64(z), period = fz_u8(z) % 2 ? 60 : (uint32_t)fz_u64(z);

        st[i].has_limit = rls_msg_unit(limit, period, &st[i].requests_per_unit, &st[i].unit);
        snprintf(st[i].name, sizeof(st[i].name), "rule%u", fz_u8(z));
        st[i].remaining = (uint32_t)fz_u64(z);
        st[i].reset_s = (uint32_t)fz_u64(z);
    }
    n_hdr = fz_u8(z) & 1 ? rls_msg_ratelimit_headers(st, n, hdr) : 0;
    CHECK(n_hdr <= RLS_HEADERS_ADD_MAX);
    if (rls_msg_encode(st, n, hdr, n_hdr, &buf, &len) < 0)
        return;
    CHECK(len >= RLS_GRPC_PREFIX && buf[0] == 0);
    resp = envoy__service__ratelimit__v3__rate_limit_response__unpack(
        NULL, len - RLS_GRPC_PREFIX, buf + RLS_GRPC_PREFIX);
    CHECK(resp != NULL);
    CHECK(resp->n_statuses == n);
    CHECK(resp->n_response_headers_to_add == n_hdr);
    CHECK(resp->overall_code == (over ? 2 : 1));
    for (size_t i = 0; i < n; i++) {
        CHECK(resp->statuses[i]->limit_remaining == st[i].remaining);
        CHECK((resp->statuses[i]->current_limit != NULL) == st[i].has_limit);
        CHECK((resp->statuses[i]->duration_until_reset != NULL) == (st[i].reset_s > 0));
    }
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(resp, NULL);
    free(buf);
}

/* rls_msg_health_service() reads what protobuf-c reads, or refuses what it refuses. */
static void health(const uint8_t *data, size_t size)
{
    Grpc__Health__V1__HealthCheckRequest *pb;
    const uint8_t *name;
    size_t len;
    int r = rls_msg_health_service(data, size, &name, &len);

    CHECK(r == 0 || r == -EINVAL);
    pb = grpc__health__v1__health_check_request__unpack(NULL, size, data);
    if (r == 0 && pb && !memchr(name, '\0', len))
        CHECK(strlen(pb->service) == len && memcmp(pb->service, name, len) == 0);
    if (r == 0 && len > 0)
        CHECK(name >= data && name + len <= data + size);
    if (pb)
        grpc__health__v1__health_check_request__free_unpacked(pb, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz z = { data, size };
    const uint8_t *msg;
    uint64_t ms;
    size_t len;
    int r;

    decode(data, size);
    health(data, size);
    r = rls_msg_unframe(data, size, &msg, &len);
    CHECK(r == 0 || r == -EINVAL || r == -ENOTSUP || r == -EMSGSIZE);
    if (r == 0) {
        CHECK(len == size - RLS_GRPC_PREFIX && len <= RLS_MSG_MAX);
        decode(msg, len);
    }
    if (rls_msg_timeout_ms((const char *)data, size < 12 ? size : 12, &ms) == 0)
        CHECK(ms <= 86400000);
    encode(&z);
    return 0;
}
