/* SPDX-License-Identifier: MIT */
/*
 * adhoc: the buckets RESP clients name themselves (docs/resp.md "Ad-hoc
 * buckets"): Smyte's token buckets (RL.REDUCE, RL.GET) and redis-cell's GCRA
 * (CL.THROTTLE).  They live in a table of their own, in divvyd's memory, so
 * however many keys clients invent they never take a slot of the rule
 * counters' tables, least of all the privileged one.  A bucket is found by a
 * keyed SipHash-128 of its key and parameters (a per-process random secret:
 * peers cannot aim collisions); one whose state has become the same as no
 * bucket at all (full again, GCRA's TAT passed) is dropped when next met, or
 * by adhoc_sweep().  Times are Unix time (as Smyte's and redis-cell's, so a
 * client's AT and divvyd's clock agree), and the table can be saved and
 * loaded across a restart (adhoc_save(), adhoc_load()).  With a Redis store
 * the buckets live in Redis instead (resp_rl.c); this table then answers
 * only under on_redis_error = local, and holds a slot for each key a peer
 * makes there (adhoc_claim()), which bounds them by the peer's share.
 *
 * Who may hold how much (docs/resp.md "Shares, reserve and eviction"): each
 * bucket is charged to the peer that created it (struct adhoc_peer: a uid on
 * a Unix socket, a source address on TCP).  An unprivileged peer holds at
 * most its share (per_peer buckets: past it, its own least recently used
 * bucket gives its slot to the new one); all unprivileged peers together
 * hold at most the capacity less the reserve; when that is taken, a new
 * bucket takes the least recently used bucket of the peer holding the most
 * (its own, when that is the asker).  Privileged peers (root, the admin
 * group) may use every slot, the reserve included, and their buckets are
 * never taken for an unprivileged peer's.  So no unprivileged peer can make
 * another peer's command fail, and root always gets a bucket.
 *
 * The table is split in shards (up to 64, by the bucket's hash), each under
 * its own mutex with its own share of every number above: thread-safe.  The
 * algorithms themselves (adhoc_tb_step(), adhoc_gcra_step(), in
 * adhoc_algo.c) are pure.
 */
#ifndef DIVVY_ADHOC_H
#define DIVVY_ADHOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ADHOC_SLOTS_DEFAULT   65536
#define ADHOC_RESERVE_DIV     16        /* default reserve: 1/16 of the capacity */
#define ADHOC_PER_PEER_DIV    8         /* default share: 1/8 of what is not reserved */
/* The longest refill time (RL.*) or period (CL.THROTTLE) divvyd accepts:
 * 31 days.  Longer ones are refused (resp_rl.c), not capped. */
#define ADHOC_PERIOD_MAX_MS   (31LL * 24 * 3600 * 1000)
/* How far ahead of divvyd's Unix clock an AT may be: 60 s (clock skew
 * between hosts, not a way to spend tomorrow's tokens today).  Later ones
 * are refused (adhoc_at_check()). */
#define ADHOC_AT_AHEAD_MS     60000LL

struct adhoc;

/* The two kinds of bucket, for the counts of adhoc_count(). */
enum adhoc_kind { ADHOC_RL = 0, ADHOC_CL, ADHOC_N_KINDS };

/* ---- Smyte's token bucket (RL.REDUCE, RL.GET) --------------------------------------- */

struct adhoc_tb {
    int64_t max;                /* tokens the bucket holds, >= 1 */
    int64_t refill;             /* tokens added each refill, >= 1 */
    int64_t refill_ms;          /* time between refills, >= 1 */
    int64_t take;               /* tokens to take; 0: only look (RL.GET) */
    bool strict;                /* an empty bucket restarts its refill clock */
};

/* A bucket's state: tokens and when they were last refilled. */
struct adhoc_tb_state {
    int64_t amount;
    int64_t refilled_ms;
};

/*
 * One call at @now_ms (Unix time: the client's AT, or divvyd's clock) on
 * the bucket whose state is *@st (@exists false: a new bucket, full).
 * Returns the tokens the bucket held before this call, after its pending
 * refills; it takes @p->take only when that is enough (the call is allowed
 * iff the return value >= take).  *@st becomes the new state; *ret_idle_ms
 * when the bucket will be full again, on the call's clock.  Pure.
 */
int64_t adhoc_tb_step(const struct adhoc_tb *p, bool exists, int64_t now_ms,
                      struct adhoc_tb_state *st, int64_t *ret_idle_ms);

/*
 * Whether a client's AT (@at_ms, Unix ms) may be used when divvyd's Unix
 * clock reads @now_ms: 0, or -ERANGE when it is negative or more than
 * ADHOC_AT_AHEAD_MS ahead.  Any time in the past is fine (replaying
 * history).  Pure.
 */
int adhoc_at_check(int64_t at_ms, int64_t now_ms);

/*
 * When a bucket whose state is the same as none from @idle_ms on the
 * call's clock (@at_ms) may be forgotten, on divvyd's clock (@now_ms):
 * @idle_ms, plus how far @at_ms lies in the past, so a bucket replayed with
 * an old AT lives as long in real time as it needs on its own clock.  The
 * Redis scripts expire their keys by the same rule.  Saturates.  Pure.
 */
int64_t adhoc_expire_ms(int64_t idle_ms, int64_t at_ms, int64_t now_ms);

/* ---- redis-cell's GCRA (CL.THROTTLE) ---------------------------------------------- */

struct adhoc_gcra {
    int64_t max_burst;          /* >= 0 */
    int64_t count;              /* per period, >= 1 */
    int64_t period_s;           /* >= 1 */
    int64_t quantity;           /* >= 0; 0 only looks */
};

/* CL.THROTTLE's reply: retry_after_ms and reset_after_ms, redis-cell's
 * durations, are replied in whole seconds (truncated); -1000 is "-1". */
struct adhoc_gcra_result {
    bool limited;
    int64_t limit;
    int64_t remaining;
    int64_t retry_after_ns;     /* -1 s when not limited */
    int64_t reset_after_ns;
};

/* -ERANGE when @p's durations overflow 64-bit nanoseconds. */
int adhoc_gcra_check(const struct adhoc_gcra *p);

/*
 * One call at @now_ns on the key whose theoretical arrival time is *@tat_ns
 * (@exists false: none).  Updates *@tat_ns when the call is allowed (and
 * quantity > 0); *ret_idle_ms is when the key is the same as absent again.
 * Redis-cell's arithmetic, to the nanosecond of @now_ns.  Pure; @p checked
 * by adhoc_gcra_check().
 */
void adhoc_gcra_step(const struct adhoc_gcra *p, bool exists, int64_t now_ns, int64_t *tat_ns,
                     struct adhoc_gcra_result *ret, int64_t *ret_idle_ms);

/* ---- keys in Redis -------------------------------------------------------------------- */

/* The longest TTL the scripts give a key (2^40 ms), and the slack a key's
 * local bound adds for an AT ahead, clock skew between hosts and Redis, and
 * a script that runs later than it was sent: 2 * ADHOC_AT_AHEAD_MS. */
#define ADHOC_KEY_TTL_MAX_MS  (1LL << 40)
#define ADHOC_KEY_SLACK_MS    (2 * ADHOC_AT_AHEAD_MS)

/*
 * When the Redis key of a call sent at @now_ms (Unix ms) is gone at the
 * latest (never earlier than the TTL its script gives it): for RL.* with
 * @p at @at_ms (the client's AT, -1: none) the time an empty bucket takes
 * to fill, plus how far @at_ms lies in the past; for CL.THROTTLE (@p
 * checked by adhoc_gcra_check()) the whole burst's time; each plus
 * ADHOC_KEY_SLACK_MS.  Saturates.  Pure.
 */
int64_t adhoc_tb_key_expire_ms(const struct adhoc_tb *p, int64_t at_ms, int64_t now_ms);
int64_t adhoc_gcra_key_expire_ms(const struct adhoc_gcra *p, int64_t now_ms);

/* ---- the table ------------------------------------------------------------------------- */

struct adhoc_opts {
    uint32_t slots;             /* buckets the table has room for, >= 1 */
    uint32_t max_buckets;       /* of them, occupied at most; 0 or more than slots: all */
    uint32_t reserved;          /* of those, only for privileged peers;
                                 * 0: 1/ADHOC_RESERVE_DIV (at least 1) */
    uint32_t per_peer;          /* one unprivileged peer's share;
                                 * 0: 1/ADHOC_PER_PEER_DIV of the rest (at least 1) */
};

/* Who asks: the bucket it creates is charged to it. */
struct adhoc_peer {
    uint8_t key[16];            /* admit_peer_key(): a uid, or an address (IPv6 /64) */
    bool is_unix;
    bool privileged;            /* root or the admin group, on a Unix socket */
};

/* What STATS and the metrics show. */
struct adhoc_stats {
    uint64_t slots;             /* room, all shards */
    uint64_t capacity;          /* occupied at most (max_buckets, rounded to the shards) */
    uint64_t reserved;          /* ... of which only for privileged peers */
    uint64_t per_peer;          /* a peer's share (per_peer, rounded to the shards) */
    uint64_t used;              /* buckets held now */
    uint64_t privileged;        /* ... by privileged peers */
    uint64_t peers;             /* peers holding at least one (counted once per shard) */
    uint64_t evictions;         /* buckets dropped before they were idle, for another */
    uint64_t busy;              /* commands refused: no bucket could be had */
    uint64_t hits[ADHOC_N_KINDS][2];    /* calls that take, by kind, [0] allowed [1] limited */
    uint64_t fallbacks;         /* ... answered by on_redis_error (Redis failed) */
};

/* A table from @o (copied; rounded to its shards).  -ENOMEM, -EINVAL (no
 * slots).  The reserve is cut to leave unprivileged peers one bucket per
 * shard, the share to what they may hold together. */
int adhoc_new(const struct adhoc_opts *o, struct adhoc **ret);
void adhoc_free(struct adhoc *a);

/*
 * RL.REDUCE / RL.GET by @who on bucket @key (@len bytes) with @p at @at_ms
 * (the client's AT, or @now_ms), @now_ms divvyd's Unix clock: the return
 * value of adhoc_tb_step() into *ret_before.  A call that leaves a bucket
 * as good as absent (RL.GET, a refused take on a new bucket) stores
 * nothing.  A new bucket may take the slot of another, as the file comment
 * says.  -ENOSPC: none could be had (only for an unprivileged peer when
 * privileged peers hold every slot of the shard, or without eviction:
 * adhoc_no_evict()) and nothing was counted; -EDQUOT: without eviction, the
 * peer holds its share.
 */
int adhoc_tb(struct adhoc *a, const struct adhoc_peer *who, const char *key, size_t len,
             const struct adhoc_tb *p, int64_t at_ms, int64_t now_ms, int64_t *ret_before);

/* CL.THROTTLE by @who on @key with @p at @now_ns (Unix time); as adhoc_tb(). */
int adhoc_gcra(struct adhoc *a, const struct adhoc_peer *who, const char *key, size_t len,
               const struct adhoc_gcra *p, int64_t now_ns, struct adhoc_gcra_result *ret);

/*
 * Buckets that live in Redis (docs/resp.md "Ad-hoc buckets in Redis"):
 * each key a peer may make there through this host holds a slot of this
 * table too, charged to that peer by the rules above, so the keys one peer
 * can keep alive through one host are bounded by its share.  Call
 * adhoc_no_evict() once, before any thread uses the table: from then on no
 * unprivileged peer's slot is taken before it expires (a slot taken would
 * let its peer make one more key while the old one lives on): a peer at its
 * share, or when unprivileged peers hold the pool, is refused (-EDQUOT,
 * -ENOSPC) instead of losing its least recently used bucket, local buckets
 * (on_redis_error = local) included.  Privileged peers keep the reserve
 * and may take each other's slots.
 *
 * adhoc_claim(): @who's slot for the Redis key of @kind, @key (@len bytes),
 * @params (the algorithm's three, as in store_adhoc_key()), taken if @who
 * holds none yet, kept at least until @expire_ms (Unix ms; the latest of
 * those given wins): a bound never earlier than the key's TTL in Redis.
 * Each peer's claim is its own (a key several peers name is charged to
 * each).  0, -EDQUOT (@who holds its share), -ENOSPC (no slot could be had).
 * Nothing of the key is ever deleted here.
 */
void adhoc_no_evict(struct adhoc *a);
int adhoc_claim(struct adhoc *a, const struct adhoc_peer *who, enum adhoc_kind kind,
                const char *key, size_t len, const int64_t params[3], int64_t expire_ms,
                int64_t now_ms);

/* Counts a call that took (or tried to) in STATS and the metrics, wherever
 * its bucket lives; @fallback: answered by on_redis_error.  Any thread. */
void adhoc_count(struct adhoc *a, enum adhoc_kind kind, bool allowed, bool fallback);

/* Frees the slot of every bucket that is the same as none at @now_ms (Unix
 * ms): slots come back even from buckets nobody names again.  Returns how
 * many.  Any thread (each shard locked in turn). */
uint32_t adhoc_sweep(struct adhoc *a, int64_t now_ms);

/*
 * The buckets across a restart (docs/resp.md "Ad-hoc buckets"): adhoc_save()
 * writes every live bucket, its owner and the table's secret to @path
 * (persist_save(): whole or not at all, 0600); adhoc_load() puts them back
 * into a table that holds none yet, dropping those idle at @now_ms (Unix
 * ms), each charged to its owner again by adhoc.h's rules (a smaller table
 * keeps what fits).  adhoc_load(): -ENOENT (no file), -EBADMSG (not one of
 * ours, or another version: the table stays empty), -ENOMEM, -errno.
 * Returns the buckets written or read.
 */
int adhoc_save(struct adhoc *a, const char *path, int64_t now_ms);
int adhoc_load(struct adhoc *a, const char *path, int64_t now_ms);

/* Sums the shards (each locked in turn). */
void adhoc_stats(struct adhoc *a, struct adhoc_stats *ret);

#endif
