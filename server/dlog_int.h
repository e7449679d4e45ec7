/* SPDX-License-Identifier: MIT */
/*
 * dlog_int: what the decision log's encoder (dlog.c) and reader
 * (dlog_read.c) share: the layout's constants (docs/decision-log.md
 * "Format"), little-endian stores and CRC-32C.
 */
#ifndef DIVVY_DLOG_INT_H
#define DIVVY_DLOG_INT_H

#include <stddef.h>
#include <stdint.h>

#include "dlog.h"

#define DLOG_FILE_MAGIC     "DIVVYDL\n"
#define DLOG_FILE_HDR       26          /* magic, version, length, start, host length */
#define DLOG_HOST_MAX       255
#define DLOG_BLOCK_MAGIC    "DLB\001"
#define DLOG_BLOCK_HDR      20          /* magic, payload length, count, worker, CRC */
#define DLOG_DICT_MAX       65536       /* dictionary entries of one block, the marker included */
#define DLOG_OP_LAST        3           /* TABLE_DEBIT */

static inline void dlog_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void dlog_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t dlog_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t dlog_rd64(const uint8_t *p)
{
    return (uint64_t)dlog_rd32(p) | (uint64_t)dlog_rd32(p + 4) << 32;
}

/* CRC-32C (Castagnoli, reflected, as iSCSI and ext4) of @len bytes at @p,
 * continuing @crc (0 to start). */
uint32_t dlog_crc32c(uint32_t crc, const void *p, size_t len);

#endif
