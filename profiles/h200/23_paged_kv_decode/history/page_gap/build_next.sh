#!/usr/bin/env bash
# On the CPU machine, from the repository root with a configured build/ (sm_90a): step 22 and step 23 as
# committed (base), step 23 with whole.diff (whole: a tile whose rows all lie before the end copied without a
# test per row) and whole's test binary, stripped, into .probe/next.tar.xz (untracked scratch) for next.sh.
set -euo pipefail
g=profiles/h200/23_paged_kv_decode/history/page_gap
k=steps/23_paged_kv_decode/kernel.cu
git diff --quiet -- "$k" || { echo "build_next.sh: $k has uncommitted changes" >&2; exit 1; }
rm -rf .probe/next && mkdir -p .probe/next
cmake --build build --target 22_split_kv_decode 23_paged_kv_decode > /dev/null
cp build/bin/23_paged_kv_decode .probe/next/step23_base
cp build/bin/22_split_kv_decode .probe/next/step22
git apply "$g/whole.diff"
trap 'git checkout -- "$k"; touch "$k"' EXIT  # the next build rebuilds the committed kernel
cmake --build build --target 23_paged_kv_decode test_23_paged_kv_decode > /dev/null
cp build/bin/23_paged_kv_decode .probe/next/step23_whole
cp build/tests/test_23_paged_kv_decode .probe/next/test23_whole
strip .probe/next/*
tar cJf .probe/next.tar.xz -C .probe/next .
ls -la .probe/next.tar.xz
