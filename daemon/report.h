/* SPDX-License-Identifier: MIT */
/*
 * report: divvyd's side of REPORT (docs/protocol.md "REPORT",
 * docs/dev/fast-report.md): a libdivvy client's report of a decision its
 * fast path took in its own process, turned into a decision-log record
 * stamped with the peer's SO_PEERCRED uid and pid.  A member of the fast
 * group can only add records under its own uid and pid, marked reported
 * (DLOG_F_REPORTED, protocol "fast"); it cannot alter or erase any other,
 * since only divvyd writes the log.  This module checks a report against
 * the rules in force; the verb itself (line_verb.c) checks the peer and
 * hands the record to the writer (dlog_report()).  Pure: no I/O, no state,
 * thread-safe.
 */
#ifndef DIVVY_REPORT_H
#define DIVVY_REPORT_H

#include <stdint.h>

#include "dlog.h"
#include "proto.h"
#include "rules.h"

#define REPORT_PAST_MS      60000   /* a report's time may be this far behind divvyd's clock */
#define REPORT_FUTURE_MS    1000    /* ... and this far ahead (a coarse clock, a tick apart) */

/*
 * Builds in *@ret the decision REPORT @req describes, from peer @uid/@pid,
 * against the rules in force @rules, divvyd's clocks reading @now_ms
 * (clock_now_ms()) and @unix_ms (wall clock ms).  0 on success (*@ret's
 * strings point into @req: valid as long as it is); otherwise nothing is
 * to be recorded:
 *   -EINVAL   @req is not a well-formed REPORT (req->err);
 *   -ERANGE   its time is outside [@now_ms - REPORT_PAST_MS,
 *             @now_ms + REPORT_FUTURE_MS];
 *   -ENOENT   the rule it names is not on the path @rules give its pairs
 *             (for @uid 0: as root's request), or a rule on that path is not
 *             one a fast-path client decides in-process (fast_path with a
 *             local or lease store, or divvy's zero semantics; never
 *             source = "privileged").
 */
int report_decision(const struct proto_req *req, const struct rules *rules, uint32_t uid,
                    uint32_t pid, uint64_t now_ms, uint64_t unix_ms,
                    struct dlog_decision *ret);

#endif
