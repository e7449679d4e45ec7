/* SPDX-License-Identifier: MIT */
/*
 * config_server: the native format's server, table, metrics and statsd
 * groups (docs/config.md): listen addresses, connection budgets and
 * admission, timeouts, socket mode and groups, table sizes and when_full.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "config_private.h"
#include "table.h"

/* Names each settings group knows, for "did you mean" (suggest.h). */
static const char *const conf_server_names[] = {
    "listen", "workers", "max_connections", "max_output_bytes", "output_budget_bytes",
    "tcp_connections", "unix_connections", "reserved_connections",
    "tcp_connections_per_address", "unix_connections_per_uid", "idle_timeout_ms",
    "request_timeout_ms", "socket_buffer_bytes", "socket_mode", "state_dir", "admin_group",
    "fast_group", "resp_password_file", "tls",
};
static const char *const conf_table_names[] = {
    "slots", "fast_slots", "privileged_slots", "when_full", "snapshot_interval_ms",
    "adhoc_slots", "adhoc_max_buckets", "adhoc_reserved_buckets", "adhoc_buckets_per_peer",
};
static const char *const conf_metrics_names[] = { "listen", "path", "names", "privileged" };
static const char *const conf_statsd_names[] = { "host", "prefix", "port", "interval_ms" };

const char *config_listen_proto(const char *addr, enum config_proto *ret_proto)
{
    static const struct {
        const char *prefix;
        enum config_proto proto;
    } protos[] = {
        { "resp:", CONFIG_PROTO_RESP },
        { "rls:", CONFIG_PROTO_RLS },
    };

    for (size_t i = 0; i < sizeof(protos) / sizeof(protos[0]); i++) {
        size_t n = strlen(protos[i].prefix);

        if (strncmp(addr, protos[i].prefix, n) == 0) {
            *ret_proto = protos[i].proto;
            return addr + n;
        }
    }
    *ret_proto = CONFIG_PROTO_DIVVY;
    return addr;
}

/* "tcp:HOST:PORT" or "unix:PATH" after an optional protocol prefix ("resp:",
 * "rls:"); NULL when fine, else why not. */
static const char *conf_listen_problem(const char *a)
{
    enum config_proto proto;

    a = config_listen_proto(a, &proto);
    if (strncmp(a, "unix:", 5) == 0) {
        size_t n = strlen(a + 5);

        if (n == 0)
            return "has an empty path";
        if (n >= sizeof(((struct sockaddr_un *)0)->sun_path))
            return "has a path too long for a Unix socket";
        return NULL;
    }
    if (strncmp(a, "tcp:", 4) == 0 || config_listen_is_tls(a)) {
        const char *host = a + 4, *colon = strrchr(host, ':');
        unsigned long port;
        char *end;

        if (!colon || colon == host)
            return "needs tcp:HOST:PORT (or tls:HOST:PORT)";
        if (host[0] == '[' && colon[-1] != ']')
            return "has an unclosed '[' around an IPv6 address";
        errno = 0;
        port = strtoul(colon + 1, &end, 10);
        if (!conf_is_digit(colon[1]) || *end || errno || port == 0 || port > 65535)
            return "needs a port between 1 and 65535";
        return NULL;
    }
    return "must start with tcp:, tls: or unix: (after resp: for the Redis protocol, rls: "
           "for Envoy's rate limit service)";
}

/*
 * A list of 1..@max address strings, each checked by @problem (NULL: fine,
 * else why not), named @what in messages; replaces *@list / *@n_list only
 * when every entry is good.
 */
int conf_address_list(const char *path, const config_setting_t *s, const char *what,
                      int max, const char *(*problem)(const char *), char ***list_p,
                      size_t *n_p, struct diag *reterr)
{
    int n = config_setting_length(s);
    char **list = NULL;
    int r = 0;

    if (!config_setting_is_array(s) && !config_setting_is_list(s)) {
        diag_set(reterr, path, conf_line(s), "%s must be a list of addresses", what);
        return -EINVAL;
    }
    if (n == 0 || n > max) {
        diag_set(reterr, path, conf_line(s), "%s must name 1 to %d addresses", what, max);
        return -EINVAL;
    }
    list = calloc((size_t)n, sizeof(*list));
    if (!list)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        unsigned line = conf_line(e) ? conf_line(e) : conf_line(s);
        const char *a, *why;

        if (config_setting_type(e) != CONFIG_TYPE_STRING) {
            diag_set(reterr, path, line, "%s entries must be strings", what);
            r = -EINVAL;
            continue;
        }
        a = config_setting_get_string(e);
        why = problem(a);
        if (why) {
            diag_set(reterr, path, line, "%s address \"%s\" %s", what, a, why);
            r = -EINVAL;
            continue;
        }
        list[i] = strdup(a);
        if (!list[i]) {
            r = -ENOMEM;
            goto out;
        }
    }
    if (r < 0)
        goto out;
    for (size_t i = 0; i < *n_p; i++)
        free((*list_p)[i]);
    free(*list_p);
    *list_p = list;
    *n_p = (size_t)n;
    list = NULL;
out:
    for (int i = 0; list && i < n; i++)
        free(list[i]);
    free(list);
    return r;
}

static int conf_server_listen(struct config *cfg, const char *path, const config_setting_t *s,
                              struct diag *reterr)
{
    return conf_address_list(path, s, "listen", CONFIG_LISTEN_MAX, conf_listen_problem,
                             &cfg->listen, &cfg->n_listen, reterr);
}

/* Admission settings (docs/daemon.md "Admission"): 1 when @s is none of them. */
static int conf_admit_setting(struct config *cfg, const char *path, const config_setting_t *s,
                              struct diag *reterr)
{
    static const struct {
        const char *name;
        int64_t min, max;
        size_t off;
    } ints[] = {
        { "tcp_connections", 1, CONFIG_CONNECTIONS_MAX,
          offsetof(struct config_admit, tcp_connections) },
        { "unix_connections", 1, CONFIG_CONNECTIONS_MAX,
          offsetof(struct config_admit, unix_connections) },
        { "reserved_connections", 1, CONFIG_RESERVED_MAX,
          offsetof(struct config_admit, reserved_connections) },
        { "tcp_connections_per_address", 1, CONFIG_CONNECTIONS_MAX,
          offsetof(struct config_admit, per_address) },
        { "unix_connections_per_uid", 1, CONFIG_CONNECTIONS_MAX,
          offsetof(struct config_admit, per_uid) },
        { "idle_timeout_ms", 0, CONFIG_TIMEOUT_MAX,
          offsetof(struct config_admit, idle_timeout_ms) },
        { "request_timeout_ms", 0, CONFIG_TIMEOUT_MAX,
          offsetof(struct config_admit, request_timeout_ms) },
        { "socket_buffer_bytes", 0, CONFIG_SOCKBUF_MAX,
          offsetof(struct config_admit, socket_buffer_bytes) },
    };
    const char *name = conf_name(s);
    int64_t v;
    int r;

    if (strcmp(name, "output_budget_bytes") == 0) {
        r = conf_get_int(path, s, CONFIG_OUTPUT_MIN, CONFIG_OUTPUT_MAX, &v, reterr);
        if (r == 0)
            cfg->admit.output_budget_bytes = (size_t)v;
        return r;
    }
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        if (strcmp(name, ints[i].name) != 0)
            continue;
        r = conf_get_int(path, s, ints[i].min, ints[i].max, &v, reterr);
        if (r == 0)
            *(unsigned *)((char *)&cfg->admit + ints[i].off) = (unsigned)v;
        return r;
    }
    return 1;
}

void config_connections(const struct config *cfg, unsigned *ret_tcp, unsigned *ret_unix,
                        unsigned *ret_total)
{
    unsigned max = cfg->max_connections;
    unsigned tcp = cfg->admit.tcp_connections, un = cfg->admit.unix_connections;
    uint64_t sum;

    if (!tcp)
        tcp = max ? max : CONFIG_DEFAULT_TCP_CONNECTIONS;
    if (!un)
        un = max ? max : CONFIG_DEFAULT_UNIX_CONNECTIONS;
    sum = (uint64_t)tcp + un;
    *ret_tcp = tcp;
    *ret_unix = un;
    *ret_total = max ? max : sum > UINT32_MAX ? UINT32_MAX : (unsigned)sum;
}

/*
 * server.resp_password_file: the password RESP listeners ask for (docs/resp.md
 * "AUTH"), read now (at start, at each reload, by --check) from the file or
 * systemd credential named (server/secret.c); the name is kept for the writer.
 */
static int conf_server_resp_password(struct config *cfg, const char *path,
                                     const config_setting_t *s, struct diag *reterr)
{
    return conf_secret_file(path, s, "server", &cfg->resp_password, &cfg->resp_password_file,
                            reterr);
}

int conf_server_setting(struct config *cfg, const char *path,
                        const config_setting_t *s, struct diag *reterr)
{
    const char *name = conf_name(s), *str;
    int64_t v;
    int r;

    if (strcmp(name, "listen") == 0) {
        cfg->tls.listen_line = conf_line(s);
        return conf_server_listen(cfg, path, s, reterr);
    }
    if (strcmp(name, "resp_password_file") == 0)
        return conf_server_resp_password(cfg, path, s, reterr);
    if (strcmp(name, "tls") == 0)
        return conf_tls_group(cfg, path, s, reterr);
    if (strcmp(name, "workers") == 0) {
        r = conf_get_int(path, s, 0, CONFIG_WORKERS_MAX, &v, reterr);
        if (r == 0)
            cfg->workers = (unsigned)v;
        return r;
    }
    if (strcmp(name, "max_connections") == 0) {
        r = conf_get_int(path, s, 1, CONFIG_CONNECTIONS_MAX, &v, reterr);
        if (r == 0)
            cfg->max_connections = (unsigned)v;
        return r;
    }
    if (strcmp(name, "max_output_bytes") == 0) {
        r = conf_get_int(path, s, CONFIG_OUTPUT_MIN, CONFIG_OUTPUT_MAX, &v, reterr);
        if (r == 0)
            cfg->max_output_bytes = (size_t)v;
        return r;
    }
    r = conf_admit_setting(cfg, path, s, reterr);
    if (r != 1)
        return r;
    if (strcmp(name, "socket_mode") == 0) {
        unsigned long mode;
        char *end;

        if (config_setting_type(s) != CONFIG_TYPE_STRING) {
            diag_set(reterr, path, conf_line(s),
                     "socket_mode must be an octal string such as \"0660\"");
            return -EINVAL;
        }
        str = config_setting_get_string(s);
        mode = strtoul(str, &end, 8);
        if (!str[0] || *end || strlen(str) > 4 || mode > 0777 || str[0] == '-' ||
            str[0] == '+' || str[0] == ' ') {
            diag_set(reterr, path, conf_line(s),
                     "socket_mode must be an octal mode up to \"0777\", not \"%s\"", str);
            return -EINVAL;
        }
        cfg->socket_mode = (unsigned)mode;
        return 0;
    }
    if (strcmp(name, "state_dir") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r == 0 && str[0] != '/') {
            diag_set(reterr, path, conf_line(s), "state_dir must be an absolute path");
            r = -EINVAL;
        }
        return r < 0 ? r : conf_set_str(&cfg->state_dir, str);
    }
    if (strcmp(name, "admin_group") == 0 || strcmp(name, "fast_group") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r == 0 && (!str[0] || strlen(str) > CONFIG_GROUP_MAX ||
                       strpbrk(str, " \t\n:/,") != NULL)) {
            diag_set(reterr, path, conf_line(s), "%s \"%s\" is not a group name", name, str);
            r = -EINVAL;
        }
        if (r < 0)
            return r;
        return conf_set_str(name[0] == 'a' ? &cfg->admin_group : &cfg->fast_group, str);
    }
    return conf_unknown(path, s, "server", conf_server_names, CONF_N(conf_server_names), "",
                        reterr);
}

int conf_table_setting(struct config *cfg, const char *path,
                       const config_setting_t *s, struct diag *reterr)
{
    const char *name = conf_name(s), *str;
    uint32_t *adhoc;
    int64_t v;
    int r;

    if (strcmp(name, "slots") == 0 || strcmp(name, "fast_slots") == 0 ||
        strcmp(name, "privileged_slots") == 0) {
        r = conf_get_int(path, s, TABLE_SLOTS_MIN, TABLE_SLOTS_MAX, &v, reterr);
        if (r == 0 && name[0] == 's')
            cfg->table_slots = (uint32_t)v;
        else if (r == 0 && name[0] == 'f')
            cfg->fast_table_slots = (uint32_t)v;
        else if (r == 0)
            cfg->privileged_table_slots = (uint32_t)v;
        return r;
    }
    adhoc = strcmp(name, "adhoc_slots") == 0              ? &cfg->adhoc_slots
            : strcmp(name, "adhoc_max_buckets") == 0      ? &cfg->adhoc_max_buckets
            : strcmp(name, "adhoc_reserved_buckets") == 0 ? &cfg->adhoc_reserved_buckets
            : strcmp(name, "adhoc_buckets_per_peer") == 0 ? &cfg->adhoc_buckets_per_peer
                                                          : NULL;
    if (adhoc) {
        /* 0 is "the default" for all but the size (docs/config.md). */
        r = conf_get_int(path, s, adhoc == &cfg->adhoc_slots ? 1 : 0, TABLE_SLOTS_MAX, &v,
                         reterr);
        if (r == 0)
            *adhoc = (uint32_t)v;
        return r;
    }
    if (strcmp(name, "when_full") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r < 0)
            return r;
        if (strcmp(str, "deny") == 0) {
            cfg->when_full = CONFIG_FULL_DENY;
        } else if (strcmp(str, "allow") == 0) {
            cfg->when_full = CONFIG_FULL_ALLOW;
        } else {
            diag_set(reterr, path, conf_line(s),
                     "when_full must be \"deny\" or \"allow\", not \"%s\"", str);
            return -EINVAL;
        }
        return 0;
    }
    if (strcmp(name, "snapshot_interval_ms") == 0) {
        r = conf_get_int(path, s, 0, CONFIG_SNAPSHOT_MS_MAX, &v, reterr);
        if (r == 0)
            cfg->snapshot_interval_ms = (unsigned)v;
        return r;
    }
    return conf_unknown(path, s, "table", conf_table_names, CONF_N(conf_table_names), "", reterr);
}

int conf_metrics_setting(struct config *cfg, const char *path,
                         const config_setting_t *s, struct diag *reterr)
{
    const char *name = conf_name(s), *str;
    int r;

    if (strcmp(name, "listen") == 0 || strcmp(name, "path") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r < 0)
            return r;
        if (name[0] == 'l' && strncmp(str, "tcp:", 4) != 0) {
            diag_set(reterr, path, conf_line(s),
                     "metrics.listen must be \"tcp:HOST:PORT\", not \"%s\"", str);
            return -EINVAL;
        }
        if (name[0] == 'p' && str[0] != '/') {
            diag_set(reterr, path, conf_line(s), "metrics.path must start with '/'");
            return -EINVAL;
        }
        return conf_set_str(name[0] == 'l' ? &cfg->metrics_listen : &cfg->metrics_path, str);
    }
    if (strcmp(name, "names") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r < 0)
            return r;
        if (strcmp(str, "prometheus") != 0 && strcmp(str, "divvy") != 0) {
            diag_set(reterr, path, conf_line(s),
                     "metrics.names must be \"prometheus\" or \"divvy\", not \"%s\"", str);
            return -EINVAL;
        }
        cfg->metrics_divvy_names = str[0] == 'd';
        return 0;
    }
    if (strcmp(name, "privileged") == 0) {
        if (config_setting_type(s) != CONFIG_TYPE_BOOL) {
            diag_set(reterr, path, conf_line(s), "metrics.privileged must be true or false");
            return -EINVAL;
        }
        cfg->metrics_privileged = config_setting_get_bool(s) != 0;
        return 0;
    }
    return conf_unknown(path, s, "metrics", conf_metrics_names, CONF_N(conf_metrics_names), "",
                        reterr);
}

int conf_statsd_setting(struct config *cfg, const char *path,
                        const config_setting_t *s, struct diag *reterr)
{
    const char *name = conf_name(s), *str;
    int64_t v;
    int r;

    if (strcmp(name, "host") == 0 || strcmp(name, "prefix") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r < 0)
            return r;
        return conf_set_str(name[0] == 'h' ? &cfg->statsd_host : &cfg->statsd_prefix, str);
    }
    if (strcmp(name, "port") == 0) {
        r = conf_get_int(path, s, 1, 65535, &v, reterr);
        if (r == 0)
            cfg->statsd_port = (unsigned)v;
        return r;
    }
    if (strcmp(name, "interval_ms") == 0) {
        r = conf_get_int(path, s, 100, 60000, &v, reterr);
        if (r == 0)
            cfg->statsd_interval_ms = (unsigned)v;
        return r;
    }
    return conf_unknown(path, s, "statsd", conf_statsd_names, CONF_N(conf_statsd_names), "",
                        reterr);
}

/* ---- rls { }: the RLS listener's answers (docs/rls.md "Settings") ------------------ */

static const char *const conf_rls_names[] = { "unmatched", "ratelimit_headers" };

int conf_rls_setting(struct config *cfg, const char *path, const config_setting_t *s,
                     struct diag *reterr)
{
    const char *name = conf_name(s), *str;
    int r;

    if (strcmp(name, "unmatched") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r < 0)
            return r;
        if (strcmp(str, "ok") != 0 && strcmp(str, "rule") != 0) {
            diag_set(reterr, path, conf_line(s),
                     "rls.unmatched must be \"ok\" or \"rule\", not \"%s\"", str);
            return -EINVAL;
        }
        cfg->rls_unmatched_rule = str[0] == 'r';
        return 0;
    }
    if (strcmp(name, "ratelimit_headers") == 0) {
        if (config_setting_type(s) != CONFIG_TYPE_BOOL) {
            diag_set(reterr, path, conf_line(s), "rls.ratelimit_headers must be true or false");
            return -EINVAL;
        }
        cfg->rls_ratelimit_headers = config_setting_get_bool(s) != 0;
        return 0;
    }
    return conf_unknown(path, s, "rls", conf_rls_names, CONF_N(conf_rls_names), "", reterr);
}
