/* SPDX-License-Identifier: MIT */
/*
 * Integration: one user exhausts a rule's max_actors (issue 18 item 7),
 * against the shipped etc/divvy.conf.  A throwaway uid, in no group, sends
 * 20,000 HITs with made-up ip= values on the `GET /pantry/...` rule (one
 * credit an hour per ip, max_actors 20,000) over TCP, one pipelined
 * connection, as any local user can.  Afterwards a new real client of that
 * rule is still served (its when_full = "evict" makes room by forgetting one
 * of the made-up counters), while a real client that had used its credit
 * and been refused before the flood is still refused: eviction never takes
 * a counter that has refused someone (docs/rules.md "Full").  The same
 * through libdivvy's fast path, which evicts in-process with the same table
 * code: a flood past max_actors is served there, without divvyd.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "divvy.h"
#include "harness.h"

#define FLOOD_UID       64501   /* throwaway uid and gid: no passwd entry needed */
#define FLOOD_GID       64501
#define FLOOD_ACTORS    20000   /* the shipped rule's max_actors */

struct flood {
    int port;
    int report[2];
    /* from the child: */
    unsigned allowed, refused;
    uint64_t ms;
};

/* The child: drops to FLOOD_UID, sends FLOOD_ACTORS HITs with made-up ips on
 * one TCP connection and counts the answers.  Exit 0, the counts on the pipe. */
static int flood_child(void *arg)
{
    struct flood *f = arg;
    static char reqs[FLOOD_ACTORS * 64];
    char line[HARNESS_LINE];
    struct harness_conn *c = NULL;
    size_t len = 0;
    uint64_t t0;
    bool allowed;
    long long credit, secs;

    close(f->report[0]);
    if (setgroups(0, NULL) < 0 || setgid(FLOOD_GID) < 0 || setuid(FLOOD_UID) < 0 ||
        getuid() != FLOOD_UID)
        return 100;
    for (unsigned i = 0; i < FLOOD_ACTORS; i++)
        len += (size_t)snprintf(reqs + len, sizeof(reqs) - len,
                                "HIT method=GET path=/pantry/jam ip=10.%u.%u.%u\n",
                                i >> 16, (i >> 8) & 255, i & 255);
    t0 = harness_now_ms();
    if (harness_connect_tcp(f->port, &c) < 0 || harness_send(c, reqs, len) < 0)
        return 101;
    for (unsigned i = 0; i < FLOOD_ACTORS; i++) {
        if (harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS) < 0 ||
            harness_parse_ok(line, &allowed, &credit, &secs) < 0)
            return 102;
        if (allowed)
            f->allowed++;
        else
            f->refused++;
    }
    f->ms = harness_now_ms() - t0;
    harness_close(c);
    if (write(f->report[1], &f->allowed, sizeof(f->allowed)) != sizeof(f->allowed) ||
        write(f->report[1], &f->refused, sizeof(f->refused)) != sizeof(f->refused) ||
        write(f->report[1], &f->ms, sizeof(f->ms)) != sizeof(f->ms))
        return 103;
    return 0;
}

static void flood_run(struct flood *f)
{
    struct pollfd pfd;
    pid_t pid;
    int status;

    assert_int_equal(pipe2(f->report, O_CLOEXEC), 0);
    CHECK(harness_spawn(flood_child, f, &pid));
    close(f->report[1]);
    CHECK(harness_reap(pid, 120000, &status));
    if (status != 0)
        fail_msg("the flood as uid %d exited with %d", FLOOD_UID, status);
    pfd = (struct pollfd){ .fd = f->report[0], .events = POLLIN };
    assert_int_equal(poll(&pfd, 1, 0), 1);
    assert_int_equal(read(f->report[0], &f->allowed, sizeof(f->allowed)), sizeof(f->allowed));
    assert_int_equal(read(f->report[0], &f->refused, sizeof(f->refused)), sizeof(f->refused));
    assert_int_equal(read(f->report[0], &f->ms, sizeof(f->ms)), sizeof(f->ms));
    close(f->report[0]);
}

static void test_max_actors_flood_keeps_serving(void **state)
{
    struct harness_opts o = { .config_name = "divvy.conf" };
    char src[HARNESS_PATH];
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    struct flood f = { 0 };
    long long evictions = -1;

    (void)state;
    CHECK(harness_src_path("etc/divvy.conf", src, sizeof(src)));
    o.config_src = src;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    /* A real client that used its credit and was refused: being limited. */
    EXPECT_OK(c, "HIT method=GET path=/pantry/jam ip=192.0.2.1", true, 0, 3599, 3600);
    EXPECT_OK(c, "HIT method=GET path=/pantry/jam ip=192.0.2.1", false, 0, 3599, 3600);

    f.port = d->tcp_port;
    flood_run(&f);
    fprintf(stderr, "  %d made-up ips as uid %d over TCP in %llu ms: %u allowed, %u refused\n",
            FLOOD_ACTORS, FLOOD_UID, (unsigned long long)f.ms, f.allowed, f.refused);

    /* New real clients are served ... */
    EXPECT_OK(c, "HIT method=GET path=/pantry/jam ip=198.51.100.7", true, 0, 3599, 3600);
    EXPECT_OK(c, "HIT method=GET path=/pantry/jam ip=198.51.100.8", true, 0, 3599, 3600);
    /* ... and limited: their counters exist. */
    EXPECT_OK(c, "HIT method=GET path=/pantry/jam ip=198.51.100.7", false, 0, 3598, 3600);
    /* The client that was being refused still is. */
    EXPECT_OK(c, "HIT method=GET path=/pantry/jam ip=192.0.2.1", false, 0, 3598, 3600);
    /* Nothing of the flood was refused: each made-up ip made room too. */
    assert_int_equal(f.allowed, FLOOD_ACTORS);
    CHECK(harness_get_stat(c, "table_evictions", &evictions));
    assert_true(evictions >= 2);
    harness_close(c);
}

#define FAST_MAX    100

/* A fast table of 4096 slots: the eviction's sample reaches the rule's
 * 100 counters wherever they are (docs/dev/shm.md "Eviction"). */
static const char fast_conf[] =
    "table = { fast_slots = 4096; };\n"
    "rules = (\n"
    "    { match = { path = \"/f\"; ip = \"*\"; }; actor = \"ip\"; credit_limit = 1;\n"
    "      reset_seconds = 3600; max_actors = 100; when_full = \"evict\";\n"
    "      fast_path = true; label = \"f\"; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

/* One fast-path hit of ip @ip: 1 allowed, 0 refused; fails the test when
 * divvyd, not this process, decided. */
static int fast_hit(struct divvy *h, const char *ip)
{
    struct divvy_kv kv[2] = { { "path", "/f" }, { "ip", ip } };
    struct divvy_result res = { .size = sizeof(res) };

    if (divvy_hit(h, kv, 2, &res) < 0 || !res.fast_path)
        fail_msg("ip=%s: not decided in-process: %s", ip, divvy_errmsg(h));
    return res.allowed;
}

static void test_max_actors_fast_path_evicts(void **state)
{
    struct harness_opts o = { .config_text = fast_conf };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    struct divvy *h = NULL;
    long long evictions = -1;
    char ip[32];
    int allowed = 0;

    (void)state;
    CHECK(harness_start(&o, &d));
    CHECK(harness_divvy_env(d));
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    harness_wait_fast(h, (struct divvy_kv[]){ { "path", "/f" }, { "ip", "warm" } }, 2);
    assert_int_equal(fast_hit(h, "192.0.2.1"), 1);
    assert_int_equal(fast_hit(h, "192.0.2.1"), 0);
    for (int i = 0; i < 3 * FAST_MAX; i++) {
        snprintf(ip, sizeof(ip), "10.0.%d.%d", i >> 8, i & 255);
        allowed += fast_hit(h, ip);
    }
    assert_int_equal(allowed, 3 * FAST_MAX);
    assert_int_equal(fast_hit(h, "198.51.100.7"), 1);
    assert_int_equal(fast_hit(h, "192.0.2.1"), 0);
    divvy_close(h);
    /* divvyd sees the evictions the client made in the shared table. */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_get_stat(c, "table_evictions", &evictions));
    assert_true(evictions >= 2 * FAST_MAX);
    harness_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_max_actors_flood_keeps_serving, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_max_actors_fast_path_evicts, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("max_actors", tests, NULL, NULL);
}
