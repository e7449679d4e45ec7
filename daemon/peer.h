/* SPDX-License-Identifier: MIT */
/*
 * peer: who is at the other end of a Unix stream socket.  The one place
 * divvyd reads SO_PEERCRED and SO_PEERGROUPS (SO_PEERCRED alone names only
 * the primary group), for the admin group (conn.c) and the fast-path group
 * (fastfd.c).  Pure: no state, no logging, thread-safe.
 */
#ifndef DIVVY_PEER_H
#define DIVVY_PEER_H

#include <stdbool.h>
#include <sys/types.h>

#define PEER_GROUPS_MAX 256     /* supplementary groups looked at; more: not a member */

/*
 * The peer's uid in *ret_uid, and in *ret_member whether it is uid 0 or has
 * @gid as its primary or a supplementary group (@gid (gid_t)-1: only uid 0).
 * 0, or -errno when @fd has no peer credentials (not a Unix socket); the
 * outputs are untouched then.
 */
int peer_cred(int fd, gid_t gid, uid_t *ret_uid, bool *ret_member);

/* peer_cred(), and in *ret_pid the process that connected (when it did:
 * the decision log's record of who asked). */
int peer_cred_pid(int fd, gid_t gid, uid_t *ret_uid, bool *ret_member, pid_t *ret_pid);

#endif
