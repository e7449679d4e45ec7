/* SPDX-License-Identifier: MIT */
/*
 * Integration: the shipped systemd/run-divvy.mount gives libdivvy a fast
 * table mapped with 2 MiB pages (docs/operations.md, "Huge pages").  The test
 * reads the unit's Options= from the source tree, so it checks exactly what
 * we ship, and mounts a tmpfs with them in a private mount namespace of its
 * own: there is no systemd PID 1 here, so the unit itself is not started
 * (test_systemd and test_install verify it).  The real divvyd keeps its state
 * directory on that mount with a 16 MiB fast table; a DIVVY_FAST_ONLY handle
 * takes exact counts for 2,000 actors (limit 3, five hits each, a sample
 * confirmed over the socket), and /proc/self/smaps must then show the
 * client's fast.table mapping PMD-mapped (ShmemPmdMapped, or FilePmdMapped).
 * A control mounts the same options with huge=never and must show none, so
 * huge= is what makes the difference.  On a tmpfs divvyd must not warn about
 * its state directory; a third test (no root needed) checks it warns once
 * exactly when the harness's own state directory is not on a tmpfs.
 *
 * Runs as root.  Skips, with one line on stderr, only when it cannot run:
 * not root, unshare(CLONE_NEWNS) or mount(2) refused (EPERM, EACCES: a
 * container's policy), no shmem THP
 * (/sys/kernel/mm/transparent_hugepage/shmem_enabled missing or [deny], or
 * the kernel refusing huge= while taking the other options).  The teardown
 * stops divvyd, unmounts, removes the mount point and returns to the
 * original mount namespace, also after a failed assertion.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "divvy.h"
#include "harness.h"

#define UNIT_PATH       "systemd/run-divvy.mount"
#define SHMEM_ENABLED   "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
#define OPTS_MAX        512
#define FAST_SLOTS      262144          /* 16 MiB of slots: eight 2 MiB pages */
#define N_ACTORS        2000
#define HITS_PER_ACTOR  5
#define LIMIT           3
#define STATE_FS_WARNING "is not on a tmpfs"

/* What the teardown undoes; reset by the setup. */
static struct {
    int old_ns;                 /* our mount namespace before unshare(), or -1 */
    char dir[HARNESS_PATH];     /* the mount point, "" when none */
    bool mounted;
    struct divvy *fast, *sock;
} hp;

/* mount(8) turns these words into mount flags (or drops them); the kernel's
 * tmpfs rejects them as data, so they must not reach it there. */
static const struct {
    const char *word;
    unsigned long flag;
} mount_words[] = {
    { "nosuid", MS_NOSUID }, { "nodev", MS_NODEV }, { "noexec", MS_NOEXEC },
    { "ro", MS_RDONLY }, { "noatime", MS_NOATIME }, { "nodiratime", MS_NODIRATIME },
    { "relatime", MS_RELATIME }, { "strictatime", MS_STRICTATIME },
    { "sync", MS_SYNCHRONOUS }, { "dirsync", MS_DIRSYNC },
    { "rw", 0 }, { "suid", 0 }, { "dev", 0 }, { "exec", 0 }, { "async", 0 },
    { "defaults", 0 }, { "auto", 0 }, { "noauto", 0 }, { "nofail", 0 },
};

static int hp_setup(void **state)
{
    hp.old_ns = -1;
    hp.dir[0] = '\0';
    hp.mounted = false;
    hp.fast = hp.sock = NULL;
    return harness_setup(state);
}

/* The handles first (they map the table), then divvyd, then the mount, and
 * back to the namespace the next test expects. */
static int hp_teardown(void **state)
{
    int r;

    divvy_close(hp.fast);
    divvy_close(hp.sock);
    hp.fast = hp.sock = NULL;
    r = harness_teardown(state);
    if (hp.mounted && umount2(hp.dir, MNT_DETACH) < 0) {
        fprintf(stderr, "umount2 %s: %s\n", hp.dir, strerror(errno));
        r = -1;
    }
    hp.mounted = false;
    if (hp.dir[0] && rmdir(hp.dir) < 0) {
        fprintf(stderr, "rmdir %s: %s\n", hp.dir, strerror(errno));
        r = -1;
    }
    hp.dir[0] = '\0';
    if (hp.old_ns >= 0) {
        if (setns(hp.old_ns, CLONE_NEWNS) < 0) {
            fprintf(stderr, "setns back to the original mount namespace: %s\n",
                    strerror(errno));
            r = -1;
        }
        close(hp.old_ns);
        hp.old_ns = -1;
    }
    return r;
}

/* The [Mount] section's Options= of the shipped unit into @buf; its Type=
 * must be tmpfs, since that is what the test mounts. */
static void unit_options(char *buf, size_t size)
{
    char path[HARNESS_PATH], line[OPTS_MAX];
    bool in_mount = false, tmpfs = false;
    FILE *f;

    buf[0] = '\0';
    CHECK(harness_src_path(UNIT_PATH, path, sizeof(path)));
    f = fopen(path, "re");
    if (!f)
        fail_msg("%s: %s", path, strerror(errno));
    while (fgets(line, sizeof(line), f)) {
        size_t len = strcspn(line, "\r\n");

        while (len > 0 && (line[len - 1] == ' ' || line[len - 1] == '\t'))
            len--;
        line[len] = '\0';
        if (line[0] == '[')
            in_mount = strcmp(line, "[Mount]") == 0;
        else if (in_mount && strncmp(line, "Options=", 8) == 0)
            snprintf(buf, size, "%s", line + 8);
        else if (in_mount && strcmp(line, "Type=tmpfs") == 0)
            tmpfs = true;
    }
    fclose(f);
    if (!buf[0])
        fail_msg("%s: no Options= line in [Mount]", path);
    if (!tmpfs)
        fail_msg("%s: [Mount] has no Type=tmpfs", path);
}

/*
 * Splits mount options the way mount(8) does: flag words into *ret_flags,
 * the rest (tmpfs's own) comma-joined into @data.  @huge: NULL keeps huge=
 * as given, "" drops it, anything else replaces its value.  *ret_huge says
 * whether the options had a huge=.  -ENAMETOOLONG when @data is too small.
 */
static int split_options(const char *opts, const char *huge, unsigned long *ret_flags,
                         char *data, size_t size, bool *ret_huge)
{
    char copy[OPTS_MAX], *save = NULL;
    unsigned long flags = 0;
    bool had_huge = false;
    size_t len = 0;

    if ((size_t)snprintf(copy, sizeof(copy), "%s", opts) >= sizeof(copy))
        return -ENAMETOOLONG;
    data[0] = '\0';
    for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        char word[OPTS_MAX];
        bool is_flag = false;
        int n;

        for (size_t i = 0; i < sizeof(mount_words) / sizeof(mount_words[0]); i++) {
            if (strcmp(w, mount_words[i].word) == 0) {
                flags |= mount_words[i].flag;
                is_flag = true;
            }
        }
        if (is_flag || strncmp(w, "x-", 2) == 0)        /* x-*: for userspace only */
            continue;
        snprintf(word, sizeof(word), "%s", w);
        if (strncmp(w, "huge=", 5) == 0) {
            had_huge = true;
            if (huge && !huge[0])
                continue;
            if (huge)
                snprintf(word, sizeof(word), "huge=%s", huge);
        }
        n = snprintf(data + len, size - len, "%s%s", len ? "," : "", word);
        if (n < 0 || (size_t)n >= size - len)
            return -ENAMETOOLONG;
        len += (size_t)n;
    }
    *ret_flags = flags;
    *ret_huge = had_huge;
    return 0;
}

/* Skips unless this process can have a private mount namespace with shmem
 * THP; then enters one with every mount private, so nothing leaks out. */
static void enter_private_ns(void)
{
    char line[256] = "";
    FILE *f;

    if (geteuid() != 0) {
        fprintf(stderr, "  SKIP: not root (mounting a tmpfs needs CAP_SYS_ADMIN)\n");
        skip();
    }
    f = fopen(SHMEM_ENABLED, "re");
    if (!f) {
        fprintf(stderr, "  SKIP: %s: %s (kernel without shmem THP)\n", SHMEM_ENABLED,
                strerror(errno));
        skip();
    }
    if (!fgets(line, sizeof(line), f))
        line[0] = '\0';
    fclose(f);
    if (strstr(line, "[deny]")) {
        fprintf(stderr, "  SKIP: %s is [deny]: no tmpfs gets huge pages\n", SHMEM_ENABLED);
        skip();
    }
    hp.old_ns = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    if (hp.old_ns < 0)
        fail_msg("/proc/self/ns/mnt: %s", strerror(errno));
    if (unshare(CLONE_NEWNS) < 0) {
        int e = errno;

        close(hp.old_ns);
        hp.old_ns = -1;
        if (e == EPERM) {
            fprintf(stderr, "  SKIP: unshare(CLONE_NEWNS): %s\n", strerror(e));
            skip();
        }
        fail_msg("unshare(CLONE_NEWNS): %s", strerror(e));
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        /* A container whose security policy forbids mounts at all. */
        if (errno == EPERM || errno == EACCES) {
            fprintf(stderr, "  SKIP: mounting is not allowed here: %s\n", strerror(errno));
            skip();
        }
        fail_msg("making / private: %s", strerror(errno));
    }
}

/* true when shmem_enabled forces huge pages on every tmpfs, huge=never or not. */
static bool shmem_forced(void)
{
    char line[256] = "";
    FILE *f = fopen(SHMEM_ENABLED, "re");

    if (!f)
        return false;
    if (!fgets(line, sizeof(line), f))
        line[0] = '\0';
    fclose(f);
    return strstr(line, "[force]") != NULL;
}

/* Mounts a tmpfs with @opts (huge= changed as split_options() says) on a new
 * directory hp.dir and checks that the flag words took effect. */
static void mount_tmpfs(const char *opts, const char *huge)
{
    char data[OPTS_MAX];
    unsigned long flags;
    struct statvfs sv;
    bool had_huge;

    CHECK(split_options(opts, huge, &flags, data, sizeof(data), &had_huge));
    if (!had_huge)
        fail_msg("%s: Options=%s has no huge=", UNIT_PATH, opts);
    snprintf(hp.dir, sizeof(hp.dir), "/tmp/divvy-hp.XXXXXX");
    if (!mkdtemp(hp.dir)) {
        hp.dir[0] = '\0';
        fail_msg("mkdtemp: %s", strerror(errno));
    }
    if (mount("tmpfs", hp.dir, "tmpfs", flags, data) < 0) {
        int e = errno;
        char plain[OPTS_MAX];

        /* EINVAL for huge= alone means a kernel without shmem THP; for
         * anything else the unit's options are wrong. */
        if (e == EINVAL && !(huge && !huge[0]) &&
            split_options(opts, "", &flags, plain, sizeof(plain), &had_huge) == 0 &&
            mount("tmpfs", hp.dir, "tmpfs", flags, plain) == 0) {
            umount2(hp.dir, MNT_DETACH);
            fprintf(stderr, "  SKIP: the kernel refuses tmpfs option huge= (no shmem THP)\n");
            skip();
        }
        if (e == EPERM || e == EACCES) {
            fprintf(stderr, "  SKIP: mounting a tmpfs is not allowed here: %s\n", strerror(e));
            skip();
        }
        fail_msg("mount -t tmpfs -o %s (flags 0x%lx, data \"%s\") %s: %s", opts, flags, data,
                 hp.dir, strerror(e));
    }
    hp.mounted = true;
    CHECK(statvfs(hp.dir, &sv) < 0 ? -errno : 0);
    assert_int_equal(!!(flags & MS_NOSUID), !!(sv.f_flag & ST_NOSUID));
    assert_int_equal(!!(flags & MS_NODEV), !!(sv.f_flag & ST_NODEV));
    assert_int_equal(!!(flags & MS_NOEXEC), !!(sv.f_flag & ST_NOEXEC));
}

/* divvyd with its state directory on hp.dir; libdivvy pointed there too. */
static struct harness_daemon *start_on_mount(void)
{
    struct harness_opts o = { .config_name = "hp.conf", .workers = 2, .no_state_dir = true };
    struct harness_daemon *d = NULL;
    char *conf = harness_scratch(2048), table[HARNESS_PATH + 16];
    struct statfs sf;

    assert_non_null(conf);
    snprintf(conf, 2048,
             "server = { state_dir = \"%s\"; };\n"
             "table = { fast_slots = %d; };\n"
             "rules = (\n"
             "    { match = { path = \"/hp\"; }; label = \"hp\"; credit_limit = %d;\n"
             "      reset_seconds = 3600; actor = \"user\"; fast_path = true; },\n"
             "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
             ");\n", hp.dir, FAST_SLOTS, LIMIT);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    CHECK(harness_divvy_env(d));
    CHECK(setenv("DIVVY_STATE_DIR", hp.dir, 1) < 0 ? -errno : 0);
    snprintf(table, sizeof(table), "%s/fast.table", hp.dir);
    if (statfs(table, &sf) < 0)
        fail_msg("%s: %s (divvyd did not use the mount)", table, strerror(errno));
    assert_true(sf.f_type == TMPFS_MAGIC);
    return d;
}

/* Five hits for each of N_ACTORS actors in-process: exactly LIMIT allowed,
 * credit counting down; a sample of actors then PEEKed over the socket. */
static void hit_actors(void)
{
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/hp" }, { "user", NULL } };
    char user[32];

    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &hp.fast));
    CHECK(divvy_open(NULL, DIVVY_SOCKET_ONLY, &hp.sock));
    harness_wait_fast(hp.fast, (struct divvy_kv[]){ { "path", "/hp" }, { "user", "warm" } }, 2);
    kv[1].value = user;
    for (int a = 0; a < N_ACTORS; a++) {
        snprintf(user, sizeof(user), "actor-%d", a);
        for (int i = 0; i < HITS_PER_ACTOR; i++) {
            int r = divvy_hit(hp.fast, kv, 2, &res);

            if (r < 0)
                fail_msg("%s hit %d: %s (%s)", user, i, strerror(-r), divvy_errmsg(hp.fast));
            if (res.allowed != (i < LIMIT) || res.fast_path != 1 ||
                res.credit != (uint64_t)(i < LIMIT ? LIMIT - 1 - i : 0) ||
                strcmp(res.rule, "hp") != 0)
                fail_msg("%s hit %d: allowed %d credit %llu fast_path %d rule \"%s\"", user, i,
                         res.allowed, (unsigned long long)res.credit, res.fast_path, res.rule);
        }
    }
    /* The daemon reads the same huge-page-backed slots. */
    for (int a = 0; a < N_ACTORS; a += 97) {
        snprintf(user, sizeof(user), "actor-%d", a);
        CHECK(divvy_peek(hp.sock, kv, 2, &res));
        if (res.allowed || res.credit != 0 || res.fast_path || strcmp(res.rule, "hp") != 0)
            fail_msg("socket PEEK %s: allowed %d credit %llu fast_path %d rule \"%s\"", user,
                     res.allowed, (unsigned long long)res.credit, res.fast_path, res.rule);
    }
}

/* Sums Rss, ShmemPmdMapped and FilePmdMapped (kB) over this process's
 * mappings of @path in /proc/self/smaps.  -ENOENT when @path is not mapped. */
static int smaps_kb(const char *path, long ret_kb[3])
{
    char line[HARNESS_PATH + 128];
    size_t plen = strlen(path);
    bool in = false, found = false;
    long kb[3] = { 0, 0, 0 }, v;
    FILE *f = fopen("/proc/self/smaps", "re");

    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        size_t len = strcspn(line, "\n");
        char name[64];

        line[len] = '\0';
        /* A mapping's header ("start-end perms offset dev inode path") has
         * no "Name:" first word; its fields follow until the next header. */
        if (sscanf(line, "%63s", name) != 1 || name[strlen(name) - 1] != ':') {
            in = len > plen && line[len - plen - 1] == ' ' &&
                 strcmp(line + len - plen, path) == 0;
            found |= in;
            continue;
        }
        if (!in || sscanf(line + strlen(name), "%ld", &v) != 1)
            continue;
        if (strcmp(name, "Rss:") == 0)
            kb[0] += v;
        else if (strcmp(name, "ShmemPmdMapped:") == 0)
            kb[1] += v;
        else if (strcmp(name, "FilePmdMapped:") == 0)
            kb[2] += v;
    }
    fclose(f);
    if (!found)
        return -ENOENT;
    memcpy(ret_kb, kb, sizeof(kb));
    return 0;
}

/* The client's fast.table mapping: Rss and PMD-mapped kB (tmpfs reports
 * ShmemPmdMapped; FilePmdMapped counted too, whichever the kernel uses). */
static void table_smaps(const char *what, long *ret_rss, long *ret_pmd)
{
    char table[HARNESS_PATH + 16];
    long kb[3] = { 0, 0, 0 };
    int r;

    snprintf(table, sizeof(table), "%s/fast.table", hp.dir);
    r = smaps_kb(table, kb);
    if (r < 0)
        fail_msg("%s in /proc/self/smaps: %s", table, strerror(-r));
    fprintf(stderr, "  %s: fast.table Rss %ld kB, ShmemPmdMapped %ld kB, FilePmdMapped %ld kB\n",
            what, kb[0], kb[1], kb[2]);
    *ret_rss = kb[0];
    *ret_pmd = kb[1] + kb[2];
}

/* A counter of /proc/vmstat, or -1. */
static long vmstat(const char *name)
{
    char key[64];
    long v, found = -1;
    FILE *f = fopen("/proc/vmstat", "re");

    if (!f)
        return -1;
    while (found < 0 && fscanf(f, "%63s %ld", key, &v) == 2)
        if (strcmp(key, name) == 0)
            found = v;
    fclose(f);
    return found;
}

static void test_fast_hugepages_unit_options(void **state)
{
    struct harness_daemon *d;
    char opts[OPTS_MAX];
    long rss, pmd, fallback;

    (void)state;
    unit_options(opts, sizeof(opts));
    enter_private_ns();
    fallback = vmstat("thp_file_fallback");
    mount_tmpfs(opts, NULL);
    d = start_on_mount();
    /* A tmpfs: nothing to warn about. */
    assert_int_equal(harness_log_contains(d, STATE_FS_WARNING), 0);
    hit_actors();
    table_smaps(opts, &rss, &pmd);
    /* A kernel out of free 2 MiB blocks falls back to 4 KiB pages, and
     * counts it: that is this machine's memory, not the unit's options (which
     * did ask for huge pages, or nothing would have been tried). */
    if (pmd <= 0 && fallback >= 0 && vmstat("thp_file_fallback") > fallback) {
        fprintf(stderr, "  skipped: the kernel had no free 2 MiB pages (thp_file_fallback "
                "%ld -> %ld)\n", fallback, vmstat("thp_file_fallback"));
        skip();
    }
    if (pmd <= 0)
        fail_msg("fast.table on a tmpfs with Options=%s is not PMD-mapped in the client "
                 "(Rss %ld kB, ShmemPmdMapped + FilePmdMapped 0 kB; thp_file_fallback "
                 "%ld -> %ld in /proc/vmstat)", opts, rss, fallback,
                 vmstat("thp_file_fallback"));
}

/* The control: the same options with huge=never map the table with 4 KiB
 * pages only (unless shmem_enabled forces huge pages on every tmpfs). */
static void test_fast_hugepages_control_never(void **state)
{
    char opts[OPTS_MAX];
    long rss, pmd;

    (void)state;
    unit_options(opts, sizeof(opts));
    enter_private_ns();
    mount_tmpfs(opts, "never");
    start_on_mount();
    hit_actors();
    table_smaps("huge=never", &rss, &pmd);
    assert_true(rss > 0);
    if (shmem_forced()) {
        fprintf(stderr, "  (%s is [force]: huge=never is overridden, not checked)\n",
                SHMEM_ENABLED);
        return;
    }
    assert_int_equal(pmd, 0);
}

/* divvyd warns, once, exactly when its state directory is not on a tmpfs
 * (the harness's own state directory: whichever this machine has). */
static void test_state_dir_fs_warning(void **state)
{
    struct harness_opts o = { .config_name = "fs.conf", .no_tcp = true,
                              .config_text = "rules = ({ default = true; credit_limit = 1; "
                                             "reset_seconds = 60; });\n" };
    struct harness_daemon *d = NULL;
    struct statfs sf;
    bool tmpfs;

    (void)state;
    CHECK(harness_start(&o, &d));
    assert_int_equal(statfs(d->state, &sf), 0);
    tmpfs = sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC;
    fprintf(stderr, "  state directory %s: %s\n", d->state, tmpfs ? "tmpfs" : "not tmpfs");
    assert_int_equal(harness_log_contains(d, STATE_FS_WARNING), tmpfs ? 0 : 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fast_hugepages_unit_options, hp_setup,
                                        hp_teardown),
        cmocka_unit_test_setup_teardown(test_fast_hugepages_control_never, hp_setup,
                                        hp_teardown),
        cmocka_unit_test_setup_teardown(test_state_dir_fs_warning, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("fast_hugepages", tests, NULL, NULL);
}
