/* SPDX-License-Identifier: MIT */
/*
 * counters: COUNTERS, the live counters divvyctl top and locked show
 * (docs/protocol.md "COUNTERS").  This host's tables are read at once; the
 * counters of strict rules live only in Redis and are read there, without
 * blocking the worker: a bounded SCAN of the rules' keys and a PEEK of each
 * (docs/redis.md "COUNTERS"), while the reply waits in the connection's
 * reply queue (conn_reply_wait(), conn.h), so it keeps its place among
 * pipelined replies.  The connection's thread.
 */
#ifndef DIVVY_COUNTERS_H
#define DIVVY_COUNTERS_H

#include "proto.h"

struct conn;

/* COUNTERS [rule=] [max=] [exhausted=true]: live counters, least credit
 * first (the verb table's handler; admin only). */
void counters_request(struct conn *c, const struct proto_req *req);

#endif
