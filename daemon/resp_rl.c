/* SPDX-License-Identifier: MIT */
/*
 * resp_rl: the ad-hoc bucket commands of a RESP connection (docs/resp.md):
 * Smyte's RL.REDUCE, RL.GET (and their millisecond forms RL.PREDUCE,
 * RL.PGET) and redis-cell's CL.THROTTLE.  Arguments are read and checked
 * here as those servers read them, with one bound of divvyd's own: a refill
 * time or period of at most ADHOC_PERIOD_MAX_MS; the buckets are adhoc.c's,
 * each charged to the connection's peer (its uid, or its address).  Counted
 * in STATS as hits like the rules' (accepted or rejected).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "adhoc.h"
#include "clock.h"
#include "conn.h"
#include "metrics.h"
#include "resp.h"
#include "resp_rl.h"
#include "srv_int.h"
#include "worker.h"

#define RL_INT_MAX       1000000000000000LL     /* 10^15: counts, amounts */
#define RL_TIME_MAX      100000000000LL         /* AT: seconds (ms for RL.P*) */

static void rl_out(struct conn *c, const char *s, int n)
{
    if (n > 0)
        out_append(c, s, (size_t)n);
    else
        c->dead = true;
}

static void rl_error(struct conn *c, enum proto_err err, const char *text)
{
    char buf[PROTO_REPLY_MAX];

    stat_inc(&c->w->st.errors);
    metrics_error(c->w->mw, err);
    rl_out(c, buf, resp_fmt_error(buf, sizeof(buf), text));
}

static void rl_count(struct conn *c, bool allowed)
{
    stat_inc(&c->w->st.hits);
    stat_inc(allowed ? &c->w->st.accepted : &c->w->st.rejected);
}

/* Only when privileged peers hold every slot a new bucket could take (adhoc.h). */
static void rl_full(struct conn *c)
{
    rl_error(c, PROTO_E_BUSY, "ERR busy ad-hoc bucket table full "
                              "(table.adhoc_slots, table.adhoc_max_buckets)");
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

/*
 * RL.REDUCE key max refilltime [REFILL n] [TAKE n] [AT ts] [STRICT] and
 * RL.GET (no TAKE), in seconds; @ms: RL.PREDUCE / RL.PGET, in milliseconds.
 * Replies the tokens the bucket held before the call (Smyte's reply).
 */
static void rl_bucket(struct conn *c, const struct resp_cmd *cmd, bool reduce, bool ms)
{
    struct adhoc *a = c->w->s->o.adhoc;
    int64_t unit = ms ? 1 : 1000, refill_time, at = -1, before;
    struct adhoc_tb p = { .take = reduce ? 1 : 0 };
    struct adhoc_peer who;
    bool refill_set = false;
    char buf[32];
    int r;

    if (!a) {
        rl_error(c, PROTO_E_UNKNOWN_COMMAND, "ERR ad-hoc buckets are off");
        return;
    }
    if (resp_arg_int(cmd, 2, 1, RL_INT_MAX, &p.max) < 0 ||
        resp_arg_int(cmd, 3, 1, INT32_MAX, &refill_time) < 0)
        goto bad_int;
    p.refill_ms = refill_time * unit;
    if (p.refill_ms > ADHOC_PERIOD_MAX_MS) {
        rl_too_long(c, "refilltime");
        return;
    }
    for (unsigned i = 4; i < cmd->argc; i++) {
        int64_t *slot;
        int64_t min = 0, max = RL_INT_MAX;

        if (resp_arg_is(cmd, i, "STRICT")) {
            p.strict = true;
            continue;
        }
        if (resp_arg_is(cmd, i, "REFILL")) {
            slot = &p.refill;
            min = 1;
            refill_set = true;
        } else if (resp_arg_is(cmd, i, "TAKE") && reduce) {
            slot = &p.take;
        } else if (resp_arg_is(cmd, i, "AT")) {
            slot = &at;
            max = RL_TIME_MAX;
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
        p.refill = p.max;
    rl_peer(c, &who);
    r = adhoc_tb(a, &who, cmd->argv[1], cmd->len[1], &p,
                 at >= 0 ? at * unit : (int64_t)clock_now_ms(), clock_now_ms(), &before);
    if (r == -ENOSPC) {
        rl_full(c);
        return;
    }
    if (reduce)
        rl_count(c, before >= p.take);
    rl_out(c, buf, resp_fmt_int(buf, sizeof(buf), before));
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
    struct adhoc *a = c->w->s->o.adhoc;
    struct adhoc_gcra p = { .quantity = 1 };
    struct adhoc_gcra_result res;
    struct adhoc_peer who;
    char buf[128];
    int n, r;

    if (!a) {
        rl_error(c, PROTO_E_UNKNOWN_COMMAND, "ERR ad-hoc buckets are off");
        return;
    }
    if (resp_arg_int(cmd, 2, 0, RL_INT_MAX, &p.max_burst) < 0 ||
        resp_arg_int(cmd, 3, 0, RL_INT_MAX, &p.count) < 0 ||
        resp_arg_int(cmd, 4, 0, RL_INT_MAX, &p.period_s) < 0 ||
        (cmd->argc == 6 && resp_arg_int(cmd, 5, 0, RL_INT_MAX, &p.quantity) < 0)) {
        rl_error(c, PROTO_E_BAD_REQUEST, "ERR value is not an integer or out of range");
        return;
    }
    if (p.count == 0 || p.period_s == 0) {
        rl_error(c, PROTO_E_BAD_REQUEST, "ERR Cell error: Zero rates are not supported");
        return;
    }
    if (p.period_s > ADHOC_PERIOD_MAX_MS / 1000) {
        rl_too_long(c, "period");
        return;
    }
    if (adhoc_gcra_check(&p) < 0) {
        rl_error(c, PROTO_E_BAD_REQUEST, "ERR value is not an integer or out of range");
        return;
    }
    rl_peer(c, &who);
    r = adhoc_gcra(a, &who, cmd->argv[1], cmd->len[1], &p, (int64_t)clock_now_ms() * 1000000,
                   &res);
    if (r == -ENOSPC) {
        rl_full(c);
        return;
    }
    if (p.quantity > 0)
        rl_count(c, !res.limited);
    n = snprintf(buf, sizeof(buf), "*5\r\n:%d\r\n:%lld\r\n:%lld\r\n:%lld\r\n:%lld\r\n",
                 res.limited ? 1 : 0, (long long)res.limit, (long long)res.remaining,
                 (long long)(res.retry_after_ns / 1000000000),
                 (long long)(res.reset_after_ns / 1000000000));
    rl_out(c, buf, n > 0 && (size_t)n < sizeof(buf) ? n : -1);
}
