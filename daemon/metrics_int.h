/* SPDX-License-Identifier: MIT */
/*
 * metrics_int: the counters as metrics' own modules see them.  metrics.c
 * owns them (the per-worker blocks, the label registry, the gauges) and sums
 * them; metrics_prom.c renders them as Prometheus text, metrics_http.c
 * serves it over HTTP; metrics_statsd.c sends them to statsd.  Concurrency as in metrics.c:
 * one writer per worker block, relaxed loads for readers.
 */
#ifndef DIVVY_METRICS_INT_H
#define DIVVY_METRICS_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "metrics.h"

#define CHUNK            64                         /* labels per counter chunk */
#define N_CHUNKS         (METRICS_LABELS_MAX / CHUNK)
#define LABEL_HASH       (2 * METRICS_LABELS_MAX)   /* open addressing, power of two */
#define N_BUCKETS        19
#define N_ERRORS         (PROTO_E_NO_COUNTER + 1)
#define N_SAMPLES        16                         /* statsd timer samples per worker */
#define DGRAM_MAX        1432                       /* statsd datagrams: statsd's advice for a LAN MTU */

struct MHD_Daemon;
struct sockaddr;

/* The endpoint's connections (metrics_http.c, docs/operations.md "Prometheus"). */
#define HTTP_CONN_MAX       64      /* kept at once; past it the greediest address's go */
#define HTTP_PER_ADDRESS    8       /* per IPv4 address or IPv6 /64; past it its own go */
#define HTTP_REQUEST_MS     5000    /* a complete request within this of connecting, or of
                                     * the last reply on the connection */

/* A client address as the endpoint counts it: IPv4 (a mapped one too), or an IPv6 /64. */
struct metrics_http_addr {
    int family;                         /* AF_INET, AF_INET6; 0: unknown */
    unsigned char bytes[8];             /* the address, or the /64; zero-padded */
};

/* Why the endpoint closed a connection. */
enum metrics_http_close {
    METRICS_HTTP_CLOSE_SLOW = 0,        /* no complete request within HTTP_REQUEST_MS */
    METRICS_HTTP_CLOSE_ADDRESS,         /* its address over HTTP_PER_ADDRESS */
    METRICS_HTTP_CLOSE_FULL,            /* over HTTP_CONN_MAX */
    METRICS_HTTP_N_CLOSE
};

/* One connection libmicrohttpd holds. */
struct metrics_http_conn {
    struct metrics_http_conn *prev, *next;  /* the account, in order of arrival */
    struct metrics_http_addr addr;
    int fd;                             /* libmicrohttpd's socket; -1: unknown */
    uint64_t since_ms;                  /* CLOCK_MONOTONIC: accepted, or its last reply sent */
    bool busy;                          /* its request is in, the reply not yet sent */
    bool closing;                       /* shut down by the account, not yet freed */
};

/* The account; libmicrohttpd's thread only. */
struct metrics_http_acct {
    struct metrics_http_conn *head, *tail;
    unsigned n;                         /* not closing */
    uint64_t closed[METRICS_HTTP_N_CLOSE];
};

struct metrics_worker {
    struct metrics *m;
    /* Rule index -> label slot for the rules of generation map_gen. */
    bool mapped;
    uint64_t map_gen;
    uint32_t *map;
    size_t map_n, map_cap;
    /* Counters, written by the owner only. */
    uint64_t *hits[N_CHUNKS];           /* CHUNK * METRICS_N_STATUS each; release-published */
    uint64_t buckets[N_BUCKETS + 1];    /* per bucket, not cumulative; the last is +Inf */
    uint64_t sum_ns;
    uint64_t errors[N_ERRORS];
    uint64_t denied[METRICS_N_DENY];
    uint64_t charged;                   /* metrics_charged(): accepted, not a request */
    uint64_t fallbacks[METRICS_N_FALLBACK]; /* metrics_redis_fallback() */
    uint64_t samples[N_SAMPLES];        /* the latest durations in nanoseconds, for statsd */
    uint64_t n_samples;
    uint64_t decisions[METRICS_N_PROTOCOL][2];  /* metrics_decision(): [0] accepted */
} __attribute__((aligned(64)));

/* One entry of the fast table's per-rule counts as metrics_fast_rules() last read it. */
struct metrics_fast {
    uint64_t id;                        /* its rule id; 0: free */
    bool named;                         /* slot is id's label slot */
    uint32_t slot;
    uint64_t tried_gen;                 /* the generation that did not know id */
    uint64_t n[TABLE_FAST_N];
};

/* One Redis node's breaker as reported (metrics_redis_breaker()). */
struct metrics_redis_node {
    char name[METRICS_REDIS_NODE_MAX];
    bool open;
    uint64_t opened, closed;            /* transitions to each state */
};

/* A copy of the Redis figures for a reader (metrics_redis_get()). */
struct metrics_redis {
    unsigned n_nodes;
    struct metrics_redis_node nodes[METRICS_REDIS_NODES];
    bool other;
    uint64_t other_opened;
    uint64_t fallbacks[METRICS_N_FALLBACK];
};

struct metrics {
    unsigned n_workers;
    struct metrics_worker *workers;
    pthread_mutex_t lock;               /* label writers, gauges */
    char *labels[METRICS_LABELS_MAX];
    size_t n_labels;                    /* release-published */
    uint16_t label_hash[LABEL_HASH];    /* slot + 1; 0 is empty */
    bool labels_full_logged;
    bool divvy_names;                   /* metrics_opts.divvy_names */
    bool privileged;                    /* metrics_opts.privileged */
    uint32_t hidden;                    /* !privileged: the label slot every privileged
                                         * rule counts in, never published; else 0 */
    struct metrics_gauges g;
    struct metrics_fast fast[TABLE_FAST_RULES];     /* under lock */
    bool have_fast;                     /* some entry is named */
    double start_time;
    /* Redis nodes (metrics_redis_breaker()), under lock. */
    struct metrics_redis_node redis_nodes[METRICS_REDIS_NODES];
    unsigned n_redis_nodes;
    uint64_t redis_other_opened;        /* trips of nodes past METRICS_REDIS_NODES */
    bool redis_other;                   /* some node was past it (logged once) */
    /* Prometheus endpoint (metrics_prom.c). */
    struct MHD_Daemon *mhd;
    char *path;
    int http_port;
    struct metrics_http_acct http;      /* its thread's */
    /* statsd (metrics_statsd.c): the main thread only. */
    int statsd_fd;
    char *statsd_host;
    char statsd_port[8];
    char *prefix;
    bool statsd_resolved;
    struct sockaddr_storage statsd_addr;
    socklen_t statsd_addrlen;
    unsigned interval_ms;
    uint64_t next_flush_ms, next_resolve_ms;
    uint64_t *sent_hits;                /* [slot * METRICS_N_STATUS + status] as last sent */
    uint64_t sent_status[METRICS_N_STATUS];
    uint64_t sent_errors[N_ERRORS];
    uint64_t sent_denied[METRICS_N_DENY];
    uint64_t sent_fallbacks[METRICS_N_FALLBACK];
    uint64_t sent_breaker[2];           /* transitions to open, to closed */
    uint64_t *sent_samples;             /* per worker */
    uint64_t sent_decisions[METRICS_N_PROTOCOL][2];
    uint64_t sent_adhoc[ADHOC_N_KINDS][2];
};

/* divvy_hit_duration_seconds' `le` values, and divvy's status names. */
extern const char *const metrics_bucket_le[N_BUCKETS];
extern const char *const metrics_status_name[METRICS_N_STATUS];

static inline uint64_t counter_get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

/* ---- metrics.c ------------------------------------------------------------------------ */

/* Records one hit of @w that took @d nanoseconds (histogram, sum, statsd
 * sample): metrics_hit_done() with the duration it measured.  @w's worker
 * only. */
void metrics_observe_ns(struct metrics_worker *w, uint64_t d);

/* Sums over the workers; any thread. */

/* Hits of label slot @slot (< metrics_labels_published()) under @status. */
uint64_t metrics_sum_hits(const struct metrics *m, size_t slot, unsigned status);

/* ERR replies with code @err (1 .. N_ERRORS - 1). */
uint64_t metrics_sum_errors(const struct metrics *m, unsigned err);

/* Accepted counts of rules that charged without deciding (metrics_charged()). */
uint64_t metrics_sum_charged(const struct metrics *m);

/* Denied hits with cause @cause (< METRICS_N_DENY). */
uint64_t metrics_sum_denied(const struct metrics *m, unsigned cause);

/* The Redis nodes and the fallbacks summed over the workers, into @ret
 * (large: allocate it); false when no node reported and no fallback was
 * counted (no Redis series yet). */
bool metrics_redis_get(struct metrics *m, struct metrics_redis *ret);

/* on_redis_error's names: "local", "open", "closed". */
extern const char *const metrics_fallback_name[METRICS_N_FALLBACK];

/* Decisions of front-end @proto, accepted (@allowed) or rejected. */
uint64_t metrics_sum_decisions(const struct metrics *m, unsigned proto, bool allowed);

/* Label slots whose string m->labels[] holds (acquire: safe to read them). */
size_t metrics_labels_published(const struct metrics *m);

/* The gauges of the last metrics_tick(). */
void metrics_gauges_get(struct metrics *m, struct metrics_gauges *ret);

/* The fast-path per-rule counts of the last metrics_fast_rules(), into
 * @ret[TABLE_FAST_RULES]; false when none is named yet. */
bool metrics_fast_get(struct metrics *m, struct metrics_fast *ret);

/* ---- metrics_prom.c ------------------------------------------------------------------- */

/* The whole exposition (text format 0.0.4) into *ret_buf (malloc'd, the
 * caller frees; *ret_len bytes).  Any thread.  -ENOMEM. */
int metrics_prom_render(struct metrics *m, char **ret_buf, size_t *ret_len);

/* ---- metrics_process.c: the process figures every Prometheus client exports ---------- */

struct metrics_process {
    double cpu_seconds;                 /* user + system */
    uint64_t resident_bytes, virtual_bytes;
    uint64_t open_fds, max_fds;         /* max_fds: RLIMIT_NOFILE's soft limit */
};

/* Reads /proc/self (stat, statm, fd) and RLIMIT_NOFILE; any thread.  -errno
 * when /proc/self cannot be read (no procfs). */
int metrics_process_read(struct metrics_process *ret);

/* process_* in the exposition (names of the Prometheus client libraries). */
void metrics_process_render(FILE *f, const struct metrics *m);

/* ---- metrics_http.c ------------------------------------------------------------------- */

/* Binds "tcp:HOST:PORT" (listener.h; "[::]" serves IPv4 too) and starts the
 * libmicrohttpd thread serving m->path; logs either way.  Main thread, from
 * metrics_new().  -EINVAL, -ENOMEM, listener_open()'s -errno. */
int metrics_http_start(struct metrics *m, const char *address);

/* Stops the endpoint (joins its thread, closes its socket, frees the
 * account).  Safe when none. */
void metrics_http_stop(struct metrics *m);

/* @sa (NULL: unknown) as the account counts addresses. */
void metrics_http_addr(const struct sockaddr *sa, struct metrics_http_addr *ret);

/* Adds @c (its addr, fd and since_ms set) to @a as the newest; takes it from
 * @a again (the caller frees it). */
void metrics_http_track(struct metrics_http_acct *a, struct metrics_http_conn *c);
void metrics_http_untrack(struct metrics_http_acct *a, struct metrics_http_conn *c);

/*
 * Settles @a for the newcomer @fresh (tracked) at @now (ms): shuts down every
 * other connection that waited more than HTTP_REQUEST_MS for a request, then
 * connections of @fresh's address beyond HTTP_PER_ADDRESS, then, while more
 * than HTTP_CONN_MAX remain, connections of the address that holds the most
 * (ties: the address of the oldest); each time one still waiting for its
 * request before one being answered, the oldest first.  Closed ones are
 * marked closing and counted in @a->closed; @fresh stays.
 */
void metrics_http_admit(struct metrics_http_acct *a, struct metrics_http_conn *fresh,
                        uint64_t now);

/* ---- metrics_statsd.c: the main thread ------------------------------------------------- */

/* statsd to @o->statsd_host:@o->statsd_port with @o->statsd_prefix: the
 * buffers, and a first resolution (a failure is logged and retried by
 * metrics_statsd_tick()).  -ENOMEM. */
int metrics_statsd_init(struct metrics *m, const struct metrics_opts *o);

/* Resolves again when due, and sends the deltas once the interval passed. */
void metrics_statsd_tick(struct metrics *m, uint64_t now_ms);

/* Sends the last deltas and closes; safe when statsd is off or half set up. */
void metrics_statsd_fini(struct metrics *m);

#endif
