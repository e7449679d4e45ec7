/* SPDX-License-Identifier: MIT */
/*
 * rules_index: the prefix index of the scan list (docs/rules.md "Index and
 * matching").  The blob files every rule with an exact value under an
 * anchor pair; the rest, globs and presence, are on its scan list, which
 * every request would test rule by rule.  Each reader builds this index
 * from the blob where it loads it (rules_attach()), so the blob's format
 * does not change: a glob rule is filed under its longest literal prefix
 * (the bytes before the first star: every value it matches starts with
 * them) and only the rest stay on a scan list.  A request pair finds the
 * prefixes its value starts with by one binary search and a walk up the
 * nesting of prefixes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rules_private.h"

/* ---- building ------------------------------------------------------------ */

struct pfx_tmp {                /* one filed rule while the index is built */
    const char *key, *pre;
    uint32_t key_len, pre_len;
    struct blob_str bkey;
    uint32_t off;               /* the prefix in rules_index.bytes */
    uint32_t rule;
};

static int tmp_cmp(const void *a, const void *b)
{
    const struct pfx_tmp *x = a, *y = b;
    int c = pkey_cmp(x->key, x->key_len, y->key, y->key_len);

    if (!c)
        c = bytes_cmp(x->pre, x->pre_len, y->pre, y->pre_len);
    if (!c)
        c = x->rule < y->rule ? -1 : x->rule > y->rule;
    return c;
}

/* Whether entry @a's prefix, under the same key, is a prefix of @b's. */
static bool pfx_within(const struct rules *rs, const struct rules_pfx *a,
                       const struct rules_pfx *b)
{
    return str_cmp_pool(rs->pool, &a->key, &b->key) == 0 && a->len <= b->len &&
           memcmp(rs->ix.bytes + a->off, rs->ix.bytes + b->off, a->len) == 0;
}

/* One entry per distinct key of the sorted entries: its run of entries. */
static int key_runs(struct rules *rs)
{
    struct rules_index *ix = &rs->ix;

    ix->keys = calloc(ix->n_pfx, sizeof(*ix->keys));
    if (!ix->keys)
        return -ENOMEM;
    for (uint32_t i = 0; i < ix->n_pfx; i++) {
        if (!ix->n_keys ||
            str_cmp_pool(rs->pool, &ix->keys[ix->n_keys - 1].key, &ix->pfx[i].key) != 0) {
            ix->keys[ix->n_keys].key = ix->pfx[i].key;
            ix->keys[ix->n_keys].first = i;
            ix->n_keys++;
        }
        ix->keys[ix->n_keys - 1].end = i + 1;
    }
    return 0;
}

/*
 * Files scan-list rule @idx: its glob entry with the longest literal prefix,
 * written at @ix->bytes + *@pos, goes into @t; false when it has none.
 */
static bool file_rule(const struct rules *rs, struct rules_index *ix, uint32_t idx,
                      struct pfx_tmp *t, size_t *pos)
{
    const struct blob_rule *r = &rs->rule[idx];
    const struct blob_match *best = NULL;
    size_t best_len = 0;
    char *at = ix->bytes + *pos;

    for (uint32_t i = 0; i < r->n_match; i++) {
        const struct blob_match *m = &rs->match[r->match_first + i];
        size_t len;

        if (m->kind != KIND_GLOB)
            continue;
        len = glob_prefix(rs->pool + m->value.off, m->value.len, at);
        if (len > best_len) {
            best = m;
            best_len = len;
        }
    }
    if (!best)
        return false;
    (void)glob_prefix(rs->pool + best->value.off, best->value.len, at);
    t->key = rs->pool + best->key.off;
    t->key_len = best->key.len;
    t->bkey = best->key;
    t->pre = at;
    t->pre_len = (uint32_t)best_len;
    t->off = (uint32_t)*pos;
    t->rule = idx;
    *pos += best_len;
    return true;
}

/* Groups the sorted @t into entries with their lists and links each entry
 * to its nearest ancestor (a stack of the open prefixes, sorted order
 * putting every prefix before the strings that extend it). */
static int group(struct rules *rs, const struct pfx_tmp *t, size_t n_t)
{
    struct rules_index *ix = &rs->ix;
    uint32_t *stack = NULL;
    size_t sp = 0;
    int r = -ENOMEM;

    ix->pfx = calloc(n_t, sizeof(*ix->pfx));
    ix->list = calloc(n_t, sizeof(*ix->list));
    stack = calloc(n_t, sizeof(*stack));
    if (!ix->pfx || !ix->list || !stack)
        goto out;
    for (size_t i = 0; i < n_t; i++) {
        struct rules_pfx *e;

        if (i == 0 || pkey_cmp(t[i - 1].key, t[i - 1].key_len, t[i].key, t[i].key_len) ||
            bytes_cmp(t[i - 1].pre, t[i - 1].pre_len, t[i].pre, t[i].pre_len)) {
            e = &ix->pfx[ix->n_pfx++];
            e->key = t[i].bkey;
            e->off = t[i].off;
            e->len = t[i].pre_len;
            e->list_first = (uint32_t)i;
            while (sp && !pfx_within(rs, &ix->pfx[stack[sp - 1]], e))
                sp--;
            e->parent = sp ? stack[sp - 1] : PFX_NONE;
            stack[sp++] = ix->n_pfx - 1;
        }
        ix->list[i] = t[i].rule;
        ix->pfx[ix->n_pfx - 1].list_n++;
    }
    r = 0;
out:
    free(stack);
    return r;
}

int rules_index_build(struct rules *rs)
{
    struct rules_index *ix = &rs->ix;
    const struct blob_hdr *h = rs->hdr;
    struct pfx_tmp *t = NULL;
    size_t n_t = 0, size = 0, pos = 0;
    int r = -ENOMEM;

    memset(ix, 0, sizeof(*ix));
    /* Rules with a cidr entry go to the CIDR index (rules_cidr.c). */
    r = rules_cidr_index(rs);
    if (r < 0)
        return r;
    for (uint32_t k = 0; k < h->n_scan; k++) {
        const struct blob_rule *p = &rs->rule[rs->scan[k]];

        for (uint32_t i = 0; i < p->n_match; i++) {
            if (rs->match[p->match_first + i].kind == KIND_GLOB)
                size += rs->match[p->match_first + i].value.len;
        }
    }
    if (!size && !rs->cidr.n_ix)
        return 0;                       /* no prefix to file: the blob's scan list */
    r = -ENOMEM;
    ix->bytes = malloc(size + 1);
    ix->scan = calloc(h->n_scan, sizeof(*ix->scan));
    t = calloc(h->n_scan, sizeof(*t));
    if (!ix->bytes || !ix->scan || !t)
        goto out;
    for (uint32_t k = 0; k < h->n_scan; k++) {
        if (rs->cidr.n_ix && rules_cidr_filed(rs, rs->scan[k]))
            continue;
        if (file_rule(rs, ix, rs->scan[k], &t[n_t], &pos))
            n_t++;
        else
            ix->scan[ix->n_scan++] = rs->scan[k];
    }
    r = 0;
    if (n_t) {
        qsort(t, n_t, sizeof(*t), tmp_cmp);
        r = group(rs, t, n_t);
        if (r >= 0)
            r = key_runs(rs);
    }
out:
    free(t);
    /* Only empty prefixes ("*x") and no CIDR index: the blob's scan list. */
    if (r < 0 || (!ix->n_pfx && !rs->cidr.n_ix))
        rules_index_free(rs);
    else
        ix->split = true;
    return r;
}

void rules_index_free(struct rules *rs)
{
    free(rs->ix.pfx);
    free(rs->ix.keys);
    free(rs->ix.list);
    free(rs->ix.scan);
    free(rs->ix.bytes);
    memset(&rs->ix, 0, sizeof(rs->ix));
}

/* ---- lookup -------------------------------------------------------------- */

/* Compares prefix @p with value @v, which share their first @k bytes;
 * *@ret_common gets how many they share. */
static int pfx_order(const char *p, size_t plen, const char *v, size_t vlen, size_t k,
                     size_t *ret_common)
{
    size_t n = plen < vlen ? plen : vlen;

    while (k < n && p[k] == v[k])
        k++;
    *ret_common = k;
    if (k < n)
        return (unsigned char)p[k] < (unsigned char)v[k] ? -1 : 1;
    return plen < vlen ? -1 : plen > vlen;
}

size_t rules_index_lists(const struct rules *rs, const struct proto_kv *kv,
                         struct rules_cand *out, size_t room)
{
    const struct rules_index *ix = &rs->ix;
    const struct rules_pkey *key = pkey_find(rs->pool, ix->keys, ix->n_keys, kv->key,
                                             kv->key_len);
    size_t lo, hi, n = 0, common = 0, c_lo = 0, c_hi = 0;

    if (!key)
        return 0;
    /* The last entry <= the value: every prefix of the value filed under
     * this key is that entry or one of its ancestors.  Entries between two
     * that share m bytes with the value share them too, so each comparison
     * starts past the smaller of the bounds' common prefixes. */
    lo = key->first;
    hi = key->end;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2, k;
        const struct rules_pfx *e = &ix->pfx[mid];

        if (pfx_order(ix->bytes + e->off, e->len, kv->value, kv->value_len,
                      c_lo < c_hi ? c_lo : c_hi, &k) <= 0) {
            lo = mid + 1;
            c_lo = k;
            common = k;
        } else {
            hi = mid;
            c_hi = k;
        }
    }
    if (lo == key->first)
        return 0;
    /* common: what the last entry <= the value shares with it */
    for (uint32_t i = (uint32_t)(lo - 1); i != PFX_NONE; i = ix->pfx[i].parent) {
        const struct rules_pfx *a = &ix->pfx[i];

        if (a->len > common)
            continue;
        if (n == room)
            return SIZE_MAX;
        out[n].p = ix->list + a->list_first;
        out[n].end = out[n].p + a->list_n;
        out[n].bk = NULL;
        n++;
    }
    return n;
}
