#!/usr/bin/env bash
# The second call (carry [".probe/short2.tar.xz"]: profiles/probes.sh's build of both steps as committed, with
# real_*.diff (warp 0 finds 1/L and LSE of the real rows only) and with spread_*.diff (real rows only, the rows'
# (mf, h) pairs dealt out over the four warps), and both arms' tests; OUT set): the tests, then base, real and
# spread interleaved by profiles/knob_ab.py, 3 rounds, on the short shapes and two targeted ones (ab_shapes*.txt)
# -> $OUT/short2.tgz (ab2_22.csv, ab2_23.csv, summaries, the tests' output).
set -uo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
P=/tmp/short2 W=/tmp/short2_run
mkdir -p "$P" "$W"
tar xJf .probe/short2.tar.xz -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W/gpu.txt"
for a in real spread; do
  for s in 22 23; do
    timeout 120 "$P/test_${a}_$s" > "$W/gtest_${a}_$s.txt" 2>&1
    echo "test_${a}_$s rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W/gtest_${a}_$s.txt" | tr '\n' ' ') at $SECONDS s"
  done
done
for s in 22 23; do
  python3 profiles/knob_ab.py --experiment "$s short rows" --rounds 3 --out "$W/ab2_$s.csv" --arm base="$P/base$s" \
    --arm real="$P/real_$s" --arm spread="$P/spread_$s" --shapes "$g/ab_shapes$s.txt" > "$W/ab2_${s}_summary.txt" 2>&1
  tail -n 11 "$W/ab2_${s}_summary.txt"
done
tar czf "$OUT/short2.tgz" -C "$W" .
