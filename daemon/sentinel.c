/* SPDX-License-Identifier: MIT */
/*
 * sentinel: Redis Sentinel master discovery (see sentinel.h,
 * docs/redis.md "Sentinel").  Owns the parsed sentinel addresses, the last
 * master reported, and each query's hiredis context, step timer and kick
 * event.
 *
 * A query is a small state machine run by libevent: one step per sentinel
 * (connect, AUTH when configured, SENTINEL get-master-addr-by-name, all
 * pipelined), bounded by the step timer; a step that fails, and the final
 * answer, go through the kick event (a zero timer), so the next step and the
 * caller's callback always start from a clean stack, never from inside a
 * hiredis callback.  The same context ownership rules as daemon/store.c
 * hold: hiredis frees a context by itself after a connect error or a lost
 * connection; we free it (redisAsyncFree, deferred by hiredis when called
 * from one of its callbacks) only after an answer, an error reply, a
 * timeout, or at free; q->link.ac is cleared and ac->data unset first, so the
 * callbacks the free runs with NULL replies see a context that is no longer
 * the query's and return.  Never redisAsyncFree() from a connect callback:
 * hiredis 0.14 runs it outside its in-callback guard.
 *
 * The +switch-master watch is in sentinel_watch.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "addr.h"
#include "log.h"
#include "redis_async.h"
#include "sentinel.h"
#include "sentinel_int.h"

#define SENTINEL_WHY_MAX    512

struct sentinel_query {
    struct sentinel *sn;
    struct event_base *base;
    sentinel_cb *cb;
    void *arg;
    struct sentinel_link link;  /* the sentinel asked now, its step's bound */
    struct event *kick_ev;      /* the next step, or the answer */
    bool busy;
    bool found;
    unsigned next;              /* the next sentinel to ask */
    unsigned cur;               /* the one asked now (or that answered) */
    char host[SENTINEL_HOST_MAX];
    unsigned port;
    char why[SENTINEL_WHY_MAX];
};

/* ---- addresses --------------------------------------------------------------- */

static void sn_addr_clear(struct sentinel_addr *a)
{
    free(a->text);
    free(a->host);
    free(a->path);
}

/* "unix:PATH", "HOST:PORT" or "[V6]:PORT" (server/config.c checked it
 * already; checked again here, as the daemon's own parser is addr.c). */
static int sn_addr_parse(const char *text, struct sentinel_addr *ret)
{
    char buf[SENTINEL_HOST_MAX + 16];
    const char *host, *port;
    unsigned long p;
    char *end;
    int r;

    memset(ret, 0, sizeof(*ret));
    ret->text = strdup(text);
    if (!ret->text)
        return -ENOMEM;
    if (strncmp(text, "unix:", 5) == 0) {
        if (text[5] != '/')
            return -EINVAL;
        ret->path = strdup(text + 5);
        return ret->path ? 0 : -ENOMEM;
    }
    r = addr_split_host_port(text, buf, sizeof(buf), &host, &port);
    if (r < 0)
        return r == -ENAMETOOLONG ? -EINVAL : r;
    /* An unbracketed IPv6 address would split at its last colon. */
    if (!host[0] || (text[0] != '[' && strchr(host, ':')))
        return -EINVAL;
    errno = 0;
    p = strtoul(port, &end, 10);
    if (port[0] < '0' || port[0] > '9' || *end || errno || p == 0 || p > 65535)
        return -EINVAL;
    ret->port = (unsigned)p;
    ret->host = strdup(host);
    return ret->host ? 0 : -ENOMEM;
}

/* ---- the shared part ------------------------------------------------------------ */

void sentinel_free(struct sentinel *sn)
{
    if (!sn)
        return;
    for (unsigned i = 0; sn->addrs && i < sn->n_addrs; i++)
        sn_addr_clear(&sn->addrs[i]);
    free(sn->addrs);
    free(sn->name);
    if (sn->password)
        explicit_bzero(sn->password, strlen(sn->password));
    free(sn->password);
    pthread_mutex_destroy(&sn->lock);
    free(sn);
}

int sentinel_new(const struct sentinel_opts *o, struct sentinel **ret)
{
    struct sentinel *sn;
    int r = 0;

    if (!o || !o->addrs || o->n_addrs == 0 || o->n_addrs > SENTINEL_MAX || !o->master_name ||
        !o->master_name[0] || o->timeout_ms == 0)
        return -EINVAL;
    sn = calloc(1, sizeof(*sn));
    if (!sn)
        return -ENOMEM;
    pthread_mutex_init(&sn->lock, NULL);
    sn->timeout_ms = o->timeout_ms;
    sn->last_ok = -1;
    sn->addrs = calloc(o->n_addrs, sizeof(*sn->addrs));
    sn->name = strdup(o->master_name);
    if (o->password)
        sn->password = strdup(o->password);
    if (!sn->addrs || !sn->name || (o->password && !sn->password)) {
        sentinel_free(sn);
        return -ENOMEM;
    }
    /* Counted as they are filled, so a failure frees exactly what exists. */
    for (unsigned i = 0; r >= 0 && i < o->n_addrs; i++) {
        sn->n_addrs = i + 1;
        r = o->addrs[i] ? sn_addr_parse(o->addrs[i], &sn->addrs[i]) : -EINVAL;
    }
    if (r < 0) {
        sentinel_free(sn);
        return r;
    }
    *ret = sn;
    return 0;
}

const char *sentinel_describe(struct sentinel *sn, char *buf, size_t size)
{
    pthread_mutex_lock(&sn->lock);
    if (sn->master[0])
        snprintf(buf, size, "master %s at %s", sn->name, sn->master);
    else
        snprintf(buf, size, "master %s", sn->name);
    pthread_mutex_unlock(&sn->lock);
    return buf;
}

void sentinel_show(const char *host, unsigned port, char *buf, size_t size)
{
    bool v6 = strchr(host, ':') != NULL;

    snprintf(buf, size, "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

/* Records the master just reported by sentinel @idx; true when it differs
 * from the last. */
static bool sn_master_changed(struct sentinel *sn, unsigned idx, const char *host, unsigned port,
                              char *buf, size_t size)
{
    bool changed;

    sentinel_show(host, port, buf, size);
    pthread_mutex_lock(&sn->lock);
    sn->last_ok = (int)idx;
    changed = strcmp(sn->master, buf) != 0;
    if (changed)
        snprintf(sn->master, sizeof(sn->master), "%s", buf);
    pthread_mutex_unlock(&sn->lock);
    return changed;
}

/* ---- one query --------------------------------------------------------------------- */

static void sn_kick(struct sentinel_query *q)
{
    struct timeval now = { 0, 0 };

    evtimer_add(q->kick_ev, &now);
}

/* Appends "ADDR: reason" to the query's account of what went wrong. */
static void __attribute__((format(printf, 2, 3))) sn_note(struct sentinel_query *q,
                                                          const char *fmt, ...)
{
    size_t len = strlen(q->why);
    va_list ap;

    if (len + 8 >= sizeof(q->why))
        return;
    snprintf(q->why + len, sizeof(q->why) - len, "%s%s: ", len ? "; " : "",
             q->sn->addrs[q->cur].text);
    len = strlen(q->why);
    va_start(ap, fmt);
    vsnprintf(q->why + len, sizeof(q->why) - len, fmt, ap);
    va_end(ap);
}

/* This sentinel did not answer (its link failed): on to the next one, from a
 * clean stack. */
static void sn_link_failed(struct sentinel_link *l, bool free_it, const char *why)
{
    struct sentinel_query *q = (struct sentinel_query *)((char *)l -
                                                         offsetof(struct sentinel_query, link));

    sn_note(q, "%s", why);
    sentinel_link_drop(l, free_it);
    sn_kick(q);
}

/* ---- a connection to one sentinel (sentinel_int.h) ------------------------------------ */

void sentinel_link_drop(struct sentinel_link *l, bool free_it)
{
    redisAsyncContext *ac = l->ac;

    if (!ac)
        return;
    l->ac = NULL;
    ac->data = NULL;
    evtimer_del(l->step_ev);
    if (free_it)
        redisAsyncFree(ac);
}

void sentinel_link_failed(struct sentinel_link *l, bool free_it, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    l->failed(l, free_it, why);
}

static void link_on_connect(const redisAsyncContext *ac, int status)
{
    struct sentinel_link *l = ac->data;

    if (!l || l->ac != ac || status == REDIS_OK)
        return;
    /* hiredis frees the context after this callback. */
    sentinel_link_failed(l, false, "cannot connect: %s", ac->errstr[0] ? ac->errstr : "error");
}

static void link_on_disconnect(const redisAsyncContext *ac, int status)
{
    struct sentinel_link *l = ac->data;

    (void)status;
    if (!l || l->ac != ac)
        return;
    sentinel_link_failed(l, false, "connection lost: %s",
                         ac->errstr[0] ? ac->errstr : "closed by the sentinel");
}

static void link_on_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct sentinel_link *l = privdata;
    redisReply *r = reply;

    if (l->ac != ac)
        return;                 /* a context the link dropped already */
    if (!r)
        sentinel_link_failed(l, false, "connection lost: %s",
                             ac->errstr[0] ? ac->errstr : "closed");
    else if (r->type == REDIS_REPLY_ERROR)
        sentinel_link_failed(l, true, "AUTH: %.160s", r->str);  /* freed once this returns */
}

int sentinel_link_open(struct sentinel_link *l, const struct sentinel *sn,
                       const struct sentinel_addr *a, struct event_base *base, char *why,
                       size_t why_size)
{
    redisAsyncContext *ac;

    ac = redis_async_open(a->path, a->host, a->port, base, l, link_on_connect,
                          link_on_disconnect, why, why_size);
    if (!ac)
        return -1;
    /* Pipelined: hiredis sends them once connected; the step timer bounds it all.
     * AUTH's reply comes first, through the ordinary reply queue, even on a
     * context hiredis marks subscribed as soon as SUBSCRIBE is queued. */
    if (sn->password) {
        const char *auth[2] = { "AUTH", sn->password };
        size_t auth_lens[2] = { 4, strlen(sn->password) };

        if (redisAsyncCommandArgv(ac, link_on_auth, l, 2, auth, auth_lens) != REDIS_OK) {
            snprintf(why, why_size, "cannot queue AUTH");
            ac->data = NULL;
            redisAsyncFree(ac);
            return -1;
        }
    }
    l->ac = ac;
    return 0;
}

bool sentinel_host_text_ok(const char *s, size_t len)
{
    if (len == 0 || len >= SENTINEL_HOST_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
            return false;
    }
    return true;
}

static bool sn_host_ok(const redisReply *e)
{
    return e->type == REDIS_REPLY_STRING && sentinel_host_text_ok(e->str, e->len);
}

unsigned sentinel_port_of(const char *s)
{
    unsigned long port;
    char *end;

    errno = 0;
    port = strtoul(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end || errno || port == 0 || port > 65535)
        return 0;
    return (unsigned)port;
}

static void sn_on_answer(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct sentinel_query *q = privdata;
    redisReply *r = reply;
    unsigned port;

    if (q->link.ac != ac)
        return;
    if (!r) {
        sentinel_link_failed(&q->link, false, "connection lost: %s",
                             ac->errstr[0] ? ac->errstr : "closed");
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        sentinel_link_failed(&q->link, true, "%.160s", r->str);
        return;
    }
    if (r->type == REDIS_REPLY_NIL) {
        sentinel_link_failed(&q->link, true, "does not know master %s", q->sn->name);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !sn_host_ok(r->element[0]) ||
        r->element[1]->type != REDIS_REPLY_STRING) {
        sentinel_link_failed(&q->link, true,
                             "unexpected answer to SENTINEL get-master-addr-by-name");
        return;
    }
    port = sentinel_port_of(r->element[1]->str);
    if (!port) {
        sentinel_link_failed(&q->link, true, "answered a bad port");
        return;
    }
    memcpy(q->host, r->element[0]->str, r->element[0]->len);
    q->host[r->element[0]->len] = '\0';
    q->port = port;
    q->found = true;
    sentinel_link_drop(&q->link, true);
    sn_kick(q);
}

/* Starts the next step that can start; when none is left, kicks for the answer. */
static void sn_ask(struct sentinel_query *q)
{
    struct sentinel *sn = q->sn;

    while (q->next < sn->n_addrs) {
        const struct sentinel_addr *a = &sn->addrs[q->next];
        const char *argv[3] = { "SENTINEL", "get-master-addr-by-name", sn->name };
        size_t lens[3] = { 8, 23, strlen(sn->name) };
        char why[256];

        q->cur = q->next++;
        if (sentinel_link_open(&q->link, sn, a, q->base, why, sizeof(why)) < 0) {
            sn_note(q, "%s", why);
            continue;
        }
        if (redisAsyncCommandArgv(q->link.ac, sn_on_answer, q, 3, argv, lens) != REDIS_OK) {
            sn_note(q, "cannot queue the question");
            sentinel_link_drop(&q->link, true);
            continue;
        }
        redis_timer_ms(q->link.step_ev, sn->timeout_ms);
        return;
    }
    sn_kick(q);
}

static void sn_on_step_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct sentinel_query *q = arg;

    (void)fd;
    (void)what;
    if (q->link.ac)
        sentinel_link_failed(&q->link, true, "no answer within %u ms", q->sn->timeout_ms);
}

static void sn_on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct sentinel_query *q = arg;
    struct sentinel *sn = q->sn;
    char host[SENTINEL_HOST_MAX], why[SENTINEL_WHY_MAX], shown[SENTINEL_HOST_MAX + 16];
    unsigned port = q->port;
    bool found = q->found;

    (void)fd;
    (void)what;
    if (!q->busy || q->link.ac)
        return;
    if (!found && q->next < sn->n_addrs) {
        sn_ask(q);
        return;
    }
    /* Copied out: the callback may start the query again. */
    memcpy(host, q->host, sizeof(host));
    memcpy(why, q->why, sizeof(why));
    q->busy = false;
    if (found && sn_master_changed(sn, q->cur, host, port, shown, sizeof(shown)))
        log_msg(LOG_NOTICE, "redis: sentinel %s says master %s is %s", sn->addrs[q->cur].text,
                sn->name, shown);
    if (found)
        q->cb(q->arg, host, port, NULL);
    else
        q->cb(q->arg, NULL, 0, why[0] ? why : "no sentinel answered");
}

int sentinel_query_new(struct sentinel *sn, struct event_base *base, sentinel_cb *cb, void *arg,
                       struct sentinel_query **ret)
{
    struct sentinel_query *q;

    q = calloc(1, sizeof(*q));
    if (!q)
        return -ENOMEM;
    q->sn = sn;
    q->base = base;
    q->cb = cb;
    q->arg = arg;
    q->link.failed = sn_link_failed;
    q->link.step_ev = evtimer_new(base, sn_on_step_timeout, q);
    q->kick_ev = evtimer_new(base, sn_on_kick, q);
    if (!q->link.step_ev || !q->kick_ev) {
        sentinel_query_free(q);
        return -ENOMEM;
    }
    *ret = q;
    return 0;
}

void sentinel_query_free(struct sentinel_query *q)
{
    if (!q)
        return;
    sentinel_link_drop(&q->link, true);           /* its callbacks run now, with NULL, and return */
    if (q->link.step_ev)
        event_free(q->link.step_ev);
    if (q->kick_ev)
        event_free(q->kick_ev);
    free(q);
}

void sentinel_query_start(struct sentinel_query *q)
{
    if (q->busy)
        return;
    q->busy = true;
    q->found = false;
    q->next = 0;
    q->cur = 0;
    q->why[0] = '\0';
    sn_ask(q);
}

bool sentinel_query_busy(const struct sentinel_query *q)
{
    return q->busy;
}
