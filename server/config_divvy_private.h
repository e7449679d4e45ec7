/* SPDX-License-Identifier: MIT */
/*
 * config_divvy_private: what config_divvy.c shares with the INI and JSON
 * loaders (config_divvy_ini.c, config_divvy_json.c) and nothing else
 * includes.
 */
#ifndef DIVVY_CONFIG_DIVVY_PRIVATE_H
#define DIVVY_CONFIG_DIVVY_PRIVATE_H

#include <stdbool.h>

#include "diag.h"

#define CONFIG_DIVVY_N(a) (sizeof(a) / sizeof((a)[0]))

/* An unknown INI or JSON rule setting @key at @file:@line, into @reterr,
 * with a "did you mean" when there is one (config_divvy_hint()). */
void config_divvy_unknown(const char *key, bool native, const char *file, unsigned line,
                          struct diag *reterr);

#endif
