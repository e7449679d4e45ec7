/* SPDX-License-Identifier: MIT */
/*
 * divvyctl replay: recorded decisions through a candidate config
 * (docs/replay.md).  The engine is server/replay.c (the daemon's own rule
 * walk on a virtual clock); this file parses the command line, runs it and
 * prints the report as a table or as one JSON object.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diag.h"
#include "divvyctl.h"
#include "dlog_query.h"
#include "replay.h"

#define REPLAY_TOP_DEFAULT 10
#define REPLAY_TEXT_LOCKS  10       /* lock periods per rule in the table; --json has all */

const char ctl_help_replay[] =
    "Usage: divvyctl replay --config CANDIDATE [OPTIONS] LOG...\n"
    "\n"
    "What would this config have done?  Runs the decisions divvyd recorded in its\n"
    "decision log (decision_log in divvy.conf(5)) through the rules of CANDIDATE,\n"
    "in time order, on a virtual clock (each decision at the time it was made;\n"
    "nothing waits), with the engine divvyd itself uses, and reports per rule\n"
    "what would change and for whom.  No daemon is needed and none is touched.\n"
    "\n"
    "LOG is a .dlog file or a directory of them (its *.dlog files).  Files of one\n"
    "host are read in the order they were started; several hosts' logs are\n"
    "merged by time and replayed as if one divvyd had seen all of their traffic\n"
    "(as a rule kept in Redis counts it).  Decisions recorded as errors are\n"
    "skipped and counted; so are decisions that arrive after the reorder window\n"
    "(libdivvy's fast path reports its decisions late; see --window).  Rules kept\n"
    "in Redis (store \"lease\" or \"strict\") count on a local counter with the\n"
    "same algorithm: exact for one host's log; several hosts' logs replay as\n"
    "one counter, as a strict rule's is (a lease rule's fleet may have refused a\n"
    "little more, while credit sat leased to other hosts).\n"
    "\n"
    "Output: totals (decisions read, replayed, skipped, same verdict, allowed ->\n"
    "denied, denied -> allowed), then one row per rule of CANDIDATE that decided\n"
    "anything, by config order:\n"
    "\n"
    "  RULE            HITS  ALLOWED>DENIED  DENIED>ALLOWED  ACTORS\n"
    "  api-per-ip     81234              42               0       3\n"
    "    top: 203.0.113.9 (40), 198.51.100.7 (1), 192.0.2.1 (1)\n"
    "\n"
    "A rule counts the decisions it decided (the rule a reply names: the stop\n"
    "rule, or a continue rule that denied); HITS are its HIT and TAKE decisions;\n"
    "ACTORS the distinct actors (the rule's actor keys' values) with a changed\n"
    "verdict, the top ones listed.  A lockout rule lists who would have been\n"
    "locked, from when and for how long; then the first 20 decisions whose\n"
    "verdict changed.\n"
    "\n"
    "Options:\n"
    "  -c, --config CANDIDATE  the config to try (required; any format divvyd\n"
    "                      reads, checked as `divvyctl check` checks it)\n"
    "      --since T       only decisions at or after T\n"
    "      --until T       only decisions before T.  T: 2026-11-28T12:00:00Z (RFC\n"
    "                      3339), \"2026-11-28 12:00[:00]\" (UTC), @UNIXSECONDS, or\n"
    "                      relative to now: -30s, -15m, -2h, -7d\n"
    "  -n, --top N         actors listed per rule (default 10, 0 none, at most 10000)\n"
    "  -w, --window SECONDS  how late a decision may arrive and still be put in\n"
    "                      order (default 10, 0 to 3600)\n"
    "  -j, --json          one JSON object: {\"decisions\": N, \"replayed\": N,\n"
    "                      \"skipped\": {\"errors\": N, \"reported_late\": N,\n"
    "                      \"unreplayable\": N}, \"same\": N, \"allowed_to_denied\": N,\n"
    "                      \"denied_to_allowed\": N, \"dropped\": N, \"corrupt_blocks\": N,\n"
    "                      \"capped\": false, \"rules\": [{\"rule\": ID, \"hits\": N,\n"
    "                      \"allowed_to_denied\": N, \"denied_to_allowed\": N,\n"
    "                      \"actors_affected\": N, \"top_actors\": [{\"actor\": A,\n"
    "                      \"changed\": N}], \"locks\": [{\"actor\": A, \"start_ms\": T,\n"
    "                      \"end_ms\": T, \"seconds\": S}]}], \"mismatches\":\n"
    "                      [{\"unix_ms\": T, \"rule_before\": ID, \"rule_after\": ID,\n"
    "                      \"allowed_before\": B, \"allowed_after\": B, \"request\":\n"
    "                      {...}}]}; every rule of CANDIDATE is listed\n"
    "  -h, --help          print this help\n"
    "\n"
    "Exit status: 0 replayed (changed verdicts are not an error), 1 CANDIDATE has\n"
    "problems (printed as by check) or a LOG cannot be read, 2 usage, 5 out of\n"
    "memory or output failed.  A corrupt block inside a log is skipped, counted\n"
    "and reported, never fatal.  See divvyctl(8).\n"
    "\n"
    "Example:\n"
    "  divvyctl replay --config /etc/divvy/divvy.conf.new --since -7d \\\n"
    "      /var/lib/divvy/decisions\n";

/* ---- JSON ------------------------------------------------------------------------------- */

/* A JSON string of bytes that may not be UTF-8: a byte that is not is
 * written as the text \xHH. */
static json_t *json_bytes(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    char *buf;
    size_t o = 0;

    if (j)
        return j;
    buf = malloc(len * 4 + 1);
    if (!buf)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c < 0x80 && c != 0)
            buf[o++] = (char)c;
        else
            o += (size_t)sprintf(buf + o, "\\x%02x", c);
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

static json_t *json_rule(const struct replay *rp, uint32_t idx, size_t top)
{
    const struct replay_rule_stats *s = replay_report_rule(replay_report_of(rp), idx);
    struct replay_top *t = NULL;
    struct rules_rule rule;
    json_t *o, *arr, *locks;
    size_t n = 0;

    if (rules_get(replay_rules(rp), idx, &rule) < 0 ||
        replay_report_top(replay_report_of(rp), idx, top, &t, &n) < 0)
        return NULL;
    arr = json_array();
    locks = json_array();
    for (size_t i = 0; arr && i < n; i++)
        json_array_append_new(arr, json_pack("{s:o, s:I}", "actor",
                                             json_bytes(t[i].actor, strlen(t[i].actor)),
                                             "changed", (json_int_t)t[i].changed));
    for (size_t i = 0; locks && i < s->n_locks; i++) {
        const struct replay_lock *l = &s->locks[i];

        json_array_append_new(locks, json_pack("{s:o, s:I, s:I, s:I}", "actor",
                                               json_bytes(l->actor, strlen(l->actor)),
                                               "start_ms", (json_int_t)l->start_ms,
                                               "end_ms", (json_int_t)l->end_ms, "seconds",
                                               (json_int_t)((l->end_ms - l->start_ms) / 1000)));
    }
    free(t);
    o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:o, s:o}", "rule", rule.id_str, "hits",
                  (json_int_t)s->hits, "allowed_to_denied", (json_int_t)s->allowed_to_denied,
                  "denied_to_allowed", (json_int_t)s->denied_to_allowed, "actors_affected",
                  (json_int_t)s->actors_affected, "top_actors", arr, "locks", locks);
    return o;
}

static json_t *json_mismatch(const struct replay *rp, const struct replay_mismatch *m)
{
    char before[32], time[80];
    struct rules_rule after;
    json_t *req = json_object();

    if (rules_get(replay_rules(rp), m->rule_after, &after) < 0)
        after.id_str = "";
    for (unsigned k = 0; req && k < m->n_kv; k++)
        json_object_set_new(req, m->key[k], json_bytes(m->value[k], strlen(m->value[k])));
    dlog_query_fmt_time(m->unix_ms, time);
    return json_pack("{s:I, s:s, s:s, s:s, s:b, s:b, s:o}", "unix_ms", (json_int_t)m->unix_ms,
                     "time", time, "rule_before",
                     replay_rule_name(rp, m->rule_before, before, sizeof(before)),
                     "rule_after", after.id_str, "allowed_before", m->allowed_before,
                     "allowed_after", m->allowed_after, "request", req);
}

static int print_json(const struct replay *rp, size_t top)
{
    struct replay_report *rep = replay_report_of(rp);
    const struct replay_totals *t = replay_report_totals(rep);
    const struct replay_mismatch *mm;
    json_t *rules = json_array(), *mms = json_array();
    size_t n_mm;

    for (uint32_t i = 0; rules && i < rules_count(replay_rules(rp)); i++) {
        json_t *r = json_rule(rp, i, top);

        if (!r || json_array_append_new(rules, r) < 0) {
            json_decref(rules);
            rules = NULL;
        }
    }
    mm = replay_report_mismatches(rep, &n_mm);
    for (size_t i = 0; mms && i < n_mm; i++)
        json_array_append_new(mms, json_mismatch(rp, &mm[i]));
    return ctl_json_print(json_pack(
        "{s:I, s:I, s:{s:I, s:I, s:I}, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:o, s:o}",
        "decisions", (json_int_t)t->decisions, "replayed", (json_int_t)t->replayed,
        "skipped", "errors", (json_int_t)t->errors, "reported_late",
        (json_int_t)t->reported_late, "unreplayable", (json_int_t)t->unreplayable, "same",
        (json_int_t)t->same, "allowed_to_denied", (json_int_t)t->allowed_to_denied,
        "denied_to_allowed", (json_int_t)t->denied_to_allowed, "dropped",
        (json_int_t)t->dropped, "corrupt_blocks", (json_int_t)t->corrupt_blocks,
        "corrupt_bytes", (json_int_t)t->corrupt_bytes, "capped", replay_report_capped(rep),
        "rules", rules, "mismatches", mms));
}

/* ---- text ------------------------------------------------------------------------------- */

static void print_rule_text(const struct replay *rp, uint32_t idx, size_t top)
{
    const struct replay_rule_stats *s = replay_report_rule(replay_report_of(rp), idx);
    struct replay_top *t = NULL;
    struct rules_rule rule;
    char a[80], b[80];
    size_t n = 0;

    if (rules_get(replay_rules(rp), idx, &rule) < 0)
        return;
    printf("  %-24s %12" PRIu64 " %15" PRIu64 " %15" PRIu64 " %7" PRIu64 "\n", rule.id_str,
           s->hits, s->allowed_to_denied, s->denied_to_allowed, s->actors_affected);
    if (replay_report_top(replay_report_of(rp), idx, top, &t, &n) == 0 && n) {
        printf("    top:");
        for (size_t i = 0; i < n; i++)
            printf("%s %s (%" PRIu64 ")", i ? "," : "", t[i].actor[0] ? t[i].actor : "\"\"",
                   t[i].changed);
        printf("\n");
    }
    free(t);
    for (size_t i = 0; i < s->n_locks && i < REPLAY_TEXT_LOCKS; i++) {
        const struct replay_lock *l = &s->locks[i];

        dlog_query_fmt_time(l->start_ms, a);
        dlog_query_fmt_time(l->end_ms, b);
        printf("    locked: %s  %s .. %s (%" PRIu64 " s)\n", l->actor, a, b,
               (l->end_ms - l->start_ms) / 1000);
    }
    if (s->n_locks > REPLAY_TEXT_LOCKS)
        printf("    ... and %zu more lock periods (--json lists them all)\n",
               s->n_locks - REPLAY_TEXT_LOCKS);
}

static void print_text(const struct replay *rp, size_t top)
{
    struct replay_report *rep = replay_report_of(rp);
    const struct replay_totals *t = replay_report_totals(rep);
    const struct replay_mismatch *mm;
    char time[80], before[32];
    size_t n_mm;

    printf("decisions %" PRIu64 ", replayed %" PRIu64 ", skipped: %" PRIu64 " errors, %" PRIu64
           " reported late, %" PRIu64 " unreplayable\n", t->decisions, t->replayed, t->errors,
           t->reported_late, t->unreplayable);
    printf("same verdict %" PRIu64 ", allowed -> denied %" PRIu64 ", denied -> allowed %" PRIu64
           "\n", t->same, t->allowed_to_denied, t->denied_to_allowed);
    if (t->dropped || t->corrupt_blocks)
        printf("the log lacks %" PRIu64 " decisions divvyd dropped and %" PRIu64
               " corrupt blocks (%" PRIu64 " bytes)\n", t->dropped, t->corrupt_blocks,
               t->corrupt_bytes);
    if (replay_report_capped(rep))
        printf("(too many actors or locks to keep them all: some are not counted)\n");
    printf("\n  %-24s %12s %15s %15s %7s\n", "RULE", "HITS", "ALLOWED>DENIED", "DENIED>ALLOWED",
           "ACTORS");
    for (uint32_t i = 0; i < rules_count(replay_rules(rp)); i++) {
        const struct replay_rule_stats *s = replay_report_rule(rep, i);

        if (s->hits || s->allowed_to_denied || s->denied_to_allowed || s->n_locks)
            print_rule_text(rp, i, top);
    }
    mm = replay_report_mismatches(rep, &n_mm);
    if (n_mm)
        printf("\nfirst %zu changed decisions:\n", n_mm);
    for (size_t i = 0; i < n_mm; i++) {
        struct rules_rule after;

        if (rules_get(replay_rules(rp), mm[i].rule_after, &after) < 0)
            after.id_str = "?";
        dlog_query_fmt_time(mm[i].unix_ms, time);
        printf("  %s  %s -> %s  %s -> %s ", time,
               replay_rule_name(rp, mm[i].rule_before, before, sizeof(before)), after.id_str,
               mm[i].allowed_before ? "allowed" : "denied",
               mm[i].allowed_after ? "allowed" : "denied");
        for (unsigned k = 0; k < mm[i].n_kv; k++)
            printf(" %s=%s", mm[i].key[k], mm[i].value[k]);
        printf("\n");
    }
}

/* ---- the command ---------------------------------------------------------------------- */

static void print_config_problems(const struct diag *d, const char *path, int r)
{
    char msg[DIAG_FILE_MAX + DIAG_MSG_MAX + 32];

    for (size_t i = 0; i < d->n; i++) {
        diag_format(d, i, msg, sizeof(msg));
        fprintf(stderr, "%s\n", msg);
    }
    if (d->dropped)
        fprintf(stderr, "%s: ... and %zu more problems\n", path, d->dropped);
    ctl_fail(CTL_EXIT_NO, "replay: cannot use the candidate config %s: %s", path,
             r == -EINVAL ? "it has problems" : strerror(-r));
}

static const char *path_error(int r)
{
    if (r == -EBADMSG)
        return "not a decision log (or a version this divvyctl does not read)";
    if (r == -ENODATA)
        return "a directory without .dlog files";
    if (r == -EINVAL)
        return "not a regular file";
    if (r == -E2BIG)
        return "too many log files";
    if (r == -EMLINK)
        return "the logs come from more than 64 hosts: replay fewer at a time";
    return strerror(-r);
}

int cmd_replay(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        CTL_LONGOPTS,
        { "config", required_argument, NULL, 'c' },
        { "since", required_argument, NULL, 'S' },
        { "until", required_argument, NULL, 'U' },
        { "top", required_argument, NULL, 'n' },
        { "window", required_argument, NULL, 'w' },
        { NULL, 0, NULL, 0 },
    };
    struct replay_opts o = { .window_ms = REPLAY_WINDOW_DEFAULT_MS };
    struct timespec ts;
    struct replay *rp = NULL;
    struct diag *d = NULL;
    const char *config = NULL, *file = NULL;
    uint64_t now_ms;
    long top = REPLAY_TOP_DEFAULT, v;
    int opt, r, status;

    clock_gettime(CLOCK_REALTIME, &ts);
    now_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    ctl_getopt_reset();
    while ((opt = ctl_getopt(ctl, cmd, argc, argv, ":" CTL_SHORTOPTS "c:n:w:", longopts)) > 0) {
        switch (opt) {
        case 'c':
            config = optarg;
            break;
        case 'S':
        case 'U':
            if (dlog_query_time(optarg, now_ms, opt == 'S' ? &o.since_ms : &o.until_ms) < 0)
                return ctl_usage(cmd, "--%s: '%s' is not a time (2026-11-28T12:00:00Z, "
                                 "\"2026-11-28 12:00\", @SECONDS, -2h)",
                                 opt == 'S' ? "since" : "until", optarg);
            break;
        case 'n':
            if (ctl_parse_int(optarg, 0, REPLAY_TOP_MAX, &top) < 0)
                return ctl_usage(cmd, "--top: '%s' is not 0 to %d", optarg, REPLAY_TOP_MAX);
            break;
        case 'w':
            if (ctl_parse_int(optarg, 0, REPLAY_WINDOW_MAX_MS / 1000, &v) < 0)
                return ctl_usage(cmd, "--window: '%s' is not 0 to %d seconds", optarg,
                                 REPLAY_WINDOW_MAX_MS / 1000);
            o.window_ms = (uint64_t)v * 1000;
            break;
        default:
            return ctl_usage(cmd, "unknown option");
        }
    }
    if (opt < 0)
        return ctl_opts_exit(opt);
    if (!config)
        return ctl_usage(cmd, "needs --config CANDIDATE");
    if (optind >= argc)
        return ctl_usage(cmd, "needs at least one LOG (a .dlog file or a directory)");
    if (o.until_ms && o.until_ms <= o.since_ms)
        return ctl_usage(cmd, "--until is not after --since");
    d = malloc(sizeof(*d));
    if (!d)
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    diag_init(d);
    r = replay_new(config, &o, &rp, d);
    if (r < 0) {
        print_config_problems(d, config, r);
        status = r == -ENOMEM ? CTL_EXIT_FAILURE : CTL_EXIT_NO;
        goto out;
    }
    for (int i = optind; i < argc; i++) {
        r = replay_add_path(rp, argv[i], &file);
        if (r < 0) {
            status = ctl_fail(r == -ENOMEM ? CTL_EXIT_FAILURE : CTL_EXIT_NO,
                              "replay: %s: %s", file, path_error(r));
            goto out;
        }
    }
    r = replay_run(rp, &file);
    if (r < 0) {
        status = ctl_fail(r == -ENOMEM ? CTL_EXIT_FAILURE : CTL_EXIT_NO, "replay: %s%s%s",
                          file ? file : "", file ? ": " : "", path_error(r));
        goto out;
    }
    if (ctl->json) {
        status = print_json(rp, (size_t)top);
    } else {
        print_text(rp, (size_t)top);
        status = CTL_EXIT_OK;
    }
out:
    replay_free(rp);
    free(d);
    return status;
}
