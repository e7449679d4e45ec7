/* SPDX-License-Identifier: MIT */
/*
 * client_fast: libdivvy's shared-memory fast path (client_fast.c, DESIGN
 * section 5, docs/dev/shm.md): maps the table divvyd hands over
 * (client_handoff), loads the rules file of the current generation and
 * decides a request in-process along its rule path.  Sends REFILL hints
 * over the handle's connection (client_conn) and, while the decision log is
 * on, reports its decisions (client_report).  Used by client_memo and the
 * API layer (libclient's layers: divvy -> memo -> fast -> report -> handoff
 * -> conn -> wire -> err); it knows neither.
 */
#ifndef DIVVY_CLIENT_FAST_H
#define DIVVY_CLIENT_FAST_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client_handoff.h"
#include "client_report.h"
#include "rules.h"
#include "table.h"

#define CLIENT_STALE_MS         3000            /* heartbeat older than this: daemon gone */
#define CLIENT_REATTACH_MS      1000            /* ask divvyd for the memfds at most this often */
#define CLIENT_REMAP_RETRY_MS   100             /* back-off after a rules file failed to load */
#define CLIENT_HOT_ACTOR_MAX    32              /* actors a client_rule remembers prepared */
#define CLIENT_HINT_SLOTS       64              /* REFILL hints remembered per handle */
#define CLIENT_HINT_MS          10              /* one REFILL per counter per this long */
#define CLIENT_REMAP_TRIES      4               /* ENOENT: the generation moved on meanwhile */
#define CLIENT_RULES_FILE_MAX   (256u << 20)    /* refuse larger rules.<generation> files */

/* One compiled rule as the fast path needs it, filled at each remap. */
struct client_rule {
    struct rules_rule rr;       /* rules_get(), kept so a hit need not decode it */
    struct table_limits lim;    /* eval_limits() of rr */
    const char *id_str;         /* label or hex id, points into the rules */
    char id[DIVVY_RULE_MAX];    /* id_str as a reply names it, NUL-padded: copied whole */
    bool eligible;              /* fast_path, or zero semantics: decidable in-process */
    bool lease;                 /* a lease rule spent in-process (lim.lease set): TAKE only,
                                 * and only before any other counter on the path */
    /* The last counter this handle hit for the rule, prepared for the
     * mapped fast table (table_key_prepare()): a hot key skips SipHash. */
    bool hot_valid;
    uint8_t hot_len;
    char hot_actor[CLIENT_HOT_ACTOR_MAX];
    struct table_kw hot_kw;
    /* TAKEs decided here for this rule, per outcome, not yet added to the
     * table's per-rule counts (table_add_fast_rule()); dirty: listed in
     * client_fast.dirty. */
    bool dirty;
    uint64_t fast_n[TABLE_FAST_N];
};

/* A handle's fast path.  Set up by its owner (zeroed, then conn, err,
 * auto_attach and privileged); client_fast_close() releases it. */
struct client_fast {
    struct client_conn *conn;   /* the handle's connection: FAST's address, REFILL hints */
    struct client_err *err;     /* where failures are described (borrowed) */
    bool auto_attach;           /* DIVVY_AUTO: map the table later if divvyd was not there */
    bool privileged;            /* euid 0 on a Unix socket address, sampled at open */
    char dir[PATH_MAX];         /* the state directory (divvyd's FAST answer); "" unknown */
    struct table *table;        /* the mapped table memfd with its control page, or NULL */
    struct rules *rules;        /* rules of generation gen, or NULL */
    struct client_rule *rule;   /* per compiled rule, rules_count() entries */
    size_t n_rules;             /* rules_count(rules): 0 when none are loaded */
    uint64_t gen;               /* generation of @rules (0: none loaded) */
    uint64_t max_gen;           /* the largest generation ever loaded: a smaller one is
                                 * "no rules" (generations only grow, docs/dev/shm.md) */
    uint64_t loads;             /* rules loaded so far: a new number for each remap, even
                                 * when a restarted daemon reuses a generation number */
    uint64_t attach_at_ms;      /* earliest next table_attach() attempt */
    uint64_t remap_at_ms;       /* earliest next rules load after a failure */
    uint64_t remap_failed_gen;  /* the generation that failed to load */
    uint64_t unflushed_hits;    /* decided here, not yet added to the table's fast_hits */
    uint32_t *dirty;            /* indexes of the rules with unflushed fast_n, n_dirty of
                                 * them; rules_count() entries */
    size_t n_dirty;
    /* REFILL hints sent lately: a hash of (rule, actor) and until when no
     * other is sent for it (client_fast.c). */
    uint64_t hint_key[CLIENT_HINT_SLOTS];
    uint64_t hint_until[CLIENT_HINT_SLOTS];
    /* The control page's decision_log word (table_decision_log_word()):
     * nonzero, each decision taken here is reported to divvyd. */
    const uint64_t *report_on;
    struct client_report report;        /* REPORT lines not sent yet */
};

/* Asks divvyd for the fast path's memfds (FAST), maps them and loads the
 * current rules file.  -EOPNOTSUPP (tcp:), -EACCES (not in the fast group),
 * -ENOENT, -EBADMSG, ... (the fast path stays off; AUTO retries later). */
int client_fast_open(struct client_fast *f);
void client_fast_close(struct client_fast *f);

/*
 * Decides @req in-process when the fast path may: returns 1 with @res filled
 * (fast_path = 1) and the request's rule path (rules_match()'s indexes) in
 * @ret_path[0..*@ret_n_path) (RULES_MATCH_MAX entries), or 0 when the
 * request must go to the socket, with a static reason in *@ret_why (f->err
 * may say more).  No system call and no allocation unless the rules
 * generation changed or the table must be re-attached.
 */
int client_fast_decide(struct client_fast *f, const struct client_req *req, enum table_op op,
                       uint64_t amount, struct divvy_result *res, uint32_t *ret_path,
                       size_t *ret_n_path, const char **ret_why);

/*
 * Whether every rule of @path (rules_match()'s indexes) can be decided
 * in-process for @op: each is eligible, and a lease rule is met only by a
 * TAKE and before any rule that touches a counter (a lease may send the hit
 * to divvyd, which must not find a counter already charged here).
 */
bool client_fast_path_ok(const struct client_fast *f, const uint32_t *path, size_t n_path,
                         enum table_op op);

/*
 * Whether the fast path can decide now with rules of generation f->gen
 * (mapping the table or loading new rules first if needed): 1 yes, 0 no
 * (*@ret_why says why).  @now: clock_coarse_ms().
 */
int client_fast_ready(struct client_fast *f, uint64_t now, const char **ret_why);

/*
 * Decides along @path (rules_match()'s indexes, every one eligible) and
 * fills @res: 1 decided, 0 not (*@ret_why).  Each rule's actor comes from
 * @rq (the sorted request) when it is not NULL, else from @actor_kv: for the
 * path's i-th rule, @actor_kv[i * RULES_ACTOR_KEYS_MAX + j] is the pair of
 * its j-th actor key, NULL when absent.  @pairs[0..@n_pairs) are the
 * request's pairs as a REPORT names them (docs/client.md "Reported
 * decisions"), when the decision log is on.  A DEBIT above a rule's max_debit
 * is not decided here (eval_debit_check()): divvyd refuses it, or, for an
 * admin peer, charges it.
 */
int client_fast_run(struct client_fast *f, const uint32_t *path, size_t n_path,
                    const struct rules_req *rq, const struct proto_kv *const *actor_kv,
                    const struct proto_kv *pairs, size_t n_pairs, enum table_op op,
                    uint64_t amount, uint64_t now, struct divvy_result *res,
                    const char **ret_why);

/* Sends the reports of decisions taken here when the oldest is
 * CLIENT_REPORT_AGE_MS old (client_report_tick()): for the handle's calls
 * that the fast path did not decide. */
void client_fast_report_tick(struct client_fast *f);

/* Starts loading the fast-table slots of the counters on @path (actors as
 * for client_fast_run() without @rq), preparing each rule's hot key on the
 * way, and returns without waiting: a batch calls it a few requests ahead
 * so that their cache and TLB misses overlap.  Decides and changes nothing
 * that a hit would not; a no-op without a mapped table. */
void client_fast_prefetch(struct client_fast *f, const uint32_t *path, size_t n_path,
                          const struct proto_kv *const *actor_kv);

#endif
