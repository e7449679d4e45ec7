/* SPDX-License-Identifier: MIT */
/*
 * client_conn: libdivvy's connection to divvyd.  Connects lazily, with a
 * deadline (a Unix socket whose backlog is full and a TCP handshake that
 * never completes both time out), exchanges pipelined requests with one
 * request deadline, and reconnects once, transparently, when a connection
 * kept from an earlier call turns out to be dead (the daemon restarted).
 * Never raises SIGPIPE (MSG_NOSIGNAL) and never blocks past its deadlines:
 * every send and receive is MSG_DONTWAIT behind poll().  Owns a struct
 * client_conn's descriptor and buffers (client_conn.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_conn.h"
#include "clock.h"
#include "proto.h"

int client_conn_remaining(uint64_t deadline)
{
    uint64_t now = clock_now_ms();

    if (now >= deadline)
        return 0;
    return deadline - now > INT32_MAX ? INT32_MAX : (int)(deadline - now);
}

void client_conn_close(struct client_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->fd_used = false;
}

void client_conn_free(struct client_conn *c)
{
    if (!c)
        return;
    client_conn_close(c);
    free(c->rbuf);
    c->rbuf = NULL;
    c->rlen = c->rcap = 0;
    free(c->wbuf);
    c->wbuf = NULL;
    c->wlen = c->wcap = 0;
}

/* A blocking connect() to the Unix socket @path, waiting at most
 * c->connect_ms for room in its backlog.  The socket, or -errno. */
static int connect_unix_path(const struct client_conn *c, const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct timeval tv = { .tv_sec = c->connect_ms / 1000,
                          .tv_usec = (c->connect_ms % 1000) * 1000 };
    size_t len = strlen(path);
    int fd, r;

    if (len >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, len + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
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
        return r;
    }
    return fd;
}

/*
 * Whether the root socket @root is meant for this process: as root, or as a
 * member of the group it is given to (the admin group, mode 0660).  Its
 * owner is divvyd's own user, whom the kernel lets in but divvyd answers
 * ERR forbidden unless it is root or an admin: such a caller (divvyctl run
 * as divvyd's user) goes to the shared socket.
 */
static bool root_socket_is_mine(const char *root)
{
    struct stat st;

    if (geteuid() == 0)
        return true;
    if (stat(root, &st) < 0)
        return false;
    return (st.st_mode & S_IWGRP) && group_member(st.st_gid);
}

int client_conn_unix(struct client_conn *c, int *ret_fd)
{
    char root[CLIENT_UNIX_PATH_MAX + sizeof(PROTO_ROOT_SUFFIX)];
    int fd = -1;

    /* Root and admins go to divvyd's root socket, whose accept queue no
     * unprivileged peer can fill (its mode refuses them at once: EACCES);
     * without one (an older divvyd, divvyd restarting, a socket of another
     * protocol), to the shared socket. */
    if (snprintf(root, sizeof(root), "%s%s", c->addr.path, PROTO_ROOT_SUFFIX) <
            (int)sizeof(root) &&
        root_socket_is_mine(root))
        fd = connect_unix_path(c, root);
    if (fd < 0)
        fd = connect_unix_path(c, c->addr.path);
    if (fd < 0)
        return client_err(c->err, fd, "connect unix:%s: %s", c->addr.path, strerror(-fd));
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

static int connect_tcp(struct client_conn *c)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV };
    uint64_t deadline = clock_now_ms() + (uint64_t)c->connect_ms;
    struct addrinfo *ai = NULL;
    int fd = -1, r, one = 1;

    r = getaddrinfo(c->addr.host, c->addr.port, &hints, &ai);
    if (r != 0) {
        r = r == EAI_SYSTEM ? -errno : r == EAI_MEMORY ? -ENOMEM : -EHOSTUNREACH;
        return client_err(c->err, r, "resolve %s: %s", c->addr.host, gai_strerror(r));
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
        return client_err(c->err, r, "connect tcp:%s:%s: %s", c->addr.host, c->addr.port,
                          strerror(-r));
    /* One request, one reply: never wait for Nagle. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->fd = fd;
    return 0;
}

static int conn_open(struct client_conn *c)
{
    c->fd_used = false;
    return c->addr.kind == CLIENT_ADDR_UNIX ? client_conn_unix(c, &c->fd) : connect_tcp(c);
}

int client_conn_hint(struct client_conn *c, const char *line, size_t len)
{
    ssize_t n;
    int r;

    if (c->fd < 0 && (r = conn_open(c)) < 0) {
        client_err_clear(c->err);     /* the hit itself succeeded */
        return r;
    }
    do {
        n = send(c->fd, line, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    /* Nothing sent into a full buffer: the stream is still whole.  A short
     * write would leave half a line in it: start afresh. */
    if (n == (ssize_t)len)
        return 0;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return -EAGAIN;
    r = n < 0 ? -errno : -EAGAIN;
    client_conn_close(c);
    return r;
}

int client_conn_reserve(struct client_conn *c, size_t extra)
{
    size_t cap = c->wcap ? c->wcap : 4096;
    char *n;

    if (c->wlen + extra <= c->wcap)
        return 0;
    while (cap < c->wlen + extra)
        cap *= 2;
    n = realloc(c->wbuf, cap);
    if (!n)
        return -ENOMEM;
    c->wbuf = n;
    c->wcap = cap;
    return 0;
}

static int rbuf_room(struct client_conn *c)
{
    size_t cap;
    char *n;

    if (c->rcap - c->rlen >= 4096)
        return 0;
    if (c->rcap >= CLIENT_REPLY_MAX)
        return -EMSGSIZE;
    cap = c->rcap ? c->rcap * 2 : 16384;
    n = realloc(c->rbuf, cap);
    if (!n)
        return -ENOMEM;
    c->rbuf = n;
    c->rcap = cap;
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
static int count_lines(struct client_conn *c, struct progress *pg, enum client_expect expect)
{
    char *nl;

    while (pg->lines < pg->want &&
           (nl = memchr(c->rbuf + pg->scan, '\n', c->rlen - pg->scan)) != NULL) {
        size_t start = pg->scan;
        unsigned long more;

        pg->scan = (size_t)(nl - c->rbuf) + 1;
        if (expect == CLIENT_EXPECT_COMMAND && pg->lines == 0 &&
            client_reply_multi(c->rbuf + start, (size_t)(nl - c->rbuf) - start, &more)) {
            if (more > CLIENT_COMMAND_LINES)
                return client_err(c->err, -EPROTO, "divvyd announced %lu reply lines", more);
            pg->want += more;
        }
        pg->lines++;
    }
    if (pg->lines == pg->want && pg->scan != c->rlen)
        return client_err(c->err, -EPROTO, "divvyd sent more than the replies asked for");
    return 0;
}

static enum attempt attempt(struct client_conn *c, size_t n_req, enum client_expect expect,
                            uint64_t deadline, bool reused, int *ret)
{
    struct progress pg = { .want = n_req };
    int r;

    c->rlen = 0;
    while (pg.sent < c->wlen || pg.lines < pg.want) {
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        ssize_t n;

        if (pg.sent < c->wlen) {
            n = send(c->fd, c->wbuf + pg.sent, c->wlen - pg.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                pg.sent += (size_t)n;
                continue;
            }
            if (n < 0 && errno != EAGAIN && errno != EINTR) {
                r = -errno;
                if (reused && c->rlen == 0)
                    return ATTEMPT_RETRY;
                *ret = client_err(c->err, r, "send to divvyd: %s", strerror(-r));
                return ATTEMPT_FAIL;
            }
            pfd.events |= POLLOUT;
        }
        n = poll(&pfd, 1, client_conn_remaining(deadline));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            *ret = client_err(c->err, -errno, "poll: %s", strerror(errno));
            return ATTEMPT_FAIL;
        }
        if (n == 0) {
            *ret = client_err(c->err, -ETIMEDOUT, "no reply from divvyd within %d ms",
                              c->request_ms);
            return ATTEMPT_FAIL;
        }
        if (!(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        r = rbuf_room(c);
        if (r < 0) {
            *ret = client_err(c->err, r, "replies exceed %u bytes", CLIENT_REPLY_MAX);
            return ATTEMPT_FAIL;
        }
        n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0) {
            r = n == 0 ? -ECONNRESET : -errno;
            /* Nothing answered on a kept connection: the daemon went away
             * between calls, not during this one. */
            if (reused && c->rlen == 0)
                return ATTEMPT_RETRY;
            *ret = client_err(c->err, r, "divvyd closed the connection%s%s",
                              n == 0 ? "" : ": ", n == 0 ? "" : strerror(-r));
            return ATTEMPT_FAIL;
        }
        c->rlen += (size_t)n;
        r = count_lines(c, &pg, expect);
        if (r < 0) {
            *ret = r;
            return ATTEMPT_FAIL;
        }
    }
    return ATTEMPT_OK;
}

int client_conn_exchange(struct client_conn *c, size_t n_req, enum client_expect expect)
{
    uint64_t deadline = 0;
    bool reused;
    int r = 0;

    for (int tries = 0; tries < 2; tries++) {
        reused = c->fd >= 0 && c->fd_used;
        if (c->fd < 0) {
            r = conn_open(c);
            if (r < 0)
                return r;
        }
        if (tries == 0)
            deadline = clock_now_ms() + (uint64_t)c->request_ms;
        switch (attempt(c, n_req, expect, deadline, reused, &r)) {
        case ATTEMPT_OK:
            c->fd_used = true;
            return 0;
        case ATTEMPT_RETRY:
            client_conn_close(c);
            continue;
        case ATTEMPT_FAIL:
            client_conn_close(c);
            return r;
        }
    }
    /* Unreachable: the second try runs on a fresh connection, never RETRY. */
    client_conn_close(c);
    return client_err(c->err, -ECONNRESET, "divvyd closed the connection");
}
