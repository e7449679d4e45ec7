/* SPDX-License-Identifier: MIT */
/*
 * rules_compile: emitting the compiled blob from a validated build
 * (docs/dev/rules.md "Compiled form"), divvyd and divvyctl only: header, rule
 * records, match entries, actor keys, the index of exact (key, value)
 * anchors, the scan list and a deduplicated string pool, laid out in one
 * allocation and handed to rules_attach() like any blob read from a file.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rules_build.h"

/* ---- emitting the blob -------------------------------------------------- */

struct pool {
    struct buf b;
    struct map dedupe;
};

static int pool_add(struct pool *pl, const char *s, size_t len, struct blob_str *ret)
{
    struct map_ent *e = map_get(&pl->dedupe, hash_siphash(zero_key, s, len), s, len, NULL, 0,
                                true);
    int r;

    if (e->aux == UINT32_MAX) {
        if (pl->b.len + len + 1 > UINT32_MAX)
            return -E2BIG;
        e->aux = (uint32_t)pl->b.len;
        r = buf_put(&pl->b, s, len);
        if (r >= 0)
            r = buf_put(&pl->b, "", 1);
        if (r < 0)
            return r;
    }
    ret->off = e->aux;
    ret->len = (uint32_t)len;
    return 0;
}

static uint64_t align_up(uint64_t v)
{
    return (v + BLOB_ALIGN - 1) & ~(uint64_t)(BLOB_ALIGN - 1);
}

/* Lays out and fills the blob from a validated build. */
static int emit(const struct build *b, const struct rules_zones *zt, uint64_t generation,
                struct rules **ret)
{
    struct pool pl = { 0 };
    struct blob_rule *rules = NULL;
    struct blob_match *match = NULL;
    struct blob_str *actor = NULL, *akey = NULL;
    struct blob_bucket *bucket = NULL;
    struct blob_hdr h;
    uint8_t *blob = NULL;
    size_t n_match = 0, n_actor = 0, n_strings = 1, n_akey = 0, n_bucket = 0;
    uint64_t off;
    int r;

    for (size_t i = 0; i < b->n; i++) {
        n_match += b->r[i].n_m;
        n_actor += b->r[i].s->n_actor;
    }
    n_strings += b->n * 4 + n_match * 2 + n_actor;
    if (b->n_bucket_used) {
        n_bucket = 16;
        while (n_bucket < (size_t)b->n_bucket_used * 2)
            n_bucket *= 2;
    }
    r = map_init(&pl.dedupe, n_strings);
    if (r < 0)
        goto out;
    rules = calloc(b->n + 1, sizeof(*rules));
    match = calloc(n_match + 1, sizeof(*match));
    actor = calloc(n_actor + 1, sizeof(*actor));
    akey = calloc(b->n_bucket_used + 1, sizeof(*akey));
    bucket = calloc(n_bucket + 1, sizeof(*bucket));
    if (!rules || !match || !actor || !akey || !bucket) {
        r = -ENOMEM;
        goto out;
    }
    r = buf_put(&pl.b, "", 1);          /* offset 0 is the empty string */
    if (r < 0)
        goto out;
    n_match = 0;
    n_actor = 0;
    for (size_t i = 0; i < b->n; i++) {
        const struct pr *p = &b->r[i];
        const struct rules_rule_spec *s = p->s;
        struct blob_rule *o = &rules[i];
        const char *label = s->label ? s->label : "", *comment = s->comment ? s->comment : "";

        o->id = p->id;
        o->credit_limit = s->credit_limit;
        o->reset_seconds = p->reset_seconds;
        o->refill_amount = p->refill_amount;
        o->refill_seconds = p->refill_seconds;
        o->max_actors = s->max_actors;
        o->max_debit = s->max_debit;
        o->line = s->line;
        o->prefix4 = (int16_t)s->prefix4;
        o->prefix6 = (int16_t)s->prefix6;
        o->policy = (uint8_t)s->policy;
        o->algo = (uint8_t)s->algo;
        o->source = (uint8_t)s->source;
        o->flags = (uint8_t)((s->strict ? FLAG_STRICT : 0) | (s->fast_path ? FLAG_FAST_PATH : 0) |
                             (s->is_default ? FLAG_DEFAULT : 0) |
                             (s->no_reset ? FLAG_NO_RESET : 0) |
                             (s->continuous ? FLAG_CONTINUOUS : 0));
        o->store = (uint8_t)p->store;
        o->when_full = (uint8_t)s->when_full;
        o->calendar = (uint8_t)s->calendar;
        o->zone = zt->rule_zone[i];
        o->reset_ms = p->reset_ms;
        o->refill_ms = p->refill_ms;
        o->lock = p->lock;
        r = pool_add(&pl, p->id_str, strlen(p->id_str), &o->id_str);
        if (r >= 0)
            r = pool_add(&pl, label, strlen(label), &o->label);
        if (r >= 0)
            r = pool_add(&pl, comment, strlen(comment), &o->comment);
        if (r >= 0)
            r = pool_add(&pl, s->file, strlen(s->file), &o->file);
        if (r < 0)
            goto out;
        o->match_first = (uint32_t)n_match;
        o->n_match = (uint32_t)p->n_m;
        for (size_t j = 0; j < p->n_m; j++) {
            struct blob_match *bm = &match[n_match++];

            bm->kind = (uint32_t)p->m[j].kind;
            r = pool_add(&pl, p->m[j].key, p->m[j].key_len, &bm->key);
            if (r >= 0)
                r = pool_add(&pl, p->m[j].val, p->m[j].val_len, &bm->value);
            if (r < 0)
                goto out;
        }
        o->actor_first = (uint32_t)n_actor;
        o->n_actor = (uint32_t)s->n_actor;
        for (size_t j = 0; j < s->n_actor; j++) {
            r = pool_add(&pl, s->actor[j], strlen(s->actor[j]), &actor[n_actor++]);
            if (r < 0)
                goto out;
        }
        if (p->anchor != SIZE_MAX) {
            const struct pm *m = &p->m[p->anchor];
            uint64_t hh = pair_hash(m->key, m->key_len, m->val, m->val_len);
            struct blob_bucket *bk;
            size_t k;

            for (k = hh & (n_bucket - 1); bucket[k].list_n; k = (k + 1) & (n_bucket - 1)) {
                if (bucket[k].list_first == b->bk_first[p->bucket])
                    break;
            }
            bk = &bucket[k];
            if (!bk->list_n) {
                bk->hash = hh;
                bk->list_first = b->bk_first[p->bucket];
                bk->list_n = b->bk_n[p->bucket];
                bk->key = match[o->match_first + p->anchor].key;
                bk->value = match[o->match_first + p->anchor].value;
                akey[n_akey++] = bk->key;
            }
        }
    }
    /* Distinct anchor keys, sorted: the matcher hashes only request pairs
     * whose key is one of them. */
    for (size_t i = 1; i < n_akey; i++) {
        struct blob_str t = akey[i];
        size_t j = i;

        for (; j > 0 && str_cmp_pool(pl.b.p, &akey[j - 1], &t) > 0; j--)
            akey[j] = akey[j - 1];
        akey[j] = t;
    }
    if (n_akey) {
        size_t w = 1;

        for (size_t i = 1; i < n_akey; i++) {
            if (str_cmp_pool(pl.b.p, &akey[w - 1], &akey[i]) != 0)
                akey[w++] = akey[i];
        }
        n_akey = w;
    }

    memset(&h, 0, sizeof(h));
    memcpy(h.magic, BLOB_MAGIC, sizeof(h.magic));
    h.layout = BLOB_LAYOUT;
    h.hdr_size = sizeof(h);
    h.generation = generation;
    h.n_rule = (uint32_t)b->n;
    h.n_match = (uint32_t)n_match;
    h.n_actor = (uint32_t)n_actor;
    h.n_akey = (uint32_t)n_akey;
    h.n_bucket = (uint32_t)n_bucket;
    h.n_list = b->n_list;
    h.n_scan = b->n_scan;
    h.pool_size = (uint32_t)pl.b.len;
    off = align_up(sizeof(h));
    h.rule_off = off;
    off = align_up(off + (uint64_t)b->n * sizeof(*rules));
    h.match_off = off;
    off = align_up(off + (uint64_t)n_match * sizeof(*match));
    h.actor_off = off;
    off = align_up(off + (uint64_t)n_actor * sizeof(*actor));
    h.akey_off = off;
    off = align_up(off + (uint64_t)n_akey * sizeof(*akey));
    h.bucket_off = off;
    off = align_up(off + (uint64_t)n_bucket * sizeof(*bucket));
    h.list_off = off;
    off = align_up(off + (uint64_t)b->n_list * sizeof(uint32_t));
    h.scan_off = off;
    off = align_up(off + (uint64_t)b->n_scan * sizeof(uint32_t));
    h.pool_off = off;
    off = align_up(off + pl.b.len);
    h.n_zone = zt->n_zone;
    h.zone_off = off;
    off = align_up(off + (uint64_t)zt->n_zone * sizeof(*zt->zone));
    h.n_ztrans = zt->n_trans;
    h.ztrans_off = off;
    off = align_up(off + (uint64_t)zt->n_trans * sizeof(*zt->trans));
    h.total_size = off;

    blob = calloc(1, off);
    if (!blob) {
        r = -ENOMEM;
        goto out;
    }
    memcpy(blob, &h, sizeof(h));
    memcpy(blob + h.rule_off, rules, b->n * sizeof(*rules));
    memcpy(blob + h.match_off, match, n_match * sizeof(*match));
    memcpy(blob + h.actor_off, actor, n_actor * sizeof(*actor));
    memcpy(blob + h.akey_off, akey, n_akey * sizeof(*akey));
    memcpy(blob + h.bucket_off, bucket, n_bucket * sizeof(*bucket));
    memcpy(blob + h.list_off, b->list, b->n_list * sizeof(uint32_t));
    memcpy(blob + h.scan_off, b->scan, b->n_scan * sizeof(uint32_t));
    memcpy(blob + h.pool_off, pl.b.p, pl.b.len);
    if (zt->n_zone)
        memcpy(blob + h.zone_off, zt->zone, zt->n_zone * sizeof(*zt->zone));
    if (zt->n_trans)
        memcpy(blob + h.ztrans_off, zt->trans, zt->n_trans * sizeof(*zt->trans));
    r = rules_attach(blob, off, ret);
    if (r >= 0)
        blob = NULL;                    /* the table owns it now */
out:
    free(blob);
    free(rules);
    free(match);
    free(actor);
    free(akey);
    free(bucket);
    free(pl.b.p);
    map_free(&pl.dedupe);
    return r;
}

int rules_compile(const struct rules_spec *spec, uint64_t generation, struct rules **ret,
                  struct diag *reterr)
{
    struct rules_zones zt = { 0 };
    struct build b;
    int r = rules_build_checked(spec, &b, reterr);

    if (r >= 0)
        r = rules_zones_build(&b, &zt, reterr);
    if (r >= 0)
        r = emit(&b, &zt, generation, ret);
    rules_zones_free(&zt);
    rules_build_free(&b);
    return r;
}
