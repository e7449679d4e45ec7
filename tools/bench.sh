#!/bin/sh
# SPDX-License-Identifier: MIT
# bench.sh BUILDDIR: runs the divvy-bench matrix against fresh divvyds.
#
# Local store: starts BUILDDIR/divvyd in a temp dir with a generous per-actor
# window rule (most hits are allowed, and 10000 actors exercise the counter
# table), on a temp Unix socket and a free loopback TCP port; runs
# BUILDDIR/divvy-bench for unix 1x1, unix 8x32, tcp 1x1 and tcp 8x32
# (connections x pipeline depth), then through libdivvy: its socket path 8x32
# and its shared-memory fast path with 1 and 2 threads (the rule is fast_path),
# then the same hits as RESP DIVVY.HIT arrays on a resp: Unix listener
# (docs/resp.md) 1x1 and 8x32, and a ratio to the unix rows.
#
# Redis stores (docs/redis.md §9): starts its own redis-server in the temp dir
# (a Unix socket, no persistence), then one divvyd with store.mode = "strict"
# and, after it, one with store.mode = "lease" (the rule a window rule with a
# large limit, fast_path), each on a Unix socket only; runs strict unix 8x32,
# lease unix 8x32 (the local unix 8x32 workload; after an uncounted 1 s
# warm-up, so the leases exist, as the local row's counters do) and lease shm
# 1 thread (divvy-bench --lib auto: libdivvy spends the lease in-process and
# sends the hits at the low-water mark, or beyond the lease, to divvyd).
# Without redis-server on PATH those rows say so and are skipped.
#
# Envoy's rate limit service (docs/rls.md): the local divvyd also listens on
# rls:tcp:, and BUILDDIR/divvy-rls-bench (built by make bench) runs rls-tcp
# 1x1 and 8x32 (HTTP/2 connections x calls in flight, one descriptor per
# call) on the same rule; the notes give each as a ratio to the tcp row of
# the same shape.
#
# BENCH_DURATION seconds per row (default 5), BENCH_KEYS actors (default
# 10000); prints one table.  Stops every process it started (divvyds,
# redis-server) by PID and removes the temp dir on any exit.  Numbers are
# reported, never judged: the exit status is 0 unless the benchmark could not
# run (a divvyd or redis-server that does not start).
set -eu

B=${1:?usage: tools/bench.sh BUILDDIR}
DIVVYD=$B/divvyd
BENCH=$B/divvy-bench
RLSBENCH=$B/divvy-rls-bench
CTL=$B/divvyctl
DUR=${BENCH_DURATION:-5}
KEYS=${BENCH_KEYS:-10000}

for f in "$DIVVYD" "$BENCH"; do
    [ -x "$f" ] || { echo "bench.sh: $f not built (run make)" >&2; exit 1; }
done

redis_skip=''
if ! command -v redis-server >/dev/null 2>&1; then
    echo "bench.sh: redis-server not on PATH (apt-get install redis-server):" \
         "skipping the strict and lease rows" >&2
    redis_skip="no redis-server on PATH"
fi

T=$(mktemp -d /tmp/divvy-bench.XXXXXX)
pid=''
rpid=''
status=0
notes=''

# stop_pid PID NAME: SIGTERM, up to 10 s for a clean exit, then SIGKILL.
stop_pid() {
    [ -n "$1" ] || return 0
    kill -TERM "$1" 2>/dev/null || true
    i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    if kill -0 "$1" 2>/dev/null; then
        echo "bench.sh: $2 ignored SIGTERM; killing it" >&2
        kill -KILL "$1" 2>/dev/null || true
    fi
    wait "$1" 2>/dev/null || true
}
stop_daemon() {
    stop_pid "$pid" divvyd
    pid=
}
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    stop_daemon
    stop_pid "$rpid" redis-server
    rpid=
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# cols STORE TRANSPORT CONNS DEPTH HITS/S P50 P99 P99.9 ERRORS: a table line.
cols() {
    printf '%-6s %-9s %5s %5s %12s %10s %10s %10s %7s\n' "$@"
}
# row STORE TRANSPORT CONNS DEPTH DIVVY-BENCH-ARGS...: one line of the table;
# its hits/s in $rate.
row() {
    store=$1 tr=$2 c=$3 d=$4
    shift 4
    rate=
    if out=$("$BENCH" "$@" -c "$c" -d "$d" -t "$DUR" -k "$KEYS" -q); then
        # shellcheck disable=SC2086 # split "hits/s p50 p99 p999 errors"
        set -- $out
        rate=$1
        cols "$store" "$tr" "$c" "$d" "$1" "$2" "$3" "$4" "$5"
    else
        printf '%-6s %-9s %5s %5s %12s\n' "$store" "$tr" "$c" "$d" "failed"
    fi
}
# rls_row STORE CONNS DEPTH HOST:PORT: an rls-tcp line (divvy-rls-bench); its
# calls/s in $rate.
rls_row() {
    rate=
    if out=$("$RLSBENCH" "$4" -c "$2" -d "$3" -t "$DUR" -k "$KEYS" -q); then
        # shellcheck disable=SC2086 # split "calls/s p50 p99 p999 errors"
        set -- "$1" "$2" "$3" $out
        rate=$4
        cols "$1" rls-tcp "$2" "$3" "$4" "$5" "$6" "$7" "$8"
    else
        printf '%-6s %-9s %5s %5s %12s\n' "$1" rls-tcp "$2" "$3" "failed"
    fi
}
# ratio A B: A / B to two decimals ("?" when either is missing).
ratio() {
    if [ -n "$1" ] && [ -n "$2" ]; then
        awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'
    else
        echo "?"
    fi
}
# skip STORE TRANSPORT CONNS DEPTH REASON
skip() {
    printf '%-6s %-9s %5s %5s   %s\n' "$1" "$2" "$3" "$4" "skipped: $5"
}

# A loopback port nobody listens on (checked against /proc/net/tcp), retried
# if divvyd still finds it taken.
port_in_use() {
    hex=$(printf '%04X' "$1")
    grep -q ":$hex .* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# stat_of NAME: one value of divvyd's STATS on $sock ("?" when unavailable).
stat_of() {
    v=
    [ -x "$CTL" ] &&
        v=$("$CTL" -s "unix:$sock" stats 2>/dev/null | awk -v k="$1" '$1 == k { print $2 }')
    echo "${v:-?}"
}

# start_divvyd CONFIG DIR TCP(0|1): a foreground divvyd with its state and
# Unix socket ($sock) in DIR, a RESP Unix socket ($resp, docs/resp.md), and
# with TCP 1 also on a free loopback port ($port) and, with divvy-rls-bench
# built, an RLS listener on the next free one ($rport, else empty).  Ready when every listener answers (15 s deadline); a daemon with
# a Redis rule also waits (5 s) for STATS redis_state up.  Sets $pid; on
# failure prints the log and returns 1.
start_divvyd() {
    conf=$1 dir=$2 tcp=$3
    sock=$dir/divvy.sock resp=$dir/resp.sock log=$dir.log
    mkdir -p "$dir"
    started=0
    for _ in 1 2 3 4 5; do
        set -- --listen "unix:$sock" --listen "resp:unix:$resp"
        if [ "$tcp" = 1 ]; then
            port=$(( $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 30000 + 30000 ))
            port_in_use "$port" && continue
            set -- "$@" --listen "tcp:127.0.0.1:$port"
            rport=
            if [ -x "$RLSBENCH" ] && ! port_in_use $((port + 1)); then
                rport=$((port + 1))
                set -- "$@" --listen "rls:tcp:127.0.0.1:$rport"
            fi
        fi
        "$DIVVYD" --config "$conf" --state-dir "$dir" "$@" 2>"$log" &
        pid=$!
        i=0
        while [ $i -lt 300 ]; do
            if ! kill -0 "$pid" 2>/dev/null; then
                wait "$pid" 2>/dev/null || true
                pid=
                break
            fi
            if "$BENCH" --unix "$sock" -t 0.01 -q >/dev/null 2>&1 &&
               { [ "$tcp" = 0 ] ||
                 "$BENCH" --tcp "127.0.0.1:$port" -t 0.01 -q >/dev/null 2>&1; }; then
                started=1
                break
            fi
            sleep 0.05
            i=$((i + 1))
        done
        [ $started = 1 ] && break
        stop_daemon
        # Only a TCP port taken meanwhile is worth another try.
        if [ "$tcp" = 0 ] || ! grep -qi "in use" "$log" 2>/dev/null; then
            break
        fi
    done
    if [ $started != 1 ]; then
        echo "bench.sh: divvyd ($conf) did not start; its log:" >&2
        sed 's/^/  | /' "$log" >&2
        return 1
    fi
    if grep -q '^redis' "$conf" && [ -x "$CTL" ]; then
        i=0
        while [ "$(stat_of redis_state)" != up ] && [ $i -lt 100 ]; do
            sleep 0.05
            i=$((i + 1))
        done
    fi
    return 0
}

# alive NAME: after a daemon's rows, complain (and fail) if it died.
alive() {
    kill -0 "$pid" 2>/dev/null && return 0
    echo "bench.sh: divvyd ($1) died during the benchmark; its log:" >&2
    sed 's/^/  | /' "$log" >&2
    pid=
    status=1
    return 1
}

# ---- local store ---------------------------------------------------------------
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

start_divvyd "$T/bench.ini" "$T/local" 1 || exit 1

ver=$("$DIVVYD" --version 2>/dev/null | head -n1 || true)
echo "${ver:-divvyd ?} on $(nproc) CPUs; ${DUR} s per run, $KEYS actors," \
     "batch latency in microseconds"
cols store transport conns depth hits/s p50 p99 p99.9 errors
row local unix 1 1 --unix "$sock"
row local unix 8 32 --unix "$sock"
row local tcp 1 1 --tcp "127.0.0.1:$port"
tcp11=$rate
row local tcp 8 32 --tcp "127.0.0.1:$port"
tcp832=$rate
if [ -n "$rport" ]; then
    rls_row local 1 1 "127.0.0.1:$rport"
    notes="$notes
rls-tcp 1x1: $(ratio "$rate" "$tcp11") x the tcp 1x1 row's rate"
    rls_row local 8 32 "127.0.0.1:$rport"
    notes="$notes
rls-tcp 8x32: $(ratio "$rate" "$tcp832") x the tcp 8x32 row's rate (an RLS call: HTTP/2 + gRPC +
  protobuf, one descriptor, versus one pipelined line)"
else
    skip local rls-tcp 8 32 "$RLSBENCH not built (make bench builds it)"
fi
row local lib-unix 8 32 --unix "$sock" --lib socket
row local shm 1 1 --unix "$sock" --lib fast
row local shm 2 1 --unix "$sock" --lib fast
row local resp-unix 1 1 --unix "$resp" --resp
row local resp-unix 8 32 --unix "$resp" --resp
alive local || exit 1
# RESP against the line protocol, same load shape (docs/resp.md).
r1=$("$BENCH" --unix "$sock" -c 8 -d 32 -t "$DUR" -k "$KEYS" -q 2>/dev/null | cut -d' ' -f1)
r2=$("$BENCH" --unix "$resp" --resp -c 8 -d 32 -t "$DUR" -k "$KEYS" -q 2>/dev/null | cut -d' ' -f1)
[ -n "$r1" ] && [ -n "$r2" ] && [ "$r1" -gt 0 ] 2>/dev/null &&
    notes="$notes
resp: unix 8x32 over RESP at $(awk -v a="$r2" -v b="$r1" 'BEGIN { printf "%.2f", a / b }') x the line protocol's hits/s (measured back to back)"
stop_daemon

# ---- Redis stores ----------------------------------------------------------------
if [ -z "$redis_skip" ]; then
    rsock=$T/redis.sock
    redis-server --port 0 --unixsocket "$rsock" --save '' --appendonly no \
        --dir "$T" --daemonize no --loglevel warning >"$T/redis.log" 2>&1 &
    rpid=$!
    # Ready when it answers PING (without redis-cli: when its socket exists);
    # 10 s deadline.
    i=0
    while :; do
        if ! kill -0 "$rpid" 2>/dev/null; then
            redis_skip="redis-server did not start"
            break
        fi
        if command -v redis-cli >/dev/null 2>&1; then
            [ "$(redis-cli -s "$rsock" ping 2>/dev/null)" = PONG ] && break
        else
            [ -S "$rsock" ] && break
        fi
        i=$((i + 1))
        [ $i -lt 200 ] || { redis_skip="redis-server did not start"; break; }
        sleep 0.05
    done
    # Our own server, so always empty; never benchmark over someone's data.
    if [ -z "$redis_skip" ] && command -v redis-cli >/dev/null 2>&1 &&
       [ "$(redis-cli -s "$rsock" dbsize 2>/dev/null)" != 0 ]; then
        redis_skip="the Redis database is not empty"
    fi
    if [ -n "$redis_skip" ]; then
        echo "bench.sh: $redis_skip; its log:" >&2
        sed 's/^/  | /' "$T/redis.log" >&2
        status=1
    fi
fi

# redis_conf MODE LIMIT: the rule of the local rows, in the native format, with
# store.mode = MODE.  timeout_ms is generous so a busy machine measures Redis,
# not the on_redis_error fallback (the fallbacks are reported below the table).
redis_conf() {
    cat <<EOF
# divvy-bench, tools/bench.sh: store $1
store = { mode = "$1"; };
redis = { unix_socket = "$rsock"; timeout_ms = 2000; };
rules = (
    { match = { path = "/bench"; actor = "*"; }; actor = "actor"; label = "bench-$1";
      credit_limit = $2; reset_seconds = 3600; fast_path = true;
      comment = "divvy-bench: generous, per actor"; },
    { default = true; credit_limit = 0; reset_seconds = 0; }
);
EOF
}

if [ -n "$redis_skip" ]; then
    skip strict unix 8 32 "$redis_skip"
else
    redis_conf strict 1000000000 >"$T/strict.conf"
    if start_divvyd "$T/strict.conf" "$T/strict" 0; then
        row strict unix 8 32 --unix "$sock"
        alive strict &&
            notes="$notes
strict: redis_requests $(stat_of redis_requests), redis_fallbacks $(stat_of redis_fallbacks)"
        stop_daemon
    else
        skip strict unix 8 32 "divvyd did not start"
        status=1
    fi
fi

if [ -n "$redis_skip" ]; then
    skip lease unix 8 32 "$redis_skip"
    skip lease shm 1 1 "$redis_skip"
else
    # A lease rule's credit_limit is at most 2^24 - 1 (docs/redis.md §2).
    redis_conf lease 16000000 >"$T/lease.conf"
    if start_divvyd "$T/lease.conf" "$T/lease" 0; then
        "$BENCH" --unix "$sock" -c 8 -d 32 -t 1 -k "$KEYS" -q >/dev/null 2>&1 || true
        row lease unix 8 32 --unix "$sock"
        row lease shm 1 1 --unix "$sock" --lib auto
        if alive lease; then
            n="lease: redis_lease_fetches $(stat_of redis_lease_fetches)"
            n="$n, redis_requests $(stat_of redis_requests)"
            n="$n, redis_fallbacks $(stat_of redis_fallbacks)"
            notes="$notes
$n, fast_path_hits $(stat_of fast_path_hits)
lease shm: libdivvy in DIVVY_AUTO: lease spent in-process, the low-water hits
  and those beyond the lease through divvyd (fast_path_hits above)"
        fi
        stop_daemon
    else
        skip lease unix 8 32 "divvyd did not start"
        skip lease shm 1 1 "divvyd did not start"
        status=1
    fi
fi

[ -z "$notes" ] || printf '%s\n' "${notes#?}"
exit $status
