/* SPDX-License-Identifier: MIT */
/*
 * rls: the Envoy RLS v3 listener's connections (see rls.h, rls_int.h).
 * nghttp2 does HTTP/2 (framing, HPACK, flow control, the connection
 * preface, flood limits); this file reads into it, writes what it queues,
 * keeps what each connection holds within bounds, and closes connections
 * whose timeout expired.  rls_stream.c turns streams into calls.
 *
 * Memory (docs/rls.md "Limits", docs/daemon.md "Admission"): everything a
 * connection holds beyond a fresh one (rls_held()) is its charge in the
 * shared budget.  It may hold at most RLS_CONN_MEM_MAX, and once the budget
 * is spent no more than its share of it (admit_allowance()): past that a new
 * stream is refused and a body stops growing (rls_stream.c), and the
 * connection is not read until it is back under.  nghttp2 allocates through
 * the connection's own allocator, so what the library keeps for a peer
 * (HPACK state, header fields being decoded, streams, queued frames) counts
 * too; one read may make nghttp2 allocate at most RLS_READ_SLACK beyond the
 * connection's allowance, else the allocation fails and the connection is
 * closed (closed_input_limit): a peer cannot make a connection hold more
 * whatever it sends.  An idle connection holds no output buffer: answers
 * are gathered in a per-thread batch, and only what the socket did not take
 * is kept.
 *
 * TLS ("rls:tls:", tls.h): the handshake comes first (ALPN "h2"), bounded
 * by the request timeout from accept; nghttp2 sees the same bytes either
 * way, and nothing is written before the handshake is done.
 */
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "admit.h"
#include "clock.h"
#include "conn.h"
#include "listener.h"
#include "log.h"
#include "rls.h"
#include "rls_int.h"
#include "srv_int.h"
#include "tls.h"
#include "worker_int.h"

#define RLS_READ_CHUNK  16384
#define RLS_WRITE_BATCH 16384           /* frames gathered for one send() */
#define RLS_READ_SLACK  (16 * 1024)     /* nghttp2's allocations one read may add (above) */
#define RLS_ACKS_MAX    128             /* queued SETTINGS/PING acks and resets */

static struct log_ratelimit rl_rls;

/* ---- memory ---------------------------------------------------------------------------- */

size_t rls_held(const struct rls_conn *rc)
{
    size_t ng = rc->ng_bytes > rc->ng_base ? rc->ng_bytes - rc->ng_base : 0;

    return ng + rc->body_bytes + rc->stream_bytes + rc->out_len;
}

/* The most @rc may hold now. */
static size_t rls_allowance(struct rls_conn *rc)
{
    return admit_allowance(rc->w->s->admit, &rc->slot, RLS_CONN_MEM_MAX);
}

bool rls_input_ok(struct rls_conn *rc, size_t more)
{
    return rls_held(rc) + more <= rls_allowance(rc);
}

void rls_charge(struct rls_conn *rc)
{
    admit_charge(rc->w->s->admit, &rc->slot, rls_held(rc));
}

/* nghttp2's allocator for @rc (nghttp2_mem).  While a read is processed,
 * what nghttp2 allocates for the peer's input is held to rc->recv_limit;
 * our own answers (rc->submitting) and everything outside a read are
 * bounded elsewhere (streams, and nothing read while output is pending). */
static bool mem_room(struct rls_conn *rc, size_t more)
{
    if (!rc->receiving || rc->submitting || rls_held(rc) + more <= rc->recv_limit)
        return true;
    rc->over = true;
    return false;
}

static void *mem_malloc(size_t size, void *user)
{
    struct rls_conn *rc = user;
    void *p = mem_room(rc, size) ? malloc(size) : NULL;

    if (p)
        rc->ng_bytes += malloc_usable_size(p);
    return p;
}

static void mem_free(void *p, void *user)
{
    struct rls_conn *rc = user;

    if (p)
        rc->ng_bytes -= malloc_usable_size(p);
    free(p);
}

static void *mem_calloc(size_t n, size_t size, void *user)
{
    struct rls_conn *rc = user;
    void *p = size && n > SIZE_MAX / size ? NULL
              : mem_room(rc, n * size) ? calloc(n, size) : NULL;

    if (p)
        rc->ng_bytes += malloc_usable_size(p);
    return p;
}

static void *mem_realloc(void *p, size_t size, void *user)
{
    struct rls_conn *rc = user;
    size_t old = p ? malloc_usable_size(p) : 0;
    void *grown;

    if (size > old && !mem_room(rc, size - old))
        return NULL;
    grown = realloc(p, size);
    if (grown || size == 0)
        rc->ng_bytes = rc->ng_bytes - old + (grown ? malloc_usable_size(grown) : 0);
    return grown;
}

/* ---- the connection ---------------------------------------------------------------- */

void rls_wake(struct rls_conn *rc)
{
    event_active(rc->flush_ev, 0, 0);
}

static void rls_conn_free(struct rls_conn *rc)
{
    struct worker *w = rc->w;

    while (rc->head)
        rls_stream_orphan(rc->head);
    if (rc->prev)
        rc->prev->next = rc->next;
    else
        w->rls = rc->next;
    if (rc->next)
        rc->next->prev = rc->prev;
    nghttp2_session_del(rc->ses);
    if (rc->rev)
        event_free(rc->rev);
    if (rc->wev)
        event_free(rc->wev);
    if (rc->flush_ev)
        event_free(rc->flush_ev);
    tls_sess_free(rc->tls);
    if (rc->fd >= 0)
        close(rc->fd);
    free(rc->out);
    admit_leave(w->s->admit, &rc->slot);
    free(rc);
    if (w->stopping && !w->conns && !w->rls)
        event_base_loopbreak(w->base);
}

/* One write of @mh's buffers to @rc's peer, plain (one sendmsg()) or
 * through its TLS session (its first non-empty buffer): bytes taken, or -errno. */
static ssize_t rls_sendv(struct rls_conn *rc, const struct msghdr *mh)
{
    ssize_t n;

    if (rc->tls) {
        for (size_t i = 0; i < mh->msg_iovlen; i++)
            if (mh->msg_iov[i].iov_len > 0)
                return tls_write(rc->tls, mh->msg_iov[i].iov_base, mh->msg_iov[i].iov_len);
        return 0;
    }
    n = sendmsg(rc->fd, mh, MSG_NOSIGNAL);
    return n < 0 ? -errno : n;
}

/* Sends @a then @b (either may be empty) in one sendmsg(), keeping what
 * the socket does not take in rc->out (empty before).  1: all sent; 0: some
 * kept; -errno. */
static int rls_send(struct rls_conn *rc, const uint8_t *a, size_t alen, const uint8_t *b,
                    size_t blen, bool *progress)
{
    struct iovec iov[2] = { { (void *)a, alen }, { (void *)b, blen } };
    struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
    size_t left = alen + blen;
    ssize_t n;

    while (left > 0) {
        n = rls_sendv(rc, &mh);
        if (n < 0) {
            if (n == -EINTR)
                continue;
            if (n == -EAGAIN || n == -EWOULDBLOCK)
                break;
            return (int)n;
        }
        *progress = true;
        left -= (size_t)n;
        while (mh.msg_iovlen > 0 && (size_t)n >= mh.msg_iov[0].iov_len) {
            n -= (ssize_t)mh.msg_iov[0].iov_len;
            mh.msg_iov++;
            mh.msg_iovlen--;
        }
        if (mh.msg_iovlen > 0) {
            mh.msg_iov[0].iov_base = (uint8_t *)mh.msg_iov[0].iov_base + n;
            mh.msg_iov[0].iov_len -= (size_t)n;
        }
    }
    if (left == 0)
        return 1;
    rc->out = malloc(left);
    if (!rc->out)
        return -ENOMEM;
    rc->out_len = 0;
    rc->out_off = 0;
    for (size_t i = 0; i < mh.msg_iovlen; i++) {
        if (mh.msg_iov[i].iov_len == 0)
            continue;           /* an empty @b is NULL */
        memcpy(rc->out + rc->out_len, mh.msg_iov[i].iov_base, mh.msg_iov[i].iov_len);
        rc->out_len += mh.msg_iov[i].iov_len;
    }
    return 0;
}

/* Writes what nghttp2 has queued; 1 when all is out, 0 when the socket is full, -errno. */
static int rls_write(struct rls_conn *rc)
{
    static _Thread_local uint8_t batch[RLS_WRITE_BATCH];
    bool progress = false;
    int r = 1;

    /* Nothing is written before the TLS handshake is done. */
    if (rc->tls && !tls_sess_ready(rc->tls))
        return 1;
    /* What the socket did not take last time goes first. */
    while (rc->out && rc->out_off < rc->out_len) {
        struct iovec iov = { rc->out + rc->out_off, rc->out_len - rc->out_off };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n = rls_sendv(rc, &mh);

        if (n < 0) {
            if (n == -EINTR)
                continue;
            if (n != -EAGAIN && n != -EWOULDBLOCK)
                return (int)n;
            r = 0;
            break;
        }
        rc->out_off += (size_t)n;
        progress = true;
    }
    if (r > 0 && rc->out) {
        free(rc->out);
        rc->out = NULL;
        rc->out_len = rc->out_off = 0;
    }
    /* nghttp2 hands out one frame at a time: gather up to RLS_WRITE_BATCH
     * bytes of them, so a batch of answers leaves in one send(). */
    while (r > 0) {
        const uint8_t *data, *big = NULL;
        size_t len = 0, big_len = 0;
        ssize_t n;

        while (len < sizeof(batch)) {
            n = nghttp2_session_mem_send(rc->ses, &data);
            if (n < 0)
                return -EPROTO;
            if (n == 0)
                break;
            if ((size_t)n > sizeof(batch) - len) {
                big = data;     /* valid until the next mem_send(): sent now */
                big_len = (size_t)n;
                break;
            }
            memcpy(batch + len, data, (size_t)n);
            len += (size_t)n;
        }
        if (len == 0 && big_len == 0)
            break;
        r = rls_send(rc, batch, len, big, big_len, &progress);
    }
    if (r < 0)
        return r;
    if (r == 0) {
        /* The slow-output timeout counts from the last progress. */
        if (progress || !rc->stall_ms)
            rc->stall_ms = clock_coarse_ms();
        event_add(rc->wev, NULL);
        return 0;
    }
    rc->stall_ms = 0;
    if (!rc->read_wants_write)
        event_del(rc->wev);
    return 1;
}

/* One step of @rc's TLS handshake, waiting for the event it needs. */
static void rls_handshake(struct rls_conn *rc)
{
    int r = tls_step(rc->tls, rc->rev, rc->wev);

    if (r < 0) {
        rc->dead = true;
        return;
    }
    rc->reading = r > 0 || !tls_sess_wants_write(rc->tls);
    if (r > 0)
        rc->last_ms = clock_coarse_ms();
}

void rls_settle(struct rls_conn *rc)
{
    bool over;
    int r = 0;

    /* The handshake's events are its own (rls_handshake()). */
    if (rc->tls && !tls_sess_ready(rc->tls) && !rc->dead)
        return;
    if (!rc->dead) {
        r = rls_write(rc);
        if (r < 0)
            rc->dead = true;
    }
    if (!rc->dead && r > 0 && !nghttp2_session_want_read(rc->ses) &&
        !nghttp2_session_want_write(rc->ses))
        rc->dead = true;
    if (rc->dead) {
        rls_conn_free(rc);
        return;
    }
    rls_charge(rc);
    /* Over what it may hold: read nothing more until its calls are answered
     * (or the budget has room again: rls_sweep() looks). */
    over = !rls_input_ok(rc, 0);
    if (over && !rc->paused)
        admit_paused(rc->w->s->admit);
    rc->paused = over;
    /* Output pending, or over its bound: read nothing more until it is out. */
    if ((r == 0 || over) && rc->reading) {
        event_del(rc->rev);
        rc->reading = false;
    } else if (r > 0 && !over && !rc->reading) {
        event_add(rc->rev, NULL);
        rc->reading = true;
        /* Bytes the session already decrypted: the socket will not say so. */
        if (rc->tls && tls_sess_pending(rc->tls))
            event_active(rc->rev, EV_READ, 0);
    }
}

/* One read from @rc's peer into @buf: bytes read, 0 at its end, or -errno. */
static ssize_t rls_recv(struct rls_conn *rc, uint8_t *buf, size_t len)
{
    ssize_t n;

    if (rc->tls)
        return tls_recv(rc->tls, buf, len, rc->wev, &rc->read_wants_write);
    n = read(rc->fd, buf, len);
    return n < 0 ? -errno : n;
}

/* What one read brought (@n bytes of @buf, rls_recv()'s): to nghttp2, or the end. */
static void rls_input(struct rls_conn *rc, const uint8_t *buf, ssize_t n)
{
    size_t allow, held;

    if (n > 0) {
        rc->last_ms = clock_coarse_ms();
        allow = rls_allowance(rc);
        held = rls_held(rc);
        rc->recv_limit = (held > allow ? held : allow) + RLS_READ_SLACK;
        rc->receiving = true;
        if (nghttp2_session_mem_recv(rc->ses, buf, (size_t)n) < 0)
            rc->dead = true;
        rc->receiving = false;
        if (rc->over) {
            admit_closed(rc->w->s->admit, ADMIT_C_INPUT_LIMIT);
            log_ratelimited(&rl_rls, LOG_INFO, "closing an RLS %s connection (uid %d): over "
                            "its memory bound (%zu bytes held)", rc->is_unix ? "Unix" : "TCP",
                            rc->is_unix ? (int)rc->uid : -1, rls_held(rc));
            rc->dead = true;
        }
    } else if (n == 0 || (n != -EAGAIN && n != -EWOULDBLOCK && n != -EINTR)) {
        rc->dead = true;
    }
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct rls_conn *rc = arg;
    uint8_t buf[RLS_READ_CHUNK];
    ssize_t n;

    (void)fd;
    (void)what;
    if (rc->tls && !tls_sess_ready(rc->tls)) {
        rls_handshake(rc);
        if (rc->dead || !tls_sess_ready(rc->tls)) {
            if (rc->dead)
                rls_settle(rc);
            return;
        }
    }
    /* A TLS session may hold more than one read takes: read on while its
     * connection reads (rls_settle() decides). */
    do {
        n = rls_recv(rc, buf, sizeof(buf));
        rls_input(rc, buf, n);
    } while (n > 0 && rc->tls && !rc->dead && rc->reading && tls_sess_pending(rc->tls) &&
             rls_input_ok(rc, 0));
    rls_settle(rc);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    struct rls_conn *rc = arg;

    /* A handshake, or a TLS read, waited for room to write. */
    if (rc->tls && (!tls_sess_ready(rc->tls) || rc->read_wants_write)) {
        rc->read_wants_write = false;
        on_read(fd, what, rc);
        return;
    }
    rls_settle(rc);
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rls_settle(arg);
}

static int rls_session(struct rls_conn *rc)
{
    nghttp2_session_callbacks *cbs = NULL;
    nghttp2_option *opt = NULL;
    nghttp2_settings_entry iv[] = {
        { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, RLS_STREAMS_MAX },
        { NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, RLS_HEADERS_MAX },
        { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, RLS_GRPC_PREFIX + RLS_MSG_MAX },
        { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
    };
    int r = -ENOMEM;

    rc->mem = (nghttp2_mem){ .mem_user_data = rc, .malloc = mem_malloc, .free = mem_free,
                             .calloc = mem_calloc, .realloc = mem_realloc };
    if (nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0)
        goto out;
    rls_stream_callbacks(cbs);
    /* Streams beyond SETTINGS are refused at once (before the peer saw it too). */
    nghttp2_option_set_max_reserved_remote_streams(opt, 0);
    /* Control frames nghttp2 answers are queued at most this deep (a flood
     * of PINGs or SETTINGS ends the connection), and so are resets. */
    nghttp2_option_set_max_outbound_ack(opt, RLS_ACKS_MAX);
    nghttp2_option_set_max_settings(opt, 32);
    /* Streams the peer resets: nghttp2's rapid-reset bound, explicitly. */
    nghttp2_option_set_stream_reset_rate_limit(opt, 1000, 33);
    nghttp2_option_set_no_closed_streams(opt, 1);
    /* Our answers' header table; what the peer's table may cost us is our
     * SETTINGS_HEADER_TABLE_SIZE (the default 4096). */
    nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
    if (nghttp2_session_server_new3(&rc->ses, cbs, rc, opt, &rc->mem) != 0)
        goto out;
    if (nghttp2_submit_settings(rc->ses, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) != 0)
        goto out;
    /* A fresh session's own footprint is not the peer's doing. */
    rc->ng_base = rc->ng_bytes;
    r = 0;
out:
    nghttp2_session_callbacks_del(cbs);
    nghttp2_option_del(opt);
    return r;
}

void rls_conn_new(struct worker *w, int fd, const struct listener *l, const struct admit_peer *p,
                  struct admit_slot *slot)
{
    struct rls_conn *rc;
    int one = 1, sockbuf = (int)w->s->o.admit.sockbuf, r = -ENOMEM;

    rc = calloc(1, sizeof(*rc));
    if (!rc)
        goto fail;
    rc->w = w;
    rc->fd = fd;
    rc->is_unix = l->is_unix;
    rc->uid = l->is_unix ? p->uid : (uid_t)-1;
    rc->pid = l->is_unix && p->pid > 0 ? (uint32_t)p->pid : 0;
    rc->privileged = l->is_unix && p->privileged;
    rc->slot = *slot;
    memset(slot, 0, sizeof(*slot));
    rc->last_ms = clock_coarse_ms();
    rc->accept_ms = rc->last_ms;
    if (!l->is_unix)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (sockbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof(sockbuf));
    if (l->tls) {
        r = tls_sess_new(w->s->o.tls, fd, true, &rc->tls);
        if (r < 0)
            goto fail;
    }
    r = -ENOMEM;
    rc->rev = event_new(w->base, fd, EV_READ | EV_PERSIST, on_read, rc);
    rc->wev = event_new(w->base, fd, EV_WRITE | EV_PERSIST, on_write, rc);
    rc->flush_ev = event_new(w->base, -1, 0, on_flush, rc);
    if (!rc->rev || !rc->wev || !rc->flush_ev || rls_session(rc) < 0 ||
        event_add(rc->rev, NULL) < 0)
        goto fail;
    rc->reading = true;
    rc->next = w->rls;
    if (w->rls)
        w->rls->prev = rc;
    w->rls = rc;
    /* Our SETTINGS go first. */
    rls_settle(rc);
    return;
fail:
    if (r != -EBUSY)            /* tls.c said so */
        log_ratelimited(&rl_rls, LOG_ERR, "out of memory for a new RLS connection");
    if (rc) {
        if (rc->ses)
            nghttp2_session_del(rc->ses);
        if (rc->rev)
            event_free(rc->rev);
        if (rc->wev)
            event_free(rc->wev);
        if (rc->flush_ev)
            event_free(rc->flush_ev);
        tls_sess_free(rc->tls);
        admit_leave(w->s->admit, &rc->slot);
        free(rc);
    }
    admit_leave(w->s->admit, slot);
    close(fd);
}

void rls_sweep(struct worker *w, uint64_t now_ms)
{
    struct admit *a = w->s->admit;
    struct rls_conn *rc, *next;

    for (rc = w->rls; rc; rc = next) {
        uint64_t partial = 0, stall;
        bool waiting = false, pending = rc->out != NULL;
        int why;

        next = rc->next;
        stall = pending ? rc->stall_ms : 0;
        /* A TLS handshake is a request that has not arrived yet. */
        if (rc->tls && !tls_sess_ready(rc->tls))
            partial = rc->accept_ms;
        /* A request still arriving counts from its start; one waiting for
         * Redis is left to redis.timeout_ms (as conn.c does); an answer
         * that is submitted but not taken (the peer's flow-control window
         * stays shut) is output that does not move. */
        for (struct rls_stream *s = rc->head; s; s = s->next) {
            if (s->receiving && !s->answered && !partial)
                partial = s->start_ms;
            if (!s->receiving && !s->answered)
                waiting = true;
            if (s->answered && (!stall || s->out_ms < stall))
                stall = s->out_ms;
        }
        if (waiting)
            continue;
        why = admit_expired(a, now_ms, !stall && !rc->head, rc->last_ms, partial, stall);
        if (why < 0) {
            /* The budget may have room again for a connection that waits for it. */
            if (rc->paused)
                rls_settle(rc);
            continue;
        }
        admit_closed(a, (enum admit_close)why);
        log_ratelimited(&rl_rls, LOG_INFO, "closing an RLS %s connection (uid %d): %s timeout",
                        rc->is_unix ? "Unix" : "TCP", rc->is_unix ? (int)rc->uid : -1,
                        admit_close_name((enum admit_close)why));
        rc->dead = true;
        rls_settle(rc);
    }
}

void rls_stop(struct worker *w)
{
    struct rls_conn *rc, *next;

    /* A graceful GOAWAY: it names the last stream divvyd took, so the peer
     * starts no more on this connection, and the calls already begun are
     * still read and answered (a health check NOT_SERVING) until they are
     * done (nghttp2 then wants neither to read nor to write: rls_settle()
     * closes) or the worker's grace ends. */
    for (rc = w->rls; rc; rc = next) {
        next = rc->next;
        if (nghttp2_submit_goaway(rc->ses, NGHTTP2_FLAG_NONE,
                                  nghttp2_session_get_last_proc_stream_id(rc->ses),
                                  NGHTTP2_NO_ERROR, NULL, 0) != 0 ||
            (rc->tls && !tls_sess_ready(rc->tls)))
            rc->dead = true;
        rls_settle(rc);
    }
}

void rls_free_all(struct worker *w)
{
    while (w->rls) {
        if (!w->rls->dead && w->rls->fd >= 0)
            rls_write(w->rls);
        rls_conn_free(w->rls);
    }
}

const struct conn_proto rls_proto = {
    .name = "rls",
    .adopt = rls_conn_new,
};
