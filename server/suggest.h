/* SPDX-License-Identifier: MIT */
/*
 * suggest: "did you mean" for a mistyped setting name.  The caller offers
 * every name it knows, one by one, and asks for the closest: the one at the
 * smallest edit distance (insertions, deletions, substitutions and swaps of
 * two neighbours, case ignored), if that distance is small for the word's
 * length.  Shared by every config loader (config.c, config_divvy.c) so each
 * format hints the same way.  No allocation, no state beyond the struct.
 */
#ifndef DIVVY_SUGGEST_H
#define DIVVY_SUGGEST_H

#include <stddef.h>

struct suggest {
    const char *word;           /* what the user wrote */
    const char *best;           /* closest name offered so far, or NULL */
    unsigned dist;              /* its distance */
};

void suggest_init(struct suggest *s, const char *word);

/* Offers one known name (NULL-safe); keeps it when it is the closest yet. */
void suggest_offer(struct suggest *s, const char *name);

/* Offers each of @n names of @names. */
void suggest_offer_all(struct suggest *s, const char *const *names, size_t n);

/* The closest name if it is close enough to be a typo of the word, else NULL. */
const char *suggest_best(const struct suggest *s);

#endif
