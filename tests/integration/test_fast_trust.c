/* SPDX-License-Identifier: MIT */
/*
 * The fast path's trust model (issue 11 items 1, 4 and 5; DESIGN sections 4
 * and 5; docs/dev/shm.md "Memfds and seals").  The attacks run as the users
 * they name, in forked children that dropped root (setgroups/setgid/setuid
 * to throwaway numeric ids; the config's server.fast_group is the numeric
 * gid), with raw syscalls only:
 *   - a fast-group member who got both memfds with FAST cannot resize the
 *     table (ftruncate, fallocate past its end, a write past its end), add
 *     or remove a seal, or write the control page by any route (mmap
 *     PROT_WRITE, mprotect, pwrite, punching a hole, a /proc/self/fd reopen
 *     O_RDWR); divvyd keeps answering and other fast-path clients keep
 *     deciding exactly;
 *   - a peer outside the group, and any TCP peer, gets ERR forbidden and no
 *     descriptor;
 *   - (regression) the member can neither read nor write private.table, nor
 *     write rules.<generation>, nor create a file in the state directory,
 *     laid out as tmpfiles.d makes /run/divvy (2755, group divvy-fast).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "divvy.h"
#include "fast_fds.h"
#include "harness.h"

#define MEMBER_UID   64200
#define FAST_GID     64201          /* server.fast_group */
#define MEMBER_GID   64202          /* the member's primary group */
#define OTHER_UID    64203          /* in no group of divvy's */

static const char trust_conf[] =
    "server = { socket_mode = \"0666\"; fast_group = \"64201\"; };\n"
    "table = { fast_slots = 4096; };\n"
    "rules = (\n"
    "    { match = { path = \"/f\"; }; label = \"f\"; credit_limit = 1000000;\n"
    "      reset_seconds = 3600; fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static struct harness_daemon *start_trust(void)
{
    struct harness_opts o = { .config_name = "trust.conf", .config_text = trust_conf };
    struct harness_daemon *d = NULL;

    if (geteuid() != 0) {
        fprintf(stderr, "  SKIP: not root (the attacks run as other users)\n");
        skip();
    }
    CHECK(harness_start(&o, &d));
    /* The unprivileged children reach the socket and the state dir. */
    assert_int_equal(chmod(d->dir, 0755), 0);
    CHECK(harness_divvy_env(d));
    return d;
}

static int drop_to(uid_t uid, gid_t gid, const gid_t *groups, size_t n)
{
    if (setgroups(n, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
        return -errno;
    return getuid() == uid && geteuid() == uid ? 0 : -EPERM;
}

/* @what must fail with one of @e1/@e2 (0: any error). */
#define REFUSED(call, e1, e2, step)                                                       \
    do {                                                                                  \
        errno = 0;                                                                        \
        if ((call) == 0 || ((e1) && errno != (e1) && errno != (e2))) {                    \
            fprintf(stderr, "member: %s: %s (want a refusal)\n", #call,                   \
                    errno ? strerror(errno) : "succeeded");                               \
            return (step);                                                                \
        }                                                                                 \
    } while (0)

static int mmap_rw(int fd, size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

    if (p == MAP_FAILED)
        return -1;
    munmap(p, len);
    return 0;
}

static int mprotect_rw(int fd, size_t len)
{
    void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    int r;

    if (p == MAP_FAILED)
        return 0;               /* not even readable: a failure of the test, not a refusal */
    r = mprotect(p, len, PROT_READ | PROT_WRITE);
    munmap(p, len);
    return r;
}

static int pwrite1(int fd, off_t off)
{
    char b = 'x';

    return pwrite(fd, &b, 1, off) == 1 ? 0 : -1;
}

/* The member: every resize, reseal and write of the control page fails. */
static int member_child(void *arg)
{
    const struct harness_daemon *d = arg;
    const gid_t groups[] = { FAST_GID };
    struct fast_reply rep;
    struct stat st;
    uint64_t gen0, gen1;
    char proc[64];
    int tfd, cfd, rw, seals;
    const uint64_t *ctl;

    if (drop_to(MEMBER_UID, MEMBER_GID, groups, 1) < 0)
        return 100;
    if (fast_fds_ask(d->sock, "FAST\n", 5000, &rep) < 0 ||
        strncmp(rep.line, "OK fast ", 8) != 0 || rep.n_fds != 2) {
        fprintf(stderr, "member: FAST answered \"%s\" with %d fds\n", rep.line, rep.n_fds);
        return 1;
    }
    tfd = rep.fds[0];
    cfd = rep.fds[1];
    if (fstat(tfd, &st) < 0 || st.st_size != 20480 + 64 * 4096)
        return 2;
    ctl = mmap(NULL, 4096, PROT_READ, MAP_SHARED, cfd, 0);
    if (ctl == MAP_FAILED)
        return 3;
    gen0 = __atomic_load_n(&ctl[8], __ATOMIC_ACQUIRE);    /* generation, offset 64 */

    /* The table: never a size other than its own (no SIGBUS, no full /run). */
    REFUSED(ftruncate(tfd, 0), EPERM, EPERM, 10);
    REFUSED(ftruncate(tfd, 20480), EPERM, EPERM, 11);
    REFUSED(ftruncate(tfd, st.st_size + 4096), EPERM, EPERM, 12);
    REFUSED(fallocate(tfd, 0, st.st_size, 1 << 20), EPERM, EPERM, 13);
    REFUSED(pwrite1(tfd, st.st_size), EPERM, EFBIG, 14);
    REFUSED(fcntl(tfd, F_ADD_SEALS, F_SEAL_WRITE) < 0 ? -1 : 0, EPERM, EPERM, 15);
    seals = fcntl(tfd, F_GET_SEALS);
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) !=
                         (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) ||
        (seals & F_SEAL_WRITE))
        return 16;
    if (fstat(tfd, &st) < 0 || st.st_size != 20480 + 64 * 4096)
        return 17;
    /* Its slots are the member's to write: that is the trust the group carries. */
    if (mmap_rw(tfd, (size_t)st.st_size) < 0)
        return 18;

    /* The control page: no writable mapping, no write, by any fd. */
    REFUSED(mmap_rw(cfd, 4096), EPERM, EACCES, 20);
    REFUSED(mprotect_rw(cfd, 4096), EACCES, EPERM, 21);
    REFUSED(pwrite1(cfd, 64), EPERM, EBADF, 22);
    REFUSED(ftruncate(cfd, 0), EPERM, EINVAL, 23);
    REFUSED(fallocate(cfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), EPERM, EBADF,
            24);
    REFUSED(fcntl(cfd, F_ADD_SEALS, F_SEAL_WRITE) < 0 ? -1 : 0, EPERM, EPERM, 25);
    /* A memfd is mode 0777: the reopen itself may succeed; the seal is what refuses. */
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", cfd);
    rw = open(proc, O_RDWR | O_CLOEXEC);
    fprintf(stderr, "  member: reopening the control page O_RDWR %s\n",
            rw >= 0 ? "succeeds (the seal refuses every write through it)"
                    : "is refused");
    if (rw >= 0) {
        REFUSED(pwrite1(rw, 64), EPERM, EPERM, 26);
        REFUSED(mmap_rw(rw, 4096), EPERM, EPERM, 27);
        REFUSED(ftruncate(rw, 0), EPERM, EPERM, 28);
        close(rw);
    }
    gen1 = __atomic_load_n(&ctl[8], __ATOMIC_ACQUIRE);
    if (gen1 != gen0 || gen0 == 0)
        return 29;

    /* Regression: the state directory as tmpfiles.d makes it. */
    {
        char path[HARNESS_PATH + 64];
        int fd;

        snprintf(path, sizeof(path), "%s/private.table", d->state);
        REFUSED(open(path, O_RDONLY | O_CLOEXEC) >= 0 ? 0 : -1, EACCES, EACCES, 30);
        REFUSED(open(path, O_RDWR | O_CLOEXEC) >= 0 ? 0 : -1, EACCES, EACCES, 31);
        snprintf(path, sizeof(path), "%s/rules.%llu", d->state, (unsigned long long)gen0);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return 32;              /* the member reads the rules: the fast path needs them */
        close(fd);
        REFUSED(open(path, O_WRONLY | O_CLOEXEC) >= 0 ? 0 : -1, EACCES, EACCES, 33);
        snprintf(path, sizeof(path), "%s/fast.table", d->state);
        REFUSED(open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666) >= 0 ? 0 : -1, EACCES, EACCES,
                34);
        snprintf(path, sizeof(path), "%s/fast.snapshot", d->state);
        REFUSED(open(path, O_RDONLY | O_CLOEXEC) >= 0 ? 0 : -1, EACCES, ENOENT, 35);
    }
    /* libdivvy as this member: the fast path works. */
    {
        struct divvy_result res = { .size = sizeof(res) };
        struct divvy *h = NULL;

        if (divvy_open(NULL, DIVVY_FAST_ONLY, &h) < 0 ||
            divvy_hit(h, (struct divvy_kv[]){ { "path", "/f" } }, 1, &res) < 0 ||
            !res.fast_path || !res.allowed)
            return 40;
        divvy_close(h);
    }
    return 0;
}

/* A peer outside the group: ERR forbidden, and no descriptor at all. */
static int other_child(void *arg)
{
    const struct harness_daemon *d = arg;
    struct fast_reply rep;
    struct divvy *h = NULL;

    if (drop_to(OTHER_UID, OTHER_UID, NULL, 0) < 0)
        return 100;
    if (fast_fds_ask(d->sock, "FAST\n", 5000, &rep) < 0)
        return 1;
    if (strncmp(rep.line, "ERR forbidden", 13) != 0 || rep.n_fds != 0 || rep.ctrunc) {
        fprintf(stderr, "non-member: FAST answered \"%s\" with %d fds\n", rep.line, rep.n_fds);
        return 2;
    }
    /* libdivvy: FAST_ONLY is refused (-EACCES), AUTO answers over the socket. */
    if (divvy_open(NULL, DIVVY_FAST_ONLY, &h) != -EACCES)
        return 3;
    return 0;
}

static void hit_fast(struct divvy *h, long long want_credit)
{
    struct divvy_result res = { .size = sizeof(res) };

    CHECK(divvy_hit(h, (struct divvy_kv[]){ { "path", "/f" } }, 1, &res));
    if (!res.fast_path || !res.allowed || (long long)res.credit != want_credit)
        fail_msg("fast hit: fast %d allowed %d credit %llu, want credit %lld", res.fast_path,
                 res.allowed, (unsigned long long)res.credit, want_credit);
}

static void test_fast_trust_member_attacks(void **state)
{
    struct harness_daemon *d = start_trust();
    struct divvy *h = NULL;
    struct harness_conn *c;
    char reply[HARNESS_LINE];
    long long credit = 1000000;
    pid_t pid;
    int status;

    (void)state;
    /* tmpfiles.d's /run/divvy: 2755, group divvy-fast; a reload makes the
     * next rules file under it (0640, group divvy-fast). */
    assert_int_equal(chown(d->state, 0, FAST_GID), 0);
    assert_int_equal(chmod(d->state, 02755), 0);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "RELOAD", reply, sizeof(reply)));
    assert_int_equal(strncmp(reply, "OK reloaded", 11), 0);
    harness_close(c);

    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    harness_wait_fast(h, (struct divvy_kv[]){ { "path", "/f" } }, 1);
    hit_fast(h, --credit);
    CHECK(harness_spawn(member_child, d, &pid));
    CHECK(harness_reap(pid, 20000, &status));
    if (status != 0)
        fail_msg("the fast-group member %s %d", status > 128 ? "died of signal"
                                                             : "got through at step",
                 status > 128 ? status - 128 : status);
    credit--;                   /* the member's own fast-path hit */
    /* divvyd answers, and this client still decides exactly in-process. */
    assert_true(harness_alive(d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "PING", reply, sizeof(reply)));
    assert_string_equal(reply, "OK pong");
    harness_close(c);
    for (int i = 0; i < 100; i++)
        hit_fast(h, --credit);
    divvy_close(h);
    /* A new client maps the same, intact table. */
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    hit_fast(h, --credit);
    divvy_close(h);
}

static void test_fast_trust_non_member(void **state)
{
    struct harness_daemon *d = start_trust();
    struct harness_conn *c;
    char reply[HARNESS_LINE];
    pid_t pid;
    int status;

    (void)state;
    CHECK(harness_spawn(other_child, d, &pid));
    CHECK(harness_reap(pid, 20000, &status));
    if (status != 0)
        fail_msg("the non-member %s %d", status > 128 ? "died of signal" : "failed at step",
                 status > 128 ? status - 128 : status);
    /* TCP peers never get descriptors (even root's). */
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    CHECK(harness_cmd(c, "FAST", reply, sizeof(reply)));
    if (strncmp(reply, "ERR forbidden", 13) != 0)
        fail_msg("FAST over TCP: %s", reply);
    CHECK(harness_cmd(c, "PING", reply, sizeof(reply)));
    assert_string_equal(reply, "OK pong");
    harness_close(c);
}

/* The descriptors ride on FAST's reply: behind replies the peer has not
 * read yet (more than its socket holds) FAST is ERR busy, the connection
 * closes after it, and no descriptor is sent. */
/* One try of test_fast_trust_fast_busy: sends @batch (@len bytes, STATS
 * requests then FAST) on a new connection and reads nothing until divvyd
 * has answered FAST (its errors_total, read on another connection, grew:
 * ERR busy is an error), then reads to the end.  divvyd answers in turns of
 * CONN_TURN_MAX requests and flushes after each, so only a client that does
 * not read while FAST's turn comes is sure to leave replies unread.
 * Returns 1 when FAST met unread replies (the last line, in @last, is
 * divvyd's answer to it; no descriptor came), 0 when FAST handed the memfds
 * over. */
static int fast_busy_try(struct harness_daemon *d, const char *batch, size_t len, char *buf,
                         size_t cap, char **last)
{
    struct harness_conn *c, *probe;
    long long errors0 = -1, errors = -1;
    size_t got = 0;
    int fd, n_fds = 0;

    CHECK(harness_connect(d, HARNESS_UNIX, &probe));
    CHECK(harness_get_stat(probe, "errors_total", &errors0));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    fd = c->fd;
    CHECK(harness_send(c, batch, len));
    for (uint64_t deadline = harness_now_ms() + 3 * HARNESS_TIMEOUT_MS;;) {
        CHECK(harness_get_stat(probe, "errors_total", &errors));
        if (errors > errors0)
            break;
        if (harness_now_ms() > deadline)
            fail_msg("divvyd did not answer FAST behind unread replies within %d ms",
                     3 * HARNESS_TIMEOUT_MS);
        harness_pause_ms(20);
    }
    harness_close(probe);
    for (;;) {
        union {
            char b[CMSG_SPACE(8 * sizeof(int))];
            struct cmsghdr align;
        } u;
        struct iovec iov = { buf + got, cap - got - 1 };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
                              .msg_controllen = sizeof(u.b) };
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        ssize_t n;

        /* Generous: an ASan divvyd on a loaded 2-CPU machine once took over
         * 10 s to produce the replies (make check beside two compilers). */
        if (poll(&pfd, 1, 3 * HARNESS_TIMEOUT_MS) != 1)
            fail_msg("no reply and no EOF for %d ms after %zu bytes", 3 * HARNESS_TIMEOUT_MS, got);
        n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        assert_true(n >= 0);
        if (n == 0)
            break;                      /* closed after the busy reply */
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                int *fds = (int *)(void *)CMSG_DATA(cm);
                int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));

                for (int i = 0; i < k; i++)
                    close(fds[i]);
                n_fds += k;
            }
        got += (size_t)n;
        assert_true(got < cap - 1);
        if (n_fds > 0) {
            /* The memfds ride on FAST's reply, the last one: the replies
             * before it had all gone out.  The connection stays open. */
            harness_close(c);
            return 0;
        }
    }
    buf[got] = '\0';
    assert_true(got > 0 && buf[got - 1] == '\n');
    buf[got - 1] = '\0';
    *last = strrchr(buf, '\n');
    *last = *last ? *last + 1 : buf;
    harness_close(c);
    return 1;
}

static void test_fast_trust_fast_busy(void **state)
{
    struct harness_daemon *d = start_trust();
    struct harness_conn *c;
    char reply[HARNESS_LINE], *batch, *last = NULL, *buf;
    size_t stats_len, n_req, len = 0, cap = 4 << 20;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_multi(c, "STATS", reply, sizeof(reply)));
    harness_close(c);
    stats_len = strlen(reply) + 16;
    /* About 600 kB of replies: more than a socket buffer, less than the
     * 1 MiB a connection may leave unread before it is dropped. */
    n_req = 600000 / stats_len;
    batch = harness_scratch(n_req * 6 + 8);
    buf = harness_scratch(cap);
    assert_non_null(batch);
    assert_non_null(buf);
    for (size_t i = 0; i < n_req; i++)
        len += (size_t)sprintf(batch + len, "STATS\n");
    len += (size_t)sprintf(batch + len, "FAST\n");
    if (fast_busy_try(d, batch, len, buf, cap, &last) == 0)
        fail_msg("FAST behind %zu unread STATS replies was handed the memfds", n_req);
    if (strncmp(last, "ERR busy", 8) != 0)
        fail_msg("FAST behind %zu unread STATS replies: \"%s\"", n_req, last);
    /* divvyd is fine, and FAST alone on a connection works. */
    {
        int tfd = -1, cfd = -1;

        CHECK(fast_fds_get(d->sock, &tfd, &cfd));
        close(tfd);
        close(cfd);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fast_trust_member_attacks, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_fast_trust_non_member, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_fast_trust_fast_busy, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("fast_trust", tests, NULL, NULL);
}
