/* SPDX-License-Identifier: MIT */
/*
 * divvyctl: the admin tool of divvy (DESIGN §8, docs/divvyctl.md).  This file
 * holds main(), the global options, the connection to divvyd (libdivvy's
 * public API only, always the socket), the mapping of errors to the stable
 * exit codes, and the request verbs: status, hit, take, peek, reset, rules,
 * explain, stats, reload.  check/convert live in divvyctl_config.c, top and
 * locked in divvyctl_top.c.  Owns one handle per run; prints results on
 * stdout (or one JSON document with --json) and one line per error on
 * stderr.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "divvyctl.h"

#ifndef DIVVY_VERSION
#define DIVVY_VERSION "0"
#endif

#define CTL_LINE_MAX 4096       /* a request line, as the protocol limits it */

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
    "  -s, --socket ADDR   divvyd's address: unix:PATH (or just /PATH), tcp:HOST:PORT,\n"
    "                      tcp:[V6]:PORT; default $DIVVY_ADDRESS, else\n"
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
    "     problems (check, convert), the daemon rejected a new config (reload)\n"
    "  2  usage error, or a request divvyd rejected as malformed\n"
    "  3  divvyd is unreachable, did not answer in time, is busy, or went away\n"
    "  4  permission denied: an admin command (reset, reload, top, locked) from a\n"
    "     user who is neither root nor in divvy-admin, any admin command over TCP,\n"
    "     or no access to the socket (group divvy)\n"
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
    "\n"
    "See docs/divvyctl.md for the full reference.\n";

static const char ctl_help_status[] =
    "Usage: divvyctl status [OPTIONS]\n"
    "\n"
    "Says whether divvyd answers at the address (PING, with the round-trip time)\n"
    "and summarises its STATS: uptime, config generation and rules, connections,\n"
    "hits allowed and denied, reloads, and how full the counter tables are.\n"
    "Any user with access to the socket may run it.\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"address\": ..., \"running\": true, \"ping_ms\": 0.1,\n"
    "                      \"stats\": {\"uptime_seconds\": 86400, ...}}; when divvyd\n"
    "                      cannot be reached: {\"address\": ..., \"running\": false,\n"
    "                      \"error\": \"...\"} and exit status 3\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 divvyd answered; 3 it did not; 4 no access to the socket.\n"
    "\n"
    "Example:\n"
    "  divvyctl status || systemctl status divvyd\n";

static const char ctl_help_hit[] =
    "Usage: divvyctl hit [OPTIONS] KEY=VALUE...\n"
    "\n"
    "Takes one credit for the request KEY=VALUE..., exactly as an application's\n"
    "HIT would (the counters change), and prints the answer on one line:\n"
    "\n"
    "  allowed credit=999 reset_seconds=60 rule=status\n"
    "\n"
    "allowed or denied; the credit left; the seconds until the quota resets (or,\n"
    "for a token bucket, until the next credit); and the rule that decided (its\n"
    "label, or its 16-hex-digit id).  Use peek to look without taking.\n"
    "\n"
    "Arguments are split at their first '='.  divvyctl quotes values for the\n"
    "protocol, so 'path=/a b' needs shell quoting only; a value may not contain\n"
    "'\"' or a newline.  At most 32 distinct keys.  As root (or divvy-admin) on\n"
    "the Unix socket the request is privileged and matches source = privileged\n"
    "rules, as pam_divvy's requests do.\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"allowed\": true, \"credit\": 999, \"reset_seconds\": 60,\n"
    "                      \"rule\": \"status\", \"request\": {\"method\": \"GET\", ...}}\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 allowed, 1 denied, 2 usage or malformed request, 3 divvyd\n"
    "unreachable, 4 no access to the socket.\n"
    "\n"
    "Example:\n"
    "  divvyctl hit method=GET path=/status\n";

static const char ctl_help_take[] =
    "Usage: divvyctl take [OPTIONS] N KEY=VALUE...\n"
    "\n"
    "Takes N credits (1 to 1000000000) for the request, all or nothing: either\n"
    "N credits are left and all are taken, or none is.  Output, JSON and exit\n"
    "status as for hit (see divvyctl hit --help).\n"
    "\n"
    "Options:\n"
    "  -j, --json          as for hit\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 taken, 1 denied (nothing taken), 2 usage, 3 divvyd\n"
    "unreachable, 4 no access to the socket.\n"
    "\n"
    "Example:\n"
    "  divvyctl take 5 service=sshd user=alice rhost=203.0.113.9 event=authfail\n";

static const char ctl_help_peek[] =
    "Usage: divvyctl peek [OPTIONS] KEY=VALUE...\n"
    "\n"
    "Shows what the request would see now, taking nothing: allowed when at\n"
    "least one credit is left, the credit, the seconds until the reset and the\n"
    "deciding rule.  Output, JSON and exit status as for hit.  pam_divvy's\n"
    "preauth mode asks exactly this question.\n"
    "\n"
    "Options:\n"
    "  -j, --json          as for hit\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 a credit is left, 1 none is, 2 usage, 3 divvyd unreachable,\n"
    "4 no access to the socket.\n"
    "\n"
    "Example:\n"
    "  divvyctl peek service=sshd user=alice rhost=203.0.113.9 event=authfail\n";

static const char ctl_help_reset[] =
    "Usage: divvyctl reset [OPTIONS] KEY=VALUE...\n"
    "\n"
    "Admin command.  Forgets the counters this request touches: those of every\n"
    "rule it matches (continue and canary rules on the way included), for this\n"
    "request's actor values only.  Prints what a hit would see for the deciding\n"
    "rule afterwards, without taking anything:\n"
    "\n"
    "  reset credit=5 reset_seconds=0 rule=login-user-source\n"
    "\n"
    "To unlock a user locked out by pam_divvy, send what the module sends:\n"
    "  divvyctl reset event=authfail user=alice rhost=203.0.113.9\n"
    "(`divvyctl locked` lists who is locked out.)  divvyd logs the reset with\n"
    "your uid.\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"reset\": true, \"credit\": 5, \"reset_seconds\": 0,\n"
    "                      \"rule\": \"login-user-source\", \"request\": {...}}\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 reset, 2 usage, 3 divvyd unreachable, 4 permission denied\n"
    "(not root or divvy-admin, or over TCP).\n";

static const char ctl_help_rules[] =
    "Usage: divvyctl rules [OPTIONS]\n"
    "\n"
    "Lists the rules divvyd is using, in order (the first matching stop rule\n"
    "decides), one line each:\n"
    "\n"
    "  #  ID      LIMIT  PER    ALGORITHM POLICY   SOURCE     FAST ACTOR  MATCH\n"
    "  0  status  1000   1m 00s window    stop     any        no   -      method=GET ...\n"
    "\n"
    "ID is the rule's label, or 16 hex digits of its digest (the id counters,\n"
    "COUNTERS, EXPLAIN and top use).  MATCH is the rule's match set (default for\n"
    "the default rule); * means present with any value.\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"rules\": [{\"rule\": 0, \"id\": \"status\", \"label\": \"\",\n"
    "                      \"match\": \"method=GET path=/status\", \"credit_limit\":\n"
    "                      1000, \"reset_seconds\": 60, \"algorithm\": \"window\",\n"
    "                      \"policy\": \"stop\", \"source\": \"any\", \"fast_path\":\n"
    "                      false, \"actor\": []}, ...]}\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 listed, 3 divvyd unreachable, 4 no access to the socket.\n";

static const char ctl_help_explain[] =
    "Usage: divvyctl explain [OPTIONS] KEY=VALUE...\n"
    "\n"
    "Shows how the rules decide the request, consuming nothing: every rule up to\n"
    "the deciding one, with why each earlier rule did not match (a missing key,\n"
    "a value its pattern rejects, a privileged rule and an unprivileged caller),\n"
    "which continue/canary rules also apply, and the deciding rule with the\n"
    "credit the request would see now (a PEEK):\n"
    "\n"
    "  rule 0 (status): no match: path=/pantry/x does not match /status\n"
    "  rule 2 (cookies): decides\n"
    "      match: method=GET path=/pantry/cookies/* ip=*\n"
    "  now: allowed credit=2 reset_seconds=3599\n"
    "\n"
    "As root (or divvy-admin) on the Unix socket the request is privileged, as\n"
    "pam_divvy's are; over TCP or as another user it is not.\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"request\": {...}, \"rules\": [{\"rule\": 0, \"id\": ...,\n"
    "                      \"verdict\": \"no-match\", \"match\": ..., \"reason\": ...},\n"
    "                      ...], \"decided_by\": {\"rule\": 2, \"id\": \"cookies\"},\n"
    "                      \"now\": {\"allowed\": true, \"credit\": 2, ...}}\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 explained, 2 usage, 3 divvyd unreachable, 4 no access to the\n"
    "socket.\n"
    "\n"
    "Example:\n"
    "  divvyctl explain method=GET path=/pantry/cookies/oatmeal ip=10.0.0.1\n";

static const char ctl_help_stats[] =
    "Usage: divvyctl stats [OPTIONS]\n"
    "\n"
    "Prints divvyd's STATS counters, one name and value per line (uptime_seconds,\n"
    "connections, hits_total, hits_accepted, hits_rejected, errors_total,\n"
    "reloads_ok, reloads_rejected, config_generation, rules, table_slots,\n"
    "table_live, fast_table_slots, fast_table_live, table_full_events,\n"
    "privileged_table_slots, privileged_table_live, and any that a newer divvyd\n"
    "adds).\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"uptime_seconds\": 86400, \"connections\": 12, ...}\n"
    "                      (integers; a value that is not one stays a string)\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 printed, 3 divvyd unreachable, 4 no access to the socket.\n";

static const char ctl_help_reload[] =
    "Usage: divvyctl reload [OPTIONS]\n"
    "\n"
    "Admin command.  Makes divvyd re-read its configuration file (as SIGHUP does,\n"
    "but with an answer).  A valid config is in use for every request that\n"
    "follows; counters of rules whose id did not change keep their counts.  An\n"
    "invalid config is rejected and the running rules stay; the reason\n"
    "(file:line: problem) is printed on stderr and the exit status is 1.  Run\n"
    "`divvyctl check FILE` first to see every problem at once.  systemd's\n"
    "ExecReload runs this command.\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"reloaded\": true, \"generation\": 4, \"rules\": 43} or\n"
    "                      {\"reloaded\": false, \"error\": \"FILE:LINE: ...\"}\n"
    "  -s, --socket ADDR, -t, --timeout MS, -h, --help: see divvyctl --help\n"
    "\n"
    "Exit status: 0 reloaded, 1 rejected (old rules kept), 3 divvyd unreachable,\n"
    "4 permission denied (not root or divvy-admin, or over TCP).\n";

static int cmd_status(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
static int cmd_hit(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
static int cmd_rules(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
static int cmd_explain(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
static int cmd_stats(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);
static int cmd_reload(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv);

/* hit, take, peek and reset share cmd_hit(); it tells them apart by name. */
static const struct ctl_cmd ctl_cmds[] = {
    { "status", cmd_status, "is divvyd up? uptime, rules, hits, table use", ctl_help_status },
    { "hit", cmd_hit, "take one credit, as an application would", ctl_help_hit },
    { "take", cmd_hit, "take N credits, all or nothing", ctl_help_take },
    { "peek", cmd_hit, "show what a request would see, taking nothing", ctl_help_peek },
    { "reset", cmd_hit, "forget the counters a request touches (admin)", ctl_help_reset },
    { "rules", cmd_rules, "list the loaded rules", ctl_help_rules },
    { "explain", cmd_explain, "which rule decides a request, and why not the others",
      ctl_help_explain },
    { "stats", cmd_stats, "the daemon's counters", ctl_help_stats },
    { "top", cmd_top, "live counters, least credit first, refreshing (admin)", ctl_help_top },
    { "locked", cmd_locked, "counters with no credit left: who is locked out (admin)",
      ctl_help_locked },
    { "reload", cmd_reload, "re-read the config; says why when rejected (admin)",
      ctl_help_reload },
    { "check", cmd_check, "validate config files, without a daemon", ctl_help_check },
    { "convert", cmd_convert, "rewrite a divvy .ini/.json config as divvy.conf",
      ctl_help_convert },
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

static int ctl_set_address(struct ctl *ctl, const char *addr)
{
    int n;

    if (addr[0] == '/')
        n = snprintf(ctl->address, sizeof(ctl->address), "unix:%s", addr);
    else
        n = snprintf(ctl->address, sizeof(ctl->address), "%s", addr);
    return n < 0 || (size_t)n >= sizeof(ctl->address) ? -ENAMETOOLONG : 0;
}

static int ctl_parse_int(const char *text, long min, long max, long *ret)
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

enum ctl_opt ctl_common_opt(struct ctl *ctl, const struct ctl_cmd *cmd, int opt,
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

/* Parses only the common options; for commands that have no others. */
static int ctl_simple_opts(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = { CTL_LONGOPTS, { NULL, 0, NULL, 0 } };
    int opt;

    ctl_getopt_reset();
    while ((opt = getopt_long(argc, argv, ":" CTL_SHORTOPTS, longopts, NULL)) != -1) {
        switch (ctl_common_opt(ctl, cmd, opt, optarg, argv)) {
        case CTL_OPT_DONE:
            break;
        case CTL_OPT_HELP:
            return -1;
        default:
            /* CTL_OPT_OTHER cannot happen: every option is common. */
            return -2;
        }
    }
    return optind;
}

/* Maps ctl_simple_opts()' negative results to exit codes. */
static int ctl_opts_exit(int r)
{
    return r == -1 ? CTL_EXIT_OK : CTL_EXIT_USAGE;
}

/* ---- the connection ------------------------------------------------------- */

static bool ctl_is_tcp(const struct ctl *ctl)
{
    return strncmp(ctl->address, "tcp:", 4) == 0;
}

static int ctl_forbidden(const struct ctl *ctl, const char *verb)
{
    if (ctl_is_tcp(ctl))
        return ctl_fail(CTL_EXIT_PERMISSION, "permission denied: divvyd refuses %s over TCP; "
                        "use the Unix socket as root or a member of divvy-admin", verb);
    return ctl_fail(CTL_EXIT_PERMISSION, "permission denied: %s needs root or membership in "
                    "divvy-admin (server.admin_group)", verb);
}

int ctl_connect(struct ctl *ctl)
{
    int r;

    if (ctl->h)
        return 0;
    r = divvy_open(ctl->address, DIVVY_SOCKET_ONLY, &ctl->h);
    if (r == -EINVAL || r == -ENAMETOOLONG)
        return ctl_fail(CTL_EXIT_USAGE, "bad address '%s': use unix:PATH, tcp:HOST:PORT or "
                        "tcp:[V6]:PORT", ctl->address);
    if (r < 0)
        return ctl_fail(CTL_EXIT_FAILURE, "cannot open a handle on %s: %s", ctl->address,
                        strerror(-r));
    r = divvy_set_timeouts(ctl->h, ctl->timeout_ms, ctl->timeout_ms);
    if (r < 0)
        return ctl_client_error(ctl, NULL, r);
    return 0;
}

/* libdivvy's message when it has one (it names the call and the cause),
 * else strerror(). */
static const char *ctl_why(const struct ctl *ctl, int r)
{
    const char *msg = ctl->h ? divvy_errmsg(ctl->h) : "";

    return msg[0] ? msg : strerror(-r);
}

int ctl_client_error(struct ctl *ctl, const char *verb, int r)
{
    const char *why = ctl_why(ctl, r);

    switch (-r) {
    case EPERM:
        return ctl_forbidden(ctl, verb ? verb : "this command");
    case EACCES:
        return ctl_fail(CTL_EXIT_PERMISSION, "permission denied connecting to %s (the socket "
                        "is for root and group divvy): %s", ctl->address, why);
    case ETIMEDOUT:
        return ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd at %s did not answer within %d ms: %s",
                        ctl->address, ctl->timeout_ms, why);
    case ENOENT:
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ENOTCONN:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EADDRNOTAVAIL:
    case ENOTSOCK:
    case EPROTO:
    case EBUSY:
        return ctl_fail(CTL_EXIT_UNAVAILABLE, "cannot reach divvyd at %s: %s", ctl->address,
                        why);
    case EINVAL:
    case E2BIG:
    case EMSGSIZE:
        return ctl_fail(CTL_EXIT_USAGE, "bad request: %s", why);
    default:
        return ctl_fail(CTL_EXIT_FAILURE, "%s%s%s", verb ? verb : "", verb ? ": " : "", why);
    }
}

/* Splits "ERR code "reason"" into its parts (both NUL-terminated, cut to size). */
static void ctl_parse_err(const char *line, char *code, size_t code_size, char *reason,
                          size_t reason_size)
{
    const char *p = line + 4, *q;
    size_t len;

    len = strcspn(p, " ");
    snprintf(code, code_size, "%.*s", (int)len, p);
    p += len;
    while (*p == ' ')
        p++;
    if (*p == '"') {
        q = strchr(p + 1, '"');
        len = q ? (size_t)(q - p - 1) : strlen(p + 1);
        p++;
    } else {
        len = strlen(p);
    }
    snprintf(reason, reason_size, "%.*s", (int)len, p);
}

/* Turns an ERR reply to @verb into an exit code, printing why. */
static int ctl_err_reply(const struct ctl *ctl, const char *verb, const char *line)
{
    char code[64], reason[600];

    ctl_parse_err(line, code, sizeof(code), reason, sizeof(reason));
    if (strcmp(code, "forbidden") == 0)
        return ctl_forbidden(ctl, verb);
    if (strcmp(code, "reload-failed") == 0)
        return ctl_fail(CTL_EXIT_NO, "reload rejected, the running rules stay: %s", reason);
    if (strcmp(code, "bad-request") == 0 || strcmp(code, "too-many-keys") == 0 ||
        strcmp(code, "line-too-long") == 0)
        return ctl_fail(CTL_EXIT_USAGE, "divvyd rejected the request (%s): %s", code, reason);
    if (strcmp(code, "busy") == 0)
        return ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd at %s is busy: %s", ctl->address, reason);
    if (strcmp(code, "unknown-command") == 0)
        return ctl_fail(CTL_EXIT_FAILURE, "divvyd at %s does not know %s (an older divvyd, or "
                        "Button's divvy?)", ctl->address, verb);
    return ctl_fail(CTL_EXIT_FAILURE, "divvyd: %s: %s", code, reason);
}

int ctl_command(struct ctl *ctl, const char *verb, const char *line, char ***ret_lines,
                size_t *ret_n)
{
    char **lines = NULL;
    size_t n = 0;
    int r;

    r = ctl_connect(ctl);
    if (r > 0)
        return r;
    r = divvy_command(ctl->h, line, &lines, &n);
    if (r < 0)
        return ctl_client_error(ctl, verb, r);
    if (n == 0 || strncmp(lines[0], "OK", 2) != 0 || (lines[0][2] && lines[0][2] != ' ')) {
        if (n > 0 && strncmp(lines[0], "ERR ", 4) == 0)
            r = ctl_err_reply(ctl, verb, lines[0]);
        else
            r = ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd at %s: unexpected reply to %s: %s",
                         ctl->address, verb, n > 0 ? lines[0] : "(nothing)");
        divvy_lines_free(lines, n);
        return r;
    }
    *ret_lines = lines;
    *ret_n = n;
    return 0;
}

/* ---- reply lines ----------------------------------------------------------- */

static bool ctl_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

/* Reads one string at *p (quoted or unquoted; an unquoted one ends at
 * whitespace or, when @stop_eq, at '='), NUL-terminates it in place. */
static char *ctl_read_string(char **p, bool stop_eq)
{
    char *s = *p, *start;

    if (*s == '"') {
        start = ++s;
        while (*s && *s != '"')
            s++;
        if (*s != '"')
            return NULL;
        *s++ = '\0';
        *p = s;
        return start;
    }
    start = s;
    while (*s && !ctl_is_space(*s) && *s != '"' && !(stop_eq && *s == '='))
        s++;
    *p = s;
    return start;
}

int ctl_fields_parse(const char *line, struct ctl_fields *ret)
{
    size_t len = strlen(line);
    char *p;

    if (len >= sizeof(ret->buf))
        return -EPROTO;
    memcpy(ret->buf, line, len + 1);
    ret->n = 0;
    p = ret->buf;
    for (;;) {
        char *name, *value, c;

        while (ctl_is_space(*p))
            p++;
        if (!*p)
            return 0;
        if (ret->n == CTL_FIELDS_MAX)
            return -E2BIG;
        name = ctl_read_string(&p, true);
        if (!name || *p != '=')
            return -EPROTO;
        *p++ = '\0';
        value = ctl_read_string(&p, false);
        if (!value)
            return -EPROTO;
        c = *p;
        if (c && !ctl_is_space(c))
            return -EPROTO;
        if (c)
            *p++ = '\0';
        if (!name[0])
            return -EPROTO;
        ret->name[ret->n] = name;
        ret->value[ret->n] = value;
        ret->n++;
    }
}

const char *ctl_field(const struct ctl_fields *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++) {
        if (strcmp(f->name[i], name) == 0)
            return f->value[i];
    }
    return NULL;
}

int ctl_field_u64(const struct ctl_fields *f, const char *name, uint64_t *ret)
{
    const char *v = ctl_field(f, name);
    unsigned long long x;
    char *end;

    if (!v)
        return -ENOENT;
    if (v[0] < '0' || v[0] > '9')
        return -EPROTO;
    errno = 0;
    x = strtoull(v, &end, 10);
    if (errno || *end)
        return -EPROTO;
    *ret = x;
    return 0;
}

int ctl_json_print(json_t *doc)
{
    int r;

    if (!doc)
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    r = json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(doc);
    if (r < 0 || fputc('\n', stdout) == EOF)
        return ctl_fail(CTL_EXIT_FAILURE, "writing JSON: %s", strerror(errno));
    return CTL_EXIT_OK;
}

void ctl_fmt_duration(uint64_t s, char *buf, size_t size)
{
    if (s < 60)
        snprintf(buf, size, "%" PRIu64 "s", s);
    else if (s < 3600)
        snprintf(buf, size, "%" PRIu64 "m %02" PRIu64 "s", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, size, "%" PRIu64 "h %02" PRIu64 "m", s / 3600, s / 60 % 60);
    else
        snprintf(buf, size, "%" PRIu64 "d %02" PRIu64 "h", s / 86400, s / 3600 % 24);
}

/* A JSON value for a reply field: integers as numbers, true/false as
 * booleans, everything else as a string. */
static json_t *ctl_json_value(const char *v)
{
    unsigned long long x;
    char *end;

    if (strcmp(v, "true") == 0)
        return json_true();
    if (strcmp(v, "false") == 0)
        return json_false();
    if (v[0] >= '0' && v[0] <= '9' && strlen(v) < 19) {
        errno = 0;
        x = strtoull(v, &end, 10);
        if (!errno && !*end)
            return json_integer((json_int_t)x);
    }
    return json_string(v);
}

/* ---- request arguments ------------------------------------------------------ */

/* Splits KEY=VALUE operands into @kv (pointing into argv). */
static int ctl_parse_kv(const struct ctl_cmd *cmd, int argc, char **argv,
                        struct divvy_kv *kv, size_t *ret_n)
{
    size_t n = 0;

    for (int i = 0; i < argc; i++) {
        char *eq = strchr(argv[i], '=');

        if (!eq || eq == argv[i])
            return ctl_usage(cmd, "expected KEY=VALUE, got '%s'", argv[i]);
        if ((size_t)i >= DIVVY_MAX_KEYS * 4)
            return ctl_usage(cmd, "too many KEY=VALUE arguments (at most %d keys)",
                             DIVVY_MAX_KEYS);
        *eq = '\0';
        kv[n].key = argv[i];
        kv[n].value = eq + 1;
        n++;
    }
    *ret_n = n;
    return 0;
}

static json_t *ctl_json_request(const struct divvy_kv *kv, size_t n)
{
    json_t *o = json_object();

    for (size_t i = 0; o && i < n; i++)
        json_object_set_new(o, kv[i].key, json_string(kv[i].value));
    return o;
}

/* Appends " key=value" to @line, quoting as docs/protocol.md asks. */
static int ctl_append_pair(char *line, size_t size, size_t *pos, const char *key,
                           const char *value)
{
    const char *s[2] = { key, value };
    size_t p = *pos;

    for (int k = 0; k < 2; k++) {
        bool quote = s[k][0] == '\0';
        size_t len = strlen(s[k]);
        int n;

        if (strpbrk(s[k], "\"\n"))
            return -EINVAL;
        for (size_t i = 0; i < len && !quote; i++)
            quote = ctl_is_space(s[k][i]) || s[k][i] == '=';
        n = snprintf(line + p, size - p, "%s%s%s%s", k == 0 ? " " : "=", quote ? "\"" : "",
                     s[k], quote ? "\"" : "");
        if (n < 0 || (size_t)n >= size - p)
            return -EMSGSIZE;
        p += (size_t)n;
    }
    *pos = p;
    return 0;
}

/* ---- status ------------------------------------------------------------------ */

static uint64_t ctl_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t ctl_stat(char **lines, size_t n, const char *name)
{
    size_t len = strlen(name);

    for (size_t i = 1; i < n; i++) {
        if (strncmp(lines[i], name, len) == 0 && lines[i][len] == '=')
            return strtoull(lines[i] + len + 1, NULL, 10);
    }
    return 0;
}

/* STATS line @name's value as text ("" when absent). */
static const char *ctl_stat_str(char **lines, size_t n, const char *name)
{
    size_t len = strlen(name);

    for (size_t i = 1; i < n; i++) {
        if (strncmp(lines[i], name, len) == 0 && lines[i][len] == '=')
            return lines[i] + len + 1;
    }
    return "";
}

/* status's Redis line (docs/redis.md "Monitoring"): nothing while unused. */
static void ctl_status_redis(char **lines, size_t n)
{
    const char *state = ctl_stat_str(lines, n, "redis_state");
    char down[32];

    if (!state[0] || strcmp(state, "unused") == 0)
        return;
    if (strcmp(state, "down") == 0) {
        ctl_fmt_duration(ctl_stat(lines, n, "redis_down_seconds"), down, sizeof(down));
        printf("  redis        DOWN for %s at %s; on_redis_error %s%s\n", down,
               ctl_stat_str(lines, n, "redis_address"),
               ctl_stat_str(lines, n, "redis_on_error"),
               strcmp(ctl_stat_str(lines, n, "redis_on_error"), "closed") == 0
                   ? ": its rules deny every hit" : "");
    } else {
        printf("  redis        %s at %s, %" PRIu64 " connections; on_redis_error %s\n", state,
               ctl_stat_str(lines, n, "redis_address"), ctl_stat(lines, n, "redis_connections"),
               ctl_stat_str(lines, n, "redis_on_error"));
    }
    printf("  store        %" PRIu64 " strict and %" PRIu64 " lease rules; %" PRIu64
           " answers by on_redis_error\n", ctl_stat(lines, n, "redis_rules_strict"),
           ctl_stat(lines, n, "redis_rules_lease"), ctl_stat(lines, n, "redis_fallbacks"));
}

static int cmd_status(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    char **lines = NULL, up[32];
    size_t n = 0;
    uint64_t t0, ping_us;
    json_t *doc, *stats;
    int r;

    r = ctl_simple_opts(ctl, cmd, argc, argv);
    if (r < 0)
        return ctl_opts_exit(r);
    if (r != argc)
        return ctl_usage(cmd, "takes no arguments");

    r = ctl_connect(ctl);
    if (r > 0)
        return r;
    t0 = ctl_now_us();
    r = divvy_command(ctl->h, "PING", &lines, &n);
    ping_us = ctl_now_us() - t0;
    if (r < 0 || n < 1 || strcmp(lines[0], "OK pong") != 0) {
        char why[640];

        if (r < 0)
            snprintf(why, sizeof(why), "%s", ctl_why(ctl, r));
        else
            snprintf(why, sizeof(why), "unexpected reply to PING: %s", n ? lines[0] : "");
        divvy_lines_free(lines, n);
        if (ctl->json) {
            doc = json_pack("{s:s, s:b, s:s}", "address", ctl->address, "running", 0,
                            "error", why);
            ctl_json_print(doc);
            return r == -EACCES ? CTL_EXIT_PERMISSION : CTL_EXIT_UNAVAILABLE;
        }
        if (r < 0)
            return ctl_client_error(ctl, "PING", r);
        return ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd at %s: %s", ctl->address, why);
    }
    divvy_lines_free(lines, n);

    r = ctl_command(ctl, "STATS", "STATS", &lines, &n);
    if (r > 0)
        return r;
    if (ctl->json) {
        stats = json_object();
        for (size_t i = 1; stats && i < n; i++) {
            char *eq = strchr(lines[i], '=');

            if (!eq)
                continue;
            *eq = '\0';
            json_object_set_new(stats, lines[i], ctl_json_value(eq + 1));
        }
        doc = json_pack("{s:s, s:b, s:f, s:o}", "address", ctl->address, "running", 1,
                        "ping_ms", (double)ping_us / 1000.0, "stats", stats);
        divvy_lines_free(lines, n);
        return ctl_json_print(doc);
    }
    ctl_fmt_duration(ctl_stat(lines, n, "uptime_seconds"), up, sizeof(up));
    printf("divvyd at %s: running (ping %.2f ms)\n", ctl->address, (double)ping_us / 1000.0);
    printf("  uptime       %s\n", up);
    printf("  config       generation %" PRIu64 ", %" PRIu64 " rules; reloads: %" PRIu64
           " ok, %" PRIu64 " rejected\n", ctl_stat(lines, n, "config_generation"),
           ctl_stat(lines, n, "rules"), ctl_stat(lines, n, "reloads_ok"),
           ctl_stat(lines, n, "reloads_rejected"));
    printf("  connections  %" PRIu64 "\n", ctl_stat(lines, n, "connections"));
    printf("  hits         %" PRIu64 " (%" PRIu64 " allowed, %" PRIu64 " denied); errors %"
           PRIu64 "\n", ctl_stat(lines, n, "hits_total"), ctl_stat(lines, n, "hits_accepted"),
           ctl_stat(lines, n, "hits_rejected"), ctl_stat(lines, n, "errors_total"));
    printf("  counters     %" PRIu64 " of %" PRIu64 " slots; fast path %" PRIu64 " of %" PRIu64
           "; privileged %" PRIu64 " of %" PRIu64 "; table full %" PRIu64 " times\n",
           ctl_stat(lines, n, "table_live"), ctl_stat(lines, n, "table_slots"),
           ctl_stat(lines, n, "fast_table_live"), ctl_stat(lines, n, "fast_table_slots"),
           ctl_stat(lines, n, "privileged_table_live"),
           ctl_stat(lines, n, "privileged_table_slots"), ctl_stat(lines, n, "table_full_events"));
    printf("  denials      quota %" PRIu64 ", redis-down %" PRIu64 ", zero-limit %" PRIu64
           ", table-full %" PRIu64 ", no-counter %" PRIu64 "\n",
           ctl_stat(lines, n, "denials_quota"), ctl_stat(lines, n, "denials_redis_down"),
           ctl_stat(lines, n, "denials_zero_limit"), ctl_stat(lines, n, "denials_table_full"),
           ctl_stat(lines, n, "denials_no_counter"));
    ctl_status_redis(lines, n);
    divvy_lines_free(lines, n);
    return CTL_EXIT_OK;
}

/* ---- hit, take, peek, reset ------------------------------------------------------ */

static int cmd_hit(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    struct divvy_kv kv[DIVVY_MAX_KEYS * 4];
    struct divvy_result res = { .size = sizeof(res) };
    bool take = strcmp(cmd->name, "take") == 0;
    bool reset = strcmp(cmd->name, "reset") == 0;
    const char *verb = reset ? "RESET" : take ? "TAKE" : strcmp(cmd->name, "peek") == 0 ? "PEEK"
                                                                                       : "HIT";
    long amount = 1;
    size_t n_kv = 0;
    json_t *doc;
    int r, first;

    first = ctl_simple_opts(ctl, cmd, argc, argv);
    if (first < 0)
        return ctl_opts_exit(first);
    if (take) {
        if (first >= argc)
            return ctl_usage(cmd, "needs a count N and KEY=VALUE arguments");
        if (ctl_parse_int(argv[first], 1, 1000000000, &amount) < 0)
            return ctl_usage(cmd, "N must be a number from 1 to 1000000000, not '%s'",
                             argv[first]);
        first++;
    }
    r = ctl_parse_kv(cmd, argc - first, argv + first, kv, &n_kv);
    if (r > 0)
        return r;

    r = ctl_connect(ctl);
    if (r > 0)
        return r;
    switch (verb[0]) {
    case 'R':
        r = divvy_reset(ctl->h, kv, n_kv, &res);
        break;
    case 'T':
        r = divvy_take(ctl->h, (uint64_t)amount, kv, n_kv, &res);
        break;
    case 'P':
        r = divvy_peek(ctl->h, kv, n_kv, &res);
        break;
    default:
        r = divvy_hit(ctl->h, kv, n_kv, &res);
        break;
    }
    if (r < 0)
        return ctl_client_error(ctl, verb, r);

    if (ctl->json) {
        doc = json_object();
        if (doc) {
            if (reset)
                json_object_set_new(doc, "reset", json_true());
            json_object_set_new(doc, "allowed", json_boolean(res.allowed));
            json_object_set_new(doc, "credit", json_integer((json_int_t)res.credit));
            json_object_set_new(doc, "reset_seconds",
                                json_integer((json_int_t)res.reset_seconds));
            json_object_set_new(doc, "rule", json_string(res.rule));
            json_object_set_new(doc, "fast_path", json_boolean(res.fast_path));
            json_object_set_new(doc, "request", ctl_json_request(kv, n_kv));
        }
        r = ctl_json_print(doc);
    } else {
        printf("%s credit=%" PRIu64 " reset_seconds=%" PRIu64 "%s%s%s\n",
               reset ? "reset" : res.allowed ? "allowed" : "denied", res.credit,
               res.reset_seconds, res.rule[0] ? " rule=" : "", res.rule,
               res.fast_path ? " path=fast" : "");
        r = CTL_EXIT_OK;
    }
    if (r == CTL_EXIT_OK && !reset && !res.allowed)
        r = CTL_EXIT_NO;
    return r;
}

/* ---- rules -------------------------------------------------------------------------- */

static json_t *ctl_json_rule(const struct ctl_fields *f)
{
    json_t *o = json_object();

    for (size_t i = 0; o && i < f->n; i++) {
        json_t *v;

        if (strcmp(f->name[i], "actor") == 0) {
            const char *a = f->value[i];

            v = json_array();
            while (v && *a) {
                size_t len = strcspn(a, ",");

                json_array_append_new(v, json_stringn(a, len));
                a += len + (a[len] == ',');
            }
        } else if (strcmp(f->name[i], "label") == 0 || strcmp(f->name[i], "id") == 0 ||
                   strcmp(f->name[i], "match") == 0) {
            v = json_string(f->value[i]);
        } else {
            v = ctl_json_value(f->value[i]);
        }
        json_object_set_new(o, f->name[i], v);
    }
    return o;
}

static int cmd_rules(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    static const char *const cols[] = { "rule", "id", "credit_limit", "reset_seconds",
                                        "algorithm", "policy", "source", "fast_path", "actor",
                                        "match" };
    static const char *const heads[] = { "#", "ID", "LIMIT", "PER", "ALGORITHM", "POLICY",
                                         "SOURCE", "FAST", "ACTOR", "MATCH" };
    enum { N_COLS = sizeof(cols) / sizeof(cols[0]) };
    struct ctl_fields *f = NULL;
    char **lines = NULL, cell[64];
    size_t n = 0, width[N_COLS];
    json_t *doc = NULL, *arr = NULL;
    int r;

    r = ctl_simple_opts(ctl, cmd, argc, argv);
    if (r < 0)
        return ctl_opts_exit(r);
    if (r != argc)
        return ctl_usage(cmd, "takes no arguments");
    r = ctl_command(ctl, "RULES", "RULES", &lines, &n);
    if (r > 0)
        return r;
    /* One parse buffer, reused: a config may hold 100,000 rules. */
    f = malloc(sizeof(*f));
    arr = ctl->json ? json_array() : NULL;
    if (!f || (ctl->json && !arr)) {
        r = ctl_fail(CTL_EXIT_FAILURE, "out of memory");
        goto out;
    }
    for (size_t c = 0; c < N_COLS; c++)
        width[c] = strlen(heads[c]);
    /* Text: two passes, widths then rows; PER is shown as a duration. */
    for (int pass = 0; pass < (ctl->json ? 1 : 2); pass++) {
        if (pass == 1) {
            for (size_t c = 0; c < N_COLS; c++)
                printf("%-*s%s", c + 1 < N_COLS ? (int)width[c] : 0, heads[c],
                       c + 1 < N_COLS ? "  " : "\n");
        }
        for (size_t i = 1; i < n; i++) {
            if (ctl_fields_parse(lines[i], f) < 0) {
                r = ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd sent a RULES line divvyctl cannot "
                             "read: %s", lines[i]);
                goto out;
            }
            if (arr) {
                json_array_append_new(arr, ctl_json_rule(f));
                continue;
            }
            for (size_t c = 0; c < N_COLS; c++) {
                const char *v = ctl_field(f, cols[c]);
                uint64_t secs;

                if (!v)
                    v = "?";
                if (c == 3 && ctl_field_u64(f, cols[c], &secs) == 0) {
                    ctl_fmt_duration(secs, cell, sizeof(cell));
                    v = cell;
                } else if (c == 7) {
                    v = strcmp(v, "true") == 0 ? "yes" : "no";
                } else if (c == 8 && !v[0]) {
                    v = "-";
                }
                if (pass == 0 && strlen(v) > width[c])
                    width[c] = strlen(v);
                else if (pass == 1)
                    printf("%-*s%s", c + 1 < N_COLS ? (int)width[c] : 0, v,
                           c + 1 < N_COLS ? "  " : "\n");
            }
        }
    }
    if (arr) {
        doc = json_pack("{s:o}", "rules", arr);
        arr = NULL;
        r = ctl_json_print(doc);
        goto out;
    }
    r = CTL_EXIT_OK;
out:
    json_decref(arr);
    free(f);
    divvy_lines_free(lines, n);
    return r;
}

/* ---- explain -------------------------------------------------------------------------- */

/* EXPLAIN's cause= in words (docs/protocol.md "EXPLAIN"). */
static const char *ctl_explain_cause(const char *cause)
{
    if (strcmp(cause, "zero-limit") == 0)
        return "always denied (credit_limit = 0)";
    if (strcmp(cause, "no-limit") == 0)
        return "always allowed (reset_seconds = 0)";
    if (strcmp(cause, "redis-down") == 0)
        return "Redis is down and on_redis_error = closed: denied";
    if (strcmp(cause, "redis-down-open") == 0)
        return "Redis is down and on_redis_error = open: allowed, not counted";
    if (strcmp(cause, "redis-down-local") == 0)
        return "Redis is down and on_redis_error = local: this host's counter decides";
    return cause;
}

static int cmd_explain(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    struct divvy_kv kv[DIVVY_MAX_KEYS * 4];
    struct divvy_result res = { .size = sizeof(res) };
    struct ctl_fields f;
    char line[CTL_LINE_MAX], **lines = NULL;
    size_t n = 0, n_kv = 0, pos;
    json_t *doc = NULL, *steps = NULL, *decided = NULL;
    const char *decided_cause = "";
    int r, first, peek;

    first = ctl_simple_opts(ctl, cmd, argc, argv);
    if (first < 0)
        return ctl_opts_exit(first);
    r = ctl_parse_kv(cmd, argc - first, argv + first, kv, &n_kv);
    if (r > 0)
        return r;
    pos = (size_t)snprintf(line, sizeof(line), "EXPLAIN");
    for (size_t i = 0; i < n_kv; i++) {
        r = ctl_append_pair(line, sizeof(line) - 1, &pos, kv[i].key, kv[i].value);
        if (r == -EINVAL)
            return ctl_usage(cmd, "'%s=%s': a key or value may not contain '\"' or a newline",
                             kv[i].key, kv[i].value);
        if (r < 0)
            return ctl_usage(cmd, "the request is longer than a protocol line (4096 bytes)");
    }
    r = ctl_command(ctl, "EXPLAIN", line, &lines, &n);
    if (r > 0)
        return r;
    /* What the deciding rule would say now; a failure here only loses that line. */
    peek = divvy_peek(ctl->h, kv, n_kv, &res);

    if (ctl->json) {
        doc = json_object();
        steps = json_array();
    } else {
        printf("request:");
        for (size_t i = 0; i < n_kv; i++)
            printf(" %s=%s", kv[i].key, kv[i].value);
        printf("%s\n", n_kv ? "" : " (no keys)");
    }
    for (size_t i = 1; i < n; i++) {
        const char *id, *verdict, *match, *reason, *idx, *cause;

        if (ctl_fields_parse(lines[i], &f) < 0) {
            r = ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd sent an EXPLAIN line divvyctl cannot "
                         "read: %s", lines[i]);
            goto out;
        }
        idx = ctl_field(&f, "rule");
        id = ctl_field(&f, "id");
        verdict = ctl_field(&f, "verdict");
        match = ctl_field(&f, "match");
        reason = ctl_field(&f, "reason");
        cause = ctl_field(&f, "cause");         /* older divvyd: none */
        if (!idx || !id || !verdict) {
            r = ctl_fail(CTL_EXIT_UNAVAILABLE, "divvyd sent an EXPLAIN line without rule, id "
                         "or verdict: %s", lines[i]);
            goto out;
        }
        if (ctl->json) {
            json_array_append_new(steps, json_pack("{s:o, s:s, s:s, s:s, s:s, s:s?}", "rule",
                                                   ctl_json_value(idx), "id", id, "verdict",
                                                   verdict, "match", match ? match : "",
                                                   "reason", reason ? reason : "",
                                                   "cause", cause));
            if (strcmp(verdict, "decides") == 0) {
                json_decref(decided);
                decided = json_pack("{s:o, s:s}", "rule", ctl_json_value(idx), "id", id);
            }
            continue;
        }
        if (strcmp(verdict, "no-match") == 0) {
            printf("rule %s (%s): no match: %s\n", idx, id, reason && reason[0] ? reason
                                                                                 : "-");
            continue;
        }
        if (strcmp(verdict, "decides") == 0)
            printf("rule %s (%s): decides\n", idx, id);
        else if (strcmp(verdict, "continue") == 0)
            printf("rule %s (%s): matches, continue: consumes too, and decides if it denies\n",
                   idx, id);
        else if (strcmp(verdict, "canary") == 0)
            printf("rule %s (%s): matches, canary: consumes and counts, its answer ignored\n",
                   idx, id);
        else
            printf("rule %s (%s): %s\n", idx, id, verdict);
        printf("    match: %s\n", match ? match : "?");
        if (cause && strcmp(cause, "counter") != 0)
            printf("    answer: %s\n", ctl_explain_cause(cause));
        if (strcmp(verdict, "decides") == 0 && cause)
            decided_cause = cause;
    }
    if (ctl->json) {
        json_object_set_new(doc, "request", ctl_json_request(kv, n_kv));
        json_object_set_new(doc, "rules", steps);
        json_object_set_new(doc, "decided_by", decided ? decided : json_null());
        if (peek >= 0)
            json_object_set_new(doc, "now",
                                json_pack("{s:b, s:I, s:I, s:s}", "allowed", res.allowed,
                                          "credit", (json_int_t)res.credit, "reset_seconds",
                                          (json_int_t)res.reset_seconds, "rule", res.rule));
        steps = NULL;
        decided = NULL;
        r = ctl_json_print(doc);
        doc = NULL;
        goto out;
    }
    if (peek >= 0)
        printf("now: %s%s credit=%" PRIu64 " reset_seconds=%" PRIu64 "\n",
               res.allowed ? "allowed" : "denied",
               res.allowed || !decided_cause[0] ? ""
               : strncmp(decided_cause, "redis-down", 10) == 0 ? " (Redis is down: on_redis_error)"
               : strcmp(decided_cause, "zero-limit") == 0      ? " (credit_limit = 0)"
                                                               : " (quota)",
               res.credit, res.reset_seconds);
    r = CTL_EXIT_OK;
out:
    json_decref(doc);
    json_decref(steps);
    json_decref(decided);
    divvy_lines_free(lines, n);
    return r;
}

/* ---- stats -------------------------------------------------------------------------------- */

static int cmd_stats(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    char **lines = NULL;
    size_t n = 0, width = 0;
    json_t *doc;
    int r;

    r = ctl_simple_opts(ctl, cmd, argc, argv);
    if (r < 0)
        return ctl_opts_exit(r);
    if (r != argc)
        return ctl_usage(cmd, "takes no arguments");
    r = ctl_command(ctl, "STATS", "STATS", &lines, &n);
    if (r > 0)
        return r;
    for (size_t i = 1; i < n; i++) {
        size_t len = strcspn(lines[i], "=");

        if (len > width)
            width = len;
    }
    doc = ctl->json ? json_object() : NULL;
    for (size_t i = 1; i < n; i++) {
        char *eq = strchr(lines[i], '=');

        if (!eq)
            continue;
        *eq = '\0';
        if (doc)
            json_object_set_new(doc, lines[i], ctl_json_value(eq + 1));
        else
            printf("%-*s  %s\n", (int)width, lines[i], eq + 1);
    }
    divvy_lines_free(lines, n);
    return ctl->json ? ctl_json_print(doc) : CTL_EXIT_OK;
}

/* ---- reload --------------------------------------------------------------------------------- */

static int cmd_reload(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    char **lines = NULL, code[64], reason[600];
    size_t n = 0;
    struct ctl_fields f;
    uint64_t gen = 0, rules = 0;
    json_t *doc;
    int r;

    r = ctl_simple_opts(ctl, cmd, argc, argv);
    if (r < 0)
        return ctl_opts_exit(r);
    if (r != argc)
        return ctl_usage(cmd, "takes no arguments");
    r = ctl_connect(ctl);
    if (r > 0)
        return r;
    r = divvy_command(ctl->h, "RELOAD", &lines, &n);
    if (r < 0)
        return ctl_client_error(ctl, "RELOAD", r);
    if (n > 0 && strncmp(lines[0], "ERR reload-failed", 17) == 0) {
        ctl_parse_err(lines[0], code, sizeof(code), reason, sizeof(reason));
        divvy_lines_free(lines, n);
        if (ctl->json) {
            ctl_json_print(json_pack("{s:b, s:s}", "reloaded", 0, "error", reason));
            fprintf(stderr, "divvyctl: reload rejected, the running rules stay: %s\n", reason);
            return CTL_EXIT_NO;
        }
        return ctl_fail(CTL_EXIT_NO, "reload rejected, the running rules stay: %s", reason);
    }
    if (n == 0 || strncmp(lines[0], "OK reloaded", 11) != 0) {
        r = n > 0 && strncmp(lines[0], "ERR ", 4) == 0
                ? ctl_err_reply(ctl, "RELOAD", lines[0])
                : ctl_fail(CTL_EXIT_UNAVAILABLE, "unexpected reply to RELOAD: %s",
                           n ? lines[0] : "(nothing)");
        divvy_lines_free(lines, n);
        return r;
    }
    if (ctl_fields_parse(lines[0] + 11, &f) == 0) {
        ctl_field_u64(&f, "generation", &gen);
        ctl_field_u64(&f, "rules", &rules);
    }
    divvy_lines_free(lines, n);
    if (ctl->json) {
        doc = json_pack("{s:b, s:I, s:I}", "reloaded", 1, "generation", (json_int_t)gen,
                        "rules", (json_int_t)rules);
        return ctl_json_print(doc);
    }
    printf("reloaded: generation %" PRIu64 ", %" PRIu64 " rules\n", gen, rules);
    return CTL_EXIT_OK;
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
    while ((opt = getopt_long(argc, argv, "+:" CTL_SHORTOPTS "V", longopts, NULL)) != -1) {
        if (opt == 'V') {
            printf("divvyctl %s (libdivvy API %d.%d)\n", DIVVY_VERSION, DIVVY_VERSION_MAJOR,
                   DIVVY_VERSION_MINOR);
            return CTL_EXIT_OK;
        }
        switch (ctl_common_opt(&ctl, NULL, opt, optarg, argv)) {
        case CTL_OPT_DONE:
            break;
        case CTL_OPT_HELP:
            return CTL_EXIT_OK;
        default:
            return CTL_EXIT_USAGE;
        }
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
