/* SPDX-License-Identifier: MIT */
/*
 * divvyctl's request verbs: hit, take, debit, peek and reset (one cmd_hit(), told
 * apart by name) send a request as an application would and print the
 * answer; explain asks divvyd which rule decides a request and why not the
 * others.  KEY=VALUE operands become the request's pairs here.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "divvyctl.h"


const char ctl_help_hit[] =
    "Usage: divvyctl hit [OPTIONS] KEY=VALUE...\n"
    "\n"
    "Takes one credit for the request KEY=VALUE..., exactly as an application's\n"
    "HIT would (the counters change), and prints the answer on one line:\n"
    "\n"
    "  allowed credit=999 reset_seconds=60 rule=status\n"
    "\n"
    "allowed or denied; the credit left; the seconds until the quota resets (or,\n"
    "for a token bucket, until the next credit); and the rule that decided (its\n"
    "label, or its 16-hex-digit id).  Use peek to look without taking.\n"
    "\n"
    "Arguments are split at their first '='.  divvyctl quotes values for the\n"
    "protocol, so 'path=/a b' needs shell quoting only; a value may not contain\n"
    "'\"' or a newline.  At most 32 distinct keys.  As root (or divvy-admin) on\n"
    "the Unix socket the request is privileged and matches source = privileged\n"
    "rules, as pam_divvy's requests do.\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"allowed\": true, \"credit\": 999, \"reset_seconds\": 60,\n"
    "                      \"rule\": \"status\", \"request\": {\"method\": \"GET\", ...}}\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 allowed, 1 denied, 2 usage or malformed request, 3 divvyd\n"
    "unreachable, 4 no access to the socket.\n"
    "\n"
    "Example:\n"
    "  divvyctl hit method=GET path=/status\n";

const char ctl_help_take[] =
    "Usage: divvyctl take [OPTIONS] N KEY=VALUE...\n"
    "\n"
    "Takes N credits (1 to 1000000000) for the request, all or nothing: either\n"
    "N credits are left and all are taken, or none is.  Output, JSON and exit\n"
    "status as for hit (see divvyctl hit --help).\n"
    "\n"
    "Options:\n"
    "  -j, --json          as for hit\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 taken, 1 denied (nothing taken), 2 usage, 3 divvyd\n"
    "unreachable, 4 no access to the socket.\n"
    "\n"
    "Example:\n"
    "  divvyctl take 5 service=sshd user=alice rhost=203.0.113.9 event=authfail\n";

const char ctl_help_debit[] =
    "Usage: divvyctl debit [OPTIONS] N KEY=VALUE...\n"
    "\n"
    "Charges N credits (1 to 1000000000000) already spent (bytes sent, tokens a\n"
    "model generated) to the request, even more than is left: the balance may\n"
    "go below zero, and later hits are denied until the window or bucket has\n"
    "paid the debt back (divvy_debit(3), divvyctl(8)).  Prints allowed when the\n"
    "balance is still zero or more after the charge, denied when it went into\n"
    "debt (credit 0); the charge is made either way.  Output and JSON as for\n"
    "hit (see divvyctl hit --help).\n"
    "\n"
    "Options:\n"
    "  -j, --json          as for hit\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 charged, balance not negative, 1 charged into debt, 2 usage,\n"
    "3 divvyd unreachable, 4 no access to the socket.\n"
    "\n"
    "Example:\n"
    "  divvyctl debit 1500 model=small user=alice\n";

const char ctl_help_peek[] =
    "Usage: divvyctl peek [OPTIONS] KEY=VALUE...\n"
    "\n"
    "Shows what the request would see now, taking nothing: allowed when at\n"
    "least one credit is left, the credit, the seconds until the reset and the\n"
    "deciding rule.  Output, JSON and exit status as for hit.  pam_divvy's\n"
    "preauth mode asks exactly this question.\n"
    "\n"
    "Options:\n"
    "  -j, --json          as for hit\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 a credit is left, 1 none is, 2 usage, 3 divvyd unreachable,\n"
    "4 no access to the socket.\n"
    "\n"
    "Example:\n"
    "  divvyctl peek service=sshd user=alice rhost=203.0.113.9 event=authfail\n";

const char ctl_help_reset[] =
    "Usage: divvyctl reset [OPTIONS] KEY=VALUE...\n"
    "\n"
    "Admin command.  Forgets the counters this request touches: those of every\n"
    "rule it matches (continue and canary rules on the way included), for this\n"
    "request's actor values only.  Prints what a hit would see for the deciding\n"
    "rule afterwards, without taking anything:\n"
    "\n"
    "  reset credit=5 reset_seconds=0 rule=login-user-source\n"
    "\n"
    "To unlock a user locked out by pam_divvy from one source, send what the\n"
    "module sends:\n"
    "  divvyctl reset event=authfail user=alice rhost=203.0.113.9\n"
    "(`divvyctl locked` lists who is locked out.)  divvyd logs the reset with\n"
    "your uid.\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"reset\": true, \"counters\": 1, \"credit\": 5,\n"
    "                      \"reset_seconds\": 0, \"rule\": \"login-user-source\",\n"
    "                      \"request\": {...}} (counters: those on the path RESET\n"
    "                      forgets; \"reset\" is false when there are none)\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "A login counter is per user and source: without rhost= the request matches\n"
    "another rule (login-local keeps no counter) and nothing is reset.  That is\n"
    "exit status 1, with a note on standard error.  `divvyctl unlock USER` clears\n"
    "every login counter of a user without knowing the source.\n"
    "\n"
    "Exit status: 0 reset, 1 nothing to reset (no rule the request matches keeps a\n"
    "counter that RESET forgets), 2 usage, 3 divvyd unreachable, 4 permission\n"
    "denied (not root or divvy-admin, or over TCP).\n";

const char ctl_help_explain[] =
    "Usage: divvyctl explain [OPTIONS] KEY=VALUE...\n"
    "\n"
    "Shows how the rules decide the request, consuming nothing: every rule up to\n"
    "the deciding one, with why each earlier rule did not match (a missing key,\n"
    "a value its pattern rejects, a privileged rule and an unprivileged caller),\n"
    "which continue/canary rules also apply, and the deciding rule with the\n"
    "credit the request would see now (a PEEK):\n"
    "\n"
    "  rule 0 (status): no match: path=/pantry/x does not match /status\n"
    "  rule 2 (cookies): decides\n"
    "      match: method=GET path=/pantry/cookies/* ip=*\n"
    "  now: allowed credit=2 reset_seconds=3599\n"
    "\n"
    "As root (or divvy-admin) on the Unix socket the request is privileged, as\n"
    "pam_divvy's are; over TCP or as another user it is not.\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"request\": {...}, \"rules\": [{\"rule\": 0, \"id\": ...,\n"
    "                      \"verdict\": \"no-match\", \"match\": ..., \"reason\": ...},\n"
    "                      ...], \"decided_by\": {\"rule\": 2, \"id\": \"cookies\"},\n"
    "                      \"now\": {\"allowed\": true, \"credit\": 2, ...}}\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 explained, 2 usage, 3 divvyd unreachable, 4 no access to the\n"
    "socket.\n"
    "\n"
    "Example:\n"
    "  divvyctl explain method=GET path=/pantry/cookies/oatmeal ip=10.0.0.1\n";

/* ---- request arguments ------------------------------------------------------ */

/* Splits KEY=VALUE operands into @kv (pointing into argv). */
static int ctl_parse_kv(const struct ctl_cmd *cmd, int argc, char **argv,
                        struct divvy_kv *kv, size_t *ret_n)
{
    size_t n = 0;

    for (int i = 0; i < argc; i++) {
        char *eq = strchr(argv[i], '=');

        if (!eq || eq == argv[i])
            return ctl_usage(cmd, "expected KEY=VALUE, got '%s'", argv[i]);
        if ((size_t)i >= DIVVY_MAX_KEYS * 4)
            return ctl_usage(cmd, "too many KEY=VALUE arguments (at most %d keys)",
                             DIVVY_MAX_KEYS);
        *eq = '\0';
        kv[n].key = argv[i];
        kv[n].value = eq + 1;
        n++;
    }
    *ret_n = n;
    return 0;
}

static json_t *ctl_json_request(const struct divvy_kv *kv, size_t n)
{
    json_t *o = json_object();

    for (size_t i = 0; o && i < n; i++)
        json_object_set_new(o, kv[i].key, json_string(kv[i].value));
    return o;
}

/* Appends " key=value" to @line, quoting as docs/protocol.md asks. */
int ctl_append_pair(char *line, size_t size, size_t *pos, const char *key,
                           const char *value)
{
    const char *s[2] = { key, value };
    size_t p = *pos;

    for (int k = 0; k < 2; k++) {
        bool quote = s[k][0] == '\0';
        size_t len = strlen(s[k]);
        int n;

        if (strpbrk(s[k], "\"\n"))
            return -EINVAL;
        for (size_t i = 0; i < len && !quote; i++)
            quote = ctl_is_space(s[k][i]) || s[k][i] == '=';
        n = snprintf(line + p, size - p, "%s%s%s%s", k == 0 ? " " : "=", quote ? "\"" : "",
                     s[k], quote ? "\"" : "");
        if (n < 0 || (size_t)n >= size - p)
            return -EMSGSIZE;
        p += (size_t)n;
    }
    *pos = p;
    return 0;
}

/* ---- hit, take, peek, reset ------------------------------------------------------ */

int cmd_hit(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    struct divvy_kv kv[DIVVY_MAX_KEYS * 4];
    struct divvy_result res = { .size = sizeof(res) };
    bool debit = strcmp(cmd->name, "debit") == 0;
    bool take = debit || strcmp(cmd->name, "take") == 0;
    bool reset = strcmp(cmd->name, "reset") == 0;
    const char *verb = reset ? "RESET" : debit ? "DEBIT" : take ? "TAKE"
                     : strcmp(cmd->name, "peek") == 0 ? "PEEK" : "HIT";
    long amount = 1, most = debit ? 1000000000000L : 1000000000L;
    size_t n_kv = 0, clearable = 0;
    json_t *doc;
    int r, first;

    first = ctl_simple_opts(ctl, cmd, argc, argv);
    if (first < 0)
        return ctl_opts_exit(first);
    if (take) {
        if (first >= argc)
            return ctl_usage(cmd, "needs a count N and KEY=VALUE arguments");
        if (ctl_parse_int(argv[first], 1, most, &amount) < 0)
            return ctl_usage(cmd, "N must be a number from 1 to %ld, not '%s'", most,
                             argv[first]);
        first++;
    }
    r = ctl_parse_kv(cmd, argc - first, argv + first, kv, &n_kv);
    if (r > 0)
        return r;
    /* No keys would ask about the default rule alone: never what was meant. */
    if (n_kv == 0)
        return ctl_usage(cmd, take ? "needs KEY=VALUE arguments after N"
                                   : "needs KEY=VALUE arguments");

    r = ctl_connect(ctl);
    if (r > 0)
        return r;
    switch (verb[0]) {
    case 'R':
        /* What the path holds that RESET may forget, asked first (EXPLAIN). */
        r = ctl_reset_clearable(ctl, cmd, kv, n_kv, &clearable);
        if (r > 0)
            return r;
        r = divvy_reset(ctl->h, kv, n_kv, &res);
        break;
    case 'T':
        r = divvy_take(ctl->h, (uint64_t)amount, kv, n_kv, &res);
        break;
    case 'D':
        r = divvy_debit(ctl->h, (uint64_t)amount, kv, n_kv, &res);
        break;
    case 'P':
        r = divvy_peek(ctl->h, kv, n_kv, &res);
        break;
    default:
        r = divvy_hit(ctl->h, kv, n_kv, &res);
        break;
    }
    if (r < 0)
        return ctl_client_error(ctl, verb, r);

    if (ctl->json) {
        doc = json_object();
        if (doc) {
            if (reset) {
                json_object_set_new(doc, "reset", json_boolean(clearable > 0));
                json_object_set_new(doc, "counters", json_integer((json_int_t)clearable));
            }
            json_object_set_new(doc, "allowed", json_boolean(res.allowed));
            json_object_set_new(doc, "credit", json_integer((json_int_t)res.credit));
            json_object_set_new(doc, "reset_seconds",
                                json_integer((json_int_t)res.reset_seconds));
            json_object_set_new(doc, "rule", json_string(res.rule));
            json_object_set_new(doc, "fast_path", json_boolean(res.fast_path));
            json_object_set_new(doc, "request", ctl_json_request(kv, n_kv));
        }
        r = ctl_json_print(doc);
    } else {
        printf("%s credit=%" PRIu64 " reset_seconds=%" PRIu64 "%s%s%s\n",
               reset ? "reset" : res.allowed ? "allowed" : "denied", res.credit,
               res.reset_seconds, res.rule[0] ? " rule=" : "", res.rule,
               res.fast_path ? " path=fast" : "");
        r = CTL_EXIT_OK;
    }
    if (r == CTL_EXIT_OK && !reset && !res.allowed)
        r = CTL_EXIT_NO;
    if (r == CTL_EXIT_OK && reset && clearable == 0)
        r = ctl_fail(CTL_EXIT_NO, "nothing was reset: no rule this request matches keeps a "
                     "counter RESET forgets (rule %s keeps none, or is resettable = false); "
                     "a login counter is per user and source: divvyctl unlock USER",
                     res.rule[0] ? res.rule : "?");
    return r;
}

int ctl_request_line(const struct ctl_cmd *cmd, const char *verb, const struct divvy_kv *kv,
                     size_t n_kv, char *line, size_t size)
{
    size_t pos = (size_t)snprintf(line, size, "%s", verb);
    int r;

    for (size_t i = 0; i < n_kv; i++) {
        r = ctl_append_pair(line, size - 1, &pos, kv[i].key, kv[i].value);
        if (r == -EINVAL)
            return ctl_usage(cmd, "'%s=%s': a key or value may not contain '\"' or a newline",
                             kv[i].key, kv[i].value);
        if (r < 0)
            return ctl_usage(cmd, "the request is longer than a protocol line (4096 bytes)");
    }
    return 0;
}

/* ---- explain -------------------------------------------------------------------------- */

/* EXPLAIN's cause= in words (docs/protocol.md "EXPLAIN"). */
static const char *ctl_explain_cause(const char *cause)
{
    if (strcmp(cause, "zero-limit") == 0)
        return "always denied (credit_limit = 0)";
    if (strcmp(cause, "no-limit") == 0)
        return "always allowed (reset_seconds = 0)";
    if (strcmp(cause, "redis-down") == 0)
        return "Redis is down and on_redis_error = closed: denied";
    if (strcmp(cause, "redis-down-open") == 0)
        return "Redis is down and on_redis_error = open: allowed, not counted";
    if (strcmp(cause, "redis-down-local") == 0)
        return "Redis is down and on_redis_error = local: this host's counter decides";
    return cause;
}

int cmd_explain(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    struct divvy_kv kv[DIVVY_MAX_KEYS * 4];
    struct divvy_result res = { .size = sizeof(res) };
    struct ctl_fields f;
    char line[CTL_LINE_MAX], **lines = NULL;
    size_t n = 0, n_kv = 0;
    json_t *doc = NULL, *steps = NULL, *decided = NULL;
    const char *decided_cause = "";
    int r, first, peek;

    first = ctl_simple_opts(ctl, cmd, argc, argv);
    if (first < 0)
        return ctl_opts_exit(first);
    r = ctl_parse_kv(cmd, argc - first, argv + first, kv, &n_kv);
    if (r > 0)
        return r;
    r = ctl_request_line(cmd, "EXPLAIN", kv, n_kv, line, sizeof(line));
    if (r > 0)
        return r;
    r = ctl_command(ctl, "EXPLAIN", line, &lines, &n);
    if (r > 0)
        return r;
    /* What the deciding rule would say now; a failure here only loses that line. */
    peek = divvy_peek(ctl->h, kv, n_kv, &res);

    if (ctl->json) {
        doc = json_object();
        steps = json_array();
    } else {
        printf("request:");
        for (size_t i = 0; i < n_kv; i++)
            printf(" %s=%s", kv[i].key, kv[i].value);
        printf("%s\n", n_kv ? "" : " (no keys)");
    }
    for (size_t i = 1; i < n; i++) {
        const char *id, *verdict, *match, *reason, *idx, *cause;

        if (ctl_fields_parse(lines[i], &f) < 0) {
            r = ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd sent an EXPLAIN line divvyctl cannot "
                         "read: %s", lines[i]);
            goto out;
        }
        idx = ctl_field(&f, "rule");
        id = ctl_field(&f, "id");
        verdict = ctl_field(&f, "verdict");
        match = ctl_field(&f, "match");
        reason = ctl_field(&f, "reason");
        cause = ctl_field(&f, "cause");         /* older divvyd: none */
        if (!idx || !id || !verdict) {
            r = ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd sent an EXPLAIN line without rule, id "
                         "or verdict: %s", lines[i]);
            goto out;
        }
        if (ctl->json) {
            json_array_append_new(steps, json_pack("{s:o, s:s, s:s, s:s, s:s, s:s?}", "rule",
                                                   ctl_json_value(idx), "id", id, "verdict",
                                                   verdict, "match", match ? match : "",
                                                   "reason", reason ? reason : "",
                                                   "cause", cause));
            if (strcmp(verdict, "decides") == 0) {
                json_decref(decided);
                decided = json_pack("{s:o, s:s}", "rule", ctl_json_value(idx), "id", id);
            }
            continue;
        }
        if (strcmp(verdict, "no-match") == 0) {
            printf("rule %s (%s): no match: %s\n", idx, id, reason && reason[0] ? reason
                                                                                 : "-");
            continue;
        }
        if (strcmp(verdict, "decides") == 0)
            printf("rule %s (%s): decides\n", idx, id);
        else if (strcmp(verdict, "continue") == 0)
            printf("rule %s (%s): matches, continue: consumes too, and decides if it denies\n",
                   idx, id);
        else if (strcmp(verdict, "canary") == 0)
            printf("rule %s (%s): matches, canary: consumes and counts, its answer ignored\n",
                   idx, id);
        else
            printf("rule %s (%s): %s\n", idx, id, verdict);
        printf("    match: %s\n", match ? match : "?");
        if (cause && strcmp(cause, "counter") != 0)
            printf("    answer: %s\n", ctl_explain_cause(cause));
        if (strcmp(verdict, "decides") == 0 && cause)
            decided_cause = cause;
    }
    if (ctl->json) {
        json_object_set_new(doc, "request", ctl_json_request(kv, n_kv));
        json_object_set_new(doc, "rules", steps);
        json_object_set_new(doc, "decided_by", decided ? decided : json_null());
        if (peek >= 0)
            json_object_set_new(doc, "now",
                                json_pack("{s:b, s:I, s:I, s:s}", "allowed", res.allowed,
                                          "credit", (json_int_t)res.credit, "reset_seconds",
                                          (json_int_t)res.reset_seconds, "rule", res.rule));
        steps = NULL;
        decided = NULL;
        r = ctl_json_print(doc);
        doc = NULL;
        goto out;
    }
    if (peek >= 0)
        printf("now: %s%s credit=%" PRIu64 " reset_seconds=%" PRIu64 "\n",
               res.allowed ? "allowed" : "denied",
               res.allowed || !decided_cause[0] ? ""
               : strncmp(decided_cause, "redis-down", 10) == 0 ? " (Redis is down: on_redis_error)"
               : strcmp(decided_cause, "zero-limit") == 0      ? " (credit_limit = 0)"
                                                               : " (quota)",
               res.credit, res.reset_seconds);
    r = CTL_EXIT_OK;
out:
    json_decref(doc);
    json_decref(steps);
    json_decref(decided);
    divvy_lines_free(lines, n);
    return r;
}
