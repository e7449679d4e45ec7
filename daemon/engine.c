/* SPDX-License-Identifier: MIT */
/*
 * engine: the entry and the settle step of every decision (see engine.h).
 *
 * engine_submit() decides a request on rules that live only on this host at
 * once: the rule walk of common/eval.h over the host tables, with no
 * allocation.  When the path reaches a rule kept in Redis the request
 * becomes a waiting hit instead (struct engine_hit, recycled per worker),
 * its pairs copied, walked on by engine_redis.c from the store's callbacks.
 * Either way it ends in engine_settle(), the one place a decision is
 * counted (STATS, metrics, RESET's log line) and handed to the caller's
 * completion.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urcu/urcu-memb.h>

#include "clock.h"
#include "dlog_writer.h"
#include "engine.h"
#include "engine_int.h"
#include "eval.h"
#include "log.h"
#include "metrics.h"
#include "proto.h"
#include "srv_int.h"
#include "store.h"
#include "worker_int.h"

#define ENGINE_FREE_MAX   256       /* recycled waiting hits per worker */

static struct log_ratelimit rl_internal, rl_full;

/* ---- counting -------------------------------------------------------------------------- */

/* One denied TAKE (or its ERR no-counter), by @cause: STATS and metrics. */
static void count_denial(struct worker *w, enum metrics_deny cause)
{
    stat_inc(&w->st.denials[cause]);
    metrics_denied(w->mw, cause);
}

/* Why the decided request @res was denied: its decider's outcome says. */
static enum metrics_deny deny_cause(const struct eval_result *res)
{
    const struct eval_outcome *o = res->n ? &res->o[res->n - 1] : NULL;

    if (!o || o->rule != res->decider)
        return METRICS_DENY_QUOTA;
    if (o->table_full)
        return METRICS_DENY_TABLE_FULL;
    if (o->store_down && !o->counted)
        return METRICS_DENY_REDIS_DOWN;
    /* Only zero semantics answer without a counter (eval_zero()). */
    return o->counted ? METRICS_DENY_QUOTA : METRICS_DENY_ZERO_LIMIT;
}

static void count_outcomes(struct worker *w, const struct rules *rules, uint64_t generation,
                           enum table_op op, const struct eval_result *res)
{
    for (unsigned i = 0; i < res->n; i++) {
        if (res->o[i].table_full) {
            struct rules_rule r;

            stat_inc(&w->st.table_full);
            /* The rule by its id, as replies and divvyctl name it: its label,
             * else its 16 hex digits (an index changes with every reload). */
            log_ratelimited(&rl_full, LOG_WARNING,
                            "counter table full or max_actors reached (rule %s): %s",
                            rules_get(rules, res->o[i].rule, &r) < 0 ? "?" : r.id_str,
                            res->o[i].allowed ? "allowed" : "denied");
        }
        /* A continue rule that charged on the way counts under its own label too. */
        if (!res->o[i].canary && op == TABLE_TAKE && res->o[i].rule != res->decider &&
            res->o[i].allowed && res->o[i].counted)
            metrics_charged(w->mw, rules, generation, res->o[i].rule);
        if (!res->o[i].canary)
            continue;
        stat_inc(res->o[i].allowed ? &w->st.canary_accepted : &w->st.canary_rejected);
        if (op == TABLE_TAKE)
            metrics_hit(w->mw, rules, generation, res->o[i].rule,
                        res->o[i].allowed ? METRICS_CANARY_ACCEPTED : METRICS_CANARY_REJECTED);
    }
    if (op == TABLE_TAKE)
        metrics_hit(w->mw, rules, generation, res->decider,
                    res->allowed ? METRICS_ACCEPTED : METRICS_REJECTED);
    if (op == TABLE_TAKE && !res->allowed)
        count_denial(w, deny_cause(res));
}

/* ---- the settle step ------------------------------------------------------------------- */

/* What a request carries to its settle step, whether it waited or not. */
struct engine_call {
    enum table_op op;
    uint64_t n;
    uid_t uid;
    uint64_t generation;
    uint64_t start_ns;
    bool rematched;
    engine_done_fn *done;
    void *arg;
    enum metrics_protocol protocol;
    /* For the decision log (dlog_writer.h): */
    const struct proto_kv *kv;
    unsigned n_kv;
    bool privileged;
    uint32_t pid;               /* 0: unknown */
    uint64_t mono_ms;           /* the clock the engine decided with; 0: not read */
};

/* ERR bad-request's reason for a DEBIT of @n above the max_debit of rule
 * @idx of @rs (eval_debit_check(); docs/protocol.md "DEBIT"); inside the
 * RCU section of @rs. */
static void debit_refused(const struct rules *rs, uint32_t idx, uint64_t n, char *buf,
                          size_t size)
{
    struct rules_rule r;

    if (rules_get(rs, idx, &r) < 0)
        snprintf(buf, size, "DEBIT %" PRIu64 " above a rule's max_debit", n);
    else
        snprintf(buf, size, "DEBIT %" PRIu64 " above max_debit %" PRId64 " of rule %s", n,
                 rules_max_debit(&r), r.id_str);
}

/* ERR no-counter's reason (docs/protocol.md "Errors"), logged (rate-limited):
 * the operator must size table.privileged_slots / max_actors (docs/pam.md). */
static const char *no_counter_reason(int r)
{
    static struct log_ratelimit rl_no_counter;
    const char *why = r == -EDQUOT ? "a privileged rule is at its max_actors: not counted"
                                   : "the privileged table is full: not counted";

    log_ratelimited(&rl_no_counter, LOG_ERR, "ERR no-counter: %s (raise table.privileged_slots "
                    "or the rule's max_actors)", why);
    return why;
}

/* The protocol error an engine error is counted as (metrics' code label). */
static enum proto_err error_code(int r)
{
    switch (r) {
    case -EPERM:
        return PROTO_E_FORBIDDEN;
    case -ERANGE:
        return PROTO_E_BAD_REQUEST;
    case -ENOSPC:
    case -EDQUOT:
        return PROTO_E_NO_COUNTER;
    default:
        return PROTO_E_UNKNOWN;
    }
}

/* @call's decision (@r, @err, @res under @rs) into the worker's decision log
 * buffer: a copy, nothing more (dlog_ring.h). */
static void engine_record(struct worker *w, const struct engine_call *call,
                          const struct rules *rs, int r, enum proto_err err,
                          const struct eval_result *res)
{
    struct dlog_note no = {
        .kv = call->kv, .n_kv = call->n_kv, .op = (uint8_t)call->op,
        .protocol = call->protocol == METRICS_PROTO_RESP  ? DLOG_PROTO_RESP
                    : call->protocol == METRICS_PROTO_RLS ? DLOG_PROTO_RLS
                                                          : DLOG_PROTO_LINE,
        .flags = (uint8_t)((call->privileged ? DLOG_F_PRIVILEGED : 0) |
                           (r < 0 ? DLOG_F_ERROR : 0)),
        .rematched = call->rematched, .err = r < 0 ? (uint16_t)err : 0,
        .uid = call->uid == (uid_t)-1 ? DLOG_UNKNOWN_ID : (uint32_t)call->uid,
        .pid = call->pid ? call->pid : DLOG_UNKNOWN_ID,
        .mono_ms = call->mono_ms ? call->mono_ms : clock_now_ms(),
        .generation = call->generation, .n = call->n,
    };

    dlog_decided(w, &no, rs, res);
}

/*
 * The one settle step: @call decided (@r as eval_request()'s or
 * engine_run()'s, @res, @rule) under @rs; counts it and calls its
 * completion.  Inside the RCU section of @rs.
 */
static void engine_settle(struct worker *w, const struct engine_call *call,
                          const struct rules *rs, int r, const struct eval_result *res,
                          const char *rule)
{
    struct engine_answer a = { .r = r < 0 ? r : 0 };
    char why[128];

    if (r < 0) {
        a.err = error_code(r);
        stat_inc(&w->st.errors);
        metrics_error(w->mw, a.err);
        if (r == -EPERM) {
            a.reason = "RESET needs root or the admin group on the Unix socket";
        } else if (r == -ERANGE) {
            debit_refused(rs, res->decider, call->n, why, sizeof(why));
            a.reason = why;
        } else if (r == -ENOSPC || r == -EDQUOT) {
            if (call->op == TABLE_TAKE)
                count_denial(w, METRICS_DENY_NO_COUNTER);
            a.reason = no_counter_reason(r);
        } else if (r == -ENOMEM) {
            a.reason = "out of memory";
        } else {
            errno = -r;
            log_ratelimited(&rl_internal, LOG_ERR, "evaluating a request failed: %m");
            a.reason = "internal error";
        }
        if (w->dlog)
            engine_record(w, call, rs, r, a.err, res);
        call->done(call->arg, &a);
        return;
    }
    if (!call->rematched)
        count_outcomes(w, rs, call->generation, call->op, res);
    if (call->op == TABLE_TAKE) {
        stat_inc(&w->st.hits);
        stat_inc(res->allowed ? &w->st.accepted : &w->st.rejected);
        metrics_decision(w->mw, call->protocol, res->allowed);
        metrics_hit_done(w->mw, call->start_ns);
    } else if (call->op == TABLE_RESET) {
        /* Only counters forgotten: not a resettable = false rule's, nor a
         * zero-semantics rule that has none. */
        log_msg(LOG_NOTICE, "RESET by uid %u: %u counter(s) on the path of rule %s reset",
                (unsigned)call->uid, res->n_reset, rule[0] ? rule : "?");
    }
    if (w->dlog)
        engine_record(w, call, rs, r, a.err, res);
    a.rs = rs;
    a.res = res;
    a.rule = rule;
    call->done(call->arg, &a);
}

/* ---- waiting hits ---------------------------------------------------------------------- */

void engine_env(const struct worker *w, const struct rules *rs, struct eval_env *env)
{
    *env = (struct eval_env){ .rules = rs, .fast = w->s->o.fast, .priv = w->s->o.priv,
                              .privileged = w->s->o.privileged,
                              .full_allow = w->s->o.full_allow };
}

struct table *engine_table_of(const struct worker *w, const struct rules_rule *r)
{
    struct eval_env env;

    engine_env(w, NULL, &env);
    return eval_table(&env, r);
}

struct rules_req engine_rq(const struct engine_hit *h)
{
    struct rules_req rq = { .kv = h->kv, .n_kv = h->n_kv, .privileged = h->privileged };

    return rq;
}

size_t engine_wait_size(void)
{
    return sizeof(struct engine_hit);
}

static struct engine_hit *hit_get(struct worker *w)
{
    struct engine_hit *h = w->hit_free;

    if (h) {
        w->hit_free = h->next;
        w->n_hit_free--;
    } else {
        h = calloc(1, sizeof(*h));
        if (!h)
            return NULL;
    }
    h->next = NULL;
    h->w = w;
    h->rematched = false;
    h->n_done = 0;
    h->step = 0;
    h->lease_tries = 0;
    h->actor_len = 0;
    h->rule[0] = '\0';
    /* Only the count: eval_decides() appends outcomes and sets the answer. */
    h->res.n = 0;
    h->res.n_reset = 0;
    return h;
}

static void hit_put(struct worker *w, struct engine_hit *h)
{
    if (w->n_hit_free < ENGINE_FREE_MAX) {
        h->next = w->hit_free;
        w->hit_free = h;
        w->n_hit_free++;
        return;
    }
    free(h->actor);
    free(h);
}

void engine_free(struct worker *w)
{
    struct engine_hit *h;

    while ((h = w->hit_free) != NULL) {
        w->hit_free = h->next;
        free(h->actor);
        free(h);
    }
    w->n_hit_free = 0;
}

static struct engine_call hit_call(const struct engine_hit *h)
{
    struct engine_call call = { .op = h->op, .n = h->n, .uid = h->uid,
                                .generation = h->generation, .start_ns = h->start_ns,
                                .rematched = h->rematched, .done = h->done,
                                .arg = h->done_arg, .protocol = h->protocol,
                                .kv = h->kv, .n_kv = h->n_kv, .privileged = h->privileged,
                                .pid = h->pid };

    return call;
}

void engine_on_store(void *arg, const struct store_reply *rep)
{
    struct engine_hit *h = arg;
    struct worker *w = h->w;
    const struct reload_state *st;
    struct engine_call call;
    int r;

    urcu_memb_read_lock();
    st = reload_current(w->s->o.reload);
    r = engine_resume(w, h, st, rep);
    if (r != 0) {
        call = hit_call(h);
        engine_settle(w, &call, st->rules, r, &h->res, h->rule);
    }
    urcu_memb_read_unlock();
    if (r != 0)
        hit_put(w, h);
}

/* @h waits: its own copy of the pairs, which point into the caller's scratch. */
static int hit_keep_request(struct engine_hit *h)
{
    size_t off = 0;

    for (unsigned i = 0; i < h->n_kv; i++) {
        const struct proto_kv *kv = &h->kv[i];

        if (off + kv->key_len + kv->value_len + 2 > sizeof(h->own_buf))
            return -EMSGSIZE;
        h->own_kv[i] = *kv;
        h->own_kv[i].key = memcpy(h->own_buf + off, kv->key, kv->key_len);
        off += kv->key_len;
        h->own_buf[off++] = '\0';
        h->own_kv[i].value = memcpy(h->own_buf + off, kv->value, kv->value_len);
        off += kv->value_len;
        h->own_buf[off++] = '\0';
    }
    h->kv = h->own_kv;
    return 0;
}

/*
 * Starts @h on the Redis path: its rule path under @rs, run from the first
 * rule (engine_run()'s result).  A DEBIT above a rule's max_debit is
 * -ERANGE, h->res.decider that rule, nothing charged (eval_debit_check(),
 * as eval_request() does on the local path).
 */
static int hit_begin(struct worker *w, struct engine_hit *h, const struct rules *rs)
{
    struct rules_req rq = engine_rq(h);
    struct rules_rule r;
    int rc;

    h->deadline = store_deadline(w->s->o.store, clock_now_ms());
    h->n_path = rules_match(rs, &rq, h->path);
    h->pos = 0;
    if (h->op == TABLE_DEBIT) {
        rc = eval_debit_check(rs, h->path, h->n_path, h->n, h->privileged, &r);
        if (rc < 0) {
            h->res.decider = h->res.limiter = r.index;
            return rc;
        }
    }
    return engine_run(w, h, rs);
}

void engine_wait_to(struct engine_hit *h, engine_done_fn *done, void *arg)
{
    h->done = done;
    h->done_arg = arg;
}

/* A request on a config that uses Redis; inside the RCU section of @st. */
static int hit_start(struct worker *w, const struct engine_req *rq,
                     const struct reload_state *st, struct engine_call *call,
                     struct engine_hit **ret_wait)
{
    struct engine_hit *h = hit_get(w);
    struct eval_result none = { 0 };
    int r;

    if (!h) {
        engine_settle(w, call, st->rules, -ENOMEM, &none, "");
        return 1;
    }
    h->op = rq->op;
    h->n = rq->n;
    h->privileged = rq->privileged;
    h->name_rule = rq->name_rule || rq->op == TABLE_RESET;
    h->uid = rq->uid;
    h->protocol = rq->protocol;
    h->pid = rq->pid;
    h->done = call->done;
    h->done_arg = call->arg;
    h->generation = st->generation;
    h->start_ns = call->start_ns;
    h->kv = rq->kv;
    h->n_kv = rq->n_kv;
    /* It may wait: its own copy of the pairs first (the caller's are scratch). */
    r = hit_keep_request(h);
    if (r == 0)
        r = hit_begin(w, h, st->rules);
    if (r == 0) {
        if (ret_wait)
            *ret_wait = h;
        return 0;
    }
    *call = hit_call(h);
    engine_settle(w, call, st->rules, r, &h->res, h->rule);
    hit_put(w, h);
    return 1;
}

/* ---- the entry ------------------------------------------------------------------------- */

int engine_submit(struct worker *w, const struct engine_req *rq, engine_done_fn *done,
                  void *arg, struct engine_hit **ret_wait)
{
    struct rules_req mq = { .kv = rq->kv, .n_kv = rq->n_kv, .privileged = rq->privileged };
    struct engine_call call = { .op = rq->op, .n = rq->n, .uid = rq->uid, .done = done,
                                .arg = arg, .start_ns = metrics_clock_ns(),
                                .protocol = rq->protocol, .kv = rq->kv, .n_kv = rq->n_kv,
                                .privileged = rq->privileged, .pid = rq->pid };
    const struct reload_state *st;
    struct eval_env env;
    struct eval_result res;
    struct rules_rule decider;
    char rule[RULES_LABEL_MAX + 1] = "";
    int r;

    urcu_memb_read_lock();
    st = reload_current(w->s->o.reload);
    call.generation = st->generation;
    if (rq->op == TABLE_RESET && !rq->privileged) {
        engine_settle(w, &call, st->rules, -EPERM, &(struct eval_result){ 0 }, "");
        urcu_memb_read_unlock();
        return 1;
    }
    /* Some rule lives in Redis: the path that can wait. */
    if (w->sc && rules_uses_store(st->rules)) {
        r = hit_start(w, rq, st, &call, ret_wait);
        urcu_memb_read_unlock();
        return r;
    }
    engine_env(w, st->rules, &env);
    call.mono_ms = clock_now_ms();
    r = eval_request(&env, &mq, rq->op, rq->n, call.mono_ms, &res);
    /* The rule's strings live in the rules: copied inside the section.  The
     * reply names the rule whose credit it shows (the limiter: a continue
     * rule tighter than the stop rule that decided), the decider otherwise. */
    if (r >= 0 && (rq->name_rule || rq->op == TABLE_RESET) &&
        rules_get(st->rules, res.limiter, &decider) >= 0)
        snprintf(rule, sizeof(rule), "%s", decider.id_str);
    engine_settle(w, &call, st->rules, r, &res, rule);
    urcu_memb_read_unlock();
    return 1;
}
