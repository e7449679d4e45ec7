/* SPDX-License-Identifier: MIT */
/*
 * Integration: divvy's README "Getting Started" transcripts, replayed over a
 * raw socket against the real divvyd running the shipped example config
 * (etc/divvy.ini), and the same request sequence against the example config
 * in all three formats (etc/divvy.ini, etc/divvy.json, etc/divvy.conf), which
 * must answer identically.
 */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

static struct harness_daemon *start_example(const char *rel)
{
    struct harness_opts o = { 0 };
    struct harness_daemon *d = NULL;
    char src[512];
    const char *name = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;

    CHECK(harness_src_path(rel, src, sizeof(src)));
    o.config_src = src;
    o.config_name = name;
    CHECK(harness_start(&o, &d));
    return d;
}

/* "HIT method=GET path=/status" -> OK true 999 60, 998, ... and the reset
 * countdown never goes up. */
static void test_readme_status(void **state)
{
    struct harness_daemon *d = start_example("etc/divvy.ini");
    struct harness_conn *c;
    char r[HARNESS_LINE];
    long long prev_secs = 60;

    (void)state;
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_REPLY(c, "HIT method=GET path=/status", "OK true 999 60");
    for (long long credit = 998; credit >= 990; credit--) {
        bool allowed;
        long long cr, secs;

        CHECK(harness_cmd(c, "HIT method=GET path=/status", r, sizeof(r)));
        if (harness_parse_ok(r, &allowed, &cr, &secs) < 0)
            fail_msg("bad reply \"%s\"", r);
        assert_true(allowed);
        assert_int_equal(cr, credit);
        assert_in_range(secs, 59, 60);
        assert_true(secs <= prev_secs);
        prev_secs = secs;
    }
    /* Quoted strings are the same strings (README: "no difference"). */
    EXPECT_OK(c, "HIT method=\"GET\" path=\"/status\"", true, 989, 59, 60);
    /* Command words are case-insensitive; a trailing CR is stripped. */
    EXPECT_OK(c, "hit method=GET path=/status\r", true, 988, 59, 60);
    harness_close(c);
}

/* The cookie transcript: 3 per hour per IP; a new IP has fresh quota. */
static void test_readme_cookies(void **state)
{
    struct harness_daemon *d = start_example("etc/divvy.ini");
    struct harness_conn *c;

    (void)state;
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_REPLY(c, "HIT method=GET path=/pantry/cookies/chocolate-chip ip=192.168.1.1",
                 "OK true 2 3600");
    EXPECT_OK(c, "HIT method=GET path=/pantry/cookies/chocolate-chip ip=192.168.1.1",
              true, 1, 3599, 3600);
    EXPECT_OK(c, "HIT method=GET path=/pantry/cookies/oatmeal ip=192.168.1.1",
              true, 0, 3599, 3600);
    EXPECT_OK(c, "HIT method=GET path=/pantry/cookies/cricket-flavored ip=192.168.1.1",
              false, 0, 3599, 3600);
    /* A denied hit consumes nothing, and stays denied. */
    EXPECT_OK(c, "HIT method=GET path=/pantry/cookies/oatmeal ip=192.168.1.1",
              false, 0, 3599, 3600);
    EXPECT_REPLY(c, "HIT method=GET path=/pantry/cookies/oatmeal ip=4.3.2.1",
                 "OK true 2 3600");
    harness_close(c);
}

/* The other example rules: /pantry/[star] 1 per hour by IP, /crisper/carrots needs
 * foo=3, everything else hits the default deny. */
static void test_readme_other_rules(void **state)
{
    struct harness_daemon *d = start_example("etc/divvy.ini");
    struct harness_conn *c;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "HIT method=GET path=/pantry/bread ip=10.0.0.1", "OK true 0 3600");
    EXPECT_OK(c, "HIT method=GET path=/pantry/jam ip=10.0.0.1", false, 0, 3599, 3600);
    EXPECT_REPLY(c, "HIT method=GET path=/pantry/jam ip=10.0.0.2", "OK true 0 3600");
    /* No ip: the ip=* rules do not match; nothing else does but the default. */
    EXPECT_REPLY(c, "HIT method=GET path=/pantry/bread", "OK false 0 0");
    EXPECT_REPLY(c, "HIT method=GET path=/crisper/carrots ip=10.0.0.1 foo=3", "OK true 9 60");
    EXPECT_OK(c, "HIT method=GET path=/crisper/carrots ip=10.0.0.1 foo=3 extra=1",
              true, 8, 59, 60);
    EXPECT_REPLY(c, "HIT method=GET path=/crisper/carrots ip=10.0.0.1 foo=4", "OK false 0 0");
    EXPECT_REPLY(c, "HIT method=GET path=/crisper/carrots ip=10.0.0.1", "OK false 0 0");
    EXPECT_REPLY(c, "HIT method=POST path=/status", "OK false 0 0");
    EXPECT_REPLY(c, "HIT", "OK false 0 0");
    harness_close(c);
}

/* The canary transcript: the special-cookie canary (1 per day, global)
 * consumes its own quota but its answer is ignored; the cookie rule decides. */
static void test_readme_canary(void **state)
{
    struct harness_daemon *d = start_example("etc/divvy.ini");
    struct harness_conn *c;
    const char *req = "HIT method=GET path=/pantry/cookies/special-cookie ip=192.168.1.1";

    (void)state;
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_REPLY(c, req, "OK true 2 3600");
    EXPECT_OK(c, req, true, 1, 3599, 3600);
    EXPECT_OK(c, req, true, 0, 3599, 3600);
    EXPECT_OK(c, req, false, 0, 3598, 3600);
    /* The canary is exhausted for the day, yet another IP is still allowed. */
    EXPECT_REPLY(c, "HIT method=GET path=/pantry/cookies/special-cookie ip=1.2.3.4",
                 "OK true 2 3600");
    harness_close(c);
}

/* nextResetSeconds starts at resetSeconds and counts down, never up, while
 * the window runs (sampled over ~1.6 s). */
static void test_readme_reset_counts_down(void **state)
{
    struct harness_daemon *d = start_example("etc/divvy.ini");
    struct harness_conn *c;
    long long prev = 60, credit = 999;
    char r[HARNESS_LINE];
    uint64_t end;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "HIT method=GET path=/status", "OK true 999 60");
    EXPECT_REPLY(c, "HIT method=GET path=/pantry/cookies/a ip=9.9.9.9", "OK true 2 3600");
    end = harness_now_ms() + 1600;
    while (harness_now_ms() < end) {
        bool allowed;
        long long cr, secs;

        harness_pause_ms(100);          /* pacing: the clock must advance */
        CHECK(harness_cmd(c, "HIT method=GET path=/status", r, sizeof(r)));
        CHECK(harness_parse_ok(r, &allowed, &cr, &secs));
        credit--;
        assert_true(allowed);
        assert_int_equal(cr, credit);
        if (secs > prev || secs < 57)
            fail_msg("nextResetSeconds went from %lld to %lld", prev, secs);
        prev = secs;
    }
    /* 1.6 s (or, on a loaded box, a little more) later the countdown has
     * moved: rounded to nearest, 58, or 57 when the last pause overran. */
    assert_in_range(prev, 57, 59);
    EXPECT_OK(c, "HIT method=GET path=/pantry/cookies/a ip=9.9.9.9", true, 1, 3597, 3599);
    harness_close(c);
}

/* The requests replayed against the example config in each format. */
static const char *const equiv_reqs[] = {
    "HIT method=GET path=/status",
    "HIT method=GET path=/status",
    "HIT method=GET path=/pantry/cookies/chocolate-chip ip=192.168.1.1",
    "HIT method=GET path=/pantry/cookies/special-cookie ip=192.168.1.1",
    "HIT method=GET path=/pantry/cookies/special-cookie ip=192.168.1.2",
    "HIT method=GET path=/pantry/cookies/oatmeal ip=192.168.1.1",
    "HIT method=GET path=/pantry/cookies/oatmeal ip=192.168.1.1",
    "HIT method=GET path=/pantry/cookies/oatmeal ip=192.168.1.1",
    "HIT method=GET path=/pantry/cookies ip=192.168.1.1",
    "HIT method=GET path=/pantry/x ip=192.168.1.1",
    "HIT method=GET path=/pantry/x ip=192.168.1.3",
    "HIT method=GET path=/pantry/x ip=192.168.1.3",
    "HIT method=GET path=/pantry/x",
    "HIT method=GET path=/crisper/carrots ip=1.1.1.1 foo=3",
    "HIT method=GET path=/crisper/carrots ip=1.1.1.1 foo=3",
    "HIT method=GET path=/crisper/carrots ip=1.1.1.2 foo=3",
    "HIT method=GET path=/crisper/carrots ip=1.1.1.2 foo=2",
    "HIT method=PUT path=/status",
    "HIT path=/status",
    "HIT method=get path=/status",
    "HIT method=GET path=/status/",
    "HIT",
    "PEEK method=GET path=/status",
    "TAKE 5 method=GET path=/status",
    "TAKE 996 method=GET path=/status",
    "TAKE 990 method=GET path=/status",
    "PEEK method=GET path=/status",
    "TAKE 3 method=GET path=/pantry/cookies/x ip=7.7.7.7",
    "TAKE 1 method=GET path=/pantry/cookies/x ip=7.7.7.7",
    "PING",
};

/* divvy's own example JSON leaves out the INI's foo=3 on the carrots rule;
 * the fixture is that JSON with foo=3 added, so all three say the same. */
static void test_formats_equivalent(void **state)
{
    static const char *const files[] = {
        "etc/divvy.ini", "tests/fixtures/divvy-example-as-ini.json", "etc/divvy.conf",
    };
    struct harness_daemon *d[3];
    struct harness_conn *c[3];
    char r[3][HARNESS_LINE];

    (void)state;
    for (int i = 0; i < 3; i++) {
        d[i] = start_example(files[i]);
        CHECK(harness_connect(d[i], HARNESS_UNIX, &c[i]));
    }
    for (size_t k = 0; k < sizeof(equiv_reqs) / sizeof(equiv_reqs[0]); k++) {
        for (int i = 0; i < 3; i++)
            CHECK(harness_cmd(c[i], equiv_reqs[k], r[i], sizeof(r[i])));
        for (int i = 1; i < 3; i++) {
            if (harness_same_reply(r[0], r[i]))
                continue;
            fail_msg("\"%s\": %s says \"%s\", %s says \"%s\"", equiv_reqs[k], files[0], r[0],
                     files[i], r[i]);
        }
    }
    for (int i = 0; i < 3; i++)
        harness_close(c[i]);
}

/* The same checks against the README's JSON and the native format, so a
 * transcript passes whichever file a user starts from. */
static void test_readme_cookies_json_and_conf(void **state)
{
    static const char *const files[] = { "etc/divvy.json", "etc/divvy.conf" };

    (void)state;
    for (int i = 0; i < 2; i++) {
        struct harness_daemon *d = start_example(files[i]);
        struct harness_conn *c;

        CHECK(harness_connect(d, HARNESS_TCP, &c));
        EXPECT_REPLY(c, "HIT method=GET path=/status", "OK true 999 60");
        EXPECT_REPLY(c, "HIT method=GET path=/pantry/cookies/chocolate-chip ip=192.168.1.1",
                     "OK true 2 3600");
        EXPECT_OK(c, "HIT method=GET path=/pantry/cookies/oatmeal ip=192.168.1.1",
                  true, 1, 3599, 3600);
        EXPECT_REPLY(c, "HIT method=GET path=/pantry/cookies/oatmeal ip=4.3.2.1",
                     "OK true 2 3600");
        EXPECT_REPLY(c, "HIT method=DELETE path=/index.html", "OK false 0 0");
        harness_close(c);
        harness_free(d);
    }
}

/*
 * README: `make run` passes --listen, which replaces the config's
 * server.listen; a resp: or rls: listener added to the config must not go
 * missing in silence: divvyd names every address --listen leaves out
 * (`make run RUN_LISTEN=` keeps them; tests/check_make.sh checks that).
 */
static void test_readme_make_run_names_replaced_listeners(void **state)
{
    struct harness_opts o = {
        .config_text = "server = { listen = [ \"resp:unix:/nonexistent-divvy/resp.sock\",\n"
                       "    \"rls:tcp:127.0.0.1:1\" ]; };\n"
                       "rules = ( { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
    };
    struct harness_daemon *d = NULL;

    (void)state;
    /* The config's addresses are not bound: nothing at those paths stops the start. */
    CHECK(harness_start(&o, &d));
    if (harness_log_contains(d, "--listen replaces the 2 listener(s) of ") <= 0 ||
        harness_log_contains(d, "not listening on resp:unix:/nonexistent-divvy/resp.sock, "
                                "rls:tcp:127.0.0.1:1") <= 0) {
        harness_dump_log(d);
        fail_msg("divvyd did not name the config's listeners --listen replaced");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_readme_status, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_readme_cookies, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_readme_other_rules, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_readme_canary, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_readme_reset_counts_down, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_formats_equivalent, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_readme_cookies_json_and_conf, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_readme_make_run_names_replaced_listeners,
                                        harness_setup, harness_teardown),
    };

    return cmocka_run_group_tests_name("readme", tests, NULL, NULL);
}
