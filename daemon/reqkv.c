/* SPDX-License-Identifier: MIT */
/*
 * reqkv: key/value pairs of a request built from parts (see reqkv.h): a
 * binary search for the key's place, then one copy of each new string.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "proto.h"
#include "reqkv.h"

/* Copies @s (NUL-terminated) into req->buf at *@off. */
static const char *reqkv_copy(struct proto_req *req, size_t *off, const char *s, size_t len)
{
    char *dst = req->buf + *off;

    if (len)
        memcpy(dst, s, len);
    dst[len] = '\0';
    *off += len + 1;
    return dst;
}

int reqkv_put(struct proto_req *req, size_t *off, const char *key, size_t klen,
              const char *value, size_t vlen)
{
    unsigned lo = 0, hi = req->n_kv;
    bool found;
    int c;

    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        size_t n = req->kv[mid].key_len < klen ? req->kv[mid].key_len : klen;

        c = n ? memcmp(req->kv[mid].key, key, n) : 0;
        if (c == 0)
            c = req->kv[mid].key_len < klen ? -1 : req->kv[mid].key_len > klen ? 1 : 0;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    found = lo < req->n_kv && req->kv[lo].key_len == klen &&
            (klen == 0 || memcmp(req->kv[lo].key, key, klen) == 0);
    if (!found && req->n_kv == PROTO_KV_MAX)
        return -E2BIG;
    if (*off + (found ? 0 : klen + 1) + vlen + 1 > sizeof(req->buf) || klen > UINT16_MAX ||
        vlen > UINT16_MAX)
        return -EMSGSIZE;
    if (!found) {
        memmove(&req->kv[lo + 1], &req->kv[lo], (req->n_kv - lo) * sizeof(req->kv[0]));
        req->n_kv++;
        req->kv[lo].key = reqkv_copy(req, off, key, klen);
        req->kv[lo].key_len = (uint16_t)klen;
    }
    req->kv[lo].value = reqkv_copy(req, off, value, vlen);
    req->kv[lo].value_len = (uint16_t)vlen;
    return 0;
}
