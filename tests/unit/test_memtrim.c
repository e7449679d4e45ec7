/* SPDX-License-Identifier: MIT */
/*
 * Unit: daemon/memtrim.c, when memory goes back to the kernel after a flood.
 * malloc_trim() is a fake (-Wl,--wrap=malloc_trim) that counts the trims
 * its thread makes: none while what the process holds is what connections
 * hold, one once it keeps MEMTRIM_BYTES more than that or connections hold
 * MEMTRIM_BYTES less, and the next only after MEMTRIM_BYTES more again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include "daemon/memtrim.h"

int __wrap_malloc_trim(size_t pad);

static unsigned trims;          /* atomic: the memtrim thread's */

int __wrap_malloc_trim(size_t pad)
{
    (void)pad;
    __atomic_fetch_add(&trims, 1, __ATOMIC_RELEASE);
    return 1;
}

static unsigned trims_now(void)
{
    return __atomic_load_n(&trims, __ATOMIC_ACQUIRE);
}

/* A tick with @anon and @held; then whether the thread trimmed: it must
 * within 5 s when @want, and must not have 50 ms later when not (the fake
 * is counted at once, so a late trim could only make this pass wrongly,
 * never fail); then that it is done. */
static void tick(struct memtrim *m, uint64_t anon, uint64_t held, bool want)
{
    unsigned before = trims_now();
    struct timespec ms = { 0, 1000000 };

    memtrim_tick(m, anon, held);
    for (int i = 0; i < (want ? 5000 : 50) && trims_now() == before; i++)
        nanosleep(&ms, NULL);
    if (want)
        assert_int_equal(trims_now(), before + 1);
    else
        assert_int_equal(trims_now(), before);
    /* The thread marks the trim done after making it. */
    for (int i = 0; i < 5000 && memtrim_busy(m); i++)
        nanosleep(&ms, NULL);
    assert_false(memtrim_busy(m));
}

static void test_memtrim_kept_memory(void **state)
{
    const uint64_t t = MEMTRIM_BYTES, h = MEMTRIM_BYTES / 2;
    struct memtrim *m = NULL;

    (void)state;
    assert_int_equal(memtrim_new(&m), 0);
    assert_true(memtrim_anon(m) > 0);
    tick(m, h, 0, false);
    /* A flood: connections hold what the process grew by. */
    tick(m, 6 * t, 5 * t, false);
    tick(m, 9 * t, 8 * t + h, false);           /* kept t/2: the least so far */
    /* Some close; malloc keeps their memory (what they hold has not fallen
     * by MEMTRIM_BYTES: the kept memory is the sign). */
    tick(m, 9 * t, 8 * t, false);
    tick(m, 10 * t, 8 * t + h, true);           /* kept 3t/2: t above the least */
    tick(m, 4 * t, 0, false);                   /* after the trim: 4t kept, in use */
    tick(m, 4 * t + h, 0, false);
    tick(m, 5 * t, 0, true);                    /* t more */
    /* A trim while connections are open takes what they use for kept; when
     * they close, what they held falling is the sign. */
    tick(m, 12 * t, 6 * t, false);              /* (after the trim: kept 6t) */
    tick(m, 13 * t, 7 * t, false);
    tick(m, 10 * t, 5 * t + h, true);           /* kept less; held 3t/2 below its most */
    tick(m, 0, 0, false);                       /* statm unreadable: nothing */
    memtrim_free(m);
    memtrim_free(NULL);
}

static void test_memtrim_growth_never_trims(void **state)
{
    const uint64_t t = MEMTRIM_BYTES;
    struct memtrim *m = NULL;

    (void)state;
    assert_int_equal(memtrim_new(&m), 0);
    /* Everything the process grows by, connections hold. */
    for (uint64_t held = 0; held < 32 * t; held += t - 1)
        tick(m, t + held, held, false);
    memtrim_free(m);
}

/* Connections that came and went before the first tick: what they left is
 * measured against the start, not taken for memory in use. */
static void test_memtrim_flood_before_first_tick(void **state)
{
    const uint64_t t = MEMTRIM_BYTES;
    struct memtrim *m = NULL;

    (void)state;
    assert_int_equal(memtrim_new(&m), 0);
    tick(m, memtrim_anon(m) + 3 * t, 0, true);
    memtrim_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memtrim_kept_memory),
        cmocka_unit_test(test_memtrim_growth_never_trims),
        cmocka_unit_test(test_memtrim_flood_before_first_tick),
    };

    return cmocka_run_group_tests_name("memtrim", tests, NULL, NULL);
}
