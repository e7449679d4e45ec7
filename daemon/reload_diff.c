/* SPDX-License-Identifier: MIT */
/*
 * reload_diff: the changes a reload makes, as report lines (see
 * reload_diff.h, docs/protocol.md "RELOAD").  Rules are paired by id (the
 * counters' identity, docs/rules.md "Identity"); a rule whose id changed is
 * paired with the one at the same file:line unless both have (different)
 * labels, so that editing an unlabelled rule's match reads as a change whose
 * counters start afresh rather than as a removal and an addition.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "reload_diff.h"

/* ---- settings ------------------------------------------------------------ */

#define SETTINGS_MAX 64

static int set_add(struct reload_settings *s, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int set_add(struct reload_settings *s, const char *name, const char *fmt, ...)
{
    va_list ap;
    char *v = NULL;
    int n;

    if (s->n == SETTINGS_MAX)
        return -E2BIG;
    va_start(ap, fmt);
    n = vasprintf(&v, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -ENOMEM;
    s->s[s->n].name = name;
    s->s[s->n].value = v;
    s->n++;
    return 0;
}

static const char *str_or(const char *s)
{
    return s ? s : "";
}

static int set_list(struct reload_settings *s, const char *name, char *const *list, size_t n)
{
    char buf[4096];
    size_t pos = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < n && pos < sizeof(buf); i++) {
        int w = snprintf(buf + pos, sizeof(buf) - pos, "%s%s", i ? "," : "", list[i]);

        if (w < 0)
            break;
        pos += (size_t)w;
    }
    return set_add(s, name, "%s", buf);
}

/* decision_log { }: read at start only (docs/config.md "decision_log"). */
static int dlog_settings(struct reload_settings *s, const struct config_dlog *d)
{
    char buf[1024];
    size_t pos = 0;
    int r = 0;

    r |= set_add(s, "decision_log.enabled", "%s", d->enabled ? "true" : "false");
    r |= set_add(s, "decision_log.directory", "%s", d->directory ? d->directory
                                                                  : CONFIG_DLOG_DIRECTORY);
    r |= set_add(s, "decision_log.file_size", "%" PRIu64, d->file_size);
    r |= set_add(s, "decision_log.files", "%u", d->files);
    r |= set_add(s, "decision_log.flush_ms", "%u", d->flush_ms);
    buf[0] = '\0';
    for (size_t i = 0; i < d->n_redact && pos < sizeof(buf); i++) {
        int w = snprintf(buf + pos, sizeof(buf) - pos, "%s%s=%s", i ? "," : "", d->redact[i].key,
                         d->redact[i].how == 2 ? "drop" : d->redact[i].how == 1 ? "hash" : "keep");

        if (w < 0)
            break;
        pos += (size_t)w;
    }
    r |= set_add(s, "decision_log.redact", "%s", buf);
    return r;
}

int reload_settings_take(const struct config *cfg, struct reload_settings *ret)
{
    const struct config_admit *a = &cfg->admit;
    const struct config_redis *rd = &cfg->redis;
    struct reload_settings s = { 0 };
    int r = 0;

    s.s = calloc(SETTINGS_MAX, sizeof(*s.s));
    if (!s.s)
        return -ENOMEM;
    r |= set_list(&s, "server.listen", cfg->listen, cfg->n_listen);
    r |= set_add(&s, "server.state_dir", "%s", str_or(cfg->state_dir));
    r |= set_add(&s, "server.workers", "%u", cfg->workers);
    r |= set_add(&s, "server.max_connections", "%u", cfg->max_connections);
    r |= set_add(&s, "server.max_output_bytes", "%zu", cfg->max_output_bytes);
    r |= set_add(&s, "server.tcp_connections", "%u", a->tcp_connections);
    r |= set_add(&s, "server.unix_connections", "%u", a->unix_connections);
    r |= set_add(&s, "server.reserved_connections", "%u", a->reserved_connections);
    r |= set_add(&s, "server.tcp_connections_per_address", "%u", a->per_address);
    r |= set_add(&s, "server.unix_connections_per_uid", "%u", a->per_uid);
    r |= set_add(&s, "server.idle_timeout_ms", "%u", a->idle_timeout_ms);
    r |= set_add(&s, "server.request_timeout_ms", "%u", a->request_timeout_ms);
    r |= set_add(&s, "server.output_budget_bytes", "%zu", a->output_budget_bytes);
    r |= set_add(&s, "server.socket_buffer_bytes", "%u", a->socket_buffer_bytes);
    r |= set_add(&s, "server.socket_mode", "%04o", cfg->socket_mode);
    r |= set_add(&s, "server.admin_group", "%s", str_or(cfg->admin_group));
    r |= set_add(&s, "server.fast_group", "%s", str_or(cfg->fast_group));
    r |= set_add(&s, "table.slots", "%" PRIu32, cfg->table_slots);
    r |= set_add(&s, "table.fast_slots", "%" PRIu32, cfg->fast_table_slots);
    r |= set_add(&s, "table.privileged_slots", "%" PRIu32, cfg->privileged_table_slots);
    r |= set_add(&s, "table.when_full", "%s", cfg->when_full == CONFIG_FULL_ALLOW ? "allow"
                                                                                 : "deny");
    r |= set_add(&s, "table.snapshot_interval_ms", "%u", cfg->snapshot_interval_ms);
    r |= set_add(&s, "table.adhoc_slots", "%" PRIu32, cfg->adhoc_slots);
    r |= set_add(&s, "table.adhoc_max_buckets", "%" PRIu32, cfg->adhoc_max_buckets);
    r |= set_add(&s, "table.adhoc_reserved_buckets", "%" PRIu32, cfg->adhoc_reserved_buckets);
    r |= set_add(&s, "table.adhoc_buckets_per_peer", "%" PRIu32, cfg->adhoc_buckets_per_peer);
    r |= set_add(&s, "store.on_redis_error", "%s",
                 cfg->on_redis_error == CONFIG_REDIS_ERROR_OPEN     ? "open"
                 : cfg->on_redis_error == CONFIG_REDIS_ERROR_CLOSED ? "closed"
                                                                    : "local");
    r |= set_add(&s, "store.prefix", "%s", str_or(cfg->store_prefix));
    r |= set_add(&s, "store.lease_max", "%" PRIu64, cfg->lease_max);
    r |= set_add(&s, "store.adhoc", "%s",
                 cfg->adhoc_store == CONFIG_ADHOC_LOCAL   ? "local"
                 : cfg->adhoc_store == CONFIG_ADHOC_REDIS ? "redis"
                                                          : "auto");
    r |= set_add(&s, "redis.host", "%s", str_or(rd->host));
    r |= set_add(&s, "redis.port", "%u", rd->port);
    r |= set_add(&s, "redis.unix_socket", "%s", str_or(rd->unix_socket));
    r |= set_add(&s, "redis.username", "%s", str_or(rd->username));
    /* Secrets: only whether they are set, and a digest-free "changed" is
     * impossible without keeping them; the file name is compared instead. */
    r |= set_add(&s, "redis.password", "%s", rd->password ? "(set)" : "(unset)");
    r |= set_add(&s, "redis.password_file", "%s", str_or(rd->password_file));
    r |= set_add(&s, "redis.db", "%u", rd->db);
    r |= set_add(&s, "redis.timeout_ms", "%u", rd->timeout_ms);
    r |= set_list(&s, "redis.sentinels", rd->sentinels, rd->n_sentinels);
    r |= set_add(&s, "redis.master_name", "%s", str_or(rd->master_name));
    r |= set_add(&s, "redis.sentinel_password", "%s", rd->sentinel_password ? "(set)"
                                                                             : "(unset)");
    r |= set_add(&s, "redis.sentinel_password_file", "%s", str_or(rd->sentinel_password_file));
    r |= set_list(&s, "redis.cluster_nodes", rd->cluster_nodes, rd->n_cluster_nodes);
    r |= set_add(&s, "metrics.listen", "%s", str_or(cfg->metrics_listen));
    r |= set_add(&s, "metrics.path", "%s", str_or(cfg->metrics_path));
    r |= set_add(&s, "metrics.names", "%s", cfg->metrics_divvy_names ? "divvy" : "prometheus");
    r |= set_add(&s, "metrics.privileged", "%s", cfg->metrics_privileged ? "true" : "false");
    r |= set_add(&s, "statsd.host", "%s", str_or(cfg->statsd_host));
    r |= set_add(&s, "statsd.port", "%u", cfg->statsd_port);
    r |= set_add(&s, "statsd.prefix", "%s", str_or(cfg->statsd_prefix));
    r |= set_add(&s, "statsd.interval_ms", "%u", cfg->statsd_interval_ms);
    r |= set_add(&s, "rls.unmatched", "%s", cfg->rls_unmatched_rule ? "rule" : "ok");
    r |= set_add(&s, "rls.ratelimit_headers", "%s", cfg->rls_ratelimit_headers ? "true" : "false");
    r |= dlog_settings(&s, &cfg->dlog);
    if (r != 0) {
        reload_settings_free(&s);
        return -ENOMEM;
    }
    *ret = s;
    return 0;
}

void reload_settings_free(struct reload_settings *s)
{
    for (size_t i = 0; s->s && i < s->n; i++)
        free(s->s[i].value);
    free(s->s);
    s->s = NULL;
    s->n = 0;
}

/* ---- report lines -------------------------------------------------------- */

struct line {
    char buf[1024];
    size_t pos;
};

static void put(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct line *l, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (l->pos >= sizeof(l->buf) - 1)
        return;
    va_start(ap, fmt);
    n = vsnprintf(l->buf + l->pos, sizeof(l->buf) - l->pos, fmt, ap);
    va_end(ap);
    if (n > 0)
        l->pos = l->pos + (size_t)n < sizeof(l->buf) ? l->pos + (size_t)n : sizeof(l->buf) - 1;
}

/* A protocol string, quoted: '"' and control bytes become '_' (no escapes). */
static void put_quoted(struct line *l, const char *key, const char *s)
{
    put(l, " %s=\"", key);
    for (; *s && l->pos + 2 < sizeof(l->buf); s++)
        l->buf[l->pos++] = (*s == '"' || (unsigned char)*s < 0x20) ? '_' : *s;
    l->buf[l->pos] = '\0';
    put(l, "\"");
}

static int emit(struct reload_diff *d, const struct line *l)
{
    char *copy;

    if (d->n == RELOAD_DIFF_LINES_MAX) {
        d->dropped++;
        return 0;
    }
    if (!d->lines && !(d->lines = calloc(RELOAD_DIFF_LINES_MAX, sizeof(*d->lines))))
        return -ENOMEM;
    /* The leading space of the first pair is not part of the line. */
    copy = strdup(l->buf[0] == ' ' ? l->buf + 1 : l->buf);
    if (!copy)
        return -ENOMEM;
    d->lines[d->n++] = copy;
    return 0;
}

/* ---- rules --------------------------------------------------------------- */

static const char *table_of(const struct rules_rule *r)
{
    return r->fast_path ? "fast" : r->source == RULES_SOURCE_PRIVILEGED ? "privileged" : "private";
}

/* The fields of @a and @b that differ, comma-separated, into @l. */
static void put_fields(struct line *l, const struct rules *ra, const struct rules_rule *a,
                       const struct rules *rb, const struct rules_rule *b)
{
    char x[2048], y[2048];
    bool any = false;

#define FIELD(cond, name)                                                                         \
    do {                                                                                          \
        if (cond) {                                                                               \
            put(l, "%s%s", any ? "," : " fields=", name);                                         \
            any = true;                                                                           \
        }                                                                                         \
    } while (0)
    /* An unlabelled rule's id digests its match set and actor keys: the
     * same id, the same text (spares 100,000 rules two formattings each). */
    if (a->id != b->id || a->label[0] || b->label[0]) {
        x[0] = y[0] = '\0';
        rules_describe(ra, a->index, x, sizeof(x));
        rules_describe(rb, b->index, y, sizeof(y));
        FIELD(strcmp(x, y) != 0, "match");
        x[0] = y[0] = '\0';
        rules_actor_keys(ra, a->index, x, sizeof(x));
        rules_actor_keys(rb, b->index, y, sizeof(y));
        FIELD(strcmp(x, y) != 0, "actor");
    }
    FIELD(a->prefix4 != b->prefix4, "actor_prefix4");
    FIELD(a->prefix6 != b->prefix6, "actor_prefix6");
    FIELD(a->credit_limit != b->credit_limit, "credit_limit");
    FIELD(a->reset_seconds != b->reset_seconds, "reset_seconds");
    FIELD(a->algo != b->algo, "algorithm");
    FIELD(a->calendar != b->calendar, "calendar");
    FIELD(a->calendar && b->calendar && strcmp(a->time_zone, b->time_zone) != 0, "time_zone");
    FIELD(a->refill_amount != b->refill_amount, "refill_amount");
    FIELD(a->refill_seconds != b->refill_seconds, "refill_seconds");
    FIELD(a->reset_ms != b->reset_ms && a->reset_seconds == b->reset_seconds, "reset_ms");
    FIELD(a->refill_ms != b->refill_ms && a->refill_seconds == b->refill_seconds, "refill_ms");
    FIELD(a->continuous != b->continuous, "refill");
    FIELD(a->max_actors != b->max_actors, "max_actors");
    FIELD(a->max_debit != b->max_debit, "max_debit");
    FIELD(a->strict != b->strict, "strict");
    FIELD(a->resettable != b->resettable, "resettable");
    FIELD(a->fast_path != b->fast_path, "fast_path");
    FIELD(a->policy != b->policy, "match_policy");
    FIELD(a->source != b->source, "source");
    FIELD(a->store != b->store, "store");
    FIELD(a->when_full != b->when_full, "when_full");
    FIELD(strcmp(a->label, b->label) != 0, "label");
    FIELD(strcmp(a->comment, b->comment) != 0, "comment");
#undef FIELD
}

/* Whether anything but position (index, file, line) differs. */
static bool rule_differs(const struct rules *ra, const struct rules_rule *a,
                         const struct rules *rb, const struct rules_rule *b)
{
    struct line l = { .pos = 0 };

    l.buf[0] = '\0';
    put_fields(&l, ra, a, rb, b);
    return l.pos > 0;
}

/* kept: same counters, same table; moved: same id, another table (tables.c
 * carries them); fresh: another id, another store (counts do not move
 * between stores, docs/redis.md) or another algorithm (a labelled rule's:
 * docs/rules.md "Identity"). */
static const char *counters_of(const struct rules_rule *a, const struct rules_rule *b)
{
    if (a->id != b->id || a->store != b->store || a->algo != b->algo ||
        a->continuous != b->continuous)
        return "fresh";
    return strcmp(table_of(a), table_of(b)) != 0 ? "moved" : "kept";
}

static void put_where(struct line *l, const struct rules_rule *r)
{
    put(l, " index=%" PRIu32, r->index);
    put_quoted(l, "file", r->file);
    put(l, " line=%u", r->line);
}

struct key {
    uint64_t id;
    const char *file;
    unsigned line;
    uint32_t idx;
    bool labelled;
};

static int key_cmp_id(const void *pa, const void *pb)
{
    const struct key *a = pa, *b = pb;

    return a->id < b->id ? -1 : a->id > b->id;
}

static int key_cmp_where(const void *pa, const void *pb)
{
    const struct key *a = pa, *b = pb;

    if (a->line != b->line)
        return a->line < b->line ? -1 : 1;
    return strcmp(a->file, b->file);
}

/* The unpaired rules of @rules as keys, sorted by @cmp; *ret_n of them. */
static struct key *keys_of(const struct rules *rules, size_t n, const uint32_t *pair,
                           int (*cmp)(const void *, const void *), size_t *ret_n)
{
    struct key *k = calloc(n + 1, sizeof(*k));
    struct rules_rule r;
    size_t m = 0;

    if (!k)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (pair[i] || rules_get(rules, (uint32_t)i, &r) < 0)
            continue;
        k[m++] = (struct key){ .id = r.id, .file = r.file, .line = r.line, .idx = (uint32_t)i,
                               .labelled = r.label[0] != '\0' };
    }
    qsort(k, m, sizeof(*k), cmp);
    *ret_n = m;
    return k;
}

/* Pairs the unpaired rules of @old and @now with equal ids (@by_where:
 * equal file:line): pair_old[i] = j + 1 and pair_now[j] = i + 1. */
static int pair_up(const struct rules *old, size_t n_old, const struct rules *now, size_t n_now,
                   uint32_t *pair_old, uint32_t *pair_now, bool by_where)
{
    int (*cmp)(const void *, const void *) = by_where ? key_cmp_where : key_cmp_id;
    size_t na = 0, nb = 0, i = 0, j = 0;
    struct key *ka, *kb;
    int r = 0;

    ka = keys_of(old, n_old, pair_old, cmp, &na);
    kb = keys_of(now, n_now, pair_now, cmp, &nb);
    if (!ka || !kb) {
        r = -ENOMEM;
        goto out;
    }
    while (i < na && j < nb) {
        int c = cmp(&ka[i], &kb[j]);

        if (c < 0) {
            i++;
        } else if (c > 0) {
            j++;
        } else if (by_where && ka[i].labelled && kb[j].labelled) {
            i++;                /* two labels: two rules, whatever their place */
            j++;
        } else {
            pair_old[ka[i].idx] = kb[j].idx + 1;
            pair_now[kb[j].idx] = ka[i].idx + 1;
            i++;
            j++;
        }
    }
out:
    free(ka);
    free(kb);
    return r;
}

static int diff_rules(const struct rules *old, const struct rules *now, struct reload_diff *d)
{
    size_t n_old = rules_count(old), n_now = rules_count(now);
    uint32_t *pair_old = NULL;      /* old index -> new index + 1; 0: none */
    uint32_t *pair_now = NULL;      /* new index -> old index + 1 */
    struct rules_rule a, b;
    struct line l;
    int r = 0;

    pair_old = calloc(n_old + 1, sizeof(*pair_old));
    pair_now = calloc(n_now + 1, sizeof(*pair_now));
    if (!pair_old || !pair_now) {
        r = -ENOMEM;
        goto out;
    }
    /* By id, then what is left by file:line: two sorted lists merged, so
     * 100,000 rules cost a sort, not 10^10 comparisons. */
    r = pair_up(old, n_old, now, n_now, pair_old, pair_now, false);
    if (r >= 0)
        r = pair_up(old, n_old, now, n_now, pair_old, pair_now, true);
    for (size_t i = 0; i < n_old && r >= 0; i++) {
        if (pair_old[i])
            continue;
        rules_get(old, (uint32_t)i, &a);
        l.pos = 0;
        l.buf[0] = '\0';
        put_quoted(&l, "rule", a.id_str);
        put(&l, " change=removed counters=unused");
        put_where(&l, &a);
        d->removed++;
        r = emit(d, &l);
    }
    for (size_t j = 0; j < n_now && r >= 0; j++) {
        rules_get(now, (uint32_t)j, &b);
        l.pos = 0;
        l.buf[0] = '\0';
        put_quoted(&l, "rule", b.id_str);
        if (!pair_now[j]) {
            put(&l, " change=added counters=fresh");
            d->added++;
        } else {
            rules_get(old, pair_now[j] - 1, &a);
            if (a.id == b.id && !rule_differs(old, &a, now, &b))
                continue;
            put(&l, " change=changed counters=%s", counters_of(&a, &b));
            if (a.id != b.id)
                put_quoted(&l, "was", a.id_str);
            put_fields(&l, old, &a, now, &b);
            d->changed++;
        }
        put_where(&l, &b);
        r = emit(d, &l);
    }
out:
    free(pair_old);
    free(pair_now);
    return r;
}

int reload_diff(const struct rules *old, const struct rules *now,
                const struct reload_settings *old_set, const struct reload_settings *now_set,
                struct reload_diff *ret)
{
    struct line l;
    int r;

    r = diff_rules(old, now, ret);
    for (size_t i = 0; r >= 0 && i < old_set->n && i < now_set->n; i++) {
        const struct reload_setting *a = &old_set->s[i], *b = &now_set->s[i];

        if (strcmp(a->value, b->value) == 0)
            continue;
        l.pos = 0;
        l.buf[0] = '\0';
        put(&l, "setting=%s change=restart", b->name);
        put_quoted(&l, "running", a->value);
        put_quoted(&l, "configured", b->value);
        ret->restart++;
        r = emit(ret, &l);
    }
    return r;
}

void reload_diff_free(struct reload_diff *d)
{
    for (size_t i = 0; d->lines && i < d->n; i++)
        free(d->lines[i]);
    free(d->lines);
    memset(d, 0, sizeof(*d));
}
