#!/usr/bin/env bash
# The second device call (carry [".probe/merge.tar.xz", ".probe/merge2.tar.xz"]: build.sh's, then probes.sh's
# merge2 with u16x_22.diff and u16x_23.diff and their tests, as README.md says; OUT set): both steps' GPU tests
# with u16x, then base, u16 and u16x interleaved by profiles/knob_ab.py, 3 rounds, step 22 on targets.txt and
# step 23 on paged_targets.txt -> $OUT/merge2.tgz (ab2_22.csv, ab2_23.csv, summaries, the tests' output, gpu.txt).
# The same for other arms (arm.sh device): ARCHIVES (under .probe/, each NAME.tar.xz), TESTED (the arm whose
# test_TESTED_22 and _23 run), ARMS (timed after base22 and base23), RUN (the files' ab<RUN>_ prefix), TGZ, NAME.
set -uo pipefail
t0=$SECONDS
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ARCHIVES=${ARCHIVES:-merge merge2} TESTED=${TESTED:-u16x} ARMS=${ARMS:-u16 u16x} RUN=${RUN:-2}
TGZ=${TGZ:-merge2} NAME=${NAME:-merge_unroll 2}
P=/tmp/merge W=/tmp/merge_run$RUN
mkdir -p "$P" "$W"
for a in $ARCHIVES; do tar xJf ".probe/$a.tar.xz" -C "$P"; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W"/gpu.txt
for s in 22 23; do
  timeout 200 "$P/test_${TESTED}_$s" > "$W/gtest_${TESTED}_$s.txt" 2>&1
  echo "test_${TESTED}_$s rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W/gtest_${TESTED}_$s.txt" | tr '\n' ' ') at $((SECONDS - t0)) s"
done
for s in 22 23; do
  shapes=$g/targets.txt
  [[ $s == 23 ]] && shapes=$g/paged_targets.txt
  arms=(--arm base="$P/base$s")
  for a in $ARMS; do arms+=(--arm "$a=$P/${a}_$s"); done
  python3 profiles/knob_ab.py --experiment "$s $NAME" --rounds 3 --out "$W/ab${RUN}_$s.csv" "${arms[@]}" \
    --shapes "$shapes" > "$W/ab${RUN}_${s}_summary.txt" 2>&1
  tail -n 26 "$W/ab${RUN}_${s}_summary.txt"
  echo "$s done at $((SECONDS - t0)) s"
done
tar czf "$OUT/$TGZ.tgz" -C "$W" .
