/* SPDX-License-Identifier: MIT */
/*
 * store_conn: a worker's handle on the store (see store.h): one link to the
 * single server (daemon/store_link.c), or with redis.cluster_nodes the
 * cluster router (daemon/store_cluster.c).  Without a cluster every call is
 * a pass-through to the link.
 */
#include <errno.h>
#include <stdlib.h>

#include "store.h"
#include "store_int.h"

struct store_conn {
    struct store_link *link;        /* a single server; NULL with a cluster */
    struct store_cluster *cl;       /* the router; NULL without a cluster */
};

int store_conn_new(struct store *st, struct event_base *base, struct store_conn **ret)
{
    struct store_conn *sc = calloc(1, sizeof(*sc));
    int r;

    if (!sc)
        return -ENOMEM;
    if (st->o.n_cluster_nodes)
        r = store_cluster_new(st, base, &sc->cl);
    else
        r = store_link_new(st, base, &st->single, NULL, 0, NULL, &sc->link);
    if (r < 0) {
        free(sc);
        return r;
    }
    *ret = sc;
    return 0;
}

void store_conn_free(struct store_conn *sc)
{
    if (!sc)
        return;
    store_link_free(sc->link);
    store_cluster_free(sc->cl);
    free(sc);
}

bool store_conn_active(const struct store_conn *sc)
{
    return sc->link ? store_link_active(sc->link) : store_cluster_active(sc->cl);
}

int store_conn_send(struct store_conn *sc, enum store_cmd cmd, const struct store_call *call,
                    const char *key, size_t key_len, uint64_t deadline_ms, store_cb *cb,
                    void *arg)
{
    if (sc->link)
        return store_link_send(sc->link, cmd, call, key, key_len, deadline_ms, false, cb, arg);
    return store_cluster_send(sc->cl, cmd, call, key, key_len, deadline_ms, cb, arg);
}
