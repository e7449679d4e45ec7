/* SPDX-License-Identifier: MIT */
/*
 * rules: the rule model (docs/rules.md).  Config loaders build a
 * struct rules_spec (owned strings, file:line per rule); rules_compile()
 * validates it and produces an immutable, flat, pointer-free struct rules
 * (one contiguous blob: header, rule records, index, string pool) that can be
 * written to a file and mapped by other processes as is (rules_from_blob()
 * checks every offset).  Matching walks an index of exact-valued keys (in
 * the blob) and one of glob prefixes (built by each reader when it loads
 * the blob) so a request only tests the rules that can match it, in
 * first-match order.
 *
 * Thread-safety: a compiled struct rules is immutable; any number of threads
 * may match against it concurrently.  Never logs.
 */
#ifndef DIVVY_RULES_H
#define DIVVY_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

struct diag;                   /* server/diag.h: the validator's and compiler's problem list */

/* Validation limits (docs/rules.md). */
#define RULES_MAX             100000
#define RULES_MATCH_MAX       64          /* rules one request may touch (canary/continue + stop) */
#define RULES_ACTOR_KEYS_MAX  8
#define RULES_LIMIT_MAX       ((int64_t)1 << 47)   /* credit_limit, refill_amount */
#define RULES_SLIDING_LIMIT_MAX ((int64_t)1 << 23) /* credit_limit of sliding_window */
#define RULES_SECONDS_MAX     315360000LL          /* 10 years */
#define RULES_LABEL_MAX       64
#define RULES_ACTOR_MAX       (PROTO_LINE_MAX * 3) /* longest actor string rules_actor() writes */
/* credit_limit of a lease rule (docs/dev/shm.md "Lease slots") */
#define RULES_LEASE_LIMIT_MAX    (((int64_t)1 << 24) - 1)
/* strict sliding_window: credit_limit * window ms, exact in Lua (docs/redis.md) */
#define RULES_STRICT_SLIDING_MAX ((int64_t)1 << 52)
/* strict gcra / continuous token_bucket: credit_limit * refill_ms, exact in
 * Lua with ALGO_DEBT_WINDOWS buckets of debt (docs/redis.md) */
#define RULES_STRICT_GCRA_MAX    ((int64_t)1 << 49)

enum rules_policy { RULES_POLICY_STOP = 0, RULES_POLICY_CANARY, RULES_POLICY_CONTINUE };
enum rules_algo {
    RULES_ALGO_WINDOW = 0, RULES_ALGO_TOKEN_BUCKET, RULES_ALGO_SLIDING_WINDOW,
    RULES_ALGO_GCRA,            /* redis-cell's (docs/rules.md "Algorithms") */
    RULES_ALGO_LOCKOUT,         /* login throttling (docs/rules.md "Lockout") */
};
#define RULES_ALGO_LAST RULES_ALGO_LOCKOUT
enum rules_source { RULES_SOURCE_ANY = 0, RULES_SOURCE_PRIVILEGED };
/* Where a rule's counters live (docs/redis.md): the host table alone, the
 * host table spending credit leased from Redis, or Redis for every hit. */
enum rules_store { RULES_STORE_LOCAL = 0, RULES_STORE_LEASE, RULES_STORE_STRICT };
/* A rule's when_full (docs/rules.md "Full"): what a hit that needs a new
 * counter and finds no room gets.  TABLE: the config's table.when_full;
 * EVICT: room made by forgetting a counter of the rule that refused nobody
 * (docs/dev/shm.md "Eviction"), else denied. */
enum rules_full { RULES_FULL_TABLE = 0, RULES_FULL_DENY, RULES_FULL_ALLOW, RULES_FULL_EVICT };

/* algorithm = "lockout" (docs/rules.md "Lockout", common/algo_lock.h): the settings besides
 * credit_limit (failures allowed), in seconds.  In a spec -1 means "not set"; compiled, every
 * field holds its effective value.  Fixed-width: it is part of the compiled blob. */
struct rules_lock {
    int64_t fail_interval;      /* failures are counted over this from the first one; the
                                 * compiled rule's reset_seconds */
    int64_t unlock_time;        /* the first lock's length */
    int64_t lock_max;           /* escalation.max: no lock lasts longer */
    int64_t remember;           /* escalation.remember: a level is forgotten this long after
                                 * the last lock or counting interval ended */
    int64_t delay;              /* delay.seconds: the first delay */
    int64_t delay_max;          /* delay.max */
    int32_t lock_factor;        /* escalation.factor: 1 without escalation */
    int32_t delay_factor;       /* delay.factor */
    int32_t delay_after;        /* delay.after: failures before the first delay; 0: none */
    int32_t set;                /* spec: escalation (1) and delay (2) groups given */
};
#define RULES_LOCK_SET_ESCALATION 1
#define RULES_LOCK_SET_DELAY      2

/* ---- spec: what loaders build ------------------------------------------ */

/* A native-config match operator (docs/rules.md "Addresses and negation"):
 * VALUE is divvy's value (literal or glob), the only one divvy's .ini and
 * .json configs can give. */
enum rules_match_op {
    RULES_MATCH_VALUE = 0,
    RULES_MATCH_CIDR,       /* the value is an address in one of the key's cidr prefixes */
    RULES_MATCH_NOT,        /* the key is missing or its value matches none of its not values */
    RULES_MATCH_NOT_CIDR,   /* the key is missing or its value is in none of the prefixes */
};

struct rules_match_spec {
    char *key;
    char *value;            /* "*" = present with any value; else exact or glob */
    unsigned line;          /* 0: the rule's line */
    enum rules_match_op op; /* entries of one key and op (not VALUE) form one list */
};

struct rules_rule_spec {
    char *file;             /* config file this rule came from */
    unsigned line;
    struct rules_match_spec *match;
    size_t n_match;
    char **actor;           /* actor keys (divvy: actorField); n_actor == 0: one counter */
    size_t n_actor;
    int64_t credit_limit;   /* -1: not set (an error) */
    int64_t reset_seconds;  /* -1: not set; for token_bucket defaults to refill_seconds */
    int64_t refill_amount;  /* token_bucket; -1: not set (default 1) */
    int64_t refill_seconds; /* token_bucket; -1: not set (default reset_seconds) */
    int prefix4;            /* actor_prefix4: 0..32, -1 none */
    int prefix6;            /* actor_prefix6: 0..128, -1 none */
    int64_t max_actors;     /* 0: no cap */
    int64_t max_debit;      /* 0..PROTO_DEBIT_MAX; -1: not set (the credit_limit) */
    bool strict;            /* token_bucket: denied attempts push the refill clock back */
    bool no_reset;          /* resettable = false: RESET leaves this rule's counters alone */
    bool fast_path;
    bool is_default;
    enum rules_policy policy;
    enum rules_algo algo;
    enum rules_source source;
    enum rules_store store; /* meaningful when store_set */
    bool store_set;         /* false: the config's store.mode (rules_spec.default_store) */
    enum rules_full when_full;  /* RULES_FULL_TABLE: not set */
    char *label;            /* NULL or [A-Za-z0-9_-]{1,64} */
    char *comment;
    /* Calendar windows (docs/rules.md "Calendar windows"): the window is the
     * current hour, day, ISO week or month (enum calendar_unit; 0: a window
     * of reset_seconds from the first hit) of @time_zone (NULL: UTC). */
    unsigned calendar;
    unsigned calendar_line;     /* where calendar was set (0: not set) */
    char *time_zone;
    unsigned time_zone_line;
    /* Native only (docs/rules.md "Algorithms"): the window and the refill
     * period in milliseconds, instead of reset_seconds / refill_seconds
     * (never both); -1: not set.  continuous: refill = "continuous";
     * refill_set: refill was given at all. */
    int64_t reset_ms;
    int64_t refill_ms;
    bool continuous;
    bool refill_set;
    struct rules_lock lock; /* algorithm = "lockout" (native only) */
};

struct rules_spec {
    struct rules_rule_spec *rules;
    size_t n;
    size_t cap;
    enum rules_store default_store;     /* store.mode: for rules without their own store */
};

/*
 * Appends a rule with every field at its default/not-set value (limits -1,
 * prefixes -1, policy stop, algo window, source any) and returns it in
 * *ret (owned by @spec; valid until the next rules_spec_add()).  -ENOMEM,
 * -E2BIG past RULES_MAX.
 */
int rules_spec_add(struct rules_spec *spec, const char *file, unsigned line,
                   struct rules_rule_spec **ret);
/* Helpers that copy their string arguments; -ENOMEM. */
int rules_spec_add_match(struct rules_rule_spec *r, const char *key, const char *value,
                         unsigned line);
int rules_spec_add_actor(struct rules_rule_spec *r, const char *key);
/* rules_spec_add_match() of an operator's value: one element of its list. */
int rules_spec_add_match_op(struct rules_rule_spec *r, const char *key, enum rules_match_op op,
                            const char *value, unsigned line);
/* Frees everything the spec owns and zeroes it.  NULL-safe. */
void rules_spec_free(struct rules_spec *spec);

/* true when rule @r ever touches a counter: a positive credit_limit, and a
 * reset_seconds (or a token bucket); the others never reach a store. */
bool rules_spec_counts(const struct rules_rule_spec *r);

/*
 * Rule @r's effective store (docs/redis.md "Modes"): its own store, else
 * @spec's store.mode -- except that a source = privileged (login) rule never
 * inherits "lease": it runs "strict" instead (docs/redis.md "Login rules").
 * An explicit store = "lease" on such a rule is kept here and rejected by
 * rules_validate().
 */
enum rules_store rules_spec_store(const struct rules_spec *spec, const struct rules_rule_spec *r);

/* true when @r is a privileged rule that counts and would have inherited
 * @spec's store.mode "lease" (rules_spec_store() runs it strict). */
bool rules_spec_unleased(const struct rules_spec *spec, const struct rules_rule_spec *r);

/*
 * Checks every rule and the list as a whole (docs/rules.md "Validation"):
 * limits set, integral and in range; algorithm settings consistent; labels
 * valid and unique; no key repeated within a rule; globs well-formed;
 * exactly one default rule, last; no rule unreachable behind an earlier
 * stop rule.  Adds one diag entry per problem.  Returns 0 or -EINVAL.
 */
int rules_validate(const struct rules_spec *spec, struct diag *reterr);

/*
 * Notes on a valid @spec, one "file:line: text" each into @ret, for divvyd
 * to log as warnings and divvyctl check to print: an actor key the rule's
 * match does not name (a request without it shares one counter with every
 * other; "did you mean" a match key when one is close), an actor on a rule
 * that keeps no counter (rules_spec_counts()).  Returns how many.
 */
size_t rules_validate_notes(const struct rules_spec *spec, struct diag *ret);

/* ---- compiled ----------------------------------------------------------- */

struct rules;

/*
 * Validates and compiles @spec.  On success *ret is a new table the caller
 * frees with rules_free().  -EINVAL (problems in @reterr), -ENOMEM.
 * @generation is stored in the table (rules_generation()).
 */
int rules_compile(const struct rules_spec *spec, uint64_t generation, struct rules **ret,
                  struct diag *reterr);
void rules_free(struct rules *rules);

/* The compiled blob: rules_blob() exposes it for writing to a file;
 * rules_from_blob() copies @len bytes and checks magic, version, sizes and
 * every offset; -EBADMSG on anything inconsistent, -ENOMEM. */
void rules_blob(const struct rules *rules, const void **ret_data, size_t *ret_len);
int rules_from_blob(const void *data, size_t len, struct rules **ret);

size_t rules_count(const struct rules *rules);
/* true when some rule's store is lease or strict (the daemon needs Redis). */
bool rules_uses_store(const struct rules *rules);
uint64_t rules_generation(const struct rules *rules);

/* A read-only view of compiled rule @idx; strings point into @rules. */
struct rules_rule {
    uint32_t index;
    uint64_t id;                /* stable counter identity (docs/rules.md) */
    const char *id_str;         /* label, or 16 hex digits of id */
    const char *label;          /* "" when none */
    const char *comment;        /* "" when none */
    const char *file;
    unsigned line;
    int64_t credit_limit;
    int64_t reset_seconds;
    int64_t refill_amount;
    int64_t refill_seconds;
    int64_t max_actors;
    int64_t max_debit;          /* as configured; -1: the credit_limit (rules_max_debit()) */
    int prefix4, prefix6;
    unsigned n_actor;
    bool strict, fast_path, is_default;
    bool resettable;            /* false: RESET does not touch its counters */
    enum rules_policy policy;
    enum rules_algo algo;
    enum rules_source source;
    enum rules_store store;     /* effective: the rule's own, else the config's store.mode */
    enum rules_full when_full;  /* RULES_FULL_TABLE: the daemon's table.when_full */
    unsigned calendar;          /* enum calendar_unit; 0: not a calendar window */
    uint32_t zone;              /* calendar: its zone in the blob's zone table; UINT32_MAX: UTC */
    const char *time_zone;      /* calendar: the zone's name ("UTC") */
    int64_t reset_ms;           /* the window in ms (reset_seconds: rounded up) */
    int64_t refill_ms;          /* the refill period in ms (refill_seconds: rounded up) */
    bool continuous;            /* token_bucket: refill = "continuous" */
    const struct rules_lock *lock;  /* in the blob: lockout's settings (else all 0) */
};
int rules_get(const struct rules *rules, uint32_t idx, struct rules_rule *ret);

/*
 * The calendar period (common/calendar.h) of calendar rule @idx that holds
 * Unix time @unix_ms, in the rule's zone: *ret_start_ms <= @unix_ms <
 * *ret_end_ms, Unix ms.  -ENOENT (no such rule), -EINVAL (not a calendar
 * rule), -ERANGE (@unix_ms outside the years 1900..9999).
 */
int rules_period(const struct rules *rules, uint32_t idx, int64_t unix_ms, int64_t *ret_start_ms,
                 int64_t *ret_end_ms);

/* The most one DEBIT from an unprivileged peer may charge rule @r
 * (docs/rules.md "DEBIT bounds"): its max_debit, else its credit_limit. */
static inline int64_t rules_max_debit(const struct rules_rule *r)
{
    return r->max_debit >= 0 ? r->max_debit : r->credit_limit;
}

/* A request as the matcher sees it: kv sorted by key, unique keys (as
 * proto_parse() leaves them). */
struct rules_req {
    const struct proto_kv *kv;
    unsigned n_kv;
    bool privileged;            /* peer is root / admin group on the Unix socket */
};

/*
 * Finds the rules that apply to @req, in config order: every matching
 * canary/continue rule up to and including the first matching stop rule
 * (the default rule always matches, so n >= 1).  Writes up to
 * RULES_MATCH_MAX indexes into @ret_idx and returns how many.
 */
size_t rules_match(const struct rules *rules, const struct rules_req *req,
                   uint32_t ret_idx[RULES_MATCH_MAX]);

/*
 * Writes the counter's actor string of rule @idx for @req into @buf
 * (NUL-terminated): "" without actor keys; the value itself for one key
 * (a missing key counts as ""); for several keys each value with '%' and
 * ',' percent-escaped, joined by ','.  On a rule with actor_prefix4 or
 * actor_prefix6, IP values are masked and written as "addr/len"; an IPv6
 * address carrying an IPv4 one (::ffff:a.b.c.d, 64:ff9b::a.b.c.d) as that
 * IPv4 address, and ::1 and the rest of ::/96 whole (docs/rules.md
 * "Actors").  Returns the length, or -ENOBUFS.
 */
int rules_actor(const struct rules *rules, uint32_t idx, const struct rules_req *req,
                char *buf, size_t size);

/* rules_actor() with the request's values already found: @vals[i] is the
 * pair of rule @idx's i-th actor key (rules_actor_key()), NULL when the
 * request lacks it. */
int rules_actor_from(const struct rules *rules, uint32_t idx, const struct proto_kv *const *vals,
                     char *buf, size_t size);

/* The actor string of @n_actor values (@vals[i] NULL: the key is missing,
 * counted as "") on a rule with @prefix4 and @prefix6 (-1: none): what
 * rules_actor_from() writes, for readers that have the values but not the
 * compiled rules (the decision log, server/dlog.h). */
int rules_actor_join(unsigned n_actor, const struct proto_kv *const *vals, int prefix4,
                     int prefix6, char *buf, size_t size);

/* rules_actor_from() without the copy where none is needed: when the actor
 * is one value taken as it is (one actor key, no IP prefix; or no actor),
 * *@ret_actor points at that value (or "") and @buf is not written; else
 * *@ret_actor is @buf, filled by rules_actor_from().  The same length or
 * error as rules_actor_from(). */
int rules_actor_ref(const struct rules *rules, uint32_t idx, const struct proto_kv *const *vals,
                    char *buf, size_t size, const char **ret_actor);

/* Rule @idx's @i-th actor key (not NUL-terminated: *@ret_len bytes); 0 or
 * -ENOENT. */
int rules_actor_key(const struct rules *rules, uint32_t idx, unsigned i, const char **ret_key,
                    size_t *ret_len);

/* Whether some rule matches key @key by its value (exact or glob), not
 * merely by its presence: then a request's value of @key can change which
 * rules match it.  A scan of every match entry: for caches, not per hit. */
bool rules_value_matters(const struct rules *rules, const char *key, size_t len);

/* Writes rule @idx's actor keys joined by ',' ("" without actor); returns the
 * length, -ENOBUFS or -ENOENT. */
int rules_actor_keys(const struct rules *rules, uint32_t idx, char *buf, size_t size);

/* Writes the match set of rule @idx as protocol text ("method=GET path=/x[star]",
 * or "default") into @buf; returns the length or -ENOBUFS. */
int rules_describe(const struct rules *rules, uint32_t idx, char *buf, size_t size);

/* Why rule @idx does not match @req ("missing key ip", "path=/a does not
 * match /pantry/[star]", "privileged only"), or "" when it matches.  Returns the
 * length or -ENOBUFS. */
int rules_why_not(const struct rules *rules, uint32_t idx, const struct rules_req *req,
                  char *buf, size_t size);

#endif
