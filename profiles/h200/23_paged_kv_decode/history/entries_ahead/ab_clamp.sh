#!/usr/bin/env bash
# the entries a tile ahead, two forms: branch (a row past seq skips the load: the probe ahead_probe.diff) against
# clamp (it loads entry 0: the committed kernel, build/bin); same seed, interleaved
shapes=("--batch 64 --kv-heads 1 --seq-k 131072 --page-size 16" "--batch 8 --kv-heads 8 --seq-k 16384 --page-size 16"
        "--batch 1 --kv-heads 8 --seq-k 65536 --page-size 1" "--batch 64 --kv-heads 1 --seq-k 1024 --page-size 16")
for r in 1 2; do
  for shp in "${shapes[@]}"; do
    for v in branch clamp; do
      exe=.probe/step23_ahead; [[ $v == clamp ]] && exe=build/bin/23_paged_kv_decode
      echo "# $r $v $shp"
      timeout 60 $exe --bench --csv --seed 5 --reps 30 --heads 32 --seq-q 1 --head-dim 128 $shp 2>&1 | grep -v '^$' | grep -v "^device\|^peaks\|^seed\|^step,"
    done
  done
done > ab_clamp.txt
