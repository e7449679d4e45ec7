/* SPDX-License-Identifier: MIT */
/*
 * dlog-gen: writes a synthetic decision log (server/dlog.h's encoder) for
 * `make bench-replay` (docs/dev/benchmarks.md "Replay"): DURATION seconds
 * of traffic at RATE decisions per second, as divvyd's writer lays it out:
 * two workers' blocks flushed every second (so they interleave out of
 * order by up to a second), libdivvy's fast-path reports in their own lane
 * up to two seconds late, files rotated at 64 MiB.  The traffic: ACTORS
 * client addresses drawn with a Zipf-like skew, three dozen API paths, and
 * a few percent of sshd logins (PEEK, failed TAKE, RESET after success) by
 * a few thousand users (a tenth of them guesses at root from five
 * addresses, which the lockout rule locks), recorded as privileged.  It also writes the config
 * the traffic was "recorded" with (--config): a per-address rule, an API
 * rule, a login lockout rule.  Verdicts are made up (a fixed share denied):
 * this is load, not a reference.  Built into build/, never installed.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlog.h"
#include "fdio.h"
#include "table.h"

#define GEN_WORKERS     2
#define GEN_LANES       (GEN_WORKERS + 1)       /* the last: fast-path reports */
#define GEN_FILE_SIZE   (64u << 20)
#define GEN_FLUSH_MS    1000
#define GEN_REPORT_MS   2000                    /* reports arrive up to this late */
#define GEN_USERS       2000
#define GEN_START_UNIX  1795000000000ULL        /* 2026-11-18, a Wednesday */
#define GEN_START_MONO  86400000ULL             /* a day after boot */

static const char *const gen_paths[] = {
    "/", "/login", "/logout", "/search", "/cart", "/checkout", "/static/app.js",
    "/static/app.css", "/static/logo.png", "/favicon.ico", "/api/v1/items", "/api/v1/items/42",
    "/api/v1/orders", "/api/v1/orders/7", "/api/v1/users/me", "/api/v1/search",
    "/api/v1/cart", "/api/v1/pay", "/api/v2/items", "/api/v2/orders", "/api/v2/stream",
    "/api/v2/feed", "/api/v2/notify", "/api/v2/upload", "/help", "/about", "/blog",
    "/blog/rss", "/robots.txt", "/sitemap.xml", "/admin", "/admin/users", "/health",
    "/metrics", "/pantry/cookies", "/pantry/tea",
};
#define GEN_N_PATHS (sizeof(gen_paths) / sizeof(gen_paths[0]))

static const char gen_config[] =
    "# Written by dlog-gen: the rules its traffic was recorded with.\n"
    "rules = (\n"
    "{ match = { event = \"authfail\"; user = \"*\"; rhost = \"*\"; };\n"
    "  label = \"login-user-source\"; actor = [ \"user\", \"rhost\" ];\n"
    "  algorithm = \"lockout\"; credit_limit = 5; fail_interval = 900; unlock_time = 300;\n"
    "  match_policy = \"continue\"; source = \"privileged\"; },\n"
    "{ match = { event = \"authfail\"; };\n"
    "  label = \"login-any\"; credit_limit = 100000; reset_seconds = 60;\n"
    "  source = \"privileged\"; },\n"
    "{ match = { ip = \"*\"; }; label = \"per-ip\"; actor = \"ip\";\n"
    "  credit_limit = 600; reset_seconds = 60; match_policy = \"continue\"; },\n"
    "{ match = { path = \"/api/*\"; }; label = \"api\"; actor = \"ip\";\n"
    "  credit_limit = 5000; reset_seconds = 3600; },\n"
    "{ default = true; credit_limit = 1000000; reset_seconds = 1; }\n"
    ");\n";

struct gen_lane {
    struct dlog_enc *enc;
    uint64_t first_ms;          /* mono of the block's first record */
};

struct gen {
    const char *dir;
    unsigned file_no;
    int fd;
    uint64_t file_bytes;
    struct gen_lane lane[GEN_LANES];
    uint64_t rng;
    double *cdf;                /* actor i drawn with probability cdf[i] - cdf[i-1] */
    unsigned actors;
    uint64_t written, bytes;
};

static uint64_t gen_rand(struct gen *g)
{
    /* xorshift64* */
    g->rng ^= g->rng >> 12;
    g->rng ^= g->rng << 25;
    g->rng ^= g->rng >> 27;
    return g->rng * 0x2545f4914f6cdd1dULL;
}

static double gen_unit(struct gen *g)
{
    return (double)(gen_rand(g) >> 11) * (1.0 / 9007199254740992.0);
}

static unsigned gen_actor(struct gen *g)
{
    double u = gen_unit(g);
    unsigned lo = 0, hi = g->actors - 1;

    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;

        if (g->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int gen_open(struct gen *g, uint64_t unix_ms)
{
    uint8_t hdr[DLOG_HEADER_MAX];
    char path[4096];
    size_t len;
    int r;

    if (g->fd >= 0 && close(g->fd) < 0)
        return -errno;
    snprintf(path, sizeof(path), "%s/gen-%05u%s", g->dir, g->file_no++, DLOG_FILE_SUFFIX);
    g->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (g->fd < 0)
        return -errno;
    len = dlog_file_header(hdr, sizeof(hdr), unix_ms, "dlog-gen");
    if (!len)
        return -EINVAL;
    r = fdio_write_all(g->fd, hdr, len);
    g->file_bytes = len;
    g->bytes += len;
    return r < 0 ? r : 0;
}

/* Seals lane @l's block and appends it to the current file (rotating). */
static int gen_flush(struct gen *g, unsigned l, uint64_t unix_ms)
{
    const uint8_t *blk;
    size_t len = dlog_enc_finish(g->lane[l].enc, &blk);
    int r;

    if (len) {
        if (g->fd < 0 || g->file_bytes + len > GEN_FILE_SIZE) {
            r = gen_open(g, unix_ms);
            if (r < 0)
                return r;
        }
        r = fdio_write_all(g->fd, blk, len);
        if (r < 0)
            return r;
        g->file_bytes += len;
        g->bytes += len;
    }
    dlog_enc_begin(g->lane[l].enc, l == GEN_WORKERS ? UINT32_MAX : l);
    g->lane[l].first_ms = 0;
    return 0;
}

static int gen_add(struct gen *g, unsigned l, const struct dlog_decision *d)
{
    int r;

    if (g->lane[l].first_ms && d->mono_ms >= g->lane[l].first_ms + GEN_FLUSH_MS) {
        r = gen_flush(g, l, d->unix_ms);
        if (r < 0)
            return r;
    }
    r = dlog_enc_decision(g->lane[l].enc, d);
    if (r == -ENOBUFS) {
        r = gen_flush(g, l, d->unix_ms);
        if (r == 0)
            r = dlog_enc_decision(g->lane[l].enc, d);
    }
    if (r == 0 && !g->lane[l].first_ms)
        g->lane[l].first_ms = d->mono_ms;
    g->written += r == 0;
    return r;
}

static void kv(struct dlog_decision *d, const char *k, const char *v)
{
    d->kv[d->n_kv++] = (struct dlog_kv){ .key = k, .key_len = (uint32_t)strlen(k), .value = v,
                                          .value_len = (uint32_t)strlen(v) };
}

/* A reported decision waiting for its (late) report. */
struct gen_pending {
    struct dlog_decision d;
    char ip[24], path[64];
    uint64_t due;
};

static int gen_run(struct gen *g, uint64_t seconds, unsigned rate)
{
    static struct gen_pending pend[4096];
    size_t n_pend = 0;
    uint64_t total = seconds * rate, mono = GEN_START_MONO;
    char ip[24], user[16];
    struct dlog_decision d;
    int r = 0;

    for (uint64_t i = 0; i < total && r == 0; i++) {
        uint64_t x = gen_rand(g);
        unsigned a = gen_actor(g), kind = (unsigned)(x % 1000);

        /* Mean gap 1000/rate ms: a uniform step of 0..2/rate s, in ms. */
        mono += (gen_rand(g) % (2000000 / rate + 1)) / 1000;
        memset(&d, 0, offsetof(struct dlog_decision, kv));
        d.mono_ms = mono;
        d.unix_ms = mono - GEN_START_MONO + GEN_START_UNIX;
        d.generation = 1;
        d.n = 1;
        d.uid = DLOG_UNKNOWN_ID;
        d.pid = DLOG_UNKNOWN_ID;
        d.path = DLOG_PATH_LOCAL;
        snprintf(ip, sizeof(ip), "10.%u.%u.%u", a >> 16, (a >> 8) & 255, a & 255);
        if (kind < 40) {
            /* sshd: 2.5% failed logins, 1% preauth PEEKs, 0.5% RESETs. */
            snprintf(user, sizeof(user), "user%u", (unsigned)((x >> 20) % GEN_USERS));
            d.op = kind < 25 ? TABLE_TAKE : kind < 35 ? TABLE_PEEK : TABLE_RESET;
            if ((x >> 44) % 10 == 0) {
                /* A tenth: a few guessers at root from five addresses (locked). */
                snprintf(user, sizeof(user), "root");
                snprintf(ip, sizeof(ip), "10.66.6.%u", (unsigned)((x >> 50) % 5));
                d.op = TABLE_TAKE;              /* they never get in */
            }
            d.flags = DLOG_F_PRIVILEGED | ((x >> 40) % 10 ? DLOG_F_ALLOWED : 0);
            d.uid = 0;
            d.pid = 1000 + (uint32_t)(x >> 48);
            kv(&d, "event", "authfail");
            kv(&d, "rhost", ip);
            kv(&d, "service", "sshd");
            kv(&d, "user", user);
            d.decider_id = 0x1001;
            r = gen_add(g, (unsigned)(x >> 32) % GEN_WORKERS, &d);
            continue;
        }
        d.op = TABLE_TAKE;
        d.flags = (x >> 40) % 50 ? DLOG_F_ALLOWED : 0;
        d.decider_id = 0x1003;
        d.protocol = (unsigned)(x >> 8) % 3;
        if (kind >= 950 && n_pend < sizeof(pend) / sizeof(pend[0])) {
            /* 5%: decided in a client's process, reported late. */
            struct gen_pending *p = &pend[n_pend++];

            p->d = d;
            p->d.protocol = DLOG_PROTO_FAST;
            p->d.flags |= DLOG_F_REPORTED;
            p->d.uid = 1000;
            snprintf(p->ip, sizeof(p->ip), "%s", ip);
            snprintf(p->path, sizeof(p->path), "%s", gen_paths[(x >> 24) % GEN_N_PATHS]);
            kv(&p->d, "ip", p->ip);
            kv(&p->d, "method", "GET");
            kv(&p->d, "path", p->path);
            p->due = mono + (gen_rand(g) % GEN_REPORT_MS);
        } else {
            kv(&d, "ip", ip);
            kv(&d, "method", (x >> 16) % 5 ? "GET" : "POST");
            kv(&d, "path", gen_paths[(x >> 24) % GEN_N_PATHS]);
            r = gen_add(g, (unsigned)(x >> 32) % GEN_WORKERS, &d);
        }
        /* Reports due by now reach divvyd, in the order they arrive. */
        for (size_t k = 0; k < n_pend && r == 0;) {
            if (pend[k].due > mono) {
                k++;
                continue;
            }
            /* The pairs point into pend[k]: fix them up for its copy. */
            struct gen_pending tmp = pend[k];

            tmp.d.kv[0].value = tmp.ip;
            tmp.d.kv[2].value = tmp.path;
            r = gen_add(g, GEN_WORKERS, &tmp.d);
            pend[k] = pend[--n_pend];
            pend[k].d.kv[0].value = pend[k].ip;
            pend[k].d.kv[2].value = pend[k].path;
        }
    }
    for (size_t k = 0; k < n_pend && r == 0; k++) {
        pend[k].d.kv[0].value = pend[k].ip;
        pend[k].d.kv[2].value = pend[k].path;
        r = gen_add(g, GEN_WORKERS, &pend[k].d);
    }
    for (unsigned l = 0; l < GEN_LANES && r == 0; l++)
        r = gen_flush(g, l, mono - GEN_START_MONO + GEN_START_UNIX);
    return r;
}

static int gen_write_config(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int r;

    if (fd < 0)
        return -errno;
    r = fdio_write_all(fd, gen_config, sizeof(gen_config) - 1);
    if (close(fd) < 0 && r >= 0)
        r = -errno;
    return r < 0 ? r : 0;
}

static const char gen_usage[] =
    "Usage: dlog-gen [-s SECONDS] [-r RATE] [-a ACTORS] [-S SEED] [-c CONFIG] DIR\n"
    "Writes SECONDS (default 604800, a week) of synthetic traffic at RATE decisions\n"
    "per second (default 1000) as decision log files DIR/gen-NNNNN.dlog, and with\n"
    "-c the config it was recorded with.  ACTORS: client addresses (default 10000).\n";

int main(int argc, char **argv)
{
    struct gen g = { .fd = -1, .rng = 0x9e3779b97f4a7c15ULL, .actors = 10000 };
    const char *config = NULL;
    uint64_t seconds = 604800;
    unsigned long v;
    unsigned rate = 1000;
    double sum = 0;
    int opt, r = 0;

    while ((opt = getopt(argc, argv, "s:r:a:S:c:h")) != -1) {
        v = optarg ? strtoul(optarg, NULL, 10) : 0;
        switch (opt) {
        case 's':
            seconds = v;
            break;
        case 'r':
            rate = (unsigned)v;
            break;
        case 'a':
            g.actors = (unsigned)v;
            break;
        case 'S':
            g.rng = v ? v : 1;
            break;
        case 'c':
            config = optarg;
            break;
        default:
            fputs(gen_usage, opt == 'h' ? stdout : stderr);
            return opt == 'h' ? 0 : 2;
        }
    }
    if (optind + 1 != argc || !seconds || !rate || rate > 1000000 || !g.actors ||
        g.actors > (1u << 24)) {
        fputs(gen_usage, stderr);
        return 2;
    }
    g.dir = argv[optind];
    if (mkdir(g.dir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "dlog-gen: %s: %s\n", g.dir, strerror(errno));
        return 1;
    }
    g.cdf = malloc(g.actors * sizeof(*g.cdf));
    for (unsigned l = 0; l < GEN_LANES; l++) {
        g.lane[l].enc = dlog_enc_new(DLOG_BLOCK_MAX);
        if (!g.lane[l].enc)
            r = -ENOMEM;
        else
            dlog_enc_begin(g.lane[l].enc, l == GEN_WORKERS ? UINT32_MAX : l);
    }
    if (!g.cdf)
        r = -ENOMEM;
    for (unsigned i = 0; r == 0 && i < g.actors; i++) {
        sum += 1.0 / (1.0 + i * 0.05);
        g.cdf[i] = sum;
    }
    for (unsigned i = 0; r == 0 && i < g.actors; i++)
        g.cdf[i] /= sum;
    if (r == 0 && config)
        r = gen_write_config(config);
    if (r == 0)
        r = gen_run(&g, seconds, rate);
    if (g.fd >= 0 && close(g.fd) < 0 && r == 0)
        r = -errno;
    for (unsigned l = 0; l < GEN_LANES; l++)
        dlog_enc_free(g.lane[l].enc);
    free(g.cdf);
    if (r < 0) {
        fprintf(stderr, "dlog-gen: %s\n", strerror(-r));
        return 1;
    }
    printf("dlog-gen: %" PRIu64 " decisions, %" PRIu64 " bytes in %u files (%.1f bytes each)\n",
           g.written, g.bytes, g.file_no, g.written ? (double)g.bytes / (double)g.written : 0.0);
    return 0;
}
