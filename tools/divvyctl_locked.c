/* SPDX-License-Identifier: MIT */
/*
 * divvyctl locked: the counters that have no credit left, i.e. who is
 * locked out of which rule right now and when they can try again, from the
 * rows top fetches (divvyctl_top.c).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "divvyctl_top.h"

#define LOCKED_ROWS       10000

const char ctl_help_locked[] =
    "Usage: divvyctl locked [OPTIONS]\n"
    "\n"
    "Admin command.  Lists the counters that have no credit left right now:\n"
    "which users, addresses or other actors are locked out of which rule, and\n"
    "for how long - the question pam_faillock cannot answer across hosts.  One\n"
    "line per counter:\n"
    "\n"
    "  RULE               ACTOR                          USED/LIMIT  UNLOCKS IN\n"
    "  login-user-source  user=alice rhost=203.0.113.9/32  5/5         14m 31s\n"
    "\n"
    "UNLOCKS IN is when the next credit arrives, i.e. when the actor can try\n"
    "again: a window's end, a token bucket's next refill step (not its refill\n"
    "to full), a sliding window's first moment with room for one hit, a lockout\n"
    "rule's lock end (a lockout counter in its ramping delay is not locked and\n"
    "not listed).\n"
    "\n"
    "RULE is the rule's label; a rule without one shows as its match,\n"
    "{ip=* method=GET path=/api/*}.\n"
    "\n"
    "Nothing locked: no lines, and a note on standard error.  To unlock a user\n"
    "locked out by pam_divvy's rules, from every source:\n"
    "  divvyctl unlock alice\n"
    "Any other counter: reset with the request that locked it.\n"
    "\n"
    "Options:\n"
    "  -r, --rule ID       only this rule (label or hex id, as `divvyctl rules`\n"
    "                      shows)\n"
    "  -m, --max N         at most N lines (default and limit 10000)\n"
    "  -j, --json          {\"locked\": [{\"rule\": ..., \"name\": ..., \"actor\": ...,\n"
    "                      \"fields\": {...}, \"credit\": 0, \"used\": 5, \"limit\": 5,\n"
    "                      \"reset_seconds\": 871, \"retry_seconds\": 871}, ...]}\n"
    "                      (retry: the UNLOCKS IN column; reset: until full)\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 listed (also when nothing is locked), 2 usage or unknown rule,\n"
    "3 divvyd unreachable, 4 permission denied (not root or divvy-admin).\n";

/* ---- locked ----------------------------------------------------------------------------- */

int cmd_locked(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        CTL_LONGOPTS,
        { "rule", required_argument, NULL, 'r' },
        { "max", required_argument, NULL, 'm' },
        { NULL, 0, NULL, 0 },
    };
    struct top_state st = { .generation = UINT64_MAX };
    size_t wr = 4, wa = 5;
    int opt, r;

    ctl_getopt_reset();
    while ((opt = ctl_getopt(ctl, cmd, argc, argv, ":" CTL_SHORTOPTS "r:m:", longopts)) > 0) {
        if (opt == 'r') {
            if (!top_valid_rule(optarg))
                return ctl_usage(cmd, "--rule: '%s' is not a rule label or id", optarg);
            st.rule = optarg;
        } else if (opt == 'm') {
            if (ctl_parse_int(optarg, 1, LOCKED_ROWS, &st.max) < 0)
                return ctl_usage(cmd, "--max: '%s' is not 1 to %d", optarg, LOCKED_ROWS);
        } else {
            return ctl_usage(cmd, "unknown option");
        }
    }
    if (opt < 0)
        return ctl_opts_exit(opt);
    if (optind != argc)
        return ctl_usage(cmd, "takes no arguments");

    /* COUNTERS first: a non-admin learns that from its refusal, not RULES'. */
    r = top_fetch(ctl, &st, true, st.max > 0 ? st.max : LOCKED_ROWS);
    if (r == 0)
        r = top_load_rules(ctl, &st);
    if (r > 0)
        goto out;
    if (ctl->json) {
        r = ctl_json_print(json_pack("{s:o}", "locked", top_json_rows(&st)));
        goto out;
    }
    for (size_t i = 0; i < st.n_rows; i++) {
        top_split_actor(&st, &st.rows[i], NULL);
        if (strlen(st.rows[i].name) > wr)
            wr = strlen(st.rows[i].name);
        if (strlen(st.rows[i].shown) > wa)
            wa = strlen(st.rows[i].shown);
    }
    if (st.n_rows == 0) {
        fprintf(stderr, "divvyctl: nothing is locked out%s%s\n", st.rule ? " of rule " : "",
                st.rule ? st.rule : "");
    } else {
        printf("%-*s  %-*s  %-10s  %s\n", (int)wr, "RULE", (int)wa, "ACTOR", "USED/LIMIT",
               "UNLOCKS IN");
    }
    for (size_t i = 0; i < st.n_rows; i++) {
        const struct top_counter *c = &st.rows[i];
        char when[32], used[48];

        ctl_fmt_duration(c->retry, when, sizeof(when));
        snprintf(used, sizeof(used), "%" PRIu64 "/%" PRIu64, c->used, c->limit);
        printf("%-*s  %-*s  %-10s  %s\n", (int)wr, c->name, (int)wa, c->shown, used, when);
    }
    r = CTL_EXIT_OK;
out:
    top_rules_free(st.rules, st.n_rules);
    free(st.rows);
    return r;
}
