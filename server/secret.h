/* SPDX-License-Identifier: MIT */
/*
 * secret: reads a password from its own file, for the config loader's
 * redis.password_file and redis.sentinel_password_file (docs/config.md
 * "Secrets").  The config stays readable by every socket user; the secret
 * sits in a file only divvyd's user may read, or in a systemd credential
 * (LoadCredential=).  No I/O besides reading that one file; never logs.
 */
#ifndef DIVVY_SECRET_H
#define DIVVY_SECRET_H

#include <stdbool.h>
#include <stddef.h>

#define SECRET_MAX      512     /* bytes, like redis.password */
#define SECRET_ERR_MAX  256

/*
 * Resolves @name and reads the secret it names into *ret (malloc'd, NUL-
 * terminated; wipe it with explicit_bzero() before free()).
 *   - "/abs/path": that file.
 *   - "name" (no '/'): the systemd credential "name", i.e. the file
 *     $CREDENTIALS_DIRECTORY/name; an error when $CREDENTIALS_DIRECTORY is
 *     unset (not started by systemd with LoadCredential=).
 *   - anything else ("dir/name", ".", ".."): refused.
 * The file must be a regular file, not readable by group or others (mode
 * & 0044 == 0), and hold 1..SECRET_MAX bytes after dropping one trailing
 * "\n" (or "\r\n"): one line, no NUL, CR or LF inside.  On failure @reterr
 * (optional) says why in one phrase (never the secret) and *ret is
 * untouched (the phrase starts with the file's path, or @name when it
 * cannot be resolved): -EINVAL, -ENOENT, -EACCES, -EPERM, -EMSGSIZE, -ENOMEM, ...
 */
int secret_read(const char *name, char **ret, char *reterr, size_t err_size);

/*
 * Resolves @name as secret_read() does (an absolute path or a systemd
 * credential name), the path into @ret_path, and opens it (O_RDONLY,
 * close-on-exec, never blocking on a FIFO): a regular file, and with
 * @private one not readable by group or others, as a key must be (TLS
 * keys: daemon/tls.c).  The descriptor, the caller's to close; on failure
 * -errno and @reterr as secret_read() says.
 */
int secret_open(const char *name, bool private, char *ret_path, size_t path_size,
                char *reterr, size_t err_size);

#endif
