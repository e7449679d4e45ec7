/* SPDX-License-Identifier: MIT */
/*
 * lock: the state directory's divvyd.lock (see lock.h).  A POSIX record
 * lock (F_SETLK) rather than an OFD lock or flock(): F_GETLK names the
 * holder's PID, in our PID namespace, for the refusal message.  The file may
 * be unlinked by a start that failed (lock_release(l, true)) while another
 * divvyd has it open: after locking, the path must still name the inode we
 * locked, else we lock the new file instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lock.h"

#define TRIES 16                /* holders that come and go between two calls */

/* The holder's PID from F_GETLK, else from the file; 0 when none can be told. */
static pid_t holder_pid(int fd)
{
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
    char buf[32];
    ssize_t n;
    long pid;

    if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK && fl.l_pid > 0)
        return fl.l_pid;
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    pid = strtol(buf, NULL, 10);
    return pid > 0 && pid <= 0x7fffffff ? (pid_t)pid : 0;
}

static int write_pid(int fd)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
    ssize_t w;

    if (ftruncate(fd, 0) < 0)
        return -errno;
    do
        w = pwrite(fd, buf, (size_t)n, 0);
    while (w < 0 && errno == EINTR);
    if (w < 0)
        return -errno;
    return w == n ? 0 : -EIO;
}

int lock_take(const char *dir, struct lock *l, pid_t *reterr_holder)
{
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
    struct stat a, b;
    bool created = false, locked = false;
    int fd = -1, r;

    l->fd = -1;
    l->created = false;
    if ((size_t)snprintf(l->path, sizeof(l->path), "%s/%s", dir, LOCK_NAME) >= sizeof(l->path))
        return -ENAMETOOLONG;
    for (int i = 0; i < TRIES; i++) {
        created = true;
        fd = open(l->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
        if (fd < 0 && errno == EEXIST) {
            created = false;
            fd = open(l->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
            if (fd < 0 && errno == ENOENT)
                continue;               /* unlinked meanwhile */
        }
        if (fd < 0)
            return -errno;
        if (fstat(fd, &a) < 0) {
            r = -errno;
            goto out;
        }
        if (!S_ISREG(a.st_mode)) {
            r = -EBADF;
            goto out;
        }
        if (fcntl(fd, F_SETLK, &fl) < 0) {
            if (errno != EAGAIN && errno != EACCES) {
                r = -errno;
                goto out;
            }
            *reterr_holder = holder_pid(fd);
            r = -EBUSY;
            if (*reterr_holder > 0)
                goto out;
            /* Released meanwhile (or a holder we cannot see): once more. */
            close(fd);
            fd = -1;
            continue;
        }
        locked = true;
        /* Still the file under that name?  A failed start may have unlinked it. */
        if (stat(l->path, &b) < 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
            close(fd);
            fd = -1;
            locked = false;
            continue;
        }
        r = write_pid(fd);
        if (r < 0)
            goto out;
        l->fd = fd;
        l->created = created;
        return 0;
    }
    /* Held all along by a process whose PID we cannot see. */
    *reterr_holder = 0;
    return -EBUSY;
out:
    /* A file we made and hold (e.g. no room for the PID) goes again. */
    if (locked && created)
        unlink(l->path);
    if (fd >= 0)
        close(fd);
    return r;
}

void lock_release(struct lock *l, bool remove)
{
    if (l->fd < 0)
        return;
    if (remove && l->created)
        unlink(l->path);
    close(l->fd);
    l->fd = -1;
}
