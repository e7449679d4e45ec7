/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/metrics.c: the Prometheus text exposition (names,
 * labels, HELP/TYPE, cumulative histogram buckets), per-worker sums, labels
 * across reloads, the Redis hooks, the real libmicrohttpd endpoint on a
 * loopback port, statsd datagrams received on a real UDP socket, divvy's
 * environment variables, and (when promtool is installed) `promtool check
 * metrics` on a rendered exposition.  Links the module from
 * libdivvyd.a, as divvyd does.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "diag.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/metrics_int.h"

#define BIG 65536

struct fixture {
    struct metrics *m;
    struct rules *rules;        /* generation 1: canary "canary-rule", "cookies", default */
    struct rules *rules2;       /* generation 2: "cookies" moved first, "new-rule", default */
    char *text;                 /* last render */
};

static void add_rule(struct rules_spec *spec, unsigned line, const char *key, const char *label,
                     enum rules_policy policy)
{
    struct rules_rule_spec *r;

    assert_int_equal(rules_spec_add(spec, "test.conf", line, &r), 0);
    if (key)
        assert_int_equal(rules_spec_add_match(r, key, "*", line), 0);
    r->credit_limit = 10;
    r->reset_seconds = 60;
    r->policy = policy;
    r->is_default = key == NULL;
    if (label) {
        r->label = strdup(label);
        assert_non_null(r->label);
    }
}

static struct rules *compile(uint64_t generation, int variant)
{
    struct rules_spec spec = { 0 };
    struct rules *rules = NULL;
    struct diag diag;

    if (variant == 1) {
        add_rule(&spec, 1, "a", "canary-rule", RULES_POLICY_CANARY);
        add_rule(&spec, 2, "b", "cookies", RULES_POLICY_STOP);
    } else {
        add_rule(&spec, 1, "b", "cookies", RULES_POLICY_STOP);
        add_rule(&spec, 2, "c", "new-rule", RULES_POLICY_STOP);
    }
    add_rule(&spec, 3, NULL, NULL, RULES_POLICY_STOP);
    diag_init(&diag);
    assert_int_equal(rules_compile(&spec, generation, &rules, &diag), 0);
    rules_spec_free(&spec);
    return rules;
}

static int setup_opts(void **state, const struct metrics_opts *o)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (!f || metrics_new(o, &f->m) < 0)
        return -1;
    f->rules = compile(1, 1);
    f->rules2 = compile(2, 2);
    *state = f;
    return 0;
}

static int setup(void **state)
{
    struct metrics_opts o = { .workers = 2, .ignore_env = true };

    return setup_opts(state, &o);
}

/* metrics.names = "divvy". */
static int setup_divvy(void **state)
{
    struct metrics_opts o = { .workers = 2, .ignore_env = true, .divvy_names = true };

    return setup_opts(state, &o);
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    metrics_free(f->m);
    rules_free(f->rules);
    rules_free(f->rules2);
    free(f->text);
    free(f);
    return 0;
}

static const char *scrape(struct fixture *f)
{
    size_t len = 0;

    free(f->text);
    f->text = NULL;
    assert_int_equal(metrics_prom_render(f->m, &f->text, &len), 0);
    assert_int_equal(strlen(f->text), len);
    return f->text;
}

/* Asserts that @text has the exact line @line. */
static void expect_line(const char *text, const char *line)
{
    size_t n = strlen(line);

    for (const char *p = text; (p = strstr(p, line)) != NULL; p += n)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return;
    fail_msg("no line \"%s\" in:\n%s", line, text);
}

static void expect_no(const char *text, const char *needle)
{
    if (strstr(text, needle))
        fail_msg("\"%s\" should not be in:\n%s", needle, text);
}

/* The main thread scans the counter tables only for a reader of their gauges. */
static void test_metrics_wants_tables_only_with_endpoint(void **state)
{
    struct fixture *f = *state;
    struct metrics_opts o = { .workers = 1, .ignore_env = true, .listen = "tcp:127.0.0.1:0" };
    struct metrics *m = NULL;

    assert_false(metrics_wants_tables(NULL));
    assert_false(metrics_wants_tables(f->m));
    assert_int_equal(metrics_new(&o, &m), 0);
    assert_true(metrics_wants_tables(m));
    metrics_free(m);
}

static void test_metrics_exposition_when_idle(void **state)
{
    struct fixture *f = *state;
    const char *t = scrape(f);

    expect_line(t, "# HELP divvy_hits_total Counter of total HITs to Divvy.");
    expect_line(t, "# TYPE divvy_hits_total counter");
    /* No rule is named "": the empty slot shows only once it counted something. */
    expect_no(t, "rule_label=\"\"");
    expect_line(t, "# TYPE divvy_hit_duration_seconds histogram");
    expect_line(t, "divvy_hit_duration_seconds_bucket{le=\"1e-05\"} 0");
    expect_line(t, "divvy_hit_duration_seconds_bucket{le=\"10\"} 0");
    expect_line(t, "divvy_hit_duration_seconds_bucket{le=\"+Inf\"} 0");
    expect_line(t, "divvy_hit_duration_seconds_count 0");
    expect_line(t, "# TYPE divvy_open_connections gauge");
    expect_line(t, "divvy_open_connections 0");
    expect_no(t, "divvy_tcp_connections_total");
    expect_line(t, "# TYPE divvy_errors_total counter");
    expect_line(t, "divvy_errors_total{code=\"unknown-command\"} 0");
    expect_line(t, "divvy_errors_total{code=\"unknown\"} 0");
    expect_line(t, "divvy_errors_total{code=\"busy\"} 0");
    expect_line(t, "divvy_reloads_total{result=\"ok\"} 0");
    expect_line(t, "divvy_config_generation 0");
    expect_line(t, "divvy_build_info{version=\"" DIVVY_VERSION "\"} 1");
    /* Shown only once known. */
    expect_no(t, "divvy_redis_");
    expect_no(t, "divvy_fast_path_hits_total");
    expect_no(t, "divvy_fast_reports_total");
    /* Every sample line belongs to a metric declared above it. */
    for (const char *p = t; *p; p = strchr(p, '\n') + 1) {
        char name[128], type[160];
        size_t n = strcspn(p, "{ ");

        if (*p == '#')
            continue;
        assert_true(n < sizeof(name));
        memcpy(name, p, n);
        name[n] = '\0';
        if (strstr(name, "divvy_hit_duration_seconds_") == name)
            strcpy(name, "divvy_hit_duration_seconds");
        snprintf(type, sizeof(type), "# TYPE %s ", name);
        assert_non_null(strstr(t, type));
    }
}

static void test_metrics_hits_by_status_and_label(void **state)
{
    struct fixture *f = *state;
    struct metrics_worker *w0 = metrics_worker(f->m, 0), *w1 = metrics_worker(f->m, 1);
    const char *t;

    assert_non_null(w0);
    assert_non_null(w1);
    assert_null(metrics_worker(f->m, 2));
    /* Rule 0 is a canary, rule 1 "cookies", rule 2 the unlabelled default. */
    metrics_hit(w0, f->rules, 1, 0, METRICS_CANARY_ACCEPTED);
    metrics_hit(w0, f->rules, 1, 0, METRICS_CANARY_REJECTED);
    metrics_hit(w0, f->rules, 1, 1, METRICS_ACCEPTED);
    metrics_hit(w1, f->rules, 1, 1, METRICS_ACCEPTED);
    metrics_hit(w1, f->rules, 1, 1, METRICS_ACCEPTED);
    metrics_hit(w1, f->rules, 1, 1, METRICS_REJECTED);
    metrics_hit(w1, f->rules, 1, 2, METRICS_REJECTED);
    /* An index the rules do not have counts as unlabelled, never crashes. */
    metrics_hit(w1, f->rules, 1, 99, METRICS_ACCEPTED);
    metrics_hit(NULL, f->rules, 1, 1, METRICS_ACCEPTED);
    metrics_hit(w1, f->rules, 1, 1, METRICS_N_STATUS);
    t = scrape(f);
    expect_line(t, "divvy_hits_total{status=\"canary-accepted\",rule_label=\"canary-rule\"} 1");
    expect_line(t, "divvy_hits_total{status=\"canary-rejected\",rule_label=\"canary-rule\"} 1");
    expect_line(t, "divvy_hits_total{status=\"accepted\",rule_label=\"canary-rule\"} 0");
    expect_line(t, "divvy_hits_total{status=\"accepted\",rule_label=\"cookies\"} 3");
    expect_line(t, "divvy_hits_total{status=\"rejected\",rule_label=\"cookies\"} 1");
    /* The unlabelled default rule as "(default)", not its hex id; "" holds
     * only the index no rule has. */
    expect_line(t, "divvy_hits_total{status=\"rejected\",rule_label=\"(default)\"} 1");
    expect_line(t, "divvy_hits_total{status=\"rejected\",rule_label=\"\"} 0");
    expect_line(t, "divvy_hits_total{status=\"accepted\",rule_label=\"\"} 1");
}

/*
 * Unlabelled rules under divvyd's names: their match as divvyctl shows it
 * (not a hex id), '"' escaped for the exposition, a byte outside
 * printable ASCII as '?', cut to METRICS_NAME_MAX bytes with "..."; in
 * statsd one name component.
 */
static void test_metrics_unlabelled_by_match(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    struct rules *rules = NULL;
    struct metrics *m = NULL;
    struct metrics_opts o = { .workers = 1, .ignore_env = true };
    char long_value[200], want[300], *text = NULL;
    size_t len;
    struct diag diag;

    (void)state;
    memset(long_value, 'x', sizeof(long_value) - 1);
    long_value[sizeof(long_value) - 1] = '\0';
    assert_int_equal(rules_spec_add(&spec, "test.conf", 1, &r), 0);
    assert_int_equal(rules_spec_add_match(r, "path", "/a b\xc3\xa9", 1), 0);
    assert_int_equal(rules_spec_add_match(r, "method", "GET", 1), 0);
    r->credit_limit = 10;
    r->reset_seconds = 60;
    assert_int_equal(rules_spec_add(&spec, "test.conf", 2, &r), 0);
    assert_int_equal(rules_spec_add_match(r, "user", long_value, 2), 0);
    r->credit_limit = 10;
    r->reset_seconds = 60;
    add_rule(&spec, 3, NULL, NULL, RULES_POLICY_STOP);
    diag_init(&diag);
    if (rules_compile(&spec, 1, &rules, &diag) < 0)
        fail_msg("%s", diag.n ? diag.e[0].msg : "?");
    rules_spec_free(&spec);
    assert_int_equal(metrics_new(&o, &m), 0);
    for (uint32_t i = 0; i < 3; i++)
        metrics_hit(metrics_worker(m, 0), rules, 1, i, METRICS_REJECTED);
    assert_int_equal(metrics_prom_render(m, &text, &len), 0);
    expect_line(text, "divvy_hits_total{status=\"rejected\",rule_label="
                      "\"method=GET path=\\\"/a b?" "?\\\"\"} 1");
    snprintf(want, sizeof(want), "divvy_hits_total{status=\"rejected\",rule_label=\"user=%.*s...\"} 1",
             METRICS_NAME_MAX - 8, long_value);
    expect_line(text, want);
    expect_line(text, "divvy_hits_total{status=\"rejected\",rule_label=\"(default)\"} 1");
    free(text);
    metrics_free(m);
    rules_free(rules);
}

/* metrics.names = "divvy": divvy's names, and rule_label = the label, "" without one. */
static void test_metrics_divvy_names(void **state)
{
    struct fixture *f = *state;
    struct metrics_gauges g = { .connections = 2 };
    const char *t;

    metrics_hit(metrics_worker(f->m, 0), f->rules, 1, 1, METRICS_ACCEPTED);
    metrics_hit(metrics_worker(f->m, 1), f->rules, 1, 2, METRICS_REJECTED);
    metrics_tick(f->m, &g, 1);
    t = scrape(f);
    expect_line(t, "divvy_hits_total{status=\"accepted\",rule_label=\"cookies\"} 1");
    expect_line(t, "divvy_hits_total{status=\"rejected\",rule_label=\"\"} 1");
    expect_line(t, "divvy_hits_total{status=\"canary-accepted\",rule_label=\"\"} 0");
    expect_line(t, "# TYPE divvy_tcp_connections_total gauge");
    expect_line(t, "divvy_tcp_connections_total 2");
    expect_no(t, "divvy_open_connections");
}

/* A continue rule that charged counts under its label, not as a request. */
static void test_metrics_charged(void **state)
{
    struct fixture *f = *state;
    struct metrics_gauges g = { .rules = 3 };
    char status[256];
    const char *t;

    metrics_charged(metrics_worker(f->m, 0), f->rules, 1, 1);
    metrics_charged(metrics_worker(f->m, 1), f->rules, 1, 1);
    metrics_hit(metrics_worker(f->m, 1), f->rules, 1, 2, METRICS_ACCEPTED);
    metrics_charged(NULL, f->rules, 1, 1);
    metrics_tick(f->m, &g, 1);
    t = scrape(f);
    expect_line(t, "divvy_hits_total{status=\"accepted\",rule_label=\"cookies\"} 2");
    metrics_status_line(f->m, status, sizeof(status));
    assert_string_equal(status, "3 rules (generation 0), 1 hits (1 accepted, 0 rejected), "
                                "0 connections");
}

static void test_metrics_labels_survive_reloads(void **state)
{
    struct fixture *f = *state;
    struct metrics_worker *w = metrics_worker(f->m, 0);
    const char *t;

    metrics_hit(w, f->rules, 1, 1, METRICS_ACCEPTED);           /* cookies at index 1 */
    metrics_hit(w, f->rules2, 2, 0, METRICS_ACCEPTED);          /* cookies at index 0 now */
    metrics_hit(w, f->rules2, 2, 1, METRICS_REJECTED);          /* a label new in gen 2 */
    t = scrape(f);
    expect_line(t, "divvy_hits_total{status=\"accepted\",rule_label=\"cookies\"} 2");
    expect_line(t, "divvy_hits_total{status=\"rejected\",rule_label=\"new-rule\"} 1");
    /* A label a reload removed keeps its counts: counters never go back. */
    expect_line(t, "divvy_hits_total{status=\"accepted\",rule_label=\"canary-rule\"} 0");
}

static void test_metrics_histogram_buckets(void **state)
{
    struct fixture *f = *state;
    struct metrics_worker *w0 = metrics_worker(f->m, 0), *w1 = metrics_worker(f->m, 1);
    uint64_t start;
    const char *t;

    metrics_observe_ns(w0, 5000);               /* 5 us */
    metrics_observe_ns(w0, 10000);              /* exactly 10 us: le="1e-05" is inclusive */
    metrics_observe_ns(w1, 10001);
    metrics_observe_ns(w1, 2000000);            /* 2 ms */
    metrics_observe_ns(w1, 2000000000ull);      /* 2 s */
    metrics_observe_ns(w0, 20000000000ull);     /* 20 s: only +Inf */
    t = scrape(f);
    expect_line(t, "divvy_hit_duration_seconds_bucket{le=\"2.5e-05\"} 3");
    expect_line(t, "divvy_hit_duration_seconds_bucket{le=\"0.0025\"} 4");
    expect_line(t, "divvy_hit_duration_seconds_bucket{le=\"1\"} 4");
    expect_line(t, "divvy_hit_duration_seconds_bucket{le=\"2.5\"} 5");
    expect_line(t, "divvy_hit_duration_seconds_bucket{le=\"10\"} 5");
    expect_line(t, "divvy_hit_duration_seconds_bucket{le=\"+Inf\"} 6");
    expect_line(t, "divvy_hit_duration_seconds_count 6");
    assert_non_null(strstr(t, "divvy_hit_duration_seconds_sum 22.0"));
    /* A timed hit: somewhere below 10 s, counted once. */
    start = metrics_clock_ns();
    metrics_hit_done(w0, start);
    metrics_hit_done(NULL, start);
    t = scrape(f);
    expect_line(t, "divvy_hit_duration_seconds_bucket{le=\"10\"} 6");
    expect_line(t, "divvy_hit_duration_seconds_count 7");
    /* Buckets are cumulative and ascending. */
    {
        const char *p = t;
        unsigned long long prev = 0, v;

        while ((p = strstr(p, "divvy_hit_duration_seconds_bucket{")) != NULL) {
            p = strchr(p, '}');
            v = strtoull(p + 1, NULL, 10);
            assert_true(v >= prev);
            prev = v;
        }
    }
}

static void test_metrics_errors_gauges_and_redis(void **state)
{
    struct fixture *f = *state;
    struct metrics_worker *w = metrics_worker(f->m, 1);
    struct metrics_gauges g = {
        .connections = 3, .config_generation = 7, .rules = 5, .reloads_ok = 2,
        .reloads_rejected = 1, .fast = { .slots = 64, .live = 2, .full_events = 4 },
        .priv = { .slots = 128, .live = 9, .quota_events = 6 },
        .have_fast_path_hits = true, .fast_path_hits = 42,
        .have_fast_reports = true, .fast_reports = 10, .fast_reports_dropped = 3,
    };
    char status[256];
    const char *t;

    metrics_error(w, PROTO_E_UNKNOWN_COMMAND);
    metrics_error(w, PROTO_E_UNKNOWN_COMMAND);
    metrics_error(w, PROTO_E_LINE_TOO_LONG);
    metrics_error(w, PROTO_E_NONE);
    metrics_error(w, (enum proto_err)1000);
    metrics_tick(f->m, &g, 1000);
    t = scrape(f);
    /* No node reported, no fallback: no Redis series. */
    assert_null(strstr(t, "divvy_redis"));
    metrics_redis_breaker(f->m, "10.0.0.1:6379", true);
    metrics_redis_breaker(f->m, "10.0.0.1:6379", true);  /* no change, no transition */
    metrics_redis_breaker(f->m, "10.0.0.1:6379", false);
    metrics_redis_breaker(f->m, "10.0.0.1:6379", true);
    metrics_redis_breaker(f->m, "unix:/run/r\"s.sock", false);    /* first seen, closed */
    metrics_redis_fallback(w, METRICS_FALLBACK_OPEN);
    metrics_redis_fallback(metrics_worker(f->m, 0), METRICS_FALLBACK_OPEN);
    metrics_redis_fallback(w, METRICS_FALLBACK_CLOSED);
    metrics_redis_fallback(w, METRICS_N_FALLBACK);                  /* ignored */
    t = scrape(f);
    expect_line(t, "divvy_errors_total{code=\"unknown-command\"} 2");
    expect_line(t, "divvy_errors_total{code=\"line-too-long\"} 1");
    expect_line(t, "divvy_errors_total{code=\"forbidden\"} 0");
    expect_line(t, "divvy_open_connections 3");
    expect_line(t, "divvy_config_generation 7");
    expect_line(t, "divvy_rules 5");
    expect_line(t, "divvy_reloads_total{result=\"ok\"} 2");
    expect_line(t, "divvy_reloads_total{result=\"rejected\"} 1");
    expect_line(t, "divvy_table_slots{table=\"fast\"} 64");
    expect_line(t, "divvy_table_live_slots{table=\"private\"} 9");
    expect_line(t, "divvy_table_full_total{table=\"fast\",reason=\"full\"} 4");
    expect_line(t, "divvy_table_full_total{table=\"private\",reason=\"max_actors\"} 6");
    expect_line(t, "divvy_fast_path_hits_total 42");
    expect_line(t, "divvy_fast_reports_total{result=\"recorded\"} 7");
    expect_line(t, "divvy_fast_reports_total{result=\"dropped\"} 3");
    expect_line(t, "divvy_redis_up{node=\"10.0.0.1:6379\"} 0");
    expect_line(t, "divvy_redis_breaker_open{node=\"10.0.0.1:6379\"} 1");
    expect_line(t, "divvy_redis_breaker_transitions_total{node=\"10.0.0.1:6379\",to=\"open\"} 2");
    expect_line(t,
                "divvy_redis_breaker_transitions_total{node=\"10.0.0.1:6379\",to=\"closed\"} 1");
    expect_line(t, "divvy_redis_up{node=\"unix:/run/r\\\"s.sock\"} 1");
    expect_line(t, "divvy_redis_breaker_open{node=\"unix:/run/r\\\"s.sock\"} 0");
    expect_line(t,
                "divvy_redis_breaker_transitions_total{node=\"unix:/run/r\\\"s.sock\",to=\"open\"} 0");
    expect_line(t, "divvy_redis_fallbacks_total{policy=\"local\"} 0");
    expect_line(t, "divvy_redis_fallbacks_total{policy=\"open\"} 2");
    expect_line(t, "divvy_redis_fallbacks_total{policy=\"closed\"} 1");
    assert_null(strstr(t, "node=\"other\""));

    metrics_hit(metrics_worker(f->m, 0), f->rules, 1, 1, METRICS_ACCEPTED);
    metrics_hit(metrics_worker(f->m, 0), f->rules, 1, 2, METRICS_REJECTED);
    metrics_status_line(f->m, status, sizeof(status));
    assert_string_equal(status, "5 rules (generation 7), 2 hits (1 accepted, 1 rejected), "
                                "3 connections");
}

/* ---- HTTP ------------------------------------------------------------------------- */

static int setup_http(void **state)
{
    struct metrics_opts o = { .workers = 1, .ignore_env = true, .listen = "tcp:127.0.0.1:0" };

    return setup_opts(state, &o);
}

/* One HTTP/1.0 request to 127.0.0.1:@port; the whole response into @buf. */
static size_t http(int port, const char *request, char *buf, size_t size)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    size_t len = 0;
    ssize_t n;
    int fd;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(write(fd, request, strlen(request)), (ssize_t)strlen(request));
    while (len + 1 < size && (n = read(fd, buf + len, size - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
    close(fd);
    return len;
}

/* The status code of an HTTP response (MHD answers HTTP/1.1 to 1.0 requests too). */
static int status_of(const char *response)
{
    if (strncmp(response, "HTTP/1.", 7) != 0 || strlen(response) < 12)
        fail_msg("not an HTTP response: \"%.80s\"", response);
    return atoi(response + 9);
}

/* Denied hits by cause: a quota deny and a Redis-down deny apart. */
/* The node table is bounded: the first METRICS_REDIS_NODES nodes keep their
 * series, later ones only count their trips under node="other". */
static void test_metrics_redis_nodes_bounded(void **state)
{
    struct fixture *f = *state;
    char node[32], line[128];
    const char *t;

    for (int i = 0; i < METRICS_REDIS_NODES + 3; i++) {
        snprintf(node, sizeof(node), "10.0.0.%d:7000", i);
        metrics_redis_breaker(f->m, node, i % 2 == 0);
    }
    metrics_redis_breaker(f->m, "10.0.0.65:7000", false);
    metrics_redis_breaker(f->m, "10.0.0.65:7000", true);
    metrics_redis_breaker(f->m, "10.0.0.0:7000", false);
    t = scrape(f);
    expect_line(t, "divvy_redis_up{node=\"10.0.0.0:7000\"} 1");
    expect_line(t, "divvy_redis_breaker_transitions_total{node=\"10.0.0.0:7000\",to=\"open\"} 1");
    expect_line(t,
                "divvy_redis_breaker_transitions_total{node=\"10.0.0.0:7000\",to=\"closed\"} 1");
    snprintf(line, sizeof(line), "divvy_redis_breaker_open{node=\"10.0.0.%d:7000\"} 0",
             METRICS_REDIS_NODES - 1);
    expect_line(t, line);
    snprintf(node, sizeof(node), "\"10.0.0.%d:7000\"", METRICS_REDIS_NODES);
    expect_no(t, node);
    /* 64 and 66 tripped; 65 reported closed, then tripped. */
    expect_line(t, "divvy_redis_breaker_transitions_total{node=\"other\",to=\"open\"} 3");
    expect_no(t, "divvy_redis_up{node=\"other\"}");
    /* No fallback yet, but the nodes make the series appear, all three. */
    expect_line(t, "divvy_redis_fallbacks_total{policy=\"local\"} 0");
    expect_line(t, "divvy_redis_fallbacks_total{policy=\"closed\"} 0");
}

static void test_metrics_denials_by_cause(void **state)
{
    struct fixture *f = *state;
    const char *t;

    metrics_denied(metrics_worker(f->m, 0), METRICS_DENY_QUOTA);
    metrics_denied(metrics_worker(f->m, 1), METRICS_DENY_QUOTA);
    metrics_denied(metrics_worker(f->m, 1), METRICS_DENY_REDIS_DOWN);
    metrics_denied(metrics_worker(f->m, 1), METRICS_N_DENY);        /* ignored */
    metrics_denied(NULL, METRICS_DENY_QUOTA);
    t = scrape(f);
    expect_line(t, "# TYPE divvy_denials_total counter");
    expect_line(t, "divvy_denials_total{cause=\"quota\"} 2");
    expect_line(t, "divvy_denials_total{cause=\"redis-down\"} 1");
    expect_line(t, "divvy_denials_total{cause=\"zero-limit\"} 0");
    expect_line(t, "divvy_denials_total{cause=\"table-full\"} 0");
    /* no-counter is a login figure: test_metrics_login_figures. */
    expect_no(t, "cause=\"no-counter\"");
    assert_string_equal(metrics_deny_name(METRICS_DENY_REDIS_DOWN), "redis-down");
    assert_string_equal(metrics_deny_name(METRICS_N_DENY), "?");
}

/* A source = privileged rule counts in the totals only, unless
 * metrics.privileged; then it has its series, and the privileged table and
 * no-counter are shown. */
static void test_metrics_login_figures(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules *rules = NULL;
    struct metrics *m;
    struct diag diag;
    char *t = NULL;
    size_t len;

    (void)state;
    add_rule(&spec, 1, "user", "login", RULES_POLICY_STOP);
    spec.rules[0].source = RULES_SOURCE_PRIVILEGED;
    add_rule(&spec, 2, NULL, NULL, RULES_POLICY_STOP);
    diag_init(&diag);
    assert_int_equal(rules_compile(&spec, 1, &rules, &diag), 0);
    rules_spec_free(&spec);
    for (int shown = 0; shown <= 1; shown++) {
        struct metrics_opts o = { .workers = 1, .ignore_env = true, .privileged = shown };

        assert_int_equal(metrics_new(&o, &m), 0);
        metrics_hit(metrics_worker(m, 0), rules, 1, 0, METRICS_REJECTED);
        metrics_hit_done(metrics_worker(m, 0), metrics_clock_ns());
        assert_int_equal(metrics_prom_render(m, &t, &len), 0);
        expect_line(t, "divvy_hit_duration_seconds_count 1");
        if (shown) {
            expect_line(t, "divvy_hits_total{status=\"rejected\",rule_label=\"login\"} 1");
            expect_line(t, "divvy_table_live_slots{table=\"privileged\"} 0");
            expect_line(t, "divvy_denials_total{cause=\"no-counter\"} 0");
            expect_line(t, "divvy_errors_total{code=\"no-counter\"} 0");
        } else {
            expect_no(t, "login");
            expect_no(t, "privileged rules");
            expect_no(t, "table=\"privileged\"");
            expect_no(t, "cause=\"no-counter\"");
            expect_no(t, "code=\"no-counter\"");
        }
        free(t);
        t = NULL;
        metrics_free(m);
    }
    rules_free(rules);
}

static void test_metrics_http_endpoint(void **state)
{
    struct fixture *f = *state;
    int port = metrics_http_port(f->m);
    char *buf = malloc(BIG);

    assert_non_null(buf);
    assert_true(port > 0);
    metrics_hit(metrics_worker(f->m, 0), f->rules, 1, 1, METRICS_ACCEPTED);
    http(port, "GET /metrics HTTP/1.0\r\n\r\n", buf, BIG);
    assert_int_equal(status_of(buf), 200);
    assert_non_null(strstr(buf, "Content-Type: text/plain; version=0.0.4; charset=utf-8"));
    assert_non_null(strstr(buf, "\ndivvy_hits_total{status=\"accepted\","
                                "rule_label=\"cookies\"} 1\n"));
    http(port, "HEAD /metrics HTTP/1.0\r\n\r\n", buf, BIG);
    assert_int_equal(status_of(buf), 200);
    assert_null(strstr(buf, "divvy_hits_total{"));
    http(port, "GET /metrics/x HTTP/1.0\r\n\r\n", buf, BIG);
    assert_int_equal(status_of(buf), 404);
    http(port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n", buf, BIG);
    assert_int_equal(status_of(buf), 405);
    free(buf);
}

static void test_metrics_listen_errors(void **state)
{
    struct metrics_opts o = { .workers = 1, .ignore_env = true };
    struct fixture *f = *state;
    struct metrics *m = NULL;
    char addr[64];

    snprintf(addr, sizeof(addr), "tcp:127.0.0.1:%d", metrics_http_port(f->m));
    o.listen = addr;
    assert_int_equal(metrics_new(&o, &m), -EADDRINUSE);
    o.listen = "127.0.0.1:9";
    assert_int_equal(metrics_new(&o, &m), -EINVAL);
    o.listen = NULL;
    o.path = "metrics";
    assert_int_equal(metrics_new(&o, &m), -EINVAL);
    o.path = NULL;
    o.workers = 0;
    assert_int_equal(metrics_new(&o, &m), -EINVAL);
    assert_null(m);
}

/* ---- statsd ----------------------------------------------------------------------- */

static int udp_listener(int *ret_port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t sl = sizeof(sa);
    int fd;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    *ret_port = ntohs(sa.sin_port);
    return fd;
}

/* Every datagram that arrives within @quiet_ms of the last, joined by '\n'. */
static void recv_all(int fd, char *buf, size_t size, int quiet_ms)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    size_t len = 0;
    ssize_t n;

    buf[0] = '\0';
    while (poll(&p, 1, quiet_ms) > 0 && len + 2 < size) {
        n = recv(fd, buf + len, size - 2 - len, 0);
        if (n <= 0)
            break;
        assert_true(n <= DGRAM_MAX);
        len += (size_t)n;
        buf[len++] = '\n';
        buf[len] = '\0';
    }
}

static void statsd_case(const char *prefix, bool divvy_names)
{
    struct metrics_opts o = { .workers = 2, .ignore_env = true, .statsd_host = "127.0.0.1",
                              .statsd_prefix = prefix, .divvy_names = divvy_names };
    struct metrics_gauges g = { .connections = 3 };
    struct rules *rules = compile(1, 1);
    struct metrics *m = NULL;
    char *buf = malloc(BIG);
    int port, fd = udp_listener(&port);

    assert_non_null(buf);
    o.statsd_port = (unsigned)port;
    assert_int_equal(metrics_new(&o, &m), 0);
    metrics_hit(metrics_worker(m, 0), rules, 1, 1, METRICS_ACCEPTED);
    metrics_hit(metrics_worker(m, 1), rules, 1, 1, METRICS_ACCEPTED);
    metrics_hit(metrics_worker(m, 1), rules, 1, 2, METRICS_ACCEPTED);
    metrics_hit(metrics_worker(m, 1), rules, 1, 2, METRICS_REJECTED);
    metrics_hit(metrics_worker(m, 0), rules, 1, 0, METRICS_CANARY_REJECTED);
    metrics_error(metrics_worker(m, 0), PROTO_E_UNKNOWN_COMMAND);
    metrics_denied(metrics_worker(m, 1), METRICS_DENY_REDIS_DOWN);
    /* A continue rule that charged on the way: its label's count, no request. */
    metrics_charged(metrics_worker(m, 0), rules, 1, 1);
    for (int i = 0; i < 40; i++)
        metrics_observe_ns(metrics_worker(m, i % 2), 1500000);     /* 1.5 ms */
    metrics_tick(m, &g, 5000);
    recv_all(fd, buf, BIG, 500);
    expect_line(buf, "divvy.hit.accepted:3|c");
    expect_line(buf, "divvy.hit.accepted.cookies:3|c");
    expect_line(buf, "divvy.hit.rejected:1|c");
    expect_line(buf, "divvy.hit.canary-rejected:1|c");
    expect_line(buf, "divvy.hit.canary-rejected.canary-rule:1|c");
    expect_line(buf, "divvy.error.unknown-command:1|c");
    expect_line(buf, "divvy.denied.redis-down:1|c");
    expect_no(buf, "divvy.denied.quota");
    expect_line(buf, "divvy.connections:3|g");
    /* 20 timings per worker, 16 kept each: sent with statsd's sample rate. */
    expect_line(buf, "divvy.hit:1.500000|ms|@0.8");
    /* divvy's names: no label for unlabelled rules; else the rule's id. */
    if (divvy_names) {
        expect_no(buf, "divvy.hit.rejected.");
    } else {
        expect_line(buf, "divvy.hit.rejected.default:1|c");
    }
    /* Nothing unchanged. */
    expect_no(buf, "divvy.error.unknown:");
    expect_no(buf, "divvy.hit.accepted.canary-rule");

    /* Before the interval: nothing.  After it: only what changed, and the gauge. */
    metrics_tick(m, &g, 5500);
    recv_all(fd, buf, BIG, 200);
    assert_string_equal(buf, "");
    metrics_hit(metrics_worker(m, 0), rules, 1, 1, METRICS_REJECTED);
    g.connections = 1;
    metrics_tick(m, &g, 6000);
    recv_all(fd, buf, BIG, 500);
    assert_string_equal(buf, "divvy.hit.rejected.cookies:1|c\ndivvy.hit.rejected:1|c\n"
                             "divvy.connections:1|g\n");
    /* Redis, summed over the nodes: transitions and fallbacks as deltas, open breakers. */
    metrics_redis_breaker(m, "a:1", true);
    metrics_redis_breaker(m, "b:1", false);
    metrics_redis_fallback(metrics_worker(m, 1), METRICS_FALLBACK_CLOSED);
    metrics_redis_fallback(metrics_worker(m, 0), METRICS_FALLBACK_CLOSED);
    metrics_tick(m, &g, 7000);
    recv_all(fd, buf, BIG, 500);
    assert_string_equal(buf, "divvy.redis.fallback.closed:2|c\ndivvy.redis.breaker.open:1|c\n"
                             "divvy.redis.breakers_open:1|g\ndivvy.connections:1|g\n");
    metrics_redis_breaker(m, "a:1", false);
    metrics_tick(m, &g, 8000);
    recv_all(fd, buf, BIG, 500);
    assert_string_equal(buf, "divvy.redis.breaker.closed:1|c\ndivvy.redis.breakers_open:0|g\n"
                             "divvy.connections:1|g\n");
    /* The last counts go out on the way down. */
    metrics_hit(metrics_worker(m, 1), rules, 1, 1, METRICS_ACCEPTED);
    metrics_free(m);
    recv_all(fd, buf, BIG, 500);
    expect_line(buf, "divvy.hit.accepted:1|c");
    close(fd);
    rules_free(rules);
    free(buf);
}

static void test_metrics_statsd_as_divvy(void **state)
{
    (void)state;
    /* divvy's statsd client adds the dot after the prefix when it is missing. */
    statsd_case("divvy", true);
    statsd_case("divvy.", false);
}

static void test_metrics_statsd_splits_datagrams(void **state)
{
    struct metrics_opts o = { .workers = 4, .ignore_env = true, .statsd_host = "127.0.0.1",
                              .statsd_prefix = "a-rather-long-statsd-prefix-for-this-test" };
    struct metrics *m = NULL;
    char *buf = malloc(BIG);
    int port, fd = udp_listener(&port), lines = 0;

    (void)state;
    assert_non_null(buf);
    o.statsd_port = (unsigned)port;
    assert_int_equal(metrics_new(&o, &m), 0);
    for (int i = 0; i < 64; i++)
        metrics_observe_ns(metrics_worker(m, (unsigned)i % 4), 1000);
    metrics_tick(m, NULL, 1);
    recv_all(fd, buf, BIG, 500);      /* asserts each datagram <= DGRAM_MAX */
    for (char *p = buf; (p = strstr(p, "|ms")) != NULL; p++)
        lines++;
    assert_int_equal(lines, 64);
    metrics_free(m);
    close(fd);
    free(buf);
}

/* ---- divvy's environment -------------------------------------------------------------- */

static void test_metrics_divvy_environment(void **state)
{
    struct metrics_opts o = { .workers = 1, .listen = "tcp:127.0.0.1:1" };
    struct metrics *m = NULL;
    char *buf = malloc(BIG), port_s[16];
    int port, fd = udp_listener(&port), hport;

    (void)state;
    assert_non_null(buf);
    /* A free TCP port for HTTP_SERVICE_PORT: the UDP one's number may be taken. */
    {
        struct sockaddr_in sa = { .sin_family = AF_INET };
        socklen_t sl = sizeof(sa);
        int t = socket(AF_INET, SOCK_STREAM, 0);

        assert_int_equal(bind(t, (struct sockaddr *)&sa, sizeof(sa)), 0);
        assert_int_equal(getsockname(t, (struct sockaddr *)&sa, &sl), 0);
        hport = ntohs(sa.sin_port);
        close(t);
    }
    snprintf(port_s, sizeof(port_s), "%d", hport);
    setenv("HTTP_SERVICE_PORT", port_s, 1);
    setenv("PROMETHEUS_METRICS_PATH", "/prom", 1);
    setenv("STATSD_HOST", "127.0.0.1", 1);
    snprintf(port_s, sizeof(port_s), "%d", port);
    setenv("STATSD_PORT", port_s, 1);
    setenv("STATSD_PREFIX", "svc", 1);
    assert_int_equal(metrics_new(&o, &m), 0);
    /* On every address, as divvy's node server: reachable on loopback. */
    assert_int_equal(metrics_http_port(m), hport);
    http(hport, "GET /prom HTTP/1.0\r\n\r\n", buf, BIG);
    assert_int_equal(status_of(buf), 200);
    metrics_tick(m, NULL, 1);
    recv_all(fd, buf, BIG, 500);
    expect_line(buf, "svc.connections:0|g");
    metrics_free(m);
    m = NULL;

    setenv("STATSD_PORT", "eighty", 1);
    assert_int_equal(metrics_new(&o, &m), -EINVAL);
    unsetenv("HTTP_SERVICE_PORT");
    unsetenv("PROMETHEUS_METRICS_PATH");
    unsetenv("STATSD_HOST");
    unsetenv("STATSD_PORT");
    unsetenv("STATSD_PREFIX");
    close(fd);
    free(buf);
}

/* ---- promtool ------------------------------------------------------------------------ */

static void test_metrics_promtool_clean(void **state)
{
    struct fixture *f = *state;
    struct metrics_gauges g = { .connections = 2, .rules = 3, .have_fast_path_hits = true };
    char path[] = "/tmp/divvy-test-metrics-XXXXXX", cmd[256], *out = malloc(BIG);
    const char *t;
    size_t len = 0;
    FILE *p;
    int fd;

    assert_non_null(out);
    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        free(out);
        skip();
    }
    metrics_hit(metrics_worker(f->m, 0), f->rules, 1, 1, METRICS_ACCEPTED);
    metrics_hit(metrics_worker(f->m, 1), f->rules, 1, 0, METRICS_CANARY_ACCEPTED);
    metrics_hit(metrics_worker(f->m, 1), f->rules, 1, 2, METRICS_REJECTED);
    metrics_charged(metrics_worker(f->m, 1), f->rules, 1, 1);
    metrics_error(metrics_worker(f->m, 1), PROTO_E_UNKNOWN);
    metrics_observe_ns(metrics_worker(f->m, 0), 12345);
    metrics_tick(f->m, &g, 1);
    metrics_redis_breaker(f->m, "127.0.0.1:6379", true);
    metrics_redis_fallback(metrics_worker(f->m, 0), METRICS_FALLBACK_LOCAL);
    t = scrape(f);
    fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, t, strlen(t)), (ssize_t)strlen(t));
    close(fd);
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s 2>&1", path);
    p = popen(cmd, "r");
    assert_non_null(p);
    len = fread(out, 1, BIG - 1, p);
    out[len] = '\0';
    pclose(p);
    unlink(path);
    /* The default names: not one complaint.  divvy's: its gauge with a
     * counter's suffix, the one. */
    if (f->m->divvy_names)
        assert_string_equal(out, "divvy_tcp_connections_total non-counter metrics should not "
                                 "have \"_total\" suffix\n");
    else
        assert_string_equal(out, "");
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metrics_exposition_when_idle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_wants_tables_only_with_endpoint, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_metrics_hits_by_status_and_label, setup, teardown),
        cmocka_unit_test(test_metrics_unlabelled_by_match),
        cmocka_unit_test_setup_teardown(test_metrics_labels_survive_reloads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_histogram_buckets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_errors_gauges_and_redis, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_redis_nodes_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_denials_by_cause, setup, teardown),
        cmocka_unit_test(test_metrics_login_figures),
        cmocka_unit_test_setup_teardown(test_metrics_http_endpoint, setup_http, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_listen_errors, setup_http, teardown),
        cmocka_unit_test(test_metrics_statsd_as_divvy),
        cmocka_unit_test(test_metrics_statsd_splits_datagrams),
        cmocka_unit_test(test_metrics_divvy_environment),
        cmocka_unit_test_setup_teardown(test_metrics_divvy_names, setup_divvy, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_charged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_promtool_clean, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_promtool_clean, setup_divvy, teardown),
    };

    log_init(LOG_TARGET_STDERR, false);
    return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
