/* SPDX-License-Identifier: MIT */
/*
 * Unit: daemon/hit_batch.c, hot-key coalescing, against a fake store
 * (store_verdict() and store_verdicts() wrapped): a request alone goes at
 * once; requests behind a script in flight on their key wait and go as one
 * batch, in arrival order, when it answers; each gets its own verdict; other
 * keys, other arguments and earlier deadlines never wait; 64 at most per
 * batch; a failure reaches every request of the batch; nothing overtakes a
 * request queued before it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "daemon/hit_batch.h"

/* ---- the fake store -------------------------------------------------------------- */

#define MAX_SENT 256

struct sent {
    bool batch;
    char key[64];
    enum store_op op;           /* a plain call's */
    uint64_t n;
    char list[STORE_ITEMS_MAX * STORE_ITEM_SIZE + 1];  /* a batch's */
    unsigned count;
    uint64_t deadline;
    store_cb *cb;
    void *arg;
};

static struct sent sent[MAX_SENT];
static unsigned n_sent;
static int send_rc;             /* what the fake returns; < 0 sends nothing */

int __wrap_store_verdict(struct store_conn *sc, const char *key, size_t key_len,
                         const struct store_verdict_args *a, uint64_t deadline_ms, store_cb *cb,
                         void *arg);
int __wrap_store_verdicts(struct store_conn *sc, const char *key, size_t key_len,
                          const struct store_verdict_args *a, const struct store_items *items,
                          uint64_t deadline_ms, store_cb *cb, void *arg);

static struct sent *record(const char *key, size_t key_len, uint64_t deadline, store_cb *cb,
                           void *arg)
{
    struct sent *s = &sent[n_sent++];

    assert_true(n_sent <= MAX_SENT && key_len < sizeof(s->key));
    memset(s, 0, sizeof(*s));
    memcpy(s->key, key, key_len);
    s->deadline = deadline;
    s->cb = cb;
    s->arg = arg;
    return s;
}

int __wrap_store_verdict(struct store_conn *sc, const char *key, size_t key_len,
                         const struct store_verdict_args *a, uint64_t deadline_ms, store_cb *cb,
                         void *arg)
{
    struct sent *s;

    (void)sc;
    if (send_rc < 0)
        return send_rc;
    assert_int_equal(a->script, STORE_SCRIPT_WINDOW);
    s = record(key, key_len, deadline_ms, cb, arg);
    s->op = a->window.op;
    s->n = a->window.n;
    s->count = 1;
    return 0;
}

int __wrap_store_verdicts(struct store_conn *sc, const char *key, size_t key_len,
                          const struct store_verdict_args *a, const struct store_items *items,
                          uint64_t deadline_ms, store_cb *cb, void *arg)
{
    struct sent *s;

    (void)sc;
    (void)a;
    if (send_rc < 0)
        return send_rc;
    assert_true(items->n >= 2 && items->n <= STORE_ITEMS_MAX);
    s = record(key, key_len, deadline_ms, cb, arg);
    s->batch = true;
    s->count = items->n;
    memcpy(s->list, items->text, items->len);
    s->list[items->len] = '\0';
    return 0;
}

/* ---- the requests' callbacks ----------------------------------------------------- */

#define MAX_DONE 256

/* What each request (its id) got, in the order the callbacks ran. */
static struct done {
    unsigned id;
    bool failed;
    bool allowed;
    uint64_t credit;
} done[MAX_DONE];
static unsigned n_done;
static unsigned ids[MAX_DONE];

static void on_done(void *arg, const struct store_reply *rep)
{
    struct done *d = &done[n_done++];

    assert_true(n_done <= MAX_DONE);
    d->id = *(unsigned *)arg;
    d->failed = rep == NULL;
    if (rep) {
        assert_int_equal(rep->kind, STORE_REPLY_VERDICT);
        d->allowed = rep->verdict.allowed;
        d->credit = rep->verdict.credit;
    }
}

static struct store_verdict_args window(enum store_op op, uint64_t n, int64_t limit)
{
    struct store_verdict_args a = { .script = STORE_SCRIPT_WINDOW,
                                    .window = { .op = op, .n = n, .limit = limit,
                                                .reset_ms = 60000 } };

    return a;
}

/* Request @id: @op @n on @key (limit 10 unless @limit), by @deadline. */
static int req(struct hit_batch *b, const char *key, unsigned id, enum store_op op, uint64_t n,
               int64_t limit, uint64_t deadline)
{
    struct store_verdict_args a = window(op, n, limit ? limit : 10);

    ids[id] = id;
    return hit_batch_send(b, key, strlen(key), &a, deadline, on_done, &ids[id]);
}

/* The store answers sent[@i] with one verdict per request: allowed while
 * @credit_from - k >= 0 for its k-th request, credit what is left. */
static void answer(unsigned i, int credit_from)
{
    struct sent *s = &sent[i];
    char resp[8192];
    size_t len = 0;
    redisReader *rd;
    void *reply = NULL;
    struct store_reply rep;

    if (!s->batch) {
        rep.kind = STORE_REPLY_VERDICT;
        rep.verdict.allowed = credit_from > 0;
        rep.verdict.credit = credit_from > 0 ? (uint64_t)credit_from - 1 : 0;
        rep.verdict.reset_ms = 1000;
        s->cb(s->arg, &rep);
        return;
    }
    /* A batch's answer is decoded from the script's own reply shape. */
    len += (size_t)snprintf(resp + len, sizeof(resp) - len, "*%u\r\n:%u\r\n", 1 + 3 * s->count,
                            s->count);
    for (unsigned k = 0; k < s->count; k++) {
        int left = credit_from - (int)k - 1;

        len += (size_t)snprintf(resp + len, sizeof(resp) - len, ":%d\r\n:%d\r\n:1000\r\n",
                                left >= 0, left >= 0 ? left : 0);
    }
    rd = redisReaderCreate();
    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, resp, len), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &reply), REDIS_OK);
    assert_int_equal(store_script_decode(STORE_SCRIPT_WINDOW_MANY, reply, &rep), 0);
    s->cb(s->arg, &rep);
    freeReplyObject(reply);
    redisReaderFree(rd);
}

static struct hit_batch_stats counts;

static int setup(void **state)
{
    struct hit_batch *b = NULL;

    n_sent = n_done = 0;
    send_rc = 0;
    memset(&counts, 0, sizeof(counts));
    assert_int_equal(hit_batch_new((struct store_conn *)&counts, &counts, &b), 0);
    *state = b;
    return 0;
}

static int teardown(void **state)
{
    hit_batch_free(*state);
    return 0;
}

/* ---- tests ------------------------------------------------------------------------- */

/* Alone: sent at once.  Behind it: one batch in arrival order, sent when it
 * answers; each request its own verdict, in order; then the key is cold. */
static void test_hit_batch_waits_behind_flight(void **state)
{
    struct hit_batch *b = *state;

    assert_int_equal(req(b, "k", 0, STORE_TAKE, 1, 0, 1000), 0);
    assert_int_equal(n_sent, 1);
    assert_false(sent[0].batch);
    assert_int_equal(req(b, "k", 1, STORE_TAKE, 4, 0, 1000), 0);
    assert_int_equal(req(b, "k", 2, STORE_PEEK, 1, 0, 1001), 0);
    assert_int_equal(req(b, "k", 3, STORE_DEBIT, 2, 0, 1002), 0);
    assert_int_equal(n_sent, 1);
    assert_int_equal(n_done, 0);
    answer(0, 5);
    /* The batch went before the first request's callback ran. */
    assert_int_equal(n_sent, 2);
    assert_true(sent[1].batch);
    assert_string_equal(sent[1].list, "t4 p1 d2");
    assert_int_equal(sent[1].count, 3);
    assert_int_equal(sent[1].deadline, 1000);
    assert_int_equal(n_done, 1);
    assert_true(done[0].id == 0 && !done[0].failed && done[0].allowed && done[0].credit == 4);
    answer(1, 2);
    assert_int_equal(n_done, 4);
    for (unsigned i = 1; i < 4; i++)
        assert_int_equal(done[i].id, i);
    assert_true(done[1].allowed && done[1].credit == 1);
    assert_true(done[2].allowed && done[2].credit == 0);
    assert_true(!done[3].allowed && done[3].credit == 0);
    /* Nothing in flight: the next request goes at once, alone. */
    assert_int_equal(req(b, "k", 4, STORE_TAKE, 1, 0, 2000), 0);
    assert_int_equal(n_sent, 3);
    assert_false(sent[2].batch);
    assert_int_equal(counts.scripts, 3);
    assert_int_equal(counts.requests, 5);
}

/* Another key, or other arguments (a reload's limit), never wait; one
 * waiting request goes as a plain call. */
static void test_hit_batch_other_keys_and_args(void **state)
{
    struct hit_batch *b = *state;

    assert_int_equal(req(b, "k", 0, STORE_TAKE, 1, 0, 1000), 0);
    assert_int_equal(req(b, "j", 1, STORE_TAKE, 1, 0, 1000), 0);
    assert_int_equal(n_sent, 2);
    assert_string_equal(sent[1].key, "j");
    assert_int_equal(req(b, "k", 2, STORE_TAKE, 2, 0, 1000), 0);
    assert_int_equal(n_sent, 2);
    /* Limit 20: request 2 goes first (alone), then this one. */
    assert_int_equal(req(b, "k", 3, STORE_TAKE, 3, 20, 1000), 0);
    assert_int_equal(n_sent, 4);
    assert_true(!sent[2].batch && sent[2].n == 2);
    assert_true(!sent[3].batch && sent[3].n == 3);
    answer(0, 10);
    answer(1, 10);
    answer(2, 10);
    answer(3, 10);
    assert_int_equal(n_done, 4);
    for (unsigned i = 0; i < 4; i++)
        assert_int_equal(done[i].id, i);
}

/* A request with an earlier deadline than the script in flight does not
 * wait behind it: what waited goes first, then it. */
static void test_hit_batch_earlier_deadline(void **state)
{
    struct hit_batch *b = *state;

    assert_int_equal(req(b, "k", 0, STORE_TAKE, 1, 0, 1000), 0);
    assert_int_equal(req(b, "k", 1, STORE_TAKE, 1, 0, 1100), 0);
    assert_int_equal(req(b, "k", 2, STORE_TAKE, 1, 0, 1200), 0);
    assert_int_equal(n_sent, 1);
    assert_int_equal(req(b, "k", 3, STORE_TAKE, 1, 0, 900), 0);
    assert_int_equal(n_sent, 3);
    assert_true(sent[1].batch && sent[1].count == 2 && sent[1].deadline == 1100);
    assert_true(!sent[2].batch && sent[2].deadline == 900);
    answer(0, 3);
    answer(1, 2);
    answer(2, 0);
    assert_int_equal(n_done, 4);
    for (unsigned i = 0; i < 4; i++)
        assert_int_equal(done[i].id, i);
    assert_true(done[2].allowed && !done[3].allowed);
}

/* 64 at most: the 65th waiting request sends the full batch at once. */
static void test_hit_batch_bounded(void **state)
{
    struct hit_batch *b = *state;

    assert_int_equal(req(b, "k", 0, STORE_TAKE, 1, 0, 1000), 0);
    for (unsigned i = 1; i <= STORE_ITEMS_MAX + 1; i++)
        assert_int_equal(req(b, "k", i, STORE_TAKE, 1, 0, 1000), 0);
    assert_int_equal(n_sent, 2);
    assert_int_equal(sent[1].count, STORE_ITEMS_MAX);
    answer(0, 1000);
    assert_int_equal(n_sent, 3);
    assert_false(sent[2].batch);        /* the 65th, alone */
    answer(1, 1000);
    answer(2, 1000);
    assert_int_equal(n_done, STORE_ITEMS_MAX + 2);
    for (unsigned i = 0; i < n_done; i++)
        assert_int_equal(done[i].id, i);
}

/* A failure reaches every request of the batch; a batch that cannot go
 * stays behind the script ahead of it and the request after it is refused;
 * a lone request refused is not called back and leaves no entry. */
static void test_hit_batch_failure(void **state)
{
    struct hit_batch *b = *state;

    send_rc = -ENOTCONN;
    assert_int_equal(req(b, "k", 0, STORE_TAKE, 1, 0, 1000), -ENOTCONN);
    assert_int_equal(n_done, 0);
    send_rc = 0;
    assert_int_equal(req(b, "k", 1, STORE_TAKE, 1, 0, 1000), 0);
    assert_int_equal(n_sent, 1);
    assert_int_equal(req(b, "k", 2, STORE_TAKE, 1, 0, 1000), 0);
    assert_int_equal(req(b, "k", 3, STORE_TAKE, 1, 0, 1000), 0);
    /* The breaker opens: request 4 (earlier deadline) cannot go after them. */
    send_rc = -ENOTCONN;
    assert_int_equal(req(b, "k", 4, STORE_TAKE, 1, 0, 500), -ENOTCONN);
    sent[0].cb(sent[0].arg, NULL);
    assert_int_equal(n_done, 3);
    for (unsigned i = 0; i < 3; i++)
        assert_true(done[i].id == i + 1 && done[i].failed);
    /* Nothing left waiting: a new request goes alone. */
    send_rc = 0;
    assert_int_equal(req(b, "k", 5, STORE_TAKE, 1, 0, 1000), 0);
    assert_int_equal(n_sent, 2);
    answer(1, 1);
    assert_true(done[3].id == 5 && done[3].allowed);
}

/* hit_batch_flush() (RESET's DEL comes next): the waiting batch goes now. */
static void test_hit_batch_flush(void **state)
{
    struct hit_batch *b = *state;

    assert_int_equal(hit_batch_flush(b, "k", 1), 0);
    assert_int_equal(n_sent, 0);
    assert_int_equal(req(b, "k", 0, STORE_TAKE, 1, 0, 1000), 0);
    assert_int_equal(req(b, "k", 1, STORE_TAKE, 2, 0, 1000), 0);
    assert_int_equal(req(b, "k", 2, STORE_TAKE, 3, 0, 1000), 0);
    assert_int_equal(n_sent, 1);
    assert_int_equal(hit_batch_flush(b, "k", 1), 0);
    assert_int_equal(n_sent, 2);
    assert_string_equal(sent[1].list, "t2 t3");
    /* Refused: it stays, and goes when the script ahead of it answers. */
    assert_int_equal(req(b, "k", 3, STORE_TAKE, 4, 0, 1000), 0);
    send_rc = -ENOTCONN;
    assert_int_equal(hit_batch_flush(b, "k", 1), -ENOTCONN);
    send_rc = 0;
    answer(0, 10);
    assert_int_equal(n_sent, 3);
    assert_false(sent[2].batch);
    answer(1, 10);
    answer(2, 10);
    assert_int_equal(n_done, 4);
    for (unsigned i = 0; i < 4; i++)
        assert_int_equal(done[i].id, i);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hit_batch_waits_behind_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hit_batch_other_keys_and_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hit_batch_earlier_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hit_batch_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hit_batch_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hit_batch_flush, setup, teardown),
    };

    return cmocka_run_group_tests_name("hit_batch", tests, NULL, NULL);
}
