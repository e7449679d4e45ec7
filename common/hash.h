/* SPDX-License-Identifier: MIT */
/*
 * hash: SipHash-2-4 (Aumasson & Bernstein), 64- and 128-bit outputs, keyed
 * with a 16-byte secret.  The counter table keys it with its per-table secret
 * so remote actors cannot craft colliding keys; rule ids use an all-zero key
 * so they are identical on every host (docs/rules.md).  Pure, thread-safe.
 */
#ifndef DIVVY_HASH_H
#define DIVVY_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_KEY_LEN 16

uint64_t hash_siphash(const uint8_t key[HASH_KEY_LEN], const void *data, size_t len);
void hash_siphash128(const uint8_t key[HASH_KEY_LEN], const void *data, size_t len,
                     uint8_t out[16]);

/*
 * A fast, unkeyed 64-bit hash for tables whose contents are not chosen by
 * remote peers (the compiled rules' index: rules are the operator's, and
 * requests only look up).  Never for the counter table.  @seed chains calls.
 */
uint64_t hash_fast(uint64_t seed, const void *data, size_t len);

#endif
