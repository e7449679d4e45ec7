/* SPDX-License-Identifier: MIT */
/*
 * Integration (real redis-server, real divvyd): one host's lease rule
 * answers serial hits in order.  A counter of limit 5 hit 8 times, one hit
 * at a time, must answer allowed 5 times, then refused 3 times: never a
 * refusal before an allowed hit.  divvyd used to refuse one now and then
 * (about one counter in 20) and allow the next: a hit that found a refill
 * in flight asked Redis directly, Redis applied the refill first, which took
 * the pool's last credit into this host's lease, and refused the ask; the
 * next hit spent the lease.  An ask Redis refuses is now tried once more on
 * the lease (docs/redis.md "lease").  Found by test_dlog_replay, whose
 * replay counts in request order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness_redis.h"

#define COUNTERS    100
#define HITS        8
#define LIMIT       5

static const char rules_text[] =
    "{ match = { app = \"lease\"; }; label = \"lease\"; actor = \"ip\"; credit_limit = 5;\n"
    "  reset_seconds = 3600; store = \"lease\"; },\n"
    "{ default = true; credit_limit = 0; reset_seconds = 0; }";

static void test_lease_serial_hits_in_order(void **state)
{
    struct redis_srv *rs = NULL;
    struct harness_daemon *d;
    struct harness_conn *c = NULL;
    char *conf;
    unsigned out_of_order = 0;

    (void)state;
    CHECK(redis_start(&rs));
    conf = redis_config(rs, "local", "closed", 2000, "", rules_text);
    assert_non_null(conf);
    d = redis_divvyd(conf, 1);
    CHECK(harness_connect(d, HARNESS_TCP, &c));
    for (unsigned k = 0; k < COUNTERS; k++) {
        char seq[HITS + 1];

        for (unsigned i = 0; i < HITS; i++) {
            char req[96], reply[256];
            long long credit, secs;
            bool allowed;

            snprintf(req, sizeof(req), "HIT app=lease ip=10.1.%u.%u\n", k / 250, k % 250);
            CHECK(harness_cmd(c, req, reply, sizeof(reply)));
            if (harness_parse_ok(reply, &allowed, &credit, &secs) < 0)
                fail_msg("%s -> %s", req, reply);
            seq[i] = allowed ? 'a' : 'r';
        }
        seq[HITS] = '\0';
        if (strcmp(seq, "aaaaarrr") != 0 && !out_of_order++)
            fprintf(stderr, "counter %u answered %s\n", k, seq);
    }
    if (out_of_order)
        fail_msg("%u of %d counters did not answer %d allowed then refused", out_of_order,
                 COUNTERS, LIMIT);
    harness_close(c);
    redis_divvyd_stop(d);
    free(conf);
    redis_stop(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lease_serial_hits_in_order, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_lease_order", tests, NULL, NULL);
}
