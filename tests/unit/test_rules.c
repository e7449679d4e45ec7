/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for common/rules*.c and server/rules*.c: divvy's example config, every validation
 * error with its line, unreachable-rule detection, rule ids, the compiled
 * blob (round trip, corruption), actors, describe/why_not, and a property
 * test of rules_match() against a naive first-match scan of the spec.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "diag.h"
#include "hash.h"
#include "rules.h"

#define FILE_NAME "test.conf"

/* ---- helpers ------------------------------------------------------------ */

/* Adds a rule whose match set is "k=v k=v ..." (no spaces inside values). */
static struct rules_rule_spec *add(struct rules_spec *spec, unsigned line, const char *match,
                                   int64_t limit, int64_t reset)
{
    struct rules_rule_spec *r;
    char buf[512], *save = NULL, *tok;

    assert_int_equal(rules_spec_add(spec, FILE_NAME, line, &r), 0);
    r->credit_limit = limit;
    r->reset_seconds = reset;
    snprintf(buf, sizeof(buf), "%s", match);
    for (tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');

        assert_non_null(eq);
        *eq = '\0';
        assert_int_equal(rules_spec_add_match(r, tok, eq + 1, 0), 0);
    }
    return r;
}

static struct rules_rule_spec *add_default(struct rules_spec *spec, unsigned line)
{
    struct rules_rule_spec *r = add(spec, line, "", 0, 0);

    r->is_default = true;
    return r;
}

struct req {
    struct rules_req r;
    struct proto_kv kv[PROTO_KV_MAX];
    char buf[1024];
};

static int kv_cmp(const void *x, const void *y)
{
    const struct proto_kv *a = x, *b = y;

    return strcmp(a->key, b->key);
}

/* Builds a request from "k=v k=v ..." (sorted, as proto_parse leaves it). */
static const struct rules_req *mkreq(struct req *q, const char *text, bool privileged)
{
    char *save = NULL, *tok;

    memset(q, 0, sizeof(*q));
    snprintf(q->buf, sizeof(q->buf), "%s", text);
    for (tok = strtok_r(q->buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        struct proto_kv *kv = &q->kv[q->r.n_kv++];

        assert_non_null(eq);
        *eq = '\0';
        kv->key = tok;
        kv->key_len = (uint16_t)strlen(tok);
        kv->value = eq + 1;
        kv->value_len = (uint16_t)strlen(eq + 1);
    }
    qsort(q->kv, q->r.n_kv, sizeof(q->kv[0]), kv_cmp);
    q->r.kv = q->kv;
    q->r.privileged = privileged;
    return &q->r;
}

static struct rules *compile_ok(const struct rules_spec *spec)
{
    struct rules *rules = NULL;
    struct diag d;
    char line[1024];
    int r;

    diag_init(&d);
    r = rules_compile(spec, 7, &rules, &d);
    if (r != 0) {
        for (size_t i = 0; i < d.n; i++) {
            diag_format(&d, i, line, sizeof(line));
            print_error("%s\n", line);
        }
        fail_msg("rules_compile: %d", r);
    }
    return rules;
}

/* Runs the matcher and returns "i j k" for easy comparison. */
static const char *match_str(const struct rules *rules, const char *text, bool priv)
{
    static char out[512];
    uint32_t idx[RULES_MATCH_MAX];
    struct req q;
    size_t n = rules_match(rules, mkreq(&q, text, priv), idx);
    size_t o = 0;

    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%u", i ? " " : "", idx[i]);
    return out;
}

/* Validates and expects -EINVAL with a diag entry "FILE:line: ...@needle...". */
static void expect_error(const struct rules_spec *spec, unsigned line, const char *needle)
{
    struct diag d;
    char want[64], text[1024];
    bool found = false;

    diag_init(&d);
    assert_int_equal(rules_validate(spec, &d), -EINVAL);
    snprintf(want, sizeof(want), "%s:%u: ", FILE_NAME, line);
    for (size_t i = 0; i < d.n; i++) {
        diag_format(&d, i, text, sizeof(text));
        if (strncmp(text, want, strlen(want)) == 0 && strstr(text, needle))
            found = true;
    }
    if (!found) {
        for (size_t i = 0; i < d.n; i++) {
            diag_format(&d, i, text, sizeof(text));
            print_error("  got: %s\n", text);
        }
        fail_msg("no diag '%s...%s'", want, needle);
    }
}

static void expect_valid(const struct rules_spec *spec)
{
    struct diag d;
    char text[1024];
    int r;

    diag_init(&d);
    r = rules_validate(spec, &d);
    for (size_t i = 0; i < d.n; i++) {
        diag_format(&d, i, text, sizeof(text));
        print_error("  unexpected: %s\n", text);
    }
    assert_int_equal(r, 0);
    assert_int_equal(d.n, 0);
}

/* divvy's example config (examples/example-config.ini, README). */
static void divvy_example(struct rules_spec *spec)
{
    struct rules_rule_spec *r;

    add(spec, 1, "method=GET path=/status", 1000, 60);
    r = add(spec, 5, "method=GET path=/pantry/cookies/special-cookie", 1, 86400);
    r->policy = RULES_POLICY_CANARY;
    r = add(spec, 11, "method=GET path=/pantry/cookies/* ip=*", 3, 3600);
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r = add(spec, 17, "method=GET path=/pantry/* ip=*", 1, 3600);
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r = add(spec, 23, "method=GET path=/crisper/carrots ip=* foo=3", 10, 60);
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    add_default(spec, 29)->comment = strdup("Default deny!");
}

/* ---- divvy's example ---------------------------------------------------- */

static void test_rules_divvy_example_matches(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules *rules;
    struct rules_rule rr;

    (void)state;
    divvy_example(&spec);
    rules = compile_ok(&spec);
    assert_int_equal(rules_count(rules), 6);
    assert_int_equal(rules_generation(rules), 7);
    assert_string_equal(match_str(rules, "method=GET path=/status", false), "0");
    assert_string_equal(match_str(rules, "method=GET path=/status extra=1", false), "0");
    assert_string_equal(match_str(rules, "method=POST path=/status", false), "5");
    assert_string_equal(match_str(rules, "path=/status", false), "5");
    assert_string_equal(
        match_str(rules, "method=GET path=/pantry/cookies/special-cookie ip=1.2.3.4", false),
        "1 2");
    assert_string_equal(match_str(rules, "method=GET path=/pantry/cookies/special-cookie", false),
                        "1 5");
    assert_string_equal(
        match_str(rules, "method=GET path=/pantry/cookies/oatmeal ip=192.168.1.1", false), "2");
    assert_string_equal(match_str(rules, "method=GET path=/pantry/cookies/oatmeal", false), "5");
    assert_string_equal(match_str(rules, "method=GET path=/pantry/apple ip=4.3.2.1", false), "3");
    assert_string_equal(match_str(rules, "method=GET path=/pantry/ ip=", false), "3");
    assert_string_equal(match_str(rules, "method=GET path=/crisper/carrots ip=1 foo=3", false),
                        "4");
    assert_string_equal(match_str(rules, "method=GET path=/crisper/carrots ip=1 foo=4", false),
                        "5");
    assert_string_equal(match_str(rules, "", false), "5");
    assert_int_equal(rules_get(rules, 5, &rr), 0);
    assert_true(rr.is_default);
    assert_string_equal(rr.comment, "Default deny!");
    assert_int_equal(rr.credit_limit, 0);
    assert_int_equal(rules_get(rules, 2, &rr), 0);
    assert_int_equal(rr.credit_limit, 3);
    assert_int_equal(rr.reset_seconds, 3600);
    assert_int_equal(rr.n_actor, 1);
    assert_int_equal(rr.line, 11);
    assert_string_equal(rr.file, FILE_NAME);
    assert_int_equal(rules_get(rules, 1, &rr), 0);
    assert_int_equal(rr.policy, RULES_POLICY_CANARY);
    assert_int_equal(rules_get(rules, 6, &rr), -ENOENT);
    rules_free(rules);
    rules_spec_free(&spec);
}

static void test_rules_policies_collect_in_order(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules *rules;

    (void)state;
    add(&spec, 1, "user=*", 5, 60)->policy = RULES_POLICY_CONTINUE;
    add(&spec, 2, "rhost=*", 5, 60)->policy = RULES_POLICY_CONTINUE;
    add(&spec, 3, "service=sshd user=root", 1, 60)->policy = RULES_POLICY_CANARY;
    add(&spec, 4, "service=sshd", 3, 60);
    add(&spec, 5, "service=sshd user=root", 1, 60);       /* shadowed? no: 4 covers it */
    add_default(&spec, 6);
    expect_error(&spec, 5, "unreachable");
    rules_spec_free(&spec);

    add(&spec, 1, "user=*", 5, 60)->policy = RULES_POLICY_CONTINUE;
    add(&spec, 2, "rhost=*", 5, 60)->policy = RULES_POLICY_CONTINUE;
    add(&spec, 3, "service=sshd user=root", 1, 60)->policy = RULES_POLICY_CANARY;
    add(&spec, 4, "service=sshd", 3, 60);
    add_default(&spec, 6);
    rules = compile_ok(&spec);
    assert_string_equal(match_str(rules, "service=sshd user=root rhost=h", false), "0 1 2 3");
    assert_string_equal(match_str(rules, "service=sshd user=bob", false), "0 3");
    assert_string_equal(match_str(rules, "service=login rhost=h", false), "1 4");
    rules_free(rules);
    rules_spec_free(&spec);
}

static void test_rules_privileged_source(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules *rules;

    (void)state;
    add(&spec, 1, "event=authfail user=*", 5, 600)->source = RULES_SOURCE_PRIVILEGED;
    add(&spec, 2, "event=authfail", 100, 600);
    add_default(&spec, 3);
    rules = compile_ok(&spec);
    assert_string_equal(match_str(rules, "event=authfail user=root", true), "0");
    assert_string_equal(match_str(rules, "event=authfail user=root", false), "1");
    rules_free(rules);
    rules_spec_free(&spec);
}

/* ---- validation --------------------------------------------------------- */

/* One broken rule at line 10 between a good one and the default. */
static struct rules_rule_spec *one_bad(struct rules_spec *spec, const char *match)
{
    struct rules_rule_spec *r;

    rules_spec_free(spec);
    add(spec, 5, "good=1", 1, 1);
    r = add(spec, 10, match, 5, 60);
    add_default(spec, 20);
    return r;
}

static void test_rules_validate_limits(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;

    (void)state;
    one_bad(&spec, "a=1");
    expect_valid(&spec);
    one_bad(&spec, "a=1")->credit_limit = -1;
    expect_error(&spec, 10, "credit_limit is not set");
    one_bad(&spec, "a=1")->credit_limit = -5;
    expect_error(&spec, 10, "credit_limit -5 is out of range");
    one_bad(&spec, "a=1")->credit_limit = RULES_LIMIT_MAX + 1;
    expect_error(&spec, 10, "credit_limit");
    one_bad(&spec, "a=1")->credit_limit = RULES_LIMIT_MAX;
    expect_valid(&spec);
    r = one_bad(&spec, "a=1");
    r->algo = RULES_ALGO_SLIDING_WINDOW;
    r->credit_limit = RULES_SLIDING_LIMIT_MAX + 1;
    expect_error(&spec, 10, "credit_limit");
    r = one_bad(&spec, "a=1");
    r->algo = RULES_ALGO_SLIDING_WINDOW;
    r->credit_limit = RULES_SLIDING_LIMIT_MAX;
    expect_valid(&spec);
    one_bad(&spec, "a=1")->reset_seconds = -1;
    expect_error(&spec, 10, "reset_seconds is not set");
    one_bad(&spec, "a=1")->reset_seconds = RULES_SECONDS_MAX + 1;
    expect_error(&spec, 10, "reset_seconds");
    one_bad(&spec, "a=1")->max_actors = -1;
    expect_error(&spec, 10, "max_actors");
    /* divvy's always-allow: a positive limit with reset_seconds = 0 */
    one_bad(&spec, "a=1")->reset_seconds = 0;
    expect_valid(&spec);
    /* always-deny */
    one_bad(&spec, "a=1")->credit_limit = 0;
    expect_valid(&spec);
    rules_spec_free(&spec);
}

static void test_rules_validate_privileged_not_fast_path(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;

    (void)state;
    r = one_bad(&spec, "a=1");
    r->fast_path = true;
    expect_valid(&spec);
    r = one_bad(&spec, "a=1");
    r->source = RULES_SOURCE_PRIVILEGED;
    expect_valid(&spec);
    r = one_bad(&spec, "a=1");
    r->fast_path = true;
    r->source = RULES_SOURCE_PRIVILEGED;
    expect_error(&spec, 10, "cannot be fast_path");
    rules_spec_free(&spec);
}

static void test_rules_validate_token_bucket(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    struct rules *rules;
    struct rules_rule rr;

    (void)state;
    r = one_bad(&spec, "a=1");
    r->algo = RULES_ALGO_TOKEN_BUCKET;
    r->reset_seconds = -1;
    r->refill_seconds = 10;
    r->strict = true;
    rules = compile_ok(&spec);
    assert_int_equal(rules_get(rules, 1, &rr), 0);
    assert_int_equal(rr.algo, RULES_ALGO_TOKEN_BUCKET);
    assert_int_equal(rr.refill_amount, 1);          /* default */
    assert_int_equal(rr.refill_seconds, 10);
    assert_int_equal(rr.reset_seconds, 10);         /* defaults to refill_seconds */
    assert_true(rr.strict);
    rules_free(rules);

    r = one_bad(&spec, "a=1");
    r->algo = RULES_ALGO_TOKEN_BUCKET;              /* refill_seconds from reset_seconds */
    rules = compile_ok(&spec);
    assert_int_equal(rules_get(rules, 1, &rr), 0);
    assert_int_equal(rr.refill_seconds, 60);
    rules_free(rules);

    r = one_bad(&spec, "a=1");
    r->algo = RULES_ALGO_TOKEN_BUCKET;
    r->reset_seconds = -1;
    expect_error(&spec, 10, "needs refill_seconds");
    /* A million tokens at one an hour: 114 years to refill, more than a slot holds. */
    r = one_bad(&spec, "a=1");
    r->algo = RULES_ALGO_TOKEN_BUCKET;
    r->credit_limit = 1000000;
    r->refill_seconds = 3600;
    expect_error(&spec, 10, "17 years");
    r = one_bad(&spec, "a=1");
    r->algo = RULES_ALGO_TOKEN_BUCKET;
    r->credit_limit = 1000000;
    r->refill_amount = 1000;
    r->refill_seconds = 3600;
    expect_valid(&spec);
    r = one_bad(&spec, "a=1");
    r->algo = RULES_ALGO_TOKEN_BUCKET;
    r->refill_seconds = 0;
    expect_error(&spec, 10, "refill_seconds 0 is out of range");
    r = one_bad(&spec, "a=1");
    r->algo = RULES_ALGO_TOKEN_BUCKET;
    r->refill_amount = 6;                           /* limit is 5 */
    expect_error(&spec, 10, "refill_amount 6");
    r = one_bad(&spec, "a=1");
    r->algo = RULES_ALGO_TOKEN_BUCKET;
    r->refill_amount = 0;
    expect_error(&spec, 10, "refill_amount 0");
    one_bad(&spec, "a=1")->strict = true;
    expect_error(&spec, 10, "strict needs algorithm token_bucket");
    one_bad(&spec, "a=1")->max_debit = -2;
    expect_error(&spec, 10, "max_debit -2 is out of range 0..1000000000000");
    one_bad(&spec, "a=1")->max_debit = 1000000000001LL;
    expect_error(&spec, 10, "max_debit 1000000000001 is out of range");
    one_bad(&spec, "a=1")->max_debit = 1000000000000LL;
    expect_valid(&spec);
    one_bad(&spec, "a=1")->refill_amount = 2;
    expect_error(&spec, 10, "need algorithm token_bucket");
    one_bad(&spec, "a=1")->refill_seconds = 2;
    expect_error(&spec, 10, "need algorithm token_bucket");
    rules_spec_free(&spec);
}

static void test_rules_validate_actor(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    char key[16];

    (void)state;
    one_bad(&spec, "a=1")->prefix4 = 24;
    expect_error(&spec, 10, "need an actor");
    one_bad(&spec, "a=1")->prefix6 = 64;
    expect_error(&spec, 10, "need an actor");
    r = one_bad(&spec, "a=1");
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r->prefix4 = 33;
    expect_error(&spec, 10, "actor_prefix4 33");
    r = one_bad(&spec, "a=1");
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r->prefix6 = 129;
    expect_error(&spec, 10, "actor_prefix6 129");
    r = one_bad(&spec, "a=1");
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r->prefix4 = 0;
    r->prefix6 = 128;
    expect_valid(&spec);
    r = one_bad(&spec, "a=1");
    assert_int_equal(rules_spec_add_actor(r, "user"), 0);
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    assert_int_equal(rules_spec_add_actor(r, "user"), 0);
    expect_error(&spec, 10, "actor key 'user' repeats");
    r = one_bad(&spec, "a=1");
    for (int i = 0; i <= RULES_ACTOR_KEYS_MAX; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(rules_spec_add_actor(r, key), 0);
    }
    expect_error(&spec, 10, "actor names 9 keys");
    rules_spec_free(&spec);
}

static void test_rules_validate_labels(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    char long_label[RULES_LABEL_MAX + 2];

    (void)state;
    one_bad(&spec, "a=1")->label = strdup("ok_label-1");
    expect_valid(&spec);
    one_bad(&spec, "a=1")->label = strdup("bad label");
    expect_error(&spec, 10, "label 'bad label' is not");
    one_bad(&spec, "a=1")->label = strdup("");
    expect_error(&spec, 10, "label '' is not");
    memset(long_label, 'x', sizeof(long_label) - 1);
    long_label[sizeof(long_label) - 1] = '\0';
    one_bad(&spec, "a=1")->label = strdup(long_label);
    expect_error(&spec, 10, "is not [A-Za-z0-9_-]");
    long_label[RULES_LABEL_MAX] = '\0';
    one_bad(&spec, "a=1")->label = strdup(long_label);
    expect_valid(&spec);
    r = one_bad(&spec, "a=1");
    r->label = strdup("same");
    spec.rules[0].label = strdup("same");
    expect_error(&spec, 10, "label 'same' repeats the label of the rule at test.conf:5");
    rules_spec_free(&spec);
}

static void test_rules_validate_match_keys(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    char kv[32];

    (void)state;
    r = one_bad(&spec, "a=1 b=2");
    assert_int_equal(rules_spec_add_match(r, "a", "3", 12), 0);
    expect_error(&spec, 12, "key 'a' repeats");
    one_bad(&spec, "path=/a\\b");
    expect_error(&spec, 10, "malformed glob in path=/a\\b");
    one_bad(&spec, "path=/a\\");
    expect_error(&spec, 10, "malformed glob");
    one_bad(&spec, "path=/a\\*b\\\\");
    expect_valid(&spec);
    r = one_bad(&spec, "");
    for (int i = 0; i <= PROTO_KV_MAX; i++) {
        snprintf(kv, sizeof(kv), "k%d", i);
        assert_int_equal(rules_spec_add_match(r, kv, "v", 0), 0);
    }
    expect_error(&spec, 10, "33 match keys");
    rules_spec_free(&spec);
}

static void test_rules_validate_default(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    struct diag d;
    char text[512];

    (void)state;
    diag_init(&d);
    assert_int_equal(rules_validate(&spec, &d), -EINVAL);
    assert_int_equal(d.n, 1);
    diag_format(&d, 0, text, sizeof(text));
    assert_string_equal(text, "no default rule: the last rule must be the default "
                        "(default = true, or an INI [default] section)");

    add(&spec, 3, "a=1", 1, 1);
    expect_error(&spec, 3, "no default rule: the last rule must be the default (default = "
                 "true, or an INI [default] section)");
    rules_spec_free(&spec);

    add_default(&spec, 3);
    add(&spec, 4, "a=1", 1, 1);
    expect_error(&spec, 3, "the default rule must be the last rule");
    expect_error(&spec, 4, "no default rule");
    rules_spec_free(&spec);

    add_default(&spec, 3);
    add_default(&spec, 4);
    expect_error(&spec, 3, "the default rule must be the last rule");
    rules_spec_free(&spec);

    add(&spec, 3, "a=1", 1, 1);
    r = add(&spec, 4, "b=1", 1, 1);
    r->is_default = true;
    expect_error(&spec, 4, "must not have match keys");
    rules_spec_free(&spec);

    add(&spec, 3, "a=1", 1, 1);
    add_default(&spec, 4)->policy = RULES_POLICY_CANARY;
    expect_error(&spec, 4, "match_policy stop, not canary");
    rules_spec_free(&spec);

    add(&spec, 3, "a=1", 1, 1);
    add_default(&spec, 4)->source = RULES_SOURCE_PRIVILEGED;
    expect_error(&spec, 4, "source any");
    rules_spec_free(&spec);

    /* A rule with no keys that is not the default matches everything. */
    add(&spec, 3, "", 1, 1);
    add(&spec, 4, "a=1", 1, 1);
    add_default(&spec, 5);
    expect_error(&spec, 4, "unreachable");
    expect_error(&spec, 5, "unreachable: every request it matches is decided earlier by the "
                 "rule at test.conf:3");
    rules_spec_free(&spec);
}

static void test_rules_validate_too_many_side_rules(void **state)
{
    struct rules_spec spec = { 0 };
    char m[32];

    (void)state;
    for (int i = 0; i < RULES_MATCH_MAX - 1; i++) {
        snprintf(m, sizeof(m), "k=%d", i);
        add(&spec, (unsigned)i + 1, m, 1, 1)->policy =
            i % 2 ? RULES_POLICY_CANARY : RULES_POLICY_CONTINUE;
    }
    add_default(&spec, 100);
    expect_valid(&spec);
    rules_spec_free(&spec);
    for (int i = 0; i < RULES_MATCH_MAX; i++) {
        snprintf(m, sizeof(m), "k=%d", i);
        add(&spec, (unsigned)i + 1, m, 1, 1)->policy = RULES_POLICY_CANARY;
    }
    add_default(&spec, 100);
    expect_error(&spec, RULES_MATCH_MAX, "more than 63 canary/continue rules");
    rules_spec_free(&spec);
}

static void test_rules_validate_reports_every_problem(void **state)
{
    struct rules_spec spec = { 0 };
    struct diag d;

    (void)state;
    add(&spec, 1, "a=1", -1, 60);
    add(&spec, 2, "b=\\x", 1, 60);
    add(&spec, 3, "c=1", 1, -1);
    add_default(&spec, 4);
    diag_init(&d);
    assert_int_equal(rules_validate(&spec, &d), -EINVAL);
    assert_int_equal(d.n, 3);
    assert_int_equal(d.e[0].line, 1);
    assert_int_equal(d.e[1].line, 2);
    assert_int_equal(d.e[2].line, 3);
    /* rules_compile rejects the same */
    {
        struct rules *rules = NULL;

        diag_init(&d);
        assert_int_equal(rules_compile(&spec, 1, &rules, &d), -EINVAL);
        assert_null(rules);
        assert_int_equal(d.n, 3);
    }
    rules_spec_free(&spec);
}

/* ---- reachability -------------------------------------------------------- */

/* Two rules at lines 1 and 2 plus a default; is rule 2 unreachable? */
static void pair_case(const char *a, enum rules_policy pa, enum rules_source sa, const char *b,
                      enum rules_source sb, bool unreachable)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;

    r = add(&spec, 1, a, 1, 60);
    r->policy = pa;
    r->source = sa;
    r->label = strdup("A");
    r = add(&spec, 2, b, 2, 60);
    r->source = sb;
    r->label = strdup("B");
    add_default(&spec, 3);
    if (unreachable)
        expect_error(&spec, 2, "rule is unreachable: every request it matches is decided "
                     "earlier by the rule at test.conf:1");
    else
        expect_valid(&spec);
    rules_spec_free(&spec);
}

static void test_rules_unreachable_cases(void **state)
{
    const enum rules_policy S = RULES_POLICY_STOP;
    const enum rules_source ANY = RULES_SOURCE_ANY, PRIV = RULES_SOURCE_PRIVILEGED;

    (void)state;
    pair_case("path=/a/*", S, ANY, "path=/a/b", ANY, true);
    pair_case("path=/a/*", RULES_POLICY_CANARY, ANY, "path=/a/b", ANY, false);
    pair_case("path=/a/*", RULES_POLICY_CONTINUE, ANY, "path=/a/b", ANY, false);
    pair_case("path=/a/b", S, ANY, "path=/a/*", ANY, false);
    pair_case("method=GET", S, ANY, "method=GET path=/x", ANY, true);
    pair_case("method=GET path=/x", S, ANY, "method=GET", ANY, false);
    pair_case("ip=*", S, ANY, "ip=1.2.3.4", ANY, true);
    pair_case("ip=1.2.3.4", S, ANY, "ip=*", ANY, false);
    pair_case("ip=*", S, ANY, "ip=*", ANY, true);
    pair_case("path=*", S, ANY, "path=", ANY, true);
    pair_case("path=*a*a*", S, ANY, "path=*a*", ANY, false);
    pair_case("path=*a*", S, ANY, "path=*a*a*", ANY, true);
    pair_case("path=a*", S, ANY, "path=a*b", ANY, true);
    pair_case("path=a*b", S, ANY, "path=a*", ANY, false);
    pair_case("path=a*", S, ANY, "path=a\\*", ANY, true);
    pair_case("path=a\\*", S, ANY, "path=a*", ANY, false);
    pair_case("a=1 b=*", S, ANY, "a=1 b=x c=y", ANY, true);
    pair_case("a=1 b=*", S, ANY, "a=1 c=y", ANY, false);
    /* privileged source */
    pair_case("user=*", S, PRIV, "user=root", ANY, false);
    pair_case("user=*", S, ANY, "user=root", PRIV, true);
    pair_case("user=*", S, PRIV, "user=root", PRIV, true);
    pair_case("user=root", S, PRIV, "user=*", PRIV, false);
}

static void test_rules_unreachable_through_index(void **state)
{
    struct rules_spec spec = { 0 };
    char m[64];

    (void)state;
    /* method=GET is everywhere, path= is rare: rules anchor on path. */
    for (int i = 0; i < 500; i++) {
        snprintf(m, sizeof(m), "method=GET path=/r%d", i);
        add(&spec, (unsigned)i + 1, m, 1, 60);
    }
    add(&spec, 1000, "method=GET path=/r250 user=bob", 1, 60);
    add(&spec, 1001, "method=POST path=/r250", 1, 60);
    add(&spec, 1002, "path=/x*", 1, 60);
    add(&spec, 1003, "method=GET path=/xyz", 1, 60);
    add_default(&spec, 2000);
    expect_error(&spec, 1000, "decided earlier by the rule at test.conf:251");
    expect_error(&spec, 1003, "decided earlier by the rule at test.conf:1002");
    {
        struct diag d;

        diag_init(&d);
        assert_int_equal(rules_validate(&spec, &d), -EINVAL);
        assert_int_equal(d.n, 2);
    }
    rules_spec_free(&spec);
}

/* ---- identity ------------------------------------------------------------ */

static uint64_t id_of(struct rules_spec *spec, uint32_t idx, char *id_str, size_t size)
{
    struct rules *rules = compile_ok(spec);
    struct rules_rule rr;
    uint64_t id;

    assert_int_equal(rules_get(rules, idx, &rr), 0);
    id = rr.id;
    snprintf(id_str, size, "%s", rr.id_str);
    rules_free(rules);
    return id;
}

static void test_rules_id_stable_across_limits(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    char s1[80], s2[80];
    uint64_t id1, id2;

    (void)state;
    r = add(&spec, 1, "method=GET path=/x", 5, 60);
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    add_default(&spec, 2);
    id1 = id_of(&spec, 0, s1, sizeof(s1));
    assert_int_equal(strlen(s1), 16);
    assert_int_equal(strspn(s1, "0123456789abcdef"), 16);
    r = &spec.rules[0];
    r->credit_limit = 500;
    r->reset_seconds = 3600;
    r->comment = strdup("changed");
    r->max_actors = 10;
    r->policy = RULES_POLICY_CANARY;
    r->fast_path = true;
    id2 = id_of(&spec, 0, s2, sizeof(s2));
    assert_true(id1 == id2);
    assert_string_equal(s1, s2);
    /* the algorithm starts it afresh */
    r->algo = RULES_ALGO_SLIDING_WINDOW;
    assert_true(id_of(&spec, 0, s2, sizeof(s2)) != id1);
    r->algo = RULES_ALGO_WINDOW;
    r->prefix4 = 24;
    assert_true(id_of(&spec, 0, s2, sizeof(s2)) != id1);
    r->prefix4 = -1;
    assert_int_equal(rules_spec_add_actor(r, "user"), 0);
    assert_true(id_of(&spec, 0, s2, sizeof(s2)) != id1);
    rules_spec_free(&spec);

    /* key order in the config does not matter */
    r = add(&spec, 1, "path=/x method=GET", 7, 1);
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    add_default(&spec, 2);
    assert_true(id_of(&spec, 0, s2, sizeof(s2)) == id1);
    /* a different value does */
    free(spec.rules[0].match[0].value);
    spec.rules[0].match[0].value = strdup("/y");
    assert_true(id_of(&spec, 0, s2, sizeof(s2)) != id1);
    rules_spec_free(&spec);
}

static void test_rules_id_label(void **state)
{
    static const uint8_t zero[HASH_KEY_LEN];
    struct rules_spec spec = { 0 };
    char s[80];
    uint64_t id;

    (void)state;
    add(&spec, 1, "a=1", 5, 60)->label = strdup("ssh-per-user");
    add_default(&spec, 2);
    id = id_of(&spec, 0, s, sizeof(s));
    assert_string_equal(s, "ssh-per-user");
    assert_true(id == hash_siphash(zero, "label:ssh-per-user", 18));
    /* the label is the identity: the match set may change */
    free(spec.rules[0].match[0].value);
    spec.rules[0].match[0].value = strdup("2");
    spec.rules[0].algo = RULES_ALGO_SLIDING_WINDOW;
    assert_true(id_of(&spec, 0, s, sizeof(s)) == id);
    rules_spec_free(&spec);
}

static void test_rules_id_duplicate_rejected(void **state)
{
    struct rules_spec spec = { 0 };

    (void)state;
    /* a canary with the same match as a later stop rule would share its counters */
    add(&spec, 1, "a=1", 5, 60)->policy = RULES_POLICY_CANARY;
    add(&spec, 2, "a=1", 10, 60);
    add_default(&spec, 3);
    expect_error(&spec, 2, "same id as the rule at test.conf:1");
    spec.rules[1].label = strdup("stop_a");
    expect_valid(&spec);
    spec.rules[1].algo = RULES_ALGO_SLIDING_WINDOW;
    free(spec.rules[1].label);
    spec.rules[1].label = NULL;
    expect_valid(&spec);
    rules_spec_free(&spec);
}

/* ---- blob ---------------------------------------------------------------- */

static const char *const sample_reqs[] = {
    "method=GET path=/status",
    "method=GET path=/pantry/cookies/special-cookie ip=1.2.3.4",
    "method=GET path=/pantry/cookies/oatmeal ip=192.168.1.1",
    "method=GET path=/pantry/apple ip=2001:db8::1",
    "method=GET path=/crisper/carrots ip=1 foo=3",
    "method=POST path=/status",
    "",
};

static void test_rules_blob_round_trip(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules *rules, *copy = NULL;
    const void *data, *data2;
    size_t len, len2;
    char a[256], b[256];

    (void)state;
    divvy_example(&spec);
    spec.rules[2].label = strdup("cookies");
    spec.rules[1].max_debit = 0;
    spec.rules[2].max_debit = 1000000000000LL;
    rules = compile_ok(&spec);
    rules_blob(rules, &data, &len);
    assert_true(len > 128);
    assert_memory_equal(data, "DIVVYRL1", 8);
    assert_int_equal(rules_from_blob(data, len, &copy), 0);
    rules_blob(copy, &data2, &len2);
    assert_int_equal(len, len2);
    assert_memory_equal(data, data2, len);
    assert_int_equal(rules_count(copy), rules_count(rules));
    assert_int_equal(rules_generation(copy), 7);
    for (uint32_t i = 0; i < rules_count(rules); i++) {
        struct rules_rule x, y;

        assert_int_equal(rules_get(rules, i, &x), 0);
        assert_int_equal(rules_get(copy, i, &y), 0);
        assert_true(x.id == y.id);
        assert_string_equal(x.id_str, y.id_str);
        assert_string_equal(x.label, y.label);
        assert_int_equal(x.credit_limit, y.credit_limit);
        assert_int_equal(x.max_debit, y.max_debit);
        assert_int_equal(rules_max_debit(&x), i == 1   ? 0
                                              : i == 2 ? 1000000000000LL
                                                       : x.credit_limit);
        assert_int_equal(rules_describe(rules, i, a, sizeof(a)),
                         rules_describe(copy, i, b, sizeof(b)));
        assert_string_equal(a, b);
    }
    for (size_t i = 0; i < sizeof(sample_reqs) / sizeof(sample_reqs[0]); i++) {
        snprintf(a, sizeof(a), "%s", match_str(rules, sample_reqs[i], false));
        assert_string_equal(a, match_str(copy, sample_reqs[i], false));
    }
    rules_free(copy);
    rules_free(rules);
    rules_spec_free(&spec);
}

/* Everything a reader may do with a table; must stay in bounds. */
static void exercise(const struct rules *rules)
{
    uint32_t idx[RULES_MATCH_MAX];
    struct rules_rule rr;
    char buf[RULES_ACTOR_MAX];
    struct req q;

    for (size_t i = 0; i < sizeof(sample_reqs) / sizeof(sample_reqs[0]); i++) {
        const struct rules_req *req = mkreq(&q, sample_reqs[i], i % 2);
        size_t n = rules_match(rules, req, idx);

        assert_true(n >= 1 && n <= RULES_MATCH_MAX);
        for (size_t k = 0; k < n; k++) {
            assert_true(idx[k] < rules_count(rules));
            assert_int_equal(rules_get(rules, idx[k], &rr), 0);
            assert_true(strlen(rr.id_str) + strlen(rr.label) + strlen(rr.file) < 1u << 20);
            (void)rules_actor(rules, idx[k], req, buf, sizeof(buf));
            (void)rules_describe(rules, idx[k], buf, sizeof(buf));
            (void)rules_why_not(rules, idx[k], req, buf, sizeof(buf));
        }
    }
}

static void test_rules_blob_corrupt(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules *rules, *copy;
    const void *data;
    uint8_t *bad;
    size_t len;
    int accepted = 0;

    (void)state;
    divvy_example(&spec);
    rules = compile_ok(&spec);
    rules_blob(rules, &data, &len);
    bad = malloc(len);
    assert_non_null(bad);

    /* truncated anywhere */
    for (size_t l = 0; l < len; l++) {
        copy = NULL;
        assert_int_equal(rules_from_blob(data, l, &copy), -EBADMSG);
        assert_null(copy);
    }
    /* bad header fields */
    for (size_t off = 8; off < 128; off += 4) {
        static const uint32_t vals[] = { 0xffffffffu, 0x7fffffffu, 0x10000000u, 1, 3 };

        for (size_t v = 0; v < sizeof(vals) / sizeof(vals[0]); v++) {
            memcpy(bad, data, len);
            memcpy(bad + off, &vals[v], 4);
            copy = NULL;
            if (rules_from_blob(bad, len, &copy) == 0) {
                exercise(copy);
                rules_free(copy);
            } else {
                assert_null(copy);
            }
        }
    }
    memcpy(bad, data, len);
    bad[0] = 'X';
    assert_int_equal(rules_from_blob(bad, len, &copy), -EBADMSG);

    /* random corruption: rejected, or accepted and still safe to use */
    srand(3);
    for (int it = 0; it < 20000; it++) {
        int flips = 1 + rand() % 8;

        memcpy(bad, data, len);
        for (int f = 0; f < flips; f++) {
            size_t at = (size_t)rand() % len;

            if (rand() % 2)
                bad[at] = (uint8_t)rand();
            else
                bad[at] ^= (uint8_t)(1u << (rand() % 8));
        }
        copy = NULL;
        if (rules_from_blob(bad, len, &copy) == 0) {
            accepted++;
            exercise(copy);
            rules_free(copy);
        }
    }
    /* pure noise */
    for (int it = 0; it < 2000; it++) {
        for (size_t i = 0; i < len; i++)
            bad[i] = (uint8_t)rand();
        if (it % 2)
            memcpy(bad, data, 16);
        assert_int_equal(rules_from_blob(bad, len, &copy), -EBADMSG);
    }
    /* flips in the string pool are harmless and accepted: the test saw some */
    assert_true(accepted > 0);
    free(bad);
    rules_free(rules);
    rules_spec_free(&spec);
}

/* ---- actor, describe, why_not ------------------------------------------- */

static const char *actor_of(const struct rules *rules, uint32_t idx, const char *req, int *ret)
{
    static char buf[256];
    struct req q;

    *ret = rules_actor(rules, idx, mkreq(&q, req, false), buf, sizeof(buf));
    return buf;
}

static void test_rules_actor_values(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    struct rules *rules;
    char buf[8];
    struct req q;
    int n;

    (void)state;
    add(&spec, 1, "k=none", 1, 60);
    r = add(&spec, 2, "k=one", 1, 60);
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r = add(&spec, 3, "k=multi", 1, 60);
    assert_int_equal(rules_spec_add_actor(r, "user"), 0);
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r->prefix4 = 24;
    r->prefix6 = 64;
    r = add(&spec, 4, "k=ip", 1, 60);
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r->prefix4 = 24;
    r->prefix6 = 64;
    r = add(&spec, 5, "k=ip4only", 1, 60);
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r->prefix4 = 0;
    add_default(&spec, 6);
    rules = compile_ok(&spec);

    assert_string_equal(actor_of(rules, 0, "k=none ip=1.2.3.4", &n), "");
    assert_int_equal(n, 0);
    assert_string_equal(actor_of(rules, 1, "k=one ip=1.2.3.4", &n), "1.2.3.4");
    assert_int_equal(n, 7);
    assert_string_equal(actor_of(rules, 1, "k=one", &n), "");         /* missing: "" */
    assert_string_equal(actor_of(rules, 1, "k=one ip=a,b%c", &n), "a,b%c");
    assert_string_equal(actor_of(rules, 2, "k=multi user=bob ip=10.1.2.3", &n),
                        "bob,10.1.2.0/24");
    assert_string_equal(actor_of(rules, 2, "k=multi user=a,b%c", &n), "a%2Cb%25c,");
    assert_string_equal(actor_of(rules, 2, "k=multi", &n), ",");
    assert_string_equal(actor_of(rules, 3, "ip=192.168.1.77", &n), "192.168.1.0/24");
    assert_string_equal(actor_of(rules, 3, "ip=2001:db8:1:2:3:4:5:6", &n), "2001:db8:1:2::/64");
    assert_string_equal(actor_of(rules, 3, "ip=2001:0DB8:0:0::1", &n), "2001:db8::/64");
    assert_string_equal(actor_of(rules, 3, "ip=not-an-ip", &n), "not-an-ip");
    assert_string_equal(actor_of(rules, 3, "ip=1.2.3", &n), "1.2.3");
    assert_string_equal(actor_of(rules, 4, "ip=192.168.1.77", &n), "0.0.0.0/0");
    assert_string_equal(actor_of(rules, 4, "ip=2001:db8::1", &n), "2001:db8::1");
    /* too small a buffer */
    assert_int_equal(rules_actor(rules, 1, mkreq(&q, "ip=1.2.3.45", false), buf, sizeof(buf)),
                     -ENOBUFS);
    assert_int_equal(rules_actor(rules, 1, mkreq(&q, "ip=1.2.3.4", false), buf, sizeof(buf)), 7);
    assert_int_equal(rules_actor(rules, 1, mkreq(&q, "ip=1.2.3", false), buf, sizeof(buf)), 5);
    assert_int_equal(rules_actor(rules, 99, mkreq(&q, "", false), buf, sizeof(buf)), -ENOENT);
    rules_free(rules);
    rules_spec_free(&spec);
}

/* IPv4 in IPv6 counts as the IPv4 address it is (actor_prefix4), so the
 * mapped and the plain forms share one actor and IPv4 clients never share
 * ::/64; ::1 and the rest of ::/96 stay whole (docs/rules.md "Actors"). */
static void test_rules_actor_mapped(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    struct rules *rules;
    int n;

    (void)state;
    r = add(&spec, 1, "k=both", 1, 60);             /* rule 0: /32 and /64 */
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r->prefix4 = 32;
    r->prefix6 = 64;
    r = add(&spec, 2, "k=six", 1, 60);              /* rule 1: only actor_prefix6 */
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r->prefix6 = 64;
    r = add(&spec, 3, "k=four", 1, 60);             /* rule 2: only actor_prefix4 */
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r->prefix4 = 24;
    r = add(&spec, 4, "k=pair", 1, 60);             /* rule 3: user x source */
    assert_int_equal(rules_spec_add_actor(r, "user"), 0);
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    r->prefix4 = 32;
    r->prefix6 = 64;
    r = add(&spec, 5, "k=none", 1, 60);             /* rule 4: no prefix: as sent */
    assert_int_equal(rules_spec_add_actor(r, "ip"), 0);
    add_default(&spec, 6);
    rules = compile_ok(&spec);

    /* Mapped: the IPv4 address, as the plain form gives it. */
    assert_string_equal(actor_of(rules, 0, "ip=::ffff:192.0.2.1", &n), "192.0.2.1/32");
    assert_string_equal(actor_of(rules, 0, "ip=192.0.2.1", &n), "192.0.2.1/32");
    assert_string_equal(actor_of(rules, 0, "ip=::ffff:192.0.2.2", &n), "192.0.2.2/32");
    assert_string_equal(actor_of(rules, 0, "ip=::FFFF:c000:201", &n), "192.0.2.1/32");
    assert_string_equal(actor_of(rules, 0, "ip=0:0:0:0:0:ffff:192.0.2.1", &n), "192.0.2.1/32");
    /* NAT64's well-known prefix: the same. */
    assert_string_equal(actor_of(rules, 0, "ip=64:ff9b::192.0.2.1", &n), "192.0.2.1/32");
    assert_string_equal(actor_of(rules, 0, "ip=64:ff9b::c000:202", &n), "192.0.2.2/32");
    /* Outside those /96s: IPv6 per /64 (64:ff9b:1::/48 is a local-use
     * prefix whose IPv4 position divvyd cannot know). */
    assert_string_equal(actor_of(rules, 0, "ip=64:ff9b:1::192.0.2.1", &n), "64:ff9b:1::/64");
    assert_string_equal(actor_of(rules, 0, "ip=::fffe:192.0.2.1", &n), "::/64");
    /* ::/96 (loopback, unspecified, IPv4-compatible): whole, one host each. */
    assert_string_equal(actor_of(rules, 0, "ip=::1", &n), "::1/128");
    assert_int_equal(n, 7);
    assert_string_equal(actor_of(rules, 0, "ip=::", &n), "::/128");
    assert_string_equal(actor_of(rules, 0, "ip=::192.0.2.1", &n), "::192.0.2.1/128");
    assert_string_equal(actor_of(rules, 0, "ip=::192.0.2.2", &n), "::192.0.2.2/128");
    /* Without actor_prefix4 the mapped address is its dotted text: the
     * plain form's actor, which stays as sent. */
    assert_string_equal(actor_of(rules, 1, "ip=::ffff:192.0.2.1", &n), "192.0.2.1");
    assert_string_equal(actor_of(rules, 1, "ip=192.0.2.1", &n), "192.0.2.1");
    assert_string_equal(actor_of(rules, 1, "ip=::1", &n), "::1/128");
    assert_string_equal(actor_of(rules, 1, "ip=2001:db8::1", &n), "2001:db8::/64");
    /* Without actor_prefix6 the mapped address is still IPv4; IPv6 as sent. */
    assert_string_equal(actor_of(rules, 2, "ip=::ffff:192.0.2.77", &n), "192.0.2.0/24");
    assert_string_equal(actor_of(rules, 2, "ip=192.0.2.77", &n), "192.0.2.0/24");
    assert_string_equal(actor_of(rules, 2, "ip=::1", &n), "::1");
    assert_string_equal(actor_of(rules, 2, "ip=2001:db8::1", &n), "2001:db8::1");
    /* Several actor keys: each value the same way. */
    assert_string_equal(actor_of(rules, 3, "k=pair user=root ip=::ffff:192.0.2.1", &n),
                        "root,192.0.2.1/32");
    assert_string_equal(actor_of(rules, 3, "k=pair user=root ip=192.0.2.1", &n),
                        "root,192.0.2.1/32");
    /* No prefix: the value as sent, parsed by nobody. */
    assert_string_equal(actor_of(rules, 4, "ip=::ffff:192.0.2.1", &n), "::ffff:192.0.2.1");
    rules_free(rules);
    rules_spec_free(&spec);
}

static void test_rules_describe_and_why_not(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules *rules;
    char buf[256];
    struct req q;

    (void)state;
    add(&spec, 1, "path=/pantry/* method=GET ip=*", 1, 60);
    add(&spec, 2, "path=a\\*b\\\\c", 1, 60)->source = RULES_SOURCE_PRIVILEGED;
    {
        struct rules_rule_spec *r;

        assert_int_equal(rules_spec_add(&spec, FILE_NAME, 3, &r), 0);
        r->credit_limit = 1;
        r->reset_seconds = 1;
        assert_int_equal(rules_spec_add_match(r, "path", "/a b=c", 3), 0);
    }
    add_default(&spec, 4);
    rules = compile_ok(&spec);
    assert_int_equal(rules_describe(rules, 0, buf, sizeof(buf)), 30);
    assert_string_equal(buf, "ip=* method=GET path=/pantry/*");
    rules_describe(rules, 1, buf, sizeof(buf));
    assert_string_equal(buf, "path=a\\*b\\\\c");
    rules_describe(rules, 2, buf, sizeof(buf));
    assert_string_equal(buf, "path=\"/a b=c\"");
    rules_describe(rules, 3, buf, sizeof(buf));
    assert_string_equal(buf, "default");
    assert_int_equal(rules_describe(rules, 0, buf, 10), -ENOBUFS);

    rules_why_not(rules, 0, mkreq(&q, "method=GET path=/a", false), buf, sizeof(buf));
    assert_string_equal(buf, "missing key ip");
    rules_why_not(rules, 0, mkreq(&q, "method=GET path=/a ip=1", false), buf, sizeof(buf));
    assert_string_equal(buf, "path=/a does not match /pantry/*");
    rules_why_not(rules, 0, mkreq(&q, "method=PUT path=/pantry/x ip=1", false), buf,
                  sizeof(buf));
    assert_string_equal(buf, "method=PUT does not match GET");
    assert_int_equal(rules_why_not(rules, 0, mkreq(&q, "method=GET path=/pantry/x ip=1", false),
                                   buf, sizeof(buf)), 0);
    assert_string_equal(buf, "");
    rules_why_not(rules, 1, mkreq(&q, "path=a*b\\c", false), buf, sizeof(buf));
    assert_string_equal(buf, "privileged only");
    assert_int_equal(rules_why_not(rules, 1, mkreq(&q, "path=a*b\\c", true), buf, sizeof(buf)),
                     0);
    assert_string_equal(match_str(rules, "path=a*b\\c", true), "1");
    assert_string_equal(match_str(rules, "path=axb\\c", true), "3");
    rules_why_not(rules, 3, mkreq(&q, "", false), buf, sizeof(buf));
    assert_string_equal(buf, "");
    rules_free(rules);
    rules_spec_free(&spec);
}

/* ---- property test: the index against a naive scan ---------------------- */

#define P_KEYS "abcde"

struct prule {
    char key[4][2];
    char val[4][8];
    int n;
    enum rules_policy policy;
    enum rules_source source;
};

static bool ref_glob(const char *p, const char *s)
{
    char c;

    if (!*p)
        return !*s;
    if (*p == '*')
        return ref_glob(p + 1, s) || (*s && ref_glob(p, s + 1));
    c = *p++;
    if (c == '\\' && *p)
        c = *p++;
    return *s == c && ref_glob(p, s + 1);
}

static bool ref_rule(const struct prule *r, const struct rules_req *req)
{
    if (r->source == RULES_SOURCE_PRIVILEGED && !req->privileged)
        return false;
    for (int i = 0; i < r->n; i++) {
        const char *v = NULL;

        for (unsigned k = 0; k < req->n_kv; k++) {
            if (strcmp(req->kv[k].key, r->key[i]) == 0)
                v = req->kv[k].value;
        }
        if (!v || (strcmp(r->val[i], "*") != 0 && !ref_glob(r->val[i], v)))
            return false;
    }
    return true;
}

/* First-match scan of @rules[0..n) plus the default (index n). */
static size_t ref_match(const struct prule *rules, size_t n, const struct rules_req *req,
                        uint32_t *out)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        if (!ref_rule(&rules[i], req))
            continue;
        out[k++] = (uint32_t)i;
        if (rules[i].policy == RULES_POLICY_STOP)
            return k;
    }
    out[k++] = (uint32_t)n;
    return k;
}

static void rand_value(char *v)
{
    static const char *const toks[] = { "x", "y", "x", "y", "*", "\\*" };
    int n = rand() % 4, o = 0;

    if (rand() % 6 == 0) {
        strcpy(v, "*");
        return;
    }
    for (int i = 0; i < n; i++) {
        const char *t = toks[rand() % 6];

        strcpy(v + o, t);
        o += (int)strlen(t);
    }
    v[o] = '\0';
}

static void rand_prule(struct prule *r)
{
    char used[8] = { 0 };

    memset(r, 0, sizeof(*r));
    r->n = rand() % 4;
    for (int i = 0; i < r->n; i++) {
        int k;

        do
            k = rand() % 5;
        while (used[k]);
        used[k] = 1;
        r->key[i][0] = P_KEYS[k];
        rand_value(r->val[i]);
    }
    r->policy = rand() % 5 == 0 ? (rand() % 2 ? RULES_POLICY_CANARY : RULES_POLICY_CONTINUE)
                                : RULES_POLICY_STOP;
    r->source = rand() % 6 == 0 ? RULES_SOURCE_PRIVILEGED : RULES_SOURCE_ANY;
}

static void build_spec(struct rules_spec *spec, const struct prule *rules, size_t n)
{
    rules_spec_free(spec);
    for (size_t i = 0; i < n; i++) {
        struct rules_rule_spec *r;
        char label[32];

        assert_int_equal(rules_spec_add(spec, FILE_NAME, (unsigned)i + 1, &r), 0);
        r->credit_limit = 1;
        r->reset_seconds = 1;
        r->policy = rules[i].policy;
        r->source = rules[i].source;
        snprintf(label, sizeof(label), "r%zu", i);        /* ids never collide */
        r->label = strdup(label);
        for (int k = 0; k < rules[i].n; k++)
            assert_int_equal(rules_spec_add_match(r, rules[i].key[k], rules[i].val[k], 0), 0);
    }
    add_default(spec, 1000);
}

static const struct rules_req *rand_req(struct req *q)
{
    static const char *const vals[] = { "", "x", "y", "xy", "yx", "xx", "x*", "*", "xyx", "yy" };
    char text[128];
    int o = 0;

    for (int k = 0; k < 5; k++) {
        if (rand() % 3 == 0)
            continue;
        o += snprintf(text + o, sizeof(text) - (size_t)o, "%s%c=%s", o ? " " : "", P_KEYS[k],
                      vals[rand() % 10]);
    }
    text[o] = '\0';
    return mkreq(q, text, rand() % 2);
}

static void test_rules_match_agrees_with_naive_scan(void **state)
{
    struct rules_spec spec = { 0 };
    struct prule pr[24];
    uint32_t got[RULES_MATCH_MAX], want[RULES_MATCH_MAX];
    long compared = 0, rejected = 0;

    (void)state;
    srand(4);
    for (int set = 0; set < 400; set++) {
        size_t n = 0;
        struct rules *rules;

        /* Grow a valid rule set; candidates the validator rejects as unreachable
         * must really be shadowed (soundness of the reachability check). */
        for (int tries = 0; tries < 40 && n < 20; tries++) {
            struct diag d;

            rand_prule(&pr[n]);
            build_spec(&spec, pr, n + 1);
            diag_init(&d);
            if (rules_validate(&spec, &d) == 0) {
                n++;
                continue;
            }
            rejected++;
            for (size_t e = 0; e < d.n; e++) {
                /* the rule reported: the candidate, or the default behind it */
                size_t u = d.e[e].line == 1000 ? n + 1 : d.e[e].line - 1;

                assert_non_null(strstr(d.e[e].msg, "unreachable"));
                assert_true(u == n || u == n + 1);
                for (int k = 0; k < 50; k++) {
                    struct req q;
                    const struct rules_req *req = rand_req(&q);
                    size_t m;

                    if (u == n && !ref_rule(&pr[n], req))
                        continue;
                    m = ref_match(pr, u, req, want);
                    assert_true(want[m - 1] < u);     /* an earlier stop rule decides */
                    assert_int_equal(pr[want[m - 1]].policy, RULES_POLICY_STOP);
                }
            }
        }
        build_spec(&spec, pr, n);
        rules = compile_ok(&spec);
        for (int k = 0; k < 300; k++) {
            struct req q;
            const struct rules_req *req = rand_req(&q);
            size_t a = rules_match(rules, req, got);
            size_t b = ref_match(pr, n, req, want);

            assert_int_equal(a, b);
            assert_memory_equal(got, want, a * sizeof(got[0]));
            compared++;
        }
        rules_free(rules);
    }
    assert_true(compared >= 100000);
    assert_true(rejected > 100);
    rules_spec_free(&spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules_divvy_example_matches),
        cmocka_unit_test(test_rules_policies_collect_in_order),
        cmocka_unit_test(test_rules_privileged_source),
        cmocka_unit_test(test_rules_validate_limits),
        cmocka_unit_test(test_rules_validate_privileged_not_fast_path),
        cmocka_unit_test(test_rules_validate_token_bucket),
        cmocka_unit_test(test_rules_validate_actor),
        cmocka_unit_test(test_rules_validate_labels),
        cmocka_unit_test(test_rules_validate_match_keys),
        cmocka_unit_test(test_rules_validate_default),
        cmocka_unit_test(test_rules_validate_too_many_side_rules),
        cmocka_unit_test(test_rules_validate_reports_every_problem),
        cmocka_unit_test(test_rules_unreachable_cases),
        cmocka_unit_test(test_rules_unreachable_through_index),
        cmocka_unit_test(test_rules_id_stable_across_limits),
        cmocka_unit_test(test_rules_id_label),
        cmocka_unit_test(test_rules_id_duplicate_rejected),
        cmocka_unit_test(test_rules_blob_round_trip),
        cmocka_unit_test(test_rules_blob_corrupt),
        cmocka_unit_test(test_rules_actor_values),
        cmocka_unit_test(test_rules_actor_mapped),
        cmocka_unit_test(test_rules_describe_and_why_not),
        cmocka_unit_test(test_rules_match_agrees_with_naive_scan),
    };

    return cmocka_run_group_tests_name("rules", tests, NULL, NULL);
}
