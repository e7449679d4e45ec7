/* SPDX-License-Identifier: MIT */
/*
 * metrics_http: the Prometheus endpoint (see metrics_int.h): libmicrohttpd
 * on its own thread, serving metrics_prom_render()'s text at m->path,
 * /healthcheck (200 "OK" while divvyd serves, 503 once it is stopping:
 * docs/rls.md "Health"), and the account of its connections that keeps it
 * answering scrapes whatever other clients do (docs/operations.md
 * "Prometheus").
 *
 * libmicrohttpd's timeout is one of inactivity, so a client that sends a
 * header line a second keeps its connection forever, and its connection
 * limit then refuses everyone else.  So the endpoint keeps its own account
 * of the connections libmicrohttpd holds (its connection notifications) and
 * settles it each time a connection arrives, before that one is read
 * (metrics_http_admit()): it closes every connection that has waited more
 * than HTTP_REQUEST_MS for a complete request, then connections of the
 * newcomer's address beyond HTTP_PER_ADDRESS, then, while more than
 * HTTP_CONN_MAX remain, connections of the address that holds the most;
 * of those, connections still waiting for a request go before those being
 * answered, and the oldest first.  The newcomer itself always stays, and a
 * scraper sends its request with its connection, so whatever holds the
 * endpoint's connections, a scrape from an address holding few of them is
 * read and answered.  Room is needed only when a connection arrives, so no
 * timer runs.
 *
 * A connection is closed with shutdown(): libmicrohttpd reads the end of
 * the stream and frees it as it frees any other.  Every callback runs on
 * libmicrohttpd's one thread, so the account needs no lock, and a
 * connection leaves it (MHD_CONNECTION_NOTIFY_CLOSED) before libmicrohttpd
 * closes its socket: a shutdown() never reaches a reused descriptor.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "listener.h"
#include "log.h"
#include "metrics.h"
#include "metrics_int.h"
#include "notify.h"

#define HTTP_MHD_CONN_MAX   (4 * HTTP_CONN_MAX)    /* room for closed ones not yet freed */
#define HTTP_TIMEOUT_S      10                      /* libmicrohttpd's inactivity timeout */
#define HTTP_MEMORY         16384                   /* per connection: request and headers */
#define HTTP_BACKLOG        128
#define CONTENT_TYPE        "text/plain; version=0.0.4; charset=utf-8"
#define HEALTHCHECK_PATH    "/healthcheck"

static struct log_ratelimit rl_http, rl_closed;

/* ---- the account -------------------------------------------------------------------- */

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void metrics_http_addr(const struct sockaddr *sa, struct metrics_http_addr *ret)
{
    memset(ret, 0, sizeof(*ret));
    if (!sa)
        return;
    if (sa->sa_family == AF_INET) {
        ret->family = AF_INET;
        memcpy(ret->bytes, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

        /* A mapped IPv4 address is that address; IPv6 goes by its /64, the
         * least a host gets, so walking one's addresses gains nothing. */
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            ret->family = AF_INET;
            memcpy(ret->bytes, &a->s6_addr[12], 4);
        } else {
            ret->family = AF_INET6;
            memcpy(ret->bytes, a->s6_addr, 8);
        }
    }
}

static bool same_addr(const struct metrics_http_addr *a, const struct metrics_http_addr *b)
{
    return a->family == b->family && memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

void metrics_http_track(struct metrics_http_acct *a, struct metrics_http_conn *c)
{
    c->next = NULL;
    c->prev = a->tail;
    if (a->tail)
        a->tail->next = c;
    else
        a->head = c;
    a->tail = c;
    a->n++;
}

void metrics_http_untrack(struct metrics_http_acct *a, struct metrics_http_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        a->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        a->tail = c->prev;
    c->prev = c->next = NULL;
    if (!c->closing)
        a->n--;
}

/* Closes @c for @why: libmicrohttpd sees the end of its stream and frees it. */
static void acct_close(struct metrics_http_acct *a, struct metrics_http_conn *c,
                       enum metrics_http_close why)
{
    static const char *const names[METRICS_HTTP_N_CLOSE] = {
        "no complete request in time", "too many connections from its address",
        "too many connections",
    };

    c->closing = true;
    a->n--;
    a->closed[why]++;
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR);
    log_ratelimited(&rl_closed, LOG_WARNING, "metrics endpoint: closed a connection: %s",
                    names[why]);
}

/* Open (not closing) connections of @addr. */
static unsigned acct_count(const struct metrics_http_acct *a, const struct metrics_http_addr *addr)
{
    unsigned n = 0;

    for (const struct metrics_http_conn *c = a->head; c; c = c->next)
        n += !c->closing && same_addr(&c->addr, addr);
    return n;
}

/*
 * The connection to close next, other than @keep: of @addr's (NULL: of the
 * address that holds the most), one still waiting for its request before
 * one whose request is in (a scrape being answered), then the oldest.
 * NULL if none.
 */
static struct metrics_http_conn *acct_victim(const struct metrics_http_acct *a,
                                             const struct metrics_http_conn *keep,
                                             const struct metrics_http_addr *addr)
{
    struct metrics_http_conn *best = NULL;
    unsigned best_n = 0;

    for (struct metrics_http_conn *c = a->head; c; c = c->next) {
        unsigned n;

        if (c->closing || c == keep || (addr && !same_addr(&c->addr, addr)))
            continue;
        n = addr ? 1 : acct_count(a, &c->addr);
        /* In order of arrival: a later one wins only by more, or by waiting. */
        if (!best || n > best_n || (n == best_n && best->busy && !c->busy)) {
            best = c;
            best_n = n;
        }
    }
    return best;
}

void metrics_http_admit(struct metrics_http_acct *a, struct metrics_http_conn *fresh,
                        uint64_t now)
{
    struct metrics_http_conn *c, *next;

    for (c = a->head; c; c = next) {
        next = c->next;
        if (c != fresh && !c->closing && !c->busy && c->since_ms + HTTP_REQUEST_MS < now)
            acct_close(a, c, METRICS_HTTP_CLOSE_SLOW);
    }
    while (acct_count(a, &fresh->addr) > HTTP_PER_ADDRESS &&
           (c = acct_victim(a, fresh, &fresh->addr)) != NULL)
        acct_close(a, c, METRICS_HTTP_CLOSE_ADDRESS);
    while (a->n > HTTP_CONN_MAX && (c = acct_victim(a, fresh, NULL)) != NULL)
        acct_close(a, c, METRICS_HTTP_CLOSE_FULL);
}

/* ---- libmicrohttpd's callbacks ------------------------------------------------------ */

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct metrics *m = cls;
    struct metrics_http_conn *c = *socket_context;
    const union MHD_ConnectionInfo *info;

    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (c) {
            metrics_http_untrack(&m->http, c);
            free(c);
        }
        *socket_context = NULL;
        return;
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        return;                 /* served, but never closed early: memory is short anyway */
    info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    c->fd = info ? info->connect_fd : -1;
    info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    metrics_http_addr(info ? info->client_addr : NULL, &c->addr);
    c->since_ms = now_ms();
    metrics_http_track(&m->http, c);
    *socket_context = c;
    metrics_http_admit(&m->http, c, c->since_ms);
}

static struct metrics_http_conn *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return info ? info->socket_context : NULL;
}

/* A reply was sent (or the request failed): the connection waits for its next request. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct metrics_http_conn *c = conn_of(conn);

    (void)cls;
    (void)con_cls;
    (void)toe;
    if (c) {
        c->busy = false;
        c->since_ms = now_ms();
    }
}

static enum MHD_Result on_http(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload_data,
                               size_t *upload_data_size, void **con_cls)
{
    static char not_found[] = "not found\n", not_allowed[] = "method not allowed\n",
                failed[] = "out of memory\n", healthy[] = "OK", stopping[] = "stopping\n";
    struct metrics *m = cls;
    struct metrics_http_conn *c = conn_of(conn);
    struct MHD_Response *resp;
    unsigned status = MHD_HTTP_OK;
    char *body = NULL;
    size_t len = 0;
    enum MHD_Result ret;
    bool plain = false;

    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    if (c)
        c->busy = true;         /* its request is in: no longer a slow one */
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
        resp = MHD_create_response_from_buffer(strlen(not_allowed), not_allowed,
                                               MHD_RESPMEM_PERSISTENT);
        if (resp)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    } else if (strcmp(url, HEALTHCHECK_PATH) == 0 && strcmp(m->path, HEALTHCHECK_PATH) != 0) {
        /* envoyproxy/ratelimit's /healthcheck (docs/rls.md "Health"). */
        bool up = !notify_is_stopping();

        plain = true;
        status = up ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
        resp = MHD_create_response_from_buffer(up ? strlen(healthy) : strlen(stopping),
                                               up ? healthy : stopping, MHD_RESPMEM_PERSISTENT);
    } else if (strcmp(url, m->path) != 0) {
        status = MHD_HTTP_NOT_FOUND;
        resp = MHD_create_response_from_buffer(strlen(not_found), not_found,
                                               MHD_RESPMEM_PERSISTENT);
    } else if (metrics_prom_render(m, &body, &len) < 0) {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        resp = MHD_create_response_from_buffer(strlen(failed), failed, MHD_RESPMEM_PERSISTENT);
    } else {
        resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        if (resp)
            body = NULL;        /* the response frees it */
        else
            free(body);
    }
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            status == MHD_HTTP_OK && !plain ? CONTENT_TYPE
                                                            : "text/plain; charset=utf-8");
    ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    size_t len;

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    len = strlen(msg);
    while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == '\r'))
        msg[--len] = '\0';
    log_ratelimited(&rl_http, LOG_WARNING, "metrics endpoint: %s", msg);
}

/* ---- life cycle --------------------------------------------------------------------- */

int metrics_http_start(struct metrics *m, const char *address)
{
    struct listener_opts lo = { .backlog = HTTP_BACKLOG, .dual_stack = true };
    struct listener l = { .fd = -1 };
    sigset_t all, old;
    int r;

    r = strncmp(address, "tcp:", 4) == 0 ? listener_open(address, &lo, &l) : -EINVAL;
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "metrics: cannot listen on %s: %m", address);
        return r;
    }
    m->http_port = l.port;
    /* Its thread must not take the signals the main loop handles.  One
     * thread (no pool): every callback, and so the account, on it alone. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    m->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG,
                              0, NULL, NULL, on_http, m,
                              MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                              MHD_OPTION_LISTEN_SOCKET, (MHD_socket)l.fd,
                              MHD_OPTION_NOTIFY_CONNECTION, on_connection, m,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, m,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MHD_CONN_MAX,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S,
                              MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_MEMORY,
                              MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!m->mhd) {
        listener_close(&l);
        log_msg(LOG_ERR, "metrics: cannot start the HTTP endpoint on %s", address);
        return -ENOMEM;
    }
    l.fd = -1;                          /* libmicrohttpd's now: closed by MHD_stop_daemon() */
    listener_close(&l);
    log_msg(LOG_NOTICE, "metrics: Prometheus endpoint on %s (port %d), path %s", address,
            m->http_port, m->path);
    return 0;
}

int metrics_http_port(const struct metrics *m)
{
    return m && m->mhd ? m->http_port : 0;
}

void metrics_http_stop(struct metrics *m)
{
    struct metrics_http_conn *c;

    if (m->mhd)
        MHD_stop_daemon(m->mhd);       /* joins its thread and closes the socket */
    m->mhd = NULL;
    /* Its thread is gone: whatever it did not report closed is freed here. */
    while ((c = m->http.head) != NULL) {
        metrics_http_untrack(&m->http, c);
        free(c);
    }
}
