/* SPDX-License-Identifier: MIT */
/*
 * divvy: the public API of libdivvy (divvy.h, docs/client.md), the top of
 * libclient's layers (divvy -> memo -> fast -> handoff -> conn -> wire ->
 * err).  Checks the arguments, normalises each request once, lets the memo
 * (client_memo.c) or the fast path (client_fast.c) decide it when they may,
 * teaches the memo what the fast path decided, and sends the request over
 * the socket otherwise (client_conn.c), so every path sees exactly the same
 * request.  Owns the handle (divvy_private.h): its connection, fast path,
 * memo and the error message of the last call.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "clock.h"
#include "divvy_private.h"

/* Environment overrides are ignored in set-user-ID programs (secure_getenv):
 * a user must not point su's PAM module at a daemon of their own. */
static const char *env(const char *name)
{
    const char *v = secure_getenv(name);

    return v && *v ? v : NULL;
}

int divvy_open(const char *address, unsigned flags, struct divvy **ret)
{
    struct divvy *h = NULL;
    const char *path;
    int r;

    if (!ret || flags > DIVVY_FAST_ONLY)
        return -EINVAL;
    if (!address)
        address = env("DIVVY_ADDRESS");
    if (!address)
        address = DIVVY_DEFAULT_ADDRESS;
    h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->conn.fd = -1;
    h->conn.connect_ms = CLIENT_TIMEOUT_DEFAULT;
    h->conn.request_ms = CLIENT_TIMEOUT_DEFAULT;
    h->conn.err = &h->err;
    h->fast.conn = &h->conn;
    h->fast.err = &h->err;
    h->mode = flags;
    r = client_addr_parse(address, &h->conn.addr);
    if (r < 0)
        goto out;
    path = env("DIVVY_PATH");
    if (path) {
        if (strcmp(path, "socket") == 0)
            h->mode = DIVVY_SOCKET_ONLY;
        else if (strcmp(path, "fast") == 0)
            h->mode = DIVVY_FAST_ONLY;
        else if (strcmp(path, "auto") == 0)
            h->mode = DIVVY_AUTO;
        else {
            r = -EINVAL;
            goto out;
        }
    }
    /* The fast path's memfds come only over a Unix socket (FAST). */
    if (h->conn.addr.kind != CLIENT_ADDR_UNIX && h->mode == DIVVY_AUTO)
        h->mode = DIVVY_SOCKET_ONLY;
    h->fast.auto_attach = h->mode == DIVVY_AUTO;
    /* Sampled once: the hit path makes no system call (docs/client.md). */
    h->fast.privileged = h->conn.addr.kind == CLIENT_ADDR_UNIX && geteuid() == 0;
    if (h->mode != DIVVY_SOCKET_ONLY) {
        r = client_fast_open(&h->fast);
        if (r < 0 && h->mode == DIVVY_FAST_ONLY)
            goto out;
        /* AUTO: the socket answers meanwhile; retry the table later. */
        h->fast.attach_at_ms = clock_coarse_ms() + CLIENT_REATTACH_MS;
        client_err_clear(&h->err);
        r = 0;
    }
    *ret = h;
    h = NULL;
out:
    divvy_close(h);
    return r;
}

void divvy_close(struct divvy *h)
{
    if (!h)
        return;
    client_memo_free(h->memo);
    client_fast_close(&h->fast);
    client_conn_free(&h->conn);
    free(h->batch_sock);
    free(h);
}

int divvy_set_timeouts(struct divvy *h, int connect_ms, int request_ms)
{
    if (!h)
        return -EINVAL;
    client_err_clear(&h->err);
    if (connect_ms > 0)
        h->conn.connect_ms = connect_ms;
    if (request_ms > 0)
        h->conn.request_ms = request_ms;
    return 0;
}

const char *divvy_errmsg(const struct divvy *h)
{
    return h ? h->err.msg : "no handle (NULL)";
}

/* ---- one request ----------------------------------------------------------- */

static int prepare_err(struct divvy *h, int r, size_t index, bool batch)
{
    const char *what = r == -E2BIG    ? "more than 32 distinct keys"
                       : r == -EMSGSIZE ? "request longer than a protocol line (4096 bytes)"
                                        : "invalid key/value: keys must be non-empty; no '\"', "
                                          "'\\n' or '\\r' in keys or values; no NULL pointers";

    if (batch)
        return client_err(&h->err, r, "request %zu: %s", index, what);
    return client_err(&h->err, r, "%s", what);
}

/*
 * Validates one request as sent on the wire (@verb, @amount: 0 when the verb
 * takes no count) and normalises it into @req.
 */
static int prepare(struct divvy *h, const struct divvy_kv *kv, size_t n_kv, const char *verb,
                   uint64_t amount, struct divvy_result *res, struct client_req *req,
                   size_t index, bool batch)
{
    int r;

    if (!res || res->size < CLIENT_RESULT_MIN_SIZE)
        return batch ? client_err(&h->err, -EINVAL, "results[%zu].size is not set", index)
                     : client_err(&h->err, -EINVAL,
                                  "res->size must be sizeof(struct divvy_result)");
    if (amount > (strcmp(verb, "DEBIT") == 0 ? PROTO_DEBIT_MAX : PROTO_TAKE_MAX))
        return client_err(&h->err, -EINVAL, "amount %llu is out of range 1..%llu",
                          (unsigned long long)amount,
                          strcmp(verb, "DEBIT") == 0 ? PROTO_DEBIT_MAX : PROTO_TAKE_MAX);
    r = client_req_prepare(kv, n_kv, req);
    if (r < 0)
        return prepare_err(h, r, index, batch);
    if (client_req_line_len(req, verb, amount) > PROTO_LINE_MAX)
        return prepare_err(h, -EMSGSIZE, index, batch);
    return 0;
}

/* Appends one request line to h->wbuf. */
static int append_line(struct divvy *h, const struct client_req *req, const char *verb,
                       uint64_t amount)
{
    size_t len = client_req_line_len(req, verb, amount);
    int n, r;

    r = client_conn_reserve(&h->conn, len + 1);
    if (r < 0)
        return client_err(&h->err, r, "out of memory");
    n = client_req_format(req, verb, amount, h->conn.wbuf + h->conn.wlen,
                          h->conn.wcap - h->conn.wlen);
    if (n < 0)
        return client_err(&h->err, n, "cannot format the request");
    h->conn.wlen += (size_t)n;
    return 0;
}

/* Parses the reply line at rbuf[*off..] into @res and moves *off past it. */
static int next_reply(struct divvy *h, size_t *off, struct divvy_result *res, char *errbuf,
                      size_t errsize)
{
    struct client_conn *c = &h->conn;
    char *line = c->rbuf + *off, *nl = memchr(line, '\n', c->rlen - *off);
    int r;

    if (!nl) {
        snprintf(errbuf, errsize, "divvyd's reply is incomplete");
        return -EPROTO;
    }
    *off = (size_t)(nl - c->rbuf) + 1;
    r = client_reply_parse(line, (size_t)(nl - line), res, errbuf, errsize);
    if (r == -EBUSY || r == -EPROTO)
        client_conn_close(c);           /* busy: divvyd closes; garbage: state unknown */
    return r;
}

static int request(struct divvy *h, const char *verb, enum table_op op, uint64_t amount,
                   const struct divvy_kv *kv, size_t n_kv, struct divvy_result *res)
{
    /* On the wire: HIT is sent as "TAKE 1" so the reply names the rule. */
    uint64_t wire_amount = op == TABLE_TAKE || op == TABLE_DEBIT ? amount : 0;
    uint32_t path[RULES_MATCH_MAX];
    struct client_req req;
    const char *why = NULL;
    size_t off = 0, n_path = 0;
    int r;

    if (!h)
        return -EINVAL;
    client_err_clear(&h->err);
    if (op == TABLE_TAKE && amount == 0)
        return client_err(&h->err, -EINVAL, "amount 0 is out of range 1..%llu", PROTO_TAKE_MAX);
    if (op == TABLE_DEBIT && (amount == 0 || amount > PROTO_DEBIT_MAX))
        return client_err(&h->err, -EINVAL, "amount %llu is out of range 1..%llu",
                          (unsigned long long)amount, PROTO_DEBIT_MAX);
    /* A shape seen before skips normalising and matching (client_memo.c). */
    if (h->mode != DIVVY_SOCKET_ONLY && op != TABLE_RESET && res &&
        res->size >= CLIENT_RESULT_MIN_SIZE &&
        amount <= (op == TABLE_DEBIT ? PROTO_DEBIT_MAX : PROTO_TAKE_MAX) &&
        client_memo_decide(h->memo, &h->fast, kv, n_kv, verb, wire_amount, op, amount, res) > 0)
        return 0;
    r = prepare(h, kv, n_kv, verb, wire_amount, res, &req, 0, false);
    if (r < 0)
        return r;
    if (h->mode != DIVVY_SOCKET_ONLY && op != TABLE_RESET) {
        r = client_fast_decide(&h->fast, &req, op, amount, res, path, &n_path, &why);
        if (r > 0)
            client_memo_learn(&h->memo, &h->fast, kv, n_kv, path, n_path);
        if (r != 0)
            return r > 0 ? 0 : r;
        if (h->mode == DIVVY_FAST_ONLY)
            return client_err(&h->err, -ENOTSUP, "DIVVY_FAST_ONLY: %s", why);
        client_err_clear(&h->err);
    }
    /* A call the fast path did not decide: its reports' age is checked here too. */
    client_fast_report_tick(&h->fast);
    h->conn.wlen = 0;
    r = append_line(h, &req, verb, wire_amount);
    if (r < 0)
        return r;
    r = client_conn_exchange(&h->conn, 1, CLIENT_EXPECT_LINES);
    if (r < 0)
        return r;
    return next_reply(h, &off, res, h->err.msg, sizeof(h->err.msg));
}

int divvy_hit(struct divvy *h, const struct divvy_kv *kv, size_t n_kv, struct divvy_result *res)
{
    return request(h, "TAKE", TABLE_TAKE, 1, kv, n_kv, res);
}

int divvy_take(struct divvy *h, uint64_t amount, const struct divvy_kv *kv, size_t n_kv,
               struct divvy_result *res)
{
    return request(h, "TAKE", TABLE_TAKE, amount, kv, n_kv, res);
}

int divvy_debit(struct divvy *h, uint64_t amount, const struct divvy_kv *kv, size_t n_kv,
                struct divvy_result *res)
{
    return request(h, "DEBIT", TABLE_DEBIT, amount, kv, n_kv, res);
}

int divvy_peek(struct divvy *h, const struct divvy_kv *kv, size_t n_kv, struct divvy_result *res)
{
    return request(h, "PEEK", TABLE_PEEK, 1, kv, n_kv, res);
}

int divvy_reset(struct divvy *h, const struct divvy_kv *kv, size_t n_kv, struct divvy_result *res)
{
    return request(h, "RESET", TABLE_RESET, 1, kv, n_kv, res);
}

int divvy_hitv(struct divvy *h, struct divvy_result *res, ...)
{
    struct divvy_kv kv[PROTO_KV_MAX];
    size_t n = 0;
    const char *key;
    va_list ap;
    int r = 0;

    if (!h)
        return -EINVAL;
    va_start(ap, res);
    while ((key = va_arg(ap, const char *)) != NULL) {
        const char *value = va_arg(ap, const char *);

        if (!value) {
            r = client_err(&h->err, -EINVAL, "key '%s' has no value (NULL)", key);
            break;
        }
        if (n == PROTO_KV_MAX) {
            r = client_err(&h->err, -E2BIG, "more than %d key/value pairs", PROTO_KV_MAX);
            break;
        }
        kv[n++] = (struct divvy_kv){ .key = key, .value = value };
    }
    va_end(ap);
    if (r < 0)
        return r;
    return divvy_hit(h, kv, n, res);
}

/* ---- batches ----------------------------------------------------------------- */

int divvy_hit_many(struct divvy *h, const struct divvy_request *reqs, size_t n,
                   struct divvy_result *results)
{
    uint32_t path[RULES_MATCH_MAX];
    struct client_req req;
    size_t n_sock = 0, off = 0, n_path = 0;
    char errbuf[CLIENT_ERR_MAX];
    int r, first = 0;

    if (!h)
        return -EINVAL;
    client_err_clear(&h->err);
    if (n == 0)
        return 0;
    if (!reqs || !results || n > INT32_MAX)
        return client_err(&h->err, -EINVAL, "reqs and results must hold n requests");
    /*
     * Every request is checked before any is decided: all or nothing.  A
     * shape the memo knows is checked there, without normalising, and the
     * first CLIENT_PREFETCH_FIRST requests' counters start loading (their
     * cache and TLB misses overlap); later ones are prefetched
     * CLIENT_PREFETCH_AHEAD requests before they are decided.
     */
    for (size_t i = 0; i < n; i++) {
        uint64_t amount = reqs[i].amount ? reqs[i].amount : 1;

        if (results[i].size >= CLIENT_RESULT_MIN_SIZE && amount <= PROTO_TAKE_MAX &&
            client_memo_check(h->memo, &h->fast, reqs[i].kv, reqs[i].n_kv, "TAKE", amount,
                              i < CLIENT_PREFETCH_FIRST))
            continue;
        r = prepare(h, reqs[i].kv, reqs[i].n_kv, "TAKE", amount, &results[i], &req, i, true);
        if (r < 0)
            return r;
    }
    if (h->batch_cap < n) {
        uint8_t *b = realloc(h->batch_sock, n);

        if (!b)
            return client_err(&h->err, -ENOMEM, "out of memory");
        h->batch_sock = b;
        h->batch_cap = n;
    }
    h->conn.wlen = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t amount = reqs[i].amount ? reqs[i].amount : 1;
        size_t ahead = i + CLIENT_PREFETCH_AHEAD;
        const char *why = NULL;

        h->batch_sock[i] = 0;
        if (h->mode != DIVVY_SOCKET_ONLY && ahead >= CLIENT_PREFETCH_FIRST && ahead < n)
            client_memo_prefetch(h->memo, &h->fast, reqs[ahead].kv, reqs[ahead].n_kv);
        /* Checked above: a shape seen before is decided without normalising. */
        if (h->mode != DIVVY_SOCKET_ONLY &&
            client_memo_decide(h->memo, &h->fast, reqs[i].kv, reqs[i].n_kv, "TAKE", amount,
                               TABLE_TAKE, amount, &results[i]) > 0)
            continue;
        client_req_prepare(reqs[i].kv, reqs[i].n_kv, &req);
        if (h->mode != DIVVY_SOCKET_ONLY) {
            r = client_fast_decide(&h->fast, &req, TABLE_TAKE, amount, &results[i], path,
                                   &n_path, &why);
            if (r < 0)
                return r;
            if (r > 0)
                client_memo_learn(&h->memo, &h->fast, reqs[i].kv, reqs[i].n_kv, path, n_path);
            if (r > 0)
                continue;
            if (h->mode == DIVVY_FAST_ONLY) {
                if (!first)
                    first = client_err(&h->err, -ENOTSUP, "request %zu: DIVVY_FAST_ONLY: %s", i,
                                       why);
                results[i].allowed = 0;
                results[i].credit = results[i].reset_seconds = 0;
                results[i].rule[0] = '\0';
                results[i].fast_path = 0;
                continue;
            }
        }
        r = append_line(h, &req, "TAKE", amount);
        if (r < 0)
            return r;
        h->batch_sock[i] = 1;
        n_sock++;
    }
    if (!first)
        client_err_clear(&h->err);
    client_fast_report_tick(&h->fast);
    if (n_sock == 0)
        return first ? first : (int)n;
    r = client_conn_exchange(&h->conn, n_sock, CLIENT_EXPECT_LINES);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        if (!h->batch_sock[i])
            continue;
        r = next_reply(h, &off, &results[i], errbuf, sizeof(errbuf));
        if (r < 0) {
            results[i].allowed = 0;
            results[i].credit = results[i].reset_seconds = 0;
            results[i].rule[0] = '\0';
            results[i].fast_path = 0;
            if (!first)
                first = client_err(&h->err, r, "request %zu: %s", i, errbuf);
            if (r == -EPROTO || h->conn.fd < 0)
                break;                  /* the rest of the stream cannot be trusted */
        }
    }
    return first ? first : (int)n;
}

/* ---- raw commands ------------------------------------------------------------ */

void divvy_lines_free(char **lines, size_t n)
{
    if (!lines)
        return;
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
}

int divvy_command(struct divvy *h, const char *line, char ***ret_lines, size_t *ret_n)
{
    struct client_conn *c;
    char **lines = NULL;
    size_t len, n = 0, off = 0;
    int r;

    if (!h)
        return -EINVAL;
    c = &h->conn;
    client_err_clear(&h->err);
    if (!line || !ret_lines || !ret_n)
        return client_err(&h->err, -EINVAL, "line, ret_lines and ret_n must not be NULL");
    len = strlen(line);
    if (strchr(line, '\n') || len == 0 || strcmp(line, "\r") == 0)
        return client_err(&h->err, -EINVAL, "a command is one non-empty line without '\\n'");
    if (len + 1 > PROTO_LINE_MAX)
        return client_err(&h->err, -EMSGSIZE, "command longer than a protocol line (4096 bytes)");
    c->wlen = 0;
    r = client_conn_reserve(c, len + 1);
    if (r < 0)
        return client_err(&h->err, r, "out of memory");
    memcpy(c->wbuf, line, len);
    c->wbuf[len] = '\n';
    c->wlen = len + 1;
    r = client_conn_exchange(c, 1, CLIENT_EXPECT_COMMAND);
    if (r < 0)
        return r;
    if (!((c->rlen >= 3 && memcmp(c->rbuf, "OK\n", 3) == 0) ||
          (c->rlen >= 3 && memcmp(c->rbuf, "OK ", 3) == 0) ||
          (c->rlen >= 4 && memcmp(c->rbuf, "ERR ", 4) == 0))) {
        client_conn_close(c);
        return client_err(&h->err, -EPROTO, "divvyd sent an unexpected reply");
    }
    for (size_t i = 0; i < c->rlen; i++)
        n += c->rbuf[i] == '\n';
    lines = calloc(n, sizeof(*lines));
    if (!lines)
        return client_err(&h->err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char *nl = memchr(c->rbuf + off, '\n', c->rlen - off);

        lines[i] = strndup(c->rbuf + off, (size_t)(nl - (c->rbuf + off)));
        if (!lines[i]) {
            divvy_lines_free(lines, i);
            return client_err(&h->err, -ENOMEM, "out of memory");
        }
        off = (size_t)(nl - c->rbuf) + 1;
    }
    /* divvyd closes after these; so do we, instead of finding out next call. */
    if (strncasecmp(line, "QUIT", 4) == 0 && (line[4] == '\0' || strchr(" \t\r", line[4])))
        client_conn_close(c);
    if (strncmp(lines[0], "ERR busy", 8) == 0)
        client_conn_close(c);
    *ret_lines = lines;
    *ret_n = n;
    return 0;
}
