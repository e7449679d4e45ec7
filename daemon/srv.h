/* SPDX-License-Identifier: MIT */
/*
 * srv: divvyd's listeners, worker threads and connections.  Each worker runs
 * its own libevent loop, accepts from every listening socket, and answers the
 * requests of its connections in order (docs/protocol.md).  A hit is decided
 * inside an RCU read-side section on the current rules (reload.h) with
 * common/eval.c; the hit path allocates nothing and takes no lock: one read
 * of whatever arrived, every complete line answered into the connection's
 * output buffer, one write.
 *
 * Rules kept in Redis (store.h, docs/redis.md) make a hit wait: such a hit
 * holds a slot in its connection's reply queue (replyq.h), and replies of
 * later requests queue behind it until it is answered, so every connection
 * still gets its replies in request order (docs/daemon.md).
 *
 * The server's stages are modules of their own, sharing struct srv through
 * srv_int.h: the transport (conn.c, listener.c, worker.c), the front-ends of
 * the protocols (line*.c, resp*.c, rls*.c), the admin verbs (admin*.c,
 * counters.c), the engine (engine*.c), and srv.c (the server itself, which
 * gives each listener its protocol).  main.c needs only this header.
 */
#ifndef DIVVY_SRV_H
#define DIVVY_SRV_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "admit.h"
#include "config.h"
#include "metrics.h"
#include "notify.h"
#include "reload.h"
#include "store.h"
#include "table.h"

struct adhoc;
struct fastfd;
struct dlog_writer;

struct srv_opts {
    char **listen;              /* "tcp:HOST:PORT" / "unix:PATH" */
    size_t n_listen;
    unsigned workers;           /* >= 1 */
    struct admit_opts admit;    /* connection budgets, timeouts, output budget (admit.h) */
    size_t max_output_bytes;
    unsigned socket_mode;       /* for Unix sockets we create */
    gid_t admin_gid;            /* (gid_t)-1: only uid 0 is admin */
    bool full_allow;            /* full-table policy */
    struct table *fast;
    struct table *priv;
    struct table *privileged;   /* source = privileged rules (daemon/tables.h) */
    struct reload *reload;
    struct store *store;        /* Redis (docs/redis.md); NULL: every rule is local */
    enum config_redis_error on_redis_error;
    uint64_t lease_max;         /* store.lease_max */
    struct metrics *metrics;    /* counters (metrics.h); NULL: none */
    struct fastfd *fastfd;      /* answers FAST (fastfd.h); NULL: FAST is forbidden */
    struct adhoc *adhoc;        /* RESP's ad-hoc buckets (adhoc.h); NULL: no RESP listener */
    bool adhoc_redis;           /* ... kept in Redis (store.adhoc, docs/resp.md); needs store */
    const char *adhoc_path;     /* the table's file in the state dir; NULL: not saved */
    unsigned adhoc_save_ms;     /* saved this often (table.snapshot_interval_ms); 0: at stop */
    /* Sockets systemd passed (notify_listen_fds()): srv_new() adopts them all,
     * setting each fd to -1, and binds only the listen addresses not among them. */
    struct notify_listener *inherited;
    size_t n_inherited;
    /* rls { } (docs/rls.md "Settings"): read at start only. */
    bool rls_unmatched_rule;    /* rls.unmatched = "rule": the default rule answers */
    bool rls_ratelimit_headers; /* rls.ratelimit_headers: RateLimit-* in the answer */
    struct tls *tls;            /* the "tls:" listeners' context (tls.h); NULL: none */
    struct dlog_writer *dlog;   /* the decision log (dlog_writer.h); NULL: off */
};

struct srv;
struct tls;

/*
 * Binds every listener (a stale Unix socket file nobody answers on is
 * replaced; a live one is an error: -EADDRINUSE) and prepares the workers.
 * Logs each listener.  On success *ret is a new server for srv_run().
 */
int srv_new(const struct srv_opts *opts, struct srv **ret);

/* Starts the workers and runs the main loop (signals, maintenance timer)
 * until SIGTERM/SIGINT; SIGHUP reloads.  Returns 0 after a clean stop. */
int srv_run(struct srv *s);

/* Closes listeners (removing Unix socket files we created) and frees.  NULL-safe. */
void srv_free(struct srv *s);

#endif
