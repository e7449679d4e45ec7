/* SPDX-License-Identifier: MIT */
/*
 * unit_config: what the unit tests of the config loaders share.  A cmocka
 * group setup makes a temp dir (and unsets divvy's REDIS_HOST/REDIS_PORT,
 * which would make .ini/.json rules strict), its teardown removes it; load()
 * writes a config text there as c.EXT (the extension picks the format:
 * "conf", "ini", "json") and loads it with config_load().  Static
 * definitions: include it in one test file, which then has these names.
 */
#ifndef DIVVY_UNIT_CONFIG_H
#define DIVVY_UNIT_CONFIG_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"

static char tmpdir[64];

static int group_setup(void **state)
{
    (void)state;
    unsetenv("REDIS_HOST");
    unsetenv("REDIS_PORT");
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/divvy-unitcfg-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    char path[128];

    (void)state;
    for (const char *const *e = (const char *const[]){ "conf", "ini", "json", "out", NULL };
         *e; e++) {
        snprintf(path, sizeof(path), "%s/c.%s", tmpdir, *e);
        unlink(path);
    }
    rmdir(tmpdir);
    return 0;
}

/* Loads @text as c.@ext; the config, or NULL with the problems in @d. */
static struct config *load(const char *ext, const char *text, struct diag *d)
{
    struct config *cfg = NULL;
    char path[128];
    FILE *f;

    snprintf(path, sizeof(path), "%s/c.%s", tmpdir, ext);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    diag_init(d);
    if (config_load(path, &cfg, d) < 0)
        return NULL;
    return cfg;
}

/* load() that fails the test, printing the problems, unless @text loads. */
static struct config *load_ok(const char *ext, const char *text)
{
    struct diag d;
    struct config *cfg = load(ext, text, &d);
    char msg[1024];

    for (size_t i = 0; i < d.n; i++) {
        diag_format(&d, i, msg, sizeof(msg));
        print_error("%s\n", msg);
    }
    assert_non_null(cfg);
    return cfg;
}

#endif
