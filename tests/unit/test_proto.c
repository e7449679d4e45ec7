/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for common/proto.c: request parsing (verbs, divvy's string
 * grammar, limits, pipelining) and the reply formatters, against the
 * contract in docs/protocol.md.
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

#include "proto.h"

/* Parses @line (which must hold exactly one full line) and checks it is consumed whole. */
static void parse_one(const char *line, struct proto_req *req)
{
    size_t len = strlen(line);

    memset(req, 0xa5, sizeof(*req));    /* stale garbage must not leak through */
    assert_int_equal(proto_parse(line, len, req), (ssize_t)len);
}

static void assert_ok(const char *line, enum proto_verb verb, struct proto_req *req)
{
    parse_one(line, req);
    assert_int_equal(req->err, PROTO_E_NONE);
    assert_null(req->reason);
    assert_int_equal(req->verb, verb);
}

static void assert_err(const char *line, enum proto_err err, struct proto_req *req)
{
    parse_one(line, req);
    assert_int_equal(req->err, err);
    assert_non_null(req->reason);
    assert_null(strchr(req->reason, '"'));
    assert_null(strchr(req->reason, '\n'));
    assert_int_equal(req->n_kv, 0);
}

static void assert_kv(const struct proto_req *req, unsigned i, const char *key, const char *value)
{
    assert_true(i < req->n_kv);
    assert_string_equal(req->kv[i].key, key);
    assert_string_equal(req->kv[i].value, value);
    assert_int_equal(req->kv[i].key_len, strlen(key));
    assert_int_equal(req->kv[i].value_len, strlen(value));
}

static void test_proto_hit_quoted_value(void **state)
{
    const char line[] = "HIT method=GET path=\"/a b\"\n";
    struct proto_req req;

    (void)state;
    assert_int_equal(proto_parse(line, strlen(line), &req), strlen(line));
    assert_int_equal(req.n_kv, 2);
    assert_string_equal(req.kv[1].value, "/a b");
}

static void test_proto_hit_basic(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("HIT method=GET path=/status\n", PROTO_HIT, &req);
    assert_int_equal(req.amount, 1);
    assert_int_equal(req.n_kv, 2);
    assert_kv(&req, 0, "method", "GET");
    assert_kv(&req, 1, "path", "/status");
}

static void test_proto_hit_no_pairs(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("HIT\n", PROTO_HIT, &req);
    assert_int_equal(req.n_kv, 0);
    assert_ok("HIT   \t \n", PROTO_HIT, &req);
    assert_int_equal(req.n_kv, 0);
}

static void test_proto_every_verb(void **state)
{
    static const struct {
        const char *line;
        enum proto_verb verb;
    } cases[] = {
        { "HIT a=b\n", PROTO_HIT },
        { "TAKE 3 a=b\n", PROTO_TAKE },
        { "PEEK a=b\n", PROTO_PEEK },
        { "RESET a=b\n", PROTO_RESET },
        { "EXPLAIN a=b\n", PROTO_EXPLAIN },
        { "RULES\n", PROTO_RULES },
        { "STATS\n", PROTO_STATS },
        { "RELOAD\n", PROTO_RELOAD },
        { "RELOAD dry_run=true diff=true\n", PROTO_RELOAD },
        { "DROPIN op=list\n", PROTO_DROPIN },
        { "PING\n", PROTO_PING },
        { "QUIT\n", PROTO_QUIT },
        { "COUNTERS exhausted=true max=10\n", PROTO_COUNTERS },
        { "refill rule=api index=0 actor=a\n", PROTO_REFILL },
    };
    struct proto_req req;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_ok(cases[i].line, cases[i].verb, &req);
        if (cases[i].verb == PROTO_COUNTERS) {
            assert_int_equal(req.n_kv, 2);
        } else if (cases[i].verb == PROTO_REFILL) {
            assert_int_equal(req.n_kv, 3);
            assert_kv(&req, 0, "actor", "a");
        } else if (cases[i].verb == PROTO_RELOAD && req.n_kv) {
            assert_int_equal(req.n_kv, 2);
            assert_kv(&req, 0, "diff", "true");
        } else if (cases[i].verb == PROTO_DROPIN) {
            assert_int_equal(req.n_kv, 1);
            assert_kv(&req, 0, "op", "list");
        } else if (cases[i].verb >= PROTO_RULES) {
            assert_int_equal(req.n_kv, 0);
        } else {
            assert_int_equal(req.n_kv, 1);
            assert_kv(&req, 0, "a", "b");
        }
    }
}

static void test_proto_amount_is_one_without_take(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("PEEK a=b\n", PROTO_PEEK, &req);
    assert_int_equal(req.amount, 1);
}

static void test_proto_verbs_case_insensitive(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("hit a=b\n", PROTO_HIT, &req);
    assert_ok("Hit a=b\n", PROTO_HIT, &req);
    assert_ok("tAkE 2 a=b\n", PROTO_TAKE, &req);
    assert_int_equal(req.amount, 2);
    assert_ok("explain\n", PROTO_EXPLAIN, &req);
    assert_ok("ping\n", PROTO_PING, &req);
    assert_ok("Quit\n", PROTO_QUIT, &req);
    /* Keys and values are not case-folded. */
    assert_ok("hit Method=Get\n", PROTO_HIT, &req);
    assert_kv(&req, 0, "Method", "Get");
}

static void test_proto_quoted_command_word(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("\"hit\" a=b\n", PROTO_HIT, &req);
    assert_kv(&req, 0, "a", "b");
    assert_err("\"HIT\"a=b\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("\"HIT a=b\n", PROTO_E_BAD_REQUEST, &req);
}

static void test_proto_cr_stripped(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("HIT a=b\r\n", PROTO_HIT, &req);
    assert_kv(&req, 0, "a", "b");
    assert_ok("PING\r\n", PROTO_PING, &req);
    assert_ok("HIT a=\"x y\"\r\n", PROTO_HIT, &req);
    assert_kv(&req, 0, "a", "x y");
    /* Only one trailing CR goes; a CR inside quotes is kept. */
    assert_ok("HIT a=\"x\r\"\r\n", PROTO_HIT, &req);
    assert_kv(&req, 0, "a", "x\r");
}

static void test_proto_empty_line_no_reply(void **state)
{
    struct proto_req req;

    (void)state;
    parse_one("\n", &req);
    assert_int_equal(req.verb, PROTO_NONE);
    assert_int_equal(req.err, PROTO_E_NONE);
    assert_int_equal(req.n_kv, 0);
    parse_one("\r\n", &req);
    assert_int_equal(req.verb, PROTO_NONE);
    assert_int_equal(req.err, PROTO_E_NONE);
}

static void test_proto_whitespace_line_unknown_command(void **state)
{
    struct proto_req req;

    (void)state;
    assert_err("   \n", PROTO_E_UNKNOWN_COMMAND, &req);
    assert_string_equal(req.reason, "Unrecognized command: ");
    assert_err("\t\n", PROTO_E_UNKNOWN_COMMAND, &req);
    assert_err("\r\r\n", PROTO_E_UNKNOWN_COMMAND, &req);
    /* As divvy: leading whitespace makes the command word empty. */
    assert_err(" HIT a=b\n", PROTO_E_UNKNOWN_COMMAND, &req);
    assert_string_equal(req.reason, "Unrecognized command: ");
}

static void test_proto_unknown_command_reason(void **state)
{
    struct proto_req req;

    (void)state;
    assert_err("foo a=b\n", PROTO_E_UNKNOWN_COMMAND, &req);
    assert_int_equal(req.verb, PROTO_NONE);
    assert_string_equal(req.reason, "Unrecognized command: FOO");
    assert_err("HITS\n", PROTO_E_UNKNOWN_COMMAND, &req);
    assert_string_equal(req.reason, "Unrecognized command: HITS");
    assert_err("EXPLAINS\n", PROTO_E_UNKNOWN_COMMAND, &req);
    assert_string_equal(req.reason, "Unrecognized command: EXPLAINS");
    /* The word ends at '=' as in divvy; what follows an unknown word is not parsed. */
    assert_err("get=x \"unterminated\n", PROTO_E_UNKNOWN_COMMAND, &req);
    assert_string_equal(req.reason, "Unrecognized command: GET");
    assert_err("\"two words\" a=b\n", PROTO_E_UNKNOWN_COMMAND, &req);
    assert_string_equal(req.reason, "Unrecognized command: TWO WORDS");
    /* Quotes and control bytes cannot travel inside the quoted reason. */
    assert_err("F\"O\x01O\n", PROTO_E_UNKNOWN_COMMAND, &req);
    assert_string_equal(req.reason, "Unrecognized command: F_O_O");
}

static void test_proto_unknown_command_long_word(void **state)
{
    char line[PROTO_LINE_MAX];
    struct proto_req req;

    (void)state;
    memset(line, 'x', sizeof(line) - 1);
    line[sizeof(line) - 2] = '\n';
    line[sizeof(line) - 1] = '\0';
    assert_err(line, PROTO_E_UNKNOWN_COMMAND, &req);
    assert_int_equal(strlen(req.reason), strlen("Unrecognized command: ") + PROTO_LINE_MAX - 2);
    assert_true(req.reason[strlen(req.reason) - 1] == 'X');
}

static void test_proto_quoted_keys_and_values(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("HIT \"my key\"=\"my value\" \"k2\"=v2 k3=\"v3\"\n", PROTO_HIT, &req);
    assert_int_equal(req.n_kv, 3);
    assert_kv(&req, 0, "k2", "v2");
    assert_kv(&req, 1, "k3", "v3");
    assert_kv(&req, 2, "my key", "my value");
    /* Inside quotes '=' and whitespace are plain bytes. */
    assert_ok("HIT q=\"a=b\tc  d\"\n", PROTO_HIT, &req);
    assert_kv(&req, 0, "q", "a=b\tc  d");
    assert_ok("HIT \"k=1\"=\"\"\n", PROTO_HIT, &req);
    assert_kv(&req, 0, "k=1", "");
}

static void test_proto_empty_values(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("HIT a= b=\"\" c=\n", PROTO_HIT, &req);
    assert_int_equal(req.n_kv, 3);
    assert_kv(&req, 0, "a", "");
    assert_kv(&req, 1, "b", "");
    assert_kv(&req, 2, "c", "");
}

static void test_proto_extra_whitespace(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("HIT \t a=1 \t\v\f b=2   \n", PROTO_HIT, &req);
    assert_int_equal(req.n_kv, 2);
    assert_kv(&req, 0, "a", "1");
    assert_kv(&req, 1, "b", "2");
}

static void test_proto_unterminated_quote(void **state)
{
    struct proto_req req;

    (void)state;
    assert_err("HIT a=\"xyz\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT \"a=b\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT a=\"\n", PROTO_E_BAD_REQUEST, &req);
    /* The stripped CR does not close it either. */
    assert_err("HIT a=\"x\r\n", PROTO_E_BAD_REQUEST, &req);
}

static void test_proto_garbage_after_closing_quote(void **state)
{
    struct proto_req req;

    (void)state;
    assert_err("HIT a=\"x\"y\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT a=\"x\"\"y\"\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT a=\"x\"b=c\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT a=\"x\"=\n", PROTO_E_BAD_REQUEST, &req);
    /* A quoted key must be followed by '='. */
    assert_err("HIT \"a\" =b\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT \"a\"x=b\n", PROTO_E_BAD_REQUEST, &req);
}

static void test_proto_quote_in_unquoted_value(void **state)
{
    struct proto_req req;

    (void)state;
    assert_err("HIT a=x\"y\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT a=x\"y\" b=c\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT a\"b=c\n", PROTO_E_BAD_REQUEST, &req);
}

static void test_proto_equals_in_unquoted_value(void **state)
{
    struct proto_req req;

    (void)state;
    assert_err("HIT a=b=c\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT a==\n", PROTO_E_BAD_REQUEST, &req);
}

static void test_proto_empty_key(void **state)
{
    struct proto_req req;

    (void)state;
    assert_err("HIT =v\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT a=b =v\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT \"\"=v\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT =\n", PROTO_E_BAD_REQUEST, &req);
    /* As divvy reads it, "HIT=v" is the command HIT then an empty key. */
    assert_err("HIT=v\n", PROTO_E_BAD_REQUEST, &req);
    assert_int_equal(req.verb, PROTO_HIT);
}

static void test_proto_missing_equals(void **state)
{
    struct proto_req req;

    (void)state;
    assert_err("HIT a\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT a b=c\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT a=b c\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("HIT \"a\"\n", PROTO_E_BAD_REQUEST, &req);
    assert_err("PEEK a =b\n", PROTO_E_BAD_REQUEST, &req);
}

static void test_proto_duplicate_keys_last_wins(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("HIT b=1 a=2 b=3 c=4 a=5 b=\"6 6\"\n", PROTO_HIT, &req);
    assert_int_equal(req.n_kv, 3);
    assert_kv(&req, 0, "a", "5");
    assert_kv(&req, 1, "b", "6 6");
    assert_kv(&req, 2, "c", "4");
    /* A quoted and an unquoted spelling are the same key. */
    assert_ok("HIT k=1 \"k\"=2\n", PROTO_HIT, &req);
    assert_int_equal(req.n_kv, 1);
    assert_kv(&req, 0, "k", "2");
}

static void test_proto_kv_sorted_bytewise(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("HIT z=1 a=2 B=3 ab=4 \"\xc3\xa9\"=5 a\x01=6 m=7\n", PROTO_HIT, &req);
    assert_int_equal(req.n_kv, 7);
    assert_kv(&req, 0, "B", "3");
    assert_kv(&req, 1, "a", "2");
    assert_kv(&req, 2, "a\x01", "6");
    assert_kv(&req, 3, "ab", "4");
    assert_kv(&req, 4, "m", "7");
    assert_kv(&req, 5, "z", "1");
    assert_kv(&req, 6, "\xc3\xa9", "5");
}

/* Builds "HIT k00=v k01=v ... \n" with @n distinct keys (then @dups repeats of k00). */
static void build_keys(char *line, size_t size, unsigned n, unsigned dups)
{
    size_t pos = (size_t)snprintf(line, size, "HIT");

    for (unsigned i = 0; i < n; i++)
        pos += (size_t)snprintf(line + pos, size - pos, " k%02u=v%u", i, i);
    for (unsigned i = 0; i < dups; i++)
        pos += (size_t)snprintf(line + pos, size - pos, " k00=d%u", i);
    snprintf(line + pos, size - pos, "\n");
}

static void test_proto_32_keys_ok(void **state)
{
    char line[PROTO_LINE_MAX];
    struct proto_req req;

    (void)state;
    build_keys(line, sizeof(line), PROTO_KV_MAX, 0);
    assert_ok(line, PROTO_HIT, &req);
    assert_int_equal(req.n_kv, PROTO_KV_MAX);
    assert_kv(&req, 0, "k00", "v0");
    assert_kv(&req, PROTO_KV_MAX - 1, "k31", "v31");
    /* Repeating a key does not count against the limit. */
    build_keys(line, sizeof(line), PROTO_KV_MAX, 40);
    assert_ok(line, PROTO_HIT, &req);
    assert_int_equal(req.n_kv, PROTO_KV_MAX);
    assert_kv(&req, 0, "k00", "d39");
}

static void test_proto_33_keys_too_many(void **state)
{
    char line[PROTO_LINE_MAX];
    struct proto_req req;

    (void)state;
    build_keys(line, sizeof(line), PROTO_KV_MAX + 1, 0);
    assert_err(line, PROTO_E_TOO_MANY_KEYS, &req);
    assert_string_equal(proto_err_code(req.err), "too-many-keys");
}

static void test_proto_take_amount(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("TAKE 1 a=b\n", PROTO_TAKE, &req);
    assert_int_equal(req.amount, 1);
    assert_kv(&req, 0, "a", "b");
    assert_ok("TAKE 1000000000 a=b\n", PROTO_TAKE, &req);
    assert_int_equal(req.amount, PROTO_TAKE_MAX);
    assert_ok("TAKE 42\n", PROTO_TAKE, &req);
    assert_int_equal(req.amount, 42);
    assert_int_equal(req.n_kv, 0);
    assert_ok("take \t 7\t a=b \n", PROTO_TAKE, &req);
    assert_int_equal(req.amount, 7);
    assert_ok("TAKE 0005 a=b\n", PROTO_TAKE, &req);
    assert_int_equal(req.amount, 5);
}

static void test_proto_take_bad_amount(void **state)
{
    static const char *const lines[] = {
        "TAKE 0 a=b\n",
        "TAKE 1000000001 a=b\n",
        "TAKE 99999999999999999999999999 a=b\n",
        "TAKE a=b\n",
        "TAKE\n",
        "TAKE   \n",
        "TAKE x\n",
        "TAKE -1 a=b\n",
        "TAKE +1 a=b\n",
        "TAKE 1.5 a=b\n",
        "TAKE 5a=b\n",
        "TAKE 5=b\n",
        "TAKE \"5\" a=b\n",
        "TAKE 0x10 a=b\n",
    };
    struct proto_req req;

    (void)state;
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        assert_err(lines[i], PROTO_E_BAD_REQUEST, &req);
        assert_int_equal(req.verb, PROTO_TAKE);
    }
}

/* DEBIT: TAKE's grammar, counts 1..10^12; bad counts name DEBIT's range. */
static void test_proto_debit_amount(void **state)
{
    static const char *const bad[] = {
        "DEBIT 0 a=b\n", "DEBIT 1000000000001 a=b\n", "DEBIT 18446744073709551617 a=b\n",
        "DEBIT 99999999999999999999999999 a=b\n", "DEBIT a=b\n", "DEBIT\n", "DEBIT -1 a=b\n",
        "DEBIT +1 a=b\n", "DEBIT 1.5 a=b\n", "DEBIT \"5\" a=b\n", "DEBIT 0x10 a=b\n",
    };
    struct proto_req req;

    (void)state;
    assert_ok("DEBIT 1 a=b\n", PROTO_DEBIT, &req);
    assert_int_equal(req.amount, 1);
    assert_kv(&req, 0, "a", "b");
    assert_ok("debit 1000000000000 a=b\n", PROTO_DEBIT, &req);
    assert_int_equal(req.amount, PROTO_DEBIT_MAX);
    assert_ok("DEBIT 1000000001\n", PROTO_DEBIT, &req);
    assert_int_equal(req.amount, 1000000001);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_err(bad[i], PROTO_E_BAD_REQUEST, &req);
        assert_int_equal(req.verb, PROTO_DEBIT);
        assert_string_equal(req.reason, "DEBIT needs a count from 1 to 1000000000000");
    }
    /* TAKE keeps its own range. */
    assert_err("TAKE 1000000001 a=b\n", PROTO_E_BAD_REQUEST, &req);
    assert_string_equal(req.reason, "TAKE needs a count from 1 to 1000000000");
}

static void test_proto_args_on_argless_verbs(void **state)
{
    static const char *const lines[] = {
        "RULES a=b\n", "PING x\n", "STATS now\n", "RELOAD force\n", "QUIT bye\n",
        "PING \"\"\n", "RULES=\n",
    };
    struct proto_req req;

    (void)state;
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
        assert_err(lines[i], PROTO_E_BAD_REQUEST, &req);
    assert_ok("PING   \t\n", PROTO_PING, &req);
    assert_ok("RULES \r\n", PROTO_RULES, &req);
}

static void test_proto_nul_byte(void **state)
{
    static const char line[] = "HIT a=b\0c\n";
    static const char line2[] = "HIT a=\"x\0y\"\n";
    static const char line3[] = "FOO\0\n";
    struct proto_req req;

    (void)state;
    assert_int_equal(proto_parse(line, sizeof(line) - 1, &req), sizeof(line) - 1);
    assert_int_equal(req.err, PROTO_E_BAD_REQUEST);
    assert_int_equal(proto_parse(line2, sizeof(line2) - 1, &req), sizeof(line2) - 1);
    assert_int_equal(req.err, PROTO_E_BAD_REQUEST);
    assert_int_equal(proto_parse(line3, sizeof(line3) - 1, &req), sizeof(line3) - 1);
    assert_int_equal(req.err, PROTO_E_BAD_REQUEST);
    assert_int_equal(req.n_kv, 0);
}

static void test_proto_partial_line_needs_more(void **state)
{
    const char *data = "HIT a=b";
    struct proto_req req;

    (void)state;
    req.verb = PROTO_QUIT;
    assert_int_equal(proto_parse(data, strlen(data), &req), 0);
    assert_int_equal(req.verb, PROTO_QUIT);        /* untouched */
    assert_int_equal(proto_parse(data, 0, &req), 0);
    assert_int_equal(proto_parse("", 0, &req), 0);
}

static void test_proto_no_newline_within_limit(void **state)
{
    char *data = malloc(PROTO_LINE_MAX + 10);
    struct proto_req req;

    (void)state;
    assert_non_null(data);
    memset(data, 'a', PROTO_LINE_MAX + 10);
    assert_int_equal(proto_parse(data, PROTO_LINE_MAX - 1, &req), 0);
    assert_int_equal(proto_parse(data, PROTO_LINE_MAX, &req), -EMSGSIZE);
    assert_int_equal(proto_parse(data, PROTO_LINE_MAX + 10, &req), -EMSGSIZE);
    /* A newline just past the limit does not rescue the line. */
    data[PROTO_LINE_MAX] = '\n';
    assert_int_equal(proto_parse(data, PROTO_LINE_MAX + 1, &req), -EMSGSIZE);
    free(data);
}

static void test_proto_line_at_limit(void **state)
{
    char *data = malloc(PROTO_LINE_MAX + 1);
    const char *head = "HIT k=";
    struct proto_req req;

    (void)state;
    assert_non_null(data);
    /* PROTO_LINE_MAX bytes, newline included: accepted, value fills the rest. */
    memset(data, 'v', PROTO_LINE_MAX);
    memcpy(data, head, strlen(head));
    data[PROTO_LINE_MAX - 1] = '\n';
    data[PROTO_LINE_MAX] = 'x';
    assert_int_equal(proto_parse(data, PROTO_LINE_MAX + 1, &req), PROTO_LINE_MAX);
    assert_int_equal(req.err, PROTO_E_NONE);
    assert_int_equal(req.n_kv, 1);
    assert_int_equal(req.kv[0].value_len, PROTO_LINE_MAX - 1 - strlen(head));
    assert_int_equal(strlen(req.kv[0].value), PROTO_LINE_MAX - 1 - strlen(head));
    free(data);
}

/* Worst case for the decode buffer: many tiny pairs, each adding a NUL per string. */
static void test_proto_line_at_limit_many_pairs(void **state)
{
    char *data = malloc(PROTO_LINE_MAX);
    size_t pos = 3;
    struct proto_req req;

    (void)state;
    assert_non_null(data);
    memcpy(data, "HIT", 3);
    while (pos + 3 < PROTO_LINE_MAX - 1) {
        memcpy(data + pos, " a=", 3);
        pos += 3;
    }
    while (pos < PROTO_LINE_MAX - 1)
        data[pos++] = ' ';
    data[pos++] = '\n';
    assert_int_equal(pos, PROTO_LINE_MAX);
    assert_int_equal(proto_parse(data, pos, &req), PROTO_LINE_MAX);
    assert_int_equal(req.err, PROTO_E_NONE);
    assert_int_equal(req.n_kv, 1);
    assert_kv(&req, 0, "a", "");
    free(data);
}

static void test_proto_pipelined_lines(void **state)
{
    const char data[] = "HIT a=1\r\n\nTAKE 2 b=\"x y\"\nbogus\nPING\nHIT c=";
    size_t len = strlen(data), off = 0;
    struct proto_req req;
    ssize_t n;

    (void)state;
    n = proto_parse(data + off, len - off, &req);
    assert_int_equal(n, strlen("HIT a=1\r\n"));
    assert_int_equal(req.verb, PROTO_HIT);
    assert_kv(&req, 0, "a", "1");
    off += (size_t)n;

    n = proto_parse(data + off, len - off, &req);
    assert_int_equal(n, 1);
    assert_int_equal(req.verb, PROTO_NONE);
    assert_int_equal(req.err, PROTO_E_NONE);
    off += (size_t)n;

    n = proto_parse(data + off, len - off, &req);
    assert_int_equal(n, strlen("TAKE 2 b=\"x y\"\n"));
    assert_int_equal(req.verb, PROTO_TAKE);
    assert_int_equal(req.amount, 2);
    assert_kv(&req, 0, "b", "x y");
    off += (size_t)n;

    n = proto_parse(data + off, len - off, &req);
    assert_int_equal(n, strlen("bogus\n"));
    assert_int_equal(req.err, PROTO_E_UNKNOWN_COMMAND);
    assert_string_equal(req.reason, "Unrecognized command: BOGUS");
    off += (size_t)n;

    n = proto_parse(data + off, len - off, &req);
    assert_int_equal(n, strlen("PING\n"));
    assert_int_equal(req.verb, PROTO_PING);
    assert_int_equal(req.err, PROTO_E_NONE);
    off += (size_t)n;

    assert_int_equal(proto_parse(data + off, len - off, &req), 0);
}

static void test_proto_find(void **state)
{
    struct proto_req req;
    const struct proto_kv *kv;

    (void)state;
    assert_ok("HIT user=root rhost=10.0.0.1 service=sshd tty=\"\" u=x\n", PROTO_HIT, &req);
    kv = proto_find(&req, "user", 4);
    assert_non_null(kv);
    assert_string_equal(kv->value, "root");
    kv = proto_find(&req, "tty", 3);
    assert_non_null(kv);
    assert_string_equal(kv->value, "");
    kv = proto_find(&req, "userx", 4);         /* length counts, not the NUL */
    assert_non_null(kv);
    assert_string_equal(kv->key, "user");
    assert_null(proto_find(&req, "use", 3));
    assert_null(proto_find(&req, "users", 5));
    assert_null(proto_find(&req, "", 0));
    assert_null(proto_find(&req, "zzz", 3));
    assert_null(proto_find(&req, "a", 1));
    assert_string_equal(proto_find(&req, "u", 1)->value, "x");

    assert_ok("HIT\n", PROTO_HIT, &req);
    assert_null(proto_find(&req, "user", 4));
}

static void test_proto_find_every_key(void **state)
{
    char line[PROTO_LINE_MAX], key[8];
    struct proto_req req;

    (void)state;
    build_keys(line, sizeof(line), PROTO_KV_MAX, 0);
    assert_ok(line, PROTO_HIT, &req);
    for (unsigned i = 0; i < PROTO_KV_MAX; i++) {
        char want[8];

        snprintf(key, sizeof(key), "k%02u", i);
        snprintf(want, sizeof(want), "v%u", i);
        assert_non_null(proto_find(&req, key, strlen(key)));
        assert_string_equal(proto_find(&req, key, strlen(key))->value, want);
    }
}

static void test_proto_err_codes(void **state)
{
    (void)state;
    assert_string_equal(proto_err_code(PROTO_E_UNKNOWN_COMMAND), "unknown-command");
    assert_string_equal(proto_err_code(PROTO_E_UNKNOWN), "unknown");
    assert_string_equal(proto_err_code(PROTO_E_BAD_REQUEST), "bad-request");
    assert_string_equal(proto_err_code(PROTO_E_TOO_MANY_KEYS), "too-many-keys");
    assert_string_equal(proto_err_code(PROTO_E_LINE_TOO_LONG), "line-too-long");
    assert_string_equal(proto_err_code(PROTO_E_FORBIDDEN), "forbidden");
    assert_string_equal(proto_err_code(PROTO_E_RELOAD_FAILED), "reload-failed");
    assert_string_equal(proto_err_code(PROTO_E_BUSY), "busy");
    assert_string_equal(proto_err_code((enum proto_err)999), "unknown");
}

static void test_proto_fmt_ok(void **state)
{
    char buf[PROTO_REPLY_MAX];

    (void)state;
    assert_int_equal(proto_fmt_ok(buf, sizeof(buf), true, 57, 60), strlen("OK true 57 60\n"));
    assert_string_equal(buf, "OK true 57 60\n");
    assert_int_equal(proto_fmt_ok(buf, sizeof(buf), false, 0, 0), strlen("OK false 0 0\n"));
    assert_string_equal(buf, "OK false 0 0\n");
    assert_true(proto_fmt_ok(buf, sizeof(buf), true, UINT64_MAX, UINT64_MAX) > 0);
    assert_string_equal(buf, "OK true 18446744073709551615 18446744073709551615\n");
    /* Exactly enough room (14 bytes + NUL), then one byte short. */
    assert_int_equal(proto_fmt_ok(buf, 15, true, 57, 60), 14);
    assert_int_equal(proto_fmt_ok(buf, 14, true, 57, 60), -ENOBUFS);
    assert_int_equal(proto_fmt_ok(NULL, 0, true, 57, 60), -ENOBUFS);
}

/* Numbers around every digit-count boundary, 0 and UINT64_MAX. */
static size_t fmt_values(uint64_t *v)
{
    size_t n = 0;
    uint64_t p = 1;

    v[n++] = 0;
    for (int i = 0; i < 20; i++, p *= 10) {
        v[n++] = p - 1;
        v[n++] = p;
        v[n++] = p + 1;
    }
    v[n++] = UINT64_MAX - 1;
    v[n++] = UINT64_MAX;
    return n;
}

/* The decimal conversion writes what printf's %llu writes. */
static void test_proto_fmt_ok_numbers(void **state)
{
    uint64_t v[64];
    size_t n = fmt_values(v);
    char buf[PROTO_REPLY_MAX], want[PROTO_REPLY_MAX], rule[16];

    (void)state;
    for (size_t i = 0; i < n; i++) {
        int len = snprintf(want, sizeof(want), "OK %s %llu %llu\n", i % 2 ? "true" : "false",
                           (unsigned long long)v[i], (unsigned long long)v[n - 1 - i]);

        assert_int_equal(proto_fmt_ok(buf, sizeof(buf), i % 2, v[i], v[n - 1 - i]), len);
        assert_string_equal(buf, want);
        snprintf(rule, sizeof(rule), "rule-%zu", i);
        len = snprintf(want, sizeof(want), "OK %s %llu %llu %s\n", i % 2 ? "true" : "false",
                       (unsigned long long)v[i], (unsigned long long)v[n - 1 - i], rule);
        assert_int_equal(proto_fmt_ok_rule(buf, sizeof(buf), i % 2, v[i], v[n - 1 - i], rule),
                         len);
        assert_string_equal(buf, want);
        assert_int_equal(proto_fmt_multi_head(buf, sizeof(buf), (unsigned)v[i]),
                         snprintf(want, sizeof(want), "OK %u\n", (unsigned)v[i]));
        assert_string_equal(buf, want);
    }
}

/*
 * A reply that does not fit: -ENOBUFS, and the buffer holds what snprintf()
 * would leave there (as much as fits, NUL-terminated), for every size.
 */
static void test_proto_fmt_cut_as_snprintf(void **state)
{
    static const char rule[] = "a-rule-label";
    char want[PROTO_REPLY_MAX];
    int n_ok, n_rule, n_head;

    (void)state;
    n_ok = snprintf(want, sizeof(want), "OK false 1234567890 %llu\n",
                    (unsigned long long)UINT64_MAX);
    n_rule = snprintf(want, sizeof(want), "OK false 1234567890 %llu %s\n",
                      (unsigned long long)UINT64_MAX, rule);
    n_head = snprintf(want, sizeof(want), "OK %u\n", 4000000000u);
    for (size_t size = 0; size <= (size_t)n_rule + 1; size++) {
        char buf[PROTO_REPLY_MAX], ref[PROTO_REPLY_MAX];

        memset(buf, 'x', sizeof(buf));
        memset(ref, 'x', sizeof(ref));
        snprintf(ref, size, "OK false 1234567890 %llu\n", (unsigned long long)UINT64_MAX);
        assert_int_equal(proto_fmt_ok(size ? buf : NULL, size, false, 1234567890, UINT64_MAX),
                         size > (size_t)n_ok ? n_ok : -ENOBUFS);
        assert_memory_equal(buf, ref, sizeof(buf));

        memset(buf, 'x', sizeof(buf));
        memset(ref, 'x', sizeof(ref));
        snprintf(ref, size, "OK false 1234567890 %llu %s\n", (unsigned long long)UINT64_MAX,
                 rule);
        assert_int_equal(proto_fmt_ok_rule(size ? buf : NULL, size, false, 1234567890,
                                           UINT64_MAX, rule),
                         size > (size_t)n_rule ? n_rule : -ENOBUFS);
        assert_memory_equal(buf, ref, sizeof(buf));

        memset(buf, 'x', sizeof(buf));
        memset(ref, 'x', sizeof(ref));
        snprintf(ref, size, "OK %u\n", 4000000000u);
        assert_int_equal(proto_fmt_multi_head(size ? buf : NULL, size, 4000000000u),
                         size > (size_t)n_head ? n_head : -ENOBUFS);
        assert_memory_equal(buf, ref, sizeof(buf));
    }
}

static void test_proto_fmt_err(void **state)
{
    char buf[PROTO_REPLY_MAX];

    (void)state;
    assert_int_equal(proto_fmt_err(buf, sizeof(buf), PROTO_E_UNKNOWN_COMMAND,
                                   "Unrecognized command: FOO"),
                     strlen("ERR unknown-command \"Unrecognized command: FOO\"\n"));
    assert_string_equal(buf, "ERR unknown-command \"Unrecognized command: FOO\"\n");
    assert_int_equal(proto_fmt_err(buf, sizeof(buf), PROTO_E_BUSY, NULL),
                     strlen("ERR busy\n"));
    assert_string_equal(buf, "ERR busy\n");
    proto_fmt_err(buf, sizeof(buf), PROTO_E_BAD_REQUEST, "");
    assert_string_equal(buf, "ERR bad-request \"\"\n");
    proto_fmt_err(buf, sizeof(buf), PROTO_E_RELOAD_FAILED, "a \"b\"\nc\td\x7f");
    assert_string_equal(buf, "ERR reload-failed \"a _b__c_d_\"\n");
    /* Non-ASCII passes through. */
    proto_fmt_err(buf, sizeof(buf), PROTO_E_UNKNOWN, "caf\xc3\xa9");
    assert_string_equal(buf, "ERR unknown \"caf\xc3\xa9\"\n");

    assert_int_equal(proto_fmt_err(buf, 10, PROTO_E_BUSY, NULL), 9);
    assert_int_equal(proto_fmt_err(buf, 9, PROTO_E_BUSY, NULL), -ENOBUFS);
    assert_int_equal(proto_fmt_err(buf, 13, PROTO_E_BUSY, "x"), -ENOBUFS);
    assert_int_equal(proto_fmt_err(buf, 14, PROTO_E_BUSY, "x"), 13);
    assert_string_equal(buf, "ERR busy \"x\"\n");
}

static void test_proto_fmt_err_long_reason_truncated(void **state)
{
    char reason[2000], buf[PROTO_REPLY_MAX * 4];
    int n;

    (void)state;
    memset(reason, 'r', sizeof(reason) - 1);
    reason[sizeof(reason) - 1] = '\0';
    n = proto_fmt_err(buf, sizeof(buf), PROTO_E_RELOAD_FAILED, reason);
    assert_int_equal(n, PROTO_REPLY_MAX - 1);
    assert_int_equal(strlen(buf), PROTO_REPLY_MAX - 1);
    assert_memory_equal(buf, "ERR reload-failed \"rrr", 22);
    assert_string_equal(buf + n - 3, "r\"\n");
    /* PROTO_REPLY_MAX is always enough. */
    assert_int_equal(proto_fmt_err(buf, PROTO_REPLY_MAX, PROTO_E_RELOAD_FAILED, reason),
                     PROTO_REPLY_MAX - 1);

    /* A cut never splits a UTF-8 sequence. */
    for (size_t i = 0; i + 1 < sizeof(reason) - 1; i += 2) {
        reason[i] = '\xc3';
        reason[i + 1] = '\xa9';
    }
    for (int shift = 0; shift < 2; shift++) {
        n = proto_fmt_err(buf, sizeof(buf), shift ? PROTO_E_BUSY : PROTO_E_FORBIDDEN, reason);
        assert_true(n > 0 && n <= PROTO_REPLY_MAX - 1);
        assert_true((unsigned char)buf[n - 3] == 0xa9);
    }
}

static void test_proto_fmt_err_round_trip_reason(void **state)
{
    char buf[PROTO_REPLY_MAX];
    struct proto_req req;

    (void)state;
    parse_one("nope a=b\n", &req);
    assert_true(proto_fmt_err(buf, sizeof(buf), req.err, req.reason) > 0);
    assert_string_equal(buf, "ERR unknown-command \"Unrecognized command: NOPE\"\n");
}

static void test_proto_fmt_multi_head(void **state)
{
    char buf[PROTO_REPLY_MAX];

    (void)state;
    assert_int_equal(proto_fmt_multi_head(buf, sizeof(buf), 0), 5);
    assert_string_equal(buf, "OK 0\n");
    assert_int_equal(proto_fmt_multi_head(buf, sizeof(buf), 1234), 8);
    assert_string_equal(buf, "OK 1234\n");
    assert_int_equal(proto_fmt_multi_head(buf, 6, 12), -ENOBUFS);
    assert_int_equal(proto_fmt_multi_head(buf, 7, 12), 6);
}

static void test_proto_fmt_string(void **state)
{
    char buf[64];

    (void)state;
    assert_int_equal(proto_fmt_string(buf, sizeof(buf), "GET", 3), 3);
    assert_string_equal(buf, "GET");
    assert_int_equal(proto_fmt_string(buf, sizeof(buf), "/a b", 4), 6);
    assert_string_equal(buf, "\"/a b\"");
    assert_int_equal(proto_fmt_string(buf, sizeof(buf), "", 0), 2);
    assert_string_equal(buf, "\"\"");
    proto_fmt_string(buf, sizeof(buf), "k=v", 3);
    assert_string_equal(buf, "\"k=v\"");
    proto_fmt_string(buf, sizeof(buf), "a\"b", 3);
    assert_string_equal(buf, "\"a_b\"");
    proto_fmt_string(buf, sizeof(buf), "a\nb", 3);
    assert_string_equal(buf, "\"a_b\"");
    proto_fmt_string(buf, sizeof(buf), "a\tb", 3);
    assert_string_equal(buf, "\"a\tb\"");
    proto_fmt_string(buf, sizeof(buf), "a\rb", 3);
    assert_string_equal(buf, "\"a\rb\"");
    proto_fmt_string(buf, sizeof(buf), "x\0y", 3);
    assert_string_equal(buf, "x_y");
    /* Only @len bytes are read. */
    assert_int_equal(proto_fmt_string(buf, sizeof(buf), "abcdef", 2), 2);
    assert_string_equal(buf, "ab");
}

static void test_proto_fmt_string_nobufs(void **state)
{
    char buf[8];

    (void)state;
    assert_int_equal(proto_fmt_string(buf, 4, "abc", 3), 3);
    assert_int_equal(proto_fmt_string(buf, 3, "abc", 3), -ENOBUFS);
    assert_int_equal(proto_fmt_string(buf, 6, "a c", 3), 5);
    assert_int_equal(proto_fmt_string(buf, 5, "a c", 3), -ENOBUFS);
    assert_int_equal(proto_fmt_string(buf, 3, "", 0), 2);
    assert_int_equal(proto_fmt_string(buf, 2, "", 0), -ENOBUFS);
    assert_int_equal(proto_fmt_string(NULL, 0, "a", 1), -ENOBUFS);
}

/* What a client builds with proto_fmt_string, proto_parse reads back. */
static void test_proto_fmt_string_round_trip(void **state)
{
    static const char *const strs[] = {
        "GET", "/a b", "", "k=v", "tab\there", "caf\xc3\xa9", "x'y", "*", "a\"b", "-",
    };
    static const char *const want[] = {
        "GET", "/a b", "", "k=v", "tab\there", "caf\xc3\xa9", "x'y", "*", "a_b", "-",
    };
    char line[256];
    struct proto_req req;

    (void)state;
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        size_t pos = 4;
        int n;

        if (strs[i][0] == '\0')
            continue;       /* an empty key is refused; tested as a value below */
        memcpy(line, "HIT ", 4);
        n = proto_fmt_string(line + pos, sizeof(line) - pos, strs[i], strlen(strs[i]));
        assert_true(n > 0);
        pos += (size_t)n;
        line[pos++] = '=';
        n = proto_fmt_string(line + pos, sizeof(line) - pos, strs[i], strlen(strs[i]));
        assert_true(n > 0);
        pos += (size_t)n;
        line[pos++] = '\n';
        line[pos] = '\0';
        assert_ok(line, PROTO_HIT, &req);
        assert_int_equal(req.n_kv, 1);
        assert_kv(&req, 0, want[i], want[i]);
    }
    assert_ok("HIT k=\"\"\n", PROTO_HIT, &req);
    assert_kv(&req, 0, "k", "");
}

/* REPORT (docs/protocol.md): seven fields before pairs as HIT's. */
static void test_proto_report_fields(void **state)
{
    struct proto_req req;

    (void)state;
    assert_ok("REPORT 123456 TAKE 5 1 7 59 0123456789abcdef path=/a ip=\"1 2\"\n",
              PROTO_REPORT, &req);
    assert_int_equal(req.report.mono_ms, 123456);
    assert_int_equal(req.report.op, PROTO_TAKE);
    assert_int_equal(req.amount, 5);
    assert_true(req.report.allowed);
    assert_int_equal(req.report.credit, 7);
    assert_int_equal(req.report.reset_s, 59);
    assert_int_equal(req.report.rule_id, 0x0123456789abcdefull);
    assert_int_equal(req.n_kv, 2);
    assert_kv(&req, 0, "ip", "1 2");
    assert_kv(&req, 1, "path", "/a");
    assert_ok("report 18446744073709551615 PEEK 1 0 18446744073709551615 0 "
              "ffffffffffffffff\n", PROTO_REPORT, &req);
    assert_int_equal(req.report.mono_ms, UINT64_MAX);
    assert_int_equal(req.report.op, PROTO_PEEK);
    assert_false(req.report.allowed);
    assert_int_equal(req.report.credit, UINT64_MAX);
    assert_int_equal(req.n_kv, 0);
    assert_ok("REPORT 1 DEBIT 1000000000000 1 0 0 0000000000000000 a=b\n", PROTO_REPORT, &req);
    assert_int_equal(req.report.op, PROTO_DEBIT);
    assert_int_equal(req.amount, PROTO_DEBIT_MAX);
}

static void test_proto_report_bad(void **state)
{
    static const char *const bad[] = {
        "REPORT\n",
        "REPORT 1 TAKE 1 1 0 0\n",                                   /* no id */
        "REPORT 1 HIT 1 1 0 0 0123456789abcdef\n",                   /* HIT is TAKE 1 */
        "REPORT 1 take 1 1 0 0 0123456789abcdef\n",                  /* ops are upper-case */
        "REPORT 1 TAKE 0 1 0 0 0123456789abcdef\n",                  /* n from 1 */
        "REPORT 1 TAKE 1000000001 1 0 0 0123456789abcdef\n",         /* TAKE's n */
        "REPORT 1 PEEK 2 1 0 0 0123456789abcdef\n",                  /* PEEK is 1 */
        "REPORT 1 DEBIT 1000000000001 1 0 0 0123456789abcdef\n",     /* DEBIT's n */
        "REPORT 1 TAKE 1 2 0 0 0123456789abcdef\n",                  /* 0 or 1 */
        "REPORT 18446744073709551616 TAKE 1 1 0 0 0123456789abcdef\n",       /* overflow */
        "REPORT 1 TAKE 1 1 184467440737095516150 0 0123456789abcdef\n",
        "REPORT -1 TAKE 1 1 0 0 0123456789abcdef\n",
        "REPORT 1 TAKE 1 1 0 0 0123456789ABCDEF\n",                  /* lower-case hex */
        "REPORT 1 TAKE 1 1 0 0 0123456789abcde\n",                   /* 16 digits */
        "REPORT 1 TAKE 1 1 0 0 0123456789abcdef0\n",
        "REPORT 1 TAKE 1 1 0 0 fast a=b\n",                          /* an id, not a label */
        "REPORT \"1\" TAKE 1 1 0 0 0123456789abcdef\n",              /* no quotes */
        "REPORT 1 TAKE 1 1 0 0 0123456789abcdef=x\n",
        "REPORT 1 TAKE 1 1 0 0 0123456789abcdef a\n",                /* pairs as HIT's */
        "REPORT a=b\n",
    };
    struct proto_req req;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_err(bad[i], PROTO_E_BAD_REQUEST, &req);
        assert_int_equal(req.verb, PROTO_REPORT);
    }
}

/* proto_fmt_report() writes what proto_parse() reads back, within a line. */
static void test_proto_report_round_trip(void **state)
{
    struct proto_kv kv[PROTO_KV_MAX];
    struct proto_report r = { .mono_ms = 98765, .credit = 0, .reset_s = 3600,
                              .rule_id = 0xfedcba9876543210ull, .op = PROTO_DEBIT,
                              .allowed = false };
    char line[PROTO_LINE_MAX + 1], keys[PROTO_KV_MAX][4], big[PROTO_LINE_MAX];
    struct proto_req req;
    int n;

    (void)state;
    for (int i = 0; i < PROTO_KV_MAX; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%02d", PROTO_KV_MAX - 1 - i);
        kv[i] = (struct proto_kv){ .key = keys[i], .key_len = 3, .value = i % 2 ? "a b" : "",
                                   .value_len = i % 2 ? 3 : 0 };
    }
    n = proto_fmt_report(line, sizeof(line), &r, 12, kv, PROTO_KV_MAX);
    assert_true(n > 0 && line[n - 1] == '\n' && line[n] == '\0');
    assert_int_equal(proto_parse(line, (size_t)n, &req), n);
    assert_int_equal(req.err, PROTO_E_NONE);
    assert_int_equal(req.verb, PROTO_REPORT);
    assert_int_equal(req.report.mono_ms, 98765);
    assert_int_equal(req.report.op, PROTO_DEBIT);
    assert_int_equal(req.amount, 12);
    assert_false(req.report.allowed);
    assert_int_equal(req.report.reset_s, 3600);
    assert_int_equal(req.report.rule_id, 0xfedcba9876543210ull);
    assert_int_equal(req.n_kv, PROTO_KV_MAX);
    assert_kv(&req, 0, "k00", "a b");
    assert_kv(&req, 1, "k01", "");

    /* The longest line that fits, and one byte more. */
    n = proto_fmt_report(line, sizeof(line), &r, 12, kv, 0);
    memset(big, 'v', sizeof(big));
    kv[0] = (struct proto_kv){ .key = "k", .key_len = 1, .value = big,
                               .value_len = (uint16_t)(PROTO_LINE_MAX - n - 3) };
    n = proto_fmt_report(line, sizeof(line), &r, 12, kv, 1);
    assert_int_equal(n, PROTO_LINE_MAX);
    assert_int_equal(proto_parse(line, (size_t)n, &req), n);
    assert_int_equal(req.err, PROTO_E_NONE);
    kv[0].value_len++;
    assert_int_equal(proto_fmt_report(line, sizeof(line), &r, 12, kv, 1), -EMSGSIZE);
    /* A small buffer, and an op REPORT does not carry. */
    assert_int_equal(proto_fmt_report(line, 20, &r, 12, kv, 0), -EMSGSIZE);
    r.op = PROTO_HIT;
    assert_int_equal(proto_fmt_report(line, sizeof(line), &r, 12, kv, 0), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proto_hit_quoted_value),
        cmocka_unit_test(test_proto_hit_basic),
        cmocka_unit_test(test_proto_hit_no_pairs),
        cmocka_unit_test(test_proto_every_verb),
        cmocka_unit_test(test_proto_amount_is_one_without_take),
        cmocka_unit_test(test_proto_verbs_case_insensitive),
        cmocka_unit_test(test_proto_quoted_command_word),
        cmocka_unit_test(test_proto_cr_stripped),
        cmocka_unit_test(test_proto_empty_line_no_reply),
        cmocka_unit_test(test_proto_whitespace_line_unknown_command),
        cmocka_unit_test(test_proto_unknown_command_reason),
        cmocka_unit_test(test_proto_unknown_command_long_word),
        cmocka_unit_test(test_proto_quoted_keys_and_values),
        cmocka_unit_test(test_proto_empty_values),
        cmocka_unit_test(test_proto_extra_whitespace),
        cmocka_unit_test(test_proto_unterminated_quote),
        cmocka_unit_test(test_proto_garbage_after_closing_quote),
        cmocka_unit_test(test_proto_quote_in_unquoted_value),
        cmocka_unit_test(test_proto_equals_in_unquoted_value),
        cmocka_unit_test(test_proto_empty_key),
        cmocka_unit_test(test_proto_missing_equals),
        cmocka_unit_test(test_proto_duplicate_keys_last_wins),
        cmocka_unit_test(test_proto_kv_sorted_bytewise),
        cmocka_unit_test(test_proto_32_keys_ok),
        cmocka_unit_test(test_proto_33_keys_too_many),
        cmocka_unit_test(test_proto_take_amount),
        cmocka_unit_test(test_proto_take_bad_amount),
        cmocka_unit_test(test_proto_debit_amount),
        cmocka_unit_test(test_proto_report_fields),
        cmocka_unit_test(test_proto_report_bad),
        cmocka_unit_test(test_proto_report_round_trip),
        cmocka_unit_test(test_proto_args_on_argless_verbs),
        cmocka_unit_test(test_proto_nul_byte),
        cmocka_unit_test(test_proto_partial_line_needs_more),
        cmocka_unit_test(test_proto_no_newline_within_limit),
        cmocka_unit_test(test_proto_line_at_limit),
        cmocka_unit_test(test_proto_line_at_limit_many_pairs),
        cmocka_unit_test(test_proto_pipelined_lines),
        cmocka_unit_test(test_proto_find),
        cmocka_unit_test(test_proto_find_every_key),
        cmocka_unit_test(test_proto_err_codes),
        cmocka_unit_test(test_proto_fmt_ok),
        cmocka_unit_test(test_proto_fmt_ok_numbers),
        cmocka_unit_test(test_proto_fmt_cut_as_snprintf),
        cmocka_unit_test(test_proto_fmt_err),
        cmocka_unit_test(test_proto_fmt_err_long_reason_truncated),
        cmocka_unit_test(test_proto_fmt_err_round_trip_reason),
        cmocka_unit_test(test_proto_fmt_multi_head),
        cmocka_unit_test(test_proto_fmt_string),
        cmocka_unit_test(test_proto_fmt_string_nobufs),
        cmocka_unit_test(test_proto_fmt_string_round_trip),
    };

    return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
