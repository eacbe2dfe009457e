#!/usr/bin/env bash
# The staged merge (staged_22.diff; README.md, "Next: the partials staged by cp.async"), prepared and not yet run.
#   bash staged.sh build     here, with build/ configured (sm_90a): step 22 as committed (base22), with the diff
#                            (staged_22) and its tests (test_staged_22), stripped, into .probe/staged.tar.xz
#   bash staged.sh device    on the device (carry [".probe/staged.tar.xz"], OUT set), one call of about two
#                            minutes: the tests with the diff, then base22 and staged_22 interleaved by
#                            profiles/knob_ab.py on targets.txt, 3 rounds -> $OUT/staged.tgz (ab4_22.csv, its
#                            summary, the tests' output, gpu.txt)
set -uo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case ${1:-} in
  build)
    bash "$g/../../../../probes.sh" staged base22=22_split_kv_decode staged_22=22_split_kv_decode:"$g/staged_22.diff" \
      test_staged_22=test_22_split_kv_decode:"$g/staged_22.diff"
    ;;
  device)
    t0=$SECONDS P=/tmp/staged W=/tmp/staged_run
    mkdir -p "$P" "$W" && tar xJf .probe/staged.tar.xz -C "$P"
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W"/gpu.txt
    timeout 100 "$P/test_staged_22" > "$W/gtest_staged_22.txt" 2>&1
    echo "test_staged_22 rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W/gtest_staged_22.txt" | tr '\n' ' ') at $((SECONDS - t0)) s"
    python3 profiles/knob_ab.py --experiment "22 merge staged" --rounds 3 --out "$W/ab4_22.csv" --arm base="$P/base22" \
      --arm staged="$P/staged_22" --shapes "$g/targets.txt" > "$W/ab4_22_summary.txt" 2>&1
    tail -n 24 "$W/ab4_22_summary.txt"
    echo "done at $((SECONDS - t0)) s"
    tar czf "$OUT/staged.tgz" -C "$W" .
    ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 2 ;;
esac
