/* SPDX-License-Identifier: MIT */
/*
 * Regression test for a bug found by tests/fuzz/fuzz_config_json.c (input
 * tests/fuzz/corpus/config_json/regress-convert-true-key.json): a divvy JSON
 * or INI rule may match on a key named "true" or "false", but
 * config_write_libconfig() (divvyctl convert) wrote such a key as a plain
 * libconfig setting name, `match = { true = "..."; }`, which libconfig reads
 * as a boolean literal: the converted file did not load.  Such keys must use
 * the list form, `match = [ "true=..." ]`, in any letter case.
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

static const char json[] =
    "{ \"overrides\": [\n"
    "  { \"operation\": { \"method\": \"GET\", \"true\": \"/pantry/*\" },\n"
    "    \"creditLimit\": 1, \"resetSeconds\": 86400, \"matchPolicy\": \"canary\" },\n"
    "  { \"operation\": { \"FALSE\": \"x\", \"tRuE\": \"*\", \"truex\": \"y\" },\n"
    "    \"creditLimit\": 2, \"resetSeconds\": 60 }\n"
    "  ],\n"
    "  \"default\": { \"operation\": {}, \"creditLimit\": 0, \"resetSeconds\": 0 } }\n";

static void write_text(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void test_regress_convert_keyword_keys(void **state)
{
    char dir[] = "/tmp/divvy-regress-convert.XXXXXX", in[64], out[64];
    struct config *cfg = NULL, *again = NULL;
    struct diag diag;
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(in, sizeof(in), "%s/in.json", dir);
    snprintf(out, sizeof(out), "%s/out.conf", dir);
    write_text(in, json, sizeof(json) - 1);
    diag_init(&diag);
    assert_int_equal(config_load(in, &cfg, &diag), 0);

    f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(config_write_libconfig(cfg, f), 0);
    assert_int_equal(fclose(f), 0);
    /* The keywords go in the list form; an ordinary name stays a name. */
    assert_non_null(strstr(text, "\"true=/pantry/*\""));
    assert_non_null(strstr(text, "\"FALSE=x\""));
    assert_non_null(strstr(text, "\"tRuE=*\""));
    assert_non_null(strstr(text, "\"truex=y\""));
    write_text(out, text, len);

    diag_init(&diag);
    assert_int_equal(config_load(out, &again, &diag), 0);
    assert_int_equal(again->rules.n, cfg->rules.n);
    for (size_t i = 0; i < cfg->rules.n; i++) {
        assert_int_equal(again->rules.rules[i].n_match, cfg->rules.rules[i].n_match);
        for (size_t j = 0; j < cfg->rules.rules[i].n_match; j++) {
            assert_string_equal(again->rules.rules[i].match[j].key,
                                cfg->rules.rules[i].match[j].key);
            assert_string_equal(again->rules.rules[i].match[j].value,
                                cfg->rules.rules[i].match[j].value);
        }
    }
    config_free(again);
    config_free(cfg);
    free(text);
    unlink(in);
    unlink(out);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regress_convert_keyword_keys),
    };

    return cmocka_run_group_tests_name("regress_convert_keyword", tests, NULL, NULL);
}
