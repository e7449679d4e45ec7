/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for common/glob.c: classification and escapes, matching
 * (checked against a naive recursive matcher), and inclusion (checked for
 * soundness by brute force and for completeness with the fresh-symbol
 * witness of docs/rules.md).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "glob.h"

static bool m(const char *pat, const char *s)
{
    return glob_match(pat, strlen(pat), s, strlen(s));
}

static bool cov(const char *a, const char *b)
{
    return glob_covers(a, strlen(a), b, strlen(b));
}

static int parse(const char *pat)
{
    return glob_parse(pat, strlen(pat));
}

/* The oracle: exponential, obviously right, fine for short inputs. */
static bool ref_match(const char *p, const char *s)
{
    char c;

    if (!*p)
        return !*s;
    if (*p == '*')
        return ref_match(p + 1, s) || (*s && ref_match(p, s + 1));
    c = *p++;
    if (c == '\\' && *p)
        c = *p++;
    return *s == c && ref_match(p, s + 1);
}

static void test_glob_parse_kinds(void **state)
{
    (void)state;
    assert_int_equal(parse(""), GLOB_EXACT);
    assert_int_equal(parse("/status"), GLOB_EXACT);
    assert_int_equal(parse("/pantry/*"), GLOB_WILD);
    assert_int_equal(parse("*"), GLOB_WILD);
    assert_int_equal(parse("a\\*b"), GLOB_EXACT);
    assert_int_equal(parse("a\\\\"), GLOB_EXACT);
    assert_int_equal(parse("a\\\\*"), GLOB_WILD);
    /* divvy treats ? and [ ] literally; so do we */
    assert_int_equal(parse("a?[b]"), GLOB_EXACT);
}

static void test_glob_parse_malformed(void **state)
{
    (void)state;
    assert_int_equal(parse("a\\"), -EINVAL);
    assert_int_equal(parse("\\"), -EINVAL);
    assert_int_equal(parse("a\\b"), -EINVAL);
    assert_int_equal(parse("\\?"), -EINVAL);
    assert_int_equal(parse("a\\\\\\"), -EINVAL);
}

static void test_glob_unescape(void **state)
{
    char buf[32];

    (void)state;
    assert_int_equal(glob_unescape("a\\*b\\\\c", 7, buf), 5);
    assert_string_equal(buf, "a*b\\c");
    assert_int_equal(glob_unescape("", 0, buf), 0);
    assert_string_equal(buf, "");
}

static void test_glob_match_basic(void **state)
{
    (void)state;
    assert_true(m("*", ""));
    assert_true(m("*", "anything"));
    assert_true(m("/pantry/*", "/pantry/cookies/oatmeal"));
    assert_true(m("/pantry/*", "/pantry/"));
    assert_false(m("/pantry/*", "/pantry"));
    assert_false(m("/pantry/*", "/crisper/carrots"));
    assert_true(m("a*b*c", "aXXbYYc"));
    assert_true(m("a*b*c", "abc"));
    assert_false(m("a*b*c", "acb"));
    assert_true(m("*a*a*", "aa"));
    assert_true(m("*a*a*", "xaxax"));
    assert_false(m("*a*a*", "xax"));
    assert_true(m("*.jpg", "x.jpg.jpg"));
    assert_false(m("*.jpg", "x.jpgx"));
    assert_true(m("", ""));
    assert_false(m("", "a"));
    assert_false(m("abc", "ab"));
}

static void test_glob_match_escapes_and_literals(void **state)
{
    (void)state;
    assert_true(m("a\\*", "a*"));
    assert_false(m("a\\*", "ab"));
    assert_true(m("a\\\\", "a\\"));
    assert_true(m("a\\\\*", "a\\xyz"));
    assert_true(m("?", "?"));
    assert_false(m("?", "a"));
    assert_true(m("[ab]", "[ab]"));
    assert_false(m("[ab]", "a"));
    /* Malformed escapes never crash the matcher (a corrupt mapped file). */
    assert_true(m("a\\", "a\\"));
    assert_true(m("\\x", "x"));
}

static void test_glob_match_no_blowup(void **state)
{
    char text[20001];
    const char *pat = "*a*a*a*a*a*a*a*a*a*a*a*a*b";

    (void)state;
    memset(text, 'a', sizeof(text) - 1);
    text[sizeof(text) - 1] = '\0';
    /* Exponential backtracking would never finish this. */
    assert_false(m(pat, text));
    text[sizeof(text) - 2] = 'b';
    assert_true(m(pat, text));
}

static void rand_str(char *buf, size_t max, const char *alphabet)
{
    size_t n = (size_t)rand() % (max + 1), k = strlen(alphabet);

    for (size_t i = 0; i < n; i++)
        buf[i] = alphabet[rand() % k];
    buf[n] = '\0';
}

/* Random patterns over {a, b, *, \*} against random texts over {a, b, *}. */
static void rand_pattern(char *buf, size_t max)
{
    size_t n = (size_t)rand() % (max + 1), o = 0;

    for (size_t i = 0; i < n; i++) {
        switch (rand() % 5) {
        case 0: buf[o++] = 'a'; break;
        case 1: buf[o++] = 'b'; break;
        case 2: case 3: buf[o++] = '*'; break;
        default: buf[o++] = '\\'; buf[o++] = '*'; break;
        }
    }
    buf[o] = '\0';
}

static void test_glob_match_agrees_with_oracle(void **state)
{
    char pat[32], text[16];

    (void)state;
    srand(1);
    for (int i = 0; i < 200000; i++) {
        rand_pattern(pat, 6);
        rand_str(text, 8, "ab*");
        if (m(pat, text) != ref_match(pat, text))
            fail_msg("pattern '%s' text '%s': got %d", pat, text, m(pat, text));
    }
}

/* Every text a pattern matches starts with its literal prefix (the random
 * patterns and texts of test_glob_match_agrees_with_oracle). */
static void test_glob_prefix(void **state)
{
    static const struct {
        const char *pat, *want;
    } cases[] = {
        { "/pantry/*", "/pantry/" }, { "*.jpg", "" }, { "a\\*b*", "a*b" },
        { "a\\\\*", "a\\" }, { "exact", "exact" }, { "tail\\", "tail\\" }, { "", "" },
    };
    char buf[32], pat[32], text[16];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = glob_prefix(cases[i].pat, strlen(cases[i].pat), buf);

        assert_int_equal(n, strlen(cases[i].want));
        assert_memory_equal(buf, cases[i].want, n);
    }
    srand(2);
    for (int i = 0; i < 200000; i++) {
        size_t n;

        rand_pattern(pat, 6);
        rand_str(text, 8, "ab*");
        n = glob_prefix(pat, strlen(pat), buf);
        if (m(pat, text) && (strlen(text) < n || memcmp(text, buf, n) != 0))
            fail_msg("pattern '%s' matches '%s', which lacks its prefix", pat, text);
    }
}

static void test_glob_covers_cases(void **state)
{
    (void)state;
    /* B="*a*" matches "a", A="*a*a*" does not. */
    assert_false(cov("*a*a*", "*a*"));
    assert_true(cov("*a*", "*a*a*"));
    assert_true(cov("a*", "a*b"));
    assert_false(cov("a*b", "a*"));
    assert_true(cov("a*c", "a*b*c"));
    assert_false(cov("a*b*c", "a*c"));
    assert_true(cov("*x*", "*x"));
    assert_false(cov("*b", "*"));
    /* exact vs glob */
    assert_true(cov("a*", "abc"));
    assert_false(cov("abc", "a*"));
    assert_true(cov("abc", "abc"));
    assert_false(cov("abc", "abd"));
    /* "*" (presence) covers everything, and only stars cover it */
    assert_true(cov("*", "*"));
    assert_true(cov("*", ""));
    assert_true(cov("*", "a*b"));
    assert_true(cov("**", "*"));
    assert_true(cov("*", "**"));
    assert_false(cov("a*", "*"));
    /* a literal star is a plain byte */
    assert_true(cov("a*", "a\\*"));
    assert_false(cov("a\\*", "a*"));
    assert_true(cov("a\\*", "a\\*"));
    assert_true(cov("\\**", "\\*a*"));
    assert_false(cov("\\**", "*"));
    assert_true(cov("", ""));
    assert_false(cov("", "*"));
}

/* Replaces every unescaped star of @pat by @fresh and unescapes the rest. */
static void instantiate(const char *pat, char fresh, char *out)
{
    size_t o = 0;

    for (size_t i = 0; pat[i]; i++) {
        if (pat[i] == '\\' && pat[i + 1])
            out[o++] = pat[++i];
        else
            out[o++] = pat[i] == '*' ? fresh : pat[i];
    }
    out[o] = '\0';
}

static bool enum_texts(const char *a, const char *b, char *text, size_t pos, size_t max)
{
    text[pos] = '\0';
    if (ref_match(b, text) && !ref_match(a, text))
        return false;
    if (pos == max)
        return true;
    for (const char *c = "ab*c"; *c; c++) {
        text[pos] = *c;
        if (!enum_texts(a, b, text, pos + 1, max))
            return false;
    }
    return true;
}

static void test_glob_covers_sound_and_complete(void **state)
{
    char a[32], b[32], w[32], text[16];

    (void)state;
    srand(2);
    for (int i = 0; i < 20000; i++) {
        rand_pattern(a, 5);
        rand_pattern(b, 5);
        if (cov(a, b)) {
            /* sound: no text up to length 6 in L(b) \ L(a) */
            if (!enum_texts(a, b, text, 0, 6))
                fail_msg("covers('%s', '%s') but '%s' is a counterexample", a, b, text);
        } else {
            /* complete: b with each star as a byte a never uses is the witness */
            instantiate(b, 'c', w);
            assert_true(ref_match(b, w));
            if (ref_match(a, w))
                fail_msg("!covers('%s', '%s') yet witness '%s' matches both", a, b, w);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glob_parse_kinds),
        cmocka_unit_test(test_glob_parse_malformed),
        cmocka_unit_test(test_glob_unescape),
        cmocka_unit_test(test_glob_match_basic),
        cmocka_unit_test(test_glob_match_escapes_and_literals),
        cmocka_unit_test(test_glob_match_no_blowup),
        cmocka_unit_test(test_glob_match_agrees_with_oracle),
        cmocka_unit_test(test_glob_covers_cases),
        cmocka_unit_test(test_glob_prefix),
        cmocka_unit_test(test_glob_covers_sound_and_complete),
    };

    return cmocka_run_group_tests_name("glob", tests, NULL, NULL);
}
