/* SPDX-License-Identifier: MIT */
/*
 * Integration: a divvy fleet switched to divvyd unchanged (docs/config.md
 * "Across hosts").  Two divvyds on Button's own example config (one reads
 * example-config.ini, the other example-config.json), with divvy's
 * REDIS_HOST / REDIS_PORT pointing at one real redis-server on 127.0.0.1,
 * must together allow exactly the limit for one IP (3 cookies per hour), as
 * divvy does with every counter in Redis, not 3 each.  A scrape of divvyd
 * on a divvy config (divvy's HTTP_SERVICE_PORT) carries divvy's metric
 * names (divvy_tcp_connections_total, rule_label=""), so Button's
 * dashboards keep working.  A native config that
 * configures Redis but leaves every rule local says so in exactly one
 * warning line at start, naming the setting that shares the counters; a
 * config that does share, or configures no Redis, says nothing.
 */
#include <stdio.h>
#include <stdlib.h>

#include "harness_redis.h"

#define BIG 262144

/* Button's examples/example-config.ini, as divvy's README shows it. */
static const char example_ini[] =
    "[method=GET path=/status]\n"
    "creditLimit = 1000\n"
    "resetSeconds = 60\n"
    "comment = '1000 requests per minute for GET /status, globally'\n"
    "\n"
    "[method=GET path=/pantry/cookies/special-cookie]\n"
    "creditLimit = 1\n"
    "resetSeconds = 86400\n"
    "comment = 'canary: 1 request per day for GET /pantry/cookies/special-cookie'\n"
    "matchPolicy = canary\n"
    "\n"
    "[method=GET path=/pantry/cookies/* ip=*]\n"
    "creditLimit = 3\n"
    "resetSeconds = 3600\n"
    "actorField = ip\n"
    "comment = '3 requests per hour for GET /pantry/cookies, by IP'\n"
    "\n"
    "[method=GET path=/pantry/* ip=*]\n"
    "creditLimit = 1\n"
    "resetSeconds = 3600\n"
    "actorField = ip\n"
    "comment = '1 request per day for GET /pantry/*, by IP'\n"
    "\n"
    "[method=GET path=/crisper/carrots ip=* foo=3]\n"
    "creditLimit = 10\n"
    "resetSeconds = 60\n"
    "actorField = ip\n"
    "comment = '10 requests per minute for GET /crisper/carrots, by IP'\n"
    "\n"
    "[default]\n"
    "creditLimit = 0\n"
    "resetSeconds = 0\n"
    "comment = 'Default deny!'\n";

#define WARNING "every rule's store is \"local\""

/* How often @needle occurs in @d's log. */
static int log_count(const struct harness_daemon *d, const char *needle)
{
    char *text = harness_scratch(BIG);
    size_t len;
    FILE *f;
    int n = 0;

    assert_non_null(text);
    f = fopen(d->log, "r");
    assert_non_null(f);
    len = fread(text, 1, BIG - 1, f);
    fclose(f);
    text[len] = '\0';
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Starts divvyd with divvy's REDIS_HOST/REDIS_PORT naming @rs's TCP port
 * (and HTTP_SERVICE_PORT when @http_port is not 0). */
static struct harness_daemon *start_with_env(const struct harness_opts *o,
                                             const struct redis_srv *rs, int http_port)
{
    struct harness_daemon *d = NULL;
    char port[16], http[16];
    int r;

    snprintf(port, sizeof(port), "%d", rs->port);
    snprintf(http, sizeof(http), "%d", http_port);
    setenv("REDIS_HOST", "127.0.0.1", 1);
    setenv("REDIS_PORT", port, 1);
    if (http_port)
        setenv("HTTP_SERVICE_PORT", http, 1);
    r = harness_start(o, &d);
    unsetenv("REDIS_HOST");
    unsetenv("REDIS_PORT");
    unsetenv("HTTP_SERVICE_PORT");
    CHECK(r);
    return d;
}

static void test_divvy_env_fleet_shares_the_limit(void **state)
{
    /* The shipped INI and the JSON fixture: the same rules with the same
     * labels (a label is part of a rule's id, so of its Redis key). */
    struct harness_opts oi = { .config_name = "example-config.ini", .workers = 2 };
    struct harness_opts oj = { .config_name = "example-config.json", .workers = 2 };
    char ini[512];
    struct harness_daemon *d[2];
    struct harness_conn *c[2];
    struct redis_srv *rs = NULL;
    char src[512], reply[HARNESS_LINE];
    int allowed = 0;

    (void)state;
    CHECK(harness_src_path("etc/divvy.ini", ini, sizeof(ini)));
    oi.config_src = ini;
    CHECK(harness_src_path("tests/fixtures/divvy-example-as-ini.json", src, sizeof(src)));
    oj.config_src = src;
    CHECK(redis_start_ex(&(struct redis_start_opts){ .tcp = true }, &rs));
    d[0] = start_with_env(&oi, rs, 0);
    d[1] = start_with_env(&oj, rs, 0);

    /* One IP fetching cookies from both hosts in turn: divvy allows 3. */
    for (int i = 0; i < 2; i++)
        CHECK(harness_connect(d[i], HARNESS_TCP, &c[i]));
    for (int i = 0; i < 8; i++) {
        bool ok;
        long long credit, secs;

        CHECK(harness_cmd(c[i % 2], "HIT method=GET path=/pantry/cookies/oatmeal "
                          "ip=192.168.1.1", reply, sizeof(reply)));
        CHECK(harness_parse_ok(reply, &ok, &credit, &secs));
        allowed += ok;
    }
    if (allowed != 3)
        fail_msg("two divvyds on the example config with REDIS_HOST set allowed %d cookies for "
                 "one IP; divvy allows 3 (every counter in Redis)", allowed);
    /* The counter is Redis's: one key for the IP, none per host. */
    assert_true(redis_int(rs, "DBSIZE") >= 1);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(log_count(d[i], WARNING), 0);
        assert_int_equal(harness_log_contains(d[i], "redis: 127.0.0.1:"), 1);
    }

    harness_close(c[0]);
    harness_close(c[1]);
}

/* Button's dashboards: divvy's connection gauge, and rule_label="" for the
 * unlabelled rules of a divvy config (with or without Redis). */
static void test_divvy_env_metric_names(void **state)
{
    struct harness_opts o = { .config_name = "example-config.ini", .config_text = example_ini };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;
    char port[16], reply[HARNESS_LINE], *body = harness_scratch(BIG);
    int http = harness_free_port(SOCK_STREAM), r;

    (void)state;
    assert_non_null(body);
    snprintf(port, sizeof(port), "%d", http);
    setenv("HTTP_SERVICE_PORT", port, 1);
    r = harness_start(&o, &d);
    unsetenv("HTTP_SERVICE_PORT");
    CHECK(r);
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    for (int i = 0; i < 4; i++)
        CHECK(harness_cmd(c, "HIT method=GET path=/pantry/cookies/oatmeal ip=192.168.1.1",
                          reply, sizeof(reply)));
    harness_scrape_until(http, "/metrics", "divvy_tcp_connections_total 1", body, BIG);
    if (!strstr(body, "\ndivvy_hits_total{status=\"accepted\",rule_label=\"\"} 3\n") ||
        !strstr(body, "\ndivvy_hits_total{status=\"rejected\",rule_label=\"\"} 1\n"))
        fail_msg("no divvy_hits_total{rule_label=\"\"} series for the 4 hits in:\n%s", body);
    assert_null(strstr(body, "divvy_open_connections"));
    harness_close(c);
}

static const char local_rules[] =
    "rules = (\n"
    "  { match = { path = \"/a\"; }; credit_limit = 2; reset_seconds = 60; },\n"
    "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

/* Starts divvyd on @text (@name: the config's file name, NULL: divvy.conf). */
static struct harness_daemon *start_conf(const char *name, const char *text)
{
    struct harness_opts o = { .config_name = name, .config_text = text };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    return d;
}

static void test_divvy_env_native_local_warns_once(void **state)
{
    struct redis_srv *rs = NULL;
    struct harness_daemon *d;
    struct harness_opts o = { .config_text = local_rules };
    char *text = harness_scratch(4096);

    (void)state;
    assert_non_null(text);
    CHECK(redis_start_ex(&(struct redis_start_opts){ .tcp = true }, &rs));

    /* redis { } configured, every rule local: one line, at the group. */
    snprintf(text, 4096, "redis = {\n  unix_socket = \"%s\";\n};\n%s", rs->sock, local_rules);
    d = start_conf(NULL, text);
    assert_int_equal(log_count(d, WARNING), 1);
    assert_int_equal(harness_log_contains(d, "divvy.conf:1: redis is configured, but every "
                                             "rule's store is \"local\""), 1);
    assert_int_equal(harness_log_contains(d, "set store.mode = \"strict\""), 1);
    harness_free(d);

    /* The same with divvy's REDIS_HOST instead of redis { }. */
    d = start_with_env(&o, rs, 0);
    assert_int_equal(log_count(d, WARNING), 1);
    assert_int_equal(harness_log_contains(d, "REDIS_HOST is set, but every rule's store is "
                                             "\"local\""), 1);
    harness_free(d);

    /* Shared counters: nothing to say. */
    snprintf(text, 4096, "store = { mode = \"strict\"; };\nredis = { unix_socket = \"%s\"; };\n%s",
             rs->sock, local_rules);
    d = start_conf(NULL, text);
    assert_int_equal(log_count(d, WARNING), 0);
    harness_free(d);

    /* No Redis configured at all, natively or in a divvy config: nothing. */
    d = start_conf(NULL, local_rules);
    assert_int_equal(log_count(d, WARNING), 0);
    harness_free(d);
    d = start_conf("example-config.ini", example_ini);
    assert_int_equal(log_count(d, WARNING), 0);
    assert_int_equal(harness_log_contains(d, "redis: "), 0);
    harness_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_divvy_env_fleet_shares_the_limit, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_divvy_env_metric_names, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_divvy_env_native_local_warns_once, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_divvy_env", tests, NULL, NULL);
}
