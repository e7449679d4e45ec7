/* SPDX-License-Identifier: MIT */
/*
 * srv: listeners, workers and connections of divvyd (see srv.h).
 *
 * Threads: the main thread owns signals and the maintenance timer; each
 * worker owns an event_base, its connections and its statistics.  A worker
 * touches another thread's data only through event_active() (stop) and
 * relaxed atomic counter reads (STATS).  Connections are freed at the end of
 * the callback that decided to close them, after their last use.
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

#include "clock.h"
#include "eval.h"
#include "log.h"
#include "proto.h"
#include "srv.h"

#define IN_CAP            (2 * PROTO_LINE_MAX)
#define OUT_INITIAL       4096
#define ACCEPT_BATCH      32
#define STOP_GRACE_MS     2000
#define ACCEPT_PAUSE_MS   100
#define SWEEP_EVERY_S     10
#define MAX_GROUPS        256

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
    uid_t uid;
    size_t in_len;
    char *out;
    size_t out_len, out_off, out_cap;
    char in[IN_CAP];
};

struct worker {
    struct srv *s;
    unsigned id;
    pthread_t thread;
    bool started;
    bool stopping;
    struct event_base *base;
    struct event **lev;         /* one per listener */
    struct event *stop_ev;
    struct event *resume_ev;    /* re-arms listeners after EMFILE */
    struct event *grace_ev;     /* forces the stop after STOP_GRACE_MS */
    struct conn *conns;
    struct wstats st;
    struct proto_req req;       /* parse scratch: one per worker, not on the stack */
};

struct srv {
    struct srv_opts o;
    struct listener *lis;
    size_t n_lis;
    struct worker *workers;
    struct event_base *main_base;
    uint64_t started_ms;
    uint64_t n_conns;           /* atomic */
};

static struct log_ratelimit rl_accept, rl_internal, rl_full;

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

/* "HOST:PORT" or "[V6]:PORT" -> host and port strings in @buf. */
static int split_host_port(const char *hp, char *buf, size_t size, const char **ret_host,
                           const char **ret_port)
{
    char *colon;

    if (strlen(hp) >= size)
        return -ENAMETOOLONG;
    strcpy(buf, hp);
    if (buf[0] == '[') {
        char *end = strchr(buf, ']');

        if (!end || end[1] != ':')
            return -EINVAL;
        *end = '\0';
        *ret_host = buf + 1;
        *ret_port = end + 2;
    } else {
        colon = strrchr(buf, ':');
        if (!colon)
            return -EINVAL;
        *colon = '\0';
        *ret_host = buf;
        *ret_port = colon + 1;
    }
    return **ret_port ? 0 : -EINVAL;
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

    r = split_host_port(hostport, buf, sizeof(buf), &host, &port);
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

static void conn_free(struct conn *c)
{
    struct worker *w;

    if (!c)
        return;
    w = c->w;
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
    free(c);
    __atomic_fetch_sub(&w->s->n_conns, 1, __ATOMIC_RELAXED);
    if (w->stopping && !w->conns)
        event_base_loopbreak(w->base);
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
    return 0;
}

static void out_append(struct conn *c, const char *s, size_t len)
{
    if (out_reserve(c, len) < 0) {
        c->dead = true;
        return;
    }
    memcpy(c->out + c->out_len, s, len);
    c->out_len += len;
}

static void reply_err(struct conn *c, enum proto_err err, const char *reason)
{
    char line[PROTO_REPLY_MAX];
    int n = proto_fmt_err(line, sizeof(line), err, reason);

    stat_inc(&c->w->st.errors);
    if (n > 0)
        out_append(c, line, (size_t)n);
}

static void reply_ok(struct conn *c, bool allowed, uint64_t credit, uint64_t reset_s)
{
    char line[PROTO_REPLY_MAX];
    int n = proto_fmt_ok(line, sizeof(line), allowed, credit, reset_s);

    if (n > 0)
        out_append(c, line, (size_t)n);
}

static void reply_ok_rule(struct conn *c, bool allowed, uint64_t credit, uint64_t reset_s,
                          const char *rule)
{
    char line[PROTO_REPLY_MAX];
    int n = proto_fmt_ok_rule(line, sizeof(line), allowed, credit, reset_s, rule);

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

static const char *algo_name(enum rules_algo a)
{
    return a == RULES_ALGO_TOKEN_BUCKET     ? "token_bucket"
           : a == RULES_ALGO_SLIDING_WINDOW ? "sliding_window"
                                            : "window";
}

/* ---- requests ------------------------------------------------------------ */

static void count_outcomes(struct worker *w, const struct rules *rules,
                           const struct eval_result *res)
{
    struct rules_rule r;

    for (unsigned i = 0; i < res->n; i++) {
        if (res->o[i].table_full) {
            stat_inc(&w->st.table_full);
            log_ratelimited(&rl_full, LOG_WARNING,
                            "counter table full or max_actors reached (rule %u): %s",
                            res->o[i].rule, w->s->o.full_allow ? "allowed" : "denied");
        }
        if (rules_get(rules, res->o[i].rule, &r) < 0 || r.policy != RULES_POLICY_CANARY)
            continue;
        stat_inc(res->o[i].allowed ? &w->st.canary_accepted : &w->st.canary_rejected);
    }
}

static void do_hit(struct conn *c, const struct proto_req *req)
{
    struct worker *w = c->w;
    struct rules_req rq = { .kv = req->kv, .n_kv = req->n_kv, .privileged = c->privileged };
    enum table_op op = req->verb == PROTO_PEEK ? TABLE_PEEK
                       : req->verb == PROTO_RESET ? TABLE_RESET
                                                  : TABLE_TAKE;
    const struct reload_state *st;
    struct eval_env env;
    struct eval_result res;
    struct rules_rule decider;
    char rule[RULES_LABEL_MAX + 1] = "";
    int r;

    if (req->verb == PROTO_RESET && !c->privileged) {
        reply_err(c, PROTO_E_FORBIDDEN, "RESET needs root or the admin group on the Unix socket");
        return;
    }
    urcu_memb_read_lock();
    st = reload_current(w->s->o.reload);
    env.rules = st->rules;
    env.fast = w->s->o.fast;
    env.priv = w->s->o.priv;
    env.full_allow = w->s->o.full_allow;
    r = eval_request(&env, &rq, op, req->amount, clock_now_ms(), &res);
    if (r >= 0) {
        count_outcomes(w, st->rules, &res);
        /* The rule's strings live in the rules: copy before leaving the section. */
        if (req->verb != PROTO_HIT && rules_get(st->rules, res.decider, &decider) >= 0)
            snprintf(rule, sizeof(rule), "%s", decider.id_str);
    }
    urcu_memb_read_unlock();
    if (r < 0) {
        errno = -r;
        log_ratelimited(&rl_internal, LOG_ERR, "evaluating a request failed: %m");
        reply_err(c, PROTO_E_UNKNOWN, "internal error");
        return;
    }
    if (op == TABLE_TAKE) {
        stat_inc(&w->st.hits);
        stat_inc(res.allowed ? &w->st.accepted : &w->st.rejected);
    } else if (op == TABLE_RESET) {
        log_msg(LOG_NOTICE, "RESET by uid %u: %u counter(s) on the path of rule %u reset",
                (unsigned)c->uid, res.n, res.decider);
    }
    /* HIT's reply is divvy's, byte for byte; the extension verbs name the rule. */
    if (req->verb == PROTO_HIT)
        reply_ok(c, res.allowed, res.credit, res.reset_s);
    else
        reply_ok_rule(c, res.allowed, res.credit, res.reset_s, rule);
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
                   " fast_path=%s actor=",
                   (long long)r.credit_limit, (long long)r.reset_seconds, algo_name(r.algo),
                   policy_name(r.policy), r.source == RULES_SOURCE_PRIVILEGED ? "privileged" : "any",
                   r.fast_path ? "true" : "false");
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
    struct table_stats fast, priv;
    uint64_t gen, n_rules, ok, rejected, now = clock_now_ms();
    const struct reload_state *st;
    char buf[2048];
    size_t pos = 0;

    for (unsigned i = 0; i < s->o.workers; i++) {
        const struct wstats *ws = &s->workers[i].st;

        sum.hits += stat_get(&ws->hits);
        sum.accepted += stat_get(&ws->accepted);
        sum.rejected += stat_get(&ws->rejected);
        sum.canary_accepted += stat_get(&ws->canary_accepted);
        sum.canary_rejected += stat_get(&ws->canary_rejected);
        sum.errors += stat_get(&ws->errors);
        sum.table_full += stat_get(&ws->table_full);
    }
    urcu_memb_read_lock();
    st = reload_current(s->o.reload);
    gen = st->generation;
    n_rules = rules_count(st->rules);
    urcu_memb_read_unlock();
    reload_counts(s->o.reload, &ok, &rejected);
    table_stats(s->o.fast, now, &fast);
    table_stats(s->o.priv, now, &priv);
    append_fmt(buf, sizeof(buf), &pos,
               "OK 17\nuptime_seconds=%llu\nconnections=%llu\nhits_total=%llu\n"
               "hits_accepted=%llu\nhits_rejected=%llu\nhits_canary_accepted=%llu\n"
               "hits_canary_rejected=%llu\nerrors_total=%llu\nreloads_ok=%llu\n"
               "reloads_rejected=%llu\nconfig_generation=%llu\nrules=%llu\n"
               "table_slots=%llu\ntable_live=%llu\nfast_table_slots=%llu\n"
               "fast_table_live=%llu\ntable_full_events=%llu\n",
               (unsigned long long)((now - s->started_ms) / 1000),
               (unsigned long long)__atomic_load_n(&s->n_conns, __ATOMIC_RELAXED),
               (unsigned long long)sum.hits, (unsigned long long)sum.accepted,
               (unsigned long long)sum.rejected, (unsigned long long)sum.canary_accepted,
               (unsigned long long)sum.canary_rejected, (unsigned long long)sum.errors,
               (unsigned long long)ok, (unsigned long long)rejected,
               (unsigned long long)gen, (unsigned long long)n_rules,
               (unsigned long long)priv.slots, (unsigned long long)priv.live,
               (unsigned long long)fast.slots, (unsigned long long)fast.live,
               (unsigned long long)(sum.table_full));
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
    uint64_t reset_ms;
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
    uint64_t limit, used;

    /* Counters of rules a reload removed are not reported. */
    if (idx < 0 || (cs->only_rule >= 0 && idx != cs->only_rule) ||
        rules_get(cs->rules, (uint32_t)idx, &r) < 0)
        return 0;
    limit = (uint64_t)r.credit_limit;
    used = e->algo == RULES_ALGO_TOKEN_BUCKET ? limit - (e->used_or_tokens < limit ?
                                                         e->used_or_tokens : limit)
                                              : e->used_or_tokens;
    if (used > limit)
        used = limit;
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
        reply_err(c, PROTO_E_FORBIDDEN, "COUNTERS needs root or the admin group on the Unix socket");
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
                   " credit=%llu used=%llu limit=%lld reset_seconds=%llu\n",
                   (unsigned long long)row->credit, (unsigned long long)row->used,
                   (long long)r.credit_limit, (unsigned long long)eval_ms_to_s(row->reset_ms));
        reply_text(c, line);
    }
out:
    urcu_memb_read_unlock();
    free(cs.rows);
    free(pairs);
    free(ids);
    free(idx);
}

static void handle_request(struct conn *c, const struct proto_req *req)
{
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
    }
}

/* Answers every complete line in the input buffer. */
static void process_input(struct conn *c, bool eof)
{
    struct worker *w = c->w;
    size_t off = 0;
    ssize_t r;

    while (off < c->in_len && !c->closing && !c->dead) {
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
        if (c->out_len - c->out_off > w->s->o.max_output_bytes) {
            log_ratelimited(&rl_accept, LOG_WARNING,
                            "dropping a client with %zu unread reply bytes (limit %zu)",
                            c->out_len - c->out_off, w->s->o.max_output_bytes);
            c->dead = true;
            return;
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
    ssize_t n;

    while (c->out_off < c->out_len) {
        n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                event_add(c->wev, NULL);
                return 0;
            }
            return -errno;
        }
        c->out_off += (size_t)n;
    }
    c->out_off = c->out_len = 0;
    event_del(c->wev);
    return 1;
}

/* End of every callback: the only place a connection is freed. */
static void conn_settle(struct conn *c)
{
    int r;

    if (c->closing)
        event_del(c->rev);      /* after QUIT or EOF nothing more is read */
    if (!c->dead) {
        r = conn_flush(c);
        if (r < 0 || (r > 0 && c->closing))
            c->dead = true;
    }
    if (c->dead)
        conn_free(c);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    ssize_t n;

    (void)what;
    n = read(fd, c->in + c->in_len, IN_CAP - c->in_len);
    if (n > 0) {
        c->in_len += (size_t)n;
        process_input(c, false);
    } else if (n == 0) {
        /* Half-close: answer everything already sent, then close. */
        process_input(c, true);
        c->closing = true;
        event_del(c->rev);
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

static void peer_privilege(struct conn *c, gid_t admin_gid)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    gid_t groups[MAX_GROUPS];
    socklen_t glen = sizeof(groups);

    c->uid = (uid_t)-1;
    if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return;
    c->uid = cred.uid;
    if (cred.uid == 0) {
        c->privileged = true;
        return;
    }
    if (admin_gid == (gid_t)-1)
        return;
    if (cred.gid == admin_gid) {
        c->privileged = true;
        return;
    }
    /* SO_PEERCRED names only the primary group; SO_PEERGROUPS has them all. */
    if (getsockopt(c->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) < 0)
        return;
    for (size_t i = 0; i < glen / sizeof(gid_t); i++)
        if (groups[i] == admin_gid)
            c->privileged = true;
}

static void conn_new(struct worker *w, int fd, const struct listener *l)
{
    struct conn *c;
    int one = 1;

    c = calloc(1, sizeof(*c));
    if (!c)
        goto fail;
    c->w = w;
    c->fd = fd;
    c->is_unix = l->is_unix;
    if (l->is_unix)
        peer_privilege(c, w->s->o.admin_gid);
    else
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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
        free(c);
    }
    close(fd);
    __atomic_fetch_sub(&w->s->n_conns, 1, __ATOMIC_RELAXED);
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

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct worker *w = arg;
    struct srv *s = w->s;
    const struct listener *l = NULL;
    static const char busy[] = "ERR busy \"too many connections\"\n";
    int fd;

    (void)what;
    for (size_t i = 0; i < s->n_lis; i++)
        if (s->lis[i].fd == lfd)
            l = &s->lis[i];
    if (!l)
        return;
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                log_ratelimited(&rl_accept, LOG_ERR, "accept on %s: %m; pausing", l->name);
                pause_accepting(w);
            }
            return;
        }
        if (__atomic_fetch_add(&s->n_conns, 1, __ATOMIC_RELAXED) >= s->o.max_connections) {
            if (send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
                /* The refused client may already be gone; nothing to tell. */
            }
            close(fd);
            __atomic_fetch_sub(&s->n_conns, 1, __ATOMIC_RELAXED);
            log_ratelimited(&rl_accept, LOG_WARNING, "connection refused: %u connections open",
                            s->o.max_connections);
            continue;
        }
        conn_new(w, fd, l);
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
    /* Requests already read were answered when they arrived; flush, then close. */
    for (c = w->conns; c; c = next) {
        next = c->next;
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

static void *worker_main(void *arg)
{
    struct worker *w = arg;

    urcu_memb_register_thread();
    event_base_dispatch(w->base);
    while (w->conns)
        conn_free(w->conns);
    urcu_memb_unregister_thread();
    return NULL;
}

static int worker_init(struct srv *s, struct worker *w, unsigned id)
{
    w->s = s;
    w->id = id;
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
    if (!w->stop_ev || !w->resume_ev || !w->grace_ev)
        return -ENOMEM;
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
    if (w->base)
        event_base_free(w->base);
}

/* ---- server ---------------------------------------------------------------- */

int srv_new(const struct srv_opts *opts, struct srv **ret)
{
    struct srv *s;
    int r;

    if (opts->workers == 0 || opts->n_listen == 0)
        return -EINVAL;
    if (evthread_use_pthreads() < 0)
        return -ENOMEM;
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->o = *opts;
    s->lis = calloc(opts->n_listen, sizeof(*s->lis));
    s->workers = calloc(opts->workers, sizeof(*s->workers));
    if (!s->lis || !s->workers) {
        r = -ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < opts->n_listen; i++) {
        r = listener_open(s, opts->listen[i], &s->lis[i]);
        s->n_lis++;
        if (r < 0) {
            errno = -r;
            log_msg(LOG_ERR, "cannot listen on %s: %m", opts->listen[i]);
            goto fail;
        }
        log_msg(LOG_NOTICE, "listening on %s", s->lis[i].name);
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
    event_base_loopbreak(s->main_base);
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
    if (secs % every == 0) {
        table_sweep(s->o.fast, now);
        table_sweep(s->o.priv, now);
    }
}

int srv_run(struct srv *s)
{
    struct event *sig_hup = NULL, *sig_term = NULL, *sig_int = NULL, *tick = NULL;
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
        event_base_dispatch(s->main_base);
    }
    for (unsigned i = 0; i < s->o.workers; i++)
        if (s->workers[i].started)
            event_active(s->workers[i].stop_ev, EV_READ, 0);
    for (unsigned i = 0; i < s->o.workers; i++)
        if (s->workers[i].started)
            pthread_join(s->workers[i].thread, NULL);
out:
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
    free(s);
}
