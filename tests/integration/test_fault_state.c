/* SPDX-License-Identifier: MIT */
/*
 * Fault injection: a state directory divvyd cannot use at start (DESIGN
 * section 4: "a full filesystem fails at start").  The state dir's path runs
 * through a regular file; the dir, or the table files already in it, are
 * not writable for divvyd's user (as root the test runs divvyd as nobody,
 * since root ignores permissions); the state dir is a tiny tmpfs (mounted in
 * a private mount namespace of a forked child) too small for the first
 * table, for the second, or for the rules file.  Each time divvyd says which
 * file and why, exits non-zero within a deadline, and leaves nothing
 * half-created: no table, rules or temporary file, no state dir it made,
 * and existing tables untouched (their counts are there after a normal
 * restart).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY     65534
#define RUN_MS     20000
#define OUT_SIZE   8192

static const char state_conf[] =
    "table = { slots = 64; fast_slots = 64; privileged_slots = 64; };\n"
    "rules = (\n"
    "    { match = { path = \"/u\"; }; credit_limit = 100; reset_seconds = 3600;\n"
    "      actor = \"user\"; },\n"
    "    { match = { path = \"/f\"; }; credit_limit = 100; reset_seconds = 3600;\n"
    "      actor = \"user\"; fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

/* The scratch dir of the test that runs now: removed by the teardown. */
static char scratch[64];

static int state_teardown(void **state)
{
    int r = harness_teardown(state);

    if (scratch[0]) {
        harness_rm_tree(scratch);
        scratch[0] = '\0';
    }
    return r;
}

/* A world-readable scratch dir holding the config (nobody must read it). */
static void make_scratch(char *conf, size_t size)
{
    int fd;

    snprintf(scratch, sizeof(scratch), "/tmp/divvy-fault.XXXXXX");
    assert_non_null(mkdtemp(scratch));
    assert_int_equal(chmod(scratch, 0755), 0);
    snprintf(conf, size, "%s/divvy.conf", scratch);
    fd = open(conf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, state_conf, sizeof(state_conf) - 1),
                     (ssize_t)(sizeof(state_conf) - 1));
    close(fd);
}

/* What one divvyd run in a child process saw, in shared memory. */
struct run_result {
    int rc;                     /* harness_run_divvyd()'s result */
    int status;                 /* exit code, or 128 + signal */
    int setup_errno;            /* the child's own setup failed */
    char setup_what[64];
    uint64_t ms;
    char err[OUT_SIZE];
    char listing[1024];         /* what the state dir (or its parent) holds afterwards */
};

struct run_plan {
    struct run_result *res;
    const char *config;
    const char *state;          /* -s */
    const char *listen;         /* -l */
    const char *list;           /* listed afterwards */
    bool as_nobody;
    const char *divvyd;         /* with as_nobody: a copy of divvyd nobody may run */
    const char *tmpfs;          /* mount a tmpfs of this size ("48k") on @tmpfs_at */
    const char *tmpfs_at;
};

static int run_fail(struct run_result *res, const char *what)
{
    res->setup_errno = errno;
    snprintf(res->setup_what, sizeof(res->setup_what), "%s", what);
    return 1;
}

static int run_child(void *arg)
{
    struct run_plan *p = arg;
    struct run_result *res = p->res;
    const char *args[] = { "--config", p->config, "--state-dir", p->state, "--listen", p->listen,
                           "--workers", "1", NULL };
    uint64_t t0;

    if (p->tmpfs) {
        char opts[64];

        if (unshare(CLONE_NEWNS) < 0)
            return run_fail(res, "unshare(CLONE_NEWNS)");
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
            return run_fail(res, "mount --make-rprivate /");
        snprintf(opts, sizeof(opts), "size=%s,mode=0755", p->tmpfs);
        if (mount("tmpfs", p->tmpfs_at, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
            return run_fail(res, "mount tmpfs");
    }
    if (p->as_nobody) {
        /* harness_run_divvyd() runs $DIVVYD: the copy outside the build tree. */
        if (setenv("DIVVYD", p->divvyd, 1) < 0)
            return run_fail(res, "setenv(DIVVYD)");
        if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
            return run_fail(res, "setuid(nobody)");
        /* A credential change clears the parent-death signal. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    }
    t0 = harness_now_ms();
    res->rc = harness_run_divvyd(args, RUN_MS, &res->status, NULL, 0, res->err,
                                 sizeof(res->err));
    res->ms = harness_now_ms() - t0;
    harness_list_dir(p->list, res->listing, sizeof(res->listing));
    return 0;
}

static struct run_result *run_divvyd(struct run_plan *p)
{
    struct run_result *res = mmap(NULL, sizeof(*res), PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pid;
    int status;

    assert_true(res != MAP_FAILED);
    memset(res, 0, sizeof(*res));
    p->res = res;
    /* nobody cannot reach the build tree when it sits in a 0700 dir (/root/...). */
    if (p->as_nobody) {
        p->divvyd = harness_public_copy(harness_divvyd());
        if (!p->divvyd)
            fail_msg("copying %s for nobody: %s", harness_divvyd(), strerror(errno));
    }
    CHECK(harness_spawn(run_child, p, &pid));
    CHECK(harness_reap(pid, RUN_MS + 10000, &status));
    return res;
}

/* divvyd failed, quickly, with one clear line naming @file and @why. */
static void expect_refused(const struct run_result *res, const char *file, const char *why)
{
    char want[HARNESS_PATH + 64];

    if (res->setup_errno)
        fail_msg("test setup: %s: %s", res->setup_what, strerror(res->setup_errno));
    CHECK(res->rc);
    /* Exit 1 (a sanitizer's report would exit otherwise, and say so). */
    if (res->status != 1 || strstr(res->err, "Sanitizer") || strstr(res->err, "runtime error"))
        fail_msg("divvyd exited with status %d (want 1); stderr:\n%s", res->status, res->err);
    assert_true(res->ms < RUN_MS);
    snprintf(want, sizeof(want), "%s", file);
    if (!strstr(res->err, want) || !strstr(res->err, why))
        fail_msg("stderr does not name \"%s\" and \"%s\":\n%s", want, why, res->err);
    /* A refused start never claims to be ready. */
    if (strstr(res->err, "ready:"))
        fail_msg("divvyd said it was ready:\n%s", res->err);
}

static void expect_listing(const struct run_result *res, const char *want)
{
    if (strcmp(res->listing, want) != 0)
        fail_msg("left behind: \"%s\" (want \"%s\"); stderr:\n%s", res->listing, want, res->err);
}

/* ---- a path through a regular file ------------------------------------------------ */

static void test_fault_state_not_a_directory(void **state)
{
    char conf[HARNESS_PATH], file[HARNESS_PATH], st[HARNESS_PATH + 16], sock[HARNESS_PATH];
    struct run_plan p = { 0 };
    struct run_result *res;
    int fd;

    (void)state;
    make_scratch(conf, sizeof(conf));
    snprintf(file, sizeof(file), "%s/file", scratch);
    fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    close(fd);
    snprintf(st, sizeof(st), "%s/state", file);
    snprintf(sock, sizeof(sock), "unix:%s/divvy.sock", scratch);
    p = (struct run_plan){ .config = conf, .state = st, .listen = sock, .list = scratch };
    res = run_divvyd(&p);
    expect_refused(res, st, "Not a directory");
    expect_listing(res, "divvy.conf file");
    munmap(res, sizeof(*res));

    /* A missing parent: divvyd makes the state dir, not its parents. */
    snprintf(st, sizeof(st), "%s/no/state", scratch);
    p.state = st;
    res = run_divvyd(&p);
    expect_refused(res, st, "No such file or directory");
    expect_listing(res, "divvy.conf file");
    munmap(res, sizeof(*res));
}

/* ---- not writable ------------------------------------------------------------------ */

/* Runs divvyd as nobody when we are root (root ignores modes). */
static bool nobody_mode(void)
{
    return geteuid() == 0;
}

static void test_fault_state_unwritable_dir(void **state)
{
    char conf[HARNESS_PATH], st[HARNESS_PATH], sock[HARNESS_PATH + 16], run[HARNESS_PATH];
    struct run_plan p;
    struct run_result *res;

    (void)state;
    make_scratch(conf, sizeof(conf));
    snprintf(st, sizeof(st), "%s/state", scratch);
    snprintf(run, sizeof(run), "%s/run", scratch);
    assert_int_equal(mkdir(run, 0777), 0);
    assert_int_equal(chmod(run, 0777), 0);
    snprintf(sock, sizeof(sock), "unix:%s/divvy.sock", run);
    /* Root's 0755 dir for nobody; a 0500 dir for everybody else. */
    assert_int_equal(mkdir(st, nobody_mode() ? 0755 : 0500), 0);
    p = (struct run_plan){ .config = conf, .state = st, .listen = sock, .list = st,
                           .as_nobody = nobody_mode() };
    res = run_divvyd(&p);
    /* The first file divvyd makes there is its lock (docs/daemon.md). */
    expect_refused(res, "divvyd.lock", "Permission denied");
    expect_listing(res, "");
    munmap(res, sizeof(*res));
    chmod(st, 0755);
}

/* Tables from an earlier run that divvyd's user may not write: refused,
 * never replaced, and their counts are there when divvyd can open them. */
static void test_fault_state_unwritable_tables(void **state)
{
    struct harness_opts o = { .config_name = "divvy.conf", .config_text = state_conf };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    char sock[HARNESS_PATH + 32], run[HARNESS_PATH + 8], path[HARNESS_PATH + 32];
    struct stat before[3], after[3];
    const char *names[3] = { "fast.snapshot", "private.table", "privileged.table" };
    char listing[1024];
    struct run_plan p;
    struct run_result *res;
    int status;

    (void)state;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/u user=a", true, 99, 3599, 3600);
    EXPECT_OK(c, "HIT path=/u user=a", true, 98, 3599, 3600);
    EXPECT_OK(c, "HIT path=/f user=a", true, 99, 3599, 3600);
    harness_close(c);
    CHECK(harness_stop(d, &status));
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* nobody may enter the harness dir and write the state dir, but not the
     * tables (root's, 0660 and 0600); without root: read-only tables. */
    assert_int_equal(chmod(d->dir, 0755), 0);
    snprintf(run, sizeof(run), "%s/run", d->dir);
    assert_int_equal(mkdir(run, 0777), 0);
    assert_int_equal(chmod(run, 0777), 0);
    if (nobody_mode()) {
        /* The state dir and its lock are nobody's, as divvy's are divvy's. */
        snprintf(path, sizeof(path), "%s/divvyd.lock", d->state);
        assert_int_equal(chown(d->state, NOBODY, NOBODY), 0);
        assert_int_equal(chown(path, NOBODY, NOBODY), 0);
        assert_int_equal(chmod(d->config, 0644), 0);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s", d->state, names[i]);
        if (!nobody_mode())
            assert_int_equal(chmod(path, 0400), 0);
        assert_int_equal(stat(path, &before[i]), 0);
    }
    harness_list_dir(d->state, listing, sizeof(listing));
    /* The fast table lives in a memfd; a clean stop leaves its snapshot
     * (and the record of the fast_path rules it was written under). */
    if (strncmp(listing, "divvyd.lock fast.rules fast.snapshot private.table privileged.table "
                         "rules.", 74) != 0 ||
        strchr(listing + 74, ' '))
        fail_msg("after a clean stop the state dir holds \"%s\"", listing);
    snprintf(sock, sizeof(sock), "unix:%s/divvy.sock", run);
    p = (struct run_plan){ .config = d->config, .state = d->state, .listen = sock,
                           .list = d->state, .as_nobody = nobody_mode() };
    res = run_divvyd(&p);
    expect_refused(res, "private.table", "Permission denied");
    /* The tables are there, untouched; no new rules file, no temporary. */
    expect_listing(res, listing);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s", d->state, names[i]);
        assert_int_equal(stat(path, &after[i]), 0);
        assert_int_equal(after[i].st_ino, before[i].st_ino);
        assert_int_equal(after[i].st_size, before[i].st_size);
        assert_int_equal(after[i].st_mtim.tv_sec, before[i].st_mtim.tv_sec);
        assert_int_equal(after[i].st_mtim.tv_nsec, before[i].st_mtim.tv_nsec);
        if (!nobody_mode())
            chmod(path, 0600);
    }
    munmap(res, sizeof(*res));

    /* divvyd as itself again: the counts were never lost. */
    CHECK(harness_restart(d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/u user=a", true, 97, 3590, 3600);
    EXPECT_OK(c, "HIT path=/f user=a", true, 98, 3590, 3600);
    assert_int_equal(harness_log_contains(d, "reattached, counts kept"), 1);
    assert_int_equal(harness_log_contains(d, "fast-path table restored from"), 1);
    harness_close(c);
}

/* ---- a full filesystem ------------------------------------------------------------ */

/*
 * tmpfs sizes (pages of 4 KiB) against the lock file (its PID: one page),
 * the 64-slot private and privileged tables of 24 KiB (6 pages) each (the
 * fast table is a memfd, never in the state dir) and a rules file of one
 * page: 16k holds the lock and no table, 40k the lock and the private table
 * only, 52k the lock and both tables but no rules file.  @sub: divvyd
 * creates the state dir inside the tmpfs.
 */
static void full_fs(const char *size, bool sub, const char *failing)
{
    char conf[HARNESS_PATH], mnt[HARNESS_PATH], st[HARNESS_PATH + 8], sock[HARNESS_PATH + 16];
    struct run_plan p;
    struct run_result *res;

    make_scratch(conf, sizeof(conf));
    snprintf(mnt, sizeof(mnt), "%s/mnt", scratch);
    assert_int_equal(mkdir(mnt, 0755), 0);
    snprintf(st, sizeof(st), sub ? "%s/sub" : "%s", mnt);
    snprintf(sock, sizeof(sock), "unix:%s/divvy.sock", scratch);
    p = (struct run_plan){ .config = conf, .state = st, .listen = sock, .list = mnt,
                           .tmpfs = size, .tmpfs_at = mnt };
    res = run_divvyd(&p);
    if (res->setup_errno == EPERM || res->setup_errno == EACCES) {
        fprintf(stderr, "  SKIP: %s: %s (no tmpfs can be mounted here)\n", res->setup_what,
                strerror(res->setup_errno));
        munmap(res, sizeof(*res));
        skip();
    }
    expect_refused(res, failing, "No space left on device");
    expect_listing(res, "");
    fprintf(stderr, "  tmpfs %s%s: refused in %llu ms, nothing left\n", size,
            sub ? " (state dir made by divvyd)" : "", (unsigned long long)res->ms);
    munmap(res, sizeof(*res));
}

static void test_fault_state_full_first_table(void **state)
{
    (void)state;
    full_fs("16k", false, "private.table");
}

static void test_fault_state_full_third_table(void **state)
{
    (void)state;
    full_fs("40k", false, "privileged.table");
}

static void test_fault_state_full_rules_file(void **state)
{
    (void)state;
    full_fs("52k", false, "rules.");
}

static void test_fault_state_full_made_dir(void **state)
{
    (void)state;
    full_fs("16k", true, "private.table");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fault_state_not_a_directory, harness_setup,
                                        state_teardown),
        cmocka_unit_test_setup_teardown(test_fault_state_unwritable_dir, harness_setup,
                                        state_teardown),
        cmocka_unit_test_setup_teardown(test_fault_state_unwritable_tables, harness_setup,
                                        state_teardown),
        cmocka_unit_test_setup_teardown(test_fault_state_full_first_table, harness_setup,
                                        state_teardown),
        cmocka_unit_test_setup_teardown(test_fault_state_full_third_table, harness_setup,
                                        state_teardown),
        cmocka_unit_test_setup_teardown(test_fault_state_full_rules_file, harness_setup,
                                        state_teardown),
        cmocka_unit_test_setup_teardown(test_fault_state_full_made_dir, harness_setup,
                                        state_teardown),
    };

    return cmocka_run_group_tests_name("fault_state", tests, NULL, NULL);
}
