/* SPDX-License-Identifier: MIT */
/*
 * Fast-path decisions in the decision log (issue 23, docs/dev/fast-report.md,
 * docs/protocol.md "REPORT", docs/client.md "Reported decisions").  A real
 * divvyd with decision_log enabled, real libdivvy fast-path handles, and
 * raw REPORT lines from forked children that dropped root to throwaway ids
 * (server.fast_group is a numeric gid):
 *   - the control page says the log is on (offset 72) or off;
 *   - a handle's in-process decisions reach the log with its uid and pid,
 *     verdicts and credits as the caller got them, marked reported, at
 *     divvy_close() and when the oldest is 1 s old on the next call;
 *   - a REPORT from a fast-group member is recorded under the member's
 *     SO_PEERCRED uid and pid; one from a Unix peer outside the group, over
 *     TCP, naming a rule that is not fast_path or not on the request's
 *     path, stale or from the future, or malformed is not, and counts in
 *     STATS fast_reports_dropped;
 *   - a member's flood of REPORT lines on a one-worker divvyd loses none of
 *     divvyd's own decisions on that worker (only reports may be dropped,
 *     each counted);
 *   - with the log off nothing is sent (STATS fast_reports stays 0).
 * The log is read back with server/dlog.c's reader.
 */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "divvy.h"
#include "dlog.h"
#include "fast_fds.h"
#include "harness.h"
#include "table.h"

#define MEMBER_UID   64300
#define FAST_GID     64301          /* server.fast_group */
#define MEMBER_GID   64302          /* the member's primary group */
#define OTHER_UID    64303          /* in no group of divvy's */
#define FLOOD_REPORTS 20000
#define FLOOD_PAD    1500         /* bytes of padding in each flooding report */
#define FLOOD_HITS   3000
#define SEEN_MAX     (FLOOD_REPORTS + FLOOD_HITS + 64)

static char logroot[64];            /* mkdtemp(): the log directory is <logroot>/log */
static char logdir[96];
static char conf[4096];

static void make_conf(bool log_on)
{
    snprintf(conf, sizeof(conf),
             "server = { socket_mode = \"0666\"; fast_group = \"%d\"; };\n"
             "table = { fast_slots = 4096; };\n"
             "%s%s%s"
             "rules = (\n"
             "    { match = { path = \"/f\"; ip = \"*\"; }; actor = \"ip\"; credit_limit = 3;\n"
             "      reset_seconds = 3600; fast_path = true; },\n"
             "    { match = { path = \"/s\"; }; credit_limit = 100000000; reset_seconds = 3600; },\n"
             "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
             ");\n",
             FAST_GID, log_on ? "decision_log = { enabled = true; directory = \"" : "",
             log_on ? logdir : "", log_on ? "\"; flush_ms = 100; };\n" : "");
}

static int setup(void **state)
{
    snprintf(logroot, sizeof(logroot), "/tmp/divvy-fastreport-XXXXXX");
    if (!mkdtemp(logroot))
        return -1;
    snprintf(logdir, sizeof(logdir), "%s/log", logroot);
    return harness_setup(state);
}

static int teardown(void **state)
{
    int r = harness_teardown(state);

    harness_rm_tree(logroot);
    return r;
}

static struct harness_daemon *start(bool log_on, unsigned workers, bool as_others)
{
    struct harness_opts o = { .config_name = "report.conf", .config_text = conf,
                              .workers = workers };
    struct harness_daemon *d = NULL;

    if (as_others && geteuid() != 0) {
        fprintf(stderr, "  SKIP: not root (the peers run as other users)\n");
        skip();
    }
    make_conf(log_on);
    CHECK(harness_start(&o, &d));
    assert_int_equal(chmod(d->dir, 0755), 0);
    CHECK(harness_divvy_env(d));
    return d;
}

/* The control page's decision_log word, through the descriptor FAST hands over. */
static uint64_t control_word(struct harness_daemon *d)
{
    int tfd = -1, cfd = -1;
    const uint64_t *page;
    uint64_t v;

    CHECK(fast_fds_get(d->sock, &tfd, &cfd));
    page = mmap(NULL, 4096, PROT_READ, MAP_SHARED, cfd, 0);
    assert_true(page != MAP_FAILED);
    v = page[72 / 8];
    munmap((void *)page, 4096);
    close(tfd);
    close(cfd);
    return v;
}

/* rule @idx's id (RULES' id= of an unlabelled rule: 16 hex digits). */
static uint64_t rule_id(struct harness_daemon *d, unsigned idx)
{
    struct harness_conn *c = NULL;
    char buf[HARNESS_LINE * 4], want[32], *p;
    uint64_t id = 0;

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    assert_true(harness_multi(c, "RULES", buf, sizeof(buf)) >= 0);
    snprintf(want, sizeof(want), "rule=%u id=", idx);
    p = strstr(buf, want);
    assert_non_null(p);
    assert_int_equal(sscanf(p + strlen(want), "%16" SCNx64, &id), 1);
    harness_close(c);
    return id;
}

/* Polls STATS until @name reaches @want (5 s). */
static void wait_stat(struct harness_daemon *d, const char *name, long long want)
{
    uint64_t deadline = harness_now_ms() + 5000;
    long long v;

    while ((v = harness_daemon_stat(d, name)) < want && harness_now_ms() < deadline)
        harness_pause_ms(20);
    if (v != want)
        fail_msg("STATS %s=%lld, want %lld", name, v, want);
}

/* What the test looks at of one recorded decision. */
struct seen {
    uint8_t protocol, op, flags;
    uint32_t uid, pid;
    uint64_t n, credit, reset_s, decider_id, mono_ms;
    char path[16], ip[40];
};

static struct seen *seen;
static size_t n_seen;

static void copy_value(const struct dlog_decision *dd, const char *key, char *buf, size_t size)
{
    buf[0] = '\0';
    for (unsigned i = 0; i < dd->n_kv; i++)
        if (dd->kv[i].key_len == strlen(key) && memcmp(dd->kv[i].key, key, strlen(key)) == 0)
            snprintf(buf, size, "%.*s", (int)dd->kv[i].value_len, dd->kv[i].value);
}

/* Every decision of every file in the log directory, in file order. */
static void read_log(void)
{
    struct dirent **names = NULL;
    int n = scandir(logdir, &names, NULL, alphasort);

    if (!seen)
        seen = calloc(SEEN_MAX, sizeof(*seen));
    assert_non_null(seen);
    n_seen = 0;
    for (int i = 0; i < n; i++) {
        struct dlog_reader *rd = NULL;
        struct dlog_item it;
        char path[256];
        size_t len = strlen(names[i]->d_name);

        if (len > 5 && strcmp(names[i]->d_name + len - 5, DLOG_FILE_SUFFIX) == 0) {
            snprintf(path, sizeof(path), "%s/%s", logdir, names[i]->d_name);
            CHECK(dlog_reader_open(path, &rd));
            while (dlog_reader_next(rd, &it) > 0) {
                const struct dlog_decision *dd = &it.u.d;
                struct seen *s = &seen[n_seen];

                assert_int_not_equal(it.type, DLOG_CORRUPT);
                if (it.type != DLOG_DECISION)
                    continue;
                assert_true(n_seen < SEEN_MAX);
                *s = (struct seen){ .protocol = dd->protocol, .op = dd->op, .flags = dd->flags,
                                    .uid = dd->uid, .pid = dd->pid, .n = dd->n,
                                    .credit = dd->credit, .reset_s = dd->reset_s,
                                    .decider_id = dd->decider_id, .mono_ms = dd->mono_ms };
                copy_value(dd, "path", s->path, sizeof(s->path));
                copy_value(dd, "ip", s->ip, sizeof(s->ip));
                n_seen++;
            }
            dlog_reader_close(rd);
        }
        free(names[i]);
    }
    free(names);
}

/* Recorded decisions of protocol @protocol (UINT8_MAX: any) from @uid. */
static size_t count(uint8_t protocol, uint32_t uid)
{
    size_t k = 0;

    for (size_t i = 0; i < n_seen; i++)
        k += (protocol == UINT8_MAX || seen[i].protocol == protocol) && seen[i].uid == uid;
    return k;
}

/* Reads the log until @want decisions of @protocol from @uid are in it (5 s). */
static void wait_log(uint8_t protocol, uint32_t uid, size_t want)
{
    uint64_t deadline = harness_now_ms() + 5000;

    for (;;) {
        read_log();
        if (count(protocol, uid) >= want || harness_now_ms() >= deadline)
            break;
        harness_pause_ms(50);
    }
    if (count(protocol, uid) != want)
        fail_msg("%zu decisions of protocol %u from uid %u in the log, want %zu",
                 count(protocol, uid), protocol, uid, want);
}

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- a libdivvy handle's own decisions ----------------------------------------------------- */

static void check_seen(const struct seen *s, const struct divvy_result *res, uint8_t op,
                       uint64_t n, uint64_t id, const char *ip, uint64_t t0, uint64_t t1)
{
    assert_int_equal(s->protocol, DLOG_PROTO_FAST);
    assert_int_equal(s->flags & (DLOG_F_REPORTED | DLOG_F_ALLOWED | DLOG_F_ERROR),
                     DLOG_F_REPORTED | (res->allowed ? DLOG_F_ALLOWED : 0));
    assert_int_equal(s->uid, geteuid());
    assert_int_equal(s->pid, getpid());
    assert_int_equal(s->op, op);
    assert_int_equal(s->n, n);
    assert_int_equal(s->credit, res->credit);
    assert_int_equal(s->reset_s, res->reset_seconds);
    assert_int_equal(s->decider_id, id);
    assert_string_equal(s->path, "/f");
    assert_string_equal(s->ip, ip);
    /* The client's coarse clock: up to a tick behind CLOCK_MONOTONIC. */
    assert_true(s->mono_ms + 20 >= t0 && s->mono_ms <= t1);
}

/* The same rules and one more: the fast rule keeps its id (docs/rules.md
 * "Identity"); the client's next decision loads the new generation. */
static void reload_more_rules(struct harness_daemon *d)
{
    static const char more[] = "    { match = { path = \"/extra\"; }; credit_limit = 5;\n"
                               "      reset_seconds = 60; },\n"
                               "    { default = true;";
    struct harness_conn *c = NULL;
    char text[sizeof(conf) + 256], reply[HARNESS_LINE], *p;

    snprintf(text, sizeof(text), "%s", conf);
    p = strstr(text, "    { default = true;");
    assert_non_null(p);
    snprintf(p, sizeof(text) - (size_t)(p - text), "%s%s", more,
             strstr(conf, "    { default = true;") + strlen("    { default = true;"));
    CHECK(harness_write_config(d, text));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    assert_true(harness_cmd(c, "RELOAD", reply, sizeof(reply)) > 0);
    assert_non_null(strstr(reply, "OK reloaded"));
    harness_close(c);
}

/* @h's first of two decisions was sent (the log holds @base + 1 of ours),
 * the second waits in its batch until divvy_close(). */
static void first_sent_second_waits(struct divvy *h, size_t base)
{
    wait_log(DLOG_PROTO_FAST, geteuid(), base + 1);
    harness_pause_ms(300);
    read_log();
    assert_int_equal(count(DLOG_PROTO_FAST, geteuid()), base + 1);
    divvy_close(h);
    wait_log(DLOG_PROTO_FAST, geteuid(), base + 2);
}

static void test_fast_report_client(void **state)
{
    struct harness_daemon *d = start(true, 0, false);
    struct divvy_result res[8];
    struct divvy *h = NULL;
    const struct divvy_kv kv1[] = { { "path", "/f" }, { "ip", "192.0.2.1" } },
                          kv2[] = { { "ip", "192.0.2.2" }, { "path", "/f" } };
    uint64_t id = rule_id(d, 0), t0, t1;

    (void)state;
    assert_int_equal(control_word(d), 1);
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    t0 = mono_ms();
    for (int i = 0; i < 8; i++)
        res[i] = (struct divvy_result){ .size = sizeof(res[i]) };
    /* Five hits on a limit of 3 (the memo decides the repeats), a PEEK, a TAKE 2. */
    for (int i = 0; i < 5; i++)
        CHECK(divvy_hit(h, kv1, 2, &res[i]));
    CHECK(divvy_peek(h, kv1, 2, &res[5]));
    CHECK(divvy_take(h, 2, kv2, 2, &res[6]));
    for (int i = 0; i < 7; i++)
        assert_int_equal(res[i].fast_path, 1);
    assert_true(res[2].allowed && !res[3].allowed && !res[4].allowed && res[6].allowed);
    /* Nothing is sent before the batch is due. */
    harness_pause_ms(300);
    read_log();
    assert_int_equal(count(DLOG_PROTO_FAST, geteuid()), 0);
    divvy_close(h);
    t1 = mono_ms();
    wait_log(DLOG_PROTO_FAST, geteuid(), 7);
    for (size_t i = 0, k = 0; i < n_seen; i++) {
        if (seen[i].protocol != DLOG_PROTO_FAST)
            continue;
        check_seen(&seen[i], &res[k], k == 5 ? TABLE_PEEK : TABLE_TAKE,
                   k == 6 ? 2 : 1, id, k == 6 ? "192.0.2.2" : "192.0.2.1", t0, t1);
        k++;
    }

    /* A batch whose oldest is 1 s old goes with the handle's next call. */
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    res[0] = (struct divvy_result){ .size = sizeof(res[0]) };
    CHECK(divvy_peek(h, kv1, 2, &res[0]));
    harness_pause_ms(1100);
    CHECK(divvy_peek(h, kv1, 2, &res[1]));
    first_sent_second_waits(h, 7);

    /* New rules: the batch goes before the handle decides with them. */
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    CHECK(divvy_peek(h, kv1, 2, &res[0]));
    reload_more_rules(d);
    CHECK(divvy_peek(h, kv1, 2, &res[1]));
    assert_int_equal(res[1].fast_path, 1);
    first_sent_second_waits(h, 9);
    assert_int_equal(harness_daemon_stat(d, "fast_reports"), 11);
    assert_int_equal(harness_daemon_stat(d, "fast_reports_dropped"), 0);
}

/* ---- raw REPORT lines from other peers ------------------------------------------------------ */

static int drop_to(uid_t uid, gid_t gid, const gid_t *groups, size_t n)
{
    if (setgroups(n, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
        return -errno;
    return getuid() == uid && geteuid() == uid ? 0 : -EPERM;
}

struct peer_arg {
    const struct harness_daemon *d;
    uint64_t fast_id, slow_id;
};

static int send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* In a child: becomes the member (in the fast group) or the other user (in
 * no group of divvy's) and connects to divvyd's socket: the fd, or the
 * child's exit code 10 (cannot drop) or 11 (cannot connect), negated. */
static int peer_connect(const struct peer_arg *a, bool member)
{
    const gid_t groups[] = { FAST_GID };
    int fd;

    if ((member ? drop_to(MEMBER_UID, MEMBER_GID, groups, 1)
                : drop_to(OTHER_UID, OTHER_UID, NULL, 0)) < 0)
        return -10;
    fd = harness_unix_fd(a->d->sock);
    return fd < 0 ? -11 : fd;
}

/* A member: one good report, then five that must not be recorded. */
static int member_child(void *arg)
{
    const struct peer_arg *a = arg;
    char buf[2048];
    uint64_t now = mono_ms();
    int fd = peer_connect(a, true), n;

    if (fd < 0)
        return -fd;
    n = snprintf(buf, sizeof(buf),
                 "REPORT %" PRIu64 " TAKE 1 1 2 3600 %016" PRIx64 " path=/f ip=198.51.100.1\n"
                 "REPORT %" PRIu64 " TAKE 1 1 2 3600 %016" PRIx64 " path=/s\n"
                 "REPORT %" PRIu64 " TAKE 1 1 2 3600 %016" PRIx64 " path=/f ip=198.51.100.2\n"
                 "REPORT %" PRIu64 " TAKE 1 1 2 3600 %016" PRIx64 " path=/f ip=198.51.100.3\n"
                 "REPORT %" PRIu64 " TAKE 1 1 2 3600 %016" PRIx64 " path=/s ip=198.51.100.4\n"
                 "REPORT %" PRIu64 " TAKE 1 1 2 3600 fast path=/f ip=198.51.100.5\n",
                 now, a->fast_id, now, a->slow_id, now - 61000, a->fast_id, now + 5000,
                 a->fast_id, now, a->fast_id, now);
    if (send_all(fd, buf, (size_t)n) < 0)
        return 12;
    close(fd);
    return 0;
}

/* Outside the fast group: a well-formed report, not recorded. */
static int other_child(void *arg)
{
    const struct peer_arg *a = arg;
    char buf[512];
    int fd = peer_connect(a, false), n;

    if (fd < 0)
        return -fd;
    n = snprintf(buf, sizeof(buf),
                 "REPORT %" PRIu64 " TAKE 1 1 2 3600 %016" PRIx64 " path=/f ip=203.0.113.9\n",
                 mono_ms(), a->fast_id);
    if (send_all(fd, buf, (size_t)n) < 0)
        return 12;
    close(fd);
    return 0;
}

static void test_fast_report_peers(void **state)
{
    struct harness_daemon *d = start(true, 0, true);
    struct peer_arg a = { .d = d, .fast_id = rule_id(d, 0), .slow_id = rule_id(d, 1) };
    struct harness_conn *tcp = NULL;
    pid_t member, other;
    int status;
    char reply[HARNESS_LINE];

    (void)state;
    CHECK(harness_spawn(member_child, &a, &member));
    CHECK(harness_reap(member, 20000, &status));
    assert_int_equal(status, 0);
    CHECK(harness_spawn(other_child, &a, &other));
    CHECK(harness_reap(other, 20000, &status));
    assert_int_equal(status, 0);
    /* Root, but over TCP: no peer credentials, not recorded; never answered. */
    CHECK(harness_connect(d, HARNESS_TCP, &tcp));
    CHECK(harness_sendf(tcp, "REPORT %" PRIu64 " TAKE 1 1 2 3600 %016" PRIx64
                        " path=/f ip=203.0.113.10\n", mono_ms(), a.fast_id));
    assert_true(harness_cmd(tcp, "PING", reply, sizeof(reply)) > 0);
    assert_string_equal(reply, "OK pong");
    wait_stat(d, "fast_reports", 8);
    assert_int_equal(harness_daemon_stat(d, "fast_reports_dropped"), 7);
    wait_log(DLOG_PROTO_FAST, MEMBER_UID, 1);
    for (size_t i = 0; i < n_seen; i++) {
        if (seen[i].uid != MEMBER_UID)
            continue;
        assert_int_equal(seen[i].pid, (uint32_t)member);
        assert_int_equal(seen[i].flags & DLOG_F_REPORTED, DLOG_F_REPORTED);
        assert_int_equal(seen[i].decider_id, a.fast_id);
        assert_string_equal(seen[i].ip, "198.51.100.1");
        assert_int_equal(seen[i].credit, 2);
    }
    assert_int_equal(count(UINT8_MAX, OTHER_UID), 0);
    assert_int_equal(count(DLOG_PROTO_FAST, DLOG_UNKNOWN_ID), 0);
    harness_close(tcp);
}

/* ---- a flood of reports against divvyd's own decisions -------------------------------------- */

static int flood_child(void *arg)
{
    const struct peer_arg *a = arg;
    static char buf[1 << 16], pad[FLOOD_PAD + 1];
    size_t len = 0;
    int fd = peer_connect(a, true);

    if (fd < 0)
        return -fd;
    /* Large records, so that the reports press on the ring's half. */
    memset(pad, 'x', FLOOD_PAD);
    for (int i = 0; i < FLOOD_REPORTS; i++) {
        if (len + FLOOD_PAD + 256 > sizeof(buf)) {
            if (send_all(fd, buf, len) < 0)
                return 12;
            len = 0;
        }
        len += (size_t)snprintf(buf + len, sizeof(buf) - len,
                                "REPORT %" PRIu64 " TAKE 1 1 2 3600 %016" PRIx64
                                " path=/f ip=198.51.100.%d who=%d pad=%s\n",
                                mono_ms(), a->fast_id, i % 250, i, pad);
    }
    if (send_all(fd, buf, len) < 0)
        return 12;
    close(fd);
    return 0;
}

/* Outside the fast group: FLOOD_HITS TAKEs that divvyd decides, 100 per write. */
static int hits_child(void *arg)
{
    const struct peer_arg *a = arg;
    static char buf[1 << 14];
    char rbuf[4096];
    size_t got = 0;
    int fd = peer_connect(a, false);

    if (fd < 0)
        return -fd;
    for (int i = 0; i < FLOOD_HITS; i += 100) {
        size_t len = 0, want = 100;

        for (int j = 0; j < 100; j++)
            len += (size_t)snprintf(buf + len, sizeof(buf) - len, "TAKE 1 path=/s n=%d\n",
                                    i + j);
        if (send_all(fd, buf, len) < 0)
            return 12;
        /* Every reply read before the next write: each is one line. */
        while (want > 0) {
            ssize_t n = read(fd, rbuf, sizeof(rbuf));

            if (n <= 0)
                return 13;
            for (ssize_t k = 0; k < n; k++)
                want -= rbuf[k] == '\n';
            got += (size_t)n;
        }
    }
    close(fd);
    return got > 0 ? 0 : 14;
}

/*
 * A member floods one worker with large reports while another user's TAKEs
 * are decided there.  Whether reports are dropped depends on how fast the
 * drain empties the ring (a run drops some hundreds, or none); what must
 * hold either way: every decision divvyd took is in the log, and every
 * report is either recorded or counted as dropped.
 */
static void test_fast_report_flood(void **state)
{
    struct harness_daemon *d = start(true, 1, true);
    struct peer_arg a = { .d = d, .fast_id = rule_id(d, 0), .slow_id = rule_id(d, 1) };
    long long dropped;
    pid_t flood, hits;
    int status;

    (void)state;
    CHECK(harness_spawn(flood_child, &a, &flood));
    CHECK(harness_spawn(hits_child, &a, &hits));
    CHECK(harness_reap(hits, 60000, &status));
    assert_int_equal(status, 0);
    CHECK(harness_reap(flood, 60000, &status));
    assert_int_equal(status, 0);
    wait_stat(d, "fast_reports", FLOOD_REPORTS);
    dropped = harness_daemon_stat(d, "fast_reports_dropped");
    /* Every decision divvyd took is in the log, whatever the flood cost the reports. */
    wait_log(DLOG_PROTO_LINE, OTHER_UID, FLOOD_HITS);
    wait_log(DLOG_PROTO_FAST, MEMBER_UID, (size_t)(FLOOD_REPORTS - dropped));
    fprintf(stderr, "  flood: %d reports, %lld dropped; %d own decisions, all recorded\n",
            FLOOD_REPORTS, dropped, FLOOD_HITS);
}

/* ---- the log off ------------------------------------------------------------------------------ */

static void test_fast_report_off(void **state)
{
    struct harness_daemon *d = start(false, 0, false);
    const struct divvy_kv kv[] = { { "path", "/f" }, { "ip", "192.0.2.1" } };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy *h = NULL;

    (void)state;
    assert_int_equal(control_word(d), 0);
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    for (int i = 0; i < 100; i++) {
        CHECK(divvy_hit(h, kv, 2, &res));
        assert_int_equal(res.fast_path, 1);
    }
    /* With the log on, this close sends the batch (test_fast_report_client). */
    divvy_close(h);
    harness_pause_ms(300);
    assert_int_equal(harness_daemon_stat(d, "fast_reports"), 0);
    /* A report all the same is counted by the time a PING behind it is
     * answered: dropped, the log being off. */
    {
        struct harness_conn *c = NULL;
        char reply[HARNESS_LINE];

        CHECK(harness_connect(d, HARNESS_UNIX, &c));
        CHECK(harness_sendf(c, "REPORT %" PRIu64 " TAKE 1 1 2 3600 %016" PRIx64
                            " path=/f ip=192.0.2.1\n", mono_ms(), rule_id(d, 0)));
        assert_true(harness_cmd(c, "PING", reply, sizeof(reply)) > 0);
        assert_string_equal(reply, "OK pong");
        harness_close(c);
    }
    assert_int_equal(harness_daemon_stat(d, "fast_reports"), 1);
    assert_int_equal(harness_daemon_stat(d, "fast_reports_dropped"), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fast_report_client, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fast_report_peers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fast_report_flood, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fast_report_off, setup, teardown),
    };
    int r = cmocka_run_group_tests_name("fast_report", tests, NULL, NULL);

    free(seen);
    return r;
}
