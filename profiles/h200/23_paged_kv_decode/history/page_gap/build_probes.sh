#!/usr/bin/env bash
# On the CPU machine, from the repository root with a configured build/ (sm_90a): step 23 as committed (base),
# step 23 with the harness's block table unshuffled (inorder: inorder.diff, each sequence's pages consecutive in
# the pool) and step 22 as committed, stripped, into .probe/gap.tar.xz (untracked scratch) for gap.sh to carry.
set -euo pipefail
g=profiles/h200/23_paged_kv_decode/history/page_gap
h=harness/attention_inputs.cpp
git diff --quiet -- "$h" || { echo "build_probes.sh: $h has uncommitted changes" >&2; exit 1; }
rm -rf .probe/gap && mkdir -p .probe/gap
cmake --build build --target 22_split_kv_decode 23_paged_kv_decode > /dev/null
cp build/bin/23_paged_kv_decode .probe/gap/step23_base
cp build/bin/22_split_kv_decode .probe/gap/step22
git apply "$g/inorder.diff"
trap 'git checkout -- "$h"; touch "$h"' EXIT  # the next build rebuilds the committed harness
cmake --build build --target 23_paged_kv_decode > /dev/null
cp build/bin/23_paged_kv_decode .probe/gap/step23_inorder
strip .probe/gap/*
tar cJf .probe/gap.tar.xz -C .probe/gap .
ls -la .probe/gap.tar.xz
