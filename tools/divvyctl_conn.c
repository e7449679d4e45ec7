/* SPDX-License-Identifier: MIT */
/*
 * divvyctl's connection to divvyd: opens the one handle of a run through
 * libdivvy's public API (always the socket), sends a command line and turns
 * every failure, libdivvy's or an ERR reply, into a message on stderr and
 * one of the stable exit codes (docs/divvyctl.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "divvyctl.h"

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
        return ctl_fail(CTL_EXIT_USAGE, "bad address '%s': use unix:PATH, a path with a '/' "
                        "(./PATH for the current directory), tcp:HOST:PORT or tcp:[V6]:PORT",
                        ctl->address);
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
const char *ctl_why(const struct ctl *ctl, int r)
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
void ctl_parse_err(const char *line, char *code, size_t code_size, char *reason,
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
int ctl_err_reply(const struct ctl *ctl, const char *verb, const char *line)
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

int ctl_send(struct ctl *ctl, const char *verb, const char *line, char ***ret_lines,
             size_t *ret_n)
{
    int r;

    r = ctl_connect(ctl);
    if (r > 0)
        return r;
    r = divvy_command(ctl->h, line, ret_lines, ret_n);
    return r < 0 ? ctl_client_error(ctl, verb, r) : 0;
}

int ctl_command(struct ctl *ctl, const char *verb, const char *line, char ***ret_lines,
                size_t *ret_n)
{
    char **lines = NULL;
    size_t n = 0;
    int r;

    r = ctl_send(ctl, verb, line, &lines, &n);
    if (r > 0)
        return r;
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

int ctl_list_fetch(struct ctl *ctl, const char *verb, const char *line, struct ctl_list *ret)
{
    struct ctl_list l = { NULL, 0, NULL, NULL };
    int r;

    r = ctl_command(ctl, verb, line, &l.lines, &l.n);
    if (r > 0)
        return r;
    /* One parse buffer, reused: a config may hold 100,000 rules. */
    l.f = malloc(sizeof(*l.f));
    l.arr = ctl->json ? json_array() : NULL;
    if (!l.f || (ctl->json && !l.arr)) {
        ctl_list_free(&l);
        return ctl_fail(CTL_EXIT_FAILURE, "out of memory");
    }
    *ret = l;
    return 0;
}

void ctl_list_free(struct ctl_list *l)
{
    json_decref(l->arr);
    free(l->f);
    divvy_lines_free(l->lines, l->n);
    l->arr = NULL;
    l->f = NULL;
    l->lines = NULL;
    l->n = 0;
}
