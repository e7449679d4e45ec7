/* SPDX-License-Identifier: MIT */
/*
 * sentinel: where is the Redis master?  Asks Redis Sentinel
 * (docs/redis.md "Sentinel").  One struct sentinel per daemon holds the
 * sentinels' addresses, the master's name, the optional sentinel password
 * and the master last reported (so each change is logged once, whichever
 * worker learns it).  Each worker's store connection owns one struct
 * sentinel_query on its own event_base: started before every connect, it
 * asks the sentinels in their configured order with
 * SENTINEL get-master-addr-by-name over hiredis async connections, each
 * sentinel bounded by the store's timeout (a libevent timer: hiredis 0.14
 * has no async timeouts), and reports the first answer, or why none came.
 *
 * Threads: sentinel_new()/sentinel_free() in the main thread; a query and
 * its callback belong to the thread running its event_base; the shared
 * struct sentinel is safe from any thread.
 */
#ifndef DIVVY_SENTINEL_H
#define DIVVY_SENTINEL_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;

#define SENTINEL_MAX        16          /* addresses in one list */
#define SENTINEL_HOST_MAX   256         /* bytes of a host (or path) answer, NUL included */

struct sentinel_opts {
    /* "HOST:PORT", "[V6]:PORT" or "unix:PATH", in the order they are asked. */
    const char *const *addrs;
    unsigned n_addrs;                   /* 1 .. SENTINEL_MAX */
    const char *master_name;
    const char *password;               /* NULL: no AUTH to the sentinels */
    unsigned timeout_ms;                /* >= 1: bound of each sentinel's answer */
};

struct sentinel;
struct sentinel_query;

/* Copies @o, strings included, after checking every address.  -EINVAL
 * (a bad address, no name, no addresses or too many), -ENOMEM. */
int sentinel_new(const struct sentinel_opts *o, struct sentinel **ret);
/* NULL-safe; every query must be freed first. */
void sentinel_free(struct sentinel *sn);

/* "master NAME at HOST:PORT" (the last answer), or "master NAME" before
 * any, into @buf; returns @buf.  Any thread. */
const char *sentinel_describe(struct sentinel *sn, char *buf, size_t size);

/*
 * The answer of a query: @host (an address as the sentinel gave it, no
 * brackets) and @port of the master, or @host NULL when no sentinel
 * answered, with @why saying what each one did.  Runs in the query's
 * thread from its event loop, never from inside sentinel_query_start();
 * the query is idle again when it runs (it may be started again from it).
 */
typedef void sentinel_cb(void *arg, const char *host, unsigned port, const char *why);

/* An idle query on @base that reports to @cb(@arg).  -ENOMEM. */
int sentinel_query_new(struct sentinel *sn, struct event_base *base, sentinel_cb *cb, void *arg,
                       struct sentinel_query **ret);
/* Drops whatever is in flight (no callback runs) and frees.  NULL-safe. */
void sentinel_query_free(struct sentinel_query *q);

/* Starts asking, from the first sentinel; a no-op while already asking.
 * The callback runs once per start. */
void sentinel_query_start(struct sentinel_query *q);
/* True from sentinel_query_start() until just before the callback runs. */
bool sentinel_query_busy(const struct sentinel_query *q);

/* What a sentinel announced about this master (docs/redis.md "Sentinel"). */
enum sentinel_news_kind {
    /* +switch-master: @host:@port is the master now (it was @old). */
    SENTINEL_NEWS_SWITCH = 0,
    /* +failover-state-send-slaveof-noone or +promoted-slave: the replica
     * @host:@port is being made master in place of @old, which may still
     * take writes that the new master will never have. */
    SENTINEL_NEWS_PROMOTING,
};

struct sentinel_news {
    enum sentinel_news_kind kind;
    char host[SENTINEL_HOST_MAX];       /* as the sentinel gave it, no brackets */
    unsigned port;
    char old_host[SENTINEL_HOST_MAX];
    unsigned old_port;
};

/*
 * An announcement for this master.  Runs in the watch's thread from its
 * event loop (a zero timer), never from inside a hiredis callback or a
 * sentinel_watch_*() call; it may free the watch.
 */
typedef void sentinel_switch_cb(void *arg, const struct sentinel_news *news);

struct sentinel_watch;

/* An idle watch on @base that reports to @cb(@arg).  -ENOMEM. */
int sentinel_watch_new(struct sentinel *sn, struct event_base *base, sentinel_switch_cb *cb,
                       void *arg, struct sentinel_watch **ret);
/* Drops the subscription (no callback runs) and frees.  NULL-safe. */
void sentinel_watch_free(struct sentinel_watch *w);

/*
 * Subscribes, from now on for good, to +switch-master, the promotion's
 * two events and -failover-abort-slave-timeout on every configured
 * sentinel (only the sentinel leading a failover announces its
 * promotion), after AUTH when a sentinel password is set; connect, AUTH
 * and the subscription's confirmation are bounded by timeout_ms.  A
 * failure, or a subscription lost later, is retried on the same sentinel
 * after a backoff (50 ms doubling to 1 s, back to 50 ms once subscribed).
 * The same announcement from several sentinels is acted on as once.  Never
 * blocks (beyond hiredis resolving a name).  A no-op once started.
 */
void sentinel_watch_start(struct sentinel_watch *w);

/*
 * Where to connect when the sentinels answer @host:@port.  After a
 * promotion or a switch announced away from that master, a sentinel may
 * still name it (the promotion is not done, or that sentinel has not heard
 * of the switch yet): then *@host and *@port are changed to the announced
 * replica or master (whose ROLE says whether it is master), and true is
 * returned.  The last announcement is kept until the next one, until
 * -failover-abort-slave-timeout for the old master, or for SENTINEL_FENCE_MS
 * (Sentinel's default failover-timeout: a failover not done by then is
 * aborted).  *@host may point into @w until its next callback.
 */
#define SENTINEL_FENCE_MS   180000
bool sentinel_watch_redirect(struct sentinel_watch *w, const char **host, unsigned *port);

#endif
