/* SPDX-License-Identifier: MIT */
/*
 * calendar: periods of calendar windows from a zone's compiled offsets (see
 * calendar.h).  Civil dates use the proleptic Gregorian calendar (days from
 * 1970-01-01, H. Hinnant's algorithms); a zone's offset comes from its
 * transitions, and past the last one from its POSIX TZ rule evaluated for
 * the years around the instant, as RFC 8536 section 3.3 says.
 */
#include <errno.h>
#include <string.h>

#include "calendar.h"

#define DAY 86400LL
/* Further than any UTC offset: local time at L - REACH is before L. */
#define REACH 100000LL

static const char *const unit_names[] = { "", "hour", "day", "week", "month" };

const char *calendar_unit_name(enum calendar_unit u)
{
    return (unsigned)u <= CALENDAR_UNIT_MAX ? unit_names[u] : "";
}

enum calendar_unit calendar_unit_parse(const char *name)
{
    for (unsigned u = CALENDAR_HOUR; u <= CALENDAR_UNIT_MAX; u++) {
        if (strcmp(name, unit_names[u]) == 0)
            return (enum calendar_unit)u;
    }
    return CALENDAR_NONE;
}

uint64_t calendar_nominal_ms(enum calendar_unit u)
{
    switch (u) {
    case CALENDAR_HOUR:
        return 3600 * 1000ULL;
    case CALENDAR_DAY:
        return 25 * 3600 * 1000ULL;
    case CALENDAR_WEEK:
        return (7 * DAY + 3600) * 1000ULL;
    case CALENDAR_MONTH:
        return (31 * DAY + 3600) * 1000ULL;
    default:
        return 0;
    }
}

/* ---- civil dates -------------------------------------------------------- */

static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

static bool leap(int64_t y)
{
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

static int month_days(int64_t y, int m)
{
    static const int days[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };

    return m == 2 && leap(y) ? 29 : days[m - 1];
}

/* Days from 1970-01-01 to @y-@m-@d. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy, doe;

    y -= m <= 2;
    era = floor_div(y, 400);
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *ret_y, int *ret_m)
{
    int64_t era, doe, yoe, doy, mp, y;

    z += 719468;
    era = floor_div(z, 146097);
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    y = yoe + era * 400;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *ret_m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *ret_y = y + (*ret_m <= 2);
}

/* 0 = Sunday. */
static int weekday(int64_t days)
{
    return (int)(((days % 7) + 11) % 7);
}

/* ---- the POSIX TZ rule past the last transition ---------------------------- */

/* Days from 1970-01-01 to the date @w names in year @y. */
static int64_t when_day(int64_t y, const struct calendar_when *w)
{
    int64_t jan1 = days_from_civil(y, 1, 1), first;
    int d;

    switch (w->kind) {
    case CALENDAR_WHEN_JULIAN1:
        return jan1 + w->day - 1 + (leap(y) && w->day >= 60);
    case CALENDAR_WHEN_JULIAN0:
        return jan1 + w->day;
    default:
        first = days_from_civil(y, w->month, 1);
        d = 1 + (w->wday - weekday(first) + 7) % 7 + (w->week - 1) * 7;
        while (d > month_days(y, w->month))
            d -= 7;
        return first + d - 1;
    }
}

static int32_t rule_offset(const struct calendar_zone *z, int64_t t, int64_t *ret_next)
{
    int64_t at[6], y, next = INT64_MAX, best = INT64_MIN;
    int32_t off[6], cur = z->std_off;
    int m;

    civil_from_days(floor_div(t + z->std_off, DAY), &y, &m);
    for (int i = 0; i < 3; i++) {
        int64_t yy = y - 1 + i;

        at[2 * i] = when_day(yy, &z->start) * DAY + z->start.secs - z->std_off;
        off[2 * i] = z->dst_off;
        at[2 * i + 1] = when_day(yy, &z->end) * DAY + z->end.secs - z->dst_off;
        off[2 * i + 1] = z->std_off;
    }
    /* The latest switch at or before t decides (daylight time on a tie, as a
     * rule that keeps DST all year means); the first after it comes next. */
    for (int i = 0; i < 6; i++) {
        if (at[i] <= t && (at[i] > best || (at[i] == best && off[i] == z->dst_off))) {
            best = at[i];
            cur = off[i];
        }
        if (at[i] > t && at[i] < next)
            next = at[i];
    }
    if (ret_next)
        *ret_next = next;
    return cur;
}

int32_t calendar_offset(const struct calendar_zone *z, const struct calendar_trans *trans,
                        int64_t t, int64_t *ret_next)
{
    const struct calendar_trans *tr;
    uint32_t lo = 0, hi;
    int64_t next;
    int32_t off;

    if (!z) {
        if (ret_next)
            *ret_next = INT64_MAX;
        return 0;
    }
    hi = z->n;
    if (hi == 0 || t < trans[z->first].at) {
        if (ret_next)
            *ret_next = hi ? trans[z->first].at : INT64_MAX;
        if (hi == 0 && z->has_dst)
            return rule_offset(z, t, ret_next);
        return hi ? z->off0 : z->std_off;
    }
    /* The last transition at or before t. */
    tr = trans + z->first;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (tr[mid].at <= t)
            lo = mid;
        else
            hi = mid;
    }
    if (lo + 1 < z->n) {
        if (ret_next)
            *ret_next = tr[lo + 1].at;
        return tr[lo].off;
    }
    if (!z->has_dst) {
        if (ret_next)
            *ret_next = INT64_MAX;
        return z->std_off;
    }
    off = rule_offset(z, t, &next);
    if (ret_next)
        *ret_next = next;
    return off;
}

/* The first instant at or after @from at which @z's clock reads @local or
 * later (@from's own local time is before @local). */
static int64_t first_reading(const struct calendar_zone *z, const struct calendar_trans *trans,
                             int64_t local, int64_t from)
{
    int64_t t = from, next;
    int32_t off = 0;

    /* Each step crosses one transition; a zone has a few within REACH. */
    for (int i = 0; i < 64; i++) {
        off = calendar_offset(z, trans, t, &next);
        if (next == INT64_MAX || next + off > local)
            return local - off > t ? local - off : t;
        t = next;
    }
    return local - off > t ? local - off : t;
}

int calendar_check(const struct calendar_zone *zones, uint32_t n_zone,
                   const struct calendar_trans *trans, uint32_t n_trans)
{
    for (uint32_t i = 0; i < n_zone; i++) {
        const struct calendar_zone *z = &zones[i];
        const struct calendar_when *w[2] = { &z->start, &z->end };

        if (z->name[0] == 0 || memchr(z->name, 0, sizeof(z->name)) == NULL)
            return -EBADMSG;
        if ((uint64_t)z->first + z->n > n_trans || z->n > CALENDAR_TRANS_MAX)
            return -EBADMSG;
        if (z->off0 < CALENDAR_OFF_MIN || z->off0 > CALENDAR_OFF_MAX ||
            z->std_off < CALENDAR_OFF_MIN || z->std_off > CALENDAR_OFF_MAX ||
            z->dst_off < CALENDAR_OFF_MIN || z->dst_off > CALENDAR_OFF_MAX || z->has_dst > 1)
            return -EBADMSG;
        for (int k = 0; k < 2 && z->has_dst; k++) {
            if (w[k]->secs < -CALENDAR_RULE_SECS || w[k]->secs > CALENDAR_RULE_SECS)
                return -EBADMSG;
            if (w[k]->kind == CALENDAR_WHEN_JULIAN1 ? w[k]->day < 1 || w[k]->day > 365
                : w[k]->kind == CALENDAR_WHEN_JULIAN0 ? w[k]->day > 365
                : w[k]->kind == CALENDAR_WHEN_MWD ? w[k]->month < 1 || w[k]->month > 12 ||
                                                    w[k]->week < 1 || w[k]->week > 5 ||
                                                    w[k]->wday > 6
                : true)
                return -EBADMSG;
        }
        for (uint32_t j = 0; j < z->n; j++) {
            const struct calendar_trans *t = &trans[z->first + j];

            if (t->at < CALENDAR_T_MIN || t->at > CALENDAR_T_MAX ||
                t->off < CALENDAR_OFF_MIN || t->off > CALENDAR_OFF_MAX ||
                (j && t->at <= trans[z->first + j - 1].at))
                return -EBADMSG;
        }
    }
    return 0;
}

int calendar_period(const struct calendar_zone *z, const struct calendar_trans *trans,
                    enum calendar_unit u, int64_t unix_ms, int64_t *ret_start_ms,
                    int64_t *ret_end_ms)
{
    int64_t t = floor_div(unix_ms, 1000), local, days, start, end, y, s, e;
    int m;

    if (t < CALENDAR_T_MIN || t > CALENDAR_T_MAX)
        return -ERANGE;
    local = t + calendar_offset(z, trans, t, NULL);
    days = floor_div(local, DAY);
    switch (u) {
    case CALENDAR_HOUR:
        start = local - (local - days * DAY) % 3600;
        end = start + 3600;
        break;
    case CALENDAR_DAY:
        start = days * DAY;
        end = start + DAY;
        break;
    case CALENDAR_WEEK:
        start = (days - (weekday(days) + 6) % 7) * DAY;       /* back to Monday */
        end = start + 7 * DAY;
        break;
    case CALENDAR_MONTH:
        civil_from_days(days, &y, &m);
        start = days_from_civil(y, m, 1) * DAY;
        end = (m == 12 ? days_from_civil(y + 1, 1, 1) : days_from_civil(y, m + 1, 1)) * DAY;
        break;
    default:
        return -EINVAL;
    }
    s = first_reading(z, trans, start, start - REACH);
    if (s > t)
        s = t;
    e = first_reading(z, trans, end, t);
    if (e <= t)
        e = t + 1;
    *ret_start_ms = s * 1000;
    *ret_end_ms = e * 1000;
    return 0;
}
