/* SPDX-License-Identifier: MIT */
/*
 * Integration: `make install DESTDIR=$T PREFIX=/usr` from the build under
 * test.  Checks the tree (binaries, libdivvy.so.N and its links, libdivvy.a,
 * divvy.h, divvy.pc in the multiarch layout (/usr/lib/<triplet>, pam_divvy.so
 * in its security/), divvy-bench in /usr/libexec/divvy (not the PATH), the
 * units with the install's paths, none enabled, and run-divvy.mount only as
 * an example (in the unit directory divvyd.socket's implicit
 * RequiresMountsFor=/run/divvy would pull it in: issue 11 item 10),
 * sysusers.d and tmpfiles.d, the config,
 * man pages), that an existing config is never overwritten, that installed
 * programs carry no rpath into the build tree, builds docs/examples/ programs
 * against the installed divvy.pc (PKG_CONFIG_PATH + PKG_CONFIG_SYSROOT_DIR)
 * and runs one against a live divvyd, verifies the installed units with
 * `systemd-analyze verify`, and uninstalls.  The man pages in docs/man/
 * must render without a warning (`MANWIDTH=80 man --warnings -l`).
 * Client pieces (libdivvy, divvyctl, pam_divvy.so) are checked when the
 * build has them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define OUT_MAX 65536

static char root[64];               /* DESTDIR */
static char make_vars[1024];        /* B=... for the build under test */
static char multiarch[64];
static char unitdir[128];
static char libdir[128];            /* /usr/lib/<multiarch> (multiarch layout) */

static int run(const char *cmd, char *out, size_t size)
{
    char *full;
    size_t len;
    FILE *p;
    int st;

    assert_true(asprintf(&full, "(%s) 2>&1", cmd) > 0);
    p = popen(full, "r");
    free(full);
    assert_non_null(p);
    len = fread(out, 1, size - 1, p);
    out[len] = '\0';
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static const char *build_dir(void)
{
    const char *b = getenv("DIVVY_BUILD");

    return b && *b ? b : "build";
}

static bool built(const char *name)
{
    char path[512];

    snprintf(path, sizeof(path), "%s/%s", build_dir(), name);
    return access(path, F_OK) == 0;
}

/* make in the source tree with the build under test; @target and @extra vars. */
static int make(const char *target, const char *extra, char *out, size_t size)
{
    char src[512], cmd[4096];

    CHECK(harness_src_path("", src, sizeof(src)));
    snprintf(cmd, sizeof(cmd), "make -C '%s' --no-print-directory %s %s %s", src, make_vars,
             extra, target);
    return run(cmd, out, size);
}

static int install_setup(void **state)
{
    const char *mf = getenv("MAKEFLAGS"), *vars;
    char out[256];

    if (harness_setup(state) < 0)
        return -1;
    snprintf(root, sizeof(root), "/tmp/divvy-install.XXXXXX");
    if (!mkdtemp(root))
        return -1;
    /* Keep the outer make's variable overrides (B=, SAN_FLAGS= under `make asan`),
     * drop its jobserver, which a grandchild cannot use. */
    vars = mf ? strstr(mf, " -- ") : NULL;
    if (vars)
        setenv("MAKEFLAGS", vars, 1);
    else
        unsetenv("MAKEFLAGS");
    unsetenv("MAKELEVEL");
    unsetenv("MFLAGS");
    snprintf(make_vars, sizeof(make_vars), "B='%s'", build_dir());
    if (run("cc -print-multiarch", out, sizeof(out)) == 0)
        snprintf(multiarch, sizeof(multiarch), "%.*s", (int)strcspn(out, "\n"), out);
    snprintf(libdir, sizeof(libdir), "/usr/lib%s%s", multiarch[0] ? "/" : "", multiarch);
    if (run("pkg-config --variable=systemdsystemunitdir systemd", out, sizeof(out)) == 0 &&
        out[0] == '/')
        snprintf(unitdir, sizeof(unitdir), "%.*s", (int)strcspn(out, "\n"), out);
    else
        snprintf(unitdir, sizeof(unitdir), "/lib/systemd/system");
    return 0;
}

static int install_teardown(void **state)
{
    char cmd[128];
    int r = harness_teardown(state);

    if (root[0]) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        if (system(cmd) != 0)
            r = -1;
        root[0] = '\0';
    }
    return r;
}

static void do_install(void)
{
    char *out = harness_scratch(OUT_MAX), extra[256];

    assert_non_null(out);
    snprintf(extra, sizeof(extra), "DESTDIR='%s' PREFIX=/usr", root);
    if (make("install", extra, out, OUT_MAX) != 0)
        fail_msg("make install failed:\n%s", out);
}

/* Asserts that $root@rel exists with @mode (file type bits included). */
static void expect_file(const char *rel, mode_t type, mode_t perm)
{
    char path[512];
    struct stat st;

    snprintf(path, sizeof(path), "%s%s", root, rel);
    if (lstat(path, &st) < 0)
        fail_msg("%s: not installed (%s)", rel, strerror(errno));
    if ((st.st_mode & S_IFMT) != type)
        fail_msg("%s: wrong file type 0%o", rel, (unsigned)(st.st_mode & S_IFMT));
    if (type != S_IFLNK && (st.st_mode & 07777) != perm)
        fail_msg("%s: mode 0%o, want 0%o", rel, (unsigned)(st.st_mode & 07777), (unsigned)perm);
}

/* Asserts that $root@rel does not exist. */
static void expect_absent(const char *rel)
{
    char path[512];
    struct stat st;

    snprintf(path, sizeof(path), "%s%s", root, rel);
    if (lstat(path, &st) == 0)
        fail_msg("%s: installed, and must not be", rel);
    if (errno != ENOENT)
        fail_msg("%s: %s", rel, strerror(errno));
}

static void expect_grep(const char *rel, const char *fixed)
{
    char cmd[1024], out[256];

    snprintf(cmd, sizeof(cmd), "grep -qxF -- '%s' '%s%s'", fixed, root, rel);
    if (run(cmd, out, sizeof(out)) != 0)
        fail_msg("%s has no line \"%s\"", rel, fixed);
}

static void test_install_tree(void **state)
{
    char rel[256], link[256], path[512], *out = harness_scratch(OUT_MAX);
    ssize_t n;

    (void)state;
    assert_non_null(out);
    do_install();
    expect_file("/usr/sbin/divvyd", S_IFREG, 0755);
    /* A benchmark, not a user command: out of the PATH. */
    expect_file("/usr/libexec/divvy/divvy-bench", S_IFREG, 0755);
    expect_absent("/usr/bin/divvy-bench");
    expect_file("/etc/divvy/divvy.conf", S_IFREG, 0644);
    snprintf(rel, sizeof(rel), "%s/divvyd.service", unitdir);
    expect_file(rel, S_IFREG, 0644);
    expect_grep(rel, "ExecStart=/usr/sbin/divvyd --config /etc/divvy/divvy.conf");
    expect_grep(rel, "ExecReload=+/usr/bin/divvyctl reload");
    expect_grep(rel, "Type=notify");
    snprintf(rel, sizeof(rel), "%s/divvyd.socket", unitdir);
    expect_file(rel, S_IFREG, 0644);
    expect_grep(rel, "ListenStream=/run/divvy/divvy.sock");
    /* An example only: a mount unit for /run/divvy in the unit directory is
     * pulled in by divvyd.socket whether enabled or not. */
    snprintf(rel, sizeof(rel), "%s/run-divvy.mount", unitdir);
    expect_absent(rel);
    expect_file("/usr/share/doc/divvy/examples/run-divvy.mount", S_IFREG, 0644);
    expect_grep("/usr/share/doc/divvy/examples/run-divvy.mount", "Where=/run/divvy");
    /* Nothing enabled: no wants/ link anywhere. */
    snprintf(path, sizeof(path), "cd '%s' && find . -name '*.wants' -o -name '*.requires'", root);
    assert_int_equal(run(path, out, OUT_MAX), 0);
    if (out[0])
        fail_msg("make install enabled units:\n%s", out);
    expect_file("/usr/lib/sysusers.d/divvy.conf", S_IFREG, 0644);
    expect_file("/usr/lib/tmpfiles.d/divvy.conf", S_IFREG, 0644);
    expect_grep("/usr/lib/tmpfiles.d/divvy.conf", "d /run/divvy 2755 divvy divvy-fast -");
    expect_file("/usr/share/man/man8/divvyd.8", S_IFREG, 0644);
    expect_file("/usr/share/man/man8/divvyctl.8", S_IFREG, 0644);
    expect_file("/usr/share/man/man5/divvy.conf.5", S_IFREG, 0644);
    expect_file("/usr/share/man/man8/pam_divvy.8", S_IFREG, 0644);
    expect_file("/usr/share/man/man3/libdivvy.3", S_IFREG, 0644);
    expect_file("/usr/share/doc/divvy/examples/divvy.ini", S_IFREG, 0644);

    if (built("divvyctl"))
        expect_file("/usr/bin/divvyctl", S_IFREG, 0755);
    if (built("pam_divvy.so")) {
        snprintf(rel, sizeof(rel), "%s/security/pam_divvy.so", libdir);
        expect_file(rel, S_IFREG, 0644);
    }
    if (built("libdivvy.so.0")) {
        snprintf(rel, sizeof(rel), "%s/libdivvy.so.0.1.0", libdir);
        expect_file(rel, S_IFREG, 0644);
        snprintf(rel, sizeof(rel), "%s/libdivvy.so.0", libdir);
        expect_file(rel, S_IFLNK, 0);
        snprintf(rel, sizeof(rel), "%s/libdivvy.so", libdir);
        expect_file(rel, S_IFLNK, 0);
        snprintf(rel, sizeof(rel), "%s/libdivvy.a", libdir);
        expect_file(rel, S_IFREG, 0644);
        expect_file("/usr/include/divvy.h", S_IFREG, 0644);
        snprintf(rel, sizeof(rel), "%s/pkgconfig/divvy.pc", libdir);
        expect_file(rel, S_IFREG, 0644);
        expect_grep(rel, "prefix=/usr");
        snprintf(link, sizeof(link), "libdir=%s", libdir);
        expect_grep(rel, link);
        snprintf(path, sizeof(path), "%s%s/libdivvy.so.0", root, libdir);
        n = readlink(path, link, sizeof(link) - 1);
        assert_true(n > 0);
        link[n] = '\0';
        assert_string_equal(link, "libdivvy.so.0.1.0");
        snprintf(path, sizeof(path), "%s%s/libdivvy.so", root, libdir);
        n = readlink(path, link, sizeof(link) - 1);
        assert_true(n > 0);
        link[n] = '\0';
        assert_string_equal(link, "libdivvy.so.0");
        /* The soname the links serve. */
        snprintf(path, sizeof(path), "objdump -p '%s%s/libdivvy.so.0.1.0' | "
                 "grep -q 'SONAME *libdivvy.so.0$'", root, libdir);
        if (run(path, out, OUT_MAX) != 0)
            fail_msg("libdivvy.so.0.1.0 has no SONAME libdivvy.so.0");
    }
    /* Installed programs must not look for libdivvy in the build tree. */
    snprintf(path, sizeof(path), "for f in '%s'/usr/bin/* '%s'/usr/sbin/* '%s'/usr/libexec/divvy/*; do "
             "objdump -p \"$f\" | grep -E 'R(UN)?PATH' && echo \"$f\"; done; true", root, root, root);
    assert_int_equal(run(path, out, OUT_MAX), 0);
    if (out[0])
        fail_msg("installed programs with an rpath:\n%s", out);
}

static void test_install_keeps_config(void **state)
{
    char path[256], *out = harness_scratch(OUT_MAX), buf[128] = "";
    FILE *f;

    (void)state;
    assert_non_null(out);
    do_install();
    snprintf(path, sizeof(path), "%s/etc/divvy/divvy.conf", root);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("# the admin's own\n", f);
    assert_int_equal(fclose(f), 0);
    do_install();
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_string_equal(buf, "# the admin's own\n");

    /* uninstall takes everything else and leaves the config. */
    snprintf(buf, sizeof(buf), "DESTDIR='%s' PREFIX=/usr", root);
    if (make("uninstall", buf, out, OUT_MAX) != 0)
        fail_msg("make uninstall failed:\n%s", out);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "cd '%s' && find . -type f ! -path ./etc/divvy/divvy.conf", root);
    assert_int_equal(run(path, out, OUT_MAX), 0);
    if (out[0])
        fail_msg("left after uninstall:\n%s", out);
}

static void test_install_examples_build_against_pc(void **state)
{
    struct harness_opts o = { .config_name = "divvy.conf" };
    struct harness_daemon *d = NULL;
    char src[512], cmd[4096], path[512], *out = harness_scratch(OUT_MAX);

    (void)state;
    assert_non_null(out);
    if (!built("libdivvy.so.0"))
        skip();
    do_install();
    CHECK(harness_src_path("", src, sizeof(src)));
    /* The .pc says /usr; the sysroot points pkg-config's paths into DESTDIR. */
    snprintf(cmd, sizeof(cmd),
             "set -e; export PKG_CONFIG_PATH='%s%s/pkgconfig' PKG_CONFIG_SYSROOT_DIR='%s';"
             "pkg-config --exists divvy; n=0; san=;"
             /* An ASan build's library needs its runtime loaded first. */
             "if nm -D '%s%s/libdivvy.so.0' | grep -q __asan_init; then"
             "  san='-fsanitize=address,undefined'; fi;"
             "for f in '%s'/docs/examples/*.c; do [ -e \"$f\" ] || continue;"
             "  b=$(basename \"$f\" .c);"
             "  cc -std=gnu11 -Wall -Werror $san $(pkg-config --cflags divvy) \"$f\" -o '%s'/$b"
             "     $(pkg-config --libs divvy);"
             "  n=$((n+1)); done; echo built $n",
             root, libdir, root, root, libdir, src, root);
    if (run(cmd, out, OUT_MAX) != 0)
        fail_msg("building the examples against the installed divvy.pc:\n%s", out);
    if (strcmp(out, "built 0\n") == 0)
        skip();

    /* hit, linked against the installed library, asks a live divvyd. */
    snprintf(path, sizeof(path), "%s/hit", root);
    if (access(path, X_OK) != 0)
        return;
    CHECK(harness_src_path("etc/divvy.conf", src, sizeof(src)));
    o.config_src = src;
    CHECK(harness_start(&o, &d));
    snprintf(cmd, sizeof(cmd), "LD_LIBRARY_PATH='%s%s' DIVVY_ADDRESS='unix:%s' "
             "DIVVY_PATH=socket '%s' method=GET path=/status", root, libdir, d->sock, path);
    if (run(cmd, out, OUT_MAX) != 0 || strncmp(out, "allowed credit=999", 18) != 0)
        fail_msg("installed example hit: %s", out);
}

static void test_install_units_verify(void **state)
{
    char cmd[2048], *out = harness_scratch(OUT_MAX);

    (void)state;
    assert_non_null(out);
    if (system("command -v systemd-analyze >/dev/null 2>&1") != 0)
        skip();
    do_install();
    /* divvyctl may not be built yet: verify wants an executable for ExecReload. */
    snprintf(cmd, sizeof(cmd), "test -x '%s/usr/bin/divvyctl' || "
             "{ cp /bin/true '%s/usr/bin/divvyctl'; }", root, root);
    assert_int_equal(run(cmd, out, OUT_MAX), 0);
    /* The installed units, their programs looked up inside DESTDIR (verify
     * --root wants a whole system there). */
    snprintf(cmd, sizeof(cmd), "set -e; mkdir -p '%s/verify'; cd '%s/verify';"
             "for u in divvyd.service divvyd.socket; do"
             "  sed -e 's|/usr/sbin/divvyd|%s/usr/sbin/divvyd|'"
             "      -e 's|/usr/bin/divvyctl|%s/usr/bin/divvyctl|' '%s%s/'$u > $u; done;"
             "cp '%s/usr/share/doc/divvy/examples/run-divvy.mount' .;"
             "MANPATH='%s/usr/share/man' systemd-analyze verify ./divvyd.socket ./divvyd.service"
             " ./run-divvy.mount",
             root, root, root, root, root, unitdir, root, root);
    if (run(cmd, out, OUT_MAX) != 0 || out[0])
        fail_msg("systemd-analyze verify on the installed units:\n%s", out);
}

static void test_install_man_pages_render(void **state)
{
    char src[512], cmd[2048], *out = harness_scratch(OUT_MAX);

    (void)state;
    assert_non_null(out);
    if (system("command -v man >/dev/null 2>&1") != 0)
        skip();
    CHECK(harness_src_path("docs/man", src, sizeof(src)));
    /* Each page: rendered to /dev/null, every warning on stderr, exit status 0. */
    snprintf(cmd, sizeof(cmd),
             "n=0; for p in '%s'/*.[1-8]; do n=$((n+1));"
             "  MANWIDTH=80 man --warnings -l \"$p\" 2>&1 >/dev/null | sed \"s|^|$p: |\";"
             "  MANWIDTH=80 man -l \"$p\" >/dev/null 2>&1 || echo \"$p: man failed\"; done;"
             "[ $n -ge 4 ] || echo \"only $n man pages\"", src);
    assert_int_equal(run(cmd, out, OUT_MAX), 0);
    if (out[0])
        fail_msg("man page warnings:\n%s", out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_install_tree, install_setup, install_teardown),
        cmocka_unit_test_setup_teardown(test_install_keeps_config, install_setup,
                                        install_teardown),
        cmocka_unit_test_setup_teardown(test_install_examples_build_against_pc, install_setup,
                                        install_teardown),
        cmocka_unit_test_setup_teardown(test_install_units_verify, install_setup,
                                        install_teardown),
        cmocka_unit_test_setup_teardown(test_install_man_pages_render, install_setup,
                                        install_teardown),
    };

    return cmocka_run_group_tests_name("install", tests, NULL, NULL);
}
