/* SPDX-License-Identifier: MIT */
/*
 * engine_redis: the engine's walk of a request on the Redis path
 * (docs/redis.md "Mixed paths", docs/dev/daemon.md "Hits that wait for Redis").
 *
 * engine_run() walks the request's rule path with common/eval.h's eval_walk() and
 * hit_step(): a local rule is decided from the host tables, a strict or
 * lease rule by hit_remote(), which sends the rule's typed script call
 * (store.h) and makes the walk wait (EVAL_WAIT); a verdict script goes
 * through the worker's hot-key table (hit_batch.h), which decides
 * concurrent requests on one key in one script.  When the store calls back,
 * engine_resume() reads the typed answer (hit_verdict(), lease_apply()), or,
 * when Redis failed, applies store.on_redis_error (hit_fallback()), settles
 * that rule with eval_walk_settle() and walks on.  A reload that came in
 * between rematches the rest of the path under the new rules, less the
 * rules already applied.  The walk ends in engine.c's settle step, which
 * calls the request's completion.  Lease refills run in the background
 * (engine_lease_refill()), for this host's hits and for fast-path clients'
 * REFILL hints.  Everything here runs on the worker's thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <urcu/urcu-memb.h>

#include "clock.h"
#include "engine.h"
#include "engine_int.h"
#include "eval.h"
#include "hit_batch.h"
#include "log.h"
#include "proto.h"
#include "srv_int.h"
#include "store.h"
#include "worker_int.h"

/* hit_fallback() names the policy's metric by the policy's own value. */
_Static_assert((int)METRICS_FALLBACK_LOCAL == (int)CONFIG_REDIS_ERROR_LOCAL &&
                   (int)METRICS_FALLBACK_OPEN == (int)CONFIG_REDIS_ERROR_OPEN &&
                   (int)METRICS_FALLBACK_CLOSED == (int)CONFIG_REDIS_ERROR_CLOSED,
               "on_redis_error and metrics_fallback values differ");

static struct log_ratelimit rl_store;

static bool hit_id_done(const struct engine_hit *h, uint64_t id)
{
    for (unsigned i = 0; i < h->n_done; i++) {
        if (h->done_ids[i] == id)
            return true;
    }
    return false;
}

static void hit_mark_done(struct engine_hit *h, uint64_t id)
{
    if (h->n_done < RULES_MATCH_MAX)
        h->done_ids[h->n_done++] = id;
}

/* What rule @r answers when Redis cannot (store.on_redis_error). */
static int hit_fallback(struct worker *w, struct engine_hit *h, const struct rules *rs,
                        const struct rules_rule *r, struct eval_outcome *o)
{
    struct rules_req rq = engine_rq(h);
    struct eval_env env;
    int rc;

    stat_inc(&w->st.redis_fallbacks);
    metrics_redis_fallback(w->mw, h->op == TABLE_RESET ? METRICS_FALLBACK_LOCAL
                                  : (enum metrics_fallback)w->s->o.on_redis_error);
    if (h->op == TABLE_RESET || w->s->o.on_redis_error == CONFIG_REDIS_ERROR_LOCAL) {
        engine_env(w, rs, &env);
        rc = eval_rule(&env, r, &rq, h->op, h->n, clock_now_ms(), o);
        o->store_down = true;
        return rc;
    }
    memset(o, 0, sizeof(*o));
    o->rule = r->index;
    o->store_down = true;
    if (w->s->o.on_redis_error == CONFIG_REDIS_ERROR_OPEN) {
        o->allowed = h->n <= (uint64_t)r->credit_limit;
        o->credit = (uint64_t)r->credit_limit;
    }
    return 0;
}

void engine_lease_limits(const struct worker *w, const struct rules_rule *r, struct table_limits *lim)
{
    eval_limits(r, lim);
    lim->lease = true;
    lim->lease_max = w->s->o.lease_max;
    if (lim->lease_max > TABLE_LEASE_MAX)
        lim->lease_max = TABLE_LEASE_MAX;
}

/* The lease script's arguments for @want more credit of rule @r. */
static struct store_lease_args lease_args(const struct rules_rule *r,
                                          const struct table_limits *lim, uint64_t want)
{
    struct store_lease_args a = { .want = want, .limit = r->credit_limit,
                                  .reset_ms = lim->reset_ms, .divisor = TABLE_LEASE_DIVISOR };

    return a;
}

/*
 * Redis answered (@rep, NULL: failed) a lease request for counter @tk sent
 * at @sent_ms: the grant goes into the slot (true), or the slot's FETCH is
 * given up (false).
 */
static bool lease_apply(struct table *t, const struct table_key *tk,
                        const struct table_limits *lim, uint64_t sent_ms,
                        const struct store_reply *rep, uint64_t now)
{
    struct table_lease_grant g = { .fetch = true };
    int r;

    if (!rep || rep->kind != STORE_REPLY_GRANT) {
        table_lease_abort(t, tk, lim, now);
        return false;
    }
    g.granted = rep->grant.granted;
    g.remain = rep->grant.remain;
    g.end_ms = sent_ms + rep->grant.ttl_ms;
    g.created = rep->grant.created;
    r = table_lease_grant(t, tk, lim, &g, now);
    if (r < 0) {
        errno = -r;
        log_ratelimited(&rl_store, LOG_WARNING, "lease of %llu credits lost: %m",
                        (unsigned long long)g.granted);
    }
    return true;
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

    lease_apply(f->t, &key, &f->lim, f->sent_ms, rep, clock_now_ms());
    free(f);
}

bool engine_lease_refill(struct worker *w, struct table *t, const struct table_limits *lim,
                         const struct rules_rule *r, const char *actor, size_t actor_len,
                         const char *key, size_t key_len, uint64_t want)
{
    struct table_key tk = { .rule_id = r->id, .actor = actor, .actor_len = actor_len };
    struct store_lease_args a = lease_args(r, lim, want);
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
    if (store_lease(w->sc, key, key_len, &a, store_deadline(w->s->o.store, now), refill_done,
                    f) < 0) {
        table_lease_abort(t, &tk, lim, now);
        free(f);
        return false;
    }
    stat_inc(&w->st.lease_fetches);
    return true;
}

static int hit_keep_actor(struct engine_hit *h, const char *actor, size_t len)
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

/* The script of rule @r's algorithm decides @op for @h in Redis (key in
 * w->key_buf, @klen bytes): sent, or queued behind the script already in
 * flight for that key (hit_batch.h), as store_verdict(). */
static int hit_verdict_send(struct worker *w, struct engine_hit *h, const struct rules *rs,
                            const struct rules_rule *r, const struct table_limits *lim,
                            enum table_op op, size_t klen)
{
    enum store_op sop = op == TABLE_TAKE ? STORE_TAKE : op == TABLE_DEBIT ? STORE_DEBIT
                                                                           : STORE_PEEK;
    struct store_verdict_args a;
    int64_t next_start;
    int rc;

    store_verdict_args_of(r->algo, r->credit_limit, lim, r->strict, sop, h->n, &a);
    /* A calendar window: this host's period and the next one's end; the
     * script picks the one Redis's clock is in (docs/redis.md). */
    if (r->calendar) {
        rc = rules_period(rs, r->index, (int64_t)(clock_unix_ns() / 1000000),
                          &a.window.cal_start_ms, &a.window.cal_end_ms);
        if (rc >= 0)
            rc = rules_period(rs, r->index, a.window.cal_end_ms, &next_start,
                              &a.window.cal_next_ms);
        if (rc < 0)
            return rc;
    }
    return hit_batch_send(w->hb, w->key_buf, klen, &a, h->deadline, engine_on_store, h);
}

/*
 * The verdict Redis gave (@rep; NULL: failed) for @h's STEP_STRICT or
 * STEP_ASK into *o: false when there is none.  An ASK's answer also bounds
 * this host's lease (what Redis said about the pool).
 */
static bool hit_verdict(struct worker *w, struct engine_hit *h, const struct store_reply *rep,
                        uint64_t now, struct eval_outcome *o)
{
    struct table_key tk = { .rule_id = h->step_rule.id, .actor = h->actor,
                            .actor_len = h->actor_len };
    struct table_limits lim;

    if (!rep || rep->kind != STORE_REPLY_VERDICT)
        return false;
    o->counted = true;
    o->allowed = rep->verdict.allowed;
    o->credit = rep->verdict.credit;
    o->reset_s = eval_ms_to_s(rep->verdict.reset_ms);
    if (h->step == STEP_ASK) {
        struct table_lease_grant g = { .remain = o->credit,
                                       .end_ms = h->sent_ms + rep->verdict.reset_ms };

        engine_lease_limits(w, &h->step_rule, &lim);
        table_lease_grant(engine_table_of(w, &h->step_rule), &tk, &lim, &g, now);
    }
    return true;
}

/* Before a step goes to Redis: the key (into w->key_buf, *ret_klen) and
 * what the reply will need of rule @r (its strings die with a reload). */
static int hit_prepare(struct store *st, struct engine_hit *h, const struct rules_rule *r,
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
 * waits for engine_on_store()), or -errno.
 */
static int hit_remote(struct worker *w, struct engine_hit *h, const struct rules *rs,
                      const struct rules_rule *r, struct eval_outcome *o)
{
    struct store *st = w->s->o.store;
    struct rules_req rq = engine_rq(h);
    struct table *t = engine_table_of(w, r);
    struct table_limits lim;
    struct table_lease_result lr;
    struct table_key tk;
    struct eval_env env;
    struct store_lease_args la;
    enum table_op op = h->op;
    uint64_t now = clock_now_ms();
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
        engine_env(w, rs, &env);
        rc = eval_rule(&env, r, &rq, TABLE_RESET, h->n, now, o);
        if (rc < 0)
            return rc;
        if (r->store == RULES_STORE_LEASE) {
            struct table_result tr;

            engine_lease_limits(w, r, &lim);
            table_hit(t, &tk, &lim, TABLE_RESET, 0, now, &tr);
        }
        h->step_o = *o;
        /* Hits that came before the RESET and wait on the key go first. */
        hit_batch_flush(w->hb, w->key_buf, (size_t)klen);
        rc = store_del(w->sc, w->key_buf, (size_t)klen, h->deadline, engine_on_store, h);
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
        engine_lease_limits(w, r, &lim);
        engine_env(w, rs, &env);
        /* After two fetches that others drained first, take it directly. */
        rc = eval_lease(&env, r, &lim, &tk, h->n, h->lease_tries < LEASE_TRIES_FETCH, now, o,
                        &lr);
        if (rc < 0 || (rc == 0 && !o->counted))
            return rc;                  /* ERR no-counter, or the full-table outcome */
        switch (lr.verdict) {
        case TABLE_LEASE_ALLOWED:
        case TABLE_LEASE_DENIED:
            if (lr.refill) {
                rc = store_key(st, r->id_str, w->actor_buf, (size_t)alen, w->key_buf,
                               w->key_cap);
                if (rc > 0)
                    engine_lease_refill(w, t, &lim, r, w->actor_buf, (size_t)alen, w->key_buf,
                                 (size_t)rc, lr.want);
                else
                    table_lease_abort(t, &tk, &lim, now);
            }
            return 0;
        case TABLE_LEASE_FETCH:
            rc = hit_prepare(st, h, r, w, (size_t)alen, &klen);
            if (rc >= 0)
                rc = hit_keep_actor(h, w->actor_buf, (size_t)alen);
            la = lease_args(r, &lim, lr.want);
            if (rc >= 0)
                rc = store_lease(w->sc, w->key_buf, (size_t)klen, &la, h->deadline, engine_on_store,
                                 h);
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
    rc = hit_verdict_send(w, h, rs, r, &lim, op, (size_t)klen);
    if (rc < 0)
        return hit_fallback(w, h, rs, r, o);
    h->sent_ms = now;
    return 1;
}

/* What hit_step() needs besides the walk. */
struct hit_walk {
    struct worker *w;
    struct engine_hit *h;
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
    struct engine_hit *h = hw->h;
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

/*
 * Names the rule of @h's reply: the rule whose credit the reply shows
 * (h->res.limiter: a tighter continue rule earlier on the path, or for a
 * DEBIT the first rule left in debt, eval_decides()), named from @rs; the
 * rule of the last step (@last, @name) when that is the one, or when a
 * reload re-matched the path since (then earlier indexes are stale).
 */
static void hit_name(struct engine_hit *h, const struct rules *rs, const struct rules_rule *last,
                     const char *name)
{
    struct rules_rule r;

    if (!h->name_rule)
        return;
    if (h->res.limiter != last->index && !h->rematched && rules_get(rs, h->res.limiter, &r) >= 0)
        name = r.id_str;
    snprintf(h->rule, sizeof(h->rule), "%s", name);
}

/* @h's walk where it stands (h->pos, kept in @h while it waits). */
static struct eval_walk hit_walk_at(struct engine_hit *h)
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
int engine_run(struct worker *w, struct engine_hit *h, const struct rules *rs)
{
    struct hit_walk hw = { .w = w, .h = h, .rs = rs, .rq = engine_rq(h) };
    struct eval_walk at = hit_walk_at(h);
    int rc;

    engine_env(w, rs, &hw.env);
    rc = eval_walk(&at, hit_step, &hw);
    h->pos = at.pos;
    /* The last step's rule decided; HIT's reply does not name it. */
    if (rc == 1)
        hit_name(h, rs, &hw.r, hw.r.id_str);
    return rc;
}

/* The store answered (@rep, or NULL: failed) the step @h waited for. */
int engine_resume(struct worker *w, struct engine_hit *h, const struct reload_state *st,
               const struct store_reply *rep)
{
    const struct rules *rs = st->rules;
    bool same = st->generation == h->generation;
    struct table *t = engine_table_of(w, &h->step_rule);
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
        have = hit_verdict(w, h, rep, now, &o);
        break;
    case STEP_ASK:
        have = hit_verdict(w, h, rep, now, &o);
        /* Refused: the credit it asked for may be in this host's lease by
         * now, granted to this host's own refill that Redis applied first
         * (its reply came before this one).  Once more from the lease,
         * fetching nothing: spent if it is there, refused here if the pool
         * is gone, asked again (and then settled) otherwise. */
        if (have && !o.allowed && same && h->lease_tries < LEASE_TRIES_ASKED) {
            h->lease_tries = LEASE_TRIES_ASKED;
            return engine_run(w, h, rs);
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
        engine_lease_limits(w, &h->step_rule, &lim);
        if (lease_apply(t, &tk, &lim, h->sent_ms, rep, now)) {
            /* Try the same rule again: now from the lease (or directly). */
            h->lease_tries++;
            if (same)
                return engine_run(w, h, rs);
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
            hit_name(h, rs, settled, name);
            return 1;
        }
        h->pos = at.pos;
    }
    if (!same) {
        /* A reload came in between: the rest of the path under the new
         * rules, less the rules already applied (by id). */
        struct rules_req rq = engine_rq(h);
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
    return engine_run(w, h, rs);
}
