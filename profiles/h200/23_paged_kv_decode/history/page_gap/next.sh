#!/usr/bin/env bash
# Device calls (carry [".probe/next.tar.xz"] from build_next.sh, OUT set); each leaves one file under $OUT,
# next_time.tgz or next_test_ARM.tgz (the device returns few files).
#   bash next.sh time   (~8 min on an H200) where step 23's extra instructions go, and whether whole.diff or
#       pairs.diff pays: ncu's per-instruction counts (SourceCounters) of step 23 (base, whole, pairs; shuffled
#       pages of 16) and step 22 (the same cache, contiguous) at batch 64, one K/V head and at batch 8, 8 K/V
#       heads, 65536 keys, with the binaries' SASS (read here by `python3 sass_diff.py DIR`); then base, whole
#       and pairs interleaved by profiles/knob_ab.py on ../paged_targets.txt (12 shapes), 3 rounds.
#   bash next.sh test ARM   (~5 min; ARM whole or pairs) that arm's GPU tests, memcheck and racecheck, to keep it.
set -uo pipefail
(($#)) || { echo "next.sh: say time, or test whole|pairs" >&2; exit 2; }
t0=$SECONDS
export PATH=$PATH:/usr/local/cuda/bin
P=/tmp/next W=/tmp/next_$1${2:+_$2}
mkdir -p "$P" "$W" && tar xJf .probe/next.tar.xz -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W"/gpu.txt
case $1 in
  time)
    for v in step23_base step23_whole step23_pairs step22; do
      cuobjdump -sass "$P/$v" | grep -vE '^\s*/\*[0-9a-f]{4}\*/\s*$' > "$W/$v.sass.txt"
    done
    for b_kv in "64 1" "8 8"; do
      read -r b kv <<< "$b_kv"
      shape="--heads 32 --seq-q 1 --head-dim 128 --batch $b --kv-heads $kv --seq-k 65536"
      for v in step23_base step23_whole step23_pairs step22; do
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
    python3 profiles/knob_ab.py --experiment "23 whole tiles, offsets in pairs" --rounds 3 --out "$W"/next_ab.csv \
      --arm base="$P"/step23_base --arm whole="$P"/step23_whole --arm pairs="$P"/step23_pairs \
      --shapes profiles/h200/23_paged_kv_decode/history/paged_targets.txt > "$W"/ab_summary.txt 2>&1
    tail -14 "$W"/ab_summary.txt
    ;;
  test)
    [[ ${2:-} == whole || ${2:-} == pairs ]] || { echo "next.sh: test whole or test pairs" >&2; exit 2; }
    timeout 300 "$P"/test23_"$2" > "$W"/gtest23.txt 2>&1
    echo "gtest rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W"/gtest23.txt | tr '\n' ' ') at $((SECONDS - t0)) s"
    for tool in memcheck racecheck; do
      timeout 120 bash tests/sanitize.sh $tool attention "$P"/step23_"$2" > "$W"/san_$tool.txt 2>&1
      echo "$tool rc $?: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$W"/san_$tool.txt | sort | uniq -c | tr '\n' ' ')"
    done
    ;;
  *) echo "next.sh: say time, or test whole|pairs" >&2; exit 2 ;;
esac
tar czf "$OUT/next_$1${2:+_$2}.tgz" -C "$W" .
echo "done at $((SECONDS - t0)) s"
