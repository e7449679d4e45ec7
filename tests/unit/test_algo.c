/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for common/algo.c: window, token bucket (plain and strict) and
 * sliding window on the packed slot state, with injected times, including
 * the boundaries where a window resets or a refill lands.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "algo.h"

#define RULES_SLIDING_BIG ((uint64_t)1 << 23)     /* 5 of them pass 2^24 - 1 */

static struct table_limits window(uint64_t limit, uint64_t reset_ms)
{
    struct table_limits lim;

    memset(&lim, 0, sizeof(lim));
    lim.algo = RULES_ALGO_WINDOW;
    lim.credit_limit = limit;
    lim.reset_ms = reset_ms;
    return lim;
}

static struct table_limits bucket(uint64_t cap, uint64_t amount, uint64_t period, bool strict)
{
    struct table_limits lim;

    memset(&lim, 0, sizeof(lim));
    lim.algo = RULES_ALGO_TOKEN_BUCKET;
    lim.credit_limit = cap;
    lim.reset_ms = period;
    lim.refill_amount = amount;
    lim.refill_ms = period;
    lim.strict = strict;
    return lim;
}

static struct table_limits sliding(uint64_t limit, uint64_t w)
{
    struct table_limits lim = window(limit, w);

    lim.algo = RULES_ALGO_SLIDING_WINDOW;
    return lim;
}

/* Applies @op and stores the new state back in *st, like the table does. */
static struct table_result run(const struct table_limits *lim, struct algo_state *st,
                               enum table_op op, uint64_t n, uint64_t now)
{
    struct table_result res;

    memset(&res, 0xa5, sizeof(res));
    algo_apply(lim, op, n, now, st, st, &res);
    return res;
}

static void expect(struct table_result res, bool allowed, uint64_t credit, uint64_t reset_ms)
{
    assert_int_equal(res.allowed, allowed);
    assert_int_equal(res.credit, credit);
    assert_int_equal(res.reset_ms, reset_ms);
}

static void test_algo_window_first_take(void **state)
{
    struct table_limits lim = window(3, 60000);
    struct algo_state st = { 0 };

    (void)state;
    expect(run(&lim, &st, TABLE_TAKE, 1, 1000), true, 2, 60000);
    assert_int_equal(st.idle, 61000);
    assert_int_equal(st.data, 1);
    expect(run(&lim, &st, TABLE_TAKE, 1, 3000), true, 1, 58000);
    expect(run(&lim, &st, TABLE_TAKE, 1, 3000), true, 0, 58000);
    expect(run(&lim, &st, TABLE_TAKE, 1, 3001), false, 0, 57999);
    assert_int_equal(st.data, 3);
}

static void test_algo_window_reset_timing(void **state)
{
    struct table_limits lim = window(2, 1000);
    struct algo_state st = { 0 };

    (void)state;
    expect(run(&lim, &st, TABLE_TAKE, 2, 500), true, 0, 1000);
    expect(run(&lim, &st, TABLE_TAKE, 1, 1499), false, 0, 1);
    /* The window is [500, 1500): at 1500 the quota is full again. */
    expect(run(&lim, &st, TABLE_PEEK, 2, 1500), true, 2, 0);
    expect(run(&lim, &st, TABLE_TAKE, 1, 1500), true, 1, 1000);
    assert_int_equal(st.idle, 2500);
}

static void test_algo_window_all_or_nothing(void **state)
{
    struct table_limits lim = window(5, 1000);
    struct algo_state st = { 0 }, before;

    (void)state;
    expect(run(&lim, &st, TABLE_TAKE, 3, 0), true, 2, 1000);
    before = st;
    expect(run(&lim, &st, TABLE_TAKE, 3, 10), false, 2, 990);
    assert_memory_equal(&st, &before, sizeof(st));
    expect(run(&lim, &st, TABLE_TAKE, 2, 10), true, 0, 990);
}

static void test_algo_window_denied_fresh_starts_nothing(void **state)
{
    struct table_limits lim = window(5, 1000);
    struct algo_state st = { 0 }, next;
    struct table_result res;

    (void)state;
    assert_false(algo_apply(&lim, TABLE_TAKE, 6, 100, &st, &next, &res));
    expect(res, false, 5, 0);
    assert_int_equal(next.idle, 0);
    assert_int_equal(next.data, 0);
}

static void test_algo_peek_and_take_zero_change_nothing(void **state)
{
    struct table_limits lim = window(5, 1000);
    struct algo_state st = { 0 }, next;
    struct table_result res;

    (void)state;
    run(&lim, &st, TABLE_TAKE, 2, 0);
    assert_false(algo_apply(&lim, TABLE_PEEK, 3, 10, &st, &next, &res));
    expect(res, true, 3, 990);
    assert_false(algo_apply(&lim, TABLE_PEEK, 4, 10, &st, &next, &res));
    expect(res, false, 3, 990);
    assert_false(algo_apply(&lim, TABLE_TAKE, 0, 10, &st, &next, &res));
    expect(res, true, 3, 990);
    /* An absent counter: full quota, no reset pending. */
    st.idle = st.data = 0;
    assert_false(algo_apply(&lim, TABLE_PEEK, 5, 10, &st, &next, &res));
    expect(res, true, 5, 0);
}

static void test_algo_reset_forgets(void **state)
{
    struct table_limits lim = bucket(4, 1, 1000, false);
    struct algo_state st = { 0 };
    struct table_result res;

    (void)state;
    run(&lim, &st, TABLE_TAKE, 4, 0);
    assert_true(algo_apply(&lim, TABLE_RESET, 0, 10, &st, &st, &res));
    expect(res, true, 4, 0);
    assert_int_equal(st.idle, 0);
    expect(run(&lim, &st, TABLE_TAKE, 4, 20), true, 0, 1000);
}

static void test_algo_bucket_discrete_refill(void **state)
{
    struct table_limits lim = bucket(5, 1, 1000, false);
    struct algo_state st = { 0 };

    (void)state;
    expect(run(&lim, &st, TABLE_TAKE, 1, 0), true, 4, 1000);
    assert_int_equal(st.idle, 1000);            /* full again one refill later */
    expect(run(&lim, &st, TABLE_TAKE, 4, 0), true, 0, 1000);
    assert_int_equal(st.idle, 5000);
    expect(run(&lim, &st, TABLE_TAKE, 1, 999), false, 0, 1);
    expect(run(&lim, &st, TABLE_PEEK, 1, 1000), true, 1, 1000);
    expect(run(&lim, &st, TABLE_PEEK, 1, 1999), true, 1, 1);
    expect(run(&lim, &st, TABLE_PEEK, 1, 4999), true, 4, 1);
    expect(run(&lim, &st, TABLE_PEEK, 5, 5000), true, 5, 0);
    /* Taking after two refills keeps the refill clock where it was. */
    expect(run(&lim, &st, TABLE_TAKE, 2, 2500), true, 0, 500);
    expect(run(&lim, &st, TABLE_PEEK, 1, 3000), true, 1, 1000);
}

static void test_algo_bucket_amount_above_one(void **state)
{
    struct table_limits lim = bucket(10, 3, 100, false);
    struct algo_state st = { 0 };

    (void)state;
    expect(run(&lim, &st, TABLE_TAKE, 10, 0), true, 0, 100);
    assert_int_equal(st.idle, 400);             /* ceil(10 / 3) refills */
    expect(run(&lim, &st, TABLE_PEEK, 1, 99), false, 0, 1);
    expect(run(&lim, &st, TABLE_PEEK, 1, 100), true, 3, 100);
    expect(run(&lim, &st, TABLE_PEEK, 1, 399), true, 9, 1);
    expect(run(&lim, &st, TABLE_PEEK, 1, 400), true, 10, 0);
}

static void test_algo_bucket_all_or_nothing(void **state)
{
    struct table_limits lim = bucket(5, 1, 1000, false);
    struct algo_state st = { 0 }, next;
    struct table_result res;

    (void)state;
    expect(run(&lim, &st, TABLE_TAKE, 3, 0), true, 2, 1000);
    expect(run(&lim, &st, TABLE_TAKE, 3, 10), false, 2, 990);
    expect(run(&lim, &st, TABLE_TAKE, 2, 10), true, 0, 990);
    st.idle = st.data = 0;
    assert_false(algo_apply(&lim, TABLE_TAKE, 6, 10, &st, &next, &res));
    expect(res, false, 5, 0);
}

static void test_algo_bucket_strict_restarts_clock(void **state)
{
    struct table_limits strict = bucket(2, 1, 1000, true);
    struct table_limits plain = bucket(2, 1, 1000, false);
    struct algo_state s = { 0 }, p = { 0 };

    (void)state;
    run(&strict, &s, TABLE_TAKE, 2, 0);
    run(&plain, &p, TABLE_TAKE, 2, 0);
    expect(run(&strict, &s, TABLE_TAKE, 1, 900), false, 0, 1000);
    expect(run(&plain, &p, TABLE_TAKE, 1, 900), false, 0, 100);
    /* Plain: the refill at 1000 arrives.  Strict: pushed to 1900. */
    expect(run(&plain, &p, TABLE_PEEK, 1, 1000), true, 1, 1000);
    expect(run(&strict, &s, TABLE_PEEK, 1, 1000), false, 0, 900);
    expect(run(&strict, &s, TABLE_PEEK, 1, 1899), false, 0, 1);
    expect(run(&strict, &s, TABLE_PEEK, 1, 1900), true, 1, 1000);
    expect(run(&strict, &s, TABLE_PEEK, 2, 2900), true, 2, 0);
}

static void test_algo_sliding_weighted_estimate(void **state)
{
    struct table_limits lim = sliding(10, 1000);
    struct algo_state st = { 0 };

    (void)state;
    expect(run(&lim, &st, TABLE_TAKE, 10, 0), true, 0, 1000);
    assert_int_equal(st.idle, 2000);
    expect(run(&lim, &st, TABLE_TAKE, 1, 999), false, 0, 1);
    /* At 1000 the previous window still weighs fully, at 1500 by half. */
    expect(run(&lim, &st, TABLE_PEEK, 1, 1000), false, 0, 1000);
    expect(run(&lim, &st, TABLE_PEEK, 5, 1500), true, 5, 500);
    expect(run(&lim, &st, TABLE_PEEK, 9, 1900), true, 9, 100);
    expect(run(&lim, &st, TABLE_TAKE, 6, 1500), false, 5, 500);
    expect(run(&lim, &st, TABLE_TAKE, 5, 1500), true, 0, 500);
    assert_int_equal(st.idle, 3000);            /* current window is [1000, 2000) */
    expect(run(&lim, &st, TABLE_TAKE, 1, 1500), false, 0, 500);
    /* At 2500: prev = 5 weighs half (2.5), cur = 0: floor(7.5) = 7. */
    expect(run(&lim, &st, TABLE_PEEK, 1, 2500), true, 7, 500);
    /* Two windows after the last hit's window: full. */
    expect(run(&lim, &st, TABLE_PEEK, 10, 3000), true, 10, 0);
}

static void test_algo_sliding_all_or_nothing(void **state)
{
    struct table_limits lim = sliding(4, 100);
    struct algo_state st = { 0 }, next;
    struct table_result res;

    (void)state;
    assert_false(algo_apply(&lim, TABLE_TAKE, 5, 0, &st, &next, &res));
    expect(res, false, 4, 0);
    expect(run(&lim, &st, TABLE_TAKE, 3, 0), true, 1, 100);
    expect(run(&lim, &st, TABLE_TAKE, 2, 50), false, 1, 50);
    expect(run(&lim, &st, TABLE_TAKE, 1, 50), true, 0, 50);
}

static void test_algo_check_limits(void **state)
{
    struct table_limits lim;

    (void)state;
    lim = window(0, 1000);
    assert_int_equal(algo_check(&lim), -EINVAL);
    lim = window(1, 0);
    assert_int_equal(algo_check(&lim), -EINVAL);
    lim = window(ALGO_DATA_MAX, ALGO_SPAN_MAX);
    assert_int_equal(algo_check(&lim), 0);
    lim = window(ALGO_DATA_MAX + 1, 1000);
    assert_int_equal(algo_check(&lim), -EINVAL);
    lim = sliding(ALGO_SLIDING_MAX, 1000);
    assert_int_equal(algo_check(&lim), 0);
    lim = sliding(ALGO_SLIDING_MAX + 1, 1000);
    assert_int_equal(algo_check(&lim), -EINVAL);
    lim = bucket(10, 0, 1000, false);
    assert_int_equal(algo_check(&lim), -EINVAL);
    lim = bucket(10, 1, 0, false);
    assert_int_equal(algo_check(&lim), -EINVAL);
    /* A million tokens at one an hour take 114 years to refill. */
    lim = bucket(1000000, 1, 3600000, false);
    assert_int_equal(algo_check(&lim), -EINVAL);
    lim = bucket(1000000, 1000, 3600000, false);
    assert_int_equal(algo_check(&lim), 0);
    lim = window(1, 1000);
    lim.algo = (enum rules_algo)7;
    assert_int_equal(algo_check(&lim), -EINVAL);
}

static void test_algo_times_saturate(void **state)
{
    struct table_limits lim = window(3, ALGO_SPAN_MAX);
    struct algo_state st = { 0 };
    struct table_result res;

    (void)state;
    res = run(&lim, &st, TABLE_TAKE, 1, ALGO_IDLE_MAX - 10);
    assert_true(res.allowed);
    assert_int_equal(st.idle, ALGO_IDLE_MAX);
    assert_int_equal(res.reset_ms, 10);
    lim = bucket(ALGO_DATA_MAX, ALGO_DATA_MAX, ALGO_SPAN_MAX, false);
    st.idle = st.data = 0;
    res = run(&lim, &st, TABLE_TAKE, ALGO_DATA_MAX, ALGO_IDLE_MAX - 5);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 0);
    assert_int_equal(st.idle, ALGO_IDLE_MAX);
}

/* The first ms from @now at which a PEEK of 1 is allowed, found by stepping. */
static uint64_t first_allowed(const struct table_limits *lim, const struct algo_state *st,
                              uint64_t now)
{
    for (uint64_t t = now;; t++) {
        struct algo_state out;
        struct table_result res;

        algo_apply(lim, TABLE_PEEK, 1, t, st, &out, &res);
        if (res.allowed)
            return t - now;
    }
}

/* algo_retry_ms() agrees with stepping time forward, for every algorithm,
 * after every TAKE of a pseudo-random sequence (including drained states). */
static void test_algo_retry_matches_stepping(void **state)
{
    const struct table_limits lims[] = {
        window(3, 700), window(1, 50), bucket(10, 1, 200, false), bucket(7, 3, 90, false),
        bucket(4, 1, 100, true), sliding(10, 1000), sliding(1, 300), sliding(3, 70),
    };
    uint32_t seed = 12345;

    (void)state;
    for (size_t i = 0; i < sizeof(lims) / sizeof(lims[0]); i++) {
        struct algo_state st = { 0 };
        uint64_t now = 1000;

        for (int step = 0; step < 400; step++) {
            seed = seed * 1103515245u + 12345u;
            now += (seed >> 16) % 40;
            run(&lims[i], &st, TABLE_TAKE, 1 + (seed >> 8) % 3, now);
            assert_int_equal(algo_retry_ms(&lims[i], now, &st), first_allowed(&lims[i], &st, now));
        }
    }
}

/* The same with DEBITs among the TAKEs: a debt's pay-back time too. */
static void test_algo_retry_after_debit(void **state)
{
    const struct table_limits lims[] = {
        window(3, 700), window(1, 50), bucket(10, 1, 200, false), bucket(7, 3, 90, false),
        bucket(4, 1, 100, true), sliding(10, 1000), sliding(1, 300), sliding(3, 70),
    };
    uint32_t seed = 4242;

    (void)state;
    for (size_t i = 0; i < sizeof(lims) / sizeof(lims[0]); i++) {
        struct algo_state st = { 0 };
        uint64_t now = 1000, limit = lims[i].credit_limit;

        for (int step = 0; step < 400; step++) {
            seed = seed * 1103515245u + 12345u;
            now += (seed >> 16) % 40;
            if ((seed >> 28) % 4 == 0)
                run(&lims[i], &st, TABLE_DEBIT, 1 + (seed >> 8) % (3 * limit), now);
            else
                run(&lims[i], &st, TABLE_TAKE, 1 + (seed >> 8) % 3, now);
            assert_int_equal(algo_retry_ms(&lims[i], now, &st), first_allowed(&lims[i], &st, now));
        }
    }
}

/* DEBIT: a fixed window's count passes the limit; each window that ends
 * pays one limit back, so the following windows start with the excess. */
static void test_algo_window_debit_carries(void **state)
{
    struct table_limits lim = window(10, 1000);
    struct algo_state st = { 0 };

    (void)state;
    expect(run(&lim, &st, TABLE_TAKE, 4, 0), true, 6, 1000);
    /* Charged whatever is left: 4 + 23 = 27 used, 17 over. */
    expect(run(&lim, &st, TABLE_DEBIT, 23, 100), false, 0, 900);
    assert_int_equal(st.data, 27);
    assert_int_equal(st.idle, 3000);            /* windows [1000,2000) and [2000,3000) pay */
    expect(run(&lim, &st, TABLE_TAKE, 1, 999), false, 0, 1);
    assert_int_equal(algo_retry_ms(&lim, 999, &st), 1001);    /* window 3 has room */
    /* Window 2 starts with 17 used: still 7 over. */
    expect(run(&lim, &st, TABLE_PEEK, 1, 1000), false, 0, 1000);
    expect(run(&lim, &st, TABLE_TAKE, 1, 1500), false, 0, 500);
    /* Window 3 starts with 7 used: 3 left. */
    expect(run(&lim, &st, TABLE_TAKE, 3, 2000), true, 0, 1000);
    assert_int_equal(st.data, 10);
    assert_int_equal(st.idle, 3000);
    expect(run(&lim, &st, TABLE_TAKE, 1, 2999), false, 0, 1);
    /* Paid back: a full window again. */
    expect(run(&lim, &st, TABLE_TAKE, 1, 3000), true, 9, 1000);
    assert_int_equal(st.idle, 4000);
}

/* A DEBIT that fits answers allowed; one on a fresh counter starts a window. */
static void test_algo_window_debit_fits(void **state)
{
    struct table_limits lim = window(10, 1000);
    struct algo_state st = { 0 };

    (void)state;
    expect(run(&lim, &st, TABLE_DEBIT, 10, 50), true, 0, 1000);
    expect(run(&lim, &st, TABLE_DEBIT, 1, 60), false, 0, 990);
    assert_int_equal(st.data, 11);
    assert_int_equal(st.idle, 2050);
    /* The next window starts with 1 used. */
    expect(run(&lim, &st, TABLE_TAKE, 9, 1050), true, 0, 1000);
    expect(run(&lim, &st, TABLE_TAKE, 1, 1051), false, 0, 999);
    /* DEBIT 0 is a PEEK of 0: nothing changes. */
    expect(run(&lim, &st, TABLE_DEBIT, 0, 1052), true, 0, 998);
    assert_int_equal(st.data, 10);
}

/* A token bucket's tokens go negative; refills pay the debt back first. */
static void test_algo_bucket_debit_pays_back(void **state)
{
    struct table_limits lim = bucket(5, 1, 100, false);
    struct algo_state st = { 0 };

    (void)state;
    expect(run(&lim, &st, TABLE_TAKE, 2, 0), true, 3, 100);
    expect(run(&lim, &st, TABLE_DEBIT, 7, 10), false, 0, 90);     /* tokens -4 */
    assert_int_equal(st.data, 9);                                   /* deficit 9 > cap */
    assert_int_equal(st.idle, 900);
    assert_int_equal(algo_retry_ms(&lim, 10, &st), 490);    /* the refill at 500 */
    /* Refills at 100, 200, 300, 400 bring it back to 0, at 500 to 1. */
    expect(run(&lim, &st, TABLE_TAKE, 1, 450), false, 0, 50);
    assert_int_equal(st.data, 0);       /* deficit 5 = cap: tokens 0, encoded as tokens */
    assert_int_equal(algo_retry_ms(&lim, 450, &st), 50);
    expect(run(&lim, &st, TABLE_TAKE, 1, 500), true, 0, 100);
    expect(run(&lim, &st, TABLE_PEEK, 1, 900), true, 4, 100);
    expect(run(&lim, &st, TABLE_PEEK, 1, 1000), true, 5, 0);
}

static void test_algo_bucket_debit_strict(void **state)
{
    struct table_limits lim = bucket(3, 1, 100, true);
    struct algo_state st = { 0 };

    (void)state;
    expect(run(&lim, &st, TABLE_DEBIT, 5, 0), false, 0, 100);      /* tokens -2 */
    /* A denied TAKE restarts a strict bucket's clock, debt and all. */
    expect(run(&lim, &st, TABLE_TAKE, 1, 150), false, 0, 100);
    expect(run(&lim, &st, TABLE_TAKE, 1, 250), false, 0, 100);
    /* The refill at 250 paid the debt (tokens 0); left alone, 350 gives one. */
    expect(run(&lim, &st, TABLE_PEEK, 1, 349), false, 0, 1);
    expect(run(&lim, &st, TABLE_TAKE, 1, 350), true, 0, 100);
}

/* The sliding window counts the excess: denied until it slides out. */
static void test_algo_sliding_debit_counts(void **state)
{
    struct table_limits lim = sliding(10, 1000);
    struct algo_state st = { 0 };

    (void)state;
    expect(run(&lim, &st, TABLE_DEBIT, 25, 0), false, 0, 1000);
    assert_int_equal(st.data & 0xffffff, 25);
    expect(run(&lim, &st, TABLE_TAKE, 1, 999), false, 0, 1);
    /* Next window: 25 * (1000 - 600) / 1000 = 10 of the previous still count. */
    expect(run(&lim, &st, TABLE_TAKE, 1, 1600), false, 0, 400);
    /* At 1640 the previous weighs 25 * 0.36 = 9: one credit. */
    expect(run(&lim, &st, TABLE_TAKE, 1, 1640), true, 0, 360);
    expect(run(&lim, &st, TABLE_DEBIT, 1, 1641), false, 0, 359);
}

/* A count above a limit since lowered (no debt flag) keeps its old meaning:
 * a window has nothing left until its end, a bucket is full; only a
 * DEBIT's state (the flag) carries a debt. */
static void test_algo_lowered_limit_is_no_debt(void **state)
{
    struct table_limits w = window(10, 1000), b = bucket(5, 1, 100, false);
    struct algo_state st = { .idle = 1500, .data = 15 };

    (void)state;
    expect(run(&w, &st, TABLE_PEEK, 1, 900), false, 0, 600);
    assert_int_equal(algo_retry_ms(&w, 900, &st), 600);
    expect(run(&w, &st, TABLE_TAKE, 1, 1499), false, 0, 1);
    expect(run(&w, &st, TABLE_TAKE, 1, 1500), true, 9, 1000);
    st = (struct algo_state){ .idle = 1500, .data = 15, .debt = true };
    /* The same words as a debt: 15 used in the window that ends at 1500 - 1000. */
    expect(run(&w, &st, TABLE_PEEK, 1, 900), true, 5, 600);
    st = (struct algo_state){ .idle = 1500, .data = 7 };
    expect(run(&b, &st, TABLE_PEEK, 1, 900), true, 5, 0);
    st = (struct algo_state){ .idle = 1500, .data = 7, .debt = true };
    expect(run(&b, &st, TABLE_PEEK, 1, 900), false, 0, 100);   /* 1 refill to go: -1 */
    expect(run(&b, &st, TABLE_DEBIT, 1, 900), false, 0, 100);  /* the refill at 900 was in */
    assert_true(st.debt);
    assert_int_equal(st.data, 7);
    expect(run(&b, &st, TABLE_TAKE, 1, 1400), true, 2, 100);   /* 5 refills: 3 tokens */
    assert_false(st.debt);
}

/* A debt is at most ALGO_DEBT_WINDOWS limits, whatever was charged, so the
 * counter pays it back within as many windows (refills) after the current
 * one (docs/protocol.md "DEBIT"). */
static void test_algo_debit_bounded(void **state)
{
    struct table_limits w = window(10, 1000), b = bucket(5, 1, 100, false);
    struct table_limits s = sliding(10, 1000), big = sliding(RULES_SLIDING_BIG, 1000);
    struct algo_state st = { 0 };

    (void)state;
    assert_int_equal(ALGO_DEBT_WINDOWS, 4);
    /* window: 10 used + 40 of debt; windows ending at 1000..4000 pay it. */
    expect(run(&w, &st, TABLE_DEBIT, UINT64_MAX, 0), false, 0, 1000);
    assert_int_equal(st.data, 50);
    assert_true(st.debt);
    assert_int_equal(st.idle, 5000);
    expect(run(&w, &st, TABLE_DEBIT, 1000000000000ULL, 10), false, 0, 990);
    assert_int_equal(st.data, 50);
    assert_int_equal(algo_retry_ms(&w, 10, &st), 4990);
    expect(run(&w, &st, TABLE_TAKE, 1, 4999), false, 0, 1);
    expect(run(&w, &st, TABLE_TAKE, 1, 5000), true, 9, 1000);
    /* A counter past the bound (a debt from before it) is brought down to it. */
    st = (struct algo_state){ .idle = 100000, .data = 1000, .debt = true };
    expect(run(&w, &st, TABLE_DEBIT, 1, 0), false, 0, 1000);
    assert_int_equal(st.data, 50);
    assert_int_equal(st.idle, 5000);
    /* token bucket: tokens down to -20 (a deficit of 25), 21 refills to one. */
    memset(&st, 0, sizeof(st));
    expect(run(&b, &st, TABLE_DEBIT, UINT64_MAX, 0), false, 0, 100);
    assert_int_equal(st.data, 25);
    assert_int_equal(st.idle, 2500);
    expect(run(&b, &st, TABLE_DEBIT, 7, 50), false, 0, 50);
    assert_int_equal(st.data, 25);
    assert_int_equal(algo_retry_ms(&b, 50, &st), 2050);
    expect(run(&b, &st, TABLE_TAKE, 1, 2099), false, 0, 1);
    expect(run(&b, &st, TABLE_TAKE, 1, 2100), true, 0, 100);
    /* sliding window: the count stops at 5 limits, or at what the field holds. */
    memset(&st, 0, sizeof(st));
    run(&s, &st, TABLE_DEBIT, UINT64_MAX, 0);
    assert_int_equal(st.data & ALGO_SLIDING_MAX, 50);
    run(&s, &st, TABLE_DEBIT, 3, 1);
    assert_int_equal(st.data & ALGO_SLIDING_MAX, 50);
    memset(&st, 0, sizeof(st));
    run(&big, &st, TABLE_DEBIT, UINT64_MAX, 0);
    assert_int_equal(st.data & ALGO_SLIDING_MAX, ALGO_SLIDING_MAX);
}

/* Where a window or a refill is so long that the bound does not fit in
 * the state word, the debt saturates where the word ends, never wraps. */
static void test_algo_debit_saturates(void **state)
{
    struct table_limits w = window(1, ALGO_SPAN_MAX);
    struct table_limits b = bucket(1, 1, ALGO_SPAN_MAX, false);
    uint64_t late = ALGO_IDLE_MAX - ALGO_SPAN_MAX - 5;
    struct algo_state st = { 0 };

    (void)state;
    run(&w, &st, TABLE_DEBIT, UINT64_MAX, late);
    assert_true(st.data <= 5);
    assert_true(st.idle <= ALGO_IDLE_MAX);
    expect(run(&w, &st, TABLE_TAKE, 1, late + 1000), false, 0, ALGO_SPAN_MAX - 1000);
    run(&w, &st, TABLE_DEBIT, UINT64_MAX, late + 5);
    assert_true(st.idle <= ALGO_IDLE_MAX);
    memset(&st, 0, sizeof(st));
    run(&b, &st, TABLE_DEBIT, UINT64_MAX, late);
    assert_true(st.data <= 5);
    assert_true(st.idle <= ALGO_IDLE_MAX);
    expect(run(&b, &st, TABLE_TAKE, 1, late + 1000), false, 0, ALGO_SPAN_MAX - 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_algo_window_first_take),
        cmocka_unit_test(test_algo_window_reset_timing),
        cmocka_unit_test(test_algo_window_all_or_nothing),
        cmocka_unit_test(test_algo_window_denied_fresh_starts_nothing),
        cmocka_unit_test(test_algo_peek_and_take_zero_change_nothing),
        cmocka_unit_test(test_algo_reset_forgets),
        cmocka_unit_test(test_algo_bucket_discrete_refill),
        cmocka_unit_test(test_algo_bucket_amount_above_one),
        cmocka_unit_test(test_algo_bucket_all_or_nothing),
        cmocka_unit_test(test_algo_bucket_strict_restarts_clock),
        cmocka_unit_test(test_algo_sliding_weighted_estimate),
        cmocka_unit_test(test_algo_sliding_all_or_nothing),
        cmocka_unit_test(test_algo_check_limits),
        cmocka_unit_test(test_algo_times_saturate),
        cmocka_unit_test(test_algo_retry_matches_stepping),
        cmocka_unit_test(test_algo_retry_after_debit),
        cmocka_unit_test(test_algo_window_debit_carries),
        cmocka_unit_test(test_algo_window_debit_fits),
        cmocka_unit_test(test_algo_bucket_debit_pays_back),
        cmocka_unit_test(test_algo_bucket_debit_strict),
        cmocka_unit_test(test_algo_sliding_debit_counts),
        cmocka_unit_test(test_algo_debit_bounded),
        cmocka_unit_test(test_algo_debit_saturates),
        cmocka_unit_test(test_algo_lowered_limit_is_no_debt),
    };

    return cmocka_run_group_tests_name("algo", tests, NULL, NULL);
}
