#!/usr/bin/env bash
# step 23 table prefetch A/B: old (HEAD 63a12fb kernel) vs new (prefetch.global.L1 of the page table 4 tiles
# ahead), interleaved, same seed; the CLI's --bench (step 22 contiguous on the same cache timed beside it)
shapes=("--batch 64 --kv-heads 1 --seq-k 65536 --page-size 16"
        "--batch 8 --kv-heads 1 --seq-k 131072 --page-size 16"
        "--batch 1 --kv-heads 1 --seq-k 131072 --page-size 16"
        "--batch 8 --kv-heads 8 --seq-k 16384 --page-size 16"
        "--batch 1 --kv-heads 32 --seq-k 16384 --page-size 16"
        "--batch 64 --kv-heads 1 --seq-k 1024 --page-size 16"
        "--batch 8 --kv-heads 1 --seq-k 131072 --page-size 1"
        "--batch 1 --kv-heads 8 --seq-k 65536 --page-size 1")
for r in 1 2; do
  for shp in "${shapes[@]}"; do
    for v in old new; do
      echo "# $r $v $shp"
      timeout 60 .probe/step23_$v --bench --csv --seed 5 --reps 30 --heads 32 --seq-q 1 --head-dim 128 $shp 2>&1 | grep -v '^$' | grep -v "^device\|^peaks\|^seed"
    done
  done
done
