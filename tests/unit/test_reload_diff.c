/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/reload_diff.c: rules paired by id, then by file:line
 * unless both carry labels; the counters verdict (kept, moved on a table
 * change, fresh on a new id or store, unused when removed); the fields
 * listed; the report bounded at RELOAD_DIFF_LINES_MAX lines with the rest
 * counted; restart-only settings named with both values, secrets only as
 * set or unset.
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

#include "config.h"
#include "daemon/reload_diff.h"

struct r {
    const char *path;           /* match path=... */
    const char *label;          /* or NULL */
    unsigned line;
    int64_t limit;
    bool fast_path;
    enum rules_store store;
};

/* Compiles @n rules (then a default rule) as if from "f.conf". */
static struct rules *compile(const struct r *rs, size_t n)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *s;
    struct rules *rules = NULL;
    struct diag d;

    diag_init(&d);
    for (size_t i = 0; i <= n; i++) {
        assert_int_equal(rules_spec_add(&spec, "f.conf", i < n ? rs[i].line : 1000, &s), 0);
        s->reset_seconds = 60;
        if (i == n) {
            s->is_default = true;
            s->credit_limit = 0;
            s->reset_seconds = 0;
            continue;
        }
        s->credit_limit = rs[i].limit;
        s->fast_path = rs[i].fast_path;
        s->store = rs[i].store;
        s->store_set = true;
        assert_int_equal(rules_spec_add_match(s, "path", rs[i].path, 0), 0);
        if (rs[i].label)
            assert_non_null(s->label = strdup(rs[i].label));
    }
    if (rules_compile(&spec, 1, &rules, &d) < 0) {
        char msg[512];

        diag_format(&d, 0, msg, sizeof(msg));
        fail_msg("compile: %s", msg);
    }
    rules_spec_free(&spec);
    return rules;
}

static const char *line_with(const struct reload_diff *d, const char *needle)
{
    for (size_t i = 0; i < d->n; i++) {
        if (strstr(d->lines[i], needle))
            return d->lines[i];
    }
    fail_msg("no line with %s", needle);
    return NULL;
}

static void diff(const struct r *a, size_t na, const struct r *b, size_t nb,
                 struct reload_diff *ret)
{
    struct reload_settings none = { 0 };
    struct rules *ra = compile(a, na), *rb = compile(b, nb);

    memset(ret, 0, sizeof(*ret));
    assert_int_equal(reload_diff(ra, rb, &none, &none, ret), 0);
    rules_free(ra);
    rules_free(rb);
}

static void test_reload_diff_rules(void **state)
{
    const struct r before[] = {
        { "/keep", "keep", 1, 10, false, RULES_STORE_LOCAL },
        { "/lim", "lim", 2, 10, false, RULES_STORE_LOCAL },
        { "/tbl", "tbl", 3, 10, false, RULES_STORE_LOCAL },
        { "/st", "st", 4, 10, false, RULES_STORE_LOCAL },
        { "/gone", "gone", 5, 10, false, RULES_STORE_LOCAL },
        { "/anon", NULL, 6, 10, false, RULES_STORE_LOCAL },
    };
    const struct r after[] = {
        { "/keep", "keep", 11, 10, false, RULES_STORE_LOCAL },     /* moved lines only */
        { "/lim", "lim", 2, 20, false, RULES_STORE_LOCAL },
        { "/tbl", "tbl", 3, 10, true, RULES_STORE_LOCAL },
        { "/st", "st", 4, 10, false, RULES_STORE_STRICT },
        { "/new", "new", 5, 10, false, RULES_STORE_LOCAL },        /* gone's line */
        { "/anon2", NULL, 6, 10, false, RULES_STORE_LOCAL },
    };
    struct reload_diff d;

    (void)state;
    diff(before, 6, after, 6, &d);
    assert_int_equal(d.added, 1);
    assert_int_equal(d.removed, 1);
    assert_int_equal(d.changed, 4);
    assert_int_equal(d.n, 6);
    assert_non_null(strstr(line_with(&d, "\"lim\""), "change=changed counters=kept "
                                                      "fields=credit_limit"));
    assert_non_null(strstr(line_with(&d, "\"tbl\""), "counters=moved fields=fast_path"));
    assert_non_null(strstr(line_with(&d, "\"st\""), "counters=fresh fields=store"));
    assert_non_null(strstr(line_with(&d, "\"gone\""), "change=removed counters=unused"));
    assert_non_null(strstr(line_with(&d, "\"new\""), "change=added counters=fresh"));
    assert_non_null(strstr(line_with(&d, "was="), "counters=fresh"));
    assert_non_null(strstr(line_with(&d, "was="), "fields=match"));
    reload_diff_free(&d);
}

/* Rules "a" (path /a) and "b" (path /b), labelled, of algorithms @a and
 * @b (a token_bucket continuous when @b_cont), then a default rule. */
static struct rules *compile_algos(enum rules_algo a, enum rules_algo b, bool b_cont)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *s;
    struct rules *rules = NULL;
    struct diag d;

    diag_init(&d);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(rules_spec_add(&spec, "f.conf", (unsigned)i + 1, &s), 0);
        s->credit_limit = i < 2 ? 10 : 0;
        s->reset_seconds = i < 2 ? 60 : 0;
        s->is_default = i == 2;
        if (i == 2)
            continue;
        s->algo = i == 0 ? a : b;
        s->continuous = s->refill_set = i == 1 && b_cont;
        assert_int_equal(rules_spec_add_match(s, "path", i == 0 ? "/a" : "/b", 0), 0);
        assert_non_null(s->label = strdup(i == 0 ? "a" : "b"));
    }
    assert_int_equal(rules_compile(&spec, 1, &rules, &d), 0);
    rules_spec_free(&spec);
    return rules;
}

/* A labelled rule whose algorithm changed, or its refill between steps
 * and continuous, keeps its id but not its counters (docs/rules.md
 * "Algorithms"): fresh, not kept. */
static void test_reload_diff_algorithm(void **state)
{
    struct reload_settings none = { 0 };
    struct rules *ra = compile_algos(RULES_ALGO_WINDOW, RULES_ALGO_TOKEN_BUCKET, false);
    struct rules *rb = compile_algos(RULES_ALGO_GCRA, RULES_ALGO_TOKEN_BUCKET, true);
    struct reload_diff d;

    (void)state;
    memset(&d, 0, sizeof(d));
    assert_int_equal(reload_diff(ra, rb, &none, &none, &d), 0);
    rules_free(ra);
    rules_free(rb);
    assert_int_equal(d.changed, 2);
    assert_non_null(strstr(line_with(&d, "\"a\""), "counters=fresh fields=algorithm"));
    assert_non_null(strstr(line_with(&d, "\"b\""), "counters=fresh fields=refill "));
    reload_diff_free(&d);
}

static void test_reload_diff_bounded(void **state)
{
    enum { N = RELOAD_DIFF_LINES_MAX + 50 };
    struct r *before = calloc(N, sizeof(*before)), *after = calloc(N, sizeof(*after));
    char (*paths)[16] = calloc(N, sizeof(*paths));
    struct reload_diff d;

    (void)state;
    assert_non_null(before);
    assert_non_null(after);
    assert_non_null(paths);
    for (size_t i = 0; i < N; i++) {
        snprintf(paths[i], sizeof(paths[i]), "/p%zu", i);
        before[i] = (struct r){ paths[i], NULL, (unsigned)i + 1, 10, false, RULES_STORE_LOCAL };
        after[i] = before[i];
        after[i].limit = 11;
    }
    diff(before, N, after, N, &d);
    assert_int_equal(d.changed, N);
    assert_int_equal(d.n, RELOAD_DIFF_LINES_MAX);
    assert_int_equal(d.dropped, 50);
    reload_diff_free(&d);
    free(before);
    free(after);
    free(paths);
}

static void test_reload_diff_settings(void **state)
{
    struct config a = { 0 }, b = { 0 };
    struct reload_settings sa, sb;
    struct reload_diff d = { 0 };
    struct rules *r;
    const struct r one[] = { { "/x", NULL, 1, 1, false, RULES_STORE_LOCAL } };
    char *listen[] = { "tcp:127.0.0.1:8321" };
    const char *l;

    (void)state;
    a.listen = listen;
    a.n_listen = 1;
    b = a;
    b.metrics_listen = "tcp:127.0.0.1:9100";
    b.redis.password = "hunter2";
    b.table_slots = 128;
    assert_int_equal(reload_settings_take(&a, &sa), 0);
    assert_int_equal(reload_settings_take(&b, &sb), 0);
    r = compile(one, 1);
    assert_int_equal(reload_diff(r, r, &sa, &sb, &d), 0);
    assert_int_equal(d.restart, 3);
    assert_int_equal(d.changed + d.added + d.removed, 0);
    l = line_with(&d, "setting=metrics.listen");
    assert_string_equal(l, "setting=metrics.listen change=restart running=\"\" "
                           "configured=\"tcp:127.0.0.1:9100\"");
    l = line_with(&d, "setting=redis.password ");
    assert_null(strstr(l, "hunter2"));
    assert_non_null(strstr(l, "configured=\"(set)\""));
    line_with(&d, "setting=table.slots");
    reload_diff_free(&d);
    rules_free(r);
    reload_settings_free(&sa);
    reload_settings_free(&sb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reload_diff_rules),
        cmocka_unit_test(test_reload_diff_algorithm),
        cmocka_unit_test(test_reload_diff_bounded),
        cmocka_unit_test(test_reload_diff_settings),
    };

    return cmocka_run_group_tests_name("reload_diff", tests, NULL, NULL);
}
