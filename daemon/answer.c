/* SPDX-License-Identifier: MIT */
/*
 * answer: engine requests of a connection answered in order (see
 * answer.h).  The completion's argument lives on the stack while the
 * engine decides; a request that waits is redirected (engine_wait_to()) to
 * the slot it takes in the reply queue, before control returns to the event
 * loop and so before any store callback can run.  Nothing is allocated for
 * a request decided at once.
 */
#include "answer.h"
#include "conn.h"
#include "engine.h"
#include "proto.h"
#include "replyq.h"
#include "worker_int.h"

/* A request while the engine decides it at once. */
struct answer_call {
    struct conn *c;
    answer_fmt_fn *fmt;
    unsigned kind;
};

static void answer_now(void *arg, const struct engine_answer *a)
{
    struct answer_call *call = arg;
    char buf[PROTO_REPLY_MAX];

    out_append(call->c, buf, call->fmt(call->kind, a, buf, sizeof(buf)));
}

/* Once Redis answered: into the slot that kept its place. */
static void answer_later(void *arg, const struct engine_answer *a)
{
    struct replyq_slot *s = arg;

    s->reply_len = ((answer_fmt_fn *)s->aux)(s->kind, a, s->reply, sizeof(s->reply));
    conn_reply_answer(s, NULL, 0);
}

/* A waiting request whose place could not be kept: its answer goes nowhere. */
static void answer_dropped(void *arg, const struct engine_answer *a)
{
    (void)arg;
    (void)a;
}

void answer_submit(struct conn *c, const struct engine_req *rq, answer_fmt_fn *fmt,
                   unsigned kind)
{
    struct answer_call call = { .c = c, .fmt = fmt, .kind = kind };
    struct engine_hit *h;
    struct replyq_slot *s;

    if (engine_submit(c->w, rq, answer_now, &call, &h) > 0)
        return;
    s = conn_reply_wait(c, engine_wait_size());
    if (!s) {
        /* No place for its answer: the client must not wait for it. */
        engine_wait_to(h, answer_dropped, NULL);
        c->dead = true;
        return;
    }
    s->kind = kind;
    s->aux = (void *)fmt;
    engine_wait_to(h, answer_later, s);
}
