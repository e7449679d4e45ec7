/* SPDX-License-Identifier: MIT */
/*
 * verb: dispatch of one parsed request line to its handler through a table
 * of {verb, name, admin, handler}, as OpenSMTPD's commands[] (docs/protocol.md
 * lists the verbs).  The table checks what every verb shares: a request the
 * parser rejected gets its ERR, an admin verb from a peer that is neither
 * uid 0 nor in the admin group on the Unix socket gets ERR forbidden.  The
 * handlers are in hit.h (HIT, TAKE, PEEK, RESET), admin.h (EXPLAIN, RULES,
 * STATS, RELOAD, COUNTERS) and verb.c itself (PING, QUIT, and the fast-path
 * client's FAST and REFILL).  The connection's thread.
 */
#ifndef DIVVY_VERB_H
#define DIVVY_VERB_H

#include "proto.h"

struct conn;

/* Answers @req on @c (into its output, in order; an empty line gets nothing). */
void verb_handle(struct conn *c, const struct proto_req *req);

#endif
