/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for common/table*.c and server/table_*.c: file creation, reattach and rebuild,
 * client attach, full table, reclaim of expired and abandoned slots,
 * max_actors, long actors, PEEK/RESET, and exact counts under contention
 * from several processes and threads at once.  Every test works in its own
 * mktemp directory.  The tests that forge slot states write the layout of
 * docs/dev/shm.md directly into the file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "hash.h"
#include "table.h"

/* docs/dev/shm.md */
#define HDR_SIZE        20480u
#define SLOT_SIZE       64u
#define OFF_BOOT_ID     32u
#define OFF_SECRET      48u
#define PHASE_CLAIMING  1u
#define PHASE_LIVE      2u

#define NOW             1000000u            /* an arbitrary "current" time */
#define HOUR            3600000u

struct fixture {
    char dir[64];
    char path[128];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (!f)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/divvy-table-XXXXXX");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    snprintf(f->path, sizeof(f->path), "%s/counters", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    struct dirent *de;
    char p[512];
    DIR *d = opendir(f->dir);

    while (d && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof(p), "%s/%s", f->dir, de->d_name);
            unlink(p);
        }
    }
    if (d)
        closedir(d);
    rmdir(f->dir);
    free(f);
    return 0;
}

static struct table *open_table(const struct fixture *f, uint32_t n_slots,
                                struct table_open_info *info)
{
    struct table_open_info tmp;
    struct table *t = NULL;

    assert_int_equal(table_open(f->path, n_slots, 0600, &t, info ? info : &tmp), 0);
    assert_non_null(t);
    return t;
}

static struct table_limits window(uint64_t limit, uint64_t reset_ms)
{
    struct table_limits lim;

    memset(&lim, 0, sizeof(lim));
    lim.algo = RULES_ALGO_WINDOW;
    lim.credit_limit = limit;
    lim.reset_ms = reset_ms;
    return lim;
}

static int hit(struct table *t, uint64_t rule, const char *actor, const struct table_limits *lim,
               enum table_op op, uint64_t n, uint64_t now, struct table_result *res)
{
    struct table_key key = { rule, actor, strlen(actor) };

    memset(res, 0, sizeof(*res));
    return table_hit(t, &key, lim, op, n, now, res);
}

/* TAKE 1; returns 1 allowed, 0 denied, or the error. */
static int take1(struct table *t, uint64_t rule, const char *actor,
                 const struct table_limits *lim, uint64_t now)
{
    struct table_result res;
    int r = hit(t, rule, actor, lim, TABLE_TAKE, 1, now, &res);

    return r < 0 ? r : res.allowed;
}

static uint64_t live(struct table *t, uint64_t now)
{
    struct table_stats st;

    table_stats(t, now, &st);
    return st.live;
}

static void write_at(const char *path, off_t off, const void *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);

    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, buf, len, off), (ssize_t)len);
    close(fd);
}

static uint8_t *map_raw(const char *path, size_t *ret_len)
{
    struct stat st;
    void *p;
    int fd = open(path, O_RDWR | O_CLOEXEC);

    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(p != MAP_FAILED);
    *ret_len = (size_t)st.st_size;
    return p;
}

/* The key's home slot and tag, computed as docs/dev/shm.md says. */
static void key_home(const uint8_t *raw, uint32_t n_slots, uint64_t rule, const char *actor,
                     uint32_t *ret_bucket, uint32_t *ret_tag)
{
    uint8_t buf[40];
    size_t len = strlen(actor);
    uint64_t h;

    assert_true(len <= 32);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(rule >> (8 * i));
    memcpy(buf + 8, actor, len);
    h = hash_siphash(raw + OFF_SECRET, buf, 8 + len);
    *ret_bucket = (uint32_t)h & (n_slots - 1);
    *ret_tag = (uint32_t)(h >> 40);
}

static uint64_t *slot_state(uint8_t *raw, uint32_t idx)
{
    return (uint64_t *)(void *)(raw + HDR_SIZE + (size_t)idx * SLOT_SIZE);
}

/* Writes CLAIMING{tag, inc 1, claimed at @at} into slot @idx, as a claimer
 * that died right after its claim would have left it (x86-64 order). */
static void forge_claim(uint8_t *raw, uint32_t idx, uint32_t tag, uint64_t at)
{
    uint64_t *w = slot_state(raw, idx);

    __atomic_store_n(&w[1], at >> 24, __ATOMIC_RELAXED);
    __atomic_store_n(&w[0], tag | 1ull << 24 | (uint64_t)PHASE_CLAIMING << 32 |
                     (at & 0xffffff) << 40, __ATOMIC_RELEASE);
}

/* ---- file --------------------------------------------------------------- */

static void test_table_create(void **state)
{
    struct fixture *f = *state;
    struct table_open_info info;
    struct table_stats st;
    struct stat sb;
    struct table *t = open_table(f, 100, &info);

    assert_true(info.created);
    assert_false(info.rebuilt);
    assert_int_equal(table_slots(t), 128);
    assert_int_equal(stat(f->path, &sb), 0);
    assert_int_equal(sb.st_size, HDR_SIZE + 128 * SLOT_SIZE);
    assert_int_equal(sb.st_mode & 0777, 0600);
    table_stats(t, NOW, &st);
    assert_int_equal(st.slots, 128);
    assert_int_equal(st.live, 0);
    assert_int_equal(st.full_events, 0);
    table_set_generation(t, 42);
    assert_int_equal(table_generation(t), 42);
    table_heartbeat(t, NOW);
    assert_int_equal(table_last_heartbeat(t), NOW);
    table_close(t);
    table_close(NULL);
}

static void test_table_take_window(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 64, NULL);
    struct table_limits lim = window(3, 60000);
    struct table_result res;

    for (int i = 2; i >= 0; i--) {
        assert_int_equal(hit(t, 1, "alice", &lim, TABLE_TAKE, 1, NOW, &res), 0);
        assert_true(res.allowed);
        assert_int_equal(res.credit, i);
        assert_int_equal(res.reset_ms, 60000);
    }
    assert_int_equal(hit(t, 1, "alice", &lim, TABLE_TAKE, 1, NOW + 1000, &res), 0);
    assert_false(res.allowed);
    assert_int_equal(res.credit, 0);
    assert_int_equal(res.reset_ms, 59000);
    /* Another actor, another rule: other counters. */
    assert_int_equal(take1(t, 1, "bob", &lim, NOW), 1);
    assert_int_equal(take1(t, 2, "alice", &lim, NOW), 1);
    assert_int_equal(live(t, NOW), 3);
    /* The window ends: the same slot starts afresh. */
    assert_int_equal(hit(t, 1, "alice", &lim, TABLE_TAKE, 2, NOW + 60000, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 1);
    table_close(t);
}

static void test_table_reopen_keeps_counts(void **state)
{
    struct fixture *f = *state;
    struct table_open_info info;
    struct table *t = open_table(f, 256, NULL);
    struct table_limits lim = window(5, HOUR);
    struct table_result res;

    assert_int_equal(hit(t, 9, "10.0.0.1", &lim, TABLE_TAKE, 4, NOW, &res), 0);
    table_set_generation(t, 7);
    table_close(t);
    t = open_table(f, 256, &info);
    assert_false(info.created);
    assert_false(info.rebuilt);
    assert_int_equal(table_generation(t), 7);
    assert_int_equal(hit(t, 9, "10.0.0.1", &lim, TABLE_TAKE, 1, NOW + 1, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 0);
    assert_int_equal(take1(t, 9, "10.0.0.1", &lim, NOW + 2), 0);
    table_close(t);
}

static void rebuild_case(struct fixture *f, off_t off, const void *bytes, size_t len,
                         uint32_t reopen_slots, const char *reason)
{
    struct table_open_info info;
    struct table *t = open_table(f, 128, NULL);
    struct table_limits lim = window(5, HOUR);
    struct table_result res;

    assert_int_equal(hit(t, 1, "x", &lim, TABLE_TAKE, 5, NOW, &res), 0);
    table_close(t);
    if (bytes)
        write_at(f->path, off, bytes, len);
    t = open_table(f, reopen_slots, &info);
    assert_true(info.rebuilt);
    assert_true(info.created);
    assert_non_null(strstr(info.reason, reason));
    assert_int_equal(table_slots(t), reopen_slots);
    /* A new table: the old count is gone. */
    assert_int_equal(hit(t, 1, "x", &lim, TABLE_TAKE, 1, NOW, &res), 0);
    assert_int_equal(res.credit, 4);
    table_close(t);
}

static void test_table_rebuild_bad_magic(void **state)
{
    rebuild_case(*state, 0, "DIVVYXX1", 8, 128, "magic");
}

static void test_table_rebuild_slot_count(void **state)
{
    rebuild_case(*state, 0, NULL, 0, 256, "slots");
}

static void test_table_rebuild_other_boot(void **state)
{
    static const uint8_t other[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
    struct fixture *f = *state;
    struct table *t = open_table(f, 64, NULL);

    table_close(t);
    write_at(f->path, OFF_BOOT_ID, other, sizeof(other));
    /* A client never uses another boot's table... */
    t = NULL;
    assert_int_equal(table_attach(f->path, &t), -EBADMSG);
    assert_null(t);
    /* ...and the daemon replaces it. */
    rebuild_case(f, OFF_BOOT_ID, other, sizeof(other), 128, "boot");
}

static void test_table_rebuild_truncated(void **state)
{
    struct fixture *f = *state;
    struct table_open_info info;
    struct table *t = open_table(f, 64, NULL);

    table_close(t);
    assert_int_equal(truncate(f->path, HDR_SIZE + 10 * SLOT_SIZE), 0);
    t = open_table(f, 64, &info);
    assert_true(info.rebuilt);
    assert_non_null(strstr(info.reason, "size"));
    table_close(t);
}

static void test_table_attach_garbage(void **state)
{
    struct fixture *f = *state;
    struct table *t = NULL, *c = NULL;
    struct table_limits lim = window(2, HOUR);
    char junk[HDR_SIZE + 64 * SLOT_SIZE];
    int fd;

    assert_int_equal(table_attach(f->path, &c), -ENOENT);
    fd = open(f->path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(table_attach(f->path, &c), -EBADMSG);   /* empty */
    memset(junk, 0x5a, sizeof(junk));
    write_at(f->path, 0, junk, sizeof(junk));
    assert_int_equal(table_attach(f->path, &c), -EBADMSG);
    assert_null(c);

    /* A valid table: a client and the daemon share its counters. */
    t = open_table(f, 64, NULL);
    assert_int_equal(table_attach(f->path, &c), 0);
    assert_int_equal(table_slots(c), 64);
    assert_int_equal(take1(c, 3, "a", &lim, NOW), 1);
    assert_int_equal(take1(t, 3, "a", &lim, NOW), 1);
    assert_int_equal(take1(c, 3, "a", &lim, NOW), 0);
    table_heartbeat(t, 77);
    assert_int_equal(table_last_heartbeat(c), 77);
    table_close(c);
    table_close(t);
}

/* ---- capacity and reclaim ----------------------------------------------- */

static void test_table_full_table_enospc(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 64, NULL);
    struct table_limits lim = window(2, HOUR);
    struct table_result res;
    struct table_stats st;
    char actor[32];

    for (int i = 0; i < 64; i++) {
        snprintf(actor, sizeof(actor), "a%d", i);
        assert_int_equal(take1(t, 1, actor, &lim, NOW), 1);
    }
    assert_int_equal(live(t, NOW), 64);
    assert_int_equal(take1(t, 1, "newcomer", &lim, NOW), -ENOSPC);
    assert_int_equal(take1(t, 2, "another", &lim, NOW), -ENOSPC);
    /* PEEK of an absent key is still answered; existing counters still count. */
    assert_int_equal(hit(t, 1, "newcomer", &lim, TABLE_PEEK, 1, NOW, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(take1(t, 1, "a7", &lim, NOW), 1);
    assert_int_equal(take1(t, 1, "a7", &lim, NOW), 0);
    table_stats(t, NOW, &st);
    assert_int_equal(st.full_events, 2);
    assert_int_equal(st.live, 64);
    table_close(t);
}

static void test_table_expired_slots_reclaimed(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 64, NULL);
    struct table_limits lim = window(2, 1000);
    struct table_limits longer = window(2, HOUR);
    char actor[32];

    for (int i = 0; i < 32; i++) {
        snprintf(actor, sizeof(actor), "short%d", i);
        assert_int_equal(take1(t, 1, actor, &lim, NOW), 1);
    }
    for (int i = 0; i < 32; i++) {
        snprintf(actor, sizeof(actor), "long%d", i);
        assert_int_equal(take1(t, 2, actor, &longer, NOW), 1);
    }
    assert_int_equal(take1(t, 3, "x", &lim, NOW + 999), -ENOSPC);
    /* At NOW + 1000 the short windows are over and their slots reusable. */
    for (int i = 0; i < 32; i++) {
        snprintf(actor, sizeof(actor), "new%d", i);
        assert_int_equal(take1(t, 3, actor, &lim, NOW + 1000), 1);
    }
    assert_int_equal(take1(t, 3, "one-too-many", &lim, NOW + 1000), -ENOSPC);
    assert_int_equal(live(t, NOW + 1000), 64);
    /* The long counters survived. */
    assert_int_equal(take1(t, 2, "long5", &longer, NOW + 1000), 1);
    assert_int_equal(take1(t, 2, "long5", &longer, NOW + 1000), 0);
    table_close(t);
}

static void test_table_sweep(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 128, NULL);
    struct table_limits lim = window(2, 1000);
    char actor[32];

    for (int i = 0; i < 10; i++) {
        snprintf(actor, sizeof(actor), "s%d", i);
        assert_int_equal(take1(t, 1, actor, &lim, NOW + (uint64_t)i * 100), 1);
    }
    assert_int_equal(live(t, NOW + 1000), 9);
    assert_int_equal(table_sweep(t, NOW + 1000), 1);
    assert_int_equal(table_sweep(t, NOW + 1000), 0);
    assert_int_equal(table_sweep(t, NOW + 5000), 9);
    assert_int_equal(live(t, NOW), 0);
    table_close(t);
}

static void test_table_dead_claimer_reclaimed(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 64, NULL);
    struct table_limits lim = window(3, HOUR);
    struct table_result res;
    uint32_t bucket, tag;
    size_t len;
    uint8_t *raw = map_raw(f->path, &len);
    uint64_t lo;

    key_home(raw, 64, 5, "victim", &bucket, &tag);
    /* A claimer of this very key died 10 s ago, after its claim CAS. */
    forge_claim(raw, bucket, tag, NOW - 10000);
    assert_int_equal(hit(t, 5, "victim", &lim, TABLE_TAKE, 1, NOW, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 2);
    lo = __atomic_load_n(slot_state(raw, bucket), __ATOMIC_ACQUIRE);
    assert_int_equal(lo >> 32 & 3, PHASE_LIVE);         /* reused in place */
    assert_int_equal(lo & 0xffffff, tag);
    assert_int_equal(lo >> 24 & 0xff, 2);               /* next incarnation */
    assert_int_equal(live(t, NOW), 1);

    /* A claim that is recent but never finishes is waited for, then killed. */
    key_home(raw, 64, 5, "second", &bucket, &tag);
    forge_claim(raw, bucket, tag, NOW);
    assert_int_equal(take1(t, 5, "second", &lim, NOW), 1);
    assert_int_equal(hit(t, 5, "second", &lim, TABLE_PEEK, 1, NOW, &res), 0);
    assert_int_equal(res.credit, 2);

    /* Every slot held by dead claimers: all reclaimable once stale. */
    for (uint32_t i = 0; i < 64; i++)
        forge_claim(raw, i, 0x123456, NOW);
    assert_int_equal(take1(t, 6, "late", &lim, NOW + 1000), -ENOSPC);
    assert_int_equal(take1(t, 6, "late", &lim, NOW + 2000), 1);
    assert_int_equal(table_sweep(t, NOW + 2000), 63);
    munmap(raw, len);
    table_close(t);
}

static void test_table_max_actors(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 256, NULL);
    struct table_limits capped = window(2, 1000), other = window(2, 1000);
    struct table_result res;
    struct table_stats st;

    capped.max_actors = 3;
    assert_int_equal(take1(t, 1, "a", &capped, NOW), 1);
    assert_int_equal(take1(t, 1, "b", &capped, NOW), 1);
    assert_int_equal(take1(t, 1, "c", &capped, NOW), 1);
    assert_int_equal(take1(t, 1, "d", &capped, NOW), -EDQUOT);
    table_stats(t, NOW, &st);
    assert_int_equal(st.quota_events, 1);
    /* Existing counters of the rule and other rules keep working. */
    assert_int_equal(take1(t, 1, "a", &capped, NOW), 1);
    assert_int_equal(take1(t, 1, "a", &capped, NOW), 0);
    assert_int_equal(take1(t, 2, "d", &other, NOW), 1);
    /* PEEK of a new actor never needs a place. */
    assert_int_equal(hit(t, 1, "d", &capped, TABLE_PEEK, 1, NOW, &res), 0);
    assert_true(res.allowed);
    /* RESET gives a place back. */
    assert_int_equal(hit(t, 1, "b", &capped, TABLE_RESET, 0, NOW, &res), 0);
    assert_int_equal(take1(t, 1, "d", &capped, NOW), 1);
    assert_int_equal(take1(t, 1, "e", &capped, NOW), -EDQUOT);
    /* Expired counters give their places back at the latest with a sweep. */
    table_sweep(t, NOW + 1000);
    assert_int_equal(take1(t, 1, "e", &capped, NOW + 1000), 1);
    assert_int_equal(take1(t, 1, "f", &capped, NOW + 1000), 1);
    assert_int_equal(take1(t, 1, "g", &capped, NOW + 1000), 1);
    assert_int_equal(take1(t, 1, "h", &capped, NOW + 1000), -EDQUOT);
    /* A sweep keeps the places of counters that are still running. */
    table_sweep(t, NOW + 1500);
    assert_int_equal(take1(t, 1, "i", &capped, NOW + 1500), -EDQUOT);
    table_close(t);
}

static void test_table_max_actors_reclaim_releases(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 64, NULL);
    struct table_limits capped = window(1, 1000), filler = window(1, HOUR);
    struct table_result res;
    char actor[32];

    capped.max_actors = 2;
    assert_int_equal(take1(t, 1, "a", &capped, NOW), 1);
    assert_int_equal(take1(t, 1, "b", &capped, NOW), 1);
    for (int i = 0; i < 62; i++) {
        snprintf(actor, sizeof(actor), "f%d", i);
        assert_int_equal(take1(t, 2, actor, &filler, NOW), 1);
    }
    /* The table is full: "a" and "b" expire and get reclaimed by rule 2. */
    assert_int_equal(take1(t, 2, "g1", &filler, NOW + 1000), 1);
    assert_int_equal(take1(t, 2, "g2", &filler, NOW + 1000), 1);
    assert_int_equal(take1(t, 2, "g3", &filler, NOW + 1000), -ENOSPC);
    /* Their places under max_actors went with them, without a sweep. */
    for (int i = 0; i < 3; i++) {
        snprintf(actor, sizeof(actor), "f%d", i);
        assert_int_equal(hit(t, 2, actor, &filler, TABLE_RESET, 0, NOW + 1000, &res), 0);
    }
    assert_int_equal(take1(t, 1, "c", &capped, NOW + 1000), 1);
    assert_int_equal(take1(t, 1, "d", &capped, NOW + 1000), 1);
    assert_int_equal(take1(t, 1, "e", &capped, NOW + 1000), -EDQUOT);
    table_close(t);
}

static int collect(const struct table_entry *e, void *userdata)
{
    struct table_entry *out = userdata;
    int i = 0;

    while (out[i].actor_len || out[i].rule_id)
        i++;
    out[i] = *e;
    /* The actor buffer is only valid during the call. */
    out[i].actor = NULL;
    out[i].actor_len = e->actor_len + (e->actor_is_digest ? 1000 : 0);
    return 0;
}

static void test_table_long_actors_digest(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 64, NULL);
    struct table_limits lim = window(1, HOUR);
    struct table_entry seen[4];
    char a[101], b[101];

    memset(a, 'x', 100);
    a[100] = '\0';
    memcpy(b, a, sizeof(b));
    b[99] = 'y';                    /* differs only in the last byte */
    assert_int_equal(take1(t, 1, a, &lim, NOW), 1);
    assert_int_equal(take1(t, 1, b, &lim, NOW), 1);
    assert_int_equal(take1(t, 1, a, &lim, NOW), 0);
    assert_int_equal(take1(t, 1, b, &lim, NOW), 0);
    /* 32 bytes are stored verbatim, 33 as a digest: still distinct. */
    a[33] = '\0';
    assert_int_equal(take1(t, 1, a, &lim, NOW), 1);
    a[32] = '\0';
    assert_int_equal(take1(t, 1, a, &lim, NOW), 1);
    assert_int_equal(take1(t, 1, a, &lim, NOW), 0);
    assert_int_equal(live(t, NOW), 4);

    memset(seen, 0, sizeof(seen));
    assert_int_equal(table_foreach(t, NOW, collect, seen), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(seen[i].rule_id, 1);
        assert_int_equal(seen[i].used_or_tokens, 1);
        assert_int_equal(seen[i].expires_ms, NOW + HOUR);
        assert_int_equal(seen[i].algo, RULES_ALGO_WINDOW);
        /* Digests are 16 bytes (marked + 1000 by collect()), else verbatim. */
        assert_true(seen[i].actor_len == 1016 || seen[i].actor_len == 32);
    }
    table_close(t);
}

static void test_table_peek_reset_absent_claim_nothing(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 64, NULL);
    struct table_limits lim = window(4, HOUR);
    struct table_result res;

    assert_int_equal(hit(t, 1, "ghost", &lim, TABLE_PEEK, 4, NOW, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 4);
    assert_int_equal(res.reset_ms, 0);
    assert_int_equal(hit(t, 1, "ghost", &lim, TABLE_PEEK, 5, NOW, &res), 0);
    assert_false(res.allowed);
    assert_int_equal(hit(t, 1, "ghost", &lim, TABLE_RESET, 0, NOW, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 4);
    /* A TAKE that a full quota would deny, and TAKE 0, claim nothing either. */
    assert_int_equal(hit(t, 1, "ghost", &lim, TABLE_TAKE, 5, NOW, &res), 0);
    assert_false(res.allowed);
    assert_int_equal(hit(t, 1, "ghost", &lim, TABLE_TAKE, 0, NOW, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(live(t, NOW), 0);
    assert_int_equal(table_sweep(t, NOW), 0);
    table_close(t);
}

static void test_table_peek_and_reset_existing(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 64, NULL);
    struct table_limits lim = window(4, HOUR);
    struct table_result res;

    assert_int_equal(hit(t, 1, "k", &lim, TABLE_TAKE, 3, NOW, &res), 0);
    assert_int_equal(hit(t, 1, "k", &lim, TABLE_PEEK, 2, NOW + 10, &res), 0);
    assert_false(res.allowed);
    assert_int_equal(res.credit, 1);
    assert_int_equal(res.reset_ms, HOUR - 10);
    assert_int_equal(hit(t, 1, "k", &lim, TABLE_PEEK, 1, NOW + 10, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 1);               /* PEEK consumed nothing */
    assert_int_equal(hit(t, 1, "k", &lim, TABLE_RESET, 0, NOW + 10, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 4);
    assert_int_equal(live(t, NOW), 0);
    assert_int_equal(hit(t, 1, "k", &lim, TABLE_TAKE, 4, NOW + 20, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(res.reset_ms, HOUR);
    table_close(t);
}

static void test_table_algorithm_is_part_of_key(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 64, NULL);
    struct table_limits win = window(2, HOUR), tb = window(2, HOUR);
    struct table_result res;

    tb.algo = RULES_ALGO_TOKEN_BUCKET;
    tb.refill_amount = 1;
    tb.refill_ms = 1000;
    assert_int_equal(hit(t, 1, "k", &win, TABLE_TAKE, 2, NOW, &res), 0);
    assert_int_equal(hit(t, 1, "k", &tb, TABLE_TAKE, 1, NOW, &res), 0);
    assert_true(res.allowed);
    assert_int_equal(res.credit, 1);
    assert_int_equal(res.reset_ms, 1000);
    assert_int_equal(live(t, NOW), 2);
    tb.refill_amount = 0;
    assert_int_equal(hit(t, 1, "k", &tb, TABLE_TAKE, 1, NOW, &res), -EINVAL);
    table_close(t);
}

/* ---- concurrency -------------------------------------------------------- */

#define PROCS    4
#define THREADS  2
#define N_KEYS   64

struct shared {
    uint64_t allowed[N_KEYS];
    uint64_t errors;
    uint32_t ready;
    uint32_t go;
};

struct worker {
    struct table *t;
    struct shared *sh;
    const struct table_limits *lim;
    int n_keys;
    int takes;                  /* per key */
    unsigned seed;
};

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    char actor[32];

    /* Start together, so that the allowed phase is contended. */
    __atomic_fetch_add(&w->sh->ready, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&w->sh->go, __ATOMIC_ACQUIRE))
        sched_yield();
    for (int i = 0; i < w->takes; i++) {
        for (int k = 0; k < w->n_keys; k++) {
            /* Each thread walks the keys from a different start. */
            int key = (k + (int)w->seed) % w->n_keys;
            int r;

            snprintf(actor, sizeof(actor), "key%d", key);
            r = take1(w->t, 77, actor, w->lim, NOW);
            if (r < 0)
                __atomic_fetch_add(&w->sh->errors, 1, __ATOMIC_RELAXED);
            else if (r)
                __atomic_fetch_add(&w->sh->allowed[key], 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

/* Child: attaches as a client would, runs THREADS workers, exits 0 if all ran. */
static void child_main(const char *path, struct shared *sh, const struct table_limits *lim,
                       int n_keys, int takes, int id)
{
    struct worker w[THREADS];
    pthread_t th[THREADS];
    struct table *t = NULL;
    int rc = 0;

    if (table_attach(path, &t) < 0)
        _exit(2);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){ t, sh, lim, n_keys, takes, (unsigned)(id * THREADS + i) * 7 };
        if (pthread_create(&th[i], NULL, worker_run, &w[i]))
            rc = 3;
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    table_close(t);
    _exit(rc);
}

static void hammer(const char *path, struct shared *sh, const struct table_limits *lim,
                   int n_keys, int takes)
{
    pid_t pid[PROCS];
    int status;

    for (int p = 0; p < PROCS; p++) {
        pid[p] = fork();
        assert_true(pid[p] >= 0);
        if (pid[p] == 0)
            child_main(path, sh, lim, n_keys, takes, p);
    }
    while (__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) < PROCS * THREADS)
        usleep(1000);
    __atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
    for (int p = 0; p < PROCS; p++) {
        assert_int_equal(waitpid(pid[p], &status, 0), pid[p]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
}

static struct shared *shared_new(void)
{
    void *p = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    assert_true(p != MAP_FAILED);
    return p;
}

/*
 * ThreadSanitizer emulates 16-byte atomics with a lock private to each
 * process, so counts across processes cannot be exact under it (which is
 * why common/ must never call out for them: docs/dev/shm.md).
 */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

static void skip_under_tsan(void)
{
#ifdef UNDER_TSAN
    printf("SKIP (TSan): its 16-byte atomics are a lock private to each process, so counts "
           "across processes cannot be exact under it\n");
    skip();
#endif
}

static void test_table_concurrent_one_key_exact(void **state)
{
    struct fixture *f = *state;
    struct table_limits lim = window(5000, HOUR);
    struct table_result res;
    struct shared *sh;
    struct table *t;

    skip_under_tsan();
    t = open_table(f, 1024, NULL);
    sh = shared_new();
    /* 4 processes x 2 threads x 12500 = 100000 TAKEs. */
    hammer(f->path, sh, &lim, 1, 100000 / (PROCS * THREADS));
    assert_int_equal(sh->errors, 0);
    assert_int_equal(sh->allowed[0], 5000);
    assert_int_equal(hit(t, 77, "key0", &lim, TABLE_PEEK, 1, NOW, &res), 0);
    assert_int_equal(res.credit, 0);
    assert_int_equal(live(t, NOW), 1);
    munmap(sh, sizeof(*sh));
    table_close(t);
}

static void test_table_concurrent_many_keys_exact(void **state)
{
    struct fixture *f = *state;
    struct table_limits lim = window(100, HOUR);
    struct shared *sh;
    struct table *t;

    skip_under_tsan();
    t = open_table(f, 1024, NULL);
    sh = shared_new();
    /* 8 workers x 50 rounds = 400 TAKEs per key for 100 credits. */
    hammer(f->path, sh, &lim, N_KEYS, 50);
    assert_int_equal(sh->errors, 0);
    for (int k = 0; k < N_KEYS; k++)
        assert_int_equal(sh->allowed[k], 100);
    assert_int_equal(live(t, NOW), N_KEYS);
    munmap(sh, sizeof(*sh));
    table_close(t);
}

#define RACERS 12
#define ROUNDS 200

struct racer {
    struct table *t;
    pthread_barrier_t *barrier;
    uint64_t allowed[ROUNDS];
    int errors;
};

static void *racer_run(void *arg)
{
    struct racer *r = arg;
    struct table_limits lim = window(7, HOUR);
    char actor[32];

    for (int round = 0; round < ROUNDS; round++) {
        snprintf(actor, sizeof(actor), "new%d", round);
        pthread_barrier_wait(r->barrier);
        for (int i = 0; i < 2; i++) {
            int v = take1(r->t, 5, actor, &lim, NOW);

            if (v < 0)
                r->errors++;
            else
                r->allowed[round] += (uint64_t)v;
        }
    }
    return NULL;
}

static int count_entries(const struct table_entry *e, void *userdata)
{
    (void)e;
    (*(int *)userdata)++;
    return 0;
}

static void test_table_concurrent_new_key_one_slot(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 4096, NULL);
    struct racer *r = calloc(RACERS, sizeof(*r));
    pthread_t th[RACERS];
    pthread_barrier_t barrier;
    int entries = 0;

    assert_non_null(r);
    pthread_barrier_init(&barrier, NULL, RACERS);
    for (int i = 0; i < RACERS; i++) {
        r[i].t = t;
        r[i].barrier = &barrier;
        assert_int_equal(pthread_create(&th[i], NULL, racer_run, &r[i]), 0);
    }
    for (int i = 0; i < RACERS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&barrier);
    /* 12 threads x 2 TAKEs of each brand-new key, limit 7: exactly 7. */
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t sum = 0;

        for (int i = 0; i < RACERS; i++)
            sum += r[i].allowed[round];
        assert_int_equal(sum, 7);
    }
    for (int i = 0; i < RACERS; i++)
        assert_int_equal(r[i].errors, 0);
    assert_int_equal(table_foreach(t, NOW, count_entries, &entries), 0);
    assert_int_equal(entries, ROUNDS);
    assert_int_equal(live(t, NOW), ROUNDS);
    free(r);
    table_close(t);
}

/*
 * Claimers of one new key that disagree on where to put it.  Every slot of
 * a 64-slot table holds a forged counter of no key; the one at offset 4 from
 * the key's home expires at T + 50, the one at offset 5 at T + 10, the rest
 * much later.  The racer at T + 20 claims offset 5, the one at T + 60 offset
 * 4.  They spin on a round number (a futex wake-up takes longer than a
 * scan), so on two cores their scans overlap; only the re-scan after the
 * claim (and the lower claim killing the higher one) keeps them from making
 * two counters.  Thread 0 leads: it forges each round and checks it.
 */
#define DISAGREE_ROUNDS 4000

struct disagree_shared {
    struct table *t;
    uint8_t *raw;
    char actor[32];
    uint32_t round;             /* the racers run round r when this becomes r */
    uint32_t done;
    int allowed;
    int errors;
    int dups;
    int bad_counts;
};

struct disagree {
    struct disagree_shared *sh;
    int id;
};

struct count_actor {
    const char *actor;
    int n;
};

static int count_actor(const struct table_entry *e, void *userdata)
{
    struct count_actor *c = userdata;

    if (e->rule_id == 6 && e->actor_len == strlen(c->actor) &&
        memcmp(e->actor, c->actor, e->actor_len) == 0)
        c->n++;
    return 0;
}

static void disagree_forge(struct disagree_shared *sh, uint32_t round)
{
    uint32_t bucket, tag;

    snprintf(sh->actor, sizeof(sh->actor), "d%u", round);
    key_home(sh->raw, 64, 6, sh->actor, &bucket, &tag);
    for (uint32_t j = 0; j < 64; j++) {
        uint64_t *w = slot_state(sh->raw, (bucket + j) & 63);
        uint64_t idle = NOW + (j == 4 ? 50 : j == 5 ? 10 : 100000);

        memset(w + 2, 0, 48);                   /* key words: rule 0, no actor */
        __atomic_store_n(&w[1], idle >> 24, __ATOMIC_RELAXED);
        __atomic_store_n(&w[0], ((tag + 1) & 0xffffff) | (uint64_t)PHASE_LIVE << 32 |
                         (idle & 0xffffff) << 40, __ATOMIC_RELEASE);
    }
}

static void *disagree_run(void *arg)
{
    struct disagree *d = arg;
    struct disagree_shared *sh = d->sh;
    struct table_limits lim = window(3, HOUR);

    for (uint32_t round = 1; round <= DISAGREE_ROUNDS; round++) {
        uint64_t now = NOW + ((round + (uint32_t)d->id) % 2 ? 20 : 60);
        struct count_actor c = { sh->actor, 0 };

        if (d->id == 0) {
            disagree_forge(sh, round);
            sh->allowed = 0;
            __atomic_store_n(&sh->done, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&sh->round, round, __ATOMIC_RELEASE);
        }
        while (__atomic_load_n(&sh->round, __ATOMIC_ACQUIRE) != round)
            ;
        for (int i = 0; i < 2; i++) {
            int v = take1(sh->t, 6, sh->actor, &lim, now);

            if (v < 0)
                __atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED);
            else
                __atomic_fetch_add(&sh->allowed, v, __ATOMIC_RELAXED);
        }
        __atomic_fetch_add(&sh->done, 1, __ATOMIC_ACQ_REL);
        if (d->id != 0)
            continue;
        while (__atomic_load_n(&sh->done, __ATOMIC_ACQUIRE) != 2)
            ;
        table_foreach(sh->t, 0, count_actor, &c);
        sh->dups += c.n != 1;
        sh->bad_counts += __atomic_load_n(&sh->allowed, __ATOMIC_RELAXED) != 3;
    }
    return NULL;
}

static void test_table_concurrent_claimers_disagree(void **state)
{
    struct fixture *f = *state;
    struct disagree_shared sh;
    struct disagree d[2];
    pthread_t th[2];
    size_t len;

    memset(&sh, 0, sizeof(sh));
    sh.t = open_table(f, 64, NULL);
    sh.raw = map_raw(f->path, &len);
    for (int i = 0; i < 2; i++) {
        d[i] = (struct disagree){ &sh, i };
        assert_int_equal(pthread_create(&th[i], NULL, disagree_run, &d[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(sh.errors, 0);
    assert_int_equal(sh.dups, 0);
    assert_int_equal(sh.bad_counts, 0);
    munmap(sh.raw, len);
    table_close(sh.t);
}

/* Claims at different positions of one probe window: keys that share their
 * home slot, a small table where RESETs keep making holes, time moving on.
 * Afterwards no key may have two counters. */
struct churner {
    struct table *t;
    uint64_t *now;
    unsigned seed;
    int errors;
};

static void *churn_run(void *arg)
{
    struct churner *c = arg;
    struct table_limits lim = window(1000000, 50);
    struct table_result res;
    char actor[32];

    for (int i = 0; i < 20000; i++) {
        unsigned x = rand_r(&c->seed);
        uint64_t now = __atomic_add_fetch(c->now, x % 4 == 0, __ATOMIC_RELAXED);
        int r;

        snprintf(actor, sizeof(actor), "c%u", x % 24);
        r = hit(c->t, 8, actor, &lim, x % 16 == 0 ? TABLE_RESET : TABLE_TAKE, 1, now, &res);
        if (r < 0 && r != -ENOSPC)
            c->errors++;
    }
    return NULL;
}

static int check_unique(const struct table_entry *e, void *userdata)
{
    int *seen = userdata;
    char actor[33];
    unsigned k;

    memset(actor, 0, sizeof(actor));
    memcpy(actor, e->actor, e->actor_len);
    if (sscanf(actor, "c%u", &k) != 1 || k >= 24)
        return -1;
    return ++seen[k] > 1 ? -2 : 0;
}

static void test_table_concurrent_churn_never_duplicates(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 64, NULL);
    struct churner c[8];
    pthread_t th[8];
    uint64_t now = NOW;
    int seen[24];

    for (int i = 0; i < 8; i++) {
        c[i] = (struct churner){ t, &now, (unsigned)i * 2654435761u, 0 };
        assert_int_equal(pthread_create(&th[i], NULL, churn_run, &c[i]), 0);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 8; i++)
        assert_int_equal(c[i].errors, 0);
    /* At time 0 every LIVE counter is reported, expired ones included. */
    memset(seen, 0, sizeof(seen));
    assert_int_equal(table_foreach(t, 0, check_unique, seen), 0);
    table_close(t);
}

/* ---- memfds (docs/dev/shm.md "Memfds and seals") -------------------------------------- */

/* The fast table: a memfd sealed against resizing before anyone gets it;
 * a second mapping of the same fd shares the counters. */
static void test_table_memfd_sealed(void **state)
{
    struct table *t = NULL, *c = NULL;
    struct table_limits lim = window(5, HOUR);
    struct table_result res;
    struct stat sb;
    void *p;
    int fd, seals, un;

    (void)state;
    assert_int_equal(table_create_memfd(100, &t), 0);
    assert_int_equal(table_slots(t), 128);
    fd = table_fd(t);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &sb), 0);
    assert_int_equal(sb.st_size, HDR_SIZE + 128 * SLOT_SIZE);
    assert_int_equal((size_t)sb.st_size, table_size(t));
    seals = fcntl(fd, F_GET_SEALS);
    assert_int_equal(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
                     F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    assert_int_equal(ftruncate(fd, 0), -1);
    assert_int_equal(errno, EPERM);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
    assert_int_equal(table_attach_fd(dup(fd), 0, &c, NULL, 0), 0);
    assert_int_equal(hit(t, 1, "a", &lim, TABLE_TAKE, 2, NOW, &res), 0);
    assert_int_equal(hit(c, 1, "a", &lim, TABLE_TAKE, 1, NOW, &res), 0);
    assert_int_equal(res.credit, 2);
    table_close(c);
    /* A daemon wants its own size; a client takes any valid one. */
    c = NULL;
    fd = dup(table_fd(t));
    assert_int_equal(table_attach_fd(fd, 256, &c, NULL, 0), -EBADMSG);
    assert_int_equal(table_attach_fd(fd, 128, &c, NULL, 0), 0);
    table_close(c);
    /* An unsealed copy is refused: a client could never trust its size. */
    un = memfd_create("unsealed", MFD_CLOEXEC);
    assert_true(un >= 0);
    assert_int_equal(ftruncate(un, sb.st_size), 0);
    p = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, un, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(table_snapshot(t, p, (size_t)sb.st_size), 0);
    munmap(p, (size_t)sb.st_size);
    c = NULL;
    assert_int_equal(table_attach_fd(un, 0, &c, NULL, 0), -EBADMSG);
    assert_null(c);
    close(un);
    table_close(t);
}

/* Fast-path decisions per rule: one entry per rule id, claimed once; ids
 * beyond the keyed entries (and 0) add up in the last one; nothing is lost. */
static void test_table_fast_rules(void **state)
{
    struct table *t = NULL, *c = NULL;
    const uint64_t one[TABLE_FAST_N] = { 1, 2, 0, 1 };
    uint64_t n[TABLE_FAST_N], id, sum[TABLE_FAST_N] = { 0 }, seen = 0;
    bool five = false;

    (void)state;
    assert_int_equal(table_create_memfd(64, &t), 0);
    assert_int_equal(table_attach_fd(dup(table_fd(t)), 0, &c, NULL, 0), 0);
    for (unsigned i = 0; i < TABLE_FAST_RULES; i++)
        assert_false(table_fast_rule(t, i, &id, n));
    for (uint64_t r = 1; r <= 100; r++)
        table_add_fast_rule(c, r * 0x1234567ull, one);
    table_add_fast_rule(c, 5 * 0x1234567ull, one);     /* a client of another process */
    table_add_fast_rule(t, 0, one);
    for (unsigned i = 0; i < TABLE_FAST_RULES; i++) {
        if (!table_fast_rule(t, i, &id, n))
            continue;
        seen++;
        for (unsigned k = 0; k < TABLE_FAST_N; k++)
            sum[k] += n[k];
        if (id == 5 * 0x1234567ull) {
            assert_int_equal(n[TABLE_FAST_ACCEPTED], 2);
            five = true;
        }
        if (i == TABLE_FAST_RULES - 1) {
            assert_true(id == TABLE_FAST_OTHER);
            /* 100 ids, 87 keyed entries: 13 ids and id 0 here. */
            assert_int_equal(n[TABLE_FAST_ACCEPTED], 14);
        }
    }
    assert_int_equal(seen, TABLE_FAST_RULES);
    assert_true(five);          /* the fifth id found an entry: 82 were free */
    assert_int_equal(sum[TABLE_FAST_ACCEPTED], 102);
    assert_int_equal(sum[TABLE_FAST_REJECTED], 204);
    assert_int_equal(sum[TABLE_FAST_CANARY_ACCEPTED], 0);
    assert_int_equal(sum[TABLE_FAST_CANARY_REJECTED], 102);
    table_close(c);
    table_close(t);
}

/* The control page: divvyd's words, read-only to everybody else whatever
 * fd they hold (F_SEAL_FUTURE_WRITE). */
static void test_table_ctl_page(void **state)
{
    struct table *t = NULL, *c = NULL;
    char proc[64];
    void *p;
    int cfd, rw;

    (void)state;
    assert_int_equal(table_create_memfd(64, &t), 0);
    assert_int_equal(table_ctl_fd(t), -1);
    assert_int_equal(table_ctl_create(t), 0);
    cfd = table_ctl_fd(t);
    assert_true(cfd >= 0);
    table_set_generation(t, 42);
    table_heartbeat(t, NOW);
    table_set_lease_max(t, 77);
    table_set_when_full(t, true);
    assert_int_equal(table_attach_fd(dup(table_fd(t)), 0, &c, NULL, 0), 0);
    /* Before the control page the client reads its own (empty) header words. */
    assert_int_equal(table_generation(c), 0);
    assert_int_equal(table_ctl_attach(c, dup(cfd)), 0);
    assert_int_equal(table_generation(c), 42);
    assert_int_equal(table_last_heartbeat(c), NOW);
    assert_int_equal(table_lease_max(c), 77);
    assert_int_equal(table_when_full(c), 1);
    table_set_generation(t, 43);
    assert_int_equal(table_generation(c), 43);
    /* No writable mapping, no write, even through a read-write reopen. */
    p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
    assert_true(p == MAP_FAILED);
    assert_int_equal(errno, EPERM);
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", cfd);
    rw = open(proc, O_RDWR | O_CLOEXEC);
    if (rw >= 0) {
        assert_int_equal(pwrite(rw, "x", 1, 64), -1);
        assert_int_equal(errno, EPERM);
        close(rw);
    }
    assert_int_equal(ftruncate(cfd, 0), -1);
    /* A page without the write seal is refused. */
    {
        struct table *c2 = NULL;
        int un = memfd_create("ctl", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        assert_true(un >= 0);
        assert_int_equal(ftruncate(un, 4096), 0);
        assert_int_equal(fcntl(un, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
        assert_int_equal(table_attach_fd(dup(table_fd(t)), 0, &c2, NULL, 0), 0);
        assert_int_equal(table_ctl_attach(c2, un), -EBADMSG);
        close(un);
        table_close(c2);
    }
    table_close(c);
    table_close(t);
}

/* A snapshot restores every counter; one of another size or boot is refused. */
static void test_table_snapshot_restore(void **state)
{
    struct table *t = NULL, *n = NULL, *other = NULL;
    struct table_limits lim = window(10, HOUR);
    struct table_result res;
    uint8_t *buf;
    char why[160] = "";
    size_t len;

    (void)state;
    assert_int_equal(table_create_memfd(64, &t), 0);
    for (int i = 0; i < 20; i++) {
        char actor[16];

        snprintf(actor, sizeof(actor), "u%d", i);
        assert_int_equal(hit(t, 3, actor, &lim, TABLE_TAKE, (uint64_t)(i % 5) + 1, NOW, &res),
                         0);
    }
    len = table_size(t);
    buf = malloc(len);
    assert_non_null(buf);
    /* A member may rewrite the header of the shared memfd: the snapshot
     * takes the identity words from the handle, not from the mapping. */
    {
        void *hm = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, table_fd(t), 0);

        assert_true(hm != MAP_FAILED);
        memset(hm, 0, 128);
        munmap(hm, len);
    }
    assert_int_equal(table_snapshot(t, buf, len - 1), -EINVAL);
    assert_int_equal(table_snapshot(t, buf, len), 0);
    assert_int_equal(table_create_memfd(64, &n), 0);
    assert_int_equal(table_restore(n, buf, len, why, sizeof(why)), 0);
    assert_int_equal(live(n, NOW), 20);
    for (int i = 0; i < 20; i++) {
        char actor[16];

        snprintf(actor, sizeof(actor), "u%d", i);
        assert_int_equal(hit(n, 3, actor, &lim, TABLE_PEEK, 1, NOW + 1, &res), 0);
        assert_int_equal(res.credit, 10 - (uint64_t)(i % 5) - 1);
    }
    /* Another size: refused, with the reason. */
    assert_int_equal(table_create_memfd(128, &other), 0);
    assert_int_equal(table_restore(other, buf, len, why, sizeof(why)), -EBADMSG);
    assert_non_null(strstr(why, "slots"));
    /* Another boot: refused. */
    buf[OFF_BOOT_ID] ^= 1;
    assert_int_equal(table_restore(n, buf, len, why, sizeof(why)), -EBADMSG);
    assert_string_equal(why, "made during another boot");
    free(buf);
    table_close(other);
    table_close(n);
    table_close(t);
}

/* ---- moving counters (table_move, docs/dev/shm.md "Moving counters") ---------- */

struct move_pick_arg {
    uint64_t rule;
    struct table_limits lim;
    struct table *to;
};

static struct table *move_pick(uint64_t rule_id, enum rules_algo algo, void *arg,
                               struct table_limits *ret_lim)
{
    const struct move_pick_arg *a = arg;

    (void)algo;
    if (rule_id != a->rule)
        return NULL;
    *ret_lim = a->lim;
    return a->to;
}

static struct table *open_other(const struct fixture *f, uint32_t n_slots)
{
    struct table_open_info info;
    struct table *t = NULL;
    char path[160];

    snprintf(path, sizeof(path), "%s/other", f->dir);
    assert_int_equal(table_open(path, n_slots, 0600, &t, &info), 0);
    return t;
}

static uint64_t credit_of(struct table *t, uint64_t rule, const char *actor,
                          const struct table_limits *lim, uint64_t now)
{
    struct table_result res;

    assert_int_equal(hit(t, rule, actor, lim, TABLE_PEEK, 1, now, &res), 0);
    return res.credit;
}

static void test_table_move_copy_then_remove(void **state)
{
    struct fixture *f = *state;
    struct table *from = open_table(f, 1024, NULL), *to = open_other(f, 1024);
    struct move_pick_arg a = { .rule = 1, .lim = window(50, HOUR), .to = to };
    struct table_limits lim2 = window(10, HOUR);
    struct table_move_log log = { 0 };
    struct table_move_stats st;
    struct table_result res;

    assert_int_equal(hit(from, 1, "alice", &a.lim, TABLE_TAKE, 7, NOW, &res), 0);
    assert_int_equal(res.credit, 43);
    assert_int_equal(take1(from, 2, "bob", &lim2, NOW), 1);

    /* Copy: both tables hold alice's counter; bob's rule is not picked. */
    assert_int_equal(table_move(from, false, move_pick, &a, &log, NOW + 1, &st), 0);
    assert_int_equal(st.moved, 1);
    assert_int_equal(st.merged, 0);
    assert_int_equal(credit_of(to, 1, "alice", &a.lim, NOW + 2), 43);
    assert_int_equal(credit_of(from, 1, "alice", &a.lim, NOW + 2), 43);
    assert_int_equal(credit_of(to, 2, "bob", &lim2, NOW + 2), 10);

    /* Hits on both tables in between: the move adds the old table's since the copy. */
    assert_int_equal(take1(from, 1, "alice", &a.lim, NOW + 3), 1);
    assert_int_equal(hit(to, 1, "alice", &a.lim, TABLE_TAKE, 2, NOW + 3, &res), 0);
    assert_int_equal(res.credit, 41);
    assert_int_equal(table_move(from, true, move_pick, &a, &log, NOW + 4, &st), 0);
    assert_int_equal(st.moved, 1);
    assert_int_equal(st.merged, 1);
    assert_int_equal(credit_of(to, 1, "alice", &a.lim, NOW + 5), 40);
    assert_int_equal(credit_of(from, 1, "alice", &a.lim, NOW + 5), 50);    /* gone */
    assert_int_equal(credit_of(from, 2, "bob", &lim2, NOW + 5), 9);        /* stays */
    /* The window keeps its end: reset is an hour after the first hit. */
    assert_int_equal(hit(to, 1, "alice", &a.lim, TABLE_PEEK, 1, NOW + 5, &res), 0);
    assert_int_equal(res.reset_ms, HOUR - 5);
    table_move_log_free(&log);

    /* No record of a copy (another window here): the state with less credit wins. */
    assert_int_equal(take1(from, 1, "alice", &a.lim, NOW + 6), 1);
    assert_int_equal(table_move(from, true, move_pick, &a, NULL, NOW + 7, &st), 0);
    assert_int_equal(st.merged, 1);
    assert_int_equal(credit_of(to, 1, "alice", &a.lim, NOW + 8), 40);
    assert_int_equal(hit(from, 1, "alice", &a.lim, TABLE_TAKE, 45, NOW + 9, &res), 0);
    assert_int_equal(table_move(from, true, move_pick, &a, NULL, NOW + 10, &st), 0);
    assert_int_equal(credit_of(to, 1, "alice", &a.lim, NOW + 11), 5);
    table_close(from);
    table_close(to);
}

static void test_table_move_digest_and_cap(void **state)
{
    struct fixture *f = *state;
    struct table *from = open_table(f, 1024, NULL), *to = open_other(f, 1024);
    struct move_pick_arg a = { .rule = 1, .lim = window(5, HOUR), .to = to };
    struct table_limits plain = window(5, HOUR);
    const char *longa = "an-actor-longer-than-thirty-two-bytes-is-a-digest";
    struct table_move_stats st;

    a.lim.max_actors = 1;
    assert_int_equal(take1(from, 1, longa, &a.lim, NOW), 1);
    assert_int_equal(table_move(from, true, move_pick, &a, NULL, NOW + 1, &st), 0);
    assert_int_equal(st.moved, 0);
    assert_int_equal(st.digest, 1);
    assert_int_equal(credit_of(from, 1, longa, &a.lim, NOW + 2), 4);       /* left behind */
    /* A table that never held a counter can take the other's digest key... */
    assert_int_equal(table_adopt_digests(from, to), -EBUSY);
    assert_int_equal(table_adopt_digests(to, from), 0);
    assert_int_equal(table_adopt_digests(to, from), 0);
    /* ... and then long actors move, and are found there. */
    assert_int_equal(table_move(from, true, move_pick, &a, NULL, NOW + 1, &st), 0);
    assert_int_equal(st.moved, 1);
    assert_int_equal(st.digest, 0);
    assert_int_equal(credit_of(to, 1, longa, &a.lim, NOW + 2), 4);
    assert_int_equal(credit_of(from, 1, longa, &a.lim, NOW + 2), 5);
    /* The key is in the header: it holds when the table is reattached. */
    table_close(to);
    to = open_other(f, 1024);
    a.to = to;
    assert_int_equal(credit_of(to, 1, longa, &a.lim, NOW + 2), 4);

    /* At max_actors in the destination the counter still moves (uncounted):
     * the long actor holds the rule's one counted slot there. */
    assert_int_equal(hit(from, 1, "dave", &plain, TABLE_TAKE, 3, NOW,
                         &(struct table_result){ 0 }), 0);
    assert_int_equal(table_move(from, true, move_pick, &a, NULL, NOW + 1, &st), 0);
    assert_int_equal(st.moved, 1);
    assert_int_equal(credit_of(to, 1, "dave", &a.lim, NOW + 2), 2);
    table_close(from);
    table_close(to);
}

static void test_table_room(void **state)
{
    struct fixture *f = *state;
    struct table *t = open_table(f, 64, NULL);
    struct table_limits lim = window(5, HOUR), capped = window(5, HOUR);
    struct table_key key = { 9, "new", 3 };
    struct table_kw kw;
    char actor[32];

    capped.max_actors = 1;
    table_key_prepare(t, &key, &lim, &kw);
    assert_int_equal(table_room_prepared(t, &kw, &lim, NOW), 0);
    assert_int_equal(take1(t, 9, "first", &capped, NOW), 1);
    assert_int_equal(table_room_prepared(t, &kw, &capped, NOW), -EDQUOT);
    /* 64 slots, one probe window: full after 64 counters. */
    for (int i = 1; i < 64; i++) {
        snprintf(actor, sizeof(actor), "a%d", i);
        assert_int_equal(take1(t, 8, actor, &lim, NOW), 1);
    }
    assert_int_equal(table_room_prepared(t, &kw, &lim, NOW), -ENOSPC);
    key.actor = "a5";
    key.actor_len = 2;
    key.rule_id = 8;
    table_key_prepare(t, &key, &lim, &kw);
    assert_int_equal(table_room_prepared(t, &kw, &lim, NOW), 0);          /* it has one */
    /* Expired counters are room again. */
    key.actor = "new";
    key.actor_len = 3;
    key.rule_id = 9;
    table_key_prepare(t, &key, &lim, &kw);
    assert_int_equal(table_room_prepared(t, &kw, &lim, NOW + HOUR), 0);
    table_close(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(test_table_create),
        T(test_table_memfd_sealed),
        T(test_table_ctl_page),
        T(test_table_fast_rules),
        T(test_table_snapshot_restore),
        T(test_table_take_window),
        T(test_table_reopen_keeps_counts),
        T(test_table_rebuild_bad_magic),
        T(test_table_rebuild_slot_count),
        T(test_table_rebuild_other_boot),
        T(test_table_rebuild_truncated),
        T(test_table_attach_garbage),
        T(test_table_full_table_enospc),
        T(test_table_expired_slots_reclaimed),
        T(test_table_sweep),
        T(test_table_dead_claimer_reclaimed),
        T(test_table_max_actors),
        T(test_table_max_actors_reclaim_releases),
        T(test_table_long_actors_digest),
        T(test_table_peek_reset_absent_claim_nothing),
        T(test_table_peek_and_reset_existing),
        T(test_table_algorithm_is_part_of_key),
        T(test_table_concurrent_one_key_exact),
        T(test_table_concurrent_many_keys_exact),
        T(test_table_concurrent_new_key_one_slot),
        T(test_table_concurrent_claimers_disagree),
        T(test_table_concurrent_churn_never_duplicates),
        T(test_table_move_copy_then_remove),
        T(test_table_move_digest_and_cap),
        T(test_table_room),
#undef T
    };

    return cmocka_run_group_tests_name("table", tests, NULL, NULL);
}
