/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for common/eval.c: match policies, zero semantics, the
 * full-table policy and rounding, against real compiled rules and a real
 * counter table in a temporary directory, with an injected clock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "diag.h"
#include "eval.h"
#include "proto.h"

#define T0 1000000u    /* an arbitrary monotonic "now" in ms */

struct fixture {
    char dir[64];
    char fast_path[128];
    char priv_path[128];
    struct table *fast;
    struct table *priv;
    struct rules *rules;
    struct eval_env env;
};

static void add_rule(struct rules_spec *spec, unsigned line, const char *k1, const char *v1,
                     const char *k2, const char *v2, int64_t limit, int64_t reset,
                     enum rules_policy policy, const char *actor)
{
    struct rules_rule_spec *r;

    assert_int_equal(rules_spec_add(spec, "test.conf", line, &r), 0);
    if (k1)
        assert_int_equal(rules_spec_add_match(r, k1, v1, line), 0);
    if (k2)
        assert_int_equal(rules_spec_add_match(r, k2, v2, line), 0);
    if (actor)
        assert_int_equal(rules_spec_add_actor(r, actor), 0);
    r->credit_limit = limit;
    r->reset_seconds = reset;
    r->policy = policy;
    r->is_default = !k1 && !k2;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct table_open_info info;
    struct rules_spec spec = { 0 };
    struct diag diag;

    assert_non_null(f);
    strcpy(f->dir, "/tmp/divvy-test-eval-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->fast_path, sizeof(f->fast_path), "%s/fast.table", f->dir);
    snprintf(f->priv_path, sizeof(f->priv_path), "%s/private.table", f->dir);
    assert_int_equal(table_open(f->fast_path, TABLE_SLOTS_MIN, 0600, &f->fast, &info), 0);
    assert_int_equal(table_open(f->priv_path, TABLE_SLOTS_MIN, 0600, &f->priv, &info), 0);

    add_rule(&spec, 1, "k", "a", NULL, NULL, 1, 60, RULES_POLICY_CANARY, NULL);
    add_rule(&spec, 2, "user", "*", "src", "*", 2, 60, RULES_POLICY_CONTINUE, "user");
    add_rule(&spec, 3, "src", "*", NULL, NULL, 3, 60, RULES_POLICY_STOP, "src");
    add_rule(&spec, 4, "x", "1", NULL, NULL, 5, 0, RULES_POLICY_STOP, NULL);
    add_rule(&spec, 5, NULL, NULL, NULL, NULL, 0, 0, RULES_POLICY_STOP, NULL);
    diag_init(&diag);
    assert_int_equal(rules_compile(&spec, 1, &f->rules, &diag), 0);
    rules_spec_free(&spec);

    f->env.rules = f->rules;
    f->env.fast = f->fast;
    f->env.priv = f->priv;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    rules_free(f->rules);
    table_close(f->fast);
    table_close(f->priv);
    unlink(f->fast_path);
    unlink(f->priv_path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* Parses one request line into @req (kv sorted as the matcher wants). */
static void req_of(struct proto_req *preq, struct rules_req *req, const char *line)
{
    assert_true(proto_parse(line, strlen(line), preq) > 0);
    assert_int_equal(preq->err, PROTO_E_NONE);
    req->kv = preq->kv;
    req->n_kv = preq->n_kv;
    req->privileged = false;
}

static struct eval_result hit(struct fixture *f, const char *line, enum table_op op,
                              uint64_t now)
{
    static struct proto_req preq;
    struct rules_req req;
    struct eval_result res;

    req_of(&preq, &req, line);
    assert_int_equal(eval_request(&f->env, &req, op, 1, now, &res), 0);
    return res;
}

static void test_eval_always_deny_touches_nothing(void **state)
{
    struct eval_result res = hit(*state, "HIT method=DELETE\n", TABLE_TAKE, T0);

    assert_false(res.allowed);
    assert_int_equal(res.credit, 0);
    assert_int_equal(res.reset_s, 0);
    assert_int_equal(res.decider, 4);
    assert_int_equal(res.n, 1);
    assert_false(res.o[0].counted);
}

static void test_eval_always_allow_touches_nothing(void **state)
{
    for (int i = 0; i < 10; i++) {
        struct eval_result res = hit(*state, "HIT x=1\n", TABLE_TAKE, T0);

        assert_true(res.allowed);
        assert_int_equal(res.credit, 5);
        assert_int_equal(res.reset_s, 0);
        assert_false(res.o[0].counted);
    }
}

static void test_eval_continue_denial_decides_and_spares_later_rules(void **state)
{
    struct fixture *f = *state;
    struct eval_result res;

    res = hit(f, "HIT user=u src=s\n", TABLE_TAKE, T0);
    assert_true(res.allowed);
    assert_int_equal(res.decider, 2);
    assert_int_equal(res.o[1].credit, 2);       /* the stop rule was charged ... */
    assert_int_equal(res.o[0].credit, 1);       /* ... and the continue rule too */
    assert_int_equal(res.credit, 1);            /* the reply: the tighter of the two */
    assert_int_equal(res.limiter, 1);
    res = hit(f, "HIT user=u src=s\n", TABLE_TAKE, T0 + 10);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 0);
    res = hit(f, "HIT user=u src=s\n", TABLE_TAKE, T0 + 20);
    assert_false(res.allowed);
    assert_int_equal(res.decider, 1);            /* the continue rule said no */
    assert_int_equal(res.n, 1);
    /* The denied request consumed nothing from the per-source rule. */
    res = hit(f, "PEEK src=s\n", TABLE_PEEK, T0 + 30);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 1);
    assert_int_equal(res.decider, 2);
}

static void test_eval_canary_answer_is_ignored(void **state)
{
    struct fixture *f = *state;
    struct eval_result res;

    res = hit(f, "HIT k=a src=z\n", TABLE_TAKE, T0);
    assert_true(res.allowed);
    assert_int_equal(res.n, 2);
    assert_true(res.o[0].canary);               /* counted as canary-accepted/rejected */
    assert_false(res.o[1].canary);
    assert_true(res.o[0].allowed);
    res = hit(f, "HIT k=a src=z\n", TABLE_TAKE, T0 + 1);
    assert_false(res.o[0].allowed);              /* canary out of credit ... */
    assert_true(res.allowed);                    /* ... but the stop rule decides */
    assert_int_equal(res.credit, 1);
}

static void test_eval_window_resets_after_reset_seconds(void **state)
{
    struct fixture *f = *state;
    struct eval_result res;

    for (int i = 0; i < 3; i++)
        assert_true(hit(f, "HIT src=w\n", TABLE_TAKE, T0 + (uint64_t)i).allowed);
    res = hit(f, "HIT src=w\n", TABLE_TAKE, T0 + 1000);
    assert_false(res.allowed);
    assert_int_equal(res.credit, 0);
    assert_int_equal(res.reset_s, 59);
    res = hit(f, "HIT src=w\n", TABLE_TAKE, T0 + 60000);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 2);
    assert_int_equal(res.reset_s, 60);
}

static void test_eval_reset_restores_quota(void **state)
{
    struct fixture *f = *state;
    struct eval_result res;

    for (int i = 0; i < 3; i++)
        assert_true(hit(f, "HIT src=r\n", TABLE_TAKE, T0).allowed);
    assert_false(hit(f, "HIT src=r\n", TABLE_TAKE, T0).allowed);
    res = hit(f, "RESET src=r\n", TABLE_RESET, T0);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 3);
    assert_int_equal(res.reset_s, 0);
    assert_true(hit(f, "HIT src=r\n", TABLE_TAKE, T0).allowed);
}

/* resettable = false: RESET reports the counter and leaves it alone. */
static void test_eval_reset_skips_unresettable_rules(void **state)
{
    struct fixture *f = *state;
    struct rules_spec spec = { 0 };
    struct rules *rules;
    struct diag diag;
    struct eval_result res;

    add_rule(&spec, 1, "user", "*", "src", "*", 5, 60, RULES_POLICY_CONTINUE, "user");
    add_rule(&spec, 2, "src", "*", NULL, NULL, 5, 60, RULES_POLICY_STOP, "src");
    spec.rules[1].no_reset = true;
    add_rule(&spec, 3, NULL, NULL, NULL, NULL, 0, 0, RULES_POLICY_STOP, NULL);
    diag_init(&diag);
    assert_int_equal(rules_compile(&spec, 2, &rules, &diag), 0);
    rules_spec_free(&spec);
    f->env.rules = rules;

    for (int i = 0; i < 3; i++)
        assert_true(hit(f, "HIT user=u src=s\n", TABLE_TAKE, T0).allowed);
    res = hit(f, "RESET user=u src=s\n", TABLE_RESET, T0);
    assert_int_equal(res.decider, 1);
    assert_int_equal(res.credit, 2);            /* the per-source count stays */
    assert_int_equal(res.o[0].credit, 5);       /* the user x source count is gone */
    assert_int_equal(hit(f, "PEEK src=s\n", TABLE_PEEK, T0).credit, 2);
    f->env.rules = f->rules;
    rules_free(rules);
}

/* Compiles @spec into f->env.rules (freed by use_default_rules()). */
static void use_rules(struct fixture *f, struct rules_spec *spec)
{
    struct rules *rules;
    struct diag diag;

    diag_init(&diag);
    if (rules_compile(spec, 3, &rules, &diag) < 0)
        fail_msg("%s", diag.n ? diag.e[0].msg : "rules_compile failed");
    rules_spec_free(spec);
    f->env.rules = rules;
}

static void use_default_rules(struct fixture *f)
{
    rules_free((struct rules *)f->env.rules);
    f->env.rules = f->rules;
}

/*
 * An allowed request reports the tightest limit that charged (least credit,
 * on a tie the longer reset), as Envoy's rate-limit service does; canary
 * rules and rules that keep no counter are not limits.  A per-user rule with
 * 7 left before a per-source rule with 47 left replies 7.
 */
static void test_eval_continue_reports_tightest_limit(void **state)
{
    struct fixture *f = *state;
    struct rules_spec spec = { 0 };
    struct eval_result res;

    add_rule(&spec, 1, "user", "*", NULL, NULL, 1, 60, RULES_POLICY_CANARY, NULL);
    add_rule(&spec, 2, "user", "*", NULL, NULL, 8, 60, RULES_POLICY_CONTINUE, "user");
    add_rule(&spec, 3, "src", "*", NULL, NULL, 48, 3600, RULES_POLICY_STOP, "src");
    add_rule(&spec, 4, "tie", "*", NULL, NULL, 8, 3600, RULES_POLICY_STOP, "tie");
    add_rule(&spec, 5, "free", "*", NULL, NULL, 3, 0, RULES_POLICY_STOP, NULL);
    add_rule(&spec, 6, NULL, NULL, NULL, NULL, 0, 0, RULES_POLICY_STOP, NULL);
    use_rules(f, &spec);

    res = hit(f, "HIT user=u src=s\n", TABLE_TAKE, T0);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 7);
    assert_int_equal(res.reset_s, 60);
    assert_int_equal(res.decider, 2);            /* the stop rule decided ... */
    assert_int_equal(res.limiter, 1);            /* ... the per-user rule is the limit */
    assert_int_equal(res.o[0].credit, 0);        /* the canary is not a limit */
    /* A PEEK predicts the same. */
    res = hit(f, "PEEK user=u src=s\n", TABLE_PEEK, T0 + 1000);
    assert_int_equal(res.credit, 7);
    assert_int_equal(res.reset_s, 59);
    /* The same credit left: the longer wait is the tighter limit. */
    res = hit(f, "HIT user=v tie=t\n", TABLE_TAKE, T0);
    assert_int_equal(res.credit, 7);
    assert_int_equal(res.reset_s, 3600);
    assert_int_equal(res.limiter, 3);
    /* reset_seconds = 0 keeps no counter: the continue rule's answer. */
    res = hit(f, "HIT user=w free=1\n", TABLE_TAKE, T0);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 7);
    assert_int_equal(res.decider, 4);
    assert_int_equal(res.limiter, 1);
    /* A RESET replies the deciding rule's counter after the reset. */
    res = hit(f, "RESET user=u src=s\n", TABLE_RESET, T0 + 2000);
    assert_int_equal(res.credit, 48);
    assert_int_equal(res.limiter, 2);
    use_default_rules(f);
}

/* A step that leaves the continue rule (index 1) to "another store". */
struct wait_step {
    const struct eval_env *env;
    const struct rules_req *req;
    struct rules_rule r;
    unsigned steps;
};

static int wait_step(void *ctx, const struct eval_walk *at, const struct rules_rule **ret_r,
                     struct eval_outcome *o)
{
    struct wait_step *ws = ctx;

    ws->steps++;
    assert_int_equal(rules_get(ws->env->rules, at->path[at->pos], &ws->r), 0);
    *ret_r = &ws->r;
    if (ws->r.index == 1)
        return EVAL_WAIT;
    return eval_rule(ws->env, &ws->r, ws->req, at->op, 1, T0, o);
}

/* The walk stops at a step that waits and resumes where it stopped, as
 * divvyd's Redis path does (hit_resume()). */
static void test_eval_walk_waits_and_resumes(void **state)
{
    struct fixture *f = *state;
    static struct proto_req preq;
    uint32_t path[RULES_MATCH_MAX];
    struct rules_req req;
    struct eval_result res = { 0 };
    struct wait_step ws = { .env = &f->env, .req = &req };
    struct eval_walk w = { .path = path, .op = TABLE_TAKE, .res = &res };
    struct eval_outcome remote = { .rule = 1, .allowed = true, .counted = true, .credit = 1,
                                   .reset_s = 30 };
    struct rules_rule r;

    req_of(&preq, &req, "HIT user=u src=s\n");
    w.n_path = rules_match(f->env.rules, &req, path);
    assert_int_equal(w.n_path, 2);
    assert_int_equal(eval_walk(&w, wait_step, &ws), 0);        /* waits ... */
    assert_int_equal(w.pos, 0);                                 /* ... at the continue rule */
    assert_int_equal(res.n, 0);
    assert_int_equal(rules_get(f->env.rules, path[w.pos], &r), 0);
    assert_false(eval_walk_settle(&w, &r, &remote));            /* its answer: allowed */
    assert_int_equal(w.pos, 1);
    assert_int_equal(eval_walk(&w, wait_step, &ws), 1);        /* the stop rule decides */
    assert_int_equal(ws.steps, 2);
    assert_int_equal(res.decider, 2);
    assert_int_equal(res.n, 2);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 1);                            /* the waited rule is tighter */
    assert_int_equal(res.reset_s, 30);
    assert_int_equal(res.limiter, 1);
    /* A denial settled after the wait decides at once. */
    memset(&res, 0, sizeof(res));
    w.pos = 0;
    remote.allowed = false;
    remote.credit = 0;
    assert_true(eval_walk_settle(&w, &r, &remote));
    assert_false(res.allowed);
    assert_int_equal(res.decider, 1);
}

static void test_eval_full_table_applies_policy(void **state)
{
    struct fixture *f = *state;
    char line[64];
    bool saw_full = false;

    for (int allow = 0; allow < 2; allow++) {
        f->env.full_allow = allow;
        for (int i = 0; i < 4 * TABLE_SLOTS_MIN; i++) {
            struct eval_result res;

            snprintf(line, sizeof(line), "HIT src=flood-%d-%d\n", allow, i);
            res = hit(f, line, TABLE_TAKE, T0);
            if (res.o[0].table_full) {
                saw_full = true;
                assert_int_equal(res.allowed, allow);
            } else {
                assert_true(res.allowed);
            }
        }
    }
    assert_true(saw_full);
}

/*
 * A rule's own when_full decides over the table's (docs/rules.md "Full"):
 * deny and allow as the table's would, evict makes room from the rule's own
 * counters and denies once every one of them has refused someone, whatever
 * table.when_full says; a fast-path client needs no announced policy then.
 */
static void test_eval_rule_when_full(void **state)
{
    static const enum rules_full fulls[] = { RULES_FULL_TABLE, RULES_FULL_DENY,
                                             RULES_FULL_ALLOW, RULES_FULL_EVICT };
    static const char *const keys[] = { "t", "d", "a", "e" };
    struct fixture *f = *state;
    struct rules_spec spec = { 0 };
    struct rules *rules = NULL;
    struct rules_rule rr;
    struct eval_outcome o;
    struct eval_result res;
    char line[64];

    for (unsigned i = 0; i < 4; i++) {
        add_rule(&spec, i + 1, keys[i], "*", NULL, NULL, 1, 60, RULES_POLICY_STOP, "ip");
        spec.rules[i].max_actors = 1;
        spec.rules[i].when_full = fulls[i];
    }
    add_rule(&spec, 5, NULL, NULL, NULL, NULL, 0, 0, RULES_POLICY_STOP, NULL);
    assert_int_equal(rules_compile(&spec, 2, &rules, NULL), 0);
    rules_spec_free(&spec);
    f->env.rules = rules;
    f->env.full_allow = true;
    for (unsigned i = 0; i < 4; i++) {
        snprintf(line, sizeof(line), "HIT %s=1 ip=first\n", keys[i]);
        assert_true(hit(f, line, TABLE_TAKE, T0).allowed);
        snprintf(line, sizeof(line), "HIT %s=1 ip=second\n", keys[i]);
        res = hit(f, line, TABLE_TAKE, T0 + 1);
        assert_int_equal(res.allowed, fulls[i] != RULES_FULL_DENY);
        assert_int_equal(res.o[0].table_full, fulls[i] != RULES_FULL_EVICT);
    }
    /* evict: "second" took the place of "first"; once it refuses, no room. */
    assert_false(hit(f, "HIT e=1 ip=second\n", TABLE_TAKE, T0 + 2).allowed);
    res = hit(f, "HIT e=1 ip=third\n", TABLE_TAKE, T0 + 3);
    assert_false(res.allowed);
    assert_true(res.o[0].table_full);

    /* A fast-path client's table announces no policy: only "table" waits. */
    f->env.full_from = f->fast;
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(rules_get(rules, i, &rr), 0);
        memset(&o, 0, sizeof(o));
        assert_int_equal(eval_full(&f->env, &rr, -EDQUOT, &o),
                         fulls[i] == RULES_FULL_TABLE ? EVAL_WAIT : 0);
        assert_true(o.table_full);
        assert_int_equal(o.allowed, fulls[i] == RULES_FULL_ALLOW);
    }
    f->env.full_from = NULL;
    f->env.rules = f->rules;
    rules_free(rules);
}

static void test_eval_ms_to_s_rounds_like_redis_ttl(void **state)
{
    (void)state;
    assert_int_equal(eval_ms_to_s(0), 0);
    assert_int_equal(eval_ms_to_s(1), 1);        /* a sub-second wait is never 0 */
    assert_int_equal(eval_ms_to_s(499), 1);
    assert_int_equal(eval_ms_to_s(1499), 1);
    assert_int_equal(eval_ms_to_s(500), 1);
    assert_int_equal(eval_ms_to_s(3599499), 3599);
    assert_int_equal(eval_ms_to_s(3599500), 3600);
    assert_int_equal(eval_ms_to_s(3600000), 3600);
}

/* DEBIT charges every rule down to the stop rule, into debt; the reply is
 * the first non-canary rule in debt, else the tightest limit.  (A
 * privileged peer: 5 is above these rules' max_debit, their limits.) */
static void test_eval_debit_charges_whole_path(void **state)
{
    struct fixture *f = *state;
    static struct proto_req preq;
    struct rules_req req;
    struct eval_result res;

    req_of(&preq, &req, "DEBIT 5 k=a user=u src=s\n");
    req.privileged = true;
    assert_int_equal(eval_request(&f->env, &req, TABLE_DEBIT, 5, T0, &res), 0);
    assert_false(res.allowed);
    assert_int_equal(res.n, 3);                  /* canary, continue and stop: all charged */
    assert_int_equal(res.decider, 1);            /* the continue rule, first in debt */
    assert_int_equal(res.credit, 0);
    assert_int_equal(res.reset_s, 60);
    assert_false(res.o[0].allowed);
    assert_false(res.o[2].allowed);
    /* The stop rule was charged despite the continue rule's debt. */
    res = hit(f, "PEEK src=s\n", TABLE_PEEK, T0 + 1);
    assert_false(res.allowed);
    assert_int_equal(res.credit, 0);
    res = hit(f, "HIT user=v src=s\n", TABLE_TAKE, T0 + 2);
    assert_false(res.allowed);
    assert_int_equal(res.decider, 2);
    /* Within every limit: allowed, the stop rule decides, the tightest answers. */
    req_of(&preq, &req, "DEBIT 1 user=w src=t\n");
    assert_int_equal(eval_request(&f->env, &req, TABLE_DEBIT, 1, T0, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(res.decider, 2);
    assert_int_equal(res.limiter, 1);
    assert_int_equal(res.credit, 1);
    /* Zero semantics: nothing to charge, credit_limit 0 denies. */
    req_of(&preq, &req, "DEBIT 1 method=DELETE\n");
    assert_int_equal(eval_request(&f->env, &req, TABLE_DEBIT, 1, T0, &res), 0);
    assert_false(res.allowed);
    assert_false(res.o[0].counted);
    /* The window pays the debt back: 5 - 3 = 2 over, 1 left a window later. */
    res = hit(f, "PEEK src=s\n", TABLE_PEEK, T0 + 60000);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 1);
}

/* A DEBIT above the max_debit of a rule on its path (default: the rule's
 * credit_limit) is refused before anything is charged, unless the peer is
 * privileged; a rule that keeps no counter bounds nothing; the debt itself
 * stops at ALGO_DEBT_WINDOWS limits for everyone. */
static void test_eval_debit_above_max_debit(void **state)
{
    struct fixture *f = *state;
    struct rules_spec spec = { 0 };
    struct rules *rules;
    struct diag diag;
    static struct proto_req preq;
    struct rules_req req;
    struct eval_result res;

    add_rule(&spec, 1, "k", "big", NULL, NULL, 10, 60, RULES_POLICY_STOP, NULL);
    spec.rules[0].max_debit = 100;
    add_rule(&spec, 2, "k", "none", NULL, NULL, 10, 60, RULES_POLICY_STOP, NULL);
    spec.rules[1].max_debit = 0;
    add_rule(&spec, 3, "k", "zero", NULL, NULL, 0, 60, RULES_POLICY_STOP, NULL);
    add_rule(&spec, 4, "user", "*", NULL, NULL, 1000, 60, RULES_POLICY_CONTINUE, "user");
    add_rule(&spec, 5, "src", "*", NULL, NULL, 3, 60, RULES_POLICY_STOP, "src");
    add_rule(&spec, 6, NULL, NULL, NULL, NULL, 0, 0, RULES_POLICY_STOP, NULL);
    diag_init(&diag);
    assert_int_equal(rules_compile(&spec, 2, &rules, &diag), 0);
    rules_spec_free(&spec);
    f->env.rules = rules;

    /* An explicit max_debit above the limit: charged, the debt at 4 limits. */
    req_of(&preq, &req, "DEBIT 100 k=big\n");
    assert_int_equal(eval_request(&f->env, &req, TABLE_DEBIT, 100, T0, &res), 0);
    assert_false(res.allowed);
    req_of(&preq, &req, "DEBIT 101 k=big\n");
    assert_int_equal(eval_request(&f->env, &req, TABLE_DEBIT, 101, T0, &res), -ERANGE);
    assert_int_equal(res.decider, 0);
    assert_int_equal(res.n, 0);
    /* Paid back four windows after the current one, not later. */
    res = hit(f, "PEEK k=big\n", TABLE_PEEK, T0 + 4 * 60000 - 1);
    assert_false(res.allowed);
    res = hit(f, "PEEK k=big\n", TABLE_PEEK, T0 + 5 * 60000);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 10);
    /* max_debit = 0: no unprivileged DEBIT at all; a privileged one charges. */
    req_of(&preq, &req, "DEBIT 1 k=none\n");
    assert_int_equal(eval_request(&f->env, &req, TABLE_DEBIT, 1, T0, &res), -ERANGE);
    assert_int_equal(res.decider, 1);
    req.privileged = true;
    assert_int_equal(eval_request(&f->env, &req, TABLE_DEBIT, 1000000, T0, &res), 0);
    assert_false(res.allowed);
    res = hit(f, "PEEK k=none\n", TABLE_PEEK, T0 + 5 * 60000 - 1);
    assert_false(res.allowed);
    /* Zero semantics keep no counter: no bound to pass. */
    req_of(&preq, &req, "DEBIT 1000 k=zero\n");
    assert_int_equal(eval_request(&f->env, &req, TABLE_DEBIT, 1000, T0, &res), 0);
    assert_false(res.allowed);
    /* The default max_debit is each rule's credit_limit; the first rule on
     * the path below @n refuses, and the continue rule before it is not
     * charged either. */
    req_of(&preq, &req, "DEBIT 4 user=u src=s\n");
    assert_int_equal(eval_request(&f->env, &req, TABLE_DEBIT, 4, T0, &res), -ERANGE);
    assert_int_equal(res.decider, 4);
    res = hit(f, "PEEK user=u src=s\n", TABLE_PEEK, T0);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 3);
    assert_int_equal(res.o[0].credit, 1000);
    req_of(&preq, &req, "DEBIT 3 user=u src=s\n");
    assert_int_equal(eval_request(&f->env, &req, TABLE_DEBIT, 3, T0, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(res.o[0].credit, 997);
    /* Other verbs never meet max_debit (0 here): a TAKE is just denied. */
    res = hit(f, "TAKE 1 k=none\n", TABLE_TAKE, T0);
    assert_false(res.allowed);
    f->env.rules = f->rules;
    rules_free(rules);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_eval_always_deny_touches_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_always_allow_touches_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_continue_denial_decides_and_spares_later_rules,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_continue_reports_tightest_limit, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_eval_walk_waits_and_resumes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_canary_answer_is_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_window_resets_after_reset_seconds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_eval_reset_restores_quota, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_reset_skips_unresettable_rules, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_eval_full_table_applies_policy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_rule_when_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_debit_charges_whole_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_debit_above_max_debit, setup, teardown),
        cmocka_unit_test(test_eval_ms_to_s_rounds_like_redis_ttl),
    };

    return cmocka_run_group_tests_name("eval", tests, NULL, NULL);
}
