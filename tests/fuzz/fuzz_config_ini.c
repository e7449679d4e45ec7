/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for config_load() on a ".ini" file: divvy's INI dialect
 * (server/ini.c, server/config_divvy_ini.c) through validation, compilation,
 * matching and divvyctl convert; the checks are in fuzz_config.h.
 */
#define FUZZ_CONFIG_SUFFIX ".ini"
#include "fuzz_config.h"
