#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/run_tests.sh BIN...: the test runner of `make check-unit` and
# `make check-integration` (the Makefile's run_tests).  Runs every test
# binary, even after one fails, each with its output (stdout and stderr,
# divvyd's logs the harness prints included) kept in a file: a binary that
# passes prints one line ("== test_x: 5 passed, 9 s"), one that fails prints
# its whole output and "== test_x: FAILED (exit N)".  Tests skipped - a cmocka
# test that called skip(), or a binary that exited 77 - are counted with their
# reason (the last line saying SKIP before them) and listed at the end:
#   tests: 41 passed, 2 skipped: test_x/case (SKIP: redis-cli not installed), ...
# With DIVVY_SKIP_LOG set (make check), the skips are appended to that file
# too, for make check's last line.  Exits 1 when a binary failed (listing
# them), else 0.
set -u

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=""
passed=0
: >"$tmp/skips"
for t in "$@"; do
    name=${t##*/}
    s=$(date +%s)
    "$t" >"$tmp/out" 2>&1
    rc=$?
    secs=$(( $(date +%s) - s ))
    # cmocka's "[ RUN ] x" ... "[ SKIPPED ] x" and "[ OK ] x"; a reason is
    # the last line naming SKIP since the test started.
    awk -v bin="$name" -v rc="$rc" -v skips="$tmp/skips" '
        /^\[ RUN      \] / { cur = $4; why = ""; next }
        /^\[  SKIPPED \] / { if ($4 == cur && cur != "") {
                                 print bin "/" cur " (" (why == "" ? "no reason given" : why) ")" >> skips
                                 n_skip++; cur = "" }
                             next }
        /^\[       OK \] / { n_ok++; cur = ""; next }
        /SKIP/ { why = $0; sub(/^[ \t]+/, "", why); last = why }
        END {
            if (rc == 77) { print bin " (" (last == "" ? "exit 77" : last) ")" >> skips; n_skip++ }
            else if (rc == 0 && n_ok + n_skip == 0) n_ok = 1
            printf "%d %d\n", n_ok, n_skip
        }' "$tmp/out" >"$tmp/counts"
    read -r ok sk <"$tmp/counts"
    passed=$((passed + ok))
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
        cat "$tmp/out"
        echo "== $name: FAILED (exit $rc), $secs s"
        failed="$failed $name"
    elif [ "$sk" != 0 ]; then
        echo "== $name: $ok passed, $sk skipped, $secs s"
    else
        echo "== $name: $ok passed, $secs s"
    fi
done
n_skip=$(wc -l <"$tmp/skips")
if [ "$n_skip" = 0 ]; then
    echo "tests: $passed passed, 0 skipped"
else
    echo "tests: $passed passed, $n_skip skipped:"
    sed 's/^/  /' "$tmp/skips"
    [ -n "${DIVVY_SKIP_LOG:-}" ] && cat "$tmp/skips" >>"$DIVVY_SKIP_LOG"
fi
if [ -n "$failed" ]; then
    echo "FAILED:$failed" >&2
    exit 1
fi
exit 0
