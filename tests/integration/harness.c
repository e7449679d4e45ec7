/* SPDX-License-Identifier: MIT */
/*
 * harness: starts and stops real divvyd processes for the integration tests
 * and talks to them over raw sockets (see harness.h).  Owns a registry of
 * every daemon, connection and client process it started, so that a failed
 * assertion, an early exit or a crash of the test binary never leaves a
 * divvyd or a temp dir behind.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "divvy.h"
#include "harness.h"

#define REG_MAX      64
#define RBUF_MIN     65536
#define RBUF_MAX     (64u << 20)

/* Everything the harness started and has not cleaned up yet.  Daemons and
 * client pids are touched from the main thread only; connections may come
 * and go in worker threads, hence the lock. */
static struct harness_daemon *reg_daemons[REG_MAX];
static pid_t reg_children[REG_MAX];
static struct harness_conn **reg_conns;
static size_t reg_n_conns, reg_cap_conns;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static void **reg_scratch;
static size_t reg_n_scratch, reg_cap_scratch;
static bool reg_atexit_done;
static pid_t reg_owner;                 /* the test binary; children never clean up */
static char reg_public_dir[HARNESS_PATH];   /* harness_public_copy()'s, or "" */

/* ---- time ------------------------------------------------------------------ */

uint64_t harness_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void harness_pause_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

unsigned harness_rand(void)
{
    static unsigned seed;

    if (!seed)
        seed = (unsigned)getpid() ^ (unsigned)harness_now_ms();
    seed = seed * 1103515245u + 12345u;
    return seed >> 1;
}

static int remaining_ms(uint64_t deadline)
{
    uint64_t now = harness_now_ms();

    return now >= deadline ? 0 : (int)(deadline - now);
}

/* ---- environment ----------------------------------------------------------- */

const char *harness_divvyd(void)
{
    const char *p = getenv("DIVVYD");

    return p && *p ? p : "build/divvyd";
}

const char *harness_srcdir(void)
{
    static char dir[PATH_MAX];
    const char *env = getenv("DIVVY_SRCDIR");
    char real[PATH_MAX], *slash;
    int i;

    if (env && *env)
        return env;
    if (dir[0])
        return dir;
    if (!realpath(harness_divvyd(), real)) {
        snprintf(dir, sizeof(dir), ".");
        return dir;
    }
    /* <src>/build/divvyd -> <src> */
    for (i = 0; i < 2; i++) {
        slash = strrchr(real, '/');
        if (!slash || slash == real) {
            snprintf(dir, sizeof(dir), ".");
            return dir;
        }
        *slash = '\0';
    }
    snprintf(dir, sizeof(dir), "%s", real);
    return dir;
}

int harness_src_path(const char *rel, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s/%s", harness_srcdir(), rel);

    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* ---- files ----------------------------------------------------------------- */

static int write_file(const char *path, const void *data, size_t len)
{
    const char *p = data;
    int fd, r = 0;

    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            r = -errno;
            goto out;
        }
        p += n;
        len -= (size_t)n;
    }
out:
    if (close(fd) < 0 && r == 0)
        r = -errno;
    return r;
}

static int read_file(const char *path, char **ret, size_t *ret_len)
{
    char *buf = NULL, *nbuf;
    size_t len = 0, cap = 0;
    int fd, r = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    for (;;) {
        ssize_t n;

        if (cap - len < 4096) {
            cap = cap ? cap * 2 : 8192;
            nbuf = realloc(buf, cap + 1);
            if (!nbuf) {
                r = -ENOMEM;
                goto out;
            }
            buf = nbuf;
        }
        n = read(fd, buf + len, cap - len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            r = -errno;
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    *ret = buf;
    *ret_len = len;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return r;
}

static int path_join(char buf[HARNESS_PATH], const char *dir, const char *name)
{
    int n = snprintf(buf, HARNESS_PATH, "%s/%s", dir, name);

    return n < 0 || n >= HARNESS_PATH ? -ENAMETOOLONG : 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

void harness_rm_tree(const char *dir)
{
    if (dir[0])
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void harness_list_dir(const char *dir, char *buf, size_t size)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char *names[64];
    size_t n = 0, used = 0;

    buf[0] = '\0';
    if (!d) {
        snprintf(buf, size, "-");
        return;
    }
    while ((e = readdir(d)) != NULL && n < 64) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        names[n] = strdup(e->d_name);
        if (names[n])
            n++;
    }
    closedir(d);
    qsort(names, n, sizeof(names[0]), cmp_name);
    for (size_t i = 0; i < n; i++) {
        if (used < size)
            used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? " " : "", names[i]);
        free(names[i]);
    }
}

/* ---- registry -------------------------------------------------------------- */

static void reg_add_daemon(struct harness_daemon *d)
{
    for (size_t i = 0; i < REG_MAX; i++) {
        if (!reg_daemons[i]) {
            reg_daemons[i] = d;
            return;
        }
    }
}

static void reg_del_daemon(struct harness_daemon *d)
{
    for (size_t i = 0; i < REG_MAX; i++)
        if (reg_daemons[i] == d)
            reg_daemons[i] = NULL;
}

static void reg_add_child(pid_t pid)
{
    for (size_t i = 0; i < REG_MAX; i++) {
        if (!reg_children[i]) {
            reg_children[i] = pid;
            return;
        }
    }
}

static void reg_del_child(pid_t pid)
{
    for (size_t i = 0; i < REG_MAX; i++)
        if (reg_children[i] == pid)
            reg_children[i] = 0;
}

static int reg_add_conn(struct harness_conn *c)
{
    int r = 0;

    pthread_mutex_lock(&reg_lock);
    if (reg_n_conns == reg_cap_conns) {
        size_t cap = reg_cap_conns ? reg_cap_conns * 2 : 256;
        struct harness_conn **n = realloc(reg_conns, cap * sizeof(*n));

        if (!n) {
            r = -ENOMEM;
            goto out;
        }
        reg_conns = n;
        reg_cap_conns = cap;
    }
    reg_conns[reg_n_conns++] = c;
out:
    pthread_mutex_unlock(&reg_lock);
    return r;
}

static void reg_del_conn(struct harness_conn *c)
{
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < reg_n_conns; i++) {
        if (reg_conns[i] == c) {
            reg_conns[i] = reg_conns[--reg_n_conns];
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

/* The last line of defence: SIGKILL whatever is left when the binary exits. */
static void reg_atexit(void)
{
    if (getpid() != reg_owner)
        return;
    for (size_t i = 0; i < REG_MAX; i++) {
        struct harness_daemon *d = reg_daemons[i];

        if (!d)
            continue;
        if (d->pid > 0) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, NULL, 0);
            d->pid = 0;
        }
        harness_rm_tree(d->dir);
        reg_daemons[i] = NULL;
    }
    for (size_t i = 0; i < REG_MAX; i++) {
        if (reg_children[i] > 0) {
            kill(reg_children[i], SIGKILL);
            waitpid(reg_children[i], NULL, 0);
            reg_children[i] = 0;
        }
    }
    harness_rm_tree(reg_public_dir);
    reg_public_dir[0] = '\0';
}

/* Removes the temp dirs of test binaries that were killed outright (no
 * atexit() ran): each dir names its owner in "owner.pid". */
static void sweep_stale_dirs(void)
{
    DIR *tmp = opendir("/tmp");
    struct dirent *e;

    if (!tmp)
        return;
    while ((e = readdir(tmp)) != NULL) {
        char path[HARNESS_PATH], owner[HARNESS_PATH], *text = NULL;
        size_t len;
        long pid;

        if (strncmp(e->d_name, "divvy-it.", 9) != 0 ||
            snprintf(path, sizeof(path), "/tmp/%s", e->d_name) >= (int)sizeof(path) ||
            path_join(owner, path, "owner.pid") < 0 || read_file(owner, &text, &len) < 0)
            continue;
        pid = strtol(text, NULL, 10);
        free(text);
        if (pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH)
            harness_rm_tree(path);
    }
    closedir(tmp);
}

static void reg_init(void)
{
    if (reg_atexit_done)
        return;
    reg_atexit_done = true;
    reg_owner = getpid();
    sweep_stale_dirs();
    /* Writes to a closed socket must fail with EPIPE, not kill the test. */
    signal(SIGPIPE, SIG_IGN);
    atexit(reg_atexit);
}

/* ---- cmocka fixtures --------------------------------------------------------- */

int harness_setup(void **state)
{
    (void)state;
    reg_init();
    if (access(harness_divvyd(), X_OK) < 0) {
        fprintf(stderr, "harness: %s is not executable (set DIVVYD)\n", harness_divvyd());
        return -1;
    }
    return 0;
}

int harness_teardown(void **state)
{
    int failed = 0;

    (void)state;
    pthread_mutex_lock(&reg_lock);
    while (reg_n_conns > 0) {
        struct harness_conn *c = reg_conns[--reg_n_conns];

        close(c->fd);
        free(c->buf);
        free(c);
    }
    pthread_mutex_unlock(&reg_lock);

    for (size_t i = 0; i < REG_MAX; i++) {
        if (reg_children[i] > 0) {
            kill(reg_children[i], SIGKILL);
            waitpid(reg_children[i], NULL, 0);
            reg_children[i] = 0;
        }
    }
    while (reg_n_scratch > 0)
        free(reg_scratch[--reg_n_scratch]);
    for (size_t i = 0; i < REG_MAX; i++) {
        struct harness_daemon *d = reg_daemons[i];

        if (!d)
            continue;
        if (d->pid > 0 && !harness_alive(d) && !d->expect_exit) {
            fprintf(stderr, "harness: divvyd %s died during the test (status 0x%x)\n",
                    d->dir, d->status);
            harness_dump_log(d);
            failed = 1;
        } else if (d->pid > 0) {
            int st = 0;

            harness_stop(d, &st);
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "harness: divvyd did not exit 0 on SIGTERM (status 0x%x)\n",
                        st);
                harness_dump_log(d);
                failed = 1;
            }
        }
        if (getenv("HARNESS_VERBOSE"))
            harness_dump_log(d);
        harness_free(d);
    }
    return failed ? -1 : 0;
}

/* ---- daemons ---------------------------------------------------------------- */

static int free_tcp_port(void)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t sl = sizeof(sa);
    int fd, r;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
        r = -errno;
        goto out;
    }
    r = ntohs(sa.sin_port);
out:
    close(fd);
    return r;
}

static int spawn_daemon(struct harness_daemon *d)
{
    char listen_unix[HARNESS_PATH + 8], listen_tcp[64], workers[16];
    const char *argv[16];
    sigset_t none;
    pid_t parent = getpid(), pid;
    int n = 0, logfd;

    snprintf(listen_unix, sizeof(listen_unix), "unix:%s", d->sock);
    argv[n++] = harness_divvyd();
    argv[n++] = "--config";
    argv[n++] = d->config;
    argv[n++] = "--listen";
    argv[n++] = listen_unix;
    if (d->tcp_port > 0) {
        snprintf(listen_tcp, sizeof(listen_tcp), "tcp:127.0.0.1:%d", d->tcp_port);
        argv[n++] = "--listen";
        argv[n++] = listen_tcp;
    }
    if (!d->opts.no_state_dir) {
        argv[n++] = "--state-dir";
        argv[n++] = d->state;
    }
    if (d->opts.workers) {
        snprintf(workers, sizeof(workers), "%u", d->opts.workers);
        argv[n++] = "--workers";
        argv[n++] = workers;
    }
    argv[n] = NULL;

    logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0)
        return -errno;
    pid = fork();
    if (pid < 0) {
        int r = -errno;

        close(logfd);
        return r;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);

        /* Dies with the test binary, whatever kills it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "harness: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(logfd);
    d->pid = pid;
    d->status = 0;
    return 0;
}

bool harness_alive(struct harness_daemon *d)
{
    int st;
    pid_t p;

    if (d->pid <= 0)
        return false;
    p = waitpid(d->pid, &st, WNOHANG);
    if (p == d->pid) {
        d->status = st;
        d->pid = -d->pid;       /* exited, reaped; keep the number for messages */
        return false;
    }
    return true;
}

static int ping_once(const char *sock, int port, int timeout_ms)
{
    struct harness_conn *c = NULL;
    char reply[128];
    ssize_t n;
    int r;

    r = sock ? harness_connect_unix(sock, &c) : harness_connect_tcp(port, &c);
    if (r < 0)
        return r;
    n = harness_cmd(c, "PING", reply, sizeof(reply));
    if (n < 0) {
        r = (int)n;
        goto out;
    }
    (void)timeout_ms;
    r = strcmp(reply, "OK pong") == 0 ? 0 : -EPROTO;
out:
    harness_close(c);
    return r;
}

int harness_wait_ready(struct harness_daemon *d, int timeout_ms)
{
    uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
    bool unix_ok = false, tcp_ok = d->tcp_port <= 0;

    for (;;) {
        if (!harness_alive(d))
            return -ECHILD;
        if (!unix_ok && ping_once(d->sock, 0, timeout_ms) == 0)
            unix_ok = true;
        if (!tcp_ok && ping_once(NULL, d->tcp_port, timeout_ms) == 0)
            tcp_ok = true;
        if (unix_ok && tcp_ok)
            return 0;
        if (remaining_ms(deadline) == 0)
            return -ETIMEDOUT;
        /* Polling the listener with a deadline: there is no event to wait on. */
        harness_pause_ms(10);
    }
}

static int start_process(struct harness_daemon *d)
{
    int r = -EADDRINUSE;

    /* A free port can be taken by someone else before divvyd binds it. */
    for (int attempt = 0; attempt < 3 && r == -EADDRINUSE; attempt++) {
        if (!d->opts.no_tcp) {
            d->tcp_port = free_tcp_port();
            if (d->tcp_port < 0)
                return d->tcp_port;
        }
        r = spawn_daemon(d);
        if (r < 0)
            return r;
        r = harness_wait_ready(d, HARNESS_START_MS);
        if (r == -ECHILD && harness_log_contains(d, "in use") > 0)
            r = -EADDRINUSE;
        if (r < 0 && d->pid > 0) {
            int st;

            harness_stop(d, &st);
        }
    }
    if (r < 0) {
        fprintf(stderr, "harness: divvyd did not become ready: %s (status 0x%x)\n",
                strerror(-r), d->status);
        harness_dump_log(d);
    }
    return r;
}

int harness_start(const struct harness_opts *opts, struct harness_daemon **ret)
{
    struct harness_daemon *d;
    char *text = NULL;
    size_t len = 0;
    int r;

    reg_init();
    d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->opts = *opts;
    if (!d->opts.config_name)
        d->opts.config_name = "divvy.conf";
    snprintf(d->dir, sizeof(d->dir), "/tmp/divvy-it.XXXXXX");
    if (!mkdtemp(d->dir)) {
        r = -errno;
        d->dir[0] = '\0';
        goto out;
    }
    reg_add_daemon(d);
    if (path_join(d->config, d->dir, d->opts.config_name) < 0 ||
        path_join(d->sock, d->dir, "divvy.sock") < 0 ||
        path_join(d->state, d->dir, "state") < 0 ||
        path_join(d->log, d->dir, "divvyd.log") < 0) {
        r = -ENAMETOOLONG;
        goto out;
    }
    if (mkdir(d->state, 0755) < 0) {
        r = -errno;
        goto out;
    }
    {
        char owner[HARNESS_PATH], pid[32];
        int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());

        r = path_join(owner, d->dir, "owner.pid");
        if (r >= 0)
            r = write_file(owner, pid, (size_t)n);
        if (r < 0)
            goto out;
    }
    if (opts->config_src) {
        r = read_file(opts->config_src, &text, &len);
        if (r < 0) {
            fprintf(stderr, "harness: %s: %s\n", opts->config_src, strerror(-r));
            goto out;
        }
        r = write_file(d->config, text, len);
    } else {
        const char *t = opts->config_text ? opts->config_text : "";

        r = write_file(d->config, t, strlen(t));
    }
    if (r < 0)
        goto out;
    d->opts.config_text = NULL;         /* borrowed; not needed past here */
    d->opts.config_src = NULL;
    r = start_process(d);
    if (r < 0)
        goto out;
    *ret = d;
    d = NULL;
out:
    free(text);
    harness_free(d);
    return r;
}

int harness_restart(struct harness_daemon *d)
{
    if (d->pid > 0)
        return -EBUSY;
    d->pid = 0;
    d->expect_exit = false;
    return start_process(d);
}

int harness_kill(struct harness_daemon *d, int sig)
{
    if (d->pid <= 0)
        return -ESRCH;
    return kill(d->pid, sig) < 0 ? -errno : 0;
}

int harness_stop(struct harness_daemon *d, int *ret_status)
{
    uint64_t deadline;
    int st = 0;
    pid_t p;

    if (d->pid <= 0) {
        if (ret_status)
            *ret_status = d->status;
        return d->pid < 0 ? 0 : -ESRCH;
    }
    kill(d->pid, SIGTERM);
    deadline = harness_now_ms() + HARNESS_STOP_MS;
    for (;;) {
        p = waitpid(d->pid, &st, WNOHANG);
        if (p == d->pid)
            break;
        if (p < 0 && errno != EINTR) {
            st = 0;
            break;
        }
        if (remaining_ms(deadline) == 0) {
            fprintf(stderr, "harness: divvyd %d ignored SIGTERM for %d ms: SIGKILL\n",
                    (int)d->pid, HARNESS_STOP_MS);
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &st, 0);
            /* Report it as a failure even though the kill "worked". */
            st = 0x100 * 99;
            break;
        }
        harness_pause_ms(5);
    }
    d->status = st;
    d->pid = -d->pid;
    if (ret_status)
        *ret_status = st;
    return 0;
}

void harness_free(struct harness_daemon *d)
{
    if (!d)
        return;
    if (d->pid > 0) {
        int st;

        harness_stop(d, &st);
    }
    harness_rm_tree(d->dir);
    reg_del_daemon(d);
    free(d);
}

int harness_write_config(struct harness_daemon *d, const char *text)
{
    char tmp[HARNESS_PATH + 8];
    int r;

    if (snprintf(tmp, sizeof(tmp), "%s.new", d->config) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    r = write_file(tmp, text, strlen(text));
    if (r < 0)
        return r;
    return rename(tmp, d->config) < 0 ? -errno : 0;
}

int harness_log_contains(struct harness_daemon *d, const char *needle)
{
    char *text = NULL;
    size_t len;
    int r;

    r = read_file(d->log, &text, &len);
    if (r < 0)
        return r;
    r = strstr(text, needle) != NULL;
    free(text);
    return r;
}

void harness_dump_log(struct harness_daemon *d)
{
    char *text = NULL, *line, *save = NULL;
    size_t len;

    if (read_file(d->log, &text, &len) < 0)
        return;
    fprintf(stderr, "---- divvyd log %s ----\n", d->log);
    /* The tail is what matters; cap the dump. */
    line = len > 16384 ? text + len - 16384 : text;
    for (line = strtok_r(line, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        fprintf(stderr, "  | %s\n", line);
    fprintf(stderr, "---- end of log ----\n");
    free(text);
}

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
    r = reg_add_conn(c);
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
    r = conn_new(fd, ret);
    if (r < 0)
        close(fd);
    return r;
}

int harness_connect_tcp(int port, struct harness_conn **ret)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    int fd, r, one = 1;

    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        r = -errno;
        close(fd);
        return r;
    }
    r = conn_new(fd, ret);
    if (r < 0)
        close(fd);
    return r;
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
    reg_del_conn(c);
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

        r = poll(&pfd, 1, remaining_ms(deadline));
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
        r = poll(&pfd, 1, remaining_ms(deadline));
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
        r = poll(&pfd, 1, remaining_ms(deadline));
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

/* ---- client processes ----------------------------------------------------------- */

int harness_spawn(int (*fn)(void *arg), void *arg, pid_t *ret_pid)
{
    pid_t parent = getpid(), pid;

    reg_init();
    fflush(NULL);
    pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        _exit(fn(arg) & 0x7f);
    }
    reg_add_child(pid);
    *ret_pid = pid;
    return 0;
}

int harness_reap(pid_t pid, int timeout_ms, int *ret_status)
{
    uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
    int st = 0;

    for (;;) {
        pid_t p = waitpid(pid, &st, WNOHANG);

        if (p == pid)
            break;
        if (p < 0) {
            int r = -errno;

            reg_del_child(pid);
            return r;
        }
        if (remaining_ms(deadline) == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            reg_del_child(pid);
            return -ETIMEDOUT;
        }
        harness_pause_ms(5);
    }
    reg_del_child(pid);
    *ret_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return 0;
}

/* ---- memory ------------------------------------------------------------------------ */

void *harness_scratch(size_t size)
{
    void *p;

    if (reg_n_scratch == reg_cap_scratch) {
        size_t cap = reg_cap_scratch ? reg_cap_scratch * 2 : 32;
        void **n = realloc(reg_scratch, cap * sizeof(*n));

        if (!n)
            return NULL;
        reg_scratch = n;
        reg_cap_scratch = cap;
    }
    p = calloc(1, size ? size : 1);
    if (p)
        reg_scratch[reg_n_scratch++] = p;
    return p;
}

/* ---- programs for unprivileged children ---------------------------------------------- */

/* Copies @from to a new file @to with @mode (whatever the umask). */
static int copy_file(const char *from, const char *to, mode_t mode)
{
    char buf[65536];
    int in, out = -1, r = 0;

    in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -errno;
    out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
    if (out < 0) {
        r = -errno;
        goto out;
    }
    for (;;) {
        ssize_t n = read(in, buf, sizeof(buf));

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = -errno;
            goto out;
        }
        if (n == 0)
            break;
        for (ssize_t done = 0, w; done < n; done += w) {
            w = write(out, buf + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR) {
                w = 0;
                continue;
            }
            if (w <= 0) {
                r = w < 0 ? -errno : -EIO;
                goto out;
            }
        }
    }
    if (fchmod(out, mode) < 0)
        r = -errno;
out:
    if (out >= 0 && close(out) < 0 && r == 0)
        r = -errno;
    close(in);
    return r;
}

const char *harness_public_copy(const char *path)
{
    static struct {
        char src[PATH_MAX];
        char dst[HARNESS_PATH];
    } copies[8];
    static size_t n_copies;
    char pid[32], lib[PATH_MAX], lib_dst[HARNESS_PATH], dst[HARNESS_PATH];
    const char *base, *slash;
    int r;

    reg_init();
    for (size_t i = 0; i < n_copies; i++)
        if (strcmp(copies[i].src, path) == 0)
            return copies[i].dst;
    if (n_copies == sizeof(copies) / sizeof(copies[0]) || strlen(path) >= PATH_MAX) {
        errno = ENOSPC;
        return NULL;
    }
    if (!reg_public_dir[0]) {
        char owner[HARNESS_PATH];

        /* "divvy-it." with owner.pid: swept like a daemon's dir if we are killed. */
        snprintf(reg_public_dir, sizeof(reg_public_dir), "/tmp/divvy-it.XXXXXX");
        if (!mkdtemp(reg_public_dir)) {
            reg_public_dir[0] = '\0';
            return NULL;
        }
        snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
        if (chmod(reg_public_dir, 0755) < 0 || path_join(owner, reg_public_dir, "owner.pid") < 0 ||
            write_file(owner, pid, strlen(pid)) < 0) {
            r = errno;
            harness_rm_tree(reg_public_dir);
            reg_public_dir[0] = '\0';
            errno = r ? r : EIO;
            return NULL;
        }
    }
    slash = strrchr(path, '/');
    base = slash ? slash + 1 : path;
    /* Two programs of one name (build/ and build-asan/): the second gets a suffix. */
    if (path_join(dst, reg_public_dir, base) < 0 ||
        (access(dst, F_OK) == 0 &&
         snprintf(dst, sizeof(dst), "%s/%s.%zu", reg_public_dir, base, n_copies) >=
             (int)sizeof(dst))) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    r = copy_file(path, dst, 0755);
    if (r < 0) {
        errno = -r;
        return NULL;
    }
    /* The shared library its $ORIGIN rpath names, once. */
    if (snprintf(lib, sizeof(lib), "%.*slibdivvy.so.0", slash ? (int)(slash + 1 - path) : 0,
                 path) < (int)sizeof(lib) &&
        access(lib, R_OK) == 0 && path_join(lib_dst, reg_public_dir, "libdivvy.so.0") == 0 &&
        access(lib_dst, F_OK) < 0) {
        r = copy_file(lib, lib_dst, 0755);
        if (r < 0) {
            unlink(dst);
            errno = -r;
            return NULL;
        }
    }
    snprintf(copies[n_copies].src, sizeof(copies[n_copies].src), "%s", path);
    snprintf(copies[n_copies].dst, sizeof(copies[n_copies].dst), "%s", dst);
    return copies[n_copies++].dst;
}

/* ---- one-shot runs ---------------------------------------------------------------- */

static void collect(int fd, char *buf, size_t size, size_t *used, bool *open_)
{
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof(tmp));

    if (n <= 0) {
        if (n == 0 || (errno != EINTR && errno != EAGAIN))
            *open_ = false;
        return;
    }
    if (buf && size > 0 && *used < size - 1) {
        size_t k = (size_t)n < size - 1 - *used ? (size_t)n : size - 1 - *used;

        memcpy(buf + *used, tmp, k);
        *used += k;
        buf[*used] = '\0';
    }
}

int harness_run_divvyd(const char *const *args, int timeout_ms, int *ret_status,
                       char *out, size_t out_size, char *err, size_t err_size)
{
    const char *argv[32];
    int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, n = 0, st = 0, r = 0;
    size_t used_o = 0, used_e = 0;
    bool open_o = true, open_e = true;
    uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
    pid_t parent = getpid(), pid;

    reg_init();
    if (out && out_size)
        out[0] = '\0';
    if (err && err_size)
        err[0] = '\0';
    argv[n++] = harness_divvyd();
    while (*args && n < 31)
        argv[n++] = *args++;
    argv[n] = NULL;
    if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
        r = -errno;
        goto out;
    }
    pid = fork();
    if (pid < 0) {
        r = -errno;
        goto out;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        signal(SIGPIPE, SIG_DFL);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    reg_add_child(pid);
    close(po[1]);
    close(pe[1]);
    po[1] = pe[1] = -1;
    while (open_o || open_e) {
        struct pollfd pfd[2] = { { .fd = open_o ? po[0] : -1, .events = POLLIN },
                                 { .fd = open_e ? pe[0] : -1, .events = POLLIN } };
        int k = poll(pfd, 2, remaining_ms(deadline));

        if (k == 0)
            break;
        if (k < 0)
            continue;
        if (pfd[0].revents)
            collect(po[0], out, out_size, &used_o, &open_o);
        if (pfd[1].revents)
            collect(pe[0], err, err_size, &used_e, &open_e);
    }
    r = harness_reap(pid, remaining_ms(deadline) + 2000, &st);
    if (r == 0)
        *ret_status = st;
out:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0)
            close(po[i]);
        if (pe[i] >= 0)
            close(pe[i]);
    }
    return r;
}

bool harness_same_reply(const char *a, const char *b)
{
    char ta[HARNESS_LINE], tb[HARNESS_LINE], *sa = NULL, *sb = NULL, *fa, *fb;
    int field = 0;

    if (strcmp(a, b) == 0)
        return true;
    snprintf(ta, sizeof(ta), "%s", a);
    snprintf(tb, sizeof(tb), "%s", b);
    fa = strtok_r(ta, " ", &sa);
    fb = strtok_r(tb, " ", &sb);
    for (; fa && fb; fa = strtok_r(NULL, " ", &sa), fb = strtok_r(NULL, " ", &sb), field++) {
        if (strcmp(fa, fb) == 0)
            continue;
        if (field != 3 || strncmp(ta, "OK", 2) != 0 || llabs(atoll(fa) - atoll(fb)) > 1)
            return false;
    }
    return !fa && !fb;
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
