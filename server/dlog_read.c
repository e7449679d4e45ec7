/* SPDX-License-Identifier: MIT */
/*
 * dlog_read: the decision log's reader (see dlog.h) and CRC-32C.
 *
 * Blocks are read one at a time with pread() (a file may grow while it is
 * read: the end is where a read returns nothing), checked (magic, length,
 * CRC) and decoded item by item into a string arena, so every string an
 * item hands out is NUL-terminated and lives until the next call.  Whatever
 * fails a check is one DLOG_CORRUPT item and reading goes on at the next
 * block magic after its start: every item moves the offset forward, so any
 * input ends.  Memory is bounded by one block (DLOG_BLOCK_MAX) and its
 * dictionary.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlog_int.h"

/* ---- CRC-32C ---------------------------------------------------------------------------- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;

        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
        crc_table[i] = c;
    }
}

uint32_t dlog_crc32c(uint32_t crc, const void *p, size_t len)
{
    const uint8_t *b = p;

    pthread_once(&crc_once, crc_init);
    crc = ~crc;
    for (size_t i = 0; i < len; i++)
        crc = crc_table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- the reader ------------------------------------------------------------------------- */

#define SCAN_CHUNK  65536

struct dlog_reader {
    int fd;                     /* -1: reading @mem */
    const uint8_t *mem;
    size_t mem_len;
    uint64_t started;
    char host[DLOG_HOST_MAX + 1];
    uint64_t off;               /* the next block's offset */
    /* The block being decoded. */
    uint8_t *blk;               /* its payload */
    size_t blk_len;
    size_t blk_cap;             /* of blk and of arena; grows to the largest block read */
    size_t pos;
    uint32_t left;              /* items still to decode */
    uint64_t blk_off;
    uint32_t worker;
    uint64_t prev_mono, prev_unix;
    char *arena;                /* its strings, NUL-terminated */
    size_t arena_len;
    const char **dict;
    uint32_t *dict_len;
    uint32_t n_dict;
    uint32_t dict_cap;
    struct dlog_rule *rules;    /* a DLOG_RULES item's */
    size_t rules_cap;
    uint8_t *scan;              /* SCAN_CHUNK + 3: looking for a block magic */
};

/* Up to @len bytes at @off into @buf: how many (0 at the end), or -errno. */
static ssize_t rd_read(struct dlog_reader *rd, void *buf, size_t len, uint64_t off)
{
    size_t got = 0;

    if (rd->fd < 0) {
        if (off >= rd->mem_len)
            return 0;
        got = rd->mem_len - off < len ? rd->mem_len - off : len;
        if (got)
            memcpy(buf, rd->mem + off, got);
        return (ssize_t)got;
    }
    while (got < len) {
        ssize_t n = pread(rd->fd, (uint8_t *)buf + got, len - got, (off_t)(off + got));

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/* The offset of the first block magic at or after @from; the end of the
 * data when there is none. */
static int rd_find_magic(struct dlog_reader *rd, uint64_t from, uint64_t *ret)
{
    for (;;) {
        ssize_t n = rd_read(rd, rd->scan, SCAN_CHUNK, from);
        const uint8_t *hit;

        if (n < 0)
            return (int)n;
        if (n < 4) {
            *ret = from + (uint64_t)n;
            return 0;
        }
        hit = memmem(rd->scan, (size_t)n, DLOG_BLOCK_MAGIC, 4);
        if (hit) {
            *ret = from + (uint64_t)(hit - rd->scan);
            return 0;
        }
        /* The magic may straddle chunks: the next one overlaps by 3 bytes. */
        from += (uint64_t)n - 3;
    }
}

static int reader_new(struct dlog_reader **ret)
{
    struct dlog_reader *rd = calloc(1, sizeof(*rd));

    *ret = NULL;
    if (!rd)
        return -ENOMEM;
    rd->fd = -1;
    rd->scan = malloc(SCAN_CHUNK);
    if (!rd->scan) {
        dlog_reader_close(rd);
        return -ENOMEM;
    }
    *ret = rd;
    return 0;
}

/* Room for a block of @plen payload bytes: its copy, its strings (never
 * more than its bytes) and its dictionary (a literal takes two bytes at
 * least).  Grown, never shrunk: bounded by DLOG_BLOCK_MAX. */
static int reader_room(struct dlog_reader *rd, size_t plen)
{
    uint32_t dict = plen / 2 + 2 < DLOG_DICT_MAX ? (uint32_t)(plen / 2 + 2) : DLOG_DICT_MAX;

    if (plen > rd->blk_cap) {
        size_t cap = plen < 65536 ? 65536 : plen;
        uint8_t *b = realloc(rd->blk, cap);
        char *a;

        if (!b)
            return -ENOMEM;
        rd->blk = b;
        a = realloc(rd->arena, cap);
        if (!a)
            return -ENOMEM;
        rd->arena = a;
        rd->blk_cap = cap;
    }
    if (dict > rd->dict_cap) {
        const char **d = realloc(rd->dict, dict * sizeof(*d));
        uint32_t *l;

        if (!d)
            return -ENOMEM;
        rd->dict = d;
        l = realloc(rd->dict_len, dict * sizeof(*l));
        if (!l)
            return -ENOMEM;
        rd->dict_len = l;
        rd->dict_cap = dict;
    }
    return 0;
}

/* The file header: -EBADMSG unless it is one this build reads. */
static int reader_header(struct dlog_reader *rd)
{
    uint8_t h[DLOG_FILE_HDR + DLOG_HOST_MAX + 4];
    ssize_t n = rd_read(rd, h, sizeof(h), 0);
    size_t len, host_len;

    if (n < 0)
        return (int)n;
    if ((size_t)n < DLOG_FILE_HDR + 4 || memcmp(h, DLOG_FILE_MAGIC, 8) != 0)
        return -EBADMSG;
    len = dlog_rd32(h + 12);
    host_len = (size_t)h[24] | (size_t)h[25] << 8;
    if (dlog_rd32(h + 8) != DLOG_VERSION || host_len > DLOG_HOST_MAX ||
        len != DLOG_FILE_HDR + host_len + 4 || len > (size_t)n ||
        dlog_crc32c(0, h, len - 4) != dlog_rd32(h + len - 4))
        return -EBADMSG;
    rd->started = dlog_rd64(h + 16);
    memcpy(rd->host, h + DLOG_FILE_HDR, host_len);
    rd->host[host_len] = '\0';
    rd->off = len;
    return 0;
}

int dlog_reader_open(const char *path, struct dlog_reader **ret)
{
    struct dlog_reader *rd;
    int r;

    r = reader_new(&rd);
    if (r < 0)
        return r;
    rd->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (rd->fd < 0) {
        r = -errno;
        goto out;
    }
    r = reader_header(rd);
out:
    if (r < 0) {
        dlog_reader_close(rd);
        rd = NULL;
    }
    *ret = rd;
    return r;
}

int dlog_reader_mem(const void *data, size_t len, struct dlog_reader **ret)
{
    struct dlog_reader *rd;
    int r;

    r = reader_new(&rd);
    if (r < 0)
        return r;
    rd->mem = data;
    rd->mem_len = len;
    r = reader_header(rd);
    if (r < 0) {
        dlog_reader_close(rd);
        rd = NULL;
    }
    *ret = rd;
    return r;
}

void dlog_reader_close(struct dlog_reader *rd)
{
    if (!rd)
        return;
    if (rd->fd >= 0)
        close(rd->fd);
    free(rd->blk);
    free(rd->arena);
    free(rd->dict);
    free(rd->dict_len);
    free(rd->rules);
    free(rd->scan);
    free(rd);
}

uint64_t dlog_reader_started(const struct dlog_reader *rd)
{
    return rd->started;
}

const char *dlog_reader_host(const struct dlog_reader *rd)
{
    return rd->host;
}

/* ---- decoding --------------------------------------------------------------------------- */

struct in {
    const uint8_t *p;
    const uint8_t *end;
    bool bad;
};

static uint8_t get_u8(struct in *c)
{
    if (c->p >= c->end) {
        c->bad = true;
        return 0;
    }
    return *c->p++;
}

static uint64_t get_var(struct in *c)
{
    uint64_t v = 0;

    for (unsigned shift = 0; shift < 64; shift += 7) {
        uint8_t b = get_u8(c);

        if (c->bad)
            return 0;
        /* The tenth byte carries bit 63 only. */
        if (shift == 63 && b > 1)
            break;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    c->bad = true;
    return 0;
}

static int64_t get_svar(struct in *c)
{
    uint64_t v = get_var(c);

    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static uint64_t get_bounded(struct in *c, uint64_t max)
{
    uint64_t v = get_var(c);

    if (v > max)
        c->bad = true;
    return c->bad ? 0 : v;
}

static const char *get_str(struct dlog_reader *rd, struct in *c, uint32_t *ret_len)
{
    uint64_t ref = get_var(c), len;
    char *s;

    *ret_len = 0;
    if (c->bad)
        return "";
    if (ref) {
        if (ref >= rd->n_dict) {
            c->bad = true;
            return "";
        }
        *ret_len = rd->dict_len[ref];
        return rd->dict[ref];
    }
    len = get_var(c);
    /* A literal costs at least two payload bytes more than its arena copy:
     * the arena (one block's size) cannot overflow; checked all the same. */
    if (c->bad || len > (uint64_t)(c->end - c->p) || len + 1 > rd->blk_cap - rd->arena_len) {
        c->bad = true;
        return "";
    }
    s = rd->arena + rd->arena_len;
    memcpy(s, c->p, len);
    s[len] = '\0';
    c->p += len;
    rd->arena_len += len + 1;
    if (rd->n_dict < DLOG_DICT_MAX) {
        if (rd->n_dict >= rd->dict_cap) {
            c->bad = true;
            return "";
        }
        rd->dict[rd->n_dict] = s;
        rd->dict_len[rd->n_dict] = (uint32_t)len;
        rd->n_dict++;
    }
    *ret_len = (uint32_t)len;
    return s;
}

static uint64_t get_id(struct dlog_reader *rd, struct in *c)
{
    uint32_t len;
    const char *s = get_str(rd, c, &len);

    if (len != 8) {
        c->bad = true;
        return 0;
    }
    return dlog_rd64((const uint8_t *)s);
}

static void get_decision(struct dlog_reader *rd, struct in *c, struct dlog_decision *d)
{
    uint64_t v;
    uint8_t shape;

    rd->prev_mono += (uint64_t)get_svar(c);
    rd->prev_unix += (uint64_t)get_svar(c);
    d->mono_ms = rd->prev_mono;
    d->unix_ms = rd->prev_unix;
    d->generation = get_var(c);
    shape = get_u8(c);
    d->op = shape & 3;
    d->protocol = (shape >> 2) & 3;
    d->path = (shape >> 4) & 3;
    d->flags = get_u8(c);
    if (shape & 0x80)
        c->bad = true;
    d->err = 0;
    d->n = 1;
    d->n_reset = 0;
    if (shape & 0x40) {
        d->err = (uint16_t)get_bounded(c, UINT16_MAX);
        d->n = get_var(c);
        d->n_reset = (uint32_t)get_bounded(c, UINT32_MAX);
    }
    v = get_bounded(c, (uint64_t)UINT32_MAX);
    d->uid = v ? (uint32_t)(v - 1) : DLOG_UNKNOWN_ID;
    v = get_bounded(c, (uint64_t)UINT32_MAX);
    d->pid = v ? (uint32_t)(v - 1) : DLOG_UNKNOWN_ID;
    d->credit = get_var(c);
    d->reset_s = get_var(c);
    d->decider_id = get_id(rd, c);
    d->n_kv = (unsigned)get_bounded(c, PROTO_KV_MAX);
    for (unsigned i = 0; i < d->n_kv && !c->bad; i++) {
        struct dlog_kv *kv = &d->kv[i];

        kv->key = get_str(rd, c, &kv->key_len);
        kv->redact = get_u8(c);
        if (kv->redact > DLOG_DROP)
            c->bad = true;
        kv->value = get_str(rd, c, &kv->value_len);
    }
    d->n_out = (unsigned)get_bounded(c, RULES_MATCH_MAX);
    for (unsigned i = 0; i < d->n_out && !c->bad; i++) {
        struct dlog_outcome *o = &d->out[i];

        o->rule_id = get_id(rd, c);
        o->credit = get_var(c);
        o->reset_s = get_var(c);
        o->flags = get_u8(c);
    }
}

static void get_rules(struct dlog_reader *rd, struct in *c, struct dlog_rules *rs)
{
    rs->generation = get_var(c);
    rs->unix_ms = get_var(c);
    rs->total = (uint32_t)get_bounded(c, RULES_MAX);
    rs->first = (uint32_t)get_bounded(c, RULES_MAX);
    /* A rule takes more than one byte: no more of them than bytes left. */
    rs->n = (unsigned)get_bounded(c, (uint64_t)(c->end - c->p));
    rs->rule = rd->rules;
    if (c->bad || rs->first > rs->total || rs->n > rs->total - rs->first) {
        c->bad = true;
        return;
    }
    if (rs->n > rd->rules_cap) {
        struct dlog_rule *nr = realloc(rd->rules, rs->n * sizeof(*nr));

        if (!nr) {
            c->bad = true;
            return;
        }
        rd->rules = nr;
        rd->rules_cap = rs->n;
        rs->rule = nr;
    }
    for (unsigned i = 0; i < rs->n && !c->bad; i++) {
        struct dlog_rule *r = &rd->rules[i];

        r->id = get_id(rd, c);
        r->id_str = get_str(rd, c, &r->id_len);
        r->algo = get_u8(c);
        r->store = get_u8(c);
        r->policy = get_u8(c);
        r->fast_path = get_u8(c) != 0;
        r->credit_limit = get_svar(c);
        r->reset_ms = get_svar(c);
        r->prefix4 = (int)get_svar(c);
        r->prefix6 = (int)get_svar(c);
        if (r->prefix4 < -1 || r->prefix4 > 32 || r->prefix6 < -1 || r->prefix6 > 128)
            c->bad = true;
        r->n_actor = (unsigned)get_bounded(c, RULES_ACTOR_KEYS_MAX);
        for (unsigned j = 0; j < r->n_actor && !c->bad; j++)
            r->actor[j] = get_str(rd, c, &r->actor_len[j]);
    }
}

static int corrupt(struct dlog_item *ret, uint64_t offset, uint64_t skipped, const char *why)
{
    ret->type = DLOG_CORRUPT;
    ret->u.corrupt = (struct dlog_corrupt){ .offset = offset, .skipped = skipped, .why = why };
    return 1;
}

/* The next item of the loaded block: 1, or a DLOG_CORRUPT item for the
 * rest of it when an item does not decode. */
static int next_item(struct dlog_reader *rd, struct dlog_item *ret)
{
    struct in c = { rd->blk + rd->pos, rd->blk + rd->blk_len, false };
    size_t start = rd->pos;
    uint8_t type = get_u8(&c);

    ret->block_worker = rd->worker;
    switch (type) {
    case DLOG_DECISION:
        ret->type = DLOG_DECISION;
        get_decision(rd, &c, &ret->u.d);
        break;
    case DLOG_RULES:
        ret->type = DLOG_RULES;
        get_rules(rd, &c, &ret->u.rules);
        break;
    case DLOG_GAP:
        ret->type = DLOG_GAP;
        ret->u.gap.unix_ms = get_var(&c);
        ret->u.gap.dropped = get_var(&c);
        break;
    default:
        c.bad = true;
    }
    rd->left--;
    if (!c.bad && rd->left == 0 && c.p != c.end)
        c.bad = true;
    if (c.bad) {
        rd->left = 0;
        /* The header promised more records than the payload holds. */
        if (start == rd->blk_len)
            return corrupt(ret, rd->blk_off, DLOG_BLOCK_HDR + rd->blk_len,
                           "fewer records than the block header says");
        return corrupt(ret, rd->blk_off + DLOG_BLOCK_HDR + start, rd->blk_len - start,
                       "malformed record");
    }
    rd->pos = (size_t)(c.p - rd->blk);
    return 1;
}

/* Loads the block at rd->off: 1 with a DLOG_CORRUPT item in *ret (what
 * could not be loaded; the offset moved past it), 2 loaded, 0 at the end,
 * or -errno. */
static int load_block(struct dlog_reader *rd, struct dlog_item *ret)
{
    uint64_t off = rd->off, next = 0;
    uint8_t h[DLOG_BLOCK_HDR];
    const char *why;
    uint32_t plen, count;
    ssize_t n;
    int r;

    n = rd_read(rd, h, sizeof(h), off);
    if (n <= 0)
        return (int)n;
    if ((size_t)n < sizeof(h)) {
        rd->off = off + (uint64_t)n;
        return corrupt(ret, off, (uint64_t)n, "truncated block header");
    }
    if (memcmp(h, DLOG_BLOCK_MAGIC, 4) != 0) {
        why = "no block magic";
        goto resync;
    }
    plen = dlog_rd32(h + 4);
    count = dlog_rd32(h + 8);
    if (plen > DLOG_BLOCK_MAX - DLOG_BLOCK_HDR || count > plen) {
        why = "block length out of range";
        goto resync;
    }
    r = reader_room(rd, plen);
    if (r < 0)
        return r;
    n = rd_read(rd, rd->blk, plen, off + DLOG_BLOCK_HDR);
    if (n < 0)
        return (int)n;
    if ((size_t)n < plen) {
        why = "truncated block";
        goto resync;
    }
    if (dlog_crc32c(dlog_crc32c(0, h + 4, 12), rd->blk, plen) != dlog_rd32(h + 16)) {
        why = "bad CRC";
        goto resync;
    }
    rd->off = off + DLOG_BLOCK_HDR + plen;
    rd->blk_off = off;
    rd->blk_len = plen;
    rd->pos = 0;
    rd->left = count;
    rd->worker = dlog_rd32(h + 12);
    rd->prev_mono = rd->prev_unix = 0;
    rd->arena_len = 0;
    rd->n_dict = 1;
    if (count == 0 && plen != 0)
        return corrupt(ret, off, DLOG_BLOCK_HDR + (uint64_t)plen, "malformed record");
    return 2;
resync:
    r = rd_find_magic(rd, off + 1, &next);
    if (r < 0)
        return r;
    rd->off = next;
    return corrupt(ret, off, next - off, why);
}

int dlog_reader_next(struct dlog_reader *rd, struct dlog_item *ret)
{
    int r;

    for (;;) {
        if (rd->left)
            return next_item(rd, ret);
        r = load_block(rd, ret);
        if (r == 2)
            continue;
        if (r == 0)
            ret->type = DLOG_EOF;
        return r;
    }
}
