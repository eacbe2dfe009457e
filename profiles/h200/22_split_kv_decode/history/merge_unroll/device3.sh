#!/usr/bin/env bash
# The third device call (carry [".probe/merge.tar.xz", ".probe/merge2.tar.xz", ".probe/merge3.tar.xz"]; merge3:
# probes.sh with u16d_22.diff, step 22 and its tests; OUT set): step 22's GPU tests with u16d, then base, u16 and
# u16d interleaved by profiles/knob_ab.py, 3 rounds, on short_targets.txt -> $OUT/merge3.tgz.
set -uo pipefail
t0=$SECONDS
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
P=/tmp/merge W=/tmp/merge_run3
mkdir -p "$P" "$W" && for a in merge merge2 merge3; do tar xJf ".probe/$a.tar.xz" -C "$P"; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W"/gpu.txt
timeout 100 "$P/test_u16d_22" > "$W/gtest_u16d_22.txt" 2>&1
echo "test_u16d_22 rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W/gtest_u16d_22.txt" | tr '\n' ' ') at $((SECONDS - t0)) s"
python3 profiles/knob_ab.py --experiment "22 merge_unroll 3" --rounds 3 --out "$W/ab3_22.csv" --arm base="$P/base22" \
  --arm u16="$P/u16_22" --arm u16d="$P/u16d_22" --shapes "$g/short_targets.txt" > "$W/ab3_22_summary.txt" 2>&1
tail -n 12 "$W/ab3_22_summary.txt"
echo "done at $((SECONDS - t0)) s"
tar czf "$OUT/merge3.tgz" -C "$W" .
