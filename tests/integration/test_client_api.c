/* SPDX-License-Identifier: MIT */
/*
 * Integration: libdivvy against the real divvyd.  The socket path answers
 * exactly what the raw protocol answers (HIT, TAKE, PEEK, RESET, commands,
 * errors, TCP); the fast path and the socket give the same answers for the
 * same sequence on two keys through two handles, for every algorithm, match
 * policy and zero semantics; rules that are not fast_path go over the socket
 * transparently (also inside a batch); threads with one handle each stay
 * exact; a handle survives a daemon restart (reconnect, remap, and re-attach
 * when the table file was rebuilt); and a caller that may not map the table
 * gets the same answers over the socket.
 */
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "divvy.h"
#include "harness.h"

#define NOBODY 65534

static const char api_conf[] =
    "server = { socket_mode = \"0666\"; };\n"
    "rules = (\n"
    "    { match = { t = \"win\"; }; label = \"win\"; credit_limit = 5; reset_seconds = 60;\n"
    "      actor = \"k\"; fast_path = true; },\n"
    "    { match = { t = \"tb\"; }; label = \"tb\"; algorithm = \"token_bucket\";\n"
    "      credit_limit = 4; refill_amount = 1; refill_seconds = 3600; actor = \"k\";\n"
    "      fast_path = true; },\n"
    "    { match = { t = \"sw\"; }; label = \"sw\"; algorithm = \"sliding_window\";\n"
    "      credit_limit = 5; reset_seconds = 60; actor = \"k\"; fast_path = true; },\n"
    "    { match = { t = \"multi\"; }; label = \"canary\"; match_policy = \"canary\";\n"
    "      credit_limit = 2; reset_seconds = 60; actor = \"k\"; fast_path = true; },\n"
    "    { match = { t = \"multi\"; }; label = \"cont\"; match_policy = \"continue\";\n"
    "      credit_limit = 4; reset_seconds = 60; actor = \"k\"; fast_path = true; },\n"
    "    { match = { t = \"multi\"; u = \"*\"; }; label = \"multi\"; credit_limit = 6;\n"
    "      reset_seconds = 60; actor = [ \"k\", \"u\" ]; fast_path = true; },\n"
    "    { match = { t = \"zero\"; }; label = \"zero\"; credit_limit = 0; reset_seconds = 60; },\n"
    "    { match = { t = \"open\"; }; label = \"open\"; credit_limit = 7; reset_seconds = 0; },\n"
    "    { match = { t = \"slow\"; }; label = \"slow\"; credit_limit = 3; reset_seconds = 60;\n"
    "      actor = \"k\"; },\n"
    "    { match = { t = \"mixed\"; }; label = \"mixed-canary\"; match_policy = \"canary\";\n"
    "      credit_limit = 3; reset_seconds = 60; actor = \"k\"; },\n"
    "    { match = { t = \"mixed\"; }; label = \"mixed\"; credit_limit = 3; reset_seconds = 60;\n"
    "      actor = \"k\"; fast_path = true; },\n"
    "    { match = { t = \"glob\"; p = \"/a/*\"; }; label = \"glob\"; credit_limit = 3;\n"
    "      reset_seconds = 60; actor = \"k\"; fast_path = true; },\n"
    "    { match = { t = \"thr\"; }; label = \"thr\"; credit_limit = 3000; reset_seconds = 3600;\n"
    "      fast_path = true; },\n"
    "    { match = { t = \"rs\"; }; label = \"rs\"; credit_limit = 1000; reset_seconds = 3600;\n"
    "      fast_path = true; },\n"
    "    { match = { t = \"perm\"; }; label = \"perm\"; credit_limit = 10; reset_seconds = 3600;\n"
    "      fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static struct harness_daemon *start_api(const char *conf)
{
    struct harness_opts o = { .config_name = "client.conf", .config_text = conf, .workers = 2 };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    /* The fast path looks for the table beside the socket unless told. */
    unsetenv("DIVVY_PATH");
    unsetenv("DIVVY_ADDRESS");
    return d;
}

static struct divvy *open_handle(struct harness_daemon *d, unsigned flags)
{
    char addr[HARNESS_PATH + 8];
    struct divvy *h = NULL;
    int r;

    snprintf(addr, sizeof(addr), "unix:%s", d->sock);
    r = divvy_open(addr, flags, &h);
    if (r < 0)
        fail_msg("divvy_open(%s, %u): %s", addr, flags, strerror(-r));
    return h;
}

/* ---- the socket path speaks the protocol ------------------------------------- */

static void expect_same(const struct divvy_result *res, const char *raw, const char *what)
{
    char rule[128];
    bool allowed;
    long long credit, secs;

    if (harness_parse_ok_rule(raw, &allowed, &credit, &secs, rule, sizeof(rule)) < 0)
        fail_msg("%s: raw reply \"%s\"", what, raw);
    if (res->allowed != allowed || (long long)res->credit != credit ||
        llabs((long long)res->reset_seconds - secs) > 1 || strcmp(res->rule, rule) != 0)
        fail_msg("%s: libdivvy said %d %llu %llu %s, the protocol \"%s\"", what, res->allowed,
                 (unsigned long long)res->credit, (unsigned long long)res->reset_seconds,
                 res->rule, raw);
}

static void test_client_socket_equals_protocol(void **state)
{
    static const char *const ts[] = { "win", "tb", "sw", "slow", "zero", "open", "nomatch" };
    struct harness_daemon *d = start_api(api_conf);
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy *h = open_handle(d, DIVVY_SOCKET_ONLY);
    struct harness_conn *c;
    char raw[HARNESS_LINE], line[256], what[300], **lines = NULL, body[HARNESS_LINE];
    size_t n = 0;
    int nraw;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        /* Same sequence on key L (libdivvy) and key R (raw). */
        for (int step = 0; step < 8; step++) {
            struct divvy_kv kv[2] = { { "t", ts[i] }, { "k", "L" } };

            if (step == 3) {
                CHECK(divvy_peek(h, kv, 2, &res));
                snprintf(line, sizeof(line), "PEEK t=%s k=R", ts[i]);
            } else if (step == 5) {
                CHECK(divvy_take(h, 2, kv, 2, &res));
                snprintf(line, sizeof(line), "TAKE 2 t=%s k=R", ts[i]);
            } else {
                CHECK(divvy_hit(h, kv, 2, &res));
                snprintf(line, sizeof(line), "TAKE 1 t=%s k=R", ts[i]);
            }
            CHECK(harness_cmd(c, line, raw, sizeof(raw)));
            snprintf(what, sizeof(what), "%s (step %d)", line, step);
            expect_same(&res, raw, what);
            assert_int_equal(res.fast_path, 0);
        }
    }
    /* HIT's reply and libdivvy's hit agree on the first four fields. */
    CHECK(divvy_hitv(h, &res, "t", "win", "k", "L2", NULL));
    EXPECT_REPLY(c, "HIT t=win k=R2", "OK true 4 60");
    assert_int_equal(res.credit, 4);
    assert_string_equal(res.rule, "win");
    /* Quoting: a value with spaces and '=' reaches the daemon intact. */
    CHECK(divvy_hitv(h, &res, "t", "win", "k", "a b=c", NULL));
    EXPECT_REPLY(c, "PEEK t=win k=\"a b=c\"", "OK true 4 60 win");

    /* divvy_command returns the raw lines. */
    CHECK(divvy_command(h, "PING", &lines, &n));
    assert_int_equal(n, 1);
    assert_string_equal(lines[0], "OK pong");
    divvy_lines_free(lines, n);
    CHECK(divvy_command(h, "RULES", &lines, &n));
    nraw = harness_multi(c, "RULES", body, sizeof(body));
    CHECK(nraw);
    assert_int_equal(n, (size_t)nraw + 1);
    snprintf(line, sizeof(line), "OK %d", nraw);
    assert_string_equal(lines[0], line);
    {
        size_t off = 0;

        for (size_t i = 1; i < n; i++) {
            size_t l = strlen(lines[i]);

            assert_memory_equal(body + off, lines[i], l);
            assert_int_equal(body[off + l], '\n');
            off += l + 1;
        }
    }
    divvy_lines_free(lines, n);
    CHECK(divvy_command(h, "EXPLAIN t=win k=x", &lines, &n));
    assert_true(n >= 2);
    EXPECT_PREFIX(lines[0], "OK ");
    divvy_lines_free(lines, n);
    CHECK(divvy_command(h, "FROB", &lines, &n));
    assert_int_equal(n, 1);
    assert_string_equal(lines[0], "ERR unknown-command \"Unrecognized command: FROB\"");
    divvy_lines_free(lines, n);
    /* An admin verb as root on the Unix socket works. */
    CHECK(divvy_reset(h, (struct divvy_kv[]){ { "t", "win" }, { "k", "L" } }, 2, &res));
    assert_int_equal(res.allowed, 1);
    assert_int_equal(res.credit, 5);
    assert_string_equal(res.rule, "win");
    EXPECT_REPLY(c, "PEEK t=win k=L", "OK true 5 0 win");
    divvy_close(h);
    harness_close(c);
}

/* Over TCP: answers, and the daemon's ERR codes as errnos with its reason. */
static void test_client_tcp_and_errors(void **state)
{
    struct harness_daemon *d = start_api(api_conf);
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "t", "win" }, { "k", "tcp" } };
    struct divvy *h = NULL;
    char addr[64];

    (void)state;
    snprintf(addr, sizeof(addr), "tcp:127.0.0.1:%d", d->tcp_port);
    CHECK(divvy_open(addr, DIVVY_AUTO, &h));
    CHECK(divvy_hit(h, kv, 2, &res));
    assert_int_equal(res.allowed, 1);
    assert_int_equal(res.credit, 4);
    assert_int_equal(res.fast_path, 0);         /* no table directory for tcp: */
    assert_int_equal(divvy_reset(h, kv, 2, &res), -EPERM);
    EXPECT_PREFIX(divvy_errmsg(h), "divvyd: forbidden: ");
    /* The connection stays usable after an ERR. */
    CHECK(divvy_hit(h, kv, 2, &res));
    assert_int_equal(res.credit, 3);
    divvy_close(h);
    snprintf(addr, sizeof(addr), "tcp:[::1]:%d", d->tcp_port);
    CHECK(divvy_open(addr, DIVVY_SOCKET_ONLY, &h));
    assert_true(divvy_hit(h, kv, 2, &res) < 0);     /* divvyd listens on 127.0.0.1 only */
    divvy_close(h);
    /* Nothing listens: refused, quickly. */
    CHECK(divvy_open("tcp:127.0.0.1:1", DIVVY_SOCKET_ONLY, &h));
    assert_int_equal(divvy_hit(h, kv, 2, &res), -ECONNREFUSED);
    divvy_close(h);
}

/* ---- fast path == socket ------------------------------------------------------- */

struct step {
    char op;                    /* h hit, t take, p peek */
    unsigned amount;
    const char *t;
    const char *extra_key, *extra_value;
    bool fast;                  /* expected on the fast path (AUTO handle) */
};

static void run_step(struct divvy *h, const struct step *s, const char *key,
                     struct divvy_result *res)
{
    struct divvy_kv kv[3] = { { "t", s->t }, { "k", key }, { s->extra_key, s->extra_value } };
    size_t n = s->extra_key ? 3 : 2;
    int r;

    r = s->op == 'h'   ? divvy_hit(h, kv, n, res)
        : s->op == 't' ? divvy_take(h, s->amount, kv, n, res)
                       : divvy_peek(h, kv, n, res);
    if (r < 0)
        fail_msg("%c t=%s k=%s: %s (%s)", s->op, s->t, key, strerror(-r), divvy_errmsg(h));
}

static void test_client_fast_equals_socket(void **state)
{
    static const char *const ts[] = { "win", "tb", "sw", "multi", "zero", "open", "slow",
                                      "mixed", "glob", "nomatch" };
    struct harness_daemon *d = start_api(api_conf);
    struct divvy *fast = open_handle(d, DIVVY_AUTO), *sock = open_handle(d, DIVVY_SOCKET_ONLY);
    struct divvy_result rf = { .size = sizeof(rf) }, rs = { .size = sizeof(rs) };
    int n_fast = 0, n_steps = 0;

    (void)state;
    harness_wait_fast(fast, (struct divvy_kv[]){ { "t", "win" }, { "k", "warm-up" } }, 2);
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        bool is_slow = strcmp(ts[i], "slow") == 0 || strcmp(ts[i], "mixed") == 0;
        const char *ek = NULL, *ev = NULL;

        if (strcmp(ts[i], "multi") == 0) {
            ek = "u";
            ev = "someone";
        } else if (strcmp(ts[i], "glob") == 0) {
            ek = "p";
            ev = "/a/b c";
        }
        for (int k = 0; k < 12; k++) {
            struct step s = { .op = k == 0 || k == 7 ? 'p' : k == 4 || k == 9 ? 't' : 'h',
                              .amount = k == 4 ? 2 : 100, .t = ts[i], .extra_key = ek,
                              .extra_value = ev, .fast = !is_slow };

            /* The glob rule without a matching p falls to the default. */
            if (strcmp(ts[i], "glob") == 0 && k >= 10)
                s.extra_value = "/b";
            run_step(fast, &s, "A", &rf);
            run_step(sock, &s, "B", &rs);
            n_steps++;
            if (rf.allowed != rs.allowed || rf.credit != rs.credit ||
                llabs((long long)rf.reset_seconds - (long long)rs.reset_seconds) > 1 ||
                strcmp(rf.rule, rs.rule) != 0)
                fail_msg("t=%s step %d: fast path %d %llu %llu %s, socket %d %llu %llu %s",
                         ts[i], k, rf.allowed, (unsigned long long)rf.credit,
                         (unsigned long long)rf.reset_seconds, rf.rule, rs.allowed,
                         (unsigned long long)rs.credit, (unsigned long long)rs.reset_seconds,
                         rs.rule);
            if (rf.fast_path != (int)s.fast)
                fail_msg("t=%s step %d: fast_path = %d, want %d (%s)", ts[i], k, rf.fast_path,
                         s.fast, divvy_errmsg(fast));
            assert_int_equal(rs.fast_path, 0);
            n_fast += rf.fast_path;
        }
    }
    assert_true(n_fast > n_steps / 2);
    /* The continue rule (limit 4) ran out first on both paths alike: it decides. */
    {
        struct divvy_kv a[2] = { { "t", "multi" }, { "k", "A" } }, b[2] = { { "t", "multi" },
                                                                             { "k", "B" } };

        CHECK(divvy_peek(fast, a, 2, &rf));
        CHECK(divvy_peek(sock, b, 2, &rs));
        assert_string_equal(rf.rule, "cont");
        assert_string_equal(rs.rule, "cont");
        assert_int_equal(rf.allowed, 0);
        assert_int_equal(rf.credit, rs.credit);
    }
    divvy_close(fast);
    divvy_close(sock);
}

/* A batch mixes both paths; results come back in request order. */
static void test_client_batch_mixed(void **state)
{
    static const char *const ts[] = { "win", "slow", "tb", "mixed", "zero", "win", "slow" };
    enum { N = 7, ROUNDS = 4 };
    struct harness_daemon *d = start_api(api_conf);
    struct divvy *fast = open_handle(d, DIVVY_AUTO), *sock = open_handle(d, DIVVY_SOCKET_ONLY);
    struct divvy_kv kv_f[N][2], kv_s[N][2];
    struct divvy_request rq_f[N], rq_s[N];
    struct divvy_result rf[N], rs[N];

    (void)state;
    harness_wait_fast(fast, (struct divvy_kv[]){ { "t", "win" }, { "k", "warm-up" } }, 2);
    for (int i = 0; i < N; i++) {
        kv_f[i][0] = (struct divvy_kv){ "t", ts[i] };
        kv_f[i][1] = (struct divvy_kv){ "k", "batch-A" };
        kv_s[i][0] = (struct divvy_kv){ "t", ts[i] };
        kv_s[i][1] = (struct divvy_kv){ "k", "batch-B" };
        rq_f[i] = (struct divvy_request){ .amount = i == 2 ? 2 : 0, .kv = kv_f[i], .n_kv = 2 };
        rq_s[i] = (struct divvy_request){ .amount = i == 2 ? 2 : 0, .kv = kv_s[i], .n_kv = 2 };
        rf[i].size = rs[i].size = sizeof(rf[i]);
    }
    for (int round = 0; round < ROUNDS; round++) {
        assert_int_equal(divvy_hit_many(fast, rq_f, N, rf), N);
        assert_int_equal(divvy_hit_many(sock, rq_s, N, rs), N);
        for (int i = 0; i < N; i++) {
            if (rf[i].allowed != rs[i].allowed || rf[i].credit != rs[i].credit ||
                strcmp(rf[i].rule, rs[i].rule) != 0)
                fail_msg("round %d request %d (t=%s): %d %llu %s vs %d %llu %s", round, i,
                         ts[i], rf[i].allowed, (unsigned long long)rf[i].credit, rf[i].rule,
                         rs[i].allowed, (unsigned long long)rs[i].credit, rs[i].rule);
            assert_int_equal(rf[i].fast_path,
                             strcmp(ts[i], "slow") != 0 && strcmp(ts[i], "mixed") != 0);
            assert_int_equal(rs[i].fast_path, 0);
        }
    }
    /* "win" twice per round, limit 5: denied from the 3rd round's second on. */
    assert_int_equal(rf[0].allowed, 0);
    divvy_close(fast);
    divvy_close(sock);
}

/* ---- threads: one handle each ---------------------------------------------------- */

#define THREADS 4
#define THREAD_HITS 1500

struct thr {
    struct harness_daemon *d;
    unsigned flags;
    long allowed, fast, errors;
    unsigned char *seen;        /* shared: allowed replies per credit value */
    char err[128];
};

static void *thr_main(void *arg)
{
    struct thr *t = arg;
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[1] = { { "t", "thr" } };
    char addr[HARNESS_PATH + 8];
    struct divvy *h = NULL;
    int r;

    snprintf(addr, sizeof(addr), "unix:%s", t->d->sock);
    r = divvy_open(addr, t->flags, &h);
    if (r < 0) {
        t->errors++;
        snprintf(t->err, sizeof(t->err), "open: %s", strerror(-r));
        return NULL;
    }
    for (int i = 0; i < THREAD_HITS; i++) {
        r = divvy_hit(h, kv, 1, &res);
        if (r < 0 || res.credit >= 3000) {
            if (!t->errors++)
                snprintf(t->err, sizeof(t->err), "hit: %s", divvy_errmsg(h));
            continue;
        }
        t->fast += res.fast_path;
        if (res.allowed) {
            t->allowed++;
            __atomic_fetch_add(&t->seen[res.credit], 1, __ATOMIC_RELAXED);
        }
    }
    divvy_close(h);
    return NULL;
}

static void test_client_threads(void **state)
{
    struct harness_daemon *d = start_api(api_conf);
    struct divvy *probe = open_handle(d, DIVVY_AUTO);
    struct thr t[THREADS];
    pthread_t th[THREADS];
    unsigned char *seen = harness_scratch(3000);
    long allowed = 0;

    (void)state;
    assert_non_null(seen);
    harness_wait_fast(probe, (struct divvy_kv[]){ { "t", "win" }, { "k", "warm-up" } }, 2);
    divvy_close(probe);
    for (int i = 0; i < THREADS; i++) {
        t[i] = (struct thr){ .d = d, .flags = i % 2 ? DIVVY_SOCKET_ONLY : DIVVY_AUTO,
                             .seen = seen };
        assert_int_equal(pthread_create(&th[i], NULL, thr_main, &t[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < THREADS; i++) {
        if (t[i].errors)
            fail_msg("thread %d: %ld errors, first: %s", i, t[i].errors, t[i].err);
        allowed += t[i].allowed;
        if (i % 2 == 0)
            assert_true(t[i].fast > 0);
        else
            assert_int_equal(t[i].fast, 0);
    }
    /* 6000 attempts on a limit of 3000: exactly 3000 allowed, each credit once. */
    assert_int_equal(allowed, 3000);
    for (int c = 0; c < 3000; c++)
        if (seen[c] != 1)
            fail_msg("credit %d reported %d times", c, seen[c]);
}

/* ---- daemon restart ---------------------------------------------------------------- */

static void hit_rs(struct divvy *h, long long want_credit, int want_fast, const char *what)
{
    struct divvy_result res = { .size = sizeof(res) };
    int r = divvy_hit(h, (struct divvy_kv[]){ { "t", "rs" } }, 1, &res);

    if (r < 0)
        fail_msg("%s: %s (%s)", what, strerror(-r), divvy_errmsg(h));
    if ((long long)res.credit != want_credit || !res.allowed ||
        (want_fast >= 0 && res.fast_path != want_fast))
        fail_msg("%s: allowed %d credit %llu fast %d, want credit %lld fast %d", what,
                 res.allowed, (unsigned long long)res.credit, res.fast_path, want_credit,
                 want_fast);
}

static void test_client_daemon_restart(void **state)
{
    struct harness_daemon *d = start_api(api_conf);
    struct divvy *fast = open_handle(d, DIVVY_AUTO), *sock = open_handle(d, DIVVY_SOCKET_ONLY);
    struct divvy_result res = { .size = sizeof(res) };
    long long credit = 1000;
    uint64_t t0, deadline;
    char *conf;
    int r;

    (void)state;
    harness_wait_fast(fast, (struct divvy_kv[]){ { "t", "rs" }, { "k", "warm-up" } }, 2);
    hit_rs(fast, --credit, 1, "before restart (fast)");
    hit_rs(sock, --credit, 0, "before restart (socket)");

    /* Restart at once: the table file is kept, so are the counts; the socket
     * handle reconnects transparently, the fast one remaps the new rules. */
    CHECK(harness_stop(d, NULL));
    CHECK(harness_restart(d));
    hit_rs(sock, --credit, 0, "after restart (socket, reconnected)");
    hit_rs(fast, --credit, -1, "after restart (fast handle)");
    harness_wait_fast(fast, (struct divvy_kv[]){ { "t", "rs" }, { "k", "warm-up" } }, 2);
    hit_rs(fast, --credit, 1, "after restart (fast path)");

    /* Daemon gone: within the heartbeat's 3 s the handle falls back to the
     * socket, which fails cleanly and quickly. */
    CHECK(harness_stop(d, NULL));
    CHECK(divvy_set_timeouts(fast, 300, 300));
    t0 = harness_now_ms();
    deadline = t0 + 6000;
    do {
        uint64_t c0 = harness_now_ms();

        r = divvy_hit(fast, (struct divvy_kv[]){ { "t", "rs" } }, 1, &res);
        assert_true(harness_now_ms() - c0 < 1000);
        if (r == 0) {
            assert_int_equal(res.fast_path, 1);
            assert_int_equal((long long)res.credit, --credit);
            harness_pause_ms(50);
        }
    } while (r == 0 && harness_now_ms() < deadline);
    if (r != -ENOENT && r != -ECONNREFUSED)
        fail_msg("with divvyd stopped: %s (%s)", strerror(-r), divvy_errmsg(fast));
    fprintf(stderr, "  fast path answered for %llu ms after divvyd stopped\n",
            (unsigned long long)(harness_now_ms() - t0));

    /* A new table size makes the next daemon rebuild the table file: the
     * handle re-attaches the new file (fresh counters) and maps its rules. */
    conf = harness_scratch(sizeof(api_conf) + 64);
    assert_non_null(conf);
    snprintf(conf, sizeof(api_conf) + 64, "table = { fast_slots = 4096; };\n%s", api_conf);
    CHECK(harness_write_config(d, conf));
    CHECK(harness_restart(d));
    hit_rs(sock, 999, 0, "after the rebuild (socket)");
    deadline = harness_now_ms() + 5000;
    for (;;) {
        CHECK(divvy_peek(fast, (struct divvy_kv[]){ { "t", "rs" } }, 1, &res));
        if (res.fast_path)
            break;
        if (harness_now_ms() > deadline)
            fail_msg("the handle never re-attached the rebuilt table (%s)", divvy_errmsg(fast));
        harness_pause_ms(50);
    }
    hit_rs(fast, 998, 1, "after the rebuild (fast path)");
    divvy_close(fast);
    divvy_close(sock);
}

/* ---- no permission: the socket, with the same answers ------------------------------ */

static int as_nobody(void *arg)
{
    struct harness_daemon *d = arg;
    struct divvy_result res = { .size = sizeof(res) };
    char addr[HARNESS_PATH + 8];
    struct divvy *h = NULL;

    if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
        return 100;
    snprintf(addr, sizeof(addr), "unix:%s", d->sock);
    if (divvy_open(addr, DIVVY_FAST_ONLY, &h) != -EACCES)
        return 1;
    if (divvy_open(addr, DIVVY_AUTO, &h) < 0)
        return 2;
    for (int i = 0; i < 5; i++) {
        if (divvy_hit(h, (struct divvy_kv[]){ { "t", "perm" } }, 1, &res) < 0)
            return 3;
        if (res.fast_path || !res.allowed || res.credit != (uint64_t)(7 - i) ||
            strcmp(res.rule, "perm") != 0)
            return 4;
    }
    divvy_close(h);
    return 0;
}

static void test_client_no_permission(void **state)
{
    struct harness_daemon *d;
    struct divvy *h;
    struct divvy_result res = { .size = sizeof(res) };
    pid_t pid;
    int status;

    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: cannot test an unprivileged caller)\n");
        skip();
    }
    d = start_api(api_conf);
    h = open_handle(d, DIVVY_AUTO);
    assert_int_equal(chmod(d->dir, 0755), 0);
    harness_wait_fast(h, (struct divvy_kv[]){ { "t", "perm" }, { "k", "warm-up" } }, 2);
    CHECK(divvy_hit(h, (struct divvy_kv[]){ { "t", "perm" } }, 1, &res));
    CHECK(divvy_hit(h, (struct divvy_kv[]){ { "t", "perm" } }, 1, &res));
    assert_int_equal(res.credit, 8);
    assert_int_equal(res.fast_path, 1);
    CHECK(harness_spawn(as_nobody, d, &pid));
    CHECK(harness_reap(pid, 20000, &status));
    if (status != 0)
        fail_msg("unprivileged client failed at step %d", status);
    CHECK(divvy_hit(h, (struct divvy_kv[]){ { "t", "perm" } }, 1, &res));
    assert_int_equal(res.credit, 2);
    assert_int_equal(res.fast_path, 1);
    divvy_close(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_client_socket_equals_protocol, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_client_tcp_and_errors, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_client_fast_equals_socket, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_client_batch_mixed, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_client_threads, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_client_daemon_restart, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_client_no_permission, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("client_api", tests, NULL, NULL);
}
