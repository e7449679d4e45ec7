/* SPDX-License-Identifier: MIT */
/*
 * Unit: server/dlog_locks.c, the lock periods `divvyctl log --locks` lists,
 * from scripted lockout answers as common/algo_lock.c gives them: a lock
 * that expires (with refusals during it), one a RESET ends (its uid and
 * pid), one still open at the end, one seen only by its refusals, one
 * cleared where the log does not show; delays and a RESET of a
 * non-resettable rule are no lock events; the rule and actor filters.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlog_locks.h"
#include "table.h"

#define T0   1795867200000ull
#define S(x) ((uint64_t)(x) * 1000)

#define LOGIN 0xa1
#define OTHER 0xb2

static const char *const keys[] = { "user", "rhost" };
static const uint32_t lens[] = { 4, 5 };

static struct dlog_query_rules *rules(void)
{
    struct dlog_query_rules *m = dlog_query_rules_new();
    struct dlog_rule r[2];
    struct dlog_rules rs = { .generation = 1, .total = 2, .n = 2, .rule = r };

    assert_non_null(m);
    memset(r, 0, sizeof(r));
    for (unsigned i = 0; i < 2; i++) {
        r[i].id = i ? OTHER : LOGIN;
        r[i].id_str = i ? "api" : "login-user-source";
        r[i].id_len = (uint32_t)strlen(r[i].id_str);
        r[i].algo = i ? RULES_ALGO_WINDOW : RULES_ALGO_LOCKOUT;
        r[i].credit_limit = 3;
        r[i].reset_ms = 900000;
        r[i].prefix4 = r[i].prefix6 = -1;
        r[i].n_actor = 2;
        r[i].actor[0] = keys[0];
        r[i].actor[1] = keys[1];
        r[i].actor_len[0] = lens[0];
        r[i].actor_len[1] = lens[1];
    }
    assert_int_equal(dlog_query_rules_add(m, &rs), 0);
    return m;
}

/* Feeds one decision of @user from 203.0.113.9: @op, and the login rule's
 * answer (@allowed, @credit, @reset_s). */
static void feed(struct dlog_locks *l, const struct dlog_query_rules *m, uint64_t t,
                 enum table_op op, const char *user, bool allowed, uint64_t credit,
                 uint64_t reset_s)
{
    struct dlog_decision d;

    memset(&d, 0, sizeof(d));
    d.unix_ms = T0 + t;
    d.op = (uint8_t)op;
    d.n = 1;
    d.flags = (allowed ? DLOG_F_ALLOWED : 0) | (op == TABLE_RESET ? DLOG_F_PRIVILEGED : 0);
    d.uid = op == TABLE_RESET ? 0 : DLOG_UNKNOWN_ID;
    d.pid = op == TABLE_RESET ? 4400 : DLOG_UNKNOWN_ID;
    d.decider_id = LOGIN;
    d.kv[0] = (struct dlog_kv){ .key = "event", .key_len = 5, .value = "authfail",
                                .value_len = 8 };
    d.kv[1] = (struct dlog_kv){ .key = "rhost", .key_len = 5, .value = "203.0.113.9",
                                .value_len = 11 };
    d.kv[2] = (struct dlog_kv){ .key = "user", .key_len = 4, .value = user,
                                .value_len = (uint32_t)strlen(user) };
    d.n_kv = 3;
    d.n_out = 2;
    /* The window rule on the path is never a lock, whatever it answers. */
    d.out[0] = (struct dlog_outcome){ .rule_id = OTHER, .credit = 0, .reset_s = 50 };
    d.out[1] = (struct dlog_outcome){ .rule_id = LOGIN, .credit = credit, .reset_s = reset_s,
                                      .flags = (uint8_t)((allowed ? DLOG_O_ALLOWED : 0) |
                                                         DLOG_O_COUNTED) };
    assert_int_equal(dlog_locks_decision(l, m, &d), 0);
}

static void test_dlog_locks_periods(void **state)
{
    struct dlog_query_rules *m = rules();
    struct dlog_locks *l = dlog_locks_new(NULL, NULL);
    const struct dlog_locks_period *p;
    size_t n;

    (void)state;
    assert_non_null(l);
    /* alice: three failures lock her for 60 s; refused twice; expires. */
    feed(l, m, S(0), TABLE_PEEK, "alice", true, 3, 0);
    feed(l, m, S(0), TABLE_TAKE, "alice", true, 2, 900);
    feed(l, m, S(1), TABLE_PEEK, "alice", false, 2, 1);        /* a delay, not a lock */
    feed(l, m, S(1), TABLE_TAKE, "alice", true, 1, 899);
    feed(l, m, S(2), TABLE_TAKE, "alice", true, 0, 60);
    feed(l, m, S(10), TABLE_PEEK, "alice", false, 0, 52);
    feed(l, m, S(20), TABLE_TAKE, "alice", false, 0, 42);
    feed(l, m, S(70), TABLE_PEEK, "alice", true, 3, 0);
    /* ... again: locked 120 s (escalated) at 102 s, unlocked by uid 0 at 110 s; a RESET
     * of a rule that keeps its counter (credit 0 in its answer) before that ends nothing. */
    feed(l, m, S(100), TABLE_TAKE, "alice", true, 2, 900);
    feed(l, m, S(101), TABLE_TAKE, "alice", true, 1, 899);
    feed(l, m, S(102), TABLE_TAKE, "alice", true, 0, 120);
    feed(l, m, S(105), TABLE_RESET, "alice", true, 0, 117);
    feed(l, m, S(110), TABLE_RESET, "alice", true, 3, 0);
    /* bob: locked at 200 s for 60 s, open when the log ends at 230 s. */
    feed(l, m, S(198), TABLE_TAKE, "bob", true, 2, 900);
    feed(l, m, S(199), TABLE_TAKE, "bob", true, 1, 899);
    feed(l, m, S(200), TABLE_TAKE, "bob", true, 0, 60);
    /* carol: only refusals seen (locked through another host): from 150 s for 30 s. */
    feed(l, m, S(150), TABLE_PEEK, "carol", false, 0, 30);
    /* dave: locked at 160 s for 600 s, allowed at 170 s: cleared elsewhere. */
    feed(l, m, S(158), TABLE_TAKE, "dave", true, 2, 900);
    feed(l, m, S(159), TABLE_TAKE, "dave", true, 1, 899);
    feed(l, m, S(160), TABLE_TAKE, "dave", true, 0, 600);
    feed(l, m, S(170), TABLE_PEEK, "dave", true, 3, 0);
    /* erin: allowed failures only, never locked. */
    feed(l, m, S(180), TABLE_TAKE, "erin", true, 2, 900);

    n = dlog_locks_finish(l, T0 + S(230), &p);
    assert_int_equal(n, 5);
    assert_int_equal(dlog_locks_dropped(l), 0);

    assert_string_equal(p[0].actor, "alice,203.0.113.9");
    assert_int_equal(p[0].rule_id, LOGIN);
    assert_int_equal(p[0].start_ms, T0 + S(2));
    assert_int_equal(p[0].end_ms, T0 + S(62));
    assert_int_equal(p[0].ended, DLOG_LOCKS_EXPIRED);
    assert_int_equal(p[0].failures, 4);         /* 3 counted, 1 refused */
    assert_int_equal(p[0].refusals, 2);
    assert_true(p[0].from_failure);
    assert_int_equal(p[0].unlocked_by_uid, DLOG_UNKNOWN_ID);

    assert_string_equal(p[1].actor, "alice,203.0.113.9");
    assert_int_equal(p[1].start_ms, T0 + S(102));
    assert_int_equal(p[1].end_ms, T0 + S(110));
    assert_int_equal(p[1].ended, DLOG_LOCKS_UNLOCKED);
    assert_int_equal(p[1].unlocked_by_uid, 0);
    assert_int_equal(p[1].unlocked_by_pid, 4400);
    assert_int_equal(p[1].failures, 3);

    assert_string_equal(p[2].actor, "carol,203.0.113.9");
    assert_int_equal(p[2].start_ms, T0 + S(150));
    assert_int_equal(p[2].end_ms, T0 + S(180));
    assert_int_equal(p[2].ended, DLOG_LOCKS_EXPIRED);
    assert_false(p[2].from_failure);
    assert_int_equal(p[2].failures, 0);
    assert_int_equal(p[2].refusals, 1);

    assert_string_equal(p[3].actor, "dave,203.0.113.9");
    assert_int_equal(p[3].end_ms, T0 + S(170));
    assert_int_equal(p[3].ended, DLOG_LOCKS_UNLOCKED);
    assert_int_equal(p[3].unlocked_by_uid, DLOG_UNKNOWN_ID);

    assert_string_equal(p[4].actor, "bob,203.0.113.9");
    assert_int_equal(p[4].start_ms, T0 + S(200));
    assert_int_equal(p[4].end_ms, T0 + S(260));
    assert_int_equal(p[4].ended, DLOG_LOCKS_OPEN);
    assert_string_equal(dlog_locks_end_name(p[4].ended), "open");
    dlog_locks_free(l);
    dlog_query_rules_free(m);
}

static void test_dlog_locks_filters(void **state)
{
    struct dlog_query_rules *m = rules();
    struct dlog_locks *l;
    const struct dlog_locks_period *p;

    (void)state;
    /* Only bob's. */
    l = dlog_locks_new("login-user-source", "bob,203.0.113.9");
    assert_non_null(l);
    feed(l, m, S(2), TABLE_TAKE, "alice", true, 0, 60);
    feed(l, m, S(3), TABLE_TAKE, "bob", true, 0, 60);
    assert_int_equal(dlog_locks_finish(l, T0 + S(100), &p), 1);
    assert_string_equal(p[0].actor, "bob,203.0.113.9");
    assert_int_equal(p[0].ended, DLOG_LOCKS_EXPIRED);
    dlog_locks_free(l);
    /* The window rule is no lockout rule: nothing. */
    l = dlog_locks_new("api", NULL);
    feed(l, m, S(2), TABLE_TAKE, "alice", true, 0, 60);
    assert_int_equal(dlog_locks_finish(l, T0 + S(100), &p), 0);
    dlog_locks_free(l);
    dlog_locks_free(NULL);
    dlog_query_rules_free(m);
}

/* Blocks of two workers overlap: a refusal read before the failure that
 * locked (written earlier by another worker) still makes one period. */
static void test_dlog_locks_out_of_order(void **state)
{
    struct dlog_query_rules *m = rules();
    struct dlog_locks *l = dlog_locks_new(NULL, NULL);
    const struct dlog_locks_period *p;

    (void)state;
    feed(l, m, S(60), TABLE_PEEK, "bob", false, 0, 50);        /* worker 1's block */
    feed(l, m, S(61), TABLE_PEEK, "bob", false, 0, 49);
    feed(l, m, S(48), TABLE_TAKE, "bob", true, 2, 900);        /* worker 0's, later */
    feed(l, m, S(49), TABLE_TAKE, "bob", true, 1, 899);
    feed(l, m, S(50), TABLE_TAKE, "bob", true, 0, 60);
    /* Far later: the waiting answers are applied before this one. */
    feed(l, m, S(1000), TABLE_TAKE, "bob", true, 2, 900);
    assert_int_equal(dlog_locks_finish(l, T0 + S(1000), &p), 1);
    assert_int_equal(p[0].start_ms, T0 + S(50));
    assert_int_equal(p[0].end_ms, T0 + S(110));
    assert_true(p[0].from_failure);
    assert_int_equal(p[0].failures, 3);
    assert_int_equal(p[0].refusals, 2);
    assert_int_equal(p[0].ended, DLOG_LOCKS_EXPIRED);
    dlog_locks_free(l);
    dlog_query_rules_free(m);
}

/* Many actors, each with a failure that expires: followed states are swept,
 * not grown without bound, and none is dropped. */
static void test_dlog_locks_bounded(void **state)
{
    struct dlog_query_rules *m = rules();
    struct dlog_locks *l = dlog_locks_new(NULL, NULL);
    const struct dlog_locks_period *p;
    char user[32];

    (void)state;
    for (unsigned i = 0; i < DLOG_LOCKS_ACTORS_MAX + 1000; i++) {
        snprintf(user, sizeof(user), "u%u", i);
        /* Each failure's interval (900 s) is over 1000 s later. */
        feed(l, m, (uint64_t)i * 1000, TABLE_TAKE, user, true, 2, 900);
    }
    assert_int_equal(dlog_locks_dropped(l), 0);
    assert_int_equal(dlog_locks_finish(l, T0 + S(1000000), &p), 0);
    dlog_locks_free(l);
    dlog_query_rules_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlog_locks_periods),
        cmocka_unit_test(test_dlog_locks_filters),
        cmocka_unit_test(test_dlog_locks_out_of_order),
        cmocka_unit_test(test_dlog_locks_bounded),
    };

    return cmocka_run_group_tests_name("dlog_locks", tests, NULL, NULL);
}
