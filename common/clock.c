/* SPDX-License-Identifier: MIT */
/* clock: monotonic milliseconds for counters, Unix time where clients count in it
 * (see clock.h). */
#include <time.h>

#include "clock.h"

static uint64_t read_ns(clockid_t id)
{
    struct timespec ts;

    if (clock_gettime(id, &ts) < 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t clock_now_ms(void)
{
    return read_ns(CLOCK_MONOTONIC) / 1000000u;
}

uint64_t clock_coarse_ms(void)
{
    return read_ns(CLOCK_MONOTONIC_COARSE) / 1000000u;
}

uint64_t clock_now_ns(void)
{
    return read_ns(CLOCK_MONOTONIC);
}

uint64_t clock_unix_ns(void)
{
    return read_ns(CLOCK_REALTIME);
}
