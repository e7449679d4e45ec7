/* SPDX-License-Identifier: MIT */
/*
 * divvyctl: the admin tool of divvy (DESIGN §8, docs/divvyctl.md).  This file
 * holds main(), the command table, the global help, the options every
 * subcommand shares and the messages that turn into the stable exit codes.
 * The subcommands live by concern: status, stats, rules and reload in
 * divvyctl_state.c; hit, take, peek, reset and explain in
 * divvyctl_request.c; check and convert in divvyctl_config.c; top and
 * counters in divvyctl_top.c (its terminal in divvyctl_top_term.c), locked in
 * divvyctl_locked.c, log in divvyctl_log.c (its output in divvyctl_log_fmt.c),
 * replay in divvyctl_replay.c.  The connection to divvyd is divvyctl_conn.c, reply
 * fields and output formats divvyctl_fmt.c.  Owns one handle per run;
 * prints results on stdout (or one JSON document with --json) and one line
 * per error on stderr.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "divvyctl.h"

#ifndef DIVVY_VERSION
#define DIVVY_VERSION "0"
#endif

static const char ctl_help_main[] =
    "Usage: divvyctl [OPTIONS] COMMAND [ARGS...]\n"
    "\n"
    "Talks to divvyd, the divvy quota and rate-limit daemon, and checks or converts\n"
    "its configuration.  `divvyctl COMMAND --help` describes each command.\n"
    "\n"
    "Commands:\n"
    "%s"
    "\n"
    "Options (before or after COMMAND):\n"
    "  -s, --socket ADDR   divvyd's address: unix:PATH, or any PATH with a '/' in it\n"
    "                      (/run/x.sock, build/run/divvy.sock, ./x.sock),\n"
    "                      tcp:HOST:PORT, tcp:[V6]:PORT; default $DIVVY_ADDRESS, else\n"
    "                      " DIVVY_DEFAULT_ADDRESS "\n"
    "  -t, --timeout MS    connect timeout and reply timeout in milliseconds\n"
    "                      (default 5000)\n"
    "  -j, --json          print one JSON document instead of text (read commands)\n"
    "  -h, --help          print help and exit\n"
    "  -V, --version       print the version and exit\n"
    "\n"
    "Exit status (stable; scripts may rely on it):\n"
    "  0  success; the request is allowed\n"
    "  1  the answer is no: the request is denied (hit, take, peek), a config has\n"
    "     problems (check, convert), the daemon rejected a new config (reload),\n"
    "     nothing to reset or unlock (reset, unlock), part of a decision log was\n"
    "     skipped (log)\n"
    "  2  usage error, or a request divvyd rejected as malformed\n"
    "  3  divvyd is unreachable, did not answer in time, is busy, or went away\n"
    "  4  permission denied: an admin command (reset, unlock, reload, top,\n"
    "     counters, locked) from a user who is neither root nor in divvy-admin, any admin\n"
    "     command over TCP, or no access to the socket (group divvy)\n"
    "  5  any other failure: a file that cannot be read or written, an internal\n"
    "     error, a daemon that does not know the command\n"
    "\n"
    "Admin commands need root or membership in divvyd's admin group\n"
    "(server.admin_group, default divvy-admin) and the Unix socket; divvyd logs\n"
    "each one with the caller's uid.  Other commands need access to the socket\n"
    "(root or group divvy with the default socket_mode 0660).\n"
    "\n"
    "Examples:\n"
    "  divvyctl status\n"
    "  divvyctl peek service=sshd user=alice rhost=203.0.113.9 event=authfail\n"
    "  divvyctl explain method=GET path=/pantry/cookies/oatmeal ip=10.0.0.1\n"
    "  divvyctl check /etc/divvy/divvy.conf && divvyctl reload\n"
    "  divvyctl locked --rule login-user-source --json\n"
    "  divvyctl log --locks --since -7d\n"
    "\n"
    "The full reference is divvyctl(8) (`man divvyctl`).\n";

/* hit, take, debit, peek and reset share cmd_hit(); it tells them apart by name. */
static const struct ctl_cmd ctl_cmds[] = {
    { "status", cmd_status, "is divvyd up? uptime, rules, hits, table use", ctl_help_status },
    { "hit", cmd_hit, "take one credit, as an application would", ctl_help_hit },
    { "take", cmd_hit, "take N credits, all or nothing", ctl_help_take },
    { "debit", cmd_hit, "charge N credits already spent, into debt if need be",
      ctl_help_debit },
    { "peek", cmd_hit, "show what a request would see, taking nothing", ctl_help_peek },
    { "reset", cmd_hit, "forget the counters a request touches (admin)", ctl_help_reset },
    { "unlock", cmd_unlock, "clear every login counter of a user (admin)", ctl_help_unlock },
    { "rules", cmd_rules, "list the loaded rules", ctl_help_rules },
    { "explain", cmd_explain, "which rule decides a request, and why not the others",
      ctl_help_explain },
    { "stats", cmd_stats, "the daemon's own statistics (STATS)", ctl_help_stats },
    { "top", cmd_top, "live counters, least credit first, refreshing (admin)", ctl_help_top },
    { "counters", cmd_top, "the live counters, once: top --once (admin)", ctl_help_counters },
    { "locked", cmd_locked, "counters with no credit left: who is locked out (admin)",
      ctl_help_locked },
    { "log", cmd_log, "read the decision log: decisions, lock periods", ctl_help_log },
    { "reload", cmd_reload, "re-read the config; says why when rejected (admin)",
      ctl_help_reload },
    { "check", cmd_check, "validate config files, without a daemon", ctl_help_check },
    { "convert", cmd_convert, "rewrite a divvy .ini/.json config as divvy.conf",
      ctl_help_convert },
    { "replay", cmd_replay, "what a candidate config would have done to logged traffic",
      ctl_help_replay },
};

#define CTL_N_CMDS (sizeof(ctl_cmds) / sizeof(ctl_cmds[0]))

/* ---- messages ------------------------------------------------------------ */

int ctl_fail(int code, const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    fputs("divvyctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

int ctl_usage(const struct ctl_cmd *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "divvyctl%s%s: ", cmd ? " " : "", cmd ? cmd->name : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'divvyctl %s%s--help'.\n", cmd ? cmd->name : "", cmd ? " " : "");
    return CTL_EXIT_USAGE;
}

int ctl_no_json(const struct ctl *ctl, const struct ctl_cmd *cmd)
{
    if (!ctl->json)
        return 0;
    return ctl_usage(cmd, "--json is for read commands; %s has no JSON output", cmd->name);
}

static void ctl_print_main_help(FILE *f)
{
    char list[2048];
    size_t pos = 0;

    for (size_t i = 0; i < CTL_N_CMDS && pos < sizeof(list); i++)
        pos += (size_t)snprintf(list + pos, sizeof(list) - pos, "  %-9s %s\n", ctl_cmds[i].name,
                                ctl_cmds[i].summary);
    fprintf(f, ctl_help_main, list);
}

/* ---- options --------------------------------------------------------------- */

/* An address that names no scheme of ours (unix:, tcp:) but holds a '/' is
 * a Unix socket path: "/run/divvy/divvy.sock", "build/run/divvy.sock",
 * "./x.sock".  A name with no '/' stays an error (it could be a typo'd
 * scheme); "./NAME" says a socket in the current directory. */
static int ctl_set_address(struct ctl *ctl, const char *addr)
{
    int n;

    if (strncmp(addr, "unix:", 5) != 0 && strncmp(addr, "tcp:", 4) != 0 && strchr(addr, '/'))
        n = snprintf(ctl->address, sizeof(ctl->address), "unix:%s", addr);
    else
        n = snprintf(ctl->address, sizeof(ctl->address), "%s", addr);
    return n < 0 || (size_t)n >= sizeof(ctl->address) ? -ENAMETOOLONG : 0;
}

int ctl_parse_int(const char *text, long min, long max, long *ret)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max)
        return -EINVAL;
    *ret = v;
    return 0;
}

void ctl_getopt_reset(void)
{
    /* glibc: optind 0 re-initialises the scanner (argv is a new vector). */
    optind = 0;
    opterr = 0;
}

enum ctl_opt { CTL_OPT_DONE = 0, CTL_OPT_OTHER, CTL_OPT_HELP, CTL_OPT_BAD };

/* Handles @opt if it is a common option (or getopt's '?'/':'): CTL_OPT_DONE;
 * CTL_OPT_HELP after printing the command's help; CTL_OPT_BAD after a usage
 * message; CTL_OPT_OTHER when the command must handle it. */
static enum ctl_opt ctl_common_opt(struct ctl *ctl, const struct ctl_cmd *cmd, int opt,
                                   const char *arg, char *const *argv)
{
    long v;

    switch (opt) {
    case 's':
        if (ctl_set_address(ctl, arg) < 0) {
            ctl_usage(cmd, "--socket: address too long");
            return CTL_OPT_BAD;
        }
        return CTL_OPT_DONE;
    case 't':
        if (ctl_parse_int(arg, 1, 3600000, &v) < 0) {
            ctl_usage(cmd, "--timeout: '%s' is not a number of milliseconds (1..3600000)", arg);
            return CTL_OPT_BAD;
        }
        ctl->timeout_ms = (int)v;
        return CTL_OPT_DONE;
    case 'j':
        ctl->json = true;
        return CTL_OPT_DONE;
    case 'h':
        if (cmd)
            fputs(cmd->help, stdout);
        else
            ctl_print_main_help(stdout);
        return CTL_OPT_HELP;
    case ':':
        ctl_usage(cmd, "option '%s' needs a value", argv[optind - 1]);
        return CTL_OPT_BAD;
    case '?':
        if (optopt)
            ctl_usage(cmd, "unknown option '-%c'", optopt);
        else
            ctl_usage(cmd, "unknown option '%s'", argv[optind - 1]);
        return CTL_OPT_BAD;
    default:
        return CTL_OPT_OTHER;
    }
}

int ctl_getopt(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv,
               const char *shortopts, const struct option *longopts)
{
    int opt;

    while ((opt = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        switch (ctl_common_opt(ctl, cmd, opt, optarg, argv)) {
        case CTL_OPT_DONE:
            break;
        case CTL_OPT_HELP:
            return CTL_GETOPT_HELP;
        case CTL_OPT_BAD:
            return CTL_GETOPT_BAD;
        case CTL_OPT_OTHER:
            return opt;
        }
    }
    return CTL_GETOPT_END;
}

/* Parses only the common options; for commands that have no others. */
int ctl_simple_opts(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = { CTL_LONGOPTS, { NULL, 0, NULL, 0 } };
    int opt;

    ctl_getopt_reset();
    /* Every option is common: ctl_getopt() returns none of them. */
    opt = ctl_getopt(ctl, cmd, argc, argv, ":" CTL_SHORTOPTS, longopts);
    return opt < 0 ? opt : optind;
}

bool ctl_bare_opts(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv,
                   int *ret_exit)
{
    int r = ctl_simple_opts(ctl, cmd, argc, argv);

    if (r < 0)
        *ret_exit = ctl_opts_exit(r);
    else if (r != argc)
        *ret_exit = ctl_usage(cmd, "takes no arguments");
    else
        return true;
    return false;
}

/* Maps ctl_getopt()'s and ctl_simple_opts()' negative results to exit codes. */
int ctl_opts_exit(int r)
{
    return r == CTL_GETOPT_HELP ? CTL_EXIT_OK : CTL_EXIT_USAGE;
}

/* ---- main -------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        CTL_LONGOPTS,
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    struct ctl ctl = { .timeout_ms = CTL_TIMEOUT_DEFAULT };
    const struct ctl_cmd *cmd = NULL;
    const char *env = getenv("DIVVY_ADDRESS");
    int opt, r;

    if (ctl_set_address(&ctl, env && env[0] ? env : DIVVY_DEFAULT_ADDRESS) < 0)
        return ctl_fail(CTL_EXIT_USAGE, "$DIVVY_ADDRESS is too long");
    /* libdivvy lets DIVVY_PATH override DIVVY_SOCKET_ONLY; the tool always
     * asks the daemon. */
    unsetenv("DIVVY_PATH");
    /* Global options stop at the command word ("+"). */
    opterr = 0;
    opt = ctl_getopt(&ctl, NULL, argc, argv, "+:" CTL_SHORTOPTS "V", longopts);
    if (opt < 0)
        return ctl_opts_exit(opt);
    if (opt == 'V') {
        printf("divvyctl %s (libdivvy API %d.%d)\n", DIVVY_VERSION, DIVVY_VERSION_MAJOR,
               DIVVY_VERSION_MINOR);
        return CTL_EXIT_OK;
    }
    if (optind >= argc) {
        ctl_print_main_help(stderr);
        return CTL_EXIT_USAGE;
    }
    if (strcmp(argv[optind], "help") == 0) {
        if (optind + 1 >= argc) {
            ctl_print_main_help(stdout);
            return CTL_EXIT_OK;
        }
        optind++;
        for (size_t i = 0; i < CTL_N_CMDS; i++) {
            if (strcmp(ctl_cmds[i].name, argv[optind]) == 0) {
                fputs(ctl_cmds[i].help, stdout);
                return CTL_EXIT_OK;
            }
        }
        return ctl_usage(NULL, "no command '%s'", argv[optind]);
    }
    for (size_t i = 0; i < CTL_N_CMDS; i++) {
        if (strcmp(ctl_cmds[i].name, argv[optind]) == 0)
            cmd = &ctl_cmds[i];
    }
    if (!cmd)
        return ctl_usage(NULL, "unknown command '%s'", argv[optind]);
    r = cmd->run(&ctl, cmd, argc - optind, argv + optind);
    divvy_close(ctl.h);
    if (fflush(stdout) == EOF && r == CTL_EXIT_OK)
        r = ctl_fail(CTL_EXIT_FAILURE, "writing output: %s", strerror(errno));
    return r;
}
