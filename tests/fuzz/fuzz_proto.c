/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for common/proto.c.  Feeds the input through
 * proto_parse() the way divvyd consumes a connection's buffer (line after
 * line, skipping to the next newline after -EMSGSIZE), checks the
 * invariants of every parsed request, re-serialises each accepted request
 * with proto_fmt_string() and checks it parses back to the same pairs, and
 * drives the reply formatters with bytes taken from the input.
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Icommon \
 *       tests/fuzz/fuzz_proto.c common/proto.c -o fuzz_proto
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

static const char *const verb_names[] = {
    [PROTO_HIT] = "HIT", [PROTO_TAKE] = "TAKE", [PROTO_PEEK] = "PEEK",
    [PROTO_RESET] = "RESET", [PROTO_EXPLAIN] = "EXPLAIN", [PROTO_RULES] = "RULES",
    [PROTO_STATS] = "STATS", [PROTO_RELOAD] = "RELOAD", [PROTO_PING] = "PING",
    [PROTO_QUIT] = "QUIT", [PROTO_COUNTERS] = "COUNTERS", [PROTO_REFILL] = "REFILL",
    [PROTO_FAST] = "FAST", [PROTO_DROPIN] = "DROPIN", [PROTO_DEBIT] = "DEBIT",
    [PROTO_REPORT] = "REPORT",
};

/* A verb added to proto.h needs its name here (the round trip writes it). */
_Static_assert(sizeof(verb_names) / sizeof(verb_names[0]) == PROTO_N_VERBS,
               "verb_names[] must name every verb of enum proto_verb");

static bool in_buf(const struct proto_req *req, const char *s, size_t len)
{
    return s >= req->buf && s + len < req->buf + sizeof(req->buf);
}

static int cmp_bytes(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int r = n ? memcmp(a, b, n) : 0;

    return r ? r : (alen > blen) - (alen < blen);
}

static void check_string(const struct proto_req *req, const char *s, size_t len)
{
    CHECK(s != NULL);
    CHECK(in_buf(req, s, len));
    CHECK(s[len] == '\0');
    CHECK(memchr(s, '\0', len) == NULL);
    CHECK(memchr(s, '\n', len) == NULL);
}

/* Rebuilds @req as a request line and checks proto_parse reads the same thing back. */
static void check_round_trip(const struct proto_req *req)
{
    static char line[4 * PROTO_LINE_MAX];
    struct proto_req again;
    size_t pos;
    ssize_t r;
    int n;

    CHECK(verb_names[req->verb] != NULL);
    if (req->verb == PROTO_REPORT) {
        /* Its own writer (libdivvy's): the fields, then the pairs. */
        n = proto_fmt_report(line, sizeof(line), &req->report, req->amount, req->kv, req->n_kv);
        if (n == -EMSGSIZE)
            return;                     /* quoting grew it past a line, as below */
        CHECK(n > 0);
        r = proto_parse(line, (size_t)n, &again);
        CHECK(r == n && again.err == PROTO_E_NONE && again.verb == PROTO_REPORT);
        CHECK(again.report.mono_ms == req->report.mono_ms &&
              again.report.credit == req->report.credit &&
              again.report.reset_s == req->report.reset_s &&
              again.report.rule_id == req->report.rule_id &&
              again.report.op == req->report.op && again.report.allowed == req->report.allowed);
        CHECK(again.amount == req->amount && again.n_kv == req->n_kv);
        return;
    }
    n = snprintf(line, sizeof(line), "%s", verb_names[req->verb]);
    CHECK(n > 0);
    pos = (size_t)n;
    if (req->verb == PROTO_TAKE || req->verb == PROTO_DEBIT) {
        n = snprintf(line + pos, sizeof(line) - pos, " %" PRIu64, req->amount);
        CHECK(n > 0);
        pos += (size_t)n;
    }
    for (unsigned i = 0; i < req->n_kv; i++) {
        line[pos++] = ' ';
        n = proto_fmt_string(line + pos, sizeof(line) - pos, req->kv[i].key, req->kv[i].key_len);
        CHECK(n > 0);
        pos += (size_t)n;
        line[pos++] = '=';
        n = proto_fmt_string(line + pos, sizeof(line) - pos, req->kv[i].value,
                             req->kv[i].value_len);
        CHECK(n > 0);
        pos += (size_t)n;
    }
    line[pos++] = '\n';

    r = proto_parse(line, pos, &again);
    if (pos > PROTO_LINE_MAX) {
        /* Quoting empty "k=" values can grow a line past the limit. */
        CHECK(r == -EMSGSIZE);
        return;
    }
    CHECK(r == (ssize_t)pos);
    CHECK(again.err == PROTO_E_NONE);
    CHECK(again.verb == req->verb);
    CHECK(again.amount == req->amount);
    CHECK(again.n_kv == req->n_kv);
    for (unsigned i = 0; i < req->n_kv; i++) {
        CHECK(again.kv[i].key_len == req->kv[i].key_len);
        CHECK(again.kv[i].value_len == req->kv[i].value_len);
        CHECK(memcmp(again.kv[i].key, req->kv[i].key, req->kv[i].key_len) == 0);
        CHECK(memcmp(again.kv[i].value, req->kv[i].value, req->kv[i].value_len) == 0);
    }
}

static void check_err_reply(const struct proto_req *req)
{
    char buf[PROTO_REPLY_MAX];
    int n = proto_fmt_err(buf, sizeof(buf), req->err, req->reason);

    CHECK(n > 0 && n < PROTO_REPLY_MAX);
    CHECK(buf[n] == '\0' && buf[n - 1] == '\n');
    CHECK(memchr(buf, '\n', (size_t)n) == buf + n - 1);
    CHECK(memcmp(buf, "ERR ", 4) == 0);
}

static void check_request(const struct proto_req *req, const uint8_t *line, size_t len)
{
    if (req->err != PROTO_E_NONE) {
        CHECK(req->reason != NULL);
        CHECK(strchr(req->reason, '"') == NULL);
        CHECK(strchr(req->reason, '\n') == NULL);
        CHECK(req->n_kv == 0);
        if (req->err == PROTO_E_UNKNOWN_COMMAND)
            CHECK(strncmp(req->reason, "Unrecognized command: ", 22) == 0);
        check_err_reply(req);
        return;
    }
    CHECK(req->reason == NULL);
    if (req->verb == PROTO_NONE) {
        /* Only an empty line (after the CR strip) gets no reply. */
        CHECK(len == 1 || (len == 2 && line[0] == '\r'));
        CHECK(req->n_kv == 0);
        return;
    }
    CHECK(req->verb > PROTO_NONE && req->verb < PROTO_N_VERBS);
    CHECK(req->n_kv <= PROTO_KV_MAX);
    CHECK(req->amount >= 1 &&
          req->amount <= (req->verb == PROTO_DEBIT ||
                          (req->verb == PROTO_REPORT && req->report.op == PROTO_DEBIT)
                              ? PROTO_DEBIT_MAX : PROTO_TAKE_MAX));
    if (req->verb == PROTO_REPORT)
        CHECK(req->report.op == PROTO_TAKE || req->report.op == PROTO_DEBIT ||
              (req->report.op == PROTO_PEEK && req->amount == 1));
    else if (req->verb != PROTO_TAKE && req->verb != PROTO_DEBIT)
        CHECK(req->amount == 1);
    /* RULES, STATS, PING, QUIT and FAST take no pairs (RELOAD's diff=/dry_run=,
     * COUNTERS', REFILL's, DROPIN's and DEBIT's are the verbs' own). */
    if (req->verb == PROTO_RULES || req->verb == PROTO_STATS || req->verb == PROTO_PING ||
        req->verb == PROTO_QUIT || req->verb == PROTO_FAST)
        CHECK(req->n_kv == 0);
    for (unsigned i = 0; i < req->n_kv; i++) {
        const struct proto_kv *kv = &req->kv[i];

        CHECK(kv->key_len > 0);
        check_string(req, kv->key, kv->key_len);
        check_string(req, kv->value, kv->value_len);
        if (i > 0)
            CHECK(cmp_bytes(req->kv[i - 1].key, req->kv[i - 1].key_len, kv->key,
                            kv->key_len) < 0);
        CHECK(proto_find(req, kv->key, kv->key_len) == kv);
    }
    check_round_trip(req);
}

/* Formatters fed with input bytes: what they write must be what a client can read. */
static void check_formatters(const uint8_t *data, size_t size)
{
    char buf[PROTO_REPLY_MAX], line[PROTO_REPLY_MAX + 16], want[PROTO_REPLY_MAX];
    char reason[PROTO_REPLY_MAX * 2];
    uint64_t credit = 0, secs = 0, c2, s2;
    struct proto_req req;
    size_t slen;
    char word[8];
    int n;

    if (size >= 17) {
        memcpy(&credit, data + 1, 8);
        memcpy(&secs, data + 9, 8);
    }
    n = proto_fmt_ok(buf, sizeof(buf), size && (data[0] & 1), credit, secs);
    CHECK(n > 0 && buf[n - 1] == '\n' && buf[n] == '\0');
    CHECK(sscanf(buf, "OK %7s %" SCNu64 " %" SCNu64, word, &c2, &s2) == 3);
    CHECK(c2 == credit && s2 == secs);
    CHECK(strcmp(word, size && (data[0] & 1) ? "true" : "false") == 0);
    CHECK(proto_fmt_ok(buf, (size_t)n, size && (data[0] & 1), credit, secs) == -ENOBUFS);

    n = proto_fmt_multi_head(buf, sizeof(buf), (unsigned)credit);
    CHECK(n > 0 && buf[n - 1] == '\n');

    /* Any bytes as a reason: one line, no stray quotes, never over PROTO_REPLY_MAX. */
    slen = size < sizeof(reason) - 1 ? size : sizeof(reason) - 1;
    memcpy(reason, data, slen);
    reason[slen] = '\0';
    n = proto_fmt_err(buf, sizeof(buf), (enum proto_err)(size % 12), reason);
    CHECK(n > 0 && n < PROTO_REPLY_MAX);
    CHECK(memchr(buf, '\n', (size_t)n) == buf + n - 1);
    {
        size_t quotes = 0;

        for (int i = 0; i < n; i++)
            quotes += buf[i] == '"';
        CHECK(quotes == 2);
    }

    /* Any bytes as a value: proto_fmt_string + proto_parse give them back, '"' '\n' NUL as '_'. */
    slen = size < 400 ? size : 400;
    memcpy(line, "HIT k=", 6);
    n = proto_fmt_string(line + 6, sizeof(line) - 7, (const char *)data, slen);
    CHECK(n >= 0);
    line[6 + n] = '\n';
    CHECK(proto_parse(line, (size_t)n + 7, &req) == n + 7);
    CHECK(req.err == PROTO_E_NONE && req.verb == PROTO_HIT && req.n_kv == 1);
    for (size_t i = 0; i < slen; i++) {
        char ch = (char)data[i];

        want[i] = ch == '"' || ch == '\n' || ch == '\0' ? '_' : ch;
    }
    CHECK(req.kv[0].value_len == slen);
    CHECK(slen == 0 || memcmp(req.kv[0].value, want, slen) == 0);
    CHECK(proto_fmt_string(line, (size_t)n, (const char *)data, slen) == -ENOBUFS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct proto_req req;
    size_t off = 0;

    while (off < size) {
        const char *p = (const char *)data + off;
        size_t left = size - off;
        ssize_t r = proto_parse(p, left, &req);

        if (r == 0) {
            CHECK(left < PROTO_LINE_MAX);
            CHECK(memchr(p, '\n', left) == NULL);
            break;
        }
        if (r == -EMSGSIZE) {
            const char *nl;

            CHECK(left >= PROTO_LINE_MAX);
            CHECK(memchr(p, '\n', PROTO_LINE_MAX) == NULL);
            /* As divvyd: ERR line-too-long, then drop input up to the next newline. */
            nl = memchr(p, '\n', left);
            if (!nl)
                break;
            off += (size_t)(nl - p) + 1;
            continue;
        }
        CHECK(r > 0);
        CHECK((size_t)r <= left && r <= PROTO_LINE_MAX);
        CHECK(p[r - 1] == '\n');
        CHECK(memchr(p, '\n', (size_t)r - 1) == NULL);
        check_request(&req, (const uint8_t *)p, (size_t)r);
        off += (size_t)r;
    }
    check_formatters(data, size);
    return 0;
}
