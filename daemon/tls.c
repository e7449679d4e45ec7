/* SPDX-License-Identifier: MIT */
/*
 * tls: OpenSSL contexts and sessions for the "tls:" listeners (see tls.h).
 * A context is built whole from server.tls (certificate chain, key read
 * through server/secret.c's checks, client CA) and swapped under a mutex;
 * OpenSSL's reference count on SSL_CTX keeps a replaced one alive for the
 * sessions that still use it.  Sessions run on the connection's own
 * non-blocking socket (no BIO pair, no copy).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "fdio.h"
#include "log.h"
#include "secret.h"
#include "tls.h"

#define TLS_KEY_FILE_MAX (64 * 1024)

struct tls_ctx {
    SSL_CTX *ctx;
    char desc[300];             /* the certificate's subject and serial, for the log */
};

struct tls {
    pthread_mutex_t lock;
    SSL_CTX *ctx;               /* NULL until tls_install() */
};

struct tls_sess {
    SSL *ssl;
    bool ready;                 /* the handshake is done */
    bool want_write;
    bool failed;                /* a fatal error: no close_notify */
    bool counted;               /* one of the handshakes under way */
};

static uint64_t handshake_failures;
static unsigned handshaking;    /* sessions whose handshake is under way, every thread's */
static struct log_ratelimit rl_hs;

/* OpenSSL's reason for the last failure of this thread, and its queue emptied. */
static const char *ossl_reason(char *buf, size_t size)
{
    unsigned long e = ERR_peek_last_error();

    if (e)
        ERR_error_string_n(e, buf, size);
    else
        snprintf(buf, size, "unknown error");
    ERR_clear_error();
    return buf;
}

/* Reads the key at @name (mode checked: secret_open()) into @ctx. */
static int load_key(SSL_CTX *ctx, const char *name, char *err, size_t err_size)
{
    char path[PATH_MAX], why[256];
    char *buf = NULL;
    EVP_PKEY *key = NULL;
    BIO *bio = NULL;
    ssize_t n;
    int fd, r;

    fd = secret_open(name, true, path, sizeof(path), why, sizeof(why));
    if (fd < 0) {
        snprintf(err, err_size, "server.tls.key_file %s", why);
        return fd;
    }
    buf = malloc(TLS_KEY_FILE_MAX + 1);
    if (!buf) {
        r = -ENOMEM;
        goto out;
    }
    n = fdio_read_all(fd, buf, TLS_KEY_FILE_MAX + 1);
    if (n < 0 || n > TLS_KEY_FILE_MAX) {
        r = n < 0 ? (int)n : -EMSGSIZE;
        snprintf(err, err_size, "server.tls.key_file %s: %s", path,
                 n < 0 ? strerror((int)-n) : "larger than 64 KiB");
        goto out;
    }
    bio = BIO_new_mem_buf(buf, (int)n);
    key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, (void *)"") : NULL;
    if (!key) {
        snprintf(err, err_size, "server.tls.key_file %s: no PEM private key (%s)", path,
                 ossl_reason(why, sizeof(why)));
        r = -EINVAL;
        goto out;
    }
    if (SSL_CTX_use_PrivateKey(ctx, key) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        snprintf(err, err_size, "server.tls.key_file %s does not match the certificate (%s)",
                 path, ossl_reason(why, sizeof(why)));
        r = -EINVAL;
        goto out;
    }
    r = 0;
out:
    EVP_PKEY_free(key);
    BIO_free(bio);
    if (buf) {
        explicit_bzero(buf, TLS_KEY_FILE_MAX + 1);
        free(buf);
    }
    close(fd);
    return r;
}

/* The path of a public file (a certificate) named as a secret may be. */
static int public_path(const char *what, const char *name, char *path, size_t size, char *err,
                       size_t err_size)
{
    char why[256];
    int fd = secret_open(name, false, path, size, why, sizeof(why));

    if (fd < 0) {
        snprintf(err, err_size, "server.tls.%s %s", what, why);
        return fd;
    }
    close(fd);
    return 0;
}

/* ALPN: "h2" on an RLS session (app data set), nothing on the others. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned inlen, void *arg)
{
    static const unsigned char h2[] = "\x02h2";

    (void)arg;
    if (!SSL_get_app_data(ssl))
        return SSL_TLSEXT_ERR_NOACK;
    if (SSL_select_next_proto((unsigned char **)out, outlen, h2, sizeof(h2) - 1, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;      /* RFC 7301: no_application_protocol */
    return SSL_TLSEXT_ERR_OK;
}

static void describe(SSL_CTX *ctx, char *buf, size_t size)
{
    X509 *crt = SSL_CTX_get0_certificate(ctx);
    char subject[200] = "?", serial[64] = "?";
    BIGNUM *bn = NULL;
    char *hex = NULL;

    if (crt) {
        X509_NAME_oneline(X509_get_subject_name(crt), subject, sizeof(subject));
        bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(crt), NULL);
        hex = bn ? BN_bn2hex(bn) : NULL;
        if (hex)
            snprintf(serial, sizeof(serial), "%s", hex);
    }
    snprintf(buf, size, "subject %s, serial %s", subject, serial);
    OPENSSL_free(hex);
    BN_free(bn);
}

int tls_prepare(const struct config_tls *c, struct tls_ctx **ret, char *err, size_t err_size)
{
    char path[PATH_MAX], why[256];
    struct tls_ctx *x = NULL;
    STACK_OF(X509_NAME) *cas = NULL;
    int r = -ENOMEM;

    ERR_clear_error();
    if (!c->certificate_file || !c->key_file) {
        snprintf(err, err_size, "no server.tls group (certificate_file, key_file)");
        return -EINVAL;
    }
    x = calloc(1, sizeof(*x));
    if (!x || !(x->ctx = SSL_CTX_new(TLS_server_method()))) {
        snprintf(err, err_size, "out of memory for a TLS context");
        goto fail;
    }
    SSL_CTX_set_min_proto_version(x->ctx, c->min_version == 13 ? TLS1_3_VERSION
                                                               : TLS1_2_VERSION);
    /* No renegotiation (a write never needs a read), an EOF is an EOF, and
     * idle sessions give their buffers back (tls.h). */
    SSL_CTX_set_options(x->ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF |
                        SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(x->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                     SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    /* No resumption: nothing to keep across a reload, no ticket key to guard. */
    SSL_CTX_set_session_cache_mode(x->ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(x->ctx, 0);
    SSL_CTX_set_alpn_select_cb(x->ctx, alpn_select, NULL);
    r = public_path("certificate_file", c->certificate_file, path, sizeof(path), err, err_size);
    if (r < 0)
        goto fail;
    if (SSL_CTX_use_certificate_chain_file(x->ctx, path) != 1) {
        snprintf(err, err_size, "server.tls.certificate_file %s: no PEM certificate (%s)", path,
                 ossl_reason(why, sizeof(why)));
        r = -EINVAL;
        goto fail;
    }
    r = load_key(x->ctx, c->key_file, err, err_size);
    if (r < 0)
        goto fail;
    if (c->client_ca_file) {
        r = public_path("client_ca_file", c->client_ca_file, path, sizeof(path), err, err_size);
        if (r < 0)
            goto fail;
        cas = SSL_load_client_CA_file(path);
        if (!cas || SSL_CTX_load_verify_locations(x->ctx, path, NULL) != 1) {
            snprintf(err, err_size, "server.tls.client_ca_file %s: no PEM certificate (%s)",
                     path, ossl_reason(why, sizeof(why)));
            sk_X509_NAME_pop_free(cas, X509_NAME_free);
            r = -EINVAL;
            goto fail;
        }
        SSL_CTX_set_client_CA_list(x->ctx, cas);        /* takes @cas */
        SSL_CTX_set_verify(x->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    describe(x->ctx, x->desc, sizeof(x->desc));
    *ret = x;
    return 0;
fail:
    ERR_clear_error();
    tls_ctx_free(x);
    return r;
}

void tls_ctx_free(struct tls_ctx *x)
{
    if (!x)
        return;
    SSL_CTX_free(x->ctx);
    free(x);
}

struct tls *tls_new(void)
{
    struct tls *t = calloc(1, sizeof(*t));

    if (t)
        pthread_mutex_init(&t->lock, NULL);
    return t;
}

void tls_install(struct tls *t, struct tls_ctx *x)
{
    SSL_CTX *old;

    pthread_mutex_lock(&t->lock);
    old = t->ctx;
    t->ctx = x->ctx;
    pthread_mutex_unlock(&t->lock);
    log_msg(LOG_NOTICE, "TLS: new connections get the certificate with %s", x->desc);
    SSL_CTX_free(old);          /* its sessions hold their own references */
    free(x);
}

bool tls_ready(struct tls *t)
{
    bool ready;

    pthread_mutex_lock(&t->lock);
    ready = t->ctx != NULL;
    pthread_mutex_unlock(&t->lock);
    return ready;
}

void tls_free(struct tls *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* The end of @s's handshake (done, or the session freed): its place is free. */
static void sess_uncount(struct tls_sess *s)
{
    if (s->counted)
        __atomic_sub_fetch(&handshaking, 1, __ATOMIC_RELAXED);
    s->counted = false;
}

int tls_sess_new(struct tls *t, int fd, bool h2, struct tls_sess **ret)
{
    struct tls_sess *s;
    int r = -ENOMEM;

    /* What OpenSSL holds for a handshake (about 50 KiB) is in no connection
     * budget: a flood of clients that never finish one is bounded here. */
    if (__atomic_add_fetch(&handshaking, 1, __ATOMIC_RELAXED) > TLS_HANDSHAKES_MAX) {
        __atomic_sub_fetch(&handshaking, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&handshake_failures, 1, __ATOMIC_RELAXED);
        log_ratelimited(&rl_hs, LOG_WARNING, "%d TLS handshakes under way: a new TLS "
                        "connection is closed", TLS_HANDSHAKES_MAX);
        return -EBUSY;
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
        __atomic_sub_fetch(&handshaking, 1, __ATOMIC_RELAXED);
        return -ENOMEM;
    }
    s->counted = true;
    pthread_mutex_lock(&t->lock);
    if (!t->ctx)
        r = -ENOTCONN;
    else
        s->ssl = SSL_new(t->ctx);       /* holds a reference on the context */
    pthread_mutex_unlock(&t->lock);
    if (!s->ssl || SSL_set_fd(s->ssl, fd) != 1) {
        ERR_clear_error();
        tls_sess_free(s);
        return r == -ENOTCONN ? r : -ENOMEM;
    }
    SSL_set_app_data(s->ssl, h2 ? (void *)s : NULL);
    SSL_set_accept_state(s->ssl);
    *ret = s;
    return 0;
}

void tls_sess_free(struct tls_sess *s)
{
    if (!s)
        return;
    sess_uncount(s);
    if (s->ssl && s->ready && !s->failed)
        SSL_shutdown(s->ssl);   /* best effort: the socket is non-blocking */
    ERR_clear_error();
    SSL_free(s->ssl);
    free(s);
}

/* After a call that returned @ret <= 0: -EAGAIN, 0 (the peer's end), or an error. */
static int sess_error(struct tls_sess *s, int ret)
{
    int e = SSL_get_error(s->ssl, ret), saved = errno;

    switch (e) {
    case SSL_ERROR_WANT_READ:
        s->want_write = false;
        return -EAGAIN;
    case SSL_ERROR_WANT_WRITE:
        s->want_write = true;
        return -EAGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        s->failed = true;
        ERR_clear_error();
        return saved ? -saved : 0;
    default:
        s->failed = true;
        return -EPROTO;
    }
}

int tls_handshake(struct tls_sess *s)
{
    char why[256];
    int ret, r;

    if (s->ready)
        return 1;
    ERR_clear_error();
    ret = SSL_do_handshake(s->ssl);
    if (ret == 1) {
        s->ready = true;
        sess_uncount(s);
        return 1;
    }
    r = sess_error(s, ret);
    if (r == -EAGAIN)
        return 0;
    __atomic_add_fetch(&handshake_failures, 1, __ATOMIC_RELAXED);
    if (r == 0 || r == -EPROTO)
        log_ratelimited(&rl_hs, LOG_INFO, "TLS handshake failed: %s",
                        r == 0 ? "the peer closed" : ossl_reason(why, sizeof(why)));
    else
        log_ratelimited(&rl_hs, LOG_INFO, "TLS handshake failed: %s", strerror(-r));
    ERR_clear_error();
    return r < 0 ? r : -ECONNRESET;
}

bool tls_sess_ready(const struct tls_sess *s)
{
    return s->ready;
}

bool tls_sess_wants_write(const struct tls_sess *s)
{
    return s->want_write;
}

bool tls_sess_pending(const struct tls_sess *s)
{
    return SSL_pending(s->ssl) > 0;
}

ssize_t tls_read(struct tls_sess *s, void *buf, size_t len)
{
    int n, r;

    ERR_clear_error();
    n = SSL_read(s->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
    if (n > 0)
        return n;
    r = sess_error(s, n);
    ERR_clear_error();
    return r;
}

ssize_t tls_write(struct tls_sess *s, const void *buf, size_t len)
{
    int n, r;

    ERR_clear_error();
    n = SSL_write(s->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
    if (n > 0)
        return n;
    r = sess_error(s, n);
    ERR_clear_error();
    return r == 0 ? -EPIPE : r;
}

int tls_step(struct tls_sess *s, struct event *rev, struct event *wev)
{
    int r = tls_handshake(s);

    if (r < 0)
        return r;
    if (r == 0 && s->want_write) {
        event_del(rev);
        event_add(wev, NULL);
    } else {
        event_del(wev);
        event_add(rev, NULL);
    }
    return r;
}

ssize_t tls_recv(struct tls_sess *s, void *buf, size_t len, struct event *wev,
                 bool *ret_wants_write)
{
    ssize_t n = tls_read(s, buf, len);

    *ret_wants_write = n == -EAGAIN && s->want_write;
    if (*ret_wants_write)
        event_add(wev, NULL);
    return n;
}

uint64_t tls_handshake_failures(void)
{
    return __atomic_load_n(&handshake_failures, __ATOMIC_RELAXED);
}
