/* SPDX-License-Identifier: MIT */
/*
 * Fault injection: a full counter table (DESIGN section 4, docs/dev/shm.md
 * "Claim").  Both tables hold 64 slots; ten existing actors own counters in
 * each; then several client processes flood the daemon with thousands of
 * unique actors, over the socket and through libdivvy's fast path, while
 * another process keeps hitting the existing actors.  The table files keep
 * exactly their configured size, every newcomer beyond the free slots gets
 * the configured table.when_full answer (deny: "OK false 0 0"; allow:
 * "OK true 0 0"), the event is logged and counted, divvyd's resident memory
 * does not grow with the flood, and the existing actors keep exact counts
 * throughout.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "divvy.h"
#include "fast_fds.h"
#include "harness.h"

#define SLOTS        64
#define TABLE_BYTES  (20480 + 64 * SLOTS)      /* docs/dev/shm.md "File" */
#define KEEPERS      10
#define LIMIT        1000000
#define FLOOD_PROCS  3                          /* socket flooders */
#define FLOOD_EACH   3000                       /* unique actors per flooder */
#define FLOOD_BATCH  100
#define KEEP_ROUNDS  200

struct full_shared {
    long flood_allowed, flood_denied, flood_counted, flood_bad;
    long fast_allowed, fast_denied, fast_counted, fast_errors;
    long keeper_hits[2][KEEPERS];
    long keeper_bad;
    char first_bad[256];
};

struct full_arg {
    struct harness_daemon *d;
    struct full_shared *sh;
    int id;
    bool allow;
};

static void note_bad(struct full_shared *sh, long *counter, const char *what, const char *line)
{
    if (__atomic_fetch_add(counter, 1, __ATOMIC_RELAXED) == 0 && !sh->first_bad[0])
        snprintf(sh->first_bad, sizeof(sh->first_bad), "%s: %.200s", what, line);
}

static char *full_conf(bool allow)
{
    char *t = harness_scratch(2048);

    assert_non_null(t);
    snprintf(t, 2048,
             "table = { slots = %d; fast_slots = %d; when_full = \"%s\"; };\n"
             "rules = (\n"
             "    { match = { path = \"/u\"; }; label = \"u\"; actor = \"user\";\n"
             "      credit_limit = %d; reset_seconds = 3600; },\n"
             "    { match = { path = \"/f\"; }; label = \"f\"; actor = \"user\";\n"
             "      credit_limit = %d; reset_seconds = 3600; fast_path = true; },\n"
             "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
             ");\n",
             SLOTS, SLOTS, allow ? "allow" : "deny", LIMIT, LIMIT);
    return t;
}

/* Unique actors over the socket, pipelined, alternating the two tables. */
static int flood_proc(void *p)
{
    struct full_arg *a = p;
    struct full_shared *sh = a->sh;
    struct harness_conn *c;
    char *batch = malloc(FLOOD_BATCH * 64), line[HARNESS_LINE];

    if (!batch || harness_connect(a->d, a->id % 2 ? HARNESS_TCP : HARNESS_UNIX, &c) < 0)
        return 1;
    for (int done = 0; done < FLOOD_EACH; done += FLOOD_BATCH) {
        size_t len = 0;

        for (int i = 0; i < FLOOD_BATCH; i++)
            len += (size_t)sprintf(batch + len, "HIT path=/%c user=flood-%d-%d\n",
                                   (done + i) % 2 ? 'f' : 'u', a->id, done + i);
        if (harness_send(c, batch, len) < 0)
            return 2;
        for (int i = 0; i < FLOOD_BATCH; i++) {
            bool allowed;
            long long credit, secs;

            if (harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS) < 0)
                return 3;
            if (harness_parse_ok(line, &allowed, &credit, &secs) < 0) {
                note_bad(sh, &sh->flood_bad, "flood reply", line);
                continue;
            }
            if (credit == LIMIT - 1 && allowed) {
                /* A newcomer that found a free slot. */
                __atomic_fetch_add(&sh->flood_counted, 1, __ATOMIC_RELAXED);
                __atomic_fetch_add(&sh->flood_allowed, 1, __ATOMIC_RELAXED);
            } else if (credit == 0 && secs == 0 && allowed == a->allow) {
                __atomic_fetch_add(allowed ? &sh->flood_allowed : &sh->flood_denied, 1,
                                   __ATOMIC_RELAXED);
            } else {
                note_bad(sh, &sh->flood_bad, "flood reply", line);
            }
        }
    }
    harness_close(c);
    free(batch);
    return 0;
}

/* Unique actors through libdivvy (in-process while slots are free, then the
 * daemon answers for a full table). */
static int fast_flood_proc(void *p)
{
    struct full_arg *a = p;
    struct full_shared *sh = a->sh;
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy *h = NULL;
    char user[64];

    if (divvy_open(NULL, DIVVY_AUTO, &h) < 0)
        return 1;
    for (int i = 0; i < FLOOD_EACH; i++) {
        snprintf(user, sizeof(user), "fast-%d", i);
        if (divvy_hit(h, (struct divvy_kv[]){ { "path", "/f" }, { "user", user } }, 2, &res) <
            0) {
            note_bad(sh, &sh->fast_errors, "libdivvy", divvy_errmsg(h));
            continue;
        }
        if (res.allowed && res.credit == LIMIT - 1) {
            __atomic_fetch_add(&sh->fast_counted, 1, __ATOMIC_RELAXED);
            __atomic_fetch_add(&sh->fast_allowed, 1, __ATOMIC_RELAXED);
        } else if (res.credit == 0 && res.reset_seconds == 0 && res.allowed == (int)a->allow) {
            __atomic_fetch_add(res.allowed ? &sh->fast_allowed : &sh->fast_denied, 1,
                               __ATOMIC_RELAXED);
        } else {
            char msg[96];

            snprintf(msg, sizeof(msg), "allowed %d credit %llu reset %llu", res.allowed,
                     (unsigned long long)res.credit, (unsigned long long)res.reset_seconds);
            note_bad(sh, &sh->fast_errors, "libdivvy answer", msg);
        }
    }
    divvy_close(h);
    return 0;
}

/* The existing actors, hit all along: every answer exact. */
static int keeper_proc(void *p)
{
    struct full_arg *a = p;
    struct full_shared *sh = a->sh;
    struct harness_conn *c;
    char batch[2 * KEEPERS * 48], line[HARNESS_LINE];
    size_t len = 0;

    if (harness_connect(a->d, HARNESS_UNIX, &c) < 0)
        return 1;
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < KEEPERS; k++)
            len += (size_t)sprintf(batch + len, "HIT path=/%c user=keep-%d\n", t ? 'f' : 'u', k);
    for (int round = 0; round < KEEP_ROUNDS; round++) {
        if (harness_send(c, batch, len) < 0)
            return 2;
        for (int t = 0; t < 2; t++) {
            for (int k = 0; k < KEEPERS; k++) {
                bool allowed;
                long long credit, secs;
                long want = LIMIT - (k + 1) - (sh->keeper_hits[t][k] + 1);

                if (harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS) < 0)
                    return 3;
                if (harness_parse_ok(line, &allowed, &credit, &secs) < 0 || !allowed ||
                    credit != want) {
                    note_bad(sh, &sh->keeper_bad, "keeper reply", line);
                    continue;
                }
                sh->keeper_hits[t][k]++;
            }
        }
        harness_pause_ms(1);            /* pacing: spread over the flood */
    }
    harness_close(c);
    return 0;
}

static void expect_size(const char *name, const struct stat *st)
{
    if (st->st_size != TABLE_BYTES || (long long)st->st_blocks * 512 > TABLE_BYTES + 4096)
        fail_msg("%s: %lld bytes (%lld allocated), want exactly %d", name,
                 (long long)st->st_size, (long long)st->st_blocks * 512, TABLE_BYTES);
}

static void expect_file_size(struct harness_daemon *d, const char *name)
{
    char path[HARNESS_PATH + 32];
    struct stat st;

    snprintf(path, sizeof(path), "%s/%s", d->state, name);
    assert_int_equal(stat(path, &st), 0);
    expect_size(name, &st);
}

/* The fast table is a memfd: its size, as divvyd hands it over (FAST). */
static void expect_fast_size(struct harness_daemon *d)
{
    struct stat st;
    int tfd = -1, cfd = -1;

    CHECK(fast_fds_get(d->sock, &tfd, &cfd));
    assert_int_equal(fstat(tfd, &st), 0);
    close(tfd);
    close(cfd);
    expect_size("the fast table's memfd", &st);
}

static void full_run(bool allow)
{
    struct harness_opts o = { .config_name = "full.conf", .config_text = full_conf(allow),
                              .workers = 2 };
    struct full_shared *sh;
    struct full_arg args[FLOOD_PROCS + 2];
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    char addr[HARNESS_PATH + 8], stats[HARNESS_LINE];
    pid_t pids[FLOOD_PROCS + 2];
    long long v, live, fast_live;
    long total, newcomers;
    long long rss0, rss1;
    uint64_t t0;
    int status;

    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    CHECK(harness_start(&o, &d));
    snprintf(addr, sizeof(addr), "unix:%s", d->sock);
    assert_int_equal(setenv("DIVVY_ADDRESS", addr, 1), 0);
    unsetenv("DIVVY_PATH");

    /* The existing actors: keep-k has used k + 1 credits in each table. */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    for (int k = 0; k < KEEPERS; k++) {
        for (int n = 0; n <= k; n++) {
            char req[64];

            snprintf(req, sizeof(req), "HIT path=/u user=keep-%d", k);
            EXPECT_OK(c, req, true, LIMIT - n - 1, 3599, 3600);
            snprintf(req, sizeof(req), "HIT path=/f user=keep-%d", k);
            EXPECT_OK(c, req, true, LIMIT - n - 1, 3599, 3600);
        }
    }
    expect_file_size(d, "private.table");
    expect_fast_size(d);

    rss0 = harness_rss_kb(d->pid);
    assert_true(rss0 > 0);
    t0 = harness_now_ms();
    for (int i = 0; i < FLOOD_PROCS + 2; i++) {
        args[i] = (struct full_arg){ .d = d, .sh = sh, .id = i, .allow = allow };
        CHECK(harness_spawn(i < FLOOD_PROCS ? flood_proc
                            : i == FLOOD_PROCS ? fast_flood_proc
                                               : keeper_proc,
                            &args[i], &pids[i]));
    }
    for (int i = 0; i < FLOOD_PROCS + 2; i++) {
        CHECK(harness_reap(pids[i], 60000, &status));
        if (status != 0)
            fail_msg("client process %d exited %d", i, status);
    }
    total = (long)FLOOD_PROCS * FLOOD_EACH;
    rss1 = harness_rss_kb(d->pid);
    assert_true(rss1 > 0);
    fprintf(stderr, "  divvyd RSS %lld kB before the flood, %lld kB after\n", rss0, rss1);
    fprintf(stderr,
            "  when_full=%s: %ld socket newcomers (%ld counted, %ld allowed, %ld denied), "
            "%d fast-path newcomers (%ld counted, %ld allowed, %ld denied) in %llu ms\n",
            allow ? "allow" : "deny", total, sh->flood_counted, sh->flood_allowed,
            sh->flood_denied, FLOOD_EACH, sh->fast_counted, sh->fast_allowed, sh->fast_denied,
            (unsigned long long)(harness_now_ms() - t0));
    if (sh->flood_bad || sh->keeper_bad || sh->fast_errors)
        fail_msg("%ld bad flood replies, %ld bad keeper replies, %ld libdivvy errors; first: %s",
                 sh->flood_bad, sh->keeper_bad, sh->fast_errors, sh->first_bad);
    assert_int_equal(sh->flood_allowed + sh->flood_denied, total);
    assert_int_equal(sh->fast_allowed + sh->fast_denied, FLOOD_EACH);
    newcomers = sh->flood_counted + sh->fast_counted;
    /* Exactly the free slots went to newcomers: 64 - 10 in each table. */
    assert_int_equal(newcomers, 2 * (SLOTS - KEEPERS));
    if (allow) {
        assert_int_equal(sh->flood_denied, 0);
        assert_int_equal(sh->fast_denied, 0);
    } else {
        assert_int_equal(sh->flood_allowed, sh->flood_counted);
        assert_int_equal(sh->fast_allowed, sh->fast_counted);
    }

    /* Nothing grows with the number of actors: 2 MB is connection buffers
     * and noise; keeping 12,000 refused actors at 170+ bytes each is not. */
    if (rss1 - rss0 > 2 * 1024)
        fail_msg("divvyd grew from %lld kB to %lld kB under the flood", rss0, rss1);
    /* The files never grew; the counters are what the table holds. */
    expect_file_size(d, "private.table");
    expect_fast_size(d);
    CHECK(harness_multi(c, "STATS", stats, sizeof(stats)));
    CHECK(harness_stat(stats, "table_slots", &v));
    assert_int_equal(v, SLOTS);
    CHECK(harness_stat(stats, "fast_table_slots", &v));
    assert_int_equal(v, SLOTS);
    CHECK(harness_stat(stats, "table_live", &live));
    CHECK(harness_stat(stats, "fast_table_live", &fast_live));
    assert_true(live <= SLOTS && fast_live <= SLOTS);
    assert_int_equal(live + fast_live, 2 * KEEPERS + newcomers);
    CHECK(harness_stat(stats, "table_full_events", &v));
    assert_true(v >= total + FLOOD_EACH - 2 * (SLOTS - KEEPERS));
    assert_int_equal(harness_log_contains(d, "counter table full"), 1);
    /* The log names the rule by its label, not by its index. */
    if (harness_log_contains(d, "max_actors reached (rule u)") != 1 &&
        harness_log_contains(d, "max_actors reached (rule f)") != 1) {
        harness_dump_log(d);
        fail_msg("the table-full warning does not name rule u or f by its label");
    }

    /* Every existing actor kept its count exactly. */
    for (int t = 0; t < 2; t++) {
        for (int k = 0; k < KEEPERS; k++) {
            char req[64];

            assert_int_equal(sh->keeper_hits[t][k], KEEP_ROUNDS);
            snprintf(req, sizeof(req), "HIT path=/%c user=keep-%d", t ? 'f' : 'u', k);
            EXPECT_OK(c, req, true, LIMIT - (k + 1) - KEEP_ROUNDS - 1, 3590, 3600);
        }
    }
    /* A newcomer still gets the policy's answer, at once. */
    EXPECT_REPLY(c, "HIT path=/u user=one-more", allow ? "OK true 0 0" : "OK false 0 0");
    harness_close(c);
    munmap(sh, sizeof(*sh));
}

static void test_fault_full_deny(void **state)
{
    (void)state;
    full_run(false);
}

static void test_fault_full_allow(void **state)
{
    (void)state;
    full_run(true);
}

/*
 * A full fast table answered in-process: a continue rule's counter (one per
 * host, already charged in-process) and then a per-user rule that finds no
 * free slot.  The fast path answers with the when_full divvyd announced in
 * the control page, so the continue rule is charged exactly once per hit
 * (sending the hit on to divvyd would charge it again).  (A control page
 * that announces nothing sends such a hit to divvyd: test_fastpath's
 * forged hand-overs.)
 */
#define CONT_USERS   200

static void test_fault_full_continue_charged_once(void **state)
{
    static const char conf[] =
        "table = { slots = 64; fast_slots = 64; when_full = \"deny\"; };\n"
        "rules = (\n"
        "    { match = { path = \"/c\"; }; label = \"all\"; credit_limit = 1000000;\n"
        "      reset_seconds = 3600; match_policy = \"continue\"; fast_path = true; },\n"
        "    { match = { path = \"/c\"; }; label = \"per\"; actor = \"user\";\n"
        "      credit_limit = 1000000; reset_seconds = 3600; fast_path = true; },\n"
        "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    struct harness_opts o = { .config_name = "cont.conf", .config_text = conf };
    struct divvy_result res = { .size = sizeof(res) };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    struct divvy *h = NULL;
    char user[32], buf[HARNESS_LINE], want[64];
    long full = 0, counted = 0;
    long long events;

    (void)state;
    CHECK(harness_start(&o, &d));
    CHECK(harness_divvy_env(d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    harness_wait_fast(h, (struct divvy_kv[]){ { "path", "/c" }, { "user", "u0" } }, 2);
    CHECK(harness_get_stat(c, "table_full_events", &events));
    assert_int_equal(events, 0);
    for (int i = 0; i < CONT_USERS; i++) {
        snprintf(user, sizeof(user), "u%d", i);
        CHECK(divvy_hit(h, (struct divvy_kv[]){ { "path", "/c" }, { "user", user } }, 2, &res));
        assert_int_equal(res.fast_path, 1);
        /* The rule whose credit the reply shows: "all" (shared, the tighter
         * from the second hit on; a tie names the stop rule); denied by the
         * full table: "per", which decided. */
        assert_string_equal(res.rule, res.allowed && i > 0 ? "all" : "per");
        if (res.allowed)
            counted++;
        else
            full++;
    }
    /* 64 slots: "all" holds one, so at most 63 users got a counter. */
    assert_true(counted >= 1 && counted <= 63);
    assert_int_equal(counted + full, CONT_USERS);
    /* harness_wait_fast's PEEKs consume nothing: exactly one charge per hit. */
    CHECK(harness_multi(c, "COUNTERS rule=all", buf, sizeof(buf)));
    snprintf(want, sizeof(want), "used=%d ", CONT_USERS);
    if (!strstr(buf, want))
        fail_msg("the continue rule's counter after %d hits: want %s\n%s", CONT_USERS, want, buf);
    CHECK(harness_get_stat(c, "table_full_events", &events));
    assert_int_equal(events, full);

    divvy_close(h);
    harness_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fault_full_deny, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_fault_full_allow, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_fault_full_continue_charged_once, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("fault_full", tests, NULL, NULL);
}
