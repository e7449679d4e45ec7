/* SPDX-License-Identifier: MIT */
/*
 * metrics: per-worker counters, the Prometheus text endpoint and statsd
 * output of divvyd (see metrics.h; the metric list is in docs/operations.md).
 *
 * Concurrency: a worker block is written by its worker only, with relaxed
 * atomic load+store pairs (one writer, so no read-modify-write is needed);
 * readers (the HTTP thread, the main thread) use relaxed loads and may see
 * a scrape that is a few hits old, never a torn value.  The label registry
 * is append-only: a label's string is written before the count that
 * publishes it (release/acquire), so readers need no lock; writers (a worker
 * mapping new rules, once per reload) take the mutex.  A worker's counter
 * chunk for labels 64k..64k+63 is allocated when a rule first maps there,
 * never on the hit itself, and published with a release store.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "addr.h"
#include "log.h"
#include "metrics.h"

#define CHUNK            64                         /* labels per counter chunk */
#define N_CHUNKS         (METRICS_LABELS_MAX / CHUNK)
#define LABEL_HASH       (2 * METRICS_LABELS_MAX)   /* open addressing, power of two */
#define N_BUCKETS        19
#define N_ERRORS         (PROTO_E_NO_COUNTER + 1)
#define N_SAMPLES        16                         /* statsd timer samples per worker */
#define DGRAM_MAX        1432                       /* statsd's advice for a LAN MTU */
#define HTTP_CONN_MAX    16
#define HTTP_TIMEOUT_S   10
#define RESOLVE_RETRY_MS 30000
#define CONTENT_TYPE     "text/plain; version=0.0.4; charset=utf-8"

_Static_assert((LABEL_HASH & (LABEL_HASH - 1)) == 0, "LABEL_HASH is a power of two");
_Static_assert(METRICS_LABELS_MAX % CHUNK == 0, "whole chunks");
_Static_assert(METRICS_LABELS_MAX < 65535, "label slots fit the uint16_t hash");

/* Upper bounds of divvy_hit_duration_seconds: microseconds for local hits,
 * milliseconds for Redis, and prom-client's defaults (divvy's) as a subset so
 * existing dashboards keep their `le` values. */
static const uint64_t bucket_ns[N_BUCKETS] = {
    10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
    25000000, 50000000, 100000000, 250000000, 500000000, 1000000000, 2500000000ull,
    5000000000ull, 10000000000ull,
};
static const char *const bucket_le[N_BUCKETS] = {
    "1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005",
    "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
};
static const char *const status_name[METRICS_N_STATUS] = {
    "accepted", "rejected", "canary-accepted", "canary-rejected",
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
    uint32_t samples[N_SAMPLES];        /* the latest durations in microseconds, for statsd */
    uint64_t n_samples;
} __attribute__((aligned(64)));

struct metrics {
    unsigned n_workers;
    struct metrics_worker *workers;
    pthread_mutex_t lock;               /* label writers, gauges */
    char *labels[METRICS_LABELS_MAX];
    size_t n_labels;                    /* release-published */
    uint16_t label_hash[LABEL_HASH];    /* slot + 1; 0 is empty */
    bool labels_full_logged;
    struct metrics_gauges g;
    double start_time;
    /* Redis hooks (atomics). */
    int redis_known, redis_up, breaker_open;
    uint64_t breaker_opened, breaker_closed;
    /* Prometheus endpoint. */
    struct MHD_Daemon *mhd;
    char *path;
    int http_port;
    /* statsd: the main thread only. */
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
    uint64_t *sent_samples;             /* per worker */
};

static struct log_ratelimit rl_http, rl_statsd;

static void counter_add(uint64_t *c, uint64_t n)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

static uint64_t counter_get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

/* ---- labels ------------------------------------------------------------------- */

static uint32_t label_hash(const char *s)
{
    uint32_t h = 2166136261u;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* Slot of @label, interned if new; slot 0 ("") when the registry is full. Under m->lock. */
static uint32_t label_slot_locked(struct metrics *m, const char *label)
{
    uint32_t h = label_hash(label) & (LABEL_HASH - 1), slot;
    char *copy;

    while (m->label_hash[h] != 0) {
        slot = m->label_hash[h] - 1u;
        if (strcmp(m->labels[slot], label) == 0)
            return slot;
        h = (h + 1) & (LABEL_HASH - 1);
    }
    if (m->n_labels == METRICS_LABELS_MAX) {
        if (!m->labels_full_logged)
            log_msg(LOG_WARNING, "metrics: more than %d rule labels; hits of new labels are "
                                 "counted with rule_label=\"\"", METRICS_LABELS_MAX);
        m->labels_full_logged = true;
        return 0;
    }
    copy = strdup(label);
    if (!copy)
        return 0;
    slot = (uint32_t)m->n_labels;
    m->labels[slot] = copy;
    m->label_hash[h] = (uint16_t)(slot + 1);
    __atomic_store_n(&m->n_labels, (size_t)slot + 1, __ATOMIC_RELEASE);
    return slot;
}

static uint64_t *chunk_get(const struct metrics_worker *w, size_t c)
{
    return __atomic_load_n(&w->hits[c], __ATOMIC_ACQUIRE);
}

/* Maps every rule of @rules to its label slot; runs once per worker and reload. */
static void map_rules(struct metrics_worker *w, const struct rules *rules, uint64_t generation)
{
    struct metrics *m = w->m;
    size_t n = rules ? rules_count(rules) : 0;
    struct rules_rule r;
    uint32_t slot;

    w->map_gen = generation;
    w->mapped = true;
    w->map_n = 0;
    if (n > w->map_cap) {
        uint32_t *grown = realloc(w->map, n * sizeof(*grown));

        if (!grown)
            return;             /* every hit counts as rule_label="" until the next reload */
        w->map = grown;
        w->map_cap = n;
    }
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < n; i++) {
        slot = 0;
        if (rules_get(rules, (uint32_t)i, &r) >= 0)
            slot = label_slot_locked(m, r.label);
        if (!w->hits[slot / CHUNK]) {
            uint64_t *c = calloc(CHUNK * METRICS_N_STATUS, sizeof(*c));

            if (c)
                __atomic_store_n(&w->hits[slot / CHUNK], c, __ATOMIC_RELEASE);
            else
                slot = 0;
        }
        w->map[i] = slot;
    }
    pthread_mutex_unlock(&m->lock);
    w->map_n = n;
}

/* ---- hit path ------------------------------------------------------------------ */

struct metrics_worker *metrics_worker(struct metrics *m, unsigned id)
{
    if (!m || id >= m->n_workers)
        return NULL;
    return &m->workers[id];
}

void metrics_hit(struct metrics_worker *w, const struct rules *rules, uint64_t generation,
                 uint32_t rule, enum metrics_status status)
{
    uint32_t slot = 0;

    if (!w || (unsigned)status >= METRICS_N_STATUS)
        return;
    if (!w->mapped || w->map_gen != generation)
        map_rules(w, rules, generation);
    if (rule < w->map_n)
        slot = w->map[rule];
    counter_add(&w->hits[slot / CHUNK][(slot % CHUNK) * METRICS_N_STATUS + status], 1);
}

uint64_t metrics_clock_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Records one hit that took @d nanoseconds. */
static void observe_ns(struct metrics_worker *w, uint64_t d)
{
    uint64_t us = d / 1000;
    size_t b = 0;

    /* Buckets are upper bounds, inclusive as Prometheus' `le` says. */
    while (b < N_BUCKETS && d > bucket_ns[b])
        b++;
    counter_add(&w->buckets[b], 1);
    counter_add(&w->sum_ns, d);
    __atomic_store_n(&w->samples[w->n_samples % N_SAMPLES],
                     (uint32_t)(us > UINT32_MAX ? UINT32_MAX : us), __ATOMIC_RELAXED);
    /* Release: a reader that sees the count sees the sample. */
    __atomic_store_n(&w->n_samples, w->n_samples + 1, __ATOMIC_RELEASE);
}

void metrics_hit_done(struct metrics_worker *w, uint64_t start_ns)
{
    uint64_t now = metrics_clock_ns();

    if (w)
        observe_ns(w, now > start_ns ? now - start_ns : 0);
}

void metrics_error(struct metrics_worker *w, enum proto_err err)
{
    if (!w || (unsigned)err >= N_ERRORS || err == PROTO_E_NONE)
        return;
    counter_add(&w->errors[err], 1);
}

/* ---- sums ------------------------------------------------------------------------ */

static uint64_t sum_hits(const struct metrics *m, size_t slot, unsigned status)
{
    uint64_t total = 0;

    for (unsigned i = 0; i < m->n_workers; i++) {
        const uint64_t *c = chunk_get(&m->workers[i], slot / CHUNK);

        if (c)
            total += counter_get(&c[(slot % CHUNK) * METRICS_N_STATUS + status]);
    }
    return total;
}

static uint64_t sum_errors(const struct metrics *m, unsigned err)
{
    uint64_t total = 0;

    for (unsigned i = 0; i < m->n_workers; i++)
        total += counter_get(&m->workers[i].errors[err]);
    return total;
}

static size_t labels_published(const struct metrics *m)
{
    return __atomic_load_n(&m->n_labels, __ATOMIC_ACQUIRE);
}

static void gauges_get(struct metrics *m, struct metrics_gauges *ret)
{
    pthread_mutex_lock(&m->lock);
    *ret = m->g;
    pthread_mutex_unlock(&m->lock);
}

/* ---- Prometheus text format --------------------------------------------------------- */

/* A label value with \, " and newline escaped as the exposition format wants. */
static void put_label_value(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fprintf(f, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}

static void put_head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_table(FILE *f, const struct metrics_gauges *g)
{
    put_head(f, "divvy_table_slots", "gauge", "Counter slots of each counter table.");
    fprintf(f, "divvy_table_slots{table=\"fast\"} %llu\n", (unsigned long long)g->fast.slots);
    fprintf(f, "divvy_table_slots{table=\"private\"} %llu\n", (unsigned long long)g->priv.slots);
    fprintf(f, "divvy_table_slots{table=\"privileged\"} %llu\n",
            (unsigned long long)g->privileged.slots);
    put_head(f, "divvy_table_live_slots", "gauge",
             "Slots holding a counter that has not expired (table fill).");
    fprintf(f, "divvy_table_live_slots{table=\"fast\"} %llu\n", (unsigned long long)g->fast.live);
    fprintf(f, "divvy_table_live_slots{table=\"private\"} %llu\n",
            (unsigned long long)g->priv.live);
    fprintf(f, "divvy_table_live_slots{table=\"privileged\"} %llu\n",
            (unsigned long long)g->privileged.live);
    put_head(f, "divvy_table_full_total", "counter",
             "Hits that needed a new counter and got none: no free slot (full) or the "
             "rule's max_actors reached, since the table was created.");
    fprintf(f, "divvy_table_full_total{table=\"fast\",reason=\"full\"} %llu\n",
            (unsigned long long)g->fast.full_events);
    fprintf(f, "divvy_table_full_total{table=\"fast\",reason=\"max_actors\"} %llu\n",
            (unsigned long long)g->fast.quota_events);
    fprintf(f, "divvy_table_full_total{table=\"private\",reason=\"full\"} %llu\n",
            (unsigned long long)g->priv.full_events);
    fprintf(f, "divvy_table_full_total{table=\"private\",reason=\"max_actors\"} %llu\n",
            (unsigned long long)g->priv.quota_events);
    fprintf(f, "divvy_table_full_total{table=\"privileged\",reason=\"full\"} %llu\n",
            (unsigned long long)g->privileged.full_events);
    fprintf(f, "divvy_table_full_total{table=\"privileged\",reason=\"max_actors\"} %llu\n",
            (unsigned long long)g->privileged.quota_events);
}

/* Admission (docs/daemon.md "Admission"). */
static void render_admit(FILE *f, const struct admit_stats *a)
{
    put_head(f, "divvy_connections", "gauge",
             "Open client connections by budget: tcp, unix, and the privileged reserve.");
    fprintf(f, "divvy_connections{budget=\"tcp\"} %llu\n", (unsigned long long)a->tcp_conns);
    fprintf(f, "divvy_connections{budget=\"unix\"} %llu\n", (unsigned long long)a->unix_conns);
    fprintf(f, "divvy_connections{budget=\"reserved\"} %llu\n",
            (unsigned long long)a->reserve_conns);
    put_head(f, "divvy_connections_refused_total", "counter",
             "Connections refused with ERR busy, by the server setting that was reached.");
    for (int i = 0; i < ADMIT_N_REFUSALS; i++)
        fprintf(f, "divvy_connections_refused_total{limit=\"%s\"} %llu\n",
                admit_refusal_name((enum admit_refusal)i), (unsigned long long)a->refused[i]);
    put_head(f, "divvy_connections_closed_total", "counter",
             "Connections divvyd closed: idle or slow-request timeout, output that made no "
             "progress, or over max_output_bytes.");
    for (int i = 0; i < ADMIT_N_CLOSES; i++)
        fprintf(f, "divvy_connections_closed_total{reason=\"%s\"} %llu\n",
                admit_close_name((enum admit_close)i), (unsigned long long)a->closed[i]);
    put_head(f, "divvy_output_buffered_bytes", "gauge",
             "Reply bytes buffered across all connections, as the output budget counts them.");
    fprintf(f, "divvy_output_buffered_bytes %llu\n", (unsigned long long)a->output_bytes);
    put_head(f, "divvy_output_budget_bytes", "gauge", "server.output_budget_bytes.");
    fprintf(f, "divvy_output_budget_bytes %llu\n", (unsigned long long)a->output_budget);
    put_head(f, "divvy_output_paused_total", "counter",
             "Times a connection over its share of a spent output budget stopped being read.");
    fprintf(f, "divvy_output_paused_total %llu\n", (unsigned long long)a->output_paused);
}

static void render_redis(FILE *f, struct metrics *m)
{
    if (!__atomic_load_n(&m->redis_known, __ATOMIC_RELAXED))
        return;
    put_head(f, "divvy_redis_up", "gauge", "1 while divvyd is connected to Redis.");
    fprintf(f, "divvy_redis_up %d\n", __atomic_load_n(&m->redis_up, __ATOMIC_RELAXED));
    put_head(f, "divvy_redis_breaker_open", "gauge",
             "1 while the Redis circuit breaker is open (hits do not wait for Redis).");
    fprintf(f, "divvy_redis_breaker_open %d\n",
            __atomic_load_n(&m->breaker_open, __ATOMIC_RELAXED));
    put_head(f, "divvy_redis_breaker_transitions_total", "counter",
             "Circuit breaker state changes, by the state entered.");
    fprintf(f, "divvy_redis_breaker_transitions_total{to=\"open\"} %llu\n",
            (unsigned long long)__atomic_load_n(&m->breaker_opened, __ATOMIC_RELAXED));
    fprintf(f, "divvy_redis_breaker_transitions_total{to=\"closed\"} %llu\n",
            (unsigned long long)__atomic_load_n(&m->breaker_closed, __ATOMIC_RELAXED));
}

/* The whole exposition into a malloc'd buffer. */
static int render(struct metrics *m, char **ret_buf, size_t *ret_len)
{
    struct metrics_gauges g;
    uint64_t buckets[N_BUCKETS + 1] = { 0 }, sum_ns = 0, cum = 0;
    size_t n_labels = labels_published(m), len = 0;
    char *buf = NULL;
    FILE *f;

    gauges_get(m, &g);
    f = open_memstream(&buf, &len);
    if (!f)
        return -ENOMEM;

    put_head(f, "divvy_hits_total", "counter", "Counter of total HITs to Divvy.");
    for (size_t slot = 0; slot < n_labels; slot++)
        for (unsigned s = 0; s < METRICS_N_STATUS; s++) {
            fprintf(f, "divvy_hits_total{status=\"%s\",rule_label=\"", status_name[s]);
            put_label_value(f, m->labels[slot]);
            fprintf(f, "\"} %llu\n", (unsigned long long)sum_hits(m, slot, s));
        }

    for (unsigned i = 0; i < m->n_workers; i++) {
        const struct metrics_worker *w = &m->workers[i];

        for (size_t b = 0; b <= N_BUCKETS; b++)
            buckets[b] += counter_get(&w->buckets[b]);
        sum_ns += counter_get(&w->sum_ns);
    }
    put_head(f, "divvy_hit_duration_seconds", "histogram",
             "Histogram of Divvy processing time for HITs.");
    for (size_t b = 0; b < N_BUCKETS; b++) {
        cum += buckets[b];
        fprintf(f, "divvy_hit_duration_seconds_bucket{le=\"%s\"} %llu\n", bucket_le[b],
                (unsigned long long)cum);
    }
    /* _count is the +Inf bucket, so the two always agree within one scrape. */
    cum += buckets[N_BUCKETS];
    fprintf(f, "divvy_hit_duration_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    fprintf(f, "divvy_hit_duration_seconds_sum %.9f\n", (double)sum_ns / 1e9);
    fprintf(f, "divvy_hit_duration_seconds_count %llu\n", (unsigned long long)cum);

    /* divvy's name, kept for its dashboards although it is a gauge. */
    put_head(f, "divvy_tcp_connections_total", "gauge",
             "Total number of open TCP connections to Divvy (divvyd: TCP and Unix socket).");
    fprintf(f, "divvy_tcp_connections_total %llu\n", (unsigned long long)g.connections);

    put_head(f, "divvy_errors_total", "counter", "Counter of total Divvy errors.");
    for (unsigned e = 1; e < N_ERRORS; e++)
        fprintf(f, "divvy_errors_total{code=\"%s\"} %llu\n", proto_err_code((enum proto_err)e),
                (unsigned long long)sum_errors(m, e));

    render_table(f, &g);
    if (g.have_admit)
        render_admit(f, &g.admit);
    if (g.have_fast_path_hits) {
        put_head(f, "divvy_fast_path_hits_total", "counter",
                 "Hits decided by clients in shared memory, counted in the fast-path table.");
        fprintf(f, "divvy_fast_path_hits_total %llu\n", (unsigned long long)g.fast_path_hits);
    }
    put_head(f, "divvy_reloads_total", "counter", "Config reloads, by result.");
    fprintf(f, "divvy_reloads_total{result=\"ok\"} %llu\n", (unsigned long long)g.reloads_ok);
    fprintf(f, "divvy_reloads_total{result=\"rejected\"} %llu\n",
            (unsigned long long)g.reloads_rejected);
    put_head(f, "divvy_config_generation", "gauge", "Generation of the rules in force.");
    fprintf(f, "divvy_config_generation %llu\n", (unsigned long long)g.config_generation);
    put_head(f, "divvy_rules", "gauge", "Rules in force.");
    fprintf(f, "divvy_rules %llu\n", (unsigned long long)g.rules);
    render_redis(f, m);
    put_head(f, "divvy_build_info", "gauge", "divvyd's version, as a label; always 1.");
    fprintf(f, "divvy_build_info{version=\"%s\"} 1\n", DIVVY_VERSION);
    put_head(f, "process_start_time_seconds", "gauge",
             "Start time of the process since the Unix epoch in seconds.");
    fprintf(f, "process_start_time_seconds %.3f\n", m->start_time);

    if (fclose(f) != 0 || !buf) {
        free(buf);
        return -ENOMEM;
    }
    *ret_buf = buf;
    *ret_len = len;
    return 0;
}

/* ---- HTTP endpoint ---------------------------------------------------------------- */

static enum MHD_Result on_http(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload_data,
                               size_t *upload_data_size, void **con_cls)
{
    static char not_found[] = "not found\n", not_allowed[] = "method not allowed\n",
                failed[] = "out of memory\n";
    struct metrics *m = cls;
    struct MHD_Response *resp;
    unsigned status = MHD_HTTP_OK;
    char *body = NULL;
    size_t len = 0;
    enum MHD_Result ret;

    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
        resp = MHD_create_response_from_buffer(strlen(not_allowed), not_allowed,
                                               MHD_RESPMEM_PERSISTENT);
        if (resp)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    } else if (strcmp(url, m->path) != 0) {
        status = MHD_HTTP_NOT_FOUND;
        resp = MHD_create_response_from_buffer(strlen(not_found), not_found,
                                               MHD_RESPMEM_PERSISTENT);
    } else if (render(m, &body, &len) < 0) {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        resp = MHD_create_response_from_buffer(strlen(failed), failed, MHD_RESPMEM_PERSISTENT);
    } else {
        resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        if (resp)
            body = NULL;        /* the response frees it */
        else
            free(body);
    }
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            status == MHD_HTTP_OK ? CONTENT_TYPE : "text/plain; charset=utf-8");
    ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    size_t len;

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    len = strlen(msg);
    while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == '\r'))
        msg[--len] = '\0';
    log_ratelimited(&rl_http, LOG_WARNING, "metrics endpoint: %s", msg);
}

/* Binds and listens on "tcp:HOST:PORT"; *ret_port is the port bound. */
static int listen_tcp(const char *address, int *ret_fd, int *ret_port)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char buf[300];
    const char *host, *port;
    int fd = -1, one = 1, zero = 0, r;

    if (strncmp(address, "tcp:", 4) != 0)
        return -EINVAL;
    r = addr_split_host_port(address + 4, buf, sizeof(buf), &host, &port);
    if (r < 0)
        return r;
    r = getaddrinfo(*host ? host : NULL, port, &hints, &ai);
    if (r != 0)
        return r == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        r = -errno;
        goto out;
    }
    /* "[::]" serves IPv4 too, as divvy's node server does. */
    if (ai->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        r = -errno;
        goto out;
    }
    *ret_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    *ret_fd = fd;
    fd = -1;
    r = 0;
out:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return r;
}

static int http_start(struct metrics *m, const char *address)
{
    sigset_t all, old;
    int fd = -1, r;

    r = listen_tcp(address, &fd, &m->http_port);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "metrics: cannot listen on %s: %m", address);
        return r;
    }
    /* Its thread must not take the signals the main loop handles. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    m->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG,
                              0, NULL, NULL, on_http, m,
                              MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                              MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_CONN_MAX,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S,
                              MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!m->mhd) {
        close(fd);
        log_msg(LOG_ERR, "metrics: cannot start the HTTP endpoint on %s", address);
        return -ENOMEM;
    }
    log_msg(LOG_NOTICE, "metrics: Prometheus endpoint on %s (port %d), path %s", address,
            m->http_port, m->path);
    return 0;
}

int metrics_http_port(const struct metrics *m)
{
    return m && m->mhd ? m->http_port : 0;
}

/* ---- statsd ------------------------------------------------------------------------- */

static void statsd_resolve(struct metrics *m, uint64_t now_ms)
{
    struct addrinfo hints = { .ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    int r;

    m->next_resolve_ms = now_ms + RESOLVE_RETRY_MS;
    r = getaddrinfo(m->statsd_host, m->statsd_port, &hints, &ai);
    if (r != 0) {
        log_ratelimited(&rl_statsd, LOG_WARNING, "statsd: cannot resolve %s: %s; retrying",
                        m->statsd_host, r == EAI_SYSTEM ? strerror(errno) : gai_strerror(r));
        return;
    }
    if (m->statsd_fd >= 0)
        close(m->statsd_fd);
    m->statsd_fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (m->statsd_fd < 0) {
        log_ratelimited(&rl_statsd, LOG_WARNING, "statsd: socket: %m");
    } else {
        memcpy(&m->statsd_addr, ai->ai_addr, ai->ai_addrlen);
        m->statsd_addrlen = ai->ai_addrlen;
        m->statsd_resolved = true;
        log_msg(LOG_NOTICE, "metrics: statsd to %s:%s, prefix \"%s\"", m->statsd_host,
                m->statsd_port, m->prefix);
    }
    freeaddrinfo(ai);
}

struct dgram {
    struct metrics *m;
    char buf[DGRAM_MAX + 1];
    size_t len;
};

static void dgram_send(struct dgram *d)
{
    struct metrics *m = d->m;

    if (d->len == 0)
        return;
    /* UDP, fire and forget as in divvy; a full socket buffer drops this batch. */
    if (sendto(m->statsd_fd, d->buf, d->len, MSG_DONTWAIT | MSG_NOSIGNAL,
               (struct sockaddr *)&m->statsd_addr, m->statsd_addrlen) < 0)
        log_ratelimited(&rl_statsd, LOG_WARNING, "statsd: send to %s:%s: %m", m->statsd_host,
                        m->statsd_port);
    d->len = 0;
}

/* Appends one "<prefix><name>:<value>" line, sending first when it would not fit. */
static void dgram_put(struct dgram *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void dgram_put(struct dgram *d, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n;

    n = snprintf(line, sizeof(line), "%s", d->m->prefix);
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n <= 0 || (size_t)n >= sizeof(line))
        return;
    if (d->len > 0 && d->len + 1 + (size_t)n > DGRAM_MAX)
        dgram_send(d);
    if (d->len > 0)
        d->buf[d->len++] = '\n';
    memcpy(d->buf + d->len, line, (size_t)n);
    d->len += (size_t)n;
}

/* divvy's statsd metrics (its README, "Statistics"), as deltas since the last flush. */
static void statsd_flush(struct metrics *m)
{
    struct dgram *d;
    struct metrics_gauges g;
    size_t n_labels = labels_published(m);
    uint64_t total, status_total[METRICS_N_STATUS] = { 0 };

    d = malloc(sizeof(*d));
    if (!d)
        return;
    d->m = m;
    d->len = 0;
    gauges_get(m, &g);
    for (size_t slot = 0; slot < n_labels; slot++)
        for (unsigned s = 0; s < METRICS_N_STATUS; s++) {
            uint64_t *sent = &m->sent_hits[slot * METRICS_N_STATUS + s];

            total = sum_hits(m, slot, s);
            status_total[s] += total;
            /* hit.<status>.<label> only for rules with a label, as divvy does. */
            if (slot > 0 && total > *sent)
                dgram_put(d, "hit.%s.%s:%llu|c", status_name[s], m->labels[slot],
                          (unsigned long long)(total - *sent));
            *sent = total;
        }
    for (unsigned s = 0; s < METRICS_N_STATUS; s++) {
        if (status_total[s] > m->sent_status[s])
            dgram_put(d, "hit.%s:%llu|c", status_name[s],
                      (unsigned long long)(status_total[s] - m->sent_status[s]));
        m->sent_status[s] = status_total[s];
    }
    for (unsigned e = 1; e < N_ERRORS; e++) {
        total = sum_errors(m, e);
        if (total > m->sent_errors[e])
            dgram_put(d, "error.%s:%llu|c", proto_err_code((enum proto_err)e),
                      (unsigned long long)(total - m->sent_errors[e]));
        m->sent_errors[e] = total;
    }
    /* Hit timings: the latest N_SAMPLES per worker, with statsd's sample rate
     * when there were more, so statsd's counts and percentiles stay right. */
    for (unsigned i = 0; i < m->n_workers; i++) {
        const struct metrics_worker *w = &m->workers[i];
        uint64_t n = __atomic_load_n(&w->n_samples, __ATOMIC_ACQUIRE);
        uint64_t fresh = n - m->sent_samples[i], k = fresh < N_SAMPLES ? fresh : N_SAMPLES;

        for (uint64_t j = n - k; j < n; j++) {
            uint32_t us = __atomic_load_n(&w->samples[j % N_SAMPLES], __ATOMIC_RELAXED);

            if (k < fresh)
                dgram_put(d, "hit:%.3f|ms|@%.6g", us / 1000.0, (double)k / (double)fresh);
            else
                dgram_put(d, "hit:%.3f|ms", us / 1000.0);
        }
        m->sent_samples[i] = n;
    }
    dgram_put(d, "connections:%llu|g", (unsigned long long)g.connections);
    dgram_send(d);
    free(d);
}

void metrics_tick(struct metrics *m, const struct metrics_gauges *g, uint64_t now_ms)
{
    if (!m)
        return;
    if (g) {
        pthread_mutex_lock(&m->lock);
        m->g = *g;
        pthread_mutex_unlock(&m->lock);
    }
    if (!m->statsd_host)
        return;
    if (!m->statsd_resolved && now_ms >= m->next_resolve_ms)
        statsd_resolve(m, now_ms);
    if (!m->statsd_resolved || now_ms < m->next_flush_ms)
        return;
    m->next_flush_ms = now_ms + m->interval_ms;
    statsd_flush(m);
}

void metrics_status_line(struct metrics *m, char *buf, size_t size)
{
    struct metrics_gauges g;
    uint64_t acc = 0, rej = 0;
    size_t n_labels;

    if (!m) {
        snprintf(buf, size, "%s", "");
        return;
    }
    n_labels = labels_published(m);
    gauges_get(m, &g);
    for (size_t slot = 0; slot < n_labels; slot++) {
        acc += sum_hits(m, slot, METRICS_ACCEPTED);
        rej += sum_hits(m, slot, METRICS_REJECTED);
    }
    snprintf(buf, size, "%llu rules (generation %llu), %llu hits (%llu accepted, %llu rejected), "
             "%llu connections", (unsigned long long)g.rules,
             (unsigned long long)g.config_generation, (unsigned long long)(acc + rej),
             (unsigned long long)acc, (unsigned long long)rej,
             (unsigned long long)g.connections);
}

/* ---- Redis hooks ---------------------------------------------------------------------- */

void metrics_redis_up(struct metrics *m, bool up)
{
    if (!m)
        return;
    __atomic_store_n(&m->redis_up, up ? 1 : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&m->redis_known, 1, __ATOMIC_RELEASE);
}

void metrics_redis_breaker(struct metrics *m, bool open)
{
    int was;

    if (!m)
        return;
    __atomic_store_n(&m->redis_known, 1, __ATOMIC_RELEASE);
    was = __atomic_exchange_n(&m->breaker_open, open ? 1 : 0, __ATOMIC_RELAXED);
    if (was != (open ? 1 : 0))
        __atomic_fetch_add(open ? &m->breaker_opened : &m->breaker_closed, 1, __ATOMIC_RELAXED);
}

/* ---- life cycle ------------------------------------------------------------------------ */

/* divvy's environment variables over @o; strings point into the environment or @m. */
static int apply_env(struct metrics_opts *o, char *listen_buf, size_t size)
{
    const char *v;
    char *end;
    unsigned long port;

    v = getenv("HTTP_SERVICE_PORT");
    if (v && *v) {
        errno = 0;
        port = strtoul(v, &end, 10);
        if (errno || *end || port == 0 || port > 65535) {
            log_msg(LOG_ERR, "HTTP_SERVICE_PORT=%s: expected a port 1..65535", v);
            return -EINVAL;
        }
        snprintf(listen_buf, size, "tcp:[::]:%lu", port);
        o->listen = listen_buf;
        log_msg(LOG_INFO, "metrics: HTTP_SERVICE_PORT=%s from the environment", v);
    }
    v = getenv("PROMETHEUS_METRICS_PATH");
    if (v && *v) {
        o->path = v;
        log_msg(LOG_INFO, "metrics: PROMETHEUS_METRICS_PATH=%s from the environment", v);
    }
    v = getenv("STATSD_HOST");
    if (v && *v && getenv("STATSD_PORT") && *getenv("STATSD_PORT")) {
        const char *p = getenv("STATSD_PORT");

        errno = 0;
        port = strtoul(p, &end, 10);
        if (errno || *end || port == 0 || port > 65535) {
            log_msg(LOG_ERR, "STATSD_PORT=%s: expected a port 1..65535", p);
            return -EINVAL;
        }
        o->statsd_host = v;
        o->statsd_port = (unsigned)port;
        log_msg(LOG_INFO, "metrics: STATSD_HOST=%s STATSD_PORT=%s from the environment", v, p);
    }
    v = getenv("STATSD_PREFIX");
    if (v) {
        o->statsd_prefix = v;
        log_msg(LOG_INFO, "metrics: STATSD_PREFIX=%s from the environment", v);
    }
    v = getenv("STATSD_USE_TCP");
    if (v && *v)
        log_msg(LOG_WARNING, "STATSD_USE_TCP is not supported: statsd goes over UDP");
    return 0;
}

int metrics_new(const struct metrics_opts *opts, struct metrics **ret)
{
    struct metrics_opts o = *opts;
    struct metrics *m = NULL;
    struct timespec now;
    char listen_buf[64];
    const char *prefix;
    size_t plen;
    int r;

    if (o.workers == 0 || o.workers > 65536)
        return -EINVAL;
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->statsd_fd = -1;
    pthread_mutex_init(&m->lock, NULL);
    if (!o.ignore_env) {
        r = apply_env(&o, listen_buf, sizeof(listen_buf));
        if (r < 0)
            goto out;
    }
    if (!o.path || !*o.path)
        o.path = METRICS_PATH_DEFAULT;
    if (o.path[0] != '/' || (o.statsd_host && (o.statsd_port == 0 || o.statsd_port > 65535))) {
        log_msg(LOG_ERR, "metrics: the path must start with '/' and the statsd port be 1..65535");
        r = -EINVAL;
        goto out;
    }
    m->path = strdup(o.path);
    m->workers = aligned_alloc(64, o.workers * sizeof(*m->workers));
    if (!m->path || !m->workers) {
        r = -ENOMEM;
        goto out;
    }
    memset(m->workers, 0, o.workers * sizeof(*m->workers));
    m->n_workers = o.workers;
    for (unsigned i = 0; i < o.workers; i++) {
        m->workers[i].m = m;
        /* Chunk 0 always exists: it holds rule_label="" and every fallback. */
        m->workers[i].hits[0] = calloc(CHUNK * METRICS_N_STATUS, sizeof(uint64_t));
        if (!m->workers[i].hits[0]) {
            r = -ENOMEM;
            goto out;
        }
    }
    if (label_slot_locked(m, "") != 0) {
        r = -ENOMEM;
        goto out;
    }
    clock_gettime(CLOCK_REALTIME, &now);
    m->start_time = (double)now.tv_sec + (double)now.tv_nsec / 1e9;

    if (o.statsd_host) {
        prefix = o.statsd_prefix ? o.statsd_prefix : "";
        plen = strlen(prefix);
        m->statsd_host = strdup(o.statsd_host);
        m->prefix = malloc(plen + 2);
        m->sent_hits = calloc((size_t)METRICS_LABELS_MAX * METRICS_N_STATUS, sizeof(uint64_t));
        m->sent_samples = calloc(o.workers, sizeof(uint64_t));
        if (!m->statsd_host || !m->prefix || !m->sent_hits || !m->sent_samples) {
            r = -ENOMEM;
            goto out;
        }
        /* divvy's statsd client adds the '.' after a prefix that lacks one. */
        snprintf(m->prefix, plen + 2, "%s%s", prefix, plen && prefix[plen - 1] != '.' ? "." : "");
        snprintf(m->statsd_port, sizeof(m->statsd_port), "%u", o.statsd_port);
        m->interval_ms = o.statsd_interval_ms ? o.statsd_interval_ms : METRICS_STATSD_INTERVAL_MS;
        statsd_resolve(m, 0);
        m->next_flush_ms = 0;
    }
    if (o.listen) {
        r = http_start(m, o.listen);
        /* divvy listens on every address; without IPv6, every IPv4 one. */
        if ((r == -EAFNOSUPPORT || r == -EADDRNOTAVAIL) && strncmp(o.listen, "tcp:[::]:", 9) == 0) {
            snprintf(listen_buf, sizeof(listen_buf), "tcp:0.0.0.0:%s", o.listen + 9);
            r = http_start(m, listen_buf);
        }
        if (r < 0)
            goto out;
    }
    *ret = m;
    m = NULL;
    r = 0;
out:
    metrics_free(m);
    return r;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    if (m->mhd)
        MHD_stop_daemon(m->mhd);       /* joins its thread and closes the socket */
    /* The last counts, so a stop loses nothing that was counted. */
    if (m->statsd_host && m->statsd_resolved)
        statsd_flush(m);
    if (m->statsd_fd >= 0)
        close(m->statsd_fd);
    if (m->workers) {
        for (unsigned i = 0; i < m->n_workers; i++) {
            for (size_t c = 0; c < N_CHUNKS; c++)
                free(m->workers[i].hits[c]);
            free(m->workers[i].map);
        }
        free(m->workers);
    }
    for (size_t i = 0; i < m->n_labels; i++)
        free(m->labels[i]);
    pthread_mutex_destroy(&m->lock);
    free(m->path);
    free(m->statsd_host);
    free(m->prefix);
    free(m->sent_hits);
    free(m->sent_samples);
    free(m);
}
