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

static void put_id(FILE *f, const char *name, uint32_t v)
{
    if (v == DLOG_UNKNOWN_ID)
        fprintf(f, " %s=-", name);
    else
        fprintf(f, " %s=%" PRIu32, name, v);
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

static void print_text(const struct dlog_query_rules *m, const struct dlog_decision *d)
{
    char when[DLOG_QUERY_TIME_MAX], idbuf[DLOG_QUERY_ID_LEN + 1];
    const char *rule = dlog_query_rule_name(m, d->decider_id, idbuf, sizeof(idbuf));
    bool first = true;

    dlog_query_fmt_time(d->unix_ms, when);
    printf("%s %s %" PRIu64 " %s/%s %s", when, dlog_op_name(d->op), d->n,
           dlog_protocol_name(d->protocol), dlog_path_name(d->path), verdict(d));
    if (d->flags & DLOG_F_ERROR)
        printf(" error=%s", err_code(d));
    else
        printf(" credit=%" PRIu64 " reset=%" PRIu64, d->credit, d->reset_s);
    if (d->op == TABLE_RESET && !(d->flags & DLOG_F_ERROR))
        printf(" cleared=%" PRIu32, d->n_reset);
    fputs(" rule=", stdout);
    if (rule[0])
        log_put_word(stdout, rule, strlen(rule));
    else
        fputc('-', stdout);
    put_id(stdout, "uid", d->uid);
    put_id(stdout, "pid", d->pid);
    for (unsigned b = 1; b < sizeof(flag_names) / sizeof(flag_names[0]); b++) {
        if (flag_names[b] && (d->flags & (1u << b))) {
            printf("%s%s", first ? " flags=" : ",", flag_names[b]);
            first = false;
        }
    }
    fputs(" |", stdout);
    for (unsigned i = 0; i < d->n_kv && i < PROTO_KV_MAX; i++) {
        const struct dlog_kv *kv = &d->kv[i];

        fputc(' ', stdout);
        log_put_word(stdout, kv->key, kv->key_len);
        fputc('=', stdout);
        if (kv->redact == DLOG_DROP) {
            fputs("<dropped>", stdout);
        } else if (kv->redact == DLOG_HASH) {
            fputc('#', stdout);
            log_put_word(stdout, kv->value, kv->value_len);
        } else if (kv->value_len) {
            log_put_word(stdout, kv->value, kv->value_len);
        }
    }
    fputc('\n', stdout);
}

/* ---- JSON ------------------------------------------------------------------------------- */

/* A JSON string of @s[0..@len): as it is when valid UTF-8 without NUL,
 * else with each byte outside printable ASCII as "\xNN" (so still one
 * readable, valid string). */
static json_t *jstr(const char *s, size_t len)
{
    json_t *v = memchr(s, '\0', len) ? NULL : json_stringn(s, len);
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

/* Sets @obj[@key] = @v with @key made a valid string as jstr() makes values. */
static int set_bytes_key(json_t *obj, const char *key, size_t key_len, json_t *v)
{
    json_t *k = jstr(key, key_len);
    int r = -ENOMEM;

    if (k && v)
        r = json_object_set_new(obj, json_string_value(k), v) == 0 ? 0 : -ENOMEM;
    else
        json_decref(v);
    json_decref(k);
    return r;
}

static json_t *json_decision(const struct dlog_query_rules *m, const struct dlog_decision *d)
{
    char when[DLOG_QUERY_TIME_MAX], idbuf[DLOG_QUERY_ID_LEN + 1];
    const char *rule = dlog_query_rule_name(m, d->decider_id, idbuf, sizeof(idbuf));
    json_t *o = json_object(), *req = json_object(), *red = NULL, *flags = json_array();
    int r = 0;

    if (!o || !req || !flags)
        goto fail;
    dlog_query_fmt_time(d->unix_ms, when);
    r |= set(o, "unix_ms", json_integer((json_int_t)d->unix_ms));
    r |= set(o, "time", json_string(when));
    r |= set(o, "verb", json_string(dlog_op_name(d->op)));
    r |= set(o, "n", json_integer((json_int_t)d->n));
    r |= set(o, "protocol", json_string(dlog_protocol_name(d->protocol)));
    r |= set(o, "path", json_string(dlog_path_name(d->path)));
    r |= set(o, "allowed", json_boolean(!(d->flags & DLOG_F_ERROR) &&
                                         (d->flags & DLOG_F_ALLOWED)));
    r |= set(o, "credit", json_integer((json_int_t)d->credit));
    r |= set(o, "reset", json_integer((json_int_t)d->reset_s));
    r |= set(o, "rule", jstr(rule, strlen(rule)));
    r |= set(o, "uid", jid(d->uid));
    r |= set(o, "pid", jid(d->pid));
    if (d->flags & DLOG_F_ERROR)
        r |= set(o, "error", json_string(err_code(d)));
    if (d->op == TABLE_RESET)
        r |= set(o, "cleared", json_integer(d->n_reset));
    r |= set(o, "generation", json_integer((json_int_t)d->generation));
    for (unsigned b = 1; b < sizeof(flag_names) / sizeof(flag_names[0]); b++) {
        if (flag_names[b] && (d->flags & (1u << b)))
            r |= json_array_append_new(flags, json_string(flag_names[b])) ? -ENOMEM : 0;
    }
    for (unsigned i = 0; i < d->n_kv && i < PROTO_KV_MAX; i++) {
        const struct dlog_kv *kv = &d->kv[i];

        r |= set_bytes_key(req, kv->key, kv->key_len, jstr(kv->value, kv->value_len));
        if (kv->redact == DLOG_KEEP)
            continue;
        if (!red && !(red = json_object()))
            goto fail;
        r |= set_bytes_key(red, kv->key, kv->key_len,
                           json_string(kv->redact == DLOG_HASH ? "hash" : "drop"));
    }
    r |= set(o, "request", req);
    req = NULL;
    if (red) {
        r |= set(o, "redacted", red);
        red = NULL;
    }
    if (json_array_size(flags)) {
        r |= set(o, "flags", flags);
        flags = NULL;
    }
    if (r)
        goto fail;
    json_decref(flags);
    return o;
fail:
    json_decref(o);
    json_decref(req);
    json_decref(red);
    json_decref(flags);
    return NULL;
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
    if (json)
        return put_json_line(json_decision(m, d));
    print_text(m, d);
    return ferror(stdout) ? -EIO : 0;
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
