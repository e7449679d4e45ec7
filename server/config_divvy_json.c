/* SPDX-License-Identifier: MIT */
/*
 * config_divvy_json: Button divvy's JSON config (docs/config.md, "divvy INI
 * and JSON") through jansson.  jansson reports positions only for syntax
 * errors, so after a successful parse a small position scanner walks the
 * already-validated text (strings and brackets only, no values) to find
 * the line of each rule object and of each key inside it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "array.h"
#include "config_divvy.h"
#include "config_divvy_private.h"

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
    struct jpos_key *grown;

    grown = array_grow(jp->key, jp->n_key, &jp->cap_key, sizeof(*grown), 64, SIZE_MAX);
    if (!grown)
        return -ENOMEM;
    jp->key = grown;
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
