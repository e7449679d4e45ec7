/* SPDX-License-Identifier: MIT */
/*
 * Tests of the match operators (docs/rules.md "Addresses and negation";
 * common/cidr.c, common/rules_cidr.c, server/rules_ops.c): prefixes parsed,
 * normalised and printed; cidr, not and not_cidr against present, missing
 * and non-address values; the CIDR index against a reference matcher
 * written here from the docs alone (bit strings, no cidr.c) on random
 * rule sets of nested IPv4, IPv6 and IPv4-mapped prefixes, exact anchors
 * and negations; the scan fallback past PFX_LISTS_MAX nested prefixes;
 * validation (file:line for malformed prefixes, host bits, repeated keys,
 * conservative unreachable checks); the blob check; describe and why-not;
 * the libconfig loader and writer round trip; a divvy .ini value that
 * spells a prefix or a "!" stays a literal.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "unit_config.h"

#include "cidr.h"
#include "diag.h"
#include "rules.h"

#define FILE_NAME "cidr.conf"

/* ---- helpers --------------------------------------------------------------- */

struct req {
    struct rules_req r;
    struct proto_kv kv[8];
};

static int kv_order(const void *x, const void *y)
{
    return strcmp(((const struct proto_kv *)x)->key, ((const struct proto_kv *)y)->key);
}

/* A request of up to 3 pairs; a NULL value leaves its key out. */
static const struct rules_req *mkreq(struct req *q, const char *k1, const char *v1,
                                     const char *k2, const char *v2, const char *k3,
                                     const char *v3)
{
    const char *k[3] = { k1, k2, k3 }, *v[3] = { v1, v2, v3 };

    memset(q, 0, sizeof(*q));
    for (int i = 0; i < 3; i++) {
        if (!k[i] || !v[i])
            continue;
        q->kv[q->r.n_kv++] = (struct proto_kv){ k[i], v[i], (uint16_t)strlen(k[i]),
                                                (uint16_t)strlen(v[i]) };
    }
    qsort(q->kv, q->r.n_kv, sizeof(q->kv[0]), kv_order);
    q->r.kv = q->kv;
    return &q->r;
}

static struct rules_rule_spec *add_rule(struct rules_spec *spec, unsigned line)
{
    struct rules_rule_spec *r;

    assert_int_equal(rules_spec_add(spec, FILE_NAME, line, &r), 0);
    r->credit_limit = 1;
    r->reset_seconds = 1;
    return r;
}

static void add_default(struct rules_spec *spec, unsigned line)
{
    struct rules_rule_spec *r = add_rule(spec, line);

    r->credit_limit = 0;
    r->reset_seconds = 0;
    r->is_default = true;
}

static struct rules *compile_ok(const struct rules_spec *spec)
{
    struct rules *rules = NULL;
    struct diag d;
    char line[1024];

    diag_init(&d);
    if (rules_compile(spec, 1, &rules, &d) != 0) {
        for (size_t i = 0; i < d.n; i++) {
            diag_format(&d, i, line, sizeof(line));
            print_error("%s\n", line);
        }
        fail_msg("rules_compile failed");
    }
    return rules;
}

/* The first stop rule rules_match() gives @req. */
static uint32_t first(const struct rules *rules, const struct rules_req *req)
{
    uint32_t idx[RULES_MATCH_MAX];
    size_t n = rules_match(rules, req, idx);

    assert_true(n >= 1);
    return idx[n - 1];
}

/* @d has a problem "@file:@line: ...@needle...", else the test fails
 * printing them all. */
static void expect_diag(const struct diag *d, const char *file, unsigned line,
                        const char *needle)
{
    char want[192], text[1024];

    snprintf(want, sizeof(want), "%s:%u: ", file, line);
    for (size_t i = 0; i < d->n; i++) {
        diag_format(d, i, text, sizeof(text));
        if (strncmp(text, want, strlen(want)) == 0 && strstr(text, needle))
            return;
    }
    for (size_t i = 0; i < d->n; i++) {
        diag_format(d, i, text, sizeof(text));
        print_error("%s\n", text);
    }
    fail_msg("no \"%s%s\"", want, needle);
}

/* Compiling fails with a problem at FILE_NAME:@line containing @needle. */
static void expect_error(const struct rules_spec *spec, unsigned line, const char *needle)
{
    struct rules *rules = NULL;
    struct diag d;

    diag_init(&d);
    assert_int_equal(rules_compile(spec, 1, &rules, &d), -EINVAL);
    expect_diag(&d, FILE_NAME, line, needle);
}

/* ---- cidr.c ------------------------------------------------------------------ */

static void expect_prefix(const char *in, int want_r, const char *want_text)
{
    struct cidr p;
    char text[CIDR_TEXT_MAX];

    assert_int_equal(cidr_parse(in, strlen(in), &p), want_r);
    if (want_text) {
        assert_true(cidr_format(&p, text, sizeof(text)) > 0);
        assert_string_equal(text, want_text);
    }
}

static void test_rules_cidr_parse(void **state)
{
    (void)state;
    expect_prefix("10.0.0.0/8", 0, "10.0.0.0/8");
    expect_prefix("10.1.2.3", 0, "10.1.2.3/32");
    expect_prefix("0.0.0.0/0", 0, "0.0.0.0/0");
    expect_prefix("2001:DB8::/32", 0, "2001:db8::/32");
    expect_prefix("::/0", 0, "::/0");
    expect_prefix("::1", 0, "::1/128");
    /* IPv4 inside IPv6: the IPv4 prefix it spells (length - 96). */
    expect_prefix("::ffff:10.0.0.0/104", 0, "10.0.0.0/8");
    expect_prefix("::ffff:0:0/96", 0, "0.0.0.0/0");
    expect_prefix("64:ff9b::/96", 0, "0.0.0.0/0");
    expect_prefix("64:ff9b::c000:200/120", 0, "192.0.2.0/24");
    /* shorter than /96: an IPv6 prefix */
    expect_prefix("::ffff:0:0/95", -EDOM, "::fffe:0:0/95");
    expect_prefix("64:ff9b::/64", 0, "64:ff9b::/64");
    /* host bits: -EDOM with the prefix they meant */
    expect_prefix("10.1.2.3/8", -EDOM, "10.0.0.0/8");
    expect_prefix("2001:db8::1/32", -EDOM, "2001:db8::/32");
    for (const char *const *bad = (const char *const[]){ "", "/8", "10.0.0/8", "10.0.0.0/",
             "10.0.0.0/33", "10.0.0.0/08", "10.0.0.0/+8", "10.0.0.0/8/8", "010.0.0.0/8",
             "::/129", "fe80::1%eth0", "[::1]", " 10.0.0.0/8", "10.0.0.0/8 ", "x", NULL };
         *bad; bad++) {
        struct cidr p;

        if (cidr_parse(*bad, strlen(*bad), &p) != -EINVAL)
            fail_msg("\"%s\" parsed", *bad);
    }
}

static void test_rules_cidr_addresses(void **state)
{
    struct cidr p, a;

    (void)state;
    assert_int_equal(cidr_parse("10.0.0.0/8", 10, &p), 0);
    for (const char *const *in = (const char *const[]){ "10.9.8.7", "::ffff:10.9.8.7",
             "::FFFF:a09:807", "64:ff9b::10.9.8.7", NULL }; *in; in++) {
        assert_int_equal(cidr_addr_parse(*in, strlen(*in), &a), 0);
        if (!cidr_contains(&p, &a))
            fail_msg("%s not in 10.0.0.0/8", *in);
    }
    /* other ::/96 addresses are IPv6 hosts, never IPv4 */
    assert_int_equal(cidr_addr_parse("::10.9.8.7", 10, &a), 0);
    assert_false(cidr_contains(&p, &a));
    assert_int_equal(a.family, 6);
    assert_int_equal(cidr_parse("::/0", 4, &p), 0);
    assert_true(cidr_contains(&p, &a));
    assert_int_equal(cidr_addr_parse("10.1.1.1", 8, &a), 0);
    assert_false(cidr_contains(&p, &a));        /* ::/0 holds no IPv4 address */
    assert_int_equal(cidr_addr_parse("10.0.0.0/8", 10, &a), -EINVAL);
    assert_int_equal(cidr_addr_parse("", 0, &a), -EINVAL);
}

/* ---- semantics ----------------------------------------------------------------- */

static void test_rules_cidr_semantics(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    struct rules *rules;
    struct req q;

    (void)state;
    r = add_rule(&spec, 1);       /* 0: ip in 10/8 or 2001:db8::/32 and not 10.66/16 */
    assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_CIDR, "10.0.0.0/8", 0), 0);
    assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_CIDR, "2001:db8::/32", 0), 0);
    assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_NOT_CIDR, "10.66.0.0/16", 0),
                     0);
    r = add_rule(&spec, 2);       /* 1: path not /admin/[star] nor /x, src not in 192.168/16 */
    assert_int_equal(rules_spec_add_match_op(r, "path", RULES_MATCH_NOT, "/admin/*", 0), 0);
    assert_int_equal(rules_spec_add_match_op(r, "path", RULES_MATCH_NOT, "/x", 0), 0);
    assert_int_equal(rules_spec_add_match_op(r, "src", RULES_MATCH_NOT_CIDR, "192.168.0.0/16",
                                             0), 0);
    add_default(&spec, 3);        /* 2 */
    rules = compile_ok(&spec);

    assert_int_equal(first(rules, mkreq(&q, "ip", "10.1.2.3", NULL, NULL, NULL, NULL)), 0);
    assert_int_equal(first(rules, mkreq(&q, "ip", "2001:db8:1::9", NULL, NULL, NULL, NULL)), 0);
    assert_int_equal(first(rules, mkreq(&q, "ip", "::ffff:10.1.2.3", NULL, NULL, NULL, NULL)),
                     0);
    /* excluded by the not_cidr of the same key */
    assert_int_equal(first(rules, mkreq(&q, "ip", "10.66.1.1", "path", "/admin/a", NULL,
                                        NULL)), 2);
    /* not an address: in no prefix */
    assert_int_equal(first(rules, mkreq(&q, "ip", "10.0.0.0/8", "path", "/admin/a", NULL,
                                        NULL)), 2);
    /* missing keys: the negations hold */
    assert_int_equal(first(rules, mkreq(&q, "other", "x", NULL, NULL, NULL, NULL)), 1);
    assert_int_equal(first(rules, mkreq(&q, "path", "/home", NULL, NULL, NULL, NULL)), 1);
    assert_int_equal(first(rules, mkreq(&q, "path", "/x", NULL, NULL, NULL, NULL)), 2);
    assert_int_equal(first(rules, mkreq(&q, "path", "/xy", NULL, NULL, NULL, NULL)), 1);
    assert_int_equal(first(rules, mkreq(&q, "path", "/admin/", NULL, NULL, NULL, NULL)), 2);
    assert_int_equal(first(rules, mkreq(&q, "src", "192.168.4.4", NULL, NULL, NULL, NULL)), 2);
    assert_int_equal(first(rules, mkreq(&q, "src", "::ffff:192.168.4.4", NULL, NULL, NULL,
                                        NULL)), 2);
    assert_int_equal(first(rules, mkreq(&q, "src", "192.169.4.4", NULL, NULL, NULL, NULL)), 1);
    assert_int_equal(first(rules, mkreq(&q, "src", "nonsense", NULL, NULL, NULL, NULL)), 1);
    rules_free(rules);
    rules_spec_free(&spec);
}

/* ---- text ------------------------------------------------------------------------ */

static void test_rules_cidr_describe_why_not(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    struct rules *rules;
    struct req q;
    char buf[512];

    (void)state;
    r = add_rule(&spec, 1);
    assert_int_equal(rules_spec_add_match(r, "app", "api", 0), 0);
    assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_CIDR, "10.0.0.0/8", 0), 0);
    assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_CIDR, "::ffff:192.0.2.0/120",
                                             0), 0);
    r = add_rule(&spec, 2);
    assert_int_equal(rules_spec_add_match_op(r, "path", RULES_MATCH_NOT, "/admin/*", 0), 0);
    assert_int_equal(rules_spec_add_match_op(r, "path", RULES_MATCH_NOT, "/a b", 0), 0);
    assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_NOT_CIDR, "2001:db8::/32", 0),
                     0);
    add_default(&spec, 3);
    rules = compile_ok(&spec);
    assert_true(rules_describe(rules, 0, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "app=api ip=cidr(10.0.0.0/8,192.0.2.0/24)");
    assert_true(rules_describe(rules, 1, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "ip=not_cidr(2001:db8::/32) path=not(/admin/*,\"/a b\")");
    mkreq(&q, "app", "api", "ip", "192.0.3.1", NULL, NULL);
    assert_true(rules_why_not(rules, 0, &q.r, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "ip=192.0.3.1 does not match cidr(10.0.0.0/8,192.0.2.0/24)");
    mkreq(&q, "app", "api", "ip", "bogus", NULL, NULL);
    assert_true(rules_why_not(rules, 0, &q.r, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "ip=bogus is not an address, for cidr(10.0.0.0/8,192.0.2.0/24)");
    mkreq(&q, "app", "api", NULL, NULL, NULL, NULL);
    assert_true(rules_why_not(rules, 0, &q.r, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "missing key ip");
    mkreq(&q, "path", "/admin/x", NULL, NULL, NULL, NULL);
    assert_true(rules_why_not(rules, 1, &q.r, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "path=/admin/x is excluded by not(/admin/*,\"/a b\")");
    mkreq(&q, "ip", "2001:db8::1", NULL, NULL, NULL, NULL);
    assert_true(rules_why_not(rules, 1, &q.r, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "ip=2001:db8::1 is excluded by not_cidr(2001:db8::/32)");
    mkreq(&q, "ip", "2001:db9::1", NULL, NULL, NULL, NULL);
    assert_int_equal(rules_why_not(rules, 1, &q.r, buf, sizeof(buf)), 0);
    rules_free(rules);
    rules_spec_free(&spec);
}

/* ---- validation -------------------------------------------------------------------- */

static void test_rules_cidr_validation(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;

    (void)state;
    r = add_rule(&spec, 1);
    assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_CIDR, "10.0.0/8", 4), 0);
    assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_CIDR, "10.1.2.3/8", 5), 0);
    assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_NOT_CIDR, "::/129", 6), 0);
    assert_int_equal(rules_spec_add_match_op(r, "p", RULES_MATCH_NOT, "a\\b", 7), 0);
    r = add_rule(&spec, 10);      /* a value beside an operator of the same key */
    assert_int_equal(rules_spec_add_match(r, "ip", "10.0.0.1", 11), 0);
    assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_NOT_CIDR, "10.0.0.0/8", 12),
                     0);
    add_default(&spec, 20);
    expect_error(&spec, 4, "\"10.0.0/8\" is not an IPv4 or IPv6 prefix");
    expect_error(&spec, 5, "\"10.1.2.3/8\" has bits set past its length (did you mean "
                           "\"10.0.0.0/8\"?)");
    expect_error(&spec, 6, "\"::/129\" is not an IPv4 or IPv6 prefix");
    expect_error(&spec, 7, "malformed glob in p = { not = \"a\\b\" }");
    expect_error(&spec, 12, "key 'ip' repeats in this rule's match");
    rules_spec_free(&spec);
}

/* Rule 2 (@op2 @v2) after stop rule 1 (@op1 @v1), both on key ip: whether
 * the validator calls rule 2 unreachable. */
static bool shadowed(enum rules_match_op op1, const char *v1, enum rules_match_op op2,
                     const char *v2)
{
    struct rules_spec spec = { 0 };
    struct rules *rules = NULL;
    struct diag d;
    bool ret;
    char *save = NULL, buf[256];

    for (int i = 0; i < 2; i++) {
        struct rules_rule_spec *r = add_rule(&spec, (unsigned)i + 1);

        snprintf(buf, sizeof(buf), "%s", i ? v2 : v1);
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
            assert_int_equal(rules_spec_add_match_op(r, "ip", i ? op2 : op1, t, 0), 0);
    }
    add_default(&spec, 3);
    diag_init(&d);
    ret = rules_compile(&spec, 1, &rules, &d) != 0;
    if (ret)
        assert_non_null(strstr(d.e[0].msg, "unreachable"));
    rules_free(rules);
    rules_spec_free(&spec);
    return ret;
}

static void test_rules_cidr_unreachable(void **state)
{
    const enum rules_match_op C = RULES_MATCH_CIDR, NC = RULES_MATCH_NOT_CIDR,
                              N = RULES_MATCH_NOT, V = RULES_MATCH_VALUE;

    (void)state;
    assert_true(shadowed(C, "10.0.0.0/8", C, "10.1.0.0/16"));
    assert_true(shadowed(C, "10.0.0.0/8,192.168.0.0/16", C, "10.1.0.0/16,192.168.1.0/24"));
    assert_false(shadowed(C, "10.0.0.0/8", C, "10.1.0.0/16,11.0.0.0/8"));
    assert_false(shadowed(C, "10.1.0.0/16", C, "10.0.0.0/8"));
    assert_false(shadowed(C, "::/0", C, "10.0.0.0/8"));          /* other family */
    assert_true(shadowed(C, "0.0.0.0/0", C, "::ffff:10.0.0.0/104"));
    /* negations: holds without the key, so only a negation covers one */
    assert_true(shadowed(NC, "10.0.0.0/8", NC, "10.0.0.0/7"));
    assert_false(shadowed(NC, "10.0.0.0/7", NC, "10.0.0.0/8"));
    assert_true(shadowed(NC, "10.0.0.0/8", C, "11.0.0.0/8"));
    assert_false(shadowed(NC, "10.0.0.0/8", C, "10.1.0.0/16"));
    assert_false(shadowed(C, "10.0.0.0/8", NC, "11.0.0.0/8"));
    assert_true(shadowed(N, "/admin/*", N, "/a*"));
    assert_false(shadowed(N, "/a*", N, "/admin/*"));
    assert_true(shadowed(N, "/admin/*", V, "/home"));
    assert_false(shadowed(N, "/admin/*", V, "/admin/x"));
    assert_false(shadowed(N, "/admin/*", V, "/ho*"));           /* not proven: conservative */
    assert_true(shadowed(V, "*", C, "10.0.0.0/8"));            /* present covers cidr */
    assert_false(shadowed(V, "*", NC, "10.0.0.0/8"));          /* not when it may be missing */
    assert_false(shadowed(V, "10.0.0.1", C, "10.0.0.1/32"));
    assert_false(shadowed(C, "10.0.0.0/8", V, "10.0.0.1"));     /* not proven: conservative */
}

/* ---- the index against a reference ---------------------------------------------- */

/* The reference's address: family and 16 bytes, read from docs/rules.md:
 * dotted IPv4, IPv6, ::ffff:0:0/96 and 64:ff9b::/96 as the IPv4 inside. */
struct xaddr {
    int fam;                    /* 0: not an address */
    unsigned char b[16];
};

static struct xaddr ref_addr(const char *s)
{
    static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    static const unsigned char nat64[12] = { 0, 0x64, 0xff, 0x9b };
    struct xaddr a = { 0 };
    unsigned char b[16];

    if (inet_pton(AF_INET, s, b) == 1) {
        a.fam = 4;
        memcpy(a.b, b, 4);
    } else if (inet_pton(AF_INET6, s, b) == 1) {
        if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0) {
            a.fam = 4;
            memcpy(a.b, b + 12, 4);
        } else {
            a.fam = 6;
            memcpy(a.b, b, 16);
        }
    }
    return a;
}

/* cidr_addr_parse() reads every string of up to 7 bytes over "019.:f" as
 * inet_pton() does (its own IPv4 reader included), family and bytes. */
static void test_rules_cidr_addr_like_inet_pton(void **state)
{
    static const char alpha[] = "019.:f";
    char s[8];
    long n_v4 = 0, n_v6 = 0;

    (void)state;
    for (int len = 0; len <= 7; len++) {
        long total = 1;

        for (int i = 0; i < len; i++)
            total *= 6;
        for (long k = 0; k < total; k++) {
            struct xaddr want;
            struct cidr got;
            long x = k;
            int r;

            for (int i = 0; i < len; i++, x /= 6)
                s[i] = alpha[x % 6];
            s[len] = '\0';
            want = ref_addr(s);
            r = cidr_addr_parse(s, (size_t)len, &got);
            if ((r == 0) != (want.fam != 0) || (r == 0 && (got.family != want.fam ||
                memcmp(got.addr, want.b, 16) != 0)))
                fail_msg("\"%s\": cidr_addr_parse %d family %d, inet_pton family %d", s, r,
                         r == 0 ? got.family : 0, want.fam);
            n_v4 += want.fam == 4;
            n_v6 += want.fam == 6;
        }
    }
    assert_true(n_v4 > 50 && n_v6 > 1000);
    /* longer dotted strings: several digits, leading zeros, 256, missing parts */
    srand(4);
    n_v4 = 0;
    for (int k = 0; k < 300000; k++) {
        static const char digits[] = "0123456789.....2";
        char t[20];
        int len = 7 + rand() % 10;
        struct xaddr want;
        struct cidr got;
        int r;

        for (int i = 0; i < len; i++)
            t[i] = digits[rand() % 16];
        t[len] = '\0';
        want = ref_addr(t);
        r = cidr_addr_parse(t, (size_t)len, &got);
        if ((r == 0) != (want.fam != 0) || (r == 0 && memcmp(got.addr, want.b, 16) != 0))
            fail_msg("\"%s\": cidr_addr_parse %d, inet_pton family %d", t, r, want.fam);
        n_v4 += want.fam == 4;
    }
    assert_true(n_v4 > 1000);
}

struct xpfx {
    int fam, len;
    unsigned char b[16];
    char text[96];              /* as configured: sometimes IPv4 written as ::ffff:... */
};

static bool ref_in(const struct xpfx *p, const struct xaddr *a)
{
    if (p->fam != a->fam)
        return false;
    for (int i = 0; i < p->len; i++) {
        int bit = 0x80 >> (i % 8);

        if ((p->b[i / 8] & bit) != (a->b[i / 8] & bit))
            return false;
    }
    return true;
}

static const char *const v4_pool[] = { "10.0.0.0", "10.0.1.0", "10.0.1.128", "10.1.0.0",
                                       "10.1.2.0", "192.168.0.0", "192.168.3.0" };
static const char *const v6_pool[] = { "2001:db8::", "2001:db8:0:1::", "2001:db8:1::",
                                       "2001:db8:1:2::", "fd00::" };

static void rand_pfx(struct xpfx *p)
{
    static const int l4[] = { 0, 8, 15, 16, 23, 24, 25, 32 };
    static const int l6[] = { 0, 32, 47, 48, 63, 64, 128 };
    char a[64];

    memset(p, 0, sizeof(*p));
    if (rand() % 2) {
        p->fam = 4;
        p->len = l4[rand() % 8];
        assert_int_equal(inet_pton(AF_INET, v4_pool[rand() % 7], p->b), 1);
    } else {
        p->fam = 6;
        p->len = l6[rand() % 7];
        assert_int_equal(inet_pton(AF_INET6, v6_pool[rand() % 5], p->b), 1);
    }
    for (int i = p->len; i < 128; i++)
        p->b[i / 8] &= (unsigned char)~(0x80 >> (i % 8));
    inet_ntop(p->fam == 4 ? AF_INET : AF_INET6, p->b, a, sizeof(a));
    if (p->fam == 4 && rand() % 4 == 0)
        snprintf(p->text, sizeof(p->text), "::ffff:%s/%d", a, p->len + 96);
    else
        snprintf(p->text, sizeof(p->text), "%s/%d", a, p->len);
}

/* One rule: an entry on "ip" (cidr / not_cidr list, exact, presence), sometimes
 * a not_cidr on "src", sometimes an exact anchor k=x. */
struct xrule {
    enum rules_match_op op;     /* of the ip entry; VALUE: exact or "*" (val) */
    struct xpfx p[3];
    int n_p;
    char val[48];
    bool has_src;
    struct xpfx src;
    bool anchor;
    enum rules_policy policy;
    bool dropped;
    bool unreachable;           /* dropped as unreachable (not as a repeated id) */
};

static const char *const addr_pool[] = { "10.0.0.1", "10.0.1.5", "10.0.1.200", "10.1.2.3",
    "10.1.9.9", "192.168.3.4", "192.168.9.9", "172.16.0.1", "::ffff:10.0.1.5",
    "64:ff9b::10.1.2.3", "::ffff:192.168.3.4", "2001:db8::1", "2001:db8:0:1::7",
    "2001:db8:1:2::1", "2001:db8:1:3::", "fd00::1", "2002::1", "::1", "::10.0.0.1",
    "10.0.0.0/8", "nope", "" };
#define N_ADDR (sizeof(addr_pool) / sizeof(addr_pool[0]))

static void rand_rule(struct xrule *r, int *n_side)
{
    memset(r, 0, sizeof(*r));
    switch (rand() % 6) {
    case 0:
    case 1:
    case 2:
        r->op = RULES_MATCH_CIDR;
        break;
    case 3:
        r->op = RULES_MATCH_NOT_CIDR;
        break;
    default:
        r->op = RULES_MATCH_VALUE;
        snprintf(r->val, sizeof(r->val), "%s", rand() % 3 ? addr_pool[rand() % N_ADDR] : "*");
        if (!r->val[0])
            strcpy(r->val, "*");
    }
    r->n_p = 1 + rand() % 3;
    for (int i = 0; i < r->n_p; i++)
        rand_pfx(&r->p[i]);
    r->has_src = rand() % 4 == 0;
    rand_pfx(&r->src);
    r->anchor = rand() % 5 == 0;
    r->policy = RULES_POLICY_STOP;
    if (*n_side < 40 && rand() % 6 == 0) {
        r->policy = rand() % 2 ? RULES_POLICY_CONTINUE : RULES_POLICY_CANARY;
        ++*n_side;
    }
}

static bool ref_rule(const struct xrule *r, const char *ip, const char *src, bool k)
{
    struct xaddr a = ip ? ref_addr(ip) : (struct xaddr){ 0 };
    bool in = false;

    if (r->anchor && !k)
        return false;
    if (r->has_src && src) {
        struct xaddr s = ref_addr(src);

        if (s.fam && ref_in(&r->src, &s))
            return false;
    }
    if (r->op == RULES_MATCH_VALUE)
        return ip && (strcmp(r->val, "*") == 0 || strcmp(r->val, ip) == 0);
    for (int i = 0; a.fam && i < r->n_p; i++)
        in = in || ref_in(&r->p[i], &a);
    return r->op == RULES_MATCH_CIDR ? in : !in;
}

static void to_spec(struct rules_spec *spec, const struct xrule *xr, size_t n)
{
    rules_spec_free(spec);
    for (size_t i = 0; i < n; i++) {
        struct rules_rule_spec *r;

        if (xr[i].dropped)
            continue;
        r = add_rule(spec, (unsigned)i + 1);
        r->policy = xr[i].policy;
        if (xr[i].op == RULES_MATCH_VALUE)
            assert_int_equal(rules_spec_add_match(r, "ip", xr[i].val, 0), 0);
        for (int k = 0; xr[i].op != RULES_MATCH_VALUE && k < xr[i].n_p; k++)
            assert_int_equal(rules_spec_add_match_op(r, "ip", xr[i].op, xr[i].p[k].text, 0), 0);
        if (xr[i].has_src)
            assert_int_equal(rules_spec_add_match_op(r, "src", RULES_MATCH_NOT_CIDR,
                                                     xr[i].src.text, 0), 0);
        if (xr[i].anchor)
            assert_int_equal(rules_spec_add_match(r, "k", "x", 0), 0);
    }
    add_default(spec, 100000);
}

static struct rules *compile_valid(struct rules_spec *spec, struct xrule *xr, size_t n)
{
    struct rules *rules = NULL;

    for (int round = 0; round < 300; round++) {
        struct diag d;

        to_spec(spec, xr, n);
        diag_init(&d);
        if (rules_compile(spec, 1, &rules, &d) == 0)
            return rules;
        assert_true(d.n > 0);
        for (size_t e = 0; e < d.n; e++) {
            if (!strstr(d.e[e].msg, "unreachable") && !strstr(d.e[e].msg, "same id"))
                fail_msg("%s", d.e[e].msg);
            assert_true(d.e[e].line >= 1 && d.e[e].line <= n);
            xr[d.e[e].line - 1].dropped = true;
            xr[d.e[e].line - 1].unreachable = strstr(d.e[e].msg, "unreachable") != NULL;
        }
    }
    fail_msg("no valid rule set after 300 rounds");
    return NULL;
}

/* Soundness of the unreachable check: every request of the pools that a
 * rule reported unreachable matches is matched by an earlier stop rule. */
static void expect_dropped_unreachable(const struct xrule *xr, size_t n)
{
    for (size_t d = 0; d < n; d++) {
        if (!xr[d].unreachable)
            continue;
        for (size_t i = 0; i <= N_ADDR; i++) {
            for (size_t j = 0; j <= N_ADDR; j++) {
                const char *ip = i < N_ADDR ? addr_pool[i] : NULL;
                const char *src = j < N_ADDR ? addr_pool[j] : NULL;

                for (int k = 0; k < 2; k++) {
                    bool decided = false;

                    if (!ref_rule(&xr[d], ip, src, k))
                        continue;
                    for (size_t e = 0; e < d && !decided; e++)
                        decided = xr[e].policy == RULES_POLICY_STOP &&
                                  ref_rule(&xr[e], ip, src, k);
                    if (!decided)
                        fail_msg("rule %zu reported unreachable, but ip %s src %s k %d "
                                 "reaches it", d + 1, ip ? ip : "-", src ? src : "-", k);
                }
            }
        }
    }
}

static void test_rules_cidr_index_agrees_with_reference(void **state)
{
    struct rules_spec spec = { 0 };
    struct xrule *xr = calloc(300, sizeof(*xr));
    long compared = 0, via_index = 0, dropped = 0;

    (void)state;
    assert_non_null(xr);
    srand(22);
    for (int set = 0; set < 150; set++) {
        size_t n = 1 + (size_t)rand() % 300;
        int n_side = 0;
        struct rules *rules, *again = NULL;
        const void *blob;
        size_t len;

        for (size_t i = 0; i < n; i++)
            rand_rule(&xr[i], &n_side);
        rules = compile_valid(&spec, xr, n);
        if (set < 30)
            expect_dropped_unreachable(xr, n);
        for (size_t i = 0; i < n; i++)
            dropped += xr[i].dropped;
        rules_blob(rules, &blob, &len);
        assert_int_equal(rules_from_blob(blob, len, &again), 0);
        for (int k = 0; k < 300; k++) {
            const char *ip = rand() % 8 ? addr_pool[rand() % N_ADDR] : NULL;
            const char *src = rand() % 2 ? addr_pool[rand() % N_ADDR] : NULL;
            bool key_k = rand() % 3 == 0;
            uint32_t want[RULES_MATCH_MAX], got[RULES_MATCH_MAX];
            size_t n_want = 0, n_got, kept = 0;
            bool stopped = false;
            struct req q;

            /* first match in config order over the kept rules, then the default */
            for (size_t i = 0; i < n && !stopped; i++) {
                if (xr[i].dropped)
                    continue;
                if (ref_rule(&xr[i], ip, src, key_k)) {
                    want[n_want++] = (uint32_t)kept;
                    stopped = xr[i].policy == RULES_POLICY_STOP;
                }
                kept++;
            }
            if (!stopped)
                want[n_want++] = (uint32_t)rules_count(rules) - 1;
            mkreq(&q, "ip", ip, "src", src, "k", key_k ? "x" : NULL);
            n_got = rules_match(rules, &q.r, got);
            if (n_got != n_want || memcmp(got, want, n_got * sizeof(got[0])) != 0)
                fail_msg("set %d: ip %s src %s k %d: %zu rules, want %zu (first %u vs %u)", set,
                         ip ? ip : "-", src ? src : "-", key_k, n_got, n_want, got[0], want[0]);
            n_got = rules_match(again, &q.r, got);
            assert_int_equal(n_got, n_want);
            assert_memory_equal(got, want, n_got * sizeof(got[0]));
            via_index += ip && ref_addr(ip).fam && got[n_got - 1] + 1 != rules_count(rules);
            compared++;
        }
        rules_free(again);
        rules_free(rules);
    }
    assert_true(compared >= 40000);
    assert_true(via_index > 5000);
    assert_true(dropped > 200);         /* the sets were dense enough to shadow */
    rules_spec_free(&spec);
    free(xr);
}

/* 40 nested continue rules 10.0.0.0/8 .. /47 under IPv6 2001:db8::/8+i: an
 * address inside all of them has more lists than a request merges, so the
 * matcher scans; every rule is still found, in order. */
static void test_rules_cidr_deep_nesting_scans(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules *rules;
    uint32_t got[RULES_MATCH_MAX];
    struct req q;
    size_t n;

    (void)state;
    for (int i = 0; i < 40; i++) {
        struct rules_rule_spec *r = add_rule(&spec, (unsigned)i + 1);
        char p[64];

        snprintf(p, sizeof(p), "2001:db8::/%d", 80 + i);
        r->policy = RULES_POLICY_CONTINUE;
        assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_CIDR, p, 0), 0);
    }
    add_default(&spec, 99);
    rules = compile_ok(&spec);
    n = rules_match(rules, mkreq(&q, "ip", "2001:db8::1", NULL, NULL, NULL, NULL), got);
    assert_int_equal(n, 41);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(got[i], i);
    n = rules_match(rules, mkreq(&q, "ip", "2001:db8::8000:0:1", NULL, NULL, NULL, NULL), got);
    assert_int_equal(n, 1 + 1);         /* only /80 holds it, then the default */
    assert_int_equal(got[0], 0);
    rules_free(rules);
    rules_spec_free(&spec);
}

/* 10,000 /24 rules after 40 canary /16 rules holding them (with tag=*), in
 * first-match order. */
static void test_rules_cidr_ten_thousand(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules *rules;
    struct req q;
    char p[64], a[64];

    (void)state;
    for (int i = 0; i < 40; i++) {
        struct rules_rule_spec *r = add_rule(&spec, (unsigned)i + 1);

        snprintf(p, sizeof(p), "10.%d.0.0/16", i);
        r->policy = RULES_POLICY_CANARY;
        assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_CIDR, p, 0), 0);
        assert_int_equal(rules_spec_add_match(r, "tag", "*", 0), 0);
    }
    for (int i = 0; i < 10000; i++) {
        struct rules_rule_spec *r = add_rule(&spec, (unsigned)i + 1000);

        snprintf(p, sizeof(p), "10.%d.%d.0/24", i / 256, i % 256);
        assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_CIDR, p, 0), 0);
    }
    add_default(&spec, 99999);
    rules = compile_ok(&spec);
    for (int i = 0; i < 10000; i += 37) {
        uint32_t got[RULES_MATCH_MAX];
        size_t n;

        snprintf(a, sizeof(a), "10.%d.%d.77", i / 256, i % 256);
        n = rules_match(rules, mkreq(&q, "ip", a, "tag", "t", NULL, NULL), got);
        assert_int_equal(n, 2);
        assert_int_equal(got[0], i / 256);
        assert_int_equal(got[1], 40 + i);
        n = rules_match(rules, mkreq(&q, "ip", a, NULL, NULL, NULL, NULL), got);
        assert_int_equal(n, 1);
        assert_int_equal(got[0], 40 + i);
    }
    assert_int_equal(first(rules, mkreq(&q, "ip", "10.250.0.1", NULL, NULL, NULL, NULL)),
                     rules_count(rules) - 1);
    rules_free(rules);
    rules_spec_free(&spec);
}

/* More than 32 rules matching by negation alone get one note, at the first. */
static void test_rules_cidr_scan_note(void **state)
{
    struct rules_spec spec = { 0 };
    struct diag d;

    (void)state;
    for (int i = 0; i < 40; i++) {
        struct rules_rule_spec *r = add_rule(&spec, (unsigned)i + 1);

        /* rules 1..8 are indexed: an exact value, a glob prefix, a cidr */
        if (i < 3)
            assert_int_equal(rules_spec_add_match(r, "app", "", 0), 0);
        else if (i < 6)
            assert_int_equal(rules_spec_add_match(r, "path", "/x*", 0), 0);
        else if (i < 8)
            assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_CIDR, "::/0", 0), 0);
        else
            assert_int_equal(rules_spec_add_match(r, "tag", "*", 0), 0);
        assert_int_equal(rules_spec_add_match_op(r, "path", RULES_MATCH_NOT, "/admin/*", 0), 0);
    }
    add_default(&spec, 99);
    diag_init(&d);
    assert_int_equal(rules_validate_notes(&spec, &d), 0);       /* 32: not more than 32 */
    add_rule(&spec, 50);
    assert_int_equal(rules_spec_add_match_op(&spec.rules[spec.n - 1], "ip", RULES_MATCH_NOT_CIDR,
                                             "10.0.0.0/8", 0), 0);
    diag_init(&d);
    assert_int_equal(rules_validate_notes(&spec, &d), 1);
    assert_int_equal(d.e[0].line, 9);
    assert_non_null(strstr(d.e[0].msg, "33 rules, this the first, match by negation alone"));
    rules_spec_free(&spec);
}

/* ---- the blob check ------------------------------------------------------------------ */

/* A copy of @rules' blob with @from (the first time it occurs) replaced by
 * @to (same length) must be refused. */
static void expect_blob_refused(const struct rules *rules, const char *from, const char *to)
{
    const void *blob;
    size_t len;
    char *copy, *at;
    struct rules *again = NULL;

    rules_blob(rules, &blob, &len);
    copy = malloc(len);
    assert_non_null(copy);
    memcpy(copy, blob, len);
    at = memmem(copy, len, from, strlen(from));
    assert_non_null(at);
    memcpy(at, to, strlen(to));
    assert_int_equal(rules_from_blob(copy, len, &again), -EBADMSG);
    free(copy);
}

static void test_rules_cidr_blob_checked(void **state)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    struct rules *rules;

    (void)state;
    r = add_rule(&spec, 1);
    assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_CIDR, "10.0.0.0/8", 0), 0);
    assert_int_equal(rules_spec_add_match_op(r, "ip", RULES_MATCH_CIDR, "172.16.0.0/12", 0), 0);
    assert_int_equal(rules_spec_add_match_op(r, "p", RULES_MATCH_NOT, "ab\\*", 0), 0);
    add_default(&spec, 2);
    rules = compile_ok(&spec);
    expect_blob_refused(rules, "10.0.0.0/8 ", "10.0.0.1/8 ");     /* host bits */
    expect_blob_refused(rules, "10.0.0.0/8 ", "10.0.0.0/8,");     /* not a prefix */
    expect_blob_refused(rules, "172.16.0.0/12", "172.16.0.0/99");
    expect_blob_refused(rules, "ab\\*", "ab\\x");                 /* malformed glob */
    rules_free(rules);
    rules_spec_free(&spec);
}

/* ---- the libconfig loader and writer ----------------------------------------------- */

#define NATIVE                                                                              \
    "rules = (\n"                                                                           \
    "  { match = { app = \"api\";\n"                                                        \
    "              ip = { cidr = [ \"10.0.0.0/8\", \"2001:db8::/32\" ];\n"                      \
    "                     not_cidr = \"10.66.0.0/16\"; };\n"                                   \
    "              path = { not = [ \"/admin/*\", \"!x\" ]; }; port = { not = 22; }; };\n"   \
    "    credit_limit = 5; reset_seconds = 60; },\n"                                        \
    "  { default = true; credit_limit = 1; reset_seconds = 60; }\n"                         \
    ");\n"

static void expect_same_spec(const struct rules_spec *a, const struct rules_spec *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        assert_int_equal(a->rules[i].n_match, b->rules[i].n_match);
        for (size_t j = 0; j < a->rules[i].n_match; j++) {
            assert_string_equal(a->rules[i].match[j].key, b->rules[i].match[j].key);
            assert_string_equal(a->rules[i].match[j].value, b->rules[i].match[j].value);
            assert_int_equal(a->rules[i].match[j].op, b->rules[i].match[j].op);
        }
    }
}

static void test_rules_cidr_config_round_trip(void **state)
{
    struct config *cfg, *again;
    const struct rules_rule_spec *r;
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    (void)state;
    cfg = load_ok("conf", NATIVE);
    r = &cfg->rules.rules[0];
    assert_int_equal(r->n_match, 7);
    assert_int_equal(r->match[1].op, RULES_MATCH_CIDR);
    assert_string_equal(r->match[2].value, "2001:db8::/32");
    assert_int_equal(r->match[3].op, RULES_MATCH_NOT_CIDR);
    assert_int_equal(r->match[4].op, RULES_MATCH_NOT);
    assert_string_equal(r->match[5].value, "!x");
    assert_string_equal(r->match[6].value, "22");
    f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(config_write_libconfig(cfg, f), 0);
    assert_int_equal(fclose(f), 0);
    again = load_ok("conf", text);
    expect_same_spec(&cfg->rules, &again->rules);
    free(text);
    config_free(again);
    config_free(cfg);
}

/* Loading @text fails with a problem at c.conf:@line containing @needle. */
static void expect_load_error(const char *text, unsigned line, const char *needle)
{
    struct diag d;
    char file[128];
    struct config *cfg = load("conf", text, &d);

    assert_null(cfg);
    snprintf(file, sizeof(file), "%s/c.conf", tmpdir);
    expect_diag(&d, file, line, needle);
}

#define RULE_WITH(m)                                                                       \
    "rules = (\n  { match = { " m " };\n    credit_limit = 1; reset_seconds = 1; },\n"     \
    "  { default = true; credit_limit = 1; reset_seconds = 1; }\n);\n"

static void test_rules_cidr_config_errors(void **state)
{
    (void)state;
    expect_load_error(RULE_WITH("ip = { };"), 2, "match value of 'ip' is an empty group");
    expect_load_error(RULE_WITH("ip = { cidr = [ ]; };"), 2, "cidr of 'ip' is an empty list");
    expect_load_error(RULE_WITH("ip = { cdir = \"10.0.0.0/8\"; };"), 2,
                      "unknown match operator 'cdir' for 'ip' (cidr, not, not_cidr)");
    expect_load_error(RULE_WITH("ip = { cidr = 1.5; };"), 2,
                      "cidr of 'ip' must be a string or a list of strings");
    expect_load_error(RULE_WITH("ip = { cidr = \"10.0.0.0/33\"; };"), 2,
                      "\"10.0.0.0/33\" is not an IPv4 or IPv6 prefix");
    expect_load_error(RULE_WITH("ip = 1.5;"), 2, "match value of 'ip' must be a string, an "
                                                 "integer or a group");
}

/* divvy's .ini and .json keep their meaning: a value is a literal or a glob,
 * whatever it spells. */
static void test_rules_cidr_divvy_stays_literal(void **state)
{
    struct config *cfg;
    struct rules *rules;
    struct req q;

    (void)state;
    cfg = load_ok("ini", "[ip=10.0.0.0/8 path=!x]\ncreditLimit = 5\nresetSeconds = 60\n\n"
                         "[default]\ncreditLimit = 1\nresetSeconds = 60\n");
    assert_int_equal(cfg->rules.rules[0].match[0].op, RULES_MATCH_VALUE);
    assert_int_equal(cfg->rules.rules[0].match[1].op, RULES_MATCH_VALUE);
    assert_int_equal(rules_compile(&cfg->rules, 1, &rules, NULL), 0);
    assert_int_equal(first(rules, mkreq(&q, "ip", "10.0.0.0/8", "path", "!x", NULL, NULL)), 0);
    assert_int_equal(first(rules, mkreq(&q, "ip", "10.1.1.1", "path", "!x", NULL, NULL)), 1);
    assert_int_equal(first(rules, mkreq(&q, "ip", "10.0.0.0/8", "path", "y", NULL, NULL)), 1);
    rules_free(rules);
    /* divvyctl convert writes them as strings, which load back as values. */
    {
        struct config *again;
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);

        assert_non_null(f);
        assert_int_equal(config_write_libconfig(cfg, f), 0);
        assert_int_equal(fclose(f), 0);
        assert_non_null(strstr(text, "ip = \"10.0.0.0/8\";"));
        assert_non_null(strstr(text, "path = \"!x\";"));
        again = load_ok("conf", text);
        expect_same_spec(&cfg->rules, &again->rules);
        assert_int_equal(again->rules.rules[0].match[0].op, RULES_MATCH_VALUE);
        config_free(again);
        free(text);
    }
    config_free(cfg);
    cfg = load_ok("json", "{\"overrides\":[{\"operation\":{\"ip\":\"10.0.0.0/8\",\"path\":\"!x\"},"
                          "\"creditLimit\":5,\"resetSeconds\":60}],\"default\":{\"operation\":{},"
                          "\"creditLimit\":1,\"resetSeconds\":60}}");
    assert_int_equal(cfg->rules.rules[0].match[0].op, RULES_MATCH_VALUE);
    assert_string_equal(cfg->rules.rules[0].match[0].value, "10.0.0.0/8");
    config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules_cidr_parse),
        cmocka_unit_test(test_rules_cidr_addresses),
        cmocka_unit_test(test_rules_cidr_addr_like_inet_pton),
        cmocka_unit_test(test_rules_cidr_semantics),
        cmocka_unit_test(test_rules_cidr_describe_why_not),
        cmocka_unit_test(test_rules_cidr_validation),
        cmocka_unit_test(test_rules_cidr_unreachable),
        cmocka_unit_test(test_rules_cidr_index_agrees_with_reference),
        cmocka_unit_test(test_rules_cidr_deep_nesting_scans),
        cmocka_unit_test(test_rules_cidr_ten_thousand),
        cmocka_unit_test(test_rules_cidr_scan_note),
        cmocka_unit_test(test_rules_cidr_blob_checked),
        cmocka_unit_test(test_rules_cidr_config_round_trip),
        cmocka_unit_test(test_rules_cidr_config_errors),
        cmocka_unit_test(test_rules_cidr_divvy_stays_literal),
    };

    return cmocka_run_group_tests_name("rules_cidr", tests, group_setup, group_teardown);
}
