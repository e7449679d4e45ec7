/* SPDX-License-Identifier: MIT */
/*
 * srv: the server (see srv.h).  srv_new() binds the listeners (listener.h) and prepares the
 * workers (worker.h); srv_run() starts them and runs the main thread's loop
 * (signals, the 1 s maintenance tick: fast-table heartbeat, gauges for
 * metrics and systemd's STATUS=, the watchdog, table sweeps).  The main
 * thread owns signals and the tick; each worker owns an event_base, its
 * connections (conn.h) and its statistics.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <urcu/urcu-memb.h>

#include "admit.h"
#include "clock.h"
#include "conn.h"
#include "dlog_writer.h"
#include "eval.h"
#include "line.h"
#include "listener.h"
#include "log.h"
#include "memtrim.h"
#include "proto.h"
#include "resp_cmd.h"
#include "rls.h"
#include "srv.h"
#include "srv_int.h"
#include "store.h"
#include "tls.h"
#include "worker.h"
#include "worker_int.h"

#define SWEEP_EVERY_S     10

/* ---- server ---------------------------------------------------------------- */

/* The address systemd names a listen address's socket by: a "tls:" one is
 * its "tcp:" socket (TLS is ours, not the kernel's).  @buf holds it. */
static const char *srv_socket_addr(const char *listen, char *buf, size_t size,
                                   enum config_proto *ret_proto, bool *ret_tls)
{
    const char *a = config_listen_proto(listen, ret_proto);

    *ret_tls = config_listen_is_tls(a);
    if (!*ret_tls || (size_t)snprintf(buf, size, "tcp:%s", a + 4) >= size)
        return a;
    return buf;
}

/* The protocol server.listen gives the socket systemd passed as @nl ("resp:"
 * before its address, "tls:" for TLS); divvy's plain one when it is not listed. */
static enum config_proto srv_listen_proto(const struct srv_opts *o,
                                          const struct notify_listener *nl, bool *ret_tls)
{
    enum config_proto proto;
    char buf[512];

    for (size_t i = 0; i < o->n_listen; i++)
        if (notify_listeners_find(nl, 1, srv_socket_addr(o->listen[i], buf, sizeof(buf),
                                                         &proto, ret_tls)) == 0)
            return proto;
    *ret_tls = false;
    return CONFIG_PROTO_DIVVY;
}

/* A "tls:" listener needs a certificate (tls.h): divvyd does not start without. */
static int srv_check_tls(const struct srv *s)
{
    for (size_t i = 0; i < s->n_lis; i++) {
        if (s->lis[i].tls && (!s->o.tls || !tls_ready(s->o.tls))) {
            log_msg(LOG_ERR, "%s is a TLS listener but no certificate is configured "
                    "(server.tls, docs/security.md)", s->lis[i].name);
            return -EINVAL;
        }
    }
    return 0;
}

/* The front-end a listener's connections speak through (conn.h: the
 * transport reaches the protocol only through it). */
static const struct conn_proto *srv_proto_ops(enum config_proto proto)
{
    switch (proto) {
    case CONFIG_PROTO_RESP:
        return &resp_proto;
    case CONFIG_PROTO_RLS:
        return &rls_proto;
    default:
        return &line_proto;
    }
}

/*
 * Beside each line-protocol Unix socket, one only root and the admin group
 * can connect to (listener_open_root()): their connections, pam_divvy's
 * among them, then never queue behind an unprivileged peer's in the kernel's
 * accept queue (docs/daemon.md "The privileged lane").  Without it they are
 * served through the shared socket, so a failure is logged, not fatal.
 */
static void srv_root_sockets(struct srv *s)
{
    size_t n = s->n_lis;

    for (size_t i = 0; i < n; i++) {
        const struct listener *l = &s->lis[i];
        struct listener *root = &s->lis[s->n_lis];
        int r;

        if (!l->is_unix || l->proto != CONFIG_PROTO_DIVVY || strncmp(l->name, "unix:@", 6) == 0)
            continue;
        r = listener_open_root(l, &s->lis[s->n_lis]);
        if (r < 0) {
            errno = -r;
            log_msg(LOG_WARNING, "no root socket beside %s: %m; root is served on it", l->name);
            continue;
        }
        s->n_lis++;
        /* The admin group may connect too: divvyd must be a member to give
         * the socket to it (the unit's SupplementaryGroups=). */
        if (s->o.admin_gid != (gid_t)-1 && root->path &&
            (chown(root->path, (uid_t)-1, s->o.admin_gid) < 0 || chmod(root->path, 0660) < 0)) {
            log_msg(LOG_WARNING, "%s: cannot give it to the admin group: %m; only root may "
                    "use it", root->name);
        }
        log_msg(LOG_NOTICE, "listening on %s", root->name);
    }
}

int srv_new(const struct srv_opts *opts, struct srv **ret)
{
    struct listener_opts lo = { .socket_mode = opts->socket_mode };
    struct srv *s;
    int r;

    if (opts->workers == 0 || opts->n_listen + opts->n_inherited == 0)
        return -EINVAL;
    if (evthread_use_pthreads() < 0)
        return -ENOMEM;
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->o = *opts;
    /* Descriptors besides connections: listeners, Redis, metrics, epoll, ... */
    s->o.admit.fd_reserve = 64 + 16 * opts->workers +
                            (unsigned)(opts->n_listen + opts->n_inherited);
    r = admit_new(&s->o.admit, &s->admit);
    if (r >= 0)
        r = memtrim_new(&s->trim);
    if (r < 0)
        goto fail;
    /* Room for a root socket beside each listener (srv_root_sockets()). */
    s->lis = calloc(2 * (opts->n_listen + opts->n_inherited), sizeof(*s->lis));
    /* As many lane threads as workers: root's own traffic is not capped at
     * one core, and the lanes sleep while nothing privileged happens. */
    s->n_workers = 2 * opts->workers;
    s->workers = calloc(s->n_workers, sizeof(*s->workers));
    if (!s->lis || !s->workers) {
        r = -ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < opts->n_listen; i++) {
        enum config_proto proto;
        char buf[512];
        bool tls;

        /* systemd already holds it: adopted below. */
        if (notify_listeners_find(opts->inherited, opts->n_inherited,
                                  srv_socket_addr(opts->listen[i], buf, sizeof(buf), &proto,
                                                  &tls)) >= 0)
            continue;
        r = listener_open(opts->listen[i], &lo, &s->lis[s->n_lis]);
        s->n_lis++;
        if (r < 0) {
            errno = -r;
            log_msg(LOG_ERR, "cannot listen on %s: %m", opts->listen[i]);
            goto fail;
        }
        log_msg(LOG_NOTICE, "listening on %s", s->lis[s->n_lis - 1].name);
    }
    for (size_t i = 0; i < opts->n_inherited; i++) {
        struct listener *l = &s->lis[s->n_lis++];
        struct notify_listener *nl = &opts->inherited[i];

        /* No path: a socket systemd created is never unlinked by us. */
        l->proto = srv_listen_proto(opts, nl, &l->tls);    /* while nl holds its fd */
        l->fd = nl->fd;
        nl->fd = -1;
        l->is_unix = nl->is_unix;
        l->name = strdup(nl->address);
        if (!l->name) {
            r = -ENOMEM;
            goto fail;
        }
        log_msg(LOG_NOTICE, "listening on %s (socket activation%s%s)", l->name,
                nl->name[0] ? ", " : "", nl->name);
    }
    r = srv_check_tls(s);
    if (r < 0)
        goto fail;
    srv_root_sockets(s);
    for (size_t i = 0; i < s->n_lis; i++)
        s->lis[i].ops = srv_proto_ops(s->lis[i].proto);
    for (unsigned i = 0; i < s->n_workers; i++) {
        r = worker_init(s, &s->workers[i], i, i >= opts->workers);
        if (r < 0)
            goto fail;
    }
    s->started_ms = clock_now_ms();
    s->adhoc_saved_ms = s->started_ms;
    *ret = s;
    return 0;
fail:
    srv_free(s);
    return r;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct srv *s = arg;
    char err[DIAG_FILE_MAX + DIAG_MSG_MAX + 64];
    uint64_t gen;
    size_t n;

    (void)what;
    if (sig == SIGHUP) {
        reload_run(s->o.reload, "SIGHUP", &gen, &n, err, sizeof(err));
        return;
    }
    log_msg(LOG_NOTICE, "%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    notify_stopping();
    event_base_loopbreak(s->main_base);
}

/* What metrics cannot count itself: read in the main thread (an RCU reader). */
static void srv_gauges(struct srv *s, uint64_t now, struct metrics_gauges *g)
{
    const struct reload_state *st;

    memset(g, 0, sizeof(*g));
    admit_stats(s->admit, &g->admit);
    g->have_admit = true;
    g->connections = g->admit.tcp_conns + g->admit.unix_conns + g->admit.reserve_conns;
    urcu_memb_read_lock();
    st = reload_current(s->o.reload);
    g->config_generation = st->generation;
    g->rules = rules_count(st->rules);
    metrics_fast_rules(s->o.metrics, s->o.fast, st->rules, st->generation);
    urcu_memb_read_unlock();
    reload_counts(s->o.reload, &g->reloads_ok, &g->reloads_rejected);
    if (metrics_wants_tables(s->o.metrics)) {
        table_stats(s->o.fast, now, &g->fast);
        table_stats(s->o.priv, now, &g->priv);
        table_stats(s->o.privileged, now, &g->privileged);
    }
    g->have_fast_path_hits = true;
    g->fast_path_hits = table_fast_hits(s->o.fast);
    if (s->o.adhoc) {
        adhoc_stats(s->o.adhoc, &g->adhoc);
        g->have_adhoc = true;
    }
    if (s->o.dlog) {
        struct dlog_writer_stats ds;

        dlog_writer_stats(s->o.dlog, &ds);
        g->have_dlog = true;
        g->dlog_records = ds.records;
        g->dlog_dropped = ds.dropped;
        g->dlog_reports_dropped = ds.reports_dropped;
        g->dlog_bytes = ds.bytes;
        g->dlog_write_errors = ds.write_errors;
    }
    if (s->o.tls) {
        g->have_tls = true;
        g->tls_handshake_failures = tls_handshake_failures();
    }
    /* docs/dev/fast-report.md: fast-path clients' reports, with the log on. */
    if (s->o.dlog) {
        g->have_fast_reports = true;
        for (unsigned i = 0; i < s->n_workers; i++) {
            g->fast_reports += stat_get(&s->workers[i].st.reports);
            g->fast_reports_dropped += stat_get(&s->workers[i].st.reports_dropped);
        }
    }
}

/* Metrics' gauges and statsd, and systemd's STATUS= when it changed. */
static void publish(struct srv *s, uint64_t now)
{
    struct metrics_gauges g;
    char status[sizeof(s->status)];

    srv_gauges(s, now, &g);
    metrics_tick(s->o.metrics, &g, now);
    metrics_status_line(s->o.metrics, status, sizeof(status));
    if (strcmp(status, s->status) != 0) {
        notify_status("%s", status);
        memcpy(s->status, status, sizeof(status));
    }
}

/* The watchdog pings only while every worker answered the previous probe. */
static bool workers_alive(void *userdata)
{
    struct srv *s = userdata;
    bool alive = true;

    for (unsigned i = 0; i < s->n_workers; i++)
        if (__atomic_load_n(&s->workers[i].pong, __ATOMIC_ACQUIRE) != s->ping)
            alive = false;
    if (!alive)
        return false;
    __atomic_store_n(&s->ping, s->ping + 1, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < s->n_workers; i++)
        event_active(s->workers[i].ping_ev, EV_READ, 0);
    return true;
}

/* Saves the ad-hoc table (adhoc_save()), logging a failure. */
static void srv_adhoc_save(struct srv *s)
{
    int r;

    if (!s->o.adhoc || !s->o.adhoc_path)
        return;
    r = adhoc_save(s->o.adhoc, s->o.adhoc_path, (int64_t)(clock_unix_ns() / 1000000));
    if (r < 0) {
        errno = -r;
        log_msg(LOG_WARNING, "cannot save the ad-hoc buckets to %s: %m", s->o.adhoc_path);
    }
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct srv *s = arg;
    uint64_t now = clock_now_ms();
    static const uint64_t every = SWEEP_EVERY_S;
    uint64_t secs = (now - s->started_ms) / 1000;

    (void)fd;
    (void)what;
    table_heartbeat(s->o.fast, now);
    publish(s, now);
    /* What a flood of connections left in malloc's free lists goes back to
     * the kernel (docs/daemon.md "Memory after a flood"). */
    memtrim_tick(s->trim, memtrim_anon(s->trim), admit_held(s->admit));
    if (secs % every == 0) {
        table_sweep(s->o.fast, now);
        table_sweep(s->o.priv, now);
        table_sweep(s->o.privileged, now);
        if (s->o.adhoc)
            adhoc_sweep(s->o.adhoc, (int64_t)(clock_unix_ns() / 1000000));
    }
    /* A crash loses at most this much of the ad-hoc buckets (docs/resp.md). */
    if (s->o.adhoc && s->o.adhoc_path && s->o.adhoc_save_ms &&
        now - s->adhoc_saved_ms >= s->o.adhoc_save_ms) {
        s->adhoc_saved_ms = now;
        srv_adhoc_save(s);
    }
}

int srv_run(struct srv *s)
{
    struct event *sig_hup = NULL, *sig_term = NULL, *sig_int = NULL, *tick = NULL;
    struct notify_watchdog *wd = NULL;
    struct timeval one_s = { 1, 0 };
    sigset_t block, old;
    int r = 0;

    s->main_base = event_base_new();
    if (!s->main_base)
        return -ENOMEM;
    sig_hup = evsignal_new(s->main_base, SIGHUP, on_signal, s);
    sig_term = evsignal_new(s->main_base, SIGTERM, on_signal, s);
    sig_int = evsignal_new(s->main_base, SIGINT, on_signal, s);
    tick = event_new(s->main_base, -1, EV_PERSIST, on_tick, s);
    if (!sig_hup || !sig_term || !sig_int || !tick || event_add(sig_hup, NULL) < 0 ||
        event_add(sig_term, NULL) < 0 || event_add(sig_int, NULL) < 0 ||
        event_add(tick, &one_s) < 0) {
        r = -ENOMEM;
        goto out;
    }
    /* Workers never take the process signals: the main loop handles them. */
    sigemptyset(&block);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    for (unsigned i = 0; i < s->n_workers; i++) {
        r = -pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]);
        if (r < 0)
            break;
        s->workers[i].started = true;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "cannot start worker threads: %m");
    } else {
        log_msg(LOG_NOTICE, "ready: %u workers and as many privileged lane threads",
                s->o.workers);
        publish(s, clock_now_ms());
        notify_ready("%s", s->status);
        if (notify_watchdog_new(s->main_base, workers_alive, s, &wd) < 0)
            log_msg(LOG_ERR, "cannot start the watchdog timer: out of memory");
        event_base_dispatch(s->main_base);
    }
    for (unsigned i = 0; i < s->n_workers; i++)
        if (s->workers[i].started)
            event_active(s->workers[i].stop_ev, EV_READ, 0);
    for (unsigned i = 0; i < s->n_workers; i++)
        if (s->workers[i].started)
            pthread_join(s->workers[i].thread, NULL);
    /* Every worker has stopped: the buckets as the next start finds them. */
    srv_adhoc_save(s);
out:
    notify_watchdog_free(wd);
    if (sig_hup)
        event_free(sig_hup);
    if (sig_term)
        event_free(sig_term);
    if (sig_int)
        event_free(sig_int);
    if (tick)
        event_free(tick);
    return r;
}

void srv_free(struct srv *s)
{
    if (!s)
        return;
    if (s->workers)
        for (unsigned i = 0; i < s->n_workers; i++)
            worker_fini(&s->workers[i]);
    free(s->workers);
    for (size_t i = 0; s->lis && i < s->n_lis; i++)
        listener_close(&s->lis[i]);
    free(s->lis);
    if (s->main_base)
        event_base_free(s->main_base);
    memtrim_free(s->trim);
    admit_free(s->admit);
    free(s);
}
