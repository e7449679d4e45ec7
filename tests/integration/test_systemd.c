/* SPDX-License-Identifier: MIT */
/*
 * Integration: divvyd under systemd's contracts, without systemd as PID 1.
 *   - `systemd-analyze verify` on systemd/divvyd.{service,socket} (paths
 *     pointed at the build, man pages found through MANPATH) and on the
 *     example systemd/run-divvy.mount (not installed as a unit) prints nothing;
 *     sysusers.d and tmpfiles.d files applied to a scratch root give the
 *     users, groups and a setgid /run/divvy.
 *   - sd_notify: a datagram socket as $NOTIFY_SOCKET and $WATCHDOG_USEC set;
 *     the real divvyd sends READY=1 with a STATUS=, STATUS= updates with the
 *     hits counted, WATCHDOG=1 pings at half the interval, and STOPPING=1 on
 *     SIGTERM.
 *   - socket activation through systemd-socket-activate: divvyd adopts the
 *     passed Unix and TCP sockets (and binds a config address that was not
 *     passed), serves on them, and leaves the passed socket file in place.
 * Needs systemd-analyze, systemd-sysusers, systemd-tmpfiles and
 * systemd-socket-activate (Debian package systemd); a test skips when one is
 * missing.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define OUT_MAX 65536

static const char config_text[] =
    "rules = (\n"
    "  { match = { method = \"GET\"; path = \"/status\"; }; credit_limit = 1000;\n"
    "    reset_seconds = 60; label = \"status\"; },\n"
    "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static bool have(const char *cmd)
{
    char line[256];

    snprintf(line, sizeof(line), "command -v %s >/dev/null 2>&1", cmd);
    return system(line) == 0;
}

/* Runs @cmd with sh; stdout and stderr into @out.  Returns the exit status. */
static int run(const char *cmd, char *out, size_t size)
{
    char *full;
    size_t len = 0;
    FILE *p;
    int st;

    assert_true(asprintf(&full, "(%s) 2>&1", cmd) > 0);
    p = popen(full, "r");
    free(full);
    assert_non_null(p);
    len = fread(out, 1, size - 1, p);
    out[len] = '\0';
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static char *scratch_dir(void)
{
    char *dir = harness_scratch(64);

    assert_non_null(dir);
    strcpy(dir, "/tmp/divvy-systemd-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return dir;
}

static void remove_dir(const char *dir)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- units ---------------------------------------------------------------------- */

static void test_systemd_units_verify_clean(void **state)
{
    char *dir, *out = harness_scratch(OUT_MAX), cmd[4096], src[512];
    const char *ctl = getenv("DIVVYCTL");

    (void)state;
    assert_non_null(out);
    if (!have("systemd-analyze"))
        skip();
    dir = scratch_dir();
    /* divvyctl may not be built yet; verify only needs an executable there. */
    if (!ctl || access(ctl, X_OK) != 0)
        ctl = "/bin/true";
    CHECK(harness_src_path("", src, sizeof(src)));
    snprintf(cmd, sizeof(cmd),
             "set -e; cd '%s'; mkdir -p man/man3 man/man5 man/man8;"
             "cp '%s'/docs/man/*.3 man/man3/; cp '%s'/docs/man/*.5 man/man5/;"
             "cp '%s'/docs/man/*.8 man/man8/;"
             "sed -e 's|/usr/sbin/divvyd|%s|' -e 's|/usr/bin/divvyctl|%s|'"
             " '%s'/systemd/divvyd.service > divvyd.service;"
             "cp '%s'/systemd/divvyd.socket divvyd.socket;"
             "cp '%s'/systemd/run-divvy.mount run-divvy.mount",
             dir, src, src, src, harness_divvyd(), ctl, src, src, src);
    assert_int_equal(run(cmd, out, OUT_MAX), 0);
    /* Exit 0 is not enough: verify warns and still exits 0.  Nothing is clean. */
    snprintf(cmd, sizeof(cmd), "cd '%s' && MANPATH='%s/man' systemd-analyze verify "
             "./divvyd.socket ./divvyd.service ./run-divvy.mount", dir, dir);
    if (run(cmd, out, OUT_MAX) != 0 || out[0])
        fail_msg("systemd-analyze verify:\n%s", out);
    remove_dir(dir);
}

static void test_systemd_sysusers_tmpfiles(void **state)
{
    char *dir, *out = harness_scratch(OUT_MAX), cmd[2048], src[512], path[256];
    struct stat st;
    struct group *gr;
    FILE *f;
    gid_t fast_gid = (gid_t)-1;

    (void)state;
    assert_non_null(out);
    if (!have("systemd-sysusers") || !have("systemd-tmpfiles"))
        skip();
    if (geteuid() != 0)
        skip();                 /* tmpfiles chowns /run/divvy in the scratch root */
    dir = scratch_dir();
    CHECK(harness_src_path("", src, sizeof(src)));
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'/etc '%s'/run && "
             "systemd-sysusers --root='%s' '%s'/systemd/divvy.sysusers && "
             "systemd-tmpfiles --create --root='%s' '%s'/systemd/divvy.tmpfiles",
             dir, dir, dir, src, dir, src);
    if (run(cmd, out, OUT_MAX) != 0)
        fail_msg("%s:\n%s", cmd, out);
    snprintf(path, sizeof(path), "%s/etc/passwd", dir);
    snprintf(cmd, sizeof(cmd), "grep -q '^divvy:x:[0-9]*:[0-9]*:.*:/usr/sbin/nologin$' '%s'",
             path);
    if (run(cmd, out, OUT_MAX) != 0)
        fail_msg("no system user divvy with nologin in %s", path);
    snprintf(path, sizeof(path), "%s/etc/group", dir);
    f = fopen(path, "r");
    assert_non_null(f);
    {
        bool seen[3] = { false, false, false };

        while ((gr = fgetgrent(f)) != NULL) {
            seen[0] |= strcmp(gr->gr_name, "divvy") == 0;
            seen[2] |= strcmp(gr->gr_name, "divvy-admin") == 0;
            if (strcmp(gr->gr_name, "divvy-fast") == 0) {
                seen[1] = true;
                fast_gid = gr->gr_gid;
            }
        }
        assert_true(seen[0] && seen[1] && seen[2]);
    }
    fclose(f);
    snprintf(path, sizeof(path), "%s/run/divvy", dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    /* Setgid divvy-fast: the tables divvyd creates there take that group. */
    assert_int_equal(st.st_mode & 07777, 02755);
    assert_int_equal(st.st_gid, fast_gid);
    remove_dir(dir);
}

/* ---- sd_notify ------------------------------------------------------------------------ */

struct notify_rx {
    int fd;
    char path[100];
    char *log;                  /* every message received, each followed by "\n--\n" */
    size_t len, cap;
};

static void notify_open(struct notify_rx *rx, const char *dir)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };

    snprintf(rx->path, sizeof(rx->path), "%s/notify", dir);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", rx->path);
    rx->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(rx->fd >= 0);
    assert_int_equal(bind(rx->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    rx->cap = OUT_MAX;
    rx->log = harness_scratch(rx->cap);
    assert_non_null(rx->log);
}

/* Receives until a message contains @needle (returns 0) or @timeout_ms pass. */
static int notify_wait(struct notify_rx *rx, const char *needle, int timeout_ms)
{
    uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
    char msg[4096];
    ssize_t n;

    for (;;) {
        struct pollfd p = { .fd = rx->fd, .events = POLLIN };
        uint64_t now = harness_now_ms();

        if (now >= deadline)
            return -ETIMEDOUT;
        if (poll(&p, 1, (int)(deadline - now)) <= 0)
            continue;
        n = recv(rx->fd, msg, sizeof(msg) - 1, 0);
        if (n < 0)
            return -errno;
        msg[n] = '\0';
        if (rx->len + (size_t)n + 5 < rx->cap)
            rx->len += (size_t)snprintf(rx->log + rx->len, rx->cap - rx->len, "%s\n--\n", msg);
        if (strstr(msg, needle))
            return 0;
    }
}

static unsigned count_of(const char *haystack, const char *needle)
{
    unsigned n = 0;

    for (const char *p = haystack; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static void test_systemd_notify_ready_watchdog_stopping(void **state)
{
    struct harness_opts o = { .config_text = config_text, .workers = 2 };
    struct harness_daemon *d = NULL;
    struct harness_conn *c = NULL;
    struct notify_rx rx = { .fd = -1 };
    char *dir = scratch_dir(), *ready;
    uint64_t t0;
    unsigned pings;
    int st;

    (void)state;
    notify_open(&rx, dir);
    setenv("NOTIFY_SOCKET", rx.path, 1);
    setenv("WATCHDOG_USEC", "400000", 1);       /* a ping every 200 ms */
    unsetenv("WATCHDOG_PID");
    st = harness_start(&o, &d);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    CHECK(st);

    /* READY=1 comes with a status naming the rules in force. */
    if (notify_wait(&rx, "READY=1", 5000) < 0)
        fail_msg("no READY=1; received:\n%s", rx.log);
    ready = strstr(rx.log, "READY=1");
    assert_non_null(strstr(ready, "STATUS="));
    assert_non_null(strstr(ready, "2 rules"));

    /* STATUS= follows what happens: two hits show up within a tick or two. */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT method=GET path=/status", true, 999, 59, 60);
    EXPECT_OK(c, "HIT method=GET path=/nothing", false, 0, 0, 0);
    if (notify_wait(&rx, "2 hits (1 accepted, 1 rejected)", 5000) < 0)
        fail_msg("no STATUS= with the hits; received:\n%s", rx.log);

    /* WATCHDOG=1 at half the interval: about 7 in 1.5 s (at least 4 on a slow machine). */
    t0 = harness_now_ms();
    while (harness_now_ms() - t0 < 1500)
        notify_wait(&rx, "no such message", (int)(1500 - (harness_now_ms() - t0)));
    pings = count_of(rx.log, "WATCHDOG=1");
    if (pings < 4)
        fail_msg("%u WATCHDOG=1 pings; received:\n%s", pings, rx.log);

    harness_close(c);
    CHECK(harness_stop(d, &st));
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (notify_wait(&rx, "STOPPING=1", 5000) < 0)
        fail_msg("no STOPPING=1; received:\n%s", rx.log);
    /* Nothing after STOPPING=1 claims readiness again. */
    assert_null(strstr(strstr(rx.log, "STOPPING=1"), "READY=1"));
    close(rx.fd);
    harness_free(d);
    remove_dir(dir);
}

/* ---- socket activation ---------------------------------------------------------------- */

/* PING on @addr ("unix:PATH" or a TCP port) until it answers or @timeout_ms pass. */
static int ping_until(const char *path, int port, int timeout_ms)
{
    uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
    struct harness_conn *c = NULL;
    char reply[64];
    int r;

    do {
        r = path ? harness_connect_unix(path, &c) : harness_connect_tcp(port, &c);
        if (r >= 0) {
            r = harness_cmd(c, "PING", reply, sizeof(reply)) < 0 ? -EPROTO
                : strcmp(reply, "OK pong") == 0 ? 0 : -EPROTO;
            harness_close(c);
            c = NULL;
            if (r == 0)
                return 0;
        }
        /* Polling a listener with a deadline: there is no event to wait on. */
        harness_pause_ms(20);
    } while (harness_now_ms() < deadline);
    return r;
}

static bool log_has(const char *log_path, const char *needle)
{
    char cmd[1024], out[64];

    snprintf(cmd, sizeof(cmd), "grep -qF -- '%s' '%s'", needle, log_path);
    return run(cmd, out, sizeof(out)) == 0;
}

static void test_systemd_socket_activation(void **state)
{
    char *dir = scratch_dir(), conf[128], sock[128], own[128], state_dir[128], logp[128];
    char listen_tcp[64], fdnames[64], line[512], resp[128];
    struct stat sb;
    pid_t pid;
    int port = harness_free_port(SOCK_STREAM), st, logfd;
    FILE *f;

    (void)state;
    if (!have("systemd-socket-activate"))
        skip();
    snprintf(conf, sizeof(conf), "%s/divvy.conf", dir);
    snprintf(sock, sizeof(sock), "%s/divvy.sock", dir);
    snprintf(own, sizeof(own), "%s/own.sock", dir);
    snprintf(resp, sizeof(resp), "%s/resp.sock", dir);
    snprintf(state_dir, sizeof(state_dir), "%s/state", dir);
    snprintf(logp, sizeof(logp), "%s/divvyd.log", dir);
    snprintf(listen_tcp, sizeof(listen_tcp), "127.0.0.1:%d", port);
    snprintf(fdnames, sizeof(fdnames), "--fdname=divvy:tcp:resp");
    assert_int_equal(mkdir(state_dir, 0755), 0);
    /* The config names the passed socket (adopted, not bound again) and one
     * more (bound by divvyd itself); the passed TCP socket is not named; the
     * passed resp.sock is named with "resp:", so it speaks RESP. */
    f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f, "server = { listen = [ \"unix:%s\", \"unix:%s\", \"resp:unix:%s\" ]; };\n%s",
            sock, own, resp, config_text);
    assert_int_equal(fclose(f), 0);

    logfd = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(logfd >= 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sigset_t none;

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(logfd, 1);
        dup2(logfd, 2);
        execlp("systemd-socket-activate", "systemd-socket-activate", "-l", sock, "-l",
               listen_tcp, "-l", resp, fdnames, harness_divvyd(), "--config", conf,
               "--state-dir", state_dir, (char *)NULL);
        _exit(127);
    }
    close(logfd);

    /* Connecting starts the service; PING answers once divvyd adopted the socket. */
    if (ping_until(sock, 0, HARNESS_START_MS) < 0 || ping_until(NULL, port, 5000) < 0 ||
        ping_until(own, 0, 5000) < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        snprintf(line, sizeof(line), "cat '%s' >&2", logp);
        assert_int_equal(system(line), 0);
        fail_msg("divvyd did not serve on the activated sockets");
    }
    snprintf(line, sizeof(line), "listening on unix:%s (socket activation, divvy)", sock);
    assert_true(log_has(logp, line));
    snprintf(line, sizeof(line), "listening on tcp:127.0.0.1:%d (socket activation, tcp)", port);
    assert_true(log_has(logp, line));
    snprintf(line, sizeof(line), "listening on unix:%s", own);
    assert_true(log_has(logp, line));
    {
        struct harness_conn *c;
        char reply[64];

        CHECK(harness_connect_unix(resp, &c));
        CHECK(harness_send(c, "PING\r\n", 6));
        CHECK(harness_recv_line(c, reply, sizeof(reply), HARNESS_TIMEOUT_MS));
        assert_string_equal(reply, "+PONG\r");
        harness_close(c);
    }

    assert_int_equal(kill(pid, SIGTERM), 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(line, sizeof(line), "cat '%s' >&2", logp);
        assert_int_equal(system(line), 0);
        fail_msg("divvyd exited with status 0x%x", st);
    }
    /* systemd's socket file stays (it still holds it); divvyd's own is gone. */
    assert_int_equal(stat(sock, &sb), 0);
    assert_true(S_ISSOCK(sb.st_mode));
    assert_int_equal(stat(own, &sb), -1);
    remove_dir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_systemd_units_verify_clean, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_systemd_sysusers_tmpfiles, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_systemd_notify_ready_watchdog_stopping,
                                        harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_systemd_socket_activation, harness_setup,
                                        harness_teardown),
    };

    return cmocka_run_group_tests_name("systemd", tests, NULL, NULL);
}
