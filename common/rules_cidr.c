/* SPDX-License-Identifier: MIT */
/*
 * rules_cidr: the match operators of the native config (docs/rules.md
 * "Addresses and negation"): testing a request pair against a cidr, not or
 * not_cidr entry, and the CIDR index.  Each reader parses every CIDR and
 * NOT_CIDR entry's prefixes once where it loads the blob (rules_attach()),
 * so a hit never parses a prefix, and files each scan-list rule that has a
 * cidr entry under every prefix of it: sorted by (key, prefix), each entry
 * linked to the nearest one containing it (prefixes of one family are
 * nested or disjoint), a request address finds the prefixes containing it
 * by one binary search and a walk up that nesting (docs/dev/rules.md
 * "CIDR index").  The blob's format is unchanged but for the three kinds.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rules_private.h"

/* ---- testing one entry ---------------------------------------------------- */

/* Whether one of entry @m's prefixes contains the address @a. */
static bool cidr_any(const struct rules *rs, const struct blob_match *m, const struct cidr *a)
{
    const struct rules_cref *ref = &rs->cidr.of[m - rs->match];

    for (uint32_t i = 0; i < ref->n; i++) {
        if (cidr_contains(&rs->cidr.p[ref->first + i], a))
            return true;
    }
    return false;
}

bool rules_cidr_test(const struct rules *rs, const struct blob_match *m,
                     const struct proto_kv *kv)
{
    const char *v = rs->pool + m->value.off, *end = v + m->value.len;
    struct cidr a;
    bool in;

    if (m->kind == KIND_NOT) {
        if (!kv)
            return true;
        /* NUL-separated globs: the value must match none of them. */
        for (;;) {
            const char *e = memchr(v, '\0', (size_t)(end - v));
            size_t n = e ? (size_t)(e - v) : (size_t)(end - v);

            if (glob_match(v, n, kv->value, kv->value_len))
                return false;
            if (!e)
                return true;
            v = e + 1;
        }
    }
    /* A missing key or a value that is no address lies in no prefix. */
    in = kv && cidr_addr_parse(kv->value, kv->value_len, &a) == 0 && cidr_any(rs, m, &a);
    return m->kind == KIND_CIDR ? in : !in;
}

/* ---- loading -------------------------------------------------------------- */

/*
 * Parses the ' '-separated prefixes of entry @m into @out (NULL: only
 * counts them) and adds how many to *@n.  -EBADMSG unless each is in the
 * canonical form rules_compile() writes (no host bits) and there are at
 * most MATCH_VALUES_MAX.
 */
static int parse_entry(const struct rules *rs, const struct blob_match *m, struct cidr *out,
                       uint32_t *n)
{
    const char *v = rs->pool + m->value.off, *end = v + m->value.len;

    for (uint32_t k = 1;; k++) {
        const char *e = memchr(v, ' ', (size_t)(end - v));
        size_t len = e ? (size_t)(e - v) : (size_t)(end - v);
        struct cidr p;

        if (k > MATCH_VALUES_MAX || cidr_parse(v, len, &p) != 0)
            return -EBADMSG;
        if (out)
            out[*n] = p;
        ++*n;
        if (!e)
            return 0;
        v = e + 1;
    }
}

static bool is_cidr_kind(const struct blob_match *m)
{
    return m->kind == KIND_CIDR || m->kind == KIND_NOT_CIDR;
}

int rules_cidr_load(struct rules *rs)
{
    const struct blob_hdr *h = rs->hdr;
    uint32_t total = 0;
    int r = 0;

    memset(&rs->cidr, 0, sizeof(rs->cidr));
    for (uint32_t i = 0; i < h->n_match && r >= 0; i++) {
        if (is_cidr_kind(&rs->match[i]))
            r = parse_entry(rs, &rs->match[i], NULL, &total);
    }
    if (r < 0 || !total)
        return r;
    rs->cidr.p = calloc(total, sizeof(*rs->cidr.p));
    rs->cidr.of = calloc(h->n_match, sizeof(*rs->cidr.of));
    if (!rs->cidr.p || !rs->cidr.of) {
        rules_cidr_free(rs);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < h->n_match; i++) {
        if (!is_cidr_kind(&rs->match[i]))
            continue;
        rs->cidr.of[i].first = rs->cidr.n;
        /* Parsed once above: it cannot fail now. */
        (void)parse_entry(rs, &rs->match[i], rs->cidr.p, &rs->cidr.n);
        rs->cidr.of[i].n = rs->cidr.n - rs->cidr.of[i].first;
    }
    return 0;
}

void rules_cidr_free(struct rules *rs)
{
    free(rs->cidr.p);
    free(rs->cidr.of);
    free(rs->cidr.ix);
    free(rs->cidr.keys);
    free(rs->cidr.list);
    free(rs->cidr.kb);
    memset(&rs->cidr, 0, sizeof(rs->cidr));
}

/* ---- the index ------------------------------------------------------------ */

/* The CIDR entry a scan-list rule is filed under: its first (in key order). */
static const struct blob_match *filed_entry(const struct rules *rs, uint32_t idx)
{
    const struct blob_rule *r = &rs->rule[idx];

    if (!rs->cidr.of)
        return NULL;
    for (uint32_t i = 0; i < r->n_match; i++) {
        if (rs->match[r->match_first + i].kind == KIND_CIDR)
            return &rs->match[r->match_first + i];
    }
    return NULL;
}

bool rules_cidr_filed(const struct rules *rs, uint32_t idx)
{
    return filed_entry(rs, idx) != NULL;
}

struct cidr_tmp {               /* one (rule, prefix) while the index is built */
    const struct cidr *net;
    const char *key_p;          /* the key's bytes, for sorting */
    struct blob_str key;
    uint32_t rule;
};

static int tmp_cmp(const void *x, const void *y)
{
    const struct cidr_tmp *a = x, *b = y;
    int c = pkey_cmp(a->key_p, a->key.len, b->key_p, b->key.len);

    if (!c)
        c = cidr_cmp(a->net, b->net);
    if (!c)
        c = a->rule < b->rule ? -1 : a->rule > b->rule;
    return c;
}

/* Groups the sorted @t into entries with their lists, links each to the
 * nearest entry containing it, and records the runs of each key. */
static int group(struct rules *rs, const struct cidr_tmp *t, size_t n_t)
{
    struct rules_cidrs *cx = &rs->cidr;
    uint32_t *stack = NULL, n_list = 0;
    size_t sp = 0;
    int r = -ENOMEM;

    cx->ix = calloc(n_t, sizeof(*cx->ix));
    cx->keys = calloc(n_t, sizeof(*cx->keys));
    cx->list = calloc(n_t, sizeof(*cx->list));
    cx->kb = calloc(n_t, sizeof(*cx->kb));
    stack = calloc(n_t, sizeof(*stack));
    if (!cx->ix || !cx->keys || !cx->list || !cx->kb || !stack)
        goto out;
    for (size_t i = 0; i < n_t; i++) {
        bool new_key = i == 0 || str_cmp_pool(rs->pool, &t[i - 1].key, &t[i].key) != 0;
        struct rules_cidx *e;

        if (new_key) {
            cx->keys[cx->n_keys].key = t[i].key;
            cx->keys[cx->n_keys].first = cx->n_ix;
            cx->kb[cx->n_keys].key = t[i].key;
            cx->kb[cx->n_keys].value.off = CIDX_VALUE;
            cx->n_keys++;
            sp = 0;
        }
        if (new_key || cidr_cmp(t[i - 1].net, t[i].net) != 0) {
            e = &cx->ix[cx->n_ix++];
            e->net = *t[i].net;
            e->key = t[i].key;
            e->list_first = n_list;
            while (sp && !cidr_contains(&cx->ix[stack[sp - 1]].net, &e->net))
                sp--;
            e->parent = sp ? stack[sp - 1] : PFX_NONE;
            stack[sp++] = cx->n_ix - 1;
        } else if (t[i - 1].rule == t[i].rule) {
            continue;                   /* a prefix listed twice in one rule */
        }
        cx->list[n_list++] = t[i].rule;
        cx->ix[cx->n_ix - 1].list_n++;
        cx->keys[cx->n_keys - 1].end = cx->n_ix;
    }
    r = 0;
out:
    free(stack);
    return r;
}

int rules_cidr_index(struct rules *rs)
{
    const struct blob_hdr *h = rs->hdr;
    struct cidr_tmp *t = NULL;
    size_t n_t = 0;
    int r = -ENOMEM;

    if (!rs->cidr.of)
        return 0;
    for (uint32_t k = 0; k < h->n_scan; k++) {
        const struct blob_match *m = filed_entry(rs, rs->scan[k]);

        if (m)
            n_t += rs->cidr.of[m - rs->match].n;
    }
    if (!n_t)
        return 0;
    t = calloc(n_t, sizeof(*t));
    if (!t)
        goto out;
    n_t = 0;
    for (uint32_t k = 0; k < h->n_scan; k++) {
        const struct blob_match *m = filed_entry(rs, rs->scan[k]);
        const struct rules_cref *ref = m ? &rs->cidr.of[m - rs->match] : NULL;

        for (uint32_t i = 0; ref && i < ref->n; i++) {
            t[n_t].net = &rs->cidr.p[ref->first + i];
            t[n_t].key = m->key;
            t[n_t].key_p = rs->pool + m->key.off;
            t[n_t].rule = rs->scan[k];
            n_t++;
        }
    }
    qsort(t, n_t, sizeof(*t), tmp_cmp);
    r = group(rs, t, n_t);
out:
    free(t);
    return r;
}

/* ---- lookup --------------------------------------------------------------- */

size_t rules_cidr_lists(const struct rules *rs, const struct proto_kv *kv,
                        struct rules_cand *out, size_t room)
{
    const struct rules_cidrs *cx = &rs->cidr;
    const struct rules_pkey *key = pkey_find(rs->pool, cx->keys, cx->n_keys, kv->key,
                                             kv->key_len);
    size_t lo, hi, n = 0;
    struct cidr a;

    if (!key || cidr_addr_parse(kv->value, kv->value_len, &a) < 0)
        return 0;
    /* The last entry <= the address: every prefix containing it is that
     * entry or one of its ancestors (a containing prefix sorts before it
     * and contains every entry between). */
    lo = key->first;
    hi = key->end;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (cidr_cmp(&cx->ix[mid].net, &a) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == key->first)
        return 0;
    for (uint32_t i = (uint32_t)(lo - 1); i != PFX_NONE; i = cx->ix[i].parent) {
        const struct rules_cidx *e = &cx->ix[i];

        if (!cidr_contains(&e->net, &a))
            continue;
        if (n == room)
            return SIZE_MAX;
        out[n].p = cx->list + e->list_first;
        out[n].end = out[n].p + e->list_n;
        out[n].bk = &cx->kb[key - cx->keys];
        n++;
    }
    return n;
}
