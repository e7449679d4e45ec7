/* SPDX-License-Identifier: MIT */
/*
 * Integration: huge pages for the fast table (docs/operations.md, "Huge
 * pages").  The fast table is a memfd, i.e. shmem on the kernel's internal
 * mount, so no tmpfs mount option decides its page size: the kernel's
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled policy does, together
 * with the MADV_HUGEPAGE that divvyd and libdivvy apply to their mappings.
 * The real divvyd runs with a 16 MiB fast table; a DIVVY_FAST_ONLY handle
 * takes exact counts for 2,000 actors (limit 3, five hits each, a sample
 * confirmed over the socket).  Then /proc/self/smaps must show the client's
 * mapping of the memfd with the "hg" VmFlag (MADV_HUGEPAGE took) on every
 * kernel, and PMD-mapped (ShmemPmdMapped) where shmem_enabled allows huge
 * pages for an madvised mapping ([always], [within_size], [advise],
 * [force]); under [never] or [deny] that part is skipped, saying so.  A
 * second test (no root needed) checks that divvyd warns once exactly when
 * the harness's own state directory is not on a tmpfs.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "divvy.h"
#include "harness.h"

#define SHMEM_ENABLED   "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
#define MEMFD_NAME      "/memfd:divvy-fast-table"
#define FAST_SLOTS      262144          /* 16 MiB of slots: eight 2 MiB pages */
#define N_ACTORS        2000
#define HITS_PER_ACTOR  5
#define LIMIT           3
#define STATE_FS_WARNING "is not on a tmpfs"

static struct divvy *hp_fast, *hp_sock;

static int hp_teardown(void **state)
{
    divvy_close(hp_fast);
    divvy_close(hp_sock);
    hp_fast = hp_sock = NULL;
    return harness_teardown(state);
}

/* The bracketed word of shmem_enabled into @buf ("" when there is none). */
static void shmem_policy(char *buf, size_t size)
{
    char line[256] = "", *a, *b;
    FILE *f = fopen(SHMEM_ENABLED, "re");

    buf[0] = '\0';
    if (!f)
        return;
    if (!fgets(line, sizeof(line), f))
        line[0] = '\0';
    fclose(f);
    a = strchr(line, '[');
    b = a ? strchr(a, ']') : NULL;
    if (a && b)
        snprintf(buf, size, "%.*s", (int)(b - a - 1), a + 1);
}

static struct harness_daemon *start_hp(void)
{
    struct harness_opts o = { .config_name = "hp.conf", .workers = 2 };
    struct harness_daemon *d = NULL;
    char *conf = harness_scratch(2048);

    assert_non_null(conf);
    snprintf(conf, 2048,
             "table = { fast_slots = %d; };\n"
             "rules = (\n"
             "    { match = { path = \"/hp\"; }; label = \"hp\"; credit_limit = %d;\n"
             "      reset_seconds = 3600; actor = \"user\"; fast_path = true; },\n"
             "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
             ");\n", FAST_SLOTS, LIMIT);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    CHECK(harness_divvy_env(d));
    return d;
}

/* Five hits for each of N_ACTORS actors in-process: exactly LIMIT allowed,
 * credit counting down; a sample of actors then PEEKed over the socket. */
static void hit_actors(void)
{
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/hp" }, { "user", NULL } };
    char user[32];

    CHECK(divvy_open(NULL, DIVVY_FAST_ONLY, &hp_fast));
    CHECK(divvy_open(NULL, DIVVY_SOCKET_ONLY, &hp_sock));
    harness_wait_fast(hp_fast, (struct divvy_kv[]){ { "path", "/hp" }, { "user", "warm" } }, 2);
    kv[1].value = user;
    for (int a = 0; a < N_ACTORS; a++) {
        snprintf(user, sizeof(user), "actor-%d", a);
        for (int i = 0; i < HITS_PER_ACTOR; i++) {
            int r = divvy_hit(hp_fast, kv, 2, &res);

            if (r < 0)
                fail_msg("%s hit %d: %s (%s)", user, i, strerror(-r), divvy_errmsg(hp_fast));
            if (res.allowed != (i < LIMIT) || res.fast_path != 1 ||
                res.credit != (uint64_t)(i < LIMIT ? LIMIT - 1 - i : 0) ||
                strcmp(res.rule, "hp") != 0)
                fail_msg("%s hit %d: allowed %d credit %llu fast_path %d rule \"%s\"", user, i,
                         res.allowed, (unsigned long long)res.credit, res.fast_path, res.rule);
        }
    }
    /* The daemon reads the same slots. */
    for (int a = 0; a < N_ACTORS; a += 97) {
        snprintf(user, sizeof(user), "actor-%d", a);
        CHECK(divvy_peek(hp_sock, kv, 2, &res));
        if (res.allowed || res.credit != 0 || res.fast_path || strcmp(res.rule, "hp") != 0)
            fail_msg("socket PEEK %s: allowed %d credit %llu fast_path %d rule \"%s\"", user,
                     res.allowed, (unsigned long long)res.credit, res.fast_path, res.rule);
    }
}

/* Over the mappings in @smaps whose path starts with MEMFD_NAME and that
 * are writable (the table, not a rules copy): Rss and ShmemPmdMapped (kB),
 * and whether every one has VmFlags "hg".  -ENOENT when there is none. */
static int memfd_smaps(const char *smaps, long *ret_rss, long *ret_pmd, bool *ret_hg)
{
    char line[512];
    bool in = false, found = false, hg = true;
    long rss = 0, pmd = 0, v;
    FILE *f = fopen(smaps, "re");

    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        char name[64], perms[8];

        line[strcspn(line, "\n")] = '\0';
        if (sscanf(line, "%63s", name) != 1)
            continue;
        if (name[strlen(name) - 1] != ':') {
            /* A mapping's header: "start-end perms offset dev inode path". */
            in = strstr(line, MEMFD_NAME) != NULL && sscanf(line, "%*s %7s", perms) == 1 &&
                 perms[1] == 'w';
            found |= in;
            continue;
        }
        if (!in)
            continue;
        if (strcmp(name, "VmFlags:") == 0)
            hg &= strstr(line, " hg") != NULL;
        else if (strcmp(name, "Rss:") == 0 && sscanf(line + 4, "%ld", &v) == 1)
            rss += v;
        else if (strcmp(name, "ShmemPmdMapped:") == 0 && sscanf(line + 15, "%ld", &v) == 1)
            pmd += v;
    }
    fclose(f);
    if (!found)
        return -ENOENT;
    *ret_rss = rss;
    *ret_pmd = pmd;
    *ret_hg = hg;
    return 0;
}

static void test_fast_hugepages_memfd(void **state)
{
    struct harness_daemon *d;
    char policy[32], path[64];
    long rss, pmd;
    bool hg;
    int r;

    (void)state;
    shmem_policy(policy, sizeof(policy));
    d = start_hp();
    hit_actors();
    r = memfd_smaps("/proc/self/smaps", &rss, &pmd, &hg);
    if (r < 0)
        fail_msg("no writable mapping of %s in /proc/self/smaps: %s", MEMFD_NAME, strerror(-r));
    fprintf(stderr, "  client: %s Rss %ld kB, ShmemPmdMapped %ld kB, MADV_HUGEPAGE %s; "
            "shmem_enabled [%s]\n", MEMFD_NAME, rss, pmd, hg ? "yes" : "no", policy);
    assert_true(rss > 0);
    if (!hg)
        fail_msg("libdivvy's mapping of the fast table lacks MADV_HUGEPAGE (VmFlags hg)");
    snprintf(path, sizeof(path), "/proc/%d/smaps", (int)d->pid);
    if (memfd_smaps(path, &rss, &pmd, &hg) == 0) {
        fprintf(stderr, "  divvyd: Rss %ld kB, ShmemPmdMapped %ld kB, MADV_HUGEPAGE %s\n",
                rss, pmd, hg ? "yes" : "no");
        assert_true(hg);
    }
    if (!policy[0] || strcmp(policy, "never") == 0 || strcmp(policy, "deny") == 0) {
        fprintf(stderr, "  SKIP (PMD mapping only): %s is [%s]: the kernel gives shmem no "
                "huge pages, MADV_HUGEPAGE or not\n", SHMEM_ENABLED,
                policy[0] ? policy : "missing");
        skip();
    }
    r = memfd_smaps("/proc/self/smaps", &rss, &pmd, &hg);
    if (r < 0 || pmd <= 0)
        fail_msg("shmem_enabled [%s] allows huge pages for an madvised mapping, but the fast "
                 "table is not PMD-mapped in the client (ShmemPmdMapped 0 kB)", policy);
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
        cmocka_unit_test_setup_teardown(test_fast_hugepages_memfd, harness_setup, hp_teardown),
        cmocka_unit_test_setup_teardown(test_state_dir_fs_warning, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("fast_hugepages", tests, NULL, NULL);
}
