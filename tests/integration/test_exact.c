/* SPDX-License-Identifier: MIT */
/*
 * Integration: exactness over the socket (DESIGN section 4).  Several client
 * processes with several threads each hammer divvyd with pipelined HITs;
 * exactly credit_limit of them may be allowed per window, and every allowed
 * reply reports a distinct remaining credit (credit_limit - 1 down to 0),
 * which a lost or doubled update would break.  The same across many actors,
 * and for a fast_path rule (whose counters live in the other table).
 */
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <sys/mman.h>

#include "harness.h"

#define EX_PROCS     4
#define EX_THREADS   2
#define EX_BATCH     250
#define EX_ACTORS    50
#define EX_MAX_LIMIT 5000

/* Lives in a MAP_SHARED mapping so the client processes can report. */
struct ex_shared {
    long allowed, denied, errors;
    int seen[EX_ACTORS][EX_MAX_LIMIT];     /* allowed replies per (actor, credit) */
    char first_error[256];
};

struct ex_plan {
    struct harness_daemon *d;
    struct ex_shared *sh;
    const char *path;
    int actors;                 /* 0: one counter, no actor key */
    int limit;
    int hits_per_thread;
};

struct ex_thread {
    struct ex_plan *plan;
    int id;                     /* process * EX_THREADS + thread */
};

static void ex_error(struct ex_shared *sh, const char *what, const char *detail)
{
    if (__atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED) == 0)
        snprintf(sh->first_error, sizeof(sh->first_error), "%s: %.200s", what, detail);
}

static void *ex_thread_main(void *p)
{
    struct ex_thread *t = p;
    struct ex_plan *pl = t->plan;
    struct ex_shared *sh = pl->sh;
    struct harness_conn *c;
    char *batch = malloc(EX_BATCH * 64);
    int actor_of[EX_BATCH];
    char r[HARNESS_LINE];
    int done = 0, next_actor = t->id * 7;

    if (!batch || harness_connect(pl->d, t->id % 2 ? HARNESS_TCP : HARNESS_UNIX, &c) < 0) {
        ex_error(sh, "thread", "no connection");
        free(batch);
        return NULL;
    }
    while (done < pl->hits_per_thread) {
        int n = pl->hits_per_thread - done < EX_BATCH ? pl->hits_per_thread - done : EX_BATCH;
        size_t len = 0;

        for (int i = 0; i < n; i++) {
            if (pl->actors) {
                actor_of[i] = next_actor++ % pl->actors;
                len += (size_t)sprintf(batch + len, "HIT path=%s actor=a%d\n", pl->path,
                                       actor_of[i]);
            } else {
                actor_of[i] = 0;
                len += (size_t)sprintf(batch + len, "HIT path=%s\n", pl->path);
            }
        }
        if (harness_send(c, batch, len) < 0) {
            ex_error(sh, "send", "failed");
            break;
        }
        for (int i = 0; i < n; i++) {
            bool allowed;
            long long credit, secs;

            if (harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS) < 0) {
                ex_error(sh, "recv", "failed");
                goto out;
            }
            if (harness_parse_ok(r, &allowed, &credit, &secs) < 0 || credit < 0 ||
                credit >= pl->limit || (!allowed && credit != 0)) {
                ex_error(sh, "bad reply", r);
                continue;
            }
            if (allowed) {
                __atomic_fetch_add(&sh->allowed, 1, __ATOMIC_RELAXED);
                __atomic_fetch_add(&sh->seen[actor_of[i]][credit], 1, __ATOMIC_RELAXED);
            } else {
                __atomic_fetch_add(&sh->denied, 1, __ATOMIC_RELAXED);
            }
        }
        done += n;
    }
out:
    harness_close(c);
    free(batch);
    return NULL;
}

/* One client process: EX_THREADS threads, each its own connection. */
static int ex_process(void *arg)
{
    struct ex_thread *t = arg;
    struct ex_thread th_arg[EX_THREADS];
    pthread_t th[EX_THREADS];
    int started = 0;

    for (int i = 0; i < EX_THREADS; i++) {
        th_arg[i] = (struct ex_thread){ .plan = t->plan, .id = t->id * EX_THREADS + i };
        if (pthread_create(&th[i], NULL, ex_thread_main, &th_arg[i]) != 0) {
            ex_error(t->plan->sh, "process", "pthread_create failed");
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    return 0;
}

static void ex_run(struct ex_plan *pl)
{
    struct ex_thread procs[EX_PROCS];
    pid_t pids[EX_PROCS];
    long total = (long)EX_PROCS * EX_THREADS * pl->hits_per_thread;
    int actors = pl->actors ? pl->actors : 1;
    uint64_t t0 = harness_now_ms();
    int status;

    memset(pl->sh, 0, sizeof(*pl->sh));
    for (int p = 0; p < EX_PROCS; p++) {
        procs[p] = (struct ex_thread){ .plan = pl, .id = p };
        CHECK(harness_spawn(ex_process, &procs[p], &pids[p]));
    }
    for (int p = 0; p < EX_PROCS; p++) {
        CHECK(harness_reap(pids[p], 100000, &status));
        assert_int_equal(status, 0);
    }
    fprintf(stderr, "  %ld hits on %s in %llu ms\n", total, pl->path,
            (unsigned long long)(harness_now_ms() - t0));
    if (pl->sh->errors)
        fail_msg("%ld client errors, first: %s", pl->sh->errors, pl->sh->first_error);
    assert_int_equal(pl->sh->allowed + pl->sh->denied, total);
    assert_int_equal(pl->sh->allowed, (long)actors * pl->limit);
    for (int a = 0; a < actors; a++)
        for (int cr = 0; cr < pl->limit; cr++)
            if (pl->sh->seen[a][cr] != 1)
                fail_msg("actor %d: credit %d reported by %d allowed hits (want 1)", a, cr,
                         pl->sh->seen[a][cr]);
}

static struct ex_shared *ex_shared_new(void)
{
    void *m = mmap(NULL, sizeof(struct ex_shared), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    assert_true(m != MAP_FAILED);
    return m;
}

static const char exact_conf[] =
    "rules = (\n"
    "    { match = { path = \"/exact\"; }; credit_limit = 5000; reset_seconds = 86400; },\n"
    "    { match = { path = \"/many\"; }; credit_limit = 100; reset_seconds = 86400;\n"
    "      actor = \"actor\"; },\n"
    "    { match = { path = \"/fast\"; }; credit_limit = 3000; reset_seconds = 86400;\n"
    "      fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static struct harness_daemon *start_exact(void)
{
    struct harness_opts o = { .config_name = "exact.conf", .config_text = exact_conf,
                              .workers = 4 };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    return d;
}

/* 4 processes x 2 threads, 100,000 HITs on one key, limit 5,000. */
static void test_exact_one_key(void **state)
{
    struct ex_shared *sh = ex_shared_new();
    struct ex_plan pl = { .d = start_exact(), .sh = sh, .path = "/exact", .limit = 5000,
                          .hits_per_thread = 100000 / (EX_PROCS * EX_THREADS) };
    struct harness_conn *c;

    (void)state;
    ex_run(&pl);
    CHECK(harness_connect(pl.d, HARNESS_UNIX, &c));
    EXPECT_OK_RULE(c, "PEEK path=/exact", false, 0, 86390, 86400, NULL);
    harness_close(c);
    munmap(sh, sizeof(*sh));
}

/* The same across 50 actors with limit 100 each (20,000 HITs). */
static void test_exact_many_keys(void **state)
{
    struct ex_shared *sh = ex_shared_new();
    struct ex_plan pl = { .d = start_exact(), .sh = sh, .path = "/many", .actors = EX_ACTORS,
                          .limit = 100, .hits_per_thread = 2500 };

    (void)state;
    ex_run(&pl);
    munmap(sh, sizeof(*sh));
}

/* A fast_path rule's counter, decided by the daemon over the socket. */
static void test_exact_fast_path_rule(void **state)
{
    struct ex_shared *sh = ex_shared_new();
    struct ex_plan pl = { .d = start_exact(), .sh = sh, .path = "/fast", .limit = 3000,
                          .hits_per_thread = 5000 };

    (void)state;
    ex_run(&pl);
    munmap(sh, sizeof(*sh));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_exact_one_key, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_exact_many_keys, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_exact_fast_path_rule, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("exact", tests, NULL, NULL);
}
