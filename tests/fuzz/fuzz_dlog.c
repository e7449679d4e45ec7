/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for server/dlog_read.c, the decision log's reader that
 * `divvyctl log` and `divvyctl replay` run on any file they are handed.  The
 * input is read three ways: as a whole file; after a valid file header (so
 * the fuzzer reaches the blocks); and as the payload of one block whose
 * header and CRC are made right (so it reaches the item decoder).  Whatever
 * the bytes, reading ends, every item is one the encoder could have written
 * (its fields in range, its strings NUL-terminated at their lengths), a
 * corrupt region moves the offset forward, and a decision read back
 * re-encodes and reads again to the same fields.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlog.h"
#include "dlog_int.h"
#include "fuzz.h"

static struct dlog_enc *enc;

static void check_str(const char *s, uint32_t len)
{
    CHECK(s != NULL);
    CHECK(s[len] == '\0');
}

static void same(const struct dlog_decision *a, const struct dlog_decision *b)
{
    CHECK(a->unix_ms == b->unix_ms && a->mono_ms == b->mono_ms);
    CHECK(a->generation == b->generation && a->op == b->op && a->protocol == b->protocol);
    CHECK(a->path == b->path && a->flags == b->flags && a->err == b->err && a->n == b->n);
    CHECK(a->uid == b->uid && a->pid == b->pid && a->credit == b->credit);
    CHECK(a->reset_s == b->reset_s && a->decider_id == b->decider_id);
    CHECK(a->n_reset == b->n_reset && a->n_kv == b->n_kv && a->n_out == b->n_out);
    for (unsigned i = 0; i < a->n_kv; i++) {
        CHECK(a->kv[i].key_len == b->kv[i].key_len && a->kv[i].value_len == b->kv[i].value_len);
        CHECK(memcmp(a->kv[i].key, b->kv[i].key, a->kv[i].key_len) == 0);
        CHECK(memcmp(a->kv[i].value, b->kv[i].value, a->kv[i].value_len) == 0);
        CHECK(a->kv[i].redact == b->kv[i].redact);
    }
    for (unsigned i = 0; i < a->n_out; i++) {
        CHECK(a->out[i].rule_id == b->out[i].rule_id && a->out[i].credit == b->out[i].credit);
        CHECK(a->out[i].reset_s == b->out[i].reset_s && a->out[i].flags == b->out[i].flags);
    }
}

/* Decision @d re-encoded alone in a block and read back. */
static void reencode(const struct dlog_decision *d)
{
    static struct dlog_decision copy;
    uint8_t hdr[DLOG_HEADER_MAX];
    const uint8_t *blk;
    uint8_t *file;
    size_t hlen, blen;
    struct dlog_reader *rd;
    struct dlog_item *it;
    int r;

    /* Its strings live in the reader being read: copy them first. */
    dlog_enc_begin(enc, 0);
    r = dlog_enc_decision(enc, d);
    CHECK(r == 0 || r == -E2BIG);
    if (r < 0)
        return;
    blen = dlog_enc_finish(enc, &blk);
    hlen = dlog_file_header(hdr, sizeof(hdr), 0, "f");
    file = malloc(hlen + blen);
    it = malloc(sizeof(*it));
    CHECK(file && it);
    memcpy(file, hdr, hlen);
    memcpy(file + hlen, blk, blen);
    CHECK(dlog_reader_mem(file, hlen + blen, &rd) == 0);
    CHECK(dlog_reader_next(rd, it) == 1 && it->type == DLOG_DECISION);
    copy = it->u.d;
    same(d, &copy);
    CHECK(dlog_reader_next(rd, it) == 0 && it->type == DLOG_EOF);
    dlog_reader_close(rd);
    free(it);
    free(file);
}

static void read_all(const uint8_t *data, size_t size)
{
    static struct dlog_item it;
    struct dlog_reader *rd;
    uint64_t last_corrupt = 0;
    size_t items = 0;
    int r;

    r = dlog_reader_mem(data, size, &rd);
    CHECK(r == 0 || r == -EBADMSG || r == -ENOMEM);
    if (r < 0)
        return;
    CHECK(strlen(dlog_reader_host(rd)) <= DLOG_HOST_MAX);
    while ((r = dlog_reader_next(rd, &it)) == 1) {
        CHECK(++items <= size + 1);
        switch (it.type) {
        case DLOG_DECISION:
            CHECK(it.u.d.op <= DLOG_OP_LAST && it.u.d.protocol < DLOG_N_PROTO);
            CHECK(it.u.d.path < DLOG_N_PATH && it.u.d.n_kv <= PROTO_KV_MAX);
            CHECK(it.u.d.n_out <= RULES_MATCH_MAX);
            for (unsigned i = 0; i < it.u.d.n_kv; i++) {
                check_str(it.u.d.kv[i].key, it.u.d.kv[i].key_len);
                check_str(it.u.d.kv[i].value, it.u.d.kv[i].value_len);
                CHECK(it.u.d.kv[i].redact <= DLOG_DROP);
            }
            reencode(&it.u.d);
            break;
        case DLOG_RULES:
            CHECK(it.u.rules.first <= it.u.rules.total);
            CHECK(it.u.rules.n <= it.u.rules.total - it.u.rules.first);
            for (unsigned i = 0; i < it.u.rules.n; i++) {
                const struct dlog_rule *ru = &it.u.rules.rule[i];

                check_str(ru->id_str, ru->id_len);
                CHECK(ru->n_actor <= RULES_ACTOR_KEYS_MAX);
                for (unsigned j = 0; j < ru->n_actor; j++)
                    check_str(ru->actor[j], ru->actor_len[j]);
            }
            break;
        case DLOG_GAP:
            break;
        case DLOG_CORRUPT:
            CHECK(it.u.corrupt.skipped > 0 && it.u.corrupt.why != NULL);
            CHECK(it.u.corrupt.offset + it.u.corrupt.skipped <= size);
            CHECK(items == 1 || it.u.corrupt.offset >= last_corrupt);
            last_corrupt = it.u.corrupt.offset + 1;
            break;
        default:
            CHECK(0);
        }
    }
    CHECK(r == 0 && it.type == DLOG_EOF);
    dlog_reader_close(rd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf;
    size_t hlen;

    if (!enc)
        enc = dlog_enc_new(DLOG_BLOCK_MAX);
    CHECK(enc != NULL);
    if (size > DLOG_BLOCK_MAX - DLOG_BLOCK_HDR)
        return 0;
    read_all(data, size);
    buf = malloc(DLOG_HEADER_MAX + DLOG_BLOCK_HDR + size);
    CHECK(buf != NULL);
    hlen = dlog_file_header(buf, DLOG_HEADER_MAX, 1, "fuzz");
    /* The input after a valid header. */
    memcpy(buf + hlen, data, size);
    read_all(buf, hlen + size);
    /* The input as one block's payload, its count from the first byte. */
    if (size > 0) {
        uint8_t *h = buf + hlen;
        uint32_t crc;

        memcpy(h, DLOG_BLOCK_MAGIC, 4);
        dlog_le32(h + 4, (uint32_t)size);
        dlog_le32(h + 8, data[0] % 8 + 1);
        dlog_le32(h + 12, 0);
        crc = dlog_crc32c(0, h + 4, 12);
        dlog_le32(h + 16, dlog_crc32c(crc, data, size));
        memcpy(h + DLOG_BLOCK_HDR, data, size);
        read_all(buf, hlen + DLOG_BLOCK_HDR + size);
    }
    free(buf);
    return 0;
}
