/* SPDX-License-Identifier: MIT */
/*
 * Integration: divvyd's extension verbs (TAKE, PEEK, EXPLAIN, RULES, STATS,
 * PING, QUIT) and the admin verbs (RESET, RELOAD): refused over TCP, allowed
 * over the Unix socket to root.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"

static const char verbs_ini[] =
    "[method=GET path=/status]\n"
    "creditLimit = 1000\n"
    "resetSeconds = 60\n"
    "label = status\n"
    "\n"
    "[method=GET path=/pantry/cookies/special-cookie]\n"
    "creditLimit = 1\n"
    "resetSeconds = 86400\n"
    "matchPolicy = canary\n"
    "\n"
    "[path=/take]\n"
    "creditLimit = 10\n"
    "resetSeconds = 600\n"
    "label = take\n"
    "\n"
    "[path=/peek ip=*]\n"
    "creditLimit = 3\n"
    "resetSeconds = 600\n"
    "actorField = ip\n"
    "\n"
    "[default]\n"
    "creditLimit = 0\n"
    "resetSeconds = 0\n";

#define VERBS_RULES 5

static struct harness_daemon *start_verbs(void)
{
    struct harness_opts o = { .config_name = "verbs.ini", .config_text = verbs_ini };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    return d;
}

/* Returns the @n-th line (0-based) of @text in @buf. */
static const char *nth_line(const char *text, unsigned n, char *buf, size_t size)
{
    const char *p = text, *nl;

    while (n-- > 0 && p) {
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    if (!p || !*p) {
        snprintf(buf, size, "(no line)");
        return buf;
    }
    nl = strchr(p, '\n');
    snprintf(buf, size, "%.*s", nl ? (int)(nl - p) : (int)strlen(p), p);
    return buf;
}

static void test_verbs_take(void **state)
{
    struct harness_daemon *d = start_verbs();
    struct harness_conn *c;

    (void)state;
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_REPLY(c, "TAKE 3 path=/take", "OK true 7 600 take");
    /* All or nothing: 8 > 7 is denied and consumes nothing; the credit
     * field is what is left after the command (docs/protocol.md). */
    EXPECT_OK_RULE(c, "TAKE 8 path=/take", false, 7, 599, 600, "take");
    EXPECT_OK_RULE(c, "take 6 path=/take", true, 1, 599, 600, "take");
    EXPECT_OK_RULE(c, "TAKE 2 path=/take", false, 1, 599, 600, "take");
    EXPECT_OK_RULE(c, "TAKE 1 path=/take", true, 0, 599, 600, "take");
    EXPECT_OK(c, "HIT path=/take", false, 0, 599, 600);
    EXPECT_OK_RULE(c, "TAKE 1 path=/take", false, 0, 599, 600, "take");
    /* TAKE 1 is HIT. */
    EXPECT_REPLY(c, "TAKE 1 method=GET path=/status", "OK true 999 60 status");
    EXPECT_OK(c, "HIT method=GET path=/status", true, 998, 59, 60);
    /* More than the limit can never be allowed. */
    EXPECT_OK_RULE(c, "TAKE 1001 method=GET path=/status ip=x", false, 998, 59, 60,
                   "status");
    EXPECT_OK_RULE(c, "TAKE 998 method=GET path=/status", true, 0, 59, 60,
                   "status");
    harness_close(c);
}

static void test_verbs_peek(void **state)
{
    struct harness_daemon *d = start_verbs();
    struct harness_conn *c;
    char r[HARNESS_LINE], id[64], rules[HARNESS_LINE * 4];
    bool allowed;
    long long credit, secs;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    /* A fresh counter: full credit (the reset time of a window not yet
     * started is not asserted), and the deciding rule's id, as RULES says. */
    assert_int_equal(harness_multi(c, "RULES", rules, sizeof(rules)), VERBS_RULES);
    for (int i = 0; i < 5; i++) {
        char want[80];

        CHECK(harness_cmd(c, "PEEK path=/peek ip=1.1.1.1", r, sizeof(r)));
        CHECK(harness_parse_ok_rule(r, &allowed, &credit, &secs, id, sizeof(id)));
        assert_true(allowed);
        assert_int_equal(credit, 3);
        snprintf(want, sizeof(want), "rule=3 id=%s ", id);
        if (!strstr(rules, want))
            fail_msg("PEEK names rule \"%s\", RULES says:\n%s", id, rules);
    }
    EXPECT_REPLY(c, "HIT path=/peek ip=1.1.1.1", "OK true 2 600");
    EXPECT_OK_RULE(c, "PEEK path=/peek ip=1.1.1.1", true, 2, 599, 600, NULL);
    EXPECT_OK_RULE(c, "PEEK path=/peek ip=1.1.1.1", true, 2, 599, 600, NULL);
    EXPECT_OK(c, "HIT path=/peek ip=1.1.1.1", true, 1, 599, 600);
    EXPECT_OK(c, "HIT path=/peek ip=1.1.1.1", true, 0, 599, 600);
    EXPECT_OK_RULE(c, "PEEK path=/peek ip=1.1.1.1", false, 0, 599, 600, NULL);
    EXPECT_OK(c, "HIT path=/peek ip=1.1.1.1", false, 0, 599, 600);
    /* Other actors untouched. */
    EXPECT_REPLY(c, "HIT path=/peek ip=2.2.2.2", "OK true 2 600");
    /* Deny and default rules. */
    EXPECT_OK_RULE(c, "PEEK path=/nothing", false, 0, 0, 0, NULL);
    harness_close(c);
}

/* Parses line @n of @buf into *req (fails the test when it does not parse). */
static void parse_line_n(const char *buf, unsigned n, struct proto_req *req)
{
    char line[HARNESS_LINE];

    nth_line(buf, n, line, sizeof(line));
    if (harness_fields(line, req) < 0)
        fail_msg("line %u does not parse as name=value pairs: %s", n, line);
}

static void test_verbs_explain(void **state)
{
    struct harness_daemon *d = start_verbs();
    struct harness_conn *c;
    char buf[HARNESS_LINE * 4];
    struct proto_req req;
    const char *v;
    int n;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    n = harness_multi(c, "EXPLAIN method=GET path=/status", buf, sizeof(buf));
    if (n < 0)
        fail_msg("EXPLAIN: %s: \"%s\"", strerror(-n), buf);
    assert_int_equal(n, 1);
    parse_line_n(buf, 0, &req);
    assert_int_equal(req.n_kv, 7);
    EXPECT_FIELD(&req, "rule", "0");
    EXPECT_FIELD(&req, "id", "status");
    EXPECT_FIELD(&req, "verdict", "decides");
    EXPECT_FIELD(&req, "match", "method=GET path=/status");
    EXPECT_FIELD(&req, "reason", "");
    EXPECT_FIELD(&req, "cause", "counter");
    EXPECT_FIELD(&req, "resettable", "true");
    /* EXPLAIN consumed nothing. */
    EXPECT_REPLY(c, "HIT method=GET path=/status", "OK true 999 60");

    /* The canary is examined, then the rest up to the default. */
    n = harness_multi(c, "EXPLAIN method=GET path=/pantry/cookies/special-cookie", buf,
                      sizeof(buf));
    assert_int_equal(n, VERBS_RULES);
    parse_line_n(buf, 0, &req);
    EXPECT_FIELD(&req, "rule", "0");
    EXPECT_FIELD(&req, "id", "status");
    EXPECT_FIELD(&req, "verdict", "no-match");
    v = harness_field(&req, "reason");
    if (!v || !*v)
        fail_msg("a no-match line must say why");
    parse_line_n(buf, 1, &req);
    EXPECT_FIELD(&req, "rule", "1");
    EXPECT_FIELD(&req, "verdict", "canary");
    EXPECT_FIELD(&req, "match", "method=GET path=/pantry/cookies/special-cookie");
    EXPECT_FIELD(&req, "reason", "");
    parse_line_n(buf, 2, &req);
    EXPECT_FIELD(&req, "rule", "2");
    EXPECT_FIELD(&req, "id", "take");
    EXPECT_FIELD(&req, "verdict", "no-match");
    parse_line_n(buf, 3, &req);
    EXPECT_FIELD(&req, "rule", "3");
    EXPECT_FIELD(&req, "verdict", "no-match");
    v = harness_field(&req, "reason");
    if (!v || !*v)
        fail_msg("rule 3 must say why it does not match");
    parse_line_n(buf, 4, &req);
    EXPECT_FIELD(&req, "rule", "4");
    EXPECT_FIELD(&req, "verdict", "decides");
    EXPECT_FIELD(&req, "match", "default");
    EXPECT_FIELD(&req, "reason", "");
    /* Not consumed: the canary still has its one credit. */
    n = harness_multi(c, "EXPLAIN path=/peek ip=3.3.3.3", buf, sizeof(buf));
    assert_int_equal(n, 4);
    parse_line_n(buf, 3, &req);
    EXPECT_FIELD(&req, "rule", "3");
    EXPECT_FIELD(&req, "verdict", "decides");
    EXPECT_REPLY(c, "HIT path=/peek ip=3.3.3.3", "OK true 2 600");
    /* Malformed EXPLAIN is an ERR like any other verb. */
    {
        char r[HARNESS_LINE];

        CHECK(harness_cmd(c, "EXPLAIN path=\"x", r, sizeof(r)));
        EXPECT_PREFIX(r, "ERR bad-request");
    }
    EXPECT_REPLY(c, "PING", "OK pong");
    harness_close(c);
}

static void test_verbs_rules(void **state)
{
    static const char *const keys[] = {
        "rule", "id", "label", "match", "credit_limit", "reset_seconds", "algorithm", "policy",
        "source", "fast_path", "actor",
    };
    struct harness_daemon *d = start_verbs();
    struct harness_conn *c;
    char buf[HARNESS_LINE * 4];
    struct proto_req req;
    const char *v;
    int n;

    (void)state;
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    n = harness_multi(c, "RULES", buf, sizeof(buf));
    if (n < 0)
        fail_msg("RULES: %s: \"%s\"", strerror(-n), buf);
    assert_int_equal(n, VERBS_RULES);
    for (int i = 0; i < n; i++) {
        char idx[16];

        parse_line_n(buf, (unsigned)i, &req);
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
            if (!harness_field(&req, keys[k]))
                fail_msg("RULES line %d lacks %s", i, keys[k]);
        snprintf(idx, sizeof(idx), "%d", i);
        EXPECT_FIELD(&req, "rule", idx);
    }
    parse_line_n(buf, 0, &req);
    EXPECT_FIELD(&req, "id", "status");
    EXPECT_FIELD(&req, "label", "status");
    EXPECT_FIELD(&req, "match", "method=GET path=/status");
    EXPECT_FIELD(&req, "credit_limit", "1000");
    EXPECT_FIELD(&req, "reset_seconds", "60");
    EXPECT_FIELD(&req, "algorithm", "window");
    EXPECT_FIELD(&req, "policy", "stop");
    EXPECT_FIELD(&req, "source", "any");
    EXPECT_FIELD(&req, "fast_path", "false");
    EXPECT_FIELD(&req, "actor", "");
    parse_line_n(buf, 1, &req);
    EXPECT_FIELD(&req, "label", "");
    EXPECT_FIELD(&req, "policy", "canary");
    EXPECT_FIELD(&req, "credit_limit", "1");
    EXPECT_FIELD(&req, "reset_seconds", "86400");
    /* Unlabelled rules get a 16-hex-digit id. */
    v = harness_field(&req, "id");
    assert_non_null(v);
    assert_int_equal(strspn(v, "0123456789abcdef"), 16);
    assert_int_equal(strlen(v), 16);
    parse_line_n(buf, 2, &req);
    EXPECT_FIELD(&req, "id", "take");
    EXPECT_FIELD(&req, "label", "take");
    EXPECT_FIELD(&req, "match", "path=/take");
    EXPECT_FIELD(&req, "credit_limit", "10");
    parse_line_n(buf, 3, &req);
    EXPECT_FIELD(&req, "actor", "ip");
    /* The match set's order is not part of the contract. */
    v = harness_field(&req, "match");
    if (!v || (strcmp(v, "path=/peek ip=*") != 0 && strcmp(v, "ip=* path=/peek") != 0))
        fail_msg("rule 3 match is \"%s\"", v ? v : "(missing)");
    parse_line_n(buf, 4, &req);
    EXPECT_FIELD(&req, "match", "default");
    EXPECT_FIELD(&req, "credit_limit", "0");
    EXPECT_FIELD(&req, "reset_seconds", "0");
    /* Case-insensitive, and the connection goes on. */
    EXPECT_REPLY(c, "rules", "OK 5");
    CHECK(harness_recv_lines(c, VERBS_RULES, buf, sizeof(buf), HARNESS_TIMEOUT_MS));
    EXPECT_REPLY(c, "PING", "OK pong");
    harness_close(c);
}

static void test_verbs_stats(void **state)
{
    static const char *const names[] = {
        "uptime_seconds", "connections", "hits_total", "hits_accepted", "hits_rejected",
        "errors_total", "reloads_ok", "reloads_rejected", "config_generation", "rules",
        "table_slots", "table_live", "fast_table_slots", "fast_table_live",
        "table_full_events",
    };
    struct harness_daemon *d = start_verbs();
    struct harness_conn *c;
    char buf[HARNESS_LINE], r[HARNESS_LINE];
    long long v0[15], v1[15];
    int n;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    n = harness_multi(c, "STATS", buf, sizeof(buf));
    if (n < 0)
        fail_msg("STATS: %s: \"%s\"", strerror(-n), buf);
    assert_true(n >= 15);
    for (int i = 0; i < 15; i++)
        if (harness_stat(buf, names[i], &v0[i]) < 0)
            fail_msg("STATS lacks %s:\n%s", names[i], buf);
    /* Every line is name=value. */
    for (int i = 0; i < n; i++) {
        char line[HARNESS_LINE];

        nth_line(buf, (unsigned)i, line, sizeof(line));
        if (!strchr(line, '=') || strchr(line, ' '))
            fail_msg("STATS line \"%s\" is not name=value", line);
    }
    EXPECT_REPLY(c, "HIT method=GET path=/status", "OK true 999 60");
    EXPECT_REPLY(c, "HIT path=/take", "OK true 9 600");
    EXPECT_REPLY(c, "HIT path=/nothing", "OK false 0 0");
    CHECK(harness_cmd(c, "FOO", r, sizeof(r)));
    CHECK(harness_multi(c, "STATS", buf, sizeof(buf)));
    for (int i = 0; i < 15; i++)
        CHECK(harness_stat(buf, names[i], &v1[i]));
    assert_int_equal(v1[2] - v0[2], 3);         /* hits_total */
    assert_int_equal(v1[3] - v0[3], 2);         /* hits_accepted */
    assert_int_equal(v1[4] - v0[4], 1);         /* hits_rejected */
    assert_int_equal(v1[5] - v0[5], 1);         /* errors_total */
    assert_int_equal(v1[9], VERBS_RULES);       /* rules */
    assert_true(v1[8] >= 1);                    /* config_generation */
    assert_true(v1[10] > 0);                    /* table_slots */
    assert_int_equal(v1[11] - v0[11], 2);       /* table_live: /status and /take */
    /* connections: this one.  The harness's own readiness connection may
     * still be open in divvyd's eyes (it sees the close when its loop gets
     * to it, later on a loaded machine): wait for it, within a bound. */
    for (uint64_t end = harness_now_ms() + 5000; v1[1] != 1 && harness_now_ms() < end;) {
        harness_pause_ms(20);
        CHECK(harness_multi(c, "STATS", buf, sizeof(buf)));
        CHECK(harness_stat(buf, names[1], &v1[1]));
    }
    assert_int_equal(v1[1], 1);
    assert_true(v1[0] >= 0);
    harness_close(c);
}

static void test_verbs_ping_quit(void **state)
{
    static const char pipelined[] = "HIT path=/take\nPING\nquit\nHIT path=/take\nPING\n";
    struct harness_daemon *d = start_verbs();
    struct harness_conn *c;
    char r[HARNESS_LINE];
    ssize_t rc;

    (void)state;
    for (int via = HARNESS_UNIX; via <= HARNESS_TCP; via++) {
        CHECK(harness_connect(d, (enum harness_via)via, &c));
        EXPECT_REPLY(c, "PING", "OK pong");
        EXPECT_REPLY(c, "ping", "OK pong");
        EXPECT_REPLY(c, "Ping\r", "OK pong");
        EXPECT_REPLY(c, "QUIT", "OK bye");
        CHECK(harness_wait_eof(c, HARNESS_TIMEOUT_MS));
        harness_close(c);
    }
    /* Replies before QUIT are flushed; requests after it are not served. */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_send(c, pipelined, sizeof(pipelined) - 1));
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    assert_string_equal(r, "OK true 9 600");
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    assert_string_equal(r, "OK pong");
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    assert_string_equal(r, "OK bye");
    /* EOF, or a reset because the request after QUIT was left unread. */
    rc = harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS);
    if (rc != -ENOTCONN && rc != -ECONNRESET)
        fail_msg("after OK bye: %zd \"%s\"", rc, rc >= 0 ? r : strerror((int)-rc));
    harness_close(c);
    /* The HIT after QUIT was never counted. */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK_RULE(c, "PEEK path=/take", true, 9, 599, 600, "take");
    harness_close(c);
}

/* Admin verbs over TCP: always forbidden, and without effect. */
static void test_verbs_admin_forbidden_on_tcp(void **state)
{
    struct harness_daemon *d = start_verbs();
    struct harness_conn *c;
    char r[HARNESS_LINE];
    long long reloads;

    (void)state;
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_REPLY(c, "TAKE 4 path=/take", "OK true 6 600 take");
    CHECK(harness_cmd(c, "RESET path=/take", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR forbidden");
    CHECK(harness_cmd(c, "reset path=/take", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR forbidden");
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR forbidden");
    EXPECT_OK(c, "HIT path=/take", true, 5, 599, 600);
    CHECK(harness_get_stat(c, "reloads_ok", &reloads));
    assert_int_equal(reloads, 0);
    harness_close(c);
}

/* Admin verbs over the Unix socket as root. */
static void test_verbs_admin_unix_root(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c;
    char r[HARNESS_LINE], want[128];
    long long gen, gen2;

    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: skipping RESET/RELOAD over the Unix socket)\n");
        skip();
    }
    d = start_verbs();
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "TAKE 4 path=/take", "OK true 6 600 take");
    EXPECT_REPLY(c, "RESET path=/take", "OK true 10 0 take");
    EXPECT_REPLY(c, "HIT path=/take", "OK true 9 600");
    /* RESET of an actor rule forgets that actor only. */
    EXPECT_REPLY(c, "HIT path=/peek ip=1.1.1.1", "OK true 2 600");
    EXPECT_REPLY(c, "HIT path=/peek ip=2.2.2.2", "OK true 2 600");
    EXPECT_OK_RULE(c, "RESET path=/peek ip=1.1.1.1", true, 3, 0, 0, NULL);
    EXPECT_REPLY(c, "HIT path=/peek ip=1.1.1.1", "OK true 2 600");
    EXPECT_OK(c, "HIT path=/peek ip=2.2.2.2", true, 1, 599, 600);
    /* RESET of a counter that does not exist yet is fine too. */
    EXPECT_OK_RULE(c, "RESET path=/peek ip=9.9.9.9", true, 3, 0, 0, NULL);

    CHECK(harness_get_stat(c, "config_generation", &gen));
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK reloaded generation=");
    gen2 = strtoll(r + strlen("OK reloaded generation="), NULL, 10);
    assert_true(gen2 > gen);
    snprintf(want, sizeof(want), "OK reloaded generation=%lld rules=%d", gen2, VERBS_RULES);
    assert_string_equal(r, want);
    CHECK(harness_get_stat(c, "config_generation", &gen));
    assert_int_equal(gen, gen2);
    CHECK(harness_cmd(c, "RELOAD x=1", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR bad-request");
    /* Counters survive a reload of the same rules. */
    EXPECT_OK(c, "HIT path=/take", true, 8, 599, 600);
    harness_close(c);
}

/* Polls the log of @d for @needle for up to 5 s: 1 found, 0 not. */
static int log_has(struct harness_daemon *d, const char *needle)
{
    for (int i = 0; i < 500; i++) {
        int r = harness_log_contains(d, needle);

        CHECK(r);
        if (r == 1)
            return 1;
        harness_pause_ms(10);
    }
    return 0;
}

/*
 * The RESET log line counts only the counters it reset: of the three rules
 * on the path, the resettable = false one keeps its counter and is not
 * counted (it was: "3 counter(s)").
 */
static void test_verbs_reset_log_counts_reset_only(void **state)
{
    static const char conf[] =
        "rules = (\n"
        "  { match = { path = \"/r\"; }; credit_limit = 5; reset_seconds = 600;\n"
        "    match_policy = \"continue\"; label = \"a\"; },\n"
        "  { match = { user = \"*\"; }; credit_limit = 5; reset_seconds = 600;\n"
        "    match_policy = \"continue\"; resettable = false; label = \"b\"; },\n"
        "  { match = { method = \"GET\"; }; credit_limit = 5; reset_seconds = 600;\n"
        "    label = \"c\"; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    struct harness_opts o = { .config_name = "reset.conf", .config_text = conf };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;

    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: skipping RESET over the Unix socket)\n");
        skip();
    }
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "TAKE 2 path=/r user=u method=GET", "OK true 3 600 c");
    EXPECT_REPLY(c, "RESET path=/r user=u method=GET", "OK true 5 0 c");
    if (!log_has(d, "counter(s) on the path of rule c reset")) {
        harness_dump_log(d);
        fail_msg("no RESET line in the log");
    }
    if (!log_has(d, ": 2 counter(s) on the path of rule c reset")) {
        harness_dump_log(d);
        fail_msg("the RESET line does not count 2 counters (a and c; b is not resettable)");
    }
    /* b kept its counter: 3 left, so the next TAKE 4 is denied by it. */
    EXPECT_OK_RULE(c, "TAKE 4 path=/r user=u method=GET", false, 3, 599, 600, "b");
    harness_close(c);
}

/* COUNTERS (divvyctl top/locked): admin only, least credit first, filters. */
static void test_verbs_counters(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c;
    char r[HARNESS_LINE], body[HARNESS_LINE], line[512];

    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: skipping COUNTERS over the Unix socket)\n");
        skip();
    }
    d = start_verbs();
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    CHECK(harness_cmd(c, "COUNTERS", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR forbidden");
    harness_close(c);

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    for (int i = 0; i < 3; i++)
        EXPECT_OK(c, "HIT path=/peek ip=1.1.1.1", true, 2 - i, 600, 600);
    EXPECT_REPLY(c, "HIT path=/peek ip=2.2.2.2", "OK true 2 600");
    EXPECT_REPLY(c, "TAKE 4 path=/take", "OK true 6 600 take");

    /* Least credit first: the exhausted actor, then 2.2.2.2, then take (6 left). */
    assert_int_equal(harness_multi(c, "COUNTERS", body, sizeof(body)), 3);
    EXPECT_PREFIX(nth_line(body, 0, line, sizeof(line)), "rule=");
    assert_non_null(strstr(line, "actor=\"1.1.1.1\" credit=0 used=3 limit=3"));
    assert_non_null(strstr(nth_line(body, 1, line, sizeof(line)),
                           "actor=\"2.2.2.2\" credit=2 used=1 limit=3"));
    EXPECT_PREFIX(nth_line(body, 2, line, sizeof(line)), "rule=take actor=\"\" credit=6 used=4");

    assert_int_equal(harness_multi(c, "COUNTERS exhausted=true", body, sizeof(body)), 1);
    assert_non_null(strstr(body, "actor=\"1.1.1.1\" credit=0"));
    assert_int_equal(harness_multi(c, "COUNTERS rule=take", body, sizeof(body)), 1);
    EXPECT_PREFIX(body, "rule=take ");
    assert_int_equal(harness_multi(c, "COUNTERS max=2", body, sizeof(body)), 2);

    CHECK(harness_cmd(c, "COUNTERS rule=nope", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR bad-request");
    CHECK(harness_cmd(c, "COUNTERS max=0", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR bad-request");
    CHECK(harness_cmd(c, "COUNTERS max=10001", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR bad-request");
    CHECK(harness_cmd(c, "COUNTERS colour=red", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR bad-request");
    EXPECT_REPLY(c, "PING", "OK pong");
    harness_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_verbs_take, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_verbs_peek, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_verbs_explain, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_verbs_rules, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_verbs_stats, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_verbs_ping_quit, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_verbs_admin_forbidden_on_tcp, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_verbs_counters, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_verbs_reset_log_counts_reset_only, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_verbs_admin_unix_root, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("verbs", tests, NULL, NULL);
}
