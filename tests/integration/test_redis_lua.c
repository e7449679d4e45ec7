/* SPDX-License-Identifier: MIT */
/*
 * Integration: the Lua scripts of daemon/store.c run directly against a real
 * redis-server (docs/redis.md "Scripts"): the window, token bucket, sliding
 * window and lease scripts always leave a TTL on the key, never report a
 * negative remainder (also after the limit is lowered), keep divvy's window
 * semantics, recover a key of the wrong type or without expiry, and their
 * SHA-1s are the names Redis gives them.
 *
 * The scripts are the daemon's own: this binary links daemon/store.c from
 * libdivvyd.a.
 */
#include <limits.h>

#include "harness_redis.h"

#include "daemon/log.h"
#include "daemon/addr.h"
#include "daemon/redis_async.h"
#include "daemon/sentinel.h"
#include "daemon/store.h"

struct ev {
    long long v[4];
    size_t n;
};

/* EVAL @script with KEYS[1] = @key and the NULL-terminated arguments. */
static struct ev eval(redisContext *c, enum store_script script, const char *key, ...)
{
    const char *argv[16];
    size_t lens[16];
    struct ev e = { { 0 }, 0 };
    redisReply *rep;
    va_list ap;
    int argc = 0;

    argv[argc++] = "EVAL";
    argv[argc++] = store_script_source(script);
    argv[argc++] = "1";
    argv[argc++] = key;
    va_start(ap, key);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && argc < 16;)
        argv[argc++] = a;
    va_end(ap);
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    rep = redisCommandArgv(c, argc, argv, lens);
    if (!rep || rep->type != REDIS_REPLY_ARRAY)
        fail_msg("EVAL %s: %s", store_script_name(script),
                 rep && rep->type == REDIS_REPLY_ERROR ? rep->str : "no array reply");
    for (size_t i = 0; i < rep->elements && i < 4; i++) {
        assert_int_equal(rep->element[i]->type, REDIS_REPLY_INTEGER);
        e.v[i] = rep->element[i]->integer;
    }
    e.n = rep->elements;
    freeReplyObject(rep);
    return e;
}

static long long cmd_int(redisContext *c, const char *fmt, const char *key)
{
    redisReply *rep = redisCommand(c, fmt, key);
    long long v = LLONG_MIN;

    if (rep && rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer;
    else if (rep && rep->type == REDIS_REPLY_STRING)
        v = atoll(rep->str);
    if (rep)
        freeReplyObject(rep);
    return v;
}

static void cmd(redisContext *c, const char *fmt, const char *key)
{
    redisReply *rep = redisCommand(c, fmt, key);

    if (!rep || rep->type == REDIS_REPLY_ERROR)
        fail_msg("%s: %s", fmt, rep ? rep->str : "no reply");
    freeReplyObject(rep);
}

/* Every script leaves its key with an expiry (or no key at all). */
static void assert_ttl(redisContext *c, const char *key, long long max_ms)
{
    long long ttl = cmd_int(c, "PTTL %s", key);

    if (ttl == -2)
        return;
    if (ttl <= 0 || ttl > max_ms)
        fail_msg("%s: PTTL %lld, want 1..%lld", key, ttl, max_ms);
}

static redisContext *connect_fresh(struct redis_srv **rs)
{
    redisContext *c;

    CHECK(redis_start(rs));
    c = redis_cli(*rs);
    assert_non_null(c);
    return c;
}

static void test_redis_lua_window(void **state)
{
    struct redis_srv *rs;
    redisContext *c = connect_fresh(&rs);
    const char *k = "divvy:{w:a}";
    struct ev e;

    (void)state;
    /* A fresh key: PEEK and an oversized TAKE start nothing. */
    e = eval(c, STORE_SCRIPT_WINDOW, k, "peek", "1", "3", "60000", NULL);
    assert_true(e.v[0] == 1 && e.v[1] == 3 && e.v[2] == 0);
    e = eval(c, STORE_SCRIPT_WINDOW, k, "take", "4", "3", "60000", NULL);
    assert_true(e.v[0] == 0 && e.v[1] == 3 && e.v[2] == 0);
    assert_int_equal(cmd_int(c, "EXISTS %s", k), 0);
    /* divvy: 3 allowed, then denied; the first hit sets the window. */
    e = eval(c, STORE_SCRIPT_WINDOW, k, "take", "1", "3", "60000", NULL);
    assert_true(e.v[0] == 1 && e.v[1] == 2 && e.v[2] == 60000);
    assert_ttl(c, k, 60000);
    e = eval(c, STORE_SCRIPT_WINDOW, k, "take", "2", "3", "60000", NULL);
    assert_true(e.v[0] == 1 && e.v[1] == 0 && e.v[2] > 59000);
    e = eval(c, STORE_SCRIPT_WINDOW, k, "take", "1", "3", "60000", NULL);
    assert_true(e.v[0] == 0 && e.v[1] == 0 && e.v[2] > 59000);
    assert_int_equal(cmd_int(c, "GET %s", k), 3);
    /* The limit is an argument: lowered below what was used, never negative. */
    e = eval(c, STORE_SCRIPT_WINDOW, k, "peek", "1", "1", "60000", NULL);
    assert_true(e.v[0] == 0 && e.v[1] == 0);
    /* Raised: the count is kept. */
    e = eval(c, STORE_SCRIPT_WINDOW, k, "take", "1", "10", "60000", NULL);
    assert_true(e.v[0] == 1 && e.v[1] == 6);
    assert_ttl(c, k, 60000);
    /* A key someone left without expiry gets one. */
    cmd(c, "SET %s 1", "divvy:{w:b}");
    e = eval(c, STORE_SCRIPT_WINDOW, "divvy:{w:b}", "peek", "1", "3", "5000", NULL);
    assert_true(e.v[0] == 1 && e.v[1] == 2 && e.v[2] == 5000);
    assert_ttl(c, "divvy:{w:b}", 5000);
    /* A key of another type (the rule's algorithm changed) starts afresh. */
    cmd(c, "HSET %s d 1", "divvy:{w:c}");
    e = eval(c, STORE_SCRIPT_WINDOW, "divvy:{w:c}", "take", "1", "3", "5000", NULL);
    assert_true(e.v[0] == 1 && e.v[1] == 2);
    assert_ttl(c, "divvy:{w:c}", 5000);
    /* The window ends with the key. */
    e = eval(c, STORE_SCRIPT_WINDOW, "divvy:{w:d}", "take", "1", "1", "100", NULL);
    assert_true(e.v[0] == 1);
    harness_pause_ms(150);
    e = eval(c, STORE_SCRIPT_WINDOW, "divvy:{w:d}", "take", "1", "1", "100", NULL);
    assert_true(e.v[0] == 1 && e.v[1] == 0);
    redisFree(c);
    redis_stop(rs);
}

static void test_redis_lua_token_bucket(void **state)
{
    struct redis_srv *rs;
    redisContext *c = connect_fresh(&rs);
    const char *k = "divvy:{tb:a}";
    struct ev e;

    (void)state;
    /* capacity 3, 1 token per 200 ms */
    for (int i = 2; i >= 0; i--) {
        e = eval(c, STORE_SCRIPT_BUCKET, k, "take", "1", "3", "1", "200", "0", NULL);
        assert_true(e.v[0] == 1 && e.v[1] == i && e.v[2] > 0 && e.v[2] <= 200);
        assert_ttl(c, k, 600);
    }
    e = eval(c, STORE_SCRIPT_BUCKET, k, "take", "1", "3", "1", "200", "0", NULL);
    assert_true(e.v[0] == 0 && e.v[1] == 0);
    harness_pause_ms(250);
    e = eval(c, STORE_SCRIPT_BUCKET, k, "peek", "1", "3", "1", "200", "0", NULL);
    assert_true(e.v[0] == 1 && e.v[1] >= 1);
    /* Lowered capacity: never a negative count. */
    e = eval(c, STORE_SCRIPT_BUCKET, k, "peek", "1", "1", "1", "200", "0", NULL);
    assert_true(e.v[1] >= 0);
    /* A full bucket needs no key; the key expires when full again. */
    harness_pause_ms(700);
    assert_int_equal(cmd_int(c, "EXISTS %s", k), 0);
    /* strict: a denied attempt pushes the refill clock back. */
    k = "divvy:{tb:b}";
    e = eval(c, STORE_SCRIPT_BUCKET, k, "take", "1", "1", "1", "300", "1", NULL);
    assert_true(e.v[0] == 1 && e.v[1] == 0);
    harness_pause_ms(200);
    e = eval(c, STORE_SCRIPT_BUCKET, k, "take", "1", "1", "1", "300", "1", NULL);
    assert_true(e.v[0] == 0 && e.v[2] > 250);
    assert_ttl(c, k, 300);
    harness_pause_ms(150);
    e = eval(c, STORE_SCRIPT_BUCKET, k, "take", "1", "1", "1", "300", "1", NULL);
    assert_int_equal(e.v[0], 0);
    redisFree(c);
    redis_stop(rs);
}

static void test_redis_lua_sliding(void **state)
{
    struct redis_srv *rs;
    redisContext *c = connect_fresh(&rs);
    const char *k = "divvy:{sw:a}";
    struct ev e;

    (void)state;
    e = eval(c, STORE_SCRIPT_SLIDING, k, "take", "2", "4", "300", NULL);
    assert_true(e.v[0] == 1 && e.v[1] == 2 && e.v[2] > 0 && e.v[2] <= 300);
    assert_ttl(c, k, 600);
    e = eval(c, STORE_SCRIPT_SLIDING, k, "take", "2", "4", "300", NULL);
    assert_true(e.v[0] == 1 && e.v[1] == 0);
    e = eval(c, STORE_SCRIPT_SLIDING, k, "take", "1", "4", "300", NULL);
    assert_true(e.v[0] == 0 && e.v[1] == 0);
    /* Next window: the previous one still weighs in, less and less. */
    harness_pause_ms(320);
    e = eval(c, STORE_SCRIPT_SLIDING, k, "peek", "1", "4", "300", NULL);
    assert_true(e.v[1] >= 0 && e.v[1] < 4);
    /* Lowered limit: never negative. */
    e = eval(c, STORE_SCRIPT_SLIDING, k, "peek", "1", "1", "300", NULL);
    assert_true(e.v[0] == 0 && e.v[1] == 0);
    assert_ttl(c, k, 600);
    harness_pause_ms(650);
    assert_int_equal(cmd_int(c, "EXISTS %s", k), 0);
    redisFree(c);
    redis_stop(rs);
}

static void test_redis_lua_lease(void **state)
{
    struct redis_srv *rs;
    redisContext *c = connect_fresh(&rs);
    const char *k = "divvy:{ls:a}";
    long long total = 0, prev_remain = 1000;
    struct ev e;

    (void)state;
    /* The first grant creates the window. */
    e = eval(c, STORE_SCRIPT_LEASE, k, "500", "1000", "60000", "16", NULL);
    assert_true(e.v[0] == 62 && e.v[1] == 938 && e.v[2] == 60000 && e.v[3] == 1);
    assert_ttl(c, k, 60000);
    total = e.v[0];
    /* Grants shrink with the remainder, down to 1, never past the limit. */
    for (int i = 0; i < 1000; i++) {
        e = eval(c, STORE_SCRIPT_LEASE, k, "500", "1000", "60000", "16", NULL);
        assert_true(e.v[0] >= 0 && e.v[1] >= 0 && e.v[3] == 0);
        assert_true(e.v[0] <= (prev_remain / 16 > 1 ? prev_remain / 16 : 1));
        assert_int_equal(e.v[1], prev_remain - e.v[0] - (i == 0 ? 62 : 0));
        total += e.v[0];
        prev_remain = e.v[1];
        if (e.v[0] == 0)
            break;
        assert_ttl(c, k, 60000);
    }
    assert_int_equal(total, 1000);
    assert_int_equal(cmd_int(c, "GET %s", k), 1000);
    assert_ttl(c, k, 60000);
    /* Lowered limit: nothing granted, never negative. */
    e = eval(c, STORE_SCRIPT_LEASE, k, "10", "500", "60000", "16", NULL);
    assert_true(e.v[0] == 0 && e.v[1] == 0);
    /* want caps the grant; leases and direct takes share the count. */
    e = eval(c, STORE_SCRIPT_LEASE, "divvy:{ls:b}", "3", "1000", "60000", "16", NULL);
    assert_true(e.v[0] == 3 && e.v[1] == 997);
    e = eval(c, STORE_SCRIPT_WINDOW, "divvy:{ls:b}", "take", "7", "1000", "60000", NULL);
    assert_true(e.v[0] == 1 && e.v[1] == 990);
    redisFree(c);
    redis_stop(rs);
}

/* The EVALSHA names divvyd uses are the SHA-1s Redis computes. */
static void test_redis_lua_sha(void **state)
{
    struct redis_srv *rs;
    redisContext *c = connect_fresh(&rs);

    (void)state;
    for (int i = 0; i < STORE_N_SCRIPTS; i++) {
        redisReply *rep = redisCommand(c, "SCRIPT LOAD %s", store_script_source(i));

        assert_non_null(rep);
        assert_int_equal(rep->type, REDIS_REPLY_STRING);
        assert_string_equal(rep->str, store_script_sha(i));
        freeReplyObject(rep);
    }
    redisFree(c);
    redis_stop(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_redis_lua_window, harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_lua_token_bucket, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_lua_sliding, harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_lua_lease, harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_lua_sha, harness_setup, redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_lua", tests, NULL, NULL);
}
