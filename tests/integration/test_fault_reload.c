/* SPDX-License-Identifier: MIT */
/*
 * Fault injection: 200 SIGHUP reloads under load (DESIGN section 2,
 * docs/daemon.md "Reload").  The config file is rewritten before each
 * SIGHUP, cycling through two valid configs (rule labels "alpha" and
 * "beta", with different limits) and an invalid one, while client processes
 * hammer the rule over both sockets (pipelined TAKEs, whose replies name
 * the deciding rule) and through libdivvy's fast path.  Zero requests fail;
 * every answer is exactly what alpha or beta gives at that point (the
 * label's limit minus the hits that label has answered); after every reload
 * the config just written (or, for the invalid one, the last valid one) is
 * in force; and the invalid config is rejected every time: counted in STATS
 * reloads_rejected and logged with its file and line.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "divvy.h"
#include "harness.h"

#define RELOADS      200
#define SOCK_PROCS   3
#define PROCS        (SOCK_PROCS + 1)   /* the last one uses libdivvy */
#define DEPTH        16
#define ALPHA_LIMIT  100000000000LL
#define BETA_LIMIT   200000000000LL

static char *valid_conf(bool beta)
{
    char *t = harness_scratch(1024);

    assert_non_null(t);
    snprintf(t, 1024,
             "rules = (\n"
             "    { match = { path = \"/r\"; }; label = \"%s\"; credit_limit = %lldL;\n"
             "      reset_seconds = 3600; actor = \"user\"; fast_path = true; },\n"
             "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
             ");\n",
             beta ? "beta" : "alpha", beta ? BETA_LIMIT : ALPHA_LIMIT);
    return t;
}

/* Line 3 has a typo: an unknown setting is never ignored. */
static const char invalid_conf[] =
    "rules = (\n"
    "    { match = { path = \"/r\"; }; label = \"gamma\"; credit_limit = 5;\n"
    "      reset_secs = 3600; actor = \"user\"; fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

struct reload_shared {
    volatile int stop;
    struct {
        long hits, alpha, beta, fast;
    } p[PROCS];
    long failures;
    char first_failure[256];
};

struct reload_arg {
    struct harness_daemon *d;
    struct reload_shared *sh;
    int id;
};

static void reload_fail(struct reload_shared *sh, const char *what, const char *detail)
{
    if (__atomic_fetch_add(&sh->failures, 1, __ATOMIC_RELAXED) == 0)
        snprintf(sh->first_failure, sizeof(sh->first_failure), "%s: %.200s", what, detail);
}

/* One answer: its label and credit must fit that label's own count. */
static bool account(struct reload_shared *sh, int id, const char *label, long long credit,
                    bool allowed)
{
    long *used;
    long long limit;

    if (strcmp(label, "alpha") == 0) {
        used = &sh->p[id].alpha;
        limit = ALPHA_LIMIT;
    } else if (strcmp(label, "beta") == 0) {
        used = &sh->p[id].beta;
        limit = BETA_LIMIT;
    } else {
        return false;
    }
    if (!allowed || credit != limit - (*used + 1))
        return false;
    (*used)++;
    sh->p[id].hits++;
    return true;
}

static int socket_proc(void *arg)
{
    struct reload_arg *a = arg;
    struct reload_shared *sh = a->sh;
    struct harness_conn *c;
    char batch[DEPTH * 48], line[HARNESS_LINE], label[64];
    size_t len = 0;

    if (harness_connect(a->d, a->id % 2 ? HARNESS_TCP : HARNESS_UNIX, &c) < 0) {
        reload_fail(sh, "connect", "failed");
        return 1;
    }
    for (int i = 0; i < DEPTH; i++)
        len += (size_t)sprintf(batch + len, "TAKE 1 path=/r user=s%d\n", a->id);
    for (unsigned b = 1; !sh->stop; b++) {
        /* Pacing: load on every reload, CPU left on the 2-core box for them. */
        if (b % 4 == 0)
            harness_pause_ms(1);
        if (harness_send(c, batch, len) < 0) {
            reload_fail(sh, "send", "failed");
            return 2;
        }
        for (int i = 0; i < DEPTH; i++) {
            bool allowed;
            long long credit, secs;
            ssize_t n = harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS);

            if (n < 0) {
                reload_fail(sh, "recv", strerror((int)-n));
                return 3;
            }
            if (harness_parse_ok_rule(line, &allowed, &credit, &secs, label, sizeof(label)) < 0 ||
                !account(sh, a->id, label, credit, allowed)) {
                reload_fail(sh, "socket answer", line);
                return 4;
            }
        }
    }
    harness_close(c);
    return 0;
}

static int fast_proc(void *arg)
{
    struct reload_arg *a = arg;
    struct reload_shared *sh = a->sh;
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/r" }, { "user", "fast" } };
    struct divvy *h = NULL;

    if (divvy_open(NULL, DIVVY_AUTO, &h) < 0) {
        reload_fail(sh, "divvy_open", "failed");
        return 1;
    }
    for (unsigned i = 1; !sh->stop; i++) {
        if (i % 2048 == 0)
            harness_pause_ms(1);        /* pacing, as above */
        if (divvy_hit(h, kv, 2, &res) < 0) {
            reload_fail(sh, "libdivvy", divvy_errmsg(h));
            return 2;
        }
        sh->p[a->id].fast += res.fast_path;
        if (!account(sh, a->id, res.rule, (long long)res.credit, res.allowed)) {
            char msg[128];

            snprintf(msg, sizeof(msg), "allowed %d credit %llu rule %s", res.allowed,
                     (unsigned long long)res.credit, res.rule);
            reload_fail(sh, "fast answer", msg);
            return 3;
        }
    }
    divvy_close(h);
    return 0;
}

static int count_in_log(struct harness_daemon *d, const char *needle)
{
    size_t cap = 1 << 20;
    char *buf = harness_scratch(cap);
    int fd = open(d->log, O_RDONLY | O_CLOEXEC), n = 0;
    ssize_t len;

    assert_non_null(buf);
    assert_true(fd >= 0);
    len = read(fd, buf, cap - 1);
    close(fd);
    assert_true(len >= 0);
    for (char *p = strstr(buf, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void expect_counts(struct harness_conn *admin, struct reload_shared *sh,
                          const char *label)
{
    bool beta = strcmp(label, "beta") == 0;

    for (int i = 0; i < PROCS; i++) {
        char req[64];

        if (i < SOCK_PROCS)
            snprintf(req, sizeof(req), "PEEK path=/r user=s%d", i);
        else
            snprintf(req, sizeof(req), "PEEK path=/r user=fast");
        EXPECT_OK_RULE(admin, req, true,
                       beta ? BETA_LIMIT - sh->p[i].beta : ALPHA_LIMIT - sh->p[i].alpha, 3500,
                       3600, label);
    }
}

static void test_fault_reload_200_sighups(void **state)
{
    struct harness_opts o = { .config_name = "reload.conf", .config_text = valid_conf(false),
                              .workers = 2 };
    struct harness_daemon *d = NULL;
    struct reload_shared *sh;
    struct reload_arg args[PROCS];
    struct harness_conn *admin;
    char addr[HARNESS_PATH + 8], r[HARNESS_LINE], label[64], where[HARNESS_PATH + 8];
    pid_t pids[PROCS];
    long long ok0, rej0, ok = 0, rej = 0;
    int n_valid = 0, n_invalid = 0, status;
    const char *in_force = "alpha";
    uint64_t t0, slowest = 0;

    (void)state;
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    CHECK(harness_start(&o, &d));
    snprintf(addr, sizeof(addr), "unix:%s", d->sock);
    assert_int_equal(setenv("DIVVY_ADDRESS", addr, 1), 0);
    unsetenv("DIVVY_PATH");
    CHECK(harness_connect(d, HARNESS_UNIX, &admin));
    CHECK(harness_get_stat(admin, "reloads_ok", &ok0));
    CHECK(harness_get_stat(admin, "reloads_rejected", &rej0));
    for (int i = 0; i < PROCS; i++) {
        args[i] = (struct reload_arg){ .d = d, .sh = sh, .id = i };
        CHECK(harness_spawn(i < SOCK_PROCS ? socket_proc : fast_proc, &args[i], &pids[i]));
    }
    /* Every client is under way before the first reload. */
    {
        uint64_t deadline = harness_now_ms() + 10000;

        for (int i = 0; i < PROCS; i++)
            while (sh->p[i].hits < 50 && !sh->failures && harness_now_ms() < deadline)
                harness_pause_ms(1);
    }

    t0 = harness_now_ms();
    for (int i = 0; i < RELOADS && !sh->failures; i++) {
        int kind = i % 3;       /* beta, invalid, alpha, beta, invalid, ... */
        uint64_t start = harness_now_ms(), deadline = start + 30000;

        CHECK(harness_write_config(d, kind == 0 ? valid_conf(true)
                                      : kind == 1 ? invalid_conf
                                                  : valid_conf(false)));
        CHECK(harness_kill(d, SIGHUP));
        if (kind == 1)
            n_invalid++;
        else
            n_valid++;
        /* This reload has landed (accepted or rejected) before the next write. */
        do {
            CHECK(harness_get_stat(admin, "reloads_ok", &ok));
            CHECK(harness_get_stat(admin, "reloads_rejected", &rej));
            if (ok - ok0 + rej - rej0 >= i + 1)
                break;
            harness_pause_ms(1);
        } while (harness_now_ms() < deadline);
        if (ok - ok0 != n_valid || rej - rej0 != n_invalid)
            fail_msg("after reload %d: reloads_ok +%lld, reloads_rejected +%lld (want +%d, +%d)",
                     i + 1, ok - ok0, rej - rej0, n_valid, n_invalid);
        if (harness_now_ms() - start > slowest)
            slowest = harness_now_ms() - start;
        /* The config just written is in force, or the last valid one. */
        if (kind != 1)
            in_force = kind == 0 ? "beta" : "alpha";
        CHECK(harness_cmd(admin, "PEEK path=/r user=probe", r, sizeof(r)));
        {
            bool allowed;
            long long credit, secs;

            CHECK(harness_parse_ok_rule(r, &allowed, &credit, &secs, label, sizeof(label)));
            if (strcmp(label, in_force) != 0)
                fail_msg("after reload %d: PEEK says \"%s\", want rule %s", i + 1, r, in_force);
        }
    }
    sh->stop = 1;
    for (int i = 0; i < PROCS; i++) {
        CHECK(harness_reap(pids[i], 20000, &status));
        if (status != 0)
            fail_msg("client %d exited %d: %s", i, status, sh->first_failure);
    }
    if (sh->failures)
        fail_msg("%ld failed requests, first: %s", sh->failures, sh->first_failure);
    fprintf(stderr, "  %d SIGHUPs (%d valid, %d invalid) in %llu ms, slowest %llu ms\n",
            RELOADS, n_valid, n_invalid, (unsigned long long)(harness_now_ms() - t0),
            (unsigned long long)slowest);
    for (int i = 0; i < PROCS; i++) {
        fprintf(stderr, "  client %d: %ld answers: %ld by alpha, %ld by beta%s\n", i,
                sh->p[i].hits, sh->p[i].alpha, sh->p[i].beta,
                i == SOCK_PROCS ? " (libdivvy)" : "");
        /* Both configs answered every client. */
        assert_true(sh->p[i].alpha > 0);
        assert_true(sh->p[i].beta > 0);
    }
    assert_true(sh->p[SOCK_PROCS].fast > 0);
    assert_int_equal(n_valid + n_invalid, RELOADS);
    assert_int_equal(ok - ok0, n_valid);
    assert_int_equal(rej - rej0, n_invalid);
    /* Each rejection was logged with the file and the line of the typo. */
    snprintf(where, sizeof(where), "%s:3:", d->config);
    assert_int_equal(count_in_log(d, where), n_invalid);

    /* The counts of both labels are exactly what was answered: the one in
     * force now, then the other after one more reload. */
    expect_counts(admin, sh, in_force);
    in_force = strcmp(in_force, "alpha") == 0 ? "beta" : "alpha";
    CHECK(harness_write_config(d, valid_conf(strcmp(in_force, "beta") == 0)));
    CHECK(harness_kill(d, SIGHUP));
    {
        uint64_t deadline = harness_now_ms() + 10000;

        do {
            CHECK(harness_get_stat(admin, "reloads_ok", &ok));
            harness_pause_ms(2);
        } while (ok - ok0 < n_valid + 1 && harness_now_ms() < deadline);
        assert_int_equal(ok - ok0, n_valid + 1);
    }
    expect_counts(admin, sh, in_force);
    harness_close(admin);
    munmap(sh, sizeof(*sh));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fault_reload_200_sighups, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("fault_reload", tests, NULL, NULL);
}
