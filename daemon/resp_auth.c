/* SPDX-License-Identifier: MIT */
/*
 * resp_auth: the RESP listeners' password (see resp_auth.h).  The password
 * sits behind a mutex, taken by AUTH and by a reload only; its generation is
 * an atomic every command reads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "resp_auth.h"

static pthread_mutex_t auth_lock = PTHREAD_MUTEX_INITIALIZER;
static char *auth_password;             /* NULL: none */
static size_t auth_len;
static uint64_t auth_generation;        /* 0: none; atomic */
static uint64_t auth_last;              /* the last generation given out */

static void auth_wipe(void)
{
    if (auth_password) {
        explicit_bzero(auth_password, auth_len);
        free(auth_password);
    }
    auth_password = NULL;
    auth_len = 0;
}

int resp_auth_set(const char *password)
{
    size_t len = password ? strlen(password) : 0;
    char *copy = NULL;
    int r = 0;

    if (password && !(copy = malloc(len + 1)))
        return -ENOMEM;
    if (copy)
        memcpy(copy, password, len + 1);
    pthread_mutex_lock(&auth_lock);
    if (!copy) {
        r = auth_password != NULL;
        auth_wipe();
        __atomic_store_n(&auth_generation, 0, __ATOMIC_RELEASE);
        goto out;
    }
    if (auth_password && auth_len == len && memcmp(auth_password, copy, len) == 0) {
        explicit_bzero(copy, len);
        free(copy);
        goto out;
    }
    auth_wipe();
    auth_password = copy;
    auth_len = len;
    __atomic_store_n(&auth_generation, ++auth_last, __ATOMIC_RELEASE);
    r = 1;
out:
    pthread_mutex_unlock(&auth_lock);
    return r;
}

uint64_t resp_auth_generation(void)
{
    return __atomic_load_n(&auth_generation, __ATOMIC_ACQUIRE);
}

/* @a (@alen bytes, the client's) against @b (@blen, never empty): every
 * byte of @a is looked at, whatever matches. */
static bool auth_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned char diff = alen != blen;

    for (size_t i = 0; i < alen; i++)
        diff |= (unsigned char)a[i] ^ (unsigned char)b[i < blen ? i : 0];
    return diff == 0;
}

int resp_auth_check(const char *user, size_t ulen, const char *pass, size_t plen,
                    uint64_t *ret_gen)
{
    bool user_ok = !user || (ulen == strlen(RESP_AUTH_USER) &&
                             memcmp(user, RESP_AUTH_USER, ulen) == 0);
    int r;

    pthread_mutex_lock(&auth_lock);
    if (!auth_password) {
        r = -ENOENT;
    } else if (auth_equal(pass, plen, auth_password, auth_len) && user_ok) {
        *ret_gen = auth_generation;
        r = 0;
    } else {
        r = -EACCES;
    }
    pthread_mutex_unlock(&auth_lock);
    return r;
}

void resp_auth_free(void)
{
    pthread_mutex_lock(&auth_lock);
    auth_wipe();
    __atomic_store_n(&auth_generation, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&auth_lock);
}
