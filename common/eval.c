/* SPDX-License-Identifier: MIT */
/*
 * eval: one request against the rules and the counter tables (see eval.h):
 * a rule's answer from the host table or a lease, the full-table policy, the
 * decision and the reply (eval_decides()), and eval_request(), the walk
 * (eval.h) with the host-table step.  The hit path: no allocation, no locks;
 * the actor string is built on the stack once per rule on the request's path.
 */
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "eval.h"

uint64_t eval_ms_to_s(uint64_t ms)
{
    if (ms > 0 && ms < 1000)
        return 1;
    return ms / 1000 + (ms % 1000 >= 500);
}

/* A lockout rule's settings in ms (common/algo_lock.h); reset_ms is its fail_interval. */
static void eval_limits_lock(const struct rules_rule *r, struct table_limits *lim)
{
    const struct rules_lock *k = r->lock;

    lim->unlock_ms = (uint64_t)k->unlock_time * 1000;
    lim->lock_max_ms = (uint64_t)k->lock_max * 1000;
    lim->remember_ms = (uint64_t)k->remember * 1000;
    lim->lock_factor = (uint32_t)k->lock_factor;
    lim->delay_after = (uint32_t)k->delay_after;
    lim->delay_ms = (uint64_t)k->delay * 1000;
    lim->delay_factor = (uint32_t)k->delay_factor;
    lim->delay_max_ms = (uint64_t)k->delay_max * 1000;
}

void eval_limits(const struct rules_rule *r, struct table_limits *lim)
{
    memset(lim, 0, sizeof(*lim));
    lim->algo = r->algo;
    lim->credit_limit = (uint64_t)r->credit_limit;
    lim->reset_ms = (uint64_t)(r->reset_ms > 0 ? r->reset_ms : 0);
    lim->refill_amount = (uint64_t)(r->refill_amount > 0 ? r->refill_amount : 0);
    lim->refill_ms = (uint64_t)(r->refill_ms > 0 ? r->refill_ms : 0);
    lim->strict = r->strict;
    lim->max_actors = (uint64_t)(r->max_actors > 0 ? r->max_actors : 0);
    lim->evict = r->when_full == RULES_FULL_EVICT;
    lim->continuous = r->continuous;
    if (r->algo == RULES_ALGO_LOCKOUT)
        eval_limits_lock(r, lim);
}

int eval_calendar_end(const struct rules *rules, const struct rules_rule *r, uint64_t now_ms,
                      int64_t unix_ms, uint64_t *ret_end_ms)
{
    int64_t start, end;
    int rc = rules_period(rules, r->index, unix_ms, &start, &end);

    if (rc < 0)
        return rc;
    /* end > unix_ms: the period's end as far from now on the counting clock. */
    *ret_end_ms = now_ms + (uint64_t)(end - unix_ms);
    return 0;
}

int eval_debit_check(const struct rules *rules, const uint32_t *path, size_t n_path, uint64_t n,
                     bool privileged, struct rules_rule *ret_rule)
{
    struct eval_outcome o;
    int rc;

    if (privileged)
        return 0;
    for (size_t i = 0; i < n_path; i++) {
        rc = rules_get(rules, path[i], ret_rule);
        if (rc < 0)
            return rc;
        /* A rule with zero semantics keeps no counter: nothing to charge. */
        if (!eval_zero(ret_rule, &o) && n > (uint64_t)rules_max_debit(ret_rule))
            return -ERANGE;
    }
    return 0;
}

bool eval_zero(const struct rules_rule *r, struct eval_outcome *o)
{
    memset(o, 0, sizeof(*o));
    o->rule = r->index;
    if (r->credit_limit == 0)
        return true;                            /* always deny: OK false 0 0 */
    if (r->reset_ms == 0 && r->algo != RULES_ALGO_TOKEN_BUCKET && r->algo != RULES_ALGO_GCRA) {
        o->allowed = true;                      /* always allow */
        o->credit = (uint64_t)r->credit_limit;
        return true;
    }
    return false;
}

struct table *eval_table(const struct eval_env *env, const struct rules_rule *r)
{
    if (r->source == RULES_SOURCE_PRIVILEGED && env->privileged)
        return env->privileged;
    return r->fast_path ? env->fast : env->priv;
}

/* One rule's answer; the zero semantics never touch a counter (divvy). */
int eval_rule(const struct eval_env *env, const struct rules_rule *r,
              const struct rules_req *req, enum table_op op, uint64_t n, uint64_t now_ms,
              struct eval_outcome *o)
{
    struct table *t = eval_table(env, r);
    char actor[RULES_ACTOR_MAX];
    struct table_limits lim;
    struct table_key key;
    struct table_kw kw;
    int len;

    if (eval_zero(r, o))
        return 0;
    if (!t)
        return -EINVAL;
    len = rules_actor(env->rules, r->index, req, actor, sizeof(actor));
    if (len < 0)
        return len;
    key.rule_id = r->id;
    key.actor = actor;
    key.actor_len = (size_t)len;
    eval_limits(r, &lim);
    table_key_prepare(t, &key, &lim, &kw);
    return eval_rule_prepared(env, r, &lim, &kw, op, n, now_ms, o);
}

enum table_op eval_rule_op(const struct rules_rule *r, enum table_op op, uint64_t n)
{
    /* resettable = false: RESET reports the counter and leaves it alone. */
    if ((op == TABLE_RESET && !r->resettable) ||
        ((op == TABLE_TAKE || op == TABLE_DEBIT) && n == 0))
        return TABLE_PEEK;
    return op;
}

int eval_full(const struct eval_env *env, const struct rules_rule *r, int rc,
              struct eval_outcome *o)
{
    int allow;

    /* Login counters are never silently not counted (DESIGN §4). */
    if (env->privileged && eval_table(env, r) == env->privileged)
        return rc;
    o->table_full = true;
    /* The rule's own when_full first; "evict" found nothing to evict: deny. */
    if (r->when_full != RULES_FULL_TABLE)
        allow = r->when_full == RULES_FULL_ALLOW;
    else
        allow = env->full_from ? table_when_full(env->full_from) : env->full_allow;
    if (allow < 0)
        return EVAL_WAIT;
    o->allowed = allow == 1;
    return 0;
}

int eval_rule_prepared(const struct eval_env *env, const struct rules_rule *r,
                       const struct table_limits *limits, const struct table_kw *kw,
                       enum table_op op, uint64_t n, uint64_t now_ms, struct eval_outcome *o)
{
    struct table *t = eval_table(env, r);
    struct table_limits cal;
    struct table_result res;
    int rc;

    op = eval_rule_op(r, op, n);
    if (r->calendar) {
        cal = *limits;
        rc = eval_calendar_end(env->rules, r, now_ms,
                               env->wall_ms ? env->wall_ms
                                            : (int64_t)(clock_unix_ns() / 1000000),
                               &cal.window_end_ms);
        if (rc < 0)
            return rc;
        limits = &cal;
    }
    rc = table_hit_prepared(t, kw, limits, op, n, now_ms, &res);
    if (rc == -ENOSPC || rc == -EDQUOT)
        return eval_full(env, r, rc, o);
    if (rc < 0)
        return rc;
    /* A PEEK of a privileged rule with no counter yet (full credit, no
     * window) also says whether the TAKE that would follow could count. */
    if (op == TABLE_PEEK && env->privileged && t == env->privileged && res.reset_ms == 0 &&
        res.credit >= limits->credit_limit) {
        rc = table_room_prepared(t, kw, limits, now_ms);
        if (rc < 0)
            return rc;
    }
    o->counted = true;
    o->allowed = res.allowed;
    o->credit = res.credit;
    o->reset_s = eval_ms_to_s(res.reset_ms);
    return 0;
}

int eval_lease(const struct eval_env *env, const struct rules_rule *r,
               const struct table_limits *lim, const struct table_key *key, uint64_t n,
               bool may_fetch, uint64_t now_ms, struct eval_outcome *o,
               struct table_lease_result *lr)
{
    int rc;

    memset(o, 0, sizeof(*o));
    o->rule = r->index;
    lr->refill = false;
    rc = table_lease_take(eval_table(env, r), key, lim, n, may_fetch, now_ms, lr);
    if (rc == -ENOSPC || rc == -EDQUOT)
        return eval_full(env, r, rc, o);
    if (rc < 0)
        return rc;
    if (lr->verdict != TABLE_LEASE_ALLOWED && lr->verdict != TABLE_LEASE_DENIED)
        return EVAL_WAIT;                       /* FETCH or ASK: Redis answers */
    o->counted = true;
    o->allowed = lr->verdict == TABLE_LEASE_ALLOWED;
    o->credit = lr->credit;
    o->reset_s = eval_ms_to_s(lr->reset_ms);
    return 0;
}

/* Outcome @a is a tighter limit than @b: less credit left, or as much for longer. */
static bool tighter(const struct eval_outcome *a, const struct eval_outcome *b)
{
    return a->credit < b->credit || (a->credit == b->credit && a->reset_s > b->reset_s);
}

/*
 * A DEBIT's stop rule @o (appended to @res): every rule on the path was
 * charged, so the answer is the first non-canary rule left in debt (the
 * rule a reply names), else the tightest limit that charged, as a TAKE's.
 */
static bool debit_decides(const struct eval_outcome *o, struct eval_result *res)
{
    const struct eval_outcome *pick = NULL;
    bool denied = false;

    for (unsigned i = 0; i < res->n && !pick; i++) {
        if (!res->o[i].canary && !res->o[i].allowed)
            pick = &res->o[i];
    }
    denied = pick != NULL;
    for (unsigned i = 0; i < res->n && !denied; i++) {
        const struct eval_outcome *c = &res->o[i];

        if (!c->canary && c->counted && (!pick || tighter(c, pick)))
            pick = c;
    }
    if (!pick)
        pick = o;
    res->allowed = pick->allowed;
    res->credit = pick->credit;
    res->reset_s = pick->reset_s;
    res->decider = pick->allowed ? o->rule : pick->rule;
    res->limiter = pick->rule;
    return true;
}

bool eval_decides(const struct rules_rule *r, enum table_op op, const struct eval_outcome *o,
                  struct eval_result *res)
{
    const struct eval_outcome *tight;

    /* A resettable = false rule's counter was only peeked at. */
    if (op == TABLE_RESET && r->resettable && o->counted)
        res->n_reset++;
    if (res->n < RULES_MATCH_MAX) {
        res->o[res->n] = *o;
        res->o[res->n++].canary = r->policy == RULES_POLICY_CANARY;
    }
    if (r->policy == RULES_POLICY_CANARY)
        return false;
    if (r->policy == RULES_POLICY_CONTINUE && (o->allowed || op == TABLE_RESET ||
                                               op == TABLE_DEBIT))
        return false;
    if (op == TABLE_DEBIT)
        return debit_decides(o, res);
    /* A stop rule, or a continue rule that denies, decides. */
    res->allowed = o->allowed;
    res->credit = o->credit;
    res->reset_s = o->reset_s;
    res->decider = o->rule;
    res->limiter = o->rule;
    if (!o->allowed || op == TABLE_RESET || res->n < 2)
        return true;
    /* Allowed after other rules: the reply is the tightest limit that
     * charged.  Every non-canary outcome before this one is an allowing
     * continue rule's. */
    tight = o->counted ? o : NULL;
    for (unsigned i = 0; i < res->n; i++) {
        const struct eval_outcome *c = &res->o[i];

        if (!c->canary && c->counted && c->allowed && (!tight || tighter(c, tight)))
            tight = c;
    }
    if (tight) {
        res->credit = tight->credit;
        res->reset_s = tight->reset_s;
        res->limiter = tight->rule;
    }
    return true;
}

/* The host-table step of eval_request(). */
struct host_step {
    const struct eval_env *env;
    const struct rules_req *req;
    enum table_op op;
    uint64_t n, now_ms;
    struct rules_rule r;
};

static int host_step(void *ctx, const struct eval_walk *w, const struct rules_rule **ret_r,
                     struct eval_outcome *o)
{
    struct host_step *hs = ctx;
    int rc;

    rc = rules_get(hs->env->rules, w->path[w->pos], &hs->r);
    if (rc < 0)
        return rc;
    *ret_r = &hs->r;
    return eval_rule(hs->env, &hs->r, hs->req, hs->op, hs->n, hs->now_ms, o);
}

int eval_request(const struct eval_env *env, const struct rules_req *req, enum table_op op,
                 uint64_t n, uint64_t now_ms, struct eval_result *ret)
{
    uint32_t idx[RULES_MATCH_MAX];
    struct host_step hs;
    struct eval_walk w = { .path = idx, .op = op, .res = ret };
    int rc;

    /* Field by field: hs.r is rules_get()'s to fill, no need to zero it on
     * every hit. */
    hs.env = env;
    hs.req = req;
    hs.op = op;
    hs.n = n;
    hs.now_ms = now_ms;

    memset(ret, 0, sizeof(*ret));
    w.n_path = rules_match(env->rules, req, idx);
    if (op == TABLE_DEBIT) {
        rc = eval_debit_check(env->rules, idx, w.n_path, n, req->privileged, &hs.r);
        if (rc < 0) {
            ret->decider = ret->limiter = hs.r.index;
            return rc;
        }
    }
    rc = eval_walk(&w, host_step, &hs);
    /* No step of the host tables waits (env->full_from is libdivvy's). */
    if (rc == 0)
        return -EINVAL;
    return rc < 0 ? rc : 0;
}
