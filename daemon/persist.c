/* SPDX-License-Identifier: MIT */
/*
 * persist: atomic save (temp file + rename) and exact-size load of divvyd's
 * small state files (see persist.h).  Every read and write loops over short
 * counts and EINTR (common/fdio.c); nothing is left half-written under the
 * target's name.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "persist.h"

int persist_save(const char *path, const void *base, size_t len)
{
    char tmp[PATH_MAX];
    int fd = -1, r;

    if (!path || (!base && len > 0))
        return -EINVAL;
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= sizeof(tmp))
        return -ENAMETOOLONG;
    /* mkostemp: O_CREAT|O_EXCL, mode 0600 (less only under a stricter umask). */
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return -errno;
    r = fdio_write_all(fd, base, len);
    if (r < 0)
        goto out;
    if (fsync(fd) < 0) {
        r = -errno;
        goto out;
    }
    r = close(fd);
    fd = -1;
    /* Linux closes the fd even when close() fails: an error here is a lost write. */
    if (r < 0) {
        r = errno == EINTR ? 0 : -errno;
        if (r < 0)
            goto out;
    }
    if (rename(tmp, path) < 0) {
        r = -errno;
        goto out;
    }
    r = 0;
out:
    if (fd >= 0)
        close(fd);
    if (r < 0)
        unlink(tmp);
    return r;
}

/* The whole of @path into *ret_buf (malloc'd, at least one byte) and its
 * size into *ret_len, when @path is a regular file of @min to @max bytes
 * that keeps its size while read. */
static int load_regular(const char *path, size_t min, size_t max, uint8_t **ret_buf,
                        size_t *ret_len)
{
    struct stat st;
    uint8_t *buf = NULL, extra;
    size_t len;
    ssize_t n;
    int fd, r;

    /* O_NONBLOCK: a FIFO planted under the name must not hang the daemon. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < 0 || (uintmax_t)st.st_size < min ||
        (uintmax_t)st.st_size > max) {
        r = -EBADMSG;
        goto out;
    }
    len = (size_t)st.st_size;
    buf = malloc(len > 0 ? len : 1);
    if (!buf) {
        r = -ENOMEM;
        goto out;
    }
    n = fdio_read_all(fd, buf, len);
    if (n < 0) {
        r = (int)n;
        goto out;
    }
    if ((size_t)n != len) {
        r = -EBADMSG;                   /* shrank under us */
        goto out;
    }
    n = fdio_read_all(fd, &extra, 1);
    if (n != 0) {
        r = n < 0 ? (int)n : -EBADMSG;  /* grew under us */
        goto out;
    }
    *ret_buf = buf;
    *ret_len = len;
    buf = NULL;
    r = 0;
out:
    free(buf);
    close(fd);
    return r;
}

int persist_load(const char *path, void *base, size_t len)
{
    uint8_t *buf = NULL;
    size_t got;
    int r;

    if (!path || (!base && len > 0))
        return -EINVAL;
    /* Into a buffer first: @base changes only when the whole file was read. */
    r = load_regular(path, len, len, &buf, &got);
    if (r < 0)
        return r;
    if (len > 0)
        memcpy(base, buf, len);
    free(buf);
    return 0;
}

int persist_load_any(const char *path, size_t max, void **ret_buf, size_t *ret_len)
{
    uint8_t *buf = NULL;
    size_t len;
    int r;

    if (!path || !ret_buf || !ret_len)
        return -EINVAL;
    r = load_regular(path, 0, max, &buf, &len);
    if (r < 0)
        return r;
    *ret_buf = buf;
    *ret_len = len;
    return 0;
}
