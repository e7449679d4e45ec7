/* SPDX-License-Identifier: MIT */
/*
 * Integration: login (source = "privileged") rules are never leased
 * (docs/redis.md "Login rules").  Three divvyds (three state dirs) share one
 * real redis-server under store.mode = "lease"; the real pam_divvy.so asks
 * them as sshd's stack would (preauth PEEK before the password, authfail
 * TAKE after a wrong one).  With a login limit of 5 failures, one failure
 * on each host must leave the user free to log in with the right password
 * on every host, the 4th and 5th attempts must still reach the password,
 * and after the 5th failure the user is locked on all three.  Under lease
 * a host that spent its last leased credit prefetched another, which Redis
 * counts as used, so the user was locked after three failures.  The login
 * rule runs strict instead, and each host says so in one warning line (at
 * start, and again at a reload), as `divvyctl check` and `divvyd --check`
 * do; an explicit store = "lease" on a login rule is an error at its
 * file:line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <security/pam_appl.h>

#include "harness_redis.h"

#define HOSTS  3
#define RHOST  "203.0.113.9"
#define NOTE   "(login) rule: it runs \"strict\""

static const char login_rules[] =
    "{ match = { event = \"authfail\"; user = \"*\"; rhost = \"*\"; };\n"
    "  label = \"login-user-source\"; actor = [ \"user\", \"rhost\" ];\n"
    "  credit_limit = 5; reset_seconds = 900; source = \"privileged\"; },\n"
    "{ default = true; credit_limit = 100; reset_seconds = 60; }";

/* pam_divvy.so in @mode ("preauth", "authfail", "authsucc") on host @d for
 * @user from RHOST: pam_authenticate()'s result. */
static int pam_step(struct harness_daemon *d, const char *mode, const char *user)
{
    char args[HARNESS_PATH + 64], service[32];

    snprintf(args, sizeof(args), "%s socket=unix:%s fail_closed timeout_ms=5000", mode, d->sock);
    snprintf(service, sizeof(service), "login-%s", mode);
    return harness_pam_auth(d, service, "required", args, NULL, user, RHOST);
}

/* One login attempt on @d: preauth must let it reach the password (else
 * the test fails, naming @what), then a wrong password is counted. */
static void wrong_password(struct harness_daemon *d, int host, const char *what)
{
    int rv = pam_step(d, "preauth", "alice");

    if (rv != PAM_SUCCESS)
        fail_msg("%s on host %d: preauth refused it before the password (%d)", what, host, rv);
    assert_int_equal(pam_step(d, "authfail", "alice"), PAM_AUTH_ERR);
}

static void test_login_lease_three_hosts(void **state)
{
    struct harness_daemon *d[HOSTS];
    struct redis_srv *rs = NULL;
    struct harness_conn *c = NULL;
    char *conf, what[64], reply[HARNESS_LINE];

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "lease", "closed", 1000, NULL, login_rules);
    assert_non_null(conf);
    for (int h = 0; h < HOSTS; h++)
        d[h] = redis_divvyd(conf, 2);
    free(conf);

    /* One failure on each host. */
    for (int h = 0; h < HOSTS; h++) {
        snprintf(what, sizeof(what), "failure %d", h + 1);
        wrong_password(d[h], h, what);
    }
    /* 3 of 5 spent: the right password still gets in, on every host. */
    for (int h = 0; h < HOSTS; h++) {
        int rv = pam_step(d[h], "preauth", "alice");

        if (rv != PAM_SUCCESS)
            fail_msg("after 3 failures of 5 (one per host) the right password is refused on "
                     "host %d before it is asked (%d): the user is locked out early", h, rv);
    }
    /* The 4th and 5th attempts reach the password too; after the 5th
     * failure the user is locked on every host. */
    wrong_password(d[0], 0, "failure 4");
    wrong_password(d[1], 1, "failure 5");
    for (int h = 0; h < HOSTS; h++) {
        int rv = pam_step(d[h], "preauth", "alice");

        if (rv != PAM_MAXTRIES)
            fail_msg("after 5 failures host %d still lets the user try (%d)", h, rv);
    }
    /* The rule runs strict, and each host said so at start ... */
    for (int h = 0; h < HOSTS; h++) {
        assert_int_equal(harness_log_contains(d[h], NOTE), 1);
        assert_int_equal(harness_log_contains(d[h], "redis: unix:"), 1);
    }
    /* ... and says so again at each reload. */
    CHECK(harness_connect(d[0], HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "RELOAD", reply, sizeof(reply)));
    EXPECT_PREFIX(reply, "OK");
    assert_int_equal(harness_log_contains(d[0], "reload (RELOAD by uid 0): /"), 1);
    assert_int_equal(harness_log_contains(d[0], "divvy.conf:4: store.mode \"lease\" does not "
                                                "apply to this source = \"privileged\" "
                                                NOTE), 1);
    harness_close(c);
}

/* store = "lease" written on a login rule: an error at the rule's line;
 * inherited, a warning from divvyctl check and divvyd --check too. */
static void test_login_lease_explicit_is_an_error(void **state)
{
    static const char bad[] =
        "store = { mode = \"strict\"; };\n"
        "rules = (\n"
        "  { match = { event = \"authfail\"; user = \"*\"; }; actor = \"user\";\n"
        "    credit_limit = 5; reset_seconds = 900; source = \"privileged\";\n"
        "    store = \"lease\"; },\n"
        "  { default = true; credit_limit = 100; reset_seconds = 60; }\n"
        ");\n";
    struct harness_opts o = { .config_text = "rules = ({ default = true; credit_limit = 1; "
                                             "reset_seconds = 0; });\n" };
    struct harness_daemon *d = NULL;
    struct harness_ctl *ctl;
    char path[HARNESS_PATH + 16], want[HARNESS_PATH + 256], *err = harness_scratch(8192);
    int status = 0;
    FILE *f;

    (void)state;
    assert_non_null(err);
    /* A daemon only for its temp dir, which teardown removes. */
    CHECK(harness_start(&o, &d));
    snprintf(path, sizeof(path), "%s/bad.conf", d->dir);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(bad, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    CHECK(harness_run_divvyd((const char *const[]){ "--check", "-c", path, NULL }, 20000,
                             &status, NULL, 0, err, 8192));
    snprintf(want, sizeof(want), "%s:3: store \"lease\" cannot be used by a source = "
             "\"privileged\" (login) rule", path);
    if (status == 0 || !strstr(err, want) || !strstr(err, "use store = \"strict\""))
        fail_msg("divvyd --check on a login rule with store = \"lease\": exit %d, stderr:\n%s",
                 status, err);

    /* Inherited from store.mode: valid, and divvyctl check warns as divvyd logs. */
    snprintf(path, sizeof(path), "%s/inherit.conf", d->dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "store = { mode = \"lease\"; };\nrules = (\n%s\n);\n", login_rules);
    assert_int_equal(fclose(f), 0);
    ctl = harness_ctl_run(false, NULL, 0, (const char *const[]){ "check", path, NULL });
    snprintf(want, sizeof(want), "%s:3: warning: store.mode \"lease\" does not apply to this "
             "source = \"privileged\" %s", path, NOTE);
    if (!strstr(ctl->out, want))
        fail_msg("divvyctl check: no \"%s\" in:\n%s", want, ctl->out);
    CHECK(harness_run_divvyd((const char *const[]){ "--check", "-c", path, NULL }, 20000,
                             &status, err, 8192, NULL, 0));
    if (status != 0 || !strstr(err, want))
        fail_msg("divvyd --check: exit %d, no \"%s\" in:\n%s", status, want, err);
}

/* algorithm = "lockout" in strict Redis, shared by two divvyds (docs/rules.md "Lockout"):
 * 3 failures counted over 900 s (fail_interval) lock for 3 s (unlock_time), each lock 10 times
 * the last (escalation), and from the 2nd failure a 60 s delay.  A failure on one host counts
 * on the other, the delay and the lock are seen on both, a lock escalated through one host is
 * longer on the other, and RESET (a good login) on one forgets the level for both. */
static const char lockout_rules[] =
    "{ match = { event = \"authfail\"; user = \"*\"; rhost = \"*\"; };\n"
    "  label = \"login-lockout\"; actor = [ \"user\", \"rhost\" ];\n"
    "  algorithm = \"lockout\"; credit_limit = 3; fail_interval = 900; unlock_time = 3;\n"
    "  escalation = { factor = 10; max = 3600; remember = 3600; };\n"
    "  delay = { after = 2; seconds = 60; max = 60; };\n"
    "  source = \"privileged\"; },\n"
    "{ default = true; credit_limit = 100; reset_seconds = 60; }";

#define LOCK_KEYS "event=authfail user=alice rhost=" RHOST

/* Polls PEEK on @c until the lock is over (allowed, full credit); fails after 15 s. */
static void wait_unlocked(struct harness_conn *c)
{
    uint64_t deadline = harness_now_ms() + 15000;
    char reply[HARNESS_LINE];

    for (;;) {
        CHECK(harness_cmd(c, "PEEK " LOCK_KEYS, reply, sizeof(reply)));
        if (strncmp(reply, "OK true 3 ", 10) == 0)
            return;
        if (harness_now_ms() > deadline)
            fail_msg("the lock never ended: PEEK -> %s", reply);
        usleep(100 * 1000);
    }
}

static void test_login_lockout_two_hosts(void **state)
{
    struct harness_daemon *a, *b;
    struct harness_conn *ca = NULL, *cb = NULL;
    struct redis_srv *rs = NULL;
    char *conf;

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "strict", "closed", 2000, NULL, lockout_rules);
    assert_non_null(conf);
    a = redis_divvyd(conf, 2);
    b = redis_divvyd(conf, 2);
    free(conf);
    CHECK(harness_connect(a, HARNESS_UNIX, &ca));
    CHECK(harness_connect(b, HARNESS_UNIX, &cb));

    /* fail_interval: a failure on A and one on B are two in the same 900 s. */
    EXPECT_OK_RULE(ca, "TAKE 1 " LOCK_KEYS, true, 2, 899, 900, "login-lockout");
    EXPECT_OK_RULE(cb, "TAKE 1 " LOCK_KEYS, true, 1, 898, 900, "login-lockout");
    /* The delay after the 2nd failure: refused with credit left, on both hosts. */
    EXPECT_OK_RULE(ca, "PEEK " LOCK_KEYS, false, 1, 55, 60, "login-lockout");
    EXPECT_OK_RULE(cb, "PEEK " LOCK_KEYS, false, 1, 55, 60, "login-lockout");
    /* unlock_time: the 3rd failure locks for 3 s, not for what is left of 900 s. */
    EXPECT_OK_RULE(ca, "TAKE 1 " LOCK_KEYS, true, 0, 3, 3, "login-lockout");
    EXPECT_OK_RULE(cb, "PEEK " LOCK_KEYS, false, 0, 0, 3, "login-lockout");
    EXPECT_OK_RULE(cb, "TAKE 1 " LOCK_KEYS, false, 0, 0, 3, "login-lockout");
    wait_unlocked(cb);
    /* The second lock, through A, lasts 30 s, and B sees it so. */
    EXPECT_OK_RULE(ca, "TAKE 1 " LOCK_KEYS, true, 2, 899, 900, "login-lockout");
    EXPECT_OK_RULE(ca, "TAKE 1 " LOCK_KEYS, true, 1, 898, 900, "login-lockout");
    EXPECT_OK_RULE(ca, "TAKE 1 " LOCK_KEYS, true, 0, 30, 30, "login-lockout");
    EXPECT_OK_RULE(cb, "PEEK " LOCK_KEYS, false, 0, 20, 30, "login-lockout");
    /* A good login (RESET) on B forgets the lock and the level for both hosts. */
    {
        char reply[HARNESS_LINE];

        CHECK(harness_cmd(cb, "RESET " LOCK_KEYS, reply, sizeof(reply)));
        EXPECT_PREFIX(reply, "OK");
    }
    EXPECT_OK_RULE(ca, "PEEK " LOCK_KEYS, true, 3, 0, 0, "login-lockout");
    EXPECT_OK_RULE(cb, "TAKE 1 " LOCK_KEYS, true, 2, 899, 900, "login-lockout");
    EXPECT_OK_RULE(cb, "TAKE 1 " LOCK_KEYS, true, 1, 898, 900, "login-lockout");
    EXPECT_OK_RULE(cb, "TAKE 1 " LOCK_KEYS, true, 0, 3, 3, "login-lockout");
    EXPECT_OK_RULE(ca, "PEEK " LOCK_KEYS, false, 0, 0, 3, "login-lockout");
    harness_close(ca);
    harness_close(cb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_login_lease_three_hosts, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_login_lease_explicit_is_an_error, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_login_lockout_two_hosts, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_login", tests, NULL, NULL);
}
