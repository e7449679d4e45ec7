/* SPDX-License-Identifier: MIT */
/*
 * harness_h2: a raw HTTP/2 client (nghttp2, in-process) for the RLS tests
 * (harness_h2.c), for what grpc-js never sends: any path, content type or
 * body; a call whose message is held back while the test does something
 * else (a PING acknowledged after its HEADERS proves divvyd took them);
 * the frames divvyd sends (GOAWAY).  Main thread only.
 */
#ifndef DIVVY_HARNESS_H2_H
#define DIVVY_HARNESS_H2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <nghttp2/nghttp2.h>

#include "harness.h"

struct harness_h2 {
    struct harness_conn *c;
    int fd;
    nghttp2_session *ses;
    int32_t id;                 /* the call's stream */
    const uint8_t *body;        /* its request body */
    size_t body_len, body_off;
    bool hold;                  /* the body waits for harness_h2_release() */
    int grpc_status;            /* -1: none seen */
    bool closed;                /* the call's stream is closed */
    bool ping_ack, goaway;      /* frames seen */
    uint8_t data[256];          /* the response's DATA (its first 256 bytes) */
    size_t data_len;
};

/* nghttp2's data source for @h's body (user data: the struct harness_h2). */
ssize_t harness_h2_read_body(nghttp2_session *ses, int32_t id, uint8_t *buf, size_t len,
                             uint32_t *flags, nghttp2_data_source *src, void *user);

/* Writes all of @data, reading nothing: -ETIMEDOUT when the peer stops
 * taking it for HARNESS_TIMEOUT_MS. */
int harness_raw_send(int fd, const void *data, size_t len);

/* Connects @h to 127.0.0.1:@port, a client session with its SETTINGS. */
void harness_h2_open(struct harness_h2 *h, int port);

/* Starts the call: POST @path, content-type @ctype, body @body (@len bytes,
 * kept by the caller), held back while h->hold. */
void harness_h2_request(struct harness_h2 *h, const char *path, const char *ctype,
                        const uint8_t *body, size_t len);

/* Lets a held body go. */
void harness_h2_release(struct harness_h2 *h);

/* Writes what the session has and reads until *@until, divvyd closes, or
 * HARNESS_TIMEOUT_MS; returns *@until. */
bool harness_h2_pump(struct harness_h2 *h, const bool *until);

void harness_h2_close(struct harness_h2 *h);

/* One call of @path with @ctype and body @body over TCP @port: its
 * grpc-status (-1: none). */
int harness_h2_call(int port, const char *path, const char *ctype, const uint8_t *body,
                    size_t len);

#endif
