/* SPDX-License-Identifier: MIT */
/*
 * rules_spec: building and freeing a struct rules_spec, the uncompiled rule
 * list the config loaders produce (see rules.h).  Owns every string it holds.
 * Also what a rule's settings mean before it is compiled: whether it counts
 * and which store it runs in.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "rules.h"

int rules_spec_add(struct rules_spec *spec, const char *file, unsigned line,
                   struct rules_rule_spec **ret)
{
    struct rules_rule_spec *r;
    char *file_copy;

    if (spec->n >= RULES_MAX)
        return -E2BIG;
    r = array_grow(spec->rules, spec->n, &spec->cap, sizeof(*r), 16, SIZE_MAX);
    if (!r)
        return -ENOMEM;
    spec->rules = r;
    file_copy = strdup(file ? file : "");
    if (!file_copy)
        return -ENOMEM;
    r = &spec->rules[spec->n++];
    memset(r, 0, sizeof(*r));
    r->file = file_copy;
    r->line = line;
    r->credit_limit = -1;
    r->reset_seconds = -1;
    r->refill_amount = -1;
    r->refill_seconds = -1;
    r->reset_ms = -1;
    r->refill_ms = -1;
    r->prefix4 = -1;
    r->prefix6 = -1;
    r->max_debit = -1;
    r->policy = RULES_POLICY_STOP;
    r->algo = RULES_ALGO_WINDOW;
    r->source = RULES_SOURCE_ANY;
    r->lock = (struct rules_lock){ -1, -1, -1, -1, -1, -1, -1, -1, -1, 0 };
    *ret = r;
    return 0;
}

int rules_spec_add_match(struct rules_rule_spec *r, const char *key, const char *value,
                         unsigned line)
{
    struct rules_match_spec *grown, *m;
    char *k, *v;

    k = strdup(key);
    v = strdup(value);
    grown = realloc(r->match, (r->n_match + 1) * sizeof(*grown));
    if (!k || !v || !grown) {
        free(k);
        free(v);
        if (grown)
            r->match = grown;
        return -ENOMEM;
    }
    r->match = grown;
    m = &r->match[r->n_match++];
    m->key = k;
    m->value = v;
    m->line = line;
    m->op = RULES_MATCH_VALUE;
    return 0;
}

int rules_spec_add_match_op(struct rules_rule_spec *r, const char *key, enum rules_match_op op,
                            const char *value, unsigned line)
{
    int ret = rules_spec_add_match(r, key, value, line);

    if (ret >= 0)
        r->match[r->n_match - 1].op = op;
    return ret;
}

int rules_spec_add_actor(struct rules_rule_spec *r, const char *key)
{
    char **grown;
    char *k;

    k = strdup(key);
    grown = realloc(r->actor, (r->n_actor + 1) * sizeof(*grown));
    if (!k || !grown) {
        free(k);
        if (grown)
            r->actor = grown;
        return -ENOMEM;
    }
    r->actor = grown;
    r->actor[r->n_actor++] = k;
    return 0;
}

void rules_spec_free(struct rules_spec *spec)
{
    if (!spec)
        return;
    for (size_t i = 0; i < spec->n; i++) {
        struct rules_rule_spec *r = &spec->rules[i];

        for (size_t j = 0; j < r->n_match; j++) {
            free(r->match[j].key);
            free(r->match[j].value);
        }
        free(r->match);
        for (size_t j = 0; j < r->n_actor; j++)
            free(r->actor[j]);
        free(r->actor);
        free(r->file);
        free(r->label);
        free(r->comment);
        free(r->time_zone);
    }
    free(spec->rules);
    memset(spec, 0, sizeof(*spec));
}

bool rules_spec_counts(const struct rules_rule_spec *r)
{
    return r->credit_limit > 0 && (r->algo == RULES_ALGO_TOKEN_BUCKET ||
                                   r->algo == RULES_ALGO_GCRA || r->algo == RULES_ALGO_LOCKOUT ||
                                   r->reset_seconds > 0 || r->reset_ms > 0 || r->calendar);
}

/* A lease strands credit on every host that holds one (docs/redis.md
 * "Bounds"), and a PEEK asks Redis, which counts it as used: for a login
 * limit of a few failures that is the whole limit, so a user would be
 * locked out before spending it. */
bool rules_spec_unleased(const struct rules_spec *spec, const struct rules_rule_spec *r)
{
    return !r->store_set && spec->default_store == RULES_STORE_LEASE &&
           r->source == RULES_SOURCE_PRIVILEGED && rules_spec_counts(r);
}

enum rules_store rules_spec_store(const struct rules_spec *spec, const struct rules_rule_spec *r)
{
    if (r->store_set)
        return r->store;
    if (spec->default_store == RULES_STORE_LEASE && r->source == RULES_SOURCE_PRIVILEGED)
        return RULES_STORE_STRICT;
    return spec->default_store;
}
