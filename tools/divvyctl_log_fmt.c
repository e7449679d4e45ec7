/* SPDX-License-Identifier: MIT */
/*
 * divvyctl log's output (docs/decision-log.md "divvyctl log"): a decision,
 * a gap or a lock period as one text line or one JSON object per line.
 * Every string from a log is escaped (text) or made valid UTF-8 (JSON): a
 * log file can come from anywhere.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "divvyctl.h"
#include "divvyctl_log.h"
#include "table.h"

/* ---- text ------------------------------------------------------------------------------- */

static bool plain(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != '"' && c != '\\';
}

void log_put_word(FILE *f, const char *s, size_t len)
{
    bool quote = len == 0;

    for (size_t i = 0; i < len && !quote; i++)
        quote = !plain((unsigned char)s[i]) || s[i] == '=';
    if (!quote) {
        fwrite(s, 1, len, f);
        return;
    }
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c >= 0x20 && c < 0x7f)
            fputc(c, f);
        else
            fprintf(f, "\\x%02x", c);
    }
    fputc('"', f);
}

static const char *verdict(const struct dlog_decision *d)
{
    if (d->flags & DLOG_F_ERROR)
        return "error";
    return d->flags & DLOG_F_ALLOWED ? "allowed" : "denied";
}

static const char *err_code(const struct dlog_decision *d)
{
    return proto_err_code((enum proto_err)d->err);
}

/* The DLOG_F_ flags besides allowed and error, as words. */
static const char *const flag_names[] = {
    [1] = "privileged", [2] = "reported", [4] = "store-down", [5] = "table-full",
};

/* ---- a line buffer ---------------------------------------------------------------------- */

/* A decision's line is built here and written with one fwrite(): stdio's
 * per-call costs were most of the time of a long log's output. */
struct lb {
    size_t n;
    bool err;
    char buf[16384];
};

static void lb_flush(struct lb *b)
{
    if (b->n && fwrite(b->buf, 1, b->n, stdout) != b->n)
        b->err = true;
    b->n = 0;
}

static void lb_put(struct lb *b, const char *s, size_t len)
{
    while (len) {
        size_t k = sizeof(b->buf) - b->n;

        if (k == 0) {
            lb_flush(b);
            continue;
        }
        if (k > len)
            k = len;
        memcpy(b->buf + b->n, s, k);
        b->n += k;
        s += k;
        len -= k;
    }
}

static void lb_s(struct lb *b, const char *s)
{
    lb_put(b, s, strlen(s));
}

static void lb_c(struct lb *b, char c)
{
    if (b->n == sizeof(b->buf))
        lb_flush(b);
    b->buf[b->n++] = c;
}

static void lb_u64(struct lb *b, uint64_t v)
{
    char d[20];
    size_t i = sizeof(d);

    do {
        d[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    lb_put(b, d + i, sizeof(d) - i);
}

static void lb_hex(struct lb *b, const char *prefix, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";

    lb_s(b, prefix);
    lb_c(b, hex[c >> 4]);
    lb_c(b, hex[c & 15]);
}

/* log_put_word() into @b. */
static void lb_word(struct lb *b, const char *s, size_t len)
{
    bool quote = len == 0;

    for (size_t i = 0; i < len && !quote; i++)
        quote = !plain((unsigned char)s[i]) || s[i] == '=';
    if (!quote) {
        lb_put(b, s, len);
        return;
    }
    lb_c(b, '"');
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '"' || c == '\\') {
            lb_c(b, '\\');
            lb_c(b, (char)c);
        } else if (c >= 0x20 && c < 0x7f) {
            lb_c(b, (char)c);
        } else {
            lb_hex(b, "\\x", c);
        }
    }
    lb_c(b, '"');
}

static void lb_id(struct lb *b, const char *name, uint32_t v)
{
    lb_c(b, ' ');
    lb_s(b, name);
    lb_c(b, '=');
    if (v == DLOG_UNKNOWN_ID)
        lb_c(b, '-');
    else
        lb_u64(b, v);
}

static void print_text(const struct dlog_query_rules *m, const struct dlog_decision *d,
                       struct lb *b)
{
    char when[DLOG_QUERY_TIME_MAX], idbuf[DLOG_QUERY_ID_LEN + 1];
    const char *rule = dlog_query_rule_name(m, d->decider_id, idbuf, sizeof(idbuf));
    bool first = true;

    dlog_query_fmt_time(d->unix_ms, when);
    lb_s(b, when);
    lb_c(b, ' ');
    lb_s(b, dlog_op_name(d->op));
    lb_c(b, ' ');
    lb_u64(b, d->n);
    lb_c(b, ' ');
    lb_s(b, dlog_protocol_name(d->protocol));
    lb_c(b, '/');
    lb_s(b, dlog_path_name(d->path));
    lb_c(b, ' ');
    lb_s(b, verdict(d));
    if (d->flags & DLOG_F_ERROR) {
        lb_s(b, " error=");
        lb_s(b, err_code(d));
    } else {
        lb_s(b, " credit=");
        lb_u64(b, d->credit);
        lb_s(b, " reset=");
        lb_u64(b, d->reset_s);
    }
    if (d->op == TABLE_RESET && !(d->flags & DLOG_F_ERROR)) {
        lb_s(b, " cleared=");
        lb_u64(b, d->n_reset);
    }
    lb_s(b, " rule=");
    if (rule[0])
        lb_word(b, rule, strlen(rule));
    else
        lb_c(b, '-');
    lb_id(b, "uid", d->uid);
    lb_id(b, "pid", d->pid);
    for (unsigned k = 1; k < sizeof(flag_names) / sizeof(flag_names[0]); k++) {
        if (flag_names[k] && (d->flags & (1u << k))) {
            lb_s(b, first ? " flags=" : ",");
            lb_s(b, flag_names[k]);
            first = false;
        }
    }
    lb_s(b, " |");
    for (unsigned i = 0; i < d->n_kv && i < PROTO_KV_MAX; i++) {
        const struct dlog_kv *kv = &d->kv[i];

        lb_c(b, ' ');
        lb_word(b, kv->key, kv->key_len);
        lb_c(b, '=');
        if (kv->redact == DLOG_DROP) {
            lb_s(b, "<dropped>");
        } else if (kv->redact == DLOG_HASH) {
            lb_c(b, '#');
            lb_word(b, kv->value, kv->value_len);
        } else if (kv->value_len) {
            lb_word(b, kv->value, kv->value_len);
        }
    }
    lb_c(b, '\n');
}

/* ---- JSON ------------------------------------------------------------------------------- */

/* Whether @s[0..@len) is valid UTF-8 (no overlong form, surrogate or code
 * point past U+10FFFF) without a NUL. */
static bool utf8_ok(const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < len; ) {
        unsigned char c = s[i];
        size_t n;
        uint32_t cp;

        if (c == 0)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (len - i - 1 < n)
            return false;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}

/* @s[0..@len) as a JSON string: as it is when valid UTF-8 without NUL,
 * else with each byte outside printable ASCII as the text "\\xNN" (so still
 * one readable, valid string).  Control characters are escaped. */
static void lb_jstr(struct lb *b, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    bool ok = utf8_ok(u, len);

    lb_c(b, '"');
    for (size_t i = 0; i < len; i++) {
        unsigned char c = u[i];

        if (!ok && (c < 0x20 || c >= 0x7f)) {
            lb_hex(b, "\\\\x", c);
        } else if (c == '"' || c == '\\') {
            lb_c(b, '\\');
            lb_c(b, (char)c);
        } else if (c == '\n') {
            lb_s(b, "\\n");
        } else if (c == '\t') {
            lb_s(b, "\\t");
        } else if (c < 0x20) {
            lb_hex(b, "\\u00", c);
        } else {
            lb_c(b, (char)c);
        }
    }
    lb_c(b, '"');
}

/* ,"@key": (or {"@key": first) */
static void lb_jkey(struct lb *b, const char *key, bool first)
{
    lb_s(b, first ? "{\"" : ",\"");
    lb_s(b, key);
    lb_s(b, "\":");
}

static void lb_jid(struct lb *b, const char *key, uint32_t v)
{
    lb_jkey(b, key, false);
    if (v == DLOG_UNKNOWN_ID)
        lb_s(b, "null");
    else
        lb_u64(b, v);
}

/* @key: a plain string (no escaping needed: names of ours). */
static void lb_jname(struct lb *b, const char *key, const char *v)
{
    lb_jkey(b, key, false);
    lb_c(b, '"');
    lb_s(b, v);
    lb_c(b, '"');
}

/* A decision as one JSON line, written directly: no document is built. */
static void json_decision(const struct dlog_query_rules *m, const struct dlog_decision *d,
                          struct lb *b)
{
    char when[DLOG_QUERY_TIME_MAX], idbuf[DLOG_QUERY_ID_LEN + 1];
    const char *rule = dlog_query_rule_name(m, d->decider_id, idbuf, sizeof(idbuf));
    unsigned n_kv = d->n_kv < PROTO_KV_MAX ? d->n_kv : PROTO_KV_MAX;
    bool first = true;

    dlog_query_fmt_time(d->unix_ms, when);
    lb_jkey(b, "unix_ms", true);
    lb_u64(b, d->unix_ms);
    lb_jname(b, "time", when);
    lb_jname(b, "verb", dlog_op_name(d->op));
    lb_jkey(b, "n", false);
    lb_u64(b, d->n);
    lb_jname(b, "protocol", dlog_protocol_name(d->protocol));
    lb_jname(b, "path", dlog_path_name(d->path));
    lb_jkey(b, "allowed", false);
    lb_s(b, !(d->flags & DLOG_F_ERROR) && (d->flags & DLOG_F_ALLOWED) ? "true" : "false");
    lb_jkey(b, "credit", false);
    lb_u64(b, d->credit);
    lb_jkey(b, "reset", false);
    lb_u64(b, d->reset_s);
    lb_jkey(b, "rule", false);
    lb_jstr(b, rule, strlen(rule));
    lb_jid(b, "uid", d->uid);
    lb_jid(b, "pid", d->pid);
    if (d->flags & DLOG_F_ERROR)
        lb_jname(b, "error", err_code(d));
    if (d->op == TABLE_RESET) {
        lb_jkey(b, "cleared", false);
        lb_u64(b, d->n_reset);
    }
    lb_jkey(b, "generation", false);
    lb_u64(b, d->generation);
    lb_jkey(b, "request", false);
    lb_c(b, '{');
    for (unsigned i = 0; i < n_kv; i++) {
        if (i)
            lb_c(b, ',');
        lb_jstr(b, d->kv[i].key, d->kv[i].key_len);
        lb_c(b, ':');
        lb_jstr(b, d->kv[i].value, d->kv[i].value_len);
    }
    lb_c(b, '}');
    for (unsigned i = 0; i < n_kv; i++) {
        if (d->kv[i].redact == DLOG_KEEP)
            continue;
        lb_s(b, first ? ",\"redacted\":{" : ",");
        first = false;
        lb_jstr(b, d->kv[i].key, d->kv[i].key_len);
        lb_s(b, d->kv[i].redact == DLOG_HASH ? ":\"hash\"" : ":\"drop\"");
    }
    if (!first)
        lb_c(b, '}');
    first = true;
    for (unsigned k = 1; k < sizeof(flag_names) / sizeof(flag_names[0]); k++) {
        if (flag_names[k] && (d->flags & (1u << k))) {
            lb_s(b, first ? ",\"flags\":[\"" : ",\"");
            lb_s(b, flag_names[k]);
            lb_c(b, '"');
            first = false;
        }
    }
    if (!first)
        lb_c(b, ']');
    lb_s(b, "}\n");
}

/* For the few objects built with jansson: a string as jput_str() writes it. */
static json_t *jstr(const char *s, size_t len)
{
    json_t *v = utf8_ok((const unsigned char *)s, len) ? json_stringn(s, len) : NULL;
    char *buf;

    if (v)
        return v;
    buf = malloc(len * 4 + 1);
    if (!buf)
        return NULL;
    for (size_t i = 0, o = 0; i <= len; i++) {
        unsigned char c = i < len ? (unsigned char)s[i] : 0;

        if (i == len)
            buf[o] = '\0';
        else if (c >= 0x20 && c < 0x7f)
            buf[o++] = (char)c;
        else
            o += (size_t)sprintf(buf + o, "\\x%02x", c);
    }
    v = json_string(buf);
    free(buf);
    return v;
}

static json_t *jid(uint32_t v)
{
    return v == DLOG_UNKNOWN_ID ? json_null() : json_integer(v);
}

static int set(json_t *o, const char *key, json_t *v)
{
    return v && json_object_set_new(o, key, v) == 0 ? 0 : -ENOMEM;
}

/* Prints @o (a reference taken) as one line. */
static int put_json_line(json_t *o)
{
    int r;

    if (!o)
        return -ENOMEM;
    r = json_dumpf(o, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(o);
    if (r < 0 || fputc('\n', stdout) == EOF)
        return -EIO;
    return 0;
}

int log_print_decision(const struct dlog_query_rules *m, const struct dlog_decision *d,
                       bool json)
{
    struct lb b;

    b.n = 0;
    b.err = false;
    if (json)
        json_decision(m, d, &b);
    else
        print_text(m, d, &b);
    lb_flush(&b);
    return b.err || ferror(stdout) ? -EIO : 0;
}

int log_print_gap(const struct dlog_gap *g, bool json)
{
    char when[DLOG_QUERY_TIME_MAX];

    dlog_query_fmt_time(g->unix_ms, when);
    if (json)
        return put_json_line(json_pack("{s:I, s:I, s:s}", "gap", (json_int_t)g->dropped,
                                       "unix_ms", (json_int_t)g->unix_ms, "time", when));
    printf("%s gap: %" PRIu64 " decision%s not recorded (divvyd's buffer was full)\n", when,
           g->dropped, g->dropped == 1 ? "" : "s");
    return ferror(stdout) ? -EIO : 0;
}

/* ---- lock periods ----------------------------------------------------------------------- */

static json_t *json_period(const char *rule, const struct dlog_locks_period *p)
{
    char start[DLOG_QUERY_TIME_MAX], end[DLOG_QUERY_TIME_MAX];
    json_t *o = json_object();
    bool by = p->ended == DLOG_LOCKS_UNLOCKED;
    int r = 0;

    if (!o)
        return NULL;
    dlog_query_fmt_time(p->start_ms, start);
    dlog_query_fmt_time(p->end_ms, end);
    r |= set(o, "rule", jstr(rule, strlen(rule)));
    r |= set(o, "actor", jstr(p->actor, strlen(p->actor)));
    r |= set(o, "start", json_string(start));
    r |= set(o, "end", json_string(end));
    r |= set(o, "start_ms", json_integer((json_int_t)p->start_ms));
    r |= set(o, "end_ms", json_integer((json_int_t)p->end_ms));
    r |= set(o, "seconds", json_integer((json_int_t)((p->end_ms - p->start_ms) / 1000)));
    r |= set(o, "failures", json_integer((json_int_t)p->failures));
    r |= set(o, "refusals", json_integer((json_int_t)p->refusals));
    r |= set(o, "ended", json_string(dlog_locks_end_name(p->ended)));
    r |= set(o, "unlocked_by_uid", jid(by ? p->unlocked_by_uid : DLOG_UNKNOWN_ID));
    r |= set(o, "unlocked_by_pid", jid(by ? p->unlocked_by_pid : DLOG_UNKNOWN_ID));
    r |= set(o, "from", json_string(p->from_failure ? "failure" : "refusal"));
    if (r) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void print_period(const char *rule, const struct dlog_locks_period *p)
{
    char start[DLOG_QUERY_TIME_MAX], end[DLOG_QUERY_TIME_MAX], len[32];

    dlog_query_fmt_time(p->start_ms, start);
    dlog_query_fmt_time(p->end_ms, end);
    ctl_fmt_duration((p->end_ms - p->start_ms) / 1000, len, sizeof(len));
    log_put_word(stdout, rule, strlen(rule));
    fputc(' ', stdout);
    log_put_word(stdout, p->actor, strlen(p->actor));
    printf(" %s %s %s (%s) failures=%" PRIu64 " refusals=%" PRIu64, start,
           p->ended == DLOG_LOCKS_OPEN ? "open, until" : "to", end, len, p->failures,
           p->refusals);
    if (p->ended == DLOG_LOCKS_EXPIRED)
        fputs(" expired", stdout);
    else if (p->ended == DLOG_LOCKS_UNLOCKED && p->unlocked_by_uid != DLOG_UNKNOWN_ID)
        printf(" unlocked by uid=%" PRIu32, p->unlocked_by_uid);
    else if (p->ended == DLOG_LOCKS_UNLOCKED)
        fputs(" unlocked (not by a RESET this log shows)", stdout);
    if (p->ended == DLOG_LOCKS_UNLOCKED && p->unlocked_by_pid != DLOG_UNKNOWN_ID)
        printf(" pid=%" PRIu32, p->unlocked_by_pid);
    if (!p->from_failure)
        fputs(" (first seen refusing)", stdout);
    fputc('\n', stdout);
}

int log_print_locks(const struct dlog_query_rules *m, const struct dlog_locks_period *p,
                    size_t n, uint64_t since_ms, uint64_t until_ms, bool json)
{
    for (size_t i = 0; i < n; i++) {
        char idbuf[DLOG_QUERY_ID_LEN + 1];
        const char *rule = dlog_query_rule_name(m, p[i].rule_id, idbuf, sizeof(idbuf));
        int r;

        /* Periods that overlap [since, until). */
        if (p[i].end_ms < since_ms || (until_ms && p[i].start_ms >= until_ms))
            continue;
        if (json) {
            r = put_json_line(json_period(rule, &p[i]));
            if (r < 0)
                return r;
        } else {
            print_period(rule, &p[i]);
        }
    }
    return ferror(stdout) ? -EIO : 0;
}
