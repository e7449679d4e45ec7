/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the lockout settings of the native config (server/config_lock.c) and their
 * validation (server/rules_lock.c): what a valid rule compiles to (defaults filled in), and
 * each refusal at its file:line with its reason.
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

#define HEAD "rules = (\n"
#define TAIL "  { default = true; credit_limit = 1; reset_seconds = 60; }\n);\n"

/* config_load() of @text (written to a temporary file): its result, the first error in
 * @d. */
static int load(const char *text, struct config **ret, struct diag *d)
{
    char path[] = "/tmp/divvy-test-lock-XXXXXX.conf";
    int fd = mkstemps(path, 5), r;
    FILE *f;

    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    diag_init(d);
    r = config_load(path, ret, d);
    unlink(path);
    return r;
}

static void refused(const char *text, unsigned line, const char *msg)
{
    struct config *cfg = NULL;
    struct diag d;

    assert_int_equal(load(text, &cfg, &d), -EINVAL);
    assert_null(cfg);
    assert_true(d.n >= 1);
    if (d.e[0].line != line || !strstr(d.e[0].msg, msg))
        fail_msg("error %u: \"%s\", want %u: \"%s\"", d.e[0].line, d.e[0].msg, line, msg);
}

static void test_config_lock_compiles_with_defaults(void **state)
{
    struct config *cfg = NULL;
    struct rules *rs = NULL;
    struct rules_rule r;
    struct diag d;

    (void)state;
    assert_int_equal(load(HEAD
                          "  { match = { event = \"authfail\"; }; actor = \"rhost\";\n"
                          "    algorithm = \"lockout\"; credit_limit = 5; fail_interval = 900;\n"
                          "    unlock_time = 600; escalation = { factor = 3; }; delay = { };\n"
                          "  },\n" TAIL, &cfg, &d), 0);
    assert_int_equal(rules_compile(&cfg->rules, 0, &rs, NULL), 0);
    assert_int_equal(rules_get(rs, 0, &r), 0);
    assert_int_equal(r.algo, RULES_ALGO_LOCKOUT);
    assert_int_equal(r.reset_seconds, 900);             /* the fail_interval */
    assert_int_equal(r.lock->unlock_time, 600);
    assert_int_equal(r.lock->lock_factor, 3);
    assert_int_equal(r.lock->lock_max, 86400);          /* escalation defaults */
    assert_int_equal(r.lock->remember, 86400);
    assert_int_equal(r.lock->delay_after, 1);           /* delay defaults */
    assert_int_equal(r.lock->delay, 1);
    assert_int_equal(r.lock->delay_factor, 2);
    assert_int_equal(r.lock->delay_max, 30);
    rules_free(rs);
    config_free(cfg);
}

static void test_config_lock_refusals(void **state)
{
    (void)state;
    refused(HEAD "  { match = { a = \"1\"; }; algorithm = \"lockout\"; credit_limit = 3;\n"
            "    fail_interval = 60; unlock_time = 60; reset_seconds = 60; },\n" TAIL, 2,
            "reset_seconds and reset_ms do not apply");
    refused(HEAD "  { match = { a = \"1\"; }; algorithm = \"lockout\"; credit_limit = 3;\n"
            "    unlock_time = 60; },\n" TAIL, 2, "lockout needs fail_interval");
    refused(HEAD "  { match = { a = \"1\"; }; algorithm = \"lockout\"; credit_limit = 3;\n"
            "    fail_interval = 60; },\n" TAIL, 2, "lockout needs unlock_time");
    refused(HEAD "  { match = { a = \"1\"; }; credit_limit = 3; reset_seconds = 60;\n"
            "    unlock_time = 60; },\n" TAIL, 2, "need algorithm \"lockout\"");
    refused(HEAD "  { match = { a = \"1\"; }; algorithm = \"lockout\"; credit_limit = 3;\n"
            "    fail_interval = 60; unlock_time = 600;\n"
            "    escalation = { max = 60; }; },\n" TAIL, 2, "escalation.max 60 is shorter");
    refused(HEAD "  { match = { a = \"1\"; }; algorithm = \"lockout\"; credit_limit = 3;\n"
            "    fail_interval = 60; unlock_time = 60; delay = { after = 3; }; },\n" TAIL, 2,
            "delay.after 3 must be below credit_limit 3");
    refused(HEAD "  { match = { a = \"1\"; }; algorithm = \"lockout\"; credit_limit = 3;\n"
            "    fail_interval = 60; unlock_time = 60;\n"
            "    escalation = { factr = 2; }; },\n" TAIL, 4, "did you mean 'factor'");
    refused(HEAD "  { match = { a = \"1\"; }; algorithm = \"lockout\"; credit_limit = 1024;\n"
            "    fail_interval = 60; unlock_time = 60; },\n" TAIL, 2, "too large for a lockout");
    refused(HEAD "  { match = { a = \"1\"; }; algorithm = \"lockout\"; credit_limit = 3;\n"
            "    fail_interval = 60; unlock_time = 60; fast_path = true; },\n" TAIL, 2,
            "cannot be fast_path");
    refused(HEAD "  { match = { a = \"1\"; }; algorithm = \"lockout\"; credit_limit = 3;\n"
            "    fail_interval = 60; unlock_time = 60; store = \"lease\"; },\n" TAIL, 2,
            "cannot hold a lockout rule");
    refused(HEAD "  { match = { a = \"1\"; }; algorithm = \"lockout\"; credit_limit = 3;\n"
            "    fail_interval = 0; unlock_time = 60; },\n" TAIL, 3,
            "fail_interval must be between 1 and 4294967");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_lock_compiles_with_defaults),
        cmocka_unit_test(test_config_lock_refusals),
    };

    return cmocka_run_group_tests_name("config_lock", tests, NULL, NULL);
}
