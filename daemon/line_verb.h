/* SPDX-License-Identifier: MIT */
/*
 * line_verb: the line protocol's dispatch of one parsed request line to its
 * handler through a table of {verb, name, admin, handler}, as OpenSMTPD's
 * commands[] (docs/protocol.md lists the verbs).  The table checks what every verb shares: a request the
 * parser rejected gets its ERR, an admin verb from a peer that is neither
 * uid 0 nor in the admin group on the Unix socket gets ERR forbidden.  The
 * handlers are in admin.h (EXPLAIN, RULES, STATS, RELOAD, DROPIN),
 * counters.h (COUNTERS) and line_verb.c itself: the hit verbs (HIT, TAKE,
 * PEEK, DEBIT, RESET: engine requests, engine.h), PING, QUIT, and the
 * fast-path client's FAST, REFILL and REPORT (report.h).  The connection's
 * thread.
 */
#ifndef DIVVY_LINE_VERB_H
#define DIVVY_LINE_VERB_H

#include "proto.h"

struct conn;

/* Answers @req on @c (into its output, in order; an empty line gets nothing). */
void line_verb_handle(struct conn *c, const struct proto_req *req);

#endif
