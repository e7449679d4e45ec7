/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/metrics_http.c's account of the endpoint's
 * connections (metrics_http_admit()): which connections a newcomer closes
 * and which it keeps.  Each connection is one end of a real socketpair, so
 * a close is seen as the other end reading the end of the stream.
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
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/metrics_int.h"

#define MAX_CONNS   (4 * HTTP_CONN_MAX)

struct fixture {
    struct metrics_http_acct a;
    struct metrics_http_conn c[MAX_CONNS];
    int peer[MAX_CONNS];        /* the client's end of c[i].fd */
    unsigned n;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (!f)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    for (unsigned i = 0; i < f->n; i++) {
        close(f->c[i].fd);
        close(f->peer[i]);
    }
    free(f);
    return 0;
}

/* A new connection from IPv4 @ip at @now, admitted; returns its index. */
static unsigned arrive(struct fixture *f, const char *ip, uint64_t now)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    struct metrics_http_conn *c = &f->c[f->n];
    int sv[2];

    assert_true(f->n < MAX_CONNS);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(inet_pton(AF_INET, ip, &sa.sin_addr), 1);
    metrics_http_addr((struct sockaddr *)&sa, &c->addr);
    c->fd = sv[0];
    f->peer[f->n] = sv[1];
    c->since_ms = now;
    metrics_http_track(&f->a, c);
    metrics_http_admit(&f->a, c, now);
    return f->n++;
}

/* True when the endpoint shut connection @i down (its client reads EOF). */
static bool closed(struct fixture *f, unsigned i)
{
    char b;

    return recv(f->peer[i], &b, 1, MSG_DONTWAIT) == 0;
}

/* A slow request is closed once it waited HTTP_REQUEST_MS, when another
 * connection arrives; one whose request is in, or that was answered
 * recently, stays. */
static void test_metrics_http_slow_requests_go(void **state)
{
    struct fixture *f = *state;
    unsigned slow, busy, answered, fresh;

    slow = arrive(f, "10.0.0.1", 1000);
    busy = arrive(f, "10.0.0.2", 1000);
    f->c[busy].busy = true;
    answered = arrive(f, "10.0.0.3", 1000);
    f->c[answered].since_ms = 1000 + HTTP_REQUEST_MS;      /* its last reply */
    fresh = arrive(f, "10.0.0.4", 1000 + HTTP_REQUEST_MS);
    assert_false(closed(f, slow));                          /* not past the deadline yet */
    fresh = arrive(f, "10.0.0.4", 1001 + HTTP_REQUEST_MS);
    assert_true(closed(f, slow));
    assert_false(closed(f, busy));
    assert_false(closed(f, answered));
    assert_false(closed(f, fresh));
    assert_int_equal(f->a.n, 4);
    assert_int_equal(f->a.closed[METRICS_HTTP_CLOSE_SLOW], 1);
}

/* An address keeps its HTTP_PER_ADDRESS newest connections; others are not
 * touched.  IPv6 counts by /64, an IPv4-mapped address as IPv4. */
static void test_metrics_http_per_address(void **state)
{
    struct fixture *f = *state;
    struct sockaddr_in6 a6 = { .sin6_family = AF_INET6 }, b6 = { .sin6_family = AF_INET6 };
    struct sockaddr_in v4 = { .sin_family = AF_INET };
    struct metrics_http_addr x, y;
    unsigned other, first;

    other = arrive(f, "192.0.2.9", 0);
    first = arrive(f, "192.0.2.1", 0);
    for (unsigned i = 1; i < HTTP_PER_ADDRESS; i++)
        arrive(f, "192.0.2.1", 0);
    assert_false(closed(f, first));
    arrive(f, "192.0.2.1", 0);
    assert_true(closed(f, first));
    assert_false(closed(f, first + 1));
    assert_false(closed(f, other));
    assert_int_equal(f->a.closed[METRICS_HTTP_CLOSE_ADDRESS], 1);

    inet_pton(AF_INET6, "2001:db8:1:2::1", &a6.sin6_addr);
    inet_pton(AF_INET6, "2001:db8:1:2:ffff::7", &b6.sin6_addr);
    metrics_http_addr((struct sockaddr *)&a6, &x);
    metrics_http_addr((struct sockaddr *)&b6, &y);
    assert_memory_equal(&x, &y, sizeof(x));
    inet_pton(AF_INET6, "2001:db8:1:3::1", &b6.sin6_addr);
    metrics_http_addr((struct sockaddr *)&b6, &y);
    assert_memory_not_equal(&x, &y, sizeof(x));
    inet_pton(AF_INET6, "::ffff:192.0.2.1", &a6.sin6_addr);
    inet_pton(AF_INET, "192.0.2.1", &v4.sin_addr);
    metrics_http_addr((struct sockaddr *)&a6, &x);
    metrics_http_addr((struct sockaddr *)&v4, &y);
    assert_memory_equal(&x, &y, sizeof(x));
}

/* Past HTTP_CONN_MAX the oldest connection of the address that holds the
 * most goes: a newcomer from an address with few connections always stays,
 * and so do the few connections of a lone scraper. */
static void test_metrics_http_full(void **state)
{
    struct fixture *f = *state;
    unsigned scraper, newcomer, victim;
    char ip[32];

    scraper = arrive(f, "127.0.0.1", 0);
    /* HTTP_CONN_MAX - 1 from many addresses, 2 each, then the greediest. */
    for (unsigned i = 0; f->a.n < HTTP_CONN_MAX - 3; i++) {
        snprintf(ip, sizeof(ip), "127.0.1.%u", i / 2);
        arrive(f, ip, 0);
    }
    victim = arrive(f, "127.0.0.2", 0);
    arrive(f, "127.0.0.2", 0);
    arrive(f, "127.0.0.2", 0);
    assert_int_equal(f->a.n, HTTP_CONN_MAX);
    assert_int_equal(f->a.closed[METRICS_HTTP_CLOSE_FULL], 0);
    newcomer = arrive(f, "127.0.0.3", 0);
    assert_true(closed(f, victim));
    assert_false(closed(f, victim + 1));
    assert_false(closed(f, newcomer));
    assert_false(closed(f, scraper));
    assert_int_equal(f->a.n, HTTP_CONN_MAX);
    assert_int_equal(f->a.closed[METRICS_HTTP_CLOSE_FULL], 1);
    /* Ties: the address whose oldest came first gives way. */
    newcomer = arrive(f, "127.0.0.4", 0);
    assert_true(closed(f, 1));          /* the older of 127.0.1.0's two */
    assert_false(closed(f, 2));
    assert_false(closed(f, scraper));
    assert_false(closed(f, newcomer));
    /* A connection the account closed leaves it when libmicrohttpd frees it. */
    metrics_http_untrack(&f->a, &f->c[victim]);
    assert_int_equal(f->a.n, HTTP_CONN_MAX);
}

/* A connection whose request is in (a scrape being answered) goes after
 * every one of its kind still waiting for a request, though it is older. */
static void test_metrics_http_answers_stay(void **state)
{
    struct fixture *f = *state;
    unsigned scrape, slow;

    scrape = arrive(f, "127.0.0.1", 0);
    f->c[scrape].busy = true;
    slow = arrive(f, "127.0.0.1", 0);
    for (unsigned i = 1; i < HTTP_PER_ADDRESS; i++)
        arrive(f, "127.0.0.1", 0);
    assert_true(closed(f, slow));
    assert_false(closed(f, scrape));
    /* Past HTTP_CONN_MAX, among addresses that hold as many, too. */
    for (unsigned i = 0; f->a.n < HTTP_CONN_MAX; i++) {
        char ip[32];

        snprintf(ip, sizeof(ip), "127.0.2.%u", i / HTTP_PER_ADDRESS);
        slow = arrive(f, ip, 0);
    }
    arrive(f, "127.0.0.5", 0);
    assert_false(closed(f, scrape));
    assert_true(closed(f, scrape + 2));         /* 127.0.0.1's oldest still waiting */
    assert_false(closed(f, slow));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metrics_http_slow_requests_go, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_http_per_address, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_http_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_http_answers_stay, setup, teardown),
    };

    log_init(LOG_TARGET_STDERR, false);
    return cmocka_run_group_tests_name("metrics_http", tests, NULL, NULL);
}
