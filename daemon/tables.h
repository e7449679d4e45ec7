/* SPDX-License-Identifier: MIT */
/*
 * tables: divvyd's three counter tables as one set (docs/daemon.md
 * "Counter tables", docs/dev/shm.md): the fast-path table, the private table and
 * the privileged table that only source = privileged rules use, so that no
 * request of an unprivileged peer can take a login rule's counter.  Owns
 * nothing: main.c opens and closes the tables.  Also carries counters over
 * when a rule's table changes (fast_path or source toggled in a reload, or
 * in the config between two runs), with the table_move() CAS API only.
 * Any divvy-fast member writes the fast table's slots, so a counter leaves
 * it only for a rule that was fast_path in the generation that owned it
 * (fastrules.h), never for a rule the slot merely names.
 */
#ifndef DIVVY_TABLES_H
#define DIVVY_TABLES_H

#include <stdbool.h>

#include "fastrules.h"
#include "rules.h"
#include "table.h"

struct tables {
    struct table *fast;         /* fast_path rules (shared with clients) */
    struct table *priv;         /* every other rule ... */
    struct table *privileged;   /* ... except source = privileged ones */
};

/* What a copy pass recorded, per source table, for the move that follows
 * (table_move()).  Zero-initialise; tables_log_free(). */
struct tables_log {
    struct table_move_log t[3];         /* fast, private, privileged */
};
void tables_log_free(struct tables_log *log);

/*
 * Moves the live counters of every rule of @rules that sit in a table other
 * than the one the rule now uses (eval_table()) into that table, so that the
 * actors keep their credit: one walk of each table.  A counter of the fast
 * table moves only when @trusted (the fast_path rules of the generation
 * that owned the fast table until now: the previous rules at a reload, the
 * record of the last run at a start) holds its rule id and algorithm, and
 * never into the privileged table; NULL trusts nothing there.  With @remove
 * false the counters are only copied (the source keeps serving hits decided
 * under the previous rules) and @log (optional) records what was copied;
 * with @remove true each is merged into its new table (exactly for window
 * counters the copy recorded in @log: the hits since are added) and taken
 * out of its old one by a CAS (see table_move()).  With @remove, logs what
 * it moved and, as a warning, what it could not (long actors digested with
 * another key, a full destination, fast-table slots of rules that were not
 * fast_path) with @who.  Not concurrent with itself (the reload lock, or
 * startup).  Returns 0 or -ENOMEM.
 */
int tables_settle(const struct tables *tb, const struct rules *rules,
                  const struct fastrules *trusted, bool remove, struct tables_log *log,
                  const char *who);

/*
 * The fast_path rules of @rules (the counters they keep live in tb->fast),
 * as generation @generation's, into *ret (sorted; fastrules_free()).
 * 0 or -ENOMEM (*ret then holds nothing).
 */
int tables_fast_rules(const struct tables *tb, const struct rules *rules, uint64_t generation,
                      struct fastrules *ret);

/*
 * 1 when some rule of @rules keeps its counters in another table than the
 * rule of the same id (and algorithm) in @old: a reload from @old to @rules
 * needs tables_settle().  0 when none does, or -ENOMEM.
 */
int tables_changed(const struct tables *tb, const struct rules *old, const struct rules *rules);

#endif
