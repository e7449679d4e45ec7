/* SPDX-License-Identifier: MIT */
/*
 * engine: divvyd's decisions (engine.c, engine_redis.c, hit_batch.c).  One
 * entry, engine_submit(): a request as key/value pairs, an operation (HIT
 * and TAKE n are TABLE_TAKE, PEEK, DEBIT n, RESET), the peer's privilege
 * and uid, and a completion that is called exactly once, with the answer.
 * A request on rules that live only on this host is decided at once
 * (common/eval.h); one whose path reaches a rule kept in Redis
 * (docs/redis.md) waits: the store's callback continues it rule by rule
 * and calls the completion (docs/dev/daemon.md "Hits that wait for Redis").
 * The engine counts every decision (STATS, metrics) and formats nothing:
 * each protocol (line_hit.c, resp_cmd.c, rls_stream.c) builds requests
 * from its own wire and answers in its own format.  Lease refills run in
 * the background, for this host's hits and for fast-path clients' REFILL
 * hints.  Everything here runs on the worker's thread.
 */
#ifndef DIVVY_ENGINE_H
#define DIVVY_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "eval.h"
#include "metrics.h"
#include "proto.h"
#include "rules.h"
#include "table.h"

struct engine_hit;
struct worker;

/* A request.  The pairs are borrowed for the call (copied if it waits). */
struct engine_req {
    const struct proto_kv *kv;  /* sorted by key, no key twice (as proto_parse() leaves them) */
    unsigned n_kv;
    enum table_op op;           /* TABLE_TAKE (HIT, TAKE n), _PEEK, _DEBIT or _RESET */
    uint64_t n;                 /* TAKE n, DEBIT n; 1 otherwise */
    bool privileged;            /* root or the admin group on the Unix socket */
    uid_t uid;                  /* the peer's, for RESET's log line; (uid_t)-1: unknown */
    bool name_rule;             /* the answer names the deciding rule (rule below) */
    enum metrics_protocol protocol;     /* the front-end, for divvy_decisions_total
                                         * (0: the line protocol) */
    uint32_t pid;               /* the peer's, for the decision log; 0: unknown */
};

/* An answer, valid for the completion's call only (inside an RCU read-side
 * section: @rs stays valid). */
struct engine_answer {
    int r;                      /* 0, or why there is no decision:
                                 *   -EPERM  RESET by an unprivileged peer
                                 *   -ERANGE DEBIT above a rule's max_debit
                                 *   -ENOSPC, -EDQUOT: a privileged rule found no counter
                                 *   -ENOMEM, other -errno: internal */
    enum proto_err err;         /* r < 0: its code (docs/protocol.md "Errors"), as counted */
    const char *reason;         /* r < 0: what went wrong, in words (no '"' or newline) */
    const struct rules *rs;     /* the rules res's indexes refer to; NULL when r < 0 */
    const struct eval_result *res;      /* r == 0: the decision */
    const char *rule;           /* r == 0: the deciding rule's id (with name_rule, else "") */
};

typedef void engine_done_fn(void *arg, const struct engine_answer *a);

/*
 * Decides @rq on @w and calls @done(@arg, answer) exactly once: before this
 * returns (1), or later from the store's callback (0), never inside a call
 * that sends to the store.  Errors are answers too (answer.r), counted in
 * STATS errors and metrics like every protocol's.  When it waits (0) and
 * @ret_wait is not NULL, *ret_wait is the waiting request, whose completion
 * the caller may redirect with engine_wait_to() before it returns to the
 * event loop: a caller whose @arg lives on its stack must.
 */
int engine_submit(struct worker *w, const struct engine_req *rq, engine_done_fn *done,
                  void *arg, struct engine_hit **ret_wait);

/* The waiting request @h (engine_submit()'s *ret_wait) calls @done(@arg)
 * instead of the completion it was submitted with. */
void engine_wait_to(struct engine_hit *h, engine_done_fn *done, void *arg);

/* Bytes one waiting request holds (for the connection budgets). */
size_t engine_wait_size(void);

/* Frees @w's recycled waiting-request state; when the worker stops. */
void engine_free(struct worker *w);

/* Rule @r's table limits for its lease counter (store.lease_max applied). */
void engine_lease_limits(const struct worker *w, const struct rules_rule *r,
                         struct table_limits *lim);

/*
 * Sends a background lease fetch of @want credits for rule @r's counter
 * @actor in @t, whose FETCH the caller claimed; @key is its Redis key.
 * true when sent; false when it could not be (the claim is released).
 */
bool engine_lease_refill(struct worker *w, struct table *t, const struct table_limits *lim,
                         const struct rules_rule *r, const char *actor, size_t actor_len,
                         const char *key, size_t key_len, uint64_t want);

#endif
