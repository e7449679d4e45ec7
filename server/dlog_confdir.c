/* SPDX-License-Identifier: MIT */
/*
 * dlog_confdir: decision_log.directory of a config (server/dlog_confdir.h).
 * Owns nothing past the call.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <libconfig.h>

#include "dlog_confdir.h"

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);

    return n >= k && strcmp(s + n - k, suffix) == 0;
}

int dlog_confdir(const char *path, char *buf, size_t size, struct diag *reterr)
{
    const config_setting_t *s;
    const char *dir = DLOG_CONFDIR_DEFAULT;
    config_t lc;
    int r = 0, n;

    config_init(&lc);
    if (has_suffix(path, ".ini") || has_suffix(path, ".json"))
        goto done;
    if (!config_read_file(&lc, path)) {
        if (config_error_type(&lc) == CONFIG_ERR_FILE_IO)
            diag_set(reterr, path, 0, "cannot read it: %s", strerror(errno ? errno : EIO));
        else
            diag_set(reterr, path, (unsigned)config_error_line(&lc), "%s",
                     config_error_text(&lc));
        r = -EINVAL;
        goto out;
    }
    s = config_lookup(&lc, "decision_log.directory");
    if (s) {
        dir = config_setting_get_string(s);
        if (!dir || !dir[0]) {
            diag_set(reterr, path, (unsigned)config_setting_source_line(s),
                     "decision_log.directory must be a non-empty string");
            r = -EINVAL;
            goto out;
        }
    }
done:
    n = snprintf(buf, size, "%s", dir);
    if (n < 0 || (size_t)n >= size)
        r = -ENAMETOOLONG;
out:
    config_destroy(&lc);
    return r;
}
