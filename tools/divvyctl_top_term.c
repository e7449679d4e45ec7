/* SPDX-License-Identifier: MIT */
/*
 * divvyctl top's terminal: raw mode and the alternate screen only while top
 * runs interactively, keys and signals read through one poll().  Signals
 * are taken through a signalfd, so no handler and no global state is
 * needed to restore the terminal whatever ends top.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include "divvyctl_top.h"


int top_term_start(struct top_term *t, bool interactive)
{
    sigset_t mask;

    t->screen = interactive && isatty(STDOUT_FILENO);
    t->keys = false;
    t->sigfd = -1;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGWINCH);
    if (sigprocmask(SIG_BLOCK, &mask, &t->oldmask) < 0)
        return -errno;
    t->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (t->sigfd < 0) {
        int r = -errno;

        sigprocmask(SIG_SETMASK, &t->oldmask, NULL);
        return r;
    }
    if (t->screen && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &t->saved) == 0) {
        struct termios raw = t->saved;

        /* ISIG off: Ctrl-C arrives as a byte, so the terminal is always restored. */
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO | ISIG);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0)
            t->keys = true;
    }
    if (t->screen) {
        /* Alternate screen, cursor hidden. */
        fputs("\033[?1049h\033[?25l", stdout);
        fflush(stdout);
    }
    return 0;
}

void top_term_stop(struct top_term *t)
{
    if (t->screen) {
        fputs("\033[?25h\033[?1049l", stdout);
        fflush(stdout);
    }
    if (t->keys)
        tcsetattr(STDIN_FILENO, TCSANOW, &t->saved);
    if (t->sigfd >= 0) {
        close(t->sigfd);
        sigprocmask(SIG_SETMASK, &t->oldmask, NULL);
    }
}

/* Waits up to @ms for a key or a signal: 1 quit, 2 toggle sort, 3 redraw now, 0 timeout. */
int top_wait(struct top_term *t, int ms)
{
    struct pollfd pfd[2] = { { .fd = t->sigfd, .events = POLLIN },
                             { .fd = t->keys ? STDIN_FILENO : -1, .events = POLLIN } };
    uint64_t deadline = top_now_ms() + (uint64_t)ms;

    for (;;) {
        uint64_t now = top_now_ms();
        int k;

        if (now >= deadline)
            return 0;
        k = poll(pfd, 2, (int)(deadline - now));
        if (k < 0 && errno != EINTR)
            return 1;
        if (k <= 0)
            continue;
        if (pfd[0].revents) {
            struct signalfd_siginfo si;

            if (read(t->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
                return si.ssi_signo == SIGWINCH ? 3 : 1;
        }
        if (pfd[1].revents) {
            char c;

            if (read(STDIN_FILENO, &c, 1) != 1)
                return 1;
            if (c == 'q' || c == 'Q' || c == 3 || c == 4)
                return 1;
            if (c == 's' || c == 'S')
                return 2;
            if (c == ' ' || c == '\n' || c == '\r' || c == 12)
                return 3;
        }
    }
}

void top_winsize(int *rows, int *cols)
{
    struct winsize ws;

    *rows = 24;
    *cols = 80;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
        *rows = ws.ws_row;
        *cols = ws.ws_col;
    }
}

/* Prints one line cut to @cols columns (0: no cut), then a newline. */
void top_putf(FILE *f, int cols, bool screen, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    size_t len;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    len = n < 0 ? 0 : (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    if (cols > 0 && len > (size_t)cols)
        len = (size_t)cols;
    fwrite(line, 1, len, f);
    if (screen)
        fputs("\033[K", f);
    fputc('\n', f);
}
