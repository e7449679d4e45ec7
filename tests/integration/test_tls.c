/* SPDX-License-Identifier: MIT */
/*
 * test_tls: the "tls:" listeners (docs/security.md) with real clients: a
 * throwaway CA, server and client certificates made by the `openssl`
 * command in a temp dir; `openssl s_client` speaking the line protocol,
 * `redis-cli --tls` on resp:tls, @grpc/grpc-js's TLS credentials on
 * rls:tls (tests/rls/rls_tls_client.js; ALPN h2); mutual TLS (no client
 * certificate, one from the CA, one from another CA); plain text on a TLS
 * port; RELOAD with a new certificate, a broken one and a readable key;
 * a flood of handshakes that never finish; config errors with file:line.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define RULES                                                                         \
    "rules = (\n"                                                                     \
    "  { match = { app = \"*\"; }; label = \"r1\"; actor = \"app\";\n"                \
    "    credit_limit = 3; reset_seconds = 60; },\n"                                  \
    "  { match = { domain = \"edge\"; user = \"*\"; }; label = \"per_user\";\n"       \
    "    actor = \"user\"; credit_limit = 2; reset_seconds = 60; },\n"                \
    "  { default = true; label = \"dflt\"; credit_limit = 5; reset_seconds = 60; }\n" \
    ");\n"

/* The certificates: ca (the CA), srv (serial 1001) and srv2 (serial 2002) from
 * it, cli from it, evil from another CA; live.crt/live.key is what divvyd serves. */
#define MAKE_CERTS                                                                        \
    "set -e\n"                                                                            \
    "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $1.key; }\n" \
    "key ca; key other\n"                                                                 \
    "openssl req -x509 -key ca.key -out ca.crt -days 2 -subj /CN=divvy-test-ca\n"        \
    "openssl req -x509 -key other.key -out other.crt -days 2 -subj /CN=other-ca\n"       \
    "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san\n"                       \
    "mk() { key $1; openssl req -new -key $1.key -out $1.csr -subj /CN=$4;\n"             \
    "  openssl x509 -req -in $1.csr -CA $2.crt -CAkey $2.key -set_serial $3 -days 2 \\\n" \
    "    -extfile san -out $1.crt; }\n"                                                   \
    "mk srv ca 0x1001 localhost; mk srv2 ca 0x2002 localhost\n"                           \
    "mk cli ca 0x3003 client; mk evil other 0x4004 client\n"                              \
    "chmod 600 *.key; cp srv.crt live.crt; cp srv.key live.key\n"

static char dir[HARNESS_PATH];          /* the certificates; "" when openssl is missing */
static char node_modules[512];          /* "": the gRPC client is unavailable */
static char lis_line[64], lis_resp[64], lis_rls[64];
static int port_line, port_resp, port_rls;

static int sh_child(void *arg)
{
    if (chdir(dir) < 0)
        return 126;
    execl("/bin/sh", "sh", "-c", (const char *)arg, (char *)NULL);
    return 127;
}

/*
 * Runs the shell command made of @fmt in the certificates' dir, with $P,
 * $R and $G the line, RESP and RLS ports; its stdout and stderr into @out.
 * Returns its exit status (128 + signal); killed after 60 s.
 */
static int sh(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int sh(char *out, size_t size, const char *fmt, ...)
{
    char cmd[4096], body[3500], path[HARNESS_PATH + 16];
    va_list ap;
    pid_t pid;
    FILE *f;
    size_t n;
    int st;

    va_start(ap, fmt);
    vsnprintf(body, sizeof(body), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "P=%d R=%d G=%d; export P R G; ( %s ) >run.out 2>&1 </dev/null",
             port_line, port_resp, port_rls, body);
    CHECK(harness_spawn(sh_child, cmd, &pid));
    CHECK(harness_reap(pid, 60000, &st));
    snprintf(path, sizeof(path), "%s/run.out", dir);
    f = fopen(path, "r");
    n = f ? fread(out, 1, size - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    return st;
}

/* The serial of the certificate a new connection to the line port gets. */
static void served_serial(char *out, size_t size)
{
    sh(out, size, "openssl s_client -connect 127.0.0.1:$P -CAfile ca.crt 2>/dev/null | "
       "openssl x509 -noout -serial");
}

/* One HIT over TLS on the line port with s_client's extra options @opts: its output. */
static int tls_hit(const char *opts, const char *app, char *out, size_t size)
{
    return sh(out, size, "printf 'HIT app=%s\\nQUIT\\n' | openssl s_client -connect "
              "127.0.0.1:$P -CAfile ca.crt -verify_return_error -quiet %s", app, opts);
}

static struct harness_daemon *start_tls(const char *server_extra, const char *tls_extra)
{
    struct harness_opts o = { .workers = 2 };
    struct harness_daemon *d = NULL;
    char *conf = harness_scratch(4096);

    snprintf(conf, 4096,
             "server = { %s\n  tls = { certificate_file = \"%s/live.crt\";\n"
             "    key_file = \"%s/live.key\"; %s };\n};\n" RULES,
             server_extra, dir, dir, tls_extra);
    port_line = harness_free_port(SOCK_STREAM);
    port_resp = harness_free_port(SOCK_STREAM);
    port_rls = harness_free_port(SOCK_STREAM);
    snprintf(lis_line, sizeof(lis_line), "tls:127.0.0.1:%d", port_line);
    snprintf(lis_resp, sizeof(lis_resp), "resp:tls:127.0.0.1:%d", port_resp);
    snprintf(lis_rls, sizeof(lis_rls), "rls:tls:127.0.0.1:%d", port_rls);
    o.config_text = conf;
    o.listen[0] = lis_line;
    o.listen[1] = lis_resp;
    o.listen[2] = lis_rls;
    CHECK(harness_start(&o, &d));
    return d;
}

/* divvyd's count of failed handshakes (STATS on the Unix socket, as root). */
static long long handshake_failures(struct harness_daemon *d)
{
    struct harness_conn *c = NULL;
    char *stats = harness_scratch(HARNESS_LINE * 4);
    long long v = -1;

    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_multi(c, "STATS", stats, HARNESS_LINE * 4));
    harness_close(c);
    CHECK(harness_stat(stats, "tls_handshake_failures", &v));
    return v;
}

/* One ShouldRateLimit call for user @user through rls_tls_client.js,
 * trusting @ca, with @cert_key ("cli.crt cli.key", or ""): its output. */
static int grpc_call(const char *user, const char *ca, const char *cert_key, char *out,
                     size_t size)
{
    char proto[HARNESS_PATH], script[HARNESS_PATH];

    CHECK(harness_src_path("proto", proto, sizeof(proto)));
    CHECK(harness_src_path("tests/rls/rls_tls_client.js", script, sizeof(script)));
    return sh(out, size, "echo '{\"domain\":\"edge\",\"descriptors\":[{\"entries\":"
              "[{\"key\":\"user\",\"value\":\"%s\"}]}]}' | NODE_PATH=%s node %s %s "
              "127.0.0.1:$G %s %s", user, node_modules, script, proto, ca, cert_key);
}

static bool skip_without_openssl(void)
{
    if (dir[0])
        return false;
    printf("SKIP: the openssl command is not installed (Debian: openssl)\n");
    return true;
}

/* s_client and redis-cli over TLS; plain text on TLS ports; ALPN; privilege. */
static void test_tls_line_resp(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c = NULL;
    char *out = harness_scratch(65536);
    char junk[4096];
    int st;

    (void)state;
    if (skip_without_openssl())
        return;
    d = start_tls("", "");
    st = tls_hit("", "a", out, 65536);
    if (st != 0 || !strstr(out, "OK true 2 "))
        fail_msg("s_client HIT: status %d:\n%s", st, out);
    st = tls_hit("", "a", out, 65536);
    if (!strstr(out, "OK true 1 "))
        fail_msg("s_client second HIT: status %d:\n%s", st, out);
    /* TCP peers are never privileged, over TLS too. */
    sh(out, 65536, "printf 'RELOAD\\nQUIT\\n' | openssl s_client -connect 127.0.0.1:$P "
       "-CAfile ca.crt -quiet");
    if (!strstr(out, "ERR forbidden"))
        fail_msg("RELOAD over TLS from TCP:\n%s", out);

    st = sh(out, 65536, "redis-cli --tls --cacert ca.crt -h 127.0.0.1 -p $R DIVVY.HIT app b");
    if (st != 0 || strncmp(out, "1\n2\n", 4) != 0)
        fail_msg("redis-cli --tls DIVVY.HIT: status %d:\n%s", st, out);
    st = sh(out, 65536, "redis-cli --tls --cacert ca.crt -h 127.0.0.1 -p $R PING");
    if (st != 0 || strcmp(out, "PONG\n") != 0)
        fail_msg("redis-cli --tls PING: status %d:\n%s", st, out);
    /* A client that does not speak TLS gets no answer, only a close. */
    sh(out, 65536, "redis-cli -h 127.0.0.1 -p $R PING");
    assert_null(strstr(out, "PONG"));

    /* ALPN: h2 on the RLS port only. */
    sh(out, 65536, "openssl s_client -connect 127.0.0.1:$G -CAfile ca.crt -alpn h2");
    if (!strstr(out, "ALPN protocol: h2"))
        fail_msg("no ALPN h2 on rls:tls:\n%s", out);
    sh(out, 65536, "openssl s_client -connect 127.0.0.1:$P -CAfile ca.crt -alpn h2");
    if (!strstr(out, "No ALPN negotiated"))
        fail_msg("ALPN on the line port:\n%s", out);

    /* Plain text and garbage on each TLS port: closed, divvyd serves on. */
    for (int i = 0; i < 3; i++) {
        int port = i == 0 ? port_line : i == 1 ? port_resp : port_rls;

        CHECK(harness_connect_tcp(port, &c));
        CHECK(harness_sendf(c, "HIT app=plain\n"));
        CHECK(harness_wait_eof(c, 5000));
        harness_close(c);
        CHECK(harness_connect_tcp(port, &c));
        memset(junk, 0x16, sizeof(junk));       /* a handshake record type, then nonsense */
        harness_send(c, junk, sizeof(junk));
        CHECK(harness_wait_eof(c, 5000));
        harness_close(c);
    }
    assert_true(harness_alive(d));
    assert_true(handshake_failures(d) >= 6);
    st = tls_hit("", "c", out, 65536);
    if (!strstr(out, "OK true 2 "))
        fail_msg("s_client after the junk: status %d:\n%s", st, out);
    harness_free(d);
}

/* grpc-js with TLS credentials on rls:tls: (ALPN h2 is required by grpc-js). */
static void test_tls_rls_grpc(void **state)
{
    struct harness_daemon *d;
    char *out = harness_scratch(65536);
    char script[HARNESS_PATH];
    int st;

    (void)state;
    if (skip_without_openssl())
        return;
    CHECK(harness_src_path("tests/rls/npm_ensure.sh", script, sizeof(script)));
    st = sh(node_modules, sizeof(node_modules), "sh %s", script);
    if (st == 77) {
        printf("SKIP: grpc-js over TLS: npm or the npm registry is unreachable\n");
        node_modules[0] = '\0';
        return;
    }
    if (st != 0)
        fail_msg("tests/rls/npm_ensure.sh: status %d:\n%s", st, node_modules);
    node_modules[strcspn(node_modules, "\n")] = '\0';
    d = start_tls("", "");
    st = grpc_call("bob", "ca.crt", "", out, 65536);
    if (st != 0 || !strstr(out, "\"ok\":true") || !strstr(out, "\"overall_code\":\"OK\""))
        fail_msg("grpc-js over TLS: status %d:\n%s", st, out);
    /* A CA that did not sign divvyd's certificate: grpc-js refuses it. */
    st = grpc_call("bob", "other.crt", "", out, 65536);
    if (!strstr(out, "\"ok\":false"))
        fail_msg("grpc-js trusting another CA: status %d:\n%s", st, out);
    harness_free(d);
}

/* Mutual TLS: a client certificate from client_ca_file's CA, or nothing. */
static void test_tls_mtls(void **state)
{
    struct harness_daemon *d;
    char *out = harness_scratch(65536);
    char extra[HARNESS_PATH + 64];
    long long before;
    int st;

    (void)state;
    if (skip_without_openssl())
        return;
    snprintf(extra, sizeof(extra), "client_ca_file = \"%s/ca.crt\";", dir);
    d = start_tls("", extra);
    before = handshake_failures(d);
    tls_hit("", "m", out, 65536);
    if (strstr(out, "OK "))
        fail_msg("served without a client certificate:\n%s", out);
    tls_hit("-cert evil.crt -key evil.key", "m", out, 65536);
    if (strstr(out, "OK "))
        fail_msg("served with another CA's client certificate:\n%s", out);
    assert_true(handshake_failures(d) >= before + 2);
    st = tls_hit("-cert cli.crt -key cli.key", "m", out, 65536);
    if (st != 0 || !strstr(out, "OK true 2 "))
        fail_msg("refused with the CA's client certificate: status %d:\n%s", st, out);
    st = sh(out, 65536, "redis-cli --tls --cacert ca.crt --cert cli.crt --key cli.key "
            "-h 127.0.0.1 -p $R PING");
    if (st != 0 || strcmp(out, "PONG\n") != 0)
        fail_msg("redis-cli with a client certificate: status %d:\n%s", st, out);
    if (node_modules[0]) {
        st = grpc_call("amy", "ca.crt", "cli.crt cli.key", out, 65536);
        if (st != 0 || !strstr(out, "\"ok\":true"))
            fail_msg("grpc-js with a client certificate: status %d:\n%s", st, out);
        grpc_call("amy", "ca.crt", "", out, 65536);
        if (!strstr(out, "\"ok\":false"))
            fail_msg("grpc-js without a client certificate:\n%s", out);
    }
    harness_free(d);
}

/* RELOAD reads the certificate again: new connections get the new one, a
 * broken one or a readable key is refused (the old one stays), and an open
 * connection keeps its session. */
static void test_tls_reload(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c = NULL;
    char *out = harness_scratch(65536);
    char reply[HARNESS_LINE], cmd[512];
    pid_t old;
    int st;

    (void)state;
    if (skip_without_openssl())
        return;
    d = start_tls("", "");
    served_serial(out, 65536);
    assert_string_equal(out, "serial=1001\n");
    /* A connection open across the reloads: one HIT before, one after. */
    snprintf(cmd, sizeof(cmd), "(printf 'HIT app=k\\n'; sleep 5; printf 'HIT app=k\\nQUIT\\n') | "
             "openssl s_client -connect 127.0.0.1:%d -CAfile ca.crt -quiet >old.out 2>&1",
             port_line);
    CHECK(harness_spawn(sh_child, cmd, &old));
    harness_pause_ms(1000);
    sh(out, 65536, "cp srv2.crt live.crt && cp srv2.key live.key");
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "RELOAD", reply, sizeof(reply)));
    if (strncmp(reply, "OK", 2) != 0)
        fail_msg("RELOAD with a new certificate: %s", reply);
    served_serial(out, 65536);
    assert_string_equal(out, "serial=2002\n");

    /* A broken certificate: refused, with the file named; the old one stays. */
    sh(out, 65536, "echo 'not a certificate' > live.crt");
    CHECK(harness_cmd(c, "RELOAD", reply, sizeof(reply)));
    if (strncmp(reply, "ERR", 3) != 0 || !strstr(reply, "live.crt"))
        fail_msg("RELOAD with a broken certificate: %s", reply);
    served_serial(out, 65536);
    assert_string_equal(out, "serial=2002\n");

    /* A key others may read: refused as redis.password_file is. */
    sh(out, 65536, "cp srv2.crt live.crt && chmod 644 live.key");
    CHECK(harness_cmd(c, "RELOAD", reply, sizeof(reply)));
    if (strncmp(reply, "ERR", 3) != 0 || !strstr(reply, "readable by"))
        fail_msg("RELOAD with a readable key: %s", reply);
    sh(out, 65536, "chmod 600 live.key");
    CHECK(harness_cmd(c, "RELOAD", reply, sizeof(reply)));
    assert_int_equal(strncmp(reply, "OK", 2), 0);
    harness_close(c);

    /* SIGHUP does the same. */
    sh(out, 65536, "cp srv.crt live.crt && cp srv.key live.key");
    CHECK(harness_kill(d, SIGHUP));
    for (int i = 0; i < 50; i++) {
        served_serial(out, 65536);
        if (strcmp(out, "serial=1001\n") == 0)
            break;
        harness_pause_ms(100);
    }
    assert_string_equal(out, "serial=1001\n");

    /* The connection opened before the reloads was served before and after. */
    CHECK(harness_reap(old, 20000, &st));
    st = sh(out, 65536, "cat old.out");
    if (st != 0 || !strstr(out, "OK true 2 ") || !strstr(out, "OK true 1 "))
        fail_msg("the connection open across the reloads:\n%s", out);
    harness_free(d);
}

/* Half-open handshakes from one peer: held to its connection budget and the
 * request timeout; another client is served meanwhile. */
static void test_tls_handshake_flood(void **state)
{
    struct harness_daemon *d;
    char *out = harness_scratch(65536);
    static const unsigned char hello[] = { 0x16, 0x03, 0x01, 0x02, 0x00, 0x01 };
    int fds[64], open_n = 0, st;
    uint64_t deadline;

    (void)state;
    if (skip_without_openssl())
        return;
    d = start_tls("tcp_connections_per_address = 16; request_timeout_ms = 1000;", "");
    for (int i = 0; i < 64; i++) {
        fds[i] = harness_tcp_fd_from("127.0.0.2", i % 2 ? port_line : port_rls);
        if (fds[i] >= 0 && i % 3 == 0 &&
            send(fds[i], hello, sizeof(hello), MSG_NOSIGNAL) < 0) {
            /* Refused already (over the budget): counted below. */
        }
    }
    st = tls_hit("", "f", out, 65536);
    if (st != 0 || !strstr(out, "OK true 2 "))
        fail_msg("a fresh client during the flood: status %d:\n%s", st, out);
    /* Every flood connection is closed: over the budget at once, the rest
     * at the request timeout (the sweep runs each second). */
    deadline = harness_now_ms() + 8000;
    for (int i = 0; i < 64; i++) {
        struct pollfd p = { .fd = fds[i], .events = POLLIN };
        char b[64];

        if (fds[i] < 0)
            continue;
        while (harness_now_ms() < deadline) {
            int left = (int)(deadline - harness_now_ms());

            if (poll(&p, 1, left) > 0 && read(fds[i], b, sizeof(b)) <= 0)
                break;
        }
        if (harness_now_ms() >= deadline)
            open_n++;
        close(fds[i]);
    }
    assert_int_equal(open_n, 0);
    assert_true(harness_alive(d));
    st = tls_hit("", "f", out, 65536);
    if (!strstr(out, "OK true 1 "))
        fail_msg("after the flood: status %d:\n%s", st, out);
    harness_free(d);
}

/* TLS_HANDSHAKES_MAX (256) handshakes under way at once, all listeners
 * together: the 44 connections past them are closed at accept and counted;
 * the Unix socket is served throughout, and a TLS client once places free. */
#define CAP_FLOOD 300
#define CAP_MAX 256

static void test_tls_handshake_cap(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c = NULL;
    char *out = harness_scratch(65536);
    char reply[HARNESS_LINE];
    int fds[CAP_FLOOD], st;
    uint64_t deadline;

    (void)state;
    if (skip_without_openssl())
        return;
    d = start_tls("tcp_connections = 1024; tcp_connections_per_address = 1024;\n"
                  "  request_timeout_ms = 60000; idle_timeout_ms = 60000;", "");
    for (int i = 0; i < CAP_FLOOD; i++) {
        fds[i] = harness_tcp_fd_from("127.0.0.3", i % 2 ? port_line : port_rls);
        assert_true(fds[i] >= 0);
    }
    deadline = harness_now_ms() + 15000;
    while (handshake_failures(d) < CAP_FLOOD - CAP_MAX && harness_now_ms() < deadline)
        harness_pause_ms(50);
    harness_pause_ms(300);
    /* Exactly the connections past the bound, no more. */
    assert_int_equal(handshake_failures(d), CAP_FLOOD - CAP_MAX);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    CHECK(harness_cmd(c, "HIT app=unix", reply, sizeof(reply)));
    if (strncmp(reply, "OK true 2 ", 10) != 0)
        fail_msg("HIT on the Unix socket during the flood: %s", reply);
    harness_close(c);
    /* Places freed by clients that leave are taken by the next. */
    for (int i = 0; i < 100; i++)
        close(fds[i]);
    deadline = harness_now_ms() + 15000;
    do {
        harness_pause_ms(100);
        st = tls_hit("", "cap", out, 65536);
    } while ((st != 0 || !strstr(out, "OK true 2 ")) && harness_now_ms() < deadline);
    if (st != 0 || !strstr(out, "OK true 2 "))
        fail_msg("a TLS client after the flood left: status %d:\n%s", st, out);
    for (int i = 100; i < CAP_FLOOD; i++)
        close(fds[i]);
    assert_true(harness_alive(d));
    harness_free(d);
}

/* A "tls:" address without server.tls, and a readable key, stop divvyd at
 * start with the file and line. */
static void test_tls_config_errors(void **state)
{
    char *out = harness_scratch(65536), *err = harness_scratch(65536);
    char conf[HARNESS_PATH + 32], state_dir[HARNESS_PATH + 32], text[1024];
    FILE *f;
    int st;

    (void)state;
    if (skip_without_openssl())
        return;
    snprintf(conf, sizeof(conf), "%s/bad.conf", dir);
    snprintf(state_dir, sizeof(state_dir), "%s/state", dir);
    f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f, "server = {\n  listen = [ \"tls:127.0.0.1:%d\" ];\n};\n" RULES,
            harness_free_port(SOCK_STREAM));
    fclose(f);
    CHECK(harness_run_divvyd((const char *const[]){ "-c", conf, "-s", state_dir, "--check",
                                                    NULL },
                             20000, &st, out, 65536, err, 65536));
    if (st == 0 || !strstr(err, "bad.conf:2:") || !strstr(err, "server.tls"))
        fail_msg("tls: without server.tls: status %d:\n%s%s", st, out, err);

    snprintf(text, sizeof(text), "cp srv.key open.key && chmod 644 open.key");
    sh(out, 65536, "%s", text);
    f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f, "server = {\n  listen = [ \"tls:127.0.0.1:%d\" ];\n"
            "  tls = { certificate_file = \"%s/srv.crt\"; key_file = \"%s/open.key\"; };\n"
            "};\n" RULES, harness_free_port(SOCK_STREAM), dir, dir);
    fclose(f);
    CHECK(harness_run_divvyd((const char *const[]){ "-c", conf, "-s", state_dir, "-d", NULL },
                             20000, &st, out, 65536, err, 65536));
    if (st == 0 || !strstr(err, "bad.conf:3:") || !strstr(err, "readable by"))
        fail_msg("a readable key: status %d:\n%s%s", st, out, err);
}

static int group_setup(void **state)
{
    char out[4096];
    int st;

    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/divvy-test-tls-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    st = sh(out, sizeof(out), "command -v openssl");
    if (st != 0) {
        harness_rm_tree(dir);
        dir[0] = '\0';
        return 0;
    }
    st = sh(out, sizeof(out), "%s", MAKE_CERTS);
    if (st != 0) {
        fprintf(stderr, "making the test certificates failed (%d):\n%s", st, out);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (dir[0])
        harness_rm_tree(dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_tls_line_resp, harness_teardown),
        cmocka_unit_test_teardown(test_tls_rls_grpc, harness_teardown),
        cmocka_unit_test_teardown(test_tls_mtls, harness_teardown),
        cmocka_unit_test_teardown(test_tls_reload, harness_teardown),
        cmocka_unit_test_teardown(test_tls_handshake_flood, harness_teardown),
        cmocka_unit_test_teardown(test_tls_handshake_cap, harness_teardown),
        cmocka_unit_test_teardown(test_tls_config_errors, harness_teardown),
    };

    return cmocka_run_group_tests_name("tls", tests, group_setup, group_teardown);
}
