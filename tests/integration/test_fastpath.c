/* SPDX-License-Identifier: MIT */
/*
 * Integration: libdivvy's shared-memory fast path against the real divvyd.
 * A hit on a fast_path rule makes no system call (the syscall count of a
 * run under strace does not grow with the number of hits); 100 reloads
 * between two differently-labelled rule sets while two processes hammer the
 * fast path give zero errors and only decisions of the old or the new rules;
 * corrupted copies of the table and the rules file never crash a client (it
 * falls back to the socket or fails cleanly); clients SIGKILLed mid-hammer
 * leave the key working with exact counts; and fast-path processes plus
 * socket clients on one key get exactly credit_limit allowed.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "divvy.h"
#include "fast_fds.h"
#include "harness.h"

#define HAMMER_ARG "--fastpath-hammer"

static const char fast_conf[] =
    "table = { fast_slots = 65536; };\n"
    "rules = (\n"
    "    { match = { path = \"/fast\"; }; label = \"fast\"; credit_limit = 1000000000L;\n"
    "      reset_seconds = 3600; actor = \"user\"; fast_path = true; },\n"
    "    { match = { path = \"/kill\"; }; label = \"kill\"; credit_limit = 1000000;\n"
    "      reset_seconds = 3600; fast_path = true; },\n"
    "    { match = { path = \"/claims\"; }; label = \"claims\"; credit_limit = 5;\n"
    "      reset_seconds = 1; actor = \"user\"; fast_path = true; },\n"
    "    { match = { path = \"/exact\"; }; label = \"exact\"; credit_limit = 5000;\n"
    "      reset_seconds = 86400; fast_path = true; },\n"
    "    { match = { path = \"/slow\"; }; label = \"slow\"; credit_limit = 5;\n"
    "      reset_seconds = 60; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

static struct harness_daemon *start_fast(const char *conf)
{
    struct harness_opts o = { .config_name = "fast.conf", .config_text = conf, .workers = 2 };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    /* Every handle of this file, and of the processes it forks, opens NULL. */
    CHECK(harness_divvy_env(d));
    return d;
}

static struct divvy *open_env(unsigned flags)
{
    struct divvy *h = NULL;
    int r = divvy_open(NULL, flags, &h);

    if (r < 0)
        fail_msg("divvy_open: %s", strerror(-r));
    return h;
}

static void *shared_new(size_t size)
{
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    assert_true(m != MAP_FAILED);
    return m;
}

/* ---- no system call on the hit path --------------------------------------------- */

/*
 * The hammer: the test binary re-executed under strace.  Opens a handle
 * (DIVVY_ADDRESS / DIVVY_STATE_DIR from the environment), makes N fast-path
 * hits and exits 0 only if every one was decided in-process.
 */
static int hammer_main(long n)
{
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/fast" }, { "user", "strace" } };
    struct divvy *h = NULL;

    if (divvy_open(NULL, DIVVY_FAST_ONLY, &h) < 0)
        return 3;
    for (long i = 0; i < n; i++) {
        if (divvy_hit(h, kv, 2, &res) < 0 || !res.fast_path || !res.allowed) {
            fprintf(stderr, "hammer: hit %ld: %s\n", i, divvy_errmsg(h));
            return 4;
        }
    }
    divvy_close(h);
    return 0;
}

static bool have_strace(char *path, size_t size)
{
    const char *env = getenv("PATH");
    char dirs[4096], *save = NULL;

    snprintf(dirs, sizeof(dirs), "%s", env ? env : "/usr/bin:/bin");
    for (char *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        snprintf(path, size, "%s/strace", dir);
        if (access(path, X_OK) == 0)
            return true;
    }
    return false;
}

/* Runs the hammer for @n hits under `strace -f -c`; returns the total syscall count. */
static long strace_count(const char *strace, const char *dir, long n)
{
    char self[HARNESS_PATH], out[HARNESS_PATH + 32], count[32], line[512];
    const char *argv[] = { strace, "-f", "-c", "-o", out, self, HAMMER_ARG, count, NULL };
    long total = -1;
    pid_t pid;
    FILE *f;
    int st;
    ssize_t l = readlink("/proc/self/exe", self, sizeof(self) - 1);

    assert_true(l > 0);
    self[l] = '\0';
    snprintf(out, sizeof(out), "%s/strace.%ld", dir, n);
    snprintf(count, sizeof(count), "%ld", n);
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* LeakSanitizer's exit-time ptrace cannot run under strace. */
        setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
        execv(strace, (char *const *)argv);
        _exit(127);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("strace of %ld fast-path hits: exit status 0x%x", n, st);
    f = fopen(out, "r");
    assert_non_null(f);
    /* "100.00    0.000123     1     123     4 total": calls is the 4th field. */
    while (fgets(line, sizeof(line), f)) {
        char last[32];
        double pct, secs;
        long usecs, calls;

        if (sscanf(line, "%lf %lf %ld %ld", &pct, &secs, &usecs, &calls) == 4 &&
            sscanf(line + strlen(line) - 7, "%31s", last) == 1 && strcmp(last, "total") == 0)
            total = calls;
    }
    fclose(f);
    if (total < 0)
        fail_msg("no total in %s", out);
    return total;
}

static void test_fastpath_no_syscall(void **state)
{
    struct harness_daemon *d;
    struct divvy *h;
    char strace[HARNESS_PATH];
    long small, big;

    (void)state;
    if (!have_strace(strace, sizeof(strace))) {
        fprintf(stderr, "  SKIP: strace is not installed (apt-get install strace): the "
                        "no-syscall property of the fast path is not checked\n");
        skip();
    }
    d = start_fast(fast_conf);
    h = open_env(DIVVY_AUTO);
    harness_wait_fast(h, (struct divvy_kv[]){ { "path", "/fast" } }, 1);
    divvy_close(h);
    small = strace_count(strace, d->dir, 1000);
    big = strace_count(strace, d->dir, 100000);
    fprintf(stderr, "  syscalls: %ld for 1,000 fast-path hits, %ld for 100,000\n", small, big);
    if (big - small >= 20 || small - big >= 20)
        fail_msg("the syscall count grows with the number of hits: %ld vs %ld", small, big);
}

/* ---- 100 reloads under load -------------------------------------------------------- */

#define ALPHA_LIMIT 100000000000LL
#define BETA_LIMIT  200000000000LL

static char *reload_conf(bool beta)
{
    char *t = harness_scratch(1024);

    assert_non_null(t);
    snprintf(t, 1024,
             "rules = (\n"
             "    { match = { path = \"/r\"; }; label = \"%s\"; credit_limit = %lldL;\n"
             "      reset_seconds = 3600; actor = \"user\"; fast_path = true; },\n"
             "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
             ");\n",
             beta ? "beta" : "alpha", beta ? BETA_LIMIT : ALPHA_LIMIT);
    return t;
}

struct reload_shared {
    volatile int stop;
    struct {
        long hits, fast, errors, bad, alpha, beta;
        char first[256];
    } child[2];
};

struct reload_arg {
    struct reload_shared *sh;
    int id;
};

static int reload_child(void *arg)
{
    struct reload_arg *a = arg;
    struct reload_shared *sh = a->sh;
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/r" }, { "user", a->id ? "u1" : "u0" } };
    struct divvy *h = NULL;
    long long used = 0;

    if (divvy_open(NULL, DIVVY_AUTO, &h) < 0)
        return 1;
    while (!sh->stop) {
        int r = divvy_hit(h, kv, 2, &res);
        long long credit = (long long)res.credit;

        sh->child[a->id].hits++;
        if (r < 0) {
            if (!sh->child[a->id].errors++)
                snprintf(sh->child[a->id].first, sizeof(sh->child[0].first), "%s",
                         divvy_errmsg(h));
            continue;
        }
        used++;
        sh->child[a->id].fast += res.fast_path;
        /* Old rules or new ones: the label and the credit must agree. */
        if (strcmp(res.rule, "alpha") == 0 && res.allowed && credit < ALPHA_LIMIT &&
            credit >= ALPHA_LIMIT - used)
            sh->child[a->id].alpha++;
        else if (strcmp(res.rule, "beta") == 0 && res.allowed && credit < BETA_LIMIT &&
                 credit >= BETA_LIMIT - used)
            sh->child[a->id].beta++;
        else if (!sh->child[a->id].bad++)
            snprintf(sh->child[a->id].first, sizeof(sh->child[0].first),
                     "decision %d %lld %s", res.allowed, credit, res.rule);
    }
    divvy_close(h);
    return 0;
}

static void test_fastpath_reload_hammer(void **state)
{
    struct harness_daemon *d = start_fast(reload_conf(false));
    struct reload_shared *sh = shared_new(sizeof(*sh));
    struct reload_arg args[2] = { { sh, 0 }, { sh, 1 } };
    struct harness_conn *c;
    struct divvy *h = open_env(DIVVY_AUTO);
    char reply[HARNESS_LINE];
    pid_t pids[2];
    int status;

    (void)state;
    harness_wait_fast(h, (struct divvy_kv[]){ { "path", "/r" } }, 1);
    divvy_close(h);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    for (int i = 0; i < 2; i++)
        CHECK(harness_spawn(reload_child, &args[i], &pids[i]));
    harness_pause_ms(50);
    for (int i = 1; i <= 100; i++) {
        CHECK(harness_write_config(d, reload_conf(i % 2 == 1)));
        CHECK(harness_cmd(c, "RELOAD", reply, sizeof(reply)));
        EXPECT_PREFIX(reply, "OK reloaded");
        harness_pause_ms(2);
    }
    harness_pause_ms(50);
    sh->stop = 1;
    for (int i = 0; i < 2; i++) {
        CHECK(harness_reap(pids[i], 20000, &status));
        assert_int_equal(status, 0);
    }
    harness_close(c);
    for (int i = 0; i < 2; i++) {
        fprintf(stderr, "  child %d: %ld hits (%ld fast), %ld by alpha, %ld by beta\n", i,
                sh->child[i].hits, sh->child[i].fast, sh->child[i].alpha, sh->child[i].beta);
        if (sh->child[i].errors || sh->child[i].bad)
            fail_msg("child %d: %ld errors, %ld bad decisions; first: %s", i,
                     sh->child[i].errors, sh->child[i].bad, sh->child[i].first);
        /* Both generations were seen, and most hits stayed in-process. */
        assert_true(sh->child[i].alpha > 0);
        assert_true(sh->child[i].beta > 0);
        assert_true(sh->child[i].fast > sh->child[i].hits / 2);
    }
}

/* ---- forged hand-overs ----------------------------------------------------------------- */

/*
 * A client must never crash or index rules it has not loaded, whatever the
 * memfds it was handed hold (DESIGN section 5: "every offset read from a
 * mapped file is bounds-checked").  A fake divvyd, a thread of the child,
 * answers FAST with memfds forged from copies of the real ones and every
 * other request with "OK true 42 0": a hit answered with credit 42 went to
 * the socket, one with the real credit was decided in-process.  The forger
 * keeps its writable mapping of the control page, as divvyd does, so it can
 * change the generation under a client that loaded rules.
 */

#define FORGE_CREDIT 42

struct forge_arg {
    char dir[HARNESS_PATH + 8];
    char sock[HARNESS_PATH + 32];
    uint64_t gen;
    uint8_t *table;             /* the real table's bytes */
    size_t table_len;
    uint8_t ctl[4096];          /* the real control page's bytes */
    uint8_t *blob;              /* rules.<gen> */
    size_t blob_len;
};

/* What the fake divvyd hands out now (the child's main thread sets it). */
static int forged_table = -1, forged_ctl = -1;
static char forged_reply[HARNESS_PATH + 32];

static int forge_memfd(const void *data, size_t len, unsigned seals, void **ret_map)
{
    int fd = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);

    if (fd < 0 || ftruncate(fd, (off_t)len) < 0 ||
        pwrite(fd, data, len, 0) != (ssize_t)len)
        return -1;
    if (ret_map) {
        *ret_map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (*ret_map == MAP_FAILED)
            return -1;
    }
    if (seals && fcntl(fd, F_ADD_SEALS, seals) < 0)
        return -1;
    return fd;
}

#define SEALS_TABLE (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#define SEALS_CTL   (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)
#define CTL_GEN     64              /* docs/dev/shm.md "Control page" */
#define CTL_HB      128

/* Forges the pair the fake divvyd hands out next: the real table with
 * @off/@val written over it (@off < 0: none), sealed with @tseals; the
 * real control page with generation @gen and a fresh heartbeat, sealed
 * with @cseals.  *@ret_ctl is the forger's writable mapping of the page. */
static int forge(const struct forge_arg *a, long off, uint64_t val, unsigned tseals,
                 uint64_t gen, unsigned cseals, uint8_t **ret_ctl)
{
    uint8_t ctl[4096];
    void *map = NULL;

    if (forged_table >= 0)
        close(forged_table);
    if (forged_ctl >= 0)
        close(forged_ctl);
    memcpy(ctl, a->ctl, sizeof(ctl));
    memcpy(ctl + CTL_GEN, &gen, sizeof(gen));
    *(uint64_t *)(void *)(ctl + CTL_HB) = clock_now_ms() + 3600000;  /* fresh for an hour */
    forged_table = forge_memfd(a->table, a->table_len, 0, NULL);
    if (forged_table < 0)
        return -1;
    if (off >= 0 && pwrite(forged_table, &val, sizeof(val), off) != (ssize_t)sizeof(val))
        return -1;
    if (tseals && fcntl(forged_table, F_ADD_SEALS, tseals) < 0)
        return -1;
    forged_ctl = forge_memfd(ctl, sizeof(ctl), cseals, &map);
    if (forged_ctl < 0)
        return -1;
    if (ret_ctl)
        *ret_ctl = map;
    return 0;
}

static void fake_answer(int fd)
{
    char buf[4096];
    size_t len = 0;
    ssize_t n;

    while ((n = read(fd, buf + len, sizeof(buf) - len)) > 0) {
        char *nl;

        len += (size_t)n;
        while ((nl = memchr(buf, '\n', len)) != NULL) {
            size_t line = (size_t)(nl - buf) + 1;

            if (strncmp(buf, "FAST\n", 5) == 0 && line == 5) {
                int fds[2] = { forged_table, forged_ctl };
                union {
                    char b[CMSG_SPACE(sizeof(fds))];
                    struct cmsghdr align;
                } u;
                struct iovec iov = { forged_reply, strlen(forged_reply) };
                struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
                                      .msg_controllen = sizeof(u.b) };
                struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);

                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(fds));
                memcpy(CMSG_DATA(cm), fds, sizeof(fds));
                if (sendmsg(fd, &msg, MSG_NOSIGNAL) < 0)
                    return;
            } else if (strncmp(buf, "REFILL", 6) != 0) {
                static const char ok[] = "OK true 42 0\n";

                if (send(fd, ok, sizeof(ok) - 1, MSG_NOSIGNAL) < 0)
                    return;
            }
            memmove(buf, buf + line, len - line);
            len -= line;
        }
        if (len == sizeof(buf))
            return;
    }
}

static void *fake_divvyd(void *arg)
{
    int lfd = *(int *)arg;

    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

        if (fd < 0)
            return NULL;
        fake_answer(fd);
        close(fd);
    }
}

/* Three AUTO hits answer (fast or by the socket, as @want_fast says: -1
 * either); a FAST_ONLY handle opens and hits, or fails cleanly. */
static int forged_probe(const struct forge_arg *a, const char *what, int i, int want_fast)
{
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/fast" }, { "user", "forged" } };
    char addr[HARNESS_PATH + 40];
    struct divvy *h = NULL;
    int r;

    snprintf(addr, sizeof(addr), "unix:%s", a->sock);
    if (divvy_open(addr, DIVVY_AUTO, &h) < 0) {
        fprintf(stderr, "forged %s #%d: open failed\n", what, i);
        return -1;
    }
    for (int k = 0; k < 3; k++) {
        r = divvy_hit(h, kv, 2, &res);
        if (r < 0 || (want_fast >= 0 && res.fast_path != want_fast) ||
            (!res.fast_path && res.credit != FORGE_CREDIT)) {
            fprintf(stderr, "forged %s #%d: hit: %s, fast %d (want %d), credit %llu\n", what,
                    i, r < 0 ? divvy_errmsg(h) : "ok", res.fast_path, want_fast,
                    (unsigned long long)res.credit);
            divvy_close(h);
            return -1;
        }
    }
    divvy_close(h);
    if (divvy_open(addr, DIVVY_FAST_ONLY, &h) == 0) {
        r = divvy_hit(h, kv, 2, &res);
        divvy_close(h);
        if ((r < 0 && r != -ENOTSUP) || (want_fast == 1 && r < 0)) {
            fprintf(stderr, "forged %s #%d: fast-only hit: %s\n", what, i, strerror(-r));
            return -1;
        }
    } else if (want_fast == 1) {
        fprintf(stderr, "forged %s #%d: the intact pair cannot be mapped\n", what, i);
        return -1;
    }
    return 0;
}

static int write_bytes(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), r = 0;

    if (fd < 0)
        return -errno;
    if (write(fd, data, len) != (ssize_t)len)
        r = -EIO;
    close(fd);
    return r;
}

/* One handle that loaded generation G: the control page then says 0, G - 1,
 * 2^64 - 1 (no such file) and G + 7 (a file of another generation): each
 * hit goes to the socket, none crashes; back at G it is in-process again. */
static int forged_generations(const struct forge_arg *a)
{
    const uint64_t gens[] = { 0, a->gen - 1, UINT64_MAX, a->gen + 7, a->gen };
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/fast" }, { "user", "gens" } };
    char addr[HARNESS_PATH + 40], other[HARNESS_PATH + 40];
    struct divvy *h = NULL;
    uint8_t *ctl = NULL;

    snprintf(other, sizeof(other), "%s/rules.%llu", a->dir, (unsigned long long)a->gen + 7);
    if (write_bytes(other, a->blob, a->blob_len) < 0)
        return 30;
    if (forge(a, -1, 0, SEALS_TABLE, a->gen, SEALS_CTL, &ctl) < 0)
        return 31;
    snprintf(addr, sizeof(addr), "unix:%s", a->sock);
    if (divvy_open(addr, DIVVY_AUTO, &h) < 0 || divvy_hit(h, kv, 2, &res) < 0 ||
        !res.fast_path)
        return 32;
    for (size_t i = 0; i < sizeof(gens) / sizeof(gens[0]); i++) {
        int want_fast = gens[i] == a->gen;

        __atomic_store_n((uint64_t *)(void *)(ctl + CTL_GEN), gens[i], __ATOMIC_RELEASE);
        for (int k = 0; k < 3; k++) {
            if (divvy_hit(h, kv, 2, &res) < 0)
                return 33;
            if (res.fast_path != want_fast || (!want_fast && res.credit != FORGE_CREDIT)) {
                fprintf(stderr, "forged generation %llu (loaded %llu): fast %d credit %llu\n",
                        (unsigned long long)gens[i], (unsigned long long)a->gen,
                        res.fast_path, (unsigned long long)res.credit);
                return 34;
            }
        }
    }
    divvy_close(h);
    unlink(other);
    return 0;
}

static int forged_child(void *arg)
{
    struct forge_arg *a = arg;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    char rules[HARNESS_PATH + 40];
    uint8_t *mut = malloc(a->blob_len + 64);
    unsigned seed = 4242;
    pthread_t th;
    int lfd;

    /* A crash must end this child, reported as a signal (cmocka's handler
     * would carry on in the fork). */
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    if (!mut)
        return 10;
    snprintf(forged_reply, sizeof(forged_reply), "OK fast %s\n", a->dir);
    snprintf(rules, sizeof(rules), "%s/rules.%llu", a->dir, (unsigned long long)a->gen);
    if (write_bytes(rules, a->blob, a->blob_len) < 0)
        return 11;
    if (strlen(a->sock) >= sizeof(sa.sun_path))
        return 12;
    memcpy(sa.sun_path, a->sock, strlen(a->sock) + 1);
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 16) < 0 ||
        pthread_create(&th, NULL, fake_divvyd, &lfd) != 0)
        return 12;

    /* The intact pair works in-process: the cases below really reach it. */
    if (forge(a, -1, 0, SEALS_TABLE, a->gen, SEALS_CTL, NULL) < 0 ||
        forged_probe(a, "nothing", 0, 1) < 0)
        return 13;
    /* Table header: magic, version, slot count, size; a table without seals. */
    {
        const long offs[] = { 0, 8, 20, 24 };
        const uint64_t vals[] = { 0x4242424242424242ull, 0xffffffff00000099ull, 1u << 20,
                                  1ull << 40 };

        for (int i = 0; i < 4; i++)
            if (forge(a, offs[i], vals[i], SEALS_TABLE, a->gen, SEALS_CTL, NULL) < 0 ||
                forged_probe(a, "table header", i, 0) < 0)
                return 14;
        if (forge(a, -1, 0, 0, a->gen, SEALS_CTL, NULL) < 0 ||
            forged_probe(a, "unsealed table", 0, 0) < 0)
            return 15;
    }
    /* Control page: generation 0, 2^64 - 1 with no such file, no write seal. */
    if (forge(a, -1, 0, SEALS_TABLE, 0, SEALS_CTL, NULL) < 0 ||
        forged_probe(a, "generation 0", 0, 0) < 0)
        return 16;
    if (forge(a, -1, 0, SEALS_TABLE, UINT64_MAX, SEALS_CTL, NULL) < 0 ||
        forged_probe(a, "generation 2^64-1", 0, 0) < 0)
        return 17;
    if (forge(a, -1, 0, SEALS_TABLE, a->gen, F_SEAL_SHRINK | F_SEAL_GROW, NULL) < 0 ||
        forged_probe(a, "writable control page", 0, 0) < 0)
        return 18;
    if (forged_generations(a) != 0)
        return 19;

    /* Slots full of garbage under valid headers: answers, fast or not. */
    {
        uint8_t *junk = malloc(a->table_len);

        if (!junk)
            return 20;
        memcpy(junk, a->table, 20480);
        for (size_t k = 20480; k < a->table_len; k++)
            junk[k] = (uint8_t)rand_r(&seed);
        memcpy(a->table, junk, a->table_len);
        free(junk);
        if (forge(a, -1, 0, SEALS_TABLE, a->gen, SEALS_CTL, NULL) < 0 ||
            forged_probe(a, "slots", 0, -1) < 0)
            return 21;
    }

    /* Rules file: every header word garbage, truncations, random flips. */
    for (size_t w = 0; w < 16; w++) {
        memcpy(mut, a->blob, a->blob_len);
        memset(mut + w * 8, 0xff, 8);
        if (write_bytes(rules, mut, a->blob_len) < 0 ||
            forged_probe(a, "rules header word", (int)w, -1) < 0)
            return 22;
    }
    for (int i = 0; i < 150; i++) {
        size_t n = a->blob_len;

        memcpy(mut, a->blob, a->blob_len);
        if (i % 3 == 0) {
            n = (size_t)rand_r(&seed) % a->blob_len;
        } else {
            int flips = 1 + rand_r(&seed) % 8;

            for (int k = 0; k < flips; k++)
                mut[(size_t)rand_r(&seed) % a->blob_len] ^=
                    (unsigned char)(1u << (rand_r(&seed) % 8));
        }
        if (write_bytes(rules, mut, n) < 0 || forged_probe(a, "rules file", i, -1) < 0)
            return 23;
    }
    free(mut);
    return 0;
}

static int read_all(int fd, uint8_t *buf, size_t len)
{
    return pread(fd, buf, len, 0) == (ssize_t)len ? 0 : -EIO;
}

static void test_fastpath_forged_handover(void **state)
{
    struct harness_daemon *d = start_fast(fast_conf);
    struct forge_arg *a = harness_scratch(sizeof(*a));
    struct divvy *h = open_env(DIVVY_AUTO);
    char stats[HARNESS_LINE], path[HARNESS_PATH + 40];
    struct harness_conn *c;
    struct stat st;
    long long gen;
    int tfd = -1, cfd = -1, fd, status;
    pid_t pid;

    (void)state;
    assert_non_null(a);
    harness_wait_fast(h, (struct divvy_kv[]){ { "path", "/fast" } }, 1);
    divvy_close(h);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_multi(c, "STATS", stats, sizeof(stats)));
    CHECK(harness_stat(stats, "config_generation", &gen));
    harness_close(c);
    a->gen = (uint64_t)gen;
    snprintf(a->dir, sizeof(a->dir), "%s/forged", d->dir);
    snprintf(a->sock, sizeof(a->sock), "%s/fake.sock", a->dir);
    assert_int_equal(mkdir(a->dir, 0700), 0);
    CHECK(fast_fds_get(d->sock, &tfd, &cfd));
    assert_int_equal(fstat(tfd, &st), 0);
    a->table_len = (size_t)st.st_size;
    a->table = harness_scratch(a->table_len);
    assert_non_null(a->table);
    CHECK(read_all(tfd, a->table, a->table_len));
    CHECK(read_all(cfd, a->ctl, sizeof(a->ctl)));
    close(tfd);
    close(cfd);
    snprintf(path, sizeof(path), "%s/rules.%llu", d->state, (unsigned long long)a->gen);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    a->blob_len = (size_t)st.st_size;
    a->blob = harness_scratch(a->blob_len);
    assert_non_null(a->blob);
    CHECK(read_all(fd, a->blob, a->blob_len));
    close(fd);
    CHECK(harness_spawn(forged_child, a, &pid));
    CHECK(harness_reap(pid, 60000, &status));
    if (status != 0)
        fail_msg("the forged hand-over client %s %d", status > 128 ? "died of signal"
                                                                 : "failed at step",
                 status > 128 ? status - 128 : status);
}

/* ---- fast-path hits reach STATS and the metrics --------------------------------------------- */

/* Hits decided in-process are counted in the table (in batches, flushed at
 * close) and reported by the daemon's STATS fast_path_hits. */
static void test_fastpath_hits_counted(void **state)
{
    struct harness_daemon *d = start_fast(fast_conf);
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[2] = { { "path", "/fast" }, { "user", "counted" } };
    struct harness_conn *c;
    char stats[HARNESS_LINE];
    struct divvy *h = open_env(DIVVY_FAST_ONLY);
    long long hits;

    (void)state;
    harness_wait_fast(h, (struct divvy_kv[]){ { "path", "/fast" } }, 1);
    for (int i = 0; i < 3000; i++) {
        CHECK(divvy_hit(h, kv, 2, &res));
        assert_int_equal(res.fast_path, 1);
    }
    divvy_close(h);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_multi(c, "STATS", stats, sizeof(stats)));
    CHECK(harness_stat(stats, "fast_path_hits", &hits));
    assert_int_equal(hits, 3000);
    harness_close(c);
}

/* ---- SIGKILL mid-hammer ------------------------------------------------------------------ */

#define KILL_LIMIT 1000000
#define KILL_ROUNDS 20

struct kill_shared {
    volatile int started;
    long errors;
    char first[256];
    unsigned char seen[KILL_LIMIT];
};

static int kill_child(void *arg)
{
    struct kill_shared *sh = arg;
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy_kv kv[1] = { { "path", "/kill" } };
    struct divvy_kv ckv[2] = { { "path", "/claims" }, { "user", NULL } };
    char user[32];
    struct divvy *h = NULL;

    if (divvy_open(NULL, DIVVY_AUTO, &h) < 0)
        return 1;
    for (unsigned long i = 0;; i++) {
        int r;

        if (i % 256 == 255) {
            /* New keys: kills also land inside slot claims. */
            snprintf(user, sizeof(user), "%d-%lu", (int)getpid(), i);
            ckv[1].value = user;
            r = divvy_hit(h, ckv, 2, &res);
        } else {
            r = divvy_hit(h, kv, 1, &res);
            if (r == 0 && res.allowed && res.credit < KILL_LIMIT)
                __atomic_fetch_add(&sh->seen[res.credit], 1, __ATOMIC_RELAXED);
        }
        if (r < 0 && !__atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED))
            snprintf(sh->first, sizeof(sh->first), "%s", divvy_errmsg(h));
        if (i == 1000)
            sh->started = 1;
    }
    return 0;
}

static void test_fastpath_sigkill(void **state)
{
    struct kill_shared *sh = shared_new(sizeof(*sh));
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy *h;
    long missing = 0, dup = 0;
    uint64_t t0;
    long long credit, left;
    unsigned seed = 7;

    (void)state;
    start_fast(fast_conf);
    h = open_env(DIVVY_AUTO);
    harness_wait_fast(h, (struct divvy_kv[]){ { "path", "/kill" } }, 1);
    for (int round = 0; round < KILL_ROUNDS; round++) {
        uint64_t deadline = harness_now_ms() + 10000;
        pid_t pid;
        int status;

        sh->started = 0;
        CHECK(harness_spawn(kill_child, sh, &pid));
        while (!sh->started && harness_now_ms() < deadline)
            harness_pause_ms(1);
        assert_true(sh->started);
        harness_pause_ms(1 + (unsigned)(rand_r(&seed) % 10));
        assert_int_equal(kill(pid, SIGKILL), 0);
        CHECK(harness_reap(pid, 10000, &status));
        assert_int_equal(status, 128 + SIGKILL);
    }
    if (sh->errors)
        fail_msg("%ld client errors, first: %s", sh->errors, sh->first);
    /* The key still answers at once, and takes what is left, exactly: a
     * TAKE of n that leaves c consumed the credit values c .. c + n - 1. */
    t0 = harness_now_ms();
    CHECK(divvy_peek(h, (struct divvy_kv[]){ { "path", "/kill" } }, 1, &res));
    assert_int_equal(res.fast_path, 1);
    credit = (long long)res.credit;
    left = credit;
    while (credit > 0) {
        uint64_t n = credit > 1000 ? 1000 : (uint64_t)credit;

        CHECK(divvy_take(h, n, (struct divvy_kv[]){ { "path", "/kill" } }, 1, &res));
        assert_int_equal(res.allowed, 1);
        assert_int_equal((long long)res.credit, credit - (long long)n);
        credit = (long long)res.credit;
        for (uint64_t v = res.credit; v < res.credit + n; v++)
            sh->seen[v]++;
    }
    CHECK(divvy_hit(h, (struct divvy_kv[]){ { "path", "/kill" } }, 1, &res));
    assert_int_equal(res.allowed, 0);
    assert_true(harness_now_ms() - t0 < 5000);
    /* No credit value was reported twice (no double counting), and those
     * never reported are at most one per kill: a hit whose process died
     * between its compare-and-swap and its report. */
    for (long c = 0; c < KILL_LIMIT; c++) {
        if (sh->seen[c] > 1)
            dup++;
        else if (sh->seen[c] == 0)
            missing++;
    }
    fprintf(stderr, "  %d kills; %lld credits were left afterwards; %ld never reported\n",
            KILL_ROUNDS, left, missing);
    assert_int_equal(dup, 0);
    assert_true(missing <= KILL_ROUNDS);
    /* Claims killed half-way never wedge a key: new and old keys still work. */
    for (int i = 0; i < 100; i++) {
        char user[16];

        snprintf(user, sizeof(user), "after-%d", i);
        CHECK(divvy_hit(h, (struct divvy_kv[]){ { "path", "/claims" }, { "user", user } }, 2,
                        &res));
        assert_int_equal(res.allowed, 1);
    }
    divvy_close(h);
}

/* ---- exactness across paths --------------------------------------------------------------- */

#define EXACT_LIMIT 5000
#define EXACT_FAST_HITS 40000
#define EXACT_SOCK_HITS 10000
#define EXACT_BATCH 100

struct exact_shared {
    volatile int go;
    long allowed, fast, errors;
    char first[256];
    int seen[EXACT_LIMIT];
};

struct exact_arg {
    struct exact_shared *sh;
    bool socket;
};

static void exact_note(struct exact_shared *sh, const struct divvy_result *res)
{
    if (res->fast_path)
        __atomic_fetch_add(&sh->fast, 1, __ATOMIC_RELAXED);
    if (!res->allowed)
        return;
    __atomic_fetch_add(&sh->allowed, 1, __ATOMIC_RELAXED);
    if (res->credit < EXACT_LIMIT)
        __atomic_fetch_add(&sh->seen[res->credit], 1, __ATOMIC_RELAXED);
}

static int exact_child(void *arg)
{
    struct exact_arg *a = arg;
    struct exact_shared *sh = a->sh;
    struct divvy_kv kv[1] = { { "path", "/exact" } };
    struct divvy_request rq[EXACT_BATCH];
    struct divvy_result res[EXACT_BATCH];
    struct divvy *h = NULL;
    int r = 0;

    if (divvy_open(NULL, a->socket ? DIVVY_SOCKET_ONLY : DIVVY_AUTO, &h) < 0)
        return 1;
    for (int i = 0; i < EXACT_BATCH; i++) {
        rq[i] = (struct divvy_request){ .amount = 1, .kv = kv, .n_kv = 1 };
        res[i].size = sizeof(res[i]);
    }
    while (!sh->go)
        ;
    if (a->socket) {
        for (int done = 0; done < EXACT_SOCK_HITS && r >= 0; done += EXACT_BATCH) {
            r = divvy_hit_many(h, rq, EXACT_BATCH, res);
            for (int i = 0; r >= 0 && i < EXACT_BATCH; i++)
                exact_note(sh, &res[i]);
        }
    } else {
        for (int i = 0; i < EXACT_FAST_HITS && r >= 0; i++) {
            r = divvy_hit(h, kv, 1, &res[0]);
            if (r >= 0)
                exact_note(sh, &res[0]);
        }
    }
    if (r < 0 && !__atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED))
        snprintf(sh->first, sizeof(sh->first), "%s", divvy_errmsg(h));
    divvy_close(h);
    return 0;
}

static void test_fastpath_exact_across_paths(void **state)
{
    struct harness_daemon *d = start_fast(fast_conf);
    struct exact_shared *sh = shared_new(sizeof(*sh));
    struct exact_arg args[4] = { { sh, false }, { sh, false }, { sh, true }, { sh, true } };
    struct divvy *h = open_env(DIVVY_AUTO);
    pid_t pids[4];
    int status;

    (void)state;
    (void)d;
    harness_wait_fast(h, (struct divvy_kv[]){ { "path", "/exact" } }, 1);
    divvy_close(h);
    for (int i = 0; i < 4; i++)
        CHECK(harness_spawn(exact_child, &args[i], &pids[i]));
    sh->go = 1;
    for (int i = 0; i < 4; i++) {
        CHECK(harness_reap(pids[i], 60000, &status));
        assert_int_equal(status, 0);
    }
    if (sh->errors)
        fail_msg("%ld client errors, first: %s", sh->errors, sh->first);
    fprintf(stderr, "  %d attempts, %ld allowed, %ld decided in-process\n",
            2 * EXACT_FAST_HITS + 2 * EXACT_SOCK_HITS, sh->allowed, sh->fast);
    assert_int_equal(sh->allowed, EXACT_LIMIT);
    assert_true(sh->fast > 0);
    for (int c = 0; c < EXACT_LIMIT; c++)
        if (sh->seen[c] != 1)
            fail_msg("credit %d reported by %d allowed hits (want 1)", c, sh->seen[c]);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fastpath_no_syscall, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_fastpath_reload_hammer, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_fastpath_forged_handover, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_fastpath_sigkill, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_fastpath_hits_counted, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_fastpath_exact_across_paths, harness_setup,
                                        harness_teardown),
    };

    if (argc == 3 && strcmp(argv[1], HAMMER_ARG) == 0)
        return hammer_main(atol(argv[2]));
    return cmocka_run_group_tests_name("fastpath", tests, NULL, NULL);
}
