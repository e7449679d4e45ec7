/* SPDX-License-Identifier: MIT */
/*
 * Integration (real divvyd, real redis-server, real gRPC client): the decision log as divvyd
 * writes it (docs/operations.md "Decision log"), read back with the format's own reader
 * (server/dlog.h).  Decisions over the line protocol (Unix and TCP), RESP, RLS and a
 * Redis-backed rule are all there with the right fields; errors too; the rules are
 * described before the decisions under them, again after a reload; redaction leaves no
 * plaintext anywhere in the files; a directory or key divvyd must not trust is refused.
 * Rotation, a full disk, kill -9 and floods: test_dlog_crash.c.
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

#define RULES                                                                                \
    "{ match = { path = \"/s\"; }; label = \"strict1\"; store = \"strict\";\n"              \
    "  credit_limit = 100; reset_seconds = 60; },\n"                                         \
    "{ match = { path = \"/e\"; }; label = \"lease1\"; store = \"lease\";\n"                \
    "  credit_limit = 100; reset_seconds = 60; },\n"                                         \
    "{ match = { path = \"/l\"; tag = \"*\"; }; label = \"local1\"; actor = \"tag\";\n"      \
    "  credit_limit = 1; reset_seconds = 60; },\n"                                           \
    "{ default = true; label = \"dflt\"; credit_limit = 100000; reset_seconds = 60; }\n"


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
    hdlog_logdir_new();
    CHECK(redis_start(&rs));
    rconf = redis_config(rs, "local", "closed", 5000, NULL, RULES);
    assert_non_null(rconf);
    conf = hdlog_conf("flush_ms = 50;", rconf);
    o.config_text = conf;
    t0 = (uint64_t)time(NULL) * 1000 - 1000;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &u));
    CHECK(harness_connect(d, HARNESS_TCP, &t));
    hdlog_cmd(u, "HIT path=/l tag=u1\n", "OK true 0");
    hdlog_cmd(u, "HIT path=/l tag=u1\n", "OK false 0");
    hdlog_cmd(t, "HIT path=/l tag=t1\n", "OK true 0");
    hdlog_cmd(t, "TAKE 2 path=/x tag=take1\n", "OK true");
    hdlog_cmd(t, "PEEK path=/x tag=peek1\n", "OK true");
    hdlog_cmd(t, "DEBIT 3 path=/x tag=debit1\n", "OK true");
    /* An error the engine answers (above the rule's max_debit, unprivileged). */
    hdlog_cmd(t, "DEBIT 200000 path=/x tag=r1\n", "ERR bad-request");
    hdlog_cmd(u, "RESET path=/l tag=u1\n", "OK");
    hdlog_cmd(u, "HIT path=/s tag=s1\n", "OK true");
    hdlog_cmd(u, "HIT path=/e tag=e1\n", "OK true");
    CHECK(harness_connect_unix(d->resp_sock, &rc));
    len = resp_cmd(buf, sizeof(buf), argv);
    CHECK(harness_send(rc, buf, len));
    CHECK(resp_read(rc, got, sizeof(got)));
    harness_close(u);
    harness_close(t);
    harness_close(rc);
    hdlog_stop_ok(d);
    t1 = (uint64_t)time(NULL) * 1000 + 1000;

    hdlog_read(&lr);
    if (lr.n != 11) {
        for (size_t i = 0; i < lr.n; i++)
            fprintf(stderr, "decision %zu: %s\n", i, lr.rec[i].kvtext);
        fail_msg("%zu decisions in the log, want 11", lr.n);
    }
    assert_int_equal(lr.undescribed, 0);
    assert_int_equal(lr.corrupt, 0);
    assert_int_equal(lr.gaps, 0);

    r = hdlog_find(&lr, "u1", 0);
    assert_int_equal(r->d.protocol, DLOG_PROTO_LINE);
    assert_int_equal(r->d.op, TABLE_TAKE);
    assert_int_equal(r->d.n, 1);
    assert_int_equal(r->d.flags, DLOG_F_ALLOWED | DLOG_F_PRIVILEGED);
    assert_int_equal(r->d.uid, getuid());
    assert_int_equal(r->d.pid, getpid());       /* who connected, as the kernel says */
    assert_int_equal(r->d.path, DLOG_PATH_LOCAL);
    assert_int_equal(r->d.decider_id, hdlog_rule_id(&lr, "local1"));
    assert_int_equal(r->d.credit, 0);
    assert_int_equal(r->d.n_out, 1);
    assert_int_equal(r->d.out[0].rule_id, hdlog_rule_id(&lr, "local1"));
    assert_int_equal(r->d.out[0].flags, DLOG_O_ALLOWED | DLOG_O_COUNTED);
    assert_string_equal(r->kvtext, "path=/l tag=u1");
    assert_true(r->d.unix_ms >= t0 && r->d.unix_ms <= t1);
    r = hdlog_find(&lr, "u1", 1);
    assert_int_equal(r->d.flags, DLOG_F_PRIVILEGED);
    r = hdlog_find(&lr, "t1", 0);
    assert_int_equal(r->d.flags, DLOG_F_ALLOWED);
    assert_int_equal(r->d.uid, DLOG_UNKNOWN_ID);
    assert_int_equal(r->d.pid, DLOG_UNKNOWN_ID);
    r = hdlog_find(&lr, "take1", 0);
    assert_int_equal(r->d.op, TABLE_TAKE);
    assert_int_equal(r->d.n, 2);
    assert_int_equal(r->d.decider_id, hdlog_rule_id(&lr, "dflt"));
    assert_int_equal(r->d.credit, 100000 - 2);
    r = hdlog_find(&lr, "peek1", 0);
    assert_int_equal(r->d.op, TABLE_PEEK);
    r = hdlog_find(&lr, "debit1", 0);
    assert_int_equal(r->d.op, TABLE_DEBIT);
    assert_int_equal(r->d.n, 3);
    r = hdlog_find(&lr, "r1", 0);
    assert_int_equal(r->d.op, TABLE_DEBIT);
    assert_int_equal(r->d.n, 200000);
    assert_int_equal(r->d.flags, DLOG_F_ERROR);
    assert_int_equal(r->d.err, PROTO_E_BAD_REQUEST);
    assert_int_equal(r->d.path, DLOG_PATH_NONE);
    r = hdlog_find(&lr, "u1", 2);
    assert_int_equal(r->d.op, TABLE_RESET);
    assert_int_equal(r->d.n_reset, 1);
    r = hdlog_find(&lr, "s1", 0);
    assert_int_equal(r->d.path, DLOG_PATH_STRICT);
    assert_int_equal(r->d.decider_id, hdlog_rule_id(&lr, "strict1"));
    assert_true(r->d.flags & DLOG_F_ALLOWED);
    r = hdlog_find(&lr, "e1", 0);
    assert_int_equal(r->d.path, DLOG_PATH_LEASE);
    assert_int_equal(r->d.decider_id, hdlog_rule_id(&lr, "lease1"));
    r = hdlog_find(&lr, "resp1", 0);
    assert_int_equal(r->d.protocol, DLOG_PROTO_RESP);
    assert_int_equal(r->d.pid, getpid());
    assert_int_equal(r->d.decider_id, hdlog_rule_id(&lr, "dflt"));
    /* In the order each connection sent them (one worker). */
    assert_true(hdlog_find(&lr, "u1", 0) < hdlog_find(&lr, "u1", 1));
    assert_true(hdlog_find(&lr, "take1", 0) < hdlog_find(&lr, "debit1", 0));
    hdlog_free(&lr);
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
    hdlog_logdir_new();
    conf = hdlog_conf("flush_ms = 50;", LOCAL_RULES);
    rls = harness_rls_start(conf);
    res = harness_grpc_run(rls->tcp, "{\"calls\":[{\"domain\":\"edge\",\"descriptors\":["
                                     "{\"entries\":[{\"key\":\"path\",\"value\":\"/x\"},"
                                     "{\"key\":\"tag\",\"value\":\"rls1\"}]}]}]}");
    harness_grpc_resp(res, 0);
    json_decref(res);
    harness_rls_stop(rls);
    hdlog_read(&lr);
    r = hdlog_find(&lr, "rls1", 0);
    assert_int_equal(r->d.protocol, DLOG_PROTO_RLS);
    assert_int_equal(r->d.op, TABLE_TAKE);
    assert_int_equal(r->d.decider_id, hdlog_rule_id(&lr, "dflt"));
    assert_true(r->d.flags & DLOG_F_ALLOWED);
    hdlog_free(&lr);
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
    hdlog_logdir_new();
    conf = hdlog_conf("flush_ms = 50;", LOCAL_RULES);
    conf2 = hdlog_conf("flush_ms = 70;",
                      "rules = ( { match = { path = \"/n\"; }; label = \"new1\";\n"
                      "  credit_limit = 5; reset_seconds = 60; },\n"
                      "{ default = true; label = \"dflt\"; credit_limit = 9; reset_seconds = 60; }"
                      " );\n");
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    hdlog_cmd(c, "HIT path=/x tag=before\n", "OK true");
    CHECK(harness_write_config(d, conf2));
    hdlog_cmd(c, "RELOAD\n", "OK");
    hdlog_cmd(c, "HIT path=/n tag=after\n", "OK true 4");
    harness_close(c);
    hdlog_stop_ok(d);
    /* decision_log is read at start: the reload says the change waits for a restart. */
    assert_int_equal(harness_log_contains(d, "decision_log.flush_ms"), 1);
    hdlog_read(&lr);
    assert_int_equal(lr.undescribed, 0);
    assert_true(lr.rules_items >= 2);
    assert_true(lr.last_rules_generation > lr.first_rules_generation);
    assert_int_equal(hdlog_find(&lr, "after", 0)->d.generation, lr.last_rules_generation);
    assert_int_equal(hdlog_find(&lr, "before", 0)->d.generation, lr.first_rules_generation);
    assert_int_equal(hdlog_find(&lr, "after", 0)->d.decider_id, hdlog_rule_id(&lr, "new1"));
    hdlog_free(&lr);
    harness_free(d);
    free(conf);
    free(conf2);
}

/* ---- redaction ------------------------------------------------------------------------- */

/* Whether @needle occurs in any byte of any file under logdir. */
static bool in_files(const char *needle)
{
    char names[64][128];
    size_t n = hdlog_list_files(names, 64);
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
    hdlog_logdir_new();
    conf = hdlog_conf("redact = { user = \"hash\"; password = \"drop\"; };", LOCAL_RULES);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    hdlog_cmd(c, "HIT path=/x tag=a user=alice-plaintext password=hunter2-plaintext\n", "OK true");
    hdlog_cmd(c, "HIT path=/x tag=b user=alice-plaintext password=hunter2-plaintext\n", "OK true");
    hdlog_cmd(c, "HIT path=/x tag=c user=bob-plaintext\n", "OK true");
    harness_close(c);
    hdlog_stop_ok(d);

    assert_false(in_files("alice-plaintext"));
    assert_false(in_files("hunter2-plaintext"));
    assert_false(in_files("bob-plaintext"));
    assert_true(in_files("/x"));        /* kept values are there: the search works */
    /* The key: beside the log, not in it, only divvyd's user may read it. */
    snprintf(keypath, sizeof(keypath), "%s.key", hdlog_logdir);
    assert_int_equal(lstat(keypath, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(lstat(hdlog_logdir, &st), 0);
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

    hdlog_read(&lr);
    /* Pairs sorted by key, as the engine had them; the hash is SipHash with the key file's
     * key, the same for the same value. */
    r = hdlog_find(&lr, "a", 0);
    snprintf(keytext, sizeof(keytext), "%s", want);
    snprintf(keypath, sizeof(keypath), "password= path=/x tag=a user=%s", want);
    assert_string_equal(r->kvtext, keypath);
    assert_string_equal(r->redact, "dkkh");
    r = hdlog_find(&lr, "b", 0);
    snprintf(keypath, sizeof(keypath), "password= path=/x tag=b user=%s", want);
    assert_string_equal(r->kvtext, keypath);
    r = hdlog_find(&lr, "c", 0);
    assert_string_equal(r->redact, "kkh");
    assert_null(strstr(r->kvtext, want));
    assert_int_equal(strlen(strstr(r->kvtext, "user=") + 5), 16);
    hdlog_free(&lr);
    harness_free(d);
    free(conf);
}

/* ---- a directory or key divvyd must not trust ------------------------------------------ */

/* divvyd on @conf (a file in top/) must refuse to start, saying @why. */
static void refuses(const char *conf, const char *why)
{
    char path[128], state[128], sock[160], err[8192];
    const char *args[] = { "--config", path, "--state-dir", state, "--listen", sock, NULL };
    int status = -1;
    FILE *f;

    snprintf(path, sizeof(path), "%s/divvy.conf", hdlog_top);
    snprintf(state, sizeof(state), "%s/state", hdlog_top);
    snprintf(sock, sizeof(sock), "unix:%s/s.sock", hdlog_top);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(conf, f);
    fclose(f);
    CHECK(harness_run_divvyd(args, 20000, &status, NULL, 0, err, sizeof(err)));
    if (status != 1 || !strstr(err, why))
        fail_msg("divvyd exited %d, want 1 saying \"%s\": %s", status, why, err);
}

static void test_dlog_write_refuses_untrusted_places(void **state)
{
    char *conf, keypath[128], link[128];
    FILE *f;

    (void)state;
    hdlog_logdir_new();
    conf = hdlog_conf("redact = { user = \"hash\"; };", LOCAL_RULES);
    /* A directory others can write: they could plant or remove files. */
    assert_int_equal(mkdir(hdlog_logdir, 0700), 0);
    assert_int_equal(chmod(hdlog_logdir, 0777), 0);
    refuses(conf, "others can write to it");
    /* A symlink in its place. */
    assert_int_equal(rmdir(hdlog_logdir), 0);
    snprintf(link, sizeof(link), "%s/elsewhere", hdlog_top);
    assert_int_equal(mkdir(link, 0750), 0);
    assert_int_equal(symlink(link, hdlog_logdir), 0);
    refuses(conf, "cannot open it");
    assert_int_equal(unlink(hdlog_logdir), 0);
    /* A hash key others may read: whoever reads the log could brute-force the hashes. */
    snprintf(keypath, sizeof(keypath), "%s.key", hdlog_logdir);
    f = fopen(keypath, "w");
    assert_non_null(f);
    fputs("00112233445566778899aabbccddeeff\n", f);
    fclose(f);
    assert_int_equal(chmod(keypath, 0644), 0);
    refuses(conf, "its group or others may read or write it");
    /* Not a key. */
    assert_int_equal(chmod(keypath, 0600), 0);
    f = fopen(keypath, "w");
    assert_non_null(f);
    fputs("not a key\n", f);
    fclose(f);
    refuses(conf, "it is not 32 hex digits");
    free(conf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dlog_write_line_resp_redis, harness_setup,
                                        hdlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_write_rls, harness_setup, hdlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_write_rules_after_reload, harness_setup,
                                        hdlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_write_redaction, harness_setup, hdlog_teardown),
        cmocka_unit_test_setup_teardown(test_dlog_write_refuses_untrusted_places, harness_setup,
                                        hdlog_teardown),
    };

    return cmocka_run_group_tests_name("dlog_write", tests, harness_grpc_setup,
                                       harness_grpc_teardown);
}
