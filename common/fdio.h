/* SPDX-License-Identifier: MIT */
/*
 * fdio: whole-buffer reads and writes on a file descriptor, the loops over
 * short counts and EINTR that divvyd's state files, the config writers and
 * divvyctl share.  Blocking descriptors only (EAGAIN is an error here); no
 * allocation, no logging, thread-safe.
 */
#ifndef DIVVY_FDIO_H
#define DIVVY_FDIO_H

#include <stddef.h>
#include <sys/types.h>

/* Writes all of @buf[0..@len) to @fd: 0, or -errno (-EIO when write() makes
 * no progress).  On failure part of @buf may have been written. */
int fdio_write_all(int fd, const void *buf, size_t len);
/* Reads into @buf until @len bytes or end of file: the count (< @len only
 * at end of file), or -errno. */
ssize_t fdio_read_all(int fd, void *buf, size_t len);

#endif
