/* SPDX-License-Identifier: MIT */
/*
 * divvyctl: what the tool's files share (tools/divvyctl.c: main, the command
 * table, options; divvyctl_conn.c: the daemon connection and error exit
 * codes; divvyctl_fmt.c: reply fields and output formats;
 * divvyctl_request.c: hit, take, peek, reset, explain; divvyctl_state.c:
 * status, stats, rules, reload; divvyctl_config.c: check and convert;
 * divvyctl_top.c and divvyctl_top_term.c: top; divvyctl_locked.c: locked).
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

enum ctl_opt { CTL_OPT_DONE = 0, CTL_OPT_OTHER, CTL_OPT_HELP, CTL_OPT_BAD };

/* Starts option parsing of a subcommand's argv (argv[0] is its name). */
void ctl_getopt_reset(void);
/* Handles @opt if it is a common option (or getopt's '?'/':'): CTL_OPT_DONE;
 * CTL_OPT_HELP after printing the command's help; CTL_OPT_BAD after a usage
 * message; CTL_OPT_OTHER when the command must handle it. */
enum ctl_opt ctl_common_opt(struct ctl *ctl, const struct ctl_cmd *cmd, int opt,
                            const char *arg, char *const *argv);

/* Parses a decimal in [@min, @max] into *@ret; -EINVAL otherwise. */
int ctl_parse_int(const char *text, long min, long max, long *ret);
/* Parses only the common options; for commands that have no others: the
 * index of the first operand, -1 after --help, -2 after a usage message. */
int ctl_simple_opts(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
/* Maps ctl_simple_opts()' negative results to exit codes. */
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
/* Sends @line; on an OK reply fills *ret_lines and *ret_n as divvy_command() and
 * returns 0.  An ERR reply or a failure is printed and turned into an exit
 * code (> 0); then nothing is returned. */
int ctl_command(struct ctl *ctl, const char *verb, const char *line, char ***ret_lines,
                size_t *ret_n);

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

/* ---- divvyctl_top.c ---------------------------------------------------- */

/* top and counters (top's one snapshot) share cmd_top(); it tells them apart by name. */
int cmd_top(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
int cmd_locked(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
extern const char ctl_help_top[];
extern const char ctl_help_counters[];
extern const char ctl_help_locked[];

#endif
