/* SPDX-License-Identifier: MIT */
/*
 * divvy.h: the client library of divvy, a quota and rate-limit service.
 *
 * A handle talks to divvyd over its Unix socket or TCP (the divvy line
 * protocol, docs/protocol.md) and, where the caller may map the host's
 * fast-path counter table (group divvy-fast), decides hits on rules marked
 * fast_path inside the calling process with no system call (docs/dev/shm.md).
 * Which path answered is reported in each result; the answers are the same.
 *
 * Errors: every function that can fail returns 0 (or a count) on success and
 * a negative errno on failure; divvy_errmsg() then says more.  Common codes:
 *   -ENOENT, -ECONNREFUSED  no daemon at the address
 *   -ETIMEDOUT              connect or request timeout (divvy_set_timeouts)
 *   -EPIPE, -ECONNRESET     the daemon went away mid-request (the next call
 *                           reconnects transparently)
 *   -EPROTO                 the daemon sent something unparseable
 *   -EINVAL                 bad arguments, or ERR bad-request from the daemon
 *   -E2BIG, -EMSGSIZE       too many keys / request line too long
 *   -EPERM                  ERR forbidden (admin verb from a non-admin peer)
 *   -EBUSY                  ERR busy (daemon at its connection limit)
 *   -ENOSYS                 ERR unknown-command (a daemon without the verb)
 *   -ENOSPC                 ERR no-counter (a privileged rule found no free
 *                           counter: the request was not counted)
 *   -EIO                    ERR unknown (daemon-internal error), or an ERR code
 *                           this library does not know
 *   -ENOTSUP                DIVVY_FAST_ONLY and the request needs the socket
 *
 * Thread-safety: a handle is used by one thread at a time (no internal
 * lock, so the fast path stays lock-free); give each thread its own handle.
 * Different handles are independent and may be used concurrently.  Do not
 * use a handle on both sides of fork(): the child opens its own.
 *
 * Keys and values: any bytes except NUL, '"', '\n' and '\r'; keys non-empty.
 * At most 32 distinct keys per request (DIVVY_MAX_KEYS).
 */
#ifndef DIVVY_H
#define DIVVY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DIVVY_EXPORT __attribute__((visibility("default")))
#define DIVVY_SENTINEL __attribute__((sentinel))
#else
#define DIVVY_EXPORT
#define DIVVY_SENTINEL
#endif

#define DIVVY_VERSION_MAJOR 0
#define DIVVY_VERSION_MINOR 1

/* divvy_open() flags: which path decides hits. */
#define DIVVY_AUTO        0u   /* fast path when permitted and the rule allows, else socket */
#define DIVVY_SOCKET_ONLY 1u   /* always ask the daemon */
#define DIVVY_FAST_ONLY   2u   /* hits only on the fast path; -ENOTSUP for anything else
                                  (divvy_reset and divvy_command still use the socket,
                                  and so do the unanswered REFILL hints of lease rules) */

#define DIVVY_MAX_KEYS    32
#define DIVVY_RULE_MAX    72   /* bytes of divvy_result.rule, NUL included */

/* Environment: DIVVY_ADDRESS replaces a NULL @address; DIVVY_PATH=socket|fast|auto
 * overrides the path flags (for tests and benchmarks); DIVVY_STATE_DIR names
 * the directory of the fast-path table (default: the Unix socket's directory). */
#define DIVVY_DEFAULT_ADDRESS "unix:/run/divvy/divvy.sock"

struct divvy;

struct divvy_kv {
    const char *key;
    const char *value;
};

struct divvy_result {
    size_t size;                /* set by the caller: sizeof(struct divvy_result) */
    int allowed;                /* 1: allowed (TAKE: consumed; PEEK: available) */
    uint64_t credit;            /* credit left */
    uint64_t reset_seconds;     /* seconds until the quota resets / the next credit */
    char rule[DIVVY_RULE_MAX];  /* label (or id) of the rule that decided, "" if unknown */
    int fast_path;              /* 1: decided in this process; 0: by the daemon */
};

/* One request of a divvy_hit_many() batch. */
struct divvy_request {
    uint64_t amount;            /* credits to take; 0 means 1 */
    const struct divvy_kv *kv;
    size_t n_kv;
};

/*
 * Opens a handle on divvyd at @address ("unix:PATH", "tcp:HOST:PORT",
 * "tcp:[V6]:PORT", or NULL for $DIVVY_ADDRESS, else DIVVY_DEFAULT_ADDRESS);
 * @flags picks the path (DIVVY_AUTO, ...).  With DIVVY_AUTO, the fast path is
 * used when the table can be mapped; the socket is connected on first use.
 * On success *ret is a new handle the caller frees with divvy_close(); on
 * failure it is untouched.  -EINVAL (bad address or flags), -ENOMEM;
 * DIVVY_FAST_ONLY without a mappable table: -EACCES or -ENOENT.
 */
DIVVY_EXPORT int divvy_open(const char *address, unsigned flags, struct divvy **ret);

/* Closes the connection, unmaps the table, frees.  NULL-safe. */
DIVVY_EXPORT void divvy_close(struct divvy *h);

/*
 * Timeouts in milliseconds for connecting and for each request's reply (a
 * batch gets one request timeout as a whole); <= 0 keeps the current value.
 * Defaults: 1000 and 1000.  A dead daemon never hangs a caller longer.
 */
DIVVY_EXPORT int divvy_set_timeouts(struct divvy *h, int connect_ms, int request_ms);

/* HIT: consume one credit if available.  @res->size must be set. */
DIVVY_EXPORT int divvy_hit(struct divvy *h, const struct divvy_kv *kv, size_t n_kv,
                           struct divvy_result *res);

/* TAKE: consume @amount credits, all or nothing (1 .. 1000000000). */
DIVVY_EXPORT int divvy_take(struct divvy *h, uint64_t amount, const struct divvy_kv *kv,
                            size_t n_kv, struct divvy_result *res);

/*
 * DEBIT: charge @amount credits (1 .. 1000000000000) that were already
 * spent (bytes sent, tokens generated): always charged, even past what is
 * left, so the balance may go below zero; later hits are denied until the
 * window or bucket has paid the debt back (docs/protocol.md "DEBIT").
 * @res->allowed: the balance is still >= 0 after the charge; credit 0
 * while in debt.  Decided in-process on fast_path rules, like divvy_take().
 */
DIVVY_EXPORT int divvy_debit(struct divvy *h, uint64_t amount, const struct divvy_kv *kv,
                             size_t n_kv, struct divvy_result *res);

/* PEEK: report without consuming; allowed means at least one credit is left. */
DIVVY_EXPORT int divvy_peek(struct divvy *h, const struct divvy_kv *kv, size_t n_kv,
                            struct divvy_result *res);

/* RESET (admin: root or the admin group, Unix socket only): forget the
 * counters this request would touch.  -EPERM otherwise.  Always the socket. */
DIVVY_EXPORT int divvy_reset(struct divvy *h, const struct divvy_kv *kv, size_t n_kv,
                             struct divvy_result *res);

/*
 * Convenience form of divvy_hit(): key, value, key, value, ..., NULL.
 * Example: divvy_hitv(h, &res, "method", "GET", "path", "/status", NULL);
 * At most DIVVY_MAX_KEYS pairs (-E2BIG); a key without a value is -EINVAL.
 */
DIVVY_EXPORT int divvy_hitv(struct divvy *h, struct divvy_result *res, ...) DIVVY_SENTINEL;

/*
 * Takes @reqs[0..n) in order, pipelined: fast-path requests are decided
 * in-process, the others sent in one write and their replies read in one
 * pass.  Fills @results[i] (each with .size set by the caller).  Returns n,
 * or a negative errno if the batch failed as a whole (some results may then
 * be unset).  A request the daemon rejects makes the whole call fail with its
 * code after the others were answered.
 */
DIVVY_EXPORT int divvy_hit_many(struct divvy *h, const struct divvy_request *reqs, size_t n,
                                struct divvy_result *results);

/*
 * Sends one protocol line (no newline; e.g. "STATS", "RULES", "EXPLAIN a=b",
 * "RELOAD") and returns the reply: *ret_lines gets a malloc'd array of
 * malloc'd lines (the status line first, then the body lines of an "OK <n>"
 * reply), *ret_n their count; free with divvy_lines_free().  An ERR reply is
 * returned as lines too (and the call returns 0): callers print it.  Always
 * the socket.  For admin tools.
 */
DIVVY_EXPORT int divvy_command(struct divvy *h, const char *line, char ***ret_lines,
                               size_t *ret_n);
DIVVY_EXPORT void divvy_lines_free(char **lines, size_t n);

/* Why the last failing call on @h failed (never NULL; "" after success). */
DIVVY_EXPORT const char *divvy_errmsg(const struct divvy *h);

#ifdef __cplusplus
}
#endif

#endif
