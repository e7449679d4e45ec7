/* SPDX-License-Identifier: MIT */
/*
 * secret: resolve a password file (an absolute path or a systemd credential
 * name), check that only its owner may read it, and read one line from it
 * (see secret.h).  Every buffer that held the secret is wiped.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "secret.h"

static int fail(char *reterr, size_t size, int r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *reterr, size_t size, int r, const char *fmt, ...)
{
    va_list ap;

    if (reterr && size) {
        va_start(ap, fmt);
        vsnprintf(reterr, size, fmt, ap);
        va_end(ap);
    }
    return r;
}

/* @name as a path: itself when absolute, in $CREDENTIALS_DIRECTORY when a bare name. */
static int resolve(const char *name, char *path, size_t size, char *reterr, size_t err_size)
{
    const char *dir;

    if (name[0] == '/') {
        if ((size_t)snprintf(path, size, "%s", name) >= size)
            return fail(reterr, err_size, -ENAMETOOLONG, "path too long");
        return 0;
    }
    if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return fail(reterr, err_size, -EINVAL,
                    "%s: must be an absolute path, or a systemd credential name without '/'",
                    name);
    dir = getenv("CREDENTIALS_DIRECTORY");
    if (!dir || dir[0] != '/')
        return fail(reterr, err_size, -ENOENT,
                    "%s: a credential name, but $CREDENTIALS_DIRECTORY is not set (start divvyd "
                    "from a unit with LoadCredential=%s:/path/to/file, or give an absolute "
                    "path)", name, name);
    if ((size_t)snprintf(path, size, "%s/%s", dir, name) >= size)
        return fail(reterr, err_size, -ENAMETOOLONG, "path too long");
    return 0;
}

int secret_open(const char *name, bool private, char *ret_path, size_t path_size,
                char *reterr, size_t err_size)
{
    struct stat st;
    int fd, r;

    if (!name || !ret_path)
        return fail(reterr, err_size, -EINVAL, "no file name");
    r = resolve(name, ret_path, path_size, reterr, err_size);
    if (r < 0)
        return r;
    /* O_NONBLOCK: a FIFO under that name must not hang a reload. */
    fd = open(ret_path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        r = -errno;
        return fail(reterr, err_size, r, "%s: %s", ret_path, strerror(-r));
    }
    if (fstat(fd, &st) < 0) {
        r = fail(reterr, err_size, -errno, "%s: %s", ret_path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        r = fail(reterr, err_size, -EINVAL, "%s: not a regular file", ret_path);
        goto fail;
    }
    if (private && (st.st_mode & 0044)) {
        r = fail(reterr, err_size, -EPERM, "%s: readable by %s (mode %04o): make it 0600 or "
                 "0400, owned by divvyd's user", ret_path,
                 (st.st_mode & 0044) == 0044 ? "its group and others"
                 : st.st_mode & 0040 ? "its group" : "others",
                 (unsigned)(st.st_mode & 07777));
        goto fail;
    }
    return fd;
fail:
    close(fd);
    return r;
}

int secret_read(const char *name, char **ret, char *reterr, size_t err_size)
{
    char path[PATH_MAX], buf[SECRET_MAX + 3];
    size_t len = 0;
    ssize_t n;
    char *s;
    int fd, r;

    if (!ret)
        return fail(reterr, err_size, -EINVAL, "no file name");
    fd = secret_open(name, true, path, sizeof(path), reterr, err_size);
    if (fd < 0)
        return fd;
    n = fdio_read_all(fd, buf, sizeof(buf));
    if (n < 0) {
        r = fail(reterr, err_size, (int)n, "%s: %s", path, strerror((int)-n));
        goto out;
    }
    len = (size_t)n;
    /* One trailing newline is the file's, not the secret's. */
    if (len > 0 && buf[len - 1] == '\n') {
        len--;
        if (len > 0 && buf[len - 1] == '\r')
            len--;
    }
    if (len == 0 || len > SECRET_MAX) {
        r = fail(reterr, err_size, -EMSGSIZE, "%s: must hold 1 to %d bytes (one line)", path,
                 SECRET_MAX);
        goto out;
    }
    if (memchr(buf, '\0', len) || memchr(buf, '\n', len) || memchr(buf, '\r', len)) {
        r = fail(reterr, err_size, -EINVAL, "%s: must be one line without NUL bytes", path);
        goto out;
    }
    s = malloc(len + 1);
    if (!s) {
        r = fail(reterr, err_size, -ENOMEM, "out of memory");
        goto out;
    }
    memcpy(s, buf, len);
    s[len] = '\0';
    *ret = s;
    r = 0;
out:
    explicit_bzero(buf, sizeof(buf));
    close(fd);
    return r;
}
