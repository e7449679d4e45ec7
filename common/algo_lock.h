/* SPDX-License-Identifier: MIT */
/*
 * algo_lock: the login `lockout` algorithm (docs/rules.md "Lockout", docs/pam.md) as a pure
 * state machine on a counter's packed state (idle, data, flag), the way common/algo.c does the
 * other algorithms: failures counted in an interval that starts at the first one
 * (fail_interval, the rule's reset_ms), a lock when credit_limit of them are reached that lasts
 * unlock_time, longer for each lock the counter remembers (escalation: factor, cap, remember),
 * and a ramping delay after the k-th failure (delay(k)).  Encoding in docs/dev/shm.md
 * "Lockout state".  Owns nothing, thread-safe, never fails on limits algo_lock_check() took.
 */
#ifndef DIVVY_ALGO_LOCK_H
#define DIVVY_ALGO_LOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "algo.h"

#define ALGO_LOCK_COUNT_MAX     1023u                       /* credit_limit of a lockout rule */
#define ALGO_LOCK_LEVEL_MAX     63      /* escalation levels remembered; a plain 63: Lua text */
#define ALGO_LOCK_INTERVAL_MAX  ((((uint64_t)1) << 32) - 1) /* fail_interval, ms (49 days) */
#define ALGO_LOCK_FACTOR_MAX    1000u                       /* escalation / delay factor */

/* What a lockout counter says at a time (for divvyctl locked, tests). */
struct algo_lock_view {
    bool locked;
    uint64_t lock_left_ms;      /* locked: until the lock ends */
    uint64_t failures;          /* not locked: failures in the running interval */
    uint64_t interval_left_ms;  /* failures > 0: until they are forgotten */
    uint64_t level;             /* locks remembered (the next lock lasts lock_ms(level)) */
    uint64_t delay_left_ms;     /* not locked: the next attempt waits this long */
};

/*
 * Checks a lockout rule's limits: credit_limit 1..ALGO_LOCK_COUNT_MAX, reset_ms (fail_interval)
 * 1..ALGO_LOCK_INTERVAL_MAX, unlock_ms 1..ALGO_SPAN_MAX, lock_factor 1..ALGO_LOCK_FACTOR_MAX,
 * lock_max_ms unlock_ms..ALGO_SPAN_MAX, remember_ms ..ALGO_SPAN_MAX; delay_after 0 (no delay)
 * or 1..credit_limit with delay_ms 1..ALGO_SPAN_MAX, delay_factor 1..ALGO_LOCK_FACTOR_MAX,
 * delay_max_ms delay_ms..ALGO_SPAN_MAX.  0 or -EINVAL.
 */
int algo_lock_check(const struct table_limits *lim);

/*
 * algo_apply() for a lockout rule.  TAKE (and DEBIT) of @n records @n failures: refused while
 * locked (nothing changes, reset_ms the lock's end); otherwise counted, and the failure that
 * reaches credit_limit locks the counter for lock_ms(level) and raises the level.  PEEK is
 * refused while locked (credit 0, reset_ms until the lock ends) and while a delay runs (credit
 * > 0: the failures left, reset_ms until the delay ends); else allowed.  RESET forgets
 * everything, the level included.  Returns true when the state changed.
 */
bool algo_lock_apply(const struct table_limits *lim, enum table_op op, uint64_t n,
                     uint64_t now_ms, const struct algo_state *cur, struct algo_state *ret_state,
                     struct table_result *ret);

/* How long a lock at escalation @level lasts: min(unlock_ms * factor^level, lock_max_ms). */
uint64_t algo_lock_ms(const struct table_limits *lim, uint64_t level);

/* The delay after @failures failures: 0 below delay_after, else
 * min(delay_ms * delay_factor^(failures - delay_after), delay_max_ms). */
uint64_t algo_lock_delay_ms(const struct table_limits *lim, uint64_t failures);

/* Reads @cur at @now_ms. */
void algo_lock_read(const struct table_limits *lim, uint64_t now_ms, const struct algo_state *cur,
                    struct algo_lock_view *ret);

/* algo_retry_ms() for a lockout rule: the lock's or the delay's end, else 0. */
uint64_t algo_lock_retry_ms(const struct table_limits *lim, uint64_t now_ms,
                            const struct algo_state *cur);

#endif
