/* SPDX-License-Identifier: MIT */
/*
 * clock: the time divvy counts in.  CLOCK_MONOTONIC milliseconds: never
 * steps with the wall clock, shared by every process on the host (so the
 * daemon and fast-path clients agree), reset by a reboot (which also
 * discards the counter table, docs/dev/shm.md).  Thread-safe, never fails on
 * Linux (a failure returns 0, which only makes counters look fresh).
 */
#ifndef DIVVY_CLOCK_H
#define DIVVY_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds. */
uint64_t clock_now_ms(void);
/* CLOCK_MONOTONIC_COARSE in milliseconds: cheaper, tick resolution (1-4 ms). */
uint64_t clock_coarse_ms(void);
/* CLOCK_MONOTONIC in nanoseconds, for latency measurements. */
uint64_t clock_now_ns(void);
/* CLOCK_REALTIME (Unix time) in nanoseconds: only for what clients time in
 * Unix time themselves (RESP's ad-hoc buckets and their AT, docs/resp.md). */
uint64_t clock_unix_ns(void);

#endif
