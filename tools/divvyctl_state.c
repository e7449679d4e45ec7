/* SPDX-License-Identifier: MIT */
/*
 * divvyctl's verbs on the daemon's own state: status (is divvyd up, with
 * what), stats (its counters), rules (the loaded rules) and reload (read
 * the config again, saying why when it is rejected).  Each asks one admin
 * or read-only verb of the protocol and prints its reply as text or JSON.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "divvyctl.h"

const char ctl_help_status[] =
    "Usage: divvyctl status [OPTIONS]\n"
    "\n"
    "Says whether divvyd answers at the address (PING, with the round-trip time)\n"
    "and summarises its STATS: uptime, config generation and rules, connections,\n"
    "hits allowed and denied, reloads, and how full the counter tables are.\n"
    "Any user with access to the socket may run it.\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"address\": ..., \"running\": true, \"ping_ms\": 0.1,\n"
    "                      \"stats\": {\"uptime_seconds\": 86400, ...}}; when divvyd\n"
    "                      cannot be reached: {\"address\": ..., \"running\": false,\n"
    "                      \"error\": \"...\"} and exit status 3\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 divvyd answered; 3 it did not; 4 no access to the socket.\n"
    "\n"
    "Example:\n"
    "  divvyctl status || systemctl status divvyd\n";

const char ctl_help_rules[] =
    "Usage: divvyctl rules [OPTIONS]\n"
    "\n"
    "Lists the rules divvyd is using, in order (the first matching stop rule\n"
    "decides), one line each:\n"
    "\n"
    "  #  ID      LIMIT  PER    ALGORITHM POLICY   SOURCE     FAST ACTOR  MATCH\n"
    "  0  status  1000   1m 00s window    stop     any        no   -      method=GET ...\n"
    "\n"
    "ID is the rule's label, or 16 hex digits of its digest (the id counters,\n"
    "COUNTERS, EXPLAIN and top use).  PER is the window (a calendar window's\n"
    "unit and zone: \"month\", \"day Europe/Berlin\").  MATCH is the rule's match\n"
    "set (default for the default rule); * means present with any value.\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"rules\": [{\"rule\": 0, \"id\": \"status\", \"label\": \"\",\n"
    "                      \"match\": \"method=GET path=/status\", \"credit_limit\":\n"
    "                      1000, \"reset_seconds\": 60, \"algorithm\": \"window\",\n"
    "                      \"policy\": \"stop\", \"source\": \"any\", \"fast_path\":\n"
    "                      false, \"actor\": []}, ...]}\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 listed, 3 divvyd unreachable, 4 no access to the socket.\n"
    "\n"
    "divvyctl rules add|remove|list manage drop-in rules (admin): see\n"
    "`divvyctl rules add --help`.\n";

const char ctl_help_stats[] =
    "Usage: divvyctl stats [OPTIONS]\n"
    "\n"
    "Prints divvyd's STATS counters, one name and value per line (uptime_seconds,\n"
    "connections, hits_total, hits_accepted, hits_rejected, errors_total,\n"
    "reloads_ok, reloads_rejected, config_generation, rules, table_slots,\n"
    "table_live, fast_table_slots, fast_table_live, table_full_events,\n"
    "privileged_table_slots, privileged_table_live, and any that a newer divvyd\n"
    "adds).  The privileged table and denials_no_counter are shown to root and\n"
    "the admin group only.\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"uptime_seconds\": 86400, \"connections\": 12, ...}\n"
    "                      (integers; a value that is not one stays a string)\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 printed, 3 divvyd unreachable, 4 no access to the socket.\n";


/* ---- status ------------------------------------------------------------------ */

static uint64_t ctl_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t ctl_stat(char **lines, size_t n, const char *name)
{
    size_t len = strlen(name);

    for (size_t i = 1; i < n; i++) {
        if (strncmp(lines[i], name, len) == 0 && lines[i][len] == '=')
            return strtoull(lines[i] + len + 1, NULL, 10);
    }
    return 0;
}

/* STATS line @name's value as text ("" when absent). */
static const char *ctl_stat_str(char **lines, size_t n, const char *name)
{
    size_t len = strlen(name);

    for (size_t i = 1; i < n; i++) {
        if (strncmp(lines[i], name, len) == 0 && lines[i][len] == '=')
            return lines[i] + len + 1;
    }
    return "";
}

/* status's Redis line (docs/redis.md "Monitoring"): nothing while unused. */
static void ctl_status_redis(char **lines, size_t n)
{
    const char *state = ctl_stat_str(lines, n, "redis_state");
    char down[32];

    if (!state[0] || strcmp(state, "unused") == 0)
        return;
    if (strcmp(state, "down") == 0) {
        ctl_fmt_duration(ctl_stat(lines, n, "redis_down_seconds"), down, sizeof(down));
        printf("  redis        DOWN for %s at %s; on_redis_error %s%s\n", down,
               ctl_stat_str(lines, n, "redis_address"),
               ctl_stat_str(lines, n, "redis_on_error"),
               strcmp(ctl_stat_str(lines, n, "redis_on_error"), "closed") == 0
                   ? ": its rules deny every hit" : "");
    } else {
        printf("  redis        %s at %s, %" PRIu64 " connections; on_redis_error %s\n", state,
               ctl_stat_str(lines, n, "redis_address"), ctl_stat(lines, n, "redis_connections"),
               ctl_stat_str(lines, n, "redis_on_error"));
    }
    printf("  store        %" PRIu64 " strict and %" PRIu64 " lease rules; %" PRIu64
           " answers by on_redis_error\n", ctl_stat(lines, n, "redis_rules_strict"),
           ctl_stat(lines, n, "redis_rules_lease"), ctl_stat(lines, n, "redis_fallbacks"));
}

int cmd_status(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    char **lines = NULL, up[32], prv[64] = "(admins only)", no_counter[32] = "(admins only)";
    size_t n = 0;
    uint64_t t0, ping_us;
    json_t *doc, *stats;
    int r;

    if (!ctl_bare_opts(ctl, cmd, argc, argv, &r))
        return r;

    r = ctl_connect(ctl);
    if (r > 0)
        return r;
    t0 = ctl_now_us();
    r = divvy_command(ctl->h, "PING", &lines, &n);
    ping_us = ctl_now_us() - t0;
    if (r < 0 || n < 1 || strcmp(lines[0], "OK pong") != 0) {
        char why[640];

        if (r < 0)
            snprintf(why, sizeof(why), "%s", ctl_why(ctl, r));
        else
            snprintf(why, sizeof(why), "unexpected reply to PING: %s", n ? lines[0] : "");
        divvy_lines_free(lines, n);
        if (ctl->json) {
            doc = json_pack("{s:s, s:b, s:s}", "address", ctl->address, "running", 0,
                            "error", why);
            ctl_json_print(doc);
            return r == -EACCES ? CTL_EXIT_PERMISSION : CTL_EXIT_UNAVAILABLE;
        }
        if (r < 0)
            return ctl_client_error(ctl, "PING", r);
        return ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd at %s: %s", ctl->address, why);
    }
    divvy_lines_free(lines, n);

    r = ctl_command(ctl, "STATS", "STATS", &lines, &n);
    if (r > 0)
        return r;
    if (ctl->json) {
        stats = json_object();
        for (size_t i = 1; stats && i < n; i++) {
            char *eq = strchr(lines[i], '=');

            if (!eq)
                continue;
            *eq = '\0';
            json_object_set_new(stats, lines[i], ctl_json_value(eq + 1));
        }
        doc = json_pack("{s:s, s:b, s:f, s:o}", "address", ctl->address, "running", 1,
                        "ping_ms", (double)ping_us / 1000.0, "stats", stats);
        divvy_lines_free(lines, n);
        return ctl_json_print(doc);
    }
    ctl_fmt_duration(ctl_stat(lines, n, "uptime_seconds"), up, sizeof(up));
    printf("divvyd at %s: running (ping %.2f ms)\n", ctl->address, (double)ping_us / 1000.0);
    printf("  uptime       %s\n", up);
    printf("  config       generation %" PRIu64 ", %" PRIu64 " rules; reloads: %" PRIu64
           " ok, %" PRIu64 " rejected\n", ctl_stat(lines, n, "config_generation"),
           ctl_stat(lines, n, "rules"), ctl_stat(lines, n, "reloads_ok"),
           ctl_stat(lines, n, "reloads_rejected"));
    printf("  connections  %" PRIu64 "\n", ctl_stat(lines, n, "connections"));
    printf("  hits         %" PRIu64 " (%" PRIu64 " allowed, %" PRIu64 " denied); errors %"
           PRIu64 "\n", ctl_stat(lines, n, "hits_total"), ctl_stat(lines, n, "hits_accepted"),
           ctl_stat(lines, n, "hits_rejected"), ctl_stat(lines, n, "errors_total"));
    /* divvyd shows the login figures to root and admins only. */
    if (ctl_stat_str(lines, n, "privileged_table_slots")[0])
        snprintf(prv, sizeof(prv), "%" PRIu64 " of %" PRIu64,
                 ctl_stat(lines, n, "privileged_table_live"),
                 ctl_stat(lines, n, "privileged_table_slots"));
    if (ctl_stat_str(lines, n, "denials_no_counter")[0])
        snprintf(no_counter, sizeof(no_counter), "%" PRIu64,
                 ctl_stat(lines, n, "denials_no_counter"));
    printf("  counters     %" PRIu64 " of %" PRIu64 " slots; fast path %" PRIu64 " of %" PRIu64
           "; privileged %s; table full %" PRIu64 " times\n",
           ctl_stat(lines, n, "table_live"), ctl_stat(lines, n, "table_slots"),
           ctl_stat(lines, n, "fast_table_live"), ctl_stat(lines, n, "fast_table_slots"), prv,
           ctl_stat(lines, n, "table_full_events"));
    printf("  denials      quota %" PRIu64 ", redis-down %" PRIu64 ", zero-limit %" PRIu64
           ", table-full %" PRIu64 ", no-counter %s\n",
           ctl_stat(lines, n, "denials_quota"), ctl_stat(lines, n, "denials_redis_down"),
           ctl_stat(lines, n, "denials_zero_limit"), ctl_stat(lines, n, "denials_table_full"),
           no_counter);
    ctl_status_redis(lines, n);
    divvy_lines_free(lines, n);
    return CTL_EXIT_OK;
}

/* ---- rules -------------------------------------------------------------------------- */

static json_t *ctl_json_rule(const struct ctl_fields *f)
{
    json_t *o = json_object();

    for (size_t i = 0; o && i < f->n; i++) {
        json_t *v;

        if (strcmp(f->name[i], "actor") == 0) {
            const char *a = f->value[i];

            v = json_array();
            while (v && *a) {
                size_t len = strcspn(a, ",");

                json_array_append_new(v, json_stringn(a, len));
                a += len + (a[len] == ',');
            }
        } else if (strcmp(f->name[i], "label") == 0 || strcmp(f->name[i], "id") == 0 ||
                   strcmp(f->name[i], "match") == 0) {
            v = json_string(f->value[i]);
        } else {
            v = ctl_json_value(f->value[i]);
        }
        json_object_set_new(o, f->name[i], v);
    }
    return o;
}

int cmd_rules(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    static const char *const cols[] = { "rule", "id", "credit_limit", "reset_seconds",
                                        "algorithm", "policy", "source", "fast_path", "actor",
                                        "match" };
    static const char *const heads[] = { "#", "ID", "LIMIT", "PER", "ALGORITHM", "POLICY",
                                         "SOURCE", "FAST", "ACTOR", "MATCH" };
    enum { N_COLS = sizeof(cols) / sizeof(cols[0]) };
    struct ctl_list l;
    struct ctl_fields *f;
    char cell[64];
    size_t width[N_COLS];
    int r;

    /* rules add|remove|list: the rules service (divvyctl_rules.c). */
    if (ctl_rules_edit_wanted(argc, argv))
        return cmd_rules_edit(ctl, cmd, argc, argv);
    if (!ctl_bare_opts(ctl, cmd, argc, argv, &r))
        return r;
    r = ctl_list_fetch(ctl, "RULES", "RULES", &l);
    if (r > 0)
        return r;
    f = l.f;
    for (size_t c = 0; c < N_COLS; c++)
        width[c] = strlen(heads[c]);
    /* Text: two passes, widths then rows; PER is shown as a duration. */
    for (int pass = 0; pass < (ctl->json ? 1 : 2); pass++) {
        if (pass == 1) {
            for (size_t c = 0; c < N_COLS; c++)
                printf("%-*s%s", c + 1 < N_COLS ? (int)width[c] : 0, heads[c],
                       c + 1 < N_COLS ? "  " : "\n");
        }
        for (size_t i = 1; i < l.n; i++) {
            if (ctl_fields_parse(l.lines[i], f) < 0) {
                r = ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd sent a RULES line divvyctl cannot "
                             "read: %s", l.lines[i]);
                goto out;
            }
            if (l.arr) {
                json_array_append_new(l.arr, ctl_json_rule(f));
                continue;
            }
            for (size_t c = 0; c < N_COLS; c++) {
                const char *v = ctl_field(f, cols[c]);
                uint64_t secs;

                if (!v)
                    v = "?";
                if (c == 3 && ctl_field(f, "calendar")) {
                    /* A calendar window: its unit, and its zone unless UTC. */
                    const char *tz = ctl_field(f, "time_zone");

                    snprintf(cell, sizeof(cell), "%s%s%s", ctl_field(f, "calendar"),
                             tz && strcmp(tz, "UTC") != 0 ? " " : "",
                             tz && strcmp(tz, "UTC") != 0 ? tz : "");
                    v = cell;
                } else if (c == 3 && ctl_field_u64(f, cols[c], &secs) == 0) {
                    ctl_fmt_duration(secs, cell, sizeof(cell));
                    v = cell;
                } else if (c == 7) {
                    v = strcmp(v, "true") == 0 ? "yes" : "no";
                } else if (c == 8 && !v[0]) {
                    v = "-";
                }
                if (pass == 0 && strlen(v) > width[c])
                    width[c] = strlen(v);
                else if (pass == 1)
                    printf("%-*s%s", c + 1 < N_COLS ? (int)width[c] : 0, v,
                           c + 1 < N_COLS ? "  " : "\n");
            }
        }
    }
    if (l.arr) {
        r = ctl_json_print(json_pack("{s:o}", "rules", l.arr));
        l.arr = NULL;
        goto out;
    }
    r = CTL_EXIT_OK;
out:
    ctl_list_free(&l);
    return r;
}

/* ---- stats -------------------------------------------------------------------------------- */

int cmd_stats(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    char **lines = NULL;
    size_t n = 0, width = 0;
    json_t *doc;
    int r;

    if (!ctl_bare_opts(ctl, cmd, argc, argv, &r))
        return r;
    r = ctl_command(ctl, "STATS", "STATS", &lines, &n);
    if (r > 0)
        return r;
    for (size_t i = 1; i < n; i++) {
        size_t len = strcspn(lines[i], "=");

        if (len > width)
            width = len;
    }
    doc = ctl->json ? json_object() : NULL;
    for (size_t i = 1; i < n; i++) {
        char *eq = strchr(lines[i], '=');

        if (!eq)
            continue;
        *eq = '\0';
        if (doc)
            json_object_set_new(doc, lines[i], ctl_json_value(eq + 1));
        else
            printf("%-*s  %s\n", (int)width, lines[i], eq + 1);
    }
    divvy_lines_free(lines, n);
    return ctl->json ? ctl_json_print(doc) : CTL_EXIT_OK;
}

