#!/usr/bin/env bash
# ptxas's registers and spills for steps 22 and 23 with each of a probe folder's diffs, through profiles/ptxas.py
# (no GPU; the build-ptxas directory `python3 profiles/ptxas.py build` configures):
#   bash ptxas_arms.sh DIR ARM...   for each ARM: apply DIR/ARM_22.diff and DIR/ARM_23.diff, rebuild the two steps'
#                                   kernels with ptxas -v, write DIR/ptxas_ARM.csv; `base` (no diff): the committed steps
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)
dir=$(cd "$1" && pwd); shift
cd "$root"
[[ -f build-ptxas/build.ninja ]] || { echo "ptxas_arms.sh: no build-ptxas (python3 profiles/ptxas.py build first)" >&2; exit 1; }
applied=()
revert() { for d in "${applied[@]}"; do git apply -R "$d"; done; applied=(); }
trap revert EXIT
for arm in "$@"; do
  if [[ $arm != base ]]; then
    for s in 22 23; do git apply "$dir/${arm}_$s.diff" && applied+=("$dir/${arm}_$s.diff"); done
  fi
  ninja -C build-ptxas -t clean 22_split_kv_decode_kernels 23_paged_kv_decode_kernels > /dev/null
  ninja -C build-ptxas -v 22_split_kv_decode_kernels 23_paged_kv_decode_kernels > "/tmp/ptxas_$arm.log" 2>&1
  python3 profiles/ptxas.py parse "/tmp/ptxas_$arm.log" -o "$dir/ptxas_$arm.csv"
  revert
  echo "ptxas_arms.sh: $arm -> ${dir#"$root"/}/ptxas_$arm.csv"
done
