/* SPDX-License-Identifier: MIT */
/*
 * resp: the Redis protocol's version 2 (RESP2) codec, as divvyd's "resp:"
 * listeners speak it (docs/resp.md).  Parses one command, a multibulk array
 * of bulk strings or an inline line, from a connection's input buffer
 * without copying or allocating (the arguments point into the buffer), and
 * formats replies.  Every size a peer declares is checked against a hard
 * limit before anything is waited for, so a command never needs more than
 * RESP_CMD_MAX bytes of buffer.  Pure functions, thread-safe, never logs;
 * the front-end and its commands are resp_cmd.c.
 */
#ifndef DIVVY_RESP_H
#define DIVVY_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto.h"

#define RESP_ARGS_MAX    128            /* arguments of one command, its name included */
#define RESP_BULK_MAX    PROTO_LINE_MAX /* bytes of one argument */
#define RESP_INLINE_MAX  PROTO_LINE_MAX /* bytes of one inline command line */
#define RESP_CMD_MAX     8000           /* bytes of one whole command on the wire */
#define RESP_HEADER_MAX  32             /* "*<n>\r\n" or "$<n>\r\n" */

/* One command; argv[i] points into the parsed data (not NUL-terminated). */
struct resp_cmd {
    unsigned argc;              /* 0: nothing to answer (an empty line, "*0") */
    const char *argv[RESP_ARGS_MAX];
    size_t len[RESP_ARGS_MAX];
};

/*
 * Parses the first command in @data[0..@len).  Returns:
 *   > 0        bytes consumed; *cmd holds the command (argc 0: no reply);
 *   0          incomplete: read more (never with RESP_CMD_MAX bytes or more);
 *   -EPROTO    malformed, or over a limit: *ret_why is Redis's wording of
 *              the error ("Protocol error: invalid bulk length"); the
 *              connection answers it and closes.
 * A command starting with '*' is multibulk (arrays of bulk strings only: a
 * nested array is malformed); anything else is an inline command, split on
 * spaces and tabs (no quoting), ended by "\n" or "\r\n".
 */
ssize_t resp_parse(const char *data, size_t len, struct resp_cmd *cmd, const char **ret_why);

/* True when argument @i of @cmd equals @s, ASCII case-insensitively. */
bool resp_arg_is(const struct resp_cmd *cmd, unsigned i, const char *s);

/*
 * Argument @i as a decimal integer in [@min, @max] (an optional '-', digits
 * only): 0 and *ret, or -EINVAL.
 */
int resp_arg_int(const struct resp_cmd *cmd, unsigned i, int64_t min, int64_t max,
                 int64_t *ret);

/*
 * Reply formatters: each writes one RESP2 value into @buf of @size bytes
 * (NUL-terminated) and returns its length without the NUL, or -ENOBUFS.
 *   resp_fmt_simple: "+<s>\r\n"     resp_fmt_error: "-<s>\r\n"
 *   resp_fmt_int:    ":<v>\r\n"     resp_fmt_bulk:  "$<len>\r\n<s>\r\n"
 *   resp_fmt_array:  "*<n>\r\n" (followed by n values)
 * @s of simple and error lose CR and LF (replaced by spaces).
 */
int resp_fmt_simple(char *buf, size_t size, const char *s);
int resp_fmt_error(char *buf, size_t size, const char *s);
int resp_fmt_int(char *buf, size_t size, int64_t v);
int resp_fmt_bulk(char *buf, size_t size, const char *s, size_t len);
int resp_fmt_array(char *buf, size_t size, unsigned n);

/* divvy's error @err as a RESP error: "-ERR <code> <reason>\r\n" (the
 * protocol's code, docs/protocol.md "Errors"; reason dropped when NULL). */
int resp_fmt_proto_err(char *buf, size_t size, enum proto_err err, const char *reason);

/* A hit's reply (DIVVY.HIT, DIVVY.TAKE, DIVVY.PEEK): the array
 * [allowed (1 or 0), credit, reset_seconds, rule]. */
int resp_fmt_hit(char *buf, size_t size, bool allowed, uint64_t credit, uint64_t reset_s,
                 const char *rule);

#endif
