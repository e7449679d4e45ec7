/* SPDX-License-Identifier: MIT */
/*
 * worker_int: a worker thread (worker.h) as the modules it runs see it:
 * conn.c, the front-ends (line_*.c, resp_*.c, rls*.c), the engine
 * (engine*.c), admin.c and counters.c.  Each worker owns a libevent loop,
 * its connections (conn.h), its Redis connection (store.h), its recycled
 * waiting requests (engine.h) and reply slots (replyq.h), and its
 * statistics.  A worker touches another thread's data only through
 * event_active() (stop, watchdog probe, handoff.h) and relaxed atomic
 * counter reads (STATS).
 */
#ifndef DIVVY_WORKER_INT_H
#define DIVVY_WORKER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "handoff.h"
#include "hit_batch.h"
#include "metrics.h"
#include "proto.h"
#include "replyq.h"

struct srv;
struct conn;
struct engine_hit;
struct rls_conn;
struct dlog_ring;

/* Per-worker counters: written by the owner only, read by STATS. */
struct wstats {
    uint64_t hits;
    uint64_t accepted;
    uint64_t rejected;
    uint64_t canary_accepted;
    uint64_t canary_rejected;
    uint64_t errors;
    uint64_t table_full;
    uint64_t redis_fallbacks;   /* rule answers given by on_redis_error */
    uint64_t lease_fetches;     /* lease requests sent (on demand and refills) */
    uint64_t refill_hints;      /* REFILL lines received from fast-path clients */
    uint64_t refill_dropped;    /* ... that started no refill */
    uint64_t reports;           /* REPORT lines received from fast-path clients */
    uint64_t reports_dropped;   /* ... not recorded (report.h, dlog_report()) */
    uint64_t denials[METRICS_N_DENY];   /* denied TAKEs by cause (metrics.h) */
    struct hit_batch_stats scripts;     /* verdict scripts and the requests they decided */
};

struct worker {
    struct srv *s;
    unsigned id;
    struct metrics_worker *mw;  /* this worker's counter block (metrics.h) */
    struct event *ping_ev;      /* the watchdog's liveness probe */
    uint64_t pong;              /* last probe answered (atomic) */
    pthread_t thread;
    bool started;
    bool stopping;
    bool lane;                  /* a lane thread: accepts on root sockets only */
    struct event_base *base;
    struct event **lev;         /* one per listener; NULL for those it does not accept on */
    struct handoff hand;        /* the lane's: privileged connections workers accepted */
    struct event *stop_ev;
    struct event *resume_ev;    /* re-arms listeners after EMFILE */
    struct event *grace_ev;     /* forces the stop after STOP_GRACE_MS */
    struct event *sweep_ev;     /* closes connections whose timeout expired (admit.h) */
    struct conn *conns;
    struct rls_conn *rls;       /* connections of RLS listeners (rls.h) */
    struct wstats st;
    struct store_conn *sc;      /* this worker's Redis connection; NULL without a store */
    struct hit_batch *hb;       /* its verdict scripts in flight by key (hit_batch.h) */
    struct event *flush_ev;     /* settles connections touched by store callbacks */
    bool flush_active;
    struct conn *dirty;         /* connections for flush_ev */
    struct conn *backlog_head;  /* connections with requests left after their turn (conn.h) */
    struct conn *backlog_tail;
    struct event *backlog_ev;   /* a 0 s timer: their next turn, after the next poll */
    struct engine_hit *hit_free;        /* recycled waiting requests (engine.c) */
    unsigned n_hit_free;
    struct replyq_pool replies; /* recycled reply slots of its connections */
    char *actor_buf;            /* RULES_ACTOR_MAX */
    char *key_buf;              /* a Redis key */
    size_t key_cap;
    struct proto_req req;       /* parse scratch: one per worker, not on the stack */
    struct dlog_ring *dlog;     /* its decision log buffer (dlog_writer.h); NULL: log off */
};

/* One writer (the owner), readers on other threads: no read-modify-write needed. */
static inline void stat_inc(uint64_t *c)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

static inline uint64_t stat_get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

#endif
