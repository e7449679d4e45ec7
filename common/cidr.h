/* SPDX-License-Identifier: MIT */
/*
 * cidr: IP addresses and prefixes as rule match values (docs/rules.md
 * "Addresses and negation").  An address or prefix is one of two families:
 * IPv4, or IPv6 -- where an IPv6 address that carries an IPv4 one
 * (IPv4-mapped ::ffff:0:0/96, NAT64's well-known 64:ff9b::/96) is that IPv4
 * address, as rules_actor() counts it, and a prefix written inside one of
 * those /96 blocks (length 96 or more) is the IPv4 prefix it spells.  A
 * prefix matches addresses of its own family only.  Pure functions of
 * their arguments, no allocation, no logging.
 */
#ifndef DIVVY_CIDR_H
#define DIVVY_CIDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CIDR_TEXT_MAX   64      /* longest text cidr_format() writes, NUL included */

struct cidr {
    uint8_t addr[16];           /* network order; IPv4 in addr[0..3], the rest 0 */
    uint8_t len;                /* prefix length: 0..32 or 0..128; an address is a full one */
    uint8_t family;             /* 4 or 6 */
};

/*
 * Parses the address @s (@len bytes, not NUL-terminated): dotted IPv4 or
 * IPv6 text as inet_pton() reads it (no zone, no brackets), into *@ret as a
 * full-length prefix.  -EINVAL when @s is not one.
 */
int cidr_addr_parse(const char *s, size_t len, struct cidr *ret);

/*
 * Parses a prefix "ADDR/LEN" or a bare address (a host prefix) into *@ret,
 * normalised (mapped and NAT64 IPv6 prefixes of length >= 96 become IPv4).
 * -EINVAL: malformed (not an address, LEN not decimal or out of range);
 * -EDOM: bits set past LEN (*@ret is then the prefix with them cleared).
 */
int cidr_parse(const char *s, size_t len, struct cidr *ret);

/* Whether prefix @p contains @a (an address or a prefix): same family,
 * p->len <= a->len and the first p->len bits equal. */
bool cidr_contains(const struct cidr *p, const struct cidr *a);

/* Orders by family, address bytes, then length (shorter first): a prefix
 * sorts before every prefix and address it contains. */
int cidr_cmp(const struct cidr *a, const struct cidr *b);

/* Writes @p as canonical text ("10.0.0.0/8", "2001:db8::/32") into @buf
 * (@size >= CIDR_TEXT_MAX); returns the length, or -ENOBUFS. */
int cidr_format(const struct cidr *p, char *buf, size_t size);

#endif
