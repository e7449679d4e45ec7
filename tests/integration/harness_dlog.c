/* SPDX-License-Identifier: MIT */
/*
 * harness_dlog: what the decision log's integration tests share (test_dlog_write.c,
 * test_dlog_crash.c): a temporary log directory, configs that record into it, the log read
 * back with the format's own reader (server/dlog.h) into plain records, and a paced load.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "harness_dlog.h"
#include "harness_redis.h"

/* ---- the log's directory --------------------------------------------------------------- */

char hdlog_top[64];            /* mkdtemp(): the log directory is top/log, its key top/log.key */
char hdlog_logdir[96];

void hdlog_logdir_new(void)
{
    snprintf(hdlog_top, sizeof(hdlog_top), "/tmp/divvy-dlog-XXXXXX");
    assert_non_null(mkdtemp(hdlog_top));
    snprintf(hdlog_logdir, sizeof(hdlog_logdir), "%s/log", hdlog_top);
}

char hdlog_mounted[96];         /* a small tmpfs the disk-full test mounted */

int hdlog_teardown(void **state)
{
    if (hdlog_mounted[0])
        umount2(hdlog_mounted, MNT_DETACH);
    hdlog_mounted[0] = '\0';
    if (hdlog_top[0])
        harness_rm_tree(hdlog_top);
    hdlog_top[0] = '\0';
    redis_stop_all();
    return harness_teardown(state);
}

/* A decision_log group writing to hdlog_logdir, with @extra settings, then @rest. */
char *hdlog_conf(const char *extra, const char *rest)
{
    char *s = NULL;

    assert_true(asprintf(&s, "decision_log = { enabled = true; directory = \"%s\"; %s };\n%s",
                         hdlog_logdir, extra, rest) > 0);
    return s;
}

/* ---- reading it back ------------------------------------------------------------------- */

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .dlog files of hdlog_logdir, sorted (oldest first): how many, into @names. */
size_t hdlog_list_files(char names[][128], size_t max)
{
    char *sorted[256];
    size_t n = 0;
    struct dirent *de;
    DIR *dir = opendir(hdlog_logdir);

    assert_non_null(dir);
    while ((de = readdir(dir)) != NULL && n < 256)
        if (strstr(de->d_name, DLOG_FILE_SUFFIX))
            sorted[n++] = strdup(de->d_name);
    closedir(dir);
    qsort(sorted, n, sizeof(*sorted), name_cmp);
    for (size_t i = 0; i < n; i++) {
        if (i < max)
            snprintf(names[i], 128, "%s/%s", hdlog_logdir, sorted[i]);
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

void hdlog_read(struct logread *lr)
{
    char names[64][128];
    size_t n = hdlog_list_files(names, 64);
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

void hdlog_free(struct logread *lr)
{
    free(lr->rec);
    memset(lr, 0, sizeof(*lr));
}

const struct rec *hdlog_find(const struct logread *lr, const char *tag, unsigned nth)
{
    for (size_t i = 0; i < lr->n; i++)
        if (strcmp(lr->rec[i].tag, tag) == 0 && nth-- == 0)
            return &lr->rec[i];
    fail_msg("no decision with tag=%s (#%u) in the log (%zu decisions)", tag, nth, lr->n);
    return NULL;
}

uint64_t hdlog_rule_id(const struct logread *lr, const char *id_str)
{
    for (size_t i = 0; i < lr->n_rule; i++)
        if (strcmp(lr->rule[i].id_str, id_str) == 0)
            return lr->rule[i].id;
    fail_msg("rule %s is not described in the log", id_str);
    return 0;
}

/* ---- talking to divvyd ----------------------------------------------------------------- */

void hdlog_cmd(struct harness_conn *c, const char *req, const char *want_prefix)
{
    char reply[HARNESS_LINE];

    CHECK(harness_cmd(c, req, reply, sizeof(reply)));
    if (strncmp(reply, want_prefix, strlen(want_prefix)) != 0)
        fail_msg("%s: got \"%s\", want \"%s...\"", req, reply, want_prefix);
}

void hdlog_stop_ok(struct harness_daemon *d)
{
    int status = -1;

    CHECK(harness_stop(d, &status));
    if (status != 0) {
        harness_dump_log(d);
        fail_msg("divvyd exited with status %d", status);
    }
}


/* Sends HITs tag=@first .. @first + @n - 1 (with a unique pad of @pad bytes) on @c in
 * pipelined batches of @batch, 1 ms apart (a steady load the drain keeps up with: a load
 * past what it writes drops records by design, counted); returns when all are answered.
 * @each, when not NULL, runs after each batch with the last tag answered. */
void hdlog_hits(struct harness_conn *c, unsigned first, unsigned n, unsigned batch, size_t pad,
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

