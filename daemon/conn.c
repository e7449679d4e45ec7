/* SPDX-License-Identifier: MIT */
/*
 * conn: the transport of a worker's client connections (see conn.h): accept
 * and admission, reading, the output buffer and its budget, reply order
 * behind waiting answers, timeouts, fairness, and the one place a
 * connection is freed.  What a read brought goes to the connection's
 * protocol (c->proto->on_input()), one request at a time.
 *
 * A connection is freed at the end of the callback that decided to close it,
 * after its last use (conn_settle()); one whose hits still wait for Redis is
 * closed but kept until their callbacks have run (freed by the worker's
 * flush event, never inside a store callback).
 */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "admit.h"
#include "clock.h"
#include "conn.h"
#include "handoff.h"
#include "listener.h"
#include "log.h"
#include "metrics.h"
#include "peer.h"
#include "srv_int.h"
#include "tls.h"
#include "worker_int.h"

#define ACCEPT_BATCH      32
#define ACCEPT_PAUSE_MS   100

static struct log_ratelimit rl_accept, rl_admit;

static void conn_undirty(struct conn *c)
{
    struct conn **pp;

    if (!c->dirty)
        return;
    for (pp = &c->w->dirty; *pp; pp = &(*pp)->dirty_next) {
        if (*pp == c) {
            *pp = c->dirty_next;
            break;
        }
    }
    c->dirty = false;
}

/* Puts @c at the end of its worker's backlog and stops reading it: it has
 * requests left after its turn (conn.h "Fairness"). */
static void conn_backlog(struct conn *c)
{
    struct worker *w = c->w;
    static const struct timeval now = { 0, 0 };

    if (c->backlogged)
        return;
    c->backlogged = true;
    if (c->rev)
        event_del(c->rev);
    c->bl_next = NULL;
    c->bl_prev = w->backlog_tail;
    if (w->backlog_tail)
        w->backlog_tail->bl_next = c;
    else
        w->backlog_head = c;
    w->backlog_tail = c;
    if (!evtimer_pending(w->backlog_ev, NULL))
        evtimer_add(w->backlog_ev, &now);
}

static void conn_unbacklog(struct conn *c)
{
    struct worker *w = c->w;

    if (!c->backlogged)
        return;
    if (c->bl_prev)
        c->bl_prev->bl_next = c->bl_next;
    else
        w->backlog_head = c->bl_next;
    if (c->bl_next)
        c->bl_next->bl_prev = c->bl_prev;
    else
        w->backlog_tail = c->bl_prev;
    c->bl_prev = c->bl_next = NULL;
    c->backlogged = false;
}

void conn_free(struct conn *c)
{
    struct worker *w;

    if (!c)
        return;
    w = c->w;
    if (c->proto && c->proto->on_free)
        c->proto->on_free(c);
    conn_undirty(c);
    conn_unbacklog(c);
    replyq_clear(&c->replies, &w->replies);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->rev)
        event_free(c->rev);
    if (c->wev)
        event_free(c->wev);
    tls_sess_free(c->tls);
    if (c->fd >= 0)
        close(c->fd);
    free(c->out);
    admit_leave(w->s->admit, &c->slot);
    free(c);
    if (w->stopping && !w->conns && !w->rls)
        event_base_loopbreak(w->base);
}

/* What @c's client has not read yet: replies and the answers still waiting. */
static size_t conn_unread(const struct conn *c)
{
    return c->out_len - c->out_off + c->replies.bytes + c->replies.held;
}

/* Counts @c's buffers in the shared output budget: the output buffer beyond
 * its first OUT_INITIAL bytes, trailers and waiting answers.  Called when they
 * change size (a realloc, the end of a callback), not per reply. */
static void conn_charge(struct conn *c)
{
    size_t extra = c->out_cap > OUT_INITIAL ? c->out_cap - OUT_INITIAL : 0;

    admit_charge(c->w->s->admit, &c->slot,
                 extra + c->replies.bytes + c->replies.held + c->proto_bytes);
}

void conn_charge_proto(struct conn *c, size_t bytes)
{
    c->proto_bytes = bytes;
    conn_charge(c);
}

static int out_reserve(struct conn *c, size_t more)
{
    size_t need, cap;
    char *grown;

    if (c->out_off > 0 && c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    need = c->out_len + more;
    if (need <= c->out_cap)
        return 0;
    cap = c->out_cap ? c->out_cap : OUT_INITIAL;
    while (cap < need)
        cap *= 2;
    grown = realloc(c->out, cap);
    if (!grown)
        return -ENOMEM;
    c->out = grown;
    c->out_cap = cap;
    conn_charge(c);
    return 0;
}

static void out_append_direct(struct conn *c, const char *s, size_t len)
{
    if (out_reserve(c, len) < 0) {
        c->dead = true;
        return;
    }
    memcpy(c->out + c->out_len, s, len);
    c->out_len += len;
}

/* Every reply goes through here: behind a waiting answer it queues in order. */
void out_append(struct conn *c, const char *s, size_t len)
{
    if (c->replies.tail) {
        if (replyq_trail(&c->replies, s, len) < 0)
            c->dead = true;
        return;
    }
    out_append_direct(c, s, len);
}

struct replyq_slot *conn_reply_wait(struct conn *c, size_t held)
{
    return replyq_push(&c->replies, &c->w->replies, c, sizeof(struct replyq_slot) + held);
}

static void conn_mark_dirty(struct conn *c)
{
    struct worker *w = c->w;

    if (!c->dirty) {
        c->dirty = true;
        c->dirty_next = w->dirty;
        w->dirty = c;
    }
    if (!w->flush_active) {
        w->flush_active = true;
        event_active(w->flush_ev, 0, 0);
    }
}

void conn_reply_answer(struct replyq_slot *s, char *text, size_t len)
{
    struct conn *c = s->owner;

    replyq_done(&c->replies, s, text, len);
    /* The answered prefix leaves in order. */
    while ((s = replyq_pop(&c->replies)) != NULL) {
        if (!c->dead) {
            out_append_direct(c, s->reply, s->reply_len);
            if (s->text_len)
                out_append_direct(c, s->text, s->text_len);
            if (s->trailer_len)
                out_append_direct(c, s->trailer, s->trailer_len);
        }
        replyq_put(&c->w->replies, s);
    }
    /* Written (and a dead connection freed) by the flush event, not here. */
    conn_mark_dirty(c);
}

/* Answers the complete requests in the input buffer: at most @turn of them
 * (CONN_TURN_MAX for a turn; the rest waits on the backlog). */
static void process_input_n(struct conn *c, bool eof, unsigned turn)
{
    struct worker *w = c->w;
    unsigned answered = 0;
    size_t off = 0;
    ssize_t r;

    while (off < c->in_len && !c->closing && !c->dead && !c->out_paused) {
        /* Its turn is over: the others' come first (conn.h "Fairness"). */
        if (answered == turn) {
            conn_backlog(c);
            break;
        }
        /* Enough hits wait for Redis: leave the rest until they are answered. */
        if (c->replies.n >= CONN_PEND_MAX) {
            if (!c->paused) {
                c->paused = true;
                event_del(c->rev);
            }
            break;
        }
        /* A client that does not read its replies is dropped, not buffered forever. */
        if (c->out_len - c->out_off + c->replies.bytes > w->s->o.max_output_bytes) {
            log_ratelimited(&rl_accept, LOG_WARNING,
                            "dropping a client with %zu unread reply bytes (limit %zu)",
                            c->out_len - c->out_off + c->replies.bytes, w->s->o.max_output_bytes);
            admit_closed(w->s->admit, ADMIT_C_OUTPUT_LIMIT);
            c->dead = true;
            return;
        }
        /* The shared output budget is spent: a client over its share waits
         * until it has read its replies (conn_settle() resumes it). */
        if (admit_out_pause(w->s->admit, &c->slot, conn_unread(c))) {
            c->out_paused = true;
            event_del(c->rev);
            break;
        }
        /* One request answered (or skipped), or nothing yet, or no more. */
        r = c->proto->on_input(c, c->in + off, c->in_len - off, eof);
        if (r <= 0)
            break;
        off += (size_t)r;
        answered++;
    }
    if (off > 0) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
}

static void process_input(struct conn *c, bool eof)
{
    process_input_n(c, eof, CONN_TURN_MAX);
}

void conn_finish_input(struct conn *c)
{
    conn_unbacklog(c);
    process_input_n(c, c->eof, UINT_MAX);
    conn_unbacklog(c);
}

/* Reads again, unless something still holds @c's input back; after the
 * peer's EOF there is nothing to read: @c closes once answered. */
static void conn_rearm(struct conn *c)
{
    if (c->out_paused || c->paused || c->backlogged || c->dead)
        return;
    if (c->eof) {
        c->closing = true;
    } else if (!c->closing && c->rev) {
        event_add(c->rev, NULL);
        /* Bytes the session already decrypted: the socket will not say so. */
        if (c->tls && tls_sess_pending(c->tls))
            event_active(c->rev, EV_READ, 0);
    }
}

/* One write to @c's peer, plain or through its TLS session: bytes taken, or -errno. */
static ssize_t conn_send(struct conn *c, const char *data, size_t len)
{
    ssize_t n;

    if (c->tls)
        return tls_write(c->tls, data, len);
    n = send(c->fd, data, len, MSG_NOSIGNAL);
    return n < 0 ? -errno : n;
}

/* One read from @c's peer into its input: bytes read, 0 at its end, or -errno. */
static ssize_t conn_recv(struct conn *c)
{
    ssize_t n;

    if (c->tls)
        return tls_recv(c->tls, c->in + c->in_len, IN_CAP - c->in_len, c->wev,
                        &c->read_wants_write);
    n = read(c->fd, c->in + c->in_len, IN_CAP - c->in_len);
    return n < 0 ? -errno : n;
}

/* One step of @c's TLS handshake, waiting for the event it needs; true
 * once done (then the connection reads as any other). */
static bool conn_handshake(struct conn *c)
{
    int r = tls_step(c->tls, c->rev, c->wev);

    if (r < 0)
        c->dead = true;
    else if (r > 0)
        c->partial_ms = 0;
    return r > 0;
}

/* Writes what is pending; arms the write event if the socket is full.
 * Returns 1 when everything is written, 0 when some is pending, -errno. */
int conn_flush(struct conn *c)
{
    bool progress = false;
    ssize_t n;

    /* Nothing is written before the handshake is done (nothing was read). */
    if (c->tls && !tls_sess_ready(c->tls))
        return 1;
    while (c->out_off < c->out_len) {
        n = conn_send(c, c->out + c->out_off, c->out_len - c->out_off);
        if (n < 0) {
            if (n == -EINTR)
                continue;
            if (n == -EAGAIN || n == -EWOULDBLOCK) {
                /* The slow-output timeout counts from the last progress. */
                if (progress || !c->stall_ms)
                    c->stall_ms = clock_coarse_ms();
                event_add(c->wev, NULL);
                return 0;
            }
            return (int)n;
        }
        c->out_off += (size_t)n;
        progress = true;
    }
    c->out_off = c->out_len = 0;
    c->stall_ms = 0;
    /* Drained: a burst's buffer goes back, and out of the output budget, so
     * idle connections can hold no part of it (a few reallocs a batch). */
    if (c->out_cap > OUT_INITIAL) {
        char *small = realloc(c->out, OUT_INITIAL);

        if (small) {
            c->out = small;
            c->out_cap = OUT_INITIAL;
            conn_charge(c);
        }
    }
    if (!c->read_wants_write)
        event_del(c->wev);
    return 1;
}

/* A connection paused for the output budget has read all its replies:
 * answer what waits in its input, and read again. */
static void conn_resume(struct conn *c)
{
    c->out_paused = false;
    process_input(c, c->eof);
    /* What is left arrived while we were not reading: its clock starts now. */
    if (!c->discarding)
        c->partial_ms = c->in_len > 0 ? clock_coarse_ms() : 0;
    conn_rearm(c);
}

/* Dead, but store callbacks still point at it: close the socket now, free
 * the connection once the last one has run (conn_on_flush()). */
static void conn_zombie(struct conn *c)
{
    if (c->rev) {
        event_free(c->rev);
        c->rev = NULL;
    }
    if (c->wev) {
        event_free(c->wev);
        c->wev = NULL;
    }
    tls_sess_free(c->tls);
    c->tls = NULL;
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
}

/* End of every callback: the only place a connection is freed. */
void conn_settle(struct conn *c)
{
    int r;

    if (c->closing && c->rev)
        event_del(c->rev);      /* after QUIT or EOF nothing more is read */
    if (!c->dead && c->fd >= 0) {
        r = conn_flush(c);
        /* Each round answers at least one request, or stops: a connection
         * still over its share with nothing written (hits waiting for
         * Redis) is resumed by a later callback. */
        while (r > 0 && c->out_paused && !c->dead) {
            size_t in_before = c->in_len;

            conn_resume(c);
            if (c->out_paused && c->in_len == in_before)
                break;
            r = c->dead ? 0 : conn_flush(c);
        }
        if (r < 0 || (r > 0 && c->closing && !c->replies.head))
            c->dead = true;
    }
    if (!c->dead)
        conn_charge(c);
    if (c->dead) {
        conn_unbacklog(c);
        if (c->replies.n_waiting > 0)
            conn_zombie(c);
        else
            conn_free(c);
    }
}

/* Whether @c may read more now (its TLS session may hold decrypted bytes). */
static bool conn_reads(const struct conn *c)
{
    return !c->dead && !c->closing && !c->paused && !c->out_paused && !c->backlogged &&
           !c->eof && c->in_len < IN_CAP;
}

/* What one read brought (@n, conn_recv()'s): answered, or the end. */
static void on_input(struct conn *c, ssize_t n)
{
    if (n > 0) {
        uint64_t now = clock_coarse_ms();
        size_t before;

        c->last_ms = now;
        c->in_len += (size_t)n;
        before = c->in_len;
        process_input(c, false);
        /* The slow-request timeout runs from the start of the line still
         * incomplete, so a client that trickles bytes cannot hold on. */
        if (c->in_len == 0 && !c->discarding)
            c->partial_ms = 0;
        else if (c->in_len < before && !c->discarding)
            c->partial_ms = now;
        else if (!c->partial_ms)
            c->partial_ms = now;
    } else if (n == 0) {
        /* Half-close: answer everything already sent, then close. */
        c->eof = true;
        event_del(c->rev);
        process_input(c, true);
        if (!c->paused && !c->out_paused && !c->backlogged)
            c->closing = true;
    } else if (n != -EAGAIN && n != -EWOULDBLOCK && n != -EINTR) {
        c->dead = true;
    }
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    ssize_t n;

    (void)fd;
    (void)what;
    if (c->tls && !tls_sess_ready(c->tls) && !conn_handshake(c)) {
        conn_settle(c);
        return;
    }
    do {
        n = conn_recv(c);
        on_input(c, n);
    } while (n > 0 && c->tls && tls_sess_pending(c->tls) && conn_reads(c));
    conn_settle(c);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    /* A handshake, or a TLS read, waited for room to write. */
    if (c->tls && (!tls_sess_ready(c->tls) || c->read_wants_write)) {
        c->read_wants_write = false;
        on_read(fd, what, c);
        return;
    }
    conn_settle(c);
}

/* Takes ownership of @fd and of the place @slot holds. */
static void conn_new(struct worker *w, int fd, const struct listener *l,
                     const struct admit_peer *p, struct admit_slot *slot)
{
    struct conn *c;
    int one = 1, sockbuf = (int)w->s->o.admit.sockbuf, r = -ENOMEM;

    c = calloc(1, sizeof(*c));
    if (!c)
        goto fail;
    c->w = w;
    c->fd = fd;
    c->is_unix = l->is_unix;
    c->proto = l->ops;
    c->uid = l->is_unix ? p->uid : (uid_t)-1;
    c->pid = l->is_unix && p->pid > 0 ? (uint32_t)p->pid : 0;
    c->privileged = l->is_unix && p->privileged;
    admit_peer_key(p, c->peer_key);
    c->slot = *slot;
    memset(slot, 0, sizeof(*slot));
    c->last_ms = clock_coarse_ms();
    if (!l->is_unix)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* The handshake is the first request: the request timeout bounds it. */
    if (l->tls) {
        r = tls_sess_new(w->s->o.tls, fd, false, &c->tls);
        if (r < 0)
            goto fail;
        c->partial_ms = c->last_ms;
    }
    /* Bounds what the kernel holds for a client that never reads (or that
     * we stopped reading): server.socket_buffer_bytes (docs/daemon.md). */
    if (sockbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof(sockbuf));
    c->rev = event_new(w->base, fd, EV_READ | EV_PERSIST, on_read, c);
    c->wev = event_new(w->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
    if (!c->rev || !c->wev || out_reserve(c, OUT_INITIAL) < 0 || event_add(c->rev, NULL) < 0)
        goto fail;
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    return;
fail:
    if (r != -EBUSY)            /* tls.c said so */
        log_ratelimited(&rl_accept, LOG_ERR, "out of memory for a new connection");
    if (c) {
        if (c->rev)
            event_free(c->rev);
        if (c->wev)
            event_free(c->wev);
        tls_sess_free(c->tls);
        free(c->out);
        admit_leave(w->s->admit, &c->slot);
        free(c);
    }
    admit_leave(w->s->admit, slot);     /* a no-op once c holds it */
    close(fd);
}

static void pause_accepting(struct worker *w)
{
    struct timeval tv = { 0, ACCEPT_PAUSE_MS * 1000 };

    for (size_t i = 0; i < w->s->n_lis; i++)
        if (w->lev[i])
            event_del(w->lev[i]);
    event_add(w->resume_ev, &tv);
}

void conn_on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;

    (void)fd;
    (void)what;
    if (w->stopping)
        return;
    for (size_t i = 0; i < w->s->n_lis; i++)
        if (w->lev[i])
            event_add(w->lev[i], NULL);
}

/* Tells a refused client why (best effort) and closes it. */
static void refuse(struct worker *w, int fd, const struct listener *l, enum admit_refusal why)
{
    bool peer = why == ADMIT_R_PER_ADDRESS || why == ADMIT_R_PER_UID;
    const char *reason = peer ? "too many connections from this peer" : "too many connections";
    char line[PROTO_REPLY_MAX];
    int n;

    /* As its protocol says it (an HTTP/2 peer, rls:, and a TLS one before
     * its handshake are only closed). */
    n = l->ops->fmt_refusal && !l->tls
            ? l->ops->fmt_refusal(line, sizeof(line), PROTO_E_BUSY, reason) : 0;
    if (n > 0 && send(fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* The refused client may already be gone; nothing to tell. */
    }
    close(fd);
    metrics_error(w->mw, PROTO_E_BUSY);
    log_ratelimited(&rl_accept, LOG_WARNING, "connection on %s refused: server.%s reached",
                    l->name, admit_refusal_name(why));
}

/* A root socket's peer that is neither root nor an admin: divvyd's own
 * user, the only other one its mode lets in. */
static void refuse_unprivileged(struct worker *w, int fd, const struct listener *l)
{
    static const char text[] = "ERR forbidden \"this socket is for root and admins\"\n";

    if (send(fd, text, sizeof(text) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* The refused client may already be gone; nothing to tell. */
    }
    close(fd);
    metrics_error(w->mw, PROTO_E_FORBIDDEN);
    log_ratelimited(&rl_accept, LOG_WARNING, "connection on %s refused: not root or an admin",
                    l->name);
}

void conn_on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct worker *w = arg;
    struct srv *s = w->s;
    const struct listener *l = NULL;
    struct admit_peer p;
    struct admit_slot slot;
    enum admit_refusal why;
    socklen_t sl;
    int fd, r;

    (void)what;
    for (size_t i = 0; i < s->n_lis; i++)
        if (s->lis[i].fd == lfd)
            l = &s->lis[i];
    if (!l)
        return;
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        memset(&p, 0, sizeof(p));
        sl = sizeof(p.addr);
        fd = accept4(lfd, (struct sockaddr *)&p.addr, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                log_ratelimited(&rl_accept, LOG_ERR, "accept on %s: %m; pausing", l->name);
                pause_accepting(w);
            }
            return;
        }
        /* A Unix peer's credentials are known now: the reserve can tell. */
        p.is_unix = l->is_unix;
        if (l->is_unix && peer_cred_pid(fd, s->o.admin_gid, &p.uid, &p.privileged, &p.pid) < 0) {
            p.uid = (uid_t)-1;
            p.privileged = false;
            p.pid = 0;
        }
        if (l->root_only && !p.privileged) {
            refuse_unprivileged(w, fd, l);
            continue;
        }
        r = admit_enter(s->admit, &p, &slot, &why);
        if (r == -EBUSY) {
            refuse(w, fd, l, why);
            continue;
        }
        if (r < 0) {
            log_ratelimited(&rl_accept, LOG_ERR, "out of memory for a new connection");
            close(fd);
            continue;
        }
        /* A privileged peer on a shared socket is served by the lane (its
         * threads in turn: this worker's own counterpart). */
        if (!w->lane && p.privileged) {
            if (handoff_push(&s->workers[s->o.workers + w->id].hand, fd, l, &p, &slot) < 0)
                log_ratelimited(&rl_accept, LOG_ERR, "cannot pass a connection to the lane");
            continue;
        }
        conn_adopt(w, fd, l, &p, &slot);
    }
}

void conn_adopt(struct worker *w, int fd, const struct listener *l, const struct admit_peer *p,
                struct admit_slot *slot)
{
    if (w->stopping) {
        close(fd);
        admit_leave(w->s->admit, slot);
        return;
    }
    if (l->ops->adopt)
        l->ops->adopt(w, fd, l, p, slot);
    else
        conn_new(w, fd, l, p, slot);
}

/* Closes the connections whose timeout (admit.h) has expired.  A connection
 * whose hits wait for Redis is left to redis.timeout_ms; one paused for the
 * output budget is judged by its output, not by the input we left unread. */
void conn_sweep(struct worker *w, uint64_t now)
{
    struct admit *a = w->s->admit;
    struct conn *c, *next;

    for (c = w->conns; c; c = next) {
        bool pending, partial, idle, handshake;
        int why;

        next = c->next;
        /* Waiting on the backlog is our delay, not the client's. */
        if (c->dead || c->fd < 0 || c->replies.n > 0 || c->paused || c->backlogged)
            continue;
        pending = c->out_off < c->out_len;
        /* A TLS handshake is a request still arriving, and the idle timeout
         * bounds it too (request_timeout_ms may be 0). */
        handshake = c->tls && !tls_sess_ready(c->tls);
        partial = !c->out_paused && (c->in_len > 0 || c->discarding || handshake);
        idle = !pending && (!partial || handshake) && !c->out_paused;
        why = admit_expired(a, now, idle, c->last_ms, partial ? c->partial_ms : 0,
                            pending ? c->stall_ms : 0);
        if (why < 0)
            continue;
        admit_closed(a, (enum admit_close)why);
        log_ratelimited(&rl_admit, LOG_INFO, "closing a %s connection (uid %d): %s timeout",
                        c->is_unix ? "Unix" : "TCP", c->is_unix ? (int)c->uid : -1,
                        admit_close_name((enum admit_close)why));
        c->dead = true;
        conn_settle(c);
    }
}

/* After store callbacks: resume paused input, write, free dead connections. */
void conn_on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct conn *c;

    (void)fd;
    (void)what;
    w->flush_active = false;
    while ((c = w->dirty) != NULL) {
        w->dirty = c->dirty_next;
        c->dirty = false;
        if (c->paused && !c->dead && c->replies.n < CONN_PEND_MAX / 2) {
            c->paused = false;
            process_input(c, c->eof);
            conn_rearm(c);
        }
        conn_settle(c);
    }
}

void conn_on_backlog(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct conn *c, *last = w->backlog_tail;
    static const struct timeval now = { 0, 0 };
    bool done = false;

    (void)fd;
    (void)what;
    /* One turn each for those waiting now; a connection whose turn ends
     * with requests left goes to the back, after @last. */
    while (!done && (c = w->backlog_head) != NULL) {
        done = c == last;
        conn_unbacklog(c);
        process_input(c, c->eof);
        conn_rearm(c);
        conn_settle(c);
    }
    if (w->backlog_head && !evtimer_pending(w->backlog_ev, NULL))
        evtimer_add(w->backlog_ev, &now);
}
