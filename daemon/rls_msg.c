/* SPDX-License-Identifier: MIT */
/*
 * rls_msg: Envoy RLS v3 messages and gRPC framing, no I/O (see rls_msg.h).
 * protobuf-c decodes through an allocator that counts what it takes, so a
 * message of nested empty entries cannot make divvyd allocate without bound;
 * the message sizes and counts are checked before anything is matched.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "reqkv.h"
#include "rls_msg.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest rls_pb_req;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor rls_pb_desc;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_pb_resp;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus rls_pb_status;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rls_pb_limit;
typedef Envoy__Config__Core__V3__HeaderValue rls_pb_header;

#define CODE_OK         ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
#define CODE_OVER_LIMIT ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT

/* What the counting allocator puts before each block: its size. */
union arena_hdr {
    size_t size;
    max_align_t align;
};

struct rls_msg {
    ProtobufCAllocator alloc;
    size_t used;                /* bytes protobuf-c holds now */
    size_t cap;
    bool exhausted;             /* an allocation went over cap */
    rls_pb_req *req;
};

static void *arena_alloc(void *data, size_t size)
{
    struct rls_msg *m = data;
    union arena_hdr *h;

    if (size > m->cap || m->used > m->cap - size) {
        m->exhausted = true;
        return NULL;
    }
    h = malloc(sizeof(*h) + size);
    if (!h)
        return NULL;
    h->size = size;
    m->used += size;
    return h + 1;
}

static void arena_free(void *data, void *p)
{
    struct rls_msg *m = data;
    union arena_hdr *h;

    if (!p)
        return;
    h = (union arena_hdr *)p - 1;
    m->used -= h->size;
    free(h);
}

int rls_msg_unframe(const uint8_t *body, size_t len, const uint8_t **ret_msg, size_t *ret_len)
{
    uint32_t n;

    if (len < RLS_GRPC_PREFIX)
        return -EINVAL;
    n = (uint32_t)body[1] << 24 | (uint32_t)body[2] << 16 | (uint32_t)body[3] << 8 | body[4];
    if (body[0] > 1)
        return -EINVAL;
    if (body[0] == 1)
        return -ENOTSUP;
    if (n > RLS_MSG_MAX)
        return -EMSGSIZE;
    if ((size_t)n != len - RLS_GRPC_PREFIX)
        return -EINVAL;
    *ret_msg = body + RLS_GRPC_PREFIX;
    *ret_len = n;
    return 0;
}

int rls_msg_timeout_ms(const char *v, size_t len, uint64_t *ret_ms)
{
    static const uint64_t day_ms = 86400000;
    uint64_t n = 0, ms;

    if (len < 2 || len > 9)
        return -EINVAL;
    for (size_t i = 0; i + 1 < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -EINVAL;
        n = n * 10 + (uint64_t)(v[i] - '0');
    }
    switch (v[len - 1]) {
    case 'H':
        ms = n * 3600000;
        break;
    case 'M':
        ms = n * 60000;
        break;
    case 'S':
        ms = n * 1000;
        break;
    case 'm':
        ms = n;
        break;
    case 'u':
        ms = (n + 999) / 1000;
        break;
    case 'n':
        ms = (n + 999999) / 1000000;
        break;
    default:
        return -EINVAL;
    }
    *ret_ms = ms < day_ms ? ms : day_ms;
    return 0;
}

/* A key or value divvy's line protocol could carry, quoted: not empty, no '"', CR, LF. */
static bool string_ok(const char *s)
{
    if (!s || !*s)
        return false;
    return !s[strcspn(s, "\"\r\n")];
}

void rls_msg_free(struct rls_msg *m)
{
    if (!m)
        return;
    if (m->req)
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(m->req, &m->alloc);
    free(m);
}

int rls_msg_decode(const uint8_t *data, size_t len, struct rls_msg **ret)
{
    struct rls_msg *m;
    int r;

    if (len > RLS_MSG_MAX)
        return -EMSGSIZE;
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->alloc.alloc = arena_alloc;
    m->alloc.free = arena_free;
    m->alloc.allocator_data = m;
    m->cap = RLS_DECODE_MEM_MAX;
    m->req = envoy__service__ratelimit__v3__rate_limit_request__unpack(&m->alloc, len, data);
    if (!m->req) {
        r = m->exhausted ? -EMSGSIZE : -EINVAL;
        goto out;
    }
    r = -EINVAL;
    if (!string_ok(m->req->domain) || m->req->n_descriptors == 0)
        goto out;
    if (m->req->n_descriptors > RLS_DESCRIPTORS_MAX) {
        r = -E2BIG;
        goto out;
    }
    for (size_t i = 0; i < m->req->n_descriptors; i++) {
        const rls_pb_desc *d = m->req->descriptors[i];

        if (d->n_entries == 0)
            goto out;
        for (size_t j = 0; j < d->n_entries; j++)
            if (!string_ok(d->entries[j]->key) || !string_ok(d->entries[j]->value))
                goto out;
    }
    *ret = m;
    return 0;
out:
    rls_msg_free(m);
    return r;
}

size_t rls_msg_descriptors(const struct rls_msg *m)
{
    return m->req->n_descriptors;
}

int rls_msg_request(const struct rls_msg *m, size_t i, struct proto_req *req)
{
    const rls_pb_desc *d = m->req->descriptors[i];
    /* The request as a line: "TAKE 1000000000", ` "key"="value"` each, "\n". */
    size_t line = 16 + 6 + 6 + strlen(m->req->domain), off = 0;
    uint64_t n = m->req->hits_addend;
    int r;

    if (d->hits_addend)
        n = d->hits_addend->value;
    if (n == 0)
        n = 1;
    if (n > PROTO_TAKE_MAX)
        return -ERANGE;
    for (size_t j = 0; j < d->n_entries; j++) {
        if (strcmp(d->entries[j]->key, "domain") == 0)
            return -EINVAL;
        line += strlen(d->entries[j]->key) + strlen(d->entries[j]->value) + 6;
        if (line > PROTO_LINE_MAX)
            return -EMSGSIZE;
    }
    memset(req, 0, offsetof(struct proto_req, kv));
    req->verb = PROTO_TAKE;
    req->err = PROTO_E_NONE;
    req->amount = n;
    r = reqkv_put(req, &off, "domain", 6, m->req->domain, strlen(m->req->domain));
    for (size_t j = 0; r >= 0 && j < d->n_entries; j++)
        r = reqkv_put(req, &off, d->entries[j]->key, strlen(d->entries[j]->key),
                      d->entries[j]->value, strlen(d->entries[j]->value));
    return r;
}

bool rls_msg_override(const struct rls_msg *m, size_t i, uint32_t *ret_per_unit,
                      unsigned *ret_unit)
{
    const rls_pb_desc *d = m->req->descriptors[i];

    if (!d->limit)
        return false;
    *ret_per_unit = d->limit->requests_per_unit;
    *ret_unit = (unsigned)d->limit->unit;
    return true;
}

bool rls_msg_unit(int64_t limit, int64_t period_s, uint32_t *ret_per_unit,
                  enum rls_unit *ret_unit)
{
    enum rls_unit u;

    switch (period_s) {
    case 1:
        u = RLS_UNIT_SECOND;
        break;
    case 60:
        u = RLS_UNIT_MINUTE;
        break;
    case 3600:
        u = RLS_UNIT_HOUR;
        break;
    case 86400:
        u = RLS_UNIT_DAY;
        break;
    default:
        return false;
    }
    if (limit < 0)
        return false;
    *ret_per_unit = limit > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)limit;
    *ret_unit = u;
    return true;
}

/* A base-128 varint at *@p (before @end): 0, or -EINVAL when cut short or too long. */
static int msg_varint(const uint8_t **p, const uint8_t *end, uint64_t *ret)
{
    uint64_t v = 0;

    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (*p == end)
            return -EINVAL;
        v |= (uint64_t)(**p & 0x7f) << shift;
        if (!(*(*p)++ & 0x80)) {
            *ret = v;
            return 0;
        }
    }
    return -EINVAL;
}

int rls_msg_health_service(const uint8_t *msg, size_t len, const uint8_t **ret_name,
                       size_t *ret_len)
{
    const uint8_t *p = msg, *end = msg + len;
    uint64_t key, n;

    *ret_name = (const uint8_t *)"";
    *ret_len = 0;
    while (p < end) {
        if (msg_varint(&p, end, &key) < 0 || key >> 3 == 0)
            return -EINVAL;
        switch (key & 7) {
        case 0:                 /* varint */
            if (msg_varint(&p, end, &n) < 0)
                return -EINVAL;
            break;
        case 1:                 /* 64-bit */
        case 5:                 /* 32-bit */
            n = (key & 7) == 1 ? 8 : 4;
            if ((size_t)(end - p) < n)
                return -EINVAL;
            p += n;
            break;
        case 2:                 /* length-delimited: field 1 is the name, the last one wins */
            if (msg_varint(&p, end, &n) < 0 || n > (uint64_t)(end - p))
                return -EINVAL;
            if (key >> 3 == 1) {
                *ret_name = p;
                *ret_len = (size_t)n;
            }
            p += n;
            break;
        default:                /* groups: not in proto3 */
            return -EINVAL;
        }
    }
    return 0;
}

size_t rls_msg_ratelimit_headers(const struct rls_status *st, size_t n, struct rls_header *ret)
{
    const struct rls_status *min = NULL;
    uint64_t retry = 0;
    bool over = false;
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        if (st[i].has_limit && (!min || st[i].remaining < min->remaining))
            min = &st[i];
        if (st[i].over) {
            over = true;
            if (st[i].reset_s > retry)
                retry = st[i].reset_s;
        }
    }
    if (min) {
        ret[k].key = "RateLimit-Limit";
        snprintf(ret[k++].value, sizeof(ret->value), "%u", min->requests_per_unit);
        ret[k].key = "RateLimit-Remaining";
        snprintf(ret[k++].value, sizeof(ret->value), "%u", min->remaining);
        ret[k].key = "RateLimit-Reset";
        snprintf(ret[k++].value, sizeof(ret->value), "%llu", (unsigned long long)min->reset_s);
    }
    if (over && retry > 0) {
        ret[k].key = "Retry-After";
        snprintf(ret[k++].value, sizeof(ret->value), "%llu", (unsigned long long)retry);
    }
    return k;
}

int rls_msg_encode(const struct rls_status *st, size_t n, const struct rls_header *hdr,
                   size_t n_hdr, uint8_t **ret, size_t *ret_len)
{
    rls_pb_resp resp = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    rls_pb_status *ps = NULL, **pps = NULL;
    rls_pb_limit *pl = NULL;
    rls_pb_header ph[RLS_HEADERS_ADD_MAX], *pph[RLS_HEADERS_ADD_MAX];
    Google__Protobuf__Duration *pd = NULL;
    uint8_t *buf = NULL;
    size_t len;
    int r = -ENOMEM;

    if (n_hdr > RLS_HEADERS_ADD_MAX)
        return -EINVAL;
    ps = calloc(n ? n : 1, sizeof(*ps));
    pps = calloc(n ? n : 1, sizeof(*pps));
    pl = calloc(n ? n : 1, sizeof(*pl));
    pd = calloc(n ? n : 1, sizeof(*pd));
    if (!ps || !pps || !pl || !pd)
        goto out;
    resp.overall_code = CODE_OK;
    for (size_t i = 0; i < n; i++) {
        envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(&ps[i]);
        ps[i].code = st[i].over ? CODE_OVER_LIMIT : CODE_OK;
        if (st[i].over)
            resp.overall_code = ps[i].code;
        if (st[i].has_limit) {
            envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(&pl[i]);
            pl[i].name = (char *)st[i].name;
            pl[i].requests_per_unit = st[i].requests_per_unit;
            pl[i].unit = (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)
                         st[i].unit;
            ps[i].current_limit = &pl[i];
        }
        ps[i].limit_remaining = st[i].remaining;
        if (st[i].reset_s > 0) {
            google__protobuf__duration__init(&pd[i]);
            pd[i].seconds = (int64_t)st[i].reset_s;
            ps[i].duration_until_reset = &pd[i];
        }
        pps[i] = &ps[i];
    }
    resp.n_statuses = n;
    resp.statuses = pps;
    for (size_t i = 0; i < n_hdr; i++) {
        envoy__config__core__v3__header_value__init(&ph[i]);
        ph[i].key = (char *)hdr[i].key;
        ph[i].value = (char *)hdr[i].value;
        pph[i] = &ph[i];
    }
    resp.n_response_headers_to_add = n_hdr;
    resp.response_headers_to_add = n_hdr ? pph : NULL;
    len = envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(&resp);
    buf = malloc(RLS_GRPC_PREFIX + len);
    if (!buf)
        goto out;
    buf[0] = 0;
    buf[1] = (uint8_t)(len >> 24);
    buf[2] = (uint8_t)(len >> 16);
    buf[3] = (uint8_t)(len >> 8);
    buf[4] = (uint8_t)len;
    envoy__service__ratelimit__v3__rate_limit_response__pack(&resp, buf + RLS_GRPC_PREFIX);
    *ret = buf;
    *ret_len = RLS_GRPC_PREFIX + len;
    r = 0;
out:
    free(ps);
    free(pps);
    free(pl);
    free(pd);
    return r;
}
