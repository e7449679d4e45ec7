/* SPDX-License-Identifier: MIT */
/*
 * test_match_cidr: the native config's match operators (docs/rules.md
 * "Addresses and negation") on every path a request can take, against a
 * real divvyd: the line protocol (PEEK over the Unix socket), RESP
 * (DIVVY.PEEK), RLS (a real gRPC client, descriptor entries as request
 * keys) and libdivvy's fast path (divvy_hit() decided in this process from
 * the compiled blob).  One config: an "exempt" rule for 10.0.0.0/8 and
 * 2001:db8::/32 (an IPv4-mapped ::ffff:10.x address included), then a
 * "public" rule for every path but /admin/[star] from any source outside
 * 192.168.0.0/16 (a request without an ip included), then the default.
 * Every path must name the same rule for every request; a value that only
 * spells a prefix ("10.0.0.0/8") is no address.  divvyd before the
 * operators refused this config ("must be a string or an integer").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "divvy.h"
#include "harness.h"
#include "harness_grpc.h"
#include "resp_client.h"

#define CONF                                                                                  \
    "table = { fast_slots = 4096; };\n"                                                       \
    "rules = (\n"                                                                             \
    "  { match = { app = \"api\"; ip = { cidr = [ \"10.0.0.0/8\", \"2001:db8::/32\" ]; }; };\n" \
    "    label = \"exempt\"; credit_limit = 1000000; reset_seconds = 3600; fast_path = true; },\n" \
    "  { match = { app = \"api\"; path = { not = \"/admin/*\"; };\n"                           \
    "              ip = { not_cidr = \"192.168.0.0/16\"; }; };\n"                               \
    "    label = \"public\"; actor = \"ip\"; credit_limit = 1000; reset_seconds = 3600;\n"     \
    "    fast_path = true; },\n"                                                              \
    "  { default = true; label = \"dflt\"; credit_limit = 1000; reset_seconds = 3600; }\n"    \
    ");\n"

struct mcase {
    const char *ip;             /* NULL: the request has no ip */
    const char *path;
    const char *rule;           /* the rule that must decide */
};

static const struct mcase cases[] = {
    { "10.9.8.7", "/admin/x", "exempt" },
    { "2001:db8::5", "/", "exempt" },
    { "::ffff:10.1.1.1", "/", "exempt" },
    { "203.0.113.9", "/home", "public" },
    { "2001:db9::1", "/home", "public" },
    { "203.0.113.9", "/admin/x", "dflt" },
    { "192.168.1.1", "/home", "dflt" },
    { "::ffff:192.168.7.7", "/home", "dflt" },
    { NULL, "/home", "public" },
    { "10.0.0.0/8", "/home", "public" },
};
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* The case's request as key/value pairs; returns how many. */
static size_t case_kv(const struct mcase *c, struct divvy_kv *kv)
{
    size_t n = 0;

    kv[n++] = (struct divvy_kv){ "app", "api" };
    if (c->ip)
        kv[n++] = (struct divvy_kv){ "ip", c->ip };
    kv[n++] = (struct divvy_kv){ "path", c->path };
    return n;
}

static void test_match_cidr_line(void **state)
{
    struct harness_opts o = { .config_text = CONF, .workers = 2 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;

    (void)state;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    for (size_t i = 0; i < N_CASES; i++) {
        char req[256], reply[512], rule[80];
        long long credit, secs;
        bool allowed;

        snprintf(req, sizeof(req), "PEEK app=api %s%s%s path=%s\n", cases[i].ip ? "\"ip\"=\"" : "",
                 cases[i].ip ? cases[i].ip : "", cases[i].ip ? "\"" : "", cases[i].path);
        CHECK(harness_cmd(c, req, reply, sizeof(reply)));
        if (harness_parse_ok_rule(reply, &allowed, &credit, &secs, rule, sizeof(rule)) < 0 ||
            !allowed || strcmp(rule, cases[i].rule) != 0)
            fail_msg("line: %s-> %s, want rule %s", req, reply, cases[i].rule);
    }
    /* EXPLAIN says why the exempt rule does not take 192.168.1.1. */
    {
        char buf[4096];

        CHECK(harness_multi(c, "EXPLAIN app=api ip=192.168.1.1 path=/home\n", buf, sizeof(buf)));
        if (!strstr(buf, "does not match cidr(10.0.0.0/8,2001:db8::/32)") ||
            !strstr(buf, "is excluded by not_cidr(192.168.0.0/16)"))
            fail_msg("EXPLAIN: %s", buf);
    }
    harness_close(c);
    harness_free(d);
}

static void test_match_cidr_resp(void **state)
{
    struct harness_opts o = { .config_text = CONF, .workers = 2, .resp = true };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;

    (void)state;
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect_unix(d->resp_sock, &c));
    for (size_t i = 0; i < N_CASES; i++) {
        const char *argv[8];
        char cmd[512], got[256], want[64];
        size_t n = 0, len;

        argv[n++] = "DIVVY.PEEK";
        argv[n++] = "app";
        argv[n++] = "api";
        if (cases[i].ip) {
            argv[n++] = "ip";
            argv[n++] = cases[i].ip;
        }
        argv[n++] = "path";
        argv[n++] = cases[i].path;
        argv[n] = NULL;
        len = resp_cmd(cmd, sizeof(cmd), argv);
        CHECK(harness_send(c, cmd, len));
        got[0] = '\0';
        CHECK(resp_read(c, got, sizeof(got)));
        snprintf(want, sizeof(want), " $%s", cases[i].rule);
        if (strncmp(got, "*4 :1 ", 6) != 0 || strlen(got) < strlen(want) ||
            strcmp(got + strlen(got) - strlen(want), want) != 0)
            fail_msg("RESP case %zu (ip %s path %s): %s, want rule %s", i,
                     cases[i].ip ? cases[i].ip : "-", cases[i].path, got, cases[i].rule);
    }
    harness_close(c);
    harness_free(d);
}

static void test_match_cidr_rls(void **state)
{
    struct harness_rls *r;
    char job[4096];
    size_t off;
    json_t *res, *resp, *statuses;

    (void)state;
    harness_grpc_need();
    off = (size_t)snprintf(job, sizeof(job), "{\"calls\":[{\"domain\":\"edge\",\"descriptors\":[");
    for (size_t i = 0; i < N_CASES; i++) {
        off += (size_t)snprintf(job + off, sizeof(job) - off,
                                "%s{\"entries\":[{\"key\":\"app\",\"value\":\"api\"}",
                                i ? "," : "");
        if (cases[i].ip)
            off += (size_t)snprintf(job + off, sizeof(job) - off,
                                    ",{\"key\":\"ip\",\"value\":\"%s\"}", cases[i].ip);
        off += (size_t)snprintf(job + off, sizeof(job) - off,
                                ",{\"key\":\"path\",\"value\":\"%s\"}]}", cases[i].path);
    }
    snprintf(job + off, sizeof(job) - off, "]}]}");
    /* unmatched = "rule": the default rule answers by name too. */
    r = harness_rls_start("rls = { unmatched = \"rule\"; };\n" CONF);
    res = harness_grpc_run(r->tcp, job);
    resp = harness_grpc_resp(res, 0);
    statuses = json_object_get(resp, "statuses");
    if (json_array_size(statuses) != N_CASES)
        fail_msg("RLS: %s", json_dumps(resp, 0));
    for (size_t i = 0; i < N_CASES; i++) {
        json_t *s = json_array_get(statuses, i);
        const char *name = harness_grpc_str(json_object_get(s, "current_limit"), "name");

        if (strcmp(harness_grpc_str(s, "code"), "OK") != 0 || strcmp(name, cases[i].rule) != 0)
            fail_msg("RLS descriptor %zu (ip %s path %s): %s, want rule %s", i,
                     cases[i].ip ? cases[i].ip : "-", cases[i].path, json_dumps(s, 0),
                     cases[i].rule);
    }
    json_decref(res);
    harness_rls_stop(r);
}

static void test_match_cidr_fast(void **state)
{
    struct harness_opts o = { .config_name = "fast.conf", .config_text = CONF, .workers = 2 };
    struct harness_daemon *d = NULL;
    struct divvy *h = NULL;
    int r;

    (void)state;
    CHECK(harness_start(&o, &d));
    CHECK(harness_divvy_env(d));
    r = divvy_open(NULL, DIVVY_AUTO, &h);
    if (r < 0)
        fail_msg("divvy_open: %s", strerror(-r));
    harness_wait_fast(h, (struct divvy_kv[]){ { "app", "api" }, { "ip", "10.1.2.3" },
                                              { "path", "/" } }, 3);
    for (size_t i = 0; i < N_CASES; i++) {
        struct divvy_result res = { .size = sizeof(res) };
        struct divvy_kv kv[3];
        size_t n = case_kv(&cases[i], kv);
        bool fast = strcmp(cases[i].rule, "dflt") != 0;

        r = divvy_hit(h, kv, n, &res);
        if (r < 0 || !res.allowed || strcmp(res.rule, cases[i].rule) != 0 ||
            res.fast_path != fast)
            fail_msg("fast path case %zu (ip %s path %s): r %d allowed %d rule %s fast %d, "
                     "want rule %s fast %d", i, cases[i].ip ? cases[i].ip : "-", cases[i].path,
                     r, res.allowed, res.rule, res.fast_path, cases[i].rule, fast);
    }
    divvy_close(h);
    harness_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_match_cidr_line, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_match_cidr_resp, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_match_cidr_rls, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_match_cidr_fast, harness_setup, harness_teardown),
    };

    return cmocka_run_group_tests_name("match_cidr", tests, harness_grpc_setup,
                                       harness_grpc_teardown);
}
