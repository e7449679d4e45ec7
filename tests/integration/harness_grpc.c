/* SPDX-License-Identifier: MIT */
/*
 * harness_grpc: the RLS tests' gRPC client and divvyd (harness_grpc.h).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness_grpc.h"

char harness_grpc_tmp[HARNESS_PATH];
static char node_modules[512];  /* "": the gRPC client is unavailable: skip */

/* ---- the gRPC client (node) ------------------------------------------------------ */

struct child_io {
    const char *in, *out;
    const char *const *argv;
};

static int exec_child(void *arg)
{
    const struct child_io *io = arg;
    int in = open(io->in ? io->in : "/dev/null", O_RDONLY | O_CLOEXEC);
    int out = open(io->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0)
        return 126;
    if (node_modules[0])
        setenv("NODE_PATH", node_modules, 1);
    execvp(io->argv[0], (char *const *)io->argv);
    return 127;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *text;
    long n;

    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    text = harness_scratch((size_t)n + 1);
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n)
        text = NULL;
    fclose(f);
    return text;
}

int harness_grpc_setup(void **state)
{
    char script[512], out[HARNESS_PATH + 16];
    const char *argv[] = { "sh", script, NULL };
    struct child_io io = { .out = out, .argv = argv };
    char *path;
    pid_t pid;
    int status;

    (void)state;
    snprintf(harness_grpc_tmp, sizeof(harness_grpc_tmp), "/tmp/divvy-test-rls-XXXXXX");
    if (!mkdtemp(harness_grpc_tmp) || harness_src_path("tests/rls/npm_ensure.sh", script,
                                             sizeof(script)) < 0)
        return -1;
    snprintf(out, sizeof(out), "%s/npm.out", harness_grpc_tmp);
    if (harness_spawn(exec_child, &io, &pid) < 0 || harness_reap(pid, 300000, &status) < 0)
        return -1;
    if (status == 77) {
        printf("SKIP: the gRPC client tests: npm or the npm registry is unreachable "
               "(tests/rls/npm_ensure.sh)\n");
        return 0;
    }
    path = slurp(out);
    if (status != 0 || !path) {
        fprintf(stderr, "tests/rls/npm_ensure.sh failed (%d)\n", status);
        return -1;
    }
    path[strcspn(path, "\n")] = '\0';
    snprintf(node_modules, sizeof(node_modules), "%s", path);
    return 0;
}

int harness_grpc_teardown(void **state)
{
    (void)state;
    harness_rm_tree(harness_grpc_tmp);
    return 0;
}

void harness_grpc_spawn(const char *in, const char *out, const char *const *argv,
                        pid_t *ret_pid)
{
    struct child_io *io = harness_scratch(sizeof(*io));

    assert_non_null(io);
    *io = (struct child_io){ .in = in, .out = out, .argv = argv };
    CHECK(harness_spawn(exec_child, io, ret_pid));
}

json_t *harness_grpc_run(const char *addr, const char *job)
{
    char script[512], proto[512], in[HARNESS_PATH + 16], out[HARNESS_PATH + 16];
    const char *argv[] = { "node", script, proto, addr, NULL };
    struct child_io io = { .in = in, .out = out, .argv = argv };
    static unsigned seq;
    json_error_t jerr;
    json_t *res;
    FILE *f;
    pid_t pid;
    int status;

    CHECK(harness_src_path("tests/rls/rls_client.js", script, sizeof(script)));
    CHECK(harness_src_path("proto", proto, sizeof(proto)));
    snprintf(in, sizeof(in), "%s/job%u.json", harness_grpc_tmp, seq);
    snprintf(out, sizeof(out), "%s/out%u.json", harness_grpc_tmp, seq++);
    f = fopen(in, "w");
    assert_non_null(f);
    fputs(job, f);
    fclose(f);
    CHECK(harness_spawn(exec_child, &io, &pid));
    CHECK(harness_reap(pid, 60000, &status));
    if (status != 0)
        fail_msg("rls_client.js exited with %d", status);
    res = json_load_file(out, 0, &jerr);
    if (!res || !json_is_array(res))
        fail_msg("rls_client.js output: %s", jerr.text);
    return res;
}

void harness_grpc_need(void)
{
    if (!node_modules[0])
        skip();
}

json_t *harness_grpc_resp(json_t *res, size_t i)
{
    json_t *c = json_array_get(res, i);

    if (!c || !json_is_true(json_object_get(c, "ok")))
        fail_msg("call %zu failed: %s", i, c ? json_dumps(c, 0) : "(missing)");
    return json_object_get(c, "resp");
}

const char *harness_grpc_str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));

    return s ? s : "";
}

void harness_grpc_status(json_t *resp, size_t i, const char *code, const char *name,
                          long long per_unit, const char *unit, long long remaining,
                          long long reset_min, long long reset_max)
{
    json_t *st = json_array_get(json_object_get(resp, "statuses"), i);
    json_t *lim = json_object_get(st, "current_limit"), *dur;
    long long secs;

    if (!st)
        fail_msg("no status %zu in %s", i, json_dumps(resp, 0));
    if (strcmp(harness_grpc_str(st, "code"), code) != 0 ||
        json_integer_value(json_object_get(st, "limit_remaining")) != remaining)
        fail_msg("status %zu: %s, want %s remaining %lld", i, json_dumps(st, 0), code, remaining);
    if (name) {
        if (!json_is_object(lim) || strcmp(harness_grpc_str(lim, "name"), name) != 0 ||
            strcmp(harness_grpc_str(lim, "unit"), unit) != 0 ||
            json_integer_value(json_object_get(lim, "requests_per_unit")) != per_unit)
            fail_msg("status %zu: %s, want limit %s %lld/%s", i, json_dumps(st, 0), name,
                     per_unit, unit);
    } else if (!json_is_null(lim)) {
        fail_msg("status %zu: %s, want no current_limit", i, json_dumps(st, 0));
    }
    dur = json_object_get(st, "duration_until_reset");
    if (reset_max == 0) {
        if (!json_is_null(dur))
            fail_msg("status %zu: %s, want no duration_until_reset", i, json_dumps(st, 0));
        return;
    }
    secs = atoll(harness_grpc_str(dur, "seconds"));
    if (secs < reset_min || secs > reset_max)
        fail_msg("status %zu: %s, want a reset in %lld..%lld s", i, json_dumps(st, 0),
                 reset_min, reset_max);
}

void harness_grpc_overall(json_t *resp, const char *code, size_t n)
{
    if (strcmp(harness_grpc_str(resp, "overall_code"), code) != 0 ||
        json_array_size(json_object_get(resp, "statuses")) != n)
        fail_msg("response %s, want overall_code %s with %zu statuses", json_dumps(resp, 0),
                 code, n);
}

/* ---- divvyd with RLS listeners ---------------------------------------------------- */

struct harness_rls *harness_rls_start(const char *conf)
{
    struct harness_rls *r = harness_scratch(sizeof(*r));
    struct harness_opts o = { .config_text = conf, .workers = 2 };
    static unsigned seq;

    assert_non_null(r);
    r->port = harness_free_port(SOCK_STREAM);
    assert_true(r->port > 0);
    snprintf(r->tcp, sizeof(r->tcp), "127.0.0.1:%d", r->port);
    snprintf(r->unix_sock, sizeof(r->unix_sock), "unix:%s/rls%u.sock", harness_grpc_tmp, seq++);
    snprintf(r->lis_tcp, sizeof(r->lis_tcp), "rls:tcp:%s", r->tcp);
    snprintf(r->lis_unix, sizeof(r->lis_unix), "rls:%s", r->unix_sock);
    o.listen[0] = r->lis_tcp;
    o.listen[1] = r->lis_unix;
    CHECK(harness_start(&o, &r->d));
    return r;
}

void harness_rls_stop(struct harness_rls *r)
{
    int status = -1;

    CHECK(harness_stop(r->d, &status));
    if (status != 0) {
        harness_dump_log(r->d);
        fail_msg("divvyd exited with status %d", status);
    }
}

