/* SPDX-License-Identifier: MIT */
/*
 * test_resp_adhoc_store: where RESP's ad-hoc buckets live and what clock
 * they keep (docs/resp.md "Ad-hoc buckets", docs/redis.md "Keys"), through
 * hiredis on divvyd's RESP Unix socket:
 *   - without Redis, a bucket survives a restart of divvyd (RL.GET reads 1
 *     before and 1 after, and a CL.THROTTLE key keeps its TAT), and a
 *     kill -9 keeps it as of the last periodic save;
 *   - with Redis, two divvyds share every bucket (RL.* and CL.THROTTLE),
 *     kept under <prefix>divvy:adhoc:{name}:...; redis-cell's README
 *     transcript still holds; the hits show in the metrics;
 *   - one Unix clock: a plain call after `AT <now>` refills, the ms forms
 *     take a real Unix time in ms, an AT far ahead is refused and cannot
 *     freeze another client's bucket (with and without Redis);
 *   - Redis killed: on_redis_error local (this host's own bucket), open (a
 *     full bucket) and closed (an empty one), counted as fallbacks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "harness_redis.h"

#define RULES "{ default = true; credit_limit = 5; reset_seconds = 60; }"
#define WAIT_MS 5000

static long long unix_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* divvyd with a RESP listener and @conf (NULL: no Redis at all). */
static struct harness_daemon *start(const char *conf)
{
    struct harness_opts o = { .resp = true, .workers = 2 };
    struct harness_daemon *d = NULL;

    o.config_text = conf ? conf : "rules = ( " RULES " );\n";
    CHECK(harness_start(&o, &d));
    return d;
}

static redisContext *resp(const struct harness_daemon *d)
{
    struct timeval tv = { HARNESS_TIMEOUT_MS / 1000, 0 };
    redisContext *ctx = redisConnectUnixWithTimeout(d->resp_sock, tv);

    if (!ctx || ctx->err)
        fail_msg("cannot connect to %s: %s", d->resp_sock, ctx ? ctx->errstr : "no memory");
    redisSetTimeout(ctx, tv);
    return ctx;
}

/* The integer reply of @cmd; fails the test on anything else. */
static long long rint_(redisContext *ctx, const char *cmd)
{
    redisReply *r = redisCommand(ctx, cmd);
    long long v;

    if (!r)
        fail_msg("%s: %s", cmd, ctx->errstr);
    if (r->type != REDIS_REPLY_INTEGER)
        fail_msg("%s: not an integer: %s", cmd, r->type == REDIS_REPLY_ERROR ? r->str : "?");
    v = r->integer;
    freeReplyObject(r);
    return v;
}

/* The error reply of @cmd into @buf (fails the test when it is not one). */
static void rerr(redisContext *ctx, const char *cmd, char *buf, size_t size)
{
    redisReply *r = redisCommand(ctx, cmd);

    if (!r)
        fail_msg("%s: %s", cmd, ctx->errstr);
    if (r->type != REDIS_REPLY_ERROR)
        fail_msg("%s: not an error (type %d, %lld)", cmd, r->type, r->integer);
    snprintf(buf, size, "%s", r->str);
    freeReplyObject(r);
}

/* CL.THROTTLE's five integers into @v. */
static void throttle(redisContext *ctx, const char *cmd, long long v[5])
{
    redisReply *r = redisCommand(ctx, cmd);

    if (!r)
        fail_msg("%s: %s", cmd, ctx->errstr);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 5)
        fail_msg("%s: not an array of 5: %s", cmd, r->type == REDIS_REPLY_ERROR ? r->str : "?");
    for (int i = 0; i < 5; i++)
        v[i] = r->element[i]->integer;
    freeReplyObject(r);
}

/* Polls @cmd until it answers @want, for at most WAIT_MS: a refill is
 * waited for, never slept on. */
static void wait_int(redisContext *ctx, const char *cmd, long long want)
{
    uint64_t until = harness_now_ms() + WAIT_MS;
    long long got;

    while ((got = rint_(ctx, cmd)) != want && harness_now_ms() < until)
        harness_pause_ms(20);
    if (got != want)
        fail_msg("%s answered %lld for %d ms, never %lld", cmd, got, WAIT_MS, want);
}

static char *conf_redis(const struct redis_srv *rs, const char *mode, const char *on_error,
                        const char *extra)
{
    char *text = redis_config(rs, mode, on_error, 200, extra, RULES);

    assert_non_null(text);
    return text;
}

/* conf_redis() with a metrics endpoint on @port. */
static char *conf_metrics(const struct redis_srv *rs, const char *on_error, int port)
{
    char *inner = conf_redis(rs, "strict", on_error, NULL), *text;

    if (asprintf(&text, "metrics = { listen = \"tcp:127.0.0.1:%d\"; };\n%s", port, inner) < 0)
        fail();
    free(inner);
    return text;
}

/* ---- durable without Redis ---------------------------------------------------------------- */

static void test_resp_adhoc_store_restart_keeps_buckets(void **state)
{
    struct harness_daemon *d = start(NULL);
    redisContext *ctx = resp(d);
    long long v[5];

    (void)state;
    assert_int_equal(rint_(ctx, "RL.REDUCE kept 2 3600"), 2);
    assert_int_equal(rint_(ctx, "RL.GET kept 2 3600"), 1);
    throttle(ctx, "CL.THROTTLE cell 1 1 3600", v);
    assert_int_equal(v[2], 1);
    redisFree(ctx);
    CHECK(harness_stop(d, NULL));
    CHECK(harness_restart(d));
    ctx = resp(d);
    assert_int_equal(rint_(ctx, "RL.GET kept 2 3600"), 1);
    assert_int_equal(rint_(ctx, "RL.REDUCE kept 2 3600"), 1);
    assert_int_equal(rint_(ctx, "RL.REDUCE kept 2 3600"), 0);
    throttle(ctx, "CL.THROTTLE cell 1 1 3600", v);
    assert_int_equal(v[0], 0);
    assert_int_equal(v[2], 0);
    throttle(ctx, "CL.THROTTLE cell 1 1 3600", v);
    assert_int_equal(v[0], 1);
    redisFree(ctx);
    harness_free(d);
}

/* kill -9: the buckets as of the last periodic save (snapshot_interval_ms). */
static void test_resp_adhoc_store_crash_keeps_last_save(void **state)
{
    struct harness_daemon *d = start("table = { snapshot_interval_ms = 1000; };\n"
                                     "rules = ( " RULES " );\n");
    redisContext *ctx = resp(d);
    uint64_t until;
    char path[HARNESS_PATH + 32];
    struct stat sb = { 0 };

    (void)state;
    snprintf(path, sizeof(path), "%s/adhoc.buckets", d->state);
    assert_int_equal(rint_(ctx, "RL.REDUCE crash 3 3600 TAKE 2"), 3);
    /* A saved bucket is one record past the file's head: wait for it. */
    until = harness_now_ms() + WAIT_MS;
    while ((stat(path, &sb) < 0 || sb.st_size < 64) && harness_now_ms() < until)
        harness_pause_ms(20);
    assert_true(sb.st_size >= 64);
    redisFree(ctx);
    d->expect_exit = true;
    CHECK(harness_kill(d, SIGKILL));
    until = harness_now_ms() + HARNESS_STOP_MS;
    while (harness_alive(d) && harness_now_ms() < until)
        harness_pause_ms(2);
    assert_false(harness_alive(d));
    CHECK(harness_restart(d));
    ctx = resp(d);
    assert_int_equal(rint_(ctx, "RL.GET crash 3 3600"), 1);
    redisFree(ctx);
    harness_free(d);
}

/* ---- one Unix clock ----------------------------------------------------------------------- */

/* On @d: AT <now> (Unix seconds), then plain calls refill. */
static void check_at_now(struct harness_daemon *d)
{
    redisContext *a = resp(d);
    char cmd[256];

    /* AT is whole seconds: a refill time of 2 s leaves a second for the
     * plain call to find the bucket still empty. */
    snprintf(cmd, sizeof(cmd), "RL.REDUCE clock 1 2 AT %lld", unix_ms() / 1000);
    assert_int_equal(rint_(a, cmd), 1);
    assert_int_equal(rint_(a, "RL.REDUCE clock 1 2"), 0);
    wait_int(a, "RL.GET clock 1 2", 1);
    redisFree(a);
}

/* On @d: RL.PREDUCE takes a real Unix time in ms. */
static void check_at_ms(struct harness_daemon *d)
{
    redisContext *a = resp(d);
    char cmd[256];

    snprintf(cmd, sizeof(cmd), "RL.PREDUCE pclock 2 2000 AT %lld", unix_ms());
    assert_int_equal(rint_(a, cmd), 2);
    assert_int_equal(rint_(a, "RL.PREDUCE pclock 2 2000"), 1);
    wait_int(a, "RL.PGET pclock 2 2000", 2);
    redisFree(a);
}

/* On @d: an AT far ahead is refused, in both units, and leaves another
 * client's bucket refilling; one within the bound is taken. */
static void check_at_ahead(struct harness_daemon *d)
{
    redisContext *a = resp(d), *b = resp(d);
    char cmd[256], err[256];

    snprintf(cmd, sizeof(cmd), "RL.REDUCE shared 1 1 AT %lld", unix_ms() / 1000 + 86400);
    rerr(a, cmd, err, sizeof(err));
    if (!strstr(err, "AT is more than 60 seconds ahead"))
        fail_msg("%s: %s", cmd, err);
    snprintf(cmd, sizeof(cmd), "RL.PREDUCE shared 1 1000 AT %lld", unix_ms() + 86400000LL);
    rerr(a, cmd, err, sizeof(err));
    assert_int_equal(rint_(b, "RL.REDUCE shared 1 2"), 1);
    assert_int_equal(rint_(b, "RL.REDUCE shared 1 2"), 0);
    wait_int(b, "RL.GET shared 1 2", 1);
    snprintf(cmd, sizeof(cmd), "RL.PREDUCE soon 1 1000 AT %lld", unix_ms() + 30000);
    assert_int_equal(rint_(a, cmd), 1);
    redisFree(a);
    redisFree(b);
}

/* @check on a divvyd without Redis. */
static void on_local(void (*check)(struct harness_daemon *d))
{
    struct harness_daemon *d = start(NULL);

    check(d);
    harness_free(d);
}

static void test_resp_adhoc_store_at_now_refills(void **state)
{
    (void)state;
    on_local(check_at_now);
}

static void test_resp_adhoc_store_at_ms(void **state)
{
    (void)state;
    on_local(check_at_ms);
}

static void test_resp_adhoc_store_at_ahead(void **state)
{
    (void)state;
    on_local(check_at_ahead);
}

static void test_resp_adhoc_store_clock_redis(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    char *conf;

    (void)state;
    CHECK(redis_start(&rs));
    conf = conf_redis(rs, "strict", "closed", NULL);
    d = start(conf);
    free(conf);
    check_at_now(d);
    check_at_ms(d);
    check_at_ahead(d);
    /* In Redis, while it is not full (a full bucket is no key at all). */
    assert_int_equal(redis_int(rs, "EXISTS divvy:adhoc:{soon}:S:1:1:1000"), 1);
    harness_free(d);
}

/* ---- shared in Redis ---------------------------------------------------------------------- */

static void test_resp_adhoc_store_redis_shared(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d1, *d2;
    redisContext *c1, *c2;
    long long v[5];
    char *conf;

    (void)state;
    CHECK(redis_start(&rs));
    /* store.mode strict: the ad-hoc buckets follow the rules into Redis. */
    conf = conf_redis(rs, "strict", "local", "prefix = \"t:\";");
    d1 = start(conf);
    d2 = start(conf);
    free(conf);
    c1 = resp(d1);
    c2 = resp(d2);
    assert_int_equal(rint_(c1, "RL.REDUCE {a}:b 3 3600"), 3);
    assert_int_equal(rint_(c2, "RL.REDUCE {a}:b 3 3600"), 2);
    assert_int_equal(rint_(c1, "RL.GET {a}:b 3 3600"), 1);
    assert_int_equal(rint_(c2, "RL.REDUCE {a}:b 3 3600 TAKE 2"), 1);
    /* The name is the hash tag, escaped as rule keys' actors are. */
    assert_int_equal(redis_int(rs, "EXISTS t:divvy:adhoc:{%%7Ba%%7D%%3Ab}:S:3:3:3600000"), 1);

    /* redis-cell's README, across both divvyds. */
    throttle(c1, "CL.THROTTLE user123 15 30 60 1", v);
    assert_int_equal(v[0], 0);
    assert_int_equal(v[1], 16);
    assert_int_equal(v[2], 15);
    assert_int_equal(v[3], -1);
    assert_int_equal(v[4], 2);
    throttle(c2, "CL.THROTTLE user123 15 30 60 1", v);
    assert_int_equal(v[0], 0);
    assert_int_equal(v[2], 14);
    assert_in_range(v[4], 3, 4);       /* 4 s less the time between, truncated */
    throttle(c2, "CL.THROTTLE user123 15 30 60 20", v);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[2], 14);
    assert_int_equal(redis_int(rs, "EXISTS t:divvy:adhoc:{user123}:G:15:30:60"), 1);

    /* Durable: a restart of one changes nothing. */
    redisFree(c1);
    CHECK(harness_stop(d1, NULL));
    CHECK(harness_restart(d1));
    c1 = resp(d1);
    assert_int_equal(rint_(c1, "RL.GET {a}:b 3 3600"), 1);
    redisFree(c1);
    redisFree(c2);
    harness_free(d1);
    harness_free(d2);
}

/* store.adhoc says where they live, whatever the rules' store. */
static void test_resp_adhoc_store_setting(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    redisContext *c;
    char *conf;

    (void)state;
    CHECK(redis_start(&rs));
    conf = conf_redis(rs, "local", "closed", "adhoc = \"redis\";");
    d = start(conf);
    free(conf);
    c = resp(d);
    assert_int_equal(rint_(c, "RL.REDUCE inredis 2 60"), 2);
    assert_int_equal(redis_int(rs, "EXISTS divvy:adhoc:{inredis}:S:2:2:60000"), 1);
    redisFree(c);
    harness_free(d);
    conf = conf_redis(rs, "strict", "closed", "adhoc = \"local\";");
    d = start(conf);
    free(conf);
    c = resp(d);
    assert_int_equal(rint_(c, "RL.REDUCE athome 2 60"), 2);
    assert_int_equal(rint_(c, "RL.REDUCE athome 2 60"), 1);
    assert_int_equal(redis_int(rs, "EXISTS divvy:adhoc:{athome}:S:2:2:60000"), 0);
    redisFree(c);
    harness_free(d);
}

/* The metrics count ad-hoc hits, wherever the bucket lives. */
static void test_resp_adhoc_store_metrics(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    redisContext *c;
    char buf[65536], *conf;
    int mport = harness_free_port(SOCK_STREAM);
    long long v[5];

    (void)state;
    CHECK(redis_start(&rs));
    conf = conf_metrics(rs, "local", mport);
    d = start(conf);
    free(conf);
    c = resp(d);
    assert_int_equal(rint_(c, "RL.REDUCE m 1 3600"), 1);
    assert_int_equal(rint_(c, "RL.REDUCE m 1 3600"), 0);
    assert_int_equal(rint_(c, "RL.GET m 1 3600"), 0);
    throttle(c, "CL.THROTTLE mc 0 1 3600", v);
    assert_int_equal(v[0], 0);
    /* The gauges are read once a second: wait for the last call's. */
    harness_scrape_until(mport, "/metrics",
                         "divvy_adhoc_hits_total{command=\"CL.THROTTLE\",status=\"allowed\"} 1",
                         buf, sizeof(buf));
    if (!strstr(buf, "divvy_adhoc_hits_total{command=\"RL.REDUCE\",status=\"limited\"} 1\n") ||
        !strstr(buf, "divvy_adhoc_hits_total{command=\"RL.REDUCE\",status=\"allowed\"} 1\n") ||
        !strstr(buf, "divvy_adhoc_redis_fallbacks_total 0\n"))
        fail_msg("metrics:\n%s", buf);
    redisFree(c);
    harness_free(d);
}

/* ---- Redis down --------------------------------------------------------------------------- */

/* Redis killed under @policy: RL.REDUCE on a bucket Redis held at 1 of 2
 * answers @first then @second; CL.THROTTLE answers limited @limited. */
static void check_down(const char *policy, long long first, long long second, int limited)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    redisContext *c;
    char buf[65536], want[128], *conf;
    int mport = harness_free_port(SOCK_STREAM);
    long long v[5];

    CHECK(redis_start(&rs));
    conf = conf_metrics(rs, policy, mport);
    d = start(conf);
    free(conf);
    c = resp(d);
    assert_int_equal(rint_(c, "RL.REDUCE down 2 3600"), 2);
    assert_int_equal(redis_int(rs, "EXISTS divvy:adhoc:{down}:S:2:2:3600000"), 1);
    redis_kill(rs);
    assert_int_equal(rint_(c, "RL.REDUCE down 2 3600"), first);
    assert_int_equal(rint_(c, "RL.REDUCE down 2 3600"), second);
    throttle(c, "CL.THROTTLE downc 5 1 60", v);
    assert_int_equal(v[0], limited);
    snprintf(want, sizeof(want), "divvy_adhoc_redis_fallbacks_total 3");
    harness_scrape_until(mport, "/metrics", want, buf, sizeof(buf));
    redisFree(c);
    harness_free(d);
}

static void test_resp_adhoc_store_down_local(void **state)
{
    (void)state;
    /* This host's own bucket: it starts full. */
    check_down("local", 2, 1, 0);
}

static void test_resp_adhoc_store_down_open(void **state)
{
    (void)state;
    check_down("open", 2, 2, 0);
}

static void test_resp_adhoc_store_down_closed(void **state)
{
    (void)state;
    check_down("closed", 0, 0, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resp_adhoc_store_restart_keeps_buckets,
                                        harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_store_crash_keeps_last_save,
                                        harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_store_at_now_refills, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_store_at_ms, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_store_at_ahead, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_store_clock_redis, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_store_redis_shared, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_store_setting, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_store_metrics, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_store_down_local, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_store_down_open, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_store_down_closed, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("resp_adhoc_store", tests, NULL, NULL);
}
