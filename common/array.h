/* SPDX-License-Identifier: MIT */
/*
 * array: growing a malloc'd array by doubling, the one way the config
 * parsers, divvyd's counter scans and divvy-bench append to their arrays.
 * No global state, thread-safe, never logs.
 */
#ifndef DIVVY_ARRAY_H
#define DIVVY_ARRAY_H

#include <stddef.h>

/*
 * Room for one more element in the array @items holding @n elements of
 * @size bytes, *@cap allocated: returns the array, reallocated with *@cap
 * doubled (@first when 0) when it was full.  NULL when out of memory or when
 * the new capacity would pass @max elements; then @items and *@cap are
 * unchanged and still the caller's.
 */
void *array_grow(void *items, size_t n, size_t *cap, size_t size, size_t first, size_t max);

#endif
