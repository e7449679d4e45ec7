/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/store.c and daemon/store_script.c without a Redis
 * (those are in tests/integration/test_redis_*.c): the SHA-1 that names
 * scripts for EVALSHA, the typed calls' ARGV and the replies they accept,
 * the key format and its escaping (docs/redis.md "Keys"), option checks
 * (Sentinel's and the cluster seeds'), a
 * store_conn that refuses at once while the breaker is open, and
 * Sentinel discovery when no sentinel answers (refused, or silent past the
 * timeout): requests wait for the master within their deadline, then fail;
 * the breaker reports its node ("unix:PATH", "sentinel:NAME") to on_breaker.
 * The module is daemon code: this binary links it from libdivvyd.a, as
 * divvyd does.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>
#include <cmocka.h>

#include "clock.h"
#include "daemon/log.h"
#include "daemon/addr.h"
#include "daemon/redis_async.h"
#include "daemon/sentinel.h"
#include "daemon/store.h"

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

/* Each typed call packs its fields at the ARGV positions its Lua reads
 * (store_script.c; tests/integration/test_redis_lua.c runs them in Redis). */
static void test_store_script_pack(void **state)
{
    const struct store_window_args wa = { .op = STORE_PEEK, .n = 2, .limit = -1,
                                          .reset_ms = 60000 };
    const struct store_bucket_args ba = { .op = STORE_TAKE, .n = 3, .limit = 10,
                                          .refill_amount = 4, .refill_ms = 500, .strict = true };
    const struct store_sliding_args sa = { .op = STORE_TAKE, .n = 1, .limit = 7,
                                           .window_ms = 9000 };
    const struct store_lease_args la = { .want = UINT64_MAX, .limit = INT64_MAX,
                                         .reset_ms = 1, .divisor = 16 };
    struct store_call c;

    (void)state;
    store_script_window(&wa, &c);
    assert_int_equal(c.script, STORE_SCRIPT_WINDOW);
    assert_int_equal(c.argc, 4);
    assert_string_equal(c.argv[0], "peek");
    assert_string_equal(c.argv[1], "2");
    assert_string_equal(c.argv[2], "-1");
    assert_string_equal(c.argv[3], "60000");
    store_script_bucket(&ba, &c);
    assert_int_equal(c.script, STORE_SCRIPT_BUCKET);
    assert_int_equal(c.argc, 6);
    assert_string_equal(c.argv[0], "take");
    assert_string_equal(c.argv[1], "3");
    assert_string_equal(c.argv[2], "10");
    assert_string_equal(c.argv[3], "4");
    assert_string_equal(c.argv[4], "500");
    assert_string_equal(c.argv[5], "1");
    store_script_sliding(&sa, &c);
    assert_int_equal(c.script, STORE_SCRIPT_SLIDING);
    assert_int_equal(c.argc, 4);
    assert_string_equal(c.argv[3], "9000");
    /* The widest numbers fit an argument. */
    store_script_lease(&la, &c);
    assert_int_equal(c.script, STORE_SCRIPT_LEASE);
    assert_int_equal(c.argc, 4);
    assert_string_equal(c.argv[0], "18446744073709551615");
    assert_string_equal(c.argv[1], "9223372036854775807");
    assert_string_equal(c.argv[2], "1");
    assert_string_equal(c.argv[3], "16");
}

/* @resp (one RESP reply) decoded as an answer to @script. */
static int decode(enum store_script script, const char *resp, struct store_reply *ret)
{
    redisReader *rd = redisReaderCreate();
    void *reply = NULL;
    int r;

    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &reply), REDIS_OK);
    assert_non_null(reply);
    r = store_script_decode(script, reply, ret);
    freeReplyObject(reply);
    redisReaderFree(rd);
    return r;
}

/* Only the shape each script returns is an answer (docs/redis.md "Scripts"). */
static void test_store_script_decode(void **state)
{
    struct store_reply rep;

    (void)state;
    assert_int_equal(decode(STORE_SCRIPT_WINDOW, "*3\r\n:1\r\n:4\r\n:59000\r\n", &rep), 0);
    assert_int_equal(rep.kind, STORE_REPLY_VERDICT);
    assert_true(rep.verdict.allowed);
    assert_int_equal(rep.verdict.credit, 4);
    assert_int_equal(rep.verdict.reset_ms, 59000);
    /* Negative credit or time reads as none. */
    assert_int_equal(decode(STORE_SCRIPT_BUCKET, "*3\r\n:0\r\n:-2\r\n:-1\r\n", &rep), 0);
    assert_false(rep.verdict.allowed);
    assert_int_equal(rep.verdict.credit, 0);
    assert_int_equal(rep.verdict.reset_ms, 0);
    assert_int_equal(decode(STORE_SCRIPT_LEASE, "*4\r\n:10\r\n:90\r\n:60000\r\n:1\r\n",
                            &rep), 0);
    assert_int_equal(rep.kind, STORE_REPLY_GRANT);
    assert_int_equal(rep.grant.granted, 10);
    assert_int_equal(rep.grant.remain, 90);
    assert_int_equal(rep.grant.ttl_ms, 60000);
    assert_true(rep.grant.created);
    /* A lease's answer to a verdict script, and the other way round: refused. */
    assert_int_equal(decode(STORE_SCRIPT_SLIDING, "*4\r\n:1\r\n:1\r\n:1\r\n:0\r\n", &rep),
                     -EPROTO);
    assert_int_equal(decode(STORE_SCRIPT_LEASE, "*3\r\n:1\r\n:1\r\n:1\r\n", &rep), -EPROTO);
    assert_int_equal(decode(STORE_SCRIPT_LEASE, "*4\r\n:-1\r\n:1\r\n:1\r\n:0\r\n", &rep),
                     -EPROTO);
    assert_int_equal(decode(STORE_SCRIPT_WINDOW, ":1\r\n", &rep), -EPROTO);
    assert_int_equal(decode(STORE_SCRIPT_WINDOW, "*3\r\n:1\r\n$1\r\n4\r\n:1\r\n", &rep),
                     -EPROTO);
    assert_int_equal(decode(STORE_SCRIPT_WINDOW, "$-1\r\n", &rep), -EPROTO);
    assert_int_equal(decode(STORE_N_SCRIPTS, "*3\r\n:1\r\n:1\r\n:1\r\n", &rep), -EPROTO);
}

/* The ad-hoc scripts' answers: one integer, and CL.THROTTLE's five. */
static void test_store_script_decode_adhoc(void **state)
{
    struct store_reply rep;
    struct store_call c;

    (void)state;
    assert_int_equal(decode(STORE_SCRIPT_ADHOC_TB, ":7\r\n", &rep), 0);
    assert_int_equal(rep.kind, STORE_REPLY_TOKENS);
    assert_int_equal(rep.tokens, 7);
    assert_int_equal(decode(STORE_SCRIPT_ADHOC_TB, ":-1\r\n", &rep), -EPROTO);
    assert_int_equal(decode(STORE_SCRIPT_ADHOC_TB, "*1\r\n:1\r\n", &rep), -EPROTO);
    assert_int_equal(decode(STORE_SCRIPT_ADHOC_GCRA,
                            "*5\r\n:0\r\n:16\r\n:15\r\n:-1000000000\r\n:2000000000\r\n",
                            &rep), 0);
    assert_int_equal(rep.kind, STORE_REPLY_GCRA);
    assert_false(rep.gcra.limited);
    assert_int_equal(rep.gcra.limit, 16);
    assert_int_equal(rep.gcra.remaining, 15);
    assert_int_equal(rep.gcra.retry_after_ns, -1000000000LL);
    assert_int_equal(rep.gcra.reset_after_ns, 2000000000LL);
    assert_int_equal(decode(STORE_SCRIPT_ADHOC_GCRA, "*5\r\n:2\r\n:1\r\n:0\r\n:0\r\n:0\r\n",
                            &rep), -EPROTO);
    assert_int_equal(decode(STORE_SCRIPT_ADHOC_GCRA, "*3\r\n:0\r\n:1\r\n:0\r\n", &rep),
                     -EPROTO);
    store_script_adhoc_tb(&(struct store_adhoc_tb_args){ .max = 2, .refill = 1,
                                                         .refill_ms = 60000, .take = 1,
                                                         .strict = true, .at_ms = -5 }, &c);
    assert_int_equal(c.script, STORE_SCRIPT_ADHOC_TB);
    assert_int_equal(c.argc, 6);
    assert_string_equal(c.argv[4], "1");
    assert_string_equal(c.argv[5], "-1");
    assert_string_equal(store_script_name(STORE_SCRIPT_ADHOC_GCRA), "adhoc_gcra");
}

/* A batched call (hot keys): the plain call's ARGV with "many" and the
 * count for op and n, the list last; its answer {k, then k verdicts}. */
static void test_store_script_batched(void **state)
{
    struct store_verdict_args a = { .script = STORE_SCRIPT_BUCKET,
                                    .bucket = { .op = STORE_TAKE, .n = 9, .limit = 10,
                                                .refill_amount = 4, .refill_ms = 500,
                                                .strict = true } };
    struct store_verdict_args b = a;
    struct store_items items = { 0 };
    struct store_verdict v;
    struct store_reply rep;
    struct store_call c;
    redisReader *rd;
    void *reply = NULL;
    static const char many[] = "*7\r\n:2\r\n:1\r\n:6\r\n:0\r\n:0\r\n:-1\r\n:9\r\n";

    (void)state;
    assert_int_equal(store_items_add(&items, STORE_TAKE, 4), 0);
    assert_int_equal(store_items_add(&items, STORE_PEEK, 1), 0);
    assert_int_equal(store_items_add(&items, STORE_DEBIT, 18446744073709551615ULL), 0);
    store_script_verdicts(&a, &items, &c);
    assert_int_equal(c.script, STORE_SCRIPT_BUCKET_MANY);
    assert_int_equal(c.argc, 6);
    assert_string_equal(c.argv[0], "many");
    assert_string_equal(c.argv[1], "3");
    assert_string_equal(c.argv[2], "10");
    assert_string_equal(c.argv[5], "1");
    assert_int_equal(c.list_len, strlen("t4 p1 d18446744073709551615"));
    assert_memory_equal(c.list, "t4 p1 d18446744073709551615", c.list_len);
    /* The plain call carries no list; op and n do not keep requests apart. */
    store_script_verdict(&a, &c);
    assert_int_equal(c.script, STORE_SCRIPT_BUCKET);
    assert_null(c.list);
    b.bucket.op = STORE_PEEK;
    b.bucket.n = 1;
    assert_true(store_script_same(&a, &b));
    b.bucket.strict = false;
    assert_false(store_script_same(&a, &b));
    b = a;
    b.script = STORE_SCRIPT_WINDOW;
    assert_false(store_script_same(&a, &b));

    rd = redisReaderCreate();
    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, many, strlen(many)), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &reply), REDIS_OK);
    assert_int_equal(store_script_decode(STORE_SCRIPT_WINDOW_MANY, reply, &rep), 0);
    assert_int_equal(rep.kind, STORE_REPLY_VERDICTS);
    assert_int_equal(rep.verdicts.n, 2);
    store_verdicts_get(&rep.verdicts, 0, &v);
    assert_true(v.allowed && v.credit == 6 && v.reset_ms == 0);
    store_verdicts_get(&rep.verdicts, 1, &v);
    assert_true(!v.allowed && v.credit == 0 && v.reset_ms == 9);
    /* A plain answer is no batch's, nor a batch's a plain one. */
    assert_int_equal(store_script_decode(STORE_SCRIPT_WINDOW, reply, &rep), -EPROTO);
    freeReplyObject(reply);
    redisReaderFree(rd);
    assert_int_equal(decode(STORE_SCRIPT_SLIDING_MANY, "*3\r\n:1\r\n:1\r\n:1\r\n", &rep),
                     -EPROTO);
    /* The count must match the verdicts that follow; none is no answer. */
    assert_int_equal(decode(STORE_SCRIPT_WINDOW_MANY, "*4\r\n:2\r\n:1\r\n:1\r\n:1\r\n",
                            &rep), -EPROTO);
    assert_int_equal(decode(STORE_SCRIPT_WINDOW_MANY, "*1\r\n:0\r\n", &rep), -EPROTO);
    assert_int_equal(decode(STORE_SCRIPT_WINDOW_MANY, "*4\r\n:1\r\n:1\r\n$1\r\n1\r\n:1\r\n",
                            &rep), -EPROTO);
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

/* An ad-hoc bucket's key: out of the rule keys' namespace, the name the hash tag. */
static void test_store_adhoc_key(void **state)
{
    struct store *st = new_store("p:");
    int64_t params[3] = { 15, 30, 60 };
    char buf[256];
    int n;

    (void)state;
    n = store_adhoc_key(st, 'G', "user123", 7, params, 3, buf, sizeof(buf));
    assert_int_equal(n, (int)strlen("p:divvy:adhoc:{user123}:G:15:30:60"));
    assert_memory_equal(buf, "p:divvy:adhoc:{user123}:G:15:30:60", (size_t)n);
    n = store_adhoc_key(st, 'S', "{a}:b%\0", 7, params, 1, buf, sizeof(buf));
    assert_memory_equal(buf, "p:divvy:adhoc:{%7Ba%7D%3Ab%25\0}:S:15", (size_t)n);
    assert_int_equal(store_adhoc_key(st, 'S', "abc", 3, params, 3, buf, 24), -ENOBUFS);
    assert_int_equal(store_adhoc_key(st, 'S', "abc", 3, params, 3, buf, 10), -ENOBUFS);
    store_free(st);
}

/* COUNTERS' SCAN pattern (globs escaped) and the actor read back from a key. */
static void test_store_key_pattern_and_actor(void **state)
{
    struct store *st = new_store("t*[x]\\:");
    char buf[256], key[256];
    int n, k;

    (void)state;
    n = store_key_pattern(st, NULL, buf, sizeof(buf));
    assert_int_equal(n, (int)strlen("t\\*\\[x\\]\\\\:divvy:{*"));
    assert_memory_equal(buf, "t\\*\\[x\\]\\\\:divvy:{*", (size_t)n);
    n = store_key_pattern(st, "login", buf, sizeof(buf));
    assert_memory_equal(buf, "t\\*\\[x\\]\\\\:divvy:{login:*", (size_t)n);
    assert_int_equal(store_key_pattern(st, "login", buf, 12), -ENOBUFS);
    /* store_key() and store_key_actor() are inverses. */
    k = store_key(st, "login", "a:{b}%c", 7, key, sizeof(key));
    assert_true(k > 0);
    n = store_key_actor(st, "login", key, (size_t)k, buf, sizeof(buf));
    assert_int_equal(n, 7);
    assert_memory_equal(buf, "a:{b}%c", 7);
    assert_int_equal(store_key_actor(st, "logon", key, (size_t)k, buf, sizeof(buf)), -EINVAL);
    assert_int_equal(store_key_actor(st, "login", key, (size_t)k - 1, buf, sizeof(buf)),
                     -EINVAL);
    assert_int_equal(store_key_actor(st, "login", key, (size_t)k, buf, 3), -ENOBUFS);
    assert_int_equal(store_key_actor(st, "login", "t*[x]\\:divvy:{login:%4}", 23, buf,
                                     sizeof(buf)), -EINVAL);
    assert_string_equal(store_key_prefix(st), "t*[x]\\:");
    store_free(st);
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

/* What on_breaker() reported. */
struct breaker_seen {
    int calls;
    char node[64];
    bool open;
};

static void on_breaker(void *arg, const char *node, bool open)
{
    struct breaker_seen *b = arg;

    b->calls++;
    snprintf(b->node, sizeof(b->node), "%s", node);
    b->open = open;
}

/* Redis absent: the first request trips the breaker (reported once, with
 * the node); later ones are refused at once, without a callback. */
static void test_store_refuses_while_open(void **state)
{
    struct breaker_seen seen = { 0 };
    struct store_opts o = { .unix_socket = "/nonexistent/redis.sock", .timeout_ms = 100,
                            .on_breaker = on_breaker, .arg = &seen };
    struct event_base *base = event_base_new();
    struct store_conn *sc = NULL;
    struct store *st = NULL;
    struct store_stats s;
    const struct store_verdict_args args = {
        .script = STORE_SCRIPT_WINDOW,
        .window = { .op = STORE_TAKE, .n = 1, .limit = 10, .reset_ms = 1000 },
    };

    (void)state;
    assert_non_null(base);
    assert_int_equal(store_new(&o, &st), 0);
    assert_int_equal(store_conn_new(st, base, &sc), 0);
    assert_false(store_breaker_open(st));
    assert_int_equal(store_verdict(sc, "k", 1, &args, clock_now_ms() + 100, cb_never, NULL),
                     -ENOTCONN);
    assert_true(store_breaker_open(st));
    assert_int_equal(store_verdict(sc, "k", 1, &args, clock_now_ms() + 100, cb_never, NULL),
                     -ENOTCONN);
    assert_int_equal(store_del(sc, "k", 1, clock_now_ms() - 1, cb_never, NULL), -ETIMEDOUT);
    store_stats(st, &s);
    assert_true(s.wanted);
    assert_int_equal(s.trips, 1);
    assert_int_equal(s.conns_up, 0);
    assert_int_equal(seen.calls, 1);
    assert_string_equal(seen.node, "unix:/nonexistent/redis.sock");
    assert_true(seen.open);
    store_conn_free(sc);
    store_free(st);
    event_base_free(base);
}

static void test_store_sentinel_options(void **state)
{
    const char *good[] = { "127.0.0.1:26379", "[::1]:26379", "unix:/run/s.sock", "h.example:1" };
    const char *bad[] = { "127.0.0.1", "::1:26379", "127.0.0.1:0", "127.0.0.1:99999",
                          "unix:rel.sock", ":26379", "[::1]26379", "1.2.3.4:x" };
    const char *many[SENTINEL_MAX + 1];
    struct store_opts o = { .timeout_ms = 100, .sentinels = good, .n_sentinels = 4,
                            .master_name = "mymaster" };
    struct store *st = NULL;
    char buf[128];

    (void)state;
    /* No host, port or socket needed: the sentinels give the master. */
    assert_int_equal(store_new(&o, &st), 0);
    assert_string_equal(store_where(st, buf, sizeof(buf)), "master mymaster");
    store_free(st);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        o.sentinels = &bad[i];
        o.n_sentinels = 1;
        st = NULL;
        if (store_new(&o, &st) != -EINVAL)
            fail_msg("sentinel \"%s\" accepted", bad[i]);
    }
    o.sentinels = good;
    o.master_name = NULL;
    assert_int_equal(store_new(&o, &st), -EINVAL);
    for (int i = 0; i <= SENTINEL_MAX; i++)
        many[i] = "127.0.0.1:26379";
    o.master_name = "m";
    o.sentinels = many;
    o.n_sentinels = SENTINEL_MAX + 1;
    assert_int_equal(store_new(&o, &st), -EINVAL);
}

/* Cluster seeds: checked at store_new(); no host needed; not with Sentinel. */
static void test_store_cluster_options(void **state)
{
    static const char *const good[] = { "127.0.0.1:7000", "[::1]:7001", "redis-a:7002" };
    static const char *const bad[] = { "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000",
                                       "unix:/run/r.sock", ":7000", "[::1]7000", "h:x" };
    struct store_opts o = { .timeout_ms = 100, .cluster_nodes = good, .n_cluster_nodes = 3 };
    struct store_stats stats;
    struct store *st = NULL;
    char buf[128];

    (void)state;
    assert_int_equal(store_new(&o, &st), 0);
    assert_string_equal(store_address(st, buf, sizeof(buf)), "cluster:127.0.0.1:7000");
    store_stats(st, &stats);
    assert_int_equal(stats.nodes_known, 0);
    assert_false(store_breaker_open(st));
    store_free(st);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        o.cluster_nodes = &bad[i];
        o.n_cluster_nodes = 1;
        st = NULL;
        if (store_new(&o, &st) != -EINVAL)
            fail_msg("cluster seed \"%s\" accepted", bad[i]);
    }
    o.cluster_nodes = good;
    o.sentinels = good;
    o.n_sentinels = 1;
    o.master_name = "m";
    assert_int_equal(store_new(&o, &st), -EINVAL);
}

/* A loopback TCP socket: bound only (connects are refused) or listening
 * (connects succeed, nothing is ever answered).  Its port in *ret_port. */
static int loopback_socket(bool listening, unsigned *ret_port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    if (listening)
        assert_int_equal(listen(fd, 8), 0);
    *ret_port = ntohs(sa.sin_port);
    return fd;
}

struct got {
    int calls;
    bool null_reply;
};

static void cb_got(void *arg, const struct store_reply *rep)
{
    struct got *g = arg;

    g->calls++;
    g->null_reply = rep == NULL;
}

/* Runs @base until @g has its callback or 5 s pass; returns the ms taken. */
static uint64_t run_until(struct event_base *base, struct got *g)
{
    uint64_t t0 = clock_now_ms();

    while (g->calls == 0 && clock_now_ms() - t0 < 5000)
        event_base_loop(base, EVLOOP_ONCE);
    return clock_now_ms() - t0;
}

/*
 * No sentinel answers: one path is missing, one port refuses.  The request
 * waits (store_verdict() accepts it, discovery is under way), then fails with
 * the breaker open; the next one is refused at once.
 */
static void test_store_sentinel_none_answers(void **state)
{
    unsigned port;
    int fd = loopback_socket(false, &port);
    char refused[32];
    const char *sentinels[2] = { "unix:/nonexistent/sentinel.sock", refused };
    struct breaker_seen seen = { 0 };
    struct store_opts o = { .timeout_ms = 1000, .sentinels = sentinels, .n_sentinels = 2,
                            .master_name = "mymaster", .on_breaker = on_breaker,
                            .arg = &seen };
    struct event_base *base = event_base_new();
    struct store_conn *sc = NULL;
    struct store *st = NULL;
    struct store_stats s;
    struct got g = { 0 };
    const struct store_verdict_args args = {
        .script = STORE_SCRIPT_WINDOW,
        .window = { .op = STORE_TAKE, .n = 1, .limit = 10, .reset_ms = 1000 },
    };

    (void)state;
    snprintf(refused, sizeof(refused), "127.0.0.1:%u", port);
    assert_non_null(base);
    assert_int_equal(store_new(&o, &st), 0);
    store_want(st);
    assert_int_equal(store_conn_new(st, base, &sc), 0);
    assert_int_equal(store_verdict(sc, "k", 1, &args, clock_now_ms() + 1000, cb_got, &g), 0);
    assert_int_equal(g.calls, 0);       /* never from inside store_verdict() */
    run_until(base, &g);
    assert_int_equal(g.calls, 1);
    assert_true(g.null_reply);
    assert_true(store_breaker_open(st));
    assert_int_equal(store_verdict(sc, "k", 1, &args, clock_now_ms() + 1000, cb_never, NULL),
                     -ENOTCONN);
    store_stats(st, &s);
    assert_int_equal(s.trips, 1);
    assert_int_equal(s.errors, 1);
    assert_int_equal(s.conns_up, 0);
    /* One node whichever server is master: the name Sentinel knows it by. */
    assert_int_equal(seen.calls, 1);
    assert_string_equal(seen.node, "sentinel:mymaster");
    store_conn_free(sc);
    store_free(st);
    event_base_free(base);
    close(fd);
}

/* A sentinel that accepts and never answers: the waiting request fails at
 * its own deadline, not later. The deadline (100 ms) is well before the
 * sentinel's step timeout (timeout_ms, 300 ms) so that which of the two
 * fires first is not a race: libevent runs expired timers earliest first
 * even when the loop itself was late. */
static void test_store_sentinel_silent(void **state)
{
    unsigned port;
    int fd = loopback_socket(true, &port);
    char silent[32];
    const char *sentinels[1] = { silent };
    struct store_opts o = { .timeout_ms = 300, .sentinels = sentinels, .n_sentinels = 1,
                            .master_name = "mymaster", .sentinel_password = "pw" };
    struct event_base *base = event_base_new();
    struct store_conn *sc = NULL;
    struct store *st = NULL;
    struct store_stats s;
    struct got g = { 0 };
    const struct store_verdict_args args = {
        .script = STORE_SCRIPT_WINDOW,
        .window = { .op = STORE_TAKE, .n = 1, .limit = 10, .reset_ms = 1000 },
    };
    uint64_t t0, dt;

    (void)state;
    snprintf(silent, sizeof(silent), "127.0.0.1:%u", port);
    assert_non_null(base);
    assert_int_equal(store_new(&o, &st), 0);
    assert_int_equal(store_conn_new(st, base, &sc), 0);
    t0 = clock_now_ms();
    assert_int_equal(store_verdict(sc, "k", 1, &args, t0 + 100, cb_got, &g), 0);
    run_until(base, &g);
    dt = clock_now_ms() - t0;
    assert_int_equal(g.calls, 1);
    assert_true(g.null_reply);
    assert_true(dt >= 100 && dt < 1000);
    assert_true(store_breaker_open(st));
    store_stats(st, &s);
    assert_int_equal(s.timeouts, 1);
    /* Freed while the sentinel is still being asked: nothing leaks or calls back. */
    store_conn_free(sc);
    store_free(st);
    event_base_free(base);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_sha1_vectors),
        cmocka_unit_test(test_store_scripts),
        cmocka_unit_test(test_store_script_pack),
        cmocka_unit_test(test_store_script_decode),
        cmocka_unit_test(test_store_script_decode_adhoc),
        cmocka_unit_test(test_store_adhoc_key),
        cmocka_unit_test(test_store_script_batched),
        cmocka_unit_test(test_store_key_format),
        cmocka_unit_test(test_store_key_pattern_and_actor),
        cmocka_unit_test(test_store_options),
        cmocka_unit_test(test_store_refuses_while_open),
        cmocka_unit_test(test_store_sentinel_options),
        cmocka_unit_test(test_store_cluster_options),
        cmocka_unit_test(test_store_sentinel_none_answers),
        cmocka_unit_test(test_store_sentinel_silent),
    };

    log_init(LOG_TARGET_STDERR, false);
    return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
