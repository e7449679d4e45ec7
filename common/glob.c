/* SPDX-License-Identifier: MIT */
/*
 * glob: parsing, matching and inclusion of rule value patterns (glob.h,
 * docs/rules.md).  Matching and inclusion share one matcher that walks a
 * pattern against a "text" of tokens: plain bytes for glob_match(), the
 * tokens of a second pattern for glob_covers().
 */
#include <errno.h>
#include <stdint.h>

#include "glob.h"

#define TOK_STAR (-1)

/*
 * Decodes the token at @s[@i] (i < len) and stores where the next one starts
 * in *next.  A literal byte is returned as 0..255, an unescaped star as
 * TOK_STAR.  With !@escaped the text is raw bytes, so every byte is literal.
 */
static int tok_at(const char *s, size_t len, size_t i, bool escaped, size_t *next)
{
    unsigned char c = (unsigned char)s[i];

    *next = i + 1;
    if (!escaped)
        return c;
    if (c == '\\' && i + 1 < len) {
        *next = i + 2;
        return (unsigned char)s[i + 1];
    }
    return c == '*' ? TOK_STAR : c;
}

/*
 * Greedy matching with backtracking to the last star only.  This is exact
 * for patterns made of single-symbol literals and stars over any alphabet:
 * a later star can absorb whatever an earlier one would, so only the most
 * recent star ever needs to try a longer run.  Text stars (glob_covers)
 * equal no pattern literal, so only a pattern star consumes them.
 */
static bool wild_match(const char *p, size_t plen, const char *t, size_t tlen, bool t_escaped)
{
    size_t pi = 0, ti = 0, star_p = SIZE_MAX, star_t = 0, pn, tn;
    int pc, tc;

    while (ti < tlen) {
        tc = tok_at(t, tlen, ti, t_escaped, &tn);
        if (pi < plen) {
            pc = tok_at(p, plen, pi, true, &pn);
            if (pc == TOK_STAR) {
                star_p = pn;
                star_t = ti;
                pi = pn;
                continue;
            }
            if (pc == tc) {
                pi = pn;
                ti = tn;
                continue;
            }
        }
        if (star_p == SIZE_MAX)
            return false;
        /* The last star swallows one more text token; retry from there. */
        (void)tok_at(t, tlen, star_t, t_escaped, &star_t);
        ti = star_t;
        pi = star_p;
    }
    while (pi < plen) {
        if (tok_at(p, plen, pi, true, &pn) != TOK_STAR)
            return false;
        pi = pn;
    }
    return true;
}

int glob_parse(const char *pat, size_t len)
{
    int kind = GLOB_EXACT;

    for (size_t i = 0; i < len; i++) {
        if (pat[i] == '\\') {
            if (i + 1 >= len || (pat[i + 1] != '*' && pat[i + 1] != '\\'))
                return -EINVAL;
            i++;
        } else if (pat[i] == '*') {
            kind = GLOB_WILD;
        }
    }
    return kind;
}

size_t glob_unescape(const char *pat, size_t len, char *buf)
{
    size_t n = 0;

    for (size_t i = 0; i < len; i++) {
        if (pat[i] == '\\' && i + 1 < len)
            i++;
        buf[n++] = pat[i];
    }
    buf[n] = '\0';
    return n;
}

size_t glob_prefix(const char *pat, size_t len, char *buf)
{
    size_t n = 0;

    for (size_t i = 0, next; i < len; i = next) {
        int c = tok_at(pat, len, i, true, &next);

        if (c == TOK_STAR)
            break;
        buf[n++] = (char)c;
    }
    return n;
}

bool glob_match(const char *pat, size_t plen, const char *s, size_t slen)
{
    return wild_match(pat, plen, s, slen, false);
}

bool glob_covers(const char *a, size_t alen, const char *b, size_t blen)
{
    return wild_match(a, alen, b, blen, true);
}
