/* SPDX-License-Identifier: MIT */
/*
 * worker: a worker thread's event loop, its timers and its stop (see
 * worker.h).  The connections it serves are conn.c's; stopping answers what
 * was already read, flushes, and gives connections STOP_GRACE_MS to go.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/time.h>

#include <event2/event.h>
#include <urcu/urcu-memb.h>

#include "admit.h"
#include "clock.h"
#include "conn.h"
#include "dlog_writer.h"
#include "engine.h"
#include "hit_batch.h"
#include "listener.h"
#include "metrics.h"
#include "rls.h"
#include "rules.h"
#include "srv_int.h"
#include "store.h"
#include "worker.h"
#include "worker_int.h"

#define STOP_GRACE_MS     2000      /* a stopping worker's connections get this long */

static void on_grace(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;

    (void)fd;
    (void)what;
    event_base_loopbreak(w->base);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct timeval tv = { STOP_GRACE_MS / 1000, (STOP_GRACE_MS % 1000) * 1000 };
    struct conn *c, *next;

    (void)fd;
    (void)what;
    w->stopping = true;
    for (size_t i = 0; i < w->s->n_lis; i++)
        if (w->lev[i])
            event_del(w->lev[i]);
    event_del(w->resume_ev);
    event_del(w->sweep_ev);
    /* Answer the requests already read, flush, then close. */
    for (c = w->conns; c; c = next) {
        next = c->next;
        if (c->rev)
            event_del(c->rev);
        conn_finish_input(c);
        c->closing = true;
        conn_settle(c);
    }
    rls_stop(w);
    if (!w->conns && !w->rls) {
        event_base_loopbreak(w->base);
        return;
    }
    event_add(w->grace_ev, &tv);
}

/* Periodic: closes the connections whose admission timeout expired. */
static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    uint64_t now = clock_coarse_ms();

    (void)fd;
    (void)what;
    conn_sweep(w, now);
    rls_sweep(w, now);
}

/* The watchdog's probe, run by the worker's own loop: proof that it turns. */
static void on_ping(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;

    (void)fd;
    (void)what;
    __atomic_store_n(&w->pong, __atomic_load_n(&w->s->ping, __ATOMIC_RELAXED), __ATOMIC_RELEASE);
}

void *worker_main(void *arg)
{
    struct worker *w = arg;

    urcu_memb_register_thread();
    event_base_dispatch(w->base);
    handoff_close(&w->hand);    /* what the lane passed too late: closed, never served */
    /* Hits still waiting are answered by on_redis_error before anything is
     * freed, and their replies get one last chance to be written. */
    store_conn_free(w->sc);
    w->sc = NULL;
    hit_batch_free(w->hb);      /* emptied by the answers store_conn_free() gave */
    w->hb = NULL;
    for (struct conn *c = w->conns; c; c = c->next) {
        if (!c->dead && c->fd >= 0)
            conn_flush(c);
    }
    while (w->conns)
        conn_free(w->conns);
    rls_free_all(w);
    engine_free(w);
    replyq_pool_free(&w->replies);
    urcu_memb_unregister_thread();
    return NULL;
}

int worker_init(struct srv *s, struct worker *w, unsigned id, bool lane)
{
    unsigned sweep_ms;
    int r;

    w->s = s;
    w->id = id;
    w->lane = lane;
    w->mw = metrics_worker(s->o.metrics, id);
    w->dlog = s->o.dlog ? dlog_writer_ring(s->o.dlog, id) : NULL;
    w->base = event_base_new();
    if (!w->base)
        return -ENOMEM;
    w->lev = calloc(s->n_lis, sizeof(*w->lev));
    if (!w->lev)
        return -ENOMEM;
    for (size_t i = 0; i < s->n_lis; i++) {
        /* The lane accepts on the root sockets alone; the workers on the others. */
        if (s->lis[i].root_only != lane)
            continue;
        w->lev[i] = event_new(w->base, s->lis[i].fd, EV_READ | EV_PERSIST, conn_on_accept, w);
        if (!w->lev[i] || event_add(w->lev[i], NULL) < 0)
            return -ENOMEM;
    }
    w->stop_ev = event_new(w->base, -1, 0, on_stop, w);
    w->resume_ev = evtimer_new(w->base, conn_on_resume, w);
    w->grace_ev = evtimer_new(w->base, on_grace, w);
    w->flush_ev = event_new(w->base, -1, 0, conn_on_flush, w);
    w->ping_ev = event_new(w->base, -1, 0, on_ping, w);
    w->sweep_ev = event_new(w->base, -1, EV_PERSIST, on_sweep, w);
    w->backlog_ev = evtimer_new(w->base, conn_on_backlog, w);
    if (!w->stop_ev || !w->resume_ev || !w->grace_ev || !w->flush_ev || !w->ping_ev ||
        !w->sweep_ev || !w->backlog_ev ||
        handoff_init(&w->hand, w->base, s->admit, w, conn_adopt) < 0)
        return -ENOMEM;
    sweep_ms = admit_sweep_ms(s->admit);
    if (sweep_ms > 0) {
        struct timeval tv = { sweep_ms / 1000, (sweep_ms % 1000) * 1000 };

        if (event_add(w->sweep_ev, &tv) < 0)
            return -ENOMEM;
    }
    if (s->o.store) {
        w->key_cap = store_key_max(s->o.store, RULES_ACTOR_MAX);
        w->actor_buf = malloc(RULES_ACTOR_MAX);
        w->key_buf = malloc(w->key_cap);
        if (!w->actor_buf || !w->key_buf)
            return -ENOMEM;
        r = store_conn_new(s->o.store, w->base, &w->sc);
        if (r < 0)
            return r;
        r = hit_batch_new(w->sc, &w->st.scripts, &w->hb);
        if (r < 0)
            return r;
    }
    return 0;
}

void worker_fini(struct worker *w)
{
    if (w->lev) {
        for (size_t i = 0; i < w->s->n_lis; i++)
            if (w->lev[i])
                event_free(w->lev[i]);
        free(w->lev);
    }
    if (w->stop_ev)
        event_free(w->stop_ev);
    if (w->resume_ev)
        event_free(w->resume_ev);
    if (w->grace_ev)
        event_free(w->grace_ev);
    if (w->ping_ev)
        event_free(w->ping_ev);
    if (w->sweep_ev)
        event_free(w->sweep_ev);
    if (w->backlog_ev)
        event_free(w->backlog_ev);
    handoff_fini(&w->hand);
    store_conn_free(w->sc);     /* NULL after a run; set when srv_run never ran */
    w->sc = NULL;
    hit_batch_free(w->hb);
    w->hb = NULL;
    if (w->flush_ev)
        event_free(w->flush_ev);
    free(w->actor_buf);
    free(w->key_buf);
    if (w->base)
        event_base_free(w->base);
}
