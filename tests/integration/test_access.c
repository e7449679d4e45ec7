/* SPDX-License-Identifier: MIT */
/*
 * Integration: who may do what.  server.socket_mode sets the Unix socket's
 * permissions; a non-root peer on the Unix socket is served but refused the
 * admin verbs, and never matches a source = "privileged" rule, which only
 * root on the Unix socket does (TCP peers never do).  Needs root to switch
 * to an unprivileged uid; skipped otherwise.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY 65534

static const char access_conf[] =
    "server = { socket_mode = \"0666\"; };\n"
    "rules = (\n"
    "    { match = { path = \"/login\"; }; source = \"privileged\";\n"
    "      credit_limit = 2; reset_seconds = 600; label = \"login\"; },\n"
    "    { match = { path = \"/open\"; }; credit_limit = 5; reset_seconds = 600; },\n"
    "    { default = true; credit_limit = 7; reset_seconds = 0; }\n"
    ");\n";

static struct harness_daemon *start_access(void)
{
    struct harness_opts o = { .config_name = "access.conf", .config_text = access_conf };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    return d;
}

/* Runs in a child as uid/gid 65534: exit 0, or the number of the failed step
 * (with the reply on stderr). */
static int as_nobody(void *arg)
{
    static const struct { const char *req, *want; } steps[] = {
        { "PING", "OK pong" },
        /* The privileged rule is skipped: the default decides. */
        { "HIT path=/login", "OK true 7 0" },
        { "RESET path=/open", "ERR forbidden" },
        { "RELOAD", "ERR forbidden" },
        { "HIT path=/open", "OK true 3 600" },
        { "EXPLAIN path=/login", "OK 3" },
    };
    struct harness_daemon *d = arg;
    struct harness_conn *c;
    char r[HARNESS_LINE];

    if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0) {
        perror("as_nobody: drop privileges");
        return 100;
    }
    if (harness_connect(d, HARNESS_UNIX, &c) < 0) {
        perror("as_nobody: connect");
        return 101;
    }
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        if (harness_cmd(c, steps[i].req, r, sizeof(r)) < 0 ||
            strncmp(r, steps[i].want, strlen(steps[i].want)) != 0) {
            fprintf(stderr, "as_nobody: \"%s\" -> \"%s\", want \"%s...\"\n", steps[i].req, r,
                    steps[i].want);
            return (int)i + 1;
        }
    }
    return 0;
}

static void test_access_privileged_rules_and_admin(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *root_unix, *tcp;
    struct stat st;
    pid_t pid;
    int status;
    char r[HARNESS_LINE];

    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: skipping the unprivileged-peer checks)\n");
        skip();
    }
    d = start_access();
    /* socket_mode applies to the socket; the temp dir must let others in. */
    assert_int_equal(stat(d->sock, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0666);
    assert_int_equal(chmod(d->dir, 0755), 0);

    CHECK(harness_connect(d, HARNESS_UNIX, &root_unix));
    CHECK(harness_connect(d, HARNESS_TCP, &tcp));
    /* Root on the Unix socket matches the privileged rule ... */
    EXPECT_REPLY(root_unix, "HIT path=/login", "OK true 1 600");
    /* ... a TCP peer never does, even when root. */
    EXPECT_REPLY(tcp, "HIT path=/login", "OK true 7 0");
    EXPECT_REPLY(root_unix, "HIT path=/open", "OK true 4 600");

    CHECK(harness_spawn(as_nobody, d, &pid));
    CHECK(harness_reap(pid, 20000, &status));
    if (status != 0)
        fail_msg("unprivileged client failed at step %d", status);

    /* The unprivileged HIT on /open counted; RESET from root still works. */
    EXPECT_OK(root_unix, "HIT path=/open", true, 2, 599, 600);
    EXPECT_OK(root_unix, "HIT path=/login", true, 0, 599, 600);
    EXPECT_REPLY(root_unix, "RESET path=/login", "OK true 2 0 login");
    EXPECT_REPLY(root_unix, "HIT path=/login", "OK true 1 600");
    CHECK(harness_cmd(tcp, "RESET path=/login", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR forbidden");
    harness_close(root_unix);
    harness_close(tcp);
}

/* The default socket mode (0660) keeps other users out entirely. */
static int connect_as_nobody(void *arg)
{
    struct harness_daemon *d = arg;
    struct harness_conn *c;
    int r;

    if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
        return 100;
    r = harness_connect(d, HARNESS_UNIX, &c);
    if (r >= 0) {
        fprintf(stderr, "connect_as_nobody: connected to a 0660 root socket\n");
        return 1;
    }
    return r == -EACCES ? 0 : 2;
}

static void test_access_default_socket_mode(void **state)
{
    static const char conf[] =
        "rules = ( { default = true; credit_limit = 1; reset_seconds = 0; } );\n";
    struct harness_opts o = { .config_name = "mode.conf", .config_text = conf };
    struct harness_daemon *d = NULL;
    struct stat st;
    pid_t pid;
    int status;

    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: skipping)\n");
        skip();
    }
    CHECK(harness_start(&o, &d));
    assert_int_equal(stat(d->sock, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0660);
    assert_int_equal(chmod(d->dir, 0755), 0);
    CHECK(harness_spawn(connect_as_nobody, d, &pid));
    CHECK(harness_reap(pid, 20000, &status));
    assert_int_equal(status, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_access_privileged_rules_and_admin, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_access_default_socket_mode, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("access", tests, NULL, NULL);
}
