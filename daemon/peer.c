/* SPDX-License-Identifier: MIT */
/*
 * peer: a Unix socket peer's uid and group membership (see peer.h).
 */
#include <errno.h>
#include <sys/socket.h>

#include "peer.h"

int peer_cred(int fd, gid_t gid, uid_t *ret_uid, bool *ret_member)
{
    pid_t pid;

    return peer_cred_pid(fd, gid, ret_uid, ret_member, &pid);
}

int peer_cred_pid(int fd, gid_t gid, uid_t *ret_uid, bool *ret_member, pid_t *ret_pid)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    gid_t groups[PEER_GROUPS_MAX];
    socklen_t glen = sizeof(groups);
    bool member = false;

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    if (cred.uid == 0 || (gid != (gid_t)-1 && cred.gid == gid)) {
        member = true;
    } else if (gid != (gid_t)-1 &&
               getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0) {
        for (size_t i = 0; i < glen / sizeof(gid_t) && !member; i++)
            member = groups[i] == gid;
    }
    *ret_uid = cred.uid;
    *ret_member = member;
    *ret_pid = cred.pid;
    return 0;
}
