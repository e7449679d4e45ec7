/* SPDX-License-Identifier: MIT */
/*
 * Unit: daemon/memtrim.c, when memory goes back to the kernel after a flood.
 * malloc_trim() is a fake (-Wl,--wrap=malloc_trim) that counts the trims
 * its thread makes: none while what connections hold grows or falls a
 * little, trims on every tick once it fell by MEMTRIM_BYTES, until it has
 * not fallen for MEMTRIM_TICKS ticks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include "daemon/memtrim.h"

#define MIB (1ull << 20)

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

/* A tick with @held; then whether the thread trimmed: it must within 5 s
 * when @want, and must not have 50 ms later when not (the fake is counted
 * at once, so a late trim could only make this pass wrongly, never fail). */
static void tick(struct memtrim *m, uint64_t held, bool want)
{
    unsigned before = trims_now();
    struct timespec ms = { 0, 1000000 };

    memtrim_tick(m, held);
    for (int i = 0; i < (want ? 5000 : 50) && trims_now() == before; i++)
        nanosleep(&ms, NULL);
    if (want)
        assert_int_equal(trims_now(), before + 1);
    else
        assert_int_equal(trims_now(), before);
}

static void test_memtrim_after_a_fall(void **state)
{
    struct memtrim *m = NULL;

    (void)state;
    assert_int_equal(memtrim_new(&m), 0);
    tick(m, 10 * MIB, false);
    tick(m, 100 * MIB, false);
    tick(m, 90 * MIB, false);           /* 10 MiB: not enough */
    tick(m, 60 * MIB, true);            /* 40 MiB below the high */
    tick(m, 50 * MIB, true);            /* still falling */
    tick(m, 50 * MIB, true);            /* quiet 1 */
    tick(m, 51 * MIB, true);            /* quiet 2 */
    tick(m, 51 * MIB, false);           /* quiet 3: done */
    tick(m, 40 * MIB, false);           /* 20 MiB below 60: not enough */
    tick(m, 20 * MIB, true);            /* 40 MiB below it */
    memtrim_free(m);
}

static void test_memtrim_growth_never_trims(void **state)
{
    struct memtrim *m = NULL;

    (void)state;
    assert_int_equal(memtrim_new(&m), 0);
    for (uint64_t held = 0; held < 512 * MIB; held += 31 * MIB)
        tick(m, held, false);
    memtrim_free(m);
    memtrim_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memtrim_after_a_fall),
        cmocka_unit_test(test_memtrim_growth_never_trims),
    };

    return cmocka_run_group_tests_name("memtrim", tests, NULL, NULL);
}
