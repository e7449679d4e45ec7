/* SPDX-License-Identifier: MIT */
/*
 * Integration: divvyd's lifecycle.  Reloads (SIGHUP and the RELOAD verb)
 * under load lose no request and no count; a rejected config keeps the old
 * rules and says file:line why; a reload that changes a limit keeps the
 * counts made so far; a restart with the same state dir keeps them too; and
 * SIGTERM/SIGINT answer what was received and exit 0.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* @other_limit varies between reloads; @extra adds a rule. */
static char *reload_ini(int keep_limit, int other_limit, bool extra)
{
    size_t size = 1024;
    char *t = harness_scratch(size);

    if (!t || snprintf(t, size,
                       "[path=/load actor=*]\n"
                       "creditLimit = 1000000000\n"
                       "resetSeconds = 3600\n"
                       "actorField = actor\n"
                       "\n"
                       "[path=/keep]\n"
                       "creditLimit = %d\n"
                       "resetSeconds = 3600\n"
                       "\n"
                       "[path=/other]\n"
                       "creditLimit = %d\n"
                       "resetSeconds = 60\n"
                       "\n"
                       "%s"
                       "[default]\n"
                       "creditLimit = 0\n"
                       "resetSeconds = 0\n",
                       keep_limit, other_limit,
                       extra ? "[path=/new]\ncreditLimit = 1\nresetSeconds = 1\n\n" : "")
                   >= (int)size)
        return NULL;
    return t;
}

static struct harness_daemon *start_reload(int keep_limit)
{
    struct harness_opts o = { .config_name = "reload.ini" };
    struct harness_daemon *d = NULL;
    char *text = reload_ini(keep_limit, 5, false);

    assert_non_null(text);
    o.config_text = text;
    CHECK(harness_start(&o, &d));
    return d;
}

static void write_config(struct harness_daemon *d, int keep_limit, int other_limit, bool extra)
{
    char *text = reload_ini(keep_limit, other_limit, extra);

    assert_non_null(text);
    CHECK(harness_write_config(d, text));
}

/* Polls STATS until @name reaches @want (deadline 10 s); returns the last value. */
static long long wait_stat(struct harness_conn *c, const char *name, long long want)
{
    uint64_t deadline = harness_now_ms() + 10000;
    long long v = -1;

    do {
        CHECK(harness_get_stat(c, name, &v));
        if (v >= want)
            break;
        harness_pause_ms(20);
    } while (harness_now_ms() < deadline);
    return v;
}

/* ---- reload under load ------------------------------------------------------- */

#define LOAD_THREADS 4
#define LOAD_BATCH   20

struct load_arg {
    struct harness_daemon *d;
    int id;
    volatile int *stop;
    long hits;
    int failures;
    char first_failure[200];
};

static void load_fail(struct load_arg *a, const char *fmt, const char *s)
{
    if (a->failures++ == 0)
        snprintf(a->first_failure, sizeof(a->first_failure), fmt, s);
}

/* Hammers its own actor in pipelined batches: every reply must be
 * "OK true <previous - 1> ...", whatever the reloads do. */
static void *load_thread(void *p)
{
    struct load_arg *a = p;
    struct harness_conn *c;
    char batch[LOAD_BATCH * 48], r[HARNESS_LINE];
    long long expect = 1000000000;
    size_t len = 0;

    if (harness_connect(a->d, a->id % 2 ? HARNESS_TCP : HARNESS_UNIX, &c) < 0) {
        load_fail(a, "%s", "connect failed");
        return NULL;
    }
    for (int i = 0; i < LOAD_BATCH; i++)
        len += (size_t)sprintf(batch + len, "HIT path=/load actor=load-%d\n", a->id);
    for (unsigned b = 1; !__atomic_load_n(a->stop, __ATOMIC_RELAXED) && a->failures == 0; b++) {
        /* Pacing: hard enough to overlap every reload, light enough to
         * leave the 2-core box room for the reloads themselves. */
        if (b % 5 == 0)
            harness_pause_ms(1);
        if (harness_send(c, batch, len) < 0) {
            load_fail(a, "%s", "send failed");
            break;
        }
        for (int i = 0; i < LOAD_BATCH; i++) {
            bool allowed;
            long long credit, secs;
            ssize_t n = harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS);

            if (n < 0) {
                load_fail(a, "recv: %s", strerror((int)-n));
                break;
            }
            expect--;
            if (harness_parse_ok(r, &allowed, &credit, &secs) < 0 || !allowed ||
                credit != expect || secs < 3500 || secs > 3600) {
                char msg[96];

                snprintf(msg, sizeof(msg), "%.60s (want credit %lld)", r, expect);
                load_fail(a, "reply %s", msg);
                break;
            }
            a->hits++;
        }
    }
    harness_close(c);
    return NULL;
}

static void test_reload_under_load(void **state)
{
    struct harness_daemon *d = start_reload(10);
    struct load_arg args[LOAD_THREADS];
    pthread_t th[LOAD_THREADS];
    volatile int stop = 0;
    struct harness_conn *admin;
    char r[HARNESS_LINE], buf[HARNESS_LINE * 2];
    int started = 0, sighups = 0, reloads = 0, fails = 0;
    long long v, ok0;
    long total = 0;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &admin));
    CHECK(harness_get_stat(admin, "reloads_ok", &ok0));
    for (int i = 0; i < LOAD_THREADS; i++) {
        args[i] = (struct load_arg){ .d = d, .id = i, .stop = &stop };
        if (pthread_create(&th[i], NULL, load_thread, &args[i]) != 0)
            break;
        started++;
    }
    harness_pause_ms(200);              /* pacing: let the load build up */
    for (int k = 0; k < 10 && started == LOAD_THREADS; k++) {
        write_config(d, 10, 5 + k, k % 3 == 1);
        if (k % 2 == 0) {
            if (harness_kill(d, SIGHUP) == 0)
                sighups++;
            /* Wait for this one to land before the file changes again. */
            if (wait_stat(admin, "reloads_ok", ok0 + sighups + reloads) < ok0 + sighups + reloads)
                fails++;
        } else {
            if (harness_cmd(admin, "RELOAD", r, sizeof(r)) >= 0 &&
                strncmp(r, "OK reloaded generation=", 23) == 0)
                reloads++;
            else
                fails++;
        }
        harness_pause_ms(100);          /* pacing: reloads spread over the load */
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < started; i++) {
        total += args[i].hits;
        if (args[i].failures)
            fprintf(stderr, "  load thread %d: %s\n", i, args[i].first_failure);
        fails += args[i].failures;
    }
    fprintf(stderr, "  %ld hits by %d clients across 5 SIGHUPs and 5 RELOADs\n", total, started);
    assert_int_equal(started, LOAD_THREADS);
    assert_int_equal(fails, 0);
    assert_int_equal(sighups, 5);
    assert_int_equal(reloads, 5);
    assert_true(total > 0);
    v = wait_stat(admin, "reloads_ok", ok0 + 10);
    assert_int_equal(v, ok0 + 10);
    CHECK(harness_get_stat(admin, "reloads_rejected", &v));
    assert_int_equal(v, 0);
    /* The last config (k = 9: other_limit 14, no extra rule) is in force. */
    assert_int_equal(harness_multi(admin, "RULES", buf, sizeof(buf)), 4);
    if (!strstr(buf, "credit_limit=14 "))
        fail_msg("last config not in force:\n%s", buf);
    /* No count was lost: each actor's counter is exactly its hits. */
    for (int i = 0; i < LOAD_THREADS; i++) {
        char req[64];

        snprintf(req, sizeof(req), "PEEK path=/load actor=load-%d", i);
        CHECK(harness_cmd(admin, req, r, sizeof(r)));
        {
            bool allowed;
            long long credit, secs;
            char id[64];

            CHECK(harness_parse_ok_rule(r, &allowed, &credit, &secs, id, sizeof(id)));
            assert_int_equal(credit, 1000000000 - args[i].hits);
        }
    }
    harness_close(admin);
}

/* ---- rejected reloads ------------------------------------------------------ */

static void test_reload_rejected_keeps_rules(void **state)
{
    /* Line 3 has a typo: an unknown setting is never ignored. */
    static const char typo[] =
        "[path=/keep]\n"
        "creditLimit = 99\n"
        "creditLimt = 5\n"
        "resetSeconds = 3600\n"
        "\n"
        "[default]\n"
        "creditLimit = 0\n"
        "resetSeconds = 0\n";
    static const char no_default[] =
        "[path=/keep]\n"
        "creditLimit = 99\n"
        "resetSeconds = 3600\n";
    struct harness_daemon *d = start_reload(10);
    struct harness_conn *c;
    char r[HARNESS_LINE], want[HARNESS_PATH + 64];
    long long rejected;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "HIT path=/keep", "OK true 9 3600");
    EXPECT_OK(c, "HIT path=/keep", true, 8, 3599, 3600);

    CHECK(harness_write_config(d, typo));
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    snprintf(want, sizeof(want), "ERR reload-failed \"%s:3: ", d->config);
    EXPECT_PREFIX(r, want);
    /* The old rules (limit 10, /other present) are still in force. */
    EXPECT_OK(c, "HIT path=/keep", true, 7, 3599, 3600);
    EXPECT_REPLY(c, "HIT path=/other", "OK true 4 60");
    CHECK(harness_get_stat(c, "reloads_rejected", &rejected));
    assert_int_equal(rejected, 1);

    /* The same through SIGHUP: logged, counted, old rules kept. */
    CHECK(harness_kill(d, SIGHUP));
    assert_int_equal(wait_stat(c, "reloads_rejected", 2), 2);
    {
        char where[HARNESS_PATH + 8];

        snprintf(where, sizeof(where), "%s:3:", d->config);
        assert_int_equal(harness_log_contains(d, where), 1);
    }
    EXPECT_OK(c, "HIT path=/keep", true, 6, 3599, 3600);

    CHECK(harness_write_config(d, no_default));
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    snprintf(want, sizeof(want), "ERR reload-failed \"%s:", d->config);
    EXPECT_PREFIX(r, want);
    EXPECT_OK(c, "HIT path=/keep", true, 5, 3599, 3600);

    /* An unreadable config. */
    CHECK(harness_write_config(d, "[path=/keep\ncreditLimit = \n"));
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR reload-failed \"");
    assert_int_equal(unlink(d->config), 0);
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR reload-failed \"");
    EXPECT_OK(c, "HIT path=/keep", true, 4, 3599, 3600);
    CHECK(harness_get_stat(c, "reloads_rejected", &rejected));
    assert_int_equal(rejected, 5);

    /* A good config is accepted again. */
    write_config(d, 10, 5, true);
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK reloaded generation=");
    if (!strstr(r, " rules=5"))
        fail_msg("RELOAD: \"%s\", want rules=5", r);
    EXPECT_REPLY(c, "HIT path=/new", "OK true 0 1");
    harness_close(c);
}

/* A reload that changes a limit keeps the counts; one that changes the match
 * set makes a new counter. */
static void test_reload_limit_change_keeps_counts(void **state)
{
    struct harness_daemon *d = start_reload(10);
    struct harness_conn *c;
    char r[HARNESS_LINE];

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "HIT path=/keep", "OK true 9 3600");
    EXPECT_OK(c, "HIT path=/keep", true, 8, 3599, 3600);
    EXPECT_OK(c, "HIT path=/keep", true, 7, 3599, 3600);
    EXPECT_REPLY(c, "HIT path=/load actor=a", "OK true 999999999 3600");

    write_config(d, 20, 5, false);
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK reloaded ");
    EXPECT_OK(c, "HIT path=/keep", true, 16, 3599, 3600);

    write_config(d, 5, 5, false);
    CHECK(harness_kill(d, SIGHUP));
    /* Wait until the smaller limit shows (the reload is asynchronous). */
    {
        uint64_t deadline = harness_now_ms() + 10000;
        long long credit = -1, secs;
        bool allowed;
        char id[64];

        while (harness_now_ms() < deadline) {
            CHECK(harness_cmd(c, "PEEK path=/keep", r, sizeof(r)));
            CHECK(harness_parse_ok_rule(r, &allowed, &credit, &secs, id, sizeof(id)));
            if (credit == 1)
                break;
            harness_pause_ms(20);
        }
        assert_int_equal(credit, 1);
    }
    EXPECT_OK(c, "HIT path=/keep", true, 0, 3599, 3600);
    EXPECT_OK(c, "HIT path=/keep", false, 0, 3599, 3600);

    /* Limit 0: always deny, the counter untouched ... */
    write_config(d, 0, 5, false);
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK reloaded ");
    EXPECT_REPLY(c, "HIT path=/keep", "OK false 0 0");
    /* ... and back: 5 used of 10. */
    write_config(d, 10, 5, false);
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK reloaded ");
    EXPECT_OK(c, "HIT path=/keep", true, 4, 3599, 3600);
    /* Other rules' counters were never disturbed. */
    EXPECT_OK(c, "HIT path=/load actor=a", true, 999999998, 3599, 3600);

    /* A different match set is a different rule: a fresh counter. */
    CHECK(harness_write_config(d, "[path=/keep v=*]\ncreditLimit = 10\nresetSeconds = 3600\n\n"
                                  "[default]\ncreditLimit = 0\nresetSeconds = 0\n"));
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK reloaded ");
    EXPECT_REPLY(c, "HIT path=/keep v=1", "OK true 9 3600");
    harness_close(c);
}

/* ---- restarts and signals ----------------------------------------------------- */

static void test_reload_restart_keeps_counts(void **state)
{
    struct harness_daemon *d = start_reload(10);
    struct harness_conn *c;
    int status;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "HIT path=/keep", "OK true 9 3600");
    EXPECT_OK(c, "HIT path=/keep", true, 8, 3599, 3600);
    EXPECT_OK(c, "HIT path=/keep", true, 7, 3599, 3600);
    EXPECT_OK_RULE(c, "TAKE 5 path=/load actor=r", true, 999999995, 3600, 3600,
                   NULL);
    harness_close(c);

    CHECK(harness_stop(d, &status));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("divvyd did not exit 0 on SIGTERM: status 0x%x", status);
    /* The socket file it created is gone; the state dir is not. */
    assert_int_equal(access(d->sock, F_OK), -1);
    assert_int_equal(access(d->state, F_OK), 0);

    CHECK(harness_restart(d));
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_OK(c, "HIT path=/keep", true, 6, 3590, 3600);
    EXPECT_OK(c, "HIT path=/load actor=r", true, 999999994, 3590, 3600);
    EXPECT_REPLY(c, "HIT path=/load actor=fresh", "OK true 999999999 3600");
    harness_close(c);

    /* And once more, by SIGINT this time. */
    CHECK(harness_kill(d, SIGINT));
    {
        uint64_t deadline = harness_now_ms() + HARNESS_STOP_MS;

        while (harness_alive(d) && harness_now_ms() < deadline)
            harness_pause_ms(10);
        assert_false(harness_alive(d));
        if (!WIFEXITED(d->status) || WEXITSTATUS(d->status) != 0)
            fail_msg("divvyd did not exit 0 on SIGINT: status 0x%x", d->status);
    }
    CHECK(harness_restart(d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/keep", true, 5, 3590, 3600);
    harness_close(c);
}

/* The generation the control page announces (docs/dev/shm.md) only grows, also
 * across restarts, though each divvyd starts with a new control page: a
 * fast-path client treats a smaller one as "no rules" (issue 11 item 4: it
 * used to start again from 1 and go backwards). */
static long long generation_of(struct harness_daemon *d)
{
    struct harness_conn *c;
    long long gen;

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_get_stat(c, "config_generation", &gen));
    harness_close(c);
    return gen;
}

static void test_reload_generation_grows_across_restarts(void **state)
{
    struct harness_daemon *d = start_reload(10);
    struct harness_conn *c;
    long long g[5];
    char r[HARNESS_LINE];
    int status;

    (void)state;
    g[0] = generation_of(d);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK reloaded ");
    harness_close(c);
    g[1] = generation_of(d);
    CHECK(harness_stop(d, &status));
    CHECK(harness_restart(d));
    g[2] = generation_of(d);
    d->expect_exit = true;
    CHECK(harness_kill(d, SIGKILL));
    {
        uint64_t deadline = harness_now_ms() + HARNESS_STOP_MS;

        while (harness_alive(d) && harness_now_ms() < deadline)
            harness_pause_ms(2);
        assert_false(harness_alive(d));
    }
    CHECK(harness_restart(d));
    g[3] = generation_of(d);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK reloaded ");
    harness_close(c);
    g[4] = generation_of(d);
    for (int i = 1; i < 5; i++)
        if (g[i] <= g[i - 1])
            fail_msg("generation %d is %lld after %lld: it must only grow", i, g[i], g[i - 1]);
}

/* SIGTERM in the middle of a pipeline: what was received is answered, in
 * order, then the connection closes and divvyd exits 0. */
static void test_reload_sigterm_answers_in_flight(void **state)
{
    struct harness_daemon *d = start_reload(10);
    struct harness_conn *c, *late;
    char *buf = harness_scratch(2000 * 40), r[HARNESS_LINE];
    size_t len = 0;
    int got = 0, status;
    long long expect = 1000000000;

    (void)state;
    assert_non_null(buf);
    for (int i = 0; i < 2000; i++)
        len += (size_t)sprintf(buf + len, "HIT path=/load actor=term\n");
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_send(c, buf, len));
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    got++;
    expect--;
    assert_string_equal(r, "OK true 999999999 3600");
    d->expect_exit = true;
    CHECK(harness_kill(d, SIGTERM));
    for (;;) {
        bool allowed;
        long long credit, secs;
        ssize_t n = harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS);

        if (n == -ENOTCONN || n == -ECONNRESET)
            break;
        if (n < 0)
            fail_msg("after %d replies: %s", got, strerror((int)-n));
        expect--;
        if (harness_parse_ok(r, &allowed, &credit, &secs) < 0 || !allowed || credit != expect)
            fail_msg("reply %d after SIGTERM: \"%s\" (want credit %lld)", got, r, expect);
        got++;
    }
    /* Wait for the exit (a second SIGTERM could cut the shutdown short). */
    {
        uint64_t deadline = harness_now_ms() + HARNESS_STOP_MS;

        while (harness_alive(d) && harness_now_ms() < deadline)
            harness_pause_ms(10);
    }
    CHECK(harness_stop(d, &status));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("divvyd did not exit 0 on SIGTERM: status 0x%x", status);
    fprintf(stderr, "  %d of 2000 pipelined requests answered around SIGTERM\n", got);
    /* Nobody is listening any more. */
    assert_true(harness_connect(d, HARNESS_UNIX, &late) < 0);
    harness_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reload_under_load, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_reload_rejected_keeps_rules, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_reload_limit_change_keeps_counts, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_reload_restart_keeps_counts, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_reload_generation_grows_across_restarts,
                                        harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_reload_sigterm_answers_in_flight, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("reload", tests, NULL, NULL);
}
