/* SPDX-License-Identifier: MIT */
/*
 * line_reply: the line protocol's replies (see line_reply.h), formatted by
 * common/proto.c.
 */
#include <string.h>

#include "conn.h"
#include "line_reply.h"
#include "metrics.h"
#include "proto.h"
#include "worker_int.h"

void line_err(struct conn *c, enum proto_err err, const char *reason)
{
    char line[PROTO_REPLY_MAX];
    int n = proto_fmt_err(line, sizeof(line), err, reason);

    stat_inc(&c->w->st.errors);
    metrics_error(c->w->mw, err);
    if (n > 0)
        out_append(c, line, (size_t)n);
}

void line_text(struct conn *c, const char *s)
{
    out_append(c, s, strlen(s));
}
