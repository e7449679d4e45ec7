/* SPDX-License-Identifier: MIT */
/*
 * eval: decides one request against compiled rules and the host counter
 * tables — match, actor, zero semantics, table update, leases, the
 * full-table policy, match policies and the reply.  The one place this logic
 * lives: one rule walk (eval_walk()) serves divvyd's local path
 * (eval_request()), divvyd's Redis path, which stops at a rule kept in Redis
 * and resumes when Redis answers (daemon/srv.c), and libdivvy's fast path
 * (libclient/client_fast.c); each gives the walk its per-rule step
 * (DESIGN §4-5).  Thread-safe (the rules are immutable, the tables
 * lock-free).  Never logs.
 */
#ifndef DIVVY_EVAL_H
#define DIVVY_EVAL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
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
    bool full_allow;            /* full table / max_actors: allow (true) or deny ... */
    const struct table *full_from;  /* ... or, when set, as this table's control page
                                     * announces (table_when_full(): libdivvy's fast path);
                                     * announced none: EVAL_WAIT, divvyd decides */
    int64_t wall_ms;            /* 0: calendar rules read the wall clock (clock_unix_ns());
                                 * else the Unix ms they read instead: a virtual clock
                                 * (divvyctl replay, server/replay.c).  Read on the
                                 * calendar branch only, never on another rule's hit */
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
    uint32_t decider;           /* index of the rule that decided (a stop rule, or a continue
                                 * rule that denied): the rule a reply names */
    uint32_t limiter;           /* index of the rule whose credit and reset_s are the reply:
                                 * for an allowed TAKE or PEEK the tightest rule that charged
                                 * (eval_decides()), else the decider */
    unsigned n;                 /* outcomes in o[], in rule order */
    unsigned n_reset;           /* TABLE_RESET: counters forgotten (resettable rules') */
    struct eval_outcome o[RULES_MATCH_MAX];
};

/*
 * Applies @op for @n credits (docs/rules.md "Evaluation"): every matching
 * canary rule is charged and its answer ignored; a continue rule is charged
 * and, if it denies, decides (evaluation stops there); the first matching
 * stop rule decides.  A denied rule consumes nothing.  TABLE_RESET forgets
 * the counters of every rule on the path.  TABLE_DEBIT charges every rule
 * on the path down to the first stop rule, into debt if need be; its answer
 * is the first rule left in debt, else the tightest; a DEBIT above a rule's
 * max_debit charges nothing (eval_debit_check()).  An allowed request
 * reports the tightest limit that charged (eval_decides()).  Returns 0,
 * -ERANGE (that DEBIT: ret->decider is the rule), -ENOSPC/-EDQUOT (a
 * privileged rule found no counter, eval_rule()), or -EINVAL for an
 * inconsistent rule.  eval_walk() with the host-table step.
 */
int eval_request(const struct eval_env *env, const struct rules_req *req, enum table_op op,
                 uint64_t n, uint64_t now_ms, struct eval_result *ret);

/*
 * Whether a DEBIT of @n may charge the rules of @path (rules_match()'s
 * indexes): every evaluator calls this before its walk, so a refused DEBIT
 * charges nothing anywhere.  0 when every rule that keeps a counter has a
 * max_debit of at least @n (rules_max_debit()), or when the peer is
 * @privileged (uid 0 and admins may charge more; the bound on a debt,
 * ALGO_DEBT_WINDOWS, holds for them too); else -ERANGE with *ret_rule the
 * first rule whose max_debit is below @n.  -ENOENT for an index without a
 * rule.  DEBIT only: not on the path of any other verb.
 */
int eval_debit_check(const struct rules *rules, const uint32_t *path, size_t n_path, uint64_t n,
                     bool privileged, struct rules_rule *ret_rule);

/* Remaining milliseconds as nextResetSeconds (docs/protocol.md): (ms + 500) /
 * 1000, like Redis TTL, except that a wait under a second is 1, never 0: 0
 * says there is nothing to wait for (a sub-second window or refill). */
uint64_t eval_ms_to_s(uint64_t ms);

/* A rule's step that stops the walk at that rule: it waits for another
 * store (divvyd's Redis path), or the request must go to divvyd (libdivvy). */
#define EVAL_WAIT 1

/* True when rule @r never touches a counter (credit_limit 0 always denies,
 * reset_seconds 0 with a positive limit always allows, as divvy); then
 * *ret is its outcome. */
bool eval_zero(const struct rules_rule *r, struct eval_outcome *ret);

/* Rule @r's limits in the table's units. */
void eval_limits(const struct rules_rule *r, struct table_limits *ret);

/*
 * Calendar rule @r (docs/rules.md "Calendar windows"): the end of the period
 * that holds Unix time @unix_ms, read on the same instant as @now_ms
 * (CLOCK_MONOTONIC ms), as a CLOCK_MONOTONIC deadline in *ret_end_ms: what
 * table_limits.window_end_ms wants.  eval_rule_prepared() calls it on every
 * hit of a calendar rule with the wall clock (clock_unix_ns(), or
 * eval_env.wall_ms when set).  -EINVAL (not
 * a calendar rule), -ERANGE (the wall clock outside 1900..9999).
 */
int eval_calendar_end(const struct rules *rules, const struct rules_rule *r, uint64_t now_ms,
                      int64_t unix_ms, uint64_t *ret_end_ms);

/* The table that holds rule @r's host counters (fast, privileged or private). */
struct table *eval_table(const struct eval_env *env, const struct rules_rule *r);

/* The operation rule @r applies for a request's @op of @n credits: a
 * RESET of a resettable = false rule, or a TAKE of nothing, only peeks. */
enum table_op eval_rule_op(const struct rules_rule *r, enum table_op op, uint64_t n);

/*
 * The full-table policy, for rule @r whose counter found no slot (@rc is
 * -ENOSPC, or -EDQUOT: the rule at max_actors): 0 with *@o (its rule
 * already set) a table_full outcome answered by the rule's own when_full
 * ("evict" that found nothing to evict denies), else by env->full_allow or
 * env->full_from; @rc for a privileged rule with env->privileged set (login
 * counters are never silently not counted, DESIGN §4: the requester is told
 * ERR no-counter); EVAL_WAIT with o->table_full set when env->full_from
 * announces no policy.
 */
int eval_full(const struct eval_env *env, const struct rules_rule *r, int rc,
              struct eval_outcome *o);

/* Rule @r's answer from the host table (or its zero semantics).  0,
 * -ENOBUFS (actor too long) or -EINVAL; a full table is an outcome
 * (eval_full()), not an error, except for a privileged rule with
 * env->privileged set: -ENOSPC (that table full) or -EDQUOT (the rule at
 * max_actors); for such a rule a PEEK of an absent counter answers the same
 * when a TAKE could not claim one (table_room_prepared()).  EVAL_WAIT only
 * from eval_full(). */
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

/*
 * Spends @n of this host's lease of lease rule @r's counter @key (@lim with
 * lease set, docs/redis.md "lease") in eval_table(): 0 with *@o (allowed or
 * denied from the lease, or the full-table outcome, eval_full()); EVAL_WAIT
 * when Redis must answer (ret_lr->verdict FETCH or ASK); or -errno.  When
 * o->counted, ret_lr->refill says the lease ran low (the caller refills it
 * in the background, or asks divvyd to).
 */
int eval_lease(const struct eval_env *env, const struct rules_rule *r,
               const struct table_limits *lim, const struct table_key *key, uint64_t n,
               bool may_fetch, uint64_t now_ms, struct eval_outcome *o,
               struct table_lease_result *ret_lr);

/*
 * Appends @o (rule @r's outcome) to @res and returns true when it decides
 * the request (a stop rule, or a continue rule that denies a TAKE/PEEK);
 * then @res carries the answer.  The answer of an allowed TAKE or PEEK is
 * the tightest limit among the rules that charged a counter (canary rules
 * aside): the least credit left, on a tie the longer reset (as Envoy's
 * rate-limit service reports its overall status); the decider's own answer
 * when none charged.  A denial is the denying rule's answer; a RESET the
 * decider's.  A DEBIT is decided by the first stop rule only (a continue
 * rule never stops it): allowed when no rule went into debt, else the first
 * rule in debt answers and is the decider.
 */
bool eval_decides(const struct rules_rule *r, enum table_op op, const struct eval_outcome *o,
                  struct eval_result *res);

/*
 * The rule walk: a request's path (rules_match()'s indexes, in order),
 * decided rule by rule with a caller's step, stopped and resumed when a
 * step must wait.  One walk for every evaluator: eval_request() (the host
 * tables), divvyd's Redis path and libdivvy's fast path.  The caller keeps
 * the walk (and *res, whose n and n_reset start at 0) across a wait.
 */
struct eval_walk {
    const uint32_t *path;
    size_t n_path;
    size_t pos;                 /* the rule the walk is at */
    enum table_op op;
    struct eval_result *res;
};

/*
 * Settles rule @r's outcome @o at the walk's position (got by a step, or by
 * a caller resuming after a wait): true when it decides the request
 * (eval_decides()), else the walk moves to the next rule.
 */
static inline bool eval_walk_settle(struct eval_walk *w, const struct rules_rule *r,
                                    const struct eval_outcome *o)
{
    if (eval_decides(r, w->op, o, w->res))
        return true;
    w->pos++;
    return false;
}

/*
 * Walks from w->pos: for each rule, @step (with @ctx) sets *ret_r to the
 * rule at w->path[w->pos] and returns 0 with its outcome, EVAL_WAIT, or
 * -errno.  Returns 1 when the rule of the last step decided (w->res holds
 * the answer), 0 when that step returned EVAL_WAIT (w->pos is its rule;
 * settle its outcome later with eval_walk_settle(), then walk on), or
 * -errno; -EINVAL for a path that ends undecided (rules_validate() ends
 * every path at a stop rule).  Inline, so that a compiler calls a step
 * known here directly.
 */
static inline int eval_walk(struct eval_walk *w,
                            int (*step)(void *ctx, const struct eval_walk *at,
                                        const struct rules_rule **ret_r,
                                        struct eval_outcome *ret_o),
                            void *ctx)
{
    while (w->pos < w->n_path) {
        const struct rules_rule *r;
        struct eval_outcome o;
        int rc = step(ctx, w, &r, &o);

        if (rc < 0)
            return rc;
        if (rc == EVAL_WAIT)
            return 0;
        if (eval_walk_settle(w, r, &o))
            return 1;
    }
    return -EINVAL;
}

#endif
