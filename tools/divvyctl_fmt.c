/* SPDX-License-Identifier: MIT */
/*
 * divvyctl's reply fields and output formats: splits divvyd's name=value
 * reply lines (docs/protocol.md grammar), turns their values into JSON, and
 * prints JSON documents and human durations.  No I/O but stdout.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "divvyctl.h"

/* ---- reply lines ----------------------------------------------------------- */

bool ctl_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

/* Reads one string at *p (quoted or unquoted; an unquoted one ends at
 * whitespace or, when @stop_eq, at '='), NUL-terminates it in place. */
static char *ctl_read_string(char **p, bool stop_eq)
{
    char *s = *p, *start;

    if (*s == '"') {
        start = ++s;
        while (*s && *s != '"')
            s++;
        if (*s != '"')
            return NULL;
        *s++ = '\0';
        *p = s;
        return start;
    }
    start = s;
    while (*s && !ctl_is_space(*s) && *s != '"' && !(stop_eq && *s == '='))
        s++;
    *p = s;
    return start;
}

int ctl_fields_parse(const char *line, struct ctl_fields *ret)
{
    size_t len = strlen(line);
    char *p;

    if (len >= sizeof(ret->buf))
        return -EPROTO;
    memcpy(ret->buf, line, len + 1);
    ret->n = 0;
    p = ret->buf;
    for (;;) {
        char *name, *value, c;

        while (ctl_is_space(*p))
            p++;
        if (!*p)
            return 0;
        if (ret->n == CTL_FIELDS_MAX)
            return -E2BIG;
        name = ctl_read_string(&p, true);
        if (!name || *p != '=')
            return -EPROTO;
        *p++ = '\0';
        value = ctl_read_string(&p, false);
        if (!value)
            return -EPROTO;
        c = *p;
        if (c && !ctl_is_space(c))
            return -EPROTO;
        if (c)
            *p++ = '\0';
        if (!name[0])
            return -EPROTO;
        ret->name[ret->n] = name;
        ret->value[ret->n] = value;
        ret->n++;
    }
}

const char *ctl_field(const struct ctl_fields *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++) {
        if (strcmp(f->name[i], name) == 0)
            return f->value[i];
    }
    return NULL;
}

int ctl_field_u64(const struct ctl_fields *f, const char *name, uint64_t *ret)
{
    const char *v = ctl_field(f, name);
    unsigned long long x;
    char *end;

    if (!v)
        return -ENOENT;
    if (v[0] < '0' || v[0] > '9')
        return -EPROTO;
    errno = 0;
    x = strtoull(v, &end, 10);
    if (errno || *end)
        return -EPROTO;
    *ret = x;
    return 0;
}

int ctl_json_print(json_t *doc)
{
    int r;

    if (!doc)
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    r = json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(doc);
    if (r < 0 || fputc('\n', stdout) == EOF)
        return ctl_fail(CTL_EXIT_FAILURE, "writing JSON: %s", strerror(errno));
    return CTL_EXIT_OK;
}

void ctl_fmt_duration(uint64_t s, char *buf, size_t size)
{
    if (s < 60)
        snprintf(buf, size, "%" PRIu64 "s", s);
    else if (s < 3600)
        snprintf(buf, size, "%" PRIu64 "m %02" PRIu64 "s", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, size, "%" PRIu64 "h %02" PRIu64 "m", s / 3600, s / 60 % 60);
    else
        snprintf(buf, size, "%" PRIu64 "d %02" PRIu64 "h", s / 86400, s / 3600 % 24);
}

/* A JSON value for a reply field: integers as numbers, true/false as
 * booleans, everything else as a string. */
json_t *ctl_json_value(const char *v)
{
    unsigned long long x;
    char *end;

    if (strcmp(v, "true") == 0)
        return json_true();
    if (strcmp(v, "false") == 0)
        return json_false();
    if (v[0] >= '0' && v[0] <= '9' && strlen(v) < 19) {
        errno = 0;
        x = strtoull(v, &end, 10);
        if (!errno && !*end)
            return json_integer((json_int_t)x);
    }
    return json_string(v);
}
