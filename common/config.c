/* SPDX-License-Identifier: MIT */
/*
 * config: reads a config file, picks the format by extension (.ini and
 * .json through config_divvy.c, anything else libconfig), fills in the
 * server and table defaults, and runs rules_validate().  Owns the native
 * libconfig loader and config_write_libconfig() (divvyctl convert).  The
 * format is documented in docs/config.md.
 *
 * libconfig 1.5 (Debian 12) silently truncates an integer literal beyond 32
 * bits that lacks the L suffix (5000000000 reads as 705032704) and saturates
 * an L literal beyond 64 bits, so before trusting its numbers a scanner
 * walks the text once and rejects such literals with their line.  libconfig
 * would also follow `@include` relative to the working directory; we refuse
 * it instead.  Every string is copied out before config_destroy().
 * Static helpers are named conf_*: libconfig's own API owns config_*.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <libconfig.h>

#include "config.h"
#include "config_divvy.h"
#include "secret.h"
#include "suggest.h"
#include "table.h"

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

/* ---- reading ------------------------------------------------------------ */

static int conf_read(const char *path, char **ret_text, size_t *ret_len)
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

/* ---- libconfig integer guard -------------------------------------------- */

static unsigned conf_line_of(const char *text, const char *p)
{
    unsigned line = 1;

    for (; text < p; text++)
        line += *text == '\n';
    return line;
}

/* libconfig reads "@include" only at the start of a line; refuse it anywhere
 * such a line could be (over-approximating inside strings is harmless). */
static int conf_check_include(const char *path, const char *text, struct diag *reterr)
{
    const char *p = text;
    int r = 0;

    while (p) {
        const char *s = p;

        while (*s == ' ' || *s == '\t')
            s++;
        if (strncmp(s, "@include", 8) == 0) {
            diag_set(reterr, path, conf_line_of(text, s), "@include is not supported");
            r = -EINVAL;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return r;
}

static bool conf_is_name_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '*';
}

static bool conf_is_name_char(char c)
{
    return conf_is_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static bool conf_is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/*
 * Checks one number token [s, e) the way libconfig 1.5 would mangle it; on
 * -EINVAL, @misread holds the values libconfig may have made of it (the
 * saturated value and its low 32 bits).
 */
static int conf_check_number(const char *path, unsigned line, const char *s, const char *e,
                               int64_t misread[2], struct diag *reterr)
{
    bool hex, is_long = false, is_float = false;
    size_t n = (size_t)(e - s);
    char tok[80];
    char *end;

    misread[0] = misread[1] = 0;
    if (n >= sizeof(tok)) {
        diag_set(reterr, path, line, "number too long");
        return -EINVAL;
    }
    memcpy(tok, s, n);
    tok[n] = '\0';
    hex = (tok[0] == '0' && (tok[1] == 'x' || tok[1] == 'X')) ||
          ((tok[0] == '-' || tok[0] == '+') && tok[1] == '0' && (tok[2] == 'x' || tok[2] == 'X'));
    while (n && tok[n - 1] == 'L') {
        is_long = true;
        tok[--n] = '\0';
    }
    if (!hex)
        is_float = strpbrk(tok, ".eE") != NULL;
    if (is_float)
        return 0;
    errno = 0;
    if (hex) {
        unsigned long long v = strtoull(tok, &end, 16);

        if (errno == ERANGE || (!is_long && v > INT32_MAX) || (is_long && v > INT64_MAX)) {
            misread[0] = (int64_t)v;
            misread[1] = (int32_t)(uint32_t)v;
            diag_set(reterr, path, line, "integer %s is out of range%s", tok,
                     is_long ? "" : " for 32 bits (add an L suffix for 64-bit values)");
            return -EINVAL;
        }
        return 0;
    }
    {
        long long v = strtoll(tok, &end, 10);

        if (errno == ERANGE || (!is_long && (v > INT32_MAX || v < INT32_MIN))) {
            misread[0] = v;
            misread[1] = (int32_t)(uint32_t)(uint64_t)v;
            diag_set(reterr, path, line, "integer %s is out of range%s", tok,
                     is_long || errno == ERANGE ? "" :
                     " for 32 bits: libconfig would misread it; write it with an L suffix");
            return -EINVAL;
        }
    }
    return 0;
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

static bool conf_misread_has(const struct conf_misread *m, unsigned line, int64_t v)
{
    for (size_t i = 0; i < m->n; i++) {
        if (m->e[i].line == line && (m->e[i].v[0] == v || m->e[i].v[1] == v))
            return true;
    }
    return false;
}

/*
 * Removes every integer under @s that holds a value libconfig misread: the
 * number is already reported, and its misread value would only add a
 * misleading follow-up ("must not be negative" for 4294967295) while the
 * rest of the file is still checked.
 */
static void conf_drop_misread(config_setting_t *s, unsigned parent_line,
                              const struct conf_misread *bad)
{
    for (int i = config_setting_length(s) - 1; i >= 0; i--) {
        config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        unsigned line = config_setting_source_line(e) ? config_setting_source_line(e) :
                        parent_line;
        int type = config_setting_type(e);

        if ((type == CONFIG_TYPE_INT || type == CONFIG_TYPE_INT64) &&
            conf_misread_has(bad, line, config_setting_get_int64(e)))
            config_setting_remove_elem(s, (unsigned)i);
        else if (config_setting_is_aggregate(e))
            conf_drop_misread(e, line, bad);
    }
}

/*
 * Walks libconfig text that already parsed, tokenising strings, comments,
 * names and numbers as libconfig's scanner does, and checks every number.
 */
static int conf_check_numbers(const char *path, const char *text, struct conf_misread *bad,
                              struct diag *reterr)
{
    const char *p = text;
    unsigned line = 1;
    int r = 0;

    while (*p) {
        if (*p == '\n') {
            line++;
            p++;
        } else if (*p == '#' || (p[0] == '/' && p[1] == '/')) {
            while (*p && *p != '\n')
                p++;
        } else if (p[0] == '/' && p[1] == '*') {
            for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++)
                line += *p == '\n';
            if (*p)
                p += 2;
        } else if (*p == '"') {
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1])
                    p++;
                line += *p == '\n';
            }
            if (*p)
                p++;
        } else if (conf_is_name_start(*p)) {
            while (conf_is_name_char(*p))
                p++;
        } else if (conf_is_digit(*p) || ((*p == '-' || *p == '+' || *p == '.') &&
                                           (conf_is_digit(p[1]) || p[1] == '.'))) {
            const char *s = p;
            int64_t misread[2];

            p++;
            while (conf_is_digit(*p) || (*p >= 'a' && *p <= 'f') ||
                   (*p >= 'A' && *p <= 'F') || *p == 'x' || *p == 'X' || *p == '.' ||
                   *p == 'L' || ((*p == '-' || *p == '+') && (p[-1] == 'e' || p[-1] == 'E')))
                p++;
            if (conf_check_number(path, line, s, p, misread, reterr) < 0) {
                r = -EINVAL;
                if (bad->n < CONF_MISREAD_MAX) {
                    bad->e[bad->n].line = line;
                    memcpy(bad->e[bad->n++].v, misread, sizeof(misread));
                }
            }
        } else {
            p++;
        }
    }
    return r;
}

/* ---- native loader ------------------------------------------------------ */

static unsigned conf_line(const config_setting_t *s)
{
    return config_setting_source_line(s);
}

static const char *conf_name(const config_setting_t *s)
{
    const char *n = config_setting_name(s);

    return n ? n : "value";
}

static int conf_get_int(const char *path, const config_setting_t *s, int64_t min,
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

static int conf_get_string(const char *path, const config_setting_t *s, const char **ret,
                             struct diag *reterr)
{
    if (config_setting_type(s) != CONFIG_TYPE_STRING) {
        diag_set(reterr, path, conf_line(s), "%s must be a string", conf_name(s));
        return -EINVAL;
    }
    *ret = config_setting_get_string(s);
    return 0;
}

static int conf_set_str(char **slot, const char *v)
{
    char *copy = strdup(v);

    if (!copy)
        return -ENOMEM;
    free(*slot);
    *slot = copy;
    return 0;
}

/* Names each settings group knows, for "did you mean" (suggest.h). */
static const char *const conf_server_names[] = {
    "listen", "workers", "max_connections", "max_output_bytes", "output_budget_bytes",
    "tcp_connections", "unix_connections", "reserved_connections",
    "tcp_connections_per_address", "unix_connections_per_uid", "idle_timeout_ms",
    "request_timeout_ms", "socket_buffer_bytes", "socket_mode", "state_dir", "admin_group",
    "fast_group",
};
static const char *const conf_table_names[] = {
    "slots", "fast_slots", "privileged_slots", "when_full", "snapshot_interval_ms",
};
static const char *const conf_metrics_names[] = { "listen", "path" };
static const char *const conf_statsd_names[] = { "host", "prefix", "port", "interval_ms" };
static const char *const conf_store_names[] = { "mode", "on_redis_error", "prefix", "lease_max" };
static const char *const conf_redis_names[] = {
    "host", "port", "unix_socket", "username", "password", "password_file", "db", "timeout_ms",
    "sentinels", "master_name", "sentinel_password", "sentinel_password_file",
};
static const char *const conf_top_names[] = {
    "server", "table", "store", "redis", "metrics", "statsd", "rules",
};

#define CONF_N(a) (sizeof(a) / sizeof((a)[0]))

/* "unknown setting 'GROUP.NAME'" (no GROUP. at the top), with the closest
 * of @names as a "did you mean" when one is close; always -EINVAL. */
static int conf_unknown(const char *path, const config_setting_t *s, const char *group,
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

/* "tcp:HOST:PORT" or "unix:PATH"; NULL when fine, else why not. */
static const char *conf_listen_problem(const char *a)
{
    if (strncmp(a, "unix:", 5) == 0) {
        size_t n = strlen(a + 5);

        if (n == 0)
            return "has an empty path";
        if (n >= sizeof(((struct sockaddr_un *)0)->sun_path))
            return "has a path too long for a Unix socket";
        return NULL;
    }
    if (strncmp(a, "tcp:", 4) == 0) {
        const char *host = a + 4, *colon = strrchr(host, ':');
        unsigned long port;
        char *end;

        if (!colon || colon == host)
            return "needs tcp:HOST:PORT";
        if (host[0] == '[' && colon[-1] != ']')
            return "has an unclosed '[' around an IPv6 address";
        errno = 0;
        port = strtoul(colon + 1, &end, 10);
        if (!conf_is_digit(colon[1]) || *end || errno || port == 0 || port > 65535)
            return "needs a port between 1 and 65535";
        return NULL;
    }
    return "must start with tcp: or unix:";
}

/*
 * A list of 1..@max address strings, each checked by @problem (NULL: fine,
 * else why not), named @what in messages; replaces *@list / *@n_list only
 * when every entry is good.
 */
static int conf_address_list(const char *path, const config_setting_t *s, const char *what,
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

static int conf_server_setting(struct config *cfg, const char *path,
                                 const config_setting_t *s, struct diag *reterr)
{
    const char *name = conf_name(s), *str;
    int64_t v;
    int r;

    if (strcmp(name, "listen") == 0)
        return conf_server_listen(cfg, path, s, reterr);
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

static int conf_table_setting(struct config *cfg, const char *path,
                                const config_setting_t *s, struct diag *reterr)
{
    const char *name = conf_name(s), *str;
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

static int conf_metrics_setting(struct config *cfg, const char *path,
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
    return conf_unknown(path, s, "metrics", conf_metrics_names, CONF_N(conf_metrics_names), "",
                        reterr);
}

static int conf_statsd_setting(struct config *cfg, const char *path,
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

static int conf_store_setting(struct config *cfg, const char *path,
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

/*
 * redis.password_file / redis.sentinel_password_file: the secret is read
 * now (at start, at each reload, by --check), from the file or systemd
 * credential named (common/secret.c); the name is kept for the writer.
 */
static int conf_redis_secret_file(struct config *cfg, const char *path,
                                  const config_setting_t *s, struct diag *reterr)
{
    struct config_redis *rd = &cfg->redis;
    const char *name = conf_name(s), *str;
    bool sentinel = name[0] == 's';
    char err[SECRET_ERR_MAX], *secret = NULL, **dst, **dst_file;
    int r;

    r = conf_get_string(path, s, &str, reterr);
    if (r < 0)
        return r;
    r = secret_read(str, &secret, err, sizeof(err));
    if (r < 0) {
        if (r != -ENOMEM)
            diag_set(reterr, path, conf_line(s), "redis.%s: %s", name, err);
        return r == -ENOMEM ? r : -EINVAL;
    }
    dst = sentinel ? &rd->sentinel_password : &rd->password;
    dst_file = sentinel ? &rd->sentinel_password_file : &rd->password_file;
    if (*dst) {
        explicit_bzero(*dst, strlen(*dst));
        free(*dst);
    }
    *dst = secret;
    return conf_set_str(dst_file, str);
}

static int conf_redis_setting(struct config *cfg, const char *path,
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

static int conf_rule_match_value(struct rules_rule_spec *r, const char *path,
                                   const config_setting_t *m, struct diag *reterr)
{
    unsigned line = conf_line(m);
    char num[32];

    switch (config_setting_type(m)) {
    case CONFIG_TYPE_STRING:
        return rules_spec_add_match(r, conf_name(m), config_setting_get_string(m), line);
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        snprintf(num, sizeof(num), "%lld", config_setting_get_int64(m));
        return rules_spec_add_match(r, conf_name(m), num, line);
    default:
        diag_set(reterr, path, line, "match value of '%s' must be a string or an integer",
                 conf_name(m));
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

static int conf_rule_setting(struct rules_rule_spec *r, const char *path,
                               const config_setting_t *s, struct diag *reterr)
{
    const char *name = conf_name(s);
    const struct config_divvy_field *f = config_divvy_field(name, true);
    unsigned line = conf_line(s);
    int type = config_setting_type(s);

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

static int conf_native(struct config *cfg, const char *path, const char *text,
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

        if (strcmp(name, "server") == 0) {
            q = conf_each(cfg, path, s, conf_server_setting, reterr);
        } else if (strcmp(name, "table") == 0) {
            q = conf_each(cfg, path, s, conf_table_setting, reterr);
        } else if (strcmp(name, "store") == 0) {
            q = conf_each(cfg, path, s, conf_store_setting, reterr);
        } else if (strcmp(name, "metrics") == 0) {
            q = conf_each(cfg, path, s, conf_metrics_setting, reterr);
        } else if (strcmp(name, "statsd") == 0) {
            q = conf_each(cfg, path, s, conf_statsd_setting, reterr);
        } else if (strcmp(name, "redis") == 0) {
            redis = s;
            q = conf_each(cfg, path, s, conf_redis_setting, reterr);
        } else if (strcmp(name, "rules") == 0) {
            rules = s;
            q = conf_rules(cfg, path, s, reterr);
        } else {
            q = conf_unknown(path, s, "", conf_top_names, CONF_N(conf_top_names),
                             " (expected server, table, store, redis, metrics, statsd, rules)",
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
out:
    config_destroy(&lc);
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
    for (size_t i = 0; i < cfg->redis.n_sentinels; i++)
        free(cfg->redis.sentinels[i]);
    free(cfg->redis.sentinels);
    free(cfg->redis.master_name);
    if (cfg->redis.sentinel_password)
        explicit_bzero(cfg->redis.sentinel_password, strlen(cfg->redis.sentinel_password));
    free(cfg->redis.sentinel_password);
    free(cfg->redis.sentinel_password_file);
    free(cfg->path);
    free(cfg);
}

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

static int conf_write_rule(const struct rules_rule_spec *r, bool last, FILE *f)
{
    bool plain = true;

    fprintf(f, "    {\n");
    for (size_t i = 0; i < r->n_match; i++) {
        if (!conf_is_plain_name(r->match[i].key))
            plain = false;
    }
    if (r->is_default)
        fprintf(f, "        default = true;\n");
    if (r->n_match) {
        fprintf(f, plain ? "        match = { " : "        match = [ ");
        for (size_t i = 0; i < r->n_match; i++) {
            if (plain) {
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
    if (r->n_actor == 1) {
        fprintf(f, "        actor = ");
        conf_put_string(f, r->actor[0]);
        fprintf(f, ";\n");
    } else if (r->n_actor > 1) {
        fprintf(f, "        actor = [ ");
        for (size_t i = 0; i < r->n_actor; i++) {
            conf_put_string(f, r->actor[i]);
            fprintf(f, i + 1 < r->n_actor ? ", " : " ");
        }
        fprintf(f, "];\n");
    }
    if (r->credit_limit >= 0)
        conf_put_int(f, "credit_limit", r->credit_limit);
    if (r->reset_seconds >= 0)
        conf_put_int(f, "reset_seconds", r->reset_seconds);
    if (r->algo != RULES_ALGO_WINDOW)
        fprintf(f, "        algorithm = \"%s\";\n", config_divvy_algo_name(r->algo));
    if (r->refill_amount >= 0)
        conf_put_int(f, "refill_amount", r->refill_amount);
    if (r->refill_seconds >= 0)
        conf_put_int(f, "refill_seconds", r->refill_seconds);
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
    if (r->label) {
        fprintf(f, "        label = ");
        conf_put_string(f, r->label);
        fprintf(f, ";\n");
    }
    if (r->comment) {
        fprintf(f, "        comment = ");
        conf_put_string(f, r->comment);
        fprintf(f, ";\n");
    }
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
               strcmp(cfg->admin_group, CONFIG_DEFAULT_ADMIN_GROUP) != 0;

    if (!any)
        return;
    fprintf(f, "server = {\n");
    if (!listen_default) {
        fprintf(f, "    listen = [ ");
        for (size_t i = 0; i < cfg->n_listen; i++) {
            conf_put_string(f, cfg->listen[i]);
            fprintf(f, i + 1 < cfg->n_listen ? ", " : " ");
        }
        fprintf(f, "];\n");
    }
    if (strcmp(cfg->state_dir, CONFIG_DEFAULT_STATE_DIR) != 0) {
        fprintf(f, "    state_dir = ");
        conf_put_string(f, cfg->state_dir);
        fprintf(f, ";\n");
    }
    if (cfg->workers != 0)
        fprintf(f, "    workers = %u;\n", cfg->workers);
    if (cfg->max_connections != 0)
        fprintf(f, "    max_connections = %u;\n", cfg->max_connections);
    if (cfg->max_output_bytes != CONFIG_DEFAULT_OUTPUT_BYTES)
        fprintf(f, "    max_output_bytes = %zu;\n", cfg->max_output_bytes);
    conf_write_admit(cfg, f);
    if (cfg->socket_mode != CONFIG_DEFAULT_SOCKET_MODE)
        fprintf(f, "    socket_mode = \"0%o\";\n", cfg->socket_mode);
    if (strcmp(cfg->admin_group, CONFIG_DEFAULT_ADMIN_GROUP) != 0) {
        fprintf(f, "    admin_group = ");
        conf_put_string(f, cfg->admin_group);
        fprintf(f, ";\n");
    }
    fprintf(f, "};\n\n");
}

static void conf_write_store(const struct config *cfg, FILE *f)
{
    static const char *const on_error[] = { "local", "open", "closed" };
    const struct config_redis *rd = &cfg->redis;

    if (cfg->rules.default_store != RULES_STORE_LOCAL ||
        cfg->on_redis_error != CONFIG_REDIS_ERROR_LOCAL ||
        (cfg->store_prefix && cfg->store_prefix[0]) || cfg->lease_max != CONFIG_DEFAULT_LEASE_MAX) {
        fprintf(f, "store = {\n    mode = \"%s\";\n",
                config_divvy_store_name(cfg->rules.default_store));
        fprintf(f, "    on_redis_error = \"%s\";\n", on_error[cfg->on_redis_error]);
        if (cfg->store_prefix && cfg->store_prefix[0]) {
            fprintf(f, "    prefix = ");
            conf_put_string(f, cfg->store_prefix);
            fprintf(f, ";\n");
        }
        if (cfg->lease_max != CONFIG_DEFAULT_LEASE_MAX)
            fprintf(f, "    lease_max = %" PRIu64 ";\n", cfg->lease_max);
        fprintf(f, "};\n\n");
    }
    if ((rd->host && strcmp(rd->host, CONFIG_DEFAULT_REDIS_HOST) != 0) ||
        rd->port != CONFIG_DEFAULT_REDIS_PORT || rd->unix_socket || rd->username ||
        rd->password || rd->db || rd->timeout_ms != CONFIG_DEFAULT_REDIS_TIMEOUT_MS ||
        rd->n_sentinels || rd->master_name || rd->sentinel_password) {
        fprintf(f, "redis = {\n");
        if (rd->host && strcmp(rd->host, CONFIG_DEFAULT_REDIS_HOST) != 0) {
            fprintf(f, "    host = ");
            conf_put_string(f, rd->host);
            fprintf(f, ";\n");
        }
        if (rd->port != CONFIG_DEFAULT_REDIS_PORT)
            fprintf(f, "    port = %u;\n", rd->port);
        if (rd->unix_socket) {
            fprintf(f, "    unix_socket = ");
            conf_put_string(f, rd->unix_socket);
            fprintf(f, ";\n");
        }
        if (rd->username) {
            fprintf(f, "    username = ");
            conf_put_string(f, rd->username);
            fprintf(f, ";\n");
        }
        /* A secret read from a file stays there: its name is written, never it. */
        if (rd->password_file) {
            fprintf(f, "    password_file = ");
            conf_put_string(f, rd->password_file);
            fprintf(f, ";\n");
        } else if (rd->password) {
            fprintf(f, "    password = ");
            conf_put_string(f, rd->password);
            fprintf(f, ";\n");
        }
        if (rd->db)
            fprintf(f, "    db = %u;\n", rd->db);
        if (rd->timeout_ms != CONFIG_DEFAULT_REDIS_TIMEOUT_MS)
            fprintf(f, "    timeout_ms = %u;\n", rd->timeout_ms);
        if (rd->n_sentinels) {
            fprintf(f, "    sentinels = [ ");
            for (size_t i = 0; i < rd->n_sentinels; i++) {
                conf_put_string(f, rd->sentinels[i]);
                fprintf(f, i + 1 < rd->n_sentinels ? ", " : " ");
            }
            fprintf(f, "];\n");
        }
        if (rd->master_name) {
            fprintf(f, "    master_name = ");
            conf_put_string(f, rd->master_name);
            fprintf(f, ";\n");
        }
        if (rd->sentinel_password_file) {
            fprintf(f, "    sentinel_password_file = ");
            conf_put_string(f, rd->sentinel_password_file);
            fprintf(f, ";\n");
        } else if (rd->sentinel_password) {
            fprintf(f, "    sentinel_password = ");
            conf_put_string(f, rd->sentinel_password);
            fprintf(f, ";\n");
        }
        fprintf(f, "};\n\n");
    }
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
    fprintf(f, "# divvy.conf (docs/config.md), written by divvyctl convert.\n\n");
    if (cfg->listen && cfg->state_dir && cfg->admin_group)
        conf_write_server(cfg, f);
    if (cfg->table_slots != TABLE_SLOTS_DEFAULT || cfg->fast_table_slots != TABLE_SLOTS_DEFAULT ||
        cfg->privileged_table_slots != CONFIG_DEFAULT_PRIVILEGED_SLOTS ||
        cfg->when_full != CONFIG_FULL_DENY) {
        fprintf(f, "table = {\n");
        if (cfg->table_slots != TABLE_SLOTS_DEFAULT)
            fprintf(f, "    slots = %" PRIu32 ";\n", cfg->table_slots);
        if (cfg->fast_table_slots != TABLE_SLOTS_DEFAULT)
            fprintf(f, "    fast_slots = %" PRIu32 ";\n", cfg->fast_table_slots);
        if (cfg->privileged_table_slots != CONFIG_DEFAULT_PRIVILEGED_SLOTS)
            fprintf(f, "    privileged_slots = %" PRIu32 ";\n", cfg->privileged_table_slots);
        if (cfg->when_full != CONFIG_FULL_DENY)
            fprintf(f, "    when_full = \"allow\";\n");
        fprintf(f, "};\n\n");
    }
    conf_write_store(cfg, f);
    fprintf(f, "rules = (\n");
    for (size_t i = 0; i < cfg->rules.n; i++) {
        r = conf_write_rule(&cfg->rules.rules[i], i + 1 == cfg->rules.n, f);
        if (r < 0)
            return r;
    }
    fprintf(f, ");\n");
    if (fflush(f) != 0 || ferror(f))
        return -EIO;
    return 0;
}
