/* SPDX-License-Identifier: MIT */
/*
 * Integration: divvyd's metrics as a divvy deployment sees them.  The real
 * divvyd runs with divvy's environment (HTTP_SERVICE_PORT,
 * PROMETHEUS_METRICS_PATH, STATSD_HOST, STATSD_PORT, STATSD_PREFIX); hits
 * over TCP and the Unix socket (accepted, rejected, canary, unlabelled, an
 * unknown command) must show up
 *   - in a live scrape of the Prometheus endpoint, under divvy's names
 *     (metrics.names = "divvy"), and `promtool check metrics` (Debian package
 *     prometheus) must find nothing but its one expected warning about the
 *     gauge divvy_tcp_connections_total (test_metrics_lint holds the default
 *     names to no finding at all);
 *   - as divvy's statsd counters, gauge and timer, received by a UDP listener.
 * A third test configures the endpoint through divvy.conf's metrics { }.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define BIG 262144

static const char config_text[] =
    "rules = (\n"
    "  { match = { method = \"GET\"; path = \"/pantry/cookies/special\"; };\n"
    "    credit_limit = 1; reset_seconds = 3600; match_policy = \"canary\";\n"
    "    label = \"canary-cookies\"; },\n"
    "  { match = { method = \"GET\"; path = \"/pantry/cookies/*\"; ip = \"*\"; };\n"
    "    credit_limit = 3; reset_seconds = 3600; actor = \"ip\"; label = \"cookies\"; },\n"
    "  { match = { method = \"GET\"; path = \"/status\"; }; credit_limit = 1000;\n"
    "    reset_seconds = 60; label = \"status\"; },\n"
    "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static void expect_line(const char *text, const char *line)
{
    size_t n = strlen(line);

    for (const char *p = text; (p = strstr(p, line)) != NULL; p += n)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return;
    fail_msg("no line \"%s\" in:\n%s", line, text);
}

/* The hits every test sends: see the expectations in each test. */
static void send_hits(struct harness_daemon *d, struct harness_conn **ret_kept)
{
    struct harness_conn *t = NULL, *u = NULL;
    char reply[HARNESS_LINE];

    CHECK(harness_connect(d, HARNESS_TCP, &t));
    CHECK(harness_connect(d, HARNESS_UNIX, &u));
    EXPECT_OK(t, "HIT method=GET path=/status", true, 999, 59, 60);
    EXPECT_OK(u, "HIT method=GET path=/status", true, 998, 59, 60);
    for (int i = 0; i < 3; i++)
        EXPECT_OK(t, "HIT method=GET path=/pantry/cookies/oatmeal ip=1.2.3.4", true, 2 - i,
                  3599, 3600);
    EXPECT_OK(u, "HIT method=GET path=/pantry/cookies/oatmeal ip=1.2.3.4", false, 0, 3590, 3600);
    /* The canary consumes (accepted, then rejected) and the cookies rule decides. */
    EXPECT_OK(t, "HIT method=GET path=/pantry/cookies/special ip=9.9.9.9", true, 2, 3599, 3600);
    EXPECT_OK(t, "HIT method=GET path=/pantry/cookies/special ip=9.9.9.9", true, 1, 3599, 3600);
    EXPECT_OK(u, "HIT method=DELETE path=/index.html", false, 0, 0, 0);
    CHECK(harness_cmd(t, "BOGUS x=1", reply, sizeof(reply)));
    EXPECT_PREFIX(reply, "ERR unknown-command");
    harness_close(u);
    *ret_kept = t;
}

static void test_metrics_prometheus_scrape(void **state)
{
    struct harness_opts o = { .workers = 3 };
    struct harness_daemon *d = NULL;
    struct harness_conn *kept = NULL;
    char *body = harness_scratch(BIG), path[300], cmd[400], out[4096], port_s[16];
    char *text = harness_scratch(4096);
    int port = harness_free_port(SOCK_STREAM), st;
    size_t len;
    FILE *f;

    (void)state;
    assert_non_null(body);
    assert_non_null(text);
    /* privileged: the privileged table's figures too (test_metrics_trust
     * holds the default to leaving them out). */
    snprintf(text, 4096, "metrics = { names = \"divvy\"; privileged = true; };\n%s",
             config_text);
    o.config_text = text;
    snprintf(port_s, sizeof(port_s), "%d", port);
    setenv("HTTP_SERVICE_PORT", port_s, 1);
    setenv("PROMETHEUS_METRICS_PATH", "/prometheus", 1);
    st = harness_start(&o, &d);
    unsetenv("HTTP_SERVICE_PORT");
    unsetenv("PROMETHEUS_METRICS_PATH");
    CHECK(st);
    assert_int_equal(harness_http_get(port, "/metrics", body, BIG), 404);

    send_hits(d, &kept);
    /* Gauges follow the main loop's tick: wait until the closed connection is gone. */
    harness_scrape_until(port, "/prometheus", "divvy_tcp_connections_total 1", body, BIG);
    expect_line(body, "divvy_hits_total{status=\"accepted\",rule_label=\"status\"} 2");
    expect_line(body, "divvy_hits_total{status=\"accepted\",rule_label=\"cookies\"} 5");
    expect_line(body, "divvy_hits_total{status=\"rejected\",rule_label=\"cookies\"} 1");
    expect_line(body,
                "divvy_hits_total{status=\"canary-accepted\",rule_label=\"canary-cookies\"} 1");
    expect_line(body,
                "divvy_hits_total{status=\"canary-rejected\",rule_label=\"canary-cookies\"} 1");
    expect_line(body, "divvy_hits_total{status=\"rejected\",rule_label=\"\"} 1");
    expect_line(body, "divvy_hit_duration_seconds_count 9");
    expect_line(body, "divvy_hit_duration_seconds_bucket{le=\"+Inf\"} 9");
    expect_line(body, "divvy_errors_total{code=\"unknown-command\"} 1");
    expect_line(body, "divvy_rules 4");
    expect_line(body, "divvy_reloads_total{result=\"rejected\"} 0");
    expect_line(body, "divvy_table_slots{table=\"private\"} 65536");
    expect_line(body, "divvy_table_slots{table=\"privileged\"} 65536");
    expect_line(body, "divvy_table_live_slots{table=\"privileged\"} 0");
    expect_line(body, "divvy_table_full_total{table=\"privileged\",reason=\"full\"} 0");
    assert_non_null(strstr(body, "\ndivvy_config_generation "));

    /* promtool on the live scrape: one warning, the one divvy's name earns. */
    snprintf(path, sizeof(path), "%s/scrape.txt", d->dir);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(body, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_metrics: promtool not installed (Debian package prometheus): "
                        "lint skipped\n");
    } else {
        snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s' 2>&1", path);
        f = popen(cmd, "r");
        assert_non_null(f);
        len = fread(out, 1, sizeof(out) - 1, f);
        out[len] = '\0';
        pclose(f);
        assert_string_equal(out, "divvy_tcp_connections_total non-counter metrics should not "
                                 "have \"_total\" suffix\n");
    }
    harness_close(kept);
}

/* Sums "<name>:<n>|c" over @text. */
static long long counter_sum(const char *text, const char *name)
{
    char pat[128];
    long long sum = 0;
    size_t n;

    n = (size_t)snprintf(pat, sizeof(pat), "%s:", name);
    for (const char *p = text; (p = strstr(p, pat)) != NULL; p += n)
        if ((p == text || p[-1] == '\n') && strstr(p, "|c") == strchr(p, '|'))
            sum += strtoll(p + n, NULL, 10);
    return sum;
}

static void test_metrics_statsd(void **state)
{
    static const struct {
        const char *name;
        long long want;
    } want[] = {
        { "divvy.hit.accepted", 7 },
        { "divvy.hit.accepted.status", 2 },
        { "divvy.hit.accepted.cookies", 5 },
        { "divvy.hit.rejected", 2 },
        { "divvy.hit.rejected.cookies", 1 },
        { "divvy.hit.canary-accepted", 1 },
        { "divvy.hit.canary-accepted.canary-cookies", 1 },
        { "divvy.hit.canary-rejected.canary-cookies", 1 },
        { "divvy.error.unknown-command", 1 },
        { "divvy.decision.line.accepted", 7 },
        { "divvy.decision.line.rejected", 2 },
    };
    struct harness_opts o = { .config_text = config_text, .workers = 2 };
    struct harness_daemon *d = NULL;
    struct harness_conn *kept = NULL;
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t sl = sizeof(sa);
    char *rx = harness_scratch(BIG), port_s[16];
    size_t len = 0;
    uint64_t deadline;
    bool done = false;
    int fd, st;
    ssize_t n;

    (void)state;
    assert_non_null(rx);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    snprintf(port_s, sizeof(port_s), "%d", ntohs(sa.sin_port));
    setenv("STATSD_HOST", "127.0.0.1", 1);
    setenv("STATSD_PORT", port_s, 1);
    setenv("STATSD_PREFIX", "divvy", 1);
    st = harness_start(&o, &d);
    unsetenv("STATSD_HOST");
    unsetenv("STATSD_PORT");
    unsetenv("STATSD_PREFIX");
    CHECK(st);

    send_hits(d, &kept);
    deadline = harness_now_ms() + 10000;
    while (!done && harness_now_ms() < deadline) {
        struct pollfd p = { .fd = fd, .events = POLLIN };

        if (poll(&p, 1, 200) <= 0)
            continue;
        n = recv(fd, rx + len, BIG - len - 2, 0);
        assert_true(n > 0);
        len += (size_t)n;
        rx[len++] = '\n';
        rx[len] = '\0';
        done = strstr(rx, "divvy.connections:1|g") != NULL;
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
            done = done && counter_sum(rx, want[i].name) == want[i].want;
    }
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (counter_sum(rx, want[i].name) != want[i].want)
            fail_msg("%s: %lld, want %lld; received:\n%s", want[i].name,
                     counter_sum(rx, want[i].name), want[i].want, rx);
    if (!strstr(rx, "divvy.connections:1|g"))
        fail_msg("no divvy.connections gauge of 1; received:\n%s", rx);
    /* Timings of HITs as statsd timers, in milliseconds: never 0 (a local hit
     * takes microseconds, which whole microseconds as "%.3f" ms sent as 0.000). */
    assert_non_null(strstr(rx, "divvy.hit:"));
    assert_non_null(strstr(rx, "|ms"));
    for (const char *p = rx; (p = strstr(p, "divvy.hit:")) != NULL; p++)
        if (!(strtod(p + strlen("divvy.hit:"), NULL) > 0))
            fail_msg("a zero timer in:\n%s", rx);
    /* Rules without a label get no per-label counter, as in divvy. */
    assert_null(strstr(rx, "divvy.hit.rejected.:"));
    harness_close(kept);
    close(fd);
}

static void test_metrics_config_listen(void **state)
{
    struct harness_opts o = { .workers = 1 };
    struct harness_daemon *d = NULL;
    char *text = harness_scratch(4096), *body = harness_scratch(BIG);
    int port = harness_free_port(SOCK_STREAM);

    (void)state;
    assert_non_null(text);
    assert_non_null(body);
    snprintf(text, 4096, "metrics = { listen = \"tcp:127.0.0.1:%d\"; path = \"/m\"; };\n%s",
             port, config_text);
    o.config_text = text;
    CHECK(harness_start(&o, &d));
    harness_scrape_until(port, "/m", "divvy_rules 4", body, BIG);
    /* The default names: promtool's name for the gauge, not divvy's.  The
     * gauge follows the 1 s tick: the harness's own readiness connection
     * may still count in the first scrape. */
    harness_scrape_until(port, "/m", "divvy_open_connections 0", body, BIG);
    assert_null(strstr(body, "divvy_tcp_connections_total"));
}

/* Runs redis-cli @args on @d's RESP socket @times times; each answer must start with @want. */
static void redis_cli(struct harness_daemon *d, const char *args, int times, const char *want)
{
    char cmd[1024], out[512];
    size_t len;
    FILE *f;

    snprintf(cmd, sizeof(cmd), "redis-cli -s '%s' %s 2>&1", d->resp_sock, args);
    for (int i = 0; i < times; i++) {
        f = popen(cmd, "r");
        assert_non_null(f);
        len = fread(out, 1, sizeof(out) - 1, f);
        out[len] = '\0';
        assert_int_equal(pclose(f), 0);
        if (strncmp(out, want, strlen(want)) != 0)
            fail_msg("redis-cli %s: \"%s\", want \"%s...\"", args, out, want);
    }
}

/*
 * Decisions by the protocol they came on, ad-hoc buckets counted exactly,
 * and the process figures: line hits over the Unix socket, DIVVY.HIT and
 * RL.REDUCE / CL.THROTTLE through redis-cli on a resp: listener.
 */
static void test_metrics_protocols(void **state)
{
    static const char *const want[] = {
        "divvy_decisions_total{protocol=\"line\",status=\"accepted\"} 2",
        "divvy_decisions_total{protocol=\"line\",status=\"rejected\"} 1",
        "divvy_decisions_total{protocol=\"resp\",status=\"accepted\"} 3",
        "divvy_decisions_total{protocol=\"resp\",status=\"rejected\"} 1",
        "divvy_decisions_total{protocol=\"rls\",status=\"accepted\"} 0",
        "divvy_decisions_total{protocol=\"rls\",status=\"rejected\"} 0",
        "divvy_hits_total{status=\"accepted\",rule_label=\"status\"} 5",
        "divvy_hits_total{status=\"rejected\",rule_label=\"(default)\"} 2",
        "divvy_hit_duration_seconds_count 7",
        "divvy_adhoc_hits_total{command=\"RL.REDUCE\",status=\"allowed\"} 2",
        "divvy_adhoc_hits_total{command=\"RL.REDUCE\",status=\"limited\"} 1",
        "divvy_adhoc_hits_total{command=\"CL.THROTTLE\",status=\"allowed\"} 1",
        "divvy_adhoc_hits_total{command=\"CL.THROTTLE\",status=\"limited\"} 2",
    };
    struct harness_opts o = { .workers = 2, .resp = true };
    struct harness_daemon *d = NULL;
    struct harness_conn *u = NULL;
    char *text = harness_scratch(4096), *body = harness_scratch(BIG);
    int port = harness_free_port(SOCK_STREAM);
    const char *p;

    (void)state;
    assert_non_null(text);
    assert_non_null(body);
    if (system("command -v redis-cli >/dev/null 2>&1") != 0) {
        fprintf(stderr, "SKIP: redis-cli not installed (Debian: redis-tools)\n");
        skip();
    }
    snprintf(text, 4096, "metrics = { listen = \"tcp:127.0.0.1:%d\"; };\n%s", port,
             config_text);
    o.config_text = text;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &u));
    EXPECT_OK(u, "HIT method=GET path=/status", true, 999, 59, 60);
    EXPECT_OK(u, "HIT method=GET path=/status", true, 998, 59, 60);
    EXPECT_OK(u, "HIT method=DELETE path=/index.html", false, 0, 0, 0);
    harness_close(u);
    redis_cli(d, "DIVVY.HIT method GET path /status", 3, "1\n");
    redis_cli(d, "DIVVY.HIT method DELETE path /index.html", 1, "0\n");
    /* A bucket of 2 a minute: 2 allowed, then limited. */
    redis_cli(d, "RL.REDUCE bucket 2 60", 2, "");
    redis_cli(d, "RL.REDUCE bucket 2 60", 1, "");
    /* A burst of 0 at 1 an hour: 1 allowed, then 2 limited. */
    redis_cli(d, "CL.THROTTLE gcra 0 1 3600", 3, "");
    /* The ad-hoc figures follow the main loop's 1 s tick. */
    harness_scrape_until(port, "/metrics", want[sizeof(want) / sizeof(want[0]) - 1], body, BIG);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        expect_line(body, want[i]);
    p = strstr(body, "\nprocess_open_fds ");
    assert_non_null(p);
    /* At least stdin..stderr, the listeners, the epoll and the table files. */
    assert_true(strtoll(p + strlen("\nprocess_open_fds "), NULL, 10) > 5);
    p = strstr(body, "\nprocess_resident_memory_bytes ");
    assert_non_null(p);
    assert_true(strtoll(p + strlen("\nprocess_resident_memory_bytes "), NULL, 10) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metrics_prometheus_scrape, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_statsd, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_config_listen, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_protocols, harness_setup, harness_teardown),
    };

    return cmocka_run_group_tests_name("metrics_live", tests, NULL, NULL);
}
