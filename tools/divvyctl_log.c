/* SPDX-License-Identifier: MIT */
/*
 * divvyctl log: reads divvyd's decision logs (server/dlog.h,
 * docs/decision-log.md) without a daemon: the files or directories named,
 * else the directory of the config given, else the default one; prints the
 * decisions that pass the filters (server/dlog_query.h) in file order, or
 * with --locks the lock periods of lockout rules (server/dlog_locks.h).
 * Any file may be handed to it: what cannot be trusted is reported on
 * stderr with its offset and skipped, memory stays bounded (one block, the
 * rules, the limits of dlog_locks), and the exit status says whether all
 * of it could be read.  Output in divvyctl_log_fmt.c.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "config.h"
#include "diag.h"
#include "divvyctl.h"
#include "divvyctl_log.h"

#define LOG_DIR_FILES_MAX 100000    /* *.dlog files read from one directory */
#define LOG_PATH_MAX      4096

const char ctl_help_log[] =
    "Usage: divvyctl log [OPTIONS] [PATH...]\n"
    "\n"
    "Reads divvyd's decision log (decision_log in divvy.conf(5)) without a daemon\n"
    "and prints the decisions recorded, one line each, in the order of the files:\n"
    "\n"
    "  2026-11-28T12:00:03.512Z TAKE 1 line/local allowed credit=3 reset=897\n"
    "      rule=login-user-source uid=0 pid=4711 flags=privileged | event=authfail\n"
    "      rhost=203.0.113.9 service=sshd user=#9f86d081884c7d65\n"
    "\n"
    "(one line, cut here): time (UTC), verb and amount, protocol/path (line, resp,\n"
    "rls, fast / none, local, lease, strict), allowed, denied or error, the\n"
    "answer's credit and reset seconds (error=CODE instead for an error), cleared=N\n"
    "for a RESET, the deciding rule (its label, its 16 hex digits, or - for none),\n"
    "the uid and pid (- when unknown), flags (privileged, reported, store-down,\n"
    "table-full), then the request's pairs after '|'.  A value the config redacts\n"
    "shows as key=#HASH (16 hex digits of a keyed hash) or key=<dropped>.  Values\n"
    "that are not plain printable words are quoted with \\\" \\\\ and \\xNN escapes.\n"
    "Decisions divvyd could not record show as a line\n"
    "  2026-11-28T12:00:04.000Z gap: 12 decisions not recorded (...)\n"
    "\n"
    "PATH is a log file or a directory (its *.dlog files, in name order).  Without\n"
    "PATH: the decision_log.directory of the config given with -c (loaded as divvyd\n"
    "loads it: a config with problems is refused), else\n"
    CONFIG_DLOG_DIRECTORY ".  Within a file, records of divvyd's workers can\n"
    "be out of time order by up to decision_log.flush_ms (each worker's buffer is\n"
    "written as one block).\n"
    "\n"
    "Options:\n"
    "      --since T       only decisions at or after T\n"
    "      --until T       only decisions before T\n"
    "                      T: 2026-11-28T12:00:00Z (RFC 3339, fractions and\n"
    "                      +HH:MM allowed), \"2026-11-28 12:00[:00]\" or\n"
    "                      2026-11-28 (UTC), @1795867200 (Unix seconds), or a\n"
    "                      time ago: -30s, -15m, -2h, -7d\n"
    "  -r, --rule ID       only decisions rule ID (label or 16 hex digits) took\n"
    "                      part in: it decided, or it was charged on the way (a\n"
    "                      continue or canary rule)\n"
    "  -a, --actor A       only decisions counted under actor A by the --rule\n"
    "                      rule, else by the deciding rule: its actor keys'\n"
    "                      values joined by ',' (user and source of a login\n"
    "                      rule: alice,203.0.113.9), an address with the rule's\n"
    "                      prefix as 10.1.2.0/24; as --locks prints it\n"
    "      --verdict V     only allowed, denied or error\n"
    "      --locks         list the lock periods of lockout rules instead\n"
    "                      (below); --since/--until keep the periods that overlap\n"
    "  -c, --config FILE   the config whose log directory to read (no PATH)\n"
    "  -j, --json          one JSON object per line: {\"unix_ms\", \"time\",\n"
    "                      \"verb\", \"n\", \"protocol\", \"path\", \"allowed\",\n"
    "                      \"credit\", \"reset\", \"rule\" (\"\": none), \"uid\",\n"
    "                      \"pid\" (null: unknown), \"error\" (errors only),\n"
    "                      \"cleared\" (RESET), \"generation\", \"request\": {pairs,\n"
    "                      redacted values as recorded}, \"redacted\": {key:\n"
    "                      \"hash\"|\"drop\"}, \"flags\": [...]}; a gap is\n"
    "                      {\"gap\": N, \"unix_ms\", \"time\"}\n"
    "  -h, --help          print this help\n"
    "\n"
    "Lock periods (--locks), the audit trail of pam_divvy's lockout rules: who\n"
    "failed, from where, when a lock started and ended, and who unlocked it.\n"
    "One line per (rule, actor) lock, by start:\n"
    "\n"
    "  login-user-source alice,203.0.113.9 2026-11-28T12:00:09.000Z to\n"
    "      2026-11-28T12:03:31.400Z (3m 22s) failures=5 refusals=2 unlocked by\n"
    "      uid=0\n"
    "\n"
    "ended is expired (the lock ran its length), unlocked (a RESET forgot the\n"
    "counter: `divvyctl unlock`, `divvyctl reset`, or pam_divvy's authsucc; the\n"
    "RESET's uid, and its pid when the log has one), or open (not over by the\n"
    "last decision read; the end shown is when it will be).  failures counts the\n"
    "failures of the interval that led to the lock and those refused during it;\n"
    "refusals the requests the lock refused.  A lock whose locking failure the\n"
    "log does not hold (made through another divvyd on the same Redis, or before\n"
    "the log's start) starts\n"
    "at its first refusal.  With --json: {\"rule\", \"actor\", \"start\", \"end\",\n"
    "\"start_ms\", \"end_ms\", \"seconds\", \"failures\", \"refusals\", \"ended\",\n"
    "\"unlocked_by_uid\", \"unlocked_by_pid\" (null unless unlocked by a RESET\n"
    "seen), \"from\": \"failure\"|\"refusal\"}.\n"
    "\n"
    "What a log holds cannot be trusted blindly: a damaged or cut block is skipped\n"
    "with a warning naming the file and offset, and reading goes on.\n"
    "\n"
    "Exit status: 0 every file read whole; 1 something was skipped (a damaged\n"
    "block, a file that is not a decision log, a directory with none) - what\n"
    "could be read is printed; 2 usage; 5 a file or directory cannot be read, or\n"
    "the output cannot be written.\n"
    "\n"
    "Examples:\n"
    "  divvyctl log --since -1h --verdict denied\n"
    "  divvyctl log --rule login-user-source --json /var/lib/divvy/decisions\n"
    "  divvyctl log --locks --since 2026-11-28 --actor alice,203.0.113.9\n";

enum { OPT_SINCE = 0x100, OPT_UNTIL, OPT_VERDICT, OPT_LOCKS };

struct log_run {
    struct dlog_query_filter f;
    bool json, locks_mode;
    struct dlog_query_rules *rules;
    struct dlog_locks *locks;
    uint64_t last_ms;           /* the latest decision read */
    bool skipped;               /* exit 1 */
    bool failed;                /* exit 5 */
    bool stop;                  /* output failed or no memory: read no further */
    bool rules_full;            /* said once */
};

/* ---- reading ---------------------------------------------------------------------------- */

static void log_decision(struct log_run *run, const struct dlog_decision *d)
{
    int r;

    if (d->unix_ms > run->last_ms)
        run->last_ms = d->unix_ms;
    if (run->locks_mode)
        r = dlog_locks_decision(run->locks, run->rules, d);
    else
        r = dlog_query_match(&run->f, run->rules, d) ? log_print_decision(run->rules, d,
                                                                          run->json) : 0;
    if (r < 0) {
        ctl_fail(CTL_EXIT_FAILURE, r == -ENOMEM ? "out of memory" : "writing output: %s",
                 strerror(-r));
        run->failed = run->stop = true;
    }
}

static void log_item(struct log_run *run, const char *path, const struct dlog_item *it)
{
    switch (it->type) {
    case DLOG_DECISION:
        log_decision(run, &it->u.d);
        break;
    case DLOG_RULES: {
        int r = dlog_query_rules_add(run->rules, &it->u.rules);

        if (r == -E2BIG && !run->rules_full) {
            fprintf(stderr, "divvyctl: %s: more than %d distinct rules or %u MiB of their "
                    "names: the others show as their ids\n", path, DLOG_QUERY_RULES_MAX,
                    DLOG_QUERY_RULES_BYTES >> 20);
            run->rules_full = true;
        } else if (r == -ENOMEM) {
            ctl_fail(CTL_EXIT_FAILURE, "out of memory");
            run->failed = run->stop = true;
        }
        break;
    }
    case DLOG_GAP:
        if (!run->locks_mode && it->u.gap.unix_ms >= run->f.since_ms &&
            (!run->f.until_ms || it->u.gap.unix_ms < run->f.until_ms) &&
            log_print_gap(&it->u.gap, run->json) < 0) {
            ctl_fail(CTL_EXIT_FAILURE, "writing output: %s", strerror(errno));
            run->failed = run->stop = true;
        }
        if (run->locks_mode) {
            char when[DLOG_QUERY_TIME_MAX];

            dlog_query_fmt_time(it->u.gap.unix_ms, when);
            fprintf(stderr, "divvyctl: %s: %" PRIu64 " decisions not recorded before %s: a "
                    "lock period may be missing or cut short\n", path, it->u.gap.dropped, when);
        }
        break;
    case DLOG_CORRUPT:
        fflush(stdout);
        /* why: the reader's own words, not the file's. */
        fprintf(stderr, "divvyctl: %s: offset %" PRIu64 ": %" PRIu64 " bytes skipped: %s\n",
                path, it->u.corrupt.offset, it->u.corrupt.skipped, it->u.corrupt.why);
        run->skipped = true;
        break;
    case DLOG_EOF:
        break;
    }
}

static void log_file(struct log_run *run, const char *path)
{
    struct dlog_reader *rd = NULL;
    struct dlog_item it;
    int r;

    r = dlog_reader_open(path, &rd);
    if (r == -EBADMSG) {
        ctl_fail(CTL_EXIT_NO, "%s: not a decision log (or one of a newer divvy): skipped", path);
        run->skipped = true;
        return;
    }
    if (r < 0) {
        ctl_fail(CTL_EXIT_FAILURE, "%s: %s", path, strerror(-r));
        run->failed = true;
        return;
    }
    while (!run->stop && (r = dlog_reader_next(rd, &it)) > 0)
        log_item(run, path, &it);
    if (r < 0) {
        ctl_fail(CTL_EXIT_FAILURE, "%s: reading: %s", path, strerror(-r));
        run->failed = true;
    }
    dlog_reader_close(rd);
}

/* ---- paths ------------------------------------------------------------------------------ */

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_log_name(const char *name)
{
    size_t n = strlen(name), k = strlen(DLOG_FILE_SUFFIX);

    return name[0] != '.' && n > k && strcmp(name + n - k, DLOG_FILE_SUFFIX) == 0;
}

/* The *.dlog files of @dir in name order. */
static void log_dir(struct log_run *run, const char *dir)
{
    DIR *dp = opendir(dir);
    char **names = NULL, path[LOG_PATH_MAX];
    size_t n = 0, cap = 0;
    struct dirent *de;

    if (!dp) {
        ctl_fail(CTL_EXIT_FAILURE, "%s: %s", dir, strerror(errno));
        run->failed = true;
        return;
    }
    while ((de = readdir(dp))) {
        char *copy;

        if (!is_log_name(de->d_name))
            continue;
        if (n == LOG_DIR_FILES_MAX) {
            ctl_fail(CTL_EXIT_NO, "%s: more than %d *.dlog files: only the first %d by name "
                     "are read", dir, LOG_DIR_FILES_MAX, LOG_DIR_FILES_MAX);
            run->skipped = true;
            break;
        }
        if (n == cap) {
            char **grown = realloc(names, (cap ? cap * 2 : 16) * sizeof(*names));

            if (!grown)
                goto nomem;
            names = grown;
            cap = cap ? cap * 2 : 16;
        }
        copy = strdup(de->d_name);
        if (!copy)
            goto nomem;
        names[n++] = copy;
    }
    closedir(dp);
    dp = NULL;
    if (n == 0) {
        ctl_fail(CTL_EXIT_NO, "%s: no decision log (*" DLOG_FILE_SUFFIX ") in it", dir);
        run->skipped = true;
    }
    if (n > 1)
        qsort(names, n, sizeof(*names), name_cmp);
    for (size_t i = 0; i < n && !run->stop; i++) {
        struct stat st;
        int len = snprintf(path, sizeof(path), "%s/%s", dir, names[i]);

        if (len < 0 || (size_t)len >= sizeof(path)) {
            ctl_fail(CTL_EXIT_FAILURE, "%s/%s: name too long", dir, names[i]);
            run->failed = true;
        } else if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
            ctl_fail(CTL_EXIT_NO, "%s: not a regular file: skipped", path);
            run->skipped = true;
        } else {
            log_file(run, path);
        }
    }
    goto out;
nomem:
    ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    run->failed = run->stop = true;
out:
    if (dp)
        closedir(dp);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void log_path(struct log_run *run, const char *path)
{
    struct stat st;

    if (stat(path, &st) < 0) {
        ctl_fail(CTL_EXIT_FAILURE, "%s: %s", path, strerror(errno));
        run->failed = true;
    } else if (S_ISDIR(st.st_mode)) {
        log_dir(run, path);
    } else if (!S_ISREG(st.st_mode)) {
        /* A FIFO or a device could block or never end. */
        ctl_fail(CTL_EXIT_NO, "%s: not a regular file: skipped", path);
        run->skipped = true;
    } else {
        log_file(run, path);
    }
}

/* ---- the command ------------------------------------------------------------------------ */

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The decision_log.directory of config @path (loaded with divvyd's loader)
 * into @dir: 0, or an exit code after printing why. */
static int log_config_dir(const char *path, char *dir, size_t size)
{
    struct diag *d = malloc(sizeof(*d));
    char msg[DIAG_FILE_MAX + DIAG_MSG_MAX + 32];
    struct config *cfg = NULL;
    int r;

    if (!d)
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    diag_init(d);
    r = config_load(path, &cfg, d);
    if (r < 0) {
        if (d->n)
            diag_format(d, 0, msg, sizeof(msg));
        else
            snprintf(msg, sizeof(msg), "%s: %s", path, strerror(-r));
        r = ctl_fail(CTL_EXIT_FAILURE, "%s (`divvyctl check %s` lists every problem; or name "
                     "the log directory)", msg, path);
    } else if (cfg->dlog.directory &&
               (size_t)snprintf(dir, size, "%s", cfg->dlog.directory) >= size) {
        r = ctl_fail(CTL_EXIT_FAILURE, "%s: decision_log.directory is too long", path);
    } else {
        r = 0;
    }
    config_free(cfg);
    free(d);
    return r;
}

/* Parses the options into @run and *@ret_config: 0; an exit code > 0 after a
 * usage message; -1 after --help. */
static int log_opts(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv,
                    struct log_run *run, const char **ret_config)
{
    static const struct option longopts[] = {
        CTL_LONGOPTS,
        { "since", required_argument, NULL, OPT_SINCE },
        { "until", required_argument, NULL, OPT_UNTIL },
        { "rule", required_argument, NULL, 'r' },
        { "actor", required_argument, NULL, 'a' },
        { "verdict", required_argument, NULL, OPT_VERDICT },
        { "locks", no_argument, NULL, OPT_LOCKS },
        { "config", required_argument, NULL, 'c' },
        { NULL, 0, NULL, 0 },
    };
    uint64_t now = now_ms();
    int opt;

    ctl_getopt_reset();
    while ((opt = ctl_getopt(ctl, cmd, argc, argv, ":" CTL_SHORTOPTS "r:a:c:", longopts)) > 0) {
        switch (opt) {
        case OPT_SINCE:
        case OPT_UNTIL:
            if (dlog_query_time(optarg, now, opt == OPT_SINCE ? &run->f.since_ms
                                                               : &run->f.until_ms) < 0)
                return ctl_usage(cmd, "--%s: '%s' is not a time (2026-11-28T12:00:00Z, "
                                 "\"2026-11-28 12:00\", @UNIXSECONDS, -30s/-15m/-2h/-7d)",
                                 opt == OPT_SINCE ? "since" : "until", optarg);
            if (opt == OPT_UNTIL && run->f.until_ms == 0)
                run->f.until_ms = 1;    /* before the epoch: nothing, not "no bound" */
            break;
        case 'r':
            if (!optarg[0])
                return ctl_usage(cmd, "--rule: an empty rule id");
            run->f.rule = optarg;
            break;
        case 'a':
            run->f.actor = optarg;
            break;
        case OPT_VERDICT:
            if (dlog_query_verdict_parse(optarg, &run->f.verdict) < 0)
                return ctl_usage(cmd, "--verdict: '%s' is not allowed, denied or error",
                                 optarg);
            break;
        case OPT_LOCKS:
            run->locks_mode = true;
            break;
        case 'c':
            *ret_config = optarg;
            break;
        default:
            return ctl_usage(cmd, "unknown option");
        }
    }
    if (opt < 0)
        return opt == CTL_GETOPT_HELP ? -1 : CTL_EXIT_USAGE;
    if (run->f.until_ms && run->f.until_ms <= run->f.since_ms)
        return ctl_usage(cmd, "--until is not after --since: nothing to show");
    if (run->locks_mode && run->f.verdict != DLOG_QUERY_ANY)
        return ctl_usage(cmd, "--verdict and --locks do not go together");
    if (*ret_config && optind < argc)
        return ctl_usage(cmd, "-c/--config names the log directory: give it or PATHs, "
                         "not both");
    run->json = ctl->json;
    return 0;
}

int cmd_log(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    struct log_run run = { 0 };
    const char *config = NULL;
    char dir[LOG_PATH_MAX];
    int r;

    r = log_opts(ctl, cmd, argc, argv, &run, &config);
    if (r != 0)
        return r > 0 ? r : CTL_EXIT_OK;
    snprintf(dir, sizeof(dir), "%s", CONFIG_DLOG_DIRECTORY);
    if (config) {
        r = log_config_dir(config, dir, sizeof(dir));
        if (r > 0)
            return r;
    }
    run.rules = dlog_query_rules_new();
    if (run.locks_mode)
        run.locks = dlog_locks_new(run.f.rule, run.f.actor);
    if (!run.rules || (run.locks_mode && !run.locks)) {
        r = ctl_fail(CTL_EXIT_FAILURE, "out of memory");
        goto out;
    }
    if (optind >= argc)
        log_path(&run, dir);
    for (int i = optind; i < argc && !run.stop; i++)
        log_path(&run, argv[i]);
    if (run.locks_mode && !run.stop) {
        const struct dlog_locks_period *p;
        size_t n = dlog_locks_finish(run.locks, run.last_ms, &p);

        if (dlog_locks_dropped(run.locks)) {
            fprintf(stderr, "divvyctl: %" PRIu64 " lockout answers not followed (past %u "
                    "actors at once, %u lock periods or %u MiB of actors): narrow with --rule, "
                    "--actor or fewer files\n", dlog_locks_dropped(run.locks),
                    DLOG_LOCKS_ACTORS_MAX, DLOG_LOCKS_PERIODS_MAX, DLOG_LOCKS_BYTES_MAX >> 20);
            run.skipped = true;
        }
        if (log_print_locks(run.rules, p, n, run.f.since_ms, run.f.until_ms, run.json) < 0) {
            ctl_fail(CTL_EXIT_FAILURE, "writing output: %s", strerror(errno));
            run.failed = true;
        }
    }
    r = run.failed ? CTL_EXIT_FAILURE : run.skipped ? CTL_EXIT_NO : CTL_EXIT_OK;
out:
    dlog_locks_free(run.locks);
    dlog_query_rules_free(run.rules);
    return r;
}
