/* SPDX-License-Identifier: MIT */
/*
 * hit: the smallest libdivvy program.  Asks divvyd (DIVVY_ADDRESS, else the
 * default socket) for one credit of the request given as key=value
 * arguments and prints the answer:
 *
 *     $ hit method=GET path=/status
 *     allowed credit=999 reset=60s rule=status path=fast
 *
 * Exit status: 0 allowed, 1 denied, 2 error.  Build: cc hit.c $(pkg-config
 * --cflags --libs divvy).
 */
#include <stdio.h>
#include <string.h>

#include <divvy.h>

int main(int argc, char **argv)
{
    struct divvy_kv kv[DIVVY_MAX_KEYS];
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy *h = NULL;
    size_t n = 0;
    int r, rv = 2;

    for (int i = 1; i < argc; i++) {
        char *eq = strchr(argv[i], '=');

        if (!eq || n == DIVVY_MAX_KEYS) {
            fprintf(stderr, "usage: %s key=value... (at most %d)\n", argv[0], DIVVY_MAX_KEYS);
            return 2;
        }
        *eq = '\0';
        kv[n].key = argv[i];
        kv[n].value = eq + 1;
        n++;
    }
    r = divvy_open(NULL, DIVVY_AUTO, &h);
    if (r < 0) {
        fprintf(stderr, "divvy_open: %s\n", strerror(-r));
        goto out;
    }
    r = divvy_hit(h, kv, n, &res);
    if (r < 0) {
        fprintf(stderr, "divvy_hit: %s (%s)\n", strerror(-r), divvy_errmsg(h));
        goto out;
    }
    printf("%s credit=%llu reset=%llus rule=%s path=%s\n", res.allowed ? "allowed" : "denied",
           (unsigned long long)res.credit, (unsigned long long)res.reset_seconds,
           res.rule[0] ? res.rule : "-", res.fast_path ? "fast" : "socket");
    rv = res.allowed ? 0 : 1;
out:
    divvy_close(h);
    return rv;
}
