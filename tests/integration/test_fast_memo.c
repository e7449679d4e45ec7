/* SPDX-License-Identifier: MIT */
/*
 * Integration: the fast path's memo of request shapes (libclient/client_memo.c)
 * against the real divvyd.  The memo decides a request it has seen the shape
 * of without normalising or matching it again, so it must answer exactly
 * what the long way answers: thousands of random requests (keys in any
 * order, repeated keys, globs, presence keys, one- and two-key actors, an
 * IPv4 prefix, a continue rule, a rule that is not fast_path) are PEEKed
 * twice through a fast-path handle (learn, then memo) and once through a
 * socket-only handle and must agree; TAKEs through the fast path must leave
 * the counts the socket then reports.  A learned shape with a value the
 * protocol cannot carry, or a line too long, must still fail as the long way
 * fails; a reload that sends the same shape to another rule is followed at
 * once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "divvy.h"
#include "harness.h"

static const char memo_conf[] =
    "table = { fast_slots = 65536; };\n"
    "rules = (\n"
    "    { match = { method = \"GET\"; path = \"/api/*\"; }; label = \"api-get\";\n"
    "      credit_limit = 1000000; reset_seconds = 3600; actor = \"ip\"; actor_prefix4 = 24;\n"
    "      match_policy = \"continue\"; fast_path = true; },\n"
    "    { match = { path = \"/api/v1\"; user = \"*\"; }; label = \"v1-user\";\n"
    "      credit_limit = 1000000; reset_seconds = 3600; actor = [\"user\", \"ip\"];\n"
    "      fast_path = true; },\n"
    "    { match = { path = \"*.php\"; }; label = \"php\"; credit_limit = 1000000;\n"
    "      reset_seconds = 60; actor = \"ip\"; fast_path = true; },\n"
    "    { match = { method = \"POST\"; }; label = \"post\"; credit_limit = 1000000;\n"
    "      reset_seconds = 60; fast_path = true; },\n"
    "    { match = { tier = \"gold\"; }; label = \"gold\"; credit_limit = 1000000;\n"
    "      reset_seconds = 60; },\n"
    "    { match = { path = \"*\"; }; label = \"any-path\"; credit_limit = 1000000;\n"
    "      reset_seconds = 60; actor = \"extra\"; fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

/* The same shapes, other rules: "api-get" is now "api-get-2" and stops. */
static const char memo_conf_2[] =
    "table = { fast_slots = 65536; };\n"
    "rules = (\n"
    "    { match = { method = \"GET\"; path = \"/api/*\"; }; label = \"api-get-2\";\n"
    "      credit_limit = 1000000; reset_seconds = 3600; actor = \"ip\"; fast_path = true; },\n"
    "    { match = { path = \"*\"; }; label = \"any-path-2\"; credit_limit = 1000000;\n"
    "      reset_seconds = 60; fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static const char *const keys[] = { "method", "path", "user", "ip", "tier", "extra" };
static const char *const vals[][6] = {
    { "GET", "POST", "PUT", "get", NULL },
    { "/api/v1", "/api/v2", "/x.php", "/other", "/api/a b", "/api/" },
    { "alice", "bob", "", "a,b%", "x=y", NULL },
    { "10.0.0.1", "10.0.0.200", "10.0.1.5", "::1", "2001:db8::1", "" },
    { "gold", "silver", NULL },
    { "1", "2", "three", NULL },
};

static struct harness_daemon *start_memo(const char *conf)
{
    struct harness_opts o = { .config_name = "memo.conf", .config_text = conf, .workers = 2 };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    CHECK(harness_divvy_env(d));
    return d;
}

static struct divvy *open_env(unsigned flags)
{
    struct divvy *h = NULL;
    int r = divvy_open(NULL, flags, &h);

    if (r < 0)
        fail_msg("divvy_open: %s", strerror(-r));
    return h;
}

static size_t n_vals(size_t k)
{
    size_t n = 0;

    while (n < 6 && vals[k][n])
        n++;
    return n;
}

/* A random request: 1-6 pairs in random order, sometimes a repeated key. */
static size_t random_req(struct divvy_kv *kv)
{
    size_t n = 1 + harness_rand() % 6, order[6];

    for (size_t i = 0; i < 6; i++)
        order[i] = i;
    for (size_t i = 5; i > 0; i--) {
        size_t j = harness_rand() % (i + 1), t = order[i];

        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < n; i++) {
        size_t k = order[i];

        kv[i].key = keys[k];
        kv[i].value = vals[k][harness_rand() % n_vals(k)];
    }
    if (harness_rand() % 10 == 0) {
        size_t k = order[harness_rand() % n];

        kv[n].key = keys[k];
        kv[n].value = vals[k][harness_rand() % n_vals(k)];
        n++;
    }
    return n;
}

static void describe(const struct divvy_kv *kv, size_t n, char *buf, size_t size)
{
    size_t len = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, " %s=\"%s\"", kv[i].key, kv[i].value);
}

static bool same_answer(int ra, const struct divvy_result *a, int rb,
                        const struct divvy_result *b)
{
    if (ra != rb)
        return false;
    if (ra < 0)
        return true;
    return a->allowed == b->allowed && a->credit == b->credit &&
           strcmp(a->rule, b->rule) == 0 &&
           (a->reset_seconds > b->reset_seconds ? a->reset_seconds - b->reset_seconds
                                                : b->reset_seconds - a->reset_seconds) <= 1;
}

static void test_memo_agrees_with_socket(void **state)
{
    struct harness_daemon *d = start_memo(memo_conf);
    struct divvy *fast = open_env(DIVVY_AUTO), *sock = open_env(DIVVY_SOCKET_ONLY);
    long in_process = 0, takes = 0;
    char what[512];

    (void)state;
    (void)d;
    harness_wait_fast(fast, (struct divvy_kv[]){ { "path", "/api/v1" } }, 1);
    for (int i = 0; i < 3000; i++) {
        struct divvy_result r1 = { .size = sizeof(r1) }, r2 = { .size = sizeof(r2) },
                            rs = { .size = sizeof(rs) };
        struct divvy_kv kv[8];
        size_t n = random_req(kv);
        int e1, e2, es;

        describe(kv, n, what, sizeof(what));
        e1 = divvy_peek(fast, kv, n, &r1);
        e2 = divvy_peek(fast, kv, n, &r2);
        es = divvy_peek(sock, kv, n, &rs);
        if (!same_answer(e1, &r1, es, &rs) || !same_answer(e2, &r2, es, &rs))
            fail_msg("request %d:%s: fast %d %d %llu %s / again %d %d %llu %s / socket %d %d "
                     "%llu %s", i, what, e1, r1.allowed, (unsigned long long)r1.credit, r1.rule,
                     e2, r2.allowed, (unsigned long long)r2.credit, r2.rule, es, rs.allowed,
                     (unsigned long long)rs.credit, rs.rule);
        in_process += r2.fast_path;
        /* Every third request also takes one credit in-process (when it may),
         * and the socket must then see what the fast path reported. */
        if (i % 3 == 0 && e2 == 0 && r2.fast_path) {
            e1 = divvy_hit(fast, kv, n, &r1);
            es = divvy_peek(sock, kv, n, &rs);
            if (!same_answer(e1, &r1, es, &rs))
                fail_msg("take %d:%s: fast %d %d %llu %s / socket %d %d %llu %s", i, what, e1,
                         r1.allowed, (unsigned long long)r1.credit, r1.rule, es, rs.allowed,
                         (unsigned long long)rs.credit, rs.rule);
            takes++;
        }
    }
    fprintf(stderr, "  3000 random requests: %ld decided in-process, %ld takes compared\n",
            in_process, takes);
    /* The workload must exercise the memo, not only the socket. */
    assert_true(in_process > 1000);
    assert_true(takes > 300);
    divvy_close(fast);
    divvy_close(sock);
}

/* divvy_hit_many decides through the memo too: each result is what the
 * socket then reports for that counter. */
static void test_memo_hit_many(void **state)
{
    enum { N = 32 };
    struct harness_daemon *d = start_memo(memo_conf);
    struct divvy *fast = open_env(DIVVY_AUTO), *sock = open_env(DIVVY_SOCKET_ONLY);
    struct divvy_request rq[N];
    struct divvy_result res[N], rs = { .size = sizeof(rs) };
    struct divvy_kv kv[N][3];
    char ip[N][16];
    long in_process = 0;

    (void)state;
    (void)d;
    harness_wait_fast(fast, (struct divvy_kv[]){ { "path", "/api/v1" } }, 1);
    for (int i = 0; i < N; i++) {
        snprintf(ip[i], sizeof(ip[i]), "10.9.%d.%d", i / 4, i);
        kv[i][0] = (struct divvy_kv){ "user", i % 2 ? "alice" : "bob" };
        kv[i][1] = (struct divvy_kv){ "path", "/api/v1" };
        kv[i][2] = (struct divvy_kv){ "ip", ip[i] };
        rq[i] = (struct divvy_request){ .amount = 1 + (uint64_t)(i % 3), .kv = kv[i], .n_kv = 3 };
    }
    /* The first batch learns the shape; the next ones use the memo. */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++)
            res[i] = (struct divvy_result){ .size = sizeof(res[i]) };
        assert_int_equal(divvy_hit_many(fast, rq, N, res), N);
        for (int i = 0; i < N; i++) {
            CHECK(divvy_peek(sock, kv[i], 3, &rs));
            assert_string_equal(res[i].rule, "v1-user");
            assert_string_equal(rs.rule, "v1-user");
            assert_true(res[i].allowed);
            assert_int_equal(res[i].credit, rs.credit);
            assert_int_equal(res[i].credit,
                             1000000 - (uint64_t)(round + 1) * (1 + (uint64_t)(i % 3)));
            in_process += res[i].fast_path;
        }
    }
    assert_int_equal(in_process, 3 * N);
    divvy_close(fast);
    divvy_close(sock);
}

static void test_memo_bad_input(void **state)
{
    struct harness_daemon *d = start_memo(memo_conf);
    struct divvy *fast = open_env(DIVVY_AUTO);
    struct divvy_result res = { .size = sizeof(res) };
    char *long_ip = harness_scratch(5000);
    const char *bad[] = { "1\n2", "1\"2", "1\r2" };

    (void)state;
    (void)d;
    assert_non_null(long_ip);
    harness_wait_fast(fast, (struct divvy_kv[]){ { "path", "/api/v1" } }, 1);
    /* Learn the shape (method, path, ip) with good values... */
    for (int i = 0; i < 3; i++) {
        CHECK(divvy_hit(fast,
                        (struct divvy_kv[]){ { "method", "GET" }, { "path", "/api/v1" },
                                             { "ip", "10.0.0.1" } }, 3, &res));
        assert_true(res.fast_path);
        /* Named: api-get, whose credit (an hour's window, the tighter) it shows. */
        assert_string_equal(res.rule, "api-get");
    }
    /* ...then the same shape with values the protocol cannot carry. */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int r = divvy_hit(fast,
                          (struct divvy_kv[]){ { "method", "GET" }, { "path", "/api/v1" },
                                               { "ip", bad[i] } }, 3, &res);

        assert_int_equal(r, -EINVAL);
    }
    /* A line longer than PROTO_LINE_MAX (4096) through a non-matched value. */
    memset(long_ip, '7', 4080);
    long_ip[4080] = '\0';
    assert_int_equal(divvy_hit(fast,
                               (struct divvy_kv[]){ { "method", "GET" }, { "path", "/api/v1" },
                                                    { "ip", long_ip } }, 3, &res),
                     -EMSGSIZE);
    /* A NULL value in a learned shape. */
    assert_int_equal(divvy_hit(fast,
                               (struct divvy_kv[]){ { "method", "GET" }, { "path", "/api/v1" },
                                                    { "ip", NULL } }, 3, &res),
                     -EINVAL);
    /* And the good request still works. */
    CHECK(divvy_hit(fast,
                    (struct divvy_kv[]){ { "method", "GET" }, { "path", "/api/v1" },
                                         { "ip", "10.0.0.1" } }, 3, &res));
    assert_true(res.fast_path);
    assert_true(res.allowed);
    divvy_close(fast);
}

/* divvy_hit_many checks a remembered shape with the memo instead of
 * normalising it (and starts loading its counters): a bad request anywhere in
 * the batch must still fail the whole batch before any request is counted. */
static void test_memo_hit_many_all_or_nothing(void **state)
{
    struct harness_daemon *d = start_memo(memo_conf);
    struct divvy *fast = open_env(DIVVY_AUTO);
    struct divvy_result res = { .size = sizeof(res) }, rs[4];
    const struct divvy_kv good[3] = { { "method", "GET" }, { "path", "/api/v1" },
                                      { "ip", "10.0.0.1" } };
    char *long_ip = harness_scratch(5000);
    const char *bad[] = { "1\n2", "1\"2", "1\r2", long_ip, NULL };
    const int want[] = { -EINVAL, -EINVAL, -EINVAL, -EMSGSIZE, -EINVAL };
    uint64_t credit;

    (void)state;
    (void)d;
    assert_non_null(long_ip);
    memset(long_ip, '7', 4080);
    long_ip[4080] = '\0';
    harness_wait_fast(fast, (struct divvy_kv[]){ { "path", "/api/v1" } }, 1);
    /* Learned, so the batch's good requests are checked by the memo. */
    CHECK(divvy_hit(fast, good, 3, &res));
    assert_true(res.fast_path);
    CHECK(divvy_peek(fast, good, 3, &res));
    credit = res.credit;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const struct divvy_kv worse[3] = { { "method", "GET" }, { "path", "/api/v1" },
                                           { "ip", bad[i] } };
        struct divvy_request rq[4] = { { .kv = good, .n_kv = 3 }, { .kv = good, .n_kv = 3 },
                                       { .kv = worse, .n_kv = 3 }, { .kv = good, .n_kv = 3 } };

        for (int j = 0; j < 4; j++)
            rs[j] = (struct divvy_result){ .size = sizeof(rs[j]) };
        assert_int_equal(divvy_hit_many(fast, rq, 4, rs), want[i]);
        assert_non_null(strstr(divvy_errmsg(fast), "request 2"));
        CHECK(divvy_peek(fast, good, 3, &res));
        assert_int_equal(res.credit, credit);
    }
    /* The same batch without the bad request counts all four, in-process. */
    {
        struct divvy_request rq[4] = { { .kv = good, .n_kv = 3 }, { .kv = good, .n_kv = 3 },
                                       { .kv = good, .n_kv = 3 }, { .kv = good, .n_kv = 3 } };

        for (int j = 0; j < 4; j++)
            rs[j] = (struct divvy_result){ .size = sizeof(rs[j]) };
        assert_int_equal(divvy_hit_many(fast, rq, 4, rs), 4);
        for (int j = 0; j < 4; j++) {
            assert_true(rs[j].fast_path);
            assert_int_equal(rs[j].credit, credit - 1 - (uint64_t)j);
        }
    }
    divvy_close(fast);
}

static void test_memo_follows_reload(void **state)
{
    struct harness_daemon *d = start_memo(memo_conf);
    struct divvy *fast = open_env(DIVVY_AUTO);
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[3] = { { "method", "GET" }, { "path", "/api/v2" }, { "ip", "10.0.0.9" } };
    struct harness_conn *c;
    char reply[HARNESS_LINE];
    uint64_t deadline;

    (void)state;
    harness_wait_fast(fast, (struct divvy_kv[]){ { "path", "/api/v1" } }, 1);
    for (int i = 0; i < 3; i++) {
        CHECK(divvy_peek(fast, kv, 3, &res));
        assert_true(res.fast_path);
        assert_string_equal(res.rule, "any-path");
    }
    CHECK(harness_write_config(d, memo_conf_2));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "RELOAD", reply, sizeof(reply)));
    EXPECT_PREFIX(reply, "OK reloaded");
    harness_close(c);
    /* The generation is published before RELOAD answers: the very next hit
     * must use the new rules, memo or not. */
    CHECK(divvy_peek(fast, kv, 3, &res));
    assert_string_equal(res.rule, "api-get-2");
    deadline = harness_now_ms() + 2000;
    while (!res.fast_path && harness_now_ms() < deadline) {
        CHECK(divvy_peek(fast, kv, 3, &res));
        assert_string_equal(res.rule, "api-get-2");
    }
    assert_true(res.fast_path);
    divvy_close(fast);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_memo_agrees_with_socket, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_memo_hit_many, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_memo_bad_input, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_memo_hit_many_all_or_nothing, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_memo_follows_reload, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("fast_memo", tests, NULL, NULL);
}
