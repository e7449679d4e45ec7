/* SPDX-License-Identifier: MIT */
/*
 * client_err: the one place libdivvy formats an error message (client_err.h).
 * Never logs: the message waits in the handle for divvy_errmsg().
 */
#include <stdarg.h>
#include <stdio.h>

#include "client_err.h"

int client_err(struct client_err *e, int r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    return r;
}
