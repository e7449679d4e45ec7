/* SPDX-License-Identifier: MIT */
/*
 * test_dlog_replay: the decision log end to end (docs/decision-log.md).  A
 * real divvyd with decision_log on, a real redis-server behind its lease
 * and strict rules, takes hits through every protocol: the line protocol
 * over TCP and the Unix socket, RESP (DIVVY.HIT), RLS (a real gRPC client)
 * and libdivvy's fast path (decided in this process and reported to
 * divvyd).  Each (rule, actor) gets HITS hits, so some are denied.  Then,
 * with divvyd stopped:
 *   - `divvyctl log --json` holds every decision, each with its protocol and
 *     path, in the order and with the verdicts the clients saw;
 *   - `divvyctl replay` with the same config gives the same verdict for
 *     every decision, fast-path, lease and strict ones included (a Redis
 *     rule replays against a local simulation of its counter; this test
 *     found divvyd's lease path refusing a hit out of order, now fixed:
 *     test_redis_lease_order);
 *   - `divvyctl replay` with a candidate that tightens two rules and
 *     loosens one reports, per rule, exactly the flips this test counts on
 *     its own from what the clients saw.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "divvy.h"
#include "harness.h"
#include "harness_grpc.h"
#include "harness_redis.h"
#include "resp_client.h"

#define HITS        8           /* hits per (rule, actor) */
#define ACTORS      3           /* actors per protocol */
#define LIMIT       5           /* every counting rule's credit_limit in the recorded config */

#define RULES_FMT                                                                             \
    "  { match = { app = \"api\"; }; label = \"api\"; actor = \"ip\"; credit_limit = %d;\n"    \
    "    reset_seconds = 3600; },\n"                                                           \
    "  { match = { app = \"fast\"; }; label = \"fast\"; actor = \"ip\"; credit_limit = %d;\n"  \
    "    reset_seconds = 3600; fast_path = true; },\n"                                         \
    "  { match = { app = \"lease\"; }; label = \"lease\"; actor = \"ip\"; credit_limit = %d;\n" \
    "    reset_seconds = 3600; store = \"lease\"; },\n"                                        \
    "  { match = { app = \"strict\"; }; label = \"strict\"; actor = \"ip\";\n"                  \
    "    credit_limit = %d; reset_seconds = 3600; store = \"strict\"; },\n"                    \
    "  { default = true; label = \"dflt\"; credit_limit = 1000000; reset_seconds = 3600; }"

/* What one client saw: the verdicts of its HITS hits on one counter. */
struct seen {
    const char *proto;          /* "line", "resp", "rls", "fast" */
    const char *app;            /* the rule's label */
    char ip[32];
    bool allowed[HITS];
};

#define N_SEEN (7 * ACTORS)
static struct seen seen[N_SEEN];
static unsigned n_seen;
static char tmpdir[HARNESS_PATH];

static struct seen *seen_new(const char *proto, const char *app, unsigned net, unsigned a)
{
    struct seen *s;

    assert_true(n_seen < N_SEEN);
    s = &seen[n_seen++];
    s->proto = proto;
    s->app = app;
    snprintf(s->ip, sizeof(s->ip), "10.0.%u.%u", net, a + 1);
    return s;
}

static void line_hits(struct harness_daemon *d, enum harness_via via, const char *app,
                      unsigned net)
{
    struct harness_conn *c = NULL;

    CHECK(harness_connect(d, via, &c));
    for (unsigned a = 0; a < ACTORS; a++) {
        struct seen *s = seen_new("line", app, net, a);

        for (unsigned i = 0; i < HITS; i++) {
            char req[128], reply[256];
            long long credit, secs;

            snprintf(req, sizeof(req), "HIT app=%s ip=%s\n", app, s->ip);
            CHECK(harness_cmd(c, req, reply, sizeof(reply)));
            if (harness_parse_ok(reply, &s->allowed[i], &credit, &secs) < 0)
                fail_msg("%s -> %s", req, reply);
        }
    }
    harness_close(c);
}

static void resp_hits(struct harness_daemon *d)
{
    struct harness_conn *c = NULL;

    CHECK(harness_connect_unix(d->resp_sock, &c));
    for (unsigned a = 0; a < ACTORS; a++) {
        struct seen *s = seen_new("resp", "api", 3, a);

        for (unsigned i = 0; i < HITS; i++) {
            const char *argv[] = { "DIVVY.HIT", "app", "api", "ip", s->ip, NULL };
            char cmd[256], got[256];
            size_t len = resp_cmd(cmd, sizeof(cmd), argv);

            CHECK(harness_send(c, cmd, len));
            got[0] = '\0';
            CHECK(resp_read(c, got, sizeof(got)));
            if (strncmp(got, "*", 1) != 0)
                fail_msg("DIVVY.HIT: %s", got);
            s->allowed[i] = strncmp(got + 2, " :1", 3) == 0 || strncmp(got + 3, " :1", 3) == 0;
        }
    }
    harness_close(c);
}

/* One RLS call per hit: each is one decision of one descriptor. */
static void rls_hits(const char *addr)
{
    for (unsigned a = 0; a < ACTORS; a++) {
        struct seen *s = seen_new("rls", "api", 4, a);
        char job[4096];
        size_t off = 0;
        json_t *res;

        off += (size_t)snprintf(job + off, sizeof(job) - off, "{\"calls\":[");
        for (unsigned i = 0; i < HITS; i++)
            off += (size_t)snprintf(job + off, sizeof(job) - off,
                                    "%s{\"domain\":\"edge\",\"descriptors\":[{\"entries\":["
                                    "{\"key\":\"app\",\"value\":\"api\"},"
                                    "{\"key\":\"ip\",\"value\":\"%s\"}]}]}",
                                    i ? "," : "", s->ip);
        snprintf(job + off, sizeof(job) - off, "]}");
        res = harness_grpc_run(addr, job);
        for (unsigned i = 0; i < HITS; i++) {
            json_t *resp = harness_grpc_resp(res, i);

            s->allowed[i] = strcmp(harness_grpc_str(resp, "overall_code"), "OK") == 0;
        }
        json_decref(res);
    }
}

static void fast_hits(struct harness_daemon *d)
{
    struct divvy *h = NULL;
    int r;

    CHECK(harness_divvy_env(d));
    r = divvy_open(NULL, DIVVY_AUTO, &h);
    if (r < 0)
        fail_msg("divvy_open: %s", strerror(-r));
    harness_wait_fast(h, (struct divvy_kv[]){ { "app", "fast" }, { "ip", "10.0.9.9" } }, 2);
    for (unsigned a = 0; a < ACTORS; a++) {
        struct seen *s = seen_new("fast", "fast", 5, a);

        for (unsigned i = 0; i < HITS; i++) {
            struct divvy_result res = { .size = sizeof(res) };
            struct divvy_kv kv[] = { { "app", "fast" }, { "ip", s->ip } };

            r = divvy_hit(h, kv, 2, &res);
            if (r < 0 || !res.fast_path)
                fail_msg("fast path hit %u of %s: r %d fast %d", i, s->ip, r, res.fast_path);
            s->allowed[i] = res.allowed;
        }
    }
    /* Closing the handle sends what it has not reported yet. */
    divvy_close(h);
}

static char *config_text(const struct redis_srv *rs, const char *logdir, int api, int fast,
                         int lease, int strict)
{
    char rules[2048], *store, *text;

    snprintf(rules, sizeof(rules), RULES_FMT, api, fast, lease, strict);
    store = redis_config(rs, "local", "closed", 2000, "", rules);
    assert_non_null(store);
    assert_true(asprintf(&text,
                         "decision_log = { enabled = true; directory = \"%s\"; flush_ms = 100; };\n"
                         "table = { fast_slots = 4096; };\n%s", logdir, store) > 0);
    free(store);
    return text;
}

static json_t *replay(const char *config, const char *logdir)
{
    const char *args[] = { "replay", "--config", config, "--json", logdir, NULL };
    struct harness_ctl *r = harness_ctl_run(false, NULL, 0, args);
    json_error_t err;
    json_t *j = json_loads(r->out, 0, &err);

    if (!j)
        fail_msg("replay --json printed no JSON (%s): %s", err.text, r->out);
    return j;
}

static long long jint(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);

    if (!json_is_integer(v))
        fail_msg("no integer \"%s\" in %s", k, json_dumps(o, 0));
    return (long long)json_integer_value(v);
}

static json_t *report_rule(json_t *rep, const char *label)
{
    json_t *rules = json_object_get(rep, "rules"), *r;
    size_t i;

    json_array_foreach(rules, i, r) {
        if (strcmp(harness_grpc_str(r, "rule"), label) == 0)
            return r;
    }
    fail_msg("no rule %s in the report: %s", label, json_dumps(rep, 0));
    return NULL;
}

/* The log holds each client's hits in order, with the verdicts it saw. */
static void check_log(const char *logdir, unsigned *ret_total)
{
    const char *args[] = { "log", "--json", logdir, NULL };
    struct harness_ctl *r = harness_ctl_run(false, NULL, 0, args);
    unsigned pos[N_SEEN] = { 0 }, total = 0, paths[4] = { 0 };
    char *line, *save = NULL;

    for (line = strtok_r(r->out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_error_t err;
        json_t *j = json_loads(line, 0, &err), *req;
        const char *proto, *app, *ip, *path;

        if (!j)
            fail_msg("log --json: not JSON (%s): %s", err.text, line);
        if (json_object_get(j, "gap"))
            fail_msg("the log says decisions were dropped: %s", line);
        total++;
        proto = harness_grpc_str(j, "protocol");
        path = harness_grpc_str(j, "path");
        req = json_object_get(j, "request");
        app = harness_grpc_str(req, "app");
        ip = harness_grpc_str(req, "ip");
        paths[0] += strcmp(path, "local") == 0;
        paths[1] += strcmp(path, "lease") == 0;
        paths[2] += strcmp(path, "strict") == 0;
        for (unsigned s = 0; s < n_seen; s++) {
            bool allowed;

            if (strcmp(seen[s].proto, proto) != 0 || strcmp(seen[s].app, app) != 0 ||
                strcmp(seen[s].ip, ip) != 0 || strcmp(harness_grpc_str(j, "verb"), "TAKE") != 0 ||
                jint(j, "n") != 1)
                continue;
            if (pos[s] >= HITS)
                fail_msg("more than %d hits of %s %s %s in the log", HITS, proto, app, ip);
            allowed = json_is_true(json_object_get(j, "allowed"));
            if (allowed != seen[s].allowed[pos[s]])
                fail_msg("hit %u of %s %s %s: the log says %s, the client saw %s", pos[s], proto,
                         app, ip, allowed ? "allowed" : "denied",
                         seen[s].allowed[pos[s]] ? "allowed" : "denied");
            if (strcmp(app, "fast") == 0 &&
                (!json_is_integer(json_object_get(j, "uid")) ||
                 jint(j, "uid") != (long long)getuid() || jint(j, "pid") != (long long)getpid()))
                fail_msg("a fast-path report without this process's uid and pid: %s", line);
            pos[s]++;
        }
        json_decref(j);
    }
    for (unsigned s = 0; s < n_seen; s++) {
        if (pos[s] != HITS)
            fail_msg("%u of %d hits of %s %s %s in the log", pos[s], HITS, seen[s].proto,
                     seen[s].app, seen[s].ip);
    }
    if (paths[1] != ACTORS * HITS || paths[2] != ACTORS * HITS)
        fail_msg("%u lease and %u strict decisions in the log, want %d each", paths[1],
                 paths[2], ACTORS * HITS);
    *ret_total = total;
}

/* The flips of rule @app when its limit goes from LIMIT to @limit, counted
 * from what the clients saw: a hit allowed before is denied once @limit
 * hits of its counter were allowed; a denied one is allowed while fewer
 * were. */
static void expect_flips(json_t *rep, const char *app, int limit)
{
    long long a2d = 0, d2a = 0, actors = 0, hits = 0;
    json_t *r = report_rule(rep, app);

    for (unsigned s = 0; s < n_seen; s++) {
        long long allowed_new = 0, changed = 0;

        if (strcmp(seen[s].app, app) != 0)
            continue;
        for (unsigned i = 0; i < HITS; i++) {
            bool now = allowed_new < limit;

            allowed_new += now;
            hits++;
            if (seen[s].allowed[i] && !now)
                a2d++, changed++;
            if (!seen[s].allowed[i] && now)
                d2a++, changed++;
        }
        actors += changed > 0;
    }
    if (jint(r, "hits") != hits || jint(r, "allowed_to_denied") != a2d ||
        jint(r, "denied_to_allowed") != d2a || jint(r, "actors_affected") != actors)
        fail_msg("rule %s at limit %d: want hits %lld, %lld allowed->denied, %lld "
                 "denied->allowed, %lld actors; the report: %s", app, limit, hits, a2d, d2a,
                 actors, json_dumps(r, 0));
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    CHECK(fclose(f) == 0 ? 0 : -errno);
}

static int cleanup(void **state)
{
    harness_rm_tree(tmpdir);
    tmpdir[0] = '\0';
    return redis_teardown(state);
}

static void test_dlog_record_and_replay(void **state)
{
    struct harness_opts o = { .resp = true, .workers = 2 };
    struct harness_daemon *d = NULL;
    struct redis_srv *rs = NULL;
    char logdir[HARNESS_PATH + 8], cand[HARNESS_PATH + 16], rls_addr[64], rls_listen[80];
    char *conf, *tight;
    unsigned total;
    json_t *rep;
    int port;

    (void)state;
    harness_grpc_need();
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/divvy-dlog.XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    snprintf(logdir, sizeof(logdir), "%s/log", tmpdir);
    CHECK(redis_start(&rs));
    port = harness_free_port(SOCK_STREAM);
    assert_true(port > 0);
    snprintf(rls_addr, sizeof(rls_addr), "127.0.0.1:%d", port);
    snprintf(rls_listen, sizeof(rls_listen), "rls:tcp:%s", rls_addr);
    o.listen[0] = rls_listen;
    conf = config_text(rs, logdir, LIMIT, LIMIT, LIMIT, LIMIT);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));

    line_hits(d, HARNESS_TCP, "api", 1);
    line_hits(d, HARNESS_UNIX, "api", 2);
    resp_hits(d);
    rls_hits(rls_addr);
    fast_hits(d);
    line_hits(d, HARNESS_TCP, "lease", 6);
    line_hits(d, HARNESS_TCP, "strict", 7);
    /* SIGTERM: divvyd writes what its buffers hold before it exits. */
    redis_divvyd_stop(d);

    check_log(logdir, &total);

    /* (a) The same config: every verdict the same. */
    snprintf(cand, sizeof(cand), "%s/recorded.conf", tmpdir);
    write_file(cand, conf);
    rep = replay(cand, logdir);
    if (jint(rep, "decisions") != (long long)total || jint(rep, "replayed") != (long long)total ||
        jint(rep, "same") != (long long)total || jint(rep, "allowed_to_denied") != 0 ||
        jint(rep, "denied_to_allowed") != 0)
        fail_msg("replay of the recorded config over %u decisions: %s", total,
                 json_dumps(rep, JSON_INDENT(1)));
    json_decref(rep);

    /* (b) api and fast tightened, strict loosened, lease as it was. */
    tight = config_text(rs, logdir, 3, 2, LIMIT, 7);
    snprintf(cand, sizeof(cand), "%s/candidate.conf", tmpdir);
    write_file(cand, tight);
    rep = replay(cand, logdir);
    expect_flips(rep, "api", 3);
    expect_flips(rep, "fast", 2);
    expect_flips(rep, "strict", 7);
    expect_flips(rep, "lease", LIMIT);
    json_decref(rep);
    free(tight);
    free(conf);
    redis_stop(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dlog_record_and_replay, harness_setup, cleanup),
    };

    return cmocka_run_group_tests_name("dlog_replay", tests, harness_grpc_setup,
                                       harness_grpc_teardown);
}
