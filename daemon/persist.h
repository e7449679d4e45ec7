/* SPDX-License-Identifier: MIT */
/*
 * persist: divvyd's small state files, saved whole or not at all.  A save
 * writes the bytes to a new temp file beside the target (mode 0600) and
 * renames it over the target, so a reader (the next divvyd, after a crash
 * at any point) sees either the old file or the new one, never a mix.  A
 * load accepts only a regular file of exactly the expected size, so a file
 * from another version or a truncated one is refused rather than half-read.
 * No global state; never logs (the caller says what failed, and where).
 */
#ifndef DIVVY_PERSIST_H
#define DIVVY_PERSIST_H

#include <stddef.h>

/*
 * Replaces @path by a file holding @base[0..len), atomically: writes
 * "<path>.XXXXXX" in the same directory (O_CREAT|O_EXCL, 0600, O_CLOEXEC),
 * fsyncs it (harmless on a tmpfs) and rename()s it over @path.  On failure
 * @path is as it was and the temp file is gone (a crash may leave one
 * behind: "<path>." plus six characters).  0, or -errno: -EINVAL (@base NULL
 * with @len > 0), -ENAMETOOLONG, a failed open/write/fsync/close/rename's
 * errno (a write that makes no progress is -EIO).
 */
int persist_save(const char *path, const void *base, size_t len);

/*
 * Fills @base[0..len) from @path when @path is a regular file of exactly
 * @len bytes: 0.  -ENOENT when there is no such file; -EBADMSG when it is
 * not a regular file (a directory, FIFO, ...) or has another size (also when
 * it changes size while read); another -errno when it cannot be opened or
 * read.  @base is left untouched unless 0 is returned.
 */
int persist_load(const char *path, void *base, size_t len);

/*
 * The same for a file of any size up to @max bytes: on success *ret_buf is
 * its contents (malloc'd, the caller frees it; never NULL, also for an empty
 * file) and *ret_len their size.  -ENOENT, -EBADMSG (not a regular file,
 * over @max bytes, or it changed size while read), -ENOMEM, another -errno;
 * *ret_buf and *ret_len are left untouched unless 0 is returned.
 */
int persist_load_any(const char *path, size_t max, void **ret_buf, size_t *ret_len);

#endif
