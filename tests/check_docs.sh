#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The installed documentation (`make install-doc`, part of `make install`),
# checked where a user meets it.  Usage: tests/check_docs.sh BUILD_DIR
# (run by `make check-docs`, part of check-unit).  Installs into a temporary
# DESTDIR with PREFIX=/usr, then checks that:
#   - every divvy_* function BUILD_DIR/libdivvy.so exports opens a page with
#     `man 3 NAME` (MANPATH the installed tree) whose NAME section names it;
#   - every installed page and link renders with `man --warnings` silent;
#   - every /usr/share/doc/divvy/... a page names is installed;
#   - README.md, LICENSE, NEWS and each docs/*.md are under the doc
#     directory, the bash completion files in the completions directory;
#   - `divvyd --help`, `divvyctl --help` and `divvyctl COMMAND --help` name
#     no docs/ path of the source tree, and each divvy page they name
#     ("divvyctl(8)") is installed;
#   - README.md, docs/*.md and the man pages cite no document that is not in
#     the tree (DESIGN, STYLE.md, a missing docs/*.md or docs/dev/*.md);
#   - the user guides (README.md, docs/*.md, the man pages' text) name no
#     source file (daemon/conn.c, common/eval.h, ...) and no test
#     (test_lane, test_fast_plant.c): how the code works, and which test
#     proves what, is in the developer documents, docs/dev/*.md;
#   - every source or test file README.md, docs/*.md or docs/dev/*.md names
#     (daemon/conn.c, tests/resp/node_client.js, ...) is in the tree;
#   - divvy.pc.in names no other project's URL, LICENSE is the MIT licence
#     that every SPDX header names;
#   - `make uninstall-doc` removes all of it.
# Exits 1 listing every problem.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
b=${1:?usage: check_docs.sh BUILD_DIR}
b=$(cd "$b" && pwd)
make=${MAKE:-make}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/divvy-check-docs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
man=$root/usr/share/man
doc=$root/usr/share/doc/divvy
bad=$tmp/bad
: >"$bad"
problem() { echo "check_docs: $*" >>"$bad"; }

if ! $make -s --no-print-directory -C "$top" install-doc DESTDIR="$root" PREFIX=/usr \
        >"$tmp/log" 2>&1; then
    cat "$tmp/log" >&2
    echo "check_docs: make install-doc failed" >&2
    exit 1
fi

export MANPATH="$man" MANWIDTH=80 LC_ALL=C.UTF-8
unset MANPAGER PAGER MANOPT 2>/dev/null || true

# Each exported function: a page, documented in its NAME section.
syms=$(nm -D --defined-only "$b/libdivvy.so" |
    awk '$3 ~ /^divvy_/ { sub(/@.*/, "", $3); print $3 }')
[ -n "$syms" ] || problem "no divvy_* symbol in $b/libdivvy.so"
for s in $syms; do
    if ! page=$(man -w 3 "$s" 2>/dev/null) || [ "${page#"$man"/}" = "$page" ]; then
        problem "$s: no page (man 3 $s) in the installed tree"
        continue
    fi
    sed -n '/^\.SH NAME/,/^\.SH /p' "$page" | grep -qw -- "$s" ||
        problem "$s: its page ${page#"$root"} does not name it under NAME"
done

# Every page and link renders, without a warning.
n=0
for p in "$man"/man*/*; do
    [ -e "$p" ] || continue
    n=$((n + 1))
    f=${p##*/}
    sec=${f##*.}
    name=${f%.*}
    if ! out=$(man --warnings -E UTF-8 "$sec" "$name" 2>&1 >/dev/null); then
        problem "man $sec $name failed: $out"
    elif [ -n "$out" ]; then
        printf '%s\n' "$out" | sed "s|^|check_docs: man $sec $name: |" >>"$bad"
    fi
    for d in $(grep -o '/usr/share/doc/divvy/[A-Za-z0-9_./-]*[A-Za-z0-9_]' "$p" | sort -u); do
        [ -e "$root$d" ] || problem "${p#"$root"} names $d, which is not installed"
    done
done
[ "$n" -ge 5 ] || problem "only $n man pages installed"

for f in README.md LICENSE NEWS; do
    [ -f "$doc/$f" ] || problem "$f is not installed in /usr/share/doc/divvy"
done
for f in "$top"/docs/*.md "$top"/docs/dev/*.md; do
    r=${f#"$top"/}
    [ -f "$doc/$r" ] || problem "$r is not installed in /usr/share/doc/divvy/docs"
done
for f in divvyctl divvyd; do
    [ -f "$root/usr/share/bash-completion/completions/$f" ] ||
        problem "no bash completion for $f in /usr/share/bash-completion/completions"
done

# Help texts point at what is installed.
helps=$("$b/divvyd" --help; "$b/divvyctl" --help)
for c in $("$b/divvyctl" --help | awk '/^Commands:/ { on = 1; next } on && /^$/ { exit }
                                       on && NF { print $1 }'); do
    helps="$helps
$("$b/divvyctl" "$c" --help)"
done
printf '%s\n' "$helps" | grep -n 'docs/' | sed 's|^|check_docs: --help names the source tree: |' \
    >>"$bad" || true
for r in $(printf '%s\n' "$helps" | grep -o '[a-z_.]*divvy[a-z_.]*([1-8])' | sort -u); do
    name=${r%(*}
    sec=${r#*(}
    sec=${sec%)}
    [ -e "$man/man$sec/$name.$sec" ] || problem "--help names $r, which is not installed"
done

# Documents cite what the tree has.
cd "$top"
grep -nw -e DESIGN -e 'STYLE\.md' README.md docs/*.md docs/dev/*.md docs/man/* |
    sed 's|^|check_docs: cites a document not in the tree: |' >>"$bad" || true
for f in $(grep -ohE 'docs/[a-z/-]*\.md' README.md docs/*.md docs/dev/*.md docs/man/* |
           sort -u); do
    [ -f "$f" ] || problem "$f is cited but not in the tree"
done

# The guides are for users: no source file, no test name (the man pages'
# comment lines, .\", are for their maintainers).  docs/dev/ holds the code.
guide_code='(^|[^A-Za-z0-9_./-])(daemon|common|server|libclient|pam|tools)/[a-z_0-9]+\.[ch]([^A-Za-z0-9_]|$)'
guide_test='(^|[^A-Za-z0-9_])test_[a-z_]+'
for f in README.md docs/*.md docs/man/*; do
    case $f in docs/man/*) text=$(grep -nv '^\.\\"' "$f" || true) ;;
                *) text=$(grep -n '' "$f") ;; esac
    printf '%s\n' "$text" | grep -E -e "$guide_code" -e "$guide_test" |
        sed "s|^|check_docs: $f names code or a test (move it to docs/dev/): |" >>"$bad" || true
done
# Every source or test file a document names is in the tree.
for p in $(grep -ohE "(^|[^A-Za-z0-9_./-])(daemon|common|server|libclient|pam|tools|tests|proto)/[A-Za-z0-9_./-]*[A-Za-z0-9_]\.(c|h|sh|js|map|proto)([^A-Za-z0-9_]|\$)" \
            README.md docs/*.md docs/dev/*.md | sed -E 's#^[^a-z]##; s#[^A-Za-z0-9_]$##' | sort -u); do
    [ -e "$p" ] || problem "$p is named in the documentation but not in the tree"
done
! grep -n 'github.com/button' libclient/divvy.pc.in >/dev/null ||
    problem "libclient/divvy.pc.in names Button's project as its URL"
if ! [ -f LICENSE ] || ! head -1 LICENSE | grep -qx 'MIT License'; then
    problem "LICENSE is not the MIT licence"
fi
others=$(grep -rhoIE --exclude-dir='build*' --exclude-dir=.git \
    'SPDX-License-Identifier: [A-Za-z0-9.+-]+' . |
    sort -u | grep -vx 'SPDX-License-Identifier: MIT' || true)
[ -z "$others" ] || problem "SPDX headers other than MIT: $others"

# uninstall-doc takes it all back.
if ! $make -s --no-print-directory -C "$top" uninstall-doc DESTDIR="$root" PREFIX=/usr \
        >"$tmp/log" 2>&1; then
    problem "make uninstall-doc failed: $(cat "$tmp/log")"
fi
left=$(find "$root" ! -type d)
[ -z "$left" ] || problem "left after make uninstall-doc: $left"

if [ -s "$bad" ]; then
    cat "$bad" >&2
    exit 1
fi
echo "check_docs: $(echo "$syms" | wc -l) functions with a page, $n pages render cleanly," \
    "docs, completion and licence installed"
