/* SPDX-License-Identifier: MIT */
/*
 * sentinel_int: the shared struct sentinel as sentinel.c (queries) and
 * sentinel_watch.c (the +switch-master watch) see it, the connection to one
 * sentinel both hold (struct sentinel_link), and the helpers both use to
 * read what a sentinel says.  Fields under @lock may be read and written
 * from any thread; the rest is set by sentinel_new() and then only read.
 */
#ifndef DIVVY_SENTINEL_INT_H
#define DIVVY_SENTINEL_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "sentinel.h"

struct event;
struct event_base;
struct redisAsyncContext;

struct sentinel_addr {
    char *text;                 /* as configured, for messages */
    char *host;                 /* NULL for a Unix socket */
    unsigned port;
    char *path;                 /* Unix socket, or NULL */
};

struct sentinel {
    struct sentinel_addr *addrs;
    unsigned n_addrs;
    char *name;
    char *password;             /* NULL: no AUTH */
    unsigned timeout_ms;
    pthread_mutex_t lock;       /* guards master, announced, promoting, last_ok */
    char master[SENTINEL_HOST_MAX + 16];    /* "HOST:PORT" last reported, "" before */
    char announced[SENTINEL_HOST_MAX + 16]; /* "HOST:PORT" last +switch-master, "" before */
    char promoting[2 * SENTINEL_HOST_MAX + 40]; /* "NEW<OLD" of the promotion last logged
                                                 * or ended by a switch, "" before */
    int last_ok;                /* the sentinel that answered last, -1 before */
};

/*
 * A hiredis connection to one sentinel and the timer that bounds its step,
 * as a query and the watch each hold one (the context ownership rules at the
 * top of sentinel.c).  The link's callbacks turn a failed connect, a lost
 * connection or a refused AUTH into one call of @failed, the owner's
 * reaction (@free_it as for sentinel_link_drop(); @why says what happened).
 */
struct sentinel_link {
    struct redisAsyncContext *ac;   /* NULL between steps */
    struct event *step_ev;
    void (*failed)(struct sentinel_link *l, bool free_it, const char *why);
};

/* Connects @l to sentinel @a (for @sn) on @base and queues AUTH when @sn has
 * a password, the owner's commands to follow (hiredis pipelines them once
 * connected).  0; -1 with @why filled when nothing could be started (no
 * context is left behind, @failed is not called). */
int sentinel_link_open(struct sentinel_link *l, const struct sentinel *sn,
                       const struct sentinel_addr *a, struct event_base *base, char *why,
                       size_t why_size);
/* Forgets @l's context and stops its step timer; frees the context when
 * @free_it (else hiredis is freeing it already).  Nothing when no context. */
void sentinel_link_drop(struct sentinel_link *l, bool free_it);
/* @l's failure, formatted: calls l->failed. */
void sentinel_link_failed(struct sentinel_link *l, bool free_it, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "HOST:PORT" ("[V6]:PORT" for an IPv6 address) into @buf. */
void sentinel_show(const char *host, unsigned port, char *buf, size_t size);

/* A host as a sentinel may report it: an address or a name, 1 to 255
 * printable bytes without spaces. */
bool sentinel_host_text_ok(const char *s, size_t len);

/* A port as text: 1..65535, digits only; 0 when not. */
unsigned sentinel_port_of(const char *s);

#endif
