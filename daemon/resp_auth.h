/* SPDX-License-Identifier: MIT */
/*
 * resp_auth: the password RESP listeners ask for (server.resp_password_file,
 * docs/resp.md "AUTH"), one for the whole daemon.  main.c sets it at start
 * and reload.c at every reload it applies; each connection's thread checks
 * a client's credentials against it (AUTH, HELLO ... AUTH).  A password
 * that changes gets a new generation: a connection remembers the generation
 * it authenticated under, so one authenticated with a password a reload
 * replaced must authenticate again.  Thread-safe; never logs.
 */
#ifndef DIVVY_RESP_AUTH_H
#define DIVVY_RESP_AUTH_H

#include <stddef.h>
#include <stdint.h>

/* Redis's one user, the only name AUTH and HELLO accept. */
#define RESP_AUTH_USER "default"

/*
 * The password in force from now on (copied; NULL: none).  The generation
 * changes only when the password does (set, changed or removed): 1 when it
 * did, 0 when the password is the same, -ENOMEM (the previous one stays).
 */
int resp_auth_set(const char *password);

/* The generation of the password in force; 0 while there is none (every
 * client may send commands).  Lock-free: once per command. */
uint64_t resp_auth_generation(void);

/*
 * Checks @user (NULL: the one-argument "AUTH pass", the default user) and
 * @pass, @plen bytes, in time that depends on @plen only, not on the
 * password.  0 and the generation checked in *ret_gen; -EACCES (wrong user
 * or password: WRONGPASS); -ENOENT (no password configured).
 */
int resp_auth_check(const char *user, size_t ulen, const char *pass, size_t plen,
                    uint64_t *ret_gen);

/* Forgets the password (wiped); at exit. */
void resp_auth_free(void);

#endif
