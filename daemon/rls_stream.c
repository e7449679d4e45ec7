/* SPDX-License-Identifier: MIT */
/*
 * rls_stream: the streams of an RLS connection (rls_int.h).  nghttp2's
 * callbacks build each stream from its HEADERS and DATA; a complete request
 * is checked, decoded (rls_msg.h) and each descriptor's pairs go to the
 * engine as one request (engine_submit(): TAKE hits_addend, no text line in
 * between), whose answers are collected into one RateLimitResponse.
 *
 * What a peer sends is held only within bounds (docs/rls.md "Limits"): a
 * new stream the connection cannot afford (over RLS_CONN_MEM_MAX, or over
 * its share of a spent budget) is refused with RST_STREAM REFUSED_STREAM
 * before anything is kept for it; a body past one message, past the
 * connection's RLS_CONN_BODY_MAX or past what the connection may hold is
 * answered at once with RESOURCE_EXHAUSTED and the stream reset (NO_ERROR,
 * as gRPC servers end a call the client is still sending), its bytes freed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "calendar.h"
#include "clock.h"
#include "engine.h"
#include "log.h"
#include "rls.h"
#include "rls_int.h"
#include "rls_msg.h"
#include "srv_int.h"
#include "worker_int.h"

#define RLS_PATH        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
/* What a new stream costs before its body: our object and nghttp2's. */
#define RLS_STREAM_COST (sizeof(struct rls_stream) + 512)
#define RLS_NO_MEMORY   "no memory left for this connection (divvyd's budget)"

static void stream_answer(struct rls_stream *s);

/* Sets what @s itself holds (object, descriptors, answer) to @mem bytes. */
static void stream_mem(struct rls_stream *s, size_t mem)
{
    if (s->rc)
        s->rc->stream_bytes = s->rc->stream_bytes - s->mem + mem;
    s->mem = mem;
}

/* Frees @s's request body, and takes it out of its connection's count. */
static void stream_drop_body(struct rls_stream *s)
{
    if (s->rc) {
        s->rc->body_bytes -= s->body_cap;
        rls_charge(s->rc);
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

void rls_stream_orphan(struct rls_stream *s)
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
        rc->stream_bytes -= s->mem;
        s->rc = NULL;
    }
    if (s->deadline_ev) {
        event_free(s->deadline_ev);
        s->deadline_ev = NULL;
    }
    if (s->n_left == 0)
        stream_free(s);
}

/* Submits one of our frames: output, not input, for rls.c's allocator. */
static int stream_submit_rst(struct rls_conn *rc, int32_t id, uint32_t code)
{
    int r;

    rc->submitting = true;
    r = nghttp2_submit_rst_stream(rc->ses, NGHTTP2_FLAG_NONE, id, code);
    rc->submitting = false;
    return r;
}

/* A trailers-only answer: the call failed with grpc-status @code.  A peer
 * still sending the request is told to stop once it is sent (RST_STREAM
 * NO_ERROR, on_frame_send(): nghttp2 would drop the answer queued before a
 * reset), so the stream, and all it held, goes at once. */
void rls_stream_fail(struct rls_stream *s, int code, const char *msg)
{
    char status[16];
    nghttp2_nv nv[] = {
        { (uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
          NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)"grpc-status", (uint8_t *)status, 11, 0, NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)"grpc-message", (uint8_t *)msg, 12, strlen(msg), NGHTTP2_NV_FLAG_NONE },
    };
    struct rls_conn *rc = s->rc;
    int r;

    if (s->answered || !rc)
        return;
    s->answered = true;
    s->out_ms = clock_coarse_ms();
    stream_drop_body(s);
    nv[2].valuelen = (size_t)snprintf(status, sizeof(status), "%d", code);
    rc->submitting = true;
    r = nghttp2_submit_response(rc->ses, s->id, nv, 4, NULL);
    rc->submitting = false;
    if (r != 0)
        rc->dead = true;
    rls_wake(rc);
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
    /* Flow control let some through: the answer is moving (rls_sweep()). */
    s->out_ms = clock_coarse_ms();
    if (s->resp_off == s->resp_len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(ses, id, ok, 1) != 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

void rls_stream_reply(struct rls_stream *s, uint8_t *resp, size_t len)
{
    static const nghttp2_nv hdrs[] = {
        { (uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE },
        { (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
          NGHTTP2_NV_FLAG_NONE },
    };
    nghttp2_data_provider prd = { .source.ptr = s, .read_callback = resp_read };
    struct rls_conn *rc = s->rc;

    s->resp = resp;
    s->resp_len = len;
    /* The descriptors are copied out: only the answer stays. */
    free(s->desc);
    s->desc = NULL;
    stream_mem(s, sizeof(*s) + s->resp_len);
    s->answered = true;
    s->out_ms = clock_coarse_ms();
    rc->submitting = true;
    if (nghttp2_submit_response(rc->ses, s->id, hdrs, 2, &prd) != 0)
        rc->dead = true;
    rc->submitting = false;
    rls_wake(rc);
}

/* Every descriptor answered: the response, or the error one of them met. */
static void stream_answer(struct rls_stream *s)
{
    struct rls_header hdr[RLS_HEADERS_ADD_MAX];
    struct rls_status *st;
    struct rls_conn *rc = s->rc;
    size_t n_hdr = 0, len;
    uint8_t *resp;
    int r;

    if (!rc) {
        stream_free(s);
        return;
    }
    if (s->answered)
        return;
    if (s->err) {
        rls_stream_fail(s, s->err, s->err_msg);
        return;
    }
    st = malloc(s->n_desc * sizeof(*st));
    if (!st) {
        rls_stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    for (size_t i = 0; i < s->n_desc; i++)
        st[i] = s->desc[i].st;
    if (rc->w->s->o.rls_ratelimit_headers)
        n_hdr = rls_msg_ratelimit_headers(st, s->n_desc, hdr);
    r = rls_msg_encode(st, s->n_desc, hdr, n_hdr, &resp, &len);
    free(st);
    if (r < 0) {
        rls_stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    rls_stream_reply(s, resp, len);
}

/* Whether no rule but the default one decided @res (rls.unmatched, docs/rls.md
 * "Descriptors no rule matches"): then, as Envoy's own services do, the
 * descriptor is OK with no current_limit (zero-valued *st) unless
 * rls.unmatched = "rule".  A continue or canary rule that matched and allowed
 * does not make the default rule's denial the answer either: no rule of the
 * operator's limited the descriptor. */
static bool rls_unmatched(const struct rules *rs, const struct eval_result *res)
{
    struct rules_rule rule;

    return rules_get(rs, res->decider, &rule) >= 0 && rule.is_default;
}

/* The engine's answer for one descriptor (inside the RCU section of a->rs). */
static void rls_answer(void *arg, const struct engine_answer *a)
{
    struct rls_desc *d = arg;
    struct rls_stream *s = d->s;
    struct rls_status *st = &d->st;
    const struct eval_result *res = a->res;
    struct rules_rule rule;
    int r = a->r;

    if (r < 0) {
        if (!s->err) {
            s->err = r == -ENOSPC || r == -EDQUOT ? RLS_GRPC_UNAVAILABLE : RLS_GRPC_INTERNAL;
            s->err_msg = r == -ENOSPC || r == -EDQUOT ? "no counter for a privileged rule"
                                                      : "internal error";
        }
    } else if (!s->rc || s->rc->w->s->o.rls_unmatched_rule || !rls_unmatched(a->rs, res)) {
        st->over = !res->allowed;
        st->remaining = res->credit > UINT32_MAX ? UINT32_MAX : (uint32_t)res->credit;
        st->reset_s = res->reset_s;
        if (rules_get(a->rs, res->limiter, &rule) >= 0) {
            bool bucket = rule.algo == RULES_ALGO_TOKEN_BUCKET || rule.algo == RULES_ALGO_GCRA;
            int64_t ms = bucket ? rule.refill_ms : rule.reset_ms;

            /* A unit only for whole seconds (a period of 1500 ms has none). */
            snprintf(st->name, sizeof(st->name), "%s", rule.id_str);
            st->has_limit = rls_msg_unit(bucket ? rule.refill_amount : rule.credit_limit,
                                         ms % 1000 == 0 ? ms / 1000 : 0,
                                         &st->requests_per_unit, &st->unit);
            /* A calendar window is Envoy's unit itself (its reset_seconds is the
             * unit's longest period); RateLimitUnit has no week. */
            if (rule.calendar)
                st->has_limit = rule.calendar != CALENDAR_WEEK &&
                                rls_msg_unit(rule.credit_limit, 3600, &st->requests_per_unit,
                                             &st->unit);
            if (rule.calendar && st->has_limit)
                st->unit = rule.calendar == CALENDAR_HOUR ? RLS_UNIT_HOUR :
                           rule.calendar == CALENDAR_DAY ? RLS_UNIT_DAY : RLS_UNIT_MONTH;
        }
    }
    if (--s->n_left == 0)
        stream_answer(s);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct rls_stream *s = arg;
    struct rls_conn *rc = s->rc;

    (void)fd;
    (void)what;
    rls_stream_fail(s, RLS_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
    if (rc)
        rls_settle(rc);
}

/* The request's descriptors as requests: every one must map before any is
 * charged.  NULL on success, else why the call is invalid. */
static const char *stream_check(const struct rls_msg *m, size_t n, struct proto_req *req)
{
    for (size_t i = 0; i < n; i++) {
        int r = rls_msg_request(m, i, req);

        if (r < 0)
            return r == -EINVAL ? "a descriptor entry may not be named domain"
                   : r == -E2BIG ? "a descriptor has more than 32 distinct keys"
                   : r == -ERANGE ? "hits_addend over 1000000000"
                   : "a descriptor is longer than a 4096-byte request";
    }
    return NULL;
}

/* Envoy's per-descriptor limit overrides are not honoured (docs/rls.md
 * "Limit overrides"): not in silence either. */
static void stream_log_overrides(const struct rls_msg *m, size_t n)
{
    static struct log_ratelimit rl;
    uint32_t per_unit;
    unsigned unit;

    for (size_t i = 0; i < n; i++) {
        if (rls_msg_override(m, i, &per_unit, &unit)) {
            log_ratelimited(&rl, LOG_WARNING, "rls: a descriptor's limit override (%u per "
                            "unit %u) is not honoured: divvy's rules decide (docs/rls.md "
                            "\"Limit overrides\")", per_unit, unit);
            return;
        }
    }
}

/* END_STREAM: the request is complete; check it and evaluate its descriptors. */
static void stream_request(struct rls_stream *s)
{
    struct rls_conn *rc = s->rc;
    struct worker *w = rc->w;
    struct engine_req rq = { .op = TABLE_TAKE, .privileged = rc->privileged, .uid = rc->uid,
                             .pid = rc->pid, .protocol = METRICS_PROTO_RLS };
    struct rls_msg *m = NULL;
    const uint8_t *msg;
    const char *why;
    size_t len;
    int r;

    s->receiving = false;
    if (!s->post || s->route == RLS_ROUTE_NONE) {
        rls_stream_fail(s, RLS_GRPC_UNIMPLEMENTED,
                        "only " RLS_PATH " and /grpc.health.v1.Health/Check are served");
        return;
    }
    if (!s->grpc_ct) {
        rls_stream_fail(s, RLS_GRPC_INVALID_ARGUMENT, "content-type must be application/grpc");
        return;
    }
    r = rls_msg_unframe(s->body, s->body_len, &msg, &len);
    if (r >= 0 && s->route != RLS_ROUTE_RLS) {
        rls_health_call(s, msg, len);
        stream_drop_body(s);
        return;
    }
    if (r >= 0)
        r = rls_msg_decode(msg, len, &m);
    stream_drop_body(s);
    if (r == -ENOTSUP) {
        rls_stream_fail(s, RLS_GRPC_UNIMPLEMENTED, "compressed messages are not supported");
        return;
    }
    if (r == -EMSGSIZE || r == -E2BIG) {
        rls_stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED, "request message too large");
        return;
    }
    if (r < 0) {
        rls_stream_fail(s, RLS_GRPC_INVALID_ARGUMENT,
                        r == -ENOMEM ? "out of memory"
                        : s->route == RLS_ROUTE_RLS ? "not a RateLimitRequest"
                                                    : "not one gRPC message");
        return;
    }
    s->n_desc = rls_msg_descriptors(m);
    why = stream_check(m, s->n_desc, &w->req);
    if (why) {
        rls_msg_free(m);
        rls_stream_fail(s, RLS_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    if (s->timeout_ms && clock_coarse_ms() >= s->start_ms + s->timeout_ms) {
        rls_msg_free(m);
        rls_stream_fail(s, RLS_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
        return;
    }
    /* Its answers are held until all are in: within the connection's bound. */
    if (!rls_input_ok(rc, s->n_desc * sizeof(*s->desc)) ||
        !(s->desc = calloc(s->n_desc, sizeof(*s->desc)))) {
        rls_msg_free(m);
        rls_stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED, RLS_NO_MEMORY);
        return;
    }
    stream_log_overrides(m, s->n_desc);
    stream_mem(s, sizeof(*s) + s->n_desc * sizeof(*s->desc));
    /* One more while submitting: a descriptor answered at once cannot end it. */
    s->n_left = s->n_desc + 1;
    for (size_t i = 0; i < s->n_desc; i++) {
        s->desc[i].s = s;
        rls_msg_request(m, i, &w->req);
        rq.kv = w->req.kv;
        rq.n_kv = w->req.n_kv;
        rq.n = w->req.amount;
        engine_submit(w, &rq, rls_answer, &s->desc[i], NULL);
    }
    rls_msg_free(m);
    if (--s->n_left == 0) {
        stream_answer(s);
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
    /* Refused before anything is kept for it: the peer may retry it later
     * (gRPC clients do so transparently). */
    if (!rls_input_ok(rc, RLS_STREAM_COST))
        return stream_submit_rst(rc, frame->hd.stream_id, NGHTTP2_REFUSED_STREAM) == 0
                   ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
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
    stream_mem(s, sizeof(*s));
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
        s->route = hdr_is(value, valuelen, RLS_PATH) ? RLS_ROUTE_RLS
                                                     : rls_health_route(value, valuelen);
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
    size_t cap;
    uint8_t *grown;

    (void)flags;
    if (!s || s->answered || !s->receiving)
        return 0;
    if (s->body_len + len > RLS_GRPC_PREFIX + RLS_MSG_MAX) {
        rls_stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED, "request message too large");
        return 0;
    }
    if (s->body_len + len > s->body_cap) {
        cap = s->body_cap ? s->body_cap : 1024;
        while (cap < s->body_len + len)
            cap *= 2;
        if (cap > RLS_GRPC_PREFIX + RLS_MSG_MAX)
            cap = RLS_GRPC_PREFIX + RLS_MSG_MAX;
        /* What the connection's streams hold together, and what it may hold. */
        if (rc->body_bytes - s->body_cap + cap > RLS_CONN_BODY_MAX) {
            rls_stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED,
                        "the connection's calls hold 256 KiB of request bodies");
            return 0;
        }
        if (!rls_input_ok(rc, cap - s->body_cap)) {
            rls_stream_fail(s, RLS_GRPC_RESOURCE_EXHAUSTED, RLS_NO_MEMORY);
            return 0;
        }
        grown = realloc(s->body, cap);
        if (!grown)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        rc->body_bytes += cap - s->body_cap;
        s->body = grown;
        s->body_cap = cap;
        rls_charge(rc);
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
    if (s && s->receiving && !s->answered && s->rc)
        stream_request(s);
    return 0;
}

/* Our answer to a call the peer is still sending is out: reset the stream. */
static int on_frame_send(nghttp2_session *ses, const nghttp2_frame *frame, void *user)
{
    struct rls_stream *s;

    if (frame->hd.type != NGHTTP2_HEADERS || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    s = nghttp2_session_get_stream_user_data(ses, frame->hd.stream_id);
    if (!s || !s->receiving || !s->rc)
        return 0;
    return stream_submit_rst(user, frame->hd.stream_id, NGHTTP2_NO_ERROR) == 0
               ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_stream_close(nghttp2_session *ses, int32_t id, uint32_t code, void *user)
{
    struct rls_stream *s = nghttp2_session_get_stream_user_data(ses, id);

    (void)code;
    (void)user;
    if (s) {
        nghttp2_session_set_stream_user_data(ses, id, NULL);
        rls_stream_orphan(s);
    }
    return 0;
}

void rls_stream_callbacks(nghttp2_session_callbacks *cbs)
{
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
}
