/* SPDX-License-Identifier: MIT */
/*
 * pam_divvy: a PAM module (auth and account) that throttles logins like
 * pam_faillock, with the limits in divvyd's rules (DESIGN §7, docs/pam.md).
 * Three modes reach the same counters, because every request carries
 * event=authfail: preauth PEEKs and refuses before the password prompt when
 * no credit is left, authfail TAKEs one credit after a failed password,
 * authsucc RESETs the counters after a good one (an admin verb, accepted
 * from root).  The module owns nothing between calls: each call parses its
 * arguments onto the stack, opens one libdivvy handle on the Unix socket,
 * asks, closes it.  It logs only through pam_syslog(), and a daemon that is
 * down or slow costs at most timeout_ms, after which fail_open (default) or
 * fail_closed decides.  A rule that answers preauth with a delay (a refusal
 * that leaves credit: algorithm "lockout") is waited out here, at most
 * max_delay seconds per call; a lock is told once per PAM handle and ends
 * the conversation (PAM_MAXTRIES).  Unknown user names can be counted per
 * source only (unknown_users=source) and non-local users left alone
 * (local_users_only), as pam_faillock does (docs/pam.md).
 */
#include <errno.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define PAM_SM_AUTH
#define PAM_SM_ACCOUNT
#include <security/pam_ext.h>
#include <security/pam_modules.h>
#include <security/pam_modutil.h>

#include "divvy.h"

#define PD_DEFAULT_ADDRESS  "unix:/run/divvy/divvy.sock"
#define PD_ADDRESS_MAX      128     /* "unix:" + a sun_path (108) fits */
#define PD_TIMEOUT_DEFAULT  1000
#define PD_TIMEOUT_MAX      60000
#define PD_VALUE_MAX        256     /* bytes kept of each PAM item (LOGIN_NAME_MAX) */
#define PD_EVENT            "authfail"
#define PD_DELAY_DEFAULT    30      /* max_delay=, seconds */
#define PD_DELAY_MAX        600
#define PD_DELAY_ROUNDS     4       /* PEEKs in one preauth at most (a delay renewed meanwhile) */
/* pam_set_data() name: a lock was told on this handle (docs/pam.md "Messages"). */
#define PD_DATA_TOLD        "pam_divvy_told"

/* -fvisibility=hidden hides everything else; pam/pam_divvy.map lists these. */
#define PD_EXPORT __attribute__((visibility("default")))

enum pd_mode { PD_MODE_NONE = 0, PD_MODE_PREAUTH, PD_MODE_AUTHFAIL, PD_MODE_AUTHSUCC };
enum pd_phase { PD_PHASE_AUTH = 0, PD_PHASE_ACCOUNT };

/* The PAM items a request may carry, in the order they are sent. */
enum pd_field {
    PD_FIELD_SERVICE = 0,
    PD_FIELD_USER,
    PD_FIELD_RHOST,
    PD_FIELD_TTY,
    PD_FIELD_RUSER,
    PD_FIELD_N,
};

static const struct {
    const char *name;
    int item;
} pd_fields[PD_FIELD_N] = {
    [PD_FIELD_SERVICE] = { "service", PAM_SERVICE },
    [PD_FIELD_USER] = { "user", PAM_USER },
    [PD_FIELD_RHOST] = { "rhost", PAM_RHOST },
    [PD_FIELD_TTY] = { "tty", PAM_TTY },
    [PD_FIELD_RUSER] = { "ruser", PAM_RUSER },
};

#define PD_FIELDS_DEFAULT ((1u << PD_FIELD_SERVICE) | (1u << PD_FIELD_USER) | \
                           (1u << PD_FIELD_RHOST) | (1u << PD_FIELD_TTY))

struct pd_args {
    enum pd_mode mode;
    char address[PD_ADDRESS_MAX];
    int timeout_ms;
    unsigned fields;            /* bit set of enum pd_field */
    bool fail_closed;
    bool audit;
    bool debug;
    bool silent;
    bool bad_address;           /* socket= was unusable: treated as an outage */
    bool local_only;            /* local_users_only: users not in /etc/passwd are ignored */
    bool unknown_by_source;     /* unknown_users=source: no user= for unknown names */
    int max_delay;              /* seconds preauth may wait out delays, 0..PD_DELAY_MAX */
};

/* A request: event=authfail plus the chosen PAM items that are set. */
struct pd_req {
    struct divvy_kv kv[PD_FIELD_N + 2];
    size_t n;
    char value[PD_FIELD_N][PD_VALUE_MAX];
    const char *user;           /* points into value[], or "" */
    const char *rhost;
    bool unknown;               /* the user has no passwd entry (sent as known=no) */
};

static const char *pd_mode_name(enum pd_mode mode)
{
    switch (mode) {
    case PD_MODE_PREAUTH:
        return "preauth";
    case PD_MODE_AUTHFAIL:
        return "authfail";
    case PD_MODE_AUTHSUCC:
        return "authsucc";
    default:
        return "none";
    }
}

/* Parses "a,b,c" into a field bit set; unknown names are logged and skipped. */
static unsigned pd_parse_fields(pam_handle_t *pamh, const char *list)
{
    unsigned set = 0;

    while (*list) {
        size_t len = strcspn(list, ",");
        size_t i;

        for (i = 0; i < PD_FIELD_N; i++) {
            if (strlen(pd_fields[i].name) == len && strncmp(pd_fields[i].name, list, len) == 0)
                break;
        }
        if (i < PD_FIELD_N)
            set |= 1u << i;
        else if (len > 0)
            pam_syslog(pamh, LOG_ERR, "fields=: unknown field '%.*s' (known: service, user, "
                       "rhost, tty, ruser)", (int)len, list);
        list += len;
        if (*list == ',')
            list++;
    }
    return set;
}

/* An integer argument NAME=@text in [@min, @max], else @def (logged). */
static int pd_parse_int(pam_handle_t *pamh, const char *name, const char *text, int min, int max,
                        int def)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) {
        pam_syslog(pamh, LOG_ERR, "%s=%s: not an integer %d..%d; using %d", name, text, min,
                   max, def);
        return def;
    }
    return (int)v;
}

/* socket= takes "unix:PATH" or an absolute PATH.  TCP is refused: divvyd never
 * treats a TCP peer as privileged, so the login rules would not apply. */
static void pd_parse_address(pam_handle_t *pamh, const char *text, struct pd_args *args)
{
    int n;

    if (strncmp(text, "unix:/", 6) == 0)
        n = snprintf(args->address, sizeof(args->address), "%s", text);
    else if (text[0] == '/')
        n = snprintf(args->address, sizeof(args->address), "unix:%s", text);
    else
        n = -1;
    if (n < 0 || (size_t)n >= sizeof(args->address)) {
        pam_syslog(pamh, LOG_ERR, "socket=%s: must be unix:/PATH or /PATH (under %zu bytes); "
                   "TCP is never privileged", text, sizeof(args->address) - 5);
        args->bad_address = true;
    }
}

/* Unknown arguments are logged and ignored, as every Linux-PAM module does. */
static void pd_parse_args(pam_handle_t *pamh, int flags, int argc, const char **argv,
                          struct pd_args *args)
{
    memset(args, 0, sizeof(*args));
    snprintf(args->address, sizeof(args->address), "%s", PD_DEFAULT_ADDRESS);
    args->timeout_ms = PD_TIMEOUT_DEFAULT;
    args->max_delay = PD_DELAY_DEFAULT;
    args->fields = PD_FIELDS_DEFAULT;
    args->silent = (flags & PAM_SILENT) != 0;

    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];

        if (strcmp(a, "preauth") == 0)
            args->mode = PD_MODE_PREAUTH;
        else if (strcmp(a, "authfail") == 0)
            args->mode = PD_MODE_AUTHFAIL;
        else if (strcmp(a, "authsucc") == 0)
            args->mode = PD_MODE_AUTHSUCC;
        else if (strncmp(a, "socket=", 7) == 0)
            pd_parse_address(pamh, a + 7, args);
        else if (strncmp(a, "timeout_ms=", 11) == 0)
            args->timeout_ms = pd_parse_int(pamh, "timeout_ms", a + 11, 1, PD_TIMEOUT_MAX,
                                            PD_TIMEOUT_DEFAULT);
        else if (strncmp(a, "max_delay=", 10) == 0)
            args->max_delay = pd_parse_int(pamh, "max_delay", a + 10, 0, PD_DELAY_MAX,
                                           PD_DELAY_DEFAULT);
        else if (strcmp(a, "local_users_only") == 0)
            args->local_only = true;
        else if (strcmp(a, "unknown_users=source") == 0)
            args->unknown_by_source = true;
        else if (strcmp(a, "unknown_users=name") == 0)
            args->unknown_by_source = false;
        else if (strncmp(a, "fields=", 7) == 0)
            args->fields = pd_parse_fields(pamh, a + 7);
        else if (strcmp(a, "fail_open") == 0)
            args->fail_closed = false;
        else if (strcmp(a, "fail_closed") == 0)
            args->fail_closed = true;
        else if (strcmp(a, "audit") == 0)
            args->audit = true;
        else if (strcmp(a, "debug") == 0)
            args->debug = true;
        else if (strcmp(a, "silent") == 0)
            args->silent = true;
        else
            pam_syslog(pamh, LOG_ERR, "unknown option: %s", a);
    }
}

/* Copies @s into @buf, cut at PD_VALUE_MAX - 1 bytes, with '_' for what the
 * protocol cannot carry ('"', CR, LF, as divvy's own clients do) and for the
 * other control bytes, which user names chosen by an attacker would
 * otherwise put into the log lines. */
static void pd_copy_value(char buf[PD_VALUE_MAX], const char *s)
{
    size_t i;

    for (i = 0; s[i] && i < PD_VALUE_MAX - 1; i++) {
        unsigned char c = (unsigned char)s[i];

        buf[i] = c == '"' || c < 0x20 || c == 0x7f ? '_' : (char)c;
    }
    buf[i] = '\0';
}

/*
 * Fills @req from the PAM items.  A field that is unset or empty is left out
 * of the request (so a rule can tell a remote login by `rhost = "*"`).
 * Returns PAM_SUCCESS or pam_get_user()'s error.
 */
static int pd_build_request(pam_handle_t *pamh, const struct pd_args *args, struct pd_req *req)
{
    const char *user = NULL;
    int rv;

    memset(req, 0, sizeof(*req));
    req->user = "";
    req->rhost = "";
    req->kv[req->n].key = "event";
    req->kv[req->n].value = PD_EVENT;
    req->n++;

    /* In preauth the user may not be known yet: pam_get_user() asks. */
    rv = pam_get_user(pamh, &user, NULL);
    if (rv != PAM_SUCCESS) {
        pam_syslog(pamh, LOG_ERR, "cannot get the user name: %s", pam_strerror(pamh, rv));
        return rv == PAM_CONV_AGAIN ? PAM_INCOMPLETE : rv;
    }
    /* As pam_faillock: a user not in /etc/passwd (NSS, LDAP, made up) is none of ours. */
    if (args->local_only && pam_modutil_check_user_in_passwd(pamh, user, NULL) != PAM_SUCCESS)
        return PAM_IGNORE;
    /* Every unknown name from one source on the source's counters, none of its own: a
     * spray of made-up names takes no slot per name, and is throttled as the source. */
    if (args->unknown_by_source && pam_modutil_getpwnam(pamh, user) == NULL) {
        req->unknown = true;
        req->kv[req->n].key = "known";
        req->kv[req->n].value = "no";
        req->n++;
    }
    for (unsigned f = 0; f < PD_FIELD_N; f++) {
        const void *item = NULL;

        if (!(args->fields & (1u << f)) && f != PD_FIELD_USER && f != PD_FIELD_RHOST)
            continue;
        if (f == PD_FIELD_USER)
            item = user;
        else if (pam_get_item(pamh, pd_fields[f].item, &item) != PAM_SUCCESS)
            item = NULL;
        if (!item || !*(const char *)item)
            continue;
        pd_copy_value(req->value[f], item);
        /* user and rhost are also kept for log lines, sent or not. */
        if (f == PD_FIELD_USER)
            req->user = req->value[f];
        else if (f == PD_FIELD_RHOST)
            req->rhost = req->value[f];
        if (!(args->fields & (1u << f)) || (f == PD_FIELD_USER && req->unknown))
            continue;
        req->kv[req->n].key = pd_fields[f].name;
        req->kv[req->n].value = req->value[f];
        req->n++;
    }
    return PAM_SUCCESS;
}

/* Asks divvyd; 0 with *res filled, or -errno with @errbuf saying why. */
static int pd_ask(const struct pd_args *args, const struct pd_req *req, struct divvy_result *res,
                  char *errbuf, size_t errsize)
{
    struct divvy *client = NULL;
    int connect_ms, request_ms;
    int r;

    errbuf[0] = '\0';
    if (args->bad_address) {
        snprintf(errbuf, errsize, "socket= is not a usable Unix socket address");
        return -EINVAL;
    }
    /* The daemon's login rules are privileged: asked by anyone but root they
     * would not apply (divvyd matches them for root and its admin group only). */
    if (geteuid() != 0) {
        snprintf(errbuf, errsize, "pam_divvy runs as uid %u, not root", (unsigned)geteuid());
        return -EPERM;
    }
    /* timeout_ms bounds connect and reply together. */
    connect_ms = args->timeout_ms / 2 > 0 ? args->timeout_ms / 2 : 1;
    request_ms = args->timeout_ms - connect_ms > 0 ? args->timeout_ms - connect_ms : 1;

    /* Never NULL: the environment of a setuid caller (su, sudo) is the user's. */
    r = divvy_open(args->address, DIVVY_SOCKET_ONLY, &client);
    if (r < 0) {
        snprintf(errbuf, errsize, "%s", strerror(-r));
        goto out;
    }
    r = divvy_set_timeouts(client, connect_ms, request_ms);
    if (r >= 0) {
        switch (args->mode) {
        case PD_MODE_AUTHFAIL:
            r = divvy_take(client, 1, req->kv, req->n, res);
            break;
        case PD_MODE_AUTHSUCC:
            r = divvy_reset(client, req->kv, req->n, res);
            break;
        default:
            r = divvy_peek(client, req->kv, req->n, res);
            break;
        }
    }
    if (r < 0) {
        /* libdivvy's message names the step and the cause; else strerror. */
        const char *msg = divvy_errmsg(client);

        snprintf(errbuf, errsize, "%s", msg[0] ? msg : strerror(-r));
    }
out:
    divvy_close(client);
    return r;
}

/* @secs as a person reads it, rounded up: "40 seconds", "15 minutes", "3 hours", "2 days". */
static void pd_duration(uint64_t secs, char *buf, size_t size)
{
    static const struct {
        uint64_t unit, upto;        /* this unit while secs <= upto */
        const char *name;
    } units[] = {
        { 1, 99, "second" }, { 60, 120 * 60, "minute" }, { 3600, 48 * 3600, "hour" },
        { 86400, UINT64_MAX, "day" },
    };
    size_t i = 0;
    uint64_t n;

    while (secs > units[i].upto)
        i++;
    n = secs / units[i].unit + (secs % units[i].unit != 0);
    snprintf(buf, size, "%llu %s%s", (unsigned long long)n, units[i].name, n == 1 ? "" : "s");
}

/* What a lock tells the user through the conversation: once per PAM handle (sshd and login
 * call pam_authenticate() on one handle for each password they ask). */
static void pd_tell_locked(pam_handle_t *pamh, const struct pd_args *args,
                           const struct pd_req *req, const struct divvy_result *res)
{
    static const char told[] = PD_DATA_TOLD;
    const void *was = NULL;
    char when[48];

    if (args->silent || pam_get_data(pamh, PD_DATA_TOLD, &was) == PAM_SUCCESS)
        return;
    /* The data is a constant: nothing to free (cleanup NULL). */
    pam_set_data(pamh, PD_DATA_TOLD, (void *)(uintptr_t)told, NULL);
    if (res->reset_seconds == 0) {
        pam_error(pamh, "Too many failed login attempts: logins are refused.");
        return;
    }
    pd_duration(res->reset_seconds, when, sizeof(when));
    pam_error(pamh, "Too many failed login attempts: locked for %s%s.", when,
              req->rhost[0] ? " from this address" : "");
}

/* Sleeps @secs, resumed after signals: a ramping delay waited out. */
static void pd_sleep(unsigned secs)
{
    struct timespec left = { .tv_sec = (time_t)secs, .tv_nsec = 0 };

    while (nanosleep(&left, &left) < 0 && errno == EINTR)
        ;
}

/*
 * preauth and account: asks until divvyd answers with no delay to wait out.  A refusal with
 * credit left is a delay (algorithm "lockout", docs/rules.md): in the auth phase it is slept
 * here, max_delay seconds per call at most, then asked again; a delay longer than what is left
 * of max_delay refuses (*ret_delay set).  In the account phase a delay is not a refusal.
 * 0 with *res the last answer, or pd_ask()'s -errno.
 */
static int pd_ask_waiting(pam_handle_t *pamh, const struct pd_args *args, enum pd_phase phase,
                          const struct pd_req *req, struct divvy_result *res, char *why,
                          size_t why_size, bool *ret_delay)
{
    unsigned waited = 0;
    int r = 0;

    *ret_delay = false;
    for (int round = 0; round < PD_DELAY_ROUNDS; round++) {
        unsigned wait;

        r = pd_ask(args, req, res, why, why_size);
        if (r < 0 || res->allowed || res->credit == 0)
            return r;
        if (phase == PD_PHASE_ACCOUNT) {
            res->allowed = true;
            return 0;
        }
        /* eval rounds ms to the nearest second: a delay under 500 ms reads 0. */
        wait = res->reset_seconds > 0 ? (unsigned)res->reset_seconds : 1;
        if (res->reset_seconds > PD_DELAY_MAX || wait > (unsigned)args->max_delay - waited)
            break;
        if (args->debug)
            pam_syslog(pamh, LOG_DEBUG, "preauth: user '%s' from '%s': waiting %u s "
                       "(rule %s: a delay after failures)", req->user, req->rhost, wait,
                       res->rule);
        pd_sleep(wait);
        waited += wait;
    }
    *ret_delay = true;
    return r;
}

/*
 * divvyd could not answer (-errno @r, @why): fail_open or fail_closed
 * decides.  -ENOSPC is divvyd's "ERR no-counter": it runs, but a login rule
 * found no free counter for this login (its privileged table full, or the
 * rule at max_actors), so the login cannot be throttled: said so, at LOG_ERR,
 * because the operator must size the table (docs/pam.md "Sizing").
 */
static int pd_outage(pam_handle_t *pamh, const struct pd_args *args, enum pd_phase phase,
                     const struct pd_req *req, int r, const char *why)
{
    int rv;

    if (args->mode == PD_MODE_AUTHFAIL) {
        /* The password already failed: nothing to open or close. */
        rv = PAM_AUTH_ERR;
    } else if (!args->fail_closed) {
        rv = PAM_SUCCESS;
    } else {
        rv = phase == PD_PHASE_ACCOUNT ? PAM_PERM_DENIED : PAM_AUTHINFO_UNAVAIL;
    }
    pam_syslog(pamh, LOG_ERR, "%s for user '%s' from '%s': divvyd at %s: %s%s; %s",
               pd_mode_name(args->mode), req->user, req->rhost, args->address, why,
               r == -ENOSPC ? " (no free counter for a login rule: this login cannot be "
                              "throttled; raise table.privileged_slots or the rule's "
                              "max_actors)" : "",
               args->mode == PD_MODE_AUTHFAIL ? "failure not counted"
               : args->fail_closed ? "fail_closed: refusing" : "fail_open: continuing");
    return rv;
}

static int pd_run(pam_handle_t *pamh, int flags, int argc, const char **argv,
                  enum pd_phase phase)
{
    struct divvy_result res = { .size = sizeof(res) };
    struct pd_args args;
    struct pd_req req;
    char why[512], when[48];
    bool delayed = false;
    int rv, r;

    pd_parse_args(pamh, flags, argc, argv, &args);
    if (phase == PD_PHASE_ACCOUNT && args.mode == PD_MODE_AUTHFAIL) {
        pam_syslog(pamh, LOG_ERR, "authfail makes no sense in the account phase; "
                   "checking as preauth");
        args.mode = PD_MODE_PREAUTH;
    }
    if (args.mode == PD_MODE_NONE)
        args.mode = PD_MODE_PREAUTH;

    rv = pd_build_request(pamh, &args, &req);
    if (rv != PAM_SUCCESS)
        goto out;
    if (args.debug) {
        char line[1024];
        size_t pos = 0;

        for (size_t i = 0; i < req.n && pos < sizeof(line); i++)
            pos += (size_t)snprintf(line + pos, sizeof(line) - pos, " %s=\"%s\"",
                                    req.kv[i].key, req.kv[i].value);
        pam_syslog(pamh, LOG_DEBUG, "%s: asking %s (timeout %d ms):%s",
                   pd_mode_name(args.mode), args.address, args.timeout_ms, line);
    }

    if (args.mode == PD_MODE_PREAUTH)
        r = pd_ask_waiting(pamh, &args, phase, &req, &res, why, sizeof(why), &delayed);
    else
        r = pd_ask(&args, &req, &res, why, sizeof(why));
    if (r < 0) {
        rv = pd_outage(pamh, &args, phase, &req, r, why);
        goto out;
    }

    switch (args.mode) {
    case PD_MODE_AUTHFAIL:
        /* pam_faillock's convention: authfail only records, and fails. */
        rv = PAM_AUTH_ERR;
        if (!res.allowed)
            pam_syslog(pamh, LOG_NOTICE, "authfail: failure of user '%s' from '%s' not "
                       "counted: rule %s denied (no credit left, or no free counter)",
                       req.user, req.rhost, res.rule);
        else if (args.audit)
            pam_syslog(pamh, LOG_INFO, "authfail: failure of user '%s' from '%s' counted; "
                       "rule %s: %llu left", req.user, req.rhost, res.rule,
                       (unsigned long long)res.credit);
        break;
    case PD_MODE_AUTHSUCC:
        rv = PAM_SUCCESS;
        if (args.audit)
            pam_syslog(pamh, LOG_INFO, "authsucc: failures of user '%s' from '%s' reset",
                       req.user, req.rhost);
        break;
    default:
        if (res.allowed) {
            rv = PAM_SUCCESS;
            if (args.audit)
                pam_syslog(pamh, LOG_INFO, "%s: user '%s' from '%s' allowed; rule %s: "
                           "%llu left", phase == PD_PHASE_ACCOUNT ? "account" : "preauth",
                           req.user, req.rhost, res.rule, (unsigned long long)res.credit);
            break;
        }
        if (delayed) {
            /* A delay longer than max_delay: refused now, not locked; the next try may pass. */
            rv = PAM_AUTH_ERR;
            pam_syslog(pamh, LOG_NOTICE, "preauth: user '%s' from '%s' refused: rule %s asks "
                       "a delay of %llu s, more than max_delay=%d", req.user, req.rhost,
                       res.rule, (unsigned long long)res.reset_seconds, args.max_delay);
            if (!args.silent) {
                pd_duration(res.reset_seconds > 0 ? res.reset_seconds : 1, when, sizeof(when));
                pam_error(pamh, "Too many failed login attempts: try again in %s.", when);
            }
            break;
        }
        /* A lock: PAM_MAXTRIES in auth, so sshd asks no more passwords on this connection
         * and login(1) ends its loop; the user is told once. */
        rv = phase == PD_PHASE_ACCOUNT ? PAM_PERM_DENIED : PAM_MAXTRIES;
        pam_syslog(pamh, LOG_NOTICE, "%s: user '%s' from '%s' refused: no credit left on "
                   "rule %s for %llu s", phase == PD_PHASE_ACCOUNT ? "account" : "preauth",
                   req.user, req.rhost, res.rule, (unsigned long long)res.reset_seconds);
        pd_tell_locked(pamh, &args, &req, &res);
        break;
    }
out:
    if (args.debug)
        pam_syslog(pamh, LOG_DEBUG, "%s: returning %s", pd_mode_name(args.mode),
                   pam_strerror(pamh, rv));
    return rv;
}

PD_EXPORT int pam_sm_authenticate(pam_handle_t *pamh, int flags, int argc, const char **argv)
{
    return pd_run(pamh, flags, argc, argv, PD_PHASE_AUTH);
}

PD_EXPORT int pam_sm_setcred(pam_handle_t *pamh, int flags, int argc, const char **argv)
{
    (void)pamh;
    (void)flags;
    (void)argc;
    (void)argv;
    return PAM_SUCCESS;
}

PD_EXPORT int pam_sm_acct_mgmt(pam_handle_t *pamh, int flags, int argc, const char **argv)
{
    return pd_run(pamh, flags, argc, argv, PD_PHASE_ACCOUNT);
}
