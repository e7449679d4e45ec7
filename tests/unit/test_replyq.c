/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/replyq.c, the reply-order queue: answers leave in
 * the order their slots were taken, whatever order they are answered in,
 * each followed by the replies made behind it (its trailer); the counts a
 * connection's budget reads (n, n_waiting, bytes, held) follow; clearing
 * gives every slot back.
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

#include "daemon/replyq.h"

/* Everything that leaves @q now, as the transport writes it. */
static void drain(struct replyq *q, struct replyq_pool *pool, char *out, size_t size)
{
    struct replyq_slot *s;
    size_t len = strlen(out);

    while ((s = replyq_pop(q)) != NULL) {
        len += (size_t)snprintf(out + len, size - len, "%.*s%.*s%.*s", (int)s->reply_len,
                                s->reply, (int)s->text_len, s->text ? s->text : "",
                                (int)s->trailer_len, s->trailer ? s->trailer : "");
        replyq_put(pool, s);
    }
}

static void answer(struct replyq *q, struct replyq_slot *s, const char *reply)
{
    s->reply_len = strlen(reply);
    memcpy(s->reply, reply, s->reply_len);
    replyq_done(q, s, NULL, 0);
}

static void test_replyq_request_order(void **state)
{
    struct replyq q = { 0 };
    struct replyq_pool pool = { 0 };
    struct replyq_slot *a, *b;
    char out[256] = "";
    char *text = strdup("LONG;");

    (void)state;
    assert_non_null(text);
    a = replyq_push(&q, &pool, NULL, 100);
    assert_int_equal(replyq_trail(&q, "p1;", 3), 0);
    b = replyq_push(&q, &pool, NULL, 100);
    assert_int_equal(replyq_trail(&q, "p2;", 3), 0);
    assert_int_equal(q.n, 2);
    assert_int_equal(q.n_waiting, 2);
    assert_int_equal(q.bytes, 6);
    assert_int_equal(q.held, 200);
    /* The second answered first: nothing leaves before the first. */
    b->reply_len = 2;
    memcpy(b->reply, "b;", 2);
    replyq_done(&q, b, text, 5);
    drain(&q, &pool, out, sizeof(out));
    assert_string_equal(out, "");
    assert_int_equal(q.n_waiting, 1);
    answer(&q, a, "a;");
    drain(&q, &pool, out, sizeof(out));
    assert_string_equal(out, "a;p1;b;LONG;p2;");
    assert_int_equal(q.n, 0);
    assert_int_equal(q.n_waiting, 0);
    assert_int_equal(q.bytes, 0);
    assert_int_equal(q.held, 0);
    assert_null(q.head);
    assert_null(q.tail);
    replyq_pool_free(&pool);
}

static void test_replyq_clear(void **state)
{
    struct replyq q = { 0 };
    struct replyq_pool pool = { 0 };

    (void)state;
    assert_non_null(replyq_push(&q, &pool, NULL, 1));
    assert_int_equal(replyq_trail(&q, "x", 1), 0);
    assert_non_null(replyq_push(&q, &pool, NULL, 1));
    replyq_clear(&q, &pool);
    assert_null(q.head);
    assert_int_equal(q.n, 0);
    assert_int_equal(q.bytes, 0);
    assert_int_equal(pool.n_free, 2);
    replyq_pool_free(&pool);
    assert_int_equal(pool.n_free, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replyq_request_order),
        cmocka_unit_test(test_replyq_clear),
    };

    return cmocka_run_group_tests_name("replyq", tests, NULL, NULL);
}
