/* SPDX-License-Identifier: MIT */
/*
 * hash: SipHash-2-4 with 64- and 128-bit output, written from the paper
 * ("SipHash: a fast short-input PRF", 2012) and checked against its test
 * vectors in tests/unit/test_hash.c.
 */
#include "hash.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

/* The hit path hashes every request: the helpers must not stay calls. */
#if defined(__GNUC__)
#define HASH_INLINE static inline __attribute__((always_inline))
#else
#define HASH_INLINE static inline
#endif

HASH_INLINE uint64_t load64_le(const uint8_t *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
           (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
           (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

HASH_INLINE uint64_t load32_le(const uint8_t *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
}

/*
 * The last @n (< 8) bytes of a message as a little-endian word, zero above
 * them: what loading a zero-padded copy gives, without the copy (a call to
 * memcpy() for a few bytes costs as much as a round).  From 4 bytes on, two
 * 4-byte loads that may overlap (where they do, both put the same byte in the
 * same place); below, the first, middle and last byte.
 */
HASH_INLINE uint64_t load_tail_le(const uint8_t *p, size_t n)
{
    if (n >= 4)
        return load32_le(p) | load32_le(p + n - 4) << (8 * (n - 4));
    if (n == 0)
        return 0;
    return (uint64_t)p[0] | (uint64_t)p[n / 2] << (8 * (n / 2)) |
           (uint64_t)p[n - 1] << (8 * (n - 1));
}

HASH_INLINE void store64_le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

struct sip {
    uint64_t v0, v1, v2, v3;
};

HASH_INLINE void sip_round(struct sip *s)
{
    s->v0 += s->v1; s->v1 = ROTL(s->v1, 13); s->v1 ^= s->v0; s->v0 = ROTL(s->v0, 32);
    s->v2 += s->v3; s->v3 = ROTL(s->v3, 16); s->v3 ^= s->v2;
    s->v0 += s->v3; s->v3 = ROTL(s->v3, 21); s->v3 ^= s->v0;
    s->v2 += s->v1; s->v1 = ROTL(s->v1, 17); s->v1 ^= s->v2; s->v2 = ROTL(s->v2, 32);
}

/* Absorbs the whole message; the caller finalises. */
HASH_INLINE void sip_absorb(struct sip *s, const uint8_t key[HASH_KEY_LEN], const void *data,
                       size_t len, int out128)
{
    const uint8_t *in = data;
    const uint8_t *end = in + (len - len % 8);
    uint64_t k0 = load64_le(key), k1 = load64_le(key + 8);
    uint64_t m;

    s->v0 = 0x736f6d6570736575ULL ^ k0;
    s->v1 = 0x646f72616e646f6dULL ^ k1;
    s->v2 = 0x6c7967656e657261ULL ^ k0;
    s->v3 = 0x7465646279746573ULL ^ k1;
    if (out128)
        s->v1 ^= 0xee;
    for (; in != end; in += 8) {
        m = load64_le(in);
        s->v3 ^= m;
        sip_round(s);
        sip_round(s);
        s->v0 ^= m;
    }
    m = load_tail_le(in, len % 8) | (uint64_t)len << 56;
    s->v3 ^= m;
    sip_round(s);
    sip_round(s);
    s->v0 ^= m;
}

uint64_t hash_siphash(const uint8_t key[HASH_KEY_LEN], const void *data, size_t len)
{
    struct sip s;

    sip_absorb(&s, key, data, len, 0);
    s.v2 ^= 0xff;
    for (int i = 0; i < 4; i++)
        sip_round(&s);
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

void hash_siphash128(const uint8_t key[HASH_KEY_LEN], const void *data, size_t len,
                     uint8_t out[16])
{
    struct sip s;

    sip_absorb(&s, key, data, len, 1);
    s.v2 ^= 0xee;
    for (int i = 0; i < 4; i++)
        sip_round(&s);
    store64_le(out, s.v0 ^ s.v1 ^ s.v2 ^ s.v3);
    s.v1 ^= 0xdd;
    for (int i = 0; i < 4; i++)
        sip_round(&s);
    store64_le(out + 8, s.v0 ^ s.v1 ^ s.v2 ^ s.v3);
}

/* 64-bit multiply-mix over 8-byte words, finished with MurmurHash3's fmix64. */
uint64_t hash_fast(uint64_t seed, const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t h = seed ^ (len * 0x9e3779b97f4a7c15ULL);

    for (; len >= 8; p += 8, len -= 8) {
        h ^= load64_le(p) * 0xbf58476d1ce4e5b9ULL;
        h = ROTL(h, 27) * 0x94d049bb133111ebULL;
    }
    if (len) {
        h ^= load_tail_le(p, len) * 0xbf58476d1ce4e5b9ULL;
        h = ROTL(h, 27) * 0x94d049bb133111ebULL;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}
