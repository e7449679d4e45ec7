/* SPDX-License-Identifier: MIT */
/*
 * resp_multi: a RESP connection's transactions (docs/resp.md "MULTI"):
 * MULTI, EXEC, DISCARD, WATCH (refused: divvy's counters are not Redis
 * keys a client could watch) and UNWATCH.  After MULTI the dispatcher hands
 * each command it accepted (known, with its arity) to resp_multi_queue(),
 * which keeps its wire bytes and answers +QUEUED; EXEC runs them in order
 * and answers the array of their replies, each in its place even when it
 * waits for Redis (the reply queue, conn.h).  A queue holds at most
 * RESP_MULTI_MAX commands and server.max_output_bytes bytes, counted in the
 * shared output budget (conn_charge_proto()).  The connection's thread.
 */
#ifndef DIVVY_RESP_MULTI_H
#define DIVVY_RESP_MULTI_H

#include <stdbool.h>
#include <stddef.h>

struct conn;
struct resp_cmd;

#define RESP_MULTI_MAX 1024     /* commands of one transaction (CONN_PEND_MAX) */

/* Runs one queued command, as the dispatcher would outside a transaction. */
typedef void resp_multi_run_fn(struct conn *c, const struct resp_cmd *cmd);

/* Whether @c is between MULTI and EXEC or DISCARD. */
bool resp_multi_active(const struct conn *c);

/* Keeps the command whose wire bytes are @raw[0..@len) for EXEC and answers
 * +QUEUED; over a bound, answers an error and dooms the transaction. */
void resp_multi_queue(struct conn *c, const char *raw, size_t len);

/* A command refused inside a transaction (unknown, wrong arity, not allowed
 * there): EXEC will answer -EXECABORT.  Nothing when @c is not in one. */
void resp_multi_doom(struct conn *c);

void resp_multi_multi(struct conn *c, const struct resp_cmd *cmd);
void resp_multi_discard(struct conn *c, const struct resp_cmd *cmd);
void resp_multi_watch(struct conn *c, const struct resp_cmd *cmd);
void resp_multi_unwatch(struct conn *c, const struct resp_cmd *cmd);
/* EXEC, each queued command run by @run. */
void resp_multi_exec(struct conn *c, resp_multi_run_fn *run);

#endif
