/* SPDX-License-Identifier: MIT */
/*
 * divvy-rls-bench: load for divvyd's Envoy RLS listener (docs/rls.md), the
 * RLS rows of tools/bench.sh.  One thread drives CONNS HTTP/2 connections
 * (nghttp2 client sessions), each keeping DEPTH ShouldRateLimit calls in
 * flight, every call one descriptor {path=/bench, actor=kN} of domain
 * "bench" (N cycling over KEYS actors), for SECONDS; then prints calls per
 * second and the latency of a call (p50, p99, p99.9, microseconds), as
 * divvy-bench prints its rows.  A call whose grpc-status is not 0, or that
 * is reset, is an error.  The request is encoded by hand (the message is
 * fixed but for the actor), so the tool needs only libnghttp2, and OpenSSL
 * for -s: TLS with ALPN h2 to an "rls:tls:" listener, divvyd's certificate
 * verified against CAFILE (docs/security.md).
 *   divvy-rls-bench HOST:PORT [-c CONNS] [-d DEPTH] [-t SECONDS] [-k KEYS] [-s CAFILE] [-q]
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#define CONNS_MAX   64
#define BUCKETS     64          /* latency histogram: powers of 2^(1/2) microseconds */

struct call {
    uint64_t start_us;
    uint8_t body[128];
    size_t len, off;
    int status;                 /* grpc-status; -1 none yet */
};

struct bconn {
    int fd;
    SSL *ssl;                   /* -s: TLS; NULL: h2c */
    nghttp2_session *ses;
    unsigned inflight;
};

static unsigned depth = 32, n_keys = 10000, next_key;
static double seconds = 5;
static uint64_t done_calls, errors, hist[BUCKETS];
static int stopping;

static uint64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static unsigned bucket_of(uint64_t us)
{
    unsigned b = 0;

    while (b + 1 < BUCKETS && (1.0 * (1u << (b / 2)) * (b % 2 ? 1.41421356 : 1.0)) < (double)us)
        b++;
    return b;
}

static double bucket_us(unsigned b)
{
    return (1u << (b / 2)) * (b % 2 ? 1.41421356 : 1.0);
}

/* Appends a length-delimited field @tag of @len bytes (all short here) to @buf at *@n. */
static void put(uint8_t *buf, size_t *n, uint8_t tag, const void *data, size_t len)
{
    buf[(*n)++] = tag;
    buf[(*n)++] = (uint8_t)len;
    memcpy(buf + *n, data, len);
    *n += len;
}

/* The framed RateLimitRequest {domain "bench", [{path /bench}, {actor kN}]}. */
static size_t encode(uint8_t *buf, unsigned key)
{
    char actor[16];
    uint8_t e1[32], e2[32], d[80], m[112];
    size_t n1 = 0, n2 = 0, nd = 0, nm = 0;
    size_t al = (size_t)snprintf(actor, sizeof(actor), "k%u", key);

    put(e1, &n1, 0x0a, "path", 4);              /* Entry.key = 1 */
    put(e1, &n1, 0x12, "/bench", 6);            /* Entry.value = 2 */
    put(e2, &n2, 0x0a, "actor", 5);
    put(e2, &n2, 0x12, actor, al);
    put(d, &nd, 0x0a, e1, n1);                  /* RateLimitDescriptor.entries = 1 */
    put(d, &nd, 0x0a, e2, n2);
    put(m, &nm, 0x0a, "bench", 5);              /* RateLimitRequest.domain = 1 */
    put(m, &nm, 0x12, d, nd);                   /* RateLimitRequest.descriptors = 2 */
    memset(buf, 0, 4);                          /* uncompressed, length < 256 */
    buf[4] = (uint8_t)nm;
    memcpy(buf + 5, m, nm);
    return 5 + nm;
}

static ssize_t read_body(nghttp2_session *ses, int32_t id, uint8_t *buf, size_t len,
                         uint32_t *flags, nghttp2_data_source *src, void *user)
{
    struct call *c = src->ptr;
    size_t n = c->len - c->off;

    (void)ses;
    (void)id;
    (void)user;
    if (n > len)
        n = len;
    memcpy(buf, c->body + c->off, n);
    c->off += n;
    if (c->off == c->len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int submit(struct bconn *b)
{
    static const nghttp2_nv nv[] = {
        { (uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0 },
        { (uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0 },
        { (uint8_t *)":authority", (uint8_t *)"divvy", 10, 5, 0 },
        { (uint8_t *)":path",
          (uint8_t *)"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", 5, 60, 0 },
        { (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0 },
        { (uint8_t *)"te", (uint8_t *)"trailers", 2, 8, 0 },
    };
    struct call *c = calloc(1, sizeof(*c));
    nghttp2_data_provider prd = { .read_callback = read_body };

    if (!c)
        return -ENOMEM;
    c->len = encode(c->body, next_key++ % n_keys);
    c->status = -1;
    c->start_us = now_us();
    prd.source.ptr = c;
    if (nghttp2_submit_request(b->ses, NULL, nv, 6, &prd, c) < 0) {
        free(c);
        return -EIO;
    }
    b->inflight++;
    return 0;
}

static int on_header(nghttp2_session *ses, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    struct call *c = nghttp2_session_get_stream_user_data(ses, frame->hd.stream_id);

    (void)flags;
    (void)user;
    (void)valuelen;
    if (c && namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
        c->status = atoi((const char *)value);
    return 0;
}

static int on_close(nghttp2_session *ses, int32_t id, uint32_t code, void *user)
{
    struct bconn *b = user;
    struct call *c = nghttp2_session_get_stream_user_data(ses, id);

    if (!c)
        return 0;
    if (code != 0 || c->status != 0)
        errors++;
    else
        hist[bucket_of(now_us() - c->start_us)]++;
    done_calls++;
    free(c);
    b->inflight--;
    if (!stopping)
        submit(b);
    return 0;
}

static int connect_to(const char *hostport)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
    int fd, one = 1;

    if (!colon || (size_t)(colon - hostport) >= sizeof(host))
        return -EINVAL;
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return -EADDRNOTAVAIL;
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return -ECONNREFUSED;
    }
    freeaddrinfo(ai);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* Writes what the session queued, gathered into few send()s. */
static int flush_out(struct bconn *b)
{
    static uint8_t out[65536];
    size_t len = 0;
    const uint8_t *data;
    ssize_t n;

    for (;;) {
        n = nghttp2_session_mem_send(b->ses, &data);
        if (n < 0)
            return -EIO;
        if (len > 0 && (n == 0 || len + (size_t)n > sizeof(out))) {
            for (size_t off = 0; off < len;) {
                ssize_t w = b->ssl ? SSL_write(b->ssl, out + off, (int)(len - off))
                                   : send(b->fd, out + off, len - off, MSG_NOSIGNAL);

                if (w <= 0)
                    return b->ssl ? -EIO : -errno;
                off += (size_t)w;
            }
            len = 0;
        }
        if (n == 0)
            return 0;
        if ((size_t)n > sizeof(out))
            return -EMSGSIZE;
        memcpy(out + len, data, (size_t)n);
        len += (size_t)n;
    }
}

/* -s: TLS on @b's connected socket, ALPN h2, divvyd's certificate verified. */
static int tls_start(SSL_CTX *ctx, struct bconn *b, const char *hostport)
{
    static const unsigned char h2[] = "\x02h2";
    const unsigned char *alpn = NULL;
    unsigned alpn_len = 0;
    char host[256];
    const char *colon = strrchr(hostport, ':');

    snprintf(host, sizeof(host), "%.*s", (int)(colon - hostport), hostport);
    b->ssl = SSL_new(ctx);
    if (!b->ssl || SSL_set_fd(b->ssl, b->fd) != 1 ||
        SSL_set_alpn_protos(b->ssl, h2, sizeof(h2) - 1) != 0 ||
        SSL_set1_host(b->ssl, host) != 1 || SSL_connect(b->ssl) != 1) {
        ERR_print_errors_fp(stderr);
        return -EPROTO;
    }
    SSL_get0_alpn_selected(b->ssl, &alpn, &alpn_len);
    if (alpn_len != 2 || memcmp(alpn, "h2", 2) != 0) {
        fprintf(stderr, "divvy-rls-bench: the server did not select ALPN h2\n");
        return -EPROTO;
    }
    return 0;
}

/* Feeds what the connection brought to its session (TLS: every record it
 * holds decrypted, not only what poll() saw). */
static int read_in(struct bconn *b)
{
    uint8_t buf[65536];
    ssize_t n;

    do {
        n = b->ssl ? SSL_read(b->ssl, buf, sizeof(buf)) : read(b->fd, buf, sizeof(buf));
        if (n <= 0 || nghttp2_session_mem_recv(b->ses, buf, (size_t)n) < 0)
            return -EIO;
    } while (b->ssl && SSL_pending(b->ssl) > 0);
    return 0;
}

static double pct(double q)
{
    uint64_t total = 0, seen = 0;

    for (unsigned i = 0; i < BUCKETS; i++)
        total += hist[i];
    for (unsigned i = 0; i < BUCKETS; i++) {
        seen += hist[i];
        if (total && seen >= q * (double)total)
            return bucket_us(i);
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct bconn conns[CONNS_MAX];
    struct pollfd pfd[CONNS_MAX];
    nghttp2_session_callbacks *cbs;
    unsigned n_conns = 8;
    int quiet = 0, opt;
    uint64_t start, end;
    const char *addr, *cafile = NULL;
    SSL_CTX *ctx = NULL;

    while ((opt = getopt(argc, argv, "c:d:t:k:s:q")) != -1) {
        switch (opt) {
        case 'c': n_conns = (unsigned)atoi(optarg); break;
        case 'd': depth = (unsigned)atoi(optarg); break;
        case 't': seconds = atof(optarg); break;
        case 'k': n_keys = (unsigned)atoi(optarg); break;
        case 's': cafile = optarg; break;
        case 'q': quiet = 1; break;
        default: goto usage;
        }
    }
    if (optind + 1 != argc || n_conns < 1 || n_conns > CONNS_MAX || depth < 1 || n_keys < 1)
        goto usage;
    addr = argv[optind];
    if (cafile) {
        ctx = SSL_CTX_new(TLS_client_method());
        if (!ctx || SSL_CTX_load_verify_locations(ctx, cafile, NULL) != 1) {
            fprintf(stderr, "divvy-rls-bench: %s: no CA certificate\n", cafile);
            return 1;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    }
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return 1;
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    for (unsigned i = 0; i < n_conns; i++) {
        conns[i].fd = connect_to(addr);
        conns[i].ssl = NULL;
        conns[i].inflight = 0;
        if (conns[i].fd < 0 || (ctx && tls_start(ctx, &conns[i], addr) < 0) ||
            nghttp2_session_client_new(&conns[i].ses, cbs, &conns[i]) != 0) {
            fprintf(stderr, "divvy-rls-bench: cannot connect to %s\n", addr);
            return 1;
        }
        nghttp2_submit_settings(conns[i].ses, 0, NULL, 0);
        for (unsigned j = 0; j < depth; j++)
            submit(&conns[i]);
        pfd[i] = (struct pollfd){ .fd = conns[i].fd, .events = POLLIN };
    }
    start = now_us();
    end = start + (uint64_t)(seconds * 1e6);
    for (;;) {
        uint64_t t = now_us();
        unsigned busy = 0;

        if (t >= end)
            stopping = 1;
        for (unsigned i = 0; i < n_conns; i++) {
            if (flush_out(&conns[i]) < 0)
                goto fail;
            busy += conns[i].inflight;
        }
        if (stopping && (busy == 0 || t >= end + 2000000))
            break;
        if (poll(pfd, n_conns, 100) < 0)
            goto fail;
        for (unsigned i = 0; i < n_conns; i++)
            if ((pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) && read_in(&conns[i]) < 0)
                goto fail;
    }
    {
        double secs = (double)(now_us() - start) / 1e6;

        if (quiet)
            printf("%.0f %.0f %.0f %.0f %llu\n", (double)done_calls / secs, pct(0.5), pct(0.99),
                   pct(0.999), (unsigned long long)errors);
        else
            printf("%llu calls in %.1f s: %.0f calls/s, p50 %.0f us, p99 %.0f us, "
                   "p99.9 %.0f us, %llu errors\n", (unsigned long long)done_calls, secs,
                   (double)done_calls / secs, pct(0.5), pct(0.99), pct(0.999),
                   (unsigned long long)errors);
    }
    return errors ? 1 : 0;
fail:
    fprintf(stderr, "divvy-rls-bench: connection to %s failed\n", addr);
    return 1;
usage:
    fprintf(stderr, "usage: divvy-rls-bench HOST:PORT [-c CONNS] [-d DEPTH] [-t SECONDS] "
            "[-k KEYS] [-s CAFILE] [-q]\n");
    return 2;
}
