/* SPDX-License-Identifier: MIT */
/*
 * listener: divvyd's listening sockets, the one place that binds them.  The
 * protocol listeners (srv.c: "unix:PATH", "tcp:HOST:PORT") and the metrics
 * endpoint (metrics_prom.c: "tcp:HOST:PORT") open theirs here.  A listener
 * owns its descriptor, its printable name and, for a Unix socket file it
 * created, the path it unlinks when closed.  Every descriptor is
 * non-blocking and close-on-exec.  No state, thread-safe.
 */
#ifndef DIVVY_LISTENER_H
#define DIVVY_LISTENER_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

#define LISTENER_BACKLOG 1024

struct conn_proto;

struct listener {
    int fd;                     /* -1: none */
    bool is_unix;
    enum config_proto proto;    /* what its connections speak (a "resp:" prefix, ...) */
    const struct conn_proto *ops;       /* ... as the transport reaches it (conn.h; srv.c) */
    int port;                   /* TCP: the port bound (the one chosen for port 0) */
    char *path;                 /* Unix socket file we created, unlinked at close */
    char *name;                 /* "tcp:127.0.0.1:8321" as bound, or "unix:PATH" */
    bool root_only;             /* PATH.root: privileged peers only, mode 0600 */
    bool tls;                   /* "tls:HOST:PORT": TCP with TLS (tls.h, docs/security.md) */
};

struct listener_opts {
    unsigned socket_mode;       /* Unix: the socket file's mode */
    int backlog;                /* listen(2)'s; 0: LISTENER_BACKLOG */
    bool dual_stack;            /* TCP on "[::]": serve IPv4 too (IPV6_V6ONLY off), as divvy's
                                 * node server does; otherwise the system's default */
};

/*
 * Binds and listens on @addr: "unix:PATH" (a stale socket file nobody
 * answers on is replaced; a live one is -EADDRINUSE) or "tcp:HOST:PORT" /
 * "tcp:[V6]:PORT" (numeric port; an empty host is every address), or
 * "tls:HOST:PORT" the same with l->tls set (conn.c does the TLS).  On
 * success *l owns the socket; on failure *l holds nothing (fd -1) and a
 * socket file it created is removed.  -EINVAL (neither prefix, no port),
 * -ENAMETOOLONG, -EADDRNOTAVAIL (the host does not resolve), -ENOMEM,
 * -errno of socket/bind/listen.
 */
int listener_open(const char *addr, const struct listener_opts *o, struct listener *l);

/* Closes the socket, unlinks the socket file it created and frees the
 * strings; *l holds nothing afterwards (fd -1).  Safe after a failed
 * listener_open() and on a listener already closed. */
void listener_close(struct listener *l);

/*
 * Opens the root socket of the line-protocol Unix listener @shared: its
 * path followed by PROTO_ROOT_SUFFIX, mode 0600, so that only root (and
 * divvyd's own user, which is refused) can connect and no unprivileged
 * connection ever waits in its accept queue (srv.c gives it to the admin
 * group too).  0, -ENAMETOOLONG, or listener_open()'s errors.
 */
int listener_open_root(const struct listener *shared, struct listener *l);

#endif
