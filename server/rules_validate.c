/* SPDX-License-Identifier: MIT */
/*
 * rules_validate: checking a struct rules_spec (docs/rules.md
 * "Validation"), divvyd and divvyctl only: each rule's match entries and
 * settings, its stable id, the exact-pair index, and the list as a whole
 * (labels and ids unique, one default rule and last, no rule unreachable
 * behind an earlier stop rule).  rules_compile.c emits the blob from what
 * this builds.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules_build.h"
#include "suggest.h"

/* ---- preparation and validation ---------------------------------------- */

static const char *policy_name(enum rules_policy p)
{
    return p == RULES_POLICY_CANARY ? "canary" : p == RULES_POLICY_CONTINUE ? "continue" : "stop";
}

void rules_build_free(struct build *b)
{
    for (size_t i = 0; i < b->n; i++) {
        for (size_t j = 0; j < b->r[i].n_m; j++) {
            free(b->r[i].m[j].val);
            free(b->r[i].m[j].nets);
        }
        free(b->r[i].m);
    }
    free(b->r);
    map_free(&b->pairs);
    free(b->bk_first);
    free(b->bk_n);
    free(b->list);
    free(b->scan);
    free(b->filed);
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
        /* An operator's value: NUL, its kind, its list as compiled (no
         * configured value starts with NUL, so no plain value collides). */
        if (r >= 0 && p->m[i].kind > KIND_GLOB) {
            char tag[2] = { '\0', (char)('0' + p->m[i].kind) };

            r = buf_u32(&b, (uint32_t)(2 + p->m[i].raw_len));
            if (r >= 0)
                r = buf_put(&b, tag, 2);
            if (r >= 0)
                r = buf_put(&b, p->m[i].raw, p->m[i].raw_len);
        } else if (r >= 0) {
            r = buf_lstr(&b, p->m[i].raw, p->m[i].raw_len);
        }
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
    /* A continuous bucket keeps other counters than a stepped one; ids of
     * stepped ones are as ever. */
    if (r >= 0 && s->algo == RULES_ALGO_TOKEN_BUCKET && s->continuous)
        r = buf_put(&b, "continuous", 10);
    /* Privileged rules get their own counters; "any" ids are exactly as above. */
    if (r >= 0 && s->source == RULES_SOURCE_PRIVILEGED)
        r = buf_put(&b, "privileged", 10);
    /* A calendar window counts afresh (its counters mean something else);
     * other rules' ids are exactly as above. */
    if (r >= 0 && s->calendar)
        r = buf_u32(&b, 0x43414c00u | (uint32_t)s->calendar);
    if (r < 0)
        goto out;
    p->id = hash_siphash(zero_key, b.p, b.len);
    snprintf(p->id_str, sizeof(p->id_str), "%016" PRIx64, p->id);
out:
    free(b.p);
    return r;
}

#define RULE_ERR(p, ln, ...) RULES_PREP_ERR(p, d, ln, __VA_ARGS__)

/* Prepares the match entries of one rule and reports problems with them. */
static int prep_match(struct pr *p, struct diag *d)
{
    const struct rules_rule_spec *s = p->s;

    if (s->n_match == 0)
        return 0;
    p->m = calloc(s->n_match, sizeof(*p->m));
    if (!p->m)
        return -ENOMEM;
    for (size_t i = 0; i < s->n_match; i++) {
        struct pm *m;
        int kind;

        if (s->match[i].op != RULES_MATCH_VALUE) {
            int r = rules_ops_add(p, i, d);

            if (r < 0)
                return r;
            continue;
        }
        m = &p->m[p->n_m++];
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
    /* One key may carry several operators (all must hold), never a value
     * beside anything else. */
    for (size_t i = 1; i < p->n_m; i++) {
        if (bytes_eq(p->m[i - 1].key, p->m[i - 1].key_len, p->m[i].key, p->m[i].key_len) &&
            (p->m[i - 1].kind <= KIND_GLOB || p->m[i].kind <= KIND_GLOB))
            RULE_ERR(p, p->m[i].line, "key '%s' repeats in this rule's match", p->m[i].key);
    }
    if (p->n_m > PROTO_KV_MAX)
        RULE_ERR(p, 0, "rule has %zu match keys; a request carries at most %d", p->n_m,
                 PROTO_KV_MAX);
    return 0;
}

void rules_check_limit(struct pr *p, struct diag *d, const char *name, int64_t v, int64_t max)
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
    if (!rules_spec_counts(s))
        return;
    if (p->store == RULES_STORE_LEASE) {
        /* Only an explicit store gets here: rules_spec_store() runs a
         * privileged rule strict under store.mode "lease". */
        if (s->source == RULES_SOURCE_PRIVILEGED)
            RULE_ERR(p, 0, "store \"lease\" cannot be used by a source = \"privileged\" "
                     "(login) rule: credit leased to other hosts counts as used, so users "
                     "would be locked out early; use store = \"strict\"");
        else if (s->algo != RULES_ALGO_WINDOW)
            RULE_ERR(p, 0, "%s \"lease\" needs algorithm window (give this rule store = "
                     "\"strict\" or \"local\")", from);
        else if (s->credit_limit > RULES_LEASE_LIMIT_MAX)
            RULE_ERR(p, 0, "credit_limit %" PRId64 " is too large for %s \"lease\" (at most "
                     "%" PRId64 ")", s->credit_limit, from, RULES_LEASE_LIMIT_MAX);
    }
    /* Lua numbers are doubles: the sliding estimate must stay exact. */
    if (p->store == RULES_STORE_STRICT && s->algo == RULES_ALGO_SLIDING_WINDOW &&
        p->reset_ms > 0 &&
        (unsigned __int128)s->credit_limit * (uint64_t)p->reset_ms >
            (unsigned __int128)RULES_STRICT_SLIDING_MAX)
        RULE_ERR(p, 0, "credit_limit * reset_seconds is too large for a strict sliding_window "
                 "(credit_limit * reset_seconds * 1000 must be at most 2^52)");
    /* The continuous script counts credit_limit * refill_ms, 5 times in debt. */
    if (p->store == RULES_STORE_STRICT && p->refill_ms > 0 &&
        (s->algo == RULES_ALGO_GCRA || (s->algo == RULES_ALGO_TOKEN_BUCKET && s->continuous)) &&
        (unsigned __int128)s->credit_limit * (uint64_t)p->refill_ms >
            (unsigned __int128)RULES_STRICT_GCRA_MAX)
        RULE_ERR(p, 0, "credit_limit * refill_ms is too large for a strict %s (at most 2^49)",
                 s->algo == RULES_ALGO_GCRA ? "gcra" : "continuous token_bucket");
}

/* when_full (docs/rules.md "Full"): only what can apply to the rule. */
static void prep_when_full(struct pr *p, struct diag *d)
{
    const struct rules_rule_spec *s = p->s;

    if ((unsigned)s->when_full > RULES_FULL_EVICT) {
        RULE_ERR(p, 0, "unknown when_full");
        return;
    }
    if (s->when_full == RULES_FULL_TABLE)
        return;
    if (s->when_full != RULES_FULL_EVICT && s->source == RULES_SOURCE_PRIVILEGED)
        RULE_ERR(p, 0, "when_full \"%s\" does not apply to a source = privileged rule (one that "
                 "finds no counter answers ERR no-counter); only \"evict\" does",
                 s->when_full == RULES_FULL_DENY ? "deny" : "allow");
    if (s->when_full != RULES_FULL_EVICT)
        return;
    if (s->n_actor == 0)
        RULE_ERR(p, 0, "when_full \"evict\" needs an actor (a rule without one has no other "
                 "counter to evict)");
    if (p->store == RULES_STORE_LEASE)
        RULE_ERR(p, 0, "when_full \"evict\" does not apply to %s \"lease\" (a lease slot "
                 "holds credit leased from Redis)", s->store_set ? "store" : "store.mode");
}

/* Per-rule checks of everything but the match set. */
static void prep_settings(struct pr *p, struct diag *d)
{
    const struct rules_rule_spec *s = p->s;
    int64_t limit_max = s->algo == RULES_ALGO_SLIDING_WINDOW ? RULES_SLIDING_LIMIT_MAX
                                                             : RULES_LIMIT_MAX;

    if ((unsigned)s->algo > RULES_ALGO_LAST)
        RULE_ERR(p, 0, "unknown algorithm");
    if ((unsigned)s->policy > RULES_POLICY_CONTINUE)
        RULE_ERR(p, 0, "unknown match_policy");
    if ((unsigned)s->source > RULES_SOURCE_PRIVILEGED)
        RULE_ERR(p, 0, "unknown source");

    if (s->credit_limit == -1)
        RULE_ERR(p, 0, "credit_limit is not set");
    else
        rules_check_limit(p, d, "credit_limit", s->credit_limit, limit_max);

    rules_algo_prep(p, d);

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
    if (s->max_debit < -1 || s->max_debit > (int64_t)PROTO_DEBIT_MAX)
        RULE_ERR(p, 0, "max_debit %" PRId64 " is out of range 0..%llu", s->max_debit,
                 PROTO_DEBIT_MAX);
    if (s->label && !label_ok(s->label))
        RULE_ERR(p, 0, "label '%s' is not [A-Za-z0-9_-]{1,%d}", s->label, RULES_LABEL_MAX);
    /* Fast-path counters live in a table every divvy-fast member can write:
     * a privileged (login) rule must never be kept there. */
    if (s->fast_path && s->source == RULES_SOURCE_PRIVILEGED)
        RULE_ERR(p, 0, "a source = privileged rule cannot be fast_path");
    prep_store(p, d);
    prep_when_full(p, d);
}

/* True when every request rule @b matches is also matched by rule @a. */
static bool rule_covers(const struct pr *a, const struct pr *b)
{
    size_t j = 0;

    if (a->s->source == RULES_SOURCE_PRIVILEGED && b->s->source != RULES_SOURCE_PRIVILEGED)
        return false;
    for (size_t i = 0; i < a->n_m; i++) {
        const struct pm *am = &a->m[i];
        bool held = false;
        int c = 1;

        while (j < b->n_m &&
               (c = bytes_cmp(b->m[j].key, b->m[j].key_len, am->key, am->key_len)) < 0)
            j++;
        if (j == b->n_m || c != 0)
            return false;
        /* Some entry of b on that key (several with operators) must imply am's. */
        for (size_t k = j; !held && k < b->n_m &&
                           bytes_eq(b->m[k].key, b->m[k].key_len, am->key, am->key_len); k++) {
            const struct pm *bm = &b->m[k];

            /* "*" read as a glob is exactly "present with any value". */
            if (am->kind <= KIND_GLOB && bm->kind <= KIND_GLOB)
                held = glob_covers(am->raw, am->raw_len, bm->raw, bm->raw_len);
            else
                held = rules_ops_implies(bm, am);
        }
        if (!held)
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

        /* Rules with a cidr entry: looked up by prefix below. */
        if (a->cidr)
            continue;
        if (a->s->policy == RULES_POLICY_STOP && rule_covers(a, p)) {
            best = b->scan[k];
            break;
        }
    }
    best = rules_ops_shadow(b, bi, best, rule_covers);
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
    if (r >= 0)
        r = rules_ops_file(b);
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
int rules_build_prepare(const struct rules_spec *spec, struct build *b, struct diag *d)
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
        p->store = rules_spec_store(spec, p->s);
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

int rules_build_checked(const struct rules_spec *spec, struct build *b, struct diag *reterr)
{
    struct diag local;
    struct diag *d = reterr ? reterr : &local;
    size_t before;
    int r;

    if (!reterr)
        diag_init(&local);
    before = d->n + d->dropped;
    r = rules_build_prepare(spec, b, d);
    if (r >= 0 && d->n + d->dropped != before)
        r = -EINVAL;
    return r;
}

int rules_validate(const struct rules_spec *spec, struct diag *reterr)
{
    struct build b;
    int r = rules_build_checked(spec, &b, reterr);

    rules_build_free(&b);
    return r;
}

/* ---- notes: valid, but likely not what the author meant -------------------- */

static bool spec_matches_key(const struct rules_rule_spec *r, const char *key)
{
    for (size_t i = 0; i < r->n_match; i++)
        if (strcmp(r->match[i].key, key) == 0)
            return true;
    return false;
}

/* An actor key the match does not name: a request without it counts with
 * every other such request, in one counter.  Legitimate (an optional key),
 * so a note; a typo of a match key ("usr" for "user") gets a hint. */
static size_t note_actor_keys(const struct rules_rule_spec *r, struct diag *ret)
{
    size_t n = 0;

    for (size_t i = 0; i < r->n_actor; i++) {
        const char *key = r->actor[i];
        struct suggest sg;
        const char *hint;

        if (!key[0] || spec_matches_key(r, key))
            continue;
        suggest_init(&sg, key);
        for (size_t j = 0; j < r->n_match; j++)
            suggest_offer(&sg, r->match[j].key);
        hint = suggest_best(&sg);
        if (hint)
            diag_set(ret, r->file, r->line, "actor key '%s' is not in this rule's match (did you "
                     "mean '%s'?): requests without a '%s' all share one counter", key, hint,
                     key);
        else
            diag_set(ret, r->file, r->line, "actor key '%s' is not in this rule's match: "
                     "requests without a '%s' all share one counter (add %s = \"*\" to the "
                     "match to require it)", key, key, key);
        n++;
    }
    return n;
}

size_t rules_validate_notes(const struct rules_spec *spec, struct diag *ret)
{
    size_t n = 0;

    for (size_t i = 0; i < spec->n; i++) {
        const struct rules_rule_spec *r = &spec->rules[i];

        if (r->n_actor == 0)
            continue;
        /* No counter (rules_spec_counts()): the actor names nothing. */
        if (!rules_spec_counts(r)) {
            diag_set(ret, r->file, r->line, "actor has no effect: this rule keeps no counter "
                     "(%s)", r->credit_limit <= 0 ? "credit_limit 0 denies every request"
                                                  : "reset_seconds 0 allows every request");
            n++;
            continue;
        }
        n += note_actor_keys(r, ret);
    }
    return n + rules_ops_notes(spec, ret);
}
