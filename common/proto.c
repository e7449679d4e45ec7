/* SPDX-License-Identifier: MIT */
/*
 * proto: divvy protocol v1 codec (docs/protocol.md).  proto_parse() splits
 * one request line off the input, copies it once into the request's own
 * buffer (no allocation) and decodes the copy in a single forward pass, each
 * string NUL-terminated in place; pairs are kept sorted by key, a repeated
 * key replacing the earlier value.  The proto_fmt_* functions write reply lines with their own
 * decimal conversion, not the printf family (a HIT's reply is on every
 * request's path).  Everything here is pure and thread-safe; nothing logs.
 */
#include <errno.h>
#include <string.h>

#include "proto.h"

#define UNKNOWN_PREFIX "Unrecognized command: "

/* Reasons sent with ERR bad-request and friends: static, no '"' or newline. */
static const char R_NUL[] = "NUL byte in request";
static const char R_UNTERMINATED[] = "unterminated quoted string";
static const char R_AFTER_QUOTE[] = "expected whitespace after quoted string";
static const char R_QUOTE_IN_UNQUOTED[] = "quote inside unquoted string";
static const char R_EXPECTED_EQ[] = "expected '=' after key";
static const char R_EMPTY_KEY[] = "empty key";
static const char R_EQ_IN_VALUE[] = "unexpected '=' in value";
static const char R_AFTER_COMMAND[] = "expected whitespace after command";
static const char R_NO_ARGS[] = "command takes no arguments";
static const char R_TAKE_COUNT[] = "TAKE needs a count from 1 to 1000000000";
static const char R_DEBIT_COUNT[] = "DEBIT needs a count from 1 to 1000000000000";
static const char R_TOO_MANY_KEYS[] = "more than 32 distinct keys";
static const char R_REPORT[] = "REPORT needs <mono_ms> <TAKE|PEEK|DEBIT> <n> <0|1> <credit> "
                               "<reset_s> <16 hex digits> before its pairs";

static const char *const err_codes[] = {
    [PROTO_E_NONE] = "unknown",
    [PROTO_E_UNKNOWN_COMMAND] = "unknown-command",
    [PROTO_E_UNKNOWN] = "unknown",
    [PROTO_E_BAD_REQUEST] = "bad-request",
    [PROTO_E_TOO_MANY_KEYS] = "too-many-keys",
    [PROTO_E_LINE_TOO_LONG] = "line-too-long",
    [PROTO_E_FORBIDDEN] = "forbidden",
    [PROTO_E_RELOAD_FAILED] = "reload-failed",
    [PROTO_E_BUSY] = "busy",
    [PROTO_E_NO_COUNTER] = "no-counter",
};

struct verb_name {
    const char *name;
    size_t len;
    enum proto_verb verb;
    bool has_pairs;
};

#define VERB(name, verb, has_pairs) { name, sizeof(name) - 1, verb, has_pairs }

static const struct verb_name verbs[] = {
    VERB("HIT", PROTO_HIT, true),
    VERB("TAKE", PROTO_TAKE, true),
    VERB("PEEK", PROTO_PEEK, true),
    VERB("RESET", PROTO_RESET, true),
    VERB("EXPLAIN", PROTO_EXPLAIN, true),
    VERB("RULES", PROTO_RULES, false),
    VERB("STATS", PROTO_STATS, false),
    VERB("RELOAD", PROTO_RELOAD, true),
    VERB("PING", PROTO_PING, false),
    VERB("QUIT", PROTO_QUIT, false),
    VERB("COUNTERS", PROTO_COUNTERS, true),
    VERB("REFILL", PROTO_REFILL, true),
    VERB("FAST", PROTO_FAST, false),
    VERB("DROPIN", PROTO_DROPIN, true),
    VERB("DEBIT", PROTO_DEBIT, true),
    VERB("REPORT", PROTO_REPORT, true),
};


/*
 * The bytes the grammar gives a meaning, one table load per byte: C_WS is the
 * ASCII part of JavaScript's \s, which divvy's parser uses; C_END the NUL
 * that ends the line's copy (proto_parse() refuses a NUL inside a line).
 */
enum {
    C_WS = 1,
    C_QUOTE = 2,
    C_EQ = 4,
    C_END = 8,
};

static const unsigned char byte_class[256] = {
    ['\t'] = C_WS, ['\n'] = C_WS, ['\v'] = C_WS, ['\f'] = C_WS, ['\r'] = C_WS, [' '] = C_WS,
    ['"'] = C_QUOTE, ['='] = C_EQ, ['\0'] = C_END,
};

static bool is_ws(unsigned char c)
{
    return byte_class[c] & C_WS;
}

/* The line's copy in req->buf being decoded: [p, end) is what is left of it,
 * CR and LF excluded, and *end is its terminating NUL. */
struct cursor {
    char *p;
    char *end;
};

static unsigned char at(const struct cursor *c)
{
    return (unsigned char)*c->p;
}

static bool at_end_or_ws(const struct cursor *c)
{
    return byte_class[at(c)] & (C_WS | C_END);
}

static void skip_ws(struct cursor *c)
{
    char *p = c->p;

    while (is_ws((unsigned char)*p))
        p++;
    c->p = p;
}

static char to_upper(char ch)
{
    return ch >= 'a' && ch <= 'z' ? (char)(ch - 'a' + 'A') : ch;
}

/* Bytewise order of keys.  Keys are a few bytes and most differ in the first
 * one: a loop here costs less than a call to memcmp(). */
static int cmp_key(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;

    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (unsigned char)a[i] - (unsigned char)b[i];
    return (alen > blen) - (alen < blen);
}

/*
 * Puts @key=@value into the sorted req->kv, replacing the value of an equal
 * key.  Requests carry a few pairs, often in order: the place is found by
 * walking back from the end, which for the usual last-is-greatest pair is one
 * comparison, and finds a repeated key on the way.
 */
static enum proto_err kv_put(struct proto_req *req, const char *key, size_t key_len,
                             const char *value, size_t value_len)
{
    struct proto_kv *kv = req->kv;
    unsigned i = req->n_kv;
    int r = 1;

    while (i > 0 && (r = cmp_key(kv[i - 1].key, kv[i - 1].key_len, key, key_len)) > 0)
        i--;
    if (i > 0 && r == 0) {
        i--;
    } else {
        if (req->n_kv == PROTO_KV_MAX) {
            req->reason = R_TOO_MANY_KEYS;
            return PROTO_E_TOO_MANY_KEYS;
        }
        for (unsigned j = req->n_kv; j > i; j--)
            kv[j] = kv[j - 1];
        req->n_kv++;
        kv[i].key = key;
        kv[i].key_len = (uint16_t)key_len;
    }
    kv[i].value = value;
    kv[i].value_len = (uint16_t)value_len;
    return PROTO_E_NONE;
}

/*
 * Reads one protocol string at the cursor: "quoted" (runs to the next '"')
 * or unquoted [^"=\s]* (possibly empty: the caller decides what that means).
 * Leaves the cursor on the byte after it; the caller checks what may follow
 * and, once it has, NUL-terminates the string in place over the byte that
 * ended it (the closing quote, '=' or whitespace).  Returns its length, or
 * -EINVAL for an unterminated quote.
 */
static inline ssize_t read_string(struct cursor *c, char **ret_s, bool *ret_quoted)
{
    char *start = c->p, *p;

    *ret_quoted = at(c) == '"';
    if (*ret_quoted) {
        char *stop;

        start++;
        stop = memchr(start, '"', (size_t)(c->end - start));
        if (!stop)
            return -EINVAL;
        c->p = stop + 1;
        *ret_s = start;
        return stop - start;
    }
    /* A local pointer: stores through c->p could alias the bytes read. */
    p = start;
    while (!byte_class[(unsigned char)*p])
        p++;
    c->p = p;
    *ret_s = start;
    return p - start;
}

/* Reads key=value pairs up to the end of the line into req->kv. */
static enum proto_err parse_pairs(struct cursor *c, struct proto_req *req)
{
    char *key, *value;
    ssize_t key_len, value_len;
    bool quoted;

    for (skip_ws(c); c->p != c->end; skip_ws(c)) {
        key_len = read_string(c, &key, &quoted);
        if (key_len < 0) {
            req->reason = R_UNTERMINATED;
            return PROTO_E_BAD_REQUEST;
        }
        if (at(c) != '=') {
            req->reason = !quoted && at(c) == '"' ? R_QUOTE_IN_UNQUOTED : R_EXPECTED_EQ;
            return PROTO_E_BAD_REQUEST;
        }
        if (key_len == 0) {
            req->reason = R_EMPTY_KEY;
            return PROTO_E_BAD_REQUEST;
        }
        c->p++;
        key[key_len] = '\0';

        value_len = read_string(c, &value, &quoted);
        if (value_len < 0) {
            req->reason = R_UNTERMINATED;
            return PROTO_E_BAD_REQUEST;
        }
        if (!at_end_or_ws(c)) {
            if (quoted)
                req->reason = R_AFTER_QUOTE;
            else
                req->reason = at(c) == '"' ? R_QUOTE_IN_UNQUOTED : R_EQ_IN_VALUE;
            return PROTO_E_BAD_REQUEST;
        }
        if (c->p != c->end)
            c->p++;
        value[value_len] = '\0';

        if (kv_put(req, key, (size_t)key_len, value, (size_t)value_len) != PROTO_E_NONE)
            return PROTO_E_TOO_MANY_KEYS;
    }
    return PROTO_E_NONE;
}

/* TAKE's count: unquoted decimal digits, 1..PROTO_TAKE_MAX (DEBIT's:
 * 1..PROTO_DEBIT_MAX), then whitespace or end. */
static enum proto_err parse_amount(struct cursor *c, struct proto_req *req)
{
    bool debit = req->verb == PROTO_DEBIT;
    uint64_t n = 0, max = debit ? PROTO_DEBIT_MAX : PROTO_TAKE_MAX;
    const char *start;

    skip_ws(c);
    start = c->p;
    while (at(c) >= '0' && at(c) <= '9') {
        n = n * 10 + (uint64_t)(at(c) - '0');
        if (n > max)
            n = max + 1;                /* saturate: keeps n * 10 from overflowing */
        c->p++;
    }
    if (c->p == start || !at_end_or_ws(c) || n < 1 || n > max) {
        req->reason = debit ? R_DEBIT_COUNT : R_TAKE_COUNT;
        return PROTO_E_BAD_REQUEST;
    }
    req->amount = n;
    return PROTO_E_NONE;
}

/*
 * One of REPORT's fields: an unquoted word at the cursor (after whitespace)
 * that ends at whitespace or the end of the line.  Its length, 0 when there
 * is none (or a quote or '=' is in it).
 */
static size_t report_word(struct cursor *c, const char **ret)
{
    char *start;
    size_t len;

    skip_ws(c);
    start = c->p;
    while (!byte_class[at(c)])
        c->p++;
    len = (size_t)(c->p - start);
    if (len == 0 || !at_end_or_ws(c))
        return 0;
    *ret = start;
    return len;
}

/* Decimal @w[0..@len) into *@ret: 1..20 digits, no sign, at most @max. */
static bool report_u64(const char *w, size_t len, uint64_t max, uint64_t *ret)
{
    uint64_t v = 0;

    if (len == 0 || len > 20)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned)(w[i] - '0');

        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v > max)
        return false;
    *ret = v;
    return true;
}

/* Exactly 16 lowercase hex digits (a rule id as RULES shows it) into *@ret. */
static bool report_hex(const char *w, size_t len, uint64_t *ret)
{
    uint64_t v = 0;

    if (len != 16)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = w[i];
        unsigned d = ch >= '0' && ch <= '9' ? (unsigned)(ch - '0')
                     : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10) : 16;

        if (d > 15)
            return false;
        v = v << 4 | d;
    }
    *ret = v;
    return true;
}

/* REPORT's seven fields (docs/protocol.md "REPORT") into req->report and req->amount. */
static enum proto_err parse_report(struct cursor *c, struct proto_req *req)
{
    struct proto_report *r = &req->report;
    const char *w[7];
    size_t len[7];
    uint64_t flag = 0;

    for (int i = 0; i < 7; i++) {
        len[i] = report_word(c, &w[i]);
        if (len[i] == 0)
            goto bad;
    }
    if (len[1] == 4 && memcmp(w[1], "TAKE", 4) == 0)
        r->op = PROTO_TAKE;
    else if (len[1] == 4 && memcmp(w[1], "PEEK", 4) == 0)
        r->op = PROTO_PEEK;
    else if (len[1] == 5 && memcmp(w[1], "DEBIT", 5) == 0)
        r->op = PROTO_DEBIT;
    else
        goto bad;
    if (!report_u64(w[0], len[0], UINT64_MAX, &r->mono_ms) ||
        !report_u64(w[2], len[2], r->op == PROTO_DEBIT ? PROTO_DEBIT_MAX
                                  : r->op == PROTO_TAKE ? PROTO_TAKE_MAX : 1, &req->amount) ||
        req->amount == 0 || !report_u64(w[3], len[3], 1, &flag) ||
        !report_u64(w[4], len[4], UINT64_MAX, &r->credit) ||
        !report_u64(w[5], len[5], UINT64_MAX, &r->reset_s) ||
        !report_hex(w[6], len[6], &r->rule_id))
        goto bad;
    r->allowed = flag == 1;
    return PROTO_E_NONE;
bad:
    req->amount = 1;
    req->reason = R_REPORT;
    return PROTO_E_BAD_REQUEST;
}

/* The verb whose name @word is, in any case; NULL when none is. */
static const struct verb_name *find_verb(const char *word, size_t len)
{
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
        const struct verb_name *v = &verbs[i];
        size_t j = 0;

        if (v->len != len)
            continue;
        while (j < len && to_upper(word[j]) == v->name[j])
            j++;
        if (j == len)
            return v;
    }
    return NULL;
}

/*
 * Sets up ERR unknown-command with divvy's reason, "Unrecognized command:
 * <WORD>", built in req->buf over the line's copy, which is no longer needed
 * (the word upper-cased, '"' and control bytes replaced so the reason can be
 * quoted).  A word of the longest line fits: see proto_req.buf.
 */
static enum proto_err unknown_command(struct proto_req *req, const char *word, size_t len)
{
    size_t plen = sizeof(UNKNOWN_PREFIX) - 1;
    char *dst = req->buf;

    _Static_assert(sizeof(UNKNOWN_PREFIX) + PROTO_LINE_MAX <= sizeof(req->buf),
                   "the reason of any unknown word fits proto_req.buf");
    memmove(dst + plen, word, len);
    memcpy(dst, UNKNOWN_PREFIX, plen);
    for (size_t i = plen; i < plen + len; i++) {
        unsigned char ch = (unsigned char)to_upper(dst[i]);

        dst[i] = (char)(ch == '"' || ch < 0x20 || ch == 0x7f ? '_' : ch);
    }
    dst[plen + len] = '\0';
    req->reason = dst;
    return PROTO_E_UNKNOWN_COMMAND;
}

/*
 * Decodes one line, CR and LF already cut off: copies it into req->buf,
 * NUL-terminated, and decodes the copy in one forward pass, each string
 * NUL-terminated in place (so the decoded strings take no more room than the
 * line did, and no string is copied twice).
 */
static enum proto_err parse_line(const char *line, size_t len, struct proto_req *req)
{
    struct cursor c = { .p = req->buf, .end = req->buf + len };
    const struct verb_name *v;
    char *word;
    size_t word_len = 0;
    bool quoted = false;
    enum proto_err err;

    if (memchr(line, '\0', len)) {
        req->reason = R_NUL;
        return PROTO_E_BAD_REQUEST;
    }
    memcpy(req->buf, line, len);
    req->buf[len] = '\0';

    /* As divvy: the command word is a string; unquoted it ends at whitespace or '='. */
    if (at(&c) == '"') {
        char *stop = memchr(c.p + 1, '"', len - 1);

        if (!stop) {
            req->reason = R_UNTERMINATED;
            return PROTO_E_BAD_REQUEST;
        }
        word = c.p + 1;
        word_len = (size_t)(stop - word);
        c.p = stop + 1;
        quoted = true;
    } else {
        word = c.p;
        while (!(byte_class[(unsigned char)word[word_len]] & (C_WS | C_EQ | C_END)))
            word_len++;
        c.p += word_len;
    }

    v = find_verb(word, word_len);
    if (!v)
        return unknown_command(req, word, word_len);
    req->verb = v->verb;

    if (!at_end_or_ws(&c)) {
        req->reason = quoted ? R_AFTER_QUOTE : R_AFTER_COMMAND;
        return PROTO_E_BAD_REQUEST;
    }
    if (!v->has_pairs) {
        skip_ws(&c);
        if (c.p != c.end) {
            req->reason = R_NO_ARGS;
            return PROTO_E_BAD_REQUEST;
        }
        return PROTO_E_NONE;
    }
    if (v->verb == PROTO_TAKE || v->verb == PROTO_DEBIT) {
        err = parse_amount(&c, req);
        if (err != PROTO_E_NONE)
            return err;
    }
    if (v->verb == PROTO_REPORT) {
        err = parse_report(&c, req);
        if (err != PROTO_E_NONE)
            return err;
    }
    return parse_pairs(&c, req);
}

ssize_t proto_parse(const char *data, size_t len, struct proto_req *req)
{
    size_t scan = len < PROTO_LINE_MAX ? len : PROTO_LINE_MAX;
    const char *nl = scan ? memchr(data, '\n', scan) : NULL;
    size_t line_len;

    if (!nl)
        return len < PROTO_LINE_MAX ? 0 : -EMSGSIZE;

    req->verb = PROTO_NONE;
    req->err = PROTO_E_NONE;
    req->reason = NULL;
    req->amount = 1;
    req->n_kv = 0;

    line_len = (size_t)(nl - data);
    if (line_len > 0 && data[line_len - 1] == '\r')
        line_len--;
    if (line_len > 0) {
        req->err = parse_line(data, line_len, req);
        if (req->err != PROTO_E_NONE)
            req->n_kv = 0;      /* nobody acts on half a request */
    }
    return (ssize_t)(nl - data) + 1;
}

/*
 * Lower bound of @key in the sorted kv[0..n): the index of the first key not
 * less than it.  *ret_found tells whether that key is equal.
 */
static unsigned kv_search(const struct proto_kv *kv, unsigned n, const char *key,
                          size_t key_len, bool *ret_found)
{
    unsigned lo = 0, hi = n;

    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;

        if (cmp_key(kv[mid].key, kv[mid].key_len, key, key_len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *ret_found = lo < n && cmp_key(kv[lo].key, kv[lo].key_len, key, key_len) == 0;
    return lo;
}

const struct proto_kv *proto_find(const struct proto_req *req, const char *key, size_t key_len)
{
    bool found;
    unsigned i;

    if (!req || req->n_kv == 0)
        return NULL;
    i = kv_search(req->kv, req->n_kv, key, key_len, &found);
    return found ? &req->kv[i] : NULL;
}

const char *proto_err_code(enum proto_err err)
{
    if ((unsigned)err >= sizeof(err_codes) / sizeof(err_codes[0]))
        return "unknown";
    return err_codes[err];
}

/* ---- replies ------------------------------------------------------------------ */

/* "OK false " and two 20-digit numbers with their separators: the longest OK line. */
#define OK_HEAD_MAX 64

static const uint64_t ten_to_the[20] = {
    1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
    100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL,
    10000000000000ULL, 100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL,
    100000000000000000ULL, 1000000000000000000ULL, 10000000000000000000ULL,
};

static const char digit_pairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Writes the two digits of @d (< 100) before @q; returns where they start. */
static char *put_pair(char *q, unsigned d)
{
    q -= 2;
    memcpy(q, &digit_pairs[d * 2], 2);
    return q;
}

/* Writes @v in decimal at @p, as printf's %llu; returns the digits written (1..20). */
static size_t fmt_u64(char *p, uint64_t v)
{
    /* 1233 / 4096 ~ log10(2): from the bit length, the digit count or one less. */
    unsigned t = ((64 - (unsigned)__builtin_clzll(v | 1)) * 1233) >> 12;
    size_t n = t + ((v | 1) >= ten_to_the[t]);
    char *q = p + n;
    uint32_t w;

    /* Two digits a step; in 32-bit arithmetic, cheaper, once the rest fits. */
    for (; v > UINT32_MAX; v /= 100)
        q = put_pair(q, (unsigned)(v % 100));
    for (w = (uint32_t)v; w >= 100; w /= 100)
        q = put_pair(q, w % 100);
    if (w >= 10)
        put_pair(q, w);
    else
        q[-1] = (char)('0' + w);
    return n;
}

/* "OK true 57 60" (no newline) at @p, which has OK_HEAD_MAX bytes; returns its length. */
static size_t fmt_ok_head(char *p, bool allowed, uint64_t credit, uint64_t reset_seconds)
{
    size_t n;

    if (allowed) {
        memcpy(p, "OK true ", 8);
        n = 8;
    } else {
        memcpy(p, "OK false ", 9);
        n = 9;
    }
    n += fmt_u64(p + n, credit);
    p[n++] = ' ';
    n += fmt_u64(p + n, reset_seconds);
    return n;
}

/*
 * Ends a reply of @len bytes whose first @head_len are at @head and the rest,
 * if any, is @tail, as snprintf() does: written whole with its NUL when it
 * fits @size, else cut to what fits (NUL-terminated when @size > 0) and
 * -ENOBUFS.
 */
static int fmt_finish(char *buf, size_t size, const char *head, size_t head_len,
                      const char *tail, size_t len)
{
    size_t n = len < size ? len : size ? size - 1 : 0;
    size_t h = n < head_len ? n : head_len;

    if (size == 0)
        return -ENOBUFS;
    memcpy(buf, head, h);
    memcpy(buf + h, tail, n - h);
    buf[n] = '\0';
    return len < size ? (int)len : -ENOBUFS;
}

int proto_fmt_ok(char *buf, size_t size, bool allowed, uint64_t credit, uint64_t reset_seconds)
{
    char line[OK_HEAD_MAX];
    size_t n;

    /* The common case (a reply buffer of PROTO_REPLY_MAX) writes in place. */
    if (size > OK_HEAD_MAX) {
        n = fmt_ok_head(buf, allowed, credit, reset_seconds);
        buf[n++] = '\n';
        buf[n] = '\0';
        return (int)n;
    }
    n = fmt_ok_head(line, allowed, credit, reset_seconds);
    line[n++] = '\n';
    return fmt_finish(buf, size, line, n, "", n);
}

int proto_fmt_ok_rule(char *buf, size_t size, bool allowed, uint64_t credit,
                      uint64_t reset_seconds, const char *rule)
{
    char line[OK_HEAD_MAX + 1];
    size_t n = fmt_ok_head(line, allowed, credit, reset_seconds), rule_len = strlen(rule);

    line[n++] = ' ';
    if (n + rule_len + 1 < size) {
        memcpy(buf, line, n);
        memcpy(buf + n, rule, rule_len);
        n += rule_len;
        buf[n++] = '\n';
        buf[n] = '\0';
        return (int)n;
    }
    /* Too long: the cut never reaches the newline, so the rule is the whole tail. */
    return fmt_finish(buf, size, line, n, rule, n + rule_len + 1);
}

/* A byte the protocol cannot carry inside a quoted string, or that would garble a log line. */
static char safe_byte(char ch)
{
    unsigned char u = (unsigned char)ch;

    return u == '"' || u < 0x20 || u == 0x7f ? '_' : ch;
}

int proto_fmt_err(char *buf, size_t size, enum proto_err err, const char *reason)
{
    const char *code = proto_err_code(err);
    size_t code_len = strlen(code);
    size_t fixed = 4 + code_len + 1 + (reason ? 3 : 0);    /* "ERR " code [ "" ] "\n" */
    size_t reason_len = 0, len, pos;

    /* The reason is cut so that the line fits PROTO_REPLY_MAX, at a UTF-8 boundary. */
    if (reason) {
        size_t room = PROTO_REPLY_MAX - 1 - fixed;

        reason_len = strnlen(reason, room + 1);
        if (reason_len > room) {
            reason_len = room;
            while (reason_len > 0 && ((unsigned char)reason[reason_len] & 0xc0) == 0x80)
                reason_len--;
        }
    }
    len = fixed + reason_len;
    if (len + 1 > size)
        return -ENOBUFS;

    memcpy(buf, "ERR ", 4);
    memcpy(buf + 4, code, code_len);
    pos = 4 + code_len;
    if (reason) {
        buf[pos++] = ' ';
        buf[pos++] = '"';
        for (size_t i = 0; i < reason_len; i++)
            buf[pos++] = safe_byte(reason[i]);
        buf[pos++] = '"';
    }
    buf[pos++] = '\n';
    buf[pos] = '\0';
    return (int)pos;
}

int proto_fmt_multi_head(char *buf, size_t size, unsigned n_lines)
{
    char line[OK_HEAD_MAX];
    size_t n = 3;

    memcpy(line, "OK ", 3);
    n += fmt_u64(line + n, n_lines);
    line[n++] = '\n';
    return fmt_finish(buf, size, line, n, "", n);
}

int proto_fmt_string(char *buf, size_t size, const char *s, size_t len)
{
    bool quote = len == 0;
    size_t pos = 0;

    for (size_t i = 0; i < len && !quote; i++)
        quote = s[i] == '"' || s[i] == '=' || is_ws((unsigned char)s[i]);
    if (len > INT32_MAX - 3 || len + (quote ? 2 : 0) + 1 > size)
        return -ENOBUFS;

    if (quote)
        buf[pos++] = '"';
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];

        /* Neither a quote nor a line end can be carried; NUL is refused by proto_parse. */
        buf[pos++] = ch == '"' || ch == '\n' || ch == '\0' ? '_' : ch;
    }
    if (quote)
        buf[pos++] = '"';
    buf[pos] = '\0';
    return (int)pos;
}

/* ---- REPORT (libdivvy's fast path to divvyd) ---------------------------------------- */

/* proto_fmt_string() for a fast-path client's every decision: a string of
 * plain bytes (the usual key or value) is one scan and one copy. */
static int fmt_report_string(char *buf, size_t size, const char *s, size_t len)
{
    size_t i = 0;

    while (i < len && !byte_class[(unsigned char)s[i]])
        i++;
    if (i < len || len == 0)
        return proto_fmt_string(buf, size, s, len);
    if (len + 1 > size)
        return -ENOBUFS;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return (int)len;
}

/* " k=v" of one pair at @buf + *@pos, leaving room for "\n" and the NUL. */
static int fmt_report_pair(char *buf, size_t cap, size_t *pos, const struct proto_kv *kv)
{
    int m;

    if (*pos + 3 > cap)
        return -EMSGSIZE;
    buf[(*pos)++] = ' ';
    m = fmt_report_string(buf + *pos, cap - *pos, kv->key, kv->key_len);
    if (m < 0 || *pos + (size_t)m + 3 > cap)
        return -EMSGSIZE;
    *pos += (size_t)m;
    buf[(*pos)++] = '=';
    m = fmt_report_string(buf + *pos, cap - *pos, kv->value, kv->value_len);
    if (m < 0 || *pos + (size_t)m + 2 > cap)
        return -EMSGSIZE;
    *pos += (size_t)m;
    return 0;
}

/* Two lower-case hex digits per byte value: a rule id is 8 copies. */
static const char hex_pairs[] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f2021222324252627"
    "28292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f"
    "505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f7071727374757677"
    "78797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3c4c5c6c7"
    "c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeef"
    "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

int proto_fmt_report(char *buf, size_t size, const struct proto_report *r, uint64_t n,
                     const struct proto_kv *kv, unsigned n_kv)
{
    /* "REPORT " mono op n 0|1 credit reset_s id: 7 + 4 * 21 + 6 + 2 + 17 bytes at most. */
    char head[128];
    size_t pos, cap = size < PROTO_LINE_MAX + 1 ? size : PROTO_LINE_MAX + 1;
    const char *op = r->op == PROTO_TAKE ? "TAKE " : r->op == PROTO_PEEK ? "PEEK "
                     : r->op == PROTO_DEBIT ? "DEBIT " : NULL;
    size_t op_len = r->op == PROTO_DEBIT ? 6 : 5;

    if (!op)
        return -EINVAL;
    memcpy(head, "REPORT ", 7);
    pos = 7;
    pos += fmt_u64(head + pos, r->mono_ms);
    head[pos++] = ' ';
    memcpy(head + pos, op, op_len);
    pos += op_len;
    pos += fmt_u64(head + pos, n);
    head[pos++] = ' ';
    head[pos++] = r->allowed ? '1' : '0';
    head[pos++] = ' ';
    pos += fmt_u64(head + pos, r->credit);
    head[pos++] = ' ';
    pos += fmt_u64(head + pos, r->reset_s);
    head[pos++] = ' ';
    for (int i = 7; i >= 0; i--, pos += 2)
        memcpy(head + pos, &hex_pairs[((r->rule_id >> (i * 8)) & 0xff) * 2], 2);
    if (pos + 2 > cap)
        return -EMSGSIZE;
    memcpy(buf, head, pos);
    for (unsigned i = 0; i < n_kv; i++)
        if (fmt_report_pair(buf, cap, &pos, &kv[i]) < 0)
            return -EMSGSIZE;
    buf[pos++] = '\n';
    buf[pos] = '\0';
    return (int)pos;
}
