/* SPDX-License-Identifier: MIT */
/*
 * admit: connection budgets, per-peer caps, the output budget and the
 * timeout policy of divvyd (see admit.h, docs/daemon.md "Admission").
 *
 * The counts of open connections and the per-peer table change only on
 * accept and close, under one mutex: a decision reads several counts at
 * once and must be exact, and neither event is on the hit path.  The output
 * budget changes when a connection's buffers grow or shrink (a realloc, not
 * every reply) and is read lock-free before each request; the number of open
 * connections is mirrored in an atomic for that read.  Statistics are
 * relaxed atomics.
 */
#include <errno.h>
#include <stdio.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "admit.h"
#include "log.h"

#define PEER_BUCKETS    4096    /* per-peer hash chains (a power of two) */
#define SWEEP_MIN_MS    25
#define SWEEP_MAX_MS    1000
#define CONN_BYTES      (16 * 1024)    /* what an open connection holds uncharged, about */

/* One peer with at least one unprivileged connection open. */
struct admit_entry {
    struct admit_entry *next;
    bool is_unix;
    uint8_t key[16];            /* uid, or the address (IPv6: its /64) */
    unsigned count;
};

struct admit {
    struct admit_opts o;
    pthread_mutex_t lock;       /* the counts below and the table */
    unsigned n_tcp, n_unix, n_reserve, n_unpriv;
    struct admit_entry *buckets[PEER_BUCKETS];

    /* Lock-free readers (atomics). */
    uint64_t n_open;            /* n_tcp + n_unix + n_reserve */
    uint64_t out_bytes;
    uint64_t refused[ADMIT_N_REFUSALS];
    uint64_t closed[ADMIT_N_CLOSES];
    uint64_t paused;
};

static const char *const refusal_name[ADMIT_N_REFUSALS] = {
    "tcp_connections", "unix_connections", "max_connections",
    "tcp_connections_per_address", "unix_connections_per_uid", "reserved_connections",
};

static const char *const close_name[ADMIT_N_CLOSES] = {
    "idle", "slow_request", "slow_output", "output_limit", "input_limit",
};

const char *admit_refusal_name(enum admit_refusal why)
{
    return (unsigned)why < ADMIT_N_REFUSALS ? refusal_name[why] : "unknown";
}

const char *admit_close_name(enum admit_close why)
{
    return (unsigned)why < ADMIT_N_CLOSES ? close_name[why] : "unknown";
}

static void count_inc(uint64_t *c)
{
    __atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

/* Raises RLIMIT_NOFILE when it can; shrinks total_max when it must, so a
 * flood can never leave the reserve without a descriptor (accept's EMFILE
 * would refuse everyone alike). */
static void fit_nofile(struct admit_opts *o)
{
    struct rlimit rl;
    uint64_t unpriv = (uint64_t)o->tcp_max + o->unix_max, need, avail;

    if (unpriv > o->total_max)
        unpriv = o->total_max;
    need = unpriv + o->reserve + o->fd_reserve;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur >= need)
        return;
    if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > rl.rlim_cur) {
        struct rlimit up = rl;

        up.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl = up;
    }
    if (rl.rlim_cur >= need)
        return;
    avail = rl.rlim_cur > (uint64_t)o->reserve + o->fd_reserve
                ? rl.rlim_cur - o->reserve - o->fd_reserve
                : 1;
    log_msg(LOG_WARNING,
            "RLIMIT_NOFILE is %llu: unprivileged connections limited to %llu (of %llu) so that "
            "%u stay reserved for root and the admin group",
            (unsigned long long)rl.rlim_cur, (unsigned long long)avail,
            (unsigned long long)unpriv, o->reserve);
    o->total_max = (unsigned)avail;
}

int admit_new(const struct admit_opts *o, struct admit **ret)
{
    struct admit *a = calloc(1, sizeof(*a));

    if (!a)
        return -ENOMEM;
    a->o = *o;
    if (pthread_mutex_init(&a->lock, NULL) != 0) {
        free(a);
        return -ENOMEM;
    }
    fit_nofile(&a->o);
    *ret = a;
    return 0;
}

void admit_free(struct admit *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < PEER_BUCKETS; i++) {
        while (a->buckets[i]) {
            struct admit_entry *e = a->buckets[i];

            a->buckets[i] = e->next;
            free(e);
        }
    }
    pthread_mutex_destroy(&a->lock);
    free(a);
}

/* The per-peer key (admit.h): the uid, or the address with IPv6 cut to its
 * /64 (one host is given a /64, so a cap per full address would be no cap at all). */
void admit_peer_key(const struct admit_peer *p, uint8_t key[16])
{
    memset(key, 0, 16);
    if (p->is_unix) {
        memcpy(key, &p->uid, sizeof(p->uid));
        return;
    }
    if (p->addr.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&p->addr;

        memcpy(key, &in->sin_addr, 4);
    } else if (p->addr.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&p->addr;

        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            memcpy(key, in6->sin6_addr.s6_addr + 12, 4);
        } else {
            key[15] = 6;        /* never equal to an IPv4 key */
            memcpy(key, in6->sin6_addr.s6_addr, 8);
        }
    }
}

static size_t peer_bucket(bool is_unix, const uint8_t key[16])
{
    uint64_t h = 1469598103934665603ull ^ is_unix;

    for (int i = 0; i < 16; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29)) & (PEER_BUCKETS - 1);
}

static struct admit_entry *peer_find(struct admit *a, bool is_unix, const uint8_t key[16])
{
    struct admit_entry *e;

    for (e = a->buckets[peer_bucket(is_unix, key)]; e; e = e->next)
        if (e->is_unix == is_unix && memcmp(e->key, key, 16) == 0)
            return e;
    return NULL;
}

static void peer_drop(struct admit *a, struct admit_entry *e)
{
    struct admit_entry **pp = &a->buckets[peer_bucket(e->is_unix, e->key)];

    if (--e->count > 0)
        return;
    for (; *pp; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    }
    free(e);
}

/* Under a->lock: the reason @p may not have a place, or -1 when it may.
 * *ret_reserve says which budget the place comes from. */
static int decide(const struct admit *a, const struct admit_peer *p,
                  const struct admit_entry *e, bool *ret_reserve)
{
    const struct admit_opts *o = &a->o;

    *ret_reserve = false;
    if (p->is_unix && p->privileged) {
        /* The Unix budget first (max_connections counts the unprivileged
         * only); beyond it only the reserve, which nobody else can take. */
        if (a->n_unix < o->unix_max)
            return -1;
        if (a->n_reserve < o->reserve) {
            *ret_reserve = true;
            return -1;
        }
        return ADMIT_R_RESERVE;
    }
    /* The narrowest limit reached is the one reported. */
    if (p->is_unix && e && e->count >= o->per_uid)
        return ADMIT_R_PER_UID;
    if (!p->is_unix && e && e->count >= o->per_address)
        return ADMIT_R_PER_ADDRESS;
    if (a->n_unpriv >= o->total_max)
        return ADMIT_R_TOTAL;
    if (p->is_unix && a->n_unix >= o->unix_max)
        return ADMIT_R_UNIX;
    if (!p->is_unix && a->n_tcp >= o->tcp_max)
        return ADMIT_R_TCP;
    return -1;
}

int admit_enter(struct admit *a, const struct admit_peer *p, struct admit_slot *ret_slot,
                enum admit_refusal *reterr_why)
{
    struct admit_slot slot = { .held = true, .is_unix = p->is_unix,
                               .privileged = p->is_unix && p->privileged };
    struct admit_entry *e = NULL;
    uint8_t key[16];
    bool reserve;
    int why, r = 0;

    pthread_mutex_lock(&a->lock);
    if (!slot.privileged) {
        admit_peer_key(p, key);
        e = peer_find(a, p->is_unix, key);
    }
    why = decide(a, p, e, &reserve);
    if (why >= 0) {
        count_inc(&a->refused[why]);
        *reterr_why = (enum admit_refusal)why;
        r = -EBUSY;
        goto out;
    }
    if (!slot.privileged) {
        if (!e) {
            e = calloc(1, sizeof(*e));
            if (!e) {
                r = -ENOMEM;
                goto out;
            }
            e->is_unix = p->is_unix;
            memcpy(e->key, key, 16);
            e->next = a->buckets[peer_bucket(p->is_unix, key)];
            a->buckets[peer_bucket(p->is_unix, key)] = e;
        }
        e->count++;
        slot.peer = e;
        a->n_unpriv++;
    }
    slot.reserve = reserve;
    if (reserve)
        a->n_reserve++;
    else if (p->is_unix)
        a->n_unix++;
    else
        a->n_tcp++;
    __atomic_fetch_add(&a->n_open, 1, __ATOMIC_RELAXED);
    *ret_slot = slot;
out:
    pthread_mutex_unlock(&a->lock);
    return r;
}

void admit_leave(struct admit *a, struct admit_slot *slot)
{
    if (!slot->held)
        return;
    admit_charge(a, slot, 0);
    pthread_mutex_lock(&a->lock);
    if (slot->peer) {
        peer_drop(a, slot->peer);
        a->n_unpriv--;
    }
    if (slot->reserve)
        a->n_reserve--;
    else if (slot->is_unix)
        a->n_unix--;
    else
        a->n_tcp--;
    __atomic_fetch_sub(&a->n_open, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&a->lock);
    memset(slot, 0, sizeof(*slot));
}

void admit_charge(struct admit *a, struct admit_slot *slot, size_t bytes)
{
    if (bytes == slot->charged)
        return;
    if (bytes > slot->charged)
        __atomic_fetch_add(&a->out_bytes, bytes - slot->charged, __ATOMIC_RELAXED);
    else
        __atomic_fetch_sub(&a->out_bytes, slot->charged - bytes, __ATOMIC_RELAXED);
    slot->charged = bytes;
}

size_t admit_allowance(struct admit *a, const struct admit_slot *slot, size_t cap)
{
    uint64_t n, share;

    if (slot->privileged ||
        __atomic_load_n(&a->out_bytes, __ATOMIC_RELAXED) <= a->o.output_budget)
        return cap;
    n = __atomic_load_n(&a->n_open, __ATOMIC_RELAXED);
    share = a->o.output_budget / (n ? n : 1);
    if (share < ADMIT_SHARE_MIN)
        share = ADMIT_SHARE_MIN;
    return share < cap ? (size_t)share : cap;
}

bool admit_out_pause_shared(struct admit *a, const struct admit_slot *slot, size_t own)
{
    if (own <= admit_allowance(a, slot, SIZE_MAX))
        return false;
    count_inc(&a->paused);
    return true;
}

void admit_paused(struct admit *a)
{
    count_inc(&a->paused);
}

uint64_t admit_held(struct admit *a)
{
    return __atomic_load_n(&a->n_open, __ATOMIC_RELAXED) * CONN_BYTES +
           __atomic_load_n(&a->out_bytes, __ATOMIC_RELAXED);
}

void admit_closed(struct admit *a, enum admit_close why)
{
    if ((unsigned)why < ADMIT_N_CLOSES)
        count_inc(&a->closed[why]);
}

int admit_expired(const struct admit *a, uint64_t now_ms, bool idle, uint64_t last_ms,
                  uint64_t partial_ms, uint64_t stall_ms)
{
    const struct admit_opts *o = &a->o;

    if (o->request_ms) {
        if (partial_ms && now_ms - partial_ms >= o->request_ms)
            return ADMIT_C_REQUEST;
        if (stall_ms && now_ms - stall_ms >= o->request_ms)
            return ADMIT_C_OUTPUT;
    }
    if (o->idle_ms && idle && now_ms - last_ms >= o->idle_ms)
        return ADMIT_C_IDLE;
    return -1;
}

unsigned admit_sweep_ms(const struct admit *a)
{
    unsigned shortest = 0, p;

    if (a->o.idle_ms)
        shortest = a->o.idle_ms;
    if (a->o.request_ms && (!shortest || a->o.request_ms < shortest))
        shortest = a->o.request_ms;
    if (!shortest)
        return 0;
    /* A timeout fires at most a quarter late. */
    p = shortest / 4;
    return p < SWEEP_MIN_MS ? SWEEP_MIN_MS : p > SWEEP_MAX_MS ? SWEEP_MAX_MS : p;
}

void admit_stats(struct admit *a, struct admit_stats *ret)
{
    memset(ret, 0, sizeof(*ret));
    pthread_mutex_lock(&a->lock);
    ret->tcp_conns = a->n_tcp;
    ret->unix_conns = a->n_unix;
    ret->reserve_conns = a->n_reserve;
    pthread_mutex_unlock(&a->lock);
    ret->total_max = a->o.total_max;
    for (int i = 0; i < ADMIT_N_REFUSALS; i++)
        ret->refused[i] = __atomic_load_n(&a->refused[i], __ATOMIC_RELAXED);
    for (int i = 0; i < ADMIT_N_CLOSES; i++)
        ret->closed[i] = __atomic_load_n(&a->closed[i], __ATOMIC_RELAXED);
    ret->output_bytes = __atomic_load_n(&a->out_bytes, __ATOMIC_RELAXED);
    ret->output_budget = a->o.output_budget;
    ret->output_paused = __atomic_load_n(&a->paused, __ATOMIC_RELAXED);
}

size_t admit_peers(struct admit *a)
{
    size_t n = 0;

    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < PEER_BUCKETS; i++)
        for (const struct admit_entry *e = a->buckets[i]; e; e = e->next)
            n++;
    pthread_mutex_unlock(&a->lock);
    return n;
}

size_t admit_stats_text(struct admit *a, char *buf, size_t size)
{
    struct admit_stats st;
    size_t pos = 0, lines = 0;
    int n;

    admit_stats(a, &st);
    n = snprintf(buf, size, "connections_tcp=%llu\nconnections_unix=%llu\n"
                 "connections_reserved=%llu\n", (unsigned long long)st.tcp_conns,
                 (unsigned long long)st.unix_conns, (unsigned long long)st.reserve_conns);
    lines += 3;
    for (int i = 0; i < ADMIT_N_REFUSALS && n >= 0 && (size_t)n < size - pos; i++) {
        pos += (size_t)n;
        n = snprintf(buf + pos, size - pos, "refused_%s=%llu\n", refusal_name[i],
                     (unsigned long long)st.refused[i]);
        lines++;
    }
    for (int i = 0; i < ADMIT_N_CLOSES && n >= 0 && (size_t)n < size - pos; i++) {
        pos += (size_t)n;
        n = snprintf(buf + pos, size - pos, "closed_%s=%llu\n", close_name[i],
                     (unsigned long long)st.closed[i]);
        lines++;
    }
    if (n >= 0 && (size_t)n < size - pos) {
        pos += (size_t)n;
        n = snprintf(buf + pos, size - pos,
                     "output_buffered_bytes=%llu\noutput_budget_bytes=%llu\noutput_paused=%llu\n",
                     (unsigned long long)st.output_bytes, (unsigned long long)st.output_budget,
                     (unsigned long long)st.output_paused);
        lines += 3;
    }
    if (n < 0 || (size_t)n >= size - pos) {
        buf[0] = '\0';
        return 0;
    }
    return lines;
}
