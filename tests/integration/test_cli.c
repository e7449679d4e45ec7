/* SPDX-License-Identifier: MIT */
/*
 * Integration: divvyd's command line.  --check validates a config and prints
 * problems as file:line: reason on stderr (exit 0/1); --version and --help
 * exit 0; a bad option, a bad listen address or an invalid config at start
 * make divvyd exit non-zero with a message; a running divvyd logs one
 * "listening on <addr>" line per listener.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define OUT_SIZE 16384

/* A temp dir for config files that no daemon owns. */
static char tmpdir[64];

static int cli_setup(void **state)
{
    char owner[128];
    FILE *f;

    if (harness_setup(state) < 0)
        return -1;
    /* Named and marked like the harness's dirs, so a killed run's dir is
     * swept up by the next one. */
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/divvy-it.XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(owner, sizeof(owner), "%s/owner.pid", tmpdir);
    f = fopen(owner, "w");
    if (!f)
        return -1;
    fprintf(f, "%ld\n", (long)getpid());
    return fclose(f) == 0 ? 0 : -1;
}

static int cli_teardown(void **state)
{
    char cmd[128];
    int r = harness_teardown(state);

    if (tmpdir[0]) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            r = -1;
        tmpdir[0] = '\0';
    }
    return r;
}

static const char *tmp_config(const char *name, const char *text, char *path, size_t size)
{
    FILE *f;

    snprintf(path, size, "%s/%s", tmpdir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    return path;
}

static void expect_run(const char *const *args, int want_status, char *out, char *err)
{
    int status = -1;

    CHECK(harness_run_divvyd(args, 20000, &status, out, OUT_SIZE, err, OUT_SIZE));
    if (status != want_status)
        fail_msg("divvyd %s %s: exit %d, want %d\nstdout: %s\nstderr: %s", args[0],
                 args[1] ? args[1] : "", status, want_status, out, err);
}

static void test_cli_check_examples(void **state)
{
    static const char *const files[] = { "etc/divvy.ini", "etc/divvy.json", "etc/divvy.conf" };
    char path[512], *out = harness_scratch(OUT_SIZE), *err = harness_scratch(OUT_SIZE);

    (void)state;
    assert_non_null(out);
    assert_non_null(err);
    for (int i = 0; i < 3; i++) {
        const char *args[] = { "--check", "-c", path, NULL };

        CHECK(harness_src_path(files[i], path, sizeof(path)));
        expect_run(args, 0, out, err);
    }
}

/* Every line of @text starts with "@path:" (FILE:LINE: for parsers, no
 * "divvyd: " before it). */
static void expect_lines_start(const char *text, const char *path)
{
    size_t n = strlen(path);

    if (!text[0])
        fail_msg("no output, want lines starting with %s:", path);
    for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
        if (strncmp(l, path, n) != 0 || l[n] != ':')
            fail_msg("a line does not start with \"%s:\":\n%s", path, text);
}

static void test_cli_check_reports_file_line(void **state)
{
    static const struct {
        const char *name, *text;
        int line;
    } bad[] = {
        /* An unknown setting (a typo is never ignored). */
        { "typo.ini", "[path=/a]\ncreditLimit = 1\ncreditLimt = 5\nresetSeconds = 60\n\n"
                      "[default]\ncreditLimit = 0\nresetSeconds = 0\n", 3 },
        /* A rule that an earlier stop rule makes unreachable. */
        { "unreachable.ini", "[method=GET]\ncreditLimit = 1\nresetSeconds = 60\n\n"
                             "[method=GET path=/x]\ncreditLimit = 1\nresetSeconds = 60\n\n"
                             "[default]\ncreditLimit = 0\nresetSeconds = 0\n", 5 },
        /* A negative limit. */
        { "negative.json", "{\n  \"overrides\": [\n    {\n      \"operation\": {\"a\": \"b\"},\n"
                           "      \"creditLimit\": -1,\n      \"resetSeconds\": 60\n    }\n"
                           "  ],\n  \"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}\n}\n",
          0 },
        /* A repeated label. */
        { "label.conf", "rules = (\n"
                        "  { match = { a = \"1\"; }; credit_limit = 1; reset_seconds = 1;\n"
                        "    label = \"x\"; },\n"
                        "  { match = { a = \"2\"; }; credit_limit = 1; reset_seconds = 1;\n"
                        "    label = \"x\"; },\n"
                        "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
                        ");\n", 4 },
        /* No default rule. */
        { "nodefault.conf", "rules = (\n"
                            "  { match = { a = \"1\"; }; credit_limit = 1; reset_seconds = 1; }\n"
                            ");\n", 0 },
        /* A libconfig syntax error. */
        { "syntax.conf", "rules = (\n  { match = { a = = \"1\"; }; credit_limit = 1; }\n);\n", 2 },
        /* Unknown server setting. */
        { "server.conf", "server = {\n  max_conections = 5;\n};\n"
                         "rules = ( { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
          2 },
    };
    char path[256], want[300], *out = harness_scratch(OUT_SIZE), *err = harness_scratch(OUT_SIZE);

    (void)state;
    assert_non_null(out);
    assert_non_null(err);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *args[] = { "--check", "--config", path, NULL };

        tmp_config(bad[i].name, bad[i].text, path, sizeof(path));
        expect_run(args, 1, out, err);
        if (bad[i].line)
            snprintf(want, sizeof(want), "%s:%d: ", path, bad[i].line);
        else
            snprintf(want, sizeof(want), "%s:", path);
        if (!strstr(err, want))
            fail_msg("%s: stderr lacks \"%s\":\n%s", bad[i].name, want, err);
        expect_lines_start(err, path);
    }
    /* A file that does not exist. */
    {
        const char *args[] = { "--check", "-c", "/nonexistent/divvy.conf", NULL };

        expect_run(args, 1, out, err);
        expect_lines_start(err, "/nonexistent/divvy.conf");
    }
}

static void test_cli_version_and_help(void **state)
{
    char *out = harness_scratch(OUT_SIZE), *err = harness_scratch(OUT_SIZE);
    const char *v1[] = { "-V", NULL }, *v2[] = { "--version", NULL };
    const char *h1[] = { "-h", NULL }, *h2[] = { "--help", NULL };

    (void)state;
    assert_non_null(out);
    assert_non_null(err);
    expect_run(v1, 0, out, err);
    if (!strpbrk(out, "0123456789"))
        fail_msg("-V printed no version: \"%s\"", out);
    expect_run(v2, 0, out, err);
    assert_true(strlen(out) > 0);
    expect_run(h1, 0, out, err);
    expect_run(h2, 0, out, err);
    for (const char *const *o = (const char *const[]){ "--config", "--listen", "--state-dir",
                                                       "--workers", "--check", NULL }; *o; o++)
        if (!strstr(out, *o))
            fail_msg("--help does not mention %s:\n%s", *o, out);
}

static void test_cli_bad_invocations(void **state)
{
    char path[256], sock[128], *out = harness_scratch(OUT_SIZE), *err = harness_scratch(OUT_SIZE);
    const char *bogus[] = { "--bogus", NULL };
    int status;

    (void)state;
    assert_non_null(out);
    assert_non_null(err);
    CHECK(harness_run_divvyd(bogus, 10000, &status, out, OUT_SIZE, err, OUT_SIZE));
    assert_true(status != 0 && status < 128);
    assert_true(strlen(err) > 0);

    /* An invalid config at start: non-zero exit with file:line, no hang. */
    tmp_config("bad.ini", "[path=/a]\ncreditLimit = x\nresetSeconds = 60\n", path, sizeof(path));
    snprintf(sock, sizeof(sock), "unix:%s/s.sock", tmpdir);
    {
        const char *args[] = { "-c", path, "-l", sock, "-s", tmpdir, NULL };

        CHECK(harness_run_divvyd(args, 10000, &status, out, OUT_SIZE, err, OUT_SIZE));
        assert_true(status != 0 && status < 128);
        if (!strstr(err, path))
            fail_msg("start with a bad config: stderr lacks the file name:\n%s", err);
    }
    /* A bad listen address. */
    tmp_config("ok.ini", "[default]\ncreditLimit = 0\nresetSeconds = 0\n", path, sizeof(path));
    {
        const char *args[] = { "-c", path, "-l", "bogus:1234", "-s", tmpdir, NULL };

        CHECK(harness_run_divvyd(args, 10000, &status, out, OUT_SIZE, err, OUT_SIZE));
        assert_true(status != 0 && status < 128);
    }
    {
        const char *args[] = { "-c", path, "-l", "tcp:127.0.0.1:notaport", "-s", tmpdir, NULL };

        CHECK(harness_run_divvyd(args, 10000, &status, out, OUT_SIZE, err, OUT_SIZE));
        assert_true(status != 0 && status < 128);
    }
    {
        const char *args[] = { "-c", path, "-l", sock, "-s", tmpdir, "-w", "zero", NULL };

        CHECK(harness_run_divvyd(args, 10000, &status, out, OUT_SIZE, err, OUT_SIZE));
        assert_true(status != 0 && status < 128);
    }
}

/* One "listening on" line per listener; -w 1 works. */
static void test_cli_listening_lines(void **state)
{
    struct harness_opts o = {
        .config_name = "one.ini",
        .config_text = "[default]\ncreditLimit = 3\nresetSeconds = 0\n",
        .workers = 1,
    };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    char want[HARNESS_PATH + 32];

    (void)state;
    CHECK(harness_start(&o, &d));
    snprintf(want, sizeof(want), "listening on unix:%s", d->sock);
    if (harness_log_contains(d, want) != 1) {
        harness_dump_log(d);
        fail_msg("log lacks \"%s\"", want);
    }
    snprintf(want, sizeof(want), "listening on tcp:127.0.0.1:%d", d->tcp_port);
    if (harness_log_contains(d, want) != 1) {
        harness_dump_log(d);
        fail_msg("log lacks \"%s\"", want);
    }
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    EXPECT_REPLY(c, "HIT", "OK true 3 0");
    harness_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cli_check_examples, cli_setup, cli_teardown),
        cmocka_unit_test_setup_teardown(test_cli_check_reports_file_line, cli_setup,
                                        cli_teardown),
        cmocka_unit_test_setup_teardown(test_cli_version_and_help, cli_setup, cli_teardown),
        cmocka_unit_test_setup_teardown(test_cli_bad_invocations, cli_setup, cli_teardown),
        cmocka_unit_test_setup_teardown(test_cli_listening_lines, cli_setup, cli_teardown),
    };

    return cmocka_run_group_tests_name("cli", tests, NULL, NULL);
}
