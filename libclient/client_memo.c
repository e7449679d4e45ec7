/* SPDX-License-Identifier: MIT */
/*
 * client_memo: the fast path's memo of request shapes (client_memo.h, docs/client.md
 * "Fast path").  A request's rule path depends only on its shape: its keys in
 * order, the values of the keys some rule matches by value, and the caller's
 * privilege (fixed per handle).  The first time a shape is decided in-process
 * (client_fast_decide(): normalise, sort, match) its path is remembered here
 * together with where each rule's actor values sit among the caller's pairs.
 * The next request of that shape is decided from the caller's pairs as given:
 * each key and matched value is compared byte for byte with the remembered
 * one (which passed validation when it was learned), every other value is
 * checked for bytes the protocol cannot carry and the line length is summed,
 * so the memo accepts exactly what the long way accepts.  Anything unusual
 * (a key never seen, a repeated key, more than MEMO_PAIRS pairs, a value the
 * protocol cannot carry) simply misses, and the long way decides and reports.
 *
 * Two tables, both forgotten when the rules generation changes: key names
 * (open addressing, never deleted, so their indexes are stable shape
 * letters) and shapes (two possible entries each: a third shape competing
 * for both forgets one).  Each key is compared first with the one last seen
 * at its position; the shape decided last is then tried first, its values
 * compared with the request's directly (shape_values()); only another shape
 * pays for hashing its matched values to find its entry (shape_entry()).
 * No allocation after the first learn, no system call, no locking (one handle
 * per thread, divvy.h).
 */
#include <stdlib.h>
#include <string.h>

#include "client_memo.h"
#include "clock.h"
#include "hash.h"

#define MEMO_KEYS       64      /* key names per handle (a power of 2) */
#define MEMO_KEYS_USED  48      /* at most this many in use: probes stay short */
#define MEMO_KEY_LEN    64      /* longer key names are not remembered */
#define MEMO_SHAPES     512     /* shapes per handle (a power of 2), two entries to choose from */
#define MEMO_PAIRS      8       /* pairs of a remembered request */
#define MEMO_PATH       8       /* rules on a remembered path */
#define MEMO_VALS       128     /* bytes of matched values of one shape */
#define MEMO_SEED       0x646976767921ULL

struct memo_key {
    uint64_t hash;              /* hash_fast(MEMO_SEED, name) */
    uint16_t len;               /* 0: an empty entry */
    uint16_t wire;              /* bytes on the wire (client_wire_scan()) */
    bool by_value;              /* rules_value_matters(): the value is part of the shape */
    char name[MEMO_KEY_LEN + 1];    /* NUL-terminated */
};

struct memo_shape {
    uint64_t hash;
    uint8_t n_kv;               /* 0: an empty entry */
    uint8_t n_path;
    bool has_lease;             /* a lease rule on the path: client_fast_path_ok() per op */
    uint8_t kid[MEMO_PAIRS];    /* key of each pair: an index into memo.key */
    uint16_t vlen[MEMO_PAIRS];  /* length of each by_value pair's value */
    uint16_t fixed_wire;        /* wire bytes of the by_value pairs, ' ' and '=' included */
    uint32_t path[MEMO_PATH];   /* rules_match()'s answer */
    uint8_t n_actor[MEMO_PATH];
    int8_t actor[MEMO_PATH][RULES_ACTOR_KEYS_MAX]; /* pair holding each actor key, or -1 */
    char vals[MEMO_VALS];       /* the by_value values, in pair order, each NUL-terminated */
};

struct client_memo {
    uint64_t loads;             /* client_fast.loads of the rules the tables describe */
    unsigned n_keys;
    const struct memo_shape *last;  /* the shape decided last, tried first; NULL: none */
    uint8_t guess[MEMO_PAIRS];  /* 1 + the key last seen at each position, 0: none */
    struct memo_key key[MEMO_KEYS];
    struct memo_shape shape[MEMO_SHAPES];
};

_Static_assert(MEMO_KEYS <= 256, "key indexes are uint8_t");
_Static_assert(MEMO_PAIRS <= 127 && MEMO_PATH <= 255, "pair and path counts fit their fields");
_Static_assert(MEMO_VALS + MEMO_PAIRS * (2 + MEMO_KEY_LEN + 2 + 2) < UINT16_MAX,
               "fixed_wire cannot overflow");

static uint64_t mix(uint64_t h, uint64_t x)
{
    h ^= x;
    h *= 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 32);
}

/* A shape's two possible entries: independent bits of its hash, so that
 * three shapes rarely compete for the same two entries. */
static unsigned way_of(uint64_t sh, int second)
{
    unsigned a = (unsigned)sh & (MEMO_SHAPES - 1), b = (unsigned)(sh >> 40) & (MEMO_SHAPES - 1);

    if (!second)
        return a;
    return b != a ? b : a ^ 1;
}

/* A cheap hash of matched values: the shape's hash is checked against the
 * remembered values byte for byte anyway. */
static inline uint64_t memo_hash(uint64_t h, const char *s, size_t len)
{
    uint64_t w;

    for (; len >= 8; s += 8, len -= 8) {
        memcpy(&w, s, 8);
        h = mix(h, w);
    }
    /* The last 1-7 bytes without reading past them: two overlapping 4-byte
     * loads, or the first, middle and last byte. */
    w = (uint64_t)len << 56;
    if (len >= 4) {
        uint32_t a, b;

        memcpy(&a, s, 4);
        memcpy(&b, s + len - 4, 4);
        w |= (uint64_t)a << 24 ^ b;
    } else if (len) {
        w |= (uint64_t)(unsigned char)s[0] << 16 | (uint64_t)(unsigned char)s[len / 2] << 8 |
             (unsigned char)s[len - 1];
    }
    return mix(h, w);
}

/* One pair's part of a shape's hash: its key, and its value when some rule
 * matches that key by value.  The one definition client_memo_decide() and
 * client_memo_learn() both use. */
static uint64_t shape_step(uint64_t sh, int key, bool by_value, const char *v, size_t vl)
{
    sh = mix(sh, (uint64_t)key + 1);
    return by_value ? memo_hash(sh, v, vl) : sh;
}

/* Whether NUL-terminated @s is exactly NUL-terminated @want.  strcmp()
 * reads @s only up to its first byte that differs, or its end; glibc's
 * compares a short string in a few vector instructions. */
static inline bool str_is(const char *s, const char *want)
{
    return strcmp(s, want) == 0;
}

static int key_find(const struct client_memo *m, const char *k, size_t len, uint64_t hk,
                    unsigned *ret_empty)
{
    for (unsigned i = 0, j = (unsigned)hk & (MEMO_KEYS - 1); i < MEMO_KEYS;
         i++, j = (j + 1) & (MEMO_KEYS - 1)) {
        const struct memo_key *e = &m->key[j];

        if (!e->len) {
            if (ret_empty)
                *ret_empty = j;
            return -1;
        }
        if (e->hash == hk && e->len == len && memcmp(e->name, k, len) == 0)
            return (int)j;
    }
    return -1;
}

/* The index of key @k, remembered now if new; -1 when it cannot be. */
static int key_add(struct client_memo *m, const struct rules *rules, const char *k, size_t len)
{
    uint64_t hk = hash_fast(MEMO_SEED, k, len);
    unsigned empty = MEMO_KEYS;
    struct memo_key *e;
    size_t scanned;
    int wire, j = key_find(m, k, len, hk, &empty);

    if (j >= 0)
        return j;
    wire = client_wire_scan(k, &scanned);
    if (empty == MEMO_KEYS || m->n_keys >= MEMO_KEYS_USED || wire < 0)
        return -1;
    e = &m->key[empty];
    e->hash = hk;
    e->len = (uint16_t)len;
    e->wire = (uint16_t)wire;
    e->by_value = rules_value_matters(rules, k, len);
    memcpy(e->name, k, len);
    e->name[len] = '\0';
    m->n_keys++;
    return (int)empty;
}

/*
 * The key index of each pair of @kv into @kid: each key is compared first
 * with the key last seen at its position, else looked up.  -1 when a key or
 * value is NULL or a key is not remembered.
 */
static int shape_keys(struct client_memo *m, const struct divvy_kv *kv, size_t n_kv,
                      uint8_t *kid)
{
    for (size_t i = 0; i < n_kv; i++) {
        const char *k = kv[i].key;
        unsigned g = m->guess[i];
        size_t kl;
        int j;

        if (!k || !kv[i].value)
            return -1;
        if (g && str_is(k, m->key[g - 1].name)) {
            kid[i] = (uint8_t)(g - 1);
            continue;
        }
        kl = strnlen(k, MEMO_KEY_LEN + 1);
        if (kl == 0 || kl > MEMO_KEY_LEN)
            return -1;
        j = key_find(m, k, kl, hash_fast(MEMO_SEED, k, kl), NULL);
        if (j < 0)
            return -1;
        m->guess[i] = (uint8_t)(j + 1);
        kid[i] = (uint8_t)j;
    }
    return 0;
}

/*
 * Whether @kv, whose keys are @kid (shape_keys()), is shape @e: the same keys
 * and, for the keys a rule matches by value, the same values (the remembered
 * ones passed validation when they were learned); every other value is
 * checked for bytes the protocol cannot carry.  Returns the wire bytes of
 * the pairs (' ' and '=' included), or -1 when @kv is not @e; fills @pk with
 * the pairs as given.
 */
static long shape_values(const struct client_memo *m, const struct memo_shape *e,
                         const struct divvy_kv *kv, size_t n_kv, const uint8_t *kid,
                         struct proto_kv *pk)
{
    const char *val = e->vals;
    size_t wire = e->fixed_wire;

    if (e->n_kv != n_kv)
        return -1;
    for (size_t i = 0; i < n_kv; i++) {
        const struct memo_key *mk = &m->key[kid[i]];
        const char *v = kv[i].value;
        size_t vl;

        if (e->kid[i] != kid[i])
            return -1;
        if (mk->by_value) {
            if (!str_is(v, val))
                return -1;
            vl = e->vlen[i];
            val += vl + 1;
        } else {
            int w = client_wire_scan(v, &vl);

            if (w < 0)
                return -1;
            wire += 2 + mk->wire + (size_t)w;
        }
        pk[i] = (struct proto_kv){ .key = kv[i].key, .value = v, .key_len = mk->len,
                                   .value_len = (uint16_t)vl };
    }
    return (long)wire;
}

/* The entry that would hold the shape of @kv, whose keys are @kid: found by
 * the hash of its shape (shape_step()), or NULL; shape_values() checks it. */
static const struct memo_shape *shape_entry(const struct client_memo *m,
                                            const struct divvy_kv *kv, size_t n_kv,
                                            const uint8_t *kid)
{
    const struct memo_shape *e;
    uint64_t sh = n_kv;

    for (size_t i = 0; i < n_kv; i++) {
        bool by_value = m->key[kid[i]].by_value;
        size_t vl = 0;

        if (by_value) {
            vl = strnlen(kv[i].value, PROTO_LINE_MAX);
            if (vl >= PROTO_LINE_MAX)
                return NULL;
        }
        sh = shape_step(sh, kid[i], by_value, kv[i].value, vl);
    }
    /* Two choices of entry per shape (way_of()). */
    e = &m->shape[way_of(sh, 0)];
    if (e->hash != sh)
        e = &m->shape[way_of(sh, 1)];
    return e->hash == sh ? e : NULL;
}

/*
 * The remembered shape of @kv, or NULL: the one decided last when @kv is
 * that shape (no hash at all), else the entry its hash names.  @pk as for
 * shape_values(); *@ret_wire: the wire bytes of the pairs.
 */
static const struct memo_shape *shape_find(struct client_memo *m, const struct divvy_kv *kv,
                                           size_t n_kv, struct proto_kv *pk, size_t *ret_wire)
{
    const struct memo_shape *e = m->last;
    uint8_t kid[MEMO_PAIRS] = { 0 };
    long wire = -1;

    if (shape_keys(m, kv, n_kv, kid) < 0)
        return NULL;
    if (e)
        wire = shape_values(m, e, kv, n_kv, kid, pk);
    if (wire < 0) {
        e = shape_entry(m, kv, n_kv, kid);
        if (!e)
            return NULL;
        wire = shape_values(m, e, kv, n_kv, kid, pk);
        if (wire < 0)
            return NULL;
    }
    *ret_wire = (size_t)wire;
    return e;
}

/* Where each rule on @e's path finds its actor values among @pk. */
static void actor_pairs(const struct memo_shape *e, const struct proto_kv *pk,
                        const struct proto_kv **actor_kv)
{
    for (size_t i = 0; i < e->n_path; i++) {
        for (unsigned j = 0; j < e->n_actor[i]; j++) {
            int p = e->actor[i][j];

            actor_kv[i * RULES_ACTOR_KEYS_MAX + j] = p < 0 ? NULL : &pk[p];
        }
    }
}

/*
 * The remembered shape of @kv when the request is valid as the protocol
 * line "@verb [@wire_amount] pairs" (exactly what client_req_prepare() and
 * the line length check accept), else NULL; @pk as for shape_values().
 */
static const struct memo_shape *shape_check(struct client_memo *m,
                                            const struct divvy_kv *kv, size_t n_kv,
                                            const char *verb, uint64_t wire_amount,
                                            struct proto_kv *pk)
{
    size_t pairs_len;
    const struct memo_shape *e = shape_find(m, kv, n_kv, pk, &pairs_len);

    if (!e)
        return NULL;
    /* "TAKE 1000000000" and the newline are far less than 64 bytes. */
    if (pairs_len > PROTO_LINE_MAX - 64 &&
        client_line_len(verb, wire_amount, pairs_len) > PROTO_LINE_MAX)
        return NULL;
    return e;
}

int client_memo_decide(struct client_memo *m, struct client_fast *f, const struct divvy_kv *kv,
                       size_t n_kv, const char *verb, uint64_t wire_amount, enum table_op op,
                       uint64_t amount, struct divvy_result *res)
{
    const struct proto_kv *actor_kv[MEMO_PATH * RULES_ACTOR_KEYS_MAX];
    struct proto_kv pk[MEMO_PAIRS];
    const struct memo_shape *e;
    uint64_t now;
    const char *why;

    if (!m || !kv || n_kv == 0 || n_kv > MEMO_PAIRS)
        return 0;
    now = clock_coarse_ms();
    if (!client_fast_ready(f, now, &why) || m->loads != f->loads)
        return 0;
    e = shape_check(m, kv, n_kv, verb, wire_amount, pk);
    if (!e)
        return 0;
    m->last = e;
    actor_pairs(e, pk, actor_kv);
    if (e->has_lease && !client_fast_path_ok(f, e->path, e->n_path, op))
        return 0;
    return client_fast_run(f, e->path, e->n_path, NULL, actor_kv, pk, n_kv, op, amount, now,
                           res, &why);
}

bool client_memo_check(struct client_memo *m, struct client_fast *f, const struct divvy_kv *kv,
                       size_t n_kv, const char *verb, uint64_t wire_amount, bool prefetch)
{
    const struct proto_kv *actor_kv[MEMO_PATH * RULES_ACTOR_KEYS_MAX];
    struct proto_kv pk[MEMO_PAIRS];
    const struct memo_shape *e;

    if (!m || m->loads != f->loads || !kv || n_kv == 0 || n_kv > MEMO_PAIRS)
        return false;
    e = shape_check(m, kv, n_kv, verb, wire_amount, pk);
    if (!e)
        return false;
    if (prefetch) {
        actor_pairs(e, pk, actor_kv);
        client_fast_prefetch(f, e->path, e->n_path, actor_kv);
    }
    return true;
}

void client_memo_prefetch(struct client_memo *m, struct client_fast *f,
                          const struct divvy_kv *kv, size_t n_kv)
{
    const struct proto_kv *actor_kv[MEMO_PATH * RULES_ACTOR_KEYS_MAX];
    struct proto_kv pk[MEMO_PAIRS];
    const struct memo_shape *e;
    size_t wire;

    if (!m || m->loads != f->loads || !kv || n_kv == 0 || n_kv > MEMO_PAIRS)
        return;
    e = shape_find(m, kv, n_kv, pk, &wire);
    if (!e)
        return;
    actor_pairs(e, pk, actor_kv);
    client_fast_prefetch(f, e->path, e->n_path, actor_kv);
}

void client_memo_learn(struct client_memo **mp, const struct client_fast *f,
                       const struct divvy_kv *kv, size_t n_kv, const uint32_t *path,
                       size_t n_path)
{
    struct client_memo *m = *mp;
    size_t klen[MEMO_PAIRS], voff = 0, fixed = 0, n_rules;
    uint64_t sh = n_kv;
    struct memo_shape e, *way;

    if (!f->rules || !kv || n_kv == 0 || n_kv > MEMO_PAIRS || n_path == 0 ||
        n_path > MEMO_PATH)
        return;
    if (!m) {
        m = calloc(1, sizeof(*m));
        if (!m)
            return;
        *mp = m;
        m->loads = f->loads;
    }
    if (m->loads != f->loads) {
        memset(m, 0, sizeof(*m));
        m->loads = f->loads;
    }
    memset(&e, 0, sizeof(e));
    for (size_t i = 0; i < n_kv; i++) {
        const char *k = kv[i].key, *v = kv[i].value;
        size_t vl;
        int w;
        int j;

        if (!k || !v)
            return;
        klen[i] = strnlen(k, MEMO_KEY_LEN + 1);
        if (klen[i] == 0 || klen[i] > MEMO_KEY_LEN)
            return;
        j = key_add(m, f->rules, k, klen[i]);
        if (j < 0)
            return;
        for (size_t p = 0; p < i; p++) {
            if (e.kid[p] == j)
                return;                 /* a repeated key: the last one wins; not here */
        }
        e.kid[i] = (uint8_t)j;
        w = client_wire_scan(v, &vl);
        if (w < 0)
            return;
        sh = shape_step(sh, j, m->key[j].by_value, v, vl);
        if (!m->key[j].by_value)
            continue;
        if (voff + vl + 1 > MEMO_VALS)
            return;
        memcpy(e.vals + voff, v, vl);
        e.vals[voff + vl] = '\0';
        voff += vl + 1;
        e.vlen[i] = (uint16_t)vl;
        fixed += 2 + m->key[j].wire + (size_t)w;
    }
    n_rules = f->n_rules;
    for (size_t i = 0; i < n_path; i++) {
        unsigned n_actor;

        if (path[i] >= n_rules)
            return;
        n_actor = f->rule[path[i]].rr.n_actor;
        if (n_actor > RULES_ACTOR_KEYS_MAX)
            return;
        e.path[i] = path[i];
        e.has_lease |= f->rule[path[i]].lease;
        e.n_actor[i] = (uint8_t)n_actor;
        for (unsigned a = 0; a < n_actor; a++) {
            const char *ak;
            size_t al;

            if (rules_actor_key(f->rules, path[i], a, &ak, &al) < 0)
                return;
            e.actor[i][a] = -1;
            for (size_t p = 0; p < n_kv; p++) {
                if (klen[p] == al && memcmp(kv[p].key, ak, al) == 0)
                    e.actor[i][a] = (int8_t)p;
            }
        }
    }
    e.hash = sh;
    e.n_kv = (uint8_t)n_kv;
    e.n_path = (uint8_t)n_path;
    e.fixed_wire = (uint16_t)fixed;
    /* Into the first of its two entries that is free (or holds it already);
     * else the first one's shape moves to its own other entry if that is
     * free, and otherwise the second entry's shape is forgotten. */
    way = &m->shape[way_of(sh, 0)];
    if (way->n_kv && way->hash != sh) {
        struct memo_shape *second = &m->shape[way_of(sh, 1)];

        if (!second->n_kv || second->hash == sh) {
            way = second;
        } else {
            unsigned alt = way_of(way->hash, 0) == way_of(sh, 0) ? way_of(way->hash, 1)
                                                                  : way_of(way->hash, 0);

            if (!m->shape[alt].n_kv)
                m->shape[alt] = *way;
            else
                way = second;
        }
    }
    *way = e;
    m->last = way;
}

void client_memo_free(struct client_memo *m)
{
    free(m);
}
