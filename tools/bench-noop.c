/* SPDX-License-Identifier: MIT */
/*
 * bench-noop: the reference server of `make bench-instr` (tools/bench-instr.sh,
 * docs/dev/benchmarks.md).  It listens on a Unix stream socket and answers every
 * line it reads with a fixed "OK\n", deciding nothing: what a server that
 * speaks divvy's line protocol costs when the decision is free.  THREADS
 * threads (default 1, as many as the divvyd it is compared with), each its
 * own epoll set accepting from the one listening socket (EPOLLEXCLUSIVE) and
 * serving the connections it accepted; non-blocking sockets; replies owed are
 * a count, so a line split over two reads or a client that reads slowly costs
 * no buffer.  SIGTERM or SIGINT stops it (the socket is unlinked); it prints
 * the lines it answered on stderr.  A benchmark's tool, never installed.
 *   bench-noop PATH [THREADS]
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define NOOP_EVENTS   64
#define NOOP_READ     65536
#define NOOP_REPLY    "OK\n"
#define NOOP_REPLY_LEN 3
#define NOOP_BURST    1365          /* replies per write (4,095 bytes) */
#define NOOP_THREADS_MAX 64
#define NOOP_POLL_MS  200           /* how soon a thread sees the stop signal */

struct noop_conn {
    int fd;
    uint64_t owed;                  /* bytes of replies not yet written */
    uint64_t written;               /* bytes written: the phase within "OK\n" */
    int want_out;                   /* EPOLLOUT armed */
};

/* One serving thread: its epoll set, its count, its read buffer. */
struct noop_thread {
    pthread_t tid;
    int ep;
    int lfd;
    int error;                      /* -errno that stopped it, or 0 */
    uint64_t lines;
    char buf[NOOP_READ];
};

static volatile sig_atomic_t noop_stop;
static char noop_burst[NOOP_BURST * NOOP_REPLY_LEN + NOOP_REPLY_LEN];

static void noop_on_signal(int sig)
{
    (void)sig;
    noop_stop = 1;
}

static void noop_close(int ep, struct noop_conn *c)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
}

/* Writes what @c is owed; arms EPOLLOUT while the socket is full.  0, or
 * -errno when the connection is to be closed. */
static int noop_flush(int ep, struct noop_conn *c)
{
    struct epoll_event ev = { .data.ptr = c };

    while (c->owed) {
        size_t phase = (size_t)(c->written % NOOP_REPLY_LEN);
        size_t len = c->owed < NOOP_BURST * NOOP_REPLY_LEN ? (size_t)c->owed
                                                           : NOOP_BURST * NOOP_REPLY_LEN;
        ssize_t n = write(c->fd, noop_burst + phase, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n < 0)
            return -errno;
        c->owed -= (uint64_t)n;
        c->written += (uint64_t)n;
    }
    if ((c->owed != 0) != c->want_out) {
        c->want_out = c->owed != 0;
        ev.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0u);
        if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
            return -errno;
    }
    return 0;
}

/* Reads what @c sent and owes one reply per newline.  0, or -errno (or
 * -ECONNRESET at the end of the stream) when the connection is to be closed. */
static int noop_read(struct noop_thread *t, struct noop_conn *c)
{
    for (;;) {
        ssize_t n = read(c->fd, t->buf, sizeof(t->buf));
        const char *p = t->buf, *end, *nl;

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -ECONNRESET;
        end = t->buf + n;
        while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
            c->owed += NOOP_REPLY_LEN;
            t->lines++;
            p = nl + 1;
        }
    }
}

static int noop_accept(int ep, int lfd)
{
    for (;;) {
        struct epoll_event ev = { .events = EPOLLIN };
        struct noop_conn *c;
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
        c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            return -ENOMEM;
        }
        c->fd = fd;
        ev.data.ptr = c;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
            int r = -errno;

            close(fd);
            free(c);
            return r;
        }
    }
}

static int noop_listen(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd, r;

    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    unlink(path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0) {
        r = -errno;
        close(fd);
        return r;
    }
    return fd;
}

/* One thread's event loop until the stop signal; t->error says why it
 * stopped early.  Its connections are left to the process's exit. */
static void *noop_run(void *arg)
{
    struct noop_thread *t = arg;
    struct epoll_event evs[NOOP_EVENTS];
    struct epoll_event lev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = NULL };

    if (epoll_ctl(t->ep, EPOLL_CTL_ADD, t->lfd, &lev) < 0) {
        t->error = -errno;
        return NULL;
    }
    while (!noop_stop) {
        int n = epoll_wait(t->ep, evs, NOOP_EVENTS, NOOP_POLL_MS);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            t->error = -errno;
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            struct noop_conn *c = evs[i].data.ptr;
            int r = 0;

            if (!c) {
                r = noop_accept(t->ep, t->lfd);
                if (r < 0 && r != -EMFILE && r != -ENFILE) {
                    t->error = r;
                    return NULL;
                }
                continue;
            }
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                r = noop_read(t, c);
            if (r == 0)
                r = noop_flush(t->ep, c);
            if (r < 0)
                noop_close(t->ep, c);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    struct sigaction sa = { .sa_handler = noop_on_signal };
    struct noop_thread *th = NULL;
    unsigned long n_th = 1, started = 0;
    uint64_t lines = 0;
    char *end = NULL;
    int lfd = -1, r;

    if (argc == 3)
        n_th = strtoul(argv[2], &end, 10);
    if (argc < 2 || argc > 3 || argv[1][0] == '-' || (end && (*end || !n_th)) ||
        n_th > NOOP_THREADS_MAX) {
        fprintf(stderr, "usage: bench-noop PATH [THREADS]\n"
                        "Answers every line on the Unix socket PATH with \"OK\\n\" until "
                        "SIGTERM (THREADS 1-%d, default 1).\n", NOOP_THREADS_MAX);
        return 2;
    }
    for (size_t i = 0; i < sizeof(noop_burst); i += NOOP_REPLY_LEN)
        memcpy(noop_burst + i, NOOP_REPLY, NOOP_REPLY_LEN);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    r = lfd = noop_listen(argv[1]);
    if (r < 0)
        goto out;
    th = calloc(n_th, sizeof(*th));
    if (!th) {
        r = -ENOMEM;
        goto out;
    }
    for (; started < n_th; started++) {
        th[started].lfd = lfd;
        th[started].ep = epoll_create1(EPOLL_CLOEXEC);
        if (th[started].ep < 0) {
            r = -errno;
            break;
        }
        r = -pthread_create(&th[started].tid, NULL, noop_run, &th[started]);
        if (r < 0) {
            close(th[started].ep);
            break;
        }
    }
    if (r < 0)
        noop_stop = 1;
    for (unsigned long i = 0; i < started; i++) {
        pthread_join(th[i].tid, NULL);
        close(th[i].ep);
        lines += th[i].lines;
        if (th[i].error && r == 0)
            r = th[i].error;
    }
out:
    if (r < 0)
        fprintf(stderr, "bench-noop: %s: %s\n", argv[1], strerror(-r));
    else
        fprintf(stderr, "bench-noop: %llu lines answered\n", (unsigned long long)lines);
    if (lfd >= 0) {
        close(lfd);
        unlink(argv[1]);
    }
    free(th);
    return r < 0 ? 1 : 0;
}
