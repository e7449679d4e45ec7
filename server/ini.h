/* SPDX-License-Identifier: MIT */
/*
 * ini: a small reader for the INI dialect of node's `ini` package, which
 * divvy's .ini configs are written in (docs/config.md, "divvy INI").  It
 * turns a text buffer into an ordered list of sections, each with an ordered
 * list of key/value entries, every one with its line number.  Values have
 * node-ini's treatment: whitespace trimmed, matching surrounding quotes
 * removed ("..." decoded as a JSON string), and for unquoted text `;` or `#`
 * starting an inline comment (`\;`, `\#` and `\\` escape them).  Lines of
 * any length are read.  Stricter than node-ini: a setting outside a section,
 * a malformed section header, a line without a key, a key repeated within
 * a section and a repeated section name are errors with file:line.
 * Owns every string it returns.  Never logs; thread-safe (no shared state).
 */
#ifndef DIVVY_INI_H
#define DIVVY_INI_H

#include <stddef.h>

#include "diag.h"

struct ini_entry {
    char *key;
    char *value;            /* NULL: the line had no '=' (node-ini's `true`) */
    unsigned line;
};

struct ini_section {
    char *name;             /* decoded text between the brackets */
    unsigned line;
    struct ini_entry *entry;
    size_t n_entry;
    size_t cap;
};

struct ini {
    struct ini_section *section;
    size_t n_section;
    size_t cap;
};

/*
 * Parses @len bytes of @text (need not be NUL-terminated; a NUL byte is an
 * error).  A leading UTF-8 byte order mark is skipped; lines end at LF, CRLF
 * or a lone CR.  @file only names the text in @reterr.  On success *ret is a
 * new struct ini the caller frees with ini_free(); on failure *ret is
 * untouched and @reterr says why.  -EINVAL (bad input), -ENOMEM.
 */
int ini_parse(const char *text, size_t len, const char *file, struct ini **ret,
              struct diag *reterr);

/* Frees @ini and everything it owns.  NULL-safe. */
void ini_free(struct ini *ini);

#endif
