/* SPDX-License-Identifier: MIT */
/*
 * test_report: daemon/report.c, a REPORT line (as libdivvy writes it with
 * proto_fmt_report() and divvyd parses it with proto_parse()) checked
 * against compiled rules and turned into a decision-log record.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "dlog.h"
#include "daemon/report.h"
#include "table.h"
#include "unit_config.h"

#define NOW_MS  1000000ull
#define UNIX_MS 1800000000000ull

static const char conf[] =
    "rules = (\n"
    "  { match = { path = \"/fast\"; ip = \"*\"; }; actor = \"ip\"; credit_limit = 5;\n"
    "    reset_seconds = 60; fast_path = true; label = \"fast\"; },\n"
    "  { match = { path = \"/fast2\"; }; credit_limit = 5; reset_seconds = 60;\n"
    "    fast_path = true; label = \"fast2\"; },\n"
    "  { match = { path = \"/slow\"; }; credit_limit = 5; reset_seconds = 60; label = \"slow\"; },\n"
    "  { match = { path = \"/ban\"; }; credit_limit = 0; reset_seconds = 60; label = \"ban\"; },\n"
    "  { match = { path = \"/chain\"; }; credit_limit = 9; reset_seconds = 60;\n"
    "    match_policy = \"continue\"; label = \"chain1\"; },\n"
    "  { match = { path = \"/chain\"; }; credit_limit = 5; reset_seconds = 60;\n"
    "    fast_path = true; label = \"chain2\"; },\n"
    "  { match = { user = \"*\"; }; actor = \"user\"; credit_limit = 3; reset_seconds = 60;\n"
    "    source = \"privileged\"; label = \"login\"; },\n"
    "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static struct rules *rules;

static int setup(void **state)
{
    struct config *cfg;
    struct diag d;

    if (group_setup(state) < 0)
        return -1;
    cfg = load_ok("conf", conf);
    diag_init(&d);
    if (rules_compile(&cfg->rules, 7, &rules, &d) < 0)
        return -1;
    config_free(cfg);
    return 0;
}

static int teardown(void **state)
{
    rules_free(rules);
    return group_teardown(state);
}

/* The id of the rule labelled @label. */
static uint64_t rule_id(const char *label)
{
    struct rules_rule r;

    for (uint32_t i = 0; i < rules_count(rules); i++) {
        assert_int_equal(rules_get(rules, i, &r), 0);
        if (strcmp(r.label, label) == 0)
            return r.id;
    }
    fail_msg("no rule %s", label);
    return 0;
}

/* A REPORT line of @op written and parsed back into *@req. */
static void parse(enum proto_verb op, uint64_t mono, uint64_t n, bool allowed, uint64_t id,
                  const struct proto_kv *kv, unsigned n_kv, struct proto_req *req)
{
    struct proto_report r = { .mono_ms = mono, .credit = 4, .reset_s = 59, .rule_id = id,
                              .op = op, .allowed = allowed };
    char line[PROTO_LINE_MAX + 1];
    int len = proto_fmt_report(line, sizeof(line), &r, n, kv, n_kv);

    assert_true(len > 0);
    assert_int_equal(proto_parse(line, (size_t)len, req), len);
    assert_int_equal(req->err, PROTO_E_NONE);
    assert_int_equal(req->verb, PROTO_REPORT);
}

#define KV(k, v) { .key = k, .value = v, .key_len = sizeof(k) - 1, .value_len = sizeof(v) - 1 }

static void test_report_recorded(void **state)
{
    /* Not sorted: divvyd sorts the pairs, as for HIT. */
    const struct proto_kv kv[] = { KV("path", "/fast"), KV("ip", "192.0.2.7") };
    struct proto_req req;
    struct dlog_decision d;

    (void)state;
    parse(PROTO_TAKE, NOW_MS - 250, 3, true, rule_id("fast"), kv, 2, &req);
    assert_int_equal(report_decision(&req, rules, 1000, 4242, NOW_MS, UNIX_MS, &d), 0);
    assert_int_equal(d.mono_ms, NOW_MS - 250);
    assert_int_equal(d.unix_ms, UNIX_MS - 250);
    assert_int_equal(d.generation, 7);
    assert_int_equal(d.op, TABLE_TAKE);
    assert_int_equal(d.protocol, DLOG_PROTO_FAST);
    assert_int_equal(d.path, DLOG_PATH_LOCAL);
    assert_int_equal(d.flags, DLOG_F_REPORTED | DLOG_F_ALLOWED);
    assert_int_equal(d.n, 3);
    assert_int_equal(d.uid, 1000);
    assert_int_equal(d.pid, 4242);
    assert_int_equal(d.credit, 4);
    assert_int_equal(d.reset_s, 59);
    assert_int_equal(d.decider_id, rule_id("fast"));
    assert_int_equal(d.n_out, 0);
    assert_int_equal(d.n_kv, 2);
    assert_string_equal(d.kv[0].key, "ip");
    assert_string_equal(d.kv[0].value, "192.0.2.7");
    assert_int_equal(d.kv[0].value_len, 9);
    assert_int_equal(d.kv[0].redact, DLOG_KEEP);
    assert_string_equal(d.kv[1].key, "path");
    assert_string_equal(d.kv[1].value, "/fast");
}

static void test_report_peek_debit_denied_root(void **state)
{
    const struct proto_kv kv[] = { KV("path", "/fast2") };
    struct proto_req req;
    struct dlog_decision d;

    (void)state;
    parse(PROTO_PEEK, NOW_MS + 1000, 1, false, rule_id("fast2"), kv, 1, &req);
    assert_int_equal(report_decision(&req, rules, 0, 1, NOW_MS, UNIX_MS, &d), 0);
    assert_int_equal(d.op, TABLE_PEEK);
    assert_int_equal(d.unix_ms, UNIX_MS + 1000);
    assert_int_equal(d.flags, DLOG_F_REPORTED | DLOG_F_PRIVILEGED);
    parse(PROTO_DEBIT, NOW_MS - 60000, PROTO_DEBIT_MAX, true, rule_id("fast2"), kv, 1, &req);
    assert_int_equal(report_decision(&req, rules, 5, 6, NOW_MS, UNIX_MS, &d), 0);
    assert_int_equal(d.op, TABLE_DEBIT);
    assert_int_equal(d.n, PROTO_DEBIT_MAX);
}

/* divvy's zero semantics touch no counter: the fast path decides them. */
static void test_report_zero_rule(void **state)
{
    const struct proto_kv kv[] = { KV("path", "/ban") };
    struct proto_req req;
    struct dlog_decision d;

    (void)state;
    parse(PROTO_TAKE, NOW_MS, 1, false, rule_id("ban"), kv, 1, &req);
    assert_int_equal(report_decision(&req, rules, 5, 6, NOW_MS, UNIX_MS, &d), 0);
    assert_int_equal(d.path, DLOG_PATH_NONE);
}

static void test_report_time_window(void **state)
{
    const struct proto_kv kv[] = { KV("path", "/fast2") };
    struct proto_req req;
    struct dlog_decision d;

    (void)state;
    parse(PROTO_TAKE, NOW_MS - REPORT_PAST_MS - 1, 1, true, rule_id("fast2"), kv, 1, &req);
    assert_int_equal(report_decision(&req, rules, 5, 6, NOW_MS, UNIX_MS, &d), -ERANGE);
    parse(PROTO_TAKE, NOW_MS + REPORT_FUTURE_MS + 1, 1, true, rule_id("fast2"), kv, 1, &req);
    assert_int_equal(report_decision(&req, rules, 5, 6, NOW_MS, UNIX_MS, &d), -ERANGE);
    parse(PROTO_TAKE, UINT64_MAX, 1, true, rule_id("fast2"), kv, 1, &req);
    assert_int_equal(report_decision(&req, rules, 5, 6, NOW_MS, UNIX_MS, &d), -ERANGE);
    /* Early after boot: nothing is before time 0. */
    parse(PROTO_TAKE, 0, 1, true, rule_id("fast2"), kv, 1, &req);
    assert_int_equal(report_decision(&req, rules, 5, 6, 10, UNIX_MS, &d), 0);
}

/* A report can only name what its own request, decided in-process, could have. */
static void test_report_rule_checks(void **state)
{
    const struct proto_kv fast[] = { KV("path", "/fast2") }, slow[] = { KV("path", "/slow") },
                          chain[] = { KV("path", "/chain") }, login[] = { KV("user", "root") };
    struct proto_req req;
    struct dlog_decision d;

    (void)state;
    /* Another fast rule than the request's path holds. */
    parse(PROTO_TAKE, NOW_MS, 1, true, rule_id("fast"), fast, 1, &req);
    assert_int_equal(report_decision(&req, rules, 5, 6, NOW_MS, UNIX_MS, &d), -ENOENT);
    /* A rule that is not fast_path, named by its own request. */
    parse(PROTO_TAKE, NOW_MS, 1, false, rule_id("slow"), slow, 1, &req);
    assert_int_equal(report_decision(&req, rules, 5, 6, NOW_MS, UNIX_MS, &d), -ENOENT);
    /* A fast rule behind a rule divvyd decides. */
    parse(PROTO_TAKE, NOW_MS, 1, true, rule_id("chain2"), chain, 1, &req);
    assert_int_equal(report_decision(&req, rules, 5, 6, NOW_MS, UNIX_MS, &d), -ENOENT);
    /* A privileged-source rule (the login audit trail), even from root. */
    parse(PROTO_TAKE, NOW_MS, 1, false, rule_id("login"), login, 1, &req);
    assert_int_equal(report_decision(&req, rules, 0, 6, NOW_MS, UNIX_MS, &d), -ENOENT);
    assert_int_equal(report_decision(&req, rules, 5, 6, NOW_MS, UNIX_MS, &d), -ENOENT);
    /* An id no rule has. */
    parse(PROTO_TAKE, NOW_MS, 1, true, 0x0123456789abcdefull, fast, 1, &req);
    assert_int_equal(report_decision(&req, rules, 5, 6, NOW_MS, UNIX_MS, &d), -ENOENT);
}

static void test_report_malformed(void **state)
{
    const char line[] = "REPORT 1 TAKE 1 1 0 0 nothex path=/fast2\n";
    struct proto_req req;
    struct dlog_decision d;

    (void)state;
    assert_int_equal(proto_parse(line, strlen(line), &req), (ssize_t)strlen(line));
    assert_int_equal(req.err, PROTO_E_BAD_REQUEST);
    assert_int_equal(report_decision(&req, rules, 5, 6, NOW_MS, UNIX_MS, &d), -EINVAL);
    assert_int_equal(proto_parse("PING\n", 5, &req), 5);
    assert_int_equal(report_decision(&req, rules, 5, 6, NOW_MS, UNIX_MS, &d), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_recorded),
        cmocka_unit_test(test_report_peek_debit_denied_root),
        cmocka_unit_test(test_report_zero_rule),
        cmocka_unit_test(test_report_time_window),
        cmocka_unit_test(test_report_rule_checks),
        cmocka_unit_test(test_report_malformed),
    };

    return cmocka_run_group_tests_name("report", tests, setup, teardown);
}
