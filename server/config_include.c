/* SPDX-License-Identifier: MIT */
/*
 * config_include: the drop-in rule files of include_dir (docs/config.md
 * "Drop-ins").  Each NN-NAME.conf holds only a native 'rules' list; the files
 * are read in name order (bytewise: the two-digit prefix orders them) and
 * their rules go after the main file's rules and before its default rule,
 * so the whole list is validated as one.  A pending change (struct
 * config_edit: the rules service's add or remove) is seen as if on disk, so
 * it is validated exactly as the reload that follows will read it; writing
 * it (temporary file, fsync, rename) is config_dropin_write()'s.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_private.h"
#include "fdio.h"

#define CONFIG_DROPINS_MAX 4096

bool config_dropin_name_ok(const char *name)
{
    size_t n = strlen(name);

    if (n < 4 || n > CONFIG_DROPIN_NAME_MAX || !conf_is_digit(name[0]) ||
        !conf_is_digit(name[1]) || name[2] != '-')
        return false;
    for (size_t i = 3; i < n; i++) {
        char c = name[i];

        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || conf_is_digit(c) || c == '-' ||
              c == '_'))
            return false;
    }
    return true;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The drop-in names in @dir (without ".conf"), @edit applied, sorted.
 * Hidden files (the writer's temporaries) and other suffixes are not
 * drop-ins; a *.conf whose name is not NN-NAME is a problem. */
static int list_names(const char *dir, const struct config_edit *edit, char ***ret, size_t *ret_n,
                      struct diag *reterr)
{
    char **names = NULL;
    size_t n = 0;
    bool found = false;
    struct dirent *de;
    DIR *d;
    int r = 0;

    names = calloc(CONFIG_DROPINS_MAX + 1, sizeof(*names));
    if (!names)
        return -ENOMEM;
    d = opendir(dir);
    if (!d) {
        r = -errno;
        diag_set(reterr, dir, 0, "include_dir: cannot open: %s", strerror(-r));
        goto out;
    }
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);

        if (de->d_name[0] == '.' || len < 5 || strcmp(de->d_name + len - 5, ".conf") != 0)
            continue;
        de->d_name[len - 5] = '\0';
        if (!config_dropin_name_ok(de->d_name)) {
            diag_set(reterr, dir, 0, "%s.conf: a drop-in is named NN-NAME.conf (two digits "
                     "that order it, then letters, digits, '-' or '_')", de->d_name);
            r = -EINVAL;
            continue;
        }
        if (edit && strcmp(de->d_name, edit->name) == 0) {
            found = true;
            if (!edit->text || edit->replace)
                continue;           /* being removed, or replaced below */
        }
        if (n == CONFIG_DROPINS_MAX) {
            diag_set(reterr, dir, 0, "more than %d drop-ins", CONFIG_DROPINS_MAX);
            r = -EINVAL;
            break;
        }
        if (!(names[n++] = strdup(de->d_name))) {
            r = -ENOMEM;
            break;
        }
    }
    closedir(d);
    if (r < 0)
        goto out;
    if (edit && edit->text && found && !edit->replace) {
        diag_set(reterr, dir, 0, "drop-in %s exists: replace it (divvyctl rules add "
                 "--replace) or remove it first", edit->name);
        r = -EEXIST;
        goto out;
    }
    if (edit && !edit->text && !found) {
        diag_set(reterr, dir, 0, "no drop-in %s", edit->name);
        r = -ENOENT;
        goto out;
    }
    if (edit && edit->text && !(names[n++] = strdup(edit->name))) {
        r = -ENOMEM;
        goto out;
    }
    qsort(names, n, sizeof(*names), name_cmp);
    *ret = names;
    *ret_n = n;
    names = NULL;
out:
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
    return r;
}

/* Reads drop-in @name (the edit's text when it is the edit's) and appends
 * its rules to @cfg. */
static int load_one(struct config *cfg, const char *name, const struct config_edit *edit,
                    struct diag *reterr)
{
    char path[PATH_MAX], *text = NULL;
    size_t len, first = cfg->rules.n;
    int r;

    if ((size_t)snprintf(path, sizeof(path), "%s/%s.conf", cfg->include_dir, name) >=
        sizeof(path))
        return -ENAMETOOLONG;
    if (edit && edit->text && strcmp(name, edit->name) == 0) {
        if (!(text = malloc(edit->len + 1)))
            return -ENOMEM;
        memcpy(text, edit->text, edit->len);
        text[edit->len] = '\0';
        len = edit->len;
    } else if ((r = conf_read(path, &text, &len)) < 0) {
        diag_set(reterr, path, 0, "cannot read: %s", strerror(-r));
        return r;
    }
    if (memchr(text, '\0', len)) {
        diag_set(reterr, path, conf_line_of(text, memchr(text, '\0', len)), "NUL byte in file");
        r = -EINVAL;
        goto out;
    }
    r = conf_native_dropin(cfg, path, text, reterr);
    for (size_t i = first; i < cfg->rules.n; i++) {
        if (cfg->rules.rules[i].is_default) {
            diag_set(reterr, path, cfg->rules.rules[i].line,
                     "a drop-in cannot hold the default rule: the main file's stays last");
            r = r == -ENOMEM ? r : -EINVAL;
        }
    }
out:
    free(text);
    return r;
}

int conf_dropins(struct config *cfg, const struct config_edit *edit, struct diag *reterr)
{
    size_t n_main = cfg->rules.n, n = 0;
    char **names = NULL;
    int r = 0;

    if (!cfg->include_dir) {
        diag_set(reterr, cfg->path, 0, "no include_dir: rules cannot be added or removed");
        return -ENOTDIR;
    }
    r = list_names(cfg->include_dir, edit, &names, &n, reterr);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        int q = load_one(cfg, names[i], edit, reterr);

        if (q == -ENOMEM || q == -E2BIG) {
            r = q;
            break;
        }
        if (q < 0)
            r = q;
    }
    /* The main file's default rule (its last) goes after every drop-in's
     * rule: first match, the default catching what nothing else did. */
    if (r >= 0 && n_main > 0 && cfg->rules.n > n_main &&
        cfg->rules.rules[n_main - 1].is_default) {
        struct rules_rule_spec def = cfg->rules.rules[n_main - 1];

        memmove(&cfg->rules.rules[n_main - 1], &cfg->rules.rules[n_main],
                (cfg->rules.n - n_main) * sizeof(def));
        cfg->rules.rules[cfg->rules.n - 1] = def;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return r;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

    if (fd < 0)
        return -errno;
    if (fsync(fd) < 0)
        r = -errno;
    close(fd);
    return r;
}

int config_dropin_write(const char *dir, const char *name, const char *text, size_t len)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    int fd, r = 0;

    if (!config_dropin_name_ok(name))
        return -EINVAL;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s.conf", dir, name) >= sizeof(path) ||
        (size_t)snprintf(tmp, sizeof(tmp), "%s/.%s.conf.tmp", dir, name) >= sizeof(tmp))
        return -ENAMETOOLONG;
    if (!text) {
        if (unlink(path) < 0)
            return -errno;
        return fsync_dir(dir);
    }
    unlink(tmp);                        /* a crash's leftover */
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    r = fdio_write_all(fd, text, len);
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && rename(tmp, path) < 0)
        r = -errno;
    if (r < 0) {
        unlink(tmp);
        return r;
    }
    return fsync_dir(dir);
}
