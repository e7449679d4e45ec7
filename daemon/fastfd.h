/* SPDX-License-Identifier: MIT */
/*
 * fastfd: divvyd's side of the fast path's trust model (DESIGN sections 4
 * and 5, docs/dev/shm.md "Memfds and seals", docs/protocol.md FAST).  Owns the
 * fast-path table, which lives in a sealed memfd (never a file a client can
 * open, resize or fill a filesystem with), and its control page (the words
 * only divvyd writes, sealed against every other writer).  At start it takes
 * the table back from systemd's fd store, else restores it from the
 * daemon-only snapshot <state_dir>/fast.snapshot, else starts afresh, and
 * says which in one log line.  It answers FAST on a Unix connection by
 * handing both memfds over with SCM_RIGHTS, only to uid 0 and members of the
 * fast group (SO_PEERCRED plus SO_PEERGROUPS), and writes the snapshot
 * periodically (its own thread) and at a clean stop.
 */
#ifndef DIVVY_FASTFD_H
#define DIVVY_FASTFD_H

#include <stdint.h>
#include <sys/types.h>

#define FASTFD_STORE_NAME   "fast-table"        /* FDNAME= in the fd store */
#define FASTFD_SNAPSHOT     "fast.snapshot"     /* in the state directory, 0600 */

struct table;
struct fastfd;

struct fastfd_opts {
    const char *state_dir;
    uint32_t slots;             /* table.fast_slots */
    const char *group;          /* server.fast_group: a group name or a decimal gid */
    unsigned snapshot_ms;       /* table.snapshot_interval_ms; 0: at a clean stop only */
    int stored_fd;              /* the fd store's "fast-table" memfd, or -1; always
                                 * consumed (adopted or closed) */
};

/*
 * Takes back, restores or creates the fast-path table (logging which and
 * why), makes its control page and resolves the fast group.  On success *ret
 * is a new handle for fastfd_free().  -errno (logged).
 */
int fastfd_open(const struct fastfd_opts *o, struct fastfd **ret);

/* The table (owned by the handle; its memfd is table_fd()). */
struct table *fastfd_table(struct fastfd *ff);

/*
 * Answers FAST on the connected Unix socket @sock: when the peer is uid 0 or
 * in the fast group, sends "OK fast <state_dir>\n" with the table's memfd
 * and a read-only fd of the control page (SCM_RIGHTS) and returns 0;
 * otherwise sends nothing and returns -EPERM (the caller answers
 * ERR forbidden).  -EAGAIN or another -errno when the reply could not be
 * sent whole (the caller drops the connection).  Thread-safe.
 */
int fastfd_send(struct fastfd *ff, int sock);

/*
 * Whether the peer of the connected Unix socket @sock may use the fast path
 * (FAST's check: uid 0 or the fast group): 0 with its SO_PEERCRED uid and
 * pid in *@ret_uid and *@ret_pid, -EPERM when it may not, another -errno
 * when @sock has no peer credentials.  For REPORT (report.h).  Thread-safe.
 */
int fastfd_peer(struct fastfd *ff, int sock, uid_t *ret_uid, pid_t *ret_pid);

/* Starts the periodic snapshot thread (no-op with snapshot_ms 0).  -errno. */
int fastfd_start(struct fastfd *ff);

/* Writes the snapshot now (a clean stop).  0 or -errno (logged).  Thread-safe. */
int fastfd_save(struct fastfd *ff);

/* Stops the thread and frees the table.  NULL-safe. */
void fastfd_free(struct fastfd *ff);

#endif
