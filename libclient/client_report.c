/* SPDX-License-Identifier: MIT */
/*
 * client_report: a handle's batch of REPORT lines (client_report.h,
 * docs/client.md "Reported decisions").  Each decision is formatted once,
 * straight into the batch (proto_fmt_report(), the codec divvyd parses it
 * with); a batch is whole lines, so one send() of it leaves the stream
 * whole whether it goes through or not (a short write closes the
 * connection: client_conn_hint()).  No allocation, no system call but that
 * send(), which never waits.
 */
#include <string.h>

#include "client_report.h"

void client_report_flush(struct client_report *rp)
{
    if (rp->n == 0)
        return;
    if (client_conn_hint(rp->conn, rp->buf, rp->len) == 0)
        rp->sent += rp->n;
    else
        rp->dropped += rp->n;
    rp->len = 0;
    rp->n = 0;
}

void client_report_tick(struct client_report *rp, uint64_t now)
{
    if (rp->n && now - rp->oldest_ms >= CLIENT_REPORT_AGE_MS)
        client_report_flush(rp);
}

void client_report_add(struct client_report *rp, const struct proto_report *r, uint64_t n,
                       const struct proto_kv *kv, unsigned n_kv)
{
    int m;

    /* The clock is monotonic, but a report's time is the caller's: never
     * let a batch wait on a time from before its oldest. */
    if (rp->n && (r->mono_ms < rp->oldest_ms || r->mono_ms - rp->oldest_ms >=
                                                    CLIENT_REPORT_AGE_MS))
        client_report_flush(rp);
    m = proto_fmt_report(rp->buf + rp->len, sizeof(rp->buf) - rp->len, r, n, kv, n_kv);
    if (m < 0 && rp->n) {
        client_report_flush(rp);
        m = proto_fmt_report(rp->buf, sizeof(rp->buf), r, n, kv, n_kv);
    }
    if (m < 0) {
        rp->dropped++;                  /* longer than a protocol line: divvyd would refuse it */
        return;
    }
    if (rp->n == 0)
        rp->oldest_ms = r->mono_ms;
    rp->len += (size_t)m;
    if (++rp->n >= CLIENT_REPORT_MAX)
        client_report_flush(rp);
}
