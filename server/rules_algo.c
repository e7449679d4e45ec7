/* SPDX-License-Identifier: MIT */
/*
 * rules_algo: a rule's algorithm settings (docs/rules.md "Algorithms"),
 * divvyd and divvyctl only: each duration in seconds or in milliseconds,
 * refills only where something refills, a full bucket within what a slot
 * holds; calendar windows (rules_calendar.c) and lockout rules
 * (rules_lock.c) are handed to their own checks.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>

#include "rules_build.h"

#define RULE_ERR(p, ln, ...) RULES_PREP_ERR(p, d, ln, __VA_ARGS__)

static int64_t ms_to_s(int64_t ms)
{
    return ms < 0 ? ms : ms / 1000 + (ms % 1000 != 0);
}

/* The durations and refill settings (docs/rules.md "Algorithms"): each
 * duration in seconds or in ms (config_divvy.c refuses both), refills only
 * where something refills, and a full bucket within what a slot holds. */
void rules_algo_prep(struct pr *p, struct diag *d)
{
    const struct rules_rule_spec *s = p->s;
    bool tb = s->algo == RULES_ALGO_TOKEN_BUCKET, gcra = s->algo == RULES_ALGO_GCRA;
    bool cont = gcra || (tb && s->continuous);
    int64_t ms_max = RULES_SECONDS_MAX * 1000, reset_ms, refill_ms, amount_max;
    unsigned __int128 span;

    if (s->calendar || s->time_zone) {
        rules_calendar_prep(p, d);
        p->reset_ms = p->reset_seconds * 1000;
        p->refill_ms = 0;
        return;
    }
    if (rules_lock_prep(p, d)) {
        /* lockout: its own settings (rules_lock.c); reset_ms is its fail_interval */
        p->reset_ms = p->reset_seconds * 1000;
        p->refill_ms = 0;
        return;
    }
    if (s->reset_seconds != -1)
        rules_check_limit(p, d, "reset_seconds", s->reset_seconds, RULES_SECONDS_MAX);
    if (s->reset_ms != -1)
        rules_check_limit(p, d, "reset_ms", s->reset_ms, ms_max);
    reset_ms = s->reset_ms != -1 ? s->reset_ms
               : s->reset_seconds != -1 ? s->reset_seconds * 1000 : -1;
    refill_ms = s->refill_ms != -1 ? s->refill_ms
                : s->refill_seconds != -1 ? s->refill_seconds * 1000 : -1;
    p->refill_amount = s->refill_amount;
    p->refill_seconds = s->refill_seconds;
    p->reset_seconds = s->reset_seconds != -1 ? s->reset_seconds : ms_to_s(reset_ms);
    if (!tb && !gcra) {
        if (reset_ms == -1)
            RULE_ERR(p, 0, "reset_seconds is not set (or reset_ms)");
        if (s->refill_amount != -1 || s->refill_seconds != -1 || s->refill_ms != -1)
            RULE_ERR(p, 0, "refill_amount, refill_seconds and refill_ms need algorithm "
                     "token_bucket or gcra");
        if (s->strict)
            RULE_ERR(p, 0, "strict needs algorithm token_bucket");
        if (s->refill_set)
            RULE_ERR(p, 0, "refill needs algorithm token_bucket");
        p->refill_amount = 0;
        p->refill_seconds = 0;
        p->reset_ms = reset_ms;
        p->refill_ms = 0;
        return;
    }
    if (gcra && s->refill_set)
        RULE_ERR(p, 0, "refill does not apply to gcra (it always refills continuously)");
    if (cont && s->strict)
        RULE_ERR(p, 0, "strict needs a stepped token_bucket (refill = \"steps\"): a "
                 "continuous bucket has no refill clock to push back");
    if (p->refill_amount == -1)
        p->refill_amount = 1;
    /* A stepped bucket never adds more than it holds; a continuous one is a
     * rate (redis-cell's count per period may pass the burst). */
    amount_max = cont ? RULES_LIMIT_MAX : s->credit_limit > 0 ? s->credit_limit : RULES_LIMIT_MAX;
    if (p->refill_amount < 1 || p->refill_amount > amount_max)
        RULE_ERR(p, 0, "refill_amount %" PRId64 " is out of range 1..%s", p->refill_amount,
                 cont ? "2^47" : "credit_limit");
    if (refill_ms == -1)
        refill_ms = reset_ms;
    if (refill_ms == -1)
        RULE_ERR(p, 0, "%s needs refill_seconds or refill_ms (or reset_seconds)",
                 gcra ? "gcra" : "token_bucket");
    else if ((refill_ms < 1 || refill_ms > ms_max) && s->refill_ms != -1)
        RULE_ERR(p, 0, "refill_ms %" PRId64 " is out of range 1..%" PRId64, refill_ms, ms_max);
    else if ((refill_ms < 1 || refill_ms > ms_max) && s->refill_seconds == -1 &&
             s->reset_ms != -1)
        RULE_ERR(p, 0, "reset_ms %" PRId64 " (the refill period) is out of range 1..%" PRId64,
                 refill_ms, ms_max);
    else if (refill_ms < 1 || refill_ms > ms_max)
        RULE_ERR(p, 0, "refill_seconds %" PRId64 " is out of range 1..%lld", refill_ms / 1000,
                 RULES_SECONDS_MAX);
    p->refill_seconds = ms_to_s(refill_ms);
    if (reset_ms == -1) {
        reset_ms = refill_ms;
        p->reset_seconds = p->refill_seconds;
    }
    p->reset_ms = reset_ms;
    p->refill_ms = refill_ms;
    /* An empty bucket must refill within what a slot can represent
     * (ALGO_SPAN_MAX, about 17 years; docs/dev/shm.md). */
    if (p->bad || s->credit_limit < 1 || refill_ms < 1)
        return;
    span = cont ? ((unsigned __int128)s->credit_limit * (uint64_t)refill_ms +
                   (uint64_t)p->refill_amount - 1) / (uint64_t)p->refill_amount
                : (unsigned __int128)(((uint64_t)s->credit_limit + (uint64_t)p->refill_amount -
                                       1) / (uint64_t)p->refill_amount) * (uint64_t)refill_ms;
    if (span > (unsigned __int128)1 << 39)
        RULE_ERR(p, 0, "an empty bucket would take more than 17 years to refill "
                       "(credit_limit / refill_amount * the refill period)");
}
