/* SPDX-License-Identifier: MIT */
/*
 * divvyctl top: a view of divvyd's live counters (the admin verb COUNTERS,
 * docs/protocol.md), refreshing a table of the counters with the least
 * credit left (or the most used) until q or Ctrl-C; counters is one such
 * table, printed once (top --once).  Also the rows that
 * locked lists (divvyctl_locked.c): COUNTERS fetched and sorted, each actor
 * shown per actor key ("user=alice rhost=203.0.113.9"), using the keys
 * RULES reports.  The terminal is divvyctl_top_term.c's.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "divvyctl_top.h"

#define TOP_MAX_ROWS      10000     /* COUNTERS' own cap */
#define TOP_ONCE_ROWS     20

const char ctl_help_top[] =
    "Usage: divvyctl top [OPTIONS]\n"
    "\n"
    "Admin command.  Shows divvyd's live counters, the ones with the least credit\n"
    "left first (then the most used), refreshing every --interval seconds until\n"
    "you press q or Ctrl-C; s switches between least credit and most used.  The\n"
    "header line summarises STATS (uptime, rules, hits per second, table use).\n"
    "Columns: CREDIT left (as a hit would see it now), USED, LIMIT, RETRY IN\n"
    "(for a counter with no credit: when the next credit arrives and the actor\n"
    "can try again - a window's end, a token bucket's next refill step, a\n"
    "sliding window's first moment with room for one; - while credit is left),\n"
    "FULL IN (until the quota is full again), RULE (its label; a rule without\n"
    "one as its match, {ip=* method=GET path=/api/*}) and ACTOR,\n"
    "split into the rule's actor keys (`user=alice rhost=203.0.113.9`; an\n"
    "actor longer than 32 bytes is shown as #digest; a rule without actor as -).\n"
    "Only counters below their full quota are live; a quiet system shows none.\n"
    "\n"
    "When standard output is not a terminal, top prints a snapshot every interval\n"
    "(use --once for one).\n"
    "\n"
    "Options:\n"
    "  -1, --once          print one snapshot and exit (for scripts and tests)\n"
    "  -i, --interval SEC  seconds between refreshes, 0.1 to 3600 (default 2)\n"
    "  -r, --rule ID       only the counters of this rule (label or hex id)\n"
    "  -m, --max N         at most N counters (default: what fits the terminal;\n"
    "                      20 with --once or without a terminal; at most 10000)\n"
    "  -S, --sort KEY      credit (default: least credit left first) or used (most\n"
    "                      used first)\n"
    "  -j, --json          one snapshot as {\"counters\": [{\"rule\": ..., \"name\":\n"
    "                      ..., \"actor\": ..., \"fields\": {\"user\": ..., ...},\n"
    "                      \"credit\": 0, \"used\":\n"
    "                      5, \"limit\": 5, \"reset_seconds\": 871, \"retry_seconds\":\n"
    "                      871}, ...]} (reset: until full; retry: until the next\n"
    "                      credit, 0 while credit is left; rule: label or id,\n"
    "                      name: the RULE column; implies --once)\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 done, 2 usage or unknown rule, 3 divvyd unreachable, 4\n"
    "permission denied (not root or divvy-admin, or over TCP).\n";

const char ctl_help_counters[] =
    "Usage: divvyctl counters [OPTIONS]\n"
    "\n"
    "Admin command.  Prints divvyd's live counters once and exits: the table of\n"
    "`divvyctl top --once` (see divvyctl top --help for its columns), the ones\n"
    "with the least credit left first.  Only counters below their full quota\n"
    "are live; a quiet system shows none.  `divvyctl locked` lists only those\n"
    "with no credit left.\n"
    "\n"
    "Options:\n"
    "  -r, --rule ID       only the counters of this rule (label or hex id)\n"
    "  -m, --max N         at most N counters (default 20, at most 10000)\n"
    "  -S, --sort KEY      credit (default: least credit left first) or used (most\n"
    "                      used first)\n"
    "  -j, --json          as top --json\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 done, 2 usage or unknown rule, 3 divvyd unreachable, 4\n"
    "permission denied (not root or divvy-admin, or over TCP).\n"
    "\n"
    "Example:\n"
    "  divvyctl counters --rule login-user-source\n";

uint64_t top_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int top_rule_cmp(const void *a, const void *b)
{
    return strcmp(((const struct top_rule *)a)->id, ((const struct top_rule *)b)->id);
}

void top_rules_free(struct top_rule *rules, size_t n)
{
    for (size_t i = 0; rules && i < n; i++) {
        free(rules[i].id);
        free(rules[i].keys);
        free(rules[i].name);
    }
    free(rules);
}

/* The name top and locked show for a rule (struct top_rule), malloc'd. */
static char *top_rule_name(const char *label, const char *match)
{
    char *name = NULL;

    if (label && label[0])
        return strdup(label);
    if (!match || !match[0] || strcmp(match, "default") == 0)
        return strdup("default");
    return asprintf(&name, "{%s}", match) < 0 ? NULL : name;
}

/* (Re)loads the rule id -> actor keys table. */
int top_load_rules(struct ctl *ctl, struct top_state *st)
{
    struct ctl_fields *f = NULL;
    struct top_rule *rules = NULL;
    char **lines = NULL;
    size_t n = 0, k = 0;
    int r;

    r = ctl_command(ctl, "RULES", "RULES", &lines, &n);
    if (r > 0)
        return r;
    f = malloc(sizeof(*f));
    rules = calloc(n ? n : 1, sizeof(*rules));
    if (!f || !rules) {
        r = ctl_fail(CTL_EXIT_FAILURE, "out of memory");
        goto out;
    }
    for (size_t i = 1; i < n; i++) {
        const char *id, *actor;

        if (ctl_fields_parse(lines[i], f) < 0 || !(id = ctl_field(f, "id")))
            continue;
        actor = ctl_field(f, "actor");
        rules[k].id = strdup(id);
        rules[k].keys = strdup(actor ? actor : "");
        rules[k].name = top_rule_name(ctl_field(f, "label"), ctl_field(f, "match"));
        if (!rules[k].id || !rules[k].keys || !rules[k].name) {
            k++;
            r = ctl_fail(CTL_EXIT_FAILURE, "out of memory");
            goto out;
        }
        k++;
    }
    qsort(rules, k, sizeof(*rules), top_rule_cmp);
    top_rules_free(st->rules, st->n_rules);
    st->rules = rules;
    st->n_rules = k;
    rules = NULL;
    r = 0;
out:
    top_rules_free(rules, k);
    free(f);
    divvy_lines_free(lines, n);
    return r;
}

static const struct top_rule *top_rule_of(const struct top_state *st, const char *id)
{
    struct top_rule key = { .id = (char *)id };

    return bsearch(&key, st->rules, st->n_rules, sizeof(*st->rules), top_rule_cmp);
}

/* Undoes rules_actor()'s escaping of one value of a several-key actor. */
size_t top_unescape(const char *s, size_t len, char *out, size_t size)
{
    size_t o = 0;

    for (size_t i = 0; i < len && o + 1 < size; i++) {
        if (s[i] == '%' && i + 2 < len && strncmp(s + i, "%2C", 3) == 0) {
            out[o++] = ',';
            i += 2;
        } else if (s[i] == '%' && i + 2 < len && strncmp(s + i, "%25", 3) == 0) {
            out[o++] = '%';
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return o;
}

/* Fills @c->shown and, when @fields is not NULL, the actor's key -> value map. */
void top_split_actor(const struct top_state *st, struct top_counter *c, json_t *fields)
{
    const struct top_rule *rule = top_rule_of(st, c->rule);
    const char *keys = rule ? rule->keys : NULL, *a = c->actor;
    size_t pos = 0, n_keys = 0, n_vals = 1;

    /* A rule a reload added since RULES: its id until the next load. */
    snprintf(c->name, sizeof(c->name), "%s", rule ? rule->name : c->rule);
    c->shown[0] = '\0';
    if (!keys || c->actor[0] == '#') {
        snprintf(c->shown, sizeof(c->shown), "%s", c->actor[0] ? c->actor : "-");
        return;
    }
    if (!keys[0]) {
        snprintf(c->shown, sizeof(c->shown), "-");
        return;
    }
    for (const char *k = keys; *k; k++)
        n_keys += *k == ',';
    n_keys++;
    for (const char *v = a; *v; v++)
        n_vals += *v == ',';
    if (n_keys > 1 && n_vals != n_keys) {
        snprintf(c->shown, sizeof(c->shown), "%s", c->actor);
        return;
    }
    for (size_t i = 0; i < n_keys; i++) {
        size_t klen = strcspn(keys, ",");
        size_t vlen = n_keys > 1 ? strcspn(a, ",") : strlen(a);
        char value[TOP_FIELD_MAX], key[TOP_FIELD_MAX];
        int n;

        snprintf(key, sizeof(key), "%.*s", (int)klen, keys);
        if (n_keys > 1)
            top_unescape(a, vlen, value, sizeof(value));
        else
            snprintf(value, sizeof(value), "%.*s", (int)vlen, a);
        if (fields)
            json_object_set_new(fields, key, json_string(value));
        n = snprintf(c->shown + pos, sizeof(c->shown) - pos, "%s%s=%s", i ? " " : "", key,
                     value);
        if (n > 0 && (size_t)n < sizeof(c->shown) - pos)
            pos += (size_t)n;
        keys += klen + (keys[klen] == ',');
        a += vlen + (a[vlen] == ',');
    }
}

/* Fetches COUNTERS into st->rows.  @exhausted: only counters with no credit. */
int top_fetch(struct ctl *ctl, struct top_state *st, bool exhausted, long max)
{
    struct ctl_fields *f = NULL;
    char **lines = NULL, line[256];
    size_t n = 0, k = 0;
    int r;

    snprintf(line, sizeof(line), "COUNTERS max=%ld%s%s%s", max, exhausted ? " exhausted=true" : "",
             st->rule ? " rule=" : "", st->rule ? st->rule : "");
    r = ctl_command(ctl, "COUNTERS", line, &lines, &n);
    if (r > 0)
        return r;
    f = malloc(sizeof(*f));
    free(st->rows);
    st->rows = calloc(n ? n : 1, sizeof(*st->rows));
    st->n_rows = 0;
    if (!f || !st->rows) {
        r = ctl_fail(CTL_EXIT_FAILURE, "out of memory");
        goto out;
    }
    for (size_t i = 1; i < n; i++) {
        struct top_counter *c = &st->rows[k];
        const char *rule, *actor;

        if (ctl_fields_parse(lines[i], f) < 0 || !(rule = ctl_field(f, "rule")) ||
            !(actor = ctl_field(f, "actor")) || ctl_field_u64(f, "credit", &c->credit) < 0 ||
            ctl_field_u64(f, "used", &c->used) < 0 || ctl_field_u64(f, "limit", &c->limit) < 0 ||
            ctl_field_u64(f, "reset_seconds", &c->reset) < 0) {
            r = ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd sent a COUNTERS line divvyctl cannot "
                         "read: %s", lines[i]);
            goto out;
        }
        /* A divvyd older than retry_seconds: the quota's reset is all it tells. */
        if (ctl_field_u64(f, "retry_seconds", &c->retry) < 0)
            c->retry = c->credit ? 0 : c->reset;
        snprintf(c->rule, sizeof(c->rule), "%s", rule);
        snprintf(c->actor, sizeof(c->actor), "%s", actor);
        k++;
    }
    st->n_rows = k;
    r = 0;
out:
    free(f);
    divvy_lines_free(lines, n);
    return r;
}

static int top_used_cmp(const void *a, const void *b)
{
    const struct top_counter *x = a, *y = b;

    if (x->used != y->used)
        return x->used > y->used ? -1 : 1;
    if (x->credit != y->credit)
        return x->credit < y->credit ? -1 : 1;
    return 0;
}

json_t *top_json_rows(const struct top_state *st)
{
    json_t *arr = json_array();

    for (size_t i = 0; arr && i < st->n_rows; i++) {
        struct top_counter c = st->rows[i];
        json_t *fields = json_object();

        top_split_actor(st, &c, fields);
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:o, s:I, s:I, s:I, s:I, s:I}",
                                             "rule", c.rule, "name", c.name, "actor", c.actor,
                                             "fields",
                                             fields, "credit", (json_int_t)c.credit, "used",
                                             (json_int_t)c.used, "limit", (json_int_t)c.limit,
                                             "reset_seconds", (json_int_t)c.reset,
                                             "retry_seconds", (json_int_t)c.retry));
    }
    return arr;
}

bool top_valid_rule(const char *id)
{
    if (!id[0] || strlen(id) >= TOP_FIELD_MAX)
        return false;
    return strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
           strlen(id);
}

/* One refresh: STATS (for the header and to notice a reload), RULES when the
 * generation changed, then COUNTERS.  Draws it into a buffer written at once. */
static int top_refresh(struct ctl *ctl, struct top_state *st, const struct top_term *t)
{
    char **lines = NULL, up[32], rate[48] = "", clock_text[16];
    uint64_t gen = 0, hits = 0, uptime = 0, rules = 0, live = 0, slots = 0, flive = 0, fslots = 0;
    uint64_t plive = 0, pslots = 0;
    size_t n = 0;
    int rows = 0, cols = 0, wrule = 4, r;
    long max = st->max;
    time_t now = time(NULL);
    struct tm tm;
    char *buf = NULL;
    size_t len = 0;
    FILE *out;

    r = ctl_command(ctl, "STATS", "STATS", &lines, &n);
    if (r > 0)
        return r;
    for (size_t i = 1; i < n; i++) {
        char *eq = strchr(lines[i], '=');
        uint64_t v;

        if (!eq)
            continue;
        *eq = '\0';
        v = strtoull(eq + 1, NULL, 10);
        if (strcmp(lines[i], "config_generation") == 0)
            gen = v;
        else if (strcmp(lines[i], "hits_total") == 0)
            hits = v;
        else if (strcmp(lines[i], "uptime_seconds") == 0)
            uptime = v;
        else if (strcmp(lines[i], "rules") == 0)
            rules = v;
        else if (strcmp(lines[i], "table_live") == 0)
            live = v;
        else if (strcmp(lines[i], "table_slots") == 0)
            slots = v;
        else if (strcmp(lines[i], "fast_table_live") == 0)
            flive = v;
        else if (strcmp(lines[i], "fast_table_slots") == 0)
            fslots = v;
        else if (strcmp(lines[i], "privileged_table_live") == 0)
            plive = v;
        else if (strcmp(lines[i], "privileged_table_slots") == 0)
            pslots = v;
    }
    divvy_lines_free(lines, n);
    if (gen != st->generation || !st->rules) {
        r = top_load_rules(ctl, st);
        if (r > 0)
            return r;
        st->generation = gen;
    }
    if (t->screen)
        top_winsize(&rows, &cols);
    if (max <= 0)
        max = t->screen ? (rows > 4 ? rows - 4 : 1) : TOP_ONCE_ROWS;
    if (max > TOP_MAX_ROWS)
        max = TOP_MAX_ROWS;
    r = top_fetch(ctl, st, false, st->sort_used ? TOP_MAX_ROWS : max);
    if (r > 0)
        return r;
    if (st->sort_used)
        qsort(st->rows, st->n_rows, sizeof(*st->rows), top_used_cmp);
    if (st->n_rows > (size_t)max)
        st->n_rows = (size_t)max;

    if (st->last_ms && hits >= st->last_hits && top_now_ms() > st->last_ms)
        snprintf(rate, sizeof(rate), " (%.0f/s)", (double)(hits - st->last_hits) * 1000.0 /
                                                      (double)(top_now_ms() - st->last_ms));
    st->last_hits = hits;
    st->last_ms = top_now_ms();

    out = open_memstream(&buf, &len);
    if (!out)
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    if (t->screen)
        fputs("\033[H", out);
    localtime_r(&now, &tm);
    strftime(clock_text, sizeof(clock_text), "%H:%M:%S", &tm);
    ctl_fmt_duration(uptime, up, sizeof(up));
    top_putf(out, cols, t->screen, "%s  up %s  %" PRIu64 " rules (gen %" PRIu64 ")  hits %"
             PRIu64 "%s  counters %" PRIu64 "/%" PRIu64 " + fast %" PRIu64 "/%" PRIu64
             " + privileged %" PRIu64 "/%" PRIu64 "  %s", clock_text, up, rules, gen, hits, rate,
             live, slots, flive, fslots, plive, pslots, ctl->address);
    top_putf(out, cols, t->screen, "%s%s%s%s",
             st->sort_used ? "most used first" : "least credit first",
             st->rule ? ", rule " : "", st->rule ? st->rule : "",
             t->keys ? "   (s: sort, q: quit)" : "");
    for (size_t i = 0; i < st->n_rows; i++) {
        top_split_actor(st, &st->rows[i], NULL);
        if ((int)strlen(st->rows[i].name) > wrule)
            wrule = (int)strlen(st->rows[i].name);
    }
    top_putf(out, cols, t->screen, "%8s %8s %8s  %-9s  %-9s  %-*s  %s", "CREDIT", "USED",
             "LIMIT", "RETRY IN", "FULL IN", wrule, "RULE", "ACTOR");
    for (size_t i = 0; i < st->n_rows; i++) {
        struct top_counter *c = &st->rows[i];
        char retry[32], full[32];

        if (c->credit)
            snprintf(retry, sizeof(retry), "-");
        else
            ctl_fmt_duration(c->retry, retry, sizeof(retry));
        ctl_fmt_duration(c->reset, full, sizeof(full));
        top_putf(out, cols, t->screen,
                 "%8" PRIu64 " %8" PRIu64 " %8" PRIu64 "  %-9s  %-9s  %-*s  %s", c->credit,
                 c->used, c->limit, retry, full, wrule, c->name, c->shown);
    }
    if (st->n_rows == 0)
        top_putf(out, cols, t->screen, "(no live counters)");
    if (t->screen)
        fputs("\033[J", out);
    else if (!st->once)
        fputc('\n', out);
    if (fclose(out) == EOF) {
        free(buf);
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    }
    fwrite(buf, 1, len, stdout);
    free(buf);
    fflush(stdout);
    return 0;
}

int cmd_top(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        CTL_LONGOPTS,
        { "once", no_argument, NULL, '1' },
        { "interval", required_argument, NULL, 'i' },
        { "rule", required_argument, NULL, 'r' },
        { "max", required_argument, NULL, 'm' },
        { "sort", required_argument, NULL, 'S' },
        { NULL, 0, NULL, 0 },
    };
    /* counters is top's one snapshot, under the name users look for. */
    bool counters = strcmp(cmd->name, "counters") == 0;
    struct top_state st = { .interval = 2.0, .generation = UINT64_MAX, .once = counters };
    struct top_term t = { .sigfd = -1 };
    bool term_started = false;
    char *end;
    int opt, r;

    ctl_getopt_reset();
    while ((opt = ctl_getopt(ctl, cmd, argc, argv, ":" CTL_SHORTOPTS "1i:r:m:S:",
                             longopts)) > 0) {
        if (counters && (opt == '1' || opt == 'i'))
            return ctl_usage(cmd, "prints once; --once and --interval are top's");
        switch (opt) {
        case '1':
            st.once = true;
            break;
        case 'i':
            errno = 0;
            st.interval = strtod(optarg, &end);
            if (errno || end == optarg || *end || !isfinite(st.interval) ||
                st.interval < 0.1 || st.interval > 3600)
                return ctl_usage(cmd, "--interval: '%s' is not 0.1 to 3600 seconds", optarg);
            break;
        case 'r':
            if (!top_valid_rule(optarg))
                return ctl_usage(cmd, "--rule: '%s' is not a rule label or id", optarg);
            st.rule = optarg;
            break;
        case 'm':
            if (ctl_parse_int(optarg, 1, TOP_MAX_ROWS, &st.max) < 0)
                return ctl_usage(cmd, "--max: '%s' is not 1 to %d", optarg, TOP_MAX_ROWS);
            break;
        case 'S':
            if (strcmp(optarg, "credit") == 0)
                st.sort_used = false;
            else if (strcmp(optarg, "used") == 0)
                st.sort_used = true;
            else
                return ctl_usage(cmd, "--sort: '%s' is not credit or used", optarg);
            break;
        default:
            return ctl_usage(cmd, "unknown option");
        }
    }
    if (opt < 0)
        return ctl_opts_exit(opt);
    if (optind != argc)
        return ctl_usage(cmd, "takes no arguments");
    if (ctl->json)
        st.once = true;

    if (ctl->json) {
        long max = st.max > 0 ? st.max : TOP_ONCE_ROWS;

        r = top_fetch(ctl, &st, false, st.sort_used ? TOP_MAX_ROWS : max);
        if (r == 0)
            r = top_load_rules(ctl, &st);
        if (r == 0 && st.sort_used)
            qsort(st.rows, st.n_rows, sizeof(*st.rows), top_used_cmp);
        if (st.n_rows > (size_t)max)
            st.n_rows = (size_t)max;
        if (r == 0)
            r = ctl_json_print(json_pack("{s:s, s:o}", "sort", st.sort_used ? "used" : "credit",
                                         "counters", top_json_rows(&st)));
        goto out;
    }
    if (!st.once) {
        r = top_term_start(&t, true);
        if (r < 0) {
            r = ctl_fail(CTL_EXIT_FAILURE, "cannot set up the terminal: %s", strerror(-r));
            goto out;
        }
        term_started = true;
    }
    for (;;) {
        int k;

        r = top_refresh(ctl, &st, &t);
        if (r > 0 || st.once)
            break;
        k = top_wait(&t, (int)lround(st.interval * 1000.0));
        if (k == 1)
            break;
        if (k == 2)
            st.sort_used = !st.sort_used;
    }
    if (r > 0 && term_started && t.screen) {
        /* Leave the alternate screen first so the error stays visible. */
        top_term_stop(&t);
        term_started = false;
    }
out:
    if (term_started)
        top_term_stop(&t);
    top_rules_free(st.rules, st.n_rules);
    free(st.rows);
    return r;
}
