/* SPDX-License-Identifier: MIT */
/*
 * admin: the verbs that describe the daemon rather than count a hit:
 * EXPLAIN and RULES (the rules in force), STATS (counters summed over the
 * workers), RELOAD and DROPIN (admin_reload.c); COUNTERS is counters.h's.
 * Handlers of the line protocol's verb table (line_verb.h), which has already
 * refused RELOAD and DROPIN to peers that are not admin.  Replies are
 * docs/protocol.md's "OK <n>" and n lines (line_reply.h).  Each reads
 * the rules in its own RCU read-side section; the connection's thread.
 */
#ifndef DIVVY_ADMIN_H
#define DIVVY_ADMIN_H

#include <stddef.h>

#include "proto.h"

struct conn;

/* EXPLAIN k=v...: every rule up to the decider, why it matched or not. */
void admin_explain(struct conn *c, const struct proto_req *req);

/* RULES: every rule in force, one line each. */
void admin_rules(struct conn *c, const struct proto_req *req);

/* STATS: key=value lines (hits, errors, tables, Redis, admission). */
void admin_stats(struct conn *c, const struct proto_req *req);

/* RELOAD [diff=true] [dry_run=true] (admin_reload.c): reload_apply() as
 * SIGHUP does; with either flag the report of what changed.  ERR
 * reload-failed says why not. */
void admin_reload(struct conn *c, const struct proto_req *req);

/* DROPIN op=list|add|remove (admin_reload.c): the rules service, include_dir's
 * drop-ins added or removed by a reload that validates them first. */
void admin_dropin(struct conn *c, const struct proto_req *req);

/* Appends @s to the line @buf (@size bytes, *@pos used) as a quoted
 * protocol string: '"' and control bytes become '_'.  Always NUL-terminated. */
void admin_append_quoted(char *buf, size_t size, size_t *pos, const char *s);

/* Appends printf output to the line @buf, cut at @size (NUL-terminated). */
void admin_append_fmt(char *buf, size_t size, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
