# SPDX-License-Identifier: MIT
#
# The scenarios of tests/fleet/check-fleet.sh, which sources this file after
# making the namespaces and the helpers (hit, ctl, stat, rcli, redis, conf,
# start_hosts, ...).  Each scenario prints a "# N. …" heading, one line per
# check and a few "info" lines with numbers; none exits.

single="host = \"$rip\"; port = 6379;"
setup=""

# The three hosts on the single Redis at $rip:6379, every policy POLICY.
single_hosts() {
    if [ -z "${redis_6379:-}" ]; then
        redis 6379 || return 1
    fi
    [ "$setup" = "single-$1" ] && return 0
    wipe_hosts
    for h in $hosts; do conf "$h" "$1" "$single"; done
    start_hosts || return 1
    setup="single-$1"
}

# sum FILE...: allowed, denied, errors and fast added over fleet_hit lines.
sum() {
    cat "$@" | awk '{ for (i = 1; i < NF; i++) s[$i] += $(i + 1) }
        END { printf "allowed %d denied %d errors %d fast %d\n", s["allowed"], s["denied"],
              s["errors"], s["fast"] }'
}
max_ms() {
    cat "$@" | awk '{ for (i = 1; i < NF; i++) if ($i == "max_ms" && $(i + 1) > m) m = $(i + 1) }
        END { print m + 0 }'
}
# rget PORT KEY: the credit a Redis key holds (integer part).
rget() { rcli "$1" get "$2" | sed 's/\..*//'; }

scenario_strict() {
    echo "# 1. one Redis, strict: exact across hosts"
    single_hosts closed || { bad "1 the hosts or Redis did not start"; return; }
    # 5 actors x 1,000 credits; each host sends 400 hits per actor (6,000 in
    # all, 1,200 per actor): A through libdivvy, B raw lines over TCP, C raw
    # lines on the Unix socket, all at once.
    hit_bg a "$T/s1.a" - -t 4 -n 400 -a 5 -p s path=/strict
    p1=$bgpid
    hit_bg b "$T/s1.b" "tcp:$hip_b:8321" --raw -t 4 -n 400 -a 5 -p s path=/strict
    p2=$bgpid
    hit_bg c "$T/s1.c" - --raw -t 4 -n 400 -a 5 -p s path=/strict
    p3=$bgpid
    wait_bg $p1 $p2 $p3
    r=$(sum "$T/s1.a" "$T/s1.b" "$T/s1.c")
    info "hosts: A $(cat "$T/s1.a") / B $(cat "$T/s1.b") / C $(cat "$T/s1.c")"
    check "1 strict: 5 actors x 1000 over 3 hosts: exactly 5000 of 6000 allowed ($r)" \
        'want "$r" "allowed 5000 denied 1000 errors 0 fast 0"'
    n=0
    for i in 0 1 2 3 4; do
        [ "$(rget 6379 "divvy:{fleet-strict:s$i}")" = 1000 ] && n=$((n + 1))
    done
    check "1 strict: Redis holds 1000 used for each of the 5 actors" 'want $n 5'
    n=0
    for h in $hosts; do
        ctl $h peek path=/strict actor=s3 >/dev/null 2>&1
        [ $? = 1 ] && n=$((n + 1))
    done
    check "1 strict: divvyctl peek denies actor s3 on every host" 'want $n 3'
    ctl b hit path=/strict actor=s-fresh >/dev/null 2>&1
    check "1 strict: divvyctl hit on B is counted in Redis" \
        'want "$(rget 6379 "divvy:{fleet-strict:s-fresh}")" 1'
    n=0
    for h in $hosts; do [ "$(stat $h redis_fallbacks)" = 0 ] && n=$((n + 1)); done
    check "1 strict: no hit was answered by the failure policy" 'want $n 3'
}

scenario_lease() {
    echo "# 2. one Redis, lease: never over the limit, stranded credit bounded"
    single_hosts closed || { bad "2 the hosts or Redis did not start"; return; }
    key="divvy:{fleet-lease:l0}"
    # Hosts that stop early, holding leases: 700 hits each on a limit of 3000.
    for h in $hosts; do
        hit_bg $h "$T/s2.1$h" - --path auto -t 2 -n 700 -a 1 -p l path=/lease
        eval "p_$h=\$bgpid"
    done
    wait_bg $p_a $p_b $p_c
    r=$(sum "$T/s2.1a" "$T/s2.1b" "$T/s2.1c")
    used=$(rget 6379 "$key")
    stranded=$((used - 2100))
    info "stop early: $r; Redis counts $used used: $stranded leased and unspent"
    check "2 lease: 2100 hits under a 3000 limit: all allowed" \
        'want "$(field "$r" allowed) $(field "$r" errors)" "2100 0"'
    check "2 lease: stranded credit $stranded within 0 .. H x lease_max = $((3 * lease_max))" \
        '[ $stranded -ge 0 ] && [ $stranded -le $((3 * lease_max)) ]'
    # Then every host hits until the pool is gone: 1000 more each.
    for h in $hosts; do
        hit_bg $h "$T/s2.2$h" - --path auto -t 2 -n 1000 -a 1 -p l path=/lease
        eval "p_$h=\$bgpid"
    done
    wait_bg $p_a $p_b $p_c
    r=$(sum "$T/s2.1a" "$T/s2.1b" "$T/s2.1c" "$T/s2.2a" "$T/s2.2b" "$T/s2.2c")
    allowed=$(field "$r" allowed)
    info "in all: $r (of 5100 hits; $(field "$r" fast) decided in-process); Redis $(rget 6379 "$key")"
    check "2 lease: never over the limit: $allowed <= 3000 allowed across hosts" \
        '[ $allowed -le 3000 ] && [ "$(field "$r" errors)" = 0 ]'
    check "2 lease: at least limit - H x lease_max = $((3000 - 3 * lease_max)) allowed" \
        '[ $allowed -ge $((3000 - 3 * lease_max)) ]'
}

# policy_hits LABEL ACTOR: 5 hits of /policy (limit 3) from each host at once,
# A on_redis_error local, B open, C closed; each answered by its policy
# within timeout_ms + slack.
policy_hits() {
    for h in $hosts; do
        hit_bg $h "$T/p.$2.$h" - -n 5 -a 1 -p "$2" path=/policy
        eval "p_$h=\$bgpid"
    done
    wait_bg $p_a $p_b $p_c
    got="$(field "$(cat "$T/p.$2.a")" allowed)/$(field "$(cat "$T/p.$2.b")" allowed)"
    got="$got/$(field "$(cat "$T/p.$2.c")" allowed)"
    e=$(sum "$T/p.$2.a" "$T/p.$2.b" "$T/p.$2.c")
    m=$(max_ms "$T/p.$2.a" "$T/p.$2.b" "$T/p.$2.c")
    check "3 $1: local/open/closed allowed 3/5/0 of 5 (got $got, $(field "$e" errors) errors)" \
        'want "$got $(field "$e" errors)" "3/5/0 0"'
    check "3 $1: the longest hit waited $m ms <= timeout_ms $timeout_ms + $slack_ms" \
        'ms_le $m $((timeout_ms + slack_ms))'
    n=0
    for h in $hosts; do [ "$(stat $h redis_state)" = down ] && n=$((n + 1)); done
    check "3 $1: every host's breaker is open" 'want $n 3'
}

# heal LABEL: each host's breaker closes; then exact again on actor ACTOR.
heal() {
    worst=0
    n=0
    for h in $hosts; do
        t=$(wait_state $h up 10) && n=$((n + 1))
        [ "$t" -gt $worst ] && worst=$t
    done
    check "3 $1: every breaker closed after the heal (the last after $worst ms)" 'want $n 3'
    for h in $hosts; do
        hit_bg $h "$T/h.$2.$h" - -n 2 -a 1 -p "$2" path=/policy
        eval "p_$h=\$bgpid"
    done
    wait_bg $p_a $p_b $p_c
    r=$(sum "$T/h.$2.a" "$T/h.$2.b" "$T/h.$2.c")
    check "3 $1: exact again after the heal: 3 of 6 allowed ($r)" \
        'want "$r" "allowed 3 denied 3 errors 0 fast 0"'
}

scenario_policy() {
    echo "# 3. failure policy: Redis paused, the link stalled, one host partitioned"
    if [ -z "${redis_6379:-}" ]; then
        redis 6379 || { bad "3 redis-server did not start"; return; }
    fi
    # Every host reaches Redis through a proxy in R delaying each direction.
    bg "$nsr" "$T/proxy.log" "$b/tests/fleet/delay_proxy" "$rip:6390" "$rip:6379" 20
    proxy=$bgpid
    wipe_hosts
    conf a local "host = \"$rip\"; port = 6390;"
    conf b open "host = \"$rip\"; port = 6390;"
    conf c closed "host = \"$rip\"; port = 6390;"
    setup=proxy
    start_hosts || { bad "3 the hosts did not start"; return; }
    for h in $hosts; do
        hit_bg $h "$T/d.$h" - -n 2 -a 1 -p d path=/policy
        eval "p_$h=\$bgpid"
    done
    wait_bg $p_a $p_b $p_c
    r=$(sum "$T/d.a" "$T/d.b" "$T/d.c")
    m=$(max_ms "$T/d.a" "$T/d.b" "$T/d.c")
    check "3 20 ms each way: exact, 3 of 6 allowed ($r), longest hit $m ms" \
        'want "$r" "allowed 3 denied 3 errors 0 fast 0"'

    kill -STOP "$redis_6379"
    policy_hits "Redis paused (SIGSTOP)" p1
    kill -CONT "$redis_6379"
    heal "Redis resumed (SIGCONT)" p2

    kill -USR1 $proxy
    policy_hits "link stalled (proxy holds every byte)" p3
    kill -USR2 $proxy
    heal "link flows again" p4

    # One host cut off: the others stay exact.
    ip -n "${tag}a" link set eth0 down
    hit_bg a "$T/q.a" - -n 5 -a 1 -p q path=/strict
    pa=$bgpid
    hit_bg b "$T/q.b" - -t 2 -n 600 -a 1 -p q path=/strict
    pb=$bgpid
    hit_bg c "$T/q.c" - -t 2 -n 600 -a 1 -p q path=/strict
    pc=$bgpid
    wait_bg $pa $pb $pc
    r=$(sum "$T/q.b" "$T/q.c")
    check "3 A partitioned: B and C exact, 1000 of 1200 allowed ($r)" \
        'want "$r" "allowed 1000 denied 200 errors 0 fast 0"'
    ra=$(cat "$T/q.a")
    check "3 A partitioned: A answers by its policy (local): 5 of 5 ($ra)" \
        'want "$(field "$ra" allowed) $(field "$ra" errors)" "5 0" && ms_le $(field "$ra" max_ms) $((timeout_ms + slack_ms))'
    check "3 A partitioned: only A's breaker is open" \
        'want "$(stat a redis_state) $(stat b redis_state) $(stat c redis_state)" "down up up"'
    ip -n "${tag}a" link set eth0 up
    t=$(wait_state a up 10)
    check "3 A's link back: its breaker closed after $t ms" '[ $t -ge 0 ]'
    stop_pid $proxy
    wipe_hosts
    setup=""
}
scenario_sentinel() { :; }
scenario_cluster() { :; }
scenario_pam() { :; }
