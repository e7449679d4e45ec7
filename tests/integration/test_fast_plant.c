/* SPDX-License-Identifier: MIT */
/*
 * A divvy-fast member plants counters of rules that are not fast_path
 * (issue 18 item 3; DESIGN section 5; docs/dev/shm.md "Which counters leave the
 * fast table").  The member runs as a throwaway uid in the config's fast
 * group (a numeric gid), gets the table with FAST as libdivvy does, maps it
 * with the table code libdivvy uses (table_attach_fd(), table_hit()), reads
 * the rule ids from the rules.<generation> file it may read, and DEBITs
 * 10^12 into the fast table for a victim's address under the id of a private
 * rule (`pantry`, like the shipped rule of GET /pantry/...) and of a login rule
 * (`login-source`, source = privileged).  Then:
 *   - restart: divvyd stopped and started (snapshot), killed and started,
 *     and started with a config where the legitimate fast_path rule `f` is
 *     not fast_path any more (its counter moves at that start);
 *   - fd store: divvyd killed and started with the member-written memfd
 *     handed back as systemd's fd store does (LISTEN_FDS, fast-table);
 *   - reload: a reload that moves `f` out of the fast table (fast_path true
 *     -> false), which walks the whole fast table.
 * After each: the victim is still allowed by `pantry` and by the login
 * rule, COUNTERS and `divvyctl locked` list neither planted slot, and `f`'s
 * counter (two hits) keeps its count wherever it lives.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "eval.h"
#include "fast_fds.h"
#include "harness.h"
#include "rules.h"
#include "table.h"

#define MEMBER_UID   64205
#define MEMBER_GID   64206          /* the member's primary group */
#define FAST_GID     64207          /* server.fast_group */

#define VICTIM       "192.0.2.7"
#define HONEST       "198.51.100.9"
#define PLANT_DEBT   1000000000000ULL

static const char plant_conf_fmt[] =
    "server = { socket_mode = \"0666\"; fast_group = \"64207\"; };\n"
    "table = { fast_slots = 4096; };\n"
    "rules = (\n"
    "    { match = { event = \"authfail\"; rhost = \"*\"; }; label = \"login-source\";\n"
    "      actor = \"rhost\"; credit_limit = 3; reset_seconds = 900;\n"
    "      source = \"privileged\"; },\n"
    "    { match = { method = \"GET\"; path = \"/f\"; ip = \"*\"; }; label = \"f\";\n"
    "      actor = \"ip\"; credit_limit = 5; reset_seconds = 3600; fast_path = %s; },\n"
    "    { match = { method = \"GET\"; path = \"/pantry/*\"; ip = \"*\"; }; label = \"pantry\";\n"
    "      actor = \"ip\"; credit_limit = 1; reset_seconds = 3600; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static char *plant_conf(bool f_fast)
{
    char *text = harness_scratch(sizeof(plant_conf_fmt) + 8);

    assert_non_null(text);
    snprintf(text, sizeof(plant_conf_fmt) + 8, plant_conf_fmt, f_fast ? "true" : "false");
    return text;
}

static void reload_ok(struct harness_daemon *d)
{
    struct harness_conn *c;
    char reply[HARNESS_LINE];

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "RELOAD", reply, sizeof(reply)));
    EXPECT_PREFIX(reply, "OK reloaded");
    harness_close(c);
}

/* divvyd with `f` fast_path, its state dir as tmpfiles.d makes /run/divvy
 * (2755, group divvy-fast: the member reads the rules files), two honest
 * hits of `f`. */
static struct harness_daemon *start_plant(void)
{
    struct harness_opts o = { .config_name = "plant.conf", .config_text = plant_conf(true) };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;

    if (geteuid() != 0) {
        fprintf(stderr, "  SKIP: not root (the member runs as another user)\n");
        skip();
    }
    CHECK(harness_start(&o, &d));
    assert_int_equal(chmod(d->dir, 0755), 0);
    assert_int_equal(chown(d->state, 0, FAST_GID), 0);
    assert_int_equal(chmod(d->state, 02755), 0);
    /* The next rules file is made under the group, as in /run/divvy. */
    reload_ok(d);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT method=GET path=/f ip=" HONEST, true, 4, 3599, 3600);
    EXPECT_OK(c, "HIT method=GET path=/f ip=" HONEST, true, 3, 3599, 3600);
    harness_close(c);
    return d;
}

/* ---- the member ------------------------------------------------------------------------- */

static int drop_to(uid_t uid, gid_t gid, const gid_t *groups, size_t n)
{
    if (setgroups(n, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
        return -errno;
    return getuid() == uid && geteuid() == uid ? 0 : -EPERM;
}

/* The rules the control page announces, read from the file libdivvy reads. */
static int member_rules(const struct harness_daemon *d, const struct table *t,
                        struct rules **ret)
{
    char path[HARNESS_PATH + 32];
    static char blob[1 << 20];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "%s/rules.%llu", d->state,
             (unsigned long long)table_generation(t));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    n = read(fd, blob, sizeof(blob));
    close(fd);
    if (n <= 0 || (size_t)n == sizeof(blob))
        return -EIO;
    return rules_from_blob(blob, (size_t)n, ret);
}

/* DEBITs PLANT_DEBT into @t for the counter rule @label would use for @kv,
 * under the rule's own limits: the victim is in debt there. */
static int plant(struct table *t, const struct rules *rules, const char *label,
                 const struct proto_kv *kv, unsigned n_kv)
{
    struct rules_req req = { .kv = kv, .n_kv = n_kv, .privileged = true };
    char actor[RULES_ACTOR_MAX];
    struct table_limits lim;
    struct table_result res;
    struct rules_rule r;
    int len, rc;

    for (uint32_t i = 0; i < rules_count(rules); i++) {
        if (rules_get(rules, i, &r) < 0 || strcmp(r.label, label) != 0)
            continue;
        len = rules_actor(rules, i, &req, actor, sizeof(actor));
        if (len < 0)
            return len;
        eval_limits(&r, &lim);
        rc = table_hit(t, &(struct table_key){ r.id, actor, (size_t)len }, &lim, TABLE_DEBIT,
                       PLANT_DEBT, clock_now_ms(), &res);
        if (rc < 0)
            return rc;
        fprintf(stderr, "  member: planted rule %s (id %016llx, %s) actor \"%.*s\": "
                "allowed=%d credit=%llu reset=%llu s\n", label, (unsigned long long)r.id,
                r.fast_path ? "fast_path" : "not fast_path", len, actor, res.allowed,
                (unsigned long long)res.credit, (unsigned long long)res.reset_ms / 1000);
        return res.allowed ? -EPROTO : 0;
    }
    return -ENOENT;
}

static int member_child(void *arg)
{
    const struct harness_daemon *d = arg;
    const gid_t groups[] = { FAST_GID };
    const struct proto_kv pantry_kv[] = {
        { "ip", VICTIM, 2, sizeof(VICTIM) - 1 },
        { "method", "GET", 6, 3 },
        { "path", "/pantry/jam", 4, 11 },
    };
    const struct proto_kv login_kv[] = {
        { "event", "authfail", 5, 8 },
        { "rhost", VICTIM, 5, sizeof(VICTIM) - 1 },
    };
    struct rules *rules = NULL;
    struct table *t = NULL;
    char why[160] = "";
    int tfd = -1, cfd = -1, r;

    if (drop_to(MEMBER_UID, MEMBER_GID, groups, 1) < 0)
        return 100;
    if (fast_fds_get(d->sock, &tfd, &cfd) < 0)
        return 1;
    r = table_attach_fd(tfd, 0, &t, why, sizeof(why));
    if (r < 0) {
        fprintf(stderr, "member: table_attach_fd: %s %s\n", strerror(-r), why);
        return 2;
    }
    if (table_ctl_attach(t, cfd) < 0)
        return 3;
    r = member_rules(d, t, &rules);
    if (r < 0) {
        fprintf(stderr, "member: rules file: %s\n", strerror(-r));
        return 4;
    }
    r = plant(t, rules, "pantry", pantry_kv, 3);
    if (r < 0) {
        fprintf(stderr, "member: planting pantry: %s\n", strerror(-r));
        return 5;
    }
    r = plant(t, rules, "login-source", login_kv, 2);
    if (r < 0) {
        fprintf(stderr, "member: planting login-source: %s\n", strerror(-r));
        return 6;
    }
    rules_free(rules);
    table_close(t);
    return 0;
}

static void run_member(struct harness_daemon *d)
{
    pid_t pid;
    int status;

    CHECK(harness_spawn(member_child, d, &pid));
    CHECK(harness_reap(pid, 20000, &status));
    if (status != 0)
        fail_msg("the fast-group member %s %d", status > 128 ? "died of signal" : "failed at step",
                 status > 128 ? status - 128 : status);
}

/* ---- what root sees --------------------------------------------------------------------- */

/*
 * The planted slots changed nothing: the victim is allowed by `pantry` and
 * by the login rule, neither COUNTERS nor `divvyctl locked` shows them, and
 * `f`'s honest counter still has 3 of 5 (and is listed).
 */
static void expect_unplanted_at(const char *sock, const char *when)
{
    struct harness_conn *c;
    struct harness_ctl *ctl;
    char buf[HARNESS_LINE * 4], r[HARNESS_LINE];
    bool allowed;
    long long credit, secs;

    fprintf(stderr, "  checking %s\n", when);
    CHECK(harness_connect_unix(sock, &c));
    CHECK(harness_cmd(c, "PEEK method=GET path=/pantry/jam ip=" VICTIM, r, sizeof(r)));
    if (strcmp(r, "OK true 1 0 pantry") != 0)
        fail_msg("%s: the victim under rule pantry: \"%s\", want \"OK true 1 0 pantry\"",
                 when, r);
    CHECK(harness_cmd(c, "PEEK event=authfail rhost=" VICTIM, r, sizeof(r)));
    if (strcmp(r, "OK true 3 0 login-source") != 0)
        fail_msg("%s: the victim under rule login-source: \"%s\", want \"OK true 3 0 "
                 "login-source\"", when, r);
    CHECK(harness_cmd(c, "PEEK method=GET path=/f ip=" HONEST, r, sizeof(r)));
    if (harness_parse_ok_rule(r, &allowed, &credit, &secs, buf, sizeof(buf)) < 0 || !allowed ||
        credit != 3 || strcmp(buf, "f") != 0)
        fail_msg("%s: rule f's honest counter: \"%s\", want credit 3 of 5", when, r);
    CHECK(harness_multi(c, "COUNTERS", buf, sizeof(buf)));
    if (strstr(buf, VICTIM))
        fail_msg("%s: COUNTERS lists a planted slot:\n%s", when, buf);
    if (!strstr(buf, "rule=f actor=\"" HONEST "\" credit=3 used=2"))
        fail_msg("%s: COUNTERS does not list rule f's counter:\n%s", when, buf);
    harness_close(c);
    ctl = harness_ctl_run(false, NULL, 0, (const char *const[]){ "-s", sock, "locked", NULL });
    if (strstr(ctl->out, VICTIM) || strstr(ctl->out, "login") || strstr(ctl->out, "pantry"))
        fail_msg("%s: divvyctl locked lists a planted slot:\n%s", when, ctl->out);
}

static void expect_unplanted(struct harness_daemon *d, const char *when)
{
    expect_unplanted_at(d->sock, when);
}

static void stop_ok(struct harness_daemon *d)
{
    int status;

    CHECK(harness_stop(d, &status));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("divvyd did not exit 0 on SIGTERM: status 0x%x", status);
}

/* A crash: SIGKILL, and divvyd is gone. */
static void crash(struct harness_daemon *d)
{
    d->expect_exit = true;
    CHECK(harness_kill(d, SIGKILL));
    for (uint64_t end = harness_now_ms() + HARNESS_STOP_MS; harness_alive(d);)
        if (harness_now_ms() > end)
            fail_msg("divvyd survived SIGKILL");
        else
            harness_pause_ms(10);
}

/* ---- the tests -------------------------------------------------------------------------- */

static void test_fast_plant_restart(void **state)
{
    struct harness_daemon *d = start_plant();

    (void)state;
    run_member(d);
    expect_unplanted(d, "after the plant");

    /* A clean stop and start: the fast table comes back from the snapshot. */
    stop_ok(d);
    CHECK(harness_restart(d));
    expect_unplanted(d, "after a restart");

    /* A crash: whatever the last snapshot held (the planted slots too). */
    crash(d);
    CHECK(harness_restart(d));
    expect_unplanted(d, "after a crash and a start");

    /* `f` left the fast path while divvyd was stopped: its counter moves at
     * start, as the last run recorded f as fast_path; the planted ones stay. */
    stop_ok(d);
    CHECK(harness_write_config(d, plant_conf(false)));
    CHECK(harness_restart(d));
    expect_unplanted(d, "after a start with f no longer fast_path");
    assert_int_equal(harness_log_contains(d, "start: 1 counters moved out of the fast table"), 1);
    assert_int_equal(harness_log_contains(d, "counters in the fast table name rules that were "
                                             "not fast_path"), 1);
}

/* ---- systemd's fd store ----------------------------------------------------------------- */

struct store_start {
    const struct harness_daemon *d;
    const char *listen;         /* "unix:<dir>/store.sock" */
    int table_fd;               /* the memfd, as the store hands it back */
};

/* The child: divvyd with the stored memfd as fd 3, as systemd passes it. */
static int store_child(void *arg)
{
    const struct store_start *s = arg;
    char pid[16];
    int log = open(s->d->log, O_WRONLY | O_APPEND | O_CLOEXEC);

    if (log < 0 || dup2(log, 2) < 0 || dup2(s->table_fd, 3) != 3)
        return 120;
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    if (setenv("LISTEN_FDS", "1", 1) < 0 || setenv("LISTEN_PID", pid, 1) < 0 ||
        setenv("LISTEN_FDNAMES", "fast-table", 1) < 0)
        return 121;
    unsetenv("NOTIFY_SOCKET");
    execl(harness_divvyd(), "divvyd", "-c", s->d->config, "-s", s->d->state, "-l", s->listen,
          "-w", "1", (char *)NULL);
    return 127;
}

/* A crash under systemd: the next divvyd takes the very memfd the member
 * wrote back from the fd store. */
static void test_fast_plant_fd_store(void **state)
{
    struct harness_daemon *d = start_plant();
    struct store_start s = { .d = d };
    struct harness_conn *c = NULL;
    char listen[HARNESS_PATH + 32], reply[HARNESS_LINE];
    int cfd = -1, status;
    pid_t pid;

    (void)state;
    run_member(d);
    CHECK(fast_fds_get(d->sock, &s.table_fd, &cfd));
    close(cfd);
    crash(d);
    snprintf(listen, sizeof(listen), "unix:%s/store.sock", d->dir);
    s.listen = listen;
    CHECK(harness_spawn(store_child, &s, &pid));
    close(s.table_fd);
    for (uint64_t end = harness_now_ms() + HARNESS_START_MS;; harness_pause_ms(20)) {
        if (harness_now_ms() > end)
            fail_msg("divvyd with the stored memfd did not answer PING");
        if (harness_connect_unix(listen + 5, &c) < 0)
            continue;
        if (harness_cmd(c, "PING", reply, sizeof(reply)) >= 0 && strcmp(reply, "OK pong") == 0)
            break;
        harness_close(c);
        c = NULL;
    }
    harness_close(c);
    assert_int_equal(harness_log_contains(d, "taken back from the service manager's fd store"),
                     1);
    expect_unplanted_at(listen + 5, "after a crash and a start with the fd store's memfd");
    assert_int_equal(kill(pid, SIGTERM), 0);
    CHECK(harness_reap(pid, HARNESS_STOP_MS, &status));
    assert_int_equal(status, 0);
}

static void test_fast_plant_reload(void **state)
{
    struct harness_daemon *d = start_plant();

    (void)state;
    run_member(d);
    expect_unplanted(d, "after the plant");

    /* A reload that moves `f` out of the fast table walks all of it. */
    CHECK(harness_write_config(d, plant_conf(false)));
    reload_ok(d);
    expect_unplanted(d, "after a reload that moves f out of the fast table");
    assert_int_equal(harness_log_contains(d, "1 counters moved out of the fast table"), 1);

    /* And back: `f`'s counter moves into the fast table again; the planted
     * slots still count for nothing. */
    CHECK(harness_write_config(d, plant_conf(true)));
    reload_ok(d);
    expect_unplanted(d, "after a reload that moves f back");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fast_plant_restart, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_fast_plant_fd_store, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_fast_plant_reload, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("fast_plant", tests, NULL, NULL);
}
