/* SPDX-License-Identifier: MIT */
/*
 * Integration: the Lua scripts of daemon/store.c run directly against a real
 * redis-server (docs/redis.md "Scripts"): the window, token bucket, gcra, sliding
 * window and lease scripts always leave a TTL on the key, never report a
 * negative remainder (also after the limit is lowered), keep divvy's window
 * semantics, recover a key of the wrong type or without expiry, and their
 * SHA-1s are the names Redis gives them; the ad-hoc token bucket script
 * (RESP's RL.*) answers call for call as divvyd's own ad-hoc table.
 * SHA-1s are the names Redis gives them.  The batched forms (hot keys)
 * answer a list of requests exactly as the plain calls one by one do.
 *
 * The scripts, and the typed calls that pack their ARGV and decode their
 * answers, are the daemon's own (daemon/store_script.c), so a wrong ARGV
 * position shows here; this binary links them from libdivvyd.a.
 */
#include <limits.h>
#include <stdlib.h>
#include <time.h>

#include "harness_redis.h"

#include "daemon/adhoc.h"
#include "daemon/log.h"
#include "daemon/addr.h"
#include "daemon/redis_async.h"
#include "daemon/sentinel.h"
#include "daemon/store.h"

/*
 * EVAL of @call (packed by store_script.c, as divvyd sends it) with KEYS[1] =
 * @key, decoded by store_script_decode().  The raw answer must keep the
 * scripts' promises the decoder would hide: no negative number, allowed and
 * created 0 or 1.
 */
static struct store_reply run(redisContext *c, const struct store_call *call, const char *key)
{
    const char *argv[4 + STORE_SCRIPT_ARGV_MAX];
    size_t lens[4 + STORE_SCRIPT_ARGV_MAX];
    struct store_reply out;
    redisReply *rep;
    int argc = 0;

    argv[argc++] = "EVAL";
    argv[argc++] = store_script_source(call->script);
    argv[argc++] = "1";
    argv[argc++] = key;
    for (unsigned i = 0; i < call->argc; i++)
        argv[argc++] = call->argv[i];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    rep = redisCommandArgv(c, argc, argv, lens);
    if (!rep || rep->type != REDIS_REPLY_ARRAY)
        fail_msg("EVAL %s: %s", store_script_name(call->script),
                 rep && rep->type == REDIS_REPLY_ERROR ? rep->str : "no array reply");
    for (size_t i = 0; i < rep->elements; i++) {
        assert_int_equal(rep->element[i]->type, REDIS_REPLY_INTEGER);
        assert_true(rep->element[i]->integer >= 0);
    }
    if (call->script == STORE_SCRIPT_LEASE)
        assert_true(rep->elements == 4 && rep->element[3]->integer <= 1);
    else
        assert_true(rep->elements == 3 && rep->element[0]->integer <= 1);
    if (store_script_decode(call->script, rep, &out) < 0)
        fail_msg("EVAL %s: not the script's answer", store_script_name(call->script));
    freeReplyObject(rep);
    return out;
}

static struct store_verdict window(redisContext *c, const char *key, enum store_op op,
                                   uint64_t n, int64_t limit, uint64_t reset_ms)
{
    struct store_window_args a = { .op = op, .n = n, .limit = limit, .reset_ms = reset_ms };
    struct store_call call;

    store_script_window(&a, &call);
    return run(c, &call, key).verdict;
}

static struct store_verdict bucket(redisContext *c, const char *key, enum store_op op,
                                   uint64_t n, int64_t limit, uint64_t amount,
                                   uint64_t refill_ms, bool strict)
{
    struct store_bucket_args a = { .op = op, .n = n, .limit = limit, .refill_amount = amount,
                                   .refill_ms = refill_ms, .strict = strict };
    struct store_call call;

    store_script_bucket(&a, &call);
    return run(c, &call, key).verdict;
}

static struct store_verdict sliding(redisContext *c, const char *key, enum store_op op,
                                    uint64_t n, int64_t limit, uint64_t window_ms)
{
    struct store_sliding_args a = { .op = op, .n = n, .limit = limit, .window_ms = window_ms };
    struct store_call call;

    store_script_sliding(&a, &call);
    return run(c, &call, key).verdict;
}

static struct store_grant lease(redisContext *c, const char *key, uint64_t want, int64_t limit,
                                uint64_t reset_ms)
{
    struct store_lease_args a = { .want = want, .limit = limit, .reset_ms = reset_ms,
                                  .divisor = 16 };
    struct store_call call;

    store_script_lease(&a, &call);
    return run(c, &call, key).grant;
}

/* EVAL of @a's batched form over @items on @key: its verdicts into @ret
 * (items->n of them), checked as run() checks a plain answer. */
static void run_many(redisContext *c, const struct store_verdict_args *a,
                     const struct store_items *items, const char *key, struct store_verdict *ret)
{
    const char *argv[5 + STORE_SCRIPT_ARGV_MAX];
    size_t lens[5 + STORE_SCRIPT_ARGV_MAX];
    struct store_call call;
    struct store_reply out;
    redisReply *rep;
    int argc = 0;

    store_script_verdicts(a, items, &call);
    argv[argc++] = "EVAL";
    argv[argc++] = store_script_source(call.script);
    argv[argc++] = "1";
    argv[argc++] = key;
    for (unsigned i = 0; i < call.argc; i++)
        argv[argc++] = call.argv[i];
    assert_non_null(call.list);
    argv[argc++] = call.list;
    for (int i = 0; i < argc; i++)
        lens[i] = argv[i] == call.list ? call.list_len : strlen(argv[i]);
    rep = redisCommandArgv(c, argc, argv, lens);
    if (!rep || rep->type != REDIS_REPLY_ARRAY)
        fail_msg("EVAL %s: %s", store_script_name(call.script),
                 rep && rep->type == REDIS_REPLY_ERROR ? rep->str : "no array reply");
    assert_int_equal(rep->elements, 1 + 3 * (size_t)items->n);
    for (size_t i = 0; i < rep->elements; i++) {
        assert_int_equal(rep->element[i]->type, REDIS_REPLY_INTEGER);
        assert_true(rep->element[i]->integer >= 0);
        if (i > 0 && (i - 1) % 3 == 0)
            assert_true(rep->element[i]->integer <= 1);
    }
    if (store_script_decode(call.script, rep, &out) < 0)
        fail_msg("EVAL %s: not the script's answer", store_script_name(call.script));
    assert_int_equal(out.kind, STORE_REPLY_VERDICTS);
    assert_int_equal(out.verdicts.n, items->n);
    for (unsigned i = 0; i < items->n; i++)
        store_verdicts_get(&out.verdicts, i, &ret[i]);
    freeReplyObject(rep);
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
    struct store_verdict ew;

    (void)state;
    /* A fresh key: PEEK and an oversized TAKE start nothing. */
    ew = window(c, k, STORE_PEEK, 1, 3, 60000);
    assert_true(ew.allowed && ew.credit == 3 && ew.reset_ms == 0);
    ew = window(c, k, STORE_TAKE, 4, 3, 60000);
    assert_true(!ew.allowed && ew.credit == 3 && ew.reset_ms == 0);
    assert_int_equal(cmd_int(c, "EXISTS %s", k), 0);
    /* divvy: 3 allowed, then denied; the first hit sets the window. */
    ew = window(c, k, STORE_TAKE, 1, 3, 60000);
    assert_true(ew.allowed && ew.credit == 2 && ew.reset_ms == 60000);
    assert_ttl(c, k, 60000);
    ew = window(c, k, STORE_TAKE, 2, 3, 60000);
    assert_true(ew.allowed && ew.credit == 0 && ew.reset_ms > 59000);
    ew = window(c, k, STORE_TAKE, 1, 3, 60000);
    assert_true(!ew.allowed && ew.credit == 0 && ew.reset_ms > 59000);
    assert_int_equal(cmd_int(c, "GET %s", k), 3);
    /* The limit is an argument: lowered below what was used, never negative. */
    ew = window(c, k, STORE_PEEK, 1, 1, 60000);
    assert_true(!ew.allowed && ew.credit == 0);
    /* Raised: the count is kept. */
    ew = window(c, k, STORE_TAKE, 1, 10, 60000);
    assert_true(ew.allowed && ew.credit == 6);
    assert_ttl(c, k, 60000);
    /* A key someone left without expiry gets one. */
    cmd(c, "SET %s 1", "divvy:{w:b}");
    ew = window(c, "divvy:{w:b}", STORE_PEEK, 1, 3, 5000);
    assert_true(ew.allowed && ew.credit == 2 && ew.reset_ms == 5000);
    assert_ttl(c, "divvy:{w:b}", 5000);
    /* A key of another type (the rule's algorithm changed) starts afresh. */
    cmd(c, "HSET %s d 1", "divvy:{w:c}");
    ew = window(c, "divvy:{w:c}", STORE_TAKE, 1, 3, 5000);
    assert_true(ew.allowed && ew.credit == 2);
    assert_ttl(c, "divvy:{w:c}", 5000);
    /* The window ends with the key. */
    ew = window(c, "divvy:{w:d}", STORE_TAKE, 1, 1, 100);
    assert_true(ew.allowed);
    harness_pause_ms(150);
    ew = window(c, "divvy:{w:d}", STORE_TAKE, 1, 1, 100);
    assert_true(ew.allowed && ew.credit == 0);
    redisFree(c);
    redis_stop(rs);
}

static void test_redis_lua_token_bucket(void **state)
{
    struct redis_srv *rs;
    redisContext *c = connect_fresh(&rs);
    const char *k = "divvy:{tb:a}";
    struct store_verdict ew;

    (void)state;
    /* capacity 3, 1 token per 200 ms */
    for (int i = 2; i >= 0; i--) {
        ew = bucket(c, k, STORE_TAKE, 1, 3, 1, 200, false);
        assert_true(ew.allowed && ew.credit == (uint64_t)i);
        assert_true(ew.reset_ms > 0 && ew.reset_ms <= 200);
        assert_ttl(c, k, 600);
    }
    ew = bucket(c, k, STORE_TAKE, 1, 3, 1, 200, false);
    assert_true(!ew.allowed && ew.credit == 0);
    harness_pause_ms(250);
    ew = bucket(c, k, STORE_PEEK, 1, 3, 1, 200, false);
    assert_true(ew.allowed && ew.credit >= 1);
    /* Lowered capacity: never a negative count (run() checks). */
    ew = bucket(c, k, STORE_PEEK, 1, 1, 1, 200, false);
    assert_true(ew.credit <= 1);
    /* A full bucket needs no key; the key expires when full again. */
    harness_pause_ms(700);
    assert_int_equal(cmd_int(c, "EXISTS %s", k), 0);
    /* strict: a denied attempt pushes the refill clock back. */
    k = "divvy:{tb:b}";
    ew = bucket(c, k, STORE_TAKE, 1, 1, 1, 300, true);
    assert_true(ew.allowed && ew.credit == 0);
    harness_pause_ms(200);
    ew = bucket(c, k, STORE_TAKE, 1, 1, 1, 300, true);
    assert_true(!ew.allowed && ew.reset_ms > 250);
    assert_ttl(c, k, 300);
    harness_pause_ms(150);
    ew = bucket(c, k, STORE_TAKE, 1, 1, 1, 300, true);
    assert_false(ew.allowed);
    redisFree(c);
    redis_stop(rs);
}

static void test_redis_lua_sliding(void **state)
{
    struct redis_srv *rs;
    redisContext *c = connect_fresh(&rs);
    const char *k = "divvy:{sw:a}";
    struct store_verdict ew;

    (void)state;
    ew = sliding(c, k, STORE_TAKE, 2, 4, 300);
    assert_true(ew.allowed && ew.credit == 2 && ew.reset_ms > 0 && ew.reset_ms <= 300);
    assert_ttl(c, k, 600);
    ew = sliding(c, k, STORE_TAKE, 2, 4, 300);
    assert_true(ew.allowed && ew.credit == 0);
    ew = sliding(c, k, STORE_TAKE, 1, 4, 300);
    assert_true(!ew.allowed && ew.credit == 0);
    /* Next window: the previous one still weighs in, less and less. */
    harness_pause_ms(320);
    ew = sliding(c, k, STORE_PEEK, 1, 4, 300);
    assert_true(ew.credit < 4);
    /* Lowered limit: never negative. */
    ew = sliding(c, k, STORE_PEEK, 1, 1, 300);
    assert_true(!ew.allowed && ew.credit == 0);
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
    struct store_grant eg;
    struct store_verdict ew;

    (void)state;
    /* The first grant creates the window. */
    eg = lease(c, k, 500, 1000, 60000);
    assert_true(eg.granted == 62 && eg.remain == 938 && eg.ttl_ms == 60000 && eg.created);
    assert_ttl(c, k, 60000);
    total = (long long)eg.granted;
    /* Grants shrink with the remainder, down to 1, never past the limit. */
    for (int i = 0; i < 1000; i++) {
        eg = lease(c, k, 500, 1000, 60000);
        assert_false(eg.created);
        assert_true((long long)eg.granted <= (prev_remain / 16 > 1 ? prev_remain / 16 : 1));
        assert_int_equal((long long)eg.remain,
                         prev_remain - (long long)eg.granted - (i == 0 ? 62 : 0));
        total += (long long)eg.granted;
        prev_remain = (long long)eg.remain;
        if (eg.granted == 0)
            break;
        assert_ttl(c, k, 60000);
    }
    assert_int_equal(total, 1000);
    assert_int_equal(cmd_int(c, "GET %s", k), 1000);
    assert_ttl(c, k, 60000);
    /* Lowered limit: nothing granted, never negative. */
    eg = lease(c, k, 10, 500, 60000);
    assert_true(eg.granted == 0 && eg.remain == 0);
    /* want caps the grant; leases and direct takes share the count. */
    eg = lease(c, "divvy:{ls:b}", 3, 1000, 60000);
    assert_true(eg.granted == 3 && eg.remain == 997);
    ew = window(c, "divvy:{ls:b}", STORE_TAKE, 7, 1000, 60000);
    assert_true(ew.allowed && ew.credit == 990);
    redisFree(c);
    redis_stop(rs);
}

/* @a with the op and n of one request. */
static struct store_verdict_args with_item(const struct store_verdict_args *a, enum store_op op,
                                           uint64_t n)
{
    struct store_verdict_args one = *a;

    if (a->script == STORE_SCRIPT_BUCKET || a->script == STORE_SCRIPT_GCRA) {
        one.bucket.op = op;
        one.bucket.n = n;
    } else if (a->script == STORE_SCRIPT_SLIDING) {
        one.sliding.op = op;
        one.sliding.n = n;
    } else {
        one.window.op = op;
        one.window.n = n;
    }
    return one;
}

/*
 * Hot keys (docs/redis.md "Hot keys"): a batched call answers a list of
 * mixed requests (TAKE n, PEEK, DEBIT) as the plain calls one after the
 * other: a denied TAKE charges nothing, so a cheaper one after it fits; a
 * DEBIT goes into debt.  For each algorithm, the list runs twice (a key of
 * another type, then one with state and debt), plainly on one key and
 * batched on another: the same verdicts, the same state left, a TTL on
 * both.
 */
static void test_redis_lua_batched(void **state)
{
    static const struct {
        enum store_op op;
        uint64_t n;
    } list[] = {
        { STORE_TAKE, 4 }, { STORE_TAKE, 4 }, { STORE_TAKE, 4 }, { STORE_PEEK, 1 },
        { STORE_TAKE, 1 }, { STORE_TAKE, 2 }, { STORE_TAKE, 1 }, { STORE_PEEK, 5 },
        { STORE_DEBIT, 3 }, { STORE_TAKE, 1 }, { STORE_PEEK, 1 },
    };
    enum { N = sizeof(list) / sizeof(list[0]) };
    struct store_verdict_args algos[5] = {
        { .script = STORE_SCRIPT_WINDOW,
          .window = { .limit = 10, .reset_ms = 3600000 } },
        { .script = STORE_SCRIPT_BUCKET,
          .bucket = { .limit = 10, .refill_amount = 1, .refill_ms = 3600000, .strict = true } },
        { .script = STORE_SCRIPT_SLIDING,
          .sliding = { .limit = 10, .window_ms = 3600000 } },
        /* The continuous algorithms: their key is the time the bucket is
         * full again, which moves with Redis's clock: compared by presence. */
        { .script = STORE_SCRIPT_GCRA,
          .bucket = { .limit = 10, .refill_amount = 1, .refill_ms = 3600000 } },
        { .script = STORE_SCRIPT_GCRA,
          .bucket = { .limit = 10, .refill_amount = 1, .refill_ms = 3600000, .gcra = true } },
    };
    static const char *const state_of[5] = { "GET %s", "HGET %s d", "HGET %s c", "EXISTS %s",
                                              "EXISTS %s" };
    struct store_verdict plain[N], many[N];
    struct redis_srv *rs;
    redisContext *c = connect_fresh(&rs);

    (void)state;
    for (int a = 0; a < 5; a++) {
        char k1[32], k2[32];

        snprintf(k1, sizeof(k1), "divvy:{hot:plain%d}", a);
        snprintf(k2, sizeof(k2), "divvy:{hot:many%d}", a);
        /* Both start as keys of another type (the rule's algorithm changed). */
        cmd(c, a == 0 ? "HSET %s d 1" : "SET %s 1", k1);
        cmd(c, a == 0 ? "HSET %s d 1" : "SET %s 1", k2);
        for (int round = 0; round < 2; round++) {
            struct store_items items = { 0 };

            for (unsigned i = 0; i < N; i++) {
                struct store_verdict_args one = with_item(&algos[a], list[i].op, list[i].n);
                struct store_call call;

                store_script_verdict(&one, &call);
                plain[i] = run(c, &call, k1).verdict;
                assert_int_equal(store_items_add(&items, list[i].op, list[i].n), 0);
            }
            run_many(c, &algos[a], &items, k2, many);
            for (unsigned i = 0; i < N; i++) {
                long long dr = (long long)plain[i].reset_ms - (long long)many[i].reset_ms;

                if (plain[i].allowed != many[i].allowed || plain[i].credit != many[i].credit ||
                    dr > 1000 || dr < -1000)
                    fail_msg("%s round %d, request %u: plain %d %llu %llu, batched %d %llu %llu",
                             store_script_name(algos[a].script), round, i, plain[i].allowed,
                             (unsigned long long)plain[i].credit,
                             (unsigned long long)plain[i].reset_ms, many[i].allowed,
                             (unsigned long long)many[i].credit,
                             (unsigned long long)many[i].reset_ms);
            }
            assert_int_equal(cmd_int(c, state_of[a], k1), cmd_int(c, state_of[a], k2));
            assert_ttl(c, k1, 60 * 3600000LL);
            assert_ttl(c, k2, 60 * 3600000LL);
            /* Not vacuous: on a fresh key the third TAKE 4 is denied, the
             * TAKE 1 after it fits, and the DEBIT leaves a debt. */
            if (round == 0)
                assert_true(!plain[2].allowed && plain[4].allowed && !plain[9].allowed);
        }
    }
    /* At most STORE_ITEMS_MAX, of the widest n. */
    {
        struct store_items items = { 0 };

        for (unsigned i = 0; i < STORE_ITEMS_MAX; i++)
            assert_int_equal(store_items_add(&items, STORE_DEBIT, UINT64_MAX), 0);
        assert_int_equal(store_items_add(&items, STORE_TAKE, 1), -ENOBUFS);
    }
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

/* DEBIT (docs/redis.md "Scripts"): charged past the limit, at most 4
 * limits of debt, paid back as divvyd's table does.  Time passes by moving
 * the key's clock (PTTL, t). */
static void test_redis_lua_debit(void **state)
{
    struct redis_srv *rs;
    redisContext *c = connect_fresh(&rs);
    const char *k = "divvy:{d:w}";
    struct store_verdict ew;
    struct store_grant eg;

    (void)state;
    /* window 10 per 60 s: 4 taken, 23 debited: 17 over, two windows pay it. */
    ew = window(c, k, STORE_TAKE, 4, 10, 60000);
    assert_true(ew.allowed && ew.credit == 6);
    ew = window(c, k, STORE_DEBIT, 23, 10, 60000);
    assert_true(!ew.allowed && ew.credit == 0 && ew.reset_ms > 59000 && ew.reset_ms <= 60000);
    assert_int_equal(cmd_int(c, "GET %s", k), 27);
    {
        /* The debt's mark: a fraction no INCRBY-ing script writes. */
        redisReply *rep = redisCommand(c, "GET %s", k);

        assert_true(rep && rep->type == REDIS_REPLY_STRING);
        assert_string_equal(rep->str, "27.5");
        freeReplyObject(rep);
    }
    assert_true(cmd_int(c, "PTTL %s", k) > 179000);
    ew = window(c, k, STORE_TAKE, 1, 10, 60000);
    assert_true(!ew.allowed && ew.credit == 0);
    /* A lease gets nothing from a window in debt. */
    eg = lease(c, k, 5, 10, 60000);
    assert_true(eg.granted == 0 && eg.remain == 0 && eg.ttl_ms <= 60000);
    /* One window later: 17 used, still 7 over. */
    cmd(c, "PEXPIRE %s 119000", k);
    ew = window(c, k, STORE_PEEK, 1, 10, 60000);
    assert_true(!ew.allowed && ew.credit == 0 && ew.reset_ms > 58000 && ew.reset_ms <= 59000);
    /* Two windows later: 7 used, 3 left, taken (the key now holds 10). */
    cmd(c, "PEXPIRE %s 59000", k);
    ew = window(c, k, STORE_TAKE, 3, 10, 60000);
    assert_true(ew.allowed && ew.credit == 0 && ew.reset_ms <= 59000);
    assert_int_equal(cmd_int(c, "GET %s", k), 10);
    assert_ttl(c, k, 59000);
    /* A count above a limit since lowered (no mark) is no debt: nothing left
     * until the PTTL, as before debts existed. */
    cmd(c, "SET %s 15 PX 60000", "divvy:{d:low}");
    ew = window(c, "divvy:{d:low}", STORE_PEEK, 1, 10, 60000);
    assert_true(!ew.allowed && ew.credit == 0 && ew.reset_ms > 59000);
    eg = lease(c, "divvy:{d:low}", 5, 10, 60000);
    assert_true(eg.granted == 0 && eg.remain == 0 && eg.ttl_ms > 59000);
    /* A debit that fits answers allowed, on a fresh key too. */
    ew = window(c, "divvy:{d:w2}", STORE_DEBIT, 10, 10, 60000);
    assert_true(ew.allowed && ew.credit == 0 && ew.reset_ms == 60000);
    ew = window(c, "divvy:{d:w3}", STORE_DEBIT, 25, 10, 60000);
    assert_true(!ew.allowed && ew.credit == 0 && ew.reset_ms == 60000);
    assert_ttl(c, "divvy:{d:w3}", 180000);

    /* token bucket 5, 1 per second: tokens -4 after a debit of 7 on 3. */
    k = "divvy:{d:tb}";
    ew = bucket(c, k, STORE_TAKE, 2, 5, 1, 1000, false);
    assert_true(ew.allowed && ew.credit == 3);
    ew = bucket(c, k, STORE_DEBIT, 7, 5, 1, 1000, false);
    assert_true(!ew.allowed && ew.credit == 0);
    assert_int_equal(cmd_int(c, "HGET %s d", k), 9);
    assert_true(cmd_int(c, "PTTL %s", k) > 8000);
    /* 4.5 s later: 4 refills paid 4 of the debt: tokens 0. */
    cmd(c, "HINCRBY %s t -4500", k);
    ew = bucket(c, k, STORE_TAKE, 1, 5, 1, 1000, false);
    assert_true(!ew.allowed && ew.credit == 0);
    assert_int_equal(cmd_int(c, "HGET %s d", k), 5);
    cmd(c, "HINCRBY %s t -1000", k);
    ew = bucket(c, k, STORE_TAKE, 1, 5, 1, 1000, false);
    assert_true(ew.allowed && ew.credit == 0);

    /* sliding window: the excess is counted. */
    k = "divvy:{d:sw}";
    ew = sliding(c, k, STORE_DEBIT, 25, 10, 60000);
    assert_true(!ew.allowed && ew.credit == 0);
    assert_int_equal(cmd_int(c, "HGET %s c", k), 25);
    ew = sliding(c, k, STORE_TAKE, 1, 10, 60000);
    assert_false(ew.allowed);

    /* A debt is at most ALGO_DEBT_WINDOWS (4) limits, as in divvyd's table:
     * the key holds 50 of 10 used, paid back after 4 more windows. */
    k = "divvy:{d:big}";
    ew = window(c, k, STORE_DEBIT, 1000000000000ULL, 10, 60000);
    assert_true(!ew.allowed && ew.credit == 0 && ew.reset_ms == 60000);
    assert_int_equal(cmd_int(c, "GET %s", k), 50);
    assert_ttl(c, k, 300000);
    assert_true(cmd_int(c, "PTTL %s", k) > 299000);
    ew = window(c, k, STORE_DEBIT, 10, 10, 60000);
    assert_int_equal(cmd_int(c, "GET %s", k), 50);
    k = "divvy:{d:bigtb}";
    ew = bucket(c, k, STORE_DEBIT, 1000000000000ULL, 5, 1, 1000, false);
    assert_true(!ew.allowed && ew.credit == 0);
    assert_int_equal(cmd_int(c, "HGET %s d", k), 25);
    assert_true(cmd_int(c, "PTTL %s", k) <= 25000);
    k = "divvy:{d:bigsw}";
    ew = sliding(c, k, STORE_DEBIT, 1000000000000ULL, 10, 60000);
    assert_true(!ew.allowed && ew.credit == 0);
    assert_int_equal(cmd_int(c, "HGET %s c", k), 50);
    redisFree(c);
    redis_stop(rs);
}

/* The ad-hoc token bucket script (RL.*) answers as divvyd's own table does,
 * call for call, on a client clock (AT) with a random walk of parameters
 * and times: the same Smyte arithmetic, STRICT and the same "full is no
 * bucket". */
static void test_redis_lua_adhoc_tb(void **state)
{
    struct redis_srv *rs;
    redisContext *c = connect_fresh(&rs);
    struct adhoc_opts o = { .slots = 256 };
    struct adhoc_peer me = { .is_unix = true };
    struct adhoc *a = NULL;
    struct timespec ts;
    int64_t at, now, ahead = 0;
    unsigned seed = 19;

    (void)state;
    assert_int_equal(adhoc_new(&o, &a), 0);
    for (int i = 0; i < 2000; i++) {
        struct adhoc_tb p = { .max = 1 + rand_r(&seed) % 4, .refill = 1 + rand_r(&seed) % 2,
                              .refill_ms = 100 * (1 + rand_r(&seed) % 3),
                              .take = rand_r(&seed) % 3, .strict = rand_r(&seed) % 2 };
        struct store_adhoc_tb_args sa = { .max = p.max, .refill = p.refill,
                                          .refill_ms = p.refill_ms, .take = p.take,
                                          .strict = p.strict };
        const char *argv[4 + STORE_SCRIPT_ARGV_MAX];
        size_t lens[4 + STORE_SCRIPT_ARGV_MAX];
        char key[64], name[8];
        struct store_reply out;
        struct store_call call;
        redisReply *rep;
        int64_t before;
        int argc = 0;

        /* Few parameter sets, so buckets are met again. */
        p.max = 2 + (p.max & 1);
        p.refill = 1;
        p.refill_ms = 60000;
        sa.max = p.max;
        sa.refill = p.refill;
        sa.refill_ms = p.refill_ms;
        snprintf(name, sizeof(name), "k%d", rand_r(&seed) % 3);
        snprintf(key, sizeof(key), "divvy:adhoc:{%s}:S:%lld", name, (long long)p.max);
        /* Twelve hours behind, and faster than real time by 5 s a call at
         * least: a replay slower than the clock may find a bucket
         * forgotten early (docs/resp.md), and Redis expires its keys on
         * its own clock, when the script runs.  A stall between reading
         * the clock here and the script running that outgrew the lead
         * (50 ms once: CI under load) made the two forget at different
         * times; 5 s outlasts any stall this suite survives. */
        clock_gettime(CLOCK_REALTIME, &ts);
        now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        ahead += 5000 + rand_r(&seed) % 15000;
        at = now - 12 * 3600000 + ahead;
        sa.at_ms = at;
        store_script_adhoc_tb(&sa, &call);
        argv[argc++] = "EVAL";
        argv[argc++] = store_script_source(call.script);
        argv[argc++] = "1";
        argv[argc++] = key;
        for (unsigned k = 0; k < call.argc; k++)
            argv[argc++] = call.argv[k];
        for (int k = 0; k < argc; k++)
            lens[k] = strlen(argv[k]);
        rep = redisCommandArgv(c, argc, argv, lens);
        if (!rep || store_script_decode(call.script, rep, &out) < 0)
            fail_msg("EVAL adhoc_tb: %s", rep && rep->type == REDIS_REPLY_ERROR ? rep->str
                                                                               : "no answer");
        freeReplyObject(rep);
        assert_int_equal(adhoc_tb(a, &me, name, strlen(name), &p, at, now, &before), 0);
        if (out.tokens != before)
            fail_msg("call %d (%s max %lld take %lld strict %d at +%lld): Redis %lld, table "
                     "%lld", i, name, (long long)p.max, (long long)p.take, p.strict,
                     (long long)ahead, (long long)out.tokens,
                     (long long)before);
    }
    /* A key has a TTL (none outlives its bucket). */
    for (int k = 0; k < 3; k++) {
        char key[64];

        snprintf(key, sizeof(key), "divvy:adhoc:{k%d}:S:3", k);
        assert_true(cmd_int(c, "PTTL %s", key) != -1);
    }
    adhoc_free(a);
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
        cmocka_unit_test_setup_teardown(test_redis_lua_debit, harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_lua_batched, harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_lua_sha, harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_lua_adhoc_tb, harness_setup, redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_lua", tests, NULL, NULL);
}
