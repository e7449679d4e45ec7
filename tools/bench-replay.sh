#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tools/bench-replay.sh BUILD DIR SECONDS: the replay benchmark
# (docs/dev/benchmarks.md "Replay").  Writes SECONDS of synthetic decision
# log at 1,000 decisions/s into DIR with BUILD/dlog-gen, once (DIR/.complete
# marks a finished run; a different SECONDS writes it again), then times
# `divvyctl replay` of it against the config it was recorded with and prints
# decisions per second and the time a week (604.8 million decisions) takes at
# that rate.  DIR holds GBs for a week: `make bench-replay-clean` deletes it.
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
"$build/divvyctl" replay --json --top 3 --config "$dir/gen.conf" "$dir/log" >"$dir/report.json"
end=$(date +%s.%N)
python3 - "$dir/report.json" "$start" "$end" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
secs = float(sys.argv[3]) - float(sys.argv[2])
n = rep["decisions"]
rate = n / secs if secs > 0 else 0
print("decisions %d (replayed %d, late %d, errors %d) in %.2f s: %.0f decisions/s"
      % (n, rep["replayed"], rep["skipped"]["reported_late"], rep["skipped"]["errors"],
         secs, rate))
if rate:
    print("a week at 1,000/s (604,800,000 decisions) at this rate: %.1f s" % (604800000 / rate))
PY
echo "(the log stays in $dir for the next run; make bench-replay-clean deletes it)"
