/* SPDX-License-Identifier: MIT */
/*
 * Integration: `divvyctl log` (the real build/divvyctl) on decision logs
 * this test writes with the format's own encoder (server/dlog.c): every
 * decision as text and as JSON lines (each line parsed), the filters
 * (time, verdict, rule by label and hex id, actor), redacted values, a gap,
 * lock periods of a scripted lockout sequence (--locks: expired, unlocked by
 * uid 0, open), a config's log directory (-c); then what anyone could hand
 * it: a damaged block and a cut file (reported with file and offset,
 * skipped, the rest read, exit 1), a file that is no log and a directory
 * with none (exit 1), a missing path (exit 5), escapes in values, 60
 * damaged copies of a log (no crash, valid JSON, exit 0 or 1), usage errors
 * (exit 2).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "dlog.h"
#include "harness.h"
#include "table.h"

/* 2026-11-28T12:00:00Z */
#define T0   1795867200000ull
#define S(x) ((uint64_t)(x) * 1000)

#define LOGIN 0x1111222233334444ull
#define API   0x00000000000000a7ull

/* The test's own directory (harness_tmp_dir()). */
static const char *tmpdir;

static int read_setup(void **state)
{
    if (harness_setup(state) < 0)
        return -1;
    tmpdir = harness_tmp_dir();
    return tmpdir ? 0 : -1;
}

/* ---- writing logs ----------------------------------------------------------------------- */

/* A file being written: its bytes, and where each block began. */
struct gen {
    uint8_t *buf;
    size_t len;
    size_t block_at[16];
    size_t n_blocks;
    struct dlog_enc *e;
};

static void gen_start(struct gen *g)
{
    memset(g, 0, sizeof(*g));
    g->buf = malloc(16u << 20);
    assert_non_null(g->buf);
    g->len = dlog_file_header(g->buf, DLOG_HEADER_MAX, T0, "testhost");
    assert_true(g->len > 0);
    g->e = dlog_enc_new(DLOG_BLOCK_MAX);
    assert_non_null(g->e);
}

static void gen_block(struct gen *g, uint32_t worker)
{
    dlog_enc_begin(g->e, worker);
}

static void gen_seal(struct gen *g)
{
    const uint8_t *blk;
    size_t n = dlog_enc_finish(g->e, &blk);

    assert_true(n > 0);
    assert_true(g->n_blocks < 16);
    g->block_at[g->n_blocks++] = g->len;
    memcpy(g->buf + g->len, blk, n);
    g->len += n;
}

static void gen_write(struct gen *g, const char *name, size_t len)
{
    char path[256];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(g->buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void gen_free(struct gen *g)
{
    dlog_enc_free(g->e);
    free(g->buf);
}

static const char *const login_keys[] = { "user", "rhost" };
static const uint32_t login_lens[] = { 4, 5 };
static const char *const api_keys[] = { "ip" };
static const uint32_t api_lens[] = { 2 };

static void gen_rules(struct gen *g)
{
    struct dlog_rule r[2];
    struct dlog_rules rs = { .generation = 1, .unix_ms = T0, .total = 2, .first = 0, .n = 2,
                             .rule = r };

    memset(r, 0, sizeof(r));
    r[0] = (struct dlog_rule){ .id = LOGIN, .id_str = "login-user-source", .id_len = 17,
                               .algo = RULES_ALGO_LOCKOUT, .credit_limit = 3,
                               .reset_ms = 900000, .prefix4 = -1, .prefix6 = -1,
                               .n_actor = 2 };
    r[1] = (struct dlog_rule){ .id = API, .id_str = "api", .id_len = 3,
                               .algo = RULES_ALGO_WINDOW, .credit_limit = 10,
                               .reset_ms = 60000, .prefix4 = -1, .prefix6 = -1, .n_actor = 1 };
    for (unsigned i = 0; i < 2; i++) {
        r[0].actor[i] = login_keys[i];
        r[0].actor_len[i] = login_lens[i];
    }
    r[1].actor[0] = api_keys[0];
    r[1].actor_len[0] = api_lens[0];
    assert_int_equal(dlog_enc_rules(g->e, &rs), 0);
}

static void add_kv(struct dlog_decision *d, const char *k, const char *v, uint8_t redact)
{
    d->kv[d->n_kv++] = (struct dlog_kv){ .key = k, .key_len = (uint32_t)strlen(k), .value = v,
                                         .value_len = (uint32_t)strlen(v), .redact = redact };
}

/* An api request from @ip at T0 + @t. */
static void gen_api(struct gen *g, uint64_t t, const char *ip, bool allowed, uint8_t proto)
{
    struct dlog_decision d;

    memset(&d, 0, sizeof(d));
    d.unix_ms = T0 + t;
    d.mono_ms = 5000000 + t;
    d.generation = 1;
    d.op = TABLE_TAKE;
    d.protocol = proto;
    d.path = DLOG_PATH_LOCAL;
    d.flags = allowed ? DLOG_F_ALLOWED : 0;
    d.n = 1;
    d.uid = proto == DLOG_PROTO_LINE ? 1000 : DLOG_UNKNOWN_ID;
    d.pid = proto == DLOG_PROTO_LINE ? 55 : DLOG_UNKNOWN_ID;
    d.credit = allowed ? 9 : 0;
    d.reset_s = 30;
    d.decider_id = API;
    add_kv(&d, "ip", ip, DLOG_KEEP);
    add_kv(&d, "method", "GET", DLOG_KEEP);
    d.n_out = 1;
    d.out[0] = (struct dlog_outcome){ .rule_id = API, .credit = d.credit, .reset_s = 30,
                                      .flags = (uint8_t)(DLOG_O_COUNTED |
                                                         (allowed ? DLOG_O_ALLOWED : 0)) };
    assert_int_equal(dlog_enc_decision(g->e, &d), 0);
}

/* pam_divvy's request for @user at T0 + @t and the login rule's answer. */
static void gen_login(struct gen *g, uint64_t t, enum table_op op, const char *user,
                      bool allowed, uint64_t credit, uint64_t reset_s)
{
    struct dlog_decision d;

    memset(&d, 0, sizeof(d));
    d.unix_ms = T0 + t;
    d.mono_ms = 5000000 + t;
    d.generation = 1;
    d.op = (uint8_t)op;
    d.protocol = DLOG_PROTO_LINE;
    d.path = DLOG_PATH_LOCAL;
    d.flags = (uint8_t)((allowed ? DLOG_F_ALLOWED : 0) | DLOG_F_PRIVILEGED);
    d.n = 1;
    d.uid = 0;
    d.pid = op == TABLE_RESET ? 4400 : 3000;
    d.credit = credit;
    d.reset_s = reset_s;
    d.decider_id = LOGIN;
    d.n_reset = op == TABLE_RESET ? 1 : 0;
    add_kv(&d, "event", "authfail", DLOG_KEEP);
    add_kv(&d, "rhost", "203.0.113.9", DLOG_KEEP);
    add_kv(&d, "user", user, DLOG_KEEP);
    d.n_out = 1;
    d.out[0] = (struct dlog_outcome){ .rule_id = LOGIN, .credit = credit, .reset_s = reset_s,
                                      .flags = (uint8_t)(DLOG_O_COUNTED |
                                                         (allowed ? DLOG_O_ALLOWED : 0)) };
    assert_int_equal(dlog_enc_decision(g->e, &d), 0);
}

/* Writes the two good files of @dir (a name under tmpdir, made here):
 *   1.dlog: block 0: rules; api allowed (line, 1 s), denied (resp, 2 s); an error
 *           (3 s); alice's three failures (10-12 s: locked 60 s), a refused preauth
 *           (20 s), unlock by uid 0 (30 s); a redacted request (35 s); a gap of 7 (40 s).
 *           block 1 (worker 1): bob's lock (48-50 s, 60 s long).
 *   2.dlog: api requests at 55 and 60 s (the log's end: bob's lock is open).
 */
static void write_good(const char *dir)
{
    struct dlog_decision d;
    struct dlog_gap gap = { .unix_ms = T0 + S(40), .dropped = 7 };
    char sub[160], name[200];
    struct gen g;

    snprintf(sub, sizeof(sub), "%s/%s", tmpdir, dir);
    assert_int_equal(mkdir(sub, 0755), 0);

    gen_start(&g);
    gen_block(&g, 0);
    gen_rules(&g);
    gen_api(&g, S(1), "10.0.0.1", true, DLOG_PROTO_LINE);
    gen_api(&g, S(2), "10.0.0.2", false, DLOG_PROTO_RESP);
    memset(&d, 0, sizeof(d));
    d.unix_ms = T0 + S(3);
    d.op = TABLE_TAKE;
    d.n = 1;
    d.flags = DLOG_F_ERROR;
    d.err = PROTO_E_BAD_REQUEST;
    d.uid = 1000;
    d.pid = 56;
    add_kv(&d, "ip", "10.0.0.3", DLOG_KEEP);
    assert_int_equal(dlog_enc_decision(g.e, &d), 0);
    gen_login(&g, S(10), TABLE_TAKE, "alice", true, 2, 900);
    gen_login(&g, S(11), TABLE_TAKE, "alice", true, 1, 899);
    gen_login(&g, S(12), TABLE_TAKE, "alice", true, 0, 60);
    gen_login(&g, S(20), TABLE_PEEK, "alice", false, 0, 52);
    gen_login(&g, S(30), TABLE_RESET, "alice", true, 3, 0);
    memset(&d, 0, sizeof(d));
    d.unix_ms = T0 + S(35);
    d.op = TABLE_PEEK;
    d.n = 1;
    d.flags = DLOG_F_ALLOWED;
    d.uid = 0;
    d.pid = 3001;
    d.credit = 3;
    d.decider_id = LOGIN;
    add_kv(&d, "password", "", DLOG_DROP);
    add_kv(&d, "rhost", "198.51.100.4", DLOG_KEEP);
    add_kv(&d, "user", "9f86d081884c7d65", DLOG_HASH);
    assert_int_equal(dlog_enc_decision(g.e, &d), 0);
    assert_int_equal(dlog_enc_gap(g.e, &gap), 0);
    gen_seal(&g);
    gen_block(&g, 1);
    gen_login(&g, S(48), TABLE_TAKE, "bob", true, 2, 900);
    gen_login(&g, S(49), TABLE_TAKE, "bob", true, 1, 899);
    gen_login(&g, S(50), TABLE_TAKE, "bob", true, 0, 60);
    gen_seal(&g);
    snprintf(name, sizeof(name), "%s/1.dlog", dir);
    gen_write(&g, name, g.len);
    gen_free(&g);

    gen_start(&g);
    gen_block(&g, 0);
    gen_api(&g, S(55), "10.0.0.1", true, DLOG_PROTO_RLS);
    gen_api(&g, S(60), "10.0.0.1", true, DLOG_PROTO_FAST);
    gen_seal(&g);
    snprintf(name, sizeof(name), "%s/2.dlog", dir);
    gen_write(&g, name, g.len);
    gen_free(&g);
}

/* ---- running divvyctl log --------------------------------------------------------------- */

static char *path_of(const char *name)
{
    char *p = harness_scratch(256);

    snprintf(p, 256, "%s/%s", tmpdir, name);
    return p;
}

/* `divvyctl log ARGS`, which must exit @want (any: -1) and report nothing
 * under a sanitizer (whose exit status could pass for 1). */
static struct harness_ctl *log_run(int want, const char *const *args)
{
    struct harness_ctl *r = harness_ctl_run(false, NULL, want, args);

    if (strstr(r->err, "runtime error") || strstr(r->err, "Sanitizer"))
        fail_msg("divvyctl log: %s", r->err);
    return r;
}

#define LOG(want, ...) log_run((want), (const char *const[]){ "log", __VA_ARGS__, NULL })

static size_t lines(const char *out)
{
    return harness_count(out, "\n");
}

/* Parses each line of @out as a JSON object into @ret (up to @max); their count. */
static size_t json_lines(const char *out, json_t **ret, size_t max)
{
    size_t n = 0;

    for (const char *p = out; *p; ) {
        const char *nl = strchr(p, '\n');
        json_error_t err;
        json_t *o;

        assert_non_null(nl);
        o = json_loadb(p, (size_t)(nl - p), 0, &err);
        if (!o || !json_is_object(o))
            fail_msg("not a JSON object: %.*s (%s)", (int)(nl - p), p, err.text);
        assert_true(n < max);
        ret[n++] = o;
        p = nl + 1;
    }
    return n;
}

static void free_lines(json_t **o, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(o[i]);
}

static const char *jstr(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);

    if (!json_is_string(v))
        fail_msg("\"%s\" is not a string", key);
    return json_string_value(v);
}

static long long jint(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);

    if (!json_is_integer(v))
        fail_msg("\"%s\" is not an integer", key);
    return json_integer_value(v);
}

static void test_dlog_read_text_and_json(void **state)
{
    struct harness_ctl *r;
    json_t *o[64];
    size_t n;

    (void)state;
    write_good("logs");
    r = LOG(0, path_of("logs"));
    /* 9 decisions of 1.dlog's first block, a gap, 3 of bob's, 2 of 2.dlog. */
    assert_int_equal(lines(r->out), 9 + 1 + 3 + 2);
    assert_non_null(strstr(r->out, "2026-11-28T12:00:01.000Z TAKE 1 line/local allowed "
                               "credit=9 reset=30 rule=api uid=1000 pid=55 | ip=10.0.0.1 "
                               "method=GET\n"));
    assert_non_null(strstr(r->out, "2026-11-28T12:00:02.000Z TAKE 1 resp/local denied "
                               "credit=0 reset=30 rule=api uid=- pid=- | ip=10.0.0.2"));
    assert_non_null(strstr(r->out, "TAKE 1 line/none error error=bad-request rule=- uid=1000 pid=56 | ip=10.0.0.3\n"));
    assert_non_null(strstr(r->out, "RESET 1 line/local allowed credit=3 reset=0 cleared=1 "
                               "rule=login-user-source uid=0 pid=4400 flags=privileged |"));
    assert_non_null(strstr(r->out, " password=<dropped> rhost=198.51.100.4 "
                               "user=#9f86d081884c7d65\n"));
    assert_non_null(strstr(r->out, "2026-11-28T12:00:40.000Z gap: 7 decisions not recorded"));
    assert_non_null(strstr(r->out, " rls/local "));
    assert_non_null(strstr(r->out, " fast/local "));
    assert_string_equal(r->err, "");

    r = LOG(0, "--json", path_of("logs"));
    n = json_lines(r->out, o, 64);
    assert_int_equal(n, 15);
    assert_int_equal(jint(o[0], "unix_ms"), (long long)(T0 + S(1)));
    assert_string_equal(jstr(o[0], "time"), "2026-11-28T12:00:01.000Z");
    assert_string_equal(jstr(o[0], "verb"), "TAKE");
    assert_int_equal(jint(o[0], "n"), 1);
    assert_string_equal(jstr(o[0], "protocol"), "line");
    assert_string_equal(jstr(o[0], "path"), "local");
    assert_true(json_is_true(json_object_get(o[0], "allowed")));
    assert_int_equal(jint(o[0], "credit"), 9);
    assert_int_equal(jint(o[0], "reset"), 30);
    assert_string_equal(jstr(o[0], "rule"), "api");
    assert_int_equal(jint(o[0], "uid"), 1000);
    assert_int_equal(jint(o[0], "pid"), 55);
    assert_string_equal(jstr(json_object_get(o[0], "request"), "ip"), "10.0.0.1");
    assert_null(json_object_get(o[0], "error"));
    assert_true(json_is_null(json_object_get(o[1], "uid")));
    assert_true(json_is_null(json_object_get(o[1], "pid")));
    assert_true(json_is_false(json_object_get(o[1], "allowed")));
    assert_string_equal(jstr(o[2], "error"), "bad-request");
    assert_string_equal(jstr(o[2], "rule"), "");
    assert_string_equal(jstr(json_object_get(o[8], "request"), "user"), "9f86d081884c7d65");
    assert_string_equal(jstr(json_object_get(o[8], "request"), "password"), "");
    assert_string_equal(jstr(json_object_get(o[8], "redacted"), "user"), "hash");
    assert_string_equal(jstr(json_object_get(o[8], "redacted"), "password"), "drop");
    assert_int_equal(jint(o[9], "gap"), 7);
    assert_string_equal(jstr(o[14], "protocol"), "fast");
    free_lines(o, n);
}

static void test_dlog_read_filters(void **state)
{
    struct harness_ctl *r;
    json_t *o[64];
    size_t n;

    (void)state;
    write_good("logs");
    r = LOG(0, "--verdict", "denied", path_of("logs"));
    assert_int_equal(lines(r->out), 2 + 1);        /* api's and alice's preauth; the gap */
    r = LOG(0, "--verdict", "denied", "--json", path_of("logs"));
    n = json_lines(r->out, o, 64);
    assert_int_equal(n, 2 + 1);
    free_lines(o, n);
    r = LOG(0, "--verdict", "error", path_of("logs"));
    assert_int_equal(lines(r->out), 1 + 1);
    r = LOG(0, "--rule", "api", path_of("logs/1.dlog"), path_of("logs/2.dlog"));
    assert_int_equal(lines(r->out), 2 + 1 + 2);
    r = LOG(0, "-r", "00000000000000A7", path_of("logs"));
    assert_int_equal(lines(r->out), 2 + 1 + 2);
    r = LOG(0, "--rule", "login-user-source", "--actor", "bob,203.0.113.9", path_of("logs"));
    assert_int_equal(lines(r->out), 3 + 1);
    r = LOG(0, "--actor", "10.0.0.1", path_of("logs"));
    assert_int_equal(lines(r->out), 3 + 1);
    /* [since, until): 12:00:10 .. 12:00:30 are alice's failures and preauth. */
    r = LOG(0, "--since", "2026-11-28T12:00:10Z", "--until", "2026-11-28 12:00:30",
            path_of("logs"));
    assert_int_equal(lines(r->out), 4);
    r = LOG(0, "--since", "@1795867255", path_of("logs"));
    assert_int_equal(lines(r->out), 2);
    r = LOG(0, "--since", "2026-11-28T13:00:00+01:00", "--until", "2026-11-28T12:00:02.5Z",
            path_of("logs"));
    assert_int_equal(lines(r->out), 2);
    r = LOG(0, "--since", "-1d", path_of("logs"));      /* the log is in the future */
    assert_int_equal(lines(r->out), 15);
}

static void test_dlog_read_locks(void **state)
{
    struct harness_ctl *r;
    json_t *o[8];
    size_t n;

    (void)state;
    write_good("logs");
    r = LOG(0, "--locks", "--json", path_of("logs"));
    n = json_lines(r->out, o, 8);
    assert_int_equal(n, 2);
    assert_string_equal(jstr(o[0], "rule"), "login-user-source");
    assert_string_equal(jstr(o[0], "actor"), "alice,203.0.113.9");
    assert_string_equal(jstr(o[0], "start"), "2026-11-28T12:00:12.000Z");
    assert_string_equal(jstr(o[0], "end"), "2026-11-28T12:00:30.000Z");
    assert_int_equal(jint(o[0], "start_ms"), (long long)(T0 + S(12)));
    assert_int_equal(jint(o[0], "end_ms"), (long long)(T0 + S(30)));
    assert_int_equal(jint(o[0], "failures"), 3);
    assert_int_equal(jint(o[0], "refusals"), 1);
    assert_string_equal(jstr(o[0], "ended"), "unlocked");
    assert_int_equal(jint(o[0], "unlocked_by_uid"), 0);
    assert_int_equal(jint(o[0], "unlocked_by_pid"), 4400);
    assert_string_equal(jstr(o[1], "actor"), "bob,203.0.113.9");
    assert_string_equal(jstr(o[1], "ended"), "open");
    assert_int_equal(jint(o[1], "end_ms"), (long long)(T0 + S(110)));
    assert_true(json_is_null(json_object_get(o[1], "unlocked_by_uid")));
    free_lines(o, n);
    /* 1.dlog alone: the same two periods, as text. */
    r = LOG(0, "--locks", path_of("logs/1.dlog"));
    assert_int_equal(lines(r->out), 2);
    assert_non_null(strstr(r->out, "login-user-source alice,203.0.113.9 "
                               "2026-11-28T12:00:12.000Z to 2026-11-28T12:00:30.000Z (18s) "
                               "failures=3 refusals=1 unlocked by uid=0 pid=4400\n"));
    r = LOG(0, "--locks", "--actor", "bob,203.0.113.9", path_of("logs"));
    assert_int_equal(lines(r->out), 1);
    assert_non_null(strstr(r->out, "open, until 2026-11-28T12:01:50.000Z"));
    /* A period that overlaps --since is kept; one before it is not. */
    r = LOG(0, "--locks", "--since", "2026-11-28T12:00:31Z", path_of("logs"));
    assert_int_equal(lines(r->out), 1);
    r = LOG(0, "--locks", "--rule", "api", path_of("logs"));
    assert_int_equal(lines(r->out), 0);
}

static void test_dlog_read_config_dir(void **state)
{
    char conf[256];
    struct harness_ctl *r;
    FILE *f;

    (void)state;
    write_good("fromconf");
    snprintf(conf, sizeof(conf), "%s/divvy.conf", tmpdir);
    f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f, "decision_log = { enabled = true; directory = \"%s/fromconf\"; };\n"
               "rules = ( { default = true; credit_limit = 1; reset_seconds = 1; } );\n",
            tmpdir);
    assert_int_equal(fclose(f), 0);
    r = LOG(0, "-c", conf, "--verdict", "denied");
    assert_int_equal(lines(r->out), 2 + 1);
    /* A broken config says where. */
    f = fopen(conf, "w");
    assert_non_null(f);
    fputs("decision_log = { directory = 5; };\n"
          "rules = ( { default = true; credit_limit = 1; reset_seconds = 1; } );\n", f);
    assert_int_equal(fclose(f), 0);
    r = LOG(5, "-c", conf);
    assert_non_null(strstr(r->err, "divvy.conf:1: "));
    assert_non_null(strstr(r->err, "directory"));
    /* A config without decision_log: the default directory. */
    f = fopen(conf, "w");
    assert_non_null(f);
    fputs("rules = ( { default = true; credit_limit = 1; reset_seconds = 1; } );\n", f);
    assert_int_equal(fclose(f), 0);
    if (access("/var/lib/divvy/decisions", F_OK) != 0) {
        r = LOG(5, "-c", conf);
        assert_non_null(strstr(r->err, "/var/lib/divvy/decisions: No such file"));
    }
    r = LOG(2, "-c", conf, path_of("fromconf"));
}

/* A damaged block and a cut file: reported with file and offset, skipped, the
 * rest read; exit 1. */
static void test_dlog_read_damaged(void **state)
{
    char want[256];
    struct harness_ctl *r;
    struct gen g;

    (void)state;
    assert_int_equal(mkdir(path_of("bad"), 0755), 0);
    gen_start(&g);
    for (unsigned b = 0; b < 3; b++) {
        gen_block(&g, b);
        gen_rules(&g);
        gen_api(&g, S(b * 10 + 1), "10.0.0.1", true, DLOG_PROTO_LINE);
        gen_api(&g, S(b * 10 + 2), "10.0.0.2", true, DLOG_PROTO_LINE);
        gen_seal(&g);
    }
    gen_write(&g, "bad/whole.dlog", g.len);
    r = LOG(0, path_of("bad/whole.dlog"));
    assert_int_equal(lines(r->out), 6);

    /* One byte of the middle block's body flipped. */
    g.buf[g.block_at[1] + (g.block_at[2] - g.block_at[1]) / 2] ^= 0x40;
    gen_write(&g, "bad/flipped.dlog", g.len);
    g.buf[g.block_at[1] + (g.block_at[2] - g.block_at[1]) / 2] ^= 0x40;
    r = LOG(1, path_of("bad/flipped.dlog"));
    assert_int_equal(lines(r->out), 4);
    assert_non_null(strstr(r->out, "12:00:01.000Z"));
    assert_non_null(strstr(r->out, "12:00:22.000Z"));
    assert_null(strstr(r->out, "12:00:11.000Z"));
    snprintf(want, sizeof(want), "divvyctl: %s: offset %zu: ", path_of("bad/flipped.dlog"),
             g.block_at[1]);
    if (!strstr(r->err, want))
        fail_msg("stderr lacks \"%s\": %s", want, r->err);

    /* Cut inside the last block (a crash mid-write). */
    gen_write(&g, "bad/cut.dlog", g.block_at[2] + 7);
    r = LOG(1, "--json", path_of("bad/cut.dlog"));
    assert_int_equal(lines(r->out), 4);
    snprintf(want, sizeof(want), "divvyctl: %s: offset %zu: ", path_of("bad/cut.dlog"),
             g.block_at[2]);
    if (!strstr(r->err, want))
        fail_msg("stderr lacks \"%s\": %s", want, r->err);
    /* Only the header: nothing, and nothing wrong. */
    gen_write(&g, "bad/empty.dlog", g.block_at[0]);
    r = LOG(0, path_of("bad/empty.dlog"));
    assert_string_equal(r->out, "");
    gen_free(&g);

    /* The directory: the good files still read, in name order, exit 1. */
    r = LOG(1, path_of("bad"));
    assert_int_equal(lines(r->out), 6 + 4 + 4);
}

/* Files that are no log, paths that are not there, values that try to escape. */
static void test_dlog_read_hostile(void **state)
{
    struct dlog_decision d;
    struct harness_ctl *r;
    json_t *o[4];
    struct gen g;
    int fd;

    (void)state;
    assert_int_equal(mkdir(path_of("x"), 0755), 0);
    fd = open(path_of("x/notes.dlog"), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "hello, I am text\n", 17), 17);
    close(fd);
    r = LOG(1, path_of("x/notes.dlog"));
    assert_non_null(strstr(r->err, "notes.dlog: not a decision log"));
    r = LOG(1, path_of("x"));
    r = LOG(1, "/dev/null");
    assert_non_null(strstr(r->err, "/dev/null: not a regular file"));
    r = LOG(5, path_of("nowhere.dlog"));
    assert_non_null(strstr(r->err, "nowhere.dlog: No such file or directory"));
    assert_int_equal(mkdir(path_of("empty"), 0755), 0);
    r = LOG(1, path_of("empty"));
    assert_non_null(strstr(r->err, "empty: no decision log (*.dlog) in it"));

    /* A header, then garbage: no crash, reported. */
    gen_start(&g);
    for (size_t i = 0; i < 200000; i++)
        g.buf[g.len++] = (uint8_t)(harness_rand() & 0xff);
    gen_write(&g, "x/garbage.dlog", g.len);
    r = LOG(-1, path_of("x/garbage.dlog"));
    assert_true(r->status == 0 || r->status == 1);

    /* Values with an escape, a newline, a quote and bytes that are not UTF-8. */
    gen_free(&g);
    gen_start(&g);
    gen_block(&g, 0);
    memset(&d, 0, sizeof(d));
    d.unix_ms = T0;
    d.op = TABLE_PEEK;
    d.n = 1;
    d.flags = DLOG_F_ALLOWED;
    d.uid = d.pid = DLOG_UNKNOWN_ID;
    add_kv(&d, "a b", "x\x1b[2J\ny\"z\\", DLOG_KEEP);
    add_kv(&d, "u", "\xff\xfe", DLOG_KEEP);
    assert_int_equal(dlog_enc_decision(g.e, &d), 0);
    gen_seal(&g);
    gen_write(&g, "x/escape.dlog", g.len);
    gen_free(&g);
    r = LOG(0, path_of("x/escape.dlog"));
    assert_int_equal(lines(r->out), 1);
    assert_non_null(strstr(r->out, "| \"a b\"=\"x\\x1b[2J\\x0ay\\\"z\\\\\" u=\"\\xff\\xfe\"\n"));
    r = LOG(0, "--json", path_of("x/escape.dlog"));
    assert_int_equal(json_lines(r->out, o, 4), 1);
    assert_string_equal(jstr(json_object_get(o[0], "request"), "a b"), "x\x1b[2J\ny\"z\\");
    assert_string_equal(jstr(json_object_get(o[0], "request"), "u"), "\\xff\\xfe");
    json_decref(o[0]);
}

/* Fixed-seed LCG: the same mutations every run. */
static uint32_t mut_rand(uint32_t *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return *seed >> 8;
}

/* 60 damaged copies of a good log (bytes flipped, cut, runs of 0xff that
 * make huge varints and lengths, a slice copied elsewhere, a header byte
 * changed): every mode reads them all without a crash, prints only valid
 * JSON, and exits 0 or 1. */
static void test_dlog_read_mutated(void **state)
{
    static const char *const modes[][4] = {
        { "log", NULL }, { "log", "--json", NULL }, { "log", "--locks", "--json", NULL },
    };
    uint32_t seed = 20261128;
    struct harness_ctl *r;
    uint8_t *good, *buf;
    size_t len, hdr;
    char name[64];
    FILE *f;

    (void)state;
    write_good("src");
    f = fopen(path_of("src/1.dlog"), "r");
    assert_non_null(f);
    good = malloc(1u << 20);
    buf = malloc(1u << 20);
    assert_non_null(good);
    assert_non_null(buf);
    len = fread(good, 1, 1u << 20, f);
    fclose(f);
    hdr = dlog_file_header(buf, DLOG_HEADER_MAX, T0, "testhost");
    assert_true(len > hdr + 64);
    assert_int_equal(mkdir(path_of("mut"), 0755), 0);
    for (unsigned k = 0; k < 60; k++) {
        size_t n = len, at = hdr + mut_rand(&seed) % (len - hdr);

        memcpy(buf, good, len);
        switch (k % 5) {
        case 0:
            for (unsigned i = 0, m = 1 + mut_rand(&seed) % 8; i < m; i++)
                buf[hdr + mut_rand(&seed) % (len - hdr)] ^= (uint8_t)(1u << (mut_rand(&seed) % 8));
            break;
        case 1:
            n = at;
            break;
        case 2:
            memset(buf + at, 0xff, at + 16 <= len ? 16 : len - at);
            break;
        case 3: {
            size_t from = hdr + mut_rand(&seed) % (len - hdr), k2 = mut_rand(&seed) % 64;

            if (from + k2 > len)
                k2 = len - from;
            if (at + k2 > len)
                k2 = len - at;
            memmove(buf + at, buf + from, k2);
            break;
        }
        default:
            buf[mut_rand(&seed) % hdr] ^= 0x10;
            break;
        }
        snprintf(name, sizeof(name), "mut/m%02u.dlog", k);
        gen_write(&(struct gen){ .buf = buf }, name, n);
    }
    free(good);
    free(buf);
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        const char *args[5] = { modes[m][0], modes[m][1], modes[m][2], NULL, NULL };
        size_t i = 0;

        while (args[i])
            i++;
        args[i] = path_of("mut");
        r = log_run(-1, args);
        if (r->status != 0 && r->status != 1)
            fail_msg("divvyctl %s %s: exit %d\n%s", args[0], args[1] ? args[1] : "",
                     r->status, r->err);
        if (m > 0) {
            for (const char *p = r->out; *p; ) {
                const char *nl = strchr(p, '\n');
                json_error_t err;
                json_t *o;

                assert_non_null(nl);
                o = json_loadb(p, (size_t)(nl - p), 0, &err);
                if (!o)
                    fail_msg("not JSON: %.*s", (int)(nl - p), p);
                json_decref(o);
                p = nl + 1;
            }
        }
        /* What the damage spared is read: the blocks before it, the ones after
         * (141 lines of the 60 files; 15 in a whole one). */
        if (m < 2 && harness_count(r->out, "\n") < 100)
            fail_msg("only %zu lines read", harness_count(r->out, "\n"));
    }
}

static void test_dlog_read_usage(void **state)
{
    struct harness_ctl *r;

    (void)state;
    r = LOG(2, "--since", "yesterday");
    assert_non_null(strstr(r->err, "--since: 'yesterday' is not a time"));
    LOG(2, "--until", "2026-13-01");
    LOG(2, "--verdict", "maybe");
    LOG(2, "--locks", "--verdict", "denied");
    LOG(2, "--since", "2026-11-28T12:00:00Z", "--until", "2026-11-28T11:00:00Z");
    LOG(2, "--rule", "");
    LOG(2, "--frobnicate");
    r = LOG(0, "--help");
    assert_non_null(strstr(r->out, "Usage: divvyctl log"));
    r = harness_ctl_run(false, NULL, 0, (const char *const[]){ "help", "log", NULL });
    assert_non_null(strstr(r->out, "--locks"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dlog_read_text_and_json, read_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_read_filters, read_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_read_locks, read_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_read_config_dir, read_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_read_damaged, read_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_read_hostile, read_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_read_mutated, read_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_read_usage, read_setup, harness_teardown),
    };

    return cmocka_run_group_tests_name("dlog_read", tests, NULL, NULL);
}
