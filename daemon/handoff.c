/* SPDX-License-Identifier: MIT */
/*
 * handoff: accepted connections queued for the worker that will serve them
 * (see handoff.h).  The queue holds only a descriptor, its
 * listener, the peer and the admission slot; the connection itself is made
 * by the worker that owns it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "handoff.h"

struct handoff_item {
    struct handoff_item *next;
    int fd;
    const struct listener *l;
    struct admit_peer peer;
    struct admit_slot slot;
};

/* Takes the whole list, so the lock is held for two stores, not for adoption. */
static struct handoff_item *handoff_take(struct handoff *q)
{
    struct handoff_item *all;

    pthread_mutex_lock(&q->lock);
    all = q->head;
    q->head = q->tail = NULL;
    pthread_mutex_unlock(&q->lock);
    return all;
}

static void handoff_on_ready(evutil_socket_t fd, short what, void *arg)
{
    struct handoff *q = arg;
    struct handoff_item *it = handoff_take(q), *next;

    (void)fd;
    (void)what;
    for (; it; it = next) {
        next = it->next;
        q->adopt(q->w, it->fd, it->l, &it->peer, &it->slot);
        free(it);
    }
}

int handoff_init(struct handoff *q, struct event_base *base, struct admit *admit,
                 struct worker *w, handoff_adopt_fn *adopt)
{
    q->admit = admit;
    q->w = w;
    q->adopt = adopt;
    if (pthread_mutex_init(&q->lock, NULL) != 0)
        return -ENOMEM;
    q->lock_made = true;
    q->ev = event_new(base, -1, 0, handoff_on_ready, q);
    return q->ev ? 0 : -ENOMEM;
}

void handoff_close(struct handoff *q)
{
    struct handoff_item *it, *next;

    if (!q->lock_made)
        return;
    pthread_mutex_lock(&q->lock);
    q->closed = true;
    pthread_mutex_unlock(&q->lock);
    for (it = handoff_take(q); it; it = next) {
        next = it->next;
        close(it->fd);
        admit_leave(q->admit, &it->slot);
        free(it);
    }
}

void handoff_fini(struct handoff *q)
{
    handoff_close(q);
    if (q->ev)
        event_free(q->ev);
    q->ev = NULL;
    if (q->lock_made)
        pthread_mutex_destroy(&q->lock);
    q->lock_made = false;
}

int handoff_push(struct handoff *q, int fd, const struct listener *l, const struct admit_peer *p,
                 struct admit_slot *slot)
{
    struct handoff_item *it = malloc(sizeof(*it));
    bool wake = false;
    int r = 0;

    if (it) {
        *it = (struct handoff_item){ .fd = fd, .l = l, .peer = *p, .slot = *slot };
        pthread_mutex_lock(&q->lock);
        if (q->closed) {
            r = -ESHUTDOWN;
        } else {
            wake = !q->head;        /* a non-empty queue has its wake-up pending */
            if (q->tail)
                q->tail->next = it;
            else
                q->head = it;
            q->tail = it;
        }
        pthread_mutex_unlock(&q->lock);
    } else {
        r = -ENOMEM;
    }
    if (r < 0) {
        free(it);
        close(fd);
        admit_leave(q->admit, slot);
        return r;
    }
    memset(slot, 0, sizeof(*slot));
    if (wake)
        event_active(q->ev, EV_READ, 0);
    return 0;
}
