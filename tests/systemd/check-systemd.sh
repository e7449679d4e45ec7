#!/bin/bash
# SPDX-License-Identifier: MIT
# check-systemd.sh BUILDDIR: divvy under a real systemd; `make check-systemd`.
#
# Builds (once; cached outside the repo, keyed by the package list, the host's
# versions of those packages and the apt sources) a Debian bookworm root
# filesystem with mmdebstrap from this machine's apt sources: systemd, dbus
# and every package whose libraries divvyd, divvyctl, divvy-bench, libdivvy
# and pam_divvy load (from ldd on the build).  Boots it with systemd-nspawn
# (-b --register=no --keep-unit --private-network: PID 1 here need not be
# systemd), then does what
# docs/operations.md tells an admin to do on a running system:
# `make install DESTDIR=<root> PREFIX=/usr`, systemd-sysusers,
# systemd-tmpfiles, daemon-reload, `systemctl enable --now divvyd.socket`.
# It drives the result with nsenter (into the container's namespaces through
# its PID 1), systemctl and divvyctl: users, groups and /run/divvy; socket
# activation; Type=notify READY and STATUS; reload and a rejected reload;
# counts kept, for a plain rule and a fast_path rule, across restart, a crash
# (SIGSEGV), a watchdog restart (a drop-in with WatchdogSec=2s, divvyd
# SIGSTOPped) and stop + start; the fast table in the service's fd store;
# what members of divvy-fast and non-admin users of the socket can do; a
# clean stop; the example run-divvy.mount turned on as docs/operations.md
# says; a divvy-fast member resizing the fast table through the descriptor
# libdivvy maps (tests/systemd/fast_attack.c) and by path (issue 11 items
# 1 and 5); a reboot, after which the enabled units come up by themselves.
# One line per case ("ok   ..." or "FAIL ...: why"), then "N passed, N
# failed"; exit 1 when a case failed.
#
# Prints "SKIP: <reason>" and exits 0 only when systemd-nspawn cannot run
# here at all (not root, or namespaces refused).  Always powers the container
# off (by its PID) and removes the root directory, also on failure or ^C.
# Environment: DIVVY_SYSTEMD_CACHE (default /var/cache/divvy-check-systemd),
# DIVVY_SYSTEMD_SOURCES (an apt sources file to use instead of the host's
# Debian bookworm entries).
set -u
export LC_ALL=C

B=${1:?usage: tests/systemd/check-systemd.sh BUILDDIR}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "$SRC" && cd "$B" && pwd) || exit 1
SUITE=bookworm
CACHE=${DIVVY_SYSTEMD_CACHE:-/var/cache/divvy-check-systemd}
FORMAT=1                        # bump when the tarball's recipe changes
T0=$SECONDS

npass=0
nfail=0
failed=""
WORK=""
ROOT_LOCK=""                    # systemd-nspawn's lock file for the root: DEV:INODE
NSPAWN=""
LEADER=""

# ---- reporting ------------------------------------------------------------------

pass() { npass=$((npass + 1)); echo "ok   $1"; }
fail() { nfail=$((nfail + 1)); failed="$failed
    $1"; echo "FAIL $1: $2"; }
# expect NAME WHAT GOT WANT
expect() { if [ "$3" = "$4" ]; then pass "$1"; else fail "$1" "$2 is '$3', expected '$4'"; fi; }
note() { echo "-- $*"; }

# Setup that cannot go on: the reason, the closing line, exit 1 (cleanup runs).
die() {
    fail "setup" "$1"
    [ $# -gt 1 ] && [ -f "$2" ] && tail -n 40 "$2" | sed 's/^/    | /'
    exit 1
}

skip() { echo "SKIP: $*"; exit 0; }

# ---- the container ----------------------------------------------------------------

# Runs a command inside the container (all its namespaces, its root), with a
# clean environment.
ct() {
    nsenter --target "$LEADER" --all --root --wd -- \
        env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C "$@"
}

# The container's PID 1: the descendant of our systemd-nspawn whose PID in its
# own namespace is 1.
find_leader() {
    local p c ns
    for p in $(pgrep -P "$NSPAWN"); do
        for c in "$p" $(pgrep -P "$p"); do
            ns=$(awk '/^NSpid:/ { print $NF }' "/proc/$c/status" 2>/dev/null)
            [ "$ns" = 1 ] && { LEADER=$c; return 0; }
        done
    done
    return 1
}

# wait_for SECONDS CMD...: polls CMD until it succeeds; 1 after the deadline.
wait_for() {
    local end=$((SECONDS + $1))
    shift
    while ! "$@"; do
        [ "$SECONDS" -ge "$end" ] && return 1
        sleep 0.1
    done
    return 0
}

prop() { ct systemctl show -p "$1" --value "$2" 2>/dev/null; }
is_active() { [ "$(prop ActiveState "$1")" = active ]; }
svc() { prop "$1" divvyd.service; }
main_pid() { svc MainPID; }
unit_state() {
    echo "ActiveState $(svc ActiveState), NRestarts $(svc NRestarts), MainPID $(main_pid)"
}
# Sends SIG to divvyd's main process, by the PID systemd reports; never to a
# PID below 2 (kill -SIG 0 would signal our own process group, here too).
signal_main() {
    [ "${2:-0}" -gt 1 ] 2>/dev/null || return 1
    ct sh -c 'kill -"$1" "$2"' sh "$1" "$2"
}
# The credit a PEEK over the socket reports for t=VALUE (empty on error).
credit() { ct divvyctl peek "t=$1" 2>/dev/null | sed -n 's/.* credit=\([0-9]*\).*/\1/p'; }

# Powers the container off (SIGRTMIN+4 to its PID 1), then makes sure
# systemd-nspawn is gone; removes the work directory.
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$NSPAWN" ] && kill -0 "$NSPAWN" 2>/dev/null; then
        [ -n "$LEADER" ] && kill -s RTMIN+4 "$LEADER" 2>/dev/null
        wait_for 30 eval '! kill -0 "$NSPAWN" 2>/dev/null' || {
            echo "-- container did not power off in 30 s: killing systemd-nspawn $NSPAWN" >&2
            kill -KILL "$NSPAWN" 2>/dev/null
            [ -n "$LEADER" ] && kill -KILL "$LEADER" 2>/dev/null
        }
        wait "$NSPAWN" 2>/dev/null
    fi
    # What systemd-nspawn leaves on the host when it did not exit by itself.
    if [ -n "$ROOT_LOCK" ]; then
        rm -rf "/run/systemd/nspawn/propagate/divvy-check-$$"
        rm -f "/run/systemd/nspawn/locks/inode-$ROOT_LOCK"
    fi
    case "$WORK" in
    /var/tmp/divvy-check-systemd.*) rm -rf --one-file-system "$WORK" ;;
    esac
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- can nspawn run here? -----------------------------------------------------

[ "$(id -u)" = 0 ] || skip "not root (systemd-nspawn and nsenter need root)"
for c in mmdebstrap systemd-nspawn nsenter; do
    command -v "$c" >/dev/null 2>&1 ||
        die "$c missing: run tools/deps.sh install (apt-get install systemd-container mmdebstrap)"
done
if ! out=$(unshare --mount --pid --uts --ipc --net --fork true 2>&1); then
    skip "cannot create namespaces here (unshare: $out)"
fi

# ---- the root filesystem (cached) ---------------------------------------------

# Debian packages of the libraries the build loads (its own libdivvy aside).
runtime_packages() {
    local bins f lib pkg
    for f in divvyd divvyctl divvy-bench libdivvy.so.0 pam_divvy.so; do
        [ -e "$B/$f" ] && bins="${bins:-} $B/$f"
    done
    # shellcheck disable=SC2086
    ldd $bins | awk '/=> not found/ { print "MISSING " $1 } $2 == "=>" && $3 ~ /^\// { print $3 }' |
        sort -u | while read -r lib rest; do
        if [ "$lib" = MISSING ]; then
            echo "ldd: $rest not found" >&2
            return 1
        fi
        case "$lib" in "$B"/*) continue ;; esac
        pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null) || {
            echo "no Debian package owns $lib" >&2
            return 1
        }
        echo "${pkg%%:*}"
    done
}

# The host's apt entries for Debian bookworm (and -updates, -security), in
# their own format: one-line "deb" lines, deb822 stanzas.  Mirrors are the
# host's; an entry counts when its URI ends in /debian or /debian-security.
debian_sources() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        grep -E "^[[:space:]]*deb[[:space:]]" "$f" |
            grep -E "/debian(-security)?/?[[:space:]]+$SUITE(-updates|-security)?[[:space:]]"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v suite="$SUITE" '
            function flush() {
                if (stanza != "" && deb && uri && suites && enabled) print stanza
                stanza = ""; deb = uri = suites = 0; enabled = 1
            }
            BEGIN { enabled = 1 }
            /^[[:space:]]*$/ { flush(); next }
            /^#/ { next }
            { stanza = stanza $0 "\n" }
            tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
            tolower($1) == "uris:" { for (i = 2; i <= NF; i++)
                                         if ($i ~ /\/debian(-security)?\/?$/) uri = 1 }
            tolower($1) == "suites:" { for (i = 2; i <= NF; i++)
                                           if ($i ~ "^" suite "(-updates|-security)?$") suites = 1 }
            tolower($1) == "enabled:" && tolower($2) == "no" { enabled = 0 }
            END { flush() }' "$f"
    done
}

mkdir -p "$CACHE" || die "cannot create $CACHE"
WORK=$(mktemp -d /var/tmp/divvy-check-systemd.XXXXXX) || die "mktemp failed"
ROOT=$WORK/root
LOG=$WORK/console.log

pkgs=$(runtime_packages) || die "cannot work out the runtime packages (ldd/dpkg -S above)"
pkgs=$(printf '%s\n' systemd systemd-sysv dbus $pkgs | sort -u | tr '\n' ' ')
if [ -n "${DIVVY_SYSTEMD_SOURCES:-}" ]; then
    cp "$DIVVY_SYSTEMD_SOURCES" "$WORK/sources" || die "cannot read $DIVVY_SYSTEMD_SOURCES"
else
    debian_sources > "$WORK/sources"
fi
[ -s "$WORK/sources" ] ||
    die "no Debian $SUITE entry in /etc/apt/sources.list* (set DIVVY_SYSTEMD_SOURCES)"
# deb822 when it has a Types: line, else one-line entries.
if grep -qi '^types:' "$WORK/sources"; then
    mv "$WORK/sources" "$WORK/host.sources"
else
    mv "$WORK/sources" "$WORK/host.list"
fi
# The key: the recipe, the packages with the versions this host has (a host
# upgrade rebuilds the root too), the sources.
# shellcheck disable=SC2086
key=$( (echo "$FORMAT $SUITE $pkgs"; dpkg-query -W -f='${Package}=${Version}\n' $pkgs 2>/dev/null
        cat "$WORK"/host.*) | sha256sum | cut -c1-16)
TARBALL=$CACHE/$SUITE-$key.tar

t=$SECONDS
(
    flock 9
    [ -s "$TARBALL" ] && exit 0
    note "building $TARBALL (mmdebstrap $SUITE, minbase + $pkgs)"
    # shellcheck disable=SC2086
    mmdebstrap --variant=minbase --format=tar --include="$(echo $pkgs | tr ' ' ,)" "$SUITE" \
        "$TARBALL.tmp" "$WORK"/host.* > "$CACHE/build.log" 2>&1 || { rm -f "$TARBALL.tmp"; exit 1; }
    mv "$TARBALL.tmp" "$TARBALL" || exit 1
    # Older package lists: not needed any more.
    find "$CACHE" -maxdepth 1 -name "$SUITE-*.tar" ! -name "${TARBALL##*/}" -delete
) 9> "$CACHE/lock" || die "mmdebstrap failed ($CACHE/build.log)" "$CACHE/build.log"
note "root filesystem $TARBALL ready in $((SECONDS - t)) s"

mkdir "$ROOT" && tar -C "$ROOT" --numeric-owner -xpf "$TARBALL" || die "cannot unpack $TARBALL"
ROOT_LOCK=$(stat -c '%d:%i' "$ROOT")

# ---- boot -------------------------------------------------------------------------

state=""
booted() {
    state=$(ct timeout 5 systemctl is-system-running --wait 2>/dev/null)
    case "$state" in running | degraded | maintenance | stopping) return 0 ;; esac
    kill -0 "$NSPAWN" 2>/dev/null || return 0
    return 1
}
# boot NAME: starts systemd-nspawn on $ROOT, finds the container's PID 1 and
# waits (bounded) until systemd there has finished starting up.
boot() {
    local t=$SECONDS units
    LEADER=""
    systemd-nspawn --quiet -b --register=no --keep-unit --private-network \
        --machine="divvy-check-$$" -D "$ROOT" < /dev/null >> "$LOG" 2>&1 &
    NSPAWN=$!
    wait_for 30 find_leader ||
        die "no container PID 1 within 30 s (systemd-nspawn's output below)" "$LOG"
    wait_for 120 booted || die "container not booted in 120 s (state '$state')" "$LOG"
    kill -0 "$NSPAWN" 2>/dev/null || die "systemd-nspawn exited while booting" "$LOG"
    if [ "$state" = running ]; then
        pass "$1: the container reaches 'running' ($((SECONDS - t)) s)"
    else
        units=$(ct systemctl --failed --plain --no-legend | tr '\n' ' ')
        fail "$1: the container reaches 'running'" "it is '$state'; failed units: $units"
    fi
}
boot "boot"

# ---- a fresh install on the running system (docs/operations.md) ----------------

make -C "$SRC" --no-print-directory B="$B" install DESTDIR="$ROOT" PREFIX=/usr \
    > "$WORK/install.log" 2>&1 ||
    die "make install DESTDIR=<root> PREFIX=/usr failed" "$WORK/install.log"
ct systemd-sysusers divvy.conf > "$WORK/setup.log" 2>&1 &&
    ct systemd-tmpfiles --create divvy.conf >> "$WORK/setup.log" 2>&1 &&
    ct systemctl daemon-reload >> "$WORK/setup.log" 2>&1 ||
    die "systemd-sysusers / systemd-tmpfiles / daemon-reload failed" "$WORK/setup.log"
# Clients for the fast path (run by fast_client): docs/examples/hit and the
# attack; they load the installed libdivvy.
install -m 0755 "$B/examples/hit" "$ROOT/usr/local/bin/divvy-hit"
install -m 0755 "$B/tests/systemd/fast_attack" "$ROOT/usr/local/bin/divvy-fast-attack"
ct systemctl enable --now divvyd.socket > "$WORK/enable.log" 2>&1
expect "install: systemctl enable --now divvyd.socket" "its exit status" "$?" 0

# Issue 11 item 10: nothing may mount over the /run/divvy tmpfiles made.
if ct findmnt -n /run/divvy > "$WORK/findmnt" 2>&1; then
    fail "install: /run/divvy is not a mount of its own" "mounted: $(cat "$WORK/findmnt")"
else
    pass "install: /run/divvy is not a mount of its own"
fi
if ct test -e /lib/systemd/system/run-divvy.mount; then
    fail "install: no run-divvy.mount in the unit directory" \
        "/lib/systemd/system/run-divvy.mount exists"
else
    pass "install: no run-divvy.mount in the unit directory"
fi

# ---- sysusers and tmpfiles ------------------------------------------------------

ent=$(ct getent passwd divvy | cut -d: -f3,7)
uid=${ent%%:*}
if [ -n "$uid" ] && [ "$uid" -lt 1000 ]; then
    pass "sysusers: system user divvy (uid $uid, shell ${ent#*:})"
else
    fail "sysusers: system user divvy" "getent passwd divvy gives uid '$uid'"
fi
for g in divvy divvy-fast divvy-admin; do
    gid=$(ct getent group "$g" | cut -d: -f3)
    if [ -n "$gid" ]; then
        pass "sysusers: group $g ($gid)"
    else
        fail "sysusers: group $g" "missing"
    fi
done
G_DIVVY=$(ct getent group divvy | cut -d: -f3)
G_FAST=$(ct getent group divvy-fast | cut -d: -f3)
G_ADMIN=$(ct getent group divvy-admin | cut -d: -f3)
expect "tmpfiles: /run/divvy" "owner, group, mode" "$(ct stat -c '%U:%G %a' /run/divvy)" \
    "divvy:divvy-fast 2755"
expect "socket: /run/divvy/divvy.sock" "owner, group, mode, type" \
    "$(ct stat -c '%U:%G %a %F' /run/divvy/divvy.sock 2>&1)" "root:divvy 660 socket"
expect "socket: divvyd.socket listening" "its ActiveState/SubState" \
    "$(prop ActiveState divvyd.socket)/$(prop SubState divvyd.socket)" "active/listening"
expect "socket: divvyd.service not started by enabling the socket" "its ActiveState" \
    "$(prop ActiveState divvyd.service)" inactive

# ---- socket activation, Type=notify ---------------------------------------------

out=$(ct divvyctl hit method=GET path=/status 2>&1)
case "$out" in
allowed\ credit=999\ *) pass "activation: a first request is answered ($out)" ;;
*) fail "activation: a first request is answered" "divvyctl hit said '$out'" ;;
esac
wait_for 10 is_active divvyd.service
expect "activation: the request started divvyd.service" "ActiveState/SubState" \
    "$(prop ActiveState divvyd.service)/$(prop SubState divvyd.service)" "active/running"
expect "notify: Type" "Type" "$(prop Type divvyd.service)" notify
st=$(prop StatusText divvyd.service)
if [[ "$st" =~ ^[0-9]+\ rules\ \(generation\ [0-9]+\), ]]; then
    pass "notify: READY=1 and a STATUS= line ('$st')"
else
    fail "notify: READY=1 and a STATUS= line" "StatusText is '$st'"
fi
ct divvyctl take 5 method=GET path=/status > /dev/null 2>&1
status_hits() {
    st=$(prop StatusText divvyd.service)
    [[ "$st" =~ ,\ ([0-9]+)\ hits ]] && [ "${BASH_REMATCH[1]}" -ge 2 ]
}
if wait_for 15 status_hits; then
    pass "notify: STATUS= follows the hits ('$st')"
else
    fail "notify: STATUS= follows the hits" "StatusText still '$st' after 15 s"
fi
expect "tables: private.table" "owner, group, mode" \
    "$(ct stat -c '%U:%G %a' /run/divvy/private.table 2>&1)" "divvy:divvy-fast 600"

# ---- reload, rejected reload ------------------------------------------------------

CONF=$ROOT/etc/divvy/divvy.conf
cat > "$CONF" <<'EOF'
# tests/systemd/check-systemd.sh: a plain rule and a fast_path rule.
rules = (
    { match = { t = "slow"; }; label = "slow"; credit_limit = 100; reset_seconds = 86400; },
    { match = { t = "fast"; }; label = "fast"; credit_limit = 100; reset_seconds = 86400;
      fast_path = true; },
    { match = { method = "GET"; path = "/status"; }; credit_limit = 1000; reset_seconds = 60; },
    { default = true; credit_limit = 0; reset_seconds = 0; }
);
EOF
cp "$CONF" "$WORK/good.conf"
pid=$(main_pid)
ct systemctl reload divvyd.service > "$WORK/reload.log" 2>&1
expect "reload: systemctl reload with a new config" "its exit status" "$?" 0
peeks=$(ct divvyctl peek t=slow 2>&1; ct divvyctl peek t=fast 2>&1)
if [[ "$peeks" == *"credit=100 "*"rule=slow"*"credit=100 "*"rule=fast"* ]]; then
    pass "reload: the new rules are served"
else
    fail "reload: the new rules are served" "divvyctl peek t=slow, t=fast: $peeks"
fi
expect "reload: same process" "ActiveState/MainPID" \
    "$(prop ActiveState divvyd.service)/$(main_pid)" \
    "active/$pid"

ct divvyctl take 10 t=slow > /dev/null 2>&1
ct divvyctl take 10 t=fast > /dev/null 2>&1
echo 'rules = ( { match = { t = "slow"; }; credit_limit = "many"; } );' > "$CONF"
ct systemctl reload divvyd.service > "$WORK/reload-bad.log" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
    pass "rejected reload: systemctl reload fails on a bad config (exit $rc)"
else
    fail "rejected reload: systemctl reload fails on a bad config" "it exited 0"
fi
expect "rejected reload: divvyd keeps running" "ActiveState/MainPID" \
    "$(prop ActiveState divvyd.service)/$(main_pid)" "active/$pid"
expect "rejected reload: the running rules are kept (plain rule)" "credit left" "$(credit slow)" 90
expect "rejected reload: the running rules are kept (fast_path rule)" "credit left" \
    "$(credit fast)" 90
cp "$WORK/good.conf" "$CONF"

# ---- counts across restart, crash, watchdog restart, stop + start -------------

# fast_client UID CMD...: CMD as uid UID in groups divvy-fast and divvy (a
# fast-path client also uses the socket; a table handed out over it needs
# that).  It runs as is in the container: systemd-nspawn shows it a boot_id
# of its own over /proc/sys/kernel/random/boot_id while divvyd's
# ProtectProc=invisible shows divvyd the kernel's, and libdivvy must not
# refuse the memfd divvyd hands it for that (it did, when it compared them).
fast_client() {
    local u=$1
    shift
    ct setpriv --reuid="$u" --regid="$u" --groups="$G_FAST,$G_DIVVY" -- "$@"
}
# One credit of t=fast taken on the fast path, in a client process
# (docs/examples/hit with DIVVY_PATH=fast); a failing case otherwise.
fast_hit() {
    local out
    out=$(fast_client 64011 env DIVVY_PATH=fast /usr/local/bin/divvy-hit t=fast 2>&1)
    case "$out" in
    allowed\ *rule=fast\ path=fast) return 0 ;;
    esac
    fail "$1: a hit on the fast path in a client process" "divvy-hit said '$out'"
    return 1
}

# counts_kept NAME WANT: both rules have WANT credits left now.
counts_kept() {
    expect "$1 keeps counts: plain rule (private table)" "credit left" "$(credit slow)" "$2"
    expect "$1 keeps counts: fast_path rule (fast table)" "credit left" "$(credit fast)" "$2"
}
# take7 NAME: 7 credits of each rule; one of the fast_path rule's in a client.
take7() {
    ct divvyctl take 7 t=slow > /dev/null 2>&1
    ct divvyctl take 6 t=fast > /dev/null 2>&1
    fast_hit "$1"
}
restarted() {
    local p
    p=$(main_pid)
    is_active divvyd.service && [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != "$1" ] &&
        [ "$(prop NRestarts divvyd.service)" -gt "$2" ]
}

# The fast path works for a client of the installed layout.
if fast_hit "fast path"; then
    pass "fast path: a divvy-fast member's hit is decided in its own process"
fi
ct divvyctl take 1 t=slow > /dev/null 2>&1

# systemctl restart
ct systemctl reset-failed divvyd.service
take7 "restart"
pid=$(main_pid)
ct systemctl restart divvyd.service > "$WORK/restart.log" 2>&1
expect "restart: systemctl restart" "its exit status" "$?" 0
if is_active divvyd.service && [ "$(main_pid)" != "$pid" ]; then
    pass "restart: a new divvyd is running"
else
    fail "restart: a new divvyd is running" "$(unit_state) (was $pid)"
fi
counts_kept "restart" 82

# a crash: SIGSEGV to the main process; Restart=on-failure brings it back
ct systemctl reset-failed divvyd.service
take7 "crash"
pid=$(main_pid)
n=$(prop NRestarts divvyd.service)
if signal_main SEGV "$pid" && wait_for 20 restarted "$pid" "$n"; then
    pass "crash: divvyd killed by SIGSEGV is restarted by systemd"
else
    fail "crash: divvyd killed by SIGSEGV is restarted by systemd" "$(unit_state) (was $pid)"
fi
counts_kept "crash" 75

# the watchdog: WatchdogSec=2s, then divvyd SIGSTOPped
DROPIN=$ROOT/etc/systemd/system/divvyd.service.d
mkdir -p "$DROPIN"
printf '[Service]\nWatchdogSec=2s\nTimeoutAbortSec=3s\n' > "$DROPIN/50-check-watchdog.conf"
ct systemctl daemon-reload
ct systemctl reset-failed divvyd.service
ct systemctl restart divvyd.service > "$WORK/restart.log" 2>&1
expect "watchdog: the drop-in applies" "WatchdogUSec" "$(prop WatchdogUSec divvyd.service)" 2s
watchdog_pinged() { [ "$(prop WatchdogTimestampMonotonic divvyd.service)" != 0 ]; }
wait_for 10 watchdog_pinged
take7 "watchdog restart"
pid=$(main_pid)
n=$(prop NRestarts divvyd.service)
if signal_main STOP "$pid" && wait_for 30 restarted "$pid" "$n"; then
    pass "watchdog: a stopped divvyd is killed and restarted"
else
    fail "watchdog: a stopped divvyd is killed and restarted" "$(unit_state) (was $pid)"
fi
if ct journalctl -u divvyd.service -o cat --no-pager 2>/dev/null | grep -q 'Watchdog timeout'; then
    pass "watchdog: the journal says 'Watchdog timeout'"
else
    fail "watchdog: the journal says 'Watchdog timeout'" "no such line in journalctl -u divvyd"
fi
counts_kept "watchdog restart" 68
rm -f "$DROPIN/50-check-watchdog.conf"
rmdir "$DROPIN"
ct systemctl daemon-reload
ct systemctl reset-failed divvyd.service
ct systemctl restart divvyd.service > "$WORK/restart.log" 2>&1

# systemctl stop, then start (systemd 252 empties the fd store on stop)
take7 "stop + start"
ct systemctl stop divvyd.service > "$WORK/stop.log" 2>&1
expect "stop: divvyd.service stops cleanly" "ActiveState/Result/exit status" \
    "$(svc ActiveState)/$(svc Result)/$(svc ExecMainStatus)" \
    "inactive/success/0"
ct systemctl start divvyd.service > "$WORK/start.log" 2>&1
expect "stop + start: systemctl start" "ActiveState" "$(prop ActiveState divvyd.service)" active
counts_kept "stop + start" 61

# stop, then a request on the socket starts divvyd again
take7 "stop + socket-activated start"
ct systemctl stop divvyd.service > /dev/null 2>&1
expect "stop: divvyd.service stopped, the socket still listening" "their ActiveStates" \
    "$(svc ActiveState)/$(prop ActiveState divvyd.socket)" "inactive/active"
counts_kept "stop + socket-activated start" 54

# ---- the fast table in the fd store (DESIGN §4; issue 11) ------------------------

max=$(prop FileDescriptorStoreMax divvyd.service)
nfd=$(prop NFileDescriptorStore divvyd.service)
if [ "${max:-0}" -gt 0 ] && [ "${nfd:-0}" -ge 1 ]; then
    pass "fd store: divvyd keeps its fast table there (FileDescriptorStoreMax=$max, $nfd held)"
else
    fail "fd store: divvyd keeps its fast table there" \
        "FileDescriptorStoreMax='$max', NFileDescriptorStore='$nfd'"
fi
if ct test -e /run/divvy/fast.table; then
    fail "fd store: no fast.table file a client could resize" "/run/divvy/fast.table exists"
else
    pass "fd store: no fast.table file a client could resize"
fi

# ---- the installed layout against local users ----------------------------------

# as UID GIDS CMD...: CMD as uid UID (primary group UID) with supplementary GIDS.
as() {
    local u=$1 g=$2
    shift 2
    ct setpriv --reuid="$u" --regid="$u" --groups="$g" -- "$@"
}
# refused NAME CMD...: CMD must fail.
refused() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then
        fail "$name" "it succeeded${out:+: $out}"
    else
        pass "$name"
    fi
}
refused "divvy-fast member cannot create files in /run/divvy" \
    as 64010 "$G_FAST" sh -c ': > /run/divvy/attack'
ct rm -f /run/divvy/attack
refused "divvy-fast member cannot read private.table" \
    as 64010 "$G_FAST" sh -c 'cat /run/divvy/private.table > /dev/null'
refused "divvy-fast member cannot write private.table" \
    as 64010 "$G_FAST" sh -c ': >> /run/divvy/private.table'
refused "divvy-fast member cannot write rules.<generation>" \
    as 64010 "$G_FAST" sh -c 'for f in /run/divvy/rules.*; do : >> "$f" || exit 1; done'
refused "a user outside group divvy cannot use the socket" \
    as 64030 64030 divvyctl peek t=slow

ct divvyctl take 5 t=slow > /dev/null 2>&1
before=$(credit slow)
as 64020 "$G_DIVVY" divvyctl reset t=slow > "$WORK/reset.log" 2>&1
rc=$?
expect "RESET from a non-admin socket user is refused" "divvyctl's exit status" "$rc" 4
expect "RESET from a non-admin socket user changes nothing" "credit left" "$(credit slow)" "$before"
ct divvyctl -s tcp:127.0.0.1:8321 reset t=slow > /dev/null 2>&1
expect "RESET from root over TCP is refused" "divvyctl's exit status" "$?" 4
as 64021 "$G_DIVVY,$G_ADMIN" divvyctl reset t=slow > /dev/null 2>&1
expect "RESET from a divvy-admin member is done" "exit status/credit" "$?/$(credit slow)" 0/100

# ---- clean stop -------------------------------------------------------------------

ct systemctl stop divvyd.socket divvyd.service > "$WORK/stop.log" 2>&1
expect "clean stop: divvyd.socket and divvyd.service" "ActiveStates, Result, exit status" \
    "$(prop ActiveState divvyd.socket)/$(svc ActiveState)/$(svc Result)/$(svc ExecMainStatus)" \
    "inactive/inactive/success/0"

# ---- the example run-divvy.mount, turned on as docs/operations.md says ----------

cp "$ROOT/usr/share/doc/divvy/examples/run-divvy.mount" "$ROOT/etc/systemd/system/" &&
    ct systemctl daemon-reload && ct systemctl enable run-divvy.mount > "$WORK/mount.log" 2>&1 &&
    ct systemctl start run-divvy.mount >> "$WORK/mount.log" 2>&1 &&
    ct systemd-tmpfiles --create divvy.conf >> "$WORK/mount.log" 2>&1 &&
    ct systemctl start divvyd.socket >> "$WORK/mount.log" 2>&1
expect "huge pages: the example mount unit, enabled and started" "the exit status" "$?" 0
opts=$(ct findmnt -n -o FSTYPE,OPTIONS /run/divvy 2>&1)
if [[ "$opts" == tmpfs\ * && "$opts" == *huge=within_size* ]]; then
    pass "huge pages: /run/divvy is a huge=within_size tmpfs"
else
    fail "huge pages: /run/divvy is a huge=within_size tmpfs" "findmnt says '$opts'"
fi
expect "huge pages: tmpfiles.d set the mount's owner" "owner, group, mode" \
    "$(ct stat -c '%U:%G %a' /run/divvy)" "divvy:divvy-fast 2755"
expect "huge pages: divvyd serves from the new /run/divvy (counts start afresh)" "credit left" \
    "$(credit slow)" 100

# ---- issue 11 items 1 and 5: a divvy-fast member resizes the fast table ---------

# survived NAME PID CREDIT: divvyd is still PID, never restarted, and the
# fast_path rule has CREDIT left.
survived() {
    expect "$1" "MainPID/NRestarts/credit left" \
        "$(main_pid)/$(prop NRestarts divvyd.service)/$(credit fast)" "$2/0/$3"
}
ct systemctl start divvyd.socket divvyd.service > /dev/null 2>&1
ct systemctl reset-failed divvyd.service

# Through the descriptors libdivvy maps (tests/systemd/fast_attack.c).
ct divvyctl take 1 t=fast > /dev/null 2>&1
pid=$(main_pid)
c0=$(credit fast)
if [ -x "$ROOT/usr/local/bin/divvy-fast-attack" ]; then
    out=$(fast_client 64010 /usr/local/bin/divvy-fast-attack t=fast 2>&1)
    rc=$?
    out=$(echo "$out" | tr '\n' ';')
    case $rc in
    0) pass "divvy-fast member cannot resize the table libdivvy maps ($out)" ;;
    1) fail "divvy-fast member cannot resize the table libdivvy maps" "$out" ;;
    *) fail "divvy-fast member cannot resize the table libdivvy maps" "no fast path: $out" ;;
    esac
else
    fail "divvy-fast member cannot resize the table libdivvy maps" \
        "$B/tests/systemd/fast_attack not built"
fi
ct divvyctl take 2 t=fast > /dev/null 2>&1
survived "divvyd survives the resize attempts on its mapped table" "$pid" "$((${c0:-0} - 3))"

# By path.
ct systemctl reset-failed divvyd.service
ct divvyctl take 1 t=fast > /dev/null 2>&1
pid=$(main_pid)
c0=$(credit fast)
refused "divvy-fast member cannot truncate /run/divvy/fast.table" \
    as 64010 "$G_FAST" truncate -s 0 /run/divvy/fast.table
ct divvyctl take 2 t=fast > /dev/null 2>&1
survived "divvyd survives the truncate attempt by path" "$pid" "$((${c0:-0} - 2))"

# ---- the decision log inside the unit's sandbox (docs/decision-log.md) ------------

# One setting turns it on (redact, to make divvyd create its hash key too);
# the unit's StateDirectory= makes its directory writable under
# ProtectSystem=strict.  A fast-path client's decision is reported and
# recorded with the client's uid; only root and group divvy read.
cp "$WORK/good.conf" "$CONF"
echo 'decision_log = { enabled = true; redact = { user = "hash"; }; };' >> "$CONF"
ct systemctl restart divvyd.service > "$WORK/restart-dlog.log" 2>&1
expect "decision log: divvyd restarts with decision_log.enabled" "ActiveState" \
    "$(prop ActiveState divvyd.service)" active
ct divvyctl hit t=slow > /dev/null 2>&1
fast_hit "decision log"
dlog_has() {
    local out
    out=$(ct divvyctl log --json /var/lib/divvy/decisions 2>/dev/null)
    [[ "$out" == *'"protocol":"fast"'*'"uid":64011'* || "$out" == *'"uid":64011'*'"protocol":"fast"'* ]] &&
        [[ "$out" == *'"rule":"slow"'* ]]
}
if wait_for 15 dlog_has; then
    pass "decision log: a socket hit and a fast-path client's report are recorded"
else
    fail "decision log: a socket hit and a fast-path client's report are recorded" \
        "divvyctl log: $(ct divvyctl log /var/lib/divvy/decisions 2>&1 | tail -n 5 | tr '\n' ';')"
fi
expect "decision log: its directory" "owner, group, mode" \
    "$(ct stat -c '%U:%G %a' /var/lib/divvy/decisions 2>&1)" "divvy:divvy 750"
expect "decision log: its files" "owner, group, mode" \
    "$(ct sh -c 'stat -c "%U:%G %a" /var/lib/divvy/decisions/*.dlog | sort -u' 2>&1)" \
    "divvy:divvy 640"
expect "decision log: its hash key, beside the directory" "owner, group, mode" \
    "$(ct stat -c '%U:%G %a' /var/lib/divvy/decisions.key 2>&1)" "divvy:divvy 600"
refused "a divvy-fast member cannot read the decision log" \
    as 64010 "$G_FAST" sh -c 'cat /var/lib/divvy/decisions/*.dlog > /dev/null'
cp "$WORK/good.conf" "$CONF"
ct systemctl restart divvyd.service > "$WORK/restart-dlog-off.log" 2>&1
expect "decision log: off again after a restart without it" "ActiveState" \
    "$(prop ActiveState divvyd.service)" active

# ---- reboot: what is enabled comes up by itself -------------------------------

ct systemctl reboot > /dev/null 2>&1
if wait_for 60 eval '! kill -0 "$NSPAWN" 2>/dev/null'; then
    wait "$NSPAWN"
    rc=$?
    NSPAWN=""
    expect "reboot: systemd-nspawn reports a reboot" "its exit status" "$rc" 133
else
    die "the container did not go down for reboot in 60 s" "$LOG"
fi
boot "reboot"
expect "reboot: divvyd.socket listening at boot (enabled)" "its ActiveState/SubState" \
    "$(prop ActiveState divvyd.socket)/$(prop SubState divvyd.socket)" "active/listening"
opts=$(ct findmnt -n -o FSTYPE,OPTIONS /run/divvy 2>&1)
if [[ "$opts" == tmpfs\ * && "$opts" == *huge=within_size* ]]; then
    pass "reboot: run-divvy.mount (enabled) mounted at boot"
else
    fail "reboot: run-divvy.mount (enabled) mounted at boot" "findmnt says '$opts'"
fi
expect "reboot: tmpfiles.d set /run/divvy on the mount at boot" "owner, group, mode" \
    "$(ct stat -c '%U:%G %a' /run/divvy)" "divvy:divvy-fast 2755"
out=$(ct divvyctl peek t=slow 2>&1)
case "$out" in
allowed\ credit=*) pass "reboot: a first request starts divvyd and is answered ($out)" ;;
*) fail "reboot: a first request starts divvyd and is answered" "divvyctl peek said '$out'" ;;
esac

# ---- the end ---------------------------------------------------------------------

if [ "$nfail" -gt 0 ]; then
    echo "-- journal of divvyd (last 60 lines):"
    ct journalctl -u divvyd.service -u divvyd.socket -o short-monotonic --no-pager 2>&1 |
        tail -n 60 | sed 's/^/    | /'
fi
kill -s RTMIN+4 "$LEADER"
if wait_for 30 eval '! kill -0 "$NSPAWN" 2>/dev/null'; then
    wait "$NSPAWN"
    expect "poweroff: the container shuts down cleanly" "systemd-nspawn's exit status" "$?" 0
    NSPAWN=""
else
    fail "poweroff: the container shuts down cleanly" "still running after 30 s"
fi

# ---- the Debian packages, in a fresh container (tests/systemd/check-deb.sh) -------

# shellcheck source=tests/systemd/check-deb.sh
. "$SRC/tests/systemd/check-deb.sh"

echo "-- check-systemd: $((SECONDS - T0)) s"
[ "$nfail" -gt 0 ] && echo "failed:$failed"
echo "$npass passed, $nfail failed"
[ "$nfail" -eq 0 ]
