/* SPDX-License-Identifier: MIT */
/*
 * config_dlog: the native config's decision_log { } group (docs/config.md
 * "decision_log"): whether divvyd records its decisions, where, how large
 * and how many files, how long a decision may wait in a worker's buffer,
 * and per request key what the log keeps of its value.  Every problem is
 * reported with file:line; unknown settings get a "did you mean".  Never
 * logs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config_private.h"
#include "dlog.h"

#define DLOG_FILE_SIZE_MIN  (64u << 10)
#define DLOG_FILE_SIZE_MAX  (1ull << 40)
#define DLOG_FILES_MAX      100000
#define DLOG_FLUSH_MS_MAX   60000
#define DLOG_DIR_MAX        512

static const char *const conf_dlog_names[] = {
    "enabled", "directory", "file_size", "files", "flush_ms", "redact",
};

void conf_dlog_defaults(struct config *cfg)
{
    cfg->dlog = (struct config_dlog){ .file_size = CONFIG_DLOG_FILE_SIZE,
                                      .files = CONFIG_DLOG_FILES,
                                      .flush_ms = CONFIG_DLOG_FLUSH_MS };
}

static void conf_dlog_free_redact(struct config_dlog *d)
{
    for (size_t i = 0; i < d->n_redact; i++)
        free(d->redact[i].key);
    free(d->redact);
    d->redact = NULL;
    d->n_redact = 0;
}

void conf_dlog_free(struct config *cfg)
{
    free(cfg->dlog.directory);
    cfg->dlog.directory = NULL;
    conf_dlog_free_redact(&cfg->dlog);
}

/* decision_log.directory: an absolute path without "." or ".." parts (a
 * log directory is no place to be tricked into). */
static int conf_dlog_directory(struct config *cfg, const char *path, const config_setting_t *s,
                               struct diag *reterr)
{
    const char *str;
    int r;

    r = conf_get_string(path, s, &str, reterr);
    if (r < 0)
        return r;
    if (str[0] != '/' || strlen(str) > DLOG_DIR_MAX || strstr(str, "/./") ||
        strstr(str, "/../") || (strlen(str) >= 2 && strcmp(str + strlen(str) - 2, "/.") == 0) ||
        (strlen(str) >= 3 && strcmp(str + strlen(str) - 3, "/..") == 0) || strcmp(str, "/") == 0) {
        diag_set(reterr, path, conf_line(s),
                 "decision_log.directory must be an absolute path (at most %d bytes, no "
                 "'.' or '..' parts, not /), not \"%s\"", DLOG_DIR_MAX, str);
        return -EINVAL;
    }
    return conf_set_str(&cfg->dlog.directory, str);
}

/* decision_log.redact = { KEY = "keep" | "hash" | "drop"; ... }. */
static int conf_dlog_redact(struct config *cfg, const char *path, const config_setting_t *g,
                            struct diag *reterr)
{
    int n, r = 0;

    if (!config_setting_is_group(g)) {
        diag_set(reterr, path, conf_line(g),
                 "decision_log.redact must be a group { KEY = \"keep\" | \"hash\" | \"drop\"; }");
        return -EINVAL;
    }
    n = config_setting_length(g);
    if (n > CONFIG_DLOG_REDACT_MAX) {
        diag_set(reterr, path, conf_line(g), "decision_log.redact: at most %d keys, not %d",
                 CONFIG_DLOG_REDACT_MAX, n);
        return -EINVAL;
    }
    /* A second redact group in the file replaces the first. */
    conf_dlog_free_redact(&cfg->dlog);
    if (n == 0)
        return 0;
    cfg->dlog.redact = calloc((size_t)n, sizeof(*cfg->dlog.redact));
    if (!cfg->dlog.redact)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        const config_setting_t *s = config_setting_get_elem(g, (unsigned)i);
        const char *str;
        unsigned how;
        int q;

        q = conf_get_string(path, s, &str, reterr);
        if (q < 0) {
            r = q;
            continue;
        }
        if (strcmp(str, "keep") == 0) {
            how = DLOG_KEEP;
        } else if (strcmp(str, "hash") == 0) {
            how = DLOG_HASH;
        } else if (strcmp(str, "drop") == 0) {
            how = DLOG_DROP;
        } else {
            diag_set(reterr, path, conf_line(s),
                     "decision_log.redact.%s must be \"keep\", \"hash\" or \"drop\", not \"%s\"",
                     conf_name(s), str);
            r = -EINVAL;
            continue;
        }
        cfg->dlog.redact[cfg->dlog.n_redact].key = strdup(conf_name(s));
        if (!cfg->dlog.redact[cfg->dlog.n_redact].key)
            return -ENOMEM;
        cfg->dlog.redact[cfg->dlog.n_redact++].how = how;
    }
    return r;
}

static int conf_dlog_setting(struct config *cfg, const char *path, const config_setting_t *s,
                             struct diag *reterr)
{
    const char *name = conf_name(s);
    int64_t v;
    int r;

    if (strcmp(name, "enabled") == 0) {
        if (config_setting_type(s) != CONFIG_TYPE_BOOL) {
            diag_set(reterr, path, conf_line(s), "decision_log.enabled must be true or false");
            return -EINVAL;
        }
        cfg->dlog.enabled = config_setting_get_bool(s) != 0;
        return 0;
    }
    if (strcmp(name, "directory") == 0)
        return conf_dlog_directory(cfg, path, s, reterr);
    if (strcmp(name, "redact") == 0)
        return conf_dlog_redact(cfg, path, s, reterr);
    if (strcmp(name, "file_size") == 0) {
        r = conf_get_int(path, s, DLOG_FILE_SIZE_MIN, (int64_t)DLOG_FILE_SIZE_MAX, &v, reterr);
        if (r == 0)
            cfg->dlog.file_size = (uint64_t)v;
        return r;
    }
    if (strcmp(name, "files") == 0) {
        r = conf_get_int(path, s, 1, DLOG_FILES_MAX, &v, reterr);
        if (r == 0)
            cfg->dlog.files = (unsigned)v;
        return r;
    }
    if (strcmp(name, "flush_ms") == 0) {
        r = conf_get_int(path, s, 1, DLOG_FLUSH_MS_MAX, &v, reterr);
        if (r == 0)
            cfg->dlog.flush_ms = (unsigned)v;
        return r;
    }
    return conf_unknown(path, s, "decision_log", conf_dlog_names, CONF_N(conf_dlog_names), "",
                        reterr);
}

int conf_dlog_group(struct config *cfg, const char *path, const config_setting_t *g,
                    struct diag *reterr)
{
    int r = 0;

    if (!config_setting_is_group(g)) {
        diag_set(reterr, path, conf_line(g), "decision_log must be a group { ... }");
        return -EINVAL;
    }
    cfg->dlog.line = conf_line(g);
    for (int i = 0; i < config_setting_length(g); i++) {
        int q = conf_dlog_setting(cfg, path, config_setting_get_elem(g, (unsigned)i), reterr);

        if (q == -ENOMEM)
            return q;
        if (q < 0)
            r = q;
    }
    return r;
}
