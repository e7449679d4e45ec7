/* SPDX-License-Identifier: MIT */
/*
 * replay_report: the counts of a replay (see replay_report.h).  Actors are
 * kept in one open-addressing table keyed by (rule, actor) with a keyed
 * SipHash (a log's actors are chosen by whoever sent the requests: no hash
 * flooding), each entry also linked into its rule's list for the report.
 * Only decisions whose verdict changed, and lockout rules' locks, reach it:
 * the replay's common case (nothing changed) costs two additions.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "array.h"
#include "hash.h"
#include "replay_report.h"

#define NO_ENTRY UINT32_MAX

struct actor_entry {
    char *actor;                /* NUL-terminated copy */
    size_t len;
    uint32_t rule;
    uint32_t next;              /* the next entry of the same rule; NO_ENTRY: none */
    uint64_t changed;
    size_t lock;                /* 1 + the index of its latest lock in its rule's list; 0: none */
};

struct replay_report {
    size_t n_rules;
    struct replay_rule_stats *rule;
    uint32_t *first;            /* per rule: its first entry */
    struct actor_entry *e;
    size_t n_e, cap_e;
    uint32_t *slot;             /* the hash table: entry indexes; NO_ENTRY: empty */
    size_t n_slot;              /* a power of two, at least twice n_e */
    uint8_t key[HASH_KEY_LEN];
    size_t n_locks;
    size_t actor_bytes;
    bool capped;
    struct replay_totals totals;
    struct replay_mismatch mm[REPLAY_MISMATCHES_MAX];
    size_t n_mm;
};

struct replay_report *replay_report_new(size_t n_rules)
{
    struct replay_report *rp = calloc(1, sizeof(*rp));

    if (!rp)
        return NULL;
    rp->n_rules = n_rules;
    rp->rule = calloc(n_rules ? n_rules : 1, sizeof(*rp->rule));
    rp->first = malloc((n_rules ? n_rules : 1) * sizeof(*rp->first));
    if (!rp->rule || !rp->first) {
        replay_report_free(rp);
        return NULL;
    }
    for (size_t i = 0; i < n_rules; i++)
        rp->first[i] = NO_ENTRY;
    /* Without randomness the table still works, only predictably. */
    if (getrandom(rp->key, sizeof(rp->key), GRND_NONBLOCK) != (ssize_t)sizeof(rp->key))
        memset(rp->key, 0x5a, sizeof(rp->key));
    return rp;
}

void replay_report_free(struct replay_report *rp)
{
    if (!rp)
        return;
    for (size_t i = 0; i < rp->n_e; i++)
        free(rp->e[i].actor);
    for (size_t i = 0; rp->rule && i < rp->n_rules; i++)
        free(rp->rule[i].locks);
    for (size_t i = 0; i < rp->n_mm; i++) {
        for (unsigned k = 0; k < rp->mm[i].n_kv; k++) {
            free(rp->mm[i].key[k]);
            free(rp->mm[i].value[k]);
        }
    }
    free(rp->e);
    free(rp->slot);
    free(rp->first);
    free(rp->rule);
    free(rp);
}

struct replay_totals *replay_report_totals(struct replay_report *rp)
{
    return &rp->totals;
}

static uint64_t entry_hash(const struct replay_report *rp, uint32_t rule, const char *actor,
                           size_t len)
{
    return hash_siphash(rp->key, actor, len) ^ ((uint64_t)rule * 0x9e3779b97f4a7c15ULL);
}

static int table_grow(struct replay_report *rp)
{
    size_t n = rp->n_slot ? rp->n_slot * 2 : 1024;
    uint32_t *slot = malloc(n * sizeof(*slot));

    if (!slot)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        slot[i] = NO_ENTRY;
    for (size_t i = 0; i < rp->n_e; i++) {
        const struct actor_entry *e = &rp->e[i];
        size_t j = entry_hash(rp, e->rule, e->actor, e->len) & (n - 1);

        while (slot[j] != NO_ENTRY)
            j = (j + 1) & (n - 1);
        slot[j] = (uint32_t)i;
    }
    free(rp->slot);
    rp->slot = slot;
    rp->n_slot = n;
    return 0;
}

/* The entry of (@rule, @actor), added when absent: 0 with *ret; 1 when it is
 * absent and the table is at its limit (nothing kept); -ENOMEM. */
static int entry_get(struct replay_report *rp, uint32_t rule, const char *actor, size_t len,
                     struct actor_entry **ret)
{
    struct actor_entry *e, *grown;
    size_t j;
    int r;

    if (rp->n_slot == 0 || (rp->n_e + 1) * 2 > rp->n_slot) {
        r = table_grow(rp);
        if (r < 0)
            return r;
    }
    j = entry_hash(rp, rule, actor, len) & (rp->n_slot - 1);
    for (; rp->slot[j] != NO_ENTRY; j = (j + 1) & (rp->n_slot - 1)) {
        e = &rp->e[rp->slot[j]];
        if (e->rule == rule && e->len == len && memcmp(e->actor, actor, len) == 0) {
            *ret = e;
            return 0;
        }
    }
    if (rp->n_e >= REPLAY_ACTORS_MAX || rp->actor_bytes + len > REPLAY_ACTOR_BYTES) {
        rp->capped = true;
        return 1;
    }
    grown = array_grow(rp->e, rp->n_e, &rp->cap_e, sizeof(*rp->e), 1024, REPLAY_ACTORS_MAX);
    if (!grown)
        return -ENOMEM;
    rp->e = grown;
    e = &rp->e[rp->n_e];
    e->actor = malloc(len + 1);
    if (!e->actor)
        return -ENOMEM;
    memcpy(e->actor, actor, len);
    e->actor[len] = '\0';
    rp->actor_bytes += len + 1;
    e->len = len;
    e->rule = rule;
    e->changed = 0;
    e->lock = 0;
    e->next = rp->first[rule];
    rp->first[rule] = (uint32_t)rp->n_e;
    rp->slot[j] = (uint32_t)rp->n_e++;
    *ret = e;
    return 0;
}

int replay_report_decision(struct replay_report *rp, uint32_t rule, bool take,
                           bool allowed_before, bool allowed_after, const char *actor,
                           size_t actor_len)
{
    struct replay_rule_stats *s;
    struct actor_entry *e;
    int r;

    if (rule >= rp->n_rules)
        return -EINVAL;
    s = &rp->rule[rule];
    rp->totals.replayed++;
    s->hits += take;
    if (allowed_before == allowed_after) {
        rp->totals.same++;
        return 0;
    }
    if (allowed_before) {
        rp->totals.allowed_to_denied++;
        s->allowed_to_denied++;
    } else {
        rp->totals.denied_to_allowed++;
        s->denied_to_allowed++;
    }
    if (!actor)
        return 0;
    r = entry_get(rp, rule, actor, actor_len, &e);
    if (r != 0)
        return r < 0 ? r : 0;
    if (e->changed++ == 0)
        s->actors_affected++;
    return 0;
}

int replay_report_lock(struct replay_report *rp, uint32_t rule, const char *actor,
                       size_t actor_len, uint64_t start_ms, uint64_t end_ms)
{
    struct replay_rule_stats *s;
    struct replay_lock *grown;
    struct actor_entry *e;
    int r;

    if (rule >= rp->n_rules)
        return -EINVAL;
    s = &rp->rule[rule];
    if (rp->n_locks >= REPLAY_LOCKS_MAX) {
        rp->capped = true;
        return 0;
    }
    r = entry_get(rp, rule, actor, actor_len, &e);
    if (r != 0)
        return r < 0 ? r : 0;
    grown = array_grow(s->locks, s->n_locks, &s->cap_locks, sizeof(*s->locks), 16,
                       REPLAY_LOCKS_MAX);
    if (!grown)
        return -ENOMEM;
    s->locks = grown;
    s->locks[s->n_locks] = (struct replay_lock){ .actor = e->actor, .start_ms = start_ms,
                                                 .end_ms = end_ms };
    e->lock = ++s->n_locks;
    rp->n_locks++;
    return 0;
}

int replay_report_unlock(struct replay_report *rp, uint32_t rule, const char *actor,
                         size_t actor_len, uint64_t now_ms)
{
    struct replay_lock *l;
    size_t j;

    if (rule >= rp->n_rules || rp->n_slot == 0)
        return rule >= rp->n_rules ? -EINVAL : 0;
    /* A lookup only: an actor never locked has nothing to end. */
    j = entry_hash(rp, rule, actor, actor_len) & (rp->n_slot - 1);
    for (; rp->slot[j] != NO_ENTRY; j = (j + 1) & (rp->n_slot - 1)) {
        const struct actor_entry *e = &rp->e[rp->slot[j]];

        if (e->rule != rule || e->len != actor_len || memcmp(e->actor, actor, actor_len))
            continue;
        if (!e->lock)
            return 0;
        l = &rp->rule[rule].locks[e->lock - 1];
        if (l->start_ms <= now_ms && now_ms < l->end_ms)
            l->end_ms = now_ms;
        return 0;
    }
    return 0;
}

int replay_report_mismatch(struct replay_report *rp, uint64_t unix_ms, uint64_t rule_before,
                           uint32_t rule_after, bool allowed_before, bool allowed_after,
                           const struct proto_kv *kv, unsigned n_kv)
{
    struct replay_mismatch *m;

    if (rp->n_mm >= REPLAY_MISMATCHES_MAX)
        return 0;
    m = &rp->mm[rp->n_mm];
    memset(m, 0, sizeof(*m));
    m->unix_ms = unix_ms;
    m->rule_before = rule_before;
    m->rule_after = rule_after;
    m->allowed_before = allowed_before;
    m->allowed_after = allowed_after;
    for (unsigned i = 0; i < n_kv && i < PROTO_KV_MAX; i++) {
        m->key[i] = strndup(kv[i].key, kv[i].key_len);
        m->value[i] = strndup(kv[i].value, kv[i].value_len);
        m->n_kv = i + 1;
        if (!m->key[i] || !m->value[i]) {
            rp->n_mm++;                         /* freed with the report */
            return -ENOMEM;
        }
    }
    rp->n_mm++;
    return 0;
}

const struct replay_rule_stats *replay_report_rule(const struct replay_report *rp,
                                                   uint32_t rule)
{
    return rule < rp->n_rules ? &rp->rule[rule] : NULL;
}

static int top_cmp(const void *a, const void *b)
{
    const struct replay_top *x = a, *y = b;

    if (x->changed != y->changed)
        return x->changed > y->changed ? -1 : 1;
    return strcmp(x->actor, y->actor);
}

int replay_report_top(const struct replay_report *rp, uint32_t rule, size_t max,
                      struct replay_top **ret, size_t *ret_n)
{
    struct replay_top *all;
    size_t n = 0;

    *ret = NULL;
    *ret_n = 0;
    if (rule >= rp->n_rules || rp->rule[rule].actors_affected == 0 || max == 0)
        return 0;
    all = malloc(rp->rule[rule].actors_affected * sizeof(*all));
    if (!all)
        return -ENOMEM;
    for (uint32_t i = rp->first[rule]; i != NO_ENTRY; i = rp->e[i].next) {
        if (rp->e[i].changed && n < rp->rule[rule].actors_affected)
            all[n++] = (struct replay_top){ .actor = rp->e[i].actor,
                                            .changed = rp->e[i].changed };
    }
    qsort(all, n, sizeof(*all), top_cmp);
    *ret = all;
    *ret_n = n < max ? n : max;
    return 0;
}

const struct replay_mismatch *replay_report_mismatches(const struct replay_report *rp,
                                                       size_t *ret_n)
{
    *ret_n = rp->n_mm;
    return rp->mm;
}

bool replay_report_capped(const struct replay_report *rp)
{
    return rp->capped;
}
