/* SPDX-License-Identifier: MIT */
/*
 * harness_proc: processes the integration tests start besides divvyd
 * (harness.h): forked client processes, reaped with a deadline, and
 * one-shot divvyd runs (--check and the like) whose output is collected.
 * Every child is in the registry (harness.c) until reaped.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness_private.h"

/* ---- client processes ----------------------------------------------------------- */

int harness_spawn(int (*fn)(void *arg), void *arg, pid_t *ret_pid)
{
    pid_t parent = getpid(), pid;

    harness_reg_init();
    fflush(NULL);
    pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        _exit(fn(arg) & 0x7f);
    }
    harness_reg_add_child(pid);
    *ret_pid = pid;
    return 0;
}

int harness_reap(pid_t pid, int timeout_ms, int *ret_status)
{
    uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
    int st = 0;

    for (;;) {
        pid_t p = waitpid(pid, &st, WNOHANG);

        if (p == pid)
            break;
        if (p < 0) {
            int r = -errno;

            harness_reg_del_child(pid);
            return r;
        }
        if (harness_remaining_ms(deadline) == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            harness_reg_del_child(pid);
            return -ETIMEDOUT;
        }
        harness_pause_ms(5);
    }
    harness_reg_del_child(pid);
    *ret_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return 0;
}

/* ---- one-shot runs ---------------------------------------------------------------- */

static void collect(int fd, char *buf, size_t size, size_t *used, bool *open_)
{
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof(tmp));

    if (n <= 0) {
        if (n == 0 || (errno != EINTR && errno != EAGAIN))
            *open_ = false;
        return;
    }
    if (buf && size > 0 && *used < size - 1) {
        size_t k = (size_t)n < size - 1 - *used ? (size_t)n : size - 1 - *used;

        memcpy(buf + *used, tmp, k);
        *used += k;
        buf[*used] = '\0';
    }
}

int harness_run_divvyd(const char *const *args, int timeout_ms, int *ret_status,
                       char *out, size_t out_size, char *err, size_t err_size)
{
    const char *argv[32];
    int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, n = 0, st = 0, r = 0;
    size_t used_o = 0, used_e = 0;
    bool open_o = true, open_e = true;
    uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
    pid_t parent = getpid(), pid;

    harness_reg_init();
    if (out && out_size)
        out[0] = '\0';
    if (err && err_size)
        err[0] = '\0';
    argv[n++] = harness_divvyd();
    while (*args && n < 31)
        argv[n++] = *args++;
    argv[n] = NULL;
    if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
        r = -errno;
        goto out;
    }
    pid = fork();
    if (pid < 0) {
        r = -errno;
        goto out;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        signal(SIGPIPE, SIG_DFL);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    harness_reg_add_child(pid);
    close(po[1]);
    close(pe[1]);
    po[1] = pe[1] = -1;
    while (open_o || open_e) {
        struct pollfd pfd[2] = { { .fd = open_o ? po[0] : -1, .events = POLLIN },
                                 { .fd = open_e ? pe[0] : -1, .events = POLLIN } };
        int k = poll(pfd, 2, harness_remaining_ms(deadline));

        if (k == 0)
            break;
        if (k < 0)
            continue;
        if (pfd[0].revents)
            collect(po[0], out, out_size, &used_o, &open_o);
        if (pfd[1].revents)
            collect(pe[0], err, err_size, &used_e, &open_e);
    }
    r = harness_reap(pid, harness_remaining_ms(deadline) + 2000, &st);
    if (r == 0)
        *ret_status = st;
out:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0)
            close(po[i]);
        if (pe[i] >= 0)
            close(pe[i]);
    }
    return r;
}

bool harness_same_reply(const char *a, const char *b)
{
    char ta[HARNESS_LINE], tb[HARNESS_LINE], *sa = NULL, *sb = NULL, *fa, *fb;
    int field = 0;

    if (strcmp(a, b) == 0)
        return true;
    snprintf(ta, sizeof(ta), "%s", a);
    snprintf(tb, sizeof(tb), "%s", b);
    fa = strtok_r(ta, " ", &sa);
    fb = strtok_r(tb, " ", &sb);
    for (; fa && fb; fa = strtok_r(NULL, " ", &sa), fb = strtok_r(NULL, " ", &sb), field++) {
        if (strcmp(fa, fb) == 0)
            continue;
        if (field != 3 || strncmp(ta, "OK", 2) != 0 || llabs(atoll(fa) - atoll(fb)) > 1)
            return false;
    }
    return !fa && !fb;
}

/* ---- divvyctl ---------------------------------------------------------------- */

#define CTL_NOBODY   65534
#define CTL_OUT_MAX  (256 * 1024)
#define CTL_ARGS_MAX 32

struct ctl_child {
    const char *argv[CTL_ARGS_MAX + 2];
    const char *stdin_path;
    bool as_nobody;
    char out_path[HARNESS_PATH], err_path[HARNESS_PATH];
};

static int ctl_child(void *arg)
{
    struct ctl_child *r = arg;
    int fo, fe, in;

    if (r->as_nobody &&
        (setgroups(0, NULL) < 0 || setgid(CTL_NOBODY) < 0 || setuid(CTL_NOBODY) < 0))
        return 120;
    fo = open(r->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    fe = open(r->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    in = open(r->stdin_path ? r->stdin_path : "/dev/null", O_RDONLY);
    if (fo < 0 || fe < 0 || in < 0)
        return 121;
    dup2(in, 0);
    dup2(fo, 1);
    dup2(fe, 2);
    unsetenv("DIVVY_ADDRESS");
    execv(r->argv[0], (char *const *)r->argv);
    return 122;
}

/* The file at @path in scratch memory, NUL-terminated; the file removed. */
static char *ctl_slurp(const char *path)
{
    char *buf = harness_scratch(CTL_OUT_MAX);
    FILE *f = fopen(path, "r");
    size_t n = 0;

    assert_non_null(buf);
    if (f) {
        n = fread(buf, 1, CTL_OUT_MAX - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    unlink(path);
    return buf;
}

struct harness_ctl *harness_ctl_run(bool as_nobody, const char *stdin_path, int want,
                                    const char *const *args)
{
    static unsigned seq;
    const char *env = getenv("DIVVYCTL"), *dir = getenv("TMPDIR");
    const char *ctl = env && env[0] ? env : "build/divvyctl";
    struct ctl_child *r = harness_scratch(sizeof(*r));
    struct harness_ctl *ret = harness_scratch(sizeof(*ret));
    size_t n = 0;
    pid_t pid = -1;

    assert_non_null(r);
    assert_non_null(ret);
    memset(r, 0, sizeof(*r));
    r->argv[n++] = as_nobody ? harness_public_copy(ctl) : ctl;
    if (!r->argv[0])
        fail_msg("copying %s for nobody: %s", ctl, strerror(errno));
    for (size_t i = 0; args[i]; i++) {
        if (n > CTL_ARGS_MAX)
            fail_msg("divvyctl: more than %d arguments", CTL_ARGS_MAX);
        r->argv[n++] = args[i];
    }
    r->stdin_path = stdin_path;
    r->as_nobody = as_nobody;
    if (!dir || !dir[0])
        dir = "/tmp";
    snprintf(r->out_path, sizeof(r->out_path), "%s/divvyctl-run.%d.%u.out", dir, (int)getpid(),
             seq);
    snprintf(r->err_path, sizeof(r->err_path), "%s/divvyctl-run.%d.%u.err", dir, (int)getpid(),
             seq++);
    CHECK(harness_spawn(ctl_child, r, &pid));
    CHECK(harness_reap(pid, 30000, &ret->status));
    ret->out = ctl_slurp(r->out_path);
    ret->err = ctl_slurp(r->err_path);
    if (want >= 0 && ret->status != want) {
        char cmd[1024] = "";

        for (size_t i = 0; args[i]; i++)
            snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), " %s", args[i]);
        fail_msg("divvyctl%s: exit %d, want %d\nstdout: %s\nstderr: %s", cmd, ret->status, want,
                 ret->out, ret->err);
    }
    return ret;
}
