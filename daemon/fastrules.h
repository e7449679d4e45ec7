/* SPDX-License-Identifier: MIT */
/*
 * fastrules: which rules were fast_path in the generation that owns the
 * fast-path table, the one thing that decides which of its counters may ever
 * leave it (docs/dev/shm.md "Which counters leave the fast table").  Every
 * divvy-fast member writes the fast table's slots, so a slot there says
 * nothing divvyd may believe about the rule it names: a counter leaves the
 * fast table (tables_settle()) only for a rule that was fast_path, with the
 * same algorithm, in the generation that owned the slot, and over which the
 * member was therefore trusted anyway.  Within one run divvyd knows the
 * previous generation's rules; across a restart it reads this record, a
 * daemon-only file (<state_dir>/fast.rules, mode 0600) that it writes after
 * each publication of rules, never anything in the member-writable memfd.
 * No global state; never logs.
 */
#ifndef DIVVY_FASTRULES_H
#define DIVVY_FASTRULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rules.h"

#define FASTRULES_FILE  "fast.rules"    /* in the state directory, 0600 */

struct fastrules_rule {
    uint64_t id;
    uint32_t algo;              /* enum rules_algo: part of a counter's key */
    uint32_t zero;
};

/* The fast_path rules of one generation.  Zero-initialise; fastrules_free(). */
struct fastrules {
    uint64_t generation;
    size_t n, cap;
    struct fastrules_rule *v;   /* sorted by id, then algo, once fastrules_sort() ran */
};

/* Appends rule @id of algorithm @algo.  0 or -ENOMEM. */
int fastrules_add(struct fastrules *fr, uint64_t id, enum rules_algo algo);

/* Sorts the entries (fastrules_has() needs it). */
void fastrules_sort(struct fastrules *fr);

/* Whether rule @id with @algo is in @fr (NULL: nothing is). */
bool fastrules_has(const struct fastrules *fr, uint64_t id, enum rules_algo algo);

/*
 * Replaces <@state_dir>/fast.rules with @fr, atomically (persist_save():
 * a new file, mode 0600, renamed over the old one).  0 or -errno.
 */
int fastrules_save(const char *state_dir, const struct fastrules *fr);

/*
 * Reads <@state_dir>/fast.rules into *ret (sorted), freed with
 * fastrules_free().  -ENOENT (none), -EBADMSG (not a record of this layout:
 * its magic, version, size or entries), -ENOMEM, another -errno; *ret is
 * left untouched unless 0 is returned.
 */
int fastrules_load(const char *state_dir, struct fastrules *ret);

/* Removes <@state_dir>/fast.rules: from then until the next save, nothing
 * the fast table holds may leave it.  0 (also when there was none) or -errno. */
int fastrules_forget(const char *state_dir);

/* Frees the entries and zeroes @fr.  NULL-safe. */
void fastrules_free(struct fastrules *fr);

#endif
