/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for server/ini.c: node-ini's value rules (quotes, inline
 * comments, escapes), line numbers across LF/CRLF/CR, lines of any length,
 * and every error the reader reports with its line.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ini.h"

static struct ini *parse_ok(const char *text)
{
    struct diag d;
    struct ini *ini = NULL;

    diag_init(&d);
    assert_int_equal(ini_parse(text, strlen(text), "t.ini", &ini, &d), 0);
    assert_int_equal(d.n, 0);
    assert_non_null(ini);
    return ini;
}

/* Parses @text expecting failure; returns the diag for inspection. */
static void parse_bad(const char *text, size_t len, struct diag *d)
{
    struct ini *ini = NULL;

    diag_init(d);
    assert_int_equal(ini_parse(text, len, "t.ini", &ini, d), -EINVAL);
    assert_null(ini);
    assert_true(d->n >= 1);
}

static const char *value_of(const struct ini_section *s, const char *key)
{
    for (size_t i = 0; i < s->n_entry; i++) {
        if (strcmp(s->entry[i].key, key) == 0)
            return s->entry[i].value;
    }
    fail_msg("no key %s", key);
    return NULL;
}

static void test_ini_sections_and_lines(void **state)
{
    struct ini *ini = parse_ok("[method=GET path=/status]\n"
                               "creditLimit = 1000\n"
                               "\n"
                               "resetSeconds = 60\n"
                               "[default]\n"
                               "creditLimit = 0\n");

    (void)state;
    assert_int_equal(ini->n_section, 2);
    assert_string_equal(ini->section[0].name, "method=GET path=/status");
    assert_int_equal(ini->section[0].line, 1);
    assert_int_equal(ini->section[0].n_entry, 2);
    assert_string_equal(ini->section[0].entry[0].key, "creditLimit");
    assert_string_equal(ini->section[0].entry[0].value, "1000");
    assert_int_equal(ini->section[0].entry[0].line, 2);
    assert_int_equal(ini->section[0].entry[1].line, 4);
    assert_string_equal(ini->section[1].name, "default");
    assert_int_equal(ini->section[1].line, 5);
    ini_free(ini);
}

static void test_ini_quotes(void **state)
{
    struct ini *ini = parse_ok("[s]\n"
                               "a = 'single quoted'\n"
                               "b = \"double \\\"escaped\\\" \\u00e9\\n\"\n"
                               "c = \"not \"json\"\n"
                               "d = '  spaces kept  '\n"
                               "e = \"\"\n"
                               "f = '\n"
                               "g = \"\n"
                               "h = 'mis\"\n"
                               "i = '#;'\n");
    const struct ini_section *s = &ini->section[0];

    (void)state;
    assert_string_equal(value_of(s, "a"), "single quoted");
    assert_string_equal(value_of(s, "b"), "double \"escaped\" \xc3\xa9\n");
    /* Not valid JSON: node-ini keeps the text, quotes and all. */
    assert_string_equal(value_of(s, "c"), "\"not \"json\"");
    assert_string_equal(value_of(s, "d"), "  spaces kept  ");
    assert_string_equal(value_of(s, "e"), "");
    assert_string_equal(value_of(s, "f"), "");
    assert_string_equal(value_of(s, "g"), "\"");
    /* Unmatched quotes: an ordinary value. */
    assert_string_equal(value_of(s, "h"), "'mis\"");
    /* Inside quotes ; and # are text. */
    assert_string_equal(value_of(s, "i"), "#;");
    ini_free(ini);
}

static void test_ini_inline_comments(void **state)
{
    struct ini *ini = parse_ok("[a=1 ; comment in the header]\n"
                               "matchPolicy = canary # <----- Canary this rule\n"
                               "b = x;y\n"
                               "c = esc\\;aped \\# kept \\\\ \\n\n"
                               "d = 'quoted' ; comment\n"
                               "e =   # only a comment\n"
                               "f=g\n");
    const struct ini_section *s = &ini->section[0];

    (void)state;
    assert_string_equal(s->name, "a=1");
    assert_string_equal(value_of(s, "matchPolicy"), "canary");
    assert_string_equal(value_of(s, "b"), "x");
    assert_string_equal(value_of(s, "c"), "esc;aped # kept \\ \\n");
    /* node-ini: a quoted value followed by a comment is not "quoted". */
    assert_string_equal(value_of(s, "d"), "'quoted'");
    assert_string_equal(value_of(s, "e"), "");
    assert_string_equal(value_of(s, "f"), "g");
    ini_free(ini);
}

static void test_ini_comment_and_blank_lines(void **state)
{
    struct ini *ini = parse_ok("; leading comment\n"
                               "   # indented hash comment\n"
                               "\t\n"
                               "\n"
                               "   [ spaced ]   \n"
                               "  ; key = ignored\n"
                               "   key   =   value   \n"
                               "flag\n");
    const struct ini_section *s = &ini->section[0];

    (void)state;
    assert_int_equal(ini->n_section, 1);
    assert_string_equal(s->name, "spaced");
    assert_int_equal(s->line, 5);
    assert_int_equal(s->n_entry, 2);
    assert_string_equal(value_of(s, "key"), "value");
    assert_int_equal(s->entry[0].line, 7);
    /* A key without '=' has no value (node-ini's `true`). */
    assert_string_equal(s->entry[1].key, "flag");
    assert_null(s->entry[1].value);
    ini_free(ini);
}

static void test_ini_crlf_and_cr(void **state)
{
    struct ini *ini = parse_ok("[a]\r\n"
                               "x = 1\r\n"
                               "\r\n"
                               "y = 'two'\r\n"
                               "[b]\r"
                               "z = 3 ; c\r\n");

    (void)state;
    assert_int_equal(ini->n_section, 2);
    assert_string_equal(ini->section[0].name, "a");
    assert_string_equal(value_of(&ini->section[0], "x"), "1");
    assert_string_equal(value_of(&ini->section[0], "y"), "two");
    assert_int_equal(ini->section[0].entry[1].line, 4);
    assert_int_equal(ini->section[1].line, 5);
    assert_string_equal(value_of(&ini->section[1], "z"), "3");
    assert_int_equal(ini->section[1].entry[0].line, 6);
    ini_free(ini);
}

static void test_ini_long_line(void **state)
{
    size_t n = 1 << 20;
    char *text = malloc(n + 64);
    struct ini *ini;
    size_t len;

    (void)state;
    assert_non_null(text);
    len = (size_t)sprintf(text, "[s]\nk = ");
    memset(text + len, 'v', n);
    len += n;
    memcpy(text + len, " ; c\nz = 1\n", 12);
    ini = parse_ok(text);
    assert_int_equal(strlen(value_of(&ini->section[0], "k")), n);
    assert_int_equal(ini->section[0].entry[1].line, 3);
    ini_free(ini);
    free(text);
}

static void test_ini_bom_and_no_final_newline(void **state)
{
    struct ini *ini = parse_ok("\xef\xbb\xbf[default]\ncreditLimit = 0");

    (void)state;
    assert_string_equal(ini->section[0].name, "default");
    assert_string_equal(value_of(&ini->section[0], "creditLimit"), "0");
    ini_free(ini);
}

static void test_ini_dots_are_literal(void **state)
{
    struct ini *ini = parse_ok("[path=/index.html a.b=c]\nx=1\n");

    (void)state;
    assert_int_equal(ini->n_section, 1);
    assert_string_equal(ini->section[0].name, "path=/index.html a.b=c");
    ini_free(ini);
}

static void test_ini_duplicate_key(void **state)
{
    const char text[] = "[s]\nx = 1\ny = 2\nx = 3\n";
    struct diag d;

    (void)state;
    parse_bad(text, strlen(text), &d);
    assert_int_equal(d.e[0].line, 4);
    assert_string_equal(d.e[0].file, "t.ini");
    assert_non_null(strstr(d.e[0].msg, "'x' repeated"));
    assert_non_null(strstr(d.e[0].msg, "line 2"));
}

static void test_ini_same_key_other_section(void **state)
{
    struct ini *ini = parse_ok("[a]\nx = 1\n[b]\nx = 2\n");

    (void)state;
    assert_string_equal(value_of(&ini->section[1], "x"), "2");
    ini_free(ini);
}

static void test_ini_duplicate_section(void **state)
{
    const char text[] = "[b]\n[a]\nx=1\n[c]\n[a]\n";
    struct diag d;

    (void)state;
    parse_bad(text, strlen(text), &d);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.e[0].line, 5);
    assert_non_null(strstr(d.e[0].msg, "first at line 2"));
}

static void test_ini_setting_outside_section(void **state)
{
    const char text[] = "; c\nx = 1\n[a]\n";
    struct diag d;

    (void)state;
    parse_bad(text, strlen(text), &d);
    assert_int_equal(d.e[0].line, 2);
    assert_non_null(strstr(d.e[0].msg, "outside a section"));
}

static void test_ini_bad_headers(void **state)
{
    const char text[] = "[a\nx = 1\n[b] junk\ny = 2\n[]\n[ok]\nz = 1\n";
    struct diag d;

    (void)state;
    parse_bad(text, strlen(text), &d);
    /* Keys after a bad header are skipped, not blamed on another section. */
    assert_int_equal(d.n, 3);
    assert_int_equal(d.e[0].line, 1);
    assert_int_equal(d.e[1].line, 3);
    assert_int_equal(d.e[2].line, 5);
    assert_non_null(strstr(d.e[2].msg, "empty section name"));
}

static void test_ini_missing_key(void **state)
{
    const char text[] = "[a]\n = 1\n";
    struct diag d;

    (void)state;
    parse_bad(text, strlen(text), &d);
    assert_int_equal(d.e[0].line, 2);
    assert_non_null(strstr(d.e[0].msg, "missing key"));
}

static void test_ini_nul_byte(void **state)
{
    const char text[] = "[a]\nx = 1\ny = \0\n";
    struct diag d;

    (void)state;
    parse_bad(text, sizeof(text) - 1, &d);
    assert_int_equal(d.e[0].line, 3);
    assert_non_null(strstr(d.e[0].msg, "NUL"));
}

static void test_ini_too_many_keys(void **state)
{
    size_t cap = 2000 * 16;
    char *text = malloc(cap);
    size_t len = 0;
    struct diag d;

    (void)state;
    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "[s]\n");
    for (int i = 0; i < 1100; i++)
        len += (size_t)snprintf(text + len, cap - len, "k%d = 1\n", i);
    parse_bad(text, len, &d);
    assert_non_null(strstr(d.e[0].msg, "more than"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ini_sections_and_lines),
        cmocka_unit_test(test_ini_quotes),
        cmocka_unit_test(test_ini_inline_comments),
        cmocka_unit_test(test_ini_comment_and_blank_lines),
        cmocka_unit_test(test_ini_crlf_and_cr),
        cmocka_unit_test(test_ini_long_line),
        cmocka_unit_test(test_ini_bom_and_no_final_newline),
        cmocka_unit_test(test_ini_dots_are_literal),
        cmocka_unit_test(test_ini_duplicate_key),
        cmocka_unit_test(test_ini_same_key_other_section),
        cmocka_unit_test(test_ini_duplicate_section),
        cmocka_unit_test(test_ini_setting_outside_section),
        cmocka_unit_test(test_ini_bad_headers),
        cmocka_unit_test(test_ini_missing_key),
        cmocka_unit_test(test_ini_nul_byte),
        cmocka_unit_test(test_ini_too_many_keys),
    };

    return cmocka_run_group_tests_name("ini", tests, NULL, NULL);
}
