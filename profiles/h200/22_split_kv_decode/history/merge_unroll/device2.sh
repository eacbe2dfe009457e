#!/usr/bin/env bash
# The second device call (carry [".probe/merge.tar.xz", ".probe/merge2.tar.xz"]: build.sh's, then probes.sh's
# merge2 with u16x_22.diff and u16x_23.diff and their tests, as README.md says; OUT set): both steps' GPU tests
# with u16x, then base, u16 and u16x interleaved by profiles/knob_ab.py, 3 rounds, step 22 on targets.txt and
# step 23 on paged_targets.txt -> $OUT/merge2.tgz (ab2_22.csv, ab2_23.csv, summaries, the tests' output, gpu.txt).
set -uo pipefail
t0=$SECONDS
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
P=/tmp/merge W=/tmp/merge_run2
mkdir -p "$P" "$W" && tar xJf .probe/merge.tar.xz -C "$P" && tar xJf .probe/merge2.tar.xz -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W"/gpu.txt
for s in 22 23; do
  timeout 200 "$P/test_u16x_$s" > "$W/gtest_u16x_$s.txt" 2>&1
  echo "test_u16x_$s rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W/gtest_u16x_$s.txt" | tr '\n' ' ') at $((SECONDS - t0)) s"
done
for s in 22 23; do
  shapes=$g/targets.txt
  [[ $s == 23 ]] && shapes=$g/paged_targets.txt
  python3 profiles/knob_ab.py --experiment "$s merge_unroll 2" --rounds 3 --out "$W/ab2_$s.csv" --arm base="$P/base$s" \
    --arm u16="$P/u16_$s" --arm u16x="$P/u16x_$s" --shapes "$shapes" > "$W/ab2_${s}_summary.txt" 2>&1
  tail -n 26 "$W/ab2_${s}_summary.txt"
  echo "$s done at $((SECONDS - t0)) s"
done
tar czf "$OUT/merge2.tgz" -C "$W" .
