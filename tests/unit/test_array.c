/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for common/array.c: array_grow() leaves an array with room
 * alone, starts a full one at @first and doubles it, keeps what it held,
 * and refuses (NULL, array and capacity unchanged) past @max elements or
 * when the size in bytes would overflow.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "array.h"

static void test_array_grow_doubles_and_keeps(void **state)
{
    uint32_t *v = NULL, *grown;
    size_t n = 0, cap = 0;

    (void)state;
    for (uint32_t i = 0; i < 1000; i++) {
        grown = array_grow(v, n, &cap, sizeof(*v), 4, SIZE_MAX);
        assert_non_null(grown);
        v = grown;
        v[n++] = i * 3;
        /* 4, 8, 16, ...: the smallest such capacity that holds them. */
        assert_true(cap >= n && (cap == 4 || cap / 2 < n));
    }
    assert_int_equal(cap, 1024);
    for (uint32_t i = 0; i < 1000; i++)
        assert_int_equal(v[i], i * 3);
    /* Room left: the same array, the same capacity. */
    assert_ptr_equal(array_grow(v, 999, &cap, sizeof(*v), 4, SIZE_MAX), v);
    assert_int_equal(cap, 1024);
    free(v);
}

static void test_array_grow_refuses_past_max(void **state)
{
    uint64_t *v = NULL;
    size_t cap = 0;

    (void)state;
    v = array_grow(v, 0, &cap, sizeof(*v), 8, 16);
    assert_non_null(v);
    assert_int_equal(cap, 8);
    v = array_grow(v, 8, &cap, sizeof(*v), 8, 16);
    assert_non_null(v);
    assert_int_equal(cap, 16);
    /* 32 would pass max: NULL, and the caller still owns 16. */
    assert_null(array_grow(v, 16, &cap, sizeof(*v), 8, 16));
    assert_int_equal(cap, 16);
    free(v);
}

static void test_array_grow_refuses_overflow(void **state)
{
    size_t cap = SIZE_MAX / 2 + 1;
    char c;

    (void)state;
    /* Doubling would wrap: refused before any realloc. */
    assert_null(array_grow(&c, cap, &cap, 1, 8, SIZE_MAX));
    assert_int_equal(cap, SIZE_MAX / 2 + 1);
    cap = SIZE_MAX / 16;
    assert_null(array_grow(&c, cap, &cap, 64, 8, SIZE_MAX));
    assert_int_equal(cap, SIZE_MAX / 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_grow_doubles_and_keeps),
        cmocka_unit_test(test_array_grow_refuses_past_max),
        cmocka_unit_test(test_array_grow_refuses_overflow),
    };

    return cmocka_run_group_tests_name("array", tests, NULL, NULL);
}
