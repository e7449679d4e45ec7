/* SPDX-License-Identifier: MIT */
/*
 * What the Redis integration tests (test_redis_*.c) share: a real
 * redis-server started in a mkdtemp() directory on a Unix socket only
 * (`--port 0 --unixsocket DIR/redis.sock --save '' --appendonly no`),
 * refused unless its database is empty, stopped (or killed, paused,
 * restarted) by PID; a synchronous hiredis connection for checks; and
 * divvyd configs pointing at it.  Every server is kept in a registry so
 * redis_teardown() (a cmocka teardown, which also runs harness_teardown())
 * and an atexit() handler stop it even when an assertion failed, and
 * PR_SET_PDEATHSIG kills it if the test binary dies outright.
 *
 * Static functions in a header: each test binary is one translation unit
 * that includes this once.
 */
#ifndef DIVVY_TEST_REDIS_H
#define DIVVY_TEST_REDIS_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "harness.h"

#define REDIS_START_MS  10000
#define REDIS_MAX       4

struct redis_srv {
    pid_t pid;                  /* 0 when not running */
    bool stopped;               /* SIGSTOPped */
    char dir[HARNESS_PATH];
    char sock[HARNESS_PATH + 16];
    char log[HARNESS_PATH + 16];
};

/* Servers live here, not on a test's stack: a failed assertion longjmps out
 * of the test, and the teardown must still find them. */
static struct redis_srv redis_slots[REDIS_MAX];
static bool redis_used[REDIS_MAX];
static bool redis_atexit_done;

static inline void redis_reap(struct redis_srv *r, int timeout_ms)
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
static inline void redis_kill(struct redis_srv *r)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, SIGKILL);
    redis_reap(r, 5000);
    r->stopped = false;
}

static inline void redis_pause(struct redis_srv *r, bool pause)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, pause ? SIGSTOP : SIGCONT);
    r->stopped = pause;
}

static inline void redis_rm_dir(struct redis_srv *r)
{
    char path[HARNESS_PATH + 32];
    const char *files[] = { "redis.sock", "redis.log", "dump.rdb" };

    if (!r->dir[0])
        return;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", r->dir, files[i]);
        unlink(path);
    }
    rmdir(r->dir);
    r->dir[0] = '\0';
}

/* SIGTERM (SIGCONT first), SIGKILL after 5 s; removes the directory. */
static inline void redis_stop(struct redis_srv *r)
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

static inline void redis_stop_all(void)
{
    for (int i = 0; i < REDIS_MAX; i++) {
        if (redis_used[i])
            redis_stop(&redis_slots[i]);
    }
}

/* A synchronous connection for checks, or NULL. */
static inline redisContext *redis_cli(const struct redis_srv *r)
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
    return c;
}

/* Runs a command; its integer reply, or LLONG_MIN on any failure. */
static inline long long redis_int(const struct redis_srv *r, const char *fmt, ...)
{
    redisContext *c = redis_cli(r);
    redisReply *rep;
    long long v = LLONG_MIN;
    va_list ap;

    if (!c)
        return v;
    va_start(ap, fmt);
    rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (rep && rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer;
    else if (rep && rep->type == REDIS_REPLY_STRING)
        v = atoll(rep->str);
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return v;
}

static inline int redis_spawn(struct redis_srv *r)
{
    pid_t pid;
    int fd;

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
        execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", r->sock,
               "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", r->dir,
               (char *)NULL);
        _exit(127);
    }
    r->pid = pid;
    r->stopped = false;
    return 0;
}

static inline int redis_wait_ready(struct redis_srv *r)
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

/* Starts a fresh server (*ret, owned by the registry until redis_stop());
 * refuses (-ENOTEMPTY) a database that holds keys. */
static inline int redis_start(struct redis_srv **ret)
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
    redis_used[slot] = true;
    rc = redis_spawn(r);
    if (rc >= 0)
        rc = redis_wait_ready(r);
    if (rc >= 0 && redis_int(r, "DBSIZE") != 0)
        rc = -ENOTEMPTY;
    if (rc < 0) {
        redis_stop(r);
        return rc;
    }
    *ret = r;
    return 0;
}

/* Starts the server again (after redis_kill()) on the same socket. */
static inline int redis_restart(struct redis_srv *r)
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

static inline int redis_teardown(void **state)
{
    redis_stop_all();
    return harness_teardown(state);
}

/* ---- divvyd configs -------------------------------------------------------- */

/* A divvy.conf: store { mode; on_redis_error; @extra_store }, redis { this
 * server, @timeout_ms }, then @rules (the text inside rules = ( ... );). */
static inline char *redis_config(const struct redis_srv *r, const char *mode, const char *on_error,
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

static inline struct harness_daemon *redis_divvyd(const char *config_text, unsigned workers)
{
    struct harness_opts o = { 0 };
    struct harness_daemon *d = NULL;

    o.config_text = config_text;
    o.workers = workers;
    CHECK(harness_start(&o, &d));
    return d;
}

/* ---- load ----------------------------------------------------------------- */

/* One thread hammering one connection with pipelined requests. */
struct hammer {
    struct harness_daemon *d;
    const char *req;            /* one request line, without '\n' */
    unsigned total;             /* requests to send */
    unsigned depth;             /* pipelined per batch */
    unsigned allowed;           /* out: "OK true" replies */
    unsigned denied;            /* out: "OK false" replies */
    unsigned other;             /* out: anything else */
    uint64_t max_batch_ms;      /* out: slowest batch, send to last reply */
    int err;                    /* out: negative errno */
};

static inline void *hammer_run(void *arg)
{
    struct hammer *h = arg;
    struct harness_conn *c = NULL;
    char line[HARNESS_LINE];
    char *batch = NULL;
    size_t len = strlen(h->req), blen;
    unsigned sent = 0;
    int r;

    r = harness_connect(h->d, HARNESS_UNIX, &c);
    if (r < 0) {
        h->err = r;
        return NULL;
    }
    batch = malloc((len + 1) * h->depth);
    if (!batch) {
        h->err = -ENOMEM;
        goto out;
    }
    while (sent < h->total) {
        unsigned n = h->total - sent < h->depth ? h->total - sent : h->depth;
        uint64_t t0 = harness_now_ms(), dt;

        blen = 0;
        for (unsigned i = 0; i < n; i++) {
            memcpy(batch + blen, h->req, len);
            batch[blen + len] = '\n';
            blen += len + 1;
        }
        r = harness_send(c, batch, blen);
        for (unsigned i = 0; r >= 0 && i < n; i++) {
            r = (int)harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS);
            if (r < 0)
                break;
            if (strncmp(line, "OK true ", 8) == 0)
                h->allowed++;
            else if (strncmp(line, "OK false ", 9) == 0)
                h->denied++;
            else
                h->other++;
        }
        if (r < 0) {
            h->err = r;
            goto out;
        }
        dt = harness_now_ms() - t0;
        if (dt > h->max_batch_ms)
            h->max_batch_ms = dt;
        sent += n;
    }
out:
    free(batch);
    harness_close(c);
    return NULL;
}

/* Runs @n hammers concurrently and waits for all of them. */
static inline void hammer_all(struct hammer *hs, unsigned n)
{
    pthread_t *t = harness_scratch(n * sizeof(*t));

    assert_non_null(t);
    for (unsigned i = 0; i < n; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hammer_run, &hs[i]), 0);
    for (unsigned i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    for (unsigned i = 0; i < n; i++) {
        if (hs[i].err < 0)
            fail_msg("hammer %u: %s", i, strerror(-hs[i].err));
    }
}

#endif
