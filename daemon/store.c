/* SPDX-License-Identifier: MIT */
/*
 * store: the Redis store (see store.h, docs/redis.md): its settings, the
 * breaker shared by the workers and its counters, the key format, and the
 * typed requests, which pack their script's call (daemon/store_script.c) and
 * hand it to the worker's connection (daemon/store_conn.c: hiredis, the
 * FIFO of requests in flight, reconnects, Sentinel).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "clock.h"
#include "log.h"
#include "sentinel.h"
#include "store.h"
#include "store_int.h"

/* ---- the store ----------------------------------------------------------------- */


static uint64_t ld(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

const char *store_where(const struct store *st, char *buf, size_t size)
{
    if (st->o.n_cluster_nodes)
        snprintf(buf, size, "cluster:%s", st->o.cluster_nodes[0]);
    else if (st->sentinel)
        sentinel_describe(st->sentinel, buf, size);
    else if (st->o.unix_socket)
        snprintf(buf, size, "unix:%s", st->o.unix_socket);
    else
        snprintf(buf, size, "%s:%u", st->o.host, st->o.port);
    return buf;
}

/* Breaker @br's node as on_breaker() names it (store.h): a cluster node's
 * "HOST:PORT", else the single server's node name. */
static const char *breaker_node(const struct store *st, const struct store_breaker *br)
{
    return br == &st->single ? st->node : br->name;
}

bool store_breaker_is_open(const struct store_breaker *br)
{
    return __atomic_load_n(&br->open, __ATOMIC_ACQUIRE) != 0;
}

/* The one place a breaker opens: logged and counted once per transition. */
void store_trip(struct store *st, struct store_breaker *br, const char *why)
{
    uint64_t closed = 0;
    char w[512];

    if (!__atomic_compare_exchange_n(&br->open, &closed, 1, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED))
        return;
    __atomic_store_n(&br->opened_ms, clock_now_ms(), __ATOMIC_RELAXED);
    store_inc(&st->trips);
    if (br != &st->single)
        log_msg(LOG_WARNING, "redis cluster node %s: %s; breaker open: its slots use "
                "on_redis_error until it is back or another master has them", br->name, why);
    else
        log_msg(LOG_WARNING, "redis %s: %s; breaker open: hits use on_redis_error until it "
                "is back", store_where(st, w, sizeof(w)), why);
    __atomic_store_n(&br->reported, 1, __ATOMIC_RELAXED);
    if (st->o.on_breaker)
        st->o.on_breaker(st->o.arg, breaker_node(st, br), true);
}

void store_untrip(struct store *st, struct store_breaker *br)
{
    uint64_t open = 1;
    char w[512];

    if (!__atomic_compare_exchange_n(&br->open, &open, 0, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED)) {
        /* Reached before it ever tripped: the metrics learn of the node. */
        if (!__atomic_exchange_n(&br->reported, 1, __ATOMIC_RELAXED) && st->o.on_breaker)
            st->o.on_breaker(st->o.arg, breaker_node(st, br), false);
        return;
    }
    __atomic_store_n(&br->reported, 1, __ATOMIC_RELAXED);
    log_msg(LOG_NOTICE, "redis %s%s is back after %llu ms: breaker closed",
            br != &st->single ? "cluster node " : "", br != &st->single ? br->name :
            store_where(st, w, sizeof(w)),
            (unsigned long long)(clock_now_ms() - __atomic_load_n(&br->opened_ms,
                                                                  __ATOMIC_RELAXED)));
    if (st->o.on_breaker)
        st->o.on_breaker(st->o.arg, breaker_node(st, br), false);
}

struct store_breaker *store_node_breaker(struct store *st, const char *host, unsigned port)
{
    struct store_breaker *br = NULL;
    char name[STORE_NODE_NAME_MAX];
    uint64_t n;

    snprintf(name, sizeof(name), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
    pthread_mutex_lock(&st->nodes_lock);
    n = ld(&st->n_nodes);
    for (uint64_t i = 0; i < n && !br; i++) {
        if (strcmp(st->nodes[i].name, name) == 0)
            br = &st->nodes[i];
    }
    if (!br && n < STORE_NODES_MAX) {
        br = &st->nodes[n];
        memcpy(br->name, name, sizeof(name));
        __atomic_store_n(&st->n_nodes, n + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&st->nodes_lock);
    return br;
}

static int dup_opt(const char *s, const char **ret)
{
    char *copy;

    *ret = NULL;
    if (!s)
        return 0;
    copy = strdup(s);
    if (!copy)
        return -ENOMEM;
    *ret = copy;
    return 0;
}

/* The breaker's node as on_breaker() names it (store.h). */
static int node_name(struct store *st, const struct store_opts *o)
{
    int n;

    if (o->n_cluster_nodes)
        n = asprintf(&st->node, "cluster:%s", o->cluster_nodes[0]);     /* unused */
    else if (st->sentinel)
        n = asprintf(&st->node, "sentinel:%s", o->master_name);
    else if (st->o.unix_socket)
        n = asprintf(&st->node, "unix:%s", st->o.unix_socket);
    else if (strchr(st->o.host, ':'))
        n = asprintf(&st->node, "[%s]:%u", st->o.host, st->o.port);
    else
        n = asprintf(&st->node, "%s:%u", st->o.host, st->o.port);
    if (n < 0) {
        st->node = NULL;
        return -ENOMEM;
    }
    return 0;
}

void store_free(struct store *st)
{
    if (!st)
        return;
    free((char *)st->o.host);
    free((char *)st->o.unix_socket);
    free((char *)st->o.username);
    if (st->o.password)
        explicit_bzero((char *)st->o.password, strlen(st->o.password));
    free((char *)st->o.password);
    free((char *)st->o.prefix);
    free(st->node);
    for (unsigned i = 0; st->o.cluster_nodes && i < st->o.n_cluster_nodes; i++)
        free((char *)st->o.cluster_nodes[i]);
    free((void *)st->o.cluster_nodes);
    pthread_mutex_destroy(&st->nodes_lock);
    sentinel_free(st->sentinel);
    free(st);
}

/* A cluster seed: "HOST:PORT" or "[V6]:PORT" with a port 1-65535. */
static bool seed_ok(const char *seed)
{
    char buf[STORE_NODE_NAME_MAX], *end;
    const char *host, *port;
    unsigned long p;

    if (addr_split_host_port(seed, buf, sizeof(buf), &host, &port) < 0 || !host[0] ||
        strncmp(seed, "unix:", 5) == 0)
        return false;
    p = strtoul(port, &end, 10);
    return port[0] >= '0' && port[0] <= '9' && !*end && p >= 1 && p <= 65535;
}

int store_new(const struct store_opts *o, struct store **ret)
{
    struct store *st;
    int r;

    if (!o || o->timeout_ms == 0 || (o->n_cluster_nodes && o->n_sentinels) ||
        (!o->n_sentinels && !o->n_cluster_nodes && !o->unix_socket && (!o->host || !o->port)) ||
        o->n_cluster_nodes > STORE_NODES_MAX)
        return -EINVAL;
    for (unsigned i = 0; i < o->n_cluster_nodes; i++) {
        if (!seed_ok(o->cluster_nodes[i]))
            return -EINVAL;
    }
    store_script_sha(STORE_SCRIPT_WINDOW);     /* the SHA-1s, once, before any worker */
    st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    st->o = *o;
    st->o.host = st->o.unix_socket = st->o.username = st->o.password = st->o.prefix = NULL;
    st->o.sentinels = NULL;
    st->o.master_name = st->o.sentinel_password = NULL;
    st->o.cluster_nodes = NULL;
    st->o.n_cluster_nodes = 0;
    pthread_mutex_init(&st->nodes_lock, NULL);
    r = dup_opt(o->host, &st->o.host);
    if (r >= 0)
        r = dup_opt(o->unix_socket, &st->o.unix_socket);
    if (r >= 0)
        r = dup_opt(o->username, &st->o.username);
    if (r >= 0)
        r = dup_opt(o->password, &st->o.password);
    if (r >= 0)
        r = dup_opt(o->prefix ? o->prefix : "", &st->o.prefix);
    if (r >= 0 && o->n_cluster_nodes) {
        const char **seeds = calloc(o->n_cluster_nodes, sizeof(*seeds));

        r = seeds ? 0 : -ENOMEM;
        st->o.cluster_nodes = seeds;
        for (unsigned i = 0; r >= 0 && i < o->n_cluster_nodes; i++) {
            r = dup_opt(o->cluster_nodes[i], &seeds[i]);
            if (r >= 0)
                st->o.n_cluster_nodes = i + 1;
        }
    }
    if (r >= 0 && o->n_sentinels) {
        struct sentinel_opts so = {
            .addrs = o->sentinels, .n_addrs = o->n_sentinels, .master_name = o->master_name,
            .password = o->sentinel_password, .timeout_ms = o->timeout_ms,
        };

        r = sentinel_new(&so, &st->sentinel);
    }
    if (r >= 0)
        r = node_name(st, o);
    if (r < 0) {
        store_free(st);
        return r;
    }
    *ret = st;
    return 0;
}

void store_want(struct store *st)
{
    __atomic_store_n(&st->wanted, 1, __ATOMIC_RELEASE);
}

bool store_wanted(const struct store *st)
{
    return __atomic_load_n(&st->wanted, __ATOMIC_ACQUIRE) != 0;
}

bool store_breaker_open(const struct store *st)
{
    uint64_t n;

    if (!st->o.n_cluster_nodes)
        return store_breaker_is_open(&st->single);
    n = __atomic_load_n(&st->n_nodes, __ATOMIC_ACQUIRE);
    for (uint64_t i = 0; i < n; i++) {
        if (!store_breaker_is_open(&st->nodes[i]))
            return false;
    }
    return n > 0;
}

uint64_t store_deadline(const struct store *st, uint64_t now_ms)
{
    return now_ms + st->o.timeout_ms;
}

unsigned store_timeout_ms(const struct store *st)
{
    return st->o.timeout_ms;
}

void store_stats(const struct store *st, struct store_stats *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->wanted = store_wanted(st);
    ret->breaker_open = store_breaker_open(st);
    ret->conns_up = (unsigned)ld(&st->conns_up);
    ret->requests = ld(&st->requests);
    ret->errors = ld(&st->errors);
    ret->timeouts = ld(&st->timeouts);
    ret->trips = ld(&st->trips);
    ret->noscript = ld(&st->noscript);
    ret->redirects = ld(&st->redirects);
    if (st->o.n_cluster_nodes) {
        uint64_t n = __atomic_load_n(&st->n_nodes, __ATOMIC_ACQUIRE);

        ret->nodes_known = (unsigned)n;
        for (uint64_t i = 0; i < n; i++)
            ret->nodes_up += !store_breaker_is_open(&st->nodes[i]);
    }
    if (ret->breaker_open && !st->o.n_cluster_nodes) {
        uint64_t now = clock_now_ms(), opened = ld(&st->single.opened_ms);

        ret->down_ms = now > opened ? now - opened : 0;
    }
}

const char *store_address(const struct store *st, char *buf, size_t size)
{
    char master[SENTINEL_HOST_MAX + 256];
    const char *name;
    char *at;

    if (st->sentinel) {
        /* sentinel_describe(): "master NAME" or "master NAME at HOST:PORT". */
        sentinel_describe(st->sentinel, master, sizeof(master));
        name = strncmp(master, "master ", 7) == 0 ? master + 7 : master;
        at = strstr(name, " at ");
        if (at) {
            *at = '\0';
            snprintf(buf, size, "sentinel:%s@%s", name, at + 4);
        } else {
            snprintf(buf, size, "sentinel:%s", name);
        }
    } else {
        store_where(st, buf, size);
    }
    for (char *p = buf; *p; p++) {
        if (*p == ' ' || *p == '"' || (unsigned char)*p < 0x20)
            *p = '_';
    }
    return buf;
}

/* ---- keys ------------------------------------------------------------------------- */

const char *store_key_prefix(const struct store *st)
{
    return st->o.prefix;
}

size_t store_key_max(const struct store *st, size_t actor_len)
{
    /* prefix "divvy:{" id ":" actor*3 "}" */
    return strlen(st->o.prefix) + 7 + 2 * 64 + 1 + 3 * actor_len + 1;
}

/* Appends @s (@len bytes) to @buf at *@pos with ':', '{', '}' and '%'
 * escaped, leaving room for one more byte; -ENOBUFS. */
static int key_escape(const char *s, size_t len, char *buf, size_t size, size_t *pos)
{
    static const char hex[] = "0123456789ABCDEF";

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == ':' || c == '{' || c == '}' || c == '%') {
            if (*pos + 3 + 1 > size)
                return -ENOBUFS;
            buf[(*pos)++] = '%';
            buf[(*pos)++] = hex[c >> 4];
            buf[(*pos)++] = hex[c & 15];
        } else {
            if (*pos + 1 + 1 > size)
                return -ENOBUFS;
            buf[(*pos)++] = (char)c;
        }
    }
    return 0;
}

int store_key(const struct store *st, const char *rule_id, const char *actor, size_t actor_len,
              char *buf, size_t size)
{
    size_t pos = 0, plen = strlen(st->o.prefix), ilen = strlen(rule_id);

    if (plen + 7 + ilen + 1 + 1 > size)
        return -ENOBUFS;
    memcpy(buf, st->o.prefix, plen);
    pos = plen;
    memcpy(buf + pos, "divvy:{", 7);
    pos += 7;
    memcpy(buf + pos, rule_id, ilen);
    pos += ilen;
    buf[pos++] = ':';
    if (key_escape(actor, actor_len, buf, size, &pos) < 0)
        return -ENOBUFS;
    buf[pos++] = '}';
    return (int)pos;
}

int store_adhoc_key(const struct store *st, char kind, const char *name, size_t len,
                    const int64_t *params, size_t n, char *buf, size_t size)
{
    size_t pos, plen = strlen(st->o.prefix);
    int k;

    if (plen + 13 + 1 > size)
        return -ENOBUFS;
    memcpy(buf, st->o.prefix, plen);
    memcpy(buf + plen, "divvy:adhoc:{", 13);
    pos = plen + 13;
    if (key_escape(name, len, buf, size, &pos) < 0)
        return -ENOBUFS;
    k = snprintf(buf + pos, size - pos, "}:%c", kind);
    if (k < 0 || (size_t)k >= size - pos)
        return -ENOBUFS;
    pos += (size_t)k;
    for (size_t i = 0; i < n; i++) {
        k = snprintf(buf + pos, size - pos, ":%lld", (long long)params[i]);
        if (k < 0 || (size_t)k >= size - pos)
            return -ENOBUFS;
        pos += (size_t)k;
    }
    return (int)pos;
}

int store_key_pattern(const struct store *st, const char *rule_id, char *buf, size_t size)
{
    const char *parts[3] = { st->o.prefix, "divvy:{", rule_id };
    size_t pos = 0;

    for (int k = 0; k < 3 && parts[k]; k++) {
        for (const char *p = parts[k]; *p; p++) {
            /* Redis globs: *, ?, [ ] and \ are special; everything else is itself. */
            bool special = strchr("*?[]\\", *p) != NULL;

            if (pos + special + 1 + 2 > size)
                return -ENOBUFS;
            if (special)
                buf[pos++] = '\\';
            buf[pos++] = *p;
        }
        if (k == 2) {
            buf[pos++] = ':';
        }
    }
    buf[pos++] = '*';
    return (int)pos;
}

static int unhex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 :
           c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int store_key_actor(const struct store *st, const char *rule_id, const char *key,
                    size_t key_len, char *buf, size_t size)
{
    size_t plen = strlen(st->o.prefix), ilen = strlen(rule_id), pos = 0, i;

    if (key_len < plen + 7 + ilen + 2 || memcmp(key, st->o.prefix, plen) != 0 ||
        memcmp(key + plen, "divvy:{", 7) != 0 || memcmp(key + plen + 7, rule_id, ilen) != 0 ||
        key[plen + 7 + ilen] != ':' || key[key_len - 1] != '}')
        return -EINVAL;
    for (i = plen + 7 + ilen + 1; i < key_len - 1; i++) {
        char c = key[i];

        if (c == '%') {
            int hi = i + 2 < key_len - 1 ? unhex(key[i + 1]) : -1;
            int lo = hi >= 0 ? unhex(key[i + 2]) : -1;

            if (lo < 0)
                return -EINVAL;
            c = (char)(hi << 4 | lo);
            i += 2;
        }
        if (pos >= size)
            return -ENOBUFS;
        buf[pos++] = c;
    }
    return (int)pos;
}

/* ---- typed requests (store_script.h) -------------------------------------------------- */

int store_lease(struct store_conn *sc, const char *key, size_t key_len,
                const struct store_lease_args *a, uint64_t deadline_ms, store_cb *cb, void *arg)
{
    struct store_call call;

    store_script_lease(a, &call);
    return store_conn_send(sc, STORE_CMD_CALL, &call, key, key_len, deadline_ms, cb, arg);
}

int store_adhoc_tb(struct store_conn *sc, const char *key, size_t key_len,
                   const struct store_adhoc_tb_args *a, uint64_t deadline_ms, store_cb *cb,
                   void *arg)
{
    struct store_call call;

    store_script_adhoc_tb(a, &call);
    return store_conn_send(sc, STORE_CMD_CALL, &call, key, key_len, deadline_ms, cb, arg);
}

int store_adhoc_gcra(struct store_conn *sc, const char *key, size_t key_len,
                     const struct store_adhoc_gcra_args *a, uint64_t deadline_ms, store_cb *cb,
                     void *arg)
{
    struct store_call call;

    store_script_adhoc_gcra(a, &call);
    return store_conn_send(sc, STORE_CMD_CALL, &call, key, key_len, deadline_ms, cb, arg);
}

int store_verdict(struct store_conn *sc, const char *key, size_t key_len,
                  const struct store_verdict_args *a, uint64_t deadline_ms, store_cb *cb,
                  void *arg)
{
    struct store_call call;

    store_script_verdict(a, &call);
    return store_conn_send(sc, STORE_CMD_CALL, &call, key, key_len, deadline_ms, cb, arg);
}

int store_verdicts(struct store_conn *sc, const char *key, size_t key_len,
                   const struct store_verdict_args *a, const struct store_items *items,
                   uint64_t deadline_ms, store_cb *cb, void *arg)
{
    struct store_call call;

    if (!items->n)
        return -EINVAL;
    store_script_verdicts(a, items, &call);
    return store_conn_send(sc, STORE_CMD_CALL, &call, key, key_len, deadline_ms, cb, arg);
}

int store_del(struct store_conn *sc, const char *key, size_t key_len, uint64_t deadline_ms,
              store_cb *cb, void *arg)
{
    return store_conn_send(sc, STORE_CMD_DEL, NULL, key, key_len, deadline_ms, cb, arg);
}

int store_scan(struct store_conn *sc, const char *pattern, size_t pattern_len, uint64_t cursor,
               unsigned count, uint64_t deadline_ms, store_cb *cb, void *arg)
{
    struct store_call args = { .argc = 2 };

    snprintf(args.argv[0], sizeof(args.argv[0]), "%llu", (unsigned long long)cursor);
    snprintf(args.argv[1], sizeof(args.argv[1]), "%u", count ? count : 1);
    return store_conn_send(sc, STORE_CMD_SCAN, &args, pattern, pattern_len, deadline_ms, cb, arg);
}
