/* SPDX-License-Identifier: MIT */
/*
 * config_private: what the files of the config module share and nothing
 * else includes: the limits and defaults of the server settings, the
 * libconfig accessors and token classes, the record of numbers libconfig
 * misread, and the helpers one file of the native loader calls in another.
 * Static helpers and these shared ones are named conf_*: libconfig's own
 * API owns config_*.
 */
#ifndef DIVVY_CONFIG_PRIVATE_H
#define DIVVY_CONFIG_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libconfig.h>

#include "config.h"
#include "diag.h"

#define CONFIG_FILE_MAX        (64u << 20)     /* bytes of one config file */
#define CONFIG_LISTEN_MAX      64
#define CONFIG_WORKERS_MAX     1024
#define CONFIG_CONNECTIONS_MAX (1 << 20)
#define CONFIG_OUTPUT_MIN      4096
#define CONFIG_OUTPUT_MAX      (1 << 30)
#define CONFIG_GROUP_MAX       32
#define CONFIG_RESERVED_MAX    4096
#define CONFIG_TIMEOUT_MAX     (24 * 3600 * 1000)
#define CONFIG_SOCKBUF_MAX     (64 << 20)
#define CONFIG_DEFAULT_OUTPUT_BYTES  (1u << 20)
#define CONFIG_DEFAULT_SOCKET_MODE   0660
#define CONFIG_DEFAULT_ADMIN_GROUP   "divvy-admin"
#define CONFIG_DEFAULT_FAST_GROUP    "divvy-fast"
#define CONFIG_SNAPSHOT_MS_MAX       86400000

#define CONF_N(a) (sizeof(a) / sizeof((a)[0]))

static inline unsigned conf_line_of(const char *text, const char *p)
{
    unsigned line = 1;

    for (; text < p; text++)
        line += *text == '\n';
    return line;
}

static inline bool conf_is_name_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '*';
}

static inline bool conf_is_name_char(char c)
{
    return conf_is_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static inline bool conf_is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Numbers libconfig misread: their lines and what it may have read (the
 * first CONF_MISREAD_MAX). */
#define CONF_MISREAD_MAX 64
struct conf_misread {
    size_t n;
    struct {
        unsigned line;
        int64_t v[2];
    } e[CONF_MISREAD_MAX];
};

static inline unsigned conf_line(const config_setting_t *s)
{
    return config_setting_source_line(s);
}

static inline const char *conf_name(const config_setting_t *s)
{
    const char *n = config_setting_name(s);

    return n ? n : "value";
}

/* config_guard.c */
int conf_check_include(const char *path, const char *text, struct diag *reterr);
int conf_check_numbers(const char *path, const char *text, struct conf_misread *bad,
                       struct diag *reterr);
void conf_drop_misread(config_setting_t *s, unsigned parent_line,
                       const struct conf_misread *bad);

/* config_native.c */
int conf_get_int(const char *path, const config_setting_t *s, int64_t min,
                 int64_t max, int64_t *ret, struct diag *reterr);
int conf_get_string(const char *path, const config_setting_t *s, const char **ret,
                    struct diag *reterr);
int conf_set_str(char **slot, const char *v);

/* A *_password_file setting @s: the secret it names read now (server/secret.c)
 * into *@dst (the previous one wiped), its name into *@dst_file; a problem
 * is reported as "@group.<name>: ...". */
int conf_secret_file(const char *path, const config_setting_t *s, const char *group,
                     char **dst, char **dst_file, struct diag *reterr);
int conf_unknown(const char *path, const config_setting_t *s, const char *group,
                 const char *const *names, size_t n, const char *tail,
                 struct diag *reterr);

/* config_server.c */
int conf_address_list(const char *path, const config_setting_t *s, const char *what,
                      int max, const char *(*problem)(const char *), char ***list_p,
                      size_t *n_p, struct diag *reterr);
int conf_server_setting(struct config *cfg, const char *path,
                        const config_setting_t *s, struct diag *reterr);
int conf_table_setting(struct config *cfg, const char *path,
                       const config_setting_t *s, struct diag *reterr);
int conf_metrics_setting(struct config *cfg, const char *path,
                         const config_setting_t *s, struct diag *reterr);
int conf_statsd_setting(struct config *cfg, const char *path,
                        const config_setting_t *s, struct diag *reterr);
int conf_rls_setting(struct config *cfg, const char *path, const config_setting_t *s,
                     struct diag *reterr);

/* config_tls.c: server.tls { }, and whether the "tls:" listen addresses have it. */
int conf_tls_group(struct config *cfg, const char *path, const config_setting_t *g,
                   struct diag *reterr);
int conf_tls_check(const struct config *cfg, const char *path, struct diag *reterr);

/* config_dlog.c: decision_log { } (docs/config.md "decision_log"); defaults first. */
void conf_dlog_defaults(struct config *cfg);
int conf_dlog_group(struct config *cfg, const char *path, const config_setting_t *g,
                    struct diag *reterr);
void conf_dlog_free(struct config *cfg);

/* config_store.c */
int conf_store_setting(struct config *cfg, const char *path,
                       const config_setting_t *s, struct diag *reterr);
int conf_redis_setting(struct config *cfg, const char *path,
                       const config_setting_t *s, struct diag *reterr);

/* config_fleet.c: a divvy (.ini/.json) config's drop-in semantics: divvy's
 * metric names, and store.mode "strict" under divvy's Redis environment. */
void conf_fleet_divvy(struct config *cfg);

/* config_native.c: the native (libconfig) loader: reads @text (the file at
 * @path) into @cfg. */
int conf_native(struct config *cfg, const char *path, const char *text,
                struct diag *reterr);
/* conf_native() for a drop-in: only a 'rules' list, appended to @cfg's. */
int conf_native_dropin(struct config *cfg, const char *path, const char *text,
                       struct diag *reterr);

/* config.c: reads a whole config file (at most CONFIG_FILE_MAX bytes). */
int conf_read(const char *path, char **ret_text, size_t *ret_len);

/* config_include.c: appends include_dir's drop-ins (with @edit) to
 * @cfg->rules, before the main file's default rule. */
int conf_dropins(struct config *cfg, const struct config_edit *edit, struct diag *reterr);

#endif
