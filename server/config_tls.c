/* SPDX-License-Identifier: MIT */
/*
 * config_tls: the native format's server.tls group (docs/config.md,
 * docs/security.md): the certificate, key and client CA the "tls:"
 * listeners serve with, and the check that a "tls:" listen address has
 * them.  The files are only named here; divvyd reads them (daemon/tls.c) at
 * start and at every reload.
 */
#include <errno.h>
#include <string.h>

#include "config_private.h"

static const char *const conf_tls_names[] = {
    "certificate_file", "key_file", "client_ca_file", "min_version",
};

bool config_listen_is_tls(const char *addr)
{
    return strncmp(addr, "tls:", 4) == 0;
}

static int conf_tls_setting(struct config *cfg, const char *path, const config_setting_t *s,
                            struct diag *reterr)
{
    const char *name = conf_name(s), *str;
    char **slot;
    int r;

    slot = strcmp(name, "certificate_file") == 0 ? &cfg->tls.certificate_file
           : strcmp(name, "key_file") == 0       ? &cfg->tls.key_file
           : strcmp(name, "client_ca_file") == 0 ? &cfg->tls.client_ca_file
                                                 : NULL;
    if (slot) {
        r = conf_get_string(path, s, &str, reterr);
        if (r == 0 && !str[0]) {
            diag_set(reterr, path, conf_line(s), "server.tls.%s must not be empty", name);
            r = -EINVAL;
        }
        return r < 0 ? r : conf_set_str(slot, str);
    }
    if (strcmp(name, "min_version") == 0) {
        r = conf_get_string(path, s, &str, reterr);
        if (r < 0)
            return r;
        if (strcmp(str, "TLS1.2") == 0) {
            cfg->tls.min_version = 12;
        } else if (strcmp(str, "TLS1.3") == 0) {
            cfg->tls.min_version = 13;
        } else {
            diag_set(reterr, path, conf_line(s),
                     "server.tls.min_version must be \"TLS1.2\" or \"TLS1.3\", not \"%s\"", str);
            return -EINVAL;
        }
        return 0;
    }
    return conf_unknown(path, s, "server.tls", conf_tls_names, CONF_N(conf_tls_names), "",
                        reterr);
}

int conf_tls_group(struct config *cfg, const char *path, const config_setting_t *g,
                   struct diag *reterr)
{
    int r = 0;

    if (!config_setting_is_group(g)) {
        diag_set(reterr, path, conf_line(g), "server.tls must be a group { ... }");
        return -EINVAL;
    }
    cfg->tls.line = conf_line(g);
    for (int i = 0; i < config_setting_length(g); i++) {
        int q = conf_tls_setting(cfg, path, config_setting_get_elem(g, (unsigned)i), reterr);

        if (q == -ENOMEM)
            return q;
        if (q < 0)
            r = q;
    }
    if (r == 0 && (!cfg->tls.certificate_file || !cfg->tls.key_file)) {
        diag_set(reterr, path, cfg->tls.line,
                 "server.tls needs certificate_file and key_file");
        r = -EINVAL;
    }
    return r;
}

int conf_tls_check(const struct config *cfg, const char *path, struct diag *reterr)
{
    for (size_t i = 0; i < cfg->n_listen; i++) {
        enum config_proto proto;

        if (config_listen_is_tls(config_listen_proto(cfg->listen[i], &proto)) &&
            !cfg->tls.line) {
            diag_set(reterr, path, cfg->tls.listen_line,
                     "listen address \"%s\" is TLS: it needs a server.tls group with "
                     "certificate_file and key_file (docs/security.md)", cfg->listen[i]);
            return -EINVAL;
        }
    }
    return 0;
}
