/* SPDX-License-Identifier: MIT */
/*
 * divvyctl unlock: clears every login counter of one user, whatever the
 * source, and says how many (docs/divvyctl.md "unlock").  A login counter is
 * per user and source (etc/divvy.conf's login-user-source): the user alone
 * does not name it, so unlock finds them.  It reads RULES (which rules are
 * privileged and resettable, their actor keys and match) and COUNTERS (the
 * live counters of this host's tables and, for Redis-backed rules, of Redis:
 * that is what makes them every host's), keeps the counters whose actor
 * names the user (or whose rule matches only that user, as
 * login-root-source does root), and sends for each the RESET that reaches
 * it: the rule's exact match pairs plus the counter's actor values, i.e.
 * the request pam_divvy would send.  divvyd decides who may (RESET and
 * COUNTERS are admin verbs: root or the admin group on the Unix socket).
 * With --source it also sends pam_divvy's own request for that source, so a
 * counter COUNTERS did not list (an actor over 32 bytes, stored as a
 * digest; past COUNTERS' bounds) is reached too.  A second COUNTERS counts
 * what is gone.  Also: how many counters a `reset` request may forget
 * (ctl_reset_clearable(), from EXPLAIN).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "divvyctl_top.h"

#define UNLOCK_ROWS      10000      /* COUNTERS max= */
#define UNLOCK_KEYS      8          /* actor keys of one rule (RULES_ACTOR_KEYS_MAX) */
#define UNLOCK_PAIRS     (DIVVY_MAX_KEYS * 2)

const char ctl_help_unlock[] =
    "Usage: divvyctl unlock [OPTIONS] USER\n"
    "\n"
    "Admin command.  Clears every login counter of USER (pam_divvy's rules,\n"
    "source = \"privileged\"), from every source unless --source says which, and\n"
    "prints how many it cleared and which.  A login counter is per user and\n"
    "source, so `divvyctl reset event=authfail user=USER` without rhost= resets\n"
    "nothing; unlock finds the sources itself:\n"
    "\n"
    "  cleared 2 login counter(s) of alice\n"
    "  login-user-source  user=alice rhost=203.0.113.9/32\n"
    "  login-user-source  user=alice rhost=198.51.100.4/32\n"
    "\n"
    "It lists the live counters (as `divvyctl counters`: this host's tables and,\n"
    "for rules kept in Redis, Redis, so every host's), keeps those whose actor\n"
    "names USER (or whose rule matches USER alone, as login-root-source matches\n"
    "root), and resets each with the request pam_divvy would send for it.\n"
    "Counters of rules with resettable = false (login-source: a source's\n"
    "failures across all users) are kept.  Not reached without --source: a\n"
    "counter whose actor is longer than 32 bytes (stored as a digest; a long\n"
    "user name with an IPv6 source), and counters beyond the 10000 a listing\n"
    "returns; --source ADDR reaches them for that source.\n"
    "\n"
    "Options:\n"
    "      --source ADDR   only the counters of this source (pam_divvy's rhost=,\n"
    "                      as the address or as `locked` shows it: ADDR/32)\n"
    "  -j, --json          {\"user\": \"alice\", \"cleared\": 2, \"counters\":\n"
    "                      [{\"rule\": ..., \"actor\": ...}, ...], \"requests\": 2}\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 cleared at least one counter, 1 nothing to clear (USER has no\n"
    "login counter), 2 usage, 3 divvyd unreachable, 4 permission denied (not root\n"
    "or divvy-admin, or over TCP).\n"
    "\n"
    "Examples:\n"
    "  divvyctl unlock alice\n"
    "  divvyctl unlock alice --source 203.0.113.9\n";

/* What unlock needs of one rule, from RULES. */
struct unlock_rule {
    char id[TOP_FIELD_MAX];
    bool login;                     /* source = privileged and resettable (all kept ones) */
    size_t n_keys;
    char keys[UNLOCK_KEYS][TOP_FIELD_MAX];
    char match[TOP_FIELD_MAX * 8];  /* "k=v k=v" as RULES describes it */
};

/* One live counter, from COUNTERS. */
struct unlock_row {
    char rule[TOP_FIELD_MAX];
    char actor[TOP_FIELD_MAX];
    bool mine;                      /* the user's (or a digest of a user-keyed login rule) */
    char text[TOP_FIELD_MAX * 4];   /* the actor as key=value pairs ("#digest" as it is) */
};

struct unlock {
    const char *user, *source;
    struct unlock_rule *rules;
    size_t n_rules;
    char **requests;                /* RESET lines, distinct */
    size_t n_requests;
};

/* ---- reset: what the path holds ----------------------------------------- */

int ctl_reset_clearable(struct ctl *ctl, const struct ctl_cmd *cmd, const struct divvy_kv *kv,
                        size_t n_kv, size_t *ret_n)
{
    struct ctl_fields *f = malloc(sizeof(*f));
    char line[CTL_LINE_MAX], **lines = NULL;
    size_t n = 0, count = 0;
    int r;

    if (!f)
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    r = ctl_request_line(cmd, "EXPLAIN", kv, n_kv, line, sizeof(line));
    if (r == 0)
        r = ctl_command(ctl, "EXPLAIN", line, &lines, &n);
    for (size_t i = 1; r == 0 && i < n; i++) {
        const char *verdict, *cause, *resettable;

        if (ctl_fields_parse(lines[i], f) < 0 || !(verdict = ctl_field(f, "verdict")))
            continue;
        cause = ctl_field(f, "cause");
        resettable = ctl_field(f, "resettable");
        /* An older divvyd says neither: count the matching rule. */
        if (strcmp(verdict, "no-match") == 0 || (resettable && strcmp(resettable, "false") == 0))
            continue;
        if (cause && (strcmp(cause, "none") == 0 || strcmp(cause, "zero-limit") == 0 ||
                      strcmp(cause, "no-limit") == 0))
            continue;
        count++;
    }
    divvy_lines_free(lines, n);
    free(f);
    *ret_n = count;
    return r;
}

/* ---- the rules and the counters ---------------------------------------- */

static void unlock_split(const char *list, char sep, char out[][TOP_FIELD_MAX], size_t max,
                         size_t *ret_n)
{
    size_t n = 0;

    while (*list && n < max) {
        size_t len = strcspn(list, (char[]){ sep, '\0' });

        snprintf(out[n++], TOP_FIELD_MAX, "%.*s", (int)len, list);
        list += len + (list[len] == sep);
    }
    *ret_n = n;
}

static int unlock_load_rules(struct ctl *ctl, struct unlock *u)
{
    struct ctl_fields *f = malloc(sizeof(*f));
    char **lines = NULL;
    size_t n = 0;
    int r;

    if (!f)
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    r = ctl_command(ctl, "RULES", "RULES", &lines, &n);
    /* Only the login rules are kept: a config may hold 100,000 rules. */
    for (size_t i = 1; r == 0 && i < n; i++) {
        struct unlock_rule *ur, *grown;
        const char *id, *source, *resettable, *actor, *match;

        if (ctl_fields_parse(lines[i], f) < 0 || !(id = ctl_field(f, "id")))
            continue;
        source = ctl_field(f, "source");
        resettable = ctl_field(f, "resettable");
        if (!source || strcmp(source, "privileged") != 0 ||
            (resettable && strcmp(resettable, "false") == 0))
            continue;
        grown = realloc(u->rules, (u->n_rules + 1) * sizeof(*grown));
        if (!grown) {
            r = ctl_fail(CTL_EXIT_FAILURE, "out of memory");
            break;
        }
        u->rules = grown;
        ur = &u->rules[u->n_rules];
        actor = ctl_field(f, "actor");
        match = ctl_field(f, "match");
        snprintf(ur->id, sizeof(ur->id), "%s", id);
        ur->login = true;
        unlock_split(actor ? actor : "", ',', ur->keys, UNLOCK_KEYS, &ur->n_keys);
        snprintf(ur->match, sizeof(ur->match), "%s", match ? match : "");
        u->n_rules++;
    }
    divvy_lines_free(lines, n);
    free(f);
    return r;
}

static const struct unlock_rule *unlock_rule_of(const struct unlock *u, const char *id)
{
    for (size_t i = 0; i < u->n_rules; i++)
        if (strcmp(u->rules[i].id, id) == 0)
            return &u->rules[i];
    return NULL;
}

/* COUNTERS (all, up to UNLOCK_ROWS) into *ret_rows. */
static int unlock_fetch(struct ctl *ctl, struct unlock_row **ret_rows, size_t *ret_n)
{
    struct ctl_fields *f = malloc(sizeof(*f));
    struct unlock_row *rows = NULL;
    char **lines = NULL, line[64];
    size_t n = 0, k = 0;
    int r;

    if (!f)
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    snprintf(line, sizeof(line), "COUNTERS max=%d", UNLOCK_ROWS);
    r = ctl_command(ctl, "COUNTERS", line, &lines, &n);
    if (r == 0) {
        rows = calloc(n ? n : 1, sizeof(*rows));
        if (!rows)
            r = ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    }
    for (size_t i = 1; r == 0 && i < n; i++) {
        const char *rule, *actor;

        if (ctl_fields_parse(lines[i], f) < 0 || !(rule = ctl_field(f, "rule")) ||
            !(actor = ctl_field(f, "actor")))
            continue;
        snprintf(rows[k].rule, sizeof(rows[k].rule), "%s", rule);
        snprintf(rows[k].actor, sizeof(rows[k].actor), "%s", actor);
        k++;
    }
    divvy_lines_free(lines, n);
    free(f);
    if (r != 0) {
        free(rows);
        return r;
    }
    *ret_rows = rows;
    *ret_n = k;
    return 0;
}

/* Whether @value is the source --source names: the address itself, or the
 * actor's masked form of it ("203.0.113.9/32"). */
static bool unlock_source_is(const char *value, const char *source)
{
    size_t len = strlen(source);

    return strcmp(value, source) == 0 ||
           (strncmp(value, source, len) == 0 && value[len] == '/' && !strchr(source, '/'));
}

/* The request that reaches @row's counter of @ur: the rule's exact match
 * pairs, then the actor's values, as one RESET line into @line. */
static int unlock_request(const struct unlock_rule *ur, char vals[][TOP_FIELD_MAX],
                          char *line, size_t size)
{
    char pairs[UNLOCK_PAIRS][TOP_FIELD_MAX];
    size_t n_pairs, pos = (size_t)snprintf(line, size, "RESET");
    int q = 0;

    unlock_split(ur->match, ' ', pairs, UNLOCK_PAIRS, &n_pairs);
    for (size_t i = 0; i < n_pairs && q == 0; i++) {
        char *eq = strchr(pairs[i], '=');
        bool actor = false;

        if (!eq || strchr(eq + 1, '*'))
            continue;               /* a glob: the actor gives the value, or no request can */
        /* An operator (docs/rules.md "Addresses and negation"): a negation
         * holds without the key; a cidr needs the actor's value. */
        if (strncmp(eq + 1, "cidr(", 5) == 0 || strncmp(eq + 1, "not(", 4) == 0 ||
            strncmp(eq + 1, "not_cidr(", 9) == 0)
            continue;
        *eq = '\0';
        for (size_t k = 0; k < ur->n_keys; k++)
            actor |= strcmp(ur->keys[k], pairs[i]) == 0;
        if (!actor)
            q = ctl_append_pair(line, size, &pos, pairs[i], eq + 1);
    }
    for (size_t k = 0; k < ur->n_keys && q == 0; k++)
        q = ctl_append_pair(line, size, &pos, ur->keys[k], vals[k]);
    return q;
}

/* Whether @row is the user's: its actor's user= value, or its rule's
 * match user=USER exactly; with --source, its rhost= that source.  Adds the
 * RESET that reaches it to u->requests. */
static int unlock_consider(struct unlock *u, struct unlock_row *row)
{
    const struct unlock_rule *ur = unlock_rule_of(u, row->rule);
    char vals[UNLOCK_KEYS][TOP_FIELD_MAX], want[TOP_FIELD_MAX + 8];
    char line[CTL_LINE_MAX], **grown;
    size_t n_vals = 0;
    bool user_key = false, user_ok = false, source_ok = !u->source;

    if (!ur || !ur->login)
        return 0;
    for (size_t k = 0; k < ur->n_keys; k++)
        user_key |= strcmp(ur->keys[k], "user") == 0;
    snprintf(row->text, sizeof(row->text), "%s", row->actor);
    if (row->actor[0] == '#') {
        /* A digest: whose it is shows only if a RESET below ends it. */
        row->mine = user_key;
        return 0;
    }
    if (ur->n_keys == 1) {
        snprintf(vals[0], sizeof(vals[0]), "%s", row->actor);
        n_vals = 1;
    } else {
        char raw[UNLOCK_KEYS][TOP_FIELD_MAX];

        unlock_split(row->actor, ',', raw, UNLOCK_KEYS, &n_vals);
        for (size_t k = 0; k < n_vals; k++)
            top_unescape(raw[k], strlen(raw[k]), vals[k], sizeof(vals[k]));
    }
    if (n_vals != ur->n_keys)
        return 0;
    snprintf(want, sizeof(want), "user=%s", u->user);
    for (size_t k = 0; k < ur->n_keys; k++) {
        if (strcmp(ur->keys[k], "user") == 0)
            user_ok = strcmp(vals[k], u->user) == 0;
        else if (strcmp(ur->keys[k], "rhost") == 0 && u->source)
            source_ok = unlock_source_is(vals[k], u->source);
    }
    if (!user_key) {
        /* Keyed by source only: the user's when the rule matches that user alone. */
        char pairs[UNLOCK_PAIRS][TOP_FIELD_MAX];
        size_t n_pairs;

        unlock_split(ur->match, ' ', pairs, UNLOCK_PAIRS, &n_pairs);
        for (size_t i = 0; i < n_pairs; i++)
            user_ok |= strcmp(pairs[i], want) == 0;
    }
    if (!user_ok || !source_ok)
        return 0;
    row->mine = true;
    for (size_t k = 0, pos = 0; k < ur->n_keys && pos < sizeof(row->text); k++) {
        int n = snprintf(row->text + pos, sizeof(row->text) - pos, "%s%s=%s", k ? " " : "",
                         ur->keys[k], vals[k]);

        pos += n > 0 ? (size_t)n : 0;
    }
    if (unlock_request(ur, vals, line, sizeof(line)) < 0)
        return 0;                   /* not expressible as a request: left as it is */
    for (size_t i = 0; i < u->n_requests; i++)
        if (strcmp(u->requests[i], line) == 0)
            return 0;
    grown = realloc(u->requests, (u->n_requests + 1) * sizeof(*grown));
    if (!grown)
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    u->requests = grown;
    u->requests[u->n_requests] = strdup(line);
    if (!u->requests[u->n_requests])
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    u->n_requests++;
    return 0;
}

/* Sends @line (a RESET) and checks its answer. */
static int unlock_send(struct ctl *ctl, const char *line)
{
    char **lines = NULL;
    size_t n = 0;
    int r = ctl_send(ctl, "RESET", line, &lines, &n);

    if (r > 0)
        return r;
    if (n == 0 || strncmp(lines[0], "OK ", 3) != 0)
        r = n > 0 && strncmp(lines[0], "ERR ", 4) == 0
                ? ctl_err_reply(ctl, "RESET", lines[0])
                : ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd at %s: unexpected reply to %s: %s",
                           ctl->address, line, n > 0 ? lines[0] : "(nothing)");
    divvy_lines_free(lines, n);
    return r;
}

static bool unlock_still_there(const struct unlock_row *row, const struct unlock_row *after,
                               size_t n_after)
{
    for (size_t i = 0; i < n_after; i++)
        if (strcmp(after[i].rule, row->rule) == 0 && strcmp(after[i].actor, row->actor) == 0)
            return true;
    return false;
}

int cmd_unlock(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        CTL_LONGOPTS,
        { "source", required_argument, NULL, 'S' },
        { NULL, 0, NULL, 0 },
    };
    struct unlock u = { 0 };
    struct unlock_row *before = NULL, *after = NULL;
    size_t n_before = 0, n_after = 0, cleared = 0;
    json_t *list = NULL;
    int opt, r;

    ctl_getopt_reset();
    while ((opt = ctl_getopt(ctl, cmd, argc, argv, ":" CTL_SHORTOPTS, longopts)) > 0) {
        if (opt != 'S')
            return ctl_usage(cmd, "unknown option");
        if (!optarg[0] || strpbrk(optarg, " \t\"\n"))
            return ctl_usage(cmd, "--source: '%s' is not an address", optarg);
        u.source = optarg;
    }
    if (opt < 0)
        return ctl_opts_exit(opt);
    if (optind + 1 != argc)
        return ctl_usage(cmd, optind >= argc ? "needs a USER" : "takes one USER");
    u.user = argv[optind];
    if (!u.user[0] || strpbrk(u.user, "\"\n") || strlen(u.user) >= TOP_FIELD_MAX)
        return ctl_usage(cmd, "'%s' is not a user name", u.user);

    r = ctl_connect(ctl);
    /* COUNTERS first: a non-admin learns that from its refusal. */
    if (r == 0)
        r = unlock_fetch(ctl, &before, &n_before);
    if (r == 0)
        r = unlock_load_rules(ctl, &u);
    for (size_t i = 0; r == 0 && i < n_before; i++)
        r = unlock_consider(&u, &before[i]);
    if (r == 0 && u.source) {
        /* pam_divvy's own request for that source (docs/pam.md): reaches what
         * the listing could not show. */
        char line[CTL_LINE_MAX];
        size_t pos = (size_t)snprintf(line, sizeof(line), "RESET");

        if (ctl_append_pair(line, sizeof(line), &pos, "event", "authfail") < 0 ||
            ctl_append_pair(line, sizeof(line), &pos, "user", u.user) < 0 ||
            ctl_append_pair(line, sizeof(line), &pos, "rhost", u.source) < 0)
            r = ctl_usage(cmd, "the request is longer than a protocol line");
        else
            r = unlock_send(ctl, line);
    }
    for (size_t i = 0; r == 0 && i < u.n_requests; i++)
        r = unlock_send(ctl, u.requests[i]);
    if (r == 0)
        r = unlock_fetch(ctl, &after, &n_after);
    if (r != 0)
        goto out;

    list = json_array();
    for (size_t i = 0; i < n_before; i++) {
        const struct unlock_row *row = &before[i];

        if (!row->mine || unlock_still_there(row, after, n_after))
            continue;
        cleared++;
        json_array_append_new(list, json_pack("{s:s, s:s, s:s}", "rule", row->rule, "actor",
                                              row->actor, "shown", row->text));
    }
    if (ctl->json) {
        r = ctl_json_print(json_pack("{s:s, s:s?, s:I, s:O, s:I}", "user", u.user, "source",
                                     u.source, "cleared", (json_int_t)cleared, "counters", list,
                                     "requests", (json_int_t)u.n_requests));
    } else {
        printf("cleared %zu login counter(s) of %s%s%s\n", cleared, u.user,
               u.source ? " from " : "", u.source ? u.source : "");
        for (size_t i = 0; i < n_before; i++) {
            const struct unlock_row *row = &before[i];

            if (row->mine && !unlock_still_there(row, after, n_after))
                printf("%s  %s\n", row->rule, row->text);
        }
        r = CTL_EXIT_OK;
    }
    if (r == CTL_EXIT_OK && cleared == 0)
        r = ctl_fail(CTL_EXIT_NO, "%s has no login counter to clear%s%s", u.user,
                     u.source ? " from " : "", u.source ? u.source : "");
out:
    json_decref(list);
    for (size_t i = 0; i < u.n_requests; i++)
        free(u.requests[i]);
    free(u.requests);
    free(u.rules);
    free(before);
    free(after);
    return r;
}
