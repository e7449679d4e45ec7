/* SPDX-License-Identifier: MIT */
/*
 * Integration: a Redis outage as Prometheus sees it (docs/operations.md
 * "Prometheus", docs/redis.md "Redis down").  A real redis-server on its
 * Unix socket, a strict-mode divvyd with its metrics endpoint, one case per
 * on_redis_error policy.  Each case scrapes three times:
 *   - Redis up, one hit decided there: divvy_redis_up{node="unix:PATH"} 1,
 *     the breaker closed, no transition, no fallback;
 *   - redis-server killed (SIGKILL, by PID) and N hits sent: up 0, the
 *     breaker open, exactly one transition to open, and exactly N fallbacks
 *     under the policy in force (0 under the other two), as STATS'
 *     redis_fallbacks counts them;
 *   - redis-server started again: up 1 once the breaker closed, one
 *     transition each way, and Redis decides again.
 * Every server is stopped by PID even when an assertion fails (the
 * harness_redis.c registry).
 */
#include <sys/socket.h>

#include "harness_redis.h"

#define WORKERS     2
#define TIMEOUT_MS  200
#define BIG         262144
#define DOWN_HITS   5

static const char rules_text[] =
    "{ match = { path = \"/api\"; }; label = \"api\"; actor = \"user\";\n"
    "  credit_limit = 3; reset_seconds = 3600; },\n"
    "{ default = true; credit_limit = 0; reset_seconds = 0; }";

/* @port's scrape must have the line @line (every value checked here is settled
 * by then: a counter that was wrong fails after the harness's 10 s). */
static void expect_line(int port, const char *line, char *body)
{
    harness_scrape_until(port, "/metrics", line, body, BIG);
}

/* `@metric{node="unix:<sock>"@tail} @value` must be a line of @body. */
static void expect_node(int port, const struct redis_srv *r, const char *metric,
                        const char *tail, long long value, char *body)
{
    char line[HARNESS_PATH + 256];

    snprintf(line, sizeof(line), "%s{node=\"unix:%s\"%s} %lld", metric, r->sock, tail, value);
    expect_line(port, line, body);
}

/* The fallbacks of every policy: @n under @policy, none under the others. */
static void expect_fallbacks(int port, const char *policy, long long n, char *body)
{
    static const char *const all[] = { "local", "open", "closed" };
    char line[128];

    for (int i = 0; i < 3; i++) {
        snprintf(line, sizeof(line), "divvy_redis_fallbacks_total{policy=\"%s\"} %lld", all[i],
                 strcmp(all[i], policy) == 0 ? n : 0);
        expect_line(port, line, body);
    }
}

/* One HIT for @user: allowed or not, with @credit. */
static void hit(struct harness_conn *c, const char *user, bool allowed, long long credit)
{
    char req[96], r[HARNESS_LINE];
    long long cr, secs;
    bool a;

    snprintf(req, sizeof(req), "HIT path=/api user=%s", user);
    CHECK(harness_cmd(c, req, r, sizeof(r)));
    if (harness_parse_ok(r, &a, &cr, &secs) < 0 || a != allowed || cr != credit)
        fail_msg("%s -> \"%s\", want OK %s %lld", req, r, allowed ? "true" : "false", credit);
}

static void outage_case(const char *policy)
{
    struct harness_daemon *d;
    struct harness_conn *c;
    struct redis_srv *r;
    char *body = harness_scratch(BIG), *conf = NULL, *text = NULL;
    int port = harness_free_port(SOCK_STREAM);
    long long fallbacks = -1;

    assert_non_null(body);
    CHECK(port);
    CHECK(redis_start(&r));
    conf = redis_config(r, "strict", policy, TIMEOUT_MS, NULL, rules_text);
    assert_non_null(conf);
    assert_true(asprintf(&text, "metrics = { listen = \"tcp:127.0.0.1:%d\"; };\n%s", port,
                         conf) > 0);
    d = redis_divvyd(text, WORKERS);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));

    /* Up: a hit decided in Redis. */
    hit(c, "alice", true, 2);
    assert_int_equal(redis_int(r, "GET divvy:{api:alice}"), 1);
    expect_node(port, r, "divvy_redis_up", "", 1, body);
    expect_node(port, r, "divvy_redis_breaker_open", "", 0, body);
    expect_node(port, r, "divvy_redis_breaker_transitions_total", ",to=\"open\"", 0, body);
    expect_node(port, r, "divvy_redis_breaker_transitions_total", ",to=\"closed\"", 0, body);
    expect_fallbacks(port, policy, 0, body);

    /* Down: every hit is the policy's. */
    redis_kill(r);
    for (int i = 0; i < DOWN_HITS; i++) {
        if (strcmp(policy, "closed") == 0)
            hit(c, "bob", false, 0);
        else if (strcmp(policy, "open") == 0)
            hit(c, "bob", true, 3);
        else
            hit(c, "bob", i < 3, i < 3 ? 2 - i : 0);    /* this host's own counter */
    }
    expect_node(port, r, "divvy_redis_up", "", 0, body);
    expect_node(port, r, "divvy_redis_breaker_open", "", 1, body);
    expect_node(port, r, "divvy_redis_breaker_transitions_total", ",to=\"open\"", 1, body);
    expect_node(port, r, "divvy_redis_breaker_transitions_total", ",to=\"closed\"", 0, body);
    expect_fallbacks(port, policy, DOWN_HITS, body);
    CHECK(harness_get_stat(c, "redis_fallbacks", &fallbacks));
    assert_int_equal(fallbacks, DOWN_HITS);

    /* Back: the breaker closes, Redis decides again. */
    CHECK(redis_restart(r));
    redis_wait_state(c, "up");
    expect_node(port, r, "divvy_redis_up", "", 1, body);
    expect_node(port, r, "divvy_redis_breaker_open", "", 0, body);
    expect_node(port, r, "divvy_redis_breaker_transitions_total", ",to=\"open\"", 1, body);
    expect_node(port, r, "divvy_redis_breaker_transitions_total", ",to=\"closed\"", 1, body);
    hit(c, "carol", true, 2);
    assert_int_equal(redis_int(r, "GET divvy:{api:carol}"), 1);
    harness_scrape_until(port, "/metrics", "divvy_hit_duration_seconds_count 7", body, BIG);
    expect_fallbacks(port, policy, DOWN_HITS, body);

    harness_close(c);
    CHECK(harness_stop(d, NULL));
    harness_free(d);
    redis_stop(r);
    free(text);
    free(conf);
}

static void test_redis_metrics_outage_local(void **state)
{
    (void)state;
    outage_case("local");
}

static void test_redis_metrics_outage_open(void **state)
{
    (void)state;
    outage_case("open");
}

static void test_redis_metrics_outage_closed(void **state)
{
    (void)state;
    outage_case("closed");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_redis_metrics_outage_local, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_metrics_outage_open, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_metrics_outage_closed, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_metrics", tests, NULL, NULL);
}
