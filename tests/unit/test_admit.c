/* SPDX-License-Identifier: MIT */
/*
 * Unit: daemon/admit.c, the admission decisions without sockets.  Budgets,
 * the overall cap, per-peer caps (IPv6 by /64, IPv4-mapped as IPv4), the
 * privileged reserve, exact release, the output budget's pause rule, what a
 * connection may hold, the timeouts, and the RLIMIT_NOFILE fit.
 * tests/integration/test_admit.c runs the same against a real divvyd.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "daemon/log.h"
#include "daemon/admit.h"

static const struct admit_opts opts = {
    .tcp_max = 6, .unix_max = 4, .total_max = 8, .reserve = 2, .per_address = 3,
    .per_uid = 2, .idle_ms = 1000, .request_ms = 400, .output_budget = 65536,
};

static struct admit_peer tcp4(const char *ip)
{
    struct admit_peer p = { .is_unix = false };
    struct sockaddr_in *in = (struct sockaddr_in *)&p.addr;

    in->sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, ip, &in->sin_addr), 1);
    return p;
}

static struct admit_peer tcp6(const char *ip)
{
    struct admit_peer p = { .is_unix = false };
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&p.addr;

    in6->sin6_family = AF_INET6;
    assert_int_equal(inet_pton(AF_INET6, ip, &in6->sin6_addr), 1);
    return p;
}

static struct admit_peer unix_peer(uid_t uid, bool privileged)
{
    return (struct admit_peer){ .is_unix = true, .uid = uid, .privileged = privileged };
}

/* Enters @p: 0 and the slot, or the refusal's reason + 100. */
static int enter(struct admit *a, const struct admit_peer *p, struct admit_slot *slot)
{
    enum admit_refusal why = ADMIT_N_REFUSALS;
    int r = admit_enter(a, p, slot, &why);

    if (r == -EBUSY)
        return 100 + (int)why;
    assert_int_equal(r, 0);
    return 0;
}

static void test_admit_tcp_caps(void **state)
{
    struct admit *a = NULL;
    struct admit_slot s[16] = { 0 };
    struct admit_peer p1 = tcp4("192.0.2.1"), p2 = tcp4("192.0.2.2");
    struct admit_peer v6a = tcp6("2001:db8::1"), v6b = tcp6("2001:db8::2:3");
    struct admit_peer mapped = tcp6("::ffff:192.0.2.1");
    struct admit_stats st;

    (void)state;
    assert_int_equal(admit_new(&opts, &a), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(enter(a, &p1, &s[i]), 0);
    /* The fourth from one address, also as an IPv4-mapped IPv6 address. */
    assert_int_equal(enter(a, &p1, &s[15]), 100 + ADMIT_R_PER_ADDRESS);
    assert_int_equal(enter(a, &mapped, &s[15]), 100 + ADMIT_R_PER_ADDRESS);
    /* One IPv6 /64 is one peer. */
    assert_int_equal(enter(a, &v6a, &s[3]), 0);
    assert_int_equal(enter(a, &v6b, &s[4]), 0);
    assert_int_equal(enter(a, &p2, &s[5]), 0);
    /* Six TCP connections: the TCP budget is full. */
    assert_int_equal(enter(a, &p2, &s[15]), 100 + ADMIT_R_TCP);
    admit_stats(a, &st);
    assert_int_equal(st.tcp_conns, 6);
    assert_int_equal(st.refused[ADMIT_R_PER_ADDRESS], 2);
    assert_int_equal(st.refused[ADMIT_R_TCP], 1);
    /* Every place comes back, once. */
    for (int i = 0; i < 6; i++) {
        admit_leave(a, &s[i]);
        admit_leave(a, &s[i]);
    }
    admit_stats(a, &st);
    assert_int_equal(st.tcp_conns, 0);
    assert_int_equal(admit_peers(a), 0);
    assert_int_equal(enter(a, &p1, &s[0]), 0);
    admit_leave(a, &s[0]);
    admit_free(a);
}

static void test_admit_unix_reserve(void **state)
{
    struct admit *a = NULL;
    struct admit_slot s[16] = { 0 }, extra = { 0 };
    struct admit_peer u1 = unix_peer(1000, false), u2 = unix_peer(1001, false);
    struct admit_peer u3 = unix_peer(1002, false), root = unix_peer(0, true);
    struct admit_stats st;
    int n = 0;

    (void)state;
    assert_int_equal(admit_new(&opts, &a), 0);
    assert_int_equal(enter(a, &u1, &s[n++]), 0);
    assert_int_equal(enter(a, &u1, &s[n++]), 0);
    assert_int_equal(enter(a, &u1, &extra), 100 + ADMIT_R_PER_UID);
    assert_int_equal(enter(a, &u2, &s[n++]), 0);
    assert_int_equal(enter(a, &u2, &s[n++]), 0);
    assert_int_equal(enter(a, &u3, &extra), 100 + ADMIT_R_UNIX);
    /* Root: no per-uid cap, the reserve beyond the full Unix budget, then busy. */
    assert_int_equal(enter(a, &root, &s[n++]), 0);
    assert_true(s[n - 1].reserve);
    assert_int_equal(enter(a, &root, &s[n++]), 0);
    assert_int_equal(enter(a, &root, &extra), 100 + ADMIT_R_RESERVE);
    admit_stats(a, &st);
    assert_int_equal(st.unix_conns, 4);
    assert_int_equal(st.reserve_conns, 2);
    /* A place in the Unix budget freed goes to whoever comes first. */
    admit_leave(a, &s[0]);
    assert_int_equal(enter(a, &root, &s[0]), 0);
    assert_false(s[0].reserve);
    for (int i = 0; i < n; i++)
        admit_leave(a, &s[i]);
    admit_stats(a, &st);
    assert_int_equal(st.unix_conns + st.reserve_conns, 0);
    assert_int_equal(admit_peers(a), 0);
    admit_free(a);
}

/* max_connections counts the unprivileged only, TCP and Unix together. */
static void test_admit_total_cap(void **state)
{
    struct admit *a = NULL;
    struct admit_slot s[16] = { 0 }, extra = { 0 };
    struct admit_peer root = unix_peer(0, true);
    char ip[32];
    int n = 0;

    (void)state;
    assert_int_equal(admit_new(&opts, &a), 0);
    for (int i = 0; i < 6; i++) {
        struct admit_peer p;

        snprintf(ip, sizeof(ip), "198.51.100.%d", i + 1);
        p = tcp4(ip);
        assert_int_equal(enter(a, &p, &s[n++]), 0);
    }
    for (uid_t u = 2000; u < 2002; u++) {
        struct admit_peer p = unix_peer(u, false);

        assert_int_equal(enter(a, &p, &s[n++]), 0);
    }
    {
        struct admit_peer p = unix_peer(2005, false);

        assert_int_equal(enter(a, &p, &extra), 100 + ADMIT_R_TOTAL);
    }
    /* Root still has the Unix budget's last two places, then the reserve. */
    for (int i = 0; i < 4; i++)
        assert_int_equal(enter(a, &root, &s[n++]), 0);
    assert_int_equal(enter(a, &root, &extra), 100 + ADMIT_R_RESERVE);
    for (int i = 0; i < n; i++)
        admit_leave(a, &s[i]);
    admit_free(a);
}

static void test_admit_output_pause(void **state)
{
    struct admit *a = NULL;
    struct admit_slot s[4] = { 0 };
    struct admit_peer p = tcp4("192.0.2.9"), root = unix_peer(0, true);
    struct admit_stats st;

    (void)state;
    assert_int_equal(admit_new(&opts, &a), 0);
    assert_int_equal(enter(a, &p, &s[0]), 0);
    assert_int_equal(enter(a, &p, &s[1]), 0);
    assert_int_equal(enter(a, &root, &s[2]), 0);
    /* Within the budget nobody pauses. */
    admit_charge(a, &s[0], 60000);
    assert_false(admit_out_pause(a, &s[1], 50000));
    /* Spent: a share is 65536 / 3 connections; above it, pause. */
    admit_charge(a, &s[1], 10000);
    assert_true(admit_out_pause(a, &s[1], 30000));
    assert_false(admit_out_pause(a, &s[1], 20000));
    assert_false(admit_out_pause(a, &s[1], ADMIT_SHARE_MIN));
    /* Privileged connections never pause. */
    assert_false(admit_out_pause(a, &s[2], 1 << 20));
    admit_stats(a, &st);
    assert_int_equal(st.output_bytes, 70000);
    assert_int_equal(st.output_paused, 1);
    /* Leaving releases the charge. */
    admit_leave(a, &s[0]);
    admit_charge(a, &s[1], 4000);
    admit_stats(a, &st);
    assert_int_equal(st.output_bytes, 4000);
    assert_false(admit_out_pause(a, &s[1], 30000));
    admit_leave(a, &s[1]);
    admit_leave(a, &s[2]);
    admit_stats(a, &st);
    assert_int_equal(st.output_bytes, 0);
    admit_free(a);
}

/* What a connection may hold (RLS input): its own cap until the budget is
 * spent, then its share; what connections hold, for memtrim. */
static void test_admit_allowance(void **state)
{
    struct admit *a = NULL;
    struct admit_slot s[3] = { 0 };
    struct admit_peer p = tcp4("192.0.2.9"), root = unix_peer(0, true);
    struct admit_stats st;

    (void)state;
    assert_int_equal(admit_new(&opts, &a), 0);
    assert_int_equal(admit_held(a), 0);
    assert_int_equal(enter(a, &p, &s[0]), 0);
    assert_int_equal(enter(a, &p, &s[1]), 0);
    assert_int_equal(enter(a, &root, &s[2]), 0);
    assert_int_equal(admit_allowance(a, &s[0], 512 * 1024), 512 * 1024);
    admit_charge(a, &s[0], 70000);
    /* Spent: a third of 65536 each, never more than the connection's own cap. */
    assert_int_equal(admit_allowance(a, &s[1], 512 * 1024), 65536 / 3);
    assert_int_equal(admit_allowance(a, &s[1], 1000), 1000);
    assert_int_equal(admit_allowance(a, &s[2], 512 * 1024), 512 * 1024);
    /* Three open connections plus the charge. */
    assert_int_equal(admit_held(a), 3 * 16384 + 70000);
    /* Asking is not pausing; admit_paused() counts. */
    admit_stats(a, &st);
    assert_int_equal(st.output_paused, 0);
    admit_paused(a);
    admit_stats(a, &st);
    assert_int_equal(st.output_paused, 1);
    admit_leave(a, &s[0]);
    assert_int_equal(admit_allowance(a, &s[1], 512 * 1024), 512 * 1024);
    assert_int_equal(admit_held(a), 2 * 16384);
    admit_leave(a, &s[1]);
    admit_leave(a, &s[2]);
    assert_string_equal(admit_close_name(ADMIT_C_INPUT_LIMIT), "input_limit");
    admit_free(a);
}

static void test_admit_timeouts(void **state)
{
    struct admit *a = NULL;
    struct admit_opts none = opts;

    (void)state;
    assert_int_equal(admit_new(&opts, &a), 0);
    /* idle 1000, request 400: sweeps every 100 ms. */
    assert_int_equal(admit_sweep_ms(a), 100);
    assert_int_equal(admit_expired(a, 10999, true, 10000, 0, 0), -1);
    assert_int_equal(admit_expired(a, 11000, true, 10000, 0, 0), ADMIT_C_IDLE);
    assert_int_equal(admit_expired(a, 11000, false, 10000, 0, 0), -1);
    assert_int_equal(admit_expired(a, 11000, false, 10990, 10600, 0), ADMIT_C_REQUEST);
    assert_int_equal(admit_expired(a, 11000, false, 10990, 10601, 0), -1);
    assert_int_equal(admit_expired(a, 11000, false, 10990, 0, 10600), ADMIT_C_OUTPUT);
    admit_free(a);
    none.idle_ms = none.request_ms = 0;
    assert_int_equal(admit_new(&none, &a), 0);
    assert_int_equal(admit_sweep_ms(a), 0);
    assert_int_equal(admit_expired(a, 1000000, true, 0, 1, 1), -1);
    admit_free(a);
}

/* In a child: with 300 descriptors, max_connections shrinks to leave the
 * reserve (and divvyd's own) its descriptors. */
static void test_admit_nofile(void **state)
{
    pid_t pid;
    int status;

    (void)state;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = { 300, 300 };
        struct admit_opts o = opts;
        struct admit *a = NULL;
        struct admit_stats st;

        o.tcp_max = 4096;
        o.unix_max = 1024;
        o.total_max = 5120;
        o.reserve = 32;
        o.fd_reserve = 68;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || admit_new(&o, &a) < 0)
            _exit(2);
        admit_stats(a, &st);
        admit_free(a);
        _exit(st.total_max == 300 - 32 - 68 ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admit_tcp_caps),
        cmocka_unit_test(test_admit_unix_reserve),
        cmocka_unit_test(test_admit_total_cap),
        cmocka_unit_test(test_admit_output_pause),
        cmocka_unit_test(test_admit_allowance),
        cmocka_unit_test(test_admit_timeouts),
        cmocka_unit_test(test_admit_nofile),
    };

    return cmocka_run_group_tests_name("admit", tests, NULL, NULL);
}
