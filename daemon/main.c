/* SPDX-License-Identifier: MIT */
/*
 * divvyd: command line, startup and shutdown.  Loads and compiles the
 * config, opens (or reattaches to) the counter tables in the state
 * directory, binds the listeners and runs the server in the foreground until
 * SIGTERM/SIGINT.  The only place in divvy that may end the process.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <linux/magic.h>

#include <urcu/urcu-memb.h>

#include "clock.h"
#include "adhoc.h"
#include "config.h"
#include "dlog_writer.h"
#include "fastfd.h"
#include "fastrules.h"
#include "lock.h"
#include "log.h"
#include "memtrim.h"
#include "metrics.h"
#include "notify.h"
#include "reload.h"
#include "resp_auth.h"
#include "srv.h"
#include "store.h"
#include "table.h"
#include "tls.h"

#define DEFAULT_CONFIG "/etc/divvy/divvy.conf"
#define MAX_LISTEN     65          /* the config allows 64, plus $PORT */

static const char usage_text[] =
    "Usage: divvyd [OPTION]...\n"
    "Serve divvy quota and rate-limit decisions (Button divvy protocol v1) on TCP\n"
    "and a Unix socket, in the foreground.\n"
    "\n"
    "  -c, --config=FILE     rules and settings (default " DEFAULT_CONFIG ");\n"
    "                        FILE.ini and FILE.json are read as divvy INI/JSON,\n"
    "                        anything else as libconfig (divvy.conf)\n"
    "  -l, --listen=ADDR     listen on ADDR: unix:PATH or tcp:HOST:PORT (tls:HOST:PORT\n"
    "                        for TLS, with the config's server.tls), resp: before\n"
    "                        either for the Redis protocol, rls: for Envoy's rate limit\n"
    "                        service (repeatable; replaces the config's server.listen)\n"
    "  -s, --state-dir=DIR   counter tables live here (default: the config's\n"
    "                        server.state_dir, else " CONFIG_DEFAULT_STATE_DIR ")\n"
    "  -w, --workers=N       worker threads (default: the config's, else one per CPU),\n"
    "                        and as many privileged lane threads for root and admins\n"
    "      --syslog          log to syslog (LOG_DAEMON) instead of stderr\n"
    "  -d, --debug           log debug messages too\n"
    "      --check           validate the config, print every problem as\n"
    "                        FILE:LINE: reason, exit 0 if valid, 1 if not\n"
    "  -V, --version         print the version and exit\n"
    "  -h, --help            print this help and exit\n"
    "\n"
    "Signals: SIGHUP reloads the config (a rejected config keeps the running\n"
    "rules and logs why); SIGTERM and SIGINT stop accepting, answer what is in\n"
    "flight and exit 0.  Counters survive a restart: they live in the state\n"
    "directory, not in the process.\n"
    "\n"
    "Exit status: 0 clean stop or valid config, 1 invalid config or startup\n"
    "failure, 2 usage error.\n"
    "Manual: divvyd(8), divvy.conf(5) and divvyctl(8) (`man divvyd`); they name the\n"
    "guides installed with them (protocol, rules, operations).\n";

struct args {
    const char *config;
    const char *listen[MAX_LISTEN];
    size_t n_listen;
    const char *state_dir;
    unsigned workers;
    bool check;
    bool syslog;
    bool debug;
};

static int parse_args(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "listen", required_argument, NULL, 'l' },
        { "state-dir", required_argument, NULL, 's' },
        { "workers", required_argument, NULL, 'w' },
        { "syslog", no_argument, NULL, 'S' },
        { "debug", no_argument, NULL, 'd' },
        { "check", no_argument, NULL, 'C' },
        { "version", no_argument, NULL, 'V' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    enum config_proto proto;
    const char *rest;
    char *end;
    long v;
    int c;

    a->config = DEFAULT_CONFIG;
    while ((c = getopt_long(argc, argv, "c:l:s:w:dVh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            a->config = optarg;
            break;
        case 'l':
            rest = config_listen_proto(optarg, &proto);
            if (strncmp(rest, "unix:", 5) != 0 && strncmp(rest, "tcp:", 4) != 0 &&
                !config_listen_is_tls(rest)) {
                fprintf(stderr, "divvyd: --listen %s: expected [resp:|rls:]unix:PATH or "
                        "[resp:|rls:]tcp:HOST:PORT or [resp:|rls:]tls:HOST:PORT\n", optarg);
                return -EINVAL;
            }
            if (a->n_listen == MAX_LISTEN) {
                fprintf(stderr, "divvyd: at most %d --listen addresses\n", MAX_LISTEN);
                return -EINVAL;
            }
            a->listen[a->n_listen++] = optarg;
            break;
        case 's':
            a->state_dir = optarg;
            break;
        case 'w':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno || *end || v < 1 || v > 1024) {
                fprintf(stderr, "divvyd: --workers %s: expected 1..1024\n", optarg);
                return -EINVAL;
            }
            a->workers = (unsigned)v;
            break;
        case 'S':
            a->syslog = true;
            break;
        case 'd':
            a->debug = true;
            break;
        case 'C':
            a->check = true;
            break;
        case 'V':
            printf("divvyd %s\n", DIVVY_VERSION);
            exit(0);
        case 'h':
            fputs(usage_text, stdout);
            exit(0);
        default:
            fputs("Try 'divvyd --help' for more information.\n", stderr);
            return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "divvyd: unexpected argument '%s'\n"
                        "Try 'divvyd --help' for more information.\n", argv[optind]);
        return -EINVAL;
    }
    return 0;
}

/*
 * Button divvy's environment (docs/operations.md): PORT replaces the TCP
 * listeners with tcp:0.0.0.0:$PORT, as divvy listens on every interface
 * (a --listen tcp: address wins over it; --listen unix: addresses are kept);
 * REDIS_HOST and REDIS_PORT replace redis.host and redis.port.  @listen gets
 * the addresses to use (from --listen, else the config).  Returns 0, or
 * -EINVAL after saying which variable is bad.
 */
/*
 * --listen replaces server.listen: says so when it leaves out an address
 * the config (or its defaults) listens on, naming them, so that a resp: or
 * rls: listener added to the config is not missing in silence (`make run`
 * passes --listen).  At most about 400 bytes of addresses, then "...".
 */
static void log_listen_override(const struct config *cfg, const struct args *a)
{
    char left[480];
    size_t len = 0, n = 0;

    if (a->n_listen == 0)
        return;
    left[0] = '\0';
    for (size_t i = 0; i < cfg->n_listen; i++) {
        bool kept = false;

        for (size_t j = 0; j < a->n_listen && !kept; j++)
            kept = strcmp(cfg->listen[i], a->listen[j]) == 0;
        if (kept)
            continue;
        if (len < 400)
            len += (size_t)snprintf(left + len, sizeof(left) - len, "%s%s", n ? ", " : "",
                                    cfg->listen[i]);
        else if (len < sizeof(left) - 6)
            len += (size_t)snprintf(left + len, sizeof(left) - len, ", ...");
        n++;
    }
    if (n)
        log_msg(LOG_NOTICE, "--listen replaces the %zu listener(s) of %s (server.listen or its "
                "default): not listening on %s", cfg->n_listen, a->config, left);
}

static int apply_divvy_env(struct config *cfg, const struct args *a, char *port_listen,
                           size_t size, const char **listen, size_t *n_listen)
{
    const char *const *base = a->n_listen ? a->listen : (const char *const *)cfg->listen;
    size_t n_base = a->n_listen ? a->n_listen : cfg->n_listen;
    bool cli_tcp = false;
    const char *v;
    char *end;
    long port;

    *n_listen = 0;
    for (size_t i = 0; i < a->n_listen; i++)
        cli_tcp |= strncmp(a->listen[i], "tcp:", 4) == 0;
    v = getenv("PORT");
    if (v && *v) {
        port = strtol(v, &end, 10);
        if (*end || port < 1 || port > 65535) {
            fprintf(stderr, "divvyd: PORT=%s: expected a port 1..65535\n", v);
            return -EINVAL;
        }
        snprintf(port_listen, size, "tcp:0.0.0.0:%ld", port);
        if (cli_tcp)
            log_msg(LOG_INFO, "PORT=%s ignored: --listen names a TCP address", v);
        else
            log_msg(LOG_INFO, "PORT=%s from the environment: listening on %s", v, port_listen);
    }
    for (size_t i = 0; i < n_base && *n_listen < MAX_LISTEN - 1; i++)
        if (!v || !*v || cli_tcp || strncmp(base[i], "tcp:", 4) != 0)
            listen[(*n_listen)++] = base[i];
    if (v && *v && !cli_tcp)
        listen[(*n_listen)++] = port_listen;

    /* With Sentinel the master's address is the sentinels' to give: an
     * address from the environment would be ignored, so it is refused. */
    for (const char *const *e = (const char *const[]){ "REDIS_HOST", "REDIS_PORT", NULL }; *e;
         e++) {
        v = getenv(*e);
        if (v && *v && cfg->redis.n_sentinels) {
            fprintf(stderr, "divvyd: %s=%s cannot be used with redis.sentinels in %s: the "
                            "sentinels say where the master is; unset it\n", *e, v, cfg->path);
            return -EINVAL;
        }
        if (v && *v && cfg->redis.n_cluster_nodes) {
            fprintf(stderr, "divvyd: %s=%s cannot be used with redis.cluster_nodes in %s: the "
                            "cluster's slot map says where each key is; unset it\n", *e, v,
                    cfg->path);
            return -EINVAL;
        }
    }
    v = getenv("REDIS_HOST");
    if (v && *v) {
        char *host = strdup(v);

        if (!host)
            return -ENOMEM;
        free(cfg->redis.host);
        cfg->redis.host = host;
        log_msg(LOG_INFO, "REDIS_HOST=%s from the environment", v);
    }
    v = getenv("REDIS_PORT");
    if (v && *v) {
        port = strtol(v, &end, 10);
        if (*end || port < 1 || port > 65535) {
            fprintf(stderr, "divvyd: REDIS_PORT=%s: expected a port 1..65535\n", v);
            return -EINVAL;
        }
        cfg->redis.port = (unsigned)port;
        log_msg(LOG_INFO, "REDIS_PORT=%s from the environment", v);
    }
    return 0;
}

/* A config's problems on stderr, one FILE:LINE: reason each.  --check prints
 * them bare, as compilers and `divvyctl check` do, for editors and scripts
 * that parse FILE:LINE:; a start prefixes them like every other log line. */
static void print_diag(const struct diag *d, const char *path, int r, bool check)
{
    const char *prefix = check ? "" : "divvyd: ";
    char line[DIAG_FILE_MAX + DIAG_MSG_MAX + 32];

    if (d->n == 0) {
        fprintf(stderr, "%s%s: %s\n", prefix, path, strerror(-r));
        return;
    }
    for (size_t i = 0; i < d->n; i++) {
        diag_format(d, i, line, sizeof(line));
        fprintf(stderr, "%s%s\n", prefix, line);
    }
    if (d->dropped)
        fprintf(stderr, "%s%s: ... and %zu more problem%s\n", prefix, path, d->dropped,
                d->dropped == 1 ? "" : "s");
}

static const char *on_error_name(enum config_redis_error e)
{
    return e == CONFIG_REDIS_ERROR_OPEN ? "open" : e == CONFIG_REDIS_ERROR_CLOSED ? "closed"
                                                                                   : "local";
}

/* *ret_new: the file did not exist before (a failed start removes it again). */
/*
 * The tables are memory that is never meant to reach a disk.  On a disk
 * filesystem the kernel writes them back every few seconds, and each page
 * written back is write-protected again, so the next hit on it takes a page
 * fault: say so once at start (docs/operations.md "State directory").
 */
static void check_state_fs(const char *dir)
{
    struct statfs sf;

    if (statfs(dir, &sf) < 0) {
        log_msg(LOG_WARNING, "cannot tell the filesystem of state directory %s: %m", dir);
        return;
    }
    if (sf.f_type != TMPFS_MAGIC && sf.f_type != RAMFS_MAGIC)
        log_msg(LOG_WARNING,
                "state directory %s is not on a tmpfs: the kernel writes the counter tables "
                "back to disk, and hits fault on pages written back; use a tmpfs such as /run",
                dir);
}

static int open_table(const char *dir, const char *name, uint32_t slots, unsigned mode,
                      struct table **ret, bool *ret_new)
{
    struct table_open_info info = { 0 };
    char path[PATH_MAX];
    int r;

    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
        return -ENAMETOOLONG;
    r = table_open(path, slots, mode, ret, &info);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "cannot open counter table %s: %m", path);
        return r;
    }
    *ret_new = info.created && !info.rebuilt;
    if (info.rebuilt)
        log_msg(LOG_WARNING, "counter table %s rebuilt, counts start afresh: %s", path,
                info.reason);
    else
        log_msg(LOG_INFO, "counter table %s %s (%u slots)", path,
                info.created ? "created" : "reattached, counts kept", table_slots(*ret));
    return 0;
}

/*
 * The Redis store (docs/redis.md), always made from the redis { } settings
 * (or their defaults); it connects only once some rule needs it.  The
 * redis and store settings other than store.mode are read here, at start.
 */
/* store_opts.on_breaker: each Redis node's breaker in the metrics. */
static void on_breaker(void *arg, const char *node, bool open)
{
    metrics_redis_breaker(arg, node, open);
}

static int make_store(const struct config *cfg, struct reload *rl, struct metrics *metrics,
                      struct store **ret)
{
    struct store_opts o = {
        .host = cfg->redis.host, .port = cfg->redis.port, .unix_socket = cfg->redis.unix_socket,
        .username = cfg->redis.username, .password = cfg->redis.password, .db = cfg->redis.db,
        .timeout_ms = cfg->redis.timeout_ms, .prefix = cfg->store_prefix,
        .sentinels = (const char *const *)cfg->redis.sentinels,
        .n_sentinels = (unsigned)cfg->redis.n_sentinels, .master_name = cfg->redis.master_name,
        .sentinel_password = cfg->redis.sentinel_password,
        .cluster_nodes = (const char *const *)cfg->redis.cluster_nodes,
        .n_cluster_nodes = (unsigned)cfg->redis.n_cluster_nodes,
        .on_breaker = on_breaker, .arg = metrics,
    };
    bool wanted;
    int r;

    r = store_new(&o, ret);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "cannot set up the Redis store: %m");
        return r;
    }
    urcu_memb_read_lock();
    wanted = rules_uses_store(reload_current(rl)->rules);
    urcu_memb_read_unlock();
    if (wanted) {
        store_want(*ret);
        if (cfg->redis.n_cluster_nodes)
            log_msg(LOG_NOTICE, "redis: cluster from %zu seed%s (first %s), timeout %u ms, "
                    "on_redis_error %s", cfg->redis.n_cluster_nodes,
                    cfg->redis.n_cluster_nodes == 1 ? "" : "s", cfg->redis.cluster_nodes[0],
                    cfg->redis.timeout_ms, on_error_name(cfg->on_redis_error));
        else if (cfg->redis.n_sentinels)
            log_msg(LOG_NOTICE, "redis: master %s from %zu sentinel%s (first %s), timeout %u ms, "
                    "on_redis_error %s", cfg->redis.master_name, cfg->redis.n_sentinels,
                    cfg->redis.n_sentinels == 1 ? "" : "s", cfg->redis.sentinels[0],
                    cfg->redis.timeout_ms, on_error_name(cfg->on_redis_error));
        else if (cfg->redis.unix_socket)
            log_msg(LOG_NOTICE, "redis: unix:%s, timeout %u ms, on_redis_error %s",
                    cfg->redis.unix_socket, cfg->redis.timeout_ms,
                    on_error_name(cfg->on_redis_error));
        else
            log_msg(LOG_NOTICE, "redis: %s:%u, timeout %u ms, on_redis_error %s",
                    cfg->redis.host, cfg->redis.port, cfg->redis.timeout_ms,
                    on_error_name(cfg->on_redis_error));
    }
    return 0;
}

/*
 * RESP's ad-hoc bucket table, with the buckets the last divvyd saved in
 * @state_dir (docs/resp.md "Ad-hoc buckets"); its file's path into @path.
 * A file that cannot be read is logged and left: the buckets start afresh.
 */
static int make_adhoc(const struct config *cfg, const char *state_dir, char *path, size_t size,
                      struct adhoc **ret)
{
    struct adhoc_opts ao = { .slots = cfg->adhoc_slots, .max_buckets = cfg->adhoc_max_buckets,
                             .reserved = cfg->adhoc_reserved_buckets,
                             .per_peer = cfg->adhoc_buckets_per_peer };
    int r;

    if ((size_t)snprintf(path, size, "%s/adhoc.buckets", state_dir) >= size)
        return -ENAMETOOLONG;
    r = adhoc_new(&ao, ret);
    if (r < 0) {
        log_msg(LOG_ERR, "out of memory for %u ad-hoc buckets", cfg->adhoc_slots);
        return r;
    }
    r = adhoc_load(*ret, path, (int64_t)(clock_unix_ns() / 1000000));
    if (r >= 0) {
        log_msg(LOG_INFO, "ad-hoc buckets: %d restored from %s", r, path);
    } else if (r != -ENOENT) {
        errno = -r;
        log_msg(LOG_WARNING, "ad-hoc buckets start afresh: cannot restore %s: %m", path);
    }
    return 0;
}

/* --check: server.tls's files as a start would read them. */
static int check_tls(const struct config *cfg, struct diag *diag)
{
    char err[TLS_ERR_MAX];
    struct tls_ctx *x = NULL;
    int r = tls_prepare(&cfg->tls, &x, err, sizeof(err));

    if (r < 0)
        diag_set(diag, cfg->path, cfg->tls.line, "%s", err);
    tls_ctx_free(x);
    return r;
}

/* The "tls:" listeners' certificate (server.tls, docs/security.md), read
 * now and at every reload; none without server.tls (srv.c then refuses a
 * "tls:" listener). */
static int make_tls(const struct config *cfg, struct reload *rl, struct tls **ret)
{
    char err[TLS_ERR_MAX];
    struct tls_ctx *x = NULL;
    struct tls *t;
    int r;

    if (!cfg->tls.line)
        return 0;
    r = tls_prepare(&cfg->tls, &x, err, sizeof(err));
    if (r < 0) {
        log_msg(LOG_ERR, "not starting: %s:%u: %s", cfg->path, cfg->tls.line, err);
        return r;
    }
    t = tls_new();
    if (!t) {
        tls_ctx_free(x);
        log_msg(LOG_ERR, "not starting: out of memory");
        return -ENOMEM;
    }
    tls_install(t, x);
    reload_set_tls(rl, t);
    *ret = t;
    return 0;
}

int main(int argc, char **argv)
{
    struct args a = { 0 };
    struct diag *diag = NULL;
    struct config *cfg = NULL;
    struct rules *rules = NULL;
    struct reload *rl = NULL;
    struct table *fast = NULL, *priv = NULL, *prv = NULL;
    struct fastfd_opts fo = { 0 };
    struct fastfd *ff = NULL;
    struct adhoc *adhoc = NULL;
    char adhoc_path[PATH_MAX];
    ssize_t sidx;
    struct srv *srv = NULL;
    struct srv_opts so = { 0 };
    struct tls *tls = NULL;
    struct dlog_writer *dlog = NULL;
    struct store *store = NULL;
    struct metrics_opts mo = { 0 };
    struct metrics *metrics = NULL;
    struct notify_listener *inherited = NULL;
    size_t n_inherited = 0;
    struct notify_stored *stored = NULL;
    size_t n_stored = 0;
    const char *env_listen[MAX_LISTEN];
    size_t n_env_listen = 0;
    char port_listen[32];
    const char *state_dir = NULL;
    struct lock lock = { .fd = -1 };
    pid_t holder = 0;
    struct group *gr;
    long ncpu;
    int r, status = 1;
    /* What this start created; removed again if it fails before serving. */
    bool made_dir = false, priv_new = false, prv_new = false, serving = false;

    if (parse_args(argc, argv, &a) < 0)
        return 2;
    log_init(a.syslog ? LOG_TARGET_SYSLOG : LOG_TARGET_STDERR, a.debug);
    signal(SIGPIPE, SIG_IGN);
    memtrim_init();

    diag = malloc(sizeof(*diag));
    if (!diag) {
        fprintf(stderr, "divvyd: out of memory\n");
        return 1;
    }
    diag_init(diag);
    r = config_load(a.config, &cfg, diag);
    if (r >= 0 && a.check)
        r = rules_compile(&cfg->rules, 0, &rules, diag);
    if (r >= 0 && a.check && cfg->tls.line)
        r = check_tls(cfg, diag);
    if (r < 0) {
        print_diag(diag, a.config, r, a.check);
        if (!a.check)
            fprintf(stderr, "divvyd: not starting: %s is invalid\n", a.config);
        goto out;
    }
    if (a.check) {
        printf("%s: OK, %zu rules\n", a.config, rules_count(rules));
        /* What a start would log as warnings (config_fleet_notes()), as divvyctl check. */
        diag_init(diag);
        config_fleet_notes(cfg, rules, diag);
        for (size_t i = 0; i < diag->n; i++) {
            char line[DIAG_FILE_MAX + DIAG_MSG_MAX + 32];

            diag_format_as(diag, i, "warning: ", line, sizeof(line));
            printf("%s\n", line);
        }
        status = 0;
        goto out;
    }

    state_dir = a.state_dir ? a.state_dir : cfg->state_dir ? cfg->state_dir
                                                           : CONFIG_DEFAULT_STATE_DIR;
    if (mkdir(state_dir, 0755) == 0) {
        made_dir = true;
    } else if (errno != EEXIST) {
        log_msg(LOG_ERR, "cannot create state directory %s: %m", state_dir);
        goto out;
    }
    /* One divvyd per state directory: before the tables are touched. */
    r = lock_take(state_dir, &lock, &holder);
    if (r == -EBUSY) {
        if (holder > 0)
            log_msg(LOG_ERR, "state directory %s is in use by divvyd (pid %ld)", state_dir,
                    (long)holder);
        else
            log_msg(LOG_ERR, "state directory %s is in use by another divvyd", state_dir);
        goto out;
    }
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "cannot lock state directory: %s: %m", lock.path);
        goto out;
    }
    /* Sockets systemd passed (divvyd.socket), and fds from its fd store;
     * before any thread starts.  A stored fd nobody adopts is closed. */
    r = notify_listen_fds(&inherited, &n_inherited, &stored, &n_stored);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "socket activation: %m");
        goto out;
    }
    fo.state_dir = state_dir;
    fo.slots = cfg->fast_table_slots;
    fo.group = cfg->fast_group;
    fo.snapshot_ms = cfg->snapshot_interval_ms;
    fo.stored_fd = -1;
    sidx = notify_stored_find(stored, n_stored, FASTFD_STORE_NAME);
    if (sidx >= 0) {
        fo.stored_fd = stored[sidx].fd;
        stored[sidx].fd = -1;           /* fastfd_open() adopts or closes it */
    }
    if (fastfd_open(&fo, &ff) < 0 ||
        open_table(state_dir, "private.table", cfg->table_slots, 0600, &priv, &priv_new) < 0 ||
        open_table(state_dir, "privileged.table", cfg->privileged_table_slots, 0600, &prv,
                   &prv_new) < 0)
        goto out;
    fast = fastfd_table(ff);
    /* The store keeps a copy across restarts and crashes (docs/operations.md). */
    r = notify_fdstore(table_fd(fast), FASTFD_STORE_NAME);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_WARNING, "cannot put the fast-path table in the fd store: %m");
    }
    check_state_fs(state_dir);

    /* Before any rules are published: fast-path clients read it at each remap. */
    table_set_lease_max(fast, cfg->lease_max < TABLE_LEASE_MAX ? cfg->lease_max : TABLE_LEASE_MAX);
    table_set_when_full(fast, cfg->when_full == CONFIG_FULL_ALLOW);
    urcu_memb_register_thread();
    r = reload_new(a.config, cfg, state_dir, fast, &rl, diag);
    if (r < 0) {
        /* Without a diagnostic the config was fine: the cause is logged. */
        if (diag->n > 0) {
            print_diag(diag, a.config, r, false);
        } else {
            errno = -r;
            log_msg(LOG_ERR, "not starting: %m");
        }
        goto out_rcu;
    }
    if (resp_auth_set(cfg->resp_password) < 0) {
        log_msg(LOG_ERR, "not starting: out of memory");
        goto out_rcu;
    }
    if (cfg->resp_password)
        log_msg(LOG_NOTICE, "resp: clients must authenticate (server.resp_password_file %s)",
                cfg->resp_password_file);
    /* Counters of rules whose table changed since the last run move now. */
    r = reload_set_tables(rl, &(struct tables){ .fast = fast, .priv = priv, .privileged = prv });
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "not starting: %m");
        goto out_rcu;
    }

    log_listen_override(cfg, &a);
    if (apply_divvy_env(cfg, &a, port_listen, sizeof(port_listen), env_listen,
                        &n_env_listen) < 0)
        goto out_rcu;
    so.listen = (char **)env_listen;
    so.n_listen = n_env_listen;
    /* RESP's ad-hoc buckets (docs/resp.md): their own memory, only with a RESP listener. */
    for (size_t i = 0; i < n_env_listen && !adhoc; i++) {
        enum config_proto proto;

        config_listen_proto(env_listen[i], &proto);
        if (proto == CONFIG_PROTO_RESP &&
            make_adhoc(cfg, state_dir, adhoc_path, sizeof(adhoc_path), &adhoc) < 0)
            goto out;
    }
    so.adhoc = adhoc;
    so.adhoc_path = adhoc ? adhoc_path : NULL;
    so.adhoc_save_ms = cfg->snapshot_interval_ms;
    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    so.workers = a.workers ? a.workers : cfg->workers ? cfg->workers
                                                      : (unsigned)(ncpu > 0 ? ncpu : 1);
    config_connections(cfg, &so.admit.tcp_max, &so.admit.unix_max, &so.admit.total_max);
    so.admit.reserve = cfg->admit.reserved_connections;
    so.admit.per_address = cfg->admit.per_address;
    so.admit.per_uid = cfg->admit.per_uid;
    so.admit.idle_ms = cfg->admit.idle_timeout_ms;
    so.admit.request_ms = cfg->admit.request_timeout_ms;
    so.admit.output_budget = cfg->admit.output_budget_bytes;
    so.admit.sockbuf = cfg->admit.socket_buffer_bytes;
    so.max_output_bytes = cfg->max_output_bytes;
    so.socket_mode = cfg->socket_mode;
    so.admin_gid = (gid_t)-1;
    if (cfg->admin_group && (gr = getgrnam(cfg->admin_group)) != NULL)
        so.admin_gid = gr->gr_gid;
    else
        log_msg(LOG_INFO, "admin group '%s' does not exist: only root may RESET and RELOAD",
                cfg->admin_group ? cfg->admin_group : "");
    so.full_allow = cfg->when_full == CONFIG_FULL_ALLOW;
    so.rls_unmatched_rule = cfg->rls_unmatched_rule;
    so.rls_ratelimit_headers = cfg->rls_ratelimit_headers;
    so.fast = fast;
    so.priv = priv;
    so.fastfd = ff;
    so.privileged = prv;
    so.reload = rl;
    /* No fetch can be under way before we start: flags left by a crash go. */
    table_lease_clear_fetches(fast, clock_now_ms());
    table_lease_clear_fetches(priv, clock_now_ms());
    table_lease_clear_fetches(prv, clock_now_ms());
    so.on_redis_error = cfg->on_redis_error;
    so.lease_max = cfg->lease_max;
    mo.workers = 2 * so.workers;        /* and as many lane threads (srv.h) */
    mo.listen = cfg->metrics_listen;
    mo.path = cfg->metrics_path;
    mo.divvy_names = cfg->metrics_divvy_names;
    mo.privileged = cfg->metrics_privileged;
    mo.statsd_host = cfg->statsd_host;
    mo.statsd_port = cfg->statsd_port;
    mo.statsd_prefix = cfg->statsd_prefix;
    mo.statsd_interval_ms = cfg->statsd_interval_ms;
    r = metrics_new(&mo, &metrics);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "cannot start metrics: %m");
        goto out_rcu;
    }
    so.metrics = metrics;
    /* After the metrics: its breaker reports there. */
    r = make_store(cfg, rl, metrics, &store);
    if (r < 0)
        goto out_rcu;
    so.store = store;
    so.adhoc_redis = adhoc && (cfg->adhoc_store == CONFIG_ADHOC_REDIS ||
                               (cfg->adhoc_store == CONFIG_ADHOC_AUTO && store_wanted(store)));
    if (so.adhoc_redis) {
        /* Each key a peer makes in Redis holds a slot here: none is taken early. */
        adhoc_no_evict(adhoc);
        store_want(store);
        log_msg(LOG_NOTICE, "ad-hoc buckets (RL.*, CL.THROTTLE) in Redis, on_redis_error %s",
                on_error_name(cfg->on_redis_error));
    }
    so.inherited = inherited;
    so.n_inherited = n_inherited;
    r = make_tls(cfg, rl, &tls);
    if (r < 0)
        goto out_rcu;
    so.tls = tls;
    r = dlog_writer_open(cfg, rl, 2 * so.workers, &dlog);
    if (r < 0)
        goto out_rcu;
    so.dlog = dlog;
    /* Fast-path clients report their decisions while the log is on
     * (docs/dev/fast-report.md); a restart with it off tells them to stop. */
    table_set_decision_log(fast, dlog != NULL);
    r = srv_new(&so, &srv);
    if (r < 0 || fastfd_start(ff) < 0)
        goto out_rcu;
    /* Fast-path clients see a live daemon from the first moment, not after a tick. */
    table_heartbeat(fast, clock_now_ms());
    urcu_memb_read_lock();
    log_msg(LOG_NOTICE, "divvyd %s: %zu rules from %s, state in %s", DIVVY_VERSION,
            rules_count(reload_current(rl)->rules), a.config, state_dir);
    urcu_memb_read_unlock();
    serving = true;
    if (srv_run(srv) >= 0)
        status = 0;
    /* Clients leave this control page at once (a heartbeat of 0 is stale)
     * and ask the next divvyd; then the snapshot the next start restores
     * without the fd store (stop, no systemd). */
    table_heartbeat(fast, 0);
    fastfd_save(ff);
    log_msg(LOG_NOTICE, "stopped");
out_rcu:
    srv_free(srv);
    dlog_writer_close(dlog, rl);       /* the workers stopped: all they decided */
    tls_free(tls);
    metrics_free(metrics);
    store_free(store);
    reload_free(rl);
    resp_auth_free();
    urcu_memb_unregister_thread();
out:
    /* A failed start leaves nothing half-created: no table, rules file or
     * state dir that was not there before (existing tables keep their counts). */
    if (status != 0 && !serving && state_dir) {
        char path[PATH_MAX];

        /* Ours alone: generations are never reused (docs/dev/shm.md). */
        if (fast && table_generation(fast) &&
            (size_t)snprintf(path, sizeof(path), "%s/rules.%llu", state_dir,
                             (unsigned long long)table_generation(fast)) < sizeof(path))
            unlink(path);
        if (priv_new && (size_t)snprintf(path, sizeof(path), "%s/private.table", state_dir) <
                            sizeof(path))
            unlink(path);
        if (prv_new && (size_t)snprintf(path, sizeof(path), "%s/privileged.table", state_dir) <
                           sizeof(path))
            unlink(path);
        lock_release(&lock, true);
        /* The record reload_set_tables() wrote (fastrules.h) goes with the dir. */
        if (made_dir) {
            fastrules_forget(state_dir);
            rmdir(state_dir);
        }
    }
    notify_listeners_free(inherited, n_inherited);
    notify_stored_free(stored, n_stored);
    fastfd_free(ff);
    adhoc_free(adhoc);
    table_close(priv);
    table_close(prv);
    lock_release(&lock, false);
    rules_free(rules);
    config_free(cfg);
    free(diag);
    return status;
}
