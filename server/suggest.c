/* SPDX-License-Identifier: MIT */
/* suggest: the closest known name to a mistyped one (see suggest.h). */
#include <ctype.h>
#include <string.h>

#include "suggest.h"

#define SUGGEST_LEN_MAX 64      /* longer words are not typos of a setting name */

void suggest_init(struct suggest *s, const char *word)
{
    s->word = word;
    s->best = NULL;
    s->dist = 0;
}

static int suggest_lower(char c)
{
    return tolower((unsigned char)c);
}

/* Optimal string alignment distance between @a and @b, case ignored. */
static unsigned suggest_distance(const char *a, size_t na, const char *b, size_t nb)
{
    unsigned d[SUGGEST_LEN_MAX + 1][SUGGEST_LEN_MAX + 1];

    for (size_t i = 0; i <= na; i++)
        d[i][0] = (unsigned)i;
    for (size_t j = 0; j <= nb; j++)
        d[0][j] = (unsigned)j;
    for (size_t i = 1; i <= na; i++) {
        for (size_t j = 1; j <= nb; j++) {
            unsigned cost = suggest_lower(a[i - 1]) != suggest_lower(b[j - 1]);
            unsigned v = d[i - 1][j - 1] + cost;

            if (d[i - 1][j] + 1 < v)
                v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && suggest_lower(a[i - 1]) == suggest_lower(b[j - 2]) &&
                suggest_lower(a[i - 2]) == suggest_lower(b[j - 1]) && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    }
    return d[na][nb];
}

void suggest_offer(struct suggest *s, const char *name)
{
    size_t na, nb;
    unsigned dist;

    if (!name || !s->word)
        return;
    na = strlen(s->word);
    nb = strlen(name);
    if (na > SUGGEST_LEN_MAX || nb > SUGGEST_LEN_MAX)
        return;
    dist = suggest_distance(s->word, na, name, nb);
    if (!s->best || dist < s->dist) {
        s->best = name;
        s->dist = dist;
    }
}

void suggest_offer_all(struct suggest *s, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        suggest_offer(s, names[i]);
}

const char *suggest_best(const struct suggest *s)
{
    size_t len = s->word ? strlen(s->word) : 0;

    /* At most 2 edits, and at most one per 3 characters ("db" is no "port"). */
    if (!s->best || s->dist == 0 || s->dist > 2 || s->dist * 3 > len)
        return NULL;
    return s->best;
}
