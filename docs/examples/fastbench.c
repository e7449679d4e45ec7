/* SPDX-License-Identifier: MIT */
/*
 * fastbench: how fast libdivvy's shared-memory fast path decides hits, in
 * one thread (a measurement, not a test).  Needs a divvyd running the rules
 * that `fastbench --config` prints (20 rules with globs and actors, a fast
 * table large enough for 500,000 actors), reached at a unix: address by a
 * user divvyd hands the fast path to (root or its fast group):
 *
 *     fastbench --config > bench.conf
 *     divvyd -c bench.conf -s /tmp/st -l unix:/tmp/st/divvy.sock &
 *     DIVVY_ADDRESS=unix:/tmp/st/divvy.sock fastbench [HITS]
 *
 * Prints hits/s for one hot key and for random keys out of 500,000 (their
 * strings read from a 500,000-entry array, then written on the stack as a
 * caller that just parsed its request holds them, then the latter in
 * batches of 16 through divvy_hit_many()).  Every
 * hit must be decided in-process (DIVVY_FAST_ONLY), so a missing permission
 * or a stale daemon is an error, not a silently slower number.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <divvy.h>

#define ACTORS 500000
#define RULES  18

static const char config[] =
    "# fastbench: 18 fast_path rules with actors (exact paths, a presence key),\n"
    "# 2 glob rules, the default.\n"
    "table = { fast_slots = 1048576; };\n"
    "rules = (\n"
    "%s"
    "    { match = { path = \"/static/*\"; }; credit_limit = 100000000000L;\n"
    "      reset_seconds = 3600; actor = \"ip\"; fast_path = true; label = \"static\"; },\n"
    "    { match = { path = \"*.php\"; method = \"*\"; }; credit_limit = 100;\n"
    "      reset_seconds = 60; actor = \"ip\"; fast_path = true; label = \"php\"; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static void print_config(void)
{
    char rules[RULES * 256] = "", *p = rules;

    for (int i = 0; i < RULES; i++)
        p += sprintf(p,
                     "    { match = { method = \"GET\"; path = \"/api/v1/res%d\"; ip = \"*\"; };\n"
                     "      credit_limit = 100000000000L; reset_seconds = 3600; actor = \"ip\";\n"
                     "      fast_path = true; label = \"api%d\"; },\n",
                     i, i);
    printf(config, rules);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Writes "10.a.b.c" for key k into @buf: the key as a caller that just
 * parsed its request holds it (in cache), not loaded from a 500,000-entry
 * table that misses the cache on every hit. */
static const char *ip_of(uint64_t k, char *buf)
{
    unsigned part[4] = { 10, (unsigned)(k >> 16) & 255, (unsigned)(k >> 8) & 255,
                         (unsigned)k & 255 };
    char *p = buf;

    for (int i = 0; i < 4; i++) {
        unsigned v = part[i];

        if (i)
            *p++ = '.';
        if (v >= 100)
            *p++ = (char)('0' + v / 100);
        if (v >= 10)
            *p++ = (char)('0' + v / 10 % 10);
        *p++ = (char)('0' + v % 10);
    }
    *p = '\0';
    return buf;
}

static int run(struct divvy *h, const char *what, long hits, int random_keys, int cached,
               char (*ips)[16])
{
    char ip[16];
    struct divvy_kv kv[3] = { { "method", "GET" }, { "path", "/api/v1/res7" },
                              { "ip", "192.0.2.1" } };
    static const char *paths[RULES];
    static char path_buf[RULES][32];
    struct divvy_result res = { .size = sizeof(res) };
    uint64_t seed = 88172645463325252ull;
    long allowed = 0;
    double t0, dt;
    int r;

    for (int i = 0; i < RULES; i++) {
        snprintf(path_buf[i], sizeof(path_buf[i]), "/api/v1/res%d", i);
        paths[i] = path_buf[i];
    }
    t0 = now_s();
    for (long i = 0; i < hits; i++) {
        if (random_keys) {
            /* 500,000 keys in all: key k is rule k % 18 with actor k. */
            uint64_t k = xorshift(&seed) % ACTORS;

            kv[1].value = paths[k % RULES];
            kv[2].value = cached ? ip_of(k, ip) : ips[k];
        }
        r = divvy_hit(h, kv, 3, &res);
        if (r < 0) {
            fprintf(stderr, "%s: hit %ld: %s (%s)\n", what, i, strerror(-r), divvy_errmsg(h));
            return -1;
        }
        allowed += res.allowed;
    }
    dt = now_s() - t0;
    printf("%-28s %10ld hits %8.3f s %8.2f M hits/s %6.1f ns/hit (%ld allowed)\n", what, hits,
           dt, (double)hits / dt / 1e6, dt * 1e9 / (double)hits, allowed);
    return 0;
}

/* Random keys (in cache) in batches of BATCH through divvy_hit_many(),
 * which loads the next requests' counters while it decides one. */
static int run_many(struct divvy *h, const char *what, long hits)
{
    enum { BATCH = 16 };
    static char ips[BATCH][16], paths[RULES][32];
    struct divvy_kv kv[BATCH][3];
    struct divvy_request rq[BATCH];
    struct divvy_result res[BATCH];
    uint64_t seed = 88172645463325252ull;
    long allowed = 0, done = 0;
    double t0, dt;
    int r;

    for (int i = 0; i < RULES; i++)
        snprintf(paths[i], sizeof(paths[i]), "/api/v1/res%d", i);
    t0 = now_s();
    while (done < hits) {
        for (int b = 0; b < BATCH; b++) {
            uint64_t k = xorshift(&seed) % ACTORS;

            kv[b][0] = (struct divvy_kv){ "method", "GET" };
            kv[b][1] = (struct divvy_kv){ "path", paths[k % RULES] };
            kv[b][2] = (struct divvy_kv){ "ip", ip_of(k, ips[b]) };
            rq[b] = (struct divvy_request){ .kv = kv[b], .n_kv = 3 };
            res[b].size = sizeof(res[b]);
        }
        r = divvy_hit_many(h, rq, BATCH, res);
        if (r != BATCH) {
            fprintf(stderr, "%s: batch at %ld: %s (%s)\n", what, done,
                    strerror(r < 0 ? -r : EIO), divvy_errmsg(h));
            return -1;
        }
        for (int b = 0; b < BATCH; b++)
            allowed += res[b].allowed;
        done += BATCH;
    }
    dt = now_s() - t0;
    printf("%-28s %10ld hits %8.3f s %8.2f M hits/s %6.1f ns/hit (%ld allowed)\n", what, done,
           dt, (double)done / dt / 1e6, dt * 1e9 / (double)done, allowed);
    return 0;
}

int main(int argc, char **argv)
{
    long hits = argc > 1 ? atol(argv[1]) : 10000000;
    char (*ips)[16] = NULL;
    struct divvy *h = NULL;
    int r, rv = 1;

    if (argc > 1 && strcmp(argv[1], "--config") == 0) {
        print_config();
        return 0;
    }
    if (hits <= 0) {
        fprintf(stderr, "usage: %s [HITS] | --config\n", argv[0]);
        return 2;
    }
    ips = malloc(sizeof(*ips) * ACTORS);
    if (!ips)
        return 1;
    for (int i = 0; i < ACTORS; i++)
        snprintf(ips[i], sizeof(ips[i]), "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255);
    r = divvy_open(NULL, DIVVY_FAST_ONLY, &h);
    if (r < 0) {
        fprintf(stderr, "divvy_open(DIVVY_FAST_ONLY): %s\n", strerror(-r));
        goto out;
    }
    /* Warm-up: claims the random keys' slots, so both runs measure updates. */
    if (run(h, "warm-up (random keys)", hits, 1, 0, ips) < 0 ||
        run(h, "one hot key", hits, 0, 0, ips) < 0 ||
        run(h, "random keys of 500,000", hits, 1, 0, ips) < 0 ||
        run(h, "random keys, key in cache", hits, 1, 1, ips) < 0 ||
        run_many(h, "same, divvy_hit_many x16", hits) < 0)
        goto out;
    rv = 0;
out:
    divvy_close(h);
    free(ips);
    return rv;
}
