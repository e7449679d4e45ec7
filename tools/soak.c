/* SPDX-License-Identifier: MIT */
/*
 * divvy-soak: libdivvy load for tools/soak.sh.  N threads, each with its own
 * handle (a handle belongs to one thread), send HITs with fixed pairs plus
 * an actor drawn from a key space, through the public API only, until the
 * duration is over; every REOPEN hits a thread closes its handle and opens a
 * new one, so a long run also exercises connect/map/unmap/close.  Prints one
 * line: "hits H allowed A fast F errors E", and the first error on stderr.
 * The exit status is 0 unless no handle could be opened at all: errors are
 * counted and reported, and the soak decides what they mean.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <divvy.h>

#define SOAK_MAX_THREADS 64
#define SOAK_MAX_PAIRS   16
#define SOAK_REOPEN      50000

struct soak_opts {
    const char *address;
    unsigned flags;
    unsigned threads;
    double seconds;
    unsigned long keys;
    struct divvy_kv pairs[SOAK_MAX_PAIRS];
    size_t n_pairs;
    const char *actor_key;
};

struct soak_thread {
    const struct soak_opts *o;
    pthread_t tid;
    unsigned id;
    uint64_t hits, allowed, fast, errors, opens;
    char err[256];
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void soak_error(struct soak_thread *t, const char *what, int r, struct divvy *h)
{
    if (t->errors++ == 0)
        snprintf(t->err, sizeof(t->err), "%s: %s (%s)", what, strerror(-r),
                 h ? divvy_errmsg(h) : "no handle");
}

static void *soak_run(void *arg)
{
    struct soak_thread *t = arg;
    const struct soak_opts *o = t->o;
    struct divvy_kv kv[SOAK_MAX_PAIRS + 1];
    struct divvy_result res = { .size = sizeof(res) };
    uint64_t seed = 0x9e3779b97f4a7c15ull * (t->id + 1);
    double deadline = now_s() + o->seconds;
    struct divvy *h = NULL;
    char actor[32];
    uint64_t n = 0;
    int r;

    memcpy(kv, o->pairs, o->n_pairs * sizeof(kv[0]));
    kv[o->n_pairs].key = o->actor_key;
    kv[o->n_pairs].value = actor;
    for (;;) {
        if ((n & 255) == 0 && now_s() >= deadline)
            break;
        if (!h || n % SOAK_REOPEN == 0) {
            divvy_close(h);
            h = NULL;
            r = divvy_open(o->address, o->flags, &h);
            if (r < 0) {
                soak_error(t, "divvy_open", r, NULL);
                h = NULL;
                /* A daemon that is gone stays gone for the soak: do not spin. */
                nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
                n++;
                continue;
            }
            t->opens++;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        snprintf(actor, sizeof(actor), "a%lu", (unsigned long)(seed % o->keys));
        r = divvy_hit(h, kv, o->n_pairs + 1, &res);
        n++;
        if (r < 0) {
            soak_error(t, "divvy_hit", r, h);
            continue;
        }
        t->hits++;
        t->allowed += res.allowed != 0;
        t->fast += res.fast_path != 0;
    }
    divvy_close(h);
    return NULL;
}

/* "k=v k=v" into o->pairs; the string is modified in place and kept. */
static int parse_pairs(char *s, struct soak_opts *o)
{
    char *save = NULL;

    for (char *tok = strtok_r(s, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');

        if (!eq || eq == tok || o->n_pairs == SOAK_MAX_PAIRS)
            return -EINVAL;
        *eq = '\0';
        o->pairs[o->n_pairs].key = tok;
        o->pairs[o->n_pairs].value = eq + 1;
        o->n_pairs++;
    }
    return 0;
}

static const char soak_usage[] =
    "usage: divvy-soak --address ADDR [--path fast|socket|auto] [-c THREADS] [-t SECONDS]\n"
    "                  [-k KEYS] [--pairs \"k=v ...\"] [--actor-key KEY]\n";

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "address", required_argument, NULL, 'a' },
        { "path", required_argument, NULL, 'p' },
        { "pairs", required_argument, NULL, 'P' },
        { "actor-key", required_argument, NULL, 'A' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct soak_opts o = { .threads = 1, .seconds = 10, .keys = 1000, .actor_key = "actor" };
    struct soak_thread *t;
    uint64_t hits = 0, allowed = 0, fast = 0, errors = 0, opens = 0;
    const char *first_err = NULL;
    char *pairs = NULL;
    int c;

    while ((c = getopt_long(argc, argv, "c:t:k:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'a':
            o.address = optarg;
            break;
        case 'p':
            if (strcmp(optarg, "fast") == 0)
                o.flags = DIVVY_FAST_ONLY;
            else if (strcmp(optarg, "socket") == 0)
                o.flags = DIVVY_SOCKET_ONLY;
            else if (strcmp(optarg, "auto") == 0)
                o.flags = DIVVY_AUTO;
            else
                goto usage;
            break;
        case 'P':
            pairs = optarg;
            break;
        case 'A':
            o.actor_key = optarg;
            break;
        case 'c':
            o.threads = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 't':
            o.seconds = strtod(optarg, NULL);
            break;
        case 'k':
            o.keys = strtoul(optarg, NULL, 10);
            break;
        case 'h':
            fputs(soak_usage, stdout);
            return 0;
        default:
            goto usage;
        }
    }
    if (optind != argc || !o.address || o.threads == 0 || o.threads > SOAK_MAX_THREADS ||
        o.keys == 0 || !(o.seconds > 0) || (pairs && parse_pairs(pairs, &o) < 0))
        goto usage;

    t = calloc(o.threads, sizeof(*t));
    if (!t) {
        fprintf(stderr, "divvy-soak: out of memory\n");
        return 1;
    }
    for (unsigned i = 0; i < o.threads; i++) {
        t[i].o = &o;
        t[i].id = i;
        if (pthread_create(&t[i].tid, NULL, soak_run, &t[i]) != 0) {
            fprintf(stderr, "divvy-soak: pthread_create failed\n");
            return 1;
        }
    }
    for (unsigned i = 0; i < o.threads; i++) {
        pthread_join(t[i].tid, NULL);
        hits += t[i].hits;
        allowed += t[i].allowed;
        fast += t[i].fast;
        errors += t[i].errors;
        opens += t[i].opens;
        if (!first_err && t[i].err[0])
            first_err = t[i].err;
    }
    printf("hits %llu allowed %llu fast %llu errors %llu\n", (unsigned long long)hits,
           (unsigned long long)allowed, (unsigned long long)fast, (unsigned long long)errors);
    if (first_err)
        fprintf(stderr, "divvy-soak: first error: %s\n", first_err);
    free(t);
    return opens ? 0 : 1;

usage:
    fputs(soak_usage, stderr);
    return 2;
}
