/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for server/config_include.c: include_dir's drop-ins are read in
 * name order and placed after the main file's rules, before its default
 * rule; bad names, other settings and a default rule in a drop-in are
 * refused at their file:line; a pending edit (config_load_edit()) is seen as
 * if on disk and never written; config_dropin_write() leaves no temporary;
 * config_write_libconfig() writes include_dir back, not the drop-ins' rules.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"

struct fixture {
    char dir[256];
    char drop[300];
    char conf[300];
};

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void put_in(const struct fixture *fx, const char *name, const char *text)
{
    char path[400];

    snprintf(path, sizeof(path), "%s/%s", fx->drop, name);
    put(path, text);
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    const char *tmp = getenv("TMPDIR");
    char text[1024];

    assert_non_null(fx);
    snprintf(fx->dir, sizeof(fx->dir), "%s/divvy-include-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    assert_non_null(mkdtemp(fx->dir));
    snprintf(fx->drop, sizeof(fx->drop), "%s/rules.d", fx->dir);
    snprintf(fx->conf, sizeof(fx->conf), "%s/divvy.conf", fx->dir);
    assert_int_equal(mkdir(fx->drop, 0755), 0);
    snprintf(text, sizeof(text),
             "include_dir = \"%s\";\n"
             "rules = (\n"
             "    { match = { path = \"/main\"; }; credit_limit = 1; reset_seconds = 1; },\n"
             "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
             ");\n", fx->drop);
    put(fx->conf, text);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    char cmd[600];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
    assert_int_equal(system(cmd), 0);
    free(fx);
    return 0;
}

static const char *path_of(const struct rules_rule_spec *r)
{
    for (size_t i = 0; i < r->n_match; i++) {
        if (strcmp(r->match[i].key, "path") == 0)
            return r->match[i].value;
    }
    return r->is_default ? "default" : "?";
}

/* Loads with @edit; on success the rules' paths joined by ' ' into @buf. */
static int load(const struct fixture *fx, const struct config_edit *edit, char *buf,
                size_t size, struct diag *d)
{
    struct config *cfg = NULL;
    size_t pos = 0;
    int r;

    diag_init(d);
    buf[0] = '\0';
    r = config_load_edit(fx->conf, edit, &cfg, d);
    for (size_t i = 0; cfg && i < cfg->rules.n; i++)
        pos += (size_t)snprintf(buf + pos, size - pos, "%s%s", i ? " " : "",
                                path_of(&cfg->rules.rules[i]));
    config_free(cfg);
    return r;
}

static void expect_problem(const struct diag *d, const char *want)
{
    char msg[1024];

    assert_true(d->n >= 1);
    diag_format(d, 0, msg, sizeof(msg));
    if (!strstr(msg, want))
        fail_msg("\"%s\" not in \"%s\"", want, msg);
}

/* A one-rule drop-in for @path (a static buffer: the next call reuses it). */
static const char *rule_text(const char *path)
{
    static char t[256];

    snprintf(t, sizeof(t),
             "rules = ( { match = { path = \"%s\"; }; credit_limit = 1; reset_seconds = 1; } );\n",
             path);
    return t;
}

static void test_config_include_order(void **state)
{
    struct fixture *fx = *state;
    char got[512];
    struct diag d;

    put_in(fx, "50-b.conf", rule_text("/b"));
    put_in(fx, "10-a.conf", "# first\nrules = (\n"
                            "  { match = { path = \"/a1\"; }; credit_limit = 1; reset_seconds = 1; },\n"
                            "  { match = { path = \"/a2\"; }; credit_limit = 1; reset_seconds = 1; }\n"
                            ");\n");
    put_in(fx, ".50-c.conf.tmp", "garbage");      /* a writer's temporary */
    put_in(fx, "README", "not a drop-in");
    assert_int_equal(load(fx, NULL, got, sizeof(got), &d), 0);
    assert_string_equal(got, "/main /a1 /a2 /b default");
}

static void test_config_include_errors(void **state)
{
    struct fixture *fx = *state;
    char got[512];
    struct diag d;

    put_in(fx, "5-short.conf", rule_text("/x"));
    assert_int_equal(load(fx, NULL, got, sizeof(got), &d), -EINVAL);
    expect_problem(&d, "5-short.conf: a drop-in is named NN-NAME.conf");
    unlink(strcat(strcpy(got, fx->drop), "/5-short.conf"));

    put_in(fx, "20-x.conf", "server = { workers = 1; };\n"
                            "rules = ( { default = true; credit_limit = 1; reset_seconds = 1; } );\n");
    assert_int_equal(load(fx, NULL, got, sizeof(got), &d), -EINVAL);
    expect_problem(&d, "rules.d/20-x.conf:1: a drop-in holds only a 'rules' list, not 'server'");
    assert_int_equal(d.n, 2);
    diag_format(&d, 1, got, sizeof(got));
    assert_non_null(strstr(got, "20-x.conf:2: a drop-in cannot hold the default rule"));
}

static void test_config_include_edit(void **state)
{
    struct fixture *fx = *state;
    static const char new_text[] =
        "rules = ( { match = { path = \"/new\"; }; credit_limit = 1; reset_seconds = 1; } );\n";
    struct config_edit add = { .name = "30-new", .text = new_text };
    struct config_edit del = { .name = "10-a" };
    char got[512], list[400];
    struct diag d;

    add.len = strlen(add.text);
    put_in(fx, "10-a.conf", rule_text("/a"));
    assert_int_equal(load(fx, &add, got, sizeof(got), &d), 0);
    assert_string_equal(got, "/main /a /new default");
    assert_int_equal(load(fx, &del, got, sizeof(got), &d), 0);
    assert_string_equal(got, "/main default");
    /* Nothing was written by either. */
    snprintf(list, sizeof(list), "%s/30-new.conf", fx->drop);
    assert_int_equal(access(list, F_OK), -1);
    snprintf(list, sizeof(list), "%s/10-a.conf", fx->drop);
    assert_int_equal(access(list, F_OK), 0);
    /* A problem in the edit names the file it would be. */
    add.text = "rules = ( { credit_limt = 1; } );\n";
    add.len = strlen(add.text);
    assert_int_equal(load(fx, &add, got, sizeof(got), &d), -EINVAL);
    expect_problem(&d, "rules.d/30-new.conf:1: unknown rule setting 'credit_limt'");
    /* Adding an existing name, removing a missing one. */
    add.name = "10-a";
    assert_int_equal(load(fx, &add, got, sizeof(got), &d), -EEXIST);
    add.text = rule_text("/a-replaced");
    add.len = strlen(add.text);
    add.replace = true;
    assert_int_equal(load(fx, &add, got, sizeof(got), &d), 0);
    assert_string_equal(got, "/main /a-replaced default");
    del.name = "99-none";
    assert_int_equal(load(fx, &del, got, sizeof(got), &d), -ENOENT);
    expect_problem(&d, "no drop-in 99-none");
}

static void test_config_include_write(void **state)
{
    struct fixture *fx = *state;
    const char *text = rule_text("/w");
    char path[400], buf[256];
    FILE *f;

    assert_int_equal(config_dropin_write(fx->drop, "40-w", text, strlen(text)), 0);
    snprintf(path, sizeof(path), "%s/40-w.conf", fx->drop);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_string_equal(buf, text);
    snprintf(path, sizeof(path), "%s/.40-w.conf.tmp", fx->drop);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(config_dropin_write(fx->drop, "40-w", NULL, 0), 0);
    snprintf(path, sizeof(path), "%s/40-w.conf", fx->drop);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(config_dropin_write(fx->drop, "../x", text, strlen(text)), -EINVAL);
    assert_int_equal(config_dropin_write("/nonexistent-divvy", "40-w", text, strlen(text)),
                     -ENOENT);
}

/* divvyctl convert: include_dir is written back, the drop-ins' rules stay in
 * their files (not copied into the main file). */
static void test_config_include_write_libconfig(void **state)
{
    struct fixture *fx = *state;
    struct config *cfg = NULL;
    char got[512];
    struct diag d;
    FILE *f;

    put_in(fx, "10-a.conf", rule_text("/a"));
    diag_init(&d);
    assert_int_equal(config_load(fx->conf, &cfg, &d), 0);
    /* From now on the fixture's config is the converted one. */
    snprintf(fx->conf, sizeof(fx->conf), "%s/out.conf", fx->dir);
    f = fopen(fx->conf, "w");
    assert_non_null(f);
    assert_int_equal(config_write_libconfig(cfg, f), 0);
    assert_int_equal(fclose(f), 0);
    config_free(cfg);
    assert_int_equal(load(fx, NULL, got, sizeof(got), &d), 0);
    assert_string_equal(got, "/main /a default");
}

static void test_config_include_names(void **state)
{
    (void)state;
    assert_true(config_dropin_name_ok("50-merchant_42"));
    assert_true(config_dropin_name_ok("00-a"));
    assert_false(config_dropin_name_ok("5-a"));
    assert_false(config_dropin_name_ok("50-"));
    assert_false(config_dropin_name_ok("50_a"));
    assert_false(config_dropin_name_ok("50-a.b"));
    assert_false(config_dropin_name_ok("50-a/b"));
    assert_false(config_dropin_name_ok(".50-a"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_config_include_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_include_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_include_edit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_include_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_include_write_libconfig, setup, teardown),
        cmocka_unit_test(test_config_include_names),
    };

    return cmocka_run_group_tests_name("config_include", tests, NULL, NULL);
}
