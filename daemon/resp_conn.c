/* SPDX-License-Identifier: MIT */
/*
 * resp_conn: a RESP connection's own state and the reply writers (see
 * resp_conn.h).  Replies go through out_append() like the line protocol's,
 * so they keep request order behind answers that wait for Redis (conn.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "metrics.h"
#include "resp.h"
#include "resp_conn.h"
#include "worker_int.h"

struct resp_state *resp_state(struct conn *c)
{
    struct resp_state *st = c->proto_state;

    if (!st) {
        st = calloc(1, sizeof(*st));
        if (!st)
            return NULL;
        st->proto = 2;
        c->proto_state = st;
    }
    return st;
}

unsigned resp_version(const struct conn *c)
{
    const struct resp_state *st = c->proto_state;

    return st ? st->proto : 2;
}

void resp_state_free(struct conn *c)
{
    struct resp_state *st = c->proto_state;

    if (!st)
        return;
    free(st->queue);
    free(st);
    c->proto_state = NULL;
    c->proto_bytes = 0;
}

void resp_out(struct conn *c, const char *s, int n)
{
    if (n > 0)
        out_append(c, s, (size_t)n);
    else
        c->dead = true;         /* a formatter's buffer too small: a bug, never input */
}

void resp_error(struct conn *c, enum proto_err err, const char *text)
{
    char buf[PROTO_REPLY_MAX];

    stat_inc(&c->w->st.errors);
    metrics_error(c->w->mw, err);
    resp_out(c, buf, resp_fmt_error(buf, sizeof(buf), text));
}

void resp_proto_err(struct conn *c, enum proto_err err, const char *reason)
{
    char buf[PROTO_REPLY_MAX];

    stat_inc(&c->w->st.errors);
    metrics_error(c->w->mw, err);
    resp_out(c, buf, resp_fmt_proto_err(buf, sizeof(buf), err, reason));
}

void resp_simple(struct conn *c, const char *s)
{
    char buf[PROTO_REPLY_MAX];

    resp_out(c, buf, resp_fmt_simple(buf, sizeof(buf), s));
}

void resp_int(struct conn *c, int64_t v)
{
    char buf[32];

    resp_out(c, buf, resp_fmt_int(buf, sizeof(buf), v));
}

void resp_bulk(struct conn *c, const char *s, size_t len)
{
    char head[32];
    int n = snprintf(head, sizeof(head), "$%zu\r\n", len);

    resp_out(c, head, n);
    out_append(c, s, len);
    out_append(c, "\r\n", 2);
}

void resp_bulk_str(struct conn *c, const char *s)
{
    resp_bulk(c, s, strlen(s));
}

void resp_array(struct conn *c, unsigned n)
{
    char buf[32];

    resp_out(c, buf, resp_fmt_array(buf, sizeof(buf), n));
}

void resp_map(struct conn *c, unsigned n)
{
    char buf[32];

    if (resp_version(c) == 3)
        resp_out(c, buf, snprintf(buf, sizeof(buf), "%%%u\r\n", n));
    else
        resp_array(c, 2 * n);
}

void resp_null(struct conn *c)
{
    if (resp_version(c) == 3)
        out_append(c, "_\r\n", 3);
    else
        out_append(c, "$-1\r\n", 5);
}
