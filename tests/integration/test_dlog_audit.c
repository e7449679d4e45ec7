/* SPDX-License-Identifier: MIT */
/*
 * Integration: the login audit trail end to end.  A real divvyd with the
 * decision log on and a lockout rule; the real pam_divvy.so (libpam,
 * pam_start_confdir()) fails alice's password three times (authfail: TAKE),
 * is refused at her next preauth (PEEK), `divvyctl unlock alice` (root)
 * clears her, bob fails three times and stays locked; then `divvyctl log
 * --locks` on the files divvyd wrote lists alice's lock as unlocked by uid
 * 0 and bob's as open, and `divvyctl log --rule --actor --json` shows
 * pam_divvy's requests (uid 0; pid this process's, or null where divvyd
 * does not record it).  divvyd's workers write their blocks in turns, so
 * the file is out of time order here: the lock periods must not be.
 * Needs root (pam_divvy asks divvyd only as root); skipped otherwise.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <security/pam_appl.h>

#include "harness.h"

#define RHOST "192.0.2.77"

/* The test's own directory (harness_tmp_dir()). */
static const char *logdir;

static int audit_setup(void **state)
{
    if (harness_setup(state) < 0)
        return -1;
    logdir = harness_tmp_dir();
    return logdir ? 0 : -1;
}

/* pam_divvy in @mode for @user from RHOST: the PAM result. */
static int pam(struct harness_daemon *d, const char *mode, const char *user)
{
    char args[HARNESS_PATH + 64];

    snprintf(args, sizeof(args), "%s socket=unix:%s timeout_ms=5000 unknown_users=name", mode,
             d->sock);
    return harness_pam_auth(d, mode, "requisite", args, "auth required pam_permit.so\n", user,
                            RHOST);
}

/* Each line of @out parsed as a JSON object into @o (up to @max): how many. */
static size_t json_lines(const char *out, json_t **o, size_t max)
{
    size_t n = 0;

    for (const char *p = out; *p && n < max; ) {
        const char *nl = strchr(p, '\n');
        json_error_t err;

        assert_non_null(nl);
        o[n] = json_loadb(p, (size_t)(nl - p), 0, &err);
        if (!o[n])
            fail_msg("not JSON: %.*s (%s)", (int)(nl - p), p, err.text);
        n++;
        p = nl + 1;
    }
    return n;
}

/* @v is null (divvyd did not know the peer's pid) or a pid: @want, or any
 * when @want < 0. */
static bool pid_or_null(json_t *v, long want)
{
    if (json_is_null(v))
        return true;
    return json_is_integer(v) && json_integer_value(v) > 0 &&
           (want < 0 || json_integer_value(v) == want);
}

static void test_dlog_audit_pam_lock_unlock(void **state)
{
    char config[1024], dir[128];
    struct harness_opts o = { .config_text = config };
    struct harness_daemon *d = NULL;
    struct harness_ctl *r = NULL;
    json_t *lk[8], *dec[16];
    uint64_t deadline, t_take = 0, t_refused = 0, t_reset = 0, t_peek = 0;
    unsigned takes = 0, refused = 0, resets = 0, peeks = 0;
    size_t n = 0, m;

    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: pam_divvy asks divvyd only as root; skipping)\n");
        skip();
    }
    snprintf(dir, sizeof(dir), "%s/decisions", logdir);
    snprintf(config, sizeof(config),
             "decision_log = { enabled = true; directory = \"%s\"; flush_ms = 20; };\n"
             "rules = (\n"
             "{ match = { event = \"authfail\"; user = \"*\"; rhost = \"*\"; };\n"
             "  label = \"login-user-source\"; actor = [ \"user\", \"rhost\" ];\n"
             "  algorithm = \"lockout\"; credit_limit = 3; fail_interval = 900;\n"
             "  unlock_time = 600; match_policy = \"continue\"; source = \"privileged\"; },\n"
             "{ default = true; credit_limit = 100; reset_seconds = 60; }\n"
             ");\n", dir);
    CHECK(harness_start(&o, &d));

    for (int i = 0; i < 3; i++)
        assert_int_equal(pam(d, "authfail", "alice"), PAM_AUTH_ERR);
    assert_int_equal(pam(d, "preauth", "alice"), PAM_MAXTRIES);
    harness_ctl_run(false, NULL, 0, (const char *const[]){ "-s", d->sock, "unlock", "alice",
                                                          NULL });
    assert_int_equal(pam(d, "preauth", "alice"), PAM_SUCCESS);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pam(d, "authfail", "bob"), PAM_AUTH_ERR);
    assert_int_equal(pam(d, "preauth", "bob"), PAM_MAXTRIES);

    /* The log thread writes within flush_ms: wait for both periods. */
    deadline = harness_now_ms() + 10000;
    do {
        r = harness_ctl_run(false, NULL, -1, (const char *const[]){ "log", "--locks", "--json",
                                                                    dir, NULL });
        if (r->status == 0 && harness_count(r->out, "\n") == 2 &&
            strstr(r->out, "\"open\""))
            break;
        harness_pause_ms(50);
    } while (harness_now_ms() < deadline);
    if (r->status != 0 || harness_count(r->out, "\n") != 2)
        fail_msg("divvyctl log --locks: exit %d\n%s%s", r->status, r->out, r->err);
    n = json_lines(r->out, lk, 8);
    assert_int_equal(n, 2);
    assert_string_equal(json_string_value(json_object_get(lk[0], "rule")),
                        "login-user-source");
    assert_string_equal(json_string_value(json_object_get(lk[0], "actor")),
                        "alice," RHOST);
    assert_string_equal(json_string_value(json_object_get(lk[0], "ended")), "unlocked");
    assert_int_equal(json_integer_value(json_object_get(lk[0], "unlocked_by_uid")), 0);
    /* The RESET's pid: divvyctl's when divvyd records peers' pids, else null. */
    assert_true(pid_or_null(json_object_get(lk[0], "unlocked_by_pid"), -1));
    assert_int_equal(json_integer_value(json_object_get(lk[0], "failures")), 3);
    assert_int_equal(json_integer_value(json_object_get(lk[0], "refusals")), 1);
    assert_string_equal(json_string_value(json_object_get(lk[0], "from")), "failure");
    assert_string_equal(json_string_value(json_object_get(lk[1], "actor")), "bob," RHOST);
    assert_string_equal(json_string_value(json_object_get(lk[1], "ended")), "open");
    assert_true(json_is_null(json_object_get(lk[1], "unlocked_by_uid")));
    /* Locked for unlock_time, 600 s (rounded as the answer's seconds are). */
    assert_in_range(json_integer_value(json_object_get(lk[1], "seconds")), 599, 600);

    /* alice's requests: three failures, two preauths, the unlock; pam_divvy ran here. */
    r = harness_ctl_run(false, NULL, 0, (const char *const[]){ "log", "--json", "--rule",
                                                              "login-user-source", "--actor",
                                                              "alice," RHOST, dir, NULL });
    m = json_lines(r->out, dec, 16);
    assert_int_equal(m, 6);
    /* In file order, which is not time order (blocks of workers): by verb,
     * then their times in the order pam_divvy and divvyctl sent them. */
    for (size_t i = 0; i < m; i++) {
        const char *verb = json_string_value(json_object_get(dec[i], "verb"));
        uint64_t t = (uint64_t)json_integer_value(json_object_get(dec[i], "unix_ms"));
        bool allowed = json_is_true(json_object_get(dec[i], "allowed"));

        assert_non_null(verb);
        assert_int_equal(json_integer_value(json_object_get(dec[i], "uid")), 0);
        assert_string_equal(json_string_value(json_object_get(dec[i], "protocol")), "line");
        assert_string_equal(json_string_value(json_object_get(
                                json_object_get(dec[i], "request"), "user")), "alice");
        if (strcmp(verb, "TAKE") == 0) {
            assert_true(allowed);
            assert_true(pid_or_null(json_object_get(dec[i], "pid"), getpid()));
            takes++;
            t_take = t > t_take ? t : t_take;
        } else if (strcmp(verb, "PEEK") == 0 && !allowed) {
            refused++;
            t_refused = t;
        } else if (strcmp(verb, "RESET") == 0) {
            assert_true(allowed);
            assert_true(pid_or_null(json_object_get(dec[i], "pid"), -1));
            assert_false(json_integer_value(json_object_get(dec[i], "pid")) == getpid());
            resets++;
            t_reset = t;
        } else {
            assert_string_equal(verb, "PEEK");
            peeks++;
            t_peek = t;
        }
    }
    assert_int_equal(takes, 3);
    assert_int_equal(refused, 1);
    assert_int_equal(resets, 1);
    assert_int_equal(peeks, 1);
    assert_true(t_take <= t_refused && t_refused <= t_reset && t_reset <= t_peek);
    for (size_t i = 0; i < m; i++)
        json_decref(dec[i]);
    for (size_t i = 0; i < n; i++)
        json_decref(lk[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dlog_audit_pam_lock_unlock, audit_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("dlog_audit", tests, NULL, NULL);
}
