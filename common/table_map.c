/* SPDX-License-Identifier: MIT */
/*
 * table_map: checking and mapping a table that exists: the header checks
 * (magic, layout, slot count, size, boot), table_attach() by path,
 * table_attach_fd() of divvyd's sealed fast-path memfd, table_ctl_attach()
 * of its read-only control page, and table_close().  What fast-path clients
 * need to reach a table; creating one is table_create.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "table_private.h"

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int table_read_boot_id(uint8_t ret[16])
{
    char buf[64];
    uint8_t id[16];
    ssize_t len;
    size_t digits = 0;
    int fd, r;

    fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    len = read(fd, buf, sizeof(buf) - 1);
    r = len < 0 ? -errno : 0;
    close(fd);
    if (r < 0)
        return r;
    for (ssize_t i = 0; i < len && buf[i] != '\n'; i++) {
        int x = hexval(buf[i]);

        if (buf[i] == '-')
            continue;
        if (x < 0 || digits >= 32)
            return -EBADMSG;
        if (digits % 2 == 0)
            id[digits / 2] = (uint8_t)(x << 4);
        else
            id[digits / 2] |= (uint8_t)x;
        digits++;
    }
    if (digits != 32)
        return -EBADMSG;
    memcpy(ret, id, sizeof(id));
    return 0;
}
/*
 * Checks a table header @h of a file (or snapshot) of @size bytes.
 * @want_slots 0 accepts any valid slot count; @boot_id NULL accepts any
 * boot (a memfd).  0, or -EBADMSG with the reason in @why.
 */
int table_check_header(const struct table_hdr *h, uint64_t size, const uint8_t boot_id[16],
                       uint32_t want_slots, uint32_t *ret_slots, char *why, size_t why_len)
{
    if (memcmp(h->magic, TABLE_MAGIC, sizeof(h->magic)) != 0) {
        snprintf(why, why_len, "bad magic");
        return -EBADMSG;
    }
    if (h->version != TABLE_VERSION || h->header_size != TABLE_HDR_SIZE ||
        h->slot_size != TABLE_SLOT_SIZE || h->quota_entries != TABLE_QUOTA_ENTRIES ||
        h->quota_offset != TABLE_QUOTA_OFFSET) {
        snprintf(why, why_len, "layout version %u (header %u, slot %u), want %u (%u, %u)",
                 h->version, h->header_size, h->slot_size, TABLE_VERSION, TABLE_HDR_SIZE,
                 TABLE_SLOT_SIZE);
        return -EBADMSG;
    }
    if (h->n_slots < TABLE_SLOTS_MIN || h->n_slots > TABLE_SLOTS_MAX ||
        (h->n_slots & (h->n_slots - 1)) != 0 || (want_slots && h->n_slots != want_slots)) {
        snprintf(why, why_len, "%u slots, want %u", h->n_slots, want_slots);
        return -EBADMSG;
    }
    if (h->file_size != table_file_size(h->n_slots) || size != h->file_size) {
        snprintf(why, why_len, "file size %llu, header says %llu", (unsigned long long)size,
                 (unsigned long long)h->file_size);
        return -EBADMSG;
    }
    if (boot_id && memcmp(h->boot_id, boot_id, sizeof(h->boot_id)) != 0) {
        snprintf(why, why_len, "made during another boot");
        return -EBADMSG;
    }
    *ret_slots = h->n_slots;
    return 0;
}

/*
 * Checks the header of the open table file @fd.  @want_slots 0 accepts any
 * valid slot count, @boot_id NULL any boot.  0, -EBADMSG (with the reason in
 * @why), or -errno.
 */
int table_check_file(int fd, const uint8_t boot_id[16], uint32_t want_slots,
                     uint32_t *ret_slots, char *why, size_t why_len)
{
    struct table_hdr *h = NULL;
    struct stat st;
    ssize_t len;
    int r;

    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    r = -EBADMSG;
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_len, "not a regular file");
        goto out;
    }
    if ((uint64_t)st.st_size < TABLE_HDR_SIZE) {
        snprintf(why, why_len, "file too short for a header (%lld bytes)",
                 (long long)st.st_size);
        goto out;
    }
    h = malloc(sizeof(*h));
    if (!h) {
        r = -ENOMEM;
        goto out;
    }
    len = pread(fd, h, sizeof(*h), 0);
    if (len < 0) {
        r = -errno;
        goto out;
    }
    if ((size_t)len != sizeof(*h)) {
        snprintf(why, why_len, "short header read");
        goto out;
    }
    r = table_check_header(h, (uint64_t)st.st_size, boot_id, want_slots, ret_slots, why, why_len);
out:
    free(h);
    return r;
}

/* Maps @fd (whose header table_check_file() accepted or which we just built). */
int table_map_file(int fd, uint32_t n_slots, struct table **ret)
{
    struct table *t;
    size_t size = (size_t)table_file_size(n_slots);
    void *p;

    t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int r = -errno;

        free(t);
        return r;
    }
    t->base = p;
    t->size = size;
    t->hdr = p;
    t->slots = (struct table_slot *)(void *)(t->base + TABLE_HDR_SIZE);
    t->n_slots = n_slots;
    t->mask = n_slots - 1;
    memcpy(t->secret, t->hdr->secret, sizeof(t->secret));
    memcpy(t->boot_id, t->hdr->boot_id, sizeof(t->boot_id));
    t->fd = -1;
    t->ctl_fd = -1;
    t->w_gen = &t->hdr->generation;
    t->w_hb = &t->hdr->heartbeat_ms;
    t->w_lease_max = &t->hdr->lease_max;
    t->w_when_full = &t->hdr->when_full;
    *ret = t;
    return 0;
}

int table_attach(const char *path, struct table **ret)
{
    char why[160];
    uint8_t boot_id[16];
    uint32_t n_slots = 0;
    int fd = -1, r;

    if (!path || !ret)
        return -EINVAL;
    r = table_read_boot_id(boot_id);
    if (r < 0)
        goto out;
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        r = -errno;
        goto out;
    }
    r = table_check_file(fd, boot_id, 0, &n_slots, why, sizeof(why));
    if (r < 0)
        goto out;
    r = table_map_file(fd, n_slots, ret);
out:
    if (fd >= 0)
        close(fd);
    return r;
}

void table_close(struct table *t)
{
    if (!t)
        return;
    if (t->base)
        munmap(t->base, t->size);
    if (t->ctl)
        munmap(t->ctl, TABLE_CTL_SIZE);
    if (t->fd >= 0)
        close(t->fd);
    if (t->ctl_fd >= 0)
        close(t->ctl_fd);
    free(t);
}

/* ---- memfds (docs/dev/shm.md "Memfds and seals") ------------------------------ */

int table_fd(const struct table *t)
{
    return t ? t->fd : -1;
}

int table_ctl_fd(const struct table *t)
{
    return t ? t->ctl_fd : -1;
}

size_t table_size(const struct table *t)
{
    return t ? t->size : 0;
}

int table_attach_fd(int fd, uint32_t n_slots, struct table **ret, char *why, size_t why_len)
{
    char scratch[160];
    uint32_t got_slots = 0;
    int seals, r;

    if (fd < 0 || !ret)
        return -EINVAL;
    if (!why) {
        why = scratch;
        why_len = sizeof(scratch);
    }
    seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & TABLE_SEALS) != TABLE_SEALS) {
        snprintf(why, why_len, "not a memfd sealed against resizing");
        return -EBADMSG;
    }
    /* No boot id check: a memfd is memory of this boot (divvyd's, or kept
     * for it in systemd's fd store, neither outlives a reboot), and a process
     * in a container (systemd-nspawn) may read another boot_id file than
     * divvyd (ProtectProc=) does. */
    r = table_check_file(fd, NULL, n_slots, &got_slots, why, why_len);
    if (r < 0)
        return r;
    r = table_map_file(fd, got_slots, ret);
    if (r < 0)
        return r;
    (void)madvise((*ret)->base, (*ret)->size, MADV_HUGEPAGE);
    (*ret)->fd = fd;
    return 0;
}

void table_ctl_use(struct table *t, struct table_ctl *c, int fd)
{
    t->ctl = c;
    t->ctl_fd = fd;
    t->w_gen = &c->generation;
    t->w_hb = &c->heartbeat_ms;
    t->w_lease_max = &c->lease_max;
    t->w_when_full = &c->when_full;
}

int table_ctl_attach(struct table *t, int fd)
{
    struct table_ctl *c;
    struct stat st;
    int seals;

    if (!t || fd < 0 || t->ctl)
        return -EINVAL;
    if (fstat(fd, &st) < 0)
        return -errno;
    seals = fcntl(fd, F_GET_SEALS);
    if (!S_ISREG(st.st_mode) || st.st_size != TABLE_CTL_SIZE || seals < 0 ||
        (seals & TABLE_CTL_SEALS) != TABLE_CTL_SEALS)
        return -EBADMSG;
    c = mmap(NULL, TABLE_CTL_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    if (c == MAP_FAILED)
        return -errno;
    if (memcmp(c->magic, TABLE_CTL_MAGIC, sizeof(c->magic)) != 0 ||
        c->version != TABLE_CTL_VERSION || c->size != TABLE_CTL_SIZE ||
        /* The table's boot, not the boot_id file this process reads: in a
         * container that may be another (see table_attach_fd()). */
        memcmp(c->boot_id, t->boot_id, sizeof(t->boot_id)) != 0) {
        munmap(c, TABLE_CTL_SIZE);
        return -EBADMSG;
    }
    table_ctl_use(t, c, fd);
    return 0;
}
