/* SPDX-License-Identifier: MIT */
/*
 * divvy-bench: a load generator for divvyd's socket protocol.  One thread
 * per connection sends pipelined batches of HIT lines (actors drawn from a
 * key space), reads the replies, and records each batch's round-trip time;
 * at the end it prints hits/s, latency percentiles and error counts.  It
 * measures, it never judges: the exit status says only whether it could run.
 * By default it speaks the protocol itself (libc, pthreads, common/clock.h),
 * so it measures the server and the socket, nothing else; with --lib it goes
 * through libdivvy instead, and --lib fast measures the shared-memory fast
 * path (one handle per thread, hits decided in the benchmark's process);
 * with --resp it sends the same hits as RESP DIVVY.HIT arrays to a "resp:"
 * listener (docs/resp.md), as a Redis client library would.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "divvy.h"

#define BENCH_MAX_CONNS   4096
#define BENCH_MAX_DEPTH   100000
#define BENCH_LINE_MAX    4096
#define BENCH_IO_TIMEOUT  10        /* seconds without progress on a socket */

struct bench_opts {
    const char *unix_path;
    const char *tcp_addr;       /* HOST:PORT */
    unsigned conns;
    unsigned depth;
    double duration;
    unsigned long keys;
    const char *pairs;          /* fixed pairs before the actor */
    const char *actor_key;
    int lib;                    /* -1: raw protocol; else DIVVY_AUTO/SOCKET_ONLY/FAST_ONLY */
    bool resp;                  /* DIVVY.HIT over RESP instead of HIT lines */
    bool quiet;
};

struct bench_thread {
    const struct bench_opts *o;
    const struct addrinfo *ai;  /* TCP target, or NULL for unix */
    pthread_t tid;
    unsigned id;
    uint64_t deadline_ns;
    uint64_t hits, allowed, denied, err_replies, conn_errors, other;
    uint64_t *lat;              /* per-batch round trips, ns */
    size_t n_lat, cap_lat;
    int setup_error;            /* -errno when the first connect failed */
    unsigned resp_left;         /* --resp: lines left of the reply array being read */
};

static const char bench_usage[] =
"NAME\n"
"    divvy-bench - measure divvyd's throughput and latency over its socket\n"
"\n"
"SYNOPSIS\n"
"    divvy-bench (--unix PATH | --tcp HOST:PORT) [-c N] [-d D] [-t SECONDS]\n"
"                [-k K] [--pairs \"k=v ...\"] [--actor-key KEY]\n"
"                [--lib socket|fast|auto | --shm] [-q]\n"
"\n"
"DESCRIPTION\n"
"    Opens N connections to divvyd, one thread each.  Every thread repeatedly\n"
"    writes a batch of D request lines in one write(), then reads the D\n"
"    replies, until the duration is over.  Each line is\n"
"\n"
"        HIT <pairs> <actor-key>=<n>\n"
"\n"
"    with n drawn uniformly from 0..K-1 (per thread, xorshift), so K sets how\n"
"    many counters the run touches.  The time from the write to the last\n"
"    reply of a batch is one latency sample.\n"
"\n"
"    divvy-bench never fails because of speed: a benchmark is not a test.\n"
"\n"
"OPTIONS\n"
"    --unix PATH         connect to the Unix stream socket PATH\n"
"    --tcp HOST:PORT     connect over TCP (IPv6 as [ADDR]:PORT); TCP_NODELAY\n"
"    -c, --connections N connections and threads (default 1, max 4096)\n"
"    -d, --depth D       requests per batch, the pipeline depth (default 1)\n"
"    -t, --duration S    seconds to run, may be fractional (default 5)\n"
"    -k, --keys K        actor key space (default 10000)\n"
"        --pairs TEXT    the fixed pairs of each HIT (default \"path=/bench\")\n"
"        --actor-key KEY the varying key (default \"actor\")\n"
"        --lib PATH      go through libdivvy instead of speaking the protocol:\n"
"                        one handle per thread (-c), batches of D requests with\n"
"                        divvy_hit_many (divvy_hit when D is 1).  PATH is socket\n"
"                        (DIVVY_SOCKET_ONLY), fast (DIVVY_FAST_ONLY: every hit\n"
"                        decided in this process from the shared-memory table;\n"
"                        needs fast_path rules, a Unix socket and membership\n"
"                        of divvyd's fast group) or auto (DIVVY_AUTO)\n"
"        --shm           the same as --lib fast\n"
"        --resp          send DIVVY.HIT k v ... as RESP arrays, for a resp:\n"
"                        listener (docs/resp.md), instead of HIT lines\n"
"    -q, --quiet         print one line: hits/s p50 p99 p999 errors\n"
"    -h, --help          show this text\n"
"\n"
"OUTPUT\n"
"    hits/s counts replies received, allowed or denied.  Latency percentiles\n"
"    are per batch, in microseconds.  \"ERR replies\" counts ERR lines (bad\n"
"    configuration, busy server); \"connection errors\" counts connections\n"
"    that failed or timed out (%d s without progress) during the run.\n"
"\n"
"EXIT STATUS\n"
"    0 when the run completed (whatever the numbers), 1 when it could not run\n"
"    (no connection at all, out of memory), 2 on a usage error.\n"
"\n"
"EXAMPLES\n"
"    divvy-bench --unix /run/divvy/divvy.sock -c 8 -d 32 -t 5\n"
"    divvy-bench --tcp 127.0.0.1:8321 -c 1 -d 1 -k 1 --pairs \"method=GET path=/status\"\n"
"    divvy-bench --unix /run/divvy/divvy.sock --lib fast -c 1 -d 1 -k 500000\n";

static int parse_uint(const char *s, unsigned long min, unsigned long max, unsigned long *ret)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max || s[0] == '-')
        return -EINVAL;
    *ret = v;
    return 0;
}

static int resolve_tcp(const char *addr, struct addrinfo **ret)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    char host[256];
    const char *colon, *port;
    size_t hl;
    int r;

    colon = strrchr(addr, ':');
    if (!colon || colon == addr)
        return -EINVAL;
    port = colon + 1;
    if (addr[0] == '[' && colon[-1] == ']') {
        hl = (size_t)(colon - addr) - 2;
        addr++;
    } else {
        hl = (size_t)(colon - addr);
    }
    if (hl >= sizeof(host))
        return -ENAMETOOLONG;
    memcpy(host, addr, hl);
    host[hl] = '\0';
    r = getaddrinfo(host, port, &hints, ret);
    if (r != 0)
        return r == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
    return 0;
}

static int bench_connect(const struct bench_thread *t, int *ret_fd)
{
    struct timeval tv = { .tv_sec = BENCH_IO_TIMEOUT };
    int fd, r, one = 1;

    if (t->ai) {
        fd = socket(t->ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, t->ai->ai_addr, t->ai->ai_addrlen) < 0) {
            r = -errno;
            goto fail;
        }
    } else {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };

        if (strlen(t->o->unix_path) >= sizeof(sa.sun_path))
            return -ENAMETOOLONG;
        strcpy(sa.sun_path, t->o->unix_path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            r = -errno;
            goto fail;
        }
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    *ret_fd = fd;
    return 0;
fail:
    close(fd);
    return r;
}

static int write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int record_latency(struct bench_thread *t, uint64_t ns)
{
    if (t->n_lat == t->cap_lat) {
        size_t cap = t->cap_lat ? t->cap_lat * 2 : 65536;
        uint64_t *n = realloc(t->lat, cap * sizeof(*n));

        if (!n)
            return -ENOMEM;
        t->lat = n;
        t->cap_lat = cap;
    }
    t->lat[t->n_lat++] = ns;
    return 0;
}

/* Counts one reply line. */
static void classify(struct bench_thread *t, const char *line, size_t len)
{
    t->hits++;
    if (len >= 7 && memcmp(line, "OK true", 7) == 0)
        t->allowed++;
    else if (len >= 8 && memcmp(line, "OK false", 8) == 0)
        t->denied++;
    else if (len >= 3 && memcmp(line, "ERR", 3) == 0)
        t->err_replies++;
    else
        t->other++;
}

/* --resp: counts one reply line; 1 when it ends a reply.  DIVVY.HIT's reply
 * is "*4", ":allowed", ":credit", ":reset", "$len", the rule. */
static int classify_resp(struct bench_thread *t, const char *line, size_t len)
{
    if (t->resp_left > 0) {
        if (t->resp_left == 5) {
            t->hits++;
            if (len >= 2 && memcmp(line, ":1", 2) == 0)
                t->allowed++;
            else if (len >= 2 && memcmp(line, ":0", 2) == 0)
                t->denied++;
            else
                t->other++;
        }
        return --t->resp_left == 0;
    }
    if (len >= 2 && memcmp(line, "*4", 2) == 0) {
        t->resp_left = 5;
        return 0;
    }
    t->hits++;
    if (len >= 1 && line[0] == '-')
        t->err_replies++;
    else
        t->other++;
    return 1;
}

/* --resp: "*N\r\n$9\r\nDIVVY.HIT\r\n" and each pair of @pairs as two bulk
 * strings, the actor's two still to come; the length, or 0 if it does not fit. */
static size_t resp_prefix(const char *pairs, char *buf, size_t size)
{
    char args[BENCH_LINE_MAX];
    size_t n = 0, pos;
    unsigned argc = 3;
    const char *p = pairs;

    while (*p) {
        size_t w = strcspn(p, " "), k = strcspn(p, "=");

        if (w > 0 && k < w) {
            n += (size_t)snprintf(args + n, sizeof(args) - n, "$%zu\r\n%.*s\r\n$%zu\r\n%.*s\r\n",
                                  k, (int)k, p, w - k - 1, (int)(w - k - 1), p + k + 1);
            argc += 2;
            if (n >= sizeof(args))
                return 0;
        }
        p += w;
        p += strspn(p, " ");
    }
    pos = (size_t)snprintf(buf, size, "*%u\r\n$9\r\nDIVVY.HIT\r\n%.*s", argc, (int)n, args);
    return pos < size ? pos : 0;
}

static void *bench_thread_main(void *arg)
{
    struct bench_thread *t = arg;
    const struct bench_opts *o = t->o;
    size_t line_cap = 3 * strlen(o->pairs) + 2 * strlen(o->actor_key) + 128;
    size_t batch_cap = line_cap * o->depth, rbuf_cap = 65536, rlen = 0, pre_len = 0;
    char *batch = malloc(batch_cap), *rbuf = malloc(rbuf_cap), prefix[BENCH_LINE_MAX * 2];
    uint64_t x = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)t->id * 0xbf58476d1ce4e5b9ULL);
    int fd = -1, r;

    if (!batch || !rbuf) {
        t->setup_error = -ENOMEM;
        goto out;
    }
    if (o->resp) {
        pre_len = resp_prefix(o->pairs, prefix, sizeof(prefix));
        if (!pre_len) {
            t->setup_error = -EINVAL;
            goto out;
        }
    }
    r = bench_connect(t, &fd);
    if (r < 0) {
        t->setup_error = r;
        goto out;
    }
    while (clock_now_ns() < t->deadline_ns) {
        size_t len = 0;
        unsigned got = 0;
        uint64_t t0;

        for (unsigned i = 0; i < o->depth; i++) {
            /* xorshift64: cheap, and distinct per thread. */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if (o->resp) {
                char num[24];
                int nl = snprintf(num, sizeof(num), "%lu", (unsigned long)(x % o->keys));

                memcpy(batch + len, prefix, pre_len);
                len += pre_len;
                len += (size_t)snprintf(batch + len, batch_cap - len,
                                        "$%zu\r\n%s\r\n$%d\r\n%s\r\n", strlen(o->actor_key),
                                        o->actor_key, nl, num);
            } else {
                len += (size_t)snprintf(batch + len, batch_cap - len, "HIT %s %s=%lu\n",
                                        o->pairs, o->actor_key, (unsigned long)(x % o->keys));
            }
        }
        t0 = clock_now_ns();
        if (write_all(fd, batch, len) < 0) {
            t->conn_errors++;
            goto out;
        }
        while (got < o->depth) {
            ssize_t n = recv(fd, rbuf + rlen, rbuf_cap - rlen, 0);
            char *p = rbuf, *nl;

            if (n <= 0) {
                if (n < 0 && errno == EINTR)
                    continue;
                t->conn_errors++;
                goto out;
            }
            rlen += (size_t)n;
            while ((nl = memchr(p, '\n', rlen - (size_t)(p - rbuf))) != NULL) {
                if (!o->resp) {
                    classify(t, p, (size_t)(nl - p));
                    got++;
                } else {
                    got += (unsigned)classify_resp(t, p, (size_t)(nl - p));
                }
                p = nl + 1;
            }
            rlen -= (size_t)(p - rbuf);
            memmove(rbuf, p, rlen);
            if (rlen == rbuf_cap) {
                /* A reply longer than 64 kB is not a HIT reply. */
                t->conn_errors++;
                goto out;
            }
        }
        if (record_latency(t, clock_now_ns() - t0) < 0) {
            t->setup_error = -ENOMEM;
            goto out;
        }
    }
out:
    if (fd >= 0)
        close(fd);
    free(batch);
    free(rbuf);
    return NULL;
}

#define BENCH_LIB_PAIRS 31

/*
 * --lib: the same load through libdivvy.  Each thread has its own handle
 * (divvy.h: one handle per thread); a batch of D requests is one
 * divvy_hit_many() call (divvy_hit() when D is 1) and one latency sample.
 */
static void *bench_thread_lib(void *arg)
{
    struct bench_thread *t = arg;
    const struct bench_opts *o = t->o;
    struct divvy_kv *kv = NULL;
    struct divvy_request *reqs = NULL;
    struct divvy_result *res = NULL;
    char *pairs = NULL, *actors = NULL, addr[PATH_MAX + 8];
    struct divvy_kv fixed[BENCH_LIB_PAIRS];
    size_t n_fixed = 0, per = 0;
    uint64_t x = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)t->id * 0xbf58476d1ce4e5b9ULL);
    struct divvy *h = NULL;
    char *save = NULL, *tok;
    int r;

    /* "k=v k=v" -> fixed pairs; each request adds <actor-key>=<n>. */
    pairs = strdup(o->pairs);
    if (!pairs) {
        t->setup_error = -ENOMEM;
        goto out;
    }
    for (tok = strtok_r(pairs, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');

        if (!eq || n_fixed == BENCH_LIB_PAIRS) {
            t->setup_error = -EINVAL;
            goto out;
        }
        *eq = '\0';
        fixed[n_fixed].key = tok;
        fixed[n_fixed++].value = eq + 1;
    }
    per = n_fixed + 1;
    kv = calloc((size_t)o->depth * per, sizeof(*kv));
    reqs = calloc(o->depth, sizeof(*reqs));
    res = calloc(o->depth, sizeof(*res));
    actors = malloc((size_t)o->depth * 24);
    if (!kv || !reqs || !res || !actors) {
        t->setup_error = -ENOMEM;
        goto out;
    }
    for (unsigned i = 0; i < o->depth; i++) {
        memcpy(&kv[i * per], fixed, n_fixed * sizeof(*kv));
        kv[i * per + n_fixed].key = o->actor_key;
        kv[i * per + n_fixed].value = actors + (size_t)i * 24;
        reqs[i].amount = 1;
        reqs[i].kv = &kv[i * per];
        reqs[i].n_kv = per;
        res[i].size = sizeof(res[i]);
    }
    snprintf(addr, sizeof(addr), "%s%s", o->unix_path ? "unix:" : "tcp:",
             o->unix_path ? o->unix_path : o->tcp_addr);
    r = divvy_open(addr, (unsigned)o->lib, &h);
    if (r < 0) {
        t->setup_error = r;
        goto out;
    }
    /* divvy_open() connects lazily: a daemon that is not there must fail
     * the run (exit 1), not count one error per batch. */
    if ((unsigned)o->lib != DIVVY_FAST_ONLY) {
        char **lines = NULL;
        size_t n_lines = 0;

        r = divvy_command(h, "PING", &lines, &n_lines);
        divvy_lines_free(lines, n_lines);
        if (r < 0) {
            t->setup_error = r;
            goto out;
        }
    }
    while (clock_now_ns() < t->deadline_ns) {
        uint64_t t0;

        for (unsigned i = 0; i < o->depth; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            snprintf(actors + (size_t)i * 24, 24, "%lu", (unsigned long)(x % o->keys));
        }
        t0 = clock_now_ns();
        r = o->depth == 1 ? divvy_hit(h, reqs[0].kv, per, &res[0])
                          : divvy_hit_many(h, reqs, o->depth, res);
        if (r < 0) {
            /* Counted, not fatal: a benchmark reports what happened. */
            t->err_replies++;
            if (t->err_replies == 1 && !o->quiet)
                fprintf(stderr, "divvy-bench: %s\n", divvy_errmsg(h));
            continue;
        }
        for (unsigned i = 0; i < o->depth; i++) {
            t->hits++;
            if (res[i].allowed)
                t->allowed++;
            else
                t->denied++;
        }
        if (record_latency(t, clock_now_ns() - t0) < 0) {
            t->setup_error = -ENOMEM;
            goto out;
        }
    }
out:
    divvy_close(h);
    free(pairs);
    free(kv);
    free(reqs);
    free(res);
    free(actors);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static double pct_us(const uint64_t *v, size_t n, double p)
{
    size_t i;

    if (n == 0)
        return 0;
    i = (size_t)(p * (double)(n - 1) + 0.5);
    return (double)v[i] / 1000.0;
}

static int bench_run(const struct bench_opts *o)
{
    struct bench_thread *th = NULL;
    struct addrinfo *ai = NULL;
    uint64_t hits = 0, allowed = 0, denied = 0, errs = 0, conn_errs = 0, other = 0;
    uint64_t *all = NULL, start, elapsed;
    size_t n_all = 0;
    unsigned started = 0, failed = 0;
    int r = 0, first_err = 0;
    double secs;

    if (o->tcp_addr) {
        r = resolve_tcp(o->tcp_addr, &ai);
        if (r < 0) {
            fprintf(stderr, "divvy-bench: %s: cannot resolve\n", o->tcp_addr);
            goto out;
        }
    }
    th = calloc(o->conns, sizeof(*th));
    if (!th) {
        r = -ENOMEM;
        goto out;
    }
    start = clock_now_ns();
    for (unsigned i = 0; i < o->conns; i++) {
        th[i].o = o;
        th[i].ai = ai;
        th[i].id = i;
        th[i].deadline_ns = start + (uint64_t)(o->duration * 1e9);
        if (pthread_create(&th[i].tid, NULL, o->lib >= 0 ? bench_thread_lib : bench_thread_main,
                           &th[i]) != 0) {
            r = -EAGAIN;
            break;
        }
        started++;
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i].tid, NULL);
    elapsed = clock_now_ns() - start;
    if (r < 0) {
        fprintf(stderr, "divvy-bench: could not start %u threads\n", o->conns);
        goto out;
    }
    for (unsigned i = 0; i < started; i++) {
        if (th[i].setup_error) {
            failed++;
            if (!first_err)
                first_err = th[i].setup_error;
        }
        hits += th[i].hits;
        allowed += th[i].allowed;
        denied += th[i].denied;
        errs += th[i].err_replies;
        conn_errs += th[i].conn_errors;
        other += th[i].other;
        n_all += th[i].n_lat;
    }
    if (failed == started) {
        fprintf(stderr, "divvy-bench: %s%s: %s\n", o->unix_path ? "unix:" : "tcp:",
                o->unix_path ? o->unix_path : o->tcp_addr, strerror(-first_err));
        r = first_err;
        goto out;
    }
    all = malloc((n_all ? n_all : 1) * sizeof(*all));
    if (!all) {
        r = -ENOMEM;
        goto out;
    }
    n_all = 0;
    for (unsigned i = 0; i < started; i++) {
        if (th[i].n_lat)
            memcpy(all + n_all, th[i].lat, th[i].n_lat * sizeof(*all));
        n_all += th[i].n_lat;
    }
    qsort(all, n_all, sizeof(*all), cmp_u64);
    secs = (double)elapsed / 1e9;
    if (o->quiet) {
        printf("%.0f %.1f %.1f %.1f %llu\n", (double)hits / secs, pct_us(all, n_all, 0.50),
               pct_us(all, n_all, 0.99), pct_us(all, n_all, 0.999),
               (unsigned long long)(errs + conn_errs + other + failed));
        goto out;
    }
    printf("target           %s%s%s%s\n", o->resp ? "resp:" : "", o->unix_path ? "unix:" : "tcp:",
           o->unix_path ? o->unix_path : o->tcp_addr,
           o->lib < 0 ? "" : o->lib == (int)DIVVY_FAST_ONLY ? " (libdivvy, fast path)"
                           : o->lib == (int)DIVVY_SOCKET_ONLY ? " (libdivvy, socket)"
                                                               : " (libdivvy, auto)");
    printf("connections      %u (depth %u, keys %lu, %.1f s)\n", o->conns, o->depth, o->keys,
           secs);
    printf("hits             %llu (allowed %llu, denied %llu)\n", (unsigned long long)hits,
           (unsigned long long)allowed, (unsigned long long)denied);
    printf("hits/s           %.0f\n", (double)hits / secs);
    printf("batch latency    p50 %.1f us, p99 %.1f us, p99.9 %.1f us, max %.1f us (%zu batches)\n",
           pct_us(all, n_all, 0.50), pct_us(all, n_all, 0.99), pct_us(all, n_all, 0.999),
           n_all ? (double)all[n_all - 1] / 1000.0 : 0.0, n_all);
    printf("errors           %llu ERR replies, %llu unexpected replies, "
           "%llu connection errors, %u connections refused\n",
           (unsigned long long)errs, (unsigned long long)other, (unsigned long long)conn_errs,
           failed);
out:
    if (th)
        for (unsigned i = 0; i < o->conns; i++)
            free(th[i].lat);
    free(th);
    free(all);
    if (ai)
        freeaddrinfo(ai);
    return r;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "unix", required_argument, NULL, 'U' },
        { "tcp", required_argument, NULL, 'T' },
        { "connections", required_argument, NULL, 'c' },
        { "depth", required_argument, NULL, 'd' },
        { "duration", required_argument, NULL, 't' },
        { "keys", required_argument, NULL, 'k' },
        { "pairs", required_argument, NULL, 'P' },
        { "actor-key", required_argument, NULL, 'A' },
        { "lib", required_argument, NULL, 'L' },
        { "shm", no_argument, NULL, 'S' },
        { "resp", no_argument, NULL, 'R' },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct bench_opts o = {
        .conns = 1, .depth = 1, .duration = 5.0, .keys = 10000,
        .pairs = "path=/bench", .actor_key = "actor", .lib = -1,
    };
    unsigned long v;
    char *end;
    int c, r;

    while ((c = getopt_long(argc, argv, "c:d:t:k:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'U':
            o.unix_path = optarg;
            break;
        case 'T':
            o.tcp_addr = optarg;
            break;
        case 'c':
            if (parse_uint(optarg, 1, BENCH_MAX_CONNS, &v) < 0)
                goto usage;
            o.conns = (unsigned)v;
            break;
        case 'd':
            if (parse_uint(optarg, 1, BENCH_MAX_DEPTH, &v) < 0)
                goto usage;
            o.depth = (unsigned)v;
            break;
        case 't':
            errno = 0;
            o.duration = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(o.duration > 0) || o.duration > 86400)
                goto usage;
            break;
        case 'k':
            if (parse_uint(optarg, 1, ULONG_MAX, &v) < 0)
                goto usage;
            o.keys = v;
            break;
        case 'P':
            o.pairs = optarg;
            break;
        case 'A':
            o.actor_key = optarg;
            break;
        case 'L':
            if (strcmp(optarg, "socket") == 0)
                o.lib = (int)DIVVY_SOCKET_ONLY;
            else if (strcmp(optarg, "fast") == 0)
                o.lib = (int)DIVVY_FAST_ONLY;
            else if (strcmp(optarg, "auto") == 0)
                o.lib = (int)DIVVY_AUTO;
            else
                goto usage;
            break;
        case 'S':
            o.lib = (int)DIVVY_FAST_ONLY;
            break;
        case 'R':
            o.resp = true;
            break;
        case 'q':
            o.quiet = true;
            break;
        case 'h':
            printf(bench_usage, BENCH_IO_TIMEOUT);
            return 0;
        default:
            goto usage;
        }
    }
    if (optind != argc || !o.unix_path == !o.tcp_addr || (o.resp && o.lib >= 0) ||
        strlen(o.pairs) + strlen(o.actor_key) + 32 > BENCH_LINE_MAX)
        goto usage;
    r = bench_run(&o);
    return r < 0 ? 1 : 0;
usage:
    fprintf(stderr, "usage: divvy-bench (--unix PATH | --tcp HOST:PORT) [-c N] [-d D] "
                    "[-t SECONDS] [-k K] [--lib socket|fast|auto] [-q]\n"
                    "       (divvy-bench --help for details)\n");
    return 2;
}
