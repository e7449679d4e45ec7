/* SPDX-License-Identifier: MIT */
/*
 * divvyctl: what the tool's files share (tools/divvyctl.c: main, the command
 * table, options; divvyctl_conn.c: the daemon connection and error exit
 * codes; divvyctl_fmt.c: reply fields and output formats;
 * divvyctl_request.c: hit, take, peek, reset, explain; divvyctl_state.c:
 * status, stats, rules, reload; divvyctl_config.c: check and convert;
 * divvyctl_replay.c: replay (its engine server/replay.c);
 * divvyctl_top.c and divvyctl_top_term.c: top; divvyctl_locked.c: locked;
 * divvyctl_log.c and divvyctl_log_fmt.c: log).
 * The daemon is reached through libdivvy's public API only (divvy.h);
 * common/ is used for check/convert.  Exit codes are part of the interface
 * (docs/divvyctl.md).
 */
#ifndef DIVVY_DIVVYCTL_H
#define DIVVY_DIVVYCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <getopt.h>

#include <jansson.h>

#include "divvy.h"

/* Exit codes: stable, documented in `divvyctl --help` and docs/divvyctl.md. */
#define CTL_EXIT_OK          0  /* success; the request is allowed */
#define CTL_EXIT_NO          1  /* denied; check found problems; reload rejected */
#define CTL_EXIT_USAGE       2  /* bad command line, or a request the daemon calls malformed */
#define CTL_EXIT_UNAVAILABLE 3  /* divvyd unreachable, timed out, busy, or went away */
#define CTL_EXIT_PERMISSION  4  /* not allowed: admin verb as a non-admin, socket permissions */
#define CTL_EXIT_FAILURE     5  /* anything else: cannot read/write a file, internal error */

#define CTL_TIMEOUT_DEFAULT  5000
#define CTL_FIELDS_MAX       32     /* name=value fields of one reply line */
#define CTL_LINE_MAX         4096   /* a request line, as the protocol limits it */

/* Global options and the lazily opened connection. */
struct ctl {
    char address[512];          /* as given, or $DIVVY_ADDRESS, or the default */
    int timeout_ms;
    bool json;
    struct divvy *h;
};

/* One "name=value ..." reply line split into fields; strings point into @buf. */
struct ctl_fields {
    char buf[16384];
    size_t n;
    const char *name[CTL_FIELDS_MAX];
    const char *value[CTL_FIELDS_MAX];
};

struct ctl_cmd;

/* ---- divvyctl.c -------------------------------------------------------- */

/* The options every subcommand takes; append to a command's own. */
#define CTL_SHORTOPTS "s:t:jh"
#define CTL_LONGOPTS                                            \
    { "socket", required_argument, NULL, 's' },                 \
    { "timeout", required_argument, NULL, 't' },                \
    { "json", no_argument, NULL, 'j' },                         \
    { "help", no_argument, NULL, 'h' }

/* What ctl_getopt() returns besides an option character (the last two also
 * ctl_simple_opts()). */
enum { CTL_GETOPT_END = 0, CTL_GETOPT_HELP = -1, CTL_GETOPT_BAD = -2 };

/* Starts option parsing of a subcommand's argv (argv[0] is its name). */
void ctl_getopt_reset(void);
/* The next option of the command's own (getopt_long() over @shortopts and
 * @longopts, which include CTL_SHORTOPTS and CTL_LONGOPTS): its character,
 * its value in optarg.  The common options are handled on the way.
 * CTL_GETOPT_END at the first operand (optind); CTL_GETOPT_HELP after
 * printing the command's help (the main help when @cmd is NULL);
 * CTL_GETOPT_BAD after a usage message (an unknown option, a missing value). */
int ctl_getopt(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv,
               const char *shortopts, const struct option *longopts);

/* Parses a decimal in [@min, @max] into *@ret; -EINVAL otherwise. */
int ctl_parse_int(const char *text, long min, long max, long *ret);
/* Parses only the common options; for commands that have no others: the
 * index of the first operand, CTL_GETOPT_HELP after --help, CTL_GETOPT_BAD
 * after a usage message. */
int ctl_simple_opts(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
/* ctl_simple_opts() for a command that takes no operands: true when it goes
 * on; false when it is done (--help, a usage message), *ret_exit its exit code. */
bool ctl_bare_opts(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv,
                   int *ret_exit);
/* Maps ctl_getopt()'s and ctl_simple_opts()' negative results to exit codes. */
int ctl_opts_exit(int r);

/* Prints "divvyctl: <msg>" to stderr; returns @code. */
int ctl_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "divvyctl CMD: <msg>" and a pointer to --help; returns CTL_EXIT_USAGE. */
int ctl_usage(const struct ctl_cmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* ctl_usage() when @json is set for a command that has no JSON output. */
int ctl_no_json(const struct ctl *ctl, const struct ctl_cmd *cmd);

/* ---- divvyctl_conn.c --------------------------------------------------- */

/* Opens (once) the handle on ctl->address; on failure prints why and returns
 * an exit code > 0. */
int ctl_connect(struct ctl *ctl);
/* libdivvy's message when it has one (it names the call and the cause),
 * else strerror(). */
const char *ctl_why(const struct ctl *ctl, int r);
/* Splits "ERR code "reason"" into its parts (both NUL-terminated, cut to size). */
void ctl_parse_err(const char *line, char *code, size_t code_size, char *reason,
                   size_t reason_size);
/* Turns an ERR reply to @verb into an exit code, printing why. */
int ctl_err_reply(const struct ctl *ctl, const char *verb, const char *line);
/* Maps libdivvy error @r of @verb to an exit code and prints why. */
int ctl_client_error(struct ctl *ctl, const char *verb, int r);
/* Sends @line (connecting first): 0 with any reply, ERR too, in *ret_lines and
 * *ret_n as divvy_command(); a failure is printed and turned into an exit code
 * (> 0), and nothing is returned. */
int ctl_send(struct ctl *ctl, const char *verb, const char *line, char ***ret_lines,
             size_t *ret_n);
/* Sends @line; on an OK reply fills *ret_lines and *ret_n as divvy_command() and
 * returns 0.  An ERR reply or a failure is printed and turned into an exit
 * code (> 0); then nothing is returned. */
int ctl_command(struct ctl *ctl, const char *verb, const char *line, char ***ret_lines,
                size_t *ret_n);

/* A listing's reply and what printing it needs. */
struct ctl_list {
    char **lines;               /* the reply, "OK ..." first (divvy_command()) */
    size_t n;
    struct ctl_fields *f;       /* one parse buffer, reused line by line */
    json_t *arr;                /* with --json: an array for the rows, else NULL */
};
/* ctl_command() of a listing: on success fills *ret (free with
 * ctl_list_free()) and returns 0; else an exit code (> 0) after printing why,
 * and *ret holds nothing to free. */
int ctl_list_fetch(struct ctl *ctl, const char *verb, const char *line, struct ctl_list *ret);
/* Frees what ctl_list_fetch() filled in (and a NULL arr it handed on). */
void ctl_list_free(struct ctl_list *l);

/* ---- divvyctl_fmt.c ---------------------------------------------------- */

/* Whitespace between reply fields (not '\n': lines are split already). */
bool ctl_is_space(char c);
/* Splits a reply line of name=value pairs (docs/protocol.md grammar).
 * -EPROTO when it is not one, -E2BIG past CTL_FIELDS_MAX. */
int ctl_fields_parse(const char *line, struct ctl_fields *ret);
/* Value of @name, or NULL. */
const char *ctl_field(const struct ctl_fields *f, const char *name);
/* Value of @name as an unsigned integer; -ENOENT, -EPROTO. */
int ctl_field_u64(const struct ctl_fields *f, const char *name, uint64_t *ret);

/* Prints @doc (steals the reference) to stdout as one JSON document;
 * CTL_EXIT_OK or CTL_EXIT_FAILURE. */
int ctl_json_print(json_t *doc);
/* Human time: "59s", "14m 31s", "2h 05m", "3d 04h". */
void ctl_fmt_duration(uint64_t seconds, char *buf, size_t size);
/* A JSON value for a reply field: integers as numbers, true/false as
 * booleans, everything else as a string (a new reference). */
json_t *ctl_json_value(const char *v);

/* A subcommand: @argv[0] is its name; returns an exit code. */
struct ctl_cmd {
    const char *name;
    int (*run)(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
    const char *summary;
    const char *help;
};

/* ---- divvyctl_request.c ------------------------------------------------ */

/* hit, take, debit, peek and reset share cmd_hit(); it tells them apart by name. */
int cmd_hit(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
/* Appends " key=value" to @line (@pos its length), quoted as the protocol asks:
 * -EINVAL (a '"' or newline), -EMSGSIZE. */
int ctl_append_pair(char *line, size_t size, size_t *pos, const char *key, const char *value);
/* "@verb k=v..." of @kv into @line; a usage error (exit code) when it cannot be. */
int ctl_request_line(const struct ctl_cmd *cmd, const char *verb, const struct divvy_kv *kv,
                     size_t n_kv, char *line, size_t size);
int cmd_explain(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
extern const char ctl_help_hit[];
extern const char ctl_help_take[];
extern const char ctl_help_debit[];
extern const char ctl_help_peek[];
extern const char ctl_help_reset[];
extern const char ctl_help_explain[];

/* ---- divvyctl_state.c -------------------------------------------------- */

int cmd_status(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
int cmd_stats(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
int cmd_rules(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
/* divvyctl_rules.c: reload, and rules add|remove|list (the rules service). */
int cmd_reload(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
int cmd_rules_edit(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
/* Whether `rules` was given add, remove or list (its first operand). */
bool ctl_rules_edit_wanted(int argc, char **argv);
extern const char ctl_help_rules_edit[];
extern const char ctl_help_status[];
extern const char ctl_help_stats[];
extern const char ctl_help_rules[];
extern const char ctl_help_reload[];

/* ---- divvyctl_config.c ------------------------------------------------- */

int cmd_check(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
int cmd_convert(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
extern const char ctl_help_check[];
extern const char ctl_help_convert[];

/* ---- divvyctl_replay.c ------------------------------------------------- */

/* replay: a candidate config on decision logs (server/replay.h). */
int cmd_replay(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
extern const char ctl_help_replay[];

/* ---- divvyctl_unlock.c ------------------------------------------------- */

int cmd_unlock(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
extern const char ctl_help_unlock[];
/* How many counters on @kv's path RESET would forget (EXPLAIN: matching
 * rules with a counter, resettable) into *ret_n; 0, or an exit code. */
int ctl_reset_clearable(struct ctl *ctl, const struct ctl_cmd *cmd, const struct divvy_kv *kv,
                        size_t n_kv, size_t *ret_n);

/* ---- divvyctl_top.c ---------------------------------------------------- */

/* top and counters (top's one snapshot) share cmd_top(); it tells them apart by name. */
int cmd_top(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
int cmd_locked(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
extern const char ctl_help_top[];
extern const char ctl_help_counters[];
extern const char ctl_help_locked[];

/* ---- divvyctl_log.c ---------------------------------------------------- */

/* log: reads decision logs (docs/decision-log.md); no daemon. */
int cmd_log(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
extern const char ctl_help_log[];

#endif
