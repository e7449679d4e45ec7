#!/bin/sh
# SPDX-License-Identifier: MIT
# Checks (and with "install", as root, installs) divvy's Debian build and test
# dependencies.  Prints one line naming what is missing when it cannot fix it.
#   tools/deps.sh check     exit 1 with one line if a build dependency is missing
#   tools/deps.sh install   install what is missing (root: apt-get), else as check
#   tools/deps.sh list      print every Debian package divvy builds and tests with
set -u
mode=${1:-check}

# pkg-config module -> Debian package
build_pkgs="libconfig:libconfig-dev liburcu-memb:liburcu-dev libevent:libevent-dev
libevent_pthreads:libevent-dev jansson:libjansson-dev hiredis:libhiredis-dev
libsystemd:libsystemd-dev libmicrohttpd:libmicrohttpd-dev"
test_pkgs="cmocka:libcmocka-dev"
# commands -> Debian package
build_cmds="pkg-config:pkg-config cc:gcc make:make"
test_cmds="clang:clang redis-server:redis-server promtool:prometheus
systemd-analyze:systemd systemd-socket-activate:systemd man:man-db"

if [ "$mode" = list ]; then
    ver=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p')
    for e in $build_cmds $build_pkgs $test_pkgs $test_cmds; do echo "${e#*:}"; done |
        sort -u | tr '\n' ' '
    [ -n "$ver" ] && printf 'libclang-rt-%s-dev' "$ver"
    echo
    exit 0
fi

need=""
add() { case " $need " in *" $1 "*) ;; *) need="$need $1" ;; esac; }

for c in $build_cmds; do command -v "${c%%:*}" >/dev/null 2>&1 || add "${c#*:}"; done
mods="$build_pkgs"
cmds=""
if [ "$mode" = install ] || [ "$mode" = check-test ]; then
    mods="$mods $test_pkgs"
    cmds="$test_cmds"
fi
for m in $mods; do
    pkg-config --exists "${m%%:*}" 2>/dev/null || add "${m#*:}"
done
for c in $cmds; do command -v "${c%%:*}" >/dev/null 2>&1 || add "${c#*:}"; done
# ASan/UBSan runtimes come with gcc; libclang-rt for clang's sanitizers.
if [ "$mode" != check ] && ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.asan-*.a >/dev/null 2>&1; then
    ver=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p')
    [ -n "$ver" ] && add "libclang-rt-$ver-dev"
fi

[ -z "$need" ] && exit 0
if [ "$mode" = install ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing:$need" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q $need >/dev/null && exit 0
    echo "deps: apt-get failed; install by hand: apt-get install$need" >&2
    exit 1
fi
echo "divvy: missing build dependencies; run as root: apt-get install$need" >&2
exit 1
