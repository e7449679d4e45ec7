/* SPDX-License-Identifier: MIT */
/*
 * redis_async: what every asynchronous hiredis connection of divvyd does the
 * same way (store.c's master connections, sentinel.c's questions and its
 * +switch-master watch): open and attach to a libevent loop, and arm a
 * timer in milliseconds, with the store's retry backoff.
 */
#ifndef DIVVY_REDIS_ASYNC_H
#define DIVVY_REDIS_ASYNC_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <hiredis/async.h>

#define REDIS_BACKOFF_MIN_MS    50      /* first retry after a failure */
#define REDIS_BACKOFF_MAX_MS    1000    /* doubling up to this */

/*
 * Starts connecting to the Unix socket @path, or else @host:@port, on
 * @base, with @data and the two callbacks set.  NULL on failure, with the
 * reason in @why (nothing is left to free).
 */
redisAsyncContext *redis_async_open(const char *path, const char *host, unsigned port,
                                    struct event_base *base, void *data,
                                    redisConnectCallback *on_connect,
                                    redisDisconnectCallback *on_disconnect, char *why,
                                    size_t why_size);

/* evtimer_add() of @ms milliseconds. */
void redis_timer_ms(struct event *ev, uint64_t ms);

/* Arms @ev after *@backoff_ms (at least REDIS_BACKOFF_MIN_MS) and doubles
 * *@backoff_ms for the next time, up to REDIS_BACKOFF_MAX_MS. */
void redis_backoff(struct event *ev, unsigned *backoff_ms);

#endif
