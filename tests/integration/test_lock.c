/* SPDX-License-Identifier: MIT */
/*
 * One divvyd per state directory (docs/daemon.md "One daemon per state
 * directory"): a second divvyd on a state directory in use exits 1 at once
 * with one line naming the first one's PID, and touches nothing: the first
 * keeps serving, with the same rules generation in the state directory
 * (no new rules.<generation> file, the tables and the lock file untouched).
 * `divvyd --check` takes no lock.  Once the first stops (cleanly, or killed
 * with SIGKILL: the kernel drops a dead process's lock), a new one starts
 * on the same directory and keeps the counts.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define RUN_MS 10000

static const char lock_conf[] =
    "table = { slots = 64; fast_slots = 64; };\n"
    "rules = (\n"
    "    { match = { path = \"/u\"; }; credit_limit = 100; reset_seconds = 3600;\n"
    "      actor = \"user\"; },\n"
    "    { match = { path = \"/f\"; }; credit_limit = 100; reset_seconds = 3600;\n"
    "      actor = \"user\"; fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static void stat_in(const struct harness_daemon *d, const char *name, struct stat *st)
{
    char path[HARNESS_PATH + 32];

    snprintf(path, sizeof(path), "%s/%s", d->state, name);
    assert_int_equal(stat(path, st), 0);
}

static void assert_same_file(const struct stat *a, const struct stat *b)
{
    assert_int_equal(a->st_ino, b->st_ino);
    assert_int_equal(a->st_size, b->st_size);
    assert_int_equal(a->st_mtim.tv_sec, b->st_mtim.tv_sec);
    assert_int_equal(a->st_mtim.tv_nsec, b->st_mtim.tv_nsec);
}

/* The lock file holds @pid, and is divvyd's alone. */
static void assert_lock_holds(const struct harness_daemon *d, pid_t pid)
{
    char path[HARNESS_PATH + 32], buf[32] = "", want[32];
    struct stat st;
    int fd;

    snprintf(path, sizeof(path), "%s/divvyd.lock", d->state);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_true(read(fd, buf, sizeof(buf) - 1) > 0);
    assert_int_equal(fstat(fd, &st), 0);
    close(fd);
    snprintf(want, sizeof(want), "%ld\n", (long)pid);
    assert_string_equal(buf, want);
    assert_int_equal(st.st_mode & 07777, 0600);
}

/* Runs a second divvyd on @d's state dir (its own socket): its status and stderr. */
static void run_second(struct harness_daemon *d, bool check, int *ret_status, char *err,
                       size_t err_size)
{
    char sock[HARNESS_PATH + 32];
    const char *args[] = { "--config", d->config, "--state-dir", d->state, "--listen", sock,
                           "--workers", "1", check ? "--check" : NULL, NULL };

    snprintf(sock, sizeof(sock), "unix:%s/second.sock", d->dir);
    CHECK(harness_run_divvyd(args, RUN_MS, ret_status, NULL, 0, err, err_size));
}

static void test_lock_second_daemon_refused(void **state)
{
    struct harness_opts o = { .config_text = lock_conf, .workers = 1 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    struct stat before[5], after[5];
    char rules_name[64];
    const char *names[5] = { "private.table", "privileged.table", rules_name, "divvyd.lock",
                             "fast.rules" };
    char listing[512], listing2[512], err[4096], want[HARNESS_PATH + 128];
    long long gen, gen2;
    int status;
    uint64_t t0;

    (void)state;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/u user=a", true, 99, 3599, 3600);
    CHECK(harness_get_stat(c, "config_generation", &gen));
    assert_lock_holds(d, d->pid);
    /* The fast table is a memfd (docs/dev/shm.md): no file of its own, only the
     * record of the rules its counters belong to (fast.rules). */
    snprintf(rules_name, sizeof(rules_name), "rules.%lld", gen);
    snprintf(want, sizeof(want), "divvyd.lock fast.rules private.table privileged.table %s",
             rules_name);
    harness_list_dir(d->state, listing, sizeof(listing));
    assert_string_equal(listing, want);
    for (int i = 0; i < 5; i++)
        stat_in(d, names[i], &before[i]);

    /* The second one: exit 1, quickly, one line naming the first. */
    t0 = harness_now_ms();
    run_second(d, false, &status, err, sizeof(err));
    snprintf(want, sizeof(want), "divvyd: state directory %s is in use by divvyd (pid %ld)\n",
             d->state, (long)d->pid);
    if (status != 1 || strcmp(err, want) != 0)
        fail_msg("second divvyd: status %d (want 1), stderr:\n%s(want: %s)", status, err, want);
    assert_true(harness_now_ms() - t0 < RUN_MS);

    /* The first serves on, with the rules it published, nothing replaced. */
    assert_true(harness_alive(d));
    EXPECT_OK(c, "HIT path=/u user=a", true, 98, 3599, 3600);
    CHECK(harness_get_stat(c, "config_generation", &gen2));
    assert_int_equal(gen2, gen);
    harness_list_dir(d->state, listing2, sizeof(listing2));
    assert_string_equal(listing2, listing);
    for (int i = 0; i < 5; i++) {
        stat_in(d, names[i], &after[i]);
        assert_same_file(&before[i], &after[i]);
    }
    assert_lock_holds(d, d->pid);

    /* --check takes no lock: it validates the config beside a running divvyd. */
    run_second(d, true, &status, err, sizeof(err));
    if (status != 0 || strstr(err, "in use"))
        fail_msg("divvyd --check: status %d, stderr:\n%s", status, err);

    /* After a clean stop, a new divvyd takes the directory, counts kept. */
    harness_close(c);
    CHECK(harness_stop(d, &status));
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(harness_restart(d));
    assert_lock_holds(d, d->pid);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/u user=a", true, 97, 3590, 3600);
    harness_close(c);
}

static void test_lock_released_by_a_killed_daemon(void **state)
{
    struct harness_opts o = { .config_text = lock_conf, .workers = 1 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    uint64_t deadline;
    pid_t old;

    (void)state;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/u user=a", true, 99, 3599, 3600);
    harness_close(c);
    old = d->pid;
    d->expect_exit = true;
    CHECK(harness_kill(d, SIGKILL));
    deadline = harness_now_ms() + HARNESS_STOP_MS;
    while (harness_alive(d) && harness_now_ms() < deadline)
        harness_pause_ms(2);
    assert_false(harness_alive(d));

    /* The file still names the dead one; its lock went with it. */
    assert_lock_holds(d, old);
    CHECK(harness_restart(d));
    assert_lock_holds(d, d->pid);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/u user=a", true, 98, 3590, 3600);
    harness_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lock_second_daemon_refused, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_lock_released_by_a_killed_daemon, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("lock", tests, NULL, NULL);
}
