/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/tables.c: which counters tables_settle() carries to
 * the table their rule now uses, against real compiled rules and three real
 * tables (a fast table in a memfd, private and privileged files in a
 * temporary directory).  A counter leaves the fast table only for a rule of
 * the trusted set, with its algorithm (issue 18 item 3: a divvy-fast member
 * writes any slot there), never for the privileged table; counters of the
 * daemon-only tables move as before.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "clock.h"
#include "diag.h"
#include "eval.h"
#include "daemon/tables.h"

struct fixture {
    char dir[64];
    struct tables tb;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct table_open_info info;
    char path[128];

    if (!f)
        return -1;
    strcpy(f->dir, "/tmp/divvy-test-tables-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    if (table_create_memfd(TABLE_SLOTS_MIN, &f->tb.fast) < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/private.table", f->dir);
    if (table_open(path, TABLE_SLOTS_MIN, 0600, &f->tb.priv, &info) < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/privileged.table", f->dir);
    if (table_open(path, TABLE_SLOTS_MIN, 0600, &f->tb.privileged, &info) < 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char cmd[128];

    table_close(f->tb.fast);
    table_close(f->tb.priv);
    table_close(f->tb.privileged);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static void add_rule(struct rules_spec *spec, const char *label, bool fast, enum rules_algo algo,
                     enum rules_source source)
{
    struct rules_rule_spec *r;

    assert_int_equal(rules_spec_add(spec, "test.conf", (unsigned)spec->n + 1, &r), 0);
    assert_int_equal(rules_spec_add_match(r, "k", label, 0), 0);
    assert_int_equal(rules_spec_add_actor(r, "u"), 0);
    r->label = strdup(label);
    assert_non_null(r->label);
    r->credit_limit = 10;
    r->reset_seconds = 3600;
    r->fast_path = fast;
    r->algo = algo;
    r->source = source;
}

/* Rule a (fast_path @a_fast, algorithm @a_algo, source @a_source), rule b
 * (private) and rule p (source = privileged), then the default rule. */
static struct rules *compile_source(bool a_fast, enum rules_algo a_algo,
                                    enum rules_source a_source)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    struct rules *rules = NULL;
    struct diag diag;

    add_rule(&spec, "a", a_fast, a_algo, a_source);
    add_rule(&spec, "b", false, RULES_ALGO_WINDOW, RULES_SOURCE_ANY);
    add_rule(&spec, "p", false, RULES_ALGO_WINDOW, RULES_SOURCE_PRIVILEGED);
    assert_int_equal(rules_spec_add(&spec, "test.conf", 4, &r), 0);
    r->credit_limit = 0;
    r->reset_seconds = 0;
    r->is_default = true;
    diag_init(&diag);
    if (rules_compile(&spec, 1, &rules, &diag) < 0)
        fail_msg("%s", diag.n ? diag.e[0].msg : "rules_compile failed");
    rules_spec_free(&spec);
    return rules;
}

static struct rules *compile(bool a_fast, enum rules_algo a_algo)
{
    return compile_source(a_fast, a_algo, RULES_SOURCE_ANY);
}

static struct rules_rule rule_of(const struct rules *rules, const char *label)
{
    struct rules_rule r = { 0 };

    for (uint32_t i = 0; i < rules_count(rules); i++)
        if (rules_get(rules, i, &r) == 0 && strcmp(r.label, label) == 0)
            return r;
    fail_msg("no rule %s", label);
    return r;
}

/* @op of @n on rule @label's counter of actor "u1" in @t, under @rules'
 * limits for it; returns the credit left. */
static uint64_t hit(struct table *t, const struct rules *rules, const char *label,
                    enum table_op op, uint64_t n)
{
    struct rules_rule r = rule_of(rules, label);
    struct table_limits lim;
    struct table_result res;

    eval_limits(&r, &lim);
    assert_int_equal(table_hit(t, &(struct table_key){ r.id, "u1", 2 }, &lim, op, n,
                               clock_now_ms(), &res), 0);
    return res.credit;
}

static void test_tables_fast_rules(void **state)
{
    struct fixture *f = *state;
    struct rules *rules = compile(true, RULES_ALGO_WINDOW);
    struct fastrules fr = { 0 };

    assert_int_equal(tables_fast_rules(&f->tb, rules, 7, &fr), 0);
    assert_int_equal(fr.generation, 7);
    assert_int_equal(fr.n, 1);
    assert_true(fastrules_has(&fr, rule_of(rules, "a").id, RULES_ALGO_WINDOW));
    assert_false(fastrules_has(&fr, rule_of(rules, "a").id, RULES_ALGO_TOKEN_BUCKET));
    assert_false(fastrules_has(&fr, rule_of(rules, "b").id, RULES_ALGO_WINDOW));
    assert_false(fastrules_has(&fr, rule_of(rules, "p").id, RULES_ALGO_WINDOW));
    assert_false(fastrules_has(NULL, rule_of(rules, "a").id, RULES_ALGO_WINDOW));
    fastrules_free(&fr);
    rules_free(rules);
}

/* Rule a leaves the fast path: its counter moves (it was fast_path), those
 * planted in the fast table for b and p stay there, unused. */
static void test_tables_settle_trusts_only_fast_rules(void **state)
{
    struct fixture *f = *state;
    struct rules *old = compile(true, RULES_ALGO_WINDOW), *now = compile(false, RULES_ALGO_WINDOW);
    struct fastrules trusted = { 0 };

    assert_int_equal(hit(f->tb.fast, old, "a", TABLE_TAKE, 3), 7);
    /* A member's plants: rules it has no say over, in debt. */
    assert_int_equal(hit(f->tb.fast, old, "b", TABLE_DEBIT, 1000000000000ULL), 0);
    assert_int_equal(hit(f->tb.fast, old, "p", TABLE_DEBIT, 1000000000000ULL), 0);
    /* A counter of b in its own table moves nowhere. */
    assert_int_equal(hit(f->tb.priv, old, "b", TABLE_TAKE, 1), 9);

    assert_int_equal(tables_fast_rules(&f->tb, old, 1, &trusted), 0);
    assert_int_equal(tables_changed(&f->tb, old, now), 1);
    assert_int_equal(tables_settle(&f->tb, now, &trusted, true, NULL, "test"), 0);
    assert_int_equal(hit(f->tb.priv, now, "a", TABLE_PEEK, 0), 7);     /* moved */
    assert_int_equal(hit(f->tb.fast, now, "a", TABLE_PEEK, 0), 10);    /* ... out */
    assert_int_equal(hit(f->tb.priv, now, "b", TABLE_PEEK, 0), 9);     /* not the plant */
    assert_int_equal(hit(f->tb.privileged, now, "p", TABLE_PEEK, 0), 10);
    assert_int_equal(hit(f->tb.fast, now, "b", TABLE_PEEK, 0), 0);     /* left there */

    /* And back: counters of the daemon-only tables always move. */
    assert_int_equal(tables_settle(&f->tb, old, NULL, true, NULL, "test"), 0);
    assert_int_equal(hit(f->tb.fast, old, "a", TABLE_PEEK, 0), 7);
    assert_int_equal(hit(f->tb.priv, old, "a", TABLE_PEEK, 0), 10);
    fastrules_free(&trusted);
    rules_free(old);
    rules_free(now);
}

/* No record (a start without fast.rules): nothing leaves the fast table. */
static void test_tables_settle_trusts_nothing_without_record(void **state)
{
    struct fixture *f = *state;
    struct rules *old = compile(true, RULES_ALGO_WINDOW), *now = compile(false, RULES_ALGO_WINDOW);
    struct fastrules empty = { 0 };

    assert_int_equal(hit(f->tb.fast, old, "a", TABLE_TAKE, 3), 7);
    assert_int_equal(tables_settle(&f->tb, now, NULL, true, NULL, "test"), 0);
    assert_int_equal(hit(f->tb.priv, now, "a", TABLE_PEEK, 0), 10);
    assert_int_equal(tables_settle(&f->tb, now, &empty, true, NULL, "test"), 0);
    assert_int_equal(hit(f->tb.priv, now, "a", TABLE_PEEK, 0), 10);
    assert_int_equal(hit(f->tb.fast, now, "a", TABLE_PEEK, 0), 7);
    rules_free(old);
    rules_free(now);
}

/* Trust is per id and algorithm: a slot of a fast_path rule's id under
 * another algorithm (which no hit of that rule ever made) stays. */
static void test_tables_settle_algorithm_must_match(void **state)
{
    struct fixture *f = *state;
    struct rules *old = compile(true, RULES_ALGO_WINDOW);
    struct rules *now = compile(false, RULES_ALGO_TOKEN_BUCKET);
    struct fastrules trusted = { 0 };

    assert_int_equal(rule_of(old, "a").id, rule_of(now, "a").id);
    assert_int_equal(hit(f->tb.fast, now, "a", TABLE_DEBIT, 1000), 0);
    assert_int_equal(tables_fast_rules(&f->tb, old, 1, &trusted), 0);
    assert_int_equal(tables_settle(&f->tb, now, &trusted, true, NULL, "test"), 0);
    assert_int_equal(hit(f->tb.priv, now, "a", TABLE_PEEK, 0), 10);
    fastrules_free(&trusted);
    rules_free(old);
    rules_free(now);
}

/* Even a trusted fast_path rule's counter never becomes a privileged one. */
static void test_tables_settle_never_into_privileged(void **state)
{
    struct fixture *f = *state;
    struct rules *old = compile(true, RULES_ALGO_WINDOW);
    struct rules *now = compile_source(false, RULES_ALGO_WINDOW, RULES_SOURCE_PRIVILEGED);
    struct fastrules trusted = { 0 };

    assert_int_equal(hit(f->tb.fast, old, "a", TABLE_TAKE, 3), 7);
    assert_int_equal(tables_fast_rules(&f->tb, old, 1, &trusted), 0);
    assert_int_equal(tables_settle(&f->tb, now, &trusted, true, NULL, "test"), 0);
    assert_int_equal(hit(f->tb.privileged, now, "a", TABLE_PEEK, 0), 10);
    assert_int_equal(hit(f->tb.fast, now, "a", TABLE_PEEK, 0), 7);
    fastrules_free(&trusted);
    rules_free(old);
    rules_free(now);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tables_fast_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tables_settle_trusts_only_fast_rules, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tables_settle_trusts_nothing_without_record, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tables_settle_algorithm_must_match, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tables_settle_never_into_privileged, setup,
                                        teardown),
    };

    return cmocka_run_group_tests_name("tables", tests, NULL, NULL);
}
