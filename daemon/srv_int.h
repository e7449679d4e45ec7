/* SPDX-License-Identifier: MIT */
/*
 * srv_int: the server (srv.h) as its own modules see it: the transport, the
 * front-ends, the admin verbs and the engine.  main.c sees only srv.h.
 * Set up by srv_new() in the main thread; afterwards the workers read it and
 * write only what they own (their struct worker, through atomics).
 */
#ifndef DIVVY_SRV_INT_H
#define DIVVY_SRV_INT_H

#include <stddef.h>
#include <stdint.h>

#include "srv.h"

struct listener;
struct worker;

struct srv {
    struct srv_opts o;
    struct listener *lis;
    size_t n_lis;
    struct worker *workers;     /* o.workers workers, then as many lane threads */
    unsigned n_workers;         /* 2 * o.workers */
    struct event_base *main_base;
    uint64_t started_ms;
    struct admit *admit;        /* connection budgets, shared by the workers */
    struct memtrim *trim;       /* gives memory back after a flood (the tick) */
    uint64_t ping;              /* watchdog probes sent to the workers (main thread) */
    uint64_t adhoc_saved_ms;    /* the ad-hoc table was last saved (main thread) */
    char status[256];           /* last STATUS= sent (main thread) */
};

#endif
