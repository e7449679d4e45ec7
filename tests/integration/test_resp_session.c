/* SPDX-License-Identifier: MIT */
/*
 * test_resp_session: a RESP connection's session over raw sockets
 * (docs/resp.md): RESP3 after HELLO 3 (its map, null, empty map) and back
 * with HELLO 2; AUTH against server.resp_password_file (every form Redis
 * knows, every command but AUTH, HELLO ... AUTH and QUIT refused before it,
 * a wrong HELLO ... AUTH refused, a connection closed after ten wrong
 * passwords, a new password in force for authenticated connections after
 * RELOAD, a group-readable file refused); MULTI/EXEC/DISCARD (queued, run
 * in order, aborted by a refused command, bounded in commands and bytes for
 * an unprivileged TCP peer, in order behind hits that wait for Redis).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "harness_redis.h"
#include "resp_client.h"

#define RULES                                                                         \
    "rules = (\n"                                                                     \
    "  { match = { app = \"*\"; }; label = \"r1\"; actor = \"app\";\n"                \
    "    credit_limit = 3; reset_seconds = 60; },\n"                                  \
    "  { default = true; label = \"dflt\"; credit_limit = 5; reset_seconds = 60; }\n" \
    ");\n"

#define HELLO_MAP(v) "%7 $server $divvy $version $" DIVVY_VERSION " $proto :" v " $id :"
#define HELLO_ARRAY(v) "*14 $server $divvy $version $" DIVVY_VERSION " $proto :" v " $id :"
#define NOAUTH "-NOAUTH Authentication required."
#define WRONGPASS "-WRONGPASS invalid username-password pair or user is disabled."

/* ---- RESP3 ---------------------------------------------------------------------------- */

static void test_resp3(void **state)
{
    struct harness_daemon *d = resp_start(RULES);
    struct harness_conn *c;

    (void)state;
    CHECK(harness_connect_unix(d->resp_sock, &c));
    /* HELLO without a version answers in the version spoken: RESP2 first. */
    SEND_CMD(c, "HELLO");
    expect_resp_prefix(c, HELLO_ARRAY("2"));
    SEND_CMD(c, "HELLO", "3", "SETNAME", "me");
    expect_resp_prefix(c, HELLO_MAP("3"));
    SEND_CMD(c, "CLIENT", "GETNAME");
    expect_resp(c, "_");
    SEND_CMD(c, "COMMAND", "DOCS");
    expect_resp(c, "%0");
    /* Arrays stay arrays, integers integers. */
    SEND_CMD(c, "DIVVY.HIT", "app", "r3");
    expect_resp(c, "*4 :1 :2 :60 $r1");
    SEND_CMD(c, "RL.REDUCE", "b3", "2", "60");
    expect_resp(c, ":2");
    SEND_CMD(c, "HELLO");
    expect_resp_prefix(c, HELLO_MAP("3"));
    /* Refused: nothing changes. */
    SEND_CMD(c, "HELLO", "4");
    expect_resp(c, "-NOPROTO unsupported protocol version");
    SEND_CMD(c, "HELLO", "x");
    expect_resp(c, "-ERR Protocol version is not an integer or out of range");
    SEND_CMD(c, "HELLO", "2", "FOO");
    expect_resp(c, "-ERR Syntax error in HELLO option 'FOO'");
    SEND_CMD(c, "HELLO", "2", "AUTH", "default");
    expect_resp(c, "-ERR Syntax error in HELLO option 'AUTH'");
    SEND_CMD(c, "CLIENT", "GETNAME");
    expect_resp(c, "_");
    SEND_CMD(c, "HELLO", "2");
    expect_resp_prefix(c, HELLO_ARRAY("2"));
    SEND_CMD(c, "CLIENT", "GETNAME");
    expect_resp(c, "$nil");
    SEND_CMD(c, "COMMAND", "DOCS");
    expect_resp(c, "*0");
    /* No password configured: AUTH says so, in every form, and HELLO ... AUTH too. */
    SEND_CMD(c, "AUTH", "x");
    expect_resp_prefix(c, "-ERR AUTH <password> called without any password configured for "
                          "the default user.");
    SEND_CMD(c, "AUTH", "default", "x");
    expect_resp_prefix(c, "-ERR AUTH <password> called without any password");
    SEND_CMD(c, "HELLO", "3", "AUTH", "default", "x");
    expect_resp_prefix(c, "-ERR AUTH <password> called without any password");
    SEND_CMD(c, "PING");
    expect_resp(c, "+PONG");
    harness_close(c);
    harness_free(d);
}

/* ---- AUTH ----------------------------------------------------------------------------- */

static void reload(struct harness_daemon *d, const char *want)
{
    struct harness_conn *l;
    char reply[HARNESS_LINE];

    CHECK(harness_connect(d, HARNESS_UNIX, &l));
    CHECK(harness_cmd(l, "RELOAD", reply, sizeof(reply)));
    if (strncmp(reply, want, strlen(want)) != 0)
        fail_msg("RELOAD: \"%s\", want \"%s...\"", reply, want);
    harness_close(l);
}

static void test_resp_auth(void **state)
{
    char conf[1024];
    const char *pw;
    struct harness_daemon *d;
    struct harness_conn *c, *a;

    (void)state;
    pw = resp_password_write("old-pw\n", 0600);
    snprintf(conf, sizeof(conf), "server = { resp_password_file = \"%s\"; };\n%s", pw, RULES);
    d = resp_start(conf);
    assert_int_equal(harness_log_contains(d, "resp: clients must authenticate"), 1);

    /* Before AUTH: everything but AUTH, HELLO ... AUTH and QUIT is refused, PING too. */
    CHECK(harness_connect_unix(d->resp_sock, &c));
    SEND_CMD(c, "PING");
    expect_resp(c, NOAUTH);
    SEND_CMD(c, "DIVVY.HIT", "app", "a");
    expect_resp(c, NOAUTH);
    SEND_CMD(c, "RL.REDUCE", "k", "2", "60");
    expect_resp(c, NOAUTH);
    SEND_CMD(c, "MULTI");
    expect_resp(c, NOAUTH);
    SEND_CMD(c, "HELLO", "3");
    expect_resp_prefix(c, "-NOAUTH HELLO must be called with the client already authenticated");
    /* The bug this fixes: a wrong HELLO ... AUTH was accepted and ignored. */
    SEND_CMD(c, "HELLO", "2", "AUTH", "default", "wrong");
    expect_resp(c, WRONGPASS);
    SEND_CMD(c, "PING");
    expect_resp(c, NOAUTH);
    SEND_CMD(c, "AUTH", "bob", "old-pw");
    expect_resp(c, WRONGPASS);
    SEND_CMD(c, "AUTH", "old-pw-");
    expect_resp(c, WRONGPASS);
    SEND_CMD(c, "AUTH", "old-p");
    expect_resp(c, WRONGPASS);
    SEND_CMD(c, "AUTH", "a", "b", "c");
    expect_resp(c, "-ERR syntax error");
    SEND_CMD(c, "AUTH", "old-pw");
    expect_resp(c, "+OK");
    SEND_CMD(c, "DIVVY.HIT", "app", "a");
    expect_resp(c, "*4 :1 :2 :60 $r1");
    harness_close(c);

    /* AUTH default pass; HELLO 3 AUTH default pass SETNAME n. */
    CHECK(harness_connect_unix(d->resp_sock, &c));
    SEND_CMD(c, "AUTH", "default", "old-pw");
    expect_resp(c, "+OK");
    SEND_CMD(c, "PING");
    expect_resp(c, "+PONG");
    harness_close(c);
    CHECK(harness_connect(d, HARNESS_UNIX, &a));    /* the line protocol asks nothing */
    harness_close(a);
    CHECK(harness_connect_tcp(d->resp_port, &a));
    SEND_CMD(a, "HELLO", "3", "AUTH", "default", "old-pw", "SETNAME", "n");
    expect_resp_prefix(a, HELLO_MAP("3"));
    SEND_CMD(a, "PING");
    expect_resp(a, "+PONG");

    /* QUIT needs no password. */
    CHECK(harness_connect_unix(d->resp_sock, &c));
    SEND_CMD(c, "QUIT");
    expect_resp(c, "+OK");
    assert_int_equal(harness_wait_eof(c, HARNESS_TIMEOUT_MS), 0);
    harness_close(c);

    /* Ten wrong passwords on one connection close it. */
    CHECK(harness_connect_tcp(d->resp_port, &c));
    for (int i = 0; i < 10; i++) {
        SEND_CMD(c, "AUTH", "guess");
        expect_resp(c, WRONGPASS);
    }
    assert_int_equal(harness_wait_eof(c, HARNESS_TIMEOUT_MS), 0);
    harness_close(c);

    /* RELOAD with the same password: authenticated connections stay so. */
    reload(d, "OK");
    SEND_CMD(a, "PING");
    expect_resp(a, "+PONG");
    /* A group-readable file is refused: the reload fails, the old password stays. */
    resp_password_write("group-pw\n", 0640);
    reload(d, "ERR reload-failed");
    SEND_CMD(a, "PING");
    expect_resp(a, "+PONG");
    /* A new password: in force at once, for connections authenticated before too,
     * one inside a transaction included. */
    SEND_CMD(a, "MULTI");
    expect_resp(a, "+OK");
    SEND_CMD(a, "PING");
    expect_resp(a, "+QUEUED");
    resp_password_write("new-pw\n", 0600);
    reload(d, "OK");
    assert_int_equal(harness_log_contains(d, "RESP password changed"), 1);
    SEND_CMD(a, "PING");
    expect_resp(a, NOAUTH);
    /* ... and DISCARD still ends a transaction it had begun. */
    SEND_CMD(a, "EXEC");
    expect_resp(a, NOAUTH);
    SEND_CMD(a, "DISCARD");
    expect_resp(a, "+OK");
    SEND_CMD(a, "AUTH", "old-pw");
    expect_resp(a, WRONGPASS);
    SEND_CMD(a, "AUTH", "new-pw");
    expect_resp(a, "+OK");
    SEND_CMD(a, "PING");
    expect_resp(a, "+PONG");
    harness_close(a);
    harness_free(d);
}

/* ---- MULTI ---------------------------------------------------------------------------- */

static void test_resp_multi(void **state)
{
    struct harness_daemon *d = resp_start(RULES);
    struct harness_conn *c;

    (void)state;
    /* Over TCP: an unprivileged peer. */
    CHECK(harness_connect_tcp(d->resp_port, &c));
    SEND_CMD(c, "EXEC");
    expect_resp(c, "-ERR EXEC without MULTI");
    SEND_CMD(c, "DISCARD");
    expect_resp(c, "-ERR DISCARD without MULTI");
    SEND_CMD(c, "WATCH", "k");
    expect_resp_prefix(c, "-ERR WATCH is not supported by divvyd");
    SEND_CMD(c, "UNWATCH");
    expect_resp(c, "+OK");

    SEND_CMD(c, "MULTI");
    expect_resp(c, "+OK");
    SEND_CMD(c, "DIVVY.HIT", "app", "m");
    expect_resp(c, "+QUEUED");
    SEND_CMD(c, "RL.REDUCE", "mb", "5", "60");
    expect_resp(c, "+QUEUED");
    SEND_CMD(c, "PING");
    expect_resp(c, "+QUEUED");
    SEND_CMD(c, "CL.THROTTLE", "mc", "0", "1", "60", "x");
    expect_resp(c, "+QUEUED");
    SEND_CMD(c, "EXEC");
    /* An error found when it runs is its reply, the others run. */
    expect_resp(c, "*4 *4 :1 :2 :60 $r1 :5 +PONG -ERR value is not an integer or out of range");

    /* A command refused while queueing aborts the EXEC; nothing ran. */
    SEND_CMD(c, "MULTI");
    expect_resp(c, "+OK");
    SEND_CMD(c, "DIVVY.HIT", "app", "m");
    expect_resp(c, "+QUEUED");
    SEND_CMD(c, "NOPE");
    expect_resp(c, "-ERR unknown command 'NOPE'");
    SEND_CMD(c, "DIVVY.HIT", "app", "m");
    expect_resp(c, "+QUEUED");
    SEND_CMD(c, "EXEC");
    expect_resp(c, "-EXECABORT Transaction discarded because of previous errors.");
    SEND_CMD(c, "MULTI");
    expect_resp(c, "+OK");
    SEND_CMD(c, "DIVVY.HIT");
    expect_resp(c, "-ERR wrong number of arguments for 'DIVVY.HIT' command");
    SEND_CMD(c, "EXEC");
    expect_resp(c, "-EXECABORT Transaction discarded because of previous errors.");
    SEND_CMD(c, "MULTI");
    expect_resp(c, "+OK");
    SEND_CMD(c, "MULTI");
    expect_resp(c, "-ERR Command not allowed inside a transaction");
    SEND_CMD(c, "WATCH", "k");
    expect_resp(c, "-ERR Command not allowed inside a transaction");
    SEND_CMD(c, "EXEC");
    expect_resp(c, "-EXECABORT Transaction discarded because of previous errors.");
    /* DISCARD drops the queue. */
    SEND_CMD(c, "MULTI");
    expect_resp(c, "+OK");
    SEND_CMD(c, "DIVVY.HIT", "app", "m");
    expect_resp(c, "+QUEUED");
    SEND_CMD(c, "DISCARD");
    expect_resp(c, "+OK");
    SEND_CMD(c, "DIVVY.PEEK", "app", "m");
    expect_resp(c, "*4 :1 :2 :60 $r1");
    /* An empty transaction. */
    SEND_CMD(c, "MULTI");
    expect_resp(c, "+OK");
    SEND_CMD(c, "EXEC");
    expect_resp(c, "*0");
    harness_close(c);
    harness_free(d);
}

/* An unprivileged peer's queue: at most 1024 commands, at most
 * server.max_output_bytes bytes; over either, the EXEC aborts. */
static void test_resp_multi_bound(void **state)
{
    static const char conf[] = "server = { max_output_bytes = 16384; };\n" RULES;
    struct harness_daemon *d = resp_start(conf);
    struct harness_conn *c;
    char *buf = harness_scratch(64 * 1024), arg[3001];
    size_t n = 0;

    (void)state;
    CHECK(harness_connect_tcp(d->resp_port, &c));
    n += resp_cmd(buf + n, 64 * 1024 - n, (const char *const[]){ "MULTI", NULL });
    for (int i = 0; i < 1025; i++)
        n += resp_cmd(buf + n, 64 * 1024 - n, (const char *const[]){ "PING", NULL });
    n += resp_cmd(buf + n, 64 * 1024 - n, (const char *const[]){ "EXEC", NULL });
    CHECK(harness_send(c, buf, n));
    expect_resp(c, "+OK");
    for (int i = 0; i < 1024; i++)
        expect_resp(c, "+QUEUED");
    expect_resp_prefix(c, "-ERR busy a transaction holds at most 1024 commands");
    expect_resp(c, "-EXECABORT Transaction discarded because of previous errors.");
    SEND_CMD(c, "PING");
    expect_resp(c, "+PONG");

    /* 3 KB a command: the sixth passes 16 KiB. */
    memset(arg, 'x', sizeof(arg) - 1);
    arg[sizeof(arg) - 1] = '\0';
    SEND_CMD(c, "MULTI");
    expect_resp(c, "+OK");
    for (int i = 0; i < 5; i++) {
        SEND_CMD(c, "ECHO", arg);
        expect_resp(c, "+QUEUED");
    }
    SEND_CMD(c, "ECHO", arg);
    expect_resp_prefix(c, "-ERR busy transaction queue over its share of the output budget");
    SEND_CMD(c, "ECHO", arg);
    expect_resp(c, "+QUEUED");
    SEND_CMD(c, "EXEC");
    expect_resp(c, "-EXECABORT Transaction discarded because of previous errors.");
    /* Within the bound, it runs. */
    SEND_CMD(c, "MULTI");
    expect_resp(c, "+OK");
    SEND_CMD(c, "ECHO", "a");
    expect_resp(c, "+QUEUED");
    SEND_CMD(c, "EXEC");
    expect_resp(c, "*1 $a");
    harness_close(c);
    harness_free(d);
}

/* Hits that wait for Redis keep their place inside EXEC's array. */
static void test_resp_multi_redis(void **state)
{
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    char buf[2048];
    size_t n = 0;

    (void)state;
    d = resp_start_strict(&rs);
    CHECK(harness_connect_unix(d->resp_sock, &c));
    n += resp_cmd(buf + n, sizeof(buf) - n, (const char *const[]){ "MULTI", NULL });
    n += resp_cmd(buf + n, sizeof(buf) - n, (const char *const[]){ "DIVVY.HIT", "app", "o", NULL });
    n += resp_cmd(buf + n, sizeof(buf) - n, (const char *const[]){ "PING", NULL });
    n += resp_cmd(buf + n, sizeof(buf) - n,
                  (const char *const[]){ "DIVVY.TAKE", "1", "app", "o", NULL });
    n += resp_cmd(buf + n, sizeof(buf) - n, (const char *const[]){ "ECHO", "e", NULL });
    n += resp_cmd(buf + n, sizeof(buf) - n, (const char *const[]){ "DIVVY.HIT", "app", "o", NULL });
    n += resp_cmd(buf + n, sizeof(buf) - n, (const char *const[]){ "EXEC", NULL });
    n += resp_cmd(buf + n, sizeof(buf) - n, (const char *const[]){ "PING", NULL });
    CHECK(harness_send(c, buf, n));
    expect_resp(c, "+OK");
    for (int i = 0; i < 5; i++)
        expect_resp(c, "+QUEUED");
    expect_resp(c, "*5 *4 :1 :1 :60 $s1 +PONG *4 :1 :0 :60 $s1 $e *4 :0 :0 :60 $s1");
    expect_resp(c, "+PONG");
    assert_true(redis_int(rs, "DBSIZE") >= 1);
    harness_close(c);
    harness_free(d);
    redis_stop(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resp3, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_auth, harness_setup, resp_teardown),
        cmocka_unit_test_setup_teardown(test_resp_multi, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_multi_bound, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_multi_redis, harness_setup, redis_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
