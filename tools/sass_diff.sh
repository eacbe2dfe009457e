#!/usr/bin/env bash
# sass_diff.sh BUILD_A BUILD_B: compares the SASS of every step's kernels between two builds
# (e.g. before and after a refactor), kernel by kernel. Prints one line per step: "same" or
# "DIFFERS (N kernels)", and exits 1 if any step differs. Needs cuobjdump (CUDA toolkit).
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 BUILD_A BUILD_B" >&2; exit 2; }
command -v cuobjdump >/dev/null || { echo "sass_diff.sh: cuobjdump not found (put the CUDA toolkit's bin/ on PATH)" >&2; exit 2; }
dump() {  # the SASS of one static library, one function after another, addresses dropped
  cuobjdump -sass "$1" | sed -E 's#/\*[0-9a-f]{4,}\*/##; s/[[:space:]]+$//' | grep -v '^$' | grep -v 'Fatbin\|^ *arch\|code for\|host =\|compile_size\|member'
}
status=0
for a in "$1"/steps/*/lib*_kernels.a; do
  step=$(basename "$(dirname "$a")")
  b="$2/steps/$step/lib${step}_kernels.a"
  if [[ ! -f $b ]]; then echo "$step: missing in $2"; status=1; continue; fi
  if diff -q <(dump "$a") <(dump "$b") >/dev/null; then
    echo "$step: same"
  else
    n=$(diff <(dump "$a" | grep -E '^ *Function :') <(dump "$b" | grep -E '^ *Function :') | grep -c '^[<>]' || true)
    echo "$step: DIFFERS (kernel names changed: $n; run diff on the two cuobjdump -sass listings)"
    status=1
  fi
done
exit $status
