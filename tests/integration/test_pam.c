/* SPDX-License-Identifier: MIT */
/*
 * Integration: pam_divvy.so through the real libpam against a real divvyd
 * running the shipped etc/divvy.conf (its login-throttling rules).  The
 * stack is the shipped etc/pam.d/sshd-divvy snippet, with pam_matrix
 * (libpam-wrapper) standing in for pam_unix, loaded with pam_start_confdir()
 * from service files in a temp dir:
 *
 *   auth     requisite                    pam_divvy.so preauth ...
 *   auth     [success=1 default=ignore]   pam_matrix.so passdb=...
 *   auth     [default=die]                pam_divvy.so authfail ...
 *   auth     sufficient                   pam_divvy.so authsucc ...
 *   auth     requisite                    pam_deny.so
 *   account  required                     pam_divvy.so ...
 *
 * Checks: only pam_sm_* exported and dlopen(RTLD_NOW) works; 5 wrong
 * passwords lock a user from one source and the 6th attempt is refused
 * before the password prompt with "locked for 15 minutes from this address"; root is locked
 * after 3; an IPv4 client in IPv6 form (::ffff:a.b.c.d) counts as its IPv4
 * address, not with every other IPv4 client; a good password resets the count; an attacker elsewhere does not
 * lock the user out; 30 failures from one source lock that source for every
 * user; account phase; silent; daemon down and daemon hung, fail_open and
 * fail_closed, within the timeout; pamtester under pam_wrapper; 10,000
 * authentications in one process without leaking memory or descriptors
 * (`make asan` runs this under ASan+LSan).  Parts whose tools are missing
 * are skipped with a message.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <security/pam_appl.h>

#include "harness.h"

#if defined(__SANITIZE_ADDRESS__)
#define PAM_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PAM_TEST_ASAN 1
#endif
#endif
#ifndef PAM_TEST_ASAN
#define PAM_TEST_ASAN 0
#endif

#define LOOP_N        10000
#define PASSWORD      "s3cret"
#define WRONG         "wrong"

/* What the tests share: paths found once per run. */
static char pam_divvy[PATH_MAX];
static char pam_matrix[PATH_MAX];
static char confdir[PATH_MAX];          /* service files and passdb */

/* ---- setup -------------------------------------------------------------------- */

/* snprintf() that reports truncation: true when @n fit in @size. */
static bool fits(int n, size_t size)
{
    return n >= 0 && (size_t)n < size;
}

static int find_module(void)
{
    const char *env = getenv("PAM_DIVVY");
    const char *build = getenv("DIVVY_BUILD");
    char guess[PATH_MAX];

    if (env && env[0])
        snprintf(guess, sizeof(guess), "%s", env);
    else
        snprintf(guess, sizeof(guess), "%s/pam_divvy.so", build && build[0] ? build : "build");
    if (!realpath(guess, pam_divvy)) {
        fprintf(stderr, "test_pam: %s: %s (set PAM_DIVVY)\n", guess, strerror(errno));
        return -1;
    }
    return 0;
}

/* Finds @rel under /usr/lib, /usr/lib/<multiarch>, /usr/lib64 (no glob(3):
 * common/glob.h shadows <glob.h> on this include path).  A @rel ending in '*'
 * matches a prefix of the file name.  "" when there is none. */
static void find_lib(const char *rel, char *buf, size_t size)
{
    const char *slash = strrchr(rel, '/');
    char dirs[8][PATH_MAX], path[PATH_MAX * 2];
    size_t n_dirs = 0;
    DIR *d;
    struct dirent *e;

    buf[0] = '\0';
    snprintf(dirs[n_dirs++], PATH_MAX, "/usr/lib");
    snprintf(dirs[n_dirs++], PATH_MAX, "/usr/lib64");
    d = opendir("/usr/lib");
    while (d && n_dirs < 8 && (e = readdir(d)) != NULL) {
        if (strstr(e->d_name, "-linux-"))
            snprintf(dirs[n_dirs++], PATH_MAX, "/usr/lib/%s", e->d_name);
    }
    if (d)
        closedir(d);
    for (size_t i = 0; i < n_dirs && !buf[0]; i++) {
        size_t len = strlen(rel);
        DIR *sub;

        if (rel[len - 1] != '*') {
            if (fits(snprintf(path, sizeof(path), "%s/%s", dirs[i], rel), sizeof(path)) &&
                access(path, R_OK) == 0 && !fits(snprintf(buf, size, "%s", path), size))
                buf[0] = '\0';
            continue;
        }
        if (!fits(snprintf(path, sizeof(path), "%s/%.*s", dirs[i],
                           slash ? (int)(slash - rel) : 0, rel), sizeof(path)))
            continue;
        sub = opendir(path);
        while (sub && (e = readdir(sub)) != NULL) {
            const char *base = slash ? slash + 1 : rel;

            if (strncmp(e->d_name, base, strlen(base) - 1) == 0) {
                if (!fits(snprintf(buf, size, "%s/%s", path, e->d_name), size))
                    buf[0] = '\0';
                break;
            }
        }
        if (sub)
            closedir(sub);
    }
}

static void find_matrix(void)
{
    find_lib("pam_wrapper/pam_matrix.so", pam_matrix, sizeof(pam_matrix));
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[PATH_MAX];
    FILE *f;

    assert_true(fits(snprintf(path, sizeof(path), "%s/%s", dir, name), sizeof(path)));
    f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* The services the tests use; pam_matrix wants user:password:service. */
static const char *const services[] = {
    "dv", "dv-closed", "dv-silent", "dv-slow", "dv-slow-closed", "dv-down", "dv-down-closed",
    "dv-loop", "dv-wrap", "dv-full", "dv-full-closed",
};
static const char *const users[] = { "alice", "bob", "carol", "dave", "root", "erin" };

static int group_setup(void **state)
{
    char *passdb = NULL;
    size_t len = 0;
    FILE *f;

    (void)state;
    if (find_module() < 0)
        return -1;
    find_matrix();
    snprintf(confdir, sizeof(confdir), "/tmp/divvy-pam.XXXXXX");
    if (!mkdtemp(confdir))
        return -1;
    f = open_memstream(&passdb, &len);
    if (!f)
        return -1;
    for (size_t u = 0; u < sizeof(users) / sizeof(users[0]); u++)
        for (size_t s = 0; s < sizeof(services) / sizeof(services[0]); s++)
            fprintf(f, "%s:%s:%s\n", users[u], PASSWORD, services[s]);
    fclose(f);
    write_text(confdir, "passdb", passdb);
    free(passdb);
    return 0;
}

static int group_teardown(void **state)
{
    DIR *dir;
    struct dirent *e;

    (void)state;
    if (!confdir[0])
        return 0;
    dir = opendir(confdir);
    while (dir && (e = readdir(dir)) != NULL) {
        char path[PATH_MAX * 2];

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", confdir, e->d_name);
        unlink(path);
    }
    if (dir)
        closedir(dir);
    rmdir(confdir);
    return 0;
}

/* The stack tests need pam_matrix, and root: the module refuses to ask
 * divvyd as anyone else (the login rules are privileged). */
static bool have_matrix(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: pam_divvy only works as root; skipping)\n");
        return false;
    }
    if (pam_matrix[0])
        return true;
    fprintf(stderr, "  (pam_matrix.so not found: install libpam-wrapper; skipping)\n");
    return false;
}

/*
 * Writes service @name: the shipped etc/pam.d/sshd-divvy snippet, as a user
 * would paste it, with pam_matrix in place of pam_unix, pam_divvy.so by its
 * build path with @args appended (later arguments win), plus the optional
 * account line.
 */
static void write_service(const char *name, const char *args)
{
    char src[PATH_MAX], line[1024], *text = NULL;
    size_t len = 0, n_auth = 0;
    FILE *in, *out;

    assert_true(harness_src_path("etc/pam.d/sshd-divvy", src, sizeof(src)) >= 0);
    in = fopen(src, "r");
    assert_non_null(in);
    out = open_memstream(&text, &len);
    assert_non_null(out);
    while (fgets(line, sizeof(line), in)) {
        char *mod, *nl = strchr(line, '\n');

        if (nl)
            *nl = '\0';
        if (line[0] == '#' || line[0] == '\0')
            continue;
        n_auth++;
        if ((mod = strstr(line, "pam_unix.so")) != NULL) {
            *mod = '\0';
            fprintf(out, "%s%s passdb=%s/passdb\n", line, pam_matrix, confdir);
        } else if ((mod = strstr(line, "pam_divvy.so")) != NULL) {
            *mod = '\0';
            fprintf(out, "%s%s%s %s\n", line, pam_divvy, mod + strlen("pam_divvy.so"), args);
        } else {
            fprintf(out, "%s\n", line);
        }
    }
    fclose(in);
    fprintf(out, "account  required  %s %s\n", pam_divvy, args);
    assert_int_equal(fclose(out), 0);
    assert_int_equal(n_auth, 5);
    write_text(confdir, name, text);
    free(text);
}

static struct harness_daemon *start_shipped(void)
{
    struct harness_opts o = { .config_name = "divvy.conf" };
    struct harness_daemon *d = NULL;
    char src[512];

    CHECK(harness_src_path("etc/divvy.conf", src, sizeof(src)));
    o.config_src = src;
    CHECK(harness_start(&o, &d));
    return d;
}

/* ---- one login ------------------------------------------------------------------- */

struct attempt {
    const char *password;
    int rv;
    int prompts;                /* password prompts the stack made */
    char msgs[2048];            /* error and info messages, one per line */
    uint64_t ms;
};

static int conv(int n, const struct pam_message **msg, struct pam_response **resp, void *data)
{
    struct attempt *a = data;
    struct pam_response *r = calloc((size_t)n, sizeof(*r));

    if (!r)
        return PAM_BUF_ERR;
    for (int i = 0; i < n; i++) {
        size_t used = strlen(a->msgs);

        switch (msg[i]->msg_style) {
        case PAM_PROMPT_ECHO_OFF:
        case PAM_PROMPT_ECHO_ON:
            a->prompts++;
            r[i].resp = strdup(a->password);
            break;
        default:
            snprintf(a->msgs + used, sizeof(a->msgs) - used, "%s\n", msg[i]->msg);
            break;
        }
    }
    *resp = r;
    return PAM_SUCCESS;
}

/* One pam_authenticate() (and, with @account, pam_acct_mgmt() after a success). */
static int login(const char *service, const char *user, const char *password, const char *rhost,
                 bool account, struct attempt *a)
{
    struct pam_conv c = { conv, a };
    pam_handle_t *pamh = NULL;
    uint64_t t0;
    int rv;

    memset(a, 0, sizeof(*a));
    a->password = password;
    rv = pam_start_confdir(service, user, &c, confdir, &pamh);
    if (rv != PAM_SUCCESS) {
        a->rv = rv;
        return rv;
    }
    if (rhost)
        pam_set_item(pamh, PAM_RHOST, rhost);
    pam_set_item(pamh, PAM_TTY, "ssh");
    t0 = harness_now_ms();
    rv = pam_authenticate(pamh, 0);
    if (rv == PAM_SUCCESS && account)
        rv = pam_acct_mgmt(pamh, 0);
    a->ms = harness_now_ms() - t0;
    a->rv = rv;
    pam_end(pamh, rv);
    return rv;
}

#define EXPECT_LOGIN(svc, user, pw, rhost, want)                                        \
    do {                                                                                \
        struct attempt a_;                                                              \
        const char *rh_ = (rhost);                                                      \
        int rv_ = login((svc), (user), (pw), rh_, false, &a_);                          \
        if (rv_ != (want))                                                              \
            fail_msg("%s %s@%s: %s, want %s (messages: %s)", (svc), (user),             \
                     rh_ ? rh_ : "-", pam_strerror(NULL, rv_),                          \
                     pam_strerror(NULL, (want)), a_.msgs);                              \
    } while (0)

/* The refusal before the password prompt, with the lock's length as a person reads it
 * ("locked for 15 minutes from this address"), and PAM_MAXTRIES: no more prompts. */
static void expect_locked(const char *svc, const char *user, const char *rhost)
{
    struct attempt a;
    const char *p;

    login(svc, user, PASSWORD, rhost, false, &a);
    if (a.rv != PAM_MAXTRIES)
        fail_msg("%s@%s: %s, want refusal", user, rhost, pam_strerror(NULL, a.rv));
    assert_int_equal(a.prompts, 0);
    p = strstr(a.msgs, "locked for ");
    if (!p)
        fail_msg("%s@%s refused without \"locked for N minutes\": \"%s\"", user, rhost, a.msgs);
    p += strlen("locked for ");
    assert_true(*p >= '1' && *p <= '9');
    if (!strstr(p, " minute") && !strstr(p, " second"))
        fail_msg("%s@%s: no unit in \"%s\"", user, rhost, a.msgs);
    assert_non_null(strstr(p, " from this address."));
}

/* unknown_users=name: the test users (alice, bob, ...) live in pam_matrix's passdb, not in
 * this machine's passwd; the shipped snippet's unknown_users=source would count them per
 * source only (test_pam_lockout.c tests that). */
static void socket_arg(const char *sock, const char *extra, char *buf, size_t size)
{
    snprintf(buf, size, "socket=unix:%s unknown_users=name %s", sock, extra);
}

/* divvyd on the shipped config, and service "dv" on it with @extra module
 * arguments; skips the test without root or pam_matrix. */
static struct harness_daemon *start_dv(const char *extra)
{
    struct harness_daemon *d;
    char args[512];

    if (!have_matrix())
        skip();
    d = start_shipped();
    socket_arg(d->sock, extra, args, sizeof(args));
    write_service("dv", args);
    return d;
}

/* ---- (a) the shared object ---------------------------------------------------------- */

static void test_pam_exports_only_pam_sm(void **state)
{
    static const char *const want[] = { "pam_sm_authenticate", "pam_sm_setcred",
                                        "pam_sm_acct_mgmt" };
    char cmd[PATH_MAX + 64], line[512];
    size_t n_syms = 0;
    void *so;
    FILE *p;

    (void)state;
    so = dlopen(pam_divvy, RTLD_NOW | RTLD_LOCAL);
    if (!so)
        fail_msg("dlopen(%s, RTLD_NOW): %s", pam_divvy, dlerror());
    for (size_t i = 0; i < 3; i++)
        assert_non_null(dlsym(so, want[i]));
    /* libdivvy is linked in, hidden. */
    assert_null(dlsym(so, "divvy_open"));
    assert_null(dlsym(so, "pd_run"));
    dlclose(so);

    snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s' 2>/dev/null", pam_divvy);
    p = popen(cmd, "r");
    assert_non_null(p);
    while (fgets(line, sizeof(line), p)) {
        char addr[64], type[8], name[256];

        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3)
            continue;
        n_syms++;
        if (strncmp(name, "pam_sm_", 7) != 0)
            fail_msg("pam_divvy.so exports %s (%s)", name, type);
    }
    if (pclose(p) != 0 && n_syms == 0) {
        fprintf(stderr, "  (nm not available: skipping the nm -D check)\n");
        return;
    }
    assert_int_equal(n_syms, 3);
}

/* ---- (b) the stack -------------------------------------------------------------------- */

static void test_pam_lockout_and_wait_time(void **state)
{
    (void)state;
    start_dv("timeout_ms=2000");
    /* login-user-source: 5 failures per user and source. */
    for (int i = 0; i < 5; i++)
        EXPECT_LOGIN("dv", "alice", WRONG, "192.0.2.1", PAM_AUTH_ERR);
    expect_locked("dv", "alice", "192.0.2.1");
    /* Still locked with the right password; the account phase agrees. */
    expect_locked("dv", "alice", "192.0.2.1");
    {
        struct attempt a;
        struct pam_conv c = { conv, &a };
        pam_handle_t *pamh;

        memset(&a, 0, sizeof(a));
        a.password = PASSWORD;
        assert_int_equal(pam_start_confdir("dv", "alice", &c, confdir, &pamh), PAM_SUCCESS);
        pam_set_item(pamh, PAM_RHOST, "192.0.2.1");
        assert_int_equal(pam_acct_mgmt(pamh, 0), PAM_PERM_DENIED);
        pam_end(pamh, PAM_SUCCESS);
    }
    /* Another user from the same source is not affected (30 per source). */
    EXPECT_LOGIN("dv", "bob", PASSWORD, "192.0.2.1", PAM_SUCCESS);
    /* root: 3 per source (login-root-source). */
    for (int i = 0; i < 3; i++)
        EXPECT_LOGIN("dv", "root", WRONG, "192.0.2.1", PAM_AUTH_ERR);
    expect_locked("dv", "root", "192.0.2.1");
    /* IPv6: one /64 is one source. */
    for (int i = 0; i < 5; i++) {
        char rhost[64];

        snprintf(rhost, sizeof(rhost), "2001:db8:1:2::%x", i + 1);
        EXPECT_LOGIN("dv", "carol", WRONG, rhost, PAM_AUTH_ERR);
    }
    expect_locked("dv", "carol", "2001:db8:1:2:ffff::1");
    EXPECT_LOGIN("dv", "carol", PASSWORD, "2001:db8:1:3::1", PAM_SUCCESS);
}

/*
 * IPv4 clients that a service reports in IPv6 form (::ffff:a.b.c.d, as a
 * dual-stack socket gives them; sshd normalises, other services do not)
 * count per IPv4 address, together with the plain form, not all in one
 * ::/64; ::1 is one host of its own.
 */
static void test_pam_mapped_sources(void **state)
{
    (void)state;
    start_dv("");
    /* root: 3 failures from one mapped IPv4 client lock that client ... */
    for (int i = 0; i < 3; i++)
        EXPECT_LOGIN("dv", "root", WRONG, "::ffff:192.0.2.1", PAM_AUTH_ERR);
    expect_locked("dv", "root", "::ffff:192.0.2.1");
    /* ... in every spelling of its address ... */
    expect_locked("dv", "root", "192.0.2.1");
    expect_locked("dv", "root", "64:ff9b::192.0.2.1");
    /* ... and no other IPv4 client, mapped or not. */
    EXPECT_LOGIN("dv", "root", PASSWORD, "::ffff:192.0.2.2", PAM_SUCCESS);
    EXPECT_LOGIN("dv", "root", PASSWORD, "192.0.2.3", PAM_SUCCESS);
    /* The two forms count together: 3 + 2 failures lock alice (5). */
    for (int i = 0; i < 3; i++)
        EXPECT_LOGIN("dv", "alice", WRONG, "::ffff:198.51.100.9", PAM_AUTH_ERR);
    for (int i = 0; i < 2; i++)
        EXPECT_LOGIN("dv", "alice", WRONG, "198.51.100.9", PAM_AUTH_ERR);
    expect_locked("dv", "alice", "198.51.100.9");
    expect_locked("dv", "alice", "::ffff:198.51.100.9");
    /* ::1 is one host: its failures lock neither IPv4 clients nor ::2. */
    for (int i = 0; i < 3; i++)
        EXPECT_LOGIN("dv", "root", WRONG, "::1", PAM_AUTH_ERR);
    expect_locked("dv", "root", "::1");
    EXPECT_LOGIN("dv", "root", PASSWORD, "::ffff:192.0.2.4", PAM_SUCCESS);
    EXPECT_LOGIN("dv", "root", PASSWORD, "::2", PAM_SUCCESS);
}

static void test_pam_success_resets(void **state)
{
    (void)state;
    start_dv("");
    for (int i = 0; i < 4; i++)
        EXPECT_LOGIN("dv", "alice", WRONG, "192.0.2.2", PAM_AUTH_ERR);
    EXPECT_LOGIN("dv", "alice", PASSWORD, "192.0.2.2", PAM_SUCCESS);
    /* Without the reset the 6th failure overall would be refused early. */
    for (int i = 0; i < 5; i++) {
        struct attempt a;

        login("dv", "alice", WRONG, "192.0.2.2", false, &a);
        assert_int_equal(a.rv, PAM_AUTH_ERR);
        assert_int_equal(a.prompts, 1);
    }
    expect_locked("dv", "alice", "192.0.2.2");
}

static void test_pam_attacker_elsewhere(void **state)
{
    (void)state;
    start_dv("");
    for (int i = 0; i < 5; i++)
        EXPECT_LOGIN("dv", "bob", WRONG, "198.51.100.7", PAM_AUTH_ERR);
    for (int i = 0; i < 3; i++)
        EXPECT_LOGIN("dv", "bob", WRONG, "198.51.100.7", PAM_MAXTRIES);
    expect_locked("dv", "bob", "198.51.100.7");
    /* bob from his own address is not locked out. */
    EXPECT_LOGIN("dv", "bob", PASSWORD, "192.0.2.3", PAM_SUCCESS);
}

static void test_pam_password_spraying(void **state)
{
    char user[64], odd[1200];
    struct attempt a;

    (void)state;
    start_dv("audit debug");
    /* Odd user names still reach divvyd: '"' and newlines are replaced, long
     * ones cut.  Each counts against the source. */
    login("dv", "evil\"user with spaces\n", WRONG, "203.0.113.50", false, &a);
    assert_int_equal(a.rv, PAM_AUTH_ERR);
    assert_int_equal(a.prompts, 1);
    memset(odd, 'x', sizeof(odd) - 1);
    odd[sizeof(odd) - 1] = '\0';
    login("dv", odd, WRONG, "203.0.113.50", false, &a);
    assert_int_equal(a.rv, PAM_AUTH_ERR);
    assert_int_equal(a.prompts, 1);
    /* login-source: 30 failures per source across all users. */
    for (int i = 2; i < 30; i++) {
        snprintf(user, sizeof(user), "spray%d", i);
        login("dv", user, WRONG, "203.0.113.50", false, &a);
        assert_int_equal(a.rv, PAM_AUTH_ERR);
        assert_int_equal(a.prompts, 1);
    }
    expect_locked("dv", "dave", "203.0.113.50");
    EXPECT_LOGIN("dv", "dave", PASSWORD, "203.0.113.51", PAM_SUCCESS);
}

static void test_pam_silent_and_local(void **state)
{
    struct harness_daemon *d;
    char args[512];
    struct attempt a;

    (void)state;
    if (!have_matrix())
        skip();
    d = start_shipped();
    socket_arg(d->sock, "silent", args, sizeof(args));
    write_service("dv-silent", args);
    for (int i = 0; i < 5; i++)
        EXPECT_LOGIN("dv-silent", "erin", WRONG, "192.0.2.9", PAM_AUTH_ERR);
    login("dv-silent", "erin", PASSWORD, "192.0.2.9", false, &a);
    assert_int_equal(a.rv, PAM_MAXTRIES);
    assert_int_equal(a.prompts, 0);
    assert_string_equal(a.msgs, "");
    /* No rhost: a local login, not throttled by the shipped rules. */
    for (int i = 0; i < 8; i++)
        EXPECT_LOGIN("dv-silent", "erin", WRONG, NULL, PAM_AUTH_ERR);
    EXPECT_LOGIN("dv-silent", "erin", PASSWORD, NULL, PAM_SUCCESS);
}

/* fail_open and fail_closed against @sock, which does not answer. */
static void check_outage(const char *sock, const char *open_svc, const char *closed_svc,
                         int timeout_ms, uint64_t min_ms)
{
    char args[512], extra[64];
    struct attempt a;
    /* Two pam_divvy calls per attempt, each bounded by timeout_ms; the rest is slack. */
    uint64_t bound = 2 * (uint64_t)timeout_ms + 1500;

    snprintf(extra, sizeof(extra), "timeout_ms=%d", timeout_ms);
    socket_arg(sock, extra, args, sizeof(args));
    write_service(open_svc, args);
    snprintf(extra, sizeof(extra), "timeout_ms=%d fail_closed", timeout_ms);
    socket_arg(sock, extra, args, sizeof(args));
    write_service(closed_svc, args);

    login(open_svc, "alice", PASSWORD, "192.0.2.20", true, &a);
    assert_int_equal(a.rv, PAM_SUCCESS);
    assert_int_equal(a.prompts, 1);
    if (a.ms > bound || a.ms < min_ms)
        fail_msg("fail_open login took %llu ms (want %llu..%llu)", (unsigned long long)a.ms,
                 (unsigned long long)min_ms, (unsigned long long)bound);
    login(open_svc, "alice", WRONG, "192.0.2.20", false, &a);
    assert_int_equal(a.rv, PAM_AUTH_ERR);
    assert_true(a.ms <= bound);

    login(closed_svc, "alice", PASSWORD, "192.0.2.20", false, &a);
    assert_int_equal(a.rv, PAM_AUTHINFO_UNAVAIL);
    assert_int_equal(a.prompts, 0);
    if (a.ms > bound)
        fail_msg("fail_closed refusal took %llu ms", (unsigned long long)a.ms);
}

static void test_pam_daemon_down(void **state)
{
    struct harness_daemon *d;
    char sock[HARNESS_PATH];

    (void)state;
    if (!have_matrix())
        skip();
    d = start_shipped();
    snprintf(sock, sizeof(sock), "%s", d->sock);
    CHECK(harness_stop(d, NULL));
    check_outage(sock, "dv-down", "dv-down-closed", 500, 0);
}

static void test_pam_daemon_hung(void **state)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd;

    (void)state;
    if (!have_matrix())
        skip();
    /* A listener that never accepts: connect works, no reply ever comes. */
    assert_true(fits(snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/hung.sock", confdir),
                     sizeof(sa.sun_path)));
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 128), 0);
    check_outage(sa.sun_path, "dv-slow", "dv-slow-closed", 400, 150);
    close(fd);
    unlink(sa.sun_path);
}

/* pamtester under pam_wrapper: the same stack for an unmodified PAM application. */
static int run_pamtester(const char *svcdir, const char *user, const char *rhost,
                         const char *password, char *out, size_t size)
{
    char wrapper[PATH_MAX] = "", preload[2 * PATH_MAX], item[128], outfile[PATH_MAX];
    int in[2], status = -1, fd;
    pid_t pid;
    FILE *f;
    size_t n;

    find_lib("libpam_wrapper.so", wrapper, sizeof(wrapper));
    if (!wrapper[0] || access("/usr/bin/pamtester", X_OK) < 0)
        return -ENOENT;
    if (PAM_TEST_ASAN) {
        /* The module is ASan-built; pamtester is not: load the runtime first. */
        char asan[PATH_MAX] = "";

        find_lib("./libasan.so.*", asan, sizeof(asan));
        if (!asan[0])
            return -ENOENT;
        snprintf(preload, sizeof(preload), "%s %s", asan, wrapper);
    } else {
        snprintf(preload, sizeof(preload), "%s", wrapper);
    }
    snprintf(item, sizeof(item), "rhost=%s", rhost);
    snprintf(outfile, sizeof(outfile), "%s/pamtester.out", svcdir);
    if (pipe(in) < 0)
        return -errno;
    pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        fd = open(outfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0)
            _exit(126);
        dup2(in[0], 0);
        dup2(fd, 1);
        dup2(fd, 2);
        close(in[1]);
        setenv("LD_PRELOAD", preload, 1);
        setenv("PAM_WRAPPER", "1", 1);
        setenv("PAM_WRAPPER_SERVICE_DIR", svcdir, 1);
        setenv("PAM_WRAPPER_DISABLE_DEEPBIND", "1", 1);
        setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
        execl("/usr/bin/pamtester", "pamtester", "-v", "-I", item, "dv-wrap", user,
              "authenticate", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    if (write(in[1], password, strlen(password)) < 0 || write(in[1], "\n", 1) < 0)
        status = -1;
    close(in[1]);
    if (waitpid(pid, &status, 0) < 0)
        return -errno;
    f = fopen(outfile, "r");
    out[0] = '\0';
    if (f) {
        n = fread(out, 1, size - 1, f);
        out[n] = '\0';
        fclose(f);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_pam_pamtester_wrapper(void **state)
{
    struct harness_daemon *d;
    char args[512], svcdir[PATH_MAX], out[4096];
    int r;

    (void)state;
    if (!have_matrix())
        skip();
    d = start_shipped();
    socket_arg(d->sock, "", args, sizeof(args));
    /* pam_wrapper reads services from its own directory. */
    assert_true(fits(snprintf(svcdir, sizeof(svcdir), "%s/wrap", confdir), sizeof(svcdir)));
    mkdir(svcdir, 0700);
    write_service("dv-wrap", args);
    {
        char from[PATH_MAX * 2], to[PATH_MAX * 2];

        snprintf(from, sizeof(from), "%s/dv-wrap", confdir);
        snprintf(to, sizeof(to), "%s/dv-wrap", svcdir);
        assert_int_equal(rename(from, to), 0);
    }
    r = run_pamtester(svcdir, "alice", "192.0.2.30", PASSWORD, out, sizeof(out));
    if (r == -ENOENT) {
        fprintf(stderr, "  (pamtester or libpam_wrapper.so missing: install pamtester and "
                "libpam-wrapper; skipping)\n");
        skip();
    }
    if (r != 0)
        fail_msg("pamtester with the right password: exit %d\n%s", r, out);
    assert_non_null(strstr(out, "successfully authenticated"));
    for (int i = 0; i < 5; i++) {
        r = run_pamtester(svcdir, "alice", "192.0.2.30", WRONG, out, sizeof(out));
        if (r == 0)
            fail_msg("pamtester with a wrong password succeeded\n%s", out);
    }
    r = run_pamtester(svcdir, "alice", "192.0.2.30", PASSWORD, out, sizeof(out));
    if (r == 0 || !strstr(out, "locked for 15 minutes from this address."))
        fail_msg("pamtester after 5 failures: exit %d, want a refusal with the wait\n%s", r,
                 out);
    {
        char path[PATH_MAX * 2];

        snprintf(path, sizeof(path), "%s/dv-wrap", svcdir);
        unlink(path);
        snprintf(path, sizeof(path), "%s/pamtester.out", svcdir);
        unlink(path);
        rmdir(svcdir);
    }
}

/*
 * The privileged table full (docs/pam.md "Sizing"): divvyd answers the login
 * rules' TAKE and PEEK with ERR no-counter; pam_divvy logs it and applies
 * fail_open / fail_closed (in-process, and pamtester under pam_wrapper, whose
 * debug log carries pam_syslog()'s lines).
 */
static void wrap_service(const char *svcdir, const char *args)
{
    char from[PATH_MAX * 2], to[PATH_MAX * 2];

    write_service("dv-wrap", args);
    snprintf(from, sizeof(from), "%s/dv-wrap", confdir);
    snprintf(to, sizeof(to), "%s/dv-wrap", svcdir);
    assert_int_equal(rename(from, to), 0);
}

static void test_pam_privileged_table_full(void **state)
{
    static const char prefix[] = "table = { privileged_slots = 64; };\n";
    struct harness_opts o = { .config_name = "divvy.conf" };
    struct harness_daemon *d = NULL;
    struct harness_conn *c;
    char src[512], r[HARNESS_LINE], req[128], args[512], svcdir[PATH_MAX], out[8192];
    char *text;
    struct attempt a;
    FILE *f;
    long size;
    int rc;

    (void)state;
    if (!have_matrix())
        skip();
    CHECK(harness_src_path("etc/divvy.conf", src, sizeof(src)));
    f = fopen(src, "r");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    size = ftell(f);
    rewind(f);
    text = harness_scratch(sizeof(prefix) + (size_t)size + 1);
    assert_non_null(text);
    memcpy(text, prefix, sizeof(prefix) - 1);
    assert_int_equal(fread(text + sizeof(prefix) - 1, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    o.config_text = text;
    CHECK(harness_start(&o, &d));

    /* Fill the privileged table with root's failures from many sources. */
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    for (int i = 0; i < 64; i++) {
        snprintf(req, sizeof(req), "TAKE 1 event=authfail user=root rhost=10.9.1.%d", i);
        CHECK(harness_cmd(c, req, r, sizeof(r)));
        if (strncmp(r, "ERR no-counter ", 15) == 0)
            break;
        EXPECT_PREFIX(r, "OK true ");
    }
    EXPECT_PREFIX(r, "ERR no-counter ");
    harness_close(c);

    /* fail_open: the login goes on (logged); fail_closed: refused before the prompt. */
    socket_arg(d->sock, "timeout_ms=2000", args, sizeof(args));
    write_service("dv-full", args);
    socket_arg(d->sock, "timeout_ms=2000 fail_closed", args, sizeof(args));
    write_service("dv-full-closed", args);
    login("dv-full", "alice", PASSWORD, "198.51.100.80", false, &a);
    assert_int_equal(a.rv, PAM_SUCCESS);
    assert_int_equal(a.prompts, 1);
    login("dv-full", "alice", WRONG, "198.51.100.80", false, &a);
    assert_int_equal(a.rv, PAM_AUTH_ERR);
    login("dv-full-closed", "alice", PASSWORD, "198.51.100.80", false, &a);
    assert_int_equal(a.rv, PAM_AUTHINFO_UNAVAIL);
    assert_int_equal(a.prompts, 0);

    /* The same through pamtester, with pam_syslog()'s lines in pam_wrapper's log. */
    assert_true(fits(snprintf(svcdir, sizeof(svcdir), "%s/wrapfull", confdir), sizeof(svcdir)));
    mkdir(svcdir, 0700);
    setenv("PAM_WRAPPER_DEBUGLEVEL", "2", 1);
    socket_arg(d->sock, "timeout_ms=2000", args, sizeof(args));
    wrap_service(svcdir, args);
    rc = run_pamtester(svcdir, "alice", "198.51.100.81", PASSWORD, out, sizeof(out));
    if (rc == -ENOENT) {
        unsetenv("PAM_WRAPPER_DEBUGLEVEL");
        fprintf(stderr, "  (pamtester or libpam_wrapper.so missing: skipping that part)\n");
        goto out;
    }
    if (rc != 0 || !strstr(out, "successfully authenticated") ||
        !strstr(out, "no-counter") || !strstr(out, "no free counter for a login rule") ||
        !strstr(out, "fail_open: continuing"))
        fail_msg("pamtester, fail_open, privileged table full: exit %d\n%s", rc, out);
    socket_arg(d->sock, "timeout_ms=2000 fail_closed", args, sizeof(args));
    wrap_service(svcdir, args);
    rc = run_pamtester(svcdir, "alice", "198.51.100.81", PASSWORD, out, sizeof(out));
    unsetenv("PAM_WRAPPER_DEBUGLEVEL");
    if (rc == 0 || !strstr(out, "no free counter for a login rule") ||
        !strstr(out, "fail_closed: refusing"))
        fail_msg("pamtester, fail_closed, privileged table full: exit %d\n%s", rc, out);
out:
    {
        char path[PATH_MAX * 2];

        snprintf(path, sizeof(path), "%s/dv-wrap", svcdir);
        unlink(path);
        snprintf(path, sizeof(path), "%s/pamtester.out", svcdir);
        unlink(path);
        rmdir(svcdir);
    }
}

/* ---- (c) many calls in one process ------------------------------------------------------ */

static int count_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    while (dir && (e = readdir(dir)) != NULL)
        n += e->d_name[0] != '.';
    if (dir)
        closedir(dir);
    return n;
}

/* One of the loop's four kinds of login on an open handle. */
/* @round picks alice's source: the shipped per-source rule is not reset by a
 * good login, so each round's failure comes from a source of its own. */
static void loop_login(pam_handle_t *pamh, struct attempt *a, int kind, int round)
{
    static const struct {
        const char *user, *password, *rhost;
        int want, prompts;
    } kinds[4] = {
        { "alice", WRONG, NULL, PAM_AUTH_ERR, 1 },              /* authfail: TAKE */
        { "alice", PASSWORD, NULL, PAM_SUCCESS, 1 },            /* authsucc: RESET + account */
        { "carol", PASSWORD, "192.0.2.40", PAM_MAXTRIES, 0 },   /* refused in preauth */
        { "bob", PASSWORD, NULL, PAM_SUCCESS, 1 },              /* local: no rhost */
    };
    char rhost[32];
    int rv;

    snprintf(rhost, sizeof(rhost), "10.%d.%d.%d", (round >> 16) & 255, (round >> 8) & 255,
             round & 255);
    a->password = kinds[kind].password;
    a->prompts = 0;
    a->msgs[0] = '\0';
    assert_int_equal(pam_set_item(pamh, PAM_USER, kinds[kind].user), PAM_SUCCESS);
    assert_int_equal(pam_set_item(pamh, PAM_RHOST, kind < 2 ? rhost : kinds[kind].rhost),
                     PAM_SUCCESS);
    rv = pam_authenticate(pamh, 0);
    if (rv == PAM_SUCCESS && kind == 1)
        rv = pam_acct_mgmt(pamh, 0);
    if (rv != kinds[kind].want || a->prompts != kinds[kind].prompts)
        fail_msg("loop login %d (%s): %s with %d prompts; messages: %s", kind,
                 kinds[kind].user, pam_strerror(pamh, rv), a->prompts, a->msgs);
}

/*
 * LOOP_N authentications in this process, 100 per PAM handle (as a
 * long-lived sshd-like process would run them; a handle per login would
 * mostly measure libpam's dlopen).  Every path of the module runs: PEEK
 * allowed and refused (with the conversation message), TAKE, RESET, the
 * account phase.  Descriptors must not grow; without ASan the heap must not
 * either; under `make asan` LeakSanitizer checks at exit.
 */
static void test_pam_many_calls_no_leak(void **state)
{
    struct harness_daemon *d;
    char args[512];
    struct attempt a;
    struct pam_conv c = { conv, &a };
    size_t heap_warm = 0;
    int fds_warm = 0;
    uint64_t t0 = harness_now_ms();

    (void)state;
    if (!have_matrix())
        skip();
    d = start_shipped();
    socket_arg(d->sock, "", args, sizeof(args));
    write_service("dv-loop", args);
    /* carol is locked from one source, so the loop also takes the refusal path. */
    for (int i = 0; i < 5; i++)
        EXPECT_LOGIN("dv-loop", "carol", WRONG, "192.0.2.40", PAM_AUTH_ERR);

    memset(&a, 0, sizeof(a));
    for (int i = 0; i < LOOP_N; i += 100) {
        pam_handle_t *pamh = NULL;

        assert_int_equal(pam_start_confdir("dv-loop", "alice", &c, confdir, &pamh),
                         PAM_SUCCESS);
        pam_set_item(pamh, PAM_TTY, "ssh");
        for (int k = 0; k < 100; k++)
            loop_login(pamh, &a, (i + k) % 4, (i + k) / 4);
        pam_end(pamh, PAM_SUCCESS);
        if (i == LOOP_N / 10) {
            struct mallinfo2 mi = mallinfo2();

            heap_warm = mi.uordblks;
            fds_warm = count_fds();
        }
    }
    assert_int_equal(count_fds(), fds_warm);
    if (!PAM_TEST_ASAN) {
        struct mallinfo2 mi = mallinfo2();

        /* 9,000 logins after the warm-up: a leak of even 8 bytes each shows. */
        if (mi.uordblks > heap_warm + 64 * 1024)
            fail_msg("heap grew from %zu to %zu bytes over %d logins", heap_warm, mi.uordblks,
                     LOOP_N - LOOP_N / 10);
    }
    fprintf(stderr, "  %d logins in %llu ms\n", LOOP_N,
            (unsigned long long)(harness_now_ms() - t0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pam_exports_only_pam_sm),
        cmocka_unit_test_setup_teardown(test_pam_lockout_and_wait_time, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_pam_mapped_sources, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_pam_success_resets, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_pam_attacker_elsewhere, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_pam_password_spraying, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_pam_silent_and_local, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_pam_daemon_down, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_pam_daemon_hung, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_pam_pamtester_wrapper, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_pam_privileged_table_full, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_pam_many_calls_no_leak, harness_setup,
                                        harness_teardown),
    };

    /* `make valgrind` runs only the 10,000-login loop: DIVVY_TEST_FILTER=*many_calls*. */
    if (getenv("DIVVY_TEST_FILTER"))
        cmocka_set_test_filter(getenv("DIVVY_TEST_FILTER"));
    return cmocka_run_group_tests_name("pam", tests, group_setup, group_teardown);
}
