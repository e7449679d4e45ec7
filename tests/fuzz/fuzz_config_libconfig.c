/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for config_load() on a ".conf" file: the native
 * libconfig format (server/config_native.c, with config_guard.c's integer and @include guards)
 * through validation, compilation, matching and divvyctl convert; the
 * checks are in fuzz_config.h.
 */
#define FUZZ_CONFIG_SUFFIX ".conf"
#include "fuzz_config.h"
