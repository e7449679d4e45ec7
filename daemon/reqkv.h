/* SPDX-License-Identifier: MIT */
/*
 * reqkv: a request's key/value pairs built from parts, as proto_parse()
 * leaves a parsed line's (common/proto.h): sorted by key (bytewise), a key
 * given twice keeps its last value, strings copied NUL-terminated into the
 * request's own buffer.  For the protocols whose wire is not divvy's line
 * (RESP's DIVVY.* arguments, an RLS descriptor's entries): their requests go
 * to the engine without a text line in between.  Pure, thread-safe.
 */
#ifndef DIVVY_REQKV_H
#define DIVVY_REQKV_H

#include <stddef.h>

#include "proto.h"

/*
 * Inserts @key (@klen bytes) with @value (@vlen bytes) into req->kv, or
 * replaces the value of a key already there; the strings are copied to
 * req->buf at *@off (0 for a request's first pair), which moves past them.
 * -E2BIG: PROTO_KV_MAX distinct keys already; -EMSGSIZE: req->buf is full
 * (the caller bounds a request to a line's bytes).
 */
int reqkv_put(struct proto_req *req, size_t *off, const char *key, size_t klen,
              const char *value, size_t vlen);

#endif
