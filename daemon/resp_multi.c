/* SPDX-License-Identifier: MIT */
/*
 * resp_multi: transactions (see resp_multi.h).  The queue is the commands'
 * wire bytes back to back, parsed again by EXEC (resp_parse() cannot fail
 * on bytes it parsed once); a doomed transaction keeps none of them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "admit.h"
#include "conn.h"
#include "resp.h"
#include "resp_conn.h"
#include "resp_multi.h"
#include "srv_int.h"
#include "worker_int.h"

/* Ends @st's transaction: its queue freed, out of the output budget. */
static void multi_reset(struct conn *c, struct resp_state *st)
{
    free(st->queue);
    st->queue = NULL;
    st->queue_len = st->queue_cap = 0;
    st->n_queued = 0;
    st->multi = st->multi_dirty = false;
    conn_charge_proto(c, 0);
}

bool resp_multi_active(const struct conn *c)
{
    const struct resp_state *st = resp_state_peek(c);

    return st && st->multi;
}

void resp_multi_doom(struct conn *c)
{
    struct resp_state *st = resp_state_peek(c);

    if (!st || !st->multi)
        return;
    st->multi_dirty = true;
    /* Nothing of a doomed transaction will run: keep none of it. */
    free(st->queue);
    st->queue = NULL;
    st->queue_len = st->queue_cap = 0;
    conn_charge_proto(c, 0);
}

/* Whether @more bytes may join @c's queue: within server.max_output_bytes,
 * and within @c's share of the shared output budget when it is spent. */
static bool multi_fits(const struct conn *c, const struct resp_state *st, size_t more)
{
    const struct worker *w = c->w;
    size_t unread = c->out_len - c->out_off + c->replies.bytes + c->replies.held;
    size_t total = st->queue_len + more;

    if (total > w->s->o.max_output_bytes)
        return false;
    return !admit_out_pause(w->s->admit, &c->slot, unread + total);
}

void resp_multi_queue(struct conn *c, const char *raw, size_t len)
{
    struct resp_state *st = resp_state_peek(c);
    size_t cap;
    char *grown;

    if (st->multi_dirty) {
        st->n_queued++;
        resp_simple(c, "QUEUED");
        return;
    }
    if (st->n_queued >= RESP_MULTI_MAX) {
        resp_error(c, PROTO_E_BUSY, "ERR busy a transaction holds at most 1024 commands; "
                   "EXEC will abort (docs/resp.md \"MULTI\")");
        resp_multi_doom(c);
        return;
    }
    if (!multi_fits(c, st, len)) {
        resp_error(c, PROTO_E_BUSY, "ERR busy transaction queue over its share of the output "
                   "budget (server.max_output_bytes, server.output_budget_bytes); EXEC will "
                   "abort");
        resp_multi_doom(c);
        return;
    }
    if (st->queue_len + len > st->queue_cap) {
        cap = st->queue_cap ? st->queue_cap : 1024;
        while (cap < st->queue_len + len)
            cap *= 2;
        grown = realloc(st->queue, cap);
        if (!grown) {
            c->dead = true;
            return;
        }
        st->queue = grown;
        st->queue_cap = cap;
        conn_charge_proto(c, cap);
    }
    memcpy(st->queue + st->queue_len, raw, len);
    st->queue_len += len;
    st->n_queued++;
    resp_simple(c, "QUEUED");
}

void resp_multi_multi(struct conn *c, const struct resp_cmd *cmd)
{
    struct resp_state *st = resp_state(c);

    (void)cmd;
    if (!st) {
        c->dead = true;
        return;
    }
    st->multi = true;
    resp_simple(c, "OK");
}

void resp_multi_discard(struct conn *c, const struct resp_cmd *cmd)
{
    struct resp_state *st = resp_state_peek(c);

    (void)cmd;
    if (!st || !st->multi) {
        resp_error(c, PROTO_E_BAD_REQUEST, "ERR DISCARD without MULTI");
        return;
    }
    multi_reset(c, st);
    resp_simple(c, "OK");
}

/* WATCH key ...: a watched key makes EXEC fail when another client changed
 * it; divvy's counters are no keys a client names, so nothing could be
 * watched honestly. */
void resp_multi_watch(struct conn *c, const struct resp_cmd *cmd)
{
    (void)cmd;
    resp_error(c, PROTO_E_UNKNOWN_COMMAND, "ERR WATCH is not supported by divvyd: its "
               "counters are not keys a client can watch (docs/resp.md \"MULTI\")");
}

/* UNWATCH: nothing is ever watched. */
void resp_multi_unwatch(struct conn *c, const struct resp_cmd *cmd)
{
    (void)cmd;
    resp_simple(c, "OK");
}

void resp_multi_exec(struct conn *c, resp_multi_run_fn *run)
{
    struct resp_state *st = resp_state_peek(c);
    struct resp_cmd cmd;
    const char *why;
    char *queue;
    size_t len, off = 0;
    unsigned n;
    ssize_t r;

    if (!st || !st->multi) {
        resp_error(c, PROTO_E_BAD_REQUEST, "ERR EXEC without MULTI");
        return;
    }
    if (st->multi_dirty) {
        multi_reset(c, st);
        resp_error(c, PROTO_E_BAD_REQUEST, "EXECABORT Transaction discarded because of "
                   "previous errors.");
        return;
    }
    /* The queue is ours now; the commands run as outside a transaction. */
    queue = st->queue;
    len = st->queue_len;
    n = st->n_queued;
    st->queue = NULL;
    multi_reset(c, st);
    resp_array(c, n);
    while (off < len && !c->dead) {
        r = resp_parse(queue + off, len - off, &cmd, &why);
        if (r <= 0) {
            c->dead = true;     /* bytes parsed once parse again: a bug, never input */
            break;
        }
        run(c, &cmd);
        off += (size_t)r;
    }
    free(queue);
}
