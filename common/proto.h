/* SPDX-License-Identifier: MIT */
/*
 * proto: divvy protocol v1 codec (docs/protocol.md).  Parses one request line
 * into a struct proto_req (no allocation: decoded strings live in the
 * request's own buffer) and formats replies.  Pure functions, thread-safe,
 * never logs.
 */
#ifndef DIVVY_PROTO_H
#define DIVVY_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PROTO_LINE_MAX   4096   /* bytes of one request line, newline included */
#define PROTO_KV_MAX     32     /* distinct keys in one request */
#define PROTO_REPLY_MAX  512    /* longest one-line reply proto_fmt_* writes */
#define PROTO_TAKE_MAX   1000000000ULL  /* largest n TAKE accepts */
#define PROTO_DEBIT_MAX  1000000000000ULL       /* largest n DEBIT accepts (10^12) */
/* divvyd's socket for root and admins beside each line-protocol Unix socket
 * PATH: PATH followed by this (docs/daemon.md "The privileged lane"). */
#define PROTO_ROOT_SUFFIX ".root"

enum proto_verb {
    PROTO_NONE = 0,     /* empty line: no reply at all (as divvy) */
    PROTO_HIT,
    PROTO_TAKE,
    PROTO_PEEK,
    PROTO_RESET,        /* admin */
    PROTO_EXPLAIN,
    PROTO_RULES,
    PROTO_STATS,
    PROTO_RELOAD,       /* admin */
    PROTO_PING,
    PROTO_QUIT,
    PROTO_COUNTERS,     /* admin: list live counters (divvyctl top/locked) */
    PROTO_REFILL,       /* libdivvy's lease refill hint: never answered, not even ERR */
    PROTO_FAST,         /* libdivvy asks for the fast path's memfds (Unix socket, SCM_RIGHTS) */
    PROTO_DROPIN,       /* admin: the rules service (include_dir's drop-ins) */
    PROTO_DEBIT,        /* TAKE that always charges: the balance may go below zero */
    PROTO_REPORT,       /* libdivvy reports a fast-path decision: never answered, not even ERR */
    PROTO_N_VERBS       /* how many: not a verb */
};

enum proto_err {
    PROTO_E_NONE = 0,
    PROTO_E_UNKNOWN_COMMAND,    /* "unknown-command" (divvy) */
    PROTO_E_UNKNOWN,            /* "unknown" (divvy) */
    PROTO_E_BAD_REQUEST,        /* "bad-request": malformed key=value syntax */
    PROTO_E_TOO_MANY_KEYS,      /* "too-many-keys": more than PROTO_KV_MAX */
    PROTO_E_LINE_TOO_LONG,      /* "line-too-long": over PROTO_LINE_MAX */
    PROTO_E_FORBIDDEN,          /* "forbidden": admin verb from a non-admin peer */
    PROTO_E_RELOAD_FAILED,      /* "reload-failed": new config rejected, old one kept */
    PROTO_E_BUSY,               /* "busy": connection or output limit reached */
    PROTO_E_NO_COUNTER,         /* "no-counter": a privileged rule found no free counter */
};

/* One request key/value pair; both strings are NUL-terminated and point
 * into the owning proto_req's buf. */
struct proto_kv {
    const char *key;
    const char *value;
    uint16_t key_len;
    uint16_t value_len;
};

/* REPORT's fields before its pairs (docs/protocol.md "REPORT"): what a
 * fast-path client decided in its own process.  Its n is proto_req.amount. */
struct proto_report {
    uint64_t mono_ms;           /* CLOCK_MONOTONIC ms the client decided at */
    uint64_t credit;
    uint64_t reset_s;
    uint64_t rule_id;           /* the rule the answer named (rules_rule.id) */
    enum proto_verb op;         /* PROTO_TAKE, PROTO_PEEK or PROTO_DEBIT */
    bool allowed;
};

struct proto_req {
    enum proto_verb verb;
    enum proto_err err;         /* PROTO_E_NONE, or why the line is rejected; check it
                                 * before verb (PROTO_NONE when no verb was recognised) */
    const char *reason;         /* text for err (no '"' or newline), or NULL: static, or
                                 * for unknown-command divvy's "Unrecognized command: WORD"
                                 * in buf */
    uint64_t amount;            /* TAKE n, DEBIT n, REPORT n; 1 for HIT/PEEK */
    struct proto_report report; /* REPORT only */
    unsigned n_kv;
    /* Sorted by key (bytewise), duplicates removed: the last value wins. */
    struct proto_kv kv[PROTO_KV_MAX];
    /* proto_parse(): the line's copy, each string NUL-terminated in place (or
     * the unknown-command reason); other producers of requests lay it out as
     * they need. */
    char buf[PROTO_LINE_MAX + PROTO_KV_MAX * 2];
};

/*
 * Parses the first line in @data[0..@len).  Returns:
 *   0            no newline yet and @len < PROTO_LINE_MAX: read more;
 *   -EMSGSIZE    no newline within PROTO_LINE_MAX bytes: the caller replies
 *                ERR line-too-long and discards input up to the next newline;
 *   > 0          bytes consumed, newline included.  *req is filled: verb
 *                PROTO_NONE for an empty line (no reply), or req->err set for
 *                a line that gets an ERR reply.  A trailing CR is stripped;
 *                command words are case-insensitive.
 * Grammar (divvy's): unquoted strings [^"=\s]+, quoted "[^"\n]*"; keys and
 * values may be either; "k=" is an empty value.  TAKE takes a decimal
 * 1..PROTO_TAKE_MAX before its pairs, DEBIT one of 1..PROTO_DEBIT_MAX;
 * REPORT seven fields (proto_fmt_report(), into req->report and amount).
 */
ssize_t proto_parse(const char *data, size_t len, struct proto_req *req);

/*
 * Writes one REPORT line, newline included, NUL-terminated, into @buf of
 * @size bytes: "REPORT <mono_ms> <TAKE|PEEK|DEBIT> <n> <0|1> <credit>
 * <reset_s> <16 hex digits> k=v ...\n" with @r's fields, @n, and the pairs
 * @kv[0..@n_kv) quoted as proto_fmt_string() does.  Returns its length, or
 * -EMSGSIZE when it would exceed PROTO_LINE_MAX (or @size), -EINVAL for an
 * op other than TAKE, PEEK or DEBIT.  proto_parse() reads back exactly
 * these fields.
 */
int proto_fmt_report(char *buf, size_t size, const struct proto_report *r, uint64_t n,
                     const struct proto_kv *kv, unsigned n_kv);

/* Returns the value of @key in @req, or NULL.  Binary search over kv. */
const struct proto_kv *proto_find(const struct proto_req *req, const char *key, size_t key_len);

/* Wire code for @err ("unknown-command", "bad-request", ...). */
const char *proto_err_code(enum proto_err err);

/*
 * Reply formatters: write one line, newline included, NUL-terminated, into
 * @buf of @size bytes (>= PROTO_REPLY_MAX is always enough) and return its
 * length without the NUL, or -ENOBUFS.
 *   proto_fmt_ok:  "OK true 57 60\n"
 *   proto_fmt_err: "ERR <code> \"<reason>\"\n" (reason dropped when NULL;
 *                  '"' and control bytes in it are replaced by '_')
 *   proto_fmt_multi_head: "OK <n>\n", followed by exactly n lines.
 */
int proto_fmt_ok(char *buf, size_t size, bool allowed, uint64_t credit, uint64_t reset_seconds);
/* "OK true 57 60 <rule>\n": the reply of TAKE, DEBIT, PEEK and RESET, whose fifth
 * field names the deciding rule (its label, or its 16-hex-digit id); @rule
 * must be a protocol word without spaces or quotes. */
int proto_fmt_ok_rule(char *buf, size_t size, bool allowed, uint64_t credit,
                      uint64_t reset_seconds, const char *rule);
int proto_fmt_err(char *buf, size_t size, enum proto_err err, const char *reason);
int proto_fmt_multi_head(char *buf, size_t size, unsigned n_lines);

/*
 * Appends @s to @buf as a protocol string: unquoted when it matches
 * [^"=\s]+, else quoted (a '"' or newline inside becomes '_', as the
 * protocol cannot carry them).  Returns bytes written (NUL excluded) or
 * -ENOBUFS.  Used by RULES/EXPLAIN output and clients building requests.
 */
int proto_fmt_string(char *buf, size_t size, const char *s, size_t len);

#endif
