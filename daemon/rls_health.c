/* SPDX-License-Identifier: MIT */
/*
 * rls_health: gRPC health checking (grpc.health.v1.Health, gRPC's
 * doc/health-checking.md) on the RLS listener, so Envoy's grpc_health_check
 * and Kubernetes' gRPC probes can watch divvyd (docs/rls.md "Health").
 * rls_stream.c routes a call here by its :path (rls_health_route()).
 *
 * Check answers SERVING while divvyd serves and NOT_SERVING once it is
 * stopping (SIGTERM/SIGINT, notify_is_stopping(), or this worker's drain)
 * for the service names "" (the server) and
 * "envoy.service.ratelimit.v3.RateLimitService"; any other name is the
 * call's NOT_FOUND, as the spec says.  Watch is answered UNIMPLEMENTED,
 * which the spec tells clients to take as "not supported, do not retry":
 * a stream held open per watcher is state a peer could multiply, and
 * every prober divvy knows of uses Check.  List is not served either.
 *
 * The two messages are tiny, so they are read (rls_msg_health_service())
 * and written (here) by hand, in protobuf's wire format:
 * HealthCheckRequest { string service = 1; }, HealthCheckResponse
 * { ServingStatus status = 1; } with UNKNOWN 0, SERVING 1, NOT_SERVING 2.  What a peer can send is bounded before it
 * gets here (one message of at most RLS_MSG_MAX bytes, rls_stream.c), and
 * a Check costs no allocation beyond its 7-byte answer: a flood of them
 * is a flood of streams, bounded like any other (docs/rls.md "Limits").
 */
#include <stdlib.h>
#include <string.h>

#include "notify.h"
#include "rls_int.h"
#include "rls_msg.h"
#include "worker_int.h"

#define HEALTH_PREFIX       "/grpc.health.v1.Health/"
#define HEALTH_RLS_SERVICE  "envoy.service.ratelimit.v3.RateLimitService"
#define HEALTH_SERVING      1
#define HEALTH_NOT_SERVING  2

enum rls_route rls_health_route(const uint8_t *path, size_t len)
{
    size_t n = strlen(HEALTH_PREFIX);

    if (len < n || memcmp(path, HEALTH_PREFIX, n) != 0)
        return RLS_ROUTE_NONE;
    if (len - n == 5 && memcmp(path + n, "Check", 5) == 0)
        return RLS_ROUTE_HEALTH_CHECK;
    return RLS_ROUTE_HEALTH_OTHER;
}

void rls_health_call(struct rls_stream *s, const uint8_t *msg, size_t len)
{
    struct worker *w = s->rc->w;
    const uint8_t *name;
    size_t n;
    uint8_t *resp;

    if (s->route != RLS_ROUTE_HEALTH_CHECK) {
        rls_stream_fail(s, RLS_GRPC_UNIMPLEMENTED,
                        "only grpc.health.v1.Health/Check is served (Watch and List are not: "
                        "poll Check)");
        return;
    }
    if (rls_msg_health_service(msg, len, &name, &n) < 0) {
        rls_stream_fail(s, RLS_GRPC_INVALID_ARGUMENT, "not a HealthCheckRequest");
        return;
    }
    /* The name is not echoed: it is the peer's, up to a whole message long. */
    if (n != 0 && !(n == strlen(HEALTH_RLS_SERVICE) && memcmp(name, HEALTH_RLS_SERVICE, n) == 0)) {
        rls_stream_fail(s, RLS_GRPC_NOT_FOUND, "unknown service: divvyd serves \"\" and "
                        HEALTH_RLS_SERVICE);
        return;
    }
    resp = malloc(RLS_GRPC_PREFIX + 2);
    if (!resp) {
        rls_stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    memcpy(resp, "\0\0\0\0\2\x08", 6);
    resp[6] = w->stopping || notify_is_stopping() ? HEALTH_NOT_SERVING : HEALTH_SERVING;
    rls_stream_reply(s, resp, RLS_GRPC_PREFIX + 2);
}
