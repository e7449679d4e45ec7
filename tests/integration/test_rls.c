/* SPDX-License-Identifier: MIT */
/*
 * Integration: the Envoy RLS v3 listener (docs/rls.md).  A real gRPC client
 * (@grpc/grpc-js with @grpc/proto-loader, tests/rls/rls_client.js, loading
 * divvy's proto/ files) calls ShouldRateLimit over rls:tcp: and rls:unix:
 * listeners; the client is installed by tests/rls/npm_ensure.sh into a cache
 * outside the repository, and those tests SKIP (saying so) only when npm or
 * its registry is unreachable.  Covered:
 *   - an under-limit request with two descriptors and an over-limit one give
 *     exactly Envoy's response (overall_code, one status per descriptor with
 *     current_limit, limit_remaining, duration_until_reset);
 *   - hits_addend (request and descriptor, 0 meaning 1), canary rules as
 *     Envoy's shadow mode, source = privileged only from a privileged Unix peer;
 *   - rules kept in Redis (store strict): descriptors wait for Redis, exact
 *     under concurrency; Redis down answers as store.on_redis_error says; a
 *     grpc-timeout shorter than Redis's answer is DEADLINE_EXCEEDED, and the
 *     descriptors still waiting are answered later without their stream;
 *   - concurrency exactness: hundreds of concurrent streams from several
 *     clients on one limit, exactly the limit allowed;
 *   - malformed calls through a raw HTTP/2 client (nghttp2, in-process): wrong
 *     path, content type, compression, framing, protobuf, sizes, each with
 *     its grpc-status;
 *   - garbage on the socket (HTTP/1, random bytes, random frames), and an
 *     unprivileged client that sends thousands of streams and never reads:
 *     divvyd neither crashes nor grows, and keeps answering others.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>
#include <nghttp2/nghttp2.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "harness.h"
#include "harness_grpc.h"
#include "harness_h2.h"
#include "harness_redis.h"

#define RLS_PATH    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define FLOOD_UID   64013
#define FLOOD_GID   64013


#define RULES_EDGE                                                                            \
    "rules = (\n"                                                                             \
    "  { match = { domain = \"edge\"; user = \"*\"; }; label = \"per_user\"; actor = \"user\";\n" \
    "    credit_limit = 3; reset_seconds = 60; },\n"                                          \
    "  { match = { domain = \"edge\"; path = \"*\"; }; label = \"per_path\"; actor = \"path\";\n" \
    "    credit_limit = 100; reset_seconds = 3600; },\n"                                      \
    "  { match = { domain = \"edge\"; key = \"odd\"; }; label = \"odd\"; credit_limit = 5;\n" \
    "    reset_seconds = 90; },\n"                                                            \
    "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"                           \
    ");\n"

#define CALL_2 \
    "{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"bob\"}]}," \
    "{\"entries\":[{\"key\":\"path\",\"value\":\"/x\"}]}]}"

/* ---- Envoy's answers ---------------------------------------------------------------- */

static void test_rls_under_and_over_limit(void **state)
{
    struct harness_rls *r;
    json_t *res, *resp;

    (void)state;
    harness_grpc_need();
    r = harness_rls_start(RULES_EDGE);
    /* Three calls under the limit, then one over; the first over TCP, the rest on Unix.
     * Each call starts a node client (seconds on a loaded machine): a reset
     * counts down from the first, so later ones allow for that. */
    res = harness_grpc_run(r->tcp, "{\"calls\":[" CALL_2 "]}");
    resp = harness_grpc_resp(res, 0);
    harness_grpc_overall(resp, "OK", 2);
    harness_grpc_status(resp, 0, "OK", "per_user", 3, "MINUTE", 2, 59, 60);
    harness_grpc_status(resp, 1, "OK", "per_path", 100, "HOUR", 99, 3599, 3600);
    json_decref(res);
    res = harness_grpc_run(r->unix_sock, "{\"calls\":[" CALL_2 "," CALL_2 "]}");
    harness_grpc_status(harness_grpc_resp(res, 1), 0, "OK", "per_user", 3, "MINUTE", 0, 45, 60);
    json_decref(res);
    res = harness_grpc_run(r->unix_sock, "{\"calls\":[" CALL_2 "]}");
    resp = harness_grpc_resp(res, 0);
    harness_grpc_overall(resp, "OVER_LIMIT", 2);
    harness_grpc_status(resp, 0, "OVER_LIMIT", "per_user", 3, "MINUTE", 0, 40, 60);
    /* Every descriptor is counted, as Envoy's reference service does. */
    harness_grpc_status(resp, 1, "OK", "per_path", 100, "HOUR", 96, 3580, 3600);
    json_decref(res);
    /* A 90 s period is no whole unit: no current_limit; a descriptor no rule
     * but the default one names is OK with no limit (rls.unmatched = "ok",
     * test_rls_envoy.c has "rule"). */
    res = harness_grpc_run(r->tcp, "{\"calls\":[{\"domain\":\"edge\",\"descriptors\":["
                           "{\"entries\":[{\"key\":\"key\",\"value\":\"odd\"}]},"
                           "{\"entries\":[{\"key\":\"nothing\",\"value\":\"x\"}]}]}]}");
    resp = harness_grpc_resp(res, 0);
    harness_grpc_overall(resp, "OK", 2);
    harness_grpc_status(resp, 0, "OK", NULL, 0, NULL, 4, 89, 90);
    harness_grpc_status(resp, 1, "OK", NULL, 0, NULL, 0, 0, 0);
    json_decref(res);
    harness_rls_stop(r);
}

static void test_rls_hits_addend(void **state)
{
    struct harness_rls *r;
    json_t *res, *resp;

    (void)state;
    harness_grpc_need();
    r = harness_rls_start(RULES_EDGE);
    res = harness_grpc_run(r->tcp,
        "{\"calls\":[{\"domain\":\"edge\",\"hits_addend\":2,\"descriptors\":["
        "{\"entries\":[{\"key\":\"user\",\"value\":\"al\"}]},"
        "{\"entries\":[{\"key\":\"path\",\"value\":\"/a\"}],\"hits_addend\":{\"value\":\"10\"}},"
        "{\"entries\":[{\"key\":\"path\",\"value\":\"/b\"}],"
        "\"hits_addend\":{\"value\":\"0\"}}]}]}");
    /* Request 2; descriptor 10 instead; a descriptor's 0 means 1. */
    resp = harness_grpc_resp(res, 0);
    harness_grpc_status(resp, 0, "OK", "per_user", 3, "MINUTE", 1, 59, 60);
    harness_grpc_status(resp, 1, "OK", "per_path", 100, "HOUR", 90, 3599, 3600);
    harness_grpc_status(resp, 2, "OK", "per_path", 100, "HOUR", 99, 3599, 3600);
    json_decref(res);
    /* 2 more than the 1 left: denied, nothing taken. */
    res = harness_grpc_run(r->tcp, "{\"calls\":[{\"domain\":\"edge\",\"hits_addend\":2,"
                           "\"descriptors\":[{\"entries\":[{\"key\":\"user\","
                           "\"value\":\"al\"}]}]}]}");
    resp = harness_grpc_resp(res, 0);
    harness_grpc_overall(resp, "OVER_LIMIT", 1);
    harness_grpc_status(resp, 0, "OVER_LIMIT", "per_user", 3, "MINUTE", 1, 45, 60);
    json_decref(res);
    harness_rls_stop(r);
}

static void test_rls_invalid_requests(void **state)
{
    struct harness_rls *r;
    json_t *res;
    static const char *const bad[] = {
        "{\"domain\":\"edge\",\"descriptors\":[]}",
        "{\"domain\":\"\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"a\"}]}]}",
        "{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[]}]}",
        "{\"domain\":\"edge\",\"descriptors\":[{\"entries\":"
        "[{\"key\":\"domain\",\"value\":\"a\"}]}]}",
        "{\"domain\":\"edge\",\"descriptors\":[{\"entries\":"
        "[{\"key\":\"user\",\"value\":\"a\\\"\"}]}]}",
        "{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"\"}]}]}",
    };
    char job[4096];
    size_t pos = 0;

    (void)state;
    harness_grpc_need();
    r = harness_rls_start(RULES_EDGE);
    pos += (size_t)snprintf(job + pos, sizeof(job) - pos, "{\"calls\":[");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        pos += (size_t)snprintf(job + pos, sizeof(job) - pos, "%s%s", i ? "," : "", bad[i]);
    snprintf(job + pos, sizeof(job) - pos, "]}");
    res = harness_grpc_run(r->tcp, job);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *c = json_array_get(res, i);

        if (json_is_true(json_object_get(c, "ok")) ||
            json_integer_value(json_object_get(c, "code")) != 3)
            fail_msg("%s: %s, want INVALID_ARGUMENT (3)", bad[i], json_dumps(c, 0));
    }
    json_decref(res);
    harness_rls_stop(r);
}

/* Canary rules are Envoy's shadow mode; source = privileged only from a privileged Unix peer. */
static void test_rls_canary_and_privileged(void **state)
{
    static const char conf[] =
        "rules = (\n"
        "  { match = { domain = \"edge\"; user = \"*\"; }; label = \"shadow\"; credit_limit = 0;\n"
        "    reset_seconds = 60; match_policy = \"canary\"; },\n"
        "  { match = { domain = \"edge\"; user = \"*\"; }; label = \"root_only\";\n"
        "    source = \"privileged\"; credit_limit = 1; reset_seconds = 60; },\n"
        "  { match = { domain = \"edge\"; user = \"*\"; }; label = \"anyone\"; actor = \"user\";\n"
        "    credit_limit = 10; reset_seconds = 60; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    static const char call[] = "{\"calls\":[{\"domain\":\"edge\",\"descriptors\":["
                               "{\"entries\":[{\"key\":\"user\",\"value\":\"u\"}]}]}]}";
    struct harness_rls *r;
    json_t *res;

    (void)state;
    harness_grpc_need();
    if (geteuid() != 0)
        skip();
    r = harness_rls_start(conf);
    /* TCP: never privileged; the canary's denial is ignored. */
    res = harness_grpc_run(r->tcp, call);
    harness_grpc_overall(harness_grpc_resp(res, 0), "OK", 1);
    harness_grpc_status(harness_grpc_resp(res, 0), 0, "OK", "anyone", 10, "MINUTE", 9, 59, 60);
    json_decref(res);
    /* root on the Unix socket: the privileged rule decides. */
    res = harness_grpc_run(r->unix_sock, call);
    harness_grpc_status(harness_grpc_resp(res, 0), 0, "OK", "root_only", 1, "MINUTE", 0, 59, 60);
    json_decref(res);
    harness_rls_stop(r);
}

/* Hundreds of concurrent streams (one connection per client, 4 clients): exactly the limit. */
static void test_rls_concurrent_exact(void **state)
{
    static const char conf[] =
        "rules = (\n"
        "  { match = { domain = \"edge\"; user = \"*\"; }; label = \"per_user\";\n"
        "    actor = \"user\"; credit_limit = 250; reset_seconds = 3600; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    static const char job[] = "{\"repeat\":200,\"calls\":[{\"domain\":\"edge\",\"descriptors\":["
                              "{\"entries\":[{\"key\":\"user\",\"value\":\"c\"}]}]}]}";
    char script[512], proto[512], in[HARNESS_PATH + 16], out[4][HARNESS_PATH + 16];
    const char *argv[4][5];
    struct harness_rls *r;
    pid_t pid[4];
    long ok = 0, over = 0;
    FILE *f;

    (void)state;
    harness_grpc_need();
    r = harness_rls_start(conf);
    CHECK(harness_src_path("tests/rls/rls_client.js", script, sizeof(script)));
    CHECK(harness_src_path("proto", proto, sizeof(proto)));
    snprintf(in, sizeof(in), "%s/conc.json", harness_grpc_tmp);
    f = fopen(in, "w");
    assert_non_null(f);
    fputs(job, f);
    fclose(f);
    for (int i = 0; i < 4; i++) {
        snprintf(out[i], sizeof(out[i]), "%s/conc%d.out", harness_grpc_tmp, i);
        argv[i][0] = "node";
        argv[i][1] = script;
        argv[i][2] = proto;
        argv[i][3] = i % 2 ? r->unix_sock : r->tcp;
        argv[i][4] = NULL;
        harness_grpc_spawn(in, out[i], argv[i], &pid[i]);
    }
    for (int i = 0; i < 4; i++) {
        json_error_t jerr;
        json_t *res;
        int status;

        CHECK(harness_reap(pid[i], 120000, &status));
        assert_int_equal(status, 0);
        res = json_load_file(out[i], 0, &jerr);
        assert_non_null(res);
        assert_int_equal(json_array_size(res), 200);
        for (size_t j = 0; j < 200; j++) {
            const char *code = harness_grpc_str(harness_grpc_resp(res, j), "overall_code");

            ok += strcmp(code, "OK") == 0;
            over += strcmp(code, "OVER_LIMIT") == 0;
        }
        json_decref(res);
    }
    if (ok != 250 || over != 550)
        fail_msg("800 concurrent calls on a limit of 250: %ld OK, %ld OVER_LIMIT", ok, over);
    harness_rls_stop(r);
}

/* Rules in Redis: the waiting path of hit_submit(). */
static void test_rls_redis(void **state)
{
    static const char rules[] =
        "{ match = { domain = \"edge\"; user = \"*\"; }; label = \"per_user\"; actor = \"user\";\n"
        "  credit_limit = 60; reset_seconds = 60; },\n"
        "{ match = { domain = \"edge\"; path = \"*\"; }; label = \"per_path\"; actor = \"path\";\n"
        "  credit_limit = 1000; reset_seconds = 3600; },\n"
        "{ default = true; credit_limit = 0; reset_seconds = 0; }";
    static const char job[] =
        "{\"repeat\":100,\"calls\":[{\"domain\":\"edge\",\"descriptors\":["
        "{\"entries\":[{\"key\":\"user\",\"value\":\"r\"}]},"
        "{\"entries\":[{\"key\":\"path\",\"value\":\"/r\"}]}]}]}";
    struct redis_srv *rs;
    struct harness_rls *r;
    json_t *res, *resp;
    long ok = 0;
    char *conf;

    (void)state;
    harness_grpc_need();
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "strict", "closed", 2000, NULL, rules);
    assert_non_null(conf);
    r = harness_rls_start(conf);
    free(conf);
    /* 100 concurrent calls on one connection, 60 allowed: every descriptor waits for Redis. */
    res = harness_grpc_run(r->tcp, job);
    for (size_t i = 0; i < 100; i++) {
        resp = harness_grpc_resp(res, i);
        ok += strcmp(harness_grpc_str(resp, "overall_code"), "OK") == 0;
    }
    if (ok != 60)
        fail_msg("100 concurrent calls on a limit of 60 kept in Redis: %ld OK", ok);
    json_decref(res);
    res = harness_grpc_run(r->unix_sock, "{\"calls\":[" CALL_2 "]}");
    resp = harness_grpc_resp(res, 0);
    harness_grpc_overall(resp, "OK", 2);
    harness_grpc_status(resp, 0, "OK", "per_user", 60, "MINUTE", 59, 59, 60);
    harness_grpc_status(resp, 1, "OK", "per_path", 1000, "HOUR", 999, 3599, 3600);
    json_decref(res);
    /* Redis stopped: a deadline of 300 ms passes first; the descriptors
     * still waiting are answered (on_redis_error) after their stream is gone. */
    redis_pause(rs, true);
    res = harness_grpc_run(r->tcp, "{\"deadline_ms\":300,\"calls\":[" CALL_2 "]}");
    if (json_integer_value(json_object_get(json_array_get(res, 0), "code")) != 4)
        fail_msg("Redis paused, deadline 300 ms: %s, want DEADLINE_EXCEEDED (4)",
                 json_dumps(res, 0));
    json_decref(res);
    /* Redis gone: store.on_redis_error = closed denies. */
    redis_pause(rs, false);
    redis_kill(rs);
    res = harness_grpc_run(r->tcp, "{\"calls\":[" CALL_2 "]}");
    resp = harness_grpc_resp(res, 0);
    harness_grpc_overall(resp, "OVER_LIMIT", 2);
    json_decref(res);
    assert_true(harness_alive(r->d));
    harness_rls_stop(r);
}

/* ---- what grpc-js never sends (harness_h2.h) ------------------------------------ */

/* A framed RateLimitRequest of @n_desc descriptors with @n_entries entries each. */
static uint8_t *request_bytes(size_t n_desc, size_t n_entries, size_t *ret_len)
{
    Envoy__Service__Ratelimit__V3__RateLimitRequest req =
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *d, **dp;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry *e, **ep;
    size_t len;
    uint8_t *buf;

    d = harness_scratch(n_desc * sizeof(*d));
    dp = harness_scratch(n_desc * sizeof(*dp));
    e = harness_scratch(n_entries * sizeof(*e));
    ep = harness_scratch(n_entries * sizeof(*ep));
    assert_true(d && dp && e && ep);
    for (size_t j = 0; j < n_entries; j++) {
        envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__entry__init(&e[j]);
        e[j].key = (char *)"user";
        e[j].value = (char *)"raw";
        ep[j] = &e[j];
    }
    for (size_t i = 0; i < n_desc; i++) {
        envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__init(&d[i]);
        d[i].n_entries = n_entries;
        d[i].entries = ep;
        dp[i] = &d[i];
    }
    req.domain = (char *)"edge";
    req.n_descriptors = n_desc;
    req.descriptors = dp;
    len = envoy__service__ratelimit__v3__rate_limit_request__get_packed_size(&req);
    buf = harness_scratch(len + 5);
    assert_non_null(buf);
    buf[0] = 0;
    buf[1] = (uint8_t)(len >> 24);
    buf[2] = (uint8_t)(len >> 16);
    buf[3] = (uint8_t)(len >> 8);
    buf[4] = (uint8_t)len;
    envoy__service__ratelimit__v3__rate_limit_request__pack(&req, buf + 5);
    *ret_len = len + 5;
    return buf;
}

static void test_rls_malformed_calls(void **state)
{
    struct harness_rls *r;
    uint8_t *ok, garbage[64], *big;
    size_t ok_len, big_len = 70000, len;

    (void)state;
    r = harness_rls_start(RULES_EDGE);
    ok = request_bytes(1, 1, &ok_len);
    assert_int_equal(harness_h2_call(r->port, RLS_PATH, "application/grpc", ok, ok_len), 0);
    assert_int_equal(harness_h2_call(r->port, "/other.Service/Call", "application/grpc", ok,
                                     ok_len), 12);
    assert_int_equal(harness_h2_call(r->port, RLS_PATH, "text/plain", ok, ok_len), 3);
    assert_int_equal(harness_h2_call(r->port, RLS_PATH, "application/grpc+proto", ok, ok_len), 0);
    ok[0] = 1;      /* compressed, but no grpc-encoding was agreed */
    assert_int_equal(harness_h2_call(r->port, RLS_PATH, "application/grpc", ok, ok_len), 12);
    ok[0] = 0;
    assert_int_equal(harness_h2_call(r->port, RLS_PATH, "application/grpc", ok, ok_len - 1), 3);
    assert_int_equal(harness_h2_call(r->port, RLS_PATH, "application/grpc", ok, 3), 3);
    assert_int_equal(harness_h2_call(r->port, RLS_PATH, "application/grpc", NULL, 0), 3);
    memset(garbage, 0xff, sizeof(garbage));
    garbage[0] = 0;
    garbage[1] = garbage[2] = garbage[3] = 0;
    garbage[4] = sizeof(garbage) - 5;
    assert_int_equal(harness_h2_call(r->port, RLS_PATH, "application/grpc", garbage,
                                     sizeof(garbage)), 3);
    /* Over one message, and over the descriptor count. */
    big = harness_scratch(big_len);
    assert_non_null(big);
    big[1] = 0;
    big[2] = (uint8_t)((big_len - 5) >> 16);
    big[3] = (uint8_t)((big_len - 5) >> 8);
    big[4] = (uint8_t)(big_len - 5);
    assert_int_equal(harness_h2_call(r->port, RLS_PATH, "application/grpc", big, big_len), 8);
    ok = request_bytes(65, 1, &len);
    assert_int_equal(harness_h2_call(r->port, RLS_PATH, "application/grpc", ok, len), 8);
    ok = request_bytes(1, 40, &len);        /* one key 40 times: fine, the last wins */
    assert_int_equal(harness_h2_call(r->port, RLS_PATH, "application/grpc", ok, len), 0);
    assert_true(harness_alive(r->d));
    harness_rls_stop(r);
}

/* ---- garbage and a client that never reads ------------------------------------------ */

static void expect_closed(int port, const void *bytes, size_t len)
{
    struct harness_conn *c;

    CHECK(harness_connect_tcp(port, &c));
    harness_raw_send(c->fd, bytes, len);
    CHECK(harness_wait_eof(c, HARNESS_TIMEOUT_MS));
    harness_close(c);
}

static void test_rls_garbage(void **state)
{
    static const char http1[] = "GET / HTTP/1.1\r\nHost: divvy\r\n\r\n";
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    struct harness_rls *r;
    uint8_t junk[4096];
    size_t len;
    uint8_t *ok;

    (void)state;
    r = harness_rls_start(RULES_EDGE);
    expect_closed(r->port, http1, sizeof(http1) - 1);
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < sizeof(junk); i++)
            junk[i] = (uint8_t)harness_rand();
        expect_closed(r->port, junk, sizeof(junk));
        /* The preface, then random frames. */
        memcpy(junk, preface, sizeof(preface) - 1);
        expect_closed(r->port, junk, sizeof(junk));
    }
    ok = request_bytes(1, 1, &len);
    assert_int_equal(harness_h2_call(r->port, RLS_PATH, "application/grpc", ok, len), 0);
    assert_true(harness_alive(r->d));
    harness_rls_stop(r);
}

struct flood {
    int port;
    const uint8_t *req;
    size_t req_len;
};

/* In the child, as an unprivileged uid: 20,000 streams, never a byte read. */
static int flood_child(void *arg)
{
    const struct flood *f = arg;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    nghttp2_session *ses;
    struct harness_h2 h = { .body = f->req, .body_len = f->req_len };
    nghttp2_data_provider prd = { .read_callback = harness_h2_read_body };
    nghttp2_nv nv[] = {
        { (uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0 },
        { (uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0 },
        { (uint8_t *)":authority", (uint8_t *)"divvy", 10, 5, 0 },
        { (uint8_t *)":path", (uint8_t *)RLS_PATH, 5, sizeof(RLS_PATH) - 1, 0 },
        { (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0 },
    };

    struct sockaddr_in sa = { .sin_family = AF_INET };
    int fd, small = 4096;

    if (setgroups(0, NULL) < 0 || setgid(FLOOD_GID) < 0 || setuid(FLOOD_UID) < 0)
        return 10;
    /* A small receive buffer: divvyd's answers fill it (and its send buffer) soon. */
    sa.sin_port = htons((uint16_t)f->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) < 0 ||
        connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return 11;
    /* Never reading divvyd's SETTINGS, it would keep to 100 streams: no limit. */
    if (nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0)
        return 12;
    nghttp2_option_set_peer_max_concurrent_streams(opt, 1u << 30);
    if (nghttp2_session_client_new2(&ses, cbs, &h, opt) != 0)
        return 12;
    nghttp2_submit_settings(ses, 0, NULL, 0);
    for (int i = 0; i < 20000; i++) {
        const uint8_t *data;
        ssize_t n;

        h.body_off = 0;
        if (nghttp2_submit_request(ses, NULL, nv, 5, &prd, NULL) < 0)
            return 13;
        while ((n = nghttp2_session_mem_send(ses, &data)) > 0) {
            /* A full socket: divvyd stopped reading us; hold on until killed. */
            if (harness_raw_send(fd, data, (size_t)n) < 0)
                for (;;)
                    pause();
        }
    }
    for (;;)
        pause();
    return 0;
}

static void test_rls_never_reading_client(void **state)
{
    static char conf[] = "server = { request_timeout_ms = 3000; };\n" RULES_EDGE;
    struct harness_rls *r;
    struct harness_conn *probe;
    struct flood fl;
    long long before, after;
    uint8_t *ok;
    size_t len;
    pid_t pid;
    int status;

    (void)state;
    if (geteuid() != 0)
        skip();
    r = harness_rls_start(conf);
    fl.port = r->port;
    fl.req = request_bytes(2, 1, &fl.req_len);
    before = harness_rss_kb(r->d->pid);
    CHECK(harness_spawn(flood_child, &fl, &pid));
    /* divvyd stops reading it, then closes it for its stalled output; others
     * are answered meanwhile. */
    CHECK(harness_connect(r->d, HARNESS_UNIX, &probe));
    for (uint64_t end = harness_now_ms() + 30000;; harness_pause_ms(100)) {
        long long out = 0, req = 0;

        ok = request_bytes(1, 1, &len);
        assert_int_equal(harness_h2_call(r->port, RLS_PATH, "application/grpc", ok, len), 0);
        CHECK(harness_get_stat(probe, "closed_slow_output", &out));
        CHECK(harness_get_stat(probe, "closed_slow_request", &req));
        if (out + req > 0)
            break;
        if (harness_now_ms() > end) {
            harness_dump_log(r->d);
            fail_msg("the never-reading RLS client was not closed within 30 s");
        }
    }
    harness_close(probe);
    after = harness_rss_kb(r->d->pid);
    if (after - before > 64 * 1024)
        fail_msg("divvyd grew from %lld to %lld kB", before, after);
    kill(pid, SIGKILL);
    CHECK(harness_reap(pid, 10000, &status));
    assert_true(harness_alive(r->d));
    harness_rls_stop(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rls_under_and_over_limit, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_hits_addend, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_invalid_requests, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_canary_and_privileged, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_concurrent_exact, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_redis, harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_rls_malformed_calls, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_garbage, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_never_reading_client, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("rls", tests, harness_grpc_setup, harness_grpc_teardown);
}
