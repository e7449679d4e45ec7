/* SPDX-License-Identifier: MIT */
/*
 * Integration: divvyd's per-client resource limits (native divvy.conf
 * settings).  server.max_connections: one unprivileged connection too many
 * gets "ERR busy" and is closed, the others keep working, root still gets in
 * on the Unix socket, and a freed place can be taken again (test_admission.c has
 * the rest of admission control).  server.max_output_bytes: a client that never reads its
 * replies is dropped once they pile up, while another client keeps being
 * served.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

static struct harness_daemon *start_conf(const char *text)
{
    struct harness_opts o = { .config_name = "limits.conf", .config_text = text };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    return d;
}

/* Polls STATS on @c until connections == @want (deadline 5 s). */
static long long wait_connections(struct harness_conn *c, long long want)
{
    uint64_t deadline = harness_now_ms() + 5000;
    long long n = -1;

    do {
        CHECK(harness_get_stat(c, "connections", &n));
        if (n == want)
            break;
        harness_pause_ms(20);
    } while (harness_now_ms() < deadline);
    return n;
}

static void test_limits_max_connections(void **state)
{
    static const char conf[] =
        "server = { max_connections = 4; };\n"
        "rules = (\n"
        "    { match = { path = \"/x\"; }; credit_limit = 100; reset_seconds = 600; },\n"
        "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    struct harness_daemon *d = start_conf(conf);
    struct harness_conn *probe, *c[4], *extra;
    char r[HARNESS_LINE];
    uint64_t deadline;
    long long refused;
    int busy = 0;
    bool served = false;

    (void)state;
    /* Root on the Unix socket is privileged: not counted in max_connections. */
    CHECK(harness_connect(d, HARNESS_UNIX, &probe));
    /* The harness's readiness PINGs must be gone before we count. */
    assert_int_equal(wait_connections(probe, 1), 1);
    for (int i = 0; i < 4; i++) {
        CHECK(harness_connect(d, HARNESS_TCP, &c[i]));
        EXPECT_REPLY(c[i], "PING", "OK pong");
    }
    /* The fifth unprivileged one: ERR busy, then closed. */
    CHECK(harness_connect(d, HARNESS_TCP, &extra));
    CHECK(harness_recv_line(extra, r, sizeof(r), HARNESS_TIMEOUT_MS));
    EXPECT_PREFIX(r, "ERR busy");
    CHECK(harness_wait_eof(extra, HARNESS_TIMEOUT_MS));
    harness_close(extra);
    CHECK(harness_get_stat(probe, "refused_max_connections", &refused));
    assert_int_equal(refused, 1);
    /* Root still gets in on the Unix socket (docs/daemon.md "Admission"). */
    CHECK(harness_connect(d, HARNESS_UNIX, &extra));
    EXPECT_REPLY(extra, "PING", "OK pong");
    harness_close(extra);
    /* The four are unaffected. */
    for (int i = 0; i < 4; i++)
        EXPECT_OK(c[i], "HIT path=/x", true, 99 - i, 599, 600);
    /* Free one place: a new client gets in (the daemon notices the close
     * asynchronously, so retry until a deadline; refusals must be "busy"). */
    harness_close(c[3]);
    deadline = harness_now_ms() + 5000;
    while (!served && harness_now_ms() < deadline) {
        ssize_t n;

        CHECK(harness_connect(d, HARNESS_TCP, &extra));
        n = harness_cmd(extra, "PING", r, sizeof(r));
        if (n >= 0 && strcmp(r, "OK pong") == 0) {
            served = true;
        } else if (n >= 0 && strncmp(r, "ERR busy", 8) == 0) {
            busy++;
            harness_pause_ms(20);
        } else {
            fail_msg("new connection after a close: %s", n < 0 ? strerror((int)-n) : r);
        }
        if (!served)
            harness_close(extra);
    }
    assert_true(served);
    c[3] = extra;
    EXPECT_OK(c[3], "HIT path=/x", true, 95, 599, 600);
    EXPECT_REPLY(probe, "PING", "OK pong");
    for (int i = 0; i < 4; i++)
        harness_close(c[i]);
    harness_close(probe);
}

/* 60 rules with long match values make RULES a ~15 kB reply. */
static char *many_rules_conf(unsigned max_output)
{
    size_t cap = 64 * 1024, len = 0;
    char *t = harness_scratch(cap);

    if (!t)
        return NULL;
    len += (size_t)snprintf(t + len, cap - len,
                            "server = { max_output_bytes = %u; };\nrules = (\n", max_output);
    for (int i = 0; i < 60; i++)
        len += (size_t)snprintf(t + len, cap - len,
                                "    { match = { path = \"/limits/%02d/a/rather/long/path/to/"
                                "make/every/line/of/the/rules/listing/longer\"; }; "
                                "credit_limit = %d; reset_seconds = 600; },\n", i, 1000 + i);
    snprintf(t + len, cap - len,
             "    { default = true; credit_limit = 0; reset_seconds = 0; }\n);\n");
    return t;
}

static void test_limits_max_output_bytes(void **state)
{
    char *conf = many_rules_conf(65536);
    struct harness_daemon *d;
    struct harness_conn *reader, *lazy, *probe;
    char reqs[6 * 1000], buf[HARNESS_LINE * 8], r[HARNESS_LINE];
    size_t rules_reply, total = 0;
    long long conns;
    bool dropped = false;
    uint64_t deadline;
    int rcvbuf = 4096, pings = 0;

    (void)state;
    assert_non_null(conf);
    d = start_conf(conf);
    CHECK(harness_connect(d, HARNESS_TCP, &reader));
    CHECK(harness_connect(d, HARNESS_UNIX, &probe));
    assert_int_equal(wait_connections(probe, 2), 2);
    /* The size of one RULES reply, read normally. */
    CHECK(harness_multi(reader, "RULES", buf, sizeof(buf)));
    rules_reply = strlen(buf) + strlen("OK 61\n");
    assert_true(rules_reply > 8000);

    /* A client that asks for 1000 RULES (~15 MB) and never reads. */
    CHECK(harness_connect(d, HARNESS_TCP, &lazy));
    setsockopt(lazy->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    assert_int_equal(wait_connections(probe, 3), 3);
    for (int i = 0; i < 1000; i++)
        memcpy(reqs + i * 6, "RULES\n", 6);
    assert_int_equal(send(lazy->fd, reqs, sizeof(reqs), MSG_NOSIGNAL), (ssize_t)sizeof(reqs));

    /* Meanwhile the reader is served, and the lazy one disappears. */
    deadline = harness_now_ms() + 10000;
    while (harness_now_ms() < deadline) {
        EXPECT_REPLY(reader, "PING", "OK pong");
        EXPECT_OK(reader, "HIT path=/limits/07/a/rather/long/path/to/make/every/line/of/the/"
                  "rules/listing/longer", true, 1006 - pings, 598, 600);
        pings++;
        CHECK(harness_get_stat(probe, "connections", &conns));
        if (conns == 2) {
            dropped = true;
            break;
        }
        harness_pause_ms(20);
    }
    assert_true(dropped);
    /* What the lazy client finds when it finally reads: part of the replies,
     * then the end of the connection. */
    deadline = harness_now_ms() + 10000;
    for (;;) {
        struct pollfd pfd = { .fd = lazy->fd, .events = POLLIN };
        ssize_t n;

        assert_true(harness_now_ms() < deadline);
        if (poll(&pfd, 1, 1000) <= 0)
            continue;
        n = recv(lazy->fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            break;
        assert_true(n > 0);
        total += (size_t)n;
    }
    if (total >= rules_reply * 1000)
        fail_msg("the lazy client got all %zu bytes: it was never dropped", total);
    /* The others are still fine. */
    EXPECT_REPLY(reader, "PING", "OK pong");
    CHECK(harness_multi(reader, "RULES", buf, sizeof(buf)));
    EXPECT_REPLY(probe, "PING", "OK pong");
    (void)r;
    harness_close(lazy);
    harness_close(reader);
    harness_close(probe);
}

/* A reading client may pipeline far more than max_output_bytes in total
 * (in batches below it) without being dropped. */
static void test_limits_reader_not_dropped(void **state)
{
    char *conf = many_rules_conf(65536);
    struct harness_daemon *d;
    struct harness_conn *c;
    char buf[HARNESS_LINE * 8];

    (void)state;
    assert_non_null(conf);
    d = start_conf(conf);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    for (int i = 0; i < 100; i++) {
        int n = harness_multi(c, "RULES", buf, sizeof(buf));

        if (n != 61)
            fail_msg("RULES #%d: %d", i, n);
    }
    EXPECT_REPLY(c, "PING", "OK pong");
    harness_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_limits_max_connections, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_limits_max_output_bytes, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_limits_reader_not_dropped, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("limits", tests, NULL, NULL);
}
