/* SPDX-License-Identifier: MIT */
/*
 * fleet_hit: one host's load for tests/fleet/check-fleet.sh.  Sends HITs
 * with fixed pairs plus an actor ACTOR_PREFIX0 .. ACTOR_PREFIX(A-1), N per
 * actor, from T threads (each pausing INTERVAL_US between its hits, so a
 * load can span a failover) (one handle each; a handle belongs to one thread),
 * through libdivvy (--path socket|auto|fast) or, with --raw, as protocol
 * lines written on a plain TCP or Unix socket.  Prints one line:
 *
 *   allowed A denied D errors E fast F max_ms M
 *
 * where M is the longest single hit in milliseconds: the fleet test bounds
 * the wait of a hit while Redis is away.  Exit 0 when every hit was sent
 * (whatever the answers), 1 when a handle or socket could not be had, 2 on
 * a usage error.  Errors are counted, and the first one printed on stderr.
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <divvy.h>

#include "fdio.h"

#define FH_MAX_THREADS 32
#define FH_MAX_PAIRS   16

struct fh_opts {
    const char *address;
    unsigned flags;
    int raw;
    unsigned threads;
    unsigned long per_actor;
    unsigned long actors;
    const char *actor_key;
    const char *actor_prefix;
    struct divvy_kv pairs[FH_MAX_PAIRS];
    size_t n_pairs;
    int timeout_ms;
    unsigned long interval_us;  /* pause between two hits of a thread */
};

struct fh_thread {
    const struct fh_opts *o;
    unsigned index;
    pthread_t tid;
    unsigned long allowed, denied, errors, fast;
    double max_ms;
    int setup;              /* < 0: no handle or socket at all */
    char first_error[256];
};

static double fh_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void fh_error(struct fh_thread *t, const char *what)
{
    t->errors++;
    if (!t->first_error[0])
        snprintf(t->first_error, sizeof(t->first_error), "%.200s", what);
}

/* A plain socket to "unix:PATH" or "tcp:HOST:PORT" (IPv4 or a name). */
static int fh_raw_connect(const char *address)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
    char host[256];
    const char *port;
    int fd = -1, r;

    if (strncmp(address, "unix:", 5) == 0) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };

        if (strlen(address + 5) >= sizeof(sa.sun_path))
            return -ENAMETOOLONG;
        strcpy(sa.sun_path, address + 5);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            r = -errno;
            goto out;
        }
        return fd;
    }
    if (strncmp(address, "tcp:", 4) != 0 || !(port = strrchr(address + 4, ':')) ||
        (size_t)(port - (address + 4)) >= sizeof(host))
        return -EINVAL;
    memcpy(host, address + 4, (size_t)(port - (address + 4)));
    host[port - (address + 4)] = '\0';
    r = getaddrinfo(host, port + 1, &hints, &ai);
    if (r != 0)
        return -EHOSTUNREACH;
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        r = -errno;
        goto out;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        r = -errno;
        goto out;
    }
    freeaddrinfo(ai);
    return fd;
out:
    if (ai)
        freeaddrinfo(ai);
    if (fd >= 0)
        close(fd);
    return r;
}

/* One HIT line, one reply line ("OK true|false ..." or "ERR ..."). */
static int fh_raw_hit(int fd, const char *line, char *reply, size_t size)
{
    size_t got = 0;
    int r = fdio_write_all(fd, line, strlen(line));

    if (r < 0)
        return r;
    while (got + 1 < size) {
        ssize_t n = read(fd, reply + got, 1);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -ECONNRESET;
        if (reply[got] == '\n')
            break;
        got++;
    }
    reply[got] = '\0';
    return 0;
}

static void *fh_run(void *arg)
{
    struct fh_thread *t = arg;
    const struct fh_opts *o = t->o;
    struct divvy_kv kv[FH_MAX_PAIRS + 1];
    struct divvy *h = NULL;
    char actor[128], line[2048], reply[512];
    unsigned long total = o->per_actor * (o->actors ? o->actors : 1);
    int fd = -1, r;

    if (o->raw) {
        fd = fh_raw_connect(o->address);
        if (fd < 0) {
            t->setup = fd;
            snprintf(t->first_error, sizeof(t->first_error), "connect %s: %s", o->address,
                     strerror(-fd));
            return NULL;
        }
    } else {
        r = divvy_open(o->address, o->flags, &h);
        if (r < 0) {
            t->setup = r;
            snprintf(t->first_error, sizeof(t->first_error), "divvy_open %s: %s", o->address,
                     strerror(-r));
            return NULL;
        }
        divvy_set_timeouts(h, o->timeout_ms, o->timeout_ms);
    }
    memcpy(kv, o->pairs, o->n_pairs * sizeof(kv[0]));
    for (unsigned long j = t->index; j < total; j += o->threads) {
        struct divvy_result res = { .size = sizeof(res) };
        size_t n_kv = o->n_pairs;
        double start;

        if (o->actors) {
            snprintf(actor, sizeof(actor), "%s%lu", o->actor_prefix, j % o->actors);
            kv[n_kv].key = o->actor_key;
            kv[n_kv].value = actor;
            n_kv++;
        }
        start = fh_now_ms();
        if (o->raw) {
            size_t len = (size_t)snprintf(line, sizeof(line), "HIT");

            for (size_t i = 0; i < n_kv && len < sizeof(line); i++)
                len += (size_t)snprintf(line + len, sizeof(line) - len, " %s=%s", kv[i].key,
                                        kv[i].value);
            if (len + 2 > sizeof(line)) {
                fh_error(t, "request line too long");
                continue;
            }
            strcpy(line + len, "\n");
            r = fh_raw_hit(fd, line, reply, sizeof(reply));
            if (r < 0) {
                fh_error(t, strerror(-r));
                break;
            }
            if (strncmp(reply, "OK true", 7) == 0)
                t->allowed++;
            else if (strncmp(reply, "OK false", 8) == 0)
                t->denied++;
            else
                fh_error(t, reply);
        } else {
            r = divvy_hit(h, kv, n_kv, &res);
            if (r < 0) {
                fh_error(t, divvy_errmsg(h));
            } else {
                if (res.allowed)
                    t->allowed++;
                else
                    t->denied++;
                if (res.fast_path)
                    t->fast++;
            }
        }
        if (fh_now_ms() - start > t->max_ms)
            t->max_ms = fh_now_ms() - start;
        if (o->interval_us)
            usleep((useconds_t)o->interval_us);
    }
    if (fd >= 0)
        close(fd);
    divvy_close(h);
    return NULL;
}

static void fh_usage(FILE *f)
{
    fprintf(f,
            "Usage: fleet_hit ADDRESS [-t THREADS] [-n PER_ACTOR] [-a ACTORS]\n"
            "                 [-k ACTOR_KEY] [-p ACTOR_PREFIX] [--path socket|auto|fast]\n"
            "                 [-i INTERVAL_US] [--raw] [--timeout MS] KEY=VALUE...\n");
}

static int fh_parse(int argc, char **argv, struct fh_opts *o)
{
    static const struct option longs[] = {
        { "path", required_argument, NULL, 'P' },
        { "raw", no_argument, NULL, 'R' },
        { "timeout", required_argument, NULL, 'T' },
        { NULL, 0, NULL, 0 },
    };
    int c;

    while ((c = getopt_long(argc, argv, "t:n:a:k:p:i:", longs, NULL)) != -1) {
        switch (c) {
        case 't':
            o->threads = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'n':
            o->per_actor = strtoul(optarg, NULL, 10);
            break;
        case 'a':
            o->actors = strtoul(optarg, NULL, 10);
            break;
        case 'k':
            o->actor_key = optarg;
            break;
        case 'p':
            o->actor_prefix = optarg;
            break;
        case 'i':
            o->interval_us = strtoul(optarg, NULL, 10);
            break;
        case 'P':
            if (strcmp(optarg, "socket") == 0)
                o->flags = DIVVY_SOCKET_ONLY;
            else if (strcmp(optarg, "auto") == 0)
                o->flags = DIVVY_AUTO;
            else if (strcmp(optarg, "fast") == 0)
                o->flags = DIVVY_FAST_ONLY;
            else
                return -EINVAL;
            break;
        case 'R':
            o->raw = 1;
            break;
        case 'T':
            o->timeout_ms = atoi(optarg);
            break;
        default:
            return -EINVAL;
        }
    }
    if (optind >= argc || o->threads < 1 || o->threads > FH_MAX_THREADS || o->timeout_ms < 1)
        return -EINVAL;
    o->address = argv[optind++];
    for (; optind < argc; optind++) {
        char *eq = strchr(argv[optind], '=');

        if (!eq || eq == argv[optind] || o->n_pairs == FH_MAX_PAIRS)
            return -EINVAL;
        *eq = '\0';
        o->pairs[o->n_pairs].key = argv[optind];
        o->pairs[o->n_pairs].value = eq + 1;
        o->n_pairs++;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct fh_opts o = {
        .flags = DIVVY_SOCKET_ONLY, .threads = 1, .per_actor = 1, .actors = 0,
        .actor_key = "actor", .actor_prefix = "a", .timeout_ms = 5000,
    };
    struct fh_thread t[FH_MAX_THREADS];
    unsigned long allowed = 0, denied = 0, errors = 0, fast = 0;
    double max_ms = 0;
    int status = 0;

    if (fh_parse(argc, argv, &o) < 0) {
        fh_usage(stderr);
        return 2;
    }
    memset(t, 0, sizeof(t));
    for (unsigned i = 0; i < o.threads; i++) {
        t[i].o = &o;
        t[i].index = i;
        if (pthread_create(&t[i].tid, NULL, fh_run, &t[i]) != 0) {
            fprintf(stderr, "fleet_hit: cannot start a thread\n");
            return 1;
        }
    }
    for (unsigned i = 0; i < o.threads; i++) {
        pthread_join(t[i].tid, NULL);
        allowed += t[i].allowed;
        denied += t[i].denied;
        errors += t[i].errors;
        fast += t[i].fast;
        if (t[i].max_ms > max_ms)
            max_ms = t[i].max_ms;
        if (t[i].setup < 0)
            status = 1;
        if (t[i].first_error[0])
            fprintf(stderr, "fleet_hit: thread %u: %s\n", i, t[i].first_error);
    }
    printf("allowed %lu denied %lu errors %lu fast %lu max_ms %.1f\n", allowed, denied, errors,
           fast, max_ms);
    return status;
}
