/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for config_load() on a ".json" file: divvy's JSON
 * (server/config_divvy_json.c over jansson) through validation, compilation,
 * matching and divvyctl convert; the checks are in fuzz_config.h.
 */
#define FUZZ_CONFIG_SUFFIX ".json"
#include "fuzz_config.h"
