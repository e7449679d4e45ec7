/* SPDX-License-Identifier: MIT */
/*
 * client_fast: libdivvy's shared-memory fast path (DESIGN section 5,
 * docs/dev/shm.md, docs/client.md).  Maps the table memfd divvyd hands over
 * (client_handoff.c) read-write and its control page read-only, loads the
 * immutable rules.<generation> file the control page names, then decides a hit
 * in the caller's process with the daemon's own code (eval_walk(), the rule
 * walk of eval_request(), with a step of its own: fast_step()) when every
 * rule on the request's path is fast_path or touches no counter.
 *
 * The steady state makes no system call and no allocation: one acquire load
 * of the generation, one of the heartbeat, clock_coarse_ms() (vDSO), the
 * match and the table's compare-and-swap.  A new generation is loaded with
 * open/read/close and checked by rules_from_blob() before use; generation 0
 * or one smaller than the last loaded means "no rules" (the socket answers);
 * a stale heartbeat (the daemon is gone, or restarted with a new control
 * page) sends hits to the socket and asks divvyd for the memfds again at
 * most once a second.  Owns a struct client_fast (client_fast.h); knows
 * neither the memo above it nor the handle.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_fast.h"
#include "clock.h"
#include "eval.h"
#include "hash.h"

/* Hits are counted in the table in batches: one shared atomic add per
 * CLIENT_HITS_BATCH hits, not one per hit. */
#define CLIENT_HITS_BATCH 1024

_Static_assert(sizeof(((struct client_rule *)0)->id) == sizeof(((struct divvy_result *)0)->rule),
               "a rule's id is copied whole into a result");

/* The counts of every rule decided here since the last flush, per outcome. */
static void flush_rules(struct client_fast *f)
{
    for (size_t i = 0; i < f->n_dirty; i++) {
        struct client_rule *cr = &f->rule[f->dirty[i]];

        if (f->table)
            table_add_fast_rule(f->table, cr->rr.id, cr->fast_n);
        memset(cr->fast_n, 0, sizeof(cr->fast_n));
        cr->dirty = false;
    }
    f->n_dirty = 0;
}

static void flush_hits(struct client_fast *f)
{
    if (f->table && f->unflushed_hits) {
        table_add_fast_hits(f->table, f->unflushed_hits);
        f->unflushed_hits = 0;
    }
    flush_rules(f);
}

/* One outcome @k of rule @idx, in this process's memory until the flush. */
static inline void count_rule(struct client_fast *f, uint32_t idx, enum table_fast_outcome k)
{
    struct client_rule *cr = &f->rule[idx];

    cr->fast_n[k]++;
    if (!cr->dirty) {
        cr->dirty = true;
        f->dirty[f->n_dirty++] = idx;
    }
}

/* A decided TAKE as divvyd's metrics count a socket hit (hit.c count_outcomes()):
 * every canary rule, every rule that charged on the way, and the decider. */
static inline void count_rules(struct client_fast *f, const struct eval_result *er,
                               size_t n_rules)
{
    /* Most paths are one rule: only the decider. */
    for (unsigned i = 0; i < er->n && (er->n > 1 || er->o[0].canary); i++) {
        const struct eval_outcome *o = &er->o[i];

        if (o->rule >= n_rules)
            continue;
        if (o->canary)
            count_rule(f, o->rule, o->allowed ? TABLE_FAST_CANARY_ACCEPTED
                                              : TABLE_FAST_CANARY_REJECTED);
        else if (o->rule != er->decider && o->allowed && o->counted)
            count_rule(f, o->rule, TABLE_FAST_ACCEPTED);
    }
    count_rule(f, er->decider, er->allowed ? TABLE_FAST_ACCEPTED : TABLE_FAST_REJECTED);
}

void client_fast_close(struct client_fast *f)
{
    client_report_flush(&f->report);
    f->report_on = table_decision_log_word(NULL);
    flush_hits(f);
    table_close(f->table);
    f->table = NULL;
    rules_free(f->rules);
    f->rules = NULL;
    free(f->rule);
    f->rule = NULL;
    f->n_rules = 0;
    free(f->dirty);
    f->dirty = NULL;
    f->gen = 0;
}

/* Reads a whole rules file; its size must not change while we read it. */
static int read_rules_file(const char *path, void **ret, size_t *ret_len)
{
    struct stat st;
    size_t off = 0, len;
    char *buf = NULL;
    int fd, r = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    if (!S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (unsigned long long)st.st_size > CLIENT_RULES_FILE_MAX) {
        r = -EBADMSG;
        goto out;
    }
    len = (size_t)st.st_size;
    buf = malloc(len);
    if (!buf) {
        r = -ENOMEM;
        goto out;
    }
    while (off < len) {
        ssize_t n = read(fd, buf + off, len - off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = n < 0 ? -errno : -EBADMSG;
            goto out;
        }
        off += (size_t)n;
    }
    *ret = buf;
    *ret_len = len;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return r;
}

/*
 * Loads rules.<@gen> (or a later generation, if the daemon published one and
 * removed @gen's file meanwhile) and swaps it in with its per-rule table.
 * On failure the old rules stay loaded but f->gen no longer matches the
 * header, so they are never used.
 */
static int remap(struct client_fast *f, uint64_t gen)
{
    struct client_rule *rule = NULL;
    struct rules *rules = NULL;
    uint32_t *dirty = NULL;
    char path[PATH_MAX];
    void *data = NULL;
    size_t len = 0, n;
    uint64_t lease_max;
    int r = -ENOENT;

    for (int tries = 0; tries < CLIENT_REMAP_TRIES; tries++) {
        uint64_t now_gen;

        if (gen == 0 || gen < f->max_gen)
            return client_err(f->err, -ENOENT, "divvyd announces no rules for the fast path "
                              "(generation %llu)", (unsigned long long)gen);
        if (snprintf(path, sizeof(path), "%s/rules.%llu", f->dir, (unsigned long long)gen) >=
            (int)sizeof(path))
            return client_err(f->err, -ENAMETOOLONG, "%s: path too long", f->dir);
        r = read_rules_file(path, &data, &len);
        if (r != -ENOENT)
            break;
        /* Replaced between our load of the generation and the open. */
        now_gen = table_generation(f->table);
        if (now_gen == gen)
            break;
        gen = now_gen;
    }
    if (r < 0) {
        client_err(f->err, r, "%s: %s", path, strerror(-r));
        goto out;
    }
    r = rules_from_blob(data, len, &rules);
    if (r < 0) {
        client_err(f->err, r, "%s: %s", path,
                   r == -EBADMSG ? "not a valid compiled rule table" : strerror(-r));
        goto out;
    }
    if (rules_generation(rules) != gen) {
        r = client_err(f->err, -EBADMSG, "%s holds generation %llu", path,
                       (unsigned long long)rules_generation(rules));
        goto out;
    }
    n = rules_count(rules);
    lease_max = table_lease_max(f->table);
    if (lease_max > TABLE_LEASE_MAX)
        lease_max = TABLE_LEASE_MAX;
    rule = calloc(n ? n : 1, sizeof(*rule));
    dirty = calloc(n ? n : 1, sizeof(*dirty));
    if (!rule || !dirty) {
        r = client_err(f->err, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        struct rules_rule rr;

        if (rules_get(rules, (uint32_t)i, &rr) < 0) {
            r = client_err(f->err, -EBADMSG, "%s: rule %zu unreadable", path, i);
            goto out;
        }
        rule[i].rr = rr;
        eval_limits(&rr, &rule[i].lim);
        rule[i].id_str = rr.id_str;
        memcpy(rule[i].id, rr.id_str, strnlen(rr.id_str, DIVVY_RULE_MAX - 1));
        /* Decidable here: a fast_path counter in the host table (local, or a
         * lease spent here), or divvy's zero semantics, which touch no
         * counter.  Never a privileged rule, never a strict one (docs/client.md). */
        /* A lease rule is spent here with divvyd's own lease_max (announced
         * in the table header; 0 from an older daemon: not here). */
        rule[i].lease = rr.store == RULES_STORE_LEASE && rr.fast_path && lease_max > 0 &&
                        rr.algo == RULES_ALGO_WINDOW && rr.credit_limit > 0 &&
                        (uint64_t)rr.credit_limit <= TABLE_LEASE_MAX;
        if (rule[i].lease) {
            rule[i].lim.lease = true;
            rule[i].lim.lease_max = lease_max;
        }
        /* divvy's zero semantics touch no counter, in any store (as in divvyd). */
        rule[i].eligible = rr.source != RULES_SOURCE_PRIVILEGED &&
                           ((rr.fast_path && (rr.store == RULES_STORE_LOCAL || rule[i].lease)) ||
                            rr.credit_limit == 0 ||
                            (rr.reset_ms == 0 && rr.algo != RULES_ALGO_TOKEN_BUCKET &&
                             rr.algo != RULES_ALGO_GCRA));
    }
    /* The old rules' counts first: the indexes change with the rules; and
     * the reports, which name the old rules (divvyd checks them against the
     * new ones: a rule a reload kept keeps its id, docs/rules.md "Identity"). */
    flush_rules(f);
    client_report_flush(&f->report);
    rules_free(f->rules);
    free(f->rule);
    free(f->dirty);
    f->rules = rules;
    f->rule = rule;
    f->n_rules = n;
    f->dirty = dirty;
    f->gen = gen;
    if (gen > f->max_gen)
        f->max_gen = gen;
    f->loads++;
    rules = NULL;                       /* the handle owns them now */
    rule = NULL;
    dirty = NULL;
    r = 0;
out:
    free(data);
    free(dirty);
    free(rule);
    rules_free(rules);
    return r;
}

/*
 * Asks divvyd for the memfds (client_handoff.c) and maps them: the table
 * read-write, the control page read-only.  Every size, seal and header word
 * is checked first (table_attach_fd(), table_ctl_attach()).
 */
static int attach(struct client_fast *f, struct table **ret)
{
    struct table *t = NULL;
    char dir[sizeof(f->dir)], why[160] = "";
    int tfd = -1, cfd = -1, r;

    r = client_handoff_fast(f->conn, &tfd, &cfd, dir, sizeof(dir));
    if (r < 0)
        return r;
    r = table_attach_fd(tfd, 0, &t, why, sizeof(why));
    if (r < 0) {
        close(tfd);
        close(cfd);
        return client_err(f->err, r, "cannot map the fast-path table: %s",
                          r == -EBADMSG ? why : strerror(-r));
    }
    r = table_ctl_attach(t, cfd);
    if (r < 0) {
        close(cfd);
        table_close(t);
        return client_err(f->err, r, "cannot map the fast path's control page: %s",
                          r == -EBADMSG ? "not a sealed control page of this boot"
                                        : strerror(-r));
    }
    memcpy(f->dir, dir, sizeof(dir));
    *ret = t;
    return 0;
}

/* A new mapping replaces the old: keys prepared for the old one are void
 * (they depend on its secret and size), so the rules are loaded afresh. */
static void use_table(struct client_fast *f, struct table *t)
{
    flush_hits(f);
    client_report_flush(&f->report);
    table_close(f->table);
    f->table = t;
    f->report_on = table_decision_log_word(t);
    f->report.conn = f->conn;
    f->gen = 0;
}

int client_fast_open(struct client_fast *f)
{
    struct table *t = NULL;
    int r;

    if (!f->table) {
        r = attach(f, &t);
        if (r < 0)
            return r;
        use_table(f, t);
    }
    /* remap() refuses generation 0 or one older than the last loaded. */
    return remap(f, table_generation(f->table));
}

/*
 * The heartbeat went stale: the daemon stopped, or a restarted daemon made
 * a new control page.  Ask for the memfds anew (at most once a second); use
 * them only when their heartbeat is fresh.
 */
static bool reattach(struct client_fast *f, uint64_t now)
{
    struct table *t = NULL;

    if (now < f->attach_at_ms)
        return false;
    f->attach_at_ms = now + CLIENT_REATTACH_MS;
    if (attach(f, &t) < 0)
        return false;
    if (table_last_heartbeat(t) + CLIENT_STALE_MS < now) {
        table_close(t);
        return false;
    }
    use_table(f, t);
    return true;
}

int client_fast_ready(struct client_fast *f, uint64_t now, const char **ret_why)
{
    uint64_t gen;
    int r;

    if (!f->table) {
        if (!f->auto_attach || now < f->attach_at_ms) {
            *ret_why = "the fast-path table is not mapped";
            return 0;
        }
        /* The daemon may have started since: try again, once a second. */
        f->attach_at_ms = now + CLIENT_REATTACH_MS;
        if (client_fast_open(f) < 0 || !f->table) {
            *ret_why = "the fast-path table is not mapped";
            return 0;
        }
    }
    /* The daemon's clock is CLOCK_MONOTONIC, ours the coarse one (a tick behind). */
    if (table_last_heartbeat(f->table) + CLIENT_STALE_MS < now && !reattach(f, now)) {
        *ret_why = "divvyd's heartbeat in the fast-path control page is stale";
        return 0;
    }
    gen = table_generation(f->table);
    /* f->gen 0: no rules loaded (never a generation divvyd publishes). */
    if (gen != f->gen || gen == 0) {
        /* Generations only grow: 0 or a smaller one is no rules at all. */
        if (gen == 0 || gen < f->max_gen) {
            *ret_why = "divvyd announces no rules for the fast path";
            return 0;
        }
        if (gen == f->remap_failed_gen && now < f->remap_at_ms) {
            *ret_why = "the current rules file could not be loaded";
            return 0;
        }
        r = remap(f, gen);
        if (r < 0) {
            f->remap_failed_gen = gen;
            f->remap_at_ms = now + CLIENT_REMAP_RETRY_MS;
            *ret_why = "the current rules file could not be loaded";
            return 0;
        }
    }
    return 1;
}

bool client_fast_path_ok(const struct client_fast *f, const uint32_t *path, size_t n_path,
                         enum table_op op)
{
    size_t n_rules = f->n_rules;
    bool counted = false;

    for (size_t i = 0; i < n_path; i++) {
        const struct client_rule *cr;

        if (path[i] >= n_rules)
            return false;
        cr = &f->rule[path[i]];
        if (!cr->eligible || (cr->lease && (op != TABLE_TAKE || counted)))
            return false;
        if (!eval_zero(&cr->rr, &(struct eval_outcome){ 0 }))
            counted = true;
    }
    return true;
}

/*
 * Asks divvyd to refill the lease of rule @idx's counter @actor (REFILL,
 * docs/protocol.md), at most once per CLIENT_HINT_MS per counter.  One
 * send(), no reply: the only system call a fast-path hit may make, once per
 * lease.
 */
static void refill_hint(struct client_fast *f, const struct client_rule *cr, uint32_t idx,
                        const char *actor, size_t len, uint64_t now)
{
    uint64_t k = hash_fast(cr->rr.id, actor, len) | 1;
    unsigned slot = (unsigned)(k % CLIENT_HINT_SLOTS);
    char line[PROTO_LINE_MAX + 1];
    int n, m;

    if (f->hint_key[slot] == k && now < f->hint_until[slot])
        return;
    f->hint_key[slot] = k;
    f->hint_until[slot] = now + CLIENT_HINT_MS;
    n = snprintf(line, sizeof(line), "REFILL rule=%s index=%u actor=", cr->id_str, idx);
    if (n < 0 || (size_t)n >= sizeof(line))
        return;
    m = proto_fmt_string(line + n, sizeof(line) - (size_t)n, actor, len);
    if (m < 0 || (size_t)(n + m) >= PROTO_LINE_MAX)
        return;
    n += m;
    line[n++] = '\n';
    client_conn_hint(f->conn, line, (size_t)n);
}

/*
 * The prepared key of rule @cr's counter for @actor: the rule keeps the key
 * of its last actor (hot_kw), so a hot counter skips the keyed hash; an
 * actor too long to remember is prepared into @tmp.
 */
static const struct table_kw *rule_key(struct client_fast *f, struct client_rule *cr,
                                       const char *actor, size_t len, struct table_kw *tmp)
{
    struct table_key key = { .rule_id = cr->rr.id, .actor = actor, .actor_len = len };

    if (len > CLIENT_HOT_ACTOR_MAX) {
        table_key_prepare(f->table, &key, &cr->lim, tmp);
        return tmp;
    }
    if (!cr->hot_valid || cr->hot_len != len || memcmp(cr->hot_actor, actor, len) != 0) {
        table_key_prepare(f->table, &key, &cr->lim, &cr->hot_kw);
        memcpy(cr->hot_actor, actor, len);
        cr->hot_len = (uint8_t)len;
        cr->hot_valid = true;
    }
    return &cr->hot_kw;
}

void client_fast_prefetch(struct client_fast *f, const uint32_t *path, size_t n_path,
                          const struct proto_kv *const *actor_kv)
{
    size_t n_rules;

    if (!f->table || !f->rules)
        return;
    n_rules = f->n_rules;
    for (size_t i = 0; i < n_path; i++) {
        char buf[RULES_ACTOR_MAX];
        const char *actor = buf;
        struct client_rule *cr;
        struct eval_outcome o;
        struct table_kw tmp;
        int len;

        if (path[i] >= n_rules)
            return;
        cr = &f->rule[path[i]];
        /* Lease rules spend a lease slot, found by another key. */
        if (cr->lease || eval_zero(&cr->rr, &o))
            continue;
        len = rules_actor_ref(f->rules, path[i], actor_kv + i * RULES_ACTOR_KEYS_MAX, buf,
                              sizeof(buf), &actor);
        if (len >= 0)
            table_prefetch(f->table, rule_key(f, cr, actor, (size_t)len, &tmp));
    }
}

/* What the fast path's step needs besides the walk. */
struct fast_step {
    struct client_fast *f;
    const struct eval_env *env;
    const struct rules_req *rq;             /* the request, or NULL: ... */
    const struct proto_kv *const *actor_kv; /* ... the actor pairs of each rule on the path */
    uint64_t amount, now;
    size_t n_rules;
    const char **ret_why;
};

/*
 * The walk's step in-process: rule path[pos]'s outcome from its zero
 * semantics, this host's lease (a lease rule) or its fast-table counter,
 * with a prepared key.  EVAL_WAIT sends the hit to divvyd (*ret_why): a
 * lease that needs Redis, or a full table whose policy divvyd did not
 * announce.  A fast-path client never talks to Redis: below the low-water
 * mark it sends divvyd a REFILL hint and goes on spending.
 */
static int fast_step(void *ctx, const struct eval_walk *w, const struct rules_rule **ret_r,
                     struct eval_outcome *o)
{
    struct fast_step *fs = ctx;
    struct client_fast *f = fs->f;
    uint32_t idx = w->path[w->pos];
    char buf[RULES_ACTOR_MAX];
    const char *actor = buf;
    struct client_rule *cr;
    struct table_kw tmp;
    int len, r;

    if (idx >= fs->n_rules)
        return -EINVAL;
    cr = &f->rule[idx];
    *ret_r = &cr->rr;
    if (eval_zero(&cr->rr, o))
        return 0;
    len = fs->rq ? rules_actor(f->rules, idx, fs->rq, buf, sizeof(buf))
                 : rules_actor_ref(f->rules, idx, fs->actor_kv + w->pos * RULES_ACTOR_KEYS_MAX,
                                   buf, sizeof(buf), &actor);
    if (len < 0)
        return len;
    if (cr->lease) {
        struct table_key key = { .rule_id = cr->rr.id, .actor = actor,
                                 .actor_len = (size_t)len };
        struct table_lease_result lr;

        r = eval_lease(fs->env, &cr->rr, &cr->lim, &key, fs->amount, false, fs->now, o, &lr);
        if (r == 0 && o->counted && lr.refill)
            refill_hint(f, cr, idx, actor, (size_t)len, fs->now);
    } else {
        r = eval_rule_prepared(fs->env, &cr->rr, &cr->lim,
                               rule_key(f, cr, actor, (size_t)len, &tmp), w->op, fs->amount,
                               fs->now, o);
    }
    if (r == EVAL_WAIT)
        *fs->ret_why = o->table_full ? "the fast-path table is full" : "the lease needs divvyd";
    else if (r == 0 && o->table_full)
        table_add_fast_full(f->table);
    return r;
}

/* One decision taken here, for divvyd's decision log (docs/client.md
 * "Reported decisions"): the answer as the caller got it. */
static void report(struct client_fast *f, enum table_op op, uint64_t amount, uint64_t now,
                   const struct eval_result *er, const struct client_rule *cr,
                   const struct proto_kv *pairs, size_t n_pairs)
{
    struct proto_report r = {
        .mono_ms = now, .credit = er->credit, .reset_s = er->reset_s, .rule_id = cr->rr.id,
        .op = op == TABLE_PEEK ? PROTO_PEEK : op == TABLE_DEBIT ? PROTO_DEBIT : PROTO_TAKE,
        .allowed = er->allowed,
    };

    client_report_add(&f->report, &r, amount, pairs, (unsigned)n_pairs);
}

void client_fast_report_tick(struct client_fast *f)
{
    if (f->report.n)
        client_report_tick(&f->report, clock_coarse_ms());
}

/*
 * Decides along @path with the daemon's own walk (eval_walk()) and
 * fast_step(); the callers checked the path with client_fast_path_ok().
 */
int client_fast_run(struct client_fast *f, const uint32_t *path, size_t n_path,
                    const struct rules_req *rq, const struct proto_kv *const *actor_kv,
                    const struct proto_kv *pairs, size_t n_pairs, enum table_op op,
                    uint64_t amount, uint64_t now, struct divvy_result *res,
                    const char **ret_why)
{
    /* A full table is answered with the daemon's announced when_full, as
     * divvyd would; an older divvyd announces none: it decides. */
    struct eval_env env = { .rules = f->rules, .fast = f->table, .full_from = f->table };
    struct fast_step fs = { .f = f, .env = &env, .rq = rq, .actor_kv = actor_kv,
                            .amount = amount, .now = now, .n_rules = f->n_rules,
                            .ret_why = ret_why };
    struct eval_result er;
    struct eval_walk w = { .path = path, .n_path = n_path, .op = op, .res = &er };
    const struct client_rule *cr;
    struct rules_rule over;
    int r;

    /* A DEBIT above a rule's max_debit charges nothing: divvyd refuses it
     * with its reason (and knows an admin peer, who may). */
    if (op == TABLE_DEBIT &&
        eval_debit_check(f->rules, path, n_path, amount, f->privileged, &over) < 0) {
        *ret_why = "a DEBIT above a rule's max_debit is divvyd's to answer";
        return 0;
    }
    er.n = 0;
    er.n_reset = 0;
    r = eval_walk(&w, fast_step, &fs);
    if (r == 0)
        return 0;                       /* fast_step() said why */
    if (r < 0 || er.decider >= fs.n_rules || er.limiter >= fs.n_rules) {
        *ret_why = "the fast-path table could not decide";
        return 0;
    }
    /* Named: the rule whose credit the result shows (a tighter continue rule's). */
    cr = &f->rule[er.limiter];
    res->allowed = er.allowed;
    res->credit = er.credit;
    res->reset_seconds = er.reset_s;
    memcpy(res->rule, cr->id, sizeof(res->rule));
    res->fast_path = 1;
    if (op == TABLE_TAKE) {
        count_rules(f, &er, fs.n_rules);
        if (++f->unflushed_hits >= CLIENT_HITS_BATCH)
            flush_hits(f);
    }
    /* Off (the common case): one load of a word on the line the generation
     * was read from, and one branch. */
    if (__builtin_expect(__atomic_load_n(f->report_on, __ATOMIC_RELAXED) != 0, 0))
        report(f, op, amount, now, &er, cr, pairs, n_pairs);
    return 1;
}

int client_fast_decide(struct client_fast *f, const struct client_req *req, enum table_op op,
                       uint64_t amount, struct divvy_result *res, uint32_t *ret_path,
                       size_t *ret_n_path, const char **ret_why)
{
    struct rules_req rq = { .kv = req->kv, .n_kv = req->n_kv, .privileged = f->privileged };
    uint64_t now = clock_coarse_ms();
    size_t n_path;
    int r;

    if (!client_fast_ready(f, now, ret_why))
        return 0;
    /*
     * Every rule on the path must be decidable here before any counter is
     * touched.
     */
    n_path = rules_match(f->rules, &rq, ret_path);
    if (!client_fast_path_ok(f, ret_path, n_path, op)) {
        *ret_why = "a rule on the request's path is not fast_path";
        return 0;
    }
    r = client_fast_run(f, ret_path, n_path, &rq, NULL, req->kv, req->n_kv, op, amount, now,
                        res, ret_why);
    if (r > 0)
        *ret_n_path = n_path;
    return r;
}
