#!/bin/sh
# SPDX-License-Identifier: MIT
# bench-instr.sh BUILDDIR: the instruction budget of issue 20 (make
# bench-instr, docs/dev/benchmarks.md): userspace instructions per decision on
# each path, counted with callgrind, which repeats to the instruction where
# wall-clock time on a shared machine moves by 15 %.
#
# A server row runs the server under callgrind, loads it once uncounted
# (warm-up), then zeroes its counters (callgrind_control -z), drives the
# measured load, dumps (callgrind_control -d) and divides the instructions of
# that window by the decisions in it, as the load counts them: the replies
# divvy-bench received, the calls divvy-rls-bench had answered, the requests
# redis-benchmark sent.  divvyd's main thread is left
# out (its 1 s tick costs the same with hits or without) and printed apart.
# The rows:
#   1 divvyd, HIT over a Unix socket, 8 connections x 32 in flight, 10,000
#     actors; beside it redis-server on a bare INCR (redis-benchmark -t incr
#     -c 8 -P 32) and BUILDDIR/bench-noop (a fixed "OK" per line), same load
#   2 libdivvy's fast path, one hot key: divvy_hit() with 3 pairs, 4
#     fast_path rules (BUILDDIR/bench-instr-fast, callgrind counting inside
#     its loop only)
#   3 divvyd per line HIT over TCP against per RLS call (divvy-rls-bench,
#     HTTP/2 over TCP), 8 x 32, the same divvyd: the ratio line / RLS
#   4 line protocol 8 x 32 hits/s over the no-work server's, not under
#     callgrind, two threads each: both servers loaded in turn ROUNDS times,
#     the median ratio
#   5 row 1 with N-1 rules [path=/r<i> actor=*] before [path=/bench actor=*]
#     and the default, N = 16 and N = 10,000: the ratio 10,000 / 16 (with
#     callgrind's cache simulation: data misses per hit beside it)
#   6 row 5 with cidr rules (docs/rules.md "Addresses and negation"): N = 16
#     and N = 10,000 rules ip = { cidr = ... } of nested /24s, /16s and a /8,
#     the ratio 10,000 / 16 and 10,000 cidr rules / 10,000 exact ones
#   7 row 1 with the decision log on (issue 23, docs/operations.md "Decision
#     log") against the same config with it off, both in divvy.conf: the
#     ratio on / off, and the log's cost split into the workers' share (the
#     copy into their rings) and the drain thread's (encoding, writing)
#
# BENCH_INSTR_SECONDS of load per callgrind window (default 3);
# BENCH_INSTR_REPEAT windows of each divvyd row, the fewest instructions
# counting (default 2); BENCH_INSTR_ROUNDS for row 4 (default 7);
# BENCH_INSTR_KEEP=DIR keeps the callgrind dumps there for callgrind_annotate
# (docs/dev/benchmarks.md names them).  Numbers are reported, never judged: the
# exit status is 1 only when something could not be measured (a tool
# missing, a server that does not start), each such cause in one line.
set -eu

B=${1:?usage: tools/bench-instr.sh BUILDDIR}
SECS=${BENCH_INSTR_SECONDS:-3}
ROUNDS=${BENCH_INSTR_ROUNDS:-7}
REPEAT=${BENCH_INSTR_REPEAT:-2}
KEYS=10000
DIVVYD=$B/divvyd
BENCH=$B/divvy-bench
RLSBENCH=$B/divvy-rls-bench
NOOP=$B/bench-noop
FAST=$B/bench-instr-fast

die() {
    echo "bench-instr: $*" >&2
    exit 1
}
for c in valgrind:valgrind callgrind_control:valgrind redis-server:redis-server \
         redis-benchmark:redis-tools; do
    command -v "${c%%:*}" >/dev/null 2>&1 ||
        die "${c%%:*} not found: apt-get install ${c#*:}"
done
for f in "$DIVVYD" "$BENCH" "$RLSBENCH" "$NOOP" "$FAST"; do
    [ -x "$f" ] || die "$f not built (make bench-instr builds it)"
done

T=$(mktemp -d /tmp/divvy-bench-instr.XXXXXX)
pids=''
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    for p in $pids; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in $pids; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# stop PID: SIGTERM and wait (10 s, then SIGKILL); drops it from $pids.
stop() {
    kill -TERM "$1" 2>/dev/null || true
    i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    rest=''
    for p in $pids; do
        [ "$p" = "$1" ] || rest="$rest $p"
    done
    pids=$rest
}

# A loopback TCP port nobody listens on, and the one after it.
port_pair() {
    while :; do
        p=$(( $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 30000 + 30000 ))
        hex=$(printf '%04X' "$p")
        hex1=$(printf '%04X' $((p + 1)))
        grep -qE ":($hex|$hex1) " /proc/net/tcp /proc/net/tcp6 2>/dev/null || break
    done
    echo "$p"
}

# cg NAME COMMAND...: COMMAND under callgrind (and the options in $cg_opts)
# in the background, each thread counted apart; its PID in $cgpid, its dumps
# $T/NAME.cg.<n>-<thread> (thread 01 the main one), its output $T/NAME.log.
cg_opts=''
cg() {
    name=$1
    shift
    # shellcheck disable=SC2086 # cg_opts: options, split on purpose
    valgrind --tool=callgrind --separate-threads=yes $cg_opts \
        --callgrind-out-file="$T/$name.cg" "$@" \
        >"$T/$name.log" 2>&1 &
    cgpid=$!
    pids="$pids $cgpid"
}

# ready NAME PID PROBE...: waits (120 s: callgrind starts slowly) until the
# command PROBE succeeds while PID lives; dies with NAME's log otherwise.
ready() {
    rname=$1 rpid=$2
    shift 2
    i=0
    until "$@" >/dev/null 2>&1; do
        if ! kill -0 "$rpid" 2>/dev/null || [ $i -ge 1200 ]; then
            sed 's/^/  | /' "$T/$rname.log" >&2
            die "$rname did not start"
        fi
        sleep 0.1
        i=$((i + 1))
    done
}

# window_begin PID / window_end PID NAME: zero the counters, and dump them;
# window_end prints the dump's name, $T/NAME.cg.<n> (the newest of NAME), to
# which each thread's file adds -<thread>.
window_begin() {
    callgrind_control -z "$1" >/dev/null 2>&1 || die "callgrind_control -z $1 failed"
}
window_end() {
    callgrind_control -d "$1" >/dev/null 2>&1 || die "callgrind_control -d $1 failed"
    # shellcheck disable=SC2012 # our own file names: NAME.cg.<n>-<thread>
    f=$(ls -t "$T/$2".cg.*-01 2>/dev/null | head -n 1)
    [ -n "$f" ] || die "no callgrind dump of $2"
    echo "${f%-01}"
}
# event DUMP THREADS EVENT...: the sum of the EVENTs' totals over the files of
# DUMP's threads: THREADS all, main (thread 01) or others (all but 01).
# Events: Ir, instructions; with --cache-sim D1mr D1mw (first-level data
# misses), DLmr DLmw (last-level); 0 for events not recorded.
event() {
    ed=$1 et=$2
    shift 2
    set -- "$*"
    for ef in "$ed"-*; do
        case $et:${ef##*-} in
        all:* | main:01) ;;
        others:01 | main:*) continue ;;
        esac
        cat "$ef"
    done | awk -v want=" $1 " '
        /^events:/ {
            split("", col)
            for (i = 2; i <= NF; i++) if (index(want, " " $i " ")) col[i] = 1
        }
        /^totals:/ { for (c in col) s += $c }
        END { print s + 0 }'
}

# hits LOAD...: runs divvy-bench LOAD, 8 x 32, SECS seconds; prints the
# replies it received (each one a decision: it reads every reply it asked for).
hits() {
    hn=$("$BENCH" "$@" -c 8 -d 32 -t "$SECS" -k "$KEYS" 2>/dev/null |
         awk '$1 == "hits" { print $2 }')
    [ -n "$hn" ] || die "divvy-bench $* failed"
    echo "$hn"
}

# per A B: A / B, rounded; per1: to one decimal; ratio: to two.
per() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f", a / b; else print "?" }'
}
per1() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "?" }'
}
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }'
}

# divvyd_cg NAME CONFIG [LISTEN...]: divvyd under callgrind (2 workers, as
# the issue's numbers were taken) with its Unix socket $T/NAME.sock.
divvyd_cg() {
    dn=$1 conf=$2
    shift 2
    mkdir -p "$T/$dn.state"
    cg "$dn" "$DIVVYD" --config "$conf" --state-dir "$T/$dn.state" -w 2 \
        --listen "unix:$T/$dn.sock" "$@"
    dpid=$cgpid
    ready "$dn" "$dpid" "$BENCH" --unix "$T/$dn.sock" -t 0.01 -q
}

# line_hits NAME PID LOAD...: instructions per hit of divvyd NAME in the
# window of the divvy-bench LOAD (after the same load, uncounted, for 1 s),
# the fewest of REPEAT windows: a window where the client's threads were
# descheduled brings fewer requests per read and costs more per hit, never
# less.  divvyd's threads but its main one, whose 1 s tick costs the same
# with or without hits (time, not a hit's work).  Prints "IR D1 LL MAIN": the
# data misses per hit (D1 and last-level, under --cache-sim, else 0.0), and
# the main thread's instructions per second in that window.
line_hits() {
    ln=$1 lp=$2
    shift 2
    "$BENCH" "$@" -c 8 -d 32 -t 1 -k "$KEYS" -q >/dev/null 2>&1 || die "divvy-bench $* failed"
    best=''
    k=0
    while [ $k -lt "$REPEAT" ]; do
        window_begin "$lp"
        t0=$(date +%s%N)
        h=$(hits "$@")
        f=$(window_end "$lp" "$ln")
        t1=$(date +%s%N)
        v="$(per "$(event "$f" others Ir)" "$h") $(per1 "$(event "$f" others D1mr D1mw)" "$h")"
        v="$v $(per1 "$(event "$f" others DLmr DLmw)" "$h")"
        v="$v $(per "$(event "$f" main Ir)" "$(( (t1 - t0) / 1000000 ))e-3")"
        if [ -z "$best" ] || [ "${v%% *}" -lt "${best%% *}" ]; then
            best=$v
        fi
        k=$((k + 1))
    done
    echo "$best"
}

# bench_ini FILE N: the rule-match config of row 5 (and of row 1 at N = 1):
# N-1 rules [path=/r<i> actor=*] (i = 0 .. N-2), then [path=/bench actor=*],
# then the default.  Work on rule matching is measured against exactly
# this (docs/dev/benchmarks.md): change it only with the numbers there.
bench_ini() {
    awk -v n="$2" 'BEGIN {
        for (i = 0; i < n - 1; i++)
            printf "[path=/r%d actor=*]\ncreditLimit = 100\nresetSeconds = 60\n" \
                   "actorField = actor\n\n", i
        printf "[path=/bench actor=*]\ncreditLimit = 1000000000\nresetSeconds = 3600\n"
        printf "actorField = actor\n\n[default]\ncreditLimit = 0\nresetSeconds = 0\n"
    }' >"$1"
}

echo "bench-instr: $("$DIVVYD" --version 2>/dev/null | head -n 1), $(valgrind --version);" \
     "$SECS s per callgrind window"

# ---- rows 1 and 3: one divvyd (unix, tcp, rls:tcp) --------------------------------
bench_ini "$T/one.ini" 1
port=$(port_pair)
divvyd_cg d1 "$T/one.ini" --listen "tcp:127.0.0.1:$port" --listen "rls:tcp:127.0.0.1:$((port + 1))"
m=$(line_hits d1 "$dpid" --unix "$T/d1.sock")
hit_unix=${m%% *} tick=${m##* }
hit_tcp=$(line_hits d1 "$dpid" --tcp "127.0.0.1:$port" | cut -d' ' -f1)
"$RLSBENCH" "127.0.0.1:$((port + 1))" -c 8 -d 32 -t 1 -k "$KEYS" -q >/dev/null 2>&1 ||
    die "divvy-rls-bench failed"
window_begin "$dpid"
# "N calls in S s: ...": every call answered (it waits for those in flight).
n=$("$RLSBENCH" "127.0.0.1:$((port + 1))" -c 8 -d 32 -t "$SECS" -k "$KEYS" 2>/dev/null |
    awk '$2 == "calls" && $3 == "in" { print $1 }')
f=$(window_end "$dpid" d1)
[ -n "$n" ] || die "divvy-rls-bench failed"
rls=$(per "$(event "$f" others Ir)" "$n")
stop "$dpid"

# ---- row 1's references: the no-work server, redis-server ----------------------------
cg noop "$NOOP" "$T/noop.sock" 2
ready noop "$cgpid" "$BENCH" --unix "$T/noop.sock" -t 0.01 -q
"$BENCH" --unix "$T/noop.sock" -c 8 -d 32 -t 1 -k "$KEYS" -q >/dev/null 2>&1
window_begin "$cgpid"
n=$(hits --unix "$T/noop.sock")
f=$(window_end "$cgpid" noop)
noop=$(per "$(event "$f" all Ir)" "$n")
stop "$cgpid"

cg redis redis-server --port 0 --unixsocket "$T/redis.sock" --save '' --appendonly no \
    --dir "$T" --daemonize no --loglevel warning
rpid=$cgpid
ready redis "$rpid" redis-benchmark -s "$T/redis.sock" -t ping -n 1 -q
# Requests sized to about SECS seconds under callgrind.
n=$((SECS * 20000))
redis-benchmark -s "$T/redis.sock" -t incr -c 8 -P 32 -n "$n" -q >/dev/null 2>&1
window_begin "$rpid"
redis-benchmark -s "$T/redis.sock" -t incr -c 8 -P 32 -n "$n" -q >/dev/null 2>&1 ||
    die "redis-benchmark failed"
f=$(window_end "$rpid" redis)
incr=$(per "$(event "$f" all Ir)" "$n")
stop "$rpid"

# ---- row 2: libdivvy's fast path -------------------------------------------------------
"$FAST" --config >"$T/fast.conf"
mkdir -p "$T/fast.state"
"$DIVVYD" --config "$T/fast.conf" --state-dir "$T/fast.state" --listen "unix:$T/fast.sock" \
    >"$T/fast.log" 2>&1 &
fpid=$!
pids="$pids $fpid"
ready fast "$fpid" "$BENCH" --unix "$T/fast.sock" -t 0.01 -q
n=$((SECS * 30000))
valgrind --tool=callgrind --separate-threads=yes '--toggle-collect=bench_instr_hot*' \
    --callgrind-out-file="$T/fastc.cg" "$FAST" "unix:$T/fast.sock" "$n" \
    >"$T/fastc.log" 2>&1 || { sed 's/^/  | /' "$T/fastc.log" >&2;
        die "bench-instr-fast failed (the fast path needs divvyd's fast group: docs/client.md)"; }
fast=$(per "$(event "$T/fastc.cg" all Ir)" "$n")

# ---- row 4: throughput, line protocol over the no-work server, same run ---------------
stop "$fpid"
mkdir -p "$T/d4.state"
"$DIVVYD" --config "$T/one.ini" --state-dir "$T/d4.state" -w 2 --listen "unix:$T/d4.sock" \
    >"$T/d4.log" 2>&1 &
dpid=$!
pids="$pids $dpid"
ready d4 "$dpid" "$BENCH" --unix "$T/d4.sock" -t 0.01 -q
"$NOOP" "$T/noop4.sock" 2 >"$T/noop4.log" 2>&1 &
npid=$!
pids="$pids $npid"
ready noop4 "$npid" "$BENCH" --unix "$T/noop4.sock" -t 0.01 -q
ratios=''
r=0
while [ $r -lt "$ROUNDS" ]; do
    a=$("$BENCH" --unix "$T/d4.sock" -c 8 -d 32 -t 1 -k "$KEYS" -q | cut -d' ' -f1)
    b=$("$BENCH" --unix "$T/noop4.sock" -c 8 -d 32 -t 1 -k "$KEYS" -q | cut -d' ' -f1)
    ratios="$ratios $(ratio "$a" "$b")"
    r=$((r + 1))
done
tput=$(echo "$ratios" | tr ' ' '\n' | sed '/^$/d' | sort -n |
       awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
stop "$npid"
stop "$dpid"

# ---- row 5: rule matching, 16 against 10,000 rules -------------------------------------
# With the cache simulated: a larger rule set costs in misses what it may
# not cost in instructions.
cg_opts=--cache-sim=yes
bench_ini "$T/r16.ini" 16
divvyd_cg r16 "$T/r16.ini"
# shellcheck disable=SC2046 # "IR D1 LL MAIN" into $1 ..
set -- $(line_hits r16 "$dpid" --unix "$T/r16.sock")
match16=$1 miss16="$2 $3"
stop "$dpid"
bench_ini "$T/r10000.ini" 10000
divvyd_cg r10000 "$T/r10000.ini"
# shellcheck disable=SC2046
set -- $(line_hits r10000 "$dpid" --unix "$T/r10000.sock")
match10000=$1 miss10000="$2 $3"
stop "$dpid"

# ---- row 6: rule match by address (issue 22), 16 against 10,000 cidr rules -------------
# cidr_conf FILE N: N+1 rules in divvy.conf: N-1-M rules ip in 10.<i/256>.<i%256>.0/24
# and M = min(40, N/4) rules ip in 10.<j>.0.0/16 overlapping them, then the hit's
# rule ip in 10.255.255.0/24 (actor), then ip in 10.0.0.0/8, which also holds the
# hit's address (a second candidate list), then the default.
cidr_conf() {
    awk -v n="$2" 'BEGIN {
        m = int(n / 4); if (m > 40) m = 40
        print "rules = ("
        r = "; actor = \"*\"; }; actor = \"actor\"; credit_limit = "
        for (i = 0; i < n - 1 - m; i++)
            printf "{ match = { ip = { cidr = \"10.%d.%d.0/24\"; }%s100; reset_seconds = 60; },\n",
                   int(i / 256), i % 256, r
        for (j = 0; j < m; j++)
            printf "{ match = { ip = { cidr = \"10.%d.0.0/16\"; }%s100; reset_seconds = 60; },\n",
                   j, r
        print "{ match = { ip = { cidr = \"10.255.255.0/24\"; }" r "1000000000;" \
              " reset_seconds = 3600; },"
        print "{ match = { ip = { cidr = \"10.0.0.0/8\"; }; }; credit_limit = 1;" \
              " reset_seconds = 60; },"
        print "{ default = true; credit_limit = 0; reset_seconds = 0; }\n);"
    }' >"$1"
}
cidr_conf "$T/c16.conf" 16
divvyd_cg c16 "$T/c16.conf"
# shellcheck disable=SC2046
set -- $(line_hits c16 "$dpid" --unix "$T/c16.sock" --pairs "ip=10.255.255.7")
cidr16=$1 cmiss16="$2 $3"
stop "$dpid"
cidr_conf "$T/c10000.conf" 10000
divvyd_cg c10000 "$T/c10000.conf"
# shellcheck disable=SC2046
set -- $(line_hits c10000 "$dpid" --unix "$T/c10000.sock" --pairs "ip=10.255.255.7")
cidr10000=$1 cmiss10000="$2 $3"
stop "$dpid"
cg_opts=''

# ---- row 7: the decision log, off and on ------------------------------------------------
# log_conf FILE ON: row 1's rules in divvy.conf, the decision log ON (true/false) in
# $T/FILE.d, flushed every second (its default).
log_conf() {
    cat >"$1" <<EOC
decision_log = { enabled = $2; directory = "$1.d"; };
rules = (
    { match = { path = "/bench"; actor = "*"; }; actor = "actor";
      credit_limit = 1000000000; reset_seconds = 3600; },
    { default = true; credit_limit = 0; reset_seconds = 0; }
);
EOC
}
# drain_ir DUMP: the instructions of the decision log's drain thread in DUMP (the
# thread whose file names drain_main).
drain_ir() {
    for ef in "$1"-*; do
        grep -q 'drain_main' "$ef" && cat "$ef"
    done | awk '/^events:/ { for (i = 2; i <= NF; i++) if ($i == "Ir") c = i }
                /^totals:/ { s += $c } END { print s + 0 }'
}
log_conf "$T/log0.conf" false
divvyd_cg log0 "$T/log0.conf"
log_off=$(line_hits log0 "$dpid" --unix "$T/log0.sock" | cut -d' ' -f1)
stop "$dpid"
log_conf "$T/log1.conf" true
divvyd_cg log1 "$T/log1.conf"
log_on=$(line_hits log1 "$dpid" --unix "$T/log1.sock" | cut -d' ' -f1)
# One more window for the split (line_hits keeps only the fewest instructions).
window_begin "$dpid"
h=$(hits --unix "$T/log1.sock")
f=$(window_end "$dpid" log1)
log_drain=$(per "$(drain_ir "$f")" "$h")
log_workers=$(per "$(( $(event "$f" others Ir) - $(drain_ir "$f") ))" "$h")
stop "$dpid"

if [ -n "${BENCH_INSTR_KEEP:-}" ]; then
    { mkdir -p "$BENCH_INSTR_KEEP" && cp "$T"/*.cg* "$BENCH_INSTR_KEEP"/; } ||
        die "cannot keep the dumps in $BENCH_INSTR_KEEP"
fi

# ---- the table -------------------------------------------------------------------------
row() {
    printf '%-52s %18s  %-8s %s\n' "$@"
}
echo
row "decision" "instr/decision" "goal" "reference in the same run"
row "divvyd HIT, unix 8x32, 10,000 actors" "$hit_unix" "<= 2000" \
    "redis-server INCR $incr; bench-noop OK $noop"
row "libdivvy fast path, one hot key (3 pairs, 4 rules)" "$fast" "<= 300" \
    "hash + probe + CAS of one slot: ~60"
row "divvyd per line HIT / per RLS call, tcp 8x32" "$(ratio "$hit_tcp" "$rls")" ">= 0.5" \
    "line (tcp) $hit_tcp, RLS $rls"
row "line 8x32 hits/s / bench-noop's (median of $ROUNDS)" "${tput}x" ">= 0.5x" \
    "ratios:$ratios"
row "rule match: HIT at 10,000 rules / at 16" "$(ratio "$match10000" "$match16")x" "<= 1.5x" \
    "16 rules $match16, 10,000 rules $match10000"
row "  data misses per hit (D1 LL), 16 / 10,000 rules" "" "" "$miss16 / $miss10000"
row "cidr match: HIT at 10,000 cidr rules / at 16" "$(ratio "$cidr10000" "$cidr16")x" "<= 1.5x" \
    "16 rules $cidr16, 10,000 rules $cidr10000"
row "  HIT at 10,000 cidr rules / at 10,000 exact" "$(ratio "$cidr10000" "$match10000")x" "" \
    "data misses per hit (D1 LL) $cmiss16 / $cmiss10000"
row "divvyd HIT with the decision log on / off" "$(ratio "$log_on" "$log_off")x" "<= 1.05x" \
    "off $log_off, on $log_on"
row "  its window split: workers / drain thread" "" "" "$log_workers / $log_drain"
tick=$(awk -v t="$tick" 'BEGIN { printf "%.1f M", t / 1e6 }')
echo "Left out of the divvyd rows: its main thread, $tick instructions a second in row 1's"
echo "window, hits or not (its 1 s tick), which is time, not a hit's work."

cat <<EOF

How (docs/dev/benchmarks.md): each server under valgrind --tool=callgrind, a 1 s
uncounted warm-up, then callgrind_control -z PID, $SECS s of load, callgrind_control -d
PID; instructions of that window / decisions in it (divvyd: its threads but the
main one, over the replies the load received, the fewest of $REPEAT windows).
  divvyd: divvyd --config CONF -w 2 --listen unix:S [--listen tcp:.. --listen rls:tcp:..]
          CONF: [path=/bench actor=*] creditLimit 1000000000, resetSeconds 3600, then
          [default]; row 5 puts N-1 rules [path=/r<i> actor=*] before it
  load:   divvy-bench --unix S -c 8 -d 32 -t $SECS -k $KEYS (row 3: --tcp 127.0.0.1:P,
          and divvy-rls-bench 127.0.0.1:P+1 -c 8 -d 32 -t $SECS -k $KEYS)
  redis:  redis-benchmark -s S -t incr -c 8 -P 32 -n N (N requests in the window)
  noop:   bench-noop S 2, the same divvy-bench load (its count of replies)
  fast:   valgrind --tool=callgrind --toggle-collect='bench_instr_hot*'
          bench-instr-fast unix:S N against divvyd --config "\$(bench-instr-fast --config)"
  row 4:  divvy-bench -c 8 -d 32 -t 1 against divvyd -w 2 and bench-noop S 2 in turn,
          $ROUNDS rounds, not under callgrind
  row 5:  as row 1, divvyd under valgrind --tool=callgrind --cache-sim=yes
  row 6:  as row 5 on divvy.conf rules ip = { cidr = ... } (N-1-M /24s, M /16s, the
          hit's /24, a /8 holding it too), divvy-bench --pairs "ip=10.255.255.7"
  row 7:  as row 1 on row 1's rules in divvy.conf with decision_log { enabled = false }
          and then true (flush_ms 1000); the split from one more window, the drain
          thread's instructions (its callgrind file names drain_main) apart
EOF
