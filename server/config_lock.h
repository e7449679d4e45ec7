/* SPDX-License-Identifier: MIT */
/*
 * config_lock: a lockout rule's native settings (docs/rules.md "Lockout").
 */
#ifndef DIVVY_CONFIG_LOCK_H
#define DIVVY_CONFIG_LOCK_H

#include <stdio.h>

#include <libconfig.h>

#include "diag.h"
#include "rules.h"

/*
 * Reads rule setting @s of the native file @path into @r when it is one of lockout's
 * (algorithm = "lockout", fail_interval, unlock_time, escalation, delay): 0, or -EINVAL with
 * @reterr (file:line and why).  1 when @s is not lockout's (the shared rule settings read it).
 */
int config_lock_setting(struct rules_rule_spec *r, const char *path, const config_setting_t *s,
                        struct diag *reterr);

/* Writes @r's lockout settings (algorithm = "lockout" included) as the native format reads
 * them, for config_write.c (divvyctl convert, rules add): only what the rule sets. */
void config_lock_write(FILE *f, const struct rules_rule_spec *r);

#endif
