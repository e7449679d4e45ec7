/* SPDX-License-Identifier: MIT */
/*
 * metrics: divvyd's counters and where they are published.
 *
 * Workers count hits (by status and rule label, divvy's canary-accepted and
 * canary-rejected included), denials by cause, hit durations and ERR
 * replies in per-worker blocks that only their own thread writes (relaxed
 * atomic stores, no lock, no allocation on the hit path).  The main thread hands over the values it
 * owns (connections, tables, reloads, config generation) once per tick with
 * metrics_tick().  Readers sum the blocks with relaxed loads:
 *   - a Prometheus text endpoint (libmicrohttpd, on its own thread), off
 *     unless a listen address is given;
 *   - statsd over UDP as divvy sends it, flushed from metrics_tick().
 * Metric names are divvy's (divvy_hits_total{status,rule_label},
 * divvy_hit_duration_seconds, divvy_errors_total{code}) plus divvyd's own;
 * the gauge of open connections is divvy_open_connections, or divvy's
 * divvy_tcp_connections_total (a gauge despite its name) with
 * opts.divvy_names; the list is in docs/operations.md.
 *
 * divvy's environment variables, when set, override the options:
 * HTTP_SERVICE_PORT and PROMETHEUS_METRICS_PATH (the endpoint, on every
 * address as divvy does), STATSD_HOST, STATSD_PORT, STATSD_PREFIX.
 */
#ifndef DIVVY_METRICS_H
#define DIVVY_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "adhoc.h"
#include "admit.h"
#include "proto.h"
#include "rules.h"
#include "table.h"

#define METRICS_PATH_DEFAULT        "/metrics"
#define METRICS_STATSD_INTERVAL_MS  1000
#define METRICS_LABELS_MAX          4096    /* distinct rule labels counted apart */
#define METRICS_NAME_MAX            96      /* bytes of an unlabelled rule's match as its
                                             * rule_label (divvyd's names) */

/* The status label of divvy_hits_total, as divvy spells it. */
enum metrics_status {
    METRICS_ACCEPTED = 0,       /* "accepted" */
    METRICS_REJECTED,           /* "rejected" */
    METRICS_CANARY_ACCEPTED,    /* "canary-accepted": a canary rule that would have allowed */
    METRICS_CANARY_REJECTED,    /* "canary-rejected" */
    METRICS_N_STATUS
};

/* Why a hit was denied (divvy_denials_total{cause}, STATS denials_*). */
enum metrics_deny {
    METRICS_DENY_QUOTA = 0,     /* "quota": the rule's counter had too little credit */
    METRICS_DENY_ZERO_LIMIT,    /* "zero-limit": credit_limit = 0 always denies */
    METRICS_DENY_TABLE_FULL,    /* "table-full": no counter, when_full = deny */
    METRICS_DENY_REDIS_DOWN,    /* "redis-down": Redis unreachable, on_redis_error = closed */
    METRICS_DENY_NO_COUNTER,    /* "no-counter": ERR no-counter (privileged table full) */
    METRICS_N_DENY
};

/* "quota", "zero-limit", ...; "?" for another value. */
const char *metrics_deny_name(enum metrics_deny cause);

struct metrics_opts {
    unsigned workers;           /* per-worker blocks, >= 1 */
    const char *listen;         /* Prometheus endpoint "tcp:HOST:PORT" or "tcp:[V6]:PORT";
                                 * NULL: none */
    const char *path;           /* default METRICS_PATH_DEFAULT */
    const char *statsd_host;    /* NULL: no statsd */
    unsigned statsd_port;       /* 1..65535 */
    const char *statsd_prefix;  /* "" or NULL: none; a '.' is appended unless there, as
                                 * divvy's statsd client does */
    unsigned statsd_interval_ms;    /* 0: METRICS_STATSD_INTERVAL_MS */
    bool divvy_names;           /* divvy's names and labels (metrics.names = "divvy"): the
                                 * gauge divvy_tcp_connections_total, rule_label = the
                                 * rule's label ("" without one); else names promtool
                                 * accepts and rule_label = the rule's label, else its
                                 * match ("key=value ...", METRICS_NAME_MAX bytes at
                                 * most; "(default)" for the default rule) */
    bool privileged;            /* metrics.privileged: expose the login figures (per-rule
                                 * series of source = privileged rules, the privileged
                                 * table, no-counter); else they count only in totals */
    bool ignore_env;            /* do not read divvy's variables (tests) */
};

/* The front-end a decision came on (divvy_decisions_total{protocol}). */
enum metrics_protocol {
    METRICS_PROTO_LINE = 0,     /* "line": the line protocol, and libdivvy */
    METRICS_PROTO_RESP,         /* "resp": a resp: listener (DIVVY.HIT, DIVVY.TAKE) */
    METRICS_PROTO_RLS,          /* "rls": one descriptor of an Envoy RLS request */
    METRICS_N_PROTOCOL
};

/* "line", "resp", "rls"; "?" for another value. */
const char *metrics_protocol_name(enum metrics_protocol p);

/* What the main thread owns, handed over by metrics_tick(). */
struct metrics_gauges {
    uint64_t connections;       /* open client connections, TCP and Unix */
    uint64_t config_generation;
    uint64_t rules;
    uint64_t reloads_ok;
    uint64_t reloads_rejected;
    struct table_stats fast;    /* table_stats() of the fast-path table */
    struct table_stats priv;    /* ... and of the daemon-only table */
    bool have_admit;            /* admission counts below (admit.h) */
    struct admit_stats admit;
    struct table_stats privileged;  /* ... and of the privileged rules' table */
    bool have_fast_path_hits;   /* false until the table counts clients' hits */
    uint64_t fast_path_hits;
    bool have_adhoc;            /* RESP's ad-hoc buckets (adhoc.h): a resp: listener */
    struct adhoc_stats adhoc;
    bool have_tls;              /* TLS listeners (tls.h, docs/security.md) */
    uint64_t tls_handshake_failures;
    bool have_dlog;             /* the decision log is on (dlog_writer.h) */
    uint64_t dlog_records, dlog_dropped, dlog_reports_dropped, dlog_bytes, dlog_write_errors;
    bool have_fast_reports;     /* the decision log is on: fast-path clients report */
    uint64_t fast_reports;      /* REPORT lines received (STATS fast_reports) */
    uint64_t fast_reports_dropped;      /* ... not recorded (fast_reports_dropped) */
};

struct metrics;
struct metrics_worker;

/*
 * Creates the counters, applies divvy's environment variables (unless
 * @o->ignore_env; each override is logged), binds the Prometheus endpoint and
 * starts its thread, and opens the statsd socket.  Call from the main thread
 * before the workers start: a listen address in use fails startup
 * (-EADDRINUSE).  A statsd host that does not resolve is logged and retried,
 * not fatal.  On success *ret is new.  -EINVAL (bad address, port or path),
 * -ENOMEM, -errno of socket/bind/listen.
 */
int metrics_new(const struct metrics_opts *o, struct metrics **ret);

/* Stops the endpoint (joins its thread) and frees.  NULL-safe.  No worker may
 * count any more. */
void metrics_free(struct metrics *m);

/* The block of worker @id (< opts.workers); NULL when @m is NULL or @id is out of range. */
struct metrics_worker *metrics_worker(struct metrics *m, unsigned id);

/* ---- hit path: the owning worker only; every call is NULL-safe ----------------------- */

/*
 * Counts one HIT/TAKE outcome of rule @rule (an index into @rules, the
 * current rules of generation @generation) under @status.  Call inside the
 * RCU read-side section that yielded @rules.  The first call after a reload
 * maps the new rules' labels (one mutex, once per worker and reload); every
 * other call is two array lookups and one store.
 */
void metrics_hit(struct metrics_worker *w, const struct rules *rules, uint64_t generation,
                 uint32_t rule, enum metrics_status status);

/* Counts rule @rule that charged an allowed TAKE without deciding it (a
 * continue rule on the way): "accepted" under its rule_label, not a request
 * of its own (statsd's hit.accepted and the status line count requests).
 * As metrics_hit(). */
void metrics_charged(struct metrics_worker *w, const struct rules *rules, uint64_t generation,
                     uint32_t rule);

/* CLOCK_MONOTONIC in nanoseconds: take it when a hit starts. */
uint64_t metrics_clock_ns(void);

/* Records the duration of a hit that started at @start_ns (metrics_clock_ns()). */
void metrics_hit_done(struct metrics_worker *w, uint64_t start_ns);

/* Counts one decided HIT/TAKE (the request, not each rule) by the front-end it came on. */
void metrics_decision(struct metrics_worker *w, enum metrics_protocol proto, bool allowed);

/* Counts one ERR reply with @err's code. */
void metrics_error(struct metrics_worker *w, enum proto_err err);

/* Counts one denied HIT/TAKE (or an ERR no-counter in its place) by @cause. */
void metrics_denied(struct metrics_worker *w, enum metrics_deny cause);

/* ---- main thread ------------------------------------------------------------------- */

/* Hands over the gauges (copied) and, when the interval has passed, sends
 * statsd.  Main thread; call about once per second.  NULL-safe. */
void metrics_tick(struct metrics *m, const struct metrics_gauges *g, uint64_t now_ms);

/*
 * Whether anything reads the counter tables' figures of struct
 * metrics_gauges (fast, priv, privileged): only the Prometheus exposition
 * does.  Without it the main thread skips table_stats(), a scan of every
 * slot of each table, once per second.  NULL-safe (false).
 */
bool metrics_wants_tables(const struct metrics *m);

/*
 * Reads the fast-path table's per-rule counts (table_fast_rule()) and names
 * each rule from @rules (those of generation @generation; a rule id no
 * longer in force keeps the name it was first seen with, and one never seen
 * is looked for again at the next generation).  Main thread, inside the RCU
 * read-side section that yielded @rules, before metrics_tick().  NULL-safe.
 */
void metrics_fast_rules(struct metrics *m, struct table *fast, const struct rules *rules,
                        uint64_t generation);

/* "N rules (generation G), H hits (A accepted, R rejected), C connections" for
 * notify_status(), from the counters and the last gauges.  Any thread. */
void metrics_status_line(struct metrics *m, char *buf, size_t size);

/* The endpoint's bound TCP port (useful with port 0), or 0 when there is none. */
int metrics_http_port(const struct metrics *m);

/* ---- Redis: per node, any thread; fallbacks, the owning worker ----------------------- */

/*
 * The breaker of Redis node @node ("HOST:PORT", "unix:PATH",
 * "sentinel:NAME"; store.h on_breaker) reported @open.  The first report
 * of a node gives it its series (divvy_redis_up, divvy_redis_breaker_open,
 * divvy_redis_breaker_transitions_total{node}); a report that changes the
 * node's state counts one transition (a node first reported open counts
 * one to "open").  Up to METRICS_REDIS_NODES nodes are kept, in the order
 * they first reported; a report of any further node only counts its trips
 * under node="other" (logged once).  Takes the lock: breaker changes are
 * rare.  NULL-safe.
 */
#define METRICS_REDIS_NODES         64
#define METRICS_REDIS_NODE_MAX      272     /* bytes of a node name kept, NUL included */
void metrics_redis_breaker(struct metrics *m, const char *node, bool open);

/* What on_redis_error answered for a rule Redis could not decide
 * (divvy_redis_fallbacks_total{policy}); the order of config.h's
 * enum config_redis_error. */
enum metrics_fallback {
    METRICS_FALLBACK_LOCAL = 0, /* "local": decided from this host's table */
    METRICS_FALLBACK_OPEN,      /* "open": allowed */
    METRICS_FALLBACK_CLOSED,    /* "closed": denied */
    METRICS_N_FALLBACK
};

/* Counts one rule answered by on_redis_error under @how. */
void metrics_redis_fallback(struct metrics_worker *w, enum metrics_fallback how);

#endif
