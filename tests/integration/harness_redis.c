/* SPDX-License-Identifier: MIT */
/*
 * harness_redis: real redis-servers for the Redis integration tests
 * (harness_redis.h).  Each server runs in a mkdtemp() directory of its own,
 * on a Unix socket only unless a test asks for a loopback port, and is kept
 * in a registry of REDIS_MAX slots so that redis_teardown() and an atexit()
 * handler stop it, by PID, even after a failed assertion; PR_SET_PDEATHSIG
 * kills it if the test binary dies outright.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness_redis.h"

#define REDIS_START_MS  10000

/* Servers live here, not on a test's stack: a failed assertion longjmps out
 * of the test, and the teardown must still find them. */
static struct redis_srv redis_slots[REDIS_MAX];
static bool redis_used[REDIS_MAX];
static bool redis_atexit_done;

static void redis_reap(struct redis_srv *r, int timeout_ms)
{
    uint64_t end = harness_now_ms() + (uint64_t)timeout_ms;
    int status;

    while (r->pid > 0) {
        pid_t p = waitpid(r->pid, &status, WNOHANG);

        if (p == r->pid || (p < 0 && errno == ECHILD)) {
            r->pid = 0;
            break;
        }
        if (harness_now_ms() >= end) {
            kill(r->pid, SIGKILL);
            waitpid(r->pid, &status, 0);
            r->pid = 0;
            break;
        }
        usleep(2000);
    }
}

/* SIGKILL (no goodbye, like a crash) and reap; the directory stays. */
void redis_kill(struct redis_srv *r)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, SIGKILL);
    redis_reap(r, 5000);
    r->stopped = false;
}

void redis_pause(struct redis_srv *r, bool pause)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, pause ? SIGSTOP : SIGCONT);
    r->stopped = pause;
}

/* Everything in the server's own mkdtemp() directory goes: its socket,
 * log, a sentinel's rewritten config, a replica's dump.rdb and temp files. */
static void redis_rm_dir(struct redis_srv *r)
{
    char path[HARNESS_PATH + 300];
    struct dirent *e;
    DIR *dir;

    if (!r->dir[0])
        return;
    dir = opendir(r->dir);
    while (dir && (e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", r->dir, e->d_name);
        unlink(path);
    }
    if (dir)
        closedir(dir);
    rmdir(r->dir);
    r->dir[0] = '\0';
}

/* SIGTERM (SIGCONT first), SIGKILL after 5 s; removes the directory. */
void redis_stop(struct redis_srv *r)
{
    if (!r)
        return;
    if (r->pid > 0) {
        kill(r->pid, SIGCONT);
        kill(r->pid, SIGTERM);
        redis_reap(r, 5000);
    }
    redis_rm_dir(r);
    for (int i = 0; i < REDIS_MAX; i++) {
        if (&redis_slots[i] == r)
            redis_used[i] = false;
    }
}

void redis_stop_all(void)
{
    for (int i = 0; i < REDIS_MAX; i++) {
        if (redis_used[i])
            redis_stop(&redis_slots[i]);
    }
}

/* A synchronous connection for checks, or NULL. */
redisContext *redis_cli(const struct redis_srv *r)
{
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectUnixWithTimeout(r->sock, tv);

    if (!c)
        return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    if (r->password[0]) {
        redisReply *rep = redisCommand(c, "AUTH %s", r->password);
        bool ok = rep && rep->type == REDIS_REPLY_STATUS;

        if (rep)
            freeReplyObject(rep);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

static redisReply *redis_vcmd(const struct redis_srv *r, const char *fmt, va_list ap)
{
    redisContext *c = redis_cli(r);
    redisReply *rep;

    if (!c)
        return NULL;
    rep = redisvCommand(c, fmt, ap);
    redisFree(c);
    return rep;
}

/* Runs a command; its integer reply, or LLONG_MIN on any failure. */
long long redis_int(const struct redis_srv *r, const char *fmt, ...)
{
    redisReply *rep;
    long long v = LLONG_MIN;
    va_list ap;

    va_start(ap, fmt);
    rep = redis_vcmd(r, fmt, ap);
    va_end(ap);
    if (rep && rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer;
    else if (rep && rep->type == REDIS_REPLY_STRING)
        v = atoll(rep->str);
    if (rep)
        freeReplyObject(rep);
    return v;
}

redisReply *redis_cmd(const struct redis_srv *r, const char *fmt, ...)
{
    redisReply *rep;
    va_list ap;

    va_start(ap, fmt);
    rep = redis_vcmd(r, fmt, ap);
    va_end(ap);
    return rep;
}

/* True when TCP port @port of 127.0.0.1 can be bound now. */
static bool redis_port_free(int port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool ok;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* A cluster node's port: its bus listens 10000 higher, so both must be
 * free and the port at most 55535 (Redis refuses more). */
static int redis_cluster_port(void)
{
    for (int attempt = 0; attempt < 1000; attempt++) {
        int port = 20000 + (int)(harness_rand() % 35000);

        if (redis_port_free(port) && redis_port_free(port + 10000))
            return port;
    }
    fail_msg("no free port pair for a cluster node");
    return -1;
}

/* A sentinel's config file: sentinels rewrite it, so it is a file of its own. */
static int redis_write_sentinel_conf(struct redis_srv *r)
{
    FILE *f = fopen(r->conf, "we");

    if (!f)
        return -errno;
    fprintf(f, "port %d\nbind 127.0.0.1\nunixsocket %s\nunixsocketperm 700\ndir %s\n",
            r->port, r->sock, r->dir);
    if (r->password[0])
        fprintf(f, "requirepass %s\n", r->password);
    fputs(r->sentinel_conf, f);
    return fclose(f) == 0 ? 0 : -EIO;
}

static int redis_spawn(struct redis_srv *r)
{
    const char *argv[48];
    char port[16], master[16], nodes_conf[HARNESS_PATH + 16];
    int n = 0, fd;
    pid_t pid;

    snprintf(port, sizeof(port), "%d", r->port);
    snprintf(master, sizeof(master), "%d", r->o.replicaof);
    if (r->o.sentinel_conf) {
        fd = redis_write_sentinel_conf(r);
        if (fd < 0)
            return fd;
        argv[n++] = "redis-server";
        argv[n++] = r->conf;
        argv[n++] = "--sentinel";
    } else {
        argv[n++] = "redis-server";
        argv[n++] = "--port";
        argv[n++] = port;
        if (r->port) {
            argv[n++] = "--bind";
            argv[n++] = "127.0.0.1";
            /* A replica syncs at once, not after the default 5 s wait for others. */
            argv[n++] = "--repl-diskless-sync-delay";
            argv[n++] = "0";
        }
        argv[n++] = "--unixsocket";
        argv[n++] = r->sock;
        argv[n++] = "--unixsocketperm";
        argv[n++] = "700";
        argv[n++] = "--save";
        argv[n++] = "";
        argv[n++] = "--appendonly";
        argv[n++] = "no";
        argv[n++] = "--dir";
        argv[n++] = r->dir;
        if (r->o.replicaof) {
            argv[n++] = "--replicaof";
            argv[n++] = "127.0.0.1";
            argv[n++] = master;
        }
        if (r->password[0]) {
            argv[n++] = "--requirepass";
            argv[n++] = r->password;
        }
        if (r->o.cluster) {
            snprintf(nodes_conf, sizeof(nodes_conf), "%s/nodes.conf", r->dir);
            argv[n++] = "--cluster-enabled";
            argv[n++] = "yes";
            argv[n++] = "--cluster-config-file";
            argv[n++] = nodes_conf;
            argv[n++] = "--cluster-node-timeout";
            argv[n++] = "500";
            argv[n++] = "--cluster-require-full-coverage";
            argv[n++] = "no";
        }
    }
    argv[n] = NULL;
    pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        fd = open(r->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execvp("redis-server", (char *const *)argv);
        dprintf(2, "cannot run redis-server: %s (tools/deps.sh installs it)\n",
                strerror(errno));
        _exit(127);
    }
    r->pid = pid;
    r->stopped = false;
    return 0;
}

static int redis_wait_ready(struct redis_srv *r)
{
    uint64_t end = harness_now_ms() + REDIS_START_MS;

    while (harness_now_ms() < end) {
        redisContext *c;
        int status;

        if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
            r->pid = 0;
            return -ECHILD;
        }
        c = redis_cli(r);
        if (c) {
            redisReply *rep = redisCommand(c, "PING");
            bool ok = rep && rep->type == REDIS_REPLY_STATUS;

            if (rep)
                freeReplyObject(rep);
            redisFree(c);
            if (ok)
                return 0;
        }
        usleep(5000);
    }
    return -ETIMEDOUT;
}

/* 1 when the server's log contains @needle, 0 when not. */
int redis_log_contains(const struct redis_srv *r, const char *needle)
{
    char buf[8192];
    FILE *f = fopen(r->log, "re");
    size_t n;

    if (!f)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

/* Copies the server's log to stderr (after a failed start). */
void redis_dump_log(const struct redis_srv *r)
{
    char line[512];
    FILE *f = fopen(r->log, "re");

    while (f && fgets(line, sizeof(line), f))
        fprintf(stderr, "redis-server: %s", line);
    if (f)
        fclose(f);
}

/* Starts a fresh server as @o says (*ret, owned by the registry until
 * redis_stop()); refuses (-ENOTEMPTY) a database that holds keys.  A
 * server that fails to start has its log copied to stderr. */
int redis_start_ex(const struct redis_start_opts *o, struct redis_srv **ret)
{
    struct redis_srv *r = NULL;
    char dir[HARNESS_PATH];
    int slot = -1, rc;

    for (int i = 0; i < REDIS_MAX; i++) {
        if (!redis_used[i]) {
            slot = i;
            break;
        }
    }
    if (slot < 0)
        return -EMFILE;
    r = &redis_slots[slot];
    memset(r, 0, sizeof(*r));
    if (!redis_atexit_done) {
        atexit(redis_stop_all);
        redis_atexit_done = true;
    }
    snprintf(dir, sizeof(dir), "/tmp/divvy-redis.XXXXXX");
    if (!mkdtemp(dir))
        return -errno;
    memcpy(r->dir, dir, sizeof(dir));
    snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", dir);
    snprintf(r->log, sizeof(r->log), "%s/redis.log", dir);
    snprintf(r->conf, sizeof(r->conf), "%s/sentinel.conf", dir);
    redis_used[slot] = true;
    if (o)
        r->o = *o;
    if (r->o.sentinel_conf) {
        snprintf(r->sentinel_conf, sizeof(r->sentinel_conf), "%s", r->o.sentinel_conf);
        r->o.sentinel_conf = r->sentinel_conf;
    }
    if (r->o.password)
        snprintf(r->password, sizeof(r->password), "%s", r->o.password);
    r->o.password = NULL;
    /* A free port may be taken before the server binds it: try another. */
    for (int attempt = 0; attempt < 5; attempt++) {
        if (r->o.cluster)
            r->port = redis_cluster_port();
        else if (r->o.tcp || r->o.replicaof || r->o.sentinel_conf)
            r->port = harness_free_port(SOCK_STREAM);
        rc = redis_spawn(r);
        if (rc >= 0)
            rc = redis_wait_ready(r);
        if (rc != -ECHILD || !r->port || !redis_log_contains(r, "in use"))
            break;
        unlink(r->log);
    }
    /* A sentinel holds no data (and has no DBSIZE). */
    if (rc >= 0 && !r->o.sentinel_conf && redis_int(r, "DBSIZE") != 0)
        rc = -ENOTEMPTY;
    if (rc < 0) {
        fprintf(stderr, "redis-server%s did not start: %s\n",
                r->o.sentinel_conf ? " --sentinel" : "", strerror(-rc));
        redis_dump_log(r);
        redis_stop(r);
        return rc;
    }
    *ret = r;
    return 0;
}

/* Polls divvyd's STATS on @c until redis_state is @want ("up", "down",
 * "unused"); fails the test after 10 s. */
void redis_wait_state(struct harness_conn *c, const char *want)
{
    char buf[HARNESS_LINE], needle[64];
    uint64_t end = harness_now_ms() + 10000;

    snprintf(needle, sizeof(needle), "redis_state=%s\n", want);
    for (;;) {
        CHECK(harness_multi(c, "STATS", buf, sizeof(buf)));
        if (strstr(buf, needle))
            return;
        if (harness_now_ms() > end)
            fail_msg("redis_state never became %s:\n%s", want, buf);
        harness_pause_ms(10);
    }
}

int redis_start(struct redis_srv **ret)
{
    return redis_start_ex(NULL, ret);
}

/* Starts the server again (after redis_kill()) on the same socket. */
int redis_restart(struct redis_srv *r)
{
    int rc;

    if (r->pid > 0)
        return -EBUSY;
    unlink(r->sock);
    rc = redis_spawn(r);
    if (rc >= 0)
        rc = redis_wait_ready(r);
    return rc;
}

int redis_teardown(void **state)
{
    redis_stop_all();
    return harness_teardown(state);
}

/* ---- divvyd configs -------------------------------------------------------- */

/* A divvy.conf: store { mode; on_redis_error; @extra_store }, redis { this
 * server, @timeout_ms }, then @rules (the text inside rules = ( ... );). */
char *redis_config(const struct redis_srv *r, const char *mode, const char *on_error,
                   unsigned timeout_ms, const char *extra_store, const char *rules)
{
    char *text = NULL;

    if (asprintf(&text,
                 "store = { mode = \"%s\"; on_redis_error = \"%s\"; %s };\n"
                 "redis = { unix_socket = \"%s\"; timeout_ms = %u; };\n"
                 "rules = (\n%s\n);\n",
                 mode, on_error, extra_store ? extra_store : "", r->sock, timeout_ms,
                 rules) < 0)
        return NULL;
    return text;
}

struct harness_daemon *redis_divvyd(const char *config_text, unsigned workers)
{
    struct harness_opts o = { 0 };
    struct harness_daemon *d = NULL;

    o.config_text = config_text;
    o.workers = workers;
    CHECK(harness_start(&o, &d));
    return d;
}

long long redis_divvyd_stat(struct harness_daemon *d, const char *name)
{
    struct harness_conn *c;
    long long v;

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_get_stat(c, name, &v));
    harness_close(c);
    return v;
}

void redis_divvyd_wait_stat(struct harness_daemon *d, const char *name, long long want, int ms)
{
    uint64_t end = harness_now_ms() + (uint64_t)ms;
    long long v;

    while ((v = redis_divvyd_stat(d, name)) != want) {
        if (harness_now_ms() > end)
            fail_msg("STATS %s stayed %lld, want %lld", name, v, want);
        harness_pause_ms(20);
    }
}

void redis_divvyd_stop(struct harness_daemon *d)
{
    int st = 0;

    CHECK(harness_stop(d, &st));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        harness_dump_log(d);
        fail_msg("divvyd did not exit 0 on SIGTERM (status 0x%x)", st);
    }
    harness_free(d);
}

int redis_divvyd_log_count(struct harness_daemon *d, const char *needle)
{
    char line[2048];
    FILE *f = fopen(d->log, "re");
    int n = 0;

    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return n;
}
