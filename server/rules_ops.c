/* SPDX-License-Identifier: MIT */
/*
 * rules_ops: the match operators of the native config while a rule list is
 * checked (docs/rules.md "Addresses and negation"), divvyd and divvyctl
 * only: each cidr, not and not_cidr value validated and gathered into one
 * prepared entry per key and operator (prefixes parsed and written in
 * canonical text, not values kept as configured), and the inclusion of
 * such entries that the unreachable-rule check needs, proven or refused.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rules_build.h"

static const char *op_name(int kind)
{
    return kind == KIND_CIDR ? "cidr" : kind == KIND_NOT ? "not" : "not_cidr";
}

static int op_kind(enum rules_match_op op)
{
    return op == RULES_MATCH_CIDR ? KIND_CIDR : op == RULES_MATCH_NOT ? KIND_NOT : KIND_NOT_CIDR;
}

/* Appends @len bytes of @s to @m's value, after @sep unless it is the first. */
static int val_append(struct pm *m, char sep, const char *s, size_t len)
{
    size_t need = m->val_len + (m->n_vals ? 1 : 0) + len + 1;

    if (need > m->val_cap) {
        size_t cap = m->val_cap ? m->val_cap : 64;
        char *grown;

        while (cap < need)
            cap *= 2;
        grown = realloc(m->val, cap);
        if (!grown)
            return -ENOMEM;
        m->val = grown;
        m->val_cap = cap;
    }
    if (m->n_vals)
        m->val[m->val_len++] = sep;
    memcpy(m->val + m->val_len, s, len);
    m->val_len += len;
    m->val[m->val_len] = '\0';
    m->raw = m->val;
    m->raw_len = m->val_len;
    m->n_vals++;
    return 0;
}

/* The prepared entry of (@key, @kind) in @p, created when missing. */
static struct pm *entry_for(struct pr *p, const struct rules_match_spec *ms, int kind, size_t i)
{
    struct pm *m;

    for (size_t j = 0; j < p->n_m; j++) {
        if (p->m[j].kind == kind && strcmp(p->m[j].key, ms->key) == 0)
            return &p->m[j];
    }
    m = &p->m[p->n_m++];
    memset(m, 0, sizeof(*m));
    m->key = ms->key;
    m->key_len = strlen(ms->key);
    m->kind = kind;
    m->line = ms->line;
    m->orig = i;
    m->raw = "";
    return m;
}

int rules_ops_add(struct pr *p, size_t i, struct diag *d)
{
    const struct rules_match_spec *ms = &p->s->match[i];
    const char *file = p->s->file;
    unsigned line = ms->line ? ms->line : p->s->line;
    int kind = op_kind(ms->op);
    struct pm *m = entry_for(p, ms, kind, i);
    size_t len = strlen(ms->value);
    char text[CIDR_TEXT_MAX];
    struct cidr net, *grown;
    int r;

    if (m->n_vals == MATCH_VALUES_MAX) {
        diag_set(d, file, line, "%s list of '%s' has more than %d values", op_name(kind),
                 ms->key, MATCH_VALUES_MAX);
        p->bad = true;
        return 0;
    }
    if (kind == KIND_NOT) {
        if (glob_parse(ms->value, len) < 0) {
            diag_set(d, file, line, "malformed glob in %s = { not = \"%s\" }: a backslash may "
                     "only escape '*' or '\\'", ms->key, ms->value);
            p->bad = true;
            return 0;
        }
        return val_append(m, '\0', ms->value, len);
    }
    r = cidr_parse(ms->value, len, &net);
    if (r == -EINVAL) {
        diag_set(d, file, line, "%s of '%s': \"%s\" is not an IPv4 or IPv6 prefix "
                 "(ADDRESS or ADDRESS/LENGTH, e.g. \"10.0.0.0/8\", \"2001:db8::/32\")",
                 op_name(kind), ms->key, ms->value);
        p->bad = true;
        return 0;
    }
    /* CIDR_TEXT_MAX holds any prefix: this cannot fail. */
    if (cidr_format(&net, text, sizeof(text)) < 0)
        return -ENOBUFS;
    if (r == -EDOM) {
        diag_set(d, file, line, "%s of '%s': \"%s\" has bits set past its length (did you "
                 "mean \"%s\"?)", op_name(kind), ms->key, ms->value, text);
        p->bad = true;
        return 0;
    }
    grown = realloc(m->nets, (m->n_vals + 1) * sizeof(*grown));
    if (!grown)
        return -ENOMEM;
    m->nets = grown;
    m->nets[m->n_vals] = net;
    return val_append(m, ' ', text, strlen(text));
}

/* ---- inclusion (the unreachable-rule check) ------------------------------- */

/* Every prefix of @in lies inside some prefix of @out. */
static bool nets_within(const struct pm *in, const struct pm *out)
{
    for (size_t i = 0; i < in->n_vals; i++) {
        bool held = false;

        for (size_t j = 0; j < out->n_vals && !held; j++)
            held = cidr_contains(&out->nets[j], &in->nets[i]);
        if (!held)
            return false;
    }
    return true;
}

/* No prefix of @x meets a prefix of @y (prefixes are nested or disjoint). */
static bool nets_disjoint(const struct pm *x, const struct pm *y)
{
    for (size_t i = 0; i < x->n_vals; i++) {
        for (size_t j = 0; j < y->n_vals; j++) {
            if (cidr_contains(&x->nets[i], &y->nets[j]) ||
                cidr_contains(&y->nets[j], &x->nets[i]))
                return false;
        }
    }
    return true;
}

/* The @k-th value of NOT list @m into (@ret, @ret_len); false past the last. */
static bool not_value(const struct pm *m, size_t k, const char **ret, size_t *ret_len)
{
    const char *v = m->val, *end = m->val + m->val_len;

    for (size_t i = 0;; i++) {
        const char *e = memchr(v, '\0', (size_t)(end - v));
        size_t n = e ? (size_t)(e - v) : (size_t)(end - v);

        if (i == k) {
            *ret = v;
            *ret_len = n;
            return true;
        }
        if (!e)
            return false;
        v = e + 1;
    }
}

/* Every value of NOT list @x is covered by (its language inside) a value of @y. */
static bool nots_within(const struct pm *x, const struct pm *y)
{
    const char *a, *b;
    size_t alen, blen;

    for (size_t i = 0; not_value(x, i, &a, &alen); i++) {
        bool held = false;

        for (size_t j = 0; !held && not_value(y, j, &b, &blen); j++)
            held = glob_covers(b, blen, a, alen);
        if (!held)
            return false;
    }
    return true;
}

bool rules_ops_implies(const struct pm *bm, const struct pm *am)
{
    const char *g;
    size_t glen;

    switch (am->kind) {
    case KIND_PRESENT:
        /* A cidr entry needs the key; a negation holds without it. */
        return bm->kind == KIND_CIDR;
    case KIND_CIDR:
        return bm->kind == KIND_CIDR && nets_within(bm, am);
    case KIND_NOT_CIDR:
        if (bm->kind == KIND_NOT_CIDR)
            return nets_within(am, bm);
        return bm->kind == KIND_CIDR && nets_disjoint(am, bm);
    case KIND_NOT:
        if (bm->kind == KIND_NOT)
            return nots_within(am, bm);
        if (bm->kind != KIND_EXACT)
            return false;
        /* b's one value must match none of a's excluded values. */
        for (size_t i = 0; not_value(am, i, &g, &glen); i++) {
            if (glob_match(g, glen, bm->val, bm->val_len))
                return false;
        }
        return true;
    default:
        /* An exact value or a glob: not proven from an operator (conservative). */
        return false;
    }
}

/* ---- the unreachable check of cidr rules, by prefix ------------------------- */

struct ops_filed {              /* one prefix of a filed rule's first cidr entry */
    const char *key;
    size_t key_len;
    struct cidr net;
    uint32_t rule;
};

static int filed_cmp(const void *x, const void *y)
{
    const struct ops_filed *a = x, *b = y;
    int c = bytes_cmp(a->key, a->key_len, b->key, b->key_len);

    if (!c)
        c = cidr_cmp(&a->net, &b->net);
    if (!c)
        c = a->rule < b->rule ? -1 : a->rule > b->rule;
    return c;
}

int rules_ops_file(struct build *b)
{
    size_t n = 0;

    for (uint32_t k = 0; k < b->n_scan; k++) {
        struct pr *p = &b->r[b->scan[k]];

        for (size_t j = 0; j < p->n_m && !p->cidr; j++) {
            if (p->m[j].kind == KIND_CIDR)
                p->cidr = &p->m[j];
        }
        if (p->cidr)
            n += p->cidr->n_vals;
    }
    if (!n)
        return 0;
    b->filed = calloc(n, sizeof(*b->filed));
    if (!b->filed)
        return -ENOMEM;
    for (uint32_t k = 0; k < b->n_scan; k++) {
        const struct pr *p = &b->r[b->scan[k]];

        for (size_t j = 0; p->cidr && j < p->cidr->n_vals; j++)
            b->filed[b->n_filed++] = (struct ops_filed){ p->cidr->key, p->cidr->key_len,
                                                         p->cidr->nets[j], b->scan[k] };
    }
    qsort(b->filed, b->n_filed, sizeof(*b->filed), filed_cmp);
    return 0;
}

/* The first filed entry not before (@key, @net, rule 0). */
static size_t filed_lower(const struct build *b, const char *key, size_t key_len,
                          const struct cidr *net)
{
    struct ops_filed probe = { key, key_len, *net, 0 };
    size_t lo = 0, hi = b->n_filed;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (filed_cmp(&b->filed[mid], &probe) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

size_t rules_ops_shadow(const struct build *b, size_t bi, size_t best,
                        bool (*covers)(const struct pr *a, const struct pr *b))
{
    const struct pr *p = &b->r[bi];

    for (size_t j = 0; b->n_filed && j < p->n_m; j++) {
        const struct pm *m = &p->m[j];
        unsigned max = m->kind == KIND_CIDR ? m->nets[0].len : 0;

        if (m->kind != KIND_CIDR)
            continue;
        /* every prefix containing m's first one: its own masked to each length */
        for (unsigned len = 0; len <= max; len++) {
            struct cidr net = m->nets[0];
            size_t at;

            net.len = (uint8_t)len;
            for (unsigned bit = len; bit < 128; bit++)
                net.addr[bit / 8] &= (uint8_t)~(0x80 >> (bit % 8));
            for (at = filed_lower(b, m->key, m->key_len, &net);
                 at < b->n_filed && b->filed[at].rule < bi && b->filed[at].rule < best &&
                 bytes_eq(b->filed[at].key, b->filed[at].key_len, m->key, m->key_len) &&
                 cidr_cmp(&b->filed[at].net, &net) == 0;
                 at++) {
                const struct pr *a = &b->r[b->filed[at].rule];

                if (a->s->policy == RULES_POLICY_STOP && covers(a, p)) {
                    best = b->filed[at].rule;
                    break;
                }
            }
        }
    }
    return best;
}

/* ---- notes ------------------------------------------------------------------ */

/* Whether rule @r has a negation and nothing the index could file it under:
 * no exact value, glob with a literal prefix or cidr (docs/rules.md "Cost"). */
static bool negation_only(const struct rules_rule_spec *r)
{
    bool neg = false;

    for (size_t i = 0; i < r->n_match; i++) {
        const struct rules_match_spec *m = &r->match[i];

        if (m->op == RULES_MATCH_NOT || m->op == RULES_MATCH_NOT_CIDR)
            neg = true;
        else if (m->op == RULES_MATCH_CIDR || m->value[0] != '*')
            return false;           /* an exact value, a glob with a literal prefix, a cidr */
    }
    return neg;
}

size_t rules_ops_notes(const struct rules_spec *spec, struct diag *ret)
{
    const struct rules_rule_spec *first = NULL;
    size_t n = 0;

    for (size_t i = 0; i < spec->n; i++) {
        if (!negation_only(&spec->rules[i]))
            continue;
        if (!first)
            first = &spec->rules[i];
        n++;
    }
    if (n <= RULES_OPS_SCAN_NOTE)
        return 0;
    diag_set(ret, first->file, first->line, "%zu rules, this the first, match by negation "
             "alone (not / not_cidr, no exact value, cidr or glob prefix): each is tested for "
             "every request, several hundred instructions apiece (docs/rules.md \"Addresses and "
             "negation\")", n);
    return 1;
}
