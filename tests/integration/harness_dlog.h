/* SPDX-License-Identifier: MIT */
/*
 * harness_dlog: the decision log's test helpers (harness_dlog.c).  A test makes its log
 * directory with hdlog_logdir_new() (hdlog_top/log, its key hdlog_top/log.key) and uses
 * hdlog_teardown() as its cmocka teardown, which removes both (and a tmpfs a test mounted at
 * hdlog_mounted) even after a failed assertion.
 */
#ifndef DIVVY_HARNESS_DLOG_H
#define DIVVY_HARNESS_DLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlog.h"
#include "harness.h"

extern char hdlog_top[64];
extern char hdlog_logdir[96];
extern char hdlog_mounted[96];

/* Rules with a local rule "local1" (path=/l, actor tag, 1 credit) and the default "dflt". */
#define LOCAL_RULES                                                                          \
    "rules = (\n"                                                                            \
    "{ match = { path = \"/l\"; tag = \"*\"; }; label = \"local1\"; actor = \"tag\";\n"      \
    "  credit_limit = 1; reset_seconds = 60; },\n"                                           \
    "{ default = true; label = \"dflt\"; credit_limit = 100000000; reset_seconds = 60; }\n" \
    ");\n"


/* One decision read back; its pairs as text "k=v k=v" (n_kv is 0: their pointers died). */
struct rec {
    struct dlog_decision d;
    char kvtext[1024];
    char tag[64];                       /* the value of key "tag" */
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

void hdlog_logdir_new(void);
int hdlog_teardown(void **state);
/* A decision_log group recording into hdlog_logdir with @extra settings, then @rest. */
char *hdlog_conf(const char *extra, const char *rest);
/* The .dlog files of the log, oldest first, as paths into @names: how many. */
size_t hdlog_list_files(char names[][128], size_t max);
/* Every file of the log read with dlog_reader_*() into @lr (fails on a read error). */
void hdlog_read(struct logread *lr);
void hdlog_free(struct logread *lr);
/* The @nth decision with tag=@tag; fails the test when there is none. */
const struct rec *hdlog_find(const struct logread *lr, const char *tag, unsigned nth);
/* The id of the rule the log describes as @id_str; fails the test when none. */
uint64_t hdlog_rule_id(const struct logread *lr, const char *id_str);
/* @req on @c must be answered with a line starting @want_prefix. */
void hdlog_cmd(struct harness_conn *c, const char *req, const char *want_prefix);
/* SIGTERM: divvyd must exit 0 (under ASan: no leak). */
void hdlog_stop_ok(struct harness_daemon *d);
/* HITs tag=@first .. @first + @n - 1 with a unique pad of @pad bytes, in pipelined batches of
 * @batch 1 ms apart (a steady load the drain keeps up with); @each (or NULL) after each batch
 * with the last tag answered. */
void hdlog_hits(struct harness_conn *c, unsigned first, unsigned n, unsigned batch, size_t pad,
                void (*each)(unsigned last, void *arg), void *arg);

#endif
