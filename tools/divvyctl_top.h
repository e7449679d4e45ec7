/* SPDX-License-Identifier: MIT */
/*
 * divvyctl top and locked: what their files share.  divvyctl_top.c fetches
 * divvyd's live counters (the admin verb COUNTERS, docs/protocol.md) into
 * rows, with each actor split by the actor keys RULES reports, and shows
 * them refreshing; divvyctl_top_term.c owns the terminal while top runs;
 * divvyctl_locked.c lists the counters with no credit left from the same
 * rows.
 */
#ifndef DIVVY_DIVVYCTL_TOP_H
#define DIVVY_DIVVYCTL_TOP_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <termios.h>

#include "divvyctl.h"

#define TOP_FIELD_MAX     128

/* The actor keys of each rule, by id, from RULES (all malloc'd), and the
 * name top and locked show: its label, else its match as "{k=v k=v}" (a
 * hex id tells a reader nothing), "default" for the default rule. */
struct top_rule {
    char *id;
    char *keys;
    char *name;
};

struct top_counter {
    char rule[TOP_FIELD_MAX];
    char actor[TOP_FIELD_MAX];
    char shown[TOP_FIELD_MAX * 8];  /* actor split into key=value pairs */
    char name[TOP_FIELD_MAX * 4];   /* the rule as shown (struct top_rule's name) */
    uint64_t credit, used, limit, reset;
    uint64_t retry;                 /* seconds until the next credit (0: credit left) */
};

struct top_state {
    const char *rule;               /* --rule, or NULL */
    long max;                       /* --max, 0: automatic */
    bool sort_used;
    bool once;
    double interval;
    struct top_rule *rules;
    size_t n_rules;
    uint64_t generation;            /* of rules[]; UINT64_MAX: none */
    uint64_t last_hits;
    uint64_t last_ms;
    struct top_counter *rows;
    size_t n_rows;
};

/* ---- divvyctl_top.c: the rows ------------------------------------------ */

/* CLOCK_MONOTONIC in milliseconds. */
uint64_t top_now_ms(void);
void top_rules_free(struct top_rule *rules, size_t n);
/* (Re)loads the rule id -> actor keys table. */
int top_load_rules(struct ctl *ctl, struct top_state *st);
/* Undoes rules_actor()'s escaping (%2C, %25) of one value of a several-key
 * actor: @len bytes of @s into @out, NUL-terminated; its length. */
size_t top_unescape(const char *s, size_t len, char *out, size_t size);
/* Fills @c->shown and @c->name and, when @fields is not NULL, the actor's
 * key -> value map. */
void top_split_actor(const struct top_state *st, struct top_counter *c, json_t *fields);
/* Fetches COUNTERS into st->rows.  @exhausted: only counters with no credit. */
int top_fetch(struct ctl *ctl, struct top_state *st, bool exhausted, long max);
/* st->rows as a JSON array (a new reference). */
json_t *top_json_rows(const struct top_state *st);
/* Whether @id can be a rule label or hex id (for --rule). */
bool top_valid_rule(const char *id);

/* ---- divvyctl_top_term.c: the terminal --------------------------------- */

struct top_term {
    bool screen;                /* stdout is a terminal: redraw in place */
    bool keys;                  /* stdin is a terminal in raw mode */
    struct termios saved;
    int sigfd;
    sigset_t oldmask;
};

/* Blocks SIGINT, SIGTERM, SIGHUP and SIGWINCH into a signalfd and, when
 * @interactive and stdout is a terminal, switches to the alternate screen
 * and puts stdin in raw mode.  -errno. */
int top_term_start(struct top_term *t, bool interactive);
/* Restores the terminal and the signal mask. */
void top_term_stop(struct top_term *t);
/* Waits up to @ms for a key or a signal: 1 quit, 2 toggle sort, 3 redraw now, 0 timeout. */
int top_wait(struct top_term *t, int ms);
/* The terminal's size (24x80 when unknown). */
void top_winsize(int *rows, int *cols);
/* Prints one line cut to @cols columns (0: no cut), then a newline. */
void top_putf(FILE *f, int cols, bool screen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
