/* SPDX-License-Identifier: MIT */
/*
 * client_handoff: libdivvy asks divvyd for the fast path's memfds
 * (client_handoff.c, docs/protocol.md FAST) on a connection of its own made
 * with client_conn.  Used by client_fast (libclient's layers: divvy -> memo
 * -> fast -> handoff -> conn -> wire -> err).
 */
#ifndef DIVVY_CLIENT_HANDOFF_H
#define DIVVY_CLIENT_HANDOFF_H

#include <stddef.h>

#include "client_conn.h"

/*
 * Asks divvyd for the fast path (FAST, docs/protocol.md) on a connection of
 * its own to c->addr (unix: only), within c->connect_ms + c->request_ms:
 * on "OK fast <dir>" with exactly two descriptors, *@ret_table_fd is the
 * table's memfd, *@ret_ctl_fd the control page's, and @dir (@dir_size bytes)
 * the state directory holding the rules files.  Any other descriptors are
 * closed.  -EOPNOTSUPP (a tcp: address), -EACCES (ERR forbidden: not in the
 * fast group), -EPROTO (a malformed reply or not two descriptors),
 * -ETIMEDOUT, -errno; c->err says more.  @c's own connection is not used.
 */
int client_handoff_fast(struct client_conn *c, int *ret_table_fd, int *ret_ctl_fd, char *dir,
                        size_t dir_size);

#endif
