/* SPDX-License-Identifier: MIT */
/*
 * line_hit: the line protocol's hit verbs (see line_hit.h).  The parsed
 * pairs go to the engine as they are (engine.h), in request order
 * (answer.h); the answer is written in the line's own words by line_fmt():
 * proto_fmt_ok() for HIT, byte for byte divvy's, proto_fmt_ok_rule()
 * naming the deciding rule for the other verbs, proto_fmt_err() for an
 * error.
 */
#include "answer.h"
#include "conn.h"
#include "engine.h"
#include "line_hit.h"
#include "proto.h"

/* The engine's answer to hit verb @verb (counted by the engine). */
static size_t line_fmt(unsigned verb, const struct engine_answer *a, char *buf, size_t size)
{
    const struct eval_result *res = a->res;
    int n;

    if (a->r < 0)
        n = proto_fmt_err(buf, size, a->err, a->reason);
    else if (verb == PROTO_HIT)
        n = proto_fmt_ok(buf, size, res->allowed, res->credit, res->reset_s);
    else
        n = proto_fmt_ok_rule(buf, size, res->allowed, res->credit, res->reset_s, a->rule);
    return n > 0 ? (size_t)n : 0;
}

void line_hit(struct conn *c, const struct proto_req *req)
{
    struct engine_req rq = {
        .kv = req->kv, .n_kv = req->n_kv, .n = req->amount, .privileged = c->privileged,
        .uid = c->uid, .pid = c->pid, .name_rule = req->verb != PROTO_HIT,
        .op = req->verb == PROTO_PEEK ? TABLE_PEEK : req->verb == PROTO_RESET ? TABLE_RESET
              : req->verb == PROTO_DEBIT ? TABLE_DEBIT : TABLE_TAKE,
    };

    answer_submit(c, &rq, line_fmt, req->verb);
}
