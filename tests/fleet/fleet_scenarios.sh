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
    # The breaker closes with the first worker connected; the others'
    # handshakes (round trips of 2 x delay here) must end before hits are timed.
    check "3 $1: every worker connected again" 'until_ok 10 all_connected'
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
    local delay=${FLEET_DELAY_MS:-10}
    echo "# 3. failure policy: Redis paused, the link stalled, one host partitioned"
    if [ -z "${redis_6379:-}" ]; then
        redis 6379 || { bad "3 redis-server did not start"; return; }
    fi
    # Every host reaches Redis through a proxy in R delaying each direction.
    # 10 ms each way: a round trip of 20 ms leaves timeout_ms room for the
    # scheduling of a loaded 2-CPU machine (at 20 ms, hits under load passed
    # 100 ms now and then, and the breaker rightly opened).
    bg "$nsr" "$T/proxy.log" "$b/tests/fleet/delay_proxy" "$rip:6390" "$rip:6379" $delay
    proxy=$bgpid
    wipe_hosts
    conf a local "host = \"$rip\"; port = 6390;"
    conf b open "host = \"$rip\"; port = 6390;"
    conf c closed "host = \"$rip\"; port = 6390;"
    setup=proxy
    start_hosts || { bad "3 the hosts did not start"; return; }
    # Each handshake (AUTH, SELECT, SCRIPT LOAD) takes round trips of 2 x delay
    # here: hits sent before it ends could pass timeout_ms.
    check "3 every worker connected to Redis through the proxy" 'until_ok 10 all_connected'
    for h in $hosts; do
        hit_bg $h "$T/d.$h" - -n 2 -a 1 -p d path=/policy
        eval "p_$h=\$bgpid"
    done
    wait_bg $p_a $p_b $p_c
    r=$(sum "$T/d.a" "$T/d.b" "$T/d.c")
    m=$(max_ms "$T/d.a" "$T/d.b" "$T/d.c")
    check "3 $delay ms each way: exact, 3 of 6 allowed ($r), longest hit $m ms" \
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

# until SECONDS CMD...: runs CMD every 50 ms until it succeeds.
until_ok() {
    local end=$(($(now_ms) + $1 * 1000))
    shift
    while [ "$(now_ms)" -lt $end ]; do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    return 1
}
# rinfo PORT SECTION NAME: one field of INFO.
rinfo() { rcli "$1" info "$2" | tr -d '\r' | awk -F: -v k="$3" '$1 == k { print $2 }'; }
synced() { [ "$(rinfo "$1" replication master_link_status)" = up ]; }
# A sentinel knows the replica and both other sentinels.
sentinel_ready() {
    rcli "$1" sentinel master fleet | tr -d '\r' |
        awk 'p == "num-slaves" { s = $1 } p == "num-other-sentinels" { o = $1 } { p = $1 }
             END { exit !(s >= 1 && o >= 2) }'
}
master_is() {
    [ "$(rcli 26379 sentinel get-master-addr-by-name fleet | tr -d '\r' | paste -sd ' ')" = "$1" ]
}
fallbacks() {
    local h n=0
    for h in $hosts; do n=$((n + $(stat $h redis_fallbacks))); done
    echo $n
}
# Every worker and privileged lane of every host has its Redis connection.
all_connected() {
    local h
    for h in $hosts; do [ "$(stat $h redis_connections)" -ge 4 ] || return 1; done
}
all_up() {
    local h
    for h in $hosts; do [ "$(stat $h redis_state)" = up ] || return 1; done
}
# exact_strict LABEL ACTOR: 400 hits of /strict per host at once, 1000 allowed.
exact_strict() {
    for h in $hosts; do
        hit_bg $h "$T/x.$2.$h" - -t 2 -n 400 -a 1 -p "$2" path=/strict
        eval "p_$h=\$bgpid"
    done
    wait_bg $p_a $p_b $p_c
    r=$(sum "$T/x.$2.a" "$T/x.$2.b" "$T/x.$2.c")
    check "$1: exactly 1000 of 1200 allowed across hosts ($r)" \
        'want "$r" "allowed 1000 denied 200 errors 0 fast 0"'
}
# paced_load ACTOR N: N hits of /strict per host, 4 ms apart, in the background.
paced_load() {
    for h in $hosts; do
        hit_bg $h "$T/l.$1.$h" - -n "$2" -i 4000 -a 1 -p "$1" path=/strict
        eval "p_$h=\$bgpid"
    done
}
# load_report LABEL ACTOR HITS: every hit answered in time; over-admission printed.
load_report() {
    wait_bg $p_a $p_b $p_c
    r=$(sum "$T/l.$2.a" "$T/l.$2.b" "$T/l.$2.c")
    m=$(max_ms "$T/l.$2.a" "$T/l.$2.b" "$T/l.$2.c")
    info "$1: $r of $3 hits on a limit of 1000: over-admitted $(($(field "$r" allowed) - 1000))" \
        "(negative: under); $(($(fallbacks) - fb0)) answers by on_redis_error (closed)"
    check "$1: every hit answered ($(field "$r" errors) errors), the longest in $m ms" \
        'want "$(field "$r" errors)" 0 && ms_le $m $((timeout_ms + slack_ms))'
}

scenario_sentinel() {
    local p
    echo "# 4. Sentinel: a planned failover, then the master killed"
    redis 6380 && redis 6381 --replicaof $rip 6380 || {
        bad "4 redis-server did not start"
        return
    }
    for p in 26379 26380 26381; do
        mkdir -p "$T/redis/$p"
        printf '%s\n' "port $p" "bind $rip" "protected-mode no" "dir $T/redis/$p" \
            "sentinel monitor fleet $rip 6380 2" \
            "sentinel down-after-milliseconds fleet 1000" \
            "sentinel failover-timeout fleet 5000" >"$T/redis/$p/sentinel.conf"
        bg "$nsr" "$T/redis/$p.log" redis-server "$T/redis/$p/sentinel.conf" --sentinel
        eval "redis_$p=$bgpid"
        wait_redis $p || { bad "4 sentinel $p did not start"; return; }
    done
    until_ok 20 synced 6381 && until_ok 20 sentinel_ready 26379 &&
        until_ok 20 sentinel_ready 26380 && until_ok 20 sentinel_ready 26381 || {
        bad "4 the replica or the sentinels did not settle"
        return
    }
    wipe_hosts
    for h in $hosts; do
        conf $h closed "sentinels = [ \"$rip:26379\", \"$rip:26380\", \"$rip:26381\" ];
            master_name = \"fleet\";"
    done
    setup=sentinel
    start_hosts || { bad "4 the hosts did not start"; return; }
    exact_strict "4 Sentinel, master $rip:6380" f0

    fb0=$(fallbacks)
    paced_load f1 600
    sleep 0.3
    rcli 26379 sentinel failover fleet >/dev/null
    load_report "4 planned SENTINEL FAILOVER under load" f1 1800
    check "4 planned failover: the sentinels name $rip:6381" 'until_ok 20 master_is "$rip 6381"'
    check "4 planned failover: every host's breaker closed" 'until_ok 10 all_up'
    exact_strict "4 after the planned failover" f2

    until_ok 20 synced 6380 || bad "4 the old master did not become a replica"
    fb0=$(fallbacks)
    paced_load f3 1000
    sleep 0.3
    kill -KILL "$redis_6381"
    wait "$redis_6381" 2>/dev/null
    forget_pid "$redis_6381"
    load_report "4 master killed under load" f3 3000
    check "4 master killed: the sentinels name $rip:6380" 'until_ok 20 master_is "$rip 6380"'
    check "4 master killed: every host's breaker closed" 'until_ok 10 all_up'
    exact_strict "4 after the kill" f4
    wipe_hosts
    for p in $redis_26379 $redis_26380 $redis_26381 $redis_6380; do stop_pid $p; done
    setup=""
}

# owner SLOT: "ID PORT" of the master serving SLOT.
owner() {
    rcli 7000 cluster nodes | tr -d '\r' | awk -v s="$1" '$3 ~ /master/ {
        for (i = 9; i <= NF; i++) {
            n = split($i, r, "-")
            if ((n == 1 && r[1] == s) || (n == 2 && s >= r[1] && s <= r[2])) {
                split($2, a, "[:@]")
                print $1, a[2]
            }
        } }'
}
cluster_ok() {
    local p
    for p in 7000 7001 7002; do
        rcli $p cluster info | tr -d '\r' | grep -qx cluster_state:ok || return 1
    done
}

scenario_cluster() {
    local p
    echo "# 5. Redis Cluster, 3 masters: exact, and a slot migration under load"
    for p in 7000 7001 7002; do
        redis $p --cluster-enabled yes --cluster-config-file nodes.conf \
            --cluster-node-timeout 2000 || { bad "5 redis-server $p did not start"; return; }
    done
    in_ns "$nsr" redis-cli --cluster create $rip:7000 $rip:7001 $rip:7002 \
        --cluster-replicas 0 --cluster-yes >"$T/cluster-create.log" 2>&1
    until_ok 20 cluster_ok || { bad "5 the cluster did not reach cluster_state:ok"; return; }
    wipe_hosts
    for h in $hosts; do
        conf $h closed "cluster_nodes = [ \"$rip:7000\", \"$rip:7001\", \"$rip:7002\" ];"
    done
    setup=cluster
    if ! "$b/divvyd" --check --config "$T/a/divvy.conf" >"$T/cluster-check.log" 2>&1; then
        bad "5 this divvyd does not take redis.cluster_nodes: $(head -1 "$T/cluster-check.log")"
        return
    fi
    start_hosts || { bad "5 the hosts did not start"; return; }
    # 30 actors of 20 credits, spread over the slots: 10 hits each per host.
    for h in $hosts; do
        hit_bg $h "$T/c.$h" - -t 2 -n 10 -a 30 -p k path=/spread
        eval "p_$h=\$bgpid"
    done
    wait_bg $p_a $p_b $p_c
    r=$(sum "$T/c.a" "$T/c.b" "$T/c.c")
    check "5 Cluster: 30 actors x 20 over 3 hosts: exactly 600 of 900 allowed ($r)" \
        'want "$r" "allowed 600 denied 300 errors 0 fast 0"'
    keys="$(rcli 7000 dbsize) $(rcli 7001 dbsize) $(rcli 7002 dbsize)"
    check "5 Cluster: the counters are spread over all three masters (keys: $keys)" \
        'want "$(echo $keys | awk "{ print (\$1 > 0 && \$2 > 0 && \$3 > 0) }")" 1'
    exact_strict "5 Cluster, strict on one hot actor" c0

    # Migrate the slot of one actor's key while every host hits it.
    key="divvy:{fleet-strict:m00}"    # fleet_hit names actor 0 of prefix m0 "m00"
    slot=$(rcli 7000 cluster keyslot "$key")
    set -- $(owner "$slot")
    src_id=$1 src=$2
    dst=$((7000 + (src - 7000 + 1) % 3))
    dst_id=$(rcli $dst cluster myid | tr -d '\r')
    fb0=$(fallbacks)
    t0=$(stat a redis_breaker_trips)
    paced_load m0 600
    sleep 0.4
    rcli $dst cluster setslot "$slot" importing "$src_id" >/dev/null
    rcli $src cluster setslot "$slot" migrating "$dst_id" >/dev/null
    sleep 0.2
    for _ in 1 2 3; do
        k=$(rcli $src cluster getkeysinslot "$slot" 100 | tr -d '\r')
        [ -n "$k" ] || break
        rcli $src migrate $rip $dst "" 0 5000 keys $k >/dev/null
    done
    sleep 0.2
    # The order Redis's resharding uses: the target first (until it knows, it
    # answers MOVED back to the source), then the source, then the third.
    for p in $dst $src $((7000 + (src - 7000 + 2) % 3)); do
        rcli $p cluster setslot "$slot" node "$dst_id" >/dev/null
    done
    load_report "5 slot $slot moved $src -> $dst under load" m0 1800
    r=$(sum "$T/l.m0.a" "$T/l.m0.b" "$T/l.m0.c")
    check "5 slot migration: exactly 1000 of 1800 allowed, none by the policy ($r)" \
        'want "$(field "$r" allowed) $(($(fallbacks) - fb0))" "1000 0"'
    check "5 slot migration: the key now lives on $dst with 1000 used" \
        'want "$(rget $dst "$key")" 1000'
    wipe_hosts
    for p in $redis_7000 $redis_7001 $redis_7002; do stop_pid $p; done
    setup=""
}

# pamtester HOST USER RHOST PASSWORD: one login through the host's PAM stack.
pamtester() {
    printf '%s\n' "$4" | in_ns "$tag$1" env LD_PRELOAD="$pam_wrapper" PAM_WRAPPER=1 \
        PAM_WRAPPER_SERVICE_DIR="$T/$1/pam" PAM_WRAPPER_DISABLE_DEEPBIND=1 \
        pamtester -v -I "rhost=$3" dv-fleet "$2" authenticate >"$T/$1/pam.out" 2>&1
}

scenario_pam() {
    local h ma
    echo "# 6. pam_divvy: failures on some hosts lock the user x source on all"
    ma=$(cc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
    pam_wrapper=/usr/lib/$ma/libpam_wrapper.so
    matrix=/usr/lib/$ma/pam_wrapper/pam_matrix.so
    if ! [ -f "$pam_wrapper" ] || ! [ -f "$matrix" ] || ! command -v pamtester >/dev/null; then
        bad "6 pamtester or libpam-wrapper missing (tools/deps.sh install)"
        return
    fi
    single_hosts closed || { bad "6 the hosts or Redis did not start"; return; }
    printf 'alice:s3cret:dv-fleet\n' >"$T/passdb"
    for h in $hosts; do
        mkdir -p "$T/$h/pam"
        a="socket=unix:$(sock $h) timeout_ms=1000"
        printf '%s\n' "auth requisite $b/pam_divvy.so preauth $a" \
            "auth [success=1 default=ignore] $matrix passdb=$T/passdb" \
            "auth [default=die] $b/pam_divvy.so authfail $a" \
            "auth sufficient $b/pam_divvy.so authsucc $a" \
            "auth requisite pam_deny.so" >"$T/$h/pam/dv-fleet"
    done
    pamtester a alice 192.0.2.30 s3cret
    check "6 alice logs in on A" 'grep -q "successfully authenticated" "$T/a/pam.out"'
    n=0
    for h in a a b b c; do pamtester $h alice 192.0.2.30 wrong || n=$((n + 1)); done
    check "6 five wrong passwords refused: 2 on A, 2 on B, 1 on C" 'want $n 5'
    n=0
    for h in $hosts; do
        ! pamtester $h alice 192.0.2.30 s3cret && grep -q "locked for " "$T/$h/pam.out" &&
            n=$((n + 1))
    done
    check "6 the right password is then refused on A, B and C, with the wait" 'want $n 3'
    pamtester b alice 192.0.2.31 s3cret
    check "6 alice from another source still logs in on B" \
        'grep -q "successfully authenticated" "$T/b/pam.out"'
    check "6 divvyctl locked on C lists alice from 192.0.2.30" \
        'ctl c locked --rule login-user-source 2>/dev/null | grep -q "user=alice rhost=192.0.2.30"'
}
