/* SPDX-License-Identifier: MIT */
/*
 * Integration: the wire protocol under stress and abuse.  Pipelined
 * requests are answered in order (also after a half-close), 200 concurrent
 * connections are served, and malformed input (unknown commands, bad
 * quoting, too many keys, over-long lines, binary garbage, clients vanishing
 * mid-line or mid-pipeline, empty lines) gets the documented reply or none,
 * never a dropped connection or a disturbed neighbour.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static const char proto_ini[] =
    "[path=/seq]\n"
    "creditLimit = 1000000\n"
    "resetSeconds = 3600\n"
    "label = seq\n"
    "\n"
    "[path=/actor actor=*]\n"
    "creditLimit = 10\n"
    "resetSeconds = 3600\n"
    "actorField = actor\n"
    "label = actor\n"
    "\n"
    "[default]\n"
    "creditLimit = 5\n"
    "resetSeconds = 0\n";

static struct harness_daemon *start_proto(void)
{
    struct harness_opts o = { .config_name = "proto.ini", .config_text = proto_ini };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    return d;
}

/* ---- pipelining ------------------------------------------------------------- */

#define PIPE_N 1000

struct pipe_plan {
    char *buf;
    size_t len;
    char want[PIPE_N][80];      /* exact reply, or "" for an OK line checked by credit */
    long long credit[PIPE_N];
    bool allowed[PIPE_N];
    bool take[PIPE_N];          /* TAKE's reply names the rule: "actor" */
};

/* A mix whose replies all differ: HITs on one counter (credit counts down),
 * TAKEs on fresh actors, PINGs and unknown commands naming their index. */
static struct pipe_plan *pipe_plan_new(const char *tag, long long *seq_credit)
{
    struct pipe_plan *p = harness_scratch(sizeof(*p));
    size_t cap = PIPE_N * 64;
    long long seq = *seq_credit;

    assert_non_null(p);
    p->buf = harness_scratch(cap);
    assert_non_null(p->buf);
    for (int i = 0; i < PIPE_N; i++) {
        int n;

        if (i % 10 == 9) {
            n = snprintf(p->buf + p->len, cap - p->len, "PING\n");
            snprintf(p->want[i], sizeof(p->want[i]), "OK pong");
        } else if (i % 100 == 50) {
            n = snprintf(p->buf + p->len, cap - p->len, "FOO%d x=1\n", i);
            snprintf(p->want[i], sizeof(p->want[i]),
                     "ERR unknown-command \"Unrecognized command: FOO%d\"", i);
        } else if (i % 2 == 0) {
            n = snprintf(p->buf + p->len, cap - p->len, "TAKE %d path=/actor actor=%s-%d\n",
                         i % 11 + 1, tag, i);
            p->take[i] = true;
            p->allowed[i] = i % 11 + 1 <= 10;
            p->credit[i] = p->allowed[i] ? 10 - (i % 11 + 1) : 0;
            /* TAKE 11 of 10 on a fresh counter: denied, nothing taken, no
             * window started. */
            if (!p->allowed[i])
                snprintf(p->want[i], sizeof(p->want[i]), "OK false 10 0 actor");
        } else {
            n = snprintf(p->buf + p->len, cap - p->len, "HIT path=/seq\n");
            p->allowed[i] = true;
            p->credit[i] = --seq;
        }
        p->len += (size_t)n;
    }
    *seq_credit = seq;
    return p;
}

static void pipe_plan_check(struct pipe_plan *p, struct harness_conn *c)
{
    char r[HARNESS_LINE];

    for (int i = 0; i < PIPE_N; i++) {
        bool allowed;
        long long credit, secs;
        char id[64] = "actor";
        ssize_t n = harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS);
        int pr;

        if (n < 0)
            fail_msg("reply %d of %d: %s", i, PIPE_N, strerror((int)-n));
        if (p->want[i][0]) {
            if (strcmp(r, p->want[i]) != 0)
                fail_msg("reply %d: \"%s\", want \"%s\"", i, r, p->want[i]);
            continue;
        }
        pr = p->take[i] ? harness_parse_ok_rule(r, &allowed, &credit, &secs, id, sizeof(id))
                        : harness_parse_ok(r, &allowed, &credit, &secs);
        if (pr < 0 || allowed != p->allowed[i] || credit != p->credit[i] || secs < 3599 ||
            secs > 3600 || strcmp(id, "actor") != 0)
            fail_msg("reply %d: \"%s\", want OK %s %lld 3600", i, r,
                     p->allowed[i] ? "true" : "false", p->credit[i]);
    }
}

static void pipeline_in_one_write(enum harness_via via)
{
    struct harness_daemon *d = start_proto();
    long long seq = 1000000;
    struct pipe_plan *p = pipe_plan_new(via == HARNESS_TCP ? "tcp" : "unix", &seq);
    struct harness_conn *c;

    CHECK(harness_connect(d, via, &c));
    CHECK(harness_send(c, p->buf, p->len));
    pipe_plan_check(p, c);
    /* Still usable afterwards. */
    EXPECT_REPLY(c, "PING", "OK pong");
    harness_close(c);
}

static void test_protocol_pipeline_unix(void **state)
{
    (void)state;
    pipeline_in_one_write(HARNESS_UNIX);
}

static void test_protocol_pipeline_tcp(void **state)
{
    (void)state;
    pipeline_in_one_write(HARNESS_TCP);
}

/* Pipeline, shutdown(SHUT_WR) at once: every reply still arrives, then EOF. */
static void test_protocol_half_close(void **state)
{
    struct harness_daemon *d = start_proto();
    long long seq = 1000000;

    (void)state;
    for (int via = HARNESS_UNIX; via <= HARNESS_TCP; via++) {
        /* The /seq counter is shared: the TCP run continues where unix left. */
        struct pipe_plan *p = pipe_plan_new(via == HARNESS_TCP ? "hc-tcp" : "hc-unix", &seq);
        struct harness_conn *c;

        CHECK(harness_connect(d, (enum harness_via)via, &c));
        CHECK(harness_send(c, p->buf, p->len));
        assert_int_equal(shutdown(c->fd, SHUT_WR), 0);
        pipe_plan_check(p, c);
        /* Then the server closes. */
        CHECK(harness_wait_eof(c, HARNESS_TIMEOUT_MS));
        harness_close(c);
        }
}

/* Many small pipelined batches of HITs from one connection, each checked:
 * replies follow the requests exactly, batch after batch. */
static void test_protocol_pipeline_batches(void **state)
{
    struct harness_daemon *d = start_proto();
    struct harness_conn *c;
    char *buf = harness_scratch(64 * 64);
    long long seq = 1000000;

    (void)state;
    assert_non_null(buf);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    for (int b = 0; b < 100; b++) {
        size_t len = 0;
        int depth = 1 + b % 64;

        for (int i = 0; i < depth; i++)
            len += (size_t)sprintf(buf + len, "HIT path=/seq n=%d\n", i);
        CHECK(harness_send(c, buf, len));
        for (int i = 0; i < depth; i++) {
            char r[HARNESS_LINE];
            bool allowed;
            long long credit, secs;

            CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
            seq--;
            if (harness_parse_ok(r, &allowed, &credit, &secs) < 0 || !allowed ||
                credit != seq || secs < 3599 || secs > 3600)
                fail_msg("batch %d reply %d: \"%s\", want OK true %lld 3600", b, i, r, seq);
        }
    }
    harness_close(c);
}

/* ---- concurrency ------------------------------------------------------------ */

#define CONC_N      200
#define CONC_HITS   15

struct conc_gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready;
    bool go;
};

struct conc_arg {
    struct harness_daemon *d;
    struct conc_gate *gate;
    int id;
    int failures;
    char first_failure[160];
};

static void conc_fail(struct conc_arg *a, const char *what, const char *reply)
{
    if (a->failures++ == 0)
        snprintf(a->first_failure, sizeof(a->first_failure), "conn %d: %s: %.100s", a->id, what,
                 reply);
}

static void *conc_thread(void *p)
{
    struct conc_arg *a = p;
    struct harness_conn *c = NULL;
    char req[64], r[HARNESS_LINE] = "";
    int rc;

    rc = harness_connect(a->d, a->id % 2 ? HARNESS_TCP : HARNESS_UNIX, &c);
    if (rc < 0)
        conc_fail(a, "connect", strerror(-rc));
    else if (harness_cmd(c, "PING", r, sizeof(r)) < 0 || strcmp(r, "OK pong") != 0)
        conc_fail(a, "PING", r);
    /* Every connection is open before anyone starts hitting. */
    pthread_mutex_lock(&a->gate->lock);
    a->gate->ready++;
    pthread_cond_broadcast(&a->gate->cond);
    while (!a->gate->go)
        pthread_cond_wait(&a->gate->cond, &a->gate->lock);
    pthread_mutex_unlock(&a->gate->lock);
    if (!c)
        return NULL;
    snprintf(req, sizeof(req), "HIT path=/actor actor=conc-%d", a->id);
    for (int i = 0; i < CONC_HITS; i++) {
        bool allowed;
        long long credit, secs;

        if (harness_cmd(c, req, r, sizeof(r)) < 0) {
            conc_fail(a, "HIT", "no reply");
            break;
        }
        if (harness_parse_ok(r, &allowed, &credit, &secs) < 0 || allowed != (i < 10) ||
            credit != (i < 10 ? 9 - i : 0) || secs < 3598 || secs > 3600)
            conc_fail(a, "HIT", r);
    }
    harness_close(c);
    return NULL;
}

static void test_protocol_200_concurrent_connections(void **state)
{
    struct harness_daemon *d = start_proto();
    struct conc_arg *args = harness_scratch(CONC_N * sizeof(*args));
    pthread_t *th = harness_scratch(CONC_N * sizeof(*th));
    struct conc_gate gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false };
    uint64_t deadline = harness_now_ms() + 30000;
    pthread_attr_t attr;
    int failures = 0, started = 0, ready;
    long long conns = -1;
    struct harness_conn *c;
    int rc;

    (void)state;
    assert_non_null(args);
    assert_non_null(th);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (int i = 0; i < CONC_N; i++) {
        args[i] = (struct conc_arg){ .d = d, .gate = &gate, .id = i };
        if (pthread_create(&th[i], &attr, conc_thread, &args[i]) != 0)
            break;
        started++;
    }
    /* Wait (with a deadline) until every thread holds an open connection. */
    pthread_mutex_lock(&gate.lock);
    while (gate.ready < started && harness_now_ms() < deadline) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&gate.cond, &gate.lock, &ts);
    }
    ready = gate.ready;
    pthread_mutex_unlock(&gate.lock);
    rc = harness_connect(d, HARNESS_UNIX, &c);
    if (rc >= 0)
        rc = harness_get_stat(c, "connections", &conns);
    pthread_mutex_lock(&gate.lock);
    gate.go = true;
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < CONC_N; i++) {
        if (args[i].failures && failures++ < 5)
            fprintf(stderr, "  %s\n", args[i].first_failure);
    }
    pthread_attr_destroy(&attr);
    assert_int_equal(started, CONC_N);
    assert_int_equal(ready, CONC_N);
    assert_int_equal(failures, 0);
    CHECK(rc);
    /* 200 open plus the STATS one (a closed ready-PING may linger briefly). */
    assert_in_range(conns, CONC_N + 1, CONC_N + 3);
    EXPECT_REPLY(c, "PING", "OK pong");
    harness_close(c);
}

/* ---- malformed input -------------------------------------------------------- */

static void test_protocol_unknown_command(void **state)
{
    struct harness_daemon *d = start_proto();
    struct harness_conn *c;
    char r[HARNESS_LINE];

    (void)state;
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_REPLY(c, "FOO", "ERR unknown-command \"Unrecognized command: FOO\"");
    EXPECT_REPLY(c, "PING", "OK pong");
    EXPECT_REPLY(c, "FOO bar=1 baz=\"2\"", "ERR unknown-command \"Unrecognized command: FOO\"");
    EXPECT_REPLY(c, "HITS path=/seq", "ERR unknown-command \"Unrecognized command: HITS\"");
    /* A line of only whitespace is an unknown command (as in divvy). */
    CHECK(harness_cmd(c, "   ", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR unknown-command");
    CHECK(harness_cmd(c, "\t", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR unknown-command");
    EXPECT_REPLY(c, "HIT path=/seq", "OK true 999999 3600");
    harness_close(c);
}

static void test_protocol_bad_request(void **state)
{
    static const char *const bad[] = {
        "HIT path=\"unterminated",
        "HIT path=\"/a\"b",
        "HIT path=\"/a\"=x",
        "HIT =value",
        "HIT \"\"=value",
        "HIT path",
        "HIT path=/a=b",
        "HIT a=\"x\" b",
        "HIT a==b",
        "TAKE 0 path=/seq",
        "TAKE -1 path=/seq",
        "TAKE x path=/seq",
        "TAKE 1000000001 path=/seq",
        "TAKE 99999999999999999999999 path=/seq",
        "TAKE path=/seq",
        "TAKE",
        "PING x=1",
        "RULES a=b",
        "STATS a=b",
        "QUIT now=1",
    };
    struct harness_daemon *d = start_proto();
    struct harness_conn *c;
    char r[HARNESS_LINE];

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(harness_cmd(c, bad[i], r, sizeof(r)));
        if (strncmp(r, "ERR bad-request", 15) != 0)
            fail_msg("\"%s\" -> \"%s\", want ERR bad-request", bad[i], r);
        EXPECT_REPLY(c, "PING", "OK pong");
    }
    /* A NUL byte inside a line. */
    CHECK(harness_send(c, "HIT path=/s\0q\n", 14));
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    EXPECT_PREFIX(r, "ERR bad-request");
    /* None of those consumed anything. */
    EXPECT_REPLY(c, "HIT path=/seq", "OK true 999999 3600");
    /* Valid corner cases next to the invalid ones. */
    EXPECT_REPLY(c, "HIT path=/seq extra=", "OK true 999998 3600");
    EXPECT_REPLY(c, "HIT   path=/seq\t\textra=\"a b=c\"  ", "OK true 999997 3600");
    EXPECT_REPLY(c, "HIT \"path\"=\"/seq\"", "OK true 999996 3600");
    EXPECT_OK_RULE(c, "TAKE 1000000000 path=/seq", false, 999996, 3599, 3600,
                   "seq");
    harness_close(c);
}

static void test_protocol_too_many_keys(void **state)
{
    struct harness_daemon *d = start_proto();
    struct harness_conn *c;
    char line[2048], r[HARNESS_LINE];
    size_t len;

    (void)state;
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    /* 32 distinct keys: fine (the default rule allows 5). */
    len = (size_t)sprintf(line, "HIT");
    for (int i = 0; i < 32; i++)
        len += (size_t)sprintf(line + len, " k%02d=v", i);
    EXPECT_REPLY(c, line, "OK true 5 0");
    /* 33 pairs of which two share a key: 32 distinct, still fine. */
    sprintf(line + len, " k00=w");
    EXPECT_REPLY(c, line, "OK true 5 0");
    /* 33 distinct keys. */
    sprintf(line + len, " k32=v");
    CHECK(harness_cmd(c, line, r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR too-many-keys");
    EXPECT_REPLY(c, "PING", "OK pong");
    /* Way too many. */
    len = (size_t)sprintf(line, "HIT");
    for (int i = 0; i < 200; i++)
        len += (size_t)sprintf(line + len, " %d=", i);
    CHECK(harness_cmd(c, line, r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR too-many-keys");
    EXPECT_REPLY(c, "HIT path=/seq", "OK true 999999 3600");
    harness_close(c);
}

/* The 4096-byte limit counts the newline: 4096 is fine, 4097 is not. */
static void test_protocol_line_length_boundary(void **state)
{
    struct harness_daemon *d = start_proto();
    struct harness_conn *c;
    char *line = harness_scratch(8192), r[HARNESS_LINE];
    size_t len;

    (void)state;
    assert_non_null(line);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    len = (size_t)sprintf(line, "HIT path=/seq pad=");
    memset(line + len, 'x', 4095 - len);
    line[4095] = '\n';
    CHECK(harness_send(c, line, 4096));
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    assert_string_equal(r, "OK true 999999 3600");
    /* With a CR before the newline: the CR is part of the 4096 bytes. */
    line[4094] = '\r';
    CHECK(harness_send(c, line, 4096));
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    EXPECT_PREFIX(r, "OK true 99999");
    line[4094] = 'x';
    line[4095] = 'x';
    line[4096] = '\n';
    CHECK(harness_send(c, line, 4097));
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    EXPECT_PREFIX(r, "ERR line-too-long");
    EXPECT_REPLY(c, "PING", "OK pong");
    /* The long line was not counted. */
    EXPECT_OK(c, "HIT path=/seq", true, 999997, 3599, 3600);
    harness_close(c);
}

/* The simplest case: an over-long line and the next request in one write. */
static void test_protocol_long_line_then_request(void **state)
{
    struct harness_daemon *d = start_proto();
    struct harness_conn *c;
    char *buf = harness_scratch(8192), r[HARNESS_LINE];

    (void)state;
    assert_non_null(buf);
    memset(buf, 'a', 5000);
    memcpy(buf + 5000, "\nPING\n", 6);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_send(c, buf, 5006));
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    EXPECT_PREFIX(r, "ERR line-too-long");
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    assert_string_equal(r, "OK pong");
    EXPECT_REPLY(c, "HIT path=/seq", "OK true 999999 3600");
    harness_close(c);
}

/* A 1 MB line: one ERR line-too-long, the connection stays usable, and a
 * second client is served while the long line is still arriving. */
static void test_protocol_one_megabyte_line(void **state)
{
    struct harness_daemon *d = start_proto();
    struct harness_conn *c, *other;
    size_t half = 512 * 1024;
    char *big = harness_scratch(half), r[HARNESS_LINE];
    int extra;

    (void)state;
    assert_non_null(big);
    memset(big, 'a', half);
    memcpy(big, "HIT path=/seq x=", 16);
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    CHECK(harness_connect(d, HARNESS_UNIX, &other));
    CHECK(harness_send(c, big, half));
    EXPECT_REPLY(other, "PING", "OK pong");
    EXPECT_REPLY(other, "HIT path=/seq", "OK true 999999 3600");
    memset(big, 'b', 16);
    CHECK(harness_send(c, big, half));
    EXPECT_REPLY(other, "PING", "OK pong");
    CHECK(harness_send(c, "\nPING\n", 6));
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    EXPECT_PREFIX(r, "ERR line-too-long");
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    assert_string_equal(r, "OK pong");
    /* Exactly one reply for the long line: nothing else is queued. */
    extra = harness_readable(c, 200);
    assert_int_equal(extra, 0);
    EXPECT_OK(c, "HIT path=/seq", true, 999998, 3599, 3600);
    /* Twice in a row, and split across many writes. */
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 16; i++)
            CHECK(harness_send(c, big, 65536));
        CHECK(harness_send(c, "\n", 1));
        CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
        EXPECT_PREFIX(r, "ERR line-too-long");
    }
    EXPECT_REPLY(c, "PING", "OK pong");
    EXPECT_REPLY(other, "PING", "OK pong");
    harness_close(c);
    harness_close(other);
}

/* Binary garbage: every line gets an ERR (or nothing, if empty), and the
 * connection keeps working. */
static void test_protocol_garbage(void **state)
{
    struct harness_daemon *d = start_proto();
    struct harness_conn *c;
    size_t len = 64 * 1024;
    unsigned char *junk = harness_scratch(len);
    unsigned seed = 12345;
    char r[HARNESS_LINE];
    int lines = 0, replies = 0;

    (void)state;
    assert_non_null(junk);
    for (size_t i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        junk[i] = (unsigned char)(seed >> 16);
        if (i % 97 == 96)
            junk[i] = '\n';
        else if (junk[i] == '\n')
            junk[i] = 0xff;
        lines += junk[i] == '\n';
    }
    /* Make the first bytes of some lines look like verbs. */
    memcpy(junk + 97, "HIT \x01\x02=\xff\xfe", 10);
    memcpy(junk + 194, "TAKE \x80 a=b", 10);
    memcpy(junk + 291, "PEEK \"\x7f", 7);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_send(c, junk, len));
    CHECK(harness_send(c, "\nPING\n", 6));
    for (;;) {
        CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
        if (strcmp(r, "OK pong") == 0)
            break;
        replies++;
        if (strncmp(r, "ERR ", 4) != 0)
            fail_msg("garbage line got \"%s\"", r);
    }
    assert_in_range(replies, 1, lines + 1);
    EXPECT_REPLY(c, "HIT path=/seq", "OK true 999999 3600");
    harness_close(c);
}

/* Clients that vanish mid-line or mid-pipeline leave the daemon serving. */
static void test_protocol_disconnects(void **state)
{
    struct harness_daemon *d = start_proto();
    struct harness_conn *c;
    char *buf = harness_scratch(2000 * 16);
    size_t len = 0;
    long long live;

    (void)state;
    assert_non_null(buf);
    for (int i = 0; i < 2000; i++)
        len += (size_t)sprintf(buf + len, "HIT path=/seq\n");
    for (int i = 0; i < 30; i++) {
        CHECK(harness_connect(d, i % 2 ? HARNESS_TCP : HARNESS_UNIX, &c));
        switch (i % 3) {
        case 0:
            CHECK(harness_send(c, "HIT path=/se", 12));
            break;
        case 1:
            CHECK(harness_send(c, buf, len));
            break;
        default:
            CHECK(harness_send(c, buf, len / 2 + 7));
            break;
        }
        harness_close(c);
    }
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "PING", "OK pong");
    /* The counter moved by whole requests only and stayed consistent. */
    CHECK(harness_cmd(c, "PEEK path=/seq", buf, 2000 * 16));
    EXPECT_PREFIX(buf, "OK true ");
    /* Closed connections are forgotten (poll: the daemon sees EOF async). */
    {
        uint64_t deadline = harness_now_ms() + 5000;

        do {
            CHECK(harness_get_stat(c, "connections", &live));
            if (live == 1)
                break;
            harness_pause_ms(20);
        } while (harness_now_ms() < deadline);
        assert_int_equal(live, 1);
    }
    harness_close(c);
}

static void test_protocol_empty_lines(void **state)
{
    struct harness_daemon *d = start_proto();
    struct harness_conn *c;
    char r[HARNESS_LINE];

    (void)state;
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    CHECK(harness_send(c, "\n", 1));
    EXPECT_REPLY(c, "PING", "OK pong");
    CHECK(harness_send(c, "\r\n\n\n\r\n", 6));
    EXPECT_REPLY(c, "HIT path=/seq", "OK true 999999 3600");
    /* Only the PING is answered. */
    assert_int_equal(harness_readable(c, 200), 0);
    CHECK(harness_send(c, "\nPING\n\nQUIT\n", 12));
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    assert_string_equal(r, "OK pong");
    CHECK(harness_recv_line(c, r, sizeof(r), HARNESS_TIMEOUT_MS));
    assert_string_equal(r, "OK bye");
    CHECK(harness_wait_eof(c, HARNESS_TIMEOUT_MS));
    harness_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_protocol_pipeline_unix, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_pipeline_tcp, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_half_close, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_pipeline_batches, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_200_concurrent_connections,
                                        harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_unknown_command, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_bad_request, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_too_many_keys, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_line_length_boundary, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_long_line_then_request, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_one_megabyte_line, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_garbage, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_disconnects, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_protocol_empty_lines, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("protocol", tests, NULL, NULL);
}
