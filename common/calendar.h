/* SPDX-License-Identifier: MIT */
/*
 * calendar: the periods of a calendar window (docs/rules.md "Calendar
 * windows"): the hour, day, ISO week (Monday to Monday) or month that holds
 * an instant, in UTC or in a time zone whose offsets the rule compiler copied
 * from the zone's TZif file into the compiled-rules blob (docs/dev/rules.md
 * "Zone table").  Pure functions on those records: no file, no environment,
 * no allocation, so libdivvy's fast path decides calendar rules as divvyd
 * does.  Times are Unix time (CLOCK_REALTIME); the caller turns a period's
 * end into its monotonic deadline.  Thread-safe, never logs.
 */
#ifndef DIVVY_CALENDAR_H
#define DIVVY_CALENDAR_H

#include <stdbool.h>
#include <stdint.h>

enum calendar_unit {
    CALENDAR_NONE = 0,          /* not a calendar window */
    CALENDAR_HOUR,
    CALENDAR_DAY,
    CALENDAR_WEEK,              /* ISO 8601: Monday 00:00 to the next Monday 00:00 */
    CALENDAR_MONTH,
};
#define CALENDAR_UNIT_MAX CALENDAR_MONTH

#define CALENDAR_NAME_MAX   48          /* bytes of a zone's name, with its NUL */
#define CALENDAR_TRANS_MAX  4096        /* transitions of one zone */
#define CALENDAR_ZONES_MAX  256         /* distinct zones in one config */
#define CALENDAR_OFF_MIN    (-89999)    /* UTC offsets, seconds (RFC 8536: -24:59:59 ...) */
#define CALENDAR_OFF_MAX    93599       /* ... +25:59:59) */
#define CALENDAR_RULE_SECS  (167 * 3600)        /* |time of day| of a POSIX TZ rule (v3) */
/* Unix seconds a period may be computed for: years 1900 to 9999. */
#define CALENDAR_T_MIN      (-2208988800LL)
#define CALENDAR_T_MAX      253402300799LL

/* When a POSIX TZ rule switches (the TZif footer, RFC 8536 section 3.3):
 * a date and a local time of day. */
enum calendar_when_kind {
    CALENDAR_WHEN_JULIAN1 = 0,  /* Jn: day 1..365 of the year, February 29 never counted */
    CALENDAR_WHEN_JULIAN0,      /* n: day 0..365, February 29 counted */
    CALENDAR_WHEN_MWD,          /* Mm.w.d: weekday d (0 Sunday) of week w (5: last) of month m */
};

struct calendar_when {
    uint8_t kind;               /* enum calendar_when_kind */
    uint8_t month;              /* MWD: 1..12 */
    uint8_t week;               /* MWD: 1..5 */
    uint8_t wday;               /* MWD: 0..6 */
    uint16_t day;               /* JULIAN1: 1..365; JULIAN0: 0..365 */
    uint16_t reserved;
    int32_t secs;               /* local time of day, -167h..167h */
};

/* One zone as the blob holds it (docs/dev/rules.md "Zone table"). */
struct calendar_zone {
    char name[CALENDAR_NAME_MAX];       /* IANA name, NUL-terminated */
    uint32_t first, n;                  /* its transitions in the transition array */
    int32_t off0;                       /* UTC offset before the first transition */
    /* After the last transition (the footer): std_off, and with has_dst
     * dst_off from @start (local standard time) to @end (local daylight time). */
    int32_t std_off, dst_off;
    uint8_t has_dst;
    uint8_t reserved[3];
    struct calendar_when start, end;
};

struct calendar_trans {
    int64_t at;                 /* Unix seconds; strictly ascending within a zone */
    int32_t off;                /* UTC offset from then on, seconds east */
    uint32_t reserved;
};

_Static_assert(sizeof(struct calendar_when) == 12, "calendar_when layout");
_Static_assert(sizeof(struct calendar_zone) == 96, "calendar_zone layout");
_Static_assert(sizeof(struct calendar_trans) == 16, "calendar_trans layout");

/* "hour", "day", "week", "month" ("" for CALENDAR_NONE). */
const char *calendar_unit_name(enum calendar_unit u);

/* The unit called @name, or CALENDAR_NONE. */
enum calendar_unit calendar_unit_parse(const char *name);

/* The longest period of @u in ms (hour 1 h, day 25 h, week 7 days 1 h,
 * month 31 days 1 h): a calendar rule's nominal window, for the bounds of a
 * DEBIT's debt (docs/rules.md "Calendar windows"). */
uint64_t calendar_nominal_ms(enum calendar_unit u);

/*
 * Checks @n_zone zone records and the @n_trans transitions they index, as
 * read from an untrusted blob: names NUL-terminated and not empty, every
 * transition range inside the array, transitions strictly ascending within
 * [CALENDAR_T_MIN, CALENDAR_T_MAX], every offset within
 * [CALENDAR_OFF_MIN, CALENDAR_OFF_MAX], footer rules in range.
 * Returns 0 or -EBADMSG.
 */
int calendar_check(const struct calendar_zone *zones, uint32_t n_zone,
                   const struct calendar_trans *trans, uint32_t n_trans);

/* The UTC offset (seconds east) of zone @z (NULL: UTC) at Unix second @t;
 * *ret_next (may be NULL) gets the next instant it changes, INT64_MAX for
 * never.  @trans is the array @z indexes. */
int32_t calendar_offset(const struct calendar_zone *z, const struct calendar_trans *trans,
                        int64_t t, int64_t *ret_next);

/*
 * The period of unit @u that holds Unix time @unix_ms in zone @z (NULL:
 * UTC): *ret_start_ms <= unix_ms < *ret_end_ms, both Unix ms on whole
 * seconds.  A period runs from the instant the zone's clock first reads its
 * start to the instant it first reads its end, so a day is 23 or 25 hours
 * long across a DST change, a clock hour that is repeated is one period of
 * two hours and one that is skipped none.  Returns 0, or -ERANGE outside
 * [CALENDAR_T_MIN, CALENDAR_T_MAX], -EINVAL for an unknown unit.
 */
int calendar_period(const struct calendar_zone *z, const struct calendar_trans *trans,
                    enum calendar_unit u, int64_t unix_ms, int64_t *ret_start_ms,
                    int64_t *ret_end_ms);

#endif
