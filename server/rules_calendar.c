/* SPDX-License-Identifier: MIT */
/*
 * rules_calendar: the calendar-window settings of a rule (docs/rules.md
 * "Calendar windows"), divvyd and divvyctl only: what goes with them, and
 * the zone table the compiler writes into the blob (docs/dev/rules.md "Zone
 * table"), each zone read once from its TZif file (tzif.c) so clients never
 * read one.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules_build.h"
#include "tzif.h"

#define CAL_ERR(p, ln, ...) RULES_PREP_ERR(p, d, ln, __VA_ARGS__)

static bool zone_is_utc(const char *name)
{
    return !name || strcmp(name, "UTC") == 0;
}

void rules_calendar_prep(struct pr *p, struct diag *d)
{
    const struct rules_rule_spec *s = p->s;
    struct calendar_zone z;
    struct calendar_trans *tr = NULL;
    uint32_t n;
    char why[256];
    int r;

    if (!s->calendar) {
        CAL_ERR(p, s->time_zone_line, "time_zone needs calendar (\"hour\", \"day\", \"week\" "
                "or \"month\")");
        return;
    }
    if (s->algo != RULES_ALGO_WINDOW)
        CAL_ERR(p, s->calendar_line, "calendar needs algorithm window");
    if (s->reset_seconds != -1 || s->reset_ms != -1)
        CAL_ERR(p, s->calendar_line, "reset_seconds and reset_ms do not go with calendar: the window is "
                "the calendar's %s", calendar_unit_name((enum calendar_unit)s->calendar));
    if (s->refill_amount != -1 || s->refill_seconds != -1 || s->refill_ms != -1 ||
        s->refill_set || s->strict)
        CAL_ERR(p, s->calendar_line, "refill_amount, refill_seconds, refill_ms, refill and "
                "strict need algorithm token_bucket");
    /* A lease's window is the lease script's TTL, counted by Redis from the
     * first grant, and a host's lease slot ends with it: it has no calendar. */
    if (p->store == RULES_STORE_LEASE && s->credit_limit > 0)
        CAL_ERR(p, s->calendar_line, "a calendar window cannot be leased (%s \"lease\"): "
                "a lease lasts a fixed time from Redis's first grant; use store = \"strict\" "
                "or \"local\"", s->store_set ? "store" : "store.mode");
    if (!zone_is_utc(s->time_zone)) {
        r = tzif_load(s->time_zone, &z, &tr, &n, why, sizeof(why));
        if (r == -ENOMEM)
            CAL_ERR(p, s->time_zone_line, "time_zone \"%s\": out of memory", s->time_zone);
        else if (r == -ENOENT)
            CAL_ERR(p, s->time_zone_line, "unknown time_zone \"%s\" (no %s/%s; an IANA name "
                    "such as \"Europe/Berlin\", or \"UTC\")", s->time_zone, TZIF_DIR,
                    s->time_zone);
        else if (r < 0)
            CAL_ERR(p, s->time_zone_line, "time_zone \"%s\": %s", s->time_zone, why);
        free(tr);
    }
    p->reset_seconds = (int64_t)(calendar_nominal_ms((enum calendar_unit)s->calendar) / 1000);
    p->refill_amount = 0;
    p->refill_seconds = 0;
}

void rules_zones_free(struct rules_zones *z)
{
    free(z->zone);
    free(z->trans);
    free(z->rule_zone);
    memset(z, 0, sizeof(*z));
}

int rules_zones_build(const struct build *b, struct rules_zones *ret, struct diag *d)
{
    struct calendar_trans *tr = NULL;
    char why[256];
    int r = 0;

    memset(ret, 0, sizeof(*ret));
    ret->rule_zone = malloc((b->n ? b->n : 1) * sizeof(*ret->rule_zone));
    if (!ret->rule_zone)
        return -ENOMEM;
    for (size_t i = 0; i < b->n; i++) {
        const struct rules_rule_spec *s = b->r[i].s;
        struct calendar_zone z, *grown;
        struct calendar_trans *all;
        uint32_t n = 0, k;

        ret->rule_zone[i] = UINT32_MAX;
        if (!s->calendar || zone_is_utc(s->time_zone))
            continue;
        for (k = 0; k < ret->n_zone && strcmp(ret->zone[k].name, s->time_zone) != 0; k++)
            ;
        if (k < ret->n_zone) {
            ret->rule_zone[i] = k;
            continue;
        }
        if (ret->n_zone >= CALENDAR_ZONES_MAX) {
            diag_set(d, s->file, s->time_zone_line, "more than %d distinct time zones",
                     CALENDAR_ZONES_MAX);
            return -EINVAL;
        }
        r = tzif_load(s->time_zone, &z, &tr, &n, why, sizeof(why));
        if (r < 0) {
            if (r != -ENOMEM) {
                diag_set(d, s->file, s->time_zone_line, "time_zone \"%s\": %s", s->time_zone,
                         why);
                r = -EINVAL;
            }
            return r;
        }
        grown = realloc(ret->zone, (ret->n_zone + 1) * sizeof(*grown));
        all = n ? realloc(ret->trans, (ret->n_trans + n) * sizeof(*all)) : ret->trans;
        if (grown)
            ret->zone = grown;
        if (all)
            ret->trans = all;
        if (!grown || (n && !all)) {
            free(tr);
            return -ENOMEM;
        }
        z.first = ret->n_trans;
        z.n = n;
        if (n)
            memcpy(ret->trans + ret->n_trans, tr, n * sizeof(*tr));
        free(tr);
        tr = NULL;
        ret->n_trans += n;
        ret->zone[ret->n_zone] = z;
        ret->rule_zone[i] = ret->n_zone++;
    }
    return 0;
}
