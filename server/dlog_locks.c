/* SPDX-License-Identifier: MIT */
/*
 * dlog_locks: lock periods from a decision log (server/dlog_locks.h).
 * What a lockout rule's answers say (docs/rules.md "Lockout",
 * common/algo_lock.c): an allowed TAKE is a failure counted, and the one
 * that answers credit 0 locked the counter for its reset seconds; a
 * refusal with credit 0 and a reset is a lock still running (a refusal
 * with credit left is a delay, or more failures than are left, not a
 * lock); a RESET whose answer of the rule has credit forgot the counter.
 * Owns one state per (rule, actor) followed and the periods found.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dlog_locks.h"
#include "table.h"

#define NO_PERIOD SIZE_MAX

/* One (rule, actor) followed. */
struct lstate {
    uint64_t rule_id;
    uint64_t interval_end_ms;   /* the running counting interval's end (unix ms) */
    uint64_t pending;           /* failures counted in it, not yet in a lock */
    size_t period;              /* its running lock's index in periods, or NO_PERIOD */
    size_t actor_len;
    char actor[];
};

struct dlog_locks {
    const char *rule, *actor;   /* the filters, borrowed */
    struct lstate **slot;       /* open addressing; a power of two */
    size_t cap, n;
    struct dlog_locks_period *periods;
    size_t n_periods, cap_periods;
    size_t bytes;               /* actor strings held, states' and periods' */
    uint64_t dropped;
    /* Events waiting for the reorder window (a min-heap by time, then file order). */
    struct lev **heap;
    size_t n_heap, cap_heap;
    size_t heap_bytes;
    uint64_t seq;
    uint64_t max_t;             /* the latest decision time seen */
};

struct dlog_locks *dlog_locks_new(const char *rule, const char *actor)
{
    struct dlog_locks *l = calloc(1, sizeof(*l));

    if (!l)
        return NULL;
    l->rule = rule;
    l->actor = actor;
    l->cap = 256;
    l->slot = calloc(l->cap, sizeof(*l->slot));
    if (!l->slot) {
        free(l);
        return NULL;
    }
    return l;
}

void dlog_locks_free(struct dlog_locks *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n_heap; i++)
        free(l->heap[i]);
    free(l->heap);
    for (size_t i = 0; i < l->cap; i++)
        free(l->slot[i]);
    for (size_t i = 0; i < l->n_periods; i++)
        free((char *)l->periods[i].actor);
    free(l->periods);
    free(l->slot);
    free(l);
}

uint64_t dlog_locks_dropped(const struct dlog_locks *l)
{
    return l->dropped;
}

const char *dlog_locks_end_name(enum dlog_locks_end e)
{
    switch (e) {
    case DLOG_LOCKS_EXPIRED: return "expired";
    case DLOG_LOCKS_UNLOCKED: return "unlocked";
    case DLOG_LOCKS_OPEN: return "open";
    }
    return "?";
}

/* ---- states ----------------------------------------------------------------------------- */

static size_t key_hash(uint64_t rule_id, const char *actor, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull ^ rule_id;

    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)actor[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    return (size_t)h;
}

static size_t find_slot(struct lstate *const *slot, size_t cap, uint64_t rule_id,
                        const char *actor, size_t len)
{
    size_t i = key_hash(rule_id, actor, len) & (cap - 1);

    while (slot[i] && (slot[i]->rule_id != rule_id || slot[i]->actor_len != len ||
                       memcmp(slot[i]->actor, actor, len) != 0))
        i = (i + 1) & (cap - 1);
    return i;
}

/* Rehashes into @cap slots, keeping the states @keep says (NULL: all). */
static int rehash(struct dlog_locks *l, size_t cap, uint64_t now_ms)
{
    struct lstate **slot = calloc(cap, sizeof(*slot));
    size_t n = 0;

    if (!slot)
        return -ENOMEM;
    for (size_t i = 0; i < l->cap; i++) {
        struct lstate *s = l->slot[i];

        if (!s)
            continue;
        /* Nothing left to know about: no lock running, no failure pending. */
        if (now_ms && s->period == NO_PERIOD &&
            (s->pending == 0 || s->interval_end_ms <= now_ms)) {
            l->bytes -= s->actor_len + 1;
            free(s);
            continue;
        }
        slot[find_slot(slot, cap, s->rule_id, s->actor, s->actor_len)] = s;
        n++;
    }
    free(l->slot);
    l->slot = slot;
    l->cap = cap;
    l->n = n;
    return 0;
}

/* The state of (@rule_id, @actor): found, or made when @create; NULL when
 * not (absent, or no room: counted in dropped). */
static struct lstate *state_get(struct dlog_locks *l, uint64_t rule_id, const char *actor,
                                size_t len, bool create, uint64_t now_ms, int *reterr)
{
    struct lstate *s;
    size_t i = find_slot(l->slot, l->cap, rule_id, actor, len);

    if (l->slot[i] || !create)
        return l->slot[i];
    if (l->n >= DLOG_LOCKS_ACTORS_MAX || l->bytes + len + 1 > DLOG_LOCKS_BYTES_MAX) {
        /* Forget the states that hold nothing before refusing a new one. */
        if (rehash(l, l->cap, now_ms) < 0) {
            *reterr = -ENOMEM;
            return NULL;
        }
        if (l->n >= DLOG_LOCKS_ACTORS_MAX || l->bytes + len + 1 > DLOG_LOCKS_BYTES_MAX) {
            l->dropped++;
            return NULL;
        }
    }
    if ((l->n + 1) * 2 > l->cap && rehash(l, l->cap * 2, 0) < 0) {
        *reterr = -ENOMEM;
        return NULL;
    }
    s = calloc(1, sizeof(*s) + len + 1);
    if (!s) {
        *reterr = -ENOMEM;
        return NULL;
    }
    s->rule_id = rule_id;
    s->period = NO_PERIOD;
    s->actor_len = len;
    memcpy(s->actor, actor, len);
    l->bytes += len + 1;
    l->slot[find_slot(l->slot, l->cap, rule_id, actor, len)] = s;
    l->n++;
    return s;
}

/* ---- periods ---------------------------------------------------------------------------- */

/* Starts a lock of @s at @t, ending at @end: 0, -ENOMEM, or 1 when there is
 * no room (counted). */
static int period_start(struct dlog_locks *l, struct lstate *s, uint64_t t, uint64_t end,
                        bool from_failure)
{
    struct dlog_locks_period *p;
    char *actor;

    if (l->n_periods >= DLOG_LOCKS_PERIODS_MAX ||
        l->bytes + s->actor_len + 1 > DLOG_LOCKS_BYTES_MAX) {
        l->dropped++;
        return 1;
    }
    if (l->n_periods == l->cap_periods) {
        size_t cap = l->cap_periods ? l->cap_periods * 2 : 64;
        struct dlog_locks_period *np = realloc(l->periods, cap * sizeof(*np));

        if (!np)
            return -ENOMEM;
        l->periods = np;
        l->cap_periods = cap;
    }
    actor = malloc(s->actor_len + 1);
    if (!actor)
        return -ENOMEM;
    memcpy(actor, s->actor, s->actor_len + 1);
    l->bytes += s->actor_len + 1;
    p = &l->periods[l->n_periods];
    *p = (struct dlog_locks_period){
        .rule_id = s->rule_id, .actor = actor, .start_ms = t, .end_ms = end,
        .failures = from_failure ? s->pending : 0, .ended = DLOG_LOCKS_OPEN,
        .from_failure = from_failure, .unlocked_by_uid = DLOG_UNKNOWN_ID,
        .unlocked_by_pid = DLOG_UNKNOWN_ID,
    };
    s->period = l->n_periods++;
    s->pending = 0;
    return 0;
}

/* Ends @s's lock: @how, at @t when unlocked (by @uid and @pid). */
static void period_end(struct dlog_locks *l, struct lstate *s, enum dlog_locks_end how,
                       uint64_t t, uint32_t uid, uint32_t pid)
{
    struct dlog_locks_period *p = &l->periods[s->period];

    p->ended = how;
    if (how == DLOG_LOCKS_UNLOCKED) {
        /* Never before the start (answers applied out of order past the
         * heap's bounds). */
        p->end_ms = t > p->start_ms ? t : p->start_ms;
        p->unlocked_by_uid = uid;
        p->unlocked_by_pid = pid;
    }
    s->period = NO_PERIOD;
    s->pending = 0;
}

/* ---- events, in time order ------------------------------------------------------------- */

/* One lockout rule's answer to one decision, waiting in the reorder heap. */
struct lev {
    uint64_t t, seq;
    uint64_t rule_id, credit, reset_s, n;
    int64_t credit_limit, reset_ms;
    uint32_t uid, pid;
    uint8_t op, oflags;
    size_t actor_len;
    char actor[];
};

static bool lev_before(const struct lev *a, const struct lev *b)
{
    return a->t != b->t ? a->t < b->t : a->seq < b->seq;
}

static void heap_push(struct dlog_locks *l, struct lev *e)
{
    size_t i = l->n_heap++;

    while (i > 0 && lev_before(e, l->heap[(i - 1) / 2])) {
        l->heap[i] = l->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    l->heap[i] = e;
}

static struct lev *heap_pop(struct dlog_locks *l)
{
    struct lev *top = l->heap[0], *last = l->heap[--l->n_heap];
    size_t i = 0;

    for (;;) {
        size_t c = 2 * i + 1;

        if (c >= l->n_heap)
            break;
        if (c + 1 < l->n_heap && lev_before(l->heap[c + 1], l->heap[c]))
            c++;
        if (!lev_before(l->heap[c], last))
            break;
        l->heap[i] = l->heap[c];
        i = c;
    }
    if (l->n_heap)
        l->heap[i] = last;
    l->heap_bytes -= top->actor_len + 1;
    return top;
}

/* @t + @v * @unit, saturated: a log's numbers may be anything. */
static uint64_t add_ms(uint64_t t, uint64_t v, uint64_t unit)
{
    if (v > (UINT64_MAX - t) / unit)
        return UINT64_MAX;
    return t + v * unit;
}

/* Applies event @e (in time order) to its actor's state. */
static int lev_apply(struct dlog_locks *l, const struct lev *e)
{
    bool allowed = e->oflags & DLOG_O_ALLOWED;
    bool failure = e->op == TABLE_TAKE || e->op == TABLE_DEBIT;
    bool lock_refusal = !allowed && e->credit == 0 && e->reset_s > 0 &&
                        (failure || e->op == TABLE_PEEK);
    uint64_t t = e->t, lock_end = add_ms(t, e->reset_s, 1000);
    struct lstate *s;
    int err = 0;

    /* Only a failure or a lock makes a state worth keeping. */
    s = state_get(l, e->rule_id, e->actor, e->actor_len, (failure && allowed) || lock_refusal,
                  t, &err);
    if (!s)
        return err;
    if (s->period != NO_PERIOD && t >= l->periods[s->period].end_ms)
        period_end(l, s, DLOG_LOCKS_EXPIRED, t, 0, 0);
    if (e->op == TABLE_RESET) {
        /* A RESET that forgot the counter answers with credit; one of a rule
         * with resettable = false only looked (a running lock: credit 0). */
        if (s->period != NO_PERIOD && e->credit > 0)
            period_end(l, s, DLOG_LOCKS_UNLOCKED, t, e->uid, e->pid);
        if (e->credit > 0)
            s->pending = 0;
        return 0;
    }
    if (allowed && s->period != NO_PERIOD) {
        /* Not locked any more before its time: within the rounding of the
         * lock's reset seconds it expired, else it was cleared where this
         * log does not show (a RESET through another divvyd on the same
         * Redis counter). */
        if (t + DLOG_LOCKS_SLACK_MS >= l->periods[s->period].end_ms) {
            struct dlog_locks_period *p = &l->periods[s->period];

            p->end_ms = t > p->start_ms ? t : p->start_ms;
            period_end(l, s, DLOG_LOCKS_EXPIRED, t, 0, 0);
        } else {
            period_end(l, s, DLOG_LOCKS_UNLOCKED, t, DLOG_UNKNOWN_ID, DLOG_UNKNOWN_ID);
        }
    }
    if (failure && allowed) {
        uint64_t limit = e->credit_limit > 0 ? (uint64_t)e->credit_limit : 0;

        /* The first failure of a counting interval leaves limit - n. */
        if (s->pending == 0 || t >= s->interval_end_ms || e->credit + e->n >= limit) {
            s->pending = 0;
            s->interval_end_ms = add_ms(t, e->reset_ms > 0 ? (uint64_t)e->reset_ms : 0, 1);
        }
        s->pending += e->n;
        if (e->credit == 0 && e->reset_s > 0)
            return period_start(l, s, t, lock_end, true) < 0 ? -ENOMEM : 0;
        return 0;
    }
    if (lock_refusal) {
        if (s->period == NO_PERIOD) {
            int rc = period_start(l, s, t, lock_end, false);

            if (rc != 0)
                return rc < 0 ? rc : 0;
        }
        l->periods[s->period].refusals++;
        if (failure)
            l->periods[s->period].failures += e->n;
    }
    return 0;
}

/* Applies the waiting events older than @upto (all: UINT64_MAX). */
static int heap_release(struct dlog_locks *l, uint64_t upto)
{
    while (l->n_heap && l->heap[0]->t < upto) {
        struct lev *e = heap_pop(l);
        int r = lev_apply(l, e);

        free(e);
        if (r < 0)
            return r;
    }
    return 0;
}

/* ---- decisions -------------------------------------------------------------------------- */

/* Queues rule @r's answer @o to @d. */
static int locks_outcome(struct dlog_locks *l, const struct dlog_rule *r,
                         const struct dlog_outcome *o, const struct dlog_decision *d)
{
    char actor[RULES_ACTOR_MAX];
    struct lev *e;
    int len;

    len = dlog_actor(r, d, actor, sizeof(actor));
    if (len < 0)
        return 0;
    if (l->actor && (strlen(l->actor) != (size_t)len || memcmp(l->actor, actor, (size_t)len)))
        return 0;
    /* Past the heap's bounds the oldest are applied early: order suffers
     * (within the reorder window), nothing is lost. */
    while (l->n_heap && (l->n_heap >= DLOG_LOCKS_PENDING_MAX ||
                         l->heap_bytes + (size_t)len + 1 > DLOG_LOCKS_BYTES_MAX)) {
        struct lev *old = heap_pop(l);
        int rc = lev_apply(l, old);

        free(old);
        if (rc < 0)
            return rc;
    }
    if (l->n_heap == l->cap_heap) {
        size_t cap = l->cap_heap ? l->cap_heap * 2 : 256;
        struct lev **h = realloc(l->heap, cap * sizeof(*h));

        if (!h)
            return -ENOMEM;
        l->heap = h;
        l->cap_heap = cap;
    }
    e = malloc(sizeof(*e) + (size_t)len + 1);
    if (!e)
        return -ENOMEM;
    *e = (struct lev){
        .t = d->unix_ms, .seq = l->seq++, .rule_id = r->id, .credit = o->credit,
        .reset_s = o->reset_s, .n = d->n, .credit_limit = r->credit_limit,
        .reset_ms = r->reset_ms, .uid = d->uid, .pid = d->pid, .op = d->op,
        .oflags = o->flags, .actor_len = (size_t)len,
    };
    memcpy(e->actor, actor, (size_t)len + 1);
    l->heap_bytes += (size_t)len + 1;
    heap_push(l, e);
    return 0;
}

int dlog_locks_decision(struct dlog_locks *l, const struct dlog_query_rules *m,
                        const struct dlog_decision *d)
{
    if (d->flags & DLOG_F_ERROR)
        return 0;
    for (unsigned i = 0; i < d->n_out && i < RULES_MATCH_MAX; i++) {
        const struct dlog_rule *r = dlog_query_rule(m, d->out[i].rule_id);
        int err;

        if (!r || r->algo != RULES_ALGO_LOCKOUT)
            continue;
        if (l->rule && !dlog_query_rule_is(r, r->id, l->rule))
            continue;
        err = locks_outcome(l, r, &d->out[i], d);
        if (err < 0)
            return err;
    }
    if (d->unix_ms > l->max_t)
        l->max_t = d->unix_ms;
    return heap_release(l, l->max_t > DLOG_LOCKS_REORDER_MS ? l->max_t - DLOG_LOCKS_REORDER_MS
                                                             : 0);
}

static int period_cmp(const void *a, const void *b)
{
    const struct dlog_locks_period *x = a, *y = b;

    if (x->start_ms != y->start_ms)
        return x->start_ms < y->start_ms ? -1 : 1;
    if (x->rule_id != y->rule_id)
        return x->rule_id < y->rule_id ? -1 : 1;
    return strcmp(x->actor, y->actor);
}

size_t dlog_locks_finish(struct dlog_locks *l, uint64_t last_ms,
                         const struct dlog_locks_period **ret)
{
    /* Out of memory here only makes the last periods unknown. */
    if (heap_release(l, UINT64_MAX) < 0)
        l->dropped++;
    for (size_t i = 0; i < l->cap; i++) {
        struct lstate *s = l->slot[i];

        if (s && s->period != NO_PERIOD)
            period_end(l, s, l->periods[s->period].end_ms <= last_ms ? DLOG_LOCKS_EXPIRED
                                                                     : DLOG_LOCKS_OPEN,
                       last_ms, 0, 0);
    }
    if (l->n_periods > 1)
        qsort(l->periods, l->n_periods, sizeof(*l->periods), period_cmp);
    *ret = l->periods;
    return l->n_periods;
}
