/* SPDX-License-Identifier: MIT */
/*
 * memtrim: hands the memory a flood of connections left in malloc's free
 * lists back to the kernel (docs/daemon.md "Memory after a flood").  glibc
 * keeps what connections freed in the arenas of the worker threads that
 * freed it, and a few allocations that outlive the flood (libevent's arrays
 * grown for thousands of descriptors, recycled hit slots) keep most of it
 * from the top of the heap, where free() would give it back; malloc_trim(0)
 * returns every free page.  It walks each arena under that arena's lock
 * and makes a system call per free chunk, so it runs on a thread of its own
 * (the main thread's tick, the heartbeat among it, never waits for it), and
 * only once malloc keeps MEMTRIM_BYTES more than connections account for,
 * or they hold MEMTRIM_BYTES less (memtrim_tick()).
 *
 * memtrim_anon() and memtrim_tick() are the main thread's; the thread
 * does the trimming.
 */
#ifndef DIVVY_MEMTRIM_H
#define DIVVY_MEMTRIM_H

#include <stdbool.h>
#include <stdint.h>

#define MEMTRIM_BYTES   (8ull << 20)    /* kept unused before memory goes back */
#define MEMTRIM_MMAP    (4 << 20)       /* M_MMAP_THRESHOLD */
#define MEMTRIM_TOP     (8 << 20)       /* M_TRIM_THRESHOLD */

struct memtrim;

/*
 * Fixes malloc's thresholds (main(), before any thread): blocks under
 * MEMTRIM_MMAP come from the arenas, and free() gives back the top of a
 * heap beyond MEMTRIM_TOP at once.  glibc would move both as large blocks
 * are freed (the trim threshold up to 64 MiB): then an arena's top, which
 * malloc_trim() leaves alone in a worker's arena, could keep tens of MB.
 */
void memtrim_init(void);

/* Starts the trimming thread (signals blocked).  -ENOMEM, -EAGAIN.  Without
 * a readable /proc/self/statm it starts, and never trims. */
int memtrim_new(struct memtrim **ret);

/* Stops and joins the thread (after a trim in progress), frees.  NULL-safe. */
void memtrim_free(struct memtrim *m);

/* Whether a trim is asked for or running.  Any thread. */
bool memtrim_busy(struct memtrim *m);

/* The process's anonymous resident memory (malloc's, the stacks'; not the
 * mapped tables) in bytes, from /proc/self/statm; 0 when unknown. */
uint64_t memtrim_anon(struct memtrim *m);

/*
 * The main thread's tick, with @anon from memtrim_anon() and @held the
 * bytes connections hold now (admit_held()).  What @anon holds beyond
 * @held is what malloc keeps for everything else, the freed memory of
 * closed connections included: once that is MEMTRIM_BYTES above the least
 * it has been since the last trim, or @held MEMTRIM_BYTES below the most it
 * has been, the thread trims.  What is left after a trim is in use: the
 * next one waits for MEMTRIM_BYTES more.  While a trim runs, ticks do
 * nothing.
 */
void memtrim_tick(struct memtrim *m, uint64_t anon, uint64_t held);

#endif
