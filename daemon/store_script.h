/* SPDX-License-Identifier: MIT */
/*
 * store_script: the Lua scripts divvyd runs in Redis (docs/redis.md
 * "Scripts") and, beside each script's text, the typed form of a call to
 * it: an argument struct that store_script_<name>() packs into the
 * script's ARGV, and the reply struct store_script_decode() makes of the
 * script's answer.  Nothing outside this module knows an ARGV position or
 * a reply index.  Also the SHA-1 that names a script for EVALSHA.
 *
 * The answers of DEL and SCAN, the plain commands the store also sends, are
 * decoded here too.
 *
 * Pure: no I/O, no state but the SHA-1s computed once; every function is
 * thread-safe.  daemon/store.c sends the calls and hands the replies back.
 */
#ifndef DIVVY_STORE_SCRIPT_H
#define DIVVY_STORE_SCRIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rules.h"
#include "table.h"

struct redisReply;

enum store_script {
    STORE_SCRIPT_WINDOW = 0,
    STORE_SCRIPT_BUCKET,
    STORE_SCRIPT_SLIDING,
    STORE_SCRIPT_LEASE,
    STORE_SCRIPT_ADHOC_TB,      /* RESP's RL.* (Smyte's token bucket) */
    STORE_SCRIPT_ADHOC_GCRA,    /* RESP's CL.THROTTLE (redis-cell's GCRA) */
    /* The window, bucket and sliding scripts' batched forms: one call
     * decides several requests on one key, in order (store_verdicts()). */
    STORE_SCRIPT_WINDOW_MANY,
    STORE_SCRIPT_BUCKET_MANY,
    STORE_SCRIPT_SLIDING_MANY,
    /* gcra and a continuous token bucket (store_script_gcra.c), plain and
     * batched; their arguments are a struct store_bucket_args. */
    STORE_SCRIPT_GCRA,
    STORE_SCRIPT_GCRA_MANY,
    STORE_SCRIPT_LOCKOUT,       /* lockout (store_script_lock.c); never batched */
    STORE_N_SCRIPTS
};

/* The window, token bucket and sliding window scripts take, peek or debit
 * (take always, into debt: docs/redis.md "Scripts"). */
enum store_op { STORE_TAKE = 0, STORE_PEEK, STORE_DEBIT };

/* divvy's fixed window: the key holds credit used, its PTTL the window. */
struct store_window_args {
    enum store_op op;
    uint64_t n;                 /* credit asked for */
    int64_t limit;              /* credit_limit: an argument, never stored */
    uint64_t reset_ms;          /* the window's length (a calendar window: its nominal one) */
    /* A calendar window (docs/redis.md "Calendar windows"): the period this
     * host's clock is in, [cal_start_ms, cal_end_ms), and the next one's end,
     * Unix ms; the script starts a window to the end of the period Redis's
     * clock is in (ARGV[5..7], only then).  0: a window of reset_ms. */
    int64_t cal_start_ms, cal_end_ms, cal_next_ms;
};

struct store_bucket_args {
    enum store_op op;
    uint64_t n;
    int64_t limit;              /* burst */
    uint64_t refill_amount;     /* >= 1 */
    uint64_t refill_ms;         /* >= 1 */
    bool strict;                /* an attempt while empty pushes the refill clock back */
    bool gcra;                  /* STORE_SCRIPT_GCRA: algorithm gcra (else a continuous
                                 * bucket): the reply's ms is until full */
};

struct store_sliding_args {
    enum store_op op;
    uint64_t n;
    int64_t limit;
    uint64_t window_ms;
};

/* lockout (common/algo_lock.h): the rule's limits as the host table takes them. */
struct store_lockout_args {
    enum store_op op;
    uint64_t n;
    struct table_limits lim;
};

/* A call of one of the verdict scripts, typed: @script (WINDOW, BUCKET,
 * SLIDING or LOCKOUT) names the member that holds its arguments. */
struct store_verdict_args {
    enum store_script script;
    union {
        struct store_window_args window;
        struct store_bucket_args bucket;
        struct store_sliding_args sliding;
        struct store_lockout_args lockout;
    };
};

/* A lease: credit for this host, counted as used in the window's key. */
struct store_lease_args {
    uint64_t want;              /* at most this much */
    int64_t limit;
    uint64_t reset_ms;          /* the window, when this call begins it */
    uint64_t divisor;           /* grants at most max(1, remainder / divisor) */
};

/* An ad-hoc token bucket call (Smyte's, daemon/adhoc.h's struct adhoc_tb):
 * the key holds {a = amount, t = last refill, Unix ms}. */
struct store_adhoc_tb_args {
    int64_t max, refill, refill_ms;
    int64_t take;               /* 0: only look (RL.GET) */
    bool strict;
    int64_t at_ms;              /* the client's AT (Unix ms); -1: Redis's TIME */
};

/* An ad-hoc GCRA call (redis-cell's, struct adhoc_gcra): the key holds the
 * theoretical arrival time {s = Unix seconds, n = nanoseconds}. */
struct store_adhoc_gcra_args {
    int64_t max_burst, count, period_s, quantity;
};

/* CL.THROTTLE's answer (struct adhoc_gcra_result's fields). */
struct store_gcra {
    bool limited;
    int64_t limit, remaining;
    int64_t retry_after_ns, reset_after_ns;
};

/* The answer of the window, token bucket and sliding window scripts. */
struct store_verdict {
    bool allowed;
    uint64_t credit;            /* left (tokens for a bucket) */
    uint64_t reset_ms;          /* to the reset, next refill or window end; 0: none */
};

/* The answer of the lease script. */
struct store_grant {
    uint64_t granted;           /* now this host's, counted as used in Redis */
    uint64_t remain;            /* the pool's remainder after the grant */
    uint64_t ttl_ms;            /* to the window's end */
    bool created;               /* this call began the window */
};

/* A batched call's answer (store_verdicts()): one verdict per request, in
 * the order asked; they live as long as the callback runs and
 * store_verdicts_get() reads them. */
struct store_verdicts {
    size_t n;
    const void *elements;       /* hiredis's; store_script.c's business */
};

/* SCAN's answer (store_scan(), store.c): the keys live as long as the
 * callback runs; store_keys_get() reads them. */
struct store_keys {
    uint64_t cursor;            /* the next SCAN's; 0: the scan is complete */
    size_t n;
    const void *elements;       /* hiredis's; store.c's business */
};

enum store_reply_kind {
    STORE_REPLY_VERDICT = 0,    /* window, token_bucket, sliding_window */
    STORE_REPLY_GRANT,          /* lease */
    STORE_REPLY_DELETED,        /* DEL */
    STORE_REPLY_KEYS,           /* SCAN */
    STORE_REPLY_TOKENS,         /* ad-hoc token bucket: tokens before the call */
    STORE_REPLY_GCRA,           /* ad-hoc GCRA */
    STORE_REPLY_VERDICTS,       /* a batched window, token_bucket or sliding_window */
};

/* What a request to the store answered: the member that @kind names. */
struct store_reply {
    enum store_reply_kind kind;
    union {
        struct store_verdict verdict;
        struct store_grant grant;
        uint64_t deleted;       /* keys removed */
        struct store_keys keys;
        int64_t tokens;
        struct store_gcra gcra;
        struct store_verdicts verdicts;
    };
};

/* ARGV of the longest script (lockout's: 12), and one argument's room. */
#define STORE_SCRIPT_ARGV_MAX   12
#define STORE_SCRIPT_ARG_SIZE   24

/* Requests in one batched call, at most, and one's room in its list. */
#define STORE_ITEMS_MAX         64
#define STORE_ITEM_SIZE         22      /* op letter, 20 digits, a space */

/*
 * The requests of a batched call (store_verdicts()), in arrival order,
 * packed as the script reads them (store_items_add()): a caller keeps it,
 * unchanged, until the call's callback has run (a NOSCRIPT retry sends it
 * again).  Start with n = 0 and len = 0.
 */
struct store_items {
    unsigned n;
    size_t len;
    char text[STORE_ITEMS_MAX * STORE_ITEM_SIZE + 1];
};

/* Appends a request to take, peek or debit @n: -ENOBUFS when @it holds
 * STORE_ITEMS_MAX already. */
int store_items_add(struct store_items *it, enum store_op op, uint64_t n);

/* A call in wire form: the script and its ARGV (KEYS[1] is the caller's),
 * then, for a batched call, @list (@list_len bytes, NULL for none) as one
 * last argument: a store_items' text, borrowed until the callback. */
struct store_call {
    enum store_script script;
    unsigned argc;
    char argv[STORE_SCRIPT_ARGV_MAX][STORE_SCRIPT_ARG_SIZE];
    const char *list;
    size_t list_len;
};

/* Pack @a into *ret, a call of the script of that name. */
void store_script_window(const struct store_window_args *a, struct store_call *ret);
void store_script_bucket(const struct store_bucket_args *a, struct store_call *ret);
/* The continuous algorithms' script (its text: store_script_gcra.c); @a->gcra picks
 * what the reply's ms says. */
void store_script_gcra(const struct store_bucket_args *a, struct store_call *ret);
void store_script_sliding(const struct store_sliding_args *a, struct store_call *ret);
void store_script_lease(const struct store_lease_args *a, struct store_call *ret);
void store_script_adhoc_tb(const struct store_adhoc_tb_args *a, struct store_call *ret);
void store_script_adhoc_gcra(const struct store_adhoc_gcra_args *a, struct store_call *ret);
void store_script_lockout(const struct store_lockout_args *a, struct store_call *ret);
/* store_script_lock.c: the lockout script's text. */
extern const char store_lua_lockout[];

/* @a's plain call (its op and n), or its batched form for @items (@a's op
 * and n unused; @items borrowed as store_call.list says). */
/* The verdict script of a rule of algorithm @algo (RULES_ALGO_*), with
 * credit @limit, table limits @lim (its window, or its refill) and @strict
 * (token bucket), deciding @op for @n. */
void store_verdict_args_of(enum rules_algo algo, int64_t limit, const struct table_limits *lim,
                           bool strict, enum store_op op, uint64_t n,
                           struct store_verdict_args *ret);
void store_script_verdict(const struct store_verdict_args *a, struct store_call *ret);
void store_script_verdicts(const struct store_verdict_args *a, const struct store_items *items,
                           struct store_call *ret);

/* Whether @a and @b call the same script with the same arguments but for
 * their op and n: requests a batched call may decide together. */
bool store_script_same(const struct store_verdict_args *a, const struct store_verdict_args *b);

/*
 * Decodes @r, the answer to a call of @script, into *ret (STORE_REPLY_VERDICT,
 * STORE_REPLY_GRANT, STORE_REPLY_VERDICTS for a batched form,
 * STORE_REPLY_TOKENS or STORE_REPLY_GCRA for an ad-hoc one).  A verdict is an
 * array of exactly 3 integers (a negative credit or time reads as 0), a
 * grant exactly 4 integers of which the first three are not negative, a
 * batch's answer 1 + 3k integers, the first k (1 <= k <= STORE_ITEMS_MAX; k
 * verdicts follow); the ad-hoc token bucket's one integer >= 0, the GCRA's 5
 * integers (limited 0|1, limit >= 1, remaining >= 0, retry, reset).  -EPROTO
 * for anything else: not what the script returns, so not an answer to trust.
 */
int store_script_decode(enum store_script script, const struct redisReply *r,
                        struct store_reply *ret);

/* DEL's answer (STORE_REPLY_DELETED: an integer >= 0) and SCAN's
 * (STORE_REPLY_KEYS: [decimal cursor, [key strings]]), the two plain
 * commands the store sends; -EPROTO for anything else. */
int store_script_decode_del(const struct redisReply *r, struct store_reply *ret);
int store_script_decode_scan(const struct redisReply *r, struct store_reply *ret);

/* Verdict @i (< @v->n) of a batched call's answer. */
void store_verdicts_get(const struct store_verdicts *v, size_t i, struct store_verdict *ret);

/* Key @i (< @k->n) of a SCAN reply, valid while the callback runs. */
void store_keys_get(const struct store_keys *k, size_t i, const char **ret_key,
                    size_t *ret_len);

/* The Lua source of @script, and its SHA-1 in hex as EVALSHA names it;
 * NULL for an unknown one. */
const char *store_script_source(enum store_script script);
const char *store_script_sha(enum store_script script);
/* "window", "token_bucket", "sliding_window", "lease", "adhoc_tb",
 * "adhoc_gcra", and the batched forms' "window_many", ...; "?" for another. */
const char *store_script_name(enum store_script script);

/* SHA-1 of @len bytes at @data as 40 hex digits plus NUL. */
void store_sha1_hex(const void *data, size_t len, char ret[41]);

#endif
