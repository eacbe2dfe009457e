#!/usr/bin/env bash
# The third stamps call (carry [".probe/stamps3.tar.xz"]: probes.sh stamps3 with stamps_22 and stamps_23, steps 22
# and 23 as committed with stamps3_22.diff and stamps3_23.diff; OUT set): every shape of shapes.txt and
# shapes3.txt, step 22 (one launch, contiguous) and step 23 (one launch, pages of 16), FA_STAMPS=8
# -> $OUT/stamps3.txt (each run headed `== one-launch FLAGS` or `== paged16 FLAGS`), gpu.txt.
set -uo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
P=/tmp/stamps3
mkdir -p "$P" && tar xJf .probe/stamps3.tar.xz -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
grep -hv '^#' "$g/shapes.txt" "$g/shapes3.txt" | while read -r line; do
  read -ra flags <<< "$line"
  echo "== one-launch $line"
  FA_STAMPS=8 timeout 60 "$P/stamps_22" --bench "${flags[@]}" 2>&1
  echo "== paged16 $line --page-size 16"
  FA_STAMPS=8 timeout 60 "$P/stamps_23" --bench --page-size 16 "${flags[@]}" 2>&1
done > "$OUT/stamps3.txt" 2>&1
grep -c "^STAMPS grid" "$OUT/stamps3.txt"
