/* SPDX-License-Identifier: MIT */
/*
 * Integration: what Envoy and its operators expect of a rate limit service
 * beyond ShouldRateLimit (docs/rls.md "Health", "Descriptors no rule
 * matches", "RateLimit headers", "Limit overrides"), with the real gRPC
 * client (@grpc/grpc-js, tests/rls/rls_client.js, harness_grpc.h):
 *   - grpc.health.v1.Health/Check: SERVING for "" and the RLS service's
 *     name, NOT_FOUND for another, a name past one message refused, Watch
 *     UNIMPLEMENTED, thousands of concurrent checks all answered;
 *   - NOT_SERVING once divvyd is stopping: a raw HTTP/2 client (nghttp2,
 *     in-process) opens a Check stream without its message, sees the stream
 *     taken (PING acknowledged after it), sends divvyd SIGTERM, waits for
 *     the GOAWAY, checks GET /healthcheck on the metrics endpoint is 503
 *     (200 "OK" before), then sends the message: NOT_SERVING;
 *   - a descriptor no rule matches: OK with no limit by default, the
 *     default rule's answer with rls.unmatched = "rule";
 *   - rls.ratelimit_headers: RateLimit-Limit/Remaining/Reset and, when over,
 *     Retry-After with the right values; none when off;
 *   - decisions through RLS counted exactly as divvy_decisions_total's
 *     protocol="rls";
 *   - a descriptor's limit override is not honoured, and the log says so.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "grpc/health/v1/health.pb-c.h"
#include "harness.h"
#include "harness_grpc.h"
#include "harness_h2.h"

#define RULES_EDGE                                                                            \
    "rules = (\n"                                                                             \
    "  { match = { domain = \"edge\"; user = \"*\"; }; label = \"per_user\"; actor = \"user\";\n" \
    "    credit_limit = 3; reset_seconds = 60; },\n"                                          \
    "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"                           \
    ");\n"
#define DESC(k, v) "{\"entries\":[{\"key\":\"" k "\",\"value\":\"" v "\"}]}"
#define CALLS(...) "\"calls\":[{\"domain\":\"edge\",\"descriptors\":[" __VA_ARGS__ "]}]"
#define CALL(...) "{" CALLS(__VA_ARGS__) "}"
#define RLS_SERVICE "envoy.service.ratelimit.v3.RateLimitService"

/* Call @i failed with grpc status @code. */
static void expect_error(json_t *res, size_t i, int code)
{
    json_t *c = json_array_get(res, i);

    if (!c || json_is_true(json_object_get(c, "ok")) ||
        json_integer_value(json_object_get(c, "code")) != code)
        fail_msg("call %zu: %s, want grpc status %d", i, c ? json_dumps(c, 0) : "(none)", code);
}

/* ---- grpc.health.v1 ------------------------------------------------------------------ */

static void test_rls_health_check(void **state)
{
    static const char check[] = "{\"health\":\"Check\",\"calls\":[{},{\"service\":\"\"},"
                                "{\"service\":\"" RLS_SERVICE "\"},{\"service\":\"nope\"}]}";
    static const char watch[] = "{\"health\":\"Watch\",\"calls\":[{}]}";
    static const char flood[] = "{\"health\":\"Check\",\"repeat\":3000,\"calls\":[{}]}";
    struct harness_rls *r;
    char *big, *job;
    json_t *res;

    (void)state;
    harness_grpc_need();
    r = harness_rls_start(RULES_EDGE);
    res = harness_grpc_run(r->tcp, check);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(harness_grpc_str(harness_grpc_resp(res, i), "status"), "SERVING");
    expect_error(res, 3, 5);    /* NOT_FOUND */
    json_decref(res);
    res = harness_grpc_run(r->unix_sock, watch);
    expect_error(res, 0, 12);   /* UNIMPLEMENTED: the spec's "do not retry" */
    json_decref(res);
    /* A name past one message (16 KiB): refused, not held. */
    big = harness_scratch(20001);
    job = harness_scratch(20100);
    assert_non_null(big);
    assert_non_null(job);
    memset(big, 'x', 20000);
    big[20000] = '\0';
    snprintf(job, 20100, "{\"health\":\"Check\",\"calls\":[{\"service\":\"%s\"}]}", big);
    res = harness_grpc_run(r->tcp, job);
    expect_error(res, 0, 8);    /* RESOURCE_EXHAUSTED */
    json_decref(res);
    /* Thousands of concurrent checks on one connection: every one answered. */
    res = harness_grpc_run(r->tcp, flood);
    assert_int_equal(json_array_size(res), 3000);
    for (size_t i = 0; i < 3000; i++)
        assert_string_equal(harness_grpc_str(harness_grpc_resp(res, i), "status"), "SERVING");
    json_decref(res);
    /* ... and rate limiting still answers. */
    res = harness_grpc_run(r->tcp, CALL(DESC("user", "h")));
    harness_grpc_overall(harness_grpc_resp(res, 0), "OK", 1);
    json_decref(res);
    assert_true(harness_alive(r->d));
    harness_rls_stop(r);
}

/* GET @path on 127.0.0.1:@port (HTTP/1.0, raw): the status, the body in @body. */
static int http_get(int port, const char *path, char *body, size_t size)
{
    struct harness_conn *c;
    char buf[4096], *sep;
    size_t len = 0;
    ssize_t n;

    CHECK(harness_connect_tcp(port, &c));
    CHECK(harness_sendf(c, "GET %s HTTP/1.0\r\nHost: divvy\r\n\r\n", path));
    while (len + 1 < sizeof(buf) && harness_readable(c, HARNESS_TIMEOUT_MS) > 0 &&
           (n = read(c->fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
    harness_close(c);
    sep = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) != 0 || !sep)
        fail_msg("GET %s: %s", path, buf);
    snprintf(body, size, "%s", sep + 4);
    return atoi(buf + 9);
}

static void test_rls_health_stopping(void **state)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    Grpc__Health__V1__HealthCheckResponse *resp;
    struct harness_h2 h;
    struct harness_rls *r;
    uint64_t deadline;
    uint8_t msg[64];
    char conf[512], body[256];
    int mport = harness_free_port(SOCK_STREAM), status;
    size_t n;

    (void)state;
    snprintf(conf, sizeof(conf), "metrics = { listen = \"tcp:127.0.0.1:%d\"; };\n" RULES_EDGE,
             mport);
    r = harness_rls_start(conf);
    assert_int_equal(http_get(mport, "/healthcheck", body, sizeof(body)), 200);
    assert_string_equal(body, "OK");
    req.service = (char *)RLS_SERVICE;
    n = grpc__health__v1__health_check_request__get_packed_size(&req);
    assert_true(n + 5 <= sizeof(msg));
    memcpy(msg, (const uint8_t[]){ 0, 0, 0, 0, (uint8_t)n }, 5);
    grpc__health__v1__health_check_request__pack(&req, msg + 5);

    /* A Check whose message waits; the PING is acknowledged after the
     * HEADERS before it are taken: divvyd holds the stream. */
    harness_h2_open(&h, r->port);
    h.hold = true;
    harness_h2_request(&h, "/grpc.health.v1.Health/Check", "application/grpc", msg, n + 5);
    assert_int_equal(nghttp2_submit_ping(h.ses, 0, NULL), 0);
    assert_true(harness_h2_pump(&h, &h.ping_ack));

    r->d->expect_exit = true;
    CHECK(harness_kill(r->d, SIGTERM));
    assert_true(harness_h2_pump(&h, &h.goaway));
    /* Stopping, while this call keeps divvyd's worker draining. */
    assert_int_equal(http_get(mport, "/healthcheck", body, sizeof(body)), 503);
    assert_string_equal(body, "stopping\n");
    harness_h2_release(&h);
    assert_true(harness_h2_pump(&h, &h.closed));
    assert_int_equal(h.grpc_status, 0);
    assert_true(h.data_len > 5);
    resp = grpc__health__v1__health_check_response__unpack(NULL, h.data_len - 5, h.data + 5);
    assert_non_null(resp);
    assert_int_equal(resp->status,
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
    grpc__health__v1__health_check_response__free_unpacked(resp, NULL);
    harness_h2_close(&h);
    /* It stops by itself (a second SIGTERM could come after its handler is gone). */
    deadline = harness_now_ms() + HARNESS_STOP_MS;
    while (harness_alive(r->d) && harness_now_ms() < deadline)
        harness_pause_ms(5);
    CHECK(harness_stop(r->d, &status));
    assert_int_equal(status, 0);
}

/* ---- Envoy parity ---------------------------------------------------------------------- */

static void test_rls_unmatched(void **state)
{
    static const char call[] = CALL(DESC("nomatch", "x") "," DESC("user", "u"));
    struct harness_rls *r;
    json_t *res, *resp;

    (void)state;
    harness_grpc_need();
    /* Default: a descriptor no rule of the config matches is OK, with no limit. */
    r = harness_rls_start(RULES_EDGE);
    res = harness_grpc_run(r->tcp, call);
    resp = harness_grpc_resp(res, 0);
    harness_grpc_overall(resp, "OK", 2);
    harness_grpc_status(resp, 0, "OK", NULL, 0, NULL, 0, 0, 0);
    harness_grpc_status(resp, 1, "OK", "per_user", 3, "MINUTE", 2, 59, 60);
    json_decref(res);
    harness_rls_stop(r);
    /* rls.unmatched = "rule": the default rule answers (here: denies). */
    r = harness_rls_start("rls = { unmatched = \"rule\"; };\n" RULES_EDGE);
    res = harness_grpc_run(r->tcp, call);
    resp = harness_grpc_resp(res, 0);
    harness_grpc_overall(resp, "OVER_LIMIT", 2);
    assert_string_equal(harness_grpc_str(json_array_get(json_object_get(resp, "statuses"), 0),
                                         "code"), "OVER_LIMIT");
    json_decref(res);
    harness_rls_stop(r);
}

/* Header @key of @resp's response_headers_to_add, NULL when absent. */
static const char *header_of(json_t *resp, const char *key)
{
    json_t *hs = json_object_get(resp, "response_headers_to_add"), *h;
    size_t i;

    json_array_foreach(hs, i, h)
        if (strcmp(harness_grpc_str(h, "key"), key) == 0)
            return harness_grpc_str(h, "value");
    return NULL;
}

static void test_rls_ratelimit_headers(void **state)
{
    static const char call[] = CALL(DESC("user", "hd"));
    struct harness_rls *r;
    json_t *res, *resp;
    long reset;

    (void)state;
    harness_grpc_need();
    r = harness_rls_start(RULES_EDGE);
    res = harness_grpc_run(r->tcp, call);
    resp = harness_grpc_resp(res, 0);
    if (json_array_size(json_object_get(resp, "response_headers_to_add")) != 0)
        fail_msg("headers sent while rls.ratelimit_headers is off: %s", json_dumps(resp, 0));
    json_decref(res);
    harness_rls_stop(r);

    r = harness_rls_start("rls = { ratelimit_headers = true; };\n" RULES_EDGE);
    res = harness_grpc_run(r->tcp, call);
    resp = harness_grpc_resp(res, 0);
    assert_non_null(header_of(resp, "RateLimit-Limit"));
    assert_string_equal(header_of(resp, "RateLimit-Limit"), "3");
    assert_string_equal(header_of(resp, "RateLimit-Remaining"), "2");
    reset = atol(header_of(resp, "RateLimit-Reset"));
    assert_true(reset >= 59 && reset <= 60);
    assert_null(header_of(resp, "Retry-After"));
    json_decref(res);
    res = harness_grpc_run(r->tcp, "{\"repeat\":3," CALLS(DESC("user", "hd")) "}");
    resp = harness_grpc_resp(res, 2);
    harness_grpc_overall(resp, "OVER_LIMIT", 1);
    assert_string_equal(header_of(resp, "RateLimit-Remaining"), "0");
    reset = atol(header_of(resp, "Retry-After") ? header_of(resp, "Retry-After") : "0");
    assert_true(reset >= 58 && reset <= 60);
    json_decref(res);
    harness_rls_stop(r);
}

/* Decisions taken through RLS are counted as the RLS protocol's, exactly:
 * five calls on one user of a limit of 3, one descriptor each. */
static void test_rls_decisions_metric(void **state)
{
    static const char *const want[] = {
        "divvy_decisions_total{protocol=\"rls\",status=\"accepted\"} 3",
        "divvy_decisions_total{protocol=\"rls\",status=\"rejected\"} 2",
        "divvy_decisions_total{protocol=\"line\",status=\"accepted\"} 0",
        "divvy_decisions_total{protocol=\"resp\",status=\"accepted\"} 0",
    };
    struct harness_rls *r;
    json_t *res;
    char conf[512], *body = harness_scratch(262144);
    int mport = harness_free_port(SOCK_STREAM);

    (void)state;
    harness_grpc_need();
    snprintf(conf, sizeof(conf), "metrics = { listen = \"tcp:127.0.0.1:%d\"; };\n" RULES_EDGE,
             mport);
    r = harness_rls_start(conf);
    res = harness_grpc_run(r->tcp, "{\"repeat\":5," CALLS(DESC("user", "dm")) "}");
    harness_grpc_overall(harness_grpc_resp(res, 2), "OK", 1);
    harness_grpc_overall(harness_grpc_resp(res, 3), "OVER_LIMIT", 1);
    json_decref(res);
    assert_int_equal(harness_http_get(mport, "/metrics", body, 262144), 200);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(body, want[i]))
            fail_msg("no \"%s\" in:\n%.4000s", want[i], body);
    harness_rls_stop(r);
}

static void test_rls_limit_override(void **state)
{
    static const char call[] =
        "{\"repeat\":4,\"calls\":[{\"domain\":\"edge\",\"descriptors\":[{\"entries\":"
        "[{\"key\":\"user\",\"value\":\"ov\"}],\"limit\":{\"requests_per_unit\":1000,"
        "\"unit\":\"SECOND\"}}]}]}";
    struct harness_rls *r;
    json_t *res;
    long ok = 0;

    (void)state;
    harness_grpc_need();
    r = harness_rls_start(RULES_EDGE);
    res = harness_grpc_run(r->tcp, call);
    for (size_t i = 0; i < 4; i++)
        ok += strcmp(harness_grpc_str(harness_grpc_resp(res, i), "overall_code"), "OK") == 0;
    json_decref(res);
    /* The rule's 3 a minute, not the override's 1000 a second; said in the log. */
    assert_int_equal(ok, 3);
    assert_true(harness_log_contains(r->d, "limit override (1000 per unit 1) is not honoured") >
                0);
    harness_rls_stop(r);
}

/* A config with a bad rls setting is refused with its line. */
static void test_rls_settings_checked(void **state)
{
    static const char *const bad[] = {
        "rls = { unmatched = \"maybe\"; };\n" RULES_EDGE,
        "rls = { ratelimit_headers = \"yes\"; };\n" RULES_EDGE,
        "rls = { unmached = \"ok\"; };\n" RULES_EDGE,
    };
    static const char *const why[] = {
        "rls.unmatched must be \"ok\" or \"rule\"",
        "rls.ratelimit_headers must be true or false",
        "did you mean",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char path[HARNESS_PATH + 32], out[256], err[4096];
        const char *args[] = { "--check", "-c", path, NULL };
        FILE *f;
        int status;

        snprintf(path, sizeof(path), "%s/bad%zu.conf", harness_grpc_tmp, i);
        f = fopen(path, "w");
        assert_non_null(f);
        fputs(bad[i], f);
        fclose(f);
        CHECK(harness_run_divvyd(args, 10000, &status, out, sizeof(out), err, sizeof(err)));
        if (status != 1 || !strstr(err, why[i]) || !strstr(err, ":1:"))
            fail_msg("config %zu: exit %d, %s", i, status, err);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rls_health_check, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_health_stopping, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_unmatched, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_ratelimit_headers, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_decisions_metric, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_limit_override, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_settings_checked, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("rls_envoy", tests, harness_grpc_setup,
                                       harness_grpc_teardown);
}
