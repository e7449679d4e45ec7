/* SPDX-License-Identifier: MIT */
/*
 * dlog_ring: a worker's single-producer single-consumer buffer of raw
 * decision records (see dlog_ring.h).  A raw record is a fixed head, its
 * outcomes, its pairs' lengths, then the pairs' bytes, 8-byte aligned; the
 * producer only copies (no rule walk, no encoding, no clock of its own):
 * the drain thread does the rest.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dlog_ring.h"
#include "table.h"

enum { RAW_PAD = 0, RAW_DECISION = 1, RAW_GAP = 2 };

struct raw_head {
    uint32_t size;              /* of the whole record, a multiple of 8 */
    uint8_t kind;               /* RAW_* */
    uint8_t op, protocol, path;
    uint8_t flags, n_kv, n_out;
    uint16_t err;
    uint32_t uid, pid, n_reset;
    uint64_t mono_ms, generation, n, credit, reset_s, decider_id;
};

struct raw_out {
    uint64_t rule_id, credit, reset_s;
    uint8_t flags;
};

struct raw_len {
    uint16_t key, value;
};

_Static_assert(sizeof(struct raw_head) % 8 == 0, "raw records stay 8-byte aligned");
_Static_assert(sizeof(struct raw_out) % 8 == 0, "raw outcomes stay 8-byte aligned");

/* The longest raw record: every outcome, every pair, a full line's bytes
 * (a reported decision is bounded the same, dlog_ring_put_report()). */
#define RAW_MAX (sizeof(struct raw_head) + RULES_MATCH_MAX * sizeof(struct raw_out) + \
                 PROTO_KV_MAX * sizeof(struct raw_len) + 2 * PROTO_LINE_MAX + 8)

struct dlog_ring {
    uint8_t *buf;
    size_t cap, mask;
    /* The producer's line: head is published, the rest only it touches
     * (dropped is read by other threads, relaxed). */
    _Alignas(64) uint64_t head;
    uint64_t head_local;
    uint64_t dropped;           /* in all */
    uint64_t gap;               /* dropped since the last GAP record */
    uint64_t gap_mono_ms;       /* when the last of them was dropped */
    bool kicked;                /* the drain was woken and has not drained since */
    /* The consumer's line. */
    _Alignas(64) uint64_t tail;
    uint64_t cur_size;          /* of the record dlog_ring_next() returned */
};

static inline size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

struct dlog_ring *dlog_ring_new(size_t cap)
{
    struct dlog_ring *rg;

    if (cap < (64u << 10) || (cap & (cap - 1)) || cap < 4 * RAW_MAX)
        return NULL;
    rg = aligned_alloc(64, sizeof(*rg));
    if (!rg)
        return NULL;
    memset(rg, 0, sizeof(*rg));
    rg->buf = aligned_alloc(64, cap);
    if (!rg->buf) {
        free(rg);
        return NULL;
    }
    rg->cap = cap;
    rg->mask = cap - 1;
    return rg;
}

void dlog_ring_free(struct dlog_ring *rg)
{
    if (!rg)
        return;
    free(rg->buf);
    free(rg);
}

/* ---- producer ------------------------------------------------------------------------------ */

/* The bytes a record of @size takes at @head: its padding to the end too
 * when it would wrap. */
static size_t taken(const struct dlog_ring *rg, uint64_t head, size_t size)
{
    size_t off = head & rg->mask;

    return off + size > rg->cap ? rg->cap - off + size : size;
}

/* Room for @size bytes while at most @limit are used, and @then more after
 * them: where to write them (the padding to the end written first when they
 * would wrap), or NULL. */
static uint8_t *reserve(struct dlog_ring *rg, size_t size, size_t then, size_t limit)
{
    uint64_t tail = __atomic_load_n(&rg->tail, __ATOMIC_ACQUIRE);
    uint64_t head = rg->head_local;
    size_t off = head & rg->mask;
    size_t pad = off + size > rg->cap ? rg->cap - off : 0;
    size_t after = then ? taken(rg, head + pad + size, then) : 0;

    if (head - tail + pad + size + after > limit)
        return NULL;
    if (pad) {
        struct raw_head *p = (struct raw_head *)(rg->buf + off);

        p->size = (uint32_t)pad;
        p->kind = RAW_PAD;
        rg->head_local = head + pad;
    }
    return rg->buf + (rg->head_local & rg->mask);
}

static void commit(struct dlog_ring *rg, size_t size, size_t limit, bool *ret_kick)
{
    uint64_t tail;

    rg->head_local += size;
    __atomic_store_n(&rg->head, rg->head_local, __ATOMIC_RELEASE);
    if (__atomic_load_n(&rg->kicked, __ATOMIC_RELAXED))
        return;
    tail = __atomic_load_n(&rg->tail, __ATOMIC_RELAXED);
    if (rg->head_local - tail > limit / 2 || rg->head_local - tail > rg->cap / 2) {
        __atomic_store_n(&rg->kicked, true, __ATOMIC_RELAXED);
        *ret_kick = true;
    }
}

static void drop(struct dlog_ring *rg, uint64_t mono_ms)
{
    __atomic_store_n(&rg->dropped, rg->dropped + 1, __ATOMIC_RELAXED);
    rg->gap++;
    rg->gap_mono_ms = mono_ms;
}

/* The GAP record of the drops so far, before the next record (of @next
 * bytes): true when there is none to write or it was written; false, and
 * nothing written, when the two do not fit. */
static bool put_gap(struct dlog_ring *rg, size_t next, size_t limit, bool *ret_kick)
{
    struct raw_head *h;

    if (!rg->gap)
        return true;
    h = (struct raw_head *)reserve(rg, sizeof(*h), next, limit);
    if (!h)
        return false;
    memset(h, 0, sizeof(*h));
    h->size = sizeof(*h);
    h->kind = RAW_GAP;
    h->n = rg->gap;
    h->mono_ms = rg->gap_mono_ms;
    commit(rg, sizeof(*h), limit, ret_kick);
    rg->gap = 0;
    return true;
}

/* The pairs of @n_kv @kv after head @h's outcomes (@n_out); true when each
 * length fits its field. */
static void put_pairs(struct raw_head *h, unsigned n_out, const struct proto_kv *kv,
                      unsigned n_kv)
{
    struct raw_len *len = (struct raw_len *)((uint8_t *)(h + 1) + n_out * sizeof(struct raw_out));
    uint8_t *p = (uint8_t *)(len + n_kv);

    for (unsigned i = 0; i < n_kv; i++) {
        len[i].key = kv[i].key_len;
        len[i].value = kv[i].value_len;
        memcpy(p, kv[i].key, kv[i].key_len);
        p += kv[i].key_len;
        memcpy(p, kv[i].value, kv[i].value_len);
        p += kv[i].value_len;
    }
}

/* The id of rule @idx of @rs, and its store in *@ret_store; 0 when unknown. */
static uint64_t rule_id(const struct rules *rs, uint32_t idx, uint8_t *ret_store)
{
    struct rules_rule r;

    if (rules_get(rs, idx, &r) < 0)
        return 0;
    if (ret_store)
        *ret_store = (uint8_t)r.store;
    return r.id;
}

bool dlog_ring_put(struct dlog_ring *rg, const struct dlog_note *no, const struct rules *rs,
                   const struct eval_result *res, bool *ret_kick)
{
    bool error = no->flags & DLOG_F_ERROR;
    unsigned n_out = error || no->rematched ? 0 : res->n;
    size_t size = sizeof(struct raw_head) + n_out * sizeof(struct raw_out) +
                  no->n_kv * sizeof(struct raw_len);
    struct raw_out *out;
    struct raw_head *h;
    uint32_t last = UINT32_MAX;
    uint64_t last_id = 0;
    uint8_t store = 0;

    for (unsigned i = 0; i < no->n_kv; i++)
        size += (size_t)no->kv[i].key_len + no->kv[i].value_len;
    size = align8(size);
    if (!put_gap(rg, size, rg->cap, ret_kick) ||
        !(h = (struct raw_head *)reserve(rg, size, 0, rg->cap))) {
        drop(rg, no->mono_ms);
        return false;
    }
    *h = (struct raw_head){ .size = (uint32_t)size, .kind = RAW_DECISION, .op = no->op,
                            .protocol = no->protocol, .flags = no->flags,
                            .n_kv = (uint8_t)no->n_kv, .n_out = (uint8_t)n_out, .err = no->err,
                            .uid = no->uid, .pid = no->pid, .mono_ms = no->mono_ms,
                            .generation = no->generation, .n = no->n };
    if (!error) {
        h->flags |= res->allowed ? DLOG_F_ALLOWED : 0;
        h->credit = res->credit;
        h->reset_s = res->reset_s;
        h->n_reset = res->n_reset;
    }
    out = (struct raw_out *)(h + 1);
    for (unsigned i = 0; i < n_out; i++) {
        const struct eval_outcome *o = &res->o[i];

        /* The rules of a path are mostly one: look each up once. */
        if (o->rule != last) {
            last = o->rule;
            last_id = rule_id(rs, o->rule, NULL);
        }
        out[i] = (struct raw_out){ .rule_id = last_id, .credit = o->credit,
                                   .reset_s = o->reset_s,
                                   .flags = (uint8_t)((o->allowed ? DLOG_O_ALLOWED : 0) |
                                                      (o->counted ? DLOG_O_COUNTED : 0) |
                                                      (o->table_full ? DLOG_O_TABLE_FULL : 0) |
                                                      (o->store_down ? DLOG_O_STORE_DOWN : 0) |
                                                      (o->canary ? DLOG_O_CANARY : 0)) };
        h->flags |= (o->table_full ? DLOG_F_TABLE_FULL : 0) |
                    (o->store_down ? DLOG_F_STORE_DOWN : 0);
    }
    if (n_out) {
        /* The path is the deciding rule's store; the rule named, the one whose
         * credit the reply shows (the engine's answer names the same). */
        uint64_t id = res->limiter == last ? last_id : rule_id(rs, res->limiter, NULL);

        h->decider_id = id;
        if (rule_id(rs, res->decider, &store))
            h->path = (uint8_t)(DLOG_PATH_LOCAL + store);
    }
    put_pairs(h, n_out, no->kv, no->n_kv);
    commit(rg, size, rg->cap, ret_kick);
    return true;
}

int dlog_ring_put_report(struct dlog_ring *rg, const struct dlog_decision *d, bool *ret_kick)
{
    size_t size = sizeof(struct raw_head) + d->n_out * sizeof(struct raw_out) +
                  d->n_kv * sizeof(struct raw_len), bytes = 0;
    struct proto_kv kv[PROTO_KV_MAX];
    struct raw_out *out;
    struct raw_head *h;

    if (d->n_kv > PROTO_KV_MAX || d->n_out > RULES_MATCH_MAX || d->path >= DLOG_N_PATH)
        return -EINVAL;
    for (unsigned i = 0; i < d->n_kv; i++) {
        if (d->kv[i].key_len > UINT16_MAX || d->kv[i].value_len > UINT16_MAX)
            return -EINVAL;
        bytes += (size_t)d->kv[i].key_len + d->kv[i].value_len;
        kv[i] = (struct proto_kv){ .key = d->kv[i].key, .value = d->kv[i].value,
                                   .key_len = (uint16_t)d->kv[i].key_len,
                                   .value_len = (uint16_t)d->kv[i].value_len };
    }
    if (bytes > 2 * PROTO_LINE_MAX)
        return -EINVAL;
    size = align8(size + bytes);
    /* Reports live in the first half only: divvyd's own decisions keep the second. */
    if (!put_gap(rg, size, rg->cap / 2, ret_kick) ||
        !(h = (struct raw_head *)reserve(rg, size, 0, rg->cap / 2))) {
        drop(rg, d->mono_ms);
        return -ENOSPC;
    }
    /* A report is marked as one whatever the client sent: it never passes
     * for a decision divvyd took. */
    *h = (struct raw_head){ .size = (uint32_t)size, .kind = RAW_DECISION, .op = d->op,
                            .protocol = DLOG_PROTO_FAST, .path = d->path,
                            .flags = d->flags | DLOG_F_REPORTED,
                            .n_kv = (uint8_t)d->n_kv, .n_out = (uint8_t)d->n_out,
                            .err = d->err, .uid = d->uid, .pid = d->pid, .n_reset = d->n_reset,
                            .mono_ms = d->mono_ms, .generation = d->generation, .n = d->n,
                            .credit = d->credit, .reset_s = d->reset_s,
                            .decider_id = d->decider_id };
    out = (struct raw_out *)(h + 1);
    for (unsigned i = 0; i < d->n_out; i++)
        out[i] = (struct raw_out){ .rule_id = d->out[i].rule_id, .credit = d->out[i].credit,
                                   .reset_s = d->out[i].reset_s, .flags = d->out[i].flags };
    put_pairs(h, d->n_out, kv, d->n_kv);
    commit(rg, size, rg->cap / 2, ret_kick);
    return 0;
}

/* ---- consumer ------------------------------------------------------------------------------ */

enum dlog_raw_kind dlog_ring_next(struct dlog_ring *rg, struct dlog_decision *d,
                                  uint64_t *ret_dropped, uint64_t *ret_mono_ms)
{
    uint64_t head = __atomic_load_n(&rg->head, __ATOMIC_ACQUIRE);
    uint64_t tail = rg->tail;
    const struct raw_head *h;

    rg->cur_size = 0;
    for (;;) {
        if (tail == head)
            return DLOG_RAW_NONE;
        h = (const struct raw_head *)(rg->buf + (tail & rg->mask));
        if (h->kind != RAW_PAD)
            break;
        tail += h->size;
        __atomic_store_n(&rg->tail, tail, __ATOMIC_RELEASE);
    }
    rg->cur_size = h->size;
    if (h->kind == RAW_GAP) {
        *ret_dropped = h->n;
        *ret_mono_ms = h->mono_ms;
        return DLOG_RAW_GAP;
    }
    const struct raw_out *out = (const struct raw_out *)(h + 1);
    const struct raw_len *len = (const struct raw_len *)(out + h->n_out);
    const char *p = (const char *)(len + h->n_kv);

    d->unix_ms = 0;
    d->mono_ms = h->mono_ms;
    d->generation = h->generation;
    d->op = h->op;
    d->protocol = h->protocol;
    d->path = h->path;
    d->flags = h->flags;
    d->err = h->err;
    d->n = h->n;
    d->uid = h->uid;
    d->pid = h->pid;
    d->credit = h->credit;
    d->reset_s = h->reset_s;
    d->decider_id = h->decider_id;
    d->n_reset = h->n_reset;
    d->n_out = h->n_out;
    for (unsigned i = 0; i < h->n_out; i++)
        d->out[i] = (struct dlog_outcome){ .rule_id = out[i].rule_id, .credit = out[i].credit,
                                           .reset_s = out[i].reset_s, .flags = out[i].flags };
    d->n_kv = h->n_kv;
    for (unsigned i = 0; i < h->n_kv; i++) {
        d->kv[i] = (struct dlog_kv){ .key = p, .key_len = len[i].key, .redact = DLOG_KEEP };
        p += len[i].key;
        d->kv[i].value = p;
        d->kv[i].value_len = len[i].value;
        p += len[i].value;
    }
    return DLOG_RAW_DECISION;
}

size_t dlog_ring_size(const struct dlog_ring *rg)
{
    return rg->cur_size;
}

void dlog_ring_release(struct dlog_ring *rg)
{
    if (!rg->cur_size)
        return;
    __atomic_store_n(&rg->tail, rg->tail + rg->cur_size, __ATOMIC_RELEASE);
    rg->cur_size = 0;
}

void dlog_ring_rearm(struct dlog_ring *rg)
{
    __atomic_store_n(&rg->kicked, false, __ATOMIC_RELAXED);
}

uint64_t dlog_ring_dropped(const struct dlog_ring *rg)
{
    return __atomic_load_n(&rg->dropped, __ATOMIC_RELAXED);
}
