/* SPDX-License-Identifier: MIT */
/*
 * config: loads a divvy configuration (docs/config.md) into a struct config:
 * server settings plus a rules_spec.  The format follows the file name:
 * ".ini" is divvy's INI dialect, ".json" divvy's JSON, anything else the
 * native libconfig format (divvy.conf).  Every loader reports problems with
 * file:line in a struct diag, rejects unknown settings, and runs
 * rules_validate() on the result.  Linked into divvyd and divvyctl only
 * (never into libdivvy).  Never logs.
 */
#ifndef DIVVY_CONFIG_H
#define DIVVY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "diag.h"
#include "rules.h"

#define CONFIG_DEFAULT_TCP        "tcp:127.0.0.1:8321"
#define CONFIG_DEFAULT_UNIX       "unix:/run/divvy/divvy.sock"
#define CONFIG_DEFAULT_STATE_DIR  "/run/divvy"
#define CONFIG_DEFAULT_PRIVILEGED_SLOTS 65536  /* table.privileged_slots */
#define CONFIG_DEFAULT_ADHOC_SLOTS 65536       /* table.adhoc_slots */

enum config_full_policy {
    CONFIG_FULL_DENY = 0,       /* a hit that needs a new counter and finds no slot is denied */
    CONFIG_FULL_ALLOW,          /* ... is allowed without counting */
};

enum config_format { CONFIG_FORMAT_LIBCONFIG = 0, CONFIG_FORMAT_INI, CONFIG_FORMAT_JSON };

/* store.adhoc: where RESP's ad-hoc buckets live (docs/resp.md). */
enum config_adhoc_store {
    CONFIG_ADHOC_AUTO = 0,      /* in Redis when some rule is (store.mode / a rule's store) */
    CONFIG_ADHOC_LOCAL,         /* this host's table, saved in the state dir */
    CONFIG_ADHOC_REDIS,         /* in Redis */
};

/* store.on_redis_error (docs/redis.md "Failure"). */
enum config_redis_error {
    CONFIG_REDIS_ERROR_LOCAL = 0,   /* decide from the host table alone */
    CONFIG_REDIS_ERROR_OPEN,        /* allow */
    CONFIG_REDIS_ERROR_CLOSED,      /* deny */
};

#define CONFIG_DEFAULT_REDIS_HOST       "127.0.0.1"
#define CONFIG_DEFAULT_REDIS_PORT       6379
#define CONFIG_DEFAULT_REDIS_TIMEOUT_MS 100
#define CONFIG_DEFAULT_LEASE_MAX        1000
#define CONFIG_DEFAULT_SNAPSHOT_MS      10000
#define CONFIG_REDIS_TIMEOUT_MAX        60000
#define CONFIG_PREFIX_MAX               256
#define CONFIG_SENTINELS_MAX            16
#define CONFIG_MASTER_NAME_MAX          128
#define CONFIG_CLUSTER_NODES_MAX        16

/* redis { } — where the shared counters live (docs/redis.md). */
struct config_redis {
    char *host;                 /* default CONFIG_DEFAULT_REDIS_HOST */
    unsigned port;              /* default 6379 */
    char *unix_socket;          /* NULL, or a path: used instead of host/port */
    char *username;             /* NULL, or the ACL user (needs password) */
    char *password;             /* NULL: no AUTH; from password_file when that is set */
    char *password_file;        /* NULL, or as written: a path or a credential name */
    unsigned db;                /* SELECT; default 0 */
    unsigned timeout_ms;        /* longest a hit waits for Redis; default 100 */
    /* Sentinel (docs/redis.md "Sentinel"): the master is found by asking
     * these, in order; host, port and unix_socket are then not allowed. */
    char **sentinels;           /* "HOST:PORT", "[V6]:PORT" or "unix:PATH"; NULL: none */
    size_t n_sentinels;
    char *master_name;          /* required with sentinels, refused without */
    char *sentinel_password;    /* NULL: no AUTH to the sentinels; or from the file below */
    char *sentinel_password_file;   /* NULL, or as written (like password_file) */
    /* Redis Cluster (docs/redis.md "Cluster"): seeds asked for the slot
     * map; host, port, unix_socket, sentinels and db != 0 are then refused. */
    char **cluster_nodes;       /* "HOST:PORT" or "[V6]:PORT"; NULL: no cluster */
    size_t n_cluster_nodes;
    unsigned line;              /* of redis { } in the file; 0: none (the defaults) */
};
/* Admission defaults (docs/daemon.md "Admission"). */
#define CONFIG_DEFAULT_TCP_CONNECTIONS      4096
#define CONFIG_DEFAULT_UNIX_CONNECTIONS     1024
#define CONFIG_DEFAULT_RESERVED_CONNECTIONS 32
#define CONFIG_DEFAULT_PER_ADDRESS          1024
#define CONFIG_DEFAULT_PER_UID              256
#define CONFIG_DEFAULT_IDLE_TIMEOUT_MS      60000
#define CONFIG_DEFAULT_REQUEST_TIMEOUT_MS   10000
#define CONFIG_DEFAULT_OUTPUT_BUDGET        (16u << 20)
#define CONFIG_DEFAULT_SOCKET_BUFFER        16384

/* server { }'s admission settings beside max_connections and max_output_bytes. */
struct config_admit {
    unsigned tcp_connections;       /* 0: unset (config_connections()) */
    unsigned unix_connections;      /* 0: unset */
    unsigned reserved_connections;  /* privileged Unix peers only; default 32 */
    unsigned per_address;           /* tcp_connections_per_address; default 1024 */
    unsigned per_uid;               /* unix_connections_per_uid; default 256 */
    unsigned idle_timeout_ms;       /* 0: none; default 60000 */
    unsigned request_timeout_ms;    /* 0: none; default 10000 */
    size_t output_budget_bytes;     /* default 16 MiB */
    unsigned socket_buffer_bytes;   /* SO_SNDBUF; 0: the kernel's; default 16384 */
};

/* The protocol a listen address speaks (docs/config.md "server"): its
 * prefix before "unix:" / "tcp:", none for divvy's line protocol. */
enum config_proto {
    CONFIG_PROTO_DIVVY = 0,     /* no prefix */
    CONFIG_PROTO_RESP,          /* "resp:": the Redis protocol (docs/resp.md) */
    CONFIG_PROTO_RLS,           /* "rls:": Envoy's rate limit service, gRPC over h2c
                                 * (docs/rls.md) */
};

/* server.tls { } (docs/security.md): what the "tls:" listeners serve. */
struct config_tls {
    char *certificate_file;     /* PEM chain, leaf first; NULL: no server.tls */
    char *key_file;             /* PEM key, mode 0600/0400 (server/secret.h) */
    char *client_ca_file;       /* NULL: no client certificate asked (mTLS off) */
    unsigned min_version;       /* 12 (TLS 1.2, the default) or 13 */
    unsigned line;              /* server.tls's line; 0: none */
    unsigned listen_line;       /* server.listen's line: a "tls:" address needs server.tls */
};

/* decision_log { } (docs/config.md "decision_log", DESIGN §13): read at start only. */
#define CONFIG_DLOG_DIRECTORY   "/var/lib/divvy/decisions"
#define CONFIG_DLOG_FILE_SIZE   (64u << 20)
#define CONFIG_DLOG_FILES       16
#define CONFIG_DLOG_FLUSH_MS    1000
#define CONFIG_DLOG_REDACT_MAX  64      /* keys in decision_log.redact */

struct config_dlog_redact {
    char *key;
    unsigned how;               /* enum dlog_redact: 0 keep, 1 hash, 2 drop */
};

struct config_dlog {
    bool enabled;               /* default false */
    char *directory;            /* NULL: CONFIG_DLOG_DIRECTORY */
    uint64_t file_size;         /* bytes before a file is rotated; default 64 MiB */
    unsigned files;             /* files kept; default 16 */
    unsigned flush_ms;          /* longest a decision waits in a worker's buffer; 1000 */
    struct config_dlog_redact *redact;  /* per key; keys not listed: keep */
    size_t n_redact;
    unsigned line;              /* of decision_log { }; 0: none */
};

struct config {
    char *path;
    enum config_format format;
    struct rules_spec rules;
    char *include_dir;          /* drop-in rule files (docs/config.md "Drop-ins"); NULL: none */

    /* server { } — all optional; divvy's INI/JSON configs carry none of these. */
    char **listen;              /* "tcp:HOST:PORT" / "unix:PATH"; default the two above */
    size_t n_listen;
    char *state_dir;            /* default CONFIG_DEFAULT_STATE_DIR */
    unsigned workers;           /* 0: one per CPU */
    unsigned max_connections;   /* unprivileged TCP + Unix; 0: unset (config_connections()) */
    size_t max_output_bytes;    /* unsent reply bytes before a client is dropped; 1 MiB */
    struct config_admit admit;  /* the other admission settings */
    unsigned socket_mode;       /* Unix socket permissions, default 0660 */
    char *admin_group;          /* default "divvy-admin" */
    char *fast_group;           /* may ask for the fast path (FAST); a name or a gid;
                                 * default "divvy-fast" */

    /* table { } */
    uint32_t table_slots;       /* daemon-only table; default TABLE_SLOTS_DEFAULT */
    uint32_t fast_table_slots;  /* fast-path table; default TABLE_SLOTS_DEFAULT */
    uint32_t privileged_table_slots;    /* source = privileged rules' own table;
                                         * default CONFIG_DEFAULT_PRIVILEGED_SLOTS */
    enum config_full_policy when_full;  /* default deny */
    uint32_t adhoc_slots;       /* RESP's ad-hoc buckets (docs/resp.md); default 65536 */
    uint32_t adhoc_max_buckets; /* occupied at most; 0: all of adhoc_slots */
    uint32_t adhoc_reserved_buckets;    /* ... of which only privileged peers'; 0: 1/16 */
    uint32_t adhoc_buckets_per_peer;    /* one unprivileged peer's share; 0: 1/8 of the rest */
    unsigned snapshot_interval_ms;      /* fast table snapshot period; 0: at stop only */

    /* store { }: the mode itself is rules.default_store (rules carry it). */
    enum config_redis_error on_redis_error;     /* default local */
    enum config_adhoc_store adhoc_store;        /* store.adhoc; default auto */
    /* metrics { } and statsd { } (docs/operations.md): read at start only. */
    char *metrics_listen;       /* Prometheus endpoint "tcp:HOST:PORT"; NULL: off */
    char *metrics_path;         /* NULL: "/metrics" */
    bool metrics_divvy_names;   /* metrics.names = "divvy": divvy's names and labels;
                                 * default "prometheus", "divvy" for a divvy .ini/.json
                                 * (docs/operations.md) */
    bool metrics_privileged;    /* metrics.privileged: the privileged rules' series and
                                 * table in the exposition; default false (docs/operations.md
                                 * "What STATS and metrics reveal") */
    char *statsd_host;          /* NULL: no statsd */
    unsigned statsd_port;
    char *statsd_prefix;
    unsigned statsd_interval_ms;    /* 0: the default */

    char *store_prefix;         /* prepended to every Redis key; default "" */
    uint64_t lease_max;         /* most credit one host holds in one lease; default 1000 */
    struct config_redis redis;

    /* rls { } (docs/rls.md "Settings"): read at start only. */
    bool rls_unmatched_rule;    /* rls.unmatched = "rule"; default "ok" (false) */
    bool rls_ratelimit_headers; /* rls.ratelimit_headers; default false */
    /* server.resp_password_file (docs/resp.md "AUTH"): what RESP listeners ask
     * of their clients; read from the file at every load, like redis.password_file. */
    char *resp_password;        /* NULL: no password, every RESP client may send commands */
    char *resp_password_file;   /* NULL, or as written: a path or a credential name */

    struct config_tls tls;      /* server.tls { } */

    struct config_dlog dlog;    /* decision_log { } */
};

/*
 * Loads @path.  On success *ret is a new config (config_free()); on failure
 * *ret is untouched and @reterr lists the problems.  -EINVAL (invalid
 * config), -ENOENT/-EACCES/... (cannot read), -ENOMEM.  A divvy .ini/.json
 * config gets divvy's metric names, and store.mode "strict" while divvy's
 * Redis environment is set (config_fleet_redis_env()), as Button's divvy
 * keeps every counter in Redis (docs/config.md "Across hosts").
 */
int config_load(const char *path, struct config **ret, struct diag *reterr);

/* "REDIS_HOST" or "REDIS_PORT" when that variable of divvy's is set and not
 * empty in the environment, else NULL. */
const char *config_fleet_redis_env(void);

/*
 * Notes on a valid config @cfg and its compiled @rules (NULL: only the
 * first kind), one "file:line: text" each into @ret, for the daemon to log
 * as warnings at every load: source = "privileged" rules that run "strict"
 * because store.mode "lease" never applies to them (one note for all), and
 * a native config that configures Redis (redis { }, or divvy's REDIS_HOST /
 * REDIS_PORT) while every rule is local; and rules_validate_notes()'s
 * (actor keys).  Returns how many were added.
 */
size_t config_fleet_notes(const struct config *cfg, const struct rules *rules,
                          struct diag *ret);

/*
 * A change to include_dir's drop-ins, seen by config_load_edit() as if it
 * were already on disk: @text (@len bytes) as the drop-in @name (the file
 * <include_dir>/@name.conf, which problems name), or, with @text NULL, the
 * drop-in @name taken away.  Nothing is written.
 */
struct config_edit {
    const char *name;
    const char *text;
    size_t len;
    bool replace;               /* @text may replace an existing @name */
};

/* config_load() with @edit (NULL: none) applied to the drop-ins.  -ENOENT
 * (in @reterr too) when @edit removes a drop-in that does not exist,
 * -EEXIST when it adds one that does (without replace), -ENOTDIR without
 * include_dir. */
int config_load_edit(const char *path, const struct config_edit *edit, struct config **ret,
                     struct diag *reterr);

#define CONFIG_DROPIN_NAME_MAX 64
/* Whether @name is a drop-in name: two digits, '-', then 1-61 of
 * [A-Za-z0-9_-] (the file is NAME.conf; the digits order it). */
bool config_dropin_name_ok(const char *name);

/*
 * Writes @text as <@dir>/@name.conf through a hidden temporary file in @dir,
 * fsync() and rename(), so no loader ever reads half a drop-in; with @text
 * NULL removes the file.  Nothing is left behind on failure.  -errno.
 */
int config_dropin_write(const char *dir, const char *name, const char *text, size_t len);

/*
 * The connection budgets in force: server.tcp_connections and
 * server.unix_connections default to server.max_connections when only that is
 * set (so an old config keeps its meaning), else to 4096 and 1024; the
 * overall cap on unprivileged connections defaults to their sum.
 */
void config_connections(const struct config *cfg, unsigned *ret_tcp, unsigned *ret_unix,
                        unsigned *ret_total);

/* Frees the config and everything it owns.  NULL-safe. */
void config_free(struct config *cfg);

/* The one place a listen address's protocol prefix is read: returns @addr
 * past the prefix ("resp:unix:/x" -> "unix:/x") and its protocol in
 * *ret_proto (CONFIG_PROTO_DIVVY and @addr itself without one). */
const char *config_listen_proto(const char *addr, enum config_proto *ret_proto);

/* Whether @addr (past its protocol prefix, config_listen_proto()) is a TLS
 * listener's: "tls:HOST:PORT", TCP with TLS (docs/security.md). */
bool config_listen_is_tls(const char *addr);

/* Writes @cfg's rules as a divvy.conf (libconfig) document to @f; used by
 * `divvyctl convert`.  Round-trips through config_load().  -EIO; -EINVAL
 * (nothing written) when a match key has no native spelling: empty or
 * containing '='; -ENOMEM. */
#include <stdio.h>
int config_write_libconfig(const struct config *cfg, FILE *f);

#endif
