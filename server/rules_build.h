/* SPDX-License-Identifier: MIT */
/*
 * rules_build: the rule list while it is checked and compiled, shared by
 * rules_validate.c and rules_compile.c (divvyd and divvyctl only; clients
 * load compiled blobs and never see this): each rule and match entry
 * prepared from the spec, the exact-pair index being built, and the small
 * map and byte buffer both stages use.
 */
#ifndef DIVVY_RULES_BUILD_H
#define DIVVY_RULES_BUILD_H

#include <errno.h>
#include <stdlib.h>

#include "diag.h"
#include "rules_private.h"

/* Rule ids and the index use SipHash with a fixed all-zero key: ids must be
 * the same on every host, and rules are operator-controlled. */
static const uint8_t zero_key[HASH_KEY_LEN];

/* ---- a fixed-capacity open-addressed map used while building ------------ */

struct map_ent {
    uint64_t h;
    const char *a, *b;          /* borrowed; b may be NULL */
    size_t alen, blen;
    uint32_t val;               /* caller's */
    uint32_t aux;               /* caller's */
    bool used;
};

struct map {
    struct map_ent *e;
    size_t mask;
};

static inline int map_init(struct map *m, size_t expect)
{
    size_t cap = 16;

    while (cap < expect * 2 + 16)
        cap *= 2;
    m->e = calloc(cap, sizeof(*m->e));
    if (!m->e)
        return -ENOMEM;
    m->mask = cap - 1;
    return 0;
}

static inline void map_free(struct map *m)
{
    free(m->e);
    m->e = NULL;
}

/* Finds the entry for (a, b) or, with @add, claims an empty one (val 0, aux
 * UINT32_MAX); NULL when absent and !@add.  The map never fills: callers size
 * it for the most entries they can add. */
static inline struct map_ent *map_get(struct map *m, uint64_t h, const char *a, size_t alen,
                                      const char *b, size_t blen, bool add)
{
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        struct map_ent *e = &m->e[i];

        if (!e->used) {
            if (!add)
                return NULL;
            e->used = true;
            e->h = h;
            e->a = a;
            e->alen = alen;
            e->b = b;
            e->blen = blen;
            e->val = 0;
            e->aux = UINT32_MAX;
            return e;
        }
        if (e->h == h && bytes_eq(e->a, e->alen, a, alen) &&
            (e->b == b || (e->b && b && bytes_eq(e->b, e->blen, b, blen))))
            return e;
    }
}

struct pm {                     /* one match entry, prepared */
    const char *key;
    size_t key_len;
    const char *raw;            /* as configured */
    size_t raw_len;
    char *val;                  /* owned: exact values unescaped, others a copy of raw */
    size_t val_len;
    int kind;
    unsigned line;
    size_t orig;                /* position in the spec, for stable duplicate reports */
    /* operators (KIND_CIDR, KIND_NOT, KIND_NOT_CIDR; rules_ops.c): raw is val */
    size_t val_cap;
    size_t n_vals;              /* values in the list */
    struct cidr *nets;          /* owned: the parsed prefixes of a cidr / not_cidr list */
};

struct pr {                     /* one rule, prepared */
    const struct rules_rule_spec *s;
    struct pm *m;               /* sorted by key */
    size_t n_m;
    bool bad;                   /* has a per-rule problem: kept out of list-level checks */
    bool shadowed;              /* reported unreachable */
    uint64_t id;
    char id_str[RULES_LABEL_MAX + 1];
    int64_t reset_seconds, refill_amount, refill_seconds;
    enum rules_store store;     /* effective */
    int64_t reset_ms, refill_ms;        /* as the algorithms count (blob_rule) */
    size_t anchor;              /* index into m, or SIZE_MAX: scan list */
    uint32_t bucket;
    struct rules_lock lock;     /* lockout: effective (rules_lock_prep()); else zero */
    const struct pm *cidr;      /* scan list: its first cidr entry, filed by prefix (rules_ops.c) */
};

struct build {
    const struct rules_spec *spec;
    struct pr *r;
    size_t n;
    struct map pairs;           /* (key, exact value) -> val: rules carrying it, aux: bucket */
    uint32_t n_bucket_used;
    uint32_t *bk_first, *bk_n;  /* per used bucket: its slice of list */
    uint32_t *list;
    uint32_t n_list;
    uint32_t *scan;
    uint32_t n_scan;
    struct ops_filed *filed;    /* scan-list rules with a cidr entry, by prefix (rules_ops.c) */
    size_t n_filed;
};

/* A growable byte buffer for the id serialization and the string pool. */
struct buf {
    char *p;
    size_t len, cap;
};

static inline int buf_put(struct buf *b, const void *data, size_t len)
{
    if (b->cap - b->len < len) {
        size_t cap = b->cap ? b->cap : 256;
        char *grown;

        while (cap - b->len < len)
            cap *= 2;
        grown = realloc(b->p, cap);
        if (!grown)
            return -ENOMEM;
        b->p = grown;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
    return 0;
}

/*
 * rules_validate.c: prepares and checks @spec.  Returns -ENOMEM, else 0 with
 * @d holding the problems found (d->n + d->dropped grew when there were any).
 * rules_build_free() frees what it built, also after a failure.
 */
int rules_build_prepare(const struct rules_spec *spec, struct build *b, struct diag *d);
void rules_build_free(struct build *b);

/* Reports a problem of rule @p into @d, at line @ln (0: the rule's line),
 * and marks @p bad: how every rules_*_prep() reports. */
#define RULES_PREP_ERR(p, d, ln, ...)                                           \
    do {                                                                        \
        diag_set((d), (p)->s->file, (ln) ? (ln) : (p)->s->line, __VA_ARGS__);   \
        (p)->bad = true;                                                        \
    } while (0)

/* rules_validate.c: reports setting @name of rule @p when @v is outside 0..@max. */
void rules_check_limit(struct pr *p, struct diag *d, const char *name, int64_t v, int64_t max);

/* rules_algo.c: checks rule @p's algorithm settings (docs/rules.md
 * "Algorithms"), handing calendar windows to rules_calendar_prep() and
 * lockout rules to rules_lock_prep(), and fills p->reset_seconds,
 * refill_amount, refill_seconds, reset_ms and refill_ms as the blob stores
 * them.  Problems go into @d. */
void rules_algo_prep(struct pr *p, struct diag *d);

/* rules_lock.c: checks lockout rule @p's settings (or lockout settings on a rule of another
 * algorithm) into @d and fills p->lock and p->reset_seconds (its fail_interval); true when
 * @p is a lockout rule (the caller skips the other algorithms' checks). */
bool rules_lock_prep(struct pr *p, struct diag *d);

/*
 * rules_build_prepare() into @b, reporting to @reterr (NULL: nowhere), and
 * -EINVAL when it reported any problem: what rules_validate() and
 * rules_compile() both start with.  Free @b with rules_build_free().
 */
int rules_build_checked(const struct rules_spec *spec, struct build *b, struct diag *reterr);

/* ---- calendar windows (rules_calendar.c) ---------------------------------- */

/*
 * rules_validate.c: checks the calendar settings of rule @p (calendar,
 * time_zone: the zone file must load) and sets its nominal reset_seconds
 * (calendar_nominal_ms()).  Problems go into @d with the setting's line.
 */
void rules_calendar_prep(struct pr *p, struct diag *d);

/* The zone table of a build: each distinct zone once, and each rule's index
 * into it (UINT32_MAX: UTC or not a calendar rule). */
struct rules_zones {
    struct calendar_zone *zone;
    uint32_t n_zone;
    struct calendar_trans *trans;
    uint32_t n_trans;
    uint32_t *rule_zone;        /* b->n entries */
};

/* rules_compile.c: loads the zones of validated build @b into @ret (freed
 * with rules_zones_free(), also after a failure).  -EINVAL when a zone file
 * no longer loads (@d says which), -ENOMEM. */
int rules_zones_build(const struct build *b, struct rules_zones *ret, struct diag *d);
void rules_zones_free(struct rules_zones *z);

/* ---- match operators (rules_ops.c, docs/rules.md "Addresses and negation") ---- */

/*
 * Adds spec entry @i of rule @p (an operator, not RULES_MATCH_VALUE) to the
 * prepared entry of its key and operator, creating it in p->m[p->n_m] when
 * it is the first; a malformed value or prefix is reported to @d (file:line)
 * and marks @p bad.  -ENOMEM (-ENOBUFS: cidr_format() failed, which
 * CIDR_TEXT_MAX rules out).
 */
int rules_ops_add(struct pr *p, size_t i, struct diag *d);

/*
 * Whether every request satisfying prepared entry @bm satisfies @am (same
 * key, one of them an operator): the unreachable-rule check's inclusion,
 * conservative -- false whenever inclusion is not proven.
 */
bool rules_ops_implies(const struct pm *bm, const struct pm *am);

/*
 * The unreachable-rule check of scan-list rules with a cidr entry, without
 * testing every pair: rules_ops_file() sorts the prefixes of each such
 * rule's first cidr entry (p->cidr) into b->filed (-ENOMEM);
 * rules_ops_shadow() returns the first of those rules before min(@bi, @best)
 * that @covers says covers rule @bi, else @best.  An earlier rule filed
 * there can only cover @bi if @bi has a cidr entry on the same key with a
 * prefix inside one of its own, so only the prefixes containing @bi's first
 * prefix on each of its cidr keys are looked up.  Rules not filed there
 * are left to the caller's scan.
 */
int rules_ops_file(struct build *b);
size_t rules_ops_shadow(const struct build *b, size_t bi, size_t best,
                        bool (*covers)(const struct pr *a, const struct pr *b));

/*
 * rules_validate_notes()' note on operators: when more than
 * RULES_OPS_SCAN_NOTE rules match by negation alone (not / not_cidr and
 * presence, nothing the index can file them under), one note at the first
 * of them: each is tested for every request.  Returns how many (0 or 1).
 */
#define RULES_OPS_SCAN_NOTE 32
size_t rules_ops_notes(const struct rules_spec *spec, struct diag *ret);

#endif
