/* SPDX-License-Identifier: MIT */
/*
 * Tests of the matcher's indexes (common/rules_match.c, rules_index.c): the
 * exact-pair buckets and the glob prefix index against a linear first-match
 * walk over every rule (rules_why_not(), which tests one rule without any
 * index), on random rule sets heavy in nested glob prefixes, presence and
 * exact values; the scan fallback for a value under more nested prefixes
 * than a request may merge; and 100,000 rules compiled and matched.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "rules.h"

#define FILE_NAME "index.conf"
#define KEYS      "abc"

/* ---- helpers --------------------------------------------------------------- */

struct xreq {
    struct rules_req r;
    struct proto_kv kv[4];
    char val[4][16];
};

/* One rule of a random set: up to 3 keys with their values. */
struct xrule {
    char key[3][2];
    char val[3][16];
    int n;
    enum rules_policy policy;
    enum rules_source source;
    bool dropped;               /* reported unreachable: left out */
};

static void rand_xy(char *out, int max)
{
    int n = rand() % (max + 1);

    for (int i = 0; i < n; i++)
        out[i] = rand() % 4 ? (rand() % 2 ? 'x' : 'y') : '*';
    out[n] = '\0';
}

/* Mostly globs whose literal prefixes nest (x, xy, xyx...), some escaped
 * stars, exact values and presence. */
static void rand_value(char *v)
{
    static const char *const tails[] = { "*", "*", "*x", "*y*", "x*", "\\**" };
    char pre[8];
    int k = rand() % 10;

    rand_xy(pre, 5);
    for (char *p = pre; *p; p++) {
        if (*p == '*')
            *p = 'x';
    }
    if (k < 6)
        snprintf(v, 16, "%s%s", pre, tails[rand() % 6]);
    else if (k < 8)
        snprintf(v, 16, "%s", pre[0] ? pre : "x");
    else
        snprintf(v, 16, "*");
}

static void rand_rule(struct xrule *r, int *n_side)
{
    char used[3] = { 0 };

    memset(r, 0, sizeof(*r));
    r->n = 1 + rand() % 3;
    for (int i = 0; i < r->n; i++) {
        int k;

        do
            k = rand() % 3;
        while (used[k]);
        used[k] = 1;
        r->key[i][0] = KEYS[k];
        rand_value(r->val[i]);
    }
    r->policy = RULES_POLICY_STOP;
    if (*n_side < 40 && rand() % 8 == 0) {
        r->policy = rand() % 2 ? RULES_POLICY_CANARY : RULES_POLICY_CONTINUE;
        ++*n_side;
    }
    r->source = rand() % 8 == 0 ? RULES_SOURCE_PRIVILEGED : RULES_SOURCE_ANY;
}

static void add_default(struct rules_spec *spec, unsigned line)
{
    struct rules_rule_spec *r;

    assert_int_equal(rules_spec_add(spec, FILE_NAME, line, &r), 0);
    r->credit_limit = 0;
    r->reset_seconds = 0;
    r->is_default = true;
}

/* The kept rules of @xr as a spec; rule i has line i + 1. */
static void to_spec(struct rules_spec *spec, const struct xrule *xr, size_t n)
{
    struct rules_rule_spec *r;

    rules_spec_free(spec);
    for (size_t i = 0; i < n; i++) {
        char label[16];

        if (xr[i].dropped)
            continue;
        assert_int_equal(rules_spec_add(spec, FILE_NAME, (unsigned)i + 1, &r), 0);
        r->credit_limit = 1;
        r->reset_seconds = 1;
        r->policy = xr[i].policy;
        r->source = xr[i].source;
        snprintf(label, sizeof(label), "x%zu", i);
        r->label = strdup(label);
        assert_non_null(r->label);
        for (int k = 0; k < xr[i].n; k++)
            assert_int_equal(rules_spec_add_match(r, xr[i].key[k], xr[i].val[k], 0), 0);
    }
    add_default(spec, 100000);
}

/* Drops what the validator reports unreachable until the set is valid. */
static struct rules *compile_valid(struct rules_spec *spec, struct xrule *xr, size_t n)
{
    struct rules *rules = NULL;

    for (int round = 0; round < 100; round++) {
        struct diag d;

        to_spec(spec, xr, n);
        diag_init(&d);
        if (rules_compile(spec, 1, &rules, &d) == 0)
            return rules;
        assert_true(d.n > 0);
        for (size_t e = 0; e < d.n; e++) {
            assert_non_null(strstr(d.e[e].msg, "unreachable"));
            assert_true(d.e[e].line >= 1 && d.e[e].line <= n);
            xr[d.e[e].line - 1].dropped = true;
        }
    }
    fail_msg("no valid rule set after 100 rounds");
    return NULL;
}

static int kv_order(const void *x, const void *y)
{
    return strcmp(((const struct proto_kv *)x)->key, ((const struct proto_kv *)y)->key);
}

static const struct rules_req *rand_req(struct xreq *q)
{
    static const char *const keys[] = { "a", "b", "c", "d" };

    memset(q, 0, sizeof(*q));
    for (int k = 0; k < 4; k++) {
        struct proto_kv *kv;

        if (rand() % 4 == 0)
            continue;
        kv = &q->kv[q->r.n_kv];
        rand_xy(q->val[q->r.n_kv], 7);
        kv->key = keys[k];
        kv->key_len = 1;
        kv->value = q->val[q->r.n_kv];
        kv->value_len = (uint16_t)strlen(kv->value);
        q->r.n_kv++;
    }
    qsort(q->kv, q->r.n_kv, sizeof(q->kv[0]), kv_order);
    q->r.kv = q->kv;
    q->r.privileged = rand() % 2;
    return &q->r;
}

/* First-match order without any index: every rule tested, in order. */
static size_t linear_match(const struct rules *rules, const struct rules_req *req,
                           uint32_t *out)
{
    size_t n = 0;
    char why[256];

    for (uint32_t i = 0; i < rules_count(rules); i++) {
        struct rules_rule r;

        assert_true(rules_why_not(rules, i, req, why, sizeof(why)) >= 0);
        if (why[0])
            continue;
        out[n++] = i;
        assert_int_equal(rules_get(rules, i, &r), 0);
        if (r.policy == RULES_POLICY_STOP || n == RULES_MATCH_MAX)
            break;
    }
    return n;
}

static void expect_match(const struct rules *rules, const struct rules_req *req)
{
    uint32_t got[RULES_MATCH_MAX], want[RULES_MATCH_MAX];
    size_t a = rules_match(rules, req, got);
    size_t b = linear_match(rules, req, want);

    assert_int_equal(a, b);
    assert_memory_equal(got, want, a * sizeof(got[0]));
}

/* ---- tests ------------------------------------------------------------------ */

static void test_index_agrees_with_linear_walk(void **state)
{
    struct rules_spec spec = { 0 };
    struct xrule *xr = calloc(200, sizeof(*xr));
    long compared = 0, dropped = 0;

    (void)state;
    assert_non_null(xr);
    srand(20);
    for (int set = 0; set < 120; set++) {
        size_t n = 1 + (size_t)rand() % 200;
        int n_side = 0;
        struct rules *rules;

        for (size_t i = 0; i < n; i++)
            rand_rule(&xr[i], &n_side);
        rules = compile_valid(&spec, xr, n);
        for (size_t i = 0; i < n; i++)
            dropped += xr[i].dropped;
        for (int k = 0; k < 400; k++) {
            struct xreq q;

            expect_match(rules, rand_req(&q));
            compared++;
        }
        rules_free(rules);
    }
    assert_true(compared >= 48000);
    assert_true(dropped > 100);         /* the sets were dense enough to shadow */
    rules_spec_free(&spec);
    free(xr);
}

/* 40 nested prefixes x^40* .. x*, continue rules: a value of 45 x's starts
 * with all of them, more lists than one request merges, so the matcher
 * scans every rule; each must still be found. */
static void test_index_deep_nesting_scans(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    struct rules *rules = NULL;
    struct diag d;
    char v[64];
    struct xreq q;

    (void)state;
    for (int i = 0; i < 40; i++) {
        memset(v, 'x', (size_t)(40 - i));
        strcpy(v + 40 - i, "*");
        assert_int_equal(rules_spec_add(&spec, FILE_NAME, (unsigned)i + 1, &r), 0);
        r->credit_limit = 1;
        r->reset_seconds = 1;
        r->policy = RULES_POLICY_CONTINUE;
        assert_int_equal(rules_spec_add_match(r, "a", v, 0), 0);
    }
    add_default(&spec, 99);
    diag_init(&d);
    assert_int_equal(rules_compile(&spec, 1, &rules, &d), 0);
    for (int len = 0; len <= 45; len++) {
        uint32_t got[RULES_MATCH_MAX];
        size_t n, fit = len < 40 ? (size_t)len : 40;

        memset(&q, 0, sizeof(q));
        memset(v, 'x', (size_t)len);
        q.kv[0] = (struct proto_kv){ "a", v, 1, (uint16_t)len };
        q.r.kv = q.kv;
        q.r.n_kv = 1;
        /* every rule whose prefix fits, x^(40-i) with 40 - i <= len, then the default */
        n = rules_match(rules, &q.r, got);
        assert_int_equal(n, fit + 1);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(got[i], 40 - fit + i);
        expect_match(rules, &q.r);
    }
    rules_free(rules);
    rules_spec_free(&spec);
}

/* 100,000 rules: 98,000 exact paths, 1,999 glob paths, the default. */
static void test_index_hundred_thousand_rules(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    struct rules *rules = NULL;
    struct diag d;
    char v[32];
    static const struct {
        const char *path;
        uint32_t want;
    } cases[] = {
        { "/r0", 0 }, { "/r97999", 97999 }, { "/g0/x", 98000 }, { "/g1998/", 99998 },
        { "/g19", 99999 }, { "/g1998", 99999 }, { "/bench", 99999 }, { "", 99999 },
    };

    (void)state;
    for (unsigned i = 0; i < 99999; i++) {
        if (i < 98000)
            snprintf(v, sizeof(v), "/r%u", i);
        else
            snprintf(v, sizeof(v), "/g%u/*", i - 98000);
        assert_int_equal(rules_spec_add(&spec, FILE_NAME, i + 1, &r), 0);
        r->credit_limit = 100;
        r->reset_seconds = 60;
        assert_int_equal(rules_spec_add_match(r, "path", v, 0), 0);
        assert_int_equal(rules_spec_add_match(r, "actor", "*", 0), 0);
        assert_int_equal(rules_spec_add_actor(r, "actor"), 0);
    }
    add_default(&spec, 100000);
    diag_init(&d);
    assert_int_equal(rules_compile(&spec, 1, &rules, &d), 0);
    assert_int_equal(rules_count(rules), 100000);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint32_t got[RULES_MATCH_MAX];
        struct xreq q;

        memset(&q, 0, sizeof(q));
        q.kv[0] = (struct proto_kv){ "actor", "n", 5, 1 };
        q.kv[1] = (struct proto_kv){ "path", cases[i].path, 4,
                                     (uint16_t)strlen(cases[i].path) };
        q.r.kv = q.kv;
        q.r.n_kv = 2;
        assert_int_equal(rules_match(rules, &q.r, got), 1);
        assert_int_equal(got[0], cases[i].want);
    }
    rules_free(rules);
    rules_spec_free(&spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_agrees_with_linear_walk),
        cmocka_unit_test(test_index_deep_nesting_scans),
        cmocka_unit_test(test_index_hundred_thousand_rules),
    };

    return cmocka_run_group_tests_name("rules_index", tests, NULL, NULL);
}
