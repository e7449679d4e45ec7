/* SPDX-License-Identifier: MIT */
/*
 * config_native: the native format's loader (divvy.conf, libconfig): the
 * top level, the rules list (its settings through config_divvy.c's table,
 * shared with the INI and JSON loaders), the checks that span groups, and
 * the typed accessors and "unknown setting" report the groups' files use.
 * Every string is copied out before config_destroy().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calendar.h"
#include "config_divvy.h"
#include "config_lock.h"
#include "config_private.h"
#include "suggest.h"

/* ---- native loader ------------------------------------------------------ */

int conf_get_int(const char *path, const config_setting_t *s, int64_t min,
                 int64_t max, int64_t *ret, struct diag *reterr)
{
    int64_t v;
    int type = config_setting_type(s);

    if (type != CONFIG_TYPE_INT && type != CONFIG_TYPE_INT64) {
        diag_set(reterr, path, conf_line(s), "%s must be an integer", conf_name(s));
        return -EINVAL;
    }
    v = config_setting_get_int64(s);
    if (v < min || v > max) {
        diag_set(reterr, path, conf_line(s), "%s must be between %lld and %lld",
                 conf_name(s), (long long)min, (long long)max);
        return -EINVAL;
    }
    *ret = v;
    return 0;
}

int conf_get_string(const char *path, const config_setting_t *s, const char **ret,
                    struct diag *reterr)
{
    if (config_setting_type(s) != CONFIG_TYPE_STRING) {
        diag_set(reterr, path, conf_line(s), "%s must be a string", conf_name(s));
        return -EINVAL;
    }
    *ret = config_setting_get_string(s);
    return 0;
}

int conf_set_str(char **slot, const char *v)
{
    char *copy = strdup(v);

    if (!copy)
        return -ENOMEM;
    free(*slot);
    *slot = copy;
    return 0;
}

static const char *const conf_top_names[] = {
    "server", "table", "store", "redis", "metrics", "statsd", "rules", "include_dir",
    "rls", "decision_log",
};

/* "unknown setting 'GROUP.NAME'" (no GROUP. at the top), with the closest
 * of @names as a "did you mean" when one is close; always -EINVAL. */
int conf_unknown(const char *path, const config_setting_t *s, const char *group,
                 const char *const *names, size_t n, const char *tail,
                 struct diag *reterr)
{
    const char *name = conf_name(s), *hint;
    struct suggest sg;

    suggest_init(&sg, name);
    suggest_offer_all(&sg, names, n);
    hint = suggest_best(&sg);
    diag_set(reterr, path, conf_line(s), "unknown setting '%s%s%s'%s%s%s%s", group,
             group[0] ? "." : "", name, hint ? " (did you mean '" : "", hint ? hint : "",
             hint ? "'?)" : "", tail);
    return -EINVAL;
}

/* Runs @fn on every member of group @g. */
static int conf_each(struct config *cfg, const char *path, const config_setting_t *g,
                     int (*fn)(struct config *, const char *, const config_setting_t *,
                     struct diag *),
                     struct diag *reterr)
{
    int r = 0;

    if (!config_setting_is_group(g)) {
        diag_set(reterr, path, conf_line(g), "%s must be a group { ... }", conf_name(g));
        return -EINVAL;
    }
    for (int i = 0; i < config_setting_length(g); i++) {
        int q = fn(cfg, path, config_setting_get_elem(g, (unsigned)i), reterr);

        if (q == -ENOMEM)
            return q;
        if (q < 0)
            r = q;
    }
    return r;
}

/* ---- match operators: key = { cidr = ...; not = ...; not_cidr = ...; } ---- */

static const struct {
    const char *name;
    enum rules_match_op op;
} conf_match_ops[] = {
    { "cidr", RULES_MATCH_CIDR },
    { "not", RULES_MATCH_NOT },
    { "not_cidr", RULES_MATCH_NOT_CIDR },
};

/* One operator's value: a string, an integer, or a non-empty list of them. */
static int conf_rule_match_op(struct rules_rule_spec *r, const char *path, const char *key,
                              enum rules_match_op op, const config_setting_t *v,
                              struct diag *reterr)
{
    bool list = config_setting_is_array(v) || config_setting_is_list(v);
    int n = list ? config_setting_length(v) : 1;

    if (list && n == 0) {
        diag_set(reterr, path, conf_line(v), "%s of '%s' is an empty list: give at least one "
                 "value", conf_name(v), key);
        return -EINVAL;
    }
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = list ? config_setting_get_elem(v, (unsigned)i) : v;
        unsigned line = conf_line(e) ? conf_line(e) : conf_line(v);
        char num[32];
        const char *s;
        int q;

        if (config_setting_type(e) == CONFIG_TYPE_STRING) {
            s = config_setting_get_string(e);
        } else if (config_setting_type(e) == CONFIG_TYPE_INT ||
                   config_setting_type(e) == CONFIG_TYPE_INT64) {
            snprintf(num, sizeof(num), "%lld", config_setting_get_int64(e));
            s = num;
        } else {
            diag_set(reterr, path, line, "%s of '%s' must be a string or a list of strings",
                     conf_name(v), key);
            return -EINVAL;
        }
        q = rules_spec_add_match_op(r, key, op, s, line);
        if (q < 0)
            return q;
    }
    return 0;
}

/* key = { cidr = ...; not = ...; not_cidr = ...; } (docs/rules.md "Addresses
 * and negation"): a group, which divvy's .ini and .json cannot write. */
static int conf_rule_match_ops(struct rules_rule_spec *r, const char *path,
                               const config_setting_t *g, struct diag *reterr)
{
    int n = config_setting_length(g), ret = 0;

    if (n == 0) {
        diag_set(reterr, path, conf_line(g), "match value of '%s' is an empty group: give "
                 "cidr, not or not_cidr", conf_name(g));
        return -EINVAL;
    }
    for (int i = 0; i < n; i++) {
        const config_setting_t *v = config_setting_get_elem(g, (unsigned)i);
        size_t k = 0;
        int q;

        while (k < sizeof(conf_match_ops) / sizeof(conf_match_ops[0]) &&
               strcmp(conf_match_ops[k].name, conf_name(v)) != 0)
            k++;
        if (k == sizeof(conf_match_ops) / sizeof(conf_match_ops[0])) {
            diag_set(reterr, path, conf_line(v) ? conf_line(v) : conf_line(g),
                     "unknown match operator '%s' for '%s' (cidr, not, not_cidr)",
                     conf_name(v), conf_name(g));
            ret = -EINVAL;
            continue;
        }
        q = conf_rule_match_op(r, path, conf_name(g), conf_match_ops[k].op, v, reterr);
        if (q == -ENOMEM)
            return q;
        if (q < 0)
            ret = q;
    }
    return ret;
}

static int conf_rule_match_value(struct rules_rule_spec *r, const char *path,
                                 const config_setting_t *m, struct diag *reterr)
{
    unsigned line = conf_line(m);
    char num[32];

    switch (config_setting_type(m)) {
    case CONFIG_TYPE_GROUP:
        return conf_rule_match_ops(r, path, m, reterr);
    case CONFIG_TYPE_STRING:
        return rules_spec_add_match(r, conf_name(m), config_setting_get_string(m), line);
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        snprintf(num, sizeof(num), "%lld", config_setting_get_int64(m));
        return rules_spec_add_match(r, conf_name(m), num, line);
    default:
        diag_set(reterr, path, line, "match value of '%s' must be a string, an integer or a "
                 "group { cidr / not / not_cidr = ... }", conf_name(m));
        return -EINVAL;
    }
}

/* match = { key = "value"; ... } or match = [ "key=value", ... ] */
static int conf_rule_match(struct rules_rule_spec *r, const char *path,
                           const config_setting_t *s, struct diag *reterr)
{
    int n = config_setting_length(s), ret = 0;
    bool group = config_setting_is_group(s);

    if (!group && !config_setting_is_array(s) && !config_setting_is_list(s)) {
        diag_set(reterr, path, conf_line(s),
                 "match must be a group { key = \"value\"; } or a list [ \"key=value\" ]");
        return -EINVAL;
    }
    for (int i = 0; i < n; i++) {
        const config_setting_t *m = config_setting_get_elem(s, (unsigned)i);
        unsigned line = conf_line(m) ? conf_line(m) : conf_line(s);
        const char *kv, *eq;
        char *key;
        int q;

        if (group) {
            q = conf_rule_match_value(r, path, m, reterr);
        } else if (config_setting_type(m) != CONFIG_TYPE_STRING ||
                   !(eq = strchr(kv = config_setting_get_string(m), '=')) || eq == kv) {
            diag_set(reterr, path, line, "match list entries must be \"key=value\" strings");
            q = -EINVAL;
        } else {
            key = strndup(kv, (size_t)(eq - kv));
            q = key ? rules_spec_add_match(r, key, eq + 1, line) : -ENOMEM;
            free(key);
        }
        if (q == -ENOMEM)
            return q;
        if (q < 0)
            ret = q;
    }
    return ret;
}

static int conf_rule_actor(struct rules_rule_spec *r, const struct config_divvy_field *f,
                           const char *path, const config_setting_t *s,
                           struct diag *reterr)
{
    if (config_setting_type(s) == CONFIG_TYPE_STRING)
        return config_divvy_set_string(r, f, "actor", config_setting_get_string(s), false,
                                       path, conf_line(s), reterr);
    if (!config_setting_is_array(s) && !config_setting_is_list(s)) {
        diag_set(reterr, path, conf_line(s), "actor must be a string or a list of strings");
        return -EINVAL;
    }
    for (int i = 0; i < config_setting_length(s); i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        int q;

        if (config_setting_type(e) != CONFIG_TYPE_STRING) {
            diag_set(reterr, path, conf_line(s), "actor must list strings");
            return -EINVAL;
        }
        q = rules_spec_add_actor(r, config_setting_get_string(e));
        if (q < 0)
            return q;
    }
    return 0;
}

/*
 * The calendar-window settings (docs/rules.md "Calendar windows"), native
 * only: calendar = "hour" | "day" | "week" | "month", time_zone = an IANA
 * name or "UTC".  rules_validate() checks what goes with them and loads the
 * zone.  Returns 1 when @s is not one of them.
 */
static int conf_rule_calendar(struct rules_rule_spec *r, const char *path,
                              const config_setting_t *s, struct diag *reterr)
{
    const char *name = conf_name(s), *v;
    unsigned line = conf_line(s);
    bool cal = strcmp(name, "calendar") == 0;

    if (!cal && strcmp(name, "time_zone") != 0)
        return 1;
    if (config_setting_type(s) != CONFIG_TYPE_STRING) {
        diag_set(reterr, path, line, "%s must be a string", name);
        return -EINVAL;
    }
    v = config_setting_get_string(s);
    if (cal) {
        r->calendar = calendar_unit_parse(v);
        r->calendar_line = line;
        if (r->calendar == CALENDAR_NONE) {
            diag_set(reterr, path, line, "calendar must be \"hour\", \"day\", \"week\" or "
                     "\"month\", not \"%s\"", v);
            return -EINVAL;
        }
        return 0;
    }
    r->time_zone_line = line;
    return conf_set_str(&r->time_zone, v);
}

static int conf_rule_setting(struct rules_rule_spec *r, const char *path,
                             const config_setting_t *s, struct diag *reterr)
{
    const char *name = conf_name(s);
    const struct config_divvy_field *f = config_divvy_field(name, true);
    unsigned line = conf_line(s);
    int type = config_setting_type(s);
    int q = config_lock_setting(r, path, s, reterr);

    if (q <= 0)
        return q;                       /* lockout's own settings (config_lock.c) */
    q = f ? 1 : conf_rule_calendar(r, path, s, reterr);
    if (q <= 0)
        return q;
    if (!f) {
        const char *hint = config_divvy_hint(name, true);

        if (hint)
            diag_set(reterr, path, line, "unknown rule setting '%s' (did you mean '%s'?)",
                     name, hint);
        else
            diag_set(reterr, path, line, "unknown rule setting '%s'", name);
        return -EINVAL;
    }
    switch (f->kind) {
    case CONFIG_DIVVY_MATCH:
        return conf_rule_match(r, path, s, reterr);
    case CONFIG_DIVVY_ACTOR:
        return conf_rule_actor(r, f, path, s, reterr);
    case CONFIG_DIVVY_INT:
        if (type != CONFIG_TYPE_INT && type != CONFIG_TYPE_INT64) {
            diag_set(reterr, path, line, "%s must be an integer", name);
            return -EINVAL;
        }
        return config_divvy_set_int(r, f, name, config_setting_get_int64(s), path, line,
                                    reterr);
    case CONFIG_DIVVY_BOOL:
    case CONFIG_DIVVY_DEFAULT:
        if (type != CONFIG_TYPE_BOOL) {
            diag_set(reterr, path, line, "%s must be true or false", name);
            return -EINVAL;
        }
        return config_divvy_set_bool(r, f, config_setting_get_bool(s));
    default:
        if (type != CONFIG_TYPE_STRING) {
            diag_set(reterr, path, line, "%s must be a string", name);
            return -EINVAL;
        }
        return config_divvy_set_string(r, f, name, config_setting_get_string(s), false, path,
                                       line, reterr);
    }
}

static int conf_rules(struct config *cfg, const char *path, const config_setting_t *list,
                      struct diag *reterr)
{
    int ret = 0;

    if (!config_setting_is_list(list)) {
        diag_set(reterr, path, conf_line(list), "rules must be a list ( { ... }, ... )");
        return -EINVAL;
    }
    for (int i = 0; i < config_setting_length(list); i++) {
        const config_setting_t *g = config_setting_get_elem(list, (unsigned)i);
        unsigned line = conf_line(g) ? conf_line(g) : conf_line(list);
        struct rules_rule_spec *r;
        int q;

        if (!config_setting_is_group(g)) {
            diag_set(reterr, path, line, "each rule must be a group { ... }");
            ret = -EINVAL;
            continue;
        }
        q = rules_spec_add(&cfg->rules, path, line, &r);
        if (q == -E2BIG) {
            diag_set(reterr, path, line, "more than %d rules", RULES_MAX);
            return -EINVAL;
        }
        if (q < 0)
            return q;
        for (int j = 0; j < config_setting_length(g); j++) {
            q = conf_rule_setting(r, path, config_setting_get_elem(g, (unsigned)j), reterr);
            if (q == -ENOMEM)
                return q;
            if (q < 0)
                ret = q;
        }
    }
    return ret;
}

/*
 * Settings that go together in redis { }, judged by which ones the file
 * names (not by their values, so a bad value is not reported twice):
 * sentinels and master_name need each other, sentinel_password needs
 * sentinels, and with sentinels the master's address is theirs to give, so
 * host, port and unix_socket are refused rather than silently ignored.
 */
/* A secret is given inline or in a file, never both (which would win?). */
static int conf_redis_secret_pairs(const char *path, const config_setting_t *redis,
                                   struct diag *reterr)
{
    static const char *const names[] = { "password", "sentinel_password" };
    int r = 0;

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char file[32];
        const config_setting_t *inl = config_setting_get_member(redis, names[i]), *f;

        snprintf(file, sizeof(file), "%s_file", names[i]);
        f = config_setting_get_member(redis, file);
        if (inl && f) {
            diag_set(reterr, path, conf_line(f), "redis.%s and redis.%s cannot both be set",
                     names[i], file);
            r = -EINVAL;
        }
    }
    return r;
}

static int conf_redis_sentinel_pairs(const char *path, const config_setting_t *redis,
                                     struct diag *reterr)
{
    static const char *const direct[] = { "host", "port", "unix_socket" };
    const config_setting_t *sentinels = config_setting_get_member(redis, "sentinels");
    const config_setting_t *name = config_setting_get_member(redis, "master_name");
    const config_setting_t *pass = config_setting_get_member(redis, "sentinel_password");
    const config_setting_t *pass_file = config_setting_get_member(redis,
                                                                  "sentinel_password_file");
    int r = 0;

    if (sentinels && !name) {
        diag_set(reterr, path, conf_line(sentinels),
                 "redis.sentinels needs redis.master_name (the name the sentinels monitor)");
        r = -EINVAL;
    }
    if (name && !sentinels) {
        diag_set(reterr, path, conf_line(name), "redis.master_name needs redis.sentinels");
        r = -EINVAL;
    }
    if (pass && !sentinels) {
        diag_set(reterr, path, conf_line(pass), "redis.sentinel_password needs redis.sentinels");
        r = -EINVAL;
    }
    if (pass_file && !sentinels) {
        diag_set(reterr, path, conf_line(pass_file),
                 "redis.sentinel_password_file needs redis.sentinels");
        r = -EINVAL;
    }
    for (size_t i = 0; sentinels && i < sizeof(direct) / sizeof(direct[0]); i++) {
        const config_setting_t *d = config_setting_get_member(redis, direct[i]);

        if (d) {
            diag_set(reterr, path, conf_line(d), "redis.%s cannot be used with redis.sentinels: "
                     "the sentinels say where the master is", direct[i]);
            r = -EINVAL;
        }
    }
    return r;
}

/* With cluster_nodes the slot map says where each key lives: a single
 * server's address, Sentinel and a database other than 0 (a cluster has
 * only db 0) are refused. */
static int conf_redis_cluster_pairs(const char *path, const config_setting_t *redis,
                                    struct diag *reterr)
{
    static const char *const direct[] = { "host", "port", "unix_socket", "sentinels",
                                          "master_name" };
    const config_setting_t *nodes = config_setting_get_member(redis, "cluster_nodes");
    const config_setting_t *db = config_setting_get_member(redis, "db");
    int r = 0;

    if (!nodes)
        return 0;
    for (size_t i = 0; i < sizeof(direct) / sizeof(direct[0]); i++) {
        const config_setting_t *d = config_setting_get_member(redis, direct[i]);

        if (d) {
            diag_set(reterr, path, conf_line(d), "redis.%s cannot be used with "
                     "redis.cluster_nodes: the cluster's slot map says where each key is",
                     direct[i]);
            r = -EINVAL;
        }
    }
    if (db && config_setting_get_int64(db) != 0) {
        diag_set(reterr, path, conf_line(db),
                 "redis.db must be 0 with redis.cluster_nodes: a cluster has only database 0");
        r = -EINVAL;
    }
    return r;
}

/* include_dir = "/ABSOLUTE/PATH"; (docs/config.md "Drop-ins") */
static int conf_include_dir(struct config *cfg, const char *path, const config_setting_t *s,
                            struct diag *reterr)
{
    const char *str;

    if (conf_get_string(path, s, &str, reterr) < 0)
        return -EINVAL;
    if (str[0] != '/' || strlen(str) > 1024) {
        diag_set(reterr, path, conf_line(s), "include_dir must be an absolute path, not \"%s\"",
                 str);
        return -EINVAL;
    }
    return conf_set_str(&cfg->include_dir, str);
}

/* The native loader; a @dropin holds nothing but its 'rules' list. */
static int conf_native_doc(struct config *cfg, const char *path, const char *text, bool dropin,
                           struct diag *reterr)
{
    const config_setting_t *root, *rules = NULL, *redis = NULL;
    struct conf_misread bad = { 0 };
    config_t lc;
    int r;

    r = conf_check_include(path, text, reterr);
    if (r < 0)
        return r;
    config_init(&lc);
    if (!config_read_string(&lc, text)) {
        diag_set(reterr, path, (unsigned)config_error_line(&lc), "%s", config_error_text(&lc));
        r = -EINVAL;
        goto out;
    }
    /* A misread number is reported, and the rest of the file still read
     * (every problem in one pass) without the misread values. */
    r = conf_check_numbers(path, text, &bad, reterr);
    if (bad.n)
        conf_drop_misread(config_root_setting(&lc), 0, &bad);

    root = config_root_setting(&lc);
    for (int i = 0; i < config_setting_length(root); i++) {
        const config_setting_t *s = config_setting_get_elem(root, (unsigned)i);
        const char *name = conf_name(s);
        int q;

        if (dropin && strcmp(name, "rules") != 0) {
            diag_set(reterr, path, conf_line(s), "a drop-in holds only a 'rules' list, not '%s'",
                     name);
            q = -EINVAL;
        } else if (strcmp(name, "include_dir") == 0) {
            q = conf_include_dir(cfg, path, s, reterr);
        } else if (strcmp(name, "server") == 0) {
            q = conf_each(cfg, path, s, conf_server_setting, reterr);
        } else if (strcmp(name, "table") == 0) {
            q = conf_each(cfg, path, s, conf_table_setting, reterr);
        } else if (strcmp(name, "store") == 0) {
            q = conf_each(cfg, path, s, conf_store_setting, reterr);
        } else if (strcmp(name, "metrics") == 0) {
            q = conf_each(cfg, path, s, conf_metrics_setting, reterr);
        } else if (strcmp(name, "statsd") == 0) {
            q = conf_each(cfg, path, s, conf_statsd_setting, reterr);
        } else if (strcmp(name, "rls") == 0) {
            q = conf_each(cfg, path, s, conf_rls_setting, reterr);
        } else if (strcmp(name, "decision_log") == 0) {
            q = conf_dlog_group(cfg, path, s, reterr);
        } else if (strcmp(name, "redis") == 0) {
            redis = s;
            cfg->redis.line = conf_line(s);
            q = conf_each(cfg, path, s, conf_redis_setting, reterr);
        } else if (strcmp(name, "rules") == 0) {
            rules = s;
            q = conf_rules(cfg, path, s, reterr);
        } else {
            q = conf_unknown(path, s, "", conf_top_names, CONF_N(conf_top_names),
                             " (expected server, table, store, redis, metrics, statsd, rls, "
                             "decision_log, rules, include_dir)",
                             reterr);
        }
        if (q == -ENOMEM) {
            r = q;
            goto out;
        }
        if (q < 0)
            r = q;
    }
    if (!rules) {
        diag_set(reterr, path, 0, "missing 'rules' list");
        r = -EINVAL;
    }
    if (dropin)
        goto out;
    if (conf_tls_check(cfg, path, reterr) < 0)
        r = -EINVAL;
    if (cfg->statsd_host && !cfg->statsd_port) {
        diag_set(reterr, path, 0, "statsd.host needs statsd.port");
        r = -EINVAL;
    }
    if (redis && cfg->redis.username && !cfg->redis.password) {
        diag_set(reterr, path, conf_line(redis), "redis.username needs redis.password");
        r = -EINVAL;
    }
    if (redis && config_setting_is_group(redis) &&
        conf_redis_sentinel_pairs(path, redis, reterr) < 0)
        r = -EINVAL;
    if (redis && config_setting_is_group(redis) &&
        conf_redis_secret_pairs(path, redis, reterr) < 0)
        r = -EINVAL;
    if (redis && config_setting_is_group(redis) &&
        conf_redis_cluster_pairs(path, redis, reterr) < 0)
        r = -EINVAL;
out:
    config_destroy(&lc);
    return r;
}

int conf_native(struct config *cfg, const char *path, const char *text, struct diag *reterr)
{
    return conf_native_doc(cfg, path, text, false, reterr);
}

int conf_native_dropin(struct config *cfg, const char *path, const char *text,
                       struct diag *reterr)
{
    return conf_native_doc(cfg, path, text, true, reterr);
}
