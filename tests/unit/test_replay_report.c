/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of server/replay_report.c: what divvyctl replay counts per
 * rule and in total, the distinct and top actors, lock periods (a RESET
 * ends a running one), and the first mismatches it keeps.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "replay_report.h"

static int decide(struct replay_report *rp, uint32_t rule, bool take, bool before, bool after,
                  const char *actor)
{
    return replay_report_decision(rp, rule, take, before, after, before != after ? actor : NULL,
                                  actor ? strlen(actor) : 0);
}

static void test_replay_report_counts(void **state)
{
    struct replay_report *rp = replay_report_new(3);
    const struct replay_totals *t;
    const struct replay_rule_stats *s;

    (void)state;
    assert_non_null(rp);
    /* Rule 0: 5 TAKEs, 2 of them now denied (actors a and b), 1 PEEK now allowed. */
    for (unsigned i = 0; i < 3; i++)
        assert_int_equal(decide(rp, 0, true, true, true, "a"), 0);
    assert_int_equal(decide(rp, 0, true, true, false, "a"), 0);
    assert_int_equal(decide(rp, 0, true, true, false, "b"), 0);
    assert_int_equal(decide(rp, 0, false, false, true, "a"), 0);
    /* Rule 2: one unchanged TAKE.  Rule 1: nothing. */
    assert_int_equal(decide(rp, 2, true, false, false, "z"), 0);
    assert_int_equal(decide(rp, 3, true, true, true, "z"), -EINVAL);

    t = replay_report_totals(rp);
    assert_int_equal(t->replayed, 7);
    assert_int_equal(t->same, 4);
    assert_int_equal(t->allowed_to_denied, 2);
    assert_int_equal(t->denied_to_allowed, 1);
    s = replay_report_rule(rp, 0);
    assert_int_equal(s->hits, 5);
    assert_int_equal(s->allowed_to_denied, 2);
    assert_int_equal(s->denied_to_allowed, 1);
    assert_int_equal(s->actors_affected, 2);    /* a (twice) and b */
    s = replay_report_rule(rp, 1);
    assert_int_equal(s->hits, 0);
    assert_int_equal(s->actors_affected, 0);
    s = replay_report_rule(rp, 2);
    assert_int_equal(s->hits, 1);
    assert_int_equal(s->actors_affected, 0);
    assert_null(replay_report_rule(rp, 3));
    assert_false(replay_report_capped(rp));
    replay_report_free(rp);
}

static void test_replay_report_top_actors(void **state)
{
    struct replay_report *rp = replay_report_new(2);
    struct replay_top *top;
    size_t n;

    (void)state;
    /* c: 3 changes, a and b: 2 each (a before b), d: 1; rule 1's actor apart. */
    static const char *const seq[] = { "d", "b", "c", "a", "c", "b", "a", "c" };
    for (unsigned i = 0; i < 8; i++)
        assert_int_equal(decide(rp, 0, true, true, false, seq[i]), 0);
    assert_int_equal(decide(rp, 1, true, false, true, "c"), 0);

    assert_int_equal(replay_report_top(rp, 0, 3, &top, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(top[0].actor, "c");
    assert_int_equal(top[0].changed, 3);
    assert_string_equal(top[1].actor, "a");
    assert_int_equal(top[1].changed, 2);
    assert_string_equal(top[2].actor, "b");
    free(top);
    assert_int_equal(replay_report_rule(rp, 0)->actors_affected, 4);
    assert_int_equal(replay_report_top(rp, 1, 10, &top, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(top[0].changed, 1);
    free(top);
    assert_int_equal(replay_report_top(rp, 0, 0, &top, &n), 0);
    assert_int_equal(n, 0);
    assert_null(top);
    replay_report_free(rp);
}

static void test_replay_report_locks(void **state)
{
    struct replay_report *rp = replay_report_new(1);
    const struct replay_rule_stats *s;

    (void)state;
    assert_int_equal(replay_report_lock(rp, 0, "alice,10.0.0.1", 14, 1000, 301000), 0);
    assert_int_equal(replay_report_lock(rp, 0, "bob,10.0.0.2", 12, 2000, 302000), 0);
    /* alice's RESET during her lock ends it; bob's after his lock changes nothing;
     * carol was never locked. */
    assert_int_equal(replay_report_unlock(rp, 0, "alice,10.0.0.1", 14, 61000), 0);
    assert_int_equal(replay_report_unlock(rp, 0, "bob,10.0.0.2", 12, 400000), 0);
    assert_int_equal(replay_report_unlock(rp, 0, "carol", 5, 5000), 0);
    /* alice locked again later: a second period. */
    assert_int_equal(replay_report_lock(rp, 0, "alice,10.0.0.1", 14, 500000, 1100000), 0);

    s = replay_report_rule(rp, 0);
    assert_int_equal(s->n_locks, 3);
    assert_string_equal(s->locks[0].actor, "alice,10.0.0.1");
    assert_int_equal(s->locks[0].start_ms, 1000);
    assert_int_equal(s->locks[0].end_ms, 61000);
    assert_string_equal(s->locks[1].actor, "bob,10.0.0.2");
    assert_int_equal(s->locks[1].end_ms, 302000);
    assert_int_equal(s->locks[2].start_ms, 500000);
    assert_int_equal(s->locks[2].end_ms, 1100000);
    /* Locks are not verdict changes. */
    assert_int_equal(s->actors_affected, 0);
    replay_report_free(rp);
}

static void test_replay_report_mismatches_first_20(void **state)
{
    struct replay_report *rp = replay_report_new(1);
    const struct replay_mismatch *m;
    struct proto_kv kv[2] = {
        { .key = "ip", .key_len = 2, .value = "10.0.0.1", .value_len = 8 },
        { .key = "path", .key_len = 4, .value = "/a", .value_len = 2 },
    };
    size_t n;

    (void)state;
    for (unsigned i = 0; i < 25; i++)
        assert_int_equal(replay_report_mismatch(rp, 1000 + i, 77, 0, true, false, kv, 2), 0);
    m = replay_report_mismatches(rp, &n);
    assert_int_equal(n, REPLAY_MISMATCHES_MAX);
    assert_int_equal(m[0].unix_ms, 1000);
    assert_int_equal(m[19].unix_ms, 1019);
    assert_int_equal(m[0].rule_before, 77);
    assert_true(m[0].allowed_before);
    assert_false(m[0].allowed_after);
    assert_int_equal(m[0].n_kv, 2);
    assert_string_equal(m[0].key[1], "path");
    assert_string_equal(m[0].value[0], "10.0.0.1");
    replay_report_free(rp);
}

/* Many distinct actors: the table grows and every one stays distinct. */
static void test_replay_report_many_actors(void **state)
{
    struct replay_report *rp = replay_report_new(2);
    char actor[32];

    (void)state;
    for (unsigned i = 0; i < 20000; i++) {
        snprintf(actor, sizeof(actor), "10.%u.%u.%u", i >> 16, (i >> 8) & 255, i & 255);
        assert_int_equal(decide(rp, i & 1, true, true, false, actor), 0);
        assert_int_equal(decide(rp, i & 1, true, true, false, actor), 0);
    }
    assert_int_equal(replay_report_rule(rp, 0)->actors_affected, 10000);
    assert_int_equal(replay_report_rule(rp, 1)->actors_affected, 10000);
    assert_int_equal(replay_report_totals(rp)->allowed_to_denied, 40000);
    replay_report_free(rp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_report_counts),
        cmocka_unit_test(test_replay_report_top_actors),
        cmocka_unit_test(test_replay_report_locks),
        cmocka_unit_test(test_replay_report_mismatches_first_20),
        cmocka_unit_test(test_replay_report_many_actors),
    };

    return cmocka_run_group_tests_name("replay_report", tests, NULL, NULL);
}
