# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2034  # ROOT_LOCK and NSPAWN: read by check-systemd.sh
# check-deb.sh: the Debian packages under a real systemd; sourced by
# tests/systemd/check-systemd.sh after its own container has powered off, and
# using its helpers (ct, boot, pass/fail/expect, prop, credit, wait_for) and
# state (SRC, WORK, TARBALL, ROOT, LOG, ROOT_LOCK, NSPAWN, LEADER).
#
# Builds the packages from this tree with `make deb` (dpkg-buildpackage -b in
# a copy under $WORK, so the tree stays clean), then a second build of the
# same tree as version <version>+check1 (an upgrade).  Boots a fresh root
# from the same cached tarball: it holds every library the packages need,
# installed from Debian by mmdebstrap, so `apt-get install ./*.deb` resolves
# every dependency from the dpkg database without a network (the container
# has none).  Then: install (users, /run/divvy, divvyd.socket enabled and
# listening, divvyd.service not started until a request), a HIT through the
# socket, the pam-auth-update profiles (off until turned on, then in the
# right places, gone with the package), an edited conffile and counts kept
# across `dpkg -i` of the same version and an upgrade, `apt-get remove`
# stopping divvyd, and `apt-get purge` removing /run/divvy and /etc/divvy and
# nothing else (the file lists before install and after purge compared;
# the system users stay, as Debian keeps them).
# DIVVY_SYSTEMD_DEB=0 leaves this part out.

if [ "${DIVVY_SYSTEMD_DEB:-1}" = 0 ]; then
    note "Debian packages: skipped (DIVVY_SYSTEMD_DEB=0)"
    return 0
fi
TD=$SECONDS
DEB_PKGS="divvyd divvyctl libdivvy0 libdivvy-dev libpam-divvy divvy-bench"

# ---- build: this tree, then the same tree as an upgrade ------------------------

t=$SECONDS
tree_before=$(git -C "$SRC" status --porcelain 2>/dev/null)
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" \
    make -C "$SRC" --no-print-directory deb B="$WORK/debbuild" > "$WORK/deb-build.log" 2>&1 ||
    die "make deb failed" "$WORK/deb-build.log"
DEBSRC=$WORK/debbuild/deb/src
# lintian: clean at every level (debian/*.lintian-overrides say why for each
# override); its N: lines and the note about running as root aside.
if lintian -EvIL +pedantic --tag-display-limit 0 "$WORK"/debbuild/deb/*.changes \
    > "$WORK/lintian.log" 2>&1; then
    tags=$(grep -E '^[EWIPXO]: ' "$WORK/lintian.log" | tr '\n' ';')
else
    tags="lintian failed: $(tail -n 3 "$WORK/lintian.log" | tr '\n' ';')"
fi
expect "deb: lintian (pedantic, experimental, info) has nothing to say" "its tags" "$tags" ""
V1=$(cd "$DEBSRC" && dpkg-parsechangelog -S Version)
V2=$V1+check1
mkdir "$WORK/debs1" "$WORK/debs2" && mv "$WORK"/debbuild/deb/*.deb "$WORK/debs1/" &&
    rm -f "$WORK"/debs1/*-dbgsym_*.deb || die "cannot collect the packages"
# The upgrade: a changelog entry on top, the build done again without a clean.
{
    printf 'divvy (%s) unstable; urgency=medium\n\n  * check-deb.sh: an upgrade.\n\n' "$V2"
    printf ' -- check <check@localhost>  %s\n\n' "$(date -R)"
    cat "$DEBSRC/debian/changelog"
} > "$WORK/changelog" && mv "$WORK/changelog" "$DEBSRC/debian/changelog"
(cd "$DEBSRC" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL DEB_BUILD_OPTIONS=nocheck \
    dpkg-buildpackage -b -us -uc -nc) >> "$WORK/deb-build.log" 2>&1 ||
    die "dpkg-buildpackage of $V2 failed" "$WORK/deb-build.log"
mv "$WORK"/debbuild/deb/*.deb "$WORK/debs2/" && rm -f "$WORK"/debs2/*-dbgsym_*.deb ||
    die "cannot collect the $V2 packages"
n=$(find "$WORK/debs1" -name '*.deb' | wc -l)
expect "deb: make deb builds the six packages ($((SECONDS - t)) s: both versions, lintian)" \
    "the number of .debs" "$n" 6
if [ "$(git -C "$SRC" status --porcelain 2>/dev/null)" != "$tree_before" ]; then
    fail "deb: the tree stays clean" "git status: $(git -C "$SRC" status --short | head -5)"
else
    pass "deb: the tree stays clean"
fi

# ---- a fresh container ------------------------------------------------------------

rm -rf --one-file-system "$ROOT"
ROOT=$WORK/root-deb
mkdir "$ROOT" && tar -C "$ROOT" --numeric-owner -xpf "$TARBALL" || die "cannot unpack $TARBALL"
ROOT_LOCK=$(stat -c '%d:%i' "$ROOT")
cp -r "$WORK/debs1" "$WORK/debs2" "$ROOT/root/" || die "cannot copy the packages into the root"
boot "deb: boot"

# apt ARGS...: apt-get in the container, from /root, ARGS (our own words, no
# spaces inside one) expanded there by its shell; exit status in $?.
apt() {
    echo "== apt-get $*" >> "$WORK/apt.log"
    ct sh -c "cd /root && DEBIAN_FRONTEND=noninteractive apt-get -y -q $*" \
        < /dev/null >> "$WORK/apt.log" 2>&1
}
# What a purge must leave as it was: every path on the root's file systems but
# the volatile ones (and the packages copied in).
snapshot() {
    ct find / /run -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /tmp \
        -o -path /var/tmp -o -path /var/log -o -path /var/cache -o -path /var/lib/apt \
        -o -path /var/lib/dpkg -o -path /root/debs1 -o -path /root/debs2 -o -path /run/systemd \
        -o -path /run/user -o -path /run/log -o -path /var/lib/systemd/timers \
        -o -path /var/lib/systemd/catalog -o -path /run/agetty.reload \) -prune -o -print 2>/dev/null | sort -u
}
versions() {
    local p out=""
    for p in $DEB_PKGS; do out="$out $(ct dpkg-query -W -f='${Version}' "$p" 2>/dev/null)"; done
    echo "${out# }"
}
snapshot > "$WORK/files-before"

# ---- install ----------------------------------------------------------------------

apt install ./debs1/divvyd_*.deb ./debs1/divvyctl_*.deb ./debs1/libdivvy0_*.deb \
    ./debs1/libdivvy-dev_*.deb ./debs1/libpam-divvy_*.deb ./debs1/divvy-bench_*.deb
expect "deb install: apt-get install ./*.deb" "its exit status" "$?" 0
expect "deb install: every package at $V1" "their versions" "$(versions)" \
    "$V1 $V1 $V1 $V1 $V1 $V1"
expect "deb install: /etc/divvy/divvy.conf is a conffile" "divvyd's Conffiles" \
    "$(ct dpkg-query -W -f='${Conffiles}' divvyd | awk '{ print $1 }' | tr -d '\n')" \
    /etc/divvy/divvy.conf
ent=$(ct getent passwd divvy | cut -d: -f3)
groups=$(for g in divvy divvy-fast divvy-admin; do ct getent group "$g" >/dev/null && echo "$g"; done)
expect "deb install: sysusers made divvy and its groups" "user uid < 1000, groups" \
    "$([ -n "$ent" ] && [ "$ent" -lt 1000 ] && echo yes) $(echo $groups)" \
    "yes divvy divvy-fast divvy-admin"
expect "deb install: tmpfiles made /run/divvy" "owner, group, mode" \
    "$(ct stat -c '%U:%G %a' /run/divvy 2>&1)" "divvy:divvy-fast 2755"
expect "deb install: divvyd.socket enabled and listening, divvyd.service waits for a request" \
    "is-enabled and ActiveState of the socket, then of the service" \
    "$(ct systemctl is-enabled divvyd.socket)/$(prop ActiveState divvyd.socket) $(
        ct systemctl is-enabled divvyd.service)/$(prop ActiveState divvyd.service)" \
    "enabled/active disabled/inactive"
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || cc -print-multiarch)
expect "deb install: the multiarch layout" "libdivvy.so.0 in ldconfig, pam_divvy.so, divvy-bench" \
    "$(ct ldconfig -p | grep -cE "^[[:space:]]libdivvy\.so\.0 .*=> (/usr)?/lib/$ma/libdivvy\.so\.0$") $(
        ct test -f "/usr/lib/$ma/security/pam_divvy.so" && echo pam) $(
        ct test -x /usr/libexec/divvy/divvy-bench && echo bench) $(
        ct test -e /usr/bin/divvy-bench || echo not-in-PATH)" "1 pam bench not-in-PATH"

# ---- socket activation: a HIT ----------------------------------------------------

out=$(ct divvyctl hit method=GET path=/status 2>&1)
case "$out" in
allowed\ credit=999\ *) pass "deb: a first HIT is answered ($out)" ;;
*) fail "deb: a first HIT is answered" "divvyctl hit said '$out'" ;;
esac
wait_for 10 is_active divvyd.service
expect "deb: the HIT started divvyd.service" "ActiveState/SubState" \
    "$(prop ActiveState divvyd.service)/$(prop SubState divvyd.service)" "active/running"

# ---- pam-auth-update: off until turned on ---------------------------------------

if ct grep -q pam_divvy /etc/pam.d/common-auth /etc/pam.d/common-account; then
    fail "deb pam: the profiles are off by default" "pam_divvy is in /etc/pam.d/common-*"
else
    pass "deb pam: the profiles are off by default"
fi
ct env DEBIAN_FRONTEND=noninteractive pam-auth-update --enable divvy divvy-preauth \
    > "$WORK/pam.log" 2>&1
order=$(ct grep -oE 'pam_divvy.so (preauth|authfail)|pam_unix.so' /etc/pam.d/common-auth | tr '\n' ,)
expect "deb pam: turned on, preauth before pam_unix, authfail after" "common-auth's order" \
    "$order" "pam_divvy.so preauth,pam_unix.so,pam_divvy.so authfail,"
expect "deb pam: turned on, authsucc in the account stack" "lines in common-account" \
    "$(ct grep -c 'required.*pam_divvy.so authsucc' /etc/pam.d/common-account)" 1

# ---- an edited conffile; counts and config across reinstall and upgrade ------------

CONF=$ROOT/etc/divvy/divvy.conf
cat > "$CONF" <<'EOF'
# tests/systemd/check-deb.sh: edited by the admin.
rules = (
    { match = { t = "slow"; }; label = "slow"; credit_limit = 100; reset_seconds = 86400; },
    { match = { t = "fast"; }; label = "fast"; credit_limit = 100; reset_seconds = 86400;
      fast_path = true; },
    { default = true; credit_limit = 0; reset_seconds = 0; }
);
EOF
cp "$CONF" "$WORK/deb-edited.conf"
ct systemctl reload divvyd.service > "$WORK/deb-reload.log" 2>&1
expect "deb: reload with the edited config" "its exit status" "$?" 0
ct divvyctl take 10 t=slow > /dev/null 2>&1
ct divvyctl take 10 t=fast > /dev/null 2>&1
expect "deb: counts before reinstall" "credit left, plain/fast_path rule" \
    "$(credit slow)/$(credit fast)" 90/90

# kept NAME PID: divvyd was restarted (not PID), serves the edited config and
# kept its counts; the conffile is the admin's.
kept() {
    if cmp -s "$CONF" "$WORK/deb-edited.conf"; then
        pass "$1: the edited conffile is kept"
    else
        fail "$1: the edited conffile is kept" "/etc/divvy/divvy.conf changed"
    fi
    local p
    p=$(main_pid)
    if is_active divvyd.service && [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != "$2" ]; then
        pass "$1: the running divvyd was restarted"
    else
        fail "$1: the running divvyd was restarted" "$(unit_state) (was $2)"
    fi
    expect "$1: the socket stayed up" "divvyd.socket's ActiveState" \
        "$(prop ActiveState divvyd.socket)" active
    expect "$1: counts kept" "credit left, plain/fast_path rule" "$(credit slow)/$(credit fast)" \
        "$3"
}

pid=$(main_pid)
ct sh -c 'cd /root/debs1 && dpkg -i ./*.deb' < /dev/null > "$WORK/dpkg-i.log" 2>&1
expect "deb reinstall: dpkg -i of the same packages" "its exit status" "$?" 0
kept "deb reinstall" "$pid" 90/90
ct divvyctl take 5 t=slow > /dev/null 2>&1
ct divvyctl take 5 t=fast > /dev/null 2>&1

pid=$(main_pid)
apt install ./debs2/divvyd_*.deb ./debs2/divvyctl_*.deb ./debs2/libdivvy0_*.deb \
    ./debs2/libdivvy-dev_*.deb ./debs2/libpam-divvy_*.deb ./debs2/divvy-bench_*.deb
expect "deb upgrade: apt-get install ./*.deb of $V2" "its exit status" "$?" 0
expect "deb upgrade: every package at $V2" "their versions" "$(versions)" \
    "$V2 $V2 $V2 $V2 $V2 $V2"
kept "deb upgrade" "$pid" 85/85

# ---- remove -----------------------------------------------------------------------

apt remove divvyd libpam-divvy
expect "deb remove: apt-get remove divvyd libpam-divvy" "its exit status" "$?" 0
expect "deb remove: divvyd stopped" "ActiveState of divvyd.socket/divvyd.service" \
    "$(prop ActiveState divvyd.socket)/$(prop ActiveState divvyd.service)" "inactive/inactive"
if out=$(ct divvyctl peek t=slow 2>&1); then
    fail "deb remove: nothing answers on the socket" "divvyctl peek said '$out'"
else
    pass "deb remove: nothing answers on the socket"
fi
expect "deb remove: the conffile stays until purge" "divvyd's status, the config" \
    "$(ct dpkg-query -W -f='${Status}' divvyd) $(ct test -f /etc/divvy/divvy.conf && echo kept)" \
    "deinstall ok config-files kept"
if ct grep -q pam_divvy /etc/pam.d/common-auth /etc/pam.d/common-account; then
    fail "deb remove: pam_divvy out of /etc/pam.d/common-*" "still there"
else
    pass "deb remove: pam_divvy out of /etc/pam.d/common-*"
fi

# ---- purge ------------------------------------------------------------------------

# libpam-divvy has no conffiles: removed, it is gone from dpkg's database.
apt purge divvyd divvyctl libdivvy0 libdivvy-dev divvy-bench
expect "deb purge: apt-get purge divvyd and the rest" "its exit status" "$?" 0
left=""
for p in /run/divvy /var/lib/divvy /etc/divvy; do
    ct test -e "$p" && left="$left $p"
done
expect "deb purge: divvyd's state and config are gone" "/run/divvy, /var/lib/divvy, /etc/divvy" \
    "$left" ""
expect "deb purge: the system user and groups stay (Debian keeps them)" "getent" \
    "$(ct getent passwd divvy | cut -d: -f1) $(ct getent group divvy-admin | cut -d: -f1)" \
    "divvy divvy-admin"
snapshot > "$WORK/files-after"
# systemd-sysusers keeps a backup of each file it changed (passwd- ...).
changed=$(diff "$WORK/files-before" "$WORK/files-after" |
    grep -vE '^[<>] /etc/(passwd|group|shadow|gshadow)-$' | grep '^[<>]' | tr '\n' ' ')
expect "deb purge: nothing else is left or removed" "files added (>) or removed (<)" "$changed" ""

if [ "$nfail" -gt 0 ]; then
    echo "-- apt-get and dpkg (last 40 lines):"
    tail -n 40 "$WORK/apt.log" | sed 's/^/    | /'
    echo "-- journal of divvyd in the package container (last 40 lines):"
    ct journalctl -u divvyd.service -u divvyd.socket -o short-monotonic --no-pager 2>&1 |
        tail -n 40 | sed 's/^/    | /'
fi
kill -s RTMIN+4 "$LEADER"
if wait_for 30 eval '! kill -0 "$NSPAWN" 2>/dev/null'; then
    wait "$NSPAWN"
    expect "deb: the container shuts down cleanly" "systemd-nspawn's exit status" "$?" 0
    NSPAWN=""
else
    fail "deb: the container shuts down cleanly" "still running after 30 s"
fi
note "Debian packages: $((SECONDS - TD)) s"
