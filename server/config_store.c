/* SPDX-License-Identifier: MIT */
/*
 * config_store: the native format's store and redis groups (docs/redis.md):
 * the store mode and failure policy, lease size, the Redis address, its
 * credentials (inline or from a file, secret.h), sentinels and cluster seeds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "config_divvy.h"
#include "config_private.h"
#include "secret.h"

/* Names each settings group knows, for "did you mean" (suggest.h). */
static const char *const conf_store_names[] = {
    "mode", "on_redis_error", "prefix", "lease_max", "adhoc",
};
static const char *const conf_redis_names[] = {
    "host", "port", "unix_socket", "username", "password", "password_file", "db", "timeout_ms",
    "sentinels", "master_name", "sentinel_password", "sentinel_password_file", "cluster_nodes",
};

int conf_store_setting(struct config *cfg, const char *path,
                       const config_setting_t *s, struct diag *reterr)
{
    const char *name = conf_name(s), *str;
    int64_t v;
    int r;

    if (strcmp(name, "mode") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r < 0)
            return r;
        r = config_divvy_store_parse(str);
        if (r < 0) {
            diag_set(reterr, path, conf_line(s),
                     "store.mode must be \"local\", \"lease\" or \"strict\", not \"%s\"", str);
            return -EINVAL;
        }
        cfg->rules.default_store = (enum rules_store)r;
        return 0;
    }
    if (strcmp(name, "on_redis_error") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r < 0)
            return r;
        if (strcmp(str, "local") == 0) {
            cfg->on_redis_error = CONFIG_REDIS_ERROR_LOCAL;
        } else if (strcmp(str, "open") == 0) {
            cfg->on_redis_error = CONFIG_REDIS_ERROR_OPEN;
        } else if (strcmp(str, "closed") == 0) {
            cfg->on_redis_error = CONFIG_REDIS_ERROR_CLOSED;
        } else {
            diag_set(reterr, path, conf_line(s),
                     "on_redis_error must be \"local\", \"open\" or \"closed\", not \"%s\"",
                     str);
            return -EINVAL;
        }
        return 0;
    }
    if (strcmp(name, "adhoc") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r < 0)
            return r;
        if (strcmp(str, "auto") == 0) {
            cfg->adhoc_store = CONFIG_ADHOC_AUTO;
        } else if (strcmp(str, "local") == 0) {
            cfg->adhoc_store = CONFIG_ADHOC_LOCAL;
        } else if (strcmp(str, "redis") == 0) {
            cfg->adhoc_store = CONFIG_ADHOC_REDIS;
        } else {
            diag_set(reterr, path, conf_line(s),
                     "store.adhoc must be \"auto\", \"local\" or \"redis\", not \"%s\"", str);
            return -EINVAL;
        }
        return 0;
    }
    if (strcmp(name, "prefix") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r < 0)
            return r;
        for (const char *p = str; *p; p++) {
            if ((unsigned char)*p < 0x21 || *p == 0x7f) {
                diag_set(reterr, path, conf_line(s),
                         "store.prefix must not contain spaces or control characters");
                return -EINVAL;
            }
        }
        if (strlen(str) > CONFIG_PREFIX_MAX) {
            diag_set(reterr, path, conf_line(s), "store.prefix is longer than %d bytes",
                     CONFIG_PREFIX_MAX);
            return -EINVAL;
        }
        return conf_set_str(&cfg->store_prefix, str);
    }
    if (strcmp(name, "lease_max") == 0) {
        r = conf_get_int(path, s, 1, RULES_LEASE_LIMIT_MAX, &v, reterr);
        if (r == 0)
            cfg->lease_max = (uint64_t)v;
        return r;
    }
    return conf_unknown(path, s, "store", conf_store_names, CONF_N(conf_store_names), "", reterr);
}

/* A byte that cannot be part of a host, a name or a path in a setting. */
static bool conf_is_blank(char c)
{
    return (unsigned char)c <= 0x20 || c == 0x7f;
}

/* A sentinel: "HOST:PORT", "[V6]:PORT" or "unix:/PATH" (as the daemon's
 * daemon/addr.c splits them); NULL when fine, else why not. */
static const char *conf_sentinel_problem(const char *a)
{
    const char *colon;
    unsigned long port;
    char *end;

    if (strlen(a) > 255)
        return "is longer than 255 bytes";
    if (strncmp(a, "unix:", 5) == 0) {
        if (a[5] != '/')
            return "needs an absolute path after unix:";
        if (strlen(a + 5) >= sizeof(((struct sockaddr_un *)0)->sun_path))
            return "has a path too long for a Unix socket";
        return NULL;
    }
    if (a[0] == '[') {
        const char *close = strchr(a, ']');

        if (!close || close[1] != ':')
            return "needs [ADDRESS]:PORT around an IPv6 address";
        if (close == a + 1)
            return "has an empty host";
        colon = close + 1;
    } else {
        colon = strrchr(a, ':');
        if (!colon)
            return "needs HOST:PORT (or unix:PATH)";
        if (colon == a)
            return "has an empty host";
        if (memchr(a, ':', (size_t)(colon - a)))
            return "needs brackets around an IPv6 address, as in [::1]:26379";
    }
    for (const char *p = a; p < colon; p++) {
        if (conf_is_blank(*p) || *p == '/')
            return "has a space, a control character or '/' in its host";
    }
    errno = 0;
    port = strtoul(colon + 1, &end, 10);
    if (!conf_is_digit(colon[1]) || *end || errno || port == 0 || port > 65535)
        return "needs a port between 1 and 65535";
    return NULL;
}

static int conf_redis_sentinels(struct config *cfg, const char *path, const config_setting_t *s,
                                struct diag *reterr)
{
    return conf_address_list(path, s, "redis.sentinels", CONFIG_SENTINELS_MAX,
                             conf_sentinel_problem, &cfg->redis.sentinels,
                             &cfg->redis.n_sentinels, reterr);
}

/* A cluster seed: "HOST:PORT" or "[V6]:PORT" (cluster nodes announce TCP
 * addresses, so no Unix socket); NULL when fine, else why not. */
static const char *conf_cluster_node_problem(const char *a)
{
    if (strncmp(a, "unix:", 5) == 0)
        return "must be HOST:PORT: cluster nodes are reached over TCP";
    return conf_sentinel_problem(a);
}

static int conf_redis_cluster_nodes(struct config *cfg, const char *path,
                                    const config_setting_t *s, struct diag *reterr)
{
    return conf_address_list(path, s, "redis.cluster_nodes", CONFIG_CLUSTER_NODES_MAX,
                             conf_cluster_node_problem, &cfg->redis.cluster_nodes,
                             &cfg->redis.n_cluster_nodes, reterr);
}

int conf_secret_file(const char *path, const config_setting_t *s, const char *group,
                     char **dst, char **dst_file, struct diag *reterr)
{
    char err[SECRET_ERR_MAX], *secret = NULL;
    const char *str;
    int r;

    r = conf_get_string(path, s, &str, reterr);
    if (r < 0)
        return r;
    r = secret_read(str, &secret, err, sizeof(err));
    if (r < 0) {
        if (r != -ENOMEM)
            diag_set(reterr, path, conf_line(s), "%s.%s: %s", group, conf_name(s), err);
        return r == -ENOMEM ? r : -EINVAL;
    }
    if (*dst) {
        explicit_bzero(*dst, strlen(*dst));
        free(*dst);
    }
    *dst = secret;
    return conf_set_str(dst_file, str);
}

/*
 * redis.password_file / redis.sentinel_password_file: the secret is read
 * now (at start, at each reload, by --check), from the file or systemd
 * credential named (server/secret.c); the name is kept for the writer.
 */
static int conf_redis_secret_file(struct config *cfg, const char *path,
                                  const config_setting_t *s, struct diag *reterr)
{
    struct config_redis *rd = &cfg->redis;
    bool sentinel = conf_name(s)[0] == 's';

    return conf_secret_file(path, s, "redis",
                            sentinel ? &rd->sentinel_password : &rd->password,
                            sentinel ? &rd->sentinel_password_file : &rd->password_file, reterr);
}

int conf_redis_setting(struct config *cfg, const char *path,
                       const config_setting_t *s, struct diag *reterr)
{
    struct config_redis *rd = &cfg->redis;
    const char *name = conf_name(s), *str;
    int64_t v;
    int r;

    if (strcmp(name, "host") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r == 0 && (!str[0] || strpbrk(str, " \t\n/"))) {
            diag_set(reterr, path, conf_line(s), "redis.host \"%s\" is not a host name or "
                     "address", str);
            r = -EINVAL;
        }
        return r < 0 ? r : conf_set_str(&rd->host, str);
    }
    if (strcmp(name, "port") == 0) {
        r = conf_get_int(path, s, 1, 65535, &v, reterr);
        if (r == 0)
            rd->port = (unsigned)v;
        return r;
    }
    if (strcmp(name, "unix_socket") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r == 0 && (str[0] != '/' ||
                       strlen(str) >= sizeof(((struct sockaddr_un *)0)->sun_path))) {
            diag_set(reterr, path, conf_line(s),
                     "redis.unix_socket must be an absolute path shorter than 108 bytes");
            r = -EINVAL;
        }
        return r < 0 ? r : conf_set_str(&rd->unix_socket, str);
    }
    if (strcmp(name, "username") == 0 || strcmp(name, "password") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r == 0 && (!str[0] || strlen(str) > 512)) {
            diag_set(reterr, path, conf_line(s), "redis.%s must be 1 to 512 bytes", name);
            r = -EINVAL;
        }
        if (r < 0)
            return r;
        return conf_set_str(name[0] == 'u' ? &rd->username : &rd->password, str);
    }
    if (strcmp(name, "password_file") == 0 || strcmp(name, "sentinel_password_file") == 0)
        return conf_redis_secret_file(cfg, path, s, reterr);
    if (strcmp(name, "db") == 0) {
        r = conf_get_int(path, s, 0, INT32_MAX, &v, reterr);
        if (r == 0)
            rd->db = (unsigned)v;
        return r;
    }
    if (strcmp(name, "timeout_ms") == 0) {
        r = conf_get_int(path, s, 1, CONFIG_REDIS_TIMEOUT_MAX, &v, reterr);
        if (r == 0)
            rd->timeout_ms = (unsigned)v;
        return r;
    }
    if (strcmp(name, "sentinels") == 0)
        return conf_redis_sentinels(cfg, path, s, reterr);
    if (strcmp(name, "cluster_nodes") == 0)
        return conf_redis_cluster_nodes(cfg, path, s, reterr);
    if (strcmp(name, "master_name") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r < 0)
            return r;
        for (const char *p = str; *p && r == 0; p++)
            r = conf_is_blank(*p) ? -EINVAL : 0;
        if (r < 0 || !str[0] || strlen(str) > CONFIG_MASTER_NAME_MAX) {
            diag_set(reterr, path, conf_line(s), "redis.master_name must be 1 to %d bytes "
                     "without spaces or control characters", CONFIG_MASTER_NAME_MAX);
            return -EINVAL;
        }
        return conf_set_str(&rd->master_name, str);
    }
    if (strcmp(name, "sentinel_password") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r == 0 && (!str[0] || strlen(str) > 512)) {
            diag_set(reterr, path, conf_line(s), "redis.%s must be 1 to 512 bytes", name);
            r = -EINVAL;
        }
        return r < 0 ? r : conf_set_str(&rd->sentinel_password, str);
    }
    return conf_unknown(path, s, "redis", conf_redis_names, CONF_N(conf_redis_names), "", reterr);
}
