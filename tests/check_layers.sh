#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Two checks, run by `make check-unit`; each exits 1 listing every violation.
#
# 1. libclient's layering (docs/dev/client.md "The code"): one direction,
#   divvy (the API) -> memo -> fast -> report -> handoff -> conn -> wire -> err
# a module uses only the modules to its right (and common/), through their
# private headers; only the API layer (divvy.c, divvy_private.h) knows
# struct divvy.  Checks, with comments stripped, that every file in
# libclient/ belongs to a known module, that it includes no libclient
# header of a module to its left, and that it names no function or type of
# one.
#
# 2. No include circle among daemon/'s files (DESIGN §12, docs/dev/daemon.md
# "Source files"): a module is x.c with its header x.h, so an edge runs from
# module x to module y when x.c or x.h includes "y.h"; a header with no .c
# of its own (srv_int.h, rls_int.h, ...) is a module of its own, and its
# include of the public header of the module it belongs to (x_int.h of
# x.h) is no edge: the private half extends the public one.  A depth-first
# search reports each circle it closes, with the includes that make it.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
dir=$top/libclient

# Modules, bottom first, each with the identifiers only it (and modules to
# its left) may name: extended regular expressions, matched as words.
modules="client_err client_wire client_conn client_handoff client_report client_fast client_memo divvy"
names_client_err='client_err|client_err_[a-z_]+|CLIENT_ERR_[A-Z_]+'
names_client_wire='client_(addr|req|reply|wire)_[a-z_]+|client_line_len'
names_client_wire="$names_client_wire|CLIENT_ADDR_[A-Z_]+|CLIENT_UNIX_PATH_MAX"
names_client_conn='client_conn|client_conn_[a-z_]+|client_expect|CLIENT_EXPECT_[A-Z_]+'
names_client_conn="$names_client_conn|CLIENT_REPLY_MAX|CLIENT_COMMAND_LINES"
names_client_handoff='client_handoff_[a-z_]+'
names_client_report='client_report|client_report_[a-z_]+|CLIENT_REPORT_[A-Z_]+'
names_client_fast='client_fast|client_fast_[a-z_]+|client_rule'
names_client_fast="$names_client_fast|CLIENT_(STALE|REATTACH|REMAP|HOT|HINT|RULES)_[A-Z_]+"
names_client_memo='client_memo|client_memo_[a-z_]+'
# The API: struct divvy (not struct divvy_kv etc.) and the divvy_*() calls.
names_divvy='struct divvy[^_a-z]|divvy_[a-z_]+ *\(|CLIENT_(TIMEOUT|PREFETCH|RESULT)_[A-Z_]+'

# The module a file belongs to; "" when none.
module_of() {
    case $1 in
    divvy.c | divvy.h | divvy_private.h | divvy.map | divvy.pc.in) echo divvy ;;
    client_*.c | client_*.h)
        m=${1%.*}
        for k in $modules; do
            [ "$k" = "$m" ] && { echo "$m"; return; }
        done
        echo "" ;;
    *) echo "" ;;
    esac
}

rank_of() {
    i=0
    for k in $modules; do
        [ "$k" = "$1" ] && { echo $i; return; }
        i=$((i + 1))
    done
    echo -1
}

strip_comments() {
    perl -0777 -pe 's{/\*.*?\*/}{ my $c = $&; $c =~ tr/\n//cd; " $c" }gse;
                    s{"(\\.|[^"\\\n])*"}{""}g' "$1"
}

fail=0
for path in "$dir"/*.c "$dir"/*.h; do
    f=${path##*/}
    m=$(module_of "$f")
    if [ -z "$m" ]; then
        echo "check_layers: libclient/$f belongs to no module of: $modules" >&2
        fail=1
        continue
    fi
    r=$(rank_of "$m")
    # Includes: a libclient header of a module to the left is a violation;
    # divvy.h (the public types) is for everyone, divvy_private.h for the API.
    incs=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$path")
    for inc in $incs; do
        [ -f "$dir/$inc" ] || continue
        [ "$inc" = divvy.h ] && continue
        im=$(module_of "$inc")
        if [ -z "$im" ] || [ "$(rank_of "$im")" -gt "$r" ] ||
           { [ "$inc" = divvy_private.h ] && [ "$m" != divvy ]; }; then
            echo "check_layers: libclient/$f ($m) includes $inc (${im:-no module}):" \
                 "only modules to its right" >&2
            fail=1
        fi
    done
    # Names: anything of a module to the left.
    code=$(strip_comments "$path")
    seen=0
    for k in $modules; do
        if [ $seen -eq 1 ]; then
            eval "re=\$names_$k"
            hits=$(printf '%s\n' "$code" | grep -noE "(^|[^A-Za-z0-9_])($re)" |
                   sed 's/:[^A-Za-z0-9_]*/: /' | sort -u | head -5)
            if [ -n "$hits" ]; then
                printf '%s\n' "$hits" | sed "s|^|check_layers: libclient/$f ($m) names $k's |" >&2
                fail=1
            fi
        fi
        [ "$k" = "$m" ] && seen=1
    done
done
[ $fail -eq 0 ] || exit 1
echo "check_layers: libclient is layered $modules (bottom first)"

circles=$(perl -e '
    my $dir = shift;
    opendir(my $dh, $dir) or die "check_layers: $dir: $!\n";
    my @files = sort grep { /\.[ch]$/ } readdir($dh);
    closedir($dh);
    my %have = map { $_ => 1 } @files;
    my (%edge, %via);
    for my $f (@files) {
        (my $m = $f) =~ s/\.[ch]$//;
        $edge{$m} //= {};
        open(my $fh, "<", "$dir/$f") or die "check_layers: $f: $!\n";
        my $src = do { local $/; <$fh> };
        close($fh);
        $src =~ s{/\*.*?\*/}{}gs;
        while ($src =~ /^[ \t]*#[ \t]*include[ \t]*"([^"]+)"/mg) {
            my $inc = $1;
            next unless $have{$inc};
            (my $to = $inc) =~ s/\.h$//;
            next if $to eq $m;
            next if $f =~ /^(.+)_int\.h$/ && $to eq $1;
            $edge{$m}{$to} = 1;
            $via{"$m $to"} //= "$f includes $inc";
        }
    }
    my (%state, @stack, $n);
    my $visit;
    $visit = sub {
        my $m = shift;
        $state{$m} = 1;
        push @stack, $m;
        for my $to (sort keys %{$edge{$m}}) {
            if (($state{$to} // 0) == 1) {
                my $i = $#stack;
                $i-- while $stack[$i] ne $to;
                my @c = (@stack[$i .. $#stack], $to);
                print "check_layers: include circle in daemon/: ", join(" -> ", @c), "\n";
                print "    ", $via{"$c[$_] $c[$_ + 1]"}, "\n" for 0 .. $#c - 1;
                $n++;
            } elsif (!$state{$to}) {
                $visit->($to);
            }
        }
        pop @stack;
        $state{$m} = 2;
    };
    $visit->($_) for sort keys %edge;
' "$top/daemon")
if [ -n "$circles" ]; then
    printf '%s\n' "$circles" >&2
    exit 1
fi
echo "check_layers: no include circle among daemon/'s modules"
