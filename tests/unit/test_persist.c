/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/persist.c on a real filesystem: a save replaces the
 * file atomically with a 0600 one and leaves no temp file; a load fills the
 * buffer only from a regular file of exactly the expected size (-ENOENT,
 * -EBADMSG otherwise, the buffer untouched); a save that fails part-way
 * (a short write, then EFBIG, under RLIMIT_FSIZE) keeps the old file and
 * removes its temp file; persist_load_any() reads any size up to its bound.
 * The module is linked from libdivvyd.a, as divvyd links it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "daemon/persist.h"

struct fixture {
    char dir[64];
    char path[128];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (!f)
        return -1;
    strcpy(f->dir, "/tmp/divvy-test-persist-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof(f->path), "%s/state", f->dir);
    *state = f;
    return 0;
}

/* Entries in the directory other than "." and "..". */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
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

static void test_persist_round_trip(void **state)
{
    struct fixture *f = *state;
    uint64_t out[4] = { 1, 2, 3, 0xdeadbeefcafef00dULL }, in[4] = { 0 };
    struct stat st;
    mode_t old = umask(0);

    assert_int_equal(persist_save(f->path, out, sizeof(out)), 0);
    umask(old);
    assert_int_equal(stat(f->path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    /* Private to divvyd whatever the umask. */
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_size, sizeof(out));
    assert_int_equal(persist_load(f->path, in, sizeof(in)), 0);
    assert_memory_equal(in, out, sizeof(out));

    /* A second save replaces the first; no temp file is left beside it. */
    out[0] = 42;
    assert_int_equal(persist_save(f->path, out, sizeof(out)), 0);
    assert_int_equal(persist_load(f->path, in, sizeof(in)), 0);
    assert_int_equal(in[0], 42);
    assert_int_equal(count_entries(f->dir), 1);

    /* Empty is a size like any other. */
    assert_int_equal(persist_save(f->path, NULL, 0), 0);
    assert_int_equal(persist_load(f->path, NULL, 0), 0);
    assert_int_equal(persist_save(f->path, NULL, 1), -EINVAL);
    assert_int_equal(persist_load(f->path, NULL, 1), -EINVAL);
}

static void test_persist_load_refuses(void **state)
{
    struct fixture *f = *state;
    char other[160];
    uint8_t buf[16], want[16];
    int fd;

    memset(buf, 0x5a, sizeof(buf));
    memcpy(want, buf, sizeof(buf));
    assert_int_equal(persist_load(f->path, buf, sizeof(buf)), -ENOENT);

    /* Other sizes: shorter, longer. */
    assert_int_equal(persist_save(f->path, "0123456789", 10), 0);
    assert_int_equal(persist_load(f->path, buf, sizeof(buf)), -EBADMSG);
    assert_int_equal(persist_save(f->path, "0123456789abcdefXYZ", 19), 0);
    assert_int_equal(persist_load(f->path, buf, sizeof(buf)), -EBADMSG);
    assert_memory_equal(buf, want, sizeof(buf));

    /* Not a regular file: a directory, and a FIFO that must not block. */
    snprintf(other, sizeof(other), "%s/dir", f->dir);
    assert_int_equal(mkdir(other, 0700), 0);
    assert_int_equal(persist_load(other, buf, 0), -EBADMSG);
    snprintf(other, sizeof(other), "%s/fifo", f->dir);
    assert_int_equal(mkfifo(other, 0600), 0);
    assert_int_equal(persist_load(other, buf, 0), -EBADMSG);
    assert_memory_equal(buf, want, sizeof(buf));

    /* A missing directory is a missing file. */
    snprintf(other, sizeof(other), "%s/nodir/state", f->dir);
    assert_int_equal(persist_load(other, buf, sizeof(buf)), -ENOENT);

    /* Exactly the size loads. */
    fd = open(f->path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "ABCDEFGHIJKLMNOP", 16), 16);
    close(fd);
    assert_int_equal(persist_load(f->path, buf, sizeof(buf)), 0);
    assert_memory_equal(buf, "ABCDEFGHIJKLMNOP", 16);
}

/* persist_load_any(): any size up to the bound, the same refusals. */
static void test_persist_load_any(void **state)
{
    struct fixture *f = *state;
    void *buf = (void *)&buf;
    size_t len = 99;
    char other[160];

    assert_int_equal(persist_load_any(f->path, 64, &buf, &len), -ENOENT);
    assert_int_equal(persist_save(f->path, "0123456789", 10), 0);
    assert_int_equal(persist_load_any(f->path, 9, &buf, &len), -EBADMSG);
    assert_true(buf == (void *)&buf && len == 99);      /* untouched */
    assert_int_equal(persist_load_any(f->path, 10, &buf, &len), 0);
    assert_int_equal(len, 10);
    assert_memory_equal(buf, "0123456789", 10);
    free(buf);
    assert_int_equal(persist_save(f->path, NULL, 0), 0);
    assert_int_equal(persist_load_any(f->path, 10, &buf, &len), 0);
    assert_non_null(buf);
    assert_int_equal(len, 0);
    free(buf);
    snprintf(other, sizeof(other), "%s/fifo", f->dir);
    assert_int_equal(mkfifo(other, 0600), 0);
    assert_int_equal(persist_load_any(other, 10, &buf, &len), -EBADMSG);
    assert_int_equal(persist_load_any(NULL, 10, &buf, &len), -EINVAL);
}

static void test_persist_save_failures_keep_old_file(void **state)
{
    struct fixture *f = *state;
    static uint8_t big[100000];
    char other[160], buf[3];
    struct rlimit old, small;
    void (*old_handler)(int);
    int r;

    assert_int_equal(persist_save(f->path, "old", 3), 0);

    /* The file limit stops the write part-way: a short write, then EFBIG. */
    memset(big, 'x', sizeof(big));
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small = old;
    small.rlim_cur = 4096;
    old_handler = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    r = persist_save(f->path, big, sizeof(big));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(r, -EFBIG);
    assert_int_equal(persist_load(f->path, buf, 3), 0);
    assert_memory_equal(buf, "old", 3);
    assert_int_equal(count_entries(f->dir), 1);

    /* The target is a directory: rename fails, the temp file goes. */
    snprintf(other, sizeof(other), "%s/dir", f->dir);
    assert_int_equal(mkdir(other, 0700), 0);
    assert_int_equal(persist_save(other, "x", 1), -EISDIR);
    assert_int_equal(count_entries(f->dir), 2);

    /* No such directory. */
    snprintf(other, sizeof(other), "%s/nodir/state", f->dir);
    assert_int_equal(persist_save(other, "x", 1), -ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_persist_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_persist_load_refuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_persist_load_any, setup, teardown),
        cmocka_unit_test_setup_teardown(test_persist_save_failures_keep_old_file, setup,
                                        teardown),
    };

    return cmocka_run_group_tests_name("persist", tests, NULL, NULL);
}
