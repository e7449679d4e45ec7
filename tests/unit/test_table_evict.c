/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the counter table's eviction (common/table.c, docs/dev/shm.md
 * "Eviction", docs/rules.md "Full"): a rule with when_full = "evict" that
 * finds no room for a new actor forgets the counter of one of its actors
 * that has refused nobody, the one back at a full quota soonest, and never
 * a counter that refused a request (until its quota is full again), one in
 * debt, or one of another rule, and reaches a rule's sparse counters; with
 * nothing to evict the answer is -EDQUOT/-ENOSPC as before.  Then hammers:
 * threads (and processes) take a hot key of one rule and a refused key of
 * the flooded rule while others flood the rule with new actors, and the
 * counts stay exact; racing hits on one new key never evict each other.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "table.h"

#define NOW         1000000u            /* an arbitrary "current" time */
#define HOUR        3600000u
#define RULE        42u                 /* the flooded rule */
#define OTHER       43u                 /* another rule in the same table */

static struct table *new_table(uint32_t n_slots)
{
    struct table *t = NULL;

    assert_int_equal(table_create_memfd(n_slots, &t), 0);
    return t;
}

static struct table_limits window(uint64_t limit, uint64_t max_actors, bool evict)
{
    struct table_limits lim;

    memset(&lim, 0, sizeof(lim));
    lim.algo = RULES_ALGO_WINDOW;
    lim.credit_limit = limit;
    lim.reset_ms = HOUR;
    lim.max_actors = max_actors;
    lim.evict = evict;
    return lim;
}

static int op(struct table *t, uint64_t rule, const char *actor, const struct table_limits *lim,
              enum table_op o, uint64_t n, uint64_t now, struct table_result *res)
{
    struct table_key key = { rule, actor, strlen(actor) };

    memset(res, 0, sizeof(*res));
    return table_hit(t, &key, lim, o, n, now, res);
}

/* TAKE 1: 1 allowed, 0 denied, or the error. */
static int take1(struct table *t, uint64_t rule, const char *actor,
                 const struct table_limits *lim, uint64_t now)
{
    struct table_result res;
    int r = op(t, rule, actor, lim, TABLE_TAKE, 1, now, &res);

    return r < 0 ? r : res.allowed;
}

/* Credit a PEEK of 0 reports (the limit for an actor without a counter);
 * unlike a PEEK of 1 that finds none, it refuses nothing (no REFUSED mark). */
static uint64_t credit(struct table *t, uint64_t rule, const char *actor,
                       const struct table_limits *lim, uint64_t now)
{
    struct table_result res;

    assert_int_equal(op(t, rule, actor, lim, TABLE_PEEK, 0, now, &res), 0);
    return res.credit;
}

static const char *name(char *buf, size_t size, const char *prefix, int i)
{
    snprintf(buf, size, "%s%d", prefix, i);
    return buf;
}

static struct table_stats stats(struct table *t, uint64_t now)
{
    struct table_stats st;

    table_stats(t, now, &st);
    return st;
}

/* Counters of @rule still in the table (table_foreach()). */
struct count_arg {
    uint64_t rule;
    uint64_t n;
};

static int count_fn(const struct table_entry *e, void *arg)
{
    struct count_arg *c = arg;

    c->n += e->rule_id == c->rule;
    return 0;
}

static uint64_t counters_of(struct table *t, uint64_t rule, uint64_t now)
{
    struct count_arg c = { rule, 0 };

    assert_int_equal(table_foreach(t, now, count_fn, &c), 0);
    return c.n;
}

/* ---- which counter goes ------------------------------------------------- */

/* 64 slots: one probe window, and the sample is the whole table. */
static void test_table_evict_at_max_actors(void **state)
{
    struct table_limits deny = window(1, 8, false), evict = window(1, 8, true);
    struct table *t = new_table(64);
    char a[32];

    (void)state;
    for (int i = 0; i < 8; i++)
        assert_int_equal(take1(t, RULE, name(a, sizeof(a), "ip", i), &evict, NOW + i), 1);
    /* deny: the rule is full, the ninth actor gets no counter. */
    assert_int_equal(take1(t, RULE, "new", &deny, NOW + 10), -EDQUOT);
    assert_int_equal(stats(t, NOW).quota_events, 1);
    /* evict: the counter back at a full quota soonest (ip0's) makes room. */
    assert_int_equal(take1(t, RULE, "new", &evict, NOW + 10), 1);
    assert_int_equal(stats(t, NOW).evictions, 1);
    assert_int_equal(stats(t, NOW).quota_events, 1);
    assert_int_equal(credit(t, RULE, "ip0", &evict, NOW + 11), 1);
    for (int i = 1; i < 8; i++)
        assert_int_equal(credit(t, RULE, name(a, sizeof(a), "ip", i), &evict, NOW + 11), 0);
    assert_int_equal(credit(t, RULE, "new", &evict, NOW + 11), 0);
    assert_int_equal(counters_of(t, RULE, NOW + 11), 8);
    table_close(t);
}

/* A counter that refused a request stays while its quota is not full. */
static void test_table_evict_spares_refused(void **state)
{
    struct table_limits lim = window(1, 8, true);
    struct table_result res;
    struct table *t = new_table(64);
    char a[32];

    (void)state;
    assert_int_equal(take1(t, RULE, "abuser", &lim, NOW), 1);
    assert_int_equal(take1(t, RULE, "abuser", &lim, NOW + 1), 0);      /* refused */
    for (int i = 1; i < 8; i++)
        assert_int_equal(take1(t, RULE, name(a, sizeof(a), "ip", i), &lim, NOW + 10 + i), 1);
    /* The abuser's counter is the oldest, but it refused: ip1 goes. */
    assert_int_equal(take1(t, RULE, "new1", &lim, NOW + 20), 1);
    assert_int_equal(credit(t, RULE, "ip1", &lim, NOW + 21), 1);
    assert_int_equal(take1(t, RULE, "abuser", &lim, NOW + 22), 0);
    /* A refused PEEK pins a counter too. */
    for (int i = 2; i < 8; i++) {
        assert_int_equal(op(t, RULE, name(a, sizeof(a), "ip", i), &lim, TABLE_PEEK, 1,
                            NOW + 30, &res), 0);
        assert_false(res.allowed);
    }
    /* Only new1 has refused nobody: it goes, then nothing can. */
    assert_int_equal(take1(t, RULE, "new2", &lim, NOW + 40), 1);
    assert_int_equal(credit(t, RULE, "new1", &lim, NOW + 41), 1);
    assert_int_equal(take1(t, RULE, "new2", &lim, NOW + 42), 0);
    assert_int_equal(take1(t, RULE, "new3", &lim, NOW + 43), -EDQUOT);
    assert_int_equal(stats(t, NOW).evictions, 2);
    assert_int_equal(stats(t, NOW).quota_events, 1);
    assert_int_equal(take1(t, RULE, "abuser", &lim, NOW + 44), 0);
    for (int i = 2; i < 8; i++)
        assert_int_equal(credit(t, RULE, name(a, sizeof(a), "ip", i), &lim, NOW + 44), 0);
    table_close(t);
}

/* A counter in debt stays; an expired one goes first, refused or not; a
 * refused counter whose quota was full again is evictable again. */
static void test_table_evict_debt_expired_and_refill(void **state)
{
    struct table_limits lim = window(1, 4, true);
    struct table_result res;
    struct table *t = new_table(64);
    char a[32];

    (void)state;
    /* old: refused at NOW + 1, expires at NOW + HOUR. */
    assert_int_equal(take1(t, RULE, "old", &lim, NOW), 1);
    assert_int_equal(take1(t, RULE, "old", &lim, NOW + 1), 0);
    /* debtor: in debt for three windows. */
    assert_int_equal(op(t, RULE, "debtor", &lim, TABLE_DEBIT, 3, NOW + 2, &res), 0);
    assert_false(res.allowed);
    /* Two more, refused, half an hour later. */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(take1(t, RULE, name(a, sizeof(a), "ip", i), &lim, NOW + HOUR / 2), 1);
        assert_int_equal(take1(t, RULE, name(a, sizeof(a), "ip", i), &lim, NOW + HOUR / 2), 0);
    }
    assert_int_equal(take1(t, RULE, "new", &lim, NOW + HOUR / 2 + 1), -EDQUOT);
    /* old expired (a full quota): it goes, whatever it refused before. */
    assert_int_equal(take1(t, RULE, "new", &lim, NOW + HOUR + 5), 1);
    assert_int_equal(stats(t, NOW).evictions, 1);
    assert_int_equal(op(t, RULE, "debtor", &lim, TABLE_PEEK, 1, NOW + HOUR + 6, &res), 0);
    assert_false(res.allowed);
    /* new refuses once; at its next window an allowed TAKE clears that. */
    assert_int_equal(take1(t, RULE, "new", &lim, NOW + HOUR + 6), 0);
    assert_int_equal(take1(t, RULE, "late", &lim, NOW + HOUR + 7), -EDQUOT);
    assert_int_equal(take1(t, RULE, "new", &lim, NOW + 2 * HOUR + 6), 1);
    /* ip0/ip1 are expired by now too: they go before new. */
    assert_int_equal(take1(t, RULE, "late", &lim, NOW + 2 * HOUR + 7), 1);
    assert_int_equal(take1(t, RULE, "late2", &lim, NOW + 2 * HOUR + 8), 1);
    assert_int_equal(credit(t, RULE, "new", &lim, NOW + 2 * HOUR + 9), 0);
    /* Now new, which refused nobody this window, is the only candidate. */
    assert_int_equal(take1(t, RULE, "late3", &lim, NOW + 2 * HOUR + 10), 1);
    assert_int_equal(credit(t, RULE, "new", &lim, NOW + 2 * HOUR + 11), 1);
    assert_int_equal(op(t, RULE, "debtor", &lim, TABLE_PEEK, 1, NOW + 2 * HOUR + 11, &res), 0);
    assert_false(res.allowed);
    assert_int_equal(stats(t, NOW).evictions, 4);
    table_close(t);
}

/* A full probe window: a rule evicts only its own counters. */
static void test_table_evict_full_window_own_rule_only(void **state)
{
    struct table_limits other = window(1, 0, false), evict = window(1, 0, true);
    struct table_kw kw;
    struct table_key key = { RULE, "room", 4 };
    struct table *t = new_table(64);
    uint64_t gone = 0;
    char a[32];

    (void)state;
    for (int i = 0; i < 64; i++)
        assert_int_equal(take1(t, OTHER, name(a, sizeof(a), "o", i), &other, NOW), 1);
    assert_int_equal(take1(t, RULE, "x", &evict, NOW), -ENOSPC);
    assert_int_equal(stats(t, NOW).full_events, 1);
    assert_int_equal(counters_of(t, OTHER, NOW), 64);
    table_close(t);

    t = new_table(64);
    for (int i = 0; i < 64; i++)
        assert_int_equal(take1(t, RULE, name(a, sizeof(a), "r", i), &evict, NOW + i), 1);
    table_key_prepare(t, &key, &evict, &kw);
    assert_int_equal(table_room_prepared(t, &kw, &evict, NOW + 70), 0);
    assert_int_equal(table_room_prepared(t, &kw, &other, NOW + 70), -ENOSPC);
    assert_int_equal(take1(t, OTHER, "o", &other, NOW + 70), -ENOSPC);
    assert_int_equal(take1(t, RULE, "room", &evict, NOW + 70), 1);
    /* One of them went (the oldest of the first 8 found from room's slot). */
    for (int i = 0; i < 64; i++)
        gone += credit(t, RULE, name(a, sizeof(a), "r", i), &evict, NOW + 71);
    assert_int_equal(gone, 1);
    assert_int_equal(stats(t, NOW).evictions, 1);
    assert_int_equal(stats(t, NOW).full_events, 1);
    assert_int_equal(counters_of(t, RULE, NOW + 71), 64);
    table_close(t);
}

/* A rule with few counters in a large table: the sample goes on past its
 * first 256 slots until it finds one (up to 4096). */
static void test_table_evict_sparse_rule(void **state)
{
    struct table_limits lim = window(1, 4, true);
    struct table *t = new_table(4096);
    char a[32];

    (void)state;
    for (int i = 0; i < 40; i++)
        assert_int_equal(take1(t, RULE, name(a, sizeof(a), "ip", i), &lim, NOW + i), 1);
    assert_int_equal(stats(t, NOW).evictions, 36);
    assert_int_equal(stats(t, NOW).quota_events, 0);
    assert_int_equal(counters_of(t, RULE, NOW + 40), 4);
    table_close(t);
}

/* table_room_prepared() says what a TAKE would find, eviction included. */
static void test_table_evict_room(void **state)
{
    struct table_limits lim = window(1, 2, true);
    struct table_key key = { RULE, "third", 5 };
    struct table_kw kw;
    struct table *t = new_table(64);

    (void)state;
    table_key_prepare(t, &key, &lim, &kw);
    assert_int_equal(take1(t, RULE, "a", &lim, NOW), 1);
    assert_int_equal(take1(t, RULE, "b", &lim, NOW), 1);
    assert_int_equal(table_room_prepared(t, &kw, &lim, NOW), 0);
    assert_int_equal(take1(t, RULE, "a", &lim, NOW), 0);
    assert_int_equal(take1(t, RULE, "b", &lim, NOW), 0);
    assert_int_equal(table_room_prepared(t, &kw, &lim, NOW), -EDQUOT);
    assert_int_equal(stats(t, NOW).evictions, 0);
    table_close(t);
}

/* ---- hammers -------------------------------------------------------------- */

#define FLOODS      6000        /* new actors per flooding thread */
#define HOT_LIMIT   5000        /* the hot key's credit */
#define HOT_TAKES   4000        /* TAKEs per hammering thread, on each key */
#define SLOTS       256         /* the eviction sample is the whole table */
#define MAX_ACTORS  32

struct shared {
    uint32_t ready, go;
    uint64_t hot_allowed, pinned_allowed, flood_allowed, flood_full, errors;
};

struct worker {
    struct table *t;
    struct shared *sh;
    int id;
    bool flood;
};

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    struct table_limits hot = window(HOT_LIMIT, 0, false);
    struct table_limits rule = window(1, MAX_ACTORS, true);
    char a[32];

    __atomic_fetch_add(&w->sh->ready, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&w->sh->go, __ATOMIC_ACQUIRE))
        sched_yield();
    for (int i = 0; i < (w->flood ? FLOODS : HOT_TAKES); i++) {
        int r;

        if (w->flood) {
            snprintf(a, sizeof(a), "f%d-%d", w->id, i);
            r = take1(w->t, RULE, a, &rule, NOW);
            if (r == 1)
                __atomic_fetch_add(&w->sh->flood_allowed, 1, __ATOMIC_RELAXED);
            else if (r == -EDQUOT || r == -ENOSPC)
                __atomic_fetch_add(&w->sh->flood_full, 1, __ATOMIC_RELAXED);
            else
                __atomic_fetch_add(&w->sh->errors, 1, __ATOMIC_RELAXED);
            continue;
        }
        /* The hot key of another rule, never evicted: exact. */
        r = take1(w->t, OTHER, "hot", &hot, NOW);
        if (r < 0)
            __atomic_fetch_add(&w->sh->errors, 1, __ATOMIC_RELAXED);
        else
            __atomic_fetch_add(&w->sh->hot_allowed, (uint64_t)r, __ATOMIC_RELAXED);
        /* The flooded rule's refused actor: stays refused. */
        r = take1(w->t, RULE, "pinned", &rule, NOW);
        if (r < 0)
            __atomic_fetch_add(&w->sh->errors, 1, __ATOMIC_RELAXED);
        else
            __atomic_fetch_add(&w->sh->pinned_allowed, (uint64_t)r, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* Runs @threads workers (the first @floods of them flooding) in this process. */
static int run_threads(struct table *t, struct shared *sh, int base, int threads, int floods)
{
    struct worker w[8];
    pthread_t th[8];
    int rc = 0;

    for (int i = 0; i < threads; i++) {
        w[i] = (struct worker){ t, sh, base + i, i < floods };
        if (pthread_create(&th[i], NULL, worker_run, &w[i]))
            rc = 3;
    }
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    return rc;
}

/* @procs processes (1: this one) of @threads threads, @floods flooding in each. */
static void hammer(int procs, int threads, int floods)
{
    struct table_limits hot = window(HOT_LIMIT, 0, false);
    struct table_limits rule = window(1, MAX_ACTORS, true);
    struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct table *t = new_table(SLOTS);
    uint64_t n_floods = (uint64_t)procs * (uint64_t)floods * FLOODS;
    pid_t pid[4];
    int status;

    assert_true(sh != MAP_FAILED);
    assert_true(procs <= 4 && threads <= 8);
    /* pinned: its one credit spent, then refused. */
    assert_int_equal(take1(t, RULE, "pinned", &rule, NOW), 1);
    assert_int_equal(take1(t, RULE, "pinned", &rule, NOW), 0);
    if (procs == 1) {
        __atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
        assert_int_equal(run_threads(t, sh, 0, threads, floods), 0);
    } else {
        for (int p = 0; p < procs; p++) {
            pid[p] = fork();
            assert_true(pid[p] >= 0);
            if (pid[p] == 0)
                _exit(run_threads(t, sh, p * threads, threads, floods));
        }
        while (__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) < (uint32_t)(procs * threads))
            usleep(1000);
        __atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
        for (int p = 0; p < procs; p++) {
            assert_int_equal(waitpid(pid[p], &status, 0), pid[p]);
            assert_true(WIFEXITED(status));
            assert_int_equal(WEXITSTATUS(status), 0);
        }
    }
    assert_int_equal(sh->errors, 0);
    /* Exact where nothing may be evicted. */
    assert_int_equal(sh->hot_allowed, HOT_LIMIT);
    assert_int_equal(sh->pinned_allowed, 0);
    assert_int_equal(credit(t, OTHER, "hot", &hot, NOW), 0);
    assert_int_equal(credit(t, RULE, "pinned", &rule, NOW), 0);
    /* The flood was served by evicting its own counters, within max_actors. */
    assert_int_equal(sh->flood_allowed + sh->flood_full, n_floods);
    assert_true(sh->flood_allowed >= n_floods - n_floods / 100);
    assert_true(stats(t, NOW).evictions >= sh->flood_allowed - MAX_ACTORS);
    assert_true(counters_of(t, RULE, NOW) <= MAX_ACTORS);
    assert_int_equal(counters_of(t, OTHER, NOW), 1);
    fprintf(stderr, "  %d process(es) x %d threads: %llu of %llu new actors served, "
            "%llu evictions\n", procs, threads, (unsigned long long)sh->flood_allowed,
            (unsigned long long)n_floods, (unsigned long long)stats(t, NOW).evictions);
    munmap(sh, sizeof(*sh));
    table_close(t);
}

static void test_table_evict_threads_exact(void **state)
{
    (void)state;
    hammer(1, 4, 2);
}

/*
 * Threads that TAKE one new key at once, round after round, on a rule at
 * max_actors (full of RACE_FILL counters that may be evicted).  Each
 * round's key is older than the rule's other counters, so once one racer
 * has made its counter, it is the one an eviction by another racer (whose
 * lookup came too early to see it) would pick first.
 */
#define RACE_THREADS    2
#define RACE_ROUNDS     8000
#define RACE_FILL       32000

struct racer {
    struct table *t;
    pthread_barrier_t *barrier;
    uint8_t allowed[RACE_ROUNDS];
    int errors;
};

static void *racer_run(void *arg)
{
    struct racer *r = arg;
    struct table_limits lim = window(1, RACE_FILL, true);
    char a[32];

    for (int i = 0; i < RACE_ROUNDS; i++) {
        int q;

        pthread_barrier_wait(r->barrier);
        q = take1(r->t, RULE, name(a, sizeof(a), "race", i), &lim, NOW + i);
        if (q < 0)
            r->errors++;
        else
            r->allowed[i] = (uint8_t)q;
    }
    return NULL;
}

/* A new key's hit never evicts the counter another hit just made for the
 * same key (which would let both in): each key is allowed exactly once.
 * (A race: without that rule this failed in five runs of six here.) */
static void test_table_evict_never_own_key(void **state)
{
    struct table_limits lim = window(1, RACE_FILL, true);
    static struct racer r[RACE_THREADS];
    pthread_t th[RACE_THREADS];
    pthread_barrier_t barrier;
    struct table *t = new_table(65536);
    char a[32];

    (void)state;
    for (int i = 0; i < RACE_FILL; i++)
        assert_int_equal(take1(t, RULE, name(a, sizeof(a), "filler", i), &lim,
                               NOW + RACE_ROUNDS + i), 1);
    pthread_barrier_init(&barrier, NULL, RACE_THREADS);
    for (int i = 0; i < RACE_THREADS; i++) {
        memset(&r[i], 0, sizeof(r[i]));
        r[i].t = t;
        r[i].barrier = &barrier;
        assert_int_equal(pthread_create(&th[i], NULL, racer_run, &r[i]), 0);
    }
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&barrier);
    for (int k = 0; k < RACE_ROUNDS; k++) {
        unsigned n = 0;

        for (int i = 0; i < RACE_THREADS; i++)
            n += r[i].allowed[k];
        if (n != 1)
            fail_msg("race%d: allowed %u times", k, n);
    }
    for (int i = 0; i < RACE_THREADS; i++)
        assert_int_equal(r[i].errors, 0);
    assert_true(stats(t, NOW).evictions >= RACE_ROUNDS);
    assert_true(counters_of(t, RULE, NOW) <= RACE_FILL);
    table_close(t);
}

/*
 * ThreadSanitizer emulates 16-byte atomics with a lock private to each
 * process: across processes it cannot be exact (test_table.c says more).
 */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

static void test_table_evict_processes_exact(void **state)
{
    (void)state;
#ifdef UNDER_TSAN
    printf("SKIP (TSan): its 16-byte atomics are a lock private to each process, so counts "
           "across processes cannot be exact under it\n");
    skip();
#endif
    hammer(2, 3, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_evict_at_max_actors),
        cmocka_unit_test(test_table_evict_spares_refused),
        cmocka_unit_test(test_table_evict_debt_expired_and_refill),
        cmocka_unit_test(test_table_evict_full_window_own_rule_only),
        cmocka_unit_test(test_table_evict_sparse_rule),
        cmocka_unit_test(test_table_evict_room),
        cmocka_unit_test(test_table_evict_never_own_key),
        cmocka_unit_test(test_table_evict_threads_exact),
        cmocka_unit_test(test_table_evict_processes_exact),
    };

    return cmocka_run_group_tests_name("table_evict", tests, NULL, NULL);
}
