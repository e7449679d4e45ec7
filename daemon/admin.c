/* SPDX-License-Identifier: MIT */
/*
 * admin: EXPLAIN, RULES and STATS (see admin.h; COUNTERS is counters.c's,
 * RELOAD and DROPIN admin_reload.c's).  Each
 * builds its reply lines on the stack and hands them to line_text(), so
 * they keep their place among the connection's replies; none waits for
 * anything but an RCU read-side section.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urcu/urcu-memb.h>

#include "adhoc.h"
#include "admin.h"
#include "admit.h"
#include "algo.h"
#include "calendar.h"
#include "clock.h"
#include "conn.h"
#include "eval.h"
#include "line_reply.h"
#include "proto.h"
#include "reload.h"
#include "srv_int.h"
#include "store.h"
#include "table.h"
#include "tls.h"
#include "worker_int.h"

void admin_append_quoted(char *buf, size_t size, size_t *pos, const char *s)
{
    if (*pos + 1 < size)
        buf[(*pos)++] = '"';
    for (; *s && *pos + 2 < size; s++)
        buf[(*pos)++] = (*s == '"' || (unsigned char)*s < 0x20) ? '_' : *s;
    buf[(*pos)++] = '"';
    buf[*pos] = '\0';
}

void admin_append_fmt(char *buf, size_t size, size_t *pos, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*pos >= size)
        return;
    va_start(ap, fmt);
    n = vsnprintf(buf + *pos, size - *pos, fmt, ap);
    va_end(ap);
    if (n > 0)
        *pos = *pos + (size_t)n < size ? *pos + (size_t)n : size - 1;
}

static const char *policy_name(enum rules_policy p)
{
    return p == RULES_POLICY_CANARY ? "canary" : p == RULES_POLICY_CONTINUE ? "continue" : "stop";
}

static const char *store_name(enum rules_store s)
{
    return s == RULES_STORE_STRICT ? "strict" : s == RULES_STORE_LEASE ? "lease" : "local";
}

static const char *algo_name(enum rules_algo a)
{
    return a == RULES_ALGO_TOKEN_BUCKET     ? "token_bucket"
           : a == RULES_ALGO_SLIDING_WINDOW ? "sliding_window"
           : a == RULES_ALGO_GCRA           ? "gcra"
           : a == RULES_ALGO_LOCKOUT        ? "lockout"
                                            : "window";
}

static const char *on_error_name(enum config_redis_error e)
{
    return e == CONFIG_REDIS_ERROR_OPEN ? "open" : e == CONFIG_REDIS_ERROR_CLOSED ? "closed"
                                                                                : "local";
}

/*
 * EXPLAIN's cause= for matching rule @r (docs/protocol.md "EXPLAIN"): what
 * gives its answer now.  Zero semantics need no counter; a rule kept in
 * Redis while the breaker is open is answered by on_redis_error (a lease
 * rule once this host's lease is spent).
 */
static const char *explain_cause(const struct srv *s, const struct rules_rule *r)
{
    struct eval_outcome o;

    if (eval_zero(r, &o))
        return o.allowed ? "no-limit" : "zero-limit";
    if (r->store == RULES_STORE_LOCAL || !s->o.store || !store_breaker_open(s->o.store))
        return "counter";
    switch (s->o.on_redis_error) {
    case CONFIG_REDIS_ERROR_OPEN:
        return "redis-down-open";
    case CONFIG_REDIS_ERROR_CLOSED:
        return "redis-down";
    default:
        return "redis-down-local";
    }
}

void admin_explain(struct conn *c, const struct proto_req *req)
{
    struct rules_req rq = { .kv = req->kv, .n_kv = req->n_kv, .privileged = c->privileged };
    uint32_t path[RULES_MATCH_MAX];
    char line[2 * PROTO_LINE_MAX], text[PROTO_LINE_MAX];
    const struct reload_state *st;
    struct rules_rule r;
    size_t n_path, k = 0, pos;
    uint32_t last;

    urcu_memb_read_lock();
    st = reload_current(c->w->s->o.reload);
    n_path = rules_match(st->rules, &rq, path);
    last = path[n_path - 1];
    pos = 0;
    admin_append_fmt(line, sizeof(line), &pos, "OK %u\n", last + 1);
    line_text(c, line);
    for (uint32_t i = 0; i <= last && !c->dead; i++) {
        const char *verdict = "no-match", *cause = "none";

        if (rules_get(st->rules, i, &r) < 0)
            break;
        text[0] = '\0';
        if (k < n_path && path[k] == i) {
            verdict = i == last ? "decides" : policy_name(r.policy);
            cause = explain_cause(c->w->s, &r);
            k++;
        } else if (rules_why_not(st->rules, i, &rq, text, sizeof(text)) < 0) {
            snprintf(text, sizeof(text), "%s", "(reason too long)");
        }
        pos = 0;
        admin_append_fmt(line, sizeof(line), &pos, "rule=%u id=%s verdict=%s match=", i, r.id_str,
                         verdict);
        {
            char desc[PROTO_LINE_MAX];

            if (rules_describe(st->rules, i, desc, sizeof(desc)) < 0)
                snprintf(desc, sizeof(desc), "%s", "(too long)");
            admin_append_quoted(line, sizeof(line), &pos, desc);
        }
        admin_append_fmt(line, sizeof(line), &pos, " reason=");
        admin_append_quoted(line, sizeof(line), &pos, text);
        /* resettable: whether RESET forgets this rule's counter (divvyctl reset
         * says when a request's path holds none it may forget). */
        admin_append_fmt(line, sizeof(line), &pos, " cause=%s resettable=%s\n", cause,
                         r.resettable ? "true" : "false");
        line_text(c, line);
    }
    urcu_memb_read_unlock();
}

/* The durations as the algorithms count them (docs/protocol.md "RULES"):
 * reset_ms, and a bucket's or GCRA's refill settings. */
static void admin_rules_algo(char *line, size_t size, size_t *pos, const struct rules_rule *r)
{
    admin_append_fmt(line, size, pos, " reset_ms=%lld", (long long)r->reset_ms);
    if (r->algo != RULES_ALGO_TOKEN_BUCKET && r->algo != RULES_ALGO_GCRA)
        return;
    admin_append_fmt(line, size, pos, " refill_amount=%lld refill_ms=%lld",
                     (long long)r->refill_amount, (long long)r->refill_ms);
    if (r->algo == RULES_ALGO_TOKEN_BUCKET)
        admin_append_fmt(line, size, pos, " refill=%s", r->continuous ? "continuous" : "steps");
}

void admin_rules(struct conn *c, const struct proto_req *req)
{
    char line[2 * PROTO_LINE_MAX], desc[PROTO_LINE_MAX], actor[PROTO_LINE_MAX];
    const struct reload_state *st;
    struct rules_rule r;
    size_t n, pos;

    (void)req;
    urcu_memb_read_lock();
    st = reload_current(c->w->s->o.reload);
    n = rules_count(st->rules);
    pos = 0;
    admin_append_fmt(line, sizeof(line), &pos, "OK %zu\n", n);
    line_text(c, line);
    for (uint32_t i = 0; i < n && !c->dead; i++) {
        if (rules_get(st->rules, i, &r) < 0)
            break;
        if (rules_describe(st->rules, i, desc, sizeof(desc)) < 0)
            snprintf(desc, sizeof(desc), "%s", "(too long)");
        if (rules_actor_keys(st->rules, i, actor, sizeof(actor)) < 0)
            snprintf(actor, sizeof(actor), "%s", "(too long)");
        pos = 0;
        admin_append_fmt(line, sizeof(line), &pos, "rule=%u id=%s label=", i, r.id_str);
        admin_append_quoted(line, sizeof(line), &pos, r.label);
        admin_append_fmt(line, sizeof(line), &pos, " match=");
        admin_append_quoted(line, sizeof(line), &pos, desc);
        admin_append_fmt(line, sizeof(line), &pos,
                         " credit_limit=%lld reset_seconds=%lld algorithm=%s policy=%s source=%s"
                         " fast_path=%s store=%s max_debit=%lld actor=",
                         (long long)r.credit_limit, (long long)r.reset_seconds, algo_name(r.algo),
                         policy_name(r.policy),
                         r.source == RULES_SOURCE_PRIVILEGED ? "privileged" : "any",
                         r.fast_path ? "true" : "false", store_name(r.store),
                         (long long)rules_max_debit(&r));
        admin_append_quoted(line, sizeof(line), &pos, actor);
        admin_append_fmt(line, sizeof(line), &pos, " resettable=%s",
                         r.resettable ? "true" : "false");
        admin_rules_algo(line, sizeof(line), &pos, &r);
        /* Calendar windows only: other rules' lines are as they were. */
        if (r.calendar)
            admin_append_fmt(line, sizeof(line), &pos, " calendar=%s time_zone=%s",
                             calendar_unit_name((enum calendar_unit)r.calendar), r.time_zone);
        admin_append_fmt(line, sizeof(line), &pos, "\n");
        line_text(c, line);
    }
    urcu_memb_read_unlock();
}

void admin_stats(struct conn *c, const struct proto_req *req)
{
    struct srv *s = c->w->s;
    struct wstats sum = { 0 };
    struct table_stats fast, priv, prv;
    struct store_stats rs = { 0 };
    uint64_t gen, n_rules, ok, rejected, now = clock_now_ms();
    const struct reload_state *st;
    struct admit_stats as;
    struct rules_rule r;
    char buf[6144], head[32], admit_text[1024], address[512] = "none";
    size_t pos = 0, n_lines = 0, n_strict = 0, n_lease = 0;

    (void)req;
    for (unsigned i = 0; i < s->n_workers; i++) {
        const struct wstats *ws = &s->workers[i].st;

        sum.hits += stat_get(&ws->hits);
        sum.accepted += stat_get(&ws->accepted);
        sum.rejected += stat_get(&ws->rejected);
        sum.canary_accepted += stat_get(&ws->canary_accepted);
        sum.canary_rejected += stat_get(&ws->canary_rejected);
        sum.errors += stat_get(&ws->errors);
        sum.table_full += stat_get(&ws->table_full);
        sum.redis_fallbacks += stat_get(&ws->redis_fallbacks);
        sum.lease_fetches += stat_get(&ws->lease_fetches);
        sum.refill_hints += stat_get(&ws->refill_hints);
        sum.refill_dropped += stat_get(&ws->refill_dropped);
        sum.reports += stat_get(&ws->reports);
        sum.reports_dropped += stat_get(&ws->reports_dropped);
        sum.scripts.scripts += stat_get(&ws->scripts.scripts);
        sum.scripts.requests += stat_get(&ws->scripts.requests);
        for (unsigned d = 0; d < METRICS_N_DENY; d++)
            sum.denials[d] += stat_get(&ws->denials[d]);
    }
    urcu_memb_read_lock();
    st = reload_current(s->o.reload);
    gen = st->generation;
    n_rules = rules_count(st->rules);
    for (uint32_t i = 0; i < n_rules; i++) {
        if (rules_get(st->rules, i, &r) < 0)
            continue;
        n_strict += r.store == RULES_STORE_STRICT;
        n_lease += r.store == RULES_STORE_LEASE;
    }
    urcu_memb_read_unlock();
    reload_counts(s->o.reload, &ok, &rejected);
    table_stats(s->o.fast, now, &fast);
    table_stats(s->o.priv, now, &priv);
    table_stats(s->o.privileged, now, &prv);
    if (s->o.store) {
        store_stats(s->o.store, &rs);
        store_address(s->o.store, address, sizeof(address));
    }
    admit_stats(s->admit, &as);
    admit_stats_text(s->admit, admit_text, sizeof(admit_text));
    admin_append_fmt(buf, sizeof(buf), &pos,
                     "uptime_seconds=%llu\nconnections=%llu\nhits_total=%llu\n"
                     "hits_accepted=%llu\nhits_rejected=%llu\nhits_canary_accepted=%llu\n"
                     "hits_canary_rejected=%llu\nerrors_total=%llu\nreloads_ok=%llu\n"
                     "reloads_rejected=%llu\nconfig_generation=%llu\nrules=%llu\n"
                     "table_slots=%llu\ntable_live=%llu\nfast_table_slots=%llu\n"
                     "fast_table_live=%llu\ntable_full_events=%llu\nfast_path_hits=%llu\n",
                     (unsigned long long)((now - s->started_ms) / 1000),
                     (unsigned long long)(as.tcp_conns + as.unix_conns + as.reserve_conns),
                     (unsigned long long)sum.hits, (unsigned long long)sum.accepted,
                     (unsigned long long)sum.rejected, (unsigned long long)sum.canary_accepted,
                     (unsigned long long)sum.canary_rejected, (unsigned long long)sum.errors,
                     (unsigned long long)ok, (unsigned long long)rejected,
                     (unsigned long long)gen, (unsigned long long)n_rules,
                     (unsigned long long)priv.slots, (unsigned long long)priv.live,
                     (unsigned long long)fast.slots, (unsigned long long)fast.live,
                     (unsigned long long)(sum.table_full + table_fast_full(s->o.fast)),
                     (unsigned long long)table_fast_hits(s->o.fast));
    /* docs/security.md: only with TLS listeners. */
    if (s->o.tls)
        admin_append_fmt(buf, sizeof(buf), &pos, "tls_handshake_failures=%llu\n",
                         (unsigned long long)tls_handshake_failures());
    /* docs/redis.md "Monitoring": state unused (no rule needs Redis), up, down. */
    admin_append_fmt(buf, sizeof(buf), &pos,
                     "redis_state=%s\nredis_connections=%u\nredis_requests=%llu\n"
                     "redis_errors=%llu\n"
                     "redis_timeouts=%llu\nredis_breaker_trips=%llu\nredis_fallbacks=%llu\n"
                     "redis_lease_fetches=%llu\nredis_noscript=%llu\nredis_refill_hints=%llu\n"
                     "redis_refill_hints_dropped=%llu\nredis_scripts=%llu\n"
                     "redis_script_requests=%llu\n",
                     !rs.wanted ? "unused" : rs.breaker_open ? "down" : "up", rs.conns_up,
                     (unsigned long long)rs.requests, (unsigned long long)rs.errors,
                     (unsigned long long)rs.timeouts, (unsigned long long)rs.trips,
                     (unsigned long long)sum.redis_fallbacks, (unsigned long long)sum.lease_fetches,
                     (unsigned long long)rs.noscript, (unsigned long long)sum.refill_hints,
                     (unsigned long long)sum.refill_dropped,
                     (unsigned long long)sum.scripts.scripts,
                     (unsigned long long)sum.scripts.requests);
    if (rs.nodes_known)
        admin_append_fmt(buf, sizeof(buf), &pos,
                         "redis_cluster_nodes=%u\nredis_cluster_nodes_up=%u\n"
                         "redis_redirects=%llu\n", rs.nodes_known, rs.nodes_up,
                         (unsigned long long)rs.redirects);
    admin_append_fmt(buf, sizeof(buf), &pos, "table_evictions=%llu\n",
                     (unsigned long long)(fast.evictions + priv.evictions));
    /* docs/dev/fast-report.md: fast-path clients' REPORT lines, and those not recorded. */
    admin_append_fmt(buf, sizeof(buf), &pos, "fast_reports=%llu\nfast_reports_dropped=%llu\n",
                     (unsigned long long)sum.reports, (unsigned long long)sum.reports_dropped);
    /* The login figures (login counters, ERR no-counter) are privileged
     * peers' only: docs/operations.md "What STATS and metrics reveal". */
    if (c->privileged)
        admin_append_fmt(buf, sizeof(buf), &pos,
                         "privileged_table_slots=%llu\nprivileged_table_live=%llu\n"
                         "privileged_table_evictions=%llu\n",
                         (unsigned long long)prv.slots, (unsigned long long)prv.live,
                         (unsigned long long)prv.evictions);
    /* RESP's ad-hoc buckets (docs/resp.md): only with a resp: listener. */
    if (s->o.adhoc) {
        struct adhoc_stats ah;

        adhoc_stats(s->o.adhoc, &ah);
        admin_append_fmt(buf, sizeof(buf), &pos,
                         "adhoc_slots=%llu\nadhoc_used=%llu\nadhoc_privileged=%llu\n"
                         "adhoc_peers=%llu\nadhoc_evictions=%llu\nadhoc_busy=%llu\n",
                         (unsigned long long)ah.slots, (unsigned long long)ah.used,
                         (unsigned long long)ah.privileged, (unsigned long long)ah.peers,
                         (unsigned long long)ah.evictions, (unsigned long long)ah.busy);
    }
    admin_append_fmt(buf, sizeof(buf), &pos, "%s", admit_text);
    /* docs/redis.md "Monitoring": where the store is, since when it is down,
     * what answers then, and how many rules keep their counters there. */
    admin_append_fmt(buf, sizeof(buf), &pos,
                     "redis_address=%s\nredis_on_error=%s\nredis_down_seconds=%llu\n"
                     "redis_rules_strict=%zu\nredis_rules_lease=%zu\n",
                     address, on_error_name(s->o.on_redis_error),
                     (unsigned long long)(rs.down_ms / 1000), n_strict, n_lease);
    /* Denied TAKEs by cause (metrics.h), names as divvy_denials_total's. */
    for (unsigned d = 0; d < METRICS_N_DENY; d++) {
        char name[32];

        if (d == METRICS_DENY_NO_COUNTER && !c->privileged)
            continue;
        snprintf(name, sizeof(name), "%s", metrics_deny_name((enum metrics_deny)d));
        for (char *p = name; *p; p++)
            *p = *p == '-' ? '_' : *p;
        admin_append_fmt(buf, sizeof(buf), &pos, "denials_%s=%llu\n", name,
                         (unsigned long long)sum.denials[d]);
    }
    for (size_t i = 0; i < pos; i++)
        n_lines += buf[i] == '\n';
    snprintf(head, sizeof(head), "OK %zu\n", n_lines);
    line_text(c, head);
    line_text(c, buf);
}
