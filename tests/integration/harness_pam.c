/* SPDX-License-Identifier: MIT */
/*
 * harness: the real pam_divvy.so, run in this process as sshd would run it,
 * through a PAM service file written into the daemon's directory
 * (pam_start_confdir(), so /etc/pam.d is never touched).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <security/pam_appl.h>

#include "harness.h"

/* No prompt is ever answered: pam_divvy only tells (a lock), never asks. */
static int no_conv(int n, const struct pam_message **msg, struct pam_response **resp, void *data)
{
    (void)n;
    (void)msg;
    (void)resp;
    (void)data;
    return PAM_CONV_ERR;
}

void harness_pam_module(char module[PATH_MAX])
{
    const char *env = getenv("PAM_DIVVY"), *build = getenv("DIVVY_BUILD");
    char guess[HARNESS_PATH];

    if (env && env[0])
        snprintf(guess, sizeof(guess), "%s", env);
    else
        snprintf(guess, sizeof(guess), "%s/pam_divvy.so", build && build[0] ? build : "build");
    if (!realpath(guess, module))
        fail_msg("pam_divvy.so: %s: %s (set PAM_DIVVY)", guess, strerror(errno));
}

int harness_pam_auth(struct harness_daemon *d, const char *service, const char *control,
                     const char *args, const char *rest, const char *user, const char *rhost)
{
    struct pam_conv c = { no_conv, NULL };
    char module[PATH_MAX], path[HARNESS_PATH * 2];
    pam_handle_t *pamh = NULL;
    FILE *f;
    int rv;

    harness_pam_module(module);
    snprintf(path, sizeof(path), "%s/%s", d->dir, service);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "auth %s %s %s\n%s", control, module, args, rest ? rest : "");
    assert_int_equal(fclose(f), 0);
    assert_int_equal(pam_start_confdir(service, user, &c, d->dir, &pamh), PAM_SUCCESS);
    pam_set_item(pamh, PAM_RHOST, rhost);
    rv = pam_authenticate(pamh, 0);
    pam_end(pamh, rv);
    return rv;
}
