/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of server/replay_order.c: the reorder window of divvyctl replay
 * hands decisions out in (time, arrival) order once the window has passed
 * them, counts what arrives behind it as late, holds no more than its memory bound, and
 * owns copies of the requests.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "replay_order.h"

/* A decision at unix_ms @t (its n tells records apart) with one pair. */
static void decision(struct dlog_decision *d, uint64_t t, uint64_t n, const char *value)
{
    memset(d, 0, sizeof(*d));
    d->unix_ms = t;
    d->mono_ms = t;
    d->op = 0;
    d->n = n;
    d->n_kv = 1;
    d->kv[0] = (struct dlog_kv){ .key = "user", .key_len = 4, .value = value,
                                 .value_len = (uint32_t)strlen(value) };
}

static uint64_t pop_n(struct replay_order *o, bool drain)
{
    const struct replay_rec *r = replay_order_pop(o, drain);
    uint64_t n;

    if (!r)
        return 0;
    n = r->n;
    replay_order_done(o, r);
    return n;
}

static void test_replay_order_sorts_within_window(void **state)
{
    struct replay_order *o = replay_order_new(1000, 1 << 20);
    struct dlog_decision d;
    /* Times out of order by up to 600 ms, as two workers' blocks interleave. */
    static const uint64_t t[] = { 100, 700, 200, 800, 300, 250 };

    (void)state;
    assert_non_null(o);
    for (unsigned i = 0; i < 6; i++) {
        decision(&d, t[i], i + 1, "a");
        assert_int_equal(replay_order_push(o, &d, t[i]), 0);
    }
    /* Latest 800: nothing is 1000 ms behind it yet. */
    assert_int_equal(pop_n(o, false), 0);
    decision(&d, 1250, 7, "a");
    assert_int_equal(replay_order_push(o, &d, 1250), 0);
    /* 1250 - 1000 = 250: 100, 200, 250 are due, in time order. */
    assert_int_equal(pop_n(o, false), 1);
    assert_int_equal(pop_n(o, false), 3);
    assert_int_equal(pop_n(o, false), 6);
    assert_int_equal(pop_n(o, false), 0);
    assert_int_equal(replay_order_held(o), 4);
    /* The end: the rest in order. */
    assert_int_equal(pop_n(o, true), 5);
    assert_int_equal(pop_n(o, true), 2);
    assert_int_equal(pop_n(o, true), 4);
    assert_int_equal(pop_n(o, true), 7);
    assert_int_equal(pop_n(o, true), 0);
    replay_order_free(o);
}

static void test_replay_order_equal_times_keep_arrival(void **state)
{
    struct replay_order *o = replay_order_new(0, 1 << 20);
    struct dlog_decision d;

    (void)state;
    for (unsigned i = 1; i <= 50; i++) {
        decision(&d, 42, i, "a");
        assert_int_equal(replay_order_push(o, &d, 42), 0);
    }
    for (unsigned i = 1; i <= 50; i++)
        assert_int_equal(pop_n(o, true), i);
    replay_order_free(o);
}

static void test_replay_order_late_is_refused(void **state)
{
    struct replay_order *o = replay_order_new(10000, 1 << 20);
    struct dlog_decision d;

    (void)state;
    decision(&d, 50000, 1, "a");
    assert_int_equal(replay_order_push(o, &d, 50000), 0);
    decision(&d, 61000, 2, "a");
    assert_int_equal(replay_order_push(o, &d, 61000), 0);
    assert_int_equal(pop_n(o, false), 1);       /* 50000 handed out */
    /* 9 s behind the latest but behind what was handed out: late. */
    decision(&d, 49999, 3, "a");
    assert_int_equal(replay_order_push(o, &d, 49999), 1);
    /* Exactly at the handed-out time, and later ones: still in order. */
    decision(&d, 50000, 4, "a");
    assert_int_equal(replay_order_push(o, &d, 50000), 0);
    decision(&d, 52000, 5, "a");
    assert_int_equal(replay_order_push(o, &d, 52000), 0);
    assert_int_equal(pop_n(o, false), 4);
    assert_int_equal(pop_n(o, false), 0);       /* 52000 is 9 s behind 61000 */
    assert_int_equal(pop_n(o, true), 5);
    assert_int_equal(pop_n(o, true), 2);
    replay_order_free(o);
}

static void test_replay_order_max_bytes(void **state)
{
    struct replay_order *probe = replay_order_new(0, 1), *o;
    struct dlog_decision d;
    size_t one;

    (void)state;
    /* What one such record takes. */
    decision(&d, 1, 1, "a");
    assert_int_equal(replay_order_push(probe, &d, 1), 0);
    one = replay_order_bytes(probe);
    assert_true(one > 0);
    replay_order_free(probe);

    o = replay_order_new(3600000, 3 * one);
    for (unsigned i = 1; i <= 3; i++) {
        decision(&d, 1000 + i, i, "a");
        assert_int_equal(replay_order_push(o, &d, 1000 + i), 0);
        assert_int_equal(pop_n(o, false), 0);
    }
    /* A fourth: the oldest goes out early, the window is bounded by memory. */
    decision(&d, 1004, 4, "a");
    assert_int_equal(replay_order_push(o, &d, 1004), 0);
    assert_int_equal(pop_n(o, false), 1);
    assert_int_equal(pop_n(o, false), 0);
    assert_int_equal(replay_order_held(o), 3);
    assert_int_equal(replay_order_bytes(o), 3 * one);
    /* Even a window too small for one record holds one at a time. */
    replay_order_free(o);
    o = replay_order_new(3600000, 1);
    assert_int_equal(replay_order_push(o, &d, 1004), 0);
    assert_int_equal(pop_n(o, false), 0);
    assert_int_equal(replay_order_push(o, &d, 1005), 0);
    assert_int_equal(pop_n(o, false), 4);
    replay_order_free(o);
}

static void test_replay_order_owns_copies(void **state)
{
    struct replay_order *o = replay_order_new(0, 1 << 20);
    const struct replay_rec *r;
    struct dlog_decision d;
    char value[16] = "alice";
    char big[70000];

    (void)state;
    decision(&d, 1, 1, value);
    d.flags = DLOG_F_ALLOWED | DLOG_F_PRIVILEGED;
    d.decider_id = 0x1234;
    assert_int_equal(replay_order_push(o, &d, 1), 0);
    strcpy(value, "mallory");
    r = replay_order_pop(o, true);
    assert_non_null(r);
    assert_int_equal(r->n_kv, 1);
    assert_string_equal(r->kv[0].key, "user");
    assert_string_equal(r->kv[0].value, "alice");
    assert_int_equal(r->kv[0].value_len, 5);
    assert_int_equal(r->flags, DLOG_F_ALLOWED | DLOG_F_PRIVILEGED);
    assert_int_equal(r->decider_id, 0x1234);
    replay_order_done(o, r);
    /* A value over the 64 KiB of a request: refused, nothing held. */
    memset(big, 'x', sizeof(big));
    decision(&d, 2, 2, "x");
    d.kv[0].value = big;
    d.kv[0].value_len = sizeof(big);
    assert_int_equal(replay_order_push(o, &d, 2), -E2BIG);
    d.n_kv = PROTO_KV_MAX + 1;
    assert_int_equal(replay_order_push(o, &d, 2), -EINVAL);
    assert_int_equal(replay_order_held(o), 0);
    replay_order_free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_order_sorts_within_window),
        cmocka_unit_test(test_replay_order_equal_times_keep_arrival),
        cmocka_unit_test(test_replay_order_late_is_refused),
        cmocka_unit_test(test_replay_order_max_bytes),
        cmocka_unit_test(test_replay_order_owns_copies),
    };

    return cmocka_run_group_tests_name("replay_order", tests, NULL, NULL);
}
