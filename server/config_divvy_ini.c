/* SPDX-License-Identifier: MIT */
/*
 * config_divvy_ini: Button divvy's INI config (docs/config.md, "divvy INI
 * and JSON"): sections read by ini.c, one rule each in file order, match
 * keys and settings told apart by name, values checked through
 * config_divvy.c's setting table.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config_divvy.h"
#include "config_divvy_private.h"
#include "ini.h"

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
    /* node-ini reads null (quoted or not) as JavaScript's null, and divvy
     * takes a null setting as not set: "label = null" is no label, as
     * "label": null is in JSON -- never the label "null". */
    if (strcmp(e->value, "null") == 0)
        return 0;
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
