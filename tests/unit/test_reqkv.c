/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/reqkv.c: pairs built from parts come out as
 * proto_parse() leaves a line's (sorted bytewise, a repeated key's last
 * value wins, strings NUL-terminated in the request's buffer), and the
 * bounds (PROTO_KV_MAX keys, the buffer) are refused, not overrun.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/reqkv.h"

static int put(struct proto_req *req, size_t *off, const char *k, const char *v)
{
    return reqkv_put(req, off, k, strlen(k), v, strlen(v));
}

static void test_reqkv_same_pairs_as_the_parser(void **state)
{
    const char line[] = "HIT path=/a user=bob ab=1 a=\"\" user=eve b=2\n";
    struct proto_req parsed, built;
    size_t off = 0;

    (void)state;
    assert_int_equal(proto_parse(line, strlen(line), &parsed), strlen(line));
    built.n_kv = 0;
    assert_int_equal(put(&built, &off, "path", "/a"), 0);
    assert_int_equal(put(&built, &off, "user", "bob"), 0);
    assert_int_equal(put(&built, &off, "ab", "1"), 0);
    assert_int_equal(put(&built, &off, "a", ""), 0);
    assert_int_equal(put(&built, &off, "user", "eve"), 0);
    assert_int_equal(put(&built, &off, "b", "2"), 0);
    assert_int_equal(built.n_kv, parsed.n_kv);
    for (unsigned i = 0; i < built.n_kv; i++) {
        assert_int_equal(built.kv[i].key_len, parsed.kv[i].key_len);
        assert_int_equal(built.kv[i].value_len, parsed.kv[i].value_len);
        assert_string_equal(built.kv[i].key, parsed.kv[i].key);
        assert_string_equal(built.kv[i].value, parsed.kv[i].value);
    }
    assert_non_null(proto_find(&built, "user", 4));
    assert_string_equal(proto_find(&built, "user", 4)->value, "eve");
}

static void test_reqkv_binary_key_and_nul_terminated_copies(void **state)
{
    const char src[] = { 'k', '\x01', 'X', 'v', 'v', 'Y' };
    struct proto_req req;
    size_t off = 0;

    (void)state;
    req.n_kv = 0;
    /* Parts need not be NUL-terminated: only their lengths are read. */
    assert_int_equal(reqkv_put(&req, &off, src, 2, src + 3, 2), 0);
    assert_int_equal(req.n_kv, 1);
    assert_int_equal(req.kv[0].key_len, 2);
    assert_memory_equal(req.kv[0].key, "k\x01", 3);
    assert_memory_equal(req.kv[0].value, "vv", 3);
    assert_int_equal(off, 6);
}

static void test_reqkv_bounds(void **state)
{
    static char big[PROTO_LINE_MAX + PROTO_KV_MAX * 2];
    struct proto_req req;
    char key[16];
    size_t off = 0;

    (void)state;
    req.n_kv = 0;
    for (unsigned i = 0; i < PROTO_KV_MAX; i++) {
        snprintf(key, sizeof(key), "k%02u", i);
        assert_int_equal(put(&req, &off, key, "v"), 0);
    }
    assert_int_equal(put(&req, &off, "zz", "v"), -E2BIG);
    /* A key already there is replaced even at the bound. */
    assert_int_equal(put(&req, &off, "k07", "w"), 0);
    assert_int_equal(req.n_kv, PROTO_KV_MAX);
    assert_string_equal(proto_find(&req, "k07", 3)->value, "w");
    /* More than the buffer holds is refused before anything is copied. */
    memset(big, 'x', sizeof(big) - 1);
    req.n_kv = 0;
    off = 0;
    assert_int_equal(reqkv_put(&req, &off, "k", 1, big, sizeof(big) - 1), -EMSGSIZE);
    assert_int_equal(req.n_kv, 0);
    assert_int_equal(off, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reqkv_same_pairs_as_the_parser),
        cmocka_unit_test(test_reqkv_binary_key_and_nul_terminated_copies),
        cmocka_unit_test(test_reqkv_bounds),
    };

    return cmocka_run_group_tests_name("reqkv", tests, NULL, NULL);
}
