/* SPDX-License-Identifier: MIT */
/*
 * resp_cmd: the commands of a "resp:" listener's connections (docs/resp.md),
 * dispatched through a table of {name, arity, handler, flags} as
 * line_verb.c does for divvy's lines: a command is refused before AUTH when
 * a password is set (resp_session.h) and queued inside MULTI
 * (resp_multi.h).  The connection commands are resp_session.c's (COMMAND
 * is answered here, it knows the table); DIVVY.HIT, DIVVY.TAKE,
 * DIVVY.DEBIT and DIVVY.PEEK become engine requests (engine.h: the rules,
 * stores and metrics of every protocol) answered here in RESP, in request
 * order (the connection's reply queue, conn.h); the ad-hoc bucket commands
 * are resp_rl.c's.  Everything here runs on the connection's worker thread.
 */
#ifndef DIVVY_RESP_CMD_H
#define DIVVY_RESP_CMD_H

#include <stddef.h>
#include <sys/types.h>

struct conn_proto;

/*
 * RESP as a front-end, what a "resp:" listener carries (conn.h): its
 * on_input() parses the first command of a connection's input (resp.h) and
 * answers it, in request order; after a protocol error, answered, the
 * connection closes once its replies are written (c->closing), as Redis
 * does.  A refused connection gets a RESP error.
 */
extern const struct conn_proto resp_proto;

#endif
