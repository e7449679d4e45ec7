/* SPDX-License-Identifier: MIT */
/*
 * client_wire: what libdivvy says and hears on the wire (client_wire.c,
 * docs/protocol.md): addresses, requests normalised and formatted as the
 * daemon's parser would leave them, replies parsed strictly.  Pure
 * functions with no I/O and no allocation; the layer under client_conn
 * (libclient's layers: divvy -> memo -> fast -> handoff -> conn -> wire ->
 * err, docs/dev/client.md "The code").
 */
#ifndef DIVVY_CLIENT_WIRE_H
#define DIVVY_CLIENT_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "divvy.h"
#include "proto.h"

#define CLIENT_UNIX_PATH_MAX    108             /* sizeof(sun_path) */

/* ---- addresses --------------------------------------------------------- */

enum client_addr_kind { CLIENT_ADDR_UNIX = 1, CLIENT_ADDR_TCP };

struct client_addr {
    enum client_addr_kind kind;
    char path[CLIENT_UNIX_PATH_MAX];    /* unix: NUL-terminated, < 108 bytes */
    char host[256];                     /* tcp: without the brackets of [v6] */
    char port[8];                       /* tcp: decimal 1..65535 */
};

/* Parses "unix:PATH", "tcp:HOST:PORT" or "tcp:[V6]:PORT".  -EINVAL, -ENAMETOOLONG. */
int client_addr_parse(const char *s, struct client_addr *ret);

/* ---- requests ---------------------------------------------------------- */

/* A request normalised as the daemon's parser would leave it: keys sorted
 * bytewise, unique (the last value of a repeated key wins); strings borrowed
 * from the caller's divvy_kv array. */
struct client_req {
    unsigned n_kv;
    struct proto_kv kv[PROTO_KV_MAX];
    size_t pairs_len;           /* bytes of the " k=v" pairs as sent, quoting included */
};

/*
 * Checks and normalises @kv[0..@n_kv).  -EINVAL: NULL array, key or value, an
 * empty key, a '"', '\n' or '\r' in a key or value; -E2BIG: more than
 * PROTO_KV_MAX distinct keys; -EMSGSIZE: a string longer than a request line.
 * No allocation.
 */
int client_req_prepare(const struct divvy_kv *kv, size_t n_kv, struct client_req *ret);

/* Length of "@verb[ @amount] pairs\n" (@amount 0: none). */
size_t client_req_line_len(const struct client_req *req, const char *verb, uint64_t amount);

/* The same from the pairs' wire length (client_req.pairs_len). */
size_t client_line_len(const char *verb, uint64_t amount, size_t pairs_len);

/*
 * Measures NUL-terminated @s: its length in *@ret_len and the bytes it takes
 * on the wire (quoted when empty or holding whitespace or '=', as
 * proto_fmt_string() decides; always > 0).  -EINVAL for bytes the protocol
 * cannot carry ('"', '\n', '\r'), -EMSGSIZE when not shorter than a line.
 */
int client_wire_scan(const char *s, size_t *ret_len);

/*
 * Writes "@verb[ @amount] k=v ...\n" into @buf (NUL-terminated), quoting with
 * proto_fmt_string().  Returns the length without the NUL; -EMSGSIZE when the
 * line would exceed PROTO_LINE_MAX; -ENOBUFS when @size is too small.
 */
int client_req_format(const struct client_req *req, const char *verb, uint64_t amount,
                      char *buf, size_t size);

/* ---- replies ----------------------------------------------------------- */

/*
 * Parses one reply line (@line[0..@len), no newline) to HIT/TAKE/PEEK/RESET:
 * "OK <true|false> <credit> <secs>" with an optional fifth field naming the
 * rule.  Fills @res (allowed, credit, reset_seconds, rule; fast_path = 0).
 * An "ERR <code> "<reason>"" reply returns the errno of its code
 * (client_reply_errno) and writes "divvyd: <code>: <reason>" to @errbuf;
 * anything else is -EPROTO (with the line quoted in @errbuf).
 */
int client_reply_parse(const char *line, size_t len, struct divvy_result *res, char *errbuf,
                       size_t errsize);

/* 1 and *ret_n when @line is exactly "OK <n>" (a multi-line reply head), else 0. */
int client_reply_multi(const char *line, size_t len, unsigned long *ret_n);

/* errno for an ERR code: bad-request -EINVAL, too-many-keys -E2BIG,
 * line-too-long -EMSGSIZE, forbidden -EPERM, busy -EBUSY, reload-failed
 * -EINVAL, unknown-command -ENOSYS, no-counter -ENOSPC, unknown and any other
 * code -EIO. */
int client_reply_errno(const char *code, size_t len);

#endif
