/* SPDX-License-Identifier: MIT */
/*
 * admit: divvyd's admission control (docs/daemon.md "Admission").  Decides
 * whether an accepted connection may stay, and keeps the budgets every worker
 * shares: one connection budget per kind of listener (TCP, Unix), an overall
 * cap on unprivileged connections, a reserve only privileged Unix peers (uid
 * 0, the admin group) may use, per-peer caps (per uid on Unix, per source
 * address on TCP: IPv4 /32, IPv6 /64), and one budget for what all
 * connections buffer: their output, and the input a protocol keeps while a
 * request arrives (RLS bodies, streams and HTTP/2 state, rls.h).  It also
 * holds the timeout policy (idle, slow request, stalled output) that the
 * per-worker sweeps apply, and says what connections hold (memtrim.h).
 *
 * Owns the per-peer table and every count.  Accept and close take one small
 * mutex (never the hit path); the output budget and the statistics are
 * relaxed atomics.  Every admitted connection owns a struct admit_slot that
 * admit_leave() releases exactly once, so no close path can leak a slot.
 */
#ifndef DIVVY_ADMIT_H
#define DIVVY_ADMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Smallest per-connection share of the output budget (see admit_out_pause()). */
#define ADMIT_SHARE_MIN 4096

struct admit_opts {
    unsigned tcp_max;           /* TCP connections (all peers) */
    unsigned unix_max;          /* Unix connections, privileged ones first in line */
    unsigned total_max;         /* unprivileged connections, TCP and Unix together */
    unsigned reserve;           /* extra Unix connections for privileged peers only */
    unsigned per_address;       /* TCP connections from one address (/32, /64) */
    unsigned per_uid;           /* unprivileged Unix connections of one uid */
    unsigned idle_ms;           /* 0: no idle timeout */
    unsigned request_ms;        /* 0: no slow-request/stalled-output timeout */
    size_t output_budget;       /* bytes of buffered output, all connections */
    unsigned sockbuf;           /* SO_SNDBUF of each connection; 0: the kernel's */
    unsigned fd_reserve;        /* descriptors divvyd needs besides connections */
};

/* Why a connection was refused (the order of STATS and the metric's labels). */
enum admit_refusal {
    ADMIT_R_TCP = 0,            /* server.tcp_connections reached */
    ADMIT_R_UNIX,               /* server.unix_connections reached */
    ADMIT_R_TOTAL,              /* server.max_connections reached */
    ADMIT_R_PER_ADDRESS,        /* server.tcp_connections_per_address */
    ADMIT_R_PER_UID,            /* server.unix_connections_per_uid */
    ADMIT_R_RESERVE,            /* a privileged peer found the reserve used up too */
    ADMIT_N_REFUSALS
};

/* Why divvyd closed a connection it had admitted. */
enum admit_close {
    ADMIT_C_IDLE = 0,           /* nothing in flight and nothing read for idle_ms */
    ADMIT_C_REQUEST,            /* a partial request line older than request_ms */
    ADMIT_C_OUTPUT,             /* output pending, none of it written for request_ms */
    ADMIT_C_OUTPUT_LIMIT,       /* over server.max_output_bytes */
    ADMIT_C_INPUT_LIMIT,        /* its input went past what it may hold (rls.h) */
    ADMIT_N_CLOSES
};

/* Who is knocking: filled by the listener code right after accept(). */
struct admit_peer {
    bool is_unix;
    bool privileged;            /* Unix only: uid 0 or the admin group */
    uid_t uid;                  /* Unix: SO_PEERCRED's uid */
    struct sockaddr_storage addr;       /* TCP: accept()'s peer address */
    pid_t pid;                  /* Unix: SO_PEERCRED's pid (at connect); 0: unknown */
};

/* Who @p is for the per-peer caps, in 16 bytes: its uid on a Unix socket, its
 * address on TCP (IPv4 /32, IPv4-mapped IPv6 as IPv4, IPv6 /64).  Also the
 * identity of RESP's ad-hoc bucket shares (adhoc.h).  Pure. */
void admit_peer_key(const struct admit_peer *p, uint8_t key[16]);

struct admit_entry;

/* What one admitted connection holds; embedded in the connection.  Zeroed
 * means "holds nothing" (admit_leave() is then a no-op). */
struct admit_slot {
    bool held;
    bool is_unix;
    bool privileged;
    bool reserve;               /* counted in the reserve, not the Unix budget */
    struct admit_entry *peer;   /* per-peer count, or NULL (privileged) */
    size_t charged;             /* bytes counted in the output budget */
};

struct admit_stats {
    uint64_t tcp_conns;         /* open now */
    uint64_t unix_conns;        /* ... on the Unix budget */
    uint64_t reserve_conns;     /* ... on the reserve */
    uint64_t total_max;         /* the cap in force (admit_new() may lower it) */
    uint64_t refused[ADMIT_N_REFUSALS];
    uint64_t closed[ADMIT_N_CLOSES];
    uint64_t output_bytes;      /* buffered now */
    uint64_t output_budget;
    uint64_t output_paused;     /* times a connection stopped being read for the budget */
};

struct admit;

/*
 * Creates the shared state from @o (copied).  When the process may not open
 * tcp_max + unix_max + reserve + fd_reserve descriptors (RLIMIT_NOFILE), it
 * first raises its soft limit to the hard one; if that is still too few, it
 * lowers total_max so that the reserve always finds a descriptor, and logs
 * it.  -ENOMEM.
 */
int admit_new(const struct admit_opts *o, struct admit **ret);

/* Frees.  Every slot must have been left.  NULL-safe. */
void admit_free(struct admit *a);

/*
 * Admits @p or refuses it.  0: *ret_slot now holds a place (release it with
 * admit_leave()).  -EBUSY: refused, counted, *reterr_why says why; *ret_slot
 * untouched.  -ENOMEM.  Thread-safe.
 */
int admit_enter(struct admit *a, const struct admit_peer *p, struct admit_slot *ret_slot,
                enum admit_refusal *reterr_why);

/* Releases what @slot holds (its place and its output charge) and zeroes it.
 * A second call is a no-op.  Thread-safe. */
void admit_leave(struct admit *a, struct admit_slot *slot);

/* Sets @slot's output charge to @bytes, adjusting the shared budget.  O(1). */
void admit_charge(struct admit *a, struct admit_slot *slot, size_t bytes);

/*
 * The most a connection may hold (@cap, its own bound) now: @cap while the
 * budget is not spent or the connection is privileged; else its share of
 * the budget (divided among the open connections, at least
 * ADMIT_SHARE_MIN), or @cap when smaller.  O(1), lock-free.
 */
size_t admit_allowance(struct admit *a, const struct admit_slot *slot, size_t cap);

/*
 * True when a connection with @own bytes its client has not read (replies,
 * and hits waiting for Redis) must stop being read: @own is over its
 * allowance (admit_allowance() without a cap of its own).  Counts the pause
 * when it says so.  O(1), lock-free; admit_out_pause_shared() is the part
 * that reads shared counts.
 */
bool admit_out_pause_shared(struct admit *a, const struct admit_slot *slot, size_t own);

static inline bool admit_out_pause(struct admit *a, const struct admit_slot *slot, size_t own)
{
    /* Inline: before every request, almost always decided here. */
    if (slot->privileged || own <= ADMIT_SHARE_MIN)
        return false;
    return admit_out_pause_shared(a, slot, own);
}

/* Counts a connection that stopped being read for the budget (output_paused). */
void admit_paused(struct admit *a);

/* What connections hold now, about: a fresh connection's buffers for each
 * one open, plus every charge.  Lock-free, any thread (memtrim.h). */
uint64_t admit_held(struct admit *a);

/* Counts a connection closed for @why.  Thread-safe. */
void admit_closed(struct admit *a, enum admit_close why);

/*
 * The timeout that has expired for a connection at @now_ms, or -1: @last_ms
 * is when it last sent something, @idle whether nothing is in flight (no
 * partial line, no output pending); @partial_ms when its current partial
 * request line started (0: none); @stall_ms when its pending output last made
 * progress (0: none pending).
 */
int admit_expired(const struct admit *a, uint64_t now_ms, bool idle, uint64_t last_ms,
                  uint64_t partial_ms, uint64_t stall_ms);

/* How often a worker should sweep its connections for timeouts, in ms; 0: never. */
unsigned admit_sweep_ms(const struct admit *a);

/* A snapshot of the counts (relaxed loads).  Any thread. */
void admit_stats(struct admit *a, struct admit_stats *ret);

/* How many peers the per-peer table holds now (an unprivileged peer has an
 * entry while it has a connection open; none left once all have left, so
 * nothing grows with peers gone).  Takes the lock; any thread. */
size_t admit_peers(struct admit *a);

/* STATS' admission lines ("name=value\n" each, docs/protocol.md) into @buf;
 * returns how many, or 0 (and "") when @size is too small. */
size_t admit_stats_text(struct admit *a, char *buf, size_t size);

/* Short name of @why for STATS and metrics labels ("tcp_connections", ...). */
const char *admit_refusal_name(enum admit_refusal why);
const char *admit_close_name(enum admit_close why);

#endif
