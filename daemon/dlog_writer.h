/* SPDX-License-Identifier: MIT */
/*
 * dlog_writer: divvyd's decision log (DESIGN §13, docs/operations.md
 * "Decision log", the format in docs/decision-log.md).  Off unless
 * decision_log.enabled.  Every worker (and every lane thread) copies each
 * decision it settles into its own ring (dlog_ring.h) and goes on: no
 * lock, no write, no allocation, no clock of its own.  One drain thread
 * wakes every flush_ms (sooner when a ring passes half full), turns the
 * raw records into blocks (server/dlog.h), applies decision_log.redact,
 * and appends the blocks with write(2) to the current file of the log
 * directory, rotating at file_size and keeping the newest `files` files.
 *
 * A ring that is full drops the decision and counts it (metrics, a GAP
 * item in the log where it happened); a disk that is full or failing costs
 * records, counted and logged (rate-limited), never a stalled worker.
 * The rules in force are described (DLOG_RULES items) at the start of
 * every file and at every reload, before any decision under them.
 *
 * Threads: dlog_decided() and dlog_report() on the worker that owns the
 * ring; dlog_writer_rules() from reload (any thread, serialised by it);
 * the rest from the main thread.
 */
#ifndef DIVVY_DLOG_WRITER_H
#define DIVVY_DLOG_WRITER_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "dlog.h"
#include "dlog_ring.h"
#include "eval.h"
#include "rules.h"

struct dlog_writer;
struct reload;
struct srv;
struct worker;

/* The writer's counters (metrics, docs/operations.md "Decision log"). */
struct dlog_writer_stats {
    uint64_t records;           /* decisions written to the log */
    uint64_t dropped;           /* decisions lost: a full ring, or a failed write */
    uint64_t reports_dropped;   /* ... of them, fast-path clients' reports (dlog_report()) */
    uint64_t bytes;             /* bytes written to log files */
    uint64_t write_errors;      /* failed writes, opens, rotations */
};

/*
 * A writer for @cfg's decision_log (enabled) with @n_rings rings (one per
 * worker and lane thread): creates the directory (0750) when missing and
 * refuses one that is not a directory, is a symlink, or that others than
 * divvyd's user and group could write; reads the hash key
 * (<directory>.key, made on first use; docs/operations.md), and opens the
 * first file.  Logs what went wrong.  *ret new on success; -errno.
 */
int dlog_writer_new(const struct config_dlog *cfg, unsigned n_rings, struct dlog_writer **ret);

/*
 * divvyd's start (main.c): nothing when @cfg's decision_log is off (*ret
 * NULL, 0); else a writer with @n_rings rings (the workers', then as many
 * lane threads', as srv.h orders them: the drain serves the lanes' first),
 * the rules in force of @rl
 * described, reload's hook set (reload_set_rules_hook()), the drain
 * started.  Inside no RCU section (it takes one).  -errno, logged.
 */
int dlog_writer_open(const struct config *cfg, struct reload *rl, unsigned n_rings,
                     struct dlog_writer **ret);

/* Unhooks @dw from @rl, drains, closes and frees it.  After the workers
 * stopped.  NULL-safe. */
void dlog_writer_close(struct dlog_writer *dw, struct reload *rl);

/* Ring @i (0 .. n_rings - 1), for struct worker. */
struct dlog_ring *dlog_writer_ring(struct dlog_writer *dw, unsigned i);

/*
 * Describes rules @rs of @generation, in force from @unix_ms on, for the
 * log (a DLOG_RULES item, or several for a long list).  reload.c calls it
 * before it publishes them, so the description is queued ahead of any
 * decision under them.  Copies what it needs; out of memory is logged.
 */
void dlog_writer_rules(void *dw, const struct rules *rs, uint64_t generation);

/* Starts the drain thread (after the first dlog_writer_rules()).  -errno. */
int dlog_writer_start(struct dlog_writer *dw);

/* Drains every ring to the log, closes the file and stops the drain
 * thread; call after the workers stopped.  NULL-safe. */
void dlog_writer_stop(struct dlog_writer *dw);

/* Frees (stopping first).  NULL-safe. */
void dlog_writer_free(struct dlog_writer *dw);

/* Its counters (any thread, relaxed). */
void dlog_writer_stats(const struct dlog_writer *dw, struct dlog_writer_stats *ret);

/*
 * The engine's hook (engine_settle()): copies decision @no (@res under
 * @rs) into worker @w's ring.  The caller checks w->dlog first.
 */
void dlog_decided(struct worker *w, const struct dlog_note *no, const struct rules *rs,
                  const struct eval_result *res);

/*
 * Records a fast-path client's report @d on worker @w (its front-end
 * stamped d->uid and d->pid from SO_PEERCRED; flags gets
 * DLOG_F_REPORTED and protocol DLOG_PROTO_FAST whatever the client said,
 * so a report never passes for divvyd's own decision).  d->mono_ms is
 * divvyd's clock when it arrived.  0; -ENODEV (the log is off); -ENOSPC
 * (the ring is over half full: reports never take the second half, kept
 * for divvyd's own decisions; dropped and counted); -EINVAL (a field out
 * of range).  On @w's thread only.
 */
int dlog_report(struct worker *w, const struct dlog_decision *d);

/* Whether divvyd records decisions (so it can tell fast-path clients to
 * report theirs). */
bool dlog_on(const struct srv *s);

#endif
