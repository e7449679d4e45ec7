/* SPDX-License-Identifier: MIT */
/*
 * bench_rules: how rules_match() scales with the number of rules.  Builds N
 * rules with distinct exact values (method=GET path=/api/v1/resource<i>),
 * a few glob rules on the scan list and a default, then times rules_match()
 * on random requests (about one in ten hits no rule but the default) and
 * prints ns per match for each N.  A benchmark, not a test: it never fails
 * on speed.  Build: see docs/dev/rules.md "Benchmark".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diag.h"
#include "rules.h"

#define N_REQ     4096
#define N_MATCH   2000000
#define N_GLOBS   5

struct breq {
    struct rules_req r;
    struct proto_kv kv[3];
    char path[64];
    char ip[32];
};

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int build(struct rules_spec *spec, unsigned n)
{
    struct rules_rule_spec *r;
    char path[64];
    int ret;

    for (unsigned i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "/api/v1/resource%u", i);
        ret = rules_spec_add(spec, "bench.conf", i + 1, &r);
        if (ret >= 0)
            ret = rules_spec_add_match(r, "method", "GET", 0);
        if (ret >= 0)
            ret = rules_spec_add_match(r, "path", path, 0);
        if (ret >= 0)
            ret = rules_spec_add_actor(r, "ip");
        if (ret < 0)
            return ret;
        r->credit_limit = 100;
        r->reset_seconds = 60;
    }
    for (unsigned i = 0; i < N_GLOBS; i++) {
        snprintf(path, sizeof(path), "/static/%u/*", i);
        ret = rules_spec_add(spec, "bench.conf", n + i + 1, &r);
        if (ret >= 0)
            ret = rules_spec_add_match(r, "path", path, 0);
        if (ret < 0)
            return ret;
        r->credit_limit = 1000;
        r->reset_seconds = 60;
    }
    ret = rules_spec_add(spec, "bench.conf", n + N_GLOBS + 1, &r);
    if (ret < 0)
        return ret;
    r->credit_limit = 0;
    r->reset_seconds = 0;
    r->is_default = true;
    return 0;
}

static void make_req(struct breq *q, unsigned n)
{
    unsigned i = (unsigned)rand() % (n + n / 10 + 1);

    snprintf(q->path, sizeof(q->path), "/api/v1/resource%u", i);
    snprintf(q->ip, sizeof(q->ip), "10.0.%u.%u", (unsigned)rand() % 256, (unsigned)rand() % 256);
    /* sorted by key: ip, method, path */
    q->kv[0] = (struct proto_kv){ "ip", q->ip, 2, (uint16_t)strlen(q->ip) };
    q->kv[1] = (struct proto_kv){ "method", "GET", 6, 3 };
    q->kv[2] = (struct proto_kv){ "path", q->path, 4, (uint16_t)strlen(q->path) };
    q->r.kv = q->kv;
    q->r.n_kv = 3;
    q->r.privileged = false;
}

static int run(unsigned n)
{
    struct rules_spec spec = { 0 };
    struct rules *rules = NULL;
    struct breq *reqs = NULL;
    uint32_t idx[RULES_MATCH_MAX];
    const void *blob;
    size_t blob_len, sink = 0;
    struct diag d;
    double t0, t_compile, t_match;
    int r;

    diag_init(&d);
    r = build(&spec, n);
    if (r < 0)
        goto out;
    t0 = now_ns();
    r = rules_compile(&spec, 1, &rules, &d);
    t_compile = now_ns() - t0;
    if (r < 0) {
        char line[512];

        diag_format(&d, 0, line, sizeof(line));
        fprintf(stderr, "bench_rules: compile: %s\n", line);
        goto out;
    }
    rules_blob(rules, &blob, &blob_len);
    reqs = calloc(N_REQ, sizeof(*reqs));
    if (!reqs) {
        r = -1;
        goto out;
    }
    for (unsigned i = 0; i < N_REQ; i++)
        make_req(&reqs[i], n);
    for (unsigned i = 0; i < N_REQ; i++)        /* warm up */
        sink += rules_match(rules, &reqs[i].r, idx);
    t0 = now_ns();
    for (unsigned i = 0; i < N_MATCH; i++)
        sink += rules_match(rules, &reqs[i % N_REQ].r, idx) + idx[0];
    t_match = now_ns() - t0;
    printf("rules=%6u  compile %8.2f ms  blob %9zu bytes  match %6.1f ns  (sink %zu)\n",
           n + N_GLOBS + 1, t_compile / 1e6, blob_len, t_match / N_MATCH, sink % 10);
    r = 0;
out:
    free(reqs);
    rules_free(rules);
    rules_spec_free(&spec);
    return r;
}

int main(void)
{
    static const unsigned sizes[] = { 10, 1000, 10000, 100000 - N_GLOBS - 1 };

    srand(1);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (run(sizes[i]) < 0)
            return 1;
    }
    return 0;
}
