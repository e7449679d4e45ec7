/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the algorithm settings a native config gives (docs/rules.md
 * "Algorithms"): reset_ms / refill_ms, refill = "continuous", algorithm =
 * "gcra", what validation refuses (with file:line), what divvy's INI keeps
 * out, the compiled rule the fast path reads (the bursty example through
 * the blob with injected times) and what `divvyctl convert` writes back.
 */
#include <string.h>

#include "unit_config.h"

#include "algo.h"
#include "diag.h"
#include "eval.h"
#include "rules.h"

#define RULE(body) "rules = ( { " body " }, { default = true; credit_limit = 0; " \
                   "reset_seconds = 0; } );\n"

/* The first problem of a config that must not load, as "file:line: text". */
static void refused(const char *ext, const char *text, const char *want, unsigned line)
{
    struct diag d;
    struct config *cfg = load(ext, text, &d);
    char msg[1024], at[32];

    if (cfg)
        config_free(cfg);
    assert_null(cfg);
    assert_true(d.n >= 1);
    diag_format(&d, 0, msg, sizeof(msg));
    if (!strstr(msg, want))
        print_error("got: %s\n", msg);
    assert_non_null(strstr(msg, want));
    snprintf(at, sizeof(at), ":%u:", line);
    if (!strstr(msg, at))
        print_error("got: %s (want line %u)\n", msg, line);
    assert_non_null(strstr(msg, at));
}

static struct rules *compiled(struct config *cfg)
{
    struct rules *rules = NULL;
    struct diag d;

    diag_init(&d);
    assert_int_equal(rules_compile(&cfg->rules, 1, &rules, &d), 0);
    return rules;
}

static void test_config_algo_bursty_rule(void **state)
{
    struct config *cfg = load_ok("conf", RULE("label = \"api\"; match = { path = \"/api\" }; "
                                              "credit_limit = 10; "
                                              "algorithm = \"token_bucket\"; refill = "
                                              "\"continuous\"; refill_amount = 5; "
                                              "refill_ms = 1000;"));
    struct rules *rules = compiled(cfg);
    struct table_limits lim;
    struct rules_rule r;
    struct algo_state st = { 0 };
    struct table_result res;

    (void)state;
    /* Through the blob, as libdivvy's fast path reads it. */
    {
        const void *blob;
        size_t len;
        struct rules *copy;

        rules_blob(rules, &blob, &len);
        assert_int_equal(rules_from_blob(blob, len, &copy), 0);
        rules_free(rules);
        rules = copy;
    }
    assert_int_equal(rules_get(rules, 0, &r), 0);
    assert_true(r.continuous);
    assert_int_equal(r.refill_ms, 1000);
    assert_int_equal(r.refill_seconds, 1);
    eval_limits(&r, &lim);
    assert_true(lim.continuous);
    assert_int_equal(algo_check(&lim), 0);
    for (int i = 0; i < 10; i++)
        algo_apply(&lim, TABLE_TAKE, 1, 500, &st, &st, &res);
    algo_apply(&lim, TABLE_TAKE, 1, 700, &st, &st, &res);
    assert_true(res.allowed);
    algo_apply(&lim, TABLE_TAKE, 1, 700, &st, &st, &res);
    assert_false(res.allowed);
    algo_apply(&lim, TABLE_PEEK, 1, 1900, &st, &st, &res);
    assert_int_equal(res.credit, 6);
    rules_free(rules);
    config_free(cfg);
}

static void test_config_algo_ms_window_and_gcra(void **state)
{
    struct config *cfg = load_ok("conf",
        "rules = ( { match = { a = \"1\" }; credit_limit = 3; reset_ms = 1500; },\n"
        "  { match = { a = \"2\" }; credit_limit = 16; algorithm = \"gcra\";\n"
        "    refill_amount = 30; refill_seconds = 60; },\n"
        "  { match = { a = \"3\" }; credit_limit = 2; algorithm = \"token_bucket\";\n"
        "    refill_ms = 250; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n");
    struct rules *rules = compiled(cfg);
    struct rules_rule r;
    char out[128];
    FILE *f;
    char text[4096];
    size_t n;

    (void)state;
    assert_int_equal(rules_get(rules, 0, &r), 0);
    assert_int_equal(r.reset_ms, 1500);
    assert_int_equal(r.reset_seconds, 2);               /* rounded up for what speaks seconds */
    assert_int_equal(rules_get(rules, 1, &r), 0);
    assert_int_equal(r.algo, RULES_ALGO_GCRA);
    assert_int_equal(r.refill_ms, 60000);
    assert_int_equal(r.refill_amount, 30);
    assert_false(r.continuous);
    assert_int_equal(rules_get(rules, 2, &r), 0);
    assert_int_equal(r.refill_ms, 250);
    assert_int_equal(r.reset_ms, 250);
    assert_false(r.continuous);
    /* divvyctl convert writes them back as given. */
    snprintf(out, sizeof(out), "%s/c.out", tmpdir);
    f = fopen(out, "w+");
    assert_non_null(f);
    assert_int_equal(config_write_libconfig(cfg, f), 0);
    rewind(f);
    n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_non_null(strstr(text, "reset_ms = 1500;"));
    assert_non_null(strstr(text, "algorithm = \"gcra\";"));
    assert_non_null(strstr(text, "refill_ms = 250;"));
    rules_free(rules);
    config_free(cfg);
}

/* A continuous bucket is another algorithm: its own counters (id). */
static void test_config_algo_identity(void **state)
{
    struct config *a = load_ok("conf", RULE("match = { k = \"v\" }; credit_limit = 5; "
                                            "algorithm = \"token_bucket\"; refill_seconds = 1;"));
    struct config *b = load_ok("conf", RULE("match = { k = \"v\" }; credit_limit = 5; "
                                            "algorithm = \"token_bucket\"; refill_ms = 1000; "
                                            "refill = \"continuous\";"));
    struct config *c = load_ok("conf", RULE("match = { k = \"v\" }; credit_limit = 5; "
                                            "algorithm = \"token_bucket\"; refill_ms = 1000; "
                                            "refill = \"steps\";"));
    struct rules *ra = compiled(a), *rb = compiled(b), *rc = compiled(c);
    struct rules_rule x, y, z;

    (void)state;
    assert_int_equal(rules_get(ra, 0, &x), 0);
    assert_int_equal(rules_get(rb, 0, &y), 0);
    assert_int_equal(rules_get(rc, 0, &z), 0);
    assert_true(x.id != y.id);
    assert_true(x.id == z.id);          /* the same bucket, written in ms */
    rules_free(ra);
    rules_free(rb);
    rules_free(rc);
    config_free(a);
    config_free(b);
    config_free(c);
}

static void test_config_algo_refusals(void **state)
{
    (void)state;
    refused("conf", "rules = ( { credit_limit = 1;\n reset_seconds = 1;\n reset_ms = 5; },\n"
            "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
            "reset_ms and reset_seconds are both set", 3);
    refused("conf", "rules = ( { credit_limit = 1; algorithm = \"token_bucket\";\n"
            " refill_ms = 5;\n refill_seconds = 1; },\n"
            "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
            "refill_seconds and refill_ms are both set", 3);
    refused("conf", "rules = ( { credit_limit = 1; reset_ms = 5; refill = \"continuous\"; },\n"
            "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
            "refill needs algorithm token_bucket", 1);
    refused("conf", "rules = ( { credit_limit = 1; reset_ms = 5; refill_ms = 5; },\n"
            "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
            "need algorithm token_bucket or gcra", 1);
    refused("conf", "rules = ( { credit_limit = 2; algorithm = \"token_bucket\"; refill_ms = 5;\n"
            " refill = \"continuous\"; strict = true; },\n"
            "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
            "strict needs a stepped token_bucket", 1);
    refused("conf", "rules = ( { credit_limit = 2; algorithm = \"gcra\"; refill_ms = 5;\n"
            " refill = \"continuous\"; },\n"
            "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
            "refill does not apply to gcra", 1);
    refused("conf", "rules = ( { credit_limit = 2; algorithm = \"gcra\"; },\n"
            "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
            "gcra needs refill_seconds or refill_ms", 1);
    refused("conf", "rules = ( { credit_limit = 2;\n algorithm = \"token_bucket\";\n"
            " refill_ms = 0; },\n"
            "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
            "refill_ms 0 is out of range", 1);
    refused("conf", "rules = ( { credit_limit = 2;\n refill = \"smooth\"; reset_ms = 1; },\n"
            "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
            "refill must be \"steps\" or \"continuous\"", 2);
    /* More than ALGO_SPAN_MAX (2^39 ms) to refill an empty bucket. */
    refused("conf", "rules = ( { credit_limit = 140737488355328L; algorithm = \"gcra\";\n"
            " refill_ms = 4000; },\n"
            "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
            "more than 17 years to refill", 1);
    /* A continuous rule cannot be leased. */
    refused("conf", "rules = ( { credit_limit = 2; algorithm = \"gcra\"; refill_ms = 5;\n"
            " store = \"lease\"; },\n"
            "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n"
            "redis = { unix_socket = \"/nonexistent\"; };\n",
            "\"lease\" needs algorithm window", 1);
    /* Strict: Lua's doubles must stay exact (credit_limit * refill_ms <= 2^49). */
    refused("conf", "rules = ( { credit_limit = 1099511627776L; algorithm = \"gcra\";\n"
            " refill_amount = 1099511627776L; refill_ms = 1000; store = \"strict\"; },\n"
            "  { default = true; credit_limit = 0; reset_seconds = 0; } );\n"
            "redis = { unix_socket = \"/nonexistent\"; };\n",
            "credit_limit * refill_ms is too large for a strict gcra", 1);
    /* divvy's INI keeps whole seconds: no reset_ms there. */
    refused("ini", "[method=GET]\ncreditLimit=1\nresetSeconds=1\nreset_ms=5\n"
            "[default]\ncreditLimit=0\nresetSeconds=0\n", "unknown setting 'reset_ms'", 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_algo_bursty_rule),
        cmocka_unit_test(test_config_algo_ms_window_and_gcra),
        cmocka_unit_test(test_config_algo_identity),
        cmocka_unit_test(test_config_algo_refusals),
    };

    return cmocka_run_group_tests_name("config_algo", tests, group_setup, group_teardown);
}
