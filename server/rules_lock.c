/* SPDX-License-Identifier: MIT */
/*
 * rules_lock: validation of lockout rules (docs/rules.md "Lockout"): the settings together,
 * their defaults, what a lockout rule cannot be (fast_path, leased), and lockout settings on a
 * rule of another algorithm.  Fills struct pr's effective lock settings and its reset_seconds
 * (the fail_interval) for the compiler.
 */
#include <inttypes.h>

#include "algo_lock.h"
#include "rules_build.h"

#define LOCK_ERR(p, d, ...) RULES_PREP_ERR(p, d, 0, __VA_ARGS__)

#define LOCK_DEFAULT_FACTOR    2
#define LOCK_DEFAULT_LOCK_MAX  86400        /* escalation: a day at most ... */
#define LOCK_DEFAULT_REMEMBER  86400        /* ... remembered for a day */
#define LOCK_DEFAULT_DELAY_MAX 30

static bool lock_any_set(const struct rules_lock *k)
{
    return k->fail_interval != -1 || k->unlock_time != -1 || k->set != 0;
}

/* The escalation group's effective values (@k: the spec's, @o: the rule's). */
static void lock_escalation(struct pr *p, struct diag *d, const struct rules_lock *k,
                            struct rules_lock *o)
{
    if (!(k->set & RULES_LOCK_SET_ESCALATION)) {
        o->lock_factor = 1;
        o->lock_max = o->unlock_time;
        o->remember = 0;
        return;
    }
    o->lock_factor = k->lock_factor != -1 ? k->lock_factor : LOCK_DEFAULT_FACTOR;
    o->lock_max = k->lock_max != -1 ? k->lock_max
                  : o->unlock_time > LOCK_DEFAULT_LOCK_MAX ? o->unlock_time
                                                           : LOCK_DEFAULT_LOCK_MAX;
    o->remember = k->remember != -1 ? k->remember : LOCK_DEFAULT_REMEMBER;
    if (o->unlock_time > 0 && o->lock_max < o->unlock_time)
        LOCK_ERR(p, d, "escalation.max %" PRId64 " is shorter than unlock_time %" PRId64,
                 o->lock_max, o->unlock_time);
}

static void lock_delay(struct pr *p, struct diag *d, const struct rules_lock *k,
                       struct rules_lock *o)
{
    if (!(k->set & RULES_LOCK_SET_DELAY))
        return;
    o->delay_after = k->delay_after != -1 ? k->delay_after : 1;
    o->delay = k->delay != -1 ? k->delay : 1;
    o->delay_factor = k->delay_factor != -1 ? k->delay_factor : 2;
    o->delay_max = k->delay_max != -1 ? k->delay_max
                   : o->delay > LOCK_DEFAULT_DELAY_MAX ? o->delay : LOCK_DEFAULT_DELAY_MAX;
    if (o->delay_max < o->delay)
        LOCK_ERR(p, d, "delay.max %" PRId64 " is shorter than delay.seconds %" PRId64,
                 o->delay_max, o->delay);
    if (p->s->credit_limit > 0 && o->delay_after >= p->s->credit_limit)
        LOCK_ERR(p, d, "delay.after %" PRId32 " must be below credit_limit %" PRId64
                 " (the failure that reaches credit_limit locks, so no delay would follow)",
                 o->delay_after, p->s->credit_limit);
}

bool rules_lock_prep(struct pr *p, struct diag *d)
{
    const struct rules_rule_spec *s = p->s;
    const struct rules_lock *k = &s->lock;
    struct rules_lock *o = &p->lock;

    if (s->algo != RULES_ALGO_LOCKOUT) {
        if (lock_any_set(k))
            LOCK_ERR(p, d, "fail_interval, unlock_time, escalation and delay need algorithm "
                     "\"lockout\"");
        return false;
    }
    *o = (struct rules_lock){ 0 };
    if (s->credit_limit > (int64_t)ALGO_LOCK_COUNT_MAX)
        LOCK_ERR(p, d, "credit_limit %" PRId64 " is too large for a lockout rule (the "
                 "failures allowed: at most %u)", s->credit_limit, ALGO_LOCK_COUNT_MAX);
    if (s->reset_seconds != -1 || s->reset_ms != -1)
        LOCK_ERR(p, d, "a lockout rule has two clocks, fail_interval and unlock_time; "
                 "reset_seconds and reset_ms do not apply");
    if (s->refill_amount != -1 || s->refill_seconds != -1 || s->refill_ms != -1 ||
        s->refill_set || s->strict)
        LOCK_ERR(p, d, "refill_amount, refill_seconds, refill_ms, refill and strict need "
                 "algorithm token_bucket");
    if (k->fail_interval == -1)
        LOCK_ERR(p, d, "lockout needs fail_interval (the seconds over which failures count)");
    if (k->unlock_time == -1)
        LOCK_ERR(p, d, "lockout needs unlock_time (the seconds a lock lasts)");
    o->fail_interval = k->fail_interval;
    o->unlock_time = k->unlock_time;
    lock_escalation(p, d, k, o);
    lock_delay(p, d, k, o);
    p->reset_seconds = o->fail_interval;
    p->refill_amount = 0;
    p->refill_seconds = 0;
    if (s->fast_path)
        LOCK_ERR(p, d, "a lockout rule cannot be fast_path (its counters are login state)");
    if (p->store == RULES_STORE_LEASE)
        LOCK_ERR(p, d, "%s \"lease\" cannot hold a lockout rule (give it store = \"strict\" "
                 "or \"local\")", s->store_set ? "store" : "store.mode");
    return true;
}
