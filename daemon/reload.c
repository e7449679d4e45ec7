/* SPDX-License-Identifier: MIT */
/*
 * reload: RCU publication of compiled rules (see reload.h).  Writers are
 * serialised by a mutex that no reader ever takes; readers only follow one
 * rcu_dereference()d pointer.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <urcu/urcu-memb.h>

#include "clock.h"
#include "config.h"
#include "fastrules.h"
#include "fdio.h"
#include "log.h"
#include "reload.h"
#include "reload_diff.h"
#include "resp_auth.h"
#include "tls.h"

struct published {
    struct reload_state st;
    struct rcu_head rcu;
};

struct reload {
    char *config_path;
    char *state_dir;                /* rules.<generation> files for fast-path clients */
    struct table *fast;             /* its header announces the generation */
    struct tables tables;           /* counters move when a rule changes table */
    bool have_tables;
    struct reload_settings settings;    /* those divvyd started with (reload_diff.h) */
    struct published *current;      /* RCU-protected */
    pthread_mutex_t lock;           /* serialises writers */
    uint64_t next_generation;
    uint64_t n_ok;
    uint64_t n_rejected;
    struct tls *tls;                /* the TLS listeners' certificate; NULL: none (tls.h) */
    reload_rules_fn *rules_fn;      /* the decision log's (reload_set_rules_hook()) */
    void *rules_arg;
};

/*
 * Writes the compiled blob to <state_dir>/rules.<generation> (through a
 * temporary name and rename(), so a client never opens a half-written file).
 * The file is immutable from then on.  docs/dev/shm.md "Rule files".
 */
static int write_rules_file(const struct reload *rl, const struct rules *rules, uint64_t gen)
{
    char tmp[PATH_MAX], path[PATH_MAX];
    const void *data;
    size_t len;
    int fd, r;

    if ((size_t)snprintf(path, sizeof(path), "%s/rules.%llu", rl->state_dir,
                         (unsigned long long)gen) >= sizeof(path) ||
        (size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
        return -ENAMETOOLONG;
    rules_blob(rules, &data, &len);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0)
        return -errno;
    r = fdio_write_all(fd, data, len);
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && rename(tmp, path) < 0)
        r = -errno;
    if (r < 0)
        unlink(tmp);
    return r;
}

/* Removes rules.<g> files other than @keep (older generations, crash leftovers). */
static void remove_old_rules_files(const struct reload *rl, uint64_t keep)
{
    char path[PATH_MAX];
    struct dirent *de;
    DIR *d;

    d = opendir(rl->state_dir);
    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        unsigned long long g;
        char *end;

        if (strncmp(de->d_name, "rules.", 6) != 0)
            continue;
        g = strtoull(de->d_name + 6, &end, 10);
        if (end == de->d_name + 6 || (*end && strcmp(end, ".tmp") != 0) ||
            (g == keep && !*end))
            continue;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", rl->state_dir, de->d_name) <
            sizeof(path))
            unlink(path);
    }
    closedir(d);
}

/*
 * Generations only grow, across restarts too, although each divvyd starts
 * with a new control page (docs/dev/shm.md "Rule files"): the later of @min and
 * CLOCK_MONOTONIC in microseconds, which no earlier divvyd of this boot can
 * have reached (one publication takes far longer than a microsecond).
 */
static uint64_t generation_at_least(uint64_t min)
{
    uint64_t now = clock_now_ns() / 1000;

    return now > min ? now : min;
}

static void published_free(struct published *p)
{
    if (!p)
        return;
    rules_free(p->st.rules);
    free(p);
}

static void published_free_rcu(struct rcu_head *head)
{
    published_free(caa_container_of(head, struct published, rcu));
}

/* What config_fleet_notes() finds in rules just published, one warning
 * line each (@who: NULL at start). */
static void log_notes(const struct config *cfg, const struct rules *rules, const char *who)
{
    char line[DIAG_FILE_MAX + DIAG_MSG_MAX + 32];
    struct diag *d = malloc(sizeof(*d));

    if (!d)
        return;
    diag_init(d);
    config_fleet_notes(cfg, rules, d);
    for (size_t i = 0; i < d->n; i++) {
        diag_format(d, i, line, sizeof(line));
        if (who)
            log_msg(LOG_WARNING, "reload (%s): %s", who, line);
        else
            log_msg(LOG_WARNING, "%s", line);
    }
    free(d);
}

int reload_new(const char *config_path, const struct config *cfg, const char *state_dir,
               struct table *fast, struct reload **ret, struct diag *reterr)
{
    struct rules *rules = NULL;
    struct reload *rl;
    struct published *p;
    uint64_t gen;
    int r;

    rl = calloc(1, sizeof(*rl));
    p = calloc(1, sizeof(*p));
    if (!rl || !p || !(rl->config_path = strdup(config_path)) ||
        !(rl->state_dir = strdup(state_dir))) {
        r = -ENOMEM;
        goto fail;
    }
    rl->fast = fast;
    /* Generations only grow, across restarts too: clients compare them. */
    gen = generation_at_least(table_generation(fast) + 1);
    r = rules_compile(&cfg->rules, gen, &rules, reterr);
    if (r < 0)
        goto fail;
    r = write_rules_file(rl, rules, gen);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "cannot write rules.%llu in %s: %m", (unsigned long long)gen, state_dir);
        goto fail;
    }
    r = reload_settings_take(cfg, &rl->settings);
    if (r < 0)
        goto fail;
    pthread_mutex_init(&rl->lock, NULL);
    p->st.rules = rules;
    p->st.generation = gen;
    rl->next_generation = gen + 1;
    rcu_assign_pointer(rl->current, p);
    table_set_generation(fast, gen);
    remove_old_rules_files(rl, gen);
    log_notes(cfg, rules, NULL);
    *ret = rl;
    return 0;
fail:
    if (rl) {
        reload_settings_free(&rl->settings);
        free(rl->config_path);
        free(rl->state_dir);
    }
    rules_free(rules);
    free(rl);
    free(p);
    return r;
}

/*
 * Records the fast_path rules of generation @gen (@rules), just published,
 * as those the fast table's counters may leave it for (fastrules.h).  A
 * record that cannot be written is removed: a stale one could name a rule
 * that is not fast_path any more.
 */
static void record_fast_rules(const struct reload *rl, const struct rules *rules, uint64_t gen)
{
    struct fastrules fr = { 0 };
    int r;

    r = tables_fast_rules(&rl->tables, rules, gen, &fr);
    if (r >= 0)
        r = fastrules_save(rl->state_dir, &fr);
    fastrules_free(&fr);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_WARNING, "cannot write %s/%s: %m; until it is written, no counter leaves "
                "the fast-path table at a restart", rl->state_dir, FASTRULES_FILE);
        fastrules_forget(rl->state_dir);
    }
}

int reload_set_tables(struct reload *rl, const struct tables *tb)
{
    struct fastrules last = { 0 };
    int r, lr;

    pthread_mutex_lock(&rl->lock);
    rl->tables = *tb;
    rl->have_tables = true;
    /* New tables digest long actors like the fast table, so that those
     * counters can move too (-EBUSY: a reattached table keeps its key). */
    if (tb->priv && tb->fast)
        table_adopt_digests(tb->priv, tb->fast);
    if (tb->privileged && tb->fast)
        table_adopt_digests(tb->privileged, tb->fast);
    /* The fast table was last written under the previous run's rules: its
     * counters leave it only for the rules that were fast_path then, as
     * that run recorded them (never as the member-writable table says). */
    lr = fastrules_load(rl->state_dir, &last);
    if (lr < 0 && lr != -ENOENT) {
        errno = -lr;
        log_msg(LOG_WARNING, "%s/%s not used (%m): no counter leaves the fast-path table "
                "at this start", rl->state_dir, FASTRULES_FILE);
    }
    /* No reader runs yet at start: one pass that removes as it moves.  No
     * client has the new rules yet either: the record changes only after. */
    r = tables_settle(&rl->tables, rl->current->st.rules, lr >= 0 ? &last : NULL, true, NULL,
                      "start");
    if (r >= 0)
        record_fast_rules(rl, rl->current->st.rules, rl->current->st.generation);
    fastrules_free(&last);
    pthread_mutex_unlock(&rl->lock);
    return r;
}

void reload_free(struct reload *rl)
{
    struct published *p;

    if (!rl)
        return;
    p = rcu_xchg_pointer(&rl->current, NULL);
    urcu_memb_synchronize_rcu();
    published_free(p);
    /* Wait for call_rcu() callbacks of earlier reloads. */
    urcu_memb_barrier();
    pthread_mutex_destroy(&rl->lock);
    reload_settings_free(&rl->settings);
    free(rl->config_path);
    free(rl->state_dir);
    free(rl);
}

const struct reload_state *reload_current(struct reload *rl)
{
    struct published *p = rcu_dereference(rl->current);

    return p ? &p->st : NULL;
}

void reload_set_tls(struct reload *rl, struct tls *tls)
{
    rl->tls = tls;
}

void reload_set_rules_hook(struct reload *rl, reload_rules_fn *fn, void *arg)
{
    rl->rules_fn = fn;
    rl->rules_arg = arg;
}

/* The TLS listeners' new context from @cfg's server.tls, into *ret; a
 * problem is the reload's, at server.tls's line. */
static int reload_tls(const struct config *cfg, struct tls_ctx **ret, struct diag *diag)
{
    char err[TLS_ERR_MAX];
    int r;

    if (!cfg->tls.line) {
        diag_set(diag, cfg->path, 0, "server.tls is gone, but divvyd started with it and "
                 "its TLS listeners stay open until a restart: put server.tls back");
        return -EINVAL;
    }
    r = tls_prepare(&cfg->tls, ret, err, sizeof(err));
    if (r < 0)
        diag_set(diag, cfg->path, cfg->tls.line, "%s", err);
    return r;
}

int reload_run(struct reload *rl, const char *who, uint64_t *ret_generation, size_t *ret_rules,
               char *errbuf, size_t errsize)
{
    struct reload_result res = { 0 };
    int r;

    r = reload_apply(rl, who, NULL, &res, errbuf, errsize);
    if (r >= 0) {
        *ret_generation = res.generation;
        *ret_rules = res.rules;
    }
    reload_result_free(&res);
    return r;
}

/* Logs what a reload changed: one line per change, at most LOG_CHANGES_MAX. */
#define LOG_CHANGES_MAX 32
static void log_changes(const struct reload *rl, const char *who, const struct reload_diff *d)
{
    char names[512];
    size_t pos = 0;

    for (size_t i = 0; i < d->n && i < LOG_CHANGES_MAX; i++)
        log_msg(LOG_NOTICE, "reload (%s): %s", who, d->lines[i]);
    if (d->n + d->dropped > LOG_CHANGES_MAX)
        log_msg(LOG_NOTICE, "reload (%s): ... and %zu more changes (RELOAD diff=true lists "
                "up to %d)", who, d->n + d->dropped - LOG_CHANGES_MAX, RELOAD_DIFF_LINES_MAX);
    if (!d->restart)
        return;
    names[0] = '\0';
    for (size_t i = 0; i < d->n && pos < sizeof(names); i++) {
        int w;

        if (strncmp(d->lines[i], "setting=", 8) != 0)
            continue;
        w = snprintf(names + pos, sizeof(names) - pos, "%s%.*s", pos ? ", " : "",
                     (int)strcspn(d->lines[i] + 8, " "), d->lines[i] + 8);
        if (w > 0)
            pos += (size_t)w;
    }
    log_msg(LOG_WARNING, "reload (%s): %zu settings in %s changed that take effect only after "
            "a restart: %s", who, d->restart, rl->config_path, names);
}

/* "file:line: reason (and N more)" of a rejected load into @errbuf; logs it. */
static void reject(struct reload *rl, const char *who, const struct diag *diag, int r,
                   uint64_t gen, bool dry_run, char *errbuf, size_t errsize)
{
    char first[DIAG_FILE_MAX + DIAG_MSG_MAX + 32];

    if (diag->n > 0)
        diag_format(diag, 0, first, sizeof(first));
    else
        snprintf(first, sizeof(first), "%s: %s", rl->config_path, strerror(-r));
    if (diag->n + diag->dropped > 1)
        snprintf(errbuf, errsize, "%s (and %zu more)", first, diag->n + diag->dropped - 1);
    else
        snprintf(errbuf, errsize, "%s", first);
    if (dry_run) {
        log_msg(LOG_INFO, "reload dry run (%s) rejected: %s", who, errbuf);
        return;
    }
    rl->n_rejected++;
    log_msg(LOG_ERR, "reload (%s) rejected, keeping generation %llu: %s", who,
            (unsigned long long)(gen - 1), errbuf);
    for (size_t i = 1; i < diag->n; i++) {
        diag_format(diag, i, first, sizeof(first));
        log_msg(LOG_ERR, "reload: %s", first);
    }
}

/* server.resp_password_file, read again with the config: in force at once
 * (docs/resp.md "AUTH"). */
static void reload_resp_password(const struct config *cfg, const char *who)
{
    int r = resp_auth_set(cfg->resp_password);

    if (r < 0)
        log_msg(LOG_ERR, "reload (%s): out of memory: the RESP password stays the previous one",
                who);
    else if (r > 0)
        log_msg(LOG_NOTICE, "reload (%s): RESP password %s: connections that authenticated "
                "before must AUTH again", who, cfg->resp_password ? "changed" : "removed");
}

int reload_apply(struct reload *rl, const char *who, const struct reload_opts *opts,
                 struct reload_result *ret, char *errbuf, size_t errsize)
{
    static const struct reload_opts none = { 0 };
    struct config *cfg = NULL;
    struct rules *rules = NULL;
    struct published *p = NULL, *old;
    struct reload_settings now_set = { 0 };
    struct diag *diag;
    struct tables_log copied = { 0 };
    struct fastrules trusted = { 0 };
    struct tls_ctx *tls = NULL;
    uint64_t gen;
    bool move, wrote = false;
    int r;

    if (!opts)
        opts = &none;
    diag = malloc(sizeof(*diag));
    if (!diag)
        return -ENOMEM;
    diag_init(diag);
    pthread_mutex_lock(&rl->lock);
    gen = generation_at_least(rl->next_generation);
    r = config_load_edit(rl->config_path, opts->edit, &cfg, diag);
    if (r >= 0)
        r = rules_compile(&cfg->rules, gen, &rules, diag);
    if (r >= 0)
        r = reload_settings_take(cfg, &now_set);
    if (r >= 0)
        r = reload_diff(rl->current->st.rules, rules, &rl->settings, &now_set, &ret->diff);
    /* A new certificate is read and checked now (a dry run too); it goes in
     * with the rules, or not at all, and the old one stays. */
    if (r >= 0 && rl->tls)
        r = reload_tls(cfg, &tls, diag);
    else if (r >= 0 && cfg->tls.line)
        log_msg(LOG_WARNING, "reload (%s): %s:%u: server.tls is new: it applies at the next "
                "start (with a tls: listener)", who, cfg->path, cfg->tls.line);
    if (r >= 0 && opts->dry_run) {
        ret->generation = rl->current->st.generation;
        ret->rules = rules_count(rules);
        log_msg(LOG_INFO, "reload dry run (%s): %zu rules from %s; %zu added, %zu removed, "
                "%zu changed, %zu settings need a restart; nothing applied", who, ret->rules,
                rl->config_path, ret->diff.added, ret->diff.removed, ret->diff.changed,
                ret->diff.restart);
        goto out;
    }
    if (r >= 0 && !(p = calloc(1, sizeof(*p))))
        r = -ENOMEM;
    if (r >= 0 && (r = write_rules_file(rl, rules, gen)) < 0)
        diag_set(diag, rl->state_dir, 0, "cannot write rules.%llu: %s", (unsigned long long)gen,
                 strerror(-r));
    else if (r >= 0)
        wrote = true;
    /* The drop-in lands only once everything else is ready, and the rules
     * that include it are published right after. */
    if (r >= 0 && opts->edit &&
        (r = config_dropin_write(cfg->include_dir, opts->edit->name, opts->edit->text,
                                 opts->edit->len)) < 0)
        diag_set(diag, cfg->include_dir, 0, "cannot write drop-in %s: %s", opts->edit->name,
                 strerror(-r));
    if (r < 0) {
        if (wrote)
            remove_old_rules_files(rl, rl->current->st.generation);
        reject(rl, who, diag, r, gen, opts->dry_run, errbuf, errsize);
        goto out;
    }
    /*
     * Counters of rules that change table (fast_path, source) move in two
     * passes (docs/daemon.md "Counter tables"): copied before the new rules
     * are published, so the first hit under them finds its counter; moved
     * again (merged, then removed from the old table) after a grace period,
     * when no daemon thread can still decide under the previous rules (a
     * fast-path client's hit in flight across the swap is the documented
     * exception).
     */
    /* Only a reload that changes some rule's table walks the tables (at
     * start they always are: the last run's config is unknown). */
    move = rl->have_tables && tables_changed(&rl->tables, rl->current->st.rules, rules) != 0;
    /* A fast-table counter leaves it only for a rule that was fast_path
     * under the rules it was written under, the current ones (fastrules.h);
     * out of memory, none does.  Their record (fast.rules) goes until the
     * new rules' is written: a crash in between trusts none at the next
     * start, rather than rules that may no longer be fast_path. */
    if (move && tables_fast_rules(&rl->tables, rl->current->st.rules,
                                  rl->current->st.generation, &trusted) < 0)
        log_msg(LOG_ERR, "reload (%s): out of memory: no counter leaves the fast-path table",
                who);
    if (rl->have_tables)
        fastrules_forget(rl->state_dir);
    if (move)
        tables_settle(&rl->tables, rules, &trusted, false, &copied, who);
    p->st.rules = rules;
    p->st.generation = gen;
    rules = NULL;
    /* Described before they decide anything (the log's order). */
    if (rl->rules_fn)
        rl->rules_fn(rl->rules_arg, p->st.rules, gen);
    old = rcu_xchg_pointer(&rl->current, p);
    if (tls) {
        tls_install(rl->tls, tls);
        tls = NULL;
    }
    /* The file is complete before the generation that names it is visible. */
    table_set_generation(rl->fast, gen);
    remove_old_rules_files(rl, gen);
    if (rl->have_tables)
        record_fast_rules(rl, p->st.rules, gen);
    if (move) {
        urcu_memb_synchronize_rcu();
        if (tables_settle(&rl->tables, p->st.rules, &trusted, true, &copied, who) < 0)
            log_msg(LOG_ERR, "reload (%s): out of memory moving counters between tables; "
                    "those of the private tables move at the next reload or start, those of "
                    "the fast table stay there and expire", who);
    }
    rl->next_generation = gen + 1;
    rl->n_ok++;
    ret->applied = true;
    ret->generation = gen;
    ret->rules = rules_count(p->st.rules);
    log_msg(LOG_NOTICE, "reload (%s): generation %llu, %zu rules from %s: %zu added, "
            "%zu removed, %zu changed", who, (unsigned long long)gen, ret->rules,
            rl->config_path, ret->diff.added, ret->diff.removed, ret->diff.changed);
    log_changes(rl, who, &ret->diff);
    log_notes(cfg, p->st.rules, who);
    reload_resp_password(cfg, who);
    p = NULL;
    if (old)
        urcu_memb_call_rcu(&old->rcu, published_free_rcu);
out:
    pthread_mutex_unlock(&rl->lock);
    tables_log_free(&copied);
    fastrules_free(&trusted);
    reload_settings_free(&now_set);
    published_free(p);
    rules_free(rules);
    tls_ctx_free(tls);
    config_free(cfg);
    free(diag);
    return r;
}

void reload_result_free(struct reload_result *res)
{
    reload_diff_free(&res->diff);
}

const char *reload_config_path(const struct reload *rl)
{
    return rl->config_path;
}

void reload_counts(struct reload *rl, uint64_t *ret_ok, uint64_t *ret_rejected)
{
    pthread_mutex_lock(&rl->lock);
    *ret_ok = rl->n_ok;
    *ret_rejected = rl->n_rejected;
    pthread_mutex_unlock(&rl->lock);
}
