/* SPDX-License-Identifier: MIT */
/*
 * Fault injection: divvyd killed with SIGKILL under load (DESIGN section 4:
 * "the table survives a daemon crash").  Several client processes hammer
 * their own counters in both tables (pipelined over the socket, and one
 * through libdivvy's fast path), divvyd is killed at a random moment and
 * started again on the same state dir, three times.  No counter ever goes
 * back: after each restart every counter holds at least what its client saw
 * used, and at most that plus the requests that were still unanswered; the
 * log says the private table was reattached; and the clients of the next
 * round see exact counts from there.  The fast-path table is a memfd: with
 * no service manager to keep it (no fd store here), a kill -9 keeps its
 * counts as of the last periodic snapshot (every 20 ms here), so its
 * counters never show more used than clients were answered plus what was
 * in flight, and the log says it was restored.  Then a private table with a
 * torn header (bad magic) and a snapshot cut short are refused at restart
 * with a log line saying why, the other one keeping its counts.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "divvy.h"
#include "harness.h"

#define LIMIT       1000000000LL
#define PROCS       4           /* socket clients, one connection each */
#define DEPTH       32          /* pipelined requests per batch */
#define ROUNDS      3
#define FAST        PROCS       /* index of the libdivvy client's counter */

static const char crash_conf[] =
    "table = { slots = 4096; fast_slots = 4096; snapshot_interval_ms = 20; };\n"
    "rules = (\n"
    "    { match = { path = \"/p\"; }; label = \"p\"; actor = \"user\";\n"
    "      credit_limit = 1000000000L; reset_seconds = 3600; },\n"
    "    { match = { path = \"/f\"; }; label = \"f\"; actor = \"user\";\n"
    "      credit_limit = 1000000000L; reset_seconds = 3600; fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

/* Per counter ([client][0] on /p, [client][1] on /f): what clients saw. */
struct crash_counter {
    long long base;             /* credit at the start of the round (set by the test) */
    long long seen;             /* lowest credit answered so far */
    long long sent, answered;   /* this round */
};

struct crash_shared {
    volatile int stop;          /* the libdivvy client stops */
    struct crash_counter c[PROCS + 1][2];
    long replies[PROCS + 1];
    long bad, fast_socket;
    char first_bad[256];
};

struct crash_arg {
    struct harness_daemon *d;
    struct crash_shared *sh;
    int id;
};

static void crash_bad(struct crash_shared *sh, const char *what, const char *line)
{
    if (__atomic_fetch_add(&sh->bad, 1, __ATOMIC_RELAXED) == 0)
        snprintf(sh->first_bad, sizeof(sh->first_bad), "%s: %.200s", what, line);
}

/* Hammers /p and /f for user c<id> until the daemon goes away; every reply
 * must be exactly one credit below the one before. */
static int socket_client(void *p)
{
    struct crash_arg *a = p;
    struct crash_shared *sh = a->sh;
    struct crash_counter *ct = sh->c[a->id];
    struct harness_conn *c;
    char batch[DEPTH * 40], line[HARNESS_LINE];
    size_t len = 0;

    for (int t = 0; t < 2; t++) {
        ct[t].seen = ct[t].base;
        ct[t].sent = ct[t].answered = 0;
    }
    if (harness_connect(a->d, a->id % 2 ? HARNESS_TCP : HARNESS_UNIX, &c) < 0)
        return 1;
    for (int i = 0; i < DEPTH; i++)
        len += (size_t)sprintf(batch + len, "HIT path=/%c user=c%d\n", i % 2 ? 'f' : 'p', a->id);
    for (;;) {
        for (int i = 0; i < DEPTH; i++)
            ct[i % 2].sent++;
        if (harness_send(c, batch, len) < 0)
            return 0;
        for (int i = 0; i < DEPTH; i++) {
            struct crash_counter *k = &ct[i % 2];
            bool allowed;
            long long credit, secs;

            if (harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS) < 0)
                return 0;       /* the daemon died: what was answered is recorded */
            if (harness_parse_ok(line, &allowed, &credit, &secs) < 0 || !allowed ||
                credit != k->seen - 1) {
                char msg[160];

                snprintf(msg, sizeof(msg), "%.100s (want credit %lld)", line, k->seen - 1);
                crash_bad(sh, "socket client", msg);
                return 2;
            }
            k->seen = credit;
            k->answered++;
            sh->replies[a->id]++;
        }
    }
}

/* libdivvy on /f, in-process while the heartbeat is fresh. */
static int fast_client(void *p)
{
    struct crash_arg *a = p;
    struct crash_shared *sh = a->sh;
    struct crash_counter *k = &sh->c[FAST][1];
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/f" }, { "user", "fast" } };
    struct divvy *h = NULL;

    k->seen = k->base;
    k->sent = k->answered = 0;
    if (divvy_open(NULL, DIVVY_AUTO, &h) < 0)
        return 1;
    while (!sh->stop) {
        k->sent++;
        if (divvy_hit(h, kv, 2, &res) < 0) {
            /* The daemon is gone and the socket answers nothing: wait. */
            k->sent--;
            harness_pause_ms(5);
            continue;
        }
        if (!res.fast_path)
            sh->fast_socket++;
        if (!res.allowed || (long long)res.credit != k->seen - 1) {
            char msg[96];

            snprintf(msg, sizeof(msg), "allowed %d credit %llu (want %lld)", res.allowed,
                     (unsigned long long)res.credit, k->seen - 1);
            crash_bad(sh, "fast client", msg);
            break;
        }
        k->seen = (long long)res.credit;
        k->answered++;
        sh->replies[FAST]++;
    }
    divvy_close(h);
    return 0;
}

static long long peek(struct harness_conn *c, char path, const char *user)
{
    char req[64], r[HARNESS_LINE], id[64];
    bool allowed;
    long long credit, secs;

    snprintf(req, sizeof(req), "PEEK path=/%c user=%s", path, user);
    CHECK(harness_cmd(c, req, r, sizeof(r)));
    if (harness_parse_ok_rule(r, &allowed, &credit, &secs, id, sizeof(id)) < 0)
        fail_msg("%s -> %s", req, r);
    return credit;
}

static int count_in_log(struct harness_daemon *d, const char *needle)
{
    char buf[65536];
    int fd = open(d->log, O_RDONLY | O_CLOEXEC), n = 0;
    ssize_t len;

    assert_true(fd >= 0);
    len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    assert_true(len >= 0);
    buf[len] = '\0';
    for (char *p = strstr(buf, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* SIGKILL, and wait until it is reaped. */
static void crash(struct harness_daemon *d)
{
    uint64_t deadline = harness_now_ms() + HARNESS_STOP_MS;

    d->expect_exit = true;
    CHECK(harness_kill(d, SIGKILL));
    while (harness_alive(d) && harness_now_ms() < deadline)
        harness_pause_ms(2);
    assert_false(harness_alive(d));
    assert_true(WIFSIGNALED(d->status) && WTERMSIG(d->status) == SIGKILL);
}

static struct harness_daemon *start_crash(void)
{
    struct harness_opts o = { .config_name = "crash.conf", .config_text = crash_conf,
                              .workers = 2 };
    struct harness_daemon *d = NULL;
    char addr[HARNESS_PATH + 8];

    CHECK(harness_start(&o, &d));
    snprintf(addr, sizeof(addr), "unix:%s", d->sock);
    assert_int_equal(setenv("DIVVY_ADDRESS", addr, 1), 0);
    unsetenv("DIVVY_PATH");
    return d;
}

static void test_fault_crash_kill9_keeps_counts(void **state)
{
    struct crash_shared *sh;
    struct crash_arg args[PROCS + 1];
    struct harness_daemon *d = start_crash();
    struct harness_conn *c;
    unsigned seed = (unsigned)harness_now_ms();
    long long total = 0, lost = 0;

    (void)state;
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    for (int i = 0; i <= PROCS; i++)
        for (int t = 0; t < 2; t++)
            sh->c[i][t].base = sh->c[i][t].seen = LIMIT;

    for (int round = 1; round <= ROUNDS; round++) {
        pid_t pids[PROCS + 1];
        uint64_t deadline = harness_now_ms() + 10000;
        char snap[HARNESS_PATH + 32];
        unsigned delay = 50 + (unsigned)(rand_r(&seed) % 250);
        int status;

        sh->stop = 0;
        for (int i = 0; i <= PROCS; i++) {
            args[i] = (struct crash_arg){ .d = d, .sh = sh, .id = i };
            sh->replies[i] = 0;
            CHECK(harness_spawn(i == FAST ? fast_client : socket_client, &args[i], &pids[i]));
        }
        /* Every client is under way, then a random moment later: SIGKILL. */
        for (int i = 0; i <= PROCS; i++)
            while (sh->replies[i] < 100 && !sh->bad && harness_now_ms() < deadline)
                harness_pause_ms(1);
        for (int i = 0; i <= PROCS; i++)
            if (sh->replies[i] < 100)
                fail_msg("round %d: client %d made only %ld hits (%s)", round, i,
                         sh->replies[i], sh->first_bad);
        /* The restart below restores the fast table from a snapshot: one
         * must exist (the first is 20 ms after start, later on a loaded
         * machine; a crash before it rightly starts afresh). */
        snprintf(snap, sizeof(snap), "%s/fast.snapshot", d->state);
        while (access(snap, F_OK) != 0) {
            if (harness_now_ms() > deadline)
                fail_msg("round %d: divvyd wrote no %s", round, snap);
            harness_pause_ms(2);
        }
        harness_pause_ms(delay);
        crash(d);
        for (int i = 0; i < PROCS; i++) {
            CHECK(harness_reap(pids[i], 20000, &status));
            if (status != 0)
                fail_msg("round %d: client %d exited %d: %s", round, i, status, sh->first_bad);
        }
        sh->stop = 1;
        CHECK(harness_reap(pids[FAST], 20000, &status));
        assert_int_equal(status, 0);
        if (sh->bad)
            fail_msg("round %d: %ld bad replies, first: %s", round, sh->bad, sh->first_bad);

        /* The same state dir: the tables are reattached and no counter went back. */
        CHECK(harness_restart(d));
        /* private.table and privileged.table are files; the fast table is a memfd. */
        assert_int_equal(count_in_log(d, "reattached, counts kept"), 2 * round);
        assert_int_equal(count_in_log(d, "fast-path table restored from"), round);
        assert_int_equal(count_in_log(d, "rebuilt"), 0);
        CHECK(harness_connect(d, HARNESS_UNIX, &c));
        for (int i = 0; i <= PROCS; i++) {
            for (int t = 0; t < 2; t++) {
                struct crash_counter *k = &sh->c[i][t];
                char user[16];
                long long now, unanswered = k->sent - k->answered;

                if (i == FAST && t == 0)
                    continue;
                snprintf(user, sizeof(user), i == FAST ? "fast" : "c%d", i);
                now = peek(c, t ? 'f' : 'p', user);
                /* The fast table: as of its last snapshot, never ahead of
                 * what was answered and in flight. */
                if (t == 1 && now >= k->seen - unanswered && now <= LIMIT) {
                    lost += now > k->seen ? now - k->seen : 0;
                    total += k->base - now;
                    k->base = now;
                    continue;
                }
                if (now > k->seen || now < k->seen - unanswered)
                    fail_msg("round %d: %s on /%c: credit %lld after the restart, clients saw "
                             "%lld with %lld unanswered", round, user, t ? 'f' : 'p', now,
                             k->seen, unanswered);
                total += k->base - now;
                k->base = now;
            }
        }
        fprintf(stderr, "  round %d: SIGKILL %u ms into the load; restarted, counters kept\n",
                round, delay);
        harness_close(c);
    }
    fprintf(stderr, "  %lld hits counted across %d crashes (%ld fast-path hits via the socket); "
            "%lld fast-table hits after the last snapshots were lost\n", total, ROUNDS,
            sh->fast_socket, lost);
    munmap(sh, sizeof(*sh));
}

/* ---- torn tables ------------------------------------------------------------------ */

static void corrupt(struct harness_daemon *d, const char *name, bool truncate_it)
{
    char path[HARNESS_PATH + 32];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", d->state, name);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    if (truncate_it)
        assert_int_equal(ftruncate(fd, 12288), 0);     /* less than a header */
    else
        assert_int_equal(pwrite(fd, "\0\0\0\0", 4, 2), 4);   /* half a magic */
    close(fd);
}

/* Waits (bounded) until divvyd wrote the fast table's snapshot twice more:
 * the second save began after everything before this call. */
static void wait_snapshot(struct harness_daemon *d)
{
    char path[HARNESS_PATH + 32];
    uint64_t deadline = harness_now_ms() + 10000;
    struct stat st;
    struct timespec last = { 0, 0 };
    int changes = 0;

    snprintf(path, sizeof(path), "%s/fast.snapshot", d->state);
    if (stat(path, &st) == 0)
        last = st.st_mtim;
    while (changes < 2) {
        if (harness_now_ms() > deadline)
            fail_msg("divvyd wrote no snapshot %s within 10 s", path);
        if (stat(path, &st) == 0 && (st.st_mtim.tv_sec != last.tv_sec ||
                                     st.st_mtim.tv_nsec != last.tv_nsec || st.st_ino == 0)) {
            last = st.st_mtim;
            changes++;
        }
        harness_pause_ms(5);
    }
    assert_int_equal(st.st_size, 20480 + 64 * 4096);
    assert_int_equal(st.st_mode & 0777, 0600);
}

static void test_fault_crash_torn_header_rebuilt(void **state)
{
    struct harness_daemon *d = start_crash();
    struct harness_conn *c;
    char want[HARNESS_PATH + 128];

    (void)state;
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/p user=t", true, LIMIT - 1, 3599, 3600);
    EXPECT_OK(c, "HIT path=/p user=t", true, LIMIT - 2, 3599, 3600);
    EXPECT_OK(c, "HIT path=/f user=t", true, LIMIT - 1, 3599, 3600);
    harness_close(c);

    /* A torn private table: rebuilt, said so and why; the fast one restored
     * from the snapshot written since the hits. */
    wait_snapshot(d);
    crash(d);
    corrupt(d, "private.table", false);
    CHECK(harness_restart(d));
    snprintf(want, sizeof(want), "counter table %s/private.table rebuilt, counts start afresh: "
             "bad magic", d->state);
    if (harness_log_contains(d, want) != 1) {
        harness_dump_log(d);
        fail_msg("no log line \"%s\"", want);
    }
    snprintf(want, sizeof(want), "fast-path table restored from %s/fast.snapshot", d->state);
    assert_int_equal(harness_log_contains(d, want), 1);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/p user=t", true, LIMIT - 1, 3599, 3600);
    EXPECT_OK(c, "HIT path=/f user=t", true, LIMIT - 2, 3590, 3600);
    harness_close(c);

    /* A snapshot cut short (shorter than a header): not used, said why. */
    wait_snapshot(d);
    crash(d);
    corrupt(d, "fast.snapshot", true);
    CHECK(harness_restart(d));
    snprintf(want, sizeof(want), "fast-path table created, counts start afresh: snapshot "
             "%s/fast.snapshot not used: size does not match", d->state);
    if (harness_log_contains(d, want) != 1) {
        harness_dump_log(d);
        fail_msg("no log line \"%s\"", want);
    }
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/f user=t", true, LIMIT - 1, 3599, 3600);
    EXPECT_OK(c, "HIT path=/p user=t", true, LIMIT - 2, 3590, 3600);
    harness_close(c);
    /* The next save is whole again (wait_snapshot() checks size and mode). */
    wait_snapshot(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fault_crash_kill9_keeps_counts, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_fault_crash_torn_header_rebuilt, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("fault_crash", tests, NULL, NULL);
}
