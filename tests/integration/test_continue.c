/* SPDX-License-Identifier: MIT */
/*
 * Integration (real divvyd, real libdivvy, real redis-server): a continue
 * chain replies the tightest limit.  A per-user token bucket with 7 credits
 * left before a per-IP rule with 47 left replies credit 7 and the bucket's
 * reset (as Envoy's rate-limit service reports its overall status), not the
 * looser per-IP 47, and TAKE and PEEK name the rule whose credit they show
 * (the bucket, not the per-IP stop rule that decided: issue 21).  The
 * same on every path that walks the rules (common/eval.h eval_walk()):
 * divvyd's local path over the socket, libdivvy's fast path in-process
 * (divvy_hit() through the shared table), and divvyd's Redis path with a
 * strict token bucket or a lease rule in the chain, also when a reload comes
 * in while a hit waits for Redis.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "divvy.h"
#include "harness_redis.h"

/* Per user: 8 credits, one back a minute; per IP: 48 an hour. */
#define RULES_TEXT(user_extra, ip_extra)                                                  \
    "{ match = { user = \"*\"; ip = \"*\"; }; label = \"user\"; actor = \"user\";\n"     \
    "  algorithm = \"token_bucket\"; credit_limit = 8; refill_seconds = 60;\n"          \
    "  match_policy = \"continue\"; " user_extra " },\n"                                 \
    "{ match = { ip = \"*\"; }; label = \"ip\"; actor = \"ip\"; credit_limit = 48;\n"    \
    "  reset_seconds = 3600; " ip_extra " },\n"                                          \
    "{ default = true; credit_limit = 0; reset_seconds = 0; }"

/* The user bucket decides once it is empty; the ip rule keeps what it had. */
static void expect_chain(struct harness_conn *c, const char *user)
{
    char req[128];

    snprintf(req, sizeof(req), "HIT user=%s ip=10.0.0.1", user);
    EXPECT_OK(c, req, true, 7, 59, 60);
    snprintf(req, sizeof(req), "TAKE 1 user=%s ip=10.0.0.1", user);
    EXPECT_OK_RULE(c, req, true, 6, 59, 60, "user");
    snprintf(req, sizeof(req), "PEEK user=%s ip=10.0.0.1", user);
    EXPECT_OK_RULE(c, req, true, 6, 59, 60, "user");
    snprintf(req, sizeof(req), "TAKE 6 user=%s ip=10.0.0.1", user);
    EXPECT_OK_RULE(c, req, true, 0, 59, 360, "user");
    snprintf(req, sizeof(req), "HIT user=%s ip=10.0.0.1", user);
    EXPECT_OK(c, req, false, 0, 59, 60);
}

static void test_continue_tightest_socket(void **state)
{
    static const char conf[] = "rules = (\n" RULES_TEXT("", "") "\n);\n";
    struct harness_opts o = { .config_name = "continue.conf", .config_text = conf };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;

    (void)state;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_chain(c, "alice");
    /* Another user behind the same IP: its own bucket is the tighter. */
    EXPECT_OK(c, "HIT user=bob ip=10.0.0.1", true, 7, 59, 60);
    /* The ip rule charged 1 + 1 + 6 for alice and 1 for bob: 39 left. */
    EXPECT_OK_RULE(c, "PEEK ip=10.0.0.1", true, 39, 3599, 3600, "ip");
    harness_close(c);
}

static void test_continue_tightest_fast_path(void **state)
{
    static const char conf[] =
        "rules = (\n" RULES_TEXT("fast_path = true;", "fast_path = true;") "\n);\n";
    struct harness_opts o = { .config_name = "continue.conf", .config_text = conf };
    struct divvy_kv kv[2] = { { "user", "carol" }, { "ip", "10.0.0.2" } };
    struct divvy_result res = { .size = sizeof(res) };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    struct divvy *h = NULL;

    (void)state;
    CHECK(harness_start(&o, &d));
    CHECK(harness_divvy_env(d));
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    harness_wait_fast(h, (struct divvy_kv[]){ { "path", "/elsewhere" } }, 1);
    divvy_close(h);
    h = NULL;
    /* Only in-process decisions count here. */
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    for (int i = 0; i < 8; i++) {
        int r = divvy_hit(h, kv, 2, &res);

        if (r < 0)
            fail_msg("divvy_hit: %s", divvy_errmsg(h));
        assert_int_equal(res.fast_path, 1);
        assert_true(res.allowed);
        if (res.credit != (uint64_t)(7 - i) || res.reset_seconds < 59 ||
            res.reset_seconds > 60 * (uint64_t)(i + 1) || strcmp(res.rule, "user") != 0)
            fail_msg("hit %d: %s %llu %llu rule %s, want true %d 59..%d rule user", i,
                     res.allowed ? "true" : "false", (unsigned long long)res.credit,
                     (unsigned long long)res.reset_seconds, res.rule, 7 - i, 60 * (i + 1));
    }
    CHECK(divvy_hit(h, kv, 2, &res));
    assert_int_equal(res.fast_path, 1);
    assert_false(res.allowed);
    assert_string_equal(res.rule, "user");
    divvy_close(h);
    /* divvyd's socket path agrees on the same counters. */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK_RULE(c, "PEEK ip=10.0.0.2", true, 40, 3599, 3600, "ip");
    EXPECT_OK(c, "HIT user=dave ip=10.0.0.2", true, 7, 59, 60);
    harness_close(c);
}

/* divvyd (one worker) on @rs's Redis with @rules, and a connection to it. */
static struct harness_daemon *redis_daemon(const struct redis_srv *rs, unsigned timeout_ms,
                                           const char *extra_store, const char *rules,
                                           struct harness_conn **ret_c)
{
    struct harness_daemon *d;
    char *conf = redis_config(rs, "local", "closed", timeout_ms, extra_store, rules);

    assert_non_null(conf);
    d = redis_divvyd(conf, 1);
    free(conf);
    CHECK(harness_connect(d, HARNESS_UNIX, ret_c));
    return d;
}

/* A strict (Redis) token bucket in the chain, then a lease rule. */
static void test_continue_tightest_redis(void **state)
{
    static const char strict_rules[] = RULES_TEXT("store = \"strict\";", "");
    static const char lease_rules[] =
        "{ match = { user = \"*\"; ip = \"*\"; }; label = \"user\"; actor = \"user\";\n"
        "  credit_limit = 8; reset_seconds = 600; match_policy = \"continue\";\n"
        "  store = \"lease\"; },\n"
        "{ match = { ip = \"*\"; }; label = \"ip\"; actor = \"ip\"; credit_limit = 48;\n"
        "  reset_seconds = 3600; },\n"
        "{ default = true; credit_limit = 0; reset_seconds = 0; }";
    struct redis_srv *rs = NULL;
    struct harness_daemon *d;
    struct harness_conn *c;
    int allowed_n;

    (void)state;
    CHECK(redis_start(&rs));
    d = redis_daemon(rs, 1000, NULL, strict_rules, &c);
    expect_chain(c, "erin");
    EXPECT_OK_RULE(c, "PEEK ip=10.0.0.1", true, 40, 3599, 3600, "ip");
    harness_close(c);
    harness_free(d);

    redis_daemon(rs, 1000, "lease_max = 40;", lease_rules, &c);
    /* The lease rule (its pool of 8 in Redis) is the tighter limit: its
     * credit (this host's lease plus the pool's remainder as last seen)
     * and its window, never the ip rule's 40-odd credits and hour.  A
     * lease may strand a credit or two in flight (docs/redis.md), so the
     * pool denies after at most 8. */
    EXPECT_OK(c, "HIT user=frank ip=10.0.0.3", true, 7, 599, 600);
    for (allowed_n = 1; allowed_n <= 8; allowed_n++) {
        char line[HARNESS_LINE], rule[64];
        long long credit, secs;
        bool allowed;

        CHECK(harness_cmd(c, "TAKE 1 user=frank ip=10.0.0.3", line, sizeof(line)));
        CHECK(harness_parse_ok_rule(line, &allowed, &credit, &secs, rule, sizeof(rule)));
        if (!allowed && credit == 0 && secs >= 598 && secs <= 600 && strcmp(rule, "user") == 0)
            break;
        if (!allowed || credit > 7 - allowed_n || secs < 598 || secs > 600 ||
            strcmp(rule, "user") != 0)
            fail_msg("TAKE %d: \"%s\", want OK true <= %d 598..600 user", allowed_n, line,
                     7 - allowed_n);
    }
    assert_true(allowed_n <= 8);
    EXPECT_OK_RULE(c, "PEEK ip=10.0.0.3", true, 48 - allowed_n, 3599, 3600, "ip");
    harness_close(c);
    redis_stop(rs);
}

/*
 * A reload while a hit waits for Redis at the strict rule: the rest of its
 * path is matched again under the new rules, less the rules already
 * applied (by id): the bucket is charged once, the ip rule once, and the
 * reply is still the tightest.
 */
static void test_continue_redis_reload_while_waiting(void **state)
{
    static const char rules[] = RULES_TEXT("store = \"strict\";", "");
    static const char more_rules[] =
        "{ match = { other = \"x\"; }; label = \"other\"; credit_limit = 1;\n"
        "  reset_seconds = 60; },\n" RULES_TEXT("store = \"strict\";", "");
    struct redis_srv *rs = NULL;
    struct harness_daemon *d;
    struct harness_conn *c, *admin;
    char *conf, line[HARNESS_LINE];
    long long sent, now;
    bool allowed;
    long long credit, secs;
    uint64_t deadline;

    (void)state;
    CHECK(redis_start(&rs));
    d = redis_daemon(rs, 10000, NULL, rules, &c);
    CHECK(harness_connect(d, HARNESS_UNIX, &admin));
    EXPECT_OK(c, "HIT user=gina ip=10.0.0.9", true, 7, 59, 60);
    CHECK(harness_get_stat(admin, "redis_requests", &sent));

    /* The next hit waits for a stopped Redis at the strict rule. */
    redis_pause(rs, true);
    CHECK(harness_sendf(c, "HIT user=gina ip=10.0.0.9\n"));
    deadline = harness_now_ms() + 5000;
    do {
        CHECK(harness_get_stat(admin, "redis_requests", &now));
        if (now > sent)
            break;
        harness_pause_ms(10);
    } while (harness_now_ms() < deadline);
    if (now <= sent) {
        redis_pause(rs, false);
        fail_msg("the hit never reached Redis");
    }
    conf = redis_config(rs, "local", "closed", 10000, NULL, more_rules);
    assert_non_null(conf);
    CHECK(harness_write_config(d, conf));
    free(conf);
    CHECK(harness_cmd(admin, "RELOAD", line, sizeof(line)));
    redis_pause(rs, false);
    if (strncmp(line, "OK reloaded", 11) != 0)
        fail_msg("RELOAD: %s", line);

    CHECK(harness_recv_line(c, line, sizeof(line), 10000));
    CHECK(harness_parse_ok(line, &allowed, &credit, &secs));
    if (!allowed || credit != 6 || secs < 59 || secs > 120)
        fail_msg("the waiting hit: \"%s\", want OK true 6 59..120", line);
    /* Each rule charged once: 5 left in the bucket, 46 for the ip. */
    EXPECT_OK_RULE(c, "TAKE 1 user=gina ip=10.0.0.9", true, 5, 59, 180, "user");
    EXPECT_OK_RULE(c, "PEEK ip=10.0.0.9", true, 45, 3599, 3600, "ip");
    harness_close(admin);
    harness_close(c);
    redis_stop(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_continue_tightest_socket, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_continue_tightest_fast_path, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_continue_tightest_redis, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_continue_redis_reload_while_waiting, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("continue", tests, NULL, NULL);
}
