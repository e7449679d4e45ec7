/* SPDX-License-Identifier: MIT */
/*
 * srv: listeners, workers and connections of divvyd (see srv.h).
 *
 * Threads: the main thread owns signals and the maintenance timer; each
 * worker owns an event_base, its connections and its statistics.  A worker
 * touches another thread's data only through event_active() (stop) and
 * relaxed atomic counter reads (STATS).  Connections are freed at the end of
 * the callback that decided to close them, after their last use; one whose
 * hits still wait for Redis is closed but kept until their callbacks have run
 * (freed by the worker's flush event, never inside a store callback).
 *
 * Replies stay in request order while some hits wait for Redis: a waiting
 * hit is a slot (struct hit) in its connection's FIFO; a reply produced
 * while a slot is pending goes into the last slot's trailer instead of the
 * output buffer; a store callback fills its slot and moves the ready prefix
 * of the FIFO to the output buffer.  Nothing of this runs, and nothing is
 * allocated, while no rule uses Redis.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <urcu/urcu-memb.h>

#include "addr.h"
#include "admit.h"
#include "algo.h"
#include "clock.h"
#include "eval.h"
#include "fastfd.h"
#include "log.h"
#include "peer.h"
#include "proto.h"
#include "srv.h"
#include "store.h"

#define IN_CAP            (2 * PROTO_LINE_MAX)
#define OUT_INITIAL       4096
#define ACCEPT_BATCH      32
#define STOP_GRACE_MS     2000
#define ACCEPT_PAUSE_MS   100
#define SWEEP_EVERY_S     10
#define CONN_PEND_MAX     1024      /* waiting hits per connection before reading pauses */
#define HIT_FREE_MAX      256       /* recycled hit slots per worker */

struct listener {
    int fd;
    bool is_unix;
    char *path;                 /* Unix socket file we created, unlinked at exit */
    char *name;                 /* "tcp:127.0.0.1:8321" as bound */
};

/* Per-worker counters: written by the owner only, read by STATS. */
struct wstats {
    uint64_t hits;
    uint64_t accepted;
    uint64_t rejected;
    uint64_t canary_accepted;
    uint64_t canary_rejected;
    uint64_t errors;
    uint64_t table_full;
    uint64_t redis_fallbacks;   /* rule answers given by on_redis_error */
    uint64_t lease_fetches;     /* lease requests sent (on demand and refills) */
    uint64_t refill_hints;      /* REFILL lines received from fast-path clients */
    uint64_t refill_dropped;    /* ... that started no refill */
};

struct worker;

struct conn {
    struct worker *w;
    struct conn *prev, *next;
    struct event *rev, *wev;
    int fd;
    bool is_unix;
    bool privileged;
    bool closing;               /* close once the output is flushed */
    bool discarding;            /* skipping the rest of an over-long line */
    bool dead;                  /* close now, drop pending output */
    bool eof;                   /* the peer half-closed: close once all is answered */
    bool paused;                /* CONN_PEND_MAX hits wait: input is left unparsed */
    bool dirty;                 /* on the worker's flush list */
    bool out_paused;            /* over its share of a spent output budget: not read */
    uid_t uid;
    struct admit_slot slot;     /* its place (admit.h), released by conn_free() only */
    uint64_t last_ms;           /* last byte read (clock_coarse_ms()) */
    uint64_t partial_ms;        /* the current partial request line started; 0: none */
    uint64_t stall_ms;          /* pending output last made progress; 0: none pending */
    struct conn *dirty_next;
    struct hit *pend_head, *pend_tail;  /* waiting hits, in request order */
    size_t pend_bytes;          /* reply bytes queued in their trailers */
    unsigned n_pend;            /* hits in the FIFO */
    unsigned n_waiting;         /* ... whose store callback has not run yet */
    size_t in_len;
    char *out;
    size_t out_len, out_off, out_cap;
    char in[IN_CAP];
};

struct worker {
    struct srv *s;
    unsigned id;
    struct metrics_worker *mw;  /* this worker's counter block (metrics.h) */
    struct event *ping_ev;      /* the watchdog's liveness probe */
    uint64_t pong;              /* last probe answered (atomic) */
    pthread_t thread;
    bool started;
    bool stopping;
    struct event_base *base;
    struct event **lev;         /* one per listener */
    struct event *stop_ev;
    struct event *resume_ev;    /* re-arms listeners after EMFILE */
    struct event *grace_ev;     /* forces the stop after STOP_GRACE_MS */
    struct event *sweep_ev;     /* closes connections whose timeout expired (admit.h) */
    struct conn *conns;
    struct wstats st;
    struct store_conn *sc;      /* this worker's Redis connection; NULL without a store */
    struct event *flush_ev;     /* settles connections touched by store callbacks */
    bool flush_active;
    struct conn *dirty;         /* connections for flush_ev */
    struct hit *hit_free;       /* recycled hit slots */
    unsigned n_hit_free;
    char *actor_buf;            /* RULES_ACTOR_MAX */
    char *key_buf;              /* a Redis key */
    size_t key_cap;
    struct proto_req req;       /* parse scratch: one per worker, not on the stack */
};

/* The step a waiting hit waits for. */
enum hit_step {
    STEP_STRICT = 1,            /* a strict script (or a lease PEEK) */
    STEP_DEL,                   /* RESET: DEL in Redis after this host's counters */
    STEP_FETCH,                 /* lease: more credit for this host (we own FETCH) */
    STEP_ASK,                   /* lease: n taken directly in Redis */
};

/*
 * A request on the Redis path (docs/redis.md "Mixed paths"): evaluated rule
 * by rule in order; a rule kept in Redis suspends it until the store calls
 * back.  While it waits it is a slot in its connection's reply FIFO.
 */
struct hit {
    struct hit *next;           /* connection FIFO, or the worker's free list */
    struct worker *w;
    struct conn *c;
    bool done;                  /* answered: reply[] holds the line */
    char reply[PROTO_REPLY_MAX];
    size_t reply_len;
    char *trailer;              /* replies of later requests answered meanwhile */
    size_t trailer_len, trailer_cap;

    enum proto_verb verb;
    enum table_op op;
    uint64_t n;
    bool privileged;
    bool rematched;             /* a reload came in between: rules by id */
    uid_t uid;
    uint64_t deadline;          /* no hit waits past this (redis.timeout_ms) */
    uint64_t generation;        /* of the rules path[] indexes */
    uint32_t path[RULES_MATCH_MAX];
    size_t n_path, pos;
    uint64_t done_ids[RULES_MATCH_MAX];         /* rules already applied */
    unsigned n_done;
    struct eval_result res;
    char rule[RULES_LABEL_MAX + 1];             /* the decider's id_str */

    enum hit_step step;
    struct rules_rule step_rule;                /* numbers only after a reload */
    char step_id[RULES_LABEL_MAX + 1];
    struct eval_outcome step_o;                 /* STEP_DEL: this host's reset */
    uint64_t sent_ms;
    uint64_t start_ns;          /* for the hit-duration histogram */
    unsigned lease_tries;
    char *actor;                /* lease steps: the counter's actor */
    size_t actor_len, actor_cap;

    const struct proto_req *req;                /* the worker's scratch until it waits */
    struct proto_req own;
};

struct srv {
    struct srv_opts o;
    struct listener *lis;
    size_t n_lis;
    struct worker *workers;
    struct event_base *main_base;
    uint64_t started_ms;
    struct admit *admit;        /* connection budgets, shared by the workers */
    uint64_t ping;              /* watchdog probes sent to the workers (main thread) */
    char status[256];           /* last STATUS= sent (main thread) */
};

static struct log_ratelimit rl_accept, rl_internal, rl_full, rl_admit;

static void stat_inc(uint64_t *c)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

static uint64_t stat_get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

/* ---- listeners ----------------------------------------------------------- */

static int listen_unix(const char *path, unsigned mode, int *ret_fd)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd, probe, r;

    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (errno != EADDRINUSE) {
            r = -errno;
            goto fail;
        }
        /* A socket file nobody answers on is left over from a crash. */
        probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe < 0) {
            r = -errno;
            goto fail;
        }
        r = connect(probe, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
        close(probe);
        if (r != -ECONNREFUSED) {
            r = -EADDRINUSE;
            goto fail;
        }
        if (unlink(path) < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            r = -errno;
            goto fail;
        }
    }
    if (chmod(path, mode) < 0 || listen(fd, 1024) < 0) {
        r = -errno;
        unlink(path);
        goto fail;
    }
    *ret_fd = fd;
    return 0;
fail:
    close(fd);
    return r;
}

static int listen_tcp(const char *hostport, int *ret_fd, char *name, size_t name_size)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char buf[300], hbuf[NI_MAXHOST], pbuf[NI_MAXSERV];
    const char *host, *port;
    int fd = -1, one = 1, r;

    r = addr_split_host_port(hostport, buf, sizeof(buf), &host, &port);
    if (r < 0)
        return r;
    r = getaddrinfo(*host ? host : NULL, port, &hints, &ai);
    if (r != 0)
        return r == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        r = -errno;
        goto out;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        r = -errno;
        goto out;
    }
    if (getnameinfo((struct sockaddr *)&ss, sl, hbuf, sizeof(hbuf), pbuf, sizeof(pbuf),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        r = -EADDRNOTAVAIL;
        goto out;
    }
    snprintf(name, name_size, ss.ss_family == AF_INET6 ? "tcp:[%s]:%s" : "tcp:%s:%s", hbuf,
             pbuf);
    *ret_fd = fd;
    fd = -1;
    r = 0;
out:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return r;
}

static int listener_open(struct srv *s, const char *addr, struct listener *l)
{
    char name[400];
    int r;

    l->fd = -1;
    if (strncmp(addr, "unix:", 5) == 0) {
        r = listen_unix(addr + 5, s->o.socket_mode, &l->fd);
        if (r < 0)
            return r;
        l->is_unix = true;
        l->path = strdup(addr + 5);
        l->name = strdup(addr);
    } else if (strncmp(addr, "tcp:", 4) == 0) {
        r = listen_tcp(addr + 4, &l->fd, name, sizeof(name));
        if (r < 0)
            return r;
        l->name = strdup(name);
    } else {
        return -EINVAL;
    }
    if (!l->name || (l->is_unix && !l->path))
        return -ENOMEM;
    return 0;
}

/* ---- connections --------------------------------------------------------- */

static void hit_put(struct worker *w, struct hit *h);
static void hits_free(struct worker *w);

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

/* Only once no store callback can reach @c any more (n_waiting == 0). */
static void conn_free(struct conn *c)
{
    struct worker *w;

    if (!c)
        return;
    w = c->w;
    conn_undirty(c);
    while (c->pend_head) {
        struct hit *h = c->pend_head;

        c->pend_head = h->next;
        hit_put(w, h);
    }
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
    if (c->fd >= 0)
        close(c->fd);
    free(c->out);
    admit_leave(w->s->admit, &c->slot);
    free(c);
    if (w->stopping && !w->conns)
        event_base_loopbreak(w->base);
}

/* What @c's client has not read yet: replies and the hits still waiting. */
static size_t conn_unread(const struct conn *c)
{
    return c->out_len - c->out_off + c->pend_bytes + c->n_pend * sizeof(struct hit);
}

/* Counts @c's buffers in the shared output budget: the output buffer beyond
 * its first OUT_INITIAL bytes, trailers and waiting hits.  Called when they
 * change size (a realloc, the end of a callback), not per reply. */
static void conn_charge(struct conn *c)
{
    size_t extra = c->out_cap > OUT_INITIAL ? c->out_cap - OUT_INITIAL : 0;

    admit_charge(c->w->s->admit, &c->slot,
                 extra + c->pend_bytes + c->n_pend * sizeof(struct hit));
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

static void hit_trail(struct conn *c, const char *s, size_t len);

/* Every reply goes through here: behind a waiting hit it queues in order. */
static void out_append(struct conn *c, const char *s, size_t len)
{
    if (c->pend_tail) {
        hit_trail(c, s, len);
        return;
    }
    out_append_direct(c, s, len);
}

static void reply_err(struct conn *c, enum proto_err err, const char *reason)
{
    char line[PROTO_REPLY_MAX];
    int n = proto_fmt_err(line, sizeof(line), err, reason);

    stat_inc(&c->w->st.errors);
    metrics_error(c->w->mw, err);
    if (n > 0)
        out_append(c, line, (size_t)n);
}

static void reply_text(struct conn *c, const char *s)
{
    out_append(c, s, strlen(s));
}

/* Appends @s as a quoted protocol string: '"' and control bytes become '_'. */
static void append_quoted(char *buf, size_t size, size_t *pos, const char *s)
{
    if (*pos + 1 < size)
        buf[(*pos)++] = '"';
    for (; *s && *pos + 2 < size; s++)
        buf[(*pos)++] = (*s == '"' || (unsigned char)*s < 0x20) ? '_' : *s;
    buf[(*pos)++] = '"';
    buf[*pos] = '\0';
}

static void append_fmt(char *buf, size_t size, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void append_fmt(char *buf, size_t size, size_t *pos, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*pos >= size)
        return;
    va_start(ap, fmt);
    n = vsnprintf(buf + *pos, size - *pos, fmt, ap);
    va_end(ap);
    if (n > 0)
        *pos = *pos + (size_t)n < size ? *pos + (size_t)n : size - 1;
}

static const char *policy_name(enum rules_policy p)
{
    return p == RULES_POLICY_CANARY ? "canary" : p == RULES_POLICY_CONTINUE ? "continue" : "stop";
}

static const char *store_name(enum rules_store s)
{
    return s == RULES_STORE_STRICT ? "strict" : s == RULES_STORE_LEASE ? "lease" : "local";
}

static const char *algo_name(enum rules_algo a)
{
    return a == RULES_ALGO_TOKEN_BUCKET     ? "token_bucket"
           : a == RULES_ALGO_SLIDING_WINDOW ? "sliding_window"
                                            : "window";
}

/* ---- requests ------------------------------------------------------------ */

static void count_outcomes(struct worker *w, const struct rules *rules, uint64_t generation,
                           enum table_op op, const struct eval_result *res)
{
    for (unsigned i = 0; i < res->n; i++) {
        if (res->o[i].table_full) {
            stat_inc(&w->st.table_full);
            log_ratelimited(&rl_full, LOG_WARNING,
                            "counter table full or max_actors reached (rule %u): %s",
                            res->o[i].rule, w->s->o.full_allow ? "allowed" : "denied");
        }
        if (!res->o[i].canary)
            continue;
        stat_inc(res->o[i].allowed ? &w->st.canary_accepted : &w->st.canary_rejected);
        if (op == TABLE_TAKE)
            metrics_hit(w->mw, rules, generation, res->o[i].rule,
                        res->o[i].allowed ? METRICS_CANARY_ACCEPTED : METRICS_CANARY_REJECTED);
    }
    if (op == TABLE_TAKE)
        metrics_hit(w->mw, rules, generation, res->decider,
                    res->allowed ? METRICS_ACCEPTED : METRICS_REJECTED);
}

/* Counts a decided request and writes its reply line; returns the length. */
static size_t hit_format(struct worker *w, uid_t uid, enum proto_verb verb, enum table_op op,
                         const struct eval_result *res, const char *rule, char *line,
                         size_t size)
{
    int n;

    if (op == TABLE_TAKE) {
        stat_inc(&w->st.hits);
        stat_inc(res->allowed ? &w->st.accepted : &w->st.rejected);
    } else if (op == TABLE_RESET) {
        /* Only counters forgotten: not a resettable = false rule's, nor a
         * zero-semantics rule that has none. */
        log_msg(LOG_NOTICE, "RESET by uid %u: %u counter(s) on the path of rule %u reset",
                (unsigned)uid, res->n_reset, res->decider);
    }
    /* HIT's reply is divvy's, byte for byte; the extension verbs name the rule. */
    if (verb == PROTO_HIT)
        n = proto_fmt_ok(line, size, res->allowed, res->credit, res->reset_s);
    else
        n = proto_fmt_ok_rule(line, size, res->allowed, res->credit, res->reset_s, rule);
    return n > 0 ? (size_t)n : 0;
}

static enum table_op op_of(enum proto_verb verb)
{
    return verb == PROTO_PEEK ? TABLE_PEEK : verb == PROTO_RESET ? TABLE_RESET : TABLE_TAKE;
}

static void hit_start(struct conn *c, const struct proto_req *req,
                      const struct reload_state *st);

/* The table of rule @r's host counters (eval_table()). */
/* The tables of this daemon, and rules @rs, as eval.c sees them. */
static void hit_env(const struct worker *w, const struct rules *rs, struct eval_env *env)
{
    *env = (struct eval_env){ .rules = rs, .fast = w->s->o.fast, .priv = w->s->o.priv,
                              .privileged = w->s->o.privileged,
                              .full_allow = w->s->o.full_allow };
}

static struct table *srv_table_of(const struct worker *w, const struct rules_rule *r)
{
    struct eval_env env;

    hit_env(w, NULL, &env);
    return eval_table(&env, r);
}

/* ERR no-counter's reason (docs/protocol.md "Errors"), logged (rate-limited):
 * the operator must size table.privileged_slots / max_actors (docs/pam.md). */
static const char *srv_no_counter_reason(int r)
{
    static struct log_ratelimit rl_no_counter;
    const char *why = r == -EDQUOT ? "a privileged rule is at its max_actors: not counted"
                                   : "the privileged table is full: not counted";

    log_ratelimited(&rl_no_counter, LOG_ERR, "ERR no-counter: %s (raise table.privileged_slots "
                    "or the rule's max_actors)", why);
    return why;
}

static void do_hit(struct conn *c, const struct proto_req *req)
{
    struct worker *w = c->w;
    struct rules_req rq = { .kv = req->kv, .n_kv = req->n_kv, .privileged = c->privileged };
    enum table_op op = op_of(req->verb);
    const struct reload_state *st;
    struct eval_env env;
    struct eval_result res;
    struct rules_rule decider;
    char rule[RULES_LABEL_MAX + 1] = "", line[PROTO_REPLY_MAX];
    uint64_t start_ns = metrics_clock_ns();
    size_t n;
    int r;

    if (req->verb == PROTO_RESET && !c->privileged) {
        reply_err(c, PROTO_E_FORBIDDEN, "RESET needs root or the admin group on the Unix socket");
        return;
    }
    urcu_memb_read_lock();
    st = reload_current(w->s->o.reload);
    /* Some rule lives in Redis: the path that can wait (below). */
    if (w->sc && rules_uses_store(st->rules)) {
        hit_start(c, req, st);
        urcu_memb_read_unlock();
        return;
    }
    hit_env(w, st->rules, &env);
    r = eval_request(&env, &rq, op, req->amount, clock_now_ms(), &res);
    if (r >= 0) {
        count_outcomes(w, st->rules, st->generation, op, &res);
        /* The rule's strings live in the rules: copy before leaving the section. */
        if (req->verb != PROTO_HIT && rules_get(st->rules, res.decider, &decider) >= 0)
            snprintf(rule, sizeof(rule), "%s", decider.id_str);
    }
    urcu_memb_read_unlock();
    if (r == -ENOSPC || r == -EDQUOT) {
        reply_err(c, PROTO_E_NO_COUNTER, srv_no_counter_reason(r));
        return;
    }
    if (r < 0) {
        errno = -r;
        log_ratelimited(&rl_internal, LOG_ERR, "evaluating a request failed: %m");
        reply_err(c, PROTO_E_UNKNOWN, "internal error");
        return;
    }
    n = hit_format(w, c->uid, req->verb, op, &res, rule, line, sizeof(line));
    out_append(c, line, n);
    if (op == TABLE_TAKE)
        metrics_hit_done(w->mw, start_ns);
}

/* ---- hits on the Redis path (docs/redis.md, docs/daemon.md) ------------------------- */

static struct log_ratelimit rl_store;

static struct hit *hit_get(struct worker *w)
{
    struct hit *h = w->hit_free;

    if (h) {
        w->hit_free = h->next;
        w->n_hit_free--;
    } else {
        h = calloc(1, sizeof(*h));
        if (!h)
            return NULL;
    }
    h->next = NULL;
    h->w = w;
    h->c = NULL;
    h->done = false;
    h->reply_len = 0;
    h->trailer_len = 0;
    h->rematched = false;
    h->n_done = 0;
    h->step = 0;
    h->lease_tries = 0;
    h->actor_len = 0;
    h->rule[0] = '\0';
    /* Only the count: eval_decides() appends outcomes and sets the answer. */
    h->res.n = 0;
    h->res.n_reset = 0;
    return h;
}

static void hit_put(struct worker *w, struct hit *h)
{
    if (w->n_hit_free < HIT_FREE_MAX) {
        h->next = w->hit_free;
        w->hit_free = h;
        w->n_hit_free++;
        return;
    }
    free(h->trailer);
    free(h->actor);
    free(h);
}

static void hits_free(struct worker *w)
{
    struct hit *h;

    while ((h = w->hit_free) != NULL) {
        w->hit_free = h->next;
        free(h->trailer);
        free(h->actor);
        free(h);
    }
    w->n_hit_free = 0;
}

/* A reply produced while hits wait: after the last of them. */
static void hit_trail(struct conn *c, const char *s, size_t len)
{
    struct hit *h = c->pend_tail;

    if (h->trailer_len + len > h->trailer_cap) {
        size_t cap = h->trailer_cap ? h->trailer_cap : 512;
        char *grown;

        while (cap < h->trailer_len + len)
            cap *= 2;
        grown = realloc(h->trailer, cap);
        if (!grown) {
            c->dead = true;
            return;
        }
        h->trailer = grown;
        h->trailer_cap = cap;
    }
    memcpy(h->trailer + h->trailer_len, s, len);
    h->trailer_len += len;
    c->pend_bytes += len;
}

/* Moves the answered prefix of the FIFO to the output buffer. */
static void conn_pend_flush(struct conn *c)
{
    struct hit *h;

    while ((h = c->pend_head) != NULL && h->done) {
        c->pend_head = h->next;
        if (!c->pend_head)
            c->pend_tail = NULL;
        c->n_pend--;
        c->pend_bytes -= h->trailer_len;
        if (!c->dead) {
            out_append_direct(c, h->reply, h->reply_len);
            if (h->trailer_len)
                out_append_direct(c, h->trailer, h->trailer_len);
        }
        hit_put(c->w, h);
    }
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

static bool hit_id_done(const struct hit *h, uint64_t id)
{
    for (unsigned i = 0; i < h->n_done; i++) {
        if (h->done_ids[i] == id)
            return true;
    }
    return false;
}

static void hit_mark_done(struct hit *h, uint64_t id)
{
    if (h->n_done < RULES_MATCH_MAX)
        h->done_ids[h->n_done++] = id;
}

static struct rules_req hit_rq(const struct hit *h)
{
    struct rules_req rq = { .kv = h->req->kv, .n_kv = h->req->n_kv,
                            .privileged = h->privileged };

    return rq;
}

/* What rule @r answers when Redis cannot (store.on_redis_error). */
static int hit_fallback(struct worker *w, struct hit *h, const struct rules *rs,
                        const struct rules_rule *r, struct eval_outcome *o)
{
    struct rules_req rq = hit_rq(h);
    struct eval_env env;

    stat_inc(&w->st.redis_fallbacks);
    if (h->op == TABLE_RESET || w->s->o.on_redis_error == CONFIG_REDIS_ERROR_LOCAL) {
        hit_env(w, rs, &env);
        return eval_rule(&env, r, &rq, h->op, h->n, clock_now_ms(), o);
    }
    memset(o, 0, sizeof(*o));
    o->rule = r->index;
    if (w->s->o.on_redis_error == CONFIG_REDIS_ERROR_OPEN) {
        o->allowed = h->n <= (uint64_t)r->credit_limit;
        o->credit = (uint64_t)r->credit_limit;
    }
    return 0;
}

static void lease_limits(const struct worker *w, const struct rules_rule *r,
                         struct table_limits *lim)
{
    eval_limits(r, lim);
    lim->lease = true;
    lim->lease_max = w->s->o.lease_max;
    if (lim->lease_max > TABLE_LEASE_MAX)
        lim->lease_max = TABLE_LEASE_MAX;
}

/* A background lease refill: not tied to any request. */
struct refill {
    struct table *t;
    struct table_limits lim;
    uint64_t rule_id;
    uint64_t sent_ms;
    size_t actor_len;
    char actor[];
};

static void refill_done(void *arg, const struct store_reply *rep)
{
    struct refill *f = arg;
    struct table_key key = { .rule_id = f->rule_id, .actor = f->actor,
                             .actor_len = f->actor_len };
    uint64_t now = clock_now_ms();
    int r;

    if (rep && rep->n >= 4 && rep->v[0] >= 0 && rep->v[1] >= 0 && rep->v[2] >= 0) {
        struct table_lease_grant g = {
            .granted = (uint64_t)rep->v[0], .remain = (uint64_t)rep->v[1],
            .end_ms = f->sent_ms + (uint64_t)rep->v[2], .created = rep->v[3] != 0,
            .fetch = true,
        };

        r = table_lease_grant(f->t, &key, &f->lim, &g, now);
        if (r < 0) {
            errno = -r;
            log_ratelimited(&rl_store, LOG_WARNING, "lease of %llu credits lost: %m",
                            (unsigned long long)g.granted);
        }
    } else {
        table_lease_abort(f->t, &key, &f->lim, now);
    }
    free(f);
}

static bool lease_refill(struct worker *w, struct table *t, const struct table_limits *lim,
                         const struct rules_rule *r, const char *actor, size_t actor_len,
                         const char *key, size_t key_len, uint64_t want)
{
    struct table_key tk = { .rule_id = r->id, .actor = actor, .actor_len = actor_len };
    int64_t args[4] = { (int64_t)want, r->credit_limit, (int64_t)lim->reset_ms,
                        TABLE_LEASE_DIVISOR };
    uint64_t now = clock_now_ms();
    struct refill *f;

    f = malloc(sizeof(*f) + actor_len);
    if (!f) {
        table_lease_abort(t, &tk, lim, now);
        return false;
    }
    f->t = t;
    f->lim = *lim;
    f->rule_id = r->id;
    f->sent_ms = now;
    f->actor_len = actor_len;
    memcpy(f->actor, actor, actor_len);
    if (store_eval(w->sc, STORE_SCRIPT_LEASE, key, key_len, NULL, args, 4,
                   store_deadline(w->s->o.store, now), refill_done, f) < 0) {
        table_lease_abort(t, &tk, lim, now);
        free(f);
        return false;
    }
    stat_inc(&w->st.lease_fetches);
    return true;
}

static int hit_keep_actor(struct hit *h, const char *actor, size_t len)
{
    if (len > h->actor_cap) {
        char *grown = realloc(h->actor, len);

        if (!grown)
            return -ENOMEM;
        h->actor = grown;
        h->actor_cap = len;
    }
    if (len)
        memcpy(h->actor, actor, len);
    h->actor_len = len;
    return 0;
}

static void hit_on_store(void *arg, const struct store_reply *rep);

/* Before a step goes to Redis: the key (into w->key_buf, *ret_klen) and
 * what the reply will need of rule @r (its strings die with a reload). */
static int hit_prepare(struct store *st, struct hit *h, const struct rules_rule *r,
                       struct worker *w, size_t alen, int *ret_klen)
{
    size_t n = strlen(r->id_str);
    int klen;

    klen = store_key(st, r->id_str, w->actor_buf, alen, w->key_buf, w->key_cap);
    if (klen < 0)
        return klen;
    h->step_rule = *r;
    if (n >= sizeof(h->step_id))
        n = sizeof(h->step_id) - 1;
    memcpy(h->step_id, r->id_str, n);
    h->step_id[n] = '\0';
    *ret_klen = klen;
    return 0;
}

/*
 * Rule @r (lease or strict) for hit @h: 0 with *o filled (decided here: a
 * lease hit, or on_redis_error), 1 when a store request was sent (the hit
 * waits for hit_on_store()), or -errno.
 */
static int hit_remote(struct worker *w, struct hit *h, const struct rules *rs,
                      const struct rules_rule *r, struct eval_outcome *o)
{
    struct store *st = w->s->o.store;
    struct rules_req rq = hit_rq(h);
    struct table *t = srv_table_of(w, r);
    struct table_limits lim;
    struct table_lease_result lr;
    struct table_key tk;
    struct eval_env env;
    enum table_op op = h->op;
    enum store_script script;
    uint64_t now = clock_now_ms();
    int64_t args[STORE_ARGS_MAX];
    unsigned n_args = 0;
    int alen, klen = -1, rc;

    op = eval_rule_op(r, op, h->n);
    alen = rules_actor(rs, r->index, &rq, w->actor_buf, RULES_ACTOR_MAX);
    if (alen < 0)
        return alen;
    /* The Redis key and the step's rule only when Redis is asked (below):
     * a lease hit decided here needs neither. */
    if (r->store != RULES_STORE_LEASE || op != TABLE_TAKE) {
        rc = hit_prepare(st, h, r, w, (size_t)alen, &klen);
        if (rc < 0)
            return rc;
    }
    eval_limits(r, &lim);
    tk.rule_id = r->id;
    tk.actor = w->actor_buf;
    tk.actor_len = (size_t)alen;

    if (op == TABLE_RESET) {
        /* This host's counters now (the local one and the lease), then Redis. */
        hit_env(w, rs, &env);
        rc = eval_rule(&env, r, &rq, TABLE_RESET, h->n, now, o);
        if (rc < 0)
            return rc;
        if (r->store == RULES_STORE_LEASE) {
            struct table_result tr;

            lease_limits(w, r, &lim);
            table_hit(t, &tk, &lim, TABLE_RESET, 0, now, &tr);
        }
        h->step_o = *o;
        rc = store_del(w->sc, w->key_buf, (size_t)klen, h->deadline, hit_on_store, h);
        if (rc < 0) {
            log_ratelimited(&rl_store, LOG_WARNING, "RESET of rule %s: Redis unreachable, "
                            "only this host's counters were reset", r->id_str);
            stat_inc(&w->st.redis_fallbacks);
            return 0;
        }
        h->step = STEP_DEL;
        return 1;
    }

    if (r->store == RULES_STORE_LEASE && op == TABLE_TAKE) {
        lease_limits(w, r, &lim);
        hit_env(w, rs, &env);
        /* After two fetches that others drained first, take it directly. */
        rc = eval_lease(&env, r, &lim, &tk, h->n, h->lease_tries < 2, now, o, &lr);
        if (rc < 0 || (rc == 0 && !o->counted))
            return rc;                  /* ERR no-counter, or the full-table outcome */
        switch (lr.verdict) {
        case TABLE_LEASE_ALLOWED:
        case TABLE_LEASE_DENIED:
            if (lr.refill) {
                rc = store_key(st, r->id_str, w->actor_buf, (size_t)alen, w->key_buf,
                               w->key_cap);
                if (rc > 0)
                    lease_refill(w, t, &lim, r, w->actor_buf, (size_t)alen, w->key_buf,
                                 (size_t)rc, lr.want);
                else
                    table_lease_abort(t, &tk, &lim, now);
            }
            return 0;
        case TABLE_LEASE_FETCH:
            rc = hit_prepare(st, h, r, w, (size_t)alen, &klen);
            if (rc >= 0)
                rc = hit_keep_actor(h, w->actor_buf, (size_t)alen);
            args[0] = (int64_t)lr.want;
            args[1] = r->credit_limit;
            args[2] = (int64_t)lim.reset_ms;
            args[3] = TABLE_LEASE_DIVISOR;
            if (rc >= 0)
                rc = store_eval(w->sc, STORE_SCRIPT_LEASE, w->key_buf, (size_t)klen, NULL, args,
                                4, h->deadline, hit_on_store, h);
            if (rc < 0) {
                table_lease_abort(t, &tk, &lim, now);
                return hit_fallback(w, h, rs, r, o);
            }
            stat_inc(&w->st.lease_fetches);
            h->step = STEP_FETCH;
            h->sent_ms = now;
            return 1;
        case TABLE_LEASE_ASK:
            rc = hit_prepare(st, h, r, w, (size_t)alen, &klen);
            if (rc >= 0)
                rc = hit_keep_actor(h, w->actor_buf, (size_t)alen);
            if (rc < 0)
                return rc;
            h->step = STEP_ASK;
            break;
        }
    } else {
        h->step = STEP_STRICT;
    }

    /* Strict (and lease PEEK and ASK): one script decides in Redis. */
    switch (r->algo) {
    case RULES_ALGO_TOKEN_BUCKET:
        script = STORE_SCRIPT_BUCKET;
        args[n_args++] = (int64_t)h->n;
        args[n_args++] = r->credit_limit;
        args[n_args++] = (int64_t)lim.refill_amount;
        args[n_args++] = (int64_t)lim.refill_ms;
        args[n_args++] = r->strict;
        break;
    case RULES_ALGO_SLIDING_WINDOW:
        script = STORE_SCRIPT_SLIDING;
        args[n_args++] = (int64_t)h->n;
        args[n_args++] = r->credit_limit;
        args[n_args++] = (int64_t)lim.reset_ms;
        break;
    case RULES_ALGO_WINDOW:
    default:
        script = STORE_SCRIPT_WINDOW;
        args[n_args++] = (int64_t)h->n;
        args[n_args++] = r->credit_limit;
        args[n_args++] = (int64_t)lim.reset_ms;
        break;
    }
    rc = store_eval(w->sc, script, w->key_buf, (size_t)klen, op == TABLE_TAKE ? "take" : "peek",
                    args, n_args, h->deadline, hit_on_store, h);
    if (rc < 0)
        return hit_fallback(w, h, rs, r, o);
    h->sent_ms = now;
    return 1;
}

/* What hit_step() needs besides the walk. */
struct hit_walk {
    struct worker *w;
    struct hit *h;
    const struct rules *rs;
    struct eval_env env;
    struct rules_req rq;
    struct rules_rule r;        /* the rule of the last step */
};

/*
 * The walk's step on divvyd's Redis path: a local rule (or one that keeps
 * no counter) from the host tables as eval_request() does, a lease or strict
 * rule by hit_remote(): EVAL_WAIT when it asked the store.
 */
static int hit_step(void *ctx, const struct eval_walk *at, const struct rules_rule **ret_r,
                    struct eval_outcome *o)
{
    struct hit_walk *hw = ctx;
    struct hit *h = hw->h;
    int rc;

    rc = rules_get(hw->rs, at->path[at->pos], &hw->r);
    if (rc < 0)
        return rc;
    *ret_r = &hw->r;
    if (hw->r.store == RULES_STORE_LOCAL || eval_zero(&hw->r, o))
        rc = eval_rule(&hw->env, &hw->r, &hw->rq, h->op, h->n, clock_now_ms(), o);
    else
        rc = hit_remote(hw->w, h, hw->rs, &hw->r, o);
    if (rc == 0)
        hit_mark_done(h, hw->r.id);
    return rc;
}

/* @h's walk where it stands (h->pos, kept in @h while it waits). */
static struct eval_walk hit_walk_at(struct hit *h)
{
    struct eval_walk at = { .path = h->path, .n_path = h->n_path, .pos = h->pos, .op = h->op,
                            .res = &h->res };

    return at;
}

/*
 * Runs @h's path from h->pos (eval_walk() with hit_step()): 1 when a rule
 * decided (h->res, h->rule), 0 when it waits for the store, -errno.  Inside
 * the RCU read-side section that yielded @rs.
 */
static int hit_run(struct worker *w, struct hit *h, const struct rules *rs)
{
    struct hit_walk hw = { .w = w, .h = h, .rs = rs, .rq = hit_rq(h) };
    struct eval_walk at = hit_walk_at(h);
    int rc;

    hit_env(w, rs, &hw.env);
    rc = eval_walk(&at, hit_step, &hw);
    h->pos = at.pos;
    /* The last step's rule decided; HIT's reply does not name it. */
    if (rc == 1 && h->verb != PROTO_HIT)
        snprintf(h->rule, sizeof(h->rule), "%s", hw.r.id_str);
    return rc;
}

/* The store answered (@rep, or NULL: failed) the step @h waited for. */
static int hit_resume(struct worker *w, struct hit *h, const struct reload_state *st,
                      const struct store_reply *rep)
{
    const struct rules *rs = st->rules;
    bool same = st->generation == h->generation;
    struct table *t = srv_table_of(w, &h->step_rule);
    struct table_key tk = { .rule_id = h->step_rule.id, .actor = h->actor,
                            .actor_len = h->actor_len };
    struct table_limits lim;
    struct eval_outcome o;
    struct rules_rule r;
    const struct rules_rule *settled = NULL;    /* the rule whose outcome @o is */
    const char *name = NULL;
    bool have = false;
    uint64_t now = clock_now_ms();
    int rc;

    memset(&o, 0, sizeof(o));
    o.rule = h->step_rule.index;
    switch (h->step) {
    case STEP_STRICT:
    case STEP_ASK:
        if (rep && rep->n >= 3) {
            o.counted = true;
            o.allowed = rep->v[0] != 0;
            o.credit = rep->v[1] > 0 ? (uint64_t)rep->v[1] : 0;
            o.reset_s = eval_ms_to_s(rep->v[2] > 0 ? (uint64_t)rep->v[2] : 0);
            have = true;
        }
        if (have && h->step == STEP_ASK) {
            /* What Redis said about the pool bounds this host's next hits. */
            struct table_lease_grant g = {
                .remain = o.credit, .end_ms = h->sent_ms + (uint64_t)(rep->v[2] > 0 ? rep->v[2]
                                                                                    : 0),
            };

            lease_limits(w, &h->step_rule, &lim);
            table_lease_grant(t, &tk, &lim, &g, now);
        }
        break;
    case STEP_DEL:
        o = h->step_o;
        have = true;
        if (!rep)
            log_ratelimited(&rl_store, LOG_WARNING, "RESET of rule %s: Redis failed, only this "
                            "host's counters were reset", h->step_id);
        break;
    case STEP_FETCH:
        lease_limits(w, &h->step_rule, &lim);
        if (rep && rep->n >= 4 && rep->v[0] >= 0 && rep->v[1] >= 0 && rep->v[2] >= 0) {
            struct table_lease_grant g = {
                .granted = (uint64_t)rep->v[0], .remain = (uint64_t)rep->v[1],
                .end_ms = h->sent_ms + (uint64_t)rep->v[2], .created = rep->v[3] != 0,
                .fetch = true,
            };

            rc = table_lease_grant(t, &tk, &lim, &g, now);
            if (rc < 0) {
                errno = -rc;
                log_ratelimited(&rl_store, LOG_WARNING, "lease of %llu credits lost: %m",
                                (unsigned long long)g.granted);
            }
            /* Try the same rule again: now from the lease (or directly). */
            h->lease_tries++;
            if (same)
                return hit_run(w, h, rs);
        } else {
            table_lease_abort(t, &tk, &lim, now);
        }
        break;
    }
    if (have) {
        settled = &h->step_rule;
        name = h->step_id;
    } else if (same) {
        /* Redis failed: this rule by on_redis_error, then go on. */
        rc = rules_get(rs, h->path[h->pos], &r);
        if (rc >= 0)
            rc = hit_fallback(w, h, rs, &r, &o);
        if (rc < 0)
            return rc;
        settled = &r;
        name = r.id_str;
    }
    if (settled) {
        struct eval_walk at = hit_walk_at(h);

        hit_mark_done(h, settled->id);
        if (eval_walk_settle(&at, settled, &o)) {
            if (h->verb != PROTO_HIT)
                snprintf(h->rule, sizeof(h->rule), "%s", name);
            return 1;
        }
        h->pos = at.pos;
    }
    if (!same) {
        /* A reload came in between: the rest of the path under the new
         * rules, less the rules already applied (by id). */
        struct rules_req rq = hit_rq(h);
        size_t n = rules_match(rs, &rq, h->path), k = 0;

        for (size_t i = 0; i < n; i++) {
            rc = rules_get(rs, h->path[i], &r);
            if (rc < 0)
                return rc;
            if (!hit_id_done(h, r.id))
                h->path[k++] = h->path[i];
        }
        h->n_path = k;
        h->pos = 0;
        h->generation = st->generation;
        h->rematched = true;
    }
    return hit_run(w, h, rs);
}

static void hit_finish(struct worker *w, struct hit *h, const struct rules *rs, int r)
{
    int n;

    if (r == -ENOSPC || r == -EDQUOT) {
        stat_inc(&w->st.errors);
        metrics_error(w->mw, PROTO_E_NO_COUNTER);
        n = proto_fmt_err(h->reply, sizeof(h->reply), PROTO_E_NO_COUNTER,
                          srv_no_counter_reason(r));
        h->reply_len = n > 0 ? (size_t)n : 0;
    } else if (r < 0) {
        errno = -r;
        log_ratelimited(&rl_internal, LOG_ERR, "evaluating a request failed: %m");
        stat_inc(&w->st.errors);
        n = proto_fmt_err(h->reply, sizeof(h->reply), PROTO_E_UNKNOWN, "internal error");
        h->reply_len = n > 0 ? (size_t)n : 0;
    } else {
        if (!h->rematched)
            count_outcomes(w, rs, h->generation, h->op, &h->res);
        if (h->op == TABLE_TAKE)
            metrics_hit_done(w->mw, h->start_ns);
        h->reply_len = hit_format(w, h->uid, h->verb, h->op, &h->res, h->rule, h->reply,
                                  sizeof(h->reply));
    }
    h->done = true;
}

static void hit_on_store(void *arg, const struct store_reply *rep)
{
    struct hit *h = arg;
    struct worker *w = h->w;
    struct conn *c = h->c;
    const struct reload_state *st;
    int r;

    urcu_memb_read_lock();
    st = reload_current(w->s->o.reload);
    r = hit_resume(w, h, st, rep);
    if (r != 0)
        hit_finish(w, h, st->rules, r);
    urcu_memb_read_unlock();
    if (r == 0)
        return;                 /* waits for the next rule */
    c->n_waiting--;
    conn_pend_flush(c);
    /* Written (and a dead connection freed) by the flush event, not here. */
    conn_mark_dirty(c);
}

/* A request on a config that uses Redis; inside the RCU section of @st. */
static void hit_start(struct conn *c, const struct proto_req *req, const struct reload_state *st)
{
    struct worker *w = c->w;
    struct rules_req rq;
    struct hit *h;
    int r;

    h = hit_get(w);
    if (!h) {
        reply_err(c, PROTO_E_UNKNOWN, "out of memory");
        return;
    }
    h->c = c;
    h->verb = req->verb;
    h->op = op_of(req->verb);
    h->start_ns = metrics_clock_ns();
    h->n = req->amount;
    h->privileged = c->privileged;
    h->uid = c->uid;
    h->deadline = store_deadline(w->s->o.store, clock_now_ms());
    h->generation = st->generation;
    h->req = req;
    rq = hit_rq(h);
    h->n_path = rules_match(st->rules, &rq, h->path);
    h->pos = 0;
    r = hit_run(w, h, st->rules);
    if (r == 0) {
        /* It waits: keep the request (the scratch is reused) and take a slot. */
        memcpy(&h->own, req, sizeof(*req));
        for (unsigned i = 0; i < req->n_kv; i++) {
            h->own.kv[i].key = h->own.buf + (req->kv[i].key - req->buf);
            h->own.kv[i].value = h->own.buf + (req->kv[i].value - req->buf);
        }
        h->req = &h->own;
        if (c->pend_tail)
            c->pend_tail->next = h;
        else
            c->pend_head = h;
        c->pend_tail = h;
        c->n_pend++;
        c->n_waiting++;
        return;
    }
    hit_finish(w, h, st->rules, r);
    out_append(c, h->reply, h->reply_len);
    hit_put(w, h);
}

static void do_explain(struct conn *c, const struct proto_req *req)
{
    struct rules_req rq = { .kv = req->kv, .n_kv = req->n_kv, .privileged = c->privileged };
    uint32_t path[RULES_MATCH_MAX];
    char line[2 * PROTO_LINE_MAX], text[PROTO_LINE_MAX];
    const struct reload_state *st;
    struct rules_rule r;
    size_t n_path, k = 0, pos;
    uint32_t last;

    urcu_memb_read_lock();
    st = reload_current(c->w->s->o.reload);
    n_path = rules_match(st->rules, &rq, path);
    last = path[n_path - 1];
    pos = 0;
    append_fmt(line, sizeof(line), &pos, "OK %u\n", last + 1);
    reply_text(c, line);
    for (uint32_t i = 0; i <= last && !c->dead; i++) {
        const char *verdict = "no-match";

        if (rules_get(st->rules, i, &r) < 0)
            break;
        text[0] = '\0';
        if (k < n_path && path[k] == i) {
            verdict = i == last ? "decides" : policy_name(r.policy);
            k++;
        } else if (rules_why_not(st->rules, i, &rq, text, sizeof(text)) < 0) {
            snprintf(text, sizeof(text), "%s", "(reason too long)");
        }
        pos = 0;
        append_fmt(line, sizeof(line), &pos, "rule=%u id=%s verdict=%s match=", i, r.id_str,
                   verdict);
        {
            char desc[PROTO_LINE_MAX];

            if (rules_describe(st->rules, i, desc, sizeof(desc)) < 0)
                snprintf(desc, sizeof(desc), "%s", "(too long)");
            append_quoted(line, sizeof(line), &pos, desc);
        }
        append_fmt(line, sizeof(line), &pos, " reason=");
        append_quoted(line, sizeof(line), &pos, text);
        append_fmt(line, sizeof(line), &pos, "\n");
        reply_text(c, line);
    }
    urcu_memb_read_unlock();
}

static void do_rules(struct conn *c)
{
    char line[2 * PROTO_LINE_MAX], desc[PROTO_LINE_MAX], actor[PROTO_LINE_MAX];
    const struct reload_state *st;
    struct rules_rule r;
    size_t n, pos;

    urcu_memb_read_lock();
    st = reload_current(c->w->s->o.reload);
    n = rules_count(st->rules);
    pos = 0;
    append_fmt(line, sizeof(line), &pos, "OK %zu\n", n);
    reply_text(c, line);
    for (uint32_t i = 0; i < n && !c->dead; i++) {
        if (rules_get(st->rules, i, &r) < 0)
            break;
        if (rules_describe(st->rules, i, desc, sizeof(desc)) < 0)
            snprintf(desc, sizeof(desc), "%s", "(too long)");
        if (rules_actor_keys(st->rules, i, actor, sizeof(actor)) < 0)
            snprintf(actor, sizeof(actor), "%s", "(too long)");
        pos = 0;
        append_fmt(line, sizeof(line), &pos, "rule=%u id=%s label=", i, r.id_str);
        append_quoted(line, sizeof(line), &pos, r.label);
        append_fmt(line, sizeof(line), &pos, " match=");
        append_quoted(line, sizeof(line), &pos, desc);
        append_fmt(line, sizeof(line), &pos,
                   " credit_limit=%lld reset_seconds=%lld algorithm=%s policy=%s source=%s"
                   " fast_path=%s store=%s actor=",
                   (long long)r.credit_limit, (long long)r.reset_seconds, algo_name(r.algo),
                   policy_name(r.policy),
                   r.source == RULES_SOURCE_PRIVILEGED ? "privileged" : "any",
                   r.fast_path ? "true" : "false", store_name(r.store));
        append_quoted(line, sizeof(line), &pos, actor);
        append_fmt(line, sizeof(line), &pos, "\n");
        reply_text(c, line);
    }
    urcu_memb_read_unlock();
}

static void do_stats(struct conn *c)
{
    struct srv *s = c->w->s;
    struct wstats sum = { 0 };
    struct table_stats fast, priv, prv;
    struct store_stats rs = { 0 };
    uint64_t gen, n_rules, ok, rejected, now = clock_now_ms();
    const struct reload_state *st;
    struct admit_stats as;
    char buf[4096], admit_text[1024];
    size_t pos = 0, n_admit;

    for (unsigned i = 0; i < s->o.workers; i++) {
        const struct wstats *ws = &s->workers[i].st;

        sum.hits += stat_get(&ws->hits);
        sum.accepted += stat_get(&ws->accepted);
        sum.rejected += stat_get(&ws->rejected);
        sum.canary_accepted += stat_get(&ws->canary_accepted);
        sum.canary_rejected += stat_get(&ws->canary_rejected);
        sum.errors += stat_get(&ws->errors);
        sum.table_full += stat_get(&ws->table_full);
        sum.redis_fallbacks += stat_get(&ws->redis_fallbacks);
        sum.lease_fetches += stat_get(&ws->lease_fetches);
        sum.refill_hints += stat_get(&ws->refill_hints);
        sum.refill_dropped += stat_get(&ws->refill_dropped);
    }
    urcu_memb_read_lock();
    st = reload_current(s->o.reload);
    gen = st->generation;
    n_rules = rules_count(st->rules);
    urcu_memb_read_unlock();
    reload_counts(s->o.reload, &ok, &rejected);
    table_stats(s->o.fast, now, &fast);
    table_stats(s->o.priv, now, &priv);
    table_stats(s->o.privileged, now, &prv);
    if (s->o.store)
        store_stats(s->o.store, &rs);
    admit_stats(s->admit, &as);
    n_admit = admit_stats_text(s->admit, admit_text, sizeof(admit_text));
    append_fmt(buf, sizeof(buf), &pos,
               "OK %zu\nuptime_seconds=%llu\nconnections=%llu\nhits_total=%llu\n"
               "hits_accepted=%llu\nhits_rejected=%llu\nhits_canary_accepted=%llu\n"
               "hits_canary_rejected=%llu\nerrors_total=%llu\nreloads_ok=%llu\n"
               "reloads_rejected=%llu\nconfig_generation=%llu\nrules=%llu\n"
               "table_slots=%llu\ntable_live=%llu\nfast_table_slots=%llu\n"
               "fast_table_live=%llu\ntable_full_events=%llu\nfast_path_hits=%llu\n",
               31 + n_admit, (unsigned long long)((now - s->started_ms) / 1000),
               (unsigned long long)(as.tcp_conns + as.unix_conns + as.reserve_conns),
               (unsigned long long)sum.hits, (unsigned long long)sum.accepted,
               (unsigned long long)sum.rejected, (unsigned long long)sum.canary_accepted,
               (unsigned long long)sum.canary_rejected, (unsigned long long)sum.errors,
               (unsigned long long)ok, (unsigned long long)rejected,
               (unsigned long long)gen, (unsigned long long)n_rules,
               (unsigned long long)priv.slots, (unsigned long long)priv.live,
               (unsigned long long)fast.slots, (unsigned long long)fast.live,
               (unsigned long long)(sum.table_full + table_fast_full(s->o.fast)),
               (unsigned long long)table_fast_hits(s->o.fast));
    /* docs/redis.md "Monitoring": state unused (no rule needs Redis), up, down. */
    append_fmt(buf, sizeof(buf), &pos,
               "redis_state=%s\nredis_connections=%u\nredis_requests=%llu\nredis_errors=%llu\n"
               "redis_timeouts=%llu\nredis_breaker_trips=%llu\nredis_fallbacks=%llu\n"
               "redis_lease_fetches=%llu\nredis_noscript=%llu\nredis_refill_hints=%llu\n"
               "redis_refill_hints_dropped=%llu\n",
               !rs.wanted ? "unused" : rs.breaker_open ? "down" : "up", rs.conns_up,
               (unsigned long long)rs.requests, (unsigned long long)rs.errors,
               (unsigned long long)rs.timeouts, (unsigned long long)rs.trips,
               (unsigned long long)sum.redis_fallbacks, (unsigned long long)sum.lease_fetches,
               (unsigned long long)rs.noscript, (unsigned long long)sum.refill_hints,
               (unsigned long long)sum.refill_dropped);
    append_fmt(buf, sizeof(buf), &pos, "privileged_table_slots=%llu\nprivileged_table_live=%llu\n",
               (unsigned long long)prv.slots, (unsigned long long)prv.live);
    append_fmt(buf, sizeof(buf), &pos, "%s", admit_text);
    reply_text(c, buf);
}

static void do_reload(struct conn *c)
{
    char who[64], err[DIAG_FILE_MAX + DIAG_MSG_MAX + 64], line[PROTO_REPLY_MAX];
    uint64_t gen;
    size_t n_rules;

    if (!c->privileged) {
        reply_err(c, PROTO_E_FORBIDDEN, "RELOAD needs root or the admin group on the Unix socket");
        return;
    }
    snprintf(who, sizeof(who), "RELOAD by uid %u", (unsigned)c->uid);
    if (reload_run(c->w->s->o.reload, who, &gen, &n_rules, err, sizeof(err)) < 0) {
        reply_err(c, PROTO_E_RELOAD_FAILED, err);
        return;
    }
    snprintf(line, sizeof(line), "OK reloaded generation=%llu rules=%zu\n",
             (unsigned long long)gen, n_rules);
    reply_text(c, line);
}

/* ---- COUNTERS: live counters for divvyctl top/locked --------------------- */

#define COUNTERS_DEFAULT   100
#define COUNTERS_MAX       10000
#define COUNTERS_SCAN_MAX  (1u << 20)

struct counter_row {
    uint32_t rule;              /* index in the current rules */
    uint64_t credit;
    uint64_t used;
    uint64_t reset_ms;          /* until the quota is full again */
    uint64_t retry_ms;          /* until the next credit (algo_retry_ms()) */
    char actor[40];             /* stored actor (<= 32 bytes) or "#<digest hex>" */
};

struct counters_scan {
    const struct rules *rules;
    const uint64_t *ids;        /* rule ids sorted, ... */
    const uint32_t *idx;        /* ... and their indexes */
    size_t n_ids;
    int64_t only_rule;          /* -1: all */
    bool exhausted;
    uint64_t now;
    struct counter_row *rows;
    size_t n, cap;
};

static int find_rule_id(const struct counters_scan *cs, uint64_t id)
{
    size_t lo = 0, hi = cs->n_ids;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (cs->ids[mid] == id)
            return (int)cs->idx[mid];
        if (cs->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static int collect_counter(const struct table_entry *e, void *userdata)
{
    struct counters_scan *cs = userdata;
    struct counter_row *row;
    struct rules_rule r;
    int idx = find_rule_id(cs, e->rule_id);
    uint64_t limit, used, retry_ms;

    /* Counters of rules a reload removed are not reported. */
    if (idx < 0 || (cs->only_rule >= 0 && idx != cs->only_rule) ||
        rules_get(cs->rules, (uint32_t)idx, &r) < 0)
        return 0;
    limit = (uint64_t)r.credit_limit;
    retry_ms = 0;
    if (e->lease) {
        /* A lease: what the pool lacks, as this host last saw it. */
        used = e->lease_left + e->lease_remain < limit ? limit - e->lease_left - e->lease_remain
                                                       : 0;
    } else {
        /* As a hit would see the counter now: a bucket's refills and a sliding
         * window's slide count (the stored word is as of the last write). */
        struct algo_state stv = { .idle = e->expires_ms, .data = e->data };
        struct table_limits lim;
        struct table_result res;

        eval_limits(&r, &lim);
        lim.algo = e->algo;
        if (algo_check(&lim) < 0)
            return 0;
        algo_apply(&lim, TABLE_PEEK, 0, cs->now, &stv, &stv, &res);
        used = limit - (res.credit < limit ? res.credit : limit);
        retry_ms = algo_retry_ms(&lim, cs->now, &stv);
    }
    if (used > limit)
        used = limit;
    if (e->lease && used >= limit)
        retry_ms = e->expires_ms > cs->now ? e->expires_ms - cs->now : 0;
    if (cs->exhausted && used < limit)
        return 0;
    if (cs->n == cs->cap) {
        size_t cap = cs->cap ? cs->cap * 2 : 256;
        struct counter_row *grown;

        if (cap > COUNTERS_SCAN_MAX)
            return 1;
        grown = realloc(cs->rows, cap * sizeof(*grown));
        if (!grown)
            return 1;
        cs->rows = grown;
        cs->cap = cap;
    }
    row = &cs->rows[cs->n++];
    row->rule = (uint32_t)idx;
    row->used = used;
    row->credit = limit - used;
    row->reset_ms = e->expires_ms > cs->now ? e->expires_ms - cs->now : 0;
    row->retry_ms = retry_ms;
    if (e->actor_is_digest) {
        size_t pos = 0;

        row->actor[pos++] = '#';
        for (size_t i = 0; i < e->actor_len && pos + 3 <= sizeof(row->actor); i++)
            pos += (size_t)snprintf(row->actor + pos, sizeof(row->actor) - pos, "%02x",
                                    (unsigned char)e->actor[i]);
        row->actor[pos] = '\0';
    } else {
        size_t len = e->actor_len < sizeof(row->actor) - 1 ? e->actor_len
                                                            : sizeof(row->actor) - 1;

        memcpy(row->actor, e->actor, len);
        row->actor[len] = '\0';
    }
    return 0;
}

/* Least credit first, then most used, then rule order. */
static int row_cmp(const void *a, const void *b)
{
    const struct counter_row *x = a, *y = b;

    if (x->credit != y->credit)
        return x->credit < y->credit ? -1 : 1;
    if (x->used != y->used)
        return x->used > y->used ? -1 : 1;
    return x->rule < y->rule ? -1 : x->rule > y->rule;
}

static int id_cmp(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;

    return *x < *y ? -1 : *x > *y;
}

static void do_counters(struct conn *c, const struct proto_req *req)
{
    struct counters_scan cs = { .only_rule = -1, .now = clock_now_ms() };
    const struct proto_kv *kv;
    const struct reload_state *st;
    uint64_t *pairs = NULL;         /* (id, index) packed for sorting */
    uint64_t *ids = NULL;
    uint32_t *idx = NULL;
    struct rules_rule r;
    unsigned long max = COUNTERS_DEFAULT;
    char line[512], *end;
    size_t n_rules, pos;

    if (!c->privileged) {
        reply_err(c, PROTO_E_FORBIDDEN,
                  "COUNTERS needs root or the admin group on the Unix socket");
        return;
    }
    for (unsigned i = 0; i < req->n_kv; i++) {
        kv = &req->kv[i];
        if (strcmp(kv->key, "max") == 0) {
            errno = 0;
            max = strtoul(kv->value, &end, 10);
            if (errno || *end || max == 0 || max > COUNTERS_MAX) {
                reply_err(c, PROTO_E_BAD_REQUEST, "max must be 1..10000");
                return;
            }
        } else if (strcmp(kv->key, "exhausted") == 0) {
            cs.exhausted = strcmp(kv->value, "true") == 0;
        } else if (strcmp(kv->key, "rule") != 0) {
            reply_err(c, PROTO_E_BAD_REQUEST, "COUNTERS takes rule=, max= and exhausted=");
            return;
        }
    }
    urcu_memb_read_lock();
    st = reload_current(c->w->s->o.reload);
    cs.rules = st->rules;
    n_rules = rules_count(st->rules);
    pairs = malloc(n_rules * 2 * sizeof(*pairs));
    ids = malloc(n_rules * sizeof(*ids));
    idx = malloc(n_rules * sizeof(*idx));
    if (!pairs || !ids || !idx) {
        reply_err(c, PROTO_E_UNKNOWN, "out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < n_rules; i++) {
        if (rules_get(st->rules, i, &r) < 0)
            continue;
        pairs[2 * i] = r.id;
        pairs[2 * i + 1] = i;
        kv = proto_find(req, "rule", 4);
        if (kv && (strcmp(kv->value, r.id_str) == 0 || strcmp(kv->value, r.label) == 0))
            cs.only_rule = i;
    }
    kv = proto_find(req, "rule", 4);
    if (kv && cs.only_rule < 0) {
        reply_err(c, PROTO_E_BAD_REQUEST, "no rule with that label or id");
        goto out;
    }
    qsort(pairs, n_rules, 2 * sizeof(*pairs), id_cmp);
    for (size_t i = 0; i < n_rules; i++) {
        ids[i] = pairs[2 * i];
        idx[i] = (uint32_t)pairs[2 * i + 1];
    }
    cs.ids = ids;
    cs.idx = idx;
    cs.n_ids = n_rules;
    table_foreach(c->w->s->o.fast, cs.now, collect_counter, &cs);
    table_foreach(c->w->s->o.priv, cs.now, collect_counter, &cs);
    table_foreach(c->w->s->o.privileged, cs.now, collect_counter, &cs);
    if (cs.n > 1)
        qsort(cs.rows, cs.n, sizeof(*cs.rows), row_cmp);
    if (cs.n < max)
        max = cs.n;
    snprintf(line, sizeof(line), "OK %lu\n", max);
    reply_text(c, line);
    for (size_t i = 0; i < max && !c->dead; i++) {
        const struct counter_row *row = &cs.rows[i];

        if (rules_get(st->rules, row->rule, &r) < 0)
            continue;
        pos = 0;
        append_fmt(line, sizeof(line), &pos, "rule=%s actor=", r.id_str);
        append_quoted(line, sizeof(line), &pos, row->actor);
        append_fmt(line, sizeof(line), &pos,
                   " credit=%llu used=%llu limit=%lld reset_seconds=%llu retry_seconds=%llu\n",
                   (unsigned long long)row->credit, (unsigned long long)row->used,
                   (long long)r.credit_limit, (unsigned long long)eval_ms_to_s(row->reset_ms),
                   (unsigned long long)(row->retry_ms / 1000 + (row->retry_ms % 1000 != 0)));
        reply_text(c, line);
    }
out:
    urcu_memb_read_unlock();
    free(cs.rows);
    free(pairs);
    free(ids);
    free(idx);
}

/*
 * REFILL rule=<id> index=<n> actor=<actor> (docs/protocol.md): libdivvy's
 * fast path saw the lease of that fast_path lease counter fall below its
 * low-water mark with nobody fetching.  Claims the refill (FETCH) and
 * fetches in the background, as for a hit of our own.  Never answered, not
 * even with ERR, so the client need not wait; a hint that names no such
 * rule (a reload in between), or a lease that needs nothing, is dropped
 * and counted.
 */
static void do_refill(struct conn *c, const struct proto_req *req)
{
    struct worker *w = c->w;
    const struct proto_kv *rk = proto_find(req, "rule", 4), *ik = proto_find(req, "index", 5),
                          *ak = proto_find(req, "actor", 5);
    const struct reload_state *st;
    struct table_limits lim;
    struct rules_rule r;
    struct table_key tk;
    uint64_t want = 0, now = clock_now_ms();
    unsigned long idx;
    char *end;
    int rc, klen;
    bool sent;

    stat_inc(&w->st.refill_hints);
    if (req->err != PROTO_E_NONE || !rk || !ik || !ak || !w->sc)
        goto dropped;
    errno = 0;
    idx = strtoul(ik->value, &end, 10);
    if (errno || *end || ik->value_len == 0 || idx > UINT32_MAX)
        goto dropped;
    urcu_memb_read_lock();
    st = reload_current(w->s->o.reload);
    if (rules_get(st->rules, (uint32_t)idx, &r) < 0 || strcmp(r.id_str, rk->value) != 0 ||
        r.store != RULES_STORE_LEASE || !r.fast_path || eval_zero(&r, &(struct eval_outcome){ 0 })) {
        urcu_memb_read_unlock();
        goto dropped;
    }
    lease_limits(w, &r, &lim);
    tk.rule_id = r.id;
    tk.actor = ak->value;
    tk.actor_len = ak->value_len;
    rc = table_lease_refill_claim(w->s->o.fast, &tk, &lim, now, &want);
    sent = false;
    if (rc > 0) {
        /* Claimed: released again when the fetch cannot be sent (breaker open). */
        klen = store_key(w->s->o.store, r.id_str, ak->value, ak->value_len, w->key_buf,
                         w->key_cap);
        if (klen > 0)
            sent = lease_refill(w, w->s->o.fast, &lim, &r, ak->value, ak->value_len,
                                w->key_buf, (size_t)klen, want);
        else
            table_lease_abort(w->s->o.fast, &tk, &lim, now);
    }
    urcu_memb_read_unlock();
    if (sent)
        return;
dropped:
    stat_inc(&w->st.refill_dropped);
}

static int conn_flush(struct conn *c);

/* FAST (docs/protocol.md): the memfds ride on the reply's first byte, so
 * every earlier reply must be on its way first. */
static void do_fast(struct conn *c)
{
    int r;

    if (!c->is_unix || !c->w->s->o.fastfd) {
        reply_err(c, PROTO_E_FORBIDDEN, "the fast path is only for Unix-socket peers");
        return;
    }
    if (c->pend_head || conn_flush(c) != 1) {
        reply_err(c, PROTO_E_BUSY, "FAST must not follow unanswered requests");
        c->closing = true;              /* as every busy reply */
        return;
    }
    r = fastfd_send(c->w->s->o.fastfd, c->fd);
    if (r == -EPERM)
        reply_err(c, PROTO_E_FORBIDDEN, "not in the fast-path group");
    else if (r < 0)
        c->dead = true;
}

static void handle_request(struct conn *c, const struct proto_req *req)
{
    /* Before the error check: a REFILL is never answered, not even with ERR. */
    if (req->verb == PROTO_REFILL) {
        do_refill(c, req);
        return;
    }
    if (req->err != PROTO_E_NONE) {
        reply_err(c, req->err, req->reason);
        return;
    }
    switch (req->verb) {
    case PROTO_NONE:
        break;
    case PROTO_HIT:
    case PROTO_TAKE:
    case PROTO_PEEK:
    case PROTO_RESET:
        do_hit(c, req);
        break;
    case PROTO_EXPLAIN:
        do_explain(c, req);
        break;
    case PROTO_RULES:
        do_rules(c);
        break;
    case PROTO_STATS:
        do_stats(c);
        break;
    case PROTO_RELOAD:
        do_reload(c);
        break;
    case PROTO_PING:
        reply_text(c, "OK pong\n");
        break;
    case PROTO_QUIT:
        reply_text(c, "OK bye\n");
        c->closing = true;
        break;
    case PROTO_COUNTERS:
        do_counters(c, req);
        break;
    case PROTO_REFILL:
        break;                          /* handled above */
    case PROTO_FAST:
        do_fast(c);
        break;
    }
}

/* Answers every complete line in the input buffer. */
static void process_input(struct conn *c, bool eof)
{
    struct worker *w = c->w;
    size_t off = 0;
    ssize_t r;

    while (off < c->in_len && !c->closing && !c->dead && !c->out_paused) {
        /* Enough hits wait for Redis: leave the rest until they are answered. */
        if (c->n_pend >= CONN_PEND_MAX) {
            if (!c->paused) {
                c->paused = true;
                event_del(c->rev);
            }
            break;
        }
        if (c->discarding) {
            char *nl = memchr(c->in + off, '\n', c->in_len - off);

            if (!nl) {
                off = c->in_len;
                break;
            }
            off = (size_t)(nl - c->in) + 1;
            c->discarding = false;
            continue;
        }
        /* A client that does not read its replies is dropped, not buffered forever. */
        if (c->out_len - c->out_off + c->pend_bytes > w->s->o.max_output_bytes) {
            log_ratelimited(&rl_accept, LOG_WARNING,
                            "dropping a client with %zu unread reply bytes (limit %zu)",
                            c->out_len - c->out_off + c->pend_bytes, w->s->o.max_output_bytes);
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
        r = proto_parse(c->in + off, c->in_len - off, &w->req);
        if (r == 0) {
            if (!eof)
                break;
            /* EOF after an unterminated last line: answer it as if terminated. */
            if (c->in_len < IN_CAP) {
                c->in[c->in_len++] = '\n';
                continue;
            }
            break;
        }
        if (r == -EMSGSIZE) {
            /* Skip to the end of this line; requests after it are still answered. */
            reply_err(c, PROTO_E_LINE_TOO_LONG, "request line longer than 4096 bytes");
            c->discarding = true;
            continue;
        }
        if (r < 0) {
            reply_err(c, PROTO_E_UNKNOWN, "unparseable input");
            c->dead = true;
            return;
        }
        handle_request(c, &w->req);
        off += (size_t)r;
    }
    if (off > 0) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
}

/* Writes what is pending; arms the write event if the socket is full.
 * Returns 1 when everything is written, 0 when some is pending, -errno. */
static int conn_flush(struct conn *c)
{
    bool progress = false;
    ssize_t n;

    while (c->out_off < c->out_len) {
        n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                /* The slow-output timeout counts from the last progress. */
                if (progress || !c->stall_ms)
                    c->stall_ms = clock_coarse_ms();
                event_add(c->wev, NULL);
                return 0;
            }
            return -errno;
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
    if (c->out_paused || c->paused || c->dead)
        return;
    if (c->eof)
        c->closing = true;
    else if (!c->closing && c->rev)
        event_add(c->rev, NULL);
}

/* Dead, but store callbacks still point at it: close the socket now, free
 * the connection once the last one has run (on_flush). */
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
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
}

/* End of every callback: the only place a connection is freed. */
static void conn_settle(struct conn *c)
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
        if (r < 0 || (r > 0 && c->closing && !c->pend_head))
            c->dead = true;
    }
    if (!c->dead)
        conn_charge(c);
    if (c->dead) {
        if (c->n_waiting > 0)
            conn_zombie(c);
        else
            conn_free(c);
    }
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    ssize_t n;

    (void)what;
    n = read(fd, c->in + c->in_len, IN_CAP - c->in_len);
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
        if (!c->paused && !c->out_paused)
            c->closing = true;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        c->dead = true;
    }
    conn_settle(c);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    (void)fd;
    (void)what;
    conn_settle(c);
}

/* Right after accept(), before admission: the reserve is for privileged peers. */
static void peer_privilege(int fd, gid_t admin_gid, struct admit_peer *p)
{
    if (peer_cred(fd, admin_gid, &p->uid, &p->privileged) < 0) {
        p->uid = (uid_t)-1;
        p->privileged = false;
    }
}

/* Takes ownership of @fd and of the place @slot holds. */
static void conn_new(struct worker *w, int fd, const struct listener *l,
                     const struct admit_peer *p, struct admit_slot *slot)
{
    struct conn *c;
    int one = 1, sockbuf = (int)w->s->o.admit.sockbuf;

    c = calloc(1, sizeof(*c));
    if (!c)
        goto fail;
    c->w = w;
    c->fd = fd;
    c->is_unix = l->is_unix;
    c->uid = l->is_unix ? p->uid : (uid_t)-1;
    c->privileged = l->is_unix && p->privileged;
    c->slot = *slot;
    memset(slot, 0, sizeof(*slot));
    c->last_ms = clock_coarse_ms();
    if (!l->is_unix)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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
    log_ratelimited(&rl_accept, LOG_ERR, "out of memory for a new connection");
    if (c) {
        if (c->rev)
            event_free(c->rev);
        if (c->wev)
            event_free(c->wev);
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
        event_del(w->lev[i]);
    event_add(w->resume_ev, &tv);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;

    (void)fd;
    (void)what;
    if (w->stopping)
        return;
    for (size_t i = 0; i < w->s->n_lis; i++)
        event_add(w->lev[i], NULL);
}

/* Tells a refused client why (best effort) and closes it. */
static void refuse(struct worker *w, int fd, const struct listener *l, enum admit_refusal why)
{
    static const char busy[] = "ERR busy \"too many connections\"\n";
    static const char busy_peer[] = "ERR busy \"too many connections from this peer\"\n";
    bool peer = why == ADMIT_R_PER_ADDRESS || why == ADMIT_R_PER_UID;

    if (send(fd, peer ? busy_peer : busy, peer ? sizeof(busy_peer) - 1 : sizeof(busy) - 1,
             MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* The refused client may already be gone; nothing to tell. */
    }
    close(fd);
    metrics_error(w->mw, PROTO_E_BUSY);
    log_ratelimited(&rl_accept, LOG_WARNING, "connection on %s refused: server.%s reached",
                    l->name, admit_refusal_name(why));
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
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
        if (l->is_unix)
            peer_privilege(fd, s->o.admin_gid, &p);
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
        conn_new(w, fd, l, &p, &slot);
    }
}

/* Closes the connections whose timeout (admit.h) has expired.  A connection
 * whose hits wait for Redis is left to redis.timeout_ms; one paused for the
 * output budget is judged by its output, not by the input we left unread. */
static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct admit *a = w->s->admit;
    uint64_t now = clock_coarse_ms();
    struct conn *c, *next;

    (void)fd;
    (void)what;
    for (c = w->conns; c; c = next) {
        bool pending, partial, idle;
        int why;

        next = c->next;
        if (c->dead || c->fd < 0 || c->n_pend > 0 || c->paused)
            continue;
        pending = c->out_off < c->out_len;
        partial = !c->out_paused && (c->in_len > 0 || c->discarding);
        idle = !pending && !partial && !c->out_paused;
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
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct conn *c;

    (void)fd;
    (void)what;
    w->flush_active = false;
    while ((c = w->dirty) != NULL) {
        w->dirty = c->dirty_next;
        c->dirty = false;
        if (c->paused && !c->dead && c->n_pend < CONN_PEND_MAX / 2) {
            c->paused = false;
            process_input(c, c->eof);
            if (!c->paused && !c->out_paused) {
                if (c->eof)
                    c->closing = true;
                else if (!c->closing && c->rev)
                    event_add(c->rev, NULL);
            }
        }
        conn_settle(c);
    }
}

/* ---- workers --------------------------------------------------------------- */

static void on_grace(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;

    (void)fd;
    (void)what;
    event_base_loopbreak(w->base);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct timeval tv = { STOP_GRACE_MS / 1000, (STOP_GRACE_MS % 1000) * 1000 };
    struct conn *c, *next;

    (void)fd;
    (void)what;
    w->stopping = true;
    for (size_t i = 0; i < w->s->n_lis; i++)
        event_del(w->lev[i]);
    event_del(w->resume_ev);
    event_del(w->sweep_ev);
    /* Requests already read were answered when they arrived; flush, then close. */
    for (c = w->conns; c; c = next) {
        next = c->next;
        if (c->rev)
            event_del(c->rev);
        c->closing = true;
        conn_settle(c);
    }
    if (!w->conns) {
        event_base_loopbreak(w->base);
        return;
    }
    event_add(w->grace_ev, &tv);
}

/* The watchdog's probe, run by the worker's own loop: proof that it turns. */
static void on_ping(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;

    (void)fd;
    (void)what;
    __atomic_store_n(&w->pong, __atomic_load_n(&w->s->ping, __ATOMIC_RELAXED), __ATOMIC_RELEASE);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;

    urcu_memb_register_thread();
    event_base_dispatch(w->base);
    /* Hits still waiting are answered by on_redis_error before anything is
     * freed, and their replies get one last chance to be written. */
    store_conn_free(w->sc);
    w->sc = NULL;
    for (struct conn *c = w->conns; c; c = c->next) {
        if (!c->dead && c->fd >= 0)
            conn_flush(c);
    }
    while (w->conns)
        conn_free(w->conns);
    hits_free(w);
    urcu_memb_unregister_thread();
    return NULL;
}

static int worker_init(struct srv *s, struct worker *w, unsigned id)
{
    unsigned sweep_ms;
    int r;

    w->s = s;
    w->id = id;
    w->mw = metrics_worker(s->o.metrics, id);
    w->base = event_base_new();
    if (!w->base)
        return -ENOMEM;
    w->lev = calloc(s->n_lis, sizeof(*w->lev));
    if (!w->lev)
        return -ENOMEM;
    for (size_t i = 0; i < s->n_lis; i++) {
        w->lev[i] = event_new(w->base, s->lis[i].fd, EV_READ | EV_PERSIST, on_accept, w);
        if (!w->lev[i] || event_add(w->lev[i], NULL) < 0)
            return -ENOMEM;
    }
    w->stop_ev = event_new(w->base, -1, 0, on_stop, w);
    w->resume_ev = evtimer_new(w->base, on_resume, w);
    w->grace_ev = evtimer_new(w->base, on_grace, w);
    w->flush_ev = event_new(w->base, -1, 0, on_flush, w);
    w->ping_ev = event_new(w->base, -1, 0, on_ping, w);
    w->sweep_ev = event_new(w->base, -1, EV_PERSIST, on_sweep, w);
    if (!w->stop_ev || !w->resume_ev || !w->grace_ev || !w->flush_ev || !w->ping_ev ||
        !w->sweep_ev)
        return -ENOMEM;
    sweep_ms = admit_sweep_ms(s->admit);
    if (sweep_ms > 0) {
        struct timeval tv = { sweep_ms / 1000, (sweep_ms % 1000) * 1000 };

        if (event_add(w->sweep_ev, &tv) < 0)
            return -ENOMEM;
    }
    if (s->o.store) {
        w->key_cap = store_key_max(s->o.store, RULES_ACTOR_MAX);
        w->actor_buf = malloc(RULES_ACTOR_MAX);
        w->key_buf = malloc(w->key_cap);
        if (!w->actor_buf || !w->key_buf)
            return -ENOMEM;
        r = store_conn_new(s->o.store, w->base, &w->sc);
        if (r < 0)
            return r;
    }
    return 0;
}

static void worker_fini(struct worker *w)
{
    if (w->lev) {
        for (size_t i = 0; i < w->s->n_lis; i++)
            if (w->lev[i])
                event_free(w->lev[i]);
        free(w->lev);
    }
    if (w->stop_ev)
        event_free(w->stop_ev);
    if (w->resume_ev)
        event_free(w->resume_ev);
    if (w->grace_ev)
        event_free(w->grace_ev);
    if (w->ping_ev)
        event_free(w->ping_ev);
    if (w->sweep_ev)
        event_free(w->sweep_ev);
    store_conn_free(w->sc);     /* NULL after a run; set when srv_run never ran */
    w->sc = NULL;
    if (w->flush_ev)
        event_free(w->flush_ev);
    free(w->actor_buf);
    free(w->key_buf);
    if (w->base)
        event_base_free(w->base);
}

/* ---- server ---------------------------------------------------------------- */

int srv_new(const struct srv_opts *opts, struct srv **ret)
{
    struct srv *s;
    int r;

    if (opts->workers == 0 || opts->n_listen + opts->n_inherited == 0)
        return -EINVAL;
    if (evthread_use_pthreads() < 0)
        return -ENOMEM;
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->o = *opts;
    /* Descriptors besides connections: listeners, Redis, metrics, epoll, ... */
    s->o.admit.fd_reserve = 64 + 8 * opts->workers + (unsigned)(opts->n_listen + opts->n_inherited);
    r = admit_new(&s->o.admit, &s->admit);
    if (r < 0)
        goto fail;
    s->lis = calloc(opts->n_listen + opts->n_inherited, sizeof(*s->lis));
    s->workers = calloc(opts->workers, sizeof(*s->workers));
    if (!s->lis || !s->workers) {
        r = -ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < opts->n_listen; i++) {
        /* systemd already holds it: adopted below. */
        if (notify_listeners_find(opts->inherited, opts->n_inherited, opts->listen[i]) >= 0)
            continue;
        r = listener_open(s, opts->listen[i], &s->lis[s->n_lis]);
        s->n_lis++;
        if (r < 0) {
            errno = -r;
            log_msg(LOG_ERR, "cannot listen on %s: %m", opts->listen[i]);
            goto fail;
        }
        log_msg(LOG_NOTICE, "listening on %s", s->lis[s->n_lis - 1].name);
    }
    for (size_t i = 0; i < opts->n_inherited; i++) {
        struct listener *l = &s->lis[s->n_lis++];
        struct notify_listener *nl = &opts->inherited[i];

        /* No path: a socket systemd created is never unlinked by us. */
        l->fd = nl->fd;
        nl->fd = -1;
        l->is_unix = nl->is_unix;
        l->name = strdup(nl->address);
        if (!l->name) {
            r = -ENOMEM;
            goto fail;
        }
        log_msg(LOG_NOTICE, "listening on %s (socket activation%s%s)", l->name,
                nl->name[0] ? ", " : "", nl->name);
    }
    for (unsigned i = 0; i < opts->workers; i++) {
        r = worker_init(s, &s->workers[i], i);
        if (r < 0)
            goto fail;
    }
    s->started_ms = clock_now_ms();
    *ret = s;
    return 0;
fail:
    srv_free(s);
    return r;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct srv *s = arg;
    char err[DIAG_FILE_MAX + DIAG_MSG_MAX + 64];
    uint64_t gen;
    size_t n;

    (void)what;
    if (sig == SIGHUP) {
        reload_run(s->o.reload, "SIGHUP", &gen, &n, err, sizeof(err));
        return;
    }
    log_msg(LOG_NOTICE, "%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    notify_stopping();
    event_base_loopbreak(s->main_base);
}

/* What metrics cannot count itself: read in the main thread (an RCU reader). */
static void srv_gauges(struct srv *s, uint64_t now, struct metrics_gauges *g)
{
    const struct reload_state *st;

    memset(g, 0, sizeof(*g));
    admit_stats(s->admit, &g->admit);
    g->have_admit = true;
    g->connections = g->admit.tcp_conns + g->admit.unix_conns + g->admit.reserve_conns;
    urcu_memb_read_lock();
    st = reload_current(s->o.reload);
    g->config_generation = st->generation;
    g->rules = rules_count(st->rules);
    urcu_memb_read_unlock();
    reload_counts(s->o.reload, &g->reloads_ok, &g->reloads_rejected);
    table_stats(s->o.fast, now, &g->fast);
    table_stats(s->o.priv, now, &g->priv);
    table_stats(s->o.privileged, now, &g->privileged);
    g->have_fast_path_hits = true;
    g->fast_path_hits = table_fast_hits(s->o.fast);
}

/* Metrics' gauges and statsd, and systemd's STATUS= when it changed. */
static void publish(struct srv *s, uint64_t now)
{
    struct metrics_gauges g;
    char status[sizeof(s->status)];

    srv_gauges(s, now, &g);
    metrics_tick(s->o.metrics, &g, now);
    metrics_status_line(s->o.metrics, status, sizeof(status));
    if (strcmp(status, s->status) != 0) {
        notify_status("%s", status);
        memcpy(s->status, status, sizeof(status));
    }
}

/* The watchdog pings only while every worker answered the previous probe. */
static bool workers_alive(void *userdata)
{
    struct srv *s = userdata;
    bool alive = true;

    for (unsigned i = 0; i < s->o.workers; i++)
        if (__atomic_load_n(&s->workers[i].pong, __ATOMIC_ACQUIRE) != s->ping)
            alive = false;
    if (!alive)
        return false;
    __atomic_store_n(&s->ping, s->ping + 1, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < s->o.workers; i++)
        event_active(s->workers[i].ping_ev, EV_READ, 0);
    return true;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct srv *s = arg;
    uint64_t now = clock_now_ms();
    static const uint64_t every = SWEEP_EVERY_S;
    uint64_t secs = (now - s->started_ms) / 1000;

    (void)fd;
    (void)what;
    table_heartbeat(s->o.fast, now);
    publish(s, now);
    if (secs % every == 0) {
        table_sweep(s->o.fast, now);
        table_sweep(s->o.priv, now);
        table_sweep(s->o.privileged, now);
    }
}

int srv_run(struct srv *s)
{
    struct event *sig_hup = NULL, *sig_term = NULL, *sig_int = NULL, *tick = NULL;
    struct notify_watchdog *wd = NULL;
    struct timeval one_s = { 1, 0 };
    sigset_t block, old;
    int r = 0;

    s->main_base = event_base_new();
    if (!s->main_base)
        return -ENOMEM;
    sig_hup = evsignal_new(s->main_base, SIGHUP, on_signal, s);
    sig_term = evsignal_new(s->main_base, SIGTERM, on_signal, s);
    sig_int = evsignal_new(s->main_base, SIGINT, on_signal, s);
    tick = event_new(s->main_base, -1, EV_PERSIST, on_tick, s);
    if (!sig_hup || !sig_term || !sig_int || !tick || event_add(sig_hup, NULL) < 0 ||
        event_add(sig_term, NULL) < 0 || event_add(sig_int, NULL) < 0 ||
        event_add(tick, &one_s) < 0) {
        r = -ENOMEM;
        goto out;
    }
    /* Workers never take the process signals: the main loop handles them. */
    sigemptyset(&block);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    for (unsigned i = 0; i < s->o.workers; i++) {
        r = -pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]);
        if (r < 0)
            break;
        s->workers[i].started = true;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "cannot start worker threads: %m");
    } else {
        log_msg(LOG_NOTICE, "ready: %u workers", s->o.workers);
        publish(s, clock_now_ms());
        notify_ready("%s", s->status);
        if (notify_watchdog_new(s->main_base, workers_alive, s, &wd) < 0)
            log_msg(LOG_ERR, "cannot start the watchdog timer: out of memory");
        event_base_dispatch(s->main_base);
    }
    for (unsigned i = 0; i < s->o.workers; i++)
        if (s->workers[i].started)
            event_active(s->workers[i].stop_ev, EV_READ, 0);
    for (unsigned i = 0; i < s->o.workers; i++)
        if (s->workers[i].started)
            pthread_join(s->workers[i].thread, NULL);
out:
    notify_watchdog_free(wd);
    if (sig_hup)
        event_free(sig_hup);
    if (sig_term)
        event_free(sig_term);
    if (sig_int)
        event_free(sig_int);
    if (tick)
        event_free(tick);
    return r;
}

void srv_free(struct srv *s)
{
    if (!s)
        return;
    if (s->workers)
        for (unsigned i = 0; i < s->o.workers; i++)
            worker_fini(&s->workers[i]);
    free(s->workers);
    for (size_t i = 0; s->lis && i < s->n_lis; i++) {
        if (s->lis[i].fd >= 0)
            close(s->lis[i].fd);
        if (s->lis[i].path)
            unlink(s->lis[i].path);
        free(s->lis[i].path);
        free(s->lis[i].name);
    }
    free(s->lis);
    if (s->main_base)
        event_base_free(s->main_base);
    admit_free(s->admit);
    free(s);
}
