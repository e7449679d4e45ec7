/* SPDX-License-Identifier: MIT */
/*
 * handoff: passes an accepted, admitted connection from the thread that
 * accepted it to the worker that will serve it (docs/daemon.md "The
 * privileged lane"): a privileged peer (uid 0, an admin) that connected to
 * a shared Unix socket goes from the worker that accepted it to the lane.
 *
 * Each worker owns one queue (only the lane's is used): a mutex-protected
 * list other threads append to and an event they activate (libevent's
 * cross-thread event_active()).  The owner's loop drains it and adopts each
 * connection (conn_adopt()).  A
 * queue closes when its worker's loop ends; what is still in it is closed and
 * its admission slot released, so no path leaks a descriptor or a place.
 */
#ifndef DIVVY_HANDOFF_H
#define DIVVY_HANDOFF_H

#include <pthread.h>
#include <stdbool.h>

#include "admit.h"

struct worker;
struct listener;
struct handoff_item;

struct handoff {
    pthread_mutex_t lock;
    bool lock_made;
    bool closed;                /* the worker's loop ended: take nothing more */
    struct handoff_item *head, *tail;
    struct event *ev;           /* runs handoff_on_ready() in the worker's loop */
};

/* Prepares @w's queue (after w->base exists).  0 or -ENOMEM. */
int handoff_init(struct worker *w);

/* Closes @w's queue: every connection still in it is closed and leaves
 * admission.  Called by the worker once its loop has ended, and by
 * worker_fini() (a no-op the second time).  NULL-safe on a half-made queue. */
void handoff_close(struct worker *w);

/* Frees what handoff_init() made, after handoff_close().  NULL-safe. */
void handoff_fini(struct worker *w);

/*
 * Gives worker @to the connection @fd accepted on @l from @p, which holds
 * the place @slot (both taken over: @slot is zeroed).  Any thread.  0, or
 * -errno when @to's queue is closed (-ESHUTDOWN) or out of memory: then @fd
 * is closed and @slot left, as if the connection had been refused.
 */
int handoff_push(struct worker *to, int fd, const struct listener *l, const struct admit_peer *p,
                 struct admit_slot *slot);

#endif
