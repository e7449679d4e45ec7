/* SPDX-License-Identifier: MIT */
/*
 * memtrim: malloc_trim() on a thread of its own, when connections' memory
 * fell (see memtrim.h).
 *
 * Measured with tests/integration/test_rls_flood.c (4,000 connections, 2
 * workers): with nothing done, VmRSS stays at 92-104 MB after every
 * connection closed (20 MB before the flood); M_TRIM_THRESHOLD = 128 KiB
 * alone, 92 MB; M_ARENA_MAX = 1, 98 MB (free memory is not at the top of a
 * heap, where those would act); malloc_trim(0), 36-47 MB.  M_TRIM_THRESHOLD
 * with malloc_trim() saves 4 MB more but fixes the mmap threshold too, so
 * every allocation over 128 KiB would be an mmap(): not worth it.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>

#include "memtrim.h"

struct memtrim {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool want;                  /* a trim is asked for (under lock) */
    bool stop;                  /* ... the thread ends (under lock) */
    /* The main thread's (memtrim_tick()): */
    uint64_t high;              /* highest @held since the last fall */
    uint64_t last;              /* @held at the last tick */
    unsigned quiet;             /* ticks since @held last fell, while trimming */
    bool trimming;              /* a fall was seen: each tick trims */
};

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
    free(m);
}

void memtrim_tick(struct memtrim *m, uint64_t held)
{
    if (held > m->high)
        m->high = held;
    if (m->high - held >= MEMTRIM_BYTES) {
        m->high = held;
        m->trimming = true;
        m->quiet = 0;
    } else if (m->trimming && held < m->last) {
        m->quiet = 0;
    } else if (m->trimming && ++m->quiet >= MEMTRIM_TICKS) {
        m->trimming = false;
    }
    m->last = held;
    if (!m->trimming)
        return;
    pthread_mutex_lock(&m->lock);
    m->want = true;
    pthread_cond_signal(&m->cond);
    pthread_mutex_unlock(&m->lock);
}
