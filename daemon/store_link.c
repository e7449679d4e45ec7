/* SPDX-License-Identifier: MIT */
/*
 * store_link: a worker's connection to one Redis server (see store.h,
 * store_int.h, docs/redis.md): its hiredis context, the FIFO of requests in
 * flight with its deadline timer, reconnects with backoff, Sentinel
 * discovery, and the decoding of every answer before it goes back to the
 * request's callback.  Its failures trip its breaker: the store's one
 * breaker for a single server, the node's own in a cluster.  A worker's
 * struct store_conn (daemon/store_conn.c) is one link, or a cluster router
 * (daemon/store_cluster.c) over one link per master; for the router a link
 * hands cluster redirections (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) to its
 * hooks instead of failing, sends ASKING before a command when asked, and
 * runs raw commands (CLUSTER SLOTS).
 *
 * Ownership of a hiredis context: hiredis frees it by itself after a
 * connection error (its disconnect path runs every pending callback with a
 * NULL reply first); we free it ourselves, with redisAsyncFree(), only on
 * a timeout, an error reply or shutdown, and clear sc->ac first, so a
 * callback run during the free never touches the dying context again.
 * Only API that hiredis 0.14 (Debian 12) already has is used: no
 * redisConnectWithOptions, no async timeouts (hence the deadline timer),
 * no RESP3; the same code builds against hiredis 1.x, so nothing needs a
 * HIREDIS_MAJOR guard.
 *
 * With Sentinel (daemon/sentinel.c) each connect starts by asking the
 * sentinels where the master is; requests accepted meanwhile wait in a
 * second FIFO (sc->wait_head), with the same deadline timer, and are sent
 * once the master's context exists.  The handshake then also asks ROLE: a
 * server that is not a master (a failover under way) fails the connect
 * like any other error.  Each such connection also keeps a sentinel watch
 * (sentinel.h), started once its first question is answered: when a
 * sentinel announces +switch-master to an address other than the one this
 * connection uses, the connection is dropped as if it were lost, without
 * tripping the breaker, and a new connect asks the sentinels at once
 * (docs/redis.md "Sentinel": a planned move, not a Redis failure).  A
 * promotion announced before the switch fails a connection to the old
 * master at once (on_promoting()), and connects go to the replica instead.
 */
#include <errno.h>
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
#include "store.h"
#include "store_int.h"
#include "store_link_int.h"
#include "store_slots.h"

/* ---- requests in flight ------------------------------------------------------------ */

static struct sreq *req_new(struct store_link *sc, size_t key_len)
{
    struct sreq *q = sc->free_list;

    if (q) {
        sc->free_list = q->next;
        sc->n_free--;
    } else {
        q = malloc(sizeof(*q));
        if (!q)
            return NULL;
        q->key = NULL;
        q->key_len = 0;
    }
    memset(q, 0, offsetof(struct sreq, key));
    /* Keys are kept for a NOSCRIPT retry; the buffer is reused when it fits. */
    if (key_len && (!q->key || q->key_len < key_len)) {
        char *k = realloc(q->key, key_len);

        if (!k) {
            free(q->key);
            free(q);
            return NULL;
        }
        q->key = k;
    }
    q->key_len = key_len;
    q->sc = sc;
    return q;
}

void store_link_req_free(struct store_link *sc, struct sreq *q)
{
    if (sc->n_free < FREELIST_MAX) {
        q->next = sc->free_list;
        sc->free_list = q;
        sc->n_free++;
        return;
    }
    free(q->key);
    free(q);
}

static void deadline_arm(struct store_link *sc, uint64_t at)
{
    uint64_t now = clock_now_ms();

    if (sc->deadline_armed && sc->deadline_at <= at)
        return;
    at = at > now ? at - now : 0;
    redis_timer_ms(sc->deadline_ev, at);
    sc->deadline_armed = true;
    sc->deadline_at = now + at;
}

/* Appends @q to the queue *@head .. *@tail (sent, or waiting) under its deadline. */
static void queue_push(struct store_link *sc, struct sreq **head, struct sreq **tail,
                       struct sreq *q)
{
    q->next = NULL;
    if (*tail)
        (*tail)->next = q;
    else
        *head = q;
    *tail = q;
    deadline_arm(sc, q->deadline);
}

static void fifo_push(struct store_link *sc, struct sreq *q)
{
    queue_push(sc, &sc->head, &sc->tail, q);
}

void store_link_fifo_remove(struct store_link *sc, struct sreq *q)
{
    struct sreq **pp = &sc->head, *prev = NULL;

    /* Always the head in practice: Redis answers in order. */
    while (*pp && *pp != q) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp)
        return;
    *pp = q->next;
    if (sc->tail == q)
        sc->tail = prev;
    q->next = NULL;
}

/* True while this connection asks the sentinels where the master is. */
static bool discovering(const struct store_link *sc)
{
    return sc->sq && sentinel_query_busy(sc->sq);
}

/* A request accepted while discovering waits, in order, for the master. */
static void wait_push(struct store_link *sc, struct sreq *q)
{
    queue_push(sc, &sc->wait_head, &sc->wait_tail, q);
}


/* Fails the waiting requests whose deadline is @due or earlier (UINT64_MAX:
 * all); returns how many.  Unlinked first: a callback may queue again. */
static unsigned wait_fail(struct store_link *sc, uint64_t due)
{
    struct sreq **pp = &sc->wait_head, *failed = NULL, **fail_tail = &failed, *q;
    unsigned n = 0;

    sc->wait_tail = NULL;
    while ((q = *pp) != NULL) {
        if (q->deadline > due) {
            sc->wait_tail = q;
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        q->next = NULL;
        *fail_tail = q;
        fail_tail = &q->next;
    }
    while ((q = failed) != NULL) {
        failed = q->next;
        store_inc(&sc->st->errors);
        store_link_finish(sc, q, NULL);
        n++;
    }
    return n;
}


/* The master's context exists (or could not be made): the waiting go. */
static void wait_send(struct store_link *sc)
{
    struct sreq *q;

    while ((q = sc->wait_head) != NULL) {
        sc->wait_head = q->next;
        if (!sc->wait_head)
            sc->wait_tail = NULL;
        if (store_link_req_send(sc, q) < 0) {
            store_link_fail(sc, "cannot queue a command", true);
            store_inc(&sc->st->errors);
            store_link_finish(sc, q, NULL);
        }
    }
}


/* Queues the command of @q on the connection; -ENOTCONN when hiredis refuses. */
int store_link_req_send(struct store_link *sc, struct sreq *q)
{
    /* EVALSHA sha 1 key, then the script's ARGV (and a batch's list). */
    const char *argv[5 + STORE_SCRIPT_ARGV_MAX];
    size_t lens[5 + STORE_SCRIPT_ARGV_MAX];
    int argc = 0;

    if (!sc->ac) {
        if (!discovering(sc))
            return -ENOTCONN;
        wait_push(sc, q);
        return 0;
    }
    if (q->cmd == STORE_CMD_CALL) {
        argv[argc++] = "EVALSHA";
        argv[argc++] = store_script_sha(q->call.script);
        argv[argc++] = "1";
        argv[argc++] = q->key;
        for (unsigned i = 0; i < q->call.argc && i < STORE_SCRIPT_ARGV_MAX; i++)
            argv[argc++] = q->call.argv[i];
        if (q->call.list)
            argv[argc++] = q->call.list;
    } else if (q->cmd == STORE_CMD_SCAN) {
        /* The cursor and the count ride in call.argv (send_user()). */
        argv[argc++] = "SCAN";
        argv[argc++] = q->call.argv[0];
        argv[argc++] = "MATCH";
        argv[argc++] = q->key;
        argv[argc++] = "COUNT";
        argv[argc++] = q->call.argv[1];
    } else {
        argv[argc++] = "DEL";
        argv[argc++] = q->key;
    }
    for (int i = 0; i < argc; i++)
        lens[i] = argv[i] == q->key ? q->key_len :
                  argv[i] == q->call.list ? q->call.list_len : strlen(argv[i]);
    if (redisAsyncCommandArgv(sc->ac, store_link_on_reply, q, argc, argv, lens) != REDIS_OK)
        return -ENOTCONN;
    fifo_push(sc, q);
    store_inc(&sc->st->requests);
    return 0;
}

/* An internal command (handshake, SCRIPT LOAD after NOSCRIPT). */
static int send_internal(struct store_link *sc, enum req_kind kind, int argc, const char **argv,
                         const size_t *lens)
{
    struct sreq *q;

    if (!sc->ac)
        return -ENOTCONN;
    q = req_new(sc, 0);
    if (!q)
        return -ENOMEM;
    q->kind = kind;
    q->deadline = store_deadline(sc->st, clock_now_ms());
    if (redisAsyncCommandArgv(sc->ac, store_link_on_reply, q, argc, argv, lens) != REDIS_OK) {
        store_link_req_free(sc, q);
        return -ENOTCONN;
    }
    fifo_push(sc, q);
    store_inc(&sc->st->requests);
    return 0;
}

int store_link_script_load(struct store_link *sc, enum store_script s, enum req_kind kind)
{
    const char *argv[3] = { "SCRIPT", "LOAD", store_script_source(s) };
    size_t lens[3] = { 6, 4, strlen(argv[2]) };

    return send_internal(sc, kind, 3, argv, lens);
}

/* ---- connection life ---------------------------------------------------------------- */

static void schedule_retry(struct store_link *sc)
{
    if (sc->closing || sc->idle || !store_wanted(sc->st))
        return;
    redis_backoff(sc->retry_ev, &sc->backoff_ms);
}

static void mark_down(struct store_link *sc)
{
    if (sc->state == CONN_READY)
        __atomic_fetch_sub(&sc->st->conns_up, 1, __ATOMIC_RELAXED);
    sc->state = CONN_DOWN;
    sc->ac = NULL;
}

static void conn_start(struct store_link *sc);

/*
 * Forgets the context: every request in flight fails (NULL reply).  @failed:
 * trip the breaker and retry after the backoff; else (a sentinel announced
 * another master) connect again at once, asking the sentinels.  @ac_alive:
 * we still own the context and free it here (which runs every pending
 * callback with NULL); otherwise hiredis is freeing it already.
 */
static void conn_drop(struct store_link *sc, const char *why, bool ac_alive, bool failed)
{
    redisAsyncContext *ac = sc->ac;

    if (!ac)
        return;
    if (failed && !sc->closing)
        store_trip(sc->st, sc->br, why);
    mark_down(sc);
    ac->data = NULL;
    if (ac_alive)
        redisAsyncFree(ac);
    if (failed)
        schedule_retry(sc);
    else
        conn_start(sc);
    /* Last: the router may look at this link again (its slot map refresh). */
    if (failed && !sc->closing && sc->hooks.state)
        sc->hooks.state(sc->hooks.arg, sc, false);
}

/* The connection failed: trip the breaker, forget the context, retry later. */
void store_link_fail(struct store_link *sc, const char *why, bool ac_alive)
{
    conn_drop(sc, why, ac_alive, true);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct store_link *sc = ac->data;
    char why[160];

    if (!sc || status == REDIS_OK)
        return;
    snprintf(why, sizeof(why), "cannot connect: %s", ac->errstr[0] ? ac->errstr : "error");
    /* hiredis frees the context after this callback. */
    store_link_fail(sc, why, false);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct store_link *sc = ac->data;
    char why[160];

    (void)status;
    if (!sc)
        return;
    snprintf(why, sizeof(why), "connection lost: %s",
             ac->errstr[0] ? ac->errstr : "closed by the server");
    store_link_fail(sc, why, false);
}

/* Connects to @path (a Unix socket) or @host:@port and queues the handshake. */
static void conn_connect(struct store_link *sc, const char *host, unsigned port,
                         const char *path)
{
    struct store *st = sc->st;
    redisAsyncContext *ac;
    char why[160];
    int r = 0;

    if (sc->ac || sc->closing)
        return;
    evtimer_del(sc->retry_ev);
    ac = redis_async_open(path, host, port, sc->base, sc, on_connect, on_disconnect, why,
                          sizeof(why));
    if (!ac) {
        store_trip(st, sc->br, why);
        schedule_retry(sc);
        return;
    }
    sc->ac = ac;
    sc->state = CONN_CONNECTING;
    /* Pipelined right away: hiredis sends them once the connect completes,
     * and each has a deadline, so a server that never answers is noticed. */
    if (st->o.password) {
        const char *argv[3] = { "AUTH", st->o.username ? st->o.username : st->o.password,
                                st->o.password };
        size_t lens[3] = { 4, strlen(argv[1]), strlen(argv[2]) };

        r = send_internal(sc, REQ_HANDSHAKE, st->o.username ? 3 : 2, argv, lens);
    }
    if (r >= 0 && st->o.db) {
        char db[16];
        const char *argv[2] = { "SELECT", db };
        size_t lens[2];

        snprintf(db, sizeof(db), "%u", st->o.db);
        lens[0] = 6;
        lens[1] = strlen(db);
        r = send_internal(sc, REQ_HANDSHAKE, 2, argv, lens);
    }
    /* Where a sentinel sent us, it may be a replica by now (a failover). */
    if (r >= 0 && st->sentinel) {
        const char *argv[1] = { "ROLE" };
        size_t lens[1] = { 4 };

        r = send_internal(sc, REQ_ROLE, 1, argv, lens);
    }
    for (int i = 0; r >= 0 && i < STORE_N_SCRIPTS; i++)
        r = store_link_script_load(sc, (enum store_script)i,
                             i == STORE_N_SCRIPTS - 1 ? REQ_HANDSHAKE_LAST : REQ_HANDSHAKE);
    if (r < 0)
        store_link_fail(sc, "cannot queue the handshake", true);
}

/* The sentinels' answer (sentinel.h): connect there, or fail and retry. */
static void on_master(void *arg, const char *host, unsigned port, const char *why)
{
    struct store_link *sc = arg;
    char msg[640];

    /* Once, after the first answer (so on the sentinel that gave it); then
     * it lives on by itself. */
    sentinel_watch_start(sc->sw);
    if (!host) {
        sc->reask = false;
        snprintf(msg, sizeof(msg), "no sentinel gave the master: %s", why);
        store_trip(sc->st, sc->br, msg);
        wait_fail(sc, UINT64_MAX);
        schedule_retry(sc);
        return;
    }
    /* This answer may predate a switch announced while asking: once more
     * (the waiting keep their deadlines). */
    if (sc->reask) {
        sc->reask = false;
        if (strcmp(host, sc->announced_host) != 0 || port != sc->announced_port) {
            sentinel_query_start(sc->sq);
            return;
        }
    }
    /* A promotion under way: the replica, never the old master (on_promoting()). */
    sentinel_watch_redirect(sc->sw, &host, &port);
    snprintf(sc->master_host, sizeof(sc->master_host), "%s", host);
    sc->master_port = port;
    conn_connect(sc, host, port, NULL);
    wait_send(sc);
}

/*
 * A sentinel announced that the replica @n->host is being promoted in place
 * of @n->old_host (sentinel.h): what the old master counts from now on is
 * lost when it is demoted, so a connection there fails at once: the breaker
 * opens (hits get on_redis_error, not over-admission) and the retries go to
 * the replica (sentinel_watch_redirect()) until its ROLE says master.
 */
static void on_promoting(struct store_link *sc, const struct sentinel_news *n)
{
    char why[SENTINEL_HOST_MAX + 96];

    if (!sc->ac || strcmp(n->old_host, sc->master_host) != 0 || n->old_port != sc->master_port)
        return;
    snprintf(why, sizeof(why), "a sentinel announced the promotion of %s:%u, no more writes here",
             n->host, n->port);
    store_link_fail(sc, why, true);
}

/* A sentinel announced +switch-master (sentinel.h): leave a master that is
 * no longer the one, even while it still answers. */
static void on_switch(struct store_link *sc, const char *host, unsigned port)
{
    if (discovering(sc)) {
        sc->reask = true;
        snprintf(sc->announced_host, sizeof(sc->announced_host), "%s", host);
        sc->announced_port = port;
        return;
    }
    /* Down: its next connect asks the sentinels anyway. */
    if (!sc->ac || (strcmp(host, sc->master_host) == 0 && port == sc->master_port))
        return;
    conn_drop(sc, "the master moved", true, false);
}

static void on_news(void *arg, const struct sentinel_news *n)
{
    struct store_link *sc = arg;

    if (sc->closing)
        return;
    if (n->kind == SENTINEL_NEWS_PROMOTING)
        on_promoting(sc, n);
    else
        on_switch(sc, n->host, n->port);
}

static void conn_start(struct store_link *sc)
{
    if (sc->ac || sc->closing)
        return;
    if (sc->node_host[0]) {
        conn_connect(sc, sc->node_host, sc->node_port, NULL);
        return;
    }
    if (sc->sq) {
        /* on_master() goes on once the sentinels have answered. */
        evtimer_del(sc->retry_ev);
        sentinel_query_start(sc->sq);
        return;
    }
    conn_connect(sc, sc->st->o.host, sc->st->o.port, sc->st->o.unix_socket);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct store_link *sc = arg;

    (void)fd;
    (void)what;
    if (store_wanted(sc->st))
        conn_start(sc);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct store_link *sc = arg;
    uint64_t now = clock_now_ms(), next = UINT64_MAX;
    bool late = false;
    char why[96];

    (void)fd;
    (void)what;
    sc->deadline_armed = false;
    for (struct sreq *q = sc->wait_head; q; q = q->next)
        late |= q->deadline <= now;
    if (late) {
        /* The sentinels are slow: fail what waits for them, keep asking. */
        store_inc(&sc->st->timeouts);
        snprintf(why, sizeof(why), "no master from the sentinels within %u ms",
                 sc->st->o.timeout_ms);
        store_trip(sc->st, sc->br, why);
        wait_fail(sc, now);
        late = false;
    }
    for (struct sreq *q = sc->wait_head; q; q = q->next) {
        if (q->deadline < next)
            next = q->deadline;
    }
    for (struct sreq *q = sc->head; q; q = q->next) {
        if (q->deadline <= now)
            late = true;
        else if (q->deadline < next)
            next = q->deadline;
    }
    if (late) {
        /* Nothing queued behind the late one can be answered first: drop it all. */
        store_inc(&sc->st->timeouts);
        snprintf(why, sizeof(why), "no reply within %u ms", sc->st->o.timeout_ms);
        store_link_fail(sc, why, true);
        return;
    }
    if (next != UINT64_MAX)
        deadline_arm(sc, next);
}

/* ---- the link ------------------------------------------------------------------------- */

int store_link_new(struct store *st, struct event_base *base, struct store_breaker *br,
                   const char *host, unsigned port, const struct store_link_hooks *hooks,
                   struct store_link **ret)
{
    struct store_link *sc;

    if (host && strlen(host) >= sizeof(sc->node_host))
        return -EINVAL;
    sc = calloc(1, sizeof(*sc));
    if (!sc)
        return -ENOMEM;
    sc->st = st;
    sc->br = br;
    if (hooks)
        sc->hooks = *hooks;
    if (host) {
        snprintf(sc->node_host, sizeof(sc->node_host), "%s", host);
        sc->node_port = port;
    }
    sc->base = base;
    sc->deadline_ev = evtimer_new(base, on_deadline, sc);
    sc->retry_ev = evtimer_new(base, on_retry, sc);
    if (!sc->deadline_ev || !sc->retry_ev ||
        (!host && st->sentinel &&
         (sentinel_query_new(st->sentinel, base, on_master, sc, &sc->sq) < 0 ||
          sentinel_watch_new(st->sentinel, base, on_news, sc, &sc->sw) < 0))) {
        store_link_free(sc);
        return -ENOMEM;
    }
    if (store_wanted(st))
        conn_start(sc);
    *ret = sc;
    return 0;
}

bool store_link_active(const struct store_link *sc)
{
    return sc->ac != NULL;
}

bool store_link_ready(const struct store_link *sc)
{
    return sc->state == CONN_READY;
}

struct store_breaker *store_link_breaker(const struct store_link *sc)
{
    return sc->br;
}

void store_link_idle(struct store_link *sc, bool idle)
{
    sc->idle = idle;
    if (idle)
        evtimer_del(sc->retry_ev);
    else if (!sc->ac && !sc->closing && store_wanted(sc->st) &&
             !evtimer_pending(sc->retry_ev, NULL))
        conn_start(sc);
}

void store_link_free(struct store_link *sc)
{
    struct sreq *q;

    if (!sc)
        return;
    sc->closing = true;
    sentinel_query_free(sc->sq);    /* no callback from it any more */
    sc->sq = NULL;
    sentinel_watch_free(sc->sw);    /* nor from this one */
    sc->sw = NULL;
    wait_fail(sc, UINT64_MAX);
    if (sc->ac) {
        redisAsyncContext *ac = sc->ac;

        mark_down(sc);
        ac->data = NULL;
        redisAsyncFree(ac);     /* every pending callback runs now, with NULL */
    }
    /* Whatever hiredis did not hold (none in practice) fails too. */
    while ((q = sc->head) != NULL) {
        store_link_fifo_remove(sc, q);
        store_link_finish(sc, q, NULL);
    }
    while ((q = sc->free_list) != NULL) {
        sc->free_list = q->next;
        free(q->key);
        free(q);
    }
    if (sc->deadline_ev)
        event_free(sc->deadline_ev);
    if (sc->retry_ev)
        event_free(sc->retry_ev);
    free(sc);
}

/* May a request be sent now?  Starts a connection when none is up. */
static int conn_usable(struct store_link *sc)
{
    if (sc->closing)
        return -ENOTCONN;
    if (!store_wanted(sc->st))
        store_want(sc->st);
    if (store_breaker_is_open(sc->br))
        return -ENOTCONN;
    if (!sc->ac && !discovering(sc))
        conn_start(sc);
    return sc->ac || discovering(sc) ? 0 : -ENOTCONN;
}

int store_link_send(struct store_link *sc, enum store_cmd cmd, const struct store_call *call,
                    const char *key, size_t key_len, uint64_t deadline_ms, bool asking,
                    store_cb *cb, void *arg)
{
    struct sreq *q;
    int r;

    if (!key_len || (cmd == STORE_CMD_CALL && (call->argc > STORE_SCRIPT_ARGV_MAX ||
                                         (unsigned)call->script >= STORE_N_SCRIPTS)))
        return -EINVAL;
    if (deadline_ms <= clock_now_ms())
        return -ETIMEDOUT;
    r = conn_usable(sc);
    if (r < 0)
        return r;
    if (asking) {
        /* ASKING holds for the next command only, which is this one: hiredis
         * sends both in this order on this connection. */
        const char *argv[1] = { "ASKING" };
        size_t lens[1] = { 6 };

        r = send_internal(sc, REQ_IGNORE, 1, argv, lens);
        if (r < 0)
            return r;
    }
    q = req_new(sc, key_len);
    if (!q)
        return -ENOMEM;
    memcpy(q->key, key, key_len);
    q->kind = REQ_USER;
    q->cmd = cmd;
    if (call)
        q->call = *call;
    q->deadline = deadline_ms;
    q->cb = cb;
    q->arg = arg;
    r = store_link_req_send(sc, q);
    if (r < 0) {
        store_link_req_free(sc, q);
        store_link_fail(sc, "cannot queue a command", true);
    }
    return r;
}

int store_link_raw(struct store_link *sc, int argc, const char **argv, const size_t *lens,
                   store_raw_cb *cb, void *arg)
{
    int r;

    if (sc->closing || store_breaker_is_open(sc->br))
        return -ENOTCONN;
    if (!sc->ac)
        conn_start(sc);
    r = send_internal(sc, REQ_RAW, argc, argv, lens);
    if (r < 0)
        return r;
    /* send_internal() queued it last. */
    sc->tail->raw_cb = cb;
    sc->tail->arg = arg;
    return 0;
}
