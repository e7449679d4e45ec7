/* SPDX-License-Identifier: MIT */
/*
 * test_resp_adhoc: RESP's ad-hoc bucket table under a flood from an
 * unprivileged user (docs/resp.md "Shares, reserve and eviction").  A
 * throwaway uid pipelines 66,000 RL.REDUCE with fresh keys over the RESP
 * Unix socket and over TCP, as fast as divvyd answers; afterwards another
 * uid and root still get buckets, the flooder was never answered busy (it
 * gave up its own least recently used buckets), and a peer holding a few
 * buckets keeps them, also when CL.THROTTLE keys from eight more addresses
 * fill the table.  With the absurd refill time (2^31-1 s) the
 * flood creates nothing at all: such buckets are refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define FLOOD_UID   64401       /* throwaway uids and gids, no passwd entry needed */
#define OTHER_UID   64402
#define FLOOD_GID   64401
#define FLOOD_N     66000       /* the flood, per connection */
#define MAX_SRC     8
#define MAX_ASK     8
#define TEXT        160
#define WINDOW      4000        /* commands in flight per connection */

#define CONF                                                                        \
    "server = { socket_mode = \"0666\"; };\n"                                       \
    "rules = ( { default = true; credit_limit = 5; reset_seconds = 60; } );\n"

/* What a child does as @uid, and what it saw (in shared memory). */
struct job {
    uid_t uid;
    const char *sock;           /* RESP Unix socket: used when no src is given */
    int port;                   /* RESP TCP port */
    const char *src[MAX_SRC];   /* TCP source addresses, one connection each */
    /* a flood: n RL.REDUCE <prefix><conn>-<i> <max> <period> per connection,
     * or (gcra) CL.THROTTLE <prefix><conn>-<i> <max> 1 <period> */
    const char *prefix;
    unsigned n;
    const char *max, *period;
    bool gcra;
    /* or a few commands, one reply line each (a flood's are counted) */
    const char *ask[MAX_ASK][8];
    char reply[MAX_ASK][TEXT];
    long ok, busy, other;       /* a flood's replies: an integer or an array, busy, else */
    char other_text[TEXT];      /* the first reply that was neither */
    int err;                    /* the child's -errno, 0 */
};

static size_t resp_cmd(char *buf, size_t size, const char *const *argv)
{
    size_t n = 0, used;

    while (argv[n])
        n++;
    used = (size_t)snprintf(buf, size, "*%zu\r\n", n);
    for (size_t i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "$%zu\r\n%s\r\n", strlen(argv[i]),
                                 argv[i]);
    return used < size ? used : 0;
}

/* One reply line (RL.* and CL.THROTTLE's first line: ":n", "-ERR ...", "*5"). */
static void tally(struct job *j, const char *line, unsigned k)
{
    if (k < MAX_ASK && j->ask[k][0]) {
        snprintf(j->reply[k], TEXT, "%.*s", TEXT - 1, line);
        return;
    }
    if (line[0] == ':' || line[0] == '*') {
        j->ok++;
    } else if (strncmp(line, "-ERR busy", 9) == 0) {
        j->busy++;
    } else {
        if (j->other++ == 0)
            snprintf(j->other_text, TEXT, "%.*s", TEXT - 1, line);
    }
}

/*
 * Pipelines @j's commands on @fd (the few of ask[], or n flood commands
 * numbered for connection @conn), WINDOW ahead of the replies it reads;
 * CL.THROTTLE's array reply counts by its first element.  0, or -errno
 * (-ETIMEDOUT after 60 s without progress).
 */
static int pipeline(struct job *j, int fd, unsigned conn)
{
    unsigned total = j->ask[0][0] ? 0 : j->n, sent = 0, got = 0, skip = 0;
    char out[65536], in[65536], key[48];
    size_t out_len = 0, out_off = 0, in_len = 0, pos = 0;

    while (total < MAX_ASK && j->ask[total][0])
        total++;
    if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
        return -errno;
    while (got < total) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        ssize_t n;

        /* At most WINDOW unanswered: divvyd drops a client whose unread
         * replies pass server.max_output_bytes, as it should. */
        while (sent < total && sent - got < WINDOW && out_len + 256 < sizeof(out)) {
            const char *flood[] = { "RL.REDUCE", key, j->max, j->period, NULL };
            const char *cell[] = { "CL.THROTTLE", key, j->max, "1", j->period, NULL };

            snprintf(key, sizeof(key), "%s%u-%u", j->prefix ? j->prefix : "", conn, sent);
            out_len += resp_cmd(out + out_len, sizeof(out) - out_len,
                                j->ask[0][0] ? j->ask[sent] : j->gcra ? cell : flood);
            sent++;
        }
        if (out_off < out_len)
            pfd.events |= POLLOUT;
        if (poll(&pfd, 1, 60000) != 1)
            return -ETIMEDOUT;
        if (pfd.revents & POLLOUT) {
            n = send(fd, out + out_off, out_len - out_off, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN)
                return -errno;
            out_off += n > 0 ? (size_t)n : 0;
            if (out_off == out_len)
                out_off = out_len = 0;
        }
        if (!(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        n = recv(fd, in + in_len, sizeof(in) - 1 - in_len, 0);
        if (n == 0)
            return -ENOTCONN;
        if (n < 0 && errno != EAGAIN)
            return -errno;
        in_len += n > 0 ? (size_t)n : 0;
        in[in_len] = '\0';
        for (char *end; (end = strstr(in + pos, "\r\n")); pos = (size_t)(end + 2 - in)) {
            *end = '\0';
            /* The elements of CL.THROTTLE's "*5" reply follow it. */
            if (skip > 0) {
                skip--;
            } else {
                tally(j, in + pos, got++);
                if (in[pos] == '*')
                    skip = (unsigned)atoi(in + pos + 1);
            }
        }
        in_len -= pos;
        memmove(in, in + pos, in_len + 1);
        pos = 0;
    }
    return 0;
}

static int job_child(void *arg)
{
    struct job *j = arg;
    int fd, r = 0;

    if (j->uid != 0 && (setgroups(0, NULL) < 0 || setgid(FLOOD_GID) < 0 || setuid(j->uid) < 0))
        return 100;
    if (!j->src[0]) {
        fd = harness_unix_fd(j->sock);
        r = fd < 0 ? fd : pipeline(j, fd, 0);
        if (fd >= 0)
            close(fd);
    }
    for (unsigned s = 0; s < MAX_SRC && j->src[s] && r == 0; s++) {
        fd = harness_tcp_fd_from(j->src[s], j->port);
        r = fd < 0 ? fd : pipeline(j, fd, s);
        if (fd >= 0)
            close(fd);
    }
    j->err = r;
    return r < 0 ? 101 : 0;
}

/* Runs @j in a child (as its uid) and waits for it; fails the test on error. */
static void job_run(struct job *j)
{
    pid_t pid;
    int status;

    CHECK(harness_spawn(job_child, j, &pid));
    CHECK(harness_reap(pid, 120000, &status));
    if (status != 0)
        fail_msg("child as uid %u: exit %d (%s)", (unsigned)j->uid, status,
                 strerror(-j->err));
}

/* A job in memory the child shares (MAP_SHARED), zeroed. */
static struct job *job_new(struct harness_daemon *d, uid_t uid)
{
    struct job *j = mmap(NULL, sizeof(*j), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                         -1, 0);

    assert_true(j != MAP_FAILED);
    memset(j, 0, sizeof(*j));
    j->uid = uid;
    j->sock = d->resp_sock;
    j->port = d->resp_port;
    return j;
}

/* The replies of @cmds, run as @uid over the Unix socket (@src NULL) or TCP. */
static struct job *ask(struct harness_daemon *d, uid_t uid, const char *src,
                       const char *const cmds[][8], size_t n)
{
    struct job *j = job_new(d, uid);

    j->src[0] = src;
    for (size_t i = 0; i < n; i++)
        memcpy(j->ask[i], cmds[i], sizeof(j->ask[i]));
    job_run(j);
    return j;
}

static void expect_reply(const struct job *j, unsigned i, const char *want, const char *who)
{
    if (strcmp(j->reply[i], want) != 0)
        fail_msg("%s, command %u: \"%s\", want \"%s\"", who, i, j->reply[i], want);
}

static long long stat_of(struct harness_daemon *d, const char *name)
{
    struct harness_conn *c;
    long long v = -1;

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_get_stat(c, name, &v));
    harness_close(c);
    return v;
}

static struct harness_daemon *start(void)
{
    struct harness_opts o = { .config_text = CONF, .resp = true, .workers = 2 };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    /* The unprivileged children must reach the 0666 sockets. */
    assert_int_equal(chmod(d->dir, 0755), 0);
    return d;
}

/* After a flood: another uid gets a token bucket and a GCRA key over the
 * Unix socket, and over TCP from the flooder's own address (the same peer
 * there: its share's oldest bucket makes room); root gets one on the RESP
 * Unix socket. */
static void others_get_buckets(struct harness_daemon *d, const char *tag)
{
    static const struct {
        uid_t uid;
        const char *src, *name, *who;
    } askers[] = {
        { OTHER_UID, NULL, "other", "uid 64402 on the Unix socket" },
        { OTHER_UID, "127.0.0.1", "other-tcp", "uid 64402 over TCP from 127.0.0.1" },
        { 0, NULL, "root", "root on the RESP Unix socket" },
    };
    char k1[32], k2[32];
    const char *const cmds[][8] = {
        { "RL.REDUCE", k1, "10", "60", NULL },
        { "CL.THROTTLE", k2, "4", "1", "60", NULL },
    };

    for (size_t i = 0; i < sizeof(askers) / sizeof(askers[0]); i++) {
        struct job *j;

        snprintf(k1, sizeof(k1), "%s-%s", askers[i].name, tag);
        snprintf(k2, sizeof(k2), "%s-g-%s", askers[i].name, tag);
        j = ask(d, askers[i].uid, askers[i].src, cmds, 2);
        expect_reply(j, 0, ":10", askers[i].who);
        expect_reply(j, 1, "*5", askers[i].who);
        munmap(j, sizeof(*j));
    }
}

/* The flood as FLOOD_UID: FLOOD_N RL.REDUCE <prefix>0-<i> 10^15
 * @period on the RESP Unix socket (*ret_unix), then as many on TCP from
 * 127.0.0.1 (*ret_tcp, keys <tcp_prefix>0-<i>), each pipelined. */
static void flood_both(struct harness_daemon *d, const char *prefix, const char *tcp_prefix,
                       const char *period, struct job **ret_unix, struct job **ret_tcp)
{
    struct job *f = job_new(d, FLOOD_UID), *g = job_new(d, FLOOD_UID);
    uint64_t t0 = harness_now_ms();

    f->prefix = prefix;
    f->n = FLOOD_N;
    f->max = "1000000000000000";
    f->period = period;
    *g = *f;
    g->prefix = tcp_prefix;
    g->src[0] = "127.0.0.1";
    job_run(f);
    job_run(g);
    fprintf(stderr, "# 2 x %d RL.REDUCE %sN 10^15 %s as uid %d: %llu ms\n", FLOOD_N, prefix,
            period, FLOOD_UID, (unsigned long long)(harness_now_ms() - t0));
    *ret_unix = f;
    *ret_tcp = g;
}

/* Fails unless @j's flood had @ok answers, never busy, and @other other
 * replies, the first of them holding @text. */
static void expect_flood(const struct job *j, long ok, long other, const char *text)
{
    if (j->ok != ok || j->busy != 0 || j->other != other ||
        (other > 0 && strstr(j->other_text, text) == NULL))
        fail_msg("flood%s: %ld answered, %ld busy, %ld others (\"%s\")",
                 j->src[0] ? " over TCP" : " over Unix", j->ok, j->busy, j->other,
                 j->other_text);
}

/* The flood, verbatim: RL.REDUCE k-N 10^15 2147483647, 66,000 times
 * over the Unix socket and 66,000 times over TCP.  The refill time is past
 * divvyd's bound (31 days): every one is refused and nothing is stored. */
static void test_resp_adhoc_flood_absurd_period(void **state)
{
    struct harness_daemon *d = start();
    struct job *f, *g;

    (void)state;
    flood_both(d, "k-", "k-", "2147483647", &f, &g);
    others_get_buckets(d, "a");
    expect_flood(f, 0, FLOOD_N, "refilltime over 2678400 seconds");
    expect_flood(g, 0, FLOOD_N, "refilltime over 2678400 seconds");
    /* The six buckets of others_get_buckets() (the other uid's two on Unix
     * and two over TCP, root's two), nothing else. */
    assert_int_equal(stat_of(d, "adhoc_used"), 6);
    assert_int_equal(stat_of(d, "adhoc_busy"), 0);
    munmap(f, sizeof(*f));
    munmap(g, sizeof(*g));
    harness_free(d);
}

/*
 * The flood with a refill time divvyd accepts (one day): the flooder is
 * never busy, holds its share per peer (uid on Unix, address on TCP) and
 * gives up its own oldest buckets past it.  Then the same uid from eight
 * more loopback addresses (eight more peers) fills the pool: a peer with a
 * few buckets (another uid, root) keeps them, and newcomers still get one.
 */
static void test_resp_adhoc_flood_share(void **state)
{
    struct harness_daemon *d = start();
    struct job *f, *g, *h, *j;
    const char *const mine[][8] = {
        { "RL.REDUCE", "m-0", "10", "3600", NULL },
        { "RL.REDUCE", "m-1", "10", "3600", NULL },
        { "CL.THROTTLE", "m-g", "9", "1", "3600", NULL },
    };
    const char *const roots[][8] = {
        { "RL.REDUCE", "r-0", "10", "3600", NULL },
        { "RL.REDUCE", "r-1", "10", "3600", NULL },
        { "CL.THROTTLE", "r-g", "9", "1", "3600", NULL },
    };
    const char *const own[][8] = {
        { "RL.REDUCE", "u0-0", "1000000000000000", "86400", NULL },
        { "RL.REDUCE", "u0-65999", "1000000000000000", "86400", NULL },
    };
    long long per_peer = 0, used;

    (void)state;
    j = ask(d, OTHER_UID, NULL, mine, 3);
    expect_reply(j, 0, ":10", "m-0");
    munmap(j, sizeof(*j));
    j = ask(d, 0, NULL, roots, 3);
    expect_reply(j, 0, ":10", "root's r-0");
    munmap(j, sizeof(*j));

    flood_both(d, "u", "t", "86400", &f, &g);
    others_get_buckets(d, "b");
    expect_flood(f, FLOOD_N, 0, "");
    expect_flood(g, FLOOD_N, 0, "");
    /* Two peers, each at its share (7,680: 1/8 of 65,536 less the 4,096
     * reserved); the rest were its own evictions, and so were the two
     * buckets the other uid made over TCP from the flooder's address.  The
     * other uid and root hold five each. */
    per_peer = 7680;
    used = stat_of(d, "adhoc_used");
    assert_int_equal(used, 2 * per_peer + 5 + 5);
    assert_int_equal(stat_of(d, "adhoc_evictions"), 2 * (FLOOD_N - per_peer) + 2);
    /* The flooder's first bucket went, its last is there. */
    j = ask(d, FLOOD_UID, NULL, own, 2);
    expect_reply(j, 0, ":1000000000000000", "the flooder's first key, made again");
    expect_reply(j, 1, ":999999999999999", "the flooder's last key");
    munmap(j, sizeof(*j));

    /* Eight more addresses: 8 x 8,000 more keys, CL.THROTTLE this time (the
     * same table, the same shares), fill the 61,440 buckets unprivileged
     * peers may hold. */
    h = job_new(d, FLOOD_UID);
    h->prefix = "x";
    h->n = 8000;
    h->max = "1000";
    h->period = "86400";
    h->gcra = true;
    for (unsigned s = 0; s < MAX_SRC; s++) {
        static const char *const addrs[MAX_SRC] = { "127.0.0.2", "127.0.0.3", "127.0.0.4",
                                                    "127.0.0.5", "127.0.0.6", "127.0.0.7",
                                                    "127.0.0.8", "127.0.0.9" };

        h->src[s] = addrs[s];
    }
    job_run(h);
    expect_flood(h, 8 * 8000, 0, "");
    /* Unprivileged peers hold all they may; root's five are apart. */
    assert_int_equal(stat_of(d, "adhoc_privileged"), 5);
    assert_int_equal(stat_of(d, "adhoc_used"), 65536 - 4096 + 5);
    others_get_buckets(d, "c");
    /* The few buckets of the other uid and of root were kept, counts and all. */
    j = ask(d, OTHER_UID, NULL, mine, 3);
    expect_reply(j, 0, ":9", "uid 64402's m-0 after the floods");
    expect_reply(j, 1, ":9", "uid 64402's m-1 after the floods");
    expect_reply(j, 2, "*5", "uid 64402's m-g after the floods");
    munmap(j, sizeof(*j));
    j = ask(d, 0, NULL, roots, 3);
    expect_reply(j, 0, ":9", "root's r-0 after the floods");
    expect_reply(j, 1, ":9", "root's r-1 after the floods");
    munmap(j, sizeof(*j));
    assert_int_equal(stat_of(d, "adhoc_busy"), 0);
    munmap(f, sizeof(*f));
    munmap(g, sizeof(*g));
    munmap(h, sizeof(*h));
    harness_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resp_adhoc_flood_absurd_period, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_adhoc_flood_share, harness_setup,
                                        harness_teardown),
    };

    if (geteuid() != 0) {
        fprintf(stderr, "test_resp_adhoc: needs root (drops to throwaway uids)\n");
        return 77;
    }
    return cmocka_run_group_tests_name("resp_adhoc", tests, NULL, NULL);
}
