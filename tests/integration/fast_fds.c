/* SPDX-License-Identifier: MIT */
/*
 * fast_fds: the FAST hand-over done by hand for tests of the fast path's
 * trust model (fast_fds.h): raw syscalls only, so usable in a child that
 * dropped privileges.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fast_fds.h"

/* Connects to the Unix socket @path, sends @req (a whole line) and reads
 * one reply line with its descriptors within @timeout_ms.  0 or -errno. */
int fast_fds_ask(const char *path, const char *req, int timeout_ms, struct fast_reply *ret)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t len = 0;
    int fd, r = 0;

    memset(ret, 0, sizeof(*ret));
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) {
        r = -errno;
        goto out;
    }
    while (!memchr(ret->line, '\n', len)) {
        union {
            char buf[CMSG_SPACE(FAST_FDS_MAX * sizeof(int))];
            struct cmsghdr align;
        } u;
        struct iovec iov = { .iov_base = ret->line + len,
                             .iov_len = sizeof(ret->line) - 1 - len };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                              .msg_controllen = sizeof(u.buf) };
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        ssize_t n;

        if (iov.iov_len == 0 || poll(&pfd, 1, timeout_ms) != 1) {
            r = -ETIMEDOUT;
            goto out;
        }
        n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        if (n <= 0) {
            r = n == 0 ? -ECONNRESET : -errno;
            goto out;
        }
        if (msg.msg_flags & MSG_CTRUNC)
            ret->ctrunc = 1;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
                if (ret->n_fds < FAST_FDS_MAX)
                    memcpy(&ret->fds[ret->n_fds++], CMSG_DATA(cm) + i * sizeof(int),
                           sizeof(int));
        }
        len += (size_t)n;
    }
    *(char *)memchr(ret->line, '\n', len) = '\0';
out:
    close(fd);
    return r;
}

/* FAST on @path: 0 with the table's and the control page's memfds. */
int fast_fds_get(const char *path, int *ret_table, int *ret_ctl)
{
    struct fast_reply rep;
    int r = fast_fds_ask(path, "FAST\n", 5000, &rep);

    if (r == 0 && (strncmp(rep.line, "OK fast ", 8) != 0 || rep.n_fds != 2))
        r = -EPROTO;
    if (r < 0) {
        for (int i = 0; i < rep.n_fds; i++)
            close(rep.fds[i]);
        return r;
    }
    *ret_table = rep.fds[0];
    *ret_ctl = rep.fds[1];
    return 0;
}
