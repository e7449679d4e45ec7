/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of server/replay.c: recorded decisions fed one by one through
 * a candidate config (written to a temp dir, loaded as divvyctl replay loads
 * it).  The virtual clock (windows end on recorded time, calendar periods
 * on the recorded wall clock), the order the window restores, hosts lined
 * up by their wall clock, the privileged flag, RESET, lockout periods,
 * errors and --since/--until.
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

#include "replay.h"
#include "table.h"

#define T0 1795000000000ULL     /* 2026-11-18T11:06:40Z */

static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/divvy-unit-replay-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    char path[128];

    (void)state;
    snprintf(path, sizeof(path), "%s/c.conf", dir);
    unlink(path);
    rmdir(dir);
    return 0;
}

static struct replay *candidate(const char *rules, const struct replay_opts *opts)
{
    struct replay_opts def = { .window_ms = 10000 };
    struct replay *rp = NULL;
    struct diag d;
    char path[128];
    FILE *f;

    snprintf(path, sizeof(path), "%s/c.conf", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "rules = (\n%s\n{ default = true; credit_limit = 1000; reset_seconds = 1; }\n);\n",
            rules);
    fclose(f);
    diag_init(&d);
    if (replay_new(path, opts ? opts : &def, &rp, &d) < 0)
        fail_msg("candidate: %s", d.n ? d.e[0].msg : "?");
    return rp;
}

/* A decision at wall clock @unix_ms, monotonic @mono_ms, with "k=v" pairs
 * (sorted by key, as the log holds them). */
static void decision(struct dlog_decision *d, uint64_t unix_ms, uint64_t mono_ms, uint8_t op,
                     bool allowed, const char *pairs)
{
    static char buf[512];
    char *p, *save = NULL;

    memset(d, 0, sizeof(*d));
    d->unix_ms = unix_ms;
    d->mono_ms = mono_ms;
    d->op = op;
    d->n = 1;
    d->flags = allowed ? DLOG_F_ALLOWED : 0;
    snprintf(buf, sizeof(buf), "%s", pairs);
    for (p = strtok_r(buf, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(p, '=');

        *eq = '\0';
        d->kv[d->n_kv++] = (struct dlog_kv){ .key = p, .key_len = (uint32_t)strlen(p),
                                              .value = eq + 1,
                                              .value_len = (uint32_t)strlen(eq + 1) };
    }
}

static void feed(struct replay *rp, unsigned stream, uint64_t unix_ms, uint64_t mono_ms,
                 uint8_t op, bool allowed, const char *pairs)
{
    struct dlog_decision d;

    decision(&d, unix_ms, mono_ms, op, allowed, pairs);
    assert_int_equal(replay_feed(rp, stream, &d), 0);
}

static const struct replay_rule_stats *stats(struct replay *rp, uint32_t idx)
{
    return replay_report_rule(replay_report_of(rp), idx);
}

static const struct replay_totals *totals(struct replay *rp)
{
    return replay_report_totals(replay_report_of(rp));
}

/* Recorded: limit 10 a minute, 10 allowed hits of a in 9 s.  Candidate 4: 6 flips. */
static void test_replay_tightened_limit(void **state)
{
    struct replay *rp = candidate("{ match = { user = \"*\"; }; label = \"u\"; actor = \"user\";"
                                  " credit_limit = 4; reset_seconds = 60; },", NULL);
    struct replay_top *top;
    size_t n;

    (void)state;
    for (unsigned i = 0; i < 10; i++)
        feed(rp, 0, T0 + i * 1000, 5000 + i * 1000, TABLE_TAKE, true, "user=a");
    /* b: 3 allowed, and 2 recorded denied that the candidate allows. */
    for (unsigned i = 0; i < 5; i++)
        feed(rp, 0, T0 + i * 1000 + 1, 5001 + i * 1000, TABLE_TAKE, i < 3, "user=b");
    assert_int_equal(replay_finish(rp), 0);
    assert_int_equal(totals(rp)->decisions, 15);
    assert_int_equal(totals(rp)->replayed, 15);
    assert_int_equal(totals(rp)->allowed_to_denied, 6);
    assert_int_equal(totals(rp)->denied_to_allowed, 1);        /* b's 4th; its 5th: denied */
    assert_int_equal(totals(rp)->same, 8);
    assert_int_equal(stats(rp, 0)->hits, 15);
    assert_int_equal(stats(rp, 0)->actors_affected, 2);
    assert_int_equal(replay_report_top(replay_report_of(rp), 0, 10, &top, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(top[0].actor, "a");
    assert_int_equal(top[0].changed, 6);
    free(top);
    replay_free(rp);
}

/* The window ends on the recorded clock: 5 hits, then 5 more 61 s later. */
static void test_replay_virtual_clock(void **state)
{
    struct replay *rp = candidate("{ match = { user = \"*\"; }; actor = \"user\";"
                                  " credit_limit = 5; reset_seconds = 60; },", NULL);

    (void)state;
    for (unsigned i = 0; i < 10; i++)
        feed(rp, 0, T0 + i * 15250, 100 + i * 15250, TABLE_TAKE, true, "user=a");
    /* Hits at 0, 15.25, 30.5, 45.75 s: four; 61 s: a new window (5 more fit). */
    assert_int_equal(replay_finish(rp), 0);
    assert_int_equal(totals(rp)->same, 10);
    replay_free(rp);
}

/* A day's calendar window reads the recorded wall clock, not today's. */
static void test_replay_calendar_wall_clock(void **state)
{
    struct replay *rp = candidate("{ match = { user = \"*\"; }; actor = \"user\";"
                                  " credit_limit = 1; calendar = \"day\"; },", NULL);
    /* 2026-11-18T23:59:59Z and 2 s later: the next day. */
    uint64_t late = 1795046399000ULL;

    (void)state;
    feed(rp, 0, late, 10000, TABLE_TAKE, true, "user=a");
    feed(rp, 0, late + 500, 10500, TABLE_TAKE, false, "user=a");
    feed(rp, 0, late + 2000, 12000, TABLE_TAKE, true, "user=a");
    assert_int_equal(replay_finish(rp), 0);
    assert_int_equal(totals(rp)->same, 3);
    replay_free(rp);
}

/* Worker blocks out of order within the window: replayed in time order. */
static void test_replay_reorders(void **state)
{
    struct replay *rp = candidate("{ match = { user = \"*\"; }; actor = \"user\";"
                                  " credit_limit = 1; reset_seconds = 60; },", NULL);

    (void)state;
    /* The later one (denied) is read first. */
    feed(rp, 0, T0 + 800, 10800, TABLE_TAKE, false, "user=a");
    feed(rp, 0, T0, 10000, TABLE_TAKE, true, "user=a");
    /* 20 s later: a decision 15 s old is behind the window. */
    feed(rp, 0, T0 + 20000, 30000, TABLE_TAKE, true, "user=z");
    feed(rp, 0, T0 + 31000, 41000, TABLE_TAKE, true, "user=y");
    feed(rp, 0, T0 + 5000, 15000, TABLE_TAKE, true, "user=x");
    assert_int_equal(replay_finish(rp), 0);
    assert_int_equal(totals(rp)->decisions, 5);
    assert_int_equal(totals(rp)->reported_late, 1);
    assert_int_equal(totals(rp)->replayed, 4);
    assert_int_equal(totals(rp)->same, 4);
    replay_free(rp);
}

/* Two hosts (monotonic clocks far apart) share one counter, by wall clock. */
static void test_replay_hosts_merge(void **state)
{
    struct replay *rp = candidate("{ match = { user = \"*\"; }; actor = \"user\";"
                                  " credit_limit = 2; reset_seconds = 60; },", NULL);

    (void)state;
    feed(rp, 0, T0, 1000, TABLE_TAKE, true, "user=a");
    feed(rp, 1, T0 + 1000, 900000000, TABLE_TAKE, true, "user=a");
    /* The third hit of the minute, on host 0: denied when counted together. */
    feed(rp, 0, T0 + 2000, 3000, TABLE_TAKE, true, "user=a");
    assert_int_equal(replay_finish(rp), 0);
    assert_int_equal(totals(rp)->allowed_to_denied, 1);
    assert_int_equal(totals(rp)->same, 2);
    replay_free(rp);
}

/* source = privileged rules see only privileged decisions; RESET forgets. */
static void test_replay_privileged_and_reset(void **state)
{
    struct replay *rp = candidate("{ match = { user = \"*\"; }; actor = \"user\";"
                                  " source = \"privileged\"; label = \"p\";"
                                  " credit_limit = 1; reset_seconds = 60; },", NULL);
    struct dlog_decision d;

    (void)state;
    decision(&d, T0, 1000, TABLE_TAKE, true, "user=a");
    d.flags |= DLOG_F_PRIVILEGED;
    assert_int_equal(replay_feed(rp, 0, &d), 0);
    /* Unprivileged: the default rule decides it. */
    feed(rp, 0, T0 + 1, 1001, TABLE_TAKE, true, "user=a");
    decision(&d, T0 + 2, 1002, TABLE_RESET, true, "user=a");
    d.flags |= DLOG_F_PRIVILEGED;
    assert_int_equal(replay_feed(rp, 0, &d), 0);
    decision(&d, T0 + 3, 1003, TABLE_TAKE, true, "user=a");
    d.flags |= DLOG_F_PRIVILEGED;
    assert_int_equal(replay_feed(rp, 0, &d), 0);
    assert_int_equal(replay_finish(rp), 0);
    assert_int_equal(totals(rp)->same, 4);
    assert_int_equal(stats(rp, 0)->hits, 2);
    assert_int_equal(stats(rp, 1)->hits, 1);
    replay_free(rp);
}

/* A lockout rule: the third failure locks for 300 s; a RESET ends the second lock. */
static void test_replay_lockout_periods(void **state)
{
    struct replay *rp = candidate("{ match = { user = \"*\"; rhost = \"*\"; }; label = \"login\";"
                                  " actor = [ \"user\", \"rhost\" ]; algorithm = \"lockout\";"
                                  " credit_limit = 3; fail_interval = 900; unlock_time = 300;"
                                  " source = \"privileged\"; },", NULL);
    const struct replay_rule_stats *s;
    struct dlog_decision d;
    static const struct { uint64_t at; uint8_t op; } ev[] = {
        { 0, TABLE_TAKE }, { 10000, TABLE_TAKE }, { 20000, TABLE_TAKE },    /* locked at 20 s */
        { 30000, TABLE_TAKE },                                              /* refused */
        { 400000, TABLE_TAKE }, { 401000, TABLE_TAKE }, { 402000, TABLE_TAKE }, /* at 402 s */
        { 500000, TABLE_RESET },                                            /* unlocked */
    };

    (void)state;
    for (unsigned i = 0; i < sizeof(ev) / sizeof(ev[0]); i++) {
        decision(&d, T0 + ev[i].at, 7000 + ev[i].at, ev[i].op, true, "rhost=10.0.0.1 user=eve");
        d.flags |= DLOG_F_PRIVILEGED;
        assert_int_equal(replay_feed(rp, 0, &d), 0);
    }
    assert_int_equal(replay_finish(rp), 0);
    s = stats(rp, 0);
    assert_int_equal(s->n_locks, 2);
    assert_string_equal(s->locks[0].actor, "eve,10.0.0.1");
    assert_int_equal(s->locks[0].start_ms, T0 + 20000);
    assert_int_equal(s->locks[0].end_ms, T0 + 320000);
    assert_int_equal(s->locks[1].start_ms, T0 + 402000);
    assert_int_equal(s->locks[1].end_ms, T0 + 500000);
    /* The refused failure at 30 s was recorded allowed: one change. */
    assert_int_equal(s->allowed_to_denied, 1);
    replay_free(rp);
}

static void test_replay_errors_and_range(void **state)
{
    struct replay_opts o = { .window_ms = 10000, .since_ms = T0 + 1000, .until_ms = T0 + 5000 };
    struct replay *rp = candidate("", &o);
    struct dlog_decision d;

    (void)state;
    feed(rp, 0, T0, 1000, TABLE_TAKE, true, "user=a");             /* before --since */
    feed(rp, 0, T0 + 1000, 2000, TABLE_TAKE, true, "user=a");
    decision(&d, T0 + 2000, 3000, TABLE_TAKE, false, "user=a");
    d.flags |= DLOG_F_ERROR;
    assert_int_equal(replay_feed(rp, 0, &d), 0);
    decision(&d, T0 + 3000, 4000, 9, true, "user=a");               /* no such verb */
    assert_int_equal(replay_feed(rp, 0, &d), 0);
    feed(rp, 0, T0 + 5000, 6000, TABLE_TAKE, true, "user=a");      /* at --until */
    assert_int_equal(replay_finish(rp), 0);
    assert_int_equal(totals(rp)->decisions, 3);
    assert_int_equal(totals(rp)->errors, 1);
    assert_int_equal(totals(rp)->unreplayable, 1);
    assert_int_equal(totals(rp)->replayed, 1);
    replay_free(rp);
}

/* What a forged log can put in a decision: answered or counted, never a crash. */
static void test_replay_forged_decisions(void **state)
{
    struct replay *rp = candidate("{ match = { user = \"*\"; }; label = \"u\"; actor = \"user\";"
                                  " credit_limit = 5; reset_seconds = 60; },", NULL);
    struct dlog_decision d;

    (void)state;
    /* Keys out of order and repeated, an empty key and value. */
    decision(&d, T0, 1000, TABLE_TAKE, true, "user=b user=a ip=1 =");
    assert_int_equal(replay_feed(rp, 0, &d), 0);
    /* Every verb number, huge amounts. */
    for (unsigned op = 0; op < 256; op += 17) {
        decision(&d, T0 + 1, 1001, (uint8_t)op, true, "user=a");
        d.n = UINT64_MAX - op;
        d.flags = (uint8_t)(op | DLOG_F_ALLOWED);
        d.flags &= (uint8_t)~DLOG_F_ERROR;
        assert_int_equal(replay_feed(rp, 0, &d), 0);
    }
    /* Times at the ends of the range: out of reach, counted. */
    decision(&d, 0, 0, TABLE_TAKE, true, "user=a");
    assert_int_equal(replay_feed(rp, 0, &d), 0);
    decision(&d, UINT64_MAX, UINT64_MAX, TABLE_TAKE, true, "user=a");
    assert_int_equal(replay_feed(rp, 0, &d), 0);
    decision(&d, T0 + 2, UINT64_MAX - 5, TABLE_TAKE, true, "user=a");
    assert_int_equal(replay_feed(rp, 0, &d), 0);
    /* A value over the 64 KiB a request may hold. */
    {
        static char big[70000];

        memset(big, 'v', sizeof(big));
        decision(&d, T0 + 3, 1003, TABLE_TAKE, true, "user=a");
        d.kv[0].value = big;
        d.kv[0].value_len = sizeof(big);
        assert_int_equal(replay_feed(rp, 0, &d), 0);
    }
    /* More hosts than a replay reads at once. */
    decision(&d, T0 + 4, 1004, TABLE_TAKE, true, "user=a");
    assert_int_equal(replay_feed(rp, REPLAY_HOSTS_MAX, &d), -EMLINK);
    assert_int_equal(replay_finish(rp), 0);
    assert_true(totals(rp)->unreplayable >= 4);
    assert_int_equal(totals(rp)->replayed + totals(rp)->unreplayable + totals(rp)->errors +
                         totals(rp)->reported_late,
                     totals(rp)->decisions);
    replay_free(rp);
}

static void test_replay_bad_config(void **state)
{
    struct replay_opts o = { .window_ms = 0 };
    struct replay *rp = NULL;
    struct diag d;
    char path[128];
    FILE *f;

    (void)state;
    snprintf(path, sizeof(path), "%s/c.conf", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("rules = ( { credit_limit = 5; } );\n", f);
    fclose(f);
    diag_init(&d);
    assert_int_equal(replay_new(path, &o, &rp, &d), -EINVAL);
    assert_null(rp);
    assert_true(d.n > 0);
    diag_init(&d);
    assert_int_equal(replay_new("/nonexistent/c.conf", &o, &rp, &d), -ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_tightened_limit),
        cmocka_unit_test(test_replay_virtual_clock),
        cmocka_unit_test(test_replay_calendar_wall_clock),
        cmocka_unit_test(test_replay_reorders),
        cmocka_unit_test(test_replay_hosts_merge),
        cmocka_unit_test(test_replay_privileged_and_reset),
        cmocka_unit_test(test_replay_lockout_periods),
        cmocka_unit_test(test_replay_errors_and_range),
        cmocka_unit_test(test_replay_forged_decisions),
        cmocka_unit_test(test_replay_bad_config),
    };

    return cmocka_run_group_tests_name("replay", tests, group_setup, group_teardown);
}
