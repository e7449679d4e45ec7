/* SPDX-License-Identifier: MIT */
/*
 * fastfd: the fast-path table in a sealed memfd, its control page, the FAST
 * hand-over and the table's persistence across restarts (fastfd.h).  The
 * memfds never appear in the state directory; clients get them only from
 * fastfd_send(), after SO_PEERCRED/SO_PEERGROUPS showed uid 0 or the fast
 * group.  The snapshot is a daemon-only file (0600) written whole through
 * persist_save() from a copy table_snapshot() makes slot by slot.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fastfd.h"
#include "log.h"
#include "peer.h"
#include "persist.h"
#include "proto.h"
#include "table.h"


struct fastfd {
    struct table *t;
    int ctl_ro;                 /* a read-only reopen of the control page's memfd */
    gid_t gid;                  /* the fast group; (gid_t)-1: root only */
    char *snap_path;
    char reply[PROTO_LINE_MAX];
    size_t reply_len;
    unsigned snapshot_ms;
    pthread_mutex_t lock;       /* one save at a time */
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    bool stop;
    bool started;
    pthread_t thread;
};

static struct log_ratelimit rl_save;

static gid_t resolve_group(const char *name)
{
    struct group *gr;
    char *end;
    unsigned long v;

    if (!name || !name[0])
        return (gid_t)-1;
    gr = getgrnam(name);
    if (gr)
        return gr->gr_gid;
    /* A decimal gid: a group with no name (or not in the group database). */
    errno = 0;
    v = strtoul(name, &end, 10);
    if (!*end && errno == 0 && name[0] >= '0' && name[0] <= '9' && v < (unsigned long)(gid_t)-1)
        return (gid_t)v;
    return (gid_t)-1;
}

/* The store's memfd, if it is a table of this boot, layout and size. */
static int take_stored(struct fastfd *ff, const struct fastfd_opts *o)
{
    char why[160] = "";
    int r;

    if (o->stored_fd < 0)
        return -ENOENT;
    r = table_attach_fd(o->stored_fd, o->slots, &ff->t, why, sizeof(why));
    if (r < 0) {
        log_msg(LOG_WARNING, "fast-path table from the service manager's fd store not used: %s",
                r == -EBADMSG ? why : strerror(-r));
        close(o->stored_fd);
        return r;
    }
    log_msg(LOG_INFO, "fast-path table taken back from the service manager's fd store, "
            "counts kept (%u slots)", table_slots(ff->t));
    return 0;
}

/* A new table, with the snapshot's counts when it is valid. */
static int create_table(struct fastfd *ff, const struct fastfd_opts *o)
{
    char why[160] = "";
    void *buf;
    int r;

    r = table_create_memfd(o->slots, &ff->t);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "cannot create the fast-path table: %m");
        return r;
    }
    /* The snapshot is copied in through a buffer of its own (persist_load()
     * checks its size first), never read straight into the shared table. */
    buf = malloc(table_size(ff->t));
    if (!buf) {
        log_msg(LOG_ERR, "cannot restore the fast-path table: out of memory");
        return -ENOMEM;
    }
    r = persist_load(ff->snap_path, buf, table_size(ff->t));
    if (r == 0)
        r = table_restore(ff->t, buf, table_size(ff->t), why, sizeof(why));
    free(buf);
    if (r == 0) {
        log_msg(LOG_INFO, "fast-path table restored from %s, counts as of its last save "
                "(%u slots)", ff->snap_path, table_slots(ff->t));
        return 0;
    }
    if (r == -ENOENT) {
        log_msg(LOG_INFO, "fast-path table created, counts start afresh (%u slots; no %s)",
                table_slots(ff->t), ff->snap_path);
    } else {
        log_msg(LOG_WARNING, "fast-path table created, counts start afresh: snapshot %s "
                "not used: %s", ff->snap_path,
                r == -EBADMSG ? (why[0] ? why : "size does not match") : strerror(-r));
    }
    return 0;
}

int fastfd_open(const struct fastfd_opts *o, struct fastfd **ret)
{
    struct fastfd *ff;
    char path[PATH_MAX];
    int n, r;

    ff = calloc(1, sizeof(*ff));
    if (!ff) {
        if (o->stored_fd >= 0)
            close(o->stored_fd);
        return -ENOMEM;
    }
    ff->ctl_ro = -1;
    ff->snapshot_ms = o->snapshot_ms;
    pthread_mutex_init(&ff->lock, NULL);
    pthread_mutex_init(&ff->stop_lock, NULL);
    pthread_cond_init(&ff->stop_cond, NULL);
    if (asprintf(&ff->snap_path, "%s/%s", o->state_dir, FASTFD_SNAPSHOT) < 0) {
        ff->snap_path = NULL;
        r = -ENOMEM;
        goto fail;
    }
    if (take_stored(ff, o) < 0) {
        r = create_table(ff, o);
        if (r < 0)
            goto fail;
    }
    r = table_ctl_create(ff->t);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "cannot create the fast path's control page: %m");
        goto fail;
    }
    /* Clients get a read-only fd (the seals refuse writes through any fd anyway). */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", table_ctl_fd(ff->t));
    ff->ctl_ro = open(path, O_RDONLY | O_CLOEXEC);
    if (ff->ctl_ro < 0)
        ff->ctl_ro = fcntl(table_ctl_fd(ff->t), F_DUPFD_CLOEXEC, 0);
    if (ff->ctl_ro < 0) {
        r = -errno;
        log_msg(LOG_ERR, "cannot duplicate the control page's fd: %m");
        goto fail;
    }
    ff->gid = resolve_group(o->group);
    if (ff->gid == (gid_t)-1)
        log_msg(LOG_INFO, "fast group '%s' does not exist: only root may use the fast path",
                o->group ? o->group : "");
    n = snprintf(ff->reply, sizeof(ff->reply), "OK fast ");
    r = proto_fmt_string(ff->reply + n, sizeof(ff->reply) - (size_t)n - 1, o->state_dir,
                         strlen(o->state_dir));
    if (r < 0)
        goto fail;
    n += r;
    ff->reply[n++] = '\n';
    ff->reply_len = (size_t)n;
    /* A table file of an older divvyd: nobody may map it any more. */
    if ((size_t)snprintf(path, sizeof(path), "%s/fast.table", o->state_dir) < sizeof(path))
        unlink(path);
    *ret = ff;
    return 0;
fail:
    fastfd_free(ff);
    return r;
}

struct table *fastfd_table(struct fastfd *ff)
{
    return ff->t;
}

/* uid 0, or the fast group as primary or supplementary group of the peer. */
static bool peer_allowed(const struct fastfd *ff, int sock)
{
    uid_t uid;
    bool member;

    return peer_cred(sock, ff->gid, &uid, &member) == 0 && member;
}

int fastfd_peer(struct fastfd *ff, int sock, uid_t *ret_uid, pid_t *ret_pid)
{
    uid_t uid;
    pid_t pid;
    bool member;
    int r;

    r = peer_cred_pid(sock, ff->gid, &uid, &member, &pid);
    if (r < 0)
        return r;
    if (!member)
        return -EPERM;
    *ret_uid = uid;
    *ret_pid = pid;
    return 0;
}

int fastfd_send(struct fastfd *ff, int sock)
{
    int fds[2] = { table_fd(ff->t), ff->ctl_ro };
    union {
        char buf[CMSG_SPACE(sizeof(fds))];
        struct cmsghdr align;
    } u;
    struct iovec iov = { .iov_base = ff->reply, .iov_len = ff->reply_len };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                          .msg_controllen = sizeof(u.buf) };
    struct cmsghdr *cm;
    ssize_t n;

    if (!peer_allowed(ff, sock))
        return -EPERM;
    memset(u.buf, 0, sizeof(u.buf));
    cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(fds));
    memcpy(CMSG_DATA(cm), fds, sizeof(fds));
    do
        n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    /* The descriptors went with the first byte; a line cut short is not an answer. */
    return (size_t)n == ff->reply_len ? 0 : -EAGAIN;
}

int fastfd_save(struct fastfd *ff)
{
    void *buf;
    int r;

    if (!ff || !ff->t)
        return -EINVAL;
    /* A buffer per save, freed after: between saves divvyd does not hold a
     * second copy of the table. */
    pthread_mutex_lock(&ff->lock);
    buf = malloc(table_size(ff->t));
    r = buf ? table_snapshot(ff->t, buf, table_size(ff->t)) : -ENOMEM;
    if (r == 0)
        r = persist_save(ff->snap_path, buf, table_size(ff->t));
    free(buf);
    pthread_mutex_unlock(&ff->lock);
    if (r < 0) {
        errno = -r;
        log_ratelimited(&rl_save, LOG_WARNING, "cannot save the fast-path table to %s: %m",
                        ff->snap_path);
    }
    return r;
}

static void *snapshot_main(void *arg)
{
    struct fastfd *ff = arg;
    struct timespec at;

    pthread_mutex_lock(&ff->stop_lock);
    while (!ff->stop) {
        clock_gettime(CLOCK_MONOTONIC, &at);
        at.tv_sec += ff->snapshot_ms / 1000;
        at.tv_nsec += (long)(ff->snapshot_ms % 1000) * 1000000L;
        if (at.tv_nsec >= 1000000000L) {
            at.tv_sec++;
            at.tv_nsec -= 1000000000L;
        }
        while (!ff->stop && pthread_cond_timedwait(&ff->stop_cond, &ff->stop_lock, &at) == 0)
            ;
        if (ff->stop)
            break;
        pthread_mutex_unlock(&ff->stop_lock);
        fastfd_save(ff);
        pthread_mutex_lock(&ff->stop_lock);
    }
    pthread_mutex_unlock(&ff->stop_lock);
    return NULL;
}

int fastfd_start(struct fastfd *ff)
{
    pthread_condattr_t ca;
    int r;

    if (!ff || ff->started || ff->snapshot_ms == 0)
        return 0;
    /* The wait is on CLOCK_MONOTONIC: a clock step neither stalls nor rushes it. */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_destroy(&ff->stop_cond);
    pthread_cond_init(&ff->stop_cond, &ca);
    pthread_condattr_destroy(&ca);
    r = pthread_create(&ff->thread, NULL, snapshot_main, ff);
    if (r) {
        errno = r;
        log_msg(LOG_ERR, "cannot start the snapshot thread: %m");
        return -r;
    }
    ff->started = true;
    return 0;
}

void fastfd_free(struct fastfd *ff)
{
    if (!ff)
        return;
    if (ff->started) {
        pthread_mutex_lock(&ff->stop_lock);
        ff->stop = true;
        pthread_cond_signal(&ff->stop_cond);
        pthread_mutex_unlock(&ff->stop_lock);
        pthread_join(ff->thread, NULL);
    }
    if (ff->ctl_ro >= 0)
        close(ff->ctl_ro);
    table_close(ff->t);
    free(ff->snap_path);
    pthread_mutex_destroy(&ff->lock);
    pthread_mutex_destroy(&ff->stop_lock);
    pthread_cond_destroy(&ff->stop_cond);
    free(ff);
}
