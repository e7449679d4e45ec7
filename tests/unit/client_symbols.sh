#!/bin/sh
# SPDX-License-Identifier: MIT
#
# client_symbols.sh DAEMON_ARCHIVE CLIENT_ARCHIVE SHARED_OBJECT...
#
# What clients load carries none of server/'s code (issues 12 and 20):
# libdivvy.so and pam_divvy.so (inside sshd) hold no rule
# validator or compiler, no table creation, sweep, move or snapshot, no
# config loader.  The forbidden names are every global symbol that
# DAEMON_ARCHIVE (libdivvyserver.a: every file in server/) defines, so
# the list follows the files; each SHARED_OBJECT's full
# symbol table (hidden and local symbols too, `nm`, and its dynamic one,
# `nm -D`) must define none of them.  So that a stripped library cannot
# pass unseen, each must also define some global symbol of CLIENT_ARCHIVE.
# Exit 0 when clean, 1 naming each offending symbol and file.
set -u
export LC_ALL=C

if [ $# -lt 3 ]; then
    echo "usage: $0 DAEMON_ARCHIVE CLIENT_ARCHIVE SHARED_OBJECT..." >&2
    exit 2
fi
daemon_a=$1
client_a=$2
shift 2
NM=${NM:-nm}
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

# Global functions and data an archive defines, one name a line, sorted.
# Names starting with "__" are the compiler's (sanitizer and coverage
# bookkeeping), never ours.
globals() {
    "$NM" -g --defined-only -P "$1" 2>/dev/null |
        awk 'NF >= 2 && $2 ~ /^[TDBR]$/ && $1 !~ /^__/ { print $1 }' | sort -u
}

globals "$daemon_a" > "$tmp/daemon" || exit 2
globals "$client_a" > "$tmp/client" || exit 2
if [ ! -s "$tmp/daemon" ] || [ ! -s "$tmp/client" ]; then
    echo "client_symbols: no global symbols read from $daemon_a or $client_a" >&2
    exit 2
fi

rc=0
for so in "$@"; do
    # Every defined name, local or global, without the compiler's clone
    # suffixes (table_sweep.part.0 is table_sweep's code).
    { "$NM" --defined-only -P "$so" 2>/dev/null; "$NM" -D --defined-only -P "$so" 2>/dev/null; } |
        awk 'NF >= 2 { n = $1; sub(/@.*/, "", n); sub(/\..*/, "", n); print n }' |
        sort -u > "$tmp/so"
    if ! comm -12 "$tmp/client" "$tmp/so" | grep -q .; then
        echo "client_symbols: $so: no symbol of $client_a in its symbol table (stripped?)" >&2
        rc=1
        continue
    fi
    comm -12 "$tmp/daemon" "$tmp/so" > "$tmp/bad"
    if [ -s "$tmp/bad" ]; then
        n=$(wc -l < "$tmp/bad")
        echo "client_symbols: $so carries $n daemon-only symbols of $daemon_a:" >&2
        sed 's/^/    /' "$tmp/bad" >&2
        rc=1
    else
        echo "client_symbols: $so: none of $(wc -l < "$tmp/daemon") daemon-only symbols"
    fi
done
exit $rc
