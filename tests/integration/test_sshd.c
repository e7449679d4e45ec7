/* SPDX-License-Identifier: MIT */
/*
 * Integration: login throttling through a real OpenSSH sshd (docs/pam.md).  sshd -D -e runs on
 * 127.0.0.1:<free port> with its own sshd_config and host key in the daemon's temp dir,
 * UsePAM yes and keyboard-interactive only, under pam_wrapper (LD_PRELOAD=libpam_wrapper.so,
 * PAM_WRAPPER_SERVICE_DIR: an "sshd" service with pam_matrix for passwords and the real
 * pam_divvy.so in its three modes); the real divvyd holds "lockout" login rules.  Logins are
 * driven with sshpass + ssh.  Checked: a good password gets a shell; made-up user names count
 * on their source (unknown_users=source), lock it for them, and leave root alone; the ramping
 * delay (wall time, lower bound only); the lock and its message, seen ONCE in the client's
 * output; the second lock escalated.  Root only (sshd and pam_divvy must be root): exit 77
 * otherwise, or when sshd, ssh, sshpass, ssh-keygen, pam_wrapper or pam_matrix are missing.
 * Every process started here (sshd, the clients) is stopped by PID.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#if defined(__SANITIZE_ADDRESS__)
#define SSHD_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SSHD_TEST_ASAN 1
#endif
#endif
#ifndef SSHD_TEST_ASAN
#define SSHD_TEST_ASAN 0
#endif
#include "lockout_rules.h"

#define PASSWORD     "s3cret"
#define SSHD         "/usr/sbin/sshd"
#define PAM_WRAPPER  "libpam_wrapper.so"
#define MATRIX_REL   "pam_wrapper/pam_matrix.so"
#define RUN_SSHD     "/run/sshd"        /* sshd's privilege separation directory */
#define CLIENT_MS    60000

/* A 10 s first lock: room for a loaded machine's ssh handshakes before it ends. */
static const char rules[] = LOCKOUT_RULES(10, 20, 3);

static char matrix[PATH_MAX];
static bool made_run_sshd;

/* The first existing "<libdir>/<rel>" of the usual library directories, or "". */
static void find_lib(const char *rel, char *buf, size_t size)
{
    static const char *const dirs[] = { "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                                        "/usr/lib64", "/usr/lib" };

    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(dirs) / sizeof(*dirs); i++) {
        snprintf(buf, size, "%s/%s", dirs[i], rel);
        if (access(buf, R_OK) == 0)
            return;
    }
    buf[0] = '\0';
}

/* The ASan runtime (libasan.so.N) in the multiarch library directory, or "". */
static void find_asan(char *buf, size_t size)
{
    static const char *const dirs[] = { "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                                        "/usr/lib64" };

    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(dirs) / sizeof(*dirs) && !buf[0]; i++) {
        for (int v = 20; v >= 5 && !buf[0]; v--) {
            snprintf(buf, size, "%s/libasan.so.%d", dirs[i], v);
            if (access(buf, R_OK) != 0)
                buf[0] = '\0';
        }
    }
}

/* True when @prog is an executable in PATH (or an absolute path). */
static bool have_prog(const char *prog)
{
    char cmd[256];

    snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", prog);
    return system(cmd) == 0;
}

/* ---- processes ------------------------------------------------------------------- */

struct run {
    const char *const *argv;
    const char *out;                /* stdout and stderr go here */
    const char *const *env;         /* extra NAME=VALUE, NULL-ended, or NULL */
};

static int run_child(void *arg)
{
    const struct run *r = arg;
    int fd = open(r->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
        return 126;
    for (size_t i = 0; r->env && r->env[i]; i++)
        putenv((char *)r->env[i]);
    execvp(r->argv[0], (char *const *)r->argv);
    return 127;
}

/* Runs @argv to its end (killed after CLIENT_MS): its exit status. */
static int run_wait(const char *const *argv, const char *out)
{
    struct run r = { .argv = argv, .out = out };
    pid_t pid;
    int status = -1;

    CHECK(harness_spawn(run_child, &r, &pid));
    CHECK(harness_reap(pid, CLIENT_MS, &status));
    return status;
}

/* The file @path, NUL-terminated, in harness_scratch() memory ("" while it is absent). */
static char *slurp(const char *path)
{
    char *buf = harness_scratch(65536);
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    assert_non_null(buf);
    if (fd < 0)
        return buf;                 /* not written yet: "" */
    n = read(fd, buf, 65535);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

/* ---- sshd ------------------------------------------------------------------------- */

struct sshd {
    struct harness_daemon *d;
    pid_t pid;
    int port;
    char log[HARNESS_PATH + 16];
    char out[HARNESS_PATH + 16];    /* the last client's output */
};

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[HARNESS_PATH + 64];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

static void sshd_start(struct sshd *s)
{
    char module[PATH_MAX], text[32768], key[HARNESS_PATH + 16];
    char cfg[HARNESS_PATH + 32], svcdir[HARNESS_PATH + 16], envs[5][2 * PATH_MAX];
    char asan[PATH_MAX] = "";
    const char *common = "unknown_users=source timeout_ms=5000";
    struct harness_opts o = { .config_text = rules };
    const char *senv[6];
    struct run r;
    uint64_t t0;

    CHECK(harness_start(&o, &s->d));
    harness_pam_module(module);

    snprintf(svcdir, sizeof(svcdir), "%s/pam", s->d->dir);
    assert_int_equal(mkdir(svcdir, 0700), 0);
    if (snprintf(text, sizeof(text),
             "auth requisite %s preauth socket=unix:%s max_delay=10 %s\n"
             "auth [success=1 default=ignore] %s passdb=%s/passdb\n"
             "auth [default=die] %s authfail socket=unix:%s %s\n"
             "auth sufficient %s authsucc socket=unix:%s %s\n"
             "auth requisite pam_deny.so\n"
             "account required pam_permit.so\n"
             "session required pam_permit.so\n",
             module, s->d->sock, common, matrix, s->d->dir, module, s->d->sock, common, module,
             s->d->sock, common) >= (int)sizeof(text))
        fail_msg("PAM service file too long");
    write_file(svcdir, "sshd", text);
    write_file(s->d->dir, "passdb", "root:" PASSWORD ":sshd\n");

    snprintf(key, sizeof(key), "%s/hostkey", s->d->dir);
    snprintf(s->out, sizeof(s->out), "%s/client.out", s->d->dir);
    if (run_wait((const char *const[]){ "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                                        key, NULL }, s->out) != 0)
        fail_msg("ssh-keygen: %s", slurp(s->out));
    s->port = harness_free_port(SOCK_STREAM);
    CHECK(s->port);
    snprintf(text, sizeof(text),
             "Port %d\nListenAddress 127.0.0.1\nHostKey %s\nPidFile none\nUsePAM yes\n"
             "KbdInteractiveAuthentication yes\nPasswordAuthentication no\n"
             "PubkeyAuthentication no\nPermitRootLogin yes\nStrictModes no\nUseDNS no\n"
             "AuthenticationMethods keyboard-interactive\nMaxAuthTries 10\n"
             "MaxStartups 100\nLogLevel VERBOSE\n", s->port, key);
    write_file(s->d->dir, "sshd_config", text);
    snprintf(cfg, sizeof(cfg), "%s/sshd_config", s->d->dir);
    snprintf(s->log, sizeof(s->log), "%s/sshd.log", s->d->dir);

    /* An ASan-built pam_divvy.so in an sshd that is not: the runtime must come first. */
    if (SSHD_TEST_ASAN) {
        find_asan(asan, sizeof(asan));
        if (!asan[0])
            fail_msg("ASan build: no libasan.so.N to preload into sshd");
    }
    snprintf(envs[0], sizeof(envs[0]), "LD_PRELOAD=%s%s%s", asan, asan[0] ? " " : "",
             PAM_WRAPPER);
    snprintf(envs[1], sizeof(envs[1]), "PAM_WRAPPER=1");
    snprintf(envs[2], sizeof(envs[2]), "PAM_WRAPPER_SERVICE_DIR=%s", svcdir);
    snprintf(envs[3], sizeof(envs[3]), "PAM_WRAPPER_DISABLE_DEEPBIND=1");
    snprintf(envs[4], sizeof(envs[4]), "ASAN_OPTIONS=detect_leaks=0");
    for (int i = 0; i < 5; i++)
        senv[i] = envs[i];
    senv[5] = NULL;
    r = (struct run){ .argv = (const char *const[]){ SSHD, "-D", "-e", "-f", cfg, NULL },
                      .out = s->log, .env = senv };
    CHECK(harness_spawn(run_child, &r, &s->pid));
    t0 = harness_now_ms();
    while (!strstr(slurp(s->log), "Server listening on")) {
        if (harness_now_ms() - t0 > 20000 || waitpid(s->pid, NULL, WNOHANG) == s->pid)
            fail_msg("sshd did not start:\n%s", slurp(s->log));
        usleep(50 * 1000);
    }
}

static void sshd_stop(struct sshd *s)
{
    int status;

    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        if (harness_reap(s->pid, 10000, &status) < 0)
            fprintf(stderr, "  (sshd %d did not stop at once; killed)\n", (int)s->pid);
        s->pid = 0;
    }
}

/* One ssh login as @user with @password (sshpass answers every prompt with it; a second
 * prompt ends the client): the client's exit status, its output in s->out, *ret_ms its time. */
static int ssh_login(struct sshd *s, const char *user, const char *password, uint64_t *ret_ms)
{
    char port[16], dest[128];
    uint64_t t0 = harness_now_ms();
    int status;

    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(dest, sizeof(dest), "%s@127.0.0.1", user);
    status = run_wait((const char *const[]){
                          "sshpass", "-p", password, "ssh", "-F", "/dev/null", "-p", port,
                          "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                          "-o", "PreferredAuthentications=keyboard-interactive",
                          "-o", "PubkeyAuthentication=no", "-o", "BatchMode=no",
                          "-o", "ConnectTimeout=20", "-o", "NumberOfPasswordPrompts=3",
                          dest, "echo", "divvy-shell-ran", NULL }, s->out);
    if (ret_ms)
        *ret_ms = harness_now_ms() - t0;
    return status;
}

/* A login that must fail, without a refusal message (the password was asked). */
static void wrong_password(struct sshd *s, const char *user)
{
    int st = ssh_login(s, user, "wrong", NULL);
    const char *out = slurp(s->out);

    if (st == 0 || strstr(out, "divvy-shell-ran"))
        fail_msg("a wrong password for %s logged in:\n%s", user, out);
}

/* The lock's message, exactly once in the client's output; its number of seconds. */
static long locked_once(struct sshd *s, const char *user)
{
    static const char msg[] = "Too many failed login attempts: locked for ";
    const char *out, *p;
    int st = ssh_login(s, user, PASSWORD, NULL);

    out = slurp(s->out);
    if (st == 0 || strstr(out, "divvy-shell-ran"))
        fail_msg("%s logged in while locked:\n%s", user, out);
    if (harness_count(out, msg) != 1)
        fail_msg("the lock's message is not in the client's output exactly once (%zu):\n%s",
                 harness_count(out, msg), out);
    p = strstr(out, msg) + strlen(msg);
    if (!strstr(p, " from this address."))
        fail_msg("no \"from this address\":\n%s", out);
    return strtol(p, NULL, 10) * (strncmp(strchr(p, ' '), " minute", 7) == 0 ? 60 : 1);
}

/* Polls PEEK until @user from 127.0.0.1 has all 3 failures again (lock over); 60 s at most. */
static void wait_unlocked(struct sshd *s, const char *user)
{
    char req[128], reply[HARNESS_LINE];
    uint64_t t0 = harness_now_ms();
    struct harness_conn *c = NULL;

    snprintf(req, sizeof(req), "PEEK event=authfail user=%s rhost=127.0.0.1", user);
    CHECK(harness_connect(s->d, HARNESS_UNIX, &c));
    for (;;) {
        CHECK(harness_cmd(c, req, reply, sizeof(reply)));
        if (strncmp(reply, "OK true 3 ", 10) == 0)
            break;
        if (harness_now_ms() - t0 > 60000)
            fail_msg("the lock of %s never ended: %s", user, reply);
        usleep(200 * 1000);
    }
    harness_close(c);
}

static void test_sshd_lockout(void **state)
{
    struct sshd s = { 0 };
    uint64_t ms;
    long first, second;
    char name[32];
    int st;

    (void)state;
    sshd_start(&s);
    /* The right password: a shell. */
    st = ssh_login(&s, "root", PASSWORD, NULL);
    if (st != 0 || !strstr(slurp(s.out), "divvy-shell-ran"))
        fail_msg("root with the right password (exit %d):\n%s\nsshd:\n%s", st, slurp(s.out),
                 slurp(s.log));

    /* Made-up names: counted on their source, locked there after 3 ... */
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof(name), "nosuch-divvy-%d", i);
        wrong_password(&s, name);
    }
    assert_true(locked_once(&s, "nosuch-divvy-9") >= 60);
    /* ... and root from the same source is not locked by them. */
    if (ssh_login(&s, "root", PASSWORD, NULL) != 0)
        fail_msg("root locked out by made-up names:\n%s", slurp(s.out));

    /* The ramping delay: after one failure the next attempt waits 3 s from that failure, then
     * logs in (and the good login resets the count).  A lower bound only.  The failure is
     * counted as pam_divvy's authfail would (a wrong password's own connection may already
     * sit out the delay before its next prompt, so its end is no clock to measure from). */
    {
        struct harness_conn *c = NULL;
        char reply[HARNESS_LINE];

        CHECK(harness_connect(s.d, HARNESS_UNIX, &c));
        CHECK(harness_cmd(c, "TAKE 1 event=authfail service=sshd user=root rhost=127.0.0.1 "
                             "tty=ssh", reply, sizeof(reply)));
        EXPECT_PREFIX(reply, "OK true 2 ");
        harness_close(c);
    }
    st = ssh_login(&s, "root", PASSWORD, &ms);
    if (st != 0)
        fail_msg("root after one failure (exit %d):\n%s", st, slurp(s.out));
    if (ms < 2500)
        fail_msg("the login after a failure took %llu ms: no 3 s delay", (unsigned long long)ms);

    /* Three failures lock root from this address for unlock_time (10 s): said once. */
    for (int i = 0; i < 3; i++)
        wrong_password(&s, "root");
    first = locked_once(&s, "root");
    assert_true(first >= 1 && first <= 10);
    /* The next lock of root from here is escalated: 20 times as long (200 s). */
    wait_unlocked(&s, "root");
    for (int i = 0; i < 3; i++)
        wrong_password(&s, "root");
    second = locked_once(&s, "root");
    if (second < 60)
        fail_msg("the second lock lasts %ld s, the first %ld s: not escalated", second, first);
    sshd_stop(&s);
}

static int suite_setup(void **state)
{
    (void)state;
    find_lib(MATRIX_REL, matrix, sizeof(matrix));
    /* sshd refuses to run without its privilege separation directory. */
    if (access(RUN_SSHD, F_OK) != 0) {
        if (mkdir(RUN_SSHD, 0755) != 0)
            return -1;
        made_run_sshd = true;
    }
    return 0;
}

static int suite_teardown(void **state)
{
    (void)state;
    if (made_run_sshd)
        rmdir(RUN_SSHD);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sshd_lockout, harness_setup, harness_teardown),
    };
    char lib[PATH_MAX];

    if (geteuid() != 0) {
        fprintf(stderr, "test_sshd: needs root (sshd, and pam_divvy asks divvyd as root)\n");
        return 77;
    }
    find_lib(PAM_WRAPPER, lib, sizeof(lib));
    find_lib(MATRIX_REL, matrix, sizeof(matrix));
    if (access(SSHD, X_OK) != 0 || !have_prog("ssh") || !have_prog("sshpass") ||
        !have_prog("ssh-keygen") || !lib[0] || !matrix[0]) {
        fprintf(stderr, "test_sshd: needs openssh-server (%s), openssh-client, sshpass, "
                "libpam-wrapper (pam_matrix); skipping\n", SSHD);
        return 77;
    }
    return cmocka_run_group_tests_name("sshd", tests, suite_setup, suite_teardown);
}
