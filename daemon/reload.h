/* SPDX-License-Identifier: MIT */
/*
 * reload: owns the daemon's current compiled rules and publishes new ones
 * under RCU (liburcu, memb flavour).  A reload parses, validates and
 * compiles the config file off to the side; only a table that compiled
 * becomes current, with one pointer swap; the old one is freed after a
 * grace period.  A rejected config leaves the running rules in place.
 * Readers: rcu_read_lock(); reload_current(); ... rcu_read_unlock().
 */
#ifndef DIVVY_RELOAD_H
#define DIVVY_RELOAD_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "reload_diff.h"
#include "rules.h"
#include "table.h"
#include "tables.h"

struct reload_state {
    struct rules *rules;
    uint64_t generation;
    /* struct rcu_head lives in reload.c's wrapper */
};

struct reload;

/*
 * Compiles the rules of the startup config @cfg (only read; problems in
 * @reterr) and publishes them: inside the daemon under RCU, and for
 * fast-path clients as the immutable file <@state_dir>/rules.<generation>
 * whose generation is then stored in @fast's header (docs/dev/shm.md).
 * Generations continue from the one @fast already announces.  @config_path is
 * re-read by every reload; a reload that changes @cfg's server/table
 * settings says they need a restart.  -EINVAL (invalid rules), -ENOMEM, or
 * -errno writing the file.
 */
int reload_new(const char *config_path, const struct config *cfg, const char *state_dir,
               struct table *fast, struct reload **ret, struct diag *reterr);

/*
 * Gives the reloads the daemon's counter tables (borrowed until
 * reload_free()), so that a reload that moves a rule to another table
 * (fast_path or source changed) carries its counters over.  Also moves, at
 * once, the counters the current rules find in the wrong table (a config
 * changed between two runs): those of the fast table only for the rules the
 * last run recorded as fast_path in <state_dir>/fast.rules (fastrules.h),
 * which then records the current rules'; every reload rewrites it.  Call
 * before any reader runs.  0 or -ENOMEM.
 */
int reload_set_tables(struct reload *rl, const struct tables *tb);

/* Unpublishes and frees after the last grace period (rcu_barrier).  NULL-safe.
 * No reader may run any more. */
void reload_free(struct reload *rl);

/* The current rules; call inside rcu_read_lock() and do not keep the pointer
 * past rcu_read_unlock(). */
const struct reload_state *reload_current(struct reload *rl);

/*
 * Re-reads the config file and, if it is valid, publishes it.  Serialised
 * with other reloads; never blocks a reader.  @who names the requester for
 * the log line ("SIGHUP", "uid 0").  On success *ret_generation and
 * *ret_rules are set; on failure @errbuf holds "file:line: reason" (the first
 * problem, plus "(and N more)") and the old rules stay.  Logs the outcome.
 * Returns 0 or -EINVAL/-ENOENT/-ENOMEM.
 */
int reload_run(struct reload *rl, const char *who, uint64_t *ret_generation, size_t *ret_rules,
               char *errbuf, size_t errsize);

/* What reload_apply() does besides a plain reload. */
struct reload_opts {
    bool dry_run;                       /* load, validate, compare; publish nothing */
    const struct config_edit *edit;     /* a drop-in to add or remove (the rules service) */
};

struct reload_result {
    bool applied;                       /* false: a dry run */
    uint64_t generation;                /* the new one; a dry run: the running one */
    size_t rules;                       /* in the new config */
    struct reload_diff diff;            /* from the running rules and settings */
};

/*
 * reload_run() with @opts (NULL: none) and what changed in *@ret (zero it
 * first; reload_result_free() it whatever the outcome).  A dry run loads,
 * validates and compiles exactly as a reload does, then stops: nothing is
 * written, published or counted.  With @opts->edit the config is loaded as if
 * the drop-in change were made; only if it is valid is the drop-in written
 * (temporary file and rename) and the result published, so a rejected edit
 * leaves no file behind.  Logs one line per change (bounded) and names the
 * settings that need a restart.  0, or as reload_run(), plus -EEXIST/-ENOENT
 * for an edit of a drop-in that exists/does not, -ENOTDIR without include_dir.
 */
int reload_apply(struct reload *rl, const char *who, const struct reload_opts *opts,
                 struct reload_result *ret, char *errbuf, size_t errsize);
void reload_result_free(struct reload_result *res);

/* The TLS listeners' context holder (tls.h): each reload reads server.tls
 * again and installs a new context, or is refused (the old one stays). */
struct tls;
void reload_set_tls(struct reload *rl, struct tls *tls);

/* The decision log's hook (dlog_writer_rules()): @fn(@arg, rules, generation)
 * runs before a reload publishes new rules, under the reload's lock.  Set
 * before any reload may run. */
typedef void reload_rules_fn(void *arg, const struct rules *rules, uint64_t generation);
void reload_set_rules_hook(struct reload *rl, reload_rules_fn *fn, void *arg);

/* The main config file's path, as given (constant: any thread). */
const char *reload_config_path(const struct reload *rl);

/* Reload counters for STATS. */
void reload_counts(struct reload *rl, uint64_t *ret_ok, uint64_t *ret_rejected);

#endif
