/* SPDX-License-Identifier: MIT */
/*
 * line_reply: how the line protocol's handlers answer (docs/protocol.md):
 * an ERR line, counted in STATS and metrics, or lines of the handler's
 * making, into the connection's output in request order (conn.h).  Used by
 * the verb table (line_verb.c), the admin verbs (admin.c, admin_reload.c,
 * counters.c) and the line input (line.c).  The connection's thread.
 */
#ifndef DIVVY_LINE_REPLY_H
#define DIVVY_LINE_REPLY_H

#include "proto.h"

struct conn;

/* "ERR <code> [reason]": counted in STATS and metrics, then out_append(). */
void line_err(struct conn *c, enum proto_err err, const char *reason);

/* A reply line (or lines) of the caller's making. */
void line_text(struct conn *c, const char *s);

#endif
