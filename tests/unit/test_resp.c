/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/resp.c, the RESP2 codec: multibulk and inline
 * commands, incomplete input at every cut, the limits checked on the
 * declared sizes, and the reply formatters (docs/resp.md).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/resp.h"

static ssize_t parse(const char *s, struct resp_cmd *cmd, const char **why)
{
    return resp_parse(s, strlen(s), cmd, why);
}

static void test_resp_multibulk(void **state)
{
    const char in[] = "*3\r\n$9\r\nDIVVY.HIT\r\n$3\r\napp\r\n$0\r\n\r\nPING\r\n";
    struct resp_cmd cmd;
    const char *why;
    ssize_t r;

    (void)state;
    r = parse(in, &cmd, &why);
    assert_int_equal(r, (ssize_t)strlen(in) - 6);
    assert_int_equal(cmd.argc, 3);
    assert_true(resp_arg_is(&cmd, 0, "divvy.hit"));
    assert_int_equal(cmd.len[1], 3);
    assert_memory_equal(cmd.argv[1], "app", 3);
    assert_int_equal(cmd.len[2], 0);
    /* Every cut before the end is incomplete, never an error. */
    for (size_t cut = 0; cut < (size_t)r; cut++)
        assert_int_equal(resp_parse(in, cut, &cmd, &why), 0);
}

static void test_resp_inline(void **state)
{
    struct resp_cmd cmd;
    const char *why;

    (void)state;
    assert_int_equal(parse("  ECHO \t a\"b  \r\n", &cmd, &why), 16);
    assert_int_equal(cmd.argc, 2);
    assert_int_equal(cmd.len[1], 3);
    assert_memory_equal(cmd.argv[1], "a\"b", 3);
    assert_int_equal(parse("\r\n", &cmd, &why), 2);
    assert_int_equal(cmd.argc, 0);
    assert_int_equal(parse("*0\r\n", &cmd, &why), 4);
    assert_int_equal(cmd.argc, 0);
    assert_int_equal(parse("*-1\r\n", &cmd, &why), 5);
    assert_int_equal(parse("PING", &cmd, &why), 0);
}

static void test_resp_limits(void **state)
{
    static char big[RESP_CMD_MAX + 200];
    struct resp_cmd cmd;
    const char *why;
    size_t n;

    (void)state;
    assert_int_equal(parse("*1\r\n$99999999999\r\n", &cmd, &why), -EPROTO);
    assert_int_equal(parse("*1\r\n$4097\r\n", &cmd, &why), -EPROTO);
    assert_string_equal(why, "Protocol error: invalid bulk length");
    assert_int_equal(parse("*1\r\n$-1\r\n", &cmd, &why), -EPROTO);
    assert_int_equal(parse("*129\r\n", &cmd, &why), -EPROTO);
    assert_string_equal(why, "Protocol error: invalid multibulk length");
    assert_int_equal(parse("*1000000\r\n", &cmd, &why), -EPROTO);
    assert_int_equal(parse("*1\r\n*1\r\n", &cmd, &why), -EPROTO);
    assert_int_equal(parse("*1\r\n$4\r\nPINGxx", &cmd, &why), -EPROTO);
    assert_int_equal(parse("*1x\r\n", &cmd, &why), -EPROTO);
    assert_int_equal(parse("*\r\n", &cmd, &why), -EPROTO);
    /* A header that never ends. */
    memset(big, '1', 40);
    big[0] = '*';
    assert_int_equal(resp_parse(big, 40, &cmd, &why), -EPROTO);
    /* Two 4096-byte arguments: over RESP_CMD_MAX as soon as the second is declared. */
    n = (size_t)snprintf(big, sizeof(big), "*3\r\n$4\r\nECHO\r\n$4096\r\n");
    memset(big + n, 'a', 4096);
    n += 4096;
    n += (size_t)snprintf(big + n, sizeof(big) - n, "\r\n$4096\r\n");
    assert_int_equal(resp_parse(big, n, &cmd, &why), -EPROTO);
    assert_string_equal(why, "Protocol error: command too long");
    /* An inline line with no newline within RESP_INLINE_MAX. */
    memset(big, 'a', RESP_INLINE_MAX);
    assert_int_equal(resp_parse(big, RESP_INLINE_MAX - 1, &cmd, &why), 0);
    assert_int_equal(resp_parse(big, RESP_INLINE_MAX, &cmd, &why), -EPROTO);
    /* 129 inline words. */
    for (n = 0; n < 129 * 2; n += 2)
        memcpy(big + n, "a ", 2);
    big[n++] = '\n';
    assert_int_equal(resp_parse(big, n, &cmd, &why), -EPROTO);
}

static void test_resp_arg_int(void **state)
{
    struct resp_cmd cmd;
    const char *why;
    int64_t v;

    (void)state;
    assert_true(parse("X 60 -1 1x  99999999999999999999 -\r\n", &cmd, &why) > 0);
    assert_int_equal(resp_arg_int(&cmd, 1, 1, 100, &v), 0);
    assert_int_equal(v, 60);
    assert_int_equal(resp_arg_int(&cmd, 1, 61, 100, &v), -EINVAL);
    assert_int_equal(resp_arg_int(&cmd, 2, -1, 0, &v), 0);
    assert_int_equal(v, -1);
    assert_int_equal(resp_arg_int(&cmd, 3, 0, 100, &v), -EINVAL);
    assert_int_equal(resp_arg_int(&cmd, 4, 0, INT64_MAX, &v), -EINVAL);
    assert_int_equal(resp_arg_int(&cmd, 5, -10, 10, &v), -EINVAL);
    assert_int_equal(resp_arg_int(&cmd, 6, 0, 10, &v), -EINVAL);
}

static void test_resp_formats(void **state)
{
    char buf[128];

    (void)state;
    assert_int_equal(resp_fmt_simple(buf, sizeof(buf), "PONG"), 7);
    assert_string_equal(buf, "+PONG\r\n");
    assert_true(resp_fmt_error(buf, sizeof(buf), "ERR a\r\nb") > 0);
    assert_string_equal(buf, "-ERR a  b\r\n");
    assert_true(resp_fmt_int(buf, sizeof(buf), -1) > 0);
    assert_string_equal(buf, ":-1\r\n");
    assert_true(resp_fmt_bulk(buf, sizeof(buf), "a\0b", 3) == 9);
    assert_memory_equal(buf, "$3\r\na\0b\r\n", 9);
    assert_true(resp_fmt_hit(buf, sizeof(buf), true, 57, 60, "r1") > 0);
    assert_string_equal(buf, "*4\r\n:1\r\n:57\r\n:60\r\n$2\r\nr1\r\n");
    assert_true(resp_fmt_hit(buf, sizeof(buf), false, UINT64_MAX, 0, "x") > 0);
    assert_string_equal(buf, "*4\r\n:0\r\n:9223372036854775807\r\n:0\r\n$1\r\nx\r\n");
    assert_true(resp_fmt_proto_err(buf, sizeof(buf), PROTO_E_BAD_REQUEST, "no") > 0);
    assert_string_equal(buf, "-ERR bad-request no\r\n");
    assert_int_equal(resp_fmt_hit(buf, 10, true, 1, 1, "r"), -ENOBUFS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resp_multibulk),
        cmocka_unit_test(test_resp_inline),
        cmocka_unit_test(test_resp_limits),
        cmocka_unit_test(test_resp_arg_int),
        cmocka_unit_test(test_resp_formats),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
