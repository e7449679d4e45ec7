/* SPDX-License-Identifier: MIT */
/*
 * Regression test for a stack overflow found by tests/fuzz/fuzz_redis_reply.c
 * (input tests/fuzz/corpus/redis_reply/regress-store-args): the untyped
 * store_eval() of the time accepted an @op plus STORE_ARGS_MAX numbers, but
 * req_send() built the EVALSHA command in arrays of 4 + STORE_ARGS_MAX
 * entries, one short of "EVALSHA sha 1 key op" + STORE_ARGS_MAX, so the last
 * number was written past both arrays.  Calls are typed now (store_script.h);
 * here the longest one, lockout's (12 arguments), goes to a fake Redis on a Unix
 * socket that reads the command and checks every argument arrived where the
 * script reads it; ASan (make asan) would see an overflow.
 * The module is daemon code: this binary links it from libdivvyd.a, as
 * divvyd does.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "clock.h"
#include "daemon/log.h"
#include "daemon/addr.h"
#include "daemon/redis_async.h"
#include "daemon/sentinel.h"
#include "daemon/store.h"

static void cb_count(void *arg, const struct store_reply *rep)
{
    (void)rep;
    (*(int *)arg)++;
}

/* Reads from @fd until the command whose first word is EVALSHA is whole. */
static redisReply *read_evalsha(struct event_base *base, int fd)
{
    redisReader *rd = redisReaderCreate();
    uint64_t deadline = clock_now_ms() + 5000;
    redisReply *found = NULL;

    assert_non_null(rd);
    while (!found && clock_now_ms() < deadline) {
        char buf[8192];
        ssize_t n;
        void *cmd;

        event_base_loop(base, EVLOOP_NONBLOCK);
        n = read(fd, buf, sizeof(buf));
        if (n <= 0) {
            usleep(1000);
            continue;
        }
        assert_int_equal(redisReaderFeed(rd, buf, (size_t)n), REDIS_OK);
        while (!found && redisReaderGetReply(rd, &cmd) == REDIS_OK && cmd) {
            redisReply *r = cmd;

            if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                strcmp(r->element[0]->str, "EVALSHA") == 0)
                found = r;
            else
                freeReplyObject(r);
        }
    }
    redisReaderFree(rd);
    return found;
}

static void test_regress_store_longest_call(void **state)
{
    char dir[] = "/tmp/divvy-regress-store.XXXXXX", path[96];
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct store_opts o = { .unix_socket = path, .timeout_ms = 1000 };
    const struct store_verdict_args args = {
        .script = STORE_SCRIPT_LOCKOUT,
        .lockout = { .op = STORE_TAKE, .n = 101,
                     .lim = { .credit_limit = 102, .reset_ms = 103, .unlock_ms = 104,
                              .lock_factor = 105, .lock_max_ms = 106, .remember_ms = 107,
                              .delay_after = 108, .delay_ms = 109, .delay_factor = 110,
                              .delay_max_ms = 111 } } };
    const char *want[STORE_SCRIPT_ARGV_MAX] = { "take", "101", "102", "103", "104", "105",
                                                "106", "107", "108", "109", "110", "111" };
    struct event_base *base;
    struct store_conn *sc = NULL;
    struct store *st = NULL;
    redisReply *cmd;
    int lfd, fd, calls = 0;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/redis.sock", dir);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(lfd >= 0);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(lfd, 4), 0);
    base = event_base_new();
    assert_non_null(base);
    assert_int_equal(store_new(&o, &st), 0);
    store_want(st);
    assert_int_equal(store_conn_new(st, base, &sc), 0);
    fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    assert_true(fd >= 0);

    assert_int_equal(store_verdict(sc, "key", 3, &args, clock_now_ms() + 1000, cb_count, &calls),
                     0);
    cmd = read_evalsha(base, fd);
    assert_non_null(cmd);
    assert_int_equal(cmd->elements, 4 + STORE_SCRIPT_ARGV_MAX);
    assert_string_equal(cmd->element[1]->str, store_script_sha(STORE_SCRIPT_LOCKOUT));
    assert_string_equal(cmd->element[2]->str, "1");
    assert_string_equal(cmd->element[3]->str, "key");
    for (int i = 0; i < STORE_SCRIPT_ARGV_MAX; i++)
        assert_string_equal(cmd->element[4 + i]->str, want[i]);
    freeReplyObject(cmd);

    store_conn_free(sc);
    assert_int_equal(calls, 1);         /* failed at close, exactly once */
    store_free(st);
    event_base_free(base);
    close(fd);
    close(lfd);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regress_store_longest_call),
    };

    log_init(LOG_TARGET_STDERR, false);
    return cmocka_run_group_tests_name("regress_store_args", tests, NULL, NULL);
}
