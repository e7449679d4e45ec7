/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the native config's decision_log { } group (server/config_dlog.c): the
 * defaults, every setting read, each refusal at its file:line with its reason, and the
 * group among the settings a reload says need a restart (daemon/reload_diff.c).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"
#include "dlog.h"
#include "daemon/reload_diff.h"

#define TAIL "rules = ( { default = true; credit_limit = 1; reset_seconds = 60; } );\n"

/* config_load() of @text (a temporary file): its result, the problems in @d. */
static int load(const char *text, struct config **ret, struct diag *d)
{
    char path[] = "/tmp/divvy-test-dlog-XXXXXX.conf";
    int fd = mkstemps(path, 5), r;
    FILE *f;

    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    diag_init(d);
    r = config_load(path, ret, d);
    unlink(path);
    return r;
}

static void refused(const char *text, unsigned line, const char *msg)
{
    struct config *cfg = NULL;
    struct diag d;

    assert_int_equal(load(text, &cfg, &d), -EINVAL);
    assert_null(cfg);
    assert_true(d.n >= 1);
    if (d.e[0].line != line || !strstr(d.e[0].msg, msg))
        fail_msg("error %u: \"%s\", want %u: \"%s\"", d.e[0].line, d.e[0].msg, line, msg);
}

static void test_config_dlog_off_by_default(void **state)
{
    struct config *cfg = NULL;
    struct diag d;

    (void)state;
    assert_int_equal(load(TAIL, &cfg, &d), 0);
    assert_false(cfg->dlog.enabled);
    assert_null(cfg->dlog.directory);
    assert_int_equal(cfg->dlog.file_size, CONFIG_DLOG_FILE_SIZE);
    assert_int_equal(cfg->dlog.files, CONFIG_DLOG_FILES);
    assert_int_equal(cfg->dlog.flush_ms, CONFIG_DLOG_FLUSH_MS);
    assert_int_equal(cfg->dlog.n_redact, 0);
    config_free(cfg);
}

static void test_config_dlog_one_setting_turns_it_on(void **state)
{
    struct config *cfg = NULL;
    struct diag d;

    (void)state;
    assert_int_equal(load("decision_log = { enabled = true; };\n" TAIL, &cfg, &d), 0);
    assert_true(cfg->dlog.enabled);
    assert_int_equal(cfg->dlog.line, 1);
    assert_int_equal(cfg->dlog.files, CONFIG_DLOG_FILES);
    config_free(cfg);
}

static void test_config_dlog_every_setting(void **state)
{
    static const char text[] =
        "decision_log = {\n"
        "    enabled = true;\n"
        "    directory = \"/var/log/divvy/decisions\";\n"
        "    file_size = 1048576;\n"
        "    files = 3;\n"
        "    flush_ms = 250;\n"
        "    redact = { user = \"hash\"; password = \"drop\"; ip = \"keep\"; };\n"
        "};\n" TAIL;
    struct config *cfg = NULL;
    struct diag d;

    (void)state;
    assert_int_equal(load(text, &cfg, &d), 0);
    assert_true(cfg->dlog.enabled);
    assert_string_equal(cfg->dlog.directory, "/var/log/divvy/decisions");
    assert_int_equal(cfg->dlog.file_size, 1048576);
    assert_int_equal(cfg->dlog.files, 3);
    assert_int_equal(cfg->dlog.flush_ms, 250);
    assert_int_equal(cfg->dlog.n_redact, 3);
    assert_string_equal(cfg->dlog.redact[0].key, "user");
    assert_int_equal(cfg->dlog.redact[0].how, DLOG_HASH);
    assert_string_equal(cfg->dlog.redact[1].key, "password");
    assert_int_equal(cfg->dlog.redact[1].how, DLOG_DROP);
    assert_string_equal(cfg->dlog.redact[2].key, "ip");
    assert_int_equal(cfg->dlog.redact[2].how, DLOG_KEEP);
    config_free(cfg);
}

static void test_config_dlog_refusals(void **state)
{
    (void)state;
    refused("decision_log = { enabled = true; colour = 1; };\n" TAIL, 1,
            "unknown setting 'decision_log.colour'");
    refused("decision_log = {\n  enable = true;\n};\n" TAIL, 2,
            "unknown setting 'decision_log.enable' (did you mean 'enabled'?)");
    refused("decision_log = { enabled = 1; };\n" TAIL, 1,
            "decision_log.enabled must be true or false");
    refused("decision_log = {\n\n  directory = \"decisions\";\n};\n" TAIL, 3,
            "decision_log.directory must be an absolute path");
    refused("decision_log = { directory = \"/var/lib/../tmp\"; };\n" TAIL, 1,
            "no '.' or '..' parts");
    refused("decision_log = { directory = \"/\"; };\n" TAIL, 1, "not /");
    refused("decision_log = { directory = 5; };\n" TAIL, 1, "directory must be a string");
    refused("decision_log = { file_size = 1000; };\n" TAIL, 1,
            "file_size must be between 65536 and");
    refused("decision_log = { files = 0; };\n" TAIL, 1, "files must be between 1 and 100000");
    refused("decision_log = { flush_ms = 0; };\n" TAIL, 1, "flush_ms must be between 1 and 60000");
    refused("decision_log = { flush_ms = 60001; };\n" TAIL, 1, "flush_ms must be between");
    refused("decision_log = {\n redact = { user = \"md5\"; };\n};\n" TAIL, 2,
            "decision_log.redact.user must be \"keep\", \"hash\" or \"drop\", not \"md5\"");
    refused("decision_log = { redact = { user = 1; }; };\n" TAIL, 1, "user must be a string");
    refused("decision_log = { redact = [ \"user\" ]; };\n" TAIL, 1,
            "decision_log.redact must be a group");
    refused("decision_log = true;\n" TAIL, 1, "decision_log must be a group");
    refused("decision_logs = { enabled = true; };\n" TAIL, 1,
            "unknown setting 'decision_logs' (did you mean 'decision_log'?)");
}

static void test_config_dlog_redact_bounded(void **state)
{
    char text[8192];
    size_t off = 0;

    (void)state;
    off += (size_t)snprintf(text + off, sizeof(text) - off, "decision_log = { redact = {");
    for (int i = 0; i <= CONFIG_DLOG_REDACT_MAX; i++)
        off += (size_t)snprintf(text + off, sizeof(text) - off, " k%d = \"hash\";", i);
    snprintf(text + off, sizeof(text) - off, " }; };\n" TAIL);
    refused(text, 1, "decision_log.redact: at most 64 keys, not 65");
}

/* A reload that changes decision_log says it takes effect at a restart. */
static void test_config_dlog_restart_setting(void **state)
{
    struct config *a = NULL, *b = NULL;
    struct reload_settings sa = { 0 }, sb = { 0 };
    unsigned changed = 0;
    struct diag d;

    (void)state;
    assert_int_equal(load(TAIL, &a, &d), 0);
    assert_int_equal(load("decision_log = { enabled = true; redact = { user = \"hash\"; }; };\n"
                          TAIL, &b, &d), 0);
    assert_int_equal(reload_settings_take(a, &sa), 0);
    assert_int_equal(reload_settings_take(b, &sb), 0);
    assert_int_equal(sa.n, sb.n);
    for (size_t i = 0; i < sa.n; i++) {
        if (strcmp(sa.s[i].value, sb.s[i].value) == 0)
            continue;
        changed++;
        if (strcmp(sb.s[i].name, "decision_log.enabled") == 0)
            assert_string_equal(sb.s[i].value, "true");
        else if (strcmp(sb.s[i].name, "decision_log.redact") == 0)
            assert_string_equal(sb.s[i].value, "user=hash");
        else
            fail_msg("setting %s changed", sb.s[i].name);
    }
    assert_int_equal(changed, 2);
    reload_settings_free(&sa);
    reload_settings_free(&sb);
    config_free(a);
    config_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_dlog_off_by_default),
        cmocka_unit_test(test_config_dlog_one_setting_turns_it_on),
        cmocka_unit_test(test_config_dlog_every_setting),
        cmocka_unit_test(test_config_dlog_refusals),
        cmocka_unit_test(test_config_dlog_redact_bounded),
        cmocka_unit_test(test_config_dlog_restart_setting),
    };

    return cmocka_run_group_tests_name("config_dlog", tests, NULL, NULL);
}
