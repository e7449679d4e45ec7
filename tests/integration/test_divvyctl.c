/* SPDX-License-Identifier: MIT */
/*
 * Integration: divvyctl ($DIVVYCTL) against a real divvyd.  Every subcommand
 * is run as a process; its exit code is checked against the documented table
 * (0 ok/allowed, 1 no, 2 usage, 3 unreachable, 4 permission, 5 other), its
 * --json output is parsed with jansson, and its text output is checked for
 * what a human needs (file:line for check, the refusal message for admin
 * verbs from a non-admin, run as nobody when the test is root).  top runs
 * once, in a pseudo-terminal (q and Ctrl-C end it and give the terminal
 * back) and batched until SIGINT.  convert is round-trip tested on divvy's
 * example configs: the converted file passes check, and a daemon loaded with
 * it reports the same RULES as one loaded with the original.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/un.h>
#include <termios.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <jansson.h>

#include "harness_redis.h"

#define OUT_MAX  (256 * 1024)

static const char ctl_conf[] =
    "server = { socket_mode = \"0666\"; };\n"
    "rules = (\n"
    "    { match = { path = \"/take\"; }; credit_limit = 10; reset_seconds = 600;\n"
    "      label = \"take\"; },\n"
    "    { match = { path = \"/peek\"; ip = \"*\"; }; actor = \"ip\"; credit_limit = 3;\n"
    "      reset_seconds = 600; label = \"peek\"; },\n"
    "    { match = { event = \"authfail\"; user = \"*\"; rhost = \"*\"; };\n"
    "      actor = [ \"user\", \"rhost\" ]; credit_limit = 2; reset_seconds = 600;\n"
    "      label = \"login\"; source = \"privileged\"; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

#define CTL_RULES 4

/* ---- running divvyctl ------------------------------------------------------------- */

static const char *divvyctl_path(void)
{
    const char *p = getenv("DIVVYCTL");

    return p && p[0] ? p : "build/divvyctl";
}

#define CTL(want, ...) \
    harness_ctl_run(false, NULL, (want), (const char *const[]){ __VA_ARGS__, NULL })
#define CTL_NOBODY(want, ...) \
    harness_ctl_run(true, NULL, (want), (const char *const[]){ __VA_ARGS__, NULL })

static json_t *parse_json(const struct harness_ctl *r)
{
    json_error_t e;
    json_t *doc = json_loads(r->out, 0, &e);

    if (!doc)
        fail_msg("not one JSON document (line %d: %s):\n%s", e.line, e.text, r->out);
    return doc;
}

static void expect_in(const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("\"%s\" not found in:\n%s", needle, text);
}

static struct harness_daemon *start_ctl(void)
{
    struct harness_opts o = { .config_name = "divvy.conf", .config_text = ctl_conf };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    return d;
}

static const char *sock_of(struct harness_daemon *d)
{
    char *s = harness_scratch(HARNESS_PATH + 8);

    assert_non_null(s);
    snprintf(s, HARNESS_PATH + 8, "unix:%s", d->sock);
    return s;
}

/* ---- help and usage ------------------------------------------------------------------ */

static void test_divvyctl_help_and_usage(void **state)
{
    static const char *const cmds[] = { "status", "hit", "take", "debit", "peek", "reset", "unlock",
                                        "rules", "explain", "check", "convert", "reload", "stats",
                                        "top", "counters", "locked" };
    struct harness_ctl *r;

    (void)state;
    r = CTL(0, "--help");
    expect_in(r->out, "Exit status");
    expect_in(r->out, "4  permission denied");
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        char want[64];

        snprintf(want, sizeof(want), "Usage: divvyctl %s", cmds[i]);
        r = CTL(0, cmds[i], "--help");
        expect_in(r->out, want);
        expect_in(r->out, "Exit status");
        r = CTL(0, "help", cmds[i]);
        expect_in(r->out, want);
    }
    CTL(0, "--version");
    harness_ctl_run(false, NULL, 2, (const char *const[]){ NULL });
    r = CTL(2, "frobnicate");
    expect_in(r->err, "unknown command");
    r = CTL(2, "rules", "--bogus");
    expect_in(r->err, "unknown option");
    CTL(2, "--timeout", "soon", "status");
    CTL(2, "hit", "novalue");
    /* No KEY=VALUE at all is a usage error, never a request for the default rule. */
    for (size_t i = 0; i < 4; i++) {
        static const char *const verbs[] = { "hit", "peek", "reset", "take" };

        r = i < 3 ? CTL(2, verbs[i]) : CTL(2, verbs[i], "3");
        expect_in(r->err, "needs KEY=VALUE arguments");
        expect_in(r->err, "--help");
    }
    CTL(2, "counters", "--interval", "1");
    CTL(2, "take", "0", "a=b");
    CTL(2, "take", "many", "a=b");
    CTL(2, "debit", "0", "a=b");
    CTL(2, "debit", "1000000000001", "a=b");
    r = CTL(2, "debit", "3");
    expect_in(r->err, "needs KEY=VALUE arguments");
    CTL(2, "rules", "extra");
    CTL(2, "check");
    CTL(2, "convert");
    CTL(2, "convert", "--json", "etc/divvy.ini");
    CTL(2, "top", "--interval", "0");
    CTL(2, "locked", "--rule", "bad id!");
}

/* ---- the request verbs ------------------------------------------------------------------ */

static void test_divvyctl_status(void **state)
{
    struct harness_daemon *d;
    struct harness_ctl *r;
    json_t *doc;

    (void)state;
    d = start_ctl();
    r = CTL(0, "--socket", sock_of(d), "status");
    expect_in(r->out, "running");
    expect_in(r->out, "4 rules");
    /* A bare path works as an address too; options may follow the command. */
    r = CTL(0, "status", "--json", "-s", d->sock);
    doc = parse_json(r);
    assert_true(json_is_true(json_object_get(doc, "running")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "stats"), "rules")),
                     CTL_RULES);
    json_decref(doc);

    r = CTL(3, "-s", "unix:/nonexistent/divvy.sock", "status");
    expect_in(r->err, "cannot reach divvyd");
    r = CTL(3, "-s", "unix:/nonexistent/divvy.sock", "status", "--json");
    doc = parse_json(r);
    assert_true(json_is_false(json_object_get(doc, "running")));
    assert_true(json_is_string(json_object_get(doc, "error")));
    json_decref(doc);
}

/* A relative socket path, as the README writes it ("build/run/divvy.sock")
 * and as "./x.sock": any address with a '/' and no scheme is a Unix socket
 * path.  divvyctl runs from the parent of the daemon's directory. */
static void test_divvyctl_relative_socket(void **state)
{
    struct harness_daemon *d;
    char ctl[PATH_MAX], parent[HARNESS_PATH], rel[HARNESS_PATH * 2], dot[HARNESS_PATH * 2 + 8];
    const char *base, *old = getenv("DIVVYCTL");
    struct harness_ctl *r;
    int here;

    (void)state;
    d = start_ctl();
    assert_non_null(realpath(divvyctl_path(), ctl));
    snprintf(parent, sizeof(parent), "%s", d->dir);
    base = strrchr(parent, '/');
    assert_non_null(base);
    parent[base - parent] = '\0';
    base = d->dir + (base - parent) + 1;
    snprintf(rel, sizeof(rel), "%s/%s", base, d->sock + strlen(d->dir) + 1);
    snprintf(dot, sizeof(dot), "./%s", rel);
    here = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(here >= 0);
    assert_int_equal(chdir(parent[0] ? parent : "/"), 0);
    setenv("DIVVYCTL", ctl, 1);
    r = harness_ctl_run(false, NULL, -1, (const char *const[]){ "-s", rel, "peek",
                                                                   "path=/take", NULL });
    if (r->status == 0)
        r = harness_ctl_run(false, NULL, -1, (const char *const[]){ "--socket", dot, "status",
                                                                       NULL });
    /* Back before any assertion can end the test. */
    assert_int_equal(fchdir(here), 0);
    close(here);
    if (old)
        setenv("DIVVYCTL", old, 1);
    else
        unsetenv("DIVVYCTL");
    if (r->status != 0)
        fail_msg("divvyctl with a relative socket path (%s, %s): exit %d\nstdout: %s\n"
                 "stderr: %s", rel, dot, r->status, r->out, r->err);
    expect_in(r->out, "running");
    /* A name with no '/' and no scheme is still refused, and says what to write. */
    r = CTL(2, "-s", "divvy.sock", "status");
    expect_in(r->err, "bad address");
    expect_in(r->err, "./PATH");
}

static void test_divvyctl_hit_take_peek_reset(void **state)
{
    struct harness_daemon *d;
    const char *s;
    struct harness_ctl *r;
    json_t *doc;

    (void)state;
    d = start_ctl();
    s = sock_of(d);
    r = CTL(0, "-s", s, "hit", "path=/take");
    assert_string_equal(r->out, "allowed credit=9 reset_seconds=600 rule=take\n");
    r = CTL(0, "-s", s, "take", "5", "path=/take");
    expect_in(r->out, "allowed credit=4 ");
    /* All or nothing: 5 more are not there, and nothing is taken. */
    r = CTL(1, "-s", s, "take", "5", "path=/take");
    expect_in(r->out, "denied credit=4 ");
    r = CTL(0, "-s", s, "peek", "path=/take", "--json");
    doc = parse_json(r);
    assert_true(json_is_true(json_object_get(doc, "allowed")));
    assert_int_equal(json_integer_value(json_object_get(doc, "credit")), 4);
    assert_in_range(json_integer_value(json_object_get(doc, "reset_seconds")), 590, 600);
    assert_string_equal(json_string_value(json_object_get(doc, "rule")), "take");
    assert_string_equal(json_string_value(json_object_get(json_object_get(doc, "request"),
                                                          "path")), "/take");
    json_decref(doc);
    r = CTL(0, "-s", s, "reset", "path=/take");
    assert_string_equal(r->out, "reset credit=10 reset_seconds=0 rule=take\n");
    /* The log names the rule by its label (not "rule 0"). */
    if (harness_log_contains(d, "counter(s) on the path of rule take reset") != 1) {
        harness_dump_log(d);
        fail_msg("the RESET log line does not name rule take by its label");
    }
    r = CTL(0, "-s", s, "hit", "path=/take", "--json");
    doc = parse_json(r);
    assert_int_equal(json_integer_value(json_object_get(doc, "credit")), 9);
    json_decref(doc);

    /* Actors; values with spaces are quoted for the protocol. */
    for (int i = 0; i < 3; i++)
        CTL(0, "-s", s, "hit", "path=/peek", "ip=10.0.0.1 x");
    r = CTL(1, "-s", s, "hit", "path=/peek", "ip=10.0.0.1 x");
    expect_in(r->out, "denied credit=0 ");
    CTL(0, "-s", s, "peek", "path=/peek", "ip=10.0.0.2");
    r = CTL(1, "-s", s, "peek", "path=/peek", "ip=10.0.0.1 x", "--json");
    doc = parse_json(r);
    assert_true(json_is_false(json_object_get(doc, "allowed")));
    json_decref(doc);
    /* The default rule denies. */
    CTL(1, "-s", s, "hit", "path=/elsewhere");
    /* No keys: usage errors that reach no daemon (reset would "reset" the
     * default rule, hit would be denied by it). */
    CTL(2, "-s", s, "reset");
    CTL(2, "-s", s, "hit");
    CTL(2, "-s", s, "peek", "--json");
    CTL(2, "-s", s, "take", "1");
    r = CTL(0, "-s", s, "peek", "path=/take");
    expect_in(r->out, "allowed credit=9 ");
    /* debit: charged always; into debt it says denied (exit 1), credit 0. */
    r = CTL(0, "-s", s, "debit", "2", "path=/take");
    expect_in(r->out, "allowed credit=7 ");
    r = CTL(1, "-s", s, "debit", "12", "path=/take", "--json");
    doc = parse_json(r);
    assert_true(json_is_false(json_object_get(doc, "allowed")));
    assert_int_equal(json_integer_value(json_object_get(doc, "credit")), 0);
    json_decref(doc);
    r = CTL(1, "-s", s, "hit", "path=/take");
    expect_in(r->out, "denied credit=0 ");
    /* Bad requests. */
    CTL(2, "-s", s, "hit", "path=a\"b");
    CTL(2, "-s", s, "hit", "=novalue");
    /* Unreachable. */
    r = CTL(3, "-s", "unix:/nonexistent/divvy.sock", "hit", "path=/take");
    expect_in(r->err, "/nonexistent/divvy.sock");
}

static void test_divvyctl_rules_explain_stats(void **state)
{
    struct harness_daemon *d;
    const char *s;
    struct harness_ctl *r;
    json_t *doc, *arr, *first;

    (void)state;
    d = start_ctl();
    s = sock_of(d);
    r = CTL(0, "-s", s, "rules");
    expect_in(r->out, "LIMIT");
    expect_in(r->out, "take");
    expect_in(r->out, "privileged");
    r = CTL(0, "-s", s, "rules", "--json");
    doc = parse_json(r);
    arr = json_object_get(doc, "rules");
    assert_int_equal(json_array_size(arr), CTL_RULES);
    first = json_array_get(arr, 0);
    assert_string_equal(json_string_value(json_object_get(first, "id")), "take");
    assert_int_equal(json_integer_value(json_object_get(first, "credit_limit")), 10);
    assert_true(json_is_false(json_object_get(first, "fast_path")));
    arr = json_object_get(json_array_get(arr, 2), "actor");
    assert_int_equal(json_array_size(arr), 2);
    assert_string_equal(json_string_value(json_array_get(arr, 1)), "rhost");
    json_decref(doc);

    r = CTL(0, "-s", s, "explain", "path=/peek", "ip=1.2.3.4");
    expect_in(r->out, "rule 0 (take): no match");
    expect_in(r->out, "rule 1 (peek): decides");
    expect_in(r->out, "now: allowed credit=3");
    r = CTL(0, "-s", s, "explain", "--json", "path=/nothing");
    doc = parse_json(r);
    assert_int_equal(json_array_size(json_object_get(doc, "rules")), CTL_RULES);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "decided_by"),
                                                        "rule")), CTL_RULES - 1);
    assert_true(json_is_false(json_object_get(json_object_get(doc, "now"), "allowed")));
    json_decref(doc);
    /* Unlike hit, explain without keys is meaningful: which rule decides an empty request. */
    r = CTL(0, "-s", s, "explain");
    expect_in(r->out, "request: (no keys)");
    expect_in(r->out, "): decides");

    CTL(0, "-s", s, "hit", "path=/take");
    r = CTL(0, "-s", s, "stats");
    expect_in(r->out, "hits_total");
    r = CTL(0, "-s", s, "stats", "--json");
    doc = parse_json(r);
    assert_true(json_integer_value(json_object_get(doc, "hits_total")) >= 1);
    assert_int_equal(json_integer_value(json_object_get(doc, "rules")), CTL_RULES);
    json_decref(doc);
}

static void test_divvyctl_locked_and_top(void **state)
{
    struct harness_daemon *d;
    const char *s;
    struct harness_ctl *r;
    json_t *doc, *row;

    (void)state;
    d = start_ctl();
    s = sock_of(d);
    r = CTL(0, "-s", s, "locked");
    assert_string_equal(r->out, "");
    expect_in(r->err, "nothing is locked");
    /* As root on the Unix socket the privileged login rule applies. */
    CTL(0, "-s", s, "take", "2", "event=authfail", "user=alice", "rhost=192.0.2.1");
    CTL(1, "-s", s, "peek", "event=authfail", "user=alice", "rhost=192.0.2.1");
    CTL(0, "-s", s, "hit", "event=authfail", "user=a,b%c", "rhost=192.0.2.2");
    CTL(0, "-s", s, "hit", "path=/take");
    r = CTL(0, "-s", s, "locked");
    expect_in(r->out, "UNLOCKS IN");
    expect_in(r->out, "login");
    expect_in(r->out, "user=alice rhost=192.0.2.1");
    expect_in(r->out, "2/2");
    assert_null(strstr(r->out, "192.0.2.2"));
    r = CTL(0, "-s", s, "locked", "--rule", "login", "--json");
    doc = parse_json(r);
    assert_int_equal(json_array_size(json_object_get(doc, "locked")), 1);
    row = json_array_get(json_object_get(doc, "locked"), 0);
    assert_string_equal(json_string_value(json_object_get(row, "rule")), "login");
    assert_string_equal(json_string_value(json_object_get(json_object_get(row, "fields"),
                                                          "user")), "alice");
    assert_int_equal(json_integer_value(json_object_get(row, "credit")), 0);
    assert_true(json_integer_value(json_object_get(row, "reset_seconds")) > 500);
    json_decref(doc);
    r = CTL(0, "-s", s, "locked", "--rule", "take");
    assert_string_equal(r->out, "");
    r = CTL(2, "-s", s, "locked", "--rule", "nosuchrule");
    expect_in(r->err, "no rule");

    r = CTL(0, "-s", s, "top", "--once");
    expect_in(r->out, "CREDIT");
    expect_in(r->out, "user=alice rhost=192.0.2.1");
    /* Several actor keys are split and unescaped again. */
    expect_in(r->out, "user=a,b%c rhost=192.0.2.2");
    expect_in(r->out, "take");
    r = CTL(0, "-s", s, "top", "--once", "--json", "--max", "2");
    doc = parse_json(r);
    assert_int_equal(json_array_size(json_object_get(doc, "counters")), 2);
    row = json_array_get(json_object_get(doc, "counters"), 0);
    assert_int_equal(json_integer_value(json_object_get(row, "credit")), 0);
    json_decref(doc);
    /* counters: the same snapshot, under the name users type. */
    r = CTL(0, "-s", s, "counters");
    expect_in(r->out, "CREDIT");
    expect_in(r->out, "user=alice rhost=192.0.2.1");
    r = CTL(0, "-s", s, "counters", "--json", "--rule", "login");
    doc = parse_json(r);
    assert_int_equal(json_array_size(json_object_get(doc, "counters")), 2);
    json_decref(doc);
    r = CTL(0, "-s", s, "top", "--once", "--sort", "used", "--rule", "take");
    expect_in(r->out, "take");
    assert_null(strstr(r->out, "alice"));
    /* Unlock alice, as docs/pam.md tells an admin to. */
    CTL(0, "-s", s, "reset", "event=authfail", "user=alice", "rhost=192.0.2.1");
    r = CTL(0, "-s", s, "locked");
    assert_string_equal(r->out, "");
}

/* ---- locked: when the next credit arrives ------------------------------------------------ */

static const char retry_conf[] =
    "server = { socket_mode = \"0600\"; };\n"
    "rules = (\n"
    "    { match = { t = \"tb\"; u = \"*\"; }; actor = \"u\"; label = \"tb\";\n"
    "      algorithm = \"token_bucket\"; credit_limit = 10; refill_amount = 1;\n"
    "      refill_seconds = 2; },\n"
    "    { match = { t = \"sw\"; u = \"*\"; }; actor = \"u\"; label = \"sw\";\n"
    "      algorithm = \"sliding_window\"; credit_limit = 2; reset_seconds = 10; },\n"
    "    { match = { t = \"win\"; u = \"*\"; }; actor = \"u\"; label = \"win\";\n"
    "      credit_limit = 1; reset_seconds = 30; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

/* The row of rule @label in locked --json (fails the test when absent). */
static json_t *locked_row(json_t *doc, const char *label)
{
    json_t *arr = json_object_get(doc, "locked");

    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *row = json_array_get(arr, i);

        if (strcmp(json_string_value(json_object_get(row, "rule")), label) == 0)
            return row;
    }
    fail_msg("rule %s is not in locked", label);
    return NULL;
}

/* The last column (UNLOCKS IN) of rule @label's line in locked's text output. */
static const char *unlocks_in(const char *out, const char *label)
{
    char *buf = harness_scratch(strlen(out) + 1), *line, *save = NULL, *col;

    assert_non_null(buf);
    strcpy(buf, out);
    for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, label, strlen(label)) != 0 || line[strlen(label)] != ' ')
            continue;
        col = strrchr(line, ' ');
        return col ? col + 1 : line;
    }
    fail_msg("rule %s is not in locked:\n%s", label, out);
    return NULL;
}

/* A token bucket drained by TAKEs unlocks at its next refill step (2 s for 1
 * per 2 s), not when it is full again (20 s); a sliding window when the
 * previous window's hits have slid out far enough for one (limit 2 in 10 s,
 * drained at once: after the roll-over and half the next window, 15 s, not
 * 20); a window at its end, as before. */
/* A rule without a label shows as its match in top, counters and locked, not
 * as its hex id; --json keeps the id in "rule" and adds the shown "name". */
static void test_divvyctl_unlabelled_by_match(void **state)
{
    static const char conf[] =
        "rules = (\n"
        "    { match = { method = \"GET\"; path = \"/api/*\"; ip = \"*\"; }; actor = \"ip\";\n"
        "      credit_limit = 1; reset_seconds = 600; },\n"
        "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    struct harness_opts o = { .config_name = "divvy.conf", .config_text = conf };
    struct harness_daemon *d = NULL;
    struct harness_ctl *r;
    const char *s;
    json_t *doc, *row;

    (void)state;
    CHECK(harness_start(&o, &d));
    s = sock_of(d);
    CTL(0, "-s", s, "hit", "method=GET", "path=/api/x", "ip=192.0.2.7");
    r = CTL(0, "-s", s, "locked");
    expect_in(r->out, "{ip=* method=GET path=/api/*}  ip=192.0.2.7");
    r = CTL(0, "-s", s, "counters");
    expect_in(r->out, "{ip=* method=GET path=/api/*}  ip=192.0.2.7");
    r = CTL(0, "-s", s, "locked", "--json");
    doc = parse_json(r);
    row = json_array_get(json_object_get(doc, "locked"), 0);
    assert_non_null(row);
    assert_int_equal(strlen(json_string_value(json_object_get(row, "rule"))), 16);
    assert_string_equal(json_string_value(json_object_get(row, "name")),
                        "{ip=* method=GET path=/api/*}");
    json_decref(doc);
}

/* pam_divvy's rules as etc/divvy.conf has them, with a limit of 2. */
#define LOGIN_RULES                                                                           \
    "    { match = { event = \"authfail\"; user = \"root\"; rhost = \"*\"; };\n"              \
    "      label = \"login-root-source\"; actor = \"rhost\"; actor_prefix4 = 32;\n"          \
    "      credit_limit = 2; reset_seconds = 900; match_policy = \"continue\";\n"          \
    "      source = \"privileged\"; },\n"                                                 \
    "    { match = { event = \"authfail\"; user = \"*\"; rhost = \"*\"; };\n"                 \
    "      label = \"login-user-source\"; actor = [ \"user\", \"rhost\" ];\n"               \
    "      actor_prefix4 = 32; credit_limit = 2; reset_seconds = 900;\n"                   \
    "      match_policy = \"continue\"; source = \"privileged\"; },\n"                     \
    "    { match = { event = \"authfail\"; rhost = \"*\"; }; label = \"login-source\";\n"     \
    "      actor = \"rhost\"; actor_prefix4 = 32; credit_limit = 30; reset_seconds = 900;\n" \
    "      source = \"privileged\"; resettable = false; },\n"                             \
    "    { match = { event = \"authfail\"; }; label = \"login-local\"; credit_limit = 1;\n"   \
    "      reset_seconds = 0; source = \"privileged\"; },\n"                              \
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"

static const char login_conf[] =
    "server = { socket_mode = \"0666\"; };\n"
    "rules = (\n" LOGIN_RULES ");\n";

#define LONG_USER "a-user-name-long-enough-for-a-digest"

/* Issue 21 item 9: a reset without the source resets nothing and says so
 * (exit 1); unlock USER clears every login counter of USER from every
 * source, and only those (not another user's, not login-source's), says how
 * many, and exits 1 when there is none; --source reaches one source, also a
 * counter stored as a digest; root's per-source counters are root's. */
static void test_divvyctl_unlock(void **state)
{
    struct harness_opts o = { .config_name = "divvy.conf", .config_text = login_conf };
    struct harness_daemon *d = NULL;
    struct harness_ctl *r;
    const char *s;
    json_t *doc;

    (void)state;
    CHECK(harness_start(&o, &d));
    s = sock_of(d);
    CTL(0, "-s", s, "take", "2", "event=authfail", "user=alice", "rhost=192.0.2.1");
    CTL(0, "-s", s, "take", "2", "event=authfail", "user=alice", "rhost=192.0.2.2");
    CTL(0, "-s", s, "take", "2", "event=authfail", "user=bob", "rhost=192.0.2.1");
    CTL(0, "-s", s, "take", "1", "event=authfail", "user=root", "rhost=192.0.2.9");
    CTL(0, "-s", s, "take", "2", "event=authfail", "user=" LONG_USER, "rhost=192.0.2.7");
    CTL(1, "-s", s, "peek", "event=authfail", "user=alice", "rhost=192.0.2.1");

    /* The README's unlock: the path holds no counter RESET may forget. */
    r = CTL(1, "-s", s, "reset", "event=authfail", "user=alice");
    expect_in(r->out, "rule=login-local");
    expect_in(r->err, "nothing was reset");
    expect_in(r->err, "divvyctl unlock");
    CTL(1, "-s", s, "peek", "event=authfail", "user=alice", "rhost=192.0.2.2");
    r = CTL(1, "-s", s, "reset", "--json", "event=authfail", "user=alice");
    doc = parse_json(r);
    assert_true(json_is_false(json_object_get(doc, "reset")));
    assert_int_equal(json_integer_value(json_object_get(doc, "counters")), 0);
    json_decref(doc);

    /* Not for everyone; usage. */
    r = CTL_NOBODY(4, "-s", s, "unlock", "alice");
    expect_in(r->err, "permission denied");
    CTL(2, "-s", s, "unlock");
    CTL(2, "-s", s, "unlock", "alice", "bob");
    CTL(2, "-s", s, "unlock", "--source", "", "alice");

    r = CTL(0, "-s", s, "unlock", "alice");
    expect_in(r->out, "cleared 2 login counter(s) of alice\n");
    expect_in(r->out, "login-user-source  user=alice rhost=192.0.2.1/32\n");
    expect_in(r->out, "login-user-source  user=alice rhost=192.0.2.2/32\n");
    CTL(0, "-s", s, "peek", "event=authfail", "user=alice", "rhost=192.0.2.1");
    CTL(0, "-s", s, "peek", "event=authfail", "user=alice", "rhost=192.0.2.2");
    /* bob, root and login-source's per-source counts are kept. */
    CTL(1, "-s", s, "peek", "event=authfail", "user=bob", "rhost=192.0.2.1");
    r = CTL(0, "-s", s, "counters", "--rule", "login-source");
    expect_in(r->out, "rhost=192.0.2.1/32");
    r = CTL(1, "-s", s, "unlock", "alice");
    expect_in(r->out, "cleared 0 login counter(s) of alice");
    expect_in(r->err, "alice has no login counter to clear");

    /* root: its per-source rule is root's too. */
    r = CTL(0, "-s", s, "unlock", "root", "--json");
    doc = parse_json(r);
    assert_int_equal(json_integer_value(json_object_get(doc, "cleared")), 2);
    json_decref(doc);
    CTL(1, "-s", s, "peek", "event=authfail", "user=bob", "rhost=192.0.2.1");

    /* A digest (actor over 32 bytes): only --source reaches it. */
    CTL(1, "-s", s, "peek", "event=authfail", "user=" LONG_USER, "rhost=192.0.2.7");
    CTL(1, "-s", s, "unlock", LONG_USER);
    CTL(1, "-s", s, "unlock", "--source", "192.0.2.8", LONG_USER);
    r = CTL(0, "-s", s, "unlock", "--source", "192.0.2.7", LONG_USER);
    expect_in(r->out, "cleared 1 login counter(s) of " LONG_USER " from 192.0.2.7");
    CTL(0, "-s", s, "peek", "event=authfail", "user=" LONG_USER, "rhost=192.0.2.7");

    /* --source in the form locked shows. */
    r = CTL(0, "-s", s, "unlock", "bob", "--source", "192.0.2.1/32");
    expect_in(r->out, "cleared 1 login counter(s) of bob");
    CTL(0, "-s", s, "peek", "event=authfail", "user=bob", "rhost=192.0.2.1");
}

/* unlock on every host: two divvyds keep the login counters in one real
 * redis-server (store.mode strict); alice failed on each, from a source
 * each; unlock on the first clears both, and the second agrees. */
static void test_divvyctl_unlock_redis(void **state)
{
    struct harness_daemon *a, *b;
    struct redis_srv *rs = NULL;
    struct harness_ctl *r;
    char sa[HARNESS_PATH + 8], sb[HARNESS_PATH + 8];
    char *conf;

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "strict", "closed", 1000, NULL, LOGIN_RULES);
    assert_non_null(conf);
    a = redis_divvyd(conf, 1);
    b = redis_divvyd(conf, 1);
    free(conf);
    snprintf(sa, sizeof(sa), "unix:%s", a->sock);
    snprintf(sb, sizeof(sb), "unix:%s", b->sock);
    CTL(0, "-s", sa, "take", "2", "event=authfail", "user=alice", "rhost=192.0.2.1");
    CTL(0, "-s", sb, "take", "2", "event=authfail", "user=alice", "rhost=192.0.2.2");
    CTL(0, "-s", sb, "take", "2", "event=authfail", "user=bob", "rhost=192.0.2.2");
    CTL(1, "-s", sa, "peek", "event=authfail", "user=alice", "rhost=192.0.2.2");
    r = CTL(0, "-s", sa, "unlock", "alice");
    expect_in(r->out, "cleared 2 login counter(s) of alice\n");
    CTL(0, "-s", sb, "peek", "event=authfail", "user=alice", "rhost=192.0.2.1");
    CTL(0, "-s", sb, "peek", "event=authfail", "user=alice", "rhost=192.0.2.2");
    CTL(1, "-s", sa, "peek", "event=authfail", "user=bob", "rhost=192.0.2.2");
    redis_divvyd_stop(a);
    redis_divvyd_stop(b);
    redis_stop(rs);
}

static void test_divvyctl_locked_next_credit(void **state)
{
    struct harness_opts o = { .config_name = "divvy.conf", .config_text = retry_conf };
    struct harness_daemon *d = NULL;
    const char *s, *when;
    struct harness_ctl *r;
    json_t *doc, *row;
    json_int_t retry;

    (void)state;
    CHECK(harness_start(&o, &d));
    s = sock_of(d);
    CTL(0, "-s", s, "take", "10", "t=tb", "u=alice");
    CTL(0, "-s", s, "take", "2", "t=sw", "u=bob");
    CTL(0, "-s", s, "take", "1", "t=win", "u=carol");
    r = CTL(0, "-s", s, "locked", "--json");
    doc = parse_json(r);
    row = locked_row(doc, "tb");
    assert_int_equal(json_integer_value(json_object_get(row, "credit")), 0);
    retry = json_integer_value(json_object_get(row, "retry_seconds"));
    if (retry < 1 || retry > 2)
        fail_msg("token bucket: retry_seconds %lld, not the 2 s refill step", (long long)retry);
    assert_true(json_integer_value(json_object_get(row, "reset_seconds")) >= 17);
    row = locked_row(doc, "sw");
    retry = json_integer_value(json_object_get(row, "retry_seconds"));
    if (retry < 14 || retry > 15)
        fail_msg("sliding window: retry_seconds %lld, not 15", (long long)retry);
    row = locked_row(doc, "win");
    retry = json_integer_value(json_object_get(row, "retry_seconds"));
    if (retry < 29 || retry > 30)
        fail_msg("window: retry_seconds %lld, not the window's end", (long long)retry);
    json_decref(doc);

    r = CTL(0, "-s", s, "locked");
    when = unlocks_in(r->out, "tb");
    if (strcmp(when, "2s") != 0 && strcmp(when, "1s") != 0)
        fail_msg("locked shows the drained bucket as UNLOCKS IN %s:\n%s", when, r->out);
    when = unlocks_in(r->out, "sw");
    if (strcmp(when, "15s") != 0 && strcmp(when, "14s") != 0)
        fail_msg("locked shows the sliding window as UNLOCKS IN %s:\n%s", when, r->out);
    /* top: the same time under RETRY IN, the refill to full under FULL IN. */
    r = CTL(0, "-s", s, "top", "--once", "--rule", "tb");
    expect_in(r->out, "RETRY IN");
    expect_in(r->out, "FULL IN");
    if (!strstr(r->out, " 2s ") && !strstr(r->out, " 1s "))
        fail_msg("top shows no next-credit time for the drained bucket:\n%s", r->out);
}

static void test_divvyctl_reload(void **state)
{
    struct harness_daemon *d;
    const char *s;
    struct harness_ctl *r;
    json_t *doc;
    char *bad, *changed;

    (void)state;
    d = start_ctl();
    s = sock_of(d);
    r = CTL(0, "-s", s, "reload");
    /* Generations only grow, from CLOCK_MONOTONIC (docs/dev/shm.md "Rule files"). */
    expect_in(r->out, "reloaded: generation ");
    expect_in(r->out, ", 4 rules");
    /* A bad config is rejected with its file:line; the old rules stay. */
    bad = harness_scratch(sizeof(ctl_conf) + 64);
    snprintf(bad, sizeof(ctl_conf) + 64, "%s", ctl_conf);
    memcpy(strstr(bad, "credit_limit = 10"), "credit_limt  = 10", 17);
    CHECK(harness_write_config(d, bad));
    r = CTL(1, "-s", s, "reload");
    expect_in(r->err, "reload rejected");
    expect_in(r->err, "divvy.conf:3:");
    r = CTL(1, "-s", s, "reload", "--json");
    doc = parse_json(r);
    assert_true(json_is_false(json_object_get(doc, "reloaded")));
    assert_non_null(strstr(json_string_value(json_object_get(doc, "error")), "credit_limt"));
    json_decref(doc);
    r = CTL(0, "-s", s, "hit", "path=/take");
    expect_in(r->out, "credit=9 ");
    /* A good one takes effect; counts of unchanged ids are kept. */
    changed = harness_scratch(sizeof(ctl_conf) + 64);
    snprintf(changed, sizeof(ctl_conf) + 64, "%s", ctl_conf);
    memcpy(strstr(changed, "credit_limit = 10"), "credit_limit = 20", 17);
    CHECK(harness_write_config(d, changed));
    r = CTL(0, "-s", s, "reload", "--json");
    doc = parse_json(r);
    assert_true(json_is_true(json_object_get(doc, "reloaded")));
    assert_int_equal(json_integer_value(json_object_get(doc, "rules")), CTL_RULES);
    json_decref(doc);
    r = CTL(0, "-s", s, "hit", "path=/take");
    expect_in(r->out, "credit=18 ");
}

/* Admin verbs from a user who is neither root nor in divvy-admin. */
static void test_divvyctl_non_admin(void **state)
{
    struct harness_daemon *d;
    const char *s;
    struct harness_ctl *r;
    char tcp[64];

    (void)state;
    d = start_ctl();
    s = sock_of(d);
    snprintf(tcp, sizeof(tcp), "tcp:127.0.0.1:%d", d->tcp_port);
    /* Over TCP even root is refused. */
    r = CTL(4, "-s", tcp, "reset", "path=/take");
    expect_in(r->err, "permission denied");
    expect_in(r->err, "TCP");
    CTL(4, "-s", tcp, "reload");
    CTL(4, "-s", tcp, "locked");
    CTL(0, "-s", tcp, "hit", "path=/take");
    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: skipping the unprivileged-user checks)\n");
        return;
    }
    assert_int_equal(chmod(d->dir, 0755), 0);
    r = CTL_NOBODY(4, "-s", s, "reset", "path=/take");
    expect_in(r->err, "permission denied: RESET needs root or membership in divvy-admin");
    r = CTL_NOBODY(4, "-s", s, "reload");
    expect_in(r->err, "permission denied: RELOAD needs root or membership in divvy-admin");
    r = CTL_NOBODY(4, "-s", s, "locked");
    expect_in(r->err, "permission denied");
    CTL_NOBODY(4, "-s", s, "top", "--once");
    CTL_NOBODY(4, "-s", s, "top", "--once", "--json");
    /* The rest works for anyone who may use the socket. */
    CTL_NOBODY(0, "-s", s, "status");
    CTL_NOBODY(0, "-s", s, "rules");
    CTL_NOBODY(0, "-s", s, "hit", "path=/take");
    /* Privileged rules do not apply to them: the default rule denies. */
    CTL_NOBODY(1, "-s", s, "hit", "event=authfail", "user=root", "rhost=192.0.2.1");
    /* No access to the socket at all. */
    assert_int_equal(chmod(d->sock, 0600), 0);
    r = CTL_NOBODY(4, "-s", s, "status");
    expect_in(r->err, "permission denied");
}

/* A daemon that accepts but never answers: cut at --timeout. */
static void test_divvyctl_timeout(void **state)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    char addr[HARNESS_PATH + 8];
    uint64_t t0;
    struct harness_ctl *r;
    int fd;

    (void)state;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/tmp/divvyctl-hung.%d.sock", (int)getpid());
    unlink(sa.sun_path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 16), 0);
    snprintf(addr, sizeof(addr), "unix:%s", sa.sun_path);
    t0 = harness_now_ms();
    r = CTL(3, "-s", addr, "--timeout", "300", "stats");
    expect_in(r->err, "did not answer within 300 ms");
    assert_true(harness_now_ms() - t0 < 5000);
    close(fd);
    unlink(sa.sun_path);
}

/* ---- top in a terminal ------------------------------------------------------------------ */

struct pty_run {
    const char *sock;
    int slave_fd;
};

static int top_in_pty(void *arg)
{
    struct pty_run *p = arg;
    const char *argv[] = { divvyctl_path(), "-s", p->sock, "top", "--interval", "0.2", NULL };

    if (setsid() < 0 || ioctl(p->slave_fd, TIOCSCTTY, 0) < 0)
        return 120;
    dup2(p->slave_fd, 0);
    dup2(p->slave_fd, 1);
    dup2(p->slave_fd, 2);
    execv(argv[0], (char *const *)argv);
    return 122;
}

/* Reads the pty until @needle has appeared (or the deadline); appends to @buf. */
static bool pty_wait_for(int fd, const char *needle, char *buf, size_t size, int timeout_ms)
{
    uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
    size_t used = strlen(buf);

    while (!strstr(buf, needle)) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        uint64_t now = harness_now_ms();
        ssize_t n;

        if (now >= deadline || used + 1 >= size)
            return false;
        if (poll(&pfd, 1, (int)(deadline - now)) <= 0)
            continue;
        n = read(fd, buf + used, size - 1 - used);
        if (n <= 0)
            return false;
        used += (size_t)n;
        buf[used] = '\0';
    }
    return true;
}

/* Interactive top: alternate screen while it runs, q and Ctrl-C end it (exit
 * 0) and the terminal is given back. */
static void test_divvyctl_top_terminal(void **state)
{
    static const char keys[] = { 'q', 3 };
    struct harness_daemon *d;
    struct pty_run p;

    (void)state;
    d = start_ctl();
    CTL(0, "-s", sock_of(d), "hit", "path=/take");
    p.sock = sock_of(d);
    for (size_t k = 0; k < sizeof(keys); k++) {
        char *buf = harness_scratch(OUT_MAX), key = keys[k];
        struct termios before, after;
        int master, status;
        pid_t pid;

        assert_non_null(buf);
        master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        assert_true(master >= 0);
        assert_int_equal(grantpt(master), 0);
        assert_int_equal(unlockpt(master), 0);
        p.slave_fd = open(ptsname(master), O_RDWR | O_NOCTTY);
        assert_true(p.slave_fd >= 0);
        assert_int_equal(tcgetattr(p.slave_fd, &before), 0);
        CHECK(harness_spawn(top_in_pty, &p, &pid));
        if (!pty_wait_for(master, "take", buf, OUT_MAX, 10000))
            fail_msg("top showed no counter of rule take:\n%s", buf);
        assert_non_null(strstr(buf, "\033[?1049h"));
        assert_int_equal(write(master, &key, 1), 1);
        CHECK(harness_reap(pid, 10000, &status));
        assert_int_equal(status, 0);
        pty_wait_for(master, "\033[?1049l", buf, OUT_MAX, 2000);
        assert_non_null(strstr(buf, "\033[?1049l"));
        assert_int_equal(tcgetattr(p.slave_fd, &after), 0);
        assert_int_equal(after.c_lflag & (ICANON | ECHO | ISIG),
                         before.c_lflag & (ICANON | ECHO | ISIG));
        close(p.slave_fd);
        close(master);
    }
}

struct batch_run {
    const char *sock;
    char out[HARNESS_PATH];
};

static int top_batch(void *arg)
{
    struct batch_run *b = arg;
    const char *argv[] = { divvyctl_path(), "-s", b->sock, "top", "-i", "0.1", NULL };
    int fd = open(b->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    if (fd < 0)
        return 121;
    dup2(fd, 1);
    execv(argv[0], (char *const *)argv);
    return 122;
}

/* Without a terminal and without --once: a snapshot per interval until a
 * signal, then exit 0. */
static void test_divvyctl_top_batch(void **state)
{
    struct harness_daemon *d;
    struct batch_run b;
    uint64_t deadline;
    int status, shots = 0;
    pid_t pid;

    (void)state;
    d = start_ctl();
    b.sock = sock_of(d);
    assert_true(snprintf(b.out, sizeof(b.out), "%s/top.out", d->dir) < (int)sizeof(b.out));
    CHECK(harness_spawn(top_batch, &b, &pid));
    deadline = harness_now_ms() + 10000;
    while (shots < 3 && harness_now_ms() < deadline) {
        FILE *f = fopen(b.out, "r");
        char line[512];

        shots = 0;
        while (f && fgets(line, sizeof(line), f))
            shots += strncmp(line, "  CREDIT", 8) == 0;
        if (f)
            fclose(f);
        if (shots < 3)
            harness_pause_ms(20);
    }
    assert_true(shots >= 3);
    assert_int_equal(kill(pid, SIGINT), 0);
    CHECK(harness_reap(pid, 10000, &status));
    assert_int_equal(status, 0);
}

/* ---- check and convert ----------------------------------------------------------------- */

/* Lines of @rel that carry the marker "ERROR", as "path:N:" strings. */
static size_t error_lines(const char *path, char out[][HARNESS_PATH + 16], size_t max)
{
    char line[1024];
    unsigned n = 0;
    size_t k = 0;
    FILE *f = fopen(path, "r");

    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        n++;
        if (strstr(line, "ERROR") && k < max)
            snprintf(out[k++], HARNESS_PATH + 16, "%s:%u:", path, n);
    }
    fclose(f);
    return k;
}

static void test_divvyctl_check(void **state)
{
    static const char *const good[] = { "etc/divvy.ini", "etc/divvy.json", "etc/divvy.conf" };
    /* Fixtures mark their bad lines with ERROR; JSON cannot, so its line is here. */
    static const struct { const char *file; unsigned line; } bad[] = {
        { "tests/fixtures/bad-several.conf", 0 },
        { "tests/fixtures/bad-unreachable.conf", 0 },
        { "tests/fixtures/bad-typo.ini", 0 },
        { "tests/fixtures/bad-typo.json", 7 },
    };
    char path[HARNESS_PATH], marks[8][HARNESS_PATH + 16];
    struct harness_ctl *r;
    json_t *doc, *problems;

    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        CHECK(harness_src_path(good[i], path, sizeof(path)));
        r = CTL(0, "check", path);
        expect_in(r->out, ": OK, ");
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n;

        CHECK(harness_src_path(bad[i].file, path, sizeof(path)));
        n = error_lines(path, marks, 8);
        if (bad[i].line) {
            snprintf(marks[0], sizeof(marks[0]), "%s:%u:", path, bad[i].line);
            n = 1;
        }
        assert_true(n > 0);
        /* Every problem, each as file:line: reason. */
        r = CTL(1, "check", path);
        for (size_t k = 0; k < n; k++)
            expect_in(r->out, marks[k]);
        r = CTL(1, "check", "--json", path);
        doc = parse_json(r);
        problems = json_object_get(json_array_get(json_object_get(doc, "files"), 0),
                                   "problems");
        assert_int_equal(json_array_size(problems), n);
        assert_true(json_integer_value(json_object_get(json_array_get(problems, 0), "line"))
                    > 0);
        json_decref(doc);
    }
    /* Several files: one bad one makes the status 1, the good ones still say OK. */
    {
        char p1[HARNESS_PATH], p2[HARNESS_PATH];

        CHECK(harness_src_path("etc/divvy.ini", p1, sizeof(p1)));
        CHECK(harness_src_path("tests/fixtures/bad-typo.ini", p2, sizeof(p2)));
        r = CTL(1, "check", p1, p2);
        expect_in(r->out, ": OK, 6 rules");
        expect_in(r->out, "bad-typo.ini:3:");
    }
    r = CTL(1, "check", "/nonexistent/divvy.conf");
    expect_in(r->out, "/nonexistent/divvy.conf");
}

/* RULES of a daemon started on @config_src (a file), as JSON. */
static json_t *rules_of(const char *config_name, const char *config_src)
{
    struct harness_opts o = { .config_name = config_name, .config_src = config_src };
    struct harness_daemon *d = NULL;
    struct harness_ctl *r;
    json_t *doc;

    json_t *rules;

    CHECK(harness_start(&o, &d));
    r = CTL(0, "-s", sock_of(d), "rules", "--json");
    doc = parse_json(r);
    harness_free(d);
    rules = json_incref(json_object_get(doc, "rules"));
    json_decref(doc);
    assert_non_null(rules);
    return rules;
}

static void test_divvyctl_convert_round_trip(void **state)
{
    static const char *const files[] = { "etc/divvy.ini", "etc/divvy.json",
                                         "tests/fixtures/quirks.ini",
                                         "tests/fixtures/extensions.json" };
    char src[HARNESS_PATH], out[HARNESS_PATH];
    const char *dir = getenv("TMPDIR");
    struct harness_ctl *r;

    (void)state;
    snprintf(out, sizeof(out), "%s/divvyctl-convert.%d.conf", dir && dir[0] ? dir : "/tmp",
             (int)getpid());
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        const char *ext = strrchr(files[i], '.');
        json_t *a, *b;
        FILE *f;
        char *text;
        size_t len;

        CHECK(harness_src_path(files[i], src, sizeof(src)));
        r = CTL(0, "convert", src, "-o", out);
        expect_in(r->err, "rules written to");
        r = CTL(0, "check", out);
        /* Standard output gets the same text. */
        r = CTL(0, "convert", src);
        f = fopen(out, "r");
        assert_non_null(f);
        text = harness_scratch(OUT_MAX);
        len = fread(text, 1, OUT_MAX - 1, f);
        fclose(f);
        text[len] = '\0';
        assert_string_equal(r->out, text);
        expect_in(text, "rules = (");
        /* The same rules, ids included (so counters carry over). */
        a = rules_of(ext && strcmp(ext, ".json") == 0 ? "divvy.json" : "divvy.ini", src);
        b = rules_of("divvy.conf", out);
        if (!json_equal(a, b)) {
            char *ja = json_dumps(a, JSON_INDENT(1)), *jb = json_dumps(b, JSON_INDENT(1));

            fail_msg("%s: RULES differ after convert:\n%s\n---\n%s", files[i], ja, jb);
        }
        json_decref(a);
        json_decref(b);
        unlink(out);
    }
    /* Invalid input: problems printed, nothing written. */
    CHECK(harness_src_path("tests/fixtures/bad-typo.ini", src, sizeof(src)));
    r = CTL(1, "convert", src, "-o", out);
    expect_in(r->err, "bad-typo.ini:3:");
    assert_int_equal(access(out, F_OK), -1);
    CHECK(harness_src_path("etc/divvy.ini", src, sizeof(src)));
    r = CTL(5, "convert", src, "-o", "/nonexistent/dir/divvy.conf");
    expect_in(r->err, "/nonexistent/dir/divvy.conf");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_divvyctl_help_and_usage, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_status, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_relative_socket, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_hit_take_peek_reset, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_rules_explain_stats, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_locked_and_top, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_unlabelled_by_match, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_unlock, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_unlock_redis, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_locked_next_credit, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_reload, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_non_admin, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_timeout, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_top_terminal, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_top_batch, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_check, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_divvyctl_convert_round_trip, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("divvyctl", tests, NULL, NULL);
}
