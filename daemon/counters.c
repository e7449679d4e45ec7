/* SPDX-License-Identifier: MIT */
/*
 * counters: COUNTERS (see counters.h, docs/protocol.md "COUNTERS").  One
 * request is a job: the rows of this host's tables, collected at once, and,
 * when strict rules are in scope and Redis is up, the rows read from Redis:
 * SCAN steps over the keys of every rule (<prefix>divvy:{*, one pattern
 * however many rules, or the one rule's with rule=), a PEEK of each key of a
 * strict rule with that rule's own script, all pipelined on the worker's
 * store connection.  The work is bounded (COUNTERS_SCAN_ROUNDS steps of
 * COUNTERS_SCAN_COUNT keys, COUNTERS_REDIS_MAX peeks); the job ends when its
 * last request has called back, and the reply, formatted then under the
 * rules of that moment (a rule a reload removed meanwhile is left out), goes
 * into the slot the job holds in the connection's reply queue.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urcu/urcu-memb.h>

#include "admin.h"
#include "algo.h"
#include "array.h"
#include "clock.h"
#include "conn.h"
#include "counters.h"
#include "eval.h"
#include "line_reply.h"
#include "proto.h"
#include "reload.h"
#include "srv_int.h"
#include "store.h"
#include "table.h"
#include "worker_int.h"

#define COUNTERS_DEFAULT      100
#define COUNTERS_MAX          10000
#define COUNTERS_SCAN_MAX     (1u << 20)    /* rows collected from the tables */
#define COUNTERS_SCAN_COUNT   1000          /* SCAN's COUNT */
#define COUNTERS_SCAN_ROUNDS  10            /* SCAN steps per request */
#define COUNTERS_REDIS_MAX    2000          /* counters peeked in Redis per request */
#define COUNTERS_BUDGET       10            /* ... within this many redis.timeout_ms */
#define ACTOR_SHOWN           32            /* longer actors: a digest, or cut */

enum row_store { ROW_LOCAL = 0, ROW_LEASE, ROW_REDIS };

struct counter_row {
    uint64_t rule_id;           /* the rule, by id: a reload may come before the reply */
    uint32_t rule;              /* its index in the rules the reply is made under */
    uint64_t credit;
    uint64_t used;
    uint64_t reset_ms;          /* until the quota is full again */
    uint64_t retry_ms;          /* until the next credit (algo_retry_ms()) */
    enum row_store store;
    char actor[40];             /* stored actor (<= 32 bytes), "#<digest hex>" or cut "..." */
};

/* A strict rule in scope: what a PEEK of its keys needs. */
struct strict_rule {
    uint64_t id;
    char id_str[RULES_LABEL_MAX + 1];
    enum rules_algo algo;
    int64_t limit;
    bool strict;                /* token_bucket's */
    struct table_limits lim;
};

struct counters_job {
    struct worker *w;
    struct replyq_slot *slot;   /* NULL: answered at once */
    unsigned long max;
    bool exhausted;
    bool one_rule;              /* rule= */
    uint64_t only_rule;         /* its id */
    /* This host's tables: sorted rule ids and their indexes, to find rules. */
    const struct rules *rules;  /* inside the first RCU section only */
    struct eval_env env;        /* ... with the tables, to tell where a rule's counters are */
    const struct table *walked; /* the table table_foreach() walks now */
    const uint64_t *ids;
    const uint32_t *idx;
    size_t n_ids;
    uint64_t now;
    struct counter_row *rows;
    size_t n, cap;
    /* Redis. */
    struct strict_rule *strict; /* sorted by id_str */
    size_t n_strict;
    char pattern[RULES_LABEL_MAX * 2 + 512];
    size_t pattern_len;
    unsigned rounds, peeks, pending;
    uint64_t budget_end;        /* no new request after this (COUNTERS_BUDGET timeouts) */
};

/* One PEEK of a strict counter in flight. */
struct counters_peek {
    struct counters_job *job;
    const struct strict_rule *rule;
    char actor[40];
};

static int find_rule_id(const uint64_t *ids, const uint32_t *idx, size_t n, uint64_t id)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (ids[mid] == id)
            return (int)idx[mid];
        if (ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static struct counter_row *row_new(struct counters_job *job)
{
    struct counter_row *grown;

    grown = array_grow(job->rows, job->n, &job->cap, sizeof(*grown), 256, COUNTERS_SCAN_MAX);
    if (!grown)
        return NULL;
    job->rows = grown;
    return &job->rows[job->n++];
}

static int collect_counter(const struct table_entry *e, void *userdata)
{
    struct counters_job *job = userdata;
    struct counter_row *row;
    struct rules_rule r;
    int idx = find_rule_id(job->ids, job->idx, job->n_ids, e->rule_id);
    uint64_t limit, used, retry_ms;

    /* Counters of rules a reload removed are not reported.  Nor is a slot
     * in a table where its rule keeps no counter, or of another algorithm
     * (no hit reads it): in the fast table any divvy-fast member can write
     * one naming any rule, a login rule's included. */
    if (idx < 0 || (job->one_rule && e->rule_id != job->only_rule) ||
        rules_get(job->rules, (uint32_t)idx, &r) < 0 || eval_table(&job->env, &r) != job->walked ||
        e->algo != r.algo || e->continuous != r.continuous)
        return 0;
    limit = (uint64_t)r.credit_limit;
    retry_ms = 0;
    if (e->lease) {
        /* A lease: what the pool lacks, as this host last saw it. */
        used = e->lease_left + e->lease_remain < limit ? limit - e->lease_left - e->lease_remain
                                                       : 0;
    } else {
        /* As a hit would see the counter now: a bucket's refills and a sliding
         * window's slide count (the stored word is as of the last write). */
        struct algo_state stv = { .idle = e->expires_ms, .data = e->data, .debt = e->debt };
        struct table_limits lim;
        struct table_result res;

        eval_limits(&r, &lim);
        lim.algo = e->algo;
        if (algo_check(&lim) < 0)
            return 0;
        algo_apply(&lim, TABLE_PEEK, 0, job->now, &stv, &stv, &res);
        used = limit - (res.credit < limit ? res.credit : limit);
        retry_ms = algo_retry_ms(&lim, job->now, &stv);
    }
    if (used > limit)
        used = limit;
    if (e->lease && used >= limit)
        retry_ms = e->expires_ms > job->now ? e->expires_ms - job->now : 0;
    if (job->exhausted && used < limit)
        return 0;
    row = row_new(job);
    if (!row)
        return 1;
    row->rule_id = e->rule_id;
    row->used = used;
    row->credit = limit - used;
    row->reset_ms = e->expires_ms > job->now ? e->expires_ms - job->now : 0;
    row->retry_ms = retry_ms;
    row->store = e->lease ? ROW_LEASE : ROW_LOCAL;
    if (e->actor_is_digest) {
        size_t pos = 0;

        row->actor[pos++] = '#';
        for (size_t i = 0; i < e->actor_len && pos + 3 <= sizeof(row->actor); i++)
            pos += (size_t)snprintf(row->actor + pos, sizeof(row->actor) - pos, "%02x",
                                    (unsigned char)e->actor[i]);
        row->actor[pos] = '\0';
    } else {
        size_t len = e->actor_len < sizeof(row->actor) - 1 ? e->actor_len
                                                            : sizeof(row->actor) - 1;

        memcpy(row->actor, e->actor, len);
        row->actor[len] = '\0';
    }
    return 0;
}

/* Least credit first, then most used, then rule order. */
static int row_cmp(const void *a, const void *b)
{
    const struct counter_row *x = a, *y = b;

    if (x->credit != y->credit)
        return x->credit < y->credit ? -1 : 1;
    if (x->used != y->used)
        return x->used > y->used ? -1 : 1;
    return x->rule < y->rule ? -1 : x->rule > y->rule;
}

static int id_cmp(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;

    return *x < *y ? -1 : *x > *y;
}

static int strict_cmp(const void *a, const void *b)
{
    const struct strict_rule *x = a, *y = b;

    return strcmp(x->id_str, y->id_str);
}

/* @rules' ids sorted, with their indexes: *ret_ids and *ret_idx (malloc'd). */
static int sorted_ids(const struct rules *rules, uint64_t **ret_ids, uint32_t **ret_idx,
                      size_t *ret_n)
{
    size_t n = rules_count(rules);
    uint64_t *pairs = malloc((n ? n : 1) * 2 * sizeof(*pairs));
    uint64_t *ids = malloc((n ? n : 1) * sizeof(*ids));
    uint32_t *idx = malloc((n ? n : 1) * sizeof(*idx));
    struct rules_rule r;
    int rc = -ENOMEM;

    if (!pairs || !ids || !idx)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        pairs[2 * i] = rules_get(rules, i, &r) < 0 ? 0 : r.id;
        pairs[2 * i + 1] = i;
    }
    qsort(pairs, n, 2 * sizeof(*pairs), id_cmp);
    for (size_t i = 0; i < n; i++) {
        ids[i] = pairs[2 * i];
        idx[i] = (uint32_t)pairs[2 * i + 1];
    }
    *ret_ids = ids;
    *ret_idx = idx;
    *ret_n = n;
    ids = NULL;
    idx = NULL;
    rc = 0;
out:
    free(pairs);
    free(ids);
    free(idx);
    return rc;
}

/* The reply ("OK <n>" and the lines) under the rules in force now, into
 * *ret_text (malloc'd, *ret_len bytes).  -ENOMEM. */
static int format_reply(struct counters_job *job, char **ret_text, size_t *ret_len)
{
    const struct reload_state *st;
    uint64_t *ids = NULL;
    uint32_t *idx = NULL;
    size_t n_ids = 0, len = 0, cap, shown = 0;
    char line[512], *text = NULL, head[32];
    struct rules_rule r;
    int rc;

    static const char *const store_names[] = { "local", "lease", "redis" };

    urcu_memb_read_lock();
    st = reload_current(job->w->s->o.reload);
    rc = sorted_ids(st->rules, &ids, &idx, &n_ids);
    /* Rows of rules a reload removed meanwhile go last, and are skipped. */
    for (size_t i = 0; rc >= 0 && i < job->n; i++) {
        int k = find_rule_id(ids, idx, n_ids, job->rows[i].rule_id);

        job->rows[i].rule = k < 0 ? UINT32_MAX : (uint32_t)k;
    }
    if (rc >= 0 && job->n > 1)
        qsort(job->rows, job->n, sizeof(*job->rows), row_cmp);
    cap = 64 + (job->n < job->max ? job->n : job->max) * sizeof(line);
    text = rc >= 0 ? malloc(cap) : NULL;
    if (!text) {
        rc = -ENOMEM;
        goto out;
    }
    len = sizeof(head);         /* room for the head, written last */
    for (size_t i = 0; i < job->n && shown < job->max; i++) {
        const struct counter_row *row = &job->rows[i];
        size_t pos = 0;

        if (row->rule == UINT32_MAX || rules_get(st->rules, row->rule, &r) < 0)
            continue;
        admin_append_fmt(line, sizeof(line), &pos, "rule=%s actor=", r.id_str);
        admin_append_quoted(line, sizeof(line), &pos, row->actor);
        admin_append_fmt(line, sizeof(line), &pos,
                         " credit=%llu used=%llu limit=%lld reset_seconds=%llu"
                         " retry_seconds=%llu store=%s\n",
                         (unsigned long long)row->credit, (unsigned long long)row->used,
                         (long long)r.credit_limit,
                         (unsigned long long)eval_ms_to_s(row->reset_ms),
                         (unsigned long long)(row->retry_ms / 1000 + (row->retry_ms % 1000 != 0)),
                         store_names[row->store]);
        memcpy(text + len, line, pos);
        len += pos;
        shown++;
    }
    /* The head goes right before the first line. */
    rc = snprintf(head, sizeof(head), "OK %zu\n", shown);
    memcpy(text + sizeof(head) - (size_t)rc, head, (size_t)rc);
    memmove(text, text + sizeof(head) - (size_t)rc, len - (sizeof(head) - (size_t)rc));
    len -= sizeof(head) - (size_t)rc;
    *ret_text = text;
    *ret_len = len;
    text = NULL;
    rc = 0;
out:
    urcu_memb_read_unlock();
    free(text);
    free(ids);
    free(idx);
    return rc;
}

static void job_free(struct counters_job *job)
{
    if (!job)
        return;
    free(job->rows);
    free(job->strict);
    free(job);
}

/* Every request has called back (or none could be sent): the reply. */
static void job_finish(struct counters_job *job)
{
    char *text = NULL;
    size_t len = 0;
    static const char oom[] = "ERR unknown \"out of memory\"\n";

    if (format_reply(job, &text, &len) < 0) {
        text = strdup(oom);
        len = text ? sizeof(oom) - 1 : 0;
    }
    conn_reply_answer(job->slot, text, len);
    job_free(job);
}

static void job_done_one(struct counters_job *job)
{
    if (--job->pending == 0)
        job_finish(job);
}

/* ---- Redis: strict rules' counters (docs/redis.md "COUNTERS") ------------------------ */

static void on_peek(void *arg, const struct store_reply *rep);
static void on_scan(void *arg, const struct store_reply *rep);

/* A request's deadline (its own, as a hit's), or 0 once the job's budget is spent. */
static uint64_t job_deadline(const struct counters_job *job)
{
    uint64_t now = clock_now_ms();

    return now < job->budget_end ? store_deadline(job->w->s->o.store, now) : 0;
}

static int scan_step(struct counters_job *job, uint64_t cursor)
{
    uint64_t deadline = job_deadline(job);
    int rc;

    if (!deadline)
        return -ETIMEDOUT;
    job->rounds++;
    rc = store_scan(job->w->sc, job->pattern, job->pattern_len, cursor, COUNTERS_SCAN_COUNT,
                    deadline, on_scan, job);
    if (rc >= 0)
        job->pending++;
    return rc;
}

/* PEEK of the counter at @key (@key_len bytes) with rule @sr's script. */
static void peek_send(struct counters_job *job, const struct strict_rule *sr, const char *key,
                      size_t key_len)
{
    struct store_conn *sc = job->w->sc;
    uint64_t deadline = job_deadline(job);
    struct counters_peek *p;
    struct store_verdict_args a;
    char actor[RULES_ACTOR_MAX];
    int alen, rc;

    if (!deadline)
        return;
    alen = store_key_actor(job->w->s->o.store, sr->id_str, key, key_len, actor, sizeof(actor));
    if (alen < 0)
        return;
    p = calloc(1, sizeof(*p));
    if (!p)
        return;
    p->job = job;
    p->rule = sr;
    /* Shown as stored; a long one cut (the tables keep a digest instead). */
    if ((size_t)alen <= ACTOR_SHOWN) {
        memcpy(p->actor, actor, (size_t)alen);
    } else {
        memcpy(p->actor, actor, ACTOR_SHOWN - 3);
        memcpy(p->actor + ACTOR_SHOWN - 3, "...", 3);
    }
    store_verdict_args_of(sr->algo, sr->limit, &sr->lim, sr->strict, STORE_PEEK, 1, &a);
    rc = store_verdict(sc, key, key_len, &a, deadline, on_peek, p);
    if (rc < 0) {
        free(p);
        return;
    }
    job->peeks++;
    job->pending++;
}

/* The strict rule whose key @key is, or NULL (another rule's: lease, gone). */
static const struct strict_rule *key_rule(const struct counters_job *job, const char *key,
                                          size_t key_len)
{
    const char *prefix = store_key_prefix(job->w->s->o.store);
    size_t plen = strlen(prefix), ilen;
    struct strict_rule probe;
    const char *id, *colon;

    if (key_len < plen + 7 || memcmp(key, prefix, plen) != 0 ||
        memcmp(key + plen, "divvy:{", 7) != 0)
        return NULL;
    id = key + plen + 7;
    colon = memchr(id, ':', key_len - plen - 7);
    if (!colon || (ilen = (size_t)(colon - id)) >= sizeof(probe.id_str))
        return NULL;
    memcpy(probe.id_str, id, ilen);
    probe.id_str[ilen] = '\0';
    return bsearch(&probe, job->strict, job->n_strict, sizeof(*job->strict), strict_cmp);
}

static void on_scan(void *arg, const struct store_reply *rep)
{
    struct counters_job *job = arg;

    if (rep && rep->kind == STORE_REPLY_KEYS) {
        for (size_t i = 0; i < rep->keys.n && job->peeks < COUNTERS_REDIS_MAX; i++) {
            const struct strict_rule *sr;
            const char *key;
            size_t key_len;

            store_keys_get(&rep->keys, i, &key, &key_len);
            sr = key_rule(job, key, key_len);
            if (sr)
                peek_send(job, sr, key, key_len);
        }
        if (rep->keys.cursor != 0 && job->rounds < COUNTERS_SCAN_ROUNDS &&
            job->peeks < COUNTERS_REDIS_MAX)
            scan_step(job, rep->keys.cursor);
    }
    job_done_one(job);
}

static void on_peek(void *arg, const struct store_reply *rep)
{
    struct counters_peek *p = arg;
    struct counters_job *job = p->job;
    const struct strict_rule *sr = p->rule;
    struct counter_row *row;
    uint64_t limit = (uint64_t)sr->limit, credit;

    if (!rep || rep->kind != STORE_REPLY_VERDICT)
        goto out;
    credit = rep->verdict.credit < limit ? rep->verdict.credit : limit;
    if (job->exhausted && credit > 0)
        goto out;
    row = row_new(job);
    if (!row)
        goto out;
    row->rule_id = sr->id;
    row->credit = credit;
    row->used = limit - credit;
    row->store = ROW_REDIS;
    snprintf(row->actor, sizeof(row->actor), "%s", p->actor);
    /* The scripts answer the time to the reset (window), to the next refill
     * (token bucket) or to the current window's end (sliding window). */
    row->retry_ms = credit > 0 ? 0 : rep->verdict.reset_ms;
    if ((sr->algo == RULES_ALGO_GCRA || sr->lim.continuous) && sr->lim.refill_amount) {
        /* The continuous script answers the time to full (gcra) or to the
         * next credit (continuous bucket): the other from the rate. */
        uint64_t rest = (uint64_t)((unsigned __int128)(limit - 1) * sr->lim.refill_ms /
                                   sr->lim.refill_amount);

        row->reset_ms = rep->verdict.reset_ms;
        if (sr->algo == RULES_ALGO_GCRA && credit == 0)
            row->retry_ms = rep->verdict.reset_ms > rest ? rep->verdict.reset_ms - rest : 1;
        else if (sr->algo != RULES_ALGO_GCRA && credit < limit)
            row->reset_ms += (uint64_t)((unsigned __int128)(limit - credit - 1) *
                                        sr->lim.refill_ms / sr->lim.refill_amount);
    } else if (sr->algo == RULES_ALGO_TOKEN_BUCKET && credit < limit && sr->lim.refill_amount) {
        uint64_t steps = (limit - credit + sr->lim.refill_amount - 1) / sr->lim.refill_amount;

        row->reset_ms = rep->verdict.reset_ms + (steps - 1) * sr->lim.refill_ms;
    } else if (sr->algo == RULES_ALGO_SLIDING_WINDOW) {
        row->reset_ms = rep->verdict.reset_ms + sr->lim.reset_ms;
    } else {
        row->reset_ms = rep->verdict.reset_ms;
    }
out:
    free(p);
    job_done_one(job);
}

/* Are there strict counters to read, and a Redis to read them from? */
static bool redis_wanted(const struct counters_job *job)
{
    const struct store *st = job->w->s->o.store;

    return job->n_strict && job->w->sc && st && !store_breaker_open(st);
}

/* Starts reading the strict rules' counters; false when nothing was sent. */
static bool redis_start(struct counters_job *job, const char *only_id)
{
    struct store *st = job->w->s->o.store;
    int n;

    n = store_key_pattern(st, only_id, job->pattern, sizeof(job->pattern));
    if (n < 0)
        return false;
    job->pattern_len = (size_t)n;
    job->budget_end = clock_now_ms() + (uint64_t)COUNTERS_BUDGET * store_timeout_ms(st);
    qsort(job->strict, job->n_strict, sizeof(*job->strict), strict_cmp);
    return scan_step(job, 0) >= 0;
}

/* ---- the verb ---------------------------------------------------------------------- */

void counters_request(struct conn *c, const struct proto_req *req)
{
    struct counters_job *job;
    const struct proto_kv *kv, *rule_kv = proto_find(req, "rule", 4);
    const struct reload_state *st;
    struct table *all[3] = { c->w->s->o.fast, c->w->s->o.priv, c->w->s->o.privileged };
    uint64_t *ids = NULL;
    uint32_t *idx = NULL;
    struct rules_rule r;
    char only_id[RULES_LABEL_MAX + 1] = "", *end, *text = NULL;
    size_t n_rules, len;

    job = calloc(1, sizeof(*job));
    if (!job) {
        line_err(c, PROTO_E_UNKNOWN, "out of memory");
        return;
    }
    job->w = c->w;
    job->max = COUNTERS_DEFAULT;
    job->now = clock_now_ms();
    for (unsigned i = 0; i < req->n_kv; i++) {
        kv = &req->kv[i];
        if (strcmp(kv->key, "max") == 0) {
            errno = 0;
            job->max = strtoul(kv->value, &end, 10);
            if (errno || *end || job->max == 0 || job->max > COUNTERS_MAX) {
                line_err(c, PROTO_E_BAD_REQUEST, "max must be 1..10000");
                goto out;
            }
        } else if (strcmp(kv->key, "exhausted") == 0) {
            job->exhausted = strcmp(kv->value, "true") == 0;
        } else if (strcmp(kv->key, "rule") != 0) {
            line_err(c, PROTO_E_BAD_REQUEST, "COUNTERS takes rule=, max= and exhausted=");
            goto out;
        }
    }
    urcu_memb_read_lock();
    st = reload_current(c->w->s->o.reload);
    n_rules = rules_count(st->rules);
    job->strict = calloc(n_rules ? n_rules : 1, sizeof(*job->strict));
    if (!job->strict || sorted_ids(st->rules, &ids, &idx, &job->n_ids) < 0) {
        urcu_memb_read_unlock();
        line_err(c, PROTO_E_UNKNOWN, "out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < n_rules; i++) {
        if (rules_get(st->rules, i, &r) < 0)
            continue;
        if (rule_kv && (strcmp(rule_kv->value, r.id_str) == 0 ||
                        strcmp(rule_kv->value, r.label) == 0)) {
            job->one_rule = true;
            job->only_rule = r.id;
            snprintf(only_id, sizeof(only_id), "%s", r.id_str);
        }
    }
    if (rule_kv && !job->one_rule) {
        urcu_memb_read_unlock();
        line_err(c, PROTO_E_BAD_REQUEST, "no rule with that label or id");
        goto out;
    }
    /* The strict rules in scope: their counters are in Redis only. */
    for (uint32_t i = 0; i < n_rules; i++) {
        struct strict_rule *sr = &job->strict[job->n_strict];
        struct eval_outcome o;

        if (rules_get(st->rules, i, &r) < 0 || r.store != RULES_STORE_STRICT ||
            (job->one_rule && r.id != job->only_rule) || eval_zero(&r, &o))
            continue;
        sr->id = r.id;
        snprintf(sr->id_str, sizeof(sr->id_str), "%s", r.id_str);
        sr->algo = r.algo;
        sr->limit = r.credit_limit;
        sr->strict = r.strict;
        eval_limits(&r, &sr->lim);
        job->n_strict++;
    }
    job->rules = st->rules;
    job->ids = ids;
    job->idx = idx;
    job->env = (struct eval_env){ .rules = st->rules, .fast = all[0], .priv = all[1],
                                  .privileged = all[2] };
    for (size_t t = 0; t < 3; t++) {
        job->walked = all[t];
        if (all[t])
            table_foreach(all[t], job->now, collect_counter, job);
    }
    job->rules = NULL;
    job->ids = NULL;
    job->idx = NULL;
    urcu_memb_read_unlock();

    if (redis_wanted(job)) {
        /* The slot first: a store callback never runs inside store_scan(). */
        job->slot = conn_reply_wait(c, 0);
        if (job->slot && redis_start(job, job->one_rule ? only_id : NULL)) {
            job = NULL;         /* the store's callbacks own it now */
            goto out;
        }
        if (job->slot) {
            job_finish(job);    /* nothing sent: answers the slot now */
            job = NULL;
            goto out;
        }
    }
    if (format_reply(job, &text, &len) < 0) {
        line_err(c, PROTO_E_UNKNOWN, "out of memory");
        goto out;
    }
    out_append(c, text, len);
out:
    free(text);
    free(ids);
    free(idx);
    job_free(job);
}
