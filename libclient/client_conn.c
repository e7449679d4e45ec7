/* SPDX-License-Identifier: MIT */
/*
 * client_conn: libdivvy's connection to divvyd.  Connects lazily, with a
 * deadline (a Unix socket whose backlog is full and a TCP handshake that
 * never completes both time out), exchanges pipelined requests with one
 * request deadline, and reconnects once, transparently, when a connection
 * kept from an earlier call turns out to be dead (the daemon restarted).
 * Never raises SIGPIPE (MSG_NOSIGNAL) and never blocks past its deadlines:
 * every send and receive is MSG_DONTWAIT behind poll().  Owns h->fd and the
 * handle's read buffer.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"
#include "clock.h"

int client_conn_remaining(uint64_t deadline)
{
    uint64_t now = clock_now_ms();

    if (now >= deadline)
        return 0;
    return deadline - now > INT32_MAX ? INT32_MAX : (int)(deadline - now);
}

void client_conn_close(struct divvy *h)
{
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
    h->fd_used = false;
}

int client_conn_unix(struct divvy *h, int *ret_fd)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct timeval tv = { .tv_sec = h->connect_ms / 1000,
                          .tv_usec = (h->connect_ms % 1000) * 1000 };
    int fd, r;

    memcpy(sa.sun_path, h->addr.path, strlen(h->addr.path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return client_err(h, -errno, "socket: %s", strerror(errno));
    /*
     * A non-blocking connect() to a Unix socket whose backlog is full fails
     * with EAGAIN at once instead of waiting; a blocking one waits at most
     * SO_SNDTIMEO and then fails with EAGAIN.  Later I/O is MSG_DONTWAIT.
     */
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
        r = -errno;
        goto out;
    }
    r = 0;
    while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (errno == EINTR)
            continue;
        r = errno == EAGAIN || errno == EINPROGRESS ? -ETIMEDOUT : -errno;
        break;
    }
out:
    if (r < 0) {
        close(fd);
        return client_err(h, r, "connect unix:%s: %s", h->addr.path, strerror(-r));
    }
    *ret_fd = fd;
    return 0;
}

/* Waits for a non-blocking connect() on @fd until @deadline. */
static int connect_wait(int fd, uint64_t deadline)
{
    struct pollfd pfd = { .fd = fd, .events = POLLOUT };
    socklen_t sl = sizeof(int);
    int err = 0, n;

    for (;;) {
        n = poll(&pfd, 1, client_conn_remaining(deadline));
        if (n > 0)
            break;
        if (n == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0)
        return -errno;
    return -err;
}

static int connect_tcp(struct divvy *h)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV };
    uint64_t deadline = clock_now_ms() + (uint64_t)h->connect_ms;
    struct addrinfo *ai = NULL;
    int fd = -1, r, one = 1;

    r = getaddrinfo(h->addr.host, h->addr.port, &hints, &ai);
    if (r != 0) {
        r = r == EAI_SYSTEM ? -errno : r == EAI_MEMORY ? -ENOMEM : -EHOSTUNREACH;
        return client_err(h, r, "resolve %s: %s", h->addr.host, gai_strerror(r));
    }
    r = -EHOSTUNREACH;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            r = -errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            r = 0;
        else if (errno == EINPROGRESS || errno == EINTR)
            r = connect_wait(fd, deadline);
        else
            r = -errno;
        if (r == 0)
            break;
        close(fd);
        fd = -1;
        if (r == -ETIMEDOUT)
            break;
    }
    freeaddrinfo(ai);
    if (r < 0)
        return client_err(h, r, "connect tcp:%s:%s: %s", h->addr.host, h->addr.port,
                          strerror(-r));
    /* One request, one reply: never wait for Nagle. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    h->fd = fd;
    return 0;
}

static int conn_open(struct divvy *h)
{
    h->fd_used = false;
    return h->addr.kind == CLIENT_ADDR_UNIX ? client_conn_unix(h, &h->fd) : connect_tcp(h);
}

void client_conn_hint(struct divvy *h, const char *line, size_t len)
{
    ssize_t n;

    if (h->fd < 0 && conn_open(h) < 0) {
        h->errmsg[0] = '\0';           /* the hit itself succeeded */
        return;
    }
    do {
        n = send(h->fd, line, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    /* Nothing sent into a full buffer: the stream is still whole.  A short
     * write would leave half a line in it: start afresh. */
    if (n == (ssize_t)len || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
        return;
    client_conn_close(h);
}

int client_wbuf_reserve(struct divvy *h, size_t extra)
{
    size_t cap = h->wcap ? h->wcap : 4096;
    char *n;

    if (h->wlen + extra <= h->wcap)
        return 0;
    while (cap < h->wlen + extra)
        cap *= 2;
    n = realloc(h->wbuf, cap);
    if (!n)
        return -ENOMEM;
    h->wbuf = n;
    h->wcap = cap;
    return 0;
}

static int rbuf_room(struct divvy *h)
{
    size_t cap;
    char *n;

    if (h->rcap - h->rlen >= 4096)
        return 0;
    if (h->rcap >= CLIENT_REPLY_MAX)
        return -EMSGSIZE;
    cap = h->rcap ? h->rcap * 2 : 16384;
    n = realloc(h->rbuf, cap);
    if (!n)
        return -ENOMEM;
    h->rbuf = n;
    h->rcap = cap;
    return 0;
}

/* Why one attempt failed: retry (on a fresh connection) or give up. */
enum attempt { ATTEMPT_OK, ATTEMPT_RETRY, ATTEMPT_FAIL };

struct progress {
    size_t sent;                /* bytes of wbuf written */
    size_t lines;               /* complete reply lines received */
    size_t want;                /* lines that complete the exchange */
    size_t scan;                /* rbuf bytes already searched for '\n' */
};

/* Counts the complete lines in new bytes; a command's "OK <n>" asks for n more. */
static int count_lines(struct divvy *h, struct progress *pg, enum client_expect expect)
{
    char *nl;

    while (pg->lines < pg->want &&
           (nl = memchr(h->rbuf + pg->scan, '\n', h->rlen - pg->scan)) != NULL) {
        size_t start = pg->scan;
        unsigned long more;

        pg->scan = (size_t)(nl - h->rbuf) + 1;
        if (expect == CLIENT_EXPECT_COMMAND && pg->lines == 0 &&
            client_reply_multi(h->rbuf + start, (size_t)(nl - h->rbuf) - start, &more)) {
            if (more > CLIENT_COMMAND_LINES)
                return client_err(h, -EPROTO, "divvyd announced %lu reply lines", more);
            pg->want += more;
        }
        pg->lines++;
    }
    if (pg->lines == pg->want && pg->scan != h->rlen)
        return client_err(h, -EPROTO, "divvyd sent more than the replies asked for");
    return 0;
}

static enum attempt attempt(struct divvy *h, size_t n_req, enum client_expect expect,
                            uint64_t deadline, bool reused, int *ret)
{
    struct progress pg = { .want = n_req };
    int r;

    h->rlen = 0;
    while (pg.sent < h->wlen || pg.lines < pg.want) {
        struct pollfd pfd = { .fd = h->fd, .events = POLLIN };
        ssize_t n;

        if (pg.sent < h->wlen) {
            n = send(h->fd, h->wbuf + pg.sent, h->wlen - pg.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                pg.sent += (size_t)n;
                continue;
            }
            if (n < 0 && errno != EAGAIN && errno != EINTR) {
                r = -errno;
                if (reused && h->rlen == 0)
                    return ATTEMPT_RETRY;
                *ret = client_err(h, r, "send to divvyd: %s", strerror(-r));
                return ATTEMPT_FAIL;
            }
            pfd.events |= POLLOUT;
        }
        n = poll(&pfd, 1, client_conn_remaining(deadline));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            *ret = client_err(h, -errno, "poll: %s", strerror(errno));
            return ATTEMPT_FAIL;
        }
        if (n == 0) {
            *ret = client_err(h, -ETIMEDOUT, "no reply from divvyd within %d ms",
                              h->request_ms);
            return ATTEMPT_FAIL;
        }
        if (!(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        r = rbuf_room(h);
        if (r < 0) {
            *ret = client_err(h, r, "replies exceed %u bytes", CLIENT_REPLY_MAX);
            return ATTEMPT_FAIL;
        }
        n = recv(h->fd, h->rbuf + h->rlen, h->rcap - h->rlen, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0) {
            r = n == 0 ? -ECONNRESET : -errno;
            /* Nothing answered on a kept connection: the daemon went away
             * between calls, not during this one. */
            if (reused && h->rlen == 0)
                return ATTEMPT_RETRY;
            *ret = client_err(h, r, "divvyd closed the connection%s%s",
                              n == 0 ? "" : ": ", n == 0 ? "" : strerror(-r));
            return ATTEMPT_FAIL;
        }
        h->rlen += (size_t)n;
        r = count_lines(h, &pg, expect);
        if (r < 0) {
            *ret = r;
            return ATTEMPT_FAIL;
        }
    }
    return ATTEMPT_OK;
}

int client_conn_exchange(struct divvy *h, size_t n_req, enum client_expect expect)
{
    uint64_t deadline = 0;
    bool reused;
    int r = 0;

    for (int tries = 0; tries < 2; tries++) {
        reused = h->fd >= 0 && h->fd_used;
        if (h->fd < 0) {
            r = conn_open(h);
            if (r < 0)
                return r;
        }
        if (tries == 0)
            deadline = clock_now_ms() + (uint64_t)h->request_ms;
        switch (attempt(h, n_req, expect, deadline, reused, &r)) {
        case ATTEMPT_OK:
            h->fd_used = true;
            return 0;
        case ATTEMPT_RETRY:
            client_conn_close(h);
            continue;
        case ATTEMPT_FAIL:
            client_conn_close(h);
            return r;
        }
    }
    /* Unreachable: the second try runs on a fresh connection, never RETRY. */
    client_conn_close(h);
    return client_err(h, -ECONNRESET, "divvyd closed the connection");
}
