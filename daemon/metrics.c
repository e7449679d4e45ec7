/* SPDX-License-Identifier: MIT */
/*
 * metrics: divvyd's counters (see metrics.h; the metric list is in
 * docs/operations.md): the per-worker blocks the hit path writes, the label
 * registry, the gauges the main thread hands over, the sums every reader
 * uses, and the life cycle.  Publishing is apart: the Prometheus exposition
 * and its HTTP endpoint in metrics_prom.c, statsd in metrics_statsd.c.
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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "log.h"
#include "metrics.h"
#include "metrics_int.h"

_Static_assert((LABEL_HASH & (LABEL_HASH - 1)) == 0, "LABEL_HASH is a power of two");
_Static_assert(METRICS_LABELS_MAX % CHUNK == 0, "whole chunks");
/* rules_describe()'s text of one rule; longer ones count under the rule's id. */
#define RULES_DESCRIBE_BUF 4096
_Static_assert(METRICS_NAME_MAX + 1 <= RULES_DESCRIBE_BUF, "a name fits");
_Static_assert(METRICS_LABELS_MAX < 65535, "label slots fit the uint16_t hash");
_Static_assert((int)TABLE_FAST_N == (int)METRICS_N_STATUS &&
               (int)TABLE_FAST_ACCEPTED == (int)METRICS_ACCEPTED &&
               (int)TABLE_FAST_CANARY_REJECTED == (int)METRICS_CANARY_REJECTED,
               "the fast table counts per rule in metrics_status order");

/* Upper bounds of divvy_hit_duration_seconds: microseconds for local hits,
 * milliseconds for Redis, and prom-client's defaults (divvy's) as a subset so
 * existing dashboards keep their `le` values. */
static const uint64_t bucket_ns[N_BUCKETS] = {
    10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
    25000000, 50000000, 100000000, 250000000, 500000000, 1000000000, 2500000000ull,
    5000000000ull, 10000000000ull,
};
const char *const metrics_bucket_le[N_BUCKETS] = {
    "1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005",
    "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
};
const char *const metrics_status_name[METRICS_N_STATUS] = {
    "accepted", "rejected", "canary-accepted", "canary-rejected",
};

static void counter_add(uint64_t *c, uint64_t n)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
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

/*
 * The name rule @idx of @rules (@r) counts under into @buf: divvy's names,
 * its label ("" without one); divvyd's, its label, else its match as
 * divvyctl shows it ("method=GET path=/api/[star]"; "(default)" for the
 * default rule), bytes outside printable ASCII as '?' and cut to
 * METRICS_NAME_MAX bytes ("..." at the end), else, when it does not fit,
 * its id.  A label never holds '=' or '(', so neither form is a label.
 */
static const char *rule_name(const struct metrics *m, const struct rules *rules, uint32_t idx,
                             const struct rules_rule *r, char *buf, size_t size)
{
    int n;

    if (m->divvy_names || r->label[0])
        return r->label;
    n = rules_describe(rules, idx, buf, size);
    if (n < 0)
        return r->id_str;
    if (!strchr(buf, '='))
        return "(default)";
    for (char *p = buf; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            *p = '?';
    if (n > METRICS_NAME_MAX)
        memcpy(buf + METRICS_NAME_MAX - 3, "...", 4);
    return buf;
}

/*
 * The label slot rule @idx of @rules (@r) counts in.  Unless the login
 * figures are exposed (metrics_opts.privileged), every source = privileged
 * rule shares the hidden slot: its hits add to the totals (histogram,
 * statsd's hit.<status>, the status line), never to a series of its own.
 * Under m->lock.
 */
static uint32_t rule_slot_locked(struct metrics *m, const struct rules *rules, uint32_t idx,
                                 const struct rules_rule *r)
{
    char buf[RULES_DESCRIBE_BUF];

    if (r->source == RULES_SOURCE_PRIVILEGED && m->hidden)
        return m->hidden;
    return label_slot_locked(m, rule_name(m, rules, idx, r, buf, sizeof(buf)));
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
        /* divvy's rule_label is the label ("" without one); divvyd's own is the
         * label or the match, so the default rule and unlabelled rules stand apart. */
        if (rules_get(rules, (uint32_t)i, &r) >= 0)
            slot = rule_slot_locked(m, rules, (uint32_t)i, &r);
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

void metrics_charged(struct metrics_worker *w, const struct rules *rules, uint64_t generation,
                     uint32_t rule)
{
    if (!w)
        return;
    metrics_hit(w, rules, generation, rule, METRICS_ACCEPTED);
    counter_add(&w->charged, 1);
}

uint64_t metrics_clock_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Records one hit that took @d nanoseconds. */
void metrics_observe_ns(struct metrics_worker *w, uint64_t d)
{
    size_t b = 0;

    /* Buckets are upper bounds, inclusive as Prometheus' `le` says. */
    while (b < N_BUCKETS && d > bucket_ns[b])
        b++;
    counter_add(&w->buckets[b], 1);
    counter_add(&w->sum_ns, d);
    __atomic_store_n(&w->samples[w->n_samples % N_SAMPLES], d, __ATOMIC_RELAXED);
    /* Release: a reader that sees the count sees the sample. */
    __atomic_store_n(&w->n_samples, w->n_samples + 1, __ATOMIC_RELEASE);
}

void metrics_hit_done(struct metrics_worker *w, uint64_t start_ns)
{
    uint64_t now = metrics_clock_ns();

    if (w)
        metrics_observe_ns(w, now > start_ns ? now - start_ns : 0);
}

const char *metrics_protocol_name(enum metrics_protocol p)
{
    static const char *const names[METRICS_N_PROTOCOL] = { "line", "resp", "rls" };

    return (unsigned)p < METRICS_N_PROTOCOL ? names[p] : "?";
}

void metrics_decision(struct metrics_worker *w, enum metrics_protocol proto, bool allowed)
{
    if (w && (unsigned)proto < METRICS_N_PROTOCOL)
        counter_add(&w->decisions[proto][allowed ? 0 : 1], 1);
}

void metrics_error(struct metrics_worker *w, enum proto_err err)
{
    if (!w || (unsigned)err >= N_ERRORS || err == PROTO_E_NONE)
        return;
    counter_add(&w->errors[err], 1);
}

const char *metrics_deny_name(enum metrics_deny cause)
{
    static const char *const names[METRICS_N_DENY] = {
        "quota", "zero-limit", "table-full", "redis-down", "no-counter",
    };

    return (unsigned)cause < METRICS_N_DENY ? names[cause] : "?";
}

void metrics_denied(struct metrics_worker *w, enum metrics_deny cause)
{
    if (!w || (unsigned)cause >= METRICS_N_DENY)
        return;
    counter_add(&w->denied[cause], 1);
}

/* ---- sums ------------------------------------------------------------------------ */

uint64_t metrics_sum_hits(const struct metrics *m, size_t slot, unsigned status)
{
    uint64_t total = 0;

    for (unsigned i = 0; i < m->n_workers; i++) {
        const uint64_t *c = chunk_get(&m->workers[i], slot / CHUNK);

        if (c)
            total += counter_get(&c[(slot % CHUNK) * METRICS_N_STATUS + status]);
    }
    return total;
}

uint64_t metrics_sum_errors(const struct metrics *m, unsigned err)
{
    uint64_t total = 0;

    for (unsigned i = 0; i < m->n_workers; i++)
        total += counter_get(&m->workers[i].errors[err]);
    return total;
}

uint64_t metrics_sum_charged(const struct metrics *m)
{
    uint64_t total = 0;

    for (unsigned i = 0; i < m->n_workers; i++)
        total += counter_get(&m->workers[i].charged);
    return total;
}

uint64_t metrics_sum_denied(const struct metrics *m, unsigned cause)
{
    uint64_t total = 0;

    for (unsigned i = 0; i < m->n_workers; i++)
        total += counter_get(&m->workers[i].denied[cause]);
    return total;
}

uint64_t metrics_sum_decisions(const struct metrics *m, unsigned proto, bool allowed)
{
    uint64_t total = 0;

    for (unsigned i = 0; i < m->n_workers; i++)
        total += counter_get(&m->workers[i].decisions[proto][allowed ? 0 : 1]);
    return total;
}

size_t metrics_labels_published(const struct metrics *m)
{
    return __atomic_load_n(&m->n_labels, __ATOMIC_ACQUIRE);
}

void metrics_gauges_get(struct metrics *m, struct metrics_gauges *ret)
{
    pthread_mutex_lock(&m->lock);
    *ret = m->g;
    pthread_mutex_unlock(&m->lock);
}

/* The label slot of rule id @id in @rules; false when no rule has it. Under m->lock. */
static bool fast_name_locked(struct metrics *m, const struct rules *rules, uint64_t id,
                             uint32_t *ret_slot)
{
    size_t n = rules ? rules_count(rules) : 0;
    struct rules_rule r;

    if (id == TABLE_FAST_OTHER) {
        *ret_slot = 0;
        return true;
    }
    for (size_t i = 0; i < n; i++)
        if (rules_get(rules, (uint32_t)i, &r) >= 0 && r.id == id) {
            *ret_slot = rule_slot_locked(m, rules, (uint32_t)i, &r);
            return true;
        }
    return false;
}

void metrics_fast_rules(struct metrics *m, struct table *fast, const struct rules *rules,
                        uint64_t generation)
{
    if (!m || !fast)
        return;
    pthread_mutex_lock(&m->lock);
    for (unsigned i = 0; i < TABLE_FAST_RULES; i++) {
        struct metrics_fast *e = &m->fast[i];
        uint64_t id;

        if (!table_fast_rule(fast, i, &id, e->n))
            continue;
        if (id != e->id) {
            /* Entries are claimed once; a new id means a new table (a restart). */
            e->id = id;
            e->named = false;
            e->tried_gen = 0;
        }
        if (!e->named && e->tried_gen != generation) {
            e->named = fast_name_locked(m, rules, id, &e->slot);
            e->tried_gen = generation;
        }
        m->have_fast = m->have_fast || e->named;
    }
    pthread_mutex_unlock(&m->lock);
}

bool metrics_fast_get(struct metrics *m, struct metrics_fast *ret)
{
    bool have;

    pthread_mutex_lock(&m->lock);
    memcpy(ret, m->fast, sizeof(m->fast));
    have = m->have_fast;
    pthread_mutex_unlock(&m->lock);
    return have;
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
    metrics_statsd_tick(m, now_ms);
}

bool metrics_wants_tables(const struct metrics *m)
{
    return m && m->mhd;
}

void metrics_status_line(struct metrics *m, char *buf, size_t size)
{
    struct metrics_gauges g;
    uint64_t acc = 0, rej = 0, charged;
    size_t n_labels;

    if (!m) {
        snprintf(buf, size, "%s", "");
        return;
    }
    n_labels = metrics_labels_published(m);
    metrics_gauges_get(m, &g);
    for (size_t slot = 0; slot < n_labels; slot++) {
        acc += metrics_sum_hits(m, slot, METRICS_ACCEPTED);
        rej += metrics_sum_hits(m, slot, METRICS_REJECTED);
    }
    /* Requests: not the continue rules that charged on the way. */
    charged = metrics_sum_charged(m);
    acc = acc > charged ? acc - charged : 0;
    snprintf(buf, size, "%llu rules (generation %llu), %llu hits (%llu accepted, %llu rejected), "
             "%llu connections", (unsigned long long)g.rules,
             (unsigned long long)g.config_generation, (unsigned long long)(acc + rej),
             (unsigned long long)acc, (unsigned long long)rej,
             (unsigned long long)g.connections);
}

/* ---- Redis ---------------------------------------------------------------------------- */

_Static_assert((int)METRICS_FALLBACK_LOCAL == (int)CONFIG_REDIS_ERROR_LOCAL &&
               (int)METRICS_FALLBACK_OPEN == (int)CONFIG_REDIS_ERROR_OPEN &&
               (int)METRICS_FALLBACK_CLOSED == (int)CONFIG_REDIS_ERROR_CLOSED,
               "fallbacks in on_redis_error's order");

const char *const metrics_fallback_name[METRICS_N_FALLBACK] = { "local", "open", "closed" };

void metrics_redis_breaker(struct metrics *m, const char *node, bool open)
{
    struct metrics_redis_node *n = NULL;

    if (!m || !node)
        return;
    pthread_mutex_lock(&m->lock);
    for (unsigned i = 0; i < m->n_redis_nodes && !n; i++)
        if (strncmp(m->redis_nodes[i].name, node, METRICS_REDIS_NODE_MAX - 1) == 0)
            n = &m->redis_nodes[i];
    if (!n && m->n_redis_nodes < METRICS_REDIS_NODES) {
        /* New: closed until it says otherwise. */
        n = &m->redis_nodes[m->n_redis_nodes++];
        snprintf(n->name, sizeof(n->name), "%s", node);
    }
    if (!n) {
        if (!m->redis_other)
            log_msg(LOG_WARNING, "metrics: more than %d Redis nodes; the breaker of %s and "
                    "further nodes counts only its trips, under node=\"other\"",
                    METRICS_REDIS_NODES, node);
        m->redis_other = true;
        m->redis_other_opened += open;
    } else if (n->open != open) {
        n->open = open;
        if (open)
            n->opened++;
        else
            n->closed++;
    }
    pthread_mutex_unlock(&m->lock);
}

void metrics_redis_fallback(struct metrics_worker *w, enum metrics_fallback how)
{
    if (w && (unsigned)how < METRICS_N_FALLBACK)
        counter_add(&w->fallbacks[how], 1);
}

bool metrics_redis_get(struct metrics *m, struct metrics_redis *ret)
{
    uint64_t any = 0;

    memset(ret, 0, sizeof(*ret));
    for (unsigned i = 0; i < m->n_workers; i++)
        for (unsigned k = 0; k < METRICS_N_FALLBACK; k++)
            any |= ret->fallbacks[k] += counter_get(&m->workers[i].fallbacks[k]);
    pthread_mutex_lock(&m->lock);
    ret->n_nodes = m->n_redis_nodes;
    memcpy(ret->nodes, m->redis_nodes, m->n_redis_nodes * sizeof(ret->nodes[0]));
    ret->other = m->redis_other;
    ret->other_opened = m->redis_other_opened;
    pthread_mutex_unlock(&m->lock);
    return ret->n_nodes || ret->other || any;
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
    int r;

    if (o.workers == 0 || o.workers > 65536)
        return -EINVAL;
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->statsd_fd = -1;
    m->divvy_names = o.divvy_names;
    m->privileged = o.privileged;
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
    /* No rule label or id has a space: this one is nobody's. */
    if (!o.privileged && (m->hidden = label_slot_locked(m, "privileged rules")) != 1) {
        r = -ENOMEM;
        goto out;
    }
    clock_gettime(CLOCK_REALTIME, &now);
    m->start_time = (double)now.tv_sec + (double)now.tv_nsec / 1e9;

    if (o.statsd_host) {
        r = metrics_statsd_init(m, &o);
        if (r < 0)
            goto out;
    }
    if (o.listen) {
        r = metrics_http_start(m, o.listen);
        /* divvy listens on every address; without IPv6, every IPv4 one. */
        if ((r == -EAFNOSUPPORT || r == -EADDRNOTAVAIL) && strncmp(o.listen, "tcp:[::]:", 9) == 0) {
            snprintf(listen_buf, sizeof(listen_buf), "tcp:0.0.0.0:%s", o.listen + 9);
            r = metrics_http_start(m, listen_buf);
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
    metrics_http_stop(m);
    /* The last counts, so a stop loses nothing that was counted. */
    metrics_statsd_fini(m);
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
    free(m);
}
