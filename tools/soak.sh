#!/bin/sh
# SPDX-License-Identifier: MIT
# soak.sh BUILDDIR DURATION: mixed load against one divvyd for DURATION
# (seconds, or 90s / 10m / 2h), with reloads and Redis restarts; `make soak`.
#
# Starts its own redis-server (a free loopback port, no persistence) and
# BUILDDIR/divvyd in a temp dir (rules below: local, fast_path, strict and
# lease Redis rules, a tight rule that denies).  Each interval (SOAK_INTERVAL,
# default 60 s) it runs, side by side:
#   - divvy-bench on the Unix socket: pipelined HITs on the local, tight,
#     strict and lease rules (TCP too, for the local rule);
#   - divvy-soak (tools/soak.c, libdivvy): fast-path threads on the fast_path
#     rule and a socket-only thread, each reopening its handle every 50,000 hits;
#   - a SIGHUP every SOAK_RELOAD seconds (default 5), alternating two valid
#     configs, and an invalid one every fourth time (it must be rejected);
#   - a Redis restart in the middle of the interval, alternately SIGTERM and
#     SIGKILL, Redis down for 3 s (rules fall back to on_redis_error=local);
# then prints one line: hits (socket, fast path), client errors, divvyd's
# RSS and descriptors (after the interval's clients have gone), table fill,
# reloads, Redis state.
#
# Fails (exit 1) when divvyd dies, a client sees an error, a reload is
# rejected or accepted when it should not be, or when divvyd's RSS or fd
# count grows: the last interval is compared with the second (the first
# when there are fewer than three), allowing RSS max(8 MiB, 20 %) and 8 fds.
# The temp dir (logs) is kept on failure.
set -eu

B=${1:?usage: tools/soak.sh BUILDDIR DURATION}
DUR_ARG=${2:?usage: tools/soak.sh BUILDDIR DURATION}
INTERVAL=${SOAK_INTERVAL:-60}
RELOAD=${SOAK_RELOAD:-5}
DIVVYD=$B/divvyd
BENCH=$B/divvy-bench
SOAK=$B/divvy-soak
CTL=$B/divvyctl

case $DUR_ARG in
    *h) DUR=$(( ${DUR_ARG%h} * 3600 )) ;;
    *m) DUR=$(( ${DUR_ARG%m} * 60 )) ;;
    *s) DUR=${DUR_ARG%s} ;;
    *) DUR=$DUR_ARG ;;
esac
case $DUR in
    ''|*[!0-9]*) echo "soak.sh: bad DURATION '$DUR_ARG' (seconds, or 90s, 10m, 2h)" >&2; exit 2 ;;
esac
[ "$DUR" -gt 0 ] || { echo "soak.sh: DURATION must be positive" >&2; exit 2; }
for f in "$DIVVYD" "$BENCH" "$SOAK" "$CTL"; do
    [ -x "$f" ] || { echo "soak.sh: $f not built (make soak builds it)" >&2; exit 1; }
done
command -v redis-server >/dev/null ||
    { echo "soak.sh: redis-server missing; apt-get install redis-server" >&2; exit 1; }

T=$(mktemp -d /tmp/divvy-soak.XXXXXX)
dpid= rpid= loads= keep=0

stop_pid() {
    # stop_pid PID SIGNAL: signal, wait up to 10 s, then SIGKILL.
    [ -n "$1" ] || return 0
    kill "-$2" "$1" 2>/dev/null || true
    i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
cleanup() {
    for p in $loads; do kill -TERM "$p" 2>/dev/null || true; done
    for p in $loads; do wait "$p" 2>/dev/null || true; done
    stop_pid "$dpid" TERM
    stop_pid "$rpid" TERM
    if [ $keep = 1 ]; then echo "soak.sh: logs kept in $T" >&2; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
    echo "soak: FAILED: $*" >&2
    if [ -s "$T/divvyd.log" ]; then
        echo "soak: last lines of divvyd's log:" >&2
        tail -20 "$T/divvyd.log" | sed 's/^/  | /' >&2
    fi
    keep=1
    exit 1
}

port_in_use() {
    hex=$(printf '%04X' "$1")
    grep -q ":$hex .* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
free_port() {
    while :; do
        p=$(( $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 25000 + 30000 ))
        port_in_use "$p" || { echo "$p"; return; }
    done
}

# ---- Redis -------------------------------------------------------------------
rport=$(free_port)
start_redis() {
    redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$T" --daemonize no --loglevel warning >>"$T/redis.log" 2>&1 &
    rpid=$!
    i=0
    while ! redis-cli -p "$rport" ping >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 200 ] || fail "redis-server did not start (see $T/redis.log)"
        sleep 0.05
    done
}
start_redis

# ---- configs -----------------------------------------------------------------
# $1: the tight rule's limit (the one difference between A and B).
write_conf() {
    cat <<EOF
# soak config (tools/soak.sh), tight limit $1
table = { slots = 65536; fast_slots = 65536; };
store = { mode = "local"; on_redis_error = "local"; lease_max = 1000; };
redis = { host = "127.0.0.1"; port = $rport; timeout_ms = 100; };
rules = (
    { match = { path = "/soak/local"; actor = "*"; }; actor = "actor"; label = "local";
      credit_limit = 1000000000; reset_seconds = 3600; },
    { match = { path = "/soak/fast"; actor = "*"; }; actor = "actor"; label = "fast";
      credit_limit = 1000000000; reset_seconds = 3600; fast_path = true; },
    { match = { path = "/soak/tight"; actor = "*"; }; actor = "actor"; label = "tight";
      credit_limit = $1; reset_seconds = 10; },
    { match = { path = "/soak/strict"; actor = "*"; }; actor = "actor"; label = "strict";
      credit_limit = 1000000000; reset_seconds = 3600; store = "strict"; },
    { match = { path = "/soak/lease"; actor = "*"; }; actor = "actor"; label = "lease";
      credit_limit = 10000000; reset_seconds = 3600; store = "lease"; },
    { default = true; credit_limit = 0; reset_seconds = 0; }
);
EOF
}
write_conf 100 >"$T/a.conf"
write_conf 200 >"$T/b.conf"
printf 'rules = ( { default = true; credit_limit = 0; reset_seconds = 0; }\n' >"$T/bad.conf"
cp "$T/a.conf" "$T/divvy.conf"
"$CTL" check "$T/a.conf" >/dev/null || fail "soak config a.conf does not check"

# ---- divvyd ------------------------------------------------------------------
mkdir "$T/state"
sock=$T/state/divvy.sock
addr=unix:$sock
tport=$(free_port)
"$DIVVYD" --config "$T/divvy.conf" --state-dir "$T/state" --listen "$addr" \
    --listen "tcp:127.0.0.1:$tport" >"$T/divvyd.log" 2>&1 &
dpid=$!
i=0
until "$CTL" -s "$addr" -t 500 status >/dev/null 2>&1; do
    kill -0 "$dpid" 2>/dev/null || fail "divvyd did not start"
    i=$((i + 1))
    [ $i -lt 300 ] || fail "divvyd did not answer within 15 s"
    sleep 0.05
done

# STATS into $T/stats ("name value" lines).
stats() {
    "$CTL" -s "$addr" stats >"$T/stats" 2>>"$T/ctl.log" || fail "divvyctl stats failed"
}
sget() { awk -v k="$1" '$1 == k { print $2; exit }' "$T/stats"; }

# ---- the soak ------------------------------------------------------------------
n_int=$(( (DUR + INTERVAL - 1) / INTERVAL ))
elapsed=0 int=0 reloads=0 want_ok=0 want_rej=0 restarts=0 how=TERM
stats
prev_hits=$(sget hits_total)
rss_base= fds_base=
echo "soak: $DUR s against divvyd $("$DIVVYD" --version 2>/dev/null | head -n1) on $(nproc) CPUs," \
     "one line per ${INTERVAL} s; Redis on port $rport"
while [ $elapsed -lt "$DUR" ]; do
    int=$((int + 1))
    len=$INTERVAL
    [ $((elapsed + len)) -le "$DUR" ] || len=$((DUR - elapsed))
    L=$T/int$int
    mkdir "$L"
    loads=
    "$BENCH" --unix "$sock" -c 2 -d 32 -t "$len" -k 10000 --pairs "path=/soak/local" -q \
        >"$L/local" 2>&1 &
    loads="$loads $!"
    "$BENCH" --tcp "127.0.0.1:$tport" -c 1 -d 8 -t "$len" -k 10000 --pairs "path=/soak/local" \
        -q >"$L/tcp" 2>&1 &
    loads="$loads $!"
    "$BENCH" --unix "$sock" -c 1 -d 8 -t "$len" -k 1000 --pairs "path=/soak/tight" -q \
        >"$L/tight" 2>&1 &
    loads="$loads $!"
    "$BENCH" --unix "$sock" -c 2 -d 16 -t "$len" -k 2000 --pairs "path=/soak/strict" -q \
        >"$L/strict" 2>&1 &
    loads="$loads $!"
    "$BENCH" --unix "$sock" -c 1 -d 16 -t "$len" -k 2000 --pairs "path=/soak/lease" -q \
        >"$L/lease" 2>&1 &
    loads="$loads $!"
    "$SOAK" --address "$addr" --path fast -c 2 -t "$len" -k 10000 --pairs "path=/soak/fast" \
        >"$L/fast" 2>"$L/fast.err" &
    loads="$loads $!"
    "$SOAK" --address "$addr" --path socket -c 1 -t "$len" -k 10000 \
        --pairs "path=/soak/local" >"$L/sock" 2>"$L/sock.err" &
    loads="$loads $!"

    # Events, once a second: reloads, and one Redis restart mid-interval.
    s=0
    while [ $s -lt "$len" ]; do
        sleep 1
        s=$((s + 1))
        kill -0 "$dpid" 2>/dev/null || fail "divvyd died (interval $int, second $s)"
        if [ $((s % RELOAD)) = 0 ]; then
            reloads=$((reloads + 1))
            if [ $((reloads % 4)) = 0 ]; then
                src=bad want_rej=$((want_rej + 1))
            elif [ $((reloads % 2)) = 0 ]; then
                src=b want_ok=$((want_ok + 1))
            else
                src=a want_ok=$((want_ok + 1))
            fi
            cp "$T/$src.conf" "$T/divvy.conf.tmp" && mv "$T/divvy.conf.tmp" "$T/divvy.conf"
            kill -HUP "$dpid"
        fi
        if [ $s = $((len / 2)) ] && [ "$len" -ge 10 ]; then
            stop_pid "$rpid" "$how"
            rpid=
            restarts=$((restarts + 1))
            if [ $how = TERM ]; then how=KILL; else how=TERM; fi
            sleep 3
            s=$((s + 3))
            start_redis
        fi
    done
    for p in $loads; do wait "$p" || fail "a load process failed (interval $int; see $L)"; done
    loads=
    elapsed=$((elapsed + len))
    # The clients are gone: what divvyd holds now is its own.
    sleep 1
    kill -0 "$dpid" 2>/dev/null || fail "divvyd died (end of interval $int)"
    stats
    hits=$(sget hits_total)
    sock_hits=$((hits - prev_hits))
    prev_hits=$hits
    fast_hits=$(awk '{ print $2 }' "$L/fast")
    [ -n "$fast_hits" ] || fail "divvy-soak printed nothing (see $L)"
    errors=0
    for f in local tcp tight strict lease; do
        e=$(awk '{ print $5 }' "$L/$f")
        [ -n "$e" ] || fail "divvy-bench ($f) printed nothing: $(cat "$L/$f")"
        errors=$((errors + e))
    done
    for f in fast sock; do errors=$((errors + $(awk '{ print $8 }' "$L/$f"))); done
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$dpid/status")
    fds=$(ls "/proc/$dpid/fd" | wc -l)
    rok=$(sget reloads_ok) rrej=$(sget reloads_rejected)
    printf 'soak: %2d/%d %4ds hits %10d (socket %d, fast %d) errors %d rss %d KiB fds %d' \
        "$int" "$n_int" "$elapsed" $((sock_hits + fast_hits)) "$sock_hits" "$fast_hits" \
        "$errors" "$rss" "$fds"
    printf ' table %s/%s fast %s/%s reloads %s ok %s rejected redis %s restarts %d fallbacks %s\n' \
        "$(sget table_live)" "$(sget table_slots)" "$(sget fast_table_live)" \
        "$(sget fast_table_slots)" "$rok" "$rrej" "$(sget redis_state)" "$restarts" \
        "$(sget redis_fallbacks)"
    [ "$errors" = 0 ] || fail "clients saw $errors errors in interval $int ($(cat "$L"/*.err))"
    [ "$rok" = "$want_ok" ] && [ "$rrej" = "$want_rej" ] ||
        fail "reloads: $rok ok, $rrej rejected; want $want_ok and $want_rej"
    if [ $int = 1 ] || { [ $int = 2 ] && [ "$n_int" -ge 3 ]; }; then
        rss_base=$rss fds_base=$fds
    fi
done

rss_allow=$(( rss_base / 5 > 8192 ? rss_base / 5 : 8192 ))
if [ $((rss - rss_base)) -gt $rss_allow ]; then
    fail "divvyd's RSS grew from $rss_base KiB to $rss KiB (allowed +$rss_allow KiB)"
fi
if [ $((fds - fds_base)) -gt 8 ]; then
    fail "divvyd's descriptors grew from $fds_base to $fds"
fi
echo "soak: passed: RSS $rss_base -> $rss KiB, fds $fds_base -> $fds, $reloads reloads," \
     "$restarts Redis restarts, no client errors"
