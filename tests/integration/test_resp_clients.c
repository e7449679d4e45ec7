/* SPDX-License-Identifier: MIT */
/*
 * test_resp_clients: divvyd's Redis-protocol listener with real Redis
 * clients.  redis-cli (Debian's redis-tools) reproduces the redis-cli
 * transcript of Smyte's post exactly and pipelines a thousand commands
 * (--pipe) whose counts must be exact; ioredis from the npm registry
 * (tests/resp/package-lock.json, installed with `npm ci` into a cache
 * outside the tree: $XDG_CACHE_HOME or ~/.cache, divvy-npm/<lock hash>)
 * connects, pipelines, runs a multi() transaction and four concurrent
 * clients (tests/resp/node_client.js).  node-redis (npm "redis", RESP3 by
 * default: HELLO 3), redis-py (Debian's python3-redis: pipeline() is a
 * MULTI/EXEC transaction) and redis-cli -3 connect with their defaults and
 * run DIVVY.HIT, RL.REDUCE, CL.THROTTLE; with server.resp_password_file set,
 * each of them connects with the right password and is refused with a wrong
 * one or none.  A missing redis-cli, node, npm or python3-redis, or an
 * unreachable registry, is a SKIP line, never a failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "hash.h"
#include "resp_client.h"

#define RULES                                                                         \
    "rules = (\n"                                                                     \
    "  { match = { app = \"*\"; }; label = \"r1\"; actor = \"app\";\n"                \
    "    credit_limit = 3; reset_seconds = 60; },\n"                                  \
    "  { match = { bulk = \"*\"; }; label = \"bulk\"; actor = \"bulk\";\n"            \
    "    credit_limit = 700; reset_seconds = 600; },\n"                               \
    "  { default = true; label = \"dflt\"; credit_limit = 5; reset_seconds = 60; }\n" \
    ");\n"

#define OUT_MAX (256 * 1024)
/* Debian's interpreter, where python3-redis is (not a pyenv shim's). */
#define PYTHON  "/usr/bin/python3"

struct prog {
    const char *const *argv;
    const char *dir;            /* chdir first; NULL: stay */
    int in, out;                /* the child's ends */
};

static int prog_child(void *arg)
{
    const struct prog *p = arg;

    if (dup2(p->in, 0) < 0 || dup2(p->out, 1) < 0 || dup2(p->out, 2) < 0)
        return 126;
    if (p->dir && chdir(p->dir) < 0)
        return 126;
    execvp(p->argv[0], (char *const *)p->argv);
    return 127;
}

/* Runs @argv with @input on its stdin; its stdout and stderr into @out.
 * *ret_status: its exit code (128 + signal).  Killed after @timeout_ms. */
static int run(const char *const *argv, const char *dir, const char *input, size_t in_len,
               char *out, size_t size, int timeout_ms, int *ret_status)
{
    int pin[2], pout[2], r;
    struct prog p = { .argv = argv, .dir = dir };
    size_t used = 0, off = 0;
    uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
    pid_t pid;

    if (pipe2(pin, O_CLOEXEC) < 0)
        return -errno;
    if (pipe2(pout, O_CLOEXEC) < 0) {
        close(pin[0]);
        close(pin[1]);
        return -errno;
    }
    p.in = pin[0];
    p.out = pout[1];
    r = harness_spawn(prog_child, &p, &pid);
    close(pin[0]);
    close(pout[1]);
    if (r < 0) {
        close(pin[1]);
        close(pout[0]);
        return r;
    }
    fcntl(pin[1], F_SETFL, O_NONBLOCK);
    if (in_len == 0) {
        close(pin[1]);
        pin[1] = -1;
    }
    for (;;) {
        struct pollfd fds[2] = { { .fd = pout[0], .events = POLLIN },
                                 { .fd = pin[1], .events = POLLOUT } };
        int left = (int)(deadline - harness_now_ms());
        ssize_t n;

        if (harness_now_ms() >= deadline || poll(fds, pin[1] >= 0 ? 2 : 1, left) <= 0)
            break;
        if (pin[1] >= 0 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
            n = write(pin[1], input + off, in_len - off);
            if (n > 0)
                off += (size_t)n;
            if (n < 0 || off == in_len) {
                close(pin[1]);
                pin[1] = -1;
            }
        }
        if (fds[0].revents & (POLLIN | POLLHUP)) {
            n = read(pout[0], out + used, size - 1 - used);
            if (n <= 0)
                break;
            used += (size_t)n;
        }
    }
    out[used] = '\0';
    if (pin[1] >= 0)
        close(pin[1]);
    close(pout[0]);
    return harness_reap(pid, 1000, ret_status);
}

/* Whether @cmd is on $PATH. */
static bool have(const char *cmd)
{
    char buf[256];
    int st;

    return run((const char *const[]){ "sh", "-c", "command -v \"$0\"", cmd, NULL }, NULL, "", 0,
               buf, sizeof(buf), 10000, &st) == 0 && st == 0;
}

static struct harness_daemon *start_resp(void)
{
    return resp_start(RULES);
}

/* The post's transcript, byte for byte (--no-raw: redis-cli's terminal
 * format), then the same with each of redis-cli's connection forms. */
static void test_resp_cli_transcript(void **state)
{
    struct harness_daemon *d;
    char *out = harness_scratch(OUT_MAX), port[16];
    int st;

    (void)state;
    if (!have("redis-cli")) {
        fprintf(stderr, "SKIP: redis-cli not installed (Debian: redis-tools)\n");
        skip();
    }
    d = start_resp();
    for (int i = 2; i >= 0; i--) {
        char want[32];

        CHECK(run((const char *const[]){ "redis-cli", "--no-raw", "-s", d->resp_sock,
                                         "RL.REDUCE", "TwoPerMin", "2", "60", NULL },
                  NULL, "", 0, out, OUT_MAX, 10000, &st));
        assert_int_equal(st, 0);
        snprintf(want, sizeof(want), "(integer) %d\n", i);
        assert_string_equal(out, want);
    }
    /* Over TCP, a bucket of other parameters is another bucket. */
    snprintf(port, sizeof(port), "%d", d->resp_port);
    CHECK(run((const char *const[]){ "redis-cli", "-h", "127.0.0.1", "-p", port, "RL.REDUCE",
                                     "TwoPerMin", "3", "60", NULL },
              NULL, "", 0, out, OUT_MAX, 10000, &st));
    assert_string_equal(out, "3\n");
    CHECK(run((const char *const[]){ "redis-cli", "-s", d->resp_sock, "RL.GET", "TwoPerMin", "2",
                                     "60", NULL },
              NULL, "", 0, out, OUT_MAX, 10000, &st));
    assert_string_equal(out, "0\n");
    CHECK(run((const char *const[]){ "redis-cli", "-s", d->resp_sock, "CL.THROTTLE", "user123",
                                     "15", "30", "60", "1", NULL },
              NULL, "", 0, out, OUT_MAX, 10000, &st));
    assert_string_equal(out, "0\n16\n15\n-1\n2\n");
    CHECK(run((const char *const[]){ "redis-cli", "-s", d->resp_sock, "DIVVY.TAKE", "2", "app",
                                     "cli", NULL },
              NULL, "", 0, out, OUT_MAX, 10000, &st));
    assert_string_equal(out, "1\n1\n60\nr1\n");
    harness_free(d);
}

/* redis-cli --pipe: 1000 commands in one stream, every reply counted. */
static void test_resp_cli_pipe(void **state)
{
    static const char hit[] = "*3\r\n$9\r\nDIVVY.HIT\r\n$4\r\nbulk\r\n$3\r\ncli\r\n";
    static const char rl[] = "*4\r\n$9\r\nRL.REDUCE\r\n$4\r\npipe\r\n$3\r\n600\r\n$4\r\n3600\r\n";
    struct harness_daemon *d;
    struct harness_conn *c;
    char *out = harness_scratch(OUT_MAX), *in = harness_scratch(OUT_MAX), reply[HARNESS_LINE];
    size_t n = 0;
    int st;

    (void)state;
    if (!have("redis-cli")) {
        fprintf(stderr, "SKIP: redis-cli not installed (Debian: redis-tools)\n");
        skip();
    }
    d = start_resp();
    for (int i = 0; i < 500; i++) {
        memcpy(in + n, hit, sizeof(hit) - 1);
        n += sizeof(hit) - 1;
        memcpy(in + n, rl, sizeof(rl) - 1);
        n += sizeof(rl) - 1;
    }
    CHECK(run((const char *const[]){ "redis-cli", "-s", d->resp_sock, "--pipe", NULL }, NULL,
              in, n, out, OUT_MAX, 60000, &st));
    if (st != 0 || !strstr(out, "errors: 0, replies: 1000"))
        fail_msg("redis-cli --pipe: status %d:\n%s", st, out);
    /* Exact: 500 of the rule's 700 and 500 of the bucket's 600 are gone. */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "PEEK bulk=cli", reply, sizeof(reply)));
    EXPECT_PREFIX(reply, "OK true 200 ");
    harness_close(c);
    CHECK(run((const char *const[]){ "redis-cli", "-s", d->resp_sock, "RL.GET", "pipe", "600",
                                     "3600", NULL },
              NULL, "", 0, out, OUT_MAX, 10000, &st));
    assert_string_equal(out, "100\n");
    harness_free(d);
}

/* ~/.cache/divvy-npm/<hash of the lock file>/node_modules: ioredis, once. */
static int npm_modules(char *dir, size_t size, char *why, size_t why_size)
{
    char lock[PATH_MAX], src[PATH_MAX], mods[2 * PATH_MAX], cmd[3 * PATH_MAX];
    const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char *text = harness_scratch(OUT_MAX), *out = harness_scratch(OUT_MAX);
    struct stat sb;
    ssize_t len;
    int fd, st;

    CHECK(harness_src_path("tests/resp/package-lock.json", lock, sizeof(lock)));
    CHECK(harness_src_path("tests/resp", src, sizeof(src)));
    fd = open(lock, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    len = read(fd, text, OUT_MAX);
    close(fd);
    if (len <= 0)
        return -EIO;
    if (cache && *cache)
        snprintf(dir, size, "%s/divvy-npm/%016" PRIx64, cache, hash_fast(0, text, (size_t)len));
    else
        snprintf(dir, size, "%s/.cache/divvy-npm/%016" PRIx64, home ? home : "/tmp",
                 hash_fast(0, text, (size_t)len));
    snprintf(mods, sizeof(mods), "%s/node_modules/ioredis/package.json", dir);
    if (stat(mods, &sb) == 0)
        return 0;
    /* npm ci in a fresh directory beside it, renamed into place when done:
     * a half-done install is never taken for a cache. */
    snprintf(cmd, sizeof(cmd),
             "set -e; d=\"$0\"; mkdir -p \"$(dirname \"$d\")\"; t=$(mktemp -d \"$d.XXXXXX\"); "
             "cp \"$1/package.json\" \"$1/package-lock.json\" \"$t/\"; cd \"$t\"; "
             "if npm ci --no-audit --no-fund --loglevel=error --fetch-timeout=30000 "
             "--fetch-retries=1; then "
             "rm -rf \"$d\"; mv \"$t\" \"$d\"; else rm -rf \"$t\"; exit 1; fi");
    CHECK(run((const char *const[]){ "sh", "-c", cmd, dir, src, NULL }, NULL, "", 0, out,
              OUT_MAX, 300000, &st));
    if (st != 0) {
        snprintf(why, why_size, "npm ci failed (registry unreachable?): %.300s", out);
        return -ENETUNREACH;
    }
    return 0;
}

/* Runs tests/resp/@name (node, or python3 for a .py) on @d's RESP socket with
 * @arg (NULL: none); its output, which must hold no FAIL line, into @out.
 * Skips the test when the interpreter or the npm modules are missing. */
static void run_script(struct harness_daemon *d, const char *name, const char *arg, char *out)
{
    char dir[PATH_MAX], why[512] = "", rel[128], script[PATH_MAX], env[PATH_MAX + 32];
    bool py = strstr(name, ".py") != NULL;
    int st, r;

    if (py && (!have(PYTHON) || run((const char *const[]){ PYTHON, "-c", "import redis", NULL },
                                    NULL, "", 0, out, OUT_MAX, 10000, &st) < 0 || st != 0)) {
        fprintf(stderr, "SKIP: %s cannot import redis (Debian: python3-redis)\n", PYTHON);
        skip();
    }
    if (!py && (!have("node") || !have("npm"))) {
        fprintf(stderr, "SKIP: node or npm not installed (Debian: nodejs, npm)\n");
        skip();
    }
    if (!py) {
        r = npm_modules(dir, sizeof(dir), why, sizeof(why));
        if (r == -ENETUNREACH) {
            fprintf(stderr, "SKIP: ioredis and redis (npm) unavailable: %s\n", why);
            skip();
        }
        CHECK(r);
        snprintf(env, sizeof(env), "NODE_PATH=%s/node_modules", dir);
    } else {
        snprintf(env, sizeof(env), "PYTHONDONTWRITEBYTECODE=1");
    }
    snprintf(rel, sizeof(rel), "tests/resp/%s", name);
    CHECK(harness_src_path(rel, script, sizeof(script)));
    CHECK(run((const char *const[]){ "env", env, py ? PYTHON : "node", script, d->resp_sock,
                                     arg, NULL },
              NULL, "", 0, out, OUT_MAX, 60000, &st));
    fprintf(stderr, "%s", out);
    if (st != 0 || strstr(out, "FAIL"))
        fail_msg("%s: status %d", name, st);
}

/* A fresh daemon, @name run on it, its output holding @want and @want2 (NULL: none). */
static void script_test(const char *name, const char *want, const char *want2)
{
    char *out = harness_scratch(OUT_MAX);
    struct harness_daemon *d = start_resp();

    run_script(d, name, NULL, out);
    assert_non_null(strstr(out, want));
    assert_true(!want2 || strstr(out, want2));
    harness_free(d);
}

static void test_resp_node_ioredis(void **state)
{
    (void)state;
    script_test("node_client.js", "ok 4 x 250 DIVVY.HIT allowed",
                "ok multi() DIVVY.HIT PING RL.REDUCE");
}

/* node-redis with its defaults: HELLO 3 (RESP3), CLIENT SETINFO. */
static void test_resp_node_redis(void **state)
{
    (void)state;
    script_test("node_redis_client.js", "ok MULTI/EXEC", NULL);
}

/* redis-py with its defaults: pipeline() is MULTI ... EXEC. */
static void test_resp_redis_py(void **state)
{
    (void)state;
    script_test("redis_py_client.py", "ok pipeline() (MULTI/EXEC)", NULL);
}

/* redis-cli -3: HELLO 3, then the same answers as RESP2's. */
static void test_resp_cli_resp3(void **state)
{
    static const char multi[] = "MULTI\nRL.REDUCE c3 2 60\nPING\nEXEC\n";
    struct harness_daemon *d;
    char *out = harness_scratch(OUT_MAX);
    int st;

    (void)state;
    if (!have("redis-cli")) {
        fprintf(stderr, "SKIP: redis-cli not installed (Debian: redis-tools)\n");
        skip();
    }
    d = start_resp();
    CHECK(run((const char *const[]){ "redis-cli", "-3", "-s", d->resp_sock, "DIVVY.HIT", "app",
                                     "cli3", NULL },
              NULL, "", 0, out, OUT_MAX, 10000, &st));
    assert_string_equal(out, "1\n2\n60\nr1\n");
    CHECK(run((const char *const[]){ "redis-cli", "-3", "-s", d->resp_sock, "CL.THROTTLE", "u3",
                                     "15", "30", "60", "1", NULL },
              NULL, "", 0, out, OUT_MAX, 10000, &st));
    assert_string_equal(out, "0\n16\n15\n-1\n2\n");
    CHECK(run((const char *const[]){ "redis-cli", "-3", "--no-raw", "-s", d->resp_sock, "HELLO",
                                     NULL },
              NULL, "", 0, out, OUT_MAX, 10000, &st));
    assert_non_null(strstr(out, "3# \"proto\" => (integer) 3\n"));
    CHECK(run((const char *const[]){ "redis-cli", "-3", "-s", d->resp_sock, NULL }, NULL, multi,
              strlen(multi), out, OUT_MAX, 10000, &st));
    assert_string_equal(out, "OK\nQUEUED\nQUEUED\n2\nPONG\n");
    harness_free(d);
}

/* ---- AUTH: server.resp_password_file ------------------------------------------------ */

#define PASSWORD "s3cret-pw"

static void test_resp_clients_auth(void **state)
{
    char *conf = harness_scratch(4096), *out = harness_scratch(OUT_MAX);
    struct harness_daemon *d;
    int st;

    (void)state;
    snprintf(conf, 4096, "server = { resp_password_file = \"%s\"; };\n%s",
             resp_password_write(PASSWORD "\n", 0600), RULES);
    d = resp_start(conf);
    if (have("redis-cli")) {
        CHECK(run((const char *const[]){ "redis-cli", "-s", d->resp_sock, "-a", PASSWORD,
                                         "--no-auth-warning", "DIVVY.HIT", "app", "cli", NULL },
                  NULL, "", 0, out, OUT_MAX, 10000, &st));
        assert_string_equal(out, "1\n2\n60\nr1\n");
        CHECK(run((const char *const[]){ "redis-cli", "-3", "-s", d->resp_sock, "--user",
                                         "default", "--pass", PASSWORD, "--no-auth-warning",
                                         "RL.REDUCE", "a3", "2", "60", NULL },
                  NULL, "", 0, out, OUT_MAX, 10000, &st));
        assert_string_equal(out, "2\n");
        CHECK(run((const char *const[]){ "redis-cli", "-s", d->resp_sock, "-a", "wrong",
                                         "--no-auth-warning", "DIVVY.HIT", "app", "cli", NULL },
                  NULL, "", 0, out, OUT_MAX, 10000, &st));
        assert_non_null(strstr(out, "AUTH failed: WRONGPASS invalid username-password pair"));
        assert_non_null(strstr(out, "NOAUTH Authentication required."));
        CHECK(run((const char *const[]){ "redis-cli", "-s", d->resp_sock, "DIVVY.HIT", "app",
                                         "cli", NULL },
                  NULL, "", 0, out, OUT_MAX, 10000, &st));
        assert_string_equal(out, "NOAUTH Authentication required.\n\n");
    } else {
        fprintf(stderr, "SKIP (part): redis-cli not installed (Debian: redis-tools)\n");
    }
    run_script(d, "redis_py_client.py", PASSWORD, out);
    assert_non_null(strstr(out, "ok wrong password"));
    run_script(d, "node_auth.js", PASSWORD, out);
    assert_non_null(strstr(out, "ok ioredis no password"));
    harness_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resp_cli_transcript, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_cli_pipe, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_node_ioredis, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_node_redis, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_redis_py, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_cli_resp3, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_clients_auth, harness_setup, resp_teardown),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
