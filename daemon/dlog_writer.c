/* SPDX-License-Identifier: MIT */
/*
 * dlog_writer: the decision log's drain thread and its hooks (see
 * dlog_writer.h).  The workers only copy into their rings (dlog_ring.c);
 * here the drain thread gives each record its wall-clock time (the
 * engine's monotonic ms plus the offset of the two clocks read once per
 * drain), applies decision_log.redact, encodes blocks (server/dlog.h), and
 * appends them through dlog_files.c.  Rule descriptions queued by reload
 * are written before the records drained after them.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <urcu/urcu-memb.h>

#include "clock.h"
#include "dlog_files.h"
#include "dlog_writer.h"
#include "hash.h"
#include "log.h"
#include "reload.h"
#include "srv_int.h"
#include "worker_int.h"

#define DLOG_BLOCK_CAP      (256u << 10)        /* bytes of one block we write */
#define DLOG_WRITER_LANE    UINT32_MAX          /* block_worker of the writer's own blocks */
#define DLOG_RULES_PER_ITEM 256                 /* rules in one DLOG_RULES item at most */
#define DLOG_DRAIN_TURN     (256u << 10)        /* bytes of one ring before the next's */

/* The rules of one generation as the log describes them. */
struct rules_desc {
    struct rules_desc *next;
    uint64_t generation;
    uint64_t unix_ms;
    uint32_t n;
    struct dlog_rule *rule;
    char *pool;                 /* the strings rule[] points to */
};

struct dlog_writer {
    struct dlog_ring **rings;
    unsigned n_rings;
    int efd;                    /* wakes the drain thread */
    pthread_t thread;
    bool started;               /* atomic: reload reads it */
    bool stop;                  /* atomic */
    bool rotating;              /* rotate() is writing the new file's rules */
    unsigned flush_ms;
    size_t block_cap;

    pthread_mutex_t lock;       /* guards pending */
    struct rules_desc *pending, **pending_tail;
    struct rules_desc *current; /* drain thread: the newest written */

    struct config_dlog_redact *redact;
    size_t n_redact;
    bool hash_key_set;
    uint8_t key[HASH_KEY_LEN];

    struct dlog_files files;
    struct dlog_enc *enc;
    char host[256];
    struct dlog_decision d;     /* drain thread's scratch */
    char hashed[PROTO_KV_MAX][17];

    /* Counters: the drain thread's, but reports_dropped (workers: atomic add). */
    uint64_t records, bytes, write_errors, lost, reports_dropped;
    struct log_ratelimit rl_write;
};

static void stat_add(uint64_t *c, uint64_t n)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* ---- rule descriptions ----------------------------------------------------------------- */

static void desc_free(struct rules_desc *d)
{
    if (!d)
        return;
    free(d->rule);
    free(d->pool);
    free(d);
}

static struct rules_desc *desc_new(const struct rules *rs, uint64_t generation)
{
    size_t n = rules_count(rs), bytes = 0, off = 0;
    struct rules_desc *d = calloc(1, sizeof(*d));
    struct rules_rule r;
    const char *key;
    size_t key_len;

    if (!d)
        return NULL;
    d->generation = generation;
    d->unix_ms = clock_unix_ns() / 1000000;
    d->n = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        if (rules_get(rs, (uint32_t)i, &r) < 0)
            continue;
        bytes += strlen(r.id_str) + 1;
        for (unsigned k = 0; k < r.n_actor; k++)
            if (rules_actor_key(rs, (uint32_t)i, k, &key, &key_len) == 0)
                bytes += key_len + 1;
    }
    d->rule = calloc(n + 1, sizeof(*d->rule));
    d->pool = malloc(bytes + 1);
    if (!d->rule || !d->pool) {
        desc_free(d);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        struct dlog_rule *dr = &d->rule[i];

        if (rules_get(rs, (uint32_t)i, &r) < 0)
            continue;
        *dr = (struct dlog_rule){ .id = r.id, .id_len = (uint32_t)strlen(r.id_str),
                                  .algo = (uint8_t)r.algo, .store = (uint8_t)r.store,
                                  .policy = (uint8_t)r.policy, .fast_path = r.fast_path,
                                  .credit_limit = r.credit_limit, .reset_ms = r.reset_ms,
                                  .prefix4 = r.prefix4, .prefix6 = r.prefix6 };
        dr->id_str = memcpy(d->pool + off, r.id_str, dr->id_len + 1);
        off += dr->id_len + 1;
        for (unsigned k = 0; k < r.n_actor && k < RULES_ACTOR_KEYS_MAX; k++) {
            if (rules_actor_key(rs, (uint32_t)i, k, &key, &key_len) < 0)
                continue;
            dr->actor[dr->n_actor] = memcpy(d->pool + off, key, key_len);
            d->pool[off + key_len] = '\0';
            dr->actor_len[dr->n_actor++] = (uint32_t)key_len;
            off += key_len + 1;
        }
    }
    return d;
}

void dlog_writer_rules(void *arg, const struct rules *rs, uint64_t generation)
{
    struct dlog_writer *dw = arg;
    struct rules_desc *d = desc_new(rs, generation);

    if (!d) {
        log_msg(LOG_ERR, "decision log: out of memory describing the rules of generation %llu: "
                "the log names their rules by id only", (unsigned long long)generation);
        return;
    }
    pthread_mutex_lock(&dw->lock);
    *dw->pending_tail = d;
    dw->pending_tail = &d->next;
    pthread_mutex_unlock(&dw->lock);
    /* Written before any decision under them: the drain takes them first. */
    if (__atomic_load_n(&dw->started, __ATOMIC_ACQUIRE))
        (void)!write(dw->efd, &(uint64_t){ 1 }, sizeof(uint64_t));
}

/* ---- writing blocks -------------------------------------------------------------------- */

static void write_failed(struct dlog_writer *dw, int r, const char *what, unsigned records)
{
    stat_add(&dw->write_errors, 1);
    stat_add(&dw->lost, records);
    errno = -r;
    log_ratelimited(&dw->rl_write, LOG_ERR, "decision log: %s %s: %m (%u records lost)", what,
                    dw->files.name[0] ? dw->files.name : "its first file", records);
}

static int write_rules_desc(struct dlog_writer *dw, const struct rules_desc *d);

/* Starts the next file: its header, then the rules in force. */
static int rotate(struct dlog_writer *dw, uint64_t unix_ms)
{
    uint8_t hdr[DLOG_HEADER_MAX];
    size_t len = dlog_file_header(hdr, sizeof(hdr), unix_ms, dw->host);
    int r;

    if (!len)
        return -EINVAL;
    r = dlog_files_next(&dw->files, unix_ms, hdr, len);
    if (r < 0)
        return r;
    stat_add(&dw->bytes, len);
    if (dw->current) {
        /* Every file describes the rules in force, however long they are. */
        dw->rotating = true;
        r = write_rules_desc(dw, dw->current);
        dw->rotating = false;
    }
    return r;
}

/* Seals the encoder's block and appends it (rotating first when it would
 * take the file past file_size); begins the next block of @worker. */
static int flush_block(struct dlog_writer *dw, uint32_t worker)
{
    const uint8_t *blk;
    unsigned count = dlog_enc_count(dw->enc);
    size_t len = dlog_enc_finish(dw->enc, &blk);
    uint8_t *copy = NULL;
    int r = 0;

    if (len == 0)
        goto out;
    if (!dw->rotating && (dw->files.fd < 0 || (dw->files.size + len > dw->files.max_size &&
                                                dw->files.size > DLOG_HEADER_MAX))) {
        /* rotate() writes blocks of its own: this one is kept aside. */
        copy = malloc(len);
        if (!copy) {
            write_failed(dw, -ENOMEM, "rotating", count);
            r = -ENOMEM;
            goto out;
        }
        memcpy(copy, blk, len);
        blk = copy;
        r = rotate(dw, clock_unix_ns() / 1000000);
        if (r < 0) {
            write_failed(dw, r, "cannot start", count);
            goto out;
        }
    }
    r = dlog_files_append(&dw->files, blk, len);
    if (r < 0) {
        write_failed(dw, r, "writing", count);
        goto out;
    }
    stat_add(&dw->bytes, len);
    if (worker != DLOG_WRITER_LANE)
        stat_add(&dw->records, count);
out:
    free(copy);
    dlog_enc_begin(dw->enc, worker);
    return r;
}

/* One rules description, in as many items (and blocks) as it takes. */
static int write_rules_desc(struct dlog_writer *dw, const struct rules_desc *d)
{
    uint32_t first = 0, step = DLOG_RULES_PER_ITEM;
    int r = 0;

    dlog_enc_begin(dw->enc, DLOG_WRITER_LANE);
    do {
        uint32_t n = d->n - first < step ? d->n - first : step;
        struct dlog_rules item = { .generation = d->generation, .unix_ms = d->unix_ms,
                                   .total = d->n, .first = first, .n = n,
                                   .rule = d->rule + first };

        r = dlog_enc_rules(dw->enc, &item);
        if (r == -ENOBUFS && dlog_enc_count(dw->enc) > 0) {
            r = flush_block(dw, DLOG_WRITER_LANE);
            if (r < 0)
                return r;
            continue;
        }
        if ((r == -ENOBUFS || r == -E2BIG) && step > 1) {
            step /= 2;
            continue;
        }
        if (r < 0) {
            log_ratelimited(&dw->rl_write, LOG_ERR, "decision log: rule %u of generation %llu "
                            "cannot be described: %s", first, (unsigned long long)d->generation,
                            strerror(-r));
            n = 1;
        }
        first += n;
    } while (first < d->n);
    return flush_block(dw, DLOG_WRITER_LANE);
}

/* The rules descriptions reload queued, written in order; the last kept. */
static void take_rules(struct dlog_writer *dw)
{
    struct rules_desc *list, *next;

    pthread_mutex_lock(&dw->lock);
    list = dw->pending;
    dw->pending = NULL;
    dw->pending_tail = &dw->pending;
    pthread_mutex_unlock(&dw->lock);
    for (; list; list = next) {
        next = list->next;
        list->next = NULL;
        desc_free(dw->current);
        dw->current = list;
        if (dw->files.fd < 0)
            rotate(dw, clock_unix_ns() / 1000000);     /* writes dw->current */
        else
            write_rules_desc(dw, list);
    }
}

/* ---- draining -------------------------------------------------------------------------- */

/* decision_log.redact's word for key @k (@len bytes). */
static enum dlog_redact redact_of(const struct dlog_writer *dw, const char *k, size_t len)
{
    for (size_t i = 0; i < dw->n_redact; i++)
        if (strlen(dw->redact[i].key) == len && memcmp(dw->redact[i].key, k, len) == 0)
            return (enum dlog_redact)dw->redact[i].how;
    return DLOG_KEEP;
}

static void redact(struct dlog_writer *dw, struct dlog_decision *d)
{
    static const char hex[] = "0123456789abcdef";

    for (unsigned i = 0; i < d->n_kv && dw->n_redact; i++) {
        struct dlog_kv *kv = &d->kv[i];
        enum dlog_redact how = redact_of(dw, kv->key, kv->key_len);
        uint64_t h;

        kv->redact = (uint8_t)how;
        if (how == DLOG_DROP) {
            kv->value = "";
            kv->value_len = 0;
        } else if (how == DLOG_HASH) {
            h = hash_siphash(dw->key, kv->value, kv->value_len);
            for (int b = 0; b < 16; b++)
                dw->hashed[i][b] = hex[(h >> (60 - 4 * b)) & 15];
            dw->hashed[i][16] = '\0';
            kv->value = dw->hashed[i];
            kv->value_len = 16;
        }
    }
}

/* Up to DLOG_DRAIN_TURN bytes of ring @i, as blocks of writer @i;
 * @offset_ms turns the engine's monotonic ms into wall-clock ms.  true
 * when it stopped at the bound (more may be waiting). */
static bool drain_ring(struct dlog_writer *dw, unsigned i, int64_t offset_ms)
{
    size_t turn = 0;
    struct dlog_ring *rg = dw->rings[i];
    struct dlog_decision *d = &dw->d;
    enum dlog_raw_kind kind;
    uint64_t dropped, mono;
    int r;

    dlog_enc_begin(dw->enc, i);
    while (turn < DLOG_DRAIN_TURN &&
           (kind = dlog_ring_next(rg, d, &dropped, &mono)) != DLOG_RAW_NONE) {
        turn += dlog_ring_size(rg);
        struct dlog_gap gap = { .dropped = dropped };

        if (kind == DLOG_RAW_GAP) {
            gap.unix_ms = (uint64_t)((int64_t)mono + offset_ms);
        } else {
            d->unix_ms = (uint64_t)((int64_t)d->mono_ms + offset_ms);
            redact(dw, d);
        }
        for (int tries = 0; tries < 2; tries++) {
            r = kind == DLOG_RAW_GAP ? dlog_enc_gap(dw->enc, &gap) : dlog_enc_decision(dw->enc, d);
            if (r != -ENOBUFS || dlog_enc_count(dw->enc) == 0)
                break;
            flush_block(dw, i);
        }
        if (r < 0) {
            stat_add(&dw->lost, 1);
            log_ratelimited(&dw->rl_write, LOG_ERR, "decision log: a record of worker %u "
                            "cannot be encoded: %s", i, strerror(-r));
        }
        dlog_ring_release(rg);
    }
    flush_block(dw, i);
    if (turn < DLOG_DRAIN_TURN) {
        dlog_ring_rearm(rg);
        return false;
    }
    return true;
}

/* The lane threads' rings (root's and the admin group's decisions, pam_divvy's
 * among them): the second half of the rings. */
static bool drain_lanes(struct dlog_writer *dw, int64_t offset_ms)
{
    bool more = false;

    for (unsigned i = dw->n_rings / 2; i < dw->n_rings; i++)
        more |= drain_ring(dw, i, offset_ms);
    return more;
}

/* Every ring, in turns of DLOG_DRAIN_TURN bytes, the lanes' before each
 * worker's: a flooded worker's ring never starves the others, and root's
 * decisions wait at most one turn. */
static void drain_all(struct dlog_writer *dw)
{
    int64_t offset = (int64_t)(clock_unix_ns() / 1000000) - (int64_t)clock_now_ms();
    bool more;

    take_rules(dw);
    do {
        more = false;
        for (unsigned i = 0; i < dw->n_rings / 2; i++) {
            more |= drain_lanes(dw, offset);
            more |= drain_ring(dw, i, offset);
        }
        more |= drain_lanes(dw, offset);
    } while (more);
}

static void *drain_main(void *arg)
{
    struct dlog_writer *dw = arg;
    struct pollfd pfd = { .fd = dw->efd, .events = POLLIN };
    uint64_t v;

    while (!__atomic_load_n(&dw->stop, __ATOMIC_ACQUIRE)) {
        if (poll(&pfd, 1, (int)dw->flush_ms) > 0)
            (void)!read(dw->efd, &v, sizeof(v));
        drain_all(dw);
    }
    /* The workers have stopped: what they left, then the file is complete. */
    drain_all(dw);
    return NULL;
}

/* ---- setup ----------------------------------------------------------------------------- */

int dlog_writer_new(const struct config_dlog *cfg, unsigned n_rings, struct dlog_writer **ret)
{
    const char *dir = cfg->directory ? cfg->directory : CONFIG_DLOG_DIRECTORY, *what = "";
    struct dlog_writer *dw = calloc(1, sizeof(*dw));
    char key_path[PATH_MAX];
    int r = -ENOMEM;

    if (!dw)
        return -ENOMEM;
    dw->efd = -1;
    dw->files.dirfd = dw->files.fd = -1;
    pthread_mutex_init(&dw->lock, NULL);
    dw->pending_tail = &dw->pending;
    dw->flush_ms = cfg->flush_ms;
    dw->block_cap = cfg->file_size / 4 < DLOG_BLOCK_CAP ? cfg->file_size / 4 : DLOG_BLOCK_CAP;
    dw->n_rings = n_rings;
    dw->rings = calloc(n_rings, sizeof(*dw->rings));
    dw->enc = dlog_enc_new(dw->block_cap);
    if (!dw->rings || !dw->enc)
        goto fail;
    for (unsigned i = 0; i < n_rings; i++)
        if (!(dw->rings[i] = dlog_ring_new(DLOG_RING_BYTES)))
            goto fail;
    if (cfg->n_redact) {
        dw->redact = calloc(cfg->n_redact, sizeof(*dw->redact));
        if (!dw->redact)
            goto fail;
        for (size_t i = 0; i < cfg->n_redact; i++) {
            dw->redact[i].how = cfg->redact[i].how;
            if (!(dw->redact[i].key = strdup(cfg->redact[i].key)))
                goto fail;
            dw->n_redact++;
            dw->hash_key_set |= cfg->redact[i].how == DLOG_HASH;
        }
    }
    if (gethostname(dw->host, sizeof(dw->host) - 1) < 0)
        dw->host[0] = '\0';
    dw->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (dw->efd < 0) {
        r = -errno;
        goto fail;
    }
    r = dlog_files_open(&dw->files, dir, cfg->file_size, cfg->files, &what);
    if (r < 0) {
        errno = -r;
        log_msg(LOG_ERR, "decision_log.directory %s: %s: %m", dir, what);
        goto fail;
    }
    /* The key lives beside the log, not in it: whoever may read the log
     * (its group) must not be able to reverse the hashes by brute force. */
    if (dw->hash_key_set) {
        if ((size_t)snprintf(key_path, sizeof(key_path), "%s.key", dir) >= sizeof(key_path)) {
            r = -ENAMETOOLONG;
            goto fail;
        }
        r = dlog_files_key(key_path, dw->key, &what);
        if (r < 0) {
            errno = -r;
            log_msg(LOG_ERR, "decision log hash key %s: %s: %m", key_path, what);
            goto fail;
        }
    }
    *ret = dw;
    return 0;
fail:
    if (r == -ENOMEM)
        log_msg(LOG_ERR, "decision log: out of memory");
    dlog_writer_free(dw);
    return r;
}

int dlog_writer_open(const struct config *cfg, struct reload *rl, unsigned n_rings,
                     struct dlog_writer **ret)
{
    const struct reload_state *st;
    struct dlog_writer *dw = NULL;
    int r;

    *ret = NULL;
    if (!cfg->dlog.enabled)
        return 0;
    r = dlog_writer_new(&cfg->dlog, n_rings, &dw);
    if (r < 0)
        return r;
    urcu_memb_read_lock();
    st = reload_current(rl);
    dlog_writer_rules(dw, st->rules, st->generation);
    urcu_memb_read_unlock();
    reload_set_rules_hook(rl, dlog_writer_rules, dw);
    r = dlog_writer_start(dw);
    if (r < 0) {
        reload_set_rules_hook(rl, NULL, NULL);
        dlog_writer_free(dw);
        return r;
    }
    *ret = dw;
    return 0;
}

void dlog_writer_close(struct dlog_writer *dw, struct reload *rl)
{
    if (!dw)
        return;
    reload_set_rules_hook(rl, NULL, NULL);
    dlog_writer_free(dw);
}

struct dlog_ring *dlog_writer_ring(struct dlog_writer *dw, unsigned i)
{
    return i < dw->n_rings ? dw->rings[i] : NULL;
}

int dlog_writer_start(struct dlog_writer *dw)
{
    int r;

    take_rules(dw);
    if (dw->files.fd < 0 && (r = rotate(dw, clock_unix_ns() / 1000000)) < 0) {
        errno = -r;
        log_msg(LOG_ERR, "decision log: cannot start a file: %m");
        return r;
    }
    r = -pthread_create(&dw->thread, NULL, drain_main, dw);
    if (r < 0)
        return r;
    __atomic_store_n(&dw->started, true, __ATOMIC_RELEASE);
    log_msg(LOG_NOTICE, "decision log: recording every decision in %s (files of %llu bytes, "
            "%u kept, flushed every %u ms)", dw->files.name, (unsigned long long)dw->files.max_size,
            dw->files.keep, dw->flush_ms);
    return 0;
}

void dlog_writer_stop(struct dlog_writer *dw)
{
    if (!dw || !dw->started)
        return;
    __atomic_store_n(&dw->stop, true, __ATOMIC_RELEASE);
    (void)!write(dw->efd, &(uint64_t){ 1 }, sizeof(uint64_t));
    pthread_join(dw->thread, NULL);
    dw->started = false;
    if (dw->files.fd >= 0 && fsync(dw->files.fd) < 0)
        write_failed(dw, -errno, "syncing", 0);
    dlog_files_close(&dw->files);
}

void dlog_writer_free(struct dlog_writer *dw)
{
    struct rules_desc *d, *next;

    if (!dw)
        return;
    dlog_writer_stop(dw);
    dlog_files_close(&dw->files);
    for (unsigned i = 0; dw->rings && i < dw->n_rings; i++)
        dlog_ring_free(dw->rings[i]);
    free(dw->rings);
    for (d = dw->pending; d; d = next) {
        next = d->next;
        desc_free(d);
    }
    desc_free(dw->current);
    for (size_t i = 0; i < dw->n_redact; i++)
        free(dw->redact[i].key);
    free(dw->redact);
    dlog_enc_free(dw->enc);
    if (dw->efd >= 0)
        close(dw->efd);
    explicit_bzero(dw->key, sizeof(dw->key));
    pthread_mutex_destroy(&dw->lock);
    free(dw);
}

void dlog_writer_stats(const struct dlog_writer *dw, struct dlog_writer_stats *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->records = __atomic_load_n(&dw->records, __ATOMIC_RELAXED);
    ret->bytes = __atomic_load_n(&dw->bytes, __ATOMIC_RELAXED);
    ret->write_errors = __atomic_load_n(&dw->write_errors, __ATOMIC_RELAXED);
    ret->reports_dropped = __atomic_load_n(&dw->reports_dropped, __ATOMIC_RELAXED);
    ret->dropped = __atomic_load_n(&dw->lost, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < dw->n_rings; i++)
        ret->dropped += dlog_ring_dropped(dw->rings[i]);
}

/* ---- the workers' side ----------------------------------------------------------------- */

static void kick(struct dlog_writer *dw)
{
    (void)!write(dw->efd, &(uint64_t){ 1 }, sizeof(uint64_t));
}

void dlog_decided(struct worker *w, const struct dlog_note *no, const struct rules *rs,
                  const struct eval_result *res)
{
    bool wake = false;

    dlog_ring_put(w->dlog, no, rs, res, &wake);
    if (wake)
        kick(w->s->o.dlog);
}

int dlog_report(struct worker *w, const struct dlog_decision *d)
{
    bool wake = false;
    int r;

    if (!w->dlog)
        return -ENODEV;
    r = dlog_ring_put_report(w->dlog, d, &wake);
    if (r == -ENOSPC)
        __atomic_fetch_add(&w->s->o.dlog->reports_dropped, 1, __ATOMIC_RELAXED);
    if (wake)
        kick(w->s->o.dlog);
    return r;
}

bool dlog_on(const struct srv *s)
{
    return s->o.dlog != NULL;
}
