#!/bin/sh
# SPDX-License-Identifier: MIT
# divvy's Debian build and test dependencies, in one place.  Prints one line
# naming what is missing when it cannot install it.  The modes: usage() below
# (tools/deps.sh --help).
set -u
mode=${1:-check}

usage() {
    cat <<'EOF'
Usage: tools/deps.sh [MODE]

divvy's Debian build and test dependencies, in one place (make deps,
make deps-build and every build call it).  MODE:
  check           exit 1 with one line naming the missing build dependencies
                  (the default; quiet and exit 0 when nothing is missing)
  install-build   install the missing build dependencies (root: apt-get)
  install         install the missing build and test dependencies (root)
  list            print every Debian package divvy builds and tests with
                  (nodejs and npm only when node or npm is missing: a Node.js
                  from elsewhere, such as NodeSource's, conflicts with them)
  -h, --help      print this help

Exit status: 0 nothing missing (or installed), 1 something is missing or
apt-get failed, 2 usage error.
EOF
}

[ $# -le 1 ] || mode="$*"
case $mode in
check | install-build | install | list) ;;
-h | --help | help)
    usage
    exit 0
    ;;
*)
    echo "deps.sh: unknown mode '$mode' (check, install-build, install or list)" >&2
    echo "Try 'tools/deps.sh --help'." >&2
    exit 2
    ;;
esac

# pkg-config module -> Debian package
build_pkgs="libconfig:libconfig-dev liburcu-memb:liburcu-dev libevent:libevent-dev
libevent_pthreads:libevent-dev jansson:libjansson-dev hiredis:libhiredis-dev
libsystemd:libsystemd-dev libmicrohttpd:libmicrohttpd-dev libnghttp2:libnghttp2-dev
libprotobuf-c:libprotobuf-c-dev openssl:libssl-dev"
# header (libpam has no .pc on Debian) -> Debian package
build_headers="security/pam_modules.h:libpam0g-dev"
# commands -> Debian package
build_cmds="pkg-config:pkg-config cc:gcc make:make protoc-c:protobuf-c-compiler chrpath:chrpath"
test_pkgs="cmocka:libcmocka-dev"
test_cmds="clang:clang redis-server:redis-server promtool:prometheus
systemd-analyze:systemd systemd-socket-activate:systemd man:man-db pamtester:pamtester
strace:strace git:git valgrind:valgrind gcovr:gcovr
systemd-nspawn:systemd-container mmdebstrap:mmdebstrap
dpkg-buildpackage:dpkg-dev dh:debhelper lintian:lintian redis-cli:redis-tools
ip:iproute2 openssl:openssl
sshd:openssh-server ssh:openssh-client sshpass:sshpass"
# Listed only when the command is missing: a machine may have Node.js from
# elsewhere (NodeSource's nodejs ships npm and conflicts with Debian's npm,
# so naming both would make apt-get refuse the whole list).
test_cmds_if_missing="node:nodejs npm:npm"
# files -> Debian package
ma=$(cc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
test_files="/usr/lib/$ma/libpam_wrapper.so:libpam-wrapper
/usr/share/build-essential/essential-packages-list:build-essential
/usr/lib/python3/dist-packages/redis/__init__.py:python3-redis
/usr/share/zoneinfo/Europe/Berlin:tzdata
/usr/share/zoneinfo/Asia/Kolkata:tzdata
/usr/lib/$ma/faketime/libfaketimeMT.so.1:faketime"

clang_rt() {
    ver=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p')
    [ -n "$ver" ] && echo "libclang-rt-$ver-dev"
}

if [ "$mode" = list ]; then
    {
        for e in $build_cmds $build_pkgs $build_headers $test_pkgs $test_cmds $test_files; do
            echo "${e#*:}"
        done
        for c in $test_cmds_if_missing; do
            command -v "${c%%:*}" >/dev/null 2>&1 || echo "${c#*:}"
        done
    } | sort -u | tr '\n' ' '
    clang_rt
    echo
    exit 0
fi

missing() {
    need=""
    add() { case " $need " in *" $1 "*) ;; *) need="$need $1" ;; esac; }
    for c in $build_cmds; do command -v "${c%%:*}" >/dev/null 2>&1 || add "${c#*:}"; done
    for m in $build_pkgs; do pkg-config --exists "${m%%:*}" 2>/dev/null || add "${m#*:}"; done
    for h in $build_headers; do [ -e "/usr/include/${h%%:*}" ] || add "${h#*:}"; done
    if [ "$mode" = install ]; then
        for m in $test_pkgs; do pkg-config --exists "${m%%:*}" 2>/dev/null || add "${m#*:}"; done
        for c in $test_cmds $test_cmds_if_missing; do
            command -v "${c%%:*}" >/dev/null 2>&1 || add "${c#*:}"
        done
        for f in $test_files; do [ -e "${f%%:*}" ] || add "${f#*:}"; done
        # clang's sanitizer and libFuzzer runtimes (known once clang is there)
        if command -v clang >/dev/null 2>&1 &&
            ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1; then
            add "$(clang_rt)"
        fi
    fi
    echo "$need"
}

need=$(missing)
[ -z "$need" ] && exit 0
if [ "$mode" != check ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing:$need" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null && apt-get install -y -q $need >/dev/null || {
        echo "deps: apt-get failed; install by hand: apt-get install$need" >&2
        exit 1
    }
    # Installing clang can reveal its runtime package: one more pass.
    need=$(missing)
    [ -z "$need" ] && exit 0
    apt-get install -y -q $need >/dev/null && exit 0
    echo "deps: apt-get failed; install by hand: apt-get install$need" >&2
    exit 1
fi
echo "divvy: missing dependencies; run as root: apt-get install$need" >&2
exit 1
