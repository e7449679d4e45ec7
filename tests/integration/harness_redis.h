/* SPDX-License-Identifier: MIT */
/*
 * harness_redis: what the Redis integration tests (test_redis_*.c,
 * test_fault_redis.c) share (harness_redis.c): a real redis-server started in
 * a mkdtemp() directory on a Unix socket only (`--port 0 --unixsocket
 * DIR/redis.sock --save '' --appendonly no`), refused unless its database is
 * empty, stopped (or killed, paused, restarted) by PID; a synchronous
 * hiredis connection for checks; and divvyd configs pointing at it.  For
 * Sentinel (test_redis_sentinel.c) a server may also listen on a free
 * 127.0.0.1 port (Sentinel watches servers over TCP only), be a replica of
 * another, or be a sentinel (`redis-server DIR/sentinel.conf --sentinel`,
 * its config written here); a port somebody took meanwhile is retried with
 * another.  Every server is kept in a registry so redis_teardown() (a
 * cmocka teardown, which also runs harness_teardown()) and an atexit()
 * handler stop it even when an assertion failed, and PR_SET_PDEATHSIG kills
 * it if the test binary dies outright.  For Redis Cluster
 * (test_redis_cluster.c; harness_redis_cluster.c) several such servers are
 * joined into one cluster.  Main thread only.
 */
#ifndef DIVVY_HARNESS_REDIS_H
#define DIVVY_HARNESS_REDIS_H

#include <stdbool.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "harness.h"

#define REDIS_MAX       8       /* servers one test binary may run at once */
#define REDIS_CLUSTER_MAX   4   /* masters (and replicas) of one cluster */

/* How a server is started (redis_start_ex()); zero: Unix socket only. */
struct redis_start_opts {
    bool tcp;                   /* also on a free 127.0.0.1 port */
    int replicaof;              /* a replica of 127.0.0.1:replicaof (implies tcp) */
    /* A sentinel (implies tcp): these lines end its config file, e.g.
     * "sentinel monitor mymaster 127.0.0.1 6379 1\n". */
    const char *sentinel_conf;
    const char *password;       /* requirepass, and AUTH in redis_cli() */
    /* A Redis Cluster node (implies tcp): cluster-enabled, node timeout
     * 500 ms, cluster-require-full-coverage no (a dead master's slots fail,
     * the others go on); joined by redis_cluster_start(). */
    bool cluster;
};

struct redis_srv {
    pid_t pid;                  /* 0 when not running */
    bool stopped;               /* SIGSTOPped */
    int port;                   /* 127.0.0.1 TCP port, 0: none */
    struct redis_start_opts o;  /* strings copied below */
    char sentinel_conf[1024];
    char password[64];
    char dir[HARNESS_PATH];
    char sock[HARNESS_PATH + 16];
    char log[HARNESS_PATH + 16];
    char conf[HARNESS_PATH + 16];   /* a sentinel's config file */
};

/* ---- servers ----------------------------------------------------------------- */

/* Starts a fresh server as @o says (NULL: Unix socket only) in *@ret, owned
 * by the registry until redis_stop(); refuses (-ENOTEMPTY) a database that
 * holds keys.  A server that fails to start has its log copied to stderr. */
int redis_start_ex(const struct redis_start_opts *o, struct redis_srv **ret);
/* redis_start_ex(NULL, @ret). */
int redis_start(struct redis_srv **ret);
/* Starts the server again (after redis_kill()) on the same socket; -EBUSY
 * while it runs. */
int redis_restart(struct redis_srv *r);
/* SIGKILL (no goodbye, like a crash) and reap; the directory stays. */
void redis_kill(struct redis_srv *r);
/* SIGSTOP (@pause) or SIGCONT. */
void redis_pause(struct redis_srv *r, bool pause);
/* SIGTERM (SIGCONT first), SIGKILL after 5 s; removes the directory and
 * frees the slot.  NULL-safe. */
void redis_stop(struct redis_srv *r);
/* redis_stop() of every server still in the registry. */
void redis_stop_all(void);
/* A cmocka teardown: redis_stop_all(), then harness_teardown(). */
int redis_teardown(void **state);

/* 1 when the server's log contains @needle, 0 when not. */
int redis_log_contains(const struct redis_srv *r, const char *needle);
/* Copies the server's log to stderr (after a failed start). */
void redis_dump_log(const struct redis_srv *r);

/* ---- checks ------------------------------------------------------------------ */

/* A synchronous connection for checks (AUTH done when the server has a
 * password), or NULL; the caller redisFree()s it. */
redisContext *redis_cli(const struct redis_srv *r);
/* Runs a command (hiredis format); its integer reply, or LLONG_MIN on any
 * failure. */
long long redis_int(const struct redis_srv *r, const char *fmt, ...);
/* Polls divvyd's STATS on @c until redis_state is @want ("up", "down",
 * "unused"); fails the test after 10 s. */
void redis_wait_state(struct harness_conn *c, const char *want);

/* Runs a command (hiredis format) on @r; the reply (freeReplyObject()) or NULL. */
redisReply *redis_cmd(const struct redis_srv *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- Redis Cluster (harness_redis_cluster.c) ----------------------------------- */

struct redis_cluster {
    struct redis_srv *masters[REDIS_CLUSTER_MAX];
    struct redis_srv *replicas[REDIS_CLUSTER_MAX];  /* replicas[i] of masters[i], or NULL */
    int n_masters;
};

/* The replica @r's link to its master is up (ROLE says connected). */
bool redis_replica_synced(const struct redis_srv *r);

/*
 * Starts @n_masters cluster nodes and a replica for each of the first
 * @n_replicas, gives master i the slots [i * 16384 / n, (i + 1) * 16384 / n)
 * (CLUSTER ADDSLOTSRANGE), joins them (CLUSTER MEET, REPLICATE) and waits
 * until every node says cluster_state:ok and knows them all, and each
 * replica is in sync.  All belong to the registry.  -ETIMEDOUT, -EMFILE...
 */
int redis_cluster_start(int n_masters, int n_replicas, struct redis_cluster *ret);
/* The first slot of master @i of @n. */
unsigned redis_cluster_first_slot(int i, int n);
/* Which of @c's masters serves @slot (by the ranges given at start), -1. */
int redis_cluster_master_of(const struct redis_cluster *c, unsigned slot);
/* @r's CLUSTER MYID into @buf (41 bytes), or "". */
const char *redis_cluster_id(const struct redis_srv *r, char *buf, size_t size);
/* Polls until every running node of @c says cluster_state:ok and knows
 * @n_known nodes; false after @ms. */
bool redis_cluster_wait_ok(const struct redis_cluster *c, int n_known, int ms);
/* A redis { cluster_nodes = [ ... ]; } line naming @c's masters. */
char *redis_cluster_config(const struct redis_cluster *c, const char *mode, const char *on_error,
                           unsigned timeout_ms, const char *rules);

/* ---- divvyd configs ---------------------------------------------------------- */

/* A divvy.conf (malloc'd, or NULL): store { mode; on_redis_error;
 * @extra_store }, redis { this server, @timeout_ms }, then @rules (the text
 * inside rules = ( ... );). */
char *redis_config(const struct redis_srv *r, const char *mode, const char *on_error,
                   unsigned timeout_ms, const char *extra_store, const char *rules);
/* Starts divvyd on @config_text with @workers workers; fails the test if it
 * does not start. */
struct harness_daemon *redis_divvyd(const char *config_text, unsigned workers);
/* STATS @name of @d over a fresh connection; fails the test when absent. */
long long redis_divvyd_stat(struct harness_daemon *d, const char *name);
/* Polls redis_divvyd_stat() until @name is @want; fails the test after @ms. */
void redis_divvyd_wait_stat(struct harness_daemon *d, const char *name, long long want, int ms);
/* Stops @d with SIGTERM and frees it; fails the test (with its log) unless
 * it exits 0 (under ASan: no leak, no use after free at shutdown). */
void redis_divvyd_stop(struct harness_daemon *d);
/* How many lines of @d's log contain @needle. */
int redis_divvyd_log_count(struct harness_daemon *d, const char *needle);

#endif
