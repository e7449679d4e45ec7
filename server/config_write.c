/* SPDX-License-Identifier: MIT */
/*
 * config_write: writes a loaded config back out in the native format
 * (config_write_libconfig(), for divvyctl convert): the server, table,
 * store, redis and metrics groups that differ from the defaults, and every rule with
 * its settings in native spelling.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calendar.h"
#include "config_divvy.h"
#include "config_lock.h"
#include "config_private.h"
#include "table.h"

/* ---- writer ------------------------------------------------------------- */

static void conf_put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* One setting with a string value: @lead (indent and name) = "@s"; */
static void conf_put_setting(FILE *f, const char *lead, const char *s)
{
    fprintf(f, "%s = ", lead);
    conf_put_string(f, s);
    fprintf(f, ";\n");
}

/* One setting with a list of strings: @lead = [ "a", "b" ]; */
static void conf_put_list(FILE *f, const char *lead, char *const *v, size_t n)
{
    fprintf(f, "%s = [ ", lead);
    for (size_t i = 0; i < n; i++) {
        conf_put_string(f, v[i]);
        fprintf(f, i + 1 < n ? ", " : " ");
    }
    fprintf(f, "];\n");
}

static void conf_put_int(FILE *f, const char *name, int64_t v)
{
    /* libconfig 1.5 needs the L suffix beyond 32 bits (see the top). */
    if (v > INT32_MAX || v < INT32_MIN)
        fprintf(f, "        %s = %" PRId64 "L;\n", name, v);
    else
        fprintf(f, "        %s = %" PRId64 ";\n", name, v);
}

/* A key libconfig accepts as a setting name (kept narrower than its own);
 * "true" and "false", in any case, are its boolean literals, never names. */
static bool conf_is_plain_name(const char *s)
{
    if (strcasecmp(s, "true") == 0 || strcasecmp(s, "false") == 0)
        return false;
    if (!((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z')))
        return false;
    for (s++; *s; s++) {
        if (!conf_is_name_char(*s) || *s == '*')
            return false;
    }
    return true;
}

static const char *conf_match_op_name(enum rules_match_op op)
{
    return op == RULES_MATCH_CIDR ? "cidr" : op == RULES_MATCH_NOT ? "not" : "not_cidr";
}

/*
 * The operator entries of key r->match[*@i] as "key = { op = [ ... ]; ... }; "
 * (docs/rules.md "Addresses and negation"); the loader added each key's
 * entries together, each operator's values in a run.  Advances *@i past them.
 */
static void conf_write_match_ops(const struct rules_rule_spec *r, size_t *i, FILE *f)
{
    const char *key = r->match[*i].key;

    fprintf(f, "%s = { ", key);
    while (*i < r->n_match && r->match[*i].op != RULES_MATCH_VALUE &&
           strcmp(r->match[*i].key, key) == 0) {
        enum rules_match_op op = r->match[*i].op;

        fprintf(f, "%s = [ ", conf_match_op_name(op));
        for (bool first = true; *i < r->n_match && r->match[*i].op == op &&
                                strcmp(r->match[*i].key, key) == 0; (*i)++, first = false) {
            if (!first)
                fprintf(f, ", ");
            conf_put_string(f, r->match[*i].value);
        }
        fprintf(f, " ]; ");
    }
    fprintf(f, "}; ");
}

static int conf_write_rule(const struct rules_rule_spec *r, bool last, FILE *f)
{
    bool plain = true, ops = false;

    fprintf(f, "    {\n");
    for (size_t i = 0; i < r->n_match; i++) {
        if (!conf_is_plain_name(r->match[i].key))
            plain = false;
        if (r->match[i].op != RULES_MATCH_VALUE)
            ops = true;
    }
    /* Operators exist only in the group form, whose keys libconfig read as
     * setting names: they can be written back as names. */
    if (ops)
        plain = true;
    if (r->is_default)
        fprintf(f, "        default = true;\n");
    if (r->n_match) {
        fprintf(f, plain ? "        match = { " : "        match = [ ");
        for (size_t i = 0; i < r->n_match; i++) {
            if (r->match[i].op != RULES_MATCH_VALUE) {
                conf_write_match_ops(r, &i, f);
                i--;
            } else if (plain) {
                fprintf(f, "%s = ", r->match[i].key);
                conf_put_string(f, r->match[i].value);
                fprintf(f, "; ");
            } else {
                char *kv;

                if (asprintf(&kv, "%s=%s", r->match[i].key, r->match[i].value) < 0)
                    return -ENOMEM;
                conf_put_string(f, kv);
                free(kv);
                fprintf(f, i + 1 < r->n_match ? ", " : " ");
            }
        }
        fprintf(f, plain ? "};\n" : "];\n");
    }
    if (r->n_actor == 1)
        conf_put_setting(f, "        actor", r->actor[0]);
    else if (r->n_actor > 1)
        conf_put_list(f, "        actor", r->actor, r->n_actor);
    if (r->credit_limit >= 0)
        conf_put_int(f, "credit_limit", r->credit_limit);
    if (r->reset_seconds >= 0)
        conf_put_int(f, "reset_seconds", r->reset_seconds);
    if (r->algo == RULES_ALGO_LOCKOUT)
        config_lock_write(f, r);
    else if (r->algo != RULES_ALGO_WINDOW)
        fprintf(f, "        algorithm = \"%s\";\n", config_divvy_algo_name(r->algo));
    if (r->refill_amount >= 0)
        conf_put_int(f, "refill_amount", r->refill_amount);
    if (r->refill_seconds >= 0)
        conf_put_int(f, "refill_seconds", r->refill_seconds);
    /* Native-only durations and refill (docs/rules.md "Algorithms"). */
    if (r->reset_ms >= 0)
        conf_put_int(f, "reset_ms", r->reset_ms);
    if (r->refill_ms >= 0)
        conf_put_int(f, "refill_ms", r->refill_ms);
    if (r->refill_set)
        fprintf(f, "        refill = \"%s\";\n", r->continuous ? "continuous" : "steps");
    if (r->strict)
        fprintf(f, "        strict = true;\n");
    if (r->policy != RULES_POLICY_STOP)
        fprintf(f, "        match_policy = \"%s\";\n", config_divvy_policy_name(r->policy));
    if (r->source != RULES_SOURCE_ANY)
        fprintf(f, "        source = \"%s\";\n", config_divvy_source_name(r->source));
    if (r->fast_path)
        fprintf(f, "        fast_path = true;\n");
    if (r->no_reset)
        fprintf(f, "        resettable = false;\n");
    if (r->store_set)
        fprintf(f, "        store = \"%s\";\n", config_divvy_store_name(r->store));
    if (r->prefix4 >= 0)
        conf_put_int(f, "actor_prefix4", r->prefix4);
    if (r->prefix6 >= 0)
        conf_put_int(f, "actor_prefix6", r->prefix6);
    if (r->max_actors > 0)
        conf_put_int(f, "max_actors", r->max_actors);
    if (r->max_debit >= 0)
        conf_put_int(f, "max_debit", r->max_debit);
    if (r->when_full != RULES_FULL_TABLE)
        fprintf(f, "        when_full = \"%s\";\n", config_divvy_when_full_name(r->when_full));
    if (r->calendar)
        fprintf(f, "        calendar = \"%s\";\n",
                calendar_unit_name((enum calendar_unit)r->calendar));
    if (r->time_zone)
        conf_put_setting(f, "        time_zone", r->time_zone);
    if (r->label)
        conf_put_setting(f, "        label", r->label);
    if (r->comment)
        conf_put_setting(f, "        comment", r->comment);
    fprintf(f, last ? "    }\n" : "    },\n");
    return 0;
}

static bool conf_admit_changed(const struct config *cfg)
{
    const struct config_admit *a = &cfg->admit;

    return a->tcp_connections || a->unix_connections ||
           a->reserved_connections != CONFIG_DEFAULT_RESERVED_CONNECTIONS ||
           a->per_address != CONFIG_DEFAULT_PER_ADDRESS || a->per_uid != CONFIG_DEFAULT_PER_UID ||
           a->idle_timeout_ms != CONFIG_DEFAULT_IDLE_TIMEOUT_MS ||
           a->request_timeout_ms != CONFIG_DEFAULT_REQUEST_TIMEOUT_MS ||
           a->output_budget_bytes != CONFIG_DEFAULT_OUTPUT_BUDGET ||
           a->socket_buffer_bytes != CONFIG_DEFAULT_SOCKET_BUFFER;
}

static void conf_write_admit(const struct config *cfg, FILE *f)
{
    const struct config_admit *a = &cfg->admit;

    if (a->tcp_connections)
        fprintf(f, "    tcp_connections = %u;\n", a->tcp_connections);
    if (a->unix_connections)
        fprintf(f, "    unix_connections = %u;\n", a->unix_connections);
    if (a->reserved_connections != CONFIG_DEFAULT_RESERVED_CONNECTIONS)
        fprintf(f, "    reserved_connections = %u;\n", a->reserved_connections);
    if (a->per_address != CONFIG_DEFAULT_PER_ADDRESS)
        fprintf(f, "    tcp_connections_per_address = %u;\n", a->per_address);
    if (a->per_uid != CONFIG_DEFAULT_PER_UID)
        fprintf(f, "    unix_connections_per_uid = %u;\n", a->per_uid);
    if (a->idle_timeout_ms != CONFIG_DEFAULT_IDLE_TIMEOUT_MS)
        fprintf(f, "    idle_timeout_ms = %u;\n", a->idle_timeout_ms);
    if (a->request_timeout_ms != CONFIG_DEFAULT_REQUEST_TIMEOUT_MS)
        fprintf(f, "    request_timeout_ms = %u;\n", a->request_timeout_ms);
    if (a->output_budget_bytes != CONFIG_DEFAULT_OUTPUT_BUDGET)
        fprintf(f, "    output_budget_bytes = %zu;\n", a->output_budget_bytes);
    if (a->socket_buffer_bytes != CONFIG_DEFAULT_SOCKET_BUFFER)
        fprintf(f, "    socket_buffer_bytes = %u;\n", a->socket_buffer_bytes);
}

static void conf_write_server(const struct config *cfg, FILE *f)
{
    bool listen_default = cfg->n_listen == 2 && strcmp(cfg->listen[0], CONFIG_DEFAULT_TCP) == 0 &&
                          strcmp(cfg->listen[1], CONFIG_DEFAULT_UNIX) == 0;
    bool any = !listen_default || strcmp(cfg->state_dir, CONFIG_DEFAULT_STATE_DIR) != 0 ||
               cfg->workers != 0 || cfg->max_connections != 0 ||
               cfg->max_output_bytes != CONFIG_DEFAULT_OUTPUT_BYTES || conf_admit_changed(cfg) ||
               cfg->socket_mode != CONFIG_DEFAULT_SOCKET_MODE ||
               strcmp(cfg->admin_group, CONFIG_DEFAULT_ADMIN_GROUP) != 0 ||
               cfg->resp_password_file;

    if (!any)
        return;
    fprintf(f, "server = {\n");
    if (!listen_default)
        conf_put_list(f, "    listen", cfg->listen, cfg->n_listen);
    if (strcmp(cfg->state_dir, CONFIG_DEFAULT_STATE_DIR) != 0)
        conf_put_setting(f, "    state_dir", cfg->state_dir);
    if (cfg->workers != 0)
        fprintf(f, "    workers = %u;\n", cfg->workers);
    if (cfg->max_connections != 0)
        fprintf(f, "    max_connections = %u;\n", cfg->max_connections);
    if (cfg->max_output_bytes != CONFIG_DEFAULT_OUTPUT_BYTES)
        fprintf(f, "    max_output_bytes = %zu;\n", cfg->max_output_bytes);
    conf_write_admit(cfg, f);
    if (cfg->socket_mode != CONFIG_DEFAULT_SOCKET_MODE)
        fprintf(f, "    socket_mode = \"0%o\";\n", cfg->socket_mode);
    if (strcmp(cfg->admin_group, CONFIG_DEFAULT_ADMIN_GROUP) != 0)
        conf_put_setting(f, "    admin_group", cfg->admin_group);
    if (cfg->resp_password_file)
        conf_put_setting(f, "    resp_password_file", cfg->resp_password_file);
    fprintf(f, "};\n\n");
}

static void conf_write_store(const struct config *cfg, FILE *f)
{
    static const char *const on_error[] = { "local", "open", "closed" };
    static const char *const adhoc[] = { "auto", "local", "redis" };
    const struct config_redis *rd = &cfg->redis;

    if (cfg->rules.default_store != RULES_STORE_LOCAL ||
        cfg->on_redis_error != CONFIG_REDIS_ERROR_LOCAL || cfg->adhoc_store != CONFIG_ADHOC_AUTO ||
        (cfg->store_prefix && cfg->store_prefix[0]) || cfg->lease_max != CONFIG_DEFAULT_LEASE_MAX) {
        fprintf(f, "store = {\n    mode = \"%s\";\n",
                config_divvy_store_name(cfg->rules.default_store));
        fprintf(f, "    on_redis_error = \"%s\";\n", on_error[cfg->on_redis_error]);
        if (cfg->store_prefix && cfg->store_prefix[0])
            conf_put_setting(f, "    prefix", cfg->store_prefix);
        if (cfg->lease_max != CONFIG_DEFAULT_LEASE_MAX)
            fprintf(f, "    lease_max = %" PRIu64 ";\n", cfg->lease_max);
        if (cfg->adhoc_store != CONFIG_ADHOC_AUTO)
            fprintf(f, "    adhoc = \"%s\";\n", adhoc[cfg->adhoc_store]);
        fprintf(f, "};\n\n");
    }
    if ((rd->host && strcmp(rd->host, CONFIG_DEFAULT_REDIS_HOST) != 0) ||
        rd->port != CONFIG_DEFAULT_REDIS_PORT || rd->unix_socket || rd->username ||
        rd->password || rd->db || rd->timeout_ms != CONFIG_DEFAULT_REDIS_TIMEOUT_MS ||
        rd->n_sentinels || rd->master_name || rd->sentinel_password || rd->n_cluster_nodes) {
        fprintf(f, "redis = {\n");
        if (rd->host && strcmp(rd->host, CONFIG_DEFAULT_REDIS_HOST) != 0)
            conf_put_setting(f, "    host", rd->host);
        if (rd->port != CONFIG_DEFAULT_REDIS_PORT)
            fprintf(f, "    port = %u;\n", rd->port);
        if (rd->unix_socket)
            conf_put_setting(f, "    unix_socket", rd->unix_socket);
        if (rd->username)
            conf_put_setting(f, "    username", rd->username);
        /* A secret read from a file stays there: its name is written, never it. */
        if (rd->password_file)
            conf_put_setting(f, "    password_file", rd->password_file);
        else if (rd->password)
            conf_put_setting(f, "    password", rd->password);
        if (rd->db)
            fprintf(f, "    db = %u;\n", rd->db);
        if (rd->timeout_ms != CONFIG_DEFAULT_REDIS_TIMEOUT_MS)
            fprintf(f, "    timeout_ms = %u;\n", rd->timeout_ms);
        if (rd->n_sentinels)
            conf_put_list(f, "    sentinels", rd->sentinels, rd->n_sentinels);
        if (rd->master_name)
            conf_put_setting(f, "    master_name", rd->master_name);
        if (rd->sentinel_password_file)
            conf_put_setting(f, "    sentinel_password_file", rd->sentinel_password_file);
        else if (rd->sentinel_password)
            conf_put_setting(f, "    sentinel_password", rd->sentinel_password);
        if (rd->n_cluster_nodes)
            conf_put_list(f, "    cluster_nodes", rd->cluster_nodes, rd->n_cluster_nodes);
        fprintf(f, "};\n\n");
    }
}

/* metrics { }, when a setting differs from its default. */
static void conf_write_metrics(const struct config *cfg, FILE *f)
{
    if (!cfg->metrics_listen && !cfg->metrics_path && !cfg->metrics_divvy_names &&
        !cfg->metrics_privileged)
        return;
    fprintf(f, "metrics = {\n");
    if (cfg->metrics_listen)
        conf_put_setting(f, "    listen", cfg->metrics_listen);
    if (cfg->metrics_path)
        conf_put_setting(f, "    path", cfg->metrics_path);
    if (cfg->metrics_divvy_names)
        fprintf(f, "    names = \"divvy\";\n");
    if (cfg->metrics_privileged)
        fprintf(f, "    privileged = true;\n");
    fprintf(f, "};\n\n");
}

int config_write_libconfig(const struct config *cfg, FILE *f)
{
    int r;

    /* Keys with no native spelling (docs/config.md): refuse before writing. */
    for (size_t i = 0; i < cfg->rules.n; i++) {
        const struct rules_rule_spec *rule = &cfg->rules.rules[i];

        for (size_t j = 0; j < rule->n_match; j++) {
            if (!rule->match[j].key[0] || strchr(rule->match[j].key, '='))
                return -EINVAL;
        }
    }
    fprintf(f, "# divvy.conf, written by divvyctl convert (see divvy.conf(5)).\n\n");
    if (cfg->listen && cfg->state_dir && cfg->admin_group)
        conf_write_server(cfg, f);
    if (cfg->table_slots != TABLE_SLOTS_DEFAULT || cfg->fast_table_slots != TABLE_SLOTS_DEFAULT ||
        cfg->privileged_table_slots != CONFIG_DEFAULT_PRIVILEGED_SLOTS ||
        cfg->adhoc_slots != CONFIG_DEFAULT_ADHOC_SLOTS || cfg->adhoc_max_buckets != 0 ||
        cfg->adhoc_reserved_buckets != 0 || cfg->adhoc_buckets_per_peer != 0 ||
        cfg->when_full != CONFIG_FULL_DENY) {
        fprintf(f, "table = {\n");
        if (cfg->table_slots != TABLE_SLOTS_DEFAULT)
            fprintf(f, "    slots = %" PRIu32 ";\n", cfg->table_slots);
        if (cfg->fast_table_slots != TABLE_SLOTS_DEFAULT)
            fprintf(f, "    fast_slots = %" PRIu32 ";\n", cfg->fast_table_slots);
        if (cfg->privileged_table_slots != CONFIG_DEFAULT_PRIVILEGED_SLOTS)
            fprintf(f, "    privileged_slots = %" PRIu32 ";\n", cfg->privileged_table_slots);
        if (cfg->adhoc_slots != CONFIG_DEFAULT_ADHOC_SLOTS)
            fprintf(f, "    adhoc_slots = %" PRIu32 ";\n", cfg->adhoc_slots);
        if (cfg->adhoc_max_buckets != 0)
            fprintf(f, "    adhoc_max_buckets = %" PRIu32 ";\n", cfg->adhoc_max_buckets);
        if (cfg->adhoc_reserved_buckets != 0)
            fprintf(f, "    adhoc_reserved_buckets = %" PRIu32 ";\n", cfg->adhoc_reserved_buckets);
        if (cfg->adhoc_buckets_per_peer != 0)
            fprintf(f, "    adhoc_buckets_per_peer = %" PRIu32 ";\n", cfg->adhoc_buckets_per_peer);
        if (cfg->when_full != CONFIG_FULL_DENY)
            fprintf(f, "    when_full = \"allow\";\n");
        fprintf(f, "};\n\n");
    }
    conf_write_store(cfg, f);
    conf_write_metrics(cfg, f);
    if (cfg->include_dir) {
        conf_put_setting(f, "include_dir", cfg->include_dir);
        fputc('\n', f);
    }
    fprintf(f, "rules = (\n");
    for (size_t i = 0; i < cfg->rules.n; i++) {
        /* The drop-ins' rules stay in their files: include_dir reads them. */
        if (cfg->include_dir && cfg->rules.rules[i].file && cfg->path &&
            strcmp(cfg->rules.rules[i].file, cfg->path) != 0)
            continue;
        r = conf_write_rule(&cfg->rules.rules[i], i + 1 == cfg->rules.n, f);
        if (r < 0)
            return r;
    }
    fprintf(f, ");\n");
    if (fflush(f) != 0 || ferror(f))
        return -EIO;
    return 0;
}
