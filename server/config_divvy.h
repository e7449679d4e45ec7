/* SPDX-License-Identifier: MIT */
/*
 * config_divvy: loads Button divvy's INI and JSON configs into a
 * rules_spec (docs/config.md, "divvy INI and JSON"), and owns the table of
 * rule settings (native snake_case and divvy camelCase names, value kinds,
 * ranges) that config.c's native loader shares, so the three formats check
 * a value the same way.  JSON goes through jansson.  Never logs; no state.
 */
#ifndef DIVVY_CONFIG_DIVVY_H
#define DIVVY_CONFIG_DIVVY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "diag.h"
#include "rules.h"

enum config_divvy_kind {
    CONFIG_DIVVY_MATCH,         /* native `match`, JSON `operation` */
    CONFIG_DIVVY_ACTOR,         /* a key, or several */
    CONFIG_DIVVY_DEFAULT,       /* native `default = true` */
    CONFIG_DIVVY_INT,
    CONFIG_DIVVY_BOOL,
    CONFIG_DIVVY_STRING,        /* free text or a keyword */
};

enum config_divvy_id {
    CONFIG_DIVVY_F_MATCH = 0,
    CONFIG_DIVVY_F_ACTOR,
    CONFIG_DIVVY_F_DEFAULT,
    CONFIG_DIVVY_F_CREDIT_LIMIT,
    CONFIG_DIVVY_F_RESET_SECONDS,
    CONFIG_DIVVY_F_REFILL_AMOUNT,
    CONFIG_DIVVY_F_REFILL_SECONDS,
    CONFIG_DIVVY_F_PREFIX4,
    CONFIG_DIVVY_F_PREFIX6,
    CONFIG_DIVVY_F_MAX_ACTORS,
    CONFIG_DIVVY_F_MAX_DEBIT,
    CONFIG_DIVVY_F_STRICT,
    CONFIG_DIVVY_F_FAST_PATH,
    CONFIG_DIVVY_F_RESETTABLE,
    CONFIG_DIVVY_F_LABEL,
    CONFIG_DIVVY_F_COMMENT,
    CONFIG_DIVVY_F_POLICY,
    CONFIG_DIVVY_F_ALGO,
    CONFIG_DIVVY_F_SOURCE,
    CONFIG_DIVVY_F_STORE,
    CONFIG_DIVVY_F_WHEN_FULL,
    /* Native only (docs/rules.md "Algorithms"): divvy's INI and JSON keep
     * whole seconds and stepped refills. */
    CONFIG_DIVVY_F_RESET_MS,
    CONFIG_DIVVY_F_REFILL_MS,
    CONFIG_DIVVY_F_REFILL,
};

struct config_divvy_field {
    enum config_divvy_id id;
    enum config_divvy_kind kind;
    const char *native;         /* divvy.conf name */
    const char *divvy;          /* INI/JSON name */
};

/* The rule setting called @name in the native (@native) or divvy format,
 * or NULL when there is none.  Static data: thread-safe. */
const struct config_divvy_field *config_divvy_field(const char *name, bool native);

/*
 * "Did you mean" for an unknown rule setting @key of the native (@native)
 * or divvy format: the same setting in the other format's spelling, else
 * the closest name of @key's own format (suggest.h), else NULL.
 */
const char *config_divvy_hint(const char *key, bool native);

/*
 * Store a value of rule setting @f into @r after checking its range or
 * keyword; @name is the spelling the user wrote, for the message.  A
 * problem adds "@name ..." at @file:@line to @reterr and returns -EINVAL;
 * -ENOMEM.  config_divvy_set_string() also takes ACTOR settings: "" means
 * no actor, and with @split_commas "user,rhost" names two keys.
 */
int config_divvy_set_int(struct rules_rule_spec *r, const struct config_divvy_field *f,
                         const char *name, int64_t v, const char *file, unsigned line,
                         struct diag *reterr);
int config_divvy_set_bool(struct rules_rule_spec *r, const struct config_divvy_field *f,
                          bool v);
int config_divvy_set_string(struct rules_rule_spec *r, const struct config_divvy_field *f,
                            const char *name, const char *v, bool split_commas,
                            const char *file, unsigned line, struct diag *reterr);

/* Keywords of the enum settings ("stop", "token_bucket", "privileged", "lease"). */
const char *config_divvy_policy_name(enum rules_policy p);
const char *config_divvy_algo_name(enum rules_algo a);
const char *config_divvy_source_name(enum rules_source s);
const char *config_divvy_store_name(enum rules_store s);
/* "deny", "allow", "evict"; "" for RULES_FULL_TABLE (not set). */
const char *config_divvy_when_full_name(enum rules_full w);
/* The store keyword @v as an enum rules_store (>= 0), or -EINVAL. */
int config_divvy_store_parse(const char *v);

/*
 * Appends the rules of a divvy INI (config_divvy_load_ini) or JSON
 * (config_divvy_load_json) document of @len bytes at @text to @spec; @file
 * names it in messages and rules.  Every problem found goes into @reterr.
 * Does not run rules_validate().  Returns 0, -EINVAL or -ENOMEM; on failure
 * @spec may hold some of the rules (the caller frees it).
 */
int config_divvy_load_ini(const char *file, const char *text, size_t len,
                          struct rules_spec *spec, struct diag *reterr);
int config_divvy_load_json(const char *file, const char *text, size_t len,
                           struct rules_spec *spec, struct diag *reterr);

#endif
