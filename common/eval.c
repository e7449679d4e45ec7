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

static void limits_of(const struct rules_rule *r, struct table_limits *lim)
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

/* One rule's answer; the zero semantics never touch a counter (divvy). */
static int apply_rule(const struct eval_env *env, const struct rules_rule *r,
                      const struct rules_req *req, enum table_op op, uint64_t n,
                      uint64_t now_ms, struct eval_outcome *o)
{
    char actor[RULES_ACTOR_MAX];
    struct table_limits lim;
    struct table_result res;
    struct table_key key;
    int len, rc;

    memset(o, 0, sizeof(*o));
    o->rule = r->index;
    if (r->credit_limit == 0)
        return 0;                               /* always deny: OK false 0 0 */
    if (r->algo != RULES_ALGO_TOKEN_BUCKET && r->reset_seconds == 0) {
        o->allowed = true;                      /* always allow */
        o->credit = (uint64_t)r->credit_limit;
        return 0;
    }

    len = rules_actor(env->rules, r->index, req, actor, sizeof(actor));
    if (len < 0)
        return len;
    key.rule_id = r->id;
    key.actor = actor;
    key.actor_len = (size_t)len;
    limits_of(r, &lim);
    rc = table_hit(r->fast_path ? env->fast : env->priv, &key, &lim, op, n, now_ms, &res);
    if (rc == -ENOSPC || rc == -EDQUOT) {
        o->table_full = true;
        o->allowed = env->full_allow;
        return 0;
    }
    if (rc < 0)
        return rc;
    o->counted = true;
    o->allowed = res.allowed;
    o->credit = res.credit;
    o->reset_s = eval_ms_to_s(res.reset_ms);
    return 0;
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
        struct eval_outcome *o = &ret->o[ret->n];

        rc = rules_get(env->rules, idx[i], &r);
        if (rc < 0)
            return rc;
        rc = apply_rule(env, &r, req, op, n, now_ms, o);
        if (rc < 0)
            return rc;
        ret->n++;
        if (r.policy == RULES_POLICY_CANARY)
            continue;
        if (r.policy == RULES_POLICY_CONTINUE && (o->allowed || op == TABLE_RESET))
            continue;
        /* A stop rule, or a continue rule that denies, decides. */
        ret->allowed = o->allowed;
        ret->credit = o->credit;
        ret->reset_s = o->reset_s;
        ret->decider = o->rule;
        return 0;
    }
    /* rules_validate() guarantees a last default stop rule that always matches. */
    return -EINVAL;
}
