/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for common/fdio.c: fdio_write_all() writes every byte through
 * a pipe smaller than the buffer (short writes, a reader thread draining
 * it) and answers -errno (EBADF, EPIPE) on failure; fdio_read_all() reads
 * up to the length asked for, stops at end of file with the count so far,
 * and answers -errno.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fdio.h"

#define BIG (1024 * 1024)      /* well past a pipe's 64 KiB */

struct drain {
    int fd;
    uint8_t *buf;
    ssize_t got;
};

static void *drain_run(void *arg)
{
    struct drain *d = arg;

    d->got = fdio_read_all(d->fd, d->buf, BIG + 1);
    return NULL;
}

static void test_fdio_write_all_through_a_pipe(void **state)
{
    uint8_t *out = malloc(BIG), *in = malloc(BIG + 1);
    struct drain d;
    pthread_t th;
    int p[2];

    (void)state;
    assert_non_null(out);
    assert_non_null(in);
    for (size_t i = 0; i < BIG; i++)
        out[i] = (uint8_t)(i * 7 + i / 251);
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    d = (struct drain){ .fd = p[0], .buf = in, .got = -1 };
    assert_int_equal(pthread_create(&th, NULL, drain_run, &d), 0);
    assert_int_equal(fdio_write_all(p[1], out, BIG), 0);
    close(p[1]);
    assert_int_equal(pthread_join(th, NULL), 0);
    /* All of it, then end of file: fewer than asked for. */
    assert_int_equal(d.got, BIG);
    assert_memory_equal(in, out, BIG);
    close(p[0]);
    free(out);
    free(in);
}

static void test_fdio_write_all_errors(void **state)
{
    int p[2];

    (void)state;
    assert_int_equal(fdio_write_all(-1, "x", 1), -EBADF);
    assert_int_equal(fdio_write_all(-1, "", 0), 0);     /* nothing to write: no call */
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    close(p[0]);
    signal(SIGPIPE, SIG_IGN);
    assert_int_equal(fdio_write_all(p[1], "x", 1), -EPIPE);
    close(p[1]);
}

static void test_fdio_read_all_stops_at_length_and_eof(void **state)
{
    char path[] = "/tmp/divvy-test-fdio-XXXXXX", buf[16];
    int fd;

    (void)state;
    fd = mkostemp(path, O_CLOEXEC);
    assert_true(fd >= 0);
    unlink(path);
    assert_int_equal(fdio_write_all(fd, "0123456789", 10), 0);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    /* Up to the length asked for ... */
    assert_int_equal(fdio_read_all(fd, buf, 4), 4);
    assert_memory_equal(buf, "0123", 4);
    /* ... then what is left, at end of file. */
    assert_int_equal(fdio_read_all(fd, buf, sizeof(buf)), 6);
    assert_memory_equal(buf, "456789", 6);
    assert_int_equal(fdio_read_all(fd, buf, sizeof(buf)), 0);
    close(fd);
    assert_int_equal(fdio_read_all(-1, buf, sizeof(buf)), -EBADF);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fdio_write_all_through_a_pipe),
        cmocka_unit_test(test_fdio_write_all_errors),
        cmocka_unit_test(test_fdio_read_all_stops_at_length_and_eof),
    };

    return cmocka_run_group_tests_name("fdio", tests, NULL, NULL);
}
