/* SPDX-License-Identifier: MIT */
/*
 * client_handoff: libdivvy asks divvyd for the fast path.  One short
 * connection of its own (so the handle's request stream never carries
 * descriptors): "FAST\n", then one reply line read with recvmsg(), whose
 * SCM_RIGHTS message brings the table's memfd and the control page's
 * (docs/protocol.md FAST, docs/dev/shm.md "Memfds and seals").  divvyd decides
 * who gets them (SO_PEERCRED/SO_PEERGROUPS); this side only checks the
 * shape of what it got and closes anything unexpected.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_handoff.h"
#include "clock.h"

#define HANDOFF_FDS_MAX  8      /* descriptors one reply may carry before it is refused */

static void close_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Collects the descriptors of one received message into @fds. */
static int take_fds(struct msghdr *msg, int *fds, size_t *n_fds)
{
    int r = 0;

    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
        size_t n;

        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
            cm->cmsg_len < CMSG_LEN(0))
            continue;
        n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;

            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
            if (*n_fds < HANDOFF_FDS_MAX)
                fds[(*n_fds)++] = fd;
            else {
                close(fd);
                r = -EPROTO;
            }
        }
    }
    if (msg->msg_flags & MSG_CTRUNC)
        r = -EPROTO;
    return r;
}

/* Reads one reply line (without its newline) into @line, and its descriptors. */
static int read_reply(struct client_conn *c, int sock, uint64_t deadline, char *line, size_t size,
                      size_t *ret_len, int *fds, size_t *n_fds)
{
    size_t len = 0;
    int r = 0;

    for (;;) {
        union {
            char buf[CMSG_SPACE(HANDOFF_FDS_MAX * sizeof(int))];
            struct cmsghdr align;
        } u;
        struct iovec iov = { .iov_base = line + len, .iov_len = size - 1 - len };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                              .msg_controllen = sizeof(u.buf) };
        struct pollfd pfd = { .fd = sock, .events = POLLIN };
        char *nl;
        ssize_t n;

        n = poll(&pfd, 1, client_conn_remaining(deadline));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return client_err(c->err, n == 0 ? -ETIMEDOUT : -errno,
                              "no answer to FAST from divvyd within %d ms", c->request_ms);
        n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            return client_err(c->err, n == 0 ? -ECONNRESET : -errno,
                              "divvyd closed the connection before answering FAST");
        if (take_fds(&msg, fds, n_fds) < 0)
            r = -EPROTO;
        len += (size_t)n;
        nl = memchr(line, '\n', len);
        if (nl) {
            if ((size_t)(nl - line) + 1 != len)
                r = -EPROTO;            /* nothing may follow the one reply line */
            *ret_len = (size_t)(nl - line);
            break;
        }
        if (len + 1 >= size)
            return client_err(c->err, -EPROTO, "divvyd's answer to FAST is too long");
    }
    if (r < 0)
        return client_err(c->err, r, "divvyd's answer to FAST carries unexpected descriptors");
    return 0;
}

/* "OK fast DIR" or "OK fast \"DIR\"" into @dir; -EPROTO otherwise. */
static int parse_dir(const char *line, size_t len, char *dir, size_t dir_size)
{
    static const char head[] = "OK fast ";
    const char *p = line + sizeof(head) - 1;
    size_t n;

    if (len <= sizeof(head) - 1 || memcmp(line, head, sizeof(head) - 1) != 0)
        return -EPROTO;
    n = len - (sizeof(head) - 1);
    if (p[0] == '"') {
        if (n < 2 || p[n - 1] != '"')
            return -EPROTO;
        p++;
        n -= 2;
    }
    if (n == 0 || n >= dir_size || memchr(p, '\0', n))
        return -EPROTO;
    memcpy(dir, p, n);
    dir[n] = '\0';
    return 0;
}

int client_handoff_fast(struct client_conn *c, int *ret_table_fd, int *ret_ctl_fd, char *dir,
                        size_t dir_size)
{
    static const char req[] = "FAST\n";
    int fds[HANDOFF_FDS_MAX];
    size_t n_fds = 0, len = 0;
    char line[PROTO_LINE_MAX + 1];
    uint64_t deadline;
    int sock = -1, r;
    ssize_t n;

    if (c->addr.kind != CLIENT_ADDR_UNIX)
        return client_err(c->err, -EOPNOTSUPP, "the fast path needs a unix: address");
    r = client_conn_unix(c, &sock);
    if (r < 0)
        return r;
    deadline = clock_now_ms() + (uint64_t)c->request_ms;
    /* A fresh socket's buffer takes five bytes at once (SO_SNDTIMEO bounds it anyway). */
    do
        n = send(sock, req, sizeof(req) - 1, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(req) - 1) {
        r = client_err(c->err, n < 0 ? -errno : -EIO, "send FAST to divvyd: %s",
                       n < 0 ? strerror(errno) : "short write");
        goto out;
    }
    r = read_reply(c, sock, deadline, line, sizeof(line), &len, fds, &n_fds);
    if (r < 0)
        goto out;
    if (len >= 4 && memcmp(line, "ERR ", 4) == 0) {
        struct divvy_result res = { .size = sizeof(res) };

        r = client_reply_parse(line, len, &res, c->err->msg, sizeof(c->err->msg));
        if (r >= 0)
            r = -EPROTO;
        /* Not in the fast group: the fast path's "permission denied". */
        if (r == -EPERM)
            r = -EACCES;
        goto out;
    }
    r = parse_dir(line, len, dir, dir_size);
    if (r < 0 || n_fds != 2) {
        r = client_err(c->err, -EPROTO, "divvyd's answer to FAST is not \"OK fast DIR\" with two "
                       "descriptors (%zu)", n_fds);
        goto out;
    }
    *ret_table_fd = fds[0];
    *ret_ctl_fd = fds[1];
    n_fds = 0;
out:
    close_fds(fds, n_fds);
    if (sock >= 0)
        close(sock);
    return r;
}
