#!/usr/bin/env bash
# One device call (run with carry [".probe/ab3.tar.xz"], OUT set): regs' GPU tests and sanitizers, then base,
# table and regs interleaved on the shapes of ../ab_table.sh, 2 rounds, and ncu's stall reasons of each at
# batch 64, one K/V head, 16384 keys, pages of 16. About 6 minutes on an H200.
set -uo pipefail
t0=$SECONDS
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/ab3 && tar xJf .probe/ab3.tar.xz -C /tmp/ab3 && P=/tmp/ab3
h=profiles/h200/23_paged_kv_decode/history
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
timeout 120 $P/test23_regs > $OUT/gtest23.txt 2>&1; echo "gtest rc $?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/gtest23.txt | tr '\n' ' ')"
for tool in memcheck racecheck synccheck; do
  timeout 150 bash tests/sanitize.sh $tool attention $P/step23_regs > $OUT/san_$tool.txt 2>&1
  echo "$tool rc $?: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.txt | sort | uniq -c | tr '\n' ' ') at $((SECONDS-t0)) s"
done
shapes=("--batch 64 --kv-heads 1 --seq-k 131072 --page-size 16" "--batch 64 --kv-heads 1 --seq-k 16384 --page-size 16"
        "--batch 64 --kv-heads 1 --seq-k 1024 --page-size 16" "--batch 8 --kv-heads 1 --seq-k 131072 --page-size 16"
        "--batch 1 --kv-heads 1 --seq-k 131072 --page-size 16" "--batch 1 --kv-heads 1 --seq-k 65536 --page-size 16"
        "--batch 8 --kv-heads 8 --seq-k 131072 --page-size 16" "--batch 1 --kv-heads 8 --seq-k 16384 --page-size 16"
        "--batch 1 --kv-heads 1 --seq-k 1024 --page-size 16" "--batch 1 --kv-heads 32 --seq-k 16384 --page-size 16"
        "--batch 8 --kv-heads 8 --seq-k 16384 --page-size 1" "--batch 64 --kv-heads 1 --seq-k 16384 --page-size 1")
for r in 1 2; do
  for shp in "${shapes[@]}"; do
    for v in base table regs; do
      echo "# $r $v $shp"
      timeout 60 $P/step23_$v --bench --csv --seed 5 --reps 30 --heads 32 --seq-q 1 --head-dim 128 $shp 2>&1 | grep -v '^$' | grep -v "^device\|^peaks\|^seed\|^step,"
    done
  done
  echo "round $r at $((SECONDS-t0)) s" >&2
done > $OUT/ab_regs.txt
python3 $h/entries_ahead/ab_summary.py $OUT/ab_regs.txt $OUT/regs_ab.csv "23 offsets in registers" | tee $OUT/ab_summary.txt
for v in base regs; do
  timeout 100 ncu --set full -k regex:decode_split -c 1 -o $OUT/ncu_$v $P/step23_$v --check --heads 32 --seq-q 1 \
    --head-dim 128 --batch 64 --kv-heads 1 --seq-k 16384 --page-size 16 > $OUT/ncu_$v.log 2>&1
  ncu --import $OUT/ncu_$v.ncu-rep --page details > $OUT/ncu_$v.txt 2>&1
  ncu --import $OUT/ncu_$v.ncu-rep --page raw --csv > $OUT/raw_$v.csv 2>/dev/null
  grep -E "Duration|Executed Instructions  |Issue Slots Busy" $OUT/ncu_$v.txt | sed "s/^/$v /"
done
rm -f $OUT/*.ncu-rep
echo "done at $((SECONDS-t0)) s"
