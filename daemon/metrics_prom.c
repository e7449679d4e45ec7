/* SPDX-License-Identifier: MIT */
/*
 * metrics_prom: the Prometheus text exposition of every counter and gauge
 * (names in docs/operations.md); metrics_http.c serves it.  A scrape reads
 * the counters with relaxed loads (metrics_int.h) and the gauges under the
 * lock; it never waits for a worker.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "metrics_int.h"

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

/* @name{table="...",@label} for the first @n counter tables (fast, private,
 * privileged): the field at offset @field of its struct table_stats. */
static void put_tables(FILE *f, const char *name, const char *label,
                       const struct metrics_gauges *g, unsigned n, size_t field)
{
    static const char *const tables[] = { "fast", "private", "privileged" };
    const struct table_stats *st[] = { &g->fast, &g->priv, &g->privileged };

    for (unsigned i = 0; i < n; i++) {
        uint64_t v;

        memcpy(&v, (const char *)st[i] + field, sizeof(v));
        fprintf(f, "%s{table=\"%s\"%s} %llu\n", name, tables[i], label, (unsigned long long)v);
    }
}

/* The counter tables; the privileged one only with metrics_opts.privileged. */
/* The decision log's counters (docs/operations.md "Decision log"). */
static void render_dlog(FILE *f, const struct metrics_gauges *g)
{
    put_head(f, "divvy_decision_log_records_total", "counter",
             "Decisions written to the decision log.");
    fprintf(f, "divvy_decision_log_records_total %llu\n", (unsigned long long)g->dlog_records);
    put_head(f, "divvy_decision_log_dropped_total", "counter",
             "Decisions the log lost (a worker's buffer full, a failed write), by whose.");
    fprintf(f, "divvy_decision_log_dropped_total{source=\"divvyd\"} %llu\n",
            (unsigned long long)(g->dlog_dropped - g->dlog_reports_dropped));
    fprintf(f, "divvy_decision_log_dropped_total{source=\"fast_path_report\"} %llu\n",
            (unsigned long long)g->dlog_reports_dropped);
    put_head(f, "divvy_decision_log_bytes_total", "counter",
             "Bytes written to decision log files.");
    fprintf(f, "divvy_decision_log_bytes_total %llu\n", (unsigned long long)g->dlog_bytes);
    put_head(f, "divvy_decision_log_write_errors_total", "counter",
             "Failed writes, file creations and removals of the decision log.");
    fprintf(f, "divvy_decision_log_write_errors_total %llu\n",
            (unsigned long long)g->dlog_write_errors);
}

static void render_table(FILE *f, const struct metrics_gauges *g, bool privileged)
{
    unsigned n = privileged ? 3 : 2;

    put_head(f, "divvy_table_slots", "gauge", "Counter slots of each counter table.");
    put_tables(f, "divvy_table_slots", "", g, n, offsetof(struct table_stats, slots));
    put_head(f, "divvy_table_live_slots", "gauge",
             "Slots holding a counter that has not expired (table fill).");
    put_tables(f, "divvy_table_live_slots", "", g, n, offsetof(struct table_stats, live));
    put_head(f, "divvy_table_full_total", "counter",
             "Hits that needed a new counter and got none: no free slot (full) or the "
             "rule's max_actors reached, since the table was created.");
    put_tables(f, "divvy_table_full_total", ",reason=\"full\"", g, n,
               offsetof(struct table_stats, full_events));
    put_tables(f, "divvy_table_full_total", ",reason=\"max_actors\"", g, n,
               offsetof(struct table_stats, quota_events));
    put_head(f, "divvy_table_evictions_total", "counter",
             "Counters forgotten to make room for a new one (a rule's when_full = \"evict\"), "
             "since the table was created.");
    put_tables(f, "divvy_table_evictions_total", "", g, n,
               offsetof(struct table_stats, evictions));
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
             "progress, over max_output_bytes, or input past what they may hold.");
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

/* RESP's ad-hoc buckets (docs/resp.md "Shares, reserve and eviction"). */
static void render_adhoc(FILE *f, const struct adhoc_stats *a)
{
    put_head(f, "divvy_adhoc_buckets", "gauge",
             "Ad-hoc buckets (RL.*, CL.THROTTLE) held, by unprivileged or privileged peers.");
    fprintf(f, "divvy_adhoc_buckets{peer=\"unprivileged\"} %llu\n",
            (unsigned long long)(a->used - a->privileged));
    fprintf(f, "divvy_adhoc_buckets{peer=\"privileged\"} %llu\n",
            (unsigned long long)a->privileged);
    put_head(f, "divvy_adhoc_slots", "gauge", "Slots of the ad-hoc bucket table.");
    fprintf(f, "divvy_adhoc_slots %llu\n", (unsigned long long)a->slots);
    put_head(f, "divvy_adhoc_evictions_total", "counter",
             "Ad-hoc buckets dropped before they were idle to make room for another.");
    fprintf(f, "divvy_adhoc_evictions_total %llu\n", (unsigned long long)a->evictions);
    put_head(f, "divvy_adhoc_busy_total", "counter",
             "Ad-hoc bucket commands answered busy: no bucket could be had.");
    fprintf(f, "divvy_adhoc_busy_total %llu\n", (unsigned long long)a->busy);
    put_head(f, "divvy_adhoc_hits_total", "counter",
             "Ad-hoc bucket calls that take (RL.REDUCE, CL.THROTTLE), by command and status.");
    for (int k = 0; k < ADHOC_N_KINDS; k++)
        for (int j = 0; j < 2; j++)
            fprintf(f, "divvy_adhoc_hits_total{command=\"%s\",status=\"%s\"} %llu\n",
                    k == ADHOC_RL ? "RL.REDUCE" : "CL.THROTTLE", j ? "limited" : "allowed",
                    (unsigned long long)a->hits[k][j]);
    put_head(f, "divvy_adhoc_redis_fallbacks_total", "counter",
             "Ad-hoc bucket calls answered by on_redis_error: Redis could not.");
    fprintf(f, "divvy_adhoc_redis_fallbacks_total %llu\n", (unsigned long long)a->fallbacks);
}

/* Fast-path decisions per rule and outcome, as divvy_hits_total counts socket hits. */
static void render_fast_rules(FILE *f, struct metrics *m)
{
    struct metrics_fast *fast = malloc(TABLE_FAST_RULES * sizeof(*fast));

    if (!fast)
        return;
    if (!metrics_fast_get(m, fast)) {
        free(fast);
        return;
    }
    put_head(f, "divvy_fast_path_rule_hits_total", "counter",
             "Hits decided by clients in shared memory, by rule and status.");
    for (unsigned i = 0; i < TABLE_FAST_RULES; i++) {
        uint64_t n[TABLE_FAST_N];
        bool first = true;

        if (!fast[i].named)
            continue;
        /* One series per label: entries of the same label (rules a reload
         * changed) add up under the first. */
        for (unsigned j = 0; j < i; j++)
            if (fast[j].named && fast[j].slot == fast[i].slot)
                first = false;
        if (!first)
            continue;
        memcpy(n, fast[i].n, sizeof(n));
        for (unsigned j = i + 1; j < TABLE_FAST_RULES; j++)
            if (fast[j].named && fast[j].slot == fast[i].slot)
                for (unsigned k = 0; k < TABLE_FAST_N; k++)
                    n[k] += fast[j].n[k];
        for (unsigned k = 0; k < TABLE_FAST_N; k++) {
            fprintf(f, "divvy_fast_path_rule_hits_total{status=\"%s\",rule_label=\"",
                    metrics_status_name[k]);
            put_label_value(f, m->labels[fast[i].slot]);
            fprintf(f, "\"} %llu\n", (unsigned long long)n[k]);
        }
    }
    free(fast);
}

/* One series per Redis node: `@name{node="..."@tail} @v`. */
static void put_node(FILE *f, const char *name, const char *node, const char *tail,
                     unsigned long long v)
{
    fprintf(f, "%s{node=\"", name);
    put_label_value(f, node);
    fprintf(f, "\"%s} %llu\n", tail, v);
}

/* Redis (docs/operations.md): per node once it reported, and the fallbacks. */
static void render_redis(FILE *f, struct metrics *m)
{
    struct metrics_redis *r = malloc(sizeof(*r));

    if (!r)
        return;
    if (!metrics_redis_get(m, r)) {
        free(r);
        return;
    }
    put_head(f, "divvy_redis_up", "gauge",
             "1 while divvyd can use the Redis node: reached, and its breaker closed.");
    for (unsigned i = 0; i < r->n_nodes; i++)
        put_node(f, "divvy_redis_up", r->nodes[i].name, "", !r->nodes[i].open);
    put_head(f, "divvy_redis_breaker_open", "gauge",
             "1 while the node's circuit breaker is open (its hits do not wait for Redis).");
    for (unsigned i = 0; i < r->n_nodes; i++)
        put_node(f, "divvy_redis_breaker_open", r->nodes[i].name, "", r->nodes[i].open);
    put_head(f, "divvy_redis_breaker_transitions_total", "counter",
             "Circuit breaker state changes per node, by the state entered.");
    for (unsigned i = 0; i < r->n_nodes; i++) {
        put_node(f, "divvy_redis_breaker_transitions_total", r->nodes[i].name, ",to=\"open\"",
                 r->nodes[i].opened);
        put_node(f, "divvy_redis_breaker_transitions_total", r->nodes[i].name,
                 ",to=\"closed\"", r->nodes[i].closed);
    }
    if (r->other)
        put_node(f, "divvy_redis_breaker_transitions_total", "other", ",to=\"open\"",
                 r->other_opened);
    put_head(f, "divvy_redis_fallbacks_total", "counter",
             "Rules Redis could not decide, answered by on_redis_error, by the answer given.");
    for (unsigned k = 0; k < METRICS_N_FALLBACK; k++)
        fprintf(f, "divvy_redis_fallbacks_total{policy=\"%s\"} %llu\n",
                metrics_fallback_name[k], (unsigned long long)r->fallbacks[k]);
    free(r);
}

/* The whole exposition into a malloc'd buffer. */
int metrics_prom_render(struct metrics *m, char **ret_buf, size_t *ret_len)
{
    struct metrics_gauges g;
    uint64_t buckets[N_BUCKETS + 1] = { 0 }, sum_ns = 0, cum = 0;
    size_t n_labels = metrics_labels_published(m), len = 0;
    char *buf = NULL;
    FILE *f;

    metrics_gauges_get(m, &g);
    f = open_memstream(&buf, &len);
    if (!f)
        return -ENOMEM;

    put_head(f, "divvy_hits_total", "counter", "Counter of total HITs to Divvy.");
    for (size_t slot = 0; slot < n_labels; slot++) {
        uint64_t n[METRICS_N_STATUS], any = 0;

        for (unsigned s = 0; s < METRICS_N_STATUS; s++)
            any |= n[s] = metrics_sum_hits(m, slot, s);
        /* Under rule ids no rule has the empty label: slot 0 only holds what
         * could not be counted apart (more than METRICS_LABELS_MAX ids). */
        if ((slot == 0 && !m->divvy_names && !any) || (m->hidden && slot == m->hidden))
            continue;
        for (unsigned s = 0; s < METRICS_N_STATUS; s++) {
            fprintf(f, "divvy_hits_total{status=\"%s\",rule_label=\"", metrics_status_name[s]);
            put_label_value(f, m->labels[slot]);
            fprintf(f, "\"} %llu\n", (unsigned long long)n[s]);
        }
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
        fprintf(f, "divvy_hit_duration_seconds_bucket{le=\"%s\"} %llu\n", metrics_bucket_le[b],
                (unsigned long long)cum);
    }
    /* _count is the +Inf bucket, so the two always agree within one scrape. */
    cum += buckets[N_BUCKETS];
    fprintf(f, "divvy_hit_duration_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    fprintf(f, "divvy_hit_duration_seconds_sum %.9f\n", (double)sum_ns / 1e9);
    fprintf(f, "divvy_hit_duration_seconds_count %llu\n", (unsigned long long)cum);

    if (m->divvy_names) {
        /* divvy's name, for its dashboards, although a gauge (promtool objects). */
        put_head(f, "divvy_tcp_connections_total", "gauge",
                 "Total number of open TCP connections to Divvy (divvyd: TCP and Unix socket).");
        fprintf(f, "divvy_tcp_connections_total %llu\n", (unsigned long long)g.connections);
    } else {
        put_head(f, "divvy_open_connections", "gauge",
                 "Open client connections, TCP and Unix socket.");
        fprintf(f, "divvy_open_connections %llu\n", (unsigned long long)g.connections);
    }

    put_head(f, "divvy_decisions_total", "counter",
             "Decided hits (a HIT or TAKE, a RESP DIVVY.HIT/TAKE, one RLS descriptor) by the "
             "protocol they came on and status.");
    for (unsigned p = 0; p < METRICS_N_PROTOCOL; p++)
        for (unsigned a = 0; a < 2; a++)
            fprintf(f, "divvy_decisions_total{protocol=\"%s\",status=\"%s\"} %llu\n",
                    metrics_protocol_name((enum metrics_protocol)p), a ? "rejected" : "accepted",
                    (unsigned long long)metrics_sum_decisions(m, p, a == 0));

    put_head(f, "divvy_errors_total", "counter", "Counter of total Divvy errors.");
    /* no-counter: only privileged rules answer it (their table full). */
    for (unsigned e = 1; e < N_ERRORS; e++)
        if (m->privileged || e != PROTO_E_NO_COUNTER)
            fprintf(f, "divvy_errors_total{code=\"%s\"} %llu\n",
                    proto_err_code((enum proto_err)e),
                    (unsigned long long)metrics_sum_errors(m, e));

    put_head(f, "divvy_denials_total", "counter",
             "Denied hits by cause (quota, zero-limit, table-full, redis-down, no-counter).");
    for (unsigned d = 0; d < METRICS_N_DENY; d++)
        if (m->privileged || d != METRICS_DENY_NO_COUNTER)
            fprintf(f, "divvy_denials_total{cause=\"%s\"} %llu\n",
                    metrics_deny_name((enum metrics_deny)d),
                    (unsigned long long)metrics_sum_denied(m, d));

    render_table(f, &g, m->privileged);
    if (g.have_admit)
        render_admit(f, &g.admit);
    if (g.have_adhoc)
        render_adhoc(f, &g.adhoc);
    if (g.have_fast_path_hits) {
        put_head(f, "divvy_fast_path_hits_total", "counter",
                 "Hits decided by clients in shared memory, counted in the fast-path table.");
        fprintf(f, "divvy_fast_path_hits_total %llu\n", (unsigned long long)g.fast_path_hits);
    }
    if (g.have_tls) {
        put_head(f, "divvy_tls_handshake_failures_total", "counter",
                 "TLS handshakes that failed (plain text, bad or missing client certificate, "
                 "no common version or cipher, the peer gone).");
        fprintf(f, "divvy_tls_handshake_failures_total %llu\n",
                (unsigned long long)g.tls_handshake_failures);
    }
    if (g.have_dlog)
        render_dlog(f, &g);
    if (g.have_fast_reports) {
        put_head(f, "divvy_fast_reports_total", "counter",
                 "Decisions fast-path clients reported for the decision log, by result.");
        fprintf(f, "divvy_fast_reports_total{result=\"recorded\"} %llu\n",
                (unsigned long long)(g.fast_reports - g.fast_reports_dropped));
        fprintf(f, "divvy_fast_reports_total{result=\"dropped\"} %llu\n",
                (unsigned long long)g.fast_reports_dropped);
    }
    render_fast_rules(f, m);
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
    metrics_process_render(f, m);

    if (fclose(f) != 0 || !buf) {
        free(buf);
        return -ENOMEM;
    }
    *ret_buf = buf;
    *ret_len = len;
    return 0;
}
