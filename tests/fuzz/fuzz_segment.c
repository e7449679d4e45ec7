/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for what a libdivvy client reads from shared files: the
 * counter table (fast.table, docs/dev/shm.md) and the compiled rules
 * (rules.<generation>, docs/dev/rules.md "Compiled form").  Whatever bytes
 * another process left there, a client must either refuse them cleanly
 * (-EBADMSG, -ENOTSUP, ...) or use them without crashing, hanging, reading
 * outside the mapping or leaking; wrong answers from a corrupt but
 * well-formed file are allowed.
 *
 * The first input byte picks a mode:
 *   0  the input as a rules blob: rules_from_blob(), then match, get,
 *      describe, actor and why-not over requests from the input;
 *   1  the same on a valid template blob with input-chosen patches;
 *   2  the input as a table file (optionally with a valid header put in
 *      front): table_attach(), then table operations from the input;
 *   3  the same on a template table (live, lease and capped counters made
 *      by eval_request() and the lease calls) with input-chosen patches;
 *   4  the real client: a fake divvyd (a thread on a Unix socket) answers
 *      FAST with a patched table memfd (sealed, or not) and a control page
 *      (generation, heartbeat, lease_max and when_full from the input) and
 *      the state directory holding a patched rules.<generation>; the handle,
 *      opened with divvy_open(DIVVY_FAST_ONLY), is driven through
 *      divvy_hit/take/debit/peek/hit_many while the input also writes into the
 *      table, publishes new generations (or any 8 bytes as one) and stops
 *      the heartbeat between calls.
 * Mode 4 needs libdivvy (the sources in libclient/) linked in besides
 * common/, which this harness's own Makefile rule does; without it (the
 * generic rule) mode 4 falls back to mode 3.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../libclient/divvy.h"
#include "clock.h"
#include "diag.h"
#include "eval.h"
#include "fuzz.h"
#include "rules.h"
#include "table.h"

#define GEN             5u
#define SLOTS           64u
#define HDR_SIZE        20480u
#define TABLE_SIZE      (HDR_SIZE + 64u * SLOTS)
#define OFF_SECRET      48u
#define OFF_BOOT_ID     32u
#define CTL_SIZE        4096u           /* docs/dev/shm.md "Control page" */
#define CTL_GEN         64u
#define CTL_HB          128u
#define CTL_LEASE_MAX   192u
#define CTL_WHEN_FULL   200u
#define MAX_REQS        6
#define MAX_OPS         24
#define MAX_KEYS        32
#define BLOB_MAX        (1u << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv);

/* libdivvy is linked in by this harness's own Makefile rule; built with
 * common/ alone (the generic fuzz rule) these stay NULL and mode 4 runs
 * mode 3 instead. */
#pragma weak divvy_open
#pragma weak divvy_close
#pragma weak divvy_hit
#pragma weak divvy_take
#pragma weak divvy_debit
#pragma weak divvy_peek
#pragma weak divvy_hit_many
#pragma weak divvy_errmsg

static char dir[64];
static char table_path[128], rules_path[128], rules_path2[128], address[160];
static uint8_t *tpl_table;              /* TABLE_SIZE bytes */
static uint8_t *tpl_blob;
static size_t tpl_blob_len;
static uint64_t tpl_now;                /* CLOCK_MONOTONIC ms when the template was made */

/* What the fake divvyd hands out for the current input (mode 4). */
static int cur_table = -1, cur_ctl = -1;
static uint8_t *cur_ctl_map;            /* our writable mapping, as divvyd keeps one */
static char fast_reply[200];

/* (counter, limits) pairs the template table holds, so patched slots are found. */
static struct table_key keys[MAX_KEYS];
static char key_actor[MAX_KEYS][RULES_ACTOR_MAX + 1];
static struct table_limits key_lim[MAX_KEYS];
static unsigned n_keys;

/* ---- requests ------------------------------------------------------------ */

static const char *const req_keys[] = { "method", "path", "ip", "user", "admin", "deny",
                                        "lease", "x" };
static const char *const req_values[] = { "GET", "POST", "/a", "/a/b", "/s", "10.1.2.3",
                                          "2001:db8::1", "::ffff:1.2.3.4", "alice", "bob",
                                          "1", "", "a,b%c" };

/* The template's own requests: each reaches a different rule. */
static const struct divvy_kv tpl_reqs[][4] = {
    { { "ip", "10.1.2.3" }, { "method", "GET" }, { "path", "/a/b" }, { NULL, NULL } },
    { { "ip", "2001:db8::1" }, { "method", "GET" }, { "path", "/a" }, { "user", "bob" } },
    { { "ip", "1.2.3.4" }, { "path", "/s" }, { "user", "alice" }, { NULL, NULL } },
    { { "admin", "1" }, { NULL, NULL } },
    { { "deny", "1" }, { NULL, NULL } },
    { { "lease", "1" }, { NULL, NULL } },
    { { "x", "y" }, { NULL, NULL } },
};
#define N_TPL_REQS (sizeof(tpl_reqs) / sizeof(tpl_reqs[0]))

struct fuzz_req {
    struct divvy_kv dkv[DIVVY_MAX_KEYS];
    size_t n_dkv;
    char strings[DIVVY_MAX_KEYS * 2][24];
    struct proto_kv kv[DIVVY_MAX_KEYS];
    struct rules_req req;
};

static size_t tpl_req_len(size_t i)
{
    size_t n = 0;

    while (n < 4 && tpl_reqs[i][n].key)
        n++;
    return n;
}

static int kv_cmp(const void *x, const void *y)
{
    const struct proto_kv *a = x, *b = y;
    size_t n = a->key_len < b->key_len ? a->key_len : b->key_len;
    int c = memcmp(a->key, b->key, n);

    return c ? c : (a->key_len > b->key_len) - (a->key_len < b->key_len);
}

/* Template request @i as the matcher wants it. */
static void tpl_rules_req(size_t i, struct fuzz_req *q)
{
    q->n_dkv = tpl_req_len(i);
    memcpy(q->dkv, tpl_reqs[i], q->n_dkv * sizeof(q->dkv[0]));
    for (size_t j = 0; j < q->n_dkv; j++) {
        q->kv[j] = (struct proto_kv){ .key = q->dkv[j].key, .value = q->dkv[j].value,
                                      .key_len = (uint16_t)strlen(q->dkv[j].key),
                                      .value_len = (uint16_t)strlen(q->dkv[j].value) };
    }
    qsort(q->kv, q->n_dkv, sizeof(q->kv[0]), kv_cmp);
    q->req = (struct rules_req){ .kv = q->kv, .n_kv = (unsigned)q->n_dkv, .privileged = true };
}

/* A request from the input: a template one, or pairs from small dictionaries. */
static void build_req(struct fz *f, struct fuzz_req *q)
{
    unsigned mode = fz_u8(f), m = 0;

    q->n_dkv = 0;
    if (mode < 128) {
        size_t t = mode % N_TPL_REQS;

        q->n_dkv = tpl_req_len(t);
        memcpy(q->dkv, tpl_reqs[t], q->n_dkv * sizeof(q->dkv[0]));
    } else {
        size_t n = fz_below(f, 6);

        for (size_t i = 0; i < n; i++) {
            char *k = q->strings[2 * i], *v = q->strings[2 * i + 1];
            unsigned b = fz_u8(f);

            snprintf(k, sizeof(q->strings[0]), "%s",
                     req_keys[b % (sizeof(req_keys) / sizeof(req_keys[0]))]);
            b = fz_u8(f);
            if (b < 200) {
                snprintf(v, sizeof(q->strings[0]), "%s",
                         req_values[b % (sizeof(req_values) / sizeof(req_values[0]))]);
            } else {
                size_t len = fz_bytes(f, v, fz_below(f, sizeof(q->strings[0])));

                v[len] = '\0';
                for (size_t j = 0; j < len; j++) {
                    if (v[j] == '\0' || v[j] == '"' || v[j] == '\n' || v[j] == '\r')
                        v[j] = '_';
                }
            }
            q->dkv[q->n_dkv++] = (struct divvy_kv){ k, v };
        }
    }
    /* As the matcher wants it: sorted, unique keys, the last value wins. */
    for (size_t i = 0; i < q->n_dkv; i++) {
        q->kv[i] = (struct proto_kv){ .key = q->dkv[i].key, .value = q->dkv[i].value,
                                      .key_len = (uint16_t)strlen(q->dkv[i].key),
                                      .value_len = (uint16_t)strlen(q->dkv[i].value) };
    }
    for (size_t i = 0; i < q->n_dkv; i++) {
        bool later = false;

        for (size_t k = i + 1; k < q->n_dkv; k++)
            later |= kv_cmp(&q->kv[i], &q->kv[k]) == 0;
        if (!later)
            q->kv[m++] = q->kv[i];
    }
    qsort(q->kv, m, sizeof(q->kv[0]), kv_cmp);
    q->req = (struct rules_req){ .kv = q->kv, .n_kv = m, .privileged = mode & 1 };
}

/* ---- files --------------------------------------------------------------- */

static void write_file(const char *p, const void *data, size_t size)
{
    size_t off = 0;
    int fd;

    /* A new file each time: no truncate-and-rewrite flush on ext4. */
    unlink(p);
    fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    while (off < size) {
        ssize_t n = write(fd, (const uint8_t *)data + off, size - off);

        CHECK(n > 0);
        off += (size_t)n;
    }
    close(fd);
}

static uint8_t *read_file(const char *p, size_t *ret_len)
{
    uint8_t *buf = malloc(BLOB_MAX);
    ssize_t n;
    int fd;

    CHECK(buf != NULL);
    fd = open(p, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    n = read(fd, buf, BLOB_MAX);
    CHECK(n > 0 && n < (ssize_t)BLOB_MAX);
    close(fd);
    *ret_len = (size_t)n;
    return buf;
}

/*
 * Input-chosen patches to @buf: each one picks a region (header fields,
 * anywhere, the tail), an offset and what to write (a byte, an xor, a small
 * or extreme 32/64-bit value, a copy of another place).
 */
static void apply_patches(struct fz *f, uint8_t *buf, size_t len, size_t hot_start,
                          size_t hot_len)
{
    unsigned n = 1 + fz_below(f, 8);

    for (unsigned i = 0; i < n && !fz_empty(f); i++) {
        unsigned how = fz_u8(f), where = fz_u8(f);
        size_t off;
        uint64_t v;

        if (where < 64)
            off = fz_below(f, 512) % len;                           /* header fields */
        else if (where < 160 && hot_len)
            off = hot_start + fz_below(f, 65536) % hot_len;         /* slots / pool */
        else
            off = fz_below(f, 65536) % len;
        switch (how % 6) {
        case 0:
            buf[off] = fz_u8(f);
            break;
        case 1:
            buf[off] ^= (uint8_t)(1u << (fz_u8(f) % 8));
            break;
        case 2:
            v = fz_u8(f);
            if (off + 4 <= len)
                memcpy(buf + off, &(uint32_t){ (uint32_t)(v < 128 ? v : UINT32_MAX - v) }, 4);
            break;
        case 3:
            v = fz_u64(f);
            if (off + 8 <= len)
                memcpy(buf + off, &v, 8);
            break;
        case 4: {
            size_t from = fz_below(f, 65536) % len, k = 1 + fz_below(f, 32);

            if (off + k <= len && from + k <= len)
                memmove(buf + off, buf + from, k);
            break;
        }
        default:
            v = (uint64_t)1 << (fz_u8(f) % 64);
            if (off + 8 <= len)
                memcpy(buf + off, &v, 8);
            break;
        }
    }
}

/* ---- rules --------------------------------------------------------------- */

static void exercise_rules(struct fz *f, const struct rules *rules)
{
    static char buf[RULES_ACTOR_MAX * 4];
    static struct fuzz_req q;
    size_t n = rules_count(rules);
    struct rules_rule rr;

    CHECK(n >= 1);
    (void)rules_uses_store(rules);
    (void)rules_generation(rules);
    for (size_t i = 0; i < n && i < 64; i++) {
        CHECK(rules_get(rules, (uint32_t)i, &rr) == 0);
        CHECK(rr.index == i);
        CHECK(strlen(rr.id_str) + strlen(rr.label) + strlen(rr.comment) + strlen(rr.file) <
              BLOB_MAX);
        CHECK(rules_describe(rules, (uint32_t)i, buf, sizeof(buf)) >= 0);
        CHECK(rules_actor_keys(rules, (uint32_t)i, buf, sizeof(buf)) >= 0);
    }
    CHECK(rules_get(rules, (uint32_t)n, &rr) == -ENOENT);
    for (unsigned k = 0; k < MAX_REQS && !fz_empty(f); k++) {
        uint32_t idx[RULES_MATCH_MAX];
        size_t m;

        build_req(f, &q);
        m = rules_match(rules, &q.req, idx);
        /* docs/rules.md: an accepted blob always yields a path ending at a stop rule. */
        CHECK(m >= 1 && m <= RULES_MATCH_MAX);
        for (size_t i = 0; i < m; i++) {
            int a;

            CHECK(idx[i] < n);
            CHECK(i == 0 || idx[i] > idx[i - 1]);
            CHECK(rules_why_not(rules, idx[i], &q.req, buf, sizeof(buf)) == 0);
            a = rules_actor(rules, idx[i], &q.req, buf, sizeof(buf));
            CHECK(a >= 0 && (size_t)a == strlen(buf));
        }
        CHECK(rules_get(rules, idx[m - 1], &rr) == 0);
        CHECK(rr.policy == RULES_POLICY_STOP || m == RULES_MATCH_MAX);
        {
            uint32_t i = fz_below(f, (unsigned)n + 1);
            int w = rules_why_not(rules, i, &q.req, buf, sizeof(buf));

            CHECK(i < n ? w >= 0 : w == -ENOENT);
        }
    }
}

static void run_blob(struct fz *f, bool patch)
{
    struct rules *rules = NULL;
    uint8_t *blob;
    size_t len;
    int r;

    if (patch) {
        len = tpl_blob_len;
        blob = malloc(len);
        CHECK(blob != NULL);
        memcpy(blob, tpl_blob, len);
        apply_patches(f, blob, len, 128, len - 128);
        if (fz_u8(f) == 0xff)
            len -= fz_below(f, (unsigned)len);      /* truncated */
    } else {
        len = f->left;
        blob = malloc(len ? len : 1);
        CHECK(blob != NULL);
        fz_bytes(f, blob, len);
    }
    r = rules_from_blob(blob, len, &rules);
    free(blob);                                     /* rules_from_blob() copied it */
    CHECK(r == 0 || r == -EBADMSG);
    if (r == 0) {
        /* The input went into the blob: ask it the template's requests. */
        static const uint8_t pick[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13 };
        struct fz tpl = { pick, sizeof(pick) };

        exercise_rules(patch ? f : &tpl, rules);
    }
    rules_free(rules);
}

/* ---- table --------------------------------------------------------------- */

static int count_entry(const struct table_entry *e, void *userdata)
{
    unsigned *n = userdata;

    CHECK(e->actor_is_digest ? e->actor_len == 16 : e->actor_len <= 32);
    CHECK(e->actor_len == 0 || e->actor != NULL);
    CHECK(e->algo <= RULES_ALGO_LAST);
    return ++*n > SLOTS;
}

static void random_limits(struct fz *f, struct table_limits *lim)
{
    memset(lim, 0, sizeof(*lim));
    lim->algo = (enum rules_algo)fz_below(f, 4);    /* 3: out of range, must be refused */
    lim->credit_limit = fz_u8(f) < 16 ? fz_u64(f) : fz_below(f, 100);
    lim->reset_ms = fz_below(f, 4) ? 1000u * fz_below(f, 120) : fz_u64(f);
    lim->refill_amount = fz_below(f, 10);
    lim->refill_ms = 1000u * fz_below(f, 60);
    lim->strict = fz_u8(f) & 1;
    lim->max_actors = fz_below(f, 4);
    lim->lease = fz_u8(f) < 32;
    lim->lease_max = fz_below(f, 2000);
}

static void exercise_table(struct fz *f, struct table *t)
{
    char actor[40];

    CHECK(table_slots(t) >= TABLE_SLOTS_MIN && table_slots(t) <= TABLE_SLOTS_MAX);
    (void)table_generation(t);
    (void)table_last_heartbeat(t);
    for (unsigned i = 0; i < MAX_OPS && !fz_empty(f); i++) {
        unsigned op = fz_u8(f), which = fz_u8(f);
        uint64_t now = tpl_now + fz_below(f, 65536) * 37u, n = 1 + fz_below(f, 4);
        struct table_key key;
        struct table_limits lim;
        struct table_result res;
        struct table_lease_result lr;
        struct table_stats st;
        unsigned seen = 0;
        int r;

        if (which < 200 && n_keys) {
            key = keys[which % n_keys];
            lim = key_lim[which % n_keys];
        } else {
            key.rule_id = fz_u64(f);
            key.actor_len = fz_bytes(f, actor, fz_below(f, sizeof(actor)));
            key.actor = actor;
            random_limits(f, &lim);
        }
        if (fz_u8(f) > 240)
            now = fz_u64(f);
        switch (op % 9) {
        case 0:
        case 1:
        case 2:
            /* TAKE, PEEK, RESET, and DEBIT (charges into debt) */
            r = table_hit(t, &key, &lim, op & 0x40 ? TABLE_DEBIT : (enum table_op)(op % 3), n,
                          now, &res);
            CHECK(r == 0 || r == -ENOSPC || r == -EDQUOT || r == -EINVAL || r == -EAGAIN);
            break;
        case 3:
            lim.lease = true;
            r = table_lease_take(t, &key, &lim, n, op & 0x80, now, &lr);
            CHECK(r == 0 || r == -ENOSPC || r == -EDQUOT || r == -EINVAL || r == -EAGAIN);
            if (r == 0)
                CHECK(lr.verdict <= TABLE_LEASE_ASK);
            break;
        case 4: {
            struct table_lease_grant g = {
                .granted = fz_below(f, 3000), .remain = fz_below(f, 3000),
                .end_ms = now + fz_below(f, 120000), .created = fz_u8(f) & 1,
                .fetch = fz_u8(f) & 1,
            };

            if (fz_u8(f) > 240) {
                g.granted = fz_u64(f);
                g.remain = fz_u64(f);
                g.end_ms = fz_u64(f);
            }
            lim.lease = true;
            r = table_lease_grant(t, &key, &lim, &g, now);
            CHECK(r == 0 || r == -ENOSPC || r == -EDQUOT || r == -EINVAL || r == -EAGAIN);
            break;
        }
        case 5:
            lim.lease = true;
            r = table_lease_abort(t, &key, &lim, now);
            CHECK(r == 0 || r == -EINVAL || r == -EAGAIN);
            break;
        case 6:
            CHECK(table_sweep(t, now) <= table_slots(t));
            table_stats(t, now, &st);
            CHECK(st.slots == table_slots(t) && st.live <= st.slots);
            break;
        case 7:
            table_foreach(t, now, count_entry, &seen);
            CHECK(seen <= table_slots(t));
            break;
        default:
            CHECK(table_lease_clear_fetches(t, now) <= table_slots(t));
            break;
        }
    }
}

/* A valid header for @n_slots slots in front of whatever the slots hold. */
static void put_header(uint8_t *buf, uint32_t n_slots)
{
    uint64_t size = HDR_SIZE + 64ull * n_slots;

    memcpy(buf, tpl_table, 4096);       /* magic, layout, boot id, secret; no quota */
    memcpy(buf + 20, &n_slots, 4);
    memcpy(buf + 24, &size, 8);
}

static void run_table(struct fz *f, bool patch)
{
    struct table *t = NULL;
    uint8_t *buf;
    size_t len;
    int r;

    if (patch) {
        len = TABLE_SIZE;
        buf = malloc(len);
        CHECK(buf != NULL);
        memcpy(buf, tpl_table, len);
        apply_patches(f, buf, len, HDR_SIZE, SLOTS * 64u);
    } else {
        unsigned flags = fz_u8(f);
        uint32_t n_slots = flags & 2 ? 2 * SLOTS : SLOTS;

        if (flags & 1) {
            /* Random slots and quota entries behind a valid header. */
            len = HDR_SIZE + 64u * n_slots;
            buf = calloc(1, len);
            CHECK(buf != NULL);
            put_header(buf, n_slots);
            fz_bytes(f, buf + (flags & 4 ? 4096 : HDR_SIZE), len - HDR_SIZE);
        } else {
            len = f->left;
            buf = malloc(len ? len : 1);
            CHECK(buf != NULL);
            fz_bytes(f, buf, len);
        }
    }
    write_file(table_path, buf, len);
    free(buf);
    r = table_attach(table_path, &t);
    CHECK(r == 0 || r == -EBADMSG);
    if (r == 0)
        exercise_table(f, t);
    table_close(t);
}

/* ---- the client ---------------------------------------------------------- */

static void check_result(int r, const struct divvy_result *res)
{
    /* FAST_ONLY: decided here, or refused with a reason. */
    CHECK(r == 0 || r == -ENOTSUP || r == -EBADMSG || r == -ENOENT || r == -EINVAL ||
          r == -E2BIG || r == -EMSGSIZE || r == -ENOMEM);
    if (r == 0) {
        CHECK(res->fast_path == 1);
        CHECK(res->allowed == 0 || res->allowed == 1);
        CHECK(memchr(res->rule, '\0', sizeof(res->rule)) != NULL);
    }
}

/*
 * What another process may do to the files while the client has them
 * mapped: write any bytes into the table, publish another generation (its
 * rules file first, as divvyd does), stop or resume the heartbeat.
 */
static void live_change(struct fz *f, uint64_t *gen)
{
    unsigned what = fz_u8(f);
    uint8_t bytes[8], *blob;
    size_t off, len;
    uint64_t v;

    if (what % 4 == 0)
        return;
    switch (what % 4) {
    case 1:
        off = what & 0x80 ? HDR_SIZE + fz_below(f, SLOTS * 64u) : fz_below(f, HDR_SIZE);
        len = fz_bytes(f, bytes, 1 + fz_below(f, 8));
        if (off + len > TABLE_SIZE)
            len = TABLE_SIZE - off;
        CHECK(pwrite(cur_table, bytes, len, (off_t)off) == (ssize_t)len);
        break;
    case 2:
        if (what & 0x40) {
            /* Any generation at all, with or without a file. */
            memset(bytes, 0, sizeof(bytes));
            fz_bytes(f, bytes, 8);
            memcpy(&v, bytes, 8);
            __atomic_store_n((uint64_t *)(void *)(cur_ctl_map + CTL_GEN), v, __ATOMIC_RELEASE);
            break;
        }
        v = *gen = *gen == GEN ? GEN + 1 : GEN;
        blob = malloc(tpl_blob_len);
        CHECK(blob != NULL);
        memcpy(blob, tpl_blob, tpl_blob_len);
        memcpy(blob + 24, &v, 8);               /* the blob's generation field */
        if (what & 0x80)
            apply_patches(f, blob, tpl_blob_len, 128, tpl_blob_len - 128);
        write_file(v == GEN ? rules_path : rules_path2, blob, tpl_blob_len);
        free(blob);
        __atomic_store_n((uint64_t *)(void *)(cur_ctl_map + CTL_GEN), v, __ATOMIC_RELEASE);
        break;
    default:
        v = what & 0x80 ? 0 : clock_now_ms();
        __atomic_store_n((uint64_t *)(void *)(cur_ctl_map + CTL_HB), v, __ATOMIC_RELEASE);
        break;
    }
}

/* The memfds divvyd would hand out, forged from @table and the input's @flags. */
static void forge_fds(const uint8_t *table, unsigned flags)
{
    uint64_t v;

    cur_table = memfd_create("divvy-fast-table", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(cur_table >= 0 && ftruncate(cur_table, TABLE_SIZE) == 0 &&
          pwrite(cur_table, table, TABLE_SIZE, 0) == (ssize_t)TABLE_SIZE);
    /* An unsealed table must be refused (a client could never trust its size). */
    if (!(flags & 8))
        CHECK(fcntl(cur_table, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
    cur_ctl = memfd_create("divvy-control", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(cur_ctl >= 0 && ftruncate(cur_ctl, CTL_SIZE) == 0);
    cur_ctl_map = mmap(NULL, CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, cur_ctl, 0);
    CHECK(cur_ctl_map != MAP_FAILED);
    memcpy(cur_ctl_map, "DIVVYCT1", 8);
    v = 1u | (uint64_t)CTL_SIZE << 32;          /* version, size */
    memcpy(cur_ctl_map + 8, &v, 8);
    memcpy(cur_ctl_map + 16, tpl_table + OFF_BOOT_ID, 16);
    v = GEN;
    memcpy(cur_ctl_map + CTL_GEN, &v, 8);
    /* A live daemon's heartbeat, unless the input wants a stale one. */
    v = flags & 4 ? 0 : clock_now_ms();
    memcpy(cur_ctl_map + CTL_HB, &v, 8);
    v = flags & 16 ? 100 : 0;
    memcpy(cur_ctl_map + CTL_LEASE_MAX, &v, 8);
    v = (flags >> 5) % 3;                       /* 0 none, 1 deny, 2 allow */
    memcpy(cur_ctl_map + CTL_WHEN_FULL, &v, 8);
    CHECK(fcntl(cur_ctl, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE |
                                          F_SEAL_SEAL) == 0);
}

static void drop_fds(void)
{
    if (cur_ctl_map && cur_ctl_map != MAP_FAILED)
        munmap(cur_ctl_map, CTL_SIZE);
    cur_ctl_map = NULL;
    if (cur_table >= 0)
        close(cur_table);
    if (cur_ctl >= 0)
        close(cur_ctl);
    cur_table = cur_ctl = -1;
}

/* The fake divvyd: answers FAST with the current memfds, nothing else. */
static void *fake_divvyd(void *arg)
{
    int lfd = (int)(intptr_t)arg;

    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        char line[64];
        ssize_t n;

        if (fd < 0)
            continue;
        n = read(fd, line, sizeof(line));
        if (n == 5 && memcmp(line, "FAST\n", 5) == 0) {
            int fds[2] = { cur_table, cur_ctl };
            union {
                char b[CMSG_SPACE(sizeof(fds))];
                struct cmsghdr align;
            } u;
            struct iovec iov = { fast_reply, strlen(fast_reply) };
            struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
                                  .msg_controllen = sizeof(u.b) };
            struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);

            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(fds));
            memcpy(CMSG_DATA(cm), fds, sizeof(fds));
            (void)sendmsg(fd, &msg, MSG_NOSIGNAL);
        }
        close(fd);
    }
    return NULL;
}

static void run_client(struct fz *f)
{
    static struct fuzz_req q;
    uint8_t *table = malloc(TABLE_SIZE), *blob = malloc(tpl_blob_len);
    struct divvy_result res = { .size = sizeof(res) };
    struct divvy *h = NULL;
    unsigned flags = fz_u8(f);
    uint64_t gen = GEN;
    int r;

    CHECK(table != NULL && blob != NULL);
    unlink(rules_path2);                /* no generation of an earlier input */
    memcpy(table, tpl_table, TABLE_SIZE);
    memcpy(blob, tpl_blob, tpl_blob_len);
    if (flags & 1)
        apply_patches(f, table, TABLE_SIZE, HDR_SIZE, SLOTS * 64u);
    if (flags & 2)
        apply_patches(f, blob, tpl_blob_len, 128, tpl_blob_len - 128);
    forge_fds(table, flags);
    write_file(rules_path, blob, tpl_blob_len);
    free(table);
    free(blob);

    r = divvy_open(address, DIVVY_FAST_ONLY, &h);
    CHECK(r == 0 || r == -EBADMSG || r == -ENOENT || r == -EACCES || r == -ENOMEM);
    if (r < 0) {
        CHECK(h == NULL);
        drop_fds();
        return;
    }
    for (unsigned k = 0; k < MAX_REQS && !fz_empty(f); k++) {
        unsigned verb = fz_u8(f);

        live_change(f, &gen);
        build_req(f, &q);
        switch (verb % 4) {
        case 0:
            r = divvy_hit(h, q.dkv, q.n_dkv, &res);
            break;
        case 1:
            if ((verb & 0x80) && divvy_debit)
                r = divvy_debit(h, 1 + fz_below(f, 1000), q.dkv, q.n_dkv, &res);
            else
                r = divvy_take(h, 1 + fz_below(f, 1000), q.dkv, q.n_dkv, &res);
            break;
        case 2:
            r = divvy_peek(h, q.dkv, q.n_dkv, &res);
            break;
        default: {
            struct divvy_request reqs[2] = {
                { .amount = 0, .kv = q.dkv, .n_kv = q.n_dkv },
                { .amount = 1 + fz_below(f, 3), .kv = q.dkv, .n_kv = q.n_dkv ? 1 : 0 },
            };
            struct divvy_result out[2] = { { .size = sizeof(res) }, { .size = sizeof(res) } };

            r = divvy_hit_many(h, reqs, 2, out);
            CHECK(r == 2 || r < 0);
            if (r == 2) {
                check_result(0, &out[0]);
                check_result(0, &out[1]);
            }
            r = r == 2 ? 0 : r;
            res = out[0];
            break;
        }
        }
        check_result(r, &res);
        CHECK(strlen(divvy_errmsg(h)) < 512);
    }
    divvy_close(h);
    drop_fds();
}

/* ---- template ------------------------------------------------------------ */

static struct rules_rule_spec *add_rule(struct rules_spec *spec, const char *label,
                                        int64_t limit, int64_t reset)
{
    struct rules_rule_spec *r;

    CHECK(rules_spec_add(spec, "template", (unsigned)spec->n + 1, &r) == 0);
    r->credit_limit = limit;
    r->reset_seconds = reset;
    if (label)
        r->label = strdup(label);
    return r;
}

static void make_template_rules(void)
{
    struct rules_spec spec = { 0 };
    struct rules_rule_spec *r;
    struct rules *rules = NULL;
    struct diag diag;
    const void *blob;

    /* Every kind of value, actor and algorithm; most rules fast_path. */
    r = add_rule(&spec, "get-a", 5, 60);
    CHECK(rules_spec_add_match(r, "method", "GET", 0) == 0);
    CHECK(rules_spec_add_match(r, "path", "/a*", 0) == 0);
    CHECK(rules_spec_add_actor(r, "ip") == 0);
    r->prefix4 = 24;
    r->prefix6 = 64;
    r->fast_path = true;
    r->policy = RULES_POLICY_CANARY;
    r = add_rule(&spec, NULL, 3, -1);
    CHECK(rules_spec_add_match(r, "user", "*", 0) == 0);
    CHECK(rules_spec_add_actor(r, "user") == 0);
    r->algo = RULES_ALGO_TOKEN_BUCKET;
    r->refill_amount = 1;
    r->refill_seconds = 10;
    r->strict = true;
    r->max_actors = 4;
    r->fast_path = true;
    r->policy = RULES_POLICY_CONTINUE;
    r = add_rule(&spec, "sliding", 4, 30);
    CHECK(rules_spec_add_match(r, "path", "/s", 0) == 0);
    CHECK(rules_spec_add_actor(r, "ip") == 0);
    CHECK(rules_spec_add_actor(r, "user") == 0);
    r->algo = RULES_ALGO_SLIDING_WINDOW;
    r->fast_path = true;
    r = add_rule(&spec, "admin", 2, 60);
    CHECK(rules_spec_add_match(r, "admin", "1", 0) == 0);
    r->source = RULES_SOURCE_PRIVILEGED;
    r = add_rule(&spec, "deny", 0, 60);
    CHECK(rules_spec_add_match(r, "deny", "\\*1", 0) == 0);
    CHECK(rules_spec_add_match(r, "x", "*y*", 0) == 0);
    r = add_rule(&spec, "lease", 50, 60);
    CHECK(rules_spec_add_match(r, "lease", "1", 0) == 0);
    r->store = RULES_STORE_LEASE;
    r->store_set = true;
    r = add_rule(&spec, NULL, 100, 60);
    r->is_default = true;
    r->fast_path = true;
    r->comment = strdup("default");

    diag_init(&diag);
    CHECK(rules_compile(&spec, GEN, &rules, &diag) == 0);
    rules_blob(rules, &blob, &tpl_blob_len);
    tpl_blob = malloc(tpl_blob_len);
    CHECK(tpl_blob != NULL);
    memcpy(tpl_blob, blob, tpl_blob_len);

    /* The counters the template requests touch, for the table modes. */
    for (size_t i = 0; i < N_TPL_REQS; i++) {
        static struct fuzz_req q;
        uint32_t idx[RULES_MATCH_MAX];
        size_t m;

        tpl_rules_req(i, &q);
        m = rules_match(rules, &q.req, idx);
        for (size_t j = 0; j < m && n_keys < MAX_KEYS; j++) {
            struct rules_rule rr;
            int a;

            CHECK(rules_get(rules, idx[j], &rr) == 0);
            a = rules_actor(rules, idx[j], &q.req, key_actor[n_keys], sizeof(key_actor[0]));
            CHECK(a >= 0);
            keys[n_keys] = (struct table_key){ .rule_id = rr.id, .actor = key_actor[n_keys],
                                               .actor_len = (size_t)a };
            eval_limits(&rr, &key_lim[n_keys]);
            if (rr.store == RULES_STORE_LEASE) {
                key_lim[n_keys].lease = true;
                key_lim[n_keys].lease_max = 1000;
            }
            n_keys++;
        }
    }
    rules_free(rules);
    rules_spec_free(&spec);
}

/* Builds fast.table as divvyd would (fixed secret, so inputs replay), then
 * fills it with counters of each kind through eval_request() (the code the
 * client's fast path runs) and the lease calls. */
static void make_template_table(void)
{
    static const uint8_t secret[16] = "divvy-fuzz-seg!";
    static struct fuzz_req q;
    struct table_open_info info;
    struct eval_result er;
    struct rules *rules = NULL;
    struct table *t = NULL;
    size_t len;
    int fd;

    CHECK(table_open(table_path, SLOTS, 0600, &t, &info) == 0);
    table_close(t);
    fd = open(table_path, O_WRONLY | O_CLOEXEC);
    CHECK(fd >= 0 && pwrite(fd, secret, sizeof(secret), OFF_SECRET) == sizeof(secret));
    close(fd);
    CHECK(table_attach(table_path, &t) == 0);
    tpl_now = clock_now_ms();
    table_set_generation(t, GEN);
    table_heartbeat(t, tpl_now);
    write_file(rules_path, tpl_blob, tpl_blob_len);

    CHECK(rules_from_blob(tpl_blob, tpl_blob_len, &rules) == 0);
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < N_TPL_REQS; i++) {
            struct eval_env env = { .rules = rules, .fast = t, .priv = t };

            tpl_rules_req(i, &q);
            (void)eval_request(&env, &q.req, TABLE_TAKE, 1, tpl_now, &er);
        }
    }
    rules_free(rules);
    /* Lease slots (only divvyd, talking to Redis, makes them). */
    for (unsigned i = 0; i < n_keys; i++) {
        struct table_lease_grant g = { .granted = 20, .remain = 500, .end_ms = tpl_now + 60000,
                                       .created = true, .fetch = false };
        struct table_lease_result lr;

        if (!key_lim[i].lease)
            continue;
        (void)table_lease_take(t, &keys[i], &key_lim[i], 1, true, tpl_now, &lr);
        (void)table_lease_grant(t, &keys[i], &key_lim[i], &g, tpl_now);
    }
    table_close(t);
    tpl_table = read_file(table_path, &len);
    CHECK(len == TABLE_SIZE);
}

static void cleanup(void)
{
    char sock[128];

    snprintf(sock, sizeof(sock), "%s/divvy.sock", dir);
    unlink(sock);
    unlink(table_path);
    unlink(rules_path);
    unlink(rules_path2);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    unsetenv("DIVVY_ADDRESS");
    unsetenv("DIVVY_PATH");
    snprintf(dir, sizeof(dir), "/dev/shm/divvy-fuzz-segment.XXXXXX");
    if (!mkdtemp(dir)) {
        snprintf(dir, sizeof(dir), "/tmp/divvy-fuzz-segment.XXXXXX");
        CHECK(mkdtemp(dir) != NULL);
    }
    snprintf(table_path, sizeof(table_path), "%s/fast.table", dir);
    snprintf(rules_path, sizeof(rules_path), "%s/rules.%u", dir, GEN);
    snprintf(rules_path2, sizeof(rules_path2), "%s/rules.%u", dir, GEN + 1);
    snprintf(address, sizeof(address), "unix:%s/divvy.sock", dir);
    snprintf(fast_reply, sizeof(fast_reply), "OK fast %s\n", dir);
    atexit(cleanup);
    {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        pthread_t th;
        int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/divvy.sock", dir);
        CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
              listen(lfd, 16) == 0);
        CHECK(pthread_create(&th, NULL, fake_divvyd, (void *)(intptr_t)lfd) == 0);
        CHECK(pthread_detach(th) == 0);
    }
    make_template_rules();
    make_template_table();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz f = { data, size };

    switch (fz_u8(&f) % 5) {
    case 0:
        run_blob(&f, false);
        break;
    case 1:
        run_blob(&f, true);
        break;
    case 2:
        run_table(&f, false);
        break;
    case 3:
        run_table(&f, true);
        break;
    default:
        if (divvy_open)
            run_client(&f);
        else
            run_table(&f, true);
        break;
    }
    return 0;
}
