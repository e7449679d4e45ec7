/* SPDX-License-Identifier: MIT */
/*
 * dlog_files: the decision log's directory and files (docs/operations.md
 * "Decision log"): the directory checked (or made 0750), the hash key
 * beside it, files decisions-YYYYmmddTHHMMSSZ-NNNNNN.dlog (0640) that sort
 * by time, rotation at a size, the oldest removed past a count.  Only the
 * drain thread uses it after dlog_files_open().  Never logs: problems
 * are -errno and, for the caller's log line, a word in @reterr_what.
 */
#ifndef DIVVY_DLOG_FILES_H
#define DIVVY_DLOG_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "hash.h"

#define DLOG_FILES_NAME_MAX 64

struct dlog_files {
    int dirfd;
    int fd;                     /* the current file; -1: none (opening failed) */
    uint64_t size;              /* bytes in it */
    uint64_t max_size;          /* decision_log.file_size */
    unsigned keep;              /* decision_log.files */
    uint64_t seq;               /* the next file's sequence number */
    char name[DLOG_FILES_NAME_MAX];     /* the current file's */
};

/*
 * Opens (making it, and its missing parents, 0750) directory @dir and
 * checks it: a directory, not a symlink, owned by divvyd's user (or
 * root), writable by nobody else (group write only for divvyd's own
 * group).  -ENOTDIR, -ELOOP, -EPERM (ownership or mode: @reterr_what says
 * which), -errno.
 */
int dlog_files_open(struct dlog_files *f, const char *dir, uint64_t max_size, unsigned keep,
                    const char **reterr_what);

/*
 * The hash key of decision_log.redact "hash": read from @path, or made
 * there (16 random bytes as 32 hex digits, mode 0600) when missing.  A
 * file that is not a regular file owned by divvyd's user, readable by
 * others or its group, or not a key is refused (-EPERM, -EBADMSG).
 */
int dlog_files_key(const char *path, uint8_t key[HASH_KEY_LEN], const char **reterr_what);

/*
 * Closes the current file, removes the oldest files so that with the next
 * one there are `keep`, and starts that one at @unix_ms with header @hdr
 * (@hdr_len bytes).  -errno (then no file is open: the next call tries
 * again).
 */
int dlog_files_next(struct dlog_files *f, uint64_t unix_ms, const uint8_t *hdr, size_t hdr_len);

/* Appends @len bytes to the current file: 0, or -errno (-EBADF: none open). */
int dlog_files_append(struct dlog_files *f, const void *buf, size_t len);

/* Closes the current file and the directory. */
void dlog_files_close(struct dlog_files *f);

#endif
