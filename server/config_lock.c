/* SPDX-License-Identifier: MIT */
/*
 * config_lock: the native format's settings of a lockout rule (docs/rules.md "Lockout"):
 * algorithm = "lockout", fail_interval, unlock_time, the escalation = { factor; max;
 * remember; } and delay = { after; seconds; factor; max; } groups.  Native only: divvy's .ini
 * and .json keep divvy's meaning and never see them.  Values are range-checked here;
 * server/rules_lock.c checks them together and fills in the defaults.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "config_lock.h"
#include "config_private.h"

static const char *const config_lock_escalation[] = { "factor", "max", "remember" };
static const char *const config_lock_delay[] = { "after", "seconds", "factor", "max" };

static int config_lock_group(struct rules_rule_spec *r, const char *path,
                             const config_setting_t *s, bool escalation, struct diag *reterr)
{
    struct rules_lock *k = &r->lock;
    int n, q;

    if (config_setting_type(s) != CONFIG_TYPE_GROUP) {
        diag_set(reterr, path, conf_line(s), "%s must be a group { ... }", conf_name(s));
        return -EINVAL;
    }
    k->set |= escalation ? RULES_LOCK_SET_ESCALATION : RULES_LOCK_SET_DELAY;
    n = config_setting_length(s);
    for (int i = 0; i < n; i++) {
        const config_setting_t *m = config_setting_get_elem(s, (unsigned)i);
        const char *name = conf_name(m);
        int64_t v = 0;

        if (strcmp(name, "factor") == 0) {
            q = conf_get_int(path, m, 1, 1000, &v, reterr);
            if (escalation)
                k->lock_factor = (int32_t)v;
            else
                k->delay_factor = (int32_t)v;
        } else if (strcmp(name, "max") == 0) {
            q = conf_get_int(path, m, 1, RULES_SECONDS_MAX, &v, reterr);
            if (escalation)
                k->lock_max = v;
            else
                k->delay_max = v;
        } else if (escalation && strcmp(name, "remember") == 0) {
            q = conf_get_int(path, m, 0, RULES_SECONDS_MAX, &v, reterr);
            k->remember = v;
        } else if (!escalation && strcmp(name, "after") == 0) {
            q = conf_get_int(path, m, 1, 1023, &v, reterr);
            k->delay_after = (int32_t)v;
        } else if (!escalation && strcmp(name, "seconds") == 0) {
            q = conf_get_int(path, m, 1, RULES_SECONDS_MAX, &v, reterr);
            k->delay = v;
        } else if (escalation) {
            q = conf_unknown(path, m, "escalation", config_lock_escalation,
                             sizeof(config_lock_escalation) / sizeof(*config_lock_escalation),
                             "", reterr);
        } else {
            q = conf_unknown(path, m, "delay", config_lock_delay,
                             sizeof(config_lock_delay) / sizeof(*config_lock_delay), "",
                             reterr);
        }
        if (q < 0)
            return q;
    }
    return 0;
}

int config_lock_setting(struct rules_rule_spec *r, const char *path, const config_setting_t *s,
                        struct diag *reterr)
{
    const char *name = conf_name(s);
    int64_t v = 0;
    int q;

    if (strcmp(name, "algorithm") == 0) {
        if (config_setting_type(s) != CONFIG_TYPE_STRING ||
            strcmp(config_setting_get_string(s), "lockout") != 0)
            return 1;                       /* the shared table's algorithms */
        r->algo = RULES_ALGO_LOCKOUT;
        return 0;
    }
    if (strcmp(name, "fail_interval") == 0) {
        q = conf_get_int(path, s, 1, 4294967, &v, reterr);
        if (q == 0)
            r->lock.fail_interval = v;
        return q;
    }
    if (strcmp(name, "unlock_time") == 0) {
        q = conf_get_int(path, s, 1, RULES_SECONDS_MAX, &v, reterr);
        if (q == 0)
            r->lock.unlock_time = v;
        return q;
    }
    if (strcmp(name, "escalation") == 0)
        return config_lock_group(r, path, s, true, reterr);
    if (strcmp(name, "delay") == 0)
        return config_lock_group(r, path, s, false, reterr);
    return 1;
}

/* One "name = v; " of a group, when set. */
static void config_lock_put(FILE *f, const char *name, int64_t v)
{
    if (v != -1)
        fprintf(f, "%s = %" PRId64 "; ", name, v);
}

void config_lock_write(FILE *f, const struct rules_rule_spec *r)
{
    const struct rules_lock *k = &r->lock;

    fprintf(f, "        algorithm = \"lockout\";\n");
    if (k->fail_interval != -1)
        fprintf(f, "        fail_interval = %" PRId64 ";\n", k->fail_interval);
    if (k->unlock_time != -1)
        fprintf(f, "        unlock_time = %" PRId64 ";\n", k->unlock_time);
    if (k->set & RULES_LOCK_SET_ESCALATION) {
        fprintf(f, "        escalation = { ");
        config_lock_put(f, "factor", k->lock_factor);
        config_lock_put(f, "max", k->lock_max);
        config_lock_put(f, "remember", k->remember);
        fprintf(f, "};\n");
    }
    if (k->set & RULES_LOCK_SET_DELAY) {
        fprintf(f, "        delay = { ");
        config_lock_put(f, "after", k->delay_after);
        config_lock_put(f, "seconds", k->delay);
        config_lock_put(f, "factor", k->delay_factor);
        config_lock_put(f, "max", k->delay_max);
        fprintf(f, "};\n");
    }
}
