/* SPDX-License-Identifier: MIT */
/*
 * resp_session: a RESP connection's connection commands (see
 * resp_session.h), answered as Redis 7 answers them, in the wording clients
 * know (docs/resp.md).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "conn.h"
#include "proto.h"
#include "resp.h"
#include "resp_auth.h"
#include "resp_conn.h"
#include "resp_session.h"

#define RESP_NOAUTH_HELLO "NOAUTH HELLO must be called with the client already authenticated, " \
                          "otherwise the HELLO <proto> AUTH <user> <pass> option can be used " \
                          "to authenticate the client and select the RESP protocol version at " \
                          "the same time"

bool resp_session_authed(const struct conn *c)
{
    uint64_t gen = resp_auth_generation();
    const struct resp_state *st = resp_state_peek(c);

    return gen == 0 || (st && st->auth_gen == gen);
}

/*
 * Checks @user (NULL: the default user) and @pass; 0 when @c is now
 * authenticated, else the error is answered and < 0 returned.  Wrong
 * credentials cost the client a round trip and nothing else; the
 * RESP_AUTH_FAILS_MAX-th closes the connection (docs/resp.md "AUTH").
 */
static int resp_login(struct conn *c, const char *user, size_t ulen, const char *pass,
                      size_t plen)
{
    struct resp_state *st = resp_state(c);
    uint64_t gen = 0;
    int r;

    if (!st) {
        c->dead = true;
        return -ENOMEM;
    }
    r = resp_auth_check(user, ulen, pass, plen, &gen);
    if (r == -ENOENT) {
        resp_error(c, PROTO_E_BAD_REQUEST, "ERR AUTH <password> called without any password "
                   "configured for the default user. Are you sure your configuration is "
                   "correct?");
        return r;
    }
    if (r < 0) {
        resp_error(c, PROTO_E_FORBIDDEN, "WRONGPASS invalid username-password pair or user is "
                   "disabled.");
        if (++st->auth_fails >= RESP_AUTH_FAILS_MAX)
            c->closing = true;
        return r;
    }
    st->auth_gen = gen;
    return 0;
}

void resp_session_ping(struct conn *c, const struct resp_cmd *cmd)
{
    if (cmd->argc > 2)
        resp_error(c, PROTO_E_BAD_REQUEST, "ERR wrong number of arguments for 'ping' command");
    else if (cmd->argc == 2)
        resp_bulk(c, cmd->argv[1], cmd->len[1]);
    else
        resp_simple(c, "PONG");
}

void resp_session_echo(struct conn *c, const struct resp_cmd *cmd)
{
    resp_bulk(c, cmd->argv[1], cmd->len[1]);
}

void resp_session_quit(struct conn *c, const struct resp_cmd *cmd)
{
    (void)cmd;
    resp_simple(c, "OK");
    c->closing = true;
}

/* AUTH password | AUTH username password. */
void resp_session_auth(struct conn *c, const struct resp_cmd *cmd)
{
    if (cmd->argc > 3) {
        resp_error(c, PROTO_E_BAD_REQUEST, "ERR syntax error");
        return;
    }
    if (cmd->argc == 2 ? resp_login(c, NULL, 0, cmd->argv[1], cmd->len[1]) == 0
                       : resp_login(c, cmd->argv[1], cmd->len[1], cmd->argv[2],
                                    cmd->len[2]) == 0)
        resp_simple(c, "OK");
}

/*
 * HELLO [protover [AUTH username password] [SETNAME name]]: switches to
 * RESP2 or RESP3 (after authenticating, when AUTH is given) and answers
 * Redis 7's map in the version now spoken.  Nothing changes when any part
 * is refused.
 */
void resp_session_hello(struct conn *c, const struct resp_cmd *cmd)
{
    const char *user = NULL, *pass = NULL;
    size_t ulen = 0, plen = 0;
    struct resp_state *st;
    int64_t ver = 0;
    char text[160], opt[65];

    if (cmd->argc >= 2) {
        if (resp_arg_int(cmd, 1, INT32_MIN, INT32_MAX, &ver) < 0) {
            resp_error(c, PROTO_E_BAD_REQUEST, "ERR Protocol version is not an integer or out "
                       "of range");
            return;
        }
        if (ver < 2 || ver > 3) {
            resp_error(c, PROTO_E_BAD_REQUEST, "NOPROTO unsupported protocol version");
            return;
        }
    }
    for (unsigned i = 2; i < cmd->argc; i++) {
        if (resp_arg_is(cmd, i, "AUTH") && i + 2 < cmd->argc) {
            user = cmd->argv[i + 1];
            ulen = cmd->len[i + 1];
            pass = cmd->argv[i + 2];
            plen = cmd->len[i + 2];
            i += 2;
        } else if (resp_arg_is(cmd, i, "SETNAME") && i + 1 < cmd->argc) {
            i++;                /* accepted, not kept (CLIENT SETNAME) */
        } else {
            size_t n = cmd->len[i] < sizeof(opt) - 1 ? cmd->len[i] : sizeof(opt) - 1;

            for (size_t k = 0; k < n; k++)
                opt[k] = cmd->argv[i][k] >= 0x20 && cmd->argv[i][k] < 0x7f ? cmd->argv[i][k]
                                                                           : '?';
            opt[n] = '\0';
            snprintf(text, sizeof(text), "ERR Syntax error in HELLO option '%s'", opt);
            resp_error(c, PROTO_E_BAD_REQUEST, text);
            return;
        }
    }
    if (pass && resp_login(c, user, ulen, pass, plen) < 0)
        return;
    if (!pass && !resp_session_authed(c)) {
        resp_error(c, PROTO_E_FORBIDDEN, RESP_NOAUTH_HELLO);
        return;
    }
    if (ver) {
        st = resp_state(c);
        if (!st) {
            c->dead = true;
            return;
        }
        st->proto = (unsigned)ver;
    }
    resp_map(c, 7);
    resp_bulk_str(c, "server");
    resp_bulk_str(c, "divvy");
    resp_bulk_str(c, "version");
    resp_bulk_str(c, DIVVY_VERSION);
    resp_bulk_str(c, "proto");
    resp_int(c, resp_version(c));
    resp_bulk_str(c, "id");
    resp_int(c, c->fd);
    resp_bulk_str(c, "mode");
    resp_bulk_str(c, "standalone");
    resp_bulk_str(c, "role");
    resp_bulk_str(c, "master");
    resp_bulk_str(c, "modules");
    resp_array(c, 0);
}

/* INFO: enough for clients that check "loading:0" before they are ready
 * (ioredis); a bulk string in RESP2 and RESP3 alike. */
void resp_session_info(struct conn *c, const struct resp_cmd *cmd)
{
    char text[256];
    int n;

    (void)cmd;
    n = snprintf(text, sizeof(text),
                 "# Server\r\ndivvy_version:%s\r\nredis_mode:standalone\r\n"
                 "# Persistence\r\nloading:0\r\n", DIVVY_VERSION);
    resp_bulk(c, text, (size_t)n);
}

/* CLIENT SETNAME / SETINFO (accepted, not kept), GETNAME (none), ID. */
void resp_session_client(struct conn *c, const struct resp_cmd *cmd)
{
    if (resp_arg_is(cmd, 1, "SETNAME") || resp_arg_is(cmd, 1, "SETINFO"))
        resp_simple(c, "OK");
    else if (resp_arg_is(cmd, 1, "GETNAME"))
        resp_null(c);
    else if (resp_arg_is(cmd, 1, "ID"))
        resp_int(c, c->fd);
    else
        resp_error(c, PROTO_E_UNKNOWN_COMMAND, "ERR unknown CLIENT subcommand");
}

/* SELECT 0: there is one database. */
void resp_session_select(struct conn *c, const struct resp_cmd *cmd)
{
    int64_t db;

    if (resp_arg_int(cmd, 1, 0, 0, &db) < 0)
        resp_error(c, PROTO_E_BAD_REQUEST, "ERR DB index is out of range");
    else
        resp_simple(c, "OK");
}
