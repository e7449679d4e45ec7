/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for server/dlog.c and dlog_read.c: decisions, rules and gaps
 * round-trip through blocks and files; a corrupt or cut-short block is one
 * DLOG_CORRUPT item and the next block still reads; the dictionary makes
 * repeated requests small; CRC-32C against its check value; dlog_actor()
 * as rules_actor() joins values.
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

#include "dlog.h"
#include "dlog_int.h"

struct buf {
    uint8_t *p;
    size_t len, cap;
};

static void buf_put(struct buf *b, const void *p, size_t len)
{
    if (b->len + len > b->cap) {
        b->cap = (b->len + len) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->len, p, len);
    b->len += len;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static const char *const keys[] = { "ip", "method", "path", "user" };
static const char *const vals[] = { "GET", "POST", "/a", "/b/c", "10.0.0.1", "alice", "", "x y" };

/* A decision of number @i (deterministic, so the reader's copy can be
 * compared with a fresh one). */
static void make_decision(unsigned i, struct dlog_decision *d)
{
    memset(d, 0, sizeof(*d));
    rng_state = 0x12345 + i * 0x9e3779b97f4a7c15ULL;
    d->unix_ms = 1800000000000ULL + i * 3 + rnd() % 2;
    d->mono_ms = 5000 + i * 3 - (i % 7 == 3 ? 40 : 0);     /* reports come late */
    d->generation = 1 + i / 100;
    d->op = (uint8_t)(rnd() % 4);
    d->protocol = (uint8_t)(rnd() % DLOG_N_PROTO);
    d->path = (uint8_t)(rnd() % DLOG_N_PATH);
    d->flags = (uint8_t)(rnd() & 0x3f);
    d->err = (uint16_t)(rnd() % 3);
    d->n = rnd() % 5 ? 1 : rnd();
    d->uid = rnd() % 3 ? (uint32_t)(rnd() % 70000) : DLOG_UNKNOWN_ID;
    d->pid = rnd() % 3 ? (uint32_t)rnd() : DLOG_UNKNOWN_ID;
    d->credit = rnd() % 1000;
    d->reset_s = rnd() % 3600;
    d->decider_id = rnd() % 4 ? rnd() : 0;
    d->n_reset = (uint32_t)(rnd() % 3);
    d->n_kv = (unsigned)(rnd() % 5);
    for (unsigned k = 0; k < d->n_kv; k++) {
        d->kv[k].key = keys[k];
        d->kv[k].key_len = (uint32_t)strlen(keys[k]);
        d->kv[k].value = vals[rnd() % 8];
        d->kv[k].value_len = (uint32_t)strlen(d->kv[k].value);
        d->kv[k].redact = (uint8_t)(rnd() % 3);
    }
    d->n_out = (unsigned)(rnd() % 4);
    for (unsigned k = 0; k < d->n_out; k++) {
        d->out[k].rule_id = rnd() % 3;
        d->out[k].credit = rnd() % 100;
        d->out[k].reset_s = rnd() % 100;
        d->out[k].flags = (uint8_t)(rnd() & 0x1f);
    }
}

static void assert_same(const struct dlog_decision *a, const struct dlog_decision *b)
{
    assert_int_equal(a->unix_ms, b->unix_ms);
    assert_int_equal(a->mono_ms, b->mono_ms);
    assert_int_equal(a->generation, b->generation);
    assert_int_equal(a->op, b->op);
    assert_int_equal(a->protocol, b->protocol);
    assert_int_equal(a->path, b->path);
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->err, b->err);
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->uid, b->uid);
    assert_int_equal(a->pid, b->pid);
    assert_int_equal(a->credit, b->credit);
    assert_int_equal(a->reset_s, b->reset_s);
    assert_int_equal(a->decider_id, b->decider_id);
    assert_int_equal(a->n_reset, b->n_reset);
    assert_int_equal(a->n_kv, b->n_kv);
    for (unsigned k = 0; k < a->n_kv; k++) {
        assert_int_equal(a->kv[k].key_len, b->kv[k].key_len);
        assert_memory_equal(a->kv[k].key, b->kv[k].key, a->kv[k].key_len);
        assert_int_equal(b->kv[k].key[b->kv[k].key_len], '\0');
        assert_int_equal(a->kv[k].value_len, b->kv[k].value_len);
        assert_memory_equal(a->kv[k].value, b->kv[k].value, a->kv[k].value_len);
        assert_int_equal(b->kv[k].value[b->kv[k].value_len], '\0');
        assert_int_equal(a->kv[k].redact, b->kv[k].redact);
    }
    assert_int_equal(a->n_out, b->n_out);
    for (unsigned k = 0; k < a->n_out; k++) {
        assert_int_equal(a->out[k].rule_id, b->out[k].rule_id);
        assert_int_equal(a->out[k].credit, b->out[k].credit);
        assert_int_equal(a->out[k].reset_s, b->out[k].reset_s);
        assert_int_equal(a->out[k].flags, b->out[k].flags);
    }
}

/* A file of @n decisions in blocks of @cap bytes; *ret_blocks their offsets. */
static void write_file(struct buf *b, unsigned n, size_t cap, uint64_t *blocks, unsigned *n_blocks)
{
    struct dlog_enc *e = dlog_enc_new(cap);
    struct dlog_decision d;
    uint8_t hdr[DLOG_HEADER_MAX];
    const uint8_t *blk;
    size_t len;

    assert_non_null(e);
    len = dlog_file_header(hdr, sizeof(hdr), 1800000000000ULL, "host-a");
    assert_true(len > 0);
    buf_put(b, hdr, len);
    *n_blocks = 0;
    dlog_enc_begin(e, 7);
    for (unsigned i = 0; i < n; i++) {
        int r;

        make_decision(i, &d);
        r = dlog_enc_decision(e, &d);
        if (r == -ENOBUFS) {
            len = dlog_enc_finish(e, &blk);
            blocks[(*n_blocks)++] = b->len;
            buf_put(b, blk, len);
            dlog_enc_begin(e, 7);
            r = dlog_enc_decision(e, &d);
        }
        assert_int_equal(r, 0);
    }
    len = dlog_enc_finish(e, &blk);
    if (len) {
        blocks[(*n_blocks)++] = b->len;
        buf_put(b, blk, len);
    }
    dlog_enc_free(e);
}

static void test_dlog_roundtrip(void **state)
{
    struct buf b = { 0 };
    uint64_t blocks[4096];
    unsigned n_blocks, seen = 0;
    struct dlog_reader *rd;
    struct dlog_item it;
    struct dlog_decision want;

    (void)state;
    write_file(&b, 5000, 4096, blocks, &n_blocks);
    assert_true(n_blocks > 10);
    assert_int_equal(dlog_reader_mem(b.p, b.len, &rd), 0);
    assert_string_equal(dlog_reader_host(rd), "host-a");
    assert_int_equal(dlog_reader_started(rd), 1800000000000ULL);
    while (dlog_reader_next(rd, &it) == 1) {
        assert_int_equal(it.type, DLOG_DECISION);
        assert_int_equal(it.block_worker, 7);
        make_decision(seen, &want);
        assert_same(&want, &it.u.d);
        seen++;
    }
    assert_int_equal(it.type, DLOG_EOF);
    assert_int_equal(seen, 5000);
    dlog_reader_close(rd);
    free(b.p);
}

/* A flipped byte costs its block only; a cut-short end is reported. */
static void test_dlog_corrupt_block_skipped(void **state)
{
    struct buf b = { 0 };
    uint64_t blocks[4096];
    unsigned n_blocks, seen = 0, corrupt = 0, per_block;
    struct dlog_reader *rd;
    struct dlog_item it;

    (void)state;
    write_file(&b, 3000, 4096, blocks, &n_blocks);
    per_block = 0;
    {
        struct dlog_reader *r0;

        assert_int_equal(dlog_reader_mem(b.p, blocks[1], &r0), 0);
        while (dlog_reader_next(r0, &it) == 1)
            per_block++;
        dlog_reader_close(r0);
    }
    b.p[blocks[2] + 100] ^= 0x40;       /* a payload byte: bad CRC */
    b.p[blocks[4]] = 'X';               /* the magic */
    /* Cut the last block short. */
    b.len = blocks[n_blocks - 1] + 50;
    assert_int_equal(dlog_reader_mem(b.p, b.len, &rd), 0);
    while (dlog_reader_next(rd, &it) == 1) {
        if (it.type == DLOG_CORRUPT) {
            assert_non_null(it.u.corrupt.why);
            assert_true(it.u.corrupt.skipped > 0);
            if (corrupt == 0) {
                assert_int_equal(it.u.corrupt.offset, blocks[2]);
                assert_string_equal(it.u.corrupt.why, "bad CRC");
            }
            corrupt++;
            continue;
        }
        assert_int_equal(it.type, DLOG_DECISION);
        seen++;
    }
    assert_int_equal(corrupt, 3);
    /* Every block but the two damaged and the cut one; block 0 sets the
     * count of a full block. */
    assert_true(seen > 3000 - 4 * per_block - per_block);
    assert_true(seen < 3000 - 2 * per_block);
    dlog_reader_close(rd);
    free(b.p);
}

static void test_dlog_not_a_log(void **state)
{
    static const char junk[] = "this is not a decision log at all, but long enough to be read";
    uint8_t hdr[DLOG_HEADER_MAX];
    struct dlog_reader *rd = (void *)1;
    size_t len;

    (void)state;
    assert_int_equal(dlog_reader_mem(junk, sizeof(junk), &rd), -EBADMSG);
    assert_null(rd);
    len = dlog_file_header(hdr, sizeof(hdr), 1, "h");
    hdr[8] = 9;                         /* a version this build does not read */
    assert_int_equal(dlog_reader_mem(hdr, len, &rd), -EBADMSG);
    assert_int_equal(dlog_reader_open("/nonexistent/x.dlog", &rd), -ENOENT);
}

/* The same request again costs a few bytes: its strings are references. */
static void test_dlog_dictionary(void **state)
{
    struct dlog_enc *e = dlog_enc_new(DLOG_BLOCK_MAX);
    struct dlog_decision d;
    const uint8_t *blk;
    size_t one, hundred;

    (void)state;
    memset(&d, 0, sizeof(d));
    d.mono_ms = 1000;
    d.unix_ms = 1800000000000ULL;
    d.n = 1;
    d.n_kv = 2;
    d.kv[0] = (struct dlog_kv){ "path", "/pantry/cookies/oatmeal", 4, 23, DLOG_KEEP };
    d.kv[1] = (struct dlog_kv){ "ip", "192.168.1.1", 2, 11, DLOG_KEEP };
    d.decider_id = 0x1122334455667788ULL;
    dlog_enc_begin(e, 0);
    assert_int_equal(dlog_enc_decision(e, &d), 0);
    one = dlog_enc_finish(e, &blk);
    dlog_enc_begin(e, 0);
    for (int i = 0; i < 100; i++) {
        d.mono_ms++;
        d.unix_ms++;
        assert_int_equal(dlog_enc_decision(e, &d), 0);
    }
    hundred = dlog_enc_finish(e, &blk);
    /* 19 bytes a decision: 11 fields, 2 pairs, all references. */
    assert_true(hundred - one <= 99 * 19);
    dlog_enc_free(e);
}

static void test_dlog_full_block(void **state)
{
    struct dlog_enc *e = dlog_enc_new(DLOG_BLOCK_HDR + 64);
    struct dlog_decision d;
    char big[200];
    const uint8_t *blk;

    (void)state;
    assert_non_null(e);
    memset(big, 'v', sizeof(big));
    memset(&d, 0, sizeof(d));
    d.n_kv = 1;
    d.kv[0] = (struct dlog_kv){ "k", big, 1, sizeof(big), DLOG_KEEP };
    dlog_enc_begin(e, 0);
    assert_int_equal(dlog_enc_decision(e, &d), -E2BIG);
    d.kv[0].value_len = 5;
    assert_int_equal(dlog_enc_decision(e, &d), 0);
    d.kv[0].value_len = 60;
    assert_int_equal(dlog_enc_decision(e, &d), -ENOBUFS);
    assert_int_equal(dlog_enc_count(e), 1);
    d.n_kv = PROTO_KV_MAX + 1;
    assert_int_equal(dlog_enc_decision(e, &d), -EINVAL);
    assert_true(dlog_enc_finish(e, &blk) > DLOG_BLOCK_HDR);
    dlog_enc_free(e);
    assert_null(dlog_enc_new(8));
}

static void test_dlog_rules_and_gap(void **state)
{
    struct dlog_rule rule[2] = {
        { .id = 42, .id_str = "login", .id_len = 5, .algo = 4, .store = 2, .policy = 1,
          .fast_path = false, .credit_limit = 5, .reset_ms = 900000, .prefix4 = 24,
          .prefix6 = -1, .n_actor = 2, .actor = { "user", "rhost" }, .actor_len = { 4, 5 } },
        { .id = 0xffffffffffffffffULL, .id_str = "00000000000000ff", .id_len = 16,
          .credit_limit = -1, .reset_ms = 0, .prefix4 = -1, .prefix6 = 128 },
    };
    struct dlog_rules rs = { .generation = 3, .unix_ms = 99, .total = 5, .first = 3, .n = 2,
                             .rule = rule };
    struct dlog_gap gap = { .unix_ms = 1234, .dropped = 77 };
    struct dlog_enc *e = dlog_enc_new(4096);
    struct buf b = { 0 };
    uint8_t hdr[DLOG_HEADER_MAX];
    const uint8_t *blk;
    struct dlog_reader *rd;
    struct dlog_item it;
    size_t len;

    (void)state;
    len = dlog_file_header(hdr, sizeof(hdr), 5, NULL);
    buf_put(&b, hdr, len);
    dlog_enc_begin(e, 1);
    assert_int_equal(dlog_enc_rules(e, &rs), 0);
    assert_int_equal(dlog_enc_gap(e, &gap), 0);
    rs.first = 4;
    assert_int_equal(dlog_enc_rules(e, &rs), -EINVAL);
    len = dlog_enc_finish(e, &blk);
    buf_put(&b, blk, len);
    assert_int_equal(dlog_reader_mem(b.p, b.len, &rd), 0);
    assert_string_equal(dlog_reader_host(rd), "");
    assert_int_equal(dlog_reader_next(rd, &it), 1);
    assert_int_equal(it.type, DLOG_RULES);
    assert_int_equal(it.u.rules.generation, 3);
    assert_int_equal(it.u.rules.total, 5);
    assert_int_equal(it.u.rules.first, 3);
    assert_int_equal(it.u.rules.n, 2);
    assert_int_equal(it.u.rules.rule[0].id, 42);
    assert_string_equal(it.u.rules.rule[0].id_str, "login");
    assert_int_equal(it.u.rules.rule[0].algo, 4);
    assert_int_equal(it.u.rules.rule[0].reset_ms, 900000);
    assert_int_equal(it.u.rules.rule[0].prefix4, 24);
    assert_int_equal(it.u.rules.rule[0].n_actor, 2);
    assert_string_equal(it.u.rules.rule[0].actor[1], "rhost");
    assert_int_equal(it.u.rules.rule[1].id, 0xffffffffffffffffULL);
    assert_int_equal(it.u.rules.rule[1].credit_limit, -1);
    assert_int_equal(it.u.rules.rule[1].prefix6, 128);
    assert_int_equal(dlog_reader_next(rd, &it), 1);
    assert_int_equal(it.type, DLOG_GAP);
    assert_int_equal(it.u.gap.dropped, 77);
    assert_int_equal(it.u.gap.unix_ms, 1234);
    assert_int_equal(dlog_reader_next(rd, &it), 0);
    dlog_reader_close(rd);
    dlog_enc_free(e);
    free(b.p);
}

static void test_dlog_crc32c(void **state)
{
    (void)state;
    assert_int_equal(dlog_crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(dlog_crc32c(dlog_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
}

static void test_dlog_actor(void **state)
{
    struct dlog_rule r = { .prefix4 = 24, .prefix6 = -1, .n_actor = 2,
                           .actor = { "user", "rhost" }, .actor_len = { 4, 5 } };
    struct dlog_decision d = { .n_kv = 2 };
    char buf[128];

    (void)state;
    d.kv[0] = (struct dlog_kv){ "rhost", "192.168.7.9", 5, 11, DLOG_KEEP };
    d.kv[1] = (struct dlog_kv){ "user", "a,b%", 4, 4, DLOG_KEEP };
    assert_int_equal(dlog_actor(&r, &d, buf, sizeof(buf)), 23);
    assert_string_equal(buf, "a%2Cb%25,192.168.7.0/24");
    r.n_actor = 1;
    r.prefix4 = -1;
    assert_int_equal(dlog_actor(&r, &d, buf, sizeof(buf)), 4);
    assert_string_equal(buf, "a,b%");
    assert_int_equal(dlog_actor(&r, &d, buf, 3), -ENOBUFS);
    r.actor[0] = "missing";
    r.actor_len[0] = 7;
    assert_int_equal(dlog_actor(&r, &d, buf, sizeof(buf)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlog_roundtrip),
        cmocka_unit_test(test_dlog_corrupt_block_skipped),
        cmocka_unit_test(test_dlog_not_a_log),
        cmocka_unit_test(test_dlog_dictionary),
        cmocka_unit_test(test_dlog_full_block),
        cmocka_unit_test(test_dlog_rules_and_gap),
        cmocka_unit_test(test_dlog_crc32c),
        cmocka_unit_test(test_dlog_actor),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
