/* SPDX-License-Identifier: MIT */
/*
 * resp_cmd: the commands of a "resp:" listener's connections (docs/resp.md),
 * dispatched through a table of {name, arity, handler} as line_verb.c does
 * for divvy's lines.  The connection commands (PING, ECHO, QUIT, HELLO,
 * COMMAND, INFO, CLIENT, SELECT) are answered here; DIVVY.HIT, DIVVY.TAKE,
 * DIVVY.DEBIT and DIVVY.PEEK become engine requests (engine.h: the rules,
 * stores and metrics of every protocol) answered here in RESP, in request
 * order (the connection's reply queue, conn.h); the ad-hoc bucket commands
 * are resp_rl.c's.  Everything here runs on the connection's worker thread.
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
