#!/usr/bin/env bash
# Device calls (carry [".probe/l2.tar.xz"] from build.sh, OUT set), one per step, each within one call's limit:
#   bash device.sh 22   ahead4's GPU tests, then base22, ahead4 and ahead8 interleaved by profiles/knob_ab.py on
#                       targets.txt, 3 rounds -> $OUT/l2_22.tgz
#   bash device.sh 23   paged's GPU tests, then base23 and paged on ../../../23_paged_kv_decode/history/
#                       paged_targets.txt, 3 rounds -> $OUT/l2_23.tgz
# Each archive: ab.csv (for results.py's decode_variants_ab_table), ab_summary.txt, gtest.txt, gpu.txt.
set -uo pipefail
[[ ${1:-} == 22 || ${1:-} == 23 ]] || { echo "device.sh: say 22 or 23" >&2; exit 2; }
t0=$SECONDS
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
P=/tmp/l2 W=/tmp/l2_$1
mkdir -p "$P" "$W" && tar xJf .probe/l2.tar.xz -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W"/gpu.txt
if [[ $1 == 22 ]]; then
  test=test_ahead4 arms=(--arm base="$P"/base22 --arm ahead4="$P"/ahead4 --arm ahead8="$P"/ahead8) shapes=$g/targets.txt
else
  test=test_paged arms=(--arm base="$P"/base23 --arm paged="$P"/paged)
  shapes=$g/../../../23_paged_kv_decode/history/paged_targets.txt
fi
timeout 240 "$P/$test" > "$W"/gtest.txt 2>&1
echo "gtest rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W"/gtest.txt | tr '\n' ' ') at $((SECONDS - t0)) s"
python3 profiles/knob_ab.py --experiment "$1 l2_ahead" --rounds 3 --out "$W"/ab.csv "${arms[@]}" --shapes "$shapes" \
  > "$W"/ab_summary.txt 2>&1
tail -18 "$W"/ab_summary.txt
tar czf "$OUT/l2_$1.tgz" -C "$W" .
echo "done at $((SECONDS - t0)) s"
