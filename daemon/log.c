/* SPDX-License-Identifier: MIT */
/* log: stderr or syslog, journald priorities, rate limiting (see log.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define RL_INTERVAL_S 10
#define RL_BURST      5

static enum log_target log_to;
static bool log_journal;
static bool log_debug;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void log_init(enum log_target target, bool debug)
{
    log_to = target;
    log_debug = debug;
    log_journal = getenv("JOURNAL_STREAM") != NULL;
    if (target == LOG_TARGET_SYSLOG)
        openlog("divvyd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

static void log_v(int prio, const char *fmt, va_list ap)
{
    char line[1024];

    if (prio == LOG_DEBUG && !log_debug)
        return;
    vsnprintf(line, sizeof(line), fmt, ap);
    /* A newline inside a message would forge a second log line. */
    for (char *p = line; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    if (log_to == LOG_TARGET_SYSLOG) {
        syslog(prio, "%s", line);
        return;
    }
    pthread_mutex_lock(&log_lock);
    if (log_journal)
        fprintf(stderr, "<%d>%s\n", prio, line);
    else
        fprintf(stderr, "divvyd: %s\n", line);
    pthread_mutex_unlock(&log_lock);
}

void log_msg(int prio, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_v(prio, fmt, ap);
    va_end(ap);
}

void log_ratelimited(struct log_ratelimit *rl, int prio, const char *fmt, ...)
{
    struct timespec ts;
    unsigned long now, suppressed = 0;
    bool emit;
    va_list ap;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    now = (unsigned long)ts.tv_sec;
    pthread_mutex_lock(&log_lock);
    if (now - rl->window_start_s >= RL_INTERVAL_S || rl->window_start_s == 0) {
        suppressed = rl->suppressed;
        rl->window_start_s = now ? now : 1;
        rl->burst = 0;
        rl->suppressed = 0;
    }
    emit = rl->burst < RL_BURST;
    if (emit)
        rl->burst++;
    else
        rl->suppressed++;
    pthread_mutex_unlock(&log_lock);

    if (suppressed)
        log_msg(prio, "(%lu similar messages suppressed)", suppressed);
    if (!emit)
        return;
    va_start(ap, fmt);
    log_v(prio, fmt, ap);
    va_end(ap);
}
