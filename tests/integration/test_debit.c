/* SPDX-License-Identifier: MIT */
/*
 * Integration (real divvyd, real libdivvy, real redis-server): DEBIT n, the
 * charge after the fact (docs/protocol.md "DEBIT").  It always charges, so
 * the balance may go below zero, and later hits are denied until the
 * window or bucket has paid the debt back: on divvyd's local path over the
 * socket (window, token bucket, sliding window, a continue chain, paid back
 * across real windows), on libdivvy's fast path (divvy_debit() decided
 * in-process), on the Redis path (a strict rule, a lease rule); bad counts
 * get ERR bad-request and change nothing; processes mixing TAKE and DEBIT
 * on one counter leave an exact balance, over the socket, in-process and
 * through Redis (strict).  What an unprivileged user's DEBIT can do is
 * bounded (docs/rules.md "DEBIT bounds"): a DEBIT above a rule's max_debit
 * is refused, on every listener, the fast path and the Redis path, and a
 * debt is at most 4 limits, so a victim counter recovers within 5 windows.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <grp.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "divvy.h"
#include "harness_redis.h"

#define RULES_LOCAL(extra)                                                                 \
    "{ match = { k = \"w*\"; }; label = \"w\"; actor = \"k\"; credit_limit = 10;\n"        \
    "  reset_seconds = 600; " extra " },\n"                                                \
    "{ match = { k = \"short\"; }; label = \"short\"; credit_limit = 10;\n"                \
    "  reset_seconds = 1; " extra " },\n"                                                  \
    "{ match = { k = \"tb\"; }; label = \"tb\"; algorithm = \"token_bucket\";\n"           \
    "  credit_limit = 5; refill_seconds = 600; " extra " },\n"                             \
    "{ match = { k = \"sw\"; }; label = \"sw\"; algorithm = \"sliding_window\";\n"         \
    "  credit_limit = 10; reset_seconds = 600; " extra " },\n"                             \
    "{ match = { k = \"mix*\"; }; label = \"mix\"; actor = \"k\"; credit_limit = 5000;\n"  \
    "  reset_seconds = 3600; " extra " },\n"                                               \
    "{ match = { user = \"*\"; ip = \"*\"; }; label = \"user\"; actor = \"user\";\n"       \
    "  credit_limit = 8; reset_seconds = 600; match_policy = \"continue\"; " extra " },\n" \
    "{ match = { ip = \"*\"; }; label = \"ip\"; actor = \"ip\"; credit_limit = 48;\n"      \
    "  reset_seconds = 3600; " extra " },\n"                                               \
    "{ default = true; credit_limit = 0; reset_seconds = 0; }"

static struct harness_daemon *start_local(const char *rules)
{
    char conf[4096];
    struct harness_opts o = { .config_name = "debit.conf", .config_text = conf };
    struct harness_daemon *d = NULL;

    snprintf(conf, sizeof(conf), "rules = (\n%s\n);\n", rules);
    CHECK(harness_start(&o, &d));
    return d;
}

/* divvyd with RULES_LOCAL's rules strict in a Redis it starts (*@ret_rs):
 * redis.timeout_ms @timeout_ms, @workers workers. */
static struct harness_daemon *start_strict(struct redis_srv **ret_rs, int timeout_ms,
                                           unsigned workers)
{
    struct harness_daemon *d;
    char *conf;

    CHECK(redis_start(ret_rs));
    conf = redis_config(*ret_rs, "local", "closed", timeout_ms, NULL,
                        RULES_LOCAL("store = \"strict\";"));
    assert_non_null(conf);
    d = redis_divvyd(conf, workers);
    free(conf);
    return d;
}

/* The debt of each algorithm over the socket, and what a DEBIT that fits says. */
static void expect_debts(struct harness_conn *c)
{
    /* window: 4 taken, 23 charged: 17 over. */
    EXPECT_OK_RULE(c, "TAKE 4 k=w1", true, 6, 599, 600, "w");
    EXPECT_OK_RULE(c, "DEBIT 23 k=w1", false, 0, 599, 600, "w");
    EXPECT_OK(c, "HIT k=w1", false, 0, 599, 600);
    EXPECT_OK_RULE(c, "TAKE 1 k=w1", false, 0, 599, 600, "w");
    EXPECT_OK_RULE(c, "PEEK k=w1", false, 0, 599, 600, "w");
    /* Another actor of the rule: its own counter; a DEBIT that fits. */
    EXPECT_OK_RULE(c, "DEBIT 10 k=w2", true, 0, 599, 600, "w");
    EXPECT_OK_RULE(c, "DEBIT 1 k=w2", false, 0, 599, 600, "w");
    /* token bucket: tokens below zero. */
    EXPECT_OK_RULE(c, "DEBIT 7 k=tb", false, 0, 599, 600, "tb");
    EXPECT_OK_RULE(c, "TAKE 1 k=tb", false, 0, 599, 600, "tb");
    /* sliding window: the excess counts. */
    EXPECT_OK_RULE(c, "DEBIT 3 k=sw", true, 7, 599, 600, "sw");
    EXPECT_OK_RULE(c, "DEBIT 22 k=sw", false, 0, 599, 600, "sw");
    EXPECT_OK_RULE(c, "TAKE 1 k=sw", false, 0, 599, 600, "sw");
}

static void test_debit_socket(void **state)
{
    struct harness_daemon *d = start_local(RULES_LOCAL(""));
    struct harness_conn *c;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_debts(c);
    /* A continue chain: DEBIT charges every rule on the path; the reply
     * names the first rule left in debt. */
    EXPECT_OK_RULE(c, "DEBIT 10 user=a ip=10.0.0.1", false, 0, 599, 600, "user");
    EXPECT_OK_RULE(c, "PEEK ip=10.0.0.1", true, 38, 3599, 3600, "ip");
    EXPECT_OK_RULE(c, "TAKE 1 user=a ip=10.0.0.1", false, 0, 599, 600, "user");
    /* All within their limits: allowed, the tightest limit, and the rule
     * whose credit that is named (the continue rule user, not the stop rule). */
    EXPECT_OK_RULE(c, "DEBIT 2 user=b ip=10.0.0.1", true, 6, 599, 600, "user");
    EXPECT_OK_RULE(c, "PEEK ip=10.0.0.1", true, 36, 3599, 3600, "ip");
    /* Over TCP the same, within max_debit (the limit) per DEBIT. */
    harness_close(c);
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_OK_RULE(c, "DEBIT 10 k=w3", true, 0, 599, 600, "w");
    EXPECT_OK_RULE(c, "DEBIT 2 k=w3", false, 0, 599, 600, "w");
    harness_close(c);
}

/* source = privileged rules: for privileged peers only, as for TAKE. */
static void test_debit_privileged(void **state)
{
    struct harness_daemon *d = start_local(
        "{ match = { p = \"*\"; }; source = \"privileged\"; label = \"priv\";\n"
        "  credit_limit = 5; reset_seconds = 600; },\n"
        "{ match = { p = \"*\"; }; label = \"pub\"; credit_limit = 50; reset_seconds = 600; },\n"
        "{ default = true; credit_limit = 0; reset_seconds = 0; }");
    struct harness_conn *c;

    (void)state;
    /* TCP is never privileged: the public rule. */
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_OK_RULE(c, "DEBIT 7 p=1", true, 43, 599, 600, "pub");
    harness_close(c);
    /* root on the Unix socket: the privileged rule, into debt. */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK_RULE(c, "DEBIT 7 p=1", false, 0, 599, 600, "priv");
    EXPECT_OK_RULE(c, "PEEK p=1", false, 0, 599, 600, "priv");
    harness_close(c);
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_OK_RULE(c, "PEEK p=1", true, 43, 599, 600, "pub");
    harness_close(c);
}

/* Bad counts: ERR bad-request with the range, and nothing changes. */
static void test_debit_bad_input(void **state)
{
    static const char *const bad[] = {
        "DEBIT 0 k=w9", "DEBIT -1 k=w9", "DEBIT 1000000000001 k=w9",
        "DEBIT 18446744073709551617 k=w9", "DEBIT 99999999999999999999999999 k=w9",
        "DEBIT k=w9", "DEBIT", "DEBIT 1x k=w9", "DEBIT 1.5 k=w9", "DEBIT \"5\" k=w9",
        "DEBIT +5 k=w9",
    };
    struct harness_daemon *d = start_local(RULES_LOCAL(""));
    struct harness_conn *c;
    char line[HARNESS_LINE];

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(harness_cmd(c, bad[i], line, sizeof(line)));
        if (strcmp(line, "ERR bad-request \"DEBIT needs a count from 1 to 1000000000000\"") != 0)
            fail_msg("%s: \"%s\", want ERR bad-request with DEBIT's range", bad[i], line);
    }
    EXPECT_OK_RULE(c, "PEEK k=w9", true, 10, 0, 0, "w");
    /* The largest count is accepted from root (above max_debit: root may),
     * the debt bounded at 4 limits. */
    EXPECT_OK_RULE(c, "DEBIT 1000000000000 k=w9", false, 0, 599, 600, "w");
    EXPECT_OK_RULE(c, "debit 1 k=w8", true, 9, 599, 600, "w");
    harness_close(c);
}

/* A reload that lowers a limit below what a window used is no debt: that
 * window has nothing left, and the next one starts full (as before DEBIT
 * existed); a real debt on the same rule still carries. */
static void test_debit_lowered_limit_no_debt(void **state)
{
    static const char conf[] =
        "rules = (\n{ match = { k = \"*\"; }; label = \"r\"; actor = \"k\"; credit_limit = %d;\n"
        "  algorithm = \"%s\"; %s = 600; },\n"
        "{ default = true; credit_limit = 0; reset_seconds = 0; }\n);\n";
    char text[512], line[HARNESS_LINE];
    struct harness_opts o = { .config_name = "debit.conf", .config_text = text };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;

    (void)state;
    snprintf(text, sizeof(text), conf, 20, "window", "reset_seconds");
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK_RULE(c, "TAKE 11 k=a", true, 9, 599, 600, "r");
    EXPECT_OK_RULE(c, "DEBIT 25 k=b", false, 0, 599, 600, "r");
    snprintf(text, sizeof(text), conf, 10, "window", "reset_seconds");
    CHECK(harness_write_config(d, text));
    CHECK(harness_cmd(c, "RELOAD", line, sizeof(line)));
    EXPECT_PREFIX(line, "OK");
    /* 11 used of a limit now 10: nothing left (not "1 used, 9 left"). */
    EXPECT_OK_RULE(c, "PEEK k=a", false, 0, 599, 600, "r");
    EXPECT_OK_RULE(c, "TAKE 1 k=a", false, 0, 599, 600, "r");
    EXPECT_OK_RULE(c, "PEEK k=b", false, 0, 599, 600, "r");
    harness_close(c);
}

/* The debt of a 1 s window of 10 after DEBIT 25 is paid by two windows'
 * ends: a TAKE is allowed again two windows later, not before. */
static void expect_payback(struct harness_conn *c)
{
    char line[HARNESS_LINE];
    uint64_t t0 = harness_now_ms(), t, deadline = t0 + 10000;
    char rule[64];
    bool allowed;
    long long credit, secs;

    EXPECT_OK_RULE(c, "DEBIT 25 k=short", false, 0, 0, 1, "short");
    for (;;) {
        CHECK(harness_cmd(c, "PEEK k=short", line, sizeof(line)));
        t = harness_now_ms();
        CHECK(harness_parse_ok_rule(line, &allowed, &credit, &secs, rule, sizeof(rule)));
        if (allowed)
            break;
        if (t > deadline)
            fail_msg("still in debt after 10 s: %s", line);
        harness_pause_ms(20);
    }
    if (t < t0 + 1990)
        fail_msg("allowed after %llu ms: the debt covered two windows",
                 (unsigned long long)(t - t0));
    assert_int_equal(credit, 5);
}

static void test_debit_payback_socket(void **state)
{
    struct harness_daemon *d = start_local(RULES_LOCAL(""));
    struct harness_conn *c;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_payback(c);
    harness_close(c);
}

/* divvy_debit() on fast_path rules: decided in-process, same counters. */
static void test_debit_fast_path(void **state)
{
    struct harness_daemon *d = start_local(RULES_LOCAL("fast_path = true;"));
    struct divvy_kv kw = { "k", "w1" }, ktb = { "k", "tb" };
    struct divvy_result res = { .size = sizeof(res) };
    struct harness_conn *c;
    struct divvy *h = NULL;

    (void)state;
    CHECK(harness_divvy_env(d));
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    harness_wait_fast(h, (struct divvy_kv[]){ { "k", "elsewhere" } }, 1);
    divvy_close(h);
    h = NULL;
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    CHECK(divvy_take(h, 4, &kw, 1, &res));
    assert_true(res.fast_path && res.allowed && res.credit == 6);
    CHECK(divvy_debit(h, 23, &kw, 1, &res));
    assert_true(res.fast_path && !res.allowed && res.credit == 0);
    assert_string_equal(res.rule, "w");
    CHECK(divvy_hit(h, &kw, 1, &res));
    assert_true(res.fast_path && !res.allowed);
    CHECK(divvy_debit(h, 7, &ktb, 1, &res));
    assert_true(res.fast_path && !res.allowed && res.credit == 0);
    /* Out of range: -EINVAL, nothing sent, nothing charged. */
    assert_int_equal(divvy_debit(h, 0, &kw, 1, &res), -EINVAL);
    assert_int_equal(divvy_debit(h, 1000000000001ULL, &kw, 1, &res), -EINVAL);
    divvy_close(h);
    /* divvyd's socket path sees the same debt. */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK_RULE(c, "PEEK k=w1", false, 0, 599, 600, "w");
    EXPECT_OK_RULE(c, "TAKE 1 k=tb", false, 0, 599, 600, "tb");
    EXPECT_OK_RULE(c, "PEEK k=w2", true, 10, 0, 0, "w");
    harness_close(c);
    /* Through the socket (DIVVY_SOCKET_ONLY) divvy_debit() is DEBIT. */
    CHECK(divvy_open(NULL, DIVVY_SOCKET_ONLY, &h));
    CHECK(divvy_debit(h, 11, &(struct divvy_kv){ "k", "w2" }, 1, &res));
    assert_true(!res.fast_path && !res.allowed && res.credit == 0);
    assert_string_equal(res.rule, "w");
    divvy_close(h);
}

/* ---- Redis: strict and lease ----------------------------------------------- */

static void test_debit_redis(void **state)
{
    struct redis_srv *rs = NULL;
    struct harness_daemon *d;
    struct harness_conn *c;
    char *conf, line[HARNESS_LINE], rule[64];
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy *h = NULL;
    bool allowed;
    long long credit, secs;
    int n;

    (void)state;
    d = start_strict(&rs, 1000, 1);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_debts(c);
    EXPECT_OK_RULE(c, "DEBIT 10 user=a ip=10.0.0.1", false, 0, 599, 600, "user");
    EXPECT_OK_RULE(c, "PEEK ip=10.0.0.1", true, 38, 3599, 3600, "ip");
    expect_payback(c);
    harness_close(c);
    harness_free(d);

    /* lease: a DEBIT goes to the pool in Redis; this host may still spend
     * what it had leased before (counted in the pool already), then the
     * debt denies. */
    conf = redis_config(rs, "local", "closed", 1000, "lease_max = 40;",
                        "{ match = { warm = \"*\"; }; credit_limit = 5; reset_seconds = 60;\n"
                        "  fast_path = true; },\n"
                        "{ match = { k = \"*\"; }; label = \"l\"; actor = \"k\";\n"
                        "  credit_limit = 10; reset_seconds = 600; store = \"lease\";\n"
                        "  fast_path = true; },\n"
                        "{ default = true; credit_limit = 0; reset_seconds = 0; }");
    assert_non_null(conf);
    d = redis_divvyd(conf, 1);
    free(conf);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    /* (A lease's credit is this host's view: at most the pool's.) */
    CHECK(harness_cmd(c, "TAKE 4 k=x", line, sizeof(line)));
    CHECK(harness_parse_ok_rule(line, &allowed, &credit, &secs, rule, sizeof(rule)));
    if (!allowed || credit > 6 || strcmp(rule, "l") != 0)
        fail_msg("TAKE 4 on a lease rule: \"%s\", want OK true <= 6 .. l", line);
    CHECK(harness_cmd(c, "DEBIT 23 k=x", line, sizeof(line)));
    CHECK(harness_parse_ok_rule(line, &allowed, &credit, &secs, rule, sizeof(rule)));
    if (allowed || credit != 0 || secs < 598 || secs > 600)
        fail_msg("DEBIT 23 on a lease rule: \"%s\", want OK false 0 598..600 l", line);
    for (n = 0; n < 12; n++) {
        CHECK(harness_cmd(c, "TAKE 1 k=x", line, sizeof(line)));
        CHECK(harness_parse_ok_rule(line, &allowed, &credit, &secs, rule, sizeof(rule)));
        if (!allowed)
            break;
    }
    /* At most the lease this host held (10 - 4 - what the pool kept). */
    if (n > 6)
        fail_msg("%d TAKEs allowed after the debt, more than the lease held", n);
    for (int i = 0; i < 3; i++)
        EXPECT_OK_RULE(c, "TAKE 1 k=x", false, 0, 598, 600, "l");
    /* A DEBIT that fits on a fresh lease counter is allowed. */
    EXPECT_OK_RULE(c, "DEBIT 3 k=y", true, 7, 599, 600, "l");
    harness_close(c);
    /* libdivvy: a lease rule's DEBIT is divvyd's (the pool), never in-process. */
    CHECK(harness_divvy_env(d));
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    harness_wait_fast(h, (struct divvy_kv[]){ { "warm", "1" } }, 1);
    CHECK(divvy_debit(h, 20, &(struct divvy_kv){ "k", "z" }, 1, &res));
    assert_true(!res.fast_path && !res.allowed && res.credit == 0);
    assert_string_equal(res.rule, "l");
    CHECK(divvy_take(h, 1, &(struct divvy_kv){ "k", "z" }, 1, &res));
    assert_false(res.allowed);
    divvy_close(h);
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    assert_int_equal(divvy_debit(h, 1, &(struct divvy_kv){ "k", "z" }, 1, &res), -ENOTSUP);
    divvy_close(h);
    harness_free(d);
    redis_stop(rs);
}

/* ---- an unprivileged user's DEBIT: bounded ------------------------------------ */

#define DEBIT_UID   64301       /* throwaway uid and gid, no passwd entry needed */
#define DEBIT_GID   64301
#define FLOOD_N     200

#define BOUND_RULES                                                                        \
    "{ match = { k = \"*\"; }; label = \"per-k\"; actor = \"k\"; credit_limit = 10;\n"     \
    "  reset_seconds = 1; },\n"                                                             \
    "{ match = { method = \"GET\"; path = \"/status\"; }; label = \"status\";\n"           \
    "  credit_limit = 100; reset_seconds = 1; },\n"                                         \
    "{ match = { job = \"*\"; }; label = \"jobs\"; actor = \"job\"; credit_limit = 10;\n"  \
    "  reset_seconds = 600; max_debit = 25; },\n"                                           \
    "{ default = true; credit_limit = 0; reset_seconds = 0; }"

/* What the user's requests got back (shared with the child). */
struct bound_run {
    struct harness_daemon *d;
    char reply[8][256];
    long flood_ok[2];           /* OK replies to the Unix and TCP floods */
    char flood_bad[256];        /* the first other reply */
    int failed;                 /* where the child stopped, 0 when it did not */
};

static void bound_reply(struct bound_run *b, struct harness_conn *c, const char *req, int i)
{
    char line[HARNESS_LINE];
    size_t len;

    if (harness_cmd(c, req, line, sizeof(line)) < 0) {
        snprintf(b->reply[i], sizeof(b->reply[i]), "(no reply)");
        return;
    }
    len = strlen(line);
    if (len && line[len - 1] == '\r')
        line[len - 1] = '\0';
    snprintf(b->reply[i], sizeof(b->reply[i]), "%.250s", line);
}

/* FLOOD_N x @req pipelined on @c: how many got "OK". */
static long bound_flood(struct bound_run *b, struct harness_conn *c, const char *req)
{
    char *batch = malloc(FLOOD_N * 64), line[HARNESS_LINE];
    size_t len = 0;
    long ok = 0;

    if (!batch)
        return -1;
    for (int i = 0; i < FLOOD_N; i++)
        len += (size_t)snprintf(batch + len, 64, "%s\n", req);
    if (harness_send(c, batch, len) < 0)
        ok = -1;
    for (int i = 0; i < FLOOD_N && ok >= 0; i++) {
        if (harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS) < 0)
            break;
        if (strncmp(line, "OK ", 3) == 0)
            ok++;
        else if (!b->flood_bad[0])
            snprintf(b->flood_bad, sizeof(b->flood_bad), "%.250s", line);
    }
    free(batch);
    return ok;
}

/* The user: as DEBIT_UID, DEBITs above max_debit on every listener, then
 * floods of DEBITs within it, on the Unix socket and over TCP. */
static int bound_child(void *arg)
{
    struct bound_run *b = arg;
    struct harness_conn *u = NULL, *t = NULL, *r = NULL;

    if (setgroups(0, NULL) < 0 || setgid(DEBIT_GID) < 0 || setuid(DEBIT_UID) < 0)
        return b->failed = 1;
    if (harness_connect_unix(b->d->sock, &u) < 0)
        return b->failed = 2;
    if (harness_connect_tcp(b->d->tcp_port, &t) < 0)
        return b->failed = 3;
    if (harness_connect_tcp(b->d->resp_port, &r) < 0)
        return b->failed = 4;
    bound_reply(b, u, "DEBIT 1000000000000 k=victim", 0);
    bound_reply(b, u, "DEBIT 11 k=victim", 1);
    bound_reply(b, u, "PEEK k=victim", 2);
    bound_reply(b, u, "DEBIT 26 job=j", 3);
    bound_reply(b, u, "DEBIT 25 job=j", 4);
    bound_reply(b, t, "DEBIT 1000000000000 method=GET path=/status", 5);
    bound_reply(b, t, "HIT method=GET path=/status", 6);
    bound_reply(b, r, "DIVVY.DEBIT 1000000000000 k victim", 7);
    b->flood_ok[0] = bound_flood(b, u, "DEBIT 10 k=victim");
    b->flood_ok[1] = bound_flood(b, t, "DEBIT 100 method=GET path=/status");
    harness_close(u);
    harness_close(t);
    harness_close(r);
    return 0;
}

/* PEEK @req as root until it is allowed, by @deadline (harness_now_ms()). */
static void bound_recovers(struct harness_conn *c, const char *req, uint64_t deadline)
{
    char line[HARNESS_LINE], rule[64];
    bool allowed;
    long long credit, secs;

    for (;;) {
        CHECK(harness_cmd(c, req, line, sizeof(line)));
        CHECK(harness_parse_ok_rule(line, &allowed, &credit, &secs, rule, sizeof(rule)));
        if (allowed)
            return;
        if (harness_now_ms() > deadline)
            fail_msg("%s: still \"%s\" 6.5 s after the DEBITs, past the bound of "
                     "4 windows of debt", req, line);
        harness_pause_ms(50);
    }
}

/*
 * A user in no group, over the Unix socket, TCP and RESP: one DEBIT of
 * 10^12 would lock a victim (or, on a rule without an actor, everyone) out
 * for 35 years.  It is refused above the rule's max_debit (the limit by
 * default, charging nothing); DEBITs within max_debit, as many as the user
 * likes, leave a debt of at most 4 limits, so the counters recover within
 * 5 one-second windows, and other actors are never touched.
 */
static void test_debit_unprivileged_bounded(void **state)
{
    char conf[2048];
    struct harness_opts o = { .config_name = "debit.conf", .config_text = conf, .resp = true };
    struct bound_run *b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    char line[HARNESS_LINE], rule[64];
    bool allowed;
    long long credit, secs;
    uint64_t done;
    pid_t pid;
    int status;

    (void)state;
    assert_true(b != MAP_FAILED);
    memset(b, 0, sizeof(*b));
    snprintf(conf, sizeof(conf), "server = { socket_mode = \"0666\"; };\nrules = (\n%s\n);\n",
             BOUND_RULES);
    CHECK(harness_start(&o, &d));
    /* socket_mode applies to the socket; the temp dir must let the user in. */
    assert_int_equal(chmod(d->dir, 0755), 0);
    b->d = d;
    CHECK(harness_spawn(bound_child, b, &pid));
    CHECK(harness_reap(pid, 60000, &status));
    done = harness_now_ms();
    if (status != 0 || b->failed)
        fail_msg("the user's process stopped (exit %d, step %d)", status, b->failed);
    /* Above max_debit: refused with the bound, on every listener. */
    assert_string_equal(b->reply[0], "ERR bad-request \"DEBIT 1000000000000 above max_debit 10 "
                                     "of rule per-k\"");
    assert_string_equal(b->reply[1], "ERR bad-request \"DEBIT 11 above max_debit 10 of rule "
                                     "per-k\"");
    /* ... and nothing was charged. */
    assert_string_equal(b->reply[2], "OK true 10 0 per-k");
    /* An explicit max_debit above the limit lets that much through. */
    assert_string_equal(b->reply[3], "ERR bad-request \"DEBIT 26 above max_debit 25 of rule "
                                     "jobs\"");
    assert_string_equal(b->reply[4], "OK false 0 600 jobs");
    assert_string_equal(b->reply[5], "ERR bad-request \"DEBIT 1000000000000 above max_debit 100 "
                                     "of rule status\"");
    EXPECT_PREFIX(b->reply[6], "OK true 99 ");
    assert_string_equal(b->reply[7], "-ERR bad-request DEBIT 1000000000000 above max_debit 10 "
                                     "of rule per-k");
    /* Within max_debit every DEBIT is charged (no error) ... */
    if (b->flood_ok[0] != FLOOD_N || b->flood_ok[1] != FLOOD_N)
        fail_msg("floods: %ld and %ld of %d answered OK; first other reply: %s", b->flood_ok[0],
                 b->flood_ok[1], FLOOD_N, b->flood_bad);
    /* ... the victim and everyone on /status are denied for now ... */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "PEEK k=victim", line, sizeof(line)));
    CHECK(harness_parse_ok_rule(line, &allowed, &credit, &secs, rule, sizeof(rule)));
    if (allowed && harness_now_ms() < done + 1000)
        fail_msg("PEEK k=victim right after 200 x DEBIT 10: \"%s\", want denied", line);
    /* ... other actors are untouched ... */
    EXPECT_OK_RULE(c, "PEEK k=bystander", true, 10, 0, 0, "per-k");
    EXPECT_OK_RULE(c, "PEEK job=other", true, 10, 0, 0, "jobs");
    /* ... and the debt, 4 limits at most, is paid back within 5 windows of
     * one second from the first charge (1.5 s of slack for a busy machine). */
    bound_recovers(c, "PEEK k=victim", done + 6500);
    bound_recovers(c, "PEEK method=GET path=/status", done + 6500);
    harness_close(c);
    munmap(b, sizeof(*b));
}

/* The same bound on the Redis path (a strict rule: the check comes before
 * the script), from a TCP peer (never privileged). */
static void test_debit_bounded_redis(void **state)
{
    struct redis_srv *rs = NULL;
    struct harness_daemon *d;
    struct harness_conn *c;

    (void)state;
    d = start_strict(&rs, 1000, 1);
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_REPLY(c, "DEBIT 1000000000000 k=w1",
                 "ERR bad-request \"DEBIT 1000000000000 above max_debit 10 of rule w\"");
    EXPECT_OK_RULE(c, "PEEK k=w1", true, 10, 0, 0, "w");
    /* Within it: charged, the debt in Redis bounded at 4 limits. */
    for (int i = 0; i < 20; i++)
        EXPECT_OK_RULE(c, "DEBIT 10 k=w1", i == 0, 0, 599, 600, "w");
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

#define MEMBER_UID  64302       /* a divvy-fast member */
#define MEMBER_GID  64303       /* its primary group */
#define FAST_GID    64304       /* server.fast_group */

/* What the member's libdivvy answered (shared with the child). */
struct member_run {
    int step;                   /* where it failed, 0: it did not */
    int rc[3];
    int fast[3];
    char err[2][256];
};

/* The member: libdivvy in-process; a DEBIT above max_debit goes to divvyd. */
static int member_child(void *arg)
{
    struct member_run *m = arg;
    const gid_t groups[] = { FAST_GID };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy *h = NULL;
    uint64_t deadline;

    if (setgroups(1, groups) < 0 || setgid(MEMBER_GID) < 0 || setuid(MEMBER_UID) < 0)
        return m->step = 1;
    if (divvy_open(NULL, DIVVY_AUTO, &h) < 0)
        return m->step = 2;
    deadline = harness_now_ms() + 5000;
    while (divvy_peek(h, &(struct divvy_kv){ "k", "elsewhere" }, 1, &res) < 0 ||
           !res.fast_path) {
        if (harness_now_ms() > deadline)
            return m->step = 3;
        harness_pause_ms(20);
    }
    m->rc[0] = divvy_debit(h, 10, &(struct divvy_kv){ "k", "w1" }, 1, &res);
    m->fast[0] = res.fast_path;
    m->rc[1] = divvy_debit(h, 1000000000000ULL, &(struct divvy_kv){ "k", "w2" }, 1, &res);
    snprintf(m->err[0], sizeof(m->err[0]), "%.250s", divvy_errmsg(h));
    divvy_close(h);
    h = NULL;
    if (divvy_open(NULL, DIVVY_FAST_ONLY, &h) < 0)
        return m->step = 4;
    m->rc[2] = divvy_debit(h, 11, &(struct divvy_kv){ "k", "w2" }, 1, &res);
    snprintf(m->err[1], sizeof(m->err[1]), "%.250s", divvy_errmsg(h));
    divvy_close(h);
    return 0;
}

/* libdivvy's fast path, in a divvy-fast member that is not root: a DEBIT
 * within max_debit is decided in-process, one above it is not (divvyd
 * refuses it, with its reason), and DIVVY_FAST_ONLY says it cannot decide. */
static void test_debit_bounded_fast_member(void **state)
{
    char conf[4096], reply[HARNESS_LINE];
    struct harness_opts o = { .config_name = "debit.conf", .config_text = conf };
    struct member_run *m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    pid_t pid;
    int status;

    (void)state;
    assert_true(m != MAP_FAILED);
    memset(m, 0, sizeof(*m));
    snprintf(conf, sizeof(conf), "server = { socket_mode = \"0666\"; fast_group = \"%d\"; };\n"
             "rules = (\n%s\n);\n", FAST_GID, RULES_LOCAL("fast_path = true;"));
    CHECK(harness_start(&o, &d));
    /* The member reaches the socket and the state dir, laid out as
     * tmpfiles.d makes /run/divvy; a reload writes the rules file for it. */
    assert_int_equal(chmod(d->dir, 0755), 0);
    assert_int_equal(chown(d->state, 0, FAST_GID), 0);
    assert_int_equal(chmod(d->state, 02755), 0);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "RELOAD", reply, sizeof(reply)));
    EXPECT_PREFIX(reply, "OK reloaded");
    CHECK(harness_divvy_env(d));
    CHECK(harness_spawn(member_child, m, &pid));
    CHECK(harness_reap(pid, 30000, &status));
    if (status != 0 || m->step)
        fail_msg("the member stopped (exit %d, step %d)", status, m->step);
    assert_int_equal(m->rc[0], 0);
    assert_true(m->fast[0]);
    assert_int_equal(m->rc[1], -EINVAL);
    if (!strstr(m->err[0], "DEBIT 1000000000000 above max_debit 10 of rule w"))
        fail_msg("divvy_debit(10^12) by the member: %s", m->err[0]);
    assert_int_equal(m->rc[2], -ENOTSUP);
    if (!strstr(m->err[1], "max_debit"))
        fail_msg("divvy_debit(11), DIVVY_FAST_ONLY: %s", m->err[1]);
    /* Nothing was charged by the refused ones. */
    EXPECT_OK_RULE(c, "PEEK k=w1", false, 0, 599, 600, "w");
    EXPECT_OK_RULE(c, "PEEK k=w2", true, 10, 0, 0, "w");
    harness_close(c);
    munmap(m, sizeof(*m));
}

/* ---- concurrency: TAKE and DEBIT mixed, an exact balance -------------------- */

#define MX_PROCS  4
#define MX_ROUNDS 150           /* per process: TAKE 1 then DEBIT 3 */

struct mx_shared {
    long allowed_takes, allowed_debits, errors;
    char first_error[256];
};

struct mx_plan {
    struct harness_daemon *d;
    struct mx_shared *sh;
    bool fast;                  /* libdivvy's fast path, else the socket, pipelined */
    const char *actor;
};

static void mx_error(struct mx_shared *sh, const char *what)
{
    if (__atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED) == 0)
        snprintf(sh->first_error, sizeof(sh->first_error), "%.250s", what);
}

static void mx_count(struct mx_shared *sh, bool debit, bool allowed)
{
    if (allowed)
        __atomic_fetch_add(debit ? &sh->allowed_debits : &sh->allowed_takes, 1,
                           __ATOMIC_RELAXED);
}

static int mx_fast(struct mx_plan *pl)
{
    struct divvy_kv kv = { "k", pl->actor };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy *h = NULL;

    if (divvy_open(NULL, DIVVY_FAST_ONLY, &h) < 0) {
        mx_error(pl->sh, "divvy_open");
        return 1;
    }
    for (int i = 0; i < MX_ROUNDS; i++) {
        if (divvy_take(h, 1, &kv, 1, &res) < 0 || !res.fast_path) {
            mx_error(pl->sh, "divvy_take");
            break;
        }
        mx_count(pl->sh, false, res.allowed);
        if (divvy_debit(h, 3, &kv, 1, &res) < 0 || !res.fast_path) {
            mx_error(pl->sh, "divvy_debit");
            break;
        }
        mx_count(pl->sh, true, res.allowed);
    }
    divvy_close(h);
    return 0;
}

static int mx_socket(struct mx_plan *pl)
{
    struct harness_conn *c;
    char *batch = malloc((size_t)MX_ROUNDS * 2 * 48), line[HARNESS_LINE];
    size_t len = 0;

    if (!batch || harness_connect(pl->d, HARNESS_UNIX, &c) < 0) {
        mx_error(pl->sh, "connect");
        free(batch);
        return 1;
    }
    for (int i = 0; i < MX_ROUNDS; i++)
        len += (size_t)sprintf(batch + len, "TAKE 1 k=%s\nDEBIT 3 k=%s\n", pl->actor,
                               pl->actor);
    if (harness_send(c, batch, len) < 0)
        mx_error(pl->sh, "send");
    for (int i = 0; i < 2 * MX_ROUNDS; i++) {
        char rule[64];
        bool allowed;
        long long credit, secs;

        if (harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS) < 0 ||
            harness_parse_ok_rule(line, &allowed, &credit, &secs, rule, sizeof(rule)) < 0) {
            mx_error(pl->sh, line);
            break;
        }
        mx_count(pl->sh, i % 2 == 1, allowed);
    }
    harness_close(c);
    free(batch);
    return 0;
}

static int mx_process(void *arg)
{
    struct mx_plan *pl = arg;

    return pl->fast ? mx_fast(pl) : mx_socket(pl);
}

/* MX_PROCS processes, MX_ROUNDS x (TAKE 1, DEBIT 3) each, on one counter of
 * 5000: 2400 charged in all, every one allowed, exactly 2600 left. */
static void mx_run(struct harness_daemon *d, bool fast, const char *actor)
{
    struct mx_shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct mx_plan pl = { .d = d, .fast = fast, .actor = actor };
    struct harness_conn *c;
    pid_t pids[MX_PROCS];
    char req[64];
    int status;

    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    pl.sh = sh;
    for (int i = 0; i < MX_PROCS; i++)
        CHECK(harness_spawn(mx_process, &pl, &pids[i]));
    for (int i = 0; i < MX_PROCS; i++) {
        CHECK(harness_reap(pids[i], 60000, &status));
        assert_int_equal(status, 0);
    }
    if (sh->errors)
        fail_msg("%ld errors, first: %s", sh->errors, sh->first_error);
    assert_int_equal(sh->allowed_takes, MX_PROCS * MX_ROUNDS);
    assert_int_equal(sh->allowed_debits, MX_PROCS * MX_ROUNDS);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    snprintf(req, sizeof(req), "PEEK k=%s", actor);
    EXPECT_OK_RULE(c, req, true, 5000 - MX_PROCS * MX_ROUNDS * 4, 3590, 3600, "mix");
    /* One more DEBIT past the rest: in debt, and every hit is denied. */
    snprintf(req, sizeof(req), "DEBIT 2601 k=%s", actor);
    EXPECT_OK_RULE(c, req, false, 0, 3590, 3600, "mix");
    snprintf(req, sizeof(req), "TAKE 1 k=%s", actor);
    EXPECT_OK_RULE(c, req, false, 0, 3590, 3600, "mix");
    harness_close(c);
    munmap(sh, sizeof(*sh));
}

static void test_debit_concurrent_socket(void **state)
{
    struct harness_daemon *d = start_local(RULES_LOCAL(""));

    (void)state;
    mx_run(d, false, "mix-socket");
}

static void test_debit_concurrent_fast_path(void **state)
{
    struct harness_daemon *d = start_local(RULES_LOCAL("fast_path = true;"));
    struct divvy *h = NULL;

    (void)state;
    CHECK(harness_divvy_env(d));
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    harness_wait_fast(h, (struct divvy_kv[]){ { "k", "elsewhere" } }, 1);
    divvy_close(h);
    mx_run(d, true, "mix-fast");
}

static void test_debit_concurrent_redis(void **state)
{
    struct redis_srv *rs = NULL;
    struct harness_daemon *d;

    (void)state;
    d = start_strict(&rs, 5000, 2);
    mx_run(d, false, "mix-redis");
    harness_free(d);
    redis_stop(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_debit_socket, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_debit_bad_input, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_debit_privileged, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_debit_lowered_limit_no_debt, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_debit_payback_socket, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_debit_fast_path, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_debit_unprivileged_bounded, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_debit_bounded_redis, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_debit_bounded_fast_member, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_debit_redis, harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_debit_concurrent_socket, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_debit_concurrent_fast_path, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_debit_concurrent_redis, harness_setup,
                                        redis_teardown),
    };

    if (getenv("DIVVY_TEST_FILTER"))
        cmocka_set_test_filter(getenv("DIVVY_TEST_FILTER"));
    return cmocka_run_group_tests_name("debit", tests, NULL, NULL);
}
