/* SPDX-License-Identifier: MIT */
/*
 * answer: a connection's request to the engine answered in request order,
 * for the front-ends whose replies keep their order (the line protocol's
 * line_hit.c, RESP's resp_cmd.c).  A request the engine decides at once is
 * answered at once (out_append(): in order behind any answer that waits);
 * only one that waits for Redis takes a slot in the connection's reply
 * queue (conn_reply_wait()), answered from the store's callback.  The
 * front-end gives the format; the connection's thread.
 */
#ifndef DIVVY_ANSWER_H
#define DIVVY_ANSWER_H

#include <stddef.h>

#include "engine.h"

struct conn;

/* Writes answer @a of a request of front-end kind @kind into @buf of @size
 * bytes (PROTO_REPLY_MAX is enough): its length, 0 when it could not. */
typedef size_t answer_fmt_fn(unsigned kind, const struct engine_answer *a, char *buf,
                             size_t size);

/* Submits @rq of @c to the engine; its answer, written by @fmt for @kind,
 * goes to @c's output in request order.  @fmt must be a function that
 * lives as long as the program (it is kept while the request waits). */
void answer_submit(struct conn *c, const struct engine_req *rq, answer_fmt_fn *fmt,
                   unsigned kind);

#endif
