/* SPDX-License-Identifier: MIT */
/*
 * resp_client: RESP commands and replies for the raw-socket RESP tests (see
 * resp_client.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "harness_redis.h"
#include "resp_client.h"

/* Reads one RESP value and appends it flattened to @out: "+PONG", ":1",
 * "$text" ("$nil"), "-ERR ...", "*2 :1 $x". */
int resp_read(struct harness_conn *c, char *out, size_t size)
{
    char line[HARNESS_LINE];
    size_t used = strlen(out);
    ssize_t n = harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS);
    long count;
    int r;

    if (n < 0)
        return (int)n;
    if (n > 0 && line[n - 1] == '\r')
        line[--n] = '\0';
    if (n == 0)
        return -EPROTO;
    switch (line[0]) {
    case '+':
    case '-':
    case ':':
    case '_':
    case '#':
    case ',':
        snprintf(out + used, size - used, "%s", line);
        return 0;
    case '$':
        count = strtol(line + 1, NULL, 10);
        if (count < 0) {
            snprintf(out + used, size - used, "$nil");
            return 0;
        }
        /* Line by line (our bulk strings hold no bare CR or LF) up to its length. */
        snprintf(out + used, size - used, "$");
        for (long got = 0; got < count + 2; got += n + 1) {
            n = harness_recv_line(c, line, sizeof(line), HARNESS_TIMEOUT_MS);
            if (n < 0)
                return (int)n;
            used = strlen(out);
            snprintf(out + used, size - used, "%s%.*s", got ? "\n" : "",
                     (int)(n > 0 && line[n - 1] == '\r' ? n - 1 : n), line);
        }
        return 0;
    case '*':
    case '%':
        count = strtol(line + 1, NULL, 10);
        snprintf(out + used, size - used, "%c%ld", line[0], count);
        for (long i = 0; i < (line[0] == '%' ? 2 * count : count); i++) {
            used = strlen(out);
            snprintf(out + used, size - used, " ");
            r = resp_read(c, out, size);
            if (r < 0)
                return r;
        }
        return 0;
    }
    return -EPROTO;
}

/* Reads one value and asserts it is @want. */
void expect_resp(struct harness_conn *c, const char *want)
{
    char got[HARNESS_LINE] = "";

    CHECK(resp_read(c, got, sizeof(got)));
    if (strcmp(got, want) != 0)
        fail_msg("RESP reply \"%s\", want \"%s\"", got, want);
}

void expect_resp_prefix(struct harness_conn *c, const char *want)
{
    char got[HARNESS_LINE] = "";

    CHECK(resp_read(c, got, sizeof(got)));
    if (strncmp(got, want, strlen(want)) != 0)
        fail_msg("RESP reply \"%s\", want \"%s...\"", got, want);
}

/* A command as a multibulk array: @argv NULL-terminated. */
size_t resp_cmd(char *buf, size_t size, const char *const *argv)
{
    size_t n = 0, used = 0;

    while (argv[n])
        n++;
    used += (size_t)snprintf(buf + used, size - used, "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(buf + used, size - used, "$%zu\r\n%s\r\n", strlen(argv[i]),
                                 argv[i]);
    return used;
}

struct harness_daemon *resp_start(const char *config)
{
    struct harness_opts o = { .config_text = config, .resp = true, .workers = 2 };
    struct harness_daemon *d = NULL;

    CHECK(harness_start(&o, &d));
    return d;
}

struct harness_daemon *resp_start_strict(struct redis_srv **ret_rs)
{
    struct harness_opts o = { .resp = true, .workers = 1 };
    struct harness_daemon *d;
    char *conf;

    CHECK(redis_start(ret_rs));
    conf = redis_config(*ret_rs, "local", "closed", 5000, NULL, RESP_STRICT_RULES);
    assert_non_null(conf);
    o.config_text = conf;
    CHECK(harness_start(&o, &d));
    free(conf);
    return d;
}

static char pw_dir[64], pw_path[96];

const char *resp_password_write(const char *text, mode_t mode)
{
    char tmp[128];
    int fd;

    if (!pw_dir[0]) {
        strcpy(pw_dir, "/tmp/divvy-resp-pw-XXXXXX");
        if (!mkdtemp(pw_dir)) {
            pw_dir[0] = '\0';
            fail_msg("mkdtemp: %s", strerror(errno));
        }
        snprintf(pw_path, sizeof(pw_path), "%s/pw", pw_dir);
    }
    snprintf(tmp, sizeof(tmp), "%s.new", pw_path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    assert_true(fd >= 0);
    assert_int_equal(fchmod(fd, mode), 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(rename(tmp, pw_path), 0);
    return pw_path;
}

int resp_teardown(void **state)
{
    int r = harness_teardown(state);
    char tmp[128];

    if (pw_dir[0]) {
        snprintf(tmp, sizeof(tmp), "%s.new", pw_path);
        unlink(tmp);
        unlink(pw_path);
        rmdir(pw_dir);
        pw_dir[0] = '\0';
    }
    return r;
}
