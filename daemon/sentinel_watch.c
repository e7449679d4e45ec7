/* SPDX-License-Identifier: MIT */
/*
 * sentinel_watch: the +switch-master subscription (see sentinel.h,
 * docs/redis.md "Sentinel"): one per worker's store connection, on its
 * event_base, subscribed to one sentinel at a time (the one that answered
 * last first), retried with backoff; each announcement is reported to the
 * store so it reconnects to the new master at once.
 *
 * A watch follows sentinel.c's context ownership rules with one
 * difference: hiredis keeps a subscribed context's callback in its channel
 * table and calls it for the confirmation, for every message, and once
 * more with NULL when the context dies (lost, or freed by us).  So the
 * message callback never frees (a bad message is ignored), it only copies
 * the announcement out and kicks a zero timer that reports it; a context is
 * freed by us only from a timer, an AUTH error reply (hiredis defers that
 * free past the callback), or at free, always with w->link.ac cleared and
 * ac->data unset first, so the NULL call it causes returns at once.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "log.h"
#include "redis_async.h"
#include "sentinel.h"
#include "sentinel_int.h"

#define SWITCH_CHANNEL      "+switch-master"

struct sentinel_watch {
    struct sentinel *sn;
    struct event_base *base;
    sentinel_switch_cb *cb;
    void *arg;
    struct sentinel_link link;  /* the subscription (or its way there); its step
                                 * timer bounds connect, AUTH and the confirmation */
    struct event *retry_ev;     /* the next attempt */
    struct event *kick_ev;      /* reports the announcement below */
    bool started;
    bool subscribed;
    int next;                   /* the sentinel to try next; -1: the one that answered last */
    unsigned cur;               /* the one watched (or tried) now */
    unsigned backoff_ms;
    bool pending;               /* an announcement waits for kick_ev */
    char host[SENTINEL_HOST_MAX];
    unsigned port;
    char old[SENTINEL_HOST_MAX + 16];   /* "HOST:PORT" the announcement says it was */
};

static struct log_ratelimit rl_watch;

/* Records the master just announced; true when it differs from the last
 * announcement (each failover is logged once, whichever worker hears it). */
static bool sw_announced_changed(struct sentinel *sn, const char *host, unsigned port, char *buf,
                                 size_t size)
{
    bool changed;

    sentinel_show(host, port, buf, size);
    pthread_mutex_lock(&sn->lock);
    changed = strcmp(sn->announced, buf) != 0;
    if (changed)
        snprintf(sn->announced, sizeof(sn->announced), "%s", buf);
    pthread_mutex_unlock(&sn->lock);
    return changed;
}

static void sw_connect(struct sentinel_watch *w);

static void sw_on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct sentinel_watch *w = arg;

    (void)fd;
    (void)what;
    if (!w->link.ac)
        sw_connect(w);
}

static void sw_schedule_retry(struct sentinel_watch *w)
{
    redis_backoff(w->retry_ev, &w->backoff_ms);
}

/* Forgets the subscription's context; frees it when @free_it (else hiredis
 * is freeing it already). */
static void sw_drop(struct sentinel_watch *w, bool free_it)
{
    if (!w->link.ac)
        return;
    w->subscribed = false;
    sentinel_link_drop(&w->link, free_it);
}

/* The subscription failed or was lost: the next sentinel, after a backoff.
 * Hits never depend on it, so a line now and then is all it is worth. */
static void sw_link_failed(struct sentinel_link *l, bool free_it, const char *why)
{
    struct sentinel_watch *w = (struct sentinel_watch *)((char *)l -
                                                         offsetof(struct sentinel_watch, link));

    log_ratelimited(&rl_watch, LOG_WARNING,
                    "redis: cannot watch sentinel %s for " SWITCH_CHANNEL " of %s: %s; retrying",
                    w->sn->addrs[w->cur].text, w->sn->name, why);
    sw_drop(w, free_it);
    w->next = (int)((w->cur + 1) % w->sn->n_addrs);
    sw_schedule_retry(w);
}

/* "<name> <old-ip> <old-port> <new-ip> <new-port>": true, with the new
 * address in w->host and w->port, when it is about this master. */
static bool sw_parse(struct sentinel_watch *w, const char *msg, size_t len)
{
    char buf[3 * SENTINEL_HOST_MAX + 64], *f[6], *save = NULL;
    unsigned n = 0, old_port;

    if (len >= sizeof(buf) || memchr(msg, '\0', len))
        return false;
    memcpy(buf, msg, len);
    buf[len] = '\0';
    for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        if (n == 6)
            return false;
        f[n++] = t;
    }
    if (n != 5 || strcmp(f[0], w->sn->name) != 0)
        return false;
    old_port = sentinel_port_of(f[2]);
    w->port = sentinel_port_of(f[4]);
    if (!w->port || !old_port || !sentinel_host_text_ok(f[1], strlen(f[1])) ||
        !sentinel_host_text_ok(f[3], strlen(f[3])))
        return false;
    snprintf(w->host, sizeof(w->host), "%s", f[3]);
    sentinel_show(f[1], old_port, w->old, sizeof(w->old));
    return true;
}

/* The subscription's callback: the confirmation, each message, and NULL
 * once when the context dies.  Never frees the context (see the top). */
static void sw_on_message(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct sentinel_watch *w = privdata;
    redisReply *r = reply;
    const redisReply *kind;

    if (w->link.ac != ac)
        return;
    if (!r) {
        sentinel_link_failed(&w->link, false, "connection lost: %s",
                  ac->errstr[0] ? ac->errstr : "closed by the sentinel");
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3)
        return;
    kind = r->element[0];
    if (kind->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(kind->str, "subscribe") == 0) {
        w->subscribed = true;
        w->backoff_ms = 0;
        evtimer_del(w->link.step_ev);
        log_msg(LOG_DEBUG, "redis: watching sentinel %s for " SWITCH_CHANNEL " of %s",
                w->sn->addrs[w->cur].text, w->sn->name);
        return;
    }
    if (strcmp(kind->str, "message") != 0 || r->element[2]->type != REDIS_REPLY_STRING)
        return;
    if (sw_parse(w, r->element[2]->str, r->element[2]->len)) {
        struct timeval now = { 0, 0 };

        w->pending = true;
        evtimer_add(w->kick_ev, &now);
    }
}

static void sw_on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct sentinel_watch *w = arg;
    char host[SENTINEL_HOST_MAX], shown[SENTINEL_HOST_MAX + 16];
    unsigned port = w->port;

    (void)fd;
    (void)what;
    if (!w->pending)
        return;
    w->pending = false;
    memcpy(host, w->host, sizeof(host));
    if (sw_announced_changed(w->sn, host, port, shown, sizeof(shown)))
        log_msg(LOG_NOTICE, "redis: sentinel %s announced " SWITCH_CHANNEL ": master %s is %s "
                "(was %s)", w->sn->addrs[w->cur].text, w->sn->name, shown, w->old);
    /* Last: the callback may free the watch. */
    w->cb(w->arg, host, port);
}

static void sw_on_step_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct sentinel_watch *w = arg;

    (void)fd;
    (void)what;
    if (w->link.ac && !w->subscribed)
        sentinel_link_failed(&w->link, true, "not subscribed within %u ms", w->sn->timeout_ms);
}

static void sw_connect(struct sentinel_watch *w)
{
    struct sentinel *sn = w->sn;
    const char *argv[2] = { "SUBSCRIBE", SWITCH_CHANNEL };
    size_t lens[2] = { 9, sizeof(SWITCH_CHANNEL) - 1 };
    char why[256];
    int idx = w->next;

    if (idx < 0) {
        pthread_mutex_lock(&sn->lock);
        idx = sn->last_ok;
        pthread_mutex_unlock(&sn->lock);
    }
    w->cur = idx >= 0 && (unsigned)idx < sn->n_addrs ? (unsigned)idx : 0;
    if (sentinel_link_open(&w->link, sn, &sn->addrs[w->cur], w->base, why, sizeof(why)) < 0) {
        sentinel_link_failed(&w->link, false, "%s", why);
        return;
    }
    if (redisAsyncCommandArgv(w->link.ac, sw_on_message, w, 2, argv, lens) != REDIS_OK) {
        sentinel_link_failed(&w->link, true, "cannot queue SUBSCRIBE");
        return;
    }
    redis_timer_ms(w->link.step_ev, sn->timeout_ms);
}

int sentinel_watch_new(struct sentinel *sn, struct event_base *base, sentinel_switch_cb *cb,
                       void *arg, struct sentinel_watch **ret)
{
    struct sentinel_watch *w;

    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->sn = sn;
    w->base = base;
    w->cb = cb;
    w->arg = arg;
    w->next = -1;
    w->link.failed = sw_link_failed;
    w->link.step_ev = evtimer_new(base, sw_on_step_timeout, w);
    w->retry_ev = evtimer_new(base, sw_on_retry, w);
    w->kick_ev = evtimer_new(base, sw_on_kick, w);
    if (!w->link.step_ev || !w->retry_ev || !w->kick_ev) {
        sentinel_watch_free(w);
        return -ENOMEM;
    }
    *ret = w;
    return 0;
}

void sentinel_watch_free(struct sentinel_watch *w)
{
    if (!w)
        return;
    sw_drop(w, true);           /* its callbacks run now, with NULL, and return */
    if (w->link.step_ev)
        event_free(w->link.step_ev);
    if (w->retry_ev)
        event_free(w->retry_ev);
    if (w->kick_ev)
        event_free(w->kick_ev);
    free(w);
}

void sentinel_watch_start(struct sentinel_watch *w)
{
    if (w->started)
        return;
    w->started = true;
    sw_connect(w);
}
