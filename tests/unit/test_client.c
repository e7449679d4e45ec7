/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for libclient: address parsing, request checks, normalisation
 * and formatting (round-tripped through common/proto.c's parser), strict
 * reply parsing, the public API's argument errors, and the socket engine
 * against a scripted fake server in a thread (timeouts, garbage, ERR busy,
 * transparent reconnect, REFILL hints that cannot be sent).  No divvyd:
 * tests/integration/test_client*.c and test_fastpath*.c use the real one.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "divvy_private.h"
#include "proto.h"

static void clear_env(void)
{
    unsetenv("DIVVY_ADDRESS");
    unsetenv("DIVVY_PATH");
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- addresses ------------------------------------------------------------- */

static void test_client_addr_valid(void **state)
{
    struct client_addr a;

    (void)state;
    assert_int_equal(client_addr_parse("unix:/run/divvy/divvy.sock", &a), 0);
    assert_int_equal(a.kind, CLIENT_ADDR_UNIX);
    assert_string_equal(a.path, "/run/divvy/divvy.sock");
    assert_int_equal(client_addr_parse("unix:rel.sock", &a), 0);
    assert_string_equal(a.path, "rel.sock");
    assert_int_equal(client_addr_parse("tcp:127.0.0.1:8321", &a), 0);
    assert_int_equal(a.kind, CLIENT_ADDR_TCP);
    assert_string_equal(a.host, "127.0.0.1");
    assert_string_equal(a.port, "8321");
    assert_int_equal(client_addr_parse("tcp:localhost:1", &a), 0);
    assert_string_equal(a.host, "localhost");
    assert_string_equal(a.port, "1");
    assert_int_equal(client_addr_parse("tcp:[::1]:65535", &a), 0);
    assert_string_equal(a.host, "::1");
    assert_string_equal(a.port, "65535");
    assert_int_equal(client_addr_parse("tcp:[fe80::1%eth0]:80", &a), 0);
    assert_string_equal(a.host, "fe80::1%eth0");
}

static void test_client_addr_invalid(void **state)
{
    static const char *const bad[] = {
        "", "unix:", "unix", "/run/divvy/divvy.sock", "tcp:", "tcp:host", "tcp:host:",
        "tcp::8321", "tcp:host:0", "tcp:host:65536", "tcp:host:123456", "tcp:host:-1",
        "tcp:host:+80", "tcp:host:80x", "tcp:::1:80", "tcp:[::1]80", "tcp:[::1]:",
        "tcp:[]:80", "tcp:[1.2.3.4]:80", "tcp:ho st:80", "udp:host:80", "TCP:host:80",
        "tcp:[::1:80",
    };
    char longpath[200];
    struct client_addr a;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (client_addr_parse(bad[i], &a) != -EINVAL)
            fail_msg("address \"%s\" was accepted", bad[i]);
    memset(longpath, 'x', sizeof(longpath));
    memcpy(longpath, "unix:/", 6);
    longpath[sizeof(longpath) - 1] = '\0';
    assert_int_equal(client_addr_parse(longpath, &a), -ENAMETOOLONG);
    assert_int_equal(client_addr_parse(NULL, &a), -EINVAL);
}

/* ---- requests -------------------------------------------------------------- */

static void assert_pairs(const struct client_req *req, const char *const *want, unsigned n)
{
    assert_int_equal(req->n_kv, n);
    for (unsigned i = 0; i < n; i++) {
        assert_int_equal(req->kv[i].key_len, strlen(want[2 * i]));
        assert_memory_equal(req->kv[i].key, want[2 * i], req->kv[i].key_len);
        assert_int_equal(req->kv[i].value_len, strlen(want[2 * i + 1]));
        assert_memory_equal(req->kv[i].value, want[2 * i + 1], req->kv[i].value_len);
    }
}

static void test_client_req_sorted_last_wins(void **state)
{
    const struct divvy_kv kv[] = {
        { "path", "/a" }, { "method", "GET" }, { "ip", "1.2.3.4" },
        { "method", "POST" }, { "z", "" }, { "ip", "5.6.7.8" },
    };
    static const char *const want[] = { "ip", "5.6.7.8", "method", "POST", "path", "/a",
                                        "z", "" };
    struct client_req req;

    (void)state;
    assert_int_equal(client_req_prepare(kv, 6, &req), 0);
    assert_pairs(&req, want, 4);
    assert_int_equal(client_req_prepare(NULL, 0, &req), 0);
    assert_int_equal(req.n_kv, 0);
}

static void test_client_req_format_quoting(void **state)
{
    const struct divvy_kv kv[] = {
        { "path", "/a b" }, { "empty", "" }, { "k=ey", "v" }, { "tab", "a\tb" },
        { "eq", "x=y" }, { "plain", "ok" }, { "utf8", "\xc3\xa9t\xc3\xa9" },
    };
    char buf[PROTO_LINE_MAX + 1];
    struct client_req req;
    int n;

    (void)state;
    assert_int_equal(client_req_prepare(kv, 7, &req), 0);
    n = client_req_format(&req, "TAKE", 1, buf, sizeof(buf));
    assert_string_equal(buf, "TAKE 1 empty=\"\" eq=\"x=y\" \"k=ey\"=v path=\"/a b\" plain=ok "
                             "tab=\"a\tb\" utf8=\xc3\xa9t\xc3\xa9\n");
    assert_int_equal(n, (int)strlen(buf));
    assert_int_equal(client_req_line_len(&req, "TAKE", 1), (size_t)n);
    n = client_req_format(&req, "PEEK", 0, buf, sizeof(buf));
    assert_int_equal(strncmp(buf, "PEEK empty=", 11), 0);
    assert_int_equal(client_req_line_len(&req, "PEEK", 0), (size_t)n);
    assert_int_equal(client_req_format(&req, "TAKE", 1000000000, buf, sizeof(buf)),
                     (int)client_req_line_len(&req, "TAKE", 1000000000));
    assert_int_equal(client_req_format(&req, "TAKE", 1, buf, 20), -ENOBUFS);
}

static void test_client_req_rejects(void **state)
{
    struct divvy_kv kv[PROTO_KV_MAX + 8];
    char keys[PROTO_KV_MAX + 8][8], big[PROTO_LINE_MAX + 10], line[PROTO_LINE_MAX + 10];
    struct client_req req;

    (void)state;
    kv[0] = (struct divvy_kv){ "a", "x\"y" };
    assert_int_equal(client_req_prepare(kv, 1, &req), -EINVAL);
    kv[0] = (struct divvy_kv){ "a", "x\ny" };
    assert_int_equal(client_req_prepare(kv, 1, &req), -EINVAL);
    kv[0] = (struct divvy_kv){ "a", "x\ry" };
    assert_int_equal(client_req_prepare(kv, 1, &req), -EINVAL);
    kv[0] = (struct divvy_kv){ "a\"", "x" };
    assert_int_equal(client_req_prepare(kv, 1, &req), -EINVAL);
    kv[0] = (struct divvy_kv){ "", "x" };
    assert_int_equal(client_req_prepare(kv, 1, &req), -EINVAL);
    kv[0] = (struct divvy_kv){ NULL, "x" };
    assert_int_equal(client_req_prepare(kv, 1, &req), -EINVAL);
    kv[0] = (struct divvy_kv){ "a", NULL };
    assert_int_equal(client_req_prepare(kv, 1, &req), -EINVAL);
    assert_int_equal(client_req_prepare(NULL, 1, &req), -EINVAL);

    /* 32 distinct keys fit, 33 do not; repeats do not count. */
    for (int i = 0; i < PROTO_KV_MAX + 8; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%02d", i);
        kv[i] = (struct divvy_kv){ keys[i], "v" };
    }
    assert_int_equal(client_req_prepare(kv, PROTO_KV_MAX, &req), 0);
    assert_int_equal(req.n_kv, PROTO_KV_MAX);
    assert_int_equal(client_req_prepare(kv, PROTO_KV_MAX + 1, &req), -E2BIG);
    for (int i = PROTO_KV_MAX; i < PROTO_KV_MAX + 8; i++)
        kv[i] = (struct divvy_kv){ keys[i - PROTO_KV_MAX], "again" };
    assert_int_equal(client_req_prepare(kv, PROTO_KV_MAX + 8, &req), 0);
    assert_int_equal(req.n_kv, PROTO_KV_MAX);

    /* A string longer than a line, and a line that gets too long. */
    memset(big, 'x', sizeof(big));
    big[sizeof(big) - 1] = '\0';
    kv[0] = (struct divvy_kv){ "a", big };
    assert_int_equal(client_req_prepare(kv, 1, &req), -EMSGSIZE);
    big[PROTO_LINE_MAX - 12] = '\0';            /* "TAKE 1 a=" + value + "\n" = 4094 */
    assert_int_equal(client_req_prepare(kv, 1, &req), 0);
    assert_int_equal(client_req_line_len(&req, "TAKE", 1), PROTO_LINE_MAX - 2);
    big[PROTO_LINE_MAX - 12] = 'x';
    big[PROTO_LINE_MAX - 9] = '\0';             /* 4097 */
    assert_int_equal(client_req_prepare(kv, 1, &req), 0);
    assert_true(client_req_line_len(&req, "TAKE", 1) > PROTO_LINE_MAX);
    assert_int_equal(client_req_format(&req, "TAKE", 1, line, sizeof(line)), -EMSGSIZE);
}

/*
 * Property: for random requests (repeated keys, bytes that need quoting),
 * the formatted line parses back, with proto_parse(), into exactly the
 * normalised pairs: what the socket sends is what the fast path matched.
 */
static void test_client_req_roundtrip(void **state)
{
    static const char alphabet[] = "ab=\t =/x*\xc3\xa9-";
    char strs[96][12];
    struct divvy_kv kv[48];
    struct client_req req;
    struct proto_req *pr = malloc(sizeof(*pr));
    char line[PROTO_LINE_MAX + 1];
    unsigned seed = 12345;

    (void)state;
    assert_non_null(pr);
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = (size_t)(rand_r(&seed) % 40);
        int len, r;

        for (size_t i = 0; i < 2 * n; i++) {
            size_t l = (size_t)(rand_r(&seed) % 5) + (i % 2 == 0);

            for (size_t j = 0; j < l; j++)
                strs[i][j] = alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
            strs[i][l] = '\0';
            if (i % 2 == 0 && rand_r(&seed) % 4 == 0 && i >= 2)
                memcpy(strs[i], strs[i - 2], sizeof(strs[i]));      /* a repeated key */
        }
        for (size_t i = 0; i < n; i++)
            kv[i] = (struct divvy_kv){ strs[2 * i], strs[2 * i + 1] };
        r = client_req_prepare(kv, n, &req);
        if (r == -E2BIG)
            continue;
        assert_int_equal(r, 0);
        len = client_req_format(&req, "TAKE", 3, line, sizeof(line));
        assert_true(len > 0);
        assert_int_equal(proto_parse(line, (size_t)len, pr), len);
        assert_int_equal(pr->err, PROTO_E_NONE);
        assert_int_equal(pr->verb, PROTO_TAKE);
        assert_int_equal(pr->amount, 3);
        assert_int_equal(pr->n_kv, req.n_kv);
        for (unsigned i = 0; i < req.n_kv; i++) {
            assert_int_equal(pr->kv[i].key_len, req.kv[i].key_len);
            assert_memory_equal(pr->kv[i].key, req.kv[i].key, req.kv[i].key_len);
            assert_int_equal(pr->kv[i].value_len, req.kv[i].value_len);
            assert_memory_equal(pr->kv[i].value, req.kv[i].value, req.kv[i].value_len);
        }
    }
    free(pr);
}

/* ---- replies --------------------------------------------------------------- */

static int parse(const char *line, struct divvy_result *res, char *err, size_t size)
{
    memset(res, 0x5a, sizeof(*res));
    res->size = sizeof(*res);
    err[0] = '\0';
    return client_reply_parse(line, strlen(line), res, err, size);
}

static void test_client_reply_ok(void **state)
{
    struct divvy_result res;
    char err[256];

    (void)state;
    assert_int_equal(parse("OK true 57 60", &res, err, sizeof(err)), 0);
    assert_int_equal(res.allowed, 1);
    assert_int_equal(res.credit, 57);
    assert_int_equal(res.reset_seconds, 60);
    assert_string_equal(res.rule, "");
    assert_int_equal(res.fast_path, 0);
    assert_int_equal(parse("OK false 0 3599 ssh-user_source", &res, err, sizeof(err)), 0);
    assert_int_equal(res.allowed, 0);
    assert_int_equal(res.credit, 0);
    assert_int_equal(res.reset_seconds, 3599);
    assert_string_equal(res.rule, "ssh-user_source");
    assert_int_equal(parse("OK true 18446744073709551615 0 5c0ffee15badf00d", &res, err,
                           sizeof(err)), 0);
    assert_true(res.credit == UINT64_MAX);
    assert_string_equal(res.rule, "5c0ffee15badf00d");
}

static void test_client_reply_garbage(void **state)
{
    static const char *const bad[] = {
        "", "OK", "OK ", "ok true 1 2", "OK yes 1 2", "OK true 1", "OK true 1 ", "OK true 1 2 ",
        "OK true -1 2", "OK true +1 2", "OK true 01 2", "OK true 1 2 a b", "OK true 1 2 a\"b",
        "OK true 18446744073709551616 2", "OK  true 1 2", "OK true 1  2", "OK TRUE 1 2",
        "OK true 1 2 3 4", "OK true 0x1 2", "OK pong", "OK 3", "ERR", "ERR ", "ERR \"x\"",
        "ERR bad-request \"a\"b\"", "ERR bad-request x", "ERR bad-request \"unterminated",
        "ERR BAD \"x\"", "HELLO", "OK true 1 2\r",
        "OK true 1 2 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    };
    struct divvy_result res;
    char err[256];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse(bad[i], &res, err, sizeof(err)) != -EPROTO)
            fail_msg("reply \"%s\" was not refused", bad[i]);
        assert_non_null(strstr(err, "unexpected reply"));
    }
    /* A NUL inside the line. */
    assert_int_equal(client_reply_parse("OK true\0 1 2", 12, &res, err, sizeof(err)), -EPROTO);
}

static void test_client_reply_err(void **state)
{
    static const struct {
        const char *line;
        int err;
        const char *msg;
    } cases[] = {
        { "ERR bad-request \"unterminated quoted string\"", -EINVAL,
          "divvyd: bad-request: unterminated quoted string" },
        { "ERR too-many-keys \"33 keys\"", -E2BIG, "divvyd: too-many-keys: 33 keys" },
        { "ERR line-too-long \"x\"", -EMSGSIZE, "divvyd: line-too-long: x" },
        { "ERR forbidden \"RESET needs root\"", -EPERM, "divvyd: forbidden: RESET needs root" },
        { "ERR busy", -EBUSY, "divvyd: busy" },
        { "ERR busy \"too many connections\"", -EBUSY, "divvyd: busy: too many connections" },
        { "ERR reload-failed \"a.conf:3: bad\"", -EINVAL, "divvyd: reload-failed: a.conf:3: bad" },
        { "ERR unknown-command \"Unrecognized command: FOO\"", -ENOSYS,
          "divvyd: unknown-command: Unrecognized command: FOO" },
        { "ERR unknown \"internal error\"", -EIO, "divvyd: unknown: internal error" },
        { "ERR some-future-code \"?\"", -EIO, "divvyd: some-future-code: ?" },
        { "ERR bad-request \"\"", -EINVAL, "divvyd: bad-request" },
    };
    struct divvy_result res;
    char err[256];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(parse(cases[i].line, &res, err, sizeof(err)), cases[i].err);
        assert_string_equal(err, cases[i].msg);
    }
}

static void test_client_reply_multi(void **state)
{
    unsigned long n = 99;

    (void)state;
    assert_int_equal(client_reply_multi("OK 3", 4, &n), 1);
    assert_int_equal(n, 3);
    assert_int_equal(client_reply_multi("OK 0", 4, &n), 1);
    assert_int_equal(n, 0);
    assert_int_equal(client_reply_multi("OK 3 x", 6, &n), 0);
    assert_int_equal(client_reply_multi("OK pong", 7, &n), 0);
    assert_int_equal(client_reply_multi("OK true 1 2", 11, &n), 0);
    assert_int_equal(client_reply_multi("OK -1", 5, &n), 0);
    assert_int_equal(client_reply_multi("ERR 3", 5, &n), 0);
}

/* ---- API arguments --------------------------------------------------------- */

static void test_client_api_null_handle(void **state)
{
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    struct divvy_request rq = { .kv = &kv, .n_kv = 1 };
    char **lines;
    size_t n;

    (void)state;
    assert_int_equal(divvy_hit(NULL, &kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_take(NULL, 2, &kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_peek(NULL, &kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_reset(NULL, &kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_hitv(NULL, &res, "a", "b", NULL), -EINVAL);
    assert_int_equal(divvy_hit_many(NULL, &rq, 1, &res), -EINVAL);
    assert_int_equal(divvy_command(NULL, "PING", &lines, &n), -EINVAL);
    assert_int_equal(divvy_set_timeouts(NULL, 1, 1), -EINVAL);
    assert_non_null(divvy_errmsg(NULL));
    divvy_close(NULL);
    divvy_lines_free(NULL, 0);
}

static void test_client_api_open_errors(void **state)
{
    struct divvy *h = (struct divvy *)0x1;

    (void)state;
    clear_env();
    assert_int_equal(divvy_open(NULL, DIVVY_AUTO, NULL), -EINVAL);
    assert_int_equal(divvy_open(NULL, 7, &h), -EINVAL);
    assert_int_equal(divvy_open("tcp:nohost", DIVVY_AUTO, &h), -EINVAL);
    assert_int_equal(divvy_open("http://x", DIVVY_SOCKET_ONLY, &h), -EINVAL);
    assert_true(h == (struct divvy *)0x1);      /* untouched on failure */
    /* FAST_ONLY without a daemon to hand the table over. */
    assert_int_equal(divvy_open("unix:/nonexistent-divvy/divvy.sock", DIVVY_FAST_ONLY, &h),
                     -ENOENT);
    /* tcp: has no fast path (the memfds come over a Unix socket only). */
    assert_int_equal(divvy_open("tcp:127.0.0.1:1", DIVVY_FAST_ONLY, &h), -EOPNOTSUPP);
    setenv("DIVVY_PATH", "sometimes", 1);
    assert_int_equal(divvy_open("unix:/x.sock", DIVVY_AUTO, &h), -EINVAL);
    setenv("DIVVY_PATH", "fast", 1);
    assert_int_equal(divvy_open("unix:/nonexistent-divvy/divvy.sock", DIVVY_SOCKET_ONLY, &h),
                     -ENOENT);
    setenv("DIVVY_ADDRESS", "bogus", 1);
    assert_int_equal(divvy_open(NULL, DIVVY_SOCKET_ONLY, &h), -EINVAL);
    clear_env();
    assert_true(h == (struct divvy *)0x1);
}

static void test_client_api_state_dir(void **state)
{
    struct divvy *h = NULL;

    (void)state;
    clear_env();
    /* The state directory is divvyd's to say (FAST); nothing is guessed. */
    assert_int_equal(divvy_open(NULL, DIVVY_AUTO, &h), 0);
    assert_string_equal(h->conn.addr.path, "/run/divvy/divvy.sock");
    assert_string_equal(h->fast.dir, "");
    divvy_close(h);
    assert_int_equal(divvy_open("unix:rel.sock", DIVVY_SOCKET_ONLY, &h), 0);
    assert_int_equal(h->mode, DIVVY_SOCKET_ONLY);
    divvy_close(h);
    /* tcp: is socket-only, whatever the flags asked. */
    assert_int_equal(divvy_open("tcp:127.0.0.1:8321", DIVVY_AUTO, &h), 0);
    assert_int_equal(h->mode, DIVVY_SOCKET_ONLY);
    assert_false(h->fast.privileged);
    divvy_close(h);
    setenv("DIVVY_ADDRESS", "unix:/a/b.sock", 1);
    setenv("DIVVY_PATH", "socket", 1);
    assert_int_equal(divvy_open(NULL, DIVVY_AUTO, &h), 0);
    assert_string_equal(h->conn.addr.path, "/a/b.sock");
    assert_int_equal(h->mode, DIVVY_SOCKET_ONLY);
    assert_int_equal(h->fast.privileged, geteuid() == 0);
    divvy_close(h);
    clear_env();
}

static void test_client_api_bad_arguments(void **state)
{
    struct divvy_result res = { .size = sizeof(res) }, many[2];
    struct divvy_kv kv[2] = { { "a", "b" }, { "c", "d\"" } };
    struct divvy_request rq[2] = { { .kv = kv, .n_kv = 1 }, { .kv = kv, .n_kv = 2 } };
    struct divvy *h = NULL;
    char **lines = NULL;
    size_t n = 0;

    (void)state;
    clear_env();
    assert_int_equal(divvy_open("unix:/nonexistent-divvy/divvy.sock", DIVVY_AUTO, &h), 0);
    assert_string_equal(divvy_errmsg(h), "");
    res.size = 0;
    assert_int_equal(divvy_hit(h, kv, 1, &res), -EINVAL);
    assert_non_null(strstr(divvy_errmsg(h), "size"));
    res.size = sizeof(res) - 1;
    assert_int_equal(divvy_peek(h, kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_hit(h, kv, 1, NULL), -EINVAL);
    res.size = sizeof(res);
    assert_int_equal(divvy_hit(h, kv, 2, &res), -EINVAL);
    assert_non_null(strstr(divvy_errmsg(h), "invalid key/value"));
    assert_int_equal(divvy_take(h, 0, kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_take(h, PROTO_TAKE_MAX + 1, kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_hitv(h, &res, "a", (char *)NULL, NULL), -EINVAL);
    /* A batch is checked as a whole before anything is decided or sent. */
    many[0].size = many[1].size = sizeof(many[0]);
    assert_int_equal(divvy_hit_many(h, rq, 2, many), -EINVAL);
    assert_non_null(strstr(divvy_errmsg(h), "request 1"));
    many[1].size = 0;
    rq[1].n_kv = 1;
    assert_int_equal(divvy_hit_many(h, rq, 2, many), -EINVAL);
    assert_int_equal(divvy_hit_many(h, rq, 0, many), 0);
    assert_int_equal(divvy_hit_many(h, NULL, 1, many), -EINVAL);
    assert_int_equal(divvy_command(h, "PING\nPING", &lines, &n), -EINVAL);
    assert_int_equal(divvy_command(h, "", &lines, &n), -EINVAL);
    assert_int_equal(divvy_command(h, "\r", &lines, &n), -EINVAL);
    assert_int_equal(divvy_command(h, "PING", NULL, &n), -EINVAL);
    assert_null(lines);
    assert_int_equal(divvy_set_timeouts(h, 0, -5), 0);
    assert_int_equal(h->conn.connect_ms, CLIENT_TIMEOUT_DEFAULT);
    assert_int_equal(h->conn.request_ms, CLIENT_TIMEOUT_DEFAULT);
    /* Valid, but nobody listens: a clean error naming the socket. */
    assert_int_equal(divvy_hit(h, kv, 1, &res), -ENOENT);
    assert_non_null(strstr(divvy_errmsg(h), "/nonexistent-divvy/divvy.sock"));
    /* Success clears the message. */
    assert_int_equal(divvy_set_timeouts(h, 50, 60), 0);
    assert_string_equal(divvy_errmsg(h), "");
    assert_int_equal(h->conn.connect_ms, 50);
    divvy_close(h);
}

/* ---- a scripted fake divvyd ------------------------------------------------- */

enum fake_act {
    FAKE_REPLY,             /* send .text for the next request line */
    FAKE_CLOSE,             /* read the next request line, close without a reply */
    FAKE_SILENT,            /* read the next request line, never answer (until stopped) */
    FAKE_HANGUP,            /* close the connection now, before reading anything */
};

struct fake_step {
    enum fake_act act;
    const char *text;
};

struct fake {
    char dir[48], path[96];
    int lfd;
    const struct fake_step *steps;
    size_t n_steps;
    const char *ignore;         /* request lines starting so take no step (REFILL hints) */
    int stop_pipe[2];
    pthread_t thread;
    char got[8192];             /* request lines received, in order */
    size_t got_len;
    int connections;
};

/* Reads one line from @fd into f->got; 0 at EOF, 1 with a line, -1 when stopped. */
static int fake_read_line(struct fake *f, int fd)
{
    for (;;) {
        struct pollfd p[2] = { { .fd = fd, .events = POLLIN },
                               { .fd = f->stop_pipe[0], .events = POLLIN } };
        char c;
        ssize_t n;

        if (poll(p, 2, -1) < 0)
            return -1;
        if (p[1].revents)
            return -1;
        n = read(fd, &c, 1);
        if (n <= 0)
            return 0;
        if (f->got_len < sizeof(f->got) - 1)
            f->got[f->got_len++] = c;
        if (c == '\n')
            return 1;
    }
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    size_t step = 0;
    int fd = -1;

    while (step < f->n_steps) {
        const struct fake_step *s = &f->steps[step];
        size_t start = f->got_len;
        int r;

        if (fd < 0) {
            struct pollfd p[2] = { { .fd = f->lfd, .events = POLLIN },
                                   { .fd = f->stop_pipe[0], .events = POLLIN } };

            if (poll(p, 2, -1) < 0 || p[1].revents)
                break;
            fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0)
                break;
            f->connections++;
        }
        if (s->act == FAKE_HANGUP) {
            close(fd);
            fd = -1;
            step++;
            continue;
        }
        r = fake_read_line(f, fd);
        if (r < 0)
            break;
        if (r == 0) {                   /* the client hung up: next connection */
            close(fd);
            fd = -1;
            continue;
        }
        /* Like divvyd's REFILL: read, never answered. */
        if (f->ignore && strncmp(f->got + start, f->ignore, strlen(f->ignore)) == 0)
            continue;
        step++;
        if (s->act == FAKE_REPLY) {
            if (write(fd, s->text, strlen(s->text)) < 0)
                break;
        } else if (s->act == FAKE_CLOSE) {
            close(fd);
            fd = -1;
        } else if (s->act == FAKE_SILENT) {
            struct pollfd p = { .fd = f->stop_pipe[0], .events = POLLIN };

            poll(&p, 1, -1);
            break;
        }
    }
    /* Keep the last connection open until stopped, as a daemon would. */
    if (fd >= 0) {
        struct pollfd p = { .fd = f->stop_pipe[0], .events = POLLIN };

        poll(&p, 1, -1);
        close(fd);
    }
    return NULL;
}

/* Listens on f->path (again, after the test closed and unlinked it). */
static void fake_listen(struct fake *f, int backlog)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };

    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
    f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(f->lfd >= 0);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(f->lfd, backlog), 0);
}

/* Starts the fake's thread (for a fake started with @run false). */
static void fake_run(struct fake *f)
{
    assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_start(struct fake *f, const struct fake_step *steps, size_t n, int backlog,
                       bool run)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/divvy-ut.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/fake.sock", f->dir);
    fake_listen(f, backlog);
    assert_int_equal(pipe2(f->stop_pipe, O_CLOEXEC), 0);
    f->steps = steps;
    f->n_steps = n;
    if (run)
        fake_run(f);
    else
        f->thread = 0;
}

static void fake_stop(struct fake *f)
{
    if (write(f->stop_pipe[1], "x", 1) < 0)
        fail_msg("stop pipe");
    if (f->thread)
        pthread_join(f->thread, NULL);
    close(f->lfd);
    close(f->stop_pipe[0]);
    close(f->stop_pipe[1]);
    unlink(f->path);
    rmdir(f->dir);
}

static struct divvy *fake_open(struct fake *f)
{
    char addr[160];
    struct divvy *h = NULL;

    snprintf(addr, sizeof(addr), "unix:%s", f->path);
    assert_int_equal(divvy_open(addr, DIVVY_SOCKET_ONLY, &h), 0);
    return h;
}

static void test_client_conn_replies(void **state)
{
    static const struct fake_step steps[] = {
        { FAKE_REPLY, "OK true 4 60 lbl\n" },
        { FAKE_REPLY, "OK false 0 12\n" },
        { FAKE_REPLY, "ERR forbidden \"RESET needs root or the admin group\"\n" },
        { FAKE_REPLY, "OK 2\nrule=0 id=a\nrule=1 id=b\n" },
        { FAKE_REPLY, "ERR unknown-command \"Unrecognized command: FOO\"\n" },
        { FAKE_REPLY, "OK true 3 60 lbl\n" },
    };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/a b" }, { "m", "GET" } };
    struct divvy *h;
    struct fake f;
    char **lines = NULL;
    size_t n = 0;

    (void)state;
    fake_start(&f, steps, sizeof(steps) / sizeof(steps[0]), 8, true);
    h = fake_open(&f);
    assert_int_equal(divvy_hit(h, kv, 2, &res), 0);
    assert_int_equal(res.allowed, 1);
    assert_int_equal(res.credit, 4);
    assert_string_equal(res.rule, "lbl");
    assert_int_equal(res.fast_path, 0);
    assert_int_equal(divvy_peek(h, kv, 1, &res), 0);
    assert_int_equal(res.allowed, 0);
    assert_int_equal(res.reset_seconds, 12);
    assert_string_equal(res.rule, "");
    assert_int_equal(divvy_reset(h, kv, 1, &res), -EPERM);
    assert_string_equal(divvy_errmsg(h), "divvyd: forbidden: RESET needs root or the admin group");
    assert_int_equal(divvy_command(h, "RULES", &lines, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(lines[0], "OK 2");
    assert_string_equal(lines[2], "rule=1 id=b");
    divvy_lines_free(lines, n);
    assert_int_equal(divvy_command(h, "FOO", &lines, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(lines[0], "ERR unknown-command \"Unrecognized command: FOO\"");
    divvy_lines_free(lines, n);
    assert_int_equal(divvy_take(h, 7, kv, 1, &res), 0);
    assert_int_equal(res.credit, 3);
    divvy_close(h);
    fake_stop(&f);
    assert_string_equal(f.got, "TAKE 1 m=GET path=\"/a b\"\nPEEK path=\"/a b\"\n"
                               "RESET path=\"/a b\"\nRULES\nFOO\nTAKE 7 path=\"/a b\"\n");
    assert_int_equal(f.connections, 1);
}

static void test_client_conn_garbage(void **state)
{
    static const struct fake_step steps[] = {
        { FAKE_REPLY, "OK maybe 1 2\n" },
        { FAKE_REPLY, "OK true 1 2\nOK true 1 2\n" },   /* one reply too many */
        { FAKE_REPLY, "ERR busy \"too many connections\"\n" },
        { FAKE_REPLY, "OK true 9 9\n" },
    };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    struct divvy *h;
    struct fake f;

    (void)state;
    fake_start(&f, steps, sizeof(steps) / sizeof(steps[0]), 8, true);
    h = fake_open(&f);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), -EPROTO);
    assert_non_null(strstr(divvy_errmsg(h), "OK maybe 1 2"));
    assert_int_equal(h->conn.fd, -1);                /* closed: its state is unknown */
    assert_int_equal(divvy_hit(h, &kv, 1, &res), -EPROTO);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), -EBUSY);
    assert_int_equal(h->conn.fd, -1);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 9);
    divvy_close(h);
    fake_stop(&f);
    assert_int_equal(f.connections, 4);
}

/* A kept connection that died between calls is replaced, and the request
 * sent again, once; a connection that dies during its first call is not. */
static void test_client_conn_reconnect(void **state)
{
    static const struct fake_step steps[] = {
        { FAKE_REPLY, "OK true 5 60 r\n" },
        { FAKE_HANGUP, NULL },                          /* "daemon restarted" */
        { FAKE_REPLY, "OK true 4 60 r\n" },
        { FAKE_CLOSE, NULL },                           /* dies mid-request */
        { FAKE_CLOSE, NULL },                           /* fresh connection dies too */
        { FAKE_REPLY, "OK true 3 60 r\n" },
    };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    struct divvy *h;
    struct fake f;
    int r;

    (void)state;
    fake_start(&f, steps, sizeof(steps) / sizeof(steps[0]), 8, true);
    h = fake_open(&f);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 5);
    /* The fake hangs up the first connection, before or after this call's
     * send: either way nothing was answered, so the call goes out again. */
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 4);
    /* Kept connection closed without a reply: retried once on a new one,
     * which also closes: the call fails cleanly. */
    r = divvy_hit(h, &kv, 1, &res);
    assert_true(r == -ECONNRESET || r == -EPIPE);
    assert_non_null(strstr(divvy_errmsg(h), "closed"));
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 3);
    divvy_close(h);
    fake_stop(&f);
    assert_int_equal(f.connections, 4);
}

static void test_client_conn_request_timeout(void **state)
{
    static const struct fake_step steps[] = { { FAKE_SILENT, NULL } };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    struct divvy *h;
    struct fake f;
    uint64_t t0, dt;

    (void)state;
    fake_start(&f, steps, 1, 8, true);
    h = fake_open(&f);
    assert_int_equal(divvy_set_timeouts(h, 1000, 150), 0);
    t0 = now_ms();
    assert_int_equal(divvy_hit(h, &kv, 1, &res), -ETIMEDOUT);
    dt = now_ms() - t0;
    assert_true(dt >= 140 && dt < 1000);
    assert_non_null(strstr(divvy_errmsg(h), "150 ms"));
    assert_int_equal(h->conn.fd, -1);
    divvy_close(h);
    fake_stop(&f);
}

/* A listener that never accepts, with its backlog full: connect times out. */
static void test_client_conn_connect_timeout(void **state)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    struct divvy *h;
    struct fake f;
    int fill[4], n_fill = 0, r;
    uint64_t t0, dt;

    (void)state;
    fake_start(&f, NULL, 0, 0, false);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f.path);
    for (int i = 0; i < 4; i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

        assert_true(fd >= 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            close(fd);
            break;
        }
        fill[n_fill++] = fd;
    }
    assert_true(n_fill >= 1 && n_fill < 4);
    h = fake_open(&f);
    assert_int_equal(divvy_set_timeouts(h, 200, 1000), 0);
    t0 = now_ms();
    r = divvy_hit(h, &kv, 1, &res);
    dt = now_ms() - t0;
    assert_int_equal(r, -ETIMEDOUT);
    assert_true(dt >= 190 && dt < 1000);
    assert_non_null(strstr(divvy_errmsg(h), "connect"));
    divvy_close(h);
    for (int i = 0; i < n_fill; i++)
        close(fill[i]);
    fake_stop(&f);
}

/* Pipelining: a batch is one write; replies are matched in order. */
static void test_client_conn_batch(void **state)
{
    static const struct fake_step steps[] = {
        { FAKE_REPLY, "OK true 2 60 a\n" },
        { FAKE_REPLY, "ERR bad-request \"nope\"\n" },
        { FAKE_REPLY, "OK false 0 60 a\n" },
    };
    struct divvy_kv kv[3] = { { "a", "1" }, { "a", "2" }, { "a", "3" } };
    struct divvy_request rq[3] = { { 0, &kv[0], 1 }, { 4, &kv[1], 1 }, { 1, &kv[2], 1 } };
    struct divvy_result res[3];
    struct divvy *h;
    struct fake f;

    (void)state;
    for (int i = 0; i < 3; i++)
        res[i].size = sizeof(res[i]);
    fake_start(&f, steps, 3, 8, true);
    h = fake_open(&f);
    assert_int_equal(divvy_hit_many(h, rq, 3, res), -EINVAL);
    assert_non_null(strstr(divvy_errmsg(h), "request 1: divvyd: bad-request: nope"));
    assert_int_equal(res[0].credit, 2);
    assert_string_equal(res[0].rule, "a");
    assert_int_equal(res[2].allowed, 0);
    assert_int_equal(res[2].reset_seconds, 60);
    divvy_close(h);
    fake_stop(&f);
    assert_string_equal(f.got, "TAKE 1 a=1\nTAKE 4 a=2\nTAKE 1 a=3\n");
}

/* ---- REFILL hints (client_conn_hint) ------------------------------------------ */

#define HINT_FILL   "REFILL rule=api index=0 actor=fill\n"
#define HINT_LONG   4000        /* bytes: more than the smallest socket buffer takes at once */

/* A valid REFILL line of HINT_LONG bytes (its actor "hhh..."), NUL-terminated. */
static const char *long_hint(void)
{
    static char line[HINT_LONG + 1];
    int n = snprintf(line, sizeof(line), "REFILL rule=api index=0 actor=");

    memset(line + n, 'h', HINT_LONG - 1 - (size_t)n);
    line[HINT_LONG - 1] = '\n';
    line[HINT_LONG] = '\0';
    return line;
}

/* Runs client_conn_hint() and returns how long it took, in ms. */
static uint64_t timed_hint(struct divvy *h, const char *line, size_t len)
{
    uint64_t t0 = now_ms();

    client_conn_hint(&h->conn, line, len);
    return now_ms() - t0;
}

/* Shrinks @fd's send buffer to the least the kernel allows and fills it
 * with whole HINT_FILL lines until send() says EAGAIN; returns how many. */
static int fill_socket(int fd)
{
    int one = 1, n = 0;
    ssize_t r;

    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &one, sizeof(one)), 0);
    while ((r = send(fd, HINT_FILL, strlen(HINT_FILL), MSG_DONTWAIT | MSG_NOSIGNAL)) ==
           (ssize_t)strlen(HINT_FILL))
        n++;
    /* A short fill line would break the framing this test is about. */
    if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
        fail_msg("filling the socket: send returned %zd (%s)", r, strerror(errno));
    assert_true(n > 0 && n < 1000);
    return n;
}

/* Nobody listens (Unix: no socket file; TCP: refused): the hint is dropped,
 * at once and silently, and the next request fails, then succeeds, exactly
 * as it would have without it. */
static void test_client_conn_hint_no_listener(void **state)
{
    static const struct fake_step steps[] = { { FAKE_REPLY, "OK true 4 60 r\n" } };
    static const char hint[] = "REFILL rule=api index=0 actor=alice\n";
    struct sockaddr_in sin = { .sin_family = AF_INET };
    socklen_t sl = sizeof(sin);
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    struct divvy *h;
    struct fake f;
    char addr[64];
    int fd;

    (void)state;
    fake_start(&f, steps, 1, 8, false);
    close(f.lfd);
    unlink(f.path);
    h = fake_open(&f);
    assert_true(timed_hint(h, hint, sizeof(hint) - 1) < 1000);
    assert_int_equal(h->conn.fd, -1);
    assert_string_equal(divvy_errmsg(h), "");   /* the hit it rides on succeeded */
    assert_int_equal(divvy_hit(h, &kv, 1, &res), -ENOENT);
    assert_non_null(strstr(divvy_errmsg(h), f.path));
    /* divvyd starts: the hint left nothing behind to send first. */
    fake_listen(&f, 8);
    fake_run(&f);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 4);
    assert_string_equal(divvy_errmsg(h), "");
    divvy_close(h);
    fake_stop(&f);
    assert_string_equal(f.got, "TAKE 1 a=b\n");
    assert_int_equal(f.connections, 1);

    /* TCP: a loopback port nobody listens on. */
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
    close(fd);
    snprintf(addr, sizeof(addr), "tcp:127.0.0.1:%u", ntohs(sin.sin_port));
    assert_int_equal(divvy_open(addr, DIVVY_SOCKET_ONLY, &h), 0);
    assert_true(timed_hint(h, hint, sizeof(hint) - 1) < 1000);
    assert_int_equal(h->conn.fd, -1);
    assert_string_equal(divvy_errmsg(h), "");
    assert_int_equal(divvy_hit(h, &kv, 1, &res), -ECONNREFUSED);
    assert_non_null(strstr(divvy_errmsg(h), addr + 4));
    divvy_close(h);
}

/* divvyd not reading, the socket buffer full: the hint is dropped at once
 * (a blocking send would wait the 2 s of SO_SNDTIMEO), nothing of it is
 * sent, the connection is kept, and once divvyd reads again the next
 * request follows the earlier lines, whole. */
static void test_client_conn_hint_full_buffer(void **state)
{
    static const struct fake_step steps[] = { { FAKE_REPLY, "OK true 7 60 r\n" } };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    const char *big = long_hint();
    struct divvy *h;
    struct fake f;
    char want[sizeof(f.got)];
    size_t off = 0;
    int fd, n_fill;

    (void)state;
    fake_start(&f, steps, 1, 8, false);         /* accepts nothing, reads nothing yet */
    f.ignore = "REFILL ";
    h = fake_open(&f);
    assert_int_equal(divvy_set_timeouts(h, 2000, 2000), 0);
    /* The first hint connects (the backlog takes it) and is sent whole. */
    client_conn_hint(&h->conn, HINT_FILL, strlen(HINT_FILL));
    assert_true(h->conn.fd >= 0);
    fd = h->conn.fd;
    n_fill = fill_socket(fd);
    assert_true(timed_hint(h, big, HINT_LONG) < 1000);
    assert_int_equal(h->conn.fd, fd);
    assert_string_equal(divvy_errmsg(h), "");
    /* divvyd reads again: the request waits for room, then goes out whole. */
    fake_run(&f);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 7);
    assert_int_equal(h->conn.fd, fd);
    divvy_close(h);
    fake_stop(&f);
    assert_int_equal(f.connections, 1);
    for (int i = 0; i <= n_fill; i++)
        off += (size_t)snprintf(want + off, sizeof(want) - off, "%s", HINT_FILL);
    snprintf(want + off, sizeof(want) - off, "TAKE 1 a=b\n");
    assert_string_equal(f.got, want);
}

/* Room for part of the hint only: the kernel takes a prefix of the line.
 * That connection is closed at once (divvyd then sees a torn last line and
 * EOF, never a request glued to it), and the next request goes whole on a
 * new one. */
static void test_client_conn_hint_short_write(void **state)
{
    static const struct fake_step steps[] = { { FAKE_REPLY, "OK true 7 60 r\n" } };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    const size_t fill_len = strlen(HINT_FILL);
    const char *big = long_hint();
    static char got[64 * 1024];
    struct divvy *h;
    struct fake f;
    size_t len = 0, torn;
    bool eof = false;
    int peer, fd, n_fill;

    (void)state;
    fake_start(&f, steps, 1, 8, false);
    h = fake_open(&f);
    assert_int_equal(divvy_set_timeouts(h, 2000, 2000), 0);
    client_conn_hint(&h->conn, HINT_FILL, strlen(HINT_FILL));
    assert_true(h->conn.fd >= 0);
    fd = h->conn.fd;
    peer = accept4(f.lfd, NULL, NULL, SOCK_CLOEXEC);
    assert_true(peer >= 0);
    n_fill = fill_socket(fd);
    assert_true(timed_hint(h, big, HINT_LONG) < 1000);      /* full: nothing sent */
    assert_int_equal(h->conn.fd, fd);
    /* Free one small line's worth: the next send gets one chunk in, not two. */
    assert_int_equal(read(peer, got, fill_len), (ssize_t)fill_len);
    assert_true(timed_hint(h, big, HINT_LONG) < 1000);
    /* What divvyd would read: the rest of the fill, a torn hint, EOF. */
    for (;;) {
        struct pollfd p = { .fd = peer, .events = POLLIN };
        ssize_t n;

        if (poll(&p, 1, 500) == 0)
            break;                      /* no EOF: the connection was kept */
        n = read(peer, got + len, sizeof(got) - len);
        assert_true(n >= 0);
        if (n == 0) {
            eof = true;
            break;
        }
        len += (size_t)n;
        assert_true(len < sizeof(got));
    }
    close(peer);
    assert_true(len >= (size_t)n_fill * fill_len);
    for (int i = 0; i < n_fill; i++)
        assert_memory_equal(got + (size_t)i * fill_len, HINT_FILL, fill_len);
    torn = len - (size_t)n_fill * fill_len;
    if ((torn == 0 && !eof) || torn == HINT_LONG) {
        /* How much room one line's read frees is the kernel's accounting: on
         * this VM's kernel one chunk of the hint, not all and not none.  A
         * kernel that gives room for all or none provokes no short write
         * (EAGAIN is test_client_conn_hint_full_buffer's case). */
        fprintf(stderr, "  SKIP: no short write provoked (%zu of %d bytes sent)\n", torn,
                HINT_LONG);
        divvy_close(h);
        fake_stop(&f);
        skip();
    }
    assert_true(torn > 0 && torn < HINT_LONG);
    assert_memory_equal(got + (size_t)n_fill * fill_len, big, torn);
    assert_int_equal(h->conn.fd, -1);
    assert_true(eof);
    assert_string_equal(divvy_errmsg(h), "");
    /* The next request: a new connection, its line whole. */
    fake_run(&f);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 7);
    divvy_close(h);
    fake_stop(&f);
    assert_string_equal(f.got, "TAKE 1 a=b\n");
    assert_int_equal(f.connections, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_addr_valid),
        cmocka_unit_test(test_client_addr_invalid),
        cmocka_unit_test(test_client_req_sorted_last_wins),
        cmocka_unit_test(test_client_req_format_quoting),
        cmocka_unit_test(test_client_req_rejects),
        cmocka_unit_test(test_client_req_roundtrip),
        cmocka_unit_test(test_client_reply_ok),
        cmocka_unit_test(test_client_reply_garbage),
        cmocka_unit_test(test_client_reply_err),
        cmocka_unit_test(test_client_reply_multi),
        cmocka_unit_test(test_client_api_null_handle),
        cmocka_unit_test(test_client_api_open_errors),
        cmocka_unit_test(test_client_api_state_dir),
        cmocka_unit_test(test_client_api_bad_arguments),
        cmocka_unit_test(test_client_conn_replies),
        cmocka_unit_test(test_client_conn_garbage),
        cmocka_unit_test(test_client_conn_reconnect),
        cmocka_unit_test(test_client_conn_request_timeout),
        cmocka_unit_test(test_client_conn_connect_timeout),
        cmocka_unit_test(test_client_conn_batch),
        cmocka_unit_test(test_client_conn_hint_no_listener),
        cmocka_unit_test(test_client_conn_hint_full_buffer),
        cmocka_unit_test(test_client_conn_hint_short_write),
    };

    /* The library never raises SIGPIPE; make sure the fake server cannot either. */
    signal(SIGPIPE, SIG_IGN);
    clear_env();
    return cmocka_run_group_tests_name("client", tests, NULL, NULL);
}
