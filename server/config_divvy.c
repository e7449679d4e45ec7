/* SPDX-License-Identifier: MIT */
/*
 * config_divvy: the table of rule settings the three formats share (native
 * snake_case and divvy camelCase names, value kinds, ranges and keywords),
 * the setters that check a value once for all of them, and the "did you
 * mean" for an unknown rule setting (docs/config.md).  Button divvy's INI
 * and JSON configs are read by config_divvy_ini.c and config_divvy_json.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_divvy.h"
#include "config_divvy_private.h"
#include "suggest.h"

static const struct config_divvy_field config_divvy_fields[] = {
    { CONFIG_DIVVY_F_MATCH, CONFIG_DIVVY_MATCH, "match", "operation" },
    { CONFIG_DIVVY_F_ACTOR, CONFIG_DIVVY_ACTOR, "actor", "actorField" },
    { CONFIG_DIVVY_F_DEFAULT, CONFIG_DIVVY_DEFAULT, "default", NULL },
    { CONFIG_DIVVY_F_CREDIT_LIMIT, CONFIG_DIVVY_INT, "credit_limit", "creditLimit" },
    { CONFIG_DIVVY_F_RESET_SECONDS, CONFIG_DIVVY_INT, "reset_seconds", "resetSeconds" },
    { CONFIG_DIVVY_F_REFILL_AMOUNT, CONFIG_DIVVY_INT, "refill_amount", "refillAmount" },
    { CONFIG_DIVVY_F_REFILL_SECONDS, CONFIG_DIVVY_INT, "refill_seconds", "refillSeconds" },
    { CONFIG_DIVVY_F_PREFIX4, CONFIG_DIVVY_INT, "actor_prefix4", "actorPrefix4" },
    { CONFIG_DIVVY_F_PREFIX6, CONFIG_DIVVY_INT, "actor_prefix6", "actorPrefix6" },
    { CONFIG_DIVVY_F_MAX_ACTORS, CONFIG_DIVVY_INT, "max_actors", "maxActors" },
    { CONFIG_DIVVY_F_MAX_DEBIT, CONFIG_DIVVY_INT, "max_debit", "maxDebit" },
    { CONFIG_DIVVY_F_STRICT, CONFIG_DIVVY_BOOL, "strict", "strict" },
    { CONFIG_DIVVY_F_FAST_PATH, CONFIG_DIVVY_BOOL, "fast_path", "fastPath" },
    { CONFIG_DIVVY_F_RESETTABLE, CONFIG_DIVVY_BOOL, "resettable", "resettable" },
    { CONFIG_DIVVY_F_LABEL, CONFIG_DIVVY_STRING, "label", "label" },
    { CONFIG_DIVVY_F_COMMENT, CONFIG_DIVVY_STRING, "comment", "comment" },
    { CONFIG_DIVVY_F_POLICY, CONFIG_DIVVY_STRING, "match_policy", "matchPolicy" },
    { CONFIG_DIVVY_F_ALGO, CONFIG_DIVVY_STRING, "algorithm", "algorithm" },
    { CONFIG_DIVVY_F_SOURCE, CONFIG_DIVVY_STRING, "source", "source" },
    { CONFIG_DIVVY_F_STORE, CONFIG_DIVVY_STRING, "store", "store" },
    { CONFIG_DIVVY_F_WHEN_FULL, CONFIG_DIVVY_STRING, "when_full", "whenFull" },
    { CONFIG_DIVVY_F_RESET_MS, CONFIG_DIVVY_INT, "reset_ms", NULL },
    { CONFIG_DIVVY_F_REFILL_MS, CONFIG_DIVVY_INT, "refill_ms", NULL },
    { CONFIG_DIVVY_F_REFILL, CONFIG_DIVVY_STRING, "refill", NULL },
};

static const char *const config_divvy_policies[] = { "stop", "canary", "continue" };
static const char *const config_divvy_algos[] = { "window", "token_bucket", "sliding_window",
                                                   "gcra" };
static const char *const config_divvy_refills[] = { "steps", "continuous" };
static const char *const config_divvy_sources[] = { "any", "privileged" };
static const char *const config_divvy_stores[] = { "local", "lease", "strict" };
/* enum rules_full from RULES_FULL_DENY on (RULES_FULL_TABLE is "not set"). */
static const char *const config_divvy_when_fulls[] = { "deny", "allow", "evict" };

const struct config_divvy_field *config_divvy_field(const char *name, bool native)
{
    for (size_t i = 0; i < CONFIG_DIVVY_N(config_divvy_fields); i++) {
        const struct config_divvy_field *f = &config_divvy_fields[i];
        const char *n = native ? f->native : f->divvy;

        if (n && strcmp(n, name) == 0)
            return f;
    }
    return NULL;
}

const char *config_divvy_policy_name(enum rules_policy p)
{
    return (size_t)p < CONFIG_DIVVY_N(config_divvy_policies) ? config_divvy_policies[p] : "?";
}

const char *config_divvy_algo_name(enum rules_algo a)
{
    return (size_t)a < CONFIG_DIVVY_N(config_divvy_algos) ? config_divvy_algos[a] : "?";
}

const char *config_divvy_source_name(enum rules_source s)
{
    return (size_t)s < CONFIG_DIVVY_N(config_divvy_sources) ? config_divvy_sources[s] : "?";
}

const char *config_divvy_store_name(enum rules_store s)
{
    return (size_t)s < CONFIG_DIVVY_N(config_divvy_stores) ? config_divvy_stores[s] : "?";
}

const char *config_divvy_when_full_name(enum rules_full w)
{
    if (w == RULES_FULL_TABLE)
        return "";
    return (size_t)w - 1 < CONFIG_DIVVY_N(config_divvy_when_fulls)
               ? config_divvy_when_fulls[w - 1] : "?";
}

int config_divvy_store_parse(const char *v)
{
    for (size_t i = 0; i < CONFIG_DIVVY_N(config_divvy_stores); i++) {
        if (strcmp(config_divvy_stores[i], v) == 0)
            return (int)i;
    }
    return -EINVAL;
}

/* A duration given both in seconds and in ms: which one would be meant? */
static int config_divvy_twice(const struct rules_rule_spec *r, enum config_divvy_id id,
                              const char *name, const char *file, unsigned line,
                              struct diag *reterr)
{
    const char *other = NULL;

    if ((id == CONFIG_DIVVY_F_RESET_SECONDS && r->reset_ms != -1) ||
        (id == CONFIG_DIVVY_F_RESET_MS && r->reset_seconds != -1))
        other = id == CONFIG_DIVVY_F_RESET_MS ? "reset_seconds" : "reset_ms";
    else if ((id == CONFIG_DIVVY_F_REFILL_SECONDS && r->refill_ms != -1) ||
             (id == CONFIG_DIVVY_F_REFILL_MS && r->refill_seconds != -1))
        other = id == CONFIG_DIVVY_F_REFILL_MS ? "refill_seconds" : "refill_ms";
    if (!other)
        return 0;
    diag_set(reterr, file, line, "%s and %s are both set: give the duration once", name, other);
    return -EINVAL;
}

int config_divvy_set_int(struct rules_rule_spec *r, const struct config_divvy_field *f,
                         const char *name, int64_t v, const char *file, unsigned line,
                         struct diag *reterr)
{
    int64_t max;

    switch (f->id) {
    case CONFIG_DIVVY_F_RESET_SECONDS:
    case CONFIG_DIVVY_F_REFILL_SECONDS:
        max = RULES_SECONDS_MAX;
        break;
    case CONFIG_DIVVY_F_RESET_MS:
    case CONFIG_DIVVY_F_REFILL_MS:
        max = RULES_SECONDS_MAX * 1000;
        break;
    case CONFIG_DIVVY_F_PREFIX4:
        max = 32;
        break;
    case CONFIG_DIVVY_F_PREFIX6:
        max = 128;
        break;
    case CONFIG_DIVVY_F_MAX_DEBIT:
        max = (int64_t)PROTO_DEBIT_MAX;
        break;
    default:
        max = RULES_LIMIT_MAX;
        break;
    }
    if (v < 0) {
        diag_set(reterr, file, line, "%s must not be negative", name);
        return -EINVAL;
    }
    if (v > max) {
        diag_set(reterr, file, line, "%s is out of range (at most %lld)", name, (long long)max);
        return -EINVAL;
    }
    if (config_divvy_twice(r, f->id, name, file, line, reterr) < 0)
        return -EINVAL;
    switch (f->id) {
    case CONFIG_DIVVY_F_CREDIT_LIMIT:
        r->credit_limit = v;
        break;
    case CONFIG_DIVVY_F_RESET_SECONDS:
        r->reset_seconds = v;
        break;
    case CONFIG_DIVVY_F_REFILL_AMOUNT:
        r->refill_amount = v;
        break;
    case CONFIG_DIVVY_F_REFILL_SECONDS:
        r->refill_seconds = v;
        break;
    case CONFIG_DIVVY_F_PREFIX4:
        r->prefix4 = (int)v;
        break;
    case CONFIG_DIVVY_F_PREFIX6:
        r->prefix6 = (int)v;
        break;
    case CONFIG_DIVVY_F_MAX_ACTORS:
        r->max_actors = v;
        break;
    case CONFIG_DIVVY_F_MAX_DEBIT:
        r->max_debit = v;
        break;
    case CONFIG_DIVVY_F_RESET_MS:
        r->reset_ms = v;
        break;
    case CONFIG_DIVVY_F_REFILL_MS:
        r->refill_ms = v;
        break;
    default:
        return -EINVAL;
    }
    return 0;
}

int config_divvy_set_bool(struct rules_rule_spec *r, const struct config_divvy_field *f, bool v)
{
    switch (f->id) {
    case CONFIG_DIVVY_F_STRICT:
        r->strict = v;
        return 0;
    case CONFIG_DIVVY_F_FAST_PATH:
        r->fast_path = v;
        return 0;
    case CONFIG_DIVVY_F_RESETTABLE:
        r->no_reset = !v;
        return 0;
    case CONFIG_DIVVY_F_DEFAULT:
        r->is_default = v;
        return 0;
    default:
        return -EINVAL;
    }
}

static int config_divvy_keyword(const char *const *words, size_t n, const char *name,
                                const char *v, const char *file, unsigned line,
                                struct diag *reterr)
{
    char expect[128] = "";
    size_t len = 0;

    for (size_t i = 0; i < n; i++) {
        if (strcmp(words[i], v) == 0)
            return (int)i;
    }
    for (size_t i = 0; i < n && len < sizeof(expect); i++) {
        int w = snprintf(expect + len, sizeof(expect) - len, "%s\"%s\"",
                         i == 0 ? "" : i + 1 == n ? " or " : ", ", words[i]);

        if (w < 0)
            break;
        len += (size_t)w;
    }
    diag_set(reterr, file, line, "%s must be %s, not \"%s\"", name, expect, v);
    return -EINVAL;
}

static int config_divvy_replace(char **slot, const char *v)
{
    char *copy = strdup(v);

    if (!copy)
        return -ENOMEM;
    free(*slot);
    *slot = copy;
    return 0;
}

static int config_divvy_actors(struct rules_rule_spec *r, const char *v, bool split_commas)
{
    const char *p = v;
    int q;

    if (!split_commas)
        return v[0] ? rules_spec_add_actor(r, v) : 0;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char *key;

        while (n && (*p == ' ' || *p == '\t')) {
            p++;
            n--;
        }
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        key = strndup(p, n);
        if (!key)
            return -ENOMEM;
        /* An empty piece ("a,,b") is kept: rules_validate names it. */
        q = rules_spec_add_actor(r, key);
        free(key);
        if (q < 0)
            return q;
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

int config_divvy_set_string(struct rules_rule_spec *r, const struct config_divvy_field *f,
                            const char *name, const char *v, bool split_commas,
                            const char *file, unsigned line, struct diag *reterr)
{
    int i;

    switch (f->id) {
    case CONFIG_DIVVY_F_ACTOR:
        return config_divvy_actors(r, v, split_commas);
    case CONFIG_DIVVY_F_LABEL:
        return config_divvy_replace(&r->label, v);
    case CONFIG_DIVVY_F_COMMENT:
        return config_divvy_replace(&r->comment, v);
    case CONFIG_DIVVY_F_POLICY:
        i = config_divvy_keyword(config_divvy_policies, CONFIG_DIVVY_N(config_divvy_policies),
                                 name, v, file, line, reterr);
        if (i >= 0)
            r->policy = (enum rules_policy)i;
        return i < 0 ? i : 0;
    case CONFIG_DIVVY_F_ALGO:
        i = config_divvy_keyword(config_divvy_algos, CONFIG_DIVVY_N(config_divvy_algos),
                                 name, v, file, line, reterr);
        if (i >= 0)
            r->algo = (enum rules_algo)i;
        return i < 0 ? i : 0;
    case CONFIG_DIVVY_F_SOURCE:
        i = config_divvy_keyword(config_divvy_sources, CONFIG_DIVVY_N(config_divvy_sources),
                                 name, v, file, line, reterr);
        if (i >= 0)
            r->source = (enum rules_source)i;
        return i < 0 ? i : 0;
    case CONFIG_DIVVY_F_STORE:
        i = config_divvy_keyword(config_divvy_stores, CONFIG_DIVVY_N(config_divvy_stores),
                                 name, v, file, line, reterr);
        if (i >= 0) {
            r->store = (enum rules_store)i;
            r->store_set = true;
        }
        return i < 0 ? i : 0;
    case CONFIG_DIVVY_F_WHEN_FULL:
        i = config_divvy_keyword(config_divvy_when_fulls, CONFIG_DIVVY_N(config_divvy_when_fulls),
                                 name, v, file, line, reterr);
        if (i >= 0)
            r->when_full = (enum rules_full)(i + 1);
        return i < 0 ? i : 0;
    case CONFIG_DIVVY_F_REFILL:
        i = config_divvy_keyword(config_divvy_refills, CONFIG_DIVVY_N(config_divvy_refills),
                                 name, v, file, line, reterr);
        if (i >= 0) {
            r->continuous = i == 1;
            r->refill_set = true;
        }
        return i < 0 ? i : 0;
    default:
        return -EINVAL;
    }
}

const char *config_divvy_hint(const char *key, bool native)
{
    const struct config_divvy_field *other = config_divvy_field(key, !native);
    struct suggest sg;

    if (other && (native ? other->native : other->divvy))
        return native ? other->native : other->divvy;
    suggest_init(&sg, key);
    for (size_t i = 0; i < CONFIG_DIVVY_N(config_divvy_fields); i++) {
        const struct config_divvy_field *f = &config_divvy_fields[i];

        /* INI and JSON rules name no "operation" setting (JSON reads it apart). */
        if (native || f->kind != CONFIG_DIVVY_MATCH)
            suggest_offer(&sg, native ? f->native : f->divvy);
    }
    /* The native format's own settings (config_native.c, docs/rules.md
     * "Calendar windows"). */
    if (native) {
        suggest_offer(&sg, "calendar");
        suggest_offer(&sg, "time_zone");
    }
    return suggest_best(&sg);
}

/* An unknown INI or JSON rule setting, with a "did you mean" when there is one. */
void config_divvy_unknown(const char *key, bool native, const char *file, unsigned line,
                          struct diag *reterr)
{
    size_t len = strlen(key);
    const char *hint;

    if (len > 2 && strcmp(key + len - 2, "[]") == 0) {
        diag_set(reterr, file, line, "unknown setting '%s' (INI arrays are not supported)", key);
        return;
    }
    hint = config_divvy_hint(key, native);
    if (hint)
        diag_set(reterr, file, line, "unknown setting '%s' (did you mean '%s'?)", key, hint);
    else
        diag_set(reterr, file, line, "unknown setting '%s'", key);
}
