/* SPDX-License-Identifier: MIT */
/*
 * store_reply: the decoding of every answer the store's Redis commands get
 * (see store_script.h, docs/redis.md "Scripts"): the scripts' arrays of
 * integers, one shape per kind of script (a batched form's k verdicts
 * included), and the plain DEL and SCAN.  Anything not of the expected shape
 * is -EPROTO: not an answer to trust.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "store_script.h"

/* ---- replies (docs/redis.md "Scripts": arrays of integers) ---------------------- */

/* The @n integers of array @r into @v; false when @r is something else. */
static bool ints(const redisReply *r, size_t n, int64_t *v)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return false;
        v[i] = r->element[i]->integer;
    }
    return true;
}

static uint64_t not_negative(int64_t v)
{
    return v > 0 ? (uint64_t)v : 0;
}

/* {k, then k times allowed, credit, ms to reset}: integers, 1 <= k <=
 * STORE_ITEMS_MAX (no batch holds more). */
static int decode_many(const redisReply *r, struct store_reply *ret)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 4 || (r->elements - 1) % 3 != 0 ||
        r->elements > 1 + 3 * STORE_ITEMS_MAX)
        return -EPROTO;
    for (size_t i = 0; i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return -EPROTO;
    }
    if (r->element[0]->integer < 0 || (uint64_t)r->element[0]->integer != (r->elements - 1) / 3)
        return -EPROTO;
    ret->kind = STORE_REPLY_VERDICTS;
    ret->verdicts.n = (r->elements - 1) / 3;
    ret->verdicts.elements = r->element + 1;
    return 0;
}

void store_verdicts_get(const struct store_verdicts *v, size_t i, struct store_verdict *ret)
{
    const redisReply *const *e = (const redisReply *const *)v->elements + 3 * i;

    ret->allowed = e[0]->integer != 0;
    ret->credit = not_negative(e[1]->integer);
    ret->reset_ms = not_negative(e[2]->integer);
}

int store_script_decode(enum store_script script, const struct redisReply *r,
                        struct store_reply *ret)
{
    int64_t v[4];

    memset(ret, 0, sizeof(*ret));
    switch (script) {
    case STORE_SCRIPT_WINDOW:
    case STORE_SCRIPT_BUCKET:
    case STORE_SCRIPT_SLIDING:
    case STORE_SCRIPT_GCRA:
    case STORE_SCRIPT_LOCKOUT:
        /* {allowed, credit, ms to reset} */
        if (!ints(r, 3, v))
            return -EPROTO;
        ret->kind = STORE_REPLY_VERDICT;
        ret->verdict.allowed = v[0] != 0;
        ret->verdict.credit = not_negative(v[1]);
        ret->verdict.reset_ms = not_negative(v[2]);
        return 0;
    case STORE_SCRIPT_LEASE:
        /* {granted, remainder after, ms to the window's end, 1 if it began now} */
        if (!ints(r, 4, v) || v[0] < 0 || v[1] < 0 || v[2] < 0)
            return -EPROTO;
        ret->kind = STORE_REPLY_GRANT;
        ret->grant.granted = (uint64_t)v[0];
        ret->grant.remain = (uint64_t)v[1];
        ret->grant.ttl_ms = (uint64_t)v[2];
        ret->grant.created = v[3] != 0;
        return 0;
    case STORE_SCRIPT_ADHOC_TB:
        if (r->type != REDIS_REPLY_INTEGER || r->integer < 0)
            return -EPROTO;
        ret->kind = STORE_REPLY_TOKENS;
        ret->tokens = r->integer;
        return 0;
    case STORE_SCRIPT_ADHOC_GCRA: {
        int64_t g[5];

        /* {limited, limit, remaining, retry_after_ns, reset_after_ns} */
        if (!ints(r, 5, g) || (g[0] != 0 && g[0] != 1) || g[1] < 1 || g[2] < 0)
            return -EPROTO;
        ret->kind = STORE_REPLY_GCRA;
        ret->gcra.limited = g[0] != 0;
        ret->gcra.limit = g[1];
        ret->gcra.remaining = g[2];
        ret->gcra.retry_after_ns = g[3];
        ret->gcra.reset_after_ns = g[4];
        return 0;
    }
    case STORE_SCRIPT_WINDOW_MANY:
    case STORE_SCRIPT_BUCKET_MANY:
    case STORE_SCRIPT_SLIDING_MANY:
    case STORE_SCRIPT_GCRA_MANY:
        return decode_many(r, ret);
    case STORE_N_SCRIPTS:
        break;
    }
    return -EPROTO;
}

/* ---- DEL and SCAN, the plain commands the store sends -------------------------- */

int store_script_decode_del(const struct redisReply *r, struct store_reply *ret)
{
    memset(ret, 0, sizeof(*ret));
    if (r->type != REDIS_REPLY_INTEGER || r->integer < 0)
        return -EPROTO;
    ret->kind = STORE_REPLY_DELETED;
    ret->deleted = (uint64_t)r->integer;
    return 0;
}

int store_script_decode_scan(const struct redisReply *r, struct store_reply *ret)
{
    const redisReply *keys;
    uint64_t cursor = 0;

    memset(ret, 0, sizeof(*ret));
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || !r->element[0]->len ||
        r->element[1]->type != REDIS_REPLY_ARRAY)
        return -EPROTO;
    /* Decimal digits only, as Redis sends it (strtoull() would take "-1"). */
    for (size_t i = 0; i < r->element[0]->len; i++) {
        unsigned d = (unsigned)(r->element[0]->str[i] - '0');

        if (d > 9 || cursor > (UINT64_MAX - d) / 10)
            return -EPROTO;
        cursor = cursor * 10 + d;
    }
    keys = r->element[1];
    for (size_t i = 0; i < keys->elements; i++) {
        if (keys->element[i]->type != REDIS_REPLY_STRING)
            return -EPROTO;
    }
    ret->keys.cursor = cursor;
    ret->kind = STORE_REPLY_KEYS;
    ret->keys.n = keys->elements;
    ret->keys.elements = keys->element;
    return 0;
}

void store_keys_get(const struct store_keys *k, size_t i, const char **ret_key, size_t *ret_len)
{
    const redisReply *const *e = k->elements;

    *ret_key = e[i]->str;
    *ret_len = e[i]->len;
}
