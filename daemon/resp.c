/* SPDX-License-Identifier: MIT */
/*
 * resp: the RESP2 codec (see resp.h).  A single pass over the buffer with
 * no recursion: a request is one array of bulk strings, so nothing a peer
 * sends nests, and every declared size is bounded before it is trusted.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "resp.h"

/*
 * The header line at @p ("*12\r\n" after its type byte): its value into
 * *ret, the bytes up to and including "\r\n" returned; 0 when the line is
 * not complete yet, -EPROTO when it is not a number or too long.
 */
static ssize_t resp_header(const char *p, size_t len, long long *ret)
{
    size_t i = 0, max = len < RESP_HEADER_MAX ? len : RESP_HEADER_MAX;
    bool neg = false;
    long long v = 0;

    if (i < max && p[i] == '-') {
        neg = true;
        i++;
    }
    for (; i < max && p[i] >= '0' && p[i] <= '9'; i++) {
        if (v > 1000000000LL)
            return -EPROTO;
        v = v * 10 + (p[i] - '0');
    }
    if (i == max)
        return len < RESP_HEADER_MAX ? 0 : -EPROTO;
    if (p[i] != '\r' || i == (size_t)neg)
        return -EPROTO;
    if (i + 1 == len)
        return 0;
    if (p[i + 1] != '\n')
        return -EPROTO;
    *ret = neg ? -v : v;
    return (ssize_t)(i + 2);
}

static ssize_t resp_parse_inline(const char *data, size_t len, struct resp_cmd *cmd,
                                 const char **ret_why)
{
    const char *nl = memchr(data, '\n', len < RESP_INLINE_MAX ? len : RESP_INLINE_MAX);
    size_t end, i = 0;

    if (!nl) {
        if (len < RESP_INLINE_MAX)
            return 0;
        *ret_why = "Protocol error: too big inline request";
        return -EPROTO;
    }
    end = (size_t)(nl - data);
    if (end > 0 && data[end - 1] == '\r')
        end--;
    while (i < end) {
        size_t start;

        while (i < end && (data[i] == ' ' || data[i] == '\t'))
            i++;
        if (i == end)
            break;
        if (cmd->argc == RESP_ARGS_MAX) {
            *ret_why = "Protocol error: too many arguments";
            return -EPROTO;
        }
        start = i;
        while (i < end && data[i] != ' ' && data[i] != '\t')
            i++;
        cmd->argv[cmd->argc] = data + start;
        cmd->len[cmd->argc] = i - start;
        cmd->argc++;
    }
    return nl - data + 1;
}

ssize_t resp_parse(const char *data, size_t len, struct resp_cmd *cmd, const char **ret_why)
{
    long long n, blen;
    size_t off = 1;
    ssize_t h;

    cmd->argc = 0;
    *ret_why = NULL;
    if (len == 0)
        return 0;
    if (data[0] != '*')
        return resp_parse_inline(data, len, cmd, ret_why);
    h = resp_header(data + off, len - off, &n);
    if (h <= 0)
        goto header;
    off += (size_t)h;
    /* Redis answers "*0" and "*-1" with nothing. */
    if (n <= 0)
        return (ssize_t)off;
    if (n > RESP_ARGS_MAX) {
        *ret_why = "Protocol error: invalid multibulk length";
        return -EPROTO;
    }
    for (long long i = 0; i < n; i++) {
        if (off >= len)
            return 0;
        if (data[off] != '$') {
            /* Also a nested array: requests are flat. */
            *ret_why = "Protocol error: expected '$'";
            return -EPROTO;
        }
        off++;
        h = resp_header(data + off, len - off, &blen);
        if (h <= 0)
            goto header;
        off += (size_t)h;
        if (blen < 0 || blen > RESP_BULK_MAX) {
            *ret_why = "Protocol error: invalid bulk length";
            return -EPROTO;
        }
        /* Checked before waiting for it: what we wait for fits the buffer. */
        if (off + (size_t)blen + 2 > RESP_CMD_MAX) {
            *ret_why = "Protocol error: command too long";
            return -EPROTO;
        }
        if (len - off < (size_t)blen + 2)
            return 0;
        if (data[off + blen] != '\r' || data[off + blen + 1] != '\n') {
            *ret_why = "Protocol error: bulk string not ended by CRLF";
            return -EPROTO;
        }
        cmd->argv[cmd->argc] = data + off;
        cmd->len[cmd->argc] = (size_t)blen;
        cmd->argc++;
        off += (size_t)blen + 2;
    }
    return (ssize_t)off;
header:
    if (h == 0 && off + RESP_HEADER_MAX <= RESP_CMD_MAX)
        return 0;
    cmd->argc = 0;
    *ret_why = h == 0 ? "Protocol error: command too long" : "Protocol error: invalid length";
    return -EPROTO;
}

bool resp_arg_is(const struct resp_cmd *cmd, unsigned i, const char *s)
{
    size_t n = strlen(s);

    return i < cmd->argc && cmd->len[i] == n && strncasecmp(cmd->argv[i], s, n) == 0;
}

int resp_arg_int(const struct resp_cmd *cmd, unsigned i, int64_t min, int64_t max,
                 int64_t *ret)
{
    const char *p;
    size_t n, k = 0;
    bool neg = false;
    int64_t v = 0;

    if (i >= cmd->argc)
        return -EINVAL;
    p = cmd->argv[i];
    n = cmd->len[i];
    if (n > 0 && p[0] == '-') {
        neg = true;
        k = 1;
    }
    if (k == n || n - k > 18)
        return -EINVAL;
    for (; k < n; k++) {
        if (p[k] < '0' || p[k] > '9')
            return -EINVAL;
        v = v * 10 + (p[k] - '0');
    }
    if (neg)
        v = -v;
    if (v < min || v > max)
        return -EINVAL;
    *ret = v;
    return 0;
}

/* "<type><s>\r\n" with CR and LF in @s made spaces. */
static int resp_fmt_line(char *buf, size_t size, char type, const char *s)
{
    size_t n = strlen(s);

    if (n + 4 > size)
        return -ENOBUFS;
    buf[0] = type;
    for (size_t i = 0; i < n; i++)
        buf[1 + i] = s[i] == '\r' || s[i] == '\n' ? ' ' : s[i];
    memcpy(buf + 1 + n, "\r\n", 3);
    return (int)n + 3;
}

int resp_fmt_simple(char *buf, size_t size, const char *s)
{
    return resp_fmt_line(buf, size, '+', s);
}

int resp_fmt_error(char *buf, size_t size, const char *s)
{
    return resp_fmt_line(buf, size, '-', s);
}

int resp_fmt_int(char *buf, size_t size, int64_t v)
{
    int n = snprintf(buf, size, ":%" PRId64 "\r\n", v);

    return n < 0 || (size_t)n >= size ? -ENOBUFS : n;
}

int resp_fmt_bulk(char *buf, size_t size, const char *s, size_t len)
{
    int n = snprintf(buf, size, "$%zu\r\n", len);

    if (n < 0 || (size_t)n + len + 3 > size)
        return -ENOBUFS;
    memcpy(buf + n, s, len);
    memcpy(buf + n + len, "\r\n", 3);
    return n + (int)len + 2;
}

int resp_fmt_array(char *buf, size_t size, unsigned n)
{
    int r = snprintf(buf, size, "*%u\r\n", n);

    return r < 0 || (size_t)r >= size ? -ENOBUFS : r;
}

int resp_fmt_proto_err(char *buf, size_t size, enum proto_err err, const char *reason)
{
    char text[PROTO_REPLY_MAX];

    snprintf(text, sizeof(text), "ERR %s%s%s", proto_err_code(err), reason ? " " : "",
             reason ? reason : "");
    return resp_fmt_error(buf, size, text);
}

static int64_t resp_clamp(uint64_t v)
{
    return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

int resp_fmt_hit(char *buf, size_t size, bool allowed, uint64_t credit, uint64_t reset_s,
                 const char *rule)
{
    int n = snprintf(buf, size, "*4\r\n:%d\r\n:%" PRId64 "\r\n:%" PRId64 "\r\n", allowed ? 1 : 0,
                     resp_clamp(credit), resp_clamp(reset_s));
    int m;

    if (n < 0 || (size_t)n >= size)
        return -ENOBUFS;
    m = resp_fmt_bulk(buf + n, size - (size_t)n, rule, strlen(rule));
    return m < 0 ? m : n + m;
}
