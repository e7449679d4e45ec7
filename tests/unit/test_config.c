/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for server/config*.c: divvy's example
 * config in its three spellings loads to the same rules; node-ini quirks;
 * every error class names the right file:line (fixtures mark the line with
 * "ERROR"); settings are parsed; config_write_libconfig() round-trips.
 * Fixtures are read relative to $DIVVY_SRCDIR (default: the current
 * directory, the repository root under `make check`).
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

static const char *srcdir(void)
{
    const char *d = getenv("DIVVY_SRCDIR");

    return d && d[0] ? d : ".";
}

static void src_path(char *buf, size_t size, const char *rel)
{
    snprintf(buf, size, "%s/%s", srcdir(), rel);
}

static struct config *load_ok(const char *path)
{
    struct config *cfg = NULL;
    struct diag d;
    int r;

    diag_init(&d);
    r = config_load(path, &cfg, &d);
    for (size_t i = 0; i < d.n; i++) {
        char msg[1024];

        diag_format(&d, i, msg, sizeof(msg));
        print_error("%s\n", msg);
    }
    assert_int_equal(r, 0);
    assert_int_equal(d.n, 0);
    assert_non_null(cfg);
    return cfg;
}

static struct config *load_src(const char *rel)
{
    char path[1024];

    src_path(path, sizeof(path), rel);
    return load_ok(path);
}

/* Writes @len bytes to a new temporary file named ...@suffix. */
static void tmp_write(char *path, size_t size, const char *suffix, const char *text, size_t len)
{
    const char *dir = getenv("TMPDIR");
    FILE *f;
    int fd;

    snprintf(path, size, "%s/divvy-test-XXXXXX%s", dir && dir[0] ? dir : "/tmp", suffix);
    fd = mkstemps(path, (int)strlen(suffix));
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static struct config *load_text(const char *suffix, const char *text)
{
    char path[1024];
    struct config *cfg;

    tmp_write(path, sizeof(path), suffix, text, strlen(text));
    cfg = load_ok(path);
    unlink(path);
    return cfg;
}

/* Loading @text fails, the first error at @line saying @msg. */
static void load_text_error(const char *suffix, const char *text, unsigned line,
                            const char *msg)
{
    char path[1024];
    struct config *cfg = NULL;
    struct diag d;

    tmp_write(path, sizeof(path), suffix, text, strlen(text));
    diag_init(&d);
    assert_int_equal(config_load(path, &cfg, &d), -EINVAL);
    unlink(path);
    assert_null(cfg);
    assert_int_equal(d.e[0].line, line);
    if (!strstr(d.e[0].msg, msg))
        fail_msg("error \"%s\", want \"%s\"", d.e[0].msg, msg);
}

/* Loads the native config @text, which must be refused with exactly one
 * problem at each of @lines[0..n), in order; the problems in *@ret. */
static void load_refused(const char *text, const unsigned *lines, size_t n, struct diag *ret)
{
    struct config *cfg = NULL;
    char path[1024];

    tmp_write(path, sizeof(path), ".conf", text, strlen(text));
    diag_init(ret);
    assert_int_equal(config_load(path, &cfg, ret), -EINVAL);
    unlink(path);
    assert_null(cfg);
    assert_int_equal(ret->n, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ret->e[i].line, lines[i]);
}

static const struct rules_rule_spec *rule(const struct config *cfg, size_t i)
{
    assert_true(i < cfg->rules.n);
    return &cfg->rules.rules[i];
}

static const char *match_of(const struct rules_rule_spec *r, const char *key)
{
    for (size_t i = 0; i < r->n_match; i++) {
        if (strcmp(r->match[i].key, key) == 0)
            return r->match[i].value;
    }
    return NULL;
}

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Everything but file and lines; @skip_key drops one match key of both. */
static void assert_rule_equal(const struct rules_rule_spec *a, const struct rules_rule_spec *b,
                              const char *skip_key)
{
    size_t na = 0, nb = 0;

    for (size_t i = 0; i < a->n_match; i++)
        na += !skip_key || strcmp(a->match[i].key, skip_key) != 0;
    for (size_t i = 0; i < b->n_match; i++)
        nb += !skip_key || strcmp(b->match[i].key, skip_key) != 0;
    assert_int_equal(na, nb);
    for (size_t i = 0; i < a->n_match; i++) {
        if (skip_key && strcmp(a->match[i].key, skip_key) == 0)
            continue;
        assert_non_null(match_of(b, a->match[i].key));
        assert_string_equal(match_of(b, a->match[i].key), a->match[i].value);
    }
    assert_int_equal(a->n_actor, b->n_actor);
    for (size_t i = 0; i < a->n_actor; i++)
        assert_string_equal(a->actor[i], b->actor[i]);
    assert_int_equal(a->credit_limit, b->credit_limit);
    assert_int_equal(a->reset_seconds, b->reset_seconds);
    assert_int_equal(a->refill_amount, b->refill_amount);
    assert_int_equal(a->refill_seconds, b->refill_seconds);
    assert_int_equal(a->prefix4, b->prefix4);
    assert_int_equal(a->prefix6, b->prefix6);
    assert_int_equal(a->max_actors, b->max_actors);
    assert_int_equal(a->max_debit, b->max_debit);
    assert_int_equal(a->strict, b->strict);
    assert_int_equal(a->fast_path, b->fast_path);
    assert_int_equal(a->is_default, b->is_default);
    assert_int_equal(a->policy, b->policy);
    assert_int_equal(a->algo, b->algo);
    assert_int_equal(a->source, b->source);
    assert_int_equal(a->when_full, b->when_full);
    assert_true(str_eq(a->label, b->label));
    /* divvy treats a missing comment and "" alike. */
    assert_true(str_eq(a->comment ? a->comment : "", b->comment ? b->comment : ""));
}

static void assert_rules_equal(const struct config *a, const struct config *b)
{
    assert_int_equal(a->rules.n, b->rules.n);
    for (size_t i = 0; i < a->rules.n; i++)
        assert_rule_equal(rule(a, i), rule(b, i), NULL);
}

/* ---- the examples ------------------------------------------------------ */

static void test_config_example_ini_values(void **state)
{
    struct config *cfg = load_src("etc/divvy.ini");
    const struct rules_rule_spec *r;

    (void)state;
    assert_int_equal(cfg->format, CONFIG_FORMAT_INI);
    assert_int_equal(cfg->rules.n, 6);
    r = rule(cfg, 0);
    assert_int_equal(r->n_match, 2);
    assert_string_equal(match_of(r, "method"), "GET");
    assert_string_equal(match_of(r, "path"), "/status");
    assert_int_equal(r->credit_limit, 1000);
    assert_int_equal(r->reset_seconds, 60);
    assert_int_equal(r->n_actor, 0);
    assert_int_equal(r->line, 1);
    assert_string_equal(r->comment, "1000 requests per minute for GET /status, globally");
    r = rule(cfg, 1);
    assert_int_equal(r->policy, RULES_POLICY_CANARY);
    assert_int_equal(r->reset_seconds, 86400);
    assert_int_equal(r->line, 7);
    r = rule(cfg, 2);
    assert_string_equal(match_of(r, "path"), "/pantry/cookies/*");
    assert_string_equal(match_of(r, "ip"), "*");
    assert_int_equal(r->n_actor, 1);
    assert_string_equal(r->actor[0], "ip");
    assert_int_equal(r->max_actors, 20000);
    assert_int_equal(r->when_full, RULES_FULL_EVICT);
    assert_int_equal(r->policy, RULES_POLICY_STOP);
    r = rule(cfg, 4);
    assert_string_equal(match_of(r, "foo"), "3");
    r = rule(cfg, 5);
    assert_true(r->is_default);
    assert_int_equal(r->n_match, 0);
    assert_int_equal(r->credit_limit, 0);
    assert_int_equal(r->line, 41);
    assert_string_equal(r->comment, "Default deny!");
    /* Every shipped rule has a label (top, locked and metrics name it). */
    for (size_t i = 0; i < cfg->rules.n; i++)
        assert_non_null(rule(cfg, i)->label);
    assert_string_equal(rule(cfg, 0)->label, "status");
    assert_string_equal(r->file, cfg->path);
    /* Server settings keep their defaults in a divvy config. */
    assert_int_equal(cfg->n_listen, 2);
    assert_string_equal(cfg->listen[0], CONFIG_DEFAULT_TCP);
    assert_string_equal(cfg->listen[1], CONFIG_DEFAULT_UNIX);
    assert_string_equal(cfg->state_dir, CONFIG_DEFAULT_STATE_DIR);
    assert_int_equal(cfg->socket_mode, 0660);
    assert_int_equal(cfg->max_connections, 0);
    assert_int_equal(cfg->max_output_bytes, 1 << 20);
    assert_int_equal(cfg->admit.reserved_connections, 32);
    assert_int_equal(cfg->admit.idle_timeout_ms, 60000);
    assert_int_equal(cfg->admit.request_timeout_ms, 10000);
    assert_int_equal(cfg->admit.output_budget_bytes, 16 << 20);
    assert_string_equal(cfg->admin_group, "divvy-admin");
    assert_int_equal(cfg->table_slots, 65536);
    assert_int_equal(cfg->fast_table_slots, 65536);
    assert_int_equal(cfg->privileged_table_slots, 65536);
    assert_int_equal(cfg->when_full, CONFIG_FULL_DENY);
    config_free(cfg);
}

/*
 * etc/divvy.conf opens with pam_divvy's login-throttling rules (docs/pam.md):
 * privileged, labelled, never fast_path, each matching event=authfail so that
 * no divvy request reaches them.  The rules after them are divvy's example.
 * Returns how many there are.
 */
static size_t conf_login_rules(const struct config *conf)
{
    size_t n = 0;

    while (n < conf->rules.n && rule(conf, n)->source == RULES_SOURCE_PRIVILEGED) {
        const struct rules_rule_spec *r = rule(conf, n);

        assert_non_null(match_of(r, "event"));
        assert_string_equal(match_of(r, "event"), "authfail");
        assert_non_null(r->label);
        assert_false(r->fast_path);
        n++;
    }
    for (size_t i = n; i < conf->rules.n; i++) {
        assert_int_equal(rule(conf, i)->source, RULES_SOURCE_ANY);
        assert_null(match_of(rule(conf, i), "event"));
    }
    return n;
}

static void test_config_examples_identical(void **state)
{
    struct config *ini = load_src("etc/divvy.ini");
    struct config *json = load_src("etc/divvy.json");
    struct config *conf = load_src("etc/divvy.conf");
    size_t n_login;

    (void)state;
    assert_int_equal(json->format, CONFIG_FORMAT_JSON);
    assert_int_equal(conf->format, CONFIG_FORMAT_LIBCONFIG);
    n_login = conf_login_rules(conf);
    assert_int_equal(n_login, 4);
    assert_int_equal(conf->rules.n, n_login + ini->rules.n);
    for (size_t i = 0; i < ini->rules.n; i++)
        assert_rule_equal(rule(ini, i), rule(conf, n_login + i), NULL);
    /* divvy's own two examples differ in one place: the INI carrots rule
     * also requires foo=3.  Everything else is the same. */
    assert_int_equal(ini->rules.n, json->rules.n);
    for (size_t i = 0; i < ini->rules.n; i++)
        assert_rule_equal(rule(ini, i), rule(json, i), i == 4 ? "foo" : NULL);
    assert_string_equal(match_of(rule(ini, 4), "foo"), "3");
    assert_null(match_of(rule(json, 4), "foo"));
    config_free(ini);
    config_free(json);
    config_free(conf);
}

static void test_config_json_lines(void **state)
{
    struct config *cfg = load_src("etc/divvy.json");

    (void)state;
    assert_int_equal(rule(cfg, 0)->line, 3);
    assert_int_equal(rule(cfg, 1)->line, 14);
    assert_int_equal(rule(cfg, 4)->line, 53);
    assert_int_equal(rule(cfg, 5)->line, 68);
    assert_int_equal(rule(cfg, 0)->match[0].line, 5);
    config_free(cfg);
}

static void test_config_conf_lines(void **state)
{
    struct config *cfg = load_src("etc/divvy.conf");
    char path[1024];
    char line[512];
    unsigned n = 0, k = 0;
    FILE *f;

    (void)state;
    /* Each rule's line is the line of its opening brace. */
    src_path(path, sizeof(path), "etc/divvy.conf");
    f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        n++;
        if (strcmp(line, "    {\n") == 0) {
            assert_true(k < cfg->rules.n);
            assert_int_equal(rule(cfg, k)->line, n);
            k++;
        }
    }
    fclose(f);
    assert_int_equal(k, cfg->rules.n);
    config_free(cfg);
}

/* ---- native settings --------------------------------------------------- */

static void test_config_full_native(void **state)
{
    struct config *cfg = load_src("tests/fixtures/full.conf");
    const struct rules_rule_spec *r;

    (void)state;
    assert_int_equal(cfg->n_listen, 3);
    assert_string_equal(cfg->listen[0], "tcp:[::1]:9000");
    assert_string_equal(cfg->listen[1], "unix:/tmp/divvy-test.sock");
    assert_string_equal(cfg->listen[2], "tcp:0.0.0.0:8321");
    assert_string_equal(cfg->state_dir, "/var/tmp/divvy");
    assert_int_equal(cfg->workers, 4);
    assert_int_equal(cfg->max_connections, 100);
    assert_int_equal(cfg->max_output_bytes, 65536);
    assert_int_equal(cfg->socket_mode, 0600);
    assert_string_equal(cfg->admin_group, "wheel");
    assert_int_equal(cfg->table_slots, 1024);
    assert_int_equal(cfg->fast_table_slots, 4096);
    assert_int_equal(cfg->when_full, CONFIG_FULL_ALLOW);

    assert_int_equal(cfg->rules.n, 4);
    r = rule(cfg, 0);
    assert_int_equal(r->n_match, 5);
    assert_string_equal(match_of(r, "service"), "sshd");
    assert_string_equal(match_of(r, "user"), "*");
    assert_string_equal(match_of(r, "odd key"), "a=b");
    assert_string_equal(r->label, "ssh-user-source");
    assert_int_equal(r->n_actor, 2);
    assert_string_equal(r->actor[0], "user");
    assert_string_equal(r->actor[1], "rhost");
    assert_int_equal(r->prefix6, 64);
    assert_int_equal(r->prefix4, 24);
    assert_int_equal(r->max_actors, 100000);
    assert_int_equal(r->when_full, RULES_FULL_EVICT);
    assert_int_equal(r->algo, RULES_ALGO_TOKEN_BUCKET);
    assert_int_equal(r->credit_limit, 5000000000LL);
    assert_int_equal(r->reset_seconds, -1);
    assert_int_equal(r->refill_amount, 1000);
    assert_int_equal(r->refill_seconds, 60);
    assert_true(r->strict);
    assert_int_equal(r->policy, RULES_POLICY_CONTINUE);
    assert_int_equal(r->source, RULES_SOURCE_PRIVILEGED);
    assert_false(r->fast_path);
    assert_true(r->no_reset);
    assert_string_equal(r->comment, "quote \" backslash \\ tab \t end");
    r = rule(cfg, 1);
    assert_int_equal(r->algo, RULES_ALGO_SLIDING_WINDOW);
    assert_int_equal(r->credit_limit, 32);
    assert_true(r->fast_path);
    assert_false(r->no_reset);
    r = rule(cfg, 2);
    assert_string_equal(match_of(r, "port"), "8080");
    assert_string_equal(match_of(r, "big"), "5000000000");
    assert_int_equal(r->when_full, RULES_FULL_ALLOW);
    assert_int_equal(rule(cfg, 1)->when_full, RULES_FULL_TABLE);
    assert_true(rule(cfg, 3)->is_default);
    config_free(cfg);
}

static void test_config_int_limits(void **state)
{
    struct config *cfg;

    (void)state;
    /* The largest literal without L is read exactly; so are L literals. */
    cfg = load_text(".conf", "rules = ( { match = { n = -2147483648; m = 2147483647; };\n"
                             "  credit_limit = 2147483647; reset_seconds = 315360000L; },\n"
                             "  { default = true; credit_limit = 0x7fffffff; "
                             "reset_seconds = 0; } );\n");
    assert_string_equal(match_of(rule(cfg, 0), "n"), "-2147483648");
    assert_string_equal(match_of(rule(cfg, 0), "m"), "2147483647");
    assert_int_equal(rule(cfg, 0)->credit_limit, 2147483647);
    assert_int_equal(rule(cfg, 0)->reset_seconds, 315360000);
    assert_int_equal(rule(cfg, 1)->credit_limit, 2147483647);
    config_free(cfg);
}

static void test_config_quirks_ini(void **state)
{
    struct config *cfg = load_src("tests/fixtures/quirks.ini");
    const struct rules_rule_spec *r;

    (void)state;
    assert_int_equal(cfg->rules.n, 4);
    r = rule(cfg, 0);
    assert_int_equal(r->line, 4);
    assert_string_equal(match_of(r, "path"), "/a");
    assert_int_equal(r->credit_limit, 5);
    assert_int_equal(r->reset_seconds, 60);
    assert_string_equal(r->comment, "double \"quoted\" ; not a comment");
    assert_string_equal(r->label, "single-quoted");
    assert_int_equal(r->n_actor, 2);
    assert_string_equal(r->actor[0], "ip");
    assert_string_equal(r->actor[1], "user");
    assert_int_equal(r->policy, RULES_POLICY_CANARY);
    r = rule(cfg, 1);
    /* "\;" keeps a ';' in a section name; "key" alone means key="". */
    assert_string_equal(match_of(r, "path"), "/b;c");
    assert_string_equal(match_of(r, "key"), "");
    assert_int_equal(r->credit_limit, 7);
    assert_int_equal(r->reset_seconds, 7);
    assert_string_equal(r->comment, "'it''s'");
    assert_int_equal(r->algo, RULES_ALGO_TOKEN_BUCKET);
    assert_int_equal(r->refill_amount, 2);
    assert_int_equal(r->refill_seconds, 30);
    assert_true(r->strict);
    assert_false(r->fast_path);
    assert_int_equal(r->source, RULES_SOURCE_PRIVILEGED);
    assert_int_equal(r->prefix4, 24);
    assert_int_equal(r->prefix6, 48);
    assert_int_equal(r->max_actors, 1000);
    r = rule(cfg, 2);
    assert_string_equal(match_of(r, "path"), "/index.html");
    assert_int_equal(r->policy, RULES_POLICY_CONTINUE);
    assert_null(r->comment);
    config_free(cfg);
}

static void test_config_crlf_ini(void **state)
{
    struct config *crlf = load_text(".ini", "[method=GET path=/status]\r\n"
                                            "creditLimit = 1000\r\n"
                                            "resetSeconds = 60 ; c\r\n"
                                            "comment = 'x'\r\n"
                                            "\r\n"
                                            "[default]\r\n"
                                            "creditLimit = 0\r\n"
                                            "resetSeconds = 0\r\n");
    struct config *lf = load_text(".ini", "[method=GET path=/status]\n"
                                          "creditLimit = 1000\n"
                                          "resetSeconds = 60\n"
                                          "comment = x\n"
                                          "[default]\n"
                                          "creditLimit = 0\n"
                                          "resetSeconds = 0\n");

    (void)state;
    assert_rules_equal(crlf, lf);
    assert_string_equal(rule(crlf, 0)->comment, "x");
    assert_int_equal(rule(crlf, 1)->line, 6);
    config_free(crlf);
    config_free(lf);
}

static void test_config_long_lines(void **state)
{
    size_t n = 300000;
    char *text = malloc(2 * n + 256);
    struct config *cfg;
    size_t len;

    (void)state;
    assert_non_null(text);
    len = (size_t)sprintf(text, "[method=GET path=/");
    memset(text + len, 'p', n);
    len += n;
    len += (size_t)sprintf(text + len, "]\ncreditLimit = 1\nresetSeconds = 1\ncomment = '");
    memset(text + len, 'c', n);
    len += n;
    sprintf(text + len, "'\n[default]\ncreditLimit = 0\nresetSeconds = 0\n");
    cfg = load_text(".ini", text);
    assert_int_equal(strlen(match_of(rule(cfg, 0), "path")), n + 1);
    assert_int_equal(strlen(rule(cfg, 0)->comment), n);
    assert_int_equal(rule(cfg, 1)->line, 5);
    config_free(cfg);
    free(text);
}

static void test_config_extensions_json(void **state)
{
    struct config *cfg = load_src("tests/fixtures/extensions.json");
    const struct rules_rule_spec *r;

    (void)state;
    assert_int_equal(cfg->rules.n, 2);
    r = rule(cfg, 0);
    assert_int_equal(r->line, 3);
    assert_string_equal(match_of(r, "port"), "22");
    assert_string_equal(match_of(r, "ratio"), "0.5");
    assert_string_equal(match_of(r, "flag"), "true");
    assert_string_equal(r->label, "ssh");
    assert_int_equal(r->n_actor, 2);
    assert_string_equal(r->actor[1], "rhost");
    assert_int_equal(r->algo, RULES_ALGO_TOKEN_BUCKET);
    assert_true(r->strict);
    assert_true(r->no_reset);
    assert_int_equal(r->policy, RULES_POLICY_CONTINUE);
    assert_int_equal(r->source, RULES_SOURCE_PRIVILEGED);
    assert_int_equal(r->prefix4, 32);
    assert_int_equal(r->prefix6, 64);
    assert_int_equal(r->max_actors, 500);
    assert_int_equal(r->when_full, RULES_FULL_EVICT);
    assert_null(r->comment);
    /* "operation" may be left out of the default rule. */
    assert_true(rule(cfg, 1)->is_default);
    assert_int_equal(rule(cfg, 1)->line, 24);
    config_free(cfg);
}

static void test_config_extension_case(void **state)
{
    struct config *cfg = load_text(".INI", "[default]\ncreditLimit = 1\nresetSeconds = 0\n");

    (void)state;
    assert_int_equal(cfg->format, CONFIG_FORMAT_INI);
    config_free(cfg);
}

/* ---- errors ------------------------------------------------------------ */

/* The lines of @path holding "ERROR" (up to @max of them); returns how many. */
static unsigned marker_lines(const char *path, unsigned *ret, unsigned max)
{
    char line[4096];
    unsigned n = 0, k = 0;
    FILE *f = fopen(path, "r");

    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        n++;
        if (strstr(line, "ERROR") && k < max)
            ret[k++] = n;
    }
    fclose(f);
    return k;
}

/* The first line of @path holding "ERROR", or 0. */
static unsigned marker_line(const char *path)
{
    unsigned line = 0;

    marker_lines(path, &line, 1);
    return line;
}

/*
 * Loads fixture @rel expecting -EINVAL and one problem at @line (0: the
 * line marked ERROR in the file) whose message contains @text.
 */
static void expect_error_at(const char *rel, unsigned line, const char *text)
{
    struct config *cfg = NULL;
    char path[1024];
    struct diag d;
    bool found = false;

    src_path(path, sizeof(path), rel);
    if (line == 0)
        line = marker_line(path);
    diag_init(&d);
    assert_int_equal(config_load(path, &cfg, &d), -EINVAL);
    assert_null(cfg);
    assert_true(d.n >= 1);
    for (size_t i = 0; i < d.n; i++) {
        char msg[1024];

        diag_format(&d, i, msg, sizeof(msg));
        if (strcmp(d.e[i].file, path) == 0 && d.e[i].line == line &&
            strstr(d.e[i].msg, text))
            found = true;
        else
            print_message("other problem: %s\n", msg);
    }
    if (!found) {
        char msg[1024];

        diag_format(&d, 0, msg, sizeof(msg));
        fail_msg("%s: wanted \"%s\" at line %u, got: %s", rel, text, line, msg);
    }
}

static void expect_error(const char *rel, const char *text)
{
    expect_error_at(rel, 0, text);
}

static void test_config_error_unknown_setting(void **state)
{
    (void)state;
    expect_error("tests/fixtures/bad-unknown-setting.conf", "unknown setting 'servr'");
    expect_error("tests/fixtures/bad-server-typo.conf", "unknown setting 'server.max_conections'");
    expect_error_at("tests/fixtures/bad-toplevel.json", 3, "unknown setting 'defualt'");
}

/* server.tls (docs/security.md): a "tls:" address needs it, at the listen line. */
static void test_config_error_tls(void **state)
{
    (void)state;
    expect_error_at("tests/fixtures/bad-tls-listen.conf", 2,
                    "\"resp:tls:127.0.0.1:6380\" is TLS: it needs a server.tls group");
    expect_error_at("tests/fixtures/bad-tls-group.conf", 3,
                    "server.tls needs certificate_file and key_file");
    expect_error_at("tests/fixtures/bad-tls-version.conf", 5,
                    "min_version must be \"TLS1.2\" or \"TLS1.3\"");
}

static void test_config_error_rule_typo(void **state)
{
    (void)state;
    expect_error("tests/fixtures/bad-rule-typo.conf", "unknown rule setting 'credit_limt'");
    expect_error("tests/fixtures/bad-camel-case.conf", "did you mean 'credit_limit'");
    expect_error("tests/fixtures/bad-typo.ini", "unknown setting 'resetSecnds'");
    expect_error_at("tests/fixtures/bad-typo.json", 7, "unknown setting 'resetSecond'");
    expect_error("tests/fixtures/bad-array.ini", "arrays");
}

static void test_config_error_not_integer(void **state)
{
    (void)state;
    expect_error("tests/fixtures/bad-float.conf", "credit_limit must be an integer");
    expect_error("tests/fixtures/bad-string-int.conf", "credit_limit must be an integer");
    expect_error("tests/fixtures/bad-int.ini", "creditLimit must be an integer");
    expect_error_at("tests/fixtures/bad-float.json", 5, "creditLimit must be an integer");
    expect_error("tests/fixtures/bad-match-value.conf", "match value of 'weight'");
}

static void test_config_error_huge_int(void **state)
{
    (void)state;
    expect_error("tests/fixtures/bad-huge-int.conf", "L suffix");
    expect_error("tests/fixtures/bad-huge-int64.conf", "out of range");
    expect_error("tests/fixtures/bad-too-large.conf", "reset_seconds is out of range");
    expect_error_at("tests/fixtures/bad-huge.json", 5, "too big integer");
}

/*
 * Loads fixture @rel expecting -EINVAL and exactly one problem on each
 * line marked ERROR, none elsewhere; returns the problems.
 */
static void expect_marked(const char *rel, struct diag *d)
{
    struct config *cfg = NULL;
    unsigned marked[DIAG_MAX], n_marked;
    char path[1024];

    src_path(path, sizeof(path), rel);
    n_marked = marker_lines(path, marked, DIAG_MAX);
    diag_init(d);
    assert_int_equal(config_load(path, &cfg, d), -EINVAL);
    assert_null(cfg);
    for (size_t i = 0; i < d->n; i++) {
        char msg[1024];

        diag_format(d, i, msg, sizeof(msg));
        print_message("problem: %s\n", msg);
    }
    assert_int_equal(d->n, n_marked);
    for (size_t i = 0; i < d->n; i++)
        assert_int_equal(d->e[i].line, marked[i]);
}

/* Every out-of-range number in one pass, also after one libconfig misreads. */
static void test_config_error_every_number(void **state)
{
    struct diag d;

    (void)state;
    expect_marked("tests/fixtures/bad-numbers.conf", &d);
    assert_non_null(strstr(d.e[0].msg, "L suffix"));
    assert_non_null(strstr(d.e[1].msg, "reset_seconds must not be negative"));
    assert_non_null(strstr(d.e[2].msg, "max_actors must not be negative"));
}

/* A native typo gets a "did you mean" in every group, as INI and JSON do. */
static void test_config_error_native_typos(void **state)
{
    static const char *const want[] = {
        "'server.max_conections' (did you mean 'max_connections'?)",
        "'table.slot' (did you mean 'slots'?)",
        "'store.mdoe' (did you mean 'mode'?)",
        "'redis.timout_ms' (did you mean 'timeout_ms'?)",
        "'metrics.lisen' (did you mean 'listen'?)",
        "'statsd.intervl_ms' (did you mean 'interval_ms'?)",
        "'reset_secnds' (did you mean 'reset_seconds'?)",
    };
    struct diag d;

    (void)state;
    expect_marked("tests/fixtures/bad-native-typos.conf", &d);
    assert_int_equal(d.n, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < d.n; i++) {
        if (!strstr(d.e[i].msg, want[i]))
            fail_msg("problem %zu: wanted \"%s\", got \"%s\"", i, want[i], d.e[i].msg);
    }
    expect_error("tests/fixtures/bad-rule-typo.conf",
                 "unknown rule setting 'credit_limt' (did you mean 'credit_limit'?)");
    expect_error("tests/fixtures/bad-typo.ini",
                 "unknown setting 'resetSecnds' (did you mean 'resetSeconds'?)");
    expect_error_at("tests/fixtures/bad-typo.json", 7,
                    "unknown setting 'resetSecond' (did you mean 'resetSeconds'?)");
}

static void round_trip(const struct config *cfg);

/* metrics.names: "prometheus" (the default) or "divvy", nothing else;
 * metrics.privileged: false by default, true or false only.  Both are
 * written back by divvyctl convert with the rest of metrics { }. */
static void test_config_metrics_names(void **state)
{
    static const char rules[] = "rules = ( { default = true; credit_limit = 1; "
                                "reset_seconds = 1; } );\n";
    char text[512];
    struct config *cfg;

    (void)state;
    cfg = load_text(".conf", rules);
    assert_false(cfg->metrics_divvy_names);
    assert_false(cfg->metrics_privileged);
    config_free(cfg);
    snprintf(text, sizeof(text), "metrics = { names = \"divvy\"; };\n%s", rules);
    cfg = load_text(".conf", text);
    assert_true(cfg->metrics_divvy_names);
    config_free(cfg);
    snprintf(text, sizeof(text), "metrics = { names = \"prometheus\"; };\n%s", rules);
    cfg = load_text(".conf", text);
    assert_false(cfg->metrics_divvy_names);
    config_free(cfg);
    snprintf(text, sizeof(text), "metrics = { listen = \"tcp:127.0.0.1:9321\"; path = \"/m\";\n"
             "  names = \"divvy\"; privileged = true; };\n%s", rules);
    cfg = load_text(".conf", text);
    assert_true(cfg->metrics_privileged);
    round_trip(cfg);
    config_free(cfg);
    snprintf(text, sizeof(text), "metrics = { names = \"Divvy\"; };\n%s", rules);
    load_text_error(".conf", text, 1, "metrics.names must be \"prometheus\" or \"divvy\"");
    snprintf(text, sizeof(text), "metrics = {\n  privileged = \"yes\"; };\n%s", rules);
    load_text_error(".conf", text, 2, "metrics.privileged must be true or false");
}

static void test_config_error_negative(void **state)
{
    (void)state;
    expect_error("tests/fixtures/bad-negative.conf", "reset_seconds must not be negative");
}

static void test_config_error_bad_policy(void **state)
{
    (void)state;
    expect_error("tests/fixtures/bad-policy.conf", "match_policy must be");
    expect_error("tests/fixtures/bad-policy.ini", "\"'canary'\"");
}

static void test_config_error_duplicate_ini_key(void **state)
{
    (void)state;
    expect_error("tests/fixtures/bad-dup-key.ini", "'creditLimit' repeated");
    expect_error("tests/fixtures/bad-dup-section.ini", "repeated (first at line 1)");
    /* A key repeated inside a section name reaches rules_validate. */
    expect_error("tests/fixtures/bad-dup-match.ini", "repeats");
}

static void test_config_error_missing_rules(void **state)
{
    (void)state;
    expect_error_at("tests/fixtures/bad-no-rules.conf", 0, "missing 'rules' list");
}

static void test_config_error_syntax(void **state)
{
    (void)state;
    expect_error("tests/fixtures/bad-syntax.conf", "syntax error");
    expect_error_at("tests/fixtures/bad-syntax.json", 4, "unexpected token");
}

static void test_config_error_settings(void **state)
{
    (void)state;
    expect_error("tests/fixtures/bad-listen.conf", "must start with tcp:, tls: or unix:");
    expect_error("tests/fixtures/bad-when-full.conf", "when_full must be");
    expect_error("tests/fixtures/bad-socket-mode.conf", "socket_mode must be an octal string");
    expect_error("tests/fixtures/bad-include.conf", "@include");
    expect_error("tests/fixtures/bad-outside.ini", "outside a section");
}

static void test_config_error_validation(void **state)
{
    (void)state;
    expect_error("tests/fixtures/bad-unreachable.conf", "unreachable");
    expect_error("tests/fixtures/bad-no-default.conf", "no default rule");
    expect_error("tests/fixtures/bad-default-not-last.ini", "must be the last rule");
}

static void test_config_error_missing_file(void **state)
{
    struct config *cfg = NULL;
    struct diag d;

    (void)state;
    diag_init(&d);
    assert_int_equal(config_load("/nonexistent/divvy.conf", &cfg, &d), -ENOENT);
    assert_null(cfg);
    assert_int_equal(d.n, 1);
    assert_string_equal(d.e[0].file, "/nonexistent/divvy.conf");
}

static void test_config_error_many_reported(void **state)
{
    const char text[] = "rules = (\n"
                        "  { match = { a = \"1\"; }; credit_limit = 1.5; reset_seconds = 1; },\n"
                        "  { match = { b = \"1\"; }; credit_limit = 1; reset_seconds = -1; },\n"
                        "  { default = true; credit_limit = 0; reset_seconds = 0; bogus = 1; }\n"
                        ");\n";
    struct config *cfg = NULL;
    char path[1024];
    struct diag d;

    (void)state;
    tmp_write(path, sizeof(path), ".conf", text, strlen(text));
    diag_init(&d);
    assert_int_equal(config_load(path, &cfg, &d), -EINVAL);
    unlink(path);
    assert_int_equal(d.n, 3);
    assert_int_equal(d.e[0].line, 2);
    assert_int_equal(d.e[1].line, 3);
    assert_int_equal(d.e[2].line, 4);
}

static void test_config_error_server_ranges(void **state)
{
    const char text[] = "server = {\n"
                        "  workers = 2000;\n"
                        "  state_dir = \"relative\";\n"
                        "  socket_mode = \"0999\";\n"
                        "  max_output_bytes = 1;\n"
                        "  listen = ( \"tcp:h:0\", \"unix:\", \"tcp:host\" );\n"
                        "};\n"
                        "table = { slots = 1; fast_slots = 0x100000000L; "
                        "privileged_slots = 63; };\n"
                        "rules = ( { default = true; credit_limit = 0; reset_seconds = 0; } );\n";
    static const unsigned lines[] = { 2, 3, 4, 5, 6, 6, 6, 8, 8, 8 };
    struct config *cfg = NULL;
    char path[1024];
    struct diag d;

    (void)state;
    tmp_write(path, sizeof(path), ".conf", text, strlen(text));
    diag_init(&d);
    assert_int_equal(config_load(path, &cfg, &d), -EINVAL);
    unlink(path);
    assert_int_equal(d.n, sizeof(lines) / sizeof(lines[0]));
    for (size_t i = 0; i < d.n; i++)
        assert_int_equal(d.e[i].line, lines[i]);
    assert_non_null(strstr(d.e[0].msg, "workers"));
    assert_non_null(strstr(d.e[7].msg, "slots"));
    assert_non_null(strstr(d.e[9].msg, "privileged_slots"));
}

/* Admission settings: values, the budgets config_connections() derives, and
 * bad values rejected with their line. */
static void test_config_admission(void **state)
{
    const char text[] = "server = {\n"
                        "  tcp_connections = 100; unix_connections = 20;\n"
                        "  reserved_connections = 3; tcp_connections_per_address = 7;\n"
                        "  unix_connections_per_uid = 5; idle_timeout_ms = 0;\n"
                        "  request_timeout_ms = 2500; output_budget_bytes = 65536;\n"
                        "  socket_buffer_bytes = 0;\n"
                        "};\n"
                        "rules = ( { default = true; credit_limit = 0; reset_seconds = 0; } );\n";
    const char bad[] = "server = {\n"
                       "  reserved_connections = 0;\n"
                       "  unix_connections_per_uid = -1;\n"
                       "  idle_timeout_ms = \"60\";\n"
                       "  output_budget_bytes = 10;\n"
                       "  tcp_connection = 5;\n"
                       "};\n"
                       "rules = ( { default = true; credit_limit = 0; reset_seconds = 0; } );\n";
    static const unsigned lines[] = { 2, 3, 4, 5, 6 };
    struct config *cfg = load_text(".conf", text), *old;
    unsigned tcp, un, total;
    struct diag d;

    (void)state;
    assert_int_equal(cfg->admit.reserved_connections, 3);
    assert_int_equal(cfg->admit.per_address, 7);
    assert_int_equal(cfg->admit.per_uid, 5);
    assert_int_equal(cfg->admit.idle_timeout_ms, 0);
    assert_int_equal(cfg->admit.request_timeout_ms, 2500);
    assert_int_equal(cfg->admit.output_budget_bytes, 65536);
    assert_int_equal(cfg->admit.socket_buffer_bytes, 0);
    config_connections(cfg, &tcp, &un, &total);
    assert_int_equal(tcp, 100);
    assert_int_equal(un, 20);
    assert_int_equal(total, 120);
    round_trip(cfg);
    config_free(cfg);

    /* max_connections alone keeps its old meaning for both listeners. */
    old = load_text(".conf",
                    "server = { max_connections = 50; };\n"
                    "rules = ( { default = true; credit_limit = 0; reset_seconds = 0; } );\n");
    config_connections(old, &tcp, &un, &total);
    assert_int_equal(tcp, 50);
    assert_int_equal(un, 50);
    assert_int_equal(total, 50);
    config_free(old);
    old = load_text(".ini", "[default]\ncreditLimit = 1\nresetSeconds = 0\n");
    config_connections(old, &tcp, &un, &total);
    assert_int_equal(tcp, 4096);
    assert_int_equal(un, 1024);
    assert_int_equal(total, 5120);
    config_free(old);

    load_refused(bad, lines, sizeof(lines) / sizeof(lines[0]), &d);
    assert_non_null(strstr(d.e[0].msg, "reserved_connections"));
    assert_non_null(strstr(d.e[4].msg, "server.tcp_connection"));
}

/* ---- writing ----------------------------------------------------------- */

/* Writes @cfg as divvy.conf, loads it back and compares. */
static void round_trip(const struct config *cfg)
{
    struct config *again;
    char path[1024];
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    assert_non_null(f);
    assert_int_equal(config_write_libconfig(cfg, f), 0);
    assert_int_equal(fclose(f), 0);
    tmp_write(path, sizeof(path), ".conf", text, len);
    again = load_ok(path);
    unlink(path);
    free(text);
    assert_int_equal(again->format, CONFIG_FORMAT_LIBCONFIG);
    assert_rules_equal(cfg, again);
    assert_int_equal(again->n_listen, cfg->n_listen);
    for (size_t i = 0; i < cfg->n_listen; i++)
        assert_string_equal(again->listen[i], cfg->listen[i]);
    assert_string_equal(again->state_dir, cfg->state_dir);
    assert_string_equal(again->admin_group, cfg->admin_group);
    assert_int_equal(again->workers, cfg->workers);
    assert_int_equal(again->max_connections, cfg->max_connections);
    assert_int_equal(again->max_output_bytes, cfg->max_output_bytes);
    assert_int_equal(again->admit.tcp_connections, cfg->admit.tcp_connections);
    assert_int_equal(again->admit.unix_connections, cfg->admit.unix_connections);
    assert_int_equal(again->admit.reserved_connections, cfg->admit.reserved_connections);
    assert_int_equal(again->admit.per_address, cfg->admit.per_address);
    assert_int_equal(again->admit.per_uid, cfg->admit.per_uid);
    assert_int_equal(again->admit.idle_timeout_ms, cfg->admit.idle_timeout_ms);
    assert_int_equal(again->admit.request_timeout_ms, cfg->admit.request_timeout_ms);
    assert_int_equal(again->admit.output_budget_bytes, cfg->admit.output_budget_bytes);
    assert_int_equal(again->admit.socket_buffer_bytes, cfg->admit.socket_buffer_bytes);
    assert_int_equal(again->socket_mode, cfg->socket_mode);
    assert_int_equal(again->table_slots, cfg->table_slots);
    assert_int_equal(again->fast_table_slots, cfg->fast_table_slots);
    assert_int_equal(again->privileged_table_slots, cfg->privileged_table_slots);
    assert_int_equal(again->when_full, cfg->when_full);
    assert_int_equal(again->adhoc_slots, cfg->adhoc_slots);
    assert_int_equal(again->adhoc_max_buckets, cfg->adhoc_max_buckets);
    assert_true(str_eq(again->metrics_listen, cfg->metrics_listen));
    assert_true(str_eq(again->metrics_path, cfg->metrics_path));
    assert_int_equal(again->metrics_divvy_names, cfg->metrics_divvy_names);
    assert_int_equal(again->metrics_privileged, cfg->metrics_privileged);
    assert_int_equal(again->adhoc_reserved_buckets, cfg->adhoc_reserved_buckets);
    assert_int_equal(again->adhoc_buckets_per_peer, cfg->adhoc_buckets_per_peer);
    config_free(again);
}

/* Loads @text (libconfig) expecting -EINVAL and exactly the problems
 * @msgs (substrings) at @lines, in order. */
static void expect_problems(const char *text, size_t n, const unsigned *lines,
                            const char *const *msgs)
{
    struct config *cfg = NULL;
    char path[1024];
    struct diag d;

    tmp_write(path, sizeof(path), ".conf", text, strlen(text));
    diag_init(&d);
    assert_int_equal(config_load(path, &cfg, &d), -EINVAL);
    unlink(path);
    assert_null(cfg);
    assert_int_equal(d.n, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(d.e[i].line, lines[i]);
        if (!strstr(d.e[i].msg, msgs[i]))
            fail_msg("line %u: \"%s\", wanted \"%s\"", lines[i], d.e[i].msg, msgs[i]);
    }
}

/* A rule's when_full (docs/rules.md "Full"): the INI spelling (native and
 * JSON: tests/fixtures/full.conf, extensions.json), the compiled rule, the
 * loader's errors and what validation refuses, each at its line. */
static void test_config_rule_when_full(void **state)
{
    static const char bad_values[] =
        "rules = (\n"
        "  { match = { a = \"1\"; }; credit_limit = 1; reset_seconds = 1;\n"
        "    when_full = \"evicts\"; },\n"
        "  { match = { a = \"2\"; }; credit_limit = 1; reset_seconds = 1; when_full = 1; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    static const unsigned value_lines[] = { 3, 4 };
    static const char *const value_msgs[] = {
        "when_full must be \"deny\", \"allow\" or \"evict\", not \"evicts\"",
        "when_full must be a string",
    };
    static const char bad_rules[] =
        "rules = (\n"
        "  { match = { a = \"2\"; }; credit_limit = 1; reset_seconds = 1;"
        " when_full = \"evict\"; },\n"
        "  { match = { a = \"3\"; }; credit_limit = 1; reset_seconds = 1; actor = \"u\";\n"
        "    source = \"privileged\"; when_full = \"deny\"; },\n"
        "  { match = { a = \"4\"; }; credit_limit = 1; reset_seconds = 1; actor = \"u\";\n"
        "    store = \"lease\"; when_full = \"evict\"; },\n"
        "  { match = { a = \"5\"; }; credit_limit = 1; reset_seconds = 1; actor = \"u\";\n"
        "    source = \"privileged\"; when_full = \"evict\"; },\n"
        "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
        ");\n";
    static const unsigned rule_lines[] = { 2, 3, 5 };
    static const char *const rule_msgs[] = {
        "when_full \"evict\" needs an actor",
        "when_full \"deny\" does not apply to a source = privileged rule",
        "when_full \"evict\" does not apply to store \"lease\"",
    };
    struct config *cfg = load_text(".ini", "[ip=*]\ncreditLimit = 1\nresetSeconds = 60\n"
                                           "actorField = ip\nwhenFull = evict\n"
                                           "[default]\ncreditLimit = 0\nresetSeconds = 0\n");
    struct rules *rules = NULL;
    struct rules_rule rr;

    (void)state;
    assert_int_equal(rule(cfg, 0)->when_full, RULES_FULL_EVICT);
    assert_int_equal(rules_compile(&cfg->rules, 1, &rules, NULL), 0);
    assert_int_equal(rules_get(rules, 0, &rr), 0);
    assert_int_equal(rr.when_full, RULES_FULL_EVICT);
    assert_int_equal(rules_get(rules, 1, &rr), 0);
    assert_int_equal(rr.when_full, RULES_FULL_TABLE);
    rules_free(rules);
    round_trip(cfg);
    config_free(cfg);
    expect_problems(bad_values, 2, value_lines, value_msgs);
    expect_problems(bad_rules, 3, rule_lines, rule_msgs);
}

/* "resp:" listen addresses (docs/resp.md) and the ad-hoc bucket settings:
 * read, checked, written back; a bad address after the prefix is refused. */
static void test_config_resp_listen_adhoc(void **state)
{
    const char text[] = "server = { listen = [ \"resp:unix:/run/r.sock\",\n"
                        "  \"resp:tcp:127.0.0.1:6380\", \"unix:/run/d.sock\" ];\n"
                        "  state_dir = \"/run/divvy\"; admin_group = \"a\"; };\n"
                        "table = { adhoc_slots = 1000; adhoc_max_buckets = 500;\n"
                        "  adhoc_reserved_buckets = 40; adhoc_buckets_per_peer = 60; };\n"
                        "rules = ( { default = true; credit_limit = 0; reset_seconds = 0; } );\n";
    const char bad_text[] = "server = { listen = [ \"resp:udp:1.2.3.4:5\" ]; };\n"
                            "table = { adhoc_slots = 0; adhoc_buckets_per_peer = -1; };\n"
                            "rules = ( { default = true; credit_limit = 0;"
                            " reset_seconds = 0; } );\n";
    struct config *cfg = load_text(".conf", text);
    enum config_proto proto;
    char path[1024];
    struct config *bad;
    struct diag d;

    (void)state;
    assert_int_equal(cfg->n_listen, 3);
    assert_string_equal(config_listen_proto(cfg->listen[0], &proto), "unix:/run/r.sock");
    assert_int_equal(proto, CONFIG_PROTO_RESP);
    assert_string_equal(config_listen_proto(cfg->listen[2], &proto), "unix:/run/d.sock");
    assert_int_equal(proto, CONFIG_PROTO_DIVVY);
    assert_int_equal(cfg->adhoc_slots, 1000);
    assert_int_equal(cfg->adhoc_max_buckets, 500);
    assert_int_equal(cfg->adhoc_reserved_buckets, 40);
    assert_int_equal(cfg->adhoc_buckets_per_peer, 60);
    round_trip(cfg);
    config_free(cfg);
    tmp_write(path, sizeof(path), ".conf", bad_text, sizeof(bad_text) - 1);
    diag_init(&d);
    assert_int_equal(config_load(path, &bad, &d), -EINVAL);
    unlink(path);
    assert_true(d.n >= 3);
    assert_non_null(strstr(d.e[0].msg, "resp:udp:1.2.3.4:5"));
    /* A negative share is refused at its line. */
    {
        bool seen = false;

        for (size_t i = 0; i < d.n; i++)
            seen |= strstr(d.e[i].msg, "adhoc_buckets_per_peer") != NULL && d.e[i].line == 2;
        assert_true(seen);
    }
}

static void test_config_round_trip_ini(void **state)
{
    struct config *cfg = load_src("etc/divvy.ini");

    (void)state;
    round_trip(cfg);
    config_free(cfg);
}

static void test_config_round_trip_everything(void **state)
{
    static const char *const files[] = {
        "etc/divvy.json", "etc/divvy.conf", "tests/fixtures/full.conf",
        "tests/fixtures/quirks.ini", "tests/fixtures/extensions.json",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        struct config *cfg = load_src(files[i]);

        round_trip(cfg);
        config_free(cfg);
    }
}

static void test_config_round_trip_odd_strings(void **state)
{
    struct config *cfg = load_text(".json",
        "{ \"overrides\": [ { \"operation\": { \"9 lives\": \"a\\\"b\\u0001\\n\\u00e9\","
        " \"x\": \"*\" }, \"creditLimit\": 3000000000, \"resetSeconds\": 1,"
        " \"comment\": \"tab\\there \\\\ back\" } ],"
        " \"default\": { \"creditLimit\": 0, \"resetSeconds\": 0 } }");

    (void)state;
    assert_string_equal(match_of(rule(cfg, 0), "9 lives"), "a\"b\x01\n\xc3\xa9");
    assert_string_equal(rule(cfg, 0)->comment, "tab\there \\ back");
    round_trip(cfg);
    config_free(cfg);
}

/* max_debit (docs/rules.md "DEBIT bounds"): read in the three formats, not
 * set is -1 (the credit_limit), written back only when set, and a bad value
 * is refused at its line. */
static void test_config_max_debit(void **state)
{
    const char bad[] = "rules = (\n"
                       "  { match = { a = \"1\"; }; credit_limit = 5; reset_seconds = 60;\n"
                       "    max_debit = -1; },\n"
                       "  { match = { a = \"2\"; }; credit_limit = 5; reset_seconds = 60;\n"
                       "    max_debit = 1000000000001L; },\n"
                       "  { match = { a = \"3\"; }; credit_limit = 5; reset_seconds = 60;\n"
                       "    max_debit = \"7\"; },\n"
                       "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
                       ");\n";
    static const unsigned lines[] = { 3, 5, 7 };
    struct config *cfg;
    struct diag d;

    (void)state;
    cfg = load_text(".conf", "rules = (\n"
                             "  { match = { a = \"1\"; }; credit_limit = 5; reset_seconds = 60;\n"
                             "    max_debit = 1000000000000L; },\n"
                             "  { match = { a = \"2\"; }; credit_limit = 5; reset_seconds = 60;\n"
                             "    max_debit = 0; },\n"
                             "  { match = { a = \"3\"; }; credit_limit = 5;"
                             " reset_seconds = 60; },\n"
                             "  { default = true; credit_limit = 0; reset_seconds = 0; }\n"
                             ");\n");
    assert_int_equal(rule(cfg, 0)->max_debit, 1000000000000LL);
    assert_int_equal(rule(cfg, 1)->max_debit, 0);
    assert_int_equal(rule(cfg, 2)->max_debit, -1);
    round_trip(cfg);
    config_free(cfg);
    cfg = load_text(".ini", "[a=1]\ncreditLimit = 5\nresetSeconds = 60\nmaxDebit = 12\n"
                            "[default]\ncreditLimit = 0\nresetSeconds = 0\n");
    assert_int_equal(rule(cfg, 0)->max_debit, 12);
    round_trip(cfg);
    config_free(cfg);
    cfg = load_text(".json", "{ \"overrides\": [ { \"operation\": { \"a\": \"1\" },"
                             " \"creditLimit\": 5, \"resetSeconds\": 60, \"maxDebit\": 3 } ],"
                             " \"default\": { \"creditLimit\": 0, \"resetSeconds\": 0 } }");
    assert_int_equal(rule(cfg, 0)->max_debit, 3);
    config_free(cfg);

    load_refused(bad, lines, sizeof(lines) / sizeof(lines[0]), &d);
    assert_non_null(strstr(d.e[0].msg, "max_debit must not be negative"));
    assert_non_null(strstr(d.e[1].msg, "max_debit is out of range (at most 1000000000000)"));
    assert_non_null(strstr(d.e[2].msg, "max_debit must be an integer"));
}

static void test_config_write_unrepresentable_key(void **state)
{
    struct config *cfg = load_text(".json",
        "{ \"overrides\": [ { \"operation\": { \"a=b\": \"c\" }, \"creditLimit\": 1,"
        " \"resetSeconds\": 1 } ], \"default\": { \"creditLimit\": 0, \"resetSeconds\": 0 } }");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    (void)state;
    assert_non_null(f);
    assert_int_equal(config_write_libconfig(cfg, f), -EINVAL);
    fclose(f);
    assert_int_equal(len, 0);
    free(text);
    config_free(cfg);
}

/* A password read from password_file is written back as the file's name, never itself. */
static void test_config_password_file_written_by_name(void **state)
{
    char secret_path[1024], conf[2048];
    struct config *cfg;
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    (void)state;
    tmp_write(secret_path, sizeof(secret_path), ".pw", "not-in-the-output\n", 18);
    assert_int_equal(chmod(secret_path, 0600), 0);
    snprintf(conf, sizeof(conf),
             "redis = { password_file = \"%s\"; };\n"
             "rules = ( { default = true; credit_limit = 0; reset_seconds = 0; } );\n",
             secret_path);
    cfg = load_text(".conf", conf);
    assert_string_equal(cfg->redis.password, "not-in-the-output");
    assert_string_equal(cfg->redis.password_file, secret_path);
    f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(config_write_libconfig(cfg, f), 0);
    assert_int_equal(fclose(f), 0);
    assert_null(strstr(text, "not-in-the-output"));
    assert_non_null(strstr(text, "password_file = "));
    free(text);
    config_free(cfg);
    unlink(secret_path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_example_ini_values),
        cmocka_unit_test(test_config_examples_identical),
        cmocka_unit_test(test_config_json_lines),
        cmocka_unit_test(test_config_conf_lines),
        cmocka_unit_test(test_config_full_native),
        cmocka_unit_test(test_config_int_limits),
        cmocka_unit_test(test_config_quirks_ini),
        cmocka_unit_test(test_config_crlf_ini),
        cmocka_unit_test(test_config_long_lines),
        cmocka_unit_test(test_config_extensions_json),
        cmocka_unit_test(test_config_extension_case),
        cmocka_unit_test(test_config_error_unknown_setting),
        cmocka_unit_test(test_config_error_tls),
        cmocka_unit_test(test_config_error_rule_typo),
        cmocka_unit_test(test_config_error_not_integer),
        cmocka_unit_test(test_config_error_huge_int),
        cmocka_unit_test(test_config_error_every_number),
        cmocka_unit_test(test_config_error_native_typos),
        cmocka_unit_test(test_config_metrics_names),
        cmocka_unit_test(test_config_error_negative),
        cmocka_unit_test(test_config_error_bad_policy),
        cmocka_unit_test(test_config_error_duplicate_ini_key),
        cmocka_unit_test(test_config_error_missing_rules),
        cmocka_unit_test(test_config_error_syntax),
        cmocka_unit_test(test_config_error_settings),
        cmocka_unit_test(test_config_rule_when_full),
        cmocka_unit_test(test_config_error_validation),
        cmocka_unit_test(test_config_error_missing_file),
        cmocka_unit_test(test_config_error_many_reported),
        cmocka_unit_test(test_config_error_server_ranges),
        cmocka_unit_test(test_config_admission),
        cmocka_unit_test(test_config_round_trip_ini),
        cmocka_unit_test(test_config_round_trip_everything),
        cmocka_unit_test(test_config_round_trip_odd_strings),
        cmocka_unit_test(test_config_resp_listen_adhoc),
        cmocka_unit_test(test_config_max_debit),
        cmocka_unit_test(test_config_write_unrepresentable_key),
        cmocka_unit_test(test_config_password_file_written_by_name),
    };

    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
