/* SPDX-License-Identifier: MIT */
/*
 * harness: starts and stops real divvyd processes for the integration tests
 * (see harness.h).  Owns a registry of every daemon, connection, client
 * process, scratch block and public copy the harness made, so that a failed
 * assertion, an early exit or a crash of the test binary never leaves a
 * divvyd or a temp dir behind.  Connections are harness_conn.c's, client
 * processes and one-shot runs harness_proc.c's, time, environment and file
 * helpers harness_util.c's (harness_private.h).
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
#include "harness_private.h"

#define REG_MAX      64

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
static char reg_tmp_dirs[REG_MAX][HARNESS_PATH];    /* harness_tmp_dir()'s, "" when free */

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

void harness_reg_add_child(pid_t pid)
{
    for (size_t i = 0; i < REG_MAX; i++) {
        if (!reg_children[i]) {
            reg_children[i] = pid;
            return;
        }
    }
}

void harness_reg_del_child(pid_t pid)
{
    for (size_t i = 0; i < REG_MAX; i++)
        if (reg_children[i] == pid)
            reg_children[i] = 0;
}

int harness_reg_add_conn(struct harness_conn *c)
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

void harness_reg_del_conn(struct harness_conn *c)
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
    for (size_t i = 0; i < REG_MAX; i++) {
        harness_rm_tree(reg_tmp_dirs[i]);
        reg_tmp_dirs[i][0] = '\0';
    }
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
            harness_path_join(owner, path, "owner.pid") < 0 ||
            harness_read_file(owner, &text, &len) < 0)
            continue;
        pid = strtol(text, NULL, 10);
        free(text);
        if (pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH)
            harness_rm_tree(path);
    }
    closedir(tmp);
}

void harness_reg_init(void)
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
    harness_reg_init();
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
    for (size_t i = 0; i < REG_MAX; i++) {
        harness_rm_tree(reg_tmp_dirs[i]);
        reg_tmp_dirs[i][0] = '\0';
    }
    return failed ? -1 : 0;
}

const char *harness_tmp_dir(void)
{
    char owner[HARNESS_PATH], pid[32];

    for (size_t i = 0; i < REG_MAX; i++) {
        char *dir = reg_tmp_dirs[i];

        if (dir[0])
            continue;
        /* "divvy-it." with owner.pid: swept like a daemon's dir if we are killed. */
        snprintf(dir, HARNESS_PATH, "/tmp/divvy-it.XXXXXX");
        if (!mkdtemp(dir)) {
            dir[0] = '\0';
            return NULL;
        }
        snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
        if (harness_path_join(owner, dir, "owner.pid") < 0 ||
            harness_write_file(owner, pid, strlen(pid)) < 0) {
            harness_rm_tree(dir);
            dir[0] = '\0';
            return NULL;
        }
        return dir;
    }
    errno = ENOSPC;
    return NULL;
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
    char resp_unix[HARNESS_PATH + 16], resp_tcp[64];
    const char *argv[32];
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
    if (d->opts.resp) {
        snprintf(resp_unix, sizeof(resp_unix), "resp:unix:%s", d->resp_sock);
        snprintf(resp_tcp, sizeof(resp_tcp), "resp:tcp:127.0.0.1:%d", d->resp_port);
        argv[n++] = "--listen";
        argv[n++] = resp_unix;
        argv[n++] = "--listen";
        argv[n++] = resp_tcp;
    }
    for (size_t i = 0; i < sizeof(d->opts.listen) / sizeof(d->opts.listen[0]) &&
                       d->opts.listen[i]; i++) {
        argv[n++] = "--listen";
        argv[n++] = d->opts.listen[i];
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
        if (harness_remaining_ms(deadline) == 0)
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
        if (d->opts.resp) {
            d->resp_port = free_tcp_port();
            if (d->resp_port < 0)
                return d->resp_port;
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

    harness_reg_init();
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
    if (harness_path_join(d->config, d->dir, d->opts.config_name) < 0 ||
        harness_path_join(d->sock, d->dir, "divvy.sock") < 0 ||
        harness_path_join(d->resp_sock, d->dir, "resp.sock") < 0 ||
        harness_path_join(d->state, d->dir, "state") < 0 ||
        harness_path_join(d->log, d->dir, "divvyd.log") < 0) {
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

        r = harness_path_join(owner, d->dir, "owner.pid");
        if (r >= 0)
            r = harness_write_file(owner, pid, (size_t)n);
        if (r < 0)
            goto out;
    }
    if (opts->config_src) {
        r = harness_read_file(opts->config_src, &text, &len);
        if (r < 0) {
            fprintf(stderr, "harness: %s: %s\n", opts->config_src, strerror(-r));
            goto out;
        }
        r = harness_write_file(d->config, text, len);
    } else {
        const char *t = opts->config_text ? opts->config_text : "";

        r = harness_write_file(d->config, t, strlen(t));
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
        if (harness_remaining_ms(deadline) == 0) {
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
    r = harness_write_file(tmp, text, strlen(text));
    if (r < 0)
        return r;
    return rename(tmp, d->config) < 0 ? -errno : 0;
}

int harness_log_contains(struct harness_daemon *d, const char *needle)
{
    char *text = NULL;
    size_t len;
    int r;

    r = harness_read_file(d->log, &text, &len);
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

    if (harness_read_file(d->log, &text, &len) < 0)
        return;
    fprintf(stderr, "---- divvyd log %s ----\n", d->log);
    /* The tail is what matters; cap the dump. */
    line = len > 16384 ? text + len - 16384 : text;
    for (line = strtok_r(line, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        fprintf(stderr, "  | %s\n", line);
    fprintf(stderr, "---- end of log ----\n");
    free(text);
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

    harness_reg_init();
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
        if (chmod(reg_public_dir, 0755) < 0 ||
            harness_path_join(owner, reg_public_dir, "owner.pid") < 0 ||
            harness_write_file(owner, pid, strlen(pid)) < 0) {
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
    if (harness_path_join(dst, reg_public_dir, base) < 0 ||
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
        access(lib, R_OK) == 0 &&
        harness_path_join(lib_dst, reg_public_dir, "libdivvy.so.0") == 0 &&
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

