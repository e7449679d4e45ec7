/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the lease slots of common/table_lease.c (docs/dev/shm.md "Lease
 * slots"), the host side of the Redis store's lease mode (docs/redis.md):
 * spending a lease, the FETCH flag and HOLD slots, grants and new windows,
 * the low-water refill, the exhaustion shortcut, abort, clearing flags at
 * start, lease keys apart from local counters, and the bound "a host never
 * holds more than lease_max" under threads racing on one key.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "table.h"

#define NOW     1000000u

struct fixture {
    char dir[64];
    char path[128];
    struct table *t;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct table_open_info info;

    if (!f)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/divvy-lease-XXXXXX");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    snprintf(f->path, sizeof(f->path), "%s/counters", f->dir);
    if (table_open(f->path, 1024, 0600, &f->t, &info) < 0) {
        rmdir(f->dir);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    table_close(f->t);
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

static void lim_of(struct table_limits *lim, uint64_t limit, uint64_t lease_max)
{
    memset(lim, 0, sizeof(*lim));
    lim->algo = RULES_ALGO_WINDOW;
    lim->credit_limit = limit;
    lim->reset_ms = 60000;
    lim->lease = true;
    lim->lease_max = lease_max;
}

static const struct table_key key_a = { .rule_id = 7, .actor = "alice", .actor_len = 5 };

static void grant(struct table *t, const struct table_limits *lim, uint64_t g, uint64_t remain,
                  uint64_t end, bool created, bool fetch, uint64_t now)
{
    struct table_lease_grant gr = { .granted = g, .remain = remain, .end_ms = end,
                                    .created = created, .fetch = fetch };

    assert_int_equal(table_lease_grant(t, &key_a, lim, &gr, now), 0);
}

static struct table_lease_result take(struct table *t, const struct table_limits *lim,
                                      uint64_t n, bool may_fetch, uint64_t now)
{
    struct table_lease_result r;

    assert_int_equal(table_lease_take(t, &key_a, lim, n, may_fetch, now, &r), 0);
    return r;
}

/* No lease: the first taker owns FETCH (a HOLD slot); others are told to ASK. */
static void test_table_lease_fetch_then_spend(void **state)
{
    struct fixture *f = *state;
    struct table_limits lim;
    struct table_lease_result r;

    lim_of(&lim, 1000, 50);
    r = take(f->t, &lim, 1, true, NOW);
    assert_int_equal(r.verdict, TABLE_LEASE_FETCH);
    assert_int_equal(r.want, 50);
    r = take(f->t, &lim, 1, true, NOW + 1);
    assert_int_equal(r.verdict, TABLE_LEASE_ASK);
    assert_int_equal(r.want, 1);
    /* A client that cannot fetch never gets FETCH. */
    r = take(f->t, &lim, 1, false, NOW + 1);
    assert_int_equal(r.verdict, TABLE_LEASE_ASK);
    /* The grant: 50 leased, 950 left in the pool, window ends in 60 s. */
    grant(f->t, &lim, 50, 950, NOW + 60000, true, true, NOW + 2);
    /* A fast-path client spends down to the low-water mark (target
     * min(50, 950 / 16) = 50: below 25 left)... */
    for (int i = 49; i >= 0; i--) {
        uint64_t want;

        r = take(f->t, &lim, 1, false, NOW + 3);
        assert_int_equal(r.verdict, TABLE_LEASE_ALLOWED);
        assert_int_equal(r.credit, 950 + (uint64_t)i);
        assert_int_equal(r.reset_ms, 60000 - 3);
        /* ...below it, it is told to ask divvyd for a refill (FETCH not
         * set), until divvyd claims the refill. */
        assert_int_equal(r.refill, i < 25 && i >= 20);
        if (i < 25 && i >= 20)
            assert_int_equal(r.want, 50 - (uint64_t)i);
        if (i == 20) {
            assert_int_equal(table_lease_refill_claim(f->t, &key_a, &lim, NOW + 3, &want), 1);
            assert_int_equal(want, 30);
            /* Claimed once: a second hint finds the fetch under way. */
            assert_int_equal(table_lease_refill_claim(f->t, &key_a, &lim, NOW + 3, &want), 0);
            assert_int_equal(want, 0);
        }
    }
    r = take(f->t, &lim, 1, false, NOW + 3);
    assert_int_equal(r.verdict, TABLE_LEASE_ASK);
    /* The refill fails: FETCH is cleared for the next fetcher. */
    assert_int_equal(table_lease_abort(f->t, &key_a, &lim, NOW + 3), 0);
    /* More than one lease can hold goes to Redis directly. */
    grant(f->t, &lim, 50, 900, NOW + 60000, false, false, NOW + 3);
    r = take(f->t, &lim, 51, true, NOW + 3);
    assert_int_equal(r.verdict, TABLE_LEASE_ASK);
    assert_int_equal(r.want, 51);
    /* RESET forgets this host's lease. */
    {
        struct table_result tr;

        assert_int_equal(table_hit(f->t, &key_a, &lim, TABLE_RESET, 0, NOW + 4, &tr), 0);
        assert_int_equal(table_hit(f->t, &key_a, &lim, TABLE_TAKE, 1, NOW + 4, &tr), -EINVAL);
    }
}

/* Low water: half of the target grant left sets FETCH for a background refill. */
static void test_table_lease_low_water_refill(void **state)
{
    struct fixture *f = *state;
    struct table_limits lim;
    struct table_lease_result r;
    int refills = 0;

    lim_of(&lim, 100000, 100);
    assert_int_equal(take(f->t, &lim, 1, true, NOW).verdict, TABLE_LEASE_FETCH);
    grant(f->t, &lim, 100, 99900, NOW + 60000, true, true, NOW);
    for (int i = 0; i < 60; i++) {
        r = take(f->t, &lim, 1, true, NOW + 1);
        assert_int_equal(r.verdict, TABLE_LEASE_ALLOWED);
        if (r.refill) {
            refills++;
            /* target min(100, 99900 / 16): refill once below 50 */
            assert_int_equal(i, 50);
            assert_int_equal(r.want, 100 - 49);
        }
    }
    assert_int_equal(refills, 1);
    /* The refill lands: the lease never exceeds lease_max. */
    grant(f->t, &lim, 51, 99849, NOW + 59000, false, true, NOW + 2);
    r = take(f->t, &lim, 1, true, NOW + 3);
    assert_int_equal(r.verdict, TABLE_LEASE_ALLOWED);
    assert_int_equal(r.credit, 99849 + 40 + 51 - 1);
    /* The window only ever moves earlier within one Redis window. */
    assert_int_equal(r.reset_ms, 59000 - 3);
}

/* The pool only shrinks within a window: once it is known empty, deny
 * without asking Redis; a new window ends that. */
static void test_table_lease_exhausted_window(void **state)
{
    struct fixture *f = *state;
    struct table_limits lim;
    struct table_lease_result r;

    lim_of(&lim, 10, 50);
    assert_int_equal(take(f->t, &lim, 1, true, NOW).verdict, TABLE_LEASE_FETCH);
    grant(f->t, &lim, 1, 0, NOW + 1000, false, true, NOW);
    assert_int_equal(take(f->t, &lim, 1, true, NOW).verdict, TABLE_LEASE_ALLOWED);
    r = take(f->t, &lim, 1, true, NOW + 1);
    assert_int_equal(r.verdict, TABLE_LEASE_DENIED);
    assert_int_equal(r.credit, 0);
    assert_int_equal(r.reset_ms, 999);
    /* A later answer cannot raise what this host knows is left. */
    grant(f->t, &lim, 0, 5, NOW + 1000, false, false, NOW + 1);
    assert_int_equal(take(f->t, &lim, 3, false, NOW + 1).verdict, TABLE_LEASE_DENIED);
    /* The window is over: the lease ends with it. */
    r = take(f->t, &lim, 1, true, NOW + 1000);
    assert_int_equal(r.verdict, TABLE_LEASE_FETCH);
}

/* A grant that says a new window began replaces the old lease; a grant for
 * a window that is already over is dropped (but clears FETCH). */
static void test_table_lease_new_window_and_late_grant(void **state)
{
    struct fixture *f = *state;
    struct table_limits lim;
    struct table_lease_result r;

    lim_of(&lim, 1000, 50);
    assert_int_equal(take(f->t, &lim, 1, true, NOW).verdict, TABLE_LEASE_FETCH);
    grant(f->t, &lim, 40, 960, NOW + 5000, true, true, NOW);
    grant(f->t, &lim, 7, 993, NOW + 9000, true, false, NOW + 1);
    r = take(f->t, &lim, 1, false, NOW + 2);
    assert_int_equal(r.verdict, TABLE_LEASE_ALLOWED);
    assert_int_equal(r.credit, 993 + 6);
    assert_int_equal(r.reset_ms, 9000 - 2);
    /* Late: its window ended before it arrived. */
    lim.lease_max = 60;
    assert_int_equal(take(f->t, &lim, 7, true, NOW + 3).verdict, TABLE_LEASE_FETCH);
    grant(f->t, &lim, 30, 900, NOW + 3, false, true, NOW + 4);
    r = take(f->t, &lim, 7, true, NOW + 5);
    assert_int_equal(r.verdict, TABLE_LEASE_FETCH);
}

/* A failed fetch clears FETCH (a HOLD slot expires); so does a restart. */
static void test_table_lease_abort_and_clear(void **state)
{
    struct fixture *f = *state;
    struct table_limits lim;

    lim_of(&lim, 1000, 50);
    assert_int_equal(take(f->t, &lim, 1, true, NOW).verdict, TABLE_LEASE_FETCH);
    assert_int_equal(take(f->t, &lim, 1, true, NOW).verdict, TABLE_LEASE_ASK);
    assert_int_equal(table_lease_abort(f->t, &key_a, &lim, NOW + 1), 0);
    assert_int_equal(take(f->t, &lim, 1, true, NOW + 2).verdict, TABLE_LEASE_FETCH);
    /* A daemon killed mid-fetch: the next start clears the flag. */
    assert_int_equal(table_lease_clear_fetches(f->t, NOW + 3), 1);
    assert_int_equal(take(f->t, &lim, 1, true, NOW + 4).verdict, TABLE_LEASE_FETCH);
    /* ... and a HOLD slot also expires on its own. */
    assert_int_equal(take(f->t, &lim, 1, true, NOW + 5).verdict, TABLE_LEASE_ASK);
    assert_int_equal(take(f->t, &lim, 1, true, NOW + 4 + TABLE_LEASE_HOLD_MS).verdict,
                     TABLE_LEASE_FETCH);
}

/* Lease slots are their own keys: the local counter of the same rule and
 * actor is untouched; COUNTERS sees the lease. */
static int count_lease(const struct table_entry *e, void *arg)
{
    unsigned *n = arg;

    if (e->lease) {
        assert_int_equal(e->lease_left, 20);
        assert_int_equal(e->lease_remain, 980);
        (*n)++;
    }
    return 0;
}

static void test_table_lease_own_key(void **state)
{
    struct fixture *f = *state;
    struct table_limits lim, local;
    struct table_lease_result lr;
    struct table_result tr;
    unsigned n = 0;

    lim_of(&lim, 1000, 50);
    local = lim;
    local.lease = false;
    assert_int_equal(take(f->t, &lim, 1, true, NOW).verdict, TABLE_LEASE_FETCH);
    grant(f->t, &lim, 20, 980, NOW + 60000, true, true, NOW);
    assert_int_equal(table_hit(f->t, &key_a, &local, TABLE_TAKE, 1, NOW, &tr), 0);
    assert_int_equal(tr.credit, 999);
    assert_int_equal(table_foreach(f->t, NOW, count_lease, &n), 0);
    assert_int_equal(n, 1);
    /* Settings a lease slot cannot hold are refused. */
    lim.algo = RULES_ALGO_TOKEN_BUCKET;
    assert_int_equal(table_lease_take(f->t, &key_a, &lim, 1, true, NOW, &lr), -EINVAL);
    lim_of(&lim, TABLE_LEASE_MAX + 1, 50);
    assert_int_equal(table_lease_take(f->t, &key_a, &lim, 1, true, NOW, &lr), -EINVAL);
    lim_of(&lim, 1000, 0);
    assert_int_equal(table_lease_take(f->t, &key_a, &lim, 1, true, NOW, &lr), -EINVAL);
}

/* Threads race on one key, fetching as a daemon would: at most one FETCH at
 * a time, so the lease never holds more than lease_max, and every credit
 * granted is spent exactly once. */
struct racer {
    struct table *t;
    const struct table_limits *lim;
    uint64_t *pool;             /* the "Redis" remainder, under pool_lock */
    pthread_mutex_t *pool_lock;
    unsigned allowed, fetches, asks;
    uint64_t asked;             /* credit taken directly */
};

static void *race(void *arg)
{
    struct racer *r = arg;

    for (int i = 0; i < 20000; i++) {
        struct table_lease_result res;

        assert_int_equal(table_lease_take(r->t, &key_a, r->lim, 1, true, NOW, &res), 0);
        if (res.verdict == TABLE_LEASE_ALLOWED)
            r->allowed++;
        if (res.verdict == TABLE_LEASE_FETCH || res.refill) {
            struct table_lease_grant g = { .end_ms = NOW + 60000, .fetch = true };
            uint64_t k;

            pthread_mutex_lock(r->pool_lock);
            k = *r->pool / TABLE_LEASE_DIVISOR;
            k = k < 1 ? 1 : k;
            g.granted = res.want < k ? res.want : k;
            g.granted = g.granted < *r->pool ? g.granted : *r->pool;
            *r->pool -= g.granted;
            g.remain = *r->pool;
            pthread_mutex_unlock(r->pool_lock);
            assert_true(g.granted <= r->lim->lease_max);
            assert_int_equal(table_lease_grant(r->t, &key_a, r->lim, &g, NOW), 0);
            r->fetches++;
        } else if (res.verdict == TABLE_LEASE_ASK) {
            pthread_mutex_lock(r->pool_lock);
            if (*r->pool > 0) {
                (*r->pool)--;
                r->asked++;
            }
            pthread_mutex_unlock(r->pool_lock);
            r->asks++;
        }
    }
    return NULL;
}

static int lease_left(const struct table_entry *e, void *arg)
{
    if (e->lease)
        *(uint64_t *)arg = e->lease_left;
    return 0;
}

static void test_table_lease_threads_bounded(void **state)
{
    struct fixture *f = *state;
    struct table_limits lim;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    uint64_t pool = 50000, left = 0, allowed = 0, asked = 0;
    struct racer r[4];
    pthread_t th[4];

    lim_of(&lim, 50000, 64);
    for (int i = 0; i < 4; i++) {
        r[i] = (struct racer){ .t = f->t, .lim = &lim, .pool = &pool, .pool_lock = &lock };
        assert_int_equal(pthread_create(&th[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        allowed += r[i].allowed;
        asked += r[i].asked;
    }
    table_foreach(f->t, NOW, lease_left, &left);
    /* Granted = spent here + still held; held never above lease_max. */
    assert_true(left <= lim.lease_max);
    assert_int_equal(allowed + left + asked + pool, 50000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_table_lease_fetch_then_spend, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_lease_low_water_refill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_lease_exhausted_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_lease_new_window_and_late_grant, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_table_lease_abort_and_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_lease_own_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_lease_threads_bounded, setup, teardown),
    };

    return cmocka_run_group_tests_name("table_lease", tests, NULL, NULL);
}
