/* SPDX-License-Identifier: MIT */
/*
 * The body of the three config harnesses (fuzz_config_libconfig.c,
 * fuzz_config_ini.c, fuzz_config_json.c), which differ only in the file name
 * suffix that makes config_load() pick its loader (FUZZ_CONFIG_SUFFIX).
 *
 * Each input is written to a file in a private temporary directory and
 * loaded with config_load().  A rejected config must say why (a diag entry)
 * and free everything (LeakSanitizer runs at exit).  An accepted one must
 * compile (config_load() validated it); then, for every rule, a request
 * built from its own match set (stars and presence filled in) must match
 * that rule unless an earlier stop rule decides first, rules_match() must
 * return an ascending path that ends at a stop rule, and describe, actor
 * and why-not must stay within their buffers.  Finally the config goes
 * through config_write_libconfig() (divvyctl convert) and back through
 * config_load(): the same rules, the same settings and the same ids.
 */
#ifndef DIVVY_FUZZ_CONFIG_H
#define DIVVY_FUZZ_CONFIG_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "config.h"
#include "fuzz.h"
#include "rules.h"

#define WITNESS_RULES_MAX 64        /* rules checked with their own request per input */
#define WITNESS_VALUE_MAX 4000

int LLVMFuzzerInitialize(int *argc, char ***argv);
const char *__lsan_default_suppressions(void);

/*
 * libconfig 1.5 (Debian 12) leaks a string token when a syntax error makes
 * its parser discard it (hyperrealm/libconfig#142, fixed upstream by a bison
 * %destructor in 1.7.3): not ours to fix, and only on rejected files.  The
 * scanner allocates those tokens in these two functions; everything else
 * libconfig allocates is still checked.
 */
const char *__lsan_default_suppressions(void)
{
    return "leak:strbuf_append\nleak:libconfig_yylex\n";
}

static char dir[64];
static char path[128];
static char rt_path[128];

static void cleanup(void)
{
    unlink(path);
    unlink(rt_path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* tmpfs when there is one: ext4 flushes a truncated and rewritten file
     * on close, which would make every run wait for the disk. */
    snprintf(dir, sizeof(dir), "/dev/shm/divvy-fuzz-config.XXXXXX");
    if (!mkdtemp(dir)) {
        snprintf(dir, sizeof(dir), "/tmp/divvy-fuzz-config.XXXXXX");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            abort();
        }
    }
    snprintf(path, sizeof(path), "%s/fuzz%s", dir, FUZZ_CONFIG_SUFFIX);
    snprintf(rt_path, sizeof(rt_path), "%s/convert.conf", dir);
    atexit(cleanup);
    return 0;
}

static void write_file(const char *p, const uint8_t *data, size_t size)
{
    size_t off = 0;
    int fd;

    /* A new file each time rather than O_TRUNC (see LLVMFuzzerInitialize). */
    unlink(p);
    fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    while (off < size) {
        ssize_t n = write(fd, data + off, size - off);

        CHECK(n > 0);
        off += (size_t)n;
    }
    close(fd);
}

/* ---- witness requests ---------------------------------------------------- */

struct witness {
    struct proto_kv kv[PROTO_KV_MAX];
    char *values[PROTO_KV_MAX];
    size_t n;                   /* pairs built */
    struct rules_req req;
};

static int kv_cmp(const void *x, const void *y)
{
    const struct proto_kv *a = x, *b = y;
    size_t n = a->key_len < b->key_len ? a->key_len : b->key_len;
    int c = memcmp(a->key, b->key, n);

    return c ? c : (a->key_len > b->key_len) - (a->key_len < b->key_len);
}

/* A value pattern @pat accepts: escapes undone, each unescaped star empty
 * (presence, "*", becomes the empty value, which it accepts too). */
static char *witness_value(const char *pat)
{
    size_t len = strlen(pat), n = 0;
    char *v = malloc(len + 1);

    CHECK(v != NULL);
    for (size_t i = 0; i < len; i++) {
        if (pat[i] == '\\' && (pat[i + 1] == '*' || pat[i + 1] == '\\'))
            v[n++] = pat[++i];
        else if (pat[i] != '*')
            v[n++] = pat[i];
    }
    v[n] = '\0';
    return v;
}

/* The key of entry @j has an entry with operator @op. */
static bool witness_has(const struct rules_rule_spec *r, size_t j, enum rules_match_op op)
{
    for (size_t k = 0; k < r->n_match; k++) {
        if (r->match[k].op == op && strcmp(r->match[k].key, r->match[j].key) == 0)
            return true;
    }
    return false;
}

/*
 * False when the rule's strings do not fit a request's fields, or when no
 * simple witness exists.  A value's witness is witness_value(); a key with
 * a cidr list gets the address of its first prefix; a key with only
 * negations (not, not_cidr) is left out, which they accept; a key with both
 * a cidr and a negation is not attempted (docs/rules.md "Addresses and
 * negation").
 */
/* Whether cidr prefix @text's own address is no witness for it: an IPv6
 * prefix shorter than /96 whose address lies in ::ffff:0:0/96 or
 * 64:ff9b::/96 -- that address counts as IPv4, and the IPv6 prefix matches
 * no IPv4 address (docs/rules.md "IPv4 and IPv6"). */
static bool witness_cidr_mapped(const char *text)
{
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
    const char *slash = strchr(text, '/');
    char addr[64];
    uint8_t a[16];

    if (!slash || !strchr(text, ':') || (size_t)(slash - text) >= sizeof(addr) ||
        atoi(slash + 1) >= 96)
        return false;
    memcpy(addr, text, (size_t)(slash - text));
    addr[slash - text] = '\0';
    if (inet_pton(AF_INET6, addr, a) != 1)
        return false;
    return memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0;
}

static bool witness_build(const struct rules_rule_spec *r, struct witness *w)
{
    w->n = 0;
    if (r->n_match > PROTO_KV_MAX)
        return false;
    for (size_t j = 0; j < r->n_match; j++) {
        if (strlen(r->match[j].key) > WITNESS_VALUE_MAX ||
            strlen(r->match[j].value) > WITNESS_VALUE_MAX)
            return false;
        if (r->match[j].op == RULES_MATCH_CIDR &&
            (witness_has(r, j, RULES_MATCH_NOT) || witness_has(r, j, RULES_MATCH_NOT_CIDR)))
            return false;
    }
    for (size_t j = 0; j < r->n_match; j++) {
        const struct rules_match_spec *m = &r->match[j];
        char *v;

        if (m->op == RULES_MATCH_NOT || m->op == RULES_MATCH_NOT_CIDR)
            continue;
        if (m->op == RULES_MATCH_CIDR) {
            /* the first of the key's list only */
            bool earlier = false;

            for (size_t k = 0; k < j; k++)
                earlier |= r->match[k].op == RULES_MATCH_CIDR &&
                           strcmp(r->match[k].key, m->key) == 0;
            if (earlier)
                continue;
            if (witness_cidr_mapped(m->value))
                return false;           /* the caller frees what w holds */
            v = strdup(m->value);
            CHECK(v != NULL);
            if (strchr(v, '/'))
                *strchr(v, '/') = '\0';
        } else {
            v = witness_value(m->value);
        }
        w->values[w->n] = v;
        w->kv[w->n] = (struct proto_kv){ .key = m->key, .value = v,
                                         .key_len = (uint16_t)strlen(m->key),
                                         .value_len = (uint16_t)strlen(v) };
        w->n++;
    }
    /* Validation rejects a key repeated in one rule but as operators of one
     * key, each given once here: the pairs are unique. */
    qsort(w->kv, w->n, sizeof(w->kv[0]), kv_cmp);
    w->req = (struct rules_req){ .kv = w->kv, .n_kv = (unsigned)w->n, .privileged = true };
    return true;
}

static void witness_free(struct witness *w)
{
    for (size_t j = 0; j < w->n; j++)
        free(w->values[j]);
    w->n = 0;
}

static void check_path(const struct rules *rules, const struct rules_req *req, uint32_t aim)
{
    static char buf[RULES_ACTOR_MAX * 4];
    uint32_t idx[RULES_MATCH_MAX];
    size_t n = rules_match(rules, req, idx);
    struct rules_rule rr;
    bool seen = false;

    CHECK(n >= 1 && n <= RULES_MATCH_MAX);
    for (size_t i = 0; i < n; i++) {
        CHECK(idx[i] < rules_count(rules));
        CHECK(i == 0 || idx[i] > idx[i - 1]);
        CHECK(rules_why_not(rules, idx[i], req, buf, sizeof(buf)) == 0);
        CHECK(rules_get(rules, idx[i], &rr) == 0);
        CHECK(i + 1 == n || rr.policy != RULES_POLICY_STOP);
        {
            int a = rules_actor(rules, idx[i], req, buf, sizeof(buf));

            CHECK(a >= 0 || a == -ENOBUFS);
        }
        seen |= idx[i] == aim;
    }
    CHECK(rr.policy == RULES_POLICY_STOP);
    /* The rule aimed at matches, unless an earlier stop rule decided. */
    CHECK(seen || idx[n - 1] < aim);
}

static void check_rules(const struct config *cfg, const struct rules *rules)
{
    static char buf[PROTO_LINE_MAX * 8];
    static struct witness w;
    struct rules_req none = { .kv = NULL, .n_kv = 0, .privileged = false };
    size_t n = rules_count(rules);

    CHECK(n == cfg->rules.n);
    for (size_t i = 0; i < n; i++) {
        struct rules_rule rr;
        int len;

        CHECK(rules_get(rules, (uint32_t)i, &rr) == 0);
        CHECK(rr.is_default == cfg->rules.rules[i].is_default);
        CHECK(rr.is_default == (i + 1 == n));
        len = rules_describe(rules, (uint32_t)i, buf, sizeof(buf));
        CHECK(len >= 0 && (size_t)len == strlen(buf));
        len = rules_actor_keys(rules, (uint32_t)i, buf, sizeof(buf));
        CHECK(len >= 0 && (size_t)len == strlen(buf));
        len = rules_why_not(rules, (uint32_t)i, &none, buf, sizeof(buf));
        CHECK(len >= 0);
    }
    check_path(rules, &none, (uint32_t)n - 1);
    for (size_t i = 0; i < n && i < WITNESS_RULES_MAX; i++) {
        const struct rules_rule_spec *r = &cfg->rules.rules[i];

        if (!witness_build(r, &w)) {
            witness_free(&w);
            continue;
        }
        CHECK(rules_why_not(rules, (uint32_t)i, &w.req, buf, sizeof(buf)) == 0);
        check_path(rules, &w.req, (uint32_t)i);
        witness_free(&w);
    }
}

/* ---- convert round trip -------------------------------------------------- */

static bool str_same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_same_rule(const struct rules_rule_spec *a, const struct rules_rule_spec *b)
{
    CHECK(a->n_match == b->n_match);
    for (size_t j = 0; j < a->n_match; j++) {
        CHECK(strcmp(a->match[j].key, b->match[j].key) == 0);
        CHECK(strcmp(a->match[j].value, b->match[j].value) == 0);
    }
    CHECK(a->n_actor == b->n_actor);
    for (size_t j = 0; j < a->n_actor; j++)
        CHECK(strcmp(a->actor[j], b->actor[j]) == 0);
    CHECK(a->credit_limit == b->credit_limit);
    CHECK(a->reset_seconds == b->reset_seconds);
    CHECK(a->refill_amount == b->refill_amount);
    CHECK(a->refill_seconds == b->refill_seconds);
    CHECK(a->prefix4 == b->prefix4 && a->prefix6 == b->prefix6);
    CHECK(a->max_actors == b->max_actors);
    CHECK(a->max_debit == b->max_debit);
    CHECK(a->strict == b->strict && a->fast_path == b->fast_path);
    CHECK(a->is_default == b->is_default);
    CHECK(a->no_reset == b->no_reset);
    CHECK(a->policy == b->policy && a->algo == b->algo && a->source == b->source);
    CHECK(a->store_set == b->store_set && (!a->store_set || a->store == b->store));
    CHECK(str_same(a->label, b->label));
    CHECK(str_same(a->comment, b->comment));
}

static void check_convert(const struct config *cfg, const struct rules *rules)
{
    struct config *again = NULL;
    struct rules *rules2 = NULL;
    static struct diag diag;
    char *text = NULL;
    size_t len = 0;
    FILE *f;
    int r;

    f = open_memstream(&text, &len);
    CHECK(f != NULL);
    r = config_write_libconfig(cfg, f);
    fclose(f);
    if (r == -EINVAL) {
        /* Only a match key with no native spelling (empty, or with '='). */
        bool unspellable = false;

        for (size_t i = 0; i < cfg->rules.n; i++) {
            for (size_t j = 0; j < cfg->rules.rules[i].n_match; j++) {
                const char *k = cfg->rules.rules[i].match[j].key;

                unspellable |= !k[0] || strchr(k, '=');
            }
        }
        CHECK(unspellable);
        free(text);
        return;
    }
    CHECK(r == 0);
    write_file(rt_path, (const uint8_t *)text, len);
    diag_init(&diag);
    r = config_load(rt_path, &again, &diag);
    if (r < 0) {
        char line[DIAG_FILE_MAX + DIAG_MSG_MAX + 32];

        for (size_t i = 0; i < diag.n; i++) {
            diag_format(&diag, i, line, sizeof(line));
            fprintf(stderr, "convert: %s\n", line);
        }
        fprintf(stderr, "--- converted text:\n%s---\n", text);
        CHECK(!"divvyctl convert output does not load");
    }
    CHECK(again->rules.n == cfg->rules.n);
    CHECK(again->rules.default_store == cfg->rules.default_store);
    for (size_t i = 0; i < cfg->rules.n; i++)
        check_same_rule(&cfg->rules.rules[i], &again->rules.rules[i]);
    CHECK(again->n_listen == cfg->n_listen);
    for (size_t i = 0; i < cfg->n_listen; i++)
        CHECK(strcmp(again->listen[i], cfg->listen[i]) == 0);
    CHECK(strcmp(again->state_dir, cfg->state_dir) == 0);
    CHECK(strcmp(again->admin_group, cfg->admin_group) == 0);
    CHECK(again->workers == cfg->workers && again->max_connections == cfg->max_connections);
    CHECK(again->max_output_bytes == cfg->max_output_bytes);
    CHECK(again->socket_mode == cfg->socket_mode);
    CHECK(again->table_slots == cfg->table_slots);
    CHECK(again->fast_table_slots == cfg->fast_table_slots);
    CHECK(again->when_full == cfg->when_full && again->on_redis_error == cfg->on_redis_error);
    CHECK(str_same(again->store_prefix, cfg->store_prefix));
    CHECK(again->lease_max == cfg->lease_max);
    CHECK(str_same(again->redis.host, cfg->redis.host));
    CHECK(again->redis.port == cfg->redis.port && again->redis.db == cfg->redis.db);
    CHECK(str_same(again->redis.unix_socket, cfg->redis.unix_socket));
    CHECK(str_same(again->redis.username, cfg->redis.username));
    CHECK(str_same(again->redis.password, cfg->redis.password));
    CHECK(again->redis.timeout_ms == cfg->redis.timeout_ms);

    /* Same rules, same counters: every id survives the conversion. */
    CHECK(rules_compile(&again->rules, 2, &rules2, &diag) == 0);
    for (size_t i = 0; i < cfg->rules.n; i++) {
        struct rules_rule a, b;

        CHECK(rules_get(rules, (uint32_t)i, &a) == 0);
        CHECK(rules_get(rules2, (uint32_t)i, &b) == 0);
        CHECK(a.id == b.id && strcmp(a.id_str, b.id_str) == 0);
        CHECK(a.store == b.store);
    }
    rules_free(rules2);
    config_free(again);
    free(text);
}

/* ---- entry --------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct diag diag;
    struct config *cfg = NULL;
    struct rules *rules = NULL;
    char line[DIAG_FILE_MAX + DIAG_MSG_MAX + 32];
    int r;

    write_file(path, data, size);
    diag_init(&diag);
    r = config_load(path, &cfg, &diag);
    if (r < 0) {
        /* Invalid, or out of memory; or a directory the config names
         * (include_dir) that cannot be read: config.h's "cannot read". */
        CHECK(r == -EINVAL || r == -ENOMEM || r == -ENOENT || r == -ENOTDIR || r == -EACCES ||
              r == -ELOOP || r == -ENAMETOOLONG);
        CHECK(cfg == NULL);
        /* A rejected config always says why. */
        CHECK(diag.n > 0);
        for (size_t i = 0; i < diag.n; i++) {
            int n = diag_format(&diag, i, line, sizeof(line));

            CHECK(n > 0);
            CHECK(strlen(diag.e[i].msg) < DIAG_MSG_MAX);
        }
        return 0;
    }
    CHECK(r == 0 && cfg != NULL);
    CHECK(diag.n == 0);
    CHECK(cfg->rules.n >= 1);
    CHECK(cfg->n_listen >= 1);
    /* config_load() validated the rules: they compile. */
    r = rules_compile(&cfg->rules, 1, &rules, &diag);
    if (r < 0) {
        for (size_t i = 0; i < diag.n; i++) {
            diag_format(&diag, i, line, sizeof(line));
            fprintf(stderr, "compile: %s\n", line);
        }
        CHECK(!"a config that config_load() accepted does not compile");
    }
    check_rules(cfg, rules);
    check_convert(cfg, rules);
    rules_free(rules);
    config_free(cfg);
    return 0;
}

#endif
