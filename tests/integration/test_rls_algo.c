/* SPDX-License-Identifier: MIT */
/*
 * Integration (real divvyd, Envoy's RLS through grpc-js): the continuous
 * algorithms decided for RLS descriptors by the same engine (docs/rules.md
 * "Algorithms"), in one ShouldRateLimit call so that no refill can come
 * between its descriptors: a gcra rule (redis-cell's README: 16, 30 a
 * minute) takes 16 at once and refuses the 17th, with current_limit 30 per
 * MINUTE (the rate) and duration_until_reset the time until full again
 * (32 s); a continuous bucket refilling every 1500 ms has no whole unit (no
 * current_limit) and a sub-second wait reported as 1 s, never 0.  Skipped
 * (77) only when the gRPC client cannot be installed.
 */
#include <jansson.h>

#include "harness.h"
#include "harness_grpc.h"

#define RULES                                                                                 \
    "rules = (\n"                                                                             \
    "  { match = { domain = \"algo\"; user = \"*\"; }; label = \"gcra\"; actor = \"user\";\n" \
    "    credit_limit = 16; algorithm = \"gcra\"; refill_amount = 30; refill_seconds = 60; },\n" \
    "  { match = { domain = \"algo\"; key = \"half\"; }; label = \"half\"; credit_limit = 10;\n" \
    "    algorithm = \"token_bucket\"; refill = \"continuous\"; refill_amount = 5;\n"        \
    "    refill_ms = 1500; },\n"                                                              \
    "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"                           \
    ");\n"

static void test_rls_algo_gcra_and_continuous(void **state)
{
    struct harness_rls *r;
    json_t *res, *resp;

    (void)state;
    harness_grpc_need();
    r = harness_rls_start(RULES);
    res = harness_grpc_run(r->tcp, "{\"calls\":[{\"domain\":\"algo\",\"descriptors\":["
                           "{\"entries\":[{\"key\":\"user\",\"value\":\"al\"}],"
                           "\"hits_addend\":{\"value\":\"16\"}},"
                           "{\"entries\":[{\"key\":\"user\",\"value\":\"al\"}]},"
                           "{\"entries\":[{\"key\":\"key\",\"value\":\"half\"}]}]}]}");
    resp = harness_grpc_resp(res, 0);
    harness_grpc_overall(resp, "OVER_LIMIT", 3);
    harness_grpc_status(resp, 0, "OK", "gcra", 30, "MINUTE", 0, 31, 32);
    harness_grpc_status(resp, 1, "OVER_LIMIT", "gcra", 30, "MINUTE", 0, 31, 32);
    harness_grpc_status(resp, 2, "OK", NULL, 0, NULL, 9, 1, 1);
    json_decref(res);
    harness_rls_stop(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rls_algo_gcra_and_continuous, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("rls_algo", tests, harness_grpc_setup,
                                       harness_grpc_teardown);
}
