#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The build's own interface, as a first-time user meets it: a build step
# prints one short line ("  CC      build/common/hash.o"), V=1 the whole
# command, and a failing step its error and a non-zero status; `make help`
# names every phony target of the Makefile; tools/deps.sh answers --help
# with a usage text and an unknown mode with exit 2; `make run` composes
# its command from RUN_CONFIG and RUN_LISTEN (make -n); tests/run_tests.sh
# stays quiet over a green binary, prints a red one's output and counts
# skips with their reasons (on fake test binaries).  Compiles one file
# three times into a temporary build directory (about a second).  Run by
# `make check-unit`; exits 1 listing every failure.
set -u

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
# Not the calling make's flags, variables (V=1, B=) or jobserver.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() {
    echo "check_make: $*" >&2
    failed=1
}
mk() {
    make --no-print-directory B="$tmp/b" "$@" >"$tmp/out" 2>&1
}

# Quiet by default: exactly one line for one object.
obj=$tmp/b/common/hash.o
if ! mk "$obj"; then
    fail "make $obj failed:"; cat "$tmp/out" >&2
elif [ "$(cat "$tmp/out")" != "  CC      $obj" ]; then
    fail "make $obj printed, instead of one '  CC      $obj' line:"; cat "$tmp/out" >&2
fi
# V=1: the whole command.
if ! mk -B V=1 "$obj" || ! grep -q -- "-c common/hash.c -o $obj" "$tmp/out"; then
    fail "make V=1 $obj did not print its command:"; cat "$tmp/out" >&2
fi
# An error stays visible and fails the build.
if mk -B CFLAGS="-include $tmp/missing.h" "$obj"; then
    fail "a failing compile of $obj succeeded"
elif ! grep -q "missing.h" "$tmp/out"; then
    fail "a failing compile did not show the compiler's error:"; cat "$tmp/out" >&2
fi

# make help: every .PHONY target (continuation lines joined).
phony=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' Makefile | sed -n 's/^\.PHONY *: *//p')
[ -n "$phony" ] || fail "no .PHONY target found in the Makefile"
if ! make --no-print-directory -s help >"$tmp/help" 2>&1; then
    fail "make help failed"
fi
for t in $phony; do
    grep -qE -- "(^|[ ,])$t([ ,:]|\$)" "$tmp/help" || fail "make help does not list '$t'"
done

# tools/deps.sh: --help, unknown modes.
if ! tools/deps.sh --help >"$tmp/out" 2>&1 || ! grep -q '^Usage: tools/deps.sh' "$tmp/out"; then
    fail "tools/deps.sh --help: no usage text, or not exit 0:"; cat "$tmp/out" >&2
fi
for m in list check install-build install; do
    grep -q "^  $m " "$tmp/out" || fail "tools/deps.sh --help does not describe '$m'"
done
tools/deps.sh --bogus >"$tmp/out" 2>&1
rc=$?
if [ "$rc" != 2 ] || ! grep -q "unknown mode" "$tmp/out"; then
    fail "tools/deps.sh --bogus: exit $rc (want 2 and 'unknown mode'):"; cat "$tmp/out" >&2
fi

# make run: --listen for its two addresses by default (divvyd logs what that
# leaves out of the config's server.listen); RUN_LISTEN= keeps the config's,
# RUN_LISTEN and RUN_CONFIG replace them.  make -n, its sub-make a no-op.
runcmd() {
    make --no-print-directory -n run MAKE=true B="$tmp/b" "$@" 2>&1 | tail -1
}
want="$tmp/b/divvyd --config etc/divvy.conf --state-dir $tmp/b/run --listen tcp:127.0.0.1:8321 --listen unix:$tmp/b/run/divvy.sock"
[ "$(runcmd)" = "$want" ] || fail "make run runs '$(runcmd)', not '$want'"
want="$tmp/b/divvyd --config etc/divvy.conf --state-dir $tmp/b/run "
[ "$(runcmd RUN_LISTEN=)" = "$want" ] || fail "make run RUN_LISTEN= runs '$(runcmd RUN_LISTEN=)'"
want="$tmp/b/divvyd --config my.conf --state-dir $tmp/b/run --listen resp:unix:r.sock --listen tcp:[::1]:1"
[ "$(runcmd RUN_CONFIG=my.conf RUN_LISTEN='resp:unix:r.sock tcp:[::1]:1')" = "$want" ] ||
    fail "make run RUN_CONFIG=my.conf RUN_LISTEN='resp:unix:r.sock tcp:[::1]:1' runs" \
         "'$(runcmd RUN_CONFIG=my.conf RUN_LISTEN='resp:unix:r.sock tcp:[::1]:1')'"

# tests/run_tests.sh (make check-unit, check-integration): quiet when a
# binary passes, its whole output when it fails, skips counted with reasons.
mkdir -p "$tmp/t"
printf '#!/bin/sh\necho "harness: divvyd did not become ready (expected)" >&2\nexit 0\n' \
    >"$tmp/t/test_green"
printf '#!/bin/sh\necho "SKIP: widget not installed (apt-get install widget)"\nexit 77\n' \
    >"$tmp/t/test_absent"
printf '#!/bin/sh\necho "boom: the details"\nexit 3\n' >"$tmp/t/test_red"
cat >"$tmp/t/test_cm" <<'CM'
#!/bin/sh
printf '[ RUN      ] one\n  SKIP: redis-cli not installed\n[  SKIPPED ] one\n'
printf '[ RUN      ] two\nnoise of two\n[       OK ] two\n[ RUN      ] three\n[       OK ] three\n'
printf '[  SKIPPED ] 1 test(s), listed below:\n[  SKIPPED ] one\n'
CM
chmod +x "$tmp/t"/test_*
: >"$tmp/skiplog"
DIVVY_SKIP_LOG=$tmp/skiplog tests/run_tests.sh "$tmp/t/test_green" "$tmp/t/test_absent" \
    "$tmp/t/test_red" "$tmp/t/test_cm" >"$tmp/out" 2>&1
rc=$?
want="== test_green: 1 passed, * s
== test_absent: 0 passed, 1 skipped, * s
boom: the details
== test_red: FAILED (exit 3), * s
== test_cm: 2 passed, 1 skipped, * s
tests: 3 passed, 2 skipped:
  test_absent (SKIP: widget not installed (apt-get install widget))
  test_cm/one (SKIP: redis-cli not installed)
FAILED: test_red"
case $(sed 's/, [0-9]* s$/, * s/' "$tmp/out") in
    "$want") ;;
    *) fail "tests/run_tests.sh printed, instead of the expected summary:"; cat "$tmp/out" >&2 ;;
esac
[ "$rc" = 1 ] || fail "tests/run_tests.sh exited $rc over a failing binary (want 1)"
[ "$(wc -l <"$tmp/skiplog")" = 2 ] || fail "tests/run_tests.sh: DIVVY_SKIP_LOG has not the 2 skips"
if ! tests/run_tests.sh "$tmp/t/test_green" >"$tmp/out" 2>&1 ||
        [ "$(sed 's/, [0-9]* s$/, * s/' "$tmp/out")" != "== test_green: 1 passed, * s
tests: 1 passed, 0 skipped" ]; then
    fail "tests/run_tests.sh on a green binary was not two quiet lines:"; cat "$tmp/out" >&2
fi

[ "$failed" = 0 ] && echo "check_make: quiet build, make help, tools/deps.sh --help, make run and the test runner as documented"
exit "$failed"
