/* SPDX-License-Identifier: MIT */
/*
 * Integration: divvy's own README.md, "Talk to it", run as a user on a fresh
 * machine would: the `bash -c '... /dev/tcp/...'` transcript (bash only, no
 * nc) and the `build/divvyctl` commands, against the real divvyd on the
 * shipped etc/divvy.conf, with the README's port and socket path replaced by
 * the test daemon's.  Each command must end by itself (a deadline of 30 s
 * kills it: `nc` without -q1/-N hung) and print exactly the README's lines
 * (the seconds field may differ by one: a second may tick during the run).
 * The README is read as it is, so editing the transcript without the
 * daemon agreeing fails here.  The redis-cli transcript runs the same way
 * against a resp: listener (docs/resp.md).
 */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

#define README_MAX 65536
#define OUT_MAX    8192
#define LINES_MAX  64

struct transcript {
    char *cmd;                  /* the command after "$ ", heredoc included */
    char *want[LINES_MAX];      /* the lines it prints */
    size_t n_want;
};

/* README.md as lines (in scratch memory); *ret_n their count. */
static char **readme_lines(size_t *ret_n)
{
    char path[512], *buf = harness_scratch(README_MAX), **lines, *l, *nl;
    size_t n = 0, len;
    FILE *f;

    assert_non_null(buf);
    CHECK(harness_src_path("README.md", path, sizeof(path)));
    f = fopen(path, "r");
    assert_non_null(f);
    len = fread(buf, 1, README_MAX - 1, f);
    fclose(f);
    buf[len] = '\0';
    lines = harness_scratch(sizeof(*lines) * (len + 1));
    assert_non_null(lines);
    for (l = buf; *l; l = nl + 1) {
        lines[n++] = l;
        nl = strchr(l, '\n');
        if (!nl)
            break;
        *nl = '\0';
    }
    *ret_n = n;
    return lines;
}

/*
 * From line *@at on, the first line "$ @prefix...": the command (with its
 * heredoc up to "EOF" when it has one, joined by newlines) and the lines
 * after it, up to the next "$ " line or the end of the ``` block.  *@at is
 * left on the line after the transcript.
 */
static void find_transcript(char **lines, size_t n, size_t *at, const char *prefix,
                            struct transcript *t)
{
    size_t i = *at, len = 0;

    memset(t, 0, sizeof(*t));
    while (i < n && !(strncmp(lines[i], "$ ", 2) == 0 &&
                      strncmp(lines[i] + 2, prefix, strlen(prefix)) == 0))
        i++;
    if (i == n)
        fail_msg("README.md has no transcript starting \"$ %s\"", prefix);
    t->cmd = harness_scratch(README_MAX);
    assert_non_null(t->cmd);
    len = (size_t)snprintf(t->cmd, README_MAX, "%s", lines[i++] + 2);
    if (strstr(t->cmd, "<<'EOF'")) {
        while (i < n && len < README_MAX) {
            len += (size_t)snprintf(t->cmd + len, README_MAX - len, "\n%s", lines[i]);
            if (strcmp(lines[i++], "EOF") == 0)
                break;
        }
    }
    while (i < n && strcmp(lines[i], "```") != 0 && strncmp(lines[i], "$ ", 2) != 0) {
        assert_true(t->n_want < LINES_MAX);
        t->want[t->n_want++] = lines[i++];
    }
    *at = i;
}

/* @s with every @from replaced by @to, in scratch memory. */
static char *replace(const char *s, const char *from, const char *to)
{
    char *out = harness_scratch(strlen(s) * 2 + 4096), *o = out;
    size_t flen = strlen(from), tlen = strlen(to);

    assert_non_null(out);
    while (*s) {
        if (strncmp(s, from, flen) == 0) {
            memcpy(o, to, tlen);
            o += tlen;
            s += flen;
        } else {
            *o++ = *s++;
        }
    }
    *o = '\0';
    return out;
}

/* Runs @t's command (in bash, from the daemon's dir, 30 s deadline) and
 * compares what it prints with the README's lines. */
static void run_transcript(struct harness_daemon *d, const struct transcript *t,
                           const char *cmd)
{
    char script[HARNESS_PATH + 16], run[2 * HARNESS_PATH + 64], *out = harness_scratch(OUT_MAX);
    char *line, *next;
    size_t n = 0, len;
    FILE *f, *p;
    int st;

    assert_non_null(out);
    snprintf(script, sizeof(script), "%s/readme.sh", d->dir);
    f = fopen(script, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", cmd);
    assert_int_equal(fclose(f), 0);
    snprintf(run, sizeof(run), "cd '%s' && timeout 30 bash '%s' 2>&1", d->dir, script);
    p = popen(run, "r");
    assert_non_null(p);
    len = fread(out, 1, OUT_MAX - 1, p);
    out[len] = '\0';
    st = pclose(p);
    if (!WIFEXITED(st) || WEXITSTATUS(st) == 124)
        fail_msg("README command did not end within 30 s:\n%s\n--- printed:\n%s", cmd, out);
    for (line = out; *line; line = next, n++) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        else
            next = line + strlen(line);
        if (n >= t->n_want)
            fail_msg("README command printed more than its %zu lines: \"%s\"", t->n_want,
                     line);
        if (!harness_same_reply(line, t->want[n]))
            fail_msg("README command, line %zu: printed \"%s\", README says \"%s\"", n + 1,
                     line, t->want[n]);
    }
    if (n != t->n_want)
        fail_msg("README command printed %zu lines, README shows %zu:\n%s", n, t->n_want, cmd);
}

static struct harness_daemon *start_conf(void)
{
    struct harness_opts o = { .config_name = "divvy.conf" };
    struct harness_daemon *d = NULL;
    char src[512];

    CHECK(harness_src_path("etc/divvy.conf", src, sizeof(src)));
    o.config_src = src;
    CHECK(harness_start(&o, &d));
    return d;
}

/* The bash /dev/tcp transcript, then the divvyctl lines after it (they
 * continue the same counters), on one fresh divvyd. */
static void test_readme_divvy_talk_to_it(void **state)
{
    struct harness_daemon *d = start_conf();
    const char *ctl = getenv("DIVVYCTL");
    char tcp[64], dev[64], **lines;
    struct transcript t;
    size_t n, at = 0;

    (void)state;
    if (!ctl || !*ctl)
        ctl = "build/divvyctl";
    lines = readme_lines(&n);
    snprintf(dev, sizeof(dev), "/dev/tcp/127.0.0.1/%d", d->tcp_port);
    snprintf(tcp, sizeof(tcp), "tcp:127.0.0.1:%d", d->tcp_port);
    find_transcript(lines, n, &at, "bash -c '", &t);
    assert_non_null(strstr(t.cmd, "/dev/tcp/127.0.0.1/8321"));
    run_transcript(d, &t, replace(t.cmd, "/dev/tcp/127.0.0.1/8321", dev));

    /* The two divvyctl commands, over TCP and over the Unix socket. */
    for (int i = 0; i < 2; i++) {
        char *cmd;

        find_transcript(lines, n, &at, "build/divvyctl ", &t);
        cmd = replace(t.cmd, "build/divvyctl", ctl);
        cmd = replace(cmd, "tcp:127.0.0.1:8321", tcp);
        run_transcript(d, &t, replace(cmd, "build/run/divvy.sock", d->sock));
    }
    harness_free(d);
}

/* The redis-cli transcript (docs/resp.md) on a fresh divvyd that also
 * listens on a resp: socket; --no-raw gives redis-cli's terminal format,
 * which the README shows, when its output is not a terminal. */
static void test_readme_divvy_redis_cli(void **state)
{
    struct harness_opts o = { .config_name = "divvy.conf", .resp = true };
    struct harness_daemon *d = NULL;
    char src[512], **lines;
    struct transcript t;
    size_t n, at = 0;

    (void)state;
    if (system("command -v redis-cli >/dev/null 2>&1") != 0) {
        fprintf(stderr, "SKIP: redis-cli not installed (Debian: redis-tools)\n");
        skip();
    }
    CHECK(harness_src_path("etc/divvy.conf", src, sizeof(src)));
    o.config_src = src;
    CHECK(harness_start(&o, &d));
    lines = readme_lines(&n);
    for (int i = 0; i < 4; i++) {
        char *cmd;

        find_transcript(lines, n, &at, "redis-cli ", &t);
        cmd = replace(t.cmd, "redis-cli ", "redis-cli --no-raw ");
        run_transcript(d, &t, replace(cmd, "/run/divvy/resp.sock", d->resp_sock));
    }
    harness_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_readme_divvy_talk_to_it, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_readme_divvy_redis_cli, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("readme_divvy", tests, NULL, NULL);
}
