/* SPDX-License-Identifier: MIT */
/*
 * reload_diff: what a reload changes, as RELOAD's report lines
 * (docs/protocol.md "RELOAD"): rules added, removed and changed (which
 * fields), whether each rule's counters are kept, moved to another table or
 * started afresh, and the settings that changed but take effect only after a
 * restart, by name.  Pure: compares two compiled rule tables and two
 * settings snapshots; reload.c logs and replies with the result.
 */
#ifndef DIVVY_RELOAD_DIFF_H
#define DIVVY_RELOAD_DIFF_H

#include <stdbool.h>
#include <stddef.h>

#include "rules.h"

struct config;

/* The settings a reload does not apply (every one but the rules, store.mode
 * and include_dir), each by its config name with its value as text. */
struct reload_setting {
    const char *name;           /* "server.listen", "metrics.listen", ... (static) */
    char *value;                /* as text; a secret's only says whether it is set */
};
struct reload_settings {
    struct reload_setting *s;
    size_t n;
};
int reload_settings_take(const struct config *cfg, struct reload_settings *ret);
void reload_settings_free(struct reload_settings *s);

#define RELOAD_DIFF_LINES_MAX 200   /* report lines kept; the rest only counted */

struct reload_diff {
    char **lines;               /* k=v report lines, bounded by RELOAD_DIFF_LINES_MAX */
    size_t n;
    size_t dropped;             /* lines past the bound */
    size_t added, removed, changed, restart;
};

/*
 * Fills @ret (zero it first) with the changes from @old to @now (rules and
 * settings; @old_set the settings running, @now_set those of the file).
 * -ENOMEM (@ret then holds what was built; reload_diff_free() it).
 */
int reload_diff(const struct rules *old, const struct rules *now,
                const struct reload_settings *old_set, const struct reload_settings *now_set,
                struct reload_diff *ret);
void reload_diff_free(struct reload_diff *d);

#endif
