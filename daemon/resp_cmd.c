/* SPDX-License-Identifier: MIT */
/*
 * resp_cmd: a RESP connection's commands (see resp_cmd.h).  A command is a
 * line of commands[]: its name, its arity as Redis states it (n: exactly n
 * arguments with the name, -n: at least n) and its handler.  Replies go
 * through out_append() like the line protocol's, so they keep request
 * order behind hits that wait for Redis (conn.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "answer.h"
#include "conn.h"
#include "engine.h"
#include "metrics.h"
#include "proto.h"
#include "reqkv.h"
#include "resp.h"
#include "resp_cmd.h"
#include "resp_rl.h"
#include "worker_int.h"

struct resp_command {
    const char *name;
    int arity;
    void (*handler)(struct conn *c, const struct resp_cmd *cmd);
};

/* ---- replies ------------------------------------------------------------------------- */

static void resp_out(struct conn *c, const char *s, int n)
{
    if (n > 0)
        out_append(c, s, (size_t)n);
    else
        c->dead = true;         /* a formatter's buffer too small: a bug, never input */
}

/* "-<text>": counted as divvy's @err is (STATS errors, metrics). */
static void resp_error(struct conn *c, enum proto_err err, const char *text)
{
    char buf[PROTO_REPLY_MAX];

    stat_inc(&c->w->st.errors);
    metrics_error(c->w->mw, err);
    resp_out(c, buf, resp_fmt_error(buf, sizeof(buf), text));
}

/* divvy's error @err as RESP speaks it ("-ERR <code> <reason>"), counted. */
static void resp_proto_err(struct conn *c, enum proto_err err, const char *reason)
{
    char buf[PROTO_REPLY_MAX];

    stat_inc(&c->w->st.errors);
    metrics_error(c->w->mw, err);
    resp_out(c, buf, resp_fmt_proto_err(buf, sizeof(buf), err, reason));
}

static void resp_simple(struct conn *c, const char *s)
{
    char buf[PROTO_REPLY_MAX];

    resp_out(c, buf, resp_fmt_simple(buf, sizeof(buf), s));
}

static void resp_int(struct conn *c, int64_t v)
{
    char buf[32];

    resp_out(c, buf, resp_fmt_int(buf, sizeof(buf), v));
}

static void resp_bulk(struct conn *c, const char *s, size_t len)
{
    char head[32];
    int n = snprintf(head, sizeof(head), "$%zu\r\n", len);

    resp_out(c, head, n);
    out_append(c, s, len);
    out_append(c, "\r\n", 2);
}

static void resp_bulk_str(struct conn *c, const char *s)
{
    resp_bulk(c, s, strlen(s));
}

static void resp_array(struct conn *c, unsigned n)
{
    char buf[32];

    resp_out(c, buf, resp_fmt_array(buf, sizeof(buf), n));
}

/* Up to 64 printable bytes of argument @i, for error messages. */
static void resp_arg_text(const struct resp_cmd *cmd, unsigned i, char *buf, size_t size)
{
    size_t n = cmd->len[i] < size - 1 ? cmd->len[i] : size - 1;

    for (size_t k = 0; k < n; k++) {
        unsigned char ch = (unsigned char)cmd->argv[i][k];

        buf[k] = ch >= 0x20 && ch < 0x7f && ch != '\'' ? (char)ch : '?';
    }
    buf[n] = '\0';
}

/* ---- connection commands -------------------------------------------------------------- */

static void resp_ping(struct conn *c, const struct resp_cmd *cmd)
{
    if (cmd->argc == 2)
        resp_bulk(c, cmd->argv[1], cmd->len[1]);
    else
        resp_simple(c, "PONG");
}

static void resp_echo(struct conn *c, const struct resp_cmd *cmd)
{
    resp_bulk(c, cmd->argv[1], cmd->len[1]);
}

static void resp_quit(struct conn *c, const struct resp_cmd *cmd)
{
    (void)cmd;
    resp_simple(c, "OK");
    c->closing = true;
}

/* HELLO [protover [AUTH user pass] [SETNAME name]]: only version 2, so a
 * client asking for RESP3 falls back as it would with Redis 5. */
static void resp_hello(struct conn *c, const struct resp_cmd *cmd)
{
    int64_t ver = 2;

    if (cmd->argc >= 2 && (resp_arg_int(cmd, 1, 0, INT32_MAX, &ver) < 0 || ver != 2)) {
        resp_error(c, PROTO_E_BAD_REQUEST, "NOPROTO sorry, this protocol version is not "
                                           "supported (divvyd speaks RESP2)");
        return;
    }
    resp_array(c, 14);
    resp_bulk_str(c, "server");
    resp_bulk_str(c, "divvy");
    resp_bulk_str(c, "version");
    resp_bulk_str(c, DIVVY_VERSION);
    resp_bulk_str(c, "proto");
    resp_int(c, 2);
    resp_bulk_str(c, "id");
    resp_int(c, c->fd);
    resp_bulk_str(c, "mode");
    resp_bulk_str(c, "standalone");
    resp_bulk_str(c, "role");
    resp_bulk_str(c, "master");
    resp_bulk_str(c, "modules");
    resp_array(c, 0);
}

/* COMMAND [COUNT | DOCS | INFO ...]: divvyd describes no commands (clients
 * only use the reply for hints); COUNT says how many there are. */
static size_t resp_n_commands(void);

static void resp_command(struct conn *c, const struct resp_cmd *cmd)
{
    if (resp_arg_is(cmd, 1, "COUNT"))
        resp_int(c, (int64_t)resp_n_commands());
    else
        resp_array(c, 0);
}

/* INFO: enough for clients that check "loading:0" before they are ready
 * (ioredis). */
static void resp_info(struct conn *c, const struct resp_cmd *cmd)
{
    char text[256];
    int n;

    (void)cmd;
    n = snprintf(text, sizeof(text),
                 "# Server\r\ndivvy_version:%s\r\nredis_mode:standalone\r\n"
                 "# Persistence\r\nloading:0\r\n", DIVVY_VERSION);
    resp_bulk(c, text, (size_t)n);
}

/* CLIENT SETNAME / SETINFO (accepted, not kept), GETNAME, ID. */
static void resp_client(struct conn *c, const struct resp_cmd *cmd)
{
    if (resp_arg_is(cmd, 1, "SETNAME") || resp_arg_is(cmd, 1, "SETINFO"))
        resp_simple(c, "OK");
    else if (resp_arg_is(cmd, 1, "GETNAME"))
        out_append(c, "$-1\r\n", 5);
    else if (resp_arg_is(cmd, 1, "ID"))
        resp_int(c, c->fd);
    else
        resp_error(c, PROTO_E_UNKNOWN_COMMAND, "ERR unknown CLIENT subcommand");
}

/* SELECT 0: there is one database. */
static void resp_select(struct conn *c, const struct resp_cmd *cmd)
{
    int64_t db;

    if (resp_arg_int(cmd, 1, 0, 0, &db) < 0)
        resp_error(c, PROTO_E_BAD_REQUEST, "ERR DB index is out of range");
    else
        resp_simple(c, "OK");
}

/* ---- divvy's rules ------------------------------------------------------------------ */

/* The engine's answer to a DIVVY.* command (counted by the engine):
 * [allowed, credit, reset_seconds, rule], or an error. */
static size_t resp_fmt_answer(unsigned kind, const struct engine_answer *a, char *buf,
                              size_t size)
{
    int n;

    (void)kind;
    if (a->r < 0)
        n = resp_fmt_proto_err(buf, size, a->err, a->reason);
    else
        n = resp_fmt_hit(buf, size, a->res->allowed, a->res->credit, a->res->reset_s, a->rule);
    return n > 0 ? (size_t)n : 0;
}

/* Request @req to the engine; its answer keeps its place in request order. */
static void resp_hit(struct conn *c, const struct proto_req *req)
{
    struct engine_req rq = {
        .kv = req->kv, .n_kv = req->n_kv, .n = req->amount, .privileged = c->privileged,
        .uid = c->uid, .name_rule = true,
        .protocol = METRICS_PROTO_RESP,
        .op = req->verb == PROTO_PEEK ? TABLE_PEEK : req->verb == PROTO_DEBIT ? TABLE_DEBIT
                                                                              : TABLE_TAKE,
    };

    answer_submit(c, &rq, resp_fmt_answer, req->verb);
}

/* A key or value the line protocol can carry (docs/resp.md "DIVVY.HIT"). */
static bool resp_word_ok(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] == '"' || s[i] == '\n' || s[i] == '\r' || s[i] == '\0')
            return false;
    return true;
}

/* The bytes argument @s takes in the line protocol (proto_fmt_string()):
 * quoted when empty or holding '=' or white space (resp_word_ok() refused
 * the rest of what it would quote). */
static size_t resp_word_len(const char *s, size_t len)
{
    bool quote = len == 0;

    for (size_t i = 0; i < len && !quote; i++)
        quote = s[i] == '=' || s[i] == ' ' || s[i] == '\t' || s[i] == '\v' || s[i] == '\f';
    return len + (quote ? 2 : 0);
}

/* TAKE's or DEBIT's count as the line protocol reads it: decimal digits
 * only, 1..@max.  0 and *ret, or -EINVAL. */
static int resp_amount(const char *s, size_t len, uint64_t max, uint64_t *ret)
{
    uint64_t n = 0;

    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        n = n * 10 + (uint64_t)(s[i] - '0');
        if (n > max)
            n = max + 1;                /* saturate: keeps n * 10 from overflowing */
    }
    if (len == 0 || n < 1 || n > max)
        return -EINVAL;
    *ret = n;
    return 0;
}

/*
 * DIVVY.HIT k v [k v ...], DIVVY.TAKE n k v ..., DIVVY.DEBIT n k v ...,
 * DIVVY.PEEK k v ...: the arguments become the engine request the line
 * protocol's "HIT k=v ..." would (reqkv.h: sorted, a repeated key's last
 * value wins), with the line's checks and errors in the line's order: what
 * it cannot carry, its length as a line (docs/resp.md "DIVVY.HIT"), the
 * count, an empty key, too many keys.  Both protocols share every rule,
 * counter, store and limit.
 */
static void resp_divvy(struct conn *c, const struct resp_cmd *cmd, enum proto_verb verb,
                       unsigned first)
{
    struct proto_req *req = &c->w->req;
    size_t pos = verb == PROTO_HIT ? 3 : verb == PROTO_DEBIT ? 5 : 4, off = 0, w;
    int r;

    if ((cmd->argc - first) % 2 != 0) {
        resp_error(c, PROTO_E_BAD_REQUEST, "ERR wrong number of arguments: keys and values "
                                           "come in pairs");
        return;
    }
    /* As long as the line would be ("VERB a1 k=v ...\n", PROTO_LINE_MAX at most),
     * checked argument by argument as the line was once built. */
    for (unsigned i = 1; i < cmd->argc; i++) {
        if (!resp_word_ok(cmd->argv[i], cmd->len[i])) {
            resp_error(c, PROTO_E_BAD_REQUEST, "ERR bad-request keys and values cannot hold "
                                               "'\"', CR, LF or NUL");
            return;
        }
        w = resp_word_len(cmd->argv[i], cmd->len[i]);
        if (pos + 1 + w + 1 > PROTO_LINE_MAX + 1)
            goto too_long;
        pos += 1 + w;
    }
    if (pos + 1 >= PROTO_LINE_MAX)
        goto too_long;
    req->verb = verb;
    req->err = PROTO_E_NONE;
    req->reason = NULL;
    req->amount = 1;
    req->n_kv = 0;
    if (first == 2 && resp_amount(cmd->argv[1], cmd->len[1],
                                  verb == PROTO_DEBIT ? PROTO_DEBIT_MAX : PROTO_TAKE_MAX,
                                  &req->amount) < 0) {
        resp_proto_err(c, PROTO_E_BAD_REQUEST, verb == PROTO_DEBIT
                       ? "DEBIT needs a count from 1 to 1000000000000"
                       : "TAKE needs a count from 1 to 1000000000");
        return;
    }
    for (unsigned i = first; i + 1 < cmd->argc; i += 2) {
        if (cmd->len[i] == 0) {
            resp_proto_err(c, PROTO_E_BAD_REQUEST, "empty key");
            return;
        }
        r = reqkv_put(req, &off, cmd->argv[i], cmd->len[i], cmd->argv[i + 1], cmd->len[i + 1]);
        if (r == -E2BIG) {
            resp_proto_err(c, PROTO_E_TOO_MANY_KEYS, "more than 32 distinct keys");
            return;
        }
        if (r < 0)
            goto too_long;
    }
    resp_hit(c, req);
    return;
too_long:
    resp_proto_err(c, PROTO_E_LINE_TOO_LONG, "request longer than 4096 bytes as a divvy line");
}

static void resp_divvy_hit(struct conn *c, const struct resp_cmd *cmd)
{
    resp_divvy(c, cmd, PROTO_HIT, 1);
}

static void resp_divvy_take(struct conn *c, const struct resp_cmd *cmd)
{
    resp_divvy(c, cmd, PROTO_TAKE, 2);
}

/* DEBIT n: charged even past what is left (docs/protocol.md "DEBIT"). */
static void resp_divvy_debit(struct conn *c, const struct resp_cmd *cmd)
{
    resp_divvy(c, cmd, PROTO_DEBIT, 2);
}

static void resp_divvy_peek(struct conn *c, const struct resp_cmd *cmd)
{
    resp_divvy(c, cmd, PROTO_PEEK, 1);
}

/* ---- dispatch ------------------------------------------------------------------------- */

static const struct resp_command commands[] = {
    { "PING", -1, resp_ping },
    { "ECHO", 2, resp_echo },
    { "QUIT", -1, resp_quit },
    { "HELLO", -1, resp_hello },
    { "COMMAND", -1, resp_command },
    { "INFO", -1, resp_info },
    { "CLIENT", -2, resp_client },
    { "SELECT", 2, resp_select },
    { "DIVVY.HIT", -3, resp_divvy_hit },
    { "DIVVY.TAKE", -4, resp_divvy_take },
    { "DIVVY.DEBIT", -4, resp_divvy_debit },
    { "DIVVY.PEEK", -3, resp_divvy_peek },
    { "RL.REDUCE", -4, resp_rl_reduce },
    { "RL.GET", -4, resp_rl_get },
    { "RL.PREDUCE", -4, resp_rl_preduce },
    { "RL.PGET", -4, resp_rl_pget },
    { "CL.THROTTLE", -5, resp_cl_throttle },
};
static const size_t n_commands = sizeof(commands) / sizeof(commands[0]);

static size_t resp_n_commands(void)
{
    return n_commands;
}

static void resp_dispatch(struct conn *c, const struct resp_cmd *cmd)
{
    const struct resp_command *rc = NULL;
    char name[65], text[160];

    for (size_t i = 0; i < n_commands && !rc; i++)
        if (resp_arg_is(cmd, 0, commands[i].name))
            rc = &commands[i];
    resp_arg_text(cmd, 0, name, sizeof(name));
    if (!rc) {
        snprintf(text, sizeof(text), "ERR unknown command '%s'", name);
        resp_error(c, PROTO_E_UNKNOWN_COMMAND, text);
        return;
    }
    if (rc->arity > 0 ? cmd->argc != (unsigned)rc->arity : cmd->argc < (unsigned)-rc->arity) {
        snprintf(text, sizeof(text), "ERR wrong number of arguments for '%s' command", name);
        resp_error(c, PROTO_E_BAD_REQUEST, text);
        return;
    }
    rc->handler(c, cmd);
}

static ssize_t resp_input(struct conn *c, const char *data, size_t len, bool eof)
{
    struct resp_cmd cmd;
    const char *why;
    char text[PROTO_REPLY_MAX];
    ssize_t r;

    (void)eof;                  /* an unterminated command at EOF is not answered */
    r = resp_parse(data, len, &cmd, &why);
    if (r == -EPROTO) {
        snprintf(text, sizeof(text), "ERR %s", why);
        resp_error(c, PROTO_E_BAD_REQUEST, text);
        c->closing = true;
        return r;
    }
    if (r > 0 && cmd.argc > 0)
        resp_dispatch(c, &cmd);
    return r;
}

const struct conn_proto resp_proto = {
    .name = "resp",
    .on_input = resp_input,
    .fmt_refusal = resp_fmt_proto_err,
};
