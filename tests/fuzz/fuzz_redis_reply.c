/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for divvyd's handling of Redis replies (daemon/store.c,
 * daemon/store_link*.c, daemon/store_script.c, docs/redis.md).  The Makefile
 * builds it with the daemon modules it calls (store*.c, sentinel*.c,
 * redis_async.c, addr.c, log.c) and common/, all instrumented; log_msg() and
 * log_ratelimited() are wrapped (-Wl,--wrap) to send divvyd's log lines to
 * a sink.
 *
 * Odd first byte: the rest of the input is RESP bytes; every reply tree
 * hiredis's own reader makes of them goes through the store's decoders (a
 * script's answer, store_script_decode(), for each script, DEL's and
 * SCAN's), which must agree with a reference decoder written here, and each
 * decoded answer goes through what divvyd does with it (docs/redis.md
 * "Scripts": the verdict, the lease grant applied to a scratch counter
 * table, then a lease take from it).
 *
 * Even first byte: a fake Redis.  A real store_conn connects over a Unix
 * socket to this process, which answers every command it receives (the
 * handshake's AUTH, SELECT and SCRIPT LOADs, then EVALSHA and DEL) with a
 * reply decoded from the input: integers, arrays nested three deep, bulk
 * strings, nils, statuses, errors (NOSCRIPT among them), a protocol error,
 * a half-sent reply, none at all (the request's deadline fires) or a
 * hang-up.  Every
 * request store_verdict() ... store_del() accepted must get its callback
 * exactly once, a non-NULL answer must be what the reference decoder makes
 * of the integers that were sent, and store_conn_free() must leave nothing
 * behind (LeakSanitizer).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "eval.h"
#include "fuzz.h"
#include "proto.h"
#include "table.h"

#include "clock.h"
#include "daemon/log.h"
#include "daemon/store.h"

/* divvyd's log lines (a breaker trip per failing input) go to a sink: these
 * stand in for log.c's (-Wl,--wrap=log_msg,--wrap=log_ratelimited). */
static FILE *log_sink;

void __wrap_log_msg(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void __wrap_log_ratelimited(struct log_ratelimit *rl, int prio, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void log_sink_v(const char *fmt, va_list ap)
{
    if (!log_sink)
        return;
    fputs("divvyd: ", log_sink);
    vfprintf(log_sink, fmt, ap);
    fputc('\n', log_sink);
}

void __wrap_log_msg(int prio, const char *fmt, ...)
{
    va_list ap;

    (void)prio;
    va_start(ap, fmt);
    log_sink_v(fmt, ap);
    va_end(ap);
}

void __wrap_log_ratelimited(struct log_ratelimit *rl, int prio, const char *fmt, ...)
{
    va_list ap;

    (void)rl;
    (void)prio;
    va_start(ap, fmt);
    log_sink_v(fmt, ap);
    va_end(ap);
}

#define MAX_USER      4             /* requests per input */
#define MAX_ROUNDS    200
#define TIMEOUT_MS    10            /* the store's deadline: a reply withheld costs this */
#define SENT_MAX      8
#define INTS_MAX      (1 + 3 * STORE_ITEMS_MAX)   /* the longest answer: a full batch's */
#define KIND_DEL      STORE_N_SCRIPTS   /* a request's kind: a script, or DEL */

int LLVMFuzzerInitialize(int *argc, char ***argv);

static char dir[64], sock_path[128], table_path[128];
static int listen_fd = -1;
static struct event_base *base;
static struct table *scratch;

/* ---- decoding (odd inputs) ---------------------------------------------- */

static void check_tree(const redisReply *r, int depth)
{
    CHECK(depth < 64);
    switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        CHECK(r->str != NULL && r->str[r->len] == '\0');
        break;
    case REDIS_REPLY_ARRAY:
        CHECK(r->elements == 0 || r->element != NULL);
        for (size_t i = 0; i < r->elements; i++)
            check_tree(r->element[i], depth + 1);
        break;
    case REDIS_REPLY_INTEGER:
    case REDIS_REPLY_NIL:
        break;
    default:
        CHECK(!"hiredis made a reply of an unknown type");
    }
}

/* A reply as integers: a lone one (scalar) or a flat array of at most INTS_MAX. */
struct ints {
    bool ok;
    bool scalar;
    int64_t v[INTS_MAX];
    unsigned n;
};

static struct ints ints_of(const redisReply *r)
{
    struct ints out = { .ok = false };

    if (r->type == REDIS_REPLY_INTEGER) {
        out = (struct ints){ .ok = true, .scalar = true, .v = { r->integer }, .n = 1 };
        return out;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements > INTS_MAX)
        return out;
    for (size_t i = 0; i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return out;
        out.v[out.n++] = r->element[i]->integer;
    }
    out.ok = true;
    return out;
}

static uint64_t clamp0(int64_t v)
{
    return v < 0 ? 0 : (uint64_t)v;
}

/* docs/redis.md "Scripts": what a request of @kind accepts as its answer. */
static bool ref_decode(unsigned kind, const struct ints *in, struct store_reply *out)
{
    memset(out, 0, sizeof(*out));
    if (!in->ok)
        return false;
    if (kind == KIND_DEL) {
        if (!in->scalar || in->v[0] < 0)
            return false;
        out->kind = STORE_REPLY_DELETED;
        out->deleted = (uint64_t)in->v[0];
        return true;
    }
    if (kind == STORE_SCRIPT_ADHOC_TB) {
        if (!in->scalar || in->v[0] < 0)
            return false;
        out->kind = STORE_REPLY_TOKENS;
        out->tokens = in->v[0];
        return true;
    }
    if (in->scalar)
        return false;
    if (kind == STORE_SCRIPT_ADHOC_GCRA) {
        if (in->n != 5 || (in->v[0] != 0 && in->v[0] != 1) || in->v[1] < 1 || in->v[2] < 0)
            return false;
        out->kind = STORE_REPLY_GCRA;
        out->gcra = (struct store_gcra){ .limited = in->v[0] != 0, .limit = in->v[1],
                                         .remaining = in->v[2], .retry_after_ns = in->v[3],
                                         .reset_after_ns = in->v[4] };
        return true;
    }
    if (kind == STORE_SCRIPT_WINDOW_MANY || kind == STORE_SCRIPT_BUCKET_MANY ||
        kind == STORE_SCRIPT_SLIDING_MANY || kind == STORE_SCRIPT_GCRA_MANY) {
        /* {k, then k verdicts}; the verdicts are checked in verdicts_match(). */
        if (in->n < 4 || (in->n - 1) % 3 != 0 || in->v[0] != (int64_t)(in->n - 1) / 3)
            return false;
        out->kind = STORE_REPLY_VERDICTS;
        out->verdicts.n = (in->n - 1) / 3;
        return true;
    }
    if (kind == STORE_SCRIPT_LEASE) {
        if (in->n != 4 || in->v[0] < 0 || in->v[1] < 0 || in->v[2] < 0)
            return false;
        out->kind = STORE_REPLY_GRANT;
        out->grant = (struct store_grant){ .granted = (uint64_t)in->v[0],
                                           .remain = (uint64_t)in->v[1],
                                           .ttl_ms = (uint64_t)in->v[2],
                                           .created = in->v[3] != 0 };
        return true;
    }
    if (in->n != 3)
        return false;
    out->kind = STORE_REPLY_VERDICT;
    out->verdict = (struct store_verdict){ .allowed = in->v[0] != 0, .credit = clamp0(in->v[1]),
                                           .reset_ms = clamp0(in->v[2]) };
    return true;
}

static bool same_reply(const struct store_reply *a, const struct store_reply *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case STORE_REPLY_VERDICT:
        return a->verdict.allowed == b->verdict.allowed &&
               a->verdict.credit == b->verdict.credit &&
               a->verdict.reset_ms == b->verdict.reset_ms;
    case STORE_REPLY_GRANT:
        return a->grant.granted == b->grant.granted && a->grant.remain == b->grant.remain &&
               a->grant.ttl_ms == b->grant.ttl_ms && a->grant.created == b->grant.created;
    case STORE_REPLY_DELETED:
        return a->deleted == b->deleted;
    case STORE_REPLY_TOKENS:
        return a->tokens == b->tokens;
    case STORE_REPLY_GCRA:
        return a->gcra.limited == b->gcra.limited && a->gcra.limit == b->gcra.limit &&
               a->gcra.remaining == b->gcra.remaining &&
               a->gcra.retry_after_ns == b->gcra.retry_after_ns &&
               a->gcra.reset_after_ns == b->gcra.reset_after_ns;
    case STORE_REPLY_VERDICTS:
        return a->verdicts.n == b->verdicts.n;
    case STORE_REPLY_KEYS:
        break;
    }
    return false;
}

/* A batch's verdicts, read back with store_verdicts_get(), are those of @in. */
static bool verdicts_match(const struct store_reply *rep, const struct ints *in)
{
    for (size_t i = 0; i < rep->verdicts.n; i++) {
        struct store_verdict v;

        store_verdicts_get(&rep->verdicts, i, &v);
        if (v.allowed != (in->v[1 + 3 * i] != 0) || v.credit != clamp0(in->v[2 + 3 * i]) ||
            v.reset_ms != clamp0(in->v[3 + 3 * i]))
            return false;
    }
    return true;
}

/* What divvyd's srv.c does with a decoded answer (hit_verdict, lease_apply). */
static void consume(const struct store_reply *rep, uint64_t now)
{
    static const struct table_key key = { .rule_id = 42, .actor = "fuzz", .actor_len = 4 };
    const struct table_limits lim = { .algo = RULES_ALGO_WINDOW, .credit_limit = 1000,
                                      .reset_ms = 60000, .lease = true, .lease_max = 100 };
    struct table_lease_result lr;
    struct table_result res;
    char buf[PROTO_REPLY_MAX];
    int r;

    /* STEP_STRICT / STEP_ASK: allowed, credit, ttl. */
    if (rep->kind == STORE_REPLY_VERDICT) {
        const struct store_verdict *v = &rep->verdict;
        struct table_lease_grant g = { .remain = v->credit, .end_ms = now + v->reset_ms };

        CHECK(proto_fmt_ok(buf, sizeof(buf), v->allowed, v->credit,
                           eval_ms_to_s(v->reset_ms)) > 0);
        r = table_lease_grant(scratch, &key, &lim, &g, now);
        CHECK(r == 0 || r == -ENOSPC || r == -EDQUOT);
    }
    /* STEP_FETCH / refill: granted, remain, ttl, created. */
    if (rep->kind == STORE_REPLY_GRANT) {
        struct table_lease_grant g = {
            .granted = rep->grant.granted, .remain = rep->grant.remain,
            .end_ms = now + rep->grant.ttl_ms, .created = rep->grant.created, .fetch = true,
        };

        r = table_lease_grant(scratch, &key, &lim, &g, now);
        CHECK(r == 0 || r == -ENOSPC || r == -EDQUOT);
    }
    r = table_lease_take(scratch, &key, &lim, 1, true, now, &lr);
    CHECK(r == 0 || r == -ENOSPC || r == -EDQUOT);
    if (r == 0 && (lr.verdict == TABLE_LEASE_ALLOWED || lr.verdict == TABLE_LEASE_DENIED))
        CHECK(lr.credit <= 2 * TABLE_LEASE_MAX);
    /* Forget it: the next answer starts from an empty lease. */
    CHECK(table_hit(scratch, &key, &lim, TABLE_RESET, 1, now, &res) == 0);
}

/* SCAN's answer (store_scan()): [decimal cursor, [key strings]], else refused. */
static void check_scan(const redisReply *r)
{
    struct store_reply got;
    bool want = r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len > 0 &&
                r->element[1]->type == REDIS_REPLY_ARRAY;
    unsigned long long cursor = 0;

    for (size_t i = 0; want && i < r->element[0]->len; i++) {
        unsigned d = (unsigned)(r->element[0]->str[i] - '0');

        want = d <= 9 && cursor <= (ULLONG_MAX - d) / 10;
        cursor = cursor * 10 + d;
    }
    for (size_t i = 0; want && i < r->element[1]->elements; i++)
        want = r->element[1]->element[i]->type == REDIS_REPLY_STRING;
    CHECK((store_script_decode_scan(r, &got) == 0) == want);
    if (!want)
        return;
    CHECK(got.kind == STORE_REPLY_KEYS && got.keys.cursor == cursor &&
          got.keys.n == r->element[1]->elements);
    for (size_t i = 0; i < got.keys.n; i++) {
        const char *key;
        size_t len;

        store_keys_get(&got.keys, i, &key, &len);
        CHECK(len == r->element[1]->element[i]->len &&
              memcmp(key, r->element[1]->element[i]->str, len) == 0);
    }
}

/*
 * hiredis 0.14 allocates an array's element pointers as soon as it reads the
 * "*<count>" header (no maxelements until hiredis 1.0), so "*999999999"
 * alone asks for gigabytes and libFuzzer reports out-of-memory.  That is
 * hiredis trusting its server, as divvyd trusts its Redis; such inputs say
 * nothing about divvyd's decoder and are skipped.
 */
static bool huge_array(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        unsigned long long n = 0;
        size_t j = i + 1;

        if (data[i] != '*')
            continue;
        while (j < size && data[j] >= '0' && data[j] <= '9' && n <= 4096)
            n = n * 10 + (unsigned)(data[j++] - '0');
        if (n > 4096)
            return true;
    }
    return false;
}

static void run_decode(const uint8_t *data, size_t size)
{
    redisReader *rd;

    if (huge_array(data, size))
        return;
    rd = redisReaderCreate();
    uint64_t now = clock_now_ms();
    void *reply;

    CHECK(rd != NULL);
    CHECK(redisReaderFeed(rd, (const char *)data, size) == REDIS_OK);
    for (int i = 0; i < 64; i++) {
        struct ints in;

        if (redisReaderGetReply(rd, &reply) != REDIS_OK || !reply)
            break;
        check_tree(reply, 0);
        in = ints_of(reply);
        for (unsigned kind = 0; kind <= KIND_DEL; kind++) {
            struct store_reply got, want;
            bool ok = (kind == KIND_DEL ? store_script_decode_del(reply, &got)
                                        : store_script_decode((enum store_script)kind, reply,
                                                              &got)) == 0;

            CHECK(ok == ref_decode(kind, &in, &want));
            if (ok) {
                CHECK(same_reply(&got, &want));
                if (got.kind == STORE_REPLY_VERDICTS) {
                    CHECK(verdicts_match(&got, &in));
                    /* Each request of a batch gets its verdict as a plain answer. */
                    for (size_t k = 0; k < got.verdicts.n; k++) {
                        struct store_reply one = { .kind = STORE_REPLY_VERDICT };

                        store_verdicts_get(&got.verdicts, k, &one.verdict);
                        consume(&one, now);
                    }
                } else {
                    consume(&got, now);
                }
            }
        }
        check_scan(reply);
        freeReplyObject(reply);
    }
    redisReaderFree(rd);
}

/* ---- the fake Redis (even inputs) ----------------------------------------- */

struct pending {
    bool accepted, done, got;
    unsigned kind;                  /* enum store_script, or KIND_DEL */
    struct store_reply rep;
};

/* Integers the fake Redis sends. */
struct raw {
    int64_t v[INTS_MAX];
    unsigned n;
};

/* The reply last sent for a request's key: a script answer (an integer, or
 * an array of at most four integers) and its values, or something else. */
struct sent {
    bool ints;
    bool scalar;                    /* a lone integer, not an array */
    struct raw rep;
};

struct server {
    struct fz *f;
    int fd;
    redisReader *rd;
    struct pending pend[MAX_USER];
    struct sent sent[MAX_USER];
    bool stalled;                   /* a reply was withheld or cut: answer nothing more */
    bool hangup;                    /* ... or the connection is to be closed */
    char out[65536];
    size_t out_len;
};

static void on_done(void *arg, const struct store_reply *rep)
{
    struct pending *p = arg;

    CHECK(p->accepted && !p->done);
    p->done = true;
    if (rep) {
        CHECK(rep->kind == (p->kind == KIND_DEL ? STORE_REPLY_DELETED :
                            p->kind == STORE_SCRIPT_LEASE ? STORE_REPLY_GRANT :
                            STORE_REPLY_VERDICT));
        p->got = true;
        p->rep = *rep;
    }
}

static void out_put(struct server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_put(struct server *s, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(s->out + s->out_len, sizeof(s->out) - s->out_len, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof(s->out) - s->out_len)
        s->out_len += (size_t)n;
}

static void out_bytes(struct server *s, const void *p, size_t len)
{
    if (len < sizeof(s->out) - s->out_len) {
        memcpy(s->out + s->out_len, p, len);
        s->out_len += len;
    }
}

/* One reply from the input; *ints says whether it is a script answer and what. */
static void gen_reply(struct server *s, int depth, const struct raw *dflt,
                      struct sent *ints)
{
    struct fz *f = s->f;
    unsigned b = fz_empty(f) ? 0 : fz_u8(f);
    char str[64];
    size_t len;

    ints->ints = false;
    ints->scalar = false;
    switch (b % 8) {
    case 0:                             /* what a healthy Redis would say */
        if (dflt->n == 1) {
            out_put(s, ":%" PRId64 "\r\n", dflt->v[0]);
        } else {
            out_put(s, "*%u\r\n", dflt->n);
            for (unsigned i = 0; i < dflt->n; i++)
                out_put(s, ":%" PRId64 "\r\n", dflt->v[i]);
        }
        ints->ints = true;
        ints->scalar = dflt->n == 1;
        ints->rep = *dflt;
        break;
    case 1: {
        int64_t v = b & 0x80 ? (int64_t)fz_u64(f) : (int64_t)fz_u8(f) - 2;

        out_put(s, ":%" PRId64 "\r\n", v);
        ints->ints = true;
        ints->scalar = true;
        ints->rep = (struct raw){ .v = { v }, .n = 1 };
        break;
    }
    case 2: {
        unsigned n = fz_below(f, 7);
        struct raw rep = { .n = 0 };
        bool all = n <= INTS_MAX;

        out_put(s, "*%u\r\n", n);
        for (unsigned i = 0; i < n; i++) {
            struct sent e;

            if (depth < 3) {
                gen_reply(s, depth + 1, &(struct raw){ .v = { i }, .n = 1 }, &e);
            } else {
                out_put(s, ":%u\r\n", i);
                e = (struct sent){ .ints = true, .scalar = true, .rep = { .v = { i }, .n = 1 } };
            }
            /* Only a flat integer counts: an element that is itself an array does not. */
            if (!e.scalar)
                all = false;
            else if (i < INTS_MAX)
                rep.v[rep.n++] = e.rep.v[0];
        }
        ints->ints = all;
        ints->rep = rep;
        break;
    }
    case 3:
        len = fz_bytes(f, str, fz_below(f, sizeof(str)));
        out_put(s, "$%zu\r\n", len);
        out_bytes(s, str, len);
        out_put(s, "\r\n");
        break;
    case 4:
        out_put(s, b & 0x80 ? "*-1\r\n" : "$-1\r\n");
        break;
    case 5:
    case 6:
        len = fz_bytes(f, str, fz_below(f, sizeof(str)));
        for (size_t i = 0; i < len; i++) {
            if (str[i] == '\r' || str[i] == '\n')
                str[i] = ' ';
        }
        if (b % 8 == 5)
            out_put(s, "+");
        else if (b & 0x80)
            out_put(s, "-NOSCRIPT ");
        else
            out_put(s, "-ERR ");
        out_bytes(s, str, len);
        out_put(s, "\r\n");
        break;
    default:
        if (depth > 0) {
            out_put(s, "$-1\r\n");
            break;
        }
        s->stalled = true;
        if (b & 0x80) {
            /* A protocol error: hiredis drops the connection. */
            out_put(s, "!");
            len = fz_bytes(f, str, fz_below(f, 8));
            out_bytes(s, str, len);
            out_put(s, "\r\n");
        } else if (b & 0x40) {
            out_put(s, "*3\r\n:1\r\n");     /* cut short: the deadline fires */
        } else if (b & 0x20) {
            s->hangup = true;                   /* the server goes away */
        }
        break;
    }
}

/* An index from a key "k<i>" the harness used, or -1. */
static int key_index(const redisReply *arg)
{
    if (arg->type != REDIS_REPLY_STRING || arg->len != 2 || arg->str[0] != 'k' ||
        arg->str[1] < '0' || arg->str[1] >= '0' + MAX_USER)
        return -1;
    return arg->str[1] - '0';
}

static void answer(struct server *s, const redisReply *cmd)
{
    struct raw dflt = { .v = { 1 }, .n = 1 };
    struct sent sent;
    const char *verb;
    int idx = -1;

    CHECK(cmd->type == REDIS_REPLY_ARRAY && cmd->elements >= 1);
    for (size_t i = 0; i < cmd->elements; i++)
        CHECK(cmd->element[i]->type == REDIS_REPLY_STRING);
    verb = cmd->element[0]->str;
    if (s->stalled)
        return;
    if (strcmp(verb, "SCRIPT") == 0 && cmd->elements == 3) {
        /* A bulk SHA-1, unless the input says otherwise. */
        char sha[41];

        store_sha1_hex(cmd->element[2]->str, cmd->element[2]->len, sha);
        if (fz_empty(s->f) || fz_u8(s->f) < 192) {
            out_put(s, "$40\r\n%s\r\n", sha);
            return;
        }
    } else if (strcmp(verb, "EVALSHA") == 0 && cmd->elements >= 4) {
        idx = key_index(cmd->element[3]);
        dflt = strcmp(cmd->element[1]->str, store_script_sha(STORE_SCRIPT_LEASE)) == 0
                   ? (struct raw){ .v = { 10, 100, 60000, 1 }, .n = 4 }
                   : (struct raw){ .v = { 1, 5, 1000 }, .n = 3 };
    } else if (strcmp(verb, "DEL") == 0 && cmd->elements == 2) {
        idx = key_index(cmd->element[1]);
    } else if (strcmp(verb, "AUTH") == 0 || strcmp(verb, "SELECT") == 0) {
        if (fz_empty(s->f) || fz_u8(s->f) < 192) {
            out_put(s, "+OK\r\n");
            return;
        }
    } else {
        CHECK(!"the store sent a command it has no business sending");
    }
    gen_reply(s, 0, &dflt, &sent);
    if (idx >= 0)
        s->sent[idx] = sent;
}

/* Reads what the store sent, answers each whole command; false on EOF. */
static bool serve(struct server *s, bool *progress)
{
    char buf[16384];
    void *cmd;
    ssize_t n = read(s->fd, buf, sizeof(buf));

    if (n == 0)
        return false;
    if (n < 0)
        return errno == EAGAIN || errno == EINTR;
    *progress = true;
    CHECK(redisReaderFeed(s->rd, buf, (size_t)n) == REDIS_OK);
    while (redisReaderGetReply(s->rd, &cmd) == REDIS_OK && cmd) {
        answer(s, cmd);
        freeReplyObject(cmd);
    }
    if (s->out_len) {
        size_t off = 0;

        while (off < s->out_len) {
            ssize_t w = send(s->fd, s->out + off, s->out_len - off, MSG_NOSIGNAL);

            if (w < 0 && errno == EAGAIN) {
                struct pollfd p = { .fd = s->fd, .events = POLLOUT };

                /* The store reads while its loop runs: let it. */
                event_base_loop(base, EVLOOP_NONBLOCK);
                poll(&p, 1, 10);
                continue;
            }
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        s->out_len = 0;
    }
    if (s->hangup)
        shutdown(s->fd, SHUT_RDWR);
    return true;
}

static void run_server(struct fz *f)
{
    static struct server s;
    struct store_opts o = { .unix_socket = sock_path, .timeout_ms = TIMEOUT_MS, .prefix = "" };
    unsigned flags = fz_u8(f), n_user = 1 + fz_below(f, MAX_USER);
    struct store *st = NULL;
    struct store_conn *sc = NULL;
    uint64_t a[STORE_SCRIPT_ARGV_MAX];

    memset(&s, 0, sizeof(s));
    s.f = f;
    s.fd = -1;
    if (flags & 1)
        o.password = "secret";
    if (flags & 2)
        o.username = "divvy";
    if (flags & 4)
        o.db = 3;
    CHECK(store_new(&o, &st) == 0);
    store_want(st);
    CHECK(store_conn_new(st, base, &sc) == 0);
    if (!store_conn_active(sc))
        goto out;               /* could not even start connecting */
    s.fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    CHECK(s.fd >= 0);
    s.rd = redisReaderCreate();
    CHECK(s.rd != NULL);

    for (unsigned i = 0; i < n_user; i++) {
        unsigned what = fz_u8(f), n_args = fz_below(f, STORE_SCRIPT_ARGV_MAX + 1);
        char key[3] = { 'k', (char)('0' + i), '\0' };
        uint64_t deadline = store_deadline(st, clock_now_ms());
        enum store_op op = what & 0x80 ? STORE_PEEK : STORE_TAKE;
        void *p = &s.pend[i];
        int r;

        memset(a, 0, sizeof(a));
        for (unsigned k = 0; k < n_args; k++)
            a[k] = fz_below(f, 1000);
        s.pend[i].accepted = true;
        s.pend[i].kind = what % 5 == 4 ? KIND_DEL : what % 4;
        switch (s.pend[i].kind) {
        case KIND_DEL:
            r = store_del(sc, key, 2, deadline, on_done, p);
            break;
        case STORE_SCRIPT_WINDOW: {
            struct store_verdict_args va = {
                .script = STORE_SCRIPT_WINDOW,
                .window = { .op = op, .n = a[0], .limit = (int64_t)a[1], .reset_ms = a[2] },
            };

            r = store_verdict(sc, key, 2, &va, deadline, on_done, p);
            break;
        }
        case STORE_SCRIPT_BUCKET: {
            struct store_verdict_args va = {
                .script = STORE_SCRIPT_BUCKET,
                .bucket = { .op = op, .n = a[0], .limit = (int64_t)a[1], .refill_amount = a[2],
                            .refill_ms = a[3], .strict = a[4] & 1 },
            };

            r = store_verdict(sc, key, 2, &va, deadline, on_done, p);
            break;
        }
        case STORE_SCRIPT_SLIDING: {
            struct store_verdict_args va = { .script = STORE_SCRIPT_SLIDING,
                                             .sliding = { op, a[0], (int64_t)a[1], a[2] } };

            r = store_verdict(sc, key, 2, &va, deadline, on_done, p);
            break;
        }
        default: {
            struct store_lease_args la = { a[0], (int64_t)a[1], a[2], a[3] };

            r = store_lease(sc, key, 2, &la, deadline, on_done, p);
            break;
        }
        }
        CHECK(r == 0 || r == -ENOTCONN || r == -ETIMEDOUT);
        s.pend[i].accepted = r == 0;
    }

    for (int round = 0; round < MAX_ROUNDS; round++) {
        bool progress = false, all = true;

        event_base_loop(base, EVLOOP_NONBLOCK);
        if (!serve(&s, &progress)) {
            /* Closed: let the store notice it (its disconnect callback). */
            event_base_loop(base, EVLOOP_NONBLOCK);
            break;
        }
        event_base_loop(base, EVLOOP_NONBLOCK);
        for (unsigned i = 0; i < n_user; i++)
            all &= !s.pend[i].accepted || s.pend[i].done;
        if (all || !store_conn_active(sc))
            break;
        if (!progress) {
            /* Nothing to read yet: wait for the store (or its deadline timer). */
            struct pollfd p = { .fd = s.fd, .events = POLLIN };

            if (poll(&p, 1, 0) == 0)
                event_base_loop(base, EVLOOP_ONCE);
        }
    }
out:
    store_conn_free(sc);
    for (unsigned i = 0; i < MAX_USER; i++) {
        /* Exactly one callback for each accepted request (on_done checks "once"). */
        CHECK(s.pend[i].done == s.pend[i].accepted);
        if (s.pend[i].got) {
            struct ints in = { .ok = s.sent[i].ints, .scalar = s.sent[i].scalar,
                               .n = s.sent[i].rep.n };
            struct store_reply want;

            memcpy(in.v, s.sent[i].rep.v, sizeof(in.v));
            CHECK(ref_decode(s.pend[i].kind, &in, &want));
            CHECK(same_reply(&s.pend[i].rep, &want));
        }
    }
    if (s.rd)
        redisReaderFree(s.rd);
    if (s.fd >= 0)
        close(s.fd);
    store_free(st);
}

/* ---- setup ---------------------------------------------------------------- */

static void cleanup(void)
{
    table_close(scratch);
    if (listen_fd >= 0)
        close(listen_fd);
    if (base)
        event_base_free(base);
    unlink(sock_path);
    unlink(table_path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct table_open_info info;

    (void)argc;
    (void)argv;
    /* As divvyd (daemon/main.c): a peer that went away is an EPIPE, not a signal. */
    signal(SIGPIPE, SIG_IGN);
    log_sink = getenv("DIVVY_FUZZ_LOG") ? stderr : fopen("/dev/null", "w");
    CHECK(log_sink != NULL);
    snprintf(dir, sizeof(dir), "/dev/shm/divvy-fuzz-redis.XXXXXX");
    if (!mkdtemp(dir)) {
        snprintf(dir, sizeof(dir), "/tmp/divvy-fuzz-redis.XXXXXX");
        CHECK(mkdtemp(dir) != NULL);
    }
    snprintf(sock_path, sizeof(sock_path), "%s/redis.sock", dir);
    snprintf(table_path, sizeof(table_path), "%s/scratch.table", dir);
    atexit(cleanup);
    CHECK(table_open(table_path, 64, 0600, &scratch, &info) == 0);
    base = event_base_new();
    CHECK(base != NULL);
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    CHECK(listen_fd >= 0);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
    CHECK(bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    CHECK(listen(listen_fd, 16) == 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz f = { data, size };

    if (size && (data[0] & 1)) {
        run_decode(data + 1, size - 1);
        return 0;
    }
    fz_u8(&f);
    run_server(&f);
    return 0;
}
