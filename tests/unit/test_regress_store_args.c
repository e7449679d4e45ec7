/* SPDX-License-Identifier: MIT */
/*
 * Regression test for a stack overflow found by tests/fuzz/fuzz_redis_reply.c
 * (input tests/fuzz/corpus/redis_reply/regress-store-args): store_eval()
 * accepts an @op plus STORE_ARGS_MAX numbers, but req_send() built the
 * EVALSHA command in arrays of 4 + STORE_ARGS_MAX entries, one short of
 * "EVALSHA sha 1 key op" + STORE_ARGS_MAX, so the last number was written
 * past both arrays.  Here a fake Redis on a Unix socket reads the command
 * and checks every argument arrived; ASan (make asan) sees the overflow.
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

static void test_regress_store_eval_op_and_max_args(void **state)
{
    char dir[] = "/tmp/divvy-regress-store.XXXXXX", path[96];
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct store_opts o = { .unix_socket = path, .timeout_ms = 1000 };
    int64_t args[STORE_ARGS_MAX];
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

    for (int i = 0; i < STORE_ARGS_MAX; i++)
        args[i] = 100 + i;
    assert_int_equal(store_eval(sc, STORE_SCRIPT_BUCKET, "key", 3, "take", args,
                                STORE_ARGS_MAX, clock_now_ms() + 1000, cb_count, &calls), 0);
    cmd = read_evalsha(base, fd);
    assert_non_null(cmd);
    assert_int_equal(cmd->elements, 5 + STORE_ARGS_MAX);
    assert_string_equal(cmd->element[1]->str, store_script_sha(STORE_SCRIPT_BUCKET));
    assert_string_equal(cmd->element[2]->str, "1");
    assert_string_equal(cmd->element[3]->str, "key");
    assert_string_equal(cmd->element[4]->str, "take");
    for (int i = 0; i < STORE_ARGS_MAX; i++)
        assert_int_equal(strtoll(cmd->element[5 + i]->str, NULL, 10), 100 + i);
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
        cmocka_unit_test(test_regress_store_eval_op_and_max_args),
    };

    log_init(LOG_TARGET_STDERR, false);
    return cmocka_run_group_tests_name("regress_store_args", tests, NULL, NULL);
}
