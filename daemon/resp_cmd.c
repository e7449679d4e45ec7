/* SPDX-License-Identifier: MIT */
/*
 * resp_cmd: a RESP connection's commands (see resp_cmd.h).  A command is a
 * line of commands[]: its name, its arity as Redis states it (n: exactly n
 * arguments with the name, -n: at least n), its handler and what it may do
 * before AUTH and inside MULTI.  Replies go through resp_conn.h's writers,
 * so they keep request order behind hits that wait for Redis (conn.h).
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
#include "resp_conn.h"
#include "resp_multi.h"
#include "resp_rl.h"
#include "resp_session.h"
#include "worker_int.h"

/* What a command may do besides running (resp_dispatch()). */
enum {
    RESP_F_NOAUTH = 1 << 0,     /* runs before AUTH when a password is set */
    RESP_F_NOW = 1 << 1,        /* runs at once inside a transaction, not queued */
    RESP_F_NOMULTI = 1 << 2,    /* refused inside a transaction (which it dooms) */
};

struct resp_command {
    const char *name;
    int arity;
    void (*handler)(struct conn *c, const struct resp_cmd *cmd);
    unsigned flags;
};

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

/* ---- connection commands ------------------------------------------------------------ */

/* COMMAND [COUNT | DOCS | INFO ...]: divvyd describes no commands (clients
 * only use the reply for hints); COUNT says how many there are. */
static size_t resp_n_commands(void);

static void resp_command(struct conn *c, const struct resp_cmd *cmd)
{
    if (resp_arg_is(cmd, 1, "COUNT"))
        resp_int(c, (int64_t)resp_n_commands());
    else if (resp_arg_is(cmd, 1, "DOCS"))
        resp_map(c, 0);             /* a map of command names to their docs */
    else
        resp_array(c, 0);
}

static void resp_run(struct conn *c, const struct resp_cmd *cmd);

static void resp_exec(struct conn *c, const struct resp_cmd *cmd)
{
    (void)cmd;
    resp_multi_exec(c, resp_run);
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
        .uid = c->uid, .pid = c->pid, .name_rule = true,
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
    { "PING", -1, resp_session_ping, 0 },
    { "ECHO", 2, resp_session_echo, 0 },
    { "QUIT", -1, resp_session_quit, RESP_F_NOAUTH | RESP_F_NOW },
    { "HELLO", -1, resp_session_hello, RESP_F_NOAUTH | RESP_F_NOMULTI },
    { "AUTH", -2, resp_session_auth, RESP_F_NOAUTH | RESP_F_NOMULTI },
    { "COMMAND", -1, resp_command, 0 },
    { "INFO", -1, resp_session_info, 0 },
    { "CLIENT", -2, resp_session_client, 0 },
    { "SELECT", 2, resp_session_select, 0 },
    { "MULTI", 1, resp_multi_multi, RESP_F_NOMULTI },
    { "EXEC", 1, resp_exec, RESP_F_NOW },
    /* Also before AUTH: a password a reload replaced must not trap a transaction. */
    { "DISCARD", 1, resp_multi_discard, RESP_F_NOW | RESP_F_NOAUTH },
    { "WATCH", -2, resp_multi_watch, RESP_F_NOMULTI },
    { "UNWATCH", 1, resp_multi_unwatch, 0 },
    { "DIVVY.HIT", -3, resp_divvy_hit, 0 },
    { "DIVVY.TAKE", -4, resp_divvy_take, 0 },
    { "DIVVY.DEBIT", -4, resp_divvy_debit, 0 },
    { "DIVVY.PEEK", -3, resp_divvy_peek, 0 },
    { "RL.REDUCE", -4, resp_rl_reduce, 0 },
    { "RL.GET", -4, resp_rl_get, 0 },
    { "RL.PREDUCE", -4, resp_rl_preduce, 0 },
    { "RL.PGET", -4, resp_rl_pget, 0 },
    { "CL.THROTTLE", -5, resp_cl_throttle, 0 },
};
static const size_t n_commands = sizeof(commands) / sizeof(commands[0]);

static size_t resp_n_commands(void)
{
    return n_commands;
}

static const struct resp_command *resp_lookup(const struct resp_cmd *cmd)
{
    for (size_t i = 0; i < n_commands; i++)
        if (resp_arg_is(cmd, 0, commands[i].name))
            return &commands[i];
    return NULL;
}

/* A queued command at EXEC: checked when it was queued, so it only runs. */
static void resp_run(struct conn *c, const struct resp_cmd *cmd)
{
    const struct resp_command *rc = resp_lookup(cmd);

    if (rc)
        rc->handler(c, cmd);
    else
        c->dead = true;         /* queued only when known: a bug, never input */
}

/*
 * Answers @cmd, whose wire bytes are @raw[0..@len): a command known, with
 * its arity, allowed before AUTH when a password is set (Redis refuses even
 * PING), then run, or queued inside a transaction (resp_multi.h), where a
 * refusal dooms the EXEC as Redis's does.
 */
static void resp_dispatch(struct conn *c, const struct resp_cmd *cmd, const char *raw,
                          size_t len)
{
    const struct resp_command *rc = resp_lookup(cmd);
    bool multi = resp_multi_active(c);
    char name[65], text[160];

    resp_arg_text(cmd, 0, name, sizeof(name));
    if (!rc) {
        snprintf(text, sizeof(text), "ERR unknown command '%s'", name);
        resp_error(c, PROTO_E_UNKNOWN_COMMAND, text);
        resp_multi_doom(c);
        return;
    }
    if (rc->arity > 0 ? cmd->argc != (unsigned)rc->arity : cmd->argc < (unsigned)-rc->arity) {
        snprintf(text, sizeof(text), "ERR wrong number of arguments for '%s' command", name);
        resp_error(c, PROTO_E_BAD_REQUEST, text);
        resp_multi_doom(c);
        return;
    }
    if (!(rc->flags & RESP_F_NOAUTH) && !resp_session_authed(c)) {
        resp_error(c, PROTO_E_FORBIDDEN, "NOAUTH Authentication required.");
        resp_multi_doom(c);
        return;
    }
    if (multi && (rc->flags & RESP_F_NOMULTI)) {
        resp_error(c, PROTO_E_BAD_REQUEST, "ERR Command not allowed inside a transaction");
        resp_multi_doom(c);
        return;
    }
    if (multi && !(rc->flags & RESP_F_NOW))
        resp_multi_queue(c, raw, len);
    else
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
        resp_dispatch(c, &cmd, data, (size_t)r);
    return r;
}

const struct conn_proto resp_proto = {
    .name = "resp",
    .on_input = resp_input,
    .fmt_refusal = resp_fmt_proto_err,
    .on_free = resp_state_free,
};
