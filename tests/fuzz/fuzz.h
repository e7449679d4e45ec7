/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the libFuzzer harnesses of tests/fuzz/: an invariant
 * check that aborts (so libFuzzer records the input), and a reader that
 * turns the fuzz input into small decisions.  A reader past the end of the
 * input yields zeros, so every input decodes to something.
 */
#ifndef DIVVY_FUZZ_H
#define DIVVY_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

struct fz {
    const uint8_t *p;
    size_t left;
};

static inline bool fz_empty(const struct fz *f)
{
    return f->left == 0;
}

static inline uint8_t fz_u8(struct fz *f)
{
    if (!f->left)
        return 0;
    f->left--;
    return *f->p++;
}

/* A number in [0, n) (n >= 1) from one or two bytes. */
static inline unsigned fz_below(struct fz *f, unsigned n)
{
    unsigned v = fz_u8(f);

    if (n > 256)
        v = v << 8 | fz_u8(f);
    return v % n;
}

static inline uint64_t fz_u64(struct fz *f)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | fz_u8(f);
    return v;
}

/* Up to @max raw bytes. */
static inline size_t fz_bytes(struct fz *f, void *buf, size_t max)
{
    size_t n = max < f->left ? max : f->left;

    memcpy(buf, f->p, n);
    f->p += n;
    f->left -= n;
    return n;
}

#endif
