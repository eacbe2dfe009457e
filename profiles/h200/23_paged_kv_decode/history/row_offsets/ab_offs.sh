#!/usr/bin/env bash
# clamp (the committed kernel, b15a234) against offs (row_offsets.diff: each row's offset inside its page computed with
# its entry, a tile ahead); same seed, interleaved; binaries from .probe/
shapes=("--batch 64 --kv-heads 1 --seq-k 131072 --page-size 16" "--batch 8 --kv-heads 8 --seq-k 131072 --page-size 16"
        "--batch 1 --kv-heads 1 --seq-k 131072 --page-size 16" "--batch 8 --kv-heads 1 --seq-k 16384 --page-size 16"
        "--batch 1 --kv-heads 8 --seq-k 65536 --page-size 1" "--batch 64 --kv-heads 1 --seq-k 1024 --page-size 16")
for r in 1 2; do
  for shp in "${shapes[@]}"; do
    for v in clamp offs; do
      echo "# $r $v $shp"
      timeout 60 .probe/step23_$v --bench --csv --seed 5 --reps 30 --heads 32 --seq-q 1 --head-dim 128 $shp 2>&1 | grep -v '^$' | grep -v "^device\|^peaks\|^seed\|^step,"
    done
  done
done > ab_offs.txt
