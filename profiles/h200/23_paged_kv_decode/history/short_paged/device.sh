#!/usr/bin/env bash
# On the device, OUT set:
#   bash device.sh rowstats   carry [".probe/rowstats.tar.xz"] (the committed steps 22 and 23 before and after
#       rowstats: ../../../22_split_kv_decode/history/merge_unroll/arm.sh build DIR rowstats, DIR that history's
#       stamps/): both steps before and after it interleaved by profiles/knob_ab.py, 5 rounds, on shapes22.txt and
#       shapes23.txt, then step 23's own --bench (which times step 22 on the same cache held contiguous, in one
#       process) 5 times per shape -> $OUT/short_paged.tgz (ab_22.csv, ab_23.csv, bench.csv, summaries)
#   bash device.sh rows       carry [".probe/short2.tar.xz"] (README.md's probes.sh line: both steps as committed,
#       with real_*.diff and with spread_*.diff, and both arms' tests): the tests, then base, real and spread
#       interleaved, 3 rounds, on ab_shapes22.txt and ab_shapes23.txt -> $OUT/short2.tgz (ab2_22.csv, ab2_23.csv, ...)
set -uo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case ${1:-} in
  rowstats) archive=rowstats run=ab rounds=5 shapes=shapes arms=rowstats tested= ;;
  rows) archive=short2 run=ab2 rounds=3 shapes=ab_shapes arms="real spread" tested="real spread" ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 2 ;;
esac
P=/tmp/short_paged_$1 W=/tmp/short_paged_run_$1
mkdir -p "$P" "$W"
tar xJf ".probe/$archive.tar.xz" -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W/gpu.txt"
for a in $tested; do
  for s in 22 23; do
    timeout 120 "$P/test_${a}_$s" > "$W/gtest_${a}_$s.txt" 2>&1
    echo "test_${a}_$s rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W/gtest_${a}_$s.txt" | tr '\n' ' ') at $SECONDS s"
  done
done
for s in 22 23; do
  armv=(--arm base="$P/base$s")
  for a in $arms; do armv+=(--arm "$a=$P/${a}_$s"); done
  python3 profiles/knob_ab.py --experiment "$s short $1" --rounds "$rounds" --out "$W/${run}_$s.csv" "${armv[@]}" \
    --shapes "$g/$shapes$s.txt" > "$W/${run}_${s}_summary.txt" 2>&1
  tail -n 11 "$W/${run}_${s}_summary.txt"
done
if [[ $1 == rowstats ]]; then
  for round in 1 2 3 4 5; do
    grep -v '^#' "$g/shapes23.txt" | while read -r flags; do
      # shellcheck disable=SC2086  # one shape's flags, split on purpose
      "$P/rowstats_23" $flags --bench --csv | grep -v '^step,' | sed "s/^/$round,/"
    done
  done > "$W/bench.csv"
  tgz=short_paged
else
  tgz=short2
fi
tar czf "$OUT/$tgz.tgz" -C "$W" .
