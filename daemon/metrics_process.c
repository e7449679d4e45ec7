/* SPDX-License-Identifier: MIT */
/*
 * metrics_process: the process_* figures every Prometheus client library
 * exports (their names, types and units), read from /proc/self on each
 * scrape: CPU seconds (user + system), resident and virtual memory, open
 * file descriptors and RLIMIT_NOFILE, the start time.  The scrape's thread;
 * a /proc that cannot be read leaves the figures out (the start time stays).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "metrics.h"
#include "metrics_int.h"

/* utime and stime (clock ticks) and vsize (bytes) from /proc/self/stat. */
static int read_stat(struct metrics_process *p)
{
    char buf[1024];
    unsigned long long utime, stime, vsize;
    const char *s;
    long tck = sysconf(_SC_CLK_TCK);
    FILE *f = fopen("/proc/self/stat", "re");
    size_t n;

    if (!f)
        return -errno;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name (field 2) is in parentheses and may hold anything: skip to the last ')'. */
    s = strrchr(buf, ')');
    /* Fields 3 .. 23: state, 10 numbers, utime, stime, 7 numbers, vsize. */
    if (!s || tck <= 0 ||
        sscanf(s + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
                      "%*d %*d %*u %llu", &utime, &stime, &vsize) != 3)
        return -EIO;
    p->cpu_seconds = (double)(utime + stime) / (double)tck;
    p->virtual_bytes = vsize;
    return 0;
}

/* Resident pages (field 2 of /proc/self/statm), in bytes. */
static int read_statm(struct metrics_process *p)
{
    unsigned long long size, resident;
    long page = sysconf(_SC_PAGESIZE);
    FILE *f = fopen("/proc/self/statm", "re");
    int n;

    if (!f)
        return -errno;
    n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    if (n != 2 || page <= 0)
        return -EIO;
    p->resident_bytes = resident * (unsigned long long)page;
    return 0;
}

/* Entries of /proc/self/fd but the one reading it. */
static int count_fds(struct metrics_process *p)
{
    DIR *d = opendir("/proc/self/fd");
    const struct dirent *e;
    uint64_t n = 0;

    if (!d)
        return -errno;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    p->open_fds = n > 0 ? n - 1 : 0;
    return 0;
}

int metrics_process_read(struct metrics_process *ret)
{
    struct rlimit rl;
    int r;

    memset(ret, 0, sizeof(*ret));
    r = read_stat(ret);
    if (r == 0)
        r = read_statm(ret);
    if (r == 0)
        r = count_fds(ret);
    if (r == 0 && getrlimit(RLIMIT_NOFILE, &rl) < 0)
        r = -errno;
    if (r == 0)
        ret->max_fds = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
    return r;
}

static void put_gauge(FILE *f, const char *name, const char *type, const char *help,
                      unsigned long long v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

void metrics_process_render(FILE *f, const struct metrics *m)
{
    struct metrics_process p;

    if (metrics_process_read(&p) == 0) {
        fprintf(f, "# HELP process_cpu_seconds_total Total user and system CPU time spent in "
                   "seconds.\n# TYPE process_cpu_seconds_total counter\n"
                   "process_cpu_seconds_total %.2f\n", p.cpu_seconds);
        put_gauge(f, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                  p.resident_bytes);
        put_gauge(f, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
                  p.virtual_bytes);
        put_gauge(f, "process_open_fds", "gauge", "Number of open file descriptors.",
                  p.open_fds);
        put_gauge(f, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
                  p.max_fds);
    }
    fprintf(f, "# HELP process_start_time_seconds Start time of the process since the Unix "
               "epoch in seconds.\n# TYPE process_start_time_seconds gauge\n"
               "process_start_time_seconds %.3f\n", m->start_time);
}
