/* SPDX-License-Identifier: MIT */
/*
 * client_wire: what libdivvy says and hears on the wire (docs/protocol.md).
 * Parses addresses, checks and normalises a request's key/value pairs (the
 * same checks guard both paths, so a request is valid or invalid whichever
 * path decides it), formats request lines with proto_fmt_string() and parses
 * replies strictly: anything that is not exactly a reply divvyd sends is
 * -EPROTO.  Pure functions; no allocation.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "client_wire.h"

/* ---- addresses --------------------------------------------------------- */

static int parse_port(const char *s, char *out, size_t size)
{
    unsigned long v = 0;
    size_t n = 0;

    for (; s[n]; n++) {
        if (s[n] < '0' || s[n] > '9' || n >= 5)
            return -EINVAL;
        v = v * 10 + (unsigned long)(s[n] - '0');
    }
    if (n == 0 || v == 0 || v > 65535)
        return -EINVAL;
    snprintf(out, size, "%lu", v);
    return 0;
}

int client_addr_parse(const char *s, struct client_addr *ret)
{
    struct client_addr a;
    const char *host, *colon;
    size_t host_len;

    if (!s || !ret)
        return -EINVAL;
    memset(&a, 0, sizeof(a));
    if (strncmp(s, "unix:", 5) == 0) {
        size_t len = strlen(s + 5);

        if (len == 0)
            return -EINVAL;
        if (len >= sizeof(a.path))
            return -ENAMETOOLONG;
        a.kind = CLIENT_ADDR_UNIX;
        memcpy(a.path, s + 5, len + 1);
        *ret = a;
        return 0;
    }
    if (strncmp(s, "tcp:", 4) != 0)
        return -EINVAL;
    host = s + 4;
    if (*host == '[') {
        const char *close = strchr(host, ']');

        if (!close || close[1] != ':')
            return -EINVAL;
        host++;
        host_len = (size_t)(close - host);
        colon = close + 1;
        if (memchr(host, '[', host_len) || !memchr(host, ':', host_len))
            return -EINVAL;             /* brackets are for IPv6 literals */
    } else {
        colon = strchr(host, ':');
        if (!colon || strchr(colon + 1, ':'))
            return -EINVAL;             /* IPv6 needs brackets */
        host_len = (size_t)(colon - host);
    }
    if (host_len == 0)
        return -EINVAL;
    if (host_len >= sizeof(a.host))
        return -ENAMETOOLONG;
    for (size_t i = 0; i < host_len; i++)
        if ((unsigned char)host[i] <= ' ' || host[i] == '/')
            return -EINVAL;
    memcpy(a.host, host, host_len);
    a.host[host_len] = '\0';
    if (parse_port(colon + 1, a.port, sizeof(a.port)) < 0)
        return -EINVAL;
    a.kind = CLIENT_ADDR_TCP;
    *ret = a;
    return 0;
}

/* ---- requests ---------------------------------------------------------- */

/* Bytewise order, as proto_parse() and rules_match() sort keys.  Request
 * keys usually differ in their first bytes: a loop beats a memcmp() call. */
static int cmp_bytes(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;

    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (unsigned char)a[i] < (unsigned char)b[i] ? -1 : 1;
    return (alen > blen) - (alen < blen);
}

/* Byte classes of request strings: 1 cannot be carried, 2 forces quotes. */
#define BAD   1
#define QUOTE 2
static const unsigned char byte_class[256] = {
    ['"'] = BAD, ['\n'] = BAD, ['\r'] = BAD,
    ['='] = QUOTE, [' '] = QUOTE, ['\t'] = QUOTE, ['\v'] = QUOTE, ['\f'] = QUOTE,
};

int client_wire_scan(const char *s, size_t *ret_len)
{
    unsigned cls = 0;
    size_t len = 0;

    for (; s[len] && len < PROTO_LINE_MAX; len++)
        cls |= byte_class[(unsigned char)s[len]];
    if (cls & BAD)
        return -EINVAL;
    if (s[len])
        return -EMSGSIZE;
    *ret_len = len;
    return (int)(len + (len == 0 || (cls & QUOTE) ? 2 : 0));
}

int client_req_prepare(const struct divvy_kv *kv, size_t n_kv, struct client_req *ret)
{
    /* Wire bytes of each kept pair, parallel to ret->kv. */
    size_t wire[PROTO_KV_MAX];
    unsigned n = 0;
    int r;

    if ((!kv && n_kv > 0) || !ret)
        return -EINVAL;
    ret->pairs_len = 0;
    for (size_t i = 0; i < n_kv; i++) {
        size_t klen, vlen, kwire, vwire;
        unsigned lo = 0, hi = n;
        int c = 1;

        if (!kv[i].key || !kv[i].value)
            return -EINVAL;
        r = client_wire_scan(kv[i].key, &klen);
        if (r < 0)
            return r;
        kwire = (size_t)r;
        if (klen == 0)
            return -EINVAL;
        r = client_wire_scan(kv[i].value, &vlen);
        if (r < 0)
            return r;
        vwire = (size_t)r;
        /* Binary search (callers often pass sorted keys: try the end first);
         * the kept keys stay sorted and unique. */
        if (n > 0 && (c = cmp_bytes(ret->kv[n - 1].key, ret->kv[n - 1].key_len, kv[i].key,
                                    klen)) < 0)
            lo = n;
        else if (n > 0 && c == 0)
            lo = n - 1;
        else
            hi = n > 0 ? n - 1 : 0;
        while (c != 0 && lo < hi) {
            unsigned mid = (lo + hi) / 2;

            c = cmp_bytes(ret->kv[mid].key, ret->kv[mid].key_len, kv[i].key, klen);
            if (c == 0)
                lo = mid;
            else if (c < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (c != 0) {
            if (n == PROTO_KV_MAX)
                return -E2BIG;
            for (unsigned j = n; j > lo; j--) {
                ret->kv[j] = ret->kv[j - 1];
                wire[j] = wire[j - 1];
            }
            n++;
        }
        /* A repeated key: the last value wins, as in divvyd's parser. */
        ret->kv[lo].key = kv[i].key;
        ret->kv[lo].key_len = (uint16_t)klen;
        ret->kv[lo].value = kv[i].value;
        ret->kv[lo].value_len = (uint16_t)vlen;
        wire[lo] = 1 + kwire + 1 + vwire;
    }
    ret->n_kv = n;
    for (unsigned i = 0; i < n; i++)
        ret->pairs_len += wire[i];
    return 0;
}

static size_t digits(uint64_t v)
{
    size_t n = 1;

    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

size_t client_line_len(const char *verb, uint64_t amount, size_t pairs_len)
{
    return strlen(verb) + (amount ? 1 + digits(amount) : 0) + pairs_len + 1;
}

size_t client_req_line_len(const struct client_req *req, const char *verb, uint64_t amount)
{
    return client_line_len(verb, amount, req->pairs_len);
}

int client_req_format(const struct client_req *req, const char *verb, uint64_t amount,
                      char *buf, size_t size)
{
    size_t len = client_req_line_len(req, verb, amount), pos;
    int n;

    if (len > PROTO_LINE_MAX)
        return -EMSGSIZE;
    if (len + 1 > size)
        return -ENOBUFS;
    if (amount)
        n = snprintf(buf, size, "%s %llu", verb, (unsigned long long)amount);
    else
        n = snprintf(buf, size, "%s", verb);
    if (n < 0)
        return -EINVAL;
    pos = (size_t)n;
    for (unsigned i = 0; i < req->n_kv; i++) {
        buf[pos++] = ' ';
        n = proto_fmt_string(buf + pos, size - pos, req->kv[i].key, req->kv[i].key_len);
        if (n < 0)
            return n;
        pos += (size_t)n;
        buf[pos++] = '=';
        n = proto_fmt_string(buf + pos, size - pos, req->kv[i].value, req->kv[i].value_len);
        if (n < 0)
            return n;
        pos += (size_t)n;
    }
    buf[pos++] = '\n';
    buf[pos] = '\0';
    return (int)pos;
}

/* ---- replies ----------------------------------------------------------- */

int client_reply_errno(const char *code, size_t len)
{
    static const struct {
        const char *code;
        int err;
    } map[] = {
        { "bad-request", EINVAL },     { "too-many-keys", E2BIG },
        { "line-too-long", EMSGSIZE }, { "forbidden", EPERM },
        { "busy", EBUSY },             { "reload-failed", EINVAL },
        { "unknown-command", ENOSYS }, { "unknown", EIO },
        { "no-counter", ENOSPC },
    };

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strlen(map[i].code) == len && memcmp(map[i].code, code, len) == 0)
            return -map[i].err;
    return -EIO;
}

/* Reads an unsigned decimal without sign, overflow or leading zeros. */
static int parse_u64(const char **p, const char *end, uint64_t *ret)
{
    const char *s = *p;
    uint64_t v = 0;

    if (s == end || *s < '0' || *s > '9')
        return -EPROTO;
    if (*s == '0' && s + 1 < end && s[1] >= '0' && s[1] <= '9')
        return -EPROTO;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return -EPROTO;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *p = s;
    *ret = v;
    return 0;
}

static bool eat(const char **p, const char *end, const char *lit)
{
    size_t n = strlen(lit);

    if ((size_t)(end - *p) < n || memcmp(*p, lit, n) != 0)
        return false;
    *p += n;
    return true;
}

static bool rule_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

static int garbage(const char *line, size_t len, char *errbuf, size_t errsize)
{
    if (errbuf && errsize)
        snprintf(errbuf, errsize, "divvyd sent an unexpected reply: \"%.*s\"",
                 (int)(len > 200 ? 200 : len), line);
    return -EPROTO;
}

static int parse_err(const char *line, size_t len, char *errbuf, size_t errsize)
{
    const char *p = line + 4, *end = line + len, *code = p, *reason = "";
    size_t code_len, reason_len = 0;

    while (p < end && ((*p >= 'a' && *p <= 'z') || *p == '-'))
        p++;
    code_len = (size_t)(p - code);
    if (code_len == 0)
        return garbage(line, len, errbuf, errsize);
    if (p < end) {
        /* ' "reason"': no quote or control byte inside (docs/protocol.md). */
        if (end - p < 3 || p[0] != ' ' || p[1] != '"' || end[-1] != '"')
            return garbage(line, len, errbuf, errsize);
        reason = p + 2;
        reason_len = (size_t)(end - 1 - reason);
        if (memchr(reason, '"', reason_len))
            return garbage(line, len, errbuf, errsize);
    }
    if (errbuf && errsize)
        snprintf(errbuf, errsize, "divvyd: %.*s%s%.*s", (int)code_len, code,
                 reason_len ? ": " : "", (int)reason_len, reason);
    return client_reply_errno(code, code_len);
}

int client_reply_parse(const char *line, size_t len, struct divvy_result *res, char *errbuf,
                       size_t errsize)
{
    const char *p = line, *end = line + len, *rule;
    uint64_t credit, secs;
    bool allowed;

    if (memchr(line, '\0', len) || memchr(line, '\n', len))
        return garbage(line, len, errbuf, errsize);
    if (len > 4 && memcmp(line, "ERR ", 4) == 0)
        return parse_err(line, len, errbuf, errsize);
    if (!eat(&p, end, "OK "))
        return garbage(line, len, errbuf, errsize);
    if (eat(&p, end, "true"))
        allowed = true;
    else if (eat(&p, end, "false"))
        allowed = false;
    else
        return garbage(line, len, errbuf, errsize);
    if (!eat(&p, end, " ") || parse_u64(&p, end, &credit) < 0 || !eat(&p, end, " ") ||
        parse_u64(&p, end, &secs) < 0)
        return garbage(line, len, errbuf, errsize);
    rule = p;
    if (p < end) {
        if (*p != ' ' || end - p < 2 || (size_t)(end - p - 1) >= DIVVY_RULE_MAX)
            return garbage(line, len, errbuf, errsize);
        for (rule = ++p; p < end; p++)
            if (!rule_char(*p))
                return garbage(line, len, errbuf, errsize);
    }
    res->allowed = allowed;
    res->credit = credit;
    res->reset_seconds = secs;
    memcpy(res->rule, rule, (size_t)(end - rule));
    res->rule[end - rule] = '\0';
    res->fast_path = 0;
    return 0;
}

int client_reply_multi(const char *line, size_t len, unsigned long *ret_n)
{
    const char *p = line, *end = line + len;
    uint64_t n;

    if (!eat(&p, end, "OK ") || parse_u64(&p, end, &n) < 0 || p != end)
        return 0;
    if (n > ULONG_MAX)
        return 0;
    *ret_n = (unsigned long)n;
    return 1;
}
