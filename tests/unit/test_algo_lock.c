/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for common/algo_lock.c, the lockout algorithm, with injected times: faillock's
 * two clocks (fail_interval and unlock_time), escalation (factor, cap, remember and its
 * expiry), the ramping delay delay(k), and the answers PEEK, TAKE and RESET give.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "algo.h"
#include "algo_lock.h"

#define S 1000ull                   /* one second in ms */
#define T0 (1000 * S)               /* a monotonic clock that is not at 0 */

/* 3 failures per 60 s lock for 600 s; each lock twice the last, at most 1500 s, remembered
 * for 3600 s; no delay. */
static struct table_limits lockout(void)
{
    struct table_limits lim;

    memset(&lim, 0, sizeof(lim));
    lim.algo = RULES_ALGO_LOCKOUT;
    lim.credit_limit = 3;
    lim.reset_ms = 60 * S;
    lim.unlock_ms = 600 * S;
    lim.lock_factor = 2;
    lim.lock_max_ms = 1500 * S;
    lim.remember_ms = 3600 * S;
    return lim;
}

static struct table_result run(const struct table_limits *lim, struct algo_state *st,
                               enum table_op op, uint64_t now)
{
    struct table_result res;

    memset(&res, 0xa5, sizeof(res));
    algo_apply(lim, op, op == TABLE_RESET ? 0 : 1, now, st, st, &res);
    return res;
}

/* @k failures at @now, the last of which locks: returns the lock's length. */
static uint64_t trip(const struct table_limits *lim, struct algo_state *st, uint64_t now)
{
    struct table_result r = { 0 };

    for (uint64_t i = 0; i < lim->credit_limit; i++) {
        r = run(lim, st, TABLE_TAKE, now);
        assert_true(r.allowed);
    }
    assert_int_equal(r.credit, 0);
    return r.reset_ms;
}

static void test_algo_lock_check_bounds(void **state)
{
    struct table_limits lim = lockout();

    (void)state;
    assert_int_equal(algo_check(&lim), 0);
    lim.credit_limit = ALGO_LOCK_COUNT_MAX + 1;
    assert_int_equal(algo_check(&lim), -EINVAL);
    lim = lockout();
    lim.lock_max_ms = lim.unlock_ms - 1;
    assert_int_equal(algo_check(&lim), -EINVAL);
    lim = lockout();
    lim.reset_ms = ALGO_LOCK_INTERVAL_MAX + 1;
    assert_int_equal(algo_check(&lim), -EINVAL);
    lim = lockout();
    lim.delay_after = 4;                    /* past credit_limit */
    lim.delay_ms = S;
    lim.delay_factor = 2;
    lim.delay_max_ms = 10 * S;
    assert_int_equal(algo_check(&lim), -EINVAL);
    lim.delay_after = 2;
    assert_int_equal(algo_check(&lim), 0);
    lim.delay_max_ms = S - 1;
    assert_int_equal(algo_check(&lim), -EINVAL);
}

/* fail_interval counts failures from the first one; unlock_time is the lock's own clock. */
static void test_algo_lock_two_clocks(void **state)
{
    struct table_limits lim = lockout();
    struct algo_state st = { 0 };
    struct table_result r;

    (void)state;
    r = run(&lim, &st, TABLE_TAKE, T0);
    assert_true(r.allowed);
    assert_int_equal(r.credit, 2);
    assert_int_equal(r.reset_ms, 60 * S);
    r = run(&lim, &st, TABLE_TAKE, T0 + 50 * S);
    assert_int_equal(r.credit, 1);
    assert_int_equal(r.reset_ms, 10 * S);
    /* The interval ended at T0 + 60 s: both failures are forgotten. */
    r = run(&lim, &st, TABLE_PEEK, T0 + 60 * S);
    assert_true(r.allowed);
    assert_int_equal(r.credit, 3);
    r = run(&lim, &st, TABLE_TAKE, T0 + 61 * S);
    assert_int_equal(r.credit, 2);
    r = run(&lim, &st, TABLE_TAKE, T0 + 62 * S);
    r = run(&lim, &st, TABLE_TAKE, T0 + 63 * S);
    assert_true(r.allowed);
    assert_int_equal(r.credit, 0);
    assert_int_equal(r.reset_ms, 600 * S);      /* unlock_time, not what is left of 60 s */
    r = run(&lim, &st, TABLE_PEEK, T0 + 63 * S + 599 * S);
    assert_false(r.allowed);
    assert_int_equal(r.credit, 0);
    assert_int_equal(r.reset_ms, S);
    /* A failure while locked is refused and changes nothing. */
    r = run(&lim, &st, TABLE_TAKE, T0 + 100 * S);
    assert_false(r.allowed);
    assert_int_equal(r.reset_ms, 563 * S);
    r = run(&lim, &st, TABLE_PEEK, T0 + 663 * S);
    assert_true(r.allowed);
    assert_int_equal(r.credit, 3);
}

/* Each lock lasts factor times the last, up to the cap. */
static void test_algo_lock_escalation_cap(void **state)
{
    struct table_limits lim = lockout();
    struct algo_state st = { 0 };
    struct algo_lock_view v;
    uint64_t now = T0;

    (void)state;
    assert_int_equal(trip(&lim, &st, now), 600 * S);
    now += 600 * S;
    assert_int_equal(trip(&lim, &st, now), 1200 * S);
    algo_lock_read(&lim, now + S, &st, &v);
    assert_true(v.locked);
    assert_int_equal(v.level, 2);
    assert_int_equal(v.lock_left_ms, 1199 * S);
    now += 1200 * S;
    assert_int_equal(trip(&lim, &st, now), 1500 * S);   /* 2400 s capped */
    now += 1500 * S;
    assert_int_equal(trip(&lim, &st, now), 1500 * S);
    assert_int_equal(algo_lock_ms(&lim, 0), 600 * S);
    assert_int_equal(algo_lock_ms(&lim, 63), 1500 * S);
    lim.lock_factor = 1;
    assert_int_equal(algo_lock_ms(&lim, 5), 600 * S);
}

/* The level is remembered for remember_ms after the last lock (or interval) ends. */
static void test_algo_lock_remember_expiry(void **state)
{
    struct table_limits lim = lockout();
    struct algo_state st = { 0 }, copy;
    uint64_t end;

    (void)state;
    end = T0 + trip(&lim, &st, T0);
    copy = st;
    /* Just before remember_ms has passed: the next lock is escalated. */
    assert_int_equal(trip(&lim, &st, end + 3600 * S - 1), 1200 * S);
    /* At remember_ms: forgotten, the state is absent, the next lock is the first again. */
    st = copy;
    assert_true(st.idle <= end + 3600 * S);
    assert_int_equal(trip(&lim, &st, end + 3600 * S), 600 * S);
    /* A counting interval renews the memory: failures at end + 3000 s keep the level until
     * 3600 s after that interval's end. */
    st = copy;
    run(&lim, &st, TABLE_TAKE, end + 3000 * S);
    assert_int_equal(trip(&lim, &st, end + 3000 * S + 60 * S + 3500 * S), 1200 * S);
    /* remember 0: no escalation at all once the lock is over. */
    lim.remember_ms = 0;
    st = (struct algo_state){ 0 };
    end = T0 + trip(&lim, &st, T0);
    assert_int_equal(trip(&lim, &st, end), 600 * S);
}

/* delay(k) = min(delay * factor^(k - after), max); a PEEK within it is refused with credit. */
static void test_algo_lock_delay(void **state)
{
    struct table_limits lim = lockout();
    struct algo_state st = { 0 };
    struct algo_lock_view v;
    struct table_result r;

    (void)state;
    lim.credit_limit = 6;
    lim.delay_after = 2;
    lim.delay_ms = S;
    lim.delay_factor = 2;
    lim.delay_max_ms = 5 * S;
    assert_int_equal(algo_check(&lim), 0);
    assert_int_equal(algo_lock_delay_ms(&lim, 1), 0);
    assert_int_equal(algo_lock_delay_ms(&lim, 2), S);
    assert_int_equal(algo_lock_delay_ms(&lim, 3), 2 * S);
    assert_int_equal(algo_lock_delay_ms(&lim, 4), 4 * S);
    assert_int_equal(algo_lock_delay_ms(&lim, 5), 5 * S);

    run(&lim, &st, TABLE_TAKE, T0);
    r = run(&lim, &st, TABLE_PEEK, T0);            /* one failure: no delay */
    assert_true(r.allowed);
    run(&lim, &st, TABLE_TAKE, T0 + S);
    r = run(&lim, &st, TABLE_PEEK, T0 + S + 400);
    assert_false(r.allowed);
    assert_int_equal(r.credit, 4);                 /* a delay, not a lock */
    assert_int_equal(r.reset_ms, 600);
    r = run(&lim, &st, TABLE_PEEK, T0 + 2 * S);
    assert_true(r.allowed);
    run(&lim, &st, TABLE_TAKE, T0 + 2 * S);
    run(&lim, &st, TABLE_TAKE, T0 + 4 * S);
    algo_lock_read(&lim, T0 + 5 * S, &st, &v);
    assert_false(v.locked);
    assert_int_equal(v.failures, 4);
    assert_int_equal(v.delay_left_ms, 3 * S);
    assert_int_equal(algo_retry_ms(&lim, T0 + 5 * S, &st), 3 * S);
    r = run(&lim, &st, TABLE_PEEK, T0 + 8 * S - 1);
    assert_false(r.allowed);
    r = run(&lim, &st, TABLE_PEEK, T0 + 8 * S);
    assert_true(r.allowed);
}

/* RESET (a good login, divvyctl unlock) forgets the failures, the lock and the level. */
static void test_algo_lock_reset(void **state)
{
    struct table_limits lim = lockout();
    struct algo_state st = { 0 };
    struct table_result r;

    (void)state;
    trip(&lim, &st, T0);
    r = run(&lim, &st, TABLE_RESET, T0 + S);
    assert_true(r.allowed);
    assert_int_equal(st.idle, 0);
    assert_int_equal(st.data, 0);
    assert_false(st.debt);
    assert_int_equal(trip(&lim, &st, T0 + 2 * S), 600 * S);
}

/* TAKE of more than is left is all-or-nothing; PEEK of a fresh counter changes nothing. */
static void test_algo_lock_all_or_nothing(void **state)
{
    struct table_limits lim = lockout();
    struct algo_state st = { 0 };
    struct table_result r;

    (void)state;
    r = run(&lim, &st, TABLE_PEEK, T0);
    assert_true(r.allowed);
    assert_int_equal(r.reset_ms, 0);
    assert_int_equal(st.idle, 0);
    algo_apply(&lim, TABLE_TAKE, 4, T0, &st, &st, &r);
    assert_false(r.allowed);
    assert_int_equal(st.idle, 0);
    algo_apply(&lim, TABLE_TAKE, 3, T0, &st, &st, &r);
    assert_true(r.allowed);
    assert_true(st.debt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_algo_lock_check_bounds),
        cmocka_unit_test(test_algo_lock_two_clocks),
        cmocka_unit_test(test_algo_lock_escalation_cap),
        cmocka_unit_test(test_algo_lock_remember_expiry),
        cmocka_unit_test(test_algo_lock_delay),
        cmocka_unit_test(test_algo_lock_reset),
        cmocka_unit_test(test_algo_lock_all_or_nothing),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
