/* SPDX-License-Identifier: MIT */
/*
 * rules_match: matching a request against the compiled rules
 * (docs/dev/rules.md "Index and matching").  The matcher never allocates: it
 * looks up the request's pairs in the blob's index of exact-valued anchors
 * and in the glob prefix index (rules_index.c), merges their candidate
 * lists with what is left of the scan list in rule order, and tests each
 * candidate's match entries.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rules_private.h"

/* ---- matching ------------------------------------------------------------ */

/* true when @a and @b are one string of the (deduplicated) pool. */
static bool same_str(const struct blob_str *a, const struct blob_str *b)
{
    return a->off == b->off && a->len == b->len;
}

/*
 * Whether entry @m of a rule found through the list of bucket @bk needs no
 * test: the rule was filed there under that entry, which the request's
 * pair was just found to satisfy.  A real bucket proves the rule's anchor
 * pair (the same pool strings: the pool is deduplicated; index_find()
 * compared the pair); a CIDR index list's bucket (value.off CIDX_VALUE,
 * rules_cidr.c) proves the rule's cidr entry of its key (a rule's only
 * one), a prefix of which holds the value.
 */
static inline bool proven(const struct blob_match *m, const struct blob_bucket *bk)
{
    if (m->kind == KIND_EXACT)
        return same_str(&m->key, &bk->key) && same_str(&m->value, &bk->value);
    return m->kind == KIND_CIDR && bk->value.off == CIDX_VALUE && same_str(&m->key, &bk->key);
}

/* Whether rule @idx matches @req; @bk: the bucket whose list gave it, or
 * NULL (the scan list, or a plain scan). */
static bool rule_test(const struct rules *rs, uint32_t idx, const struct rules_req *req,
                      const struct blob_bucket *bk)
{
    const struct blob_rule *r = &rs->rule[idx];

    if (r->source == RULES_SOURCE_PRIVILEGED && !req->privileged)
        return false;
    for (uint32_t i = 0; i < r->n_match; i++) {
        const struct blob_match *m = &rs->match[r->match_first + i];

        if (bk && proven(m, bk))
            continue;
        if (!match_entry(rs, m, req_find(req, rs->pool + m->key.off, m->key.len)))
            return false;
    }
    return true;
}

/* The anchor key equal to @key, or NULL. */
static const struct blob_str *anchor_key(const struct rules *rs, const char *key, size_t len)
{
    size_t lo = 0, hi = rs->hdr->n_akey;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct blob_str *a = &rs->akey[mid];
        int c = bytes_cmp(rs->pool + a->off, a->len, key, len);

        if (c == 0)
            return a;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static const struct blob_bucket *index_find(const struct rules *rs, const struct proto_kv *kv)
{
    uint32_t n = rs->hdr->n_bucket;
    const struct blob_str *ak;
    uint64_t h;

    if (!n || !pair_indexable(kv->key_len, kv->value_len))
        return NULL;
    ak = anchor_key(rs, kv->key, kv->key_len);
    if (!ak)
        return NULL;
    h = pair_hash(kv->key, kv->key_len, kv->value, kv->value_len);
    for (uint32_t i = 0, k = (uint32_t)h & (n - 1); i < n; i++, k = (k + 1) & (n - 1)) {
        const struct blob_bucket *bk = &rs->bucket[k];

        if (!bk->list_n)
            return NULL;
        /* The key was compared by anchor_key(): the same pool string is the same key. */
        if (bk->hash == h &&
            (same_str(&bk->key, ak) ||
             bytes_eq(rs->pool + bk->key.off, bk->key.len, kv->key, kv->key_len)) &&
            bytes_eq(rs->pool + bk->value.off, bk->value.len, kv->value, kv->value_len))
            return bk;
    }
    return NULL;
}

/* Records a matching rule; true when it decides (stop) or there is no room. */
static bool take(const struct rules *rs, uint32_t idx, uint32_t *ret_idx, size_t *n)
{
    ret_idx[(*n)++] = idx;
    return rs->rule[idx].policy == RULES_POLICY_STOP || *n == RULES_MATCH_MAX;
}

/* Every rule in order: for requests the lists cannot hold. */
static size_t scan_all(const struct rules *rules, const struct rules_req *req,
                       uint32_t ret_idx[RULES_MATCH_MAX])
{
    size_t n = 0;

    for (uint32_t i = 0; i < rules->hdr->n_rule; i++) {
        if (rule_test(rules, i, req, NULL) && take(rules, i, ret_idx, &n))
            break;
    }
    return n;
}

/*
 * Fills @c with the candidate lists of @req: the anchor bucket and the glob
 * prefixes of each pair, then the scan list.  Returns how many, or SIZE_MAX
 * when the prefix lists would not fit (the caller scans every rule).
 */
static size_t candidates(const struct rules *rules, const struct rules_req *req,
                         struct rules_cand *c)
{
    const struct rules_index *ix = &rules->ix;
    size_t n_c = 0, room = PFX_LISTS_MAX;

    for (unsigned i = 0; i < req->n_kv; i++) {
        const struct blob_bucket *bk = index_find(rules, &req->kv[i]);

        if (bk) {
            c[n_c].p = rules->list + bk->list_first;
            c[n_c].end = c[n_c].p + bk->list_n;
            c[n_c].bk = bk;
            n_c++;
        }
        if (!ix->split)
            continue;
        if (ix->n_pfx) {
            size_t k = rules_index_lists(rules, &req->kv[i], c + n_c, room);

            if (k == SIZE_MAX)
                return SIZE_MAX;
            n_c += k;
            room -= k;
        }
        if (rules->cidr.n_ix) {
            size_t k = rules_cidr_lists(rules, &req->kv[i], c + n_c, room);

            if (k == SIZE_MAX)
                return SIZE_MAX;
            n_c += k;
            room -= k;
        }
    }
    c[n_c].p = ix->split ? ix->scan : rules->scan;
    c[n_c].end = c[n_c].p + (ix->split ? ix->n_scan : rules->hdr->n_scan);
    c[n_c].bk = NULL;
    return n_c + 1;
}

size_t rules_match(const struct rules *rules, const struct rules_req *req,
                   uint32_t ret_idx[RULES_MATCH_MAX])
{
    struct rules_cand c[PROTO_KV_MAX + PFX_LISTS_MAX + 1];
    size_t n_c, n = 0;
    uint32_t next = 0;              /* lowest rule index not yet considered */

    /* More pairs than proto_parse() produces, or a value under too many
     * nested glob prefixes: scan everything, in order. */
    if (req->n_kv > PROTO_KV_MAX)
        return scan_all(rules, req, ret_idx);
    n_c = candidates(rules, req, c);
    if (n_c == SIZE_MAX)
        return scan_all(rules, req, ret_idx);

    /* k-way merge of the sorted candidate lists, in rule order. */
    for (;;) {
        size_t best = SIZE_MAX;
        uint32_t idx = UINT32_MAX;

        for (size_t k = 0; k < n_c; k++) {
            while (c[k].p < c[k].end && *c[k].p < next)
                c[k].p++;
            if (c[k].p < c[k].end && *c[k].p < idx) {
                idx = *c[k].p;
                best = k;
            }
        }
        if (best == SIZE_MAX)
            break;
        c[best].p++;
        next = idx + 1;
        if (rule_test(rules, idx, req, c[best].bk) && take(rules, idx, ret_idx, &n))
            break;
    }
    return n;
}
