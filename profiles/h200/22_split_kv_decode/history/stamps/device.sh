#!/usr/bin/env bash
# The stamps probe's device call (carry [".probe/stamps.tar.xz"], OUT set; README.md): for every shape of
# shapes.txt, step 22 built with stamps_22.diff runs `--bench` with FA_STAMPS=8 (its eighth launch stamped, a
# launch after the warm-up), once as committed (one launch) and once with --variant two-launches (the split
# kernel alone) -> $OUT/stamps.txt (each run's bench table and its STAMPS lines) and gpu.txt.
set -uo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
P=/tmp/stamps
mkdir -p "$P" && tar xJf .probe/stamps.tar.xz -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
while read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  for variant in one-launch two-launches; do
    read -ra flags <<< "$line"
    echo "== $variant $line"
    FA_STAMPS=8 timeout 60 "$P/stamps_22" --bench --variant "$variant" "${flags[@]}" 2>&1
  done
done < "$g/shapes.txt" > "$OUT/stamps.txt" 2>&1
grep -c "^STAMPS grid" "$OUT/stamps.txt"
