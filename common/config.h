/* SPDX-License-Identifier: MIT */
/*
 * config: loads a divvy configuration (docs/config.md) into a struct config:
 * server settings plus a rules_spec.  The format follows the file name:
 * ".ini" is divvy's INI dialect, ".json" divvy's JSON, anything else the
 * native libconfig format (divvy.conf).  Every loader reports problems with
 * file:line in a struct diag, rejects unknown settings, and runs
 * rules_validate() on the result.  Linked into divvyd and divvyctl only
 * (never into libdivvy).  Never logs.
 */
#ifndef DIVVY_CONFIG_H
#define DIVVY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "diag.h"
#include "rules.h"

#define CONFIG_DEFAULT_TCP        "tcp:127.0.0.1:8321"
#define CONFIG_DEFAULT_UNIX       "unix:/run/divvy/divvy.sock"
#define CONFIG_DEFAULT_STATE_DIR  "/run/divvy"

enum config_full_policy {
    CONFIG_FULL_DENY = 0,       /* a hit that needs a new counter and finds no slot is denied */
    CONFIG_FULL_ALLOW,          /* ... is allowed without counting */
};

enum config_format { CONFIG_FORMAT_LIBCONFIG = 0, CONFIG_FORMAT_INI, CONFIG_FORMAT_JSON };

struct config {
    char *path;
    enum config_format format;
    struct rules_spec rules;

    /* server { } — all optional; divvy's INI/JSON configs carry none of these. */
    char **listen;              /* "tcp:HOST:PORT" / "unix:PATH"; default the two above */
    size_t n_listen;
    char *state_dir;            /* default CONFIG_DEFAULT_STATE_DIR */
    unsigned workers;           /* 0: one per CPU */
    unsigned max_connections;   /* default 4096 */
    size_t max_output_bytes;    /* per-connection unsent replies before the client is dropped; 1 MiB */
    unsigned socket_mode;       /* Unix socket permissions, default 0660 */
    char *admin_group;          /* default "divvy-admin" */

    /* table { } */
    uint32_t table_slots;       /* daemon-only table; default TABLE_SLOTS_DEFAULT */
    uint32_t fast_table_slots;  /* fast-path table; default TABLE_SLOTS_DEFAULT */
    enum config_full_policy when_full;  /* default deny */
};

/*
 * Loads @path.  On success *ret is a new config (config_free()); on failure
 * *ret is untouched and @reterr lists the problems.  -EINVAL (invalid
 * config), -ENOENT/-EACCES/... (cannot read), -ENOMEM.
 */
int config_load(const char *path, struct config **ret, struct diag *reterr);

/* Frees the config and everything it owns.  NULL-safe. */
void config_free(struct config *cfg);

/* Writes @cfg's rules as a divvy.conf (libconfig) document to @f; used by
 * `divvyctl convert`.  Round-trips through config_load().  -EIO; -EINVAL
 * (nothing written) when a match key has no native spelling: empty or
 * containing '='; -ENOMEM. */
#include <stdio.h>
int config_write_libconfig(const struct config *cfg, FILE *f);

#endif
