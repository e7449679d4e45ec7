/* SPDX-License-Identifier: MIT */
/*
 * store_slots: Redis Cluster's slots and redirections (see store_slots.h,
 * docs/redis.md "Cluster").  No I/O, no state.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "store_slots.h"

uint16_t store_slots_crc16(const void *p, size_t len)
{
    const unsigned char *b = p;
    uint16_t crc = 0;

    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(b[i] << 8);
        for (int k = 0; k < 8; k++)
            crc = crc & 0x8000 ? (uint16_t)(crc << 1 ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned store_slots_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len), *close;

    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;

        close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return store_slots_crc16(open + 1, (size_t)(close - open - 1)) % STORE_SLOTS_N;
    }
    return store_slots_crc16(key, len) % STORE_SLOTS_N;
}

/* "SLOT HOST:PORT" (HOST may be "[V6]" or a bare IPv6 address, split at the
 * last ':'), as MOVED and ASK give it. */
static int parse_target(const char *s, struct store_redirect_to *ret)
{
    const char *sp, *colon, *host;
    unsigned long slot, port;
    size_t hlen;
    char *end;

    if (*s < '0' || *s > '9')
        return -EINVAL;
    slot = strtoul(s, &end, 10);
    if (*end != ' ' || slot >= STORE_SLOTS_N)
        return -EINVAL;
    sp = end + 1;
    colon = strrchr(sp, ':');
    if (!colon || colon[1] < '0' || colon[1] > '9')
        return -EINVAL;
    port = strtoul(colon + 1, &end, 10);
    if ((*end && *end != ' ' && *end != '\r' && *end != '\n') || port == 0 || port > 65535)
        return -EINVAL;
    host = sp;
    hlen = (size_t)(colon - sp);
    if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
        host++;
        hlen -= 2;
    }
    if (hlen >= sizeof(ret->host) || memchr(host, ' ', hlen))
        return -EINVAL;
    ret->slot = (unsigned)slot;
    memcpy(ret->host, host, hlen);
    ret->host[hlen] = '\0';
    ret->port = (unsigned)port;
    return 0;
}

enum store_redirect store_slots_redirect(const char *err, struct store_redirect_to *ret)
{
    if (strncmp(err, "MOVED ", 6) == 0)
        return parse_target(err + 6, ret) < 0 ? STORE_REDIRECT_NONE : STORE_REDIRECT_MOVED;
    if (strncmp(err, "ASK ", 4) == 0)
        return parse_target(err + 4, ret) < 0 ? STORE_REDIRECT_NONE : STORE_REDIRECT_ASK;
    if (strncmp(err, "TRYAGAIN", 8) == 0 && (!err[8] || err[8] == ' '))
        return STORE_REDIRECT_TRYAGAIN;
    if (strncmp(err, "CLUSTERDOWN", 11) == 0 && (!err[11] || err[11] == ' '))
        return STORE_REDIRECT_DOWN;
    return STORE_REDIRECT_NONE;
}

static bool is_int(const redisReply *e)
{
    return e->type == REDIS_REPLY_INTEGER;
}

/* A range: [start, end, [host, port, ...], replicas...]. */
static bool range_ok(const redisReply *e)
{
    const redisReply *m;

    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !is_int(e->element[0]) ||
        !is_int(e->element[1]) || e->element[2]->type != REDIS_REPLY_ARRAY)
        return false;
    if (e->element[0]->integer < 0 || e->element[0]->integer > e->element[1]->integer ||
        e->element[1]->integer >= STORE_SLOTS_N)
        return false;
    m = e->element[2];
    return m->elements >= 2 && m->element[0]->type == REDIS_REPLY_STRING &&
           m->element[0]->len < STORE_SLOTS_HOST_MAX && is_int(m->element[1]) &&
           m->element[1]->integer > 0 && m->element[1]->integer <= 65535;
}

int store_slots_parse(const redisReply *r,
                      int (*fn)(void *arg, unsigned start, unsigned end, const char *host,
                                unsigned port),
                      void *arg)
{
    int rc = 0;

    if (!r || r->type != REDIS_REPLY_ARRAY)
        return -EPROTO;
    for (size_t i = 0; i < r->elements; i++) {
        if (!range_ok(r->element[i]))
            return -EPROTO;
    }
    for (size_t i = 0; i < r->elements && rc >= 0; i++) {
        const redisReply *e = r->element[i], *m = e->element[2];

        rc = fn(arg, (unsigned)e->element[0]->integer, (unsigned)e->element[1]->integer,
                m->element[0]->str, (unsigned)m->element[1]->integer);
    }
    return rc;
}
