/* SPDX-License-Identifier: MIT */
/*
 * Unit: server/dlog_query.c, what `divvyctl log` reads with: the times
 * --since/--until take (every form, and what is refused), RFC 3339 output,
 * the rules a log describes kept by id, and the filters (time bounds,
 * verdict, rule by label, hex id or on the path, actor).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "dlog_query.h"
#include "table.h"

/* 2026-11-28T12:00:00Z */
#define T0 1795867200000ull

static void test_dlog_query_time_forms(void **state)
{
    const uint64_t now = T0 + 3600000;
    uint64_t t = 0;

    (void)state;
    assert_int_equal(dlog_query_time("2026-11-28T12:00:00Z", now, &t), 0);
    assert_int_equal(t, T0);
    assert_int_equal(dlog_query_time("2026-11-28t12:00:00z", now, &t), 0);
    assert_int_equal(t, T0);
    assert_int_equal(dlog_query_time("2026-11-28T12:00:00.123Z", now, &t), 0);
    assert_int_equal(t, T0 + 123);
    assert_int_equal(dlog_query_time("2026-11-28T12:00:00.5Z", now, &t), 0);
    assert_int_equal(t, T0 + 500);
    assert_int_equal(dlog_query_time("2026-11-28T12:00:00.123456789Z", now, &t), 0);
    assert_int_equal(t, T0 + 123);
    assert_int_equal(dlog_query_time("2026-11-28T13:30:00+01:30", now, &t), 0);
    assert_int_equal(t, T0);
    assert_int_equal(dlog_query_time("2026-11-28T07:00:00-05:00", now, &t), 0);
    assert_int_equal(t, T0);
    assert_int_equal(dlog_query_time("2026-11-28 12:00", now, &t), 0);
    assert_int_equal(t, T0);
    assert_int_equal(dlog_query_time("2026-11-28 12:00:07", now, &t), 0);
    assert_int_equal(t, T0 + 7000);
    assert_int_equal(dlog_query_time("2026-11-28", now, &t), 0);
    assert_int_equal(t, T0 - 12 * 3600000ull);
    assert_int_equal(dlog_query_time("1970-01-01", now, &t), 0);
    assert_int_equal(t, 0);
    assert_int_equal(dlog_query_time("2024-02-29 00:00", now, &t), 0);
    assert_int_equal(t, 1709164800000ull);
    assert_int_equal(dlog_query_time("@1795867200", now, &t), 0);
    assert_int_equal(t, T0);
    assert_int_equal(dlog_query_time("@0", now, &t), 0);
    assert_int_equal(t, 0);
    assert_int_equal(dlog_query_time("-30s", now, &t), 0);
    assert_int_equal(t, now - 30000);
    assert_int_equal(dlog_query_time("-15m", now, &t), 0);
    assert_int_equal(t, now - 900000);
    assert_int_equal(dlog_query_time("-2h", now, &t), 0);
    assert_int_equal(t, now - 7200000);
    assert_int_equal(dlog_query_time("-7d", now, &t), 0);
    assert_int_equal(t, now - 7 * 86400000ull);
}

static void test_dlog_query_time_refused(void **state)
{
    static const char *const bad[] = {
        "", "yesterday", "2026-11-28T", "2026-11-28T12", "2026-11-28T12:00:00Zjunk",
        "2026-02-29", "2026-13-01", "2026-00-10", "2026-11-31", "2026-11-28T24:00:00Z",
        "2026-11-28T12:60:00Z", "2026-11-28T12:00:61Z", "2026-11-28T12:00:00.Z",
        "2026-11-28T12:00:00+1:00", "2026-11-28T12:00:00+24:00", "1969-12-31", "26-11-28",
        "2026/11/28", "-5", "-5x", "-s", "--5s", "-5s ", "@", "@12a", "@-1", "@99999999999999",
        "-99999999999d", " 2026-11-28",
    };
    uint64_t t = 42;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (dlog_query_time(bad[i], T0, &t) != -EINVAL)
            fail_msg("'%s' was accepted", bad[i]);
    }
    /* Before the epoch. */
    assert_int_equal(dlog_query_time("-2s", 1000, &t), -EINVAL);
    assert_int_equal(dlog_query_time("1970-01-01T00:30:00+01:00", T0, &t), -EINVAL);
    assert_int_equal(t, 42);
}

static void test_dlog_query_fmt_time(void **state)
{
    char buf[DLOG_QUERY_TIME_MAX];
    uint64_t back;

    (void)state;
    dlog_query_fmt_time(0, buf);
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
    dlog_query_fmt_time(T0 + 7123, buf);
    assert_string_equal(buf, "2026-11-28T12:00:07.123Z");
    dlog_query_fmt_time(1709251199999ull, buf);
    assert_string_equal(buf, "2024-02-29T23:59:59.999Z");
    /* What it prints, --since reads back. */
    for (uint64_t ms = 0; ms < 4102444800000ull; ms += 86399999ull * 37) {
        dlog_query_fmt_time(ms, buf);
        assert_int_equal(dlog_query_time(buf, 0, &back), 0);
        assert_int_equal(back, ms);
    }
    /* The largest time does not overflow the buffer. */
    dlog_query_fmt_time(UINT64_MAX, buf);
    assert_true(strlen(buf) < sizeof(buf));
}

static const char *const login_keys[] = { "user", "rhost" };
static const uint32_t login_lens[] = { 4, 5 };

static void login_rule(struct dlog_rule *r, uint64_t id, const char *label)
{
    memset(r, 0, sizeof(*r));
    r->id = id;
    r->id_str = label;
    r->id_len = (uint32_t)strlen(label);
    r->algo = RULES_ALGO_LOCKOUT;
    r->credit_limit = 3;
    r->reset_ms = 900000;
    r->prefix4 = r->prefix6 = -1;
    r->n_actor = 2;
    for (unsigned i = 0; i < 2; i++) {
        r->actor[i] = login_keys[i];
        r->actor_len[i] = login_lens[i];
    }
}

static void kv(struct dlog_decision *d, const char *k, const char *v)
{
    struct dlog_kv *p = &d->kv[d->n_kv++];

    p->key = k;
    p->key_len = (uint32_t)strlen(k);
    p->value = v;
    p->value_len = (uint32_t)strlen(v);
}

/* A TAKE by alice from 203.0.113.9 that rule 0xa1 charged and rule 0xb2 decided. */
static void take(struct dlog_decision *d, uint64_t t, bool allowed)
{
    memset(d, 0, sizeof(*d));
    d->unix_ms = t;
    d->op = TABLE_TAKE;
    d->n = 1;
    d->flags = allowed ? DLOG_F_ALLOWED : 0;
    d->uid = DLOG_UNKNOWN_ID;
    d->pid = DLOG_UNKNOWN_ID;
    d->decider_id = 0xb2;
    kv(d, "event", "authfail");
    kv(d, "rhost", "203.0.113.9");
    kv(d, "user", "alice");
    d->n_out = 2;
    d->out[0].rule_id = 0xa1;
    d->out[1].rule_id = 0xb2;
}

static struct dlog_query_rules *two_rules(void)
{
    struct dlog_query_rules *m = dlog_query_rules_new();
    struct dlog_rule rule[2];
    struct dlog_rules rs = { .generation = 1, .total = 2, .n = 2, .rule = rule };

    assert_non_null(m);
    login_rule(&rule[0], 0xa1, "login-user-source");
    login_rule(&rule[1], 0xb2, "login-local");
    rule[1].n_actor = 1;                /* user only */
    assert_int_equal(dlog_query_rules_add(m, &rs), 0);
    return m;
}

static void test_dlog_query_rules(void **state)
{
    struct dlog_query_rules *m = two_rules();
    struct dlog_rule r;
    struct dlog_rules rs = { .generation = 2, .total = 1, .n = 1, .rule = &r };
    char buf[DLOG_QUERY_ID_LEN + 1];
    char label[] = "renamed";

    (void)state;
    assert_string_equal(dlog_query_rule_name(m, 0xa1, buf, sizeof(buf)), "login-user-source");
    assert_string_equal(dlog_query_rule_name(m, 0x1234, buf, sizeof(buf)), "0000000000001234");
    assert_string_equal(dlog_query_rule_name(m, 0, buf, sizeof(buf)), "");
    /* A later description of the same id replaces it, copied. */
    login_rule(&r, 0xa1, label);
    assert_int_equal(dlog_query_rules_add(m, &rs), 0);
    memcpy(label, "XXXXXXX", 7);
    assert_string_equal(dlog_query_rule(m, 0xa1)->id_str, "renamed");
    assert_string_equal(dlog_query_rule(m, 0xa1)->actor[1], "rhost");
    assert_null(dlog_query_rule(m, 0x77));
    /* Many ids: the table grows and finds each. */
    for (uint64_t id = 1; id <= 5000; id++) {
        char name[32];

        snprintf(name, sizeof(name), "r%llu", (unsigned long long)id);
        login_rule(&r, id << 20, name);
        assert_int_equal(dlog_query_rules_add(m, &rs), 0);
    }
    assert_string_equal(dlog_query_rule(m, 4321ull << 20)->id_str, "r4321");
    assert_string_equal(dlog_query_rule(m, 0xb2)->id_str, "login-local");
    dlog_query_rules_free(m);
    dlog_query_rules_free(NULL);
}

/* A log that describes rules with huge labels cannot make the reader keep them all. */
static void test_dlog_query_rules_bounded(void **state)
{
    struct dlog_query_rules *m = dlog_query_rules_new();
    struct dlog_rule r;
    struct dlog_rules rs = { .generation = 1, .total = 1, .n = 1, .rule = &r };
    size_t len = 1u << 20;
    char *label = malloc(len);
    unsigned kept = 0;
    int rc = 0;

    (void)state;
    assert_non_null(m);
    assert_non_null(label);
    memset(label, 'x', len);
    for (uint64_t id = 1; id <= 80 && rc == 0; id++) {
        login_rule(&r, id, "");
        r.id_str = label;
        r.id_len = (uint32_t)len;
        rc = dlog_query_rules_add(m, &rs);
        kept += rc == 0;
    }
    assert_int_equal(rc, -E2BIG);
    assert_true(kept >= 60 && kept < 64);
    assert_null(dlog_query_rule(m, kept + 1));
    /* A small rule still fits; a known one may still be described again. */
    login_rule(&r, 1000, "small");
    assert_int_equal(dlog_query_rules_add(m, &rs), 0);
    login_rule(&r, 1, "one");
    assert_int_equal(dlog_query_rules_add(m, &rs), 0);
    assert_string_equal(dlog_query_rule(m, 1)->id_str, "one");
    free(label);
    dlog_query_rules_free(m);
}

static void test_dlog_query_match_time_verdict(void **state)
{
    struct dlog_query_rules *m = two_rules();
    struct dlog_query_filter f = { 0 };
    enum dlog_query_verdict v;
    struct dlog_decision d;

    (void)state;
    take(&d, T0, true);
    assert_true(dlog_query_match(&f, m, &d));
    f.since_ms = T0;
    assert_true(dlog_query_match(&f, m, &d));
    f.since_ms = T0 + 1;
    assert_false(dlog_query_match(&f, m, &d));
    f.since_ms = 0;
    f.until_ms = T0;                    /* exclusive */
    assert_false(dlog_query_match(&f, m, &d));
    f.until_ms = T0 + 1;
    assert_true(dlog_query_match(&f, m, &d));

    assert_int_equal(dlog_query_verdict_parse("denied", &v), 0);
    assert_int_equal(v, DLOG_QUERY_DENIED);
    assert_int_equal(dlog_query_verdict_parse("Denied", &v), -EINVAL);
    assert_int_equal(dlog_query_verdict_parse("", &v), -EINVAL);
    f.verdict = DLOG_QUERY_DENIED;
    assert_false(dlog_query_match(&f, m, &d));
    f.verdict = DLOG_QUERY_ALLOWED;
    assert_true(dlog_query_match(&f, m, &d));
    d.flags = DLOG_F_ERROR | DLOG_F_ALLOWED;    /* an error is neither */
    assert_false(dlog_query_match(&f, m, &d));
    f.verdict = DLOG_QUERY_DENIED;
    assert_false(dlog_query_match(&f, m, &d));
    f.verdict = DLOG_QUERY_ERROR;
    assert_true(dlog_query_match(&f, m, &d));
    d.flags = 0;
    assert_false(dlog_query_match(&f, m, &d));
    f.verdict = DLOG_QUERY_DENIED;
    assert_true(dlog_query_match(&f, m, &d));
    dlog_query_rules_free(m);
}

static void test_dlog_query_match_rule_actor(void **state)
{
    struct dlog_query_rules *m = two_rules();
    struct dlog_query_filter f = { 0 };
    struct dlog_decision d;

    (void)state;
    take(&d, T0, true);
    f.rule = "login-local";             /* the decider, by label */
    assert_true(dlog_query_match(&f, m, &d));
    f.rule = "00000000000000B2";        /* by hex id, any case */
    assert_true(dlog_query_match(&f, m, &d));
    f.rule = "login-user-source";       /* on the path */
    assert_true(dlog_query_match(&f, m, &d));
    f.rule = "login";
    assert_false(dlog_query_match(&f, m, &d));
    f.rule = "login-user-sourcex";
    assert_false(dlog_query_match(&f, m, &d));
    f.rule = "00000000000000c3";        /* a rule the request never met */
    assert_false(dlog_query_match(&f, m, &d));

    /* --actor under the --rule rule, else the decider's. */
    f.rule = "login-user-source";
    f.actor = "alice,203.0.113.9";
    assert_true(dlog_query_match(&f, m, &d));
    f.actor = "alice";
    assert_false(dlog_query_match(&f, m, &d));
    f.rule = NULL;
    assert_true(dlog_query_match(&f, m, &d));       /* login-local's actor: user */
    f.actor = "bob";
    assert_false(dlog_query_match(&f, m, &d));
    /* No deciding rule, or one the log never described: no actor. */
    f.actor = "alice";
    d.decider_id = 0;
    assert_false(dlog_query_match(&f, m, &d));
    d.decider_id = 0x99;
    assert_false(dlog_query_match(&f, m, &d));
    f.actor = NULL;
    assert_true(dlog_query_match(&f, m, &d));
    dlog_query_rules_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlog_query_time_forms),
        cmocka_unit_test(test_dlog_query_time_refused),
        cmocka_unit_test(test_dlog_query_fmt_time),
        cmocka_unit_test(test_dlog_query_rules),
        cmocka_unit_test(test_dlog_query_rules_bounded),
        cmocka_unit_test(test_dlog_query_match_time_verdict),
        cmocka_unit_test(test_dlog_query_match_rule_actor),
    };

    return cmocka_run_group_tests_name("dlog_query", tests, NULL, NULL);
}
