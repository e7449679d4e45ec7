/* SPDX-License-Identifier: MIT */
/*
 * replay: recorded decisions through a candidate's rules (see replay.h).
 * Stages: the files, grouped into one stream per host (replay_add_path());
 * the merge of the streams by virtual time into the reorder window
 * (replay_run(), replay_feed()); each decision the window hands out
 * evaluated with eval_request() and counted (replay_one()).
 *
 * The virtual clock: within one run of a host's monotonic clock a decision's
 * time is its recorded mono_ms, exactly what the engine decided with; the
 * run is placed on the wall clock at its first decision (unix_ms - mono_ms)
 * so that runs and hosts line up, and everything is shifted to start 2^32 ms
 * after the earliest log began (the counter table keeps times below 2^40).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "array.h"
#include "config.h"
#include "eval.h"
#include "replay.h"
#include "replay_order.h"
#include "table.h"

#define REPLAY_ORIGIN_MARGIN ((uint64_t)1 << 32)    /* virtual time of the earliest log */
#define REPLAY_SPAN_MAX      ((uint64_t)1 << 38)    /* a decision this far after it: refused */
#define REPLAY_SWEEP_MS      10000                  /* as divvyd's sweep (SWEEP_EVERY_S) */
#define REPLAY_NAMES_MAX     (1u << 20)

struct replay_file {
    char *path;
    char *host;
    uint64_t started;
};

/* One host's files, read in turn, and the run of its clock. */
struct replay_stream {
    size_t *files;              /* indexes into rp->file, in start order */
    size_t n_files, cap_files;
    size_t next_file;
    struct dlog_reader *rd;
    struct dlog_item item;      /* the pending decision (have) */
    bool have;
    uint64_t key;               /* its virtual time */
    bool epoch_set;
    int64_t offset;             /* unix_ms - mono_ms of the run's first decision */
};

/* A rule id the log described, and its name. */
struct replay_name {
    uint64_t id;
    char *name;
};

struct replay {
    struct replay_opts o;
    struct rules *rules;
    struct table *fast, *priv, *privileged;
    struct eval_env env;
    bool sweep;                 /* some rule has max_actors: sweep as divvyd does */
    uint64_t next_sweep;
    bool any_lockout;
    uint8_t *lockout;           /* per rule: 1 lockout, 2 lockout and resettable */
    struct replay_report *report;
    struct replay_order *order;
    struct replay_file *file;
    size_t n_file, cap_file;
    struct replay_stream *stream;
    size_t n_stream, cap_stream;
    uint64_t origin;            /* Unix ms at virtual time REPLAY_ORIGIN_MARGIN */
    bool origin_set;
    struct replay_name *names;  /* open addressing by id; id 0: empty */
    size_t n_names, cap_names;
    char failed[4096];          /* the file of a directory that failed (*ret_file) */
};

/* ---- making one ---------------------------------------------------------------------- */

static int replay_tables(struct replay *rp, uint32_t slots, uint32_t fast_slots,
                         uint32_t priv_slots)
{
    int r;

    r = table_create_memfd(slots, &rp->priv);
    if (r >= 0)
        r = table_create_memfd(fast_slots, &rp->fast);
    if (r >= 0)
        r = table_create_memfd(priv_slots, &rp->privileged);
    return r;
}

static int replay_setup(struct replay *rp, const struct replay_opts *opts, bool full_allow)
{
    size_t n = rules_count(rp->rules);
    struct rules_rule rule;

    rp->o = *opts;
    if (!rp->o.max_bytes)
        rp->o.max_bytes = REPLAY_HELD_BYTES;
    rp->env = (struct eval_env){ .rules = rp->rules, .fast = rp->fast, .priv = rp->priv,
                                 .privileged = rp->privileged, .full_allow = full_allow };
    rp->lockout = calloc(n ? n : 1, 1);
    rp->report = replay_report_new(n);
    rp->order = replay_order_new(rp->o.window_ms, rp->o.max_bytes);
    if (!rp->lockout || !rp->report || !rp->order)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        if (rules_get(rp->rules, i, &rule) < 0)
            return -EINVAL;
        if (rule.max_actors > 0)
            rp->sweep = true;
        if (rule.algo == RULES_ALGO_LOCKOUT) {
            rp->lockout[i] = rule.resettable ? 2 : 1;
            rp->any_lockout = true;
        }
    }
    return 0;
}

int replay_new_rules(struct rules *rules, uint32_t slots, const struct replay_opts *opts,
                     struct replay **ret)
{
    struct replay *rp = calloc(1, sizeof(*rp));
    int r;

    if (!rp) {
        rules_free(rules);
        return -ENOMEM;
    }
    rp->rules = rules;
    r = replay_tables(rp, slots, slots, slots);
    if (r >= 0)
        r = replay_setup(rp, opts, false);
    if (r < 0) {
        replay_free(rp);
        return r;
    }
    *ret = rp;
    return 0;
}

int replay_new(const char *path, const struct replay_opts *opts, struct replay **ret,
               struct diag *reterr)
{
    struct config *cfg = NULL;
    struct replay *rp = NULL;
    int r;

    r = config_load(path, &cfg, reterr);
    if (r < 0)
        goto out;
    rp = calloc(1, sizeof(*rp));
    if (!rp) {
        r = -ENOMEM;
        goto out;
    }
    r = rules_compile(&cfg->rules, 0, &rp->rules, reterr);
    if (r < 0)
        goto out;
    r = replay_tables(rp, cfg->table_slots, cfg->fast_table_slots,
                      cfg->privileged_table_slots);
    if (r < 0) {
        diag_set(reterr, path, 0, "cannot make its counter tables: %s", strerror(-r));
        goto out;
    }
    r = replay_setup(rp, opts, cfg->when_full == CONFIG_FULL_ALLOW);
    if (r < 0)
        goto out;
    *ret = rp;
    rp = NULL;
out:
    replay_free(rp);
    config_free(cfg);
    return r;
}

void replay_free(struct replay *rp)
{
    if (!rp)
        return;
    for (size_t i = 0; i < rp->n_stream; i++) {
        dlog_reader_close(rp->stream[i].rd);
        free(rp->stream[i].files);
    }
    for (size_t i = 0; i < rp->n_file; i++) {
        free(rp->file[i].path);
        free(rp->file[i].host);
    }
    for (size_t i = 0; i < rp->cap_names; i++)
        free(rp->names[i].name);
    free(rp->names);
    free(rp->stream);
    free(rp->file);
    replay_order_free(rp->order);
    replay_report_free(rp->report);
    free(rp->lockout);
    table_close(rp->fast);
    table_close(rp->priv);
    table_close(rp->privileged);
    rules_free(rp->rules);
    free(rp);
}

struct replay_report *replay_report_of(const struct replay *rp)
{
    return rp->report;
}

const struct rules *replay_rules(const struct replay *rp)
{
    return rp->rules;
}

/* ---- rule names the log gives ------------------------------------------------------------ */

static struct replay_name *name_slot(struct replay_name *t, size_t cap, uint64_t id)
{
    size_t j = (size_t)((id * 0x9e3779b97f4a7c15ULL) >> 20) & (cap - 1);

    while (t[j].id && t[j].id != id)
        j = (j + 1) & (cap - 1);
    return &t[j];
}

static int name_add(struct replay *rp, uint64_t id, const char *name, size_t len)
{
    struct replay_name *s;
    char *copy;

    /* A name longer than a label is not one divvyd wrote: its id will do. */
    if (!id || len > RULES_LABEL_MAX)
        return 0;
    if ((rp->n_names + 1) * 2 > rp->cap_names) {
        size_t cap = rp->cap_names ? rp->cap_names * 2 : 256;
        struct replay_name *t;

        if (rp->n_names >= REPLAY_NAMES_MAX)
            return 0;                           /* later ones print as their id */
        t = calloc(cap, sizeof(*t));
        if (!t)
            return -ENOMEM;
        for (size_t i = 0; i < rp->cap_names; i++) {
            if (rp->names[i].id)
                *name_slot(t, cap, rp->names[i].id) = rp->names[i];
        }
        free(rp->names);
        rp->names = t;
        rp->cap_names = cap;
    }
    copy = strndup(name, len);
    if (!copy)
        return -ENOMEM;
    s = name_slot(rp->names, rp->cap_names, id);
    if (!s->id)
        rp->n_names++;
    free(s->name);
    s->id = id;
    s->name = copy;
    return 0;
}

const char *replay_rule_name(const struct replay *rp, uint64_t id, char *buf, size_t size)
{
    const struct replay_name *s;

    if (!id) {
        snprintf(buf, size, "%s", "");
        return buf;
    }
    if (rp->cap_names) {
        s = name_slot(rp->names, rp->cap_names, id);
        if (s->id)
            return s->name;
    }
    snprintf(buf, size, "%016llx", (unsigned long long)id);
    return buf;
}

/* ---- evaluating one decision ------------------------------------------------------------ */

/* Rule @idx's actor of @rq into @buf: its length, or 0 for none we can write. */
static size_t actor_of(const struct replay *rp, uint32_t idx, const struct rules_req *rq,
                       char *buf, size_t size)
{
    int len = rules_actor(rp->rules, idx, rq, buf, size);

    return len < 0 ? 0 : (size_t)len;
}

/* Lockout rules on @rec's path: a failure that locked, a RESET that unlocked. */
static int replay_locks(struct replay *rp, const struct replay_rec *rec,
                        const struct rules_req *rq, const struct eval_result *res)
{
    char actor[RULES_ACTOR_MAX];
    size_t len;
    int r;

    for (unsigned i = 0; i < res->n; i++) {
        const struct eval_outcome *o = &res->o[i];
        uint8_t kind = rp->lockout[o->rule];

        if (!kind || !o->counted)
            continue;
        if ((rec->op == TABLE_TAKE || rec->op == TABLE_DEBIT) && rec->n > 0 && o->allowed &&
            o->credit == 0) {
            /* A lock's length is whole seconds (unlock_time, factor, lock_max). */
            len = actor_of(rp, o->rule, rq, actor, sizeof(actor));
            r = replay_report_lock(rp->report, o->rule, actor, len, rec->unix_ms,
                                   rec->unix_ms + o->reset_s * 1000);
            if (r < 0)
                return r;
        } else if (rec->op == TABLE_RESET && kind == 2) {
            len = actor_of(rp, o->rule, rq, actor, sizeof(actor));
            r = replay_report_unlock(rp->report, o->rule, actor, len, rec->unix_ms);
            if (r < 0)
                return r;
        }
    }
    return 0;
}

static int replay_one(struct replay *rp, const struct replay_rec *rec)
{
    struct rules_req rq = { .kv = rec->kv, .n_kv = rec->n_kv,
                            .privileged = (rec->flags & DLOG_F_PRIVILEGED) != 0 };
    struct replay_totals *t = replay_report_totals(rp->report);
    char actor[RULES_ACTOR_MAX];
    struct eval_result res;
    bool before, after;
    size_t len = 0;
    int r;

    if (rp->sweep && rec->key >= rp->next_sweep) {
        table_sweep(rp->fast, rec->key);
        table_sweep(rp->priv, rec->key);
        table_sweep(rp->privileged, rec->key);
        rp->next_sweep = rec->key + REPLAY_SWEEP_MS;
    }
    if (rec->op > TABLE_DEBIT) {
        t->unreplayable++;
        return 0;
    }
    rp->env.wall_ms = (int64_t)rec->unix_ms;
    r = eval_request(&rp->env, &rq, rec->op, rec->n, rec->key, &res);
    if (r < 0) {
        t->unreplayable++;
        return 0;
    }
    before = (rec->flags & DLOG_F_ALLOWED) != 0;
    after = res.allowed;
    if (before != after)
        len = actor_of(rp, res.decider, &rq, actor, sizeof(actor));
    r = replay_report_decision(rp->report, res.decider, rec->op == TABLE_TAKE, before, after,
                               before != after ? actor : NULL, len);
    if (r >= 0 && before != after)
        r = replay_report_mismatch(rp->report, rec->unix_ms, rec->decider_id, res.decider,
                                   before, after, rec->kv, rec->n_kv);
    if (r >= 0 && rp->any_lockout)
        r = replay_locks(rp, rec, &rq, &res);
    return r;
}

static int replay_drain(struct replay *rp, bool all)
{
    const struct replay_rec *rec;
    int r = 0;

    while (r >= 0 && (rec = replay_order_pop(rp->order, all)) != NULL) {
        r = replay_one(rp, rec);
        replay_order_done(rp->order, rec);
    }
    return r;
}

/* ---- the virtual clock and the window ------------------------------------------------------ */

/* @d's virtual time in stream @s: 0 and *ret_key, or 1 when it is out of reach. */
static int virtual_key(struct replay *rp, struct replay_stream *s, const struct dlog_decision *d,
                       uint64_t *ret_key)
{
    int64_t offset = (int64_t)(d->unix_ms - d->mono_ms);
    int64_t at;

    if (!rp->origin_set) {
        /* Fed without files (tests): the first decision sets it. */
        rp->origin = d->unix_ms;
        rp->origin_set = true;
    }
    if (!s->epoch_set || offset - s->offset > REPLAY_EPOCH_MS ||
        s->offset - offset > REPLAY_EPOCH_MS) {
        s->offset = offset;
        s->epoch_set = true;
    }
    at = (int64_t)d->mono_ms + s->offset - (int64_t)rp->origin + (int64_t)REPLAY_ORIGIN_MARGIN;
    if (at <= 0 || (uint64_t)at > REPLAY_SPAN_MAX)
        return 1;
    *ret_key = (uint64_t)at;
    return 0;
}

/* Counts decision @d; true when it is one to replay (not an error, in range). */
static bool replay_wanted(struct replay *rp, const struct dlog_decision *d)
{
    struct replay_totals *t = replay_report_totals(rp->report);

    if (d->unix_ms < rp->o.since_ms || (rp->o.until_ms && d->unix_ms >= rp->o.until_ms))
        return false;
    t->decisions++;
    if (d->flags & DLOG_F_ERROR) {
        t->errors++;
        return false;
    }
    return true;
}

/* Decision @d at @key into the window, and what is due out of it. */
static int replay_push(struct replay *rp, const struct dlog_decision *d, uint64_t key)
{
    struct replay_totals *t = replay_report_totals(rp->report);
    int r = replay_order_push(rp->order, d, key);

    if (r == 1)
        t->reported_late++;
    else if (r == -E2BIG || r == -EINVAL)
        t->unreplayable++;
    else if (r < 0)
        return r;
    return replay_drain(rp, false);
}

static int stream_get(struct replay *rp, unsigned idx, struct replay_stream **ret)
{
    struct replay_stream *grown;

    while (rp->n_stream <= idx) {
        if (rp->n_stream >= REPLAY_HOSTS_MAX)
            return -EMLINK;
        grown = array_grow(rp->stream, rp->n_stream, &rp->cap_stream, sizeof(*rp->stream), 4,
                           REPLAY_HOSTS_MAX);
        if (!grown)
            return -ENOMEM;
        rp->stream = grown;
        memset(&rp->stream[rp->n_stream++], 0, sizeof(*rp->stream));
    }
    *ret = &rp->stream[idx];
    return 0;
}

int replay_feed(struct replay *rp, unsigned stream, const struct dlog_decision *d)
{
    struct replay_stream *s;
    uint64_t key;
    int r;

    r = stream_get(rp, stream, &s);
    if (r < 0)
        return r;
    if (!replay_wanted(rp, d))
        return 0;
    if (virtual_key(rp, s, d, &key) != 0) {
        replay_report_totals(rp->report)->unreplayable++;
        return 0;
    }
    return replay_push(rp, d, key);
}

int replay_finish(struct replay *rp)
{
    return replay_drain(rp, true);
}

/* ---- files ------------------------------------------------------------------------------ */

static int add_file(struct replay *rp, const char *path)
{
    struct dlog_reader *rd = NULL;
    struct replay_file *grown, *f;
    struct stat st;
    int r;

    if (rp->n_file >= REPLAY_FILES_MAX)
        return -E2BIG;
    /* A FIFO or a device would block or never end: regular files only. */
    if (stat(path, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    r = dlog_reader_open(path, &rd);
    if (r < 0)
        return r;
    grown = array_grow(rp->file, rp->n_file, &rp->cap_file, sizeof(*rp->file), 16,
                       REPLAY_FILES_MAX);
    if (!grown) {
        dlog_reader_close(rd);
        return -ENOMEM;
    }
    rp->file = grown;
    f = &rp->file[rp->n_file];
    f->started = dlog_reader_started(rd);
    f->path = strdup(path);
    f->host = strdup(dlog_reader_host(rd));
    dlog_reader_close(rd);
    if (!f->path || !f->host) {
        free(f->path);
        free(f->host);
        return -ENOMEM;
    }
    rp->n_file++;
    return 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_dir(struct replay *rp, const char *path, const char **ret_file)
{
    DIR *dir = opendir(path);
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, cap = 0, suffix = strlen(DLOG_FILE_SUFFIX);
    int r = 0;

    if (!dir)
        return -errno;
    while ((de = readdir(dir)) != NULL) {
        size_t len = strlen(de->d_name);
        char **grown;

        if (len <= suffix || strcmp(de->d_name + len - suffix, DLOG_FILE_SUFFIX) != 0)
            continue;
        grown = array_grow(names, n, &cap, sizeof(*names), 16, REPLAY_FILES_MAX);
        if (!grown || asprintf(&grown[n], "%s/%s", path, de->d_name) < 0) {
            names = grown ? grown : names;
            r = grown ? -ENOMEM : -E2BIG;
            break;
        }
        names = grown;
        n++;
    }
    closedir(dir);
    if (r == 0 && n == 0)
        r = -ENODATA;
    if (r == 0)
        qsort(names, n, sizeof(*names), name_cmp);
    for (size_t i = 0; r == 0 && i < n; i++) {
        r = add_file(rp, names[i]);
        if (r < 0 && ret_file) {
            snprintf(rp->failed, sizeof(rp->failed), "%s", names[i]);
            *ret_file = rp->failed;
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return r;
}

int replay_add_path(struct replay *rp, const char *path, const char **ret_file)
{
    struct stat st;

    if (ret_file)
        *ret_file = path;
    if (stat(path, &st) < 0)
        return -errno;
    if (S_ISDIR(st.st_mode))
        return add_dir(rp, path, ret_file);
    return add_file(rp, path);
}

/* Files of one host in start order, then by name (rotation order). */
static int file_cmp(const void *a, const void *b)
{
    const struct replay_file *x = a, *y = b;
    int c = strcmp(x->host, y->host);

    if (c)
        return c;
    if (x->started != y->started)
        return x->started < y->started ? -1 : 1;
    return strcmp(x->path, y->path);
}

static int make_streams(struct replay *rp)
{
    struct replay_stream *s = NULL;
    size_t *grown;
    int r;

    qsort(rp->file, rp->n_file, sizeof(*rp->file), file_cmp);
    for (size_t i = 0; i < rp->n_file; i++) {
        if (!rp->origin_set || rp->file[i].started < rp->origin)
            rp->origin = rp->file[i].started;
        rp->origin_set = true;
        if (i == 0 || strcmp(rp->file[i].host, rp->file[i - 1].host) != 0) {
            r = stream_get(rp, (unsigned)rp->n_stream, &s);
            if (r < 0)
                return r;
        }
        grown = array_grow(s->files, s->n_files, &s->cap_files, sizeof(*s->files), 4,
                           REPLAY_FILES_MAX);
        if (!grown)
            return -ENOMEM;
        s->files = grown;
        s->files[s->n_files++] = i;
    }
    return 0;
}

/* Reads stream @s on to its next decision to replay (s->have), handling the
 * other items on the way; at its end s->have is false.  0 or -errno. */
static int stream_next(struct replay *rp, struct replay_stream *s, const char **ret_file)
{
    struct replay_totals *t = replay_report_totals(rp->report);
    struct dlog_item *it = &s->item;
    int r;

    s->have = false;
    for (;;) {
        if (!s->rd) {
            if (s->next_file >= s->n_files)
                return 0;
            *ret_file = rp->file[s->files[s->next_file]].path;
            r = dlog_reader_open(*ret_file, &s->rd);
            if (r < 0)
                return r;
            s->next_file++;
        }
        r = dlog_reader_next(s->rd, it);
        if (r < 0) {
            *ret_file = rp->file[s->files[s->next_file - 1]].path;
            return r;
        }
        switch (r == 0 ? DLOG_EOF : it->type) {
        case DLOG_EOF:
            dlog_reader_close(s->rd);
            s->rd = NULL;
            break;
        case DLOG_DECISION:
            if (!replay_wanted(rp, &it->u.d))
                break;
            if (virtual_key(rp, s, &it->u.d, &s->key) != 0) {
                t->unreplayable++;
                break;
            }
            s->have = true;
            return 0;
        case DLOG_RULES:
            for (unsigned i = 0; i < it->u.rules.n; i++) {
                const struct dlog_rule *dr = &it->u.rules.rule[i];

                r = name_add(rp, dr->id, dr->id_str, dr->id_len);
                if (r < 0)
                    return r;
            }
            break;
        case DLOG_GAP:
            t->dropped += it->u.gap.dropped;
            break;
        case DLOG_CORRUPT:
            t->corrupt_blocks++;
            t->corrupt_bytes += it->u.corrupt.skipped;
            break;
        }
    }
}

int replay_run(struct replay *rp, const char **ret_file)
{
    const char *file = NULL;
    int r;

    r = make_streams(rp);
    for (size_t i = 0; r >= 0 && i < rp->n_stream; i++)
        r = stream_next(rp, &rp->stream[i], &file);
    while (r >= 0) {
        struct replay_stream *best = NULL;

        /* The host whose next decision is earliest (a handful of hosts). */
        for (size_t i = 0; i < rp->n_stream; i++) {
            struct replay_stream *s = &rp->stream[i];

            if (s->have && (!best || s->key < best->key))
                best = s;
        }
        if (!best)
            break;
        r = replay_push(rp, &best->item.u.d, best->key);
        if (r >= 0)
            r = stream_next(rp, best, &file);
    }
    if (r >= 0)
        r = replay_finish(rp);
    if (r < 0 && ret_file)
        *ret_file = file;
    return r;
}
