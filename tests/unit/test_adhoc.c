/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/adhoc.c: Smyte's token bucket as its post and
 * server define it (refills in whole refill times, check and take, STRICT,
 * client timestamps), redis-cell's GCRA on redis-cell's own test table (to
 * the nanosecond, from a fixed start), and the table: parameters are part
 * of a bucket's name, idle buckets are dropped, and who may hold how much
 * (docs/resp.md "Shares, reserve and eviction"): a peer at its share gives
 * up its own least recently used bucket, a full pool takes from the peer
 * holding the most, privileged peers have a reserve and are never taken
 * from; with the buckets in Redis (adhoc_claim(), adhoc_no_evict()) a peer
 * at its share is refused and no slot goes before it expires.  Tables
 * under 512 slots have one shard, so the counts are exact.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/adhoc.h"

#define S  1000000000LL
#define MS 1000000LL

static void test_adhoc_tb_transcript(void **state)
{
    struct adhoc_tb p = { .max = 2, .refill = 2, .refill_ms = 60000, .take = 1 };
    struct adhoc_tb_state st = { 0 };
    int64_t idle;

    (void)state;
    /* The post's redis-cli transcript: 2, 1, 0. */
    assert_int_equal(adhoc_tb_step(&p, false, 1000, &st, &idle), 2);
    assert_int_equal(st.amount, 1);
    assert_int_equal(adhoc_tb_step(&p, true, 1001, &st, &idle), 1);
    assert_int_equal(adhoc_tb_step(&p, true, 1002, &st, &idle), 0);
    assert_int_equal(st.amount, 0);
    assert_int_equal(idle, 61000);
    /* One refill time later the bucket is full again (refill = max). */
    assert_int_equal(adhoc_tb_step(&p, true, 60999, &st, &idle), 0);
    assert_int_equal(adhoc_tb_step(&p, true, 61000, &st, &idle), 2);
}

/* A bucket kept past the moment it filled up is the same state as one
 * forgotten then: whether divvyd's table or Redis dropped it first never
 * shows in a later answer. */
static void test_adhoc_tb_full_is_none(void **state)
{
    struct adhoc_tb p = { .max = 3, .refill = 1, .refill_ms = 200, .take = 2 };
    struct adhoc_tb_state kept = { 0 }, fresh = { 0 };
    int64_t idle, idle2;

    (void)state;
    assert_int_equal(adhoc_tb_step(&p, false, 1000, &kept, &idle), 3);
    /* 1150 ms later two refills (of 1 per 200 ms) filled it at +1400. */
    assert_int_equal(adhoc_tb_step(&p, true, 2150, &kept, &idle), 3);
    assert_int_equal(adhoc_tb_step(&p, false, 2150, &fresh, &idle2), 3);
    assert_int_equal(kept.amount, fresh.amount);
    assert_int_equal(kept.refilled_ms, fresh.refilled_ms);
    assert_int_equal(idle, idle2);
    /* And so the next answers agree. */
    assert_int_equal(adhoc_tb_step(&p, true, 2300, &kept, &idle),
                     adhoc_tb_step(&p, true, 2300, &fresh, &idle2));
}

static void test_adhoc_tb_refill_take(void **state)
{
    struct adhoc_tb p = { .max = 10, .refill = 1, .refill_ms = 3600000, .take = 4 };
    struct adhoc_tb_state st = { 0 };
    int64_t idle;

    (void)state;
    assert_int_equal(adhoc_tb_step(&p, false, 0, &st, &idle), 10);
    assert_int_equal(adhoc_tb_step(&p, true, 0, &st, &idle), 6);
    assert_int_equal(adhoc_tb_step(&p, true, 0, &st, &idle), 2);
    /* Not enough: nothing taken. */
    assert_int_equal(adhoc_tb_step(&p, true, 0, &st, &idle), 2);
    assert_int_equal(st.amount, 2);
    /* Two refills of one token after two hours (and a bit). */
    p.take = 0;
    assert_int_equal(adhoc_tb_step(&p, true, 2 * 3600000 + 5, &st, &idle), 4);
    assert_int_equal(st.refilled_ms, 2 * 3600000);
    /* Never above max, however long. */
    assert_int_equal(adhoc_tb_step(&p, true, INT64_MAX / 2, &st, &idle), 10);
    /* The largest parameters RL.REDUCE accepts: no overflow (UBSan checks). */
    p = (struct adhoc_tb){ .max = 1000000000000000LL, .refill = 1,
                           .refill_ms = 2147483647LL * 1000, .take = 1000000000000000LL };
    assert_int_equal(adhoc_tb_step(&p, false, 100000000000000LL, &st, &idle),
                     1000000000000000LL);
    assert_int_equal(st.amount, 0);
    assert_int_equal(idle, INT64_MAX);
    assert_int_equal(adhoc_tb_step(&p, true, 100000000000000LL * 2, &st, &idle), 46);
}

static void test_adhoc_tb_strict(void **state)
{
    struct adhoc_tb p = { .max = 1, .refill = 1, .refill_ms = 1000, .take = 1,
                          .strict = true };
    struct adhoc_tb_state st = { 0 };
    int64_t idle;

    (void)state;
    assert_int_equal(adhoc_tb_step(&p, false, 0, &st, &idle), 1);
    /* Empty: each call pushes the refill clock on, so traffic every 900 ms
     * never gets a token; without STRICT the second would. */
    assert_int_equal(adhoc_tb_step(&p, true, 900, &st, &idle), 0);
    assert_int_equal(adhoc_tb_step(&p, true, 1800, &st, &idle), 0);
    assert_int_equal(st.refilled_ms, 1800);
    assert_int_equal(adhoc_tb_step(&p, true, 2800, &st, &idle), 1);
    p.strict = false;
    st = (struct adhoc_tb_state){ 0 };
    assert_int_equal(adhoc_tb_step(&p, false, 0, &st, &idle), 1);
    assert_int_equal(adhoc_tb_step(&p, true, 900, &st, &idle), 0);
    assert_int_equal(adhoc_tb_step(&p, true, 1800, &st, &idle), 1);
}

/* redis-cell's it_rate_limits: limit 5 (max_burst 4), 1 per second. */
static void test_adhoc_gcra_cell_cases(void **state)
{
    static const struct {
        int64_t at_ms, volume, remaining, reset_ns, retry_ns;
        bool limited;
    } cases[] = {
        { 0, 6, 5, 0, -S, true },
        { 0, 1, 4, 1 * S, -S, false },
        { 0, 1, 3, 2 * S, -S, false },
        { 0, 1, 2, 3 * S, -S, false },
        { 0, 1, 1, 4 * S, -S, false },
        { 0, 1, 0, 5 * S, -S, false },
        { 0, 1, 0, 5 * S, 1 * S, true },
        { 3000, 1, 2, 3000 * MS, -S, false },
        { 3100, 1, 1, 3900 * MS, -S, false },
        { 4000, 1, 1, 4000 * MS, -S, false },
        { 8000, 1, 4, 1000 * MS, -S, false },
        { 9500, 1, 4, 1000 * MS, -S, false },
        { 9500, 0, 4, 1 * S, -S, false },
        { 9500, 2, 2, 3 * S, -S, false },
        { 9500, 5, 2, 3 * S, 3 * S, true },
    };
    int64_t start = 1700000000LL * S, tat = 0, idle;
    bool exists = false;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct adhoc_gcra p = { .max_burst = 4, .count = 1, .period_s = 1,
                                .quantity = cases[i].volume };
        struct adhoc_gcra_result res;

        assert_int_equal(adhoc_gcra_check(&p), 0);
        adhoc_gcra_step(&p, exists, start + cases[i].at_ms * MS, &tat, &res, &idle);
        if (!res.limited || exists)
            exists = true;
        if (res.limited != cases[i].limited || res.limit != 5 ||
            res.remaining != cases[i].remaining || res.reset_after_ns != cases[i].reset_ns ||
            res.retry_after_ns != cases[i].retry_ns)
            fail_msg("case %zu: limited %d remaining %lld reset %lld retry %lld", i,
                     res.limited, (long long)res.remaining, (long long)res.reset_after_ns,
                     (long long)res.retry_after_ns);
    }
}

static void test_adhoc_gcra_check(void **state)
{
    (void)state;
    assert_int_equal(adhoc_gcra_check(&(struct adhoc_gcra){ 1, 0, 1, 1 }), -ERANGE);
    assert_int_equal(adhoc_gcra_check(&(struct adhoc_gcra){ 1, 1, 0, 1 }), -ERANGE);
    assert_int_equal(adhoc_gcra_check(&(struct adhoc_gcra){ 1000000000000000LL, 1,
                                                            1000000000LL, 1 }), -ERANGE);
    assert_int_equal(adhoc_gcra_check(&(struct adhoc_gcra){ 15, 30, 60, 1 }), 0);
}

/* A TCP peer at 10.0.0.@n, a Unix peer @uid (privileged or not). */
static struct adhoc_peer tcp_peer(unsigned n)
{
    struct adhoc_peer p = { .key = { 10, 0, (uint8_t)(n >> 8), (uint8_t)n } };

    return p;
}

static struct adhoc_peer unix_peer(unsigned uid, bool privileged)
{
    struct adhoc_peer p = { .is_unix = true, .privileged = privileged };

    memcpy(p.key, &uid, sizeof(uid));
    return p;
}

static struct adhoc *table(uint32_t slots, uint32_t reserved, uint32_t per_peer)
{
    struct adhoc_opts o = { .slots = slots, .reserved = reserved, .per_peer = per_peer };
    struct adhoc *a = NULL;

    assert_int_equal(adhoc_new(&o, &a), 0);
    return a;
}

/* RL.REDUCE "<prefix><i>" 5 3600 by @who: the tokens before, -1 when busy. */
static int64_t reduce(struct adhoc *a, const struct adhoc_peer *who, const char *prefix, int i)
{
    struct adhoc_tb p = { .max = 5, .refill = 5, .refill_ms = 3600000, .take = 1 };
    char key[32];
    int64_t before;
    int n = snprintf(key, sizeof(key), "%s%d", prefix, i);

    if (adhoc_tb(a, who, key, (size_t)n, &p, 1000, 1000, &before) < 0)
        return -1;
    return before;
}

/* Whether bucket "<prefix><i>" is held: RL.GET (which stores nothing) sees
 * a token taken. */
static bool held(struct adhoc *a, const char *prefix, int i)
{
    struct adhoc_tb p = { .max = 5, .refill = 5, .refill_ms = 3600000, .take = 0 };
    struct adhoc_peer anyone = tcp_peer(999);
    char key[32];
    int64_t before;
    int n = snprintf(key, sizeof(key), "%s%d", prefix, i);

    assert_int_equal(adhoc_tb(a, &anyone, key, (size_t)n, &p, 1000, 1000, &before), 0);
    return before < 5;
}

static int n_held(struct adhoc *a, const char *prefix, int n)
{
    int k = 0;

    for (int i = 0; i < n; i++)
        k += held(a, prefix, i);
    return k;
}

static struct adhoc_stats stats(struct adhoc *a)
{
    struct adhoc_stats st;

    adhoc_stats(a, &st);
    return st;
}

/* Sizes: the defaults, one shard below 512 slots, the reserve cut to leave
 * unprivileged peers room, the share cut to what they may hold. */
static void test_adhoc_table_sizes(void **state)
{
    struct adhoc_opts o = { .slots = 65536 };
    struct adhoc_stats st;
    struct adhoc *a = NULL;

    (void)state;
    assert_int_equal(adhoc_new(&(struct adhoc_opts){ .slots = 0 }, &a), -EINVAL);
    assert_int_equal(adhoc_new(&o, &a), 0);
    adhoc_stats(a, &st);
    assert_int_equal(st.slots, 65536);
    assert_int_equal(st.capacity, 65536);
    assert_int_equal(st.reserved, 4096);
    assert_int_equal(st.per_peer, 7680);
    assert_int_equal(st.used + st.peers + st.evictions + st.busy, 0);
    adhoc_free(a);
    a = table(64, 0, 0);
    adhoc_stats(a, &st);
    assert_int_equal(st.slots, 64);
    assert_int_equal(st.reserved, 4);
    assert_int_equal(st.per_peer, 7);
    adhoc_free(a);
    o = (struct adhoc_opts){ .slots = 100, .max_buckets = 40, .reserved = 500, .per_peer = 500 };
    assert_int_equal(adhoc_new(&o, &a), 0);
    adhoc_stats(a, &st);
    assert_int_equal(st.capacity, 40);
    assert_int_equal(st.reserved, 39);
    assert_int_equal(st.per_peer, 1);
    adhoc_free(a);
}

/* A bucket is named by its key and parameters; RL.GET and a refused take
 * on a new bucket store nothing; an idle bucket is dropped when met. */
static void test_adhoc_table_names(void **state)
{
    struct adhoc_tb p = { .max = 2, .refill = 2, .refill_ms = 60000, .take = 1 };
    struct adhoc_peer me = unix_peer(1000, false);
    struct adhoc *a = table(64, 0, 0);
    int64_t before;

    (void)state;
    assert_int_equal(adhoc_tb(a, &me, "k", 1, &p, 1000, 1000, &before), 0);
    assert_int_equal(before, 2);
    assert_int_equal(adhoc_tb(a, &me, "k", 1, &p, 1000, 1000, &before), 0);
    assert_int_equal(before, 1);
    p.max = 3;
    assert_int_equal(adhoc_tb(a, &me, "k", 1, &p, 1000, 1000, &before), 0);
    assert_int_equal(before, 3);
    assert_int_equal(stats(a).used, 2);
    p.take = 0;
    assert_int_equal(adhoc_tb(a, &me, "new", 3, &p, 1000, 1000, &before), 0);
    p.take = 4;
    assert_int_equal(adhoc_tb(a, &me, "new", 3, &p, 1000, 1000, &before), 0);
    assert_int_equal(before, 3);
    assert_int_equal(stats(a).used, 2);
    /* Full again two refill times later: both are dropped when met, and
     * that is no eviction. */
    p.take = 1;
    assert_int_equal(adhoc_tb(a, &me, "k", 1, &p, 200000, 200000, &before), 0);
    assert_int_equal(before, 3);
    p.max = 2;
    p.take = 0;
    assert_int_equal(adhoc_tb(a, &me, "k", 1, &p, 200000, 200000, &before), 0);
    assert_int_equal(before, 2);
    assert_int_equal(stats(a).used, 1);
    assert_int_equal(stats(a).evictions, 0);
    adhoc_free(a);
}

/* One peer, however many keys: never busy, it holds its share, and each new
 * key past it takes the slot of its own least recently used bucket. */
static void test_adhoc_table_share_own_lru(void **state)
{
    struct adhoc_peer me = unix_peer(64401, false), other = unix_peer(64402, false);
    struct adhoc *a = table(64, 8, 16);
    struct adhoc_stats st;

    (void)state;
    for (int i = 0; i < 100; i++)
        assert_int_equal(reduce(a, &me, "a", i), 5);
    st = stats(a);
    assert_int_equal(st.used, 16);
    assert_int_equal(st.evictions, 84);
    assert_int_equal(st.busy, 0);
    assert_int_equal(st.peers, 1);
    for (int i = 0; i < 100; i++)
        assert_int_equal(held(a, "a", i), i >= 84);
    /* Used again, a84 is no longer the least recent: a85 goes. */
    assert_int_equal(reduce(a, &me, "a", 84), 4);
    assert_int_equal(reduce(a, &me, "a", 100), 5);
    assert_true(held(a, "a", 84));
    assert_false(held(a, "a", 85));
    /* Another peer loses nothing to it and has room. */
    for (int i = 0; i < 16; i++)
        assert_int_equal(reduce(a, &other, "b", i), 5);
    assert_int_equal(n_held(a, "b", 16), 16);
    assert_int_equal(n_held(a, "a", 101), 16);
    assert_int_equal(stats(a).evictions, 85);
    adhoc_free(a);
}

/* The pool is full (4 peers x 14 = 56 = 64 - 8): a new peer's buckets come
 * from the peer holding the most, until it holds as many (max-min). */
static void test_adhoc_table_pool_full(void **state)
{
    struct adhoc_peer q = unix_peer(2, false), t[4];
    struct adhoc *a = table(64, 8, 16);
    char prefix[8];

    (void)state;
    for (unsigned k = 0; k < 4; k++) {
        t[k] = tcp_peer(k + 1);
        snprintf(prefix, sizeof(prefix), "t%u-", k);
        for (int i = 0; i < 14; i++)
            assert_int_equal(reduce(a, &t[k], prefix, i), 5);
    }
    assert_int_equal(stats(a).used, 56);
    assert_int_equal(stats(a).evictions, 0);
    for (int i = 0; i < 20; i++)
        assert_int_equal(reduce(a, &q, "q", i), 5);
    /* 56 among five: q rose to 12 (from the largest each time), then gave
     * up its own; the others kept 11 each, their most recent. */
    assert_int_equal(n_held(a, "q", 20), 12);
    for (int i = 8; i < 20; i++)
        assert_true(held(a, "q", i));
    for (unsigned k = 0; k < 4; k++) {
        snprintf(prefix, sizeof(prefix), "t%u-", k);
        assert_int_equal(n_held(a, prefix, 14), 11);
        for (int i = 3; i < 14; i++)
            assert_true(held(a, prefix, i));
    }
    assert_int_equal(stats(a).used, 56);
    assert_int_equal(stats(a).evictions, 20);
    assert_int_equal(stats(a).busy, 0);
    adhoc_free(a);
}

/* A peer holding a few buckets keeps them through a flood from four
 * addresses: each flooder is held to its share, then to what the others
 * hold, and never takes from a smaller peer. */
static void test_adhoc_table_modest_peer_kept(void **state)
{
    struct adhoc_peer m = unix_peer(3, false);
    struct adhoc *a = table(64, 8, 16);

    (void)state;
    for (int i = 0; i < 3; i++)
        assert_int_equal(reduce(a, &m, "m", i), 5);
    for (int round = 0; round < 100; round++)
        for (unsigned k = 0; k < 4; k++) {
            struct adhoc_peer f = tcp_peer(k + 1);

            assert_int_equal(reduce(a, &f, "f", round * 4 + (int)k), 5);
        }
    assert_int_equal(n_held(a, "m", 3), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(reduce(a, &m, "m", i), 4);
    assert_int_equal(stats(a).used, 56);
    assert_int_equal(n_held(a, "f", 400), 53);
    assert_int_equal(stats(a).busy, 0);
    adhoc_free(a);
}

/* Privileged peers: the reserve first (no eviction), then the largest
 * unprivileged peer's bucket; theirs are never taken for an unprivileged
 * peer.  Only when privileged peers hold everything is anyone busy, and
 * then only unprivileged peers. */
static void test_adhoc_table_privileged(void **state)
{
    struct adhoc_peer root = unix_peer(0, true), admin = unix_peer(5, true);
    struct adhoc_peer x = unix_peer(64403, false);
    struct adhoc *a = table(64, 8, 16);
    char prefix[8];

    (void)state;
    for (unsigned k = 0; k < 4; k++) {
        struct adhoc_peer t = tcp_peer(k + 1);

        snprintf(prefix, sizeof(prefix), "t%u-", k);
        for (int i = 0; i < 14; i++)
            assert_int_equal(reduce(a, &t, prefix, i), 5);
    }
    for (int i = 0; i < 8; i++)
        assert_int_equal(reduce(a, &root, "r", i), 5);
    assert_int_equal(stats(a).evictions, 0);
    assert_int_equal(reduce(a, &root, "r", 8), 5);
    assert_int_equal(stats(a).evictions, 1);
    assert_int_equal(stats(a).privileged, 9);
    /* A flood from 40 addresses takes none of root's. */
    for (int i = 0; i < 4000; i++) {
        struct adhoc_peer f = tcp_peer(100 + (unsigned)(i % 40));

        assert_int_equal(reduce(a, &f, "f", i), 5);
    }
    assert_int_equal(n_held(a, "r", 9), 9);
    assert_int_equal(stats(a).used, 64);
    assert_int_equal(stats(a).busy, 0);
    adhoc_free(a);

    /* Privileged peers hold every slot: only an unprivileged peer is busy. */
    a = table(16, 4, 4);
    for (int i = 0; i < 16; i++)
        assert_int_equal(reduce(a, &root, "r", i), 5);
    assert_int_equal(reduce(a, &x, "x", 0), -1);
    assert_int_equal(stats(a).busy, 1);
    assert_int_equal(reduce(a, &root, "r", 16), 5);
    assert_false(held(a, "r", 0));
    assert_int_equal(reduce(a, &admin, "s", 0), 5);
    assert_false(held(a, "r", 1));
    assert_int_equal(stats(a).used, 16);
    assert_int_equal(stats(a).peers, 2);
    adhoc_free(a);
}

/* CL.THROTTLE keys are charged like RL.* buckets; a refused or look-only
 * call on a new key stores nothing. */
static void test_adhoc_table_gcra(void **state)
{
    struct adhoc_gcra p = { .max_burst = 4, .count = 1, .period_s = 60, .quantity = 1 };
    struct adhoc_peer me = tcp_peer(7);
    struct adhoc_gcra_result res;
    struct adhoc *a = table(64, 8, 16);
    int64_t now = 1000 * MS;
    char key[16];

    (void)state;
    for (int i = 0; i < 10; i++)
        assert_int_equal(reduce(a, &me, "a", i), 5);
    for (int i = 0; i < 10; i++) {
        int n = snprintf(key, sizeof(key), "g%d", i);

        assert_int_equal(adhoc_gcra(a, &me, key, (size_t)n, &p, now, &res), 0);
        assert_false(res.limited);
    }
    /* Sixteen at most: the four oldest token buckets went. */
    assert_int_equal(stats(a).used, 16);
    assert_int_equal(n_held(a, "a", 10), 6);
    assert_false(held(a, "a", 3));
    assert_true(held(a, "a", 4));
    p.quantity = 6;
    assert_int_equal(adhoc_gcra(a, &me, "big", 3, &p, now, &res), 0);
    assert_true(res.limited);
    p.quantity = 0;
    assert_int_equal(adhoc_gcra(a, &me, "look", 4, &p, now, &res), 0);
    assert_false(res.limited);
    assert_int_equal(stats(a).used, 16);
    assert_int_equal(stats(a).evictions, 4);
    adhoc_free(a);
}

/* Random traffic from 30 peers (3 privileged) on a small table: an
 * unprivileged peer is busy only while privileged peers hold every slot of
 * its shard, a privileged one never; the counts stay within bounds (and
 * ASan watches the lists). */
static void test_adhoc_table_random(void **state)
{
    struct adhoc *a = table(2048, 256, 200);
    struct adhoc_stats st;
    unsigned seed = 18;

    (void)state;
    for (int i = 0; i < 200000; i++) {
        unsigned who = (unsigned)rand_r(&seed) % 30;
        struct adhoc_peer p = who < 3 ? unix_peer(who, true) : tcp_peer(who);
        int key = rand_r(&seed) % (who < 3 ? 300 : 5000);
        char prefix[8];

        snprintf(prefix, sizeof(prefix), "%u-", who);
        if (reduce(a, &p, prefix, key) < 0)
            fail_msg("step %d: peer %u busy", i, who);
    }
    st = stats(a);
    assert_true(st.used <= st.capacity);
    assert_true(st.used - st.privileged <= st.capacity - st.reserved);
    assert_true(st.peers <= 30 * 8);
    assert_int_equal(st.busy, 0);
    assert_true(st.evictions > 0);
    adhoc_free(a);
}

/* ---- the Unix clock, sweep, save and load --------------------------------------------- */

#define NOW 1795000000000LL     /* a Unix time in ms, as divvyd's clock reads one */

/* An AT may be any time in the past, and at most ADHOC_AT_AHEAD_MS ahead. */
/* adhoc_claim() of Redis key "<prefix><i>" (RL.* 5 3600) by @who until @expire at @now. */
static int claim(struct adhoc *a, const struct adhoc_peer *who, const char *prefix, int i,
                 int64_t expire, int64_t now)
{
    const int64_t params[3] = { 5, 5, 3600000 };
    char key[32];
    int n = snprintf(key, sizeof(key), "%s%d", prefix, i);

    return adhoc_claim(a, who, ADHOC_RL, key, (size_t)n, params, expire, now);
}

/*
 * Keys in Redis (adhoc_no_evict()): a peer at its share is refused, never
 * gives up a slot of its own before it expires; a name it holds is not
 * charged again and keeps the latest bound; each peer's claim of a name is
 * its own; local buckets follow the same rule; a full pool refuses an
 * unprivileged peer and takes nobody's slot, privileged peers keep the
 * reserve and take each other's.
 */
static void test_adhoc_table_claim(void **state)
{
    struct adhoc_peer me = unix_peer(61601, false), other = unix_peer(61602, false);
    struct adhoc_peer root = unix_peer(0, true);
    struct adhoc *a = table(64, 8, 4);
    struct adhoc_stats st;

    (void)state;
    adhoc_no_evict(a);
    for (int i = 0; i < 4; i++)
        assert_int_equal(claim(a, &me, "a", i, 10000, 1000), 0);
    assert_int_equal(claim(a, &me, "a", 4, 10000, 1000), -EDQUOT);
    /* Held: not charged again; a later bound wins, an earlier one does not. */
    assert_int_equal(claim(a, &me, "a", 0, 20000, 2000), 0);
    assert_int_equal(claim(a, &me, "a", 0, 5000, 3000), 0);
    st = stats(a);
    assert_int_equal(st.used, 4);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.busy, 1);
    /* The table's own buckets are refused too, and apart from the claims. */
    assert_int_equal(reduce(a, &me, "a", 0), -1);
    assert_int_equal(reduce(a, &other, "a", 0), 5);
    /* Each peer's claim is its own. */
    assert_int_equal(claim(a, &other, "a", 0, 10000, 3000), 0);
    assert_int_equal(stats(a).used, 6);
    /* Until a bound passes: a1..a3 at 10000, a0 at 20000. */
    assert_int_equal(claim(a, &me, "a", 4, 10000, 9999), -EDQUOT);
    for (int i = 4; i < 7; i++)
        assert_int_equal(claim(a, &me, "a", i, 30000, 10000), 0);
    assert_int_equal(claim(a, &me, "a", 7, 30000, 19999), -EDQUOT);
    assert_int_equal(claim(a, &me, "a", 7, 30000, 20000), 0);
    assert_int_equal(stats(a).evictions, 0);
    adhoc_free(a);

    /* The pool (64 - 8) full: refused, nobody's slot taken; root has the reserve. */
    a = table(64, 8, 4);
    adhoc_no_evict(a);
    for (unsigned p = 0; p < 14; p++) {
        struct adhoc_peer who = unix_peer(1000 + p, false);

        for (int i = 0; i < 4; i++)
            assert_int_equal(claim(a, &who, "p", (int)(p * 4) + i, 10000, 1000), 0);
    }
    assert_int_equal(claim(a, &other, "o", 0, 10000, 1000), -ENOSPC);
    assert_int_equal(reduce(a, &other, "o", 0), -1);
    for (int i = 0; i < 9; i++)
        assert_int_equal(claim(a, &root, "r", i, 10000, 1000), 0);
    st = stats(a);
    assert_int_equal(st.used, 64);
    assert_int_equal(st.privileged, 8);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(claim(a, &root, "r", 0, 10000, 1000), 0);
    assert_int_equal(stats(a).used, 64);
    adhoc_free(a);
}

/* A key's local bound: never before the TTL its script can give it. */
static void test_adhoc_key_expire(void **state)
{
    struct adhoc_tb tb = { .max = 5, .refill = 5, .refill_ms = 3600000, .take = 1 };
    struct adhoc_gcra g = { .max_burst = 5, .count = 1, .period_s = 60, .quantity = 1 };
    int64_t now = 1700000000000LL;

    (void)state;
    assert_int_equal(adhoc_tb_key_expire_ms(&tb, -1, now), now + 3600000 + ADHOC_KEY_SLACK_MS);
    tb.refill = 2;
    assert_int_equal(adhoc_tb_key_expire_ms(&tb, -1, now),
                     now + 3 * 3600000 + ADHOC_KEY_SLACK_MS);
    /* An AT in the past lives as much longer; one ahead is in the slack. */
    assert_int_equal(adhoc_tb_key_expire_ms(&tb, now - 500000, now),
                     now + 3 * 3600000 + 500000 + ADHOC_KEY_SLACK_MS);
    assert_int_equal(adhoc_tb_key_expire_ms(&tb, now + 60000, now),
                     now + 3 * 3600000 + ADHOC_KEY_SLACK_MS);
    tb = (struct adhoc_tb){ .max = 1000000000000000LL, .refill = 1, .refill_ms = 2678400000LL };
    assert_int_equal(adhoc_tb_key_expire_ms(&tb, 0, now),
                     now + ADHOC_KEY_TTL_MAX_MS + ADHOC_KEY_SLACK_MS);
    /* GCRA: the whole burst's time, (5 + 1) * 60 s. */
    assert_int_equal(adhoc_gcra_key_expire_ms(&g, now), now + 360000 + 1 + ADHOC_KEY_SLACK_MS);
}

static void test_adhoc_at_check(void **state)
{
    (void)state;
    assert_int_equal(adhoc_at_check(NOW, NOW), 0);
    assert_int_equal(adhoc_at_check(0, NOW), 0);
    assert_int_equal(adhoc_at_check(NOW + ADHOC_AT_AHEAD_MS, NOW), 0);
    assert_int_equal(adhoc_at_check(NOW + ADHOC_AT_AHEAD_MS + 1, NOW), -ERANGE);
    assert_int_equal(adhoc_at_check(NOW + 86400000LL * 365 * 100, NOW), -ERANGE);
    assert_int_equal(adhoc_at_check(-1, NOW), -ERANGE);
}

/* A bucket is kept as long in real time as it needs on its own clock. */
static void test_adhoc_expire(void **state)
{
    (void)state;
    assert_int_equal(adhoc_expire_ms(NOW + 500, NOW, NOW), NOW + 500);
    assert_int_equal(adhoc_expire_ms(NOW - 9000, NOW - 10000, NOW), NOW + 1000);
    assert_int_equal(adhoc_expire_ms(NOW + 30500, NOW + 30000, NOW), NOW + 30500);
    assert_int_equal(adhoc_expire_ms(INT64_MAX - 1, 0, NOW), INT64_MAX);
}

/* AT and plain calls share one clock: a plain call after AT <now> refills,
 * and a replay with old ATs keeps its state between calls. */
static void test_adhoc_table_unix_clock(void **state)
{
    struct adhoc_tb p = { .max = 1, .refill = 1, .refill_ms = 1000, .take = 1 };
    struct adhoc_peer me = unix_peer(1000, false);
    struct adhoc *a = table(64, 0, 0);
    int64_t before, old = NOW - 86400000LL;

    (void)state;
    assert_int_equal(adhoc_tb(a, &me, "k", 1, &p, NOW, NOW, &before), 0);
    assert_int_equal(before, 1);
    assert_int_equal(adhoc_tb(a, &me, "k", 1, &p, NOW + 999, NOW + 999, &before), 0);
    assert_int_equal(before, 0);
    assert_int_equal(adhoc_tb(a, &me, "k", 1, &p, NOW + 1000, NOW + 1000, &before), 0);
    assert_int_equal(before, 1);
    /* A day-old replay, one call a (client) millisecond apart. */
    assert_int_equal(adhoc_tb(a, &me, "r", 1, &p, old, NOW, &before), 0);
    assert_int_equal(before, 1);
    assert_int_equal(adhoc_tb(a, &me, "r", 1, &p, old + 1, NOW + 1, &before), 0);
    assert_int_equal(before, 0);
    assert_int_equal(adhoc_tb(a, &me, "r", 1, &p, old + 1000, NOW + 2, &before), 0);
    assert_int_equal(before, 1);
    adhoc_free(a);
}

/* adhoc_sweep() frees the slots of buckets nobody names again. */
static void test_adhoc_table_sweep(void **state)
{
    struct adhoc_tb p = { .max = 2, .refill = 2, .refill_ms = 1000, .take = 1 };
    struct adhoc_gcra g = { .max_burst = 0, .count = 1, .period_s = 10, .quantity = 1 };
    struct adhoc_peer me = unix_peer(1000, false);
    struct adhoc_gcra_result res;
    struct adhoc *a = table(64, 0, 0);
    int64_t before;

    (void)state;
    for (int i = 0; i < 5; i++) {
        char key[8];

        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(adhoc_tb(a, &me, key, strlen(key), &p, NOW, NOW, &before), 0);
    }
    assert_int_equal(adhoc_gcra(a, &me, "g", 1, &g, NOW * MS, &res), 0);
    assert_int_equal(stats(a).used, 6);
    assert_int_equal(adhoc_sweep(a, NOW + 999), 0);
    assert_int_equal(adhoc_sweep(a, NOW + 1000), 5);
    assert_int_equal(stats(a).used, 1);
    assert_int_equal(stats(a).peers, 1);
    assert_int_equal(adhoc_sweep(a, NOW + 10000), 1);
    assert_int_equal(stats(a).used, 0);
    assert_int_equal(stats(a).peers, 0);
    assert_int_equal(stats(a).evictions, 0);
    adhoc_free(a);
}

/* A saved table comes back with its buckets and owners; idle ones stay
 * behind; a file that is not one is refused and leaves the table empty. */
static void test_adhoc_table_save_load(void **state)
{
    struct adhoc_tb p = { .max = 3, .refill = 3, .refill_ms = 60000, .take = 1 };
    struct adhoc_tb quick = { .max = 1, .refill = 1, .refill_ms = 10, .take = 1 };
    struct adhoc_gcra g = { .max_burst = 1, .count = 1, .period_s = 60, .quantity = 1 };
    struct adhoc_peer me = unix_peer(1000, false), root = unix_peer(0, true);
    struct adhoc_gcra_result res;
    char dir[] = "/tmp/test_adhoc.XXXXXX", path[64];
    struct adhoc *a = table(64, 0, 0), *b = table(64, 0, 0);
    int64_t before;
    FILE *f;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/adhoc.buckets", dir);
    assert_int_equal(adhoc_load(b, path, NOW), -ENOENT);
    assert_int_equal(adhoc_tb(a, &me, "k", 1, &p, NOW, NOW, &before), 0);
    assert_int_equal(adhoc_tb(a, &root, "r", 1, &p, NOW, NOW, &before), 0);
    assert_int_equal(adhoc_tb(a, &me, "q", 1, &quick, NOW, NOW, &before), 0);
    assert_int_equal(adhoc_gcra(a, &me, "g", 1, &g, NOW * MS, &res), 0);
    assert_int_equal(adhoc_save(a, path, NOW), 4);
    assert_int_equal(adhoc_load(b, path, NOW + 10), 3);
    assert_int_equal(stats(b).used, 3);
    assert_int_equal(stats(b).privileged, 1);
    assert_int_equal(adhoc_tb(b, &me, "k", 1, &p, NOW + 20, NOW + 20, &before), 0);
    assert_int_equal(before, 2);
    assert_int_equal(adhoc_gcra(b, &me, "g", 1, &g, (NOW + 20) * MS, &res), 0);
    assert_int_equal(res.remaining, 0);
    assert_false(res.limited);
    adhoc_free(b);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a table", f);
    fclose(f);
    b = table(64, 0, 0);
    assert_int_equal(adhoc_load(b, path, NOW), -EBADMSG);
    assert_int_equal(stats(b).used, 0);
    adhoc_free(a);
    adhoc_free(b);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adhoc_tb_transcript),
        cmocka_unit_test(test_adhoc_tb_full_is_none),
        cmocka_unit_test(test_adhoc_tb_refill_take),
        cmocka_unit_test(test_adhoc_tb_strict),
        cmocka_unit_test(test_adhoc_gcra_cell_cases),
        cmocka_unit_test(test_adhoc_gcra_check),
        cmocka_unit_test(test_adhoc_table_sizes),
        cmocka_unit_test(test_adhoc_table_names),
        cmocka_unit_test(test_adhoc_table_share_own_lru),
        cmocka_unit_test(test_adhoc_table_pool_full),
        cmocka_unit_test(test_adhoc_table_modest_peer_kept),
        cmocka_unit_test(test_adhoc_table_privileged),
        cmocka_unit_test(test_adhoc_table_gcra),
        cmocka_unit_test(test_adhoc_table_random),
        cmocka_unit_test(test_adhoc_table_claim),
        cmocka_unit_test(test_adhoc_key_expire),
        cmocka_unit_test(test_adhoc_at_check),
        cmocka_unit_test(test_adhoc_expire),
        cmocka_unit_test(test_adhoc_table_unix_clock),
        cmocka_unit_test(test_adhoc_table_sweep),
        cmocka_unit_test(test_adhoc_table_save_load),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
