/* SPDX-License-Identifier: MIT */
/*
 * Integration: strict mode answers as local mode does (docs/redis.md).
 * divvy's README example config and a HIT sequence give the same replies in
 * `strict` as in `local`; so do token buckets and sliding windows; TAKE,
 * PEEK and RESET work in Redis; a path mixing a strict continue rule and a
 * local stop rule is evaluated in order; replies stay in request order when
 * local and Redis answers interleave on one pipelined connection, also
 * past the per-connection cap of waiting hits (reading pauses, then
 * resumes); clients that hang up with hits in flight are freed safely; a
 * reload switches a running daemon from local to strict.
 */
#include "harness_redis.h"

/* divvy's examples/example-config.ini (etc/divvy.ini) in the native format. */
static const char readme_rules[] =
    "{ match = { method = \"GET\"; path = \"/status\"; }; credit_limit = 1000;\n"
    "  reset_seconds = 60; },\n"
    "{ match = { method = \"GET\"; path = \"/pantry/cookies/special-cookie\"; };\n"
    "  credit_limit = 1; reset_seconds = 86400; match_policy = \"canary\"; },\n"
    "{ match = { method = \"GET\"; path = \"/pantry/cookies/*\"; ip = \"*\"; }; actor = \"ip\";\n"
    "  credit_limit = 3; reset_seconds = 3600; },\n"
    "{ match = { method = \"GET\"; path = \"/pantry/*\"; ip = \"*\"; }; actor = \"ip\";\n"
    "  credit_limit = 1; reset_seconds = 3600; },\n"
    "{ match = { method = \"GET\"; path = \"/crisper/carrots\"; ip = \"*\"; foo = \"3\"; };\n"
    "  actor = \"ip\"; credit_limit = 10; reset_seconds = 60; },\n"
    "{ match = { algo = \"bucket\"; }; label = \"bucket\"; actor = \"u\";\n"
    "  algorithm = \"token_bucket\"; credit_limit = 3; refill_amount = 1; refill_seconds = 60; },\n"
    "{ match = { algo = \"sliding\"; }; label = \"sliding\"; actor = \"u\";\n"
    "  algorithm = \"sliding_window\"; credit_limit = 3; reset_seconds = 60; },\n"
    "{ default = true; credit_limit = 0; reset_seconds = 0; }";

/* The README transcripts plus the extension verbs. */
static const char *const reqs[] = {
    "HIT method=GET path=/status",
    "HIT method=GET path=/status",
    "HIT method=GET path=/pantry/cookies/chocolate-chip ip=192.168.1.1",
    "HIT method=GET path=/pantry/cookies/chocolate-chip ip=192.168.1.1",
    "HIT method=GET path=/pantry/cookies/oatmeal ip=192.168.1.1",
    "HIT method=GET path=/pantry/cookies/cricket-flavored ip=192.168.1.1",
    "HIT method=GET path=/pantry/cookies/oatmeal ip=192.168.1.1",
    "HIT method=GET path=/pantry/cookies/oatmeal ip=4.3.2.1",
    "HIT method=GET path=/pantry/cookies/special-cookie ip=192.168.1.9",
    "HIT method=GET path=/pantry/cookies/special-cookie ip=192.168.1.9",
    "HIT method=GET path=/pantry/cookies/special-cookie ip=1.2.3.4",
    "HIT method=GET path=/pantry/bread ip=10.0.0.1",
    "HIT method=GET path=/pantry/jam ip=10.0.0.1",
    "HIT method=GET path=/pantry/bread",
    "HIT method=GET path=/crisper/carrots ip=10.0.0.1 foo=3",
    "HIT method=GET path=/crisper/carrots ip=10.0.0.1 foo=3 extra=1",
    "HIT method=GET path=/crisper/carrots ip=10.0.0.1 foo=4",
    "HIT method=POST path=/status",
    "HIT",
    "PEEK method=GET path=/status",
    "TAKE 5 method=GET path=/status",
    "TAKE 996 method=GET path=/status",
    "TAKE 990 method=GET path=/status",
    "PEEK method=GET path=/status",
    "TAKE 3 method=GET path=/pantry/cookies/x ip=7.7.7.7",
    "TAKE 1 method=GET path=/pantry/cookies/x ip=7.7.7.7",
    "HIT algo=bucket u=1", "HIT algo=bucket u=1", "TAKE 2 algo=bucket u=1",
    "HIT algo=bucket u=1", "PEEK algo=bucket u=1", "TAKE 4 algo=bucket u=2",
    "HIT algo=sliding u=1", "TAKE 2 algo=sliding u=1", "HIT algo=sliding u=1",
    "PEEK algo=sliding u=1",
    "RESET method=GET path=/pantry/cookies/x ip=7.7.7.7",
    "HIT method=GET path=/pantry/cookies/x ip=7.7.7.7",
    "RESET algo=bucket u=1",
    "HIT algo=bucket u=1",
    "PING",
};

static void test_redis_compat_readme_strict_as_local(void **state)
{
    const size_t n = sizeof(reqs) / sizeof(reqs[0]);
    struct redis_srv *rs;
    struct harness_daemon *local, *strict;
    struct harness_conn *cl, *cs;
    char *conf_local, *conf_strict, rl[HARNESS_LINE], rsr[HARNESS_LINE];

    (void)state;
    CHECK(redis_start(&rs));
    conf_local = redis_config(rs, "local", "closed", 1000, NULL, readme_rules);
    conf_strict = redis_config(rs, "strict", "closed", 1000, NULL, readme_rules);
    assert_non_null(conf_local);
    assert_non_null(conf_strict);
    local = redis_divvyd(conf_local, 2);
    strict = redis_divvyd(conf_strict, 2);
    free(conf_local);
    free(conf_strict);
    CHECK(harness_connect(local, HARNESS_UNIX, &cl));
    CHECK(harness_connect(strict, HARNESS_UNIX, &cs));
    for (size_t i = 0; i < n; i++) {
        CHECK(harness_cmd(cl, reqs[i], rl, sizeof(rl)));
        CHECK(harness_cmd(cs, reqs[i], rsr, sizeof(rsr)));
        if (!harness_same_reply(rl, rsr))
            fail_msg("%s: local says \"%s\", strict says \"%s\"", reqs[i], rl, rsr);
    }
    /* The strict answers came from Redis, under readable keys. */
    assert_int_equal(redis_int(rs, "EXISTS %s", "divvy:{bucket:1}"), 1);
    assert_true(redis_int(rs, "DBSIZE") >= 6);
    {
        long long v;

        CHECK(harness_get_stat(cs, "redis_fallbacks", &v));
        assert_int_equal(v, 0);
        CHECK(harness_get_stat(cl, "redis_requests", &v));
        assert_int_equal(v, 0);
    }
    harness_close(cl);
    harness_close(cs);
    redis_stop(rs);
}

/* A strict continue rule and a local stop rule on one path: in order; the
 * strict rule is charged first, and when it denies, the local one is not.
 * An allowed hit replies the tighter of the two, named (the host rule
 * decides; the shared one, with less credit left, is what the reply shows). */
static void test_redis_compat_mixed_path(void **state)
{
    static const char rules[] =
        "{ match = { path = \"/x\"; }; label = \"shared\"; actor = \"user\"; credit_limit = 2;\n"
        "  reset_seconds = 600; match_policy = \"continue\"; store = \"strict\"; },\n"
        "{ match = { path = \"/x\"; }; label = \"host\"; actor = \"user\"; credit_limit = 3;\n"
        "  reset_seconds = 600; },\n"
        "{ default = true; credit_limit = 0; reset_seconds = 0; }";
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    char *conf;

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "local", "closed", 1000, NULL, rules);
    assert_non_null(conf);
    d = redis_divvyd(conf, 1);
    free(conf);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK_RULE(c, "TAKE 1 path=/x user=u", true, 1, 600, 600, "shared");
    EXPECT_OK_RULE(c, "TAKE 1 path=/x user=u", true, 0, 599, 600, "shared");
    /* The strict rule is exhausted: it decides, the host rule keeps its 1. */
    EXPECT_OK_RULE(c, "TAKE 1 path=/x user=u", false, 0, 599, 600, "shared");
    assert_int_equal(redis_int(rs, "GET %s", "divvy:{shared:u}"), 2);
    EXPECT_OK_RULE(c, "RESET path=/x user=u", true, 3, 0, 0, "host");
    assert_int_equal(redis_int(rs, "EXISTS %s", "divvy:{shared:u}"), 0);
    EXPECT_OK_RULE(c, "TAKE 1 path=/x user=u", true, 1, 600, 600, "shared");
    /* Keys escape ':', '{', '}' and '%' in actors. */
    EXPECT_OK_RULE(c, "TAKE 1 path=/x user=\"a:{b}%c\"", true, 1, 600, 600, "shared");
    assert_int_equal(redis_int(rs, "GET %s", "divvy:{shared:a%3A%7Bb%7D%25c}"), 1);
    harness_close(c);
    redis_stop(rs);
}

/* Pipelined local and Redis requests on one connection: replies in order. */
static void test_redis_compat_reply_order(void **state)
{
    static const char rules[] =
        "{ match = { r = \"remote\"; }; label = \"remote\"; credit_limit = 100000;\n"
        "  reset_seconds = 600; store = \"strict\"; },\n"
        "{ match = { r = \"local\"; }; label = \"here\"; credit_limit = 50000;\n"
        "  reset_seconds = 600; },\n"
        "{ default = true; credit_limit = 0; reset_seconds = 0; }";
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    char *conf, *batch, line[HARNESS_LINE], want[64];
    long long remote = 100000, here = 50000;
    size_t len = 0;
    const int n = 3000;

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "local", "closed", 1000, NULL, rules);
    assert_non_null(conf);
    d = redis_divvyd(conf, 1);
    free(conf);
    batch = harness_scratch((size_t)n * 32);
    assert_non_null(batch);
    /* A pattern of 1-3 remote, local, PING, in one write. */
    for (int i = 0; i < n; i++) {
        int k = i % 7;

        len += (size_t)sprintf(batch + len, "%s\n", k == 2 || k == 5 ? "HIT r=local"
                                                    : k == 6         ? "PING"
                                                                     : "HIT r=remote");
    }
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_send(c, batch, len));
    for (int i = 0; i < n; i++) {
        int k = i % 7;

        CHECK(harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS));
        if (k == 6)
            snprintf(want, sizeof(want), "OK pong");
        else if (k == 2 || k == 5)
            snprintf(want, sizeof(want), "OK true %lld 600", --here);
        else
            snprintf(want, sizeof(want), "OK true %lld 600", --remote);
        if (strncmp(line, want, strlen(want) - 3) != 0)
            fail_msg("reply %d is \"%s\", want \"%s\"", i, line, want);
    }
    harness_close(c);
    redis_stop(rs);
}

/*
 * Redis stalls (SIGSTOP, shorter than the timeout) under a deep pipeline:
 * more hits wait than a connection may hold (CONN_PEND_MAX), so reading
 * pauses; all are answered, in order, once Redis goes on.  Clients that hang
 * up with hits in flight are closed at once and freed after their callbacks.
 */
static void test_redis_compat_backpressure_and_close(void **state)
{
    static const char rules[] =
        "{ match = { r = \"remote\"; }; label = \"remote\"; credit_limit = 100000;\n"
        "  reset_seconds = 600; store = \"strict\"; },\n"
        "{ match = { r = \"other\"; }; label = \"other\"; credit_limit = 100000;\n"
        "  reset_seconds = 600; store = \"strict\"; },\n"
        "{ default = true; credit_limit = 0; reset_seconds = 0; }";
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c, *gone[8];
    char *conf, *batch, *other, line[HARNESS_LINE], want[64];
    const int n = 4000;
    size_t len = 0;
    long long v;

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "local", "closed", 5000, NULL, rules);
    assert_non_null(conf);
    d = redis_divvyd(conf, 1);
    free(conf);
    batch = harness_scratch((size_t)n * 16);
    assert_non_null(batch);
    for (int i = 0; i < n; i++)
        len += (size_t)sprintf(batch + len, "HIT r=remote\n");
    other = harness_scratch(200 * 12 + 1);
    assert_non_null(other);
    for (int i = 0; i < 200; i++)
        memcpy(other + 12 * i, "HIT r=other\n", 12);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "HIT r=remote", "OK true 99999 600");
    redis_pause(rs, true);
    CHECK(harness_send(c, batch, len));
    /* Hang-ups with hits waiting on the stalled Redis. */
    for (int i = 0; i < 8; i++) {
        CHECK(harness_connect(d, HARNESS_UNIX, &gone[i]));
        CHECK(harness_send(gone[i], other, 200 * 12));
    }
    harness_pause_ms(300);
    for (int i = 0; i < 8; i++)
        harness_close(gone[i]);
    harness_pause_ms(100);
    redis_pause(rs, false);
    for (int i = 0; i < n; i++) {
        CHECK(harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS));
        snprintf(want, sizeof(want), "OK true %d ", 99998 - i);
        if (strncmp(line, want, strlen(want)) != 0)
            fail_msg("reply %d is \"%s\", want \"%s..\"", i, line, want);
    }
    CHECK(harness_get_stat(c, "redis_breaker_trips", &v));
    assert_int_equal(v, 0);
    /* Only this connection (divvyd sees earlier ones' EOF async: poll). */
    for (uint64_t end = harness_now_ms() + 5000;;) {
        CHECK(harness_get_stat(c, "connections", &v));
        if (v == 1 || harness_now_ms() > end)
            break;
        harness_pause_ms(20);
    }
    assert_int_equal(v, 1);
    harness_close(c);
    redis_stop(rs);
}

/* A reload switches the mode of a running daemon; connections follow. */
static void test_redis_compat_reload_to_strict(void **state)
{
    static const char rules[] =
        "{ match = { path = \"/a\"; }; label = \"a\"; credit_limit = 5; reset_seconds = 600; },\n"
        "{ default = true; credit_limit = 0; reset_seconds = 0; }";
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    char *conf, line[HARNESS_LINE];
    long long v;

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "local", "closed", 1000, NULL, rules);
    assert_non_null(conf);
    d = redis_divvyd(conf, 2);
    free(conf);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "HIT path=/a", "OK true 4 600");
    CHECK(harness_get_stat(c, "redis_requests", &v));
    assert_int_equal(v, 0);
    conf = redis_config(rs, "strict", "closed", 1000, NULL, rules);
    assert_non_null(conf);
    CHECK(harness_write_config(d, conf));
    free(conf);
    CHECK(harness_cmd(c, "RELOAD", line, sizeof(line)));
    EXPECT_PREFIX(line, "OK reloaded");
    /* Counts start afresh in Redis (the host's count stays in its table). */
    EXPECT_REPLY(c, "HIT path=/a", "OK true 4 600");
    EXPECT_OK(c, "HIT path=/a", true, 3, 599, 600);
    assert_int_equal(redis_int(rs, "GET %s", "divvy:{a:}"), 2);
    harness_close(c);
    redis_stop(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_redis_compat_readme_strict_as_local, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_compat_mixed_path, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_compat_reply_order, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_compat_backpressure_and_close,
                                        harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_compat_reload_to_strict, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_compat", tests, NULL, NULL);
}
