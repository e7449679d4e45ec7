/* SPDX-License-Identifier: MIT */
/*
 * line_hit: HIT, TAKE n, PEEK, DEBIT n and RESET of the line protocol
 * (docs/protocol.md), the verb table's handler for them (line_verb.h): one
 * engine request each, answered in request order on the connection.  The
 * connection's thread.
 */
#ifndef DIVVY_LINE_HIT_H
#define DIVVY_LINE_HIT_H

#include "proto.h"

struct conn;

/* Request @req (a hit verb, parsed without error) of @c to the engine; its
 * answer goes into @c's output in request order, now or once Redis answered. */
void line_hit(struct conn *c, const struct proto_req *req);

#endif
