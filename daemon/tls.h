/* SPDX-License-Identifier: MIT */
/*
 * tls: TLS for the "tls:" listeners (docs/security.md), with OpenSSL.  Two
 * objects:
 *
 *   struct tls       the server's: the context new connections get (its
 *                    certificate, key, client CA, minimum version, ALPN),
 *                    replaced as a whole by a reload (tls_prepare() builds
 *                    one from a config, tls_install() swaps it in; the
 *                    connections already open keep theirs, as OpenSSL
 *                    counts references on a context).
 *   struct tls_sess  one connection's: the handshake, then reads and
 *                    writes over its non-blocking socket.  Its transport
 *                    (conn.c, rls.c) owns it and drives it from libevent.
 *
 * A session's calls never block: -EAGAIN means "call again when the socket
 * is ready", for reading unless tls_sess_wants_write() says writing.
 * Renegotiation is off, so once the handshake is done a read may only need
 * to write (a TLS 1.3 key update answered) and a write never needs to read.
 *
 * Thread-safety: tls_install() may run in any thread while workers call
 * tls_sess_new(); a session belongs to its connection's thread.
 */
#ifndef DIVVY_TLS_H
#define DIVVY_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"

#define TLS_ERR_MAX 512
/* Handshakes under way at once, every listener and worker together: one more
 * TLS connection is closed at accept (docs/security.md "What TLS costs"). */
#define TLS_HANDSHAKES_MAX 256

struct tls;
struct tls_ctx;
struct tls_sess;

/*
 * Builds a context from @c (server.tls): reads the certificate chain, the
 * key (refused when group or others may read it, server/secret.h; both may
 * be systemd credential names) and the client CA, and checks that the key
 * matches the certificate.  On success *ret is the caller's (tls_install()
 * or tls_ctx_free()); on failure @err says why in one line (file names,
 * OpenSSL's reason; never key material): -ENOENT, -EPERM, -EINVAL, -ENOMEM.
 */
int tls_prepare(const struct config_tls *c, struct tls_ctx **ret, char *err, size_t err_size);

/* Frees a context tls_install() did not take.  NULL-safe. */
void tls_ctx_free(struct tls_ctx *x);

/* A holder for the context in force; empty until tls_install().  NULL: -ENOMEM. */
struct tls *tls_new(void);

/* Makes @x (taken over) the context of new sessions; the previous one lives
 * on in the sessions that use it.  Logs what it serves now. */
void tls_install(struct tls *t, struct tls_ctx *x);

/* Whether a context is installed. */
bool tls_ready(struct tls *t);

/* Frees the holder (sessions keep their context).  NULL-safe. */
void tls_free(struct tls *t);

/*
 * A server session on the accepted, non-blocking socket @fd (borrowed: the
 * transport closes it after tls_sess_free()), with the context in force.
 * @h2: offer "h2" by ALPN (RLS: gRPC clients require it).  -ENOMEM,
 * -ENOTCONN when no context is installed, or -EBUSY when TLS_HANDSHAKES_MAX
 * handshakes are under way (counted as a failed handshake, and logged).
 */
int tls_sess_new(struct tls *t, int fd, bool h2, struct tls_sess **ret);

/* Sends close_notify if it can without blocking, and frees.  NULL-safe. */
void tls_sess_free(struct tls_sess *s);

/* One step of the handshake: 1 done, 0 not yet (wait for the socket as
 * tls_sess_wants_write() says), < 0 failed (counted, logged rate-limited). */
int tls_handshake(struct tls_sess *s);

/* Whether the handshake is done. */
bool tls_sess_ready(const struct tls_sess *s);

/* Whether the call that returned -EAGAIN (or 0 from tls_handshake()) waits
 * for the socket to be writable rather than readable. */
bool tls_sess_wants_write(const struct tls_sess *s);

/* Decrypted bytes that wait inside the session: the socket will not say so,
 * read again before waiting for it. */
bool tls_sess_pending(const struct tls_sess *s);

/* Reads up to @len bytes: > 0, 0 at the peer's end (close_notify or EOF),
 * -EAGAIN, -EPROTO (a TLS error), -errno. */
ssize_t tls_read(struct tls_sess *s, void *buf, size_t len);

/* Writes up to @len (> 0) bytes: how many were taken (> 0), -EAGAIN,
 * -EPROTO, -errno.  After -EAGAIN the same bytes are offered again (they
 * may have moved in memory). */
ssize_t tls_write(struct tls_sess *s, const void *buf, size_t len);

/* ---- for a transport on libevent (conn.c, rls.c) ---------------------------------------- */

struct event;

/* tls_handshake(), then waits on @rev (reading) or @wev (writing) as the
 * next step needs, or, once done, on @rev: 1 done, 0 not yet, < 0 failed. */
int tls_step(struct tls_sess *s, struct event *rev, struct event *wev);

/* tls_read(); when it waits to write (a TLS 1.3 key update answered),
 * arms @wev and sets *ret_wants_write: its handler must read again. */
ssize_t tls_recv(struct tls_sess *s, void *buf, size_t len, struct event *wev,
                 bool *ret_wants_write);

/* Handshakes that failed since start (bad or plain-text clients, timeouts
 * are not among them): for STATS and metrics. */
uint64_t tls_handshake_failures(void);

#endif
