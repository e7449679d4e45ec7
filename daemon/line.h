/* SPDX-License-Identifier: MIT */
/*
 * line: divvy's line protocol as a front-end (docs/protocol.md), what a
 * "unix:" or "tcp:" listener carries (conn.h's struct conn_proto): each
 * complete line of a connection's input is parsed (common/proto.c) and
 * handed to the verb table (line_verb.h); an over-long line is answered ERR
 * line-too-long and skipped to its end; refusals are ERR lines.  The
 * connection's thread.
 */
#ifndef DIVVY_LINE_H
#define DIVVY_LINE_H

#include "conn.h"

extern const struct conn_proto line_proto;

#endif
