/* SPDX-License-Identifier: MIT */
/*
 * client: libdivvy's internals (never installed).  The handle, the address
 * and request/reply codec (client_wire.c), the socket connection with its
 * deadlines and transparent reconnect (client_conn.c) and the shared-memory
 * fast path (client_fast.c) with its memo of request shapes (client_memo.c).
 * divvy.c implements the public API of divvy.h on
 * top of them.  Everything here is for one handle used by one thread at a
 * time (divvy.h); nothing keeps global state and nothing logs.
 */
#ifndef DIVVY_CLIENT_H
#define DIVVY_CLIENT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "divvy.h"
#include "proto.h"
#include "rules.h"
#include "table.h"

#define CLIENT_ERRMSG_MAX       512
#define CLIENT_TIMEOUT_DEFAULT  1000            /* ms, connect and request */
#define CLIENT_STALE_MS         3000            /* heartbeat older than this: daemon gone */
#define CLIENT_REATTACH_MS      1000            /* ask divvyd for the memfds at most this often */
#define CLIENT_REMAP_RETRY_MS   100             /* back-off after a rules file failed to load */
#define CLIENT_HOT_ACTOR_MAX    32              /* actors a client_rule remembers prepared */
#define CLIENT_PREFETCH_FIRST   64              /* divvy_hit_many(): counters loaded up front, */
#define CLIENT_PREFETCH_AHEAD   16              /* then this many requests ahead */
#define CLIENT_HINT_SLOTS       64              /* REFILL hints remembered per handle */
#define CLIENT_HINT_MS          10              /* one REFILL per counter per this long */
#define CLIENT_REMAP_TRIES      4               /* ENOENT: the generation moved on meanwhile */
#define CLIENT_RULES_FILE_MAX   (256u << 20)    /* refuse larger rules.<generation> files */
#define CLIENT_REPLY_MAX        (64u << 20)     /* bytes of replies one call may buffer */
#define CLIENT_COMMAND_LINES    1000000         /* body lines of one OK <n> reply */
#define CLIENT_UNIX_PATH_MAX    108             /* sizeof(sun_path) */

/* v1 of struct divvy_result: the smallest @size the library accepts. */
#define CLIENT_RESULT_MIN_SIZE  sizeof(struct divvy_result)

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
 * (client_err_errno) and writes "divvyd: <code>: <reason>" to @errbuf;
 * anything else is -EPROTO (with the line quoted in @errbuf).
 */
int client_reply_parse(const char *line, size_t len, struct divvy_result *res, char *errbuf,
                       size_t errsize);

/* 1 and *ret_n when @line is exactly "OK <n>" (a multi-line reply head), else 0. */
int client_reply_multi(const char *line, size_t len, unsigned long *ret_n);

/* errno for an ERR code: bad-request -EINVAL, too-many-keys -E2BIG,
 * line-too-long -EMSGSIZE, forbidden -EPERM, busy -EBUSY, reload-failed
 * -EINVAL, unknown-command -ENOSYS, unknown and any other code -EIO. */
int client_err_errno(const char *code, size_t len);

/* ---- the handle -------------------------------------------------------- */

/* One compiled rule as the fast path needs it, filled at each remap. */
struct client_rule {
    struct rules_rule rr;       /* rules_get(), kept so a hit need not decode it */
    struct table_limits lim;    /* eval_limits() of rr */
    const char *id_str;         /* label or hex id, points into the rules */
    size_t id_len;              /* strlen(id_str), at most DIVVY_RULE_MAX - 1 */
    bool eligible;              /* fast_path, or zero semantics: decidable in-process */
    bool lease;                 /* a lease rule spent in-process (lim.lease set): TAKE only,
                                 * and only before any other counter on the path */
    /* The last counter this handle hit for the rule, prepared for the
     * mapped fast table (table_key_prepare()): a hot key skips SipHash. */
    bool hot_valid;
    uint8_t hot_len;
    char hot_actor[CLIENT_HOT_ACTOR_MAX];
    struct table_kw hot_kw;
};

struct client_memo;

struct client_fast {
    char dir[PATH_MAX];         /* the state directory (divvyd's FAST answer); "" unknown */
    struct table *table;        /* the mapped table memfd with its control page, or NULL */
    struct rules *rules;        /* rules of generation gen, or NULL */
    struct client_rule *rule;   /* per compiled rule, rules_count() entries */
    uint64_t gen;               /* generation of @rules (0: none loaded) */
    uint64_t max_gen;           /* the largest generation ever loaded: a smaller one is
                                 * "no rules" (generations only grow, docs/shm.md) */
    uint64_t loads;             /* rules loaded so far: a new number for each remap, even
                                 * when a restarted daemon reuses a generation number */
    bool privileged;            /* euid 0 on a Unix socket address, sampled at open */
    uint64_t attach_at_ms;      /* earliest next table_attach() attempt */
    uint64_t remap_at_ms;       /* earliest next rules load after a failure */
    uint64_t remap_failed_gen;  /* the generation that failed to load */
    uint64_t unflushed_hits;    /* decided here, not yet added to the table's fast_hits */
    struct client_memo *memo;   /* request shapes seen, or NULL (client_memo.c) */
    /* REFILL hints sent lately: a hash of (rule, actor) and until when no
     * other is sent for it (client_fast.c). */
    uint64_t hint_key[CLIENT_HINT_SLOTS];
    uint64_t hint_until[CLIENT_HINT_SLOTS];
};

struct divvy {
    unsigned mode;              /* DIVVY_AUTO, DIVVY_SOCKET_ONLY or DIVVY_FAST_ONLY */
    struct client_addr addr;
    int connect_ms, request_ms;

    int fd;                     /* -1: not connected */
    bool fd_used;               /* a reply was read on fd: it may have gone stale since */
    char *rbuf;                 /* replies of the current call */
    size_t rlen, rcap;
    char *wbuf;                 /* requests of the current call */
    size_t wlen, wcap;
    uint8_t *batch_sock;        /* divvy_hit_many: which requests went to the socket */
    size_t batch_cap;

    struct client_fast fast;
    char errmsg[CLIENT_ERRMSG_MAX];
};

/* Formats the handle's error message; returns @r for "return client_err(...)". */
int client_err(struct divvy *h, int r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- socket (client_conn.c) -------------------------------------------- */

enum client_expect {
    CLIENT_EXPECT_LINES,        /* one reply line per request */
    CLIENT_EXPECT_COMMAND,      /* one request; "OK <n>" brings n more lines */
};

/*
 * Sends h->wbuf[0..h->wlen) holding @n_req requests and reads their replies
 * into h->rbuf[0..h->rlen) (whole lines, newlines included), connecting first
 * if needed.  Reading and writing overlap, so a long pipeline cannot
 * deadlock.  One request deadline (h->request_ms) covers the exchange.  If a
 * connection reused from an earlier call fails at send time or reaches EOF
 * before any reply byte, the daemon probably restarted: reconnect and resend
 * once.  On any failure the connection is closed (its state is unknown).
 * -ETIMEDOUT, -ECONNRESET, -EPIPE, -ENOENT, -ECONNREFUSED, -EPROTO, ...
 */
int client_conn_exchange(struct divvy *h, size_t n_req, enum client_expect expect);
void client_conn_close(struct divvy *h);

/* A new blocking-connect Unix stream socket to h->addr (a unix: address),
 * connected within h->connect_ms, in *@ret_fd (SOCK_CLOEXEC).  -errno with
 * h->errmsg set. */
int client_conn_unix(struct divvy *h, int *ret_fd);

/* Milliseconds from now to @deadline (clock_now_ms()), 0 once past, for poll(). */
int client_conn_remaining(uint64_t deadline);

/* ---- the fast path's hand-over (client_handoff.c) ------------------------ */

/*
 * Asks divvyd for the fast path (FAST, docs/protocol.md) on a connection of
 * its own to h->addr (unix: only), within h->connect_ms + h->request_ms:
 * on "OK fast <dir>" with exactly two descriptors, *@ret_table_fd is the
 * table's memfd, *@ret_ctl_fd the control page's, and @dir (@dir_size bytes)
 * the state directory holding the rules files.  Any other descriptors are
 * closed.  -EOPNOTSUPP (a tcp: address), -EACCES (ERR forbidden: not in the
 * fast group), -EPROTO (a malformed reply or not two descriptors),
 * -ETIMEDOUT, -errno; h->errmsg says more.
 */
int client_handoff_fast(struct divvy *h, int *ret_table_fd, int *ret_ctl_fd, char *dir,
                        size_t dir_size);

/*
 * Sends @line (a REFILL hint, newline included; divvyd never answers it)
 * without waiting, connecting first if needed.  Best effort: a hint that
 * cannot be sent is dropped (the lease then runs dry and the hit that finds
 * it empty goes to divvyd, which refills).  Leaves h->errmsg empty.
 */
void client_conn_hint(struct divvy *h, const char *line, size_t len);
/* Makes room for @extra more bytes in h->wbuf.  -ENOMEM. */
int client_wbuf_reserve(struct divvy *h, size_t extra);

/* ---- fast path (client_fast.c) ----------------------------------------- */

/* Asks divvyd for the fast path's memfds (FAST), maps them and loads the
 * current rules file.  -EOPNOTSUPP (tcp:), -EACCES (not in the fast group),
 * -ENOENT, -EBADMSG, ... (the fast path stays off; AUTO retries later). */
int client_fast_open(struct divvy *h);
void client_fast_close(struct client_fast *f);

/*
 * Decides @req in-process when the fast path may: returns 1 with @res filled
 * (fast_path = 1), or 0 when the request must go to the socket, with a static
 * reason in *@ret_why (h->errmsg may say more).  @kv[0..@n_kv) are the
 * caller's pairs @req was made from: a decided request's shape is
 * remembered for client_memo_decide().  No system call and no allocation
 * unless the rules generation changed, the table must be re-attached or the
 * memo is created.
 */
int client_fast_decide(struct divvy *h, const struct divvy_kv *kv, size_t n_kv,
                       const struct client_req *req, enum table_op op, uint64_t amount,
                       struct divvy_result *res, const char **ret_why);

/*
 * Whether every rule of @path (rules_match()'s indexes) can be decided
 * in-process for @op: each is eligible, and a lease rule is met only by a
 * TAKE and before any rule that touches a counter (a lease may send the hit
 * to divvyd, which must not find a counter already charged here).
 */
bool client_fast_path_ok(const struct client_fast *f, const uint32_t *path, size_t n_path,
                         enum table_op op);

/*
 * Whether the fast path can decide now with rules of generation h->fast.gen
 * (mapping the table or loading new rules first if needed): 1 yes, 0 no
 * (*@ret_why says why).  @now: clock_coarse_ms().
 */
int client_fast_ready(struct divvy *h, uint64_t now, const char **ret_why);

/*
 * Decides along @path (rules_match()'s indexes, every one eligible) and
 * fills @res: 1 decided, 0 not (*@ret_why).  Each rule's actor comes from
 * @rq (the sorted request) when it is not NULL, else from @actor_kv: for the
 * path's i-th rule, @actor_kv[i * RULES_ACTOR_KEYS_MAX + j] is the pair of
 * its j-th actor key, NULL when absent.
 */
int client_fast_run(struct divvy *h, const uint32_t *path, size_t n_path,
                    const struct rules_req *rq, const struct proto_kv *const *actor_kv,
                    enum table_op op, uint64_t amount, uint64_t now, struct divvy_result *res,
                    const char **ret_why);

/* Starts loading the fast-table slots of the counters on @path (actors as
 * for client_fast_run() without @rq), preparing each rule's hot key on the
 * way, and returns without waiting: divvy_hit_many() calls it a few requests
 * ahead so that their cache and TLB misses overlap.  Decides and changes
 * nothing that a hit would not; a no-op without a mapped table. */
void client_fast_prefetch(struct divvy *h, const uint32_t *path, size_t n_path,
                          const struct proto_kv *const *actor_kv);

/* ---- the memo of request shapes (client_memo.c) -------------------------
 *
 * Which rules a request matches depends only on its keys (in order, with
 * any repeats), the values of keys some rule matches by value (exact or
 * glob), and the caller's privilege.  The memo maps that shape to the
 * rules_match() path and to where each rule's actor values sit among the
 * caller's pairs, so a repeated shape skips validation-by-sorting and the
 * matcher: its keys and matched values are compared byte for byte with the
 * remembered ones (which were checked when learned), and the other values are
 * checked for bytes the protocol cannot carry.  Forgotten when the rules
 * generation changes.  Requests with repeated keys are never remembered.
 */

/* 1: decided from the memo (@res filled), 0: not remembered or not
 * decidable here; the caller goes the long way, which sets any error. */
int client_memo_decide(struct divvy *h, const struct divvy_kv *kv, size_t n_kv, const char *verb,
                       uint64_t wire_amount, enum table_op op, uint64_t amount,
                       struct divvy_result *res);

/* Whether @kv's shape is remembered and the request is valid as a
 * "@verb [@wire_amount] pairs" line: true means client_req_prepare() and the
 * line length check would accept it (a cheaper check for divvy_hit_many()'s
 * all-or-nothing pass); false means nothing (go the long way).  With
 * @prefetch, a remembered request's counters are prefetched as well
 * (client_fast_prefetch()). */
bool client_memo_check(struct divvy *h, const struct divvy_kv *kv, size_t n_kv, const char *verb,
                       uint64_t wire_amount, bool prefetch);

/* Prefetches the counters of @kv when its shape is remembered
 * (client_fast_prefetch()); validates nothing and decides nothing. */
void client_memo_prefetch(struct divvy *h, const struct divvy_kv *kv, size_t n_kv);

/* Remembers the shape of @kv[0..@n_kv) whose fast-path rule path is
 * @path[0..@n_path) (every rule eligible).  Best effort: a shape that does
 * not fit is simply not remembered. */
void client_memo_learn(struct divvy *h, const struct divvy_kv *kv, size_t n_kv,
                       const uint32_t *path, size_t n_path);

/* Frees the memo (NULL-safe). */
void client_memo_free(struct client_memo *m);

#endif
