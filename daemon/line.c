/* SPDX-License-Identifier: MIT */
/*
 * line: the line protocol's input (see line.h).  One call answers one line:
 * the transport (conn.c) calls again for the next, within the connection's
 * turn, so its fairness and budgets apply line by line.
 */
#include <errno.h>
#include <string.h>

#include "conn.h"
#include "line.h"
#include "line_reply.h"
#include "line_verb.h"
#include "proto.h"
#include "worker_int.h"

/* Skips to the end of the over-long line being discarded: bytes consumed. */
static ssize_t line_skip(struct conn *c, const char *data, size_t len)
{
    const char *nl = memchr(data, '\n', len);

    if (!nl)
        return (ssize_t)len;
    c->discarding = false;
    return nl - data + 1;
}

static ssize_t line_input(struct conn *c, const char *data, size_t len, bool eof)
{
    struct proto_req *req = &c->w->req;
    ssize_t r;

    if (c->discarding)
        return line_skip(c, data, len);
    r = proto_parse(data, len, req);
    if (r == 0) {
        if (!eof || c->in_len >= IN_CAP)
            return 0;
        /* EOF after an unterminated last line: answer it as if terminated. */
        c->in[c->in_len++] = '\n';
        r = proto_parse(data, len + 1, req);
    }
    if (r == -EMSGSIZE) {
        /* Skip to the end of this line; requests after it are still answered. */
        line_err(c, PROTO_E_LINE_TOO_LONG, "request line longer than 4096 bytes");
        c->discarding = true;
        return line_skip(c, data, len);
    }
    if (r <= 0) {
        line_err(c, PROTO_E_UNKNOWN, "unparseable input");
        c->dead = true;
        return -EPROTO;
    }
    line_verb_handle(c, req);
    return r;
}

const struct conn_proto line_proto = {
    .name = "line",
    .on_input = line_input,
    .fmt_refusal = proto_fmt_err,
};
