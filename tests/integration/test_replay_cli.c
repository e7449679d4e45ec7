/* SPDX-License-Identifier: MIT */
/*
 * The real build/divvyctl replay on decision logs this test writes with the
 * log's own encoder (server/dlog.h), its report checked against counts the
 * test makes itself: the config the traffic was recorded with changes
 * nothing; a tightened limit flips exactly the hits over the new limit, per
 * actor; a lockout candidate locks the actor that failed, from the failure
 * that locked, for unlock_time; worker blocks out of order within the window
 * replay in order and a report later than the window is counted late; a
 * corrupt block is skipped and counted; a bad config, an unreadable log
 * and bad usage fail with a clear message and exit 1 (2 for usage).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>

#include "dlog.h"
#include "harness.h"
#include "table.h"

#define T0   1795000000000ULL       /* unix ms of the first decision */
#define MONO 5000000ULL             /* its CLOCK_MONOTONIC ms */

struct fx {
    char dir[64];
    char log[128], conf[128];
    struct dlog_enc *enc;
    int fd;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    if (!f)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/divvy-test-replay-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->log, sizeof(f->log), "%s/logs", f->dir);
    snprintf(f->conf, sizeof(f->conf), "%s/c.conf", f->dir);
    if (mkdir(f->log, 0755) < 0)
        return -1;
    f->enc = dlog_enc_new(DLOG_BLOCK_MAX);
    f->fd = -1;
    *state = f;
    return f->enc ? 0 : -1;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    if (f->fd >= 0)
        close(f->fd);
    dlog_enc_free(f->enc);
    harness_rm_tree(f->dir);
    free(f);
    return 0;
}

static void write_all(int fd, const void *buf, size_t len)
{
    assert_int_equal(write(fd, buf, len), (ssize_t)len);
}

/* Starts log file @name in the fixture's log directory. */
static void log_open(struct fx *f, const char *name)
{
    uint8_t hdr[DLOG_HEADER_MAX];
    char path[256];
    size_t len;

    if (f->fd >= 0)
        close(f->fd);
    snprintf(path, sizeof(path), "%s/%s", f->log, name);
    f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(f->fd >= 0);
    len = dlog_file_header(hdr, sizeof(hdr), T0, "testhost");
    assert_true(len > 0);
    write_all(f->fd, hdr, len);
}

/* Seals the block being built and appends it to the file; returns its offset. */
static off_t block_flush(struct fx *f)
{
    const uint8_t *blk;
    size_t len = dlog_enc_finish(f->enc, &blk);
    off_t at = lseek(f->fd, 0, SEEK_CUR);

    if (len)
        write_all(f->fd, blk, len);
    return at;
}

/* A decision @ms after T0 with pairs "k=v ..." (sorted by key). */
static void add(struct fx *f, uint64_t ms, uint8_t op, bool allowed, bool privileged,
                const char *pairs)
{
    struct dlog_decision d;
    char buf[256], *p, *save = NULL;

    memset(&d, 0, sizeof(d));
    d.unix_ms = T0 + ms;
    d.mono_ms = MONO + ms;
    d.generation = 1;
    d.op = op;
    d.n = 1;
    d.uid = privileged ? 0 : DLOG_UNKNOWN_ID;
    d.pid = DLOG_UNKNOWN_ID;
    d.path = DLOG_PATH_LOCAL;
    d.flags = (allowed ? DLOG_F_ALLOWED : 0) | (privileged ? DLOG_F_PRIVILEGED : 0);
    d.decider_id = 0x42;
    snprintf(buf, sizeof(buf), "%s", pairs);
    for (p = strtok_r(buf, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(p, '=');

        *eq = '\0';
        d.kv[d.n_kv++] = (struct dlog_kv){ .key = p, .key_len = (uint32_t)strlen(p),
                                            .value = eq + 1,
                                            .value_len = (uint32_t)strlen(eq + 1) };
    }
    assert_int_equal(dlog_enc_decision(f->enc, &d), 0);
}

static void write_conf(struct fx *f, const char *rules)
{
    FILE *c = fopen(f->conf, "w");

    assert_non_null(c);
    fprintf(c, "rules = (\n%s\n{ default = true; credit_limit = 100000; reset_seconds = 1; }\n);\n",
            rules);
    fclose(c);
}

static json_t *replay_json(struct fx *f, const char *extra)
{
    const char *args[12] = { "replay", "--json", "--config", f->conf };
    struct harness_ctl *ctl;
    json_error_t err;
    json_t *doc;
    int n = 4;

    if (extra)
        args[n++] = extra;
    args[n++] = f->log;
    args[n] = NULL;
    ctl = harness_ctl_run(false, NULL, 0, args);
    doc = json_loads(ctl->out, 0, &err);
    if (!doc)
        fail_msg("not JSON (%s): %s", err.text, ctl->out);
    return doc;
}

static long long num(json_t *o, const char *path)
{
    json_t *v = o;
    char buf[128], *p, *save = NULL;

    snprintf(buf, sizeof(buf), "%s", path);
    for (p = strtok_r(buf, ".", &save); p && v; p = strtok_r(NULL, ".", &save))
        v = json_is_array(v) ? json_array_get(v, (size_t)atoi(p)) : json_object_get(v, p);
    if (!json_is_integer(v))
        fail_msg("%s is not an integer", path);
    return json_integer_value(v);
}

/* The rule object labelled @label. */
static json_t *rule(json_t *doc, const char *label)
{
    json_t *rules = json_object_get(doc, "rules"), *r;
    size_t i;

    json_array_foreach(rules, i, r) {
        if (strcmp(json_string_value(json_object_get(r, "rule")), label) == 0)
            return r;
    }
    fail_msg("no rule %s in the report", label);
    return NULL;
}

/* Recorded under a limit of 10 a minute: the verdicts divvyd gave. */
#define RECORDED_LIMIT 10
static const struct { const char *user; unsigned hits; } traffic[] = {
    { "alice", 10 }, { "bob", 12 }, { "carol", 3 },
};

/* In time order: each user's i-th hit at i s (+ 100 ms per user). */
static void write_traffic(struct fx *f)
{
    char pairs[64];

    log_open(f, "a.dlog");
    dlog_enc_begin(f->enc, 0);
    for (unsigned i = 0; i < 12; i++) {
        for (unsigned t = 0; t < 3; t++) {
            if (i >= traffic[t].hits)
                continue;
            snprintf(pairs, sizeof(pairs), "path=/x user=%s", traffic[t].user);
            add(f, t * 100 + i * 1000, TABLE_TAKE, i < RECORDED_LIMIT, false, pairs);
        }
    }
    block_flush(f);
}

static void test_replay_same_config_no_change(void **state)
{
    struct fx *f = *state;
    json_t *doc;
    unsigned total = 0;

    for (unsigned t = 0; t < 3; t++)
        total += traffic[t].hits;
    write_traffic(f);
    write_conf(f, "{ match = { user = \"*\"; }; label = \"per-user\"; actor = \"user\";"
                  " credit_limit = 10; reset_seconds = 60; },");
    doc = replay_json(f, NULL);
    assert_int_equal(num(doc, "decisions"), total);
    assert_int_equal(num(doc, "replayed"), total);
    assert_int_equal(num(doc, "same"), total);
    assert_int_equal(num(doc, "allowed_to_denied"), 0);
    assert_int_equal(num(doc, "denied_to_allowed"), 0);
    assert_int_equal(num(doc, "skipped.errors"), 0);
    assert_int_equal(num(doc, "skipped.reported_late"), 0);
    assert_int_equal(num(rule(doc, "per-user"), "hits"), total);
    assert_int_equal(json_array_size(json_object_get(doc, "mismatches")), 0);
    json_decref(doc);
}

static void test_replay_tightened_counts(void **state)
{
    struct fx *f = *state;
    const unsigned limit = 4;
    long long flips = 0, per[3];
    json_t *doc, *r, *top;

    write_traffic(f);
    write_conf(f, "{ match = { user = \"*\"; }; label = \"per-user\"; actor = \"user\";"
                  " credit_limit = 4; reset_seconds = 60; },");
    /* The independent count: each actor's hits allowed then, denied now. */
    for (unsigned t = 0; t < 3; t++) {
        unsigned then = traffic[t].hits < RECORDED_LIMIT ? traffic[t].hits : RECORDED_LIMIT;
        unsigned now = traffic[t].hits < limit ? traffic[t].hits : limit;

        per[t] = then - now;
        flips += per[t];
    }
    doc = replay_json(f, NULL);
    assert_int_equal(num(doc, "allowed_to_denied"), flips);
    assert_int_equal(num(doc, "denied_to_allowed"), 0);
    r = rule(doc, "per-user");
    assert_int_equal(num(r, "allowed_to_denied"), flips);
    assert_int_equal(num(r, "actors_affected"), 2);            /* alice, bob; carol < 4 */
    top = json_object_get(r, "top_actors");
    assert_int_equal(json_array_size(top), 2);
    /* alice and bob both lose 6: a tie, in actor order. */
    assert_string_equal(json_string_value(json_object_get(json_array_get(top, 0), "actor")),
                        "alice");
    assert_int_equal(num(r, "top_actors.0.changed"), per[0]);
    assert_int_equal(num(r, "top_actors.1.changed"), per[1]);
    assert_int_equal(json_array_size(json_object_get(doc, "mismatches")), flips);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(doc, "mismatches"), 0), "rule_after")),
                        "per-user");
    json_decref(doc);
}

static void test_replay_lockout_periods(void **state)
{
    struct fx *f = *state;
    json_t *doc, *r;

    log_open(f, "a.dlog");
    dlog_enc_begin(f->enc, 0);
    /* eve fails 3 times from one host (the 3rd locks for 300 s), tries again
     * at 60 s (refused), then succeeds long after; mallory fails twice. */
    add(f, 0, TABLE_TAKE, true, true, "event=authfail rhost=10.0.0.9 user=eve");
    add(f, 5000, TABLE_TAKE, true, true, "event=authfail rhost=10.0.0.7 user=mallory");
    add(f, 6000, TABLE_TAKE, true, true, "event=authfail rhost=10.0.0.7 user=mallory");
    add(f, 10000, TABLE_TAKE, true, true, "event=authfail rhost=10.0.0.9 user=eve");
    add(f, 20000, TABLE_TAKE, true, true, "event=authfail rhost=10.0.0.9 user=eve");
    add(f, 60000, TABLE_PEEK, false, true, "event=authfail rhost=10.0.0.9 user=eve");
    block_flush(f);
    write_conf(f, "{ match = { event = \"authfail\"; user = \"*\"; rhost = \"*\"; };"
                  " label = \"login\"; actor = [ \"user\", \"rhost\" ]; algorithm = \"lockout\";"
                  " credit_limit = 3; fail_interval = 900; unlock_time = 300;"
                  " source = \"privileged\"; },");
    doc = replay_json(f, NULL);
    r = rule(doc, "login");
    assert_int_equal(json_array_size(json_object_get(r, "locks")), 1);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(r, "locks"), 0), "actor")),
                        "eve,10.0.0.9");
    assert_int_equal(num(r, "locks.0.start_ms"), T0 + 20000);
    assert_int_equal(num(r, "locks.0.end_ms"), T0 + 320000);
    assert_int_equal(num(r, "locks.0.seconds"), 300);
    assert_int_equal(num(doc, "same"), 6);
    json_decref(doc);
}

/* Two workers' blocks out of order; a fast-path report 25 s late. */
static void test_replay_order_and_late(void **state)
{
    struct fx *f = *state;
    json_t *doc;

    log_open(f, "a.dlog");
    dlog_enc_begin(f->enc, 1);                  /* worker 1's block is written first */
    add(f, 800, TABLE_TAKE, false, false, "user=a");    /* a's 2nd hit: denied */
    add(f, 9000, TABLE_TAKE, true, false, "user=z");
    block_flush(f);
    dlog_enc_begin(f->enc, 0);
    add(f, 0, TABLE_TAKE, true, false, "user=a");
    add(f, 30000, TABLE_TAKE, true, false, "user=y");
    block_flush(f);
    dlog_enc_begin(f->enc, UINT32_MAX);         /* a report, 25 s behind the latest */
    add(f, 5000, TABLE_TAKE, true, false, "user=q");
    block_flush(f);
    write_conf(f, "{ match = { user = \"*\"; }; label = \"u\"; actor = \"user\";"
                  " credit_limit = 1; reset_seconds = 60; },");
    doc = replay_json(f, NULL);
    assert_int_equal(num(doc, "decisions"), 5);
    assert_int_equal(num(doc, "skipped.reported_late"), 1);
    assert_int_equal(num(doc, "same"), 4);
    json_decref(doc);
    /* A window of 30 s takes the late one in. */
    doc = replay_json(f, "--window=30");
    assert_int_equal(num(doc, "skipped.reported_late"), 0);
    assert_int_equal(num(doc, "same"), 5);
    json_decref(doc);
}

static void test_replay_corrupt_block_skipped(void **state)
{
    struct fx *f = *state;
    char path[256];
    off_t second = 0;
    json_t *doc;
    int fd;

    log_open(f, "a.dlog");
    for (unsigned b = 0; b < 3; b++) {
        dlog_enc_begin(f->enc, 0);
        for (unsigned i = 0; i < 4; i++)
            add(f, b * 10000 + i, TABLE_TAKE, true, false, "user=a");
        if (b == 1)
            second = block_flush(f);
        else
            block_flush(f);
    }
    close(f->fd);
    f->fd = -1;
    /* One byte of the second block's body changed: its CRC fails. */
    snprintf(path, sizeof(path), "%s/a.dlog", f->log);
    fd = open(path, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "\xff", 1, second + 40), 1);
    close(fd);
    write_conf(f, "");
    doc = replay_json(f, NULL);
    assert_int_equal(num(doc, "corrupt_blocks"), 1);
    assert_int_equal(num(doc, "decisions"), 8);
    assert_int_equal(num(doc, "same"), 8);
    json_decref(doc);
}

static void test_replay_errors(void **state)
{
    struct fx *f = *state;
    struct harness_ctl *ctl;
    char bogus[256];
    FILE *b;

    write_traffic(f);
    /* A candidate with a problem: its file:line, exit 1. */
    write_conf(f, "{ match = { user = \"*\"; }; credit_limit = -3; reset_seconds = 60; },");
    ctl = harness_ctl_run(false, NULL, 1, (const char *const[]){ "replay", "--config", f->conf,
                                                                 f->log, NULL });
    assert_non_null(strstr(ctl->err, f->conf));
    assert_non_null(strstr(ctl->err, "candidate config"));
    ctl = harness_ctl_run(false, NULL, 1, (const char *const[]){ "replay", "--config",
                                                                 "/nonexistent.conf", f->log,
                                                                 NULL });
    assert_non_null(strstr(ctl->err, "/nonexistent.conf"));
    /* A log that is not one, and one that does not exist: named, exit 1. */
    write_conf(f, "");
    snprintf(bogus, sizeof(bogus), "%s/bogus.dlog", f->dir);
    b = fopen(bogus, "w");
    assert_non_null(b);
    fputs("this is not a decision log\n", b);
    fclose(b);
    ctl = harness_ctl_run(false, NULL, 1, (const char *const[]){ "replay", "--config", f->conf,
                                                                 bogus, NULL });
    assert_non_null(strstr(ctl->err, bogus));
    assert_non_null(strstr(ctl->err, "not a decision log"));
    ctl = harness_ctl_run(false, NULL, 1, (const char *const[]){ "replay", "-c", f->conf,
                                                                 "/nonexistent/x.dlog", NULL });
    assert_non_null(strstr(ctl->err, "/nonexistent/x.dlog"));
    /* A FIFO would block a reader forever: refused before it is opened. */
    snprintf(bogus, sizeof(bogus), "%s/fifo.dlog", f->dir);
    assert_int_equal(mkfifo(bogus, 0600), 0);
    ctl = harness_ctl_run(false, NULL, 1, (const char *const[]){ "replay", "-c", f->conf,
                                                                 bogus, NULL });
    assert_non_null(strstr(ctl->err, "not a regular file"));
    /* A directory without logs. */
    ctl = harness_ctl_run(false, NULL, 1, (const char *const[]){ "replay", "-c", f->conf,
                                                                 "/tmp/../proc/self", NULL });
    assert_non_null(strstr(ctl->err, "without .dlog files"));
    /* Usage. */
    ctl = harness_ctl_run(false, NULL, 2, (const char *const[]){ "replay", f->log, NULL });
    assert_non_null(strstr(ctl->err, "--config"));
    ctl = harness_ctl_run(false, NULL, 2, (const char *const[]){ "replay", "-c", f->conf,
                                                                 "--since", "yesterday",
                                                                 f->log, NULL });
    assert_non_null(strstr(ctl->err, "--since"));
    /* The text report runs and names the rule. */
    ctl = harness_ctl_run(false, NULL, 0, (const char *const[]){ "replay", "-c", f->conf,
                                                                 "--since", "@1795000000",
                                                                 f->log, NULL });
    assert_non_null(strstr(ctl->out, "decisions 25"));
    ctl = harness_ctl_run(false, NULL, 0, (const char *const[]){ "replay", "-c", f->conf,
                                                                 "--until",
                                                                 "2026-11-18T11:06:45Z",
                                                                 f->log, NULL });
    /* Before T0 + 5 s: alice's first 5, bob's first 5 (at i s + 100 ms), carol's 3. */
    assert_non_null(strstr(ctl->out, "decisions 13"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_replay_same_config_no_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_tightened_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_lockout_periods, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_order_and_late, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_corrupt_block_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_errors, setup, teardown),
    };

    return cmocka_run_group_tests_name("replay_cli", tests, NULL, NULL);
}
