#!/usr/bin/env bash
# The staged merge (staged_22.diff, staged_23.diff; README.md, "Next: the partials staged by cp.async"), prepared
# and not yet run.
#   bash staged.sh build     here, with build/ configured (sm_90a): steps 22 and 23 as committed (base22, base23),
#                            with the diffs (staged_22, staged_23) and their tests, stripped, into .probe/staged.tar.xz
#   bash staged.sh device    on the device (carry [".probe/staged.tar.xz"], OUT set), one call of about three
#                            minutes: both steps' tests with the diffs, then each step's base and staged interleaved
#                            by profiles/knob_ab.py, 3 rounds (step 22 on targets.txt, step 23 on paged_targets.txt)
#                            -> $OUT/staged.tgz (ab4_22.csv, ab4_23.csv, summaries, the tests' output, gpu.txt)
set -uo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case ${1:-} in
  build)
    bash "$g/../../../../probes.sh" staged base22=22_split_kv_decode staged_22=22_split_kv_decode:"$g/staged_22.diff" \
      test_staged_22=test_22_split_kv_decode:"$g/staged_22.diff" base23=23_paged_kv_decode \
      staged_23=23_paged_kv_decode:"$g/staged_23.diff" test_staged_23=test_23_paged_kv_decode:"$g/staged_23.diff"
    ;;
  device)
    t0=$SECONDS P=/tmp/staged W=/tmp/staged_run
    mkdir -p "$P" "$W" && tar xJf .probe/staged.tar.xz -C "$P"
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W"/gpu.txt
    for s in 22 23; do
      timeout 100 "$P/test_staged_$s" > "$W/gtest_staged_$s.txt" 2>&1
      echo "test_staged_$s rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W/gtest_staged_$s.txt" | tr '\n' ' ') at $((SECONDS - t0)) s"
    done
    for s in 22 23; do
      shapes=$g/targets.txt
      [[ $s == 23 ]] && shapes=$g/paged_targets.txt
      python3 profiles/knob_ab.py --experiment "$s merge staged" --rounds 3 --out "$W/ab4_$s.csv" --arm base="$P/base$s" \
        --arm staged="$P/staged_$s" --shapes "$shapes" > "$W/ab4_${s}_summary.txt" 2>&1
      tail -n 24 "$W/ab4_${s}_summary.txt"
    done
    echo "done at $((SECONDS - t0)) s"
    tar czf "$OUT/staged.tgz" -C "$W" .
    ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 2 ;;
esac
