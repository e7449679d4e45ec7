/* SPDX-License-Identifier: MIT */
/*
 * fast_fds: what libdivvy does at open, by hand, for tests of the fast
 * path's trust model (docs/protocol.md FAST, docs/dev/shm.md "Memfds and
 * seals"): one raw "FAST\n" on a new Unix connection, the reply line and any
 * SCM_RIGHTS descriptors read with recvmsg(), so a test can look at exactly
 * what divvyd handed over (or did not).  Raw syscalls only: usable in a
 * child that dropped privileges (fast_fds.c).
 */
#ifndef DIVVY_TEST_FAST_FDS_H
#define DIVVY_TEST_FAST_FDS_H

#define FAST_FDS_MAX    8

/* Up to FAST_FDS_MAX descriptors received; *n_fds says how many. */
struct fast_reply {
    char line[512];             /* the reply line, without its newline */
    int fds[FAST_FDS_MAX];
    int n_fds;
    int ctrunc;                 /* MSG_CTRUNC was seen */
};

/* Connects to the Unix socket @path, sends @req (a whole line) and reads
 * one reply line with its descriptors within @timeout_ms.  0 or -errno. */
int fast_fds_ask(const char *path, const char *req, int timeout_ms, struct fast_reply *ret);

/* FAST on @path: 0 with the table's and the control page's memfds. */
int fast_fds_get(const char *path, int *ret_table, int *ret_ctl);

#endif
