/* SPDX-License-Identifier: MIT */
/*
 * Integration (real redis-server, real divvyd, real libdivvy): lease rules
 * spent on the shared-memory fast path.  Two and three divvyd "hosts" share
 * one Redis in lease mode; on each, two processes hit one fast_path lease
 * rule through libdivvy (DIVVY_AUTO), asking for more than the limit in
 * total.  The same three hosts in strict mode, through libdivvy: exactly the
 * limit.  Hits are
 * decided in-process from the host's lease, the hit that crosses the
 * low-water mark goes to divvyd (which refills in the background), and an
 * empty lease sends the hit to divvyd: across both hosts never more than the
 * limit is allowed, at least the limit minus hosts * lease_max, and most
 * hits never leave the caller's process.  A PEEK of a lease rule still goes
 * to divvyd (Redis answers it).  REFILL hints are never answered, and one
 * that divvyd claims while the Redis breaker is open releases its claim, so
 * the lease refills once Redis is back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "divvy.h"
#include "harness_redis.h"

#define LIMIT       3000
#define LEASE_MAX   40
#define MAX_HOSTS   3
#define PROCS       2           /* per host */
#define PER_PROC    1000

static const char rules_text[] =
    "{ match = { path = \"/api\"; }; label = \"api\"; actor = \"user\";\n"
    "  credit_limit = 3000; reset_seconds = 3600; fast_path = true; },\n"
    "{ default = true; credit_limit = 0; reset_seconds = 0; }";

struct proc_result {
    long allowed, denied, fast, errors;
    char first[256];
};

struct proc_arg {
    const struct harness_daemon *d;
    struct proc_result *out;    /* shared memory */
};

static int proc_main(void *arg)
{
    struct proc_arg *a = arg;
    struct divvy_kv kv[2] = { { "path", "/api" }, { "user", "alice" } };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy *h = NULL;

    if (harness_divvy_env(a->d) < 0 || divvy_open(NULL, DIVVY_AUTO, &h) < 0)
        return 1;
    for (int i = 0; i < PER_PROC; i++) {
        int r = divvy_hit(h, kv, 2, &res);

        if (r < 0) {
            if (!a->out->errors++)
                snprintf(a->out->first, sizeof(a->out->first), "%s", divvy_errmsg(h));
            continue;
        }
        if (res.allowed)
            a->out->allowed++;
        else
            a->out->denied++;
        a->out->fast += res.fast_path;
    }
    divvy_close(h);
    return 0;
}

/* Waits until the host's fast path decides hits at all (first heartbeat). */
static void wait_fast(const struct harness_daemon *d)
{
    struct divvy *h = NULL;

    CHECK(harness_divvy_env(d));
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    harness_wait_fast(h, (struct divvy_kv[]){ { "path", "/elsewhere" } }, 1);
    divvy_close(h);
}

/*
 * @hosts divvyd sharing one Redis in @mode ("lease" or "strict"), PROCS
 * libdivvy processes on each, PER_PROC hits each on one counter.
 */
static void run_hosts(const char *mode, int hosts)
{
    bool lease = strcmp(mode, "lease") == 0;
    struct harness_daemon *d[MAX_HOSTS];
    struct proc_result *out;
    struct proc_arg args[MAX_HOSTS * PROCS];
    pid_t pids[MAX_HOSTS * PROCS];
    size_t out_size = sizeof(*out) * (size_t)hosts * PROCS;
    struct redis_srv *rs;
    long allowed = 0, fast = 0, hits = 0, bound = lease ? (long)hosts * LEASE_MAX : 0;
    long long used, fast_hits, fallbacks;
    char *conf;

    assert_true(hosts <= MAX_HOSTS);
    out = mmap(NULL, out_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(out != MAP_FAILED);
    memset(out, 0, out_size);
    CHECK(redis_start(&rs));
    conf = redis_config(rs, mode, "closed", 1000, "lease_max = 40;", rules_text);
    assert_non_null(conf);
    for (int i = 0; i < hosts; i++)
        d[i] = redis_divvyd(conf, 2);
    free(conf);
    for (int i = 0; i < hosts; i++)
        wait_fast(d[i]);
    for (int i = 0; i < hosts * PROCS; i++) {
        args[i] = (struct proc_arg){ .d = d[i / PROCS], .out = &out[i] };
        CHECK(harness_spawn(proc_main, &args[i], &pids[i]));
    }
    for (int i = 0; i < hosts * PROCS; i++) {
        int status;

        CHECK(harness_reap(pids[i], 60000, &status));
        assert_int_equal(status, 0);
    }
    for (int i = 0; i < hosts * PROCS; i++) {
        if (out[i].errors)
            fail_msg("process %d: %ld errors, first: %s", i, out[i].errors, out[i].first);
        allowed += out[i].allowed;
        fast += out[i].fast;
        hits += out[i].allowed + out[i].denied;
    }
    used = redis_int(rs, "GET %s", "divvy:{api:alice}");
    print_message("%s through libdivvy, %d hosts x %d processes: %ld of %ld hits allowed "
                  "(limit %d, stranded bound %ld), %ld decided in-process; Redis used %lld\n",
                  mode, hosts, PROCS, allowed, hits, LIMIT, bound, fast, used);
    assert_int_equal(hits, (long)hosts * PROCS * PER_PROC);
    if (allowed > LIMIT)
        fail_msg("%ld allowed, more than the limit %d", allowed, LIMIT);
    if (allowed + bound < LIMIT)
        fail_msg("%ld allowed, below limit - hosts * lease_max = %ld", allowed, LIMIT - bound);
    assert_true(used <= LIMIT);
    if (lease) {
        /* Most allowed hits were spent from the lease in-process. */
        if (fast * 2 < allowed)
            fail_msg("only %ld of %ld allowed hits were decided in-process", fast, allowed);
    } else {
        /* Strict: every hit was decided in Redis, none in-process. */
        assert_int_equal(fast, 0);
        assert_int_equal(used, LIMIT);
    }
    for (int i = 0; i < hosts; i++) {
        struct harness_conn *c;

        CHECK(harness_connect(d[i], HARNESS_UNIX, &c));
        CHECK(harness_get_stat(c, "fast_path_hits", &fast_hits));
        CHECK(harness_get_stat(c, "redis_fallbacks", &fallbacks));
        harness_close(c);
        assert_int_equal(fallbacks, 0);
        if (lease)
            assert_true(fast_hits > 0);
        harness_free(d[i]);
    }
    redis_stop(rs);
    munmap(out, out_size);
}

static void test_lease_fast_two_hosts(void **state)
{
    (void)state;
    run_hosts("lease", 2);
}

static void test_lease_fast_three_hosts(void **state)
{
    (void)state;
    run_hosts("lease", 3);
}

static void test_strict_lib_three_hosts(void **state)
{
    (void)state;
    run_hosts("strict", 3);
}

/* Only TAKE spends a lease in-process: PEEK asks Redis through divvyd. */
static void test_lease_fast_peek_goes_to_divvyd(void **state)
{
    struct divvy_kv kv[2] = { { "path", "/api" }, { "user", "bob" } };
    struct divvy_result res = { .size = sizeof(res) };
    struct harness_daemon *d;
    struct redis_srv *rs;
    struct divvy *h = NULL;
    bool any_fast = false;
    char *conf;

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "lease", "closed", 1000, "lease_max = 40;", rules_text);
    assert_non_null(conf);
    d = redis_divvyd(conf, 2);
    free(conf);
    wait_fast(d);
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    for (int i = 0; i < 100; i++) {
        CHECK(divvy_hit(h, kv, 2, &res));
        assert_true(res.allowed);
        /* A lease reports what this host last saw of the pool (docs/redis.md):
         * never more than is left, and never far below it. */
        assert_in_range(res.credit, LIMIT - 1 - i - 2 * LEASE_MAX, LIMIT - 1 - i);
        any_fast |= res.fast_path;
    }
    assert_true(any_fast);
    CHECK(divvy_peek(h, kv, 2, &res));
    assert_false(res.fast_path);
    /* Redis's view: what was leased to this host counts as used there. */
    assert_true(res.credit <= LIMIT - 100);
    divvy_close(h);
    harness_free(d);
    redis_stop(rs);
}

/* REFILL is never answered, not even a malformed or stale one; a good one
 * on a low lease starts a refill. */
static void test_lease_fast_refill_verb(void **state)
{
    struct divvy_kv kv[2] = { { "path", "/api" }, { "user", "carol" } };
    struct divvy_result res = { .size = sizeof(res) };
    struct harness_daemon *d;
    struct harness_conn *c;
    struct redis_srv *rs;
    struct divvy *h = NULL;
    char reply[HARNESS_LINE];
    long long hints, dropped, fetches_before, fetches;
    char *conf;

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "lease", "closed", 1000, "lease_max = 40;", rules_text);
    assert_non_null(conf);
    d = redis_divvyd(conf, 1);
    free(conf);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_sendf(c, "REFILL\nREFILL rule=nosuch index=0 actor=x\n"
                          "REFILL rule=api index=7 actor=x\nREFILL rule=api index=zz actor=x\n"
                          "REFILL \"broken\nREFILL rule=api index=0 actor=nobody\nPING\n"));
    /* Six hints, no reply to any: the first line back answers PING. */
    assert_true(harness_recv_line(c, reply, sizeof(reply), 5000) > 0);
    assert_string_equal(reply, "OK pong");
    /* A lease taken below its low-water mark by hand: divvyd takes 1 per hit
     * and refills itself, so spend it down in-process first. */
    wait_fast(d);
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    for (int i = 0; i < 200; i++)
        CHECK(divvy_hit(h, kv, 2, &res));
    divvy_close(h);
    CHECK(harness_get_stat(c, "redis_refill_hints", &hints));
    CHECK(harness_get_stat(c, "redis_refill_hints_dropped", &dropped));
    CHECK(harness_get_stat(c, "redis_lease_fetches", &fetches_before));
    print_message("REFILL: %lld hints, %lld dropped, %lld lease fetches\n", hints, dropped,
                  fetches_before);
    /* The six above were all dropped; the client's own hints started refills. */
    assert_true(dropped >= 6);
    assert_true(hints > dropped);
    /* A hint for a lease that is not low is dropped and fetches nothing. */
    CHECK(harness_sendf(c, "REFILL rule=api index=0 actor=nobody\nPING\n"));
    assert_true(harness_recv_line(c, reply, sizeof(reply), 5000) > 0);
    assert_string_equal(reply, "OK pong");
    CHECK(harness_get_stat(c, "redis_lease_fetches", &fetches));
    assert_int_equal(fetches, fetches_before);
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

static long long stat_of(struct harness_conn *c, const char *name)
{
    long long v;

    CHECK(harness_get_stat(c, name, &v));
    return v;
}

/*
 * REFILL while Redis is down: divvyd claims the refill (the slot's FETCH
 * flag, table_lease_refill_claim()), cannot send the fetch with the breaker
 * open, and must release the claim (table_lease_abort()).  Still no reply.
 * A claim left behind would block every refill of the counter until its
 * window ends (an hour here): later hints dropped as "a fetch is under
 * way", and every hit the lease cannot cover taken one by one in Redis.
 * So: each hint during the outage starts no refill (counted as dropped,
 * docs/protocol.md) and gets no reply, and once Redis is back a hint fetches
 * a new lease at once (which a claim left behind would prevent) and hits are
 * decided in-process again, never more than the limit of the new window.
 */
static void test_lease_fast_refill_breaker_open(void **state)
{
    static const char hint[] = "REFILL rule=api index=0 actor=dave\n";
    struct divvy_kv kv[2] = { { "path", "/api" }, { "user", "dave" } };
    struct divvy_result res = { .size = sizeof(res) };
    struct harness_daemon *d;
    struct harness_conn *c;
    struct redis_srv *rs;
    struct divvy *h = NULL, *hf = NULL;
    long long hints, dropped, fetches, used;
    long fast = 0, fast_down = 0, allowed = 0, i;
    uint64_t end;
    char *conf;
    int r;

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "lease", "closed", 200, "lease_max = 40;", rules_text);
    assert_non_null(conf);
    /* One worker: "up" then means the Redis connection a REFILL uses is ready. */
    d = redis_divvyd(conf, 1);
    free(conf);
    wait_fast(d);
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    for (i = 0; i < 100; i++) {
        CHECK(divvy_hit(h, kv, 2, &res));
        assert_true(res.allowed);
        fast += res.fast_path;
    }
    assert_true(fast > 0);

    redis_kill(rs);
    redis_wait_state(c, "down");
    /* What is leased is still spent in-process (the client's own hints at
     * the low-water mark hit the open breaker); the first hit the lease
     * cannot cover goes to divvyd, whose fetch fails too: on_redis_error. */
    for (i = 0; i <= LEASE_MAX; i++) {
        CHECK(divvy_hit(h, kv, 2, &res));
        if (!res.fast_path)
            break;
        assert_true(res.allowed);
        fast_down++;
    }
    assert_true(i <= LEASE_MAX);
    assert_false(res.allowed);
    /* The lease is empty now, so below its low-water mark: each hint is claimed. */
    hints = stat_of(c, "redis_refill_hints");
    dropped = stat_of(c, "redis_refill_hints_dropped");
    fetches = stat_of(c, "redis_lease_fetches");
    for (i = 0; i < 5; i++)
        CHECK(harness_send(c, hint, sizeof(hint) - 1));
    assert_int_equal(harness_readable(c, 300), 0);
    EXPECT_REPLY(c, "PING", "OK pong");
    assert_true(harness_alive(d));
    assert_int_equal(stat_of(c, "redis_refill_hints"), hints + 5);
    /* Claimed, not sendable, released: each started no refill. */
    assert_int_equal(stat_of(c, "redis_refill_hints_dropped"), dropped + 5);
    assert_int_equal(stat_of(c, "redis_lease_fetches"), fetches);
    print_message("breaker open: %ld hits spent in-process, 5 REFILL unanswered\n", fast_down);

    CHECK(redis_restart(rs));
    redis_wait_state(c, "up");
    dropped = stat_of(c, "redis_refill_hints_dropped");
    fetches = stat_of(c, "redis_lease_fetches");
    CHECK(harness_send(c, hint, sizeof(hint) - 1));
    EXPECT_REPLY(c, "PING", "OK pong");
    assert_int_equal(stat_of(c, "redis_lease_fetches"), fetches + 1);
    assert_int_equal(stat_of(c, "redis_refill_hints_dropped"), dropped);
    /* Redis came back empty: that fetch started a new window and leased
     * lease_max of it; once the grant lands, a client that may only decide
     * in-process (and asks divvyd nothing) is allowed again. */
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &hf));
    end = harness_now_ms() + 5000;
    while ((r = divvy_hit(hf, kv, 2, &res)) == -ENOTSUP && harness_now_ms() < end)
        harness_pause_ms(5);
    if (r < 0)
        fail_msg("no lease in-process after the REFILL: %s", divvy_errmsg(hf));
    assert_true(res.allowed);
    assert_int_equal(res.fast_path, 1);
    assert_int_equal(redis_int(rs, "GET %s", "divvy:{api:dave}"), LEASE_MAX);
    divvy_close(hf);
    /* The new window spent to the end: in-process beyond any one lease, never
     * over the limit, at most lease_max stranded. */
    allowed = 1;
    fast = 1;
    for (i = 0; i < LIMIT + 100; i++) {
        CHECK(divvy_hit(h, kv, 2, &res));
        allowed += res.allowed;
        fast += res.fast_path && res.allowed;
    }
    used = redis_int(rs, "GET %s", "divvy:{api:dave}");
    print_message("Redis back: %ld of %d hits allowed, %ld in-process; Redis used %lld\n",
                  allowed, LIMIT + 101, fast, used);
    assert_true(used <= LIMIT);
    assert_true(allowed <= used);
    assert_true(allowed >= LIMIT - LEASE_MAX);
    assert_true(fast > LEASE_MAX);
    divvy_close(h);
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lease_fast_two_hosts, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_lease_fast_three_hosts, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_strict_lib_three_hosts, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_lease_fast_peek_goes_to_divvyd, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_lease_fast_refill_verb, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_lease_fast_refill_breaker_open, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_lease_fast", tests, NULL, NULL);
}
