/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/line_verb.c, the line protocol's verb table: every verb of the protocol
 * reaches its handler, the admin verbs (RESET, RELOAD, COUNTERS, DROPIN) are
 * refused to peers that are not admin before their handler runs, a rejected line
 * gets its ERR, an empty line gets nothing, and REFILL is never answered,
 * not even when malformed.  Links libdivvyd.a; the handlers of other modules
 * and the reply functions are fakes (-Wl,--wrap, Makefile) that record what
 * the table did.  The real parser (common/proto.c) makes the requests.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "daemon/conn.h"
#include "daemon/srv_int.h"
#include "daemon/line_verb.h"
#include "daemon/worker_int.h"

/* What the fakes saw since reset(). */
static const char *ran;             /* the handler that ran, or NULL */
static unsigned n_ran;
static enum proto_err err_code;     /* the last ERR, or PROTO_E_NONE */
static char err_reason[256];
static char text[256];              /* the replies of line_text(), concatenated */
static unsigned n_replies;

void __wrap_line_hit(struct conn *c, const struct proto_req *req);
void __wrap_admin_explain(struct conn *c, const struct proto_req *req);
void __wrap_admin_rules(struct conn *c, const struct proto_req *req);
void __wrap_admin_stats(struct conn *c, const struct proto_req *req);
void __wrap_admin_reload(struct conn *c, const struct proto_req *req);
void __wrap_admin_dropin(struct conn *c, const struct proto_req *req);
void __wrap_counters_request(struct conn *c, const struct proto_req *req);
void __wrap_line_err(struct conn *c, enum proto_err err, const char *reason);
void __wrap_line_text(struct conn *c, const char *s);

static void handler_ran(const char *name)
{
    ran = name;
    n_ran++;
}

void __wrap_line_hit(struct conn *c, const struct proto_req *req)
{
    (void)c;
    (void)req;
    handler_ran("hit");
}

void __wrap_admin_explain(struct conn *c, const struct proto_req *req)
{
    (void)c;
    (void)req;
    handler_ran("explain");
}

void __wrap_admin_rules(struct conn *c, const struct proto_req *req)
{
    (void)c;
    (void)req;
    handler_ran("rules");
}

void __wrap_admin_stats(struct conn *c, const struct proto_req *req)
{
    (void)c;
    (void)req;
    handler_ran("stats");
}

void __wrap_admin_reload(struct conn *c, const struct proto_req *req)
{
    (void)c;
    (void)req;
    handler_ran("reload");
}

void __wrap_admin_dropin(struct conn *c, const struct proto_req *req)
{
    (void)c;
    (void)req;
    handler_ran("dropin");
}

void __wrap_counters_request(struct conn *c, const struct proto_req *req)
{
    (void)c;
    (void)req;
    handler_ran("counters");
}

void __wrap_line_err(struct conn *c, enum proto_err err, const char *reason)
{
    (void)c;
    err_code = err;
    snprintf(err_reason, sizeof(err_reason), "%s", reason ? reason : "");
    n_replies++;
}

void __wrap_line_text(struct conn *c, const char *s)
{
    size_t len = strlen(text);

    (void)c;
    snprintf(text + len, sizeof(text) - len, "%s", s);
    n_replies++;
}

/* A connection of a worker of a server without a store or a fast path. */
struct fixture {
    struct srv s;
    struct worker w;
    struct conn c;
    struct proto_req req;
};

static int setup(void **state)
{
    static struct fixture f;

    memset(&f, 0, sizeof(f));
    f.w.s = &f.s;
    f.c.w = &f.w;
    f.c.fd = -1;
    *state = &f;
    return 0;
}

static void reset(void)
{
    ran = NULL;
    n_ran = 0;
    err_code = PROTO_E_NONE;
    err_reason[0] = '\0';
    text[0] = '\0';
    n_replies = 0;
}

/* Parses @line (newline added) and hands it to the table as @c's request. */
static void handle(struct fixture *f, const char *line)
{
    char buf[512];
    int n = snprintf(buf, sizeof(buf), "%s\n", line);

    assert_true(proto_parse(buf, (size_t)n, &f->req) == n);
    reset();
    line_verb_handle(&f->c, &f->req);
}

static void test_verb_each_verb_reaches_its_handler(void **state)
{
    static const struct {
        const char *line, *handler;
    } cases[] = {
        { "HIT user=a", "hit" },         { "take 2 user=a", "hit" },
        { "PEEK user=a", "hit" },        { "RESET user=a", "hit" },
        { "EXPLAIN user=a", "explain" }, { "RULES", "rules" },
        { "STATS", "stats" },            { "RELOAD", "reload" },
        { "COUNTERS max=5", "counters" },
        { "RELOAD dry_run=true", "reload" }, { "DROPIN op=list", "dropin" },
    };
    struct fixture *f = *state;

    f->c.is_unix = true;
    f->c.privileged = true;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        handle(f, cases[i].line);
        assert_non_null(ran);
        assert_string_equal(ran, cases[i].handler);
        assert_int_equal(n_ran, 1);
        assert_int_equal(n_replies, 0);
    }
}

static void test_verb_admin_verbs_refused_before_their_handler(void **state)
{
    static const char *const admin[] = { "RESET user=a", "RELOAD", "COUNTERS",
                                         "RELOAD dry_run=true", "DROPIN op=list" };
    static const char *const words[] = { "RESET", "RELOAD", "COUNTERS", "RELOAD", "DROPIN" };
    struct fixture *f = *state;
    char want[128];

    /* Unix but not admin, then TCP (never admin). */
    for (int tcp = 0; tcp < 2; tcp++) {
        f->c.is_unix = !tcp;
        f->c.privileged = false;
        for (size_t i = 0; i < sizeof(admin) / sizeof(admin[0]); i++) {
            handle(f, admin[i]);
            assert_null(ran);
            assert_int_equal(n_replies, 1);
            assert_int_equal(err_code, PROTO_E_FORBIDDEN);
            snprintf(want, sizeof(want), "%s needs root or the admin group on the Unix socket",
                     words[i]);
            assert_string_equal(err_reason, want);
        }
        /* The other verbs are anyone's. */
        handle(f, "EXPLAIN user=a");
        assert_string_equal(ran, "explain");
        handle(f, "HIT user=a");
        assert_string_equal(ran, "hit");
    }
}

static void test_verb_small_verbs_and_rejected_lines(void **state)
{
    struct fixture *f = *state;

    handle(f, "PING");
    assert_string_equal(text, "OK pong\n");
    assert_false(f->c.closing);
    handle(f, "");
    assert_int_equal(n_replies, 0);
    assert_null(ran);
    /* The parser's ERR, and no handler: an unknown verb, a bad TAKE. */
    handle(f, "FROB user=a");
    assert_int_equal(err_code, PROTO_E_UNKNOWN_COMMAND);
    assert_int_equal(n_replies, 1);
    assert_null(ran);
    handle(f, "TAKE x user=a");
    assert_int_not_equal(err_code, PROTO_E_NONE);
    assert_null(ran);
    /* FAST: only on the Unix socket, and only with a fast path to give. */
    f->c.is_unix = false;
    handle(f, "FAST");
    assert_int_equal(err_code, PROTO_E_FORBIDDEN);
    f->c.is_unix = true;
    handle(f, "FAST");
    assert_int_equal(err_code, PROTO_E_FORBIDDEN);
    handle(f, "QUIT");
    assert_string_equal(text, "OK bye\n");
    assert_true(f->c.closing);
}

/* Each of @lines gets no reply and reaches no handler, and counts once in
 * *@seen and *@dropped: the silent verbs, REFILL and REPORT. */
static void silent_lines(struct fixture *f, const char *const *lines, size_t n,
                         const uint64_t *seen, const uint64_t *dropped)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t seen0 = stat_get(seen), dropped0 = stat_get(dropped);

        handle(f, lines[i]);
        assert_int_equal(n_replies, 0);
        assert_null(ran);
        assert_int_equal(stat_get(seen), seen0 + 1);
        assert_int_equal(stat_get(dropped), dropped0 + 1);
    }
}

static void test_verb_refill_is_never_answered(void **state)
{
    static const char *const lines[] = {
        "REFILL rule=api index=0 actor=alice",  /* no store: dropped */
        "REFILL rule=api",                      /* incomplete */
        "REFILL rule=\"unterminated",           /* rejected by the parser */
    };
    struct fixture *f = *state;

    silent_lines(f, lines, sizeof(lines) / sizeof(lines[0]), &f->w.st.refill_hints,
                 &f->w.st.refill_dropped);
}

/* REPORT (docs/protocol.md): never answered either; here no fast path to
 * check the peer against, so every one is dropped and counted. */
static void test_verb_report_is_never_answered(void **state)
{
    static const char *const lines[] = {
        "REPORT 1 TAKE 1 1 0 0 0123456789abcdef path=/a",   /* no fast path: dropped */
        "REPORT 1 TAKE 1",                                  /* incomplete */
        "REPORT 1 TAKE 1 1 0 0 0123456789abcdef a=\"x",     /* rejected by the parser */
    };
    struct fixture *f = *state;

    silent_lines(f, lines, sizeof(lines) / sizeof(lines[0]), &f->w.st.reports,
                 &f->w.st.reports_dropped);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_verb_each_verb_reaches_its_handler, setup),
        cmocka_unit_test_setup(test_verb_admin_verbs_refused_before_their_handler, setup),
        cmocka_unit_test_setup(test_verb_small_verbs_and_rejected_lines, setup),
        cmocka_unit_test_setup(test_verb_refill_is_never_answered, setup),
        cmocka_unit_test_setup(test_verb_report_is_never_answered, setup),
    };

    return cmocka_run_group_tests_name("line_verb", tests, NULL, NULL);
}
