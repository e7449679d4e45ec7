/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for libclient's API layer and its connection: the public API's
 * argument errors, and the socket engine (client_conn.c) driven through a
 * handle against a scripted fake server in a thread (timeouts, garbage, ERR
 * busy, transparent reconnect, REFILL hints that cannot be sent).  The wire
 * codec has its own test (test_client_wire.c).  No divvyd:
 * tests/integration/test_client*.c and test_fastpath*.c use the real one.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "divvy_private.h"
#include "proto.h"

static void clear_env(void)
{
    unsetenv("DIVVY_ADDRESS");
    unsetenv("DIVVY_PATH");
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- API arguments --------------------------------------------------------- */

static void test_client_api_null_handle(void **state)
{
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    struct divvy_request rq = { .kv = &kv, .n_kv = 1 };
    char **lines;
    size_t n;

    (void)state;
    assert_int_equal(divvy_hit(NULL, &kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_take(NULL, 2, &kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_peek(NULL, &kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_reset(NULL, &kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_hitv(NULL, &res, "a", "b", NULL), -EINVAL);
    assert_int_equal(divvy_hit_many(NULL, &rq, 1, &res), -EINVAL);
    assert_int_equal(divvy_command(NULL, "PING", &lines, &n), -EINVAL);
    assert_int_equal(divvy_set_timeouts(NULL, 1, 1), -EINVAL);
    assert_non_null(divvy_errmsg(NULL));
    divvy_close(NULL);
    divvy_lines_free(NULL, 0);
}

static void test_client_api_open_errors(void **state)
{
    struct divvy *h = (struct divvy *)0x1;

    (void)state;
    clear_env();
    assert_int_equal(divvy_open(NULL, DIVVY_AUTO, NULL), -EINVAL);
    assert_int_equal(divvy_open(NULL, 7, &h), -EINVAL);
    assert_int_equal(divvy_open("tcp:nohost", DIVVY_AUTO, &h), -EINVAL);
    assert_int_equal(divvy_open("http://x", DIVVY_SOCKET_ONLY, &h), -EINVAL);
    assert_true(h == (struct divvy *)0x1);      /* untouched on failure */
    /* FAST_ONLY without a daemon to hand the table over. */
    assert_int_equal(divvy_open("unix:/nonexistent-divvy/divvy.sock", DIVVY_FAST_ONLY, &h),
                     -ENOENT);
    /* tcp: has no fast path (the memfds come over a Unix socket only). */
    assert_int_equal(divvy_open("tcp:127.0.0.1:1", DIVVY_FAST_ONLY, &h), -EOPNOTSUPP);
    setenv("DIVVY_PATH", "sometimes", 1);
    assert_int_equal(divvy_open("unix:/x.sock", DIVVY_AUTO, &h), -EINVAL);
    setenv("DIVVY_PATH", "fast", 1);
    assert_int_equal(divvy_open("unix:/nonexistent-divvy/divvy.sock", DIVVY_SOCKET_ONLY, &h),
                     -ENOENT);
    setenv("DIVVY_ADDRESS", "bogus", 1);
    assert_int_equal(divvy_open(NULL, DIVVY_SOCKET_ONLY, &h), -EINVAL);
    clear_env();
    assert_true(h == (struct divvy *)0x1);
}

static void test_client_api_state_dir(void **state)
{
    struct divvy *h = NULL;

    (void)state;
    clear_env();
    /* The state directory is divvyd's to say (FAST); nothing is guessed. */
    assert_int_equal(divvy_open(NULL, DIVVY_AUTO, &h), 0);
    assert_string_equal(h->conn.addr.path, "/run/divvy/divvy.sock");
    assert_string_equal(h->fast.dir, "");
    divvy_close(h);
    assert_int_equal(divvy_open("unix:rel.sock", DIVVY_SOCKET_ONLY, &h), 0);
    assert_int_equal(h->mode, DIVVY_SOCKET_ONLY);
    divvy_close(h);
    /* tcp: is socket-only, whatever the flags asked. */
    assert_int_equal(divvy_open("tcp:127.0.0.1:8321", DIVVY_AUTO, &h), 0);
    assert_int_equal(h->mode, DIVVY_SOCKET_ONLY);
    assert_false(h->fast.privileged);
    divvy_close(h);
    setenv("DIVVY_ADDRESS", "unix:/a/b.sock", 1);
    setenv("DIVVY_PATH", "socket", 1);
    assert_int_equal(divvy_open(NULL, DIVVY_AUTO, &h), 0);
    assert_string_equal(h->conn.addr.path, "/a/b.sock");
    assert_int_equal(h->mode, DIVVY_SOCKET_ONLY);
    assert_int_equal(h->fast.privileged, geteuid() == 0);
    divvy_close(h);
    clear_env();
}

static void test_client_api_bad_arguments(void **state)
{
    struct divvy_result res = { .size = sizeof(res) }, many[2];
    struct divvy_kv kv[2] = { { "a", "b" }, { "c", "d\"" } };
    struct divvy_request rq[2] = { { .kv = kv, .n_kv = 1 }, { .kv = kv, .n_kv = 2 } };
    struct divvy *h = NULL;
    char **lines = NULL;
    size_t n = 0;

    (void)state;
    clear_env();
    assert_int_equal(divvy_open("unix:/nonexistent-divvy/divvy.sock", DIVVY_AUTO, &h), 0);
    assert_string_equal(divvy_errmsg(h), "");
    res.size = 0;
    assert_int_equal(divvy_hit(h, kv, 1, &res), -EINVAL);
    assert_non_null(strstr(divvy_errmsg(h), "size"));
    res.size = sizeof(res) - 1;
    assert_int_equal(divvy_peek(h, kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_hit(h, kv, 1, NULL), -EINVAL);
    res.size = sizeof(res);
    assert_int_equal(divvy_hit(h, kv, 2, &res), -EINVAL);
    assert_non_null(strstr(divvy_errmsg(h), "invalid key/value"));
    assert_int_equal(divvy_take(h, 0, kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_take(h, PROTO_TAKE_MAX + 1, kv, 1, &res), -EINVAL);
    assert_int_equal(divvy_hitv(h, &res, "a", (char *)NULL, NULL), -EINVAL);
    /* A batch is checked as a whole before anything is decided or sent. */
    many[0].size = many[1].size = sizeof(many[0]);
    assert_int_equal(divvy_hit_many(h, rq, 2, many), -EINVAL);
    assert_non_null(strstr(divvy_errmsg(h), "request 1"));
    many[1].size = 0;
    rq[1].n_kv = 1;
    assert_int_equal(divvy_hit_many(h, rq, 2, many), -EINVAL);
    assert_int_equal(divvy_hit_many(h, rq, 0, many), 0);
    assert_int_equal(divvy_hit_many(h, NULL, 1, many), -EINVAL);
    assert_int_equal(divvy_command(h, "PING\nPING", &lines, &n), -EINVAL);
    assert_int_equal(divvy_command(h, "", &lines, &n), -EINVAL);
    assert_int_equal(divvy_command(h, "\r", &lines, &n), -EINVAL);
    assert_int_equal(divvy_command(h, "PING", NULL, &n), -EINVAL);
    assert_null(lines);
    assert_int_equal(divvy_set_timeouts(h, 0, -5), 0);
    assert_int_equal(h->conn.connect_ms, CLIENT_TIMEOUT_DEFAULT);
    assert_int_equal(h->conn.request_ms, CLIENT_TIMEOUT_DEFAULT);
    /* Valid, but nobody listens: a clean error naming the socket. */
    assert_int_equal(divvy_hit(h, kv, 1, &res), -ENOENT);
    assert_non_null(strstr(divvy_errmsg(h), "/nonexistent-divvy/divvy.sock"));
    /* Success clears the message. */
    assert_int_equal(divvy_set_timeouts(h, 50, 60), 0);
    assert_string_equal(divvy_errmsg(h), "");
    assert_int_equal(h->conn.connect_ms, 50);
    divvy_close(h);
}

/* ---- a scripted fake divvyd ------------------------------------------------- */

enum fake_act {
    FAKE_REPLY,             /* send .text for the next request line */
    FAKE_CLOSE,             /* read the next request line, close without a reply */
    FAKE_SILENT,            /* read the next request line, never answer (until stopped) */
    FAKE_HANGUP,            /* close the connection now, before reading anything */
};

struct fake_step {
    enum fake_act act;
    const char *text;
};

struct fake {
    char dir[48], path[96];
    int lfd;
    const struct fake_step *steps;
    size_t n_steps;
    const char *ignore;         /* request lines starting so take no step (REFILL hints) */
    int stop_pipe[2];
    pthread_t thread;
    char got[8192];             /* request lines received, in order */
    size_t got_len;
    int connections;
};

/* Reads one line from @fd into f->got; 0 at EOF, 1 with a line, -1 when stopped. */
static int fake_read_line(struct fake *f, int fd)
{
    for (;;) {
        struct pollfd p[2] = { { .fd = fd, .events = POLLIN },
                               { .fd = f->stop_pipe[0], .events = POLLIN } };
        char c;
        ssize_t n;

        if (poll(p, 2, -1) < 0)
            return -1;
        if (p[1].revents)
            return -1;
        n = read(fd, &c, 1);
        if (n <= 0)
            return 0;
        if (f->got_len < sizeof(f->got) - 1)
            f->got[f->got_len++] = c;
        if (c == '\n')
            return 1;
    }
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    size_t step = 0;
    int fd = -1;

    while (step < f->n_steps) {
        const struct fake_step *s = &f->steps[step];
        size_t start = f->got_len;
        int r;

        if (fd < 0) {
            struct pollfd p[2] = { { .fd = f->lfd, .events = POLLIN },
                                   { .fd = f->stop_pipe[0], .events = POLLIN } };

            if (poll(p, 2, -1) < 0 || p[1].revents)
                break;
            fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0)
                break;
            f->connections++;
        }
        if (s->act == FAKE_HANGUP) {
            close(fd);
            fd = -1;
            step++;
            continue;
        }
        r = fake_read_line(f, fd);
        if (r < 0)
            break;
        if (r == 0) {                   /* the client hung up: next connection */
            close(fd);
            fd = -1;
            continue;
        }
        /* Like divvyd's REFILL: read, never answered. */
        if (f->ignore && strncmp(f->got + start, f->ignore, strlen(f->ignore)) == 0)
            continue;
        step++;
        if (s->act == FAKE_REPLY) {
            if (write(fd, s->text, strlen(s->text)) < 0)
                break;
        } else if (s->act == FAKE_CLOSE) {
            close(fd);
            fd = -1;
        } else if (s->act == FAKE_SILENT) {
            struct pollfd p = { .fd = f->stop_pipe[0], .events = POLLIN };

            poll(&p, 1, -1);
            break;
        }
    }
    /* Keep the last connection open until stopped, as a daemon would. */
    if (fd >= 0) {
        struct pollfd p = { .fd = f->stop_pipe[0], .events = POLLIN };

        poll(&p, 1, -1);
        close(fd);
    }
    return NULL;
}

/* Listens on f->path (again, after the test closed and unlinked it). */
static void fake_listen(struct fake *f, int backlog)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };

    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
    f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(f->lfd >= 0);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(f->lfd, backlog), 0);
}

/* Starts the fake's thread (for a fake started with @run false). */
static void fake_run(struct fake *f)
{
    assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_start(struct fake *f, const struct fake_step *steps, size_t n, int backlog,
                       bool run)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/divvy-ut.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/fake.sock", f->dir);
    fake_listen(f, backlog);
    assert_int_equal(pipe2(f->stop_pipe, O_CLOEXEC), 0);
    f->steps = steps;
    f->n_steps = n;
    if (run)
        fake_run(f);
    else
        f->thread = 0;
}

static void fake_stop(struct fake *f)
{
    if (write(f->stop_pipe[1], "x", 1) < 0)
        fail_msg("stop pipe");
    if (f->thread)
        pthread_join(f->thread, NULL);
    close(f->lfd);
    close(f->stop_pipe[0]);
    close(f->stop_pipe[1]);
    unlink(f->path);
    rmdir(f->dir);
}

static struct divvy *fake_open(struct fake *f)
{
    char addr[160];
    struct divvy *h = NULL;

    snprintf(addr, sizeof(addr), "unix:%s", f->path);
    assert_int_equal(divvy_open(addr, DIVVY_SOCKET_ONLY, &h), 0);
    return h;
}

static void test_client_conn_replies(void **state)
{
    static const struct fake_step steps[] = {
        { FAKE_REPLY, "OK true 4 60 lbl\n" },
        { FAKE_REPLY, "OK false 0 12\n" },
        { FAKE_REPLY, "ERR forbidden \"RESET needs root or the admin group\"\n" },
        { FAKE_REPLY, "OK 2\nrule=0 id=a\nrule=1 id=b\n" },
        { FAKE_REPLY, "ERR unknown-command \"Unrecognized command: FOO\"\n" },
        { FAKE_REPLY, "OK true 3 60 lbl\n" },
    };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/a b" }, { "m", "GET" } };
    struct divvy *h;
    struct fake f;
    char **lines = NULL;
    size_t n = 0;

    (void)state;
    fake_start(&f, steps, sizeof(steps) / sizeof(steps[0]), 8, true);
    h = fake_open(&f);
    assert_int_equal(divvy_hit(h, kv, 2, &res), 0);
    assert_int_equal(res.allowed, 1);
    assert_int_equal(res.credit, 4);
    assert_string_equal(res.rule, "lbl");
    assert_int_equal(res.fast_path, 0);
    assert_int_equal(divvy_peek(h, kv, 1, &res), 0);
    assert_int_equal(res.allowed, 0);
    assert_int_equal(res.reset_seconds, 12);
    assert_string_equal(res.rule, "");
    assert_int_equal(divvy_reset(h, kv, 1, &res), -EPERM);
    assert_string_equal(divvy_errmsg(h), "divvyd: forbidden: RESET needs root or the admin group");
    assert_int_equal(divvy_command(h, "RULES", &lines, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(lines[0], "OK 2");
    assert_string_equal(lines[2], "rule=1 id=b");
    divvy_lines_free(lines, n);
    assert_int_equal(divvy_command(h, "FOO", &lines, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(lines[0], "ERR unknown-command \"Unrecognized command: FOO\"");
    divvy_lines_free(lines, n);
    assert_int_equal(divvy_take(h, 7, kv, 1, &res), 0);
    assert_int_equal(res.credit, 3);
    divvy_close(h);
    fake_stop(&f);
    assert_string_equal(f.got, "TAKE 1 m=GET path=\"/a b\"\nPEEK path=\"/a b\"\n"
                               "RESET path=\"/a b\"\nRULES\nFOO\nTAKE 7 path=\"/a b\"\n");
    assert_int_equal(f.connections, 1);
}

static void test_client_conn_garbage(void **state)
{
    static const struct fake_step steps[] = {
        { FAKE_REPLY, "OK maybe 1 2\n" },
        { FAKE_REPLY, "OK true 1 2\nOK true 1 2\n" },   /* one reply too many */
        { FAKE_REPLY, "ERR busy \"too many connections\"\n" },
        { FAKE_REPLY, "OK true 9 9\n" },
    };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    struct divvy *h;
    struct fake f;

    (void)state;
    fake_start(&f, steps, sizeof(steps) / sizeof(steps[0]), 8, true);
    h = fake_open(&f);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), -EPROTO);
    assert_non_null(strstr(divvy_errmsg(h), "OK maybe 1 2"));
    assert_int_equal(h->conn.fd, -1);                /* closed: its state is unknown */
    assert_int_equal(divvy_hit(h, &kv, 1, &res), -EPROTO);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), -EBUSY);
    assert_int_equal(h->conn.fd, -1);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 9);
    divvy_close(h);
    fake_stop(&f);
    assert_int_equal(f.connections, 4);
}

/* A kept connection that died between calls is replaced, and the request
 * sent again, once; a connection that dies during its first call is not. */
static void test_client_conn_reconnect(void **state)
{
    static const struct fake_step steps[] = {
        { FAKE_REPLY, "OK true 5 60 r\n" },
        { FAKE_HANGUP, NULL },                          /* "daemon restarted" */
        { FAKE_REPLY, "OK true 4 60 r\n" },
        { FAKE_CLOSE, NULL },                           /* dies mid-request */
        { FAKE_CLOSE, NULL },                           /* fresh connection dies too */
        { FAKE_REPLY, "OK true 3 60 r\n" },
    };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    struct divvy *h;
    struct fake f;
    int r;

    (void)state;
    fake_start(&f, steps, sizeof(steps) / sizeof(steps[0]), 8, true);
    h = fake_open(&f);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 5);
    /* The fake hangs up the first connection, before or after this call's
     * send: either way nothing was answered, so the call goes out again. */
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 4);
    /* Kept connection closed without a reply: retried once on a new one,
     * which also closes: the call fails cleanly. */
    r = divvy_hit(h, &kv, 1, &res);
    assert_true(r == -ECONNRESET || r == -EPIPE);
    assert_non_null(strstr(divvy_errmsg(h), "closed"));
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 3);
    divvy_close(h);
    fake_stop(&f);
    assert_int_equal(f.connections, 4);
}

static void test_client_conn_request_timeout(void **state)
{
    static const struct fake_step steps[] = { { FAKE_SILENT, NULL } };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    struct divvy *h;
    struct fake f;
    uint64_t t0, dt;

    (void)state;
    fake_start(&f, steps, 1, 8, true);
    h = fake_open(&f);
    assert_int_equal(divvy_set_timeouts(h, 1000, 150), 0);
    t0 = now_ms();
    assert_int_equal(divvy_hit(h, &kv, 1, &res), -ETIMEDOUT);
    dt = now_ms() - t0;
    assert_true(dt >= 140 && dt < 1000);
    assert_non_null(strstr(divvy_errmsg(h), "150 ms"));
    assert_int_equal(h->conn.fd, -1);
    divvy_close(h);
    fake_stop(&f);
}

/* A listener that never accepts, with its backlog full: connect times out. */
static void test_client_conn_connect_timeout(void **state)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    struct divvy *h;
    struct fake f;
    int fill[4], n_fill = 0, r;
    uint64_t t0, dt;

    (void)state;
    fake_start(&f, NULL, 0, 0, false);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f.path);
    for (int i = 0; i < 4; i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

        assert_true(fd >= 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            close(fd);
            break;
        }
        fill[n_fill++] = fd;
    }
    assert_true(n_fill >= 1 && n_fill < 4);
    h = fake_open(&f);
    assert_int_equal(divvy_set_timeouts(h, 200, 1000), 0);
    t0 = now_ms();
    r = divvy_hit(h, &kv, 1, &res);
    dt = now_ms() - t0;
    assert_int_equal(r, -ETIMEDOUT);
    assert_true(dt >= 190 && dt < 1000);
    assert_non_null(strstr(divvy_errmsg(h), "connect"));
    divvy_close(h);
    for (int i = 0; i < n_fill; i++)
        close(fill[i]);
    fake_stop(&f);
}

/* Pipelining: a batch is one write; replies are matched in order. */
static void test_client_conn_batch(void **state)
{
    static const struct fake_step steps[] = {
        { FAKE_REPLY, "OK true 2 60 a\n" },
        { FAKE_REPLY, "ERR bad-request \"nope\"\n" },
        { FAKE_REPLY, "OK false 0 60 a\n" },
    };
    struct divvy_kv kv[3] = { { "a", "1" }, { "a", "2" }, { "a", "3" } };
    struct divvy_request rq[3] = { { 0, &kv[0], 1 }, { 4, &kv[1], 1 }, { 1, &kv[2], 1 } };
    struct divvy_result res[3];
    struct divvy *h;
    struct fake f;

    (void)state;
    for (int i = 0; i < 3; i++)
        res[i].size = sizeof(res[i]);
    fake_start(&f, steps, 3, 8, true);
    h = fake_open(&f);
    assert_int_equal(divvy_hit_many(h, rq, 3, res), -EINVAL);
    assert_non_null(strstr(divvy_errmsg(h), "request 1: divvyd: bad-request: nope"));
    assert_int_equal(res[0].credit, 2);
    assert_string_equal(res[0].rule, "a");
    assert_int_equal(res[2].allowed, 0);
    assert_int_equal(res[2].reset_seconds, 60);
    divvy_close(h);
    fake_stop(&f);
    assert_string_equal(f.got, "TAKE 1 a=1\nTAKE 4 a=2\nTAKE 1 a=3\n");
}

/* ---- REFILL hints (client_conn_hint) ------------------------------------------ */

#define HINT_FILL   "REFILL rule=api index=0 actor=fill\n"
#define HINT_LONG   4000        /* bytes: more than the smallest socket buffer takes at once */

/* A valid REFILL line of HINT_LONG bytes (its actor "hhh..."), NUL-terminated. */
static const char *long_hint(void)
{
    static char line[HINT_LONG + 1];
    int n = snprintf(line, sizeof(line), "REFILL rule=api index=0 actor=");

    memset(line + n, 'h', HINT_LONG - 1 - (size_t)n);
    line[HINT_LONG - 1] = '\n';
    line[HINT_LONG] = '\0';
    return line;
}

/* Runs client_conn_hint() and returns how long it took, in ms. */
static uint64_t timed_hint(struct divvy *h, const char *line, size_t len)
{
    uint64_t t0 = now_ms();

    client_conn_hint(&h->conn, line, len);
    return now_ms() - t0;
}

/* Shrinks @fd's send buffer to the least the kernel allows and fills it
 * with whole HINT_FILL lines until send() says EAGAIN; returns how many. */
static int fill_socket(int fd)
{
    int one = 1, n = 0;
    ssize_t r;

    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &one, sizeof(one)), 0);
    while ((r = send(fd, HINT_FILL, strlen(HINT_FILL), MSG_DONTWAIT | MSG_NOSIGNAL)) ==
           (ssize_t)strlen(HINT_FILL))
        n++;
    /* A short fill line would break the framing this test is about. */
    if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
        fail_msg("filling the socket: send returned %zd (%s)", r, strerror(errno));
    assert_true(n > 0 && n < 1000);
    return n;
}

/* Nobody listens (Unix: no socket file; TCP: refused): the hint is dropped,
 * at once and silently, and the next request fails, then succeeds, exactly
 * as it would have without it. */
static void test_client_conn_hint_no_listener(void **state)
{
    static const struct fake_step steps[] = { { FAKE_REPLY, "OK true 4 60 r\n" } };
    static const char hint[] = "REFILL rule=api index=0 actor=alice\n";
    struct sockaddr_in sin = { .sin_family = AF_INET };
    socklen_t sl = sizeof(sin);
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    struct divvy *h;
    struct fake f;
    char addr[64];
    int fd;

    (void)state;
    fake_start(&f, steps, 1, 8, false);
    close(f.lfd);
    unlink(f.path);
    h = fake_open(&f);
    assert_true(timed_hint(h, hint, sizeof(hint) - 1) < 1000);
    assert_int_equal(h->conn.fd, -1);
    assert_string_equal(divvy_errmsg(h), "");   /* the hit it rides on succeeded */
    assert_int_equal(divvy_hit(h, &kv, 1, &res), -ENOENT);
    assert_non_null(strstr(divvy_errmsg(h), f.path));
    /* divvyd starts: the hint left nothing behind to send first. */
    fake_listen(&f, 8);
    fake_run(&f);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 4);
    assert_string_equal(divvy_errmsg(h), "");
    divvy_close(h);
    fake_stop(&f);
    assert_string_equal(f.got, "TAKE 1 a=b\n");
    assert_int_equal(f.connections, 1);

    /* TCP: a loopback port nobody listens on. */
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
    close(fd);
    snprintf(addr, sizeof(addr), "tcp:127.0.0.1:%u", ntohs(sin.sin_port));
    assert_int_equal(divvy_open(addr, DIVVY_SOCKET_ONLY, &h), 0);
    assert_true(timed_hint(h, hint, sizeof(hint) - 1) < 1000);
    assert_int_equal(h->conn.fd, -1);
    assert_string_equal(divvy_errmsg(h), "");
    assert_int_equal(divvy_hit(h, &kv, 1, &res), -ECONNREFUSED);
    assert_non_null(strstr(divvy_errmsg(h), addr + 4));
    divvy_close(h);
}

/* divvyd not reading, the socket buffer full: the hint is dropped at once
 * (a blocking send would wait the 2 s of SO_SNDTIMEO), nothing of it is
 * sent, the connection is kept, and once divvyd reads again the next
 * request follows the earlier lines, whole. */
static void test_client_conn_hint_full_buffer(void **state)
{
    static const struct fake_step steps[] = { { FAKE_REPLY, "OK true 7 60 r\n" } };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    const char *big = long_hint();
    struct divvy *h;
    struct fake f;
    char want[sizeof(f.got)];
    size_t off = 0;
    int fd, n_fill;

    (void)state;
    fake_start(&f, steps, 1, 8, false);         /* accepts nothing, reads nothing yet */
    f.ignore = "REFILL ";
    h = fake_open(&f);
    assert_int_equal(divvy_set_timeouts(h, 2000, 2000), 0);
    /* The first hint connects (the backlog takes it) and is sent whole. */
    client_conn_hint(&h->conn, HINT_FILL, strlen(HINT_FILL));
    assert_true(h->conn.fd >= 0);
    fd = h->conn.fd;
    n_fill = fill_socket(fd);
    assert_true(timed_hint(h, big, HINT_LONG) < 1000);
    assert_int_equal(h->conn.fd, fd);
    assert_string_equal(divvy_errmsg(h), "");
    /* divvyd reads again: the request waits for room, then goes out whole. */
    fake_run(&f);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 7);
    assert_int_equal(h->conn.fd, fd);
    divvy_close(h);
    fake_stop(&f);
    assert_int_equal(f.connections, 1);
    for (int i = 0; i <= n_fill; i++)
        off += (size_t)snprintf(want + off, sizeof(want) - off, "%s", HINT_FILL);
    snprintf(want + off, sizeof(want) - off, "TAKE 1 a=b\n");
    assert_string_equal(f.got, want);
}

/* Room for part of the hint only: the kernel takes a prefix of the line.
 * That connection is closed at once (divvyd then sees a torn last line and
 * EOF, never a request glued to it), and the next request goes whole on a
 * new one. */
static void test_client_conn_hint_short_write(void **state)
{
    static const struct fake_step steps[] = { { FAKE_REPLY, "OK true 7 60 r\n" } };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv = { "a", "b" };
    const size_t fill_len = strlen(HINT_FILL);
    const char *big = long_hint();
    static char got[64 * 1024];
    struct divvy *h;
    struct fake f;
    size_t len = 0, torn;
    bool eof = false;
    int peer, fd, n_fill;

    (void)state;
    fake_start(&f, steps, 1, 8, false);
    h = fake_open(&f);
    assert_int_equal(divvy_set_timeouts(h, 2000, 2000), 0);
    client_conn_hint(&h->conn, HINT_FILL, strlen(HINT_FILL));
    assert_true(h->conn.fd >= 0);
    fd = h->conn.fd;
    peer = accept4(f.lfd, NULL, NULL, SOCK_CLOEXEC);
    assert_true(peer >= 0);
    n_fill = fill_socket(fd);
    assert_true(timed_hint(h, big, HINT_LONG) < 1000);      /* full: nothing sent */
    assert_int_equal(h->conn.fd, fd);
    /* Free one small line's worth: the next send gets one chunk in, not two. */
    assert_int_equal(read(peer, got, fill_len), (ssize_t)fill_len);
    assert_true(timed_hint(h, big, HINT_LONG) < 1000);
    /* What divvyd would read: the rest of the fill, a torn hint, EOF. */
    for (;;) {
        struct pollfd p = { .fd = peer, .events = POLLIN };
        ssize_t n;

        if (poll(&p, 1, 500) == 0)
            break;                      /* no EOF: the connection was kept */
        n = read(peer, got + len, sizeof(got) - len);
        assert_true(n >= 0);
        if (n == 0) {
            eof = true;
            break;
        }
        len += (size_t)n;
        assert_true(len < sizeof(got));
    }
    close(peer);
    assert_true(len >= (size_t)n_fill * fill_len);
    for (int i = 0; i < n_fill; i++)
        assert_memory_equal(got + (size_t)i * fill_len, HINT_FILL, fill_len);
    torn = len - (size_t)n_fill * fill_len;
    if ((torn == 0 && !eof) || torn == HINT_LONG) {
        /* How much room one line's read frees is the kernel's accounting: on
         * this VM's kernel one chunk of the hint, not all and not none.  A
         * kernel that gives room for all or none provokes no short write
         * (EAGAIN is test_client_conn_hint_full_buffer's case). */
        fprintf(stderr, "  SKIP: no short write provoked (%zu of %d bytes sent)\n", torn,
                HINT_LONG);
        divvy_close(h);
        fake_stop(&f);
        skip();
    }
    assert_true(torn > 0 && torn < HINT_LONG);
    assert_memory_equal(got + (size_t)n_fill * fill_len, big, torn);
    assert_int_equal(h->conn.fd, -1);
    assert_true(eof);
    assert_string_equal(divvy_errmsg(h), "");
    /* The next request: a new connection, its line whole. */
    fake_run(&f);
    assert_int_equal(divvy_hit(h, &kv, 1, &res), 0);
    assert_int_equal(res.credit, 7);
    divvy_close(h);
    fake_stop(&f);
    assert_string_equal(f.got, "TAKE 1 a=b\n");
    assert_int_equal(f.connections, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_api_null_handle),
        cmocka_unit_test(test_client_api_open_errors),
        cmocka_unit_test(test_client_api_state_dir),
        cmocka_unit_test(test_client_api_bad_arguments),
        cmocka_unit_test(test_client_conn_replies),
        cmocka_unit_test(test_client_conn_garbage),
        cmocka_unit_test(test_client_conn_reconnect),
        cmocka_unit_test(test_client_conn_request_timeout),
        cmocka_unit_test(test_client_conn_connect_timeout),
        cmocka_unit_test(test_client_conn_batch),
        cmocka_unit_test(test_client_conn_hint_no_listener),
        cmocka_unit_test(test_client_conn_hint_full_buffer),
        cmocka_unit_test(test_client_conn_hint_short_write),
    };

    /* The library never raises SIGPIPE; make sure the fake server cannot either. */
    signal(SIGPIPE, SIG_IGN);
    clear_env();
    return cmocka_run_group_tests_name("client", tests, NULL, NULL);
}

