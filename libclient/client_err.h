/* SPDX-License-Identifier: MIT */
/*
 * client_err: the message behind a libdivvy error code, the bottom of
 * libclient's layers (divvy -> memo -> fast -> handoff -> conn -> wire ->
 * err).  A layer that fails returns -errno and, where errno cannot say what
 * went wrong (which file, which address, what divvyd answered), writes one
 * line into the handle's struct client_err, which its context points to;
 * divvy_errmsg() returns it.  The failing layer writes the message because
 * only it knows the detail: codes passed up for the API layer to format
 * would lose the path, the address and divvyd's reason.  Uses no other
 * module.
 */
#ifndef DIVVY_CLIENT_ERR_H
#define DIVVY_CLIENT_ERR_H

#define CLIENT_ERR_MAX  512

/* The error message of a handle's last call; "" when it succeeded. */
struct client_err {
    char msg[CLIENT_ERR_MAX];
};

/* Formats @e's message; returns @r for "return client_err(...)". */
int client_err(struct client_err *e, int r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Empties @e's message (a call starts, or a fallback made it moot); inline:
 * every call of the API does it. */
static inline void client_err_clear(struct client_err *e)
{
    e->msg[0] = '\0';
}

#endif
