/* SPDX-License-Identifier: MIT */
/*
 * Integration: the default metrics (metrics.names = "prometheus") are what
 * `promtool check metrics` (Debian package prometheus) accepts without a
 * single finding, and they count every kind of hit apart.  A real divvyd
 * with its endpoint set in divvy.conf takes hits of every kind - allowed and
 * denied, a continue rule that charges on the way, a canary, an unlabelled
 * rule and the default rule, fast-path hits decided in libdivvy, a rule kept
 * in a Redis that is not there (on_redis_error = "closed"), an unknown
 * command - then a live scrape must
 *   - name every rule by its label, else by its match ("path=/anon"; the
 *     default rule "(default)"), so the default rule and an unlabelled rule
 *     stand apart, none is "" and none is a hex id;
 *   - count every decision once under divvy_decisions_total{protocol="line"}
 *     (the other protocols at 0), and export the process_* figures;
 *   - count the continue rule under its own label for every hit it charged;
 *   - count fast-path decisions per rule and outcome;
 *   - export every divvy_* and process_* metric that the shipped Grafana
 *     dashboard and alert rules (etc/monitoring/) query;
 *   - pass promtool with exit 0 and no output.
 * A second test does the same under metrics.names = "divvy" (divvy's names,
 * for dashboards built on divvy): promtool's one finding there is divvy's
 * gauge divvy_tcp_connections_total.
 */
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "divvy.h"
#include "harness.h"

#define BIG 262144

/* %d: the metrics port; %s: names; %s: the Redis socket, which no one serves. */
static const char config_fmt[] =
    "metrics = { listen = \"tcp:127.0.0.1:%d\"; names = \"%s\"; };\n"
    "store = { on_redis_error = \"closed\"; };\n"
    "redis = { unix_socket = \"%s\"; timeout_ms = 200; };\n"
    "rules = (\n"
    "  { match = { path = \"/api/*\"; }; label = \"tenant\"; credit_limit = 100;\n"
    "    reset_seconds = 3600; match_policy = \"continue\"; },\n"
    "  { match = { path = \"/api/special\"; }; label = \"canary-api\"; credit_limit = 1;\n"
    "    reset_seconds = 3600; match_policy = \"canary\"; },\n"
    "  { match = { path = \"/api/*\"; }; label = \"api\"; credit_limit = 2;\n"
    "    reset_seconds = 3600; },\n"
    "  { match = { path = \"/fast\"; }; label = \"fast\"; credit_limit = 3;\n"
    "    reset_seconds = 3600; fast_path = true; },\n"
    "  { match = { path = \"/remote\"; }; label = \"remote\"; credit_limit = 5;\n"
    "    reset_seconds = 60; store = \"strict\"; },\n"
    "  { match = { path = \"/anon\"; }; credit_limit = 1; reset_seconds = 3600; },\n"
    "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

/* Sends @req on @c and asserts that the reply starts with @prefix. */
static void cmd_prefix(struct harness_conn *c, const char *req, const char *prefix)
{
    char reply[HARNESS_LINE];

    CHECK(harness_cmd(c, req, reply, sizeof(reply)));
    if (strncmp(reply, prefix, strlen(prefix)) != 0)
        fail_msg("%s -> \"%s\", want \"%s...\"", req, reply, prefix);
}

static bool has_line(const char *text, const char *line)
{
    size_t n = strlen(line);

    for (const char *p = text; (p = strstr(p, line)) != NULL; p += n)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return true;
    return false;
}

static void expect_line(const char *text, const char *line)
{
    if (!has_line(text, line))
        fail_msg("no line \"%s\" in:\n%s", line, text);
}

/* Scrapes until every line of @lines is there (gauges and fast-path counts
 * follow divvyd's 1 s tick); the last body in @buf. */
static void scrape_until(int port, const char *const *lines, size_t n, char *buf, size_t size)
{
    uint64_t deadline = harness_now_ms() + 10000;
    size_t i;

    for (;;) {
        assert_int_equal(harness_http_get(port, "/metrics", buf, size), 200);
        for (i = 0; i < n && has_line(buf, lines[i]); i++)
            ;
        if (i == n)
            return;
        if (harness_now_ms() > deadline)
            fail_msg("no line \"%s\" within 10 s in:\n%s", lines[i], buf);
        /* Waiting for divvyd's next tick; nothing to wait on but time. */
        harness_pause_ms(100);
    }
}

/* Runs promtool on @body (saved in @dir); its output into @out. Its exit status. */
static int promtool(const char *dir, const char *body, char *out, size_t size)
{
    char path[HARNESS_PATH + 16], cmd[HARNESS_PATH + 64];
    size_t len;
    FILE *f;
    int st;

    if (system("command -v promtool >/dev/null 2>&1") != 0)
        fail_msg("promtool is not installed (Debian package prometheus; tools/deps.sh)");
    snprintf(path, sizeof(path), "%s/scrape.txt", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(body, f) >= 0);
    assert_int_equal(fclose(f), 0);
    snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s' 2>&1", path);
    f = popen(cmd, "r");
    assert_non_null(f);
    len = fread(out, 1, size - 1, f);
    out[len] = '\0';
    st = pclose(f);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* divvyd with the metrics endpoint under @names, and its port. */
static struct harness_daemon *start(const char *names, int *ret_port)
{
    /* resp: the ad-hoc bucket figures too. */
    struct harness_opts o = { .workers = 2, .resp = true };
    struct harness_daemon *d = NULL;
    char *text = harness_scratch(8192);
    int port = harness_free_port(SOCK_STREAM);

    assert_non_null(text);
    /* A socket in a directory that does not exist: Redis is down. */
    snprintf(text, 8192, config_fmt, port, names, "/nonexistent-divvy-test/redis.sock");
    o.config_text = text;
    CHECK(harness_start(&o, &d));
    *ret_port = port;
    return d;
}

/* Every kind of hit; see the expectations in each test. */
static void send_hits(struct harness_daemon *d)
{
    struct divvy_kv kv[1] = { { "path", "/fast" } };
    struct divvy_result res = { .size = sizeof(res) };
    struct harness_conn *c = NULL;
    struct divvy *h = NULL;
    char reply[HARNESS_LINE];

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    /* tenant (continue) charges 3 times; api decides: 2 allowed, then denied. */
    EXPECT_OK_RULE(c, "TAKE 1 path=/api/a", true, 1, 3599, 3600, "api");
    EXPECT_OK_RULE(c, "TAKE 1 path=/api/b", true, 0, 3599, 3600, "api");
    EXPECT_OK_RULE(c, "TAKE 1 path=/api/c", false, 0, 3590, 3600, "api");
    /* The canary accepts, then rejects; api denies both (it is spent). */
    cmd_prefix(c, "HIT path=/api/special", "OK false");
    cmd_prefix(c, "HIT path=/api/special", "OK false");
    /* The unlabelled rule: allowed, then denied; the default rule: denied. */
    EXPECT_OK(c, "HIT path=/anon", true, 0, 3599, 3600);
    EXPECT_OK(c, "HIT path=/anon", false, 0, 3590, 3600);
    EXPECT_OK(c, "HIT path=/elsewhere", false, 0, 0, 0);
    /* Redis is down and on_redis_error = "closed": denied, cause redis-down. */
    cmd_prefix(c, "HIT path=/remote", "OK false");
    CHECK(harness_cmd(c, "BOGUS x=1", reply, sizeof(reply)));
    EXPECT_PREFIX(reply, "ERR unknown-command");

    /* Fast path: 3 allowed and 2 denied, decided in this process. */
    CHECK(harness_divvy_env(d));
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    harness_wait_fast(h, kv, 1);
    divvy_close(h);
    h = NULL;
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    for (int i = 0; i < 5; i++) {
        if (divvy_hit(h, kv, 1, &res) < 0)
            fail_msg("divvy_hit: %s", divvy_errmsg(h));
        assert_int_equal(res.fast_path, 1);
        assert_int_equal(res.allowed, i < 3);
    }
    /* Closing flushes the handle's counts into the table. */
    divvy_close(h);
    harness_close(c);
}

/* Fails unless every divvy_* and process_* name that the shipped dashboard
 * and alert rule file @rel (etc/monitoring/) query is a series of @body. */
static void expect_queried(const char *rel, const char *body)
{
    char path[512], name[128], *text;
    size_t len = 0;
    FILE *f;

    CHECK(harness_src_path(rel, path, sizeof(path)));
    f = fopen(path, "r");
    if (!f)
        fail_msg("%s: %s", path, strerror(errno));
    text = harness_scratch(BIG);
    assert_non_null(text);
    len = fread(text, 1, BIG - 1, f);
    fclose(f);
    text[len] = '\0';
    assert_true(len > 0 && len < BIG - 1);
    for (const char *p = text; *p; p++) {
        size_t n;
        const char *at;
        bool found = false;

        if ((strncmp(p, "divvy_", 6) != 0 && strncmp(p, "process_", 8) != 0) ||
            (p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_')))
            continue;
        n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
        assert_true(n < sizeof(name));
        memcpy(name, p, n);
        name[n] = '\0';
        for (at = body; !found && (at = strstr(at, name)) != NULL; at += n)
            found = (at == body || at[-1] == '\n') && (at[n] == '{' || at[n] == ' ');
        if (!found)
            fail_msg("%s queries %s, which divvyd does not export:\n%s", rel, name, body);
        p += n - 1;
    }
}

static void test_metrics_lint_prometheus(void **state)
{
    static const char *const want[] = {
        "divvy_open_connections 0",
        "divvy_hits_total{status=\"accepted\",rule_label=\"tenant\"} 5",
        "divvy_hits_total{status=\"accepted\",rule_label=\"api\"} 2",
        "divvy_hits_total{status=\"rejected\",rule_label=\"api\"} 3",
        "divvy_hits_total{status=\"canary-accepted\",rule_label=\"canary-api\"} 1",
        "divvy_hits_total{status=\"canary-rejected\",rule_label=\"canary-api\"} 1",
        "divvy_hits_total{status=\"rejected\",rule_label=\"remote\"} 1",
        "divvy_denials_total{cause=\"redis-down\"} 1",
        "divvy_fast_path_hits_total 5",
        "divvy_fast_path_rule_hits_total{status=\"accepted\",rule_label=\"fast\"} 3",
        "divvy_fast_path_rule_hits_total{status=\"rejected\",rule_label=\"fast\"} 2",
        "divvy_hits_total{status=\"accepted\",rule_label=\"path=/anon\"} 1",
        "divvy_hits_total{status=\"rejected\",rule_label=\"path=/anon\"} 1",
        "divvy_hits_total{status=\"rejected\",rule_label=\"(default)\"} 1",
        "divvy_decisions_total{protocol=\"line\",status=\"accepted\"} 3",
        "divvy_decisions_total{protocol=\"line\",status=\"rejected\"} 6",
        "divvy_decisions_total{protocol=\"resp\",status=\"accepted\"} 0",
        "divvy_decisions_total{protocol=\"rls\",status=\"rejected\"} 0",
    };
    struct harness_daemon *d = NULL;
    char *body = harness_scratch(BIG), out[8192];
    const char *p;
    int port;

    (void)state;
    assert_non_null(body);
    d = start("prometheus", &port);
    send_hits(d);
    scrape_until(port, want, sizeof(want) / sizeof(want[0]), body, BIG);
    /* No rule by "" or by an id's 16 hex digits. */
    assert_null(strstr(body, "rule_label=\"\""));
    for (p = body; (p = strstr(p, "rule_label=\"")); p++)
        if (strspn(p + strlen("rule_label=\""), "0123456789abcdef") == 16)
            fail_msg("a rule named by its hex id:\n%s", body);
    /* The process figures of every Prometheus client, with sane values. */
    p = strstr(body, "\nprocess_open_fds ");
    assert_non_null(p);
    assert_true(strtoll(p + strlen("\nprocess_open_fds "), NULL, 10) > 3);
    p = strstr(body, "\nprocess_max_fds ");
    assert_non_null(p);
    assert_true(strtoll(p + strlen("\nprocess_max_fds "), NULL, 10) >= 64);
    p = strstr(body, "\nprocess_resident_memory_bytes ");
    assert_non_null(p);
    assert_true(strtoll(p + strlen("\nprocess_resident_memory_bytes "), NULL, 10) > 1 << 20);
    p = strstr(body, "\nprocess_virtual_memory_bytes ");
    assert_non_null(p);
    assert_true(strtoll(p + strlen("\nprocess_virtual_memory_bytes "), NULL, 10) > 1 << 20);
    p = strstr(body, "\nprocess_cpu_seconds_total ");
    assert_non_null(p);
    assert_true(strtod(p + strlen("\nprocess_cpu_seconds_total "), NULL) >= 0);
    assert_non_null(strstr(body, "\nprocess_start_time_seconds "));
    expect_line(body, "divvy_errors_total{code=\"unknown-command\"} 1");
    /* What the shipped dashboard and alerts query is exported. */
    expect_queried("etc/monitoring/grafana-divvy.json", body);
    expect_queried("etc/monitoring/divvy-alerts.yml", body);
    /* Not one finding. */
    if (promtool(d->dir, body, out, sizeof(out)) != 0 || out[0] != '\0')
        fail_msg("promtool check metrics found:\n%s\non:\n%s", out, body);
}

static void test_metrics_lint_divvy_names(void **state)
{
    static const char *const want[] = {
        "divvy_tcp_connections_total 0",
        "divvy_hits_total{status=\"rejected\",rule_label=\"\"} 2",
        "divvy_hits_total{status=\"accepted\",rule_label=\"\"} 1",
        "divvy_hits_total{status=\"accepted\",rule_label=\"tenant\"} 5",
        "divvy_fast_path_rule_hits_total{status=\"accepted\",rule_label=\"fast\"} 3",
    };
    struct harness_daemon *d = NULL;
    char *body = harness_scratch(BIG), out[8192];
    int port;

    (void)state;
    assert_non_null(body);
    d = start("divvy", &port);
    send_hits(d);
    scrape_until(port, want, sizeof(want) / sizeof(want[0]), body, BIG);
    assert_null(strstr(body, "divvy_open_connections"));
    /* divvy's name for a gauge is promtool's one finding. */
    assert_int_equal(promtool(d->dir, body, out, sizeof(out)), 3);
    assert_string_equal(out, "divvy_tcp_connections_total non-counter metrics should not "
                             "have \"_total\" suffix\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metrics_lint_prometheus, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_lint_divvy_names, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("metrics_lint", tests, NULL, NULL);
}
