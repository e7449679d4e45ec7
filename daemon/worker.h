/* SPDX-License-Identifier: MIT */
/*
 * worker: one of divvyd's worker threads, its life cycle: the libevent loop
 * with its listeners' accept events and timers, its Redis connection, and
 * its stop, which answers what was already read and frees every connection
 * (conn.h, rls.h) and recycled slot.  What a worker holds is worker_int.h's
 * struct worker, which the modules it runs see; only srv.c includes this.
 *
 * The workers accept on every listener but the root sockets.  As many more
 * threads, the privileged lane (docs/daemon.md "The privileged lane"),
 * accept on those alone and serve the connections of uid 0 and admin peers
 * (pam_divvy among them): a worker that accepts one on a shared socket hands
 * it to its lane counterpart (handoff.h).  So no unprivileged connection
 * ever shares a thread, or an accept queue, with root's.
 */
#ifndef DIVVY_WORKER_H
#define DIVVY_WORKER_H

#include <stdbool.h>

struct srv;
struct worker;

/*
 * Worker @id of @s: its event loop with an accept event on each listener of
 * s->lis but the root sockets (only those when @lane: the privileged lane),
 * its timers, and its Redis connection when s->o.store is set.  Main thread,
 * before any worker runs.  0 or -errno (-ENOMEM, store_conn_new()'s); on
 * failure worker_fini() frees what was made.
 */
int worker_init(struct srv *s, struct worker *w, unsigned id, bool lane);

/* Frees what worker_init() made; after worker_main() returned, or when it
 * never ran.  Safe on a worker worker_init() failed on. */
void worker_fini(struct worker *w);

/* The thread (pthread_create()'s @arg is the worker): runs the loop until
 * stop_ev ends it, answers what still waits for Redis, and frees every
 * connection and recycled slot. */
void *worker_main(void *arg);

#endif
