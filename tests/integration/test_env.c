/* SPDX-License-Identifier: MIT */
/*
 * Button divvy's environment variables (docs/operations.md): a divvy
 * deployment that sets PORT, REDIS_HOST and REDIS_PORT keeps working when it
 * switches to divvyd.  Real divvyd, real sockets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"

static const char config[] =
    "server = { listen = [\"tcp:127.0.0.1:1\"]; };\n"
    "rules = (\n"
    "  { match = { path = \"/a\"; }; credit_limit = 2; reset_seconds = 60; },\n"
    "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

/* PORT replaces the config's TCP listener (which would fail: port 1). */
static void test_env_port_replaces_tcp_listeners(void **state)
{
    struct harness_opts o = { .config_text = config, .no_tcp = true };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;
    char port[16], reply[HARNESS_LINE];
    int p = harness_free_port(SOCK_STREAM);

    (void)state;
    snprintf(port, sizeof(port), "%d", p);
    setenv("PORT", port, 1);
    setenv("REDIS_HOST", "127.0.0.1", 1);
    setenv("REDIS_PORT", "6390", 1);
    assert_int_equal(harness_start(&o, &d), 0);
    unsetenv("PORT");
    unsetenv("REDIS_HOST");
    unsetenv("REDIS_PORT");
    assert_int_equal(harness_connect_tcp(p, &c), 0);
    assert_true(harness_cmd(c, "HIT path=/a", reply, sizeof(reply)) > 0);
    assert_string_equal(reply, "OK true 1 60");
    assert_int_equal(harness_log_contains(d, "PORT=" ), 1);
    assert_int_equal(harness_log_contains(d, "REDIS_PORT=6390 from the environment"), 1);
    harness_close(c);
}

/* A bad PORT stops divvyd with a clear message instead of being ignored. */
static void test_env_bad_port_is_an_error(void **state)
{
    struct harness_opts o = { .config_text = config, .no_tcp = true };
    struct harness_daemon *d = NULL;

    (void)state;
    setenv("PORT", "80x", 1);
    assert_true(harness_start(&o, &d) < 0);
    unsetenv("PORT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_env_port_replaces_tcp_listeners, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_env_bad_port_is_an_error, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("env", tests, NULL, NULL);
}
