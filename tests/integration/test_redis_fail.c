/* SPDX-License-Identifier: MIT */
/*
 * Integration: divvyd when Redis fails (docs/redis.md "Failure").  Redis is
 * killed mid-load and restarted, paused with SIGSTOP, or absent when divvyd
 * starts.  Each on_redis_error policy answers as documented (local: the
 * host's own counter; open: allow; closed: deny); no request waits longer
 * than a generous 5 x redis.timeout_ms; the breaker trips once per outage
 * (one log line, one count, however many workers) and closes by itself once
 * Redis is back.  A deny by on_redis_error = "closed" is told from a quota
 * deny: EXPLAIN's cause=, STATS denials_* and redis_* (docs/redis.md
 * "Monitoring").
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include "harness_redis.h"

#define TIMEOUT_MS  200
#define BOUND_MS    (5 * TIMEOUT_MS)

static const char rules_text[] =
    "{ match = { path = \"/login\"; }; label = \"login\"; actor = \"user\";\n"
    "  credit_limit = 2; reset_seconds = 3600; },\n"
    "{ match = { path = \"/api\"; }; label = \"api\"; actor = \"user\";\n"
    "  credit_limit = 1000000; reset_seconds = 3600; },\n"
    "{ default = true; credit_limit = 0; reset_seconds = 0; }";

static struct harness_daemon *start(struct redis_srv *rs, const char *mode, const char *policy)
{
    struct harness_daemon *d;
    char *conf = redis_config(rs, mode, policy, TIMEOUT_MS, NULL, rules_text);

    assert_non_null(conf);
    d = redis_divvyd(conf, 2);
    free(conf);
    return d;
}

/* "up" or "down", polled on a connection of its own until @want or 10 s. */
static void wait_state(struct harness_daemon *d, const char *want)
{
    struct harness_conn *c;

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    redis_wait_state(c, want);
    harness_close(c);
}

/* Sends @req and checks the reply's verdict and credit; returns ms taken. */
static uint64_t expect_hit(struct harness_conn *c, const char *req, bool allowed, long long credit)
{
    uint64_t t0 = harness_now_ms(), dt;
    char r[HARNESS_LINE];
    bool a;
    long long cr, secs;

    CHECK(harness_cmd(c, req, r, sizeof(r)));
    dt = harness_now_ms() - t0;
    if (harness_parse_ok(r, &a, &cr, &secs) < 0 || a != allowed || cr != credit)
        fail_msg("%s -> \"%s\", want OK %s %lld", req, r, allowed ? "true" : "false", credit);
    if (dt > BOUND_MS)
        fail_msg("%s took %llu ms (bound %d ms)", req, (unsigned long long)dt, BOUND_MS);
    return dt;
}

/* Load that runs until told to stop: small pipelined batches of HITs. */
struct load {
    struct harness_daemon *d;
    atomic_bool stop;
    unsigned batches;
    unsigned replies, bad;
    uint64_t max_ms;
    int err;
};

/* Sends @req until Redis answers it (OK true 1: the first hit of a Redis
 * that restarted empty; a policy answer is never that), for at most 5 s. */
static void expect_redis_again(struct harness_conn *c, const char *req)
{
    uint64_t deadline = harness_now_ms() + 5000;
    char r[HARNESS_LINE];
    long long cr, secs;
    bool a;

    for (;;) {
        CHECK(harness_cmd(c, req, r, sizeof(r)));
        if (harness_parse_ok(r, &a, &cr, &secs) == 0 && a && cr == 1)
            return;
        if (harness_now_ms() > deadline)
            fail_msg("%s -> \"%s\" 5 s after Redis came back, want OK true 1", req, r);
        harness_pause_ms(20);
    }
}

static void *load_run(void *arg)
{
    struct load *l = arg;
    struct harness_conn *c = NULL;
    char line[HARNESS_LINE];
    static const char batch[] = "HIT path=/api user=load\nHIT path=/api user=load\n"
                                "HIT path=/api user=load\nHIT path=/api user=load\n";
    int r = harness_connect(l->d, HARNESS_UNIX, &c);

    while (r >= 0 && !atomic_load(&l->stop)) {
        uint64_t t0 = harness_now_ms(), dt;

        r = harness_send(c, batch, sizeof(batch) - 1);
        for (int i = 0; r >= 0 && i < 4; i++) {
            r = (int)harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS);
            if (r >= 0 && strncmp(line, "OK true ", 8) != 0)
                l->bad++;
            l->replies++;
        }
        dt = harness_now_ms() - t0;
        if (dt > l->max_ms)
            l->max_ms = dt;
        l->batches++;
    }
    if (r < 0)
        l->err = r;
    harness_close(c);
    return NULL;
}

/*
 * The outage scenario for one policy: load runs, Redis is killed, the
 * policy answers, Redis comes back empty, the breaker closes, Redis answers.
 */
static void outage(const char *policy)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    struct load l = { 0 };
    pthread_t t;

    CHECK(redis_start(&rs));
    d = start(rs, "strict", policy);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_hit(c, "HIT path=/login user=bob", true, 1);
    l.d = d;
    assert_int_equal(pthread_create(&t, NULL, load_run, &l), 0);
    harness_pause_ms(150);
    redis_kill(rs);
    wait_state(d, "down");
    /* Each policy, while Redis is down; nothing waits for it. */
    if (strcmp(policy, "local") == 0) {
        /* The host's own counter: a fresh window here (Redis had bob at 1). */
        expect_hit(c, "HIT path=/login user=bob", true, 1);
        expect_hit(c, "HIT path=/login user=bob", true, 0);
        expect_hit(c, "HIT path=/login user=bob", false, 0);
    } else if (strcmp(policy, "open") == 0) {
        for (int i = 0; i < 4; i++)
            expect_hit(c, "HIT path=/login user=bob", true, 2);
    } else {
        for (int i = 0; i < 4; i++)
            expect_hit(c, "HIT path=/login user=bob", false, 0);
    }
    harness_pause_ms(200);
    CHECK(redis_restart(rs));
    wait_state(d, "up");
    /* Redis answers again (it restarted empty).  STATS says "up" once one
     * worker's link is back; this connection's worker may still be
     * reconnecting for a moment and answer with the policy, which counts
     * nothing in Redis: so the first answer from Redis within 5 s. */
    expect_redis_again(c, "HIT path=/login user=bob");
    atomic_store(&l.stop, true);
    pthread_join(t, NULL);
    if (l.err < 0)
        fail_msg("load: %s", strerror(-l.err));
    print_message("%s: %u batches, slowest %llu ms (bound %d ms)\n", policy, l.batches,
                  (unsigned long long)l.max_ms, BOUND_MS);
    if (l.max_ms > BOUND_MS)
        fail_msg("a batch of 4 hits took %llu ms while Redis was down (bound %d ms)",
                 (unsigned long long)l.max_ms, BOUND_MS);
    if (strcmp(policy, "closed") != 0)
        assert_int_equal(l.bad, 0);
    /* One outage: one trip, logged once, however many workers saw it. */
    assert_int_equal(redis_divvyd_stat(d, "redis_breaker_trips"), 1);
    assert_true(redis_divvyd_stat(d, "redis_fallbacks") >= 3);
    assert_int_equal(harness_log_contains(d, "breaker open"), 1);
    assert_int_equal(harness_log_contains(d, "breaker closed"), 1);
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

static void test_redis_fail_killed_local(void **state)
{
    (void)state;
    outage("local");
}

static void test_redis_fail_killed_open(void **state)
{
    (void)state;
    outage("open");
}

static void test_redis_fail_killed_closed(void **state)
{
    (void)state;
    outage("closed");
}

/* SIGSTOP under load: requests time out (within the bound), the breaker
 * opens; later hits do not wait at all; SIGCONT: it closes again. */
static void test_redis_fail_paused(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    struct load l = { 0 };
    pthread_t t;
    uint64_t dt;

    (void)state;
    CHECK(redis_start(&rs));
    d = start(rs, "strict", "local");
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_hit(c, "HIT path=/login user=carol", true, 1);
    l.d = d;
    assert_int_equal(pthread_create(&t, NULL, load_run, &l), 0);
    harness_pause_ms(100);
    redis_pause(rs, true);
    dt = expect_hit(c, "HIT path=/login user=dave", true, 1);
    assert_true(dt >= TIMEOUT_MS / 2);
    /* The breaker is open: no wait. */
    dt = expect_hit(c, "HIT path=/login user=dave", true, 0);
    assert_true(dt < TIMEOUT_MS);
    assert_true(redis_divvyd_stat(d, "redis_timeouts") >= 1);
    wait_state(d, "down");
    harness_pause_ms(200);
    redis_pause(rs, false);
    wait_state(d, "up");
    expect_hit(c, "HIT path=/login user=erin", true, 1);
    atomic_store(&l.stop, true);
    pthread_join(t, NULL);
    if (l.err < 0)
        fail_msg("load: %s", strerror(-l.err));
    print_message("paused: %u batches, slowest %llu ms (bound %d ms)\n", l.batches,
                  (unsigned long long)l.max_ms, BOUND_MS);
    assert_true(l.max_ms >= TIMEOUT_MS / 2);
    if (l.max_ms > BOUND_MS)
        fail_msg("a batch took %llu ms while Redis was paused (bound %d ms)",
                 (unsigned long long)l.max_ms, BOUND_MS);
    assert_int_equal(l.bad, 0);
    assert_int_equal(harness_log_contains(d, "no reply within"), 1);
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

/* Redis absent at start: divvyd starts, serves by policy, recovers alone. */
static void test_redis_fail_down_at_start(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;

    (void)state;
    CHECK(redis_start(&rs));
    redis_kill(rs);
    d = start(rs, "strict", "closed");
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_hit(c, "HIT path=/login user=frank", false, 0);
    wait_state(d, "down");
    CHECK(redis_restart(rs));
    wait_state(d, "up");
    expect_hit(c, "HIT path=/login user=frank", true, 1);
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

/* The EXPLAIN line of rule @id for @req, into @line. */
static void explain_line(struct harness_conn *c, const char *req, const char *id, char *line,
                         size_t size)
{
    char buf[8192], needle[64], *p, *end;

    CHECK(harness_multi(c, req, buf, sizeof(buf)));
    snprintf(needle, sizeof(needle), " id=%s ", id);
    p = strstr(buf, needle);
    if (!p)
        fail_msg("%s: no line for rule %s:\n%s", req, id, buf);
    while (p > buf && p[-1] != '\n')
        p--;
    end = strchr(p, '\n');
    snprintf(line, size, "%.*s", end ? (int)(end - p) : (int)strlen(p), p);
}

/*
 * on_redis_error = "closed": a quota deny and a Redis-down deny look the
 * same on the wire (HIT's reply is divvy's), so divvyd tells them apart
 * elsewhere: EXPLAIN's cause=, STATS denials_<cause>, and the store's state
 * in STATS (address, policy, how long it has been down).
 */
static void test_redis_fail_deny_cause(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    char line[4096], want[600];
    long long down;

    (void)state;
    CHECK(redis_start(&rs));
    d = start(rs, "strict", "closed");
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_hit(c, "HIT path=/login user=hana", true, 1);
    expect_hit(c, "HIT path=/login user=hana", true, 0);
    expect_hit(c, "HIT path=/login user=hana", false, 0);
    expect_hit(c, "HIT path=/nowhere", false, 0);          /* the default rule: limit 0 */
    explain_line(c, "EXPLAIN path=/login user=hana", "login", line, sizeof(line));
    assert_non_null(strstr(line, " verdict=decides "));
    assert_non_null(strstr(line, " cause=counter"));
    assert_int_equal(redis_divvyd_stat(d, "denials_quota"), 1);
    assert_int_equal(redis_divvyd_stat(d, "denials_zero_limit"), 1);
    assert_int_equal(redis_divvyd_stat(d, "denials_redis_down"), 0);
    assert_int_equal(redis_divvyd_stat(d, "redis_down_seconds"), 0);
    assert_int_equal(redis_divvyd_stat(d, "redis_rules_strict"), 3);
    CHECK(harness_multi(c, "STATS", line, sizeof(line)));
    snprintf(want, sizeof(want), "redis_address=unix:%s\n", rs->sock);
    assert_non_null(strstr(line, want));
    assert_non_null(strstr(line, "redis_on_error=closed\n"));

    redis_kill(rs);
    wait_state(d, "down");
    expect_hit(c, "HIT path=/login user=ivan", false, 0);
    expect_hit(c, "HIT path=/login user=ivan", false, 0);
    explain_line(c, "EXPLAIN path=/login user=ivan", "login", line, sizeof(line));
    assert_non_null(strstr(line, " cause=redis-down"));
    /* A rule that matched nothing has no cause. */
    explain_line(c, "EXPLAIN path=/api user=ivan", "login", line, sizeof(line));
    assert_non_null(strstr(line, " verdict=no-match "));
    assert_non_null(strstr(line, " cause=none"));
    assert_int_equal(redis_divvyd_stat(d, "denials_redis_down"), 2);
    assert_int_equal(redis_divvyd_stat(d, "denials_quota"), 1);
    /* Down since the breaker opened: polled, it counts up. */
    for (uint64_t end = harness_now_ms() + 5000; (down = redis_divvyd_stat(d, "redis_down_seconds")) < 1;) {
        if (harness_now_ms() > end)
            fail_msg("redis_down_seconds stayed %lld", down);
        harness_pause_ms(50);
    }
    CHECK(redis_restart(rs));
    wait_state(d, "up");
    assert_int_equal(redis_divvyd_stat(d, "redis_down_seconds"), 0);
    explain_line(c, "EXPLAIN path=/login user=ivan", "login", line, sizeof(line));
    assert_non_null(strstr(line, " cause=counter"));
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

/* SCRIPT FLUSH under divvyd: NOSCRIPT, the script is loaded again and the
 * request retried, transparently; the breaker stays closed. */
static void test_redis_fail_noscript(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;

    (void)state;
    CHECK(redis_start(&rs));
    d = start(rs, "strict", "closed");
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_hit(c, "HIT path=/login user=gina", true, 1);
    assert_int_equal(redis_int(rs, "SCRIPT FLUSH") == LLONG_MIN, 1);   /* status reply */
    expect_hit(c, "HIT path=/login user=gina", true, 0);
    expect_hit(c, "HIT path=/login user=gina", false, 0);
    assert_true(redis_divvyd_stat(d, "redis_noscript") >= 1);
    assert_int_equal(redis_divvyd_stat(d, "redis_breaker_trips"), 0);
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_redis_fail_killed_local, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_fail_killed_open, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_fail_killed_closed, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_fail_paused, harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_fail_down_at_start, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_fail_noscript, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_fail_deny_cause, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_fail", tests, NULL, NULL);
}
