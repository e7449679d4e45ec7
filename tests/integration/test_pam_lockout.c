/* SPDX-License-Identifier: MIT */
/*
 * Integration: pam_divvy.so (the real libpam, pam_start_confdir()) against a real divvyd with
 * login rules of algorithm "lockout" (docs/rules.md "Lockout", docs/pam.md):
 * - the ramping delay: preauth waits it out (wall time, lower bound only) and then lets the
 *   password be tried; a delay longer than max_delay is refused now with "try again in";
 * - a lock is told once per PAM handle ("locked for N minutes from this address") and ends
 *   the conversation (PAM_MAXTRIES), however often the application calls pam_authenticate();
 * - escalation: the second lock of the same user and source is longer than the first;
 * - unknown_users=source: made-up names count on one counter per source (a rule matching
 *   known=no), none per name; known users from that source are untouched;
 * - local_users_only: a user not in /etc/passwd is left alone (PAM_IGNORE, nothing counted).
 * Needs root (pam_divvy asks divvyd only as root); skipped otherwise.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <security/pam_appl.h>

#include "harness.h"
#include "lockout_rules.h"

#define RHOST "192.0.2.77"

/* A 5 s first lock, 30 times longer the second time; a 2 s delay. */
static const char rules[] = LOCKOUT_RULES(5, 30, 2);

struct said {
    char msgs[2048];
    int prompts;
};

static int conv(int n, const struct pam_message **msg, struct pam_response **resp, void *data)
{
    struct said *s = data;
    struct pam_response *r = calloc((size_t)n, sizeof(*r));

    if (!r)
        return PAM_BUF_ERR;
    for (int i = 0; i < n; i++) {
        size_t used = strlen(s->msgs);

        if (msg[i]->msg_style == PAM_PROMPT_ECHO_OFF || msg[i]->msg_style == PAM_PROMPT_ECHO_ON) {
            s->prompts++;
            r[i].resp = strdup("x");
        } else {
            snprintf(s->msgs + used, sizeof(s->msgs) - used, "%s\n", msg[i]->msg);
        }
    }
    *resp = r;
    return PAM_SUCCESS;
}

static struct harness_daemon *start(void)
{
    struct harness_opts o = { .config_text = rules };
    struct harness_daemon *d = NULL;

    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: pam_divvy asks divvyd only as root; skipping)\n");
        skip();
    }
    CHECK(harness_start(&o, &d));
    return d;
}

/* Service @name in @d's dir: one auth line, pam_divvy in @mode with @extra, then pam_permit
 * (so a module that answers PAM_IGNORE leaves the stack a success). */
static void service(struct harness_daemon *d, const char *name, const char *mode,
                    const char *extra)
{
    char module[PATH_MAX], path[HARNESS_PATH + 64];
    FILE *f;

    harness_pam_module(module);
    snprintf(path, sizeof(path), "%s/%s", d->dir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "auth requisite %s %s socket=unix:%s timeout_ms=5000 %s\n"
               "auth required pam_permit.so\n", module, mode, d->sock, extra);
    assert_int_equal(fclose(f), 0);
}

/* pam_authenticate() @calls times on one handle for @user from @rhost; the last result. */
static int auth(struct harness_daemon *d, const char *name, const char *user, const char *rhost,
                int calls, struct said *s)
{
    struct pam_conv c = { conv, s };
    pam_handle_t *pamh = NULL;
    int rv = PAM_SYSTEM_ERR;

    memset(s, 0, sizeof(*s));
    assert_int_equal(pam_start_confdir(name, user, &c, d->dir, &pamh), PAM_SUCCESS);
    pam_set_item(pamh, PAM_RHOST, rhost);
    for (int i = 0; i < calls; i++)
        rv = pam_authenticate(pamh, 0);
    pam_end(pamh, rv);
    return rv;
}

/* A line-protocol request on a root (privileged) Unix connection: its reply. */
static void ask(struct harness_daemon *d, const char *req, char *reply, size_t size)
{
    struct harness_conn *c = NULL;

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, req, reply, size));
    harness_close(c);
}

static void test_pam_lockout_delay_lock_escalation(void **state)
{
    struct harness_daemon *d = start();
    struct said s;
    uint64_t t0, ms;
    char reply[HARNESS_LINE];

    (void)state;
    service(d, "pre", "preauth", "max_delay=10");
    service(d, "pre-short", "preauth", "max_delay=1");
    service(d, "fail", "authfail", "");
    /* No failure yet: no wait. */
    assert_int_equal(auth(d, "pre", "root", RHOST, 1, &s), PAM_SUCCESS);
    /* One failure: the next attempt waits delay(1) = 2 s, then goes on to the password. */
    assert_int_equal(auth(d, "fail", "root", RHOST, 1, &s), PAM_AUTH_ERR);
    t0 = harness_now_ms();
    assert_int_equal(auth(d, "pre", "root", RHOST, 1, &s), PAM_SUCCESS);
    ms = harness_now_ms() - t0;
    if (ms < 1000)
        fail_msg("preauth after a failure answered in %llu ms: no delay waited",
                 (unsigned long long)ms);
    assert_string_equal(s.msgs, "");
    /* A delay longer than max_delay: refused at once, and told when to come back. */
    assert_int_equal(auth(d, "fail", "root", RHOST, 1, &s), PAM_AUTH_ERR);
    assert_int_equal(auth(d, "pre-short", "root", RHOST, 1, &s), PAM_AUTH_ERR);
    if (!strstr(s.msgs, "Too many failed login attempts: try again in "))
        fail_msg("a delay past max_delay said: \"%s\"", s.msgs);
    /* The 3rd failure locks for unlock_time (5 s): told once on one handle, three calls. */
    assert_int_equal(auth(d, "fail", "root", RHOST, 1, &s), PAM_AUTH_ERR);
    assert_int_equal(auth(d, "pre", "root", RHOST, 3, &s), PAM_MAXTRIES);
    if (harness_count(s.msgs, "Too many failed login attempts: locked for ") != 1 ||
        !strstr(s.msgs, " second") || !strstr(s.msgs, " from this address.\n"))
        fail_msg("the lock said, over three calls on one handle: \"%s\"", s.msgs);
    /* Wait for the lock's end, then lock again: 30 times as long (150 s). */
    t0 = harness_now_ms();
    do {
        if (harness_now_ms() - t0 > 30000)
            fail_msg("the 5 s lock never ended");
        usleep(200 * 1000);
    } while (auth(d, "pre", "root", RHOST, 1, &s) != PAM_SUCCESS);
    for (int i = 0; i < 3; i++)
        assert_int_equal(auth(d, "fail", "root", RHOST, 1, &s), PAM_AUTH_ERR);
    assert_int_equal(auth(d, "pre", "root", RHOST, 2, &s), PAM_MAXTRIES);
    if (!strstr(s.msgs, "locked for 3 minutes from this address.") &&
        !strstr(s.msgs, "locked for 2 minutes from this address."))
        fail_msg("the second lock said: \"%s\"", s.msgs);
    ask(d, "PEEK event=authfail user=root rhost=" RHOST, reply, sizeof(reply));
    if (strncmp(reply, "OK false 0 ", 11) != 0 || atoi(reply + 11) < 30)
        fail_msg("the escalated lock: %s", reply);
    /* divvyctl locked lists the lock; unlock ends it and forgets the level. */
    {
        char sock[HARNESS_PATH + 8];
        struct harness_ctl *ctl;

        snprintf(sock, sizeof(sock), "unix:%s", d->sock);
        ctl = harness_ctl_run(false, NULL, 0,
                              (const char *const[]){ "-s", sock, "locked", NULL });
        if (!strstr(ctl->out, "login-user-source  user=root rhost=" RHOST))
            fail_msg("divvyctl locked:\n%s%s", ctl->out, ctl->err);
        ctl = harness_ctl_run(false, NULL, 0,
                              (const char *const[]){ "-s", sock, "unlock", "root", NULL });
        if (!strstr(ctl->out, "cleared "))
            fail_msg("divvyctl unlock root:\n%s%s", ctl->out, ctl->err);
    }
    assert_int_equal(auth(d, "pre", "root", RHOST, 1, &s), PAM_SUCCESS);
    for (int i = 0; i < 3; i++)
        assert_int_equal(auth(d, "fail", "root", RHOST, 1, &s), PAM_AUTH_ERR);
    ask(d, "PEEK event=authfail user=root rhost=" RHOST, reply, sizeof(reply));
    if (strncmp(reply, "OK false 0 ", 11) != 0 || atoi(reply + 11) > 5)
        fail_msg("after unlock the next lock is the first again (5 s): %s", reply);
}

static void test_pam_unknown_users_per_source(void **state)
{
    struct harness_daemon *d = start();
    char name[32], reply[HARNESS_LINE];
    struct said s;

    (void)state;
    service(d, "pre", "preauth", "unknown_users=source");
    service(d, "fail", "authfail", "unknown_users=source");
    /* Three made-up names from one source: one counter (login-unknown), none per name. */
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof(name), "nosuch-divvy-%d", i);
        assert_int_equal(auth(d, "pre", name, RHOST, 1, &s), PAM_SUCCESS);
        assert_int_equal(auth(d, "fail", name, RHOST, 1, &s), PAM_AUTH_ERR);
    }
    ask(d, "PEEK event=authfail user=nosuch-divvy-0 rhost=" RHOST, reply, sizeof(reply));
    if (strncmp(reply, "OK true 3 0 ", 12) != 0)
        fail_msg("a made-up name has a counter of its own: %s", reply);
    /* The source's unknown names are locked: any other made-up name is refused ... */
    assert_int_equal(auth(d, "pre", "nosuch-divvy-9", RHOST, 1, &s), PAM_MAXTRIES);
    assert_non_null(strstr(s.msgs, "locked for 10 minutes from this address."));
    /* ... from this source only, and a real user from it is not. */
    assert_int_equal(auth(d, "pre", "nosuch-divvy-9", "192.0.2.78", 1, &s), PAM_SUCCESS);
    assert_int_equal(auth(d, "pre", "daemon", RHOST, 1, &s), PAM_SUCCESS);
}

static void test_pam_local_users_only(void **state)
{
    struct harness_daemon *d = start();
    char reply[HARNESS_LINE];
    struct said s;

    (void)state;
    service(d, "fail", "authfail", "local_users_only");
    /* Not in /etc/passwd: ignored (pam_permit decides), and nothing counted. */
    assert_int_equal(auth(d, "fail", "nosuch-divvy-local", RHOST, 1, &s), PAM_SUCCESS);
    ask(d, "PEEK event=authfail user=nosuch-divvy-local rhost=" RHOST, reply, sizeof(reply));
    if (strncmp(reply, "OK true 3 0 ", 12) != 0)
        fail_msg("a non-local user was counted: %s", reply);
    /* root is in /etc/passwd: counted (authfail always fails). */
    assert_int_equal(auth(d, "fail", "root", RHOST, 1, &s), PAM_AUTH_ERR);
    ask(d, "PEEK event=authfail user=root rhost=" RHOST, reply, sizeof(reply));
    if (strncmp(reply, "OK false 2 ", 11) != 0 && strncmp(reply, "OK true 2 ", 10) != 0)
        fail_msg("root's failure was not counted: %s", reply);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pam_lockout_delay_lock_escalation, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_pam_unknown_users_per_source, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_pam_local_users_only, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("pam_lockout", tests, NULL, NULL);
}
