/* SPDX-License-Identifier: MIT */
/*
 * engine_int: what engine.c (the entry, local decisions, the one settle
 * step) and engine_redis.c (the walk on the Redis path) share; no other
 * module includes it.
 */
#ifndef DIVVY_ENGINE_INT_H
#define DIVVY_ENGINE_INT_H

#include "engine.h"
#include "eval.h"
#include "reload.h"
#include "rules.h"
#include "store.h"

struct worker;

/* The step a waiting request waits for. */
enum engine_step {
    STEP_STRICT = 1,            /* a strict script (or a lease PEEK) */
    STEP_DEL,                   /* RESET: DEL in Redis after this host's counters */
    STEP_FETCH,                 /* lease: more credit for this host (we own FETCH) */
    STEP_ASK,                   /* lease: n taken directly in Redis */
};

/*
 * A request on the Redis path (docs/redis.md "Mixed paths"): evaluated rule
 * by rule in order; a rule kept in Redis suspends it until the store calls
 * back.  Recycled through the worker's free list.
 */
/* engine_hit.lease_tries: below FETCH a lease hit may fetch (after two
 * fetches that others drained first it takes directly); ASKED once an ask
 * Redis refused was tried again on the lease (engine_redis.c). */
#define LEASE_TRIES_FETCH   2
#define LEASE_TRIES_ASKED   3

struct engine_hit {
    struct engine_hit *next;    /* the worker's free list */
    struct worker *w;

    enum table_op op;
    uint64_t n;
    bool privileged;
    bool name_rule;
    bool rematched;             /* a reload came in between: rules by id */
    uid_t uid;
    engine_done_fn *done;       /* called once, by engine_settle() */
    void *done_arg;

    uint64_t deadline;          /* no hit waits past this (redis.timeout_ms) */
    uint64_t generation;        /* of the rules path[] indexes */
    uint32_t path[RULES_MATCH_MAX];
    size_t n_path, pos;
    uint64_t done_ids[RULES_MATCH_MAX];         /* rules already applied */
    unsigned n_done;
    struct eval_result res;
    char rule[RULES_LABEL_MAX + 1];             /* the decider's id_str */

    enum engine_step step;
    struct rules_rule step_rule;                /* numbers only after a reload */
    char step_id[RULES_LABEL_MAX + 1];
    struct eval_outcome step_o;                 /* STEP_DEL: this host's reset */
    uint64_t sent_ms;
    uint64_t start_ns;          /* for the hit-duration histogram */
    unsigned lease_tries;       /* lease rounds of this rule: fetches, then an ask refused */
    char *actor;                /* lease steps: the counter's actor */
    size_t actor_len, actor_cap;

    const struct proto_kv *kv;  /* the caller's pairs until it waits, then own_kv */
    unsigned n_kv;
    struct proto_kv own_kv[PROTO_KV_MAX];
    char own_buf[PROTO_LINE_MAX + PROTO_KV_MAX * 2];
    enum metrics_protocol protocol;     /* engine_req.protocol */
    uint32_t pid;                       /* engine_req.pid */
};

/* The tables of this daemon, and rules @rs, as eval.c sees them. */
void engine_env(const struct worker *w, const struct rules *rs, struct eval_env *env);

/* The table of rule @r's host counters (eval_table()). */
struct table *engine_table_of(const struct worker *w, const struct rules_rule *r);

/* The request of waiting hit @h, as the matcher sees it. */
struct rules_req engine_rq(const struct engine_hit *h);

/* The store's callback for every step a hit waits for (@rep NULL: failed). */
void engine_on_store(void *arg, const struct store_reply *rep);

/*
 * Runs @h's path from h->pos: 1 when a rule decided (h->res, h->rule), 0
 * when it waits for the store, -errno.  Inside the RCU read-side section
 * that yielded @rs.
 */
int engine_run(struct worker *w, struct engine_hit *h, const struct rules *rs);

/* The store answered (@rep, or NULL: failed) the step @h waited for: the
 * same results as engine_run(), under the rules of @st. */
int engine_resume(struct worker *w, struct engine_hit *h, const struct reload_state *st,
                  const struct store_reply *rep);

#endif
