#!/usr/bin/env bash
# One device call (carry [".probe/merge.tar.xz"] from build.sh, OUT set): both steps' GPU tests with the change,
# then each step's base and u16 interleaved by profiles/knob_ab.py, 3 rounds (step 22 on targets.txt, step 23 on
# paged_targets.txt) -> $OUT/merge.tgz: ab_22.csv, ab_23.csv (results.py's decode_variants_ab_table), their
# summaries, the tests' output, gpu.txt.
set -uo pipefail
t0=$SECONDS
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
P=/tmp/merge W=/tmp/merge_run
mkdir -p "$P" "$W" && tar xJf .probe/merge.tar.xz -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W"/gpu.txt
for s in 22 23; do
  timeout 200 "$P/test_u16_$s" > "$W/gtest_$s.txt" 2>&1
  echo "test_u16_$s rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W/gtest_$s.txt" | tr '\n' ' ') at $((SECONDS - t0)) s"
done
python3 profiles/knob_ab.py --experiment "22 merge_unroll" --rounds 3 --out "$W"/ab_22.csv \
  --arm base="$P"/base22 --arm u16="$P"/u16_22 --shapes "$g"/targets.txt > "$W"/ab_22_summary.txt 2>&1
tail -n 24 "$W"/ab_22_summary.txt
echo "22 done at $((SECONDS - t0)) s"
python3 profiles/knob_ab.py --experiment "23 merge_unroll" --rounds 3 --out "$W"/ab_23.csv \
  --arm base="$P"/base23 --arm u16="$P"/u16_23 --shapes "$g"/paged_targets.txt > "$W"/ab_23_summary.txt 2>&1
tail -n 8 "$W"/ab_23_summary.txt
tar czf "$OUT/merge.tgz" -C "$W" .
echo "done at $((SECONDS - t0)) s"
