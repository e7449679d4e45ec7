/* SPDX-License-Identifier: MIT */
/*
 * rules_private: the compiled form of the rule list, shared by the files of
 * the rules module and included by nothing else (docs/rules.md "Compiled
 * form"): the blob's records, struct rules over a checked blob, and the
 * byte, pair-hash and request helpers the loader, matcher, text output and
 * compiler all use.
 */
#ifndef DIVVY_RULES_PRIVATE_H
#define DIVVY_RULES_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "calendar.h"
#include "cidr.h"
#include "glob.h"
#include "hash.h"
#include "rules.h"

/* ---- blob layout (docs/dev/rules.md "Compiled form") ------------------------ */

#define BLOB_MAGIC      "DIVVYRL1"
#define BLOB_LAYOUT     4
#define BLOB_ALIGN      8
/* Longest "key\0value" the index files; longer pairs cannot arrive in one
 * request line anyway, so their rules go on the scan list. */
#define PAIR_MAX        PROTO_LINE_MAX

enum { KIND_PRESENT = 0, KIND_EXACT = 1, KIND_GLOB = 2 };
/* Native-config match operators (docs/rules.md "Addresses and negation"):
 * the value of a CIDR or NOT_CIDR entry is its prefixes in canonical text,
 * separated by ' '; of a NOT entry its values as configured (globs),
 * separated by NUL.  A reader from before them rejects a blob using them
 * (kind > KIND_GLOB). */
enum { KIND_CIDR = 3, KIND_NOT = 4, KIND_NOT_CIDR = 5 };
/* Values in one cidr / not / not_cidr list (docs/rules.md). */
#define MATCH_VALUES_MAX 1024
enum { FLAG_STRICT = 1, FLAG_FAST_PATH = 2, FLAG_DEFAULT = 4, FLAG_NO_RESET = 8 };
/* A token bucket with refill = "continuous" (common/algo_gcra.h). */
enum { FLAG_CONTINUOUS = 16 };

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
    /* The zone table of calendar windows (docs/dev/rules.md "Zone table"):
     * struct calendar_zone and struct calendar_trans records. */
    uint32_t n_zone, n_ztrans;
    uint64_t zone_off, ztrans_off;
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
    uint8_t when_full;                  /* enum rules_full */
    uint8_t reserved[2];
    int64_t max_debit;                  /* -1: the credit_limit */
    uint32_t zone;                      /* calendar: index into the zone table; UINT32_MAX: UTC */
    uint8_t calendar;                   /* enum calendar_unit; 0: not a calendar window */
    uint8_t reserved2[3];
    /* The window and the refill period in ms, as the algorithms count them
     * (reset_seconds and refill_seconds above: the same, rounded up to whole
     * seconds, for what prints or speaks seconds). */
    int64_t reset_ms;
    int64_t refill_ms;
    struct rules_lock lock;             /* lockout's settings (layout 4); else zero */
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
_Static_assert(sizeof(struct blob_hdr) == 152, "blob_hdr layout");
_Static_assert(offsetof(struct blob_hdr, rule_off) == 64, "blob_hdr layout");
_Static_assert(sizeof(struct blob_rule) == 208, "blob_rule layout");
_Static_assert(sizeof(struct rules_lock) == 64, "rules_lock layout");
_Static_assert(offsetof(struct blob_rule, match_first) == 48, "blob_rule layout");
_Static_assert(offsetof(struct blob_rule, line) == 96, "blob_rule layout");
_Static_assert(offsetof(struct blob_rule, policy) == 104, "blob_rule layout");
_Static_assert(offsetof(struct blob_rule, store) == 108, "blob_rule layout");
_Static_assert(offsetof(struct blob_rule, when_full) == 109, "blob_rule layout");
_Static_assert(offsetof(struct blob_rule, max_debit) == 112, "blob_rule layout");
_Static_assert(sizeof(struct blob_match) == 24, "blob_match layout");
_Static_assert(sizeof(struct blob_bucket) == 32, "blob_bucket layout");

/* One (key, literal prefix) of the glob rules on the blob's scan list
 * (rules_index.c): the rules filed under it and its nearest ancestor. */
struct rules_pfx {
    struct blob_str key;        /* into the pool */
    uint32_t off, len;          /* the prefix: bytes of rules_index.bytes */
    uint32_t parent;            /* longest other prefix of it under the same key, or PFX_NONE */
    uint32_t list_first, list_n;        /* rule indexes in the index's list, ascending */
};

/* The entries filed under one key. */
struct rules_pkey {
    struct blob_str key;        /* into the pool */
    uint32_t first, end;        /* its run of rules_index.pfx */
};

/* Keys of the prefix indexes by length, then bytes: a lookup compares most
 * keys by length alone. */
static inline int pkey_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    if (alen != blen)
        return alen < blen ? -1 : 1;
    return memcmp(a, b, alen);
}

/* The run of @keys (@n, sorted by pkey_cmp()) under key @key, or NULL. */
static inline const struct rules_pkey *pkey_find(const char *pool, const struct rules_pkey *keys,
                                                 uint32_t n, const char *key, size_t len)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = pkey_cmp(pool + keys[mid].key.off, keys[mid].key.len, key, len);

        if (c == 0)
            return &keys[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

#define PFX_NONE        UINT32_MAX
/* Most prefix lists one request may merge; past it rules_match() scans. */
#define PFX_LISTS_MAX   32

/* Built by every reader from the blob where it is loaded (rules_attach()),
 * never stored in it: the blob's scan list split into the rules a glob's
 * literal prefix files and the rest (docs/dev/rules.md "Index and matching"). */
struct rules_index {
    struct rules_pfx *pfx;      /* sorted by key (length, then bytes), then prefix */
    uint32_t n_pfx;
    struct rules_pkey *keys;    /* the distinct keys, in that order */
    uint32_t n_keys;
    uint32_t *list;
    uint32_t *scan;             /* scan-list rules without a prefix, ascending */
    uint32_t n_scan;
    char *bytes;
    bool split;                 /* scan (not the blob's) is the list left to scan */
};

/* A sorted run of candidate rule indexes, as rules_match() merges them. */
struct rules_cand {
    const uint32_t *p, *end;
    const struct blob_bucket *bk;       /* the anchor bucket (or a CIDR key's), or NULL */
};

/* ---- CIDR entries (rules_cidr.c) ----------------------------------------- */

/* The parsed prefixes of one CIDR / NOT_CIDR match entry. */
struct rules_cref {
    uint32_t first, n;          /* in rules_cidrs.p */
};

/* One (key, prefix) of the CIDR index: the rules filed under it. */
struct rules_cidx {
    struct cidr net;
    struct blob_str key;        /* into the pool */
    uint32_t parent;            /* nearest prefix containing it under the same key, or PFX_NONE */
    uint32_t list_first, list_n;        /* rule indexes in rules_cidrs.list, ascending */
};

/* Built by every reader from the blob (rules_attach()): every CIDR and
 * NOT_CIDR entry's prefixes parsed once, and the index of scan-list rules
 * with a cidr entry by prefix (docs/dev/rules.md "CIDR index"). */
struct rules_cidrs {
    struct cidr *p;
    uint32_t n;
    struct rules_cref *of;      /* per match entry; NULL when the blob has no CIDR entry */
    struct rules_cidx *ix;      /* sorted by key (length, then bytes), then cidr_cmp() */
    uint32_t n_ix;
    struct rules_pkey *keys;    /* the distinct keys of ix, in that order */
    uint32_t n_keys;
    uint32_t *list;
    struct blob_bucket *kb;     /* per key: the bucket its lists carry (value.off CIDX_VALUE) */
};

/* No pool string starts here (the pool is < 4 GiB - 1): marks a CIDR key's
 * bucket, whose lists prove the rules' cidr entry of that key. */
#define CIDX_VALUE      UINT32_MAX

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
    const struct calendar_zone *zone;
    const struct calendar_trans *ztrans;
    bool uses_store;            /* some counting rule is lease or strict */
    struct rules_index ix;
    struct rules_cidrs cidr;
};

/* ---- small helpers ------------------------------------------------------- */

static inline int bytes_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);

    if (c)
        return c;
    return alen < blen ? -1 : alen > blen;
}

/* Rule @idx of @rules, or NULL when there is none (the callers' -ENOENT). */
static inline const struct blob_rule *rules_rule_at(const struct rules *rules, uint32_t idx)
{
    return idx < rules->hdr->n_rule ? &rules->rule[idx] : NULL;
}

static inline bool bytes_eq(const char *a, size_t alen, const char *b, size_t blen)
{
    return alen == blen && memcmp(a, b, alen) == 0;
}

/* Hash of a (key, value) pair: the key's hash seeds the value's, and the
 * lengths are mixed in, so ("a", "bc") and ("ab", "c") differ.  Unkeyed
 * (hash_fast): the index is built from the operator's rules only. */
static inline uint64_t pair_hash(const char *k, size_t klen, const char *v, size_t vlen)
{
    return hash_fast(hash_fast(0, k, klen), v, vlen);
}

static inline bool pair_indexable(size_t klen, size_t vlen)
{
    return klen + 1 + vlen <= PAIR_MAX;
}

static inline int str_cmp_pool(const char *pool, const struct blob_str *a,
                               const struct blob_str *b)
{
    return bytes_cmp(pool + a->off, a->len, pool + b->off, b->len);
}

/* Binary search of the request's sorted pairs. */
static inline const struct proto_kv *req_find(const struct rules_req *req, const char *key,
                                              size_t len)
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

/* rules_cidr.c: whether request pair @kv (NULL: the request lacks the key)
 * satisfies the CIDR, NOT or NOT_CIDR entry @m. */
bool rules_cidr_test(const struct rules *rs, const struct blob_match *m,
                     const struct proto_kv *kv);

/* Whether the request pair @kv (not NULL) satisfies @m. */
static inline bool match_one(const struct rules *rs, const struct blob_match *m,
                             const struct proto_kv *kv)
{
    const char *v = rs->pool + m->value.off;

    if (m->kind == KIND_PRESENT)
        return true;
    if (m->kind == KIND_EXACT)
        return bytes_eq(kv->value, kv->value_len, v, m->value.len);
    if (m->kind == KIND_GLOB)
        return glob_match(v, m->value.len, kv->value, kv->value_len);
    return rules_cidr_test(rs, m, kv);
}

/* match_one() where the request may lack the key (@kv NULL): only a
 * negation holds then. */
static inline bool match_entry(const struct rules *rs, const struct blob_match *m,
                               const struct proto_kv *kv)
{
    if (!kv)
        return m->kind >= KIND_NOT && rules_cidr_test(rs, m, NULL);
    return match_one(rs, m, kv);
}

/* rules_index.c: builds @rs->ix from the checked blob (-ENOMEM); frees it
 * (also after a failed build). */
int rules_index_build(struct rules *rs);
void rules_index_free(struct rules *rs);

/* rules_index.c: appends to @out the prefix lists of request pair @kv (the
 * rules whose glob prefix @kv's value starts with); returns how many, or
 * SIZE_MAX when there would be more than @room. */
size_t rules_index_lists(const struct rules *rs, const struct proto_kv *kv,
                         struct rules_cand *out, size_t room);

/* rules_cidr.c: parses every CIDR / NOT_CIDR entry of the checked blob
 * (-EBADMSG: a malformed one, -ENOMEM); builds the CIDR index of the scan
 * list (-ENOMEM); the scan-list rule filed there (it has a CIDR entry);
 * the index lists of request pair @kv as rules_index_lists(); frees it all. */
int rules_cidr_load(struct rules *rs);
int rules_cidr_index(struct rules *rs);
bool rules_cidr_filed(const struct rules *rs, uint32_t idx);
size_t rules_cidr_lists(const struct rules *rs, const struct proto_kv *kv,
                        struct rules_cand *out, size_t room);
void rules_cidr_free(struct rules *rs);

/* rules.c: checks @blob (malloc'd, @len bytes) and wraps it; takes ownership
 * on success.  -EBADMSG, -ENOMEM. */
int rules_attach(uint8_t *blob, size_t len, struct rules **ret);

#endif
