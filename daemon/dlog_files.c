/* SPDX-License-Identifier: MIT */
/*
 * dlog_files: the decision log's directory, hash key and rotating files
 * (see dlog_files.h).  Every path is opened relative to the checked
 * directory with O_NOFOLLOW, so a symlink planted in it is never followed;
 * only names this module writes (decisions-*.dlog) are ever removed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dlog.h"
#include "dlog_files.h"
#include "fdio.h"

#define DLOG_PREFIX  "decisions-"

/* mkdir -p with mode 0750 for what it makes. */
static int make_dirs(const char *dir)
{
    char buf[PATH_MAX];
    size_t len = strlen(dir);

    if (len == 0 || len >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, dir, len + 1);
    for (char *p = buf + 1; ; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;

        *p = '\0';
        if (mkdir(buf, 0750) < 0 && errno != EEXIST)
            return -errno;
        *p = c;
        if (c == '\0')
            return 0;
    }
}

int dlog_files_open(struct dlog_files *f, const char *dir, uint64_t max_size, unsigned keep,
                    const char **reterr_what)
{
    struct stat st;
    int r;

    *f = (struct dlog_files){ .dirfd = -1, .fd = -1, .max_size = max_size, .keep = keep };
    *reterr_what = "cannot create it";
    r = make_dirs(dir);
    if (r < 0)
        return r;
    *reterr_what = "cannot open it";
    f->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (f->dirfd < 0)
        return -errno;
    if (fstat(f->dirfd, &st) < 0) {
        r = -errno;
        goto fail;
    }
    r = -EPERM;
    if (st.st_uid != geteuid() && st.st_uid != 0) {
        *reterr_what = "it is owned by another user";
        goto fail;
    }
    if ((st.st_mode & S_IWOTH) || ((st.st_mode & S_IWGRP) && st.st_gid != getegid())) {
        *reterr_what = "others can write to it (chmod o-w, and g-w unless it is divvyd's group)";
        goto fail;
    }
    return 0;
fail:
    close(f->dirfd);
    f->dirfd = -1;
    return r;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A new key file at @path (O_EXCL: a racing divvyd's stays). */
static int make_key(const char *path)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t key[HASH_KEY_LEN];
    char text[2 * HASH_KEY_LEN + 1];
    int fd, r;

    if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
        return -EIO;
    for (size_t i = 0; i < sizeof(key); i++) {
        text[2 * i] = hex[key[i] >> 4];
        text[2 * i + 1] = hex[key[i] & 15];
    }
    text[2 * HASH_KEY_LEN] = '\n';
    explicit_bzero(key, sizeof(key));
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno == EEXIST ? 0 : -errno;
    r = fdio_write_all(fd, text, sizeof(text));
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    close(fd);
    if (r < 0)
        unlink(path);
    explicit_bzero(text, sizeof(text));
    return r;
}

int dlog_files_key(const char *path, uint8_t key[HASH_KEY_LEN], const char **reterr_what)
{
    char text[2 * HASH_KEY_LEN + 2];
    struct stat st;
    ssize_t n;
    int fd, r;

    *reterr_what = "cannot create it";
    r = make_key(path);
    if (r < 0)
        return r;
    *reterr_what = "cannot open it";
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    r = -EPERM;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        *reterr_what = "it is not a regular file";
        goto out;
    }
    if (st.st_uid != geteuid()) {
        *reterr_what = "it is owned by another user";
        goto out;
    }
    if (st.st_mode & 0077) {
        *reterr_what = "its group or others may read or write it (chmod 600)";
        goto out;
    }
    *reterr_what = "it is not 32 hex digits and a newline";
    r = -EBADMSG;
    n = fdio_read_all(fd, text, sizeof(text));
    if (n != 2 * HASH_KEY_LEN + 1 || text[2 * HASH_KEY_LEN] != '\n')
        goto out;
    for (size_t i = 0; i < HASH_KEY_LEN; i++) {
        int hi = hex_digit(text[2 * i]), lo = hex_digit(text[2 * i + 1]);

        if (hi < 0 || lo < 0)
            goto out;
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    r = 0;
out:
    explicit_bzero(text, sizeof(text));
    close(fd);
    return r;
}

/* Whether @name is one of ours: decisions-YYYYmmddTHHMMSSZ-NNNNNN.dlog, and
 * its sequence number in *@ret_seq. */
static bool our_name(const char *name, uint64_t *ret_seq)
{
    size_t len = strlen(name), pre = strlen(DLOG_PREFIX), suf = strlen(DLOG_FILE_SUFFIX);
    const char *p = name + pre + 16;        /* after "YYYYmmddTHHMMSSZ" */
    uint64_t seq = 0;

    if (len < pre + 16 + 2 + suf || strncmp(name, DLOG_PREFIX, pre) != 0 ||
        strcmp(name + len - suf, DLOG_FILE_SUFFIX) != 0 || name[pre + 8] != 'T' ||
        p[-1] != 'Z' || *p != '-')
        return false;
    for (p++; p < name + len - suf; p++) {
        if (*p < '0' || *p > '9' || seq > UINT64_MAX / 10 - 1)
            return false;
        seq = seq * 10 + (uint64_t)(*p - '0');
    }
    *ret_seq = seq;
    return true;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Our files' names, sorted (oldest first), and the highest sequence number. */
static int list_ours(struct dlog_files *f, char ***ret, size_t *ret_n, uint64_t *ret_max_seq)
{
    char **names = NULL, **grown;
    size_t n = 0, cap = 0;
    struct dirent *de;
    uint64_t seq;
    DIR *d;
    int fd, r = 0;

    *ret_max_seq = 0;
    fd = openat(f->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    while ((de = readdir(d)) != NULL) {
        if (!our_name(de->d_name, &seq))
            continue;
        if (seq > *ret_max_seq)
            *ret_max_seq = seq;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            grown = realloc(names, cap * sizeof(*names));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            names = grown;
        }
        names[n] = strdup(de->d_name);
        if (!names[n]) {
            r = -ENOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (r < 0) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return r;
    }
    qsort(names, n, sizeof(*names), name_cmp);
    *ret = names;
    *ret_n = n;
    return 0;
}

/* Removes our oldest files until @keep are left. */
static int prune(struct dlog_files *f, unsigned keep)
{
    char **names = NULL;
    size_t n = 0;
    uint64_t max_seq;
    int r;

    r = list_ours(f, &names, &n, &max_seq);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        if (n - i > keep && unlinkat(f->dirfd, names[i], 0) < 0 && errno != ENOENT && r == 0)
            r = -errno;
        free(names[i]);
    }
    free(names);
    return r;
}

int dlog_files_next(struct dlog_files *f, uint64_t unix_ms, const uint8_t *hdr, size_t hdr_len)
{
    time_t t = (time_t)(unix_ms / 1000);
    char stamp[32];
    struct tm tm;
    int r;

    if (f->fd >= 0) {
        close(f->fd);
        f->fd = -1;
    }
    if (f->seq == 0) {
        /* The first file of this run: numbered after the files already there,
         * so names sort by time even within one second, across restarts. */
        char **names = NULL;
        size_t n = 0;
        uint64_t max_seq;

        r = list_ours(f, &names, &n, &max_seq);
        if (r < 0)
            return r;
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        f->seq = max_seq + 1;
    }
    /* Room first: there are never more than `keep` files, not even for a moment. */
    r = prune(f, f->keep - 1);
    if (r < 0)
        return r;
    if (!gmtime_r(&t, &tm) || strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm) != 16)
        return -EINVAL;
    snprintf(f->name, sizeof(f->name), DLOG_PREFIX "%s-%06llu" DLOG_FILE_SUFFIX, stamp,
             (unsigned long long)f->seq++);
    f->fd = openat(f->dirfd, f->name,
                   O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0640);
    if (f->fd < 0)
        return -errno;
    /* The mode whatever the umask (group: the operators who read the log). */
    r = fchmod(f->fd, 0640) < 0 ? -errno : fdio_write_all(f->fd, hdr, hdr_len);
    if (r < 0) {
        close(f->fd);
        f->fd = -1;
        unlinkat(f->dirfd, f->name, 0);
        return r;
    }
    f->size = hdr_len;
    return 0;
}

int dlog_files_append(struct dlog_files *f, const void *buf, size_t len)
{
    int r;

    if (f->fd < 0)
        return -EBADF;
    r = fdio_write_all(f->fd, buf, len);
    if (r < 0) {
        /* No half block left behind (a full disk): the file stays readable
         * to its end, the next block starts where this one would have. */
        if (ftruncate(f->fd, (off_t)f->size) < 0) {
            close(f->fd);
            f->fd = -1;
        }
        return r;
    }
    f->size += len;
    return 0;
}

void dlog_files_close(struct dlog_files *f)
{
    if (f->fd >= 0)
        close(f->fd);
    if (f->dirfd >= 0)
        close(f->dirfd);
    f->fd = -1;
    f->dirfd = -1;
}
