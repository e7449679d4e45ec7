/* SPDX-License-Identifier: MIT */
/*
 * Integration: calendar windows (docs/rules.md "Calendar windows") with a
 * real divvyd.  "1,000 per month" (here 3 per month, to reach the limit) on
 * the line protocol answers nextResetSeconds as the seconds to the end of
 * the month, in UTC and in Europe/Berlin, and RESP's DIVVY.HIT and RLS
 * (Envoy's gRPC: per MONTH) the same; a per-day rule in Berlin is decided
 * by libdivvy's fast path in-process (DIVVY_FAST_ONLY) with the same reset;
 * a strict rule decided by a real redis-server answers the month's end and
 * leaves the key's TTL there; and the window script picks the period Redis's
 * clock is in when the host's clock is ahead or behind (docs/redis.md).
 * A month window crosses January 31 -> February 1 end to end with divvyd's
 * wall clock set by libfaketime (its monotonic clock left real).
 * Every expected end is computed here independently: timegm() for UTC,
 * mktime() under TZ=Europe/Berlin (this test process may set TZ; divvyd
 * never does).  Margins are a few seconds: no tight timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "divvy.h"
#include "harness_grpc.h"
#include "harness_redis.h"
#include "resp_client.h"

#include "daemon/store.h"

#define SLACK 3                 /* seconds between our clock read and divvyd's answer */

/* Unix time of the first instant of the month (@month) or day after @now's,
 * in @tz (NULL: UTC, by timegm()). */
static time_t next_start(time_t now, const char *tz, bool month)
{
    struct tm tm;
    time_t end;

    if (tz) {
        setenv("TZ", tz, 1);
        tzset();
        localtime_r(&now, &tm);
    } else {
        gmtime_r(&now, &tm);
    }
    tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
    if (month) {
        tm.tm_mday = 1;
        tm.tm_mon++;
    } else {
        tm.tm_mday++;
    }
    tm.tm_isdst = -1;
    if (!tz)
        return timegm(&tm);
    end = mktime(&tm);
    unsetenv("TZ");
    tzset();
    return end;
}

static time_t next_month(time_t now, const char *tz)
{
    return next_start(now, tz, true);
}

static time_t next_day(time_t now, const char *tz)
{
    return next_start(now, tz, false);
}

/* Waits past a boundary that is only seconds away, so no answer straddles it. */
static void not_near(time_t end)
{
    time_t now = time(NULL);

    if (end - now < 2 * SLACK)
        harness_pause_ms((unsigned)(end - now + 1) * 1000);
}

static void reset_near(long long got, time_t end, time_t now)
{
    long long want = (long long)(end - now);

    if (got < want - SLACK || got > want + SLACK)
        fail_msg("nextResetSeconds %lld, the period ends in %lld s", got, want);
}

/* Four HITs @req on a rule of 3 per month in @tz: 3 allowed, then denied,
 * each answering the month's end. */
static void month_of_three(struct harness_conn *c, const char *req, const char *tz)
{
    char reply[512];
    long long credit, secs;
    bool allowed;
    time_t now;

    for (int i = 0; i < 4; i++) {
        now = time(NULL);
        CHECK(harness_cmd(c, req, reply, sizeof(reply)));
        CHECK(harness_parse_ok(reply, &allowed, &credit, &secs));
        assert_int_equal(allowed, i < 3);
        assert_int_equal(credit, i < 3 ? 2 - i : 0);
        reset_near(secs, next_month(now, tz), now);
    }
}

static const char conf[] =
    "table = { fast_slots = 4096; };\n"
    "rules = (\n"
    "    { label = \"month-utc\"; match = { api = \"utc\"; }; credit_limit = 3;\n"
    "      calendar = \"month\"; },\n"
    "    { label = \"month-berlin\"; match = { api = \"berlin\"; }; actor = \"user\";\n"
    "      credit_limit = 3; algorithm = \"window\"; calendar = \"month\";\n"
    "      time_zone = \"Europe/Berlin\"; },\n"
    "    { label = \"day-fast\"; match = { api = \"fast\"; }; credit_limit = 1000;\n"
    "      calendar = \"day\"; time_zone = \"Europe/Berlin\"; fast_path = true; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static void test_calendar_month_socket(void **state)
{
    struct harness_opts o = { .config_name = "cal.conf", .config_text = conf, .workers = 1,
                              .resp = true };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;
    char reply[512], rules[4096];
    long long credit, secs;
    bool allowed;

    (void)state;
    not_near(next_month(time(NULL), NULL));
    not_near(next_month(time(NULL), "Europe/Berlin"));
    CHECK(harness_start(&o, &d));
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    month_of_three(c, "HIT api=utc", NULL);
    month_of_three(c, "HIT api=berlin user=ann", "Europe/Berlin");
    /* Another actor has its own month. */
    CHECK(harness_cmd(c, "HIT api=berlin user=bob", reply, sizeof(reply)));
    CHECK(harness_parse_ok(reply, &allowed, &credit, &secs));
    assert_true(allowed);
    assert_int_equal(credit, 2);
    /* RESP's DIVVY.HIT walks the same rules: January's (this month's) count
     * is spent, the reply names the rule and the month's end. */
    {
        struct harness_conn *rc = NULL;
        char got[256];
        long long a = -1, cr = -1, sec = -1;
        time_t now = time(NULL);

        CHECK(harness_connect_unix(d->resp_sock, &rc));
        SEND_CMD(rc, "DIVVY.HIT", "api", "utc");
        got[0] = '\0';
        CHECK(resp_read(rc, got, sizeof(got)));
        if (sscanf(got, "*4 :%lld :%lld :%lld", &a, &cr, &sec) != 3 ||
            !strstr(got, "$month-utc"))
            fail_msg("DIVVY.HIT: %s", got);
        assert_int_equal(a, 0);
        assert_int_equal(cr, 0);
        reset_near(sec, next_month(now, NULL), now);
        harness_close(rc);
    }
    /* RULES names the calendar and the zone. */
    CHECK(harness_multi(c, "RULES", rules, sizeof(rules)));
    assert_non_null(strstr(rules, "calendar=month time_zone=Europe/Berlin"));
    assert_non_null(strstr(rules, "label=\"month-utc\""));
    /* divvyctl rules shows the period as the calendar's. */
    {
        struct harness_ctl *ctl = harness_ctl_run(
            false, NULL, 0, (const char *const[]){ "-s", d->sock, "rules", NULL });

        assert_non_null(strstr(ctl->out, "month Europe/Berlin"));
        assert_non_null(strstr(ctl->out, "day Europe/Berlin"));
    }
    harness_close(c);
    harness_free(d);
}

static void test_calendar_day_fast_path(void **state)
{
    struct harness_opts o = { .config_name = "cal.conf", .config_text = conf, .workers = 1 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;
    const struct divvy_kv kv[] = { { "api", "fast" } };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy *h = NULL;
    char reply[512];
    long long credit, secs;
    bool allowed;
    time_t now;

    (void)state;
    not_near(next_day(time(NULL), "Europe/Berlin"));
    CHECK(harness_start(&o, &d));
    CHECK(harness_divvy_env(d));
    CHECK(divvy_open(NULL, DIVVY_AUTO, &h));
    harness_wait_fast(h, kv, 1);
    divvy_close(h);
    h = NULL;
    /* In-process only: a hit that needed divvyd would be -ENOTSUP. */
    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &h));
    for (int i = 0; i < 5; i++) {
        now = time(NULL);
        CHECK(divvy_take(h, 10, kv, 1, &res));
        assert_int_equal(res.allowed, 1);
        assert_int_equal(res.fast_path, 1);
        assert_int_equal(res.credit, 1000 - 10 * (i + 1));
        reset_near((long long)res.reset_seconds, next_day(now, "Europe/Berlin"), now);
    }
    divvy_close(h);
    /* divvyd sees the same counter and the same day. */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    now = time(NULL);
    CHECK(harness_cmd(c, "HIT api=fast", reply, sizeof(reply)));
    CHECK(harness_parse_ok(reply, &allowed, &credit, &secs));
    assert_true(allowed);
    assert_int_equal(credit, 949);
    reset_near(secs, next_day(now, "Europe/Berlin"), now);
    harness_close(c);
    harness_free(d);
}

static void test_calendar_month_strict(void **state)
{
    static const char rules[] =
        "    { label = \"m\"; match = { api = \"utc\"; }; credit_limit = 3;\n"
        "      calendar = \"month\"; store = \"strict\"; },\n"
        "    { default = true; credit_limit = 0; reset_seconds = 0; }\n";
    struct redis_srv *rs = NULL;
    struct harness_daemon *d;
    struct harness_conn *c = NULL;
    char *text;
    long long pttl;
    time_t now;

    (void)state;
    not_near(next_month(time(NULL), NULL));
    CHECK(redis_start(&rs));
    text = redis_config(rs, "local", "closed", 2000, NULL, rules);
    assert_non_null(text);
    d = redis_divvyd(text, 1);
    free(text);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    month_of_three(c, "HIT api=utc", NULL);
    /* Redis holds the count, expiring at the month's end by its own clock. */
    now = time(NULL);
    assert_int_equal(redis_int(rs, "GET divvy:{m:}"), 3);
    pttl = redis_int(rs, "PTTL divvy:{m:}");
    reset_near(pttl / 1000, next_month(now, NULL), now);
    harness_close(c);
    redis_divvyd_stop(d);
    redis_stop(rs);
}

/* The window script's ARGV[5..7] with the period placed around Redis's TIME. */
static struct store_verdict cal_window(redisContext *rc, const char *key, int64_t start,
                                       int64_t end, int64_t next)
{
    struct store_window_args a = { .op = STORE_TAKE, .n = 1, .limit = 5,
                                   .reset_ms = 31 * 86400000LL, .cal_start_ms = start,
                                   .cal_end_ms = end, .cal_next_ms = next };
    struct store_call call;
    const char *argv[4 + STORE_SCRIPT_ARGV_MAX];
    struct store_reply out;
    redisReply *rep;
    int argc = 0;

    store_script_window(&a, &call);
    argv[argc++] = "EVAL";
    argv[argc++] = store_script_source(call.script);
    argv[argc++] = "1";
    argv[argc++] = key;
    for (unsigned i = 0; i < call.argc; i++)
        argv[argc++] = call.argv[i];
    rep = redisCommandArgv(rc, argc, argv, NULL);
    assert_non_null(rep);
    if (rep->type == REDIS_REPLY_ERROR)
        fail_msg("EVAL: %s", rep->str);
    assert_int_equal(store_script_decode(call.script, rep, &out), 0);
    freeReplyObject(rep);
    return out.verdict;
}

static int64_t redis_now_ms(redisContext *rc)
{
    redisReply *rep = redisCommand(rc, "TIME");
    int64_t ms;

    assert_true(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
    ms = atoll(rep->element[0]->str) * 1000 + atoll(rep->element[1]->str) / 1000;
    freeReplyObject(rep);
    return ms;
}

static void test_calendar_strict_skew(void **state)
{
    struct redis_srv *rs = NULL;
    redisContext *rc;
    struct store_verdict v;
    int64_t now;

    (void)state;
    CHECK(redis_start(&rs));
    rc = redis_cli(rs);
    assert_non_null(rc);
    now = redis_now_ms(rc);
    /* Host and Redis agree: the period ends 100 s from now. */
    v = cal_window(rc, "k1", now - 50000, now + 100000, now + 200000);
    assert_true(v.allowed);
    assert_true(v.reset_ms > 95000 && v.reset_ms <= 100000);
    /* The host is behind: its period ended 10 s ago by Redis's clock, so the
     * window is the next period's, which ends in 90 s. */
    v = cal_window(rc, "k2", now - 100000, now - 10000, now + 90000);
    assert_true(v.reset_ms > 85000 && v.reset_ms <= 90000);
    /* The host is ahead: its period starts in 10 s by Redis's clock, so the
     * window is the one that ends then. */
    v = cal_window(rc, "k3", now + 10000, now + 100000, now + 200000);
    assert_true(v.reset_ms > 5000 && v.reset_ms <= 10000);
    /* A host more than a period behind: the nominal length, never a 1 ms window. */
    v = cal_window(rc, "k5", now - 300000, now - 200000, now - 100000);
    assert_int_equal(v.reset_ms, 31 * 86400000LL);
    /* A rolling window (no calendar) is as ever. */
    v = cal_window(rc, "k4", 0, 0, 0);
    assert_int_equal(v.reset_ms, 31 * 86400000LL);
    redisFree(rc);
    redis_stop(rs);
}

/* libfaketime (Debian package faketime): divvyd's wall clock set to a chosen
 * instant, its monotonic clock left alone. */
static const char *faketime_lib(void)
{
    static const char *const paths[] = {
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
    };

    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        if (access(paths[i], R_OK) == 0)
            return paths[i];
    }
    return NULL;
}

/*
 * A month window end to end across January 31 -> February 1: divvyd's wall
 * clock starts at 2026-01-31T23:59:45Z (libfaketime).  January's quota is
 * spent, the reply says the seconds to midnight; right after midnight the
 * same counter has February's full quota and the seconds to March 1.  The
 * Berlin rule is already in February (00:59 there) and ends at Berlin's
 * March 1, 2026-02-28T23:00Z.
 */
static void test_calendar_month_rollover(void **state)
{
    static const char rules[] =
        "rules = (\n"
        "    { label = \"jan\"; match = { api = \"utc\"; }; credit_limit = 2;\n"
        "      calendar = \"month\"; },\n"
        "    { label = \"berlin\"; match = { api = \"berlin\"; }; credit_limit = 2;\n"
        "      calendar = \"month\"; time_zone = \"Europe/Berlin\"; },\n"
        "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    struct harness_opts o = { .config_name = "cal.conf", .config_text = rules, .workers = 1 };
    const time_t feb1 = 1769904000, mar1 = 1772323200, berlin_mar1 = 1772319600;
    const char *lib = faketime_lib(), *asan;
    char asan_was[512], asan_now[600];
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;
    char reply[512];
    long long credit, secs, left;
    bool allowed;
    int r;

    (void)state;
    if (!lib) {
        fprintf(stderr, "  (no libfaketime: apt-get install faketime; skipping)\n");
        skip();
    }
    /* An ASan build of divvyd accepts a preloaded library after its runtime. */
    asan = getenv("ASAN_OPTIONS");
    snprintf(asan_was, sizeof(asan_was), "%s", asan ? asan : "");
    snprintf(asan_now, sizeof(asan_now), "%s%sverify_asan_link_order=0", asan_was,
             asan_was[0] ? ":" : "");
    setenv("ASAN_OPTIONS", asan_now, 1);
    setenv("LD_PRELOAD", lib, 1);
    setenv("FAKETIME", "@2026-01-31 23:59:45", 1);
    setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
    r = harness_start(&o, &d);
    unsetenv("LD_PRELOAD");
    unsetenv("FAKETIME");
    unsetenv("FAKETIME_DONT_FAKE_MONOTONIC");
    if (asan)
        setenv("ASAN_OPTIONS", asan_was, 1);
    else
        unsetenv("ASAN_OPTIONS");
    CHECK(r);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "HIT api=utc", reply, sizeof(reply)));
    CHECK(harness_parse_ok(reply, &allowed, &credit, &secs));
    assert_true(allowed);
    /* Fewer than 15 s to midnight: divvyd's clock is January 31's last minute. */
    if (secs < 1 || secs > 15)
        fail_msg("nextResetSeconds %lld at 23:59:45 + startup", secs);
    left = secs;
    CHECK(harness_cmd(c, "HIT api=utc", reply, sizeof(reply)));
    CHECK(harness_parse_ok(reply, &allowed, &credit, &secs));
    assert_true(allowed && credit == 0);
    CHECK(harness_cmd(c, "HIT api=utc", reply, sizeof(reply)));
    CHECK(harness_parse_ok(reply, &allowed, &credit, &secs));
    assert_false(allowed);
    assert_true(secs <= left);
    CHECK(harness_cmd(c, "HIT api=berlin", reply, sizeof(reply)));
    CHECK(harness_parse_ok(reply, &allowed, &credit, &secs));
    assert_true(allowed);
    reset_near(secs, berlin_mar1, feb1 - (time_t)left);
    /* Past midnight: February's quota, to March 1. */
    harness_pause_ms((unsigned)(left + 2) * 1000);
    CHECK(harness_cmd(c, "HIT api=utc", reply, sizeof(reply)));
    CHECK(harness_parse_ok(reply, &allowed, &credit, &secs));
    assert_true(allowed);
    assert_int_equal(credit, 1);
    if (secs > mar1 - feb1 || secs < mar1 - feb1 - 30)
        fail_msg("nextResetSeconds %lld just after February 1, want about %lld", secs,
                 (long long)(mar1 - feb1));
    harness_close(c);
    harness_free(d);
}

/* RLS (Envoy's gRPC service, node's grpc-js client): a calendar rule's
 * current_limit is per HOUR, DAY or MONTH (none for a week) and its
 * duration_until_reset the period's end. */
static void test_calendar_rls(void **state)
{
    static const char rules[] =
        "rules = (\n"
        "  { match = { domain = \"edge\"; plan = \"month\"; }; label = \"monthly\";\n"
        "    credit_limit = 1000; calendar = \"month\"; },\n"
        "  { match = { domain = \"edge\"; plan = \"week\"; }; label = \"weekly\";\n"
        "    credit_limit = 70; calendar = \"week\"; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    struct harness_rls *r;
    json_t *res, *resp;
    time_t now, end;

    (void)state;
    harness_grpc_need();
    not_near(next_month(time(NULL), NULL));
    r = harness_rls_start(rules);
    now = time(NULL);
    end = next_month(now, NULL);
    res = harness_grpc_run(r->tcp, "{\"calls\":[{\"domain\":\"edge\",\"descriptors\":["
                           "{\"entries\":[{\"key\":\"plan\",\"value\":\"month\"}]},"
                           "{\"entries\":[{\"key\":\"plan\",\"value\":\"week\"}]}]}]}");
    resp = harness_grpc_resp(res, 0);
    harness_grpc_overall(resp, "OK", 2);
    /* The node client takes seconds to start on a loaded machine. */
    harness_grpc_status(resp, 0, "OK", "monthly", 1000, "MONTH", 999,
                        (long long)(end - now) - 30, (long long)(end - now) + SLACK);
    harness_grpc_status(resp, 1, "OK", NULL, 0, NULL, 69, 1, 7 * 86400);
    json_decref(res);
    harness_rls_stop(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_calendar_month_socket, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_calendar_day_fast_path, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_calendar_month_rollover, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_calendar_month_strict, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_calendar_strict_skew, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_calendar_rls, harness_setup, harness_teardown),
    };

    return cmocka_run_group_tests_name("calendar_paths", tests, harness_grpc_setup,
                                       harness_grpc_teardown);
}
