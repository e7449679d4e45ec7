/* SPDX-License-Identifier: MIT */
/*
 * harness_h2: the RLS tests' raw HTTP/2 client (harness_h2.h).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness_h2.h"

ssize_t harness_h2_read_body(nghttp2_session *ses, int32_t id, uint8_t *buf, size_t len,
                             uint32_t *flags, nghttp2_data_source *src, void *user)
{
    struct harness_h2 *h = user;
    size_t n = h->body_len - h->body_off;

    (void)ses;
    (void)id;
    (void)src;
    if (h->hold)
        return NGHTTP2_ERR_DEFERRED;
    if (n > len)
        n = len;
    if (n)
        memcpy(buf, h->body + h->body_off, n);
    h->body_off += n;
    if (h->body_off == h->body_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int h2_on_header(nghttp2_session *ses, const nghttp2_frame *frame, const uint8_t *name,
                        size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                        void *user)
{
    struct harness_h2 *h = user;
    char v[16];

    (void)ses;
    (void)flags;
    if (frame->hd.stream_id == h->id && namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        snprintf(v, sizeof(v), "%.*s", (int)valuelen, (const char *)value);
        h->grpc_status = atoi(v);
    }
    return 0;
}

static int h2_on_data(nghttp2_session *ses, uint8_t flags, int32_t id, const uint8_t *data,
                      size_t len, void *user)
{
    struct harness_h2 *h = user;
    size_t room = sizeof(h->data) - h->data_len;

    (void)ses;
    (void)flags;
    if (id == h->id) {
        memcpy(h->data + h->data_len, data, len < room ? len : room);
        h->data_len += len < room ? len : room;
    }
    return 0;
}

static int h2_on_frame(nghttp2_session *ses, const nghttp2_frame *frame, void *user)
{
    struct harness_h2 *h = user;

    (void)ses;
    if (frame->hd.type == NGHTTP2_PING && (frame->hd.flags & NGHTTP2_FLAG_ACK))
        h->ping_ack = true;
    if (frame->hd.type == NGHTTP2_GOAWAY)
        h->goaway = true;
    return 0;
}

static int h2_on_close(nghttp2_session *ses, int32_t id, uint32_t code, void *user)
{
    struct harness_h2 *h = user;

    (void)ses;
    (void)code;
    if (id == h->id)
        h->closed = true;
    return 0;
}

int harness_raw_send(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;

    while (len > 0) {
        struct pollfd pfd = { .fd = fd, .events = POLLOUT };
        ssize_t n;

        if (poll(&pfd, 1, HARNESS_TIMEOUT_MS) <= 0)
            return -ETIMEDOUT;
        n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        }
    }
    return 0;
}

void harness_h2_open(struct harness_h2 *h, int port)
{
    nghttp2_session_callbacks *cbs;

    memset(h, 0, sizeof(*h));
    h->grpc_status = -1;
    CHECK(harness_connect_tcp(port, &h->c));
    h->fd = h->c->fd;
    assert_int_equal(nghttp2_session_callbacks_new(&cbs), 0);
    nghttp2_session_callbacks_set_on_header_callback(cbs, h2_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, h2_on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, h2_on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, h2_on_close);
    assert_int_equal(nghttp2_session_client_new(&h->ses, cbs, h), 0);
    nghttp2_session_callbacks_del(cbs);
    assert_int_equal(nghttp2_submit_settings(h->ses, 0, NULL, 0), 0);
}

void harness_h2_request(struct harness_h2 *h, const char *path, const char *ctype,
                        const uint8_t *body, size_t len)
{
    nghttp2_data_provider prd = { .read_callback = harness_h2_read_body };
    nghttp2_nv nv[] = {
        { (uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0 },
        { (uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0 },
        { (uint8_t *)":authority", (uint8_t *)"divvy", 10, 5, 0 },
        { (uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0 },
        { (uint8_t *)"content-type", (uint8_t *)ctype, 12, strlen(ctype), 0 },
        { (uint8_t *)"te", (uint8_t *)"trailers", 2, 8, 0 },
    };

    h->body = body;
    h->body_len = len;
    h->body_off = 0;
    h->id = nghttp2_submit_request(h->ses, NULL, nv, 6, &prd, NULL);
    assert_true(h->id > 0);
}

void harness_h2_release(struct harness_h2 *h)
{
    h->hold = false;
    assert_int_equal(nghttp2_session_resume_data(h->ses, h->id), 0);
}

bool harness_h2_pump(struct harness_h2 *h, const bool *until)
{
    uint64_t end = harness_now_ms() + HARNESS_TIMEOUT_MS;

    while (!*until && harness_now_ms() < end) {
        const uint8_t *data;
        uint8_t buf[16384];
        struct pollfd p = { .fd = h->fd, .events = POLLIN };
        ssize_t n;

        while ((n = nghttp2_session_mem_send(h->ses, &data)) > 0)
            CHECK(harness_raw_send(h->fd, data, (size_t)n));
        if (poll(&p, 1, 100) <= 0)
            continue;
        n = read(h->fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        assert_true(nghttp2_session_mem_recv(h->ses, buf, (size_t)n) >= 0);
    }
    return *until;
}

void harness_h2_close(struct harness_h2 *h)
{
    nghttp2_session_del(h->ses);
    h->ses = NULL;
    harness_close(h->c);
    h->c = NULL;
}

int harness_h2_call(int port, const char *path, const char *ctype, const uint8_t *body,
                    size_t len)
{
    struct harness_h2 h;

    harness_h2_open(&h, port);
    harness_h2_request(&h, path, ctype, body, len);
    harness_h2_pump(&h, &h.closed);
    harness_h2_close(&h);
    return h.grpc_status;
}
