/* SPDX-License-Identifier: MIT */
/*
 * dlog: the decision log's encoder (see dlog.h; the bytes are described in
 * docs/decision-log.md "Format").
 *
 * A block's payload is a run of items, each a type byte and fields: small
 * unsigned numbers as LEB128 varints, signed ones zigzag-encoded first,
 * times as zigzag deltas from the previous item's, and every string (keys,
 * values, rule ids as 8 little-endian bytes, labels) as a reference into
 * the block's dictionary: 0 then a varint length and the bytes (a literal,
 * which becomes the next entry), or the entry's number (1, 2, ...).  A
 * block that repeats the same requests stores each string once.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dlog_int.h"
#include "hash.h"

#define ENC_SLOTS   (2u * DLOG_DICT_MAX)    /* open addressing, a power of two */

struct dlog_enc {
    uint8_t *buf;               /* block header, then payload */
    size_t cap;
    size_t len;                 /* header included */
    unsigned count;
    uint32_t worker;
    uint64_t prev_mono, prev_unix;
    /* The dictionary: entry i (from 1) is the literal at payload offset
     * dict_off[i] of dict_len[i] bytes; slots hold entry numbers, valid
     * while slot_gen equals gen and the entry is below n_dict. */
    uint32_t n_dict;
    uint32_t *dict_off;
    uint32_t *dict_len;
    uint32_t *slot;
    uint32_t *slot_gen;
    uint32_t gen;
};

/* ---- output cursor ---------------------------------------------------------------------- */

struct cur {
    uint8_t *p;
    uint8_t *end;
    bool overflow;
};

static void put_u8(struct cur *c, uint8_t v)
{
    if (c->p >= c->end) {
        c->overflow = true;
        return;
    }
    *c->p++ = v;
}

static void put_var(struct cur *c, uint64_t v)
{
    while (v >= 0x80) {
        put_u8(c, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    put_u8(c, (uint8_t)v);
}

static void put_svar(struct cur *c, int64_t v)
{
    put_var(c, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static void put_bytes(struct cur *c, const void *s, size_t len)
{
    if ((size_t)(c->end - c->p) < len) {
        c->overflow = true;
        return;
    }
    if (len)
        memcpy(c->p, s, len);
    c->p += len;
}

/* A string by reference: an entry of the block's dictionary, or a literal
 * that becomes one (when the dictionary has room). */
static void put_str(struct dlog_enc *e, struct cur *c, const void *s, size_t len)
{
    uint64_t h = hash_fast(0x646c6f67, s, len);
    uint32_t mask = ENC_SLOTS - 1, i = (uint32_t)h & mask;
    uint8_t *payload = e->buf + DLOG_BLOCK_HDR;

    for (uint32_t probes = 0; probes < ENC_SLOTS; probes++, i = (i + 1) & mask) {
        uint32_t ent;

        if (e->slot_gen[i] != e->gen)
            break;
        ent = e->slot[i];
        if (ent < e->n_dict && e->dict_len[ent] == len &&
            memcmp(payload + e->dict_off[ent], s, len) == 0) {
            put_var(c, ent);
            return;
        }
    }
    put_var(c, 0);
    put_var(c, len);
    if (c->overflow || (size_t)(c->end - c->p) < len) {
        c->overflow = true;
        return;
    }
    /* Every literal is the next entry while the dictionary has room (the
     * reader counts them so); it is found again when a free slot was. */
    if (e->n_dict < DLOG_DICT_MAX) {
        e->dict_off[e->n_dict] = (uint32_t)(c->p - payload);
        e->dict_len[e->n_dict] = (uint32_t)len;
        if (e->slot_gen[i] != e->gen) {
            e->slot[i] = e->n_dict;
            e->slot_gen[i] = e->gen;
        }
        e->n_dict++;
    }
    put_bytes(c, s, len);
}

static void put_id(struct dlog_enc *e, struct cur *c, uint64_t id)
{
    uint8_t b[8];

    dlog_le64(b, id);
    put_str(e, c, b, sizeof(b));
}

/* ---- the encoder ------------------------------------------------------------------------ */

struct dlog_enc *dlog_enc_new(size_t cap)
{
    struct dlog_enc *e;

    if (cap < DLOG_BLOCK_HDR + 64 || cap > DLOG_BLOCK_MAX)
        return NULL;
    e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->cap = cap;
    e->buf = malloc(cap);
    e->dict_off = calloc(DLOG_DICT_MAX, sizeof(*e->dict_off));
    e->dict_len = calloc(DLOG_DICT_MAX, sizeof(*e->dict_len));
    e->slot = calloc(ENC_SLOTS, sizeof(*e->slot));
    e->slot_gen = calloc(ENC_SLOTS, sizeof(*e->slot_gen));
    if (!e->buf || !e->dict_off || !e->dict_len || !e->slot || !e->slot_gen) {
        dlog_enc_free(e);
        return NULL;
    }
    dlog_enc_begin(e, 0);
    return e;
}

void dlog_enc_free(struct dlog_enc *e)
{
    if (!e)
        return;
    free(e->buf);
    free(e->dict_off);
    free(e->dict_len);
    free(e->slot);
    free(e->slot_gen);
    free(e);
}

void dlog_enc_begin(struct dlog_enc *e, uint32_t worker)
{
    e->len = DLOG_BLOCK_HDR;
    e->count = 0;
    e->worker = worker;
    e->prev_mono = e->prev_unix = 0;
    /* Entry 0 is the literal marker: entries count from 1. */
    e->n_dict = 1;
    if (++e->gen == 0) {
        memset(e->slot_gen, 0, ENC_SLOTS * sizeof(*e->slot_gen));
        e->gen = 1;
    }
}

unsigned dlog_enc_count(const struct dlog_enc *e)
{
    return e->count;
}

/* Starts an item; dlog_enc_end() keeps it or takes it back. */
static struct cur enc_start(const struct dlog_enc *e)
{
    struct cur c = { e->buf + e->len, e->buf + e->cap, false };

    return c;
}

static int enc_end(struct dlog_enc *e, struct cur *c, uint32_t n_dict, bool was_empty)
{
    if (c->overflow) {
        /* Entries the item added are forgotten (their slots fail the
         * n_dict check until overwritten). */
        e->n_dict = n_dict;
        return was_empty ? -E2BIG : -ENOBUFS;
    }
    e->len = (size_t)(c->p - e->buf);
    e->count++;
    return 0;
}

static void put_time(struct cur *c, uint64_t *prev, uint64_t t)
{
    put_svar(c, (int64_t)(t - *prev));
    *prev = t;
}

int dlog_enc_decision(struct dlog_enc *e, const struct dlog_decision *d)
{
    struct cur c = enc_start(e);
    uint32_t n_dict = e->n_dict;
    uint64_t prev_mono = e->prev_mono, prev_unix = e->prev_unix;
    bool extra;
    int r;

    if (d->n_kv > PROTO_KV_MAX || d->n_out > RULES_MATCH_MAX || d->op > DLOG_OP_LAST ||
        d->protocol >= DLOG_N_PROTO || d->path >= DLOG_N_PATH)
        return -EINVAL;
    put_u8(&c, DLOG_DECISION);
    put_time(&c, &e->prev_mono, d->mono_ms);
    put_time(&c, &e->prev_unix, d->unix_ms);
    put_var(&c, d->generation);
    /* The common case in two bytes: op, protocol, path and flags; err, n
     * and n_reset follow only when one is not 0, 1, 0. */
    extra = d->err != 0 || d->n != 1 || d->n_reset != 0;
    put_u8(&c, (uint8_t)(d->op | d->protocol << 2 | d->path << 4 | (extra ? 0x40 : 0)));
    put_u8(&c, d->flags);
    if (extra) {
        put_var(&c, d->err);
        put_var(&c, d->n);
        put_var(&c, d->n_reset);
    }
    put_var(&c, d->uid == DLOG_UNKNOWN_ID ? 0 : (uint64_t)d->uid + 1);
    put_var(&c, d->pid == DLOG_UNKNOWN_ID ? 0 : (uint64_t)d->pid + 1);
    put_var(&c, d->credit);
    put_var(&c, d->reset_s);
    put_id(e, &c, d->decider_id);
    put_var(&c, d->n_kv);
    for (unsigned i = 0; i < d->n_kv; i++) {
        put_str(e, &c, d->kv[i].key, d->kv[i].key_len);
        put_u8(&c, d->kv[i].redact);
        put_str(e, &c, d->kv[i].value, d->kv[i].value_len);
    }
    put_var(&c, d->n_out);
    for (unsigned i = 0; i < d->n_out; i++) {
        put_id(e, &c, d->out[i].rule_id);
        put_var(&c, d->out[i].credit);
        put_var(&c, d->out[i].reset_s);
        put_u8(&c, d->out[i].flags);
    }
    r = enc_end(e, &c, n_dict, e->count == 0);
    if (r < 0) {
        e->prev_mono = prev_mono;
        e->prev_unix = prev_unix;
    }
    return r;
}

int dlog_enc_rules(struct dlog_enc *e, const struct dlog_rules *rs)
{
    struct cur c = enc_start(e);
    uint32_t n_dict = e->n_dict;

    if (rs->n > rs->total || rs->first > rs->total - rs->n || (rs->n && !rs->rule))
        return -EINVAL;
    put_u8(&c, DLOG_RULES);
    put_var(&c, rs->generation);
    put_var(&c, rs->unix_ms);
    put_var(&c, rs->total);
    put_var(&c, rs->first);
    put_var(&c, rs->n);
    for (unsigned i = 0; i < rs->n; i++) {
        const struct dlog_rule *r = &rs->rule[i];

        if (r->n_actor > RULES_ACTOR_KEYS_MAX)
            return -EINVAL;
        put_id(e, &c, r->id);
        put_str(e, &c, r->id_str, r->id_len);
        put_u8(&c, r->algo);
        put_u8(&c, r->store);
        put_u8(&c, r->policy);
        put_u8(&c, r->fast_path);
        put_svar(&c, r->credit_limit);
        put_svar(&c, r->reset_ms);
        put_svar(&c, r->prefix4);
        put_svar(&c, r->prefix6);
        put_var(&c, r->n_actor);
        for (unsigned j = 0; j < r->n_actor; j++)
            put_str(e, &c, r->actor[j], r->actor_len[j]);
    }
    return enc_end(e, &c, n_dict, e->count == 0);
}

int dlog_enc_gap(struct dlog_enc *e, const struct dlog_gap *g)
{
    struct cur c = enc_start(e);

    put_u8(&c, DLOG_GAP);
    put_var(&c, g->unix_ms);
    put_var(&c, g->dropped);
    return enc_end(e, &c, e->n_dict, e->count == 0);
}

size_t dlog_enc_finish(struct dlog_enc *e, const uint8_t **ret)
{
    uint8_t *h = e->buf;
    uint32_t crc;

    *ret = h;
    if (e->count == 0)
        return 0;
    memcpy(h, DLOG_BLOCK_MAGIC, 4);
    dlog_le32(h + 4, (uint32_t)(e->len - DLOG_BLOCK_HDR));
    dlog_le32(h + 8, e->count);
    dlog_le32(h + 12, e->worker);
    crc = dlog_crc32c(0, h + 4, 12);
    crc = dlog_crc32c(crc, h + DLOG_BLOCK_HDR, e->len - DLOG_BLOCK_HDR);
    dlog_le32(h + 16, crc);
    return e->len;
}

size_t dlog_file_header(uint8_t *buf, size_t size, uint64_t unix_ms, const char *host)
{
    size_t host_len = host ? strnlen(host, DLOG_HOST_MAX + 1) : 0;
    size_t len;

    if (host_len > DLOG_HOST_MAX)
        host_len = DLOG_HOST_MAX;
    len = DLOG_FILE_HDR + host_len + 4;
    if (size < len)
        return 0;
    memcpy(buf, DLOG_FILE_MAGIC, 8);
    dlog_le32(buf + 8, DLOG_VERSION);
    dlog_le32(buf + 12, (uint32_t)len);
    dlog_le64(buf + 16, unix_ms);
    buf[24] = (uint8_t)host_len;
    buf[25] = (uint8_t)(host_len >> 8);
    if (host_len)
        memcpy(buf + DLOG_FILE_HDR, host, host_len);
    dlog_le32(buf + len - 4, dlog_crc32c(0, buf, len - 4));
    return len;
}

/* ---- names and actors ------------------------------------------------------------------- */

const char *dlog_protocol_name(unsigned p)
{
    static const char *const names[DLOG_N_PROTO] = { "line", "resp", "rls", "fast" };

    return p < DLOG_N_PROTO ? names[p] : "?";
}

const char *dlog_path_name(unsigned p)
{
    static const char *const names[DLOG_N_PATH] = { "none", "local", "lease", "strict" };

    return p < DLOG_N_PATH ? names[p] : "?";
}

const char *dlog_op_name(unsigned op)
{
    static const char *const names[] = { "TAKE", "PEEK", "RESET", "DEBIT" };

    return op <= DLOG_OP_LAST ? names[op] : "?";
}

int dlog_actor(const struct dlog_rule *r, const struct dlog_decision *d, char *buf, size_t size)
{
    struct proto_kv kv[RULES_ACTOR_KEYS_MAX];
    const struct proto_kv *vals[RULES_ACTOR_KEYS_MAX];

    if (r->n_actor > RULES_ACTOR_KEYS_MAX)
        return -EINVAL;
    for (unsigned i = 0; i < r->n_actor; i++) {
        vals[i] = NULL;
        for (unsigned j = 0; j < d->n_kv; j++) {
            const struct dlog_kv *p = &d->kv[j];

            if (p->key_len == r->actor_len[i] && memcmp(p->key, r->actor[i], p->key_len) == 0) {
                if (p->value_len > UINT16_MAX)
                    return -ENOBUFS;
                kv[i] = (struct proto_kv){ .key = p->key, .key_len = (uint16_t)p->key_len,
                                           .value = p->value,
                                           .value_len = (uint16_t)p->value_len };
                vals[i] = &kv[i];
                break;
            }
        }
    }
    return rules_actor_join(r->n_actor, vals, r->prefix4, r->prefix6, buf, size);
}
