/* SPDX-License-Identifier: MIT */
/*
 * fast_attack: what a member of divvy-fast can do to the fast-path table
 * with the very descriptors libdivvy maps (issue 11 items 1 and 5).
 * tests/systemd/check-systemd.sh runs it inside the container as such a
 * user: `fast_attack KEY=VALUE...`.
 *
 * It interposes mmap() and mmap64(): libdivvy's calls reach these first, and
 * every descriptor mapped MAP_SHARED is dup()ed before the real mapping is
 * made (by system call).  Then it takes one credit of the request on the fast
 * path only (DIVVY_FAST_ONLY), and on each descriptor it kept it tries to grow
 * the file (fallocate 1 MiB past the end, ftruncate to its size + 1 MiB) and
 * to shrink it (ftruncate to 0): a table file in /run/divvy lets it, a memfd
 * sealed against growing and shrinking does not.  One line per attempt.
 * It never touches the mapping after an attempt.
 *
 * Exit status: 0 the hit was decided in this process and every resize was
 * refused; 1 a resize succeeded; 2 no fast path, no shared mapping, or an
 * error.
 */
#undef _FILE_OFFSET_BITS
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <divvy.h>

#define KEPT_MAX 16

static int kept[KEPT_MAX];
static int n_kept;

/* The real mapping, by system call: libc's mmap would be this file's again. */
static void *map(void *addr, size_t len, int prot, int flags, int fd, long off)
{
    long r;

    if ((flags & MAP_SHARED) && fd >= 0 && n_kept < KEPT_MAX) {
        int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);

        if (d >= 0)
            kept[n_kept++] = d;
    }
    r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    return (void *)r;
}

/* Default visibility (the build hides symbols): libdivvy must bind to these. */
__attribute__((visibility("default")))
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return map(addr, len, prot, flags, fd, (long)off);
}

__attribute__((visibility("default")))
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
    return map(addr, len, prot, flags, fd, (long)off);
}

/* Prints one attempt; returns 1 when it succeeded (the attack worked). */
static int attempt(int fd, const char *what, int r)
{
    if (r == 0) {
        printf("fd %d: %s: done\n", fd, what);
        return 1;
    }
    printf("fd %d: %s: refused (%s)\n", fd, what, strerror(errno));
    return 0;
}

int main(int argc, char **argv)
{
    struct divvy_kv kv[DIVVY_MAX_KEYS];
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy *h = NULL;
    size_t n = 0;
    int r, done = 0, rv = 2;

    for (int i = 1; i < argc && n < DIVVY_MAX_KEYS; i++) {
        char *eq = strchr(argv[i], '=');

        if (!eq) {
            fprintf(stderr, "usage: %s key=value...\n", argv[0]);
            return 2;
        }
        *eq = '\0';
        kv[n].key = argv[i];
        kv[n].value = eq + 1;
        n++;
    }
    r = divvy_open(NULL, DIVVY_FAST_ONLY, &h);
    if (r < 0) {
        printf("divvy_open(DIVVY_FAST_ONLY): %s\n", strerror(-r));
        goto out;
    }
    r = divvy_hit(h, kv, n, &res);
    if (r < 0 || !res.fast_path) {
        printf("hit: not decided on the fast path: %s\n", r < 0 ? strerror(-r) : "socket");
        goto out;
    }
    printf("hit: fast path, credit=%llu, %d shared mapping(s)\n",
           (unsigned long long)res.credit, n_kept);
    if (n_kept == 0)
        goto out;
    for (int i = 0; i < n_kept; i++) {
        struct stat st;
        char what[64];

        if (fstat(kept[i], &st) < 0) {
            printf("fd %d: fstat: %s\n", kept[i], strerror(errno));
            goto out;
        }
        snprintf(what, sizeof(what), "fallocate 1 MiB at %lld", (long long)st.st_size);
        done += attempt(kept[i], what, fallocate(kept[i], 0, st.st_size, 1 << 20));
        snprintf(what, sizeof(what), "ftruncate to %lld", (long long)st.st_size + (1 << 20));
        done += attempt(kept[i], what, ftruncate(kept[i], st.st_size + (1 << 20)));
        done += attempt(kept[i], "ftruncate to 0", ftruncate(kept[i], 0));
    }
    rv = done ? 1 : 0;
out:
    /* No divvy_close(): unmapping is harmless, but nothing may touch the
     * table after a resize; the process exits now. */
    fflush(stdout);
    _exit(rv);
}
