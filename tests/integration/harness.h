/* SPDX-License-Identifier: MIT */
/*
 * harness: what divvy's integration tests share.  Starts the real divvyd
 * (the binary named by $DIVVYD) in a fresh mkdtemp() directory with a given
 * config, on a Unix socket inside that directory and a free loopback TCP
 * port; waits for a PING reply with a deadline; talks to it over raw sockets
 * with line helpers that time out; stops it by PID (SIGTERM, then SIGKILL
 * after a deadline) and removes the directory.
 *
 * Every daemon, connection and client process the harness starts is kept in
 * a registry, so harness_teardown() (a cmocka teardown) cleans up after a
 * failed assertion, an atexit() handler does the same when the binary exits,
 * and PR_SET_PDEATHSIG kills children if the test binary dies outright.
 * Start daemons and client processes from the main thread only (the death
 * signal follows the forking thread).  Connections may be used from any
 * thread, one thread per connection; cmocka assertions belong in the main
 * thread only, after every worker thread has been joined.
 *
 * Functions return 0 (or a byte count) on success and a negative errno on
 * failure, like the rest of divvy.
 */
#ifndef DIVVY_HARNESS_H
#define DIVVY_HARNESS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <setjmp.h>
#include <limits.h>               /* PATH_MAX for harness_pam_module() */
#include <sys/socket.h>           /* SOCK_STREAM, SOCK_DGRAM for harness_free_port() */
#include <sys/types.h>

#include <cmocka.h>

#include "proto.h"

#define HARNESS_TIMEOUT_MS  10000       /* default wait for one reply */
#define HARNESS_START_MS    30000       /* divvyd must answer PING within this */
#define HARNESS_STOP_MS     10000       /* SIGTERM to exit, before SIGKILL */
#define HARNESS_LINE        8192        /* reply buffers in tests */
#define HARNESS_PATH        256

enum harness_via { HARNESS_UNIX = 0, HARNESS_TCP };

struct harness_opts {
    /* File name inside the temp dir; its extension picks the format
     * (".ini", ".json", else libconfig).  Default "divvy.conf". */
    const char *config_name;
    const char *config_text;    /* written to the config file, or ... */
    const char *config_src;     /* ... an existing file copied there */
    unsigned workers;           /* 0: no -w */
    bool no_tcp;                /* no TCP listener */
    bool no_state_dir;          /* no -s (the config's state_dir applies) */
    bool resp;                  /* also the Redis protocol (docs/resp.md): resp:unix:
                                 * <dir>/resp.sock and resp:tcp:127.0.0.1:<resp_port> */
    const char *listen[4];      /* more --listen addresses ("rls:tcp:..."), NULL-ended;
                                 * borrowed: they must outlive the daemon */
};

struct harness_daemon {
    pid_t pid;                  /* 0 when not running */
    int tcp_port;               /* 0 without a TCP listener */
    int resp_port;              /* opts.resp: the RESP TCP listener's port */
    int status;                 /* wait status of the last exit */
    bool expect_exit;           /* set before a test makes divvyd exit on purpose */
    struct harness_opts opts;
    char dir[HARNESS_PATH];
    char config[HARNESS_PATH];
    char sock[HARNESS_PATH];
    char resp_sock[HARNESS_PATH];   /* opts.resp: the RESP Unix socket */
    char state[HARNESS_PATH];
    char log[HARNESS_PATH];
};

struct harness_conn {
    int fd;
    char *buf;                  /* received, not yet returned */
    size_t off, len, cap;
};

/* ---- environment ---------------------------------------------------------- */

/* $DIVVYD, or "build/divvyd" when unset. */
const char *harness_divvyd(void);
/* The source tree: $DIVVY_SRCDIR, else two levels above $DIVVYD
 * (build/divvyd), else ".".  For etc/ example configs. */
const char *harness_srcdir(void);
/* Writes "<srcdir>/<rel>" into @buf. */
int harness_src_path(const char *rel, char *buf, size_t size);

/* cmocka setup/teardown for any test that uses the harness.  Teardown stops
 * every daemon and client process still registered and closes every
 * connection; it fails (returns -1) when a daemon died by itself or did not
 * exit 0 on SIGTERM, so a crash or a sanitizer report fails the test. */
int harness_setup(void **state);
int harness_teardown(void **state);

/* ---- daemons -------------------------------------------------------------- */

/* Makes a temp dir, writes the config, starts divvyd, waits for PING on
 * every listener.  On failure prints divvyd's log and leaves nothing behind. */
int harness_start(const struct harness_opts *opts, struct harness_daemon **ret);
/* Starts divvyd again in the same dir with the same state dir (new TCP port). */
int harness_restart(struct harness_daemon *d);
/* SIGTERM, waits HARNESS_STOP_MS, then SIGKILL.  *ret_status (optional) is
 * the wait status.  Keeps the directory. */
int harness_stop(struct harness_daemon *d, int *ret_status);
/* Stops (if running), removes the temp dir, unregisters, frees.  NULL-safe. */
void harness_free(struct harness_daemon *d);
int harness_kill(struct harness_daemon *d, int sig);
/* true while the process has not exited (reaps it when it has). */
bool harness_alive(struct harness_daemon *d);
/* Replaces the config file atomically (write + rename). */
int harness_write_config(struct harness_daemon *d, const char *text);
/* Polls PING on every listener until @timeout_ms passes. */
int harness_wait_ready(struct harness_daemon *d, int timeout_ms);
/* 1 when divvyd's log contains @needle, 0 when not, or -errno. */
int harness_log_contains(struct harness_daemon *d, const char *needle);
/* Copies divvyd's log to stderr, prefixed. */
void harness_dump_log(struct harness_daemon *d);

/* ---- connections ---------------------------------------------------------- */

/* ---- libdivvy ---------------------------------------------------------------- */

struct divvy;
struct divvy_kv;

/* Points libdivvy's defaults at @d: DIVVY_ADDRESS=unix:<its socket>,
 * DIVVY_PATH unset (in this process and the children it forks afterwards).
 * 0 or -errno. */
int harness_divvy_env(const struct harness_daemon *d);

/* Waits up to 5 s until @h decides PEEK @kv in-process (a fresh daemon
 * writes its first heartbeat within a second); fails the test otherwise. */
void harness_wait_fast(struct divvy *h, const struct divvy_kv *kv, size_t n_kv);

int harness_connect(struct harness_daemon *d, enum harness_via via, struct harness_conn **ret);
int harness_connect_unix(const char *path, struct harness_conn **ret);
int harness_connect_tcp(int port, struct harness_conn **ret);
/* A bare blocking socket (SOCK_CLOEXEC) connected to the Unix socket @path,
 * or -errno: for floods from children that dropped privileges. */
int harness_unix_fd(const char *path);
/* The same over TCP to 127.0.0.1:@port from the local address @src (a
 * loopback address such as "127.0.0.2": another peer to divvyd), or -errno. */
int harness_tcp_fd_from(const char *src, int port);

/* A loopback port of @type (SOCK_STREAM, SOCK_DGRAM) nobody uses right now
 * (someone may take it before the caller binds it); fails the test when
 * the kernel gives none. */
int harness_free_port(int type);

/* GET @path from 127.0.0.1:@port (HTTP/1.0): the body's lines into @buf;
 * returns the HTTP status, -1 when the reply had no status line. */
int harness_http_get(int port, const char *path, char *buf, size_t size);
/* The same, waiting at most @timeout_ms for each line, and without failing
 * the test: -errno when it cannot connect or send. */
int harness_http_get_ms(int port, const char *path, char *buf, size_t size, int timeout_ms);

/* GETs @path until its body has the line @line (metrics gauges follow
 * divvyd's one-second tick), the last body in @buf; fails the test after
 * 10 s, or on a status other than 200. */
void harness_scrape_until(int port, const char *path, const char *line, char *buf,
                          size_t size);
/* Closes and frees.  NULL-safe. */
void harness_close(struct harness_conn *c);
/* Writes all of @data, reading replies into the buffer meanwhile so a big
 * pipeline cannot deadlock.  -ETIMEDOUT, -EPIPE, ... */
int harness_send(struct harness_conn *c, const void *data, size_t len);
int harness_sendf(struct harness_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Next line without its '\n' into @buf (NUL-terminated); returns its length.
 * -ETIMEDOUT, -ENOTCONN (peer closed before a full line), -EMSGSIZE. */
ssize_t harness_recv_line(struct harness_conn *c, char *buf, size_t size, int timeout_ms);
/* Sends @req plus '\n' and receives one reply line. */
ssize_t harness_cmd(struct harness_conn *c, const char *req, char *reply, size_t size);
/* Reads @n lines and appends each plus '\n' to @buf. */
int harness_recv_lines(struct harness_conn *c, unsigned n, char *buf, size_t size,
                       int timeout_ms);
/* Sends @req, expects "OK <n>" and reads the n lines into @buf; returns n. */
int harness_multi(struct harness_conn *c, const char *req, char *buf, size_t size);
/* 0 once the peer has closed; discards data meanwhile.  -ETIMEDOUT. */
int harness_wait_eof(struct harness_conn *c, int timeout_ms);
/* 1 when a byte arrives within @timeout_ms, 0 when none, 0 > on error. */
int harness_readable(struct harness_conn *c, int timeout_ms);

/* ---- replies -------------------------------------------------------------- */

/* Parses HIT's reply, exactly "OK <true|false> <credit> <secs>"; -EPROTO
 * otherwise (a fifth field included: HIT's reply never changes). */
int harness_parse_ok(const char *reply, bool *ret_allowed, long long *ret_credit,
                     long long *ret_secs);
/* Parses TAKE/PEEK/RESET's reply, exactly "OK <true|false> <credit> <secs>
 * <rule>"; the deciding rule's label or hex id goes to @ret_rule. */
int harness_parse_ok_rule(const char *reply, bool *ret_allowed, long long *ret_credit,
                          long long *ret_secs, char *ret_rule, size_t rule_size);
/* Parses one line of a multi-line reply (EXPLAIN, RULES: "name=value ..."
 * in the request grammar) with common/proto's own parser, so quoting is
 * compared by meaning, not by bytes.  -EPROTO when it does not parse. */
int harness_fields(const char *line, struct proto_req *ret);
/* The decoded value of @key in @req, or NULL. */
const char *harness_field(const struct proto_req *req, const char *key);

/* Value of "name=value" among STATS lines in @stats; -ENOENT. */
int harness_stat(const char *stats, const char *name, long long *ret);
/* True when the replies @a and @b are equal, or are OK lines that differ only
 * in the seconds field (the 4th) by one: a second may tick between two daemons. */
bool harness_same_reply(const char *a, const char *b);
/* STATS over @c into *ret for @name. */
int harness_get_stat(struct harness_conn *c, const char *name, long long *ret);
/* STATS line @name of @d, over a Unix connection of its own; fails the test
 * when it cannot be read. */
long long harness_daemon_stat(struct harness_daemon *d, const char *name);

/* ---- client processes ----------------------------------------------------- */

/* Forks a registered child that runs @fn(@arg) and _exit()s with its result. */
int harness_spawn(int (*fn)(void *arg), void *arg, pid_t *ret_pid);
/* Waits for a spawned child; *ret_status is its exit code, or 128 + signal.
 * Kills it after @timeout_ms.  */
int harness_reap(pid_t pid, int timeout_ms, int *ret_status);

/* A new empty directory under /tmp (mode 0700, this test's own) for files a
 * test writes: removed with everything in it by harness_teardown(), or at
 * exit, or by the next run if this one is killed.  NULL with errno set. */
const char *harness_tmp_dir(void);

/* ---- one-shot runs ---------------------------------------------------------- */

/* A divvyctl run: its exit code (or 128 + signal) and its output, each
 * NUL-terminated in harness_scratch() memory (at most 256 KiB). */
struct harness_ctl {
    int status;
    char *out, *err;
};

/*
 * Runs divvyctl ($DIVVYCTL, else build/divvyctl) with @args (NULL-terminated,
 * without argv[0], at most 32), DIVVY_ADDRESS unset, stdin from @stdin_path
 * (NULL: /dev/null); as uid and gid 65534 with no groups when @as_nobody
 * (from a copy nobody may run: the tree may sit in a 0700 dir).  Fails the
 * test, showing both outputs, when the exit code is not @want (< 0: any).
 */
struct harness_ctl *harness_ctl_run(bool as_nobody, const char *stdin_path, int want,
                                    const char *const *args);

/* Runs divvyd with @args (NULL-terminated, without argv[0]) and waits up to
 * @timeout_ms (then SIGKILL).  *ret_status is the exit code, or 128 + signal.
 * Its stdout and stderr are collected, NUL-terminated, into @out and @err
 * (either may be NULL; the excess is dropped). */
int harness_run_divvyd(const char *const *args, int timeout_ms, int *ret_status,
                       char *out, size_t out_size, char *err, size_t err_size);

/* ---- programs for unprivileged children ------------------------------------ */

/*
 * A copy of the program @path that any user may execute, for a child that
 * drops privileges (setuid(nobody)) and then execs it: the build tree may
 * sit in a mode-0700 directory (a clone in /root), which such a child
 * cannot enter.  The copy (0755) lives in a 0755 temp dir made once per test
 * binary and removed at exit; libdivvy.so.0, when it sits beside @path, is
 * copied beside the copy too (divvyctl finds it through its $ORIGIN rpath).
 * One copy per @path, reused.  Returns its path (valid until exit), or NULL
 * with errno set.  Call from the main thread, before forking the child.
 */
const char *harness_public_copy(const char *path);

/* ---- PAM --------------------------------------------------------------------- */

/*
 * Runs the real pam_divvy.so ($PAM_DIVVY, else $DIVVY_BUILD/pam_divvy.so) in
 * this process for @user from @rhost: writes the service file @service into
 * @d's directory ("auth @control <module> @args", then the lines @rest, or
 * none when NULL) and returns pam_authenticate()'s result.  Fails the test
 * when the module or the service cannot be set up.
 */
int harness_pam_auth(struct harness_daemon *d, const char *service, const char *control,
                     const char *args, const char *rest, const char *user, const char *rhost);
/* The real pam_divvy.so's absolute path ($PAM_DIVVY, else $DIVVY_BUILD/pam_divvy.so, else
 * build/pam_divvy.so) into @module; fails the test when there is none. */
void harness_pam_module(char module[PATH_MAX]);

/* ---- memory ---------------------------------------------------------------- */

/* Zeroed memory that lives until harness_teardown(), so a failed assertion
 * leaks nothing.  Main thread only.  NULL when out of memory. */
/* Removes @dir and everything below it (no symlink followed); "" is a no-op. */
void harness_rm_tree(const char *dir);
/* The names in @dir, sorted, space-separated ("" if empty, "-" if @dir does
 * not exist; at most 64 names). */
void harness_list_dir(const char *dir, char *buf, size_t size);
/* How many times @needle occurs in @hay (overlapping ones too). */
size_t harness_count(const char *hay, const char *needle);
/* Process @pid's resident set (VmRSS) in kB, from /proc; -1 when unknown. */
long long harness_rss_kb(pid_t pid);
void *harness_scratch(size_t size);

/* ---- misc ----------------------------------------------------------------- */

uint64_t harness_now_ms(void);
/* Sleeps @ms (only for pacing load, never to wait for an event). */
void harness_pause_ms(unsigned ms);
/* Makes a random-ish token for unique actors across runs. */
unsigned harness_rand(void);

/* ---- assertion helpers (main thread only) ---------------------------------- */

/* Fails the test with the call and strerror() when @expr is negative. */
#define CHECK(expr)                                                             \
    do {                                                                        \
        long long check_rc_ = (long long)(expr);                                \
        if (check_rc_ < 0)                                                      \
            fail_msg("%s: %s", #expr, strerror((int)-check_rc_));               \
    } while (0)

/* Sends @req on @c and asserts the exact reply line @want. */
#define EXPECT_REPLY(c, req, want)                                              \
    do {                                                                        \
        char expect_r_[HARNESS_LINE];                                           \
        CHECK(harness_cmd((c), (req), expect_r_, sizeof(expect_r_)));           \
        assert_string_equal(expect_r_, (want));                                 \
    } while (0)

/* Sends @req and asserts "OK <allowed> <credit> <secs>" with secs within
 * [smin, smax] (a second may tick between two requests). */
#define EXPECT_OK(c, req, allowed, credit, smin, smax)                          \
    do {                                                                        \
        char expect_r_[HARNESS_LINE];                                           \
        bool expect_a_;                                                         \
        long long expect_c_, expect_s_;                                         \
        CHECK(harness_cmd((c), (req), expect_r_, sizeof(expect_r_)));           \
        if (harness_parse_ok(expect_r_, &expect_a_, &expect_c_, &expect_s_) < 0 \
            || expect_a_ != (allowed) || expect_c_ != (credit)                  \
            || expect_s_ < (smin) || expect_s_ > (smax))                        \
            fail_msg("%s -> \"%s\", want OK %s %lld %lld..%lld", (req),         \
                     expect_r_, (allowed) ? "true" : "false",                   \
                     (long long)(credit), (long long)(smin), (long long)(smax)); \
    } while (0)

/* The same for TAKE/PEEK/RESET, whose reply names the deciding rule: @rule
 * is its label or id, or NULL for any. */
#define EXPECT_OK_RULE(c, req, allowed, credit, smin, smax, rule)               \
    do {                                                                        \
        char expect_r_[HARNESS_LINE], expect_id_[128];                          \
        const char *expect_want_ = (rule);                                      \
        bool expect_a_;                                                         \
        long long expect_c_, expect_s_;                                         \
        CHECK(harness_cmd((c), (req), expect_r_, sizeof(expect_r_)));           \
        if (harness_parse_ok_rule(expect_r_, &expect_a_, &expect_c_, &expect_s_, \
                                  expect_id_, sizeof(expect_id_)) < 0           \
            || expect_a_ != (allowed) || expect_c_ != (credit)                  \
            || expect_s_ < (smin) || expect_s_ > (smax)                         \
            || (expect_want_ && strcmp(expect_id_, expect_want_) != 0))         \
            fail_msg("%s -> \"%s\", want OK %s %lld %lld..%lld %s", (req),       \
                     expect_r_, (allowed) ? "true" : "false",                   \
                     (long long)(credit), (long long)(smin), (long long)(smax), \
                     expect_want_ ? expect_want_ : "<rule>");                   \
    } while (0)

/* Asserts that field @key of the parsed line @req is @want. */
#define EXPECT_FIELD(req, key, want)                                            \
    do {                                                                        \
        const char *expect_v_ = harness_field((req), (key));                    \
        if (!expect_v_ || strcmp(expect_v_, (want)) != 0)                       \
            fail_msg("field %s is %s%s%s, want \"%s\"", (key),                   \
                     expect_v_ ? "\"" : "", expect_v_ ? expect_v_ : "missing",   \
                     expect_v_ ? "\"" : "", (want));                            \
    } while (0)

/* Asserts that @reply starts with @prefix. */
#define EXPECT_PREFIX(reply, prefix)                                            \
    do {                                                                        \
        if (strncmp((reply), (prefix), strlen(prefix)) != 0)                    \
            fail_msg("reply \"%s\" does not start with \"%s\"", (reply), (prefix)); \
    } while (0)

#endif
