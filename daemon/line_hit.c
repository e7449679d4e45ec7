/* SPDX-License-Identifier: MIT */
/*
 * line_hit: the line protocol's hit verbs (see line_hit.h).  The parsed
 * pairs go to the engine as they are (engine.h); the answer is written in
 * the line's own words by line_answer(): proto_fmt_ok() for HIT, byte for
 * byte divvy's, proto_fmt_ok_rule() naming the deciding rule for the other
 * verbs, proto_fmt_err() for an error.  Each request takes a slot in its
 * connection's reply queue first (conn_reply_wait()), so an answer that
 * waits for Redis keeps its place; one answered at once leaves at once.
 */
#include "conn.h"
#include "engine.h"
#include "line_hit.h"
#include "line_reply.h"
#include "proto.h"
#include "replyq.h"
#include "worker_int.h"

/* The engine's answer to a hit verb, into its slot (counted by the engine). */
static void line_answer(void *arg, const struct engine_answer *a)
{
    struct replyq_slot *s = arg;
    const struct eval_result *res = a->res;
    int n;

    if (a->r < 0)
        n = proto_fmt_err(s->reply, sizeof(s->reply), a->err, a->reason);
    else if (s->kind == PROTO_HIT)
        n = proto_fmt_ok(s->reply, sizeof(s->reply), res->allowed, res->credit, res->reset_s);
    else
        n = proto_fmt_ok_rule(s->reply, sizeof(s->reply), res->allowed, res->credit,
                              res->reset_s, a->rule);
    s->reply_len = n > 0 ? (size_t)n : 0;
    conn_reply_answer(s, NULL, 0);
}

/* HIT, TAKE n, PEEK, DEBIT n, RESET: the engine decides (now, or once Redis
 * answered); the answer keeps its place in the reply queue meanwhile. */
void line_hit(struct conn *c, const struct proto_req *req)
{
    struct engine_req rq = {
        .kv = req->kv, .n_kv = req->n_kv, .n = req->amount, .privileged = c->privileged,
        .uid = c->uid, .name_rule = req->verb != PROTO_HIT,
        .op = req->verb == PROTO_PEEK ? TABLE_PEEK : req->verb == PROTO_RESET ? TABLE_RESET
              : req->verb == PROTO_DEBIT ? TABLE_DEBIT : TABLE_TAKE,
    };
    struct replyq_slot *s = conn_reply_wait(c, engine_wait_size());

    if (!s) {
        line_err(c, PROTO_E_UNKNOWN, "out of memory");
        return;
    }
    s->now = true;
    s->kind = req->verb;
    if (engine_submit(c->w, &rq, line_answer, s) == 0)
        s->now = false;         /* answered from a store callback */
}
