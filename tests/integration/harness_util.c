/* SPDX-License-Identifier: MIT */
/*
 * harness_util: time, the environment ($DIVVYD, the source tree) and small
 * file helpers for the integration harness (harness.h, harness_private.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness_private.h"

/* ---- time ------------------------------------------------------------------ */

uint64_t harness_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void harness_pause_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

unsigned harness_rand(void)
{
    static unsigned seed;

    if (!seed)
        seed = (unsigned)getpid() ^ (unsigned)harness_now_ms();
    seed = seed * 1103515245u + 12345u;
    return seed >> 1;
}

int harness_remaining_ms(uint64_t deadline)
{
    uint64_t now = harness_now_ms();

    return now >= deadline ? 0 : (int)(deadline - now);
}

/* ---- environment ----------------------------------------------------------- */

const char *harness_divvyd(void)
{
    const char *p = getenv("DIVVYD");

    return p && *p ? p : "build/divvyd";
}

const char *harness_srcdir(void)
{
    static char dir[PATH_MAX];
    const char *env = getenv("DIVVY_SRCDIR");
    char real[PATH_MAX], *slash;
    int i;

    if (env && *env)
        return env;
    if (dir[0])
        return dir;
    if (!realpath(harness_divvyd(), real)) {
        snprintf(dir, sizeof(dir), ".");
        return dir;
    }
    /* <src>/build/divvyd -> <src> */
    for (i = 0; i < 2; i++) {
        slash = strrchr(real, '/');
        if (!slash || slash == real) {
            snprintf(dir, sizeof(dir), ".");
            return dir;
        }
        *slash = '\0';
    }
    snprintf(dir, sizeof(dir), "%s", real);
    return dir;
}

int harness_src_path(const char *rel, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s/%s", harness_srcdir(), rel);

    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* ---- files ----------------------------------------------------------------- */

int harness_write_file(const char *path, const void *data, size_t len)
{
    const char *p = data;
    int fd, r = 0;

    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            r = -errno;
            goto out;
        }
        p += n;
        len -= (size_t)n;
    }
out:
    if (close(fd) < 0 && r == 0)
        r = -errno;
    return r;
}

int harness_read_file(const char *path, char **ret, size_t *ret_len)
{
    char *buf = NULL, *nbuf;
    size_t len = 0, cap = 0;
    int fd, r = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    for (;;) {
        ssize_t n;

        if (cap - len < 4096) {
            cap = cap ? cap * 2 : 8192;
            nbuf = realloc(buf, cap + 1);
            if (!nbuf) {
                r = -ENOMEM;
                goto out;
            }
            buf = nbuf;
        }
        n = read(fd, buf + len, cap - len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            r = -errno;
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    *ret = buf;
    *ret_len = len;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return r;
}

int harness_path_join(char buf[HARNESS_PATH], const char *dir, const char *name)
{
    int n = snprintf(buf, HARNESS_PATH, "%s/%s", dir, name);

    return n < 0 || n >= HARNESS_PATH ? -ENAMETOOLONG : 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

void harness_rm_tree(const char *dir)
{
    if (dir[0])
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void harness_list_dir(const char *dir, char *buf, size_t size)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char *names[64];
    size_t n = 0, used = 0;

    buf[0] = '\0';
    if (!d) {
        snprintf(buf, size, "-");
        return;
    }
    while ((e = readdir(d)) != NULL && n < 64) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        names[n] = strdup(e->d_name);
        if (names[n])
            n++;
    }
    closedir(d);
    qsort(names, n, sizeof(names[0]), cmp_name);
    for (size_t i = 0; i < n; i++) {
        if (used < size)
            used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? " " : "", names[i]);
        free(names[i]);
    }
}

long long harness_rss_kb(pid_t pid)
{
    char path[64], line[256];
    long long kb = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

size_t harness_count(const char *hay, const char *needle)
{
    size_t n = 0;

    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}
