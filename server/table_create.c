/* SPDX-License-Identifier: MIT */
/*
 * table_create: making tables, divvyd only: the private table file in the
 * state directory (built beside its path, preallocated, renamed into place;
 * reopened when its header is valid, rebuilt when not), the sealed
 * fast-path memfd and its control page, each with a fresh secret
 * (docs/dev/shm.md "Memfds and seals").
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "table_private.h"

static uint32_t round_slots(uint32_t n)
{
    uint32_t p = TABLE_SLOTS_MIN;

    while (p < n && p < TABLE_SLOTS_MAX)
        p <<= 1;
    return p;
}
static int new_secret(uint8_t secret[HASH_KEY_LEN])
{
    ssize_t got;

    do
        got = getrandom(secret, HASH_KEY_LEN, 0);
    while (got < 0 && errno == EINTR);
    if (got != (ssize_t)HASH_KEY_LEN)
        return got < 0 ? -errno : -EIO;
    return 0;
}

/* Writes a fresh header into @t's mapping (all zeroes before). */
static void init_header(struct table *t, const uint8_t boot_id[16],
                        const uint8_t secret[HASH_KEY_LEN])
{
    memcpy(t->hdr->magic, TABLE_MAGIC, sizeof(t->hdr->magic));
    t->hdr->version = TABLE_VERSION;
    t->hdr->header_size = TABLE_HDR_SIZE;
    t->hdr->slot_size = TABLE_SLOT_SIZE;
    t->hdr->n_slots = t->n_slots;
    t->hdr->file_size = table_file_size(t->n_slots);
    memcpy(t->hdr->boot_id, boot_id, sizeof(t->hdr->boot_id));
    memcpy(t->hdr->secret, secret, HASH_KEY_LEN);
    t->hdr->quota_entries = TABLE_QUOTA_ENTRIES;
    t->hdr->quota_offset = TABLE_QUOTA_OFFSET;
    t->hdr->created_ms = clock_now_ms();
    memcpy(t->secret, secret, HASH_KEY_LEN);
    memcpy(t->boot_id, boot_id, sizeof(t->boot_id));
}

/* Builds a complete table file beside @path and renames it over @path. */
static int create_file(const char *path, uint32_t n_slots, unsigned mode,
                       const uint8_t boot_id[16], struct table **ret)
{
    struct table *t = NULL;
    char *tmp = NULL;
    uint8_t secret[HASH_KEY_LEN];
    int fd = -1, r;

    if (asprintf(&tmp, "%s.XXXXXX", path) < 0) {
        tmp = NULL;
        r = -ENOMEM;
        goto out;
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        r = -errno;
        free(tmp);
        tmp = NULL;
        goto out;
    }
    if (fchmod(fd, mode & 07777) < 0) {
        r = -errno;
        goto out;
    }
    /* posix_fallocate returns the error number instead of setting errno. */
    r = posix_fallocate(fd, 0, (off_t)table_file_size(n_slots));
    if (r) {
        r = -r;
        goto out;
    }
    r = new_secret(secret);
    if (r < 0)
        goto out;
    r = table_map_file(fd, n_slots, &t);
    if (r < 0)
        goto out;
    init_header(t, boot_id, secret);
    /* Only a fully written file ever appears under @path. */
    if (rename(tmp, path) < 0) {
        r = -errno;
        goto out;
    }
    free(tmp);
    tmp = NULL;
    *ret = t;
    t = NULL;
    r = 0;
out:
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    table_close(t);
    if (fd >= 0)
        close(fd);
    return r;
}

int table_open(const char *path, uint32_t n_slots, unsigned mode, struct table **ret,
               struct table_open_info *ret_info)
{
    struct table_open_info info;
    struct table *t = NULL;
    uint8_t boot_id[16];
    int fd = -1, r;

    memset(&info, 0, sizeof(info));
    if (!path || !ret) {
        r = -EINVAL;
        goto out;
    }
    n_slots = round_slots(n_slots);
    r = table_read_boot_id(boot_id);
    if (r < 0)
        goto out;
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        r = table_check_file(fd, boot_id, n_slots, &n_slots, info.reason, sizeof(info.reason));
        if (r == 0) {
            r = table_map_file(fd, n_slots, &t);
            goto out;
        }
        if (r != -EBADMSG)
            goto out;
        info.rebuilt = true;
    } else if (errno != ENOENT) {
        r = -errno;
        goto out;
    }
    r = create_file(path, n_slots, mode, boot_id, &t);
    if (r < 0)
        goto out;
    info.created = true;
out:
    if (fd >= 0)
        close(fd);
    if (r >= 0) {
        *ret = t;
        if (ret_info)
            *ret_info = info;
        r = 0;
    }
    return r;
}
/* Huge pages where the kernel's shmem policy allows them (harmless where it
 * does not), then every page allocated now rather than at the first hits. */
static void populate(void *base, size_t size)
{
    (void)madvise(base, size, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
    (void)madvise(base, size, MADV_POPULATE_WRITE);
#endif
}

int table_create_memfd(uint32_t n_slots, struct table **ret)
{
    struct table *t = NULL;
    uint8_t boot_id[16], secret[HASH_KEY_LEN];
    int fd = -1, r;

    if (!ret)
        return -EINVAL;
    n_slots = round_slots(n_slots);
    r = table_read_boot_id(boot_id);
    if (r < 0)
        goto out;
    r = new_secret(secret);
    if (r < 0)
        goto out;
    fd = memfd_create("divvy-fast-table", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)table_file_size(n_slots)) < 0) {
        r = -errno;
        goto out;
    }
    r = table_map_file(fd, n_slots, &t);
    if (r < 0)
        goto out;
    populate(t->base, t->size);
    init_header(t, boot_id, secret);
    /* Sealed before anyone else can have the fd: its size is final. */
    if (fcntl(fd, F_ADD_SEALS, TABLE_SEALS | F_SEAL_SEAL) < 0) {
        r = -errno;
        goto out;
    }
    t->fd = fd;
    fd = -1;
    *ret = t;
    t = NULL;
    r = 0;
out:
    table_close(t);
    if (fd >= 0)
        close(fd);
    return r;
}
int table_ctl_create(struct table *t)
{
    struct table_ctl *c = MAP_FAILED;
    uint8_t boot_id[16];
    int fd = -1, r;

    if (!t || t->ctl)
        return -EINVAL;
    r = table_read_boot_id(boot_id);
    if (r < 0)
        goto out;
    fd = memfd_create("divvy-control", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, TABLE_CTL_SIZE) < 0) {
        r = -errno;
        goto out;
    }
    c = mmap(NULL, TABLE_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (c == MAP_FAILED) {
        r = -errno;
        goto out;
    }
    memcpy(c->magic, TABLE_CTL_MAGIC, sizeof(c->magic));
    c->version = TABLE_CTL_VERSION;
    c->size = TABLE_CTL_SIZE;
    memcpy(c->boot_id, boot_id, sizeof(c->boot_id));
    /* Our mapping stays writable; no mapping or write() made after this can. */
    if (fcntl(fd, F_ADD_SEALS, TABLE_CTL_SEALS | F_SEAL_SEAL) < 0) {
        r = -errno;
        goto out;
    }
    table_ctl_use(t, c, fd);
    c = MAP_FAILED;
    fd = -1;
    r = 0;
out:
    if (c != MAP_FAILED)
        munmap(c, TABLE_CTL_SIZE);
    if (fd >= 0)
        close(fd);
    return r;
}
