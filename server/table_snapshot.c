/* SPDX-License-Identifier: MIT */
/*
 * table_snapshot: the fast-path table's contents as one consistent copy
 * (table_snapshot(), written to the state directory when divvyd stops) and
 * back into a new table of the same size and boot (table_restore()),
 * divvyd only.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "table_private.h"

/* ---- snapshots ------------------------------------------------------------ */

#define SNAPSHOT_TRIES  8       /* re-reads of a slot whose key words keep changing */

/* An atomic copy of a 16-byte word: a CAS that writes back what it finds
 * (an all-zero word is "replaced" by zero). */
static u128 snap128(uint64_t *word)
{
    return cas128(word, 0, 0);
}

int table_snapshot(struct table *t, void *buf, size_t len)
{
    struct table_hdr *h = buf;
    struct table_slot *out;

    if (!t || !buf || len != t->size)
        return -EINVAL;
    memcpy(h, t->hdr, offsetof(struct table_hdr, quota));
    /* The identity words as this process knows them, not as the mapping
     * says now: a fast-group member may have rewritten the header. */
    memcpy(h->magic, TABLE_MAGIC, sizeof(h->magic));
    h->version = TABLE_VERSION;
    h->header_size = TABLE_HDR_SIZE;
    h->slot_size = TABLE_SLOT_SIZE;
    h->n_slots = t->n_slots;
    h->file_size = t->size;
    memcpy(h->boot_id, t->boot_id, sizeof(h->boot_id));
    memcpy(h->secret, t->secret, sizeof(h->secret));
    h->quota_entries = TABLE_QUOTA_ENTRIES;
    h->quota_offset = TABLE_QUOTA_OFFSET;
    h->full_events = __atomic_load_n(&t->hdr->full_events, __ATOMIC_RELAXED);
    h->quota_events = __atomic_load_n(&t->hdr->quota_events, __ATOMIC_RELAXED);
    h->fast_hits = __atomic_load_n(&t->hdr->fast_hits, __ATOMIC_RELAXED);
    h->fast_full = __atomic_load_n(&t->hdr->fast_full, __ATOMIC_RELAXED);
    for (uint32_t q = 0; q < TABLE_QUOTA_ENTRIES; q++) {
        u128 v = snap128(qent(t, q));

        memcpy(h->quota[q].w, &v, sizeof(v));
    }
    out = (struct table_slot *)(void *)((uint8_t *)buf + TABLE_HDR_SIZE);
    for (uint32_t i = 0; i < t->n_slots; i++) {
        struct table_slot *s = &t->slots[i];
        uint64_t w[6] = { 0 };
        u128 v = 0;

        /* Slots never return to FREE: a FREE low half is a FREE slot. */
        if (load_lo(s) != 0) {
            int tries;

            for (tries = 0; tries < SNAPSHOT_TRIES; tries++) {
                v = snap128(s->state);
                key_read(s, w);
                if (same_ident(load_lo(s), (uint64_t)v))
                    break;
            }
            if (tries == SNAPSHOT_TRIES)
                v = st_dead(v);
        }
        memcpy(out[i].state, &v, sizeof(v));
        memcpy(out[i].key, w, sizeof(w));
    }
    return 0;
}

int table_restore(struct table *t, const void *buf, size_t len, char *why, size_t why_len)
{
    const struct table_hdr *h = buf;
    uint8_t boot_id[16];
    uint32_t n_slots = 0;
    int r;

    if (!t || !buf || len < sizeof(*h))
        return -EINVAL;
    r = table_read_boot_id(boot_id);
    if (r < 0)
        return r;
    r = table_check_header(h, len, boot_id, t->n_slots, &n_slots, why, why_len);
    if (r < 0)
        return r;
    /* Nobody else maps @t yet: plain copies.  The size and magic are equal. */
    memcpy(t->base, buf, len);
    memcpy(t->secret, t->hdr->secret, sizeof(t->secret));
    memcpy(t->boot_id, t->hdr->boot_id, sizeof(t->boot_id));
    return 0;
}
