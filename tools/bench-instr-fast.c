/* SPDX-License-Identifier: MIT */
/*
 * bench-instr-fast: the fast-path row of `make bench-instr`
 * (tools/bench-instr.sh, docs/dev/benchmarks.md).  One thread calls divvy_hit()
 * HITS times on one hot key of three pairs through a DIVVY_FAST_ONLY handle,
 * inside bench_instr_hot() alone, so that
 *
 *     valgrind --tool=callgrind --toggle-collect=bench_instr_hot \
 *         bench-instr-fast unix:PATH HITS
 *
 * counts the instructions of those calls and nothing else (start-up, the
 * table's mapping, the warm-up); their total divided by HITS is the row.
 * `bench-instr-fast --config` prints the divvyd configuration the row runs:
 * four fast_path rules and the default, the request matching the fourth, and
 * the caller's own group as server.fast_group and server.admin_group, so any
 * user may run it: libdivvy tries divvyd's privileged socket (PATH.root)
 * first, which a divvyd run by the same user lets that user reach, and serves
 * there only root and admins (docs/daemon.md "The privileged lane").
 * Every hit must be decided in-process: a hit that went to the socket, or
 * any error, fails the run rather than count a slower path.  Uses the public
 * divvy.h only.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <divvy.h>

#define FAST_RULES 4
#define FAST_WARMUP 1000

static const struct divvy_kv fast_kv[3] = {
    { "method", "GET" }, { "path", "/api/v1/res3" }, { "ip", "192.0.2.1" }
};

static void fast_print_config(void)
{
    const struct group *g = getgrgid(getgid());

    printf("# bench-instr-fast --config: %d fast_path rules and the default; the\n"
           "# request (method=GET path=/api/v1/res3 ip=192.0.2.1) matches the last.\n"
           "server = { fast_group = \"%u\"; ", FAST_RULES, (unsigned)getgid());
    if (g)
        printf("admin_group = \"%s\"; ", g->gr_name);
    printf("};\n"
           "table = { fast_slots = 65536; };\n"
           "rules = (\n");
    for (int i = 0; i < FAST_RULES; i++)
        printf("    { match = { method = \"GET\"; path = \"/api/v1/res%d\"; ip = \"*\"; };\n"
               "      label = \"api%d\"; credit_limit = 100000000000L; reset_seconds = 3600;\n"
               "      actor = \"ip\"; fast_path = true; },\n", i, i);
    printf("    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
           ");\n");
}

/* The measured calls: nothing but divvy_hit() and the check of its answer.
 * noinline, so callgrind's --toggle-collect finds it by name. */
__attribute__((noinline)) static int bench_instr_hot(struct divvy *h, long hits, long *in_process)
{
    struct divvy_result res = { .size = sizeof(res) };
    long fast = 0;
    int r = 0;

    for (long i = 0; i < hits && r >= 0; i++) {
        r = divvy_hit(h, fast_kv, 3, &res);
        fast += res.fast_path;
    }
    *in_process = fast;
    return r;
}

/* Until the first hit decided in-process (divvyd publishes the table after
 * it starts), at most 5 s; then FAST_WARMUP more.  0 or -errno. */
static int fast_warm_up(struct divvy *h)
{
    struct divvy_result res = { .size = sizeof(res) };
    struct timespec pause = { 0, 20 * 1000 * 1000 };
    int r;

    for (int i = 0; i < 250; i++) {
        r = divvy_hit(h, fast_kv, 3, &res);
        if (r == 0 && res.fast_path)
            break;
        nanosleep(&pause, NULL);
    }
    for (int i = 0; i < FAST_WARMUP; i++) {
        r = divvy_hit(h, fast_kv, 3, &res);
        if (r < 0)
            return r;
        if (!res.fast_path)
            return -ENOTSUP;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct divvy *h = NULL;
    long hits, fast = 0;
    char *end;
    int r;

    if (argc == 2 && strcmp(argv[1], "--config") == 0) {
        fast_print_config();
        return 0;
    }
    hits = argc == 3 ? strtol(argv[2], &end, 10) : 0;
    if (argc != 3 || hits <= 0 || *end) {
        fprintf(stderr, "usage: bench-instr-fast --config | bench-instr-fast unix:PATH HITS\n");
        return 2;
    }
    r = divvy_open(argv[1], DIVVY_FAST_ONLY, &h);
    if (r < 0) {
        fprintf(stderr, "bench-instr-fast: divvy_open(%s, DIVVY_FAST_ONLY): %s\n", argv[1],
                strerror(-r));
        return 1;
    }
    r = fast_warm_up(h);
    if (r == 0)
        r = bench_instr_hot(h, hits, &fast);
    if (r == 0 && fast != hits)
        r = -ENOTSUP;
    if (r < 0)
        fprintf(stderr, "bench-instr-fast: %s (%s); %ld of the hits in-process\n", strerror(-r),
                divvy_errmsg(h), fast);
    else
        printf("hits %ld\n", hits);
    divvy_close(h);
    return r < 0 ? 1 : 0;
}
