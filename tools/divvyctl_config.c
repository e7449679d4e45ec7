/* SPDX-License-Identifier: MIT */
/*
 * divvyctl check and convert: the config commands, which need no daemon.
 * check loads each file with the daemon's own loader (server/config.c: the
 * format follows the extension) and compiles its rules, so it finds exactly
 * what divvyd --check and a reload would reject, every problem as
 * file:line: reason.  convert writes a divvy .ini/.json (or any config) as a
 * native divvy.conf with config_write_libconfig(), and loads the result back
 * before it is kept, so it never leaves a file divvyd would refuse.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "diag.h"
#include "divvyctl.h"
#include "fdio.h"
#include "rules.h"

const char ctl_help_check[] =
    "Usage: divvyctl check [OPTIONS] FILE...\n"
    "\n"
    "Validates each config FILE without a daemon, with divvyd's own loader and\n"
    "rule compiler: the format follows the name (.ini divvy INI, .json divvy\n"
    "JSON, anything else divvy.conf).  Prints every problem as\n"
    "\n"
    "  FILE:LINE: reason\n"
    "\n"
    "(up to 32 per file, then how many more), or `FILE: OK, N rules`.  Problems\n"
    "are syntax errors, unknown settings (a typo is never ignored), values out of\n"
    "range, repeated keys or labels, a missing or misplaced default rule, and\n"
    "rules that an earlier stop rule makes unreachable; divvy.conf(5) describes\n"
    "them.  A file that passes is one divvyd will load (server settings such as\n"
    "a listen address are only checked for form); after its OK line come the\n"
    "warnings divvyd would log when loading it, as `FILE:LINE: warning: text`\n"
    "(a login rule that runs strict under store.mode \"lease\", Redis configured\n"
    "while every rule is local, an actor key the rule's match does not name -\n"
    "with \"did you mean\" when one is close - and an actor on a rule that keeps\n"
    "no counter).\n"
    "\n"
    "Options:\n"
    "  -j, --json          {\"files\": [{\"file\": ..., \"ok\": false, \"rules\": 0,\n"
    "                      \"problems\": [{\"file\": ..., \"line\": 17, \"message\":\n"
    "                      ...}], \"more_problems\": 0, \"warnings\": [...]}]}\n"
    "  -h, --help          print this help\n"
    "\n"
    "Exit status: 0 every file is valid, 1 at least one has problems (or cannot\n"
    "be read), 2 usage.\n"
    "\n"
    "Example:\n"
    "  divvyctl check /etc/divvy/divvy.conf.new && mv /etc/divvy/divvy.conf.new \\\n"
    "      /etc/divvy/divvy.conf && divvyctl reload\n";

const char ctl_help_convert[] =
    "Usage: divvyctl convert [OPTIONS] FILE [-o OUT]\n"
    "\n"
    "Rewrites a config as a native divvy.conf (libconfig syntax): typically one\n"
    "of Button divvy's .ini or .json configs, which divvyd also reads unchanged.\n"
    "The rules keep their order and meaning (divvy's camelCase settings become\n"
    "credit_limit, reset_seconds, actor, match_policy, ...; only settings that\n"
    "differ from the defaults are written).  The result is loaded back and\n"
    "compared before it is written, so OUT is always a config divvyd loads with\n"
    "the same rules (same ids, so counters carry over).  Comments of the INI or\n"
    "JSON file other than `comment` settings are not kept.\n"
    "\n"
    "FILE must be valid: its problems are printed as by check, and nothing is\n"
    "written.  A match key that is empty or contains '=' (possible in divvy\n"
    "JSON) has no divvy.conf spelling: such a config is refused.\n"
    "\n"
    "Options:\n"
    "  -o, --output OUT    write to OUT (atomically: a temporary file renamed\n"
    "                      over it) instead of standard output\n"
    "  -h, --help          print this help\n"
    "\n"
    "Exit status: 0 converted, 1 FILE has problems or cannot be converted, 2 usage,\n"
    "5 OUT cannot be written.\n"
    "\n"
    "Example:\n"
    "  divvyctl convert /etc/divvy/divvy.ini -o /etc/divvy/divvy.conf\n";

/* Loads and compiles @path; @reterr gets the problems, @ret_notes (NULL:
 * none wanted) what divvyd would log as warnings (config_fleet_notes()). */
static int ctl_load(const char *path, struct config **ret, size_t *ret_rules,
                    struct diag *ret_notes, struct diag *reterr)
{
    struct config *cfg = NULL;
    struct rules *rules = NULL;
    int r;

    r = config_load(path, &cfg, reterr);
    if (r < 0)
        goto out;
    r = rules_compile(&cfg->rules, 0, &rules, reterr);
    if (r < 0)
        goto out;
    *ret_rules = rules_count(rules);
    if (ret_notes)
        config_fleet_notes(cfg, rules, ret_notes);
    if (ret) {
        *ret = cfg;
        cfg = NULL;
    }
out:
    rules_free(rules);
    config_free(cfg);
    return r;
}

static void ctl_print_diag(FILE *f, const struct diag *d, const char *path, int r)
{
    char msg[DIAG_FILE_MAX + DIAG_MSG_MAX + 32];

    for (size_t i = 0; i < d->n; i++) {
        diag_format(d, i, msg, sizeof(msg));
        fprintf(f, "%s\n", msg);
    }
    if (d->dropped)
        fprintf(f, "%s: ... and %zu more problem%s\n", path, d->dropped,
                d->dropped == 1 ? "" : "s");
    if (d->n == 0)
        fprintf(f, "%s: %s\n", path, strerror(-r));
}

static json_t *ctl_json_diag(const struct diag *d, const char *path, int r)
{
    json_t *arr = json_array();

    for (size_t i = 0; arr && i < d->n; i++)
        json_array_append_new(arr, json_pack("{s:s, s:i, s:s}", "file", d->e[i].file, "line",
                                             (int)d->e[i].line, "message", d->e[i].msg));
    if (arr && d->n == 0 && r < 0)
        json_array_append_new(arr, json_pack("{s:s, s:i, s:s}", "file", path, "line", 0,
                                             "message", strerror(-r)));
    return arr;
}

int cmd_check(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    struct diag *d = NULL, *notes = NULL;
    json_t *files = NULL;
    int first, status = CTL_EXIT_OK;

    first = ctl_simple_opts(ctl, cmd, argc, argv);
    if (first < 0)
        return ctl_opts_exit(first);
    if (first >= argc)
        return ctl_usage(cmd, "needs at least one FILE");
    d = malloc(sizeof(*d));
    notes = malloc(sizeof(*notes));
    if (!d || !notes) {
        free(d);
        free(notes);
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    }
    if (ctl->json)
        files = json_array();
    for (int i = optind; i < argc; i++) {
        size_t n_rules = 0;
        int r;

        diag_init(d);
        diag_init(notes);
        r = ctl_load(argv[i], NULL, &n_rules, notes, d);
        if (r < 0)
            status = CTL_EXIT_NO;
        if (files) {
            json_array_append_new(files, json_pack("{s:s, s:b, s:i, s:o, s:i, s:o}", "file",
                                                   argv[i], "ok", r >= 0, "rules",
                                                   (int)n_rules, "problems",
                                                   ctl_json_diag(d, argv[i], r),
                                                   "more_problems", (int)d->dropped,
                                                   "warnings", ctl_json_diag(notes, argv[i],
                                                                             0)));
        } else if (r < 0) {
            ctl_print_diag(stdout, d, argv[i], r);
        } else {
            printf("%s: OK, %zu rules\n", argv[i], n_rules);
            /* As compilers print them, for editors: FILE:LINE: warning: text. */
            for (size_t k = 0; k < notes->n; k++) {
                char line[DIAG_FILE_MAX + DIAG_MSG_MAX + 32];

                diag_format_as(notes, k, "warning: ", line, sizeof(line));
                printf("%s\n", line);
            }
        }
    }
    free(d);
    free(notes);
    if (files && ctl_json_print(json_pack("{s:o}", "files", files)) != CTL_EXIT_OK)
        return CTL_EXIT_FAILURE;
    return status;
}

/* Rule @i of @ra and @rb means the same: id, match set, actor, every setting. */
static bool ctl_same_rule(const struct rules *ra, const struct rules *rb, uint32_t i)
{
    char ma[PROTO_LINE_MAX], mb[PROTO_LINE_MAX], aa[PROTO_LINE_MAX], ab[PROTO_LINE_MAX];
    struct rules_rule x, y;

    if (rules_get(ra, i, &x) < 0 || rules_get(rb, i, &y) < 0 ||
        rules_describe(ra, i, ma, sizeof(ma)) < 0 || rules_describe(rb, i, mb, sizeof(mb)) < 0 ||
        rules_actor_keys(ra, i, aa, sizeof(aa)) < 0 || rules_actor_keys(rb, i, ab, sizeof(ab)) < 0)
        return false;
    return x.id == y.id && strcmp(x.id_str, y.id_str) == 0 && strcmp(x.label, y.label) == 0 &&
           strcmp(x.comment, y.comment) == 0 && strcmp(ma, mb) == 0 && strcmp(aa, ab) == 0 &&
           x.credit_limit == y.credit_limit && x.reset_seconds == y.reset_seconds &&
           x.refill_amount == y.refill_amount && x.refill_seconds == y.refill_seconds &&
           x.max_actors == y.max_actors && x.max_debit == y.max_debit &&
           x.prefix4 == y.prefix4 && x.prefix6 == y.prefix6 &&
           x.strict == y.strict && x.fast_path == y.fast_path && x.is_default == y.is_default &&
           x.policy == y.policy && x.algo == y.algo && x.source == y.source &&
           x.store == y.store && x.when_full == y.when_full && x.reset_ms == y.reset_ms &&
           x.refill_ms == y.refill_ms && x.continuous == y.continuous &&
           memcmp(x.lock, y.lock, sizeof(*x.lock)) == 0;
}

/* The converted config compiles to the same rules, in the same order. */
static bool ctl_same_rules(const struct config *a, const struct config *b)
{
    struct rules *ra = NULL, *rb = NULL;
    bool same = false;

    if (rules_compile(&a->rules, 0, &ra, NULL) < 0 || rules_compile(&b->rules, 0, &rb, NULL) < 0)
        goto out;
    if (rules_count(ra) != rules_count(rb))
        goto out;
    for (uint32_t i = 0; i < rules_count(ra); i++) {
        if (!ctl_same_rule(ra, rb, i))
            goto out;
    }
    same = true;
out:
    rules_free(ra);
    rules_free(rb);
    return same;
}

/* Writes @text to a temporary file beside @out; returns its fd and name. */
static int ctl_tmp_beside(const char *out, char *tmp, size_t size)
{
    const char *slash = strrchr(out, '/');
    int n, fd;

    if (slash)
        n = snprintf(tmp, size, "%.*s/.%s.XXXXXX", (int)(slash - out), out, slash + 1);
    else
        n = snprintf(tmp, size, ".%s.XXXXXX", out);
    if (n < 0 || (size_t)n >= size)
        return -ENAMETOOLONG;
    fd = mkostemp(tmp, O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int cmd_convert(struct ctl *ctl, const struct ctl_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        CTL_LONGOPTS,
        { "output", required_argument, NULL, 'o' },
        { NULL, 0, NULL, 0 },
    };
    char tmp[PATH_MAX] = "", *text = NULL;
    const char *in, *out = NULL;
    struct config *cfg = NULL, *again = NULL;
    struct diag *d = NULL;
    size_t len = 0, n_rules = 0;
    FILE *mem = NULL;
    int opt, r, fd = -1, status;

    ctl_getopt_reset();
    while ((opt = ctl_getopt(ctl, cmd, argc, argv, ":" CTL_SHORTOPTS "o:", longopts)) > 0) {
        if (opt != 'o')
            return ctl_usage(cmd, "unknown option");
        out = optarg;
    }
    if (opt < 0)
        return ctl_opts_exit(opt);
    if (ctl_no_json(ctl, cmd))
        return CTL_EXIT_USAGE;
    if (optind + 1 != argc)
        return ctl_usage(cmd, "needs exactly one FILE");
    in = argv[optind];

    d = malloc(sizeof(*d));
    if (!d)
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    diag_init(d);
    r = ctl_load(in, &cfg, &n_rules, NULL, d);
    if (r < 0) {
        ctl_print_diag(stderr, d, in, r);
        status = ctl_fail(CTL_EXIT_NO, "%s: not converted: fix the problems above", in);
        goto out;
    }
    mem = open_memstream(&text, &len);
    if (!mem) {
        status = ctl_fail(CTL_EXIT_FAILURE, "out of memory");
        goto out;
    }
    fprintf(mem, "# Converted from %s.\n", in);
    r = config_write_libconfig(cfg, mem);
    if (fclose(mem) == EOF && r >= 0)
        r = -ENOMEM;
    mem = NULL;
    if (r == -EINVAL) {
        status = ctl_fail(CTL_EXIT_NO, "%s: cannot convert: a match key is empty or contains "
                          "'=', which divvy.conf cannot spell", in);
        goto out;
    }
    if (r < 0) {
        status = ctl_fail(CTL_EXIT_FAILURE, "%s: converting: %s", in, strerror(-r));
        goto out;
    }

    /* Load the result back from a file (the loader picks the format by name)
     * before anyone sees it. */
    if (out) {
        fd = ctl_tmp_beside(out, tmp, sizeof(tmp));
        if (fd < 0) {
            tmp[0] = '\0';
            status = ctl_fail(CTL_EXIT_FAILURE, "%s: cannot create a file beside it: %s", out,
                              strerror(-fd));
            goto out;
        }
    } else {
        const char *dir = getenv("TMPDIR");

        snprintf(tmp, sizeof(tmp), "%s/divvyctl-convert.XXXXXX", dir && dir[0] ? dir : "/tmp");
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0) {
            tmp[0] = '\0';
            status = ctl_fail(CTL_EXIT_FAILURE, "cannot create a temporary file: %s",
                              strerror(errno));
            goto out;
        }
    }
    r = fdio_write_all(fd, text, len);
    if (r == 0 && out && fsync(fd) < 0)
        r = -errno;
    if (r == 0 && fchmod(fd, 0644) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    fd = -1;
    if (r < 0) {
        status = ctl_fail(CTL_EXIT_FAILURE, "%s: %s", out ? out : tmp, strerror(-r));
        goto out;
    }
    diag_init(d);
    r = config_load(tmp, &again, d);
    if (r < 0 || !ctl_same_rules(cfg, again)) {
        if (r < 0)
            ctl_print_diag(stderr, d, tmp, r);
        status = ctl_fail(CTL_EXIT_FAILURE, "%s: the converted config does not load back to "
                          "the same rules (a divvyctl bug; please report it)", in);
        goto out;
    }
    if (out) {
        if (rename(tmp, out) < 0) {
            status = ctl_fail(CTL_EXIT_FAILURE, "%s: %s", out, strerror(errno));
            goto out;
        }
        tmp[0] = '\0';
        fprintf(stderr, "divvyctl: %s: %zu rules written to %s\n", in, n_rules, out);
    } else if (fwrite(text, 1, len, stdout) != len) {
        status = ctl_fail(CTL_EXIT_FAILURE, "writing output: %s", strerror(errno));
        goto out;
    }
    status = CTL_EXIT_OK;
out:
    if (fd >= 0)
        close(fd);
    if (tmp[0])
        unlink(tmp);
    if (mem)
        fclose(mem);
    free(text);
    config_free(again);
    config_free(cfg);
    free(d);
    return status;
}
