/* SPDX-License-Identifier: MIT */
/*
 * dlog_query: what a reader of decision logs (server/dlog.h) needs besides
 * the records: the times `divvyctl log` and `divvyctl replay` accept, the
 * rules the log describes (DLOG_RULES items) kept by id, and the filters of
 * `divvyctl log` (docs/decision-log.md "Reading it").  No I/O, no globals;
 * one object per reader, not shared between threads.
 */
#ifndef DIVVY_DLOG_QUERY_H
#define DIVVY_DLOG_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlog.h"

#define DLOG_QUERY_TIME_MAX  32         /* "2026-11-28T12:00:00.123Z" and its NUL */
#define DLOG_QUERY_RULES_MAX RULES_MAX  /* distinct rule ids kept; more: -E2BIG */
#define DLOG_QUERY_RULES_BYTES (64u << 20)  /* bytes of their strings kept; more: -E2BIG */
#define DLOG_QUERY_ID_LEN    16         /* a rule id as hex digits */

/*
 * Parses a time as `divvyctl log --since` takes it into Unix ms: RFC 3339
 * ("2026-11-28T12:00:00Z", fractions of a second and a +HH:MM/-HH:MM
 * offset allowed), "YYYY-MM-DD[ HH:MM[:SS]]" or "YYYY-MM-DDTHH:MM[:SS]" in
 * UTC, "@SECONDS" since the epoch, or a time before @now_ms: "-30s",
 * "-15m", "-2h", "-7d".  0, or -EINVAL (not one of these, a field out of
 * range, a year before 1970 or after 9999, a relative time before 1970).
 */
int dlog_query_time(const char *text, uint64_t now_ms, uint64_t *ret_ms);

/* @ms as RFC 3339 UTC with milliseconds, "2026-11-28T12:00:00.123Z", into
 * @buf (DLOG_QUERY_TIME_MAX bytes). */
void dlog_query_fmt_time(uint64_t ms, char *buf);

/* The rules a log describes, by id: the latest description of each wins
 * (an id names the same counter across reloads, DESIGN §2). */
struct dlog_query_rules;

/* NULL: no memory. */
struct dlog_query_rules *dlog_query_rules_new(void);
void dlog_query_rules_free(struct dlog_query_rules *m);

/* Keeps copies of @r's rules: 0, -ENOMEM, or -E2BIG past
 * DLOG_QUERY_RULES_MAX distinct ids or DLOG_QUERY_RULES_BYTES of their
 * strings (those rules are not kept; the others are). */
int dlog_query_rules_add(struct dlog_query_rules *m, const struct dlog_rules *r);

/* The rule with id @id, or NULL (valid until the next add). */
const struct dlog_rule *dlog_query_rule(const struct dlog_query_rules *m, uint64_t id);

/* How a decision names rule @id: its id_str when the log described it,
 * else its 16 hex digits; "" for 0 (no rule).  Into @buf (at least
 * DLOG_QUERY_ID_LEN + 1 bytes); returns @buf or the kept id_str. */
const char *dlog_query_rule_name(const struct dlog_query_rules *m, uint64_t id, char *buf,
                                 size_t size);

enum dlog_query_verdict {
    DLOG_QUERY_ANY = 0,
    DLOG_QUERY_ALLOWED,         /* allowed, not an error */
    DLOG_QUERY_DENIED,          /* refused, not an error */
    DLOG_QUERY_ERROR,           /* DLOG_F_ERROR: no decision */
};

/* `divvyctl log`'s filters; zeroed: everything passes. */
struct dlog_query_filter {
    uint64_t since_ms;          /* unix_ms >= since_ms */
    uint64_t until_ms;          /* unix_ms < until_ms; 0: no bound */
    const char *rule;           /* NULL, or an id_str or 16 hex digits */
    const char *actor;          /* NULL, or an actor string */
    enum dlog_query_verdict verdict;
};

/* "allowed", "denied", "error" into *ret: 0 or -EINVAL. */
int dlog_query_verdict_parse(const char *text, enum dlog_query_verdict *ret);

/* @r is the rule --rule names (its id_str, or its id as 16 hex digits, any
 * case). */
bool dlog_query_rule_is(const struct dlog_rule *r, uint64_t id, const char *name);

/*
 * Whether decision @d passes @f.  --rule passes a decision the rule decided
 * or that was on its path (an outcome of it: a continue or canary rule
 * charged on the way); --actor compares @f->actor with the actor that
 * rule (with --rule) or else the deciding rule counts @d under
 * (dlog_actor()); a rule the log never described has no actor and fails
 * --actor.
 */
bool dlog_query_match(const struct dlog_query_filter *f, const struct dlog_query_rules *m,
                      const struct dlog_decision *d);

#endif
