/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for daemon/resp.c, the RESP2 request parser of divvyd's
 * "resp:" listeners.  Feeds the input through resp_parse() the way a RESP
 * connection consumes its buffer (command after command until one is
 * incomplete or malformed), and checks: a command is consumed whole and
 * within the input, its arguments lie inside what was consumed and within
 * the limits, an incomplete command never needs RESP_CMD_MAX bytes or more
 * (the connection's buffer is bigger, so it can never fill up waiting), and
 * every parsed command, written back as a multibulk array, parses to the
 * same arguments.  The reply formatters run on bytes of the input too.
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Icommon -Idaemon \
 *       tests/fuzz/fuzz_resp.c daemon/resp.c common/proto.c -o fuzz_resp
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "resp.h"

static char again[RESP_CMD_MAX * 2];

/* @cmd written as multibulk parses back to the same arguments. */
static void check_roundtrip(const struct resp_cmd *cmd)
{
    struct resp_cmd back;
    const char *why;
    size_t n = 0;
    ssize_t r;

    n += (size_t)snprintf(again + n, sizeof(again) - n, "*%u\r\n", cmd->argc);
    for (unsigned i = 0; i < cmd->argc; i++) {
        n += (size_t)snprintf(again + n, sizeof(again) - n, "$%zu\r\n", cmd->len[i]);
        CHECK(n + cmd->len[i] + 2 < sizeof(again));
        memcpy(again + n, cmd->argv[i], cmd->len[i]);
        n += cmd->len[i];
        memcpy(again + n, "\r\n", 2);
        n += 2;
    }
    /* Within the limits however it came: an inline line's arguments plus
     * multibulk headers stay under RESP_CMD_MAX. */
    r = resp_parse(again, n, &back, &why);
    CHECK(r == (ssize_t)n);
    CHECK(back.argc == cmd->argc);
    for (unsigned i = 0; i < cmd->argc; i++) {
        CHECK(back.len[i] == cmd->len[i]);
        CHECK(memcmp(back.argv[i], cmd->argv[i], cmd->len[i]) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    size_t off = 0;
    struct resp_cmd cmd;
    char out[PROTO_REPLY_MAX];
    const char *why;
    ssize_t r;

    while (off < size) {
        r = resp_parse(p + off, size - off, &cmd, &why);
        if (r == 0) {
            CHECK(size - off < RESP_CMD_MAX);
            break;
        }
        if (r < 0) {
            CHECK(r == -EPROTO && why != NULL);
            break;
        }
        CHECK((size_t)r <= size - off);
        CHECK(cmd.argc <= RESP_ARGS_MAX);
        for (unsigned i = 0; i < cmd.argc; i++) {
            CHECK(cmd.argv[i] >= p + off);
            CHECK(cmd.argv[i] + cmd.len[i] <= p + off + (size_t)r);
            CHECK(cmd.len[i] <= RESP_INLINE_MAX);
        }
        if (p[off] == '*')
            CHECK((size_t)r <= RESP_CMD_MAX);
        check_roundtrip(&cmd);
        if (cmd.argc > 0) {
            int64_t v;

            (void)resp_arg_is(&cmd, 0, "PING");
            if (resp_arg_int(&cmd, 0, INT64_MIN + 1, INT64_MAX, &v) == 0)
                CHECK(cmd.len[0] > 0);
            if (cmd.len[0] < 200) {
                char s[200];

                memcpy(s, cmd.argv[0], cmd.len[0]);
                s[cmd.len[0]] = '\0';
                r = resp_fmt_error(out, sizeof(out), s);
                CHECK(r > 0 && !memchr(out, '\n', (size_t)r - 1));
                CHECK(resp_fmt_hit(out, sizeof(out), true, 1, 2, s) > 0 || strlen(s) > 150);
                CHECK(resp_fmt_bulk(out, sizeof(out), cmd.argv[0], cmd.len[0]) > 0);
            }
        }
        off += (size_t)r;
    }
    return 0;
}
