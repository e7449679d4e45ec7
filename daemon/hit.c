/* SPDX-License-Identifier: MIT */
/*
 * hit: HIT, TAKE, DEBIT, PEEK and RESET in a worker (see hit.h), and the reply FIFO
 * of the hits that wait.
 *
 * do_hit() decides a request on rules that live only on this host at once:
 * the rule walk of common/eval.h over the host tables, then the reply
 * (hit_format(): divvy's HIT line byte for byte, the extension verbs name
 * the rule) and the counts for STATS and metrics (count_outcomes()).  When
 * the path reaches a rule kept in Redis, hit_start() makes the request a
 * waiting hit instead, continued by hit_redis.c.
 *
 * Replies stay in request order while some hits wait: a waiting hit is a
 * slot (struct hit) in its connection's FIFO; a reply produced while a slot
 * is pending goes into the last slot's trailer (hit_trail()) instead of the
 * output buffer; when the store calls back (hit_on_store()) and the slot is
 * answered, the ready prefix of the FIFO moves to the output buffer and the
 * worker's flush event writes it.  Nothing of this runs, and nothing is
 * allocated, while no rule uses Redis.
 *
 * hit_submit() is the same evaluation for another protocol's request (one
 * RLS descriptor): decided at once or as a waiting hit with no connection,
 * counted as do_hit() counts, its answer handed to the caller's callback
 * (hit_submitted()) instead of a reply line.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <urcu/urcu-memb.h>

#include "clock.h"
#include "conn.h"
#include "eval.h"
#include "hit.h"
#include "hit_int.h"
#include "log.h"
#include "proto.h"
#include "resp.h"
#include "srv_int.h"
#include "store.h"
#include "worker.h"

#define HIT_FREE_MAX      256       /* recycled hit slots per worker */

static struct log_ratelimit rl_internal, rl_full;

/* ---- requests ------------------------------------------------------------ */

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

bool hit_names_rule(const struct conn *c, enum proto_verb verb)
{
    return verb != PROTO_HIT || c->proto != CONFIG_PROTO_DIVVY;
}

/* Counts a decided request and writes its reply as @proto speaks it; returns the length. */
static size_t hit_format(struct worker *w, enum config_proto proto, uid_t uid,
                         enum proto_verb verb, enum table_op op, const struct eval_result *res,
                         const char *rule, char *line, size_t size)
{
    int n;

    if (op == TABLE_TAKE) {
        stat_inc(&w->st.hits);
        stat_inc(res->allowed ? &w->st.accepted : &w->st.rejected);
    } else if (op == TABLE_RESET) {
        /* Only counters forgotten: not a resettable = false rule's, nor a
         * zero-semantics rule that has none. */
        log_msg(LOG_NOTICE, "RESET by uid %u: %u counter(s) on the path of rule %s reset",
                (unsigned)uid, res->n_reset, rule[0] ? rule : "?");
    }
    /* HIT's reply is divvy's, byte for byte; the extension verbs name the rule. */
    if (proto == CONFIG_PROTO_RESP)
        n = resp_fmt_hit(line, size, res->allowed, res->credit, res->reset_s, rule);
    else if (verb == PROTO_HIT)
        n = proto_fmt_ok(line, size, res->allowed, res->credit, res->reset_s);
    else
        n = proto_fmt_ok_rule(line, size, res->allowed, res->credit, res->reset_s, rule);
    return n > 0 ? (size_t)n : 0;
}

static enum table_op op_of(enum proto_verb verb)
{
    switch (verb) {
    case PROTO_PEEK:
        return TABLE_PEEK;
    case PROTO_RESET:
        return TABLE_RESET;
    case PROTO_DEBIT:
        return TABLE_DEBIT;
    default:
        return TABLE_TAKE;
    }
}

static void hit_start(struct conn *c, const struct proto_req *req,
                      const struct reload_state *st);

void hit_env(const struct worker *w, const struct rules *rs, struct eval_env *env)
{
    *env = (struct eval_env){ .rules = rs, .fast = w->s->o.fast, .priv = w->s->o.priv,
                              .privileged = w->s->o.privileged,
                              .full_allow = w->s->o.full_allow };
}

struct table *hit_table_of(const struct worker *w, const struct rules_rule *r)
{
    struct eval_env env;

    hit_env(w, NULL, &env);
    return eval_table(&env, r);
}

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
const char *hit_no_counter_reason(int r)
{
    static struct log_ratelimit rl_no_counter;
    const char *why = r == -EDQUOT ? "a privileged rule is at its max_actors: not counted"
                                   : "the privileged table is full: not counted";

    log_ratelimited(&rl_no_counter, LOG_ERR, "ERR no-counter: %s (raise table.privileged_slots "
                    "or the rule's max_actors)", why);
    return why;
}

void do_hit(struct conn *c, const struct proto_req *req)
{
    struct worker *w = c->w;
    struct rules_req rq = { .kv = req->kv, .n_kv = req->n_kv, .privileged = c->privileged };
    enum table_op op = op_of(req->verb);
    const struct reload_state *st;
    struct eval_env env;
    struct eval_result res;
    struct rules_rule decider;
    char rule[RULES_LABEL_MAX + 1] = "", line[PROTO_REPLY_MAX], why[128];
    uint64_t start_ns = metrics_clock_ns();
    size_t n;
    int r;

    if (req->verb == PROTO_RESET && !c->privileged) {
        reply_err(c, PROTO_E_FORBIDDEN, "RESET needs root or the admin group on the Unix socket");
        return;
    }
    urcu_memb_read_lock();
    st = reload_current(w->s->o.reload);
    /* Some rule lives in Redis: the path that can wait (below). */
    if (w->sc && rules_uses_store(st->rules)) {
        hit_start(c, req, st);
        urcu_memb_read_unlock();
        return;
    }
    hit_env(w, st->rules, &env);
    r = eval_request(&env, &rq, op, req->amount, clock_now_ms(), &res);
    if (r >= 0) {
        count_outcomes(w, st->rules, st->generation, op, &res);
        /* The rule's strings live in the rules: copy before leaving the section. */
        if (hit_names_rule(c, req->verb) && rules_get(st->rules, res.decider, &decider) >= 0)
            snprintf(rule, sizeof(rule), "%s", decider.id_str);
    } else if (r == -ERANGE) {
        debit_refused(st->rules, res.decider, req->amount, why, sizeof(why));
    }
    urcu_memb_read_unlock();
    if (r == -ERANGE) {
        reply_err(c, PROTO_E_BAD_REQUEST, why);
        return;
    }
    if (r == -ENOSPC || r == -EDQUOT) {
        if (op == TABLE_TAKE)
            count_denial(w, METRICS_DENY_NO_COUNTER);
        reply_err(c, PROTO_E_NO_COUNTER, hit_no_counter_reason(r));
        return;
    }
    if (r < 0) {
        errno = -r;
        log_ratelimited(&rl_internal, LOG_ERR, "evaluating a request failed: %m");
        reply_err(c, PROTO_E_UNKNOWN, "internal error");
        return;
    }
    n = hit_format(w, c->proto, c->uid, req->verb, op, &res, rule, line, sizeof(line));
    out_append(c, line, n);
    if (op == TABLE_TAKE)
        metrics_hit_done(w->mw, start_ns);
}

/* ---- the reply FIFO of waiting hits (docs/daemon.md) -------------------------------- */

static struct hit *hit_get(struct worker *w)
{
    struct hit *h = w->hit_free;

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
    h->c = NULL;
    h->done = false;
    h->reply_len = 0;
    h->trailer_len = 0;
    h->rematched = false;
    h->n_done = 0;
    h->step = 0;
    h->lease_tries = 0;
    h->actor_len = 0;
    h->rule[0] = '\0';
    h->done_fn = NULL;
    /* Only the count: eval_decides() appends outcomes and sets the answer. */
    h->res.n = 0;
    h->res.n_reset = 0;
    return h;
}

void hit_put(struct worker *w, struct hit *h)
{
    /* Long replies are rare (COUNTERS): not kept for the next user. */
    free(h->text);
    h->text = NULL;
    h->text_len = 0;
    if (w->n_hit_free < HIT_FREE_MAX) {
        h->next = w->hit_free;
        w->hit_free = h;
        w->n_hit_free++;
        return;
    }
    free(h->trailer);
    free(h->actor);
    free(h);
}

void hits_free(struct worker *w)
{
    struct hit *h;

    while ((h = w->hit_free) != NULL) {
        w->hit_free = h->next;
        free(h->trailer);
        free(h->actor);
        free(h);
    }
    w->n_hit_free = 0;
}

/* A reply produced while hits wait: after the last of them. */
void hit_trail(struct conn *c, const char *s, size_t len)
{
    struct hit *h = c->pend_tail;

    if (h->trailer_len + len > h->trailer_cap) {
        size_t cap = h->trailer_cap ? h->trailer_cap : 512;
        char *grown;

        while (cap < h->trailer_len + len)
            cap *= 2;
        grown = realloc(h->trailer, cap);
        if (!grown) {
            c->dead = true;
            return;
        }
        h->trailer = grown;
        h->trailer_cap = cap;
    }
    memcpy(h->trailer + h->trailer_len, s, len);
    h->trailer_len += len;
    c->pend_bytes += len;
}

/* Moves the answered prefix of the FIFO to the output buffer. */
static void conn_pend_flush(struct conn *c)
{
    struct hit *h;

    while ((h = c->pend_head) != NULL && h->done) {
        c->pend_head = h->next;
        if (!c->pend_head)
            c->pend_tail = NULL;
        c->n_pend--;
        c->pend_bytes -= h->trailer_len + h->text_len;
        if (!c->dead) {
            out_append_direct(c, h->reply, h->reply_len);
            if (h->text_len)
                out_append_direct(c, h->text, h->text_len);
            if (h->trailer_len)
                out_append_direct(c, h->trailer, h->trailer_len);
        }
        hit_put(c->w, h);
    }
}

static void conn_mark_dirty(struct conn *c)
{
    struct worker *w = c->w;

    if (!c->dirty) {
        c->dirty = true;
        c->dirty_next = w->dirty;
        w->dirty = c;
    }
    if (!w->flush_active) {
        w->flush_active = true;
        event_active(w->flush_ev, 0, 0);
    }
}

struct rules_req hit_rq(const struct hit *h)
{
    struct rules_req rq = { .kv = h->req->kv, .n_kv = h->req->n_kv,
                            .privileged = h->privileged };

    return rq;
}

static void hit_finish(struct worker *w, struct hit *h, const struct rules *rs, int r)
{
    char why[128];
    int n;

    if (r == -ERANGE) {
        stat_inc(&w->st.errors);
        metrics_error(w->mw, PROTO_E_BAD_REQUEST);
        debit_refused(rs, h->res.decider, h->n, why, sizeof(why));
        n = conn_fmt_err(h->c->proto, h->reply, sizeof(h->reply), PROTO_E_BAD_REQUEST, why);
        h->reply_len = n > 0 ? (size_t)n : 0;
    } else if (r == -ENOSPC || r == -EDQUOT) {
        stat_inc(&w->st.errors);
        metrics_error(w->mw, PROTO_E_NO_COUNTER);
        if (h->op == TABLE_TAKE)
            count_denial(w, METRICS_DENY_NO_COUNTER);
        n = conn_fmt_err(h->c->proto, h->reply, sizeof(h->reply), PROTO_E_NO_COUNTER,
                         hit_no_counter_reason(r));
        h->reply_len = n > 0 ? (size_t)n : 0;
    } else if (r < 0) {
        errno = -r;
        log_ratelimited(&rl_internal, LOG_ERR, "evaluating a request failed: %m");
        stat_inc(&w->st.errors);
        n = conn_fmt_err(h->c->proto, h->reply, sizeof(h->reply), PROTO_E_UNKNOWN,
                         "internal error");
        h->reply_len = n > 0 ? (size_t)n : 0;
    } else {
        if (!h->rematched)
            count_outcomes(w, rs, h->generation, h->op, &h->res);
        if (h->op == TABLE_TAKE)
            metrics_hit_done(w->mw, h->start_ns);
        h->reply_len = hit_format(w, h->c->proto, h->uid, h->verb, h->op, &h->res, h->rule,
                                  h->reply, sizeof(h->reply));
    }
    h->done = true;
}

/* A hit_submit() hit decided (@r as hit_run()'s): counted as hit_finish()
 * counts, answered to its caller instead of a connection. */
static void hit_submitted(struct worker *w, struct hit *h, const struct rules *rs, int r)
{
    if (r == -ERANGE) {
        stat_inc(&w->st.errors);
        metrics_error(w->mw, PROTO_E_BAD_REQUEST);
    } else if (r == -ENOSPC || r == -EDQUOT) {
        stat_inc(&w->st.errors);
        metrics_error(w->mw, PROTO_E_NO_COUNTER);
        if (h->op == TABLE_TAKE)
            count_denial(w, METRICS_DENY_NO_COUNTER);
        hit_no_counter_reason(r);
    } else if (r < 0) {
        errno = -r;
        log_ratelimited(&rl_internal, LOG_ERR, "evaluating a request failed: %m");
        stat_inc(&w->st.errors);
    } else {
        if (!h->rematched)
            count_outcomes(w, rs, h->generation, h->op, &h->res);
        if (h->op == TABLE_TAKE) {
            stat_inc(&w->st.hits);
            stat_inc(h->res.allowed ? &w->st.accepted : &w->st.rejected);
            metrics_hit_done(w->mw, h->start_ns);
        }
    }
    h->done_fn(h->done_arg, r < 0 ? r : 0, rs, r < 0 ? NULL : &h->res);
}

void hit_on_store(void *arg, const struct store_reply *rep)
{
    struct hit *h = arg;
    struct worker *w = h->w;
    struct conn *c = h->c;
    const struct reload_state *st;
    int r;

    urcu_memb_read_lock();
    st = reload_current(w->s->o.reload);
    r = hit_resume(w, h, st, rep);
    if (r != 0 && h->done_fn) {
        hit_submitted(w, h, st->rules, r);
        urcu_memb_read_unlock();
        hit_put(w, h);
        return;
    }
    if (r != 0)
        hit_finish(w, h, st->rules, r);
    urcu_memb_read_unlock();
    if (r == 0)
        return;                 /* waits for the next rule */
    c->n_waiting--;
    conn_pend_flush(c);
    /* Written (and a dead connection freed) by the flush event, not here. */
    conn_mark_dirty(c);
}

/* @h waits at the end of @c's reply FIFO. */
static void hit_enqueue(struct conn *c, struct hit *h)
{
    if (c->pend_tail)
        c->pend_tail->next = h;
    else
        c->pend_head = h;
    c->pend_tail = h;
    c->n_pend++;
    c->n_waiting++;
}

/* Slot @h for request @req of a peer (@privileged, @uid) under the rules of
 * @generation: what every waiting hit starts with. */
static void hit_setup(struct hit *h, const struct proto_req *req, bool privileged, uid_t uid,
                      uint64_t generation)
{
    h->verb = req->verb;
    h->op = op_of(req->verb);
    h->start_ns = metrics_clock_ns();
    h->n = req->amount;
    h->privileged = privileged;
    h->uid = uid;
    h->generation = generation;
    h->req = req;
}

/* @h waits: its own copy of @req, whose pairs point into the worker's
 * scratch that the next request reuses. */
static void hit_keep_request(struct hit *h, const struct proto_req *req)
{
    memcpy(&h->own, req, sizeof(*req));
    for (unsigned i = 0; i < req->n_kv; i++) {
        h->own.kv[i].key = h->own.buf + (req->kv[i].key - req->buf);
        h->own.kv[i].value = h->own.buf + (req->kv[i].value - req->buf);
    }
    h->req = &h->own;
}

/*
 * Starts @h (set up by hit_setup()) on the Redis path: its rule path under
 * @rs, run from the first rule (hit_run()'s result).  A DEBIT above a
 * rule's max_debit is -ERANGE, h->res.decider that rule, nothing charged
 * (eval_debit_check(), as eval_request() does on the local path).
 */
static int hit_begin(struct worker *w, struct hit *h, const struct rules *rs)
{
    struct rules_req rq = hit_rq(h);
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
    return hit_run(w, h, rs);
}

/* A request on a config that uses Redis; inside the RCU section of @st. */
static void hit_start(struct conn *c, const struct proto_req *req, const struct reload_state *st)
{
    struct worker *w = c->w;
    struct hit *h;
    int r;

    h = hit_get(w);
    if (!h) {
        reply_err(c, PROTO_E_UNKNOWN, "out of memory");
        return;
    }
    h->c = c;
    hit_setup(h, req, c->privileged, c->uid, st->generation);
    r = hit_begin(w, h, st->rules);
    if (r == 0) {
        /* It waits: keep the request (the scratch is reused) and take a slot. */
        hit_keep_request(h, req);
        hit_enqueue(c, h);
        return;
    }
    hit_finish(w, h, st->rules, r);
    out_append(c, h->reply, h->reply_len);
    hit_put(w, h);
}

struct hit *hit_wait(struct conn *c)
{
    struct hit *h = hit_get(c->w);

    if (!h)
        return NULL;
    h->c = c;
    hit_enqueue(c, h);
    return h;
}

void hit_answer(struct hit *h, char *text, size_t len)
{
    struct conn *c = h->c;

    h->text = text;
    h->text_len = len;
    h->done = true;
    c->pend_bytes += len;
    c->n_waiting--;
    conn_pend_flush(c);
    /* Written (and a dead connection freed) by the flush event, not here. */
    conn_mark_dirty(c);
}

void hit_submit(struct worker *w, const struct proto_req *req, bool privileged, uid_t uid,
                hit_done_fn *done, void *arg)
{
    struct rules_req rq = { .kv = req->kv, .n_kv = req->n_kv, .privileged = privileged };
    const struct reload_state *st;
    struct hit *h;
    int r;

    urcu_memb_read_lock();
    st = reload_current(w->s->o.reload);
    h = hit_get(w);
    if (!h) {
        urcu_memb_read_unlock();
        stat_inc(&w->st.errors);
        done(arg, -ENOMEM, NULL, NULL);
        return;
    }
    h->done_fn = done;
    h->done_arg = arg;
    hit_setup(h, req, privileged, uid, st->generation);
    if (w->sc && rules_uses_store(st->rules)) {
        /* The Redis path from the first rule, as hit_start() takes it. */
        r = hit_begin(w, h, st->rules);
        if (r == 0) {
            hit_keep_request(h, req);
            urcu_memb_read_unlock();
            return;             /* hit_on_store() answers */
        }
    } else {
        struct eval_env env;

        hit_env(w, st->rules, &env);
        r = eval_request(&env, &rq, h->op, h->n, clock_now_ms(), &h->res);
    }
    hit_submitted(w, h, st->rules, r);
    urcu_memb_read_unlock();
    hit_put(w, h);
}
