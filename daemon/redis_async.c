/* SPDX-License-Identifier: MIT */
/* redis_async: shared steps of divvyd's asynchronous hiredis connections. */
#include <stdio.h>
#include <sys/time.h>

#include <hiredis/adapters/libevent.h>

#include "redis_async.h"

redisAsyncContext *redis_async_open(const char *path, const char *host, unsigned port,
                                    struct event_base *base, void *data,
                                    redisConnectCallback *on_connect,
                                    redisDisconnectCallback *on_disconnect, char *why,
                                    size_t why_size)
{
    redisAsyncContext *ac = path ? redisAsyncConnectUnix(path)
                                 : redisAsyncConnect(host, (int)port);

    if (!ac) {
        snprintf(why, why_size, "cannot connect: out of memory");
        return NULL;
    }
    if (ac->err) {
        snprintf(why, why_size, "cannot connect: %s", ac->errstr);
        redisAsyncFree(ac);
        return NULL;
    }
    if (redisLibeventAttach(ac, base) != REDIS_OK) {
        snprintf(why, why_size, "cannot attach to the event loop");
        redisAsyncFree(ac);
        return NULL;
    }
    ac->data = data;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    return ac;
}

void redis_timer_ms(struct event *ev, uint64_t ms)
{
    struct timeval tv = { .tv_sec = (time_t)(ms / 1000),
                          .tv_usec = (suseconds_t)(ms % 1000) * 1000 };

    evtimer_add(ev, &tv);
}

void redis_backoff(struct event *ev, unsigned *backoff_ms)
{
    if (*backoff_ms < REDIS_BACKOFF_MIN_MS)
        *backoff_ms = REDIS_BACKOFF_MIN_MS;
    redis_timer_ms(ev, *backoff_ms);
    *backoff_ms = *backoff_ms * 2 > REDIS_BACKOFF_MAX_MS ? REDIS_BACKOFF_MAX_MS
                                                        : *backoff_ms * 2;
}
