/* SPDX-License-Identifier: MIT */
/*
 * rls: the Envoy RLS v3 listener's connections and streams (see rls.h).
 * nghttp2 does HTTP/2 (framing, HPACK, flow control, the connection
 * preface, flood limits); this file reads into it, writes what it queues,
 * and turns each complete request stream into hit_submit() calls, one per
 * descriptor, whose answers it collects into one RateLimitResponse.
 *
 * Bounds on what a peer can make divvyd hold: RLS_STREAMS_MAX concurrent
 * streams, RLS_HEADERS_MAX bytes of headers and one RLS_MSG_MAX message per
 * stream, nothing read while output is pending (nghttp2 queues no more than
 * the streams it answers and its own ack limits), and admission's timeouts.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "admit.h"
#include "clock.h"
#include "hit.h"
#include "listener.h"
#include "log.h"
#include "rls.h"
#include "rls_msg.h"
#include "srv_int.h"
#include "worker.h"

#define RLS_PATH        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define RLS_READ_CHUNK  16384
#define RLS_WRITE_BATCH 16384           /* frames gathered for one send() */

struct rls_conn;
struct rls_stream;

/* One descriptor of a stream: where its hit's answer lands. */
struct rls_desc {
    struct rls_stream *s;
    struct rls_status st;
};

struct rls_stream {
    struct rls_conn *rc;        /* NULL: orphaned (closed, or its connection gone) */
    struct rls_stream *prev, *next;     /* the connection's streams, oldest first */
    int32_t id;
    bool receiving;             /* no END_STREAM yet */
    bool answered;              /* a response (or an error) is submitted */
    bool post, path_ok, grpc_ct;
    bool too_big;               /* the body went over one message: dropped */
    size_t header_bytes;
    uint64_t start_ms;
    uint64_t timeout_ms;        /* grpc-timeout; 0: none */
    struct event *deadline_ev;
    uint8_t *body;
    size_t body_len, body_cap;
    size_t n_desc, n_left;      /* descriptors; those not answered yet (+1 while submitting) */
    int err;                    /* a grpc-status to answer instead; 0: none */
    const char *err_msg;
    struct rls_desc *desc;
    uint8_t *resp;              /* the framed response message */
    size_t resp_len, resp_off;
};

struct rls_conn {
    struct worker *w;
    struct rls_conn *prev, *next;
    int fd;
    bool is_unix;
    bool privileged;
    bool dead;
    uid_t uid;
    struct admit_slot slot;
    struct event *rev, *wev, *flush_ev;
    bool reading;               /* rev is armed */
    nghttp2_session *ses;
    struct rls_stream *head, *tail;
    unsigned n_streams;
    uint64_t last_ms;           /* last byte read */
    uint64_t stall_ms;          /* pending output last made progress; 0: none pending */
    size_t body_bytes;          /* request bodies its streams hold (RLS_CONN_BODY_MAX) */
    uint8_t *out;               /* what send() did not take */
    size_t out_len, out_off, out_cap;
};

static struct log_ratelimit rl_rls;

static void rls_settle(struct rls_conn *rc);
static void rls_stream_answer(struct rls_stream *s);

/* ---- streams ----------------------------------------------------------------------- */

/* Frees @s's request body, and takes it out of its connection's count. */
static void stream_drop_body(struct rls_stream *s)
{
    if (s->rc) {
        s->rc->body_bytes -= s->body_cap;
        admit_charge(s->rc->w->s->admit, &s->rc->slot, s->rc->out_cap + s->rc->body_bytes);
    }
    free(s->body);
    s->body = NULL;
    s->body_len = s->body_cap = 0;
}

static void stream_free(struct rls_stream *s)
{
    if (s->deadline_ev)
        event_free(s->deadline_ev);
    free(s->body);
    free(s->desc);
    free(s->resp);
    free(s);
}

/* Off its connection: freed now, or by the last descriptor's answer. */
static void stream_orphan(struct rls_stream *s)
{
    struct rls_conn *rc = s->rc;

    stream_drop_body(s);
    if (rc) {
        if (s->prev)
            s->prev->next = s->next;
        else
            rc->head = s->next;
        if (s->next)
            s->next->prev = s->prev;
        else
            rc->tail = s->prev;
        rc->n_streams--;
        s->rc = NULL;
    }
    if (s->deadline_ev) {
        event_free(s->deadline_ev);
        s->deadline_ev = NULL;
    }
    if (s->n_left == 0)
        stream_free(s);
}

/* Asks for the connection's output to be written at the end of this turn. */
static void rls_wake(struct rls_conn *rc)
{
    event_active(rc->flush_ev, 0, 0);
}

/* A trailers-only answer: the call failed with grpc-status @code. */
static void stream_fail(struct rls_stream *s, int code, const char *msg)
{
    char status[16];
    nghttp2_nv nv[] = {
        { (uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
          NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)"grpc-status", (uint8_t *)status, 11, 0, NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)"grpc-message", (uint8_t *)msg, 12, strlen(msg), NGHTTP2_NV_FLAG_NONE },
    };

    if (s->answered || !s->rc)
        return;
    s->answered = true;
    nv[2].valuelen = (size_t)snprintf(status, sizeof(status), "%d", code);
    if (nghttp2_submit_response(s->rc->ses, s->id, nv, 4, NULL) != 0)
        s->rc->dead = true;
    rls_wake(s->rc);
}

static ssize_t resp_read(nghttp2_session *ses, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *user)
{
    static const nghttp2_nv ok[] = {
        { (uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1, NGHTTP2_NV_FLAG_NONE },
    };
    struct rls_stream *s = src->ptr;
    size_t n = s->resp_len - s->resp_off;

    (void)user;
    if (n > length)
        n = length;
    memcpy(buf, s->resp + s->resp_off, n);
    s->resp_off += n;
    if (s->resp_off == s->resp_len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(ses, id, ok, 1) != 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

/* Every descriptor answered: the response, or the error one of them met. */
static void rls_stream_answer(struct rls_stream *s)
{
    static const nghttp2_nv hdrs[] = {
        { (uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
          NGHTTP2_NV_FLAG_NONE },
    };
    struct rls_status *st;
    nghttp2_data_provider prd = { .source.ptr = s, .read_callback = resp_read };
    int r;

    if (!s->rc) {
        stream_free(s);
        return;
    }
    if (s->answered)
        return;
    if (s->err) {
        stream_fail(s, s->err, s->err_msg);
        return;
    }
    st = malloc(s->n_desc * sizeof(*st));
    if (!st) {
        stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    for (size_t i = 0; i < s->n_desc; i++)
        st[i] = s->desc[i].st;
    r = rls_msg_encode(st, s->n_desc, &s->resp, &s->resp_len);
    free(st);
    if (r < 0) {
        stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    s->answered = true;
    if (nghttp2_submit_response(s->rc->ses, s->id, hdrs, 2, &prd) != 0)
        s->rc->dead = true;
    rls_wake(s->rc);
}

/* hit_submit()'s answer for one descriptor (inside the RCU section of @rs). */
static void rls_hit_done(void *arg, int r, const struct rules *rs, const struct eval_result *res)
{
    struct rls_desc *d = arg;
    struct rls_stream *s = d->s;
    struct rls_status *st = &d->st;
    struct rules_rule rule;

    if (r < 0) {
        if (!s->err) {
            s->err = r == -ENOSPC || r == -EDQUOT ? RLS_GRPC_UNAVAILABLE : RLS_GRPC_INTERNAL;
            s->err_msg = r == -ENOSPC || r == -EDQUOT ? "no counter for a privileged rule"
                                                      : "internal error";
        }
    } else {
        st->over = !res->allowed;
        st->remaining = res->credit > UINT32_MAX ? UINT32_MAX : (uint32_t)res->credit;
        st->reset_s = res->reset_s;
        if (rules_get(rs, res->limiter, &rule) >= 0) {
            bool bucket = rule.algo == RULES_ALGO_TOKEN_BUCKET;

            snprintf(st->name, sizeof(st->name), "%s", rule.id_str);
            st->has_limit = rls_msg_unit(bucket ? rule.refill_amount : rule.credit_limit,
                                         bucket ? rule.refill_seconds : rule.reset_seconds,
                                         &st->requests_per_unit, &st->unit);
        }
    }
    if (--s->n_left == 0)
        rls_stream_answer(s);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct rls_stream *s = arg;
    struct rls_conn *rc = s->rc;

    (void)fd;
    (void)what;
    stream_fail(s, RLS_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
    if (rc)
        rls_settle(rc);
}

/* END_STREAM: the request is complete; check it and evaluate its descriptors. */
static void stream_request(struct rls_stream *s)
{
    struct rls_conn *rc = s->rc;
    struct worker *w = rc->w;
    struct rls_msg *m = NULL;
    const uint8_t *msg;
    size_t len;
    int r;

    s->receiving = false;
    if (!s->post || !s->path_ok) {
        stream_fail(s, RLS_GRPC_UNIMPLEMENTED, "only " RLS_PATH " is served");
        return;
    }
    if (!s->grpc_ct) {
        stream_fail(s, RLS_GRPC_INVALID_ARGUMENT, "content-type must be application/grpc");
        return;
    }
    if (s->too_big) {
        stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED, "request message too large");
        return;
    }
    r = rls_msg_unframe(s->body, s->body_len, &msg, &len);
    if (r >= 0)
        r = rls_msg_decode(msg, len, &m);
    stream_drop_body(s);
    if (r == -ENOTSUP) {
        stream_fail(s, RLS_GRPC_UNIMPLEMENTED, "compressed messages are not supported");
        return;
    }
    if (r == -EMSGSIZE || r == -E2BIG) {
        stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED, "request message too large");
        return;
    }
    if (r < 0) {
        stream_fail(s, RLS_GRPC_INVALID_ARGUMENT, r == -ENOMEM ? "out of memory"
                                                               : "not a RateLimitRequest");
        return;
    }
    /* Every descriptor must map before any is charged. */
    s->n_desc = rls_msg_descriptors(m);
    for (size_t i = 0; i < s->n_desc; i++) {
        r = rls_msg_request(m, i, &w->req);
        if (r < 0) {
            rls_msg_free(m);
            stream_fail(s, RLS_GRPC_INVALID_ARGUMENT,
                        r == -EINVAL ? "a descriptor entry may not be named domain"
                        : r == -E2BIG ? "a descriptor has more than 32 distinct keys"
                        : r == -ERANGE ? "hits_addend over 1000000000"
                        : "a descriptor is longer than a 4096-byte request");
            return;
        }
    }
    if (s->timeout_ms && clock_coarse_ms() >= s->start_ms + s->timeout_ms) {
        rls_msg_free(m);
        stream_fail(s, RLS_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
        return;
    }
    s->desc = calloc(s->n_desc, sizeof(*s->desc));
    if (!s->desc) {
        rls_msg_free(m);
        stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    /* One more while submitting: a descriptor answered at once cannot end it. */
    s->n_left = s->n_desc + 1;
    for (size_t i = 0; i < s->n_desc; i++) {
        s->desc[i].s = s;
        rls_msg_request(m, i, &w->req);
        hit_submit(w, &w->req, rc->privileged, rc->uid, rls_hit_done, &s->desc[i]);
    }
    rls_msg_free(m);
    if (--s->n_left == 0) {
        rls_stream_answer(s);
        return;
    }
    if (s->timeout_ms) {
        uint64_t now = clock_coarse_ms(), end = s->start_ms + s->timeout_ms;
        uint64_t left = end > now ? end - now : 1;
        struct timeval tv = { (time_t)(left / 1000), (suseconds_t)(left % 1000) * 1000 };

        s->deadline_ev = evtimer_new(w->base, on_deadline, s);
        if (s->deadline_ev)
            evtimer_add(s->deadline_ev, &tv);
    }
}

/* ---- nghttp2 callbacks ------------------------------------------------------------- */

static int on_begin_headers(nghttp2_session *ses, const nghttp2_frame *frame, void *user)
{
    struct rls_conn *rc = user;
    struct rls_stream *s;

    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    s = calloc(1, sizeof(*s));
    if (!s)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    s->rc = rc;
    s->id = frame->hd.stream_id;
    s->receiving = true;
    s->start_ms = clock_coarse_ms();
    s->prev = rc->tail;
    if (rc->tail)
        rc->tail->next = s;
    else
        rc->head = s;
    rc->tail = s;
    rc->n_streams++;
    nghttp2_session_set_stream_user_data(ses, s->id, s);
    return 0;
}

static bool hdr_is(const uint8_t *p, size_t n, const char *s)
{
    return n == strlen(s) && memcmp(p, s, n) == 0;
}

static int on_header(nghttp2_session *ses, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    struct rls_stream *s;

    (void)flags;
    (void)user;
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    s = nghttp2_session_get_stream_user_data(ses, frame->hd.stream_id);
    if (!s)
        return 0;
    s->header_bytes += namelen + valuelen + 32;
    if (s->header_bytes > RLS_HEADERS_MAX)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;               /* request trailers: nothing divvyd needs */
    if (hdr_is(name, namelen, ":method"))
        s->post = hdr_is(value, valuelen, "POST");
    else if (hdr_is(name, namelen, ":path"))
        s->path_ok = hdr_is(value, valuelen, RLS_PATH);
    else if (hdr_is(name, namelen, "content-type"))
        s->grpc_ct = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
                     (valuelen == 16 || value[16] == '+' || value[16] == ';');
    else if (hdr_is(name, namelen, "grpc-timeout") &&
             rls_msg_timeout_ms((const char *)value, valuelen, &s->timeout_ms) < 0)
        s->timeout_ms = 0;
    return 0;
}

static int on_data_chunk(nghttp2_session *ses, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user)
{
    struct rls_stream *s = nghttp2_session_get_stream_user_data(ses, id);
    struct rls_conn *rc = user;

    (void)flags;
    if (!s || s->too_big || !s->receiving)
        return 0;
    /* Over one message, or over what the connection's streams may hold together. */
    if (s->body_len + len > RLS_GRPC_PREFIX + RLS_MSG_MAX ||
        rc->body_bytes - s->body_cap + 2 * (s->body_len + len) > RLS_CONN_BODY_MAX) {
        s->too_big = true;
        stream_drop_body(s);
        return 0;
    }
    if (s->body_len + len > s->body_cap) {
        size_t cap = s->body_cap ? s->body_cap : 1024;
        uint8_t *grown;

        while (cap < s->body_len + len)
            cap *= 2;
        grown = realloc(s->body, cap);
        if (!grown)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        rc->body_bytes += cap - s->body_cap;
        s->body = grown;
        s->body_cap = cap;
        admit_charge(rc->w->s->admit, &rc->slot, rc->out_cap + rc->body_bytes);
    }
    memcpy(s->body + s->body_len, data, len);
    s->body_len += len;
    return 0;
}

static int on_frame_recv(nghttp2_session *ses, const nghttp2_frame *frame, void *user)
{
    struct rls_stream *s;

    (void)user;
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    s = nghttp2_session_get_stream_user_data(ses, frame->hd.stream_id);
    if (s && s->receiving && s->rc)
        stream_request(s);
    return 0;
}

static int on_stream_close(nghttp2_session *ses, int32_t id, uint32_t code, void *user)
{
    struct rls_stream *s = nghttp2_session_get_stream_user_data(ses, id);

    (void)code;
    (void)user;
    if (s) {
        nghttp2_session_set_stream_user_data(ses, id, NULL);
        stream_orphan(s);
    }
    return 0;
}

/* ---- the connection ---------------------------------------------------------------- */

static void rls_conn_free(struct rls_conn *rc)
{
    struct worker *w = rc->w;

    while (rc->head)
        stream_orphan(rc->head);
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
    if (rc->fd >= 0)
        close(rc->fd);
    free(rc->out);
    admit_leave(w->s->admit, &rc->slot);
    free(rc);
    if (w->stopping && !w->conns && !w->rls)
        event_base_loopbreak(w->base);
}

/* Writes what nghttp2 has queued; 1 when all is out, 0 when the socket is full, -errno. */
static int rls_write(struct rls_conn *rc)
{
    bool progress = false;

    for (;;) {
        const uint8_t *data;
        ssize_t n;

        /* nghttp2 hands out one frame at a time: gather up to RLS_WRITE_BATCH
         * bytes of them, so a batch of answers leaves in one send(). */
        while (rc->out_len < RLS_WRITE_BATCH) {
            n = nghttp2_session_mem_send(rc->ses, &data);
            if (n < 0)
                return -EPROTO;
            if (n == 0)
                break;
            if (rc->out_len + (size_t)n > rc->out_cap) {
                size_t cap = rc->out_len + (size_t)n;
                uint8_t *grown;

                if (cap < RLS_WRITE_BATCH)
                    cap = RLS_WRITE_BATCH;
                grown = realloc(rc->out, cap);
                if (!grown)
                    return -ENOMEM;
                rc->out = grown;
                rc->out_cap = cap;
                admit_charge(rc->w->s->admit, &rc->slot, rc->out_cap + rc->body_bytes);
            }
            memcpy(rc->out + rc->out_len, data, (size_t)n);
            rc->out_len += (size_t)n;
        }
        if (rc->out_off == rc->out_len)
            break;
        while (rc->out_off < rc->out_len) {
            n = send(rc->fd, rc->out + rc->out_off, rc->out_len - rc->out_off, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    if (progress || !rc->stall_ms)
                        rc->stall_ms = clock_coarse_ms();
                    event_add(rc->wev, NULL);
                    return 0;
                }
                return -errno;
            }
            rc->out_off += (size_t)n;
            progress = true;
        }
        rc->out_off = rc->out_len = 0;
    }
    rc->out_off = rc->out_len = 0;
    rc->stall_ms = 0;
    event_del(rc->wev);
    return 1;
}

/* End of every callback that touched @rc: write, read again or not, free when done. */
static void rls_settle(struct rls_conn *rc)
{
    int r = 0;

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
    /* Output pending: read nothing more until the peer takes it. */
    if (r == 0 && rc->reading) {
        event_del(rc->rev);
        rc->reading = false;
    } else if (r > 0 && !rc->reading && !rc->w->stopping) {
        event_add(rc->rev, NULL);
        rc->reading = true;
    }
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct rls_conn *rc = arg;
    uint8_t buf[RLS_READ_CHUNK];
    ssize_t n;

    (void)what;
    n = read(fd, buf, sizeof(buf));
    if (n > 0) {
        rc->last_ms = clock_coarse_ms();
        if (nghttp2_session_mem_recv(rc->ses, buf, (size_t)n) < 0)
            rc->dead = true;
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        rc->dead = true;
    }
    rls_settle(rc);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rls_settle(arg);
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

    if (nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0)
        goto out;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    /* Streams beyond SETTINGS are refused at once (before the peer saw it too). */
    nghttp2_option_set_max_reserved_remote_streams(opt, 0);
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    nghttp2_option_set_max_settings(opt, 32);
    nghttp2_option_set_no_closed_streams(opt, 1);
    if (nghttp2_session_server_new2(&rc->ses, cbs, rc, opt) != 0)
        goto out;
    if (nghttp2_submit_settings(rc->ses, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) != 0)
        goto out;
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
    int one = 1, sockbuf = (int)w->s->o.admit.sockbuf;

    rc = calloc(1, sizeof(*rc));
    if (!rc)
        goto fail;
    rc->w = w;
    rc->fd = fd;
    rc->is_unix = l->is_unix;
    rc->uid = l->is_unix ? p->uid : (uid_t)-1;
    rc->privileged = l->is_unix && p->privileged;
    rc->slot = *slot;
    memset(slot, 0, sizeof(*slot));
    rc->last_ms = clock_coarse_ms();
    if (!l->is_unix)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (sockbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof(sockbuf));
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
        uint64_t partial = 0;
        bool waiting = false, pending = rc->out_off < rc->out_len;
        int why;

        next = rc->next;
        /* A request still arriving counts from its start; one waiting for
         * Redis is left to redis.timeout_ms (as conn.c does). */
        for (struct rls_stream *s = rc->head; s; s = s->next) {
            if (s->receiving && !partial)
                partial = s->start_ms;
            if (!s->receiving && !s->answered)
                waiting = true;
        }
        if (waiting)
            continue;
        why = admit_expired(a, now_ms, !pending && !rc->head, rc->last_ms, partial,
                            pending ? rc->stall_ms : 0);
        if (why < 0)
            continue;
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

    for (rc = w->rls; rc; rc = next) {
        next = rc->next;
        if (rc->reading) {
            event_del(rc->rev);
            rc->reading = false;
        }
        if (nghttp2_session_terminate_session(rc->ses, NGHTTP2_NO_ERROR) != 0)
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
