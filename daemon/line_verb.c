/* SPDX-License-Identifier: MIT */
/*
 * line_verb: the line protocol's verb table, its hit verbs and its small
 * verbs (see line_verb.h).  A verb is one line of commands[]; a new verb is
 * a handler and a line here, plus its word in common/proto.c and its page
 * in docs/protocol.md.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urcu/urcu-memb.h>

#include "admin.h"
#include "clock.h"
#include "conn.h"
#include "counters.h"
#include "dlog_writer.h"
#include "engine.h"
#include "eval.h"
#include "fastfd.h"
#include "line_hit.h"
#include "line_reply.h"
#include "line_verb.h"
#include "proto.h"
#include "reload.h"
#include "report.h"
#include "srv_int.h"
#include "store.h"
#include "table.h"
#include "worker_int.h"

/*
 * REFILL rule=<id> index=<n> actor=<actor> (docs/protocol.md): libdivvy's
 * fast path saw the lease of that fast_path lease counter fall below its
 * low-water mark with nobody fetching.  Claims the refill (FETCH) and
 * fetches in the background, as for a hit of our own.  Never answered, not
 * even with ERR, so the client need not wait; a hint that names no such
 * rule (a reload in between), or a lease that needs nothing, is dropped
 * and counted.
 */
static void verb_refill(struct conn *c, const struct proto_req *req)
{
    struct worker *w = c->w;
    const struct proto_kv *rk = proto_find(req, "rule", 4), *ik = proto_find(req, "index", 5),
                          *ak = proto_find(req, "actor", 5);
    const struct reload_state *st;
    struct table_limits lim;
    struct rules_rule r;
    struct table_key tk;
    uint64_t want = 0, now = clock_now_ms();
    unsigned long idx;
    char *end;
    int rc, klen;
    bool sent;

    stat_inc(&w->st.refill_hints);
    if (req->err != PROTO_E_NONE || !rk || !ik || !ak || !w->sc)
        goto dropped;
    errno = 0;
    idx = strtoul(ik->value, &end, 10);
    if (errno || *end || ik->value_len == 0 || idx > UINT32_MAX)
        goto dropped;
    urcu_memb_read_lock();
    st = reload_current(w->s->o.reload);
    if (rules_get(st->rules, (uint32_t)idx, &r) < 0 || strcmp(r.id_str, rk->value) != 0 ||
        r.store != RULES_STORE_LEASE || !r.fast_path || eval_zero(&r, &(struct eval_outcome){ 0 })) {
        urcu_memb_read_unlock();
        goto dropped;
    }
    engine_lease_limits(w, &r, &lim);
    tk.rule_id = r.id;
    tk.actor = ak->value;
    tk.actor_len = ak->value_len;
    rc = table_lease_refill_claim(w->s->o.fast, &tk, &lim, now, &want);
    sent = false;
    if (rc > 0) {
        /* Claimed: released again when the fetch cannot be sent (breaker open). */
        klen = store_key(w->s->o.store, r.id_str, ak->value, ak->value_len, w->key_buf,
                         w->key_cap);
        if (klen > 0)
            sent = engine_lease_refill(w, w->s->o.fast, &lim, &r, ak->value, ak->value_len,
                                w->key_buf, (size_t)klen, want);
        else
            table_lease_abort(w->s->o.fast, &tk, &lim, now);
    }
    urcu_memb_read_unlock();
    if (sent)
        return;
dropped:
    stat_inc(&w->st.refill_dropped);
}

/* Whether @c's peer may report (FAST's check, made once per connection:
 * SO_PEERCRED names the process that connected, for the connection's life). */
static bool report_peer(struct conn *c)
{
    uid_t uid;
    pid_t pid;

    if (c->report_peer == 0) {
        c->report_peer = -1;
        if (c->is_unix && c->w->s->o.fastfd &&
            fastfd_peer(c->w->s->o.fastfd, c->fd, &uid, &pid) == 0) {
            c->report_uid = (uint32_t)uid;
            c->report_pid = (uint32_t)pid;
            c->report_peer = 1;
        }
    }
    return c->report_peer > 0;
}

/*
 * REPORT <mono_ms> <op> <n> <0|1> <credit> <reset_s> <rule id> k=v ...
 * (docs/protocol.md, docs/dev/fast-report.md): a decision a fast-path
 * client took in its own process, recorded in the decision log under the
 * peer's SO_PEERCRED uid and pid, marked reported.  Never answered, not even
 * with ERR; one that is not recorded (a peer outside the fast group or on
 * TCP, a malformed or stale report, a rule not on its path or not fast, the
 * log off, or the worker's share for reports full) is counted as dropped.
 */
static void verb_report(struct conn *c, const struct proto_req *req)
{
    struct worker *w = c->w;
    const struct reload_state *st;
    struct dlog_decision d;
    int r = -EPERM;

    stat_inc(&w->st.reports);
    if (report_peer(c)) {
        urcu_memb_read_lock();
        st = reload_current(w->s->o.reload);
        r = report_decision(req, st->rules, c->report_uid, c->report_pid, clock_now_ms(),
                            clock_unix_ns() / 1000000u, &d);
        urcu_memb_read_unlock();
    }
    /* d's strings are the request's, not the rules': no read lock needed. */
    if (r == 0)
        r = dlog_report(w, &d);
    if (r < 0)
        stat_inc(&w->st.reports_dropped);
}

/* FAST (docs/protocol.md): the memfds ride on the reply's first byte, so
 * every earlier reply must be on its way first. */
static void verb_fast(struct conn *c, const struct proto_req *req)
{
    int r;

    (void)req;
    if (!c->is_unix || !c->w->s->o.fastfd) {
        line_err(c, PROTO_E_FORBIDDEN, "the fast path is only for Unix-socket peers");
        return;
    }
    if (c->replies.head || conn_flush(c) != 1) {
        line_err(c, PROTO_E_BUSY, "FAST must not follow unanswered requests");
        c->closing = true;              /* as every busy reply */
        return;
    }
    r = fastfd_send(c->w->s->o.fastfd, c->fd);
    if (r == -EPERM)
        line_err(c, PROTO_E_FORBIDDEN, "not in the fast-path group");
    else if (r < 0)
        c->dead = true;
}

static void verb_ping(struct conn *c, const struct proto_req *req)
{
    (void)req;
    line_text(c, "OK pong\n");
}

static void verb_quit(struct conn *c, const struct proto_req *req)
{
    (void)req;
    line_text(c, "OK bye\n");
    c->closing = true;
}

struct verb {
    const char *name;           /* for ERR forbidden's reason */
    bool admin;                 /* root or the admin group on the Unix socket only */
    bool silent;                /* never answered, not even with ERR: runs before any check */
    void (*handler)(struct conn *c, const struct proto_req *req);
};

/* By enum proto_verb; PROTO_NONE (an empty line) has no handler: no reply. */
static const struct verb commands[] = {
    [PROTO_HIT] = { "HIT", false, false, line_hit },
    [PROTO_TAKE] = { "TAKE", false, false, line_hit },
    [PROTO_PEEK] = { "PEEK", false, false, line_hit },
    [PROTO_RESET] = { "RESET", true, false, line_hit },
    [PROTO_EXPLAIN] = { "EXPLAIN", false, false, admin_explain },
    [PROTO_RULES] = { "RULES", false, false, admin_rules },
    [PROTO_STATS] = { "STATS", false, false, admin_stats },
    [PROTO_RELOAD] = { "RELOAD", true, false, admin_reload },
    [PROTO_PING] = { "PING", false, false, verb_ping },
    [PROTO_QUIT] = { "QUIT", false, false, verb_quit },
    [PROTO_COUNTERS] = { "COUNTERS", true, false, counters_request },
    [PROTO_REFILL] = { "REFILL", false, true, verb_refill },
    [PROTO_FAST] = { "FAST", false, false, verb_fast },
    [PROTO_DROPIN] = { "DROPIN", true, false, admin_dropin },
    [PROTO_DEBIT] = { "DEBIT", false, false, line_hit },
    [PROTO_REPORT] = { "REPORT", false, true, verb_report },
};

_Static_assert(sizeof(commands) / sizeof(commands[0]) == PROTO_N_VERBS,
               "commands[] has a line for every verb of proto.h");

void line_verb_handle(struct conn *c, const struct proto_req *req)
{
    const struct verb *v = NULL;
    char reason[96];

    if ((size_t)req->verb < sizeof(commands) / sizeof(commands[0]) &&
        commands[req->verb].handler)
        v = &commands[req->verb];
    /* Before the error check: REFILL and REPORT are never answered, not even with ERR. */
    if (v && v->silent) {
        v->handler(c, req);
        return;
    }
    if (req->err != PROTO_E_NONE) {
        line_err(c, req->err, req->reason);
        return;
    }
    if (!v)
        return;                         /* PROTO_NONE: an empty line */
    if (v->admin && !c->privileged) {
        snprintf(reason, sizeof(reason), "%s needs root or the admin group on the Unix socket",
                 v->name);
        line_err(c, PROTO_E_FORBIDDEN, reason);
        return;
    }
    v->handler(c, req);
}
