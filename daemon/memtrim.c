/* SPDX-License-Identifier: MIT */
/*
 * memtrim: malloc_trim() on a thread of its own, when malloc keeps memory
 * nothing accounts for (see memtrim.h).
 *
 * Measured with tests/integration/test_rls_flood.c (4,000 connections, 2
 * workers): with nothing done, VmRSS stays at 92-104 MB after every
 * connection closed (20 MB before the flood); M_TRIM_THRESHOLD = 128 KiB
 * alone, 92 MB; M_ARENA_MAX = 1, 98 MB (free memory is not at the top of a
 * heap, where those would act); malloc_trim(0), 36-47 MB.  M_TRIM_THRESHOLD
 * with malloc_trim() saves 4 MB more but fixes the mmap threshold too, so
 * every allocation over 128 KiB would be an mmap(): not worth it.
 *
 * The thresholds are fixed (memtrim_init()) because glibc's own move: one
 * 4 MiB block freed at start already sets the trim threshold to 8 MiB, and
 * a later, larger one can raise it further; a worker's heap top below it is
 * kept, and malloc_trim() does not trim a thread arena's top.  With them
 * free, 2 of 11 floods of 4,000 RESP connections (each closed at once for a
 * malformed command) kept 46-54 MB after the trim, in the workers' heap
 * tops; fixed at the values glibc reaches at start, 0 of 6 (35-38 MB).
 *
 * Two signs, either enough: what the process keeps beyond what connections
 * hold grew (their memory was freed, malloc kept it: the sign when a
 * flood's connections close over many ticks, timeouts, and never were all
 * open at once), or what connections hold fell (the sign after a trim made
 * while they were open, which took what they then used for kept memory).
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "memtrim.h"

struct memtrim {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool want;                  /* a trim is asked for (under lock) */
    bool busy;                  /* ... or running (under lock) */
    bool stop;                  /* the thread ends (under lock) */
    int statm;                  /* /proc/self/statm */
    long page;
    /* The main thread's (memtrim_tick()): */
    uint64_t floor;             /* least @anon - @held since the last trim */
    uint64_t high;              /* most @held since the last trim */
    bool fresh;                 /* no tick since the last trim */
};

void memtrim_init(void)
{
    mallopt(M_MMAP_THRESHOLD, MEMTRIM_MMAP);
    mallopt(M_TRIM_THRESHOLD, MEMTRIM_TOP);
}

static void *memtrim_main(void *arg)
{
    struct memtrim *m = arg;

    pthread_mutex_lock(&m->lock);
    for (;;) {
        while (!m->want && !m->stop)
            pthread_cond_wait(&m->cond, &m->lock);
        if (m->stop)
            break;
        m->want = false;
        pthread_mutex_unlock(&m->lock);
        malloc_trim(0);
        pthread_mutex_lock(&m->lock);
        m->busy = false;
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

int memtrim_new(struct memtrim **ret)
{
    struct memtrim *m = calloc(1, sizeof(*m));
    sigset_t all, old;
    int r;

    if (!m)
        return -ENOMEM;
    m->page = sysconf(_SC_PAGESIZE);
    /* Without /proc nothing is measured, and nothing trimmed. */
    m->statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    /* Now, before any connection: a flood that comes and goes before the
     * first tick is not taken for memory in use. */
    m->floor = memtrim_anon(m);
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->cond, NULL);
    /* Signals are the main thread's. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    r = -pthread_create(&m->thread, NULL, memtrim_main, m);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r < 0) {
        pthread_cond_destroy(&m->cond);
        pthread_mutex_destroy(&m->lock);
        if (m->statm >= 0)
            close(m->statm);
        free(m);
        return r;
    }
    *ret = m;
    return 0;
}

void memtrim_free(struct memtrim *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    m->stop = true;
    pthread_cond_signal(&m->cond);
    pthread_mutex_unlock(&m->lock);
    pthread_join(m->thread, NULL);
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->lock);
    if (m->statm >= 0)
        close(m->statm);
    free(m);
}

bool memtrim_busy(struct memtrim *m)
{
    bool busy;

    pthread_mutex_lock(&m->lock);
    busy = m->busy;
    pthread_mutex_unlock(&m->lock);
    return busy;
}

uint64_t memtrim_anon(struct memtrim *m)
{
    unsigned long long size, resident, shared;
    char buf[128];
    ssize_t n = m->statm >= 0 ? pread(m->statm, buf, sizeof(buf) - 1, 0) : -1;

    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* "size resident shared ...", in pages; shared: file and shmem pages. */
    if (sscanf(buf, "%llu %llu %llu", &size, &resident, &shared) != 3 || shared > resident)
        return 0;
    return (uint64_t)(resident - shared) * (uint64_t)m->page;
}

void memtrim_tick(struct memtrim *m, uint64_t anon, uint64_t held)
{
    uint64_t kept = anon > held ? anon - held : 0;

    if (!anon)
        return;
    pthread_mutex_lock(&m->lock);
    if (m->busy) {
        pthread_mutex_unlock(&m->lock);
        return;
    }
    /* The first look after a trim: what is left is in use. */
    if (m->fresh || kept < m->floor)
        m->floor = kept;
    if (m->fresh || held > m->high)
        m->high = held;
    m->fresh = false;
    if (kept - m->floor >= MEMTRIM_BYTES || m->high - held >= MEMTRIM_BYTES) {
        m->want = m->busy = true;
        m->fresh = true;
        pthread_cond_signal(&m->cond);
    }
    pthread_mutex_unlock(&m->lock);
}
