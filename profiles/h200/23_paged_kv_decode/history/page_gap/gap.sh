#!/usr/bin/env bash
# One device call (carry [".probe/gap.tar.xz"], OUT set), about 6 minutes on an H200: where the rest of the gap
# between pages of 16 and the contiguous cache lies. Step 23 on a shuffled block table (base) and on an
# unshuffled one (inorder) interleaved by profiles/knob_ab.py on the shapes furthest below the contiguous speed
# (and one control at it); each shape once more through base's own --bench --csv, whose row carries step 22's
# time on the same cache held contiguous (prev_time_ms, same process); ncu of both arms and of step 22 at batch
# 64, one K/V head, 65536 keys. Everything into one file, $OUT/page_gap.tgz (the device returns few files).
set -uo pipefail
t0=$SECONDS
export PATH=$PATH:/usr/local/cuda/bin
P=/tmp/gap W=/tmp/gap_out
mkdir -p "$P" "$W" && tar xJf .probe/gap.tar.xz -C "$P"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$W"/gpu.txt
shapes=()
for shp in "64 1 65536 16" "64 1 65536 1" "64 1 16384 16" "64 1 1024 16" "8 1 131072 16" "1 1 131072 16" \
           "8 8 65536 16" "8 8 65536 1" "64 8 16384 16"; do
  read -r b kv sk pg <<< "$shp"
  shapes+=("--batch $b --heads 32 --kv-heads $kv --seq-q 1 --seq-k $sk --head-dim 128 --page-size $pg")
done
args=()
for s in "${shapes[@]}"; do args+=(--shape "$s"); done
python3 profiles/knob_ab.py --experiment "23 page order" --rounds 3 --out "$W"/order_ab.csv \
  --arm base="$P"/step23_base --arm inorder="$P"/step23_inorder "${args[@]}" > "$W"/ab_summary.txt 2>&1
tail -12 "$W"/ab_summary.txt
echo "timed at $((SECONDS-t0)) s"
for s in "${shapes[@]}"; do
  # shellcheck disable=SC2086  # the shape's flags, several words
  "$P"/step23_base --bench --reps 30 --csv $s 2>&1
done > "$W"/base_vs_22.csv
echo "rows with step 22 at $((SECONDS-t0)) s"
shape="--heads 32 --seq-q 1 --head-dim 128 --batch 64 --kv-heads 1 --seq-k 65536"
for v in step23_base step23_inorder step22; do
  flags="$shape"; [[ $v == step22 ]] || flags="$shape --page-size 16"
  # shellcheck disable=SC2086
  timeout 100 ncu --set full --kernel-name-base demangled -k regex:decode_split -c 1 -o "$W"/ncu_$v "$P"/$v --check $flags \
    > "$W"/ncu_$v.log 2>&1
  ncu --import "$W"/ncu_$v.ncu-rep --page details > "$W"/ncu_$v.txt 2>&1
  ncu --import "$W"/ncu_$v.ncu-rep --page raw --csv > "$W"/raw_$v.csv 2>/dev/null
  rm -f "$W"/ncu_$v.ncu-rep
  grep -E "Duration|DRAM Throughput|Executed Instructions  |Issue Slots Busy" "$W"/ncu_$v.txt | sed "s/^/$v /"
done
tar czf "$OUT"/page_gap.tgz -C "$W" .
echo "done at $((SECONDS-t0)) s"
