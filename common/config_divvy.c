/* SPDX-License-Identifier: MIT */
/*
 * config_divvy: Button divvy's INI and JSON configs (docs/config.md), and
 * the rule-setting table shared with the native loader.  INI sections go
 * through ini.c; JSON through jansson.  jansson reports positions only for
 * syntax errors, so after a successful parse a small position scanner walks
 * the already-validated text (strings and brackets only, no values) to find
 * the line of each rule object and of each key inside it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config_divvy.h"
#include "ini.h"
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
    { CONFIG_DIVVY_F_STRICT, CONFIG_DIVVY_BOOL, "strict", "strict" },
    { CONFIG_DIVVY_F_FAST_PATH, CONFIG_DIVVY_BOOL, "fast_path", "fastPath" },
    { CONFIG_DIVVY_F_RESETTABLE, CONFIG_DIVVY_BOOL, "resettable", "resettable" },
    { CONFIG_DIVVY_F_LABEL, CONFIG_DIVVY_STRING, "label", "label" },
    { CONFIG_DIVVY_F_COMMENT, CONFIG_DIVVY_STRING, "comment", "comment" },
    { CONFIG_DIVVY_F_POLICY, CONFIG_DIVVY_STRING, "match_policy", "matchPolicy" },
    { CONFIG_DIVVY_F_ALGO, CONFIG_DIVVY_STRING, "algorithm", "algorithm" },
    { CONFIG_DIVVY_F_SOURCE, CONFIG_DIVVY_STRING, "source", "source" },
    { CONFIG_DIVVY_F_STORE, CONFIG_DIVVY_STRING, "store", "store" },
};

static const char *const config_divvy_policies[] = { "stop", "canary", "continue" };
static const char *const config_divvy_algos[] = { "window", "token_bucket", "sliding_window" };
static const char *const config_divvy_sources[] = { "any", "privileged" };
static const char *const config_divvy_stores[] = { "local", "lease", "strict" };

#define CONFIG_DIVVY_N(a) (sizeof(a) / sizeof((a)[0]))

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

int config_divvy_store_parse(const char *v)
{
    for (size_t i = 0; i < CONFIG_DIVVY_N(config_divvy_stores); i++) {
        if (strcmp(config_divvy_stores[i], v) == 0)
            return (int)i;
    }
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
    case CONFIG_DIVVY_F_PREFIX4:
        max = 32;
        break;
    case CONFIG_DIVVY_F_PREFIX6:
        max = 128;
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
    return suggest_best(&sg);
}

/* An unknown INI or JSON rule setting, with a "did you mean" when there is one. */
static void config_divvy_unknown(const char *key, bool native, const char *file, unsigned line,
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

/* ---- INI ---------------------------------------------------------------- */

/* Strict decimal: divvy's parseInt() took "10abc" as 10; we do not. */
static int config_divvy_parse_int(const char *s, int64_t *ret)
{
    const char *p = s;
    bool neg = false;
    uint64_t v = 0;

    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    if (!*p)
        return -EINVAL;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        if (v > (UINT64_MAX - 9) / 10)
            return -ERANGE;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v > (uint64_t)INT64_MAX)
        return -ERANGE;
    *ret = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

static int config_divvy_ini_entry(struct rules_rule_spec *r, const struct ini_entry *e,
                                  const char *file, struct diag *reterr)
{
    const struct config_divvy_field *f = config_divvy_field(e->key, false);
    int64_t v;
    int q;

    if (!f || f->kind == CONFIG_DIVVY_MATCH) {
        config_divvy_unknown(e->key, false, file, e->line, reterr);
        return -EINVAL;
    }
    if (!e->value) {
        diag_set(reterr, file, e->line, "%s needs a value ('%s = ...')", e->key, e->key);
        return -EINVAL;
    }
    switch (f->kind) {
    case CONFIG_DIVVY_INT:
        q = config_divvy_parse_int(e->value, &v);
        if (q == -ERANGE) {
            diag_set(reterr, file, e->line, "%s is out of range", e->key);
            return -EINVAL;
        }
        if (q < 0) {
            diag_set(reterr, file, e->line, "%s must be an integer, not \"%s\"", e->key,
                     e->value);
            return -EINVAL;
        }
        return config_divvy_set_int(r, f, e->key, v, file, e->line, reterr);
    case CONFIG_DIVVY_BOOL:
        if (strcmp(e->value, "true") != 0 && strcmp(e->value, "false") != 0) {
            diag_set(reterr, file, e->line, "%s must be true or false, not \"%s\"", e->key,
                     e->value);
            return -EINVAL;
        }
        return config_divvy_set_bool(r, f, e->value[0] == 't');
    default:
        return config_divvy_set_string(r, f, e->key, e->value, true, file, e->line, reterr);
    }
}

/* "[method=GET path=/a ip]": whitespace-separated pairs, split at the first
 * '=', a missing value is "". */
static int config_divvy_ini_match(struct rules_rule_spec *r, const struct ini_section *s,
                                  const char *file, struct diag *reterr)
{
    const char *p = s->name;
    int ret = 0;

    while (*p) {
        size_t n = strcspn(p, " \t\v\f");
        const char *eq = memchr(p, '=', n);
        char *key = NULL, *value = NULL;
        int q;

        if (n == 0) {
            p++;
            continue;
        }
        key = strndup(p, eq ? (size_t)(eq - p) : n);
        value = eq ? strndup(eq + 1, n - (size_t)(eq + 1 - p)) : strdup("");
        if (!key || !value) {
            q = -ENOMEM;
        } else if (!key[0]) {
            diag_set(reterr, file, s->line, "empty key in section name [%s]", s->name);
            q = -EINVAL;
        } else {
            q = rules_spec_add_match(r, key, value, s->line);
        }
        free(key);
        free(value);
        if (q == -ENOMEM)
            return q;
        if (q < 0)
            ret = q;
        p += n;
    }
    return ret;
}

int config_divvy_load_ini(const char *file, const char *text, size_t len,
                          struct rules_spec *spec, struct diag *reterr)
{
    struct ini *ini = NULL;
    int r;

    r = ini_parse(text, len, file, &ini, reterr);
    if (r < 0)
        goto out;
    for (size_t i = 0; i < ini->n_section; i++) {
        const struct ini_section *s = &ini->section[i];
        struct rules_rule_spec *rule;
        int q;

        q = rules_spec_add(spec, file, s->line, &rule);
        if (q < 0) {
            if (q == -E2BIG)
                diag_set(reterr, file, s->line, "more than %d rules", RULES_MAX);
            r = q == -E2BIG ? -EINVAL : q;
            goto out;
        }
        if (strcmp(s->name, "default") == 0)
            rule->is_default = true;
        else
            q = config_divvy_ini_match(rule, s, file, reterr);
        for (size_t j = 0; j < s->n_entry && q != -ENOMEM; j++) {
            int qe = config_divvy_ini_entry(rule, &s->entry[j], file, reterr);

            if (qe < 0)
                q = qe;
        }
        if (q == -ENOMEM) {
            r = q;
            goto out;
        }
        if (q < 0)
            r = q;
    }
out:
    ini_free(ini);
    return r;
}

/* ---- JSON --------------------------------------------------------------- */

/* Where a key was found: raw (still escaped) text between its quotes. */
struct jpos_key {
    const char *key;
    size_t len;
    unsigned line;
    bool in_op;                 /* a key of the rule's "operation" */
};

struct jpos_rule {
    unsigned line;
    size_t first, n;            /* its keys in jpos.key[] */
};

struct jpos {
    struct jpos_rule *rule;     /* overrides[i] */
    size_t n_rule;
    struct jpos_rule dflt;      /* "default" */
    struct jpos_rule top;       /* the root object's keys */
    struct jpos_key *key;
    size_t n_key, cap_key;
};

#define JPOS_DEPTH 8

struct jframe {
    char kind;                  /* '{' or '[' */
    bool want_key;
    const char *key;            /* last key seen in this object */
    size_t key_len;
    size_t idx;                 /* element index in an array */
    struct jpos_rule *rule;     /* this object is a rule */
    bool overrides;             /* this array is "overrides" */
};

static bool jpos_is(const struct jframe *f, const char *name)
{
    size_t n = strlen(name);

    return f->kind == '{' && f->key && f->key_len == n && memcmp(f->key, name, n) == 0;
}

static int jpos_add_key(struct jpos *jp, struct jpos_rule *rule, const char *key, size_t len,
                        unsigned line, bool in_op)
{
    if (jp->n_key == jp->cap_key) {
        size_t cap = jp->cap_key ? jp->cap_key * 2 : 64;
        struct jpos_key *grown = realloc(jp->key, cap * sizeof(*grown));

        if (!grown)
            return -ENOMEM;
        jp->key = grown;
        jp->cap_key = cap;
    }
    jp->key[jp->n_key++] = (struct jpos_key){ key, len, line, in_op };
    rule->n++;
    return 0;
}

static void jpos_free(struct jpos *jp)
{
    free(jp->rule);
    free(jp->key);
}

/*
 * Walks JSON text that jansson has already accepted, noting the line of
 * every rule object and of the keys in it.  It tracks only strings and
 * brackets; values are jansson's business.
 */
static int jpos_scan(const char *text, size_t len, size_t n_rules, struct jpos *jp)
{
    struct jframe stack[JPOS_DEPTH];
    size_t depth = 0;
    unsigned line = 1;

    memset(jp, 0, sizeof(*jp));
    jp->rule = calloc(n_rules ? n_rules : 1, sizeof(*jp->rule));
    if (!jp->rule)
        return -ENOMEM;
    jp->n_rule = n_rules;

    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        struct jframe *top = depth && depth <= JPOS_DEPTH ? &stack[depth - 1] : NULL;

        if (c == '\n') {
            line++;
        } else if (c == '"') {
            size_t start = ++i;

            while (i < len && text[i] != '"')
                i += text[i] == '\\' ? 2 : 1;
            if (top && top->kind == '{' && top->want_key) {
                struct jframe *parent = depth >= 2 ? &stack[depth - 2] : NULL;
                struct jpos_rule *rule = NULL;
                bool in_op = false;

                top->key = text + start;
                top->key_len = i - start;
                top->want_key = false;
                if (top->rule) {
                    rule = top->rule;
                } else if (parent && parent->rule && jpos_is(parent, "operation")) {
                    rule = parent->rule;
                    in_op = true;
                } else if (depth == 1) {
                    rule = &jp->top;
                }
                if (rule && jpos_add_key(jp, rule, top->key, top->key_len, line, in_op) < 0)
                    return -ENOMEM;
            }
        } else if (c == '{' || c == '[') {
            struct jpos_rule *rule = NULL;
            bool overrides = false;

            if (top && top->kind == '[' && top->overrides && c == '{' && top->idx < n_rules)
                rule = &jp->rule[top->idx];
            else if (depth == 1 && c == '{' && jpos_is(top, "default"))
                rule = &jp->dflt;
            else if (depth == 1 && c == '[' && jpos_is(top, "overrides"))
                overrides = true;
            if (rule) {
                rule->line = line;
                rule->first = jp->n_key;
            }
            if (depth < JPOS_DEPTH)
                stack[depth] = (struct jframe){ .kind = c, .want_key = c == '{', .rule = rule,
                                                .overrides = overrides };
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth)
                depth--;
        } else if (c == ',' && top) {
            if (top->kind == '[')
                top->idx++;
            else
                top->want_key = true;
        }
    }
    return 0;
}

/* Line of @key in @rule (an operation key when @in_op), else the rule's. */
static unsigned jpos_line(const struct jpos *jp, const struct jpos_rule *rule, const char *key,
                          bool in_op)
{
    size_t n = strlen(key);

    for (size_t i = rule->first; i < rule->first + rule->n && i < jp->n_key; i++) {
        const struct jpos_key *k = &jp->key[i];

        if (k->in_op == in_op && k->len == n && memcmp(k->key, key, n) == 0)
            return k->line;
    }
    return rule->line;
}

/* divvy stringifies operation values: numbers in JavaScript's shortest form. */
static int config_divvy_json_str(const json_t *v, char *buf, size_t size)
{
    if (json_is_integer(v)) {
        snprintf(buf, size, "%lld", (long long)json_integer_value(v));
        return 0;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);

        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, size, "%.*g", prec, d);
            if (strtod(buf, NULL) == d)
                break;
        }
        return 0;
    }
    if (json_is_boolean(v)) {
        snprintf(buf, size, "%s", json_is_true(v) ? "true" : "false");
        return 0;
    }
    return -EINVAL;
}

static int config_divvy_json_op(struct rules_rule_spec *r, const json_t *op, const char *file,
                                const struct jpos *jp, const struct jpos_rule *pos,
                                struct diag *reterr)
{
    const char *key;
    json_t *v;
    int ret = 0;

    if (!json_is_object(op)) {
        diag_set(reterr, file, jpos_line(jp, pos, "operation", false),
                 "operation must be an object");
        return -EINVAL;
    }
    json_object_foreach((json_t *)op, key, v) {
        unsigned line = jpos_line(jp, pos, key, true);
        char num[64];
        const char *value = num;
        int q;

        if (json_is_string(v))
            value = json_string_value(v);
        else if (config_divvy_json_str(v, num, sizeof(num)) < 0) {
            diag_set(reterr, file, line, "operation value of '%s' must be a string or number",
                     key);
            ret = -EINVAL;
            continue;
        }
        q = rules_spec_add_match(r, key, value, line);
        if (q < 0)
            return q;
    }
    return ret;
}

static int config_divvy_json_setting(struct rules_rule_spec *r, const char *key, json_t *v,
                                     const char *file, unsigned line, struct diag *reterr)
{
    const struct config_divvy_field *f = config_divvy_field(key, false);

    if (!f) {
        config_divvy_unknown(key, false, file, line, reterr);
        return -EINVAL;
    }
    switch (f->kind) {
    case CONFIG_DIVVY_INT:
        if (!json_is_integer(v)) {
            diag_set(reterr, file, line, "%s must be an integer", key);
            return -EINVAL;
        }
        return config_divvy_set_int(r, f, key, json_integer_value(v), file, line, reterr);
    case CONFIG_DIVVY_BOOL:
        if (!json_is_boolean(v)) {
            diag_set(reterr, file, line, "%s must be true or false", key);
            return -EINVAL;
        }
        return config_divvy_set_bool(r, f, json_is_true(v));
    case CONFIG_DIVVY_ACTOR:
        if (json_is_array(v)) {
            size_t i;
            json_t *e;

            json_array_foreach(v, i, e) {
                int q;

                if (!json_is_string(e)) {
                    diag_set(reterr, file, line, "%s must list strings", key);
                    return -EINVAL;
                }
                q = rules_spec_add_actor(r, json_string_value(e));
                if (q < 0)
                    return q;
            }
            return 0;
        }
        /* fall through */
    default:
        if (json_is_null(v))
            return 0;           /* divvy: null is "not set" */
        if (!json_is_string(v)) {
            diag_set(reterr, file, line, "%s must be a string", key);
            return -EINVAL;
        }
        return config_divvy_set_string(r, f, key, json_string_value(v), false, file, line,
                                       reterr);
    }
}

static int config_divvy_json_rule(struct rules_spec *spec, const json_t *obj, bool is_default,
                                  const char *file, const struct jpos *jp,
                                  const struct jpos_rule *pos, struct diag *reterr)
{
    struct rules_rule_spec *r;
    const char *key;
    json_t *v;
    int ret = 0, q;

    q = rules_spec_add(spec, file, pos->line, &r);
    if (q == -E2BIG) {
        diag_set(reterr, file, pos->line, "more than %d rules", RULES_MAX);
        return -EINVAL;
    }
    if (q < 0)
        return q;
    r->is_default = is_default;
    json_object_foreach((json_t *)obj, key, v) {
        unsigned line = jpos_line(jp, pos, key, false);

        if (strcmp(key, "operation") == 0)
            q = config_divvy_json_op(r, v, file, jp, pos, reterr);
        else
            q = config_divvy_json_setting(r, key, v, file, line, reterr);
        if (q == -ENOMEM)
            return q;
        if (q < 0)
            ret = q;
    }
    return ret;
}

int config_divvy_load_json(const char *file, const char *text, size_t len,
                           struct rules_spec *spec, struct diag *reterr)
{
    json_t *root, *overrides, *dflt, *v;
    struct jpos jp = { 0 };
    json_error_t jerr;
    const char *key;
    size_t n_over;
    int r = 0, q;

    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        diag_set(reterr, file, jerr.line > 0 ? (unsigned)jerr.line : 0, "%s", jerr.text);
        return -EINVAL;
    }
    if (!json_is_object(root)) {
        diag_set(reterr, file, 1, "a divvy JSON config is an object with "
                 "\"overrides\" and \"default\"");
        r = -EINVAL;
        goto out;
    }
    overrides = json_object_get(root, "overrides");
    dflt = json_object_get(root, "default");
    n_over = json_is_array(overrides) ? json_array_size(overrides) : 0;
    r = jpos_scan(text, len, n_over, &jp);
    if (r < 0)
        goto out;

    json_object_foreach(root, key, v) {
        if (strcmp(key, "overrides") != 0 && strcmp(key, "default") != 0) {
            diag_set(reterr, file, jpos_line(&jp, &jp.top, key, false),
                     "unknown setting '%s' (expected \"overrides\" and \"default\")", key);
            r = -EINVAL;
        }
    }
    if (overrides && !json_is_array(overrides)) {
        diag_set(reterr, file, jpos_line(&jp, &jp.top, "overrides", false),
                 "overrides must be a list of rules");
        r = -EINVAL;
    }
    for (size_t i = 0; i < n_over; i++) {
        json_t *rule = json_array_get(overrides, i);

        if (!json_is_object(rule)) {
            diag_set(reterr, file, jpos_line(&jp, &jp.top, "overrides", false),
                     "overrides[%zu] must be an object", i);
            r = -EINVAL;
            continue;
        }
        q = config_divvy_json_rule(spec, rule, false, file, &jp, &jp.rule[i], reterr);
        if (q == -ENOMEM) {
            r = q;
            goto out;
        }
        if (q < 0)
            r = q;
    }
    if (dflt && !json_is_object(dflt)) {
        diag_set(reterr, file, jpos_line(&jp, &jp.top, "default", false),
                 "default must be an object");
        r = -EINVAL;
    } else if (dflt) {
        q = config_divvy_json_rule(spec, dflt, true, file, &jp, &jp.dflt, reterr);
        if (q == -ENOMEM || q < 0)
            r = q;
    }
out:
    jpos_free(&jp);
    json_decref(root);
    return r;
}
