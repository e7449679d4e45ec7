/* SPDX-License-Identifier: MIT */
/*
 * resp_rl: the ad-hoc bucket commands of a RESP connection (docs/resp.md):
 * Smyte's RL.REDUCE, RL.GET (and their millisecond forms RL.PREDUCE,
 * RL.PGET) and redis-cell's CL.THROTTLE.  Arguments are read and checked
 * here as those servers read them, with two bounds of divvyd's own: a
 * refill time or period of at most ADHOC_PERIOD_MAX_MS, an AT at most
 * ADHOC_AT_AHEAD_MS ahead of divvyd's Unix clock.
 *
 * Where a bucket lives: with the store's ad-hoc buckets in Redis
 * (srv_opts.adhoc_redis), one script call per command (store_adhoc_tb(),
 * store_adhoc_gcra()), after the key it may write took a slot of this
 * host's table charged to the peer (rl_claim(): the peer's keys in Redis
 * stay within its share), its reply a slot in the connection's reply queue
 * (conn_reply_wait()) answered from the store's callback; when Redis cannot answer,
 * store.on_redis_error: local (this host's own table), open, closed.
 * Otherwise in adhoc.c's table, each bucket charged to the connection's peer
 * (its uid, or its address).  Counted in STATS as hits like the rules'
 * (accepted or rejected) and in adhoc_count().
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adhoc.h"
#include "clock.h"
#include "conn.h"
#include "metrics.h"
#include "resp.h"
#include "resp_rl.h"
#include "srv_int.h"
#include "store.h"
#include "worker_int.h"

#define RL_INT_MAX       1000000000000000LL     /* 10^15: counts, amounts */
#define RL_REPLY_MAX     PROTO_REPLY_MAX
#define NS_PER_MS        1000000LL
#define NS_PER_S         1000000000LL

/* One command, as read: what it asks of which bucket, and who asks. */
struct rl_call {
    enum adhoc_kind kind;
    struct adhoc_tb tb;         /* ADHOC_RL */
    int64_t at_ms;              /* ADHOC_RL: the client's AT (Unix ms); -1: none */
    struct adhoc_gcra gcra;     /* ADHOC_CL */
    struct adhoc_peer who;
};

/* A command waiting for Redis: its slot in the reply queue and its bucket's
 * name, for the local table should Redis fail. */
struct rl_job {
    struct replyq_slot *slot;
    struct worker *w;
    struct rl_call call;
    size_t len;
    char name[];
};

static void rl_out(struct conn *c, const char *s, int n)
{
    if (n > 0)
        out_append(c, s, (size_t)n);
    else
        c->dead = true;
}

/* "-<text>" into @buf, counted as divvy's @err is (STATS errors, metrics). */
static int rl_fmt_error(struct worker *w, enum proto_err err, const char *text, char *buf,
                        size_t size)
{
    stat_inc(&w->st.errors);
    metrics_error(w->mw, err);
    return resp_fmt_error(buf, size, text);
}

static void rl_error(struct conn *c, enum proto_err err, const char *text)
{
    char buf[RL_REPLY_MAX];

    rl_out(c, buf, rl_fmt_error(c->w, err, text, buf, sizeof(buf)));
}

static void rl_count(struct worker *w, enum adhoc_kind kind, bool allowed, bool fallback)
{
    stat_inc(&w->st.hits);
    stat_inc(allowed ? &w->st.accepted : &w->st.rejected);
    adhoc_count(w->s->o.adhoc, kind, allowed, fallback);
}

/* "-ERR ... over 31 days": the bound that keeps absurd buckets out (docs/resp.md). */
static void rl_too_long(struct conn *c, const char *what)
{
    char text[160];

    snprintf(text, sizeof(text), "ERR %s over %lld seconds (31 days): divvyd's bound for "
             "ad-hoc buckets", what, ADHOC_PERIOD_MAX_MS / 1000);
    rl_error(c, PROTO_E_BAD_REQUEST, text);
}

/* Whom a new bucket is charged to: the peer admission knows (conn.h). */
static void rl_peer(const struct conn *c, struct adhoc_peer *ret)
{
    memcpy(ret->key, c->peer_key, sizeof(ret->key));
    ret->is_unix = c->is_unix;
    ret->privileged = c->privileged;
}

static int64_t rl_unix_ms(void)
{
    return (int64_t)(clock_unix_ns() / NS_PER_MS);
}

/* ---- answers ------------------------------------------------------------------------ */

/* CL.THROTTLE's five integers; durations in whole seconds, truncated. */
static int rl_fmt_gcra(const struct adhoc_gcra_result *res, char *buf, size_t size)
{
    int n = snprintf(buf, size, "*5\r\n:%d\r\n:%lld\r\n:%lld\r\n:%lld\r\n:%lld\r\n",
                     res->limited ? 1 : 0, (long long)res->limit, (long long)res->remaining,
                     (long long)(res->retry_after_ns / NS_PER_S),
                     (long long)(res->reset_after_ns / NS_PER_S));

    return n > 0 && (size_t)n < size ? n : -1;
}

/*
 * The table's refusal @r (adhoc.h): -EDQUOT, an unprivileged peer holds its
 * share and may not give one up (buckets in Redis); -ENOSPC, privileged
 * peers hold every slot a new bucket could take (or, buckets in Redis,
 * unprivileged ones hold the whole pool).
 */
static int rl_fmt_refused(struct worker *w, int r, char *buf, size_t size)
{
    if (r == -EDQUOT)
        return rl_fmt_error(w, PROTO_E_BUSY, "ERR busy too many ad-hoc buckets for this peer "
                            "(table.adhoc_buckets_per_peer): one comes free when one of its "
                            "buckets is full again", buf, size);
    return rl_fmt_error(w, PROTO_E_BUSY, "ERR busy ad-hoc bucket table full "
                        "(table.adhoc_slots, table.adhoc_max_buckets)", buf, size);
}

/* The answer of this host's own table. */
static int rl_local(struct worker *w, const struct rl_call *call, const char *name, size_t len,
                    bool fallback, char *buf, size_t size)
{
    struct adhoc *a = w->s->o.adhoc;
    int64_t now_ms = rl_unix_ms(), before;
    struct adhoc_gcra_result res;
    int r;

    if (call->kind == ADHOC_RL) {
        r = adhoc_tb(a, &call->who, name, len, &call->tb,
                     call->at_ms >= 0 ? call->at_ms : now_ms, now_ms, &before);
    } else {
        r = adhoc_gcra(a, &call->who, name, len, &call->gcra, (int64_t)clock_unix_ns(), &res);
    }
    if (r < 0)
        return rl_fmt_refused(w, r, buf, size);
    if (call->kind == ADHOC_RL) {
        if (call->tb.take > 0)
            rl_count(w, ADHOC_RL, before >= call->tb.take, fallback);
        return resp_fmt_int(buf, size, before);
    }
    if (call->gcra.quantity > 0)
        rl_count(w, ADHOC_CL, !res.limited, fallback);
    return rl_fmt_gcra(&res, buf, size);
}

/*
 * The answer when Redis could not give one (docs/resp.md "Ad-hoc buckets in
 * Redis"): on_redis_error = local, this host's table; open, a full bucket
 * (RL.*: max; CL.THROTTLE: a new key's answer), nothing counted anywhere;
 * closed, an empty one (RL.*: 0; CL.THROTTLE: limited, retry after 1 s).
 */
static int rl_fallback(struct worker *w, const struct rl_call *call, const char *name,
                       size_t len, char *buf, size_t size)
{
    enum config_redis_error policy = w->s->o.on_redis_error;
    struct adhoc_gcra_result res;
    bool allowed = policy == CONFIG_REDIS_ERROR_OPEN;
    int64_t tat = 0, idle;

    if (policy == CONFIG_REDIS_ERROR_LOCAL)
        return rl_local(w, call, name, len, true, buf, size);
    if (!allowed)
        metrics_denied(w->mw, METRICS_DENY_REDIS_DOWN);
    if (call->kind == ADHOC_RL) {
        int64_t before = allowed ? call->tb.max : 0;

        if (call->tb.take > 0)
            rl_count(w, ADHOC_RL, before >= call->tb.take, true);
        return resp_fmt_int(buf, size, before);
    }
    adhoc_gcra_step(&call->gcra, false, 0, &tat, &res, &idle);
    if (!allowed) {
        res.limited = true;
        res.remaining = 0;
        res.retry_after_ns = NS_PER_S;
        res.reset_after_ns = 0;
    }
    if (call->gcra.quantity > 0)
        rl_count(w, ADHOC_CL, !res.limited, true);
    return rl_fmt_gcra(&res, buf, size);
}

/* Redis's answer @rep (NULL: failed) to @job: its reply, into its slot. */
static void rl_on_store(void *arg, const struct store_reply *rep)
{
    struct rl_job *job = arg;
    const struct rl_call *call = &job->call;
    char buf[RL_REPLY_MAX], *text;
    int n;

    if (rep && rep->kind == STORE_REPLY_TOKENS && call->kind == ADHOC_RL) {
        if (call->tb.take > 0)
            rl_count(job->w, ADHOC_RL, rep->tokens >= call->tb.take, false);
        n = resp_fmt_int(buf, sizeof(buf), rep->tokens);
    } else if (rep && rep->kind == STORE_REPLY_GCRA && call->kind == ADHOC_CL) {
        struct adhoc_gcra_result res = {
            .limited = rep->gcra.limited, .limit = rep->gcra.limit,
            .remaining = rep->gcra.remaining, .retry_after_ns = rep->gcra.retry_after_ns,
            .reset_after_ns = rep->gcra.reset_after_ns,
        };

        if (call->gcra.quantity > 0)
            rl_count(job->w, ADHOC_CL, !res.limited, false);
        n = rl_fmt_gcra(&res, buf, sizeof(buf));
    } else {
        n = rl_fallback(job->w, call, job->name, job->len, buf, sizeof(buf));
    }
    text = n > 0 ? malloc((size_t)n) : NULL;
    if (text)
        memcpy(text, buf, (size_t)n);
    else
        ((struct conn *)job->slot->owner)->dead = true;     /* no reply: the client must not wait */
    conn_reply_answer(job->slot, text, text ? (size_t)n : 0);
    free(job);
}

/* @call's three parameters, as the bucket's key names them (store_adhoc_key()). */
static void rl_params(const struct rl_call *call, int64_t params[3])
{
    if (call->kind == ADHOC_RL) {
        params[0] = call->tb.max;
        params[1] = call->tb.refill;
        params[2] = call->tb.refill_ms;
    } else {
        params[0] = call->gcra.max_burst;
        params[1] = call->gcra.count;
        params[2] = call->gcra.period_s;
    }
}

/*
 * The slot of this host's table a call that may write a key in Redis must
 * hold first (docs/resp.md "Ad-hoc buckets in Redis"), charged to its peer
 * until the key is gone at the latest: 0, or adhoc_claim()'s refusal.  A
 * call that only looks writes no key and needs none.
 */
static int rl_claim(struct worker *w, const struct rl_call *call, const char *name, size_t len)
{
    int64_t now_ms = rl_unix_ms(), params[3], expire;

    if (call->kind == ADHOC_RL ? call->tb.take == 0 : call->gcra.quantity == 0)
        return 0;
    rl_params(call, params);
    expire = call->kind == ADHOC_RL ? adhoc_tb_key_expire_ms(&call->tb, call->at_ms, now_ms)
                                    : adhoc_gcra_key_expire_ms(&call->gcra, now_ms);
    return adhoc_claim(w->s->o.adhoc, &call->who, call->kind, name, len, params, expire, now_ms);
}

/* Sends @call to Redis; 0 when its reply will come from rl_on_store(). */
static int rl_send(struct conn *c, const struct rl_call *call, const char *name, size_t len)
{
    struct worker *w = c->w;
    struct store *st = w->s->o.store;
    int64_t params[3];
    struct rl_job *job;
    size_t size = store_key_max(st, len) + 4 * 24;
    char *key = NULL;
    int klen, r = -ENOMEM;

    rl_params(call, params);
    job = malloc(sizeof(*job) + len);
    key = malloc(size);
    if (!job || !key)
        goto out;
    klen = store_adhoc_key(st, call->kind == ADHOC_RL ? 'S' : 'G', name, len, params, 3, key,
                           size);
    if (klen < 0) {
        r = klen;
        goto out;
    }
    job->w = w;
    job->call = *call;
    job->len = len;
    memcpy(job->name, name, len);
    /* The slot first: a store callback never runs inside the call that sends. */
    job->slot = conn_reply_wait(c, 0);
    if (!job->slot)
        goto out;
    if (call->kind == ADHOC_RL) {
        struct store_adhoc_tb_args a = {
            .max = call->tb.max, .refill = call->tb.refill, .refill_ms = call->tb.refill_ms,
            .take = call->tb.take, .strict = call->tb.strict, .at_ms = call->at_ms,
        };

        r = store_adhoc_tb(w->sc, key, (size_t)klen, &a, store_deadline(st, clock_now_ms()),
                           rl_on_store, job);
    } else {
        struct store_adhoc_gcra_args a = {
            .max_burst = call->gcra.max_burst, .count = call->gcra.count,
            .period_s = call->gcra.period_s, .quantity = call->gcra.quantity,
        };

        r = store_adhoc_gcra(w->sc, key, (size_t)klen, &a, store_deadline(st, clock_now_ms()),
                             rl_on_store, job);
    }
    if (r < 0) {
        rl_on_store(job, NULL);         /* answers the slot by on_redis_error */
        r = 0;
    }
    job = NULL;
out:
    free(key);
    free(job);
    return r;
}

/* Answers @call on bucket @name, wherever it lives. */
static void rl_decide(struct conn *c, const struct rl_call *call, const char *name, size_t len)
{
    struct worker *w = c->w;
    char buf[RL_REPLY_MAX];
    bool redis = w->s->o.adhoc_redis;
    int r;

    /* While the breaker is open nothing waits: the policy answers at once. */
    if (redis && w->sc && !store_breaker_open(w->s->o.store)) {
        /* No key in Redis without its slot here: a peer's keys stay within its share. */
        r = rl_claim(w, call, name, len);
        if (r < 0) {
            rl_out(c, buf, rl_fmt_refused(w, r, buf, sizeof(buf)));
            return;
        }
        if (rl_send(c, call, name, len) == 0)
            return;
    }
    rl_out(c, buf, redis ? rl_fallback(w, call, name, len, buf, sizeof(buf))
                         : rl_local(w, call, name, len, false, buf, sizeof(buf)));
}

/* ---- commands ----------------------------------------------------------------------- */

/*
 * RL.REDUCE key max refilltime [REFILL n] [TAKE n] [AT ts] [STRICT] and
 * RL.GET (no TAKE), in seconds; @ms: RL.PREDUCE / RL.PGET, in milliseconds.
 * Replies the tokens the bucket held before the call (Smyte's reply).
 */
static void rl_bucket(struct conn *c, const struct resp_cmd *cmd, bool reduce, bool ms)
{
    int64_t unit = ms ? 1 : 1000, refill_time, at = -1;
    struct rl_call call = { .kind = ADHOC_RL, .tb.take = reduce ? 1 : 0, .at_ms = -1 };
    bool refill_set = false;

    if (!c->w->s->o.adhoc) {
        rl_error(c, PROTO_E_UNKNOWN_COMMAND, "ERR ad-hoc buckets are off");
        return;
    }
    if (resp_arg_int(cmd, 2, 1, RL_INT_MAX, &call.tb.max) < 0 ||
        resp_arg_int(cmd, 3, 1, INT32_MAX, &refill_time) < 0)
        goto bad_int;
    call.tb.refill_ms = refill_time * unit;
    if (call.tb.refill_ms > ADHOC_PERIOD_MAX_MS) {
        rl_too_long(c, "refilltime");
        return;
    }
    for (unsigned i = 4; i < cmd->argc; i++) {
        int64_t *slot;
        int64_t min = 0, max = RL_INT_MAX;

        if (resp_arg_is(cmd, i, "STRICT")) {
            call.tb.strict = true;
            continue;
        }
        if (resp_arg_is(cmd, i, "REFILL")) {
            slot = &call.tb.refill;
            min = 1;
            refill_set = true;
        } else if (resp_arg_is(cmd, i, "TAKE") && reduce) {
            slot = &call.tb.take;
        } else if (resp_arg_is(cmd, i, "AT")) {
            /* Unix time, checked against the clock below. */
            slot = &at;
            max = INT64_MAX / 1000;
        } else {
            goto syntax;
        }
        if (i + 1 >= cmd->argc)
            goto syntax;
        i++;
        if (resp_arg_int(cmd, i, min, max, slot) < 0)
            goto bad_int;
    }
    if (!refill_set)
        call.tb.refill = call.tb.max;
    if (at >= 0) {
        call.at_ms = at * unit;
        if (adhoc_at_check(call.at_ms, rl_unix_ms()) < 0) {
            char text[160];

            snprintf(text, sizeof(text), "ERR AT is more than %lld seconds ahead of divvyd's "
                     "clock (Unix time, %s)", ADHOC_AT_AHEAD_MS / 1000,
                     ms ? "milliseconds" : "seconds");
            rl_error(c, PROTO_E_BAD_REQUEST, text);
            return;
        }
    }
    rl_peer(c, &call.who);
    rl_decide(c, &call, cmd->argv[1], cmd->len[1]);
    return;
syntax:
    rl_error(c, PROTO_E_BAD_REQUEST, "ERR syntax error");
    return;
bad_int:
    rl_error(c, PROTO_E_BAD_REQUEST, "ERR value is not an integer or out of range");
}

void resp_rl_reduce(struct conn *c, const struct resp_cmd *cmd)
{
    rl_bucket(c, cmd, true, false);
}

void resp_rl_get(struct conn *c, const struct resp_cmd *cmd)
{
    rl_bucket(c, cmd, false, false);
}

void resp_rl_preduce(struct conn *c, const struct resp_cmd *cmd)
{
    rl_bucket(c, cmd, true, true);
}

void resp_rl_pget(struct conn *c, const struct resp_cmd *cmd)
{
    rl_bucket(c, cmd, false, true);
}

/*
 * CL.THROTTLE key max_burst count period [quantity]: redis-cell's reply of
 * five integers: limited (0/1), limit, remaining, retry_after and
 * reset_after in whole seconds (retry_after -1 when allowed).
 */
void resp_cl_throttle(struct conn *c, const struct resp_cmd *cmd)
{
    struct rl_call call = { .kind = ADHOC_CL, .gcra.quantity = 1, .at_ms = -1 };
    struct adhoc_gcra *p = &call.gcra;

    if (!c->w->s->o.adhoc) {
        rl_error(c, PROTO_E_UNKNOWN_COMMAND, "ERR ad-hoc buckets are off");
        return;
    }
    if (resp_arg_int(cmd, 2, 0, RL_INT_MAX, &p->max_burst) < 0 ||
        resp_arg_int(cmd, 3, 0, RL_INT_MAX, &p->count) < 0 ||
        resp_arg_int(cmd, 4, 0, RL_INT_MAX, &p->period_s) < 0 ||
        (cmd->argc == 6 && resp_arg_int(cmd, 5, 0, RL_INT_MAX, &p->quantity) < 0)) {
        rl_error(c, PROTO_E_BAD_REQUEST, "ERR value is not an integer or out of range");
        return;
    }
    if (p->count == 0 || p->period_s == 0) {
        rl_error(c, PROTO_E_BAD_REQUEST, "ERR Cell error: Zero rates are not supported");
        return;
    }
    if (p->period_s > ADHOC_PERIOD_MAX_MS / 1000) {
        rl_too_long(c, "period");
        return;
    }
    if (adhoc_gcra_check(p) < 0) {
        rl_error(c, PROTO_E_BAD_REQUEST, "ERR value is not an integer or out of range");
        return;
    }
    rl_peer(c, &call.who);
    rl_decide(c, &call, cmd->argv[1], cmd->len[1]);
}
