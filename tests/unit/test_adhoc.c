/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/adhoc.c: Smyte's token bucket as its post and
 * server define it (refills in whole refill times, check and take, STRICT,
 * client timestamps), redis-cell's GCRA on redis-cell's own test table (to
 * the nanosecond, from a fixed start), and the table: parameters are part
 * of a bucket's name, a full table refuses new keys, idle buckets are reused.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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

static void test_adhoc_table(void **state)
{
    struct adhoc_tb p = { .max = 2, .refill = 2, .refill_ms = 60000, .take = 1 };
    struct adhoc *a = NULL;
    int64_t before;
    char key[32];
    int full = 0;

    (void)state;
    assert_int_equal(adhoc_new(64, 64, &a), 0);
    assert_int_equal(adhoc_tb(a, "k", 1, &p, 1000, 1000, &before), 0);
    assert_int_equal(before, 2);
    assert_int_equal(adhoc_tb(a, "k", 1, &p, 1000, 1000, &before), 0);
    assert_int_equal(before, 1);
    /* Other parameters: another bucket. */
    p.max = 3;
    assert_int_equal(adhoc_tb(a, "k", 1, &p, 1000, 1000, &before), 0);
    assert_int_equal(before, 3);
    /* 64 slots: more live keys than that are refused, never evicted. */
    for (int i = 0; i < 200; i++) {
        int n = snprintf(key, sizeof(key), "key%d", i);

        if (adhoc_tb(a, key, (size_t)n, &p, 1000, 1000, &before) == -ENOSPC)
            full++;
    }
    assert_true(full >= 200 - 64);
    /* The first bucket is still there, with its count. */
    p.max = 2;
    assert_int_equal(adhoc_tb(a, "k", 1, &p, 1000, 1000, &before), 0);
    assert_int_equal(before, 0);
    /* Once they are full again their slots are reused: one new key per
     * shard of one slot (40 keys land in about 30 of the 64). */
    full = 0;
    for (int i = 200; i < 240; i++) {
        int n = snprintf(key, sizeof(key), "key%d", i);

        if (adhoc_tb(a, key, (size_t)n, &p, 500000, 500000, &before) == 0)
            full++;
    }
    assert_true(full >= 20);
    adhoc_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adhoc_tb_transcript),
        cmocka_unit_test(test_adhoc_tb_refill_take),
        cmocka_unit_test(test_adhoc_tb_strict),
        cmocka_unit_test(test_adhoc_gcra_cell_cases),
        cmocka_unit_test(test_adhoc_gcra_check),
        cmocka_unit_test(test_adhoc_table),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
