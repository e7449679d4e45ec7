/* SPDX-License-Identifier: MIT */
/*
 * metrics_statsd: divvy's statsd output (see metrics.h; divvy's README,
 * "Statistics"): every interval, the deltas of the counters since the last
 * flush as UDP datagrams of at most DGRAM_MAX bytes, fire and forget.  A
 * host that does not resolve is retried every RESOLVE_RETRY_MS.  The main
 * thread only (metrics_tick(), metrics_new(), metrics_free()).
 */
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "metrics_int.h"

#define RESOLVE_RETRY_MS 30000

static struct log_ratelimit rl_statsd;

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

/* Redis as the exposition shows it, summed over the nodes: redis.fallback.<policy> and
 * redis.breaker.<open|closed> (transitions) as deltas, redis.breakers_open as a gauge;
 * nothing before the first node reported or fallback was counted. */
static void statsd_redis(struct metrics *m, struct dgram *d)
{
    static const char *const to[2] = { "open", "closed" };
    struct metrics_redis *r = malloc(sizeof(*r));
    uint64_t trans[2] = { 0, 0 }, open = 0;

    if (!r)
        return;
    if (!metrics_redis_get(m, r)) {
        free(r);
        return;
    }
    for (unsigned k = 0; k < METRICS_N_FALLBACK; k++) {
        if (r->fallbacks[k] > m->sent_fallbacks[k])
            dgram_put(d, "redis.fallback.%s:%llu|c", metrics_fallback_name[k],
                      (unsigned long long)(r->fallbacks[k] - m->sent_fallbacks[k]));
        m->sent_fallbacks[k] = r->fallbacks[k];
    }
    trans[0] = r->other_opened;
    for (unsigned i = 0; i < r->n_nodes; i++) {
        trans[0] += r->nodes[i].opened;
        trans[1] += r->nodes[i].closed;
        open += r->nodes[i].open;
    }
    for (unsigned k = 0; k < 2; k++) {
        if (trans[k] > m->sent_breaker[k])
            dgram_put(d, "redis.breaker.%s:%llu|c", to[k],
                      (unsigned long long)(trans[k] - m->sent_breaker[k]));
        m->sent_breaker[k] = trans[k];
    }
    dgram_put(d, "redis.breakers_open:%llu|g", (unsigned long long)open);
    free(r);
}

/* divvyd's own, past divvy's: decision.<protocol>.<status> and, with a resp:
 * listener, adhoc.<rl|cl>.<allowed|limited>, as deltas.  The process_*
 * figures are the exposition's only: a statsd setup has its host agent's. */
static void statsd_own(struct metrics *m, struct dgram *d, const struct metrics_gauges *g)
{
    static const char *const kind[ADHOC_N_KINDS] = { [ADHOC_RL] = "rl", [ADHOC_CL] = "cl" };
    static const char *const decided[2] = { "accepted", "rejected" };
    static const char *const took[2] = { "allowed", "limited" };
    uint64_t total;

    for (unsigned k = 0; k < METRICS_N_PROTOCOL; k++)
        for (unsigned j = 0; j < 2; j++) {
            total = metrics_sum_decisions(m, k, j == 0);
            if (total > m->sent_decisions[k][j])
                dgram_put(d, "decision.%s.%s:%llu|c",
                          metrics_protocol_name((enum metrics_protocol)k), decided[j],
                          (unsigned long long)(total - m->sent_decisions[k][j]));
            m->sent_decisions[k][j] = total;
        }
    for (unsigned k = 0; g->have_adhoc && k < ADHOC_N_KINDS; k++)
        for (unsigned j = 0; j < 2; j++) {
            total = g->adhoc.hits[k][j];
            if (total > m->sent_adhoc[k][j])
                dgram_put(d, "adhoc.%s.%s:%llu|c", kind[k], took[j],
                          (unsigned long long)(total - m->sent_adhoc[k][j]));
            m->sent_adhoc[k][j] = total;
        }
}

/* @label as one statsd name component into @buf: [A-Za-z0-9_-] kept, '(' and
 * ')' dropped, anything else '_' (an unlabelled rule's match, metrics.c). */
static const char *statsd_component(const char *label, char *buf, size_t size)
{
    size_t n = 0;

    for (; *label && n + 1 < size; label++) {
        char ch = *label;

        if (ch == '(' || ch == ')')
            continue;
        buf[n++] = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                   (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ? ch : '_';
    }
    buf[n] = '\0';
    return buf;
}

/* divvy's statsd metrics (its README, "Statistics"), as deltas since the last flush. */
static void statsd_flush(struct metrics *m)
{
    struct dgram *d;
    struct metrics_gauges g;
    size_t n_labels = metrics_labels_published(m);
    uint64_t total, status_total[METRICS_N_STATUS] = { 0 };
    char name[METRICS_NAME_MAX + 1];

    d = malloc(sizeof(*d));
    if (!d)
        return;
    d->m = m;
    d->len = 0;
    metrics_gauges_get(m, &g);
    for (size_t slot = 0; slot < n_labels; slot++)
        for (unsigned s = 0; s < METRICS_N_STATUS; s++) {
            uint64_t *sent = &m->sent_hits[slot * METRICS_N_STATUS + s];

            total = metrics_sum_hits(m, slot, s);
            status_total[s] += total;
            /* hit.<status>.<label> only for rules with a label, as divvy does,
             * and not for the hidden privileged rules (metrics_opts.privileged). */
            if (slot > 0 && slot != m->hidden && total > *sent)
                dgram_put(d, "hit.%s.%s:%llu|c", metrics_status_name[s],
                          statsd_component(m->labels[slot], name, sizeof(name)),
                          (unsigned long long)(total - *sent));
            *sent = total;
        }
    /* hit.<status> counts requests: not the continue rules that charged on the way. */
    total = metrics_sum_charged(m);
    status_total[METRICS_ACCEPTED] -= total < status_total[METRICS_ACCEPTED]
                                      ? total : status_total[METRICS_ACCEPTED];
    for (unsigned s = 0; s < METRICS_N_STATUS; s++) {
        if (status_total[s] > m->sent_status[s])
            dgram_put(d, "hit.%s:%llu|c", metrics_status_name[s],
                      (unsigned long long)(status_total[s] - m->sent_status[s]));
        m->sent_status[s] = status_total[s];
    }
    for (unsigned e = 1; e < N_ERRORS; e++) {
        total = metrics_sum_errors(m, e);
        /* no-counter is a login figure, as in the exposition. */
        if (total > m->sent_errors[e] && (m->privileged || e != PROTO_E_NO_COUNTER))
            dgram_put(d, "error.%s:%llu|c", proto_err_code((enum proto_err)e),
                      (unsigned long long)(total - m->sent_errors[e]));
        m->sent_errors[e] = total;
    }
    for (unsigned c = 0; c < METRICS_N_DENY; c++) {
        total = metrics_sum_denied(m, c);
        if (total > m->sent_denied[c] && (m->privileged || c != METRICS_DENY_NO_COUNTER))
            dgram_put(d, "denied.%s:%llu|c", metrics_deny_name((enum metrics_deny)c),
                      (unsigned long long)(total - m->sent_denied[c]));
        m->sent_denied[c] = total;
    }
    /* Hit timings: the latest N_SAMPLES per worker, with statsd's sample rate
     * when there were more, so statsd's counts and percentiles stay right. */
    for (unsigned i = 0; i < m->n_workers; i++) {
        const struct metrics_worker *w = &m->workers[i];
        uint64_t n = __atomic_load_n(&w->n_samples, __ATOMIC_ACQUIRE);
        uint64_t fresh = n - m->sent_samples[i], k = fresh < N_SAMPLES ? fresh : N_SAMPLES;

        for (uint64_t j = n - k; j < n; j++) {
            uint64_t ns = __atomic_load_n(&w->samples[j % N_SAMPLES], __ATOMIC_RELAXED);

            /* Milliseconds to the nanosecond: a local hit takes a few microseconds,
             * which "%.3f" of whole microseconds sent as 0.000. */
            if (k < fresh)
                dgram_put(d, "hit:%.6f|ms|@%.6g", (double)ns / 1e6, (double)k / (double)fresh);
            else
                dgram_put(d, "hit:%.6f|ms", (double)ns / 1e6);
        }
        m->sent_samples[i] = n;
    }
    statsd_redis(m, d);
    statsd_own(m, d, &g);
    dgram_put(d, "connections:%llu|g", (unsigned long long)g.connections);
    dgram_send(d);
    free(d);
}

int metrics_statsd_init(struct metrics *m, const struct metrics_opts *o)
{
    const char *prefix = o->statsd_prefix ? o->statsd_prefix : "";
    size_t plen = strlen(prefix);

    m->statsd_host = strdup(o->statsd_host);
    m->prefix = malloc(plen + 2);
    m->sent_hits = calloc((size_t)METRICS_LABELS_MAX * METRICS_N_STATUS, sizeof(uint64_t));
    m->sent_samples = calloc(o->workers, sizeof(uint64_t));
    if (!m->statsd_host || !m->prefix || !m->sent_hits || !m->sent_samples)
        return -ENOMEM;
    /* divvy's statsd client adds the '.' after a prefix that lacks one. */
    snprintf(m->prefix, plen + 2, "%s%s", prefix, plen && prefix[plen - 1] != '.' ? "." : "");
    snprintf(m->statsd_port, sizeof(m->statsd_port), "%u", o->statsd_port);
    m->interval_ms = o->statsd_interval_ms ? o->statsd_interval_ms : METRICS_STATSD_INTERVAL_MS;
    statsd_resolve(m, 0);
    m->next_flush_ms = 0;
    return 0;
}

void metrics_statsd_tick(struct metrics *m, uint64_t now_ms)
{
    if (!m->statsd_host)
        return;
    if (!m->statsd_resolved && now_ms >= m->next_resolve_ms)
        statsd_resolve(m, now_ms);
    if (!m->statsd_resolved || now_ms < m->next_flush_ms)
        return;
    m->next_flush_ms = now_ms + m->interval_ms;
    statsd_flush(m);
}

void metrics_statsd_fini(struct metrics *m)
{
    if (m->statsd_host && m->statsd_resolved)
        statsd_flush(m);
    if (m->statsd_fd >= 0)
        close(m->statsd_fd);
    m->statsd_fd = -1;
    free(m->statsd_host);
    free(m->prefix);
    free(m->sent_hits);
    free(m->sent_samples);
    m->statsd_host = m->prefix = NULL;
    m->sent_hits = m->sent_samples = NULL;
}
