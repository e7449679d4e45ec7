/* SPDX-License-Identifier: MIT */
/*
 * resp_session: the connection commands of a RESP connection (docs/resp.md
 * "Connection commands"), for resp_cmd.c's table: PING, ECHO, QUIT, HELLO
 * (RESP2 or RESP3, AUTH, SETNAME), AUTH, INFO, CLIENT, SELECT; and whether
 * a connection may send commands when a password is set (resp_auth.h).
 * The connection's thread.
 */
#ifndef DIVVY_RESP_SESSION_H
#define DIVVY_RESP_SESSION_H

#include <stdbool.h>

struct conn;
struct resp_cmd;

/* Wrong credentials one connection may send before it is closed. */
#define RESP_AUTH_FAILS_MAX 10

/* Whether @c may send commands: no password is set, or it authenticated
 * under the password in force (not one a reload replaced). */
bool resp_session_authed(const struct conn *c);

void resp_session_ping(struct conn *c, const struct resp_cmd *cmd);
void resp_session_echo(struct conn *c, const struct resp_cmd *cmd);
void resp_session_quit(struct conn *c, const struct resp_cmd *cmd);
void resp_session_hello(struct conn *c, const struct resp_cmd *cmd);
void resp_session_auth(struct conn *c, const struct resp_cmd *cmd);
void resp_session_info(struct conn *c, const struct resp_cmd *cmd);
void resp_session_client(struct conn *c, const struct resp_cmd *cmd);
void resp_session_select(struct conn *c, const struct resp_cmd *cmd);

#endif
