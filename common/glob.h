/* SPDX-License-Identifier: MIT */
/*
 * glob: the value patterns of rule match sets (docs/rules.md "Values").  A
 * pattern is bytes in which an unescaped '*' matches any run of bytes
 * (empty included); "\*" is a literal star and "\\" a literal backslash; any
 * other backslash makes the pattern malformed.  No other byte is special.
 * Matching is the greedy two-pointer algorithm (backtrack to the last star
 * only), O(pattern x text) at worst, never exponential.  Pure functions,
 * thread-safe, no allocation, never logs.
 */
#ifndef DIVVY_GLOB_H
#define DIVVY_GLOB_H

#include <stdbool.h>
#include <stddef.h>

enum glob_kind {
    GLOB_EXACT = 0,             /* no unescaped star: one value (after unescaping) */
    GLOB_WILD = 1,              /* at least one unescaped star */
};

/*
 * Classifies the pattern @pat[0..@len): GLOB_EXACT or GLOB_WILD; -EINVAL
 * when it is malformed (a backslash not followed by '*' or '\').
 */
int glob_parse(const char *pat, size_t len);

/*
 * Writes @pat with its escapes removed into @buf (room for @len + 1 bytes;
 * always NUL-terminated) and returns the length written.  Meant for
 * GLOB_EXACT patterns; a stray backslash is copied as is.
 */
size_t glob_unescape(const char *pat, size_t len, char *buf);

/*
 * Writes the literal bytes of @pat before its first unescaped star, escapes
 * removed, into @buf (room for @len bytes; not NUL-terminated) and returns
 * how many: every text glob_match() accepts starts with them.  The whole
 * pattern, unescaped, when it has no star.  Reads escapes as glob_match()
 * does.
 */
size_t glob_prefix(const char *pat, size_t len, char *buf);

/*
 * True when the text @s[0..@slen) is in the language of @pat.  Safe on any
 * input: a malformed escape "\x" reads as literal 'x', a trailing
 * backslash as a literal backslash.
 */
bool glob_match(const char *pat, size_t plen, const char *s, size_t slen);

/*
 * True when every text @b matches is also matched by @a: L(b) is a subset of
 * L(a).  Decided by matching @a against @b read as a word over bytes plus
 * one symbol per star of @b, which only a star of @a may consume (sound;
 * complete whenever some byte value does not occur in @a: docs/rules.md).
 */
bool glob_covers(const char *a, size_t alen, const char *b, size_t blen);

#endif
