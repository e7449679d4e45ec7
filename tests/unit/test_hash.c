/* SPDX-License-Identifier: MIT */
/* Unit tests for common/hash.c against the SipHash paper's test vectors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "hash.h"

static void fill(uint8_t key[16], uint8_t msg[64])
{
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
}

/* Paper, appendix A: key 00..0f, message 00..0e (15 bytes). */
static void test_hash_siphash64_paper_vector(void **state)
{
    uint8_t key[16], msg[64];

    (void)state;
    fill(key, msg);
    assert_true(hash_siphash(key, msg, 15) == 0xa129ca6149be45e5ULL);
}

/* Reference vectors.h: 64-bit outputs for lengths 0 and 8 (little endian). */
static void test_hash_siphash64_reference_lengths(void **state)
{
    uint8_t key[16], msg[64];

    (void)state;
    fill(key, msg);
    assert_true(hash_siphash(key, msg, 0) == 0x726fdb47dd0e0e31ULL);
    assert_true(hash_siphash(key, msg, 8) == 0x93f5f5799a932462ULL);
}

/* Reference vectors.h, vectors_sip64[1..7]: every tail length of a last block. */
static void test_hash_siphash64_tail_lengths(void **state)
{
    static const uint64_t want[8] = {
        0x726fdb47dd0e0e31ULL, 0x74f839c593dc67fdULL, 0x0d6c8009d9a94f5aULL,
        0x85676696d7fb7e2dULL, 0xcf2794e0277187b7ULL, 0x18765564cd99a68dULL,
        0xcbc9466e58fee3ceULL, 0xab0200f58b01d137ULL,
    };
    uint8_t key[16], msg[64];

    (void)state;
    fill(key, msg);
    for (size_t len = 0; len < 8; len++)
        assert_true(hash_siphash(key, msg, len) == want[len]);
}

/* Reference vectors.h, vectors_sip128[0] and [1]. */
static void test_hash_siphash128_reference(void **state)
{
    static const uint8_t want0[16] = { 0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6,
                                       0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55, 0x02, 0x93 };
    static const uint8_t want1[16] = { 0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44,
                                       0x34, 0x76, 0x59, 0x11, 0x9b, 0x22, 0xfc, 0x45 };
    uint8_t key[16], msg[64], out[16];

    (void)state;
    fill(key, msg);
    hash_siphash128(key, msg, 0, out);
    assert_memory_equal(out, want0, 16);
    hash_siphash128(key, msg, 1, out);
    assert_memory_equal(out, want1, 16);
}

static void test_hash_key_changes_output(void **state)
{
    uint8_t key[16] = { 0 }, key2[16] = { 1 };

    (void)state;
    assert_true(hash_siphash(key, "abc", 3) != hash_siphash(key2, "abc", 3));
}

/* hash_fast: deterministic, length-sensitive, every tail length handled. */
static void test_hash_fast_distinguishes_inputs(void **state)
{
    const char text[] = "abcdefghijklmnopqrstuvwxyz";
    uint64_t seen[sizeof(text)];

    (void)state;
    for (size_t len = 0; len < sizeof(text); len++) {
        seen[len] = hash_fast(0, text, len);
        assert_true(seen[len] == hash_fast(0, text, len));
        for (size_t j = 0; j < len; j++)
            assert_true(seen[j] != seen[len]);
    }
    /* The seed chains: ("a", "bc") and ("ab", "c") differ. */
    assert_true(hash_fast(hash_fast(0, "a", 1), "bc", 2) !=
                hash_fast(hash_fast(0, "ab", 2), "c", 1));
    assert_true(hash_fast(1, "x", 1) != hash_fast(2, "x", 1));
}

/*
 * hash_fast's values are a format: the compiled rules' index is built by one
 * process and probed by another (libdivvy), so a change of value, not only of
 * speed, would break them.  Pinned for every tail length 0..7 and beyond.
 */
static void test_hash_fast_values_pinned(void **state)
{
    static const uint64_t want[] = {
    0x7acdbb98b1344213ULL,
    0xf37b91e68eb02fd9ULL,
    0xc1fac07908ffd72bULL,
    0x29e636d7b5d053deULL,
    0x010a9c02ca72195dULL,
    0x9556fc50e7f057f4ULL,
    0xa3fb087085f165d3ULL,
    0xe255c9cccd098e2fULL,
    0x39e5216c856e8ca5ULL,
    0xe0e7c5e5f13cdb46ULL,
    0xa777be844728446dULL,
    0xd3128ba74f0d8f18ULL,
    0xbfaeaefa0c7378e2ULL,
    0x839a897fd9bead3aULL,
    0xaef7b72fd51bf776ULL,
    0x98c6faf63a9fdcd7ULL,
    0xd852c1bc4b471b53ULL,
    0xab2653e971992991ULL,
    0xad4e4eb55053230fULL,
    0x68debd7f9c057a23ULL,
    0xf7171bf95ccfcd8eULL,
    0x7060c90f8ec77995ULL,
    0x8e9b82008568a080ULL,
    0x96ad99db0fec5490ULL,
    0x21befd70aa06aba1ULL
    };
    const char text[] = "0123456789abcdefghijklmnopqrstu";

    (void)state;
    for (size_t len = 0; len < sizeof(want) / sizeof(want[0]); len++)
        assert_true(hash_fast(0x243f6a8885a308d3ULL, text, len) == want[len]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_siphash64_paper_vector),
        cmocka_unit_test(test_hash_siphash64_reference_lengths),
        cmocka_unit_test(test_hash_siphash64_tail_lengths),
        cmocka_unit_test(test_hash_siphash128_reference),
        cmocka_unit_test(test_hash_key_changes_output),
        cmocka_unit_test(test_hash_fast_distinguishes_inputs),
        cmocka_unit_test(test_hash_fast_values_pinned),
    };

    return cmocka_run_group_tests_name("hash", tests, NULL, NULL);
}
