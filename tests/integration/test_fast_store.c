/* SPDX-License-Identifier: MIT */
/*
 * The fast-path table kept across a crash by systemd's file descriptor store
 * (DESIGN section 4, docs/operations.md "What survives which event"), with
 * the test playing the service manager's part: a datagram socket as
 * $NOTIFY_SOCKET receives divvyd's FDSTORE=1 / FDNAME=fast-table message
 * and its memfd; after a SIGKILL the next divvyd gets that memfd back as fd
 * 3 with $LISTEN_FDS=1, $LISTEN_FDNAMES=fast-table and $LISTEN_PID set in
 * the child, as systemd passes stored fds.  With snapshots off
 * (table.snapshot_interval_ms = 0), every count the fast path made, in
 * divvyd and in a libdivvy client, must come back exactly, and the log must
 * say the table was taken back; the same crash without the stored fd starts
 * afresh, which shows the counts came from the store.  Each divvyd started
 * here is stopped by PID, also on failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "divvy.h"
#include "harness.h"

#define LIMIT   1000

static const char store_conf[] =
    "table = { fast_slots = 4096; snapshot_interval_ms = 0; };\n"
    "rules = (\n"
    "    { match = { path = \"/f\"; }; label = \"f\"; credit_limit = 1000; actor = \"user\";\n"
    "      reset_seconds = 3600; fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static struct {
    char dir[64];
    char conf[128], state[128], sock[128], notify[128], log[128];
    pid_t pid;
    int nfd;                    /* our $NOTIFY_SOCKET */
    int stored;                 /* the memfd divvyd put in the "store", or -1 */
} st;

static int store_setup(void **state)
{
    memset(&st, 0, sizeof(st));
    st.nfd = st.stored = -1;
    return harness_setup(state);
}

static void stop_divvyd(int sig)
{
    int status;

    if (st.pid <= 0)
        return;
    kill(st.pid, sig);
    for (int i = 0; i < 1000 && waitpid(st.pid, &status, WNOHANG) == 0; i++)
        harness_pause_ms(10);
    if (waitpid(st.pid, &status, WNOHANG) == 0) {
        kill(st.pid, SIGKILL);
        waitpid(st.pid, &status, 0);
    }
    st.pid = 0;
}

static int store_teardown(void **state)
{
    char cmd[128];

    stop_divvyd(SIGKILL);
    if (st.nfd >= 0)
        close(st.nfd);
    if (st.stored >= 0)
        close(st.stored);
    if (st.dir[0]) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", st.dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", st.dir);
    }
    return harness_teardown(state);
}

/* Starts divvyd; @stored >= 0 is passed as systemd passes a stored fd. */
static void start_divvyd(int stored)
{
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        char pidbuf[16];
        int log = open(st.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

        if (log < 0 || dup2(log, 2) < 0)
            _exit(120);
        setenv("NOTIFY_SOCKET", st.notify, 1);
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_PID");
        unsetenv("LISTEN_FDNAMES");
        if (stored >= 0) {
            if (dup2(stored, 3) < 0)
                _exit(121);
            snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
            setenv("LISTEN_FDS", "1", 1);
            setenv("LISTEN_PID", pidbuf, 1);
            setenv("LISTEN_FDNAMES", "fast-table", 1);
        }
        execl(harness_divvyd(), "divvyd", "-c", st.conf, "-s", st.state, "-l", st.sock,
              "-w", "1", (char *)NULL);
        _exit(127);
    }
    st.pid = pid;
}

/* Reads notify messages until READY=1, keeping the fd of an FDSTORE=1 with
 * FDNAME=fast-table (the last one wins, as in systemd's store). */
static void wait_ready(void)
{
    uint64_t deadline = harness_now_ms() + 20000;

    for (;;) {
        char buf[4096];
        union {
            char b[CMSG_SPACE(4 * sizeof(int))];
            struct cmsghdr align;
        } u;
        struct iovec iov = { buf, sizeof(buf) - 1 };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
                              .msg_controllen = sizeof(u.b) };
        struct pollfd pfd = { .fd = st.nfd, .events = POLLIN };
        int fds[4], n_fds = 0;
        ssize_t n;

        if (harness_now_ms() > deadline)
            fail_msg("divvyd sent no READY=1 within 20 s");
        if (poll(&pfd, 1, 100) != 1)
            continue;
        n = recvmsg(st.nfd, &msg, MSG_CMSG_CLOEXEC);
        assert_true(n >= 0);
        buf[n] = '\0';
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
                for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int) && n_fds < 4;
                     i++)
                    memcpy(&fds[n_fds++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
        if (strstr(buf, "FDSTORE=1") && strstr(buf, "FDNAME=fast-table") && n_fds == 1) {
            if (st.stored >= 0)
                close(st.stored);
            st.stored = fds[0];
            n_fds = 0;
        }
        for (int i = 0; i < n_fds; i++)
            close(fds[i]);
        if (strstr(buf, "READY=1"))
            return;
    }
}

static long long peek_credit(void)
{
    struct harness_conn *c;
    char reply[HARNESS_LINE], rule[64];
    bool allowed;
    long long credit, secs;

    CHECK(harness_connect_unix(st.sock + 5, &c));
    CHECK(harness_cmd(c, "PEEK path=/f user=u", reply, sizeof(reply)));
    harness_close(c);
    if (harness_parse_ok_rule(reply, &allowed, &credit, &secs, rule, sizeof(rule)) < 0)
        fail_msg("PEEK: %s", reply);
    return credit;
}

static int log_count(const char *needle)
{
    char buf[65536];
    int fd = open(st.log, O_RDONLY | O_CLOEXEC), n = 0;
    ssize_t len;

    assert_true(fd >= 0);
    len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    assert_true(len >= 0);
    buf[len] = '\0';
    for (char *p = strstr(buf, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_fast_store_crash_keeps_counts(void **state)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/f" }, { "user", "u" } };
    struct divvy *h = NULL;
    int fd;

    (void)state;
    snprintf(st.dir, sizeof(st.dir), "/tmp/divvy-store.XXXXXX");
    assert_non_null(mkdtemp(st.dir));
    snprintf(st.conf, sizeof(st.conf), "%s/divvy.conf", st.dir);
    snprintf(st.state, sizeof(st.state), "%s/state", st.dir);
    snprintf(st.sock, sizeof(st.sock), "unix:%s/d.sock", st.dir);
    snprintf(st.notify, sizeof(st.notify), "%s/notify.sock", st.dir);
    snprintf(st.log, sizeof(st.log), "%s/divvyd.log", st.dir);
    fd = open(st.conf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, store_conf, sizeof(store_conf) - 1),
                     (ssize_t)sizeof(store_conf) - 1);
    close(fd);
    st.nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(st.nfd >= 0);
    assert_true(strlen(st.notify) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, st.notify, strlen(st.notify) + 1);
    assert_int_equal(bind(st.nfd, (struct sockaddr *)&sa, sizeof(sa)), 0);

    /* First run: the table goes to the "store"; counts in divvyd and in-process. */
    start_divvyd(-1);
    wait_ready();
    assert_true(st.stored >= 0);
    assert_int_equal(log_count("fast-path table created"), 1);
    assert_int_equal(setenv("DIVVY_ADDRESS", st.sock, 1), 0);
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    harness_wait_fast(h, kv, 2);
    for (int i = 0; i < 30; i++) {
        CHECK(divvy_hit(h, kv, 2, &res));
        assert_int_equal(res.fast_path, 1);
    }
    divvy_close(h);
    assert_int_equal(peek_credit(), LIMIT - 30);

    /* A crash: the next divvyd takes the stored memfd back, every count in it. */
    stop_divvyd(SIGKILL);
    start_divvyd(st.stored);
    wait_ready();
    assert_int_equal(log_count("fast-path table taken back from the service manager's fd "
                               "store, counts kept"), 1);
    assert_int_equal(peek_credit(), LIMIT - 30);
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    CHECK(divvy_hit(h, kv, 2, &res));
    assert_int_equal(res.credit, LIMIT - 31);
    divvy_close(h);

    /* The same crash without the store (and no snapshot): afresh. */
    stop_divvyd(SIGKILL);
    start_divvyd(-1);
    wait_ready();
    assert_int_equal(log_count("fast-path table created, counts start afresh"), 2);
    assert_int_equal(peek_credit(), LIMIT);
    stop_divvyd(SIGTERM);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fast_store_crash_keeps_counts, store_setup,
                                        store_teardown),
    };

    return cmocka_run_group_tests_name("fast_store", tests, NULL, NULL);
}
