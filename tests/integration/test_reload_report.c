/* SPDX-License-Identifier: MIT */
/*
 * Integration: a reload that explains itself (docs/protocol.md "RELOAD",
 * "DROPIN"; docs/rules-service.md).  RELOAD diff=true reports rules added,
 * removed and changed (which fields) and whether counters are kept, moved or
 * start afresh, and the counts bear it out; a dry run reports the same and
 * leaves the generation and the rules alone; a setting that needs a restart
 * (metrics.listen) is named; plain RELOAD keeps its one-line reply.  The
 * rules service through divvyctl: rules add/list/remove round trip with the
 * rule deciding hits, add --replace keeping a labelled rule's counts, a bad
 * drop-in refused with file:line and nothing written, and every edit refused
 * to a non-admin.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"


static const char base_conf[] =
    "server = { socket_mode = \"0666\"; };\n"
    "rules = (\n"
    "    { match = { path = \"/keep\"; }; credit_limit = 10; reset_seconds = 600;\n"
    "      label = \"keep\"; },\n"
    "    { match = { path = \"/lim\"; }; credit_limit = 10; reset_seconds = 600;\n"
    "      label = \"lim\"; },\n"
    "    { match = { path = \"/tbl\"; }; credit_limit = 10; reset_seconds = 600;\n"
    "      label = \"tbl\"; },\n"
    "    { match = { path = \"/gone\"; }; credit_limit = 10; reset_seconds = 600;\n"
    "      label = \"gone\"; },\n"
    "    { match = { path = \"/anon\"; }; credit_limit = 10; reset_seconds = 600; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

/* /lim's limit raised (counters kept), /tbl onto the fast path (moved), /gone
 * removed, the unlabelled /anon's match edited in place (a new id: fresh),
 * /new added. */
static const char next_conf[] =
    "server = { socket_mode = \"0666\"; };\n"
    "rules = (\n"
    "    { match = { path = \"/keep\"; }; credit_limit = 10; reset_seconds = 600;\n"
    "      label = \"keep\"; },\n"
    "    { match = { path = \"/lim\"; }; credit_limit = 20; reset_seconds = 600;\n"
    "      label = \"lim\"; },\n"
    "    { match = { path = \"/tbl\"; }; credit_limit = 10; reset_seconds = 600;\n"
    "      label = \"tbl\"; fast_path = true; },\n"
    "    { match = { path = \"/new\"; }; credit_limit = 10; reset_seconds = 600;\n"
    "      label = \"new\"; },\n"
    "    { match = { path = \"/anon2\"; }; credit_limit = 10; reset_seconds = 600; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static struct harness_daemon *start_conf(const char *text)
{
    struct harness_opts o = { .config_name = "divvy.conf", .config_text = text };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    return d;
}

/* The report line of @buf (harness_multi()'s lines) that has @a and @b. */
static const char *find_line(const char *buf, const char *a, const char *b)
{
    static char line[2048];

    for (const char *p = buf; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);

        snprintf(line, sizeof(line), "%.*s", (int)len, p);
        if (strstr(line, a) && (!b || strstr(line, b)))
            return line;
        p += len + (nl != NULL);
    }
    fail_msg("no line with \"%s\" and \"%s\" in:\n%s", a, b ? b : "", buf);
    return NULL;
}

static void expect_field(const char *line, const char *key, const char *want)
{
    struct proto_req req;
    const char *v;

    CHECK(harness_fields(line, &req));
    v = harness_field(&req, key);
    if (!v || strcmp(v, want) != 0)
        fail_msg("%s=%s, want %s, in: %s", key, v ? v : "(none)", want, line);
}

static void take(struct harness_conn *c, const char *path, int n)
{
    char req[128], r[HARNESS_LINE];

    snprintf(req, sizeof(req), "HIT path=%s", path);
    for (int i = 0; i < n; i++) {
        CHECK(harness_cmd(c, req, r, sizeof(r)));
        EXPECT_PREFIX(r, "OK true ");
    }
}

static long long credit_of(struct harness_conn *c, const char *path)
{
    char req[128], r[HARNESS_LINE], rule[128];
    long long credit, secs;
    bool allowed;

    snprintf(req, sizeof(req), "PEEK path=%s", path);
    CHECK(harness_cmd(c, req, r, sizeof(r)));
    if (harness_parse_ok_rule(r, &allowed, &credit, &secs, rule, sizeof(rule)) < 0)
        fail_msg("PEEK %s: %s", path, r);
    return credit;
}

/* RELOAD diff=true: each kind of change, and the counters as reported. */
static void test_reload_report_changes(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c;
    char *buf = harness_scratch(HARNESS_LINE * 4);
    const char *l;
    int n;

    (void)state;
    if (geteuid() != 0)
        skip();
    d = start_conf(base_conf);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    take(c, "/keep", 3);
    take(c, "/lim", 4);
    take(c, "/tbl", 5);
    take(c, "/anon", 2);
    CHECK(harness_write_config(d, next_conf));
    n = harness_multi(c, "RELOAD diff=true", buf, HARNESS_LINE * 4);
    if (n < 0)
        fail_msg("RELOAD diff=true: %s", buf);
    l = find_line(buf, "reloaded=true", NULL);
    expect_field(l, "added", "1");
    expect_field(l, "removed", "1");
    expect_field(l, "changed", "3");
    expect_field(l, "restart", "0");
    expect_field(l, "rules", "6");
    assert_int_equal(n, 1 + 1 + 1 + 3);
    l = find_line(buf, "rule=\"lim\"", NULL);
    expect_field(l, "change", "changed");
    expect_field(l, "fields", "credit_limit");
    expect_field(l, "counters", "kept");
    l = find_line(buf, "rule=\"tbl\"", NULL);
    expect_field(l, "fields", "fast_path");
    expect_field(l, "counters", "moved");
    l = find_line(buf, "rule=\"gone\"", NULL);
    expect_field(l, "change", "removed");
    l = find_line(buf, "rule=\"new\"", NULL);
    expect_field(l, "change", "added");
    expect_field(l, "counters", "fresh");
    l = find_line(buf, "was=", NULL);
    expect_field(l, "change", "changed");
    expect_field(l, "fields", "match");
    expect_field(l, "counters", "fresh");
    expect_field(l, "line", "11");
    /* The counters do what the report said. */
    assert_int_equal(credit_of(c, "/keep"), 7);
    assert_int_equal(credit_of(c, "/lim"), 16);
    assert_int_equal(credit_of(c, "/tbl"), 5);
    assert_int_equal(credit_of(c, "/anon2"), 10);
    /* The log has one line per change. */
    assert_int_equal(harness_log_contains(d, "rule=\"lim\" change=changed counters=kept "
                                             "fields=credit_limit"), 1);
    assert_int_equal(harness_log_contains(d, "rule=\"gone\" change=removed"), 1);
    /* The same rules again: nothing changed; plain RELOAD is one line, as
     * always (the next reply is PING's). */
    n = harness_multi(c, "RELOAD diff=true", buf, HARNESS_LINE * 4);
    assert_int_equal(n, 1);
    l = find_line(buf, "reloaded=true", NULL);
    expect_field(l, "changed", "0");
    CHECK(harness_cmd(c, "RELOAD", buf, HARNESS_LINE));
    EXPECT_PREFIX(buf, "OK reloaded generation=");
    assert_non_null(strstr(buf, " rules=6"));
    EXPECT_REPLY(c, "PING", "OK pong");
    CHECK(harness_cmd(c, "RELOAD diff=yes", buf, HARNESS_LINE));
    EXPECT_PREFIX(buf, "ERR bad-request");
    harness_close(c);
}

/* RELOAD dry_run=true: the same report; generation, rules and counters stay. */
static void test_reload_report_dry_run(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c;
    char *buf = harness_scratch(HARNESS_LINE * 4);
    long long gen, gen2, ok, ok2;
    char want[64];
    const char *l;
    int n;

    (void)state;
    if (geteuid() != 0)
        skip();
    d = start_conf(base_conf);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    take(c, "/gone", 1);
    CHECK(harness_get_stat(c, "config_generation", &gen));
    CHECK(harness_get_stat(c, "reloads_ok", &ok));
    CHECK(harness_write_config(d, next_conf));
    n = harness_multi(c, "RELOAD dry_run=true", buf, HARNESS_LINE * 4);
    if (n < 0)
        fail_msg("RELOAD dry_run=true: %s", buf);
    assert_int_equal(n, 1 + 1 + 1 + 3);
    l = find_line(buf, "reloaded=false", NULL);
    snprintf(want, sizeof(want), "%lld", gen);
    expect_field(l, "generation", want);
    find_line(buf, "rule=\"gone\"", "change=removed");
    CHECK(harness_get_stat(c, "config_generation", &gen2));
    CHECK(harness_get_stat(c, "reloads_ok", &ok2));
    assert_int_equal(gen2, gen);
    assert_int_equal(ok2, ok);
    /* The running rules are the old ones: /gone still counts, /new is not. */
    assert_int_equal(credit_of(c, "/gone"), 9);
    assert_int_equal(credit_of(c, "/new"), 0);
    /* A rejected dry run says file:line, like a reload, and changes nothing. */
    CHECK(harness_write_config(d, "rules = ( { default = true; credit_limt = 0; "
                                  "reset_seconds = 0; } );\n"));
    CHECK(harness_cmd(c, "RELOAD dry_run=true", buf, HARNESS_LINE));
    EXPECT_PREFIX(buf, "ERR reload-failed");
    assert_non_null(strstr(buf, "divvy.conf:1:"));
    CHECK(harness_get_stat(c, "config_generation", &gen2));
    assert_int_equal(gen2, gen);
    assert_int_equal(credit_of(c, "/gone"), 9);
    harness_close(c);
}

/* A setting that needs a restart is named, in the reply and the log, at
 * every reload until the restart. */
static void test_reload_report_restart_setting(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c;
    char *buf = harness_scratch(HARNESS_LINE * 4), *text = harness_scratch(sizeof(base_conf) +
                                                                           128);
    const char *l;

    (void)state;
    if (geteuid() != 0)
        skip();
    d = start_conf(base_conf);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    snprintf(text, sizeof(base_conf) + 128,
             "metrics = { listen = \"tcp:127.0.0.1:1\"; };\n%s", base_conf);
    CHECK(harness_write_config(d, text));
    for (int i = 0; i < 2; i++) {
        if (harness_multi(c, "RELOAD diff=true", buf, HARNESS_LINE * 4) < 0)
            fail_msg("RELOAD diff=true: %s", buf);
        l = find_line(buf, "reloaded=true", NULL);
        expect_field(l, "restart", "1");
        l = find_line(buf, "setting=metrics.listen", NULL);
        expect_field(l, "change", "restart");
        expect_field(l, "running", "");
        expect_field(l, "configured", "tcp:127.0.0.1:1");
    }
    assert_int_equal(harness_log_contains(d, "take effect only after a restart: metrics.listen"),
                     1);
    harness_close(c);
}

/* ---- the rules service, through divvyctl ------------------------------------------------ */

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define CTL(want, ...) harness_ctl_run(false, NULL, (want), ARGS(__VA_ARGS__))
#define CTL_IN(in, want, ...) harness_ctl_run(false, (in), (want), ARGS(__VA_ARGS__))
#define CTL_NOBODY(want, ...) harness_ctl_run(true, NULL, (want), ARGS(__VA_ARGS__))

static void expect_in(const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("\"%s\" not found in:\n%s", needle, text);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static const char m42_dropin[] =
    "# merchant 42 bought the bigger plan\n"
    "rules = (\n"
    "    { match = { merchant = \"m42\"; }; credit_limit = 3; reset_seconds = 60;\n"
    "      label = \"m42\"; }\n"
    ");\n";

static void test_reload_report_rules_service(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c;
    char sock[HARNESS_PATH + 8], dir[HARNESS_PATH + 16], conf[2048], path[HARNESS_PATH + 64];
    char list[1024], in[HARNESS_PATH + 16], r[HARNESS_LINE];
    struct harness_ctl *run;

    (void)state;
    if (geteuid() != 0)
        skip();
    d = start_conf(base_conf);
    snprintf(sock, sizeof(sock), "unix:%s", d->sock);
    snprintf(dir, sizeof(dir), "%s/rules.d", d->dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(conf, sizeof(conf), "include_dir = \"%s\";\n%s", dir, base_conf);
    CHECK(harness_write_config(d, conf));
    CTL(0, "-s", sock, "reload");
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "HIT merchant=m42", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK false");

    /* add: validated, written, applied; the rule decides at once. */
    snprintf(in, sizeof(in), "%s/m42.in", d->dir);
    write_file(in, m42_dropin);
    run = CTL_IN(in, 0, "-s", sock, "rules", "add", "50-m42");
    expect_in(run->out, "reloaded: generation ");
    expect_in(run->out, "added    rule m42 (");
    expect_in(run->out, "rules.d/50-m42.conf:3)");
    harness_list_dir(dir, list, sizeof(list));
    assert_string_equal(list, "50-m42.conf");
    EXPECT_OK(c, "HIT merchant=m42", true, 2, 50, 60);
    EXPECT_OK_RULE(c, "TAKE 1 merchant=m42", true, 1, 50, 60, "m42");
    /* The drop-in's rule sits after the main file's rules, before the
     * default rule. */
    run = CTL(0, "-s", sock, "rules", "list");
    expect_in(run->out, "50-m42");
    expect_in(run->out, "merchant=m42");
    run = CTL(0, "-s", sock, "--json", "rules", "list");
    expect_in(run->out, "\"index\": 5");
    /* The same name again is refused (remove first). */
    run = CTL_IN(in, 1, "-s", sock, "rules", "add", "50-m42");
    expect_in(run->err, "50-m42 exists");

    /* A bad drop-in: refused with its file:line, nothing written, the
     * running rules untouched. */
    snprintf(path, sizeof(path), "%s/bad.in", d->dir);
    write_file(path, "rules = (\n    { match = { merchant = \"m7\"; }; credit_limt = 3;\n"
                     "      reset_seconds = 60; }\n);\n");
    run = CTL_IN(path, 1, "-s", sock, "rules", "add", "60-m7");
    expect_in(run->err, "rules.d/60-m7.conf:2: unknown rule setting 'credit_limt'");
    harness_list_dir(dir, list, sizeof(list));
    assert_string_equal(list, "50-m42.conf");
    /* A drop-in may not carry the default rule or other settings. */
    write_file(path, "server = { workers = 2; };\nrules = ( { default = true; credit_limit = 1;"
                     " reset_seconds = 1; } );\n");
    run = CTL_IN(path, 1, "-s", sock, "rules", "add", "60-m7");
    expect_in(run->err, "60-m7.conf:1: a drop-in holds only a 'rules' list");
    harness_list_dir(dir, list, sizeof(list));
    assert_string_equal(list, "50-m42.conf");
    CTL(2, "-s", sock, "rules", "add", "m7");
    EXPECT_OK(c, "HIT merchant=m42", true, 0, 50, 60);

    /* --replace: a labelled rule's new limit keeps its counts (3 used). */
    write_file(in, "rules = (\n    { match = { merchant = \"m42\"; }; credit_limit = 5;\n"
                   "      reset_seconds = 60; label = \"m42\"; }\n);\n");
    run = CTL_IN(in, 0, "-s", sock, "rules", "add", "--replace", "50-m42");
    expect_in(run->out, "changed  rule m42 (");
    expect_in(run->out, ": credit_limit; counters kept");
    EXPECT_OK(c, "HIT merchant=m42", true, 1, 50, 60);
    harness_list_dir(dir, list, sizeof(list));
    assert_string_equal(list, "50-m42.conf");

    /* A dry run of a removal reports it and changes nothing. */
    run = CTL(0, "-s", sock, "rules", "remove", "--dry-run", "50-m42");
    expect_in(run->out, "dry run: ");
    expect_in(run->out, "removed  rule m42");
    harness_list_dir(dir, list, sizeof(list));
    assert_string_equal(list, "50-m42.conf");

    /* Not admin: every edit refused. */
    assert_int_equal(chmod(d->dir, 0755), 0);
    run = CTL_NOBODY(4, "-s", sock, "rules", "remove", "50-m42");
    expect_in(run->err, "permission denied: DROPIN needs root or membership in divvy-admin");
    CTL_NOBODY(4, "-s", sock, "rules", "list");
    CTL_NOBODY(4, "-s", sock, "reload", "--dry-run");
    harness_list_dir(dir, list, sizeof(list));
    assert_string_equal(list, "50-m42.conf");

    /* remove: the file goes, the default rule decides again. */
    run = CTL(0, "-s", sock, "rules", "remove", "50-m42");
    expect_in(run->out, "removed  rule m42");
    harness_list_dir(dir, list, sizeof(list));
    assert_string_equal(list, "");
    EXPECT_REPLY(c, "HIT merchant=m42", "OK false 0 0");
    run = CTL(0, "-s", sock, "rules", "list");
    assert_null(strstr(run->out, "m42"));
    CTL(1, "-s", sock, "rules", "remove", "50-m42");
    harness_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reload_report_changes, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_reload_report_dry_run, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_reload_report_restart_setting, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_reload_report_rules_service, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("reload_report", tests, NULL, NULL);
}
