/* SPDX-License-Identifier: MIT */
/*
 * sentinel_int: the shared struct sentinel as sentinel.c (queries) and
 * sentinel_watch.c (the +switch-master watch) see it, and the helpers both
 * use to read what a sentinel says.  Fields under @lock may be read and
 * written from any thread; the rest is set by sentinel_new() and then only
 * read.
 */
#ifndef DIVVY_SENTINEL_INT_H
#define DIVVY_SENTINEL_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "sentinel.h"

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
    pthread_mutex_t lock;       /* guards master, announced, last_ok */
    char master[SENTINEL_HOST_MAX + 16];    /* "HOST:PORT" last reported, "" before */
    char announced[SENTINEL_HOST_MAX + 16]; /* "HOST:PORT" last +switch-master, "" before */
    int last_ok;                /* the sentinel that answered last, -1 before */
};

/* "HOST:PORT" ("[V6]:PORT" for an IPv6 address) into @buf. */
void sentinel_show(const char *host, unsigned port, char *buf, size_t size);

/* A host as a sentinel may report it: an address or a name, 1 to 255
 * printable bytes without spaces. */
bool sentinel_host_text_ok(const char *s, size_t len);

/* A port as text: 1..65535, digits only; 0 when not. */
unsigned sentinel_port_of(const char *s);

#endif
