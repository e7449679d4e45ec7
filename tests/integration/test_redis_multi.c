/* SPDX-License-Identifier: MIT */
/*
 * Integration: several divvyd hosts sharing one real Redis (docs/redis.md).
 * Two and three daemons are hammered concurrently (raw sockets, pipelined,
 * one actor): in strict mode exactly credit_limit hits are allowed in total;
 * in lease mode never more than the limit and at least the limit minus the
 * documented stranded bound (hosts * lease_max).
 */
#include <errno.h>
#include <pthread.h>

#include "harness_redis.h"

#define LIMIT       3000
#define PER_THREAD  1500        /* requests per connection */
#define THREADS     2           /* connections per daemon */
#define DEPTH       50
#define LEASE_MAX   40

/* ---- load ----------------------------------------------------------------- */

/* One thread hammering one connection with pipelined requests. */
struct hammer {
    struct harness_daemon *d;
    const char *req;            /* one request line, without '\n' */
    unsigned total;             /* requests to send */
    unsigned depth;             /* pipelined per batch */
    unsigned allowed;           /* out: "OK true" replies */
    unsigned denied;            /* out: "OK false" replies */
    unsigned other;             /* out: anything else */
    uint64_t max_batch_ms;      /* out: slowest batch, send to last reply */
    int err;                    /* out: negative errno */
};

static void *hammer_run(void *arg)
{
    struct hammer *h = arg;
    struct harness_conn *c = NULL;
    char line[HARNESS_LINE];
    char *batch = NULL;
    size_t len = strlen(h->req), blen;
    unsigned sent = 0;
    int r;

    r = harness_connect(h->d, HARNESS_UNIX, &c);
    if (r < 0) {
        h->err = r;
        return NULL;
    }
    batch = malloc((len + 1) * h->depth);
    if (!batch) {
        h->err = -ENOMEM;
        goto out;
    }
    while (sent < h->total) {
        unsigned n = h->total - sent < h->depth ? h->total - sent : h->depth;
        uint64_t t0 = harness_now_ms(), dt;

        blen = 0;
        for (unsigned i = 0; i < n; i++) {
            memcpy(batch + blen, h->req, len);
            batch[blen + len] = '\n';
            blen += len + 1;
        }
        r = harness_send(c, batch, blen);
        for (unsigned i = 0; r >= 0 && i < n; i++) {
            r = (int)harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS);
            if (r < 0)
                break;
            if (strncmp(line, "OK true ", 8) == 0)
                h->allowed++;
            else if (strncmp(line, "OK false ", 9) == 0)
                h->denied++;
            else
                h->other++;
        }
        if (r < 0) {
            h->err = r;
            goto out;
        }
        dt = harness_now_ms() - t0;
        if (dt > h->max_batch_ms)
            h->max_batch_ms = dt;
        sent += n;
    }
out:
    free(batch);
    harness_close(c);
    return NULL;
}

/* Runs @n hammers concurrently and waits for all of them. */
static void hammer_all(struct hammer *hs, unsigned n)
{
    pthread_t *t = harness_scratch(n * sizeof(*t));

    assert_non_null(t);
    for (unsigned i = 0; i < n; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hammer_run, &hs[i]), 0);
    for (unsigned i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    for (unsigned i = 0; i < n; i++) {
        if (hs[i].err < 0)
            fail_msg("hammer %u: %s", i, strerror(-hs[i].err));
    }
}

static const char rules_text[] =
    "{ match = { path = \"/api\"; }; label = \"api\"; actor = \"user\";\n"
    "  credit_limit = 3000; reset_seconds = 3600; },\n"
    "{ default = true; credit_limit = 0; reset_seconds = 0; }";

struct run {
    unsigned allowed, denied, other;
};

static void run_hosts(struct redis_srv *rs, const char *mode, unsigned hosts, struct run *ret)
{
    struct harness_daemon *d[3] = { NULL };
    struct hammer *hs = harness_scratch(sizeof(*hs) * hosts * THREADS);
    char *conf;

    assert_non_null(hs);
    conf = redis_config(rs, mode, "closed", 1000, "lease_max = 40;", rules_text);
    assert_non_null(conf);
    for (unsigned i = 0; i < hosts; i++)
        d[i] = redis_divvyd(conf, 2);
    free(conf);
    for (unsigned i = 0; i < hosts * THREADS; i++) {
        hs[i].d = d[i / THREADS];
        hs[i].req = "HIT path=/api user=alice";
        hs[i].total = PER_THREAD;
        hs[i].depth = DEPTH;
    }
    hammer_all(hs, hosts * THREADS);
    memset(ret, 0, sizeof(*ret));
    for (unsigned i = 0; i < hosts * THREADS; i++) {
        ret->allowed += hs[i].allowed;
        ret->denied += hs[i].denied;
        ret->other += hs[i].other;
    }
    for (unsigned i = 0; i < hosts; i++) {
        long long v;

        /* No fallback happened: every answer came through Redis. */
        struct harness_conn *c;

        CHECK(harness_connect(d[i], HARNESS_UNIX, &c));
        CHECK(harness_get_stat(c, "redis_fallbacks", &v));
        assert_int_equal(v, 0);
        CHECK(harness_get_stat(c, "redis_breaker_trips", &v));
        assert_int_equal(v, 0);
        harness_close(c);
    }
}

static void check_strict(unsigned hosts)
{
    struct redis_srv *rs;
    struct run run;
    long long used, ttl;

    CHECK(redis_start(&rs));
    run_hosts(rs, "strict", hosts, &run);
    assert_int_equal(run.other, 0);
    assert_int_equal(run.allowed + run.denied, hosts * THREADS * PER_THREAD);
    if (run.allowed != LIMIT)
        fail_msg("strict, %u hosts: %u allowed, want exactly %d", hosts, run.allowed, LIMIT);
    used = redis_int(rs, "GET %s", "divvy:{api:alice}");
    ttl = redis_int(rs, "PTTL %s", "divvy:{api:alice}");
    assert_int_equal(used, LIMIT);
    assert_in_range(ttl, 3500000, 3600000);
    redis_stop(rs);
}

static void check_lease(unsigned hosts)
{
    struct redis_srv *rs;
    struct run run;
    long long used, ttl;
    unsigned bound = hosts * LEASE_MAX;

    CHECK(redis_start(&rs));
    run_hosts(rs, "lease", hosts, &run);
    assert_int_equal(run.other, 0);
    used = redis_int(rs, "GET %s", "divvy:{api:alice}");
    ttl = redis_int(rs, "PTTL %s", "divvy:{api:alice}");
    print_message("lease, %u hosts: %u allowed of %d (stranded %d, bound %u); Redis used %lld\n",
                  hosts, run.allowed, LIMIT, LIMIT - (int)run.allowed, bound, used);
    if (run.allowed > LIMIT)
        fail_msg("lease, %u hosts: %u allowed, more than the limit %d", hosts, run.allowed,
                 LIMIT);
    if (run.allowed + bound < LIMIT)
        fail_msg("lease, %u hosts: %u allowed, below limit - hosts * lease_max = %u",
                 hosts, run.allowed, LIMIT - bound);
    assert_true(used <= LIMIT);
    assert_in_range(ttl, 3500000, 3600000);
    redis_stop(rs);
}

/*
 * Hosts that stop early keep their unspent lease: 3 hosts asked for exactly
 * the limit in total (2400, 300, 300 requests).  Stranded credit (granted by
 * Redis, never spent) stays within hosts * lease_max, so at least
 * limit - that many are allowed.
 */
static void test_redis_lease_uneven_stranded(void **state)
{
    static const unsigned share[3] = { 2400, 300, 300 };
    struct harness_daemon *d[3];
    struct hammer hs[3];
    struct redis_srv *rs;
    unsigned allowed = 0, bound = 3 * LEASE_MAX;
    long long used;
    char *conf;

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "lease", "closed", 1000, "lease_max = 40;", rules_text);
    assert_non_null(conf);
    for (int i = 0; i < 3; i++)
        d[i] = redis_divvyd(conf, 2);
    free(conf);
    memset(hs, 0, sizeof(hs));
    for (int i = 0; i < 3; i++) {
        hs[i].d = d[i];
        hs[i].req = "HIT path=/api user=bob";
        hs[i].total = share[i];
        hs[i].depth = 10;
    }
    hammer_all(hs, 3);
    for (int i = 0; i < 3; i++)
        allowed += hs[i].allowed;
    used = redis_int(rs, "GET %s", "divvy:{api:bob}");
    print_message("lease, uneven: %u allowed of %d requested; Redis used %lld; stranded %lld "
                  "(bound %u)\n", allowed, LIMIT, used, used - (long long)allowed, bound);
    assert_true(allowed <= LIMIT);
    assert_true(used <= LIMIT);
    assert_true(used >= (long long)allowed);
    assert_true(used - (long long)allowed <= (long long)bound);
    assert_true(allowed + bound >= LIMIT);
    redis_stop(rs);
}

static void test_redis_strict_two_hosts_exact(void **state)
{
    (void)state;
    check_strict(2);
}

static void test_redis_strict_three_hosts_exact(void **state)
{
    (void)state;
    check_strict(3);
}

static void test_redis_lease_two_hosts_bounded(void **state)
{
    (void)state;
    check_lease(2);
}

static void test_redis_lease_three_hosts_bounded(void **state)
{
    (void)state;
    check_lease(3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_redis_strict_two_hosts_exact, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_strict_three_hosts_exact, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_lease_two_hosts_bounded, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_lease_three_hosts_bounded, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_lease_uneven_stranded, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_multi", tests, NULL, NULL);
}
