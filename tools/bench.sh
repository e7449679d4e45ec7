#!/bin/sh
# SPDX-License-Identifier: MIT
# bench.sh BUILDDIR: runs the divvy-bench matrix against a fresh divvyd.
#
# Starts BUILDDIR/divvyd in a temp dir with a generous per-actor window rule
# (most hits are allowed, and 10000 actors exercise the counter table), on a
# temp Unix socket and a free loopback TCP port; runs BUILDDIR/divvy-bench
# for unix 1x1, unix 8x32, tcp 1x1 and tcp 8x32 (connections x pipeline
# depth), then through libdivvy: its socket path 8x32 and its shared-memory
# fast path with 1 and 2 threads (the rule is fast_path), BENCH_DURATION
# seconds each (default 5); prints a table; stops the
# daemon by PID and removes the temp dir on any exit.  Numbers are reported,
# never judged: the exit status is 0 unless the benchmark could not run.
set -eu

B=${1:?usage: tools/bench.sh BUILDDIR}
DIVVYD=$B/divvyd
BENCH=$B/divvy-bench
DUR=${BENCH_DURATION:-5}
KEYS=${BENCH_KEYS:-10000}

for f in "$DIVVYD" "$BENCH"; do
    [ -x "$f" ] || { echo "bench.sh: $f not built (run make)" >&2; exit 1; }
done

T=$(mktemp -d /tmp/divvy-bench.XXXXXX)
pid=

stop_daemon() {
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    # Up to 10 s for a clean exit, then SIGKILL.
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "bench.sh: divvyd ignored SIGTERM; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    pid=
}
cleanup() {
    stop_daemon
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cat >"$T/bench.ini" <<'EOF'
[path=/bench actor=*]
creditLimit = 1000000000
resetSeconds = 3600
actorField = actor
fastPath = true
comment = 'divvy-bench: generous, per actor'

[default]
creditLimit = 0
resetSeconds = 0
EOF

# A loopback port nobody listens on (checked against /proc/net/tcp), retried
# if divvyd still finds it taken.
port_in_use() {
    hex=$(printf '%04X' "$1")
    grep -q ":$hex .* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

sock=$T/divvy.sock
started=0
for _ in 1 2 3 4 5; do
    port=$(( $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 30000 + 30000 ))
    port_in_use "$port" && continue
    "$DIVVYD" --config "$T/bench.ini" --state-dir "$T" \
        --listen "unix:$sock" --listen "tcp:127.0.0.1:$port" 2>"$T/divvyd.log" &
    pid=$!
    # Ready when both listeners answer (polling with a 15 s deadline).
    i=0
    while [ $i -lt 300 ]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid" 2>/dev/null || true
            pid=
            break
        fi
        if "$BENCH" --unix "$sock" -t 0.01 -q >/dev/null 2>&1 &&
           "$BENCH" --tcp "127.0.0.1:$port" -t 0.01 -q >/dev/null 2>&1; then
            started=1
            break
        fi
        sleep 0.05
        i=$((i + 1))
    done
    [ $started = 1 ] && break
    stop_daemon
    grep -qi "in use" "$T/divvyd.log" 2>/dev/null || break
done
if [ $started != 1 ]; then
    echo "bench.sh: divvyd did not start; its log:" >&2
    sed 's/^/  | /' "$T/divvyd.log" >&2
    exit 1
fi

ver=$("$DIVVYD" --version 2>/dev/null | head -n1 || true)
echo "${ver:-divvyd ?} on $(nproc) CPUs; ${DUR} s per run, $KEYS actors," \
     "batch latency in microseconds"
printf '%-9s %5s %5s %12s %10s %10s %10s %7s\n' \
    transport conns depth hits/s p50 p99 p99.9 errors
for run in "unix 1 1" "unix 8 32" "tcp 1 1" "tcp 8 32" "lib-unix 8 32" "shm 1 1" "shm 2 1"; do
    # shellcheck disable=SC2086 # split "unix 1 1" into its fields
    set -- $run
    case $1 in
    unix) target="--unix $sock" ;;
    tcp) target="--tcp 127.0.0.1:$port" ;;
    lib-unix) target="--unix $sock --lib socket" ;;
    shm) target="--unix $sock --lib fast" ;;
    esac
    # shellcheck disable=SC2086
    if out=$("$BENCH" $target -c "$2" -d "$3" -t "$DUR" -k "$KEYS" -q); then
        set -- "$1" "$2" "$3" $out
        printf '%-9s %5s %5s %12s %10s %10s %10s %7s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8"
    else
        printf '%-9s %5s %5s %12s\n' "$1" "$2" "$3" "failed"
    fi
done
if ! kill -0 "$pid" 2>/dev/null; then
    echo "bench.sh: divvyd died during the benchmark; its log:" >&2
    sed 's/^/  | /' "$T/divvyd.log" >&2
    exit 1
fi
