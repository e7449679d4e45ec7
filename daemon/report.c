/* SPDX-License-Identifier: MIT */
/*
 * report: a REPORT line checked against the rules in force and turned into
 * a decision-log record (report.h, docs/dev/fast-report.md).  The checks
 * bound what a fast-group member can make the log say to what it could
 * have decided in its own process anyway: a recent time, a rule on its
 * request's path, every rule on that path one the fast path decides.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "eval.h"
#include "report.h"
#include "table.h"

/* Whether a fast-path client decides rule @r in its own process
 * (client_fast.c remap(): fast_path in a local or lease store, or a rule
 * that touches no counter; never a privileged-source rule). */
static bool report_fast_rule(const struct rules_rule *r)
{
    struct eval_outcome o = { 0 };

    if (r->source == RULES_SOURCE_PRIVILEGED)
        return false;
    if (r->fast_path && (r->store == RULES_STORE_LOCAL || r->store == RULES_STORE_LEASE))
        return true;
    return eval_zero(r, &o);
}

/* The rule of @req's path that the report names, in *@ret: 0, or -ENOENT. */
static int report_rule(const struct proto_req *req, const struct rules *rules, bool root,
                       struct rules_rule *ret)
{
    struct rules_req rq = { .kv = req->kv, .n_kv = req->n_kv, .privileged = root };
    uint32_t path[RULES_MATCH_MAX];
    struct rules_rule r;
    size_t n = rules_match(rules, &rq, path);
    bool found = false;

    for (size_t i = 0; i < n; i++) {
        if (rules_get(rules, path[i], &r) < 0 || !report_fast_rule(&r))
            return -ENOENT;
        if (r.id == req->report.rule_id && !found) {
            *ret = r;
            found = true;
        }
    }
    return found ? 0 : -ENOENT;
}

int report_decision(const struct proto_req *req, const struct rules *rules, uint32_t uid,
                    uint32_t pid, uint64_t now_ms, uint64_t unix_ms,
                    struct dlog_decision *ret)
{
    const struct proto_report *rp = &req->report;
    struct eval_outcome o = { 0 };
    struct rules_rule r;
    int e;

    if (req->verb != PROTO_REPORT || req->err != PROTO_E_NONE)
        return -EINVAL;
    if (rp->mono_ms > now_ms + REPORT_FUTURE_MS ||
        (now_ms > REPORT_PAST_MS && rp->mono_ms < now_ms - REPORT_PAST_MS))
        return -ERANGE;
    e = report_rule(req, rules, uid == 0, &r);
    if (e < 0)
        return e;
    memset(ret, 0, offsetof(struct dlog_decision, kv));
    /* Wall clock of the client's decision: divvyd's, less how long ago it was. */
    ret->mono_ms = rp->mono_ms;
    ret->unix_ms = rp->mono_ms <= now_ms ? unix_ms - (now_ms - rp->mono_ms)
                                         : unix_ms + (rp->mono_ms - now_ms);
    ret->generation = rules_generation(rules);
    ret->op = rp->op == PROTO_PEEK ? TABLE_PEEK : rp->op == PROTO_DEBIT ? TABLE_DEBIT
                                                                     : TABLE_TAKE;
    ret->protocol = DLOG_PROTO_FAST;
    ret->path = eval_zero(&r, &o) ? DLOG_PATH_NONE
                : r.store == RULES_STORE_LEASE ? DLOG_PATH_LEASE : DLOG_PATH_LOCAL;
    ret->flags = DLOG_F_REPORTED | (rp->allowed ? DLOG_F_ALLOWED : 0) |
                 (uid == 0 ? DLOG_F_PRIVILEGED : 0);
    ret->n = req->amount;
    ret->uid = uid;
    ret->pid = pid;
    ret->credit = rp->credit;
    ret->reset_s = rp->reset_s;
    ret->decider_id = r.id;
    ret->n_kv = req->n_kv;
    for (unsigned i = 0; i < req->n_kv; i++)
        ret->kv[i] = (struct dlog_kv){ .key = req->kv[i].key, .value = req->kv[i].value,
                                       .key_len = req->kv[i].key_len,
                                       .value_len = req->kv[i].value_len,
                                       .redact = DLOG_KEEP };
    /* The report carries the answer only, not each rule's outcome. */
    ret->n_out = 0;
    return 0;
}
