/* SPDX-License-Identifier: MIT */
/*
 * hit_int: what hit.c (local hits, the reply FIFO) and hit_redis.c (the
 * walk on the Redis path) share; no other module includes it.
 */
#ifndef DIVVY_HIT_INT_H
#define DIVVY_HIT_INT_H

#include "eval.h"
#include "hit.h"
#include "reload.h"
#include "rules.h"
#include "store.h"

struct worker;

/* Whether a reply names the deciding rule: all but the line protocol's HIT
 * (RESP's DIVVY.HIT does, docs/resp.md). */
bool hit_names_rule(const struct conn *c, enum proto_verb verb);

/* The tables of this daemon, and rules @rs, as eval.c sees them. */
void hit_env(const struct worker *w, const struct rules *rs, struct eval_env *env);

/* The table of rule @r's host counters (eval_table()). */
struct table *hit_table_of(const struct worker *w, const struct rules_rule *r);

/* ERR no-counter's reason for @r (-ENOSPC or -EDQUOT), logged (rate-limited). */
const char *hit_no_counter_reason(int r);

/* The request of waiting hit @h, as the matcher sees it. */
struct rules_req hit_rq(const struct hit *h);

/* The store's callback for every step a hit waits for (@rep NULL: failed). */
void hit_on_store(void *arg, const struct store_reply *rep);

/*
 * Runs @h's path from h->pos: 1 when a rule decided (h->res, h->rule), 0
 * when it waits for the store, -errno.  Inside the RCU read-side section
 * that yielded @rs.
 */
int hit_run(struct worker *w, struct hit *h, const struct rules *rs);

/* The store answered (@rep, or NULL: failed) the step @h waited for: the
 * same results as hit_run(), under the rules of @st. */
int hit_resume(struct worker *w, struct hit *h, const struct reload_state *st,
               const struct store_reply *rep);

#endif
