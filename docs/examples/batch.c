/* SPDX-License-Identifier: MIT */
/*
 * batch: divvy_hit_many() for high-rate callers.  Reads one request per
 * line from stdin ("key=value key=value ..."; an optional leading number is
 * the amount to take), sends them in batches of up to 256 (fast-path
 * requests are decided in-process, the others pipelined in one write) and
 * prints one answer per line, in order:
 *
 *     $ printf 'path=/a user=x\n3 path=/b\n' | batch
 *     allowed 9 60 rule-a fast
 *     denied 0 12 rule-b socket
 *
 * Exit status: 0, or 2 on an error.  Build: cc batch.c $(pkg-config --cflags
 * --libs divvy).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <divvy.h>

#define BATCH 256

struct line {
    char text[4096];
    struct divvy_kv kv[DIVVY_MAX_KEYS];
};

/* Splits @l->text into pairs; returns the pair count or -1. */
static int parse(struct line *l, unsigned long long *ret_amount)
{
    char *save = NULL, *tok;
    int n = 0;

    *ret_amount = 0;
    for (tok = strtok_r(l->text, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
        char *eq = strchr(tok, '=');

        if (!eq && n == 0 && *ret_amount == 0) {
            *ret_amount = strtoull(tok, NULL, 10);
            continue;
        }
        if (!eq || n == DIVVY_MAX_KEYS)
            return -1;
        *eq = '\0';
        l->kv[n].key = tok;
        l->kv[n].value = eq + 1;
        n++;
    }
    return n;
}

static int flush(struct divvy *h, const struct divvy_request *reqs, size_t n,
                 struct divvy_result *res)
{
    int r = divvy_hit_many(h, reqs, n, res);

    if (r < 0) {
        fprintf(stderr, "divvy_hit_many: %s (%s)\n", strerror(-r), divvy_errmsg(h));
        return r;
    }
    for (size_t i = 0; i < n; i++)
        printf("%s %llu %llu %s %s\n", res[i].allowed ? "allowed" : "denied",
               (unsigned long long)res[i].credit, (unsigned long long)res[i].reset_seconds,
               res[i].rule[0] ? res[i].rule : "-", res[i].fast_path ? "fast" : "socket");
    return 0;
}

int main(void)
{
    static struct line lines[BATCH];
    static struct divvy_request reqs[BATCH];
    static struct divvy_result res[BATCH];
    struct divvy *h = NULL;
    size_t n = 0;
    int r, rv = 2;

    r = divvy_open(NULL, DIVVY_AUTO, &h);
    if (r < 0) {
        fprintf(stderr, "divvy_open: %s\n", strerror(-r));
        return 2;
    }
    while (fgets(lines[n].text, sizeof(lines[n].text), stdin)) {
        unsigned long long amount;
        int k = parse(&lines[n], &amount);

        if (k < 0) {
            fprintf(stderr, "bad line: expected [amount] key=value...\n");
            goto out;
        }
        reqs[n] = (struct divvy_request){ .amount = amount, .kv = lines[n].kv, .n_kv = (size_t)k };
        res[n].size = sizeof(res[n]);
        if (++n == BATCH) {
            if (flush(h, reqs, n, res) < 0)
                goto out;
            n = 0;
        }
    }
    if (n > 0 && flush(h, reqs, n, res) < 0)
        goto out;
    rv = 0;
out:
    divvy_close(h);
    return rv;
}
