/* SPDX-License-Identifier: MIT */
/*
 * memtrim: hands the memory a flood of connections left in malloc's free
 * lists back to the kernel (docs/daemon.md "Memory after a flood").  glibc
 * keeps what connections freed in the arenas of the worker threads that
 * freed it, and a few allocations that outlive the flood (libevent's arrays
 * grown for thousands of descriptors, recycled hit slots) keep most of it
 * from the top of the heap, where free() would give it back; malloc_trim(0)
 * returns every free page.  It walks each arena under that arena's lock
 * and costs a system call per free chunk, so it runs on a thread of its own
 * (the main thread's tick, the heartbeat among it, never waits for it), and
 * only after connections' memory fell by MEMTRIM_BYTES.
 *
 * memtrim_tick() is the main thread's; the thread does the trimming.
 */
#ifndef DIVVY_MEMTRIM_H
#define DIVVY_MEMTRIM_H

#include <stdint.h>

#define MEMTRIM_BYTES   (32ull << 20)   /* freed before memory goes back to the kernel */
#define MEMTRIM_TICKS   3               /* quiet ticks that still trim after that */

struct memtrim;

/* Starts the trimming thread (signals blocked).  -ENOMEM, -EAGAIN. */
int memtrim_new(struct memtrim **ret);

/* Stops and joins the thread (after a trim in progress), frees.  NULL-safe. */
void memtrim_free(struct memtrim *m);

/*
 * The main thread's tick, with @held the bytes connections hold now
 * (admit_held()): once @held fell by MEMTRIM_BYTES or more from its highest
 * point since the last such fall, the thread trims on every tick until
 * @held has not fallen for MEMTRIM_TICKS ticks (the connections of a flood
 * close over several ticks).  Asked while a trim runs, it trims once more
 * after it.
 */
void memtrim_tick(struct memtrim *m, uint64_t held);

#endif
