/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the Redis store's settings in server/config_store.c,
 * server/config_divvy.c and common/rules.c (docs/config.md "store",
 * "redis"; docs/redis.md): defaults, every setting and its errors, the
 * per-rule `store` in all three formats, validation of the effective store
 * against the algorithm, the compiled rule's store, and convert's round trip;
 * the Sentinel settings (docs/redis.md "Sentinel") and the cluster seeds
 * (docs/redis.md "Cluster"), their errors and round trips.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"
#include "rules.h"
#include "unit_config.h"

/* Fails unless loading @text is refused with a message containing @want. */
static void expect_error(const char *ext, const char *text, const char *want)
{
    struct diag d;
    struct config *cfg = load(ext, text, &d);
    char msg[1024];

    assert_null(cfg);
    for (size_t i = 0; i < d.n; i++) {
        diag_format(&d, i, msg, sizeof(msg));
        if (strstr(msg, want))
            return;
    }
    diag_format(&d, 0, msg, sizeof(msg));
    fail_msg("want an error with \"%s\"; first is \"%s\"", want, d.n ? msg : "(none)");
}

#define DEFAULT_RULE "{ default = true; credit_limit = 0; reset_seconds = 0; }"

static void test_store_config_defaults(void **state)
{
    struct config *cfg = load_ok("conf", "rules = ( " DEFAULT_RULE " );");

    (void)state;
    assert_int_equal(cfg->rules.default_store, RULES_STORE_LOCAL);
    assert_int_equal(cfg->on_redis_error, CONFIG_REDIS_ERROR_LOCAL);
    assert_string_equal(cfg->store_prefix, "");
    assert_int_equal(cfg->lease_max, CONFIG_DEFAULT_LEASE_MAX);
    assert_int_equal(cfg->adhoc_store, CONFIG_ADHOC_AUTO);
    assert_string_equal(cfg->redis.host, "127.0.0.1");
    assert_int_equal(cfg->redis.port, 6379);
    assert_null(cfg->redis.unix_socket);
    assert_null(cfg->redis.password);
    assert_int_equal(cfg->redis.db, 0);
    assert_int_equal(cfg->redis.timeout_ms, 100);
    config_free(cfg);
}

static void test_store_config_every_setting(void **state)
{
    struct config *cfg = load_ok("conf",
        "store = { mode = \"strict\"; on_redis_error = \"closed\"; prefix = \"prod:\";\n"
        "          lease_max = 77; adhoc = \"local\"; };\n"
        "redis = { host = \"10.0.0.5\"; port = 6380; unix_socket = \"/run/redis/r.sock\";\n"
        "          username = \"divvy\"; password = \"s3cret\"; db = 3; timeout_ms = 250; };\n"
        "rules = (\n"
        "  { match = { a = \"1\"; }; credit_limit = 5; reset_seconds = 60; store = \"lease\"; },\n"
        "  { match = { b = \"1\"; }; credit_limit = 5; reset_seconds = 60; store = \"local\"; },\n"
        "  { match = { c = \"1\"; }; credit_limit = 5; reset_seconds = 60; },\n"
        "  " DEFAULT_RULE " );");
    struct rules *rs = NULL;
    struct rules_rule r;
    struct diag d;

    (void)state;
    assert_int_equal(cfg->rules.default_store, RULES_STORE_STRICT);
    assert_int_equal(cfg->on_redis_error, CONFIG_REDIS_ERROR_CLOSED);
    assert_string_equal(cfg->store_prefix, "prod:");
    assert_int_equal(cfg->lease_max, 77);
    assert_int_equal(cfg->adhoc_store, CONFIG_ADHOC_LOCAL);
    assert_string_equal(cfg->redis.host, "10.0.0.5");
    assert_int_equal(cfg->redis.port, 6380);
    assert_string_equal(cfg->redis.unix_socket, "/run/redis/r.sock");
    assert_string_equal(cfg->redis.username, "divvy");
    assert_string_equal(cfg->redis.password, "s3cret");
    assert_int_equal(cfg->redis.db, 3);
    assert_int_equal(cfg->redis.timeout_ms, 250);
    assert_true(cfg->rules.rules[0].store_set);
    assert_false(cfg->rules.rules[2].store_set);
    /* Compiled: the effective store of each rule. */
    diag_init(&d);
    assert_int_equal(rules_compile(&cfg->rules, 1, &rs, &d), 0);
    assert_true(rules_uses_store(rs));
    assert_int_equal(rules_get(rs, 0, &r), 0);
    assert_int_equal(r.store, RULES_STORE_LEASE);
    assert_int_equal(rules_get(rs, 1, &r), 0);
    assert_int_equal(r.store, RULES_STORE_LOCAL);
    assert_int_equal(rules_get(rs, 2, &r), 0);
    assert_int_equal(r.store, RULES_STORE_STRICT);
    /* ... also when a client maps the published blob. */
    {
        const void *blob;
        size_t len;
        struct rules *copy = NULL;

        rules_blob(rs, &blob, &len);
        assert_int_equal(rules_from_blob(blob, len, &copy), 0);
        assert_int_equal(rules_get(copy, 2, &r), 0);
        assert_int_equal(r.store, RULES_STORE_STRICT);
        rules_free(copy);
    }
    rules_free(rs);
    config_free(cfg);
}

static void test_store_config_errors(void **state)
{
    (void)state;
    expect_error("conf", "store = { mode = \"redis\"; }; rules = ( " DEFAULT_RULE " );",
                 "store.mode must be");
    expect_error("conf", "store = { on_redis_error = \"retry\"; }; rules = ( " DEFAULT_RULE
                 " );", "on_redis_error must be");
    expect_error("conf", "store = { adhoc = \"remote\"; }; rules = ( " DEFAULT_RULE " );",
                 "store.adhoc must be \"auto\", \"local\" or \"redis\"");
    expect_error("conf", "store = { mdoe = \"strict\"; }; rules = ( " DEFAULT_RULE " );",
                 "unknown setting 'store.mdoe'");
    expect_error("conf", "store = { prefix = \"a b\"; }; rules = ( " DEFAULT_RULE " );",
                 "store.prefix");
    expect_error("conf", "store = { lease_max = 0; }; rules = ( " DEFAULT_RULE " );",
                 "lease_max must be between");
    expect_error("conf", "redis = { port = 70000; }; rules = ( " DEFAULT_RULE " );",
                 "port must be between");
    expect_error("conf", "redis = { timeout_ms = 0; }; rules = ( " DEFAULT_RULE " );",
                 "timeout_ms must be between");
    expect_error("conf", "redis = { unix_socket = \"relative.sock\"; }; rules = ( "
                 DEFAULT_RULE " );", "redis.unix_socket must be an absolute path");
    expect_error("conf", "redis = { username = \"u\"; }; rules = ( " DEFAULT_RULE " );",
                 "redis.username needs redis.password");
    expect_error("conf", "redis = { sentinel = \"x\"; }; rules = ( " DEFAULT_RULE " );",
                 "unknown setting 'redis.sentinel'");
    expect_error("conf", "rules = ( { match = { a = \"1\"; }; credit_limit = 1;\n"
                 "reset_seconds = 1; store = \"remote\"; }, " DEFAULT_RULE " );",
                 "store must be \"local\", \"lease\" or \"strict\"");
}

/* Leases are for windows; the store's limits are checked with file:line. */
static void test_store_config_validation(void **state)
{
    struct config *cfg;

    (void)state;
    expect_error("conf", "rules = (\n"
                 "{ match = { a = \"1\"; }; algorithm = \"token_bucket\"; credit_limit = 5;\n"
                 "  refill_seconds = 1; store = \"lease\"; },\n" DEFAULT_RULE " );",
                 "c.conf:2: store \"lease\" needs algorithm window");
    expect_error("conf", "store = { mode = \"lease\"; };\nrules = (\n"
                 "{ match = { a = \"1\"; }; algorithm = \"sliding_window\"; credit_limit = 5;\n"
                 "  reset_seconds = 1; },\n" DEFAULT_RULE " );",
                 "store.mode \"lease\" needs algorithm window");
    expect_error("conf", "rules = (\n{ match = { a = \"1\"; }; credit_limit = 20000000;\n"
                 "  reset_seconds = 1; store = \"lease\"; },\n" DEFAULT_RULE " );",
                 "too large for store \"lease\"");
    expect_error("conf", "rules = (\n{ match = { a = \"1\"; }; algorithm = \"sliding_window\";\n"
                 "  credit_limit = 8000000; reset_seconds = 315360000; store = \"strict\"; },\n"
                 DEFAULT_RULE " );", "too large for a strict sliding_window");
    /* Rules that never count never need Redis: a lease default rule is fine. */
    cfg = load_ok("conf", "store = { mode = \"lease\"; }; rules = (\n"
                  "{ match = { a = \"1\"; }; algorithm = \"token_bucket\"; credit_limit = 5;\n"
                  "  refill_seconds = 1; store = \"strict\"; },\n" DEFAULT_RULE " );");
    config_free(cfg);
}

/* divvy's INI and JSON take a per-rule `store` too (they have no store
 * section: their default mode is local). */
static void test_store_config_ini_json(void **state)
{
    struct config *cfg;

    (void)state;
    cfg = load_ok("ini", "[path=/login]\ncreditLimit = 3\nresetSeconds = 60\nstore = strict\n\n"
                  "[default]\ncreditLimit = 0\nresetSeconds = 0\n");
    assert_int_equal(cfg->format, CONFIG_FORMAT_INI);
    assert_true(cfg->rules.rules[0].store_set);
    assert_int_equal(cfg->rules.rules[0].store, RULES_STORE_STRICT);
    assert_int_equal(cfg->rules.default_store, RULES_STORE_LOCAL);
    config_free(cfg);
    cfg = load_ok("json", "{ \"overrides\": [ { \"operation\": { \"path\": \"/api\" },\n"
                  "\"creditLimit\": 100, \"resetSeconds\": 60, \"store\": \"lease\" } ],\n"
                  "\"default\": { \"creditLimit\": 0, \"resetSeconds\": 0 } }");
    assert_int_equal(cfg->rules.rules[0].store, RULES_STORE_LEASE);
    config_free(cfg);
    expect_error("ini", "[path=/x]\ncreditLimit = 3\nresetSeconds = 60\nstore = nowhere\n\n"
                 "[default]\ncreditLimit = 0\nresetSeconds = 0\n", "store must be");
}

/* Loads @text, writes it with config_write_libconfig() and loads that. */
static struct config *round_trip(const char *text)
{
    struct config *cfg = load_ok("conf", text), *back;
    char path[128], *out;
    size_t len;
    FILE *f;

    snprintf(path, sizeof(path), "%s/c.out", tmpdir);
    f = fopen(path, "w+");
    assert_non_null(f);
    assert_int_equal(config_write_libconfig(cfg, f), 0);
    len = (size_t)ftell(f);
    rewind(f);
    out = calloc(1, len + 1);
    assert_non_null(out);
    assert_int_equal(fread(out, 1, len, f), len);
    fclose(f);
    back = load_ok("conf", out);
    free(out);
    config_free(cfg);
    return back;
}

static void test_store_config_sentinel(void **state)
{
    struct config *cfg;

    (void)state;
    cfg = load_ok("conf",
        "redis = { sentinels = [ \"127.0.0.1:26379\", \"[::1]:26380\",\n"
        "                        \"unix:/run/redis/sentinel.sock\",\n"
        "                        \"sentinel-a.example:5000\" ];\n"
        "          master_name = \"mymaster\"; sentinel_password = \"sp\";\n"
        "          password = \"p\"; db = 1; timeout_ms = 200; };\n"
        "rules = ( " DEFAULT_RULE " );");
    assert_int_equal(cfg->redis.n_sentinels, 4);
    assert_string_equal(cfg->redis.sentinels[0], "127.0.0.1:26379");
    assert_string_equal(cfg->redis.sentinels[1], "[::1]:26380");
    assert_string_equal(cfg->redis.sentinels[2], "unix:/run/redis/sentinel.sock");
    assert_string_equal(cfg->redis.sentinels[3], "sentinel-a.example:5000");
    assert_string_equal(cfg->redis.master_name, "mymaster");
    assert_string_equal(cfg->redis.sentinel_password, "sp");
    assert_string_equal(cfg->redis.password, "p");
    config_free(cfg);
    /* A list ( ... ) is as good as an array [ ... ]; no sentinel password. */
    cfg = load_ok("conf", "redis = { sentinels = ( \"10.0.0.1:26379\" ); master_name = \"m\"; };\n"
                  "rules = ( " DEFAULT_RULE " );");
    assert_int_equal(cfg->redis.n_sentinels, 1);
    assert_null(cfg->redis.sentinel_password);
    config_free(cfg);
    /* Without Sentinel none of it is set. */
    cfg = load_ok("conf", "rules = ( " DEFAULT_RULE " );");
    assert_int_equal(cfg->redis.n_sentinels, 0);
    assert_null(cfg->redis.sentinels);
    assert_null(cfg->redis.master_name);
    config_free(cfg);
}

/* A redis { } whose problem must be reported as @want. */
struct redis_case {
    const char *redis;          /* inside redis = { }, from line 2 on */
    const char *want;
};

static void expect_redis_errors(const struct redis_case *cases, size_t n)
{
    char text[1536];

    for (size_t i = 0; i < n; i++) {
        snprintf(text, sizeof(text), "rules = ( " DEFAULT_RULE " );\nredis = { %s };\n",
                 cases[i].redis);
        expect_error("conf", text, cases[i].want);
    }
}

/* Each problem with its file:line. */
static void test_store_config_sentinel_errors(void **state)
{
    static const struct redis_case cases[] = {
        { "\nmaster_name = \"m\";", "c.conf:3: redis.master_name needs redis.sentinels" },
        { "\nsentinels = [ \"127.0.0.1:26379\" ];",
          "c.conf:3: redis.sentinels needs redis.master_name" },
        { "\nsentinel_password = \"x\";",
          "c.conf:3: redis.sentinel_password needs redis.sentinels" },
        { "sentinels = [ \"127.0.0.1:26379\" ]; master_name = \"m\";\nhost = \"10.0.0.1\";",
          "c.conf:3: redis.host cannot be used with redis.sentinels" },
        { "sentinels = [ \"127.0.0.1:26379\" ]; master_name = \"m\";\nport = 6380;",
          "c.conf:3: redis.port cannot be used with redis.sentinels" },
        { "sentinels = [ \"127.0.0.1:26379\" ]; master_name = \"m\";\n"
          "unix_socket = \"/run/r.sock\";",
          "c.conf:3: redis.unix_socket cannot be used with redis.sentinels" },
        { "master_name = \"m\";\nsentinels = [ \"127.0.0.1\" ];",
          "c.conf:3: redis.sentinels address \"127.0.0.1\" needs HOST:PORT" },
        { "master_name = \"m\";\nsentinels = [ \"127.0.0.1:0\" ];",
          "c.conf:3: redis.sentinels address \"127.0.0.1:0\" needs a port between 1 and 65535" },
        { "master_name = \"m\";\nsentinels = [ \"127.0.0.1:70000\" ];", "needs a port between" },
        { "master_name = \"m\";\nsentinels = [ \"127.0.0.1:26379x\" ];", "needs a port between" },
        { "master_name = \"m\";\nsentinels = [ \"::1:26379\" ];",
          "c.conf:3: redis.sentinels address \"::1:26379\" needs brackets around an IPv6" },
        { "master_name = \"m\";\nsentinels = [ \"[::1:26379\" ];", "needs [ADDRESS]:PORT" },
        { "master_name = \"m\";\nsentinels = [ \"[]:26379\" ];", "has an empty host" },
        { "master_name = \"m\";\nsentinels = [ \":26379\" ];", "has an empty host" },
        { "master_name = \"m\";\nsentinels = [ \"a b:26379\" ];", "has a space" },
        { "master_name = \"m\";\nsentinels = [ \"unix:relative.sock\" ];",
          "needs an absolute path after unix:" },
        { "master_name = \"m\";\nsentinels = [ ];", "c.conf:3: redis.sentinels must name 1 to 16" },
        { "master_name = \"m\";\nsentinels = \"127.0.0.1:26379\";",
          "c.conf:3: redis.sentinels must be a list" },
        { "master_name = \"m\";\nsentinels = [ 26379 ];", "entries must be strings" },
        { "sentinels = [ \"127.0.0.1:26379\" ];\nmaster_name = \"my master\";",
          "c.conf:3: redis.master_name must be 1 to 128 bytes" },
        { "sentinels = [ \"127.0.0.1:26379\" ];\nmaster_name = \"\";",
          "redis.master_name must be" },
        { "sentinels = [ \"127.0.0.1:26379\" ]; master_name = \"m\";\nsentinel_password = \"\";",
          "c.conf:3: redis.sentinel_password must be 1 to 512 bytes" },
    };
    char text[1536], many[1024];
    size_t pos = 0;

    (void)state;
    expect_redis_errors(cases, sizeof(cases) / sizeof(cases[0]));
    /* At most 16 sentinels. */
    for (int i = 0; i < 17; i++)
        pos += (size_t)snprintf(many + pos, sizeof(many) - pos, "%s\"127.0.0.1:%d\"",
                                i ? ", " : "", 26379 + i);
    snprintf(text, sizeof(text), "redis = { master_name = \"m\"; sentinels = [ %s ]; };\n"
             "rules = ( " DEFAULT_RULE " );", many);
    expect_error("conf", text, "redis.sentinels must name 1 to 16 addresses");
}

/* divvyctl convert keeps the Sentinel settings. */
static void test_store_config_sentinel_round_trip(void **state)
{
    struct config *back = round_trip(
        "redis = { sentinels = [ \"127.0.0.1:26379\", \"[::1]:26380\", \"unix:/tmp/s.sock\" ];\n"
        "          master_name = \"my-master\"; sentinel_password = \"s\\\"p\";\n"
        "          timeout_ms = 300; };\n"
        "rules = ( " DEFAULT_RULE " );");

    (void)state;
    assert_int_equal(back->redis.n_sentinels, 3);
    assert_string_equal(back->redis.sentinels[0], "127.0.0.1:26379");
    assert_string_equal(back->redis.sentinels[1], "[::1]:26380");
    assert_string_equal(back->redis.sentinels[2], "unix:/tmp/s.sock");
    assert_string_equal(back->redis.master_name, "my-master");
    assert_string_equal(back->redis.sentinel_password, "s\"p");
    assert_int_equal(back->redis.timeout_ms, 300);
    /* Written without host or port, which would be refused next to sentinels. */
    assert_null(back->redis.unix_socket);
    assert_string_equal(back->redis.host, CONFIG_DEFAULT_REDIS_HOST);
    assert_int_equal(back->redis.port, CONFIG_DEFAULT_REDIS_PORT);
    config_free(back);
}

static void test_store_config_cluster(void **state)
{
    struct config *cfg, *back;

    (void)state;
    cfg = load_ok("conf",
        "store = { mode = \"lease\"; };\n"
        "redis = { cluster_nodes = [ \"127.0.0.1:7000\", \"[::1]:7001\", \"r.example:7002\" ];\n"
        "          password = \"p\"; db = 0; timeout_ms = 200; };\n"
        "rules = ( " DEFAULT_RULE " );");
    assert_int_equal(cfg->redis.n_cluster_nodes, 3);
    assert_string_equal(cfg->redis.cluster_nodes[0], "127.0.0.1:7000");
    assert_string_equal(cfg->redis.cluster_nodes[1], "[::1]:7001");
    assert_string_equal(cfg->redis.cluster_nodes[2], "r.example:7002");
    config_free(cfg);
    cfg = load_ok("conf", "rules = ( " DEFAULT_RULE " );");
    assert_int_equal(cfg->redis.n_cluster_nodes, 0);
    assert_null(cfg->redis.cluster_nodes);
    config_free(cfg);
    /* divvyctl convert keeps them, and writes no host or port beside them. */
    back = round_trip(
        "redis = { cluster_nodes = [ \"127.0.0.1:7000\", \"[::1]:7001\" ]; timeout_ms = 300; };\n"
        "rules = ( " DEFAULT_RULE " );");
    assert_int_equal(back->redis.n_cluster_nodes, 2);
    assert_string_equal(back->redis.cluster_nodes[0], "127.0.0.1:7000");
    assert_string_equal(back->redis.cluster_nodes[1], "[::1]:7001");
    assert_int_equal(back->redis.timeout_ms, 300);
    assert_string_equal(back->redis.host, CONFIG_DEFAULT_REDIS_HOST);
    config_free(back);
}

/* Each problem with its file:line. */
static void test_store_config_cluster_errors(void **state)
{
    static const struct redis_case cases[] = {
        { "\ncluster_nodes = [ ];", "c.conf:3: redis.cluster_nodes must name 1 to 16" },
        { "\ncluster_nodes = \"127.0.0.1:7000\";", "c.conf:3: redis.cluster_nodes must be a list" },
        { "\ncluster_nodes = [ \"127.0.0.1\" ];",
          "c.conf:3: redis.cluster_nodes address \"127.0.0.1\" needs HOST:PORT" },
        { "\ncluster_nodes = [ \"127.0.0.1:0\" ];", "needs a port between 1 and 65535" },
        { "\ncluster_nodes = [ \"::1:7000\" ];", "needs brackets around an IPv6" },
        { "\ncluster_nodes = [ \"unix:/run/r.sock\" ];",
          "c.conf:3: redis.cluster_nodes address \"unix:/run/r.sock\" must be HOST:PORT" },
        { "cluster_nodes = [ \"127.0.0.1:7000\" ];\nhost = \"10.0.0.1\";",
          "c.conf:3: redis.host cannot be used with redis.cluster_nodes" },
        { "cluster_nodes = [ \"127.0.0.1:7000\" ];\nport = 7000;",
          "c.conf:3: redis.port cannot be used with redis.cluster_nodes" },
        { "cluster_nodes = [ \"127.0.0.1:7000\" ];\nunix_socket = \"/run/r.sock\";",
          "c.conf:3: redis.unix_socket cannot be used with redis.cluster_nodes" },
        { "cluster_nodes = [ \"127.0.0.1:7000\" ]; master_name = \"m\";\n"
          "sentinels = [ \"127.0.0.1:26379\" ];",
          "c.conf:3: redis.sentinels cannot be used with redis.cluster_nodes" },
        { "cluster_nodes = [ \"127.0.0.1:7000\" ];\ndb = 2;",
          "c.conf:3: redis.db must be 0 with redis.cluster_nodes" },
    };
    (void)state;
    expect_redis_errors(cases, sizeof(cases) / sizeof(cases[0]));
}

/* divvyctl convert writes the store and redis settings and reads them back. */
static void test_store_config_round_trip(void **state)
{
    struct config *cfg = load_ok("conf",
        "store = { mode = \"lease\"; on_redis_error = \"open\"; prefix = \"x\\\"y\"; "
        "lease_max = 9; adhoc = \"redis\"; };\n"
        "redis = { unix_socket = \"/tmp/r.sock\"; password = \"p\"; db = 2; timeout_ms = 50; };\n"
        "rules = ( { match = { a = \"1\"; }; credit_limit = 5; reset_seconds = 60;\n"
        "            store = \"strict\"; }, " DEFAULT_RULE " );");
    struct config *back;
    char path[128], *text;
    size_t len;
    FILE *f;

    (void)state;
    snprintf(path, sizeof(path), "%s/c.out", tmpdir);
    f = fopen(path, "w+");
    assert_non_null(f);
    assert_int_equal(config_write_libconfig(cfg, f), 0);
    len = (size_t)ftell(f);
    rewind(f);
    text = calloc(1, len + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, len, f), len);
    fclose(f);
    back = load_ok("conf", text);
    free(text);
    assert_int_equal(back->rules.default_store, RULES_STORE_LEASE);
    assert_int_equal(back->on_redis_error, CONFIG_REDIS_ERROR_OPEN);
    assert_string_equal(back->store_prefix, "x\"y");
    assert_int_equal(back->lease_max, 9);
    assert_int_equal(back->adhoc_store, CONFIG_ADHOC_REDIS);
    assert_string_equal(back->redis.unix_socket, "/tmp/r.sock");
    assert_string_equal(back->redis.password, "p");
    assert_int_equal(back->redis.db, 2);
    assert_int_equal(back->redis.timeout_ms, 50);
    assert_true(back->rules.rules[0].store_set);
    assert_int_equal(back->rules.rules[0].store, RULES_STORE_STRICT);
    config_free(back);
    config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_config_defaults),
        cmocka_unit_test(test_store_config_every_setting),
        cmocka_unit_test(test_store_config_errors),
        cmocka_unit_test(test_store_config_validation),
        cmocka_unit_test(test_store_config_ini_json),
        cmocka_unit_test(test_store_config_round_trip),
        cmocka_unit_test(test_store_config_sentinel),
        cmocka_unit_test(test_store_config_sentinel_errors),
        cmocka_unit_test(test_store_config_sentinel_round_trip),
        cmocka_unit_test(test_store_config_cluster),
        cmocka_unit_test(test_store_config_cluster_errors),
    };

    return cmocka_run_group_tests_name("store_config", tests, group_setup, group_teardown);
}
