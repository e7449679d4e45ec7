/* SPDX-License-Identifier: MIT */
/*
 * harness_grpc: what the RLS integration tests (test_rls.c,
 * test_rls_envoy.c) share (harness_grpc.c): the real gRPC client
 * (@grpc/grpc-js with @grpc/proto-loader, tests/rls/rls_client.js, loading
 * divvy's proto/ files), installed by tests/rls/npm_ensure.sh into a cache
 * outside the repository in the group setup (a test SKIPs, saying so, only
 * when npm or its registry is unreachable); node children run with that
 * cache as NODE_PATH; divvyd started with an rls:tcp: and an rls:unix:
 * listener; Envoy's answers checked field by field.  Main thread only.
 */
#ifndef DIVVY_HARNESS_GRPC_H
#define DIVVY_HARNESS_GRPC_H

#include <sys/types.h>

#include <jansson.h>

#include "harness.h"

/* The group's temporary directory (harness_grpc_setup()). */
extern char harness_grpc_tmp[HARNESS_PATH];

/* cmocka group setup/teardown: the temporary directory and the client. */
int harness_grpc_setup(void **state);
int harness_grpc_teardown(void **state);

/* skip()s the test when the gRPC client is unavailable. */
void harness_grpc_need(void);

/* Starts `node ARGV...` (@argv[0] is "node") with stdin from @in (NULL:
 * /dev/null) and stdout into @out; *ret_pid for harness_reap(). */
void harness_grpc_spawn(const char *in, const char *out, const char *const *argv,
                        pid_t *ret_pid);

/* Runs rls_client.js on @job against @addr (grpc-js's address); its result
 * array: per call { "ok": true, "resp": ... } or { "ok": false, "code": N,
 * "details": "..." }. */
json_t *harness_grpc_run(const char *addr, const char *job);

/* Call @i's response, or a failure naming it. */
json_t *harness_grpc_resp(json_t *res, size_t i);

/* @o's string member @k, "" when absent. */
const char *harness_grpc_str(json_t *o, const char *k);

/* Status @i of @resp is exactly this (Envoy's fields, proto-loader's JSON):
 * @name NULL for no current_limit, @reset_max 0 for no duration_until_reset. */
void harness_grpc_status(json_t *resp, size_t i, const char *code, const char *name,
                         long long per_unit, const char *unit, long long remaining,
                         long long reset_min, long long reset_max);

/* @resp's overall_code is @code, with @n statuses. */
void harness_grpc_overall(json_t *resp, const char *code, size_t n);

/* divvyd with an rls:tcp: and an rls:unix: listener. */
struct harness_rls {
    struct harness_daemon *d;
    int port;
    char tcp[64], unix_sock[HARNESS_PATH + 16];         /* grpc-js addresses */
    char lis_tcp[80], lis_unix[HARNESS_PATH + 32];      /* --listen */
};

/* Starts divvyd on @conf (config text) with both listeners. */
struct harness_rls *harness_rls_start(const char *conf);

/* Stops divvyd; it must exit 0 (an ASan report or a crash would not). */
void harness_rls_stop(struct harness_rls *r);

#endif
