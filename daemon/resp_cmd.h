/* SPDX-License-Identifier: MIT */
/*
 * resp_cmd: the commands of a "resp:" listener's connections (docs/resp.md),
 * dispatched through a table of {name, arity, handler} as verb.c does for
 * divvy's lines.  The connection commands (PING, ECHO, QUIT, HELLO, COMMAND,
 * INFO, CLIENT, SELECT) are answered here; DIVVY.HIT, DIVVY.TAKE and
 * DIVVY.PEEK become the line protocol's HIT, TAKE and PEEK and go through
 * the same hit code (hit.h: rules, stores, metrics), which formats their
 * replies as RESP because the connection speaks it (conn->proto).
 * Everything here runs on the connection's worker thread.
 */
#ifndef DIVVY_RESP_CMD_H
#define DIVVY_RESP_CMD_H

#include <stddef.h>
#include <sys/types.h>

struct conn;

/*
 * conn.c's input hook for a RESP connection: parses the first command in
 * @data[0..@len) (resp.h) and answers it on @c (into its output, in
 * request order).  Returns the bytes consumed, 0 when the command is not
 * complete yet, or -EPROTO after answering a protocol error: @c then closes
 * once its replies are written (c->closing), as Redis does.
 */
ssize_t resp_input(struct conn *c, const char *data, size_t len);

#endif
