/* SPDX-License-Identifier: MIT */
/* diag: collects config problems with their file and line (see diag.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "diag.h"

void diag_init(struct diag *d)
{
    if (!d)
        return;
    d->n = 0;
    d->dropped = 0;
}

void diag_set(struct diag *d, const char *file, unsigned line, const char *fmt, ...)
{
    struct diag_entry *e;
    va_list ap;

    if (!d)
        return;
    if (d->n >= DIAG_MAX) {
        d->dropped++;
        return;
    }
    e = &d->e[d->n++];
    snprintf(e->file, sizeof(e->file), "%s", file ? file : "");
    e->line = line;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
}

int diag_format(const struct diag *d, size_t i, char *buf, size_t size)
{
    return diag_format_as(d, i, "", buf, size);
}

int diag_format_as(const struct diag *d, size_t i, const char *kind, char *buf, size_t size)
{
    const struct diag_entry *e;

    if (!d || i >= d->n)
        return snprintf(buf, size, "%s", "");
    e = &d->e[i];
    if (e->file[0] && e->line)
        return snprintf(buf, size, "%s:%u: %s%s", e->file, e->line, kind, e->msg);
    if (e->file[0])
        return snprintf(buf, size, "%s: %s%s", e->file, kind, e->msg);
    return snprintf(buf, size, "%s%s", kind, e->msg);
}
