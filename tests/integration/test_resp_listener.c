/* SPDX-License-Identifier: MIT */
/*
 * test_resp_listener: divvyd's Redis-protocol listener (docs/resp.md) over raw
 * sockets: framing (multibulk, inline, pipelining), the connection commands
 * clients send on connect, DIVVY.HIT/TAKE/PEEK sharing counters with the
 * line protocol, privileged rules out of reach over TCP, reply order behind
 * hits that wait for Redis, exact counts under concurrency, and attacks
 * from an unprivileged uid (huge lengths, nesting, a million arguments, a
 * client that never reads) that must leave divvyd running.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "harness_redis.h"
#include "resp_client.h"

#define RULES                                                                         \
    "rules = (\n"                                                                     \
    "  { match = { app = \"*\"; }; label = \"r1\"; actor = \"app\";\n"                \
    "    credit_limit = 3; reset_seconds = 60; },\n"                                  \
    "  { match = { event = \"*\"; }; label = \"priv\"; actor = \"event\";\n"          \
    "    source = \"privileged\"; credit_limit = 1; reset_seconds = 60; },\n"        \
    "  { match = { bulk = \"*\"; }; label = \"bulk\"; actor = \"bulk\";\n"            \
    "    credit_limit = 700; reset_seconds = 600; },\n"                               \
    "  { default = true; label = \"dflt\"; credit_limit = 5; reset_seconds = 60; }\n" \
    ");\n"

/* PING (both framings), ECHO, HELLO, COMMAND, INFO, CLIENT, SELECT,
 * errors, an empty line, QUIT: all in one pipelined write, answered in order. */
static void test_resp_connection(void **state)
{
    static const char pipeline[] =
        "PING\r\n"
        "*1\r\n$4\r\nPING\r\n"
        "*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n"
        "\r\n"
        "*0\r\n"
        "ping  \"x\"\r\n"
        "HELLO 4\r\n"
        "HELLO 3\r\n"
        "*2\r\n$5\r\nHELLO\r\n$1\r\n2\r\n"
        "COMMAND\r\n"
        "COMMAND DOCS\r\n"
        "INFO\r\n"
        "CLIENT SETINFO LIB-NAME test\r\n"
        "SELECT 0\r\n"
        "SELECT 1\r\n"
        "FOO bar\r\n"
        "ECHO\r\n"
        "QUIT\r\n"
        "PING\r\n";
    struct harness_daemon *d = resp_start(RULES);
    struct harness_conn *c;
    char got[HARNESS_LINE] = "";

    (void)state;
    CHECK(harness_connect_unix(d->resp_sock, &c));
    CHECK(harness_send(c, pipeline, sizeof(pipeline) - 1));
    expect_resp(c, "+PONG");
    expect_resp(c, "+PONG");
    expect_resp(c, "$hello");
    expect_resp(c, "$\"x\"");
    expect_resp(c, "-NOPROTO unsupported protocol version");
    expect_resp_prefix(c, "%7 $server $divvy $version $" DIVVY_VERSION " $proto :3 $id");
    expect_resp_prefix(c, "*14 $server $divvy $version $" DIVVY_VERSION " $proto :2 $id");
    expect_resp(c, "*0");
    expect_resp(c, "*0");
    CHECK(resp_read(c, got, sizeof(got)));
    assert_non_null(strstr(got, "loading:0"));
    expect_resp(c, "+OK");
    expect_resp(c, "+OK");
    expect_resp(c, "-ERR DB index is out of range");
    expect_resp(c, "-ERR unknown command 'FOO'");
    expect_resp(c, "-ERR wrong number of arguments for 'ECHO' command");
    expect_resp(c, "+OK");
    /* Nothing after QUIT: the PING behind it is not answered. */
    assert_int_equal(harness_wait_eof(c, HARNESS_TIMEOUT_MS), 0);
    harness_close(c);
    harness_free(d);
}

/* DIVVY.* go through the same rules and counters as the line protocol. */
static void test_resp_divvy_hit(void **state)
{
    struct harness_daemon *d = resp_start(RULES);
    struct harness_conn *c, *t, *line;
    char got[HARNESS_LINE] = "";

    (void)state;
    CHECK(harness_connect_unix(d->resp_sock, &c));
    CHECK(harness_connect_tcp(d->resp_port, &t));
    CHECK(harness_connect(d, HARNESS_UNIX, &line));
    SEND_CMD(c, "DIVVY.HIT", "app", "x");
    SEND_CMD(c, "PING");
    SEND_CMD(c, "DIVVY.PEEK", "app", "x");
    SEND_CMD(c, "DIVVY.TAKE", "3", "app", "x");
    expect_resp(c, "*4 :1 :2 :60 $r1");
    expect_resp(c, "+PONG");
    expect_resp(c, "*4 :1 :2 :60 $r1");
    expect_resp(c, "*4 :0 :2 :60 $r1");
    /* The same counter over the line protocol, and over RESP on TCP. */
    EXPECT_OK_RULE(line, "TAKE 1 app=x", true, 1, 59, 60, "r1");
    SEND_CMD(t, "divvy.hit", "app", "x");
    expect_resp(t, "*4 :1 :0 :60 $r1");
    SEND_CMD(t, "DIVVY.HIT", "app", "x");
    expect_resp(t, "*4 :0 :0 :60 $r1");
    /* Keys and values the line protocol quotes. */
    SEND_CMD(c, "DIVVY.HIT", "app", "a b=c");
    expect_resp(c, "*4 :1 :2 :60 $r1");
    EXPECT_OK_RULE(line, "PEEK app=\"a b=c\"", true, 2, 59, 60, "r1");
    /* DIVVY.DEBIT charges past what is left, as DEBIT does: 5 of 3 is a
     * debt (allowed 0, no credit), and the next hit is denied. */
    SEND_CMD(c, "DIVVY.DEBIT", "5", "app", "y");
    expect_resp(c, "*4 :0 :0 :60 $r1");
    SEND_CMD(c, "DIVVY.HIT", "app", "y");
    expect_resp(c, "*4 :0 :0 :60 $r1");
    EXPECT_OK_RULE(line, "PEEK app=y", false, 0, 59, 60, "r1");
    /* Errors: odd pairs, a quote, a bad amount, in order. */
    SEND_CMD(c, "DIVVY.HIT", "app");
    SEND_CMD(c, "DIVVY.HIT", "app", "x", "other");
    SEND_CMD(c, "DIVVY.HIT", "app", "a\"b");
    SEND_CMD(c, "DIVVY.TAKE", "0", "app", "x");
    SEND_CMD(c, "PING");
    expect_resp(c, "-ERR wrong number of arguments for 'DIVVY.HIT' command");
    expect_resp_prefix(c, "-ERR wrong number of arguments: keys and values come in pairs");
    expect_resp_prefix(c, "-ERR bad-request ");
    CHECK(resp_read(c, got, sizeof(got)));
    if (strncmp(got, "-ERR bad-request", 16) != 0)
        fail_msg("TAKE 0: %s", got);
    expect_resp(c, "+PONG");
    harness_close(c);
    harness_close(t);
    harness_close(line);
    harness_free(d);
}

/* source = "privileged" rules: never over TCP; on the Unix socket only for
 * root (or the admin group), as on the line protocol. */
static void test_resp_privileged(void **state)
{
    struct harness_daemon *d = resp_start(RULES);
    struct harness_conn *c, *t;

    (void)state;
    CHECK(harness_connect_tcp(d->resp_port, &t));
    SEND_CMD(t, "DIVVY.TAKE", "1", "event", "authfail");
    expect_resp(t, "*4 :1 :4 :60 $dflt");
    if (geteuid() == 0) {
        CHECK(harness_connect_unix(d->resp_sock, &c));
        SEND_CMD(c, "DIVVY.TAKE", "1", "event", "authfail");
        expect_resp(c, "*4 :1 :0 :60 $priv");
        harness_close(c);
    } else {
        fprintf(stderr, "SKIP part: not root, the privileged Unix peer case needs uid 0\n");
    }
    harness_close(t);
    harness_free(d);
}

/* ---- attacks, from an unprivileged uid ------------------------------------------------ */

struct attack {
    int port;
};

static int attack_connect(int port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return -1;
    return fd;
}

/* Sends @data (as much as the peer takes within 10 s), then expects an
 * error reply starting with "-ERR Protocol error" and the close.  0 or the
 * step's number. */
static int attack_one(int port, const char *data, size_t len, int step)
{
    char buf[4096];
    size_t got = 0, off = 0;
    uint64_t deadline = harness_now_ms() + 10000;
    int fd = attack_connect(port);
    ssize_t n;

    if (fd < 0)
        return step;
    fcntl(fd, F_SETFL, O_NONBLOCK);
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN | (off < len ? POLLOUT : 0) };

        if (harness_now_ms() > deadline || poll(&p, 1, 100) < 0)
            break;
        if ((p.revents & POLLOUT) && off < len) {
            n = send(fd, data + off, len - off, MSG_NOSIGNAL);
            if (n > 0)
                off += (size_t)n;
            else if (n < 0 && errno != EAGAIN)
                off = len;              /* the peer closed: read what it said */
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
    }
    close(fd);
    buf[got] = '\0';
    if (strncmp(buf, "-ERR Protocol error", 19) != 0) {
        fprintf(stderr, "attack %d: reply \"%.80s\"\n", step, buf);
        return step;
    }
    return harness_now_ms() > deadline ? step + 100 : 0;
}

static int attack_child(void *arg)
{
    const struct attack *a = arg;
    size_t big = 8u << 20;
    char *data = malloc(big);
    int fd, r;
    size_t pos = 0;

    if (!data)
        return 90;
    if (geteuid() == 0 && (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0))
        return 91;
    /* A bulk length of 100 GB, of -5, and not a number. */
    r = attack_one(a->port, "*1\r\n$99999999999\r\nx", 20, 1);
    if (!r)
        r = attack_one(a->port, "*1\r\n$-5\r\n", 9, 2);
    if (!r)
        r = attack_one(a->port, "*1\r\n$4x\r\nPING\r\n", 15, 3);
    /* Nesting: requests are flat, the first nested array ends it. */
    for (pos = 0; !r && pos + 4 <= big / 8; pos += 4)
        memcpy(data + pos, "*1\r\n", 4);
    if (!r)
        r = attack_one(a->port, data, pos, 4);
    /* A million arguments, declared and as an inline line. */
    if (!r)
        r = attack_one(a->port, "*1000000\r\n", 10, 5);
    for (pos = 0; !r && pos + 2 <= big / 4; pos += 2)
        memcpy(data + pos, "a ", 2);
    if (!r)
        r = attack_one(a->port, data, pos, 6);
    /* Many arguments within RESP_CMD_MAX, one too many. */
    pos = (size_t)snprintf(data, big, "*129\r\n");
    for (int i = 0; i < 129; i++)
        pos += (size_t)snprintf(data + pos, big - pos, "$1\r\na\r\n");
    if (!r)
        r = attack_one(a->port, data, pos, 7);
    /* A command longer than a RESP connection buffers. */
    pos = (size_t)snprintf(data, big, "*3\r\n$4\r\nECHO\r\n$4096\r\n");
    memset(data + pos, 'a', 4096);
    pos += 4096;
    pos += (size_t)snprintf(data + pos, big - pos, "\r\n$4096\r\n");
    if (!r)
        r = attack_one(a->port, data, pos, 8);
    /* A client that pipelines 8 MB of ECHO and never reads its replies. */
    fd = r ? -1 : attack_connect(a->port);
    if (!r && fd < 0)
        r = 9;
    if (fd >= 0) {
        uint64_t deadline = harness_now_ms() + 5000;
        const char echo[] = "*2\r\n$4\r\nECHO\r\n$100\r\n";

        fcntl(fd, F_SETFL, O_NONBLOCK);
        for (pos = 0; pos + 200 < big; pos += sizeof(echo) - 1 + 102) {
            memcpy(data + pos, echo, sizeof(echo) - 1);
            memset(data + pos + sizeof(echo) - 1, 'e', 100);
            memcpy(data + pos + sizeof(echo) - 1 + 100, "\r\n", 2);
        }
        for (size_t off = 0; off < pos && harness_now_ms() < deadline;) {
            ssize_t n = send(fd, data + off, pos - off, MSG_NOSIGNAL);

            if (n > 0)
                off += (size_t)n;
            else if (n < 0 && errno == EAGAIN)
                poll(&(struct pollfd){ .fd = fd, .events = POLLOUT }, 1, 50);
            else
                break;
        }
        close(fd);
    }
    free(data);
    return r;
}

static void test_resp_attacks(void **state)
{
    struct harness_daemon *d = resp_start(RULES);
    struct attack a = { .port = d->resp_port };
    struct harness_conn *c;
    pid_t pid;
    int status;

    (void)state;
    CHECK(harness_spawn(attack_child, &a, &pid));
    CHECK(harness_reap(pid, 120000, &status));
    assert_int_equal(status, 0);
    assert_true(harness_alive(d));
    CHECK(harness_connect_unix(d->resp_sock, &c));
    SEND_CMD(c, "PING");
    expect_resp(c, "+PONG");
    harness_close(c);
    {
        struct harness_conn *line;
        long long v = -1;

        CHECK(harness_connect(d, HARNESS_UNIX, &line));
        /* The client that never read was dropped at server.max_output_bytes. */
        CHECK(harness_get_stat(line, "closed_output_limit", &v));
        assert_true(v >= 1);
        harness_close(line);
    }
    harness_free(d);
}

/* ---- ad-hoc buckets -------------------------------------------------------------------- */

/* RL.* and CL.THROTTLE in their own small table (docs/resp.md "Shares,
 * reserve and eviction"): a TCP peer past its share is never busy, it gives
 * up its own oldest buckets; root takes the rest of the table, the
 * unprivileged peer's included; only then is that peer busy.  The rules'
 * counters (privileged ones included) are untouched, STATS shows the
 * table, and refill times past 31 days are refused. */
static void test_resp_adhoc_full(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c, *tcp, *line;
    char conf[2048], got[256];
    long long v;
    int ok = 0;

    (void)state;
    snprintf(conf, sizeof(conf), "table = { adhoc_slots = 64; adhoc_max_buckets = 32;\n"
             "  adhoc_reserved_buckets = 4; adhoc_buckets_per_peer = 8; };\n%s", RULES);
    d = resp_start(conf);
    CHECK(harness_connect_unix(d->resp_sock, &c));
    CHECK(harness_connect_tcp(d->resp_port, &tcp));
    CHECK(harness_connect(d, HARNESS_UNIX, &line));
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 200; i++) {
            struct harness_conn *via = pass == 0 ? tcp : c;
            char key[16];

            snprintf(key, sizeof(key), "%c%d", pass == 0 ? 't' : 'r', i);
            if (i % 2)
                SEND_CMD(via, "RL.REDUCE", key, "5", "3600");
            else
                SEND_CMD(via, "CL.THROTTLE", key, "4", "1", "3600");
            got[0] = '\0';
            CHECK(resp_read(via, got, sizeof(got)));
            if (strcmp(got, ":5") == 0 || strncmp(got, "*5 :0 :5 :4 :-1 ", 16) == 0)
                ok++;
            else
                fail_msg("%s key %d: %s", pass == 0 ? "TCP" : "root", i, got);
        }
        CHECK(harness_get_stat(line, "adhoc_used", &v));
        assert_int_equal(v, pass == 0 ? 8 : 32);
        CHECK(harness_get_stat(line, "adhoc_privileged", &v));
        assert_int_equal(v, pass == 0 ? 0 : 32);
    }
    assert_int_equal(ok, 400);
    CHECK(harness_get_stat(line, "adhoc_slots", &v));
    assert_int_equal(v, 64);
    CHECK(harness_get_stat(line, "adhoc_evictions", &v));
    assert_int_equal(v, 192 + 8 + 168);     /* root: 24 free slots, 8 taken, 168 its own */
    /* Root holds every slot: only now is an unprivileged peer busy. */
    SEND_CMD(tcp, "RL.REDUCE", "t-late", "5", "3600");
    expect_resp(tcp, "-ERR busy ad-hoc bucket table full (table.adhoc_slots, "
                     "table.adhoc_max_buckets)");
    CHECK(harness_get_stat(line, "adhoc_busy", &v));
    assert_int_equal(v, 1);
    /* The rules still count, privileged ones too (root on the Unix socket). */
    SEND_CMD(c, "DIVVY.TAKE", "1", "app", "full");
    expect_resp(c, "*4 :1 :2 :60 $r1");
    if (geteuid() == 0)
        EXPECT_OK_RULE(line, "TAKE 1 event=x", true, 0, 59, 60, "priv");
    /* Errors in the arguments, as Smyte and redis-cell word them, and
     * divvyd's bound on refill times and periods (31 days). */
    SEND_CMD(c, "RL.REDUCE", "k", "0", "60");
    SEND_CMD(c, "RL.GET", "k", "2", "60", "TAKE", "1");
    SEND_CMD(c, "RL.REDUCE", "k", "2", "60", "BOGUS");
    SEND_CMD(c, "CL.THROTTLE", "k", "1", "0", "60");
    SEND_CMD(c, "CL.THROTTLE", "k", "1", "x", "60");
    SEND_CMD(c, "RL.REDUCE", "k", "2", "2678401");
    SEND_CMD(c, "CL.THROTTLE", "k", "1", "1", "2678401");
    SEND_CMD(c, "RL.REDUCE", "k", "2", "2678400");
    SEND_CMD(c, "RL.PREDUCE", "k", "2", "2678400000");
    SEND_CMD(c, "CL.THROTTLE", "k", "1", "1", "2678400");
    expect_resp(c, "-ERR value is not an integer or out of range");
    expect_resp(c, "-ERR syntax error");
    expect_resp(c, "-ERR syntax error");
    expect_resp(c, "-ERR Cell error: Zero rates are not supported");
    expect_resp(c, "-ERR value is not an integer or out of range");
    expect_resp(c, "-ERR refilltime over 2678400 seconds (31 days): divvyd's bound for "
                   "ad-hoc buckets");
    expect_resp(c, "-ERR period over 2678400 seconds (31 days): divvyd's bound for ad-hoc "
                   "buckets");
    expect_resp(c, ":2");
    /* RL.P*'s refill time in ms is Smyte's int: at most 2^31-1 ms (24.8 days). */
    expect_resp(c, "-ERR value is not an integer or out of range");
    expect_resp_prefix(c, "*5 :0 :2 :1 :-1 ");
    harness_close(c);
    harness_close(tcp);
    harness_close(line);
    harness_free(d);
}

/* ---- concurrency ---------------------------------------------------------------------- */

#define EXACT_CLIENTS 4
#define EXACT_HITS    250               /* per client; the rule allows 700 of 1000 */

struct exact {
    struct harness_conn *c;
    unsigned allowed, denied, bad;
};

static void *exact_thread(void *arg)
{
    struct exact *e = arg;
    static const char hit[] = "*3\r\n$9\r\nDIVVY.HIT\r\n$4\r\nbulk\r\n$1\r\nk\r\n";
    char batch[50 * (sizeof(hit) - 1)];

    for (size_t i = 0; i < 50; i++)
        memcpy(batch + i * (sizeof(hit) - 1), hit, sizeof(hit) - 1);
    for (unsigned done = 0; done < EXACT_HITS; done += 50) {
        if (harness_send(e->c, batch, sizeof(batch)) < 0) {
            e->bad++;
            break;
        }
        for (unsigned i = 0; i < 50; i++) {
            char got[256] = "";

            if (resp_read(e->c, got, sizeof(got)) < 0) {
                e->bad++;
                return NULL;
            }
            if (strncmp(got, "*4 :1 ", 6) == 0)
                e->allowed++;
            else if (strncmp(got, "*4 :0 ", 6) == 0)
                e->denied++;
            else
                e->bad++;
        }
    }
    return NULL;
}

static void test_resp_exact(void **state)
{
    struct harness_daemon *d = resp_start(RULES);
    struct exact e[EXACT_CLIENTS] = { 0 };
    pthread_t th[EXACT_CLIENTS];
    unsigned allowed = 0, denied = 0;

    (void)state;
    for (int i = 0; i < EXACT_CLIENTS; i++) {
        if (i % 2)
            CHECK(harness_connect_tcp(d->resp_port, &e[i].c));
        else
            CHECK(harness_connect_unix(d->resp_sock, &e[i].c));
    }
    for (int i = 0; i < EXACT_CLIENTS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, exact_thread, &e[i]), 0);
    for (int i = 0; i < EXACT_CLIENTS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(e[i].bad, 0);
        allowed += e[i].allowed;
        denied += e[i].denied;
        harness_close(e[i].c);
    }
    assert_int_equal(allowed, 700);
    assert_int_equal(denied, EXACT_CLIENTS * EXACT_HITS - 700);
    harness_free(d);
}

/* ---- Redis: replies in request order behind hits that wait ------------------------------ */

static void test_resp_redis_order(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;

    (void)state;
    d = resp_start_strict(&rs);
    CHECK(harness_connect_unix(d->resp_sock, &c));
    /* One write: strict hits wait for Redis, PING and ECHO do not. */
    {
        char buf[2048];
        size_t n = 0;

        n += resp_cmd(buf + n, sizeof(buf) - n,
                      (const char *const[]){ "DIVVY.HIT", "app", "o", NULL });
        n += resp_cmd(buf + n, sizeof(buf) - n, (const char *const[]){ "PING", NULL });
        n += resp_cmd(buf + n, sizeof(buf) - n,
                      (const char *const[]){ "DIVVY.TAKE", "1", "app", "o", NULL });
        n += resp_cmd(buf + n, sizeof(buf) - n, (const char *const[]){ "ECHO", "e", NULL });
        n += resp_cmd(buf + n, sizeof(buf) - n,
                      (const char *const[]){ "DIVVY.HIT", "app", "o", NULL });
        n += resp_cmd(buf + n, sizeof(buf) - n, (const char *const[]){ "NOPE", NULL });
        CHECK(harness_send(c, buf, n));
    }
    expect_resp(c, "*4 :1 :1 :60 $s1");
    expect_resp(c, "+PONG");
    expect_resp(c, "*4 :1 :0 :60 $s1");
    expect_resp(c, "$e");
    expect_resp(c, "*4 :0 :0 :60 $s1");
    expect_resp(c, "-ERR unknown command 'NOPE'");
    assert_true(redis_int(rs, "DBSIZE") >= 1);
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resp_connection, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_divvy_hit, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_privileged, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_attacks, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_full, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_exact, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_redis_order, harness_setup, redis_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
