/* SPDX-License-Identifier: MIT */
/*
 * eval: one request against the rules and the counter tables (see eval.h).
 * The hit path: no allocation, no locks; the actor string is built on the
 * stack once per rule on the request's path.
 */
#include <errno.h>
#include <string.h>

#include "eval.h"

uint64_t eval_ms_to_s(uint64_t ms)
{
    return ms / 1000 + (ms % 1000 >= 500);
}

void eval_limits(const struct rules_rule *r, struct table_limits *lim)
{
    memset(lim, 0, sizeof(*lim));
    lim->algo = r->algo;
    lim->credit_limit = (uint64_t)r->credit_limit;
    lim->reset_ms = (uint64_t)(r->reset_seconds > 0 ? r->reset_seconds : 0) * 1000;
    lim->refill_amount = (uint64_t)(r->refill_amount > 0 ? r->refill_amount : 0);
    lim->refill_ms = (uint64_t)(r->refill_seconds > 0 ? r->refill_seconds : 0) * 1000;
    lim->strict = r->strict;
    lim->max_actors = (uint64_t)(r->max_actors > 0 ? r->max_actors : 0);
}

bool eval_zero(const struct rules_rule *r, struct eval_outcome *o)
{
    memset(o, 0, sizeof(*o));
    o->rule = r->index;
    if (r->credit_limit == 0)
        return true;                            /* always deny: OK false 0 0 */
    if (r->algo != RULES_ALGO_TOKEN_BUCKET && r->reset_seconds == 0) {
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

int eval_rule_prepared(const struct eval_env *env, const struct rules_rule *r,
                       const struct table_limits *limits, const struct table_kw *kw,
                       enum table_op op, uint64_t n, uint64_t now_ms, struct eval_outcome *o)
{
    struct table *t = eval_table(env, r);
    /* Login counters are never silently not counted (DESIGN §4). */
    bool must_count = env->privileged && t == env->privileged;
    struct table_result res;
    int rc;

    /* resettable = false: RESET reports the counter and leaves it alone. */
    if (op == TABLE_RESET && !r->resettable)
        op = TABLE_PEEK;
    rc = table_hit_prepared(t, kw, limits, op, n, now_ms, &res);
    if (rc == -ENOSPC || rc == -EDQUOT) {
        if (must_count)
            return rc;
        o->table_full = true;
        o->allowed = env->full_allow;
        return 0;
    }
    if (rc < 0)
        return rc;
    /* A PEEK of a privileged rule with no counter yet (full credit, no
     * window) also says whether the TAKE that would follow could count. */
    if (op == TABLE_PEEK && must_count && res.reset_ms == 0 &&
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

bool eval_decides(const struct rules_rule *r, enum table_op op, const struct eval_outcome *o,
                  struct eval_result *res)
{
    /* A resettable = false rule's counter was only peeked at. */
    if (op == TABLE_RESET && r->resettable && o->counted)
        res->n_reset++;
    if (res->n < RULES_MATCH_MAX) {
        res->o[res->n] = *o;
        res->o[res->n++].canary = r->policy == RULES_POLICY_CANARY;
    }
    if (r->policy == RULES_POLICY_CANARY)
        return false;
    if (r->policy == RULES_POLICY_CONTINUE && (o->allowed || op == TABLE_RESET))
        return false;
    /* A stop rule, or a continue rule that denies, decides. */
    res->allowed = o->allowed;
    res->credit = o->credit;
    res->reset_s = o->reset_s;
    res->decider = o->rule;
    return true;
}

int eval_request(const struct eval_env *env, const struct rules_req *req, enum table_op op,
                 uint64_t n, uint64_t now_ms, struct eval_result *ret)
{
    uint32_t idx[RULES_MATCH_MAX];
    struct rules_rule r;
    size_t n_match;
    int rc;

    memset(ret, 0, sizeof(*ret));
    n_match = rules_match(env->rules, req, idx);
    for (size_t i = 0; i < n_match; i++) {
        struct eval_outcome o;

        rc = rules_get(env->rules, idx[i], &r);
        if (rc < 0)
            return rc;
        rc = eval_rule(env, &r, req, op, n, now_ms, &o);
        if (rc < 0)
            return rc;
        if (eval_decides(&r, op, &o, ret))
            return 0;
    }
    /* rules_validate() guarantees a last default stop rule that always matches. */
    return -EINVAL;
}
