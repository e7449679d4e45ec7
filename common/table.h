/* SPDX-License-Identifier: MIT */
/*
 * table: the host's counter tables (docs/dev/shm.md).  A fixed-size file in the
 * state directory (the private table) or a sealed memfd with a read-only
 * control page (the fast-path table), mapped shared, holding cache-line slots
 * in an open-addressing hash keyed with a per-table secret.  Every state
 * change of a slot is one 16-byte compare-and-swap of its state word, which
 * carries a tag of the slot's key, so any number of threads and processes
 * (the daemon now, libdivvy's fast path later) update it without locks, and a
 * process killed at any instruction leaves nothing held.
 *
 * The algorithms (window, token bucket, sliding window) are applied inside
 * the CAS loop by common/algo.c.  Time is passed in by the caller
 * (CLOCK_MONOTONIC milliseconds, common/clock.h), so tests inject it.
 *
 * Thread-safety: table_hit()/table_peek... are safe from any number of
 * threads and processes on one mapping; table_open()/table_close() are not
 * concurrent with use of the same handle.  Never logs.
 */
#ifndef DIVVY_TABLE_H
#define DIVVY_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rules.h"

#define TABLE_SLOTS_MIN      64
#define TABLE_SLOTS_MAX      (1u << 26)
#define TABLE_SLOTS_DEFAULT  65536

struct table;

struct table_open_info {
    bool created;               /* a new file was made */
    bool rebuilt;               /* an existing file was discarded; reason says why */
    char reason[160];
};

/*
 * Daemon side: opens the table file at @path, creating it (mode @mode,
 * preallocated with posix_fallocate so a full filesystem fails here, never
 * as SIGBUS later) or reattaching to an existing one.  An existing file whose
 * magic, layout version, slot count or boot id does not match is replaced
 * (never misread) and @ret_info says why.  @n_slots is rounded up to a power
 * of two within [TABLE_SLOTS_MIN, TABLE_SLOTS_MAX].  On success *ret is a new
 * handle for table_close().  -ENOSPC, -EACCES, -EROFS, ... from the system.
 */
int table_open(const char *path, uint32_t n_slots, unsigned mode, struct table **ret,
               struct table_open_info *ret_info);

/*
 * Client side: maps an existing table read-write without creating or
 * repairing it.  -ENOENT, -EACCES, -EBADMSG (header invalid or from another
 * boot).
 */
int table_attach(const char *path, struct table **ret);

/*
 * Daemon side, the fast-path table (DESIGN section 4): a new table in an
 * anonymous memfd (MFD_CLOEXEC | MFD_ALLOW_SEALING) of exactly the table's
 * size, header written, slots populated where the kernel can
 * (MADV_POPULATE_WRITE; MADV_HUGEPAGE asked first), then sealed with
 * F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL: whoever gets the fd can write
 * the counters but can never resize the table (no SIGBUS) or fill a
 * filesystem.  table_fd() is the memfd, owned by the handle.  -ENOMEM,
 * -EMFILE, -ENOSYS, ...
 */
int table_create_memfd(uint32_t n_slots, struct table **ret);

/*
 * Maps the table memfd @fd (passed over SCM_RIGHTS, or back from systemd's
 * fd store).  The fd must carry F_SEAL_SHRINK and F_SEAL_GROW (so the
 * mapping can never lose pages under a client) and a header of this boot
 * and layout; @n_slots 0 accepts any valid size (a client), else only that
 * one (divvyd).  On success takes ownership of @fd (table_fd()); on failure
 * @fd is untouched and @why (may be NULL) says what did not match.
 * -EBADMSG (header, size or seals), -errno.
 */
int table_attach_fd(int fd, uint32_t n_slots, struct table **ret, char *why, size_t why_len);

/* The table's memfd (table_create_memfd(), table_attach_fd()), or -1 for a
 * table opened by path. */
int table_fd(const struct table *t);

/* Bytes of the mapping: TABLE_HDR_SIZE + 64 * slots (docs/dev/shm.md). */
size_t table_size(const struct table *t);

/*
 * The control page (docs/dev/shm.md "Control page"): the words only divvyd
 * writes (generation, heartbeat, lease_max, when_full), in a second memfd.
 * table_ctl_create() (divvyd) makes it, maps it read-write and then seals it
 * with F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL: from
 * then on no process can map it writable or write() it, whatever fd it
 * holds (a memfd is mode 0777: reopening /proc/self/fd/N O_RDWR succeeds,
 * but the seal refuses every write through it).  table_ctl_attach() (a
 * client) maps @fd read-only after checking size, seals, magic and boot id,
 * and takes ownership of @fd.  Afterwards table_generation(),
 * table_last_heartbeat(), table_lease_max() and table_when_full() (and the
 * daemon's setters) use the control page instead of the table header.
 * -EBADMSG, -errno.
 */
int table_ctl_create(struct table *t);
int table_ctl_attach(struct table *t, int fd);

/* The control page's memfd, or -1. */
int table_ctl_fd(const struct table *t);

/*
 * Copies the live table into @buf (@len == table_size()) for a snapshot on
 * disk: the header with its identity words (magic, layout, size, boot id,
 * secret) as this handle knows them, whatever the mapping holds now, and
 * every slot's and quota entry's 16-byte state
 * word read atomically (a compare-and-swap snapshot, never a torn word),
 * each slot's key words validated against its state as a lookup does (a
 * slot whose key words keep changing is copied DEAD).  Safe while other
 * processes hit the table.  -EINVAL.
 */
int table_snapshot(struct table *t, void *buf, size_t len);

/*
 * Copies a snapshot @buf (@len bytes) into @t, which nobody else uses yet
 * (just created): only when its magic, layout, slot count, size and boot id
 * match @t, else -EBADMSG with @why.  The snapshot's secret replaces @t's, so
 * its counters are found again.
 */
int table_restore(struct table *t, const void *buf, size_t len, char *why, size_t why_len);

/* Unmaps and frees (closing the memfds it owns).  NULL-safe. */
void table_close(struct table *t);

uint32_t table_slots(const struct table *t);

/* What a counter is: a rule's stable id and an actor string (any bytes). */
struct table_key {
    uint64_t rule_id;
    const char *actor;
    size_t actor_len;
};

/* What the rule says, in the table's units. */
struct table_limits {
    enum rules_algo algo;
    uint64_t credit_limit;      /* > 0 (zero semantics are handled before the table) */
    uint64_t reset_ms;          /* window / sliding_window length; > 0 */
    uint64_t refill_amount;     /* token_bucket */
    uint64_t refill_ms;         /* token_bucket */
    bool strict;                /* token_bucket: a denied attempt restarts the refill clock */
    uint64_t max_actors;        /* 0: no cap on live counters for this rule id */
    bool evict;                 /* when_full = "evict": a new counter that finds no room (no
                                 * reclaimable slot, or max_actors reached) forgets one of the
                                 * rule's counters that refused nothing (docs/dev/shm.md
                                 * "Eviction") */
    bool lease;                 /* a lease slot (window only; table_lease_*): its own key */
    uint64_t lease_max;         /* lease: most credit one host holds, 1..TABLE_LEASE_MAX */
    uint64_t window_end_ms;     /* window: when a window that starts now ends (absolute
                                 * ms; a calendar window's period end, set per hit by
                                 * eval_rule_prepared()); 0: now + reset_ms */
    bool continuous;            /* token_bucket: refill = "continuous" (common/algo_gcra.h):
                                 * its own counters, as another algorithm's */
    /* lockout (common/algo_lock.h); its fail_interval is reset_ms */
    uint64_t unlock_ms;         /* the first lock's length */
    uint64_t lock_max_ms;       /* escalation cap: no lock lasts longer */
    uint64_t remember_ms;       /* a lock's level is remembered this long after it ends */
    uint64_t delay_ms;          /* the first delay (after delay_after failures) */
    uint64_t delay_max_ms;      /* the longest delay */
    uint32_t lock_factor;       /* each lock lasts this many times the last (1: no escalation) */
    uint32_t delay_factor;      /* each further failure multiplies the delay by this */
    uint32_t delay_after;       /* failures before the first delay; 0: no delay */
};

enum table_op {
    TABLE_TAKE,                 /* consume @n if all are available (all-or-nothing) */
    TABLE_PEEK,                 /* report without consuming or creating a slot */
    TABLE_RESET,                /* forget the counter (back to a full quota) */
    TABLE_DEBIT,                /* consume @n always: the balance may go below zero (debt,
                                 * docs/dev/shm.md "Algorithm state"); allowed: still >= 0 */
};

struct table_result {
    bool allowed;               /* TAKE: consumed; PEEK: @n available now; RESET: true;
                                 * DEBIT: the balance is still >= 0 after it */
    uint64_t credit;            /* credit left after the operation (0 while in debt) */
    uint64_t reset_ms;          /* ms until the window resets / the next credit (0: none) */
};

/*
 * Applies @op for @n credits to the counter @key under @lim at time @now_ms
 * and fills *ret.  A denied TAKE consumes nothing.  For a lease key
 * (lim->lease) only TABLE_RESET is valid: it forgets this host's lease.
 * A TAKE, PEEK or DEBIT that the counter refuses marks it REFUSED until its
 * quota is full again, which keeps it from being evicted.
 * Returns 0, or:
 *   -ENOSPC   a new counter found no free or reclaimable slot in its probe
 *             window (the caller applies the configured full-table policy);
 *   -EDQUOT   the rule already holds lim->max_actors live counters;
 *             with lim->evict, either only when no counter of the rule could
 *             be evicted to make room (docs/dev/shm.md "Eviction");
 *   -EINVAL   @lim inconsistent (or not representable, algo_check());
 *   -EAGAIN   the key's slots never settled (only a process corrupting the
 *             table can cause this).
 * PEEK and RESET of an absent counter never claim a slot.
 */
int table_hit(struct table *t, const struct table_key *key, const struct table_limits *lim,
              enum table_op op, uint64_t n, uint64_t now_ms, struct table_result *ret);

/* A key as the table stores and finds it: its keyed hash (bucket, tag) and
 * stored words.  Depends on the table's secret and size and on the rule's
 * algorithm: valid for this mapping of this table only. */
struct table_kw {
    uint64_t w[6];
    uint32_t tag;
    uint32_t bucket;
};

/* Prepares @key under @lim once (SipHash of the rule id and actor) ... */
void table_key_prepare(const struct table *t, const struct table_key *key,
                       const struct table_limits *lim, struct table_kw *ret);

/* ... for table_hit() calls that skip that step: the same as table_hit()
 * with the key @key was prepared from. */
int table_hit_prepared(struct table *t, const struct table_kw *key, const struct table_limits *lim,
                       enum table_op op, uint64_t n, uint64_t now_ms, struct table_result *ret);

/* Asks the CPU to start loading the first slot table_hit_prepared() will
 * look at for @key, for writing, and returns at once: a caller with several
 * counters to hit (a batch) overlaps their cache and TLB misses.  A hint
 * only (a no-op where the compiler has no prefetch builtin); reads nothing. */
void table_prefetch(const struct table *t, const struct table_kw *key);

/* ---- leases (docs/dev/shm.md "Lease slots", docs/redis.md "lease") ------------
 *
 * A lease slot holds credit this host leased from the shared pool in Redis
 * for one window: `left` (still spendable here) and `remain` (what the pool
 * had left after the last grant this host saw; it only shrinks within a
 * window), the window's end (from the Redis TTL, never later than Redis's),
 * and two flags: FETCH (one process is fetching more credit for it, so
 * others do not) and HOLD (the slot exists only for that fetch: no window
 * yet).  Hits spend `left` with one CAS; Redis is needed only to refill.
 */

#define TABLE_LEASE_MAX      ((((uint64_t)1) << 24) - 1)   /* left, remain, credit_limit */
#define TABLE_LEASE_DIVISOR  16         /* a grant is at most 1/16 of the pool's remainder */
#define TABLE_LEASE_HOLD_MS  2000       /* a HOLD slot expires: a dead fetcher blocks nobody */

enum table_lease_verdict {
    TABLE_LEASE_ALLOWED,        /* @n taken from this host's lease */
    TABLE_LEASE_DENIED,         /* the window's pool is known exhausted: deny, ask nobody */
    TABLE_LEASE_FETCH,          /* not enough lease: the caller now owns the slot's FETCH flag,
                                 * asks Redis for @want, and calls table_lease_grant() (or
                                 * table_lease_abort() when that fails), then tries again */
    TABLE_LEASE_ASK,            /* not enough lease and a fetch is under way elsewhere (or @n
                                 * is larger than a lease): take @n directly in Redis */
};

struct table_lease_result {
    enum table_lease_verdict verdict;
    bool refill;                /* ALLOWED, and the lease ran low: the caller owns FETCH and
                                 * should fetch @want in the background */
    uint64_t want;              /* FETCH/refill: credit to ask for */
    uint64_t credit;            /* ALLOWED/DENIED: remain + left after the hit */
    uint64_t reset_ms;          /* ALLOWED/DENIED: ms until the window ends */
};

/*
 * Spends @n (>= 1) of the lease of @key (lim->lease set).  With @may_fetch
 * false (a fast-path client, which cannot talk to Redis) the verdict is never
 * FETCH and no refill is requested: such a client asks divvyd instead of
 * ASK/FETCH; its refill = true (FETCH not set) says the lease is below its
 * low-water mark and nobody is fetching: it asks divvyd to refill
 * (table_lease_refill_claim(), protocol verb REFILL).  Returns 0, -ENOSPC/-EDQUOT (no slot for the FETCH flag), or
 * -EINVAL.
 */
int table_lease_take(struct table *t, const struct table_key *key, const struct table_limits *lim,
                     uint64_t n, bool may_fetch, uint64_t now_ms, struct table_lease_result *ret);

/*
 * divvyd, asked by a fast-path client to refill @key's lease: when the lease
 * is below its low-water mark and nobody is fetching, sets FETCH and returns
 * 1 with *@ret_want (the caller fetches it in the background, then
 * table_lease_grant() or table_lease_abort()); else 0 (no lease slot, a
 * lease above low water, or a fetch under way).  -EINVAL.
 */
int table_lease_refill_claim(struct table *t, const struct table_key *key,
                             const struct table_limits *lim, uint64_t now_ms, uint64_t *ret_want);

/* What Redis answered to a lease fetch or to a direct take. */
struct table_lease_grant {
    uint64_t granted;           /* credit leased to this host (0 for a direct take) */
    uint64_t remain;            /* the pool's remainder after this request */
    uint64_t end_ms;            /* when the window ends on our clock: the time the request
                                 * was sent + the key's PTTL (so never after Redis's end) */
    bool created;               /* the request started a new window in Redis */
    bool fetch;                 /* this was our FETCH: clear the flag */
};

/* Adds a grant to @key's lease (a new window replaces the old lease; a grant
 * for a window that already ended is dropped).  0, -ENOSPC/-EDQUOT (the
 * grant is lost: stranded, docs/redis.md), -EINVAL. */
int table_lease_grant(struct table *t, const struct table_key *key, const struct table_limits *lim,
                      const struct table_lease_grant *g, uint64_t now_ms);

/* Our fetch failed: clears FETCH (a HOLD slot expires at once).  0 or -EINVAL. */
int table_lease_abort(struct table *t, const struct table_key *key, const struct table_limits *lim,
                      uint64_t now_ms);

/* Clears every FETCH flag (and drops HOLD slots): at daemon start, when no
 * fetch can be under way.  Returns how many slots changed. */
size_t table_lease_clear_fetches(struct table *t, uint64_t now_ms);

/*
 * Maintenance, called by the daemon from time to time: turns expired slots
 * reclaimable and refreshes the per-rule live-counter counts used by
 * max_actors.  Returns the number of slots reclaimed.
 */
size_t table_sweep(struct table *t, uint64_t now_ms);

struct table_stats {
    uint64_t slots;             /* capacity */
    uint64_t live;              /* slots holding a counter that has not expired */
    uint64_t full_events;       /* -ENOSPC answers since the table was created */
    uint64_t quota_events;      /* -EDQUOT answers since the table was created */
    uint64_t evictions;         /* counters evicted to make room (lim->evict) since then */
};
void table_stats(struct table *t, uint64_t now_ms, struct table_stats *ret);

/* Words for libdivvy's fast path (DESIGN §5), in the control page once
 * table_ctl_create()/table_ctl_attach() ran, else in the table header;
 * release/acquire.  Only divvyd calls the setters. */
void table_set_generation(struct table *t, uint64_t generation);
uint64_t table_generation(const struct table *t);
void table_heartbeat(struct table *t, uint64_t now_ms);
uint64_t table_last_heartbeat(const struct table *t);

/*
 * The control page's decision_log word (docs/dev/shm.md "Control page"):
 * nonzero while divvyd records decisions and wants fast-path clients to
 * report theirs (REPORT, docs/protocol.md).  table_decision_log_word()
 * points at it (at a constant zero without a control page) so that a client
 * reads it with one relaxed load per decision; the setter is divvyd's and
 * does nothing without a control page.
 */
void table_set_decision_log(struct table *t, bool on);
const uint64_t *table_decision_log_word(const struct table *t);

/* Hits fast-path clients decided in-process (for metrics).  Clients add in
 * batches (one atomic add per many hits) so the counter's cache line is not
 * a point of contention; the total lags by what clients have not flushed. */
void table_add_fast_hits(struct table *t, uint64_t n);
uint64_t table_fast_hits(const struct table *t);

/*
 * Fast-path decisions per rule (docs/dev/shm.md "Header"): TABLE_FAST_RULES
 * entries of a rule id and a count per outcome, in the table header where
 * fast-path clients may write.  Clients count in their own memory and add
 * with table_add_fast_rule() when they flush their fast_hits (one atomic add
 * per rule and outcome per batch, never per hit).  An entry is claimed for a
 * rule id once (a CAS) and never freed; when every keyed entry is taken, the
 * counts go to the last entry, whose id is TABLE_FAST_OTHER.
 */
#define TABLE_FAST_RULES    88
#define TABLE_FAST_OTHER    UINT64_MAX  /* the last entry: rules that found no entry */
enum table_fast_outcome {
    TABLE_FAST_ACCEPTED = 0,            /* decided (or charged on the way) and allowed */
    TABLE_FAST_REJECTED,                /* decided and denied */
    TABLE_FAST_CANARY_ACCEPTED,         /* a canary rule that would have allowed */
    TABLE_FAST_CANARY_REJECTED,
    TABLE_FAST_N
};
void table_add_fast_rule(struct table *t, uint64_t rule_id, const uint64_t n[TABLE_FAST_N]);
/* Entry @i (< TABLE_FAST_RULES): false when free, else its rule id
 * (TABLE_FAST_OTHER for the last) and counts into @ret_n. */
bool table_fast_rule(const struct table *t, unsigned i, uint64_t *ret_id,
                     uint64_t ret_n[TABLE_FAST_N]);

/* The daemon's store.lease_max, announced to fast-path clients so they spend
 * leases with the daemon's low-water mark; 0 (a table of an older daemon):
 * not announced, clients leave lease rules to the daemon. */
void table_set_lease_max(struct table *t, uint64_t lease_max);
uint64_t table_lease_max(const struct table *t);

/* The daemon's table.when_full, announced to fast-path clients so they can
 * answer a full table (or max_actors) as divvyd would; stored at start,
 * before any rules are published.  table_when_full(): 1 allow, 0 deny, -1
 * not announced (a table last run by an older daemon: clients send such a
 * hit to divvyd). */
#define TABLE_FULL_DENY     1u
#define TABLE_FULL_ALLOW    2u
void table_set_when_full(struct table *t, bool allow);
int table_when_full(const struct table *t);

/* Hits fast-path clients answered with when_full in-process (the daemon's
 * table_full_events adds them to the ones it answered itself). */
void table_add_fast_full(struct table *t);
uint64_t table_fast_full(const struct table *t);

/* One live counter as table_foreach() reports it. */
struct table_entry {
    uint64_t rule_id;
    const char *actor;          /* bytes as stored; a digest when actor_is_digest */
    size_t actor_len;
    bool actor_is_digest;
    enum rules_algo algo;
    uint64_t used_or_tokens;    /* window: used; token bucket: tokens; sliding: current;
                                 * lease: 0 (see lease_left, lease_remain) */
    uint64_t expires_ms;        /* when the counter is back to a full quota */
    uint64_t data;              /* the state word's data as stored (docs/dev/shm.md): with
                                 * expires_ms and debt, the algo_state algo_apply() reads */
    bool debt;                  /* the state's debt flag (a DEBIT's, docs/dev/shm.md) */
    bool lease;                 /* a lease slot (HOLD slots are not reported) */
    uint64_t lease_left;        /* lease: credit this host may still spend */
    uint64_t lease_remain;      /* lease: the pool's remainder as last seen */
    bool continuous;            /* a continuous token bucket's (table_limits.continuous) */
};

/* Calls @fn for every live, unexpired counter; stops early when @fn returns
 * non-zero and returns that value. */
int table_foreach(struct table *t, uint64_t now_ms,
                  int (*fn)(const struct table_entry *e, void *userdata), void *userdata);

/*
 * Whether a TAKE of @key (prepared under @lim) would find a counter: 0 when
 * the key has one (or a claim under way) or a new one could be claimed now,
 * -ENOSPC when its probe window has no reclaimable slot, -EDQUOT when the
 * rule already holds lim->max_actors counters.  A snapshot: the answer may
 * change before the next hit.  Writes nothing.  -EINVAL.
 */
int table_room_prepared(struct table *t, const struct table_kw *key,
                        const struct table_limits *lim, uint64_t now_ms);

/* ---- moving counters between tables (docs/dev/shm.md "Moving counters") ------
 *
 * When a reload moves a rule to another table (fast_path or source changed),
 * divvyd carries its counters over, so actors keep their remaining credit.
 */

/* Asked for every live counter of the source: the table where rule
 * @rule_id's counters (of algorithm @algo) belong now, with *ret_lim its
 * limits there, or NULL (or the source) to leave the counter where it is. */
typedef struct table *(*table_move_fn)(uint64_t rule_id, enum rules_algo algo, void *arg,
                                       struct table_limits *ret_lim);

/* What a copy (table_move() without remove) placed, slot by slot, for the
 * move that follows on the same source table.  Zero-initialise; free with
 * table_move_log_free(). */
struct table_move_base;
struct table_move_log {
    struct table_move_base *v;
    size_t n, cap, pos;
};
void table_move_log_free(struct table_move_log *log);

struct table_move_stats {
    uint64_t moved;             /* counters placed in their destination */
    uint64_t merged;            /* ... of which met a counter of the key there (merged) */
    uint64_t digest;            /* left behind: an actor over 32 bytes is stored as a digest,
                                 * and the two tables digest with different keys
                                 * (table_adopt_digests()) */
    uint64_t full;              /* left behind: no free slot in the destination's probe window */
};

/*
 * Makes @t digest long actors (over 32 bytes) with @from's key, so that such
 * counters can move between the two (table_move()); the bucket hash keeps
 * @t's own secret.  Only for a table that has never held a counter (just
 * created or rebuilt): -EBUSY otherwise (and when @t already uses @from's
 * key: 0).  Written to @t's header, so it holds across reattaching.  Not
 * concurrent with any other use of @t.  -EINVAL.
 */
int table_adopt_digests(struct table *t, const struct table *from);

/*
 * Places every live, unexpired counter of @from into the table @pick names
 * for it, under the same key (a counter at its rule's max_actors there is
 * placed uncounted rather than dropped).  Where the destination already
 * holds the key, the two merge: exactly for a window counter that a copy
 * recorded in @log and whose window has not changed (the hits the source took
 * since the copy are added), else the state with less credit left wins.
 * Without @remove (a copy) the source keeps its counters and @log (optional)
 * records what was placed.  With @remove, each placed counter is then turned
 * DEAD in @from by a CAS from the exact state that was placed; when a hit
 * changed it in between, the hits since are placed too, so none that reached
 * @from before the CAS is lost; @log (optional) is the copy's record.  Lease
 * slots are never moved.  Safe against concurrent hits on every table (one
 * CAS per state change); not concurrent with another table_move() on the
 * same tables.  Returns 0 with *ret filled, or -EINVAL.
 */
int table_move(struct table *from, bool remove, table_move_fn pick, void *arg,
               struct table_move_log *log, uint64_t now_ms, struct table_move_stats *ret);

#endif
