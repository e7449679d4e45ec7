/* SPDX-License-Identifier: MIT */
/*
 * Fault injection: misbehaving clients (DESIGN sections 5 and 9).
 *
 * - Clients SIGKILLed at random moments: socket clients in the middle of a
 *   pipelined batch, clients that die halfway through writing a request
 *   line, and libdivvy clients in the middle of fast-path hits.  divvyd
 *   keeps answering at once, every connection is released, and each
 *   client's counter holds exactly what it was answered plus at most the
 *   requests it had in flight (a pipeline; one CAS; one torn line, which
 *   divvyd answers at EOF like the last line of a half-closed connection
 *   when what arrived parses); later hits are exact.
 * - 1,000 idle connections (some with half a request sent) while client
 *   processes run pipelined load: the load is served without an error and
 *   within a bound, and every idle connection still answers afterwards.
 * - Several clients that pipeline requests and never read a reply, with a
 *   small server.max_output_bytes: each is dropped, while the clients that
 *   read keep exact counts and bounded latency.  (test_limits checks one
 *   lazy RULES reader; this is the many-small-replies case, under load.)
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "divvy.h"
#include "harness.h"

#define LIMIT        1000000000LL
#define BOUND_MS     2000       /* generous: the box has 2 CPUs, ASan may run */

static const char clients_conf[] =
    "server = { max_connections = 4000; };\n"
    "table = { slots = 8192; fast_slots = 8192; };\n"
    "rules = (\n"
    "    { match = { path = \"/sock\"; }; label = \"sock\"; actor = \"user\";\n"
    "      credit_limit = 1000000000L; reset_seconds = 3600; },\n"
    "    { match = { path = \"/fast\"; }; label = \"fast\"; actor = \"user\";\n"
    "      credit_limit = 1000000000L; reset_seconds = 3600; fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static struct harness_daemon *start_clients(const char *conf)
{
    struct harness_opts o = { .config_name = "clients.conf", .config_text = conf, .workers = 2 };
    struct harness_daemon *d = NULL;
    char addr[HARNESS_PATH + 8];

    CHECK(harness_start(&o, &d));
    snprintf(addr, sizeof(addr), "unix:%s", d->sock);
    assert_int_equal(setenv("DIVVY_ADDRESS", addr, 1), 0);
    unsetenv("DIVVY_PATH");
    return d;
}

static void *shared_new(size_t size)
{
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    assert_true(m != MAP_FAILED);
    memset(m, 0, size);
    return m;
}

/* Polls STATS until connections == @want (deadline 10 s). */
static long long wait_connections(struct harness_conn *c, long long want)
{
    uint64_t deadline = harness_now_ms() + 10000;
    long long n = -1;

    do {
        CHECK(harness_get_stat(c, "connections", &n));
        if (n == want)
            break;
        harness_pause_ms(10);
    } while (harness_now_ms() < deadline);
    return n;
}

/* PEEK's credit for @path and @user. */
static long long peek_credit(struct harness_conn *c, const char *path, const char *user)
{
    char req[128], r[HARNESS_LINE], id[64];
    bool allowed;
    long long credit, secs;

    snprintf(req, sizeof(req), "PEEK path=%s user=%s", path, user);
    CHECK(harness_cmd(c, req, r, sizeof(r)));
    if (harness_parse_ok_rule(r, &allowed, &credit, &secs, id, sizeof(id)) < 0)
        fail_msg("%s -> %s", req, r);
    return credit;
}

/* ---- clients killed mid-request ------------------------------------------------------ */

#define KILL_ROUNDS  10
#define KILL_KINDS   4          /* per round: two pipeliners, a torn line, a fast-path client */
#define KILL_DEPTH   64

enum kill_kind { KILL_PIPELINE, KILL_PIPELINE2, KILL_TORN, KILL_FAST };

struct kill_child {
    volatile int ready;         /* under way: may be killed now */
    long long sent, answered;
    long long last_credit;      /* exact chain: each reply one below the previous */
    long bad;
    char first_bad[200];
};

struct kill_shared {
    struct kill_child child[KILL_ROUNDS][KILL_KINDS];
};

struct kill_arg {
    struct harness_daemon *d;
    struct kill_child *k;
    int round, kind;
};

static void kill_bad(struct kill_child *k, const char *what, const char *line)
{
    if (k->bad++ == 0)
        snprintf(k->first_bad, sizeof(k->first_bad), "%s: %.150s", what, line);
}

static void kill_user(const struct kill_arg *a, char *buf, size_t size)
{
    snprintf(buf, size, "k%d-%d", a->round, a->kind);
}

/* Pipelined HITs on its own actor until killed. */
static int kill_pipeliner(struct kill_arg *a)
{
    struct kill_child *k = a->k;
    struct harness_conn *c;
    char user[32], *batch = malloc(KILL_DEPTH * 48), line[HARNESS_LINE];
    size_t len = 0;

    kill_user(a, user, sizeof(user));
    if (!batch || harness_connect(a->d, a->kind == KILL_PIPELINE ? HARNESS_UNIX : HARNESS_TCP,
                                  &c) < 0)
        return 1;
    for (int i = 0; i < KILL_DEPTH; i++)
        len += (size_t)sprintf(batch + len, "HIT path=/sock user=%s\n", user);
    k->last_credit = LIMIT;
    for (;;) {
        k->sent += KILL_DEPTH;
        if (harness_send(c, batch, len) < 0)
            return 2;
        for (int i = 0; i < KILL_DEPTH; i++) {
            bool allowed;
            long long credit, secs;

            if (harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS) < 0)
                return 3;
            if (harness_parse_ok(line, &allowed, &credit, &secs) < 0 || !allowed ||
                credit != k->last_credit - 1)
                kill_bad(k, "pipeliner reply", line);
            k->last_credit = credit;
            k->answered++;
        }
        k->ready = 1;
    }
}

/* Complete requests (all answered), then half a line, then it waits to die. */
static int kill_torn(struct kill_arg *a)
{
    struct kill_child *k = a->k;
    struct harness_conn *c;
    char user[32], line[HARNESS_LINE], req[128];
    size_t cut;
    int n;

    kill_user(a, user, sizeof(user));
    if (harness_connect(a->d, a->round % 2 ? HARNESS_TCP : HARNESS_UNIX, &c) < 0)
        return 1;
    k->last_credit = LIMIT;
    for (int i = 0; i < 10 + a->round; i++) {
        bool allowed;
        long long credit, secs;

        k->sent++;
        n = snprintf(req, sizeof(req), "HIT path=/sock user=%s", user);
        if (harness_cmd(c, req, line, sizeof(line)) < 0)
            return 2;
        if (harness_parse_ok(line, &allowed, &credit, &secs) < 0 || !allowed ||
            credit != k->last_credit - 1)
            kill_bad(k, "torn-line client reply", line);
        k->last_credit = credit;
        k->answered++;
    }
    /* Up to the whole line (round 0), never its newline. */
    n = snprintf(req, sizeof(req), "HIT path=/sock user=%s", user);
    cut = a->round == 0 ? (size_t)n : 1 + (size_t)(a->round * 7) % (size_t)n;
    k->sent++;
    if (harness_send(c, req, cut) < 0)
        return 3;
    k->ready = 1;
    for (;;)
        harness_pause_ms(100);
}

/* libdivvy fast-path hits on its own actor until killed. */
static int kill_fast(struct kill_arg *a)
{
    struct kill_child *k = a->k;
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/fast" }, { "user", NULL } };
    struct divvy *h = NULL;
    char user[32];

    kill_user(a, user, sizeof(user));
    kv[1].value = user;
    if (divvy_open(NULL, DIVVY_AUTO, &h) < 0)
        return 1;
    k->last_credit = LIMIT;
    for (long i = 0;; i++) {
        k->sent++;
        if (divvy_hit(h, kv, 2, &res) < 0) {
            kill_bad(k, "libdivvy", divvy_errmsg(h));
            continue;
        }
        if (!res.allowed || (long long)res.credit != k->last_credit - 1 || !res.fast_path) {
            char msg[96];

            snprintf(msg, sizeof(msg), "allowed %d credit %llu fast %d", res.allowed,
                     (unsigned long long)res.credit, res.fast_path);
            kill_bad(k, "libdivvy answer", msg);
        }
        k->last_credit = (long long)res.credit;
        k->answered++;
        if (i == 1000)
            k->ready = 1;
    }
}

static int kill_main(void *p)
{
    struct kill_arg *a = p;

    switch (a->kind) {
    case KILL_PIPELINE:
    case KILL_PIPELINE2:
        return kill_pipeliner(a);
    case KILL_TORN:
        return kill_torn(a);
    default:
        return kill_fast(a);
    }
}

static void test_fault_clients_killed_mid_request(void **state)
{
    struct harness_daemon *d = start_clients(clients_conf);
    struct kill_shared *sh = shared_new(sizeof(*sh));
    struct kill_arg args[KILL_ROUNDS][KILL_KINDS];
    struct harness_conn *admin;
    struct divvy *h = NULL;
    struct divvy_result res = { .size = sizeof(res) };
    unsigned seed = (unsigned)harness_now_ms();
    uint64_t slowest_ping = 0;
    int torn_applied = 0;
    long long in_flight_applied = 0;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &admin));
    /* The fast path is live before the fast-path clients start. */
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    {
        uint64_t deadline = harness_now_ms() + 5000;

        do {
            CHECK(divvy_peek(h, (struct divvy_kv[]){ { "path", "/fast" }, { "user", "w" } }, 2,
                             &res));
            if (!res.fast_path)
                harness_pause_ms(20);
        } while (!res.fast_path && harness_now_ms() < deadline);
        assert_int_equal(res.fast_path, 1);
    }
    for (int round = 0; round < KILL_ROUNDS; round++) {
        pid_t pids[KILL_KINDS];
        uint64_t deadline = harness_now_ms() + 10000, t0;

        for (int kind = 0; kind < KILL_KINDS; kind++) {
            args[round][kind] = (struct kill_arg){ .d = d, .k = &sh->child[round][kind],
                                                   .round = round, .kind = kind };
            CHECK(harness_spawn(kill_main, &args[round][kind], &pids[kind]));
        }
        for (int kind = 0; kind < KILL_KINDS; kind++)
            while (!sh->child[round][kind].ready && harness_now_ms() < deadline)
                harness_pause_ms(1);
        for (int kind = 0; kind < KILL_KINDS; kind++)
            if (!sh->child[round][kind].ready)
                fail_msg("round %d: client %d never got going", round, kind);
        /* Random moments, in a random order. */
        {
            int order[KILL_KINDS] = { 0, 1, 2, 3 };

            for (int n = KILL_KINDS - 1; n > 0; n--) {
                int j = (int)(rand_r(&seed) % (unsigned)(n + 1)), t = order[n];

                order[n] = order[j];
                order[j] = t;
            }
            for (int n = 0; n < KILL_KINDS; n++) {
                int kind = order[n], status;

                harness_pause_ms((unsigned)(rand_r(&seed) % 8));
                assert_int_equal(kill(pids[kind], SIGKILL), 0);
                CHECK(harness_reap(pids[kind], 10000, &status));
                if (status != 128 + SIGKILL)
                    fail_msg("round %d: client %d exited %d before it was killed (%s)", round,
                             kind, status, sh->child[round][kind].first_bad);
            }
        }
        /* divvyd answers at once. */
        t0 = harness_now_ms();
        EXPECT_REPLY(admin, "PING", "OK pong");
        if (harness_now_ms() - t0 > slowest_ping)
            slowest_ping = harness_now_ms() - t0;
    }
    /* Every connection of the dead clients is gone (the admin's stays). */
    assert_int_equal(wait_connections(admin, 1), 1);
    assert_true(slowest_ping < BOUND_MS);

    /* Each counter: what was answered, plus at most what was in flight. */
    for (int round = 0; round < KILL_ROUNDS; round++) {
        for (int kind = 0; kind < KILL_KINDS; kind++) {
            struct kill_child *k = &sh->child[round][kind];
            char user[32];
            long long used, extra, max_extra;

            if (k->bad)
                fail_msg("round %d client %d: %ld bad answers, first: %s", round, kind, k->bad,
                         k->first_bad);
            kill_user(&args[round][kind], user, sizeof(user));
            used = LIMIT - peek_credit(admin, kind == KILL_FAST ? "/fast" : "/sock", user);
            extra = used - k->answered;
            max_extra = k->sent - k->answered;
            /* A pipeline in flight, one torn line, one hit between its CAS and its report. */
            if (extra < 0 || extra > max_extra || (kind >= KILL_TORN && extra > 1))
                fail_msg("round %d client %d (%s): counter used %lld, %lld answered, %lld sent",
                         round, kind, user, used, k->answered, k->sent);
            if (kind == KILL_TORN)
                torn_applied += (int)extra;
            else
                in_flight_applied += extra;
            /* The counter goes on exactly from there, on both paths. */
            if (kind == KILL_FAST) {
                CHECK(divvy_hit(h, (struct divvy_kv[]){ { "path", "/fast" }, { "user", user } },
                                2, &res));
                assert_int_equal(res.fast_path, 1);
                assert_int_equal((long long)res.credit, LIMIT - used - 1);
            } else {
                char req[64];

                snprintf(req, sizeof(req), "HIT path=/sock user=%s", user);
                EXPECT_OK(admin, req, true, LIMIT - used - 1, 3590, 3600);
            }
        }
    }
    fprintf(stderr, "  %d clients killed; slowest PING %llu ms; %lld requests in flight applied; "
            "%d of %d torn lines applied at EOF\n", KILL_ROUNDS * KILL_KINDS,
            (unsigned long long)slowest_ping, in_flight_applied, torn_applied, KILL_ROUNDS);
    /* New keys can still be claimed on both paths. */
    EXPECT_OK(admin, "HIT path=/sock user=after", true, LIMIT - 1, 3600, 3600);
    CHECK(divvy_hit(h, (struct divvy_kv[]){ { "path", "/fast" }, { "user", "after" } }, 2, &res));
    assert_int_equal((long long)res.credit, LIMIT - 1);
    divvy_close(h);
    harness_close(admin);
    munmap(sh, sizeof(*sh));
}

/* ---- 1,000 idle connections ---------------------------------------------------------- */

#define IDLE_CONNS   1000
#define LOAD_PROCS   3
#define LOAD_BATCHES 1500
#define LOAD_DEPTH   32

struct load_shared {
    struct {
        long answered, bad;
        uint64_t slowest_ms;
        char first_bad[200];
    } p[LOAD_PROCS];
};

struct load_arg {
    struct harness_daemon *d;
    struct load_shared *sh;
    int id;
    const char *tag;
};

/* Pipelined batches on its own actor; each reply exact, each batch timed. */
static int load_proc(void *arg)
{
    struct load_arg *a = arg;
    struct harness_conn *c;
    char batch[LOAD_DEPTH * 48], line[HARNESS_LINE];
    long long expect = LIMIT;
    size_t len = 0;

    if (harness_connect(a->d, a->id % 2 ? HARNESS_TCP : HARNESS_UNIX, &c) < 0)
        return 1;
    for (int i = 0; i < LOAD_DEPTH; i++)
        len += (size_t)sprintf(batch + len, "HIT path=/sock user=%s-%d\n", a->tag, a->id);
    for (int b = 0; b < LOAD_BATCHES; b++) {
        uint64_t t0 = harness_now_ms(), dt;

        if (harness_send(c, batch, len) < 0)
            return 2;
        for (int i = 0; i < LOAD_DEPTH; i++) {
            bool allowed;
            long long credit, secs;

            if (harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS) < 0)
                return 3;
            expect--;
            if (harness_parse_ok(line, &allowed, &credit, &secs) < 0 || !allowed ||
                credit != expect) {
                if (a->sh->p[a->id].bad++ == 0)
                    snprintf(a->sh->p[a->id].first_bad, sizeof(a->sh->p[0].first_bad), "%.150s",
                             line);
                expect = credit;
            }
            a->sh->p[a->id].answered++;
        }
        dt = harness_now_ms() - t0;
        if (dt > a->sh->p[a->id].slowest_ms)
            a->sh->p[a->id].slowest_ms = dt;
    }
    harness_close(c);
    return 0;
}

/* Runs the load processes; returns the wall time and checks their results. */
static uint64_t run_load(struct harness_daemon *d, const char *tag)
{
    struct load_shared *sh = shared_new(sizeof(*sh));
    struct load_arg args[LOAD_PROCS];
    pid_t pids[LOAD_PROCS];
    uint64_t t0 = harness_now_ms(), slowest = 0, dt;
    int status;

    for (int i = 0; i < LOAD_PROCS; i++) {
        args[i] = (struct load_arg){ .d = d, .sh = sh, .id = i, .tag = tag };
        CHECK(harness_spawn(load_proc, &args[i], &pids[i]));
    }
    for (int i = 0; i < LOAD_PROCS; i++) {
        CHECK(harness_reap(pids[i], 60000, &status));
        if (status != 0)
            fail_msg("%s load process %d exited %d", tag, i, status);
    }
    dt = harness_now_ms() - t0;
    for (int i = 0; i < LOAD_PROCS; i++) {
        if (sh->p[i].bad)
            fail_msg("%s load process %d: %ld bad replies, first: %s", tag, i, sh->p[i].bad,
                     sh->p[i].first_bad);
        assert_int_equal(sh->p[i].answered, LOAD_BATCHES * LOAD_DEPTH);
        if (sh->p[i].slowest_ms > slowest)
            slowest = sh->p[i].slowest_ms;
    }
    fprintf(stderr, "  load %s: %d hits in %llu ms, slowest batch of %d %llu ms\n", tag,
            LOAD_PROCS * LOAD_BATCHES * LOAD_DEPTH, (unsigned long long)dt, LOAD_DEPTH,
            (unsigned long long)slowest);
    if (slowest > BOUND_MS)
        fail_msg("%s: a batch took %llu ms (bound %d ms)", tag, (unsigned long long)slowest,
                 BOUND_MS);
    munmap(sh, sizeof(*sh));
    return dt;
}

static void test_fault_clients_idle_connections(void **state)
{
    struct rlimit rl;
    struct harness_daemon *d;
    struct harness_conn *admin, **idle;
    char r[HARNESS_LINE];
    long long conns;

    (void)state;
    /* Room for 1,000 connections here and in divvyd (which inherits it). */
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 4 * IDLE_CONNS) {
        rl.rlim_cur = rl.rlim_max < 4 * IDLE_CONNS ? rl.rlim_max : 4 * IDLE_CONNS;
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    if (rl.rlim_cur < 2 * IDLE_CONNS + 100) {
        fprintf(stderr, "  SKIP: RLIMIT_NOFILE hard limit %llu is too low for %d connections\n",
                (unsigned long long)rl.rlim_max, IDLE_CONNS);
        skip();
    }
    d = start_clients(clients_conf);
    idle = harness_scratch(IDLE_CONNS * sizeof(*idle));
    assert_non_null(idle);
    CHECK(harness_connect(d, HARNESS_UNIX, &admin));
    assert_int_equal(wait_connections(admin, 1), 1);
    run_load(d, "alone");

    /* Idle: half on each transport; every tenth has sent half a request. */
    for (int i = 0; i < IDLE_CONNS; i++) {
        CHECK(harness_connect(d, i % 2 ? HARNESS_TCP : HARNESS_UNIX, &idle[i]));
        if (i % 10 == 0)
            CHECK(harness_sendf(idle[i], "HIT path=/sock user=idle-%d", i));
    }
    conns = wait_connections(admin, IDLE_CONNS + 1);
    assert_int_equal(conns, IDLE_CONNS + 1);
    run_load(d, "with-idle");
    /* The load's own connections are gone (divvyd sees their EOF async). */
    conns = wait_connections(admin, IDLE_CONNS + 1);
    assert_int_equal(conns, IDLE_CONNS + 1);

    /* Every idle connection still works: the torn ones finish their line. */
    for (int i = 0; i < IDLE_CONNS; i++) {
        if (i % 10 == 0) {
            CHECK(harness_sendf(idle[i], " n=1\n"));
            CHECK(harness_recv_line(idle[i], r, sizeof(r), HARNESS_TIMEOUT_MS));
            if (strcmp(r, "OK true 999999999 3600") != 0)
                fail_msg("idle connection %d: \"%s\"", i, r);
        } else {
            CHECK(harness_sendf(idle[i], "PING\n"));
        }
    }
    for (int i = 0; i < IDLE_CONNS; i++) {
        if (i % 10 == 0)
            continue;
        CHECK(harness_recv_line(idle[i], r, sizeof(r), HARNESS_TIMEOUT_MS));
        if (strcmp(r, "OK pong") != 0)
            fail_msg("idle connection %d: \"%s\"", i, r);
    }
    for (int i = 0; i < IDLE_CONNS; i++)
        harness_close(idle[i]);
    assert_int_equal(wait_connections(admin, 1), 1);
    harness_close(admin);
}

/* ---- clients that never read ---------------------------------------------------------- */

#define LAZY_PROCS   3

static const char lazy_conf[] =
    "server = { max_output_bytes = 4096; };\n"
    "rules = (\n"
    "    { match = { path = \"/sock\"; }; label = \"sock\"; actor = \"user\";\n"
    "      credit_limit = 1000000000L; reset_seconds = 3600; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

struct lazy_shared {
    volatile int go;
    struct {
        long long sent_bytes;
        int dropped;            /* 1: the daemon closed the connection */
        int err;
    } p[LAZY_PROCS];
};

struct lazy_arg {
    struct harness_daemon *d;
    struct lazy_shared *sh;
    int id;
};

/* Writes HITs as fast as the socket takes them and never reads. */
static int lazy_proc(void *arg)
{
    struct lazy_arg *a = arg;
    struct harness_conn *c;
    char batch[100 * 40];
    size_t len = 0;
    int rcvbuf = 4096;
    uint64_t deadline = harness_now_ms() + 20000;

    if (harness_connect(a->d, a->id % 2 ? HARNESS_TCP : HARNESS_UNIX, &c) < 0)
        return 1;
    setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    for (int i = 0; i < 100; i++)
        len += (size_t)sprintf(batch + len, "HIT path=/sock user=lazy-%d\n", a->id);
    while (!a->sh->go)
        harness_pause_ms(1);
    while (harness_now_ms() < deadline) {
        struct pollfd pfd = { .fd = c->fd, .events = POLLOUT };
        ssize_t n;

        if (poll(&pfd, 1, 100) < 0)
            continue;
        if (pfd.revents & (POLLERR | POLLHUP)) {
            a->sh->p[a->id].dropped = 1;
            return 0;
        }
        if (!(pfd.revents & POLLOUT))
            continue;
        n = send(c->fd, batch, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            a->sh->p[a->id].dropped = errno == EPIPE || errno == ECONNRESET;
            a->sh->p[a->id].err = errno;
            return 0;
        }
        a->sh->p[a->id].sent_bytes += n;
    }
    return 0;
}

static void test_fault_clients_never_read(void **state)
{
    struct harness_daemon *d = start_clients(lazy_conf);
    struct lazy_shared *sh = shared_new(sizeof(*sh));
    struct lazy_arg args[LAZY_PROCS];
    struct harness_conn *admin;
    pid_t pids[LAZY_PROCS];
    int status;

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &admin));
    assert_int_equal(wait_connections(admin, 1), 1);
    for (int i = 0; i < LAZY_PROCS; i++) {
        args[i] = (struct lazy_arg){ .d = d, .sh = sh, .id = i };
        CHECK(harness_spawn(lazy_proc, &args[i], &pids[i]));
    }
    assert_int_equal(wait_connections(admin, LAZY_PROCS + 1), LAZY_PROCS + 1);
    sh->go = 1;
    /* Meanwhile, readers are served exactly and in time. */
    run_load(d, "beside-lazy-clients");
    for (int i = 0; i < LAZY_PROCS; i++) {
        CHECK(harness_reap(pids[i], 30000, &status));
        assert_int_equal(status, 0);
        fprintf(stderr, "  lazy client %d: %lld bytes of requests sent, then %s\n", i,
                sh->p[i].sent_bytes, sh->p[i].dropped ? "dropped" : "NOT dropped");
        if (!sh->p[i].dropped)
            fail_msg("lazy client %d was never dropped (errno %d)", i, sh->p[i].err);
    }
    assert_int_equal(wait_connections(admin, 1), 1);
    assert_int_equal(harness_log_contains(d, "dropping a client"), 1);
    EXPECT_REPLY(admin, "PING", "OK pong");
    harness_close(admin);
    munmap(sh, sizeof(*sh));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fault_clients_killed_mid_request, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_fault_clients_idle_connections, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_fault_clients_never_read, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("fault_clients", tests, NULL, NULL);
}
