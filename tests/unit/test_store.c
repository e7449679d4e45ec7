/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/store.c without a Redis (those are in
 * tests/integration/test_redis_*.c): the SHA-1 that names scripts for
 * EVALSHA, the key format and its escaping (docs/redis.md "Keys"), option
 * checks, and a store_conn that refuses at once while the breaker is open.
 * The module is daemon code, so this binary includes its source.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../../daemon/log.c"
#include "../../daemon/store.c"

static void test_store_sha1_vectors(void **state)
{
    char hex[41], *big;

    (void)state;
    store_sha1_hex("", 0, hex);
    assert_string_equal(hex, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    store_sha1_hex("abc", 3, hex);
    assert_string_equal(hex, "a9993e364706816aba3e25717850c26c9cd0d89d");
    store_sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, hex);
    assert_string_equal(hex, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    big = malloc(1000000);
    assert_non_null(big);
    memset(big, 'a', 1000000);
    store_sha1_hex(big, 1000000, hex);
    assert_string_equal(hex, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
    free(big);
    /* 55, 56, 63 and 64 bytes: the padding edge cases */
    store_sha1_hex("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 55, hex);
    assert_string_equal(hex, "c1c8bbdc22796e28c0e15163d20899b65621d65a");
    store_sha1_hex("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 64, hex);
    assert_string_equal(hex, "0098ba824b5c16427bd7a1122a5a442a25ec644d");
}

static void test_store_scripts(void **state)
{
    (void)state;
    for (int i = 0; i < STORE_N_SCRIPTS; i++) {
        char hex[41];

        assert_non_null(store_script_source(i));
        store_sha1_hex(store_script_source(i), strlen(store_script_source(i)), hex);
        assert_string_equal(store_script_sha(i), hex);
        /* Every script that writes a key gives it a TTL in the same script. */
        if (strstr(store_script_source(i), "'SET'") || strstr(store_script_source(i), "HSET"))
            assert_non_null(strstr(store_script_source(i), "PX") ?
                            strstr(store_script_source(i), "PX") :
                            strstr(store_script_source(i), "PEXPIRE"));
    }
    assert_null(store_script_source(STORE_N_SCRIPTS));
    assert_string_equal(store_script_name(STORE_SCRIPT_LEASE), "lease");
}

static struct store *new_store(const char *prefix)
{
    struct store_opts o = { .host = "127.0.0.1", .port = 6379, .timeout_ms = 100,
                            .prefix = prefix };
    struct store *st = NULL;

    assert_int_equal(store_new(&o, &st), 0);
    return st;
}

static void test_store_key_format(void **state)
{
    struct store *st = new_store("");
    struct store *pre = new_store("prod:");
    char buf[256];
    int n;

    (void)state;
    n = store_key(st, "login", "alice", 5, buf, sizeof(buf));
    assert_int_equal(n, (int)strlen("divvy:{login:alice}"));
    assert_memory_equal(buf, "divvy:{login:alice}", (size_t)n);
    /* ':', '{', '}' and '%' are escaped; other bytes (even NUL) kept. */
    n = store_key(st, "0123456789abcdef", "a:{b}%c\0d", 9, buf, sizeof(buf));
    assert_int_equal(n, (int)strlen("divvy:{0123456789abcdef:a%3A%7Bb%7D%25c") + 3);
    assert_memory_equal(buf, "divvy:{0123456789abcdef:a%3A%7Bb%7D%25c\0d}", (size_t)n);
    n = store_key(pre, "r", "", 0, buf, sizeof(buf));
    assert_memory_equal(buf, "prod:divvy:{r:}", (size_t)n);
    /* Too small: -ENOBUFS, never a partial key. */
    assert_int_equal(store_key(st, "login", "alice", 5, buf, 10), -ENOBUFS);
    assert_int_equal(store_key(st, "login", "::::", 4, buf, 20), -ENOBUFS);
    assert_true(store_key_max(st, 4) >= 20);
    store_free(st);
    store_free(pre);
}

static void test_store_options(void **state)
{
    struct store_opts o = { .host = "127.0.0.1", .port = 6379, .timeout_ms = 0 };
    struct store *st = NULL;

    (void)state;
    assert_int_equal(store_new(&o, &st), -EINVAL);
    o.timeout_ms = 100;
    o.host = NULL;
    assert_int_equal(store_new(&o, &st), -EINVAL);
    o.unix_socket = "/nonexistent/redis.sock";
    o.password = "secret";
    assert_int_equal(store_new(&o, &st), 0);
    assert_false(store_wanted(st));
    assert_int_equal(store_deadline(st, 1000), 1100);
    store_free(st);
    store_free(NULL);
}

static void cb_never(void *arg, const struct store_reply *rep)
{
    (void)arg;
    (void)rep;
    fail_msg("a refused request must not call back");
}

/* Redis absent: the first request trips the breaker; later ones are
 * refused at once, without a callback. */
static void test_store_refuses_while_open(void **state)
{
    struct store_opts o = { .unix_socket = "/nonexistent/redis.sock", .timeout_ms = 100 };
    struct event_base *base = event_base_new();
    struct store_conn *sc = NULL;
    struct store *st = NULL;
    struct store_stats s;
    int64_t args[3] = { 1, 10, 1000 };

    (void)state;
    assert_non_null(base);
    assert_int_equal(store_new(&o, &st), 0);
    assert_int_equal(store_conn_new(st, base, &sc), 0);
    assert_false(store_breaker_open(st));
    assert_int_equal(store_eval(sc, STORE_SCRIPT_WINDOW, "k", 1, "take", args, 3,
                                clock_now_ms() + 100, cb_never, NULL), -ENOTCONN);
    assert_true(store_breaker_open(st));
    assert_int_equal(store_eval(sc, STORE_SCRIPT_WINDOW, "k", 1, "take", args, 3,
                                clock_now_ms() + 100, cb_never, NULL), -ENOTCONN);
    assert_int_equal(store_del(sc, "k", 1, clock_now_ms() - 1, cb_never, NULL), -ETIMEDOUT);
    store_stats(st, &s);
    assert_true(s.wanted);
    assert_int_equal(s.trips, 1);
    assert_int_equal(s.conns_up, 0);
    store_conn_free(sc);
    store_free(st);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_sha1_vectors),
        cmocka_unit_test(test_store_scripts),
        cmocka_unit_test(test_store_key_format),
        cmocka_unit_test(test_store_options),
        cmocka_unit_test(test_store_refuses_while_open),
    };

    log_init(LOG_TARGET_STDERR, false);
    return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
