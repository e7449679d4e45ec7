/* SPDX-License-Identifier: MIT */
/*
 * Integration: what unprivileged input floods make divvyd hold (issue 18
 * items 2 and 8; docs/daemon.md "Admission", docs/rls.md "Limits").  Each
 * flood runs in a child that drops to a throwaway uid and never reads a
 * byte of divvyd's answers:
 *   - RLS: 4 x 1,000 TCP connections (four loopback source addresses, under
 *     the per-address cap) each open 16 HTTP/2 streams and send a 16 KiB
 *     DATA frame on each, never ending one.  divvyd's VmRSS stays under
 *     256 MB, root on the Unix socket is answered meanwhile, and once the
 *     clients are gone VmRSS falls below 100 MB within 30 s.
 *   - RESP: as many connections each send a huge array header ("*N") and
 *     bulk strings they never complete: the same bounds.
 *   - RLS, item 8: a peer that sets its receive window to 0 and opens
 *     streams is closed by request_timeout_ms although nothing moves.
 * The HTTP/2 frames are written by hand (the client preface, SETTINGS, one
 * header block encoded once with nghttp2's HPACK deflater, DATA), so a
 * flood costs the child one template shared by every connection.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "harness.h"

#define FLOOD_UID    64101
#define FLOOD_GID    64101
#define ZERO_UID     64102
#define N_SRC        4
#define PER_SRC      1000       /* under tcp_connections_per_address (1024) */
#define STREAMS      16
#define BODY         16384      /* one DATA frame: the default SETTINGS_MAX_FRAME_SIZE */
#define NOFILE       8192
#define SETTLE_MS    30000      /* VmRSS must fall within this after the flood */
#define RLS_PATH     "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

/* ASan's shadow memory, redzones and quarantine roughly double a daemon's
 * footprint (and its quarantine keeps freed memory); the attack without the
 * bounds still goes far beyond these. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#if !defined(RSS_MAX_KB) && defined(UNDER_ASAN)
#define RSS_MAX_KB   (512 * 1024)
#define RSS_AFTER_KB (400 * 1024)
#define RSS_BACK_KB  (400 * 1024)
#elif !defined(RSS_MAX_KB)
#define RSS_MAX_KB   (256 * 1024)
#define RSS_AFTER_KB (100 * 1024)   /* the bound, 30 s after */
#define RSS_BACK_KB  (40 * 1024)    /* ... and no more than this above the start */
#endif

/* ---- HTTP/2 frames by hand ---------------------------------------------------------- */

struct buf {
    uint8_t *p;
    size_t len, cap;
};

static void buf_put(struct buf *b, const void *data, size_t len)
{
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;

        while (cap < b->len + len)
            cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
}

/* A frame header (RFC 9113 4.1) and @len bytes of payload (NULL: zeros). */
static void frame(struct buf *b, uint8_t type, uint8_t flags, uint32_t id, const void *payload,
                  size_t len)
{
    uint8_t hd[9] = { (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len, type, flags,
                      (uint8_t)(id >> 24 & 0x7f), (uint8_t)(id >> 16), (uint8_t)(id >> 8),
                      (uint8_t)id };
    static const uint8_t zeros[BODY];

    buf_put(b, hd, sizeof(hd));
    buf_put(b, payload ? payload : zeros, len);
}

/* The client preface and a SETTINGS frame of @n (id, value) pairs. */
static void preface(struct buf *b, const uint32_t (*settings)[2], size_t n)
{
    static const char magic[] = NGHTTP2_CLIENT_MAGIC;
    uint8_t s[6 * 8];

    assert_true(n <= 8);
    buf_put(b, magic, sizeof(magic) - 1);
    for (size_t i = 0; i < n; i++) {
        uint8_t *e = s + 6 * i;

        e[0] = (uint8_t)(settings[i][0] >> 8);
        e[1] = (uint8_t)settings[i][0];
        e[2] = (uint8_t)(settings[i][1] >> 24);
        e[3] = (uint8_t)(settings[i][1] >> 16);
        e[4] = (uint8_t)(settings[i][1] >> 8);
        e[5] = (uint8_t)settings[i][1];
    }
    frame(b, NGHTTP2_SETTINGS, 0, 0, s, 6 * n);
}

/* A gRPC call's request headers as one HPACK block that needs no dynamic
 * table (the deflater keeps none), so every stream can send the same bytes. */
static void header_block(struct buf *b)
{
    nghttp2_nv nv[] = {
        { (uint8_t *)":method", (uint8_t *)"POST", 7, 4, NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)":scheme", (uint8_t *)"http", 7, 4, NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)":authority", (uint8_t *)"divvy", 10, 5, NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)":path", (uint8_t *)RLS_PATH, 5, sizeof(RLS_PATH) - 1,
          NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
          NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)"te", (uint8_t *)"trailers", 2, 8, NGHTTP2_NV_FLAG_NONE },
    };
    nghttp2_hd_deflater *def;
    uint8_t out[512];
    ssize_t n;

    assert_int_equal(nghttp2_hd_deflate_new(&def, 0), 0);
    n = nghttp2_hd_deflate_hd(def, out, sizeof(out), nv, sizeof(nv) / sizeof(nv[0]));
    nghttp2_hd_deflate_del(def);
    assert_true(n > 0);
    b->len = 0;
    buf_put(b, out, (size_t)n);
}

/* Item 2's template: @streams HEADERS, each followed by @body bytes of DATA
 * (the stream never ended). */
static void rls_template(struct buf *t, int streams, size_t body)
{
    static const uint32_t none[][2] = { { 0, 0 } };
    struct buf hb = { 0 };

    header_block(&hb);
    preface(t, none, 0);
    for (int i = 0; i < streams; i++) {
        frame(t, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, (uint32_t)(2 * i + 1), hb.p, hb.len);
        if (body)
            frame(t, NGHTTP2_DATA, 0, (uint32_t)(2 * i + 1), NULL, body);
    }
    free(hb.p);
}

/* ---- the flood: a child as an unprivileged uid ------------------------------------- */

struct flood {
    uid_t uid;
    int port;
    unsigned n_src, per_src;
    const uint8_t *tmpl;        /* what each connection sends */
    size_t tmpl_len;
    int report[2];
    pid_t pid;
    long long opened, written;              /* the child's report */
    long long most;             /* most TCP connections divvyd had open at once (sampled) */
};

/* A non-blocking TCP connection to @port from 127.0.0.<2 + @src>, or -errno. */
static int flood_connect(unsigned src, int port)
{
    char from[32];
    int fd;

    snprintf(from, sizeof(from), "127.0.0.%u", 2 + src);
    fd = harness_tcp_fd_from(from, port);
    if (fd >= 0 && fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
        int r = -errno;

        close(fd);
        return r;
    }
    return fd;
}

/*
 * Opens every connection, then writes the template on each, round robin
 * and without blocking (divvyd may stop reading some, or close them), until
 * every byte is out or nothing moved for 3 s; reports how many connections
 * were opened and the bytes written; then holds everything open, reading
 * nothing, until killed.
 */
static int flood_child(void *arg)
{
    struct flood *f = arg;
    unsigned n = f->n_src * f->per_src;
    int *fd = calloc(n, sizeof(*fd));
    size_t *off = calloc(n, sizeof(*off));
    long long rep[2] = { 0, 0 };
    uint64_t quiet;
    bool busy = true;

    close(f->report[0]);
    if (!fd || !off || setgroups(0, NULL) < 0 || setgid(FLOOD_GID) < 0 || setuid(f->uid) < 0)
        return 100;
    for (unsigned i = 0; i < n; i++) {
        fd[i] = flood_connect(i / f->per_src, f->port);
        if (fd[i] < 0) {
            fprintf(stderr, "flood: connection %u: %s\n", i, strerror(-fd[i]));
            return 101;
        }
        rep[0]++;
    }
    for (quiet = harness_now_ms() + 3000; busy && harness_now_ms() < quiet;) {
        busy = false;
        for (unsigned i = 0; i < n; i++) {
            ssize_t w;

            if (fd[i] < 0 || off[i] == f->tmpl_len)
                continue;
            busy = true;
            w = send(fd[i], f->tmpl + off[i], f->tmpl_len - off[i], MSG_NOSIGNAL);
            if (w > 0) {
                off[i] += (size_t)w;
                rep[1] += w;
                quiet = harness_now_ms() + 3000;
            } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                close(fd[i]);   /* divvyd closed it */
                fd[i] = -1;
            }
        }
        if (busy)
            harness_pause_ms(1);
    }
    if (write(f->report[1], rep, sizeof(rep)) != sizeof(rep))
        return 103;
    close(f->report[1]);
    for (;;)
        pause();
    return 0;
}

static void flood_start(struct flood *f)
{
    assert_int_equal(pipe2(f->report, O_CLOEXEC), 0);
    CHECK(harness_spawn(flood_child, f, &f->pid));
    close(f->report[1]);
}

/* The child's report, once it is in (0), or 1 while it is still writing. */
static int flood_report(struct flood *f, int timeout_ms)
{
    struct pollfd pfd = { .fd = f->report[0], .events = POLLIN };
    long long rep[2];

    if (f->report[0] < 0)
        return 0;
    if (poll(&pfd, 1, timeout_ms) != 1)
        return 1;
    if (read(f->report[0], rep, sizeof(rep)) != sizeof(rep))
        fail_msg("the flood child (uid %u) failed", (unsigned)f->uid);
    close(f->report[0]);
    f->report[0] = -1;
    f->opened = rep[0];
    f->written = rep[1];
    return 0;
}

/* Kills the flood (by PID): its connections close with it. */
static void flood_stop(struct flood *f)
{
    int status;

    assert_int_equal(kill(f->pid, SIGKILL), 0);
    CHECK(harness_reap(f->pid, 20000, &status));
    assert_int_equal(status, 128 + SIGKILL);
    if (f->report[0] >= 0)
        close(f->report[0]);
}

/* ---- divvyd ------------------------------------------------------------------------- */

/* divvyd with the shipped config and limits (etc/divvy.conf) plus @extra,
 * listening on @listen too (NULL: none), and on RESP when @resp. */
static struct harness_daemon *start_flooded(const char *listen, bool resp, const char *extra)
{
    struct harness_opts o = { .config_name = "divvy.conf", .resp = resp };
    struct rlimit rl = { NOFILE, NOFILE };
    struct harness_daemon *d = NULL;
    char src[HARNESS_PATH], *text;
    FILE *f;
    long n;

    /* Descriptors for the flood, in this process, the child and divvyd. */
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
        fail_msg("setrlimit(RLIMIT_NOFILE, %d): %s", NOFILE, strerror(errno));
    CHECK(harness_src_path("etc/divvy.conf", src, sizeof(src)));
    f = fopen(src, "r");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    text = harness_scratch((size_t)n + 1024);
    assert_true(text && fread(text, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    snprintf(text + n, 1024, "\n%s", extra ? extra : "");
    o.config_text = text;
    o.listen[0] = listen;
    CHECK(harness_start(&o, &d));
    assert_int_equal(chmod(d->dir, 0755), 0);
    return d;
}

/*
 * While @f floods: VmRSS sampled every 100 ms until the child has written
 * all it could, and 3 s more, root's PING on the Unix socket answered each
 * time; VmRSS must stay under RSS_MAX_KB.  Then the flood is killed, and
 * within SETTLE_MS divvyd must have closed every connection and VmRSS have
 * fallen below RSS_AFTER_KB and back to within RSS_BACK_KB of what it was
 * before (the memory is given back, not kept).
 * Prints the numbers.
 */
static void flood_measure(struct harness_daemon *d, struct flood *f, const char *what)
{
    struct harness_conn *root;
    long long base, rss, peak = 0, after = -1, left = -1, over = -1, paused = -1, want;
    uint64_t end = 0, t0, settled, ping, slowest = 0;

    CHECK(harness_connect(d, HARNESS_UNIX, &root));
    EXPECT_REPLY(root, "PING", "OK pong");
    base = harness_rss_kb(d->pid);
    want = base + RSS_BACK_KB < RSS_AFTER_KB ? base + RSS_BACK_KB : RSS_AFTER_KB;
    t0 = harness_now_ms();
    flood_start(f);
    for (;;) {
        int writing = flood_report(f, 100);

        rss = harness_rss_kb(d->pid);
        if (rss > peak)
            peak = rss;
        if (peak >= RSS_MAX_KB) {
            flood_stop(f);
            fail_msg("%s: divvyd's VmRSS reached %lld kB (%lld kB before)", what, peak, base);
        }
        if (!harness_alive(d))
            fail_msg("%s: divvyd died (VmRSS %lld kB at most)", what, peak);
        ping = harness_now_ms();
        EXPECT_REPLY(root, "PING", "OK pong");
        ping = harness_now_ms() - ping;
        CHECK(harness_get_stat(root, "connections_tcp", &left));
        if (left > f->most)
            f->most = left;
        if (ping > slowest)
            slowest = ping;
        if (!writing && !end)
            end = harness_now_ms() + 3000;
        if (end && harness_now_ms() > end)
            break;
        if (harness_now_ms() > t0 + 120000)
            fail_msg("%s: the flood did not finish within 120 s", what);
    }
    flood_stop(f);
    /* Once divvyd has closed them all (some it was not reading notice by a
     * timeout), VmRSS must come down: measured before that, it could pass
     * while their memory is still held. */
    left = -1;
    settled = harness_now_ms();
    for (uint64_t limit = settled + SETTLE_MS; harness_now_ms() < limit; harness_pause_ms(250)) {
        if (left != 0)
            CHECK(harness_get_stat(root, "connections_tcp", &left));
        after = harness_rss_kb(d->pid);
        if (left == 0 && after < want)
            break;
    }
    settled = harness_now_ms() - settled;
    EXPECT_REPLY(root, "PING", "OK pong");
    /* (Only printed: a divvyd before these counters fails below, on memory.) */
    harness_get_stat(root, "closed_input_limit", &over);
    harness_get_stat(root, "output_paused", &paused);
    fprintf(stderr, "  %s: %lld connections, %lld MB written; VmRSS %lld kB before, %lld kB "
            "at most, %lld kB %llu ms after; %lld closed_input_limit, %lld output_paused, "
            "%lld TCP connections at most, %lld left; root's slowest PING %llu ms\n", what,
            f->opened, f->written >> 20, base, peak, after, (unsigned long long)settled, over,
            paused, f->most, left, (unsigned long long)slowest);
    if (left != 0)
        fail_msg("%s: %lld connections still open %d s after the flood", what, left,
                 SETTLE_MS / 1000);
    if (after >= want)
        fail_msg("%s: divvyd's VmRSS still %lld kB %d s after the flood (%lld kB before, "
                 "%lld kB at most)", what, after, SETTLE_MS / 1000, base, peak);
    assert_true(harness_alive(d));
    harness_close(root);
}

/* Floods @port with @t from every connection, as FLOOD_UID; divvyd must have
 * held at least @held of them open at once (the flood is what it says). */
static void flood_run(struct harness_daemon *d, int port, const struct buf *t, const char *what,
                      long long held)
{
    struct flood f = { .uid = FLOOD_UID, .n_src = N_SRC, .per_src = PER_SRC, .port = port,
                       .tmpl = t->p, .tmpl_len = t->len };

    flood_measure(d, &f, what);
    if (f.most < held)
        fail_msg("%s: divvyd had %lld connections open at most, want %lld", what, f.most, held);
}

/* ---- item 2: RLS --------------------------------------------------------------------- */

static const char *rls_listen(int *ret_port)
{
    static char lis[64];

    *ret_port = harness_free_port(SOCK_STREAM);
    snprintf(lis, sizeof(lis), "rls:tcp:127.0.0.1:%d", *ret_port);
    return lis;
}

/* 16 streams, each with 16 KiB of its body, none ended (the review's attack). */
static void test_rls_flood_bodies(void **state)
{
    struct harness_daemon *d;
    struct buf t = { 0 };
    int port;

    (void)state;
    if (geteuid() != 0)
        skip();
    d = start_flooded(rls_listen(&port), false, NULL);
    rls_template(&t, STREAMS, BODY);
    flood_run(d, port, &t, "RLS bodies", 3 * N_SRC * PER_SRC / 4);
    free(t.p);
}

/* One stream whose header block declares a 65,000-byte value (the decoder
 * sizes its buffer for it), then sends 48 KiB of it in a HEADERS and two
 * CONTINUATION frames, and never finishes the block. */
static void test_rls_flood_headers(void **state)
{
    static const uint32_t none[][2] = { { 0, 0 } };
    /* Literal without indexing, a new name "x-a" (3 bytes), value length
     * 65,000: 127 + 64,873 in HPACK's 7-bit-prefix integer. */
    static const uint8_t field[] = { 0x00, 0x03, 'x', '-', 'a', 0x7f, 0xe9, 0xfa, 0x03 };
    struct harness_daemon *d;
    struct buf t = { 0 };
    uint8_t *block = calloc(1, BODY);
    int port;

    (void)state;
    if (geteuid() != 0)
        skip();
    assert_non_null(block);
    d = start_flooded(rls_listen(&port), false, NULL);
    memset(block, 'v', BODY);
    memcpy(block, field, sizeof(field));
    preface(&t, none, 0);
    frame(&t, NGHTTP2_HEADERS, 0, 1, block, BODY);
    memset(block, 'v', sizeof(field));
    frame(&t, NGHTTP2_CONTINUATION, 0, 1, block, BODY);
    frame(&t, NGHTTP2_CONTINUATION, 0, 1, block, BODY);
    free(block);
    flood_run(d, port, &t, "RLS header fields", 0);
    free(t.p);
}

/* ---- item 2: RESP -------------------------------------------------------------------- */

/* A command of 128 arguments whose first bulk string (as long as one may
 * be) is never completed: each connection holds it, answered nothing. */
static void test_resp_flood_arguments(void **state)
{
    static const char head[] = "*128\r\n$4096\r\n";
    struct harness_daemon *d;
    struct buf t = { 0 };
    uint8_t part[4000];

    (void)state;
    if (geteuid() != 0)
        skip();
    d = start_flooded(NULL, true, NULL);
    memset(part, 'a', sizeof(part));
    buf_put(&t, head, sizeof(head) - 1);
    buf_put(&t, part, sizeof(part));
    flood_run(d, d->resp_port, &t, "RESP arguments", 3 * N_SRC * PER_SRC / 4);
    free(t.p);
}

/* ---- item 8: a peer whose flow-control window stays shut --------------------------------- */

struct zero {
    int port;
    const uint8_t *tmpl;
    size_t tmpl_len;
    int report[2];
};

/* As ZERO_UID: sends @z's calls, reads (and drops) all that comes, and
 * reports after how many ms divvyd closed the connection (-1: not in 20 s). */
static int zero_child(void *arg)
{
    struct zero *z = arg;
    uint64_t t0, end;
    long long ms = -1;
    int fd;

    close(z->report[0]);
    if (setgroups(0, NULL) < 0 || setgid(FLOOD_GID) < 0 || setuid(ZERO_UID) < 0)
        return 100;
    fd = flood_connect(0, z->port);
    if (fd < 0)
        return 101;
    t0 = harness_now_ms();
    for (size_t off = 0; off < z->tmpl_len;) {
        ssize_t n = send(fd, z->tmpl + off, z->tmpl_len - off, MSG_NOSIGNAL);

        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return 102;
        off += n > 0 ? (size_t)n : 0;
    }
    for (end = t0 + 20000; harness_now_ms() < end;) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        uint8_t buf[4096];
        ssize_t n;

        if (poll(&pfd, 1, 100) != 1)
            continue;
        n = read(fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            ms = (long long)(harness_now_ms() - t0);
            break;
        }
    }
    if (write(z->report[1], &ms, sizeof(ms)) != sizeof(ms))
        return 103;
    return 0;
}

static void test_rls_zero_window(void **state)
{
    /* SETTINGS_INITIAL_WINDOW_SIZE = 0: divvyd may send no DATA at all. */
    static const uint32_t shut[][2] = { { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0 } };
    /* A framed RateLimitRequest: domain "edge", one descriptor user=x. */
    static const uint8_t call[] = { 0, 0, 0, 0, 19, 0x0a, 4, 'e', 'd', 'g', 'e', 0x12, 11,
                                    0x0a, 9, 0x0a, 4, 'u', 's', 'e', 'r', 0x12, 1, 'x' };
    struct harness_daemon *d;
    struct harness_conn *root;
    struct buf t = { 0 }, hb = { 0 };
    struct zero z;
    struct pollfd pfd;
    long long ms = -2, closed = -1;
    pid_t pid;
    int status;

    (void)state;
    if (geteuid() != 0)
        skip();
    d = start_flooded(rls_listen(&z.port), false,
                      "server = { request_timeout_ms = 1000; idle_timeout_ms = 60000; };\n");
    header_block(&hb);
    preface(&t, shut, 1);
    for (uint32_t id = 1; id < 2 * 100; id += 2) {
        frame(&t, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, id, hb.p, hb.len);
        frame(&t, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, id, call, sizeof(call));
    }
    z.tmpl = t.p;
    z.tmpl_len = t.len;
    assert_int_equal(pipe2(z.report, O_CLOEXEC), 0);
    CHECK(harness_spawn(zero_child, &z, &pid));
    close(z.report[1]);
    pfd = (struct pollfd){ .fd = z.report[0], .events = POLLIN };
    assert_int_equal(poll(&pfd, 1, 30000), 1);
    assert_int_equal(read(z.report[0], &ms, sizeof(ms)), sizeof(ms));
    close(z.report[0]);
    CHECK(harness_reap(pid, 10000, &status));
    assert_int_equal(status, 0);
    CHECK(harness_connect(d, HARNESS_UNIX, &root));
    CHECK(harness_get_stat(root, "closed_slow_output", &closed));
    fprintf(stderr, "  100 answers behind a shut window: closed after %lld ms "
            "(request_timeout_ms 1000), closed_slow_output=%lld\n", ms, closed);
    if (ms < 0)
        fail_msg("divvyd kept the connection whose window stays shut for 20 s");
    assert_int_equal(closed, 1);
    harness_close(root);
    free(t.p);
    free(hb.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rls_flood_bodies, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_flood_headers, harness_setup, harness_teardown),
        cmocka_unit_test_setup_teardown(test_resp_flood_arguments, harness_setup,
                                        harness_teardown),
        cmocka_unit_test_setup_teardown(test_rls_zero_window, harness_setup, harness_teardown),
    };

    return cmocka_run_group_tests_name("rls_flood", tests, NULL, NULL);
}
