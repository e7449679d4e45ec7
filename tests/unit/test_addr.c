/* SPDX-License-Identifier: MIT */
/* Unit tests for daemon/addr.c: "HOST:PORT" and "[V6]:PORT" splitting. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "daemon/addr.h"

static void test_addr_splits_v4_v6_and_empty_host(void **state)
{
    const char *host, *port;
    char buf[64];

    (void)state;
    assert_int_equal(addr_split_host_port("127.0.0.1:8321", buf, sizeof(buf), &host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_string_equal(port, "8321");
    assert_int_equal(addr_split_host_port("[::1]:9", buf, sizeof(buf), &host, &port), 0);
    assert_string_equal(host, "::1");
    assert_string_equal(port, "9");
    assert_int_equal(addr_split_host_port(":80", buf, sizeof(buf), &host, &port), 0);
    assert_string_equal(host, "");
    assert_string_equal(port, "80");
}

static void test_addr_rejects_missing_port_and_overflow(void **state)
{
    const char *host, *port;
    char buf[12];

    (void)state;
    assert_int_equal(addr_split_host_port("localhost", buf, sizeof(buf), &host, &port), -EINVAL);
    assert_int_equal(addr_split_host_port("h:", buf, sizeof(buf), &host, &port), -EINVAL);
    assert_int_equal(addr_split_host_port("[::1]9", buf, sizeof(buf), &host, &port), -EINVAL);
    assert_int_equal(addr_split_host_port("[::1:9", buf, sizeof(buf), &host, &port), -EINVAL);
    assert_int_equal(addr_split_host_port("127.0.0.1:8321", buf, sizeof(buf), &host, &port),
                     -ENAMETOOLONG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addr_splits_v4_v6_and_empty_host),
        cmocka_unit_test(test_addr_rejects_missing_port_and_overflow),
    };

    return cmocka_run_group_tests_name("addr", tests, NULL, NULL);
}
