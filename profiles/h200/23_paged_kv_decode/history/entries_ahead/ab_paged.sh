#!/usr/bin/env bash
# step 23 gather A/B: base (HEAD before), ahead (table entries a tile ahead), inorder (base kernel, an unshuffled
# block table: each sequence's pages consecutive in the pool), s4 (base kernel, kStages 4); same seed, interleaved
set -uo pipefail
t0=$SECONDS
shapes=("--batch 64 --kv-heads 1 --seq-k 131072 --page-size 16"
        "--batch 64 --kv-heads 1 --seq-k 16384 --page-size 16"
        "--batch 8 --kv-heads 1 --seq-k 131072 --page-size 16"
        "--batch 1 --kv-heads 1 --seq-k 131072 --page-size 16"
        "--batch 8 --kv-heads 8 --seq-k 16384 --page-size 16"
        "--batch 1 --kv-heads 32 --seq-k 16384 --page-size 16"
        "--batch 8 --kv-heads 8 --seq-k 131072 --page-size 16"
        "--batch 1 --kv-heads 8 --seq-k 131072 --page-size 16"
        "--batch 64 --kv-heads 1 --seq-k 1024 --page-size 16"
        "--batch 1 --kv-heads 8 --seq-k 65536 --page-size 1"
        "--batch 64 --kv-heads 1 --seq-k 16384 --page-size 1")
for r in 1 2; do
  for shp in "${shapes[@]}"; do
    for v in base ahead inorder s4; do
      echo "# $r $v $shp"
      timeout 60 .probe/step23_$v --bench --csv --seed 5 --reps 30 --heads 32 --seq-q 1 --head-dim 128 $shp 2>&1 | grep -v '^$' | grep -v "^device\|^peaks\|^seed\|^step,"
    done
  done
  echo "# round $r done at $((SECONDS-t0)) s"
done > ab_paged.txt
echo "ab done at $((SECONDS-t0)) s"
