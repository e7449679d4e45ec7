/* SPDX-License-Identifier: MIT */
/*
 * algo: the rate-limit algorithms as pure functions on a counter's packed
 * state (idle, data) as the counter table stores it (docs/dev/shm.md,
 * "Algorithm state"): divvy's fixed window, a token bucket (optionally
 * strict) and the weighted two-window sliding approximation.  The table
 * applies them inside its CAS loop; tests call them with injected times.
 * Owns nothing, never fails on input it has accepted, thread-safe.
 */
#ifndef DIVVY_ALGO_H
#define DIVVY_ALGO_H

#include <stdbool.h>
#include <stdint.h>

#include "table.h"

/* Field widths of the state word (docs/dev/shm.md). */
#define ALGO_IDLE_MAX     (((uint64_t)1 << 40) - 1)     /* times saturate here */
#define ALGO_DATA_MAX     (((uint64_t)1 << 48) - 1)     /* window used, bucket tokens */
#define ALGO_SLIDING_MAX  (((uint64_t)1 << 24) - 1)     /* sliding_window prev and cur */
#define ALGO_SPAN_MAX     ((uint64_t)1 << 39)           /* longest window / full refill, ms */
/* A DEBIT's debt is at most this many credit_limits (docs/protocol.md
 * "DEBIT"): paid back within as many windows (full refills) after the
 * current one, whoever charged it.  A plain 4: store_script.c writes it
 * into its Lua text. */
#define ALGO_DEBT_WINDOWS 4

/* A counter's state.  idle <= now means "full quota" for every algorithm;
 * {0, 0} is the state of an absent counter. */
struct algo_state {
    uint64_t idle;              /* absolute ms: when the quota is full again */
    uint64_t data;              /* 48 bits, per algorithm */
    bool debt;                  /* window, token bucket: data holds a DEBIT's debt (the
                                 * slot's state flag, docs/dev/shm.md); without it a count
                                 * above the limit (the limit was lowered) means
                                 * "nothing left" (window) or "full" (bucket), as ever */
};

/*
 * Checks that @lim can be represented in a slot: credit_limit in
 * [1, ALGO_DATA_MAX] (sliding_window: [1, ALGO_SLIDING_MAX]), reset_ms in
 * [1, ALGO_SPAN_MAX] for window and sliding_window, refill_amount and
 * refill_ms > 0 and a full refill (ceil(limit / amount) * refill_ms) at most
 * ALGO_SPAN_MAX for token_bucket; gcra and a continuous token bucket:
 * algo_gcra_check().  Returns 0 or -EINVAL.
 */
int algo_check(const struct table_limits *lim);

/*
 * Applies @op for @n credits at @now_ms to the counter in state @cur under
 * @lim (which algo_check() accepted) and writes the new state to
 * *ret_state and the answer to *ret.  TAKE is all-or-nothing and a denied
 * TAKE consumes nothing (a strict token bucket does restart its refill
 * clock); TAKE of 0 is a PEEK of 0.  DEBIT always consumes @n (of 0: a
 * PEEK): the balance may go below zero, a debt later windows or refills pay
 * back (docs/dev/shm.md "Algorithm state").  The debt saturates at
 * ALGO_DEBT_WINDOWS x credit_limit (a sliding window's count at
 * (ALGO_DEBT_WINDOWS + 1) x credit_limit), or sooner where the state word
 * ends; a DEBIT on a counter past that (a debt from before the bound, a
 * limit lowered since) leaves it at the bound.  *ret says whether the
 * balance is still >= 0 (credit 0 while in debt).  PEEK never changes the
 * state.  RESET answers a full quota and returns the absent state {0, 0}.
 * Returns true when *ret_state differs from *cur.  @cur and @ret_state may alias.
 */
bool algo_apply(const struct table_limits *lim, enum table_op op, uint64_t n, uint64_t now_ms,
                const struct algo_state *cur, struct algo_state *ret_state,
                struct table_result *ret);

/*
 * How long from @now_ms until a TAKE of 1 would be allowed on the counter in
 * state @cur under @lim, if nothing else takes meanwhile: 0 when credit is
 * left now.  Window: the window's end (in debt: the start of the first
 * window with room).  Token bucket: the next refill step (a strict bucket's
 * clock as last restarted; in debt: the step that leaves a token).  Sliding
 * window: when the previous window's hits, weighted down as it slides out,
 * leave room for one credit (possibly only after the current window has
 * become the previous one).  GCRA and a continuous bucket: redis-cell's
 * retry_after for one credit.  Saturates at ALGO_IDLE_MAX.
 */
uint64_t algo_retry_ms(const struct table_limits *lim, uint64_t now_ms,
                       const struct algo_state *cur);

#endif
