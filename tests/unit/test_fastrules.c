/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/fastrules.c: the record of the fast_path rules of
 * the generation that owns the fast table (docs/dev/shm.md "Which counters
 * leave the fast table") survives a save and a load exactly; a record that
 * is not one (another magic, version, size, count, or an entry with a bad
 * algorithm or reserved bits) is refused, never half-trusted; forgetting it
 * leaves none.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "daemon/fastrules.h"

struct fixture {
    char dir[64];
    char path[128];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (!f)
        return -1;
    strcpy(f->dir, "/tmp/divvy-test-fastrules-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, FASTRULES_FILE);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static void save_three(const struct fixture *f)
{
    struct fastrules fr = { .generation = 1234567 };

    /* Out of order: the record is sorted when loaded. */
    assert_int_equal(fastrules_add(&fr, 30, RULES_ALGO_WINDOW), 0);
    assert_int_equal(fastrules_add(&fr, 10, RULES_ALGO_SLIDING_WINDOW), 0);
    assert_int_equal(fastrules_add(&fr, 10, RULES_ALGO_TOKEN_BUCKET), 0);
    assert_int_equal(fastrules_save(f->dir, &fr), 0);
    fastrules_free(&fr);
}

static void test_fastrules_round_trip(void **state)
{
    struct fixture *f = *state;
    struct fastrules fr = { 0 };
    struct stat st;

    assert_int_equal(fastrules_load(f->dir, &fr), -ENOENT);
    save_three(f);
    assert_int_equal(stat(f->path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_size, 24 + 3 * 16);
    assert_int_equal(fastrules_load(f->dir, &fr), 0);
    assert_int_equal(fr.generation, 1234567);
    assert_int_equal(fr.n, 3);
    assert_true(fastrules_has(&fr, 30, RULES_ALGO_WINDOW));
    assert_true(fastrules_has(&fr, 10, RULES_ALGO_TOKEN_BUCKET));
    assert_true(fastrules_has(&fr, 10, RULES_ALGO_SLIDING_WINDOW));
    assert_false(fastrules_has(&fr, 10, RULES_ALGO_WINDOW));
    assert_false(fastrules_has(&fr, 20, RULES_ALGO_WINDOW));
    fastrules_free(&fr);
    assert_int_equal(fr.n, 0);

    /* An empty set is a record too (no rule is fast_path). */
    assert_int_equal(fastrules_save(f->dir, &fr), 0);
    assert_int_equal(fastrules_load(f->dir, &fr), 0);
    assert_int_equal(fr.n, 0);
    assert_false(fastrules_has(&fr, 30, RULES_ALGO_WINDOW));
    fastrules_free(&fr);

    assert_int_equal(fastrules_forget(f->dir), 0);
    assert_int_equal(fastrules_load(f->dir, &fr), -ENOENT);
    assert_int_equal(fastrules_forget(f->dir), 0);
}

/* Overwrites @len bytes at @off of the record. */
static void poke(const struct fixture *f, off_t off, const void *bytes, size_t len)
{
    int fd = open(f->path, O_WRONLY);

    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, len, off), (ssize_t)len);
    close(fd);
}

static void expect_refused(const struct fixture *f, const char *what)
{
    struct fastrules fr = { .generation = 99 };

    if (fastrules_load(f->dir, &fr) != -EBADMSG)
        fail_msg("a record with %s was not refused", what);
    assert_int_equal(fr.generation, 99);        /* untouched */
    save_three(f);
}

static void test_fastrules_refuses(void **state)
{
    struct fixture *f = *state;
    uint32_t v;

    save_three(f);
    poke(f, 0, "DIVVYFR2", 8);
    expect_refused(f, "another magic");
    v = 2;
    poke(f, 8, &v, 4);
    expect_refused(f, "another version");
    v = 4;
    poke(f, 12, &v, 4);
    expect_refused(f, "a count past its end");
    v = 2;
    poke(f, 12, &v, 4);
    expect_refused(f, "a count short of its end");
    v = RULES_ALGO_LAST + 1;
    poke(f, 24 + 8, &v, 4);
    expect_refused(f, "an unknown algorithm");
    v = 1;
    poke(f, 24 + 12, &v, 4);
    expect_refused(f, "reserved bits set");
    assert_int_equal(truncate(f->path, 20), 0);
    expect_refused(f, "a cut header");
    assert_int_equal(truncate(f->path, 24 + 3 * 16 + 1), 0);
    expect_refused(f, "a byte too many");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fastrules_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fastrules_refuses, setup, teardown),
    };

    return cmocka_run_group_tests_name("fastrules", tests, NULL, NULL);
}
