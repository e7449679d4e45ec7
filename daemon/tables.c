/* SPDX-License-Identifier: MIT */
/*
 * tables: carrying counters to the table a rule now uses (see tables.h).
 * A reload that toggles a rule's fast_path or source would otherwise leave
 * every counter of the rule behind in the table it used before, and every
 * actor would start afresh.  The rules are indexed by id once; each table
 * is then walked once per other table with table_move(), which decides per
 * counter through move_pick().  docs/daemon.md "Counter tables" says how the
 * two passes of a reload bound what racing hits can change.  What a slot of
 * the fast table says is only what some divvy-fast member may have written:
 * move_pick() lets it out only for a rule of the trusted set (fastrules.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <syslog.h>

#include "clock.h"
#include "eval.h"
#include "log.h"
#include "tables.h"

/* What a rule id says, for move_pick(). */
struct move_rule {
    uint64_t id;
    struct table *table;        /* where its counters belong now */
    struct table_limits lim;
};

struct move_ctx {
    struct move_rule *rules;    /* sorted by id */
    size_t n;
    const struct table *fast;
    const struct table *privileged;
    const struct fastrules *trusted;    /* may leave the fast table; NULL: none */
    bool from_fast;             /* the walk is over the fast table */
    uint64_t untrusted;         /* fast-table counters kept there: not trusted to leave */
};

static int move_rule_cmp(const void *a, const void *b)
{
    const struct move_rule *x = a, *y = b;

    return x->id < y->id ? -1 : x->id > y->id;
}

static struct table *move_pick(uint64_t rule_id, enum rules_algo algo, void *arg,
                               struct table_limits *ret_lim)
{
    struct move_ctx *ctx = arg;
    struct move_rule key = { .id = rule_id };
    const struct move_rule *m;

    m = bsearch(&key, ctx->rules, ctx->n, sizeof(*m), move_rule_cmp);
    /* A counter whose rule is gone, or whose algorithm changed (a new key),
     * stays where it is and expires there. */
    if (!m || m->lim.algo != algo)
        return NULL;
    if (ctx->from_fast && m->table != ctx->fast) {
        /* Any fast-group member can write the fast table's slots, so nothing
         * of it ever becomes a login counter: a rule that goes from
         * fast_path to source = privileged starts afresh there
         * (docs/daemon.md).  Nor does a slot leave it for a rule that was
         * not fast_path (with this algorithm) in the generation that owned
         * it: the member could plant it with any state for any rule id,
         * and here it would become a counter members cannot touch. */
        if (m->table == ctx->privileged)
            return NULL;
        if (!fastrules_has(ctx->trusted, rule_id, algo)) {
            ctx->untrusted++;
            return NULL;
        }
    }
    *ret_lim = m->lim;
    return m->table;
}

static const char *table_name(const struct tables *tb, const struct table *t)
{
    return t == tb->fast ? "fast" : t == tb->privileged ? "privileged" : "private";
}

/* Indexes the rules of @rules that keep counters by id (sorted), each with
 * its table and limits.  0 or -ENOMEM. */
static int index_rules(const struct tables *tb, const struct rules *rules, struct move_ctx *ret)
{
    struct eval_env env = { .rules = rules, .fast = tb->fast, .priv = tb->priv,
                            .privileged = tb->privileged };
    size_t n = rules_count(rules);

    ret->n = 0;
    ret->rules = calloc(n ? n : 1, sizeof(*ret->rules));
    if (!ret->rules)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        struct rules_rule rr;
        struct eval_outcome o;

        /* Zero semantics keep no counter (eval_zero()). */
        if (rules_get(rules, i, &rr) < 0 || eval_zero(&rr, &o))
            continue;
        ret->rules[ret->n].id = rr.id;
        ret->rules[ret->n].table = eval_table(&env, &rr);
        eval_limits(&rr, &ret->rules[ret->n].lim);
        ret->n++;
    }
    qsort(ret->rules, ret->n, sizeof(*ret->rules), move_rule_cmp);
    return 0;
}

int tables_changed(const struct tables *tb, const struct rules *old, const struct rules *rules)
{
    struct move_ctx a = { 0 }, b = { 0 };
    int r;

    r = index_rules(tb, old, &a);
    if (r >= 0)
        r = index_rules(tb, rules, &b);
    if (r < 0)
        goto out;
    r = 0;
    for (size_t i = 0; i < b.n && !r; i++) {
        const struct move_rule *m = bsearch(&b.rules[i], a.rules, a.n, sizeof(*a.rules),
                                            move_rule_cmp);

        r = m && m->table != b.rules[i].table && m->lim.algo == b.rules[i].lim.algo;
    }
out:
    free(a.rules);
    free(b.rules);
    return r;
}

int tables_fast_rules(const struct tables *tb, const struct rules *rules, uint64_t generation,
                      struct fastrules *ret)
{
    struct move_ctx ctx = { 0 };
    struct fastrules fr = { .generation = generation };
    int r;

    r = index_rules(tb, rules, &ctx);
    for (size_t i = 0; r >= 0 && i < ctx.n; i++)
        if (tb->fast && ctx.rules[i].table == tb->fast)
            r = fastrules_add(&fr, ctx.rules[i].id, ctx.rules[i].lim.algo);
    free(ctx.rules);
    if (r < 0) {
        fastrules_free(&fr);
        return r;
    }
    fastrules_sort(&fr);
    *ret = fr;
    return 0;
}

int tables_settle(const struct tables *tb, const struct rules *rules,
                  const struct fastrules *trusted, bool remove, struct tables_log *log,
                  const char *who)
{
    struct table *all[3] = { tb->fast, tb->priv, tb->privileged };
    struct move_ctx ctx = { 0 };
    uint64_t now = clock_now_ms();
    int r;

    r = index_rules(tb, rules, &ctx);
    if (r < 0)
        return r;
    ctx.fast = tb->fast;
    ctx.privileged = tb->privileged;
    ctx.trusted = trusted;
    for (size_t f = 0; f < 3; f++) {
        struct table_move_stats st;

        if (!all[f])
            continue;
        ctx.from_fast = all[f] == tb->fast;
        r = table_move(all[f], remove, move_pick, &ctx, log ? &log->t[f] : NULL, now, &st);
        if (r < 0)
            goto out;
        if (st.moved && remove)
            log_msg(LOG_NOTICE, "%s: %llu counters moved out of the %s table (%llu merged with "
                    "a counter already in their new table)", who, (unsigned long long)st.moved,
                    table_name(tb, all[f]), (unsigned long long)st.merged);
        if ((st.digest || st.full) && remove)
            log_msg(LOG_WARNING, "%s: %llu counters of actors over 32 bytes (digested with "
                    "another key) and %llu that found their new table full stay in the %s "
                    "table: those actors start afresh", who, (unsigned long long)st.digest,
                    (unsigned long long)st.full, table_name(tb, all[f]));
    }
    if (ctx.untrusted && remove)
        log_msg(LOG_WARNING, "%s: %llu counters in the fast table name rules that were not "
                "fast_path when it was written (a divvy-fast member's, or left behind by "
                "an earlier move): they stay there, unused, and expire", who,
                (unsigned long long)ctx.untrusted);
out:
    free(ctx.rules);
    return r;
}

void tables_log_free(struct tables_log *log)
{
    if (!log)
        return;
    for (size_t i = 0; i < 3; i++)
        table_move_log_free(&log->t[i]);
}
