/* SPDX-License-Identifier: MIT */
/*
 * Integration: divvy-bench ($DIVVY_BUILD/divvy-bench) against a real divvyd.
 * Every run is a child process with stdout and stderr on pipes, killed by PID
 * when it outlives its deadline, so a hang fails the test instead of hanging
 * it.  Short runs (-t 0.3) over the raw protocol (Unix socket with several
 * pipelined connections, TCP on 127.0.0.1) and through libdivvy (socket,
 * fast, auto) exit 0 and print the documented -q line with replies and no
 * errors; divvyd's STATS confirm the hits went where the mode says (the
 * socket, or the shared-memory fast path).  The full report's counts,
 * rate and percentiles agree with each other and with divvyd.  Usage
 * errors exit 2 with the usage on stderr, an address nobody listens on
 * exits 1, and so does --lib fast without access to the state directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

#define OUT_SIZE    16384
#define RUN_MS      8000        /* one -t 0.3 run, with room for a sanitizer build */
#define STATS_MS    3000        /* divvyd's counters may trail its last reply */
#define DURATION    "0.3"
#define MAX_ARGS    32

static const char bench_conf[] =
    "table = { fast_slots = 65536; };\n"
    "rules = (\n"
    "    { match = { path = \"/bench\"; }; label = \"bench\"; credit_limit = 1000000000L;\n"
    "      reset_seconds = 3600; actor = \"actor\"; fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

/* ---- running divvy-bench --------------------------------------------------------- */

struct run {
    const char *argv[MAX_ARGS + 2];
    const char *state_dir;      /* DIVVY_STATE_DIR for the child; NULL: unset */
    int out_fd, err_fd;         /* the pipes' write ends, for the child */
    int status;                 /* exit code, or 128 + signal */
    char cmd[1024];             /* the arguments, for messages */
    char *out, *err;            /* NUL-terminated, harness_scratch() */
};

static const char *bench_path(void)
{
    static char path[HARNESS_PATH];
    const char *b = getenv("DIVVY_BUILD");

    snprintf(path, sizeof(path), "%s/divvy-bench", b && b[0] ? b : "build");
    return path;
}

static int bench_child(void *arg)
{
    struct run *r = arg;
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(r->out_fd, 1) < 0 ||
        dup2(r->err_fd, 2) < 0)
        return 120;
    /* libdivvy reads these; only the test decides them, not the caller's shell. */
    unsetenv("DIVVY_ADDRESS");
    unsetenv("DIVVY_PATH");
    unsetenv("DIVVY_STATE_DIR");
    if (r->state_dir && setenv("DIVVY_STATE_DIR", r->state_dir, 1) < 0)
        return 121;
    execv(r->argv[0], (char *const *)r->argv);
    dprintf(2, "exec %s: %s\n", r->argv[0], strerror(errno));
    return 122;
}

static void collect(int fd, char *buf, size_t *used, bool *open_)
{
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof(tmp));

    if (n <= 0) {
        if (n == 0 || errno != EINTR)
            *open_ = false;
        return;
    }
    /* The excess of a runaway output is dropped, the pipe still drained. */
    if (*used < OUT_SIZE - 1) {
        size_t k = (size_t)n < OUT_SIZE - 1 - *used ? (size_t)n : OUT_SIZE - 1 - *used;

        memcpy(buf + *used, tmp, k);
        *used += k;
        buf[*used] = '\0';
    }
}

static int remaining(uint64_t deadline)
{
    uint64_t now = harness_now_ms();

    return now < deadline ? (int)(deadline - now) : 0;
}

/*
 * Spawns the child (registered with the harness, so teardown kills it if an
 * assertion fires first), reads both pipes until EOF or the deadline, then
 * reaps it; harness_reap() kills it by PID when it is still running then.
 * No assertion here: the pipes are closed on every path.
 */
static int run_collect(struct run *r, int timeout_ms)
{
    int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, rc;
    size_t used_o = 0, used_e = 0;
    bool open_o = true, open_e = true;
    uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
    pid_t pid;

    r->out[0] = r->err[0] = '\0';
    if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
        rc = -errno;
        goto out;
    }
    r->out_fd = po[1];
    r->err_fd = pe[1];
    rc = harness_spawn(bench_child, r, &pid);
    if (rc < 0)
        goto out;
    close(po[1]);
    close(pe[1]);
    po[1] = pe[1] = -1;
    while ((open_o || open_e) && remaining(deadline) > 0) {
        struct pollfd pfd[2] = { { .fd = open_o ? po[0] : -1, .events = POLLIN },
                                 { .fd = open_e ? pe[0] : -1, .events = POLLIN } };

        if (poll(pfd, 2, remaining(deadline)) <= 0)
            continue;
        if (pfd[0].revents)
            collect(po[0], r->out, &used_o, &open_o);
        if (pfd[1].revents)
            collect(pe[0], r->err, &used_e, &open_e);
    }
    rc = harness_reap(pid, remaining(deadline) + 200, &r->status);
out:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0)
            close(po[i]);
        if (pe[i] >= 0)
            close(pe[i]);
    }
    return rc;
}

/* Runs divvy-bench with @args (NULL-terminated) and checks its exit status
 * (@want < 0: any).  @state_dir goes to the child's DIVVY_STATE_DIR. */
static struct run *bench(const char *state_dir, int want, const char *const *args)
{
    struct run *r = harness_scratch(sizeof(*r));
    size_t n = 0;
    int rc;

    assert_non_null(r);
    r->out = harness_scratch(OUT_SIZE);
    r->err = harness_scratch(OUT_SIZE);
    assert_non_null(r->out);
    assert_non_null(r->err);
    r->argv[n++] = bench_path();
    if (access(r->argv[0], X_OK) < 0)
        fail_msg("%s: %s (build it with make; set DIVVY_BUILD)", r->argv[0], strerror(errno));
    for (; args[n - 1]; n++) {
        assert_true(n <= MAX_ARGS);
        r->argv[n] = args[n - 1];
        snprintf(r->cmd + strlen(r->cmd), sizeof(r->cmd) - strlen(r->cmd), " %s", args[n - 1]);
    }
    r->argv[n] = NULL;
    r->state_dir = state_dir;
    rc = run_collect(r, RUN_MS);
    if (rc == -ETIMEDOUT)
        fail_msg("divvy-bench%s: still running after %d ms, killed\nstdout: %s\nstderr: %s",
                 r->cmd, RUN_MS, r->out, r->err);
    if (rc < 0)
        fail_msg("divvy-bench%s: %s", r->cmd, strerror(-rc));
    if (want >= 0 && r->status != want)
        fail_msg("divvy-bench%s: exit %d, want %d\nstdout: %s\nstderr: %s", r->cmd, r->status,
                 want, r->out, r->err);
    return r;
}

#define BENCH(dir, want, ...) bench((dir), (want), (const char *const[]){ __VA_ARGS__, NULL })

/* ---- output ------------------------------------------------------------------------ */

struct quiet {
    double rate, p50, p99, p999;
    unsigned long long errors;
};

/* -q: exactly one line "hits/s p50 p99 p999 errors", a run with replies and
 * no errors, and nothing on stderr. */
static struct quiet expect_quiet_ok(const struct run *r)
{
    struct quiet q = { 0 };
    int end = -1;

    if (r->out[0] < '0' || r->out[0] > '9' ||
        sscanf(r->out, "%lf %lf %lf %lf %llu%n", &q.rate, &q.p50, &q.p99, &q.p999, &q.errors,
               &end) != 5 ||
        end < 0 || strcmp(r->out + end, "\n") != 0)
        fail_msg("divvy-bench%s: -q printed \"%s\", want one line "
                 "\"hits/s p50 p99 p999 errors\"", r->cmd, r->out);
    if (!(q.rate > 0) || q.errors != 0)
        fail_msg("divvy-bench%s: %.0f hits/s, %llu errors, want > 0 and 0\nstderr: %s", r->cmd,
                 q.rate, q.errors, r->err);
    if (!(q.p50 >= 0 && q.p50 <= q.p99 && q.p99 <= q.p999))
        fail_msg("divvy-bench%s: percentiles out of order: \"%s\"", r->cmd, r->out);
    if (r->err[0])
        fail_msg("divvy-bench%s: stderr not empty: %s", r->cmd, r->err);
    return q;
}

/* The line of @out that starts with @prefix, up to its '\n', into @buf. */
static const char *line_of(const struct run *r, const char *prefix, char *buf, size_t size)
{
    const char *p = r->out;

    while (p && *p) {
        if (strncmp(p, prefix, strlen(prefix)) == 0) {
            size_t len = strcspn(p, "\n");

            snprintf(buf, size, "%.*s", (int)len, p);
            return buf;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    fail_msg("divvy-bench%s: no line \"%s...\" in:\n%s", r->cmd, prefix, r->out);
    return NULL;
}

struct report {
    unsigned long long hits, allowed, denied, rate, batches;
    double p50, p99, p999, max;
};

/* The full report: every line there, consistent with itself, no errors. */
static struct report expect_report_ok(const struct run *r, const char *target)
{
    struct report rep = { 0 };
    char line[512], want[512];
    int end;

    snprintf(want, sizeof(want), "target           %s", target);
    assert_string_equal(line_of(r, "target ", line, sizeof(line)), want);
    line_of(r, "connections ", line, sizeof(line));
    end = -1;
    if (sscanf(line_of(r, "hits ", line, sizeof(line)),
               "hits             %llu (allowed %llu, denied %llu)%n", &rep.hits, &rep.allowed,
               &rep.denied, &end) != 3 || line[end] != '\0')
        fail_msg("bad hits line: \"%s\"", line);
    end = -1;
    if (sscanf(line_of(r, "hits/s ", line, sizeof(line)), "hits/s           %llu%n", &rep.rate,
               &end) != 1 || line[end] != '\0')
        fail_msg("bad hits/s line: \"%s\"", line);
    end = -1;
    if (sscanf(line_of(r, "batch latency ", line, sizeof(line)),
               "batch latency    p50 %lf us, p99 %lf us, p99.9 %lf us, max %lf us "
               "(%llu batches)%n", &rep.p50, &rep.p99, &rep.p999, &rep.max, &rep.batches,
               &end) != 5 || line[end] != '\0')
        fail_msg("bad latency line: \"%s\"", line);
    assert_string_equal(line_of(r, "errors ", line, sizeof(line)),
                        "errors           0 ERR replies, 0 unexpected replies, "
                        "0 connection errors, 0 connections refused");
    if (rep.hits == 0 || rep.allowed != rep.hits || rep.denied != 0 || rep.rate == 0)
        fail_msg("divvy-bench%s: want every hit allowed and a rate:\n%s", r->cmd, r->out);
    /* The rate is hits over the elapsed time, which is at least -t. */
    if ((double)rep.hits / (double)rep.rate < 0.29 || (double)rep.hits / (double)rep.rate > 5)
        fail_msg("divvy-bench%s: %llu hits at %llu hits/s is not a %s s run", r->cmd, rep.hits,
                 rep.rate, DURATION);
    if (!(rep.p50 >= 0 && rep.p50 <= rep.p99 && rep.p99 <= rep.p999 && rep.p999 <= rep.max))
        fail_msg("divvy-bench%s: percentiles out of order:\n%s", r->cmd, r->out);
    return rep;
}

/* ---- divvyd ------------------------------------------------------------------------- */

static struct harness_daemon *start_bench(void)
{
    struct harness_opts o = { .config_name = "bench.conf", .config_text = bench_conf,
                              .workers = 2 };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    return d;
}

static const char *unix_target(struct harness_daemon *d)
{
    char *s = harness_scratch(HARNESS_PATH + 8);

    assert_non_null(s);
    snprintf(s, HARNESS_PATH + 8, "unix:%s", d->sock);
    return s;
}

/* Polls STATS until @name is in [@min, @max]; returns it. */
static long long expect_stat(struct harness_daemon *d, const char *name, long long min,
                             long long max)
{
    uint64_t deadline = harness_now_ms() + STATS_MS;
    long long v;

    for (;;) {
        v = harness_daemon_stat(d, name);
        if (v >= min && v <= max)
            return v;
        if (harness_now_ms() >= deadline)
            break;
        harness_pause_ms(20);
    }
    fail_msg("divvyd STATS %s=%lld, want %lld..%lld", name, v, min, max);
    return v;
}

/* ---- the raw protocol ---------------------------------------------------------------- */

static void test_bench_tool_unix_pipelined(void **state)
{
    struct harness_daemon *d = start_bench();
    struct run *r;

    (void)state;
    r = BENCH(NULL, 0, "--unix", d->sock, "-c", "2", "-d", "8", "-k", "1000", "-t", DURATION,
              "-q");
    expect_quiet_ok(r);
    expect_stat(d, "hits_total", 16, (long long)1e15);
    /* The protocol itself: nothing went through the shared-memory table. */
    assert_int_equal(harness_daemon_stat(d, "fast_path_hits"), 0);
}

/* --resp: DIVVY.HIT arrays to a resp: listener (docs/resp.md), counted by divvyd. */
static void test_bench_tool_resp(void **state)
{
    struct harness_opts o = { .config_name = "bench.conf", .config_text = bench_conf,
                              .workers = 2, .resp = true };
    struct harness_daemon *d = NULL;
    struct run *r;

    (void)state;
    CHECK(harness_start(&o, &d));
    r = BENCH(NULL, 0, "--unix", d->resp_sock, "--resp", "-c", "2", "-d", "8", "-k", "1000", "-t",
              DURATION, "-q");
    expect_quiet_ok(r);
    expect_stat(d, "hits_total", 16, (long long)1e15);
}

static void test_bench_tool_tcp(void **state)
{
    struct harness_daemon *d = start_bench();
    char addr[64];
    struct run *r;

    (void)state;
    assert_true(d->tcp_port > 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", d->tcp_port);
    r = BENCH(NULL, 0, "--tcp", addr, "-c", "2", "-d", "4", "-t", DURATION, "-q");
    expect_quiet_ok(r);
    expect_stat(d, "hits_total", 8, (long long)1e15);
    assert_int_equal(harness_daemon_stat(d, "fast_path_hits"), 0);
}

/* ---- through libdivvy ------------------------------------------------------------------ */

static void test_bench_tool_lib_socket(void **state)
{
    struct harness_daemon *d = start_bench();
    struct run *r;

    (void)state;
    /* -d 4: divvy_hit_many; -d 1: divvy_hit. */
    r = BENCH(d->state, 0, "--unix", d->sock, "--lib", "socket", "-c", "2", "-d", "4", "-t",
              DURATION, "-q");
    expect_quiet_ok(r);
    expect_stat(d, "hits_total", 8, (long long)1e15);
    r = BENCH(d->state, 0, "--unix", d->sock, "--lib", "socket", "-t", DURATION, "-q");
    expect_quiet_ok(r);
    /* DIVVY_SOCKET_ONLY, although the table was reachable. */
    assert_int_equal(harness_daemon_stat(d, "fast_path_hits"), 0);
}

static void test_bench_tool_lib_fast(void **state)
{
    struct harness_daemon *d = start_bench();
    struct run *r;

    (void)state;
    r = BENCH(d->state, 0, "--unix", d->sock, "--lib", "fast", "-c", "2", "-d", "4", "-t",
              DURATION, "-q");
    expect_quiet_ok(r);
    /* Every hit decided in the benchmark's process, none by the daemon. */
    expect_stat(d, "fast_path_hits", 8, (long long)1e15);
    assert_int_equal(harness_daemon_stat(d, "hits_total"), 0);
    /* --shm is the same: more hits in-process, still none by the daemon. */
    {
        long long before = harness_daemon_stat(d, "fast_path_hits");

        r = BENCH(d->state, 0, "--unix", d->sock, "--shm", "-t", DURATION, "-q");
        expect_quiet_ok(r);
        expect_stat(d, "fast_path_hits", before + 1, (long long)1e15);
        assert_int_equal(harness_daemon_stat(d, "hits_total"), 0);
    }

    /* A tcp: address has no fast path (the memfds come over a Unix socket
     * only): the run cannot start. */
    {
        char addr[32];

        snprintf(addr, sizeof(addr), "127.0.0.1:%d", d->tcp_port);
        r = BENCH(NULL, 1, "--tcp", addr, "--lib", "fast", "-t", DURATION, "-q");
    }
    if (!strstr(r->err, "divvy-bench: ") || r->out[0])
        fail_msg("--lib fast without the table: want a message on stderr only\n"
                 "stdout: %s\nstderr: %s", r->out, r->err);
}

static void test_bench_tool_lib_auto(void **state)
{
    struct harness_daemon *d = start_bench();
    struct run *r;

    (void)state;
    r = BENCH(d->state, 0, "--unix", d->sock, "--lib", "auto", "-d", "4", "-t", DURATION, "-q");
    expect_quiet_ok(r);
    /* A fast_path rule and a reachable table: auto takes the fast path. */
    expect_stat(d, "fast_path_hits", 4, (long long)1e15);
}

/* ---- the full report ------------------------------------------------------------------- */

static void test_bench_tool_full_report(void **state)
{
    struct harness_daemon *d = start_bench();
    const char *target = unix_target(d);
    char want[HARNESS_PATH + 64];
    struct report rep;
    struct run *r;
    double secs;
    int end;

    (void)state;
    r = BENCH(NULL, 0, "--unix", d->sock, "-c", "1", "-d", "4", "-k", "100", "-t", DURATION);
    rep = expect_report_ok(r, target);
    /* The elapsed time is at least -t; a loaded machine may take longer. */
    end = -1;
    if (sscanf(line_of(r, "connections ", want, sizeof(want)),
               "connections      1 (depth 4, keys 100, %lf s)%n", &secs, &end) != 1 ||
        want[end] != '\0' || secs < 0.3 || secs > 5)
        fail_msg("bad connections line: \"%s\"", want);
    /* A batch is sampled once all its replies are in: hits = batches x depth. */
    assert_int_equal(rep.hits, rep.batches * 4);
    assert_true(rep.p50 > 0);
    /* divvyd answered exactly the hits the benchmark counted. */
    expect_stat(d, "hits_total", (long long)rep.hits, (long long)rep.hits);

    r = BENCH(d->state, 0, "--unix", d->sock, "--lib", "fast", "-k", "100", "-t", DURATION);
    snprintf(want, sizeof(want), "%s (libdivvy, fast path)", target);
    rep = expect_report_ok(r, want);
    assert_int_equal(rep.hits, rep.batches);
    /* Flushed to the table when the handle closes, before the tool exits. */
    expect_stat(d, "fast_path_hits", (long long)rep.hits, (long long)rep.hits);
    if (r->err[0])
        fail_msg("stderr not empty: %s", r->err);
}

/* ---- failures ---------------------------------------------------------------------------- */

static void expect_usage(const struct run *r)
{
    if (!strstr(r->err, "usage: divvy-bench") || r->out[0])
        fail_msg("divvy-bench%s: want the usage on stderr only\nstdout: %s\nstderr: %s",
                 r->cmd, r->out, r->err);
}

static void test_bench_tool_usage_errors(void **state)
{
    /* No daemon: a run that got past the options would fail with 1, not 2. */
    const char *nowhere = "/nonexistent/divvy.sock";
    struct run *r;

    (void)state;
    expect_usage(BENCH(NULL, 2, "--unix", nowhere, "--bogus", "-t", DURATION));
    expect_usage(BENCH(NULL, 2, "--unix", nowhere, "-c", "0", "-t", DURATION));
    expect_usage(BENCH(NULL, 2, "-c", "1", "-t", DURATION, "-q"));
    expect_usage(BENCH(NULL, 2, "--unix", nowhere, "--tcp", "127.0.0.1:1", "-t", DURATION));
    expect_usage(BENCH(NULL, 2, "--unix", nowhere, "-d", "0", "-t", DURATION));
    expect_usage(BENCH(NULL, 2, "--unix", nowhere, "-t", "0"));
    expect_usage(BENCH(NULL, 2, "--unix", nowhere, "--lib", "shm", "-t", DURATION));
    expect_usage(BENCH(NULL, 2, "--unix", nowhere, "-t", DURATION, "extra"));

    r = BENCH(NULL, 0, "--help");
    if (!strstr(r->out, "--unix PATH") || !strstr(r->out, "EXIT STATUS") || r->err[0])
        fail_msg("--help: want the manual on stdout only\nstdout: %s\nstderr: %s", r->out,
                 r->err);
}

/* Exit 1 with "divvy-bench: <target>: <reason>" on stderr, nothing on stdout. */
static void expect_cannot_run(const struct run *r, const char *target, int err)
{
    char want[HARNESS_PATH + 128];

    snprintf(want, sizeof(want), "divvy-bench: %s: %s", target, strerror(err));
    if (!strstr(r->err, want) || r->out[0])
        fail_msg("divvy-bench%s: want \"%s\" on stderr only\nstdout: %s\nstderr: %s", r->cmd,
                 want, r->out, r->err);
}

static void test_bench_tool_nobody_listening(void **state)
{
    struct harness_daemon *d = start_bench();
    struct sockaddr_in sin = { .sin_family = AF_INET,
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    socklen_t len = sizeof(sin);
    char absent[HARNESS_PATH + 16], target[HARNESS_PATH + 32], tcp[64];
    struct run *r;
    int fd;

    (void)state;
    /* No file at all. */
    snprintf(absent, sizeof(absent), "%s/absent.sock", d->dir);
    r = BENCH(NULL, 1, "--unix", absent, "-c", "2", "-t", DURATION, "-q");
    snprintf(target, sizeof(target), "unix:%s", absent);
    expect_cannot_run(r, target, ENOENT);
    /* Through libdivvy too (it connects lazily: divvy-bench PINGs first). */
    r = BENCH(NULL, 1, "--unix", absent, "--lib", "socket", "-t", DURATION, "-q");
    expect_cannot_run(r, target, ENOENT);
    r = BENCH(NULL, 1, "--unix", absent, "--lib", "auto", "-t", DURATION, "-q");
    expect_cannot_run(r, target, ENOENT);

    /* A socket that is bound but not listening refuses. */
    if (snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/deaf.sock", d->dir) >=
        (int)sizeof(sun.sun_path))
        fail_msg("%s: too long for a Unix socket path", d->dir);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        close(fd);
        fail_msg("bind %s: %s", sun.sun_path, strerror(errno));
    }
    r = BENCH(NULL, -1, "--unix", sun.sun_path, "-t", DURATION, "-q");
    close(fd);
    assert_int_equal(r->status, 1);
    snprintf(target, sizeof(target), "unix:%s", sun.sun_path);
    expect_cannot_run(r, target, ECONNREFUSED);

    /* The same over TCP: a loopback port held but not listening. */
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) < 0) {
        close(fd);
        fail_msg("bind 127.0.0.1:0: %s", strerror(errno));
    }
    snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", ntohs(sin.sin_port));
    r = BENCH(NULL, -1, "--tcp", tcp, "-t", DURATION, "-q");
    close(fd);
    assert_int_equal(r->status, 1);
    snprintf(target, sizeof(target), "tcp:%s", tcp);
    expect_cannot_run(r, target, ECONNREFUSED);

    /* divvyd saw none of it. */
    assert_int_equal(harness_daemon_stat(d, "hits_total"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bench_tool_unix_pipelined, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_bench_tool_tcp, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_bench_tool_resp, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_bench_tool_lib_socket, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_bench_tool_lib_fast, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_bench_tool_lib_auto, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_bench_tool_full_report, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_bench_tool_usage_errors, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_bench_tool_nobody_listening, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("bench_tool", tests, NULL, NULL);
}
