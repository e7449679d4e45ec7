/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for calendar windows: common/calendar.c's periods with injected
 * Unix times (month ends, leap Februaries, ISO weeks, DST days in
 * Europe/Berlin, the TZif footer's rule far past the last transition),
 * server/tzif.c's TZif and POSIX TZ parsing (malformed files refused), the
 * blob's zone table checked by rules_from_blob(), and the window algorithm's
 * calendar hook (a hit after the period's end sees a full quota).  Expected
 * instants were computed independently (Python's zoneinfo) and written here.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "algo.h"
#include "calendar.h"
#include "config.h"
#include "diag.h"
#include "eval.h"
#include "rules_private.h"
#include "tzif.h"

#define MS 1000LL

struct zone {
    struct calendar_zone z;
    struct calendar_trans *tr;
    uint32_t n;
};

static void zone_load(const char *name, struct zone *ret)
{
    char why[256] = "";
    int r = tzif_load(name, &ret->z, &ret->tr, &ret->n, why, sizeof(why));

    if (r < 0)
        fail_msg("%s: %s (Debian package tzdata)", name, why);
}

/* Asserts the period of @u holding Unix second @t in @z (NULL: UTC). */
static void period_is(const struct zone *z, enum calendar_unit u, int64_t t, int64_t start,
                      int64_t end)
{
    int64_t s, e;

    assert_int_equal(calendar_period(z ? &z->z : NULL, z ? z->tr : NULL, u, t * MS + 999, &s,
                                     &e), 0);
    assert_int_equal(s, start * MS);
    assert_int_equal(e, end * MS);
}

static void test_calendar_month_end_utc(void **state)
{
    (void)state;
    /* 2026-01-31T23:59:59Z is January; one second later February. */
    period_is(NULL, CALENDAR_MONTH, 1769903999, 1767225600, 1769904000);
    period_is(NULL, CALENDAR_MONTH, 1769904000, 1769904000, 1772323200);
}

static void test_calendar_february(void **state)
{
    (void)state;
    /* 2024 is a leap year (29 days), 2100 is not (a century), 2000 is. */
    period_is(NULL, CALENDAR_MONTH, 1707955200, 1706745600, 1709251200);
    assert_int_equal(1709251200 - 1706745600, 29 * 86400);
    period_is(NULL, CALENDAR_MONTH, 4106332800, 4105123200, 4107542400);
    assert_int_equal(4107542400 - 4105123200, 28 * 86400);
    period_is(NULL, CALENDAR_MONTH, 951782400 /* 2000-02-29 */, 949363200, 951868800);
}

static void test_calendar_iso_week(void **state)
{
    (void)state;
    /* Thursday 2026-01-01: the week began Monday 2025-12-29. */
    period_is(NULL, CALENDAR_WEEK, 1767268800, 1766966400, 1767571200);
    period_is(NULL, CALENDAR_WEEK, 1767571199, 1766966400, 1767571200);     /* Sunday night */
    period_is(NULL, CALENDAR_WEEK, 1767571200, 1767571200, 1767571200 + 7 * 86400);
}

static void test_calendar_hour_and_day_utc(void **state)
{
    (void)state;
    period_is(NULL, CALENDAR_HOUR, 1769903999, 1769900400, 1769904000);
    period_is(NULL, CALENDAR_DAY, 1769903999, 1769817600, 1769904000);
    /* Before 1970 too: floor, not truncation. */
    period_is(NULL, CALENDAR_DAY, -1, -86400, 0);
}

static void test_calendar_berlin_dst_days(void **state)
{
    struct zone b;

    (void)state;
    zone_load("Europe/Berlin", &b);
    /* 2026-03-29: clocks go 02:00 CET -> 03:00 CEST, a day of 23 hours. */
    period_is(&b, CALENDAR_DAY, 1774785600, 1774738800, 1774821600);
    assert_int_equal(1774821600 - 1774738800, 23 * 3600);
    /* 2026-10-25: 03:00 CEST -> 02:00 CET, 25 hours. */
    period_is(&b, CALENDAR_DAY, 1792929600, 1792879200, 1792969200);
    assert_int_equal(1792969200 - 1792879200, 25 * 3600);
    /* The repeated hour 02:00-03:00 is one period of two hours, on both passes. */
    period_is(&b, CALENDAR_HOUR, 1792888200, 1792886400, 1792893600);
    period_is(&b, CALENDAR_HOUR, 1792888200 + 3600, 1792886400, 1792893600);
    /* A Berlin month: November 2026 ends at 2026-11-30T23:00Z. */
    period_is(&b, CALENDAR_MONTH, 1796079599, 1793487600, 1796079600);
    period_is(&b, CALENDAR_MONTH, 1796079600, 1796079600, 1798758000);
    free(b.tr);
}

static void test_calendar_footer_far_future(void **state)
{
    struct zone b, slim;
    int64_t s1, e1, s2, e2;

    (void)state;
    zone_load("Europe/Berlin", &b);
    /* 2100 is past every transition of the file: the footer's rule. */
    assert_true(b.n == 0 || b.tr[b.n - 1].at < 4118126400);
    assert_true(b.z.has_dst);
    period_is(&b, CALENDAR_DAY, 4118126400, 4118076000, 4118162400);       /* CEST */
    period_is(&b, CALENDAR_DAY, 4131345600, 4131298800, 4131298800 + 86400);   /* CET */
    period_is(&b, CALENDAR_MONTH, 4108752000, 4107538800, 4110213600);
    /* A "slim" zone (the footer alone) agrees with the full file hour by
     * hour from 2008 to 2037, where the file lists every transition. */
    slim = b;
    slim.z.n = 0;
    slim.z.off0 = b.z.std_off;
    for (int64_t t = 1199145600; t < 2145916800; t += 3571) {
        assert_int_equal(calendar_offset(&b.z, b.tr, t, NULL),
                         calendar_offset(&slim.z, slim.tr, t, NULL));
        assert_int_equal(calendar_period(&b.z, b.tr, CALENDAR_DAY, t * MS, &s1, &e1), 0);
        assert_int_equal(calendar_period(&slim.z, slim.tr, CALENDAR_DAY, t * MS, &s2, &e2), 0);
        assert_int_equal(s1, s2);
        assert_int_equal(e1, e2);
    }
    free(b.tr);
}

static void test_calendar_half_hour_zone(void **state)
{
    struct zone k;

    (void)state;
    zone_load("Asia/Kolkata", &k);
    /* 10:10Z is 15:40 IST: the hour is 09:30Z to 10:30Z. */
    period_is(&k, CALENDAR_HOUR, 1777975800, 1777973400, 1777977000);
    free(k.tr);
}

/* fuzz_tzif's first find (corpus regress-empty-transitions): a zone without
 * transitions and no transition array (UTC's TZif) must not do arithmetic
 * on a null pointer (UBSan). */
static void test_calendar_regress_empty_transitions(void **state)
{
    struct calendar_zone z;
    int64_t s, e, next;

    (void)state;
    memset(&z, 0, sizeof(z));
    strcpy(z.name, "Etc/UTC");
    assert_int_equal(calendar_offset(&z, NULL, 1700000000, &next), 0);
    assert_true(next == INT64_MAX);
    assert_int_equal(calendar_period(&z, NULL, CALENDAR_DAY, 1700000000000LL, &s, &e), 0);
    assert_int_equal(e - s, 86400000);
}

static void test_calendar_range(void **state)
{
    int64_t s, e;

    (void)state;
    assert_int_equal(calendar_period(NULL, NULL, CALENDAR_DAY, (CALENDAR_T_MAX + 1) * MS, &s, &e),
                     -ERANGE);
    assert_int_equal(calendar_period(NULL, NULL, CALENDAR_NONE, 0, &s, &e), -EINVAL);
    assert_int_equal(calendar_unit_parse("month"), CALENDAR_MONTH);
    assert_int_equal(calendar_unit_parse("months"), CALENDAR_NONE);
}

/* ---- POSIX TZ rules and TZif files ------------------------------------------ */

static void test_calendar_posix_rules(void **state)
{
    struct calendar_zone z;
    static const char *const bad[] = {
        "", "C-1", "CET", "CET-1CEST,M3.5.0", "CET-1CEST,M13.5.0,M10.5.0",
        "CET-1CEST,M3.6.0,M10.5.0", "CET-1CEST,M3.5.7,M10.5.0", "CET-1CEST,J0,J365",
        "CET-1CEST,M3.5.0/168,M10.5.0", "CET-25", "<+03", "<>3", "CET-1CEST,M3.5.0,M10.5.0x",
    };

    (void)state;
    memset(&z, 0, sizeof(z));
    assert_int_equal(tzif_posix_rule("CET-1CEST,M3.5.0,M10.5.0/3", 26, &z), 0);
    assert_int_equal(z.std_off, 3600);
    assert_int_equal(z.dst_off, 7200);
    assert_true(z.has_dst);
    assert_int_equal(z.start.kind, CALENDAR_WHEN_MWD);
    assert_int_equal(z.start.month, 3);
    assert_int_equal(z.start.week, 5);
    assert_int_equal(z.start.secs, 7200);
    assert_int_equal(z.end.secs, 3 * 3600);
    assert_int_equal(tzif_posix_rule("<+0530>-5:30", 12, &z), 0);
    assert_int_equal(z.std_off, 5 * 3600 + 1800);
    assert_false(z.has_dst);
    /* tzcode's default rule, negative and 26-hour times (TZif v3). */
    assert_int_equal(tzif_posix_rule("EST5EDT", 7, &z), 0);
    assert_int_equal(z.std_off, -5 * 3600);
    assert_int_equal(z.dst_off, -4 * 3600);
    assert_int_equal(z.start.month, 3);
    assert_int_equal(tzif_posix_rule("<-02>2<-01>,M3.5.0/-1,M10.5.0/0", 31, &z), 0);
    assert_int_equal(z.start.secs, -3600);
    assert_int_equal(tzif_posix_rule("IST-2IDT,M3.4.4/26,M10.5.0", 26, &z), 0);
    assert_int_equal(z.start.secs, 26 * 3600);
    assert_int_equal(tzif_posix_rule("XXX3YYY,J60/2,300", 17, &z), 0);
    assert_int_equal(z.start.kind, CALENDAR_WHEN_JULIAN1);
    assert_int_equal(z.end.kind, CALENDAR_WHEN_JULIAN0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (tzif_posix_rule(bad[i], strlen(bad[i]), &z) != -EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
    }
}

static uint8_t *read_zone_file(const char *name, size_t *ret_len)
{
    char path[256];
    uint8_t *buf = malloc(TZIF_FILE_MAX);
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", TZIF_DIR, name);
    f = fopen(path, "rb");
    assert_non_null(f);
    assert_non_null(buf);
    *ret_len = fread(buf, 1, TZIF_FILE_MAX, f);
    fclose(f);
    return buf;
}

static int parse(const uint8_t *p, size_t len, char *why, size_t why_len)
{
    struct calendar_zone z;
    struct calendar_trans *tr = NULL;
    uint32_t n = 0;
    int r = tzif_parse(p, len, &z, &tr, &n, why, why_len);

    if (r == 0)
        assert_int_equal(calendar_check(&z, 0, tr, n), 0);
    free(tr);
    return r;
}

static void test_calendar_tzif_malformed(void **state)
{
    char why[256];
    size_t len;
    uint8_t *f = read_zone_file("Europe/Berlin", &len), *c = malloc(len);
    size_t v1_len;

    (void)state;
    assert_non_null(c);
    assert_int_equal(parse(f, len, why, sizeof(why)), 0);
    /* Every truncation is refused, never half-read. */
    for (size_t cut = 0; cut < len - 1; cut++) {
        if (parse(f, cut, why, sizeof(why)) != -EINVAL)
            fail_msg("a file cut at %zu of %zu bytes was accepted", cut, len);
    }
    memcpy(c, f, len);
    memcpy(c, "TZof", 4);
    assert_int_equal(parse(c, len, why, sizeof(why)), -EINVAL);
    assert_string_equal(why, "not a TZif file");
    memcpy(c, f, len);
    c[4] = '9';
    assert_int_equal(parse(c, len, why, sizeof(why)), -EINVAL);
    /* Leap seconds in the v1 header's counts: the block no longer fits. */
    memcpy(c, f, len);
    c[31] = 1;
    assert_int_equal(parse(c, len, why, sizeof(why)), -EINVAL);
    /* The v2 block: its header follows the v1 block. */
    v1_len = 44 + ((size_t)f[32] << 24 | (size_t)f[33] << 16 | (size_t)f[34] << 8 | f[35]) * 5 +
             ((size_t)f[36] << 24 | (size_t)f[37] << 16 | (size_t)f[38] << 8 | f[39]) * 6 +
             ((size_t)f[40] << 24 | (size_t)f[41] << 16 | (size_t)f[42] << 8 | f[43]) +
             ((size_t)f[28] << 24 | (size_t)f[29] << 16 | (size_t)f[30] << 8 | f[31]) * 8 +
             ((size_t)f[24] << 24 | (size_t)f[25] << 16 | (size_t)f[26] << 8 | f[27]) +
             ((size_t)f[20] << 24 | (size_t)f[21] << 16 | (size_t)f[22] << 8 | f[23]);
    assert_memory_equal(f + v1_len, "TZif", 4);
    /* Transitions out of order in the 64-bit data. */
    memcpy(c, f, len);
    if (c[v1_len + 35] >= 2) {
        memset(c + v1_len + 44 + 8, 0x7f, 8);
        assert_int_equal(parse(c, len, why, sizeof(why)), -EINVAL);
    }
    /* A type index past the types. */
    memcpy(c, f, len);
    {
        size_t tc = (size_t)c[v1_len + 32] << 24 | (size_t)c[v1_len + 33] << 16 |
                    (size_t)c[v1_len + 34] << 8 | c[v1_len + 35];

        c[v1_len + 44 + tc * 8] = 0xff;
        assert_int_equal(parse(c, len, why, sizeof(why)), -EINVAL);
    }
    /* A footer that is not a TZ rule, and one without its final newline. */
    memcpy(c, f, len);
    c[len - 3] = '!';
    assert_int_equal(parse(c, len, why, sizeof(why)), -EINVAL);
    assert_string_equal(why, "the TZif footer's TZ rule is malformed");
    memcpy(c, f, len);
    c[len - 1] = 'x';
    assert_int_equal(parse(c, len, why, sizeof(why)), -EINVAL);
    free(c);
    free(f);
}

static void test_calendar_zone_names(void **state)
{
    struct calendar_zone z;
    struct calendar_trans *tr = NULL;
    uint32_t n;
    char why[256];

    (void)state;
    assert_true(tzif_name_ok("Europe/Berlin"));
    assert_true(tzif_name_ok("America/Argentina/Buenos_Aires"));
    assert_true(tzif_name_ok("Etc/GMT+5"));
    assert_false(tzif_name_ok("../etc/passwd"));
    assert_false(tzif_name_ok("/etc/passwd"));
    assert_false(tzif_name_ok("Europe/../../x"));
    assert_false(tzif_name_ok("Europe//Berlin"));
    assert_false(tzif_name_ok("Europe/"));
    assert_false(tzif_name_ok(""));
    assert_int_equal(tzif_load("Mars/Olympus", &z, &tr, &n, why, sizeof(why)), -ENOENT);
    assert_int_equal(tzif_load("..", &z, &tr, &n, why, sizeof(why)), -EINVAL);
    /* A directory is not a zone. */
    assert_true(tzif_load("Europe", &z, &tr, &n, why, sizeof(why)) < 0);
}

static void test_calendar_check_records(void **state)
{
    struct calendar_zone z;
    struct calendar_trans tr[2] = { { .at = 100, .off = 3600 }, { .at = 200, .off = 0 } };

    (void)state;
    memset(&z, 0, sizeof(z));
    strcpy(z.name, "X/Y");
    z.n = 2;
    assert_int_equal(calendar_check(&z, 1, tr, 2), 0);
    z.n = 3;
    assert_int_equal(calendar_check(&z, 1, tr, 2), -EBADMSG);
    z.n = 2;
    tr[1].at = 100;
    assert_int_equal(calendar_check(&z, 1, tr, 2), -EBADMSG);
    tr[1].at = 200;
    tr[1].off = CALENDAR_OFF_MAX + 1;
    assert_int_equal(calendar_check(&z, 1, tr, 2), -EBADMSG);
    tr[1].off = 0;
    memset(z.name, 'x', sizeof(z.name));
    assert_int_equal(calendar_check(&z, 1, tr, 2), -EBADMSG);
    strcpy(z.name, "X/Y");
    z.has_dst = 1;
    z.start.kind = CALENDAR_WHEN_MWD;
    z.start.month = 13;
    z.end.kind = CALENDAR_WHEN_JULIAN0;
    assert_int_equal(calendar_check(&z, 1, tr, 2), -EBADMSG);
    z.start.month = 3;
    z.start.week = 5;
    assert_int_equal(calendar_check(&z, 1, tr, 2), 0);
}

/* ---- the blob and the algorithm's hook -------------------------------------- */

/* Loads @text as a divvy.conf (config_load(): loader and validation). */
static int load(const char *text, struct config **ret, struct diag *d)
{
    char path[] = "/tmp/test_calendar.XXXXXX";
    int fd = mkstemp(path), r;

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    diag_init(d);
    r = config_load(path, ret, d);
    unlink(path);
    return r;
}

static struct rules *compile(const char *text)
{
    struct config *cfg = NULL;
    struct rules *rs = NULL;
    struct diag d;

    if (load(text, &cfg, &d) < 0 || rules_compile(&cfg->rules, 1, &rs, &d) < 0)
        fail_msg("%s:%u: %s", d.n ? d.e[0].file : "", d.n ? d.e[0].line : 0,
                 d.n ? d.e[0].msg : "?");
    config_free(cfg);
    return rs;
}

static void test_calendar_blob(void **state)
{
    struct rules *rs = compile(
        "rules = ( { match = { a = \"1\"; }; credit_limit = 1000; calendar = \"month\";\n"
        "            time_zone = \"Europe/Berlin\"; },\n"
        "          { match = { a = \"2\"; }; credit_limit = 5; calendar = \"day\"; },\n"
        "          { default = true; credit_limit = 1; reset_seconds = 1; } );\n");
    struct rules *back = NULL;
    struct rules_rule r;
    const void *data;
    size_t len;
    uint8_t *copy;
    int64_t s, e;
    struct blob_hdr *h;
    struct blob_rule *br;

    (void)state;
    assert_int_equal(rules_get(rs, 0, &r), 0);
    assert_int_equal(r.calendar, CALENDAR_MONTH);
    assert_string_equal(r.time_zone, "Europe/Berlin");
    assert_int_equal(rules_get(rs, 1, &r), 0);
    assert_string_equal(r.time_zone, "UTC");
    assert_int_equal(rules_get(rs, 2, &r), 0);
    assert_int_equal(r.calendar, 0);
    assert_int_equal(rules_period(rs, 0, 1796079599 * MS, &s, &e), 0);
    assert_int_equal(e, 1796079600 * MS);
    assert_int_equal(rules_period(rs, 2, 0, &s, &e), -EINVAL);
    /* A copy read back is the same; a corrupt zone index or transition is refused. */
    rules_blob(rs, &data, &len);
    assert_int_equal(rules_from_blob(data, len, &back), 0);
    rules_free(back);
    copy = malloc(len);
    assert_non_null(copy);
    memcpy(copy, data, len);
    h = (struct blob_hdr *)copy;
    br = (struct blob_rule *)(copy + h->rule_off);
    assert_int_equal(h->n_zone, 1);
    br[0].zone = 1;
    assert_int_equal(rules_from_blob(copy, len, &back), -EBADMSG);
    br[0].zone = 0;
    br[0].calendar = CALENDAR_UNIT_MAX + 1;
    assert_int_equal(rules_from_blob(copy, len, &back), -EBADMSG);
    br[0].calendar = CALENDAR_MONTH;
    ((struct calendar_trans *)(copy + h->ztrans_off))[1].at = INT64_MIN;
    assert_int_equal(rules_from_blob(copy, len, &back), -EBADMSG);
    memcpy(copy, data, len);
    h->n_ztrans += 1000;
    assert_int_equal(rules_from_blob(copy, len, &back), -EBADMSG);
    free(copy);
    rules_free(rs);
}

static void test_calendar_config_errors(void **state)
{
    static const char *const bad[][2] = {
        { "calendar = \"month\"; time_zone = \"Mars/Olympus\";", "unknown time_zone" },
        { "calendar = \"month\"; reset_seconds = 60;", "reset_seconds and reset_ms do not go" },
        { "time_zone = \"UTC\"; reset_seconds = 60;", "time_zone needs calendar" },
        { "calendar = \"month\"; algorithm = \"token_bucket\"; refill_seconds = 1;",
          "calendar needs algorithm window" },
        { "calendar = \"month\"; store = \"lease\";", "cannot be leased" },
        { "calendar = \"fortnight\";", "calendar must be" },
        { "calendar = 3;", "calendar must be a string" },
        { "calender = \"month\";", "did you mean 'calendar'" },
        { "timezone = \"UTC\";", "did you mean 'time_zone'" },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[512];
        struct config *cfg = NULL;
        struct rules *rs = NULL;
        struct diag d;
        int r;

        snprintf(text, sizeof(text),
                 "rules = ( { match = { a = \"1\"; }; credit_limit = 10;\n  %s },\n"
                 "  { default = true; credit_limit = 1; reset_seconds = 1; } );\n", bad[i][0]);
        r = load(text, &cfg, &d);
        if (r >= 0)
            r = rules_compile(&cfg->rules, 1, &rs, &d);
        assert_true(r < 0);
        assert_true(d.n >= 1);
        if (!strstr(d.e[0].msg, bad[i][1]) || d.e[0].line != 2)
            fail_msg("%s: got %s:%u: %s", bad[i][0], d.e[0].file, d.e[0].line, d.e[0].msg);
        rules_free(rs);
        config_free(cfg);
    }
}

static void test_calendar_window_hook(void **state)
{
    struct table_limits lim;
    struct algo_state st = { 0, 0, false };
    struct table_result res;

    (void)state;
    memset(&lim, 0, sizeof(lim));
    lim.algo = RULES_ALGO_WINDOW;
    lim.credit_limit = 2;
    lim.reset_ms = calendar_nominal_ms(CALENDAR_MONTH);
    /* The period ends at 5000 (monotonic): the window started at 1000 ends there. */
    lim.window_end_ms = 5000;
    algo_apply(&lim, TABLE_TAKE, 2, 1000, &st, &st, &res);
    assert_true(res.allowed);
    assert_int_equal(res.reset_ms, 4000);
    assert_int_equal(st.idle, 5000);
    algo_apply(&lim, TABLE_TAKE, 1, 4999, &st, &st, &res);
    assert_false(res.allowed);
    assert_int_equal(res.reset_ms, 1);
    /* The next period (ending at 9000): the count of the last one is gone. */
    lim.window_end_ms = 9000;
    algo_apply(&lim, TABLE_TAKE, 1, 5000, &st, &st, &res);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 1);
    assert_int_equal(res.reset_ms, 4000);
    /* Without a period end, a window of reset_ms as ever. */
    lim.window_end_ms = 0;
    memset(&st, 0, sizeof(st));
    algo_apply(&lim, TABLE_TAKE, 1, 10, &st, &st, &res);
    assert_int_equal(res.reset_ms, lim.reset_ms);
}

static void test_calendar_eval_end(void **state)
{
    struct rules *rs = compile(
        "rules = ( { match = { a = \"1\"; }; credit_limit = 1000; calendar = \"month\"; },\n"
        "          { default = true; credit_limit = 1; reset_seconds = 1; } );\n");
    struct rules_rule r;
    uint64_t end;

    (void)state;
    assert_int_equal(rules_get(rs, 0, &r), 0);
    /* 2026-01-31T23:59:59.500Z at monotonic 7000: the month ends 500 ms later. */
    assert_int_equal(eval_calendar_end(rs, &r, 7000, 1769903999500LL, &end), 0);
    assert_int_equal(end, 7500);
    assert_int_equal(rules_get(rs, 1, &r), 0);
    assert_int_equal(eval_calendar_end(rs, &r, 7000, 0, &end), -EINVAL);
    rules_free(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calendar_month_end_utc),
        cmocka_unit_test(test_calendar_february),
        cmocka_unit_test(test_calendar_iso_week),
        cmocka_unit_test(test_calendar_hour_and_day_utc),
        cmocka_unit_test(test_calendar_berlin_dst_days),
        cmocka_unit_test(test_calendar_footer_far_future),
        cmocka_unit_test(test_calendar_half_hour_zone),
        cmocka_unit_test(test_calendar_regress_empty_transitions),
        cmocka_unit_test(test_calendar_range),
        cmocka_unit_test(test_calendar_posix_rules),
        cmocka_unit_test(test_calendar_tzif_malformed),
        cmocka_unit_test(test_calendar_zone_names),
        cmocka_unit_test(test_calendar_check_records),
        cmocka_unit_test(test_calendar_blob),
        cmocka_unit_test(test_calendar_config_errors),
        cmocka_unit_test(test_calendar_window_hook),
        cmocka_unit_test(test_calendar_eval_end),
    };

    return cmocka_run_group_tests_name("calendar", tests, NULL, NULL);
}
