/* SPDX-License-Identifier: MIT */
/*
 * Integration: what the metrics endpoint and STATS let a local user do and
 * see (issue 18 items 9 and 10), each attack run as the throwaway
 * unprivileged user it names.
 *
 * - Slowloris: a user holds 320 connections to the Prometheus endpoint from
 *   32 loopback addresses (127.0.0.2 ...), each sending a header line a
 *   second and reconnecting whenever the endpoint closes it; scrapes from
 *   127.0.0.1 by another process keep being answered, 200 with the whole
 *   exposition, while it lasts (docs/operations.md "Prometheus").  A slow
 *   request alone on its address is closed once it has waited
 *   HTTP_REQUEST_MS (5 s) and another connection arrives.
 * - STATS: an unprivileged peer (TCP, and a Unix peer that is no admin) gets
 *   none of the login figures (privileged_table_*,
 *   denials_no_counter); root on the Unix socket gets them
 *   (docs/operations.md "What STATS and metrics reveal").
 * - Metrics: privileged rules' series and the privileged table's figures
 *   appear only with metrics.privileged = true.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define SLOW_UID        64601   /* throwaway uid and gid, no passwd entry needed */
#define SLOW_GID        64601
#define STATS_UID       64602
#define SLOW_ADDRS      32
#define SLOW_PER_ADDR   10
#define SLOW_N          (SLOW_ADDRS * SLOW_PER_ADDR)
#define ATTACK_MS       12000
#define SCRAPE_MS       3000    /* one scrape's wait for each line of the reply */
#define BIG             262144

static const char rules_text[] =
    "rules = (\n"
    "  { match = { service = \"sshd\"; user = \"*\"; }; actor = \"user\";\n"
    "    credit_limit = 3; reset_seconds = 900; source = \"privileged\";\n"
    "    label = \"login-user\"; },\n"
    "  { match = { path = \"/status\"; }; credit_limit = 100; reset_seconds = 60;\n"
    "    label = \"status\"; },\n"
    "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static void expect_line(const char *text, const char *line, bool want)
{
    size_t n = strlen(line);

    for (const char *p = text; (p = strstr(p, line)) != NULL; p += n)
        if ((p == text || p[-1] == '\n') && p[n] == '\n') {
            if (!want)
                fail_msg("line \"%s\" should not be in:\n%s", line, text);
            return;
        }
    if (want)
        fail_msg("no line \"%s\" in:\n%s", line, text);
}

static void start_with_metrics(const char *extra, struct harness_daemon **ret_d, int *ret_port)
{
    struct harness_opts o = { .workers = 2 };
    char *text = harness_scratch(4096);
    int port = harness_free_port(SOCK_STREAM);

    assert_non_null(text);
    snprintf(text, 4096, "metrics = { listen = \"tcp:127.0.0.1:%d\"; %s };\n%s", port, extra,
             rules_text);
    o.config_text = text;
    CHECK(harness_start(&o, ret_d));
    *ret_port = port;
}

/* ---- slowloris ------------------------------------------------------------------- */

struct slow {
    int port;
    int ready[2];
    pid_t pid;
};

/* A connection from 127.0.0.<2 + i / SLOW_PER_ADDR> that has started a request. */
static int slow_open(int port, unsigned i)
{
    static const char head[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n";
    struct sockaddr_in from = { .sin_family = AF_INET }, to = { .sin_family = AF_INET };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    if (fd < 0)
        return -errno;
    from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 2 + i / SLOW_PER_ADDR);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0 ||
        (connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0 && errno != EINPROGRESS)) {
        int r = -errno;

        close(fd);
        return r;
    }
    /* Loopback connects at once; a refused one fails the send and is retried. */
    (void)send(fd, head, sizeof(head) - 1, MSG_NOSIGNAL);
    return fd;
}

/* True when the endpoint closed @fd (or replied: a slow client never gets a reply). */
static bool slow_closed(int fd)
{
    char buf[512];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

    return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

/* The attack, as SLOW_UID: SLOW_N slow requests, a header line each a
 * second, each one reopened as soon as the endpoint closes it.  Runs until
 * killed (bounded by the test: ATTACK_MS plus the wait for it). */
static int slow_child(void *arg)
{
    struct slow *s = arg;
    int fds[SLOW_N];
    char ok = 1;

    close(s->ready[0]);
    if (setgroups(0, NULL) < 0 || setgid(SLOW_GID) < 0 || setuid(SLOW_UID) < 0)
        return 100;
    for (unsigned i = 0; i < SLOW_N; i++)
        fds[i] = slow_open(s->port, i);
    if (write(s->ready[1], &ok, 1) != 1)
        return 101;
    close(s->ready[1]);
    for (unsigned tick = 0;; tick++) {
        char line[64];
        int len = snprintf(line, sizeof(line), "X-Slow-%u: %u\r\n", tick, tick);

        for (unsigned i = 0; i < SLOW_N; i++) {
            if (fds[i] >= 0 && !slow_closed(fds[i]) &&
                send(fds[i], line, (size_t)len, MSG_NOSIGNAL) == len)
                continue;
            if (fds[i] >= 0)
                close(fds[i]);
            fds[i] = slow_open(s->port, i);
        }
        sleep(1);
    }
    return 0;
}

/* Scrapes from 127.0.0.1 (this process, root) all along a slowloris run
 * by SLOW_UID from other addresses: every one is answered in full. */
static void test_metrics_slowloris(void **state)
{
    struct harness_daemon *d = NULL;
    struct slow s = { 0 };
    struct pollfd pfd;
    struct rlimit rl = { 4096, 4096 };
    char *body = harness_scratch(BIG), ok, failed[256] = "";
    unsigned scrapes = 0;
    uint64_t until, stop_ms;
    int port, status, st;

    (void)state;
    assert_non_null(body);
    /* The attacker's descriptors are its own; divvyd's budget is its config's. */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    start_with_metrics("", &d, &port);
    assert_int_equal(harness_http_get(port, "/metrics", body, BIG), 200);

    s.port = port;
    assert_int_equal(pipe2(s.ready, O_CLOEXEC), 0);
    CHECK(harness_spawn(slow_child, &s, &s.pid));
    close(s.ready[1]);
    pfd = (struct pollfd){ .fd = s.ready[0], .events = POLLIN };
    assert_int_equal(poll(&pfd, 1, 20000), 1);
    assert_int_equal(read(s.ready[0], &ok, 1), 1);
    close(s.ready[0]);

    until = harness_now_ms() + ATTACK_MS;
    while (harness_now_ms() < until && !failed[0]) {
        status = harness_http_get_ms(port, "/metrics", body, BIG, SCRAPE_MS);
        if (status != 200)
            snprintf(failed, sizeof(failed), "scrape %u during the slowloris: status %d (%s)",
                     scrapes + 1, status,
                     status < -1 ? strerror(-status) : "no reply within 3 s");
        else if (!strstr(body, "\ndivvy_build_info{version=\"" DIVVY_VERSION "\"} 1\n") ||
                 !strstr(body, "\nprocess_start_time_seconds "))
            snprintf(failed, sizeof(failed), "scrape %u during the slowloris: a partial "
                     "exposition", scrapes + 1);
        else
            scrapes++;
        harness_pause_ms(200);      /* pacing, not waiting for an event */
    }
    /* divvyd stops in time with the attack still on; then the attacker goes. */
    stop_ms = harness_now_ms();
    CHECK(harness_stop(d, &status));
    stop_ms = harness_now_ms() - stop_ms;
    assert_int_equal(kill(s.pid, SIGKILL), 0);
    CHECK(harness_reap(s.pid, 10000, &st));
    assert_int_equal(st, 128 + SIGKILL);
    if (failed[0])
        fail_msg("%s", failed);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("divvyd stopped with status 0x%x under the slowloris", (unsigned)status);
    assert_true(scrapes >= 20);
    assert_int_equal(harness_log_contains(d, "metrics endpoint: closed a connection: too many "
                                             "connections from its address"), 1);
    assert_int_equal(harness_log_contains(d, "metrics endpoint: closed a connection: too many "
                                             "connections\n"), 1);
    /* The account kept libmicrohttpd under its own limit: it refused nobody. */
    assert_int_equal(harness_log_contains(d, "connection limit"), 0);
    fprintf(stderr, "test_metrics_trust: %u scrapes answered during the slowloris; divvyd "
                    "stopped in %llu ms\n", scrapes, (unsigned long long)stop_ms);
    harness_free(d);
}

/* A slow request below every cap is closed once it has waited HTTP_REQUEST_MS
 * and another connection arrives. */
static void test_metrics_slow_request_closed(void **state)
{
    struct harness_daemon *d = NULL;
    char *body = harness_scratch(BIG);
    uint64_t start;
    int port, fd;

    (void)state;
    assert_non_null(body);
    start_with_metrics("", &d, &port);
    fd = slow_open(port, 0);
    CHECK(fd);
    start = harness_now_ms();
    for (unsigned tick = 0; harness_now_ms() - start < 5600; tick++) {
        char line[64];
        int len = snprintf(line, sizeof(line), "X-Slow-%u: %u\r\n", tick, tick);

        assert_false(slow_closed(fd));
        assert_int_equal(send(fd, line, (size_t)len, MSG_NOSIGNAL), len);
        harness_pause_ms(400);      /* the slow client's pace */
    }
    assert_int_equal(harness_http_get(port, "/metrics", body, BIG), 200);
    {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        char buf[64];

        assert_int_equal(poll(&pfd, 1, 5000), 1);
        assert_true(recv(fd, buf, sizeof(buf), 0) <= 0);
    }
    close(fd);
    assert_int_equal(harness_log_contains(d, "metrics endpoint: closed a connection: no "
                                             "complete request in time"), 1);
    harness_free(d);
}

/* ---- what STATS and metrics reveal -------------------------------------------------- */

static const char *const lane_lines[] = {
    "privileged_table_slots", "privileged_table_live", "denials_no_counter",
};

/* 0 when STATS over @c lacks every login figure (and has the
 * others), else the index of the first line it has plus 20. */
static int stats_lacks_lane(struct harness_conn *c)
{
    char buf[HARNESS_LINE * 2];
    long long v;

    if (harness_multi(c, "STATS", buf, sizeof(buf)) < 0 || harness_stat(buf, "hits_total", &v) < 0)
        return 10;
    for (unsigned i = 0; i < sizeof(lane_lines) / sizeof(lane_lines[0]); i++)
        if (harness_stat(buf, lane_lines[i], &v) == 0)
            return 20 + (int)i;
    return 0;
}

struct peer {
    int port;
    const char *sock;
};

/* As STATS_UID: STATS over TCP and over the Unix socket lacks the lane. */
static int stats_child(void *arg)
{
    const struct peer *p = arg;
    struct harness_conn *c = NULL;
    int r;

    if (setgroups(0, NULL) < 0 || setgid(STATS_UID) < 0 || setuid(STATS_UID) < 0)
        return 1;
    if (harness_connect_tcp(p->port, &c) < 0)
        return 2;
    r = stats_lacks_lane(c);
    harness_close(c);
    if (r)
        return r;
    if (harness_connect_unix(p->sock, &c) < 0)
        return 3;
    r = stats_lacks_lane(c);
    harness_close(c);
    return r ? r + 10 : 0;
}

static void test_stats_login_figures_for_privileged_only(void **state)
{
    struct harness_opts o = { .workers = 2 };
    struct harness_daemon *d = NULL;
    struct harness_conn *u = NULL;
    struct peer p;
    char *text = harness_scratch(4096), buf[HARNESS_LINE * 2];
    long long v;
    pid_t pid;
    int status;

    (void)state;
    assert_non_null(text);
    /* The socket open to everyone, so the throwaway uid can reach it. */
    snprintf(text, 4096, "server = { socket_mode = \"0666\"; };\n%s", rules_text);
    o.config_text = text;
    CHECK(harness_start(&o, &d));
    assert_int_equal(chmod(d->dir, 0711), 0);
    CHECK(harness_connect(d, HARNESS_UNIX, &u));
    EXPECT_OK_RULE(u, "TAKE 1 service=sshd user=alice", true, 2, 899, 900, "login-user");

    /* Root on the Unix socket: every figure of the lane. */
    CHECK(harness_multi(u, "STATS", buf, sizeof(buf)));
    CHECK(harness_stat(buf, "privileged_table_slots", &v));
    assert_int_equal(v, 65536);
    CHECK(harness_stat(buf, "privileged_table_live", &v));
    assert_int_equal(v, 1);
    CHECK(harness_stat(buf, "denials_no_counter", &v));
    assert_int_equal(v, 0);

    /* Anyone else: none, over TCP or the Unix socket. */
    p = (struct peer){ .port = d->tcp_port, .sock = d->sock };
    CHECK(harness_spawn(stats_child, &p, &pid));
    CHECK(harness_reap(pid, 20000, &status));
    if (status != 0)
        fail_msg("STATS as uid %d: child status %d (2x: TCP has line x, 3x: Unix has line x, "
                 "of privileged_table_slots, privileged_table_live, denials_no_counter)",
                 STATS_UID, status);
    harness_close(u);
    harness_free(d);
}

/* The privileged rules' series and table only with metrics.privileged = true. */
static void test_metrics_login_figures_by_option(void **state)
{
    struct harness_daemon *d = NULL;
    struct harness_conn *u = NULL;
    char *body = harness_scratch(BIG);
    int port;

    (void)state;
    assert_non_null(body);
    for (int shown = 0; shown <= 1; shown++) {
        start_with_metrics(shown ? "privileged = true;" : "", &d, &port);
        CHECK(harness_connect(d, HARNESS_UNIX, &u));
        EXPECT_OK_RULE(u, "TAKE 1 service=sshd user=alice", true, 2, 899, 900, "login-user");
        EXPECT_OK_RULE(u, "TAKE 1 path=/status", true, 99, 59, 60, "status");
        /* The tables' fill follows divvyd's tick. */
        harness_scrape_until(port, "/metrics",
                             shown ? "divvy_table_live_slots{table=\"privileged\"} 1"
                                   : "divvy_table_live_slots{table=\"private\"} 1",
                             body, BIG);
        /* Totals count every hit, the login rule's too. */
        expect_line(body, "divvy_hit_duration_seconds_count 2", true);
        expect_line(body, "divvy_hits_total{status=\"accepted\",rule_label=\"status\"} 1", true);
        expect_line(body, "divvy_hits_total{status=\"accepted\",rule_label=\"login-user\"} 1",
                    shown);
        expect_line(body, "divvy_table_slots{table=\"privileged\"} 65536", shown);
        expect_line(body, "divvy_denials_total{cause=\"no-counter\"} 0", shown);
        expect_line(body, "divvy_errors_total{code=\"no-counter\"} 0", shown);
        if (!shown && (strstr(body, "login-user") || strstr(body, "table=\"privileged\"")))
            fail_msg("the login figures in the exposition");
        harness_close(u);
        harness_free(d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metrics_slowloris, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_slow_request_closed, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_stats_login_figures_for_privileged_only,
                                        harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_login_figures_by_option, harness_setup,
                                        harness_teardown),
    };

    if (getenv("DIVVY_TEST_FILTER"))
        cmocka_set_test_filter(getenv("DIVVY_TEST_FILTER"));
    return cmocka_run_group_tests_name("metrics_trust", tests, NULL, NULL);
}
