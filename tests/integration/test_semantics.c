/* SPDX-License-Identifier: MIT */
/*
 * Integration: divvy's rule semantics seen through the socket.  Always-deny
 * (credit_limit 0) and always-allow (reset_seconds 0) rules answer without a
 * counter, "k=*" requires the key to be present, duplicate request keys take
 * the last value, actors partition counters, a denied hit consumes nothing,
 * and the default rule catches the rest.
 */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

static const char semantics_ini[] =
    "; rules for test_semantics\n"
    "[path=/deny]\n"
    "creditLimit = 0\n"
    "resetSeconds = 60\n"
    "\n"
    "[path=/allow]\n"
    "creditLimit = 7\n"
    "resetSeconds = 0\n"
    "\n"
    "[path=/need ip=*]\n"
    "creditLimit = 2\n"
    "resetSeconds = 600\n"
    "actorField = ip\n"
    "\n"
    "[path=/need]\n"
    "creditLimit = 5\n"
    "resetSeconds = 600\n"
    "\n"
    "[path=/global]\n"
    "creditLimit = 3\n"
    "resetSeconds = 600\n"
    "\n"
    "[path=/api/*]\n"
    "creditLimit = 4\n"
    "resetSeconds = 900\n"
    "actorField = user\n"
    "\n"
    "[default]\n"
    "creditLimit = 0\n"
    "resetSeconds = 0\n"
    "comment = 'Default deny!'\n";

static struct harness_daemon *start_ini(const char *text)
{
    struct harness_opts o = { .config_name = "rules.ini", .config_text = text };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    return d;
}

static void test_semantics_always_deny(void **state)
{
    struct harness_daemon *d = start_ini(semantics_ini);
    struct harness_conn *c;
    long long live0, live1;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_get_stat(c, "table_live", &live0));
    for (int i = 0; i < 20; i++)
        EXPECT_REPLY(c, "HIT path=/deny", "OK false 0 0");
    EXPECT_REPLY(c, "HIT path=/deny ip=1.2.3.4 any=thing", "OK false 0 0");
    EXPECT_OK_RULE(c, "TAKE 1 path=/deny", false, 0, 0, 0, NULL);
    EXPECT_REPLY(c, "HIT path=/nowhere", "OK false 0 0");
    /* No counter was created for any of them. */
    CHECK(harness_get_stat(c, "table_live", &live1));
    assert_int_equal(live0, live1);
    harness_close(c);
}

static void test_semantics_always_allow(void **state)
{
    struct harness_daemon *d = start_ini(semantics_ini);
    struct harness_conn *c;
    long long live0, live1;

    (void)state;
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    CHECK(harness_get_stat(c, "table_live", &live0));
    for (int i = 0; i < 50; i++)
        EXPECT_REPLY(c, "HIT path=/allow", "OK true 7 0");
    EXPECT_OK_RULE(c, "TAKE 7 path=/allow", true, 7, 0, 0, NULL);
    CHECK(harness_get_stat(c, "table_live", &live1));
    assert_int_equal(live0, live1);
    harness_close(c);
}

/* A default rule that allows: everything unmatched gets "OK true <limit> 0". */
static void test_semantics_default_allow(void **state)
{
    static const char ini[] =
        "[path=/x]\ncreditLimit = 1\nresetSeconds = 60\n\n"
        "[default]\ncreditLimit = 1\nresetSeconds = 0\ncomment = 'Default accept!'\n";
    struct harness_daemon *d = start_ini(ini);
    struct harness_conn *c;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "HIT path=/x", "OK true 0 60");
    EXPECT_OK(c, "HIT path=/x", false, 0, 59, 60);
    for (int i = 0; i < 5; i++)
        EXPECT_REPLY(c, "HIT path=/y", "OK true 1 0");
    EXPECT_REPLY(c, "HIT", "OK true 1 0");
    harness_close(c);
}

/* "ip=*" matches only when ip is present; without it the next rule applies. */
static void test_semantics_star_requires_presence(void **state)
{
    struct harness_daemon *d = start_ini(semantics_ini);
    struct harness_conn *c;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "HIT path=/need", "OK true 4 600");
    EXPECT_REPLY(c, "HIT path=/need ip=10.1.1.1", "OK true 1 600");
    EXPECT_OK(c, "HIT path=/need", true, 3, 599, 600);
    EXPECT_OK(c, "HIT path=/need ip=10.1.1.1", true, 0, 599, 600);
    EXPECT_OK(c, "HIT path=/need ip=10.1.1.1", false, 0, 599, 600);
    /* Still denied for that IP, still allowed without an IP. */
    EXPECT_OK(c, "HIT path=/need", true, 2, 599, 600);
    EXPECT_REPLY(c, "HIT path=/need ip=10.1.1.2", "OK true 1 600");
    /* "ip=" is present with an empty value: it matches "*" too. */
    EXPECT_REPLY(c, "HIT path=/need ip=", "OK true 1 600");
    EXPECT_OK(c, "HIT path=/need ip=\"\"", true, 0, 599, 600);
    /* Another key does not stand in for ip. */
    EXPECT_OK(c, "HIT path=/need ipx=10.1.1.1", true, 1, 599, 600);
    harness_close(c);
}

static void test_semantics_duplicate_keys_last_wins(void **state)
{
    struct harness_daemon *d = start_ini(semantics_ini);
    struct harness_conn *c;

    (void)state;
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_REPLY(c, "HIT path=/need ip=a ip=b", "OK true 1 600");
    EXPECT_OK(c, "HIT path=/need ip=b", true, 0, 599, 600);
    EXPECT_REPLY(c, "HIT path=/need ip=b ip=a", "OK true 1 600");
    /* The rule is chosen by the last value too. */
    EXPECT_REPLY(c, "HIT path=/global path=/deny", "OK false 0 0");
    EXPECT_REPLY(c, "HIT path=/deny path=/global", "OK true 2 600");
    harness_close(c);
}

/* A global rule is one counter shared by every connection; glob rules with
 * an actor get one counter per actor. */
static void test_semantics_counters_shared_and_partitioned(void **state)
{
    struct harness_daemon *d = start_ini(semantics_ini);
    struct harness_conn *a, *b;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &a));
    CHECK(harness_connect(d, HARNESS_TCP, &b));
    EXPECT_REPLY(a, "HIT path=/global", "OK true 2 600");
    EXPECT_OK(b, "HIT path=/global user=x", true, 1, 599, 600);
    EXPECT_OK(a, "HIT path=/global", true, 0, 599, 600);
    EXPECT_OK(b, "HIT path=/global", false, 0, 599, 600);

    EXPECT_REPLY(a, "HIT path=/api/v1/users user=alice", "OK true 3 900");
    EXPECT_OK(b, "HIT path=/api/v2 user=alice", true, 2, 899, 900);
    EXPECT_REPLY(b, "HIT path=/api/v2 user=bob", "OK true 3 900");
    /* A missing actor key counts as the empty value: one shared counter. */
    EXPECT_REPLY(a, "HIT path=/api/v2", "OK true 3 900");
    EXPECT_OK(b, "HIT path=/api/v3", true, 2, 899, 900);
    EXPECT_OK(b, "HIT path=/api/v3 user=", true, 1, 899, 900);
    /* The glob needs its prefix. */
    EXPECT_REPLY(a, "HIT path=/apiary user=alice", "OK false 0 0");
    harness_close(a);
    harness_close(b);
}

/* Exhaust a window and watch it reset: the window starts at the first hit
 * and lasts resetSeconds (2 s here). */
static void test_semantics_window_resets(void **state)
{
    static const char ini[] =
        "[path=/short]\ncreditLimit = 2\nresetSeconds = 2\n\n"
        "[default]\ncreditLimit = 0\nresetSeconds = 0\n";
    struct harness_daemon *d = start_ini(ini);
    struct harness_conn *c;
    char r[HARNESS_LINE];
    uint64_t deadline;
    bool allowed = false;
    long long credit, secs;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "HIT path=/short", "OK true 1 2");
    EXPECT_OK(c, "HIT path=/short", true, 0, 1, 2);
    EXPECT_OK(c, "HIT path=/short", false, 0, 1, 2);
    /* Poll (deadline 5 s) until the window has passed. */
    deadline = harness_now_ms() + 5000;
    while (harness_now_ms() < deadline) {
        CHECK(harness_cmd(c, "HIT path=/short", r, sizeof(r)));
        CHECK(harness_parse_ok(r, &allowed, &credit, &secs));
        if (allowed)
            break;
        assert_int_equal(credit, 0);
        assert_in_range(secs, 0, 2);
        harness_pause_ms(50);
    }
    assert_true(allowed);
    /* A fresh window starts with this hit. */
    assert_int_equal(credit, 1);
    assert_int_equal(secs, 2);
    harness_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_semantics_always_deny, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_semantics_always_allow, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_semantics_default_allow, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_semantics_star_requires_presence, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_semantics_duplicate_keys_last_wins, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_semantics_counters_shared_and_partitioned,
                                        harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_semantics_window_resets, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("semantics", tests, NULL, NULL);
}
