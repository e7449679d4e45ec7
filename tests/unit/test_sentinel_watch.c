/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/sentinel_watch.c against a fake sentinel (a
 * loopback socket this test answers by hand): the watch subscribes to
 * +switch-master, the promotion's two channels and the abort's; messages
 * for another master or malformed ones are ignored; a promotion is
 * reported and fences the old master (sentinel_watch_redirect() sends a
 * connect to the replica instead), an abort for that master lifts the
 * fence without a report, and +switch-master is reported and fences the
 * old master too.  The module is daemon code: this binary links it from
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
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include <event2/event.h>

#include "clock.h"
#include "daemon/sentinel.h"

struct heard {
    int calls;
    struct sentinel_news last;
};

static void on_news(void *arg, const struct sentinel_news *n)
{
    struct heard *h = arg;

    h->calls++;
    h->last = *n;
}

/* Runs @base until @h has @calls reports, or @ms pass. */
static void run_until(struct event_base *base, struct heard *h, int calls, unsigned ms)
{
    uint64_t t0 = clock_now_ms();

    while (h->calls < calls && clock_now_ms() - t0 < ms)
        event_base_loop(base, EVLOOP_NONBLOCK);
}

/* Sends a pubsub message on @chan carrying @payload to the watch. */
static void publish(int fd, const char *chan, const char *payload)
{
    char buf[512];
    int n = snprintf(buf, sizeof(buf), "*3\r\n$7\r\nmessage\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n",
                     strlen(chan), chan, strlen(payload), payload);

    assert_int_equal(write(fd, buf, (size_t)n), n);
}

/* The address a connect would go to when the sentinels answer 127.0.0.1:@port. */
static unsigned redirected(struct sentinel_watch *w, unsigned port)
{
    const char *host = "127.0.0.1";

    if (!sentinel_watch_redirect(w, &host, &port))
        return 0;
    assert_string_equal(host, "127.0.0.1");
    return port;
}

static void test_sentinel_watch_news(void **state)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t sl = sizeof(sa);
    char addr[32], buf[1024];
    const char *addrs[1] = { addr };
    struct sentinel_opts so = { .addrs = addrs, .n_addrs = 1, .master_name = "mymaster",
                                .timeout_ms = 2000 };
    struct event_base *base = event_base_new();
    struct sentinel *sn = NULL;
    struct sentinel_watch *w = NULL;
    struct heard h = { 0 };
    struct pollfd p;
    size_t got = 0;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), fd;
    static const char *const chans[4] = {
        "+switch-master", "+failover-state-send-slaveof-noone", "+promoted-slave",
        "-failover-abort-slave-timeout",
    };

    (void)state;
    assert_non_null(base);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    assert_int_equal(listen(lfd, 4), 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sa.sin_port));
    assert_int_equal(sentinel_new(&so, &sn), 0);
    assert_int_equal(sentinel_watch_new(sn, base, on_news, &h, &w), 0);
    assert_int_equal(redirected(w, 6379), 0);
    sentinel_watch_start(w);

    /* The SUBSCRIBE arrives with every channel; each is confirmed. */
    fd = accept(lfd, NULL, NULL);
    assert_true(fd >= 0);
    p = (struct pollfd){ .fd = fd, .events = POLLIN };
    while (!strstr(buf, "-failover-abort-slave-timeout") && got < sizeof(buf) - 1) {
        ssize_t n;

        event_base_loop(base, EVLOOP_NONBLOCK);
        if (poll(&p, 1, 10) <= 0)
            continue;
        n = read(fd, buf + got, sizeof(buf) - 1 - got);
        assert_true(n > 0);
        got += (size_t)n;
        buf[got] = '\0';
    }
    for (int i = 0; i < 4; i++) {
        char conf[128];
        int n;

        assert_non_null(strstr(buf, chans[i]));
        n = snprintf(conf, sizeof(conf), "*3\r\n$9\r\nsubscribe\r\n$%zu\r\n%s\r\n:%d\r\n",
                     strlen(chans[i]), chans[i], i + 1);
        assert_int_equal(write(fd, conf, (size_t)n), n);
    }

    /* Another master's, and malformed ones: nothing. */
    publish(fd, chans[1], "slave 127.0.0.1:6380 127.0.0.1 6380 @ other 127.0.0.1 6379");
    publish(fd, chans[1], "slave 127.0.0.1:6380 127.0.0.1 6380 mymaster 127.0.0.1 6379");
    publish(fd, chans[0], "mymaster 127.0.0.1 6379 127.0.0.1");
    publish(fd, chans[2], "slave 127.0.0.1:0 127.0.0.1 0 @ mymaster 127.0.0.1 6379");
    run_until(base, &h, 1, 300);
    assert_int_equal(h.calls, 0);
    assert_int_equal(redirected(w, 6379), 0);

    /* The promotion: reported, and the old master is fenced. */
    publish(fd, chans[1], "slave 127.0.0.1:6380 127.0.0.1 6380 @ mymaster 127.0.0.1 6379");
    run_until(base, &h, 1, 2000);
    assert_int_equal(h.calls, 1);
    assert_int_equal(h.last.kind, SENTINEL_NEWS_PROMOTING);
    assert_string_equal(h.last.host, "127.0.0.1");
    assert_int_equal(h.last.port, 6380);
    assert_string_equal(h.last.old_host, "127.0.0.1");
    assert_int_equal(h.last.old_port, 6379);
    assert_int_equal(redirected(w, 6379), 6380);
    assert_int_equal(redirected(w, 6381), 0);

    /* An abort for another master changes nothing; for this one it lifts
     * the fence, and is no report. */
    publish(fd, chans[3], "master other 127.0.0.1 6379");
    publish(fd, chans[3], "master mymaster 127.0.0.1 6381");
    run_until(base, &h, 2, 300);
    assert_int_equal(redirected(w, 6379), 6380);
    publish(fd, chans[3], "master mymaster 127.0.0.1 6379");
    run_until(base, &h, 2, 300);
    assert_int_equal(h.calls, 1);
    assert_int_equal(redirected(w, 6379), 0);

    /* +promoted-slave, then +switch-master in one read: both reported, in order. */
    publish(fd, chans[2], "slave 127.0.0.1:6380 127.0.0.1 6380 @ mymaster 127.0.0.1 6379");
    publish(fd, chans[0], "mymaster 127.0.0.1 6379 127.0.0.1 6380");
    run_until(base, &h, 3, 2000);
    assert_int_equal(h.calls, 3);
    assert_int_equal(h.last.kind, SENTINEL_NEWS_SWITCH);
    assert_int_equal(h.last.port, 6380);
    assert_int_equal(h.last.old_port, 6379);
    /* A sentinel that has not heard yet may still name the old master. */
    assert_int_equal(redirected(w, 6379), 6380);
    assert_int_equal(redirected(w, 6380), 0);

    sentinel_watch_free(w);
    sentinel_free(sn);
    close(fd);
    close(lfd);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sentinel_watch_news),
    };

    return cmocka_run_group_tests_name("sentinel_watch", tests, NULL, NULL);
}
