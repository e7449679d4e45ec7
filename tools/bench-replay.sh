#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tools/bench-replay.sh BUILD DIR SECONDS: the replay benchmark
# (docs/dev/benchmarks.md "Replay").  Writes SECONDS of synthetic decision
# log at 1,000 decisions/s into DIR with BUILD/dlog-gen, once (DIR/.complete
# marks a finished run; a different SECONDS writes it again), then times
# `divvyctl replay` of it against the config it was recorded with and prints
# decisions per second, of wall-clock and of CPU time (on a shared machine the
# second moves less), and the time a week (604.8 million decisions) takes at
# that rate.  CPU time needs /usr/bin/time (Debian's time); python3 prints.  DIR holds GBs for a week: `make bench-replay-clean` deletes it.
set -eu

build=$1
dir=$2
seconds=$3
rate=1000

if [ "$(cat "$dir/.complete" 2>/dev/null)" != "$seconds" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    echo "== writing $seconds s of decision log at $rate/s into $dir (once)"
    "$build/dlog-gen" -s "$seconds" -r "$rate" -c "$dir/gen.conf" "$dir/log"
    echo "$seconds" >"$dir/.complete"
fi
du -sh "$dir/log"
echo "== divvyctl replay --config $dir/gen.conf $dir/log"
start=$(date +%s.%N)
timer=""
echo "0,0" >"$dir/cpu"
[ -x /usr/bin/time ] && timer="/usr/bin/time -f %U,%S -o $dir/cpu"
$timer "$build/divvyctl" replay --json --top 3 --config "$dir/gen.conf" "$dir/log" \
    >"$dir/report.json"
end=$(date +%s.%N)
python3 - "$dir/report.json" "$start" "$end" "$dir/cpu" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
secs = float(sys.argv[3]) - float(sys.argv[2])
cpu = sum(float(x) for x in open(sys.argv[4]).read().split()[-1].split(','))
n = rep["decisions"]
print("decisions %d (replayed %d, late %d, errors %d, unreplayable %d)"
      % (n, rep["replayed"], rep["skipped"]["reported_late"], rep["skipped"]["errors"],
         rep["skipped"]["unreplayable"]))
for what, s in (("wall clock", secs), ("CPU (user + system)", cpu)):
    if s > 0:
        print("%-20s %8.1f s: %9.0f decisions/s; a week at 1,000/s (604,800,000) at this"
              " rate: %.0f s" % (what, s, n / s, 604800000 / (n / s)))
PY
echo "(the log stays in $dir for the next run; make bench-replay-clean deletes it)"
