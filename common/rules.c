/* SPDX-License-Identifier: MIT */
/*
 * rules: validation, compilation and matching of the rule list
 * (docs/rules.md).  rules_validate() checks a struct rules_spec;
 * rules_compile() turns it into one contiguous, pointer-free blob (header,
 * rule records, match entries, actor keys, an index of exact-valued
 * (key, value) anchors, a scan list, a string pool) that is written to a
 * file and mapped by other processes as is.  rules_from_blob() checks every
 * count, offset and length of such a blob before anything reads it.  The
 * matcher never allocates: it looks up the request's pairs in the index and
 * merges the candidate lists in rule order.  This module owns the blob.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glob.h"
#include "hash.h"
#include "rules.h"

/* ---- blob layout (docs/rules.md "Compiled form") ------------------------ */

#define BLOB_MAGIC      "DIVVYRL1"
#define BLOB_LAYOUT     2
#define BLOB_ALIGN      8
/* Longest "key\0value" the index files; longer pairs cannot arrive in one
 * request line anyway, so their rules go on the scan list. */
#define PAIR_MAX        PROTO_LINE_MAX

enum { KIND_PRESENT = 0, KIND_EXACT = 1, KIND_GLOB = 2 };
enum { FLAG_STRICT = 1, FLAG_FAST_PATH = 2, FLAG_DEFAULT = 4, FLAG_NO_RESET = 8 };

struct blob_str {
    uint32_t off;               /* into the pool; pool[off + len] is NUL */
    uint32_t len;
};

struct blob_hdr {
    char magic[8];              /* BLOB_MAGIC, no NUL */
    uint32_t layout;            /* BLOB_LAYOUT */
    uint32_t hdr_size;          /* sizeof(struct blob_hdr) */
    uint64_t total_size;        /* bytes of the whole blob */
    uint64_t generation;
    uint32_t n_rule, n_match, n_actor, n_akey;
    uint32_t n_bucket, n_list, n_scan, pool_size;
    uint64_t rule_off, match_off, actor_off, akey_off;
    uint64_t bucket_off, list_off, scan_off, pool_off;
};

struct blob_rule {
    uint64_t id;
    int64_t credit_limit;
    int64_t reset_seconds;
    int64_t refill_amount;
    int64_t refill_seconds;
    int64_t max_actors;
    uint32_t match_first, n_match;      /* entries of the match array, sorted by key */
    uint32_t actor_first, n_actor;      /* entries of the actor array, in config order */
    struct blob_str id_str, label, comment, file;
    uint32_t line;
    int16_t prefix4, prefix6;
    uint8_t policy, algo, source, flags;
    uint8_t store;                      /* enum rules_store, effective (docs/rules.md) */
    uint8_t reserved[3];
};

struct blob_match {
    struct blob_str key;
    struct blob_str value;      /* exact: unescaped; glob: as configured; present: "*" */
    uint32_t kind;
    uint32_t reserved;
};

struct blob_bucket {
    uint64_t hash;              /* pair_hash(key, value) */
    struct blob_str key, value;
    uint32_t list_first, list_n;        /* list_n == 0: empty slot */
};

_Static_assert(sizeof(struct blob_str) == 8, "blob_str layout");
_Static_assert(sizeof(struct blob_hdr) == 128, "blob_hdr layout");
_Static_assert(offsetof(struct blob_hdr, rule_off) == 64, "blob_hdr layout");
_Static_assert(sizeof(struct blob_rule) == 112, "blob_rule layout");
_Static_assert(offsetof(struct blob_rule, match_first) == 48, "blob_rule layout");
_Static_assert(offsetof(struct blob_rule, line) == 96, "blob_rule layout");
_Static_assert(offsetof(struct blob_rule, policy) == 104, "blob_rule layout");
_Static_assert(offsetof(struct blob_rule, store) == 108, "blob_rule layout");
_Static_assert(sizeof(struct blob_match) == 24, "blob_match layout");
_Static_assert(sizeof(struct blob_bucket) == 32, "blob_bucket layout");

struct rules {
    uint8_t *blob;              /* owned, malloc'd: aligned for every record */
    size_t len;
    const struct blob_hdr *hdr;
    const struct blob_rule *rule;
    const struct blob_match *match;
    const struct blob_str *actor;
    const struct blob_str *akey;        /* distinct anchor keys, sorted */
    const struct blob_bucket *bucket;
    const uint32_t *list;
    const uint32_t *scan;
    const char *pool;
    bool uses_store;            /* some counting rule is lease or strict */
};

/* Rule ids and the index use SipHash with a fixed all-zero key: ids must be
 * the same on every host, and rules are operator-controlled. */
static const uint8_t zero_key[HASH_KEY_LEN];

/* ---- small helpers ------------------------------------------------------- */

static int bytes_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);

    if (c)
        return c;
    return alen < blen ? -1 : alen > blen;
}

static bool bytes_eq(const char *a, size_t alen, const char *b, size_t blen)
{
    return alen == blen && memcmp(a, b, alen) == 0;
}

/* Hash of a (key, value) pair: the key's hash seeds the value's, and the
 * lengths are mixed in, so ("a", "bc") and ("ab", "c") differ.  Unkeyed
 * (hash_fast): the index is built from the operator's rules only. */
static uint64_t pair_hash(const char *k, size_t klen, const char *v, size_t vlen)
{
    return hash_fast(hash_fast(0, k, klen), v, vlen);
}

static bool pair_indexable(size_t klen, size_t vlen)
{
    return klen + 1 + vlen <= PAIR_MAX;
}

static const char *policy_name(enum rules_policy p)
{
    return p == RULES_POLICY_CANARY ? "canary" : p == RULES_POLICY_CONTINUE ? "continue" : "stop";
}

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

static int map_init(struct map *m, size_t expect)
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

static void map_free(struct map *m)
{
    free(m->e);
    m->e = NULL;
}

/* Finds the entry for (a, b) or, with @add, claims an empty one (val 0, aux
 * UINT32_MAX); NULL when absent and !@add.  The map never fills: callers size
 * it for the most entries they can add. */
static struct map_ent *map_get(struct map *m, uint64_t h, const char *a, size_t alen,
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

/* ---- preparation and validation ---------------------------------------- */

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
    size_t anchor;              /* index into m, or SIZE_MAX: scan list */
    uint32_t bucket;
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
};

static void build_free(struct build *b)
{
    for (size_t i = 0; i < b->n; i++) {
        for (size_t j = 0; j < b->r[i].n_m; j++)
            free(b->r[i].m[j].val);
        free(b->r[i].m);
    }
    free(b->r);
    map_free(&b->pairs);
    free(b->bk_first);
    free(b->bk_n);
    free(b->list);
    free(b->scan);
    memset(b, 0, sizeof(*b));
}

static int pm_cmp(const void *x, const void *y)
{
    const struct pm *a = x, *b = y;
    int c = bytes_cmp(a->key, a->key_len, b->key, b->key_len);

    if (c)
        return c;
    return a->orig < b->orig ? -1 : a->orig > b->orig;
}

static bool label_ok(const char *l)
{
    size_t n = strlen(l);

    if (n < 1 || n > RULES_LABEL_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = l[i];

        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* A growable byte buffer for the id serialization and the string pool. */
struct buf {
    char *p;
    size_t len, cap;
};

static int buf_put(struct buf *b, const void *data, size_t len)
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

static int buf_u32(struct buf *b, uint32_t v)
{
    uint8_t le[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };

    return buf_put(b, le, sizeof(le));
}

static int buf_lstr(struct buf *b, const char *s, size_t len)
{
    int r = buf_u32(b, (uint32_t)len);

    return r < 0 ? r : buf_put(b, s, len);
}

/*
 * The rule's stable id (docs/rules.md "Identity"): SipHash (zero key) of
 * "label:" + label, or of a canonical serialization of the match set, actor
 * keys, prefixes and algorithm, never the limits.
 */
static int rule_id(struct pr *p)
{
    const struct rules_rule_spec *s = p->s;
    struct buf b = { 0 };
    int r;

    if (s->label) {
        r = buf_put(&b, "label:", 6);
        if (r >= 0)
            r = buf_put(&b, s->label, strlen(s->label));
        if (r < 0)
            goto out;
        p->id = hash_siphash(zero_key, b.p, b.len);
        snprintf(p->id_str, sizeof(p->id_str), "%s", s->label);
        goto out;
    }
    r = buf_put(&b, "rule:", 5);
    if (r >= 0)
        r = buf_u32(&b, (uint32_t)p->n_m);
    for (size_t i = 0; r >= 0 && i < p->n_m; i++) {
        r = buf_lstr(&b, p->m[i].key, p->m[i].key_len);
        if (r >= 0)
            r = buf_lstr(&b, p->m[i].raw, p->m[i].raw_len);
    }
    if (r >= 0)
        r = buf_u32(&b, (uint32_t)s->n_actor);
    for (size_t i = 0; r >= 0 && i < s->n_actor; i++)
        r = buf_lstr(&b, s->actor[i], strlen(s->actor[i]));
    if (r >= 0)
        r = buf_u32(&b, (uint32_t)(int32_t)s->prefix4);
    if (r >= 0)
        r = buf_u32(&b, (uint32_t)(int32_t)s->prefix6);
    if (r >= 0)
        r = buf_u32(&b, (uint32_t)s->algo);
    /* Privileged rules get their own counters; "any" ids are exactly as above. */
    if (r >= 0 && s->source == RULES_SOURCE_PRIVILEGED)
        r = buf_put(&b, "privileged", 10);
    if (r < 0)
        goto out;
    p->id = hash_siphash(zero_key, b.p, b.len);
    snprintf(p->id_str, sizeof(p->id_str), "%016" PRIx64, p->id);
out:
    free(b.p);
    return r;
}

#define RULE_ERR(p, ln, ...)                                                    \
    do {                                                                        \
        diag_set(d, (p)->s->file, (ln) ? (ln) : (p)->s->line, __VA_ARGS__);     \
        (p)->bad = true;                                                        \
    } while (0)

/* Prepares the match entries of one rule and reports problems with them. */
static int prep_match(struct pr *p, struct diag *d)
{
    const struct rules_rule_spec *s = p->s;

    if (s->n_match == 0)
        return 0;
    p->m = calloc(s->n_match, sizeof(*p->m));
    if (!p->m)
        return -ENOMEM;
    p->n_m = s->n_match;
    for (size_t i = 0; i < s->n_match; i++) {
        struct pm *m = &p->m[i];
        int kind;

        m->key = s->match[i].key;
        m->key_len = strlen(m->key);
        m->raw = s->match[i].value;
        m->raw_len = strlen(m->raw);
        m->line = s->match[i].line;
        m->orig = i;
        m->val = malloc(m->raw_len + 1);
        if (!m->val)
            return -ENOMEM;
        kind = glob_parse(m->raw, m->raw_len);
        if (kind < 0) {
            RULE_ERR(p, m->line, "malformed glob in %s=%s: a backslash may only escape "
                     "'*' or '\\'", m->key, m->raw);
            kind = GLOB_WILD;
        }
        if (m->raw_len == 1 && m->raw[0] == '*') {
            m->kind = KIND_PRESENT;
            memcpy(m->val, m->raw, m->raw_len + 1);
            m->val_len = m->raw_len;
        } else if (kind == GLOB_EXACT) {
            m->kind = KIND_EXACT;
            m->val_len = glob_unescape(m->raw, m->raw_len, m->val);
        } else {
            m->kind = KIND_GLOB;
            memcpy(m->val, m->raw, m->raw_len + 1);
            m->val_len = m->raw_len;
        }
    }
    qsort(p->m, p->n_m, sizeof(*p->m), pm_cmp);
    for (size_t i = 1; i < p->n_m; i++) {
        if (bytes_eq(p->m[i - 1].key, p->m[i - 1].key_len, p->m[i].key, p->m[i].key_len))
            RULE_ERR(p, p->m[i].line, "key '%s' repeats in this rule's match", p->m[i].key);
    }
    if (p->n_m > PROTO_KV_MAX)
        RULE_ERR(p, 0, "rule has %zu match keys; a request carries at most %d", p->n_m,
                 PROTO_KV_MAX);
    return 0;
}

static void check_limit(struct pr *p, struct diag *d, const char *name, int64_t v, int64_t max)
{
    if (v < 0 || v > max)
        RULE_ERR(p, 0, "%s %" PRId64 " is out of range 0..%" PRId64, name, v, max);
}

/* Store checks (docs/redis.md): the effective store must fit the algorithm. */
static void prep_store(struct pr *p, struct diag *d)
{
    const struct rules_rule_spec *s = p->s;
    const char *from = s->store_set ? "store" : "store.mode";

    if ((unsigned)p->store > RULES_STORE_STRICT) {
        RULE_ERR(p, 0, "unknown store");
        return;
    }
    /* Rules that never touch a counter never reach Redis either. */
    if (s->credit_limit <= 0 || (s->algo != RULES_ALGO_TOKEN_BUCKET && s->reset_seconds == 0))
        return;
    if (p->store == RULES_STORE_LEASE) {
        if (s->algo != RULES_ALGO_WINDOW)
            RULE_ERR(p, 0, "%s \"lease\" needs algorithm window (give this rule store = "
                     "\"strict\" or \"local\")", from);
        else if (s->credit_limit > RULES_LEASE_LIMIT_MAX)
            RULE_ERR(p, 0, "credit_limit %" PRId64 " is too large for %s \"lease\" (at most "
                     "%" PRId64 ")", s->credit_limit, from, RULES_LEASE_LIMIT_MAX);
    }
    /* Lua numbers are doubles: the sliding estimate must stay exact. */
    if (p->store == RULES_STORE_STRICT && s->algo == RULES_ALGO_SLIDING_WINDOW &&
        s->reset_seconds > 0 &&
        (unsigned __int128)s->credit_limit * (uint64_t)s->reset_seconds * 1000 >
            (unsigned __int128)RULES_STRICT_SLIDING_MAX)
        RULE_ERR(p, 0, "credit_limit * reset_seconds is too large for a strict sliding_window "
                 "(credit_limit * reset_seconds * 1000 must be at most 2^52)");
}

/* Per-rule checks of everything but the match set. */
static void prep_settings(struct pr *p, struct diag *d)
{
    const struct rules_rule_spec *s = p->s;
    bool tb = s->algo == RULES_ALGO_TOKEN_BUCKET;
    int64_t limit_max = s->algo == RULES_ALGO_SLIDING_WINDOW ? RULES_SLIDING_LIMIT_MAX
                                                             : RULES_LIMIT_MAX;

    if ((unsigned)s->algo > RULES_ALGO_SLIDING_WINDOW)
        RULE_ERR(p, 0, "unknown algorithm");
    if ((unsigned)s->policy > RULES_POLICY_CONTINUE)
        RULE_ERR(p, 0, "unknown match_policy");
    if ((unsigned)s->source > RULES_SOURCE_PRIVILEGED)
        RULE_ERR(p, 0, "unknown source");

    if (s->credit_limit == -1)
        RULE_ERR(p, 0, "credit_limit is not set");
    else
        check_limit(p, d, "credit_limit", s->credit_limit, limit_max);

    p->reset_seconds = s->reset_seconds;
    p->refill_amount = s->refill_amount;
    p->refill_seconds = s->refill_seconds;
    if (s->reset_seconds != -1)
        check_limit(p, d, "reset_seconds", s->reset_seconds, RULES_SECONDS_MAX);
    if (!tb) {
        if (s->reset_seconds == -1)
            RULE_ERR(p, 0, "reset_seconds is not set");
        if (s->refill_amount != -1 || s->refill_seconds != -1)
            RULE_ERR(p, 0, "refill_amount and refill_seconds need algorithm token_bucket");
        if (s->strict)
            RULE_ERR(p, 0, "strict needs algorithm token_bucket");
        p->refill_amount = 0;
        p->refill_seconds = 0;
    } else {
        if (p->refill_amount == -1)
            p->refill_amount = 1;
        if (p->refill_amount < 1 || p->refill_amount > RULES_LIMIT_MAX ||
            (s->credit_limit > 0 && p->refill_amount > s->credit_limit))
            RULE_ERR(p, 0, "refill_amount %" PRId64 " is out of range 1..credit_limit",
                     p->refill_amount);
        if (p->refill_seconds == -1)
            p->refill_seconds = s->reset_seconds;
        if (p->refill_seconds == -1)
            RULE_ERR(p, 0, "token_bucket needs refill_seconds (or reset_seconds)");
        else if (p->refill_seconds < 1 || p->refill_seconds > RULES_SECONDS_MAX)
            RULE_ERR(p, 0, "refill_seconds %" PRId64 " is out of range 1..%lld",
                     p->refill_seconds, RULES_SECONDS_MAX);
        if (p->reset_seconds == -1)
            p->reset_seconds = p->refill_seconds;
        /* An empty bucket must refill within what a slot can represent
         * (ALGO_SPAN_MAX, about 17 years; docs/shm.md). */
        if (s->credit_limit > 0 && p->refill_amount >= 1 && p->refill_seconds >= 1 &&
            p->refill_amount <= s->credit_limit &&
            ((uint64_t)s->credit_limit + (uint64_t)p->refill_amount - 1) /
                        (uint64_t)p->refill_amount >
                ((uint64_t)1 << 39) / 1000 / (uint64_t)p->refill_seconds)
            RULE_ERR(p, 0, "an empty bucket would take more than 17 years to refill "
                           "(credit_limit / refill_amount * refill_seconds)");
    }

    if (s->n_actor > RULES_ACTOR_KEYS_MAX)
        RULE_ERR(p, 0, "actor names %zu keys; at most %d", s->n_actor, RULES_ACTOR_KEYS_MAX);
    for (size_t i = 0; i < s->n_actor; i++) {
        for (size_t j = 0; j < i; j++) {
            if (strcmp(s->actor[i], s->actor[j]) == 0) {
                RULE_ERR(p, 0, "actor key '%s' repeats", s->actor[i]);
                break;
            }
        }
    }
    if (s->prefix4 != -1 && (s->prefix4 < 0 || s->prefix4 > 32))
        RULE_ERR(p, 0, "actor_prefix4 %d is out of range 0..32", s->prefix4);
    if (s->prefix6 != -1 && (s->prefix6 < 0 || s->prefix6 > 128))
        RULE_ERR(p, 0, "actor_prefix6 %d is out of range 0..128", s->prefix6);
    if ((s->prefix4 != -1 || s->prefix6 != -1) && s->n_actor == 0)
        RULE_ERR(p, 0, "actor_prefix4/actor_prefix6 need an actor");
    if (s->max_actors < 0 || s->max_actors > RULES_LIMIT_MAX)
        RULE_ERR(p, 0, "max_actors %" PRId64 " is out of range 0..%" PRId64, s->max_actors,
                 RULES_LIMIT_MAX);
    if (s->label && !label_ok(s->label))
        RULE_ERR(p, 0, "label '%s' is not [A-Za-z0-9_-]{1,%d}", s->label, RULES_LABEL_MAX);
    /* Fast-path counters live in a table every divvy-fast member can write:
     * a privileged (login) rule must never be kept there. */
    if (s->fast_path && s->source == RULES_SOURCE_PRIVILEGED)
        RULE_ERR(p, 0, "a source = privileged rule cannot be fast_path");
    prep_store(p, d);
}

/* True when every request rule @b matches is also matched by rule @a. */
static bool rule_covers(const struct pr *a, const struct pr *b)
{
    size_t j = 0;

    if (a->s->source == RULES_SOURCE_PRIVILEGED && b->s->source != RULES_SOURCE_PRIVILEGED)
        return false;
    for (size_t i = 0; i < a->n_m; i++) {
        const struct pm *am = &a->m[i];
        int c = 1;

        while (j < b->n_m &&
               (c = bytes_cmp(b->m[j].key, b->m[j].key_len, am->key, am->key_len)) < 0)
            j++;
        if (j == b->n_m || c != 0)
            return false;
        /* "*" read as a glob is exactly "present with any value". */
        if (!glob_covers(am->raw, am->raw_len, b->m[j].raw, b->m[j].raw_len))
            return false;
    }
    return true;
}

/*
 * Files every good rule under one anchor pair (its exact pair carried by the
 * fewest rules) or on the scan list, building per-anchor rule lists that
 * are sorted because rules are visited in order.
 */
static int build_index(struct build *b)
{
    size_t n_pairs = 0;
    uint32_t *fill = NULL;
    int r;

    for (size_t i = 0; i < b->n; i++)
        n_pairs += b->r[i].n_m;
    r = map_init(&b->pairs, n_pairs);
    if (r < 0)
        goto out;
    for (size_t i = 0; i < b->n; i++) {
        struct pr *p = &b->r[i];

        if (p->bad)
            continue;
        for (size_t j = 0; j < p->n_m; j++) {
            struct pm *m = &p->m[j];

            if (m->kind != KIND_EXACT || !pair_indexable(m->key_len, m->val_len))
                continue;
            map_get(&b->pairs, pair_hash(m->key, m->key_len, m->val, m->val_len), m->key,
                    m->key_len, m->val, m->val_len, true)->val++;
        }
    }
    for (size_t i = 0; i < b->n; i++) {
        struct pr *p = &b->r[i];
        struct map_ent *best = NULL;

        p->anchor = SIZE_MAX;
        if (p->bad)
            continue;
        for (size_t j = 0; j < p->n_m; j++) {
            struct pm *m = &p->m[j];
            struct map_ent *e;

            if (m->kind != KIND_EXACT || !pair_indexable(m->key_len, m->val_len))
                continue;
            e = map_get(&b->pairs, pair_hash(m->key, m->key_len, m->val, m->val_len), m->key,
                        m->key_len, m->val, m->val_len, false);
            if (!best || e->val < best->val) {
                best = e;
                p->anchor = j;
            }
        }
        if (!best) {
            b->n_scan++;
            continue;
        }
        if (best->aux == UINT32_MAX)
            best->aux = b->n_bucket_used++;
        p->bucket = best->aux;
        b->n_list++;
    }
    b->bk_first = calloc(b->n_bucket_used + 1, sizeof(*b->bk_first));
    b->bk_n = calloc(b->n_bucket_used + 1, sizeof(*b->bk_n));
    fill = calloc(b->n_bucket_used + 1, sizeof(*fill));
    b->list = calloc(b->n_list + 1, sizeof(*b->list));
    b->scan = calloc(b->n_scan + 1, sizeof(*b->scan));
    if (!b->bk_first || !b->bk_n || !fill || !b->list || !b->scan) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < b->n; i++) {
        if (!b->r[i].bad && b->r[i].anchor != SIZE_MAX)
            b->bk_n[b->r[i].bucket]++;
    }
    for (uint32_t k = 1; k < b->n_bucket_used; k++)
        b->bk_first[k] = b->bk_first[k - 1] + b->bk_n[k - 1];
    b->n_scan = 0;
    for (size_t i = 0; i < b->n; i++) {
        struct pr *p = &b->r[i];

        if (p->bad)
            continue;
        if (p->anchor == SIZE_MAX)
            b->scan[b->n_scan++] = (uint32_t)i;
        else
            b->list[b->bk_first[p->bucket] + fill[p->bucket]++] = (uint32_t)i;
    }
    r = 0;
out:
    free(fill);
    return r;
}

/* Returns the first earlier stop rule that covers rule @bi, or SIZE_MAX. */
static size_t find_shadow(const struct build *b, size_t bi)
{
    const struct pr *p = &b->r[bi];
    size_t best = SIZE_MAX;

    for (uint32_t k = 0; k < b->n_scan && b->scan[k] < bi && b->scan[k] < best; k++) {
        const struct pr *a = &b->r[b->scan[k]];

        if (a->s->policy == RULES_POLICY_STOP && rule_covers(a, p)) {
            best = b->scan[k];
            break;
        }
    }
    /* An anchored rule can only cover @p if @p carries its anchor pair exactly. */
    for (size_t j = 0; j < p->n_m; j++) {
        const struct pm *m = &p->m[j];
        const struct map_ent *e;

        if (m->kind != KIND_EXACT || !pair_indexable(m->key_len, m->val_len))
            continue;
        e = map_get((struct map *)&b->pairs, pair_hash(m->key, m->key_len, m->val, m->val_len),
                    m->key, m->key_len, m->val, m->val_len, false);
        if (!e || e->aux == UINT32_MAX)
            continue;
        for (uint32_t k = 0; k < b->bk_n[e->aux]; k++) {
            uint32_t ai = b->list[b->bk_first[e->aux] + k];
            const struct pr *a = &b->r[ai];

            if (ai >= bi || ai >= best)
                break;
            if (a->s->policy == RULES_POLICY_STOP && rule_covers(a, p)) {
                best = ai;
                break;
            }
        }
    }
    return best;
}

/* Checks of the list as a whole: default rule, policies, ids, reachability. */
static int check_list(struct build *b, struct diag *d)
{
    const struct rules_spec *spec = b->spec;
    struct map ids = { 0 }, strs = { 0 }, labels = { 0 };
    size_t n_side = 0;
    int r;

    if (spec->n == 0) {
        diag_set(d, NULL, 0, "no default rule: the last rule must be the default "
                 "(default = true, or an INI [default] section)");
        return 0;
    }
    if (!spec->rules[spec->n - 1].is_default) {
        const struct rules_rule_spec *last = &spec->rules[spec->n - 1];

        diag_set(d, last->file, last->line, "no default rule: the last rule must be the "
                 "default (default = true, or an INI [default] section)");
    }
    for (size_t i = 0; i < b->n; i++) {
        struct pr *p = &b->r[i];
        const struct rules_rule_spec *s = p->s;

        if (s->is_default) {
            if (i + 1 != b->n)
                RULE_ERR(p, 0, "the default rule must be the last rule");
            if (s->n_match)
                RULE_ERR(p, s->match[0].line, "the default rule must not have match keys");
            if (s->policy != RULES_POLICY_STOP)
                RULE_ERR(p, 0, "the default rule must have match_policy stop, not %s",
                         policy_name(s->policy));
            if (s->source != RULES_SOURCE_ANY)
                RULE_ERR(p, 0, "the default rule must have source any");
        }
        if (s->policy != RULES_POLICY_STOP && ++n_side == RULES_MATCH_MAX)
            RULE_ERR(p, 0, "more than %d canary/continue rules: a request may touch at most "
                     "%d rules", RULES_MATCH_MAX - 1, RULES_MATCH_MAX);
    }

    /* Reachability first: a rule hidden behind an earlier one is reported as
     * such, not also as a duplicate of it. */
    r = build_index(b);
    if (r < 0)
        goto out;
    for (size_t i = 0; i < b->n; i++) {
        size_t a;

        if (b->r[i].bad)
            continue;
        a = find_shadow(b, i);
        if (a != SIZE_MAX) {
            diag_set(d, b->r[i].s->file, b->r[i].s->line, "rule is unreachable: every "
                     "request it matches is decided earlier by the rule at %s:%u",
                     b->r[a].s->file, b->r[a].s->line);
            b->r[i].shadowed = true;
        }
    }

    r = map_init(&ids, b->n);
    if (r >= 0)
        r = map_init(&strs, b->n);
    if (r >= 0)
        r = map_init(&labels, b->n);
    if (r < 0)
        goto out;
    for (size_t i = 0; i < b->n; i++) {
        struct pr *p = &b->r[i];
        const struct rules_rule_spec *s = p->s;
        struct map_ent *e;
        size_t len;

        if (s->label && label_ok(s->label)) {
            len = strlen(s->label);
            e = map_get(&labels, hash_siphash(zero_key, s->label, len), s->label, len, NULL, 0,
                        true);
            if (e->aux != UINT32_MAX) {
                RULE_ERR(p, 0, "label '%s' repeats the label of the rule at %s:%u", s->label,
                         b->r[e->aux].s->file, b->r[e->aux].s->line);
                continue;
            }
            e->aux = (uint32_t)i;
        }
        if (p->bad || p->shadowed)
            continue;
        e = map_get(&ids, p->id, "", 0, NULL, 0, true);
        if (e->aux != UINT32_MAX) {
            RULE_ERR(p, 0, "rule has the same id as the rule at %s:%u (same match, actor and "
                     "algorithm): give one of them a label", b->r[e->aux].s->file,
                     b->r[e->aux].s->line);
            continue;
        }
        e->aux = (uint32_t)i;
        len = strlen(p->id_str);
        e = map_get(&strs, hash_siphash(zero_key, p->id_str, len), p->id_str, len, NULL, 0,
                    true);
        if (e->aux != UINT32_MAX) {
            RULE_ERR(p, 0, "rule id '%s' is also the id of the rule at %s:%u", p->id_str,
                     b->r[e->aux].s->file, b->r[e->aux].s->line);
            continue;
        }
        e->aux = (uint32_t)i;
    }
    r = 0;
out:
    map_free(&ids);
    map_free(&strs);
    map_free(&labels);
    return r;
}

/*
 * Prepares and checks @spec.  Returns -ENOMEM, else 0 with @d holding the
 * problems found (d->n + d->dropped grew when there were any).
 */
static int build_prepare(const struct rules_spec *spec, struct build *b, struct diag *d)
{
    int r;

    memset(b, 0, sizeof(*b));
    b->spec = spec;
    b->r = calloc(spec->n + 1, sizeof(*b->r));
    if (!b->r)
        return -ENOMEM;
    b->n = spec->n;
    for (size_t i = 0; i < b->n; i++) {
        struct pr *p = &b->r[i];

        p->s = &spec->rules[i];
        p->store = p->s->store_set ? p->s->store : spec->default_store;
        r = prep_match(p, d);
        if (r < 0)
            return r;
        prep_settings(p, d);
        r = rule_id(p);
        if (r < 0)
            return r;
    }
    return check_list(b, d);
}

int rules_validate(const struct rules_spec *spec, struct diag *reterr)
{
    struct diag local;
    struct diag *d = reterr ? reterr : &local;
    struct build b;
    size_t before;
    int r;

    if (!reterr)
        diag_init(&local);
    before = d->n + d->dropped;
    r = build_prepare(spec, &b, d);
    if (r >= 0 && d->n + d->dropped != before)
        r = -EINVAL;
    build_free(&b);
    return r;
}

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

static int str_cmp_pool(const char *pool, const struct blob_str *a, const struct blob_str *b)
{
    return bytes_cmp(pool + a->off, a->len, pool + b->off, b->len);
}

static uint64_t align_up(uint64_t v)
{
    return (v + BLOB_ALIGN - 1) & ~(uint64_t)(BLOB_ALIGN - 1);
}

static int rules_attach(uint8_t *blob, size_t len, struct rules **ret);

/* Lays out and fills the blob from a validated build. */
static int emit(const struct build *b, uint64_t generation, struct rules **ret)
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
        o->line = s->line;
        o->prefix4 = (int16_t)s->prefix4;
        o->prefix6 = (int16_t)s->prefix6;
        o->policy = (uint8_t)s->policy;
        o->algo = (uint8_t)s->algo;
        o->source = (uint8_t)s->source;
        o->flags = (uint8_t)((s->strict ? FLAG_STRICT : 0) | (s->fast_path ? FLAG_FAST_PATH : 0) |
                             (s->is_default ? FLAG_DEFAULT : 0) |
                             (s->no_reset ? FLAG_NO_RESET : 0));
        o->store = (uint8_t)p->store;
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
    struct diag local;
    struct diag *d = reterr ? reterr : &local;
    struct build b;
    size_t before;
    int r;

    if (!reterr)
        diag_init(&local);
    before = d->n + d->dropped;
    r = build_prepare(spec, &b, d);
    if (r < 0)
        goto out;
    if (d->n + d->dropped != before) {
        r = -EINVAL;
        goto out;
    }
    r = emit(&b, generation, ret);
out:
    build_free(&b);
    return r;
}

/* ---- loading and checking a blob ---------------------------------------- */

static bool section_ok(uint64_t total, uint64_t off, uint64_t count, uint64_t size)
{
    return off % BLOB_ALIGN == 0 && off <= total && count <= (total - off) / size;
}

static bool str_ok(const struct blob_hdr *h, const char *pool, const struct blob_str *s)
{
    return s->off < h->pool_size && s->len < h->pool_size - s->off && pool[s->off + s->len] == 0;
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
        if (r->policy > RULES_POLICY_CONTINUE || r->algo > RULES_ALGO_SLIDING_WINDOW ||
            r->source > RULES_SOURCE_PRIVILEGED || r->store > RULES_STORE_STRICT ||
            (r->flags & ~(FLAG_STRICT | FLAG_FAST_PATH | FLAG_DEFAULT | FLAG_NO_RESET)))
            return false;
        if (r->prefix4 < -1 || r->prefix4 > 32 || r->prefix6 < -1 || r->prefix6 > 128)
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
            m->kind > KIND_GLOB)
            return false;
        if (m->kind == KIND_GLOB && glob_parse(rs->pool + m->value.off, m->value.len) < 0)
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
static int rules_attach(uint8_t *blob, size_t len, struct rules **ret)
{
    const struct blob_hdr *h = (const struct blob_hdr *)blob;
    struct rules *rs;

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
        !section_ok(len, h->pool_off, h->pool_size, 1))
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
    if (!blob_ok(rs)) {
        free(rs);
        return -EBADMSG;
    }
    for (uint32_t i = 0; i < h->n_rule; i++) {
        const struct blob_rule *r = &rs->rule[i];

        if (r->store != RULES_STORE_LOCAL && r->credit_limit > 0 &&
            (r->algo == RULES_ALGO_TOKEN_BUCKET || r->reset_seconds > 0))
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

    if (idx >= rules->hdr->n_rule)
        return -ENOENT;
    r = &rules->rule[idx];
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
    return 0;
}

/* ---- matching ------------------------------------------------------------ */

/* Binary search of the request's sorted pairs. */
static const struct proto_kv *req_find(const struct rules_req *req, const char *key, size_t len)
{
    size_t lo = 0, hi = req->n_kv;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = bytes_cmp(req->kv[mid].key, req->kv[mid].key_len, key, len);

        if (c == 0)
            return &req->kv[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static bool match_one(const struct rules *rs, const struct blob_match *m,
                      const struct proto_kv *kv)
{
    const char *v = rs->pool + m->value.off;

    if (m->kind == KIND_PRESENT)
        return true;
    if (m->kind == KIND_EXACT)
        return bytes_eq(kv->value, kv->value_len, v, m->value.len);
    return glob_match(v, m->value.len, kv->value, kv->value_len);
}

static bool rule_test(const struct rules *rs, uint32_t idx, const struct rules_req *req)
{
    const struct blob_rule *r = &rs->rule[idx];

    if (r->source == RULES_SOURCE_PRIVILEGED && !req->privileged)
        return false;
    for (uint32_t i = 0; i < r->n_match; i++) {
        const struct blob_match *m = &rs->match[r->match_first + i];
        const struct proto_kv *kv = req_find(req, rs->pool + m->key.off, m->key.len);

        if (!kv || !match_one(rs, m, kv))
            return false;
    }
    return true;
}

static bool is_anchor_key(const struct rules *rs, const char *key, size_t len)
{
    size_t lo = 0, hi = rs->hdr->n_akey;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct blob_str *a = &rs->akey[mid];
        int c = bytes_cmp(rs->pool + a->off, a->len, key, len);

        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static const struct blob_bucket *index_find(const struct rules *rs, const struct proto_kv *kv)
{
    uint32_t n = rs->hdr->n_bucket;
    uint64_t h;

    if (!n || !pair_indexable(kv->key_len, kv->value_len) ||
        !is_anchor_key(rs, kv->key, kv->key_len))
        return NULL;
    h = pair_hash(kv->key, kv->key_len, kv->value, kv->value_len);
    for (uint32_t i = 0, k = (uint32_t)h & (n - 1); i < n; i++, k = (k + 1) & (n - 1)) {
        const struct blob_bucket *bk = &rs->bucket[k];

        if (!bk->list_n)
            return NULL;
        if (bk->hash == h && bytes_eq(rs->pool + bk->key.off, bk->key.len, kv->key, kv->key_len) &&
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

size_t rules_match(const struct rules *rules, const struct rules_req *req,
                   uint32_t ret_idx[RULES_MATCH_MAX])
{
    struct cand {
        const uint32_t *p, *end;
    } c[PROTO_KV_MAX + 1];
    size_t n_c = 0, n = 0;
    uint32_t next = 0;              /* lowest rule index not yet considered */

    if (req->n_kv > PROTO_KV_MAX) {
        /* Not a request proto_parse() can produce: scan everything, in order. */
        for (uint32_t i = 0; i < rules->hdr->n_rule; i++) {
            if (rule_test(rules, i, req) && take(rules, i, ret_idx, &n))
                break;
        }
        return n;
    }
    for (unsigned i = 0; i < req->n_kv; i++) {
        const struct blob_bucket *bk = index_find(rules, &req->kv[i]);

        if (bk) {
            c[n_c].p = rules->list + bk->list_first;
            c[n_c].end = c[n_c].p + bk->list_n;
            n_c++;
        }
    }
    c[n_c].p = rules->scan;
    c[n_c].end = rules->scan + rules->hdr->n_scan;
    n_c++;

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
        if (rule_test(rules, idx, req) && take(rules, idx, ret_idx, &n))
            break;
    }
    return n;
}

/* ---- text output: actor, describe, why_not ------------------------------ */

struct out {
    char *buf;
    size_t size, len;
    bool overflow;
};

static void out_put(struct out *o, const char *s, size_t len)
{
    if (o->overflow || o->size - o->len <= len) {
        o->overflow = true;
        return;
    }
    memcpy(o->buf + o->len, s, len);
    o->len += len;
}

static void out_ch(struct out *o, char ch)
{
    out_put(o, &ch, 1);
}

static int out_end(struct out *o)
{
    if (o->overflow || o->len >= o->size) {
        if (o->size)
            o->buf[0] = '\0';
        return -ENOBUFS;
    }
    o->buf[o->len] = '\0';
    return (int)o->len;
}

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r';
}

/*
 * A protocol string (docs/protocol.md): bare when it matches [^"=\s]+, else
 * quoted, with '"' and newline (which no protocol string can carry) as '_'.
 * With @escape, '*' and '\' are written as "\*" and "\\" (an exact value
 * shown in config notation).
 */
static void out_value(struct out *o, const char *s, size_t len, bool escape)
{
    bool quote = len == 0;

    for (size_t i = 0; i < len && !quote; i++)
        quote = s[i] == '"' || s[i] == '=' || is_space(s[i]);
    if (quote)
        out_ch(o, '"');
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];

        if (ch == '"' || ch == '\n')
            ch = '_';
        if (escape && (ch == '*' || ch == '\\'))
            out_ch(o, '\\');
        out_ch(o, ch);
    }
    if (quote)
        out_ch(o, '"');
}

static void out_pattern(struct out *o, const struct rules *rs, const struct blob_match *m)
{
    out_value(o, rs->pool + m->value.off, m->value.len, m->kind == KIND_EXACT);
}

/*
 * Writes @v masked to @prefix bits as "addr/len" into @dst (>= 64 bytes) and
 * returns its length, or 0 when @v is not an address of that family.
 */
static size_t mask_ip(const char *v, size_t len, int af, int prefix, char *dst)
{
    unsigned char addr[sizeof(struct in6_addr)];
    char text[INET6_ADDRSTRLEN + 1];
    size_t n_bytes = af == AF_INET ? 4 : 16;
    int n;

    if (prefix < 0 || len >= sizeof(text))
        return 0;
    memcpy(text, v, len);
    text[len] = '\0';
    if (inet_pton(af, text, addr) != 1)
        return 0;
    for (size_t i = 0; i < n_bytes; i++) {
        int bits = prefix - (int)i * 8;

        if (bits <= 0)
            addr[i] = 0;
        else if (bits < 8)
            addr[i] &= (unsigned char)(0xff << (8 - bits));
    }
    if (!inet_ntop(af, addr, text, sizeof(text)))
        return 0;
    n = snprintf(dst, 64, "%s/%d", text, prefix);
    return n > 0 && n < 64 ? (size_t)n : 0;
}

int rules_actor_from(const struct rules *rules, uint32_t idx, const struct proto_kv *const *vals,
                     char *buf, size_t size)
{
    struct out o = { buf, size, 0, false };
    const struct blob_rule *r;

    if (idx >= rules->hdr->n_rule)
        return -ENOENT;
    r = &rules->rule[idx];
    for (uint32_t i = 0; i < r->n_actor; i++) {
        const struct proto_kv *kv = vals[i];
        const char *v = kv ? kv->value : "";
        size_t len = kv ? kv->value_len : 0;
        char masked[64];
        size_t m;

        m = mask_ip(v, len, AF_INET, r->prefix4, masked);
        if (!m)
            m = mask_ip(v, len, AF_INET6, r->prefix6, masked);
        if (m) {
            v = masked;
            len = m;
        }
        if (r->n_actor == 1) {
            out_put(&o, v, len);
            break;
        }
        if (i)
            out_ch(&o, ',');
        for (size_t j = 0; j < len; j++) {
            if (v[j] == '%')
                out_put(&o, "%25", 3);
            else if (v[j] == ',')
                out_put(&o, "%2C", 3);
            else
                out_ch(&o, v[j]);
        }
    }
    return out_end(&o);
}

int rules_actor_ref(const struct rules *rules, uint32_t idx, const struct proto_kv *const *vals,
                    char *buf, size_t size, const char **ret_actor)
{
    const struct blob_rule *r;

    if (idx >= rules->hdr->n_rule)
        return -ENOENT;
    r = &rules->rule[idx];
    /* One key, no prefix: the actor is the value as it is. */
    if (r->n_actor <= 1 && r->prefix4 < 0 && r->prefix6 < 0) {
        const struct proto_kv *kv = r->n_actor ? vals[0] : NULL;

        if (kv && (size_t)kv->value_len >= size)
            return -ENOBUFS;
        *ret_actor = kv ? kv->value : "";
        return kv ? kv->value_len : 0;
    }
    *ret_actor = buf;
    return rules_actor_from(rules, idx, vals, buf, size);
}

int rules_actor(const struct rules *rules, uint32_t idx, const struct rules_req *req,
                char *buf, size_t size)
{
    const struct proto_kv *vals[RULES_ACTOR_KEYS_MAX];
    const struct blob_rule *r;

    if (idx >= rules->hdr->n_rule)
        return -ENOENT;
    r = &rules->rule[idx];
    if (r->n_actor > RULES_ACTOR_KEYS_MAX)
        return -EINVAL;
    for (uint32_t i = 0; i < r->n_actor; i++) {
        const struct blob_str *k = &rules->actor[r->actor_first + i];

        vals[i] = req_find(req, rules->pool + k->off, k->len);
    }
    return rules_actor_from(rules, idx, vals, buf, size);
}

int rules_actor_key(const struct rules *rules, uint32_t idx, unsigned i, const char **ret_key,
                    size_t *ret_len)
{
    const struct blob_rule *r;
    const struct blob_str *k;

    if (idx >= rules->hdr->n_rule || i >= rules->rule[idx].n_actor)
        return -ENOENT;
    r = &rules->rule[idx];
    k = &rules->actor[r->actor_first + i];
    *ret_key = rules->pool + k->off;
    *ret_len = k->len;
    return 0;
}

bool rules_value_matters(const struct rules *rules, const char *key, size_t len)
{
    for (uint32_t i = 0; i < rules->hdr->n_match; i++) {
        const struct blob_match *m = &rules->match[i];

        if (m->kind != KIND_PRESENT && bytes_eq(rules->pool + m->key.off, m->key.len, key, len))
            return true;
    }
    return false;
}

int rules_actor_keys(const struct rules *rules, uint32_t idx, char *buf, size_t size)
{
    struct out o = { buf, size, 0, false };
    const struct blob_rule *r;

    if (idx >= rules->hdr->n_rule)
        return -ENOENT;
    r = &rules->rule[idx];
    for (uint32_t i = 0; i < r->n_actor; i++) {
        const struct blob_str *k = &rules->actor[r->actor_first + i];

        if (i)
            out_ch(&o, ',');
        out_put(&o, rules->pool + k->off, k->len);
    }
    return out_end(&o);
}

int rules_describe(const struct rules *rules, uint32_t idx, char *buf, size_t size)
{
    struct out o = { buf, size, 0, false };
    const struct blob_rule *r;

    if (idx >= rules->hdr->n_rule)
        return -ENOENT;
    r = &rules->rule[idx];
    if (r->n_match == 0 && (r->flags & FLAG_DEFAULT))
        out_put(&o, "default", 7);
    for (uint32_t i = 0; i < r->n_match; i++) {
        const struct blob_match *m = &rules->match[r->match_first + i];

        if (i)
            out_ch(&o, ' ');
        out_value(&o, rules->pool + m->key.off, m->key.len, false);
        out_ch(&o, '=');
        out_pattern(&o, rules, m);
    }
    return out_end(&o);
}

int rules_why_not(const struct rules *rules, uint32_t idx, const struct rules_req *req,
                  char *buf, size_t size)
{
    struct out o = { buf, size, 0, false };
    const struct blob_rule *r;

    if (idx >= rules->hdr->n_rule)
        return -ENOENT;
    r = &rules->rule[idx];
    if (r->source == RULES_SOURCE_PRIVILEGED && !req->privileged) {
        out_put(&o, "privileged only", 15);
        return out_end(&o);
    }
    for (uint32_t i = 0; i < r->n_match; i++) {
        const struct blob_match *m = &rules->match[r->match_first + i];
        const char *key = rules->pool + m->key.off;
        const struct proto_kv *kv = req_find(req, key, m->key.len);

        if (!kv) {
            out_put(&o, "missing key ", 12);
            out_value(&o, key, m->key.len, false);
            break;
        }
        if (!match_one(rules, m, kv)) {
            out_value(&o, key, m->key.len, false);
            out_ch(&o, '=');
            out_value(&o, kv->value, kv->value_len, false);
            out_put(&o, " does not match ", 16);
            out_pattern(&o, rules, m);
            break;
        }
    }
    return out_end(&o);
}
