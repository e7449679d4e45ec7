/* SPDX-License-Identifier: MIT */
/*
 * client_memo: the fast path's memo of request shapes (client_memo.c,
 * docs/client.md "Fast path").  Which rules a request matches depends only
 * on its keys (in order, with any repeats), the values of keys some rule
 * matches by value (exact or glob), and the caller's privilege.  The memo
 * maps that shape to the rules_match() path and to where each rule's actor
 * values sit among the caller's pairs, so a repeated shape skips
 * validation-by-sorting and the matcher: its keys and matched values are
 * compared byte for byte with the remembered ones (which were checked when
 * learned), and the other values are checked for bytes the protocol cannot
 * carry.  Forgotten when the fast path loads other rules.  Requests with
 * repeated keys are never remembered.
 *
 * Sits on client_fast, which it drives and reads (f->loads, f->rules,
 * f->rule) but never changes otherwise; the API layer (divvy.c) owns the
 * memo and teaches it what the fast path decided (libclient's layers: divvy
 * -> memo -> fast -> handoff -> conn -> wire -> err).  A NULL memo is an
 * empty one.
 */
#ifndef DIVVY_CLIENT_MEMO_H
#define DIVVY_CLIENT_MEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client_fast.h"

struct client_memo;

/* 1: decided from the memo (@res filled), 0: not remembered or not
 * decidable here; the caller goes the long way, which sets any error. */
int client_memo_decide(struct client_memo *m, struct client_fast *f, const struct divvy_kv *kv,
                       size_t n_kv, const char *verb, uint64_t wire_amount, enum table_op op,
                       uint64_t amount, struct divvy_result *res);

/* Whether @kv's shape is remembered and the request is valid as a
 * "@verb [@wire_amount] pairs" line: true means client_req_prepare() and the
 * line length check would accept it (a cheaper check for divvy_hit_many()'s
 * all-or-nothing pass); false means nothing (go the long way).  With
 * @prefetch, a remembered request's counters are prefetched as well
 * (client_fast_prefetch()). */
bool client_memo_check(struct client_memo *m, struct client_fast *f, const struct divvy_kv *kv,
                       size_t n_kv, const char *verb, uint64_t wire_amount, bool prefetch);

/* Prefetches the counters of @kv when its shape is remembered
 * (client_fast_prefetch()); validates nothing and decides nothing. */
void client_memo_prefetch(struct client_memo *m, struct client_fast *f,
                          const struct divvy_kv *kv, size_t n_kv);

/* Remembers the shape of @kv[0..@n_kv) whose fast-path rule path is
 * @path[0..@n_path) (client_fast_decide()'s, every rule eligible), creating
 * the memo in *@mp on first use.  Best effort: a shape that does not fit,
 * or no memory, and it is simply not remembered. */
void client_memo_learn(struct client_memo **mp, const struct client_fast *f,
                       const struct divvy_kv *kv, size_t n_kv, const uint32_t *path,
                       size_t n_path);

/* Frees the memo (NULL-safe). */
void client_memo_free(struct client_memo *m);

#endif
