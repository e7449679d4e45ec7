/* SPDX-License-Identifier: MIT */
/*
 * Fault injection: Redis killed and restarted, or paused (SIGSTOP) and
 * resumed, under load from several client processes, in each store mode
 * and each on_redis_error policy (docs/redis.md section 7).  test_redis_fail
 * covers strict mode killed under every policy and strict + local paused;
 * this file covers the rest: lease mode killed and paused under local, open
 * and closed, and strict mode paused under open and closed.
 *
 * Each case checks the documented outcome: while the breaker is open a
 * counter with no lease is answered by the policy (local: this host's own
 * counter; open: allowed, credit = limit, reset 0; closed: denied, 0, 0),
 * while lease hits keep spending credit already leased whatever the policy;
 * one breaker trip per outage, logged when it opens and when it closes; and
 * Redis decides again once it is back.  No request, and no pipelined batch
 * of the load, takes longer than 5 x redis.timeout_ms.
 */
#include <stdatomic.h>
#include <sys/mman.h>

#include "harness_redis.h"

#define TIMEOUT_MS  200
#define BOUND_MS    (5 * TIMEOUT_MS)
#define LOAD_PROCS  2
#define LOAD_DEPTH  4

static const char rules_text[] =
    "{ match = { path = \"/login\"; }; label = \"login\"; actor = \"user\";\n"
    "  credit_limit = 3; reset_seconds = 3600; },\n"
    "{ match = { path = \"/api\"; }; label = \"api\"; actor = \"user\";\n"
    "  credit_limit = 1000000; reset_seconds = 3600; },\n"
    "{ default = true; credit_limit = 0; reset_seconds = 0; }";

enum fault { FAULT_KILL, FAULT_PAUSE };

/* ---- load in client processes -------------------------------------------------------- */

struct load_shared {
    atomic_int stop;
    struct {
        long batches, allowed, denied, other;
        uint64_t slowest_ms;
        int err;
        char first_other[160];
    } p[LOAD_PROCS];
};

struct load_arg {
    struct harness_daemon *d;
    struct load_shared *sh;
    int id;
};

static int load_proc(void *arg)
{
    struct load_arg *a = arg;
    struct harness_conn *c = NULL;
    char batch[LOAD_DEPTH * 48], line[HARNESS_LINE];
    unsigned long n = 0;
    size_t len = 0;
    int r;

    r = harness_connect(a->d, a->id % 2 ? HARNESS_TCP : HARNESS_UNIX, &c);
    while (r >= 0 && !atomic_load(&a->sh->stop)) {
        uint64_t t0 = harness_now_ms(), dt;

        /* A new actor every 10,000 batches: /api's limit (1,000,000) is never
         * reached however long a phase runs on a fast machine. */
        if (n++ % 10000 == 0) {
            len = 0;
            for (int i = 0; i < LOAD_DEPTH; i++)
                len += (size_t)sprintf(batch + len, "HIT path=/api user=load-%d-%lu\n", a->id,
                                       n / 10000);
        }

        r = harness_send(c, batch, len);
        for (int i = 0; r >= 0 && i < LOAD_DEPTH; i++) {
            r = (int)harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS);
            if (r < 0)
                break;
            if (strncmp(line, "OK true ", 8) == 0) {
                a->sh->p[a->id].allowed++;
            } else if (strncmp(line, "OK false ", 9) == 0) {
                a->sh->p[a->id].denied++;
            } else if (a->sh->p[a->id].other++ == 0) {
                snprintf(a->sh->p[a->id].first_other, sizeof(a->sh->p[0].first_other), "%.150s",
                         line);
            }
        }
        dt = harness_now_ms() - t0;
        if (dt > a->sh->p[a->id].slowest_ms)
            a->sh->p[a->id].slowest_ms = dt;
        a->sh->p[a->id].batches++;
    }
    if (r < 0)
        a->sh->p[a->id].err = r;
    harness_close(c);
    return 0;
}

/* ---- probes ------------------------------------------------------------------------ */

/* Sends @req; checks the verdict and credit (and reset 0 when @zero_reset);
 * fails past BOUND_MS.  Returns the time taken. */
static uint64_t probe(struct harness_conn *c, const char *req, bool allowed, long long credit,
                      bool zero_reset)
{
    uint64_t t0 = harness_now_ms(), dt;
    char r[HARNESS_LINE];
    bool a;
    long long cr, secs;

    CHECK(harness_cmd(c, req, r, sizeof(r)));
    dt = harness_now_ms() - t0;
    if (harness_parse_ok(r, &a, &cr, &secs) < 0 || a != allowed || cr != credit ||
        (zero_reset && secs != 0) || (!zero_reset && allowed && secs < 3500))
        fail_msg("%s -> \"%s\", want OK %s %lld%s", req, r, allowed ? "true" : "false", credit,
                 zero_reset ? " 0" : "");
    if (dt > BOUND_MS)
        fail_msg("%s took %llu ms (bound %d ms)", req, (unsigned long long)dt, BOUND_MS);
    return dt;
}

static long long stat_of(struct harness_conn *c, const char *name)
{
    long long v;

    CHECK(harness_get_stat(c, name, &v));
    return v;
}

/* What a counter with no lease (and, for local, no local count yet) answers
 * while the breaker is open: three hits on a limit of 3, and a fourth. */
static void expect_policy(struct harness_conn *c, const char *policy, const char *user)
{
    char req[96];

    snprintf(req, sizeof(req), "HIT path=/login user=%s", user);
    for (int i = 0; i < 4; i++) {
        if (strcmp(policy, "local") == 0)
            probe(c, req, i < 3, i < 3 ? 2 - i : 0, false);
        else if (strcmp(policy, "open") == 0)
            probe(c, req, true, 3, true);
        else
            probe(c, req, false, 0, true);
    }
}

static void outage(const char *mode, const char *policy, enum fault fault)
{
    struct redis_srv *rs = NULL;
    struct harness_daemon *d;
    struct harness_conn *c;
    struct load_shared *sh;
    struct load_arg args[LOAD_PROCS];
    pid_t pids[LOAD_PROCS];
    char *conf;
    uint64_t first_ms;
    long long fallbacks;
    int status;
    bool lease = strcmp(mode, "lease") == 0;
    bool is_local = strcmp(policy, "local") == 0, is_open = strcmp(policy, "open") == 0;
    bool is_closed = strcmp(policy, "closed") == 0;

    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    CHECK(redis_start(&rs));
    conf = redis_config(rs, mode, policy, TIMEOUT_MS, NULL, rules_text);
    assert_non_null(conf);
    d = redis_divvyd(conf, 2);
    free(conf);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));

    /* Redis decides: a fresh login counter, and a big lease on /api. */
    probe(c, "HIT path=/login user=before", true, 2, false);
    probe(c, "HIT path=/api user=holder", true, 999999, false);
    redis_wait_state(c, "up");
    for (int i = 0; i < LOAD_PROCS; i++) {
        args[i] = (struct load_arg){ .d = d, .sh = sh, .id = i };
        CHECK(harness_spawn(load_proc, &args[i], &pids[i]));
    }
    harness_pause_ms(100);              /* pacing: the load is under way */

    if (fault == FAULT_KILL)
        redis_kill(rs);
    else
        redis_pause(rs, true);
    /* The first hit that needs Redis fails (refused at once, or after the
     * timeout), opens the breaker and is answered by the policy. */
    first_ms = probe(c, "HIT path=/login user=first", !is_closed,
                     is_open ? 3 : is_local ? 2 : 0, !is_local);
    redis_wait_state(c, "down");
    /* The breaker is open: policy answers, none waits. */
    expect_policy(c, policy, "during");
    if (lease) {
        /* Credit leased before the outage is spent whatever the policy. */
        for (int i = 0; i < 5; i++)
            assert_true(probe(c, "HIT path=/api user=holder", true, 999998 - i, false) <
                        TIMEOUT_MS);
    } else {
        /* strict: /api is answered by the policy like /login. */
        probe(c, "HIT path=/api user=holder", !is_closed,
              is_open ? 1000000 : is_local ? 999999 : 0, !is_local);
    }
    harness_pause_ms(300);              /* pacing: the outage lasts under load */

    if (fault == FAULT_KILL)
        CHECK(redis_restart(rs));
    else
        redis_pause(rs, false);
    redis_wait_state(c, "up");
    /* Redis decides again.  strict: after a restart Redis is empty (a fresh
     * window: credit 2), after a pause it still counts the hit made before
     * (credit 1).  lease: the host still holds the credit its background
     * refill leased before the outage (1 left of the 3, remain 1), and
     * spends it until that window ends, whatever happened to Redis. */
    probe(c, "HIT path=/login user=after", true, 2, false);
    probe(c, "HIT path=/login user=before", true, !lease && fault == FAULT_KILL ? 2 : 1, false);

    atomic_store(&sh->stop, 1);
    for (int i = 0; i < LOAD_PROCS; i++) {
        CHECK(harness_reap(pids[i], 20000, &status));
        assert_int_equal(status, 0);
    }
    for (int i = 0; i < LOAD_PROCS; i++) {
        if (sh->p[i].err < 0)
            fail_msg("load %d: %s", i, strerror(-sh->p[i].err));
        if (sh->p[i].other)
            fail_msg("load %d: %ld replies that are not OK, first: %s", i, sh->p[i].other,
                     sh->p[i].first_other);
        if (sh->p[i].slowest_ms > BOUND_MS)
            fail_msg("load %d: a batch of %d took %llu ms (bound %d ms)", i, LOAD_DEPTH,
                     (unsigned long long)sh->p[i].slowest_ms, BOUND_MS);
        /* Only closed may deny /api (its limit is never reached here). */
        if (!is_closed)
            assert_int_equal(sh->p[i].denied, 0);
        assert_true(sh->p[i].batches > 10);
    }
    fallbacks = stat_of(c, "redis_fallbacks");
    print_message("%s/%s/%s: first failing hit %llu ms; load %ld+%ld batches (%ld+%ld denied), "
                  "slowest %llu/%llu ms (bound %d); %lld fallbacks\n",
                  mode, policy, fault == FAULT_KILL ? "killed" : "paused",
                  (unsigned long long)first_ms, sh->p[0].batches, sh->p[1].batches,
                  sh->p[0].denied, sh->p[1].denied, (unsigned long long)sh->p[0].slowest_ms,
                  (unsigned long long)sh->p[1].slowest_ms, BOUND_MS, fallbacks);
    /* One outage: one trip, logged once each way. */
    assert_int_equal(stat_of(c, "redis_breaker_trips"), 1);
    assert_true(fallbacks >= 5);
    assert_int_equal(harness_log_contains(d, "breaker open"), 1);
    assert_int_equal(harness_log_contains(d, "breaker closed"), 1);
    if (fault == FAULT_PAUSE)
        assert_true(stat_of(c, "redis_timeouts") >= 1);
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
    munmap(sh, sizeof(*sh));
}

static void test_fault_redis_lease_killed_local(void **state)
{
    (void)state;
    outage("lease", "local", FAULT_KILL);
}

static void test_fault_redis_lease_killed_open(void **state)
{
    (void)state;
    outage("lease", "open", FAULT_KILL);
}

static void test_fault_redis_lease_killed_closed(void **state)
{
    (void)state;
    outage("lease", "closed", FAULT_KILL);
}

static void test_fault_redis_lease_paused_local(void **state)
{
    (void)state;
    outage("lease", "local", FAULT_PAUSE);
}

static void test_fault_redis_lease_paused_open(void **state)
{
    (void)state;
    outage("lease", "open", FAULT_PAUSE);
}

static void test_fault_redis_lease_paused_closed(void **state)
{
    (void)state;
    outage("lease", "closed", FAULT_PAUSE);
}

static void test_fault_redis_strict_paused_open(void **state)
{
    (void)state;
    outage("strict", "open", FAULT_PAUSE);
}

static void test_fault_redis_strict_paused_closed(void **state)
{
    (void)state;
    outage("strict", "closed", FAULT_PAUSE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fault_redis_lease_killed_local, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_fault_redis_lease_killed_open, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_fault_redis_lease_killed_closed, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_fault_redis_lease_paused_local, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_fault_redis_lease_paused_open, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_fault_redis_lease_paused_closed, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_fault_redis_strict_paused_open, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_fault_redis_strict_paused_closed, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("fault_redis", tests, NULL, NULL);
}
