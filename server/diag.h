/* SPDX-License-Identifier: MIT */
/*
 * diag: a small list of "file:line: message" problems, filled by the config
 * loaders and the rule validator so that a rejected config can name every
 * problem at once.  Never logs; the caller decides where the text goes.
 */
#ifndef DIVVY_DIAG_H
#define DIVVY_DIAG_H

#include <stddef.h>

#define DIAG_MAX       32      /* problems kept; later ones are only counted */
#define DIAG_FILE_MAX  256
#define DIAG_MSG_MAX   384

struct diag_entry {
    char file[DIAG_FILE_MAX];
    unsigned line;             /* 0: not tied to a line */
    char msg[DIAG_MSG_MAX];
};

struct diag {
    size_t n;                  /* entries stored (<= DIAG_MAX) */
    size_t dropped;            /* problems beyond DIAG_MAX */
    struct diag_entry e[DIAG_MAX];
};

/* Empties @d.  NULL-safe. */
void diag_init(struct diag *d);

/* Appends one problem.  NULL-safe (a NULL @d drops it); @file may be NULL. */
void diag_set(struct diag *d, const char *file, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * Writes entry @i as "file:line: msg" (or "file: msg" when line is 0) into
 * @buf, always NUL-terminated.  Returns the length it wanted (snprintf-like).
 */
int diag_format(const struct diag *d, size_t i, char *buf, size_t size);
/* diag_format() with @kind (e.g. "warning: ") before the message, as
 * compilers print warnings for editors to find. */
int diag_format_as(const struct diag *d, size_t i, const char *kind, char *buf, size_t size);

#endif
