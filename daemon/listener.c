/* SPDX-License-Identifier: MIT */
/*
 * listener: binds divvyd's listening sockets (see listener.h).  The protocol
 * listeners and the metrics endpoint share this code: one place parses the
 * address, replaces a stale Unix socket file and reports the name bound.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "addr.h"
#include "listener.h"
#include "proto.h"

static int listen_unix(const char *path, unsigned mode, int backlog, int *ret_fd)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd, probe, r;

    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (errno != EADDRINUSE) {
            r = -errno;
            goto fail;
        }
        /* A socket file nobody answers on is left over from a crash. */
        probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe < 0) {
            r = -errno;
            goto fail;
        }
        r = connect(probe, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
        close(probe);
        if (r != -ECONNREFUSED) {
            r = -EADDRINUSE;
            goto fail;
        }
        if (unlink(path) < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            r = -errno;
            goto fail;
        }
    }
    if (chmod(path, mode) < 0 || listen(fd, backlog) < 0) {
        r = -errno;
        unlink(path);
        goto fail;
    }
    *ret_fd = fd;
    return 0;
fail:
    close(fd);
    return r;
}

/* "HOST:PORT" (after "tcp:"); the name and port bound in *l. */
static int listen_tcp(const char *hostport, const struct listener_opts *o, int backlog,
                      struct listener *l)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char buf[300], hbuf[NI_MAXHOST], pbuf[NI_MAXSERV], name[400];
    const char *host, *port;
    int fd = -1, one = 1, zero = 0, r;

    r = addr_split_host_port(hostport, buf, sizeof(buf), &host, &port);
    if (r < 0)
        return r;
    r = getaddrinfo(*host ? host : NULL, port, &hints, &ai);
    if (r != 0)
        return r == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        r = -errno;
        goto out;
    }
    if (o->dual_stack && ai->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, backlog) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        r = -errno;
        goto out;
    }
    if (getnameinfo((struct sockaddr *)&ss, sl, hbuf, sizeof(hbuf), pbuf, sizeof(pbuf),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        r = -EADDRNOTAVAIL;
        goto out;
    }
    snprintf(name, sizeof(name), ss.ss_family == AF_INET6 ? "%s:[%s]:%s" : "%s:%s:%s",
             l->tls ? "tls" : "tcp", hbuf, pbuf);
    l->name = strdup(name);
    if (!l->name) {
        r = -ENOMEM;
        goto out;
    }
    l->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    l->fd = fd;
    fd = -1;
    r = 0;
out:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return r;
}

/* "resp:" before the name bound, as the address said it. */
static int listener_prefix_name(struct listener *l, const char *full, const char *addr)
{
    size_t n = (size_t)(addr - full), len = strlen(l->name);
    char *name = malloc(n + len + 1);

    if (!name)
        return -ENOMEM;
    memcpy(name, full, n);
    memcpy(name + n, l->name, len + 1);
    free(l->name);
    l->name = name;
    return 0;
}

int listener_open(const char *full, const struct listener_opts *o, struct listener *l)
{
    const char *addr;
    int backlog = o->backlog > 0 ? o->backlog : LISTENER_BACKLOG;
    int r;

    memset(l, 0, sizeof(*l));
    l->fd = -1;
    addr = config_listen_proto(full, &l->proto);
    if (strncmp(addr, "unix:", 5) == 0) {
        r = listen_unix(addr + 5, o->socket_mode, backlog, &l->fd);
        if (r < 0)
            goto out;
        l->is_unix = true;
        l->path = strdup(addr + 5);
        l->name = strdup(full);
        if (!l->path) {
            unlink(addr + 5);           /* listener_close() cannot: it has no path */
            r = -ENOMEM;
        } else if (!l->name) {
            r = -ENOMEM;
        }
    } else if (strncmp(addr, "tcp:", 4) == 0 || config_listen_is_tls(addr)) {
        l->tls = config_listen_is_tls(addr);
        r = listen_tcp(addr + 4, o, backlog, l);
        if (r >= 0 && addr != full)
            r = listener_prefix_name(l, full, addr);
    } else {
        r = -EINVAL;
    }
out:
    if (r < 0)
        listener_close(l);
    return r;
}

int listener_open_root(const struct listener *shared, struct listener *l)
{
    const struct listener_opts o = { .socket_mode = 0600 };
    char full[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
    int r;

    if (snprintf(full, sizeof(full), "%s%s", shared->name, PROTO_ROOT_SUFFIX) >=
        (int)sizeof(full))
        return -ENAMETOOLONG;
    r = listener_open(full, &o, l);
    if (r < 0)
        return r;
    l->root_only = true;
    return 0;
}

void listener_close(struct listener *l)
{
    if (l->fd >= 0)
        close(l->fd);
    if (l->path)
        unlink(l->path);
    free(l->path);
    free(l->name);
    memset(l, 0, sizeof(*l));
    l->fd = -1;
}
