/* SPDX-License-Identifier: MIT */
/*
 * conn: the transport of a worker's client connections (worker_int.h), from
 * accept() to the end of the callback that frees it: admission (admit.h:
 * whether it may open, how long it may stay), reading, the output buffer
 * and its budget, writing in one send(), timeouts, fairness.  It knows no
 * protocol: the listener carries one (struct conn_proto, as nginx's
 * ngx_listening_t carries its handler), whose on_input() parses and answers
 * the requests a read brought (line.h, resp_cmd.h) into the output in
 * request order; a protocol with a transport of its own (RLS, rls.h) takes
 * the accepted socket instead.
 *
 * TLS ("tls:" listeners, tls.h): the handshake comes first, driven by the
 * same events and bounded by the request timeout (its start is the
 * connection's); then reads and writes go through the session.  The
 * protocol sees the same bytes either way.
 *
 * Reply order: every reply goes through out_append().  While answers of the
 * connection wait (a hit waiting for Redis, COUNTERS reading it), each holds
 * a slot in the connection's reply queue (replyq.h) and a reply goes into
 * the trailer of the last slot instead; when a slot is answered
 * (conn_reply_answer()) the answered prefix of the queue moves to the
 * output buffer, so replies always leave in request order (docs/dev/daemon.md
 * "Hits that wait for Redis").
 *
 * Fairness: one turn of a connection (a read, a resumption) answers at most
 * CONN_TURN_MAX requests.  One with more already read goes on its worker's
 * backlog and stops being read; the backlog's turns come once per loop
 * iteration, after the next poll, so a client that pipelines thousands of
 * requests in one read waits its turn like everyone else (docs/daemon.md
 * "The privileged lane").
 *
 * Ownership: a connection belongs to its worker's thread.  It is freed only
 * by conn_settle() at the end of a callback (or conn_free() once its worker
 * has stopped), never inside a store callback: one whose hits still wait is
 * closed but kept until they have run.
 */
#ifndef DIVVY_CONN_H
#define DIVVY_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <event2/util.h>

#include "admit.h"
#include "proto.h"
#include "replyq.h"

#define IN_CAP            (2 * PROTO_LINE_MAX)
#define OUT_INITIAL       4096
#define CONN_PEND_MAX     1024      /* waiting hits per connection before reading pauses */
#define CONN_TURN_MAX     32        /* requests answered per connection per turn */

struct worker;
struct listener;
struct conn;
struct tls_sess;

/* A protocol as the transport reaches it; its listener carries it (listener.h). */
struct conn_proto {
    const char *name;
    /*
     * Parses and answers the first request in @data[0..@len) (c->in, which
     * it may extend by a byte to end an unterminated line at EOF, @eof):
     * the bytes consumed (one request answered, or skipped), 0 when it is
     * not complete yet, < 0 when nothing more is to be read (the protocol
     * marked @c closing or dead).
     */
    ssize_t (*on_input)(struct conn *c, const char *data, size_t len, bool eof);
    /* Formats error @err for a connection refused at accept (busy): length,
     * or < 0 for none.  NULL: it is closed without a word. */
    int (*fmt_refusal)(char *buf, size_t size, enum proto_err err, const char *reason);
    /* Set for a protocol with a transport of its own: takes an accepted
     * connection as conn_adopt() would (ownership of @fd and @slot). */
    void (*adopt)(struct worker *w, int fd, const struct listener *l, const struct admit_peer *p,
                  struct admit_slot *slot);
    /* Frees what the protocol keeps in c->proto_state (NULL: nothing to free);
     * conn_free() calls it once, before the connection goes. */
    void (*on_free)(struct conn *c);
};

struct conn {
    struct worker *w;
    struct conn *prev, *next;
    struct event *rev, *wev;
    int fd;
    const struct conn_proto *proto;     /* what it speaks: its listener's */
    bool is_unix;
    bool privileged;
    bool closing;               /* close once the output is flushed */
    bool discarding;            /* skipping the rest of an over-long request (its protocol's) */
    bool dead;                  /* close now, drop pending output */
    bool eof;                   /* the peer half-closed: close once all is answered */
    bool paused;                /* CONN_PEND_MAX hits wait: input is left unparsed */
    bool dirty;                 /* on the worker's flush list */
    bool out_paused;            /* over its share of a spent output budget: not read */
    bool backlogged;            /* on the worker's backlog: requests left, not read */
    uid_t uid;
    int8_t report_peer;         /* REPORT (report.h): 0 not asked yet, 1 uid 0 or the fast
                                 * group (report_uid/pid: its SO_PEERCRED), -1 neither */
    uint32_t report_uid, report_pid;
    uint8_t peer_key[16];       /* admit_peer_key(): uid or address, for per-peer shares */
    struct admit_slot slot;     /* its place (admit.h), released by conn_free() only */
    uint64_t last_ms;           /* last byte read (clock_coarse_ms()) */
    uint64_t partial_ms;        /* the current partial request line started; 0: none */
    uint64_t stall_ms;          /* pending output last made progress; 0: none pending */
    struct conn *dirty_next;
    struct conn *bl_prev, *bl_next;     /* the worker's backlog */
    struct replyq replies;      /* answers that wait, in request order (replyq.h) */
    struct tls_sess *tls;       /* a "tls:" listener's (tls.h); NULL: plain */
    bool read_wants_write;      /* a TLS read waits for the socket to take bytes */
    size_t in_len;
    char *out;
    size_t out_len, out_off, out_cap;
    char in[IN_CAP];
    void *proto_state;          /* the protocol's own state, NULL until it makes one */
    size_t proto_bytes;         /* ... and its buffers' bytes, counted in the output budget
                                 * (conn_charge_proto()) */
    uint32_t pid;               /* Unix: the peer's pid at connect (engine_req.pid); 0 */
};

/* ---- replies: the connection's thread ------------------------------------------------ */

/* Appends @len bytes of reply; behind a waiting answer they queue in its
 * slot's trailer, so replies keep request order.  Out of memory marks @c dead. */
void out_append(struct conn *c, const char *s, size_t len);

/*
 * A slot at the end of @c's reply queue for an answer that comes later (a
 * hit waiting for Redis, COUNTERS reading it): replies of later requests
 * queue behind it.  It holds @held bytes of @c's budget besides its reply.
 * Answer it exactly once with conn_reply_answer() (the connection lives
 * until then).  NULL: out of memory.
 */
struct replyq_slot *conn_reply_wait(struct conn *c, size_t held);

/*
 * Answers slot @s of a connection (s->owner): its reply in s->reply
 * (s->reply_len bytes), followed by @len bytes of @text (malloc'd, taken
 * over; NULL: none).  The answered prefix of the queue moves to the output
 * buffer, which the worker's flush event writes.
 */
void conn_reply_answer(struct replyq_slot *s, char *text, size_t len);

/*
 * Sets what the protocol's own buffers of @c hold (c->proto_bytes: a RESP
 * transaction's queue) and counts it in the shared output budget with @c's
 * output, so one connection's queue is seen by every other's share.
 */
void conn_charge_proto(struct conn *c, size_t bytes);

/* ---- life cycle ------------------------------------------------------------------------ */

/* Writes what is pending; arms the write event if the socket is full.
 * 1 when everything is written, 0 when some is pending, -errno. */
int conn_flush(struct conn *c);

/* End of every callback that touched @c: writes, resumes a paused reader,
 * and frees @c when it is dead (or only closes it while hits still wait).
 * The only place a connection is freed while its worker runs; @c may be
 * gone afterwards. */
void conn_settle(struct conn *c);

/* Frees @c at once, its waiting hits included.  Only once no store callback
 * can reach it any more (no answer waits, or the worker's Redis connection is
 * gone).  NULL-safe. */
void conn_free(struct conn *c);

/* ---- the worker's events (@arg is the struct worker) ------------------------------------ */

/* A listener is readable: accepts up to a batch, admits or refuses each.  A
 * worker hands a privileged peer to the lane (handoff.h). */
void conn_on_accept(evutil_socket_t lfd, short what, void *arg);

/* Makes the connection @fd, accepted on @l from @p, one of @w's, speaking
 * l->ops (or hands it to a protocol's own transport); takes ownership of @fd
 * and of what @slot holds.  A stopping worker closes it instead. */
void conn_adopt(struct worker *w, int fd, const struct listener *l, const struct admit_peer *p,
                struct admit_slot *slot);

/* Answers every request already read, ignoring the turn's bound: before a
 * stopping worker closes @c. */
void conn_finish_input(struct conn *c);

/* The backlog's turn: each connection on it answers its next CONN_TURN_MAX. */
void conn_on_backlog(evutil_socket_t fd, short what, void *arg);

/* Re-arms the listeners after accept() ran out of descriptors or memory. */
void conn_on_resume(evutil_socket_t fd, short what, void *arg);

/* Periodic (the worker's sweep): closes @w's connections whose admission
 * timeout expired at @now_ms (clock_coarse_ms()). */
void conn_sweep(struct worker *w, uint64_t now_ms);

/* After store callbacks: resumes paused input, writes, frees dead connections. */
void conn_on_flush(evutil_socket_t fd, short what, void *arg);

#endif
