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

int persist_load(const char *path, void *base, size_t len)
{
    struct stat st;
    uint8_t *buf = NULL, extra;
    ssize_t n;
    int fd, r;

    if (!path || (!base && len > 0))
        return -EINVAL;
    /* O_NONBLOCK: a FIFO planted under the name must not hang the daemon. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < 0 || (uintmax_t)st.st_size != len) {
        r = -EBADMSG;
        goto out;
    }
    /* Into a buffer first: @base changes only when the whole file was read. */
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
    if (len > 0)
        memcpy(base, buf, len);
    r = 0;
out:
    free(buf);
    close(fd);
    return r;
}
