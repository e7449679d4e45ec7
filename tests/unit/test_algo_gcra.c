/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for common/algo_gcra.c: the continuously refilling token
 * bucket and algorithm gcra on the packed slot state, with injected times:
 * the bursty token-bucket design's worked example exactly, redis-cell's
 * documented CL.THROTTLE answers, fractional rates, boundaries, DEBIT and
 * saturation at the state word's ends; and the one GCRA shared with
 * CL.THROTTLE's ad-hoc buckets (daemon/adhoc_algo.c).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "daemon/adhoc.h"
#include "algo.h"
#include "algo_gcra.h"
#include "eval.h"

static struct table_limits cont(uint64_t cap, uint64_t amount, uint64_t period)
{
    struct table_limits lim;

    memset(&lim, 0, sizeof(lim));
    lim.algo = RULES_ALGO_TOKEN_BUCKET;
    lim.continuous = true;
    lim.credit_limit = cap;
    lim.reset_ms = period;
    lim.refill_amount = amount;
    lim.refill_ms = period;
    return lim;
}

static struct table_limits gcra(uint64_t limit, uint64_t count, uint64_t period)
{
    struct table_limits lim = cont(limit, count, period);

    lim.algo = RULES_ALGO_GCRA;
    lim.continuous = false;
    return lim;
}

static struct table_result run(const struct table_limits *lim, struct algo_state *st,
                               enum table_op op, uint64_t n, uint64_t now)
{
    struct table_result res;

    memset(&res, 0xa5, sizeof(res));
    algo_apply(lim, op, n, now, st, st, &res);
    return res;
}

/* The bursty design's example: a bucket of 10 refilling 5 per second; 10
 * requests at once, two more 200 ms later (one allowed, one dropped), 6
 * tokens 1.2 s after that. */
static void test_algo_gcra_bursty_example(void **state)
{
    struct table_limits lim = cont(10, 5, 1000);
    struct algo_state st = { 0 };
    struct table_result r;
    uint64_t t0 = 500;

    (void)state;
    assert_int_equal(algo_check(&lim), 0);
    for (int i = 0; i < 10; i++) {
        r = run(&lim, &st, TABLE_TAKE, 1, t0);
        assert_true(r.allowed);
        assert_int_equal(r.credit, 9 - i);
    }
    r = run(&lim, &st, TABLE_TAKE, 1, t0);
    assert_false(r.allowed);
    assert_int_equal(r.reset_ms, 200);                  /* the next token */
    assert_int_equal(eval_ms_to_s(r.reset_ms), 1);      /* never 0 while denied */
    assert_int_equal(algo_retry_ms(&lim, t0, &st), 200);
    r = run(&lim, &st, TABLE_TAKE, 1, t0 + 200);
    assert_true(r.allowed);
    assert_int_equal(r.credit, 0);
    r = run(&lim, &st, TABLE_TAKE, 1, t0 + 200);
    assert_false(r.allowed);
    r = run(&lim, &st, TABLE_PEEK, 1, t0 + 200 + 1200);
    assert_true(r.allowed);
    assert_int_equal(r.credit, 6);
    /* ... and the steady rate after: 5 a second. */
    for (int i = 0; i < 6; i++)
        assert_true(run(&lim, &st, TABLE_TAKE, 1, t0 + 1400).allowed);
    assert_false(run(&lim, &st, TABLE_TAKE, 1, t0 + 1400).allowed);
    assert_false(run(&lim, &st, TABLE_TAKE, 1, t0 + 1599).allowed);
    assert_true(run(&lim, &st, TABLE_TAKE, 1, t0 + 1600).allowed);
    /* Full 2 s after it was empty: the state is the absent one's. */
    r = run(&lim, &st, TABLE_PEEK, 1, t0 + 3600);
    assert_int_equal(r.credit, 10);
    assert_int_equal(r.reset_ms, 0);
    assert_true(st.idle <= t0 + 3600);
}

/* 3 a second is 333 1/3 ms a token: kept exactly, not rounded per token. */
static void test_algo_gcra_fractional_rate(void **state)
{
    struct table_limits lim = cont(3, 3, 1000);
    struct algo_state st = { 0 };
    struct table_result r;

    (void)state;
    for (int i = 0; i < 3; i++)
        assert_true(run(&lim, &st, TABLE_TAKE, 1, 1000).allowed);
    assert_false(run(&lim, &st, TABLE_TAKE, 1, 1333).allowed);
    assert_true(run(&lim, &st, TABLE_TAKE, 1, 1334).allowed);   /* 1333 1/3 */
    r = run(&lim, &st, TABLE_PEEK, 1, 1666);
    assert_int_equal(r.credit, 0);
    assert_int_equal(r.reset_ms, 1);                            /* at 1666 2/3 */
    r = run(&lim, &st, TABLE_PEEK, 1, 2333);
    assert_int_equal(r.credit, 2);
    r = run(&lim, &st, TABLE_PEEK, 1, 2334);
    assert_int_equal(r.credit, 3);
    assert_int_equal(r.reset_ms, 0);
    /* 1000 takes at 3 a second, one every 333 or 334 ms: no drift. */
    st = (struct algo_state){ 0 };
    for (int i = 0; i < 3; i++)
        assert_true(run(&lim, &st, TABLE_TAKE, 1, 0).allowed);
    for (uint64_t k = 1; k <= 1000; k++) {
        uint64_t at = (k * 1000 + 2) / 3;       /* ceil(k * 1000 / 3) */

        assert_false(run(&lim, &st, TABLE_TAKE, 1, at - 1).allowed);
        assert_true(run(&lim, &st, TABLE_TAKE, 1, at).allowed);
    }
}

/* redis-cell's README: CL.THROTTLE user123 15 30 60 1 -> limit 16,
 * remaining 15, retry_after -1, reset_after 2 s; as a rule: credit_limit 16,
 * refill_amount 30, refill period 60 s. */
static void test_algo_gcra_redis_cell_readme(void **state)
{
    struct table_limits lim = gcra(16, 30, 60000);
    struct algo_state st = { 0 };
    struct table_result r;

    (void)state;
    assert_int_equal(algo_check(&lim), 0);
    r = run(&lim, &st, TABLE_TAKE, 1, 10000);
    assert_true(r.allowed);
    assert_int_equal(r.credit, 15);
    assert_int_equal(r.reset_ms, 2000);                 /* reset_after: full again */
    for (int i = 0; i < 15; i++)
        assert_true(run(&lim, &st, TABLE_TAKE, 1, 10000).allowed);
    r = run(&lim, &st, TABLE_TAKE, 1, 10000);
    assert_false(r.allowed);
    assert_int_equal(r.credit, 0);
    assert_int_equal(r.reset_ms, 32000);                /* 16 x 2 s */
    assert_int_equal(algo_retry_ms(&lim, 10000, &st), 2000);   /* retry_after */
    assert_false(run(&lim, &st, TABLE_TAKE, 1, 11999).allowed);
    assert_true(run(&lim, &st, TABLE_TAKE, 1, 12000).allowed);
    /* A quantity above the limit is never allowed (retry_after -1) and takes nothing. */
    st = (struct algo_state){ 0 };
    r = run(&lim, &st, TABLE_TAKE, 17, 10000);
    assert_false(r.allowed);
    assert_int_equal(r.credit, 16);
    assert_int_equal(st.idle, 0);
}

/* The rule algorithm and CL.THROTTLE's ad-hoc bucket answer alike: the same
 * GCRA, at ms and at ns. */
static void test_algo_gcra_same_as_cl_throttle(void **state)
{
    struct adhoc_gcra p = { .max_burst = 4, .count = 2, .period_s = 1, .quantity = 1 };
    struct table_limits lim = gcra(5, 2, 1000);
    struct algo_state st = { 0 };
    struct adhoc_gcra_result ar;
    int64_t tat = 0, idle;
    bool exists = false;
    uint64_t seed = 42;

    (void)state;
    assert_int_equal(adhoc_gcra_check(&p), 0);
    for (uint64_t now = 1000000; now < 1000000 + 60000;) {
        struct table_result r = run(&lim, &st, TABLE_TAKE, 1, now);

        adhoc_gcra_step(&p, exists, (int64_t)now * 1000000, &tat, &ar, &idle);
        exists = true;
        assert_int_equal(r.allowed, !ar.limited);
        assert_int_equal(r.credit, (uint64_t)ar.remaining);
        assert_int_equal(r.reset_ms * 1000000, (uint64_t)ar.reset_after_ns);
        if (ar.limited)
            assert_int_equal(algo_retry_ms(&lim, now, &st) * 1000000,
                             (uint64_t)ar.retry_after_ns);
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        now += (seed >> 33) % 700;
    }
}

static void test_algo_gcra_step_core(void **state)
{
    struct algo_gcra_step s;
    __int128 tat = 0;

    (void)state;
    /* dvt 10, inc 4 at 0: allowed twice, then 2 units short. */
    algo_gcra_step(10, 4, 0, &tat, &s);
    assert_false(s.limited);
    assert_true(s.ttl == 4 && tat == 4);
    algo_gcra_step(10, 4, 0, &tat, &s);
    assert_true(!s.limited && tat == 8);
    algo_gcra_step(10, 4, 0, &tat, &s);
    assert_true(s.limited && s.wait == 2 && s.ttl == 8 && tat == 8);
    algo_gcra_step(10, 11, 100, &tat, &s);
    assert_true(s.limited && s.wait == -1);
}

static void test_algo_gcra_boundaries(void **state)
{
    struct table_limits lim = cont(1, 1, 200);
    struct algo_state st = { 0 };

    (void)state;
    assert_true(run(&lim, &st, TABLE_TAKE, 1, 0).allowed);
    assert_false(run(&lim, &st, TABLE_TAKE, 1, 199).allowed);
    assert_true(run(&lim, &st, TABLE_TAKE, 1, 200).allowed);
    /* PEEK and TAKE of 0 change nothing; RESET forgets. */
    {
        struct algo_state before = st;
        struct table_result r = run(&lim, &st, TABLE_PEEK, 1, 300);

        assert_false(r.allowed);
        assert_memory_equal(&before, &st, sizeof(st));
        run(&lim, &st, TABLE_TAKE, 0, 300);
        assert_memory_equal(&before, &st, sizeof(st));
        r = run(&lim, &st, TABLE_RESET, 0, 300);
        assert_true(r.allowed);
        assert_int_equal(st.idle, 0);
    }
    /* algo_check: the ranges. */
    assert_int_equal(algo_check(&(struct table_limits){ .algo = RULES_ALGO_GCRA,
                                                        .credit_limit = 1, .refill_amount = 1,
                                                        .refill_ms = 0 }), -EINVAL);
    assert_int_equal(algo_check(&(struct table_limits){ .algo = RULES_ALGO_GCRA,
                                                        .credit_limit = 1, .refill_amount = 0,
                                                        .refill_ms = 1 }), -EINVAL);
    lim = gcra(1 << 20, 1, ALGO_SPAN_MAX >> 20);
    assert_int_equal(algo_check(&lim), 0);
    lim.refill_ms++;
    assert_int_equal(algo_check(&lim), -EINVAL);
    /* A period past 2^39 ms, even at a rate that refills in time. */
    lim = gcra(1, ALGO_DATA_MAX, ALGO_SPAN_MAX + 1);
    assert_int_equal(algo_check(&lim), -EINVAL);
    /* A rate above the capacity is fine: 1000 a second, burst 1. */
    lim = gcra(1, 1000, 1000);
    assert_int_equal(algo_check(&lim), 0);
    st = (struct algo_state){ 0 };
    assert_true(run(&lim, &st, TABLE_TAKE, 1, 5).allowed);
    assert_false(run(&lim, &st, TABLE_TAKE, 1, 5).allowed);
    assert_true(run(&lim, &st, TABLE_TAKE, 1, 6).allowed);
}

/* DEBIT charges always, into debt (at most ALGO_DEBT_WINDOWS buckets), paid
 * back by the refill; without the debt flag a TAT past a full bucket is a
 * limit since lowered: empty, not in debt. */
static void test_algo_gcra_debit(void **state)
{
    struct table_limits lim = cont(10, 5, 1000);
    struct algo_state st = { 0 };
    struct table_result r;

    (void)state;
    r = run(&lim, &st, TABLE_DEBIT, 15, 1000);
    assert_false(r.allowed);
    assert_int_equal(r.credit, 0);
    assert_true(st.debt);
    /* 5 tokens of debt and one to take: 6 x 200 ms. */
    assert_int_equal(algo_retry_ms(&lim, 1000, &st), 1200);
    assert_false(run(&lim, &st, TABLE_TAKE, 1, 2199).allowed);
    assert_true(run(&lim, &st, TABLE_TAKE, 1, 2200).allowed);
    /* Saturation: 5 buckets (50 tokens) at most, whatever is charged. */
    st = (struct algo_state){ 0 };
    run(&lim, &st, TABLE_DEBIT, UINT64_MAX, 1000);
    assert_int_equal(algo_retry_ms(&lim, 1000, &st), 41 * 200);
    run(&lim, &st, TABLE_DEBIT, UINT64_MAX, 1000);
    assert_int_equal(algo_retry_ms(&lim, 1000, &st), 41 * 200);
    /* A lowered limit: the same word under a bucket of 2 is empty, not
     * 48 tokens short (no debt flag). */
    st = (struct algo_state){ 0 };
    run(&lim, &st, TABLE_TAKE, 10, 1000);
    lim.credit_limit = 2;
    r = run(&lim, &st, TABLE_PEEK, 1, 1000);
    assert_int_equal(r.credit, 0);
    assert_int_equal(algo_retry_ms(&lim, 1000, &st), 200);
}

/* Big numbers: no overflow, times saturate at ALGO_IDLE_MAX. */
static void test_algo_gcra_saturation(void **state)
{
    struct table_limits lim = gcra(ALGO_DATA_MAX, ALGO_DATA_MAX, ALGO_SPAN_MAX);
    struct algo_state st = { 0 };
    struct table_result r;
    uint64_t late = ALGO_IDLE_MAX - 10;

    (void)state;
    assert_int_equal(algo_check(&lim), 0);
    r = run(&lim, &st, TABLE_TAKE, ALGO_DATA_MAX, 1000);
    assert_true(r.allowed);
    assert_int_equal(r.credit, 0);
    assert_int_equal(st.idle, 1000 + ALGO_SPAN_MAX);
    assert_true(st.data < ALGO_DATA_MAX);
    r = run(&lim, &st, TABLE_TAKE, UINT64_MAX, 1000);
    assert_false(r.allowed);
    r = run(&lim, &st, TABLE_DEBIT, UINT64_MAX, 1000);
    assert_false(r.allowed);
    assert_true(st.idle <= ALGO_IDLE_MAX);
    /* Near the end of the idle field: saturates, never wraps. */
    lim = cont(10, 1, ALGO_SPAN_MAX / 10);
    st = (struct algo_state){ 0 };
    r = run(&lim, &st, TABLE_TAKE, 10, late);
    assert_true(r.allowed);
    assert_int_equal(st.idle, ALGO_IDLE_MAX);
    assert_true(st.data < 1);
    r = run(&lim, &st, TABLE_PEEK, 1, late);
    assert_true(r.credit < 10);         /* what the field holds is spent, nothing wrapped */
    assert_int_equal(r.reset_ms, 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_algo_gcra_bursty_example),
        cmocka_unit_test(test_algo_gcra_fractional_rate),
        cmocka_unit_test(test_algo_gcra_redis_cell_readme),
        cmocka_unit_test(test_algo_gcra_same_as_cl_throttle),
        cmocka_unit_test(test_algo_gcra_step_core),
        cmocka_unit_test(test_algo_gcra_boundaries),
        cmocka_unit_test(test_algo_gcra_debit),
        cmocka_unit_test(test_algo_gcra_saturation),
    };

    return cmocka_run_group_tests_name("algo_gcra", tests, NULL, NULL);
}
