/* SPDX-License-Identifier: MIT */
/*
 * Integration: hot keys in strict mode (docs/redis.md "Hot keys").  One
 * counter hit by many concurrent clients (8 connections, 32 requests in
 * flight on each, raw sockets) is decided by far fewer scripts than hits
 * (Redis's own INFO commandstats, and divvyd's STATS redis_scripts), and
 * stays exact: exactly credit_limit allowed.  Mixed requests (TAKE n, PEEK,
 * DEBIT, RESET) pipelined on one key get the verdicts they get one by one,
 * on each algorithm strict supports; a continue chain of two strict rules on hot
 * keys charges the second only for what the first allowed; and when Redis
 * stops answering, every request of a batch gets on_redis_error within
 * timeout_ms.
 */
#include <errno.h>
#include <pthread.h>

#include "harness_redis.h"

#define CONNS       8
#define DEPTH       32
#define ROUNDS      10
#define LIMIT       1000
#define TIMEOUT_MS  300

/* Redis's count of EVALSHA calls so far (INFO commandstats). */
static long long evalsha_calls(const struct redis_srv *rs)
{
    redisContext *c = redis_cli(rs);
    redisReply *rep;
    long long n = 0;
    const char *p;

    assert_non_null(c);
    rep = redisCommand(c, "INFO commandstats");
    assert_true(rep && rep->type == REDIS_REPLY_STRING);
    p = strstr(rep->str, "cmdstat_evalsha:calls=");
    if (p)
        n = atoll(p + strlen("cmdstat_evalsha:calls="));
    freeReplyObject(rep);
    redisFree(c);
    return n;
}

/* One connection writing @rounds batches of DEPTH copies of @req, each in
 * one write, and reading each batch's replies before the next. */
struct client {
    struct harness_daemon *d;
    const char *req;
    unsigned rounds;
    unsigned allowed, denied, other;
    int err;
};

static void *client_run(void *arg)
{
    struct client *cl = arg;
    struct harness_conn *c = NULL;
    char line[HARNESS_LINE], batch[DEPTH * 64];
    size_t len = strlen(cl->req), blen = 0;
    int r;

    if (len + 1 > sizeof(batch) / DEPTH) {
        cl->err = -EMSGSIZE;
        return NULL;
    }
    for (unsigned i = 0; i < DEPTH; i++) {
        memcpy(batch + blen, cl->req, len);
        batch[blen + len] = '\n';
        blen += len + 1;
    }
    r = harness_connect(cl->d, HARNESS_UNIX, &c);
    for (unsigned k = 0; r >= 0 && k < cl->rounds; k++) {
        r = harness_send(c, batch, blen);
        for (unsigned i = 0; r >= 0 && i < DEPTH; i++) {
            r = (int)harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS);
            if (r < 0)
                break;
            if (strncmp(line, "OK true ", 8) == 0)
                cl->allowed++;
            else if (strncmp(line, "OK false ", 9) == 0)
                cl->denied++;
            else
                cl->other++;
        }
    }
    if (r < 0)
        cl->err = r;
    harness_close(c);
    return NULL;
}

/* CONNS clients of @req at once, ROUNDS batches each, on @d (using @rs):
 * the totals, and the scripts Redis ran meanwhile. */
static long long load(struct redis_srv *rs, struct harness_daemon *d, const char *req,
                      struct client *ret)
{
    struct client cl[CONNS];
    pthread_t t[CONNS];
    long long calls = evalsha_calls(rs);

    memset(ret, 0, sizeof(*ret));
    for (unsigned i = 0; i < CONNS; i++) {
        cl[i] = (struct client){ .d = d, .req = req, .rounds = ROUNDS };
        assert_int_equal(pthread_create(&t[i], NULL, client_run, &cl[i]), 0);
    }
    for (unsigned i = 0; i < CONNS; i++)
        pthread_join(t[i], NULL);
    for (unsigned i = 0; i < CONNS; i++) {
        if (cl[i].err < 0)
            fail_msg("client %u: %s", i, strerror(-cl[i].err));
        ret->allowed += cl[i].allowed;
        ret->denied += cl[i].denied;
        ret->other += cl[i].other;
    }
    assert_int_equal(ret->other, 0);
    return evalsha_calls(rs) - calls;
}

static struct harness_daemon *start(struct redis_srv *rs, const char *on_error,
                                    const char *rules)
{
    char *conf = redis_config(rs, "strict", on_error, TIMEOUT_MS, NULL, rules);
    struct harness_daemon *d;

    assert_non_null(conf);
    d = redis_divvyd(conf, 2);
    free(conf);
    return d;
}

/* 2560 hits on one counter of limit 1000: exactly 1000 allowed, from at
 * least 5 hits per script. */
static void test_redis_hot_exact(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    struct client sum;
    long long calls, scripts, requests;
    const unsigned hits = CONNS * DEPTH * ROUNDS;

    (void)state;
    CHECK(redis_start(&rs));
    d = start(rs, "closed",
              "{ match = { path = \"/api\"; }; label = \"hot\"; actor = \"user\";\n"
              "  credit_limit = 1000; reset_seconds = 3600; },\n"
              "{ default = true; credit_limit = 0; reset_seconds = 0; }");
    calls = load(rs, d, "HIT path=/api user=hot", &sum);
    assert_int_equal(sum.allowed, LIMIT);
    assert_int_equal(sum.denied, hits - LIMIT);
    /* Redis's count of what it was charged, and of the scripts it ran. */
    assert_int_equal(redis_int(rs, "GET %s", "divvy:{hot:hot}"), LIMIT);
    if (calls * 5 > (long long)hits)
        fail_msg("%lld scripts for %u hits on one key: %.2f hits per script, want >= 5",
                 calls, hits, (double)hits / (double)(calls ? calls : 1));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_get_stat(c, "redis_scripts", &scripts));
    CHECK(harness_get_stat(c, "redis_script_requests", &requests));
    assert_int_equal(scripts, calls);
    assert_int_equal(requests, hits);
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

/* The requests of one pipelined write on one key, and the same one by one. */
static const char *const mixed[] = {
    "TAKE 4 path=/m user=%s", "TAKE 4 path=/m user=%s", "TAKE 4 path=/m user=%s",
    "PEEK path=/m user=%s",   "TAKE 1 path=/m user=%s", "TAKE 2 path=/m user=%s",
    "TAKE 1 path=/m user=%s", "PEEK path=/m user=%s",   "DEBIT 3 path=/m user=%s",
    "TAKE 1 path=/m user=%s", "PEEK path=/m user=%s",   "RESET path=/m user=%s",
    "TAKE 4 path=/m user=%s", "PEEK path=/m user=%s",
};
#define N_MIXED (sizeof(mixed) / sizeof(mixed[0]))

/* Runs mixed[] for user @pipelined in one write, then for @serial one
 * request at a time, on a fresh daemon with rule @rule: the same replies,
 * and the pipelined ones from fewer scripts than requests. */
static void mixed_serial(const char *rule)
{
    char rules[1024], req[128], batch[N_MIXED * 64], pipe_rep[N_MIXED][HARNESS_LINE];
    char one[HARNESS_LINE];
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    long long calls;
    size_t blen = 0;
    bool allowed;
    long long credit, secs;

    CHECK(redis_start(&rs));
    snprintf(rules, sizeof(rules),
             "{ match = { path = \"/m\"; }; actor = \"user\"; %s },\n"
             "{ default = true; credit_limit = 0; reset_seconds = 0; }", rule);
    d = start(rs, "closed", rules);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    for (size_t i = 0; i < N_MIXED; i++) {
        blen += (size_t)snprintf(batch + blen, sizeof(batch) - blen, mixed[i], "p");
        batch[blen++] = '\n';
    }
    calls = evalsha_calls(rs);
    CHECK(harness_send(c, batch, blen));
    for (size_t i = 0; i < N_MIXED; i++)
        CHECK(harness_recv_line(c, pipe_rep[i], sizeof(pipe_rep[i]), HARNESS_TIMEOUT_MS));
    calls = evalsha_calls(rs) - calls;
    /* The first goes alone, those up to the RESET wait for it and go as
     * one before its DEL, the two after it as one more: 3 scripts for the
     * 13 requests that run one (4 allows for a read split in two). */
    if (calls > 4)
        fail_msg("%s: %lld scripts for %zu pipelined requests on one key", rule, calls,
                 N_MIXED - 1);
    for (size_t i = 0; i < N_MIXED; i++) {
        snprintf(req, sizeof(req), mixed[i], "s");
        CHECK(harness_cmd(c, req, one, sizeof(one)));
        if (!harness_same_reply(pipe_rep[i], one))
            fail_msg("%s: request %zu (%s): pipelined \"%s\", one by one \"%s\"", rule, i,
                     req, pipe_rep[i], one);
    }
    /* Not vacuous: the third TAKE 4 is denied, the TAKE 1 after it fits,
     * after the DEBIT nothing is left, and the hits before the RESET are
     * charged before it (the TAKE 4 after it leaves 6). */
    CHECK(harness_parse_ok_rule(pipe_rep[2], &allowed, &credit, &secs, one, sizeof(one)));
    assert_false(allowed);
    CHECK(harness_parse_ok_rule(pipe_rep[4], &allowed, &credit, &secs, one, sizeof(one)));
    assert_true(allowed);
    CHECK(harness_parse_ok_rule(pipe_rep[9], &allowed, &credit, &secs, one, sizeof(one)));
    assert_false(allowed);
    CHECK(harness_parse_ok_rule(pipe_rep[12], &allowed, &credit, &secs, one, sizeof(one)));
    assert_true(allowed);
    assert_int_equal(credit, 6);
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

static void test_redis_hot_mixed_serial(void **state)
{
    (void)state;
    mixed_serial("credit_limit = 10; reset_seconds = 3600;");
    mixed_serial("algorithm = \"token_bucket\"; credit_limit = 10; refill_seconds = 3600; "
                 "strict = true;");
    mixed_serial("algorithm = \"sliding_window\"; credit_limit = 10; reset_seconds = 3600;");
}

/* A continue rule and a stop rule, both strict, both keys hot: the stop
 * rule is charged only for what the continue rule allowed. */
static void test_redis_hot_chain(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct client sum;
    long long calls;
    const unsigned hits = CONNS * DEPTH * ROUNDS;

    (void)state;
    CHECK(redis_start(&rs));
    d = start(rs, "closed",
              "{ match = { path = \"/c\"; }; label = \"user\"; actor = \"user\";\n"
              "  credit_limit = 300; reset_seconds = 3600; match_policy = \"continue\"; },\n"
              "{ match = { path = \"/c\"; }; label = \"all\"; actor = \"path\";\n"
              "  credit_limit = 100000; reset_seconds = 3600; },\n"
              "{ default = true; credit_limit = 0; reset_seconds = 0; }");
    calls = load(rs, d, "HIT path=/c user=hot", &sum);
    assert_int_equal(sum.allowed, 300);
    assert_int_equal(redis_int(rs, "GET %s", "divvy:{user:hot}"), 300);
    assert_int_equal(redis_int(rs, "GET %s", "divvy:{all:/c}"), 300);
    /* Both rules' scripts: every hit crosses the first, 300 the second. */
    if (calls * 5 > (long long)(hits + 300))
        fail_msg("%lld scripts for %u rule steps on two keys", calls, hits + 300);
    harness_free(d);
    redis_stop(rs);
}

/* Redis stops answering under a batch: every request of it gets the policy
 * (closed: denied), none waits much past timeout_ms. */
static void test_redis_hot_failure(void **state)
{
    char batch[DEPTH * 64], line[HARNESS_LINE];
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    size_t blen = 0;
    uint64_t t0, waited;

    (void)state;
    CHECK(redis_start(&rs));
    d = start(rs, "closed",
              "{ match = { path = \"/f\"; }; actor = \"user\";\n"
              "  credit_limit = 1000; reset_seconds = 3600; },\n"
              "{ default = true; credit_limit = 0; reset_seconds = 0; }");
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/f user=hot", true, 999, 3599, 3600);
    for (unsigned i = 0; i < DEPTH; i++)
        blen += (size_t)snprintf(batch + blen, sizeof(batch) - blen, "HIT path=/f user=hot\n");
    redis_pause(rs, true);
    t0 = harness_now_ms();
    CHECK(harness_send(c, batch, blen));
    for (unsigned i = 0; i < DEPTH; i++) {
        CHECK(harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS));
        if (strncmp(line, "OK false ", 9) != 0)
            fail_msg("request %u while Redis is paused: \"%s\", want on_redis_error closed",
                     i, line);
    }
    waited = harness_now_ms() - t0;
    redis_pause(rs, false);
    if (waited > TIMEOUT_MS + 1500)
        fail_msg("the batch waited %llu ms, timeout_ms is %u", (unsigned long long)waited,
                 TIMEOUT_MS);
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_redis_hot_exact, harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_hot_mixed_serial, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_hot_chain, harness_setup, redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_hot_failure, harness_setup, redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_hot", tests, NULL, NULL);
}
