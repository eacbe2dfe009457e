#!/usr/bin/env bash
# Device calls (carry [".probe/next.tar.xz"] from build_next.sh, OUT set); each leaves one file, $OUT/next_STAGE.tgz
# (the device returns few files).
#   bash next.sh time   (~6 min on an H200) where step 23's extra instructions go, and whether whole.diff pays:
#       ncu's per-instruction counts (SourceCounters) of step 23 (base, whole; shuffled pages of 16) and step 22
#       (the same cache, contiguous) at batch 64, one K/V head and at batch 8, 8 K/V heads, 65536 keys, with the
#       binaries' SASS (read here by `python3 sass_diff.py DIR`); then base and whole interleaved by
#       profiles/knob_ab.py on ../paged_targets.txt (the offsets-in-registers A/B's 12 shapes), 3 rounds.
#   bash next.sh test   (~5 min) whole's GPU tests and its memcheck and racecheck runs, before keeping it.
set -uo pipefail
t0=$SECONDS
export PATH=$PATH:/usr/local/cuda/bin
P=/tmp/next W=/tmp/next_$1
mkdir -p "$P" "$W" && tar xJf .probe/next.tar.xz -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W"/gpu.txt
case $1 in
  time)
    for v in step23_base step23_whole step22; do
      cuobjdump -sass "$P/$v" | grep -vE '^\s*/\*[0-9a-f]{4}\*/\s*$' > "$W/$v.sass.txt"
    done
    for b_kv in "64 1" "8 8"; do
      read -r b kv <<< "$b_kv"
      shape="--heads 32 --seq-q 1 --head-dim 128 --batch $b --kv-heads $kv --seq-k 65536"
      for v in step23_base step23_whole step22; do
        flags="$shape"; [[ $v == step22 ]] || flags="$shape --page-size 16"
        id=${v}_b${b}_kv${kv}
        # shellcheck disable=SC2086  # the shape's flags, several words
        timeout 120 ncu --section SourceCounters --section WarpStateStats --section LaunchStats --import-source no \
          -k regex:decode_split -c 1 -o "$W/$id" "$P/$v" --check $flags > "$W/$id.log" 2>&1
        ncu -i "$W/$id.ncu-rep" --page source --print-source sass --csv > "$W/$id.source.csv" 2>> "$W/$id.log"
        ncu -i "$W/$id.ncu-rep" --page details > "$W/$id.details.txt" 2>> "$W/$id.log"
        rm -f "$W/$id.ncu-rep"
        echo "$id: $(grep -cE '^"' "$W/$id.source.csv") source rows at $((SECONDS - t0)) s"
      done
    done
    python3 profiles/knob_ab.py --experiment "23 whole tiles" --rounds 3 --out "$W"/whole_ab.csv \
      --arm base="$P"/step23_base --arm whole="$P"/step23_whole \
      --shapes profiles/h200/23_paged_kv_decode/history/paged_targets.txt > "$W"/ab_summary.txt 2>&1
    tail -14 "$W"/ab_summary.txt
    ;;
  test)
    timeout 300 "$P"/test23_whole > "$W"/gtest23.txt 2>&1
    echo "gtest rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W"/gtest23.txt | tr '\n' ' ') at $((SECONDS - t0)) s"
    for tool in memcheck racecheck; do
      timeout 120 bash tests/sanitize.sh $tool attention "$P"/step23_whole > "$W"/san_$tool.txt 2>&1
      echo "$tool rc $?: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$W"/san_$tool.txt | sort | uniq -c | tr '\n' ' ')"
    done
    ;;
  *) echo "next.sh: say time or test" >&2; exit 2 ;;
esac
tar czf "$OUT/next_$1.tgz" -C "$W" .
echo "done at $((SECONDS - t0)) s"
