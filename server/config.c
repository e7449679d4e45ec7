/* SPDX-License-Identifier: MIT */
/*
 * config: reads a config file, picks the format by extension (.ini and
 * .json through config_divvy.c, anything else the native libconfig loader
 * in config_native.c), fills in the server and table defaults, and runs
 * rules_validate().  The format is documented in docs/config.md.  The
 * native loader's files: config_native.c (the top level and the rules),
 * config_include.c (include_dir's drop-ins),
 * config_server.c (server, table, metrics, statsd), config_store.c (store,
 * redis), config_guard.c (what libconfig would misread); config_fleet.c
 * (a divvy config's fleet semantics, notes for the log); config_write.c
 * writes a config back out (divvyctl convert).  Linked into divvyd and
 * divvyctl only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_divvy.h"
#include "config_private.h"
#include "table.h"

/* ---- reading ------------------------------------------------------------ */

int conf_read(const char *path, char **ret_text, size_t *ret_len)
{
    char *text = NULL;
    size_t len = 0, cap = 0;
    int fd, r;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    for (;;) {
        ssize_t n;

        if (len + 1 >= cap) {
            size_t ncap = cap ? cap * 2 : 16384;
            char *grown;

            if (cap > CONFIG_FILE_MAX) {
                r = -EFBIG;
                goto out;
            }
            grown = realloc(text, ncap);
            if (!grown) {
                r = -ENOMEM;
                goto out;
            }
            text = grown;
            cap = ncap;
        }
        n = read(fd, text + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = -errno;
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len > CONFIG_FILE_MAX) {
        r = -EFBIG;
        goto out;
    }
    text[len] = '\0';
    *ret_text = text;
    *ret_len = len;
    text = NULL;
    r = 0;
out:
    free(text);
    close(fd);
    return r;
}

/* ---- load / free --------------------------------------------------------- */

static int conf_defaults(struct config *cfg)
{
    cfg->listen = calloc(2, sizeof(*cfg->listen));
    if (!cfg->listen)
        return -ENOMEM;
    cfg->listen[0] = strdup(CONFIG_DEFAULT_TCP);
    cfg->listen[1] = strdup(CONFIG_DEFAULT_UNIX);
    cfg->n_listen = 2;
    cfg->state_dir = strdup(CONFIG_DEFAULT_STATE_DIR);
    cfg->admin_group = strdup(CONFIG_DEFAULT_ADMIN_GROUP);
    cfg->fast_group = strdup(CONFIG_DEFAULT_FAST_GROUP);
    cfg->snapshot_interval_ms = CONFIG_DEFAULT_SNAPSHOT_MS;
    conf_dlog_defaults(cfg);
    if (!cfg->listen[0] || !cfg->listen[1] || !cfg->state_dir || !cfg->admin_group ||
        !cfg->fast_group)
        return -ENOMEM;
    cfg->workers = 0;
    cfg->max_connections = 0;
    cfg->max_output_bytes = CONFIG_DEFAULT_OUTPUT_BYTES;
    cfg->admit = (struct config_admit){
        .reserved_connections = CONFIG_DEFAULT_RESERVED_CONNECTIONS,
        .per_address = CONFIG_DEFAULT_PER_ADDRESS,
        .per_uid = CONFIG_DEFAULT_PER_UID,
        .idle_timeout_ms = CONFIG_DEFAULT_IDLE_TIMEOUT_MS,
        .request_timeout_ms = CONFIG_DEFAULT_REQUEST_TIMEOUT_MS,
        .output_budget_bytes = CONFIG_DEFAULT_OUTPUT_BUDGET,
        .socket_buffer_bytes = CONFIG_DEFAULT_SOCKET_BUFFER,
    };
    cfg->socket_mode = CONFIG_DEFAULT_SOCKET_MODE;
    cfg->table_slots = TABLE_SLOTS_DEFAULT;
    cfg->fast_table_slots = TABLE_SLOTS_DEFAULT;
    cfg->privileged_table_slots = CONFIG_DEFAULT_PRIVILEGED_SLOTS;
    cfg->adhoc_slots = CONFIG_DEFAULT_ADHOC_SLOTS;
    cfg->when_full = CONFIG_FULL_DENY;
    cfg->on_redis_error = CONFIG_REDIS_ERROR_LOCAL;
    cfg->store_prefix = strdup("");
    cfg->lease_max = CONFIG_DEFAULT_LEASE_MAX;
    cfg->redis.host = strdup(CONFIG_DEFAULT_REDIS_HOST);
    cfg->redis.port = CONFIG_DEFAULT_REDIS_PORT;
    cfg->redis.timeout_ms = CONFIG_DEFAULT_REDIS_TIMEOUT_MS;
    if (!cfg->store_prefix || !cfg->redis.host)
        return -ENOMEM;
    return 0;
}

static enum config_format conf_format_of(const char *path)
{
    const char *base = strrchr(path, '/');
    const char *dot;

    base = base ? base + 1 : path;
    dot = strrchr(base, '.');
    if (dot && strcasecmp(dot, ".ini") == 0)
        return CONFIG_FORMAT_INI;
    if (dot && strcasecmp(dot, ".json") == 0)
        return CONFIG_FORMAT_JSON;
    return CONFIG_FORMAT_LIBCONFIG;
}

int config_load(const char *path, struct config **ret, struct diag *reterr)
{
    return config_load_edit(path, NULL, ret, reterr);
}

int config_load_edit(const char *path, const struct config_edit *edit, struct config **ret,
                     struct diag *reterr)
{
    struct config *cfg;
    char *text = NULL;
    size_t len = 0;
    int r;

    cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        return -ENOMEM;
    r = conf_defaults(cfg);
    if (r < 0)
        goto out;
    cfg->path = strdup(path);
    if (!cfg->path) {
        r = -ENOMEM;
        goto out;
    }
    cfg->format = conf_format_of(path);

    r = conf_read(path, &text, &len);
    if (r < 0) {
        char buf[128];

        if (r == -EFBIG)
            diag_set(reterr, path, 0, "larger than %u bytes", CONFIG_FILE_MAX);
        else
            diag_set(reterr, path, 0, "cannot read: %s", strerror_r(-r, buf, sizeof(buf)));
        goto out;
    }
    switch (cfg->format) {
    case CONFIG_FORMAT_INI:
        r = config_divvy_load_ini(path, text, len, &cfg->rules, reterr);
        break;
    case CONFIG_FORMAT_JSON:
        r = config_divvy_load_json(path, text, len, &cfg->rules, reterr);
        break;
    default:
        if (memchr(text, '\0', len)) {
            diag_set(reterr, path, conf_line_of(text, memchr(text, '\0', len)),
                     "NUL byte in file");
            r = -EINVAL;
            break;
        }
        r = conf_native(cfg, path, text, reterr);
        break;
    }
    /* A rule the loader could not read would only add confusing follow-ups. */
    if (r < 0)
        goto out;
    if (cfg->include_dir || edit) {
        r = conf_dropins(cfg, edit, reterr);
        if (r < 0)
            goto out;
    }
    conf_fleet_divvy(cfg);
    if (cfg->rules.n == 0) {
        diag_set(reterr, path, 0, "no rules: a config needs at least the default rule");
        r = -EINVAL;
        goto out;
    }
    r = rules_validate(&cfg->rules, reterr);
    if (r < 0)
        goto out;

    *ret = cfg;
    cfg = NULL;
out:
    free(text);
    config_free(cfg);
    return r;
}

void config_free(struct config *cfg)
{
    if (!cfg)
        return;
    rules_spec_free(&cfg->rules);
    free(cfg->include_dir);
    for (size_t i = 0; i < cfg->n_listen; i++)
        free(cfg->listen[i]);
    free(cfg->listen);
    free(cfg->state_dir);
    free(cfg->admin_group);
    free(cfg->fast_group);
    free(cfg->store_prefix);
    free(cfg->metrics_listen);
    free(cfg->metrics_path);
    free(cfg->statsd_host);
    free(cfg->statsd_prefix);
    free(cfg->redis.host);
    free(cfg->redis.unix_socket);
    free(cfg->redis.username);
    if (cfg->redis.password)
        explicit_bzero(cfg->redis.password, strlen(cfg->redis.password));
    free(cfg->redis.password);
    free(cfg->redis.password_file);
    free(cfg->tls.certificate_file);
    free(cfg->tls.key_file);
    free(cfg->tls.client_ca_file);
    for (size_t i = 0; i < cfg->redis.n_sentinels; i++)
        free(cfg->redis.sentinels[i]);
    free(cfg->redis.sentinels);
    for (size_t i = 0; i < cfg->redis.n_cluster_nodes; i++)
        free(cfg->redis.cluster_nodes[i]);
    free(cfg->redis.cluster_nodes);
    free(cfg->redis.master_name);
    if (cfg->redis.sentinel_password)
        explicit_bzero(cfg->redis.sentinel_password, strlen(cfg->redis.sentinel_password));
    free(cfg->redis.sentinel_password);
    free(cfg->redis.sentinel_password_file);
    if (cfg->resp_password)
        explicit_bzero(cfg->resp_password, strlen(cfg->resp_password));
    free(cfg->resp_password);
    conf_dlog_free(cfg);
    free(cfg->resp_password_file);
    free(cfg->path);
    free(cfg);
}
