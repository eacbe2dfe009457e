#!/usr/bin/env bash
# Step 23 against step 22 on the shortest decode shapes (pages of 16 at 1024 keys), on the device (carry
# [".probe/rowstats.tar.xz"]: the committed steps before and after rowstats, ../../../22_split_kv_decode/history/
# stamps/; OUT set): each step before and after rowstats interleaved by profiles/knob_ab.py, 5 rounds, then step
# 23's own --bench (which times step 22 on the same cache held contiguous, interleaved in one process) 5 times
# per shape -> $OUT/short_paged.tgz (ab_22.csv, ab_23.csv, bench.csv, summaries).
set -uo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
P=/tmp/short_paged W=/tmp/short_paged_run
mkdir -p "$P" "$W"
tar xJf .probe/rowstats.tar.xz -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W/gpu.txt"
for s in 22 23; do
  python3 profiles/knob_ab.py --experiment "$s short rowstats" --rounds 5 --out "$W/ab_$s.csv" \
    --arm base="$P/base$s" --arm rowstats="$P/rowstats_$s" --shapes "$g/shapes$s.txt" > "$W/ab_${s}_summary.txt" 2>&1
  tail -n 8 "$W/ab_${s}_summary.txt"
done
for round in 1 2 3 4 5; do
  grep -v '^#' "$g/shapes23.txt" | while read -r flags; do
    # shellcheck disable=SC2086  # one shape's flags, split on purpose
    "$P/rowstats_23" $flags --bench --csv | grep -v '^step,' | sed "s/^/$round,/"
  done
done > "$W/bench.csv"
python3 - "$W/bench.csv" <<'PY'
import csv, statistics, sys
t = {}
for r in csv.reader(open(sys.argv[1])):  # round, then bench.csv's columns: step, idea, problem, time_ms, ... prev_time_ms
    if r[1] == "23_paged_kv_decode":
        t.setdefault(r[3], []).append((float(r[4]), float(r[11])))
for prob, v in t.items():
    s23, s22 = statistics.median(x for x, _ in v), statistics.median(y for _, y in v)
    print(f"{prob:46s} 22 {s22 * 1e3:6.2f} us  23 {s23 * 1e3:6.2f} us  x contiguous {s22 / s23:.3f} over {len(v)}")
PY
tar czf "$OUT/short_paged.tgz" -C "$W" .
