/* SPDX-License-Identifier: MIT */
/*
 * handoff: passes an accepted, admitted connection from the thread that
 * accepted it to the worker that will serve it (docs/daemon.md "The
 * privileged lane"): a privileged peer (uid 0, an admin) that connected to
 * a shared Unix socket goes from the worker that accepted it to the lane.
 *
 * Each worker owns one queue (only the lane's is used): a mutex-protected
 * list other threads append to and an event they activate (libevent's
 * cross-thread event_active()).  The owner's loop drains it and hands each
 * connection to the adopt function it was made with (conn_adopt()).  A
 * queue closes when its worker's loop ends; what is still in it is closed and
 * its admission slot released, so no path leaks a descriptor or a place.
 */
#ifndef DIVVY_HANDOFF_H
#define DIVVY_HANDOFF_H

#include <pthread.h>
#include <stdbool.h>

#include "admit.h"

struct admit;
struct event_base;
struct listener;
struct handoff_item;
struct worker;

/* Makes the connection @fd, accepted on @l from @p, one of @w's (conn_adopt()). */
typedef void handoff_adopt_fn(struct worker *w, int fd, const struct listener *l,
                              const struct admit_peer *p, struct admit_slot *slot);

struct handoff {
    pthread_mutex_t lock;
    bool lock_made;
    bool closed;                /* the worker's loop ended: take nothing more */
    struct handoff_item *head, *tail;
    struct event *ev;           /* runs handoff_on_ready() in the worker's loop */
    struct admit *admit;        /* where a connection closed unserved leaves */
    struct worker *w;           /* the owner, for adopt */
    handoff_adopt_fn *adopt;
};

/* Prepares queue @q of worker @w, whose loop is @base: its connections go to
 * @adopt(@w, ...), or leave @admit when closed unserved.  0 or -ENOMEM. */
int handoff_init(struct handoff *q, struct event_base *base, struct admit *admit,
                 struct worker *w, handoff_adopt_fn *adopt);

/* Closes queue @q: every connection still in it is closed and leaves
 * admission.  Called by the worker once its loop has ended, and by
 * worker_fini() (a no-op the second time).  NULL-safe on a half-made queue. */
void handoff_close(struct handoff *q);

/* Frees what handoff_init() made, after handoff_close().  NULL-safe. */
void handoff_fini(struct handoff *q);

/*
 * Gives the worker of queue @q the connection @fd accepted on @l from @p,
 * which holds the place @slot (both taken over: @slot is zeroed).  Any
 * thread.  0, or -errno when @q is closed (-ESHUTDOWN) or out of memory: then @fd
 * is closed and @slot left, as if the connection had been refused.
 */
int handoff_push(struct handoff *q, int fd, const struct listener *l, const struct admit_peer *p,
                 struct admit_slot *slot);

#endif
