/* SPDX-License-Identifier: MIT */
/*
 * resp_client: what the RESP tests over raw sockets share (test_resp_*.c):
 * commands written as multibulk arrays and replies, RESP2 or RESP3, read
 * back flattened into one line a test compares as text.
 */
#ifndef DIVVY_RESP_CLIENT_H
#define DIVVY_RESP_CLIENT_H

#include <stddef.h>
#include <sys/types.h>

#include "harness.h"

/*
 * Reads one RESP value and appends it flattened to @out: "+PONG", ":1",
 * "$text" ("$nil"), "-ERR ...", "*2 :1 $x"; RESP3's map "%1 $k :1" (its
 * pairs' values in order), null "_", boolean "#t", double ",1.5".
 */
int resp_read(struct harness_conn *c, char *out, size_t size);

/* Reads one value and asserts it is @want, or starts with @want. */
void expect_resp(struct harness_conn *c, const char *want);
void expect_resp_prefix(struct harness_conn *c, const char *want);

/* divvyd with two workers on @config, with RESP listeners; fails the test
 * when it does not start. */
struct harness_daemon *resp_start(const char *config);

/* Rules with one "strict" rule (its hits wait for Redis): app=* (label s1,
 * 2 a minute), then a default. */
#define RESP_STRICT_RULES                                                                  \
    "{ match = { app = \"*\"; }; label = \"s1\"; actor = \"app\"; store = \"strict\";\n" \
    "  credit_limit = 2; reset_seconds = 60; },\n"                                          \
    "{ default = true; label = \"dflt\"; credit_limit = 5; reset_seconds = 60; }\n"

struct redis_srv;

/* A redis-server (*ret_rs) and a divvyd with one worker and RESP listeners
 * keeping RESP_STRICT_RULES there (on_redis_error closed); fails the test
 * when either does not start.  Stop them with harness_free(), redis_stop(). */
struct harness_daemon *resp_start_strict(struct redis_srv **ret_rs);

/*
 * A test's password file (server.resp_password_file): "pw" in a mkdtemp()
 * directory made on first use, @text written with @mode through a rename;
 * its path.  resp_teardown() removes both, also after a failed assertion.
 */
const char *resp_password_write(const char *text, mode_t mode);

/* cmocka teardown: harness_teardown(), then the password file, if any. */
int resp_teardown(void **state);

/* A command as a multibulk array into @buf: @argv NULL-terminated; its length. */
size_t resp_cmd(char *buf, size_t size, const char *const *argv);

#define SEND_CMD(c, ...)                                                              \
    do {                                                                              \
        char send_b_[4096];                                                           \
        size_t send_n_ = resp_cmd(send_b_, sizeof(send_b_),                           \
                                  (const char *const[]){ __VA_ARGS__, NULL });        \
        CHECK(harness_send((c), send_b_, send_n_));                                   \
    } while (0)

#endif
