/* SPDX-License-Identifier: MIT */
/*
 * store_cluster: a worker's router over a Redis Cluster (see store_int.h,
 * docs/redis.md "Cluster").  It keeps the worker's own slot map (from
 * CLUSTER SLOTS, asked of any reachable node at start, after every MOVED
 * and while a master is down) and one link (daemon/store_link.c) per node
 * it has heard of, each tripping that node's own breaker, so a dead master
 * sends only its own slots to on_redis_error.  A request goes to its key's
 * slot's master (store_slots.h); a MOVED answer updates the map and the
 * request is sent again within its deadline, an ASK answer sends it once
 * to the named node after ASKING, TRYAGAIN and CLUSTERDOWN fail the one
 * request: none of them is a node failure.  SCAN visits every master in
 * turn: the high bits of the cursor name the node (SCAN_NODE_SHIFT).
 * Every key divvy writes is one hash tag ({rule:actor}) and every script
 * touches one key, so each request lives on exactly one slot.
 *
 * Threads: a router and its links belong to the thread running its
 * event_base; the breakers are the store's (any thread).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "addr.h"
#include "clock.h"
#include "log.h"
#include "redis_async.h"
#include "store.h"
#include "store_int.h"
#include "store_slots.h"

#define REDIRECTS_MAX       5       /* MOVED/ASK followed per request */
#define REFRESH_MS          250     /* asking the slot map again while a master is down */
#define SCAN_NODE_SHIFT     48
#define SCAN_CURSOR_MASK    ((UINT64_C(1) << SCAN_NODE_SHIFT) - 1)

struct cnode {
    struct store_link *link;
    char host[STORE_SLOTS_HOST_MAX];
    unsigned port;
    bool master;                /* in the last slot map */
};

/* A user request, kept until answered so that a redirection can resend it.
 * One malloc each: next to a Redis round trip its cost does not show. */
struct creq {
    struct store_cluster *cl;
    enum store_cmd cmd;
    struct store_call call;
    uint64_t deadline;
    store_cb *cb;
    void *arg;
    unsigned redirects;
    unsigned node;              /* SCAN: the node it visits */
    size_t key_len;
    char key[];
};

struct store_cluster {
    struct store *st;
    struct event_base *base;
    struct cnode nodes[STORE_NODES_MAX];
    unsigned n_nodes;
    uint8_t slots[STORE_SLOTS_N];   /* node index + 1; 0: unknown */
    bool map_known;
    bool refreshing;            /* CLUSTER SLOTS in flight */
    unsigned asked;             /* the node it was asked of */
    bool closing;
    struct event *refresh_ev;
};

static struct log_ratelimit rl_cluster;

static void on_redirect(void *req_arg, const char *err);
static void on_state(void *arg, struct store_link *l, bool up);

/* The index of node @host:@port, added (and connecting) when new; -ENOSPC,
 * -ENOMEM. */
static int node_get(struct store_cluster *cl, const char *host, unsigned port)
{
    struct store_link_hooks hooks = { .redirect = on_redirect, .state = on_state, .arg = cl };
    struct store_breaker *br;
    struct cnode *n;
    int r;

    for (unsigned i = 0; i < cl->n_nodes; i++) {
        if (cl->nodes[i].port == port && strcmp(cl->nodes[i].host, host) == 0)
            return (int)i;
    }
    if (cl->n_nodes >= STORE_NODES_MAX || strlen(host) >= sizeof(n->host))
        return -ENOSPC;
    br = store_node_breaker(cl->st, host, port);
    if (!br)
        return -ENOSPC;
    n = &cl->nodes[cl->n_nodes];
    r = store_link_new(cl->st, cl->base, br, host, port, &hooks, &n->link);
    if (r < 0)
        return r;
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->port = port;
    n->master = false;
    return (int)cl->n_nodes++;
}

/* ---- the slot map ---------------------------------------------------------------------- */

static void refresh(struct store_cluster *cl);

static void refresh_later(struct store_cluster *cl, unsigned ms)
{
    if (!cl->closing && !evtimer_pending(cl->refresh_ev, NULL))
        redis_timer_ms(cl->refresh_ev, ms);
}

struct map_build {
    struct store_cluster *cl;
    uint8_t slots[STORE_SLOTS_N];
    bool master[STORE_NODES_MAX];
};

static int map_range(void *arg, unsigned start, unsigned end, const char *host, unsigned port)
{
    struct map_build *mb = arg;
    struct store_cluster *cl = mb->cl;
    int i;

    /* Redis gives an empty host when it does not know its own address:
     * the node asked is that one. */
    i = node_get(cl, host[0] ? host : cl->nodes[cl->asked].host, port);
    if (i < 0)
        return i;
    mb->master[i] = true;
    for (unsigned s = start; s <= end; s++)
        mb->slots[s] = (uint8_t)(i + 1);
    return 0;
}

/* CLUSTER SLOTS answered (NULL: it failed). */
static void on_slots(void *arg, const redisReply *r)
{
    struct store_cluster *cl = arg;
    struct map_build *mb;
    bool down = false;
    int rc;

    cl->refreshing = false;
    if (cl->closing)
        return;
    mb = calloc(1, sizeof(*mb));
    if (!mb) {
        refresh_later(cl, REFRESH_MS);
        return;
    }
    mb->cl = cl;
    rc = r ? store_slots_parse(r, map_range, mb) : -EPROTO;
    if (rc < 0) {
        if (r)
            log_ratelimited(&rl_cluster, LOG_ERR, "redis cluster: unusable CLUSTER SLOTS "
                            "answer from %s:%u", cl->nodes[cl->asked].host,
                            cl->nodes[cl->asked].port);
        cl->asked++;            /* ask another node next time */
        refresh_later(cl, REFRESH_MS);
        free(mb);
        return;
    }
    memcpy(cl->slots, mb->slots, sizeof(cl->slots));
    cl->map_known = true;
    for (unsigned i = 0; i < cl->n_nodes; i++) {
        struct cnode *n = &cl->nodes[i];

        n->master = mb->master[i];
        store_link_idle(n->link, !n->master);
        down |= n->master && store_breaker_is_open(store_link_breaker(n->link));
    }
    free(mb);
    /* A dead master's replica takes over after the cluster's node timeout:
     * keep asking until the map names a master that answers. */
    if (down)
        refresh_later(cl, REFRESH_MS);
}

/* The node to ask for the slot map: a ready one first, else any whose
 * breaker is closed, starting after the one asked last. */
static int pick_asked(const struct store_cluster *cl)
{
    int any = -1;

    for (unsigned k = 0; k < cl->n_nodes; k++) {
        unsigned i = (cl->asked + k) % cl->n_nodes;
        const struct store_link *l = cl->nodes[i].link;

        if (store_breaker_is_open(store_link_breaker(l)))
            continue;
        if (store_link_ready(l))
            return (int)i;
        if (any < 0)
            any = (int)i;
    }
    return any;
}

/* Asks for the slot map now, unless a question is in flight already. */
static void refresh(struct store_cluster *cl)
{
    const char *argv[2] = { "CLUSTER", "SLOTS" };
    size_t lens[2] = { 7, 5 };
    int i;

    if (cl->refreshing || cl->closing || !store_wanted(cl->st))
        return;
    i = pick_asked(cl);
    if (i < 0) {
        /* Every node known is down: the seeds again, after a while. */
        for (unsigned k = 0; k < cl->n_nodes; k++)
            store_link_idle(cl->nodes[k].link, false);
        refresh_later(cl, REFRESH_MS);
        return;
    }
    cl->asked = (unsigned)i;
    if (store_link_raw(cl->nodes[i].link, 2, argv, lens, on_slots, cl) < 0) {
        cl->asked++;
        refresh_later(cl, REFRESH_MS);
        return;
    }
    cl->refreshing = true;
}

static void on_refresh(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    refresh(arg);
}

/* A link came up or failed: a failed master may have been replaced. */
static void on_state(void *arg, struct store_link *l, bool up)
{
    struct store_cluster *cl = arg;

    (void)l;
    if (!up || !cl->map_known)
        refresh(cl);
}

/* ---- requests --------------------------------------------------------------------------- */

static struct creq *creq_new(struct store_cluster *cl, const char *key, size_t key_len)
{
    struct creq *q = malloc(sizeof(*q) + key_len);

    if (!q)
        return NULL;
    memset(q, 0, sizeof(*q));
    q->cl = cl;
    q->key_len = key_len;
    memcpy(q->key, key, key_len);
    return q;
}

static void creq_finish(struct creq *q, const struct store_reply *rep)
{
    store_cb *cb = q->cb;
    void *arg = q->arg;

    free(q);
    if (cb)
        cb(arg, rep);
}

/* The node of @key's slot: the map's, else (no map yet, or a slot it
 * lacks) any node whose breaker is closed; a MOVED then says where. */
static int route(const struct store_cluster *cl, const char *key, size_t key_len)
{
    unsigned i = cl->slots[store_slots_key_slot(key, key_len)];

    if (i)
        return (int)i - 1;
    for (unsigned k = 0; k < cl->n_nodes; k++) {
        if (!store_breaker_is_open(store_link_breaker(cl->nodes[k].link)))
            return (int)k;
    }
    return cl->n_nodes ? 0 : -ENOTCONN;
}

static void on_answer(void *arg, const struct store_reply *rep);

static int creq_send(struct creq *q, unsigned node, bool asking)
{
    struct store_cluster *cl = q->cl;

    return store_link_send(cl->nodes[node].link, q->cmd, &q->call, q->key, q->key_len,
                           q->deadline, asking, on_answer, q);
}

/* The first master from node @from on (a SCAN's next node); -ENOENT. */
static int scan_node(const struct store_cluster *cl, unsigned from)
{
    for (unsigned i = from; i < cl->n_nodes; i++) {
        if (cl->nodes[i].master || (!cl->map_known &&
                                    !store_breaker_is_open(store_link_breaker(cl->nodes[i].link))))
            return (int)i;
    }
    return -ENOENT;
}

static void on_answer(void *arg, const struct store_reply *rep)
{
    struct creq *q = arg;
    struct store_reply next;
    int i;

    if (q->cmd != STORE_CMD_SCAN || !rep || rep->kind != STORE_REPLY_KEYS) {
        creq_finish(q, rep);
        return;
    }
    /* This node's scan goes on, or the next master's starts. */
    next = *rep;
    if (rep->keys.cursor > SCAN_CURSOR_MASK) {
        creq_finish(q, NULL);
        return;
    }
    if (rep->keys.cursor) {
        next.keys.cursor = (uint64_t)q->node << SCAN_NODE_SHIFT | rep->keys.cursor;
    } else {
        i = scan_node(q->cl, q->node + 1);
        next.keys.cursor = i < 0 ? 0 : (uint64_t)i << SCAN_NODE_SHIFT;
    }
    creq_finish(q, &next);
}

static void on_redirect(void *req_arg, const char *err)
{
    struct creq *q = req_arg;
    struct store_cluster *cl = q->cl;
    struct store_redirect_to to;
    enum store_redirect kind = store_slots_redirect(err, &to);
    int i = -ENOENT;

    if (kind == STORE_REDIRECT_MOVED || kind == STORE_REDIRECT_ASK) {
        store_inc(&cl->st->redirects);
        i = node_get(cl, to.host, to.port);
    }
    if (kind == STORE_REDIRECT_MOVED) {
        /* The slot lives there now; the rest of the map may have moved too. */
        if (i >= 0) {
            cl->slots[to.slot] = (uint8_t)(i + 1);
            cl->nodes[i].master = true;
            store_link_idle(cl->nodes[i].link, false);
        }
        refresh(cl);
    }
    if (i >= 0 && q->redirects < REDIRECTS_MAX) {
        q->redirects++;
        if (creq_send(q, (unsigned)i, kind == STORE_REDIRECT_ASK) >= 0)
            return;
    }
    /* TRYAGAIN, CLUSTERDOWN, too many redirections, the node unreachable, or
     * the deadline passed: this request's caller applies its policy. */
    store_inc(&cl->st->errors);
    log_ratelimited(&rl_cluster, LOG_ERR, "redis cluster: %.160s", err);
    creq_finish(q, NULL);
}

int store_cluster_send(struct store_cluster *cl, enum store_cmd cmd,
                       const struct store_call *call, const char *key, size_t key_len,
                       uint64_t deadline_ms, store_cb *cb, void *arg)
{
    uint64_t cursor = 0;
    struct creq *q;
    int node, r;

    if (!key_len)
        return -EINVAL;
    if (deadline_ms <= clock_now_ms())
        return -ETIMEDOUT;
    if (cl->closing)
        return -ENOTCONN;
    if (!store_wanted(cl->st))
        store_want(cl->st);
    if (!cl->map_known)
        refresh(cl);
    if (cmd == STORE_CMD_SCAN) {
        cursor = strtoull(call->argv[0], NULL, 10);
        node = scan_node(cl, (unsigned)(cursor >> SCAN_NODE_SHIFT));
        if (node < 0)
            return -ENOTCONN;
    } else {
        node = route(cl, key, key_len);
        if (node < 0)
            return node;
    }
    q = creq_new(cl, key, key_len);
    if (!q)
        return -ENOMEM;
    q->cmd = cmd;
    if (call)
        q->call = *call;
    if (cmd == STORE_CMD_SCAN)
        snprintf(q->call.argv[0], sizeof(q->call.argv[0]), "%llu",
                 (unsigned long long)(cursor & SCAN_CURSOR_MASK));
    q->deadline = deadline_ms;
    q->cb = cb;
    q->arg = arg;
    q->node = (unsigned)node;
    r = creq_send(q, (unsigned)node, false);
    if (r < 0)
        free(q);
    return r;
}

/* ---- the router --------------------------------------------------------------------------- */

int store_cluster_new(struct store *st, struct event_base *base, struct store_cluster **ret)
{
    struct store_cluster *cl = calloc(1, sizeof(*cl));
    int r = 0;

    if (!cl)
        return -ENOMEM;
    cl->st = st;
    cl->base = base;
    cl->refresh_ev = evtimer_new(base, on_refresh, cl);
    if (!cl->refresh_ev)
        r = -ENOMEM;
    for (unsigned i = 0; r >= 0 && i < st->o.n_cluster_nodes; i++) {
        char buf[STORE_NODE_NAME_MAX];
        const char *host, *port;

        r = addr_split_host_port(st->o.cluster_nodes[i], buf, sizeof(buf), &host, &port);
        if (r >= 0)
            r = node_get(cl, host, (unsigned)strtoul(port, NULL, 10));
    }
    if (r < 0) {
        store_cluster_free(cl);
        return r;
    }
    if (store_wanted(st))
        refresh(cl);
    *ret = cl;
    return 0;
}

bool store_cluster_active(const struct store_cluster *cl)
{
    for (unsigned i = 0; i < cl->n_nodes; i++) {
        if (store_link_active(cl->nodes[i].link))
            return true;
    }
    return false;
}

void store_cluster_free(struct store_cluster *cl)
{
    if (!cl)
        return;
    cl->closing = true;
    /* Requests in flight fail through on_answer() (or on_slots()), which
     * still need the router: it goes last. */
    for (unsigned i = 0; i < cl->n_nodes; i++)
        store_link_free(cl->nodes[i].link);
    if (cl->refresh_ev)
        event_free(cl->refresh_ev);
    free(cl);
}
