#!/usr/bin/env bash
# The second stamps call (carry [".probe/stamps2.tar.xz"]: probes.sh stamps2 with base, u16 and staged, each
# built with its stamps2 diff; OUT set): the first five shapes of shapes.txt and batch 1 with 32 K/V heads at
# 4096 keys, one launch, FA_STAMPS=8 for every arm and 14 for base -> $OUT/stamps2.txt, gpu.txt.
set -uo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
P=/tmp/stamps2
mkdir -p "$P" && tar xJf .probe/stamps2.tar.xz -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
{ grep -v '^#' "$g/shapes.txt" | head -n 5; grep -v '^#' "$g/shapes.txt" | sed -n 7p; } | while read -r line; do
  read -ra flags <<< "$line"
  for run in base:8 base:14 u16:8 staged:8; do
    echo "== ${run%%:*} FA_STAMPS=${run#*:} $line"
    FA_STAMPS=${run#*:} timeout 60 "$P/${run%%:*}" --bench "${flags[@]}" 2>&1
  done
done > "$OUT/stamps2.txt" 2>&1
grep -c "^STAMPS grid" "$OUT/stamps2.txt"
