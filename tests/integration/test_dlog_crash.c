/* SPDX-License-Identifier: MIT */
/*
 * Integration (real divvyd): the decision log under pressure (docs/operations.md "Decision
 * log").  Rotation keeps at most `files` files of about file_size, the newest decisions
 * complete; a full disk costs records, counted and logged, never an answer; kill -9 loses
 * at most what was younger than flush_ms, and a cut-short block is reported, not fatal; an
 * unprivileged flood does not cost root's records.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "dlog.h"
#include "harness_dlog.h"
#include "harness_grpc.h"
#include "harness_redis.h"
#include "hash.h"
#include "proto.h"
#include "resp_client.h"
#include "table.h"

/* ---- rotation ---------------------------------------------------------------------------- */

#define ROT_SIZE 65536
#define ROT_FILES 3

static void check_rotation(unsigned last, void *arg)
{
    char names[64][128];
    size_t n = hdlog_list_files(names, 64);
    struct stat st;

    (void)last;
    (void)arg;
    if (n > ROT_FILES)
        fail_msg("%zu log files, at most %d kept", n, ROT_FILES);
    for (size_t i = 0; i < n; i++)
        if (stat(names[i], &st) == 0 && st.st_size > ROT_SIZE + ROT_SIZE / 4)
            fail_msg("%s: %lld bytes, file_size %d plus one block at most", names[i],
                     (long long)st.st_size, ROT_SIZE);
}

static void test_dlog_crash_rotation(void **state)
{
    struct harness_opts o = { .workers = 1 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;
    struct logread lr;
    unsigned n = 6000;
    char *conf, *rest, *seen, *scrape;
    int port = harness_free_port(SOCK_STREAM);

    (void)state;
    hdlog_logdir_new();
    assert_true(asprintf(&rest, "metrics = { listen = \"tcp:127.0.0.1:%d\"; };\n%s", port,
                         LOCAL_RULES) > 0);
    conf = hdlog_conf("file_size = 65536; files = 3; flush_ms = 10;", rest);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    hdlog_hits(c, 0, n, 20, 120, check_rotation, NULL);
    harness_close(c);
    /* The metrics count what was written: every decision, none lost. */
    scrape = malloc(1 << 16);
    assert_non_null(scrape);
    harness_scrape_until(port, "/metrics", "divvy_decision_log_records_total 6000", scrape,
                         1 << 16);
    assert_non_null(strstr(scrape, "divvy_decision_log_dropped_total{source=\"divvyd\"} 0\n"));
    assert_non_null(strstr(scrape, "divvy_decision_log_write_errors_total 0\n"));
    free(scrape);
    free(rest);
    hdlog_stop_ok(d);
    check_rotation(0, NULL);

    hdlog_read(&lr);
    assert_int_equal(lr.files, ROT_FILES);
    assert_int_equal(lr.undescribed, 0);
    assert_int_equal(lr.corrupt, 0);
    assert_int_equal(lr.gaps, 0);
    /* The newest decisions, none missing since the oldest kept: 3 files of 64 KiB hold
     * at least a thousand of these. */
    seen = calloc(n, 1);
    assert_non_null(seen);
    for (size_t i = 0; i < lr.n; i++) {
        unsigned tag = (unsigned)strtoul(lr.rec[i].tag, NULL, 10);

        assert_true(tag < n);
        seen[tag]++;
    }
    assert_true(lr.n >= 1000 && lr.n < n);
    for (unsigned t = n - (unsigned)lr.n; t < n; t++)
        if (seen[t] != 1)
            fail_msg("tag %u is in the log %d times (%zu decisions kept)", t, seen[t], lr.n);
    free(seen);
    hdlog_free(&lr);
    harness_free(d);
    free(conf);
}

/* ---- a full disk ------------------------------------------------------------------------- */

static void test_dlog_crash_disk_full(void **state)
{
    struct harness_opts o = { .workers = 1 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;
    struct logread lr;
    char *conf, *rest, *scrape;
    int port = harness_free_port(SOCK_STREAM);
    long long errors = 0;
    uint64_t t0;

    (void)state;
    hdlog_logdir_new();
    /* The log's directory on a 256 KiB tmpfs: 16 files of 64 KiB do not fit. */
    assert_int_equal(mkdir(hdlog_logdir, 0750), 0);
    if (mount("tmpfs", hdlog_logdir, "tmpfs", MS_NOSUID | MS_NODEV, "size=256k,mode=0750") < 0) {
        print_message("cannot mount a tmpfs (%s): skipped\n", strerror(errno));
        skip();
    }
    snprintf(hdlog_mounted, sizeof(hdlog_mounted), "%s", hdlog_logdir);
    assert_true(asprintf(&rest, "metrics = { listen = \"tcp:127.0.0.1:%d\"; };\n%s", port,
                         LOCAL_RULES) > 0);
    conf = hdlog_conf("file_size = 65536; files = 16; flush_ms = 10;", rest);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    /* Every answer comes, and soon: a failing disk costs records, never a hit's time. */
    t0 = harness_now_ms();
    hdlog_hits(c, 0, 8000, 20, 120, NULL, NULL);
    hdlog_cmd(c, "HIT path=/x tag=last\n", "OK true");
    assert_true(harness_now_ms() - t0 < 60000);
    harness_close(c);
    scrape = malloc(1 << 16);
    assert_non_null(scrape);
    harness_scrape_until(port, "/metrics", "# TYPE divvy_decision_log_write_errors_total counter",
                         scrape, 1 << 16);
    for (int i = 0; i < 100 && errors == 0; i++) {
        const char *e;

        harness_http_get(port, "/metrics", scrape, 1 << 16);
        e = strstr(scrape, "\ndivvy_decision_log_write_errors_total ");
        errors = e ? atoll(e + strlen("\ndivvy_decision_log_write_errors_total ")) : 0;
        if (!errors)
            harness_pause_ms(100);
    }
    assert_true(errors > 0);
    free(scrape);
    hdlog_stop_ok(d);
    assert_int_equal(harness_log_contains(d, "No space left on device"), 1);
    /* What did fit is whole: a failed block is cut off again, never left half. */
    hdlog_read(&lr);
    assert_int_equal(lr.corrupt, 0);
    assert_true(lr.n > 0 && lr.n < 8001);
    hdlog_free(&lr);
    harness_free(d);
    free(rest);
    free(conf);
}

/* ---- kill -9 ------------------------------------------------------------------------------- */

struct answered {
    unsigned *tag;              /* the last tag of each batch answered ... */
    uint64_t *ms;               /* ... and when */
    size_t n, cap;
};

static void note_answer(unsigned last, void *arg)
{
    struct answered *a = arg;

    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 1024;
        a->tag = realloc(a->tag, a->cap * sizeof(*a->tag));
        a->ms = realloc(a->ms, a->cap * sizeof(*a->ms));
        assert_true(a->tag && a->ms);
    }
    a->tag[a->n] = last;
    a->ms[a->n++] = harness_now_ms();
}

#define KILL_FLUSH_MS 100
#define KILL_MARGIN_MS 1000

static void test_dlog_crash_kill9(void **state)
{
    struct harness_opts o = { .workers = 1 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;
    struct answered a = { 0 };
    struct logread lr;
    unsigned sent = 0, must = 0;
    uint64_t start, killed;
    char names[64][128];
    struct stat st;
    char *conf, *seen;
    int status;

    (void)state;
    hdlog_logdir_new();
    conf = hdlog_conf("flush_ms = 100;", LOCAL_RULES);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    /* Steady logging for 2 s, then kill -9 with requests still coming. */
    start = harness_now_ms();
    while (harness_now_ms() - start < 2000) {
        hdlog_hits(c, sent, 200, 20, 20, note_answer, &a);
        sent += 200;
    }
    CHECK(harness_send(c, "HIT path=/x tag=late\n", 21));
    d->expect_exit = true;
    CHECK(harness_kill(d, SIGKILL));
    killed = harness_now_ms();
    harness_stop(d, &status);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    harness_close(c);

    hdlog_read(&lr);
    assert_int_equal(lr.corrupt, 0);
    assert_int_equal(lr.gaps, 0);
    seen = calloc(sent, 1);
    assert_non_null(seen);
    for (size_t i = 0; i < lr.n; i++) {
        unsigned tag = (unsigned)strtoul(lr.rec[i].tag, NULL, 10);

        if (strcmp(lr.rec[i].tag, "late") != 0 && tag < sent)
            seen[tag] = 1;
    }
    /* Every decision answered more than flush_ms (and a generous margin) before the kill. */
    for (size_t b = 0; b < a.n; b++)
        if (a.ms[b] + KILL_FLUSH_MS + KILL_MARGIN_MS < killed)
            must = a.tag[b] + 1;
    assert_true(must > 1000);
    for (unsigned t = 0; t < must; t++)
        if (!seen[t])
            fail_msg("decision %u, answered over %d ms before kill -9, is not in the log "
                     "(%zu of %u there)", t, KILL_FLUSH_MS + KILL_MARGIN_MS, lr.n, sent);
    hdlog_free(&lr);

    /* A block cut short (a torn write) is reported where it is, never fatal; what came
     * before it is read as before. */
    assert_int_equal(hdlog_list_files(names, 64), 1);
    assert_int_equal(stat(names[0], &st), 0);
    assert_int_equal(truncate(names[0], st.st_size - 7), 0);
    {
        struct logread cut;

        hdlog_read(&cut);
        assert_int_equal(cut.corrupt, 1);
        assert_true(cut.n + 200 >= must);
        hdlog_free(&cut);
    }
    free(seen);
    free(a.tag);
    free(a.ms);
    harness_free(d);
    free(conf);
}

/* ---- an unprivileged flood does not cost root's records ------------------------------------ */

struct flood {
    struct harness_daemon *d;
    volatile bool stop;
    unsigned sent;
    int err;
};

static void *flood_run(void *arg)
{
    struct flood *f = arg;
    struct harness_conn *c = NULL;
    char *buf = malloc(64 * 4200), line[HARNESS_LINE];
    char pad[4000];

    if (!buf || harness_connect(f->d, HARNESS_TCP, &c) < 0) {
        f->err = -ENOMEM;
        free(buf);
        return NULL;
    }
    memset(pad, 'f', sizeof(pad));
    while (!f->stop) {
        size_t off = 0;

        for (int j = 0; j < 64; j++)
            off += (size_t)sprintf(buf + off, "HIT path=/x tag=flood pad=%.*s%u\n", 2000, pad,
                                   f->sent + (unsigned)j);
        if (harness_send(c, buf, off) < 0)
            break;
        for (int j = 0; j < 64; j++)
            if (harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS) < 0) {
                f->err = -EIO;
                goto out;
            }
        f->sent += 64;
    }
out:
    harness_close(c);
    free(buf);
    return NULL;
}

static void test_dlog_crash_flood_spares_root(void **state)
{
    struct harness_opts o = { .workers = 1 };
    struct harness_daemon *d = NULL;
    struct harness_conn *root = NULL, *mc = NULL;
    struct flood f[3] = { 0 };
    pthread_t th[3];
    struct logread lr;
    char rootsock[HARNESS_PATH + 8], req[64], stats[HARNESS_LINE];
    unsigned n_root = 0;
    char *conf;

    (void)state;
    hdlog_logdir_new();
    conf = hdlog_conf("flush_ms = 1000;", LOCAL_RULES);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    /* Root's own socket (docs/daemon.md "The privileged lane"): its lane thread, its ring. */
    snprintf(rootsock, sizeof(rootsock), "%s.root", d->sock);
    CHECK(harness_connect_unix(rootsock, &root));
    for (int i = 0; i < 3; i++) {
        f[i].d = d;
        assert_int_equal(pthread_create(&th[i], NULL, flood_run, &f[i]), 0);
    }
    /* Logins, not a flood: one a millisecond at most. */
    for (uint64_t t0 = harness_now_ms(); harness_now_ms() - t0 < 2000; n_root++) {
        snprintf(req, sizeof(req), "HIT path=/x tag=root%u\n", n_root);
        hdlog_cmd(root, req, "OK true");
        harness_pause_ms(1);
    }
    for (int i = 0; i < 3; i++)
        f[i].stop = true;
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(f[i].err, 0);
    (void)mc;
    (void)stats;
    harness_close(root);
    hdlog_stop_ok(d);

    hdlog_read(&lr);
    for (unsigned i = 0; i < n_root; i++) {
        char tag[32];

        snprintf(tag, sizeof(tag), "root%u", i);
        hdlog_find(&lr, tag, 0);
    }
    fprintf(stderr, "flood: %u root decisions all logged; %u unprivileged sent, %zu logged, "
            "%llu dropped\n", n_root, f[0].sent + f[1].sent + f[2].sent, lr.n - n_root,
            (unsigned long long)lr.gaps);
    hdlog_free(&lr);
    harness_free(d);
    free(conf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dlog_crash_rotation, harness_setup, hdlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_crash_disk_full, harness_setup, hdlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_crash_kill9, harness_setup, hdlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_crash_flood_spares_root, harness_setup,
                                        hdlog_teardown),
    };

    return cmocka_run_group_tests_name("dlog_crash", tests, NULL, NULL);
}
