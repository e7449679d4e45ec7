/* SPDX-License-Identifier: MIT */
/*
 * dlog: the decision log's records and files (docs/decision-log.md, DESIGN
 * §13).  divvyd's writer (daemon/dlog_writer.c) encodes decisions into
 * blocks and appends them to rotating files; `divvyctl log` and `divvyctl
 * replay` read them back.  This module is the format only: it does no
 * I/O of its own except dlog_reader_open()'s read-only file, keeps no
 * global state and is thread-safe per object.
 *
 * A file is a header then blocks.  A block is self-contained: its own
 * string dictionary, its own CRC-32C, a magic to find the next one from
 * when a block is corrupt or cut short.  A reader skips what it cannot
 * trust (reported as a DLOG_CORRUPT item, with its offset and why), never
 * crashes on any input (tests/fuzz/fuzz_dlog.c), and never allocates more
 * than a bounded block (DLOG_BLOCK_MAX) for one block.
 */
#ifndef DIVVY_DLOG_H
#define DIVVY_DLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "rules.h"

#define DLOG_VERSION        1
#define DLOG_BLOCK_MAX      (1u << 20)  /* bytes of one block, header included */
#define DLOG_FILE_SUFFIX    ".dlog"
#define DLOG_UNKNOWN_ID     UINT32_MAX  /* uid or pid not known */

/* What the log keeps of one request value (decision_log.redact). */
enum dlog_redact {
    DLOG_KEEP = 0,              /* the value as received */
    DLOG_HASH = 1,              /* value: 16 hex digits of a keyed SipHash of it */
    DLOG_DROP = 2,              /* value: "" (the key is kept) */
};

/* The front-end a decision came through. */
enum dlog_protocol {
    DLOG_PROTO_LINE = 0,        /* the line protocol (and libdivvy over the socket) */
    DLOG_PROTO_RESP = 1,
    DLOG_PROTO_RLS = 2,
    DLOG_PROTO_FAST = 3,        /* decided in a libdivvy client's process, reported by it */
    DLOG_N_PROTO
};

/* Where the deciding rule's counter lives. */
enum dlog_path {
    DLOG_PATH_NONE = 0,         /* no rule decided (an error), or zero semantics */
    DLOG_PATH_LOCAL = 1,        /* this host's table (fast_path rules' too) */
    DLOG_PATH_LEASE = 2,
    DLOG_PATH_STRICT = 3,
    DLOG_N_PATH
};

/* dlog_decision.flags */
#define DLOG_F_ALLOWED      0x01
#define DLOG_F_PRIVILEGED   0x02        /* root or the admin group on the Unix socket */
#define DLOG_F_REPORTED     0x04        /* a libdivvy client's own report (protocol FAST) */
#define DLOG_F_ERROR        0x08        /* no decision: err says why */
#define DLOG_F_STORE_DOWN   0x10        /* a rule on the path answered by on_redis_error */
#define DLOG_F_TABLE_FULL   0x20        /* a rule on the path answered by the full-table policy */

/* dlog_outcome.flags */
#define DLOG_O_ALLOWED      0x01
#define DLOG_O_COUNTED      0x02
#define DLOG_O_TABLE_FULL   0x04
#define DLOG_O_STORE_DOWN   0x08
#define DLOG_O_CANARY       0x10

struct dlog_kv {
    const char *key;
    const char *value;
    uint32_t key_len;
    uint32_t value_len;
    uint8_t redact;             /* enum dlog_redact: what value is */
};

/* One rule's answer on the request's path (struct eval_outcome). */
struct dlog_outcome {
    uint64_t rule_id;           /* struct rules_rule.id */
    uint64_t credit;
    uint64_t reset_s;
    uint8_t flags;              /* DLOG_O_* */
};

/* One decision (or an ERR in its place). */
struct dlog_decision {
    uint64_t unix_ms;           /* wall clock (CLOCK_REALTIME) when decided */
    uint64_t mono_ms;           /* CLOCK_MONOTONIC ms: the engine's clock */
    uint64_t generation;        /* the rules' (a DLOG_RULES item describes them) */
    uint8_t op;                 /* enum table_op */
    uint8_t protocol;           /* enum dlog_protocol */
    uint8_t path;               /* enum dlog_path */
    uint8_t flags;              /* DLOG_F_* */
    uint16_t err;               /* DLOG_F_ERROR: enum proto_err */
    uint64_t n;                 /* TAKE n, DEBIT n; 1 otherwise */
    uint32_t uid;               /* the peer's; DLOG_UNKNOWN_ID over TCP */
    uint32_t pid;
    uint64_t credit;            /* the answer (eval_result) */
    uint64_t reset_s;
    uint64_t decider_id;        /* rules_rule.id of the rule the reply names; 0: none */
    uint32_t n_reset;           /* RESET: counters forgotten */
    unsigned n_kv;
    struct dlog_kv kv[PROTO_KV_MAX];    /* sorted by key, as the engine had them */
    unsigned n_out;
    struct dlog_outcome out[RULES_MATCH_MAX];
};

/* One rule as the log describes it, so a reader needs no config. */
struct dlog_rule {
    uint64_t id;
    const char *id_str;         /* label, or 16 hex digits */
    uint32_t id_len;
    uint8_t algo;               /* enum rules_algo */
    uint8_t store;              /* enum rules_store */
    uint8_t policy;             /* enum rules_policy */
    bool fast_path;
    int64_t credit_limit;
    int64_t reset_ms;
    int prefix4, prefix6;       /* actor_prefix4/6; -1: none */
    unsigned n_actor;
    const char *actor[RULES_ACTOR_KEYS_MAX];
    uint32_t actor_len[RULES_ACTOR_KEYS_MAX];
};

/* Part of the rules in force from a generation on (a long rule list spans
 * several items: rules first .. first + n - 1 of total). */
struct dlog_rules {
    uint64_t generation;
    uint64_t unix_ms;           /* when they came in force (divvyd's reload) */
    uint32_t total;
    uint32_t first;
    unsigned n;
    const struct dlog_rule *rule;
};

/* Decisions divvyd could not record (a worker's buffer was full). */
struct dlog_gap {
    uint64_t unix_ms;           /* when the last of them was dropped */
    uint64_t dropped;
};

enum dlog_type {
    DLOG_EOF = 0,
    DLOG_DECISION = 1,
    DLOG_RULES = 2,
    DLOG_GAP = 3,
    DLOG_CORRUPT = 4,           /* skipped bytes: what and where (never fatal) */
};

struct dlog_corrupt {
    uint64_t offset;            /* in the file */
    uint64_t skipped;           /* bytes */
    const char *why;            /* "bad CRC", "truncated block", ... */
};

/* One item read; its strings are valid until the next dlog_reader_next(). */
struct dlog_item {
    enum dlog_type type;
    uint32_t block_worker;      /* the block's writer (worker index; the reported-records
                                 * lane is documented in docs/decision-log.md) */
    union {
        struct dlog_decision d;
        struct dlog_rules rules;
        struct dlog_gap gap;
        struct dlog_corrupt corrupt;
    } u;
};

/* ---- writing ---------------------------------------------------------------------------- */

/* A file's header into @buf (at most DLOG_HEADER_MAX bytes): @unix_ms when it
 * was started, @host its writer's host name.  Returns its length, or 0 when
 * @size is too small. */
#define DLOG_HEADER_MAX 320
size_t dlog_file_header(uint8_t *buf, size_t size, uint64_t unix_ms, const char *host);

/* A block being built: its dictionary and its buffer (dlog_enc_new()). */
struct dlog_enc;

/* An encoder for blocks of at most @cap bytes (<= DLOG_BLOCK_MAX); NULL: no memory. */
struct dlog_enc *dlog_enc_new(size_t cap);
void dlog_enc_free(struct dlog_enc *e);

/* Starts a new block of writer @worker: times in it are deltas from the
 * first record's.  Forgets the previous block's dictionary. */
void dlog_enc_begin(struct dlog_enc *e, uint32_t worker);

/* Appends one item to the block: 0; -ENOBUFS when it does not fit (the
 * block is unchanged: finish it, begin another and add it again; an item
 * that does not fit an empty block is -E2BIG); -EINVAL for a field out of
 * range (n_kv > PROTO_KV_MAX, ...). */
int dlog_enc_decision(struct dlog_enc *e, const struct dlog_decision *d);
int dlog_enc_rules(struct dlog_enc *e, const struct dlog_rules *r);
int dlog_enc_gap(struct dlog_enc *e, const struct dlog_gap *g);

/* Records in the block so far. */
unsigned dlog_enc_count(const struct dlog_enc *e);

/* Seals the block (header, CRC) and returns it in *ret (valid until the
 * next dlog_enc_begin()) and its length; 0 when it holds no record. */
size_t dlog_enc_finish(struct dlog_enc *e, const uint8_t **ret);

/* ---- reading ---------------------------------------------------------------------------- */

struct dlog_reader;

/* Opens @path (read-only) and checks its header: 0, -errno, or -EBADMSG
 * (not a decision log, or a version this build does not read: *ret NULL). */
int dlog_reader_open(const char *path, struct dlog_reader **ret);

/* A reader over @len bytes at @data (borrowed; the fuzzer's entry). */
int dlog_reader_mem(const void *data, size_t len, struct dlog_reader **ret);

void dlog_reader_close(struct dlog_reader *rd);

/* The header's start time and host ("" when none). */
uint64_t dlog_reader_started(const struct dlog_reader *rd);
const char *dlog_reader_host(const struct dlog_reader *rd);

/* The next item into *ret: 1, 0 at the end (ret->type DLOG_EOF), -errno on
 * a read error.  A block that fails its checks is one DLOG_CORRUPT item and
 * reading goes on at the next block magic after its start. */
int dlog_reader_next(struct dlog_reader *rd, struct dlog_item *ret);

/* ---- names ------------------------------------------------------------------------------ */

const char *dlog_protocol_name(unsigned p);     /* "line" "resp" "rls" "fast"; "?" */
const char *dlog_path_name(unsigned p);         /* "none" "local" "lease" "strict"; "?" */
const char *dlog_op_name(unsigned op);          /* "TAKE" "PEEK" "RESET" "DEBIT"; "?" */

/*
 * The actor rule @r counts request @d under (its actor keys' values joined
 * as rules_actor() joins them, actor_prefix4/6 applied) into @buf: its
 * length, or -ENOBUFS.  For readers that group decisions by counter
 * (`divvyctl log --locks`, the replay report).
 */
int dlog_actor(const struct dlog_rule *r, const struct dlog_decision *d, char *buf,
               size_t size);

#endif
