/* SPDX-License-Identifier: MIT */
/*
 * harness_redis_cluster: a real Redis Cluster for the integration tests
 * (see harness_redis.h): N cluster-enabled redis-servers from the harness
 * registry (stopped by PID like any other), joined the quick way, without
 * redis-cli: each master takes its range of slots (CLUSTER ADDSLOTSRANGE)
 * and its own config epoch, every node meets the first, replicas follow
 * their master (CLUSTER REPLICATE), and the test waits for every node to
 * say cluster_state:ok.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness_redis.h"

#define CLUSTER_JOIN_MS 20000

unsigned redis_cluster_first_slot(int i, int n)
{
    return (unsigned)(i * 16384 / n);
}

int redis_cluster_master_of(const struct redis_cluster *c, unsigned slot)
{
    for (int i = 0; i < c->n_masters; i++) {
        if (slot >= redis_cluster_first_slot(i, c->n_masters) &&
            slot < redis_cluster_first_slot(i + 1, c->n_masters))
            return i;
    }
    return -1;
}

const char *redis_cluster_id(const struct redis_srv *r, char *buf, size_t size)
{
    redisReply *rep = redis_cmd(r, "CLUSTER MYID");

    snprintf(buf, size, "%s", rep && rep->type == REDIS_REPLY_STRING ? rep->str : "");
    if (rep)
        freeReplyObject(rep);
    return buf;
}

/* @r's CLUSTER INFO says cluster_state:ok and cluster_known_nodes:@n. */
static bool node_ok(const struct redis_srv *r, int n)
{
    redisReply *rep = redis_cmd(r, "CLUSTER INFO");
    char known[48];
    bool ok;

    snprintf(known, sizeof(known), "cluster_known_nodes:%d\r", n);
    ok = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "cluster_state:ok") &&
         strstr(rep->str, known);
    if (rep)
        freeReplyObject(rep);
    return ok;
}

bool redis_cluster_wait_ok(const struct redis_cluster *c, int n_known, int ms)
{
    uint64_t end = harness_now_ms() + (uint64_t)ms;

    for (;;) {
        bool ok = true;

        for (int i = 0; i < c->n_masters && ok; i++) {
            ok = (c->masters[i]->pid <= 0 || node_ok(c->masters[i], n_known)) &&
                 (!c->replicas[i] || c->replicas[i]->pid <= 0 ||
                  node_ok(c->replicas[i], n_known));
        }
        if (ok)
            return true;
        if (harness_now_ms() > end)
            return false;
        harness_pause_ms(50);
    }
}

/* True when a status reply says OK. */
static bool cmd_ok(redisReply *rep)
{
    bool ok = rep && rep->type == REDIS_REPLY_STATUS;

    if (rep)
        freeReplyObject(rep);
    return ok;
}

bool redis_replica_synced(const struct redis_srv *r)
{
    redisReply *rep = redis_cmd(r, "ROLE");
    bool ok = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 4 &&
              rep->element[3]->type == REDIS_REPLY_STRING &&
              strcmp(rep->element[3]->str, "connected") == 0;

    if (rep)
        freeReplyObject(rep);
    return ok;
}

int redis_cluster_start(int n_masters, int n_replicas, struct redis_cluster *ret)
{
    struct redis_start_opts o = { .cluster = true };
    struct redis_cluster c = { .n_masters = n_masters };
    uint64_t end;
    int rc = 0, n_nodes = n_masters + n_replicas;

    if (n_masters < 1 || n_masters > REDIS_CLUSTER_MAX || n_replicas < 0 ||
        n_replicas > n_masters)
        return -EINVAL;
    for (int i = 0; i < n_masters && rc >= 0; i++)
        rc = redis_start_ex(&o, &c.masters[i]);
    for (int i = 0; i < n_replicas && rc >= 0; i++)
        rc = redis_start_ex(&o, &c.replicas[i]);
    for (int i = 0; i < n_masters && rc >= 0; i++) {
        if (!cmd_ok(redis_cmd(c.masters[i], "CLUSTER ADDSLOTSRANGE %u %u",
                              redis_cluster_first_slot(i, n_masters),
                              redis_cluster_first_slot(i + 1, n_masters) - 1)) ||
            !cmd_ok(redis_cmd(c.masters[i], "CLUSTER SET-CONFIG-EPOCH %d", i + 1)))
            rc = -EPROTO;
    }
    for (int i = 1; i < n_masters && rc >= 0; i++) {
        if (!cmd_ok(redis_cmd(c.masters[i], "CLUSTER MEET 127.0.0.1 %d", c.masters[0]->port)))
            rc = -EPROTO;
    }
    for (int i = 0; i < n_replicas && rc >= 0; i++) {
        if (!cmd_ok(redis_cmd(c.replicas[i], "CLUSTER MEET 127.0.0.1 %d", c.masters[0]->port)))
            rc = -EPROTO;
    }
    if (rc >= 0 && !redis_cluster_wait_ok(&c, n_nodes, CLUSTER_JOIN_MS))
        rc = -ETIMEDOUT;
    end = harness_now_ms() + CLUSTER_JOIN_MS;
    for (int i = 0; i < n_replicas && rc >= 0; i++) {
        char id[64];

        redis_cluster_id(c.masters[i], id, sizeof(id));
        while (rc >= 0 && !cmd_ok(redis_cmd(c.replicas[i], "CLUSTER REPLICATE %s", id))) {
            if (harness_now_ms() > end)
                rc = -ETIMEDOUT;
            harness_pause_ms(50);
        }
        while (rc >= 0 && !redis_replica_synced(c.replicas[i])) {
            if (harness_now_ms() > end)
                rc = -ETIMEDOUT;
            harness_pause_ms(50);
        }
    }
    if (rc >= 0 && !redis_cluster_wait_ok(&c, n_nodes, CLUSTER_JOIN_MS))
        rc = -ETIMEDOUT;
    if (rc < 0) {
        fprintf(stderr, "the cluster did not form: %s\n", strerror(-rc));
        for (int i = 0; i < n_masters; i++) {
            if (c.masters[i])
                redis_dump_log(c.masters[i]);
        }
        return rc;
    }
    *ret = c;
    return 0;
}

char *redis_cluster_config(const struct redis_cluster *c, const char *mode, const char *on_error,
                           unsigned timeout_ms, const char *rules)
{
    char nodes[512] = "";
    size_t pos = 0;
    char *text = NULL;

    for (int i = 0; i < c->n_masters; i++)
        pos += (size_t)snprintf(nodes + pos, sizeof(nodes) - pos, "%s\"127.0.0.1:%d\"",
                                i ? ", " : "", c->masters[i]->port);
    if (asprintf(&text,
                 "store = { mode = \"%s\"; on_redis_error = \"%s\"; };\n"
                 "redis = { cluster_nodes = [ %s ]; timeout_ms = %u; };\n"
                 "rules = (\n%s\n);\n",
                 mode, on_error, nodes, timeout_ms, rules) < 0)
        return NULL;
    return text;
}
