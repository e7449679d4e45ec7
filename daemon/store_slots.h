/* SPDX-License-Identifier: MIT */
/*
 * store_slots: Redis Cluster's key space, with no I/O (docs/redis.md
 * "Cluster"): the slot of a key (CRC16/XMODEM of its hash tag, as the
 * cluster specification defines it), the redirections a node answers
 * (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) and the slot map of CLUSTER SLOTS.
 * Pure and thread-safe; daemon/store_cluster.c routes with it.
 */
#ifndef DIVVY_STORE_SLOTS_H
#define DIVVY_STORE_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#define STORE_SLOTS_N           16384
#define STORE_SLOTS_HOST_MAX    256

struct redisReply;

/* CRC16/XMODEM (poly 0x1021, init 0) of @len bytes at @p. */
uint16_t store_slots_crc16(const void *p, size_t len);

/* The slot of @key (@len bytes): the CRC16 of the text between the first
 * '{' and the next '}' when that is not empty, else of the whole key. */
unsigned store_slots_key_slot(const char *key, size_t len);

enum store_redirect {
    STORE_REDIRECT_NONE = 0,    /* not a cluster error */
    STORE_REDIRECT_MOVED,       /* the slot lives at host:port for good */
    STORE_REDIRECT_ASK,         /* this once, at host:port after ASKING */
    STORE_REDIRECT_TRYAGAIN,    /* a multi-key operation during a migration */
    STORE_REDIRECT_DOWN,        /* CLUSTERDOWN: the cluster refuses the slot */
};

struct store_redirect_to {
    unsigned slot;
    char host[STORE_SLOTS_HOST_MAX];
    unsigned port;
};

/*
 * The kind of the error reply @err (its text, NUL-terminated); for MOVED
 * and ASK ("MOVED 3999 127.0.0.1:6381", "ASK 3999 [::1]:6381") fills
 * *ret.  A MOVED or ASK whose slot or address does not parse is
 * STORE_REDIRECT_NONE: an error like any other.
 */
enum store_redirect store_slots_redirect(const char *err, struct store_redirect_to *ret);

/*
 * Walks CLUSTER SLOTS's answer @r: for each range [start, end] calls
 * @fn(@arg, start, end, host, port) with its master ("" host: the node that
 * answered, as Redis says when it does not know its own address).
 * -EPROTO when @r is not such an answer (nothing is called then: it is
 * checked whole first); else what the calls returned, the first < 0 ending
 * the walk.
 */
int store_slots_parse(const struct redisReply *r,
                      int (*fn)(void *arg, unsigned start, unsigned end, const char *host,
                                unsigned port),
                      void *arg);

#endif
