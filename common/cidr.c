/* SPDX-License-Identifier: MIT */
/*
 * cidr: parsing, comparing and printing the IP prefixes of match values
 * (cidr.h, docs/rules.md "Addresses and negation").  Text goes through
 * inet_pton()/inet_ntop(), so an address is read here exactly as
 * rules_actor() reads it for actor_prefix4/6.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "cidr.h"

static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b };

/*
 * Dotted IPv4 exactly as inet_pton(AF_INET) reads it (four decimal parts
 * 0..255, no leading zeros, nothing else), without its copy and calls: the
 * form a request's address takes on the hit path.  The unit tests compare
 * the two on every short string of digits and dots.
 */
static bool ipv4_text(const char *s, size_t len, uint8_t *out)
{
    size_t i = 0;

    for (int part = 0; part < 4; part++) {
        unsigned v = 0, digits = 0;

        if (part && (i >= len || s[i++] != '.'))
            return false;
        while (i < len && (unsigned)(s[i] - '0') <= 9) {
            if (digits && v == 0)
                return false;           /* a leading zero */
            v = v * 10 + (unsigned)(s[i++] - '0');
            if (++digits > 3)
                return false;
        }
        if (v > 255)
            return false;
        if (!digits)
            return false;
        out[part] = (uint8_t)v;
    }
    return i == len;
}

/* Reads @s as an address into @ret (full length); an IPv6 address carrying
 * an IPv4 one is that IPv4 address.  *@ret_v6_len: 128 when it was written as
 * IPv6 text (so a prefix length is read on the IPv6 scale), else 32. */
static int addr_text(const char *s, size_t len, struct cidr *ret, unsigned *ret_scale)
{
    char text[INET6_ADDRSTRLEN + 1];
    uint8_t a[16];

    if (len == 0 || len >= sizeof(text))
        return -EINVAL;
    memset(ret, 0, sizeof(*ret));
    if (ipv4_text(s, len, ret->addr)) {
        ret->family = 4;
        ret->len = 32;
        *ret_scale = 32;
        return 0;
    }
    memcpy(text, s, len);
    text[len] = '\0';
    if (inet_pton(AF_INET6, text, a) != 1)
        return -EINVAL;
    *ret_scale = 128;
    if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0) {
        memcpy(ret->addr, a + 12, 4);
        ret->family = 4;
        ret->len = 32;
        return 0;
    }
    memcpy(ret->addr, a, 16);
    ret->family = 6;
    ret->len = 128;
    return 0;
}

int cidr_addr_parse(const char *s, size_t len, struct cidr *ret)
{
    unsigned scale;

    return addr_text(s, len, ret, &scale);
}

/* Clears the bits of @p past its length; true when some were set. */
static bool clear_host_bits(struct cidr *p)
{
    bool set = false;

    for (unsigned i = 0; i < 16; i++) {
        int bits = (int)p->len - (int)i * 8;
        uint8_t keep = bits <= 0 ? 0 : bits >= 8 ? 0xff : (uint8_t)(0xff << (8 - bits));

        if (p->addr[i] & ~keep)
            set = true;
        p->addr[i] &= keep;
    }
    return set;
}

int cidr_parse(const char *s, size_t len, struct cidr *ret)
{
    const char *slash = memchr(s, '/', len);
    size_t alen = slash ? (size_t)(slash - s) : len;
    unsigned scale, plen = 0;
    struct cidr p;
    int r;

    r = addr_text(s, alen, &p, &scale);
    if (r < 0)
        return r;
    if (slash) {
        size_t n = len - alen - 1;

        if (n == 0 || n > 3 || (n > 1 && slash[1] == '0'))
            return -EINVAL;
        for (size_t i = 0; i < n; i++) {
            if (slash[1 + i] < '0' || slash[1 + i] > '9')
                return -EINVAL;
            plen = plen * 10 + (unsigned)(slash[1 + i] - '0');
        }
        if (plen > scale)
            return -EINVAL;
    } else {
        plen = scale;
    }
    if (p.family == 4 && scale == 128) {
        /* ::ffff:a.b.c.d/len and 64:ff9b::a.b.c.d/len: an IPv4 prefix when
         * the length reaches into the embedded address; a shorter one is an
         * IPv6 prefix (it matches no IPv4 address: cidr.h). */
        if (plen >= 96) {
            plen -= 96;
        } else {
            uint8_t a[16];
            char text[INET6_ADDRSTRLEN + 1];

            memcpy(text, s, alen);
            text[alen] = '\0';
            (void)inet_pton(AF_INET6, text, a);
            memcpy(p.addr, a, 16);
            p.family = 6;
        }
    }
    p.len = (uint8_t)plen;
    r = clear_host_bits(&p) ? -EDOM : 0;
    *ret = p;
    return r;
}

bool cidr_contains(const struct cidr *p, const struct cidr *a)
{
    unsigned full = p->len / 8, rest = p->len % 8;

    if (p->family != a->family || p->len > a->len)
        return false;
    if (memcmp(p->addr, a->addr, full) != 0)
        return false;
    return rest == 0 || ((p->addr[full] ^ a->addr[full]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

/* Eight address bytes as one number in their order. */
static uint64_t be64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return be64toh(v);
}

int cidr_cmp(const struct cidr *a, const struct cidr *b)
{
    uint64_t x, y;

    if (a->family != b->family)
        return a->family < b->family ? -1 : 1;
    x = be64(a->addr);
    y = be64(b->addr);
    if (x == y && a->family == 6) {
        x = be64(a->addr + 8);
        y = be64(b->addr + 8);
    }
    if (x != y)
        return x < y ? -1 : 1;
    return a->len < b->len ? -1 : a->len > b->len;
}

int cidr_format(const struct cidr *p, char *buf, size_t size)
{
    char text[INET6_ADDRSTRLEN + 1];
    int n;

    if (!inet_ntop(p->family == 4 ? AF_INET : AF_INET6, p->addr, text, sizeof(text)))
        return -ENOBUFS;
    n = snprintf(buf, size, "%s/%u", text, p->len);
    return n < 0 || (size_t)n >= size ? -ENOBUFS : n;
}
