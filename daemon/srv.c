/* SPDX-License-Identifier: MIT */
/*
 * srv: the server (see srv.h) and, for now, the hit path (see hit.h).
 *
 * The server: srv_new() binds the listeners (listener.h) and prepares the
 * workers (worker.h); srv_run() starts them and runs the main thread's loop
 * (signals, the 1 s maintenance tick: fast-table heartbeat, gauges for
 * metrics and systemd's STATUS=, the watchdog, table sweeps).  The main
 * thread owns signals and the tick; each worker owns an event_base, its
 * connections (conn.h) and its statistics.
 *
 * The hit path: HIT, TAKE, PEEK and RESET decided locally (do_hit()) or, when
 * a rule lives in Redis, as a waiting hit continued by store callbacks.
 * Replies stay in request order while some hits wait for Redis: a waiting
 * hit is a slot (struct hit) in its connection's FIFO; a reply produced
 * while a slot is pending goes into the last slot's trailer instead of the
 * output buffer; a store callback fills its slot and moves the ready prefix
 * of the FIFO to the output buffer.  Nothing of this runs, and nothing is
 * allocated, while no rule uses Redis.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <urcu/urcu-memb.h>

#include "admit.h"
#include "clock.h"
#include "conn.h"
#include "eval.h"
#include "hit.h"
#include "listener.h"
#include "log.h"
#include "proto.h"
#include "srv.h"
#include "srv_int.h"
#include "store.h"
#include "worker.h"

#define SWEEP_EVERY_S     10
#define HIT_FREE_MAX      256       /* recycled hit slots per worker */

static struct log_ratelimit rl_internal, rl_full;

/* ---- requests ------------------------------------------------------------ */

static void count_outcomes(struct worker *w, const struct rules *rules, uint64_t generation,
                           enum table_op op, const struct eval_result *res)
{
    for (unsigned i = 0; i < res->n; i++) {
        if (res->o[i].table_full) {
            stat_inc(&w->st.table_full);
            log_ratelimited(&rl_full, LOG_WARNING,
                            "counter table full or max_actors reached (rule %u): %s",
                            res->o[i].rule, w->s->o.full_allow ? "allowed" : "denied");
        }
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
}

/* Counts a decided request and writes its reply line; returns the length. */
static size_t hit_format(struct worker *w, uid_t uid, enum proto_verb verb, enum table_op op,
                         const struct eval_result *res, const char *rule, char *line,
                         size_t size)
{
    int n;

    if (op == TABLE_TAKE) {
        stat_inc(&w->st.hits);
        stat_inc(res->allowed ? &w->st.accepted : &w->st.rejected);
    } else if (op == TABLE_RESET) {
        /* Only counters forgotten: not a resettable = false rule's, nor a
         * zero-semantics rule that has none. */
        log_msg(LOG_NOTICE, "RESET by uid %u: %u counter(s) on the path of rule %u reset",
                (unsigned)uid, res->n_reset, res->decider);
    }
    /* HIT's reply is divvy's, byte for byte; the extension verbs name the rule. */
    if (verb == PROTO_HIT)
        n = proto_fmt_ok(line, size, res->allowed, res->credit, res->reset_s);
    else
        n = proto_fmt_ok_rule(line, size, res->allowed, res->credit, res->reset_s, rule);
    return n > 0 ? (size_t)n : 0;
}

static enum table_op op_of(enum proto_verb verb)
{
    return verb == PROTO_PEEK ? TABLE_PEEK : verb == PROTO_RESET ? TABLE_RESET : TABLE_TAKE;
}

static void hit_start(struct conn *c, const struct proto_req *req,
                      const struct reload_state *st);

/* The table of rule @r's host counters (eval_table()). */
/* The tables of this daemon, and rules @rs, as eval.c sees them. */
static void hit_env(const struct worker *w, const struct rules *rs, struct eval_env *env)
{
    *env = (struct eval_env){ .rules = rs, .fast = w->s->o.fast, .priv = w->s->o.priv,
                              .privileged = w->s->o.privileged,
                              .full_allow = w->s->o.full_allow };
}

static struct table *srv_table_of(const struct worker *w, const struct rules_rule *r)
{
    struct eval_env env;

    hit_env(w, NULL, &env);
    return eval_table(&env, r);
}

/* ERR no-counter's reason (docs/protocol.md "Errors"), logged (rate-limited):
 * the operator must size table.privileged_slots / max_actors (docs/pam.md). */
static const char *srv_no_counter_reason(int r)
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
    char rule[RULES_LABEL_MAX + 1] = "", line[PROTO_REPLY_MAX];
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
        if (req->verb != PROTO_HIT && rules_get(st->rules, res.decider, &decider) >= 0)
            snprintf(rule, sizeof(rule), "%s", decider.id_str);
    }
    urcu_memb_read_unlock();
    if (r == -ENOSPC || r == -EDQUOT) {
        reply_err(c, PROTO_E_NO_COUNTER, srv_no_counter_reason(r));
        return;
    }
    if (r < 0) {
        errno = -r;
        log_ratelimited(&rl_internal, LOG_ERR, "evaluating a request failed: %m");
        reply_err(c, PROTO_E_UNKNOWN, "internal error");
        return;
    }
    n = hit_format(w, c->uid, req->verb, op, &res, rule, line, sizeof(line));
    out_append(c, line, n);
    if (op == TABLE_TAKE)
        metrics_hit_done(w->mw, start_ns);
}

/* ---- hits on the Redis path (docs/redis.md, docs/daemon.md) ------------------------- */

static struct log_ratelimit rl_store;

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
        c->pend_bytes -= h->trailer_len;
        if (!c->dead) {
            out_append_direct(c, h->reply, h->reply_len);
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

static bool hit_id_done(const struct hit *h, uint64_t id)
{
    for (unsigned i = 0; i < h->n_done; i++) {
        if (h->done_ids[i] == id)
            return true;
    }
    return false;
}

static void hit_mark_done(struct hit *h, uint64_t id)
{
    if (h->n_done < RULES_MATCH_MAX)
        h->done_ids[h->n_done++] = id;
}

static struct rules_req hit_rq(const struct hit *h)
{
    struct rules_req rq = { .kv = h->req->kv, .n_kv = h->req->n_kv,
                            .privileged = h->privileged };

    return rq;
}

/* What rule @r answers when Redis cannot (store.on_redis_error). */
static int hit_fallback(struct worker *w, struct hit *h, const struct rules *rs,
                        const struct rules_rule *r, struct eval_outcome *o)
{
    struct rules_req rq = hit_rq(h);
    struct eval_env env;

    stat_inc(&w->st.redis_fallbacks);
    if (h->op == TABLE_RESET || w->s->o.on_redis_error == CONFIG_REDIS_ERROR_LOCAL) {
        hit_env(w, rs, &env);
        return eval_rule(&env, r, &rq, h->op, h->n, clock_now_ms(), o);
    }
    memset(o, 0, sizeof(*o));
    o->rule = r->index;
    if (w->s->o.on_redis_error == CONFIG_REDIS_ERROR_OPEN) {
        o->allowed = h->n <= (uint64_t)r->credit_limit;
        o->credit = (uint64_t)r->credit_limit;
    }
    return 0;
}

void lease_limits(const struct worker *w, const struct rules_rule *r,
                         struct table_limits *lim)
{
    eval_limits(r, lim);
    lim->lease = true;
    lim->lease_max = w->s->o.lease_max;
    if (lim->lease_max > TABLE_LEASE_MAX)
        lim->lease_max = TABLE_LEASE_MAX;
}

/* A background lease refill: not tied to any request. */
struct refill {
    struct table *t;
    struct table_limits lim;
    uint64_t rule_id;
    uint64_t sent_ms;
    size_t actor_len;
    char actor[];
};

static void refill_done(void *arg, const struct store_reply *rep)
{
    struct refill *f = arg;
    struct table_key key = { .rule_id = f->rule_id, .actor = f->actor,
                             .actor_len = f->actor_len };
    uint64_t now = clock_now_ms();
    int r;

    if (rep && rep->n >= 4 && rep->v[0] >= 0 && rep->v[1] >= 0 && rep->v[2] >= 0) {
        struct table_lease_grant g = {
            .granted = (uint64_t)rep->v[0], .remain = (uint64_t)rep->v[1],
            .end_ms = f->sent_ms + (uint64_t)rep->v[2], .created = rep->v[3] != 0,
            .fetch = true,
        };

        r = table_lease_grant(f->t, &key, &f->lim, &g, now);
        if (r < 0) {
            errno = -r;
            log_ratelimited(&rl_store, LOG_WARNING, "lease of %llu credits lost: %m",
                            (unsigned long long)g.granted);
        }
    } else {
        table_lease_abort(f->t, &key, &f->lim, now);
    }
    free(f);
}

bool lease_refill(struct worker *w, struct table *t, const struct table_limits *lim,
                         const struct rules_rule *r, const char *actor, size_t actor_len,
                         const char *key, size_t key_len, uint64_t want)
{
    struct table_key tk = { .rule_id = r->id, .actor = actor, .actor_len = actor_len };
    int64_t args[4] = { (int64_t)want, r->credit_limit, (int64_t)lim->reset_ms,
                        TABLE_LEASE_DIVISOR };
    uint64_t now = clock_now_ms();
    struct refill *f;

    f = malloc(sizeof(*f) + actor_len);
    if (!f) {
        table_lease_abort(t, &tk, lim, now);
        return false;
    }
    f->t = t;
    f->lim = *lim;
    f->rule_id = r->id;
    f->sent_ms = now;
    f->actor_len = actor_len;
    memcpy(f->actor, actor, actor_len);
    if (store_eval(w->sc, STORE_SCRIPT_LEASE, key, key_len, NULL, args, 4,
                   store_deadline(w->s->o.store, now), refill_done, f) < 0) {
        table_lease_abort(t, &tk, lim, now);
        free(f);
        return false;
    }
    stat_inc(&w->st.lease_fetches);
    return true;
}

static int hit_keep_actor(struct hit *h, const char *actor, size_t len)
{
    if (len > h->actor_cap) {
        char *grown = realloc(h->actor, len);

        if (!grown)
            return -ENOMEM;
        h->actor = grown;
        h->actor_cap = len;
    }
    if (len)
        memcpy(h->actor, actor, len);
    h->actor_len = len;
    return 0;
}

static void hit_on_store(void *arg, const struct store_reply *rep);

/* Before a step goes to Redis: the key (into w->key_buf, *ret_klen) and
 * what the reply will need of rule @r (its strings die with a reload). */
static int hit_prepare(struct store *st, struct hit *h, const struct rules_rule *r,
                       struct worker *w, size_t alen, int *ret_klen)
{
    size_t n = strlen(r->id_str);
    int klen;

    klen = store_key(st, r->id_str, w->actor_buf, alen, w->key_buf, w->key_cap);
    if (klen < 0)
        return klen;
    h->step_rule = *r;
    if (n >= sizeof(h->step_id))
        n = sizeof(h->step_id) - 1;
    memcpy(h->step_id, r->id_str, n);
    h->step_id[n] = '\0';
    *ret_klen = klen;
    return 0;
}

/*
 * Rule @r (lease or strict) for hit @h: 0 with *o filled (decided here: a
 * lease hit, or on_redis_error), 1 when a store request was sent (the hit
 * waits for hit_on_store()), or -errno.
 */
static int hit_remote(struct worker *w, struct hit *h, const struct rules *rs,
                      const struct rules_rule *r, struct eval_outcome *o)
{
    struct store *st = w->s->o.store;
    struct rules_req rq = hit_rq(h);
    struct table *t = srv_table_of(w, r);
    struct table_limits lim;
    struct table_lease_result lr;
    struct table_key tk;
    struct eval_env env;
    enum table_op op = h->op;
    enum store_script script;
    uint64_t now = clock_now_ms();
    int64_t args[STORE_ARGS_MAX];
    unsigned n_args = 0;
    int alen, klen = -1, rc;

    op = eval_rule_op(r, op, h->n);
    alen = rules_actor(rs, r->index, &rq, w->actor_buf, RULES_ACTOR_MAX);
    if (alen < 0)
        return alen;
    /* The Redis key and the step's rule only when Redis is asked (below):
     * a lease hit decided here needs neither. */
    if (r->store != RULES_STORE_LEASE || op != TABLE_TAKE) {
        rc = hit_prepare(st, h, r, w, (size_t)alen, &klen);
        if (rc < 0)
            return rc;
    }
    eval_limits(r, &lim);
    tk.rule_id = r->id;
    tk.actor = w->actor_buf;
    tk.actor_len = (size_t)alen;

    if (op == TABLE_RESET) {
        /* This host's counters now (the local one and the lease), then Redis. */
        hit_env(w, rs, &env);
        rc = eval_rule(&env, r, &rq, TABLE_RESET, h->n, now, o);
        if (rc < 0)
            return rc;
        if (r->store == RULES_STORE_LEASE) {
            struct table_result tr;

            lease_limits(w, r, &lim);
            table_hit(t, &tk, &lim, TABLE_RESET, 0, now, &tr);
        }
        h->step_o = *o;
        rc = store_del(w->sc, w->key_buf, (size_t)klen, h->deadline, hit_on_store, h);
        if (rc < 0) {
            log_ratelimited(&rl_store, LOG_WARNING, "RESET of rule %s: Redis unreachable, "
                            "only this host's counters were reset", r->id_str);
            stat_inc(&w->st.redis_fallbacks);
            return 0;
        }
        h->step = STEP_DEL;
        return 1;
    }

    if (r->store == RULES_STORE_LEASE && op == TABLE_TAKE) {
        lease_limits(w, r, &lim);
        hit_env(w, rs, &env);
        /* After two fetches that others drained first, take it directly. */
        rc = eval_lease(&env, r, &lim, &tk, h->n, h->lease_tries < 2, now, o, &lr);
        if (rc < 0 || (rc == 0 && !o->counted))
            return rc;                  /* ERR no-counter, or the full-table outcome */
        switch (lr.verdict) {
        case TABLE_LEASE_ALLOWED:
        case TABLE_LEASE_DENIED:
            if (lr.refill) {
                rc = store_key(st, r->id_str, w->actor_buf, (size_t)alen, w->key_buf,
                               w->key_cap);
                if (rc > 0)
                    lease_refill(w, t, &lim, r, w->actor_buf, (size_t)alen, w->key_buf,
                                 (size_t)rc, lr.want);
                else
                    table_lease_abort(t, &tk, &lim, now);
            }
            return 0;
        case TABLE_LEASE_FETCH:
            rc = hit_prepare(st, h, r, w, (size_t)alen, &klen);
            if (rc >= 0)
                rc = hit_keep_actor(h, w->actor_buf, (size_t)alen);
            args[0] = (int64_t)lr.want;
            args[1] = r->credit_limit;
            args[2] = (int64_t)lim.reset_ms;
            args[3] = TABLE_LEASE_DIVISOR;
            if (rc >= 0)
                rc = store_eval(w->sc, STORE_SCRIPT_LEASE, w->key_buf, (size_t)klen, NULL, args,
                                4, h->deadline, hit_on_store, h);
            if (rc < 0) {
                table_lease_abort(t, &tk, &lim, now);
                return hit_fallback(w, h, rs, r, o);
            }
            stat_inc(&w->st.lease_fetches);
            h->step = STEP_FETCH;
            h->sent_ms = now;
            return 1;
        case TABLE_LEASE_ASK:
            rc = hit_prepare(st, h, r, w, (size_t)alen, &klen);
            if (rc >= 0)
                rc = hit_keep_actor(h, w->actor_buf, (size_t)alen);
            if (rc < 0)
                return rc;
            h->step = STEP_ASK;
            break;
        }
    } else {
        h->step = STEP_STRICT;
    }

    /* Strict (and lease PEEK and ASK): one script decides in Redis. */
    switch (r->algo) {
    case RULES_ALGO_TOKEN_BUCKET:
        script = STORE_SCRIPT_BUCKET;
        args[n_args++] = (int64_t)h->n;
        args[n_args++] = r->credit_limit;
        args[n_args++] = (int64_t)lim.refill_amount;
        args[n_args++] = (int64_t)lim.refill_ms;
        args[n_args++] = r->strict;
        break;
    case RULES_ALGO_SLIDING_WINDOW:
        script = STORE_SCRIPT_SLIDING;
        args[n_args++] = (int64_t)h->n;
        args[n_args++] = r->credit_limit;
        args[n_args++] = (int64_t)lim.reset_ms;
        break;
    case RULES_ALGO_WINDOW:
    default:
        script = STORE_SCRIPT_WINDOW;
        args[n_args++] = (int64_t)h->n;
        args[n_args++] = r->credit_limit;
        args[n_args++] = (int64_t)lim.reset_ms;
        break;
    }
    rc = store_eval(w->sc, script, w->key_buf, (size_t)klen, op == TABLE_TAKE ? "take" : "peek",
                    args, n_args, h->deadline, hit_on_store, h);
    if (rc < 0)
        return hit_fallback(w, h, rs, r, o);
    h->sent_ms = now;
    return 1;
}

/* What hit_step() needs besides the walk. */
struct hit_walk {
    struct worker *w;
    struct hit *h;
    const struct rules *rs;
    struct eval_env env;
    struct rules_req rq;
    struct rules_rule r;        /* the rule of the last step */
};

/*
 * The walk's step on divvyd's Redis path: a local rule (or one that keeps
 * no counter) from the host tables as eval_request() does, a lease or strict
 * rule by hit_remote(): EVAL_WAIT when it asked the store.
 */
static int hit_step(void *ctx, const struct eval_walk *at, const struct rules_rule **ret_r,
                    struct eval_outcome *o)
{
    struct hit_walk *hw = ctx;
    struct hit *h = hw->h;
    int rc;

    rc = rules_get(hw->rs, at->path[at->pos], &hw->r);
    if (rc < 0)
        return rc;
    *ret_r = &hw->r;
    if (hw->r.store == RULES_STORE_LOCAL || eval_zero(&hw->r, o))
        rc = eval_rule(&hw->env, &hw->r, &hw->rq, h->op, h->n, clock_now_ms(), o);
    else
        rc = hit_remote(hw->w, h, hw->rs, &hw->r, o);
    if (rc == 0)
        hit_mark_done(h, hw->r.id);
    return rc;
}

/* @h's walk where it stands (h->pos, kept in @h while it waits). */
static struct eval_walk hit_walk_at(struct hit *h)
{
    struct eval_walk at = { .path = h->path, .n_path = h->n_path, .pos = h->pos, .op = h->op,
                            .res = &h->res };

    return at;
}

/*
 * Runs @h's path from h->pos (eval_walk() with hit_step()): 1 when a rule
 * decided (h->res, h->rule), 0 when it waits for the store, -errno.  Inside
 * the RCU read-side section that yielded @rs.
 */
static int hit_run(struct worker *w, struct hit *h, const struct rules *rs)
{
    struct hit_walk hw = { .w = w, .h = h, .rs = rs, .rq = hit_rq(h) };
    struct eval_walk at = hit_walk_at(h);
    int rc;

    hit_env(w, rs, &hw.env);
    rc = eval_walk(&at, hit_step, &hw);
    h->pos = at.pos;
    /* The last step's rule decided; HIT's reply does not name it. */
    if (rc == 1 && h->verb != PROTO_HIT)
        snprintf(h->rule, sizeof(h->rule), "%s", hw.r.id_str);
    return rc;
}

/* The store answered (@rep, or NULL: failed) the step @h waited for. */
static int hit_resume(struct worker *w, struct hit *h, const struct reload_state *st,
                      const struct store_reply *rep)
{
    const struct rules *rs = st->rules;
    bool same = st->generation == h->generation;
    struct table *t = srv_table_of(w, &h->step_rule);
    struct table_key tk = { .rule_id = h->step_rule.id, .actor = h->actor,
                            .actor_len = h->actor_len };
    struct table_limits lim;
    struct eval_outcome o;
    struct rules_rule r;
    const struct rules_rule *settled = NULL;    /* the rule whose outcome @o is */
    const char *name = NULL;
    bool have = false;
    uint64_t now = clock_now_ms();
    int rc;

    memset(&o, 0, sizeof(o));
    o.rule = h->step_rule.index;
    switch (h->step) {
    case STEP_STRICT:
    case STEP_ASK:
        if (rep && rep->n >= 3) {
            o.counted = true;
            o.allowed = rep->v[0] != 0;
            o.credit = rep->v[1] > 0 ? (uint64_t)rep->v[1] : 0;
            o.reset_s = eval_ms_to_s(rep->v[2] > 0 ? (uint64_t)rep->v[2] : 0);
            have = true;
        }
        if (have && h->step == STEP_ASK) {
            /* What Redis said about the pool bounds this host's next hits. */
            struct table_lease_grant g = {
                .remain = o.credit, .end_ms = h->sent_ms + (uint64_t)(rep->v[2] > 0 ? rep->v[2]
                                                                                    : 0),
            };

            lease_limits(w, &h->step_rule, &lim);
            table_lease_grant(t, &tk, &lim, &g, now);
        }
        break;
    case STEP_DEL:
        o = h->step_o;
        have = true;
        if (!rep)
            log_ratelimited(&rl_store, LOG_WARNING, "RESET of rule %s: Redis failed, only this "
                            "host's counters were reset", h->step_id);
        break;
    case STEP_FETCH:
        lease_limits(w, &h->step_rule, &lim);
        if (rep && rep->n >= 4 && rep->v[0] >= 0 && rep->v[1] >= 0 && rep->v[2] >= 0) {
            struct table_lease_grant g = {
                .granted = (uint64_t)rep->v[0], .remain = (uint64_t)rep->v[1],
                .end_ms = h->sent_ms + (uint64_t)rep->v[2], .created = rep->v[3] != 0,
                .fetch = true,
            };

            rc = table_lease_grant(t, &tk, &lim, &g, now);
            if (rc < 0) {
                errno = -rc;
                log_ratelimited(&rl_store, LOG_WARNING, "lease of %llu credits lost: %m",
                                (unsigned long long)g.granted);
            }
            /* Try the same rule again: now from the lease (or directly). */
            h->lease_tries++;
            if (same)
                return hit_run(w, h, rs);
        } else {
            table_lease_abort(t, &tk, &lim, now);
        }
        break;
    }
    if (have) {
        settled = &h->step_rule;
        name = h->step_id;
    } else if (same) {
        /* Redis failed: this rule by on_redis_error, then go on. */
        rc = rules_get(rs, h->path[h->pos], &r);
        if (rc >= 0)
            rc = hit_fallback(w, h, rs, &r, &o);
        if (rc < 0)
            return rc;
        settled = &r;
        name = r.id_str;
    }
    if (settled) {
        struct eval_walk at = hit_walk_at(h);

        hit_mark_done(h, settled->id);
        if (eval_walk_settle(&at, settled, &o)) {
            if (h->verb != PROTO_HIT)
                snprintf(h->rule, sizeof(h->rule), "%s", name);
            return 1;
        }
        h->pos = at.pos;
    }
    if (!same) {
        /* A reload came in between: the rest of the path under the new
         * rules, less the rules already applied (by id). */
        struct rules_req rq = hit_rq(h);
        size_t n = rules_match(rs, &rq, h->path), k = 0;

        for (size_t i = 0; i < n; i++) {
            rc = rules_get(rs, h->path[i], &r);
            if (rc < 0)
                return rc;
            if (!hit_id_done(h, r.id))
                h->path[k++] = h->path[i];
        }
        h->n_path = k;
        h->pos = 0;
        h->generation = st->generation;
        h->rematched = true;
    }
    return hit_run(w, h, rs);
}

static void hit_finish(struct worker *w, struct hit *h, const struct rules *rs, int r)
{
    int n;

    if (r == -ENOSPC || r == -EDQUOT) {
        stat_inc(&w->st.errors);
        metrics_error(w->mw, PROTO_E_NO_COUNTER);
        n = proto_fmt_err(h->reply, sizeof(h->reply), PROTO_E_NO_COUNTER,
                          srv_no_counter_reason(r));
        h->reply_len = n > 0 ? (size_t)n : 0;
    } else if (r < 0) {
        errno = -r;
        log_ratelimited(&rl_internal, LOG_ERR, "evaluating a request failed: %m");
        stat_inc(&w->st.errors);
        n = proto_fmt_err(h->reply, sizeof(h->reply), PROTO_E_UNKNOWN, "internal error");
        h->reply_len = n > 0 ? (size_t)n : 0;
    } else {
        if (!h->rematched)
            count_outcomes(w, rs, h->generation, h->op, &h->res);
        if (h->op == TABLE_TAKE)
            metrics_hit_done(w->mw, h->start_ns);
        h->reply_len = hit_format(w, h->uid, h->verb, h->op, &h->res, h->rule, h->reply,
                                  sizeof(h->reply));
    }
    h->done = true;
}

/* A hit_submit() hit decided (@r as hit_run()'s): counted as hit_finish()
 * counts, answered to its caller. */
static void hit_submitted(struct worker *w, struct hit *h, const struct rules *rs, int r)
{
    if (r < 0) {
        stat_inc(&w->st.errors);
        metrics_error(w->mw, r == -ENOSPC || r == -EDQUOT ? PROTO_E_NO_COUNTER
                                                          : PROTO_E_UNKNOWN);
        if (r == -ENOSPC || r == -EDQUOT)
            srv_no_counter_reason(r);
        h->done_fn(h->done_arg, r, rs, NULL);
        return;
    }
    if (!h->rematched)
        count_outcomes(w, rs, h->generation, h->op, &h->res);
    if (h->op == TABLE_TAKE) {
        stat_inc(&w->st.hits);
        stat_inc(h->res.allowed ? &w->st.accepted : &w->st.rejected);
        metrics_hit_done(w->mw, h->start_ns);
    }
    h->done_fn(h->done_arg, 0, rs, &h->res);
}

static void hit_on_store(void *arg, const struct store_reply *rep)
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

/* A request on a config that uses Redis; inside the RCU section of @st. */
static void hit_start(struct conn *c, const struct proto_req *req, const struct reload_state *st)
{
    struct worker *w = c->w;
    struct rules_req rq;
    struct hit *h;
    int r;

    h = hit_get(w);
    if (!h) {
        reply_err(c, PROTO_E_UNKNOWN, "out of memory");
        return;
    }
    h->c = c;
    h->verb = req->verb;
    h->op = op_of(req->verb);
    h->start_ns = metrics_clock_ns();
    h->n = req->amount;
    h->privileged = c->privileged;
    h->uid = c->uid;
    h->deadline = store_deadline(w->s->o.store, clock_now_ms());
    h->generation = st->generation;
    h->req = req;
    rq = hit_rq(h);
    h->n_path = rules_match(st->rules, &rq, h->path);
    h->pos = 0;
    r = hit_run(w, h, st->rules);
    if (r == 0) {
        /* It waits: keep the request (the scratch is reused) and take a slot. */
        memcpy(&h->own, req, sizeof(*req));
        for (unsigned i = 0; i < req->n_kv; i++) {
            h->own.kv[i].key = h->own.buf + (req->kv[i].key - req->buf);
            h->own.kv[i].value = h->own.buf + (req->kv[i].value - req->buf);
        }
        h->req = &h->own;
        if (c->pend_tail)
            c->pend_tail->next = h;
        else
            c->pend_head = h;
        c->pend_tail = h;
        c->n_pend++;
        c->n_waiting++;
        return;
    }
    hit_finish(w, h, st->rules, r);
    out_append(c, h->reply, h->reply_len);
    hit_put(w, h);
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
    h->verb = req->verb;
    h->op = op_of(req->verb);
    h->start_ns = metrics_clock_ns();
    h->n = req->amount;
    h->privileged = privileged;
    h->uid = uid;
    h->generation = st->generation;
    h->req = req;
    if (w->sc && rules_uses_store(st->rules)) {
        /* The Redis path: hit_run() from the first rule, as hit_start(). */
        h->deadline = store_deadline(w->s->o.store, clock_now_ms());
        h->n_path = rules_match(st->rules, &rq, h->path);
        h->pos = 0;
        r = hit_run(w, h, st->rules);
        if (r == 0) {
            memcpy(&h->own, req, sizeof(*req));
            for (unsigned i = 0; i < req->n_kv; i++) {
                h->own.kv[i].key = h->own.buf + (req->kv[i].key - req->buf);
                h->own.kv[i].value = h->own.buf + (req->kv[i].value - req->buf);
            }
            h->req = &h->own;
            urcu_memb_read_unlock();
            return;             /* hit_on_store() answers */
        }
    } else {
        struct eval_env env;

        hit_env(w, st->rules, &env);
        r = eval_request(&env, &rq, h->op, h->n, clock_now_ms(), &h->res);
        r = r < 0 ? r : 1;
    }
    hit_submitted(w, h, st->rules, r);
    urcu_memb_read_unlock();
    hit_put(w, h);
}

/* ---- server ---------------------------------------------------------------- */

int srv_new(const struct srv_opts *opts, struct srv **ret)
{
    struct listener_opts lo = { .socket_mode = opts->socket_mode };
    struct srv *s;
    int r;

    if (opts->workers == 0 || opts->n_listen + opts->n_inherited == 0)
        return -EINVAL;
    if (evthread_use_pthreads() < 0)
        return -ENOMEM;
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->o = *opts;
    /* Descriptors besides connections: listeners, Redis, metrics, epoll, ... */
    s->o.admit.fd_reserve = 64 + 8 * opts->workers + (unsigned)(opts->n_listen + opts->n_inherited);
    r = admit_new(&s->o.admit, &s->admit);
    if (r < 0)
        goto fail;
    s->lis = calloc(opts->n_listen + opts->n_inherited, sizeof(*s->lis));
    s->workers = calloc(opts->workers, sizeof(*s->workers));
    if (!s->lis || !s->workers) {
        r = -ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < opts->n_listen; i++) {
        /* systemd already holds it: adopted below. */
        if (notify_listeners_find(opts->inherited, opts->n_inherited, opts->listen[i]) >= 0)
            continue;
        r = listener_open(opts->listen[i], &lo, &s->lis[s->n_lis]);
        s->n_lis++;
        if (r < 0) {
            errno = -r;
            log_msg(LOG_ERR, "cannot listen on %s: %m", opts->listen[i]);
            goto fail;
        }
        log_msg(LOG_NOTICE, "listening on %s", s->lis[s->n_lis - 1].name);
    }
    for (size_t i = 0; i < opts->n_inherited; i++) {
        struct listener *l = &s->lis[s->n_lis++];
        struct notify_listener *nl = &opts->inherited[i];

        /* No path: a socket systemd created is never unlinked by us. */
        l->fd = nl->fd;
        nl->fd = -1;
        l->is_unix = nl->is_unix;
        l->name = strdup(nl->address);
        if (!l->name) {
            r = -ENOMEM;
            goto fail;
        }
        log_msg(LOG_NOTICE, "listening on %s (socket activation%s%s)", l->name,
                nl->name[0] ? ", " : "", nl->name);
    }
    for (unsigned i = 0; i < opts->workers; i++) {
        r = worker_init(s, &s->workers[i], i);
        if (r < 0)
            goto fail;
    }
    s->started_ms = clock_now_ms();
    *ret = s;
    return 0;
fail:
    srv_free(s);
    return r;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct srv *s = arg;
    char err[DIAG_FILE_MAX + DIAG_MSG_MAX + 64];
    uint64_t gen;
    size_t n;

    (void)what;
    if (sig == SIGHUP) {
        reload_run(s->o.reload, "SIGHUP", &gen, &n, err, sizeof(err));
        return;
    }
    log_msg(LOG_NOTICE, "%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    notify_stopping();
    event_base_loopbreak(s->main_base);
}

/* What metrics cannot count itself: read in the main thread (an RCU reader). */
static void srv_gauges(struct srv *s, uint64_t now, struct metrics_gauges *g)
{
    const struct reload_state *st;

    memset(g, 0, sizeof(*g));
    admit_stats(s->admit, &g->admit);
    g->have_admit = true;
    g->connections = g->admit.tcp_conns + g->admit.unix_conns + g->admit.reserve_conns;
    urcu_memb_read_lock();
    st = reload_current(s->o.reload);
    g->config_generation = st->generation;
    g->rules = rules_count(st->rules);
    urcu_memb_read_unlock();
    reload_counts(s->o.reload, &g->reloads_ok, &g->reloads_rejected);
    table_stats(s->o.fast, now, &g->fast);
    table_stats(s->o.priv, now, &g->priv);
    table_stats(s->o.privileged, now, &g->privileged);
    g->have_fast_path_hits = true;
    g->fast_path_hits = table_fast_hits(s->o.fast);
}

/* Metrics' gauges and statsd, and systemd's STATUS= when it changed. */
static void publish(struct srv *s, uint64_t now)
{
    struct metrics_gauges g;
    char status[sizeof(s->status)];

    srv_gauges(s, now, &g);
    metrics_tick(s->o.metrics, &g, now);
    metrics_status_line(s->o.metrics, status, sizeof(status));
    if (strcmp(status, s->status) != 0) {
        notify_status("%s", status);
        memcpy(s->status, status, sizeof(status));
    }
}

/* The watchdog pings only while every worker answered the previous probe. */
static bool workers_alive(void *userdata)
{
    struct srv *s = userdata;
    bool alive = true;

    for (unsigned i = 0; i < s->o.workers; i++)
        if (__atomic_load_n(&s->workers[i].pong, __ATOMIC_ACQUIRE) != s->ping)
            alive = false;
    if (!alive)
        return false;
    __atomic_store_n(&s->ping, s->ping + 1, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < s->o.workers; i++)
        event_active(s->workers[i].ping_ev, EV_READ, 0);
    return true;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct srv *s = arg;
    uint64_t now = clock_now_ms();
    static const uint64_t every = SWEEP_EVERY_S;
    uint64_t secs = (now - s->started_ms) / 1000;

    (void)fd;
    (void)what;
    table_heartbeat(s->o.fast, now);
    publish(s, now);
    if (secs % every == 0) {
        table_sweep(s->o.fast, now);
        table_sweep(s->o.priv, now);
        table_sweep(s->o.privileged, now);
    }
}

int srv_run(struct srv *s)
{
    struct event *sig_hup = NULL, *sig_term = NULL, *sig_int = NULL, *tick = NULL;
    struct notify_watchdog *wd = NULL;
    struct timeval one_s = { 1, 0 };
    sigset_t block, old;
    int r = 0;

    s->main_base = event_base_new();
    if (!s->main_base)
        return -ENOMEM;
    sig_hup = evsignal_new(s->main_base, SIGHUP, on_signal, s);
    sig_term = evsignal_new(s->main_base, SIGTERM, on_signal, s);
    sig_int = evsignal_new(s->main_base, SIGINT, on_signal, s);
    tick = event_new(s->main_base, -1, EV_PERSIST, on_tick, s);
    if (!sig_hup || !sig_term || !sig_int || !tick || event_add(sig_hup, NULL) < 0 ||
        event_add(sig_term, NULL) < 0 || event_add(sig_int, NULL) < 0 ||
        event_add(tick, &one_s) < 0) {
        r = -ENOMEM;
        goto out;
    }
    /* Workers never take the process signals: the main loop handles them. */
    sigemptyset(&block);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    for (unsigned i = 0; i < s->o.workers; i++) {
        r = -pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]);
        if (r < 0)
            break;
        s->workers[i].started = true;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "cannot start worker threads: %m");
    } else {
        log_msg(LOG_NOTICE, "ready: %u workers", s->o.workers);
        publish(s, clock_now_ms());
        notify_ready("%s", s->status);
        if (notify_watchdog_new(s->main_base, workers_alive, s, &wd) < 0)
            log_msg(LOG_ERR, "cannot start the watchdog timer: out of memory");
        event_base_dispatch(s->main_base);
    }
    for (unsigned i = 0; i < s->o.workers; i++)
        if (s->workers[i].started)
            event_active(s->workers[i].stop_ev, EV_READ, 0);
    for (unsigned i = 0; i < s->o.workers; i++)
        if (s->workers[i].started)
            pthread_join(s->workers[i].thread, NULL);
out:
    notify_watchdog_free(wd);
    if (sig_hup)
        event_free(sig_hup);
    if (sig_term)
        event_free(sig_term);
    if (sig_int)
        event_free(sig_int);
    if (tick)
        event_free(tick);
    return r;
}

void srv_free(struct srv *s)
{
    if (!s)
        return;
    if (s->workers)
        for (unsigned i = 0; i < s->o.workers; i++)
            worker_fini(&s->workers[i]);
    free(s->workers);
    for (size_t i = 0; s->lis && i < s->n_lis; i++)
        listener_close(&s->lis[i]);
    free(s->lis);
    if (s->main_base)
        event_base_free(s->main_base);
    admit_free(s->admit);
    free(s);
}
