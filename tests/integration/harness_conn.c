/* SPDX-License-Identifier: MIT */
/*
 * harness_conn: raw connections to divvyd for the integration tests
 * (harness.h): Unix and TCP connects, sends, line reads with deadlines,
 * multi-line replies, reply parsing, and handles on libdivvy pointed at a
 * test's daemon.  Every connection is in the registry (harness.c), so a
 * failed test closes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "divvy.h"
#include "harness_private.h"

#define RBUF_MIN     65536
#define RBUF_MAX     (64u << 20)

/* ---- connections ------------------------------------------------------------- */

static int conn_new(int fd, struct harness_conn **ret)
{
    struct harness_conn *c = calloc(1, sizeof(*c));
    int r;

    if (!c)
        return -ENOMEM;
    c->cap = RBUF_MIN;
    c->buf = malloc(c->cap);
    if (!c->buf) {
        free(c);
        return -ENOMEM;
    }
    c->fd = fd;
    r = harness_reg_add_conn(c);
    if (r < 0) {
        free(c->buf);
        free(c);
        return r;
    }
    *ret = c;
    return 0;
}

int harness_connect_unix(const char *path, struct harness_conn **ret)
{
    int fd = harness_unix_fd(path), r;

    if (fd < 0)
        return fd;
    r = conn_new(fd, ret);
    if (r < 0)
        close(fd);
    return r;
}

/* Connects to 127.0.0.1:@port, waiting at most @timeout_ms (< 0: as long as
 * connect() takes; a full backlog makes it retry for minutes). */
static int connect_tcp(int port, int timeout_ms, struct harness_conn **ret)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    int fd, r, one = 1, err = 0;
    socklen_t len = sizeof(err);

    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (timeout_ms < 0 ? 0 : SOCK_NONBLOCK), 0);
    if (fd < 0)
        return -errno;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    r = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
    if (r == -EINPROGRESS) {
        struct pollfd pfd = { .fd = fd, .events = POLLOUT };

        r = poll(&pfd, 1, timeout_ms);
        if (r == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0)
            r = -err;
        else
            r = r == 0 ? -ETIMEDOUT : -errno;
    }
    if (r == 0 && timeout_ms >= 0 && fcntl(fd, F_SETFL, 0) < 0)
        r = -errno;
    if (r == 0)
        r = conn_new(fd, ret);
    if (r < 0)
        close(fd);
    return r;
}

int harness_connect_tcp(int port, struct harness_conn **ret)
{
    return connect_tcp(port, -1, ret);
}

int harness_free_port(int type)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0), port = -1;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    if (port <= 0)
        fail_msg("no free loopback port: %s", strerror(errno));
    return port;
}

int harness_http_get_ms(int port, const char *path, char *buf, size_t size, int timeout_ms)
{
    struct harness_conn *c = NULL;
    char line[HARNESS_LINE];
    size_t len = 0;
    int status = -1, r;
    ssize_t n;

    buf[0] = '\0';
    r = connect_tcp(port, timeout_ms, &c);
    if (r < 0)
        return r;
    r = harness_sendf(c, "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path);
    if (r < 0) {
        harness_close(c);
        return r;
    }
    n = harness_recv_line(c, line, sizeof(line), timeout_ms);
    if (n > 9 && strncmp(line, "HTTP/1.", 7) == 0)
        status = atoi(line + 9);
    /* Headers up to the empty line, then the body up to EOF. */
    while ((n = harness_recv_line(c, line, sizeof(line), timeout_ms)) > 0 &&
           strcmp(line, "\r") != 0)
        ;
    while ((n = harness_recv_line(c, line, sizeof(line), timeout_ms)) >= 0 &&
           len + (size_t)n + 2 < size)
        len += (size_t)snprintf(buf + len, size - len, "%s\n", line);
    harness_close(c);
    return status;
}

int harness_http_get(int port, const char *path, char *buf, size_t size)
{
    int status = harness_http_get_ms(port, path, buf, size, HARNESS_TIMEOUT_MS);

    CHECK(status < -1 ? status : 0);
    return status;
}

void harness_scrape_until(int port, const char *path, const char *line, char *buf,
                          size_t size)
{
    uint64_t deadline = harness_now_ms() + 10000;
    size_t n = strlen(line);

    for (;;) {
        int status = harness_http_get(port, path, buf, size);

        if (status != 200)
            fail_msg("GET %s: HTTP status %d", path, status);
        for (const char *p = buf; (p = strstr(p, line)) != NULL; p += n)
            if ((p == buf || p[-1] == '\n') && p[n] == '\n')
                return;
        if (harness_now_ms() > deadline)
            fail_msg("no line \"%s\" within 10 s in:\n%s", line, buf);
        /* Waiting for divvyd's next tick; nothing to wait on but time. */
        harness_pause_ms(100);
    }
}

int harness_connect(struct harness_daemon *d, enum harness_via via, struct harness_conn **ret)
{
    if (via == HARNESS_TCP) {
        if (d->tcp_port <= 0)
            return -EADDRNOTAVAIL;
        return harness_connect_tcp(d->tcp_port, ret);
    }
    return harness_connect_unix(d->sock, ret);
}

void harness_close(struct harness_conn *c)
{
    if (!c)
        return;
    harness_reg_del_conn(c);
    close(c->fd);
    free(c->buf);
    free(c);
}

/* Reads what is available into the buffer.  >0 bytes, 0 EOF, -EAGAIN, -errno. */
static ssize_t conn_fill(struct harness_conn *c)
{
    ssize_t n;

    if (c->off > 0 && c->off == c->len) {
        c->off = c->len = 0;
    }
    if (c->cap - c->len < 4096) {
        if (c->off > 0) {
            memmove(c->buf, c->buf + c->off, c->len - c->off);
            c->len -= c->off;
            c->off = 0;
        }
        if (c->cap - c->len < 4096) {
            char *nb;

            if (c->cap >= RBUF_MAX)
                return -ENOBUFS;
            nb = realloc(c->buf, c->cap * 2);
            if (!nb)
                return -ENOMEM;
            c->buf = nb;
            c->cap *= 2;
        }
    }
    n = recv(c->fd, c->buf + c->len, c->cap - c->len, MSG_DONTWAIT);
    if (n < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    c->len += (size_t)n;
    return n;
}

int harness_send(struct harness_conn *c, const void *data, size_t len)
{
    uint64_t deadline = harness_now_ms() + HARNESS_TIMEOUT_MS;
    const char *p = data;

    while (len > 0) {
        struct pollfd pfd = { .fd = c->fd, .events = POLLOUT | POLLIN };
        ssize_t n;
        int r;

        r = poll(&pfd, 1, harness_remaining_ms(deadline));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -ETIMEDOUT;
        if (pfd.revents & POLLIN) {
            /* Drain replies so a long pipeline cannot deadlock both sides. */
            n = conn_fill(c);
            if (n == 0 && !(pfd.revents & POLLOUT))
                return -EPIPE;
        }
        if (pfd.revents & (POLLOUT | POLLERR | POLLHUP)) {
            n = send(c->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                    continue;
                return -errno;
            }
            p += n;
            len -= (size_t)n;
            deadline = harness_now_ms() + HARNESS_TIMEOUT_MS;
        }
    }
    return 0;
}

int harness_sendf(struct harness_conn *c, const char *fmt, ...)
{
    char stack[1024], *buf = stack;
    va_list ap;
    int n, r;

    va_start(ap, fmt);
    n = vsnprintf(stack, sizeof(stack), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n >= sizeof(stack)) {
        buf = malloc((size_t)n + 1);
        if (!buf)
            return -ENOMEM;
        va_start(ap, fmt);
        vsnprintf(buf, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    r = harness_send(c, buf, (size_t)n);
    if (buf != stack)
        free(buf);
    return r;
}

ssize_t harness_recv_line(struct harness_conn *c, char *buf, size_t size, int timeout_ms)
{
    uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;

    for (;;) {
        char *nl = memchr(c->buf + c->off, '\n', c->len - c->off);
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        ssize_t n;
        int r;

        if (nl) {
            size_t l = (size_t)(nl - (c->buf + c->off));

            if (l + 1 > size)
                return -EMSGSIZE;
            memcpy(buf, c->buf + c->off, l);
            buf[l] = '\0';
            c->off += l + 1;
            return (ssize_t)l;
        }
        n = conn_fill(c);
        if (n > 0)
            continue;
        if (n == 0)
            return -ENOTCONN;
        if (n != -EAGAIN)
            return n;
        r = poll(&pfd, 1, harness_remaining_ms(deadline));
        if (r < 0 && errno != EINTR)
            return -errno;
        if (r == 0)
            return -ETIMEDOUT;
    }
}

ssize_t harness_cmd(struct harness_conn *c, const char *req, char *reply, size_t size)
{
    size_t len = strlen(req);
    char *line;
    int r;

    line = malloc(len + 1);
    if (!line)
        return -ENOMEM;
    memcpy(line, req, len);
    line[len] = '\n';
    r = harness_send(c, line, len + 1);
    free(line);
    if (r < 0)
        return r;
    return harness_recv_line(c, reply, size, HARNESS_TIMEOUT_MS);
}

int harness_recv_lines(struct harness_conn *c, unsigned n, char *buf, size_t size,
                       int timeout_ms)
{
    size_t used = 0;
    char line[HARNESS_LINE];

    if (size == 0)
        return -ENOBUFS;
    buf[0] = '\0';
    for (unsigned i = 0; i < n; i++) {
        ssize_t l = harness_recv_line(c, line, sizeof(line), timeout_ms);

        if (l < 0)
            return (int)l;
        if (used + (size_t)l + 2 > size)
            return -ENOBUFS;
        memcpy(buf + used, line, (size_t)l);
        used += (size_t)l;
        buf[used++] = '\n';
        buf[used] = '\0';
    }
    return 0;
}

int harness_multi(struct harness_conn *c, const char *req, char *buf, size_t size)
{
    char head[HARNESS_LINE];
    unsigned n;
    char junk;
    ssize_t l;
    int r;

    l = harness_cmd(c, req, head, sizeof(head));
    if (l < 0)
        return (int)l;
    if (sscanf(head, "OK %u%c", &n, &junk) != 1) {
        snprintf(buf, size, "%s", head);
        return -EPROTO;
    }
    r = harness_recv_lines(c, n, buf, size, HARNESS_TIMEOUT_MS);
    return r < 0 ? r : (int)n;
}

int harness_wait_eof(struct harness_conn *c, int timeout_ms)
{
    uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;

    for (;;) {
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        ssize_t n;
        int r;

        c->off = c->len = 0;
        n = conn_fill(c);
        if (n == 0)
            return 0;
        if (n == -ECONNRESET)
            return 0;
        if (n > 0)
            continue;
        if (n != -EAGAIN)
            return (int)n;
        r = poll(&pfd, 1, harness_remaining_ms(deadline));
        if (r < 0 && errno != EINTR)
            return -errno;
        if (r == 0)
            return -ETIMEDOUT;
    }
}

int harness_readable(struct harness_conn *c, int timeout_ms)
{
    struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
    int r;

    if (c->len > c->off)
        return 1;
    r = poll(&pfd, 1, timeout_ms);
    if (r < 0)
        return -errno;
    return r > 0;
}

/* ---- replies ------------------------------------------------------------------ */

int harness_parse_ok_rule(const char *reply, bool *ret_allowed, long long *ret_credit,
                          long long *ret_secs, char *ret_rule, size_t rule_size)
{
    const char *sp;
    char head[64];
    size_t hl;

    /* The first four fields are HIT's; the fifth runs to the end. */
    sp = reply;
    for (int i = 0; i < 4 && sp; i++)
        sp = strchr(sp + (i > 0), ' ');
    if (!sp || sp[1] == '\0' || strchr(sp + 1, ' '))
        return -EPROTO;
    hl = (size_t)(sp - reply);
    if (hl >= sizeof(head) || strlen(sp + 1) >= rule_size)
        return -EPROTO;
    memcpy(head, reply, hl);
    head[hl] = '\0';
    if (harness_parse_ok(head, ret_allowed, ret_credit, ret_secs) < 0)
        return -EPROTO;
    strcpy(ret_rule, sp + 1);
    return 0;
}

int harness_parse_ok(const char *reply, bool *ret_allowed, long long *ret_credit,
                     long long *ret_secs)
{
    char word[8], junk;
    long long credit, secs;

    if (sscanf(reply, "OK %7s %lld %lld%c", word, &credit, &secs, &junk) != 3)
        return -EPROTO;
    if (strcmp(word, "true") == 0)
        *ret_allowed = true;
    else if (strcmp(word, "false") == 0)
        *ret_allowed = false;
    else
        return -EPROTO;
    *ret_credit = credit;
    *ret_secs = secs;
    return 0;
}

int harness_fields(const char *line, struct proto_req *ret)
{
    char buf[PROTO_LINE_MAX];
    int n = snprintf(buf, sizeof(buf), "HIT %s\n", line);
    ssize_t r;

    if (n < 0 || n >= (int)sizeof(buf))
        return -EMSGSIZE;
    r = proto_parse(buf, (size_t)n, ret);
    if (r != n || ret->err != PROTO_E_NONE || ret->verb != PROTO_HIT)
        return -EPROTO;
    /* The values point into ret->buf, not into our stack buffer. */
    return 0;
}

const char *harness_field(const struct proto_req *req, const char *key)
{
    const struct proto_kv *kv = proto_find(req, key, strlen(key));

    return kv ? kv->value : NULL;
}

int harness_stat(const char *stats, const char *name, long long *ret)
{
    size_t nl = strlen(name);
    const char *p = stats;

    while (p && *p) {
        if (strncmp(p, name, nl) == 0 && p[nl] == '=') {
            *ret = strtoll(p + nl + 1, NULL, 10);
            return 0;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -ENOENT;
}

int harness_get_stat(struct harness_conn *c, const char *name, long long *ret)
{
    char buf[HARNESS_LINE];
    int r;

    r = harness_multi(c, "STATS", buf, sizeof(buf));
    if (r < 0)
        return r;
    return harness_stat(buf, name, ret);
}

long long harness_daemon_stat(struct harness_daemon *d, const char *name)
{
    struct harness_conn *c = NULL;
    long long v = -1;

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_get_stat(c, name, &v));
    harness_close(c);
    return v;
}

/* ---- libdivvy ---------------------------------------------------------------- */

int harness_divvy_env(const struct harness_daemon *d)
{
    char addr[HARNESS_PATH + 8];

    snprintf(addr, sizeof(addr), "unix:%s", d->sock);
    if (setenv("DIVVY_ADDRESS", addr, 1) < 0)
        return -errno;
    unsetenv("DIVVY_PATH");
    return 0;
}

void harness_wait_fast(struct divvy *h, const struct divvy_kv *kv, size_t n_kv)
{
    struct divvy_result res = { .size = sizeof(res) };
    uint64_t deadline = harness_now_ms() + 5000;

    do {
        CHECK(divvy_peek(h, kv, n_kv, &res));
        if (res.fast_path)
            return;
        harness_pause_ms(20);
    } while (harness_now_ms() < deadline);
    fail_msg("the fast path never answered: %s", divvy_errmsg(h));
}

/* ---- bare sockets ---------------------------------------------------------------- */

int harness_unix_fd(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd, r;

    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        r = -errno;
        close(fd);
        return r;
    }
    return fd;
}

int harness_tcp_fd_from(const char *src, int port)
{
    struct sockaddr_in from = { .sin_family = AF_INET }, to = { .sin_family = AF_INET };
    int fd, r;

    if (inet_pton(AF_INET, src, &from.sin_addr) != 1)
        return -EINVAL;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons((uint16_t)port);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0 ||
        connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0) {
        r = -errno;
        close(fd);
        return r;
    }
    return fd;
}
