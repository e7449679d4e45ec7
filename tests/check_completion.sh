#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The bash completion of divvyctl and divvyd (tools/bash-completion/), run
# by `make check-docs` (part of check-unit).  Usage:
# tests/check_completion.sh BUILD_DIR.  For each case a fresh
# `bash --norc --noprofile` sources the file, checks that it registered a
# completion function with `complete`, sets COMP_WORDS/COMP_CWORD as
# readline would for the command line and calls that function; COMPREPLY is
# compared with what a user should be offered.  Then the completion is held
# to the programs' own help: every command `divvyctl --help` lists, and
# every long option `divvyctl COMMAND --help` and `divvyd --help` name, must
# be offered.  `--rule` asks divvyd for rule ids: a stand-in divvyctl on
# PATH answers, and must be asked with the command line's --socket.
# Needs bash only (no bash-completion package).  Exits 1 listing every
# problem.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
b=${1:?usage: check_completion.sh BUILD_DIR}
b=$(cd "$b" && pwd)
comp=$top/tools/bash-completion
tmp=$(mktemp -d "${TMPDIR:-/tmp}/divvy-check-completion.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
bad=$tmp/bad
: >"$bad"
problem() { echo "check_completion: $*" >>"$bad"; }

# complete FILE WORD...: what bash offers for the last WORD (may be ''),
# sorted, one per line.  PATH starts with $tmp/bin (the stand-in divvyctl).
complete_words() {
    f=$1
    shift
    PATH="$tmp/bin:$PATH" bash --norc --noprofile -c '
        . "$1" || exit 1
        shift
        spec=$(complete -p "$1" 2>/dev/null) || { echo "no complete for $1" >&2; exit 1; }
        fn=${spec#*-F }
        fn=${fn%% *}
        COMP_WORDS=("$@")
        COMP_CWORD=$(($# - 1))
        COMP_LINE="$*"
        COMP_POINT=${#COMP_LINE}
        COMPREPLY=()
        "$fn" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
        [ ${#COMPREPLY[@]} -eq 0 ] || printf "%s\n" "${COMPREPLY[@]}" | sort' _ "$f" "$@"
}

# expect "WANT" FILE WORD...: the completions, space-separated, are WANT.
expect() {
    want=$1
    shift
    if ! got=$(complete_words "$@" 2>&1); then
        problem "'$*': $got"
        return
    fi
    got=$(printf '%s\n' "$got" | tr '\n' ' ' | sed 's/ $//')
    [ "$got" = "$want" ] ||
        problem "'$(echo "$*" | cut -d' ' -f2-)<TAB>' offers '$got', want '$want'"
}

# offers "NAME..." FILE WORD...: each NAME is among the completions.
offers() {
    names=$1
    shift
    got=$(complete_words "$@" 2>&1) || { problem "'$*': $got"; return; }
    for w in $names; do
        printf '%s\n' "$got" | grep -qxF -- "$w" ||
            problem "'$(echo "$*" | cut -d' ' -f2-)<TAB>' does not offer $w"
    done
}

ctl=$comp/divvyctl
d=$comp/divvyd

# A few completions as a user types them.
expect "locked log" "$ctl" divvyctl lo
expect "log" "$ctl" divvyctl log
expect "--locks" "$ctl" divvyctl log --lock
expect "denied" "$ctl" divvyctl log --verdict d
expect "" "$ctl" divvyctl log --since ''
expect "unlock" "$ctl" divvyctl unl
expect "--socket --source" "$ctl" divvyctl unlock --so
expect "root" "$ctl" divvyctl unlock --source 192.0.2.1 roo
expect "reload replay reset" "$ctl" divvyctl re
expect "--socket" "$ctl" divvyctl --so
expect "locked log" "$ctl" divvyctl -s /run/divvy/divvy.sock lo
expect "--socket --sort" "$ctl" divvyctl top --so
expect "credit used" "$ctl" divvyctl top --sort ''
expect "used" "$ctl" divvyctl top -S u
expect "--dry-run" "$ctl" divvyctl reload --d
expect "add list remove" "$ctl" divvyctl rules ''
expect "" "$ctl" divvyctl hit --timeout ''
mkdir -p "$tmp/files/sub"
: >"$tmp/files/a.conf"
: >"$tmp/files/a.ini"
expect "$tmp/files/a.conf $tmp/files/a.ini" "$ctl" divvyctl check "$tmp/files/a"
expect "$tmp/files/a.ini" "$ctl" divvyctl convert "$tmp/files/a.i"
expect "$tmp/files/a.conf" "$ctl" divvyctl rules add "$tmp/files/a.c"
expect "$tmp/files/a.conf $tmp/files/a.ini" "$ctl" divvyctl replay --config "$tmp/files/a"
expect "$tmp/files/sub" "$ctl" divvyctl replay -c "$tmp/files/a.conf" "$tmp/files/s"
expect "" "$ctl" divvyctl replay --since ''
expect "--since" "$ctl" divvyctl replay --si
expect "$tmp/files/a.conf" "$ctl" divvyctl log -c "$tmp/files/a.c"
expect "$tmp/files/sub" "$ctl" divvyctl log --since -1h "$tmp/files/s"

# --rule: ids from `divvyctl rules` of the daemon the line names.
mkdir -p "$tmp/bin"
cat >"$tmp/bin/divvyctl" <<EOF
#!/bin/sh
echo "\$*" >"$tmp/asked"
printf '%s\n' '#  ID                 LIMIT  PER' '0  login-root-source  3      15m' \\
    '1  login-source       30     15m' '2  c1b8045cf7de4bbe   1000   1m'
EOF
chmod +x "$tmp/bin/divvyctl"
expect "login-root-source login-source" "$ctl" divvyctl -s /x/divvy.sock locked --rule login
grep -q -- '-s /x/divvy.sock' "$tmp/asked" 2>/dev/null ||
    problem "--rule asked divvyd without the line's --socket: $(cat "$tmp/asked" 2>/dev/null)"
expect "c1b8045cf7de4bbe" "$ctl" divvyctl top -r c1

expect "--check" "$d" divvyd --ch
expect "--config" "$d" divvyd --co
expect "$tmp/files/sub" "$d" divvyd --state-dir "$tmp/files/s"
expect "$tmp/files/sub" "$d" divvyd -s "$tmp/files/"
expect "unix:" "$d" divvyd --listen u

# Held to the programs' help.
cmds=$("$b/divvyctl" --help | awk '/^Commands:/ { on = 1; next } on && /^$/ { exit }
                                  on && NF { print $1 }')
[ -n "$cmds" ] || problem "no commands in divvyctl --help"
offers "$cmds" "$ctl" divvyctl ''
long() { grep -o -- '--[a-z][a-z-]*' | sort -u; }
offers "$("$b/divvyctl" --help | awk '/^Options/ { on = 1; next } on && /^$/ { exit } on' | long)" \
    "$ctl" divvyctl --
# A command's options are its option lines (its prose may name another's).
for c in $cmds; do
    offers "$("$b/divvyctl" "$c" --help | grep -E '^[[:space:]]+-' | long)" "$ctl" divvyctl "$c" --
done
offers "$("$b/divvyd" --help | long)" "$d" divvyd --

if [ -s "$bad" ]; then
    cat "$bad" >&2
    exit 1
fi
echo "check_completion: divvyctl and divvyd complete their commands and options"
