/* SPDX-License-Identifier: MIT */
/*
 * rules: the compiled rule list as every process reads it (docs/rules.md).
 * rules_validate.c checks a struct rules_spec and rules_compile.c turns it
 * into one contiguous, pointer-free blob (rules_private.h) that is written
 * to a file and mapped by other processes as is; this file loads such a
 * blob, checking every count, offset and length before anything reads it
 * (rules_from_blob()), and answers questions about its rules.  The matcher
 * is in rules_match.c, actor strings and descriptions in rules_text.c.
 * Clients link these three files, never the validator or the compiler.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rules_private.h"

/* ---- loading and checking a blob ---------------------------------------- */

static bool section_ok(uint64_t total, uint64_t off, uint64_t count, uint64_t size)
{
    return off % BLOB_ALIGN == 0 && off <= total && count <= (total - off) / size;
}

/* A lockout rule's settings as validation leaves them (server/rules_lock.c), so
 * common/algo_lock.c never sees a value it did not check. */
static bool rules_lock_ok(const struct rules_lock *k)
{
    return k->fail_interval >= 1 && k->unlock_time >= 1 && k->lock_max >= k->unlock_time &&
           k->lock_max <= RULES_SECONDS_MAX && k->remember >= 0 &&
           k->remember <= RULES_SECONDS_MAX && k->lock_factor >= 1 && k->lock_factor <= 1000 &&
           k->delay_after >= 0 &&
           (k->delay_after == 0 || (k->delay >= 1 && k->delay_max >= k->delay &&
                                    k->delay_max <= RULES_SECONDS_MAX && k->delay_factor >= 1 &&
                                    k->delay_factor <= 1000));
}

static bool str_ok(const struct blob_hdr *h, const char *pool, const struct blob_str *s)
{
    return s->off < h->pool_size && s->len < h->pool_size - s->off && pool[s->off + s->len] == 0;
}

/* A NOT entry's values: NUL-separated well-formed globs, at most
 * MATCH_VALUES_MAX (CIDR entries are parsed by rules_cidr_load()). */
static bool not_values_ok(const char *v, size_t len)
{
    const char *end = v + len;

    for (uint32_t n = 1;; n++) {
        const char *e = memchr(v, '\0', (size_t)(end - v));
        size_t k = e ? (size_t)(e - v) : (size_t)(end - v);

        if (n > MATCH_VALUES_MAX || glob_parse(v, k) < 0)
            return false;
        if (!e)
            return true;
        v = e + 1;
    }
}

/* Every count, offset, length and enum of the blob; never reads outside it. */
static bool blob_ok(const struct rules *rs)
{
    const struct blob_hdr *h = rs->hdr;
    const struct blob_rule *last;
    uint64_t n_side = 0;

    if (h->n_rule < 1 || h->n_rule > RULES_MAX || h->pool_size < 1)
        return false;
    for (uint32_t i = 0; i < h->n_rule; i++) {
        const struct blob_rule *r = &rs->rule[i];

        if ((uint64_t)r->match_first + r->n_match > h->n_match || r->n_match > PROTO_KV_MAX ||
            (uint64_t)r->actor_first + r->n_actor > h->n_actor ||
            r->n_actor > RULES_ACTOR_KEYS_MAX)
            return false;
        if (!str_ok(h, rs->pool, &r->id_str) || !str_ok(h, rs->pool, &r->label) ||
            !str_ok(h, rs->pool, &r->comment) || !str_ok(h, rs->pool, &r->file))
            return false;
        if (r->policy > RULES_POLICY_CONTINUE || r->algo > RULES_ALGO_LAST ||
            r->source > RULES_SOURCE_PRIVILEGED || r->store > RULES_STORE_STRICT ||
            r->when_full > RULES_FULL_EVICT ||
            (r->flags & ~(FLAG_STRICT | FLAG_FAST_PATH | FLAG_DEFAULT | FLAG_NO_RESET |
                          FLAG_CONTINUOUS)) ||
            r->reset_ms < 0 || r->refill_ms < 0)
            return false;
        if (r->prefix4 < -1 || r->prefix4 > 32 || r->prefix6 < -1 || r->prefix6 > 128 ||
            r->max_debit < -1 || r->max_debit > (int64_t)PROTO_DEBIT_MAX)
            return false;
        /* A calendar window: a window rule in UTC or a zone of the table. */
        if (r->calendar > CALENDAR_UNIT_MAX ||
            (r->calendar && (r->algo != RULES_ALGO_WINDOW ||
                             (r->zone != UINT32_MAX && r->zone >= h->n_zone))))
            return false;
        if (r->algo == RULES_ALGO_LOCKOUT && !rules_lock_ok(&r->lock))
            return false;
        if (r->policy != RULES_POLICY_STOP)
            n_side++;
    }
    /* rules_match() relies on these to always find a stop rule in room. */
    if (n_side > RULES_MATCH_MAX - 1)
        return false;
    last = &rs->rule[h->n_rule - 1];
    if (!(last->flags & FLAG_DEFAULT) || last->n_match || last->policy != RULES_POLICY_STOP ||
        last->source != RULES_SOURCE_ANY)
        return false;
    if (h->n_scan < 1 || rs->scan[h->n_scan - 1] != h->n_rule - 1)
        return false;
    for (uint32_t i = 0; i < h->n_scan; i++) {
        if (rs->scan[i] >= h->n_rule || (i && rs->scan[i] <= rs->scan[i - 1]))
            return false;
    }
    for (uint32_t i = 0; i < h->n_match; i++) {
        const struct blob_match *m = &rs->match[i];

        if (!str_ok(h, rs->pool, &m->key) || !str_ok(h, rs->pool, &m->value) ||
            m->kind > KIND_NOT_CIDR)
            return false;
        if (m->kind == KIND_GLOB && glob_parse(rs->pool + m->value.off, m->value.len) < 0)
            return false;
        if (m->kind == KIND_NOT && !not_values_ok(rs->pool + m->value.off, m->value.len))
            return false;
    }
    for (uint32_t i = 0; i < h->n_actor; i++) {
        if (!str_ok(h, rs->pool, &rs->actor[i]))
            return false;
    }
    for (uint32_t i = 0; i < h->n_akey; i++) {
        if (!str_ok(h, rs->pool, &rs->akey[i]) ||
            (i && str_cmp_pool(rs->pool, &rs->akey[i - 1], &rs->akey[i]) >= 0))
            return false;
    }
    if (h->n_bucket & (h->n_bucket - 1))
        return false;
    for (uint32_t i = 0; i < h->n_bucket; i++) {
        const struct blob_bucket *bk = &rs->bucket[i];

        if (!bk->list_n)
            continue;
        if (!str_ok(h, rs->pool, &bk->key) || !str_ok(h, rs->pool, &bk->value) ||
            (uint64_t)bk->list_first + bk->list_n > h->n_list)
            return false;
        for (uint32_t k = 0; k < bk->list_n; k++) {
            uint32_t v = rs->list[bk->list_first + k];

            if (v >= h->n_rule || (k && v <= rs->list[bk->list_first + k - 1]))
                return false;
        }
    }
    return true;
}

/* Checks @blob (malloc'd, @len bytes) and wraps it; takes ownership on success. */
int rules_attach(uint8_t *blob, size_t len, struct rules **ret)
{
    const struct blob_hdr *h = (const struct blob_hdr *)blob;
    struct rules *rs;
    int q;

    if (len < sizeof(*h) || memcmp(h->magic, BLOB_MAGIC, sizeof(h->magic)) != 0 ||
        h->layout != BLOB_LAYOUT || h->hdr_size != sizeof(*h) || h->total_size != len)
        return -EBADMSG;
    if (!section_ok(len, h->rule_off, h->n_rule, sizeof(struct blob_rule)) ||
        !section_ok(len, h->match_off, h->n_match, sizeof(struct blob_match)) ||
        !section_ok(len, h->actor_off, h->n_actor, sizeof(struct blob_str)) ||
        !section_ok(len, h->akey_off, h->n_akey, sizeof(struct blob_str)) ||
        !section_ok(len, h->bucket_off, h->n_bucket, sizeof(struct blob_bucket)) ||
        !section_ok(len, h->list_off, h->n_list, sizeof(uint32_t)) ||
        !section_ok(len, h->scan_off, h->n_scan, sizeof(uint32_t)) ||
        !section_ok(len, h->pool_off, h->pool_size, 1) ||
        !section_ok(len, h->zone_off, h->n_zone, sizeof(struct calendar_zone)) ||
        !section_ok(len, h->ztrans_off, h->n_ztrans, sizeof(struct calendar_trans)))
        return -EBADMSG;
    rs = calloc(1, sizeof(*rs));
    if (!rs)
        return -ENOMEM;
    rs->blob = blob;
    rs->len = len;
    rs->hdr = h;
    rs->rule = (const struct blob_rule *)(blob + h->rule_off);
    rs->match = (const struct blob_match *)(blob + h->match_off);
    rs->actor = (const struct blob_str *)(blob + h->actor_off);
    rs->akey = (const struct blob_str *)(blob + h->akey_off);
    rs->bucket = (const struct blob_bucket *)(blob + h->bucket_off);
    rs->list = (const uint32_t *)(blob + h->list_off);
    rs->scan = (const uint32_t *)(blob + h->scan_off);
    rs->pool = (const char *)(blob + h->pool_off);
    rs->zone = (const struct calendar_zone *)(blob + h->zone_off);
    rs->ztrans = (const struct calendar_trans *)(blob + h->ztrans_off);
    if (h->n_zone > CALENDAR_ZONES_MAX ||
        calendar_check(rs->zone, h->n_zone, rs->ztrans, h->n_ztrans) < 0 || !blob_ok(rs)) {
        free(rs);
        return -EBADMSG;
    }
    q = rules_cidr_load(rs);
    if (q < 0) {
        free(rs);
        return q;
    }
    if (rules_index_build(rs) < 0) {
        rules_cidr_free(rs);
        free(rs);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < h->n_rule; i++) {
        const struct blob_rule *r = &rs->rule[i];

        if (r->store != RULES_STORE_LOCAL && r->credit_limit > 0 &&
            (r->algo == RULES_ALGO_TOKEN_BUCKET || r->algo == RULES_ALGO_GCRA ||
             r->reset_ms > 0))
            rs->uses_store = true;
    }
    *ret = rs;
    return 0;
}

int rules_from_blob(const void *data, size_t len, struct rules **ret)
{
    uint8_t *copy;
    int r;

    if (len < sizeof(struct blob_hdr))
        return -EBADMSG;
    copy = malloc(len);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, data, len);
    r = rules_attach(copy, len, ret);
    if (r < 0)
        free(copy);
    return r;
}

void rules_free(struct rules *rules)
{
    if (!rules)
        return;
    rules_index_free(rules);
    rules_cidr_free(rules);
    free(rules->blob);
    free(rules);
}

void rules_blob(const struct rules *rules, const void **ret_data, size_t *ret_len)
{
    *ret_data = rules->blob;
    *ret_len = rules->len;
}

size_t rules_count(const struct rules *rules)
{
    return rules->hdr->n_rule;
}

bool rules_uses_store(const struct rules *rules)
{
    return rules->uses_store;
}

uint64_t rules_generation(const struct rules *rules)
{
    return rules->hdr->generation;
}

int rules_get(const struct rules *rules, uint32_t idx, struct rules_rule *ret)
{
    const struct blob_rule *r;

    r = rules_rule_at(rules, idx);
    if (!r)
        return -ENOENT;
    memset(ret, 0, sizeof(*ret));
    ret->index = idx;
    ret->id = r->id;
    ret->id_str = rules->pool + r->id_str.off;
    ret->label = rules->pool + r->label.off;
    ret->comment = rules->pool + r->comment.off;
    ret->file = rules->pool + r->file.off;
    ret->line = r->line;
    ret->credit_limit = r->credit_limit;
    ret->reset_seconds = r->reset_seconds;
    ret->refill_amount = r->refill_amount;
    ret->refill_seconds = r->refill_seconds;
    ret->max_actors = r->max_actors;
    ret->max_debit = r->max_debit;
    ret->prefix4 = r->prefix4;
    ret->prefix6 = r->prefix6;
    ret->n_actor = r->n_actor;
    ret->strict = r->flags & FLAG_STRICT;
    ret->fast_path = r->flags & FLAG_FAST_PATH;
    ret->resettable = !(r->flags & FLAG_NO_RESET);
    ret->is_default = r->flags & FLAG_DEFAULT;
    ret->policy = (enum rules_policy)r->policy;
    ret->algo = (enum rules_algo)r->algo;
    ret->source = (enum rules_source)r->source;
    ret->store = (enum rules_store)r->store;
    ret->when_full = (enum rules_full)r->when_full;
    ret->calendar = r->calendar;
    if (r->calendar) {
        ret->zone = r->zone;
        ret->time_zone = r->zone == UINT32_MAX ? "UTC" : rules->zone[r->zone].name;
    }
    ret->reset_ms = r->reset_ms;
    ret->refill_ms = r->refill_ms;
    ret->continuous = r->flags & FLAG_CONTINUOUS;
    ret->lock = &r->lock;
    return 0;
}

int rules_period(const struct rules *rules, uint32_t idx, int64_t unix_ms, int64_t *ret_start_ms,
                 int64_t *ret_end_ms)
{
    const struct blob_rule *r = rules_rule_at(rules, idx);

    if (!r)
        return -ENOENT;
    if (!r->calendar)
        return -EINVAL;
    return calendar_period(r->zone == UINT32_MAX ? NULL : &rules->zone[r->zone], rules->ztrans,
                           (enum calendar_unit)r->calendar, unix_ms, ret_start_ms, ret_end_ms);
}
