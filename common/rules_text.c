/* SPDX-License-Identifier: MIT */
/*
 * rules_text: the strings made from compiled rules: a counter's actor
 * (rules_actor() and its variants, with IP prefixes masked), a rule's actor
 * keys and match set (rules_describe()), and why a rule does not match a
 * request (rules_why_not(), for EXPLAIN).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "rules_private.h"

/* ---- text output: actor, describe, why_not ------------------------------ */

struct out {
    char *buf;
    size_t size, len;
    bool overflow;
};

static void out_put(struct out *o, const char *s, size_t len)
{
    if (o->overflow || o->size - o->len <= len) {
        o->overflow = true;
        return;
    }
    memcpy(o->buf + o->len, s, len);
    o->len += len;
}

static void out_ch(struct out *o, char ch)
{
    out_put(o, &ch, 1);
}

static int out_end(struct out *o)
{
    if (o->overflow || o->len >= o->size) {
        if (o->size)
            o->buf[0] = '\0';
        return -ENOBUFS;
    }
    o->buf[o->len] = '\0';
    return (int)o->len;
}

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r';
}

/*
 * A protocol string (docs/protocol.md): bare when it matches [^"=\s]+, else
 * quoted, with '"' and newline (which no protocol string can carry) as '_'.
 * With @escape, '*' and '\' are written as "\*" and "\\" (an exact value
 * shown in config notation).
 */
static void out_value(struct out *o, const char *s, size_t len, bool escape)
{
    bool quote = len == 0;

    for (size_t i = 0; i < len && !quote; i++)
        quote = s[i] == '"' || s[i] == '=' || is_space(s[i]);
    if (quote)
        out_ch(o, '"');
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];

        if (ch == '"' || ch == '\n')
            ch = '_';
        if (escape && (ch == '*' || ch == '\\'))
            out_ch(o, '\\');
        out_ch(o, ch);
    }
    if (quote)
        out_ch(o, '"');
}

/* A match entry's value: an exact value escaped, a glob as configured;
 * the operators as "cidr(P,P)", "not_cidr(P)", "not(V,V)" (docs/rules.md
 * "Addresses and negation"). */
static void out_pattern(struct out *o, const struct rules *rs, const struct blob_match *m)
{
    const char *v = rs->pool + m->value.off, *end = v + m->value.len;
    char sep = m->kind == KIND_NOT ? '\0' : ' ';

    if (m->kind <= KIND_GLOB) {
        out_value(o, v, m->value.len, m->kind == KIND_EXACT);
        return;
    }
    out_put(o, m->kind == KIND_CIDR ? "cidr(" : m->kind == KIND_NOT ? "not(" : "not_cidr(",
            m->kind == KIND_CIDR ? 5 : m->kind == KIND_NOT ? 4 : 9);
    for (;;) {
        const char *e = memchr(v, sep, (size_t)(end - v));
        size_t n = e ? (size_t)(e - v) : (size_t)(end - v);

        if (m->kind == KIND_NOT)
            out_value(o, v, n, false);
        else
            out_put(o, v, n);
        if (!e)
            break;
        out_ch(o, ',');
        v = e + 1;
    }
    out_ch(o, ')');
}

/* Writes @addr (@n_bytes: 4 or 16) masked to @prefix bits as "addr/len", or
 * as it is without "/len" when @prefix < 0, into @dst (>= 64 bytes); returns
 * the length, 0 on failure. */
static size_t put_masked(int af, unsigned char *addr, size_t n_bytes, int prefix, char *dst)
{
    char text[INET6_ADDRSTRLEN + 1];
    int n;

    for (size_t i = 0; prefix >= 0 && i < n_bytes; i++) {
        int bits = prefix - (int)i * 8;

        if (bits <= 0)
            addr[i] = 0;
        else if (bits < 8)
            addr[i] &= (unsigned char)(0xff << (8 - bits));
    }
    if (!inet_ntop(af, addr, text, sizeof(text)))
        return 0;
    n = prefix < 0 ? snprintf(dst, 64, "%s", text) : snprintf(dst, 64, "%s/%d", text, prefix);
    return n > 0 && n < 64 ? (size_t)n : 0;
}

/*
 * The actor text of value @v on a rule with @prefix4 and @prefix6 (-1: not
 * set; docs/rules.md "Actors") into @dst (>= 64 bytes): its length, or 0
 * when @v stays as it is (not an address, no prefix for its family, or no
 * prefix at all).  An IPv6 address that carries an IPv4 one (IPv4-mapped
 * ::ffff:0:0/96, NAT64's well-known 64:ff9b::/96) is that IPv4 address:
 * masked to @prefix4, or its dotted text without one, so it counts with
 * the plain form.  Other addresses of ::/96 (::1, ::, the deprecated
 * IPv4-compatible ::a.b.c.d) are single hosts, kept whole (/128), so that
 * no prefix merges them.
 */
static size_t mask_ip(const char *v, size_t len, int prefix4, int prefix6, char *dst)
{
    static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    static const unsigned char nat64[12] = { 0, 0x64, 0xff, 0x9b };
    static const unsigned char zero[12];
    unsigned char addr[sizeof(struct in6_addr)];
    char text[INET6_ADDRSTRLEN + 1];

    if ((prefix4 < 0 && prefix6 < 0) || len >= sizeof(text))
        return 0;
    memcpy(text, v, len);
    text[len] = '\0';
    if (inet_pton(AF_INET, text, addr) == 1)
        return prefix4 < 0 ? 0 : put_masked(AF_INET, addr, 4, prefix4, dst);
    if (inet_pton(AF_INET6, text, addr) != 1)
        return 0;
    if (memcmp(addr, mapped, 12) == 0 || memcmp(addr, nat64, 12) == 0)
        return put_masked(AF_INET, addr + 12, 4, prefix4, dst);
    if (prefix6 < 0)
        return 0;
    return put_masked(AF_INET6, addr, 16, memcmp(addr, zero, 12) == 0 ? 128 : prefix6, dst);
}

int rules_actor_join(unsigned n_actor, const struct proto_kv *const *vals, int prefix4,
                     int prefix6, char *buf, size_t size)
{
    struct out o = { buf, size, 0, false };

    for (unsigned i = 0; i < n_actor; i++) {
        const struct proto_kv *kv = vals[i];
        const char *v = kv ? kv->value : "";
        size_t len = kv ? kv->value_len : 0;
        char masked[64];
        size_t m;

        m = mask_ip(v, len, prefix4, prefix6, masked);
        if (m) {
            v = masked;
            len = m;
        }
        if (n_actor == 1) {
            out_put(&o, v, len);
            break;
        }
        if (i)
            out_ch(&o, ',');
        for (size_t j = 0; j < len; j++) {
            if (v[j] == '%')
                out_put(&o, "%25", 3);
            else if (v[j] == ',')
                out_put(&o, "%2C", 3);
            else
                out_ch(&o, v[j]);
        }
    }
    return out_end(&o);
}

int rules_actor_from(const struct rules *rules, uint32_t idx, const struct proto_kv *const *vals,
                     char *buf, size_t size)
{
    const struct blob_rule *r;

    r = rules_rule_at(rules, idx);
    if (!r)
        return -ENOENT;
    return rules_actor_join(r->n_actor, vals, r->prefix4, r->prefix6, buf, size);
}

int rules_actor_ref(const struct rules *rules, uint32_t idx, const struct proto_kv *const *vals,
                    char *buf, size_t size, const char **ret_actor)
{
    const struct blob_rule *r;

    r = rules_rule_at(rules, idx);
    if (!r)
        return -ENOENT;
    /* One key, no prefix: the actor is the value as it is. */
    if (r->n_actor <= 1 && r->prefix4 < 0 && r->prefix6 < 0) {
        const struct proto_kv *kv = r->n_actor ? vals[0] : NULL;

        if (kv && (size_t)kv->value_len >= size)
            return -ENOBUFS;
        *ret_actor = kv ? kv->value : "";
        return kv ? kv->value_len : 0;
    }
    *ret_actor = buf;
    return rules_actor_from(rules, idx, vals, buf, size);
}

int rules_actor(const struct rules *rules, uint32_t idx, const struct rules_req *req,
                char *buf, size_t size)
{
    const struct proto_kv *vals[RULES_ACTOR_KEYS_MAX];
    const struct blob_rule *r;

    r = rules_rule_at(rules, idx);
    if (!r)
        return -ENOENT;
    if (r->n_actor > RULES_ACTOR_KEYS_MAX)
        return -EINVAL;
    for (uint32_t i = 0; i < r->n_actor; i++) {
        const struct blob_str *k = &rules->actor[r->actor_first + i];

        vals[i] = req_find(req, rules->pool + k->off, k->len);
    }
    return rules_actor_from(rules, idx, vals, buf, size);
}

int rules_actor_key(const struct rules *rules, uint32_t idx, unsigned i, const char **ret_key,
                    size_t *ret_len)
{
    const struct blob_rule *r;
    const struct blob_str *k;

    r = rules_rule_at(rules, idx);
    if (!r || i >= r->n_actor)
        return -ENOENT;
    k = &rules->actor[r->actor_first + i];
    *ret_key = rules->pool + k->off;
    *ret_len = k->len;
    return 0;
}

bool rules_value_matters(const struct rules *rules, const char *key, size_t len)
{
    for (uint32_t i = 0; i < rules->hdr->n_match; i++) {
        const struct blob_match *m = &rules->match[i];

        if (m->kind != KIND_PRESENT && bytes_eq(rules->pool + m->key.off, m->key.len, key, len))
            return true;
    }
    return false;
}

int rules_actor_keys(const struct rules *rules, uint32_t idx, char *buf, size_t size)
{
    struct out o = { buf, size, 0, false };
    const struct blob_rule *r;

    r = rules_rule_at(rules, idx);
    if (!r)
        return -ENOENT;
    for (uint32_t i = 0; i < r->n_actor; i++) {
        const struct blob_str *k = &rules->actor[r->actor_first + i];

        if (i)
            out_ch(&o, ',');
        out_put(&o, rules->pool + k->off, k->len);
    }
    return out_end(&o);
}

int rules_describe(const struct rules *rules, uint32_t idx, char *buf, size_t size)
{
    struct out o = { buf, size, 0, false };
    const struct blob_rule *r;

    r = rules_rule_at(rules, idx);
    if (!r)
        return -ENOENT;
    if (r->n_match == 0 && (r->flags & FLAG_DEFAULT))
        out_put(&o, "default", 7);
    for (uint32_t i = 0; i < r->n_match; i++) {
        const struct blob_match *m = &rules->match[r->match_first + i];

        if (i)
            out_ch(&o, ' ');
        out_value(&o, rules->pool + m->key.off, m->key.len, false);
        out_ch(&o, '=');
        out_pattern(&o, rules, m);
    }
    return out_end(&o);
}

static bool value_is_addr(const struct proto_kv *kv)
{
    struct cidr a;

    return cidr_addr_parse(kv->value, kv->value_len, &a) == 0;
}

int rules_why_not(const struct rules *rules, uint32_t idx, const struct rules_req *req,
                  char *buf, size_t size)
{
    struct out o = { buf, size, 0, false };
    const struct blob_rule *r;

    r = rules_rule_at(rules, idx);
    if (!r)
        return -ENOENT;
    if (r->source == RULES_SOURCE_PRIVILEGED && !req->privileged) {
        out_put(&o, "privileged only", 15);
        return out_end(&o);
    }
    for (uint32_t i = 0; i < r->n_match; i++) {
        const struct blob_match *m = &rules->match[r->match_first + i];
        const char *key = rules->pool + m->key.off;
        const struct proto_kv *kv = req_find(req, key, m->key.len);

        if (match_entry(rules, m, kv))
            continue;
        if (!kv) {
            out_put(&o, "missing key ", 12);
            out_value(&o, key, m->key.len, false);
            break;
        }
        out_value(&o, key, m->key.len, false);
        out_ch(&o, '=');
        out_value(&o, kv->value, kv->value_len, false);
        if (m->kind == KIND_NOT || m->kind == KIND_NOT_CIDR)
            out_put(&o, " is excluded by ", 16);
        else if (m->kind == KIND_CIDR && !value_is_addr(kv))
            out_put(&o, " is not an address, for ", 24);
        else
            out_put(&o, " does not match ", 16);
        out_pattern(&o, rules, m);
        break;
    }
    return out_end(&o);
}
