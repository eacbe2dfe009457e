#!/usr/bin/env bash
# profiles/probes.sh: builds of steps and tests with experimental diffs applied ("probes"), stripped, in one
# archive for a device call to carry (the device starts bare, returns few files, and a build there costs its
# time): .probe/NAME.tar.xz (.probe/ is untracked scratch; add it to .git/info/exclude).
#
#   bash profiles/probes.sh NAME ARM=TARGET[:DIFF] ...     # from anywhere, with build/ configured (sm_90a)
#
# ARM: the binary's name in the archive; TARGET: a CMake target, its binary build/bin/TARGET or build/tests/TARGET;
# DIFF: a patch (git apply) the arm is built with, reverted after it (arms in a row with the same DIFF share one
# application). E.g. the committed step and a variant of it, with the variant's tests:
#   bash profiles/probes.sh next base=23_paged_kv_decode whole=23_paged_kv_decode:whole.diff \
#     test_whole=test_23_paged_kv_decode:whole.diff
# The device call then unpacks it: mkdir -p /tmp/p && tar xJf .probe/next.tar.xz -C /tmp/p
set -euo pipefail
usage() { sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
(($# >= 2)) || { usage >&2; echo "probes.sh: a NAME and at least one ARM=TARGET[:DIFF]" >&2; exit 2; }
name=$1; shift
[[ $name =~ ^[A-Za-z0-9_-]+$ ]] || { echo "probes.sh: NAME '$name': letters, digits, _ and - only" >&2; exit 2; }
specs=()
for spec in "$@"; do  # every diff as an absolute path before leaving the caller's directory
  [[ $spec =~ ^[A-Za-z0-9_.-]+=[A-Za-z0-9_.-]+(:.+)?$ ]] || { echo "probes.sh: '$spec' is not ARM=TARGET[:DIFF]" >&2; exit 2; }
  if [[ $spec == *:* ]]; then
    d=${spec#*:}
    [[ -f $d ]] || { echo "probes.sh: no diff $d" >&2; exit 2; }
    spec="${spec%%:*}:$(cd "$(dirname "$d")" && pwd)/$(basename "$d")"
  fi
  specs+=("$spec")
done
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ -f build/CMakeCache.txt ]] || { echo "probes.sh: no configured build/ (cmake --preset default first)" >&2; exit 1; }
dir=.probe/$name applied=""
revert() { [[ -z $applied ]] || git apply -R "$applied"; applied=""; }  # the next build rebuilds what it touched
trap revert EXIT
rm -rf "$dir" && mkdir -p "$dir"
for spec in "${specs[@]}"; do
  arm=${spec%%=*} rest=${spec#*=}
  target=${rest%%:*} diff=""
  [[ $rest == *:* ]] && diff=${rest#*:}
  if [[ $diff != "$applied" ]]; then
    revert
    [[ -z $diff ]] || { git apply "$diff" && applied=$diff; }
  fi
  cmake --build build --target "$target" > "$dir/.build.log" 2>&1 ||
    { tail -20 "$dir/.build.log" >&2; echo "probes.sh: building $target${diff:+ with $diff} failed" >&2; exit 1; }
  bin=build/bin/$target
  [[ -f $bin ]] || bin=build/tests/$target
  [[ -f $bin ]] || { echo "probes.sh: $target built no build/bin/$target nor build/tests/$target" >&2; exit 1; }
  cp "$bin" "$dir/$arm"
  echo "probes.sh: $arm = $target${diff:+ with $(basename "$diff")}"
done
revert
rm -f "$dir/.build.log"
strip "$dir"/*
tar cJf ".probe/$name.tar.xz" -C "$dir" .
ls -la ".probe/$name.tar.xz"
