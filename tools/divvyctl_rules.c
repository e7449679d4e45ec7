/* SPDX-License-Identifier: MIT */
/*
 * divvyctl reload and divvyctl rules add|remove|list: the commands that
 * change divvyd's rules.  reload asks for RELOAD's report (diff=true, or
 * dry_run=true for --dry-run) and prints what changed; against a divvyd too
 * old for it, a plain RELOAD.  rules add|remove|list are the rules service:
 * DROPIN requests, which divvyd validates together with its config, writes
 * into its include_dir and applies with a reload (docs/rules-service.md).
 * divvyd writes the files, not divvyctl: admins (root or divvy-admin on the
 * socket) need no write access to include_dir, and the check, the write and
 * the reload happen under divvyd's reload lock, so two admins cannot race.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "divvyctl.h"

#define DROPIN_FILE_MAX 2900    /* bytes: base64 of it fits one 4096-byte request line */
#define REQ_MAX         4096    /* PROTO_LINE_MAX */

const char ctl_help_reload[] =
    "Usage: divvyctl reload [OPTIONS]\n"
    "\n"
    "Admin command.  Makes divvyd re-read its configuration file and its\n"
    "include_dir drop-ins (as SIGHUP does, but with an answer).  A valid config\n"
    "is in use for every request that follows; counters of rules whose id did\n"
    "not change keep their counts.  Prints what changed, one line each: rules\n"
    "added, removed and changed (which fields), whether their counters are\n"
    "kept, moved to another table or start afresh, and settings that changed\n"
    "but take effect only after a restart.  An invalid config is rejected and\n"
    "the running rules stay; the reason (file:line: problem) is printed on\n"
    "stderr and the exit status is 1.  systemd's ExecReload runs this command.\n"
    "\n"
    "Options:\n"
    "  -n, --dry-run       load and validate exactly as a reload would, print what\n"
    "                      would change, and change nothing\n"
    "  -j, --json          {\"reloaded\": true, \"generation\": 4, \"rules\": 43,\n"
    "                      \"changes\": [{\"rule\": \"api\", \"change\": \"changed\", ...}]}\n"
    "                      or {\"reloaded\": false, \"error\": \"FILE:LINE: ...\"}\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 reloaded (or a valid dry run), 1 rejected (old rules kept),\n"
    "3 divvyd unreachable, 4 not admin.\n";

const char ctl_help_rules_edit[] =
    "Usage: divvyctl rules add [--replace] NAME [FILE]   (FILE, or standard input)\n"
    "       divvyctl rules remove NAME\n"
    "       divvyctl rules list\n"
    "\n"
    "Admin commands: the rules service.  divvyd keeps drop-in rule files in the\n"
    "config's include_dir; NAME is NN-NAME (two digits that order the drop-ins,\n"
    "then letters, digits, - or _), the file NAME.conf.  A drop-in holds a\n"
    "`rules = ( ... );` list in divvy.conf syntax, at most 2900 bytes; its rules\n"
    "go after the main file's rules, before its default rule.  add and remove\n"
    "validate the config as it would be, then write (or remove) the file and\n"
    "reload; a rejected drop-in is reported as FILE:LINE and nothing is written.\n"
    "add refuses an existing NAME unless --replace (the rules' counters are kept\n"
    "where their ids stay, e.g. a labelled rule's new limit).\n"
    "list shows the running rules that came from drop-ins.\n"
    "\n"
    "Options:\n"
    "  -n, --dry-run       validate and show what would change, write nothing\n"
    "      --replace       add: replace the drop-in NAME if it exists\n"
    "  -j, --json, -s, --socket ADDR, -t, --timeout MS, -h, --help\n"
    "\n"
    "Exit status: 0 done, 1 rejected (nothing written), 2 usage, 3 divvyd\n"
    "unreachable, 4 not admin.\n";

/* ---- the report ------------------------------------------------------------------------ */

static json_t *fields_json(const struct ctl_fields *f)
{
    json_t *o = json_object();

    for (size_t i = 0; o && i < f->n; i++)
        json_object_set_new(o, f->name[i], ctl_json_value(f->value[i]));
    return o;
}

/* One change line for humans. */
static void print_change(const struct ctl_fields *f)
{
    const char *change = ctl_field(f, "change"), *rule = ctl_field(f, "rule");
    const char *setting = ctl_field(f, "setting"), *fields = ctl_field(f, "fields");
    const char *counters = ctl_field(f, "counters"), *file = ctl_field(f, "file");
    const char *line = ctl_field(f, "line");

    if (setting) {
        printf("  restart  %s: running \"%s\", configured \"%s\" (takes effect after a "
               "restart)\n", setting, ctl_field(f, "running") ? ctl_field(f, "running") : "",
               ctl_field(f, "configured") ? ctl_field(f, "configured") : "");
        return;
    }
    printf("  %-8s rule %s", change ? change : "?", rule ? rule : "?");
    if (file && line)
        printf(" (%s:%s)", file, line);
    if (fields)
        printf(": %s", fields);
    if (ctl_field(f, "was"))
        printf(" (was %s)", ctl_field(f, "was"));
    if (counters)
        printf("; counters %s", strcmp(counters, "fresh") == 0 ? "start afresh" : counters);
    printf("\n");
}

/* Prints (or puts into JSON) RELOAD's report @lines[0..n): "OK n", the
 * summary, the changes. */
static int print_report(const struct ctl *ctl, char **lines, size_t n, const char *what)
{
    struct ctl_fields *f = malloc(sizeof(*f));
    uint64_t gen = 0, rules = 0, added = 0, removed = 0, changed = 0, restart = 0, more = 0;
    json_t *doc = NULL, *arr = NULL;
    bool applied;

    if (!f)
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    if (n < 2 || ctl_fields_parse(lines[1], f) < 0 || !ctl_field(f, "reloaded")) {
        free(f);
        return ctl_fail(CTL_EXIT_UNAVAILABLE, "unexpected reply to %s: %s", what,
                        n > 1 ? lines[1] : lines[0]);
    }
    applied = strcmp(ctl_field(f, "reloaded"), "true") == 0;
    ctl_field_u64(f, "generation", &gen);
    ctl_field_u64(f, "rules", &rules);
    ctl_field_u64(f, "added", &added);
    ctl_field_u64(f, "removed", &removed);
    ctl_field_u64(f, "changed", &changed);
    ctl_field_u64(f, "restart", &restart);
    ctl_field_u64(f, "more", &more);
    if (ctl->json) {
        doc = fields_json(f);
        arr = json_array();
        if (doc)
            json_object_set_new(doc, "reloaded", json_boolean(applied));
    } else if (applied) {
        printf("reloaded: generation %" PRIu64 ", %" PRIu64 " rules (%" PRIu64 " added, %" PRIu64
               " removed, %" PRIu64 " changed; %" PRIu64 " settings need a restart)\n",
               gen, rules, added, removed, changed, restart);
    } else {
        printf("dry run: the config is valid, %" PRIu64 " rules; generation %" PRIu64
               " stays (%" PRIu64 " would be added, %" PRIu64 " removed, %" PRIu64
               " changed; %" PRIu64 " settings need a restart)\n",
               rules, gen, added, removed, changed, restart);
    }
    for (size_t i = 2; i < n; i++) {
        if (ctl_fields_parse(lines[i], f) < 0)
            continue;
        if (arr)
            json_array_append_new(arr, fields_json(f));
        else if (!ctl->json)
            print_change(f);
    }
    if (!ctl->json && more)
        printf("  ... and %" PRIu64 " more (see divvyd's log)\n", more);
    free(f);
    if (ctl->json) {
        json_object_set_new(doc, "changes", arr);
        return ctl_json_print(doc);
    }
    return CTL_EXIT_OK;
}

/* ERR reload-failed: the config (with the drop-in) was rejected. */
static int rejected(const struct ctl *ctl, const char *line, const char *what)
{
    char code[64], reason[600];

    ctl_parse_err(line, code, sizeof(code), reason, sizeof(reason));
    if (ctl->json) {
        ctl_json_print(json_pack("{s:b, s:s}", "reloaded", 0, "error", reason));
        fprintf(stderr, "divvyctl: %s rejected, the running rules stay: %s\n", what, reason);
        return CTL_EXIT_NO;
    }
    return ctl_fail(CTL_EXIT_NO, "%s rejected, the running rules stay: %s", what, reason);
}

/* Sends @req; prints its report.  An old divvyd's one-line reply too. */
static int report_request(struct ctl *ctl, const char *req, const char *what)
{
    char **lines = NULL;
    size_t n = 0;
    int r;

    r = ctl_connect(ctl);
    if (r > 0)
        return r;
    r = divvy_command(ctl->h, req, &lines, &n);
    if (r < 0)
        return ctl_client_error(ctl, what, r);
    if (n > 0 && strncmp(lines[0], "ERR reload-failed", 17) == 0)
        r = rejected(ctl, lines[0], what);
    else if (n > 0 && strncmp(lines[0], "ERR ", 4) == 0)
        r = ctl_err_reply(ctl, what, lines[0]);
    else
        r = print_report(ctl, lines, n, what);
    divvy_lines_free(lines, n);
    return r;
}

/* Parses the options of reload and rules add|remove|list: the index of the
 * first operand, or -1 (--help shown) or -2 (usage error), as
 * ctl_simple_opts(). */
static int edit_opts(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv,
                     bool *ret_dry, bool *ret_replace)
{
    static const struct option longopts[] = {
        CTL_LONGOPTS,
        { "dry-run", no_argument, NULL, 'n' },
        { "replace", no_argument, NULL, 'R' },      /* long only: -r is --rule elsewhere */
        { NULL, 0, NULL, 0 },
    };
    int opt;

    *ret_dry = false;
    if (ret_replace)
        *ret_replace = false;
    ctl_getopt_reset();
    while ((opt = getopt_long(argc, argv, ":" CTL_SHORTOPTS "n", longopts, NULL)) != -1) {
        switch (ctl_common_opt(ctl, cmd, opt, optarg, argv)) {
        case CTL_OPT_DONE:
            continue;
        case CTL_OPT_HELP:
            return -1;
        case CTL_OPT_BAD:
            return -2;
        case CTL_OPT_OTHER:
            break;
        }
        if (opt == 'R' && ret_replace) {
            *ret_replace = true;
        } else if (opt == 'n') {
            *ret_dry = true;
        } else {
            ctl_usage(cmd, "unknown option");
            return -2;
        }
    }
    return optind;
}

int cmd_reload(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    char **lines = NULL;
    size_t n = 0;
    struct ctl_fields f;
    uint64_t gen = 0, rules = 0;
    bool dry;
    int r;

    r = edit_opts(ctl, cmd, argc, argv, &dry, NULL);
    if (r < 0)
        return ctl_opts_exit(r);
    if (r != argc)
        return ctl_usage(cmd, "takes no arguments");
    r = ctl_connect(ctl);
    if (r > 0)
        return r;
    r = divvy_command(ctl->h, dry ? "RELOAD dry_run=true" : "RELOAD diff=true", &lines, &n);
    if (r < 0)
        return ctl_client_error(ctl, "RELOAD", r);
    /* A divvyd from before the report: a plain RELOAD (no dry run there). */
    if (n > 0 && strncmp(lines[0], "ERR bad-request", 15) == 0 && !dry) {
        divvy_lines_free(lines, n);
        lines = NULL;
        r = divvy_command(ctl->h, "RELOAD", &lines, &n);
        if (r < 0)
            return ctl_client_error(ctl, "RELOAD", r);
    }
    if (n > 0 && strncmp(lines[0], "ERR reload-failed", 17) == 0) {
        r = rejected(ctl, lines[0], "reload");
    } else if (n > 0 && strncmp(lines[0], "ERR ", 4) == 0) {
        r = ctl_err_reply(ctl, "RELOAD", lines[0]);
    } else if (n > 0 && strncmp(lines[0], "OK reloaded", 11) == 0) {
        if (ctl_fields_parse(lines[0] + 11, &f) == 0) {
            ctl_field_u64(&f, "generation", &gen);
            ctl_field_u64(&f, "rules", &rules);
        }
        if (ctl->json)
            r = ctl_json_print(json_pack("{s:b, s:I, s:I}", "reloaded", 1, "generation",
                                         (json_int_t)gen, "rules", (json_int_t)rules));
        else
            printf("reloaded: generation %" PRIu64 ", %" PRIu64 " rules\n", gen, rules);
    } else {
        r = print_report(ctl, lines, n, "RELOAD");
    }
    divvy_lines_free(lines, n);
    return r;
}

/* ---- rules add|remove|list ------------------------------------------------------------- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64_encode(const unsigned char *in, size_t len, char *out)
{
    size_t o = 0;

    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (i + 1 < len ? (unsigned)in[i + 1] << 8 : 0) |
                     (i + 2 < len ? in[i + 2] : 0);

        out[o++] = b64[v >> 18 & 63];
        out[o++] = b64[v >> 12 & 63];
        out[o++] = i + 1 < len ? b64[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? b64[v & 63] : '=';
    }
    out[o] = '\0';
}

/* @path ("-": standard input) into @buf; the length, or -1 (reported). */
static ssize_t read_dropin(const char *path, char *buf, size_t size)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    size_t n;

    if (!f) {
        ctl_fail(CTL_EXIT_FAILURE, "cannot read %s: %m", path);
        return -1;
    }
    n = fread(buf, 1, size, f);
    if (ferror(f) || n == size) {
        if (f != stdin)
            fclose(f);
        ctl_fail(n == size ? CTL_EXIT_USAGE : CTL_EXIT_FAILURE,
                 n == size ? "%s: a drop-in sent through divvyd holds at most %d bytes"
                           : "cannot read %s", path, DROPIN_FILE_MAX);
        return -1;
    }
    if (f != stdin)
        fclose(f);
    return (ssize_t)n;
}

static int dropin_list(struct ctl *ctl)
{
    char **lines = NULL;
    size_t n = 0;
    struct ctl_fields *f;
    json_t *arr = NULL;
    int r;

    r = ctl_command(ctl, "DROPIN", "DROPIN op=list", &lines, &n);
    if (r > 0)
        return r;
    f = malloc(sizeof(*f));
    arr = ctl->json ? json_array() : NULL;
    if (!f || (ctl->json && !arr)) {
        r = ctl_fail(CTL_EXIT_FAILURE, "out of memory");
        goto out;
    }
    if (!ctl->json)
        printf("%-24s %-20s %6s %8s %8s  %s\n", "DROP-IN", "RULE", "LINE", "LIMIT", "PER",
               "MATCH");
    for (size_t i = 1; i < n; i++) {
        if (ctl_fields_parse(lines[i], f) < 0)
            continue;
        if (arr)
            json_array_append_new(arr, fields_json(f));
        else
            printf("%-24s %-20s %6s %8s %8s  %s\n", ctl_field(f, "dropin"), ctl_field(f, "rule"),
                   ctl_field(f, "line"), ctl_field(f, "credit_limit"),
                   ctl_field(f, "reset_seconds"), ctl_field(f, "match"));
    }
    r = arr ? ctl_json_print(json_pack("{s:o}", "dropins", arr)) : CTL_EXIT_OK;
    arr = NULL;
out:
    json_decref(arr);
    free(f);
    divvy_lines_free(lines, n);
    return r;
}

bool ctl_rules_edit_wanted(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (strcmp(a, "-s") == 0 || strcmp(a, "-t") == 0 || strcmp(a, "--socket") == 0 ||
            strcmp(a, "--timeout") == 0) {
            i++;
            continue;
        }
        if (a[0] == '-')
            continue;
        return strcmp(a, "add") == 0 || strcmp(a, "remove") == 0 || strcmp(a, "list") == 0;
    }
    return false;
}

int cmd_rules_edit(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    char text[DROPIN_FILE_MAX + 1], req[REQ_MAX];
    struct ctl_cmd sub = *cmd;
    const char *op, *name;
    ssize_t len;
    bool dry, replace;
    int r, i;

    sub.help = ctl_help_rules_edit;     /* its usage, not the listing's */
    cmd = &sub;
    r = edit_opts(ctl, cmd, argc, argv, &dry, &replace);
    if (r < 0)
        return ctl_opts_exit(r);
    i = r;
    if (i == argc)
        return ctl_usage(cmd, "add, remove or list?");
    op = argv[i++];
    if (strcmp(op, "list") == 0) {
        if (i != argc)
            return ctl_usage(cmd, "rules list takes no arguments");
        return dropin_list(ctl);
    }
    if ((strcmp(op, "add") != 0 && strcmp(op, "remove") != 0) || i == argc)
        return ctl_usage(cmd, "rules add NAME [FILE], rules remove NAME or rules list");
    name = argv[i++];
    if (strlen(name) > 64 || strspn(name, "0123456789") < 2 || name[2] != '-' ||
        strspn(name + 3, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") !=
            strlen(name + 3) || !name[3])
        return ctl_usage(cmd, "'%s' is not a drop-in name: NN-NAME (two digits, then letters, "
                         "digits, - or _)", name);
    if (strcmp(op, "remove") == 0) {
        if (i != argc)
            return ctl_usage(cmd, "rules remove takes one NAME");
        snprintf(req, sizeof(req), "DROPIN op=remove name=%s%s", name,
                 dry ? " dry_run=true" : "");
        return report_request(ctl, req, "DROPIN");
    }
    if (argc - i > 1)
        return ctl_usage(cmd, "rules add takes NAME and at most one FILE");
    len = read_dropin(i < argc ? argv[i] : "-", text, sizeof(text));
    if (len < 0)
        return CTL_EXIT_USAGE;
    r = snprintf(req, sizeof(req), "DROPIN op=add name=%s%s%s text=\"", name,
                 dry ? " dry_run=true" : "", replace ? " replace=true" : "");
    b64_encode((const unsigned char *)text, (size_t)len, req + r);
    strcat(req, "\"");
    return report_request(ctl, req, "DROPIN");
}
