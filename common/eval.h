/* SPDX-License-Identifier: MIT */
/*
 * eval: decides one request against compiled rules and the host counter
 * tables — match, actor, zero semantics, table update, match policies.  The
 * one place this logic lives: divvyd's socket path uses it now, libdivvy's
 * fast path will use the same code (DESIGN §4-5).  Thread-safe (the rules
 * are immutable, the tables lock-free).  Never logs.
 */
#ifndef DIVVY_EVAL_H
#define DIVVY_EVAL_H

#include <stdbool.h>
#include <stdint.h>

#include "rules.h"
#include "table.h"

struct eval_env {
    const struct rules *rules;
    struct table *fast;         /* counters of fast_path rules */
    struct table *priv;         /* counters of all other rules */
    struct table *privileged;   /* counters of source = privileged rules; NULL: they use priv.
                                 * When set, a privileged rule that finds no free counter is
                                 * an error (-ENOSPC/-EDQUOT), not the full-table policy */
    bool full_allow;            /* full table / max_actors: allow (true) or deny */
};

/* What one rule on the request's path said. */
struct eval_outcome {
    uint32_t rule;
    bool allowed;
    bool counted;               /* a counter was touched (false for zero semantics) */
    bool table_full;            /* -ENOSPC or -EDQUOT: the full-table policy answered */
    bool store_down;            /* Redis could not answer: on_redis_error did (divvyd) */
    bool canary;                /* the rule's policy is canary (set by eval_decides()) */
    uint64_t credit;
    uint64_t reset_s;
};

struct eval_result {
    bool allowed;
    uint64_t credit;
    uint64_t reset_s;           /* nextResetSeconds: remaining ms rounded as Redis TTL does */
    uint32_t decider;           /* index of the rule whose answer is the reply */
    unsigned n;                 /* outcomes in o[], in rule order */
    unsigned n_reset;           /* TABLE_RESET: counters forgotten (resettable rules') */
    struct eval_outcome o[RULES_MATCH_MAX];
};

/*
 * Applies @op for @n credits (docs/rules.md "Evaluation"): every matching
 * canary rule is charged and its answer ignored; a continue rule is charged
 * and, if it denies, decides (evaluation stops there); the first matching
 * stop rule decides.  A denied rule consumes nothing.  TABLE_RESET forgets
 * the counters of every rule on the path.  Returns 0, or -EINVAL for an
 * inconsistent rule.
 */
int eval_request(const struct eval_env *env, const struct rules_req *req, enum table_op op,
                 uint64_t n, uint64_t now_ms, struct eval_result *ret);

/* Remaining milliseconds as nextResetSeconds: (ms + 500) / 1000, like Redis TTL. */
uint64_t eval_ms_to_s(uint64_t ms);

/*
 * The steps of eval_request(), for an evaluator that decides some rules
 * elsewhere (divvyd's Redis store, docs/redis.md) and so must stop and
 * resume between rules.  Walk rules_match()'s path in order; for each rule
 * either get its outcome from eval_rule() (the host table) or from the other
 * store, then call eval_decides(); the first rule for which it returns true
 * decides the request.
 */

/* True when rule @r never touches a counter (credit_limit 0 always denies,
 * reset_seconds 0 with a positive limit always allows, as divvy); then
 * *ret is its outcome. */
bool eval_zero(const struct rules_rule *r, struct eval_outcome *ret);

/* Rule @r's limits in the table's units. */
void eval_limits(const struct rules_rule *r, struct table_limits *ret);

/* The table that holds rule @r's host counters (fast, privileged or private). */
struct table *eval_table(const struct eval_env *env, const struct rules_rule *r);

/* Rule @r's answer from the host table (or its zero semantics).  0,
 * -ENOBUFS (actor too long) or -EINVAL; a full table is an outcome
 * (table_full, answered by env->full_allow), not an error, except for a
 * privileged rule with env->privileged set: -ENOSPC (that table full) or
 * -EDQUOT (the rule at max_actors), which the requester is told; for such
 * a rule a PEEK of an absent counter answers the same when a TAKE could
 * not claim one (table_room_prepared()). */
int eval_rule(const struct eval_env *env, const struct rules_rule *r,
              const struct rules_req *req, enum table_op op, uint64_t n, uint64_t now_ms,
              struct eval_outcome *ret);

/*
 * The counter part of eval_rule(), for a rule that touches a counter
 * (eval_zero() returned false and left *@ret as it starts here), whose key
 * is already prepared for eval_table() under @limits (table_key_prepare()):
 * callers that keep prepared keys skip the keyed hash.
 */
int eval_rule_prepared(const struct eval_env *env, const struct rules_rule *r,
                       const struct table_limits *limits, const struct table_kw *kw,
                       enum table_op op, uint64_t n, uint64_t now_ms, struct eval_outcome *ret);

/* Appends @o (rule @r's outcome) to @res and returns true when it decides
 * the request (a stop rule, or a continue rule that denies a TAKE/PEEK);
 * then @res carries the answer. */
bool eval_decides(const struct rules_rule *r, enum table_op op, const struct eval_outcome *o,
                  struct eval_result *res);

#endif
