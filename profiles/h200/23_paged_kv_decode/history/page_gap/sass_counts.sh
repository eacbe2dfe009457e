#!/usr/bin/env bash
# One device call (carry [".probe/gap.tar.xz"] from build_probes.sh, OUT set), about a minute: where step 23's
# extra instructions per tile go. ncu's per-instruction counts (SourceCounters: executed warp instructions and
# stall samples of every SASS instruction) of step 23 (base, shuffled pages of 16) and of step 22 on the same
# shape, held contiguous, at batch 64, one K/V head, 65536 keys and at batch 8, 8 K/V heads, 65536 keys, plus the
# binaries' SASS. Everything into $OUT/sass_counts.tgz; `python3 sass_diff.py DIR` here reads it.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
P=/tmp/gap W=/tmp/sass_out
mkdir -p "$P" "$W" && tar xJf .probe/gap.tar.xz -C "$P"
for v in step23_base step22; do cuobjdump -sass "$P/$v" | grep -vE '^\s*/\*[0-9a-f]{4}\*/\s*$' > "$W/$v.sass.txt"; done
for b_kv in "64 1" "8 8"; do
  read -r b kv <<< "$b_kv"
  shape="--heads 32 --seq-q 1 --head-dim 128 --batch $b --kv-heads $kv --seq-k 65536"
  for v in step23_base step22; do
    flags="$shape"; [[ $v == step22 ]] || flags="$shape --page-size 16"
    id=${v}_b${b}_kv${kv}
    # shellcheck disable=SC2086  # the shape's flags, several words
    timeout 120 ncu --section SourceCounters --section WarpStateStats --section LaunchStats --import-source no \
      -k regex:decode_split -c 1 -o "$W/$id" "$P/$v" --check $flags > "$W/$id.log" 2>&1
    ncu -i "$W/$id.ncu-rep" --page source --print-source sass --csv > "$W/$id.source.csv" 2>> "$W/$id.log"
    ncu -i "$W/$id.ncu-rep" --page details > "$W/$id.details.txt" 2>> "$W/$id.log"
    rm -f "$W/$id.ncu-rep"
    echo "$id: $(grep -cE '^"' "$W/$id.source.csv") source rows"
  done
done
tar czf "$OUT/sass_counts.tgz" -C "$W" .
ls -la "$OUT"
