/* SPDX-License-Identifier: MIT */
/*
 * notify: sd_notify, the watchdog timer and socket activation for divvyd
 * and the fd store (see notify.h).  Everything goes through libsystemd
 * (sd_notify(3), sd_pid_notify_with_fds(3), sd_watchdog_enabled(3),
 * sd_listen_fds_with_names(3)); libsystemd is a no-op when the environment
 * names no service manager.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <systemd/sd-daemon.h>

#include "addr.h"
#include "log.h"
#include "notify.h"

#define STATUS_MAX 512

struct notify_watchdog {
    struct event *ev;
    bool (*alive)(void *userdata);
    void *userdata;
};

static struct log_ratelimit rl_stuck;

/* ---- sd_notify --------------------------------------------------------------- */

/* Sends @prefix (READY=1 or nothing) and a STATUS= value formatted from
 * @fmt: one line, newlines and other control bytes as spaces. */
static void send_status(const char *prefix, const char *fmt, va_list ap)
{
    char status[STATUS_MAX];

    vsnprintf(status, sizeof(status), fmt, ap);
    for (char *p = status; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    sd_notifyf(0, "%sSTATUS=%s", prefix, status);
}

void notify_ready(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    send_status("READY=1\n", fmt, ap);
    va_end(ap);
}

void notify_status(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    send_status("", fmt, ap);
    va_end(ap);
}

static bool notify_stopped;      /* notify_stopping() was called (atomic) */

void notify_stopping(void)
{
    __atomic_store_n(&notify_stopped, true, __ATOMIC_RELEASE);
    sd_notify(0, "STOPPING=1\nSTATUS=stopping");
}

bool notify_is_stopping(void)
{
    return __atomic_load_n(&notify_stopped, __ATOMIC_ACQUIRE);
}

void notify_watchdog_ping(void)
{
    sd_notify(0, "WATCHDOG=1");
}

/* An FDNAME= systemd accepts (fdname_is_valid()): 1..255 printable ASCII, no ':'. */
static bool fdname_valid(const char *name)
{
    size_t len = name ? strnlen(name, NOTIFY_NAME_MAX) : 0;

    if (len == 0 || len >= NOTIFY_NAME_MAX)
        return false;
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f || *p == ':')
            return false;
    return true;
}

int notify_fdstore(int fd, const char *name)
{
    char msg[sizeof("FDSTOREREMOVE=1\nFDNAME=") + NOTIFY_NAME_MAX];
    int r;

    if (fd < 0 || !fdname_valid(name))
        return -EINVAL;
    if (!getenv("NOTIFY_SOCKET"))
        return 0;
    /* The store keeps every fd sent under a name: drop the old one first. */
    snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s", name);
    r = sd_pid_notify(0, 0, msg);
    if (r < 0)
        return r;
    snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s", name);
    r = sd_pid_notify_with_fds(0, 0, msg, &fd, 1);
    return r < 0 ? r : 0;
}

uint64_t notify_watchdog_usec(void)
{
    uint64_t usec = 0;

    /* > 0: enabled for this process ($WATCHDOG_PID unset or ours). */
    if (sd_watchdog_enabled(0, &usec) <= 0)
        return 0;
    return usec;
}

/* ---- watchdog ---------------------------------------------------------------- */

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    struct notify_watchdog *wd = arg;

    (void)fd;
    (void)what;
    if (wd->alive && !wd->alive(wd->userdata)) {
        log_ratelimited(&rl_stuck, LOG_ERR,
                        "a worker thread is not responding: withholding the watchdog ping");
        return;
    }
    notify_watchdog_ping();
}

int notify_watchdog_new(struct event_base *base, bool (*alive)(void *userdata), void *userdata,
                        struct notify_watchdog **ret)
{
    struct notify_watchdog *wd = NULL;
    struct timeval tv;
    uint64_t usec = notify_watchdog_usec(), half;
    int r;

    if (!base)
        return -EINVAL;
    if (usec == 0) {
        *ret = NULL;
        return 0;
    }
    /* systemd's advice: ping at half the interval; never busier than 1 ms. */
    half = usec / 2 > 1000 ? usec / 2 : 1000;
    tv.tv_sec = (time_t)(half / 1000000);
    tv.tv_usec = (suseconds_t)(half % 1000000);
    wd = calloc(1, sizeof(*wd));
    if (!wd)
        return -ENOMEM;
    wd->alive = alive;
    wd->userdata = userdata;
    wd->ev = event_new(base, -1, EV_PERSIST, on_watchdog, wd);
    if (!wd->ev || event_add(wd->ev, &tv) < 0) {
        r = -ENOMEM;
        goto out;
    }
    /* The first ping now: startup may have used part of the interval. */
    notify_watchdog_ping();
    *ret = wd;
    wd = NULL;
    r = 0;
out:
    notify_watchdog_free(wd);
    return r;
}

void notify_watchdog_free(struct notify_watchdog *wd)
{
    if (!wd)
        return;
    if (wd->ev)
        event_free(wd->ev);
    free(wd);
}

/* ---- socket activation -------------------------------------------------------- */

static int sockaddr_name(const struct sockaddr_storage *ss, socklen_t sl, char *buf, size_t size)
{
    char host[NI_MAXHOST], port[NI_MAXSERV];
    int n;

    if (ss->ss_family == AF_UNIX) {
        const struct sockaddr_un *su = (const struct sockaddr_un *)ss;
        size_t len = sl > offsetof(struct sockaddr_un, sun_path)
                         ? sl - offsetof(struct sockaddr_un, sun_path) : 0;

        if (len > 0 && su->sun_path[0] == '\0')
            /* Abstract socket: shown as systemd shows it, with '@'. */
            n = snprintf(buf, size, "unix:@%.*s", (int)(len - 1), su->sun_path + 1);
        else
            n = snprintf(buf, size, "unix:%.*s", (int)strnlen(su->sun_path, len), su->sun_path);
    } else {
        if (getnameinfo((const struct sockaddr *)ss, sl, host, sizeof(host), port, sizeof(port),
                        NI_NUMERICHOST | NI_NUMERICSERV) != 0)
            return -EINVAL;
        n = snprintf(buf, size, ss->ss_family == AF_INET6 ? "tcp:[%s]:%s" : "tcp:%s:%s", host,
                     port);
    }
    return n > 0 && (size_t)n < size ? 0 : -ENAMETOOLONG;
}

static int adopt_fd(int fd, struct notify_listener *l)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int flags;

    if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) > 0)
        l->is_unix = true;
    else if (sd_is_socket_inet(fd, AF_UNSPEC, SOCK_STREAM, 1, 0) > 0)
        l->is_unix = false;
    else
        return -EINVAL;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
        return -errno;
    if (sockaddr_name(&ss, sl, l->address, sizeof(l->address)) < 0)
        return -EINVAL;
    /* systemd passes them blocking and inheritable; workers accept in a loop. */
    flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
        fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return -errno;
    l->fd = fd;
    return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);

    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/*
 * Whether fd @i (not a listening stream socket) came from the fd store: not
 * a socket, and named as only notify_fdstore() names (see notify.h).
 */
static bool is_stored(int fd, const char *name, const struct notify_listener *l, size_t n)
{
    if (sd_is_socket(fd, AF_UNSPEC, 0, -1) != 0)
        return false;               /* a socket (or an fd we cannot even fstat) */
    if (!fdname_valid(name) || strcmp(name, "unknown") == 0 || strcmp(name, "stored") == 0 ||
        ends_with(name, ".socket"))
        return false;
    for (size_t i = 0; i < n; i++)
        if (l[i].fd >= 0 && strcmp(l[i].name, name) == 0)
            return false;
    return true;
}

int notify_listen_fds(struct notify_listener **ret_listeners, size_t *ret_n_listeners,
                      struct notify_stored **ret_stored, size_t *ret_n_stored)
{
    struct notify_listener *l = NULL;
    struct notify_stored *st = NULL;
    size_t n_l = 0, n_st = 0;
    char **names = NULL;
    bool *listening = NULL;
    int n, r = 0;

    n = sd_listen_fds_with_names(1, &names);
    if (n < 0)
        return n;
    if (n > 0) {
        l = calloc((size_t)n, sizeof(*l));
        st = calloc((size_t)n, sizeof(*st));
        listening = calloc((size_t)n, sizeof(*listening));
        if (!l || !st || !listening) {
            r = -ENOMEM;
            goto out;
        }
    }
    /* Listening sockets first: a stored fd's name must not be one of theirs. */
    for (int i = 0; i < n; i++) {
        struct notify_listener *x = &l[n_l];

        x->fd = -1;
        if (adopt_fd(SD_LISTEN_FDS_START + i, x) < 0)
            continue;
        if (names && names[i] && strcmp(names[i], "unknown") != 0)
            snprintf(x->name, sizeof(x->name), "%s", names[i]);
        listening[i] = true;
        n_l++;
    }
    for (int i = 0; i < n; i++) {
        int fd = SD_LISTEN_FDS_START + i;
        const char *name = names && names[i] ? names[i] : "";

        if (listening[i])
            continue;
        if (!is_stored(fd, name, l, n_l)) {
            r = -EINVAL;
            goto out;
        }
        if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
            r = -errno;
            goto out;
        }
        st[n_st].fd = fd;
        snprintf(st[n_st].name, sizeof(st[n_st].name), "%s", name);
        n_st++;
    }
    if (n_l == 0) {
        free(l);
        l = NULL;
    }
    if (n_st == 0) {
        free(st);
        st = NULL;
    }
    *ret_listeners = l;
    *ret_n_listeners = n_l;
    *ret_stored = st;
    *ret_n_stored = n_st;
    l = NULL;                           /* the caller owns them now */
    st = NULL;
out:
    if (r < 0)
        /* An fd we cannot use must not linger half-open in the daemon. */
        for (int i = 0; i < n; i++)
            close(SD_LISTEN_FDS_START + i);
    free(l);
    free(st);
    free(listening);
    if (names) {
        for (char **p = names; *p; p++)
            free(*p);
        free(names);
    }
    return r;
}

void notify_listeners_free(struct notify_listener *l, size_t n)
{
    if (!l)
        return;
    for (size_t i = 0; i < n; i++)
        if (l[i].fd >= 0)
            close(l[i].fd);
    free(l);
}

void notify_stored_free(struct notify_stored *s, size_t n)
{
    if (!s)
        return;
    for (size_t i = 0; i < n; i++)
        if (s[i].fd >= 0)
            close(s[i].fd);
    free(s);
}

ssize_t notify_stored_find(const struct notify_stored *s, size_t n, const char *name)
{
    if (!s || !name)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (s[i].fd >= 0 && strcmp(s[i].name, name) == 0)
            return (ssize_t)i;
    return -1;
}

static bool same_inet(const struct sockaddr *a, const struct sockaddr_storage *b)
{
    if (a->sa_family != b->ss_family)
        return false;
    if (a->sa_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->sa_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

        return x->sin6_port == y->sin6_port &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return false;
}

ssize_t notify_listeners_find(const struct notify_listener *l, size_t n, const char *address)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    char buf[300];
    const char *host, *port;
    ssize_t found = -1;

    if (!l || n == 0 || !address)
        return -1;
    if (strncmp(address, "unix:", 5) == 0) {
        for (size_t i = 0; i < n; i++)
            if (l[i].fd >= 0 && l[i].is_unix && strcmp(l[i].address + 5, address + 5) == 0)
                return (ssize_t)i;
        return -1;
    }
    if (strncmp(address, "tcp:", 4) != 0 ||
        addr_split_host_port(address + 4, buf, sizeof(buf), &host, &port) < 0 ||
        getaddrinfo(*host ? host : NULL, port, &hints, &ai) != 0)
        return -1;
    for (size_t i = 0; i < n && found < 0; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);

        if (l[i].fd < 0 || l[i].is_unix ||
            getsockname(l[i].fd, (struct sockaddr *)&ss, &sl) < 0)
            continue;
        for (const struct addrinfo *a = ai; a; a = a->ai_next)
            if (same_inet(a->ai_addr, &ss))
                found = (ssize_t)i;
    }
    freeaddrinfo(ai);
    return found;
}
