/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for libclient's wire module (client_wire.c): address parsing,
 * request checks, normalisation and formatting (round-tripped through
 * common/proto.c's parser) and strict reply parsing.  Pure functions: no
 * socket, no handle.
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

#include "client_wire.h"
#include "proto.h"

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
    };

    return cmocka_run_group_tests_name("client_wire", tests, NULL, NULL);
}
