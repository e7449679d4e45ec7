/* SPDX-License-Identifier: MIT */
/*
 * dlog_confdir: where a config puts the decision log (decision_log.directory,
 * docs/config.md), for `divvyctl log -c CONFIG` without a daemon.  Reads
 * only that setting; the config's validation is config_load()'s (divvyd,
 * `divvyctl check`).  Never logs.
 */
#ifndef DIVVY_DLOG_CONFDIR_H
#define DIVVY_DLOG_CONFDIR_H

#include <stddef.h>

#include "diag.h"

#define DLOG_CONFDIR_DEFAULT "/var/lib/divvy/decisions"

/*
 * The decision log directory config @path names into @buf: its
 * decision_log.directory, else DLOG_CONFDIR_DEFAULT (also for a divvy .ini or
 * .json config, which has no decision_log).  0; -ENAMETOOLONG; -EINVAL with
 * the problem (file:line) in *@reterr when the file cannot be read as a
 * divvy.conf or the setting is not a string.
 */
int dlog_confdir(const char *path, char *buf, size_t size, struct diag *reterr);

#endif
