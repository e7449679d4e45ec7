/* SPDX-License-Identifier: MIT */
/*
 * array: see array.h.  Owns nothing: the caller keeps its array and count.
 */
#include <stdint.h>
#include <stdlib.h>

#include "array.h"

void *array_grow(void *items, size_t n, size_t *cap, size_t size, size_t first, size_t max)
{
    size_t want;
    void *grown;

    if (n < *cap)
        return items;
    want = *cap ? *cap * 2 : first;
    if (want > max || want < *cap || want > SIZE_MAX / size)
        return NULL;
    grown = realloc(items, want * size);
    if (!grown)
        return NULL;
    *cap = want;
    return grown;
}
