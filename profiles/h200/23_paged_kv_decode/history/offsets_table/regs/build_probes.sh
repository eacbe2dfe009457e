#!/usr/bin/env bash
# On the CPU machine, from the repository root with a configured build/ (sm_90a): step 23's executable for each
# arm (base: the tree as committed; table: ../offsets_table.diff; regs: offsets_regs.diff) and the test binary of
# regs, stripped, into .probe/ab3.tar.xz (untracked scratch) for ab_regs.sh to carry to the device.
set -euo pipefail
h=profiles/h200/23_paged_kv_decode/history/offsets_table
k=steps/23_paged_kv_decode/kernel.cu
git diff --quiet -- "$k" || { echo "build_probes.sh: $k has uncommitted changes" >&2; exit 1; }
rm -rf .probe/ab3 && mkdir -p .probe/ab3
for arm in base table regs; do
  case $arm in table) git apply "$h/offsets_table.diff" ;; regs) git apply "$h/next/offsets_regs.diff" ;; esac
  cmake --build build --target 23_paged_kv_decode test_23_paged_kv_decode > /dev/null
  cp build/bin/23_paged_kv_decode ".probe/ab3/step23_$arm"
  [[ $arm == regs ]] && cp build/tests/test_23_paged_kv_decode .probe/ab3/test23_regs
  git checkout -- "$k"
done
touch "$k"  # the next build rebuilds the committed kernel
strip .probe/ab3/*
tar cJf .probe/ab3.tar.xz -C .probe/ab3 .
ls -la .probe/ab3.tar.xz
