/* SPDX-License-Identifier: MIT */
/*
 * test_resp_adhoc_bound: RESP's ad-hoc buckets in Redis are bounded per
 * peer (docs/resp.md "Ad-hoc buckets in Redis").  The buckets live in a
 * real redis-server (store.mode = "strict"), which also holds the login
 * counters.  A throwaway uid sends RL.REDUCE on three times as many
 * distinct names as its share (table.adhoc_buckets_per_peer = 8) over the
 * RESP Unix socket: the first 8 are answered, the rest (and a CL.THROTTLE
 * on a new name) get the share's error, a name it holds is still answered,
 * and Redis holds no more than 8 ad-hoc keys.  Then another uid and root
 * still make buckets, and a strict login-style rule still counts in Redis.
 * Before the bound, every name became a key in Redis.
 */
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness_redis.h"

#define FLOOD_UID   61601       /* throwaway uids and gid, no passwd entry needed */
#define OTHER_UID   61602
#define FLOOD_GID   61601
#define SHARE       8
#define NAMES       (3 * SHARE)
#define TEXT        200
#define SHARE_ERR   "ERR busy too many ad-hoc buckets for this peer"

#define RULES                                                                           \
    "{ match = { path = \"/login\"; }; label = \"login\"; actor = \"user\";\n"          \
    "  credit_limit = 2; reset_seconds = 3600; source = \"privileged\"; },\n"           \
    "{ default = true; credit_limit = 100; reset_seconds = 60; }"

/* What a child did as @uid (in shared memory): @n RL.REDUCE on new names
 * "<prefix><i>", then a CL.THROTTLE on a new name, then RL.REDUCE on the
 * first name again. */
struct job {
    uid_t uid;
    const char *sock;
    const char *prefix;
    unsigned n;
    int ok, share, other;       /* integer replies, the share's error, anything else */
    char other_text[TEXT];
    char cell[TEXT];            /* the CL.THROTTLE's reply: "array" or the error */
    long long again;            /* the first name's reply again; -1: not an integer */
    int err;
};

/* @cmd's reply: 1 an integer (into *@v), 0 the share's error, -1 else (into @text). */
static int reply_of(redisContext *ctx, const char *cmd, long long *v, char *text)
{
    redisReply *r = redisCommand(ctx, cmd);
    int kind = -1;

    if (!r) {
        snprintf(text, TEXT, "%s: %s", cmd, ctx->errstr);
        return -1;
    }
    if (r->type == REDIS_REPLY_INTEGER) {
        *v = r->integer;
        kind = 1;
    } else if (r->type == REDIS_REPLY_ARRAY) {
        snprintf(text, TEXT, "array");
    } else if (r->type == REDIS_REPLY_ERROR) {
        snprintf(text, TEXT, "%s", r->str);
        kind = strncmp(r->str, SHARE_ERR, strlen(SHARE_ERR)) == 0 ? 0 : -1;
    } else {
        snprintf(text, TEXT, "reply type %d", r->type);
    }
    freeReplyObject(r);
    return kind;
}

static int job_child(void *arg)
{
    struct job *j = arg;
    struct timeval tv = { HARNESS_TIMEOUT_MS / 1000, 0 };
    redisContext *ctx;
    char cmd[128], text[TEXT];
    long long v;

    if (j->uid != 0 && (setgroups(0, NULL) < 0 || setgid(FLOOD_GID) < 0 || setuid(j->uid) < 0))
        return 100;
    ctx = redisConnectUnixWithTimeout(j->sock, tv);
    if (!ctx || ctx->err)
        return 101;
    redisSetTimeout(ctx, tv);
    for (unsigned i = 0; i < j->n; i++) {
        snprintf(cmd, sizeof(cmd), "RL.REDUCE %s%u 5 3600", j->prefix, i);
        switch (reply_of(ctx, cmd, &v, text)) {
        case 1:
            j->ok++;
            break;
        case 0:
            j->share++;
            break;
        default:
            if (j->other++ == 0)
                snprintf(j->other_text, TEXT, "%s", text);
        }
    }
    snprintf(cmd, sizeof(cmd), "CL.THROTTLE %scell 5 1 60", j->prefix);
    reply_of(ctx, cmd, &v, j->cell);
    snprintf(cmd, sizeof(cmd), "RL.REDUCE %s0 5 3600", j->prefix);
    j->again = reply_of(ctx, cmd, &v, text) == 1 ? v : -1;
    redisFree(ctx);
    return 0;
}

/* Runs @n names with @prefix as @uid (0: root, in a child all the same). */
static struct job *job_run(struct harness_daemon *d, uid_t uid, const char *prefix, unsigned n)
{
    struct job *j = mmap(NULL, sizeof(*j), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                         -1, 0);
    pid_t pid;
    int status;

    assert_true(j != MAP_FAILED);
    memset(j, 0, sizeof(*j));
    j->uid = uid;
    j->sock = d->resp_sock;
    j->prefix = prefix;
    j->n = n;
    CHECK(harness_spawn(job_child, j, &pid));
    CHECK(harness_reap(pid, 60000, &status));
    if (status != 0)
        fail_msg("child as uid %u: exit %d", (unsigned)uid, status);
    if (j->other)
        fail_msg("uid %u: %d unexpected replies, the first \"%s\"", (unsigned)uid, j->other,
                 j->other_text);
    return j;
}

/* How many keys of @rs match @pattern. */
static long long keys_count(struct redis_srv *rs, const char *pattern)
{
    redisReply *r = redis_cmd(rs, "KEYS %s", pattern);
    long long n;

    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    n = (long long)r->elements;
    freeReplyObject(r);
    return n;
}

static void expect_hit(struct harness_conn *c, const char *req, bool allowed, long long credit)
{
    char r[HARNESS_LINE];
    bool a;
    long long cr, secs;

    CHECK(harness_cmd(c, req, r, sizeof(r)));
    if (harness_parse_ok(r, &a, &cr, &secs) < 0 || a != allowed || cr != credit)
        fail_msg("%s -> \"%s\", want OK %s %lld", req, r, allowed ? "true" : "false", credit);
}

static void test_resp_adhoc_bound_share(void **state)
{
    struct harness_opts o = { .resp = true, .workers = 2 };
    struct harness_daemon *d = NULL;
    struct redis_srv *rs = NULL;
    struct harness_conn *c;
    struct job *j;
    char *inner, *conf;

    (void)state;
    CHECK(redis_start(&rs));
    inner = redis_config(rs, "strict", "local", 1000, NULL, RULES);
    assert_non_null(inner);
    /* 256 slots: one shard, so the share is exactly SHARE. */
    assert_true(asprintf(&conf, "server = { socket_mode = \"0666\"; };\n"
                         "table = { adhoc_slots = 256; adhoc_buckets_per_peer = %d; };\n%s",
                         SHARE, inner) > 0);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    /* The unprivileged children must reach the 0666 sockets. */
    assert_int_equal(chmod(d->dir, 0755), 0);

    j = job_run(d, FLOOD_UID, "flood-", NAMES);
    if (keys_count(rs, "divvy:adhoc:*") > SHARE)
        fail_msg("Redis holds %lld ad-hoc keys after uid %u's %d names; its share is %d",
                 keys_count(rs, "divvy:adhoc:*"), FLOOD_UID, NAMES, SHARE);
    if (j->ok != SHARE || j->share != NAMES - SHARE)
        fail_msg("uid %u on %d new names: %d answered, %d refused by its share; want %d and %d",
                 FLOOD_UID, NAMES, j->ok, j->share, SHARE, NAMES - SHARE);
    if (strncmp(j->cell, SHARE_ERR, strlen(SHARE_ERR)) != 0)
        fail_msg("CL.THROTTLE on a new name past the share: \"%s\"", j->cell);
    /* A name it holds is not charged again: 5, then 4 before this call. */
    assert_int_equal(j->again, 4);
    assert_int_equal(keys_count(rs, "divvy:adhoc:{flood-*"), SHARE);

    /* Another uid, and root (the reserve), still make buckets. */
    j = job_run(d, OTHER_UID, "other-", 3);
    assert_int_equal(j->ok, 3);
    assert_string_equal(j->cell, "array");
    j = job_run(d, 0, "root-", 3);
    assert_int_equal(j->ok, 3);
    assert_string_equal(j->cell, "array");
    assert_int_equal(keys_count(rs, "divvy:adhoc:*"), SHARE + 2 * 4);

    /* A strict login-style rule still counts in Redis. */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_hit(c, "HIT path=/login user=bob", true, 1);
    expect_hit(c, "HIT path=/login user=bob", true, 0);
    expect_hit(c, "HIT path=/login user=bob", false, 0);
    harness_close(c);
    assert_int_equal(keys_count(rs, "divvy:{login*"), 1);
    assert_true(redis_divvyd_stat(d, "adhoc_busy") >= NAMES - SHARE + 1);

    redis_divvyd_stop(d);
    free(inner);
    free(conf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resp_adhoc_bound_share, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
