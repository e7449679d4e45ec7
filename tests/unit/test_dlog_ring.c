/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for a worker's decision log buffer (daemon/dlog_ring.c): records come out as
 * they went in, across the wrap; a full ring drops and counts, and says so with a GAP
 * record before the next record that fits; fast-path reports never take the second half
 * (divvyd's own decisions still fit there) and are always marked as reports.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "daemon/dlog_ring.h"

#define CAP (64u << 10)

/* An error decision (no rules needed) with pairs tag=@tag, pad=@pad bytes of 'x'. */
static bool put(struct dlog_ring *rg, unsigned tag, size_t pad, bool *kick)
{
    static char val[PROTO_LINE_MAX], tagbuf[16];
    struct proto_kv kv[2];
    struct dlog_note no = { .kv = kv, .n_kv = 2, .op = 0, .flags = DLOG_F_ERROR, .err = 3,
                            .uid = 7, .pid = 9, .mono_ms = 1000 + tag, .generation = 4, .n = 1 };

    memset(val, 'x', pad);
    snprintf(tagbuf, sizeof(tagbuf), "%u", tag);
    kv[0] = (struct proto_kv){ .key = "pad", .key_len = 3, .value = val,
                               .value_len = (uint16_t)pad };
    kv[1] = (struct proto_kv){ .key = "tag", .key_len = 3, .value = tagbuf,
                               .value_len = (uint16_t)strlen(tagbuf) };
    return dlog_ring_put(rg, &no, NULL, NULL, kick);
}

/* The next record must be decision @tag with @pad bytes of padding. */
static void expect(struct dlog_ring *rg, struct dlog_decision *d, unsigned tag, size_t pad)
{
    uint64_t dropped, mono;
    char want[16];

    assert_int_equal(dlog_ring_next(rg, d, &dropped, &mono), DLOG_RAW_DECISION);
    snprintf(want, sizeof(want), "%u", tag);
    assert_int_equal(d->n_kv, 2);
    assert_int_equal(d->kv[0].value_len, pad);
    for (size_t i = 0; i < pad; i++)
        assert_int_equal(d->kv[0].value[i], 'x');
    assert_int_equal(d->kv[1].value_len, strlen(want));
    assert_memory_equal(d->kv[1].value, want, strlen(want));
    assert_int_equal(d->mono_ms, 1000 + tag);
    assert_int_equal(d->uid, 7);
    assert_int_equal(d->pid, 9);
    assert_int_equal(d->flags, DLOG_F_ERROR);
    assert_int_equal(d->err, 3);
    assert_int_equal(d->generation, 4);
    dlog_ring_release(rg);
}

static void test_dlog_ring_round_trip_across_wrap(void **state)
{
    struct dlog_ring *rg = dlog_ring_new(CAP);
    struct dlog_decision *d = calloc(1, sizeof(*d));
    uint64_t dropped, mono;
    bool kick = false;

    (void)state;
    assert_non_null(rg);
    /* Sizes that do not divide the ring: records meet its end at every offset. */
    for (unsigned i = 0; i < 4800; i++) {
        assert_true(put(rg, i, (i * 37) % 1500, &kick));
        if (i % 3 == 2)
            for (unsigned j = i - 2; j <= i; j++)
                expect(rg, d, j, (j * 37) % 1500);
    }
    assert_int_equal(dlog_ring_next(rg, d, &dropped, &mono), DLOG_RAW_NONE);
    assert_int_equal(dlog_ring_dropped(rg), 0);
    free(d);
    dlog_ring_free(rg);
}

static void test_dlog_ring_full_drops_then_gap(void **state)
{
    struct dlog_ring *rg = dlog_ring_new(CAP);
    struct dlog_decision *d = calloc(1, sizeof(*d));
    uint64_t dropped = 0, mono = 0;
    unsigned n = 0, lost = 0;
    bool kick = false;

    (void)state;
    while (put(rg, n, 1000, &kick))
        n++;
    assert_true(kick);              /* the drain was woken on the way */
    if (n < CAP / 1100 || n > CAP / 1000)
        fail_msg("%u records of 1000 bytes in a ring of %u", n, CAP);
    for (unsigned i = 0; i < 5; i++)
        assert_false(put(rg, 100000 + i, 1000, &kick));
    lost = 6;
    assert_int_equal(dlog_ring_dropped(rg), lost);
    for (unsigned i = 0; i < n; i++)
        expect(rg, d, i, 1000);
    dlog_ring_rearm(rg);
    /* Room again: the gap first, when the last drop happened, then the record. */
    assert_true(put(rg, 7, 10, &kick));
    assert_int_equal(dlog_ring_next(rg, d, &dropped, &mono), DLOG_RAW_GAP);
    assert_int_equal(dropped, lost);
    assert_int_equal(mono, 1000 + 100004);
    dlog_ring_release(rg);
    expect(rg, d, 7, 10);
    assert_int_equal(dlog_ring_next(rg, d, &dropped, &mono), DLOG_RAW_NONE);
    free(d);
    dlog_ring_free(rg);
}

static void report(struct dlog_decision *r, unsigned tag, char *buf)
{
    memset(r, 0, sizeof(*r));
    snprintf(buf, 16, "%u", tag);
    r->protocol = DLOG_PROTO_LINE;      /* a client that pretends */
    r->flags = DLOG_F_ALLOWED;
    r->n = 1;
    r->uid = 1000;
    r->pid = 4242;
    r->mono_ms = tag;
    r->n_kv = 1;
    r->kv[0] = (struct dlog_kv){ .key = "tag", .key_len = 3, .value = buf,
                                 .value_len = (uint32_t)strlen(buf) };
    r->n_out = 1;
    r->out[0] = (struct dlog_outcome){ .rule_id = 0x1234, .credit = 5, .flags = DLOG_O_ALLOWED };
    r->decider_id = 0x1234;
    r->path = DLOG_PATH_LOCAL;
}

static void test_dlog_ring_reports_keep_to_the_first_half(void **state)
{
    struct dlog_ring *rg = dlog_ring_new(CAP);
    struct dlog_decision *r = calloc(1, sizeof(*r)), *d = calloc(1, sizeof(*d));
    uint64_t dropped, mono;
    unsigned reports = 0, own = 0;
    bool kick = false;
    char buf[16];
    int rc;

    (void)state;
    for (;;) {
        report(r, reports, buf);
        rc = dlog_ring_put_report(rg, r, &kick);
        if (rc < 0)
            break;
        reports++;
    }
    assert_int_equal(rc, -ENOSPC);
    assert_true(reports > 0);
    assert_int_equal(dlog_ring_dropped(rg), 1);
    /* divvyd's own decisions still have the second half. */
    while (put(rg, own, 100, &kick))
        own++;
    /* Records of 200 bytes: the second half holds them, less one for the wrap. */
    if (own * 200 < CAP / 2 - 2 * 200)
        fail_msg("%u of divvyd's own records after %u reports", own, reports);
    for (unsigned i = 0; i < reports; i++) {
        assert_int_equal(dlog_ring_next(rg, d, &dropped, &mono), DLOG_RAW_DECISION);
        /* Marked as a report whatever the client said. */
        assert_int_equal(d->protocol, DLOG_PROTO_FAST);
        assert_int_equal(d->flags, DLOG_F_ALLOWED | DLOG_F_REPORTED);
        assert_int_equal(d->uid, 1000);
        assert_int_equal(d->pid, 4242);
        assert_int_equal(d->n_out, 1);
        assert_int_equal(d->out[0].rule_id, 0x1234);
        assert_int_equal(d->out[0].credit, 5);
        assert_int_equal(d->decider_id, 0x1234);
        assert_int_equal(d->path, DLOG_PATH_LOCAL);
        snprintf(buf, sizeof(buf), "%u", i);
        assert_int_equal(d->kv[0].value_len, strlen(buf));
        assert_memory_equal(d->kv[0].value, buf, strlen(buf));
        dlog_ring_release(rg);
    }
    /* The dropped report's gap comes with the first record that fit after it. */
    assert_int_equal(dlog_ring_next(rg, d, &dropped, &mono), DLOG_RAW_GAP);
    assert_int_equal(dropped, 1);
    dlog_ring_release(rg);
    for (unsigned i = 0; i < own; i++)
        expect(rg, d, i, 100);
    free(r);
    free(d);
    dlog_ring_free(rg);
}

static void test_dlog_ring_report_bounds(void **state)
{
    struct dlog_ring *rg = dlog_ring_new(CAP);
    struct dlog_decision *r = calloc(1, sizeof(*r));
    bool kick = false;
    char buf[16];

    (void)state;
    report(r, 1, buf);
    r->n_kv = PROTO_KV_MAX + 1;
    assert_int_equal(dlog_ring_put_report(rg, r, &kick), -EINVAL);
    report(r, 1, buf);
    r->n_out = RULES_MATCH_MAX + 1;
    assert_int_equal(dlog_ring_put_report(rg, r, &kick), -EINVAL);
    report(r, 1, buf);
    r->kv[0].value_len = 70000;
    assert_int_equal(dlog_ring_put_report(rg, r, &kick), -EINVAL);
    report(r, 1, buf);
    r->path = DLOG_N_PATH;
    assert_int_equal(dlog_ring_put_report(rg, r, &kick), -EINVAL);
    assert_int_equal(dlog_ring_dropped(rg), 0);
    assert_null(dlog_ring_new(1000));
    assert_null(dlog_ring_new(CAP + 1));
    free(r);
    dlog_ring_free(rg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlog_ring_round_trip_across_wrap),
        cmocka_unit_test(test_dlog_ring_full_drops_then_gap),
        cmocka_unit_test(test_dlog_ring_reports_keep_to_the_first_half),
        cmocka_unit_test(test_dlog_ring_report_bounds),
    };

    return cmocka_run_group_tests_name("dlog_ring", tests, NULL, NULL);
}
