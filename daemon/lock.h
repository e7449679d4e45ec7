/* SPDX-License-Identifier: MIT */
/*
 * lock: one divvyd per state directory.  divvyd holds a write lock on
 * <state_dir>/divvyd.lock (an fcntl record lock, mode 0600, holding the
 * holder's PID in decimal for people) from before it opens the tables until
 * it exits, so a second divvyd on the same directory refuses to start
 * instead of reattaching to the tables and replacing the first one's
 * published rules.  The kernel drops the lock with its holder's last fd, so
 * a crashed or killed divvyd never leaves it held: a restart (systemd's, or
 * by hand) just takes it.  No global state; never logs.
 */
#ifndef DIVVY_LOCK_H
#define DIVVY_LOCK_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#define LOCK_NAME "divvyd.lock"

struct lock {
    int fd;                     /* -1 when not held */
    bool created;               /* this lock_take() made the file */
    char path[PATH_MAX];
};

/*
 * Takes the lock of state directory @dir (which must exist), creating the
 * lock file when needed, and writes our PID into it.  0 with @l held;
 * -EBUSY when another process holds it, *reterr_holder then its PID (0 when
 * it cannot be told, e.g. from another PID namespace); another -errno when
 * the file cannot be opened, locked or written (@l not held).  A process
 * holds one lock: closing any other fd of the same file would drop it.
 */
int lock_take(const char *dir, struct lock *l, pid_t *reterr_holder);

/*
 * Drops the lock.  @remove: unlink the file first when this lock_take()
 * created it (a failed start leaves nothing it made); a running divvyd's
 * file stays, harmlessly.  Safe on a lock not held (fd -1).
 */
void lock_release(struct lock *l, bool remove);

#endif
