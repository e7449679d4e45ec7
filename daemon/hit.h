/* SPDX-License-Identifier: MIT */
/*
 * hit: HIT, TAKE, PEEK and RESET in a worker (hit.c, hit_redis.c).  A request on
 * rules that live only on this host is decided at once (do_hit(), common/
 * eval.c); one whose path reaches a rule kept in Redis (docs/redis.md)
 * becomes a waiting hit: a slot in its connection's reply FIFO (conn.h)
 * that the store's callback continues rule by rule and finally answers
 * (docs/daemon.md "Hits that wait for Redis").  Lease refills run in the
 * background, for this host's hits and for REFILL hints of fast-path
 * clients (verb.c).  Another protocol's listener (the RLS listener, rls.h)
 * submits requests with hit_submit(): the same evaluation, its answer to a
 * callback instead of a connection's FIFO.  Everything here runs on the
 * worker's thread.
 */
#ifndef DIVVY_HIT_H
#define DIVVY_HIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "eval.h"
#include "proto.h"
#include "rules.h"
#include "table.h"

struct conn;
struct worker;

/*
 * Where the answer of a request from another protocol goes (hit_submit()):
 * called once, inside an RCU read-side section, with the rules @res's
 * indexes refer to; @r < 0 when no answer could be made (-ENOSPC/-EDQUOT:
 * a privileged rule found no counter, as ERR no-counter; -errno).
 */
typedef void hit_done_fn(void *arg, int r, const struct rules *rs,
                         const struct eval_result *res);

/* The step a waiting hit waits for. */
enum hit_step {
    STEP_STRICT = 1,            /* a strict script (or a lease PEEK) */
    STEP_DEL,                   /* RESET: DEL in Redis after this host's counters */
    STEP_FETCH,                 /* lease: more credit for this host (we own FETCH) */
    STEP_ASK,                   /* lease: n taken directly in Redis */
};

/*
 * A request on the Redis path (docs/redis.md "Mixed paths"): evaluated rule
 * by rule in order; a rule kept in Redis suspends it until the store calls
 * back.  While it waits it is a slot in its connection's reply FIFO.
 */
struct hit {
    struct hit *next;           /* connection FIFO, or the worker's free list */
    struct worker *w;
    struct conn *c;
    bool done;                  /* answered: reply[] holds the line */
    char reply[PROTO_REPLY_MAX];
    size_t reply_len;
    char *trailer;              /* replies of later requests answered meanwhile */
    size_t trailer_len, trailer_cap;
    char *text;                 /* hit_answer(): a reply of any length, before trailer */
    size_t text_len;

    enum proto_verb verb;
    enum table_op op;
    uint64_t n;
    bool privileged;
    bool rematched;             /* a reload came in between: rules by id */
    uid_t uid;
    uint64_t deadline;          /* no hit waits past this (redis.timeout_ms) */
    uint64_t generation;        /* of the rules path[] indexes */
    uint32_t path[RULES_MATCH_MAX];
    size_t n_path, pos;
    uint64_t done_ids[RULES_MATCH_MAX];         /* rules already applied */
    unsigned n_done;
    struct eval_result res;
    char rule[RULES_LABEL_MAX + 1];             /* the decider's id_str */

    enum hit_step step;
    struct rules_rule step_rule;                /* numbers only after a reload */
    char step_id[RULES_LABEL_MAX + 1];
    struct eval_outcome step_o;                 /* STEP_DEL: this host's reset */
    uint64_t sent_ms;
    uint64_t start_ns;          /* for the hit-duration histogram */
    unsigned lease_tries;
    char *actor;                /* lease steps: the counter's actor */
    size_t actor_len, actor_cap;

    const struct proto_req *req;                /* the worker's scratch until it waits */
    struct proto_req own;

    hit_done_fn *done_fn;       /* hit_submit(): the answer goes here, not to c (NULL) */
    void *done_arg;
};

/* HIT, TAKE, PEEK and RESET (the verb table's handler): answered now, or a
 * waiting hit appended to @c's FIFO when the path reaches Redis. */
void do_hit(struct conn *c, const struct proto_req *req);

/*
 * A TAKE (or PEEK) of another protocol's listener (rls.h): evaluated as
 * do_hit() evaluates one (the same walk, stores, statistics and metrics),
 * its answer handed to @done once: before this returns when it is decided
 * at once, else from the store's callback.  @req is copied if it waits.
 */
void hit_submit(struct worker *w, const struct proto_req *req, bool privileged, uid_t uid,
                hit_done_fn *done, void *arg);

/* Gives slot @h back to @w's free list (or frees it past HIT_FREE_MAX). */
void hit_put(struct worker *w, struct hit *h);

/* Frees @w's recycled slots; when the worker stops. */
void hits_free(struct worker *w);

/* Appends a reply produced while hits of @c wait to the last one's trailer
 * (out_append() calls it).  Out of memory marks @c dead. */
void hit_trail(struct conn *c, const char *s, size_t len);

/*
 * A slot at the end of @c's reply FIFO for a reply that waits for something
 * else than a rule (COUNTERS reading Redis): replies of later requests queue
 * behind it.  Answer it exactly once with hit_answer(), from a store
 * callback (the connection lives until then).  NULL: out of memory.
 */
struct hit *hit_wait(struct conn *c);

/* Answers slot @h with @len bytes at @text (malloc'd; taken over, freed
 * with the slot) and writes the FIFO's answered prefix. */
void hit_answer(struct hit *h, char *text, size_t len);

/* Rule @r's table limits for its lease counter (store.lease_max applied). */
void lease_limits(const struct worker *w, const struct rules_rule *r, struct table_limits *lim);

/*
 * Sends a background lease fetch of @want credits for rule @r's counter
 * @actor in @t, whose FETCH the caller claimed; @key is its Redis key.
 * true when sent; false when it could not be (the claim is released).
 */
bool lease_refill(struct worker *w, struct table *t, const struct table_limits *lim,
                  const struct rules_rule *r, const char *actor, size_t actor_len,
                  const char *key, size_t key_len, uint64_t want);

#endif
