#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make check-fleet: a fleet of three divvyd hosts and their Redis, each in a
# network namespace this script creates, on one machine.  Usage:
# tests/fleet/check-fleet.sh BUILD_DIR (run by `make check-fleet`, as root).
#
# Network: namespace R holds a bridge at 10.231.19.10/24 and every Redis
# (single, Sentinel, Cluster, the delay proxy); hosts A, B, C are namespaces
# at 10.231.19.1-3, each joined to the bridge by a veth pair.  Nothing is
# addressed outside those namespaces.  Each host runs its own divvyd with its
# own state directory and a config whose rules are the same everywhere; load
# comes from every host through libdivvy (tests/fleet/fleet_hit.c), raw
# protocol lines on TCP and on the Unix socket, divvyctl and pamtester.
#
# Scenarios (docs/dev/testing.md "The fleet"): 1 strict exact across hosts;
# 2 lease bounds; 3 failure policy timing (Redis paused, the link to Redis
# stalled by tests/fleet/delay_proxy.c, one host partitioned) and the breaker
# closing after the heal; 4 Sentinel: planned failover and a killed master;
# 5 a 3-master Redis Cluster with a slot migration under load; 6 pam_divvy
# lockout across hosts.  FLEET_ONLY="1 3" runs only those.
#
# One line per check ("ok …" / "FAIL …"), "N passed, N failed" last; exit 1
# on any failure.  "SKIP: <reason>" and exit 0 only where network namespaces
# cannot be made (not root, no ip, unshare refused).  Everything it started
# is stopped by PID and every namespace deleted, on failure too.
set -u

top=$(cd "$(dirname "$0")/../.." && pwd)
b=$(cd "${1:?usage: check-fleet.sh BUILD_DIR}" && pwd) || exit 2
only=${FLEET_ONLY:-1 2 3 4 5 6}
timeout_ms=100
slack_ms=${FLEET_SLACK_MS:-150}     # scheduling on a loaded 2-CPU machine
net=10.231.19
rip=$net.10
lease_max=40

skip() {
    echo "SKIP: check-fleet: $*"
    exit 0
}
[ "$(id -u)" = 0 ] || skip "not root: network namespaces need CAP_SYS_ADMIN"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
for f in divvyd divvyctl pam_divvy.so tests/fleet/fleet_hit tests/fleet/delay_proxy; do
    [ -x "$b/$f" ] || [ -f "$b/$f" ] || {
        echo "check-fleet: $b/$f missing (make check-fleet builds it)" >&2
        exit 1
    }
done
for c in redis-server redis-cli; do
    command -v $c >/dev/null 2>&1 || {
        echo "check-fleet: $c missing (tools/deps.sh install)" >&2
        exit 1
    }
done

tag=dvf$$
nsr=${tag}r
hosts="a b c"
T=$(mktemp -d /tmp/divvy-fleet.XXXXXX) || exit 1
: >"$T/pids"
made_ns=""
passed=0
failed=0

cleanup() {
    trap - EXIT INT TERM HUP
    for p in $(cat "$T/pids" 2>/dev/null); do
        kill -CONT "$p" 2>/dev/null
        kill -TERM "$p" 2>/dev/null
    done
    sleep 0.3
    for p in $(cat "$T/pids" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    for n in $made_ns; do
        # Anything still inside is ours: only this script starts processes there.
        for p in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
        ip netns del "$n" 2>/dev/null
    done
    if [ "$failed" -gt 0 ] || [ "${FLEET_KEEP:-0}" = 1 ]; then
        echo "check-fleet: logs kept in $T"
    else
        rm -rf "$T"
    fi
}
trap cleanup EXIT
trap 'echo "check-fleet: interrupted" >&2; exit 130' INT TERM HUP
# A reader that went away (| head): clean up all the same, writing nowhere.
trap 'trap "" PIPE; exit 141' PIPE

ok() {
    passed=$((passed + 1))
    echo "ok   $*"
}
bad() {
    failed=$((failed + 1))
    echo "FAIL $*"
}
# check NAME TEST...: the test is a shell condition (eval'd).
check() {
    local name=$1
    shift
    if eval "$@"; then ok "$name"; else bad "$name  [$*]"; fi
}
info() { echo "     $*"; }
ms_le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }
now_ms() { date +%s%3N; }

# ---- namespaces -------------------------------------------------------------

mkns() {
    ip netns add "$1" 2>"$T/ns.err" || return 1
    made_ns="$made_ns $1"
    ip -n "$1" link set lo up
}
mkns "$nsr" || skip "cannot create a network namespace: $(cat "$T/ns.err")"
ip -n "$nsr" link add br0 type bridge &&
    ip -n "$nsr" addr add $rip/24 dev br0 &&
    ip -n "$nsr" link set br0 up || skip "cannot make a bridge in a namespace"
i=0
for h in $hosts; do
    i=$((i + 1))
    mkns "$tag$h" || skip "cannot create a network namespace: $(cat "$T/ns.err")"
    ip -n "$nsr" link add "v$h" type veth peer name eth0 netns "$tag$h" 2>"$T/ns.err" ||
        skip "cannot make a veth pair between namespaces: $(cat "$T/ns.err")"
    ip -n "$nsr" link set "v$h" master br0 up
    ip -n "$tag$h" addr add "$net.$i/24" dev eth0
    ip -n "$tag$h" link set eth0 up
    eval "hip_$h=$net.$i"
    mkdir -p "$T/$h/state"
done
in_ns() {
    local n=$1
    shift
    ip netns exec "$n" "$@"
}
# bg NS LOG CMD...: started in NS, its PID recorded (in $bgpid too).
bg() {
    local n=$1 log=$2
    shift 2
    ip netns exec "$n" "$@" >"$log" 2>&1 &
    bgpid=$!
    echo "$bgpid" >>"$T/pids"
}
forget_pid() {
    grep -vx "$1" "$T/pids" >"$T/pids.new"
    mv "$T/pids.new" "$T/pids"
}
stop_pid() {
    kill -CONT "$1" 2>/dev/null
    kill -TERM "$1" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
    forget_pid "$1"
}
# ---- Redis -------------------------------------------------------------------

rcli() {
    local p=$1
    shift
    in_ns "$nsr" redis-cli -h $rip -p "$p" "$@"
}
wait_redis() {
    for _ in $(seq 100); do
        [ "$(rcli "$1" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.05
    done
    return 1
}
# redis PORT [ARGS...]: a redis-server in R, its PID in redis_<PORT>.
redis() {
    local p=$1
    shift
    mkdir -p "$T/redis/$p"
    bg "$nsr" "$T/redis/$p.log" redis-server --port "$p" --bind $rip --protected-mode no \
        --save "" --appendonly no --dir "$T/redis/$p" --repl-diskless-sync-delay 0 "$@"
    eval "redis_$p=$bgpid"
    wait_redis "$p"
}

# ---- hosts -------------------------------------------------------------------

sock() { echo "$T/$1/state/divvy.sock"; }
ctl() {
    local h=$1
    shift
    in_ns "$tag$h" "$b/divvyctl" -s "unix:$(sock "$h")" "$@"
}
# stat HOST NAME: one STATS value.
stat() { ctl "$1" stats 2>/dev/null | awk -v k="$2" '$1 == k { print $2 }'; }

# The rules, the same on every host.  Only store/redis settings vary.
rules() {
    cat <<EOF
rules = (
    { match = { path = "/strict"; }; label = "fleet-strict"; actor = "actor";
      credit_limit = 1000; reset_seconds = 3600; store = "strict"; },
    { match = { path = "/lease"; }; label = "fleet-lease"; actor = "actor";
      credit_limit = 3000; reset_seconds = 3600; store = "lease"; fast_path = true; },
    { match = { path = "/spread"; }; label = "fleet-spread"; actor = "actor";
      credit_limit = 20; reset_seconds = 3600; store = "strict"; },
    { match = { path = "/policy"; }; label = "fleet-policy"; actor = "actor";
      credit_limit = 3; reset_seconds = 3600; store = "strict"; },
    { match = { event = "authfail"; user = "*"; rhost = "*"; }; label = "login-user-source";
      actor = [ "user", "rhost" ]; credit_limit = 5; reset_seconds = 900;
      source = "privileged"; store = "strict"; },
    { default = true; credit_limit = 0; reset_seconds = 0; }
);
EOF
}
# conf HOST POLICY REDIS_SETTINGS: the host's divvy.conf.
conf() {
    {
        echo "store = { mode = \"local\"; on_redis_error = \"$2\"; lease_max = $lease_max; };"
        echo "redis = { $3 timeout_ms = $timeout_ms; };"
        rules
    } >"$T/$1/divvy.conf"
}
stop_host() {
    local p
    eval "p=\${divvyd_$1:-}"
    [ -n "$p" ] || return 0
    stop_pid "$p"
    eval "divvyd_$1="
}
# start_host HOST: (re)starts its divvyd on its config; waits until it answers.
start_host() {
    local ip
    stop_host "$1"
    eval "ip=\$hip_$1"
    bg "$tag$1" "$T/$1/divvyd.log" "$b/divvyd" --config "$T/$1/divvy.conf" \
        --state-dir "$T/$1/state" --listen "unix:$(sock "$1")" --listen "tcp:$ip:8321" \
        --workers 2
    eval "divvyd_$1=$bgpid"
    for _ in $(seq 100); do
        ctl "$1" -t 300 status >/dev/null 2>&1 && return 0
        kill -0 "$bgpid" 2>/dev/null || break
        sleep 0.05
    done
    echo "check-fleet: divvyd on host $1 did not start:" >&2
    tail -5 "$T/$1/divvyd.log" >&2
    return 1
}
start_hosts() {
    local h
    for h in $hosts; do start_host "$h" || return 1; done
}
# Fresh counters for a scenario: the state directories emptied.
wipe_hosts() {
    local h
    for h in $hosts; do
        stop_host "$h"
        rm -rf "$T/$h/state"
        mkdir -p "$T/$h/state"
    done
}
# hit HOST ARGS...: fleet_hit in the host's namespace (libdivvy on its socket
# unless ARGS name --raw and an address); prints its one line.
hit() {
    local h=$1
    shift
    in_ns "$tag$h" "$b/tests/fleet/fleet_hit" "$@" 2>>"$T/$h/hit.err"
}
hit_sock() {
    local h=$1
    shift
    hit "$h" "unix:$(sock "$h")" "$@"
}
# hit_bg HOST OUT ADDRESS ARGS...: fleet_hit in the background, its PID in
# $bgpid; ADDRESS "-" is the host's Unix socket.
hit_bg() {
    local h=$1 o=$2 a=$3
    shift 3
    [ "$a" = - ] && a="unix:$(sock "$h")"
    bg "$tag$h" "$o" "$b/tests/fleet/fleet_hit" "$a" "$@"
}
# wait_bg PID...: waits for each and forgets it.
wait_bg() {
    local p
    for p in "$@"; do
        wait "$p" 2>/dev/null
        forget_pid "$p"
    done
}
# field LINE NAME: a value of fleet_hit's line.
field() { echo "$1" | awk -v k="$2" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'; }

# wait_state HOST STATE SECONDS: STATS redis_state reaches STATE; the ms taken.
wait_state() {
    local t0 end
    t0=$(now_ms)
    end=$((t0 + $3 * 1000))
    while [ "$(now_ms)" -lt $end ]; do
        if [ "$(stat "$1" redis_state)" = "$2" ]; then
            echo $(($(now_ms) - t0))
            return 0
        fi
        sleep 0.05
    done
    echo -1
    return 1
}

want() { [ "$1" = "$2" ]; }

# ---- scenarios ---------------------------------------------------------------

. "$top/tests/fleet/fleet_scenarios.sh"

start=$(now_ms)
for s in $only; do
    case $s in
    1) scenario_strict ;;
    2) scenario_lease ;;
    3) scenario_policy ;;
    4) scenario_sentinel ;;
    5) scenario_cluster ;;
    6) scenario_pam ;;
    *) bad "unknown scenario $s (FLEET_ONLY)" ;;
    esac
done
info "check-fleet: $(($(now_ms) - start)) ms"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
