/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for server/config_fleet.c and the effective store of
 * server/rules_spec.c (docs/config.md "Across hosts", docs/redis.md "Login
 * rules"): a divvy .ini/.json config gets divvy's metric names, and
 * store.mode "strict" only while divvy's REDIS_HOST / REDIS_PORT is set; a
 * native config is not touched by them; a privileged rule never inherits
 * "lease" (it compiles strict, with one note for all such rules) and an
 * explicit store = "lease" on one is an error at its line; a native config
 * that configures Redis with every rule local gets one note; convert
 * writes what the environment made of a divvy config.
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

/* The notes on @cfg (compiled here), as divvyctl check prints them
 * ("FILE:LINE: warning: text"), joined by '\n' into @buf; how many. */
static size_t notes(const struct config *cfg, char *buf, size_t size)
{
    struct rules *rules = NULL;
    struct diag d;
    size_t n, len = 0;

    assert_int_equal(rules_compile(&cfg->rules, 1, &rules, NULL), 0);
    diag_init(&d);
    n = config_fleet_notes(cfg, rules, &d);
    assert_int_equal(n, d.n);
    buf[0] = '\0';
    for (size_t i = 0; i < d.n && len < size; i++) {
        diag_format_as(&d, i, "warning: ", buf + len, size - len);
        len += strlen(buf + len);
        if (len + 1 < size) {
            buf[len++] = '\n';
            buf[len] = '\0';
        }
    }
    rules_free(rules);
    return n;
}

/* The compiled store of rule @idx. */
static enum rules_store compiled_store(const struct config *cfg, uint32_t idx)
{
    struct rules *rules = NULL;
    struct rules_rule r;

    assert_int_equal(rules_compile(&cfg->rules, 1, &rules, NULL), 0);
    assert_int_equal(rules_get(rules, idx, &r), 0);
    rules_free(rules);
    return r.store;
}

static const char ini[] =
    "[path=/a ip=*]\ncreditLimit = 3\nresetSeconds = 3600\nactorField = ip\n\n"
    "[path=/b]\ncreditLimit = 3\nresetSeconds = 3600\nstore = local\n\n"
    "[default]\ncreditLimit = 0\nresetSeconds = 0\n";
static const char json[] =
    "{ \"overrides\": [ { \"operation\": { \"path\": \"/a\" }, \"creditLimit\": 3,\n"
    "  \"resetSeconds\": 3600 } ],\n"
    "  \"default\": { \"creditLimit\": 0, \"resetSeconds\": 0 } }\n";
static const char native[] =
    "rules = ( { match = { path = \"/a\"; }; credit_limit = 3; reset_seconds = 3600; },\n"
    "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n";

static void test_config_fleet_divvy_env(void **state)
{
    struct config *cfg;
    char buf[2048];

    (void)state;
    /* Without divvy's Redis environment: local, but divvy's names. */
    cfg = load_ok("ini", ini);
    assert_int_equal(cfg->rules.default_store, RULES_STORE_LOCAL);
    assert_true(cfg->metrics_divvy_names);
    assert_int_equal(notes(cfg, buf, sizeof(buf)), 0);
    config_free(cfg);

    setenv("REDIS_HOST", "10.0.0.7", 1);
    assert_string_equal(config_fleet_redis_env(), "REDIS_HOST");
    cfg = load_ok("ini", ini);
    assert_int_equal(cfg->rules.default_store, RULES_STORE_STRICT);
    assert_int_equal(compiled_store(cfg, 0), RULES_STORE_STRICT);
    assert_int_equal(compiled_store(cfg, 1), RULES_STORE_LOCAL);   /* its own store stays */
    assert_int_equal(notes(cfg, buf, sizeof(buf)), 0);
    config_free(cfg);
    /* A native config keeps its own store.mode, and is told it is local. */
    cfg = load_ok("conf", native);
    assert_int_equal(cfg->rules.default_store, RULES_STORE_LOCAL);
    assert_false(cfg->metrics_divvy_names);
    assert_int_equal(notes(cfg, buf, sizeof(buf)), 1);
    assert_non_null(strstr(buf, "c.conf: warning: REDIS_HOST is set, but every rule's store "
                                "is \"local\""));
    config_free(cfg);
    unsetenv("REDIS_HOST");

    /* REDIS_PORT alone is divvy's environment too (divvy's host defaults). */
    setenv("REDIS_PORT", "6380", 1);
    cfg = load_ok("json", json);
    assert_int_equal(cfg->rules.default_store, RULES_STORE_STRICT);
    assert_true(cfg->metrics_divvy_names);
    config_free(cfg);
    /* An empty variable is not set, as divvyd's start reads it. */
    setenv("REDIS_PORT", "", 1);
    assert_null(config_fleet_redis_env());
    cfg = load_ok("json", json);
    assert_int_equal(cfg->rules.default_store, RULES_STORE_LOCAL);
    config_free(cfg);
    unsetenv("REDIS_PORT");
}

static void test_config_fleet_privileged_never_leased(void **state)
{
    static const char two[] =
        "store = { mode = \"lease\"; };\n"
        "rules = (\n"
        "  { match = { event = \"authfail\"; user = \"*\"; }; actor = \"user\";\n"
        "    credit_limit = 5; reset_seconds = 900; source = \"privileged\";\n"
        "    match_policy = \"continue\"; },\n"
        "  { match = { event = \"authfail\"; rhost = \"*\"; }; actor = \"rhost\";\n"
        "    credit_limit = 30; reset_seconds = 900; source = \"privileged\"; },\n"
        "  { match = { event = \"authfail\"; }; credit_limit = 1; reset_seconds = 0;\n"
        "    source = \"privileged\"; },\n"
        "  { match = { path = \"/a\"; }; credit_limit = 5; reset_seconds = 60; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    static const char one[] =
        "store = { mode = \"lease\"; };\n"
        "rules = (\n"
        "  { match = { event = \"authfail\"; user = \"*\"; }; actor = \"user\";\n"
        "    credit_limit = 5; reset_seconds = 900; source = \"privileged\"; },\n"
        "  { match = { event = \"authfail\"; }; credit_limit = 5; reset_seconds = 900;\n"
        "    source = \"privileged\"; store = \"strict\"; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    static const char bad[] =
        "rules = (\n"
        "  { match = { event = \"authfail\"; user = \"*\"; }; actor = \"user\";\n"
        "    credit_limit = 5; reset_seconds = 900; source = \"privileged\";\n"
        "    store = \"lease\"; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    struct config *cfg;
    struct diag d;
    char buf[2048];

    (void)state;
    cfg = load_ok("conf", two);
    assert_int_equal(compiled_store(cfg, 0), RULES_STORE_STRICT);
    assert_int_equal(compiled_store(cfg, 1), RULES_STORE_STRICT);
    assert_int_equal(compiled_store(cfg, 3), RULES_STORE_LEASE);    /* not privileged */
    assert_false(rules_spec_unleased(&cfg->rules, &cfg->rules.rules[2]));  /* never counts */
    /* One note for both counting login rules, at the first. */
    assert_int_equal(notes(cfg, buf, sizeof(buf)), 1);
    assert_non_null(strstr(buf, "c.conf:3: warning: store.mode \"lease\" does not apply to "
                                "source = \"privileged\" (login) rules: this one and 1 more "
                                "run \"strict\""));
    config_free(cfg);

    cfg = load_ok("conf", one);
    assert_int_equal(notes(cfg, buf, sizeof(buf)), 1);
    assert_non_null(strstr(buf, "c.conf:3: warning: store.mode \"lease\" does not apply to "
                                "this source = \"privileged\" (login) rule: it runs "
                                "\"strict\""));
    config_free(cfg);

    /* Written on the rule: an error at its line, in every format. */
    cfg = load("conf", bad, &d);
    assert_null(cfg);
    assert_int_equal(d.n, 1);
    diag_format(&d, 0, buf, sizeof(buf));
    assert_non_null(strstr(buf, "c.conf:2: store \"lease\" cannot be used by a source = "
                                "\"privileged\" (login) rule"));
    assert_non_null(strstr(buf, "use store = \"strict\""));
    cfg = load("ini", "[event=authfail user=*]\ncreditLimit = 5\nresetSeconds = 900\n"
               "actorField = user\nsource = privileged\nstore = lease\n\n"
               "[default]\ncreditLimit = 0\nresetSeconds = 0\n", &d);
    assert_null(cfg);
    diag_format(&d, 0, buf, sizeof(buf));
    assert_non_null(strstr(buf, "c.ini:1: store \"lease\" cannot be used"));
}

static void test_config_fleet_native_redis_all_local(void **state)
{
    static const char redis_local[] =
        "store = { on_redis_error = \"closed\"; };\n"
        "\n"
        "redis = {\n"
        "    host = \"10.0.0.7\";\n"
        "};\n"
        "rules = ( { match = { path = \"/a\"; }; credit_limit = 3; reset_seconds = 60; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n";
    static const char redis_one_strict[] =
        "redis = { host = \"10.0.0.7\"; };\n"
        "rules = ( { match = { path = \"/a\"; }; credit_limit = 3; reset_seconds = 60;\n"
        "    store = \"strict\"; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n";
    struct config *cfg;
    char buf[2048];

    (void)state;
    cfg = load_ok("conf", redis_local);
    assert_int_equal(cfg->redis.line, 3);
    assert_int_equal(notes(cfg, buf, sizeof(buf)), 1);
    assert_non_null(strstr(buf, "c.conf:3: warning: redis is configured, but every rule's "
                                "store is \"local\": each host counts alone; set store.mode "
                                "= \"strict\""));
    config_free(cfg);
    cfg = load_ok("conf", redis_one_strict);
    assert_int_equal(notes(cfg, buf, sizeof(buf)), 0);
    config_free(cfg);
    /* No Redis anywhere: nothing to say. */
    cfg = load_ok("conf", native);
    assert_int_equal(cfg->redis.line, 0);
    assert_int_equal(notes(cfg, buf, sizeof(buf)), 0);
    config_free(cfg);
}

/* convert writes what the environment made of a divvy config: strict and
 * divvy's names, so the native file behaves as the divvy one did. */
static void test_config_fleet_convert(void **state)
{
    struct config *cfg, *back;
    struct diag d;
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    (void)state;
    setenv("REDIS_HOST", "10.0.0.7", 1);
    cfg = load_ok("ini", ini);
    unsetenv("REDIS_HOST");
    f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(config_write_libconfig(cfg, f), 0);
    fclose(f);
    assert_non_null(strstr(text, "mode = \"strict\";"));
    assert_non_null(strstr(text, "names = \"divvy\";"));
    back = load("conf", text, &d);
    assert_non_null(back);
    assert_int_equal(back->rules.default_store, RULES_STORE_STRICT);
    assert_true(back->metrics_divvy_names);
    assert_true(back->rules.rules[1].store_set);
    config_free(back);
    config_free(cfg);
    free(text);
}

/* rules_validate_notes() (issue 21 item 10): an actor key the match does not
 * name, with "did you mean" a match key; an actor on a rule that keeps no
 * counter; each at its rule's file:line; the shipped examples say nothing.
 * INI null (quoted or not) is not set, as node-ini and JSON null. */
static void test_config_fleet_actor_notes(void **state)
{
    static const char typo[] =
        "rules = (\n"
        "  { match = { user = \"*\"; }; actor = \"usr\"; credit_limit = 3;\n"
        "    reset_seconds = 60; label = \"typo\"; },\n"
        "  { match = { path = \"/o\"; }; actor = \"ip\"; credit_limit = 3;\n"
        "    reset_seconds = 60; },\n"
        "  { match = { path = \"/deny\"; ip = \"*\"; }; actor = \"ip\"; credit_limit = 0;\n"
        "    reset_seconds = 60; },\n"
        "  { match = { path = \"/free\"; ip = \"*\"; }; actor = \"ip\"; credit_limit = 5;\n"
        "    reset_seconds = 0; },\n"
        "  { match = { path = \"/ok\"; ip = \"*\"; }; actor = \"ip\"; credit_limit = 5;\n"
        "    reset_seconds = 60; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n";
    static const char ini_null[] =
        "[path=/a]\ncreditLimit = 3\nresetSeconds = 60\nlabel = null\ncomment = \"null\"\n\n"
        "[path=/b]\ncreditLimit = 3\nresetSeconds = 60\nlabel = nullish\n\n"
        "[default]\ncreditLimit = 0\nresetSeconds = 0\n";
    static const char *const shipped[] = { "etc/divvy.conf", "etc/divvy.ini", "etc/divvy.json" };
    struct config *cfg;
    char buf[4096];

    (void)state;
    cfg = load_ok("conf", typo);
    assert_int_equal(notes(cfg, buf, sizeof(buf)), 4);
    assert_non_null(strstr(buf, "c.conf:2: warning: actor key 'usr' is not in this rule's match "
                                "(did you mean 'user'?)"));
    assert_non_null(strstr(buf, "c.conf:4: warning: actor key 'ip' is not in this rule's match: "
                                "requests without a 'ip' all share one counter"));
    assert_non_null(strstr(buf, "c.conf:6: warning: actor has no effect: this rule keeps no "
                                "counter (credit_limit 0"));
    assert_non_null(strstr(buf, "c.conf:8: warning: actor has no effect: this rule keeps no "
                                "counter (reset_seconds 0"));
    assert_null(strstr(buf, "c.conf:10:"));
    config_free(cfg);

    cfg = load_ok("ini", ini_null);
    assert_null(cfg->rules.rules[0].label);
    assert_null(cfg->rules.rules[0].comment);
    assert_string_equal(cfg->rules.rules[1].label, "nullish");
    config_free(cfg);

    for (size_t i = 0; i < sizeof(shipped) / sizeof(shipped[0]); i++) {
        char path[1024];
        struct diag d;

        snprintf(path, sizeof(path), "%s/%s", getenv("DIVVY_SRCDIR") ? getenv("DIVVY_SRCDIR")
                                                                     : ".", shipped[i]);
        diag_init(&d);
        assert_int_equal(config_load(path, &cfg, &d), 0);
        assert_int_equal(notes(cfg, buf, sizeof(buf)), 0);
        config_free(cfg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_fleet_divvy_env),
        cmocka_unit_test(test_config_fleet_privileged_never_leased),
        cmocka_unit_test(test_config_fleet_native_redis_all_local),
        cmocka_unit_test(test_config_fleet_convert),
        cmocka_unit_test(test_config_fleet_actor_notes),
    };

    return cmocka_run_group_tests_name("config_fleet", tests, group_setup, group_teardown);
}
