/* SPDX-License-Identifier: MIT */
/*
 * fdio: the read and write loops every caller of read()/write() on a whole
 * buffer needs (see fdio.h): retry on EINTR, carry on after a short count.
 * Owns nothing; the caller keeps its descriptor and buffer.
 */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "fdio.h"

int fdio_write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

ssize_t fdio_read_all(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    size_t got = 0;

    while (got < len) {
        ssize_t n = read(fd, p + got, len - got);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}
