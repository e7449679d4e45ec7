/* SPDX-License-Identifier: MIT */
/*
 * Integration: what an operator sees of a divvyd whose rules keep their
 * counters in Redis (docs/redis.md "Monitoring", "COUNTERS").
 *   - COUNTERS lists the counters of strict rules, read from Redis (they are
 *     in no host table), with its filters (rule=, exhausted=true, max=), a
 *     key prefix full of glob characters, and its reply in its place among
 *     pipelined replies; with Redis down it answers at once with this host's
 *     counters.  divvyctl locked and top show them like the others.
 *   - divvyctl status says where Redis is, whether it is up or since when
 *     it is down, and counts denials by cause; divvyctl explain tells a
 *     Redis-down deny from a quota deny.
 * COUNTERS and locked are admin verbs: run as root (skipped otherwise).
 */
#include <fcntl.h>
#include <limits.h>
#include <sys/wait.h>

#include "harness_redis.h"

#define TIMEOUT_MS  200
#define OUT_MAX     (64 * 1024)

/* A prefix that is a Redis glob unless escaped: "t*[x]:" would match
 * neither its own keys nor only them. */
#define PREFIX      "t*[x]:"

static const char rules_text[] =
    "{ match = { path = \"/login\"; }; label = \"login\"; actor = \"user\";\n"
    "  credit_limit = 3; reset_seconds = 3600; },\n"
    "{ match = { path = \"/bucket\"; }; label = \"bucket\"; actor = \"user\";\n"
    "  algorithm = \"token_bucket\"; credit_limit = 2; refill_amount = 1;\n"
    "  refill_seconds = 600; },\n"
    "{ match = { path = \"/slide\"; }; label = \"slide\"; actor = \"user\";\n"
    "  algorithm = \"sliding_window\"; credit_limit = 4; reset_seconds = 600; },\n"
    "{ match = { path = \"/here\"; }; label = \"here\"; actor = \"user\"; store = \"local\";\n"
    "  credit_limit = 5; reset_seconds = 600; },\n"
    "{ default = true; credit_limit = 0; reset_seconds = 0; }";

static struct harness_daemon *start(struct redis_srv *rs, const char *policy)
{
    struct harness_daemon *d;
    char *conf = redis_config(rs, "strict", policy, TIMEOUT_MS, "prefix = \"" PREFIX "\";",
                              rules_text);

    assert_non_null(conf);
    d = redis_divvyd(conf, 2);
    free(conf);
    return d;
}

static bool is_root(void)
{
    if (geteuid() == 0)
        return true;
    fprintf(stderr, "  (not root: skipping the admin verbs COUNTERS and locked)\n");
    return false;
}

static void hits(struct harness_conn *c, const char *req, unsigned n)
{
    char r[HARNESS_LINE];

    for (unsigned i = 0; i < n; i++)
        CHECK(harness_cmd(c, req, r, sizeof(r)));
}

/* The COUNTERS line of @actor for rule @rule in @body, or fails. */
static const char *row_of(const char *body, const char *rule, const char *actor)
{
    static char line[1024];
    char needle[256];
    const char *p, *end;

    snprintf(needle, sizeof(needle), "rule=%s actor=\"%s\" ", rule, actor);
    p = strstr(body, needle);
    if (!p)
        fail_msg("no COUNTERS line for %s/%s in:\n%s", rule, actor, body);
    end = strchr(p, '\n');
    snprintf(line, sizeof(line), "%.*s", end ? (int)(end - p) : (int)strlen(p), p);
    return line;
}

static void expect_in(const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("\"%s\" not found in:\n%s", needle, text);
}

/* ---- divvyctl ------------------------------------------------------------------- */

struct ctl_run {
    const char *const *args;
    char out_path[HARNESS_PATH + 16];
};

static int ctl_child(void *arg)
{
    struct ctl_run *r = arg;
    const char *argv[16], *p = getenv("DIVVYCTL");
    int n = 0, fd = open(r->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    if (fd < 0)
        return 121;
    dup2(fd, 1);
    dup2(fd, 2);
    argv[n++] = p && p[0] ? p : "build/divvyctl";
    for (size_t i = 0; r->args[i] && n < 15; i++)
        argv[n++] = r->args[i];
    argv[n] = NULL;
    execv(argv[0], (char *const *)argv);
    return 122;
}

/* Runs divvyctl on @d's socket with @args; its output (stdout and stderr). */
static const char *ctl(struct harness_daemon *d, int want, const char *const *args)
{
    const char *all[16] = { "--socket", NULL };
    char addr[HARNESS_PATH + 8];
    struct ctl_run r = { .args = all };
    char *out = harness_scratch(OUT_MAX);
    size_t n = 0, k = 2;
    int status;
    pid_t pid;
    FILE *f;

    assert_non_null(out);
    snprintf(addr, sizeof(addr), "unix:%s", d->sock);
    all[1] = addr;
    for (size_t i = 0; args[i] && k < 15; i++)
        all[k++] = args[i];
    snprintf(r.out_path, sizeof(r.out_path), "%s/divvyctl.out", d->dir);
    CHECK(harness_spawn(ctl_child, &r, &pid));
    CHECK(harness_reap(pid, 30000, &status));
    f = fopen(r.out_path, "r");
    if (f) {
        n = fread(out, 1, OUT_MAX - 1, f);
        fclose(f);
    }
    out[n] = '\0';
    unlink(r.out_path);
    if (status != want)
        fail_msg("divvyctl %s: exit %d, want %d:\n%s", args[0], status, want, out);
    return out;
}

#define CTL(d, want, ...) ctl((d), (want), (const char *const[]){ __VA_ARGS__, NULL })

/* ---- COUNTERS ----------------------------------------------------------------- */

static void test_redis_ctl_counters_strict(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    char body[65536], line[HARNESS_LINE];
    const char *row, *out;
    static const char pipelined[] = "HIT path=/here user=frank\nCOUNTERS rule=bucket\nPING\n"
                                    "HIT path=/login user=bob\n";
    int n, status;

    (void)state;
    if (!is_root())
        return;
    CHECK(redis_start(&rs));
    d = start(rs, "closed");
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    hits(c, "HIT path=/login user=alice", 3);                /* locked */
    hits(c, "HIT path=/login user=bob", 1);
    hits(c, "HIT path=/bucket user=carol", 2);               /* empty */
    hits(c, "HIT path=/slide user=dave", 1);
    hits(c, "HIT path=/here user=erin", 2);                  /* this host's table */
    /* A key that an unescaped pattern would take for one of ours. */
    assert_int_equal(redis_int(rs, "SET %s 1", "tQx:divvy:{login:mallory}") == LLONG_MIN, 1);

    n = harness_multi(c, "COUNTERS", body, sizeof(body));
    assert_int_equal(n, 5);
    row = row_of(body, "login", "alice");
    expect_in(row, " credit=0 used=3 limit=3 ");
    expect_in(row, " store=redis");
    assert_null(strstr(row, "retry_seconds=0 "));
    expect_in(row_of(body, "login", "bob"), " credit=2 used=1 limit=3 ");
    row = row_of(body, "bucket", "carol");
    expect_in(row, " credit=0 used=2 limit=2 reset_seconds=1200 ");
    expect_in(row, " retry_seconds=600 store=redis");
    expect_in(row_of(body, "slide", "dave"), " credit=3 used=1 limit=4 ");
    expect_in(row_of(body, "here", "erin"), " credit=3 used=2 limit=5 ");
    expect_in(row_of(body, "here", "erin"), " store=local");
    assert_null(strstr(body, "mallory"));
    /* Least credit first, across the tables and Redis. */
    assert_true(strstr(body, "actor=\"alice\"") < strstr(body, "actor=\"bob\""));

    assert_int_equal(harness_multi(c, "COUNTERS exhausted=true", body, sizeof(body)), 2);
    row_of(body, "login", "alice");
    row_of(body, "bucket", "carol");
    assert_int_equal(harness_multi(c, "COUNTERS rule=login", body, sizeof(body)), 2);
    assert_null(strstr(body, "carol"));
    assert_int_equal(harness_multi(c, "COUNTERS max=1", body, sizeof(body)), 1);

    /* Pipelined: the reply keeps its place although it waits for Redis. */
    CHECK(harness_send(c, pipelined, strlen(pipelined)));
    CHECK(harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS));
    assert_string_equal(line, "OK true 4 600");
    CHECK(harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS));
    assert_string_equal(line, "OK 1");
    CHECK(harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS));
    expect_in(line, "rule=bucket actor=\"carol\"");
    CHECK(harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS));
    assert_string_equal(line, "OK pong");
    CHECK(harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS));
    expect_in(line, "OK true 1 ");

    /* divvyctl shows them like any other counter. */
    out = CTL(d, 0, "locked");
    expect_in(out, "alice");
    expect_in(out, "carol");
    out = CTL(d, 0, "top", "--once");
    expect_in(out, "dave");

    /* Redis down: this host's counters, at once. */
    redis_kill(rs);
    redis_wait_state(c, "down");
    assert_int_equal(harness_multi(c, "COUNTERS", body, sizeof(body)), 2);
    row_of(body, "here", "erin");
    row_of(body, "here", "frank");
    harness_close(c);
    /* Every job freed: a clean exit (under ASan, LeakSanitizer would say). */
    CHECK(harness_stop(d, &status));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        harness_dump_log(d);
        fail_msg("divvyd exited with status 0x%x", status);
    }
    harness_free(d);
    redis_stop(rs);
}

/* ---- status and explain -------------------------------------------------------- */

static void test_redis_ctl_status_and_explain(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    char want[HARNESS_PATH + 64];
    const char *out;

    (void)state;
    CHECK(redis_start(&rs));
    d = start(rs, "closed");
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    hits(c, "HIT path=/login user=alice", 4);
    out = CTL(d, 0, "status");
    snprintf(want, sizeof(want), "redis        up at unix:%s, ", rs->sock);
    expect_in(out, want);
    expect_in(out, "on_redis_error closed");
    expect_in(out, "4 strict and 0 lease rules");
    expect_in(out, "denials      quota 1, redis-down 0,");
    out = CTL(d, 0, "explain", "path=/login", "user=alice");
    expect_in(out, "now: denied (quota)");

    redis_kill(rs);
    redis_wait_state(c, "down");
    hits(c, "HIT path=/login user=bob", 1);
    out = CTL(d, 0, "status");
    expect_in(out, "redis        DOWN for ");
    expect_in(out, "on_redis_error closed: its rules deny every hit");
    expect_in(out, "denials      quota 1, redis-down 1,");
    out = CTL(d, 0, "explain", "path=/login", "user=bob");
    expect_in(out, "answer: Redis is down and on_redis_error = closed: denied");
    expect_in(out, "now: denied (Redis is down: on_redis_error)");
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_redis_ctl_counters_strict, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_ctl_status_and_explain, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_ctl", tests, NULL, NULL);
}
