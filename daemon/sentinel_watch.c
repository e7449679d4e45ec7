/* SPDX-License-Identifier: MIT */
/*
 * sentinel_watch: the +switch-master subscriptions (see sentinel.h,
 * docs/redis.md "Sentinel"): one watch per worker's store connection, on
 * its event_base, subscribed to every configured sentinel (only the one
 * leading a failover announces the promotion), each retried with backoff;
 * each announcement is reported to the store so it reconnects to the new
 * master at once.  The same subscriptions hear a promotion announced
 * before the switch: from then until the switch (or the promotion's
 * abort) the watch keeps the old master fenced, and
 * sentinel_watch_redirect() sends connects to the replica instead.
 *
 * A watch follows sentinel.c's context ownership rules with one
 * difference: hiredis keeps a subscribed context's callback in its channel
 * table and calls it for the confirmation, for every message, and once
 * more with NULL when the context dies (lost, or freed by us).  So the
 * message callback never frees (a bad message is ignored), it only copies
 * the announcement out and kicks a zero timer that reports it; a context is
 * freed by us only from a timer, an AUTH error reply (hiredis defers that
 * free past the callback), or at free, always with the link's ac cleared and
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

#include "clock.h"
#include "log.h"
#include "redis_async.h"
#include "sentinel.h"
#include "sentinel_int.h"

#define SWITCH_CHANNEL      "+switch-master"
#define NOONE_CHANNEL       "+failover-state-send-slaveof-noone"
#define PROMOTED_CHANNEL    "+promoted-slave"
#define ABORT_CHANNEL       "-failover-abort-slave-timeout"

struct sentinel_watch;

/* The subscription to one sentinel. */
struct sw_sub {
    struct sentinel_watch *w;
    unsigned idx;               /* its sentinel in sn->addrs */
    struct sentinel_link link;  /* the subscription (or its way there); its step
                                 * timer bounds connect, AUTH and the confirmation */
    struct event *retry_ev;     /* the next attempt */
    bool subscribed;
    unsigned backoff_ms;
};

struct sentinel_watch {
    struct sentinel *sn;
    struct event_base *base;
    sentinel_switch_cb *cb;
    void *arg;
    struct sw_sub subs[SENTINEL_MAX];   /* one per configured sentinel */
    struct event *kick_ev;      /* reports the announcements below */
    bool started;
    /* Announcements waiting for kick_ev, one of each kind (the latest),
     * the promotion reported first, with the sentinel that made each. */
    bool pending[2];
    struct sentinel_news news[2];
    unsigned from[2];
    /* A promotion under way (sentinel_watch_redirect()): fence.old_host
     * is not to be written to until fence_until (CLOCK_MONOTONIC ms). */
    bool fenced;
    struct sentinel_news fence;
    uint64_t fence_until;
};

static struct log_ratelimit rl_watch;

/* Records the promotion of @shown in place of @old; true when it is news. */
static bool sw_promoting_changed(struct sentinel *sn, const char *shown, const char *old)
{
    char key[sizeof(sn->promoting)];
    bool changed;

    snprintf(key, sizeof(key), "%s<%s", shown, old);
    pthread_mutex_lock(&sn->lock);
    changed = strcmp(sn->promoting, key) != 0;
    if (changed)
        snprintf(sn->promoting, sizeof(sn->promoting), "%s", key);
    pthread_mutex_unlock(&sn->lock);
    return changed;
}

/* Records the master just announced: true when it differs from the last
 * announcement (each failover is logged once, whichever worker hears it).
 * It also ends the promotion that led to it: "@host<@old" is remembered as
 * logged, so a worker whose subscription hears of that promotion only after
 * the switch does not announce it again; a later promotion is another pair. */
static bool sw_announced_changed(struct sentinel *sn, const char *host, unsigned port,
                                 const char *old, char *buf, size_t size)
{
    bool changed;

    sentinel_show(host, port, buf, size);
    pthread_mutex_lock(&sn->lock);
    changed = strcmp(sn->announced, buf) != 0;
    if (changed) {
        snprintf(sn->announced, sizeof(sn->announced), "%s", buf);
        /* The master now, for sentinel_describe() (STATS, log lines): divvyd
         * may be there already and ask no sentinel again. */
        snprintf(sn->master, sizeof(sn->master), "%s", buf);
    }
    snprintf(sn->promoting, sizeof(sn->promoting), "%s<%s", buf, old);
    pthread_mutex_unlock(&sn->lock);
    return changed;
}

static void sw_connect(struct sw_sub *u);

static void sw_on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct sw_sub *u = arg;

    (void)fd;
    (void)what;
    if (!u->link.ac)
        sw_connect(u);
}

/* Forgets the subscription's context; frees it when @free_it (else hiredis
 * is freeing it already). */
static void sw_drop(struct sw_sub *u, bool free_it)
{
    if (!u->link.ac)
        return;
    u->subscribed = false;
    sentinel_link_drop(&u->link, free_it);
}

/* The subscription failed or was lost: the same sentinel again, after a
 * backoff.  Hits never depend on it, so a line now and then is all it is
 * worth. */
static void sw_link_failed(struct sentinel_link *l, bool free_it, const char *why)
{
    struct sw_sub *u = (struct sw_sub *)((char *)l - offsetof(struct sw_sub, link));

    log_ratelimited(&rl_watch, LOG_WARNING,
                    "redis: cannot watch sentinel %s for " SWITCH_CHANNEL " of %s: %s; retrying",
                    u->w->sn->addrs[u->idx].text, u->w->sn->name, why);
    sw_drop(u, free_it);
    redis_backoff(u->retry_ev, &u->backoff_ms);
}

/* Splits @msg (@len bytes) at spaces into @f (at most @max fields, in @buf);
 * the number of fields, or -1 when it does not fit. */
static int sw_split(const char *msg, size_t len, char *buf, size_t size, char **f, unsigned max)
{
    char *save = NULL;
    unsigned n = 0;

    if (len >= size || memchr(msg, '\0', len))
        return -1;
    memcpy(buf, msg, len);
    buf[len] = '\0';
    for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        if (n == max)
            return -1;
        f[n++] = t;
    }
    return (int)n;
}

/* @host (text) and @port (digits), an address as a sentinel gives it, into
 * @ret_host (SENTINEL_HOST_MAX bytes) and @ret_port; false when it is not one. */
static bool sw_addr(const char *host, const char *port, char *ret_host, unsigned *ret_port)
{
    *ret_port = sentinel_port_of(port);
    if (!*ret_port || !sentinel_host_text_ok(host, strlen(host)))
        return false;
    snprintf(ret_host, SENTINEL_HOST_MAX, "%s", host);
    return true;
}

/*
 * A message on @chan about this master into @n: +switch-master's "<name>
 * <old-ip> <old-port> <new-ip> <new-port>"; the promotion's "slave
 * <ip>:<port> <ip> <port> @ <name> <master-ip> <master-port>"; the abort's
 * "master <name> <ip> <port>" (@n->host is that master).  False for
 * another master's, or a malformed one.
 */
static bool sw_parse(struct sentinel_watch *w, const char *chan, const char *msg, size_t len,
                     struct sentinel_news *n, bool *ret_abort)
{
    char buf[3 * SENTINEL_HOST_MAX + 64], *f[9];
    int k = sw_split(msg, len, buf, sizeof(buf), f, 9);

    *ret_abort = false;
    memset(n, 0, sizeof(*n));
    if (strcmp(chan, SWITCH_CHANNEL) == 0) {
        n->kind = SENTINEL_NEWS_SWITCH;
        return k == 5 && strcmp(f[0], w->sn->name) == 0 &&
               sw_addr(f[1], f[2], n->old_host, &n->old_port) &&
               sw_addr(f[3], f[4], n->host, &n->port);
    }
    if (strcmp(chan, NOONE_CHANNEL) == 0 || strcmp(chan, PROMOTED_CHANNEL) == 0) {
        n->kind = SENTINEL_NEWS_PROMOTING;
        return k == 8 && strcmp(f[0], "slave") == 0 && strcmp(f[4], "@") == 0 &&
               strcmp(f[5], w->sn->name) == 0 && sw_addr(f[2], f[3], n->host, &n->port) &&
               sw_addr(f[6], f[7], n->old_host, &n->old_port);
    }
    *ret_abort = true;
    return strcmp(chan, ABORT_CHANNEL) == 0 && k == 4 && strcmp(f[0], "master") == 0 &&
           strcmp(f[1], w->sn->name) == 0 && sw_addr(f[2], f[3], n->host, &n->port);
}

/* The promotion is over (or was none): writes go wherever the sentinels say. */
static void sw_unfence(struct sentinel_watch *w)
{
    w->fenced = false;
}

/* The subscription's callback: the confirmation, each message, and NULL
 * once when the context dies.  Never frees the context (see the top). */
static void sw_on_message(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct sw_sub *u = privdata;
    struct sentinel_watch *w = u->w;
    redisReply *r = reply;
    const redisReply *kind;
    struct sentinel_news n;
    bool abort;

    if (u->link.ac != ac)
        return;
    if (!r) {
        sentinel_link_failed(&u->link, false, "connection lost: %s",
                  ac->errstr[0] ? ac->errstr : "closed by the sentinel");
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3)
        return;
    kind = r->element[0];
    if (kind->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(kind->str, "subscribe") == 0) {
        if (!u->subscribed)
            log_msg(LOG_DEBUG, "redis: watching sentinel %s for " SWITCH_CHANNEL " of %s",
                    w->sn->addrs[u->idx].text, w->sn->name);
        u->subscribed = true;
        u->backoff_ms = 0;
        evtimer_del(u->link.step_ev);
        return;
    }
    if (strcmp(kind->str, "message") != 0 || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return;
    if (sw_parse(w, r->element[1]->str, r->element[2]->str, r->element[2]->len, &n, &abort)) {
        struct timeval now = { 0, 0 };

        if (abort) {
            /* Only a fence on that master: no callback. */
            if (w->fenced && strcmp(w->fence.old_host, n.host) == 0 &&
                w->fence.old_port == n.port) {
                log_msg(LOG_NOTICE, "redis: sentinel %s announced " ABORT_CHANNEL " for %s: "
                        "writes may go to its master again", w->sn->addrs[u->idx].text,
                        w->sn->name);
                sw_unfence(w);
            }
            return;
        }
        /* The fence from now on, before the callback runs: a sentinel that
         * has not heard yet still names the old master (sentinel_watch_redirect()). */
        w->fenced = true;
        w->fence = n;
        w->fence_until = clock_now_ms() + SENTINEL_FENCE_MS;
        w->news[n.kind] = n;
        w->from[n.kind] = u->idx;
        w->pending[n.kind] = true;
        evtimer_add(w->kick_ev, &now);
    }
}

/* Logs @n once per change, whichever worker hears it first. */
static void sw_log(struct sentinel_watch *w, const struct sentinel_news *n, unsigned from)
{
    char shown[SENTINEL_HOST_MAX + 16], old[SENTINEL_HOST_MAX + 16];

    sentinel_show(n->old_host, n->old_port, old, sizeof(old));
    if (n->kind == SENTINEL_NEWS_SWITCH) {
        if (sw_announced_changed(w->sn, n->host, n->port, old, shown, sizeof(shown)))
            log_msg(LOG_NOTICE, "redis: sentinel %s announced " SWITCH_CHANNEL ": master %s "
                    "is %s (was %s)", w->sn->addrs[from].text, w->sn->name, shown, old);
        return;
    }
    sentinel_show(n->host, n->port, shown, sizeof(shown));
    if (sw_promoting_changed(w->sn, shown, old))
        log_msg(LOG_NOTICE, "redis: sentinel %s announced the promotion of %s to master %s: "
                "no more writes to %s", w->sn->addrs[from].text, shown, w->sn->name, old);
}

static void sw_on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct sentinel_watch *w = arg;
    struct sentinel_news n;
    struct timeval now = { 0, 0 };
    unsigned k;

    (void)fd;
    (void)what;
    /* A promotion comes before the switch that ends it. */
    if (w->pending[SENTINEL_NEWS_PROMOTING])
        k = SENTINEL_NEWS_PROMOTING;
    else if (w->pending[SENTINEL_NEWS_SWITCH])
        k = SENTINEL_NEWS_SWITCH;
    else
        return;
    w->pending[k] = false;
    n = w->news[k];
    /* One per kick: the callback may free the watch. */
    if (w->pending[0] || w->pending[1])
        evtimer_add(w->kick_ev, &now);
    sw_log(w, &n, w->from[k]);
    /* Last: the callback may free the watch. */
    w->cb(w->arg, &n);
}

bool sentinel_watch_redirect(struct sentinel_watch *w, const char **host, unsigned *port)
{
    if (!w || !w->fenced)
        return false;
    if (clock_now_ms() >= w->fence_until) {
        sw_unfence(w);
        return false;
    }
    if (strcmp(*host, w->fence.old_host) != 0 || *port != w->fence.old_port)
        return false;
    *host = w->fence.host;
    *port = w->fence.port;
    return true;
}

static void sw_on_step_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct sw_sub *u = arg;

    (void)fd;
    (void)what;
    if (u->link.ac && !u->subscribed)
        sentinel_link_failed(&u->link, true, "not subscribed within %u ms",
                             u->w->sn->timeout_ms);
}

static void sw_connect(struct sw_sub *u)
{
    struct sentinel *sn = u->w->sn;
    const char *argv[5] = { "SUBSCRIBE", SWITCH_CHANNEL, NOONE_CHANNEL, PROMOTED_CHANNEL,
                            ABORT_CHANNEL };
    size_t lens[5] = { 9, sizeof(SWITCH_CHANNEL) - 1, sizeof(NOONE_CHANNEL) - 1,
                       sizeof(PROMOTED_CHANNEL) - 1, sizeof(ABORT_CHANNEL) - 1 };
    char why[256];

    if (sentinel_link_open(&u->link, sn, &sn->addrs[u->idx], u->w->base, why, sizeof(why)) < 0) {
        sentinel_link_failed(&u->link, false, "%s", why);
        return;
    }
    if (redisAsyncCommandArgv(u->link.ac, sw_on_message, u, 5, argv, lens) != REDIS_OK) {
        sentinel_link_failed(&u->link, true, "cannot queue SUBSCRIBE");
        return;
    }
    redis_timer_ms(u->link.step_ev, sn->timeout_ms);
}

int sentinel_watch_new(struct sentinel *sn, struct event_base *base, sentinel_switch_cb *cb,
                       void *arg, struct sentinel_watch **ret)
{
    struct sentinel_watch *w;
    bool ok;

    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->sn = sn;
    w->base = base;
    w->cb = cb;
    w->arg = arg;
    w->kick_ev = evtimer_new(base, sw_on_kick, w);
    ok = w->kick_ev != NULL;
    for (unsigned i = 0; i < sn->n_addrs && i < SENTINEL_MAX; i++) {
        struct sw_sub *u = &w->subs[i];

        u->w = w;
        u->idx = i;
        u->link.failed = sw_link_failed;
        u->link.step_ev = evtimer_new(base, sw_on_step_timeout, u);
        u->retry_ev = evtimer_new(base, sw_on_retry, u);
        ok &= u->link.step_ev && u->retry_ev;
    }
    if (!ok) {
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
    for (unsigned i = 0; i < SENTINEL_MAX; i++) {
        struct sw_sub *u = &w->subs[i];

        sw_drop(u, true);       /* its callbacks run now, with NULL, and return */
        if (u->link.step_ev)
            event_free(u->link.step_ev);
        if (u->retry_ev)
            event_free(u->retry_ev);
    }
    if (w->kick_ev)
        event_free(w->kick_ev);
    free(w);
}

void sentinel_watch_start(struct sentinel_watch *w)
{
    if (w->started)
        return;
    w->started = true;
    for (unsigned i = 0; i < w->sn->n_addrs && i < SENTINEL_MAX; i++)
        sw_connect(&w->subs[i]);
}
