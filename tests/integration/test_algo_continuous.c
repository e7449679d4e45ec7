/* SPDX-License-Identifier: MIT */
/*
 * Integration (real divvyd, real redis-server, real libdivvy): the
 * continuously refilling token bucket and algorithm gcra (docs/rules.md
 * "Algorithms") on every path that decides them: the line protocol over
 * divvyd's Unix socket (the host table), libdivvy's shared-memory fast path
 * in this process, and strict Redis (store = "strict", the Lua script on
 * Redis's clock).
 *
 * The bursty token-bucket design's example, with every duration 10 times
 * longer so that a loaded machine cannot flip an answer: a bucket of 10
 * refilling 5 per 10 s (one token each 2 s); 10 requests at once (all
 * allowed, an 11th denied); two more 2.5 s later (one token: one allowed,
 * one denied); 12.5 s after those, 6 tokens.  Each wait is checked against
 * the clock, with at least 1.5 s of margin on each side; the exact clock
 * behaviour (200 ms, 1.2 s) is the unit tests' (tests/unit/test_algo_gcra.c).
 * Then redis-cell's README example as a gcra rule, locally and in Redis
 * (and RULES showing the settings), a sub-second refill's
 * nextResetSeconds, which is never 0 while denied, and RESP's DIVVY.HIT
 * on both algorithms.
 * Every divvyd and redis-server started here is stopped by PID, also on
 * failure (harness_teardown, redis_teardown).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "divvy.h"
#include "harness_redis.h"
#include "resp_client.h"

#define BUCKET "credit_limit = 10; algorithm = \"token_bucket\"; refill = \"continuous\";\n" \
               "  refill_amount = 5; refill_ms = 10000;"
#define GCRA   "credit_limit = 16; algorithm = \"gcra\"; refill_amount = 30; refill_seconds = 60;"

static const char rules_text[] =
    "{ match = { path = \"/sock\"; }; label = \"sock\"; " BUCKET " },\n"
    "{ match = { path = \"/fast\"; }; label = \"fast\"; fast_path = true; " BUCKET " },\n"
    "{ match = { path = \"/strict\"; }; label = \"strict\"; store = \"strict\"; " BUCKET " },\n"
    "{ match = { path = \"/gcra\"; }; label = \"gcra\"; " GCRA " },\n"
    "{ match = { path = \"/gcra-strict\"; }; label = \"gcra-strict\"; store = \"strict\"; "
    GCRA " },\n"
    "{ match = { path = \"/sub\"; }; label = \"sub\"; credit_limit = 1;\n"
    "  algorithm = \"token_bucket\"; refill_ms = 900; },\n"
    "{ default = true; credit_limit = 0; reset_seconds = 0; }";

/* One path: how a hit on it is sent, what came back. */
struct path {
    const char *name;           /* the request's path value */
    bool lib;                   /* through libdivvy (DIVVY_AUTO): the fast path */
};

struct ctx {
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    struct divvy *h;
};

/* redis-server, divvyd on rules_text with it, a connection to divvyd. */
static void start(struct ctx *x)
{
    char *conf;

    CHECK(redis_start(&x->rs));
    conf = redis_config(x->rs, "local", "closed", 2000, "", rules_text);
    assert_non_null(conf);
    x->d = redis_divvyd(conf, 2);
    free(conf);
    CHECK(harness_connect(x->d, HARNESS_UNIX, &x->c));
}

static void stop(struct ctx *x)
{
    divvy_close(x->h);
    harness_close(x->c);
    redis_divvyd_stop(x->d);
    redis_stop(x->rs);
}

struct answer {
    bool allowed;
    long long credit, secs;
    bool fast;                  /* decided in this process */
};

static struct answer hit(struct ctx *x, const struct path *p, const char *verb)
{
    struct answer a = { 0 };

    if (p->lib) {
        struct divvy_kv kv[1] = { { "path", p->name } };
        struct divvy_result res = { .size = sizeof(res) };
        int r = strcmp(verb, "PEEK") == 0 ? divvy_peek(x->h, kv, 1, &res)
                                          : divvy_hit(x->h, kv, 1, &res);

        if (r < 0)
            fail_msg("%s %s: %s", verb, p->name, divvy_errmsg(x->h));
        a.allowed = res.allowed;
        a.credit = (long long)res.credit;
        a.secs = (long long)res.reset_seconds;
        a.fast = res.fast_path;
    } else {
        char req[128], reply[256], rule[64];

        snprintf(req, sizeof(req), "%s path=%s\n", verb, p->name);
        CHECK(harness_cmd(x->c, req, reply, sizeof(reply)));
        /* PEEK names the deciding rule, HIT does not (docs/protocol.md). */
        if (harness_parse_ok(reply, &a.allowed, &a.credit, &a.secs) < 0 &&
            harness_parse_ok_rule(reply, &a.allowed, &a.credit, &a.secs, rule,
                                  sizeof(rule)) < 0)
            fail_msg("%s: %s", req, reply);
    }
    return a;
}

static void need_elapsed(const char *what, uint64_t since, uint64_t lo, uint64_t hi)
{
    uint64_t el = harness_now_ms() - since;

    if (el < lo || el >= hi)
        fail_msg("%s: %llu ms after the burst, outside [%llu, %llu): the machine stalled "
                 "longer than this test's margins", what, (unsigned long long)el,
                 (unsigned long long)lo, (unsigned long long)hi);
}

static void test_algo_continuous_bursty_every_path(void **state)
{
    const struct path paths[] = { { "/sock", false }, { "/fast", true }, { "/strict", false } };
    uint64_t burst[3], pair[3];
    struct ctx x = { 0 };
    struct answer a;
    redisReply *rep;

    (void)state;
    start(&x);
    CHECK(harness_divvy_env(x.d));
    CHECK(divvy_open(NULL, DIVVY_AUTO, &x.h));
    harness_wait_fast(x.h, (struct divvy_kv[]){ { "path", "/elsewhere" } }, 1);

    /* 10 requests at once: all allowed; the 11th denied, 2 s to the next token. */
    for (int p = 0; p < 3; p++) {
        burst[p] = harness_now_ms();
        for (int i = 0; i < 10; i++) {
            a = hit(&x, &paths[p], "HIT");
            assert_true(a.allowed);
            assert_int_equal(a.credit, 9 - i);
            if (paths[p].lib && !a.fast)
                fail_msg("%s: not decided on the fast path", paths[p].name);
        }
        a = hit(&x, &paths[p], "HIT");
        assert_false(a.allowed);
        assert_int_equal(a.credit, 0);
        assert_true(a.secs >= 1 && a.secs <= 2);
    }
    need_elapsed("the burst", burst[0], 0, 1500);
    /* Two more 2.5 s later: one token has come (at 2 s; the next at 4 s). */
    harness_pause_ms(2500);
    for (int p = 0; p < 3; p++) {
        pair[p] = harness_now_ms();
        need_elapsed(paths[p].name, burst[p], 2000, 4000);
        a = hit(&x, &paths[p], "HIT");
        if (!a.allowed)
            fail_msg("%s: the first of the two later requests was denied", paths[p].name);
        a = hit(&x, &paths[p], "HIT");
        if (a.allowed)
            fail_msg("%s: the second of the two later requests was allowed", paths[p].name);
        need_elapsed(paths[p].name, burst[p], 2000, 4000);
    }
    /* 12.5 s after those: 6 tokens (6 came at 12 s, the 7th comes at 14 s). */
    harness_pause_ms(12500);
    for (int p = 0; p < 3; p++) {
        need_elapsed(paths[p].name, pair[p], 12000, 14000);
        a = hit(&x, &paths[p], "PEEK");
        assert_true(a.allowed);
        if (a.credit != 6)
            fail_msg("%s: %lld tokens 12.5 s later, not 6", paths[p].name, a.credit);
        need_elapsed(paths[p].name, pair[p], 12000, 14000);
    }
    /* Strict kept it in Redis, as "c:<full ms>:<fraction>:<debt>" (docs/redis.md). */
    rep = redis_cmd(x.rs, "GET %s", "divvy:{strict:}");
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STRING);
    assert_true(strncmp(rep->str, "c:", 2) == 0);
    freeReplyObject(rep);
    stop(&x);
}

/* redis-cell's README: CL.THROTTLE user123 15 30 60 1 -> 16 15 -1 2; as a
 * rule credit_limit 16, refill_amount 30, refill 60 s: the first hit leaves
 * 15 and says 2 s (reset_after: full again), locally and strict; the 17th
 * at once is denied and says 32 s. */
static void test_algo_continuous_gcra_redis_cell(void **state)
{
    const struct path paths[] = { { "/gcra", false }, { "/gcra-strict", false } };
    struct ctx x = { 0 };
    struct answer a;

    (void)state;
    start(&x);
    /* RULES shows the settings as the algorithms count them. */
    {
        static char buf[16384];

        assert_int_equal(harness_multi(x.c, "RULES\n", buf, sizeof(buf)), 7);
        assert_non_null(strstr(buf, "algorithm=gcra"));
        assert_non_null(strstr(buf, "refill_amount=30 refill_ms=60000\n"));
        assert_non_null(strstr(buf, "refill_amount=5 refill_ms=10000 refill=continuous\n"));
        assert_non_null(strstr(buf, "reset_ms=900 refill_amount=1 refill_ms=900 refill=steps\n"));
    }
    for (int p = 0; p < 2; p++) {
        uint64_t t0 = harness_now_ms();

        a = hit(&x, &paths[p], "HIT");
        assert_true(a.allowed);
        assert_int_equal(a.credit, 15);
        assert_int_equal(a.secs, 2);
        for (int i = 0; i < 15; i++)
            assert_true(hit(&x, &paths[p], "HIT").allowed);
        a = hit(&x, &paths[p], "HIT");
        if (harness_now_ms() - t0 < 2000) {
            /* No token came back meanwhile (one a 2 s). */
            assert_false(a.allowed);
            assert_int_equal(a.credit, 0);
            assert_true(a.secs >= 30 && a.secs <= 32);
        }
    }
    stop(&x);
}

/* RESP's DIVVY.HIT decides with the same engine: a continuous bucket's
 * burst (the 11th denied, the next token 2 s away) and the gcra rule's first
 * answer, strict included, as redis-cell's. */
static void test_algo_continuous_resp(void **state)
{
    struct harness_opts o = { .resp = true, .workers = 1 };
    struct harness_conn *c;
    struct harness_daemon *d;
    struct redis_srv *rs;
    uint64_t t0;
    char *conf;

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "local", "closed", 2000, "", rules_text);
    assert_non_null(conf);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    free(conf);
    CHECK(harness_connect_unix(d->resp_sock, &c));
    t0 = harness_now_ms();
    for (int i = 0; i < 10; i++) {
        char want[64];

        snprintf(want, sizeof(want), "*4 :1 :%d :", 9 - i);
        SEND_CMD(c, "DIVVY.HIT", "path", "/sock");
        expect_resp_prefix(c, want);
    }
    SEND_CMD(c, "DIVVY.HIT", "path", "/sock");
    if (harness_now_ms() - t0 < 1500)
        expect_resp(c, "*4 :0 :0 :2 $sock");
    else
        expect_resp_prefix(c, "*4 :0 :0 :");
    SEND_CMD(c, "DIVVY.HIT", "path", "/gcra");
    expect_resp(c, "*4 :1 :15 :2 $gcra");
    SEND_CMD(c, "DIVVY.HIT", "path", "/gcra-strict");
    expect_resp(c, "*4 :1 :15 :2 $gcra-strict");
    harness_close(c);
    redis_divvyd_stop(d);
    redis_stop(rs);
}

/* A refill every 900 ms: the denied hit waits less than a second, and says
 * 1, never 0 (docs/protocol.md "nextResetSeconds"). */
static void test_algo_continuous_subsecond_reset(void **state)
{
    const struct path p = { "/sub", false };
    struct ctx x = { 0 };
    struct answer a;
    uint64_t t0;

    (void)state;
    start(&x);
    t0 = harness_now_ms();
    assert_true(hit(&x, &p, "HIT").allowed);
    a = hit(&x, &p, "HIT");
    if (harness_now_ms() - t0 >= 900)
        fail_msg("900 ms between two requests: the machine stalled");
    assert_false(a.allowed);
    assert_int_equal(a.secs, 1);
    stop(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_algo_continuous_bursty_every_path, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_algo_continuous_gcra_redis_cell, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_algo_continuous_subsecond_reset, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_algo_continuous_resp, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("algo_continuous", tests, NULL, NULL);
}
