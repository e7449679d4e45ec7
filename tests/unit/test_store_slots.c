/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/store_slots.c (docs/redis.md "Cluster"): the
 * CRC16/XMODEM of the cluster specification, the slot of a key by its hash
 * tag, the redirections a node answers, and CLUSTER SLOTS's map.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>

#include "daemon/store_slots.h"

static void test_store_slots_crc16(void **state)
{
    (void)state;
    /* The cluster specification's check value. */
    assert_int_equal(store_slots_crc16("123456789", 9), 0x31C3);
    assert_int_equal(store_slots_crc16("", 0), 0);
}

static void test_store_slots_key_slot(void **state)
{
    (void)state;
    /* Values Redis's CLUSTER KEYSLOT gives. */
    assert_int_equal(store_slots_key_slot("foo", 3), 12182);
    assert_int_equal(store_slots_key_slot("bar", 3), 5061);
    /* The hash tag decides: divvy's keys carry {rule:actor}. */
    assert_int_equal(store_slots_key_slot("p:divvy:{api:alice}", 19),
                     store_slots_key_slot("api:alice", 9));
    assert_int_equal(store_slots_key_slot("{user1000}.following", 21),
                     store_slots_key_slot("{user1000}.followers", 21));
    /* An empty tag, or none closed: the whole key. */
    assert_int_equal(store_slots_key_slot("{}x", 3), store_slots_crc16("{}x", 3) % 16384);
    assert_int_equal(store_slots_key_slot("{abc", 4), store_slots_crc16("{abc", 4) % 16384);
    /* The first '{' and the next '}'. */
    assert_int_equal(store_slots_key_slot("{a}{b}", 6), store_slots_key_slot("a", 1));
}

static void test_store_slots_redirect(void **state)
{
    struct store_redirect_to to;

    (void)state;
    assert_int_equal(store_slots_redirect("MOVED 3999 127.0.0.1:6381", &to),
                     STORE_REDIRECT_MOVED);
    assert_int_equal(to.slot, 3999);
    assert_string_equal(to.host, "127.0.0.1");
    assert_int_equal(to.port, 6381);
    assert_int_equal(store_slots_redirect("ASK 16383 [::1]:7000", &to), STORE_REDIRECT_ASK);
    assert_int_equal(to.slot, 16383);
    assert_string_equal(to.host, "::1");
    assert_int_equal(to.port, 7000);
    assert_int_equal(store_slots_redirect("MOVED 12 ::1:7000", &to), STORE_REDIRECT_MOVED);
    assert_string_equal(to.host, "::1");
    assert_int_equal(store_slots_redirect("TRYAGAIN Multiple keys request during rehashing "
                                          "of slot", &to), STORE_REDIRECT_TRYAGAIN);
    assert_int_equal(store_slots_redirect("CLUSTERDOWN The cluster is down", &to),
                     STORE_REDIRECT_DOWN);
    /* Not redirections: errors like any other. */
    assert_int_equal(store_slots_redirect("MOVED 16384 127.0.0.1:6381", &to),
                     STORE_REDIRECT_NONE);
    assert_int_equal(store_slots_redirect("MOVED x 127.0.0.1:6381", &to), STORE_REDIRECT_NONE);
    assert_int_equal(store_slots_redirect("MOVED 1 127.0.0.1", &to), STORE_REDIRECT_NONE);
    assert_int_equal(store_slots_redirect("MOVED 1 127.0.0.1:0", &to), STORE_REDIRECT_NONE);
    assert_int_equal(store_slots_redirect("ASK 1 127.0.0.1:99999", &to), STORE_REDIRECT_NONE);
    assert_int_equal(store_slots_redirect("NOSCRIPT No matching script", &to),
                     STORE_REDIRECT_NONE);
    assert_int_equal(store_slots_redirect("ERR MOVED", &to), STORE_REDIRECT_NONE);
    assert_int_equal(store_slots_redirect("TRYAGAINX", &to), STORE_REDIRECT_NONE);
}

/* A reply tree built by hand, as hiredis would hand it. */
static redisReply *mk(int type)
{
    redisReply *r = calloc(1, sizeof(*r));

    assert_non_null(r);
    r->type = type;
    return r;
}

static redisReply *mk_int(long long v)
{
    redisReply *r = mk(REDIS_REPLY_INTEGER);

    r->integer = v;
    return r;
}

static redisReply *mk_str(const char *s)
{
    redisReply *r = mk(REDIS_REPLY_STRING);

    r->str = strdup(s);
    r->len = strlen(s);
    return r;
}

static redisReply *mk_arr(size_t n, ...)
{
    redisReply *r = mk(REDIS_REPLY_ARRAY);
    va_list ap;

    r->elements = n;
    r->element = calloc(n ? n : 1, sizeof(*r->element));
    va_start(ap, n);
    for (size_t i = 0; i < n; i++)
        r->element[i] = va_arg(ap, redisReply *);
    va_end(ap);
    return r;
}

struct seen {
    unsigned n, start[4], end[4], port[4];
    char host[4][64];
};

static int collect(void *arg, unsigned start, unsigned end, const char *host, unsigned port)
{
    struct seen *s = arg;

    if (s->n >= 4)
        return -ENOSPC;
    s->start[s->n] = start;
    s->end[s->n] = end;
    s->port[s->n] = port;
    strncpy(s->host[s->n], host, sizeof(s->host[0]) - 1);
    s->n++;
    return 0;
}

static void test_store_slots_parse(void **state)
{
    struct seen s = { 0 };
    redisReply *r;

    (void)state;
    r = mk_arr(2,
               mk_arr(4, mk_int(0), mk_int(5460),
                      mk_arr(3, mk_str("127.0.0.1"), mk_int(7000), mk_str("id0")),
                      mk_arr(3, mk_str("127.0.0.1"), mk_int(7003), mk_str("id3"))),
               mk_arr(3, mk_int(5461), mk_int(16383),
                      mk_arr(2, mk_str(""), mk_int(7001))));
    assert_int_equal(store_slots_parse(r, collect, &s), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.start[0], 0);
    assert_int_equal(s.end[0], 5460);
    assert_string_equal(s.host[0], "127.0.0.1");
    assert_int_equal(s.port[0], 7000);
    assert_int_equal(s.start[1], 5461);
    assert_int_equal(s.end[1], 16383);
    assert_string_equal(s.host[1], "");
    assert_int_equal(s.port[1], 7001);
    freeReplyObject(r);
    /* One bad range refuses the whole answer before any call. */
    memset(&s, 0, sizeof(s));
    r = mk_arr(2, mk_arr(3, mk_int(0), mk_int(10), mk_arr(2, mk_str("h"), mk_int(1))),
               mk_arr(3, mk_int(11), mk_int(16384), mk_arr(2, mk_str("h"), mk_int(2))));
    assert_int_equal(store_slots_parse(r, collect, &s), -EPROTO);
    assert_int_equal(s.n, 0);
    freeReplyObject(r);
    r = mk_arr(1, mk_arr(3, mk_int(9), mk_int(3), mk_arr(2, mk_str("h"), mk_int(1))));
    assert_int_equal(store_slots_parse(r, collect, &s), -EPROTO);
    freeReplyObject(r);
    r = mk_arr(1, mk_arr(3, mk_int(0), mk_int(3), mk_arr(2, mk_str("h"), mk_int(0))));
    assert_int_equal(store_slots_parse(r, collect, &s), -EPROTO);
    freeReplyObject(r);
    r = mk_str("ERR This instance has cluster support disabled");
    assert_int_equal(store_slots_parse(r, collect, &s), -EPROTO);
    freeReplyObject(r);
    assert_int_equal(store_slots_parse(NULL, collect, &s), -EPROTO);
    /* An empty map (no slot assigned yet) is a map. */
    r = mk_arr(0);
    assert_int_equal(store_slots_parse(r, collect, &s), 0);
    freeReplyObject(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_slots_crc16),
        cmocka_unit_test(test_store_slots_key_slot),
        cmocka_unit_test(test_store_slots_redirect),
        cmocka_unit_test(test_store_slots_parse),
    };

    return cmocka_run_group_tests_name("store_slots", tests, NULL, NULL);
}
