/* SPDX-License-Identifier: MIT */
/*
 * Integration (real divvyd, real redis-server, real gRPC client): the decision log as divvyd
 * writes it (daemon/dlog_writer.c, docs/operations.md "Decision log"), read back with the
 * format's own reader (server/dlog.h).  Decisions over the line protocol (Unix and TCP),
 * RESP, RLS and a Redis-backed rule are all there with the right fields; errors too; the
 * rules are described before the decisions under them, again after a reload; redaction
 * leaves no plaintext anywhere in the files; rotation keeps at most `files` files of about
 * file_size; kill -9 loses at most what was younger than flush_ms, and a cut-short block is
 * reported, not fatal; an unprivileged flood does not cost root's records.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "dlog.h"
#include "harness_grpc.h"
#include "harness_redis.h"
#include "hash.h"
#include "proto.h"
#include "resp_client.h"
#include "table.h"

/* ---- the log's directory --------------------------------------------------------------- */

static char top[64];            /* mkdtemp(): the log directory is top/log, its key top/log.key */
static char logdir[96];

static void logdir_new(void)
{
    snprintf(top, sizeof(top), "/tmp/divvy-dlog-XXXXXX");
    assert_non_null(mkdtemp(top));
    snprintf(logdir, sizeof(logdir), "%s/log", top);
}

static int dlog_teardown(void **state)
{
    if (top[0])
        harness_rm_tree(top);
    top[0] = '\0';
    redis_stop_all();
    return harness_teardown(state);
}

/* A decision_log group writing to logdir, with @extra settings, then @rest. */
static char *conf_with(const char *extra, const char *rest)
{
    char *s = NULL;

    assert_true(asprintf(&s, "decision_log = { enabled = true; directory = \"%s\"; %s };\n%s",
                         logdir, extra, rest) > 0);
    return s;
}

/* ---- reading it back ------------------------------------------------------------------- */

struct rec {
    struct dlog_decision d;     /* pairs: pointers into kvtext */
    char kvtext[1024];          /* "k=v k=v" */
    char tag[64];
    char redact[PROTO_KV_MAX + 1];      /* each pair's: 'k' keep, 'h' hash, 'd' drop */
    uint32_t block_worker;
};

struct logread {
    struct rec *rec;
    size_t n, cap;
    size_t rules_items;
    uint64_t first_rules_generation, last_rules_generation;
    struct { uint64_t id, generation; char id_str[80]; } rule[64];
    size_t n_rule;
    uint64_t gaps, corrupt;
    size_t files;
    /* A decision under a generation no RULES item of its file described before it. */
    size_t undescribed;
};

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .dlog files of logdir, sorted (oldest first): how many, into @names. */
static size_t list_files(char names[][128], size_t max)
{
    char *sorted[256];
    size_t n = 0;
    struct dirent *de;
    DIR *dir = opendir(logdir);

    assert_non_null(dir);
    while ((de = readdir(dir)) != NULL && n < 256)
        if (strstr(de->d_name, DLOG_FILE_SUFFIX))
            sorted[n++] = strdup(de->d_name);
    closedir(dir);
    qsort(sorted, n, sizeof(*sorted), name_cmp);
    for (size_t i = 0; i < n; i++) {
        if (i < max)
            snprintf(names[i], 128, "%s/%s", logdir, sorted[i]);
        free(sorted[i]);
    }
    return n < max ? n : max;
}

static void add_rec(struct logread *lr, const struct dlog_item *it)
{
    struct rec *r;
    size_t off = 0;

    if (lr->n == lr->cap) {
        lr->cap = lr->cap ? 2 * lr->cap : 1024;
        lr->rec = realloc(lr->rec, lr->cap * sizeof(*lr->rec));
        assert_non_null(lr->rec);
    }
    r = &lr->rec[lr->n++];
    r->d = it->u.d;
    r->block_worker = it->block_worker;
    r->tag[0] = '\0';
    r->kvtext[0] = '\0';
    r->redact[0] = '\0';
    for (unsigned i = 0; i < it->u.d.n_kv; i++) {
        const struct dlog_kv *kv = &it->u.d.kv[i];

        off += (size_t)snprintf(r->kvtext + off, sizeof(r->kvtext) - off, "%s%.*s=%.*s",
                                i ? " " : "", (int)kv->key_len, kv->key, (int)kv->value_len,
                                kv->value);
        r->redact[i] = "khd"[kv->redact % 3];
        r->redact[i + 1] = '\0';
        if (kv->key_len == 3 && memcmp(kv->key, "tag", 3) == 0)
            snprintf(r->tag, sizeof(r->tag), "%.*s", (int)kv->value_len, kv->value);
        if (off >= sizeof(r->kvtext))
            off = sizeof(r->kvtext) - 1;
    }
    r->d.n_kv = 0;              /* its pointers die with the reader's block */
}

static void read_log(struct logread *lr)
{
    char names[64][128];
    size_t n = list_files(names, 64);
    uint64_t described[64];
    size_t n_described = 0;

    memset(lr, 0, sizeof(*lr));
    lr->files = n;
    for (size_t f = 0; f < n; f++) {
        struct dlog_reader *rd = NULL;
        struct dlog_item it;
        int r;

        /* Each file describes the rules itself: the older ones may be gone. */
        n_described = 0;
        CHECK(dlog_reader_open(names[f], &rd));
        while ((r = dlog_reader_next(rd, &it)) > 0) {
            if (it.type == DLOG_DECISION) {
                bool known = false;

                for (size_t i = 0; i < n_described; i++)
                    known |= described[i] == it.u.d.generation;
                lr->undescribed += !known;
                add_rec(lr, &it);
            } else if (it.type == DLOG_RULES) {
                if (!lr->rules_items++)
                    lr->first_rules_generation = it.u.rules.generation;
                lr->last_rules_generation = it.u.rules.generation;
                if (n_described < 64)
                    described[n_described++] = it.u.rules.generation;
                for (unsigned i = 0; i < it.u.rules.n && lr->n_rule < 64; i++) {
                    lr->rule[lr->n_rule].id = it.u.rules.rule[i].id;
                    lr->rule[lr->n_rule].generation = it.u.rules.generation;
                    snprintf(lr->rule[lr->n_rule].id_str, sizeof(lr->rule[0].id_str), "%.*s",
                             (int)it.u.rules.rule[i].id_len, it.u.rules.rule[i].id_str);
                    lr->n_rule++;
                }
            } else if (it.type == DLOG_GAP) {
                lr->gaps += it.u.gap.dropped;
            } else if (it.type == DLOG_CORRUPT) {
                lr->corrupt++;
            }
        }
        assert_int_equal(r, 0);
        dlog_reader_close(rd);
    }
}

static void logread_free(struct logread *lr)
{
    free(lr->rec);
    memset(lr, 0, sizeof(*lr));
}

static const struct rec *find(const struct logread *lr, const char *tag, unsigned nth)
{
    for (size_t i = 0; i < lr->n; i++)
        if (strcmp(lr->rec[i].tag, tag) == 0 && nth-- == 0)
            return &lr->rec[i];
    fail_msg("no decision with tag=%s (#%u) in the log (%zu decisions)", tag, nth, lr->n);
    return NULL;
}

static uint64_t rule_id(const struct logread *lr, const char *id_str)
{
    for (size_t i = 0; i < lr->n_rule; i++)
        if (strcmp(lr->rule[i].id_str, id_str) == 0)
            return lr->rule[i].id;
    fail_msg("rule %s is not described in the log", id_str);
    return 0;
}

/* ---- talking to divvyd ----------------------------------------------------------------- */

static void cmd(struct harness_conn *c, const char *req, const char *want_prefix)
{
    char reply[HARNESS_LINE];

    CHECK(harness_cmd(c, req, reply, sizeof(reply)));
    if (strncmp(reply, want_prefix, strlen(want_prefix)) != 0)
        fail_msg("%s: got \"%s\", want \"%s...\"", req, reply, want_prefix);
}

static void stop_ok(struct harness_daemon *d)
{
    int status = -1;

    CHECK(harness_stop(d, &status));
    if (status != 0) {
        harness_dump_log(d);
        fail_msg("divvyd exited with status %d", status);
    }
}

#define RULES                                                                                \
    "{ match = { path = \"/s\"; }; label = \"strict1\"; store = \"strict\";\n"              \
    "  credit_limit = 100; reset_seconds = 60; },\n"                                         \
    "{ match = { path = \"/e\"; }; label = \"lease1\"; store = \"lease\";\n"                \
    "  credit_limit = 100; reset_seconds = 60; },\n"                                         \
    "{ match = { path = \"/l\"; tag = \"*\"; }; label = \"local1\"; actor = \"tag\";\n"      \
    "  credit_limit = 1; reset_seconds = 60; },\n"                                           \
    "{ default = true; label = \"dflt\"; credit_limit = 100000; reset_seconds = 60; }\n"

#define LOCAL_RULES                                                                          \
    "rules = (\n"                                                                            \
    "{ match = { path = \"/l\"; tag = \"*\"; }; label = \"local1\"; actor = \"tag\";\n"      \
    "  credit_limit = 1; reset_seconds = 60; },\n"                                           \
    "{ default = true; label = \"dflt\"; credit_limit = 100000000; reset_seconds = 60; }\n" \
    ");\n"

/* ---- every front-end, every verb, a Redis rule ------------------------------------------- */

static void test_dlog_write_line_resp_redis(void **state)
{
    struct harness_opts o = { .workers = 1, .resp = true };
    struct harness_daemon *d = NULL;
    struct harness_conn *u = NULL, *t = NULL, *rc = NULL;
    struct redis_srv *rs = NULL;
    struct logread lr;
    const struct rec *r;
    char *rconf, *conf, got[256] = "", buf[512];
    const char *argv[] = { "DIVVY.HIT", "path", "/x", "tag", "resp1", NULL };
    uint64_t t0, t1;
    size_t len;

    (void)state;
    logdir_new();
    CHECK(redis_start(&rs));
    rconf = redis_config(rs, "local", "closed", 5000, NULL, RULES);
    assert_non_null(rconf);
    conf = conf_with("flush_ms = 50;", rconf);
    o.config_text = conf;
    t0 = (uint64_t)time(NULL) * 1000 - 1000;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &u));
    CHECK(harness_connect(d, HARNESS_TCP, &t));
    cmd(u, "HIT path=/l tag=u1\n", "OK true 0");
    cmd(u, "HIT path=/l tag=u1\n", "OK false 0");
    cmd(t, "HIT path=/l tag=t1\n", "OK true 0");
    cmd(t, "TAKE 2 path=/x tag=take1\n", "OK true");
    cmd(t, "PEEK path=/x tag=peek1\n", "OK true");
    cmd(t, "DEBIT 3 path=/x tag=debit1\n", "OK true");
    /* An error the engine answers (above the rule's max_debit, unprivileged). */
    cmd(t, "DEBIT 200000 path=/x tag=r1\n", "ERR bad-request");
    cmd(u, "RESET path=/l tag=u1\n", "OK");
    cmd(u, "HIT path=/s tag=s1\n", "OK true");
    cmd(u, "HIT path=/e tag=e1\n", "OK true");
    CHECK(harness_connect_unix(d->resp_sock, &rc));
    len = resp_cmd(buf, sizeof(buf), argv);
    CHECK(harness_send(rc, buf, len));
    CHECK(resp_read(rc, got, sizeof(got)));
    harness_close(u);
    harness_close(t);
    harness_close(rc);
    stop_ok(d);
    t1 = (uint64_t)time(NULL) * 1000 + 1000;

    read_log(&lr);
    if (lr.n != 11) {
        for (size_t i = 0; i < lr.n; i++)
            fprintf(stderr, "decision %zu: %s\n", i, lr.rec[i].kvtext);
        fail_msg("%zu decisions in the log, want 11", lr.n);
    }
    assert_int_equal(lr.undescribed, 0);
    assert_int_equal(lr.corrupt, 0);
    assert_int_equal(lr.gaps, 0);

    r = find(&lr, "u1", 0);
    assert_int_equal(r->d.protocol, DLOG_PROTO_LINE);
    assert_int_equal(r->d.op, TABLE_TAKE);
    assert_int_equal(r->d.n, 1);
    assert_int_equal(r->d.flags, DLOG_F_ALLOWED | DLOG_F_PRIVILEGED);
    assert_int_equal(r->d.uid, getuid());
    assert_int_equal(r->d.pid, DLOG_UNKNOWN_ID);
    assert_int_equal(r->d.path, DLOG_PATH_LOCAL);
    assert_int_equal(r->d.decider_id, rule_id(&lr, "local1"));
    assert_int_equal(r->d.credit, 0);
    assert_int_equal(r->d.n_out, 1);
    assert_int_equal(r->d.out[0].rule_id, rule_id(&lr, "local1"));
    assert_int_equal(r->d.out[0].flags, DLOG_O_ALLOWED | DLOG_O_COUNTED);
    assert_string_equal(r->kvtext, "path=/l tag=u1");
    assert_true(r->d.unix_ms >= t0 && r->d.unix_ms <= t1);
    r = find(&lr, "u1", 1);
    assert_int_equal(r->d.flags, DLOG_F_PRIVILEGED);
    r = find(&lr, "t1", 0);
    assert_int_equal(r->d.flags, DLOG_F_ALLOWED);
    assert_int_equal(r->d.uid, DLOG_UNKNOWN_ID);
    r = find(&lr, "take1", 0);
    assert_int_equal(r->d.op, TABLE_TAKE);
    assert_int_equal(r->d.n, 2);
    assert_int_equal(r->d.decider_id, rule_id(&lr, "dflt"));
    assert_int_equal(r->d.credit, 100000 - 2);
    r = find(&lr, "peek1", 0);
    assert_int_equal(r->d.op, TABLE_PEEK);
    r = find(&lr, "debit1", 0);
    assert_int_equal(r->d.op, TABLE_DEBIT);
    assert_int_equal(r->d.n, 3);
    r = find(&lr, "r1", 0);
    assert_int_equal(r->d.op, TABLE_DEBIT);
    assert_int_equal(r->d.n, 200000);
    assert_int_equal(r->d.flags, DLOG_F_ERROR);
    assert_int_equal(r->d.err, PROTO_E_BAD_REQUEST);
    assert_int_equal(r->d.path, DLOG_PATH_NONE);
    r = find(&lr, "u1", 2);
    assert_int_equal(r->d.op, TABLE_RESET);
    assert_int_equal(r->d.n_reset, 1);
    r = find(&lr, "s1", 0);
    assert_int_equal(r->d.path, DLOG_PATH_STRICT);
    assert_int_equal(r->d.decider_id, rule_id(&lr, "strict1"));
    assert_true(r->d.flags & DLOG_F_ALLOWED);
    r = find(&lr, "e1", 0);
    assert_int_equal(r->d.path, DLOG_PATH_LEASE);
    assert_int_equal(r->d.decider_id, rule_id(&lr, "lease1"));
    r = find(&lr, "resp1", 0);
    assert_int_equal(r->d.protocol, DLOG_PROTO_RESP);
    assert_int_equal(r->d.decider_id, rule_id(&lr, "dflt"));
    /* In the order each connection sent them (one worker). */
    assert_true(find(&lr, "u1", 0) < find(&lr, "u1", 1));
    assert_true(find(&lr, "take1", 0) < find(&lr, "debit1", 0));
    logread_free(&lr);
    harness_free(d);
    redis_stop(rs);
    free(rconf);
    free(conf);
}

static void test_dlog_write_rls(void **state)
{
    struct harness_rls *rls;
    struct logread lr;
    const struct rec *r;
    json_t *res;
    char *conf;

    (void)state;
    harness_grpc_need();
    logdir_new();
    conf = conf_with("flush_ms = 50;", LOCAL_RULES);
    rls = harness_rls_start(conf);
    res = harness_grpc_run(rls->tcp, "{\"calls\":[{\"domain\":\"edge\",\"descriptors\":["
                                     "{\"entries\":[{\"key\":\"path\",\"value\":\"/x\"},"
                                     "{\"key\":\"tag\",\"value\":\"rls1\"}]}]}]}");
    harness_grpc_resp(res, 0);
    json_decref(res);
    harness_rls_stop(rls);
    read_log(&lr);
    r = find(&lr, "rls1", 0);
    assert_int_equal(r->d.protocol, DLOG_PROTO_RLS);
    assert_int_equal(r->d.op, TABLE_TAKE);
    assert_int_equal(r->d.decider_id, rule_id(&lr, "dflt"));
    assert_true(r->d.flags & DLOG_F_ALLOWED);
    logread_free(&lr);
    free(conf);
}

/* ---- rules: at start, at every reload, before the decisions under them ------------------ */

static void test_dlog_write_rules_after_reload(void **state)
{
    struct harness_opts o = { .workers = 1 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;
    struct logread lr;
    char *conf, *conf2;

    (void)state;
    logdir_new();
    conf = conf_with("flush_ms = 50;", LOCAL_RULES);
    conf2 = conf_with("flush_ms = 70;",
                      "rules = ( { match = { path = \"/n\"; }; label = \"new1\";\n"
                      "  credit_limit = 5; reset_seconds = 60; },\n"
                      "{ default = true; label = \"dflt\"; credit_limit = 9; reset_seconds = 60; }"
                      " );\n");
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    cmd(c, "HIT path=/x tag=before\n", "OK true");
    CHECK(harness_write_config(d, conf2));
    cmd(c, "RELOAD\n", "OK");
    cmd(c, "HIT path=/n tag=after\n", "OK true 4");
    harness_close(c);
    stop_ok(d);
    /* decision_log is read at start: the reload says the change waits for a restart. */
    assert_int_equal(harness_log_contains(d, "decision_log.flush_ms"), 1);
    read_log(&lr);
    assert_int_equal(lr.undescribed, 0);
    assert_true(lr.rules_items >= 2);
    assert_true(lr.last_rules_generation > lr.first_rules_generation);
    assert_int_equal(find(&lr, "after", 0)->d.generation, lr.last_rules_generation);
    assert_int_equal(find(&lr, "before", 0)->d.generation, lr.first_rules_generation);
    assert_int_equal(find(&lr, "after", 0)->d.decider_id, rule_id(&lr, "new1"));
    logread_free(&lr);
    harness_free(d);
    free(conf);
    free(conf2);
}

/* ---- redaction ------------------------------------------------------------------------- */

/* Whether @needle occurs in any byte of any file under logdir. */
static bool in_files(const char *needle)
{
    char names[64][128];
    size_t n = list_files(names, 64);
    bool found = false;

    for (size_t i = 0; i < n && !found; i++) {
        FILE *f = fopen(names[i], "rb");
        char *data;
        long size;

        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fseek(f, 0, SEEK_SET);
        data = malloc((size_t)size + 1);
        assert_non_null(data);
        assert_int_equal(fread(data, 1, (size_t)size, f), (size_t)size);
        fclose(f);
        found = memmem(data, (size_t)size, needle, strlen(needle)) != NULL;
        free(data);
    }
    return found;
}

static void test_dlog_write_redaction(void **state)
{
    struct harness_opts o = { .workers = 1 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;
    uint8_t key[HASH_KEY_LEN];
    char keypath[128], keytext[40], want[17];
    struct logread lr;
    struct stat st;
    const struct rec *r;
    char *conf;
    FILE *f;

    (void)state;
    logdir_new();
    conf = conf_with("redact = { user = \"hash\"; password = \"drop\"; };", LOCAL_RULES);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    cmd(c, "HIT path=/x tag=a user=alice-plaintext password=hunter2-plaintext\n", "OK true");
    cmd(c, "HIT path=/x tag=b user=alice-plaintext password=hunter2-plaintext\n", "OK true");
    cmd(c, "HIT path=/x tag=c user=bob-plaintext\n", "OK true");
    harness_close(c);
    stop_ok(d);

    assert_false(in_files("alice-plaintext"));
    assert_false(in_files("hunter2-plaintext"));
    assert_false(in_files("bob-plaintext"));
    assert_true(in_files("/x"));        /* kept values are there: the search works */
    /* The key: beside the log, not in it, only divvyd's user may read it. */
    snprintf(keypath, sizeof(keypath), "%s.key", logdir);
    assert_int_equal(lstat(keypath, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(lstat(logdir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0750);
    f = fopen(keypath, "r");
    assert_non_null(f);
    assert_non_null(fgets(keytext, sizeof(keytext), f));
    fclose(f);
    for (size_t i = 0; i < HASH_KEY_LEN; i++) {
        unsigned v;

        assert_int_equal(sscanf(keytext + 2 * i, "%2x", &v), 1);
        key[i] = (uint8_t)v;
    }
    snprintf(want, sizeof(want), "%016llx",
             (unsigned long long)hash_siphash(key, "alice-plaintext", 15));

    read_log(&lr);
    /* Pairs sorted by key, as the engine had them; the hash is SipHash with the key file's
     * key, the same for the same value. */
    r = find(&lr, "a", 0);
    snprintf(keytext, sizeof(keytext), "%s", want);
    snprintf(keypath, sizeof(keypath), "password= path=/x tag=a user=%s", want);
    assert_string_equal(r->kvtext, keypath);
    assert_string_equal(r->redact, "dkkh");
    r = find(&lr, "b", 0);
    snprintf(keypath, sizeof(keypath), "password= path=/x tag=b user=%s", want);
    assert_string_equal(r->kvtext, keypath);
    r = find(&lr, "c", 0);
    assert_string_equal(r->redact, "kkh");
    assert_null(strstr(r->kvtext, want));
    assert_int_equal(strlen(strstr(r->kvtext, "user=") + 5), 16);
    logread_free(&lr);
    harness_free(d);
    free(conf);
}

/* ---- rotation ---------------------------------------------------------------------------- */

/* Sends HITs tag=@first .. @first + @n - 1 (with a unique pad of @pad bytes) on @c in
 * pipelined batches of @batch, 1 ms apart (a steady load the drain keeps up with: a load
 * past what it writes drops records by design, counted); returns when all are answered.
 * @each, when not NULL, runs after each batch with the last tag answered. */
static void hits(struct harness_conn *c, unsigned first, unsigned n, unsigned batch, size_t pad,
                 void (*each)(unsigned last, void *arg), void *arg)
{
    char *buf = malloc((size_t)batch * (pad + 64)), line[HARNESS_LINE];
    char padv[1024];

    assert_non_null(buf);
    assert_true(pad < sizeof(padv));
    for (unsigned i = 0; i < n; i += batch) {
        unsigned k = n - i < batch ? n - i : batch;
        size_t off = 0;

        for (unsigned j = 0; j < k; j++) {
            unsigned tag = first + i + j;

            for (size_t p = 0; p < pad; p++)
                padv[p] = (char)('a' + (tag * 7 + p * 13) % 26);
            off += (size_t)sprintf(buf + off, "HIT path=/x tag=%u pad=%.*s\n", tag, (int)pad,
                                   padv);
        }
        CHECK(harness_send(c, buf, off));
        for (unsigned j = 0; j < k; j++) {
            CHECK(harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS));
            if (strncmp(line, "OK true", 7) != 0)
                fail_msg("HIT %u: %s", first + i + j, line);
        }
        if (each)
            each(first + i + k - 1, arg);
        harness_pause_ms(1);
    }
    free(buf);
}

#define ROT_SIZE 65536
#define ROT_FILES 3

static void check_rotation(unsigned last, void *arg)
{
    char names[64][128];
    size_t n = list_files(names, 64);
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

static void test_dlog_write_rotation(void **state)
{
    struct harness_opts o = { .workers = 1 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;
    struct logread lr;
    unsigned n = 6000;
    char *conf;
    char *seen;

    (void)state;
    logdir_new();
    conf = conf_with("file_size = 65536; files = 3; flush_ms = 10;", LOCAL_RULES);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    hits(c, 0, n, 20, 120, check_rotation, NULL);
    harness_close(c);
    stop_ok(d);
    check_rotation(0, NULL);

    read_log(&lr);
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
    logread_free(&lr);
    harness_free(d);
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

static void test_dlog_write_kill9(void **state)
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
    logdir_new();
    conf = conf_with("flush_ms = 100;", LOCAL_RULES);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    /* Steady logging for 2 s, then kill -9 with requests still coming. */
    start = harness_now_ms();
    while (harness_now_ms() - start < 2000) {
        hits(c, sent, 200, 20, 20, note_answer, &a);
        sent += 200;
    }
    CHECK(harness_send(c, "HIT path=/x tag=late\n", 21));
    d->expect_exit = true;
    CHECK(harness_kill(d, SIGKILL));
    killed = harness_now_ms();
    harness_stop(d, &status);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    harness_close(c);

    read_log(&lr);
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
    logread_free(&lr);

    /* A block cut short (a torn write) is reported where it is, never fatal; what came
     * before it is read as before. */
    assert_int_equal(list_files(names, 64), 1);
    assert_int_equal(stat(names[0], &st), 0);
    assert_int_equal(truncate(names[0], st.st_size - 7), 0);
    {
        struct logread cut;

        read_log(&cut);
        assert_int_equal(cut.corrupt, 1);
        assert_true(cut.n + 200 >= must);
        logread_free(&cut);
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

static void test_dlog_write_flood_spares_root(void **state)
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
    logdir_new();
    conf = conf_with("flush_ms = 1000;", LOCAL_RULES);
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
        cmd(root, req, "OK true");
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
    stop_ok(d);

    read_log(&lr);
    for (unsigned i = 0; i < n_root; i++) {
        char tag[32];

        snprintf(tag, sizeof(tag), "root%u", i);
        find(&lr, tag, 0);
    }
    fprintf(stderr, "flood: %u root decisions all logged; %u unprivileged sent, %zu logged, "
            "%llu dropped\n", n_root, f[0].sent + f[1].sent + f[2].sent, lr.n - n_root,
            (unsigned long long)lr.gaps);
    logread_free(&lr);
    harness_free(d);
    free(conf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dlog_write_line_resp_redis, harness_setup,
                                        dlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_write_rls, harness_setup, dlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_write_rules_after_reload, harness_setup,
                                        dlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_write_redaction, harness_setup, dlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_write_rotation, harness_setup, dlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_write_kill9, harness_setup, dlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_write_flood_spares_root, harness_setup,
                                        dlog_teardown),
    };

    return cmocka_run_group_tests_name("dlog_write", tests, harness_grpc_setup,
                                       harness_grpc_teardown);
}
