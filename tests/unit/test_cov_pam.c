/* SPDX-License-Identifier: MIT */
/*
 * Unit: pam_divvy's paths that the integration test (test_pam, a real stack
 * against the real divvyd) does not reach: argument parsing and its errors
 * (unknown options, bad socket=, timeout_ms= and fields=), the outage policy
 * per mode and phase with an unusable address, authfail in the account
 * phase, pam_get_user() failing, and the audit/denied/silent log branches
 * against a fake divvyd (a thread answering one canned reply per
 * connection).  pam/pam_divvy.c is compiled into this binary; the PAM handle
 * comes from the real libpam (pam_start_confdir(), nothing dlopen()ed).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <cmocka.h>

#include <security/pam_appl.h>

#include "../../pam/pam_divvy.c"

/* ---- a PAM handle ------------------------------------------------------------ */

static char confdir[64];

static int conv_fail(int n, const struct pam_message **msg, struct pam_response **resp,
                     void *data)
{
    (void)n;
    (void)msg;
    (void)resp;
    (void)data;
    return PAM_CONV_ERR;
}

/* Collects error messages (the "try again" line) into @data, a char[512]. */
static int conv_collect(int n, const struct pam_message **msg, struct pam_response **resp,
                        void *data)
{
    char *buf = data;
    struct pam_response *r = calloc((size_t)n, sizeof(*r));

    if (!r)
        return PAM_BUF_ERR;
    for (int i = 0; i < n; i++)
        snprintf(buf + strlen(buf), 512 - strlen(buf), "%s\n", msg[i]->msg);
    *resp = r;
    return PAM_SUCCESS;
}

static char said[512];

static pam_handle_t *handle(const char *user, bool collect)
{
    struct pam_conv c = { collect ? conv_collect : conv_fail, said };
    pam_handle_t *pamh = NULL;

    said[0] = '\0';
    assert_int_equal(pam_start_confdir("cov", user, &c, confdir, &pamh), PAM_SUCCESS);
    pam_set_item(pamh, PAM_RHOST, "192.0.2.7");
    pam_set_item(pamh, PAM_TTY, "ssh");
    return pamh;
}

static int group_setup(void **state)
{
    char path[128];
    FILE *f;

    (void)state;
    snprintf(confdir, sizeof(confdir), "/tmp/divvy-covpam.XXXXXX");
    if (!mkdtemp(confdir))
        return -1;
    snprintf(path, sizeof(path), "%s/cov", confdir);
    f = fopen(path, "w");
    if (!f)
        return -1;
    fputs("auth required pam_permit.so\n", f);
    return fclose(f);
}

static int group_teardown(void **state)
{
    char path[128];

    (void)state;
    snprintf(path, sizeof(path), "%s/cov", confdir);
    unlink(path);
    rmdir(confdir);
    return 0;
}

/* ---- a fake divvyd: one canned reply per connection ---------------------------------- */

struct fake {
    char dir[64], path[128], arg[160];
    int lfd, stop[2];
    pthread_t thread;
    const char *reply;          /* what every request gets */
    char last[512];             /* the last request line */
};

static void *fake_main(void *arg)
{
    struct fake *f = arg;

    for (;;) {
        struct pollfd p[2] = { { .fd = f->lfd, .events = POLLIN },
                               { .fd = f->stop[0], .events = POLLIN } };
        size_t len = 0;
        int fd;

        if (poll(p, 2, -1) < 0 || p[1].revents)
            break;
        fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            break;
        /* One request line, one reply, then wait for the client to hang up. */
        while (len < sizeof(f->last) - 1) {
            ssize_t n = read(fd, f->last + len, 1);

            if (n <= 0 || f->last[len] == '\n')
                break;
            len++;
        }
        f->last[len] = '\0';
        if (write(fd, f->reply, strlen(f->reply)) < 0) {
            close(fd);
            break;
        }
        while (read(fd, f->last + len, 1) > 0)
            ;
        close(fd);
    }
    return NULL;
}

static void fake_start(struct fake *f, const char *reply)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };

    memset(f, 0, sizeof(*f));
    f->reply = reply;
    snprintf(f->dir, sizeof(f->dir), "/tmp/divvy-covfake.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/s", f->dir);
    snprintf(f->arg, sizeof(f->arg), "socket=%s", f->path);
    assert_true(strlen(f->path) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, f->path, strlen(f->path) + 1);
    f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(f->lfd >= 0);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(f->lfd, 8), 0);
    assert_int_equal(pipe2(f->stop, O_CLOEXEC), 0);
    assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
    assert_int_equal(write(f->stop[1], "x", 1), 1);
    pthread_join(f->thread, NULL);
    close(f->lfd);
    close(f->stop[0]);
    close(f->stop[1]);
    unlink(f->path);
    rmdir(f->dir);
}

/* ---- arguments ---------------------------------------------------------------------- */

static void test_cov_pam_args(void **state)
{
    static const char *argv[] = {
        "authfail", "socket=relative/path", "timeout_ms=abc", "fields=service,bogus,,ruser",
        "frobnicate", "fail_closed", "audit", "debug", "silent",
    };
    char longpath[300];
    const char *one[1];
    pam_handle_t *pamh = handle("alice", false);
    struct pd_args a;

    (void)state;
    pd_parse_args(pamh, 0, 9, argv, &a);
    assert_int_equal(a.mode, PD_MODE_AUTHFAIL);
    assert_true(a.bad_address);
    assert_int_equal(a.timeout_ms, PD_TIMEOUT_DEFAULT);
    assert_int_equal(a.fields, (1u << PD_FIELD_SERVICE) | (1u << PD_FIELD_RUSER));
    assert_true(a.fail_closed && a.audit && a.debug && a.silent);

    one[0] = "timeout_ms=0";
    pd_parse_args(pamh, PAM_SILENT, 1, one, &a);
    assert_int_equal(a.timeout_ms, PD_TIMEOUT_DEFAULT);
    assert_true(a.silent);
    assert_int_equal(a.mode, PD_MODE_NONE);
    one[0] = "timeout_ms=60001";
    pd_parse_args(pamh, 0, 1, one, &a);
    assert_int_equal(a.timeout_ms, PD_TIMEOUT_DEFAULT);
    one[0] = "timeout_ms=250";
    pd_parse_args(pamh, 0, 1, one, &a);
    assert_int_equal(a.timeout_ms, 250);

    one[0] = "socket=/run/x.sock";
    pd_parse_args(pamh, 0, 1, one, &a);
    assert_string_equal(a.address, "unix:/run/x.sock");
    assert_false(a.bad_address);
    one[0] = "socket=tcp:127.0.0.1:8321";
    pd_parse_args(pamh, 0, 1, one, &a);
    assert_true(a.bad_address);
    memset(longpath, 'p', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = '\0';
    memcpy(longpath, "socket=/", 8);
    one[0] = longpath;
    pd_parse_args(pamh, 0, 1, one, &a);
    assert_true(a.bad_address);

    one[0] = "fail_open";
    pd_parse_args(pamh, 0, 1, one, &a);
    assert_false(a.fail_closed);
    assert_int_equal(a.fields, PD_FIELDS_DEFAULT);

    assert_string_equal(pd_mode_name(PD_MODE_PREAUTH), "preauth");
    assert_string_equal(pd_mode_name(PD_MODE_AUTHFAIL), "authfail");
    assert_string_equal(pd_mode_name(PD_MODE_AUTHSUCC), "authsucc");
    assert_string_equal(pd_mode_name(PD_MODE_NONE), "none");
    assert_int_equal(pam_sm_setcred(pamh, 0, 0, NULL), PAM_SUCCESS);
    pam_end(pamh, PAM_SUCCESS);
}

/* ---- outage: an unusable socket= ------------------------------------------------------ */

static int run_bad(const char *mode, const char *policy, bool account)
{
    const char *argv[] = { mode, "socket=nowhere", policy, "debug" };
    pam_handle_t *pamh = handle("alice", false);
    int rv = account ? pam_sm_acct_mgmt(pamh, 0, 4, argv)
                     : pam_sm_authenticate(pamh, 0, 4, argv);

    pam_end(pamh, rv);
    return rv;
}

static void test_cov_pam_outage(void **state)
{
    (void)state;
    assert_int_equal(run_bad("preauth", "fail_open", false), PAM_SUCCESS);
    assert_int_equal(run_bad("preauth", "fail_closed", false), PAM_AUTHINFO_UNAVAIL);
    assert_int_equal(run_bad("preauth", "fail_closed", true), PAM_PERM_DENIED);
    assert_int_equal(run_bad("authsucc", "fail_closed", false), PAM_AUTHINFO_UNAVAIL);
    /* The password already failed: nothing to open or close. */
    assert_int_equal(run_bad("authfail", "fail_open", false), PAM_AUTH_ERR);
    /* authfail in the account phase is checked as preauth. */
    assert_int_equal(run_bad("authfail", "fail_closed", true), PAM_PERM_DENIED);
}

static void test_cov_pam_no_user(void **state)
{
    const char *argv[] = { "preauth", "socket=nowhere" };
    pam_handle_t *pamh = handle(NULL, false);

    (void)state;
    /* No user and a conversation that fails: pam_get_user()'s error, no request. */
    assert_int_not_equal(pam_sm_authenticate(pamh, 0, 2, argv), PAM_SUCCESS);
    pam_end(pamh, PAM_SUCCESS);
}

/* ---- answers from a fake divvyd -------------------------------------------------------- */

static int run_fake(struct fake *f, const char *mode, const char *extra, bool account)
{
    const char *argv[] = { mode, f->arg, "audit", "debug", "timeout_ms=2000", extra };
    pam_handle_t *pamh = handle("bob", true);
    int rv = account ? pam_sm_acct_mgmt(pamh, 0, 6, argv)
                     : pam_sm_authenticate(pamh, 0, 6, argv);

    pam_end(pamh, rv);
    return rv;
}

static void test_cov_pam_answers(void **state)
{
    struct fake f;

    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: pam_divvy refuses to ask as anyone else; skipping)\n");
        skip();
    }
    fake_start(&f, "OK true 4 60 login-user-source\n");
    assert_int_equal(run_fake(&f, "preauth", "fail_open", false), PAM_SUCCESS);
    assert_non_null(strstr(f.last, "PEEK event=authfail"));
    assert_non_null(strstr(f.last, "user=bob"));
    assert_int_equal(run_fake(&f, "preauth", "fail_open", true), PAM_SUCCESS);
    assert_int_equal(run_fake(&f, "authfail", "fail_open", false), PAM_AUTH_ERR);
    assert_non_null(strstr(f.last, "TAKE 1 event=authfail"));
    assert_int_equal(run_fake(&f, "authsucc", "fail_open", false), PAM_SUCCESS);
    assert_non_null(strstr(f.last, "RESET event=authfail"));
    fake_stop(&f);

    fake_start(&f, "OK false 0 42 login-user-source\n");
    assert_int_equal(run_fake(&f, "preauth", "fail_open", false), PAM_MAXTRIES);
    assert_non_null(strstr(said, "locked for 42 seconds from this address."));
    assert_int_equal(run_fake(&f, "preauth", "silent", true), PAM_PERM_DENIED);
    assert_string_equal(said, "");
    /* A denied TAKE: the failure is not counted, and logged. */
    assert_int_equal(run_fake(&f, "authfail", "fail_open", false), PAM_AUTH_ERR);
    fake_stop(&f);

    fake_start(&f, "OK false 0 1 x\n");
    assert_int_equal(run_fake(&f, "preauth", "fail_open", false), PAM_MAXTRIES);
    assert_non_null(strstr(said, "locked for 1 second from this address."));
    fake_stop(&f);

    fake_start(&f, "OK false 0 883 x\n");
    assert_int_equal(run_fake(&f, "preauth", "fail_open", false), PAM_MAXTRIES);
    assert_non_null(strstr(said, "locked for 15 minutes from this address."));
    fake_stop(&f);

    fake_start(&f, "OK false 0 7201 x\n");
    assert_int_equal(run_fake(&f, "preauth", "fail_open", false), PAM_MAXTRIES);
    assert_non_null(strstr(said, "locked for 3 hours from this address."));
    fake_stop(&f);

    /* A delay (credit left) longer than max_delay: refused now, "try again". */
    fake_start(&f, "OK false 3 42 x\n");
    assert_int_equal(run_fake(&f, "preauth", "max_delay=5", false), PAM_AUTH_ERR);
    assert_non_null(strstr(said, "try again in 42 seconds."));
    /* In the account phase a delay is no refusal. */
    assert_int_equal(run_fake(&f, "preauth", "max_delay=5", true), PAM_SUCCESS);
    fake_stop(&f);

    fake_start(&f, "OK false 0 0 x\n");
    assert_int_equal(run_fake(&f, "preauth", "fail_open", false), PAM_MAXTRIES);
    assert_non_null(strstr(said, "logins are refused"));
    fake_stop(&f);

    /* An error reply is an outage: fail_closed refuses. */
    fake_start(&f, "ERR forbidden \"RESET needs root\"\n");
    assert_int_equal(run_fake(&f, "authsucc", "fail_closed", false), PAM_AUTHINFO_UNAVAIL);
    fake_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cov_pam_args),
        cmocka_unit_test(test_cov_pam_outage),
        cmocka_unit_test(test_cov_pam_no_user),
        cmocka_unit_test(test_cov_pam_answers),
    };

    return cmocka_run_group_tests_name("cov_pam", tests, group_setup, group_teardown);
}
