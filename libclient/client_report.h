/* SPDX-License-Identifier: MIT */
/*
 * client_report: the fast path's reports of its own decisions to divvyd
 * (client_report.c, docs/client.md "Reported decisions", docs/protocol.md
 * "REPORT").  While divvyd's control page says the decision log is on,
 * client_fast hands each decision it took in-process to this module, which
 * keeps REPORT lines in a per-handle batch and sends the batch with one
 * send() that never waits: when it is full, when its oldest decision is
 * older than CLIENT_REPORT_AGE_MS (checked on the handle's next call: the
 * library has no thread), when the rules change and at divvy_close().  A
 * batch that cannot be sent at once is dropped and counted.  Sits on
 * client_conn, whose connection it borrows (libclient's layers: divvy ->
 * memo -> fast -> report -> handoff -> conn -> wire -> err).
 */
#ifndef DIVVY_CLIENT_REPORT_H
#define DIVVY_CLIENT_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "client_conn.h"
#include "proto.h"

#define CLIENT_REPORT_BYTES     PROTO_LINE_MAX  /* a batch: one send() of at most this */
#define CLIENT_REPORT_MAX       64              /* decisions in one batch */
#define CLIENT_REPORT_AGE_MS    1000            /* the oldest waits at most this long */

/* A handle's batch.  Set up by its owner (zeroed, then conn). */
struct client_report {
    struct client_conn *conn;   /* the handle's connection (borrowed) */
    size_t len;                 /* bytes of buf in use: whole lines */
    unsigned n;                 /* decisions in buf */
    uint64_t oldest_ms;         /* when the first of them was decided */
    uint64_t sent;              /* decisions sent to divvyd */
    uint64_t dropped;           /* decisions dropped: a send that would have waited or
                                 * failed, or a line over PROTO_LINE_MAX */
    char buf[CLIENT_REPORT_BYTES + 1];
};

/*
 * Adds the decision @r (n @n, pairs @kv[0..@n_kv)) decided at @r->mono_ms
 * to the batch, sending the batch first when the line does not fit or its
 * oldest decision is CLIENT_REPORT_AGE_MS old, and after when it holds
 * CLIENT_REPORT_MAX decisions.  Never waits, never fails the caller.
 */
void client_report_add(struct client_report *rp, const struct proto_report *r, uint64_t n,
                       const struct proto_kv *kv, unsigned n_kv);

/* Sends the batch when its oldest decision is CLIENT_REPORT_AGE_MS old at
 * @now (clock_coarse_ms()); a no-op on an empty batch. */
void client_report_tick(struct client_report *rp, uint64_t now);

/* Sends the batch now (rules changed, table changed, handle closed). */
void client_report_flush(struct client_report *rp);

#endif
