/* SPDX-License-Identifier: MIT */
/*
 * config_guard: what libconfig 1.5 (Debian 12) would misread, found in the
 * text before its numbers are trusted.  It silently truncates an integer
 * literal beyond 32 bits that lacks the L suffix (5000000000 reads as
 * 705032704) and saturates an L literal beyond 64 bits, so a scanner walks
 * the text once, tokenising as libconfig does, and rejects such literals
 * with their line; the misread values are then dropped from the parsed
 * tree so the rest of the file is still checked.  libconfig would also
 * follow `@include` relative to the working directory; we refuse it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_private.h"

/* libconfig reads "@include" only at the start of a line; refuse it anywhere
 * such a line could be (over-approximating inside strings is harmless). */
int conf_check_include(const char *path, const char *text, struct diag *reterr)
{
    const char *p = text;
    int r = 0;

    while (p) {
        const char *s = p;

        while (*s == ' ' || *s == '\t')
            s++;
        if (strncmp(s, "@include", 8) == 0) {
            diag_set(reterr, path, conf_line_of(text, s), "@include is not supported");
            r = -EINVAL;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return r;
}

/*
 * Checks one number token [s, e) the way libconfig 1.5 would mangle it; on
 * -EINVAL, @misread holds the values libconfig may have made of it (the
 * saturated value and its low 32 bits).
 */
static int conf_check_number(const char *path, unsigned line, const char *s, const char *e,
                             int64_t misread[2], struct diag *reterr)
{
    bool hex, is_long = false, is_float = false;
    size_t n = (size_t)(e - s);
    char tok[80];
    char *end;

    misread[0] = misread[1] = 0;
    if (n >= sizeof(tok)) {
        diag_set(reterr, path, line, "number too long");
        return -EINVAL;
    }
    memcpy(tok, s, n);
    tok[n] = '\0';
    hex = (tok[0] == '0' && (tok[1] == 'x' || tok[1] == 'X')) ||
          ((tok[0] == '-' || tok[0] == '+') && tok[1] == '0' && (tok[2] == 'x' || tok[2] == 'X'));
    while (n && tok[n - 1] == 'L') {
        is_long = true;
        tok[--n] = '\0';
    }
    if (!hex)
        is_float = strpbrk(tok, ".eE") != NULL;
    if (is_float)
        return 0;
    errno = 0;
    if (hex) {
        unsigned long long v = strtoull(tok, &end, 16);

        if (errno == ERANGE || (!is_long && v > INT32_MAX) || (is_long && v > INT64_MAX)) {
            misread[0] = (int64_t)v;
            misread[1] = (int32_t)(uint32_t)v;
            diag_set(reterr, path, line, "integer %s is out of range%s", tok,
                     is_long ? "" : " for 32 bits (add an L suffix for 64-bit values)");
            return -EINVAL;
        }
        return 0;
    }
    {
        long long v = strtoll(tok, &end, 10);

        if (errno == ERANGE || (!is_long && (v > INT32_MAX || v < INT32_MIN))) {
            misread[0] = v;
            misread[1] = (int32_t)(uint32_t)(uint64_t)v;
            diag_set(reterr, path, line, "integer %s is out of range%s", tok,
                     is_long || errno == ERANGE ? "" :
                     " for 32 bits: libconfig would misread it; write it with an L suffix");
            return -EINVAL;
        }
    }
    return 0;
}

static bool conf_misread_has(const struct conf_misread *m, unsigned line, int64_t v)
{
    for (size_t i = 0; i < m->n; i++) {
        if (m->e[i].line == line && (m->e[i].v[0] == v || m->e[i].v[1] == v))
            return true;
    }
    return false;
}

/*
 * Removes every integer under @s that holds a value libconfig misread: the
 * number is already reported, and its misread value would only add a
 * misleading follow-up ("must not be negative" for 4294967295) while the
 * rest of the file is still checked.
 */
void conf_drop_misread(config_setting_t *s, unsigned parent_line,
                       const struct conf_misread *bad)
{
    for (int i = config_setting_length(s) - 1; i >= 0; i--) {
        config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        unsigned line = config_setting_source_line(e) ? config_setting_source_line(e) :
                        parent_line;
        int type = config_setting_type(e);

        if ((type == CONFIG_TYPE_INT || type == CONFIG_TYPE_INT64) &&
            conf_misread_has(bad, line, config_setting_get_int64(e)))
            config_setting_remove_elem(s, (unsigned)i);
        else if (config_setting_is_aggregate(e))
            conf_drop_misread(e, line, bad);
    }
}

/*
 * Walks libconfig text that already parsed, tokenising strings, comments,
 * names and numbers as libconfig's scanner does, and checks every number.
 */
int conf_check_numbers(const char *path, const char *text, struct conf_misread *bad,
                       struct diag *reterr)
{
    const char *p = text;
    unsigned line = 1;
    int r = 0;

    while (*p) {
        if (*p == '\n') {
            line++;
            p++;
        } else if (*p == '#' || (p[0] == '/' && p[1] == '/')) {
            while (*p && *p != '\n')
                p++;
        } else if (p[0] == '/' && p[1] == '*') {
            for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++)
                line += *p == '\n';
            if (*p)
                p += 2;
        } else if (*p == '"') {
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1])
                    p++;
                line += *p == '\n';
            }
            if (*p)
                p++;
        } else if (conf_is_name_start(*p)) {
            while (conf_is_name_char(*p))
                p++;
        } else if (conf_is_digit(*p) || ((*p == '-' || *p == '+' || *p == '.') &&
                                           (conf_is_digit(p[1]) || p[1] == '.'))) {
            const char *s = p;
            int64_t misread[2];

            p++;
            while (conf_is_digit(*p) || (*p >= 'a' && *p <= 'f') ||
                   (*p >= 'A' && *p <= 'F') || *p == 'x' || *p == 'X' || *p == '.' ||
                   *p == 'L' || ((*p == '-' || *p == '+') && (p[-1] == 'e' || p[-1] == 'E')))
                p++;
            if (conf_check_number(path, line, s, p, misread, reterr) < 0) {
                r = -EINVAL;
                if (bad->n < CONF_MISREAD_MAX) {
                    bad->e[bad->n].line = line;
                    memcpy(bad->e[bad->n++].v, misread, sizeof(misread));
                }
            }
        } else {
            p++;
        }
    }
    return r;
}
