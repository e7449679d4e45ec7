/* SPDX-License-Identifier: MIT */
/*
 * Integration: the Redis password kept out of the config (docs/config.md
 * "Secrets"), against a real redis-server that requires it.  With
 * redis.password_file (an absolute path, and a systemd credential name
 * resolved in $CREDENTIALS_DIRECTORY) divvyd authenticates and counts in
 * Redis, and the password appears in none of STATS, RULES, EXPLAIN or its
 * log.  Refused with one file:line error each, by `divvyd --check` and by a
 * start: a missing file, a directory, a file readable by its group or by
 * others, an empty one, a relative path, a credential name without
 * $CREDENTIALS_DIRECTORY, password and password_file together,
 * sentinel_password_file without sentinels.  A wrong password in the file
 * is refused by Redis (on_redis_error decides), and shown nowhere either.
 * A reload reads the file again:
 * gone, the reload is refused with file:line and the old settings serve on.
 */
#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include "harness_redis.h"

static const char rules_text[] =
    "rules = (\n"
    "    { match = { path = \"/api\"; }; label = \"api\"; actor = \"user\";\n"
    "      credit_limit = 5; reset_seconds = 3600; },\n"
    "    { default = true; credit_limit = 0; reset_seconds = 0; }\n"
    ");\n";

/* The scratch dir of the test that runs now (password files): removed by the teardown. */
static char scratch[64];
static char password[64];

static int secret_setup(void **state)
{
    snprintf(scratch, sizeof(scratch), "/tmp/divvy-secret.XXXXXX");
    if (!mkdtemp(scratch))
        return -1;
    /* Unique per run, so a match in any output is this password. */
    snprintf(password, sizeof(password), "pw-%08x-%08x", harness_rand(), harness_rand());
    return harness_setup(state);
}

static int secret_teardown(void **state)
{
    int r = redis_teardown(state);

    unsetenv("CREDENTIALS_DIRECTORY");
    if (scratch[0]) {
        harness_rm_tree(scratch);
        scratch[0] = '\0';
    }
    return r;
}

/* Writes @text to scratch/@name with @mode; its path into @path. */
static void write_file(const char *name, const char *text, mode_t mode, char *path, size_t size)
{
    int fd;

    snprintf(path, size, "%s/%s", scratch, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

/* A strict config on @rs whose line 3 is "    @secret_line };"; free() it. */
static char *secret_config(const struct redis_srv *rs, const char *secret_line)
{
    char *text = NULL;

    if (asprintf(&text,
                 "store = { mode = \"strict\"; on_redis_error = \"closed\"; };\n"
                 "redis = { unix_socket = \"%s\"; timeout_ms = 2000;\n"
                 "    %s };\n%s",
                 rs ? rs->sock : "/nonexistent/redis.sock", secret_line, rules_text) < 0)
        return NULL;
    return text;
}

/* STATS, RULES and EXPLAIN over @c, and divvyd's log: none holds the password. */
static void assert_password_nowhere(struct harness_daemon *d, struct harness_conn *c)
{
    char buf[16384];

    CHECK(harness_multi(c, "STATS", buf, sizeof(buf)));
    assert_null(strstr(buf, password));
    CHECK(harness_multi(c, "RULES", buf, sizeof(buf)));
    assert_null(strstr(buf, password));
    CHECK(harness_multi(c, "EXPLAIN path=/api user=a", buf, sizeof(buf)));
    assert_null(strstr(buf, password));
    assert_int_equal(harness_log_contains(d, password), 0);
}

/* HITs counted in Redis (strict): the daemon authenticated. */
static void expect_counted_in_redis(struct harness_daemon *d, struct redis_srv *rs,
                                    struct harness_conn **ret)
{
    struct harness_conn *c;
    long long fallbacks;

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/api user=a", true, 4, 3599, 3600);
    redis_wait_state(c, "up");
    EXPECT_OK(c, "HIT path=/api user=a", true, 3, 3599, 3600);
    CHECK(harness_get_stat(c, "redis_fallbacks", &fallbacks));
    assert_int_equal(fallbacks, 0);
    /* The counter is in Redis: one key, and it took the two hits. */
    assert_int_equal(redis_int(rs, "DBSIZE"), 1);
    *ret = c;
}

static void test_redis_secret_password_file(void **state)
{
    struct redis_start_opts ro = { .password = password };
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    char file[HARNESS_PATH], line[HARNESS_PATH + 64], r[HARNESS_LINE], want[2 * HARNESS_PATH + 64];
    char text[128], *conf;

    (void)state;
    CHECK(redis_start_ex(&ro, &rs));
    /* As `echo pw > file` writes it: one trailing newline, not part of it. */
    snprintf(text, sizeof(text), "%s\n", password);
    write_file("redis-password", text, 0600, file, sizeof(file));
    snprintf(line, sizeof(line), "password_file = \"%s\";", file);
    conf = secret_config(rs, line);
    assert_non_null(conf);
    assert_null(strstr(conf, password));
    d = redis_divvyd(conf, 2);
    free(conf);
    expect_counted_in_redis(d, rs, &c);
    assert_password_nowhere(d, c);

    /* A reload reads the file again: gone, the reload is refused with file:line. */
    assert_int_equal(unlink(file), 0);
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    snprintf(want, sizeof(want), "ERR reload-failed \"%s:3: redis.password_file: %s: ", d->config,
             file);
    EXPECT_PREFIX(r, want);
    assert_non_null(strstr(r, "No such file or directory"));
    /* The old settings serve on. */
    EXPECT_OK(c, "HIT path=/api user=a", true, 2, 3599, 3600);
    /* Back, readable: the reload goes through. */
    write_file("redis-password", text, 0400, file, sizeof(file));
    CHECK(harness_cmd(c, "RELOAD", r, sizeof(r)));
    EXPECT_PREFIX(r, "OK reloaded");
    EXPECT_OK(c, "HIT path=/api user=a", true, 1, 3599, 3600);
    assert_password_nowhere(d, c);
    harness_close(c);
}

static void test_redis_secret_credential(void **state)
{
    struct redis_start_opts ro = { .password = password };
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    char creds[HARNESS_PATH], file[HARNESS_PATH + 32], *conf;
    int fd;

    (void)state;
    CHECK(redis_start_ex(&ro, &rs));
    /* What systemd's LoadCredential= makes: a private dir, a 0400 file. */
    snprintf(creds, sizeof(creds), "%s/credentials", scratch);
    assert_int_equal(mkdir(creds, 0700), 0);
    snprintf(file, sizeof(file), "%s/redis-password", creds);
    fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, password, strlen(password)), (ssize_t)strlen(password));
    close(fd);
    assert_int_equal(setenv("CREDENTIALS_DIRECTORY", creds, 1), 0);
    conf = secret_config(rs, "password_file = \"redis-password\";");
    assert_non_null(conf);
    d = redis_divvyd(conf, 1);
    free(conf);
    unsetenv("CREDENTIALS_DIRECTORY");
    expect_counted_in_redis(d, rs, &c);
    assert_password_nowhere(d, c);
    harness_close(c);
}

/* A wrong password in the file: Redis refuses, the hit is decided by
 * on_redis_error (closed), and neither password shows anywhere. */
static void test_redis_secret_wrong_password(void **state)
{
    struct redis_start_opts ro = { .password = password };
    struct redis_srv *rs;
    struct harness_daemon *d;
    struct harness_conn *c;
    char file[HARNESS_PATH], line[HARNESS_PATH + 64], wrong[80], *conf;
    uint64_t end;

    (void)state;
    CHECK(redis_start_ex(&ro, &rs));
    snprintf(wrong, sizeof(wrong), "wrong-%s", password);
    write_file("redis-password", wrong, 0600, file, sizeof(file));
    snprintf(line, sizeof(line), "password_file = \"%s\";", file);
    conf = secret_config(rs, line);
    assert_non_null(conf);
    d = redis_divvyd(conf, 1);
    free(conf);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/api user=a", false, 0, 0, 3600);
    /* The refusal is logged (Redis's words, not ours), never the password. */
    end = harness_now_ms() + 10000;
    while (harness_log_contains(d, "WRONGPASS") != 1 && harness_log_contains(d, "NOAUTH") != 1 &&
           harness_log_contains(d, "invalid password") != 1 && harness_now_ms() < end)
        harness_pause_ms(10);
    if (harness_now_ms() >= end) {
        harness_dump_log(d);
        fail_msg("divvyd never logged Redis's refusal of the password");
    }
    assert_int_equal(harness_log_contains(d, wrong), 0);
    assert_password_nowhere(d, c);
    assert_int_equal(redis_int(rs, "DBSIZE"), 0);
    harness_close(c);
}

/* `divvyd --check` on a config whose line 3 is @secret_line: exit 1 and
 * "CONF:3: @what" with @why in the same line, the only line. */
static void expect_check_refused(const char *secret_line, const char *what, const char *why)
{
    char conf_path[HARNESS_PATH], err[4096], want[HARNESS_PATH + 128], *conf, *nl;
    const char *args[] = { "--check", "--config", conf_path, NULL };
    int status;

    conf = secret_config(NULL, secret_line);
    assert_non_null(conf);
    write_file("divvy.conf", conf, 0644, conf_path, sizeof(conf_path));
    free(conf);
    CHECK(harness_run_divvyd(args, 10000, &status, NULL, 0, err, sizeof(err)));
    snprintf(want, sizeof(want), "%s:3: %s", conf_path, what);
    nl = strchr(err, '\n');
    if (status != 1 || strncmp(err, want, strlen(want)) != 0 || !nl || nl[1] != '\0' ||
        !strstr(err, why))
        fail_msg("divvyd --check with '%s': status %d, stderr:\n%s(want one line: %s ... %s)",
                 secret_line, status, err, want, why);
    assert_null(strstr(err, password));
}

static void test_redis_secret_refused(void **state)
{
    char file[HARNESS_PATH], line[HARNESS_PATH + 64], conf_path[HARNESS_PATH], err[4096];
    char want[2 * HARNESS_PATH + 128], *conf;
    const char *args[] = { "--config", conf_path, "--state-dir", scratch, "--listen", "", NULL };
    char listen[HARNESS_PATH + 16];
    int status;

    (void)state;
    snprintf(line, sizeof(line), "password_file = \"%s/missing\";", scratch);
    expect_check_refused(line, "redis.password_file: ", "No such file or directory");

    snprintf(line, sizeof(line), "password_file = \"%s\";", scratch);
    expect_check_refused(line, "redis.password_file: ", "not a regular file");

    write_file("group", password, 0640, file, sizeof(file));
    snprintf(line, sizeof(line), "password_file = \"%s\";", file);
    expect_check_refused(line, "redis.password_file: ", "readable by its group (mode 0640)");

    write_file("others", password, 0604, file, sizeof(file));
    snprintf(line, sizeof(line), "password_file = \"%s\";", file);
    expect_check_refused(line, "redis.password_file: ", "readable by others (mode 0604)");

    write_file("empty", "\n", 0600, file, sizeof(file));
    snprintf(line, sizeof(line), "password_file = \"%s\";", file);
    expect_check_refused(line, "redis.password_file: ", "must hold 1 to 512 bytes");

    expect_check_refused("password_file = \"etc/redis-password\";", "redis.password_file: ",
                         "must be an absolute path, or a systemd credential name");
    unsetenv("CREDENTIALS_DIRECTORY");
    expect_check_refused("password_file = \"redis-password\";", "redis.password_file: ",
                         "$CREDENTIALS_DIRECTORY is not set");

    write_file("good", password, 0600, file, sizeof(file));
    snprintf(line, sizeof(line), "password = \"x\"; password_file = \"%s\";", file);
    expect_check_refused(line, "redis.password and redis.password_file cannot both be set", "");
    snprintf(line, sizeof(line), "sentinel_password_file = \"%s\";", file);
    expect_check_refused(line, "redis.sentinel_password_file needs redis.sentinels", "");

    /* A start says the same, and exits 1 before touching the state dir. */
    snprintf(line, sizeof(line), "password_file = \"%s/missing\";", scratch);
    conf = secret_config(NULL, line);
    assert_non_null(conf);
    write_file("divvy.conf", conf, 0644, conf_path, sizeof(conf_path));
    free(conf);
    snprintf(listen, sizeof(listen), "unix:%s/divvy.sock", scratch);
    args[5] = listen;
    CHECK(harness_run_divvyd(args, 10000, &status, NULL, 0, err, sizeof(err)));
    snprintf(want, sizeof(want), "divvyd: %s:3: redis.password_file: %s/missing: ", conf_path,
             scratch);
    if (status != 1 || !strstr(err, want))
        fail_msg("divvyd start: status %d, stderr:\n%s(want %s)", status, err, want);
    assert_int_equal(access(listen + 5, F_OK), -1);
}

static void test_redis_secret_sentinel_file_checked(void **state)
{
    char file[HARNESS_PATH], line[3 * HARNESS_PATH + 160], conf_path[HARNESS_PATH], err[4096];
    char *conf;
    const char *args[] = { "--check", "--config", conf_path, NULL };
    int status;

    (void)state;
    /* Sentinels need no address to be checked: the file is read, the setting kept. */
    write_file("sentinel", password, 0600, file, sizeof(file));
    if (asprintf(&conf, "store = { mode = \"strict\"; };\n"
                 "redis = { sentinels = [ \"127.0.0.1:1\" ]; master_name = \"m\";\n"
                 "    sentinel_password_file = \"%s\"; };\n%s", file, rules_text) < 0)
        fail();
    write_file("divvy.conf", conf, 0644, conf_path, sizeof(conf_path));
    free(conf);
    CHECK(harness_run_divvyd(args, 10000, &status, NULL, 0, err, sizeof(err)));
    if (status != 0)
        fail_msg("divvyd --check: status %d, stderr:\n%s", status, err);
    assert_int_equal(chmod(file, 0644), 0);
    snprintf(line, sizeof(line), "%s:3: redis.sentinel_password_file: %s: readable "
             "by its group and others (mode 0644)", conf_path, file);
    CHECK(harness_run_divvyd(args, 10000, &status, NULL, 0, err, sizeof(err)));
    if (status != 1 || strncmp(err, line, strlen(line)) != 0)
        fail_msg("divvyd --check: status %d, stderr:\n%s(want %s)", status, err, line);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_redis_secret_password_file, secret_setup,
                                        secret_teardown),
        cmocka_unit_test_setup_teardown(test_redis_secret_credential, secret_setup,
                                        secret_teardown),
        cmocka_unit_test_setup_teardown(test_redis_secret_wrong_password, secret_setup,
                                        secret_teardown),
        cmocka_unit_test_setup_teardown(test_redis_secret_refused, secret_setup,
                                        secret_teardown),
        cmocka_unit_test_setup_teardown(test_redis_secret_sentinel_file_checked, secret_setup,
                                        secret_teardown),
    };

    return cmocka_run_group_tests_name("redis_secret", tests, NULL, NULL);
}
