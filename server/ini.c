/* SPDX-License-Identifier: MIT */
/*
 * ini: reads node-ini's INI dialect (see ini.h and docs/config.md) into
 * sections and entries with line numbers.  The value rules follow node-ini's
 * unsafe(): trim, strip matching quotes (a double-quoted value is decoded as
 * a JSON string, through jansson), else cut at the first unescaped ';' or
 * '#'.  Owns the struct ini it builds; never logs.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "array.h"
#include "ini.h"

#define INI_ENTRIES_MAX  1024      /* settings in one section */

static bool ini_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\v' || c == '\f';
}

static void ini_trim(const char **s, size_t *len)
{
    while (*len && ini_is_space(**s)) {
        (*s)++;
        (*len)--;
    }
    while (*len && ini_is_space((*s)[*len - 1]))
        (*len)--;
}

static int ini_strndup(const char *s, size_t len, char **ret)
{
    char *copy = malloc(len + 1);

    if (!copy)
        return -ENOMEM;
    memcpy(copy, s, len);
    copy[len] = '\0';
    *ret = copy;
    return 0;
}

/*
 * node-ini's unsafe(): the decoded form of a key, value or section name.
 * A quoted text is not searched for comments, as in node-ini.
 */
static int ini_unsafe(const char *s, size_t len, char **ret)
{
    bool quoted;
    size_t i, n = 0;
    char *out;
    int r;

    ini_trim(&s, &len);
    quoted = len >= 1 && ((s[0] == '"' && s[len - 1] == '"') ||
                          (s[0] == '\'' && s[len - 1] == '\''));
    if (quoted && s[0] == '\'')
        return ini_strndup(s + 1, len >= 2 ? len - 2 : 0, ret);
    if (quoted) {
        json_error_t jerr;
        json_t *j = json_loadb(s, len, JSON_DECODE_ANY, &jerr);

        /* Not a valid JSON string: node-ini keeps the text, quotes and all. */
        if (!j || !json_is_string(j)) {
            json_decref(j);
            return ini_strndup(s, len, ret);
        }
        r = ini_strndup(json_string_value(j), json_string_length(j), ret);
        json_decref(j);
        return r;
    }

    out = malloc(len + 1);
    if (!out)
        return -ENOMEM;
    for (i = 0; i < len; i++) {
        char c = s[i];

        if (c == ';' || c == '#')
            break;
        if (c == '\\' && i + 1 < len) {
            char next = s[i + 1];

            i++;
            if (next != '\\' && next != ';' && next != '#')
                out[n++] = '\\';
            out[n++] = next;
            continue;
        }
        out[n++] = c;
    }
    while (n && ini_is_space(out[n - 1]))
        n--;
    out[n] = '\0';
    *ret = out;
    return 0;
}

static int ini_add_section(struct ini *ini, char *name, unsigned line)
{
    struct ini_section *s, *grown;

    grown = array_grow(ini->section, ini->n_section, &ini->cap, sizeof(*grown), 16, SIZE_MAX);
    if (!grown)
        return -ENOMEM;
    ini->section = grown;
    s = &ini->section[ini->n_section++];
    memset(s, 0, sizeof(*s));
    s->name = name;
    s->line = line;
    return 0;
}

static int ini_add_entry(struct ini_section *s, char *key, char *value, unsigned line)
{
    struct ini_entry *e, *grown;

    grown = array_grow(s->entry, s->n_entry, &s->cap, sizeof(*grown), 8, SIZE_MAX);
    if (!grown)
        return -ENOMEM;
    s->entry = grown;
    e = &s->entry[s->n_entry++];
    e->key = key;
    e->value = value;
    e->line = line;
    return 0;
}

/* "[name]" with optional trailing blanks and comment; @s is trimmed. */
static int ini_section_line(struct ini *ini, const char *s, size_t len, const char *file,
                            unsigned line, struct diag *reterr)
{
    const char *close = memchr(s, ']', len);
    const char *rest;
    size_t rest_len;
    char *name = NULL;
    int r;

    if (!close) {
        diag_set(reterr, file, line, "section header without ']'");
        return -EINVAL;
    }
    rest = close + 1;
    rest_len = len - (size_t)(rest - s);
    ini_trim(&rest, &rest_len);
    if (rest_len && rest[0] != ';' && rest[0] != '#') {
        diag_set(reterr, file, line, "unexpected text after ']' in section header");
        return -EINVAL;
    }
    r = ini_unsafe(s + 1, (size_t)(close - s - 1), &name);
    if (r < 0)
        return r;
    if (!name[0]) {
        diag_set(reterr, file, line, "empty section name (the default rule is [default])");
        free(name);
        return -EINVAL;
    }
    r = ini_add_section(ini, name, line);
    if (r < 0)
        free(name);
    return r;
}

static int ini_key_line(struct ini *ini, const char *s, size_t len, const char *file,
                        unsigned line, struct diag *reterr)
{
    const char *eq = memchr(s, '=', len);
    struct ini_section *sec;
    char *key = NULL, *value = NULL;
    int r;

    r = ini_unsafe(s, eq ? (size_t)(eq - s) : len, &key);
    if (r < 0)
        goto out;
    if (!key[0]) {
        diag_set(reterr, file, line, "missing key before '='");
        r = -EINVAL;
        goto out;
    }
    if (ini->n_section == 0) {
        diag_set(reterr, file, line, "setting '%s' outside a section", key);
        r = -EINVAL;
        goto out;
    }
    sec = &ini->section[ini->n_section - 1];
    for (size_t i = 0; i < sec->n_entry; i++) {
        if (strcmp(sec->entry[i].key, key) == 0) {
            diag_set(reterr, file, line, "'%s' repeated in section [%s] (first at line %u)",
                     key, sec->name, sec->entry[i].line);
            r = -EINVAL;
            goto out;
        }
    }
    if (sec->n_entry >= INI_ENTRIES_MAX) {
        diag_set(reterr, file, line, "more than %d settings in section [%s]", INI_ENTRIES_MAX,
                 sec->name);
        r = -EINVAL;
        goto out;
    }
    if (eq) {
        r = ini_unsafe(eq + 1, len - (size_t)(eq + 1 - s), &value);
        if (r < 0)
            goto out;
    }
    r = ini_add_entry(sec, key, value, line);
    if (r < 0)
        goto out;
    key = NULL;
    value = NULL;
out:
    free(key);
    free(value);
    return r;
}

static int ini_cmp_section(const void *a, const void *b)
{
    const struct ini_section *x = *(const struct ini_section *const *)a;
    const struct ini_section *y = *(const struct ini_section *const *)b;
    int c = strcmp(x->name, y->name);

    if (c)
        return c;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* node-ini merges repeated sections silently; we name them instead. */
static int ini_check_repeats(const struct ini *ini, const char *file, struct diag *reterr)
{
    const struct ini_section **sorted;
    int r = 0;

    if (ini->n_section < 2)
        return 0;
    sorted = malloc(ini->n_section * sizeof(*sorted));
    if (!sorted)
        return -ENOMEM;
    for (size_t i = 0; i < ini->n_section; i++)
        sorted[i] = &ini->section[i];
    qsort(sorted, ini->n_section, sizeof(*sorted), ini_cmp_section);
    for (size_t i = 1; i < ini->n_section; i++) {
        if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0) {
            diag_set(reterr, file, sorted[i]->line, "section [%s] repeated (first at line %u)",
                     sorted[i]->name, sorted[i - 1]->line);
            r = -EINVAL;
        }
    }
    free(sorted);
    return r;
}

int ini_parse(const char *text, size_t len, const char *file, struct ini **ret,
              struct diag *reterr)
{
    struct ini *ini;
    const char *nul;
    bool skipping = false;      /* after a bad header, until the next one */
    unsigned line = 1;
    size_t pos = 0;
    int r = 0;

    ini = calloc(1, sizeof(*ini));
    if (!ini)
        return -ENOMEM;
    nul = memchr(text, '\0', len);
    if (nul) {
        for (const char *p = text; p < nul; p++)
            line += *p == '\n';
        diag_set(reterr, file, line, "NUL byte in file");
        r = -EINVAL;
        goto out;
    }
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        pos = 3;

    while (pos < len) {
        const char *s = text + pos;
        size_t n = 0;
        int q = 0;

        while (pos + n < len && s[n] != '\n' && s[n] != '\r')
            n++;
        pos += n;
        if (pos < len) {
            if (text[pos] == '\r' && pos + 1 < len && text[pos + 1] == '\n')
                pos++;
            pos++;
        }

        ini_trim(&s, &n);
        if (n == 0 || s[0] == ';' || s[0] == '#') {
            q = 0;
        } else if (s[0] == '[') {
            q = ini_section_line(ini, s, n, file, line, reterr);
            skipping = q < 0;
        } else if (!skipping) {
            q = ini_key_line(ini, s, n, file, line, reterr);
        }
        if (q == -ENOMEM) {
            r = q;
            goto out;
        }
        if (q < 0)
            r = q;          /* keep going: report every bad line at once */
        line++;
    }
    if (r == 0)
        r = ini_check_repeats(ini, file, reterr);
    if (r < 0)
        goto out;

    *ret = ini;
    ini = NULL;
out:
    ini_free(ini);
    return r;
}

void ini_free(struct ini *ini)
{
    if (!ini)
        return;
    for (size_t i = 0; i < ini->n_section; i++) {
        struct ini_section *s = &ini->section[i];

        for (size_t j = 0; j < s->n_entry; j++) {
            free(s->entry[j].key);
            free(s->entry[j].value);
        }
        free(s->entry);
        free(s->name);
    }
    free(ini->section);
    free(ini);
}
