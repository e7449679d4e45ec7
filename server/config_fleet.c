/* SPDX-License-Identifier: MIT */
/*
 * config_fleet: what a loaded config means for a fleet of hosts sharing
 * Redis (docs/config.md "Across hosts", docs/redis.md "Login rules").
 * A divvy .ini/.json config is a drop-in for Button's divvy, which keeps
 * every counter in Redis and exports its own metric names: run with
 * divvy's Redis environment it gets store.mode "strict", and it always gets
 * divvy's metric names.  config_fleet_notes() lists what a valid config
 * does that its author may not expect: login rules run strict under
 * store.mode "lease", and a native config that configures Redis while every
 * rule stays local.  Never logs; reads the environment, nothing else.
 */
#include <stdlib.h>

#include "config_private.h"

/* divvy's Redis variables, as divvy and divvyd's start read them (non-empty). */
static const char *const conf_fleet_env[] = { "REDIS_HOST", "REDIS_PORT" };

const char *config_fleet_redis_env(void)
{
    for (size_t i = 0; i < CONF_N(conf_fleet_env); i++) {
        const char *v = getenv(conf_fleet_env[i]);

        if (v && *v)
            return conf_fleet_env[i];
    }
    return NULL;
}

void conf_fleet_divvy(struct config *cfg)
{
    if (cfg->format == CONFIG_FORMAT_LIBCONFIG)
        return;
    /* divvy's dashboards: divvy_tcp_connections_total, rule_label="". */
    cfg->metrics_divvy_names = true;
    /* In divvy every counter lives in Redis: N hosts on one config must
     * share one limit, never get N of them.  A rule's own store stays. */
    if (config_fleet_redis_env())
        cfg->rules.default_store = RULES_STORE_STRICT;
}

size_t config_fleet_notes(const struct config *cfg, const struct rules *rules, struct diag *ret)
{
    const struct rules_rule_spec *first = NULL;
    size_t n = rules_validate_notes(&cfg->rules, ret), unleased = 0;
    const char *env;

    for (size_t i = 0; i < cfg->rules.n; i++) {
        if (rules_spec_unleased(&cfg->rules, &cfg->rules.rules[i]) && unleased++ == 0)
            first = &cfg->rules.rules[i];
    }
    if (first) {
        if (unleased == 1)
            diag_set(ret, first->file, first->line, "store.mode \"lease\" does not apply to "
                     "this source = \"privileged\" (login) rule: it runs \"strict\" (login "
                     "rules are never leased; give it store = \"strict\" to say so)");
        else
            diag_set(ret, first->file, first->line, "store.mode \"lease\" does not apply to "
                     "source = \"privileged\" (login) rules: this one and %zu more run "
                     "\"strict\" (login rules are never leased; give them store = \"strict\" "
                     "to say so)", unleased - 1);
        n++;
    }
    if (cfg->format != CONFIG_FORMAT_LIBCONFIG || !rules || rules_uses_store(rules))
        return n;
    env = config_fleet_redis_env();
    if (cfg->redis.line)
        diag_set(ret, cfg->path, cfg->redis.line, "redis is configured, but every rule's store "
                 "is \"local\": each host counts alone; set store.mode = \"strict\" (or "
                 "\"lease\", or a rule's store) to share the counters through Redis");
    else if (env)
        diag_set(ret, cfg->path, 0, "%s is set, but every rule's store is \"local\": each host "
                 "counts alone; set store.mode = \"strict\" (or \"lease\", or a rule's store) "
                 "to share the counters through Redis", env);
    else
        return n;
    return n + 1;
}
