#!/usr/bin/env bash
# One device call (carry [".probe/l2.tar.xz"] from build.sh, OUT set; ~6 minutes on an H200): ahead4's GPU tests
# (test_22_split_kv_decode with ahead.diff), then base, ahead4 and ahead8 interleaved by profiles/knob_ab.py on
# targets.txt, 3 rounds, into $OUT/l2.tgz (ab.csv for results.py's decode_variants_ab_table, ab_summary.txt,
# gtest.txt, gpu.txt).
set -uo pipefail
t0=$SECONDS
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
P=/tmp/l2 W=/tmp/l2_out
mkdir -p "$P" "$W" && tar xJf .probe/l2.tar.xz -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W"/gpu.txt
timeout 240 "$P"/test_ahead4 > "$W"/gtest.txt 2>&1
echo "gtest rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W"/gtest.txt | tr '\n' ' ') at $((SECONDS - t0)) s"
python3 profiles/knob_ab.py --experiment "22 l2_ahead" --rounds 3 --out "$W"/ab.csv \
  --arm base="$P"/base --arm ahead4="$P"/ahead4 --arm ahead8="$P"/ahead8 \
  --shapes "$g"/targets.txt > "$W"/ab_summary.txt 2>&1
tail -18 "$W"/ab_summary.txt
tar czf "$OUT/l2.tgz" -C "$W" .
echo "done at $((SECONDS - t0)) s"
