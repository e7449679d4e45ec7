/* SPDX-License-Identifier: MIT */
/*
 * test_client_report: libclient/client_report.c, the fast path's batch of
 * REPORT lines, over a socketpair standing in for divvyd: what is sent when
 * (64 decisions, 4096 bytes, the oldest 1 s old, a flush), that every line
 * parses back (proto_parse()), and that a batch that would block is dropped
 * and counted, leaving the stream whole.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "client_report.h"

struct fixture {
    struct client_err err;
    struct client_conn conn;
    struct client_report rp;
    int peer;                   /* divvyd's end */
};

static int setup(void **state)
{
    static struct fixture f;
    int sv[2];

    memset(&f, 0, sizeof(f));
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    f.conn.fd = sv[0];
    f.conn.err = &f.err;
    f.conn.addr.kind = CLIENT_ADDR_UNIX;
    f.peer = sv[1];
    f.rp.conn = &f.conn;
    fcntl(f.peer, F_SETFL, O_NONBLOCK);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    client_conn_free(&f->conn);
    close(f->peer);
    return 0;
}

/* Short: 64 such lines fit 4096 bytes. */
static const struct proto_kv kv[] = {
    { .key = "i", .value = "1", .key_len = 1, .value_len = 1 },
    { .key = "p", .value = "/a b", .key_len = 1, .value_len = 4 },
};

static void add(struct fixture *f, uint64_t mono, uint64_t credit)
{
    struct proto_report r = { .mono_ms = mono, .credit = credit, .reset_s = 60,
                              .rule_id = 0xabcdef0123456789ull, .op = PROTO_TAKE,
                              .allowed = true };

    client_report_add(&f->rp, &r, 1, kv, 2);
}

/* Reads what divvyd's end has and parses each whole line as divvyd would
 * (a read may end inside a line: the rest waits for the next); returns the
 * lines, checking that credits run on from *@next. */
static unsigned drain(struct fixture *f, uint64_t *next)
{
    static char buf[1 << 16];
    static size_t have;
    struct proto_req req;
    ssize_t n = read(f->peer, buf + have, sizeof(buf) - have);
    size_t off = 0;
    unsigned lines = 0;

    if (n <= 0)
        return 0;
    have += (size_t)n;
    for (;;) {
        ssize_t used = proto_parse(buf + off, have - off, &req);

        assert_true(used >= 0);
        if (used == 0)
            break;
        assert_int_equal(req.err, PROTO_E_NONE);
        assert_int_equal(req.verb, PROTO_REPORT);
        assert_int_equal(req.report.credit, *next);
        assert_int_equal(req.report.rule_id, 0xabcdef0123456789ull);
        assert_int_equal(req.n_kv, 2);
        assert_string_equal(req.kv[1].value, "/a b");
        (*next)++;
        off += (size_t)used;
        lines++;
    }
    memmove(buf, buf + off, have - off);
    have -= off;
    return lines;
}

static void test_client_report_full_batch(void **state)
{
    struct fixture *f = *state;
    uint64_t next = 0;

    for (uint64_t i = 0; i < CLIENT_REPORT_MAX - 1; i++)
        add(f, 1000, i);
    assert_int_equal(drain(f, &next), 0);           /* not yet due */
    add(f, 1000, CLIENT_REPORT_MAX - 1);
    assert_int_equal(drain(f, &next), CLIENT_REPORT_MAX);   /* one send of the whole batch */
    assert_int_equal(f->rp.sent, CLIENT_REPORT_MAX);
    assert_int_equal(f->rp.n, 0);
}

static void test_client_report_age(void **state)
{
    struct fixture *f = *state;
    uint64_t next = 0;

    add(f, 5000, 0);
    client_report_tick(&f->rp, 5000 + CLIENT_REPORT_AGE_MS - 1);
    assert_int_equal(drain(f, &next), 0);
    client_report_tick(&f->rp, 5000 + CLIENT_REPORT_AGE_MS);
    assert_int_equal(drain(f, &next), 1);
    /* The next decision sends an old batch before it joins a new one. */
    add(f, 7000, 1);
    add(f, 7000 + CLIENT_REPORT_AGE_MS, 2);
    assert_int_equal(drain(f, &next), 1);
    assert_int_equal(f->rp.n, 1);
    client_report_flush(&f->rp);
    assert_int_equal(drain(f, &next), 1);
    client_report_flush(&f->rp);                    /* nothing left: no send */
    assert_int_equal(drain(f, &next), 0);
    assert_int_equal(f->rp.sent, 3);
}

/* A line that would pass 4096 bytes sends what is there first. */
static void test_client_report_bytes(void **state)
{
    struct fixture *f = *state;
    static char big[PROTO_LINE_MAX];
    struct proto_kv bkv = { .key = "k", .value = big, .key_len = 1, .value_len = 2000 };
    struct proto_report r = { .mono_ms = 1, .rule_id = 1, .op = PROTO_PEEK };
    char buf[8192];

    memset(big, 'v', sizeof(big));
    client_report_add(&f->rp, &r, 1, &bkv, 1);
    client_report_add(&f->rp, &r, 1, &bkv, 1);
    assert_int_equal(read(f->peer, buf, sizeof(buf)), -1);     /* both fit 4096 */
    client_report_add(&f->rp, &r, 1, &bkv, 1);
    assert_true(read(f->peer, buf, sizeof(buf)) > 3900);
    assert_int_equal(f->rp.n, 1);
    /* Longer than a protocol line: never sent, counted. */
    bkv.value_len = PROTO_LINE_MAX;
    client_report_add(&f->rp, &r, 1, (const struct proto_kv[]){ bkv }, 1);
    assert_int_equal(f->rp.dropped, 1);
}

/* divvyd not reading: a batch that would block is dropped whole; the
 * stream stays whole (no half line), and later batches go again. */
static void test_client_report_would_block(void **state)
{
    struct fixture *f = *state;
    uint64_t next = 0, sent_before;
    unsigned got = 0, n;

    for (uint64_t i = 0; f->rp.dropped == 0 && i < 1000000; i++)
        add(f, 1000, i);
    assert_int_equal(f->rp.dropped, CLIENT_REPORT_MAX);     /* one whole batch */
    sent_before = f->rp.sent;
    while ((n = drain(f, &next)) > 0)
        got += n;
    assert_int_equal(got, sent_before);             /* every sent line whole, in order */
    if (f->conn.fd < 0)
        return;                                     /* a short write closed it: also whole */
    next = f->rp.sent + f->rp.dropped;
    for (uint64_t i = 0; i < CLIENT_REPORT_MAX; i++)
        add(f, 1000, next + i);
    assert_int_equal(drain(f, &next), CLIENT_REPORT_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_client_report_full_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_report_age, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_report_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_report_would_block, setup, teardown),
    };

    return cmocka_run_group_tests_name("client_report", tests, NULL, NULL);
}
