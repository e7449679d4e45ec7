/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/notify.c against the real libsystemd: a datagram
 * socket stands in for systemd's $NOTIFY_SOCKET, $WATCHDOG_USEC drives a real
 * libevent timer, and real listening sockets placed at fds 3 and 4 with
 * $LISTEN_FDS stand in for socket activation.  The module is linked from
 * libdivvyd.a, as divvyd links it.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include <event2/event.h>
#include <systemd/sd-daemon.h>

#include "daemon/log.h"
#include "daemon/addr.h"
#include "daemon/notify.h"

struct fixture {
    char dir[64];
    char notify_path[100];
    int notify_fd;
};

static int setup(void **state)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct fixture *f = calloc(1, sizeof(*f));

    if (!f)
        return -1;
    strcpy(f->dir, "/tmp/divvy-test-notify-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->notify_path, sizeof(f->notify_path), "%s/notify", f->dir);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->notify_path);
    f->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (f->notify_fd < 0 || bind(f->notify_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return -1;
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDNAMES");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    close(f->notify_fd);
    unlink(f->notify_path);
    rmdir(f->dir);
    free(f);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    return 0;
}

/* Next datagram within @timeout_ms into @buf (NUL-terminated); its length or -ETIMEDOUT. */
static ssize_t recv_msg(struct fixture *f, char *buf, size_t size, int timeout_ms)
{
    struct pollfd p = { .fd = f->notify_fd, .events = POLLIN };
    ssize_t n;

    if (poll(&p, 1, timeout_ms) <= 0)
        return -ETIMEDOUT;
    n = recv(f->notify_fd, buf, size - 1, 0);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return n;
}

static void test_notify_without_systemd_is_a_noop(void **state)
{
    struct notify_listener *l = (void *)1;
    struct notify_stored *st = (void *)1;
    struct notify_watchdog *wd = (void *)1;
    struct event_base *base = event_base_new();
    size_t n = 99, n_st = 99;
    char buf[64];

    (void)state;
    assert_non_null(base);
    notify_ready("%d rules", 3);
    notify_status("x");
    notify_stopping();
    notify_watchdog_ping();
    assert_int_equal(notify_watchdog_usec(), 0);
    assert_int_equal(notify_watchdog_new(base, NULL, NULL, &wd), 0);
    assert_null(wd);
    assert_int_equal(notify_fdstore(0, "fast-table"), 0);
    assert_int_equal(notify_listen_fds(&l, &n, &st, &n_st), 0);
    assert_null(l);
    assert_int_equal(n, 0);
    assert_null(st);
    assert_int_equal(n_st, 0);
    assert_int_equal(recv_msg(*state, buf, sizeof(buf), 50), -ETIMEDOUT);
    notify_watchdog_free(NULL);
    notify_listeners_free(NULL, 0);
    notify_stored_free(NULL, 0);
    event_base_free(base);
}

static void test_notify_ready_status_stopping(void **state)
{
    struct fixture *f = *state;
    char buf[1024];

    setenv("NOTIFY_SOCKET", f->notify_path, 1);
    notify_ready("%d rules (generation %d)", 12, 3);
    assert_true(recv_msg(f, buf, sizeof(buf), 2000) > 0);
    assert_string_equal(buf, "READY=1\nSTATUS=12 rules (generation 3)");
    /* A status is one line: a newline would start a new assignment. */
    notify_status("two\nlines");
    assert_true(recv_msg(f, buf, sizeof(buf), 2000) > 0);
    assert_string_equal(buf, "STATUS=two lines");
    notify_stopping();
    assert_true(recv_msg(f, buf, sizeof(buf), 2000) > 0);
    assert_string_equal(buf, "STOPPING=1\nSTATUS=stopping");
}

static int count_pings(struct fixture *f, int quiet_ms)
{
    char buf[256];
    int n = 0;

    while (recv_msg(f, buf, sizeof(buf), quiet_ms) > 0) {
        assert_string_equal(buf, "WATCHDOG=1");
        n++;
    }
    return n;
}

static void run_loop_ms(struct event_base *base, int ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
}

static void test_notify_watchdog_pings_at_half_interval(void **state)
{
    struct fixture *f = *state;
    struct event_base *base = event_base_new();
    struct notify_watchdog *wd = NULL;
    char pid[32];
    int n;

    assert_non_null(base);
    setenv("NOTIFY_SOCKET", f->notify_path, 1);
    setenv("WATCHDOG_USEC", "100000", 1);
    assert_int_equal(notify_watchdog_usec(), 100000);
    /* Another process's watchdog is not ours. */
    snprintf(pid, sizeof(pid), "%d", (int)getpid() + 1);
    setenv("WATCHDOG_PID", pid, 1);
    assert_int_equal(notify_watchdog_usec(), 0);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    setenv("WATCHDOG_PID", pid, 1);
    assert_int_equal(notify_watchdog_usec(), 100000);

    assert_int_equal(notify_watchdog_new(base, NULL, NULL, &wd), 0);
    assert_non_null(wd);
    run_loop_ms(base, 330);
    /* One at start, then one per 50 ms: about 7; a slow machine may lose some. */
    n = count_pings(f, 20);
    assert_true(n >= 3);
    assert_true(n <= 9);
    notify_watchdog_free(wd);
    unsetenv("WATCHDOG_PID");
    event_base_free(base);
}

static bool never_alive(void *userdata)
{
    int *asked = userdata;

    (*asked)++;
    return false;
}

static void test_notify_watchdog_withholds_when_not_alive(void **state)
{
    struct fixture *f = *state;
    struct event_base *base = event_base_new();
    struct notify_watchdog *wd = NULL;
    int asked = 0;

    assert_non_null(base);
    setenv("NOTIFY_SOCKET", f->notify_path, 1);
    setenv("WATCHDOG_USEC", "100000", 1);
    assert_int_equal(notify_watchdog_new(base, never_alive, &asked, &wd), 0);
    run_loop_ms(base, 230);
    /* Only the ping at start: systemd restarts a daemon whose workers hang. */
    assert_int_equal(count_pings(f, 20), 1);
    assert_true(asked >= 2);
    notify_watchdog_free(wd);
    event_base_free(base);
}

/* Moves @fd to exactly @target (which @fd may already be). */
static void place_fd(int fd, int target)
{
    int high;

    if (fd == target)
        return;
    high = fcntl(fd, F_DUPFD, 100);
    assert_true(high >= 100);
    close(fd);
    assert_int_equal(dup2(high, target), target);
    close(high);
}

/* Puts a listening Unix socket at fd 3 and a TCP one at fd 4, as systemd would. */
static void fake_activation(struct fixture *f, char *path, size_t path_size, int *ret_port)
{
    struct sockaddr_un su = { .sun_family = AF_UNIX };
    struct sockaddr_in si = { .sin_family = AF_INET };
    socklen_t sl = sizeof(si);
    char pid[32];
    int u, t;

    snprintf(path, path_size, "%s/divvy.sock", f->dir);
    snprintf(su.sun_path, sizeof(su.sun_path), "%s", path);
    si.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    u = socket(AF_UNIX, SOCK_STREAM, 0);
    t = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(u >= 0 && t >= 0);
    assert_int_equal(bind(u, (struct sockaddr *)&su, sizeof(su)), 0);
    assert_int_equal(listen(u, 8), 0);
    assert_int_equal(bind(t, (struct sockaddr *)&si, sizeof(si)), 0);
    assert_int_equal(listen(t, 8), 0);
    assert_int_equal(getsockname(t, (struct sockaddr *)&si, &sl), 0);
    *ret_port = ntohs(si.sin_port);
    place_fd(u, SD_LISTEN_FDS_START);
    place_fd(t, SD_LISTEN_FDS_START + 1);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    setenv("LISTEN_PID", pid, 1);
    setenv("LISTEN_FDS", "2", 1);
    setenv("LISTEN_FDNAMES", "divvy:tcp", 1);
}

static void test_notify_socket_activation(void **state)
{
    struct fixture *f = *state;
    struct notify_listener *l = NULL;
    struct notify_stored *st = (void *)1;
    char path[100], want[300];
    size_t n = 0, n_st = 99;
    int port, flags, fd;

    fake_activation(f, path, sizeof(path), &port);
    assert_int_equal(notify_listen_fds(&l, &n, &st, &n_st), 0);
    assert_int_equal(n, 2);
    assert_null(st);
    assert_int_equal(n_st, 0);
    assert_null(getenv("LISTEN_FDS"));
    assert_null(getenv("LISTEN_PID"));

    assert_true(l[0].is_unix);
    assert_int_equal(l[0].fd, SD_LISTEN_FDS_START);
    assert_string_equal(l[0].name, "divvy");
    snprintf(want, sizeof(want), "unix:%s", path);
    assert_string_equal(l[0].address, want);
    assert_false(l[1].is_unix);
    assert_string_equal(l[1].name, "tcp");
    snprintf(want, sizeof(want), "tcp:127.0.0.1:%d", port);
    assert_string_equal(l[1].address, want);
    for (size_t i = 0; i < n; i++) {
        flags = fcntl(l[i].fd, F_GETFL);
        assert_true(flags >= 0 && (flags & O_NONBLOCK));
        assert_true(fcntl(l[i].fd, F_GETFD) & FD_CLOEXEC);
    }

    /* srv asks which configured addresses systemd already passed. */
    assert_int_equal(notify_listeners_find(l, n, want), 1);
    snprintf(want, sizeof(want), "tcp:localhost:%d", port);
    assert_int_equal(notify_listeners_find(l, n, want), 1);
    snprintf(want, sizeof(want), "tcp:127.0.0.1:%d", port == 65535 ? 1 : port + 1);
    assert_int_equal(notify_listeners_find(l, n, want), -1);
    snprintf(want, sizeof(want), "unix:%s", path);
    assert_int_equal(notify_listeners_find(l, n, want), 0);
    assert_int_equal(notify_listeners_find(l, n, "unix:/elsewhere.sock"), -1);
    assert_int_equal(notify_listeners_find(l, n, "bogus"), -1);

    /* Adopting fd 3: the array frees only what nobody took. */
    fd = l[0].fd;
    l[0].fd = -1;
    assert_int_equal(notify_listeners_find(l, n, want), -1);
    notify_listeners_free(l, n);
    assert_true(fcntl(fd, F_GETFD) >= 0);
    assert_int_equal(fcntl(SD_LISTEN_FDS_START + 1, F_GETFD), -1);
    close(fd);
    unlink(path);
}

static void test_notify_socket_activation_rejects_datagrams(void **state)
{
    struct notify_listener *l = NULL;
    struct notify_stored *st = NULL;
    char pid[32];
    size_t n = 0, n_st = 0;
    int u;

    (void)state;
    u = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(u >= 0);
    place_fd(u, SD_LISTEN_FDS_START);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    setenv("LISTEN_PID", pid, 1);
    setenv("LISTEN_FDS", "1", 1);
    assert_int_equal(notify_listen_fds(&l, &n, &st, &n_st), -EINVAL);
    assert_null(l);
    assert_null(st);
    assert_int_equal(fcntl(SD_LISTEN_FDS_START, F_GETFD), -1);

    /* Named as a stored fd would be, a socket is still not one. */
    u = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(u >= 0);
    place_fd(u, SD_LISTEN_FDS_START);
    setenv("LISTEN_PID", pid, 1);
    setenv("LISTEN_FDS", "1", 1);
    setenv("LISTEN_FDNAMES", "fast-table", 1);
    assert_int_equal(notify_listen_fds(&l, &n, &st, &n_st), -EINVAL);
    assert_int_equal(fcntl(SD_LISTEN_FDS_START, F_GETFD), -1);
}

/* A memfd holding @text, as a stored state fd would be. */
static int make_memfd(const char *text)
{
    int fd = memfd_create("divvy-test", MFD_CLOEXEC);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    return fd;
}

static void assert_memfd_holds(int fd, const char *text)
{
    char buf[64] = "";

    assert_int_equal(pread(fd, buf, sizeof(buf) - 1, 0), (ssize_t)strlen(text));
    assert_string_equal(buf, text);
}

/* Next datagram into @buf, and the one fd it carried into *ret_fd (-1: none). */
static ssize_t recv_msg_fd(struct fixture *f, char *buf, size_t size, int *ret_fd)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * 4)];
    } c;
    struct iovec iov = { .iov_base = buf, .iov_len = size - 1 };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &c,
                        .msg_controllen = sizeof(c) };
    struct pollfd p = { .fd = f->notify_fd, .events = POLLIN };
    ssize_t n;

    *ret_fd = -1;
    if (poll(&p, 1, 2000) <= 0)
        return -ETIMEDOUT;
    n = recvmsg(f->notify_fd, &m, MSG_CMSG_CLOEXEC);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
            assert_int_equal(h->cmsg_len, CMSG_LEN(sizeof(int)));
            memcpy(ret_fd, CMSG_DATA(h), sizeof(int));
        }
    return n;
}

static void test_notify_fdstore_sends_fd_and_name(void **state)
{
    struct fixture *f = *state;
    char buf[512], longname[300];
    int fd = make_memfd("generation 7"), got;

    setenv("NOTIFY_SOCKET", f->notify_path, 1);
    assert_int_equal(notify_fdstore(fd, "fast-table"), 0);
    /* The older fd of that name goes first, so a restart gets exactly one back. */
    assert_true(recv_msg_fd(f, buf, sizeof(buf), &got) > 0);
    assert_string_equal(buf, "FDSTOREREMOVE=1\nFDNAME=fast-table");
    assert_int_equal(got, -1);
    assert_true(recv_msg_fd(f, buf, sizeof(buf), &got) > 0);
    assert_string_equal(buf, "FDSTORE=1\nFDNAME=fast-table");
    assert_true(got >= 0);
    assert_true(got != fd);
    /* The very same file: what the daemon wrote, systemd holds. */
    assert_memfd_holds(got, "generation 7");
    assert_int_equal(pwrite(fd, "G", 1, 0), 1);
    assert_memfd_holds(got, "Generation 7");
    close(got);
    /* Still ours. */
    assert_true(fcntl(fd, F_GETFD) >= 0);

    /* Names systemd would refuse, or that would inject another assignment. */
    assert_int_equal(notify_fdstore(fd, ""), -EINVAL);
    assert_int_equal(notify_fdstore(fd, "a:b"), -EINVAL);
    assert_int_equal(notify_fdstore(fd, "a\nREADY=1"), -EINVAL);
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(notify_fdstore(fd, longname), -EINVAL);
    assert_int_equal(notify_fdstore(-1, "fast-table"), -EINVAL);
    assert_int_equal(recv_msg(f, buf, sizeof(buf), 50), -ETIMEDOUT);

    /* A service manager that is gone: the error, not silence. */
    close(f->notify_fd);
    unlink(f->notify_path);
    f->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(notify_fdstore(fd, "fast-table") < 0);
    close(fd);
}

/* Puts @fds[0..n) at 3.. with $LISTEN_FDNAMES @names (NULL: unset). */
static void fake_passed(int *fds, int n, const char *names)
{
    char pid[32], count[16];

    /* Out of the way first: a target may be another one's current number. */
    for (int i = 0; i < n; i++) {
        int high = fcntl(fds[i], F_DUPFD, 100 + i);

        assert_true(high >= 100);
        close(fds[i]);
        fds[i] = high;
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(dup2(fds[i], SD_LISTEN_FDS_START + i), SD_LISTEN_FDS_START + i);
        close(fds[i]);
    }
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    snprintf(count, sizeof(count), "%d", n);
    setenv("LISTEN_PID", pid, 1);
    setenv("LISTEN_FDS", count, 1);
    if (names)
        setenv("LISTEN_FDNAMES", names, 1);
    else
        unsetenv("LISTEN_FDNAMES");
}

static int listening_unix(struct fixture *f, char *path, size_t size)
{
    struct sockaddr_un su = { .sun_family = AF_UNIX };
    int u = socket(AF_UNIX, SOCK_STREAM, 0);

    snprintf(path, size, "%s/divvy.sock", f->dir);
    snprintf(su.sun_path, sizeof(su.sun_path), "%s", path);
    assert_true(u >= 0);
    assert_int_equal(bind(u, (struct sockaddr *)&su, sizeof(su)), 0);
    assert_int_equal(listen(u, 8), 0);
    return u;
}

static void test_notify_stored_fds_passed_back_by_name(void **state)
{
    struct fixture *f = *state;
    struct notify_listener *l = NULL;
    struct notify_stored *st = NULL;
    char path[100];
    size_t n = 0, n_st = 0;
    int fds[3], fd;

    fds[0] = make_memfd("table");
    fds[1] = listening_unix(f, path, sizeof(path));
    fds[2] = make_memfd("rules");
    /* systemd passes the socket unit's fds, then the store's, each with its name. */
    fake_passed(fds, 3, "fast-table:divvy:rules-state");
    assert_int_equal(notify_listen_fds(&l, &n, &st, &n_st), 0);
    assert_null(getenv("LISTEN_FDS"));
    assert_null(getenv("LISTEN_FDNAMES"));
    assert_int_equal(n, 1);
    assert_int_equal(l[0].fd, SD_LISTEN_FDS_START + 1);
    assert_string_equal(l[0].name, "divvy");
    assert_int_equal(n_st, 2);
    assert_int_equal(st[0].fd, SD_LISTEN_FDS_START);
    assert_string_equal(st[0].name, "fast-table");
    assert_int_equal(st[1].fd, SD_LISTEN_FDS_START + 2);
    assert_string_equal(st[1].name, "rules-state");
    assert_true(fcntl(st[0].fd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(notify_stored_find(st, n_st, "rules-state"), 1);
    assert_int_equal(notify_stored_find(st, n_st, "divvy"), -1);
    assert_int_equal(notify_stored_find(st, n_st, "nothing"), -1);
    assert_int_equal(notify_stored_find(NULL, 0, "fast-table"), -1);

    /* The daemon adopts the one it knows; the rest is closed with the array. */
    fd = st[notify_stored_find(st, n_st, "fast-table")].fd;
    st[0].fd = -1;
    assert_int_equal(notify_stored_find(st, n_st, "fast-table"), -1);
    notify_stored_free(st, n_st);
    notify_listeners_free(l, n);
    assert_memfd_holds(fd, "table");
    assert_int_equal(fcntl(SD_LISTEN_FDS_START + 1, F_GETFD), -1);
    assert_int_equal(fcntl(SD_LISTEN_FDS_START + 2, F_GETFD), -1);
    close(fd);
    unlink(path);

    /* Only stored fds (the socket unit passes none, e.g. no divvyd.socket). */
    fds[0] = make_memfd("table");
    fake_passed(fds, 1, "fast-table");
    assert_int_equal(notify_listen_fds(&l, &n, &st, &n_st), 0);
    assert_null(l);
    assert_int_equal(n, 0);
    assert_int_equal(n_st, 1);
    assert_string_equal(st[0].name, "fast-table");
    notify_stored_free(st, n_st);
    assert_int_equal(fcntl(SD_LISTEN_FDS_START, F_GETFD), -1);
}

/* Each @names for one memfd at fd 3 is refused, and the fd closed. */
static void assert_memfd_refused(const char *names)
{
    struct notify_listener *l = NULL;
    struct notify_stored *st = NULL;
    size_t n = 0, n_st = 0;
    int fd = make_memfd("x");

    fake_passed(&fd, 1, names);
    assert_int_equal(notify_listen_fds(&l, &n, &st, &n_st), -EINVAL);
    assert_null(l);
    assert_null(st);
    assert_int_equal(fcntl(SD_LISTEN_FDS_START, F_GETFD), -1);
}

static void test_notify_nameless_non_socket_rejected(void **state)
{
    struct fixture *f = *state;
    struct notify_listener *l = NULL;
    struct notify_stored *st = NULL;
    char path[100];
    size_t n = 0, n_st = 0;
    int fds[2];

    assert_memfd_refused(NULL);                 /* no $LISTEN_FDNAMES: "unknown" */
    assert_memfd_refused("stored");             /* FDSTORE=1 without FDNAME= */
    assert_memfd_refused("divvyd.socket");      /* a socket unit's default name */

    /* A FIFO of the socket unit, named like the socket beside it. */
    fds[0] = listening_unix(f, path, sizeof(path));
    fds[1] = make_memfd("x");
    fake_passed(fds, 2, "divvy:divvy");
    assert_int_equal(notify_listen_fds(&l, &n, &st, &n_st), -EINVAL);
    assert_null(l);
    assert_null(st);
    assert_int_equal(fcntl(SD_LISTEN_FDS_START, F_GETFD), -1);
    assert_int_equal(fcntl(SD_LISTEN_FDS_START + 1, F_GETFD), -1);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_notify_without_systemd_is_a_noop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_notify_ready_status_stopping, setup, teardown),
        cmocka_unit_test_setup_teardown(test_notify_watchdog_pings_at_half_interval, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_notify_watchdog_withholds_when_not_alive, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_notify_socket_activation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_notify_socket_activation_rejects_datagrams, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_notify_fdstore_sends_fd_and_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_notify_stored_fds_passed_back_by_name, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_notify_nameless_non_socket_rejected, setup,
                                        teardown),
    };

    log_init(LOG_TARGET_STDERR, false);
    return cmocka_run_group_tests_name("notify", tests, NULL, NULL);
}
