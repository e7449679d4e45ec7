/* SPDX-License-Identifier: MIT */
/*
 * fastrules: the daemon-only record of the fast_path rules of the generation
 * that owns the fast-path table (fastrules.h; its layout in docs/dev/shm.md
 * "Which counters leave the fast table"), kept sorted in memory and written
 * whole or not at all through persist.c.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "fastrules.h"
#include "persist.h"

#define FASTRULES_MAGIC     "DIVVYFR1"
#define FASTRULES_VERSION   1u

/* The file: this header, then n entries (struct fastrules_rule), native byte order. */
struct fastrules_hdr {
    char magic[8];
    uint32_t version;
    uint32_t n;
    uint64_t generation;
};
_Static_assert(sizeof(struct fastrules_hdr) == 24, "fast.rules header layout");
_Static_assert(sizeof(struct fastrules_rule) == 16, "fast.rules entry layout");

static int path_of(const char *state_dir, char *buf, size_t size)
{
    if (!state_dir)
        return -EINVAL;
    if ((size_t)snprintf(buf, size, "%s/%s", state_dir, FASTRULES_FILE) >= size)
        return -ENAMETOOLONG;
    return 0;
}

int fastrules_add(struct fastrules *fr, uint64_t id, enum rules_algo algo)
{
    struct fastrules_rule *grown;

    grown = array_grow(fr->v, fr->n, &fr->cap, sizeof(*grown), 16, RULES_MAX);
    if (!grown)
        return -ENOMEM;
    fr->v = grown;
    fr->v[fr->n++] = (struct fastrules_rule){ .id = id, .algo = (uint32_t)algo };
    return 0;
}

static int rule_cmp(const void *a, const void *b)
{
    const struct fastrules_rule *x = a, *y = b;

    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->algo < y->algo ? -1 : x->algo > y->algo;
}

void fastrules_sort(struct fastrules *fr)
{
    if (fr->n > 1)
        qsort(fr->v, fr->n, sizeof(*fr->v), rule_cmp);
}

bool fastrules_has(const struct fastrules *fr, uint64_t id, enum rules_algo algo)
{
    struct fastrules_rule key = { .id = id, .algo = (uint32_t)algo };

    return fr && fr->n && bsearch(&key, fr->v, fr->n, sizeof(*fr->v), rule_cmp) != NULL;
}

int fastrules_save(const char *state_dir, const struct fastrules *fr)
{
    struct fastrules_hdr h = { .version = FASTRULES_VERSION };
    char path[PATH_MAX];
    uint8_t *buf;
    size_t len;
    int r;

    if (!fr || fr->n > RULES_MAX)
        return -EINVAL;
    r = path_of(state_dir, path, sizeof(path));
    if (r < 0)
        return r;
    memcpy(h.magic, FASTRULES_MAGIC, sizeof(h.magic));
    h.n = (uint32_t)fr->n;
    h.generation = fr->generation;
    len = sizeof(h) + fr->n * sizeof(*fr->v);
    buf = malloc(len);
    if (!buf)
        return -ENOMEM;
    memcpy(buf, &h, sizeof(h));
    if (fr->n)
        memcpy(buf + sizeof(h), fr->v, fr->n * sizeof(*fr->v));
    r = persist_save(path, buf, len);
    free(buf);
    return r;
}

int fastrules_load(const char *state_dir, struct fastrules *ret)
{
    struct fastrules fr = { 0 };
    struct fastrules_hdr h;
    char path[PATH_MAX];
    void *buf = NULL;
    size_t len = 0;
    int r;

    if (!ret)
        return -EINVAL;
    r = path_of(state_dir, path, sizeof(path));
    if (r < 0)
        return r;
    r = persist_load_any(path, sizeof(h) + (size_t)RULES_MAX * sizeof(*fr.v), &buf, &len);
    if (r < 0)
        return r;
    r = -EBADMSG;
    if (len < sizeof(h))
        goto out;
    memcpy(&h, buf, sizeof(h));
    if (memcmp(h.magic, FASTRULES_MAGIC, sizeof(h.magic)) != 0 ||
        h.version != FASTRULES_VERSION || h.n > RULES_MAX ||
        len != sizeof(h) + (size_t)h.n * sizeof(*fr.v))
        goto out;
    fr.generation = h.generation;
    fr.n = fr.cap = h.n;
    fr.v = malloc(h.n ? h.n * sizeof(*fr.v) : 1);
    if (!fr.v) {
        r = -ENOMEM;
        goto out;
    }
    if (h.n)
        memcpy(fr.v, (const uint8_t *)buf + sizeof(h), h.n * sizeof(*fr.v));
    for (size_t i = 0; i < fr.n; i++)
        if (fr.v[i].zero != 0 || fr.v[i].algo > RULES_ALGO_LAST)
            goto out;
    fastrules_sort(&fr);
    *ret = fr;
    fr.v = NULL;
    r = 0;
out:
    free(fr.v);
    free(buf);
    return r;
}

int fastrules_forget(const char *state_dir)
{
    char path[PATH_MAX];
    int r;

    r = path_of(state_dir, path, sizeof(path));
    if (r < 0)
        return r;
    return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
}

void fastrules_free(struct fastrules *fr)
{
    if (!fr)
        return;
    free(fr->v);
    memset(fr, 0, sizeof(*fr));
}
