/* SPDX-License-Identifier: MIT */
/*
 * Integration: the privileged table (issue 11 items 3 and 9; docs/daemon.md
 * "Counter tables").  The login rules (source = privileged) keep their
 * counters in privileged.table, which no request of an unprivileged peer can
 * reach:
 *   - an unprivileged uid (fork + setuid in the child, raw TCP in-process)
 *     fills the private table with distinct `ip=fill-N` actors under the
 *     shipped etc/divvy.conf rules; root's pam_divvy sequence over the Unix
 *     socket still locks the source after exactly the limit, and the lock
 *     survives a divvyd restart;
 *   - when the privileged table itself is full, root's TAKE and PEEK get
 *     `ERR no-counter`, never a silent allow or deny;
 *   - a rule with 7 hits taken keeps its remaining credit across reloads that
 *     toggle fast_path (checked over the socket and through libdivvy's fast
 *     path) and source = privileged.
 * pam_divvy's side of a full privileged table is in test_pam.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "divvy.h"
#include "harness.h"

#define FLOOD_UID       64011
#define FLOOD_GID       64011
#define PRIVATE_SLOTS   256
#define FLOOD_N         (4 * PRIVATE_SLOTS)
#define FLOOD_BATCH     128
#define ROOT_RHOST      "203.0.113.9"

/* The shipped etc/divvy.conf after @prefix (a table group), in scratch memory. */
static char *shipped_with(const char *prefix)
{
    char src[512];
    size_t len, plen = strlen(prefix);
    char *text;
    FILE *f;
    long size;

    CHECK(harness_src_path("etc/divvy.conf", src, sizeof(src)));
    f = fopen(src, "r");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    size = ftell(f);
    assert_true(size > 0);
    rewind(f);
    text = harness_scratch(plen + (size_t)size + 2);
    assert_non_null(text);
    memcpy(text, prefix, plen);
    len = fread(text + plen, 1, (size_t)size, f);
    fclose(f);
    assert_int_equal(len, (size_t)size);
    text[plen + len] = '\0';
    return text;
}

static struct harness_daemon *start_conf(const char *text)
{
    struct harness_opts o = { .config_name = "divvy.conf", .config_text = text };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    return d;
}

/* ---- (a) a flood over TCP does not blind the login rules --------------------------- */

struct flood {
    int port;
    int n;
};

/* In the child: drop to an unprivileged uid, then flood over TCP in-process
 * (the build tree may be unreachable for that uid: nothing is exec'd). */
static int flood_child(void *arg)
{
    const struct flood *f = arg;
    struct harness_conn *c = NULL;
    char line[HARNESS_LINE];
    static char batch[FLOOD_BATCH * 80];

    if (setgroups(0, NULL) < 0 || setgid(FLOOD_GID) < 0 || setuid(FLOOD_UID) < 0)
        return 10;
    if (getuid() != FLOOD_UID || geteuid() != FLOOD_UID)
        return 11;
    if (harness_connect_tcp(f->port, &c) < 0)
        return 12;
    for (int i = 0; i < f->n; i += FLOOD_BATCH) {
        size_t pos = 0;
        int n = f->n - i < FLOOD_BATCH ? f->n - i : FLOOD_BATCH;

        for (int j = 0; j < n; j++)
            pos += (size_t)snprintf(batch + pos, sizeof(batch) - pos,
                                    "HIT method=GET path=/pantry/x ip=fill-%d\n", i + j);
        if (harness_send(c, batch, pos) < 0)
            return 13;
        for (int j = 0; j < n; j++) {
            if (harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS) < 0)
                return 14;
            if (strncmp(line, "OK ", 3) != 0)
                return 15;
        }
    }
    harness_close(c);
    return 0;
}

/* pam_divvy's sequence for root from ROOT_RHOST: preauth PEEK, then authfail TAKE. */
#define LOGIN_KV "event=authfail service=sshd user=root rhost=" ROOT_RHOST " tty=ssh"

static void expect_root_locked(struct harness_conn *c)
{
    char r[HARNESS_LINE];

    CHECK(harness_cmd(c, "PEEK " LOGIN_KV, r, sizeof(r)));
    if (strncmp(r, "OK false 0 ", 11) != 0 || !strstr(r, " login-root-source"))
        fail_msg("PEEK after 3 failures: \"%s\", want OK false 0 ... login-root-source", r);
}

static void test_privileged_flood_does_not_blind_logins(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c;
    struct flood fl;
    char r[HARNESS_LINE], stats[HARNESS_LINE * 2];
    long long v, e;
    pid_t pid;
    int status;

    (void)state;
    if (geteuid() != 0)
        skip();
    /* privileged_slots stays at its default: the config also runs on a divvyd
     * without the privileged table (where this test fails). */
    d = start_conf(shipped_with("table = { slots = 256; fast_slots = 64; };\n"));
    fl.port = d->tcp_port;
    fl.n = FLOOD_N;
    CHECK(harness_spawn(flood_child, &fl, &pid));
    CHECK(harness_reap(pid, 60000, &status));
    if (status != 0)
        fail_msg("the unprivileged flood failed: exit %d", status);

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    /* The flood did fill the private table: its later actors found no room
     * (answered by when_full, or, the shipped rule's "evict", by evicting). */
    CHECK(harness_multi(c, "STATS", stats, sizeof(stats)));
    CHECK(harness_stat(stats, "table_full_events", &v));
    CHECK(harness_stat(stats, "table_evictions", &e));
    if (v + e <= 0)
        fail_msg("the flood did not fill the private table:\n%s", stats);
    CHECK(harness_stat(stats, "table_live", &v));
    assert_int_equal(v, PRIVATE_SLOTS);

    /* root: 3 failures from the source are counted, the 4th attempt is refused. */
    for (int i = 0; i < 3; i++) {
        CHECK(harness_cmd(c, "PEEK " LOGIN_KV, r, sizeof(r)));
        /* Not locked: allowed, or (the shipped login-user-source's ramping delay after the
         * 2nd failure) refused with credit left, which pam_divvy waits out. */
        if (strncmp(r, "OK true ", 8) != 0 && (strncmp(r, "OK false ", 9) != 0 || r[9] == '0'))
            fail_msg("PEEK before failure %d: \"%s\", want not locked", i + 1, r);
        CHECK(harness_cmd(c, "TAKE 1 " LOGIN_KV, r, sizeof(r)));
        if (strncmp(r, "OK true ", 8) != 0)
            fail_msg("root's failure %d not counted: \"%s\"", i + 1, r);
    }
    expect_root_locked(c);
    CHECK(harness_cmd(c, "TAKE 1 " LOGIN_KV, r, sizeof(r)));
    EXPECT_PREFIX(r, "OK false 0 ");

    /* The counters are in the privileged table, where STATS and COUNTERS show them. */
    CHECK(harness_multi(c, "STATS", stats, sizeof(stats)));
    CHECK(harness_stat(stats, "privileged_table_slots", &v));
    assert_int_equal(v, 65536);
    CHECK(harness_stat(stats, "privileged_table_live", &v));
    assert_int_equal(v, 3);                 /* root-source, user-source, source */
    CHECK(harness_multi(c, "COUNTERS rule=login-root-source exhausted=true", stats,
                        sizeof(stats)));
    if (!strstr(stats, "actor=\"" ROOT_RHOST "/32\" credit=0 used=3 limit=3"))
        fail_msg("COUNTERS does not list the locked source:\n%s", stats);
    harness_close(c);

    /* A restart keeps the lock (privileged.table is reattached). */
    CHECK(harness_stop(d, &status));
    assert_int_equal(status, 0);
    CHECK(harness_restart(d));
    assert_int_equal(harness_log_contains(d, "privileged.table reattached, counts kept"), 1);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_root_locked(c);
    harness_close(c);
}

/* ---- (b) the privileged table full: an error, never a silent answer ---------------- */

static void test_privileged_table_full_is_an_error(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c;
    char r[HARNESS_LINE], req[256], stats[HARNESS_LINE * 2];
    long long before, after;
    int n_ok = 0;

    (void)state;
    if (geteuid() != 0)
        skip();
    d = start_conf(shipped_with("table = { privileged_slots = 64; };\n"));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_get_stat(c, "errors_total", &before));
    /* Each failure from a new source takes 3 counters of the 64. */
    for (int i = 0; i < 64; i++) {
        snprintf(req, sizeof(req), "TAKE 1 event=authfail user=root rhost=10.9.0.%d", i);
        CHECK(harness_cmd(c, req, r, sizeof(r)));
        if (strncmp(r, "ERR no-counter ", 15) == 0)
            break;
        if (strncmp(r, "OK true ", 8) != 0)
            fail_msg("TAKE %d: \"%s\", want OK true or ERR no-counter", i, r);
        n_ok++;
    }
    if (n_ok < 10 || n_ok >= 64)
        fail_msg("%d failures counted before ERR no-counter (64 slots, 3 counters each)", n_ok);
    /* The one that found no counter, and a PEEK for a new source, say so. */
    CHECK(harness_cmd(c, "TAKE 1 event=authfail user=root rhost=198.51.100.77", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR no-counter ");
    CHECK(harness_cmd(c, "PEEK event=authfail user=root rhost=198.51.100.77", r, sizeof(r)));
    EXPECT_PREFIX(r, "ERR no-counter ");
    /* Sources already counted keep working. */
    CHECK(harness_cmd(c, "TAKE 1 event=authfail user=root rhost=10.9.0.0", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK true ");
    CHECK(harness_get_stat(c, "errors_total", &after));
    assert_true(after - before >= 3);
    CHECK(harness_multi(c, "STATS", stats, sizeof(stats)));
    CHECK(harness_stat(stats, "privileged_table_live", &after));
    assert_true(after >= 3 * n_ok && after <= 64);
    harness_close(c);
}

/* ---- (c) counts follow a rule across fast_path and source changes ------------------ */

static const char *api_conf(bool fast, bool privileged)
{
    static char buf[1024];

    snprintf(buf, sizeof(buf),
             "table = { slots = 4096; fast_slots = 4096; };\n"
             "rules = (\n"
             "    { match = { path = \"/api\"; }; label = \"api\"; actor = \"user\";\n"
             "      credit_limit = 50; reset_seconds = 3600; fast_path = %s;%s },\n"
             "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
             ");\n",
             fast ? "true" : "false", privileged ? " source = \"privileged\";" : "");
    return buf;
}

static void reload_to(struct harness_daemon *d, struct harness_conn *c, bool fast,
                      bool privileged)
{
    char r[HARNESS_LINE];

    CHECK(harness_write_config(d, api_conf(fast, privileged)));
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK reloaded ");
}

/* An actor over 32 bytes: stored as a digest (docs/dev/shm.md). */
#define LONG_USER "a-user-name-longer-than-32-bytes-so-it-is-a-digest"

/* HIT alice (want @credit left) and PEEK the long actor (want @long_credit). */
static void expect_credit(struct harness_conn *c, long long credit, long long long_credit,
                          const char *when)
{
    char r[HARNESS_LINE], want[64];
    bool allowed;
    long long got, secs;

    CHECK(harness_cmd(c, "HIT path=/api user=alice", r, sizeof(r)));
    if (harness_parse_ok(r, &allowed, &got, &secs) < 0 || !allowed || got != credit)
        fail_msg("%s: HIT -> \"%s\", want OK true %lld", when, r, credit);
    CHECK(harness_cmd(c, "PEEK path=/api user=" LONG_USER, r, sizeof(r)));
    snprintf(want, sizeof(want), "OK true %lld ", long_credit);
    if (strncmp(r, want, strlen(want)) != 0)
        fail_msg("%s: PEEK of the long actor -> \"%s\", want %s...", when, r, want);
}

/*
 * A rule that goes from fast_path to source = privileged starts afresh: any
 * fast-group member can write the fast table, so none of its counters may
 * become a login counter (a member could otherwise plant a lockout).  The
 * fast counter stays behind (it expires there); on the way back the
 * privileged one (49 left) meets it (43 left) and the one with less credit
 * is kept, as every merge does (docs/daemon.md "Counter tables").
 */
static void test_privileged_never_takes_fast_counters(void **state)
{
    struct harness_opts o = { .config_name = "divvy.conf", .config_text = api_conf(true, false),
                              .workers = 1 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;

    (void)state;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "TAKE 7 path=/api user=alice", "OK true 43 3600 api");
    reload_to(d, c, false, true);
    EXPECT_OK_RULE(c, "TAKE 1 path=/api user=alice", true, 49, 3600, 3600, "api");
    reload_to(d, c, true, false);
    EXPECT_OK_RULE(c, "TAKE 1 path=/api user=alice", true, 42, 3599, 3600, "api");
    harness_close(c);
}

static void test_privileged_counts_follow_fast_path_toggle(void **state)
{
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/api" }, { "user", "alice" } };
    struct harness_opts o = { .config_name = "divvy.conf", .config_text = api_conf(false, false),
                              .workers = 2 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    struct divvy *h = NULL;
    char r[HARNESS_LINE];
    int status;

    (void)state;
    CHECK(harness_start(&o, &d));
    CHECK(harness_divvy_env(d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_REPLY(c, "TAKE 7 path=/api user=alice", "OK true 43 3600 api");
    EXPECT_REPLY(c, "TAKE 3 path=/api user=" LONG_USER, "OK true 47 3600 api");

    /* fast_path on: the counter moved to the fast table. */
    reload_to(d, c, true, false);
    CHECK(harness_cmd(c, "PEEK path=/api user=alice", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK true 43 ");
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    harness_wait_fast(h, kv, 2);
    CHECK(divvy_peek(h, kv, 2, &res));
    assert_int_equal(res.fast_path, 1);
    if (res.credit != 43)
        fail_msg("fast path after fast_path = true: credit %llu, want 43",
                 (unsigned long long)res.credit);
    CHECK(divvy_take(h, 1, kv, 2, &res));
    assert_int_equal(res.fast_path, 1);
    assert_int_equal(res.allowed, 1);
    assert_int_equal(res.credit, 42);
    {
        struct divvy_kv lkv[2] = { { "path", "/api" }, { "user", LONG_USER } };

        CHECK(divvy_peek(h, lkv, 2, &res));
        assert_int_equal(res.fast_path, 1);
        if (res.credit != 47)
            fail_msg("fast path, long actor: credit %llu, want 47",
                     (unsigned long long)res.credit);
    }
    expect_credit(c, 41, 47, "over the socket with fast_path = true");

    /* fast_path off again: back in the private table. */
    reload_to(d, c, false, false);
    expect_credit(c, 40, 47, "after fast_path = false");
    /* libdivvy sees a rule that is no longer fast_path: the socket decides. */
    assert_int_equal(divvy_peek(h, kv, 2, &res), -ENOTSUP);
    divvy_close(h);

    /* source = privileged (root on the Unix socket still matches): the
     * privileged table, and back. */
    reload_to(d, c, false, true);
    expect_credit(c, 39, 47, "after source = privileged");
    reload_to(d, c, false, false);
    expect_credit(c, 38, 47, "after source = any");
    /* Nothing was left behind in any table. */
    assert_int_equal(harness_log_contains(d, "those actors start afresh"), 0);
    harness_close(c);

    /* fast_path changed while divvyd was stopped: the counters move at start. */
    CHECK(harness_stop(d, &status));
    assert_int_equal(status, 0);
    CHECK(harness_write_config(d, api_conf(true, false)));
    CHECK(harness_restart(d));
    assert_int_equal(harness_log_contains(d, "start: 2 counters moved out of the private table"),
                     1);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_credit(c, 37, 47, "after a restart with fast_path = true");
    harness_close(c);
}

/* ---- (d) hits racing the moves: none is lost ---------------------------------- */

#define RACE_LIMIT      10000000
#define RACE_SOCKET_N   200000    /* caps: the hammers stop after the last reload */
#define RACE_FAST_N     5000000
#define RACE_RELOADS    10
#define RACE_STEP       2000      /* hits between two reloads */

struct race {
    char sock[HARNESS_PATH];
    long done;                  /* requests answered, all children (atomic) */
    long allowed;               /* ... of which allowed */
    long errors;
    int stop;                   /* set by the parent after the last reload (atomic) */
};

static bool race_stopped(struct race *sh)
{
    return __atomic_load_n(&sh->stop, __ATOMIC_RELAXED) != 0;
}

static const char *race_conf(bool fast)
{
    static char buf[512];

    snprintf(buf, sizeof(buf),
             "rules = (\n"
             "    { match = { path = \"/race\"; }; label = \"race\"; actor = \"user\";\n"
             "      credit_limit = %d; reset_seconds = 3600; fast_path = %s; },\n"
             "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
             ");\n", RACE_LIMIT, fast ? "true" : "false");
    return buf;
}

/* TAKE 1 over the Unix socket, pipelined by 100. */
static int race_socket_child(void *arg)
{
    struct race *sh = arg;
    struct harness_conn *c = NULL;
    static char batch[100 * 40];
    char line[HARNESS_LINE];
    size_t pos = 0;

    if (harness_connect_unix(sh->sock, &c) < 0)
        return 10;
    for (int j = 0; j < 100; j++)
        pos += (size_t)snprintf(batch + pos, sizeof(batch) - pos, "TAKE 1 path=/race user=r\n");
    /* Until the parent's last reload is done (at most RACE_SOCKET_N). */
    for (int i = 0; i < RACE_SOCKET_N && !race_stopped(sh); i += 100) {
        long ok = 0;

        if (harness_send(c, batch, pos) < 0)
            return 11;
        for (int j = 0; j < 100; j++) {
            if (harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS) < 0)
                return 12;
            if (strncmp(line, "OK true ", 8) == 0)
                ok++;
            else if (strncmp(line, "OK false ", 9) != 0)
                __atomic_add_fetch(&sh->errors, 1, __ATOMIC_RELAXED);
        }
        __atomic_add_fetch(&sh->allowed, ok, __ATOMIC_RELAXED);
        __atomic_add_fetch(&sh->done, 100, __ATOMIC_RELAXED);
    }
    harness_close(c);
    return 0;
}

/* libdivvy with DIVVY_AUTO: in-process while the rule is fast_path, else the socket. */
static int race_lib_child(void *arg)
{
    struct race *sh = arg;
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/race" }, { "user", "r" } };
    struct divvy *h = NULL;

    if (divvy_open(NULL, DIVVY_AUTO, &h) < 0)
        return 20;
    for (int i = 0; i < RACE_FAST_N && !race_stopped(sh); i++) {
        if (divvy_take(h, 1, kv, 2, &res) < 0) {
            __atomic_add_fetch(&sh->errors, 1, __ATOMIC_RELAXED);
            continue;
        }
        if (res.allowed)
            __atomic_add_fetch(&sh->allowed, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&sh->done, 1, __ATOMIC_RELAXED);
    }
    divvy_close(h);
    return 0;
}

static void test_privileged_toggle_under_load(void **state)
{
    struct harness_opts o = { .config_name = "divvy.conf", .config_text = race_conf(false),
                              .workers = 2 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    struct race *sh;
    pid_t pids[3];
    char r[HARNESS_LINE];
    long used, allowed, done;
    int status;

    (void)state;
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    CHECK(harness_start(&o, &d));
    CHECK(harness_divvy_env(d));
    snprintf(sh->sock, sizeof(sh->sock), "%s", d->sock);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_spawn(race_socket_child, sh, &pids[0]));
    CHECK(harness_spawn(race_socket_child, sh, &pids[1]));
    CHECK(harness_spawn(race_lib_child, sh, &pids[2]));
    /* Reloads that toggle fast_path while the hits run: each waits for some
     * progress, so hits fall before, between and after the moves; the
     * hammers run until the last reload is done (they stop on their own at
     * RACE_SOCKET_N / RACE_FAST_N requests). */
    for (int i = 0; i < RACE_RELOADS; i++) {
        long mark = __atomic_load_n(&sh->done, __ATOMIC_RELAXED) + RACE_STEP;
        uint64_t end = harness_now_ms() + 60000;

        while (__atomic_load_n(&sh->done, __ATOMIC_RELAXED) < mark && harness_now_ms() < end)
            harness_pause_ms(2);
        if (__atomic_load_n(&sh->done, __ATOMIC_RELAXED) < mark)
            fail_msg("reload %d: the hammers made no progress (done %ld)", i, sh->done);
        CHECK(harness_write_config(d, race_conf(i % 2 == 0)));
        CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
        EXPECT_PREFIX(r, "OK reloaded ");
    }
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < 3; i++) {
        CHECK(harness_reap(pids[i], 120000, &status));
        if (status != 0)
            fail_msg("hammer %d exited %d", i, status);
    }
    assert_int_equal(sh->errors, 0);
    done = sh->done;
    CHECK(harness_cmd(c, "PEEK path=/race user=r", r, sizeof(r)));
    {
        bool a;
        long long credit, secs;
        char rule[64];

        CHECK(harness_parse_ok_rule(r, &a, &credit, &secs, rule, sizeof(rule)));
        used = RACE_LIMIT - (long)credit;
    }
    allowed = sh->allowed;
    fprintf(stderr, "  %ld hits allowed, the counter says %ld used after %d fast_path "
            "toggles (%ld not counted)\n", allowed, used, RACE_RELOADS, allowed - used);
    /* Never counted more than happened, and a window counter's hits on both
     * tables around a reload are added up: what racing the moves may drop is
     * a fast-path hit in flight across a publication, one per client per
     * reload (docs/daemon.md "Counter tables").  A fresh quota would leave
     * used near done / (RELOADS + 1). */
    assert_true(allowed == done);
    assert_true(used <= allowed);
    assert_true(used >= allowed - RACE_RELOADS);
    harness_close(c);
    munmap(sh, sizeof(*sh));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_privileged_flood_does_not_blind_logins,
                                        harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_privileged_table_full_is_an_error,
                                        harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_privileged_counts_follow_fast_path_toggle,
                                        harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_privileged_never_takes_fast_counters,
                                        harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_privileged_toggle_under_load,
                                        harness_setup, harness_teardown),
    };

    return cmocka_run_group_tests_name("privileged", tests, NULL, NULL);
}
