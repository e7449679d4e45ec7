/* SPDX-License-Identifier: MIT */
/*
 * proto: divvy protocol v1 codec (docs/protocol.md).  proto_parse() splits
 * one request line off the input and decodes it in a single forward pass:
 * strings are copied NUL-terminated into the request's own buffer (no
 * allocation) and pairs are kept sorted by key, a repeated key replacing the
 * earlier value.  The proto_fmt_* functions write reply lines.  Everything
 * here is pure and thread-safe; nothing logs.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
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
static const char R_TOO_LONG[] = "request too long";

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
    enum proto_verb verb;
    bool has_pairs;
};

static const struct verb_name verbs[] = {
    { "HIT", PROTO_HIT, true },
    { "TAKE", PROTO_TAKE, true },
    { "PEEK", PROTO_PEEK, true },
    { "RESET", PROTO_RESET, true },
    { "EXPLAIN", PROTO_EXPLAIN, true },
    { "RULES", PROTO_RULES, false },
    { "STATS", PROTO_STATS, false },
    { "RELOAD", PROTO_RELOAD, true },
    { "PING", PROTO_PING, false },
    { "QUIT", PROTO_QUIT, false },
    { "COUNTERS", PROTO_COUNTERS, true },
    { "REFILL", PROTO_REFILL, true },
    { "FAST", PROTO_FAST, false },
    { "DROPIN", PROTO_DROPIN, true },
    { "DEBIT", PROTO_DEBIT, true },
};

#define VERB_NAME_MAX 8     /* strlen("COUNTERS") */

/* The line being decoded: [p, end) is what is left of it, CR and LF excluded. */
struct cursor {
    const char *p;
    const char *end;
    char *out;          /* next free byte of req->buf */
    char *out_end;
};

/* ASCII part of JavaScript's \s, which divvy's parser uses. */
static bool is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static bool at_end_or_ws(const struct cursor *c)
{
    return c->p == c->end || is_ws((unsigned char)*c->p);
}

static void skip_ws(struct cursor *c)
{
    while (c->p < c->end && is_ws((unsigned char)*c->p))
        c->p++;
}

static char to_upper(char ch)
{
    return ch >= 'a' && ch <= 'z' ? (char)(ch - 'a' + 'A') : ch;
}

static int cmp_key(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int r = n ? memcmp(a, b, n) : 0;

    if (r != 0)
        return r;
    return (alen > blen) - (alen < blen);
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

/* Copies @len bytes to the output buffer, NUL-terminated; returns the copy or NULL. */
static char *emit(struct cursor *c, const char *s, size_t len)
{
    char *dst = c->out;

    /* Decoded pairs never outgrow the line (see proto_req.buf); this is a guard. */
    if ((size_t)(c->out_end - c->out) < len + 1)
        return NULL;
    if (len)
        memcpy(dst, s, len);
    dst[len] = '\0';
    c->out += len + 1;
    return dst;
}

/*
 * Reads one protocol string at the cursor: "quoted" (runs to the next '"')
 * or unquoted [^"=\s]* (possibly empty: the caller decides what that means).
 * Leaves the cursor on the byte after it; the caller checks what may follow.
 */
static int read_string(struct cursor *c, const char **ret_s, size_t *ret_len,
                       bool *ret_quoted, const char **reterr_reason)
{
    const char *start, *stop;

    if (c->p < c->end && *c->p == '"') {
        start = c->p + 1;
        stop = memchr(start, '"', (size_t)(c->end - start));
        if (!stop) {
            *reterr_reason = R_UNTERMINATED;
            return -EINVAL;
        }
        c->p = stop + 1;
        *ret_quoted = true;
    } else {
        start = c->p;
        stop = start;
        while (stop < c->end && *stop != '"' && *stop != '=' && !is_ws((unsigned char)*stop))
            stop++;
        c->p = stop;
        *ret_quoted = false;
    }
    *ret_s = emit(c, start, (size_t)(stop - start));
    if (!*ret_s) {
        *reterr_reason = R_TOO_LONG;
        return -EMSGSIZE;
    }
    *ret_len = (size_t)(stop - start);
    return 0;
}

/* Reads key=value pairs up to the end of the line into req->kv. */
static enum proto_err parse_pairs(struct cursor *c, struct proto_req *req)
{
    const char *key, *value;
    size_t key_len, value_len;
    bool quoted, found;
    unsigned i;

    for (skip_ws(c); c->p < c->end; skip_ws(c)) {
        if (read_string(c, &key, &key_len, &quoted, &req->reason) < 0)
            return PROTO_E_BAD_REQUEST;
        if (c->p == c->end || *c->p != '=') {
            req->reason = !quoted && c->p < c->end && *c->p == '"' ? R_QUOTE_IN_UNQUOTED
                                                                  : R_EXPECTED_EQ;
            return PROTO_E_BAD_REQUEST;
        }
        if (key_len == 0) {
            req->reason = R_EMPTY_KEY;
            return PROTO_E_BAD_REQUEST;
        }
        c->p++;

        if (read_string(c, &value, &value_len, &quoted, &req->reason) < 0)
            return PROTO_E_BAD_REQUEST;
        if (!at_end_or_ws(c)) {
            if (quoted)
                req->reason = R_AFTER_QUOTE;
            else
                req->reason = *c->p == '"' ? R_QUOTE_IN_UNQUOTED : R_EQ_IN_VALUE;
            return PROTO_E_BAD_REQUEST;
        }

        i = kv_search(req->kv, req->n_kv, key, key_len, &found);
        if (!found) {
            if (req->n_kv == PROTO_KV_MAX) {
                req->reason = R_TOO_MANY_KEYS;
                return PROTO_E_TOO_MANY_KEYS;
            }
            memmove(&req->kv[i + 1], &req->kv[i], (req->n_kv - i) * sizeof(req->kv[0]));
            req->n_kv++;
            req->kv[i].key = key;
            req->kv[i].key_len = (uint16_t)key_len;
        }
        req->kv[i].value = value;
        req->kv[i].value_len = (uint16_t)value_len;
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
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        n = n * 10 + (uint64_t)(*c->p - '0');
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
 * Sets up ERR unknown-command with divvy's reason, "Unrecognized command:
 * <WORD>", built in req->buf (the word upper-cased, '"' and control bytes
 * replaced so the reason can be quoted).
 */
static enum proto_err unknown_command(struct cursor *c, struct proto_req *req,
                                      const char *word, size_t len)
{
    size_t plen = sizeof(UNKNOWN_PREFIX) - 1;
    char *dst = c->out;

    if ((size_t)(c->out_end - c->out) < plen + len + 1) {
        req->reason = R_TOO_LONG;
        return PROTO_E_BAD_REQUEST;
    }
    memcpy(dst, UNKNOWN_PREFIX, plen);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)to_upper(word[i]);

        dst[plen + i] = (char)(ch == '"' || ch < 0x20 || ch == 0x7f ? '_' : ch);
    }
    dst[plen + len] = '\0';
    c->out += plen + len + 1;
    req->reason = dst;
    return PROTO_E_UNKNOWN_COMMAND;
}

/* Decodes one line, CR and LF already cut off. */
static enum proto_err parse_line(const char *line, size_t len, struct proto_req *req)
{
    struct cursor c = {
        .p = line,
        .end = line + len,
        .out = req->buf,
        .out_end = req->buf + sizeof(req->buf),
    };
    const struct verb_name *v = NULL;
    const char *word;
    char upper[VERB_NAME_MAX];
    size_t word_len;
    bool quoted = false;
    enum proto_err err;

    if (memchr(line, '\0', len)) {
        req->reason = R_NUL;
        return PROTO_E_BAD_REQUEST;
    }

    /* As divvy: the command word is a string; unquoted it ends at whitespace or '='. */
    if (c.p < c.end && *c.p == '"') {
        const char *stop = memchr(c.p + 1, '"', (size_t)(c.end - c.p - 1));

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
        while (c.p < c.end && *c.p != '=' && !is_ws((unsigned char)*c.p))
            c.p++;
        word_len = (size_t)(c.p - word);
    }

    if (word_len <= VERB_NAME_MAX) {
        for (size_t i = 0; i < word_len; i++)
            upper[i] = to_upper(word[i]);
        for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
            if (strlen(verbs[i].name) == word_len && memcmp(verbs[i].name, upper, word_len) == 0) {
                v = &verbs[i];
                break;
            }
        }
    }
    if (!v)
        return unknown_command(&c, req, word, word_len);
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

int proto_fmt_ok(char *buf, size_t size, bool allowed, uint64_t credit, uint64_t reset_seconds)
{
    int n = snprintf(buf, size, "OK %s %" PRIu64 " %" PRIu64 "\n", allowed ? "true" : "false",
                     credit, reset_seconds);

    if (n < 0 || (size_t)n >= size)
        return -ENOBUFS;
    return n;
}

int proto_fmt_ok_rule(char *buf, size_t size, bool allowed, uint64_t credit,
                      uint64_t reset_seconds, const char *rule)
{
    int n = snprintf(buf, size, "OK %s %" PRIu64 " %" PRIu64 " %s\n", allowed ? "true" : "false",
                     credit, reset_seconds, rule);

    if (n < 0 || (size_t)n >= size)
        return -ENOBUFS;
    return n;
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
    int n = snprintf(buf, size, "OK %u\n", n_lines);

    if (n < 0 || (size_t)n >= size)
        return -ENOBUFS;
    return n;
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
