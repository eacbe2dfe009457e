#!/usr/bin/env bash
# step 10 rescale fix A/B: old (fused fmaf) vs new (subtract first), interleaved, same seed
for r in 1 2 3; do
  for shp in "--batch 4 --heads 16 --seq 4096 --head-dim 128" "--batch 4 --heads 16 --seq 4096 --head-dim 128 --causal" "--batch 4 --heads 32 --seq 4096 --head-dim 64" "--batch 16 --heads 16 --seq 1024 --head-dim 128"; do
    for v in old new; do
      b=build/bin/10_swizzle_pipeline_forward; [[ $v == old ]] && b=.probe/step10_old
      echo "# $r $v $shp"; $b --bench --csv --seed 7 --reps 50 $shp 2>&1 | grep -v '^$'
    done
  done
done
